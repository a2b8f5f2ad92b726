"""Java 4.3.1 consumers with group.protocol=consumer (KIP-848), through
io.skiff.clients.GroupConsume, and kafka-consumer-groups.sh describing such a group.

- Three members share a 6-partition topic while a producer writes (m3 joins at a
  third, m2 leaves at two thirds): every record is consumed once, none twice.
- (skiffd only) A member's process is SIGKILLed: after the session timeout its
  partitions go to the member left.
- (skiffd only) skiffd is SIGKILLed and restarted: the group resumes exactly at
  its committed offsets.
- kafka-consumer-groups --describe (offsets, members, state) of a consumer-protocol
  group, which AdminClient reads with ConsumerGroupDescribe.

The coordinator's heartbeat interval is 500 ms on skiffd (Kafka's minimum is 5 s,
so the churn test takes longer against Kafka).
"""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
import ktest  # noqa: E402
from test_4010_consumer_group_raw import Member, describe, settle  # noqa: E402

FAST = {"group.initial.rebalance.delay.ms": "0", "group.consumer.heartbeat.interval.ms": "500"}
CONSUMER = ["--prop", "group.protocol=consumer"]


@pytest.fixture
def cbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def parse(lines):
    recs = []
    for ln in lines:
        f = ln.split()
        if ln.startswith("REC "):
            recs.append((f[1], int(f[2]), int(f[3]), int(f[4])))
    return recs


def test_members_join_and_leave_while_producing(cbroker, topic_name):
    # Kafka's heartbeat interval is at least 5 s: give its members time to get partitions.
    bs, parts, n = cbroker.bootstrap, 6, 15000 if harness.external() else 6000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    group = "g4011-churn-" + uuid.uuid4().hex[:6]
    rc, out, err = jtools.java("GroupConsume", ["-m", "churn", "-b", bs, "-t", topic_name,
                                                "-g", group, "-n", str(n), "-P", str(parts),
                                                "--rate", "1000", "--read-timeout", "100"]
                               + CONSUMER, timeout=150)
    summary = [j for j in jtools.json_lines(out) if j.get("op") == "group-consume"]
    diag = "%s\n%s" % (summary, ktest.tail(err))
    assert rc == 0 and summary, diag
    s = summary[-1]
    assert s["produced"] == n and s["produce_errors"] == 0, diag
    recs = parse(out)
    by_key = {}
    for member, p, off, i in recs:
        by_key.setdefault(i, []).append((member, p, off))
    missing = sorted(set(range(n)) - set(by_key))
    twice = {i: v for i, v in by_key.items() if len(v) > 1}
    assert not missing, "%d records never consumed (first: %s)\n%s" % (
        len(missing), missing[:10], diag)
    assert not twice, "%d records consumed twice, e.g. %s\n%s" % (
        len(twice), list(twice.items())[:5], diag)
    assert {m for m, _, _, _ in recs} == {"m1", "m2", "m3"}, diag
    for p in range(parts):
        offs = sorted(off for _, q, off, _ in recs if q == p)
        assert offs == list(range(len(offs))), "partition %d offsets have gaps" % p
    top, offs = kg.fetch_offsets(c, group, None)
    ends = {p: kproto.list_offsets(c, topic_name, p, -1)["Offset"] for p in range(parts)}
    assert {p: offs[(topic_name, p)][0] for p in range(parts)} == ends
    d = describe(c, group)
    assert (d["ErrorCode"], d["GroupState"], d["Members"]) == (0, "Empty", []), d


def start_member(bs, topic, group):
    cmd = ["java"] + jtools.JVM + ["-cp", jtools.classpath(), "io.skiff.clients.GroupConsume",
                                   "--timeout", "80", "-m", "consume", "-b", bs, "-t", topic,
                                   "-g", group, "-n", "1000000", "--read-timeout", "70"] + CONSUMER
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


def wait_members(c, group, want, timeout=40.0):
    """Waits until the group's members own partitions in the counts `want` (sorted)."""
    deadline = time.time() + timeout
    d = None
    while time.time() < deadline:
        d = describe(c, group)
        counts = sorted(sum(len(tp["Partitions"]) for tp in m["Assignment"]["TopicPartitions"])
                        for m in d["Members"])
        if counts == want and d["GroupState"] == "Stable":
            return d
        time.sleep(0.2)
    raise AssertionError("group never reached %s: %s" % (want, d))


def test_killed_member_partitions_move_after_session_timeout(broker_factory, topic_name):
    b = broker_factory(dict(FAST, **{"group.consumer.session.timeout.ms": "4000"}))
    c = kg.connect(b.bootstrap)
    kproto.create_topic(c, topic_name, 4)
    group = "g4011-kill-" + uuid.uuid4().hex[:6]
    jtools.classpath()
    survivor = start_member(b.bootstrap, topic_name, group)
    victim = None
    try:
        wait_members(c, group, [4])
        victim = start_member(b.bootstrap, topic_name, group)
        d = wait_members(c, group, [2, 2])
        ids = {m["MemberId"] for m in d["Members"]}
        victim.send_signal(signal.SIGKILL)
        victim.wait()
        killed = time.time()
        d = wait_members(c, group, [4], timeout=20)
        moved = time.time() - killed
        assert len(d["Members"]) == 1 and d["Members"][0]["MemberId"] in ids, d
        assert 2.5 < moved < 15, "partitions moved %.1fs after the kill" % moved
    finally:
        for p in (survivor, victim):
            if p and p.poll() is None:
                p.kill()
                p.wait()


