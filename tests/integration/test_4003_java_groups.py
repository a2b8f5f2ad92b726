"""Java 4.3.1 consumers in a group (classic protocol), through io.skiff.clients.GroupConsume.

Three consumers share a 6-partition topic while a producer writes: m1 and m2 from the
start, m3 joins at a third of the records, m2 leaves at two thirds. Every record must
be consumed, and none twice: members commit what they processed after each poll and
in onPartitionsRevoked, so no rebalance hands a processed record to another member.
Then (skiffd only) a member commits part of a topic, skiffd is SIGKILLed and
restarted, and the group resumes exactly at the committed offsets.
"""

import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
import ktest  # noqa: E402

FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def gbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def parse(lines):
    recs, assigns = [], []
    for ln in lines:
        f = ln.split()
        if ln.startswith("REC "):
            recs.append((f[1], int(f[2]), int(f[3]), int(f[4])))
        elif ln.startswith("ASSIGN "):
            assigns.append((f[1], sorted(int(x) for x in f[2].split(",")) if len(f) > 2 else []))
    return recs, assigns


def test_three_members_join_and_leave_while_producing(gbroker, topic_name):
    bs, parts, n = gbroker.bootstrap, 6, 9000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    group = "g4003-churn-" + uuid.uuid4().hex[:6]
    rc, out, err = jtools.java("GroupConsume", ["-m", "churn", "-b", bs, "-t", topic_name, "-g", group,
                                                "-n", str(n), "-P", str(parts), "--rate", "1500",
                                                "--read-timeout", "100"], timeout=150)
    summary = [j for j in jtools.json_lines(out) if j.get("op") == "group-consume"]
    diag = "%s\n%s" % (summary, ktest.tail(err))
    assert rc == 0 and summary, diag
    s = summary[-1]
    assert s["produced"] == n and s["produce_errors"] == 0, diag
    recs, assigns = parse(out)
    by_key = {}
    for member, p, off, i in recs:
        by_key.setdefault(i, []).append((member, p, off))
    missing = sorted(set(range(n)) - set(by_key))
    twice = {i: v for i, v in by_key.items() if len(v) > 1}
    assert not missing, "%d records never consumed (first: %s)\n%s" % (len(missing), missing[:10], diag)
    assert not twice, "%d records consumed twice by the group, e.g. %s\n%s" % (
        len(twice), list(twice.items())[:5], diag)
    members = {m for m, _, _, _ in recs}
    assert members == {"m1", "m2", "m3"}, "members that consumed: %s\n%s" % (members, assigns)
    # Partitions stay in order per partition and contiguous across owners.
    for p in range(parts):
        offs = sorted(off for _, q, off, _ in recs if q == p)
        assert offs == list(range(len(offs))), "partition %d offsets have gaps" % p
    # The last assignments cover all partitions between m1 and m3.
    last = {}
    for m, ps in assigns:
        last[m] = ps
    assert sorted(last.get("m1", []) + last.get("m3", [])) == list(range(parts)), assigns
    # The group's committed offsets are the end offsets.
    top, offs = kg.fetch_offsets(c, group, None)
    ends = {p: kproto.list_offsets(c, topic_name, p, -1)["Offset"] for p in range(parts)}
    assert {p: offs[(topic_name, p)][0] for p in range(parts)} == ends
    d = kg.describe_groups(c, [group])["Groups"][0]
    assert d["GroupState"] == "Empty", d


@pytest.mark.restarts
def test_resume_from_committed_offsets_after_sigkill(broker_factory, topic_name):
    b = broker_factory(FAST)
    bs, parts, n = b.bootstrap, 4, 4000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    for p in range(parts):
        for k in range(0, n // parts, 250):
            recs = [kproto.Record(key=b"k-%d" % (p * 100000 + k + j), value=b"v") for j in range(250)]
            assert kproto.produce(c, topic_name, p, kproto.batch(records=recs))["ErrorCode"] == 0
    group = "g4003-restart-" + uuid.uuid4().hex[:6]
    args = ["-m", "consume", "-b", bs, "-t", topic_name, "-g", group, "--read-timeout", "60"]
    rc, out, err = jtools.java("GroupConsume", args + ["-n", "1500", "--prop", "max.poll.records=100"])
    assert rc == 0, ktest.tail(err)
    first, _ = parse(out)
    top, offs = kg.fetch_offsets(c, group, {topic_name: list(range(parts))})
    commit1 = {p: offs[(topic_name, p)][0] for p in range(parts)}
    # Everything read was committed, and only that.
    for p in range(parts):
        read = sorted(off for _, q, off, _ in first if q == p)
        want = read[-1] + 1 if read else -1
        assert commit1[p] == want, "partition %d: read up to %s, committed %d" % (p, want, commit1[p])
    c.close()

    b.kill()
    b.start()
    c = kg.connect(bs)
    top, offs = kg.fetch_offsets(c, group, {topic_name: list(range(parts))})
    assert {p: offs[(topic_name, p)][0] for p in range(parts)} == commit1, "offsets lost in SIGKILL"
    rc, out, err = jtools.java("GroupConsume", args + ["-n", str(n - len(first))])
    summary = jtools.json_lines(out)[-1]
    assert rc == 0, "%s\n%s" % (summary, ktest.tail(err))
    second, _ = parse(out)
    starts = {int(p): o for p, o in summary["first_offsets"].items()}
    for p in range(parts):
        want = commit1[p] if commit1[p] >= 0 else 0
        if want < n // parts:
            assert starts.get(p) == want, "partition %d resumed at %s, committed %d" % (
                p, starts.get(p), commit1[p])
    keys = [i for _, _, _, i in first + second]
    assert len(keys) == n and len(set(keys)) == n, "%d records read, %d distinct, %d written" % (
        len(keys), len(set(keys)), n)


def test_consumer_restart_reads_each_record_once_in_fetch_sessions(broker_factory, topic_name):
    """The Java consumer fetches in sessions (KIP-227): a full fetch, then incremental ones
    that add and forget partitions as its buffers fill and drain. With one batch per fetch
    (max.partition.fetch.bytes below a batch), every partition must still make progress,
    and a second consumer of the group resumes where the first committed."""
    ext = harness.external()
    b = harness.ExternalBroker(ext) if ext else broker_factory(
        dict(FAST, **{"metrics.listener": "127.0.0.1:%d" % harness.free_port()}))
    bs, parts, per_batch, batches = b.bootstrap, 4, 50, 10
    n = parts * per_batch * batches
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    i = 0
    for _ in range(batches):
        for p in range(parts):
            recs = [kproto.Record(key=b"k-%d" % (i + j), value=b"v" * 40) for j in range(per_batch)]
            assert kproto.produce(c, topic_name, p, kproto.batch(records=recs))["ErrorCode"] == 0
            i += per_batch
    group = "g4003-sessions-" + uuid.uuid4().hex[:6]
    args = ["-m", "consume", "-b", bs, "-t", topic_name, "-g", group, "--read-timeout", "60",
            "--prop", "max.partition.fetch.bytes=1024", "--prop", "max.poll.records=50"]
    rc, out, err = jtools.java("GroupConsume", args + ["-n", str(n // 2)])
    assert rc == 0, ktest.tail(err)
    first, _ = parse(out)
    assert len(first) < n, "the first consumer read all %d records: nothing left to resume" % n
    rc, out, err = jtools.java("GroupConsume", args + ["-n", str(n - len(first))])
    summary = jtools.json_lines(out)[-1]
    assert rc == 0, "%s\n%s" % (summary, ktest.tail(err))
    second, _ = parse(out)
    keys = [k for _, _, _, k in first + second]
    assert len(keys) == n and sorted(keys) == list(range(n)), \
        "%d records read, %d distinct, %d written" % (len(keys), len(set(keys)), n)
    for p in range(parts):
        offs = sorted(off for _, q, off, _ in first + second if q == p)
        assert offs == list(range(per_batch * batches)), "partition %d: gaps or repeats" % p
    c.close()
    if not ext:
        from s3env import metrics
        m = metrics(b)
        assert m["skiff_fetch_sessions_created_total"] >= 2, m
        assert m["skiff_fetch_session_evictions_total"] == 0, m
        # A closing consumer ends its sessions (epoch -1): none is left behind.
        assert m["skiff_fetch_sessions"] == 0, m