@pytest.mark.restarts
def test_resume_from_committed_offsets_after_node_sigkill(broker_factory, topic_name):
    b = broker_factory(FAST)
    bs, parts, n = b.bootstrap, 4, 2000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    for p in range(parts):
        for k in range(0, n // parts, 250):
            recs = [kproto.Record(key=b"k-%d" % (p * 100000 + k + j), value=b"v")
                    for j in range(250)]
            assert kproto.produce(c, topic_name, p, kproto.batch(records=recs))["ErrorCode"] == 0
    group = "g4011-restart-" + uuid.uuid4().hex[:6]
    args = ["-m", "consume", "-b", bs, "-t", topic_name, "-g", group, "--read-timeout", "60",
            "--prop", "max.poll.records=100"] + CONSUMER
    rc, out, err = jtools.java("GroupConsume", args + ["-n", "700"])
    assert rc == 0, ktest.tail(err)
    first = parse(out)
    top, offs = kg.fetch_offsets(c, group, {topic_name: list(range(parts))})
    commit1 = {p: offs[(topic_name, p)][0] for p in range(parts)}
    for p in range(parts):
        read = sorted(off for _, q, off, _ in first if q == p)
        want = read[-1] + 1 if read else -1
        assert commit1[p] == want, "partition %d: read up to %s, committed %d" % (p, want, commit1[p])
    c.close()

    b.kill()
    b.start()
    c = kg.connect(bs)
    top, offs = kg.fetch_offsets(c, group, {topic_name: list(range(parts))})
    assert {p: offs[(topic_name, p)][0] for p in range(parts)} == commit1, "offsets lost"
    rc, out, err = jtools.java("GroupConsume", args + ["-n", str(n - len(first))])
    summary = jtools.json_lines(out)[-1]
    assert rc == 0, "%s\n%s" % (summary, ktest.tail(err))
    second = parse(out)
    starts = {int(p): o for p, o in summary["first_offsets"].items()}
    for p in range(parts):
        want = commit1[p] if commit1[p] >= 0 else 0
        if want < n // parts:
            assert starts.get(p) == want, "partition %d resumed at %s, committed %d" % (
                p, starts.get(p), commit1[p])
    keys = [i for _, _, _, i in first + second]
    assert len(keys) == n and len(set(keys)) == n, "%d read, %d distinct, %d written" % (
        len(keys), len(set(keys)), n)


def table(out, first_col="GROUP"):
    rows, header = [], None
    for ln in out.splitlines():
        f = ln.split()
        if not f:
            continue
        if f[0] == first_col:
            header = f
        elif header and len(f) == len(header):
            rows.append(dict(zip(header, f)))
    return rows


def test_consumer_groups_tool_describes_a_consumer_protocol_group(cbroker, topic_name):
    bs = cbroker.bootstrap
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, 2)
    kg.find_coordinator(c, "warm-up")
    for p in (0, 1):
        assert kproto.produce(c, topic_name, p, kproto.batch([b"x"] * 10))["ErrorCode"] == 0
    group = "g4011-tool-" + uuid.uuid4().hex[:6]
    m = Member(c, group, [topic_name])
    settle([m], 2)
    assert set(kg.commit(c, group, {(topic_name, 0): 4, (topic_name, 1): 10}, m.epoch, m.id,
                         version=9).values()) == {0}
    g = ["groups", "--bootstrap-server", bs]
    desc, members, state, adesc = jtools.tools(
        g + ["--describe", "--group", group],
        g + ["--describe", "--group", group, "--members"],
        g + ["--describe", "--group", group, "--state"],
        ["admin-describe", bs, group])
    rows = {int(x["PARTITION"]): x for x in table(desc["out"])}
    assert sorted(rows) == [0, 1], jtools.show(desc)
    assert [(rows[p]["CURRENT-OFFSET"], rows[p]["LOG-END-OFFSET"], rows[p]["LAG"])
            for p in (0, 1)] == [("4", "10", "6"), ("10", "10", "0")], jtools.show(desc)
    assert {rows[p]["CONSUMER-ID"] for p in (0, 1)} == {m.id}, jtools.show(desc)
    (mrow,) = table(members["out"])
    assert (mrow["CONSUMER-ID"], mrow["#PARTITIONS"]) == (m.id, "2"), jtools.show(members)
    (srow,) = table(state["out"])
    assert (srow["ASSIGNMENT-STRATEGY"], srow["STATE"], srow["#MEMBERS"]) == (
        "uniform", "Stable", "1"), jtools.show(state)
    d = adesc["result"]
    assert (d["state"], d["assignor"]) == ("Stable", "uniform"), d
    assert [x["member"] for x in d["members"]] == [m.id], d
