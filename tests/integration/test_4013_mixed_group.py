"""Mixed groups: Java 4.3.1 consumers with group.protocol=classic and =consumer in one
group (Kafka 4's online upgrade and downgrade, group.consumer.migration.policy
bidirectional), through io.skiff.clients.GroupConsume.

- Two classic members form a classic group while records are produced; a
  consumer-protocol member joins: the group becomes a consumer group whose classic
  members keep their protocol, and the partitions spread over both kinds
  (ConsumerGroupDescribe: MemberType 0 and 1, each owning partitions);
  kafka-consumer-groups --describe --members lists all three, --describe every
  partition with its member.
- The consumer-protocol member leaves: the group is classic again (DescribeGroups
  shows it, ConsumerGroupDescribe does not, ListGroups types it classic), the two classic members share every
  partition, and in the end every produced record was consumed and every offset
  committed.
- librdkafka: a classic member reads alone, a consumer-protocol member joins, gets
  partitions and leaves; every record is read once and every offset committed.
- Raw: a classic JoinGroup to a consumer group gets MEMBER_ID_REQUIRED, then the
  member epoch as its generation, the protocol type "consumer" and its first
  protocol; SyncGroup gives the partitions the coordinator assigned it, in the
  consumer protocol's assignment format; Heartbeat answers REBALANCE_IN_PROGRESS
  once the group moved on.

- (skiffd only) group.consumer.migration.policy: without upgrade a consumer-protocol
  member cannot join a classic group with members (GROUP_ID_NOT_FOUND, "Group … is
  not a consumer group."); with upgrade only, the group stays a consumer group when
  its last consumer-protocol member leaves.

The others hold against Apache Kafka 4.3 too (SKIFF_TEST_AGAINST=kafka).
"""

import json
import os
import struct
import subprocess
import sys
import threading
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
import ktest  # noqa: E402
from test_4010_consumer_group_raw import Member, describe, hb  # noqa: E402
from test_4011_java_consumer_protocol import parse, table  # noqa: E402

FAST = {"group.initial.rebalance.delay.ms": "0", "group.consumer.heartbeat.interval.ms": "500"}
CLASSIC = ["--prop", "group.protocol=classic"]
CONSUMER = ["--prop", "group.protocol=consumer"]


@pytest.fixture
def mbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


class Proc:
    """One GroupConsume member in its own JVM; it leaves the group when stopped."""

    def __init__(self, bs, topic, group, name, proto, stopdir):
        self.name = name
        self.stop_file = os.path.join(stopdir, name)
        cmd = ["java"] + jtools.JVM + [
            "-Dorg.slf4j.simpleLogger.log.org.apache.kafka.clients.consumer.internals=info",
            "-cp", jtools.classpath(), "io.skiff.clients.GroupConsume", "--timeout", "400",
            "-m", "consume", "-b", bs, "-t", topic, "-g", group, "-n", "100000000",
            "--read-timeout", "380", "--name", name, "--stop-file", self.stop_file] + proto
        self.p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        self.out = self.err = b""

    def stop(self, timeout=90):
        open(self.stop_file, "w").close()
        self.out, self.err = self.p.communicate(timeout=timeout)
        lines = self.out.decode(errors="replace").splitlines()
        summary = [j for j in jtools.json_lines(lines) if j.get("op") == "group-consume"]
        assert summary and summary[-1]["error"] is None, "%s: %s\n%s" % (
            self.name, summary, ktest.tail(self.err))
        return parse(lines)

    def kill(self):
        if self.p.returncode is None:
            if self.p.poll() is None:
                self.p.kill()
            self.out, self.err = self.p.communicate()
        return "--- %s ---\n%s\n%s" % (self.name, ktest.tail(self.out, 1000),
                                       ktest.tail(self.err, 4000))


def owned(m):
    return sum(len(tp["Partitions"]) for tp in m["Assignment"]["TopicPartitions"])


def wait_for(what, fn, timeout):
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        ok, last = fn()
        if ok:
            return last
        time.sleep(0.3)
    raise AssertionError("%s never happened: %s" % (what, last))


def wait_mixed(c, group, parts, timeout):
    """The consumer group with classic (type 0) and consumer (type 1) members, Stable,
    every partition owned and each member owning some."""
    def check():
        d = describe(c, group)
        ms = d.get("Members") or []
        kinds = sorted(m["MemberType"] for m in ms)
        ok = (d["ErrorCode"] == 0 and d["GroupState"] == "Stable" and kinds == [0, 0, 1]
              and sum(owned(m) for m in ms) == parts and all(owned(m) > 0 for m in ms))
        return ok, d
    return wait_for("a mixed group", check, timeout)


def wait_classic(c, group, nmembers, timeout):
    def check():
        d = kg.describe_groups(c, [group], version=5)["Groups"][0]
        return (d["GroupState"] == "Stable" and d["ProtocolType"] == "consumer"
                and len(d["Members"]) == nmembers), d
    return wait_for("a classic group of %d" % nmembers, check, timeout)


class Producer(threading.Thread):
    """Produces records "k-i" round robin, acks checked, until told to stop."""

    def __init__(self, bs, topic, parts):
        super().__init__(daemon=True)
        self.c = kg.connect(bs)
        self.topic, self.parts = topic, parts
        self.next = 0
        self.stop_at = None
        self.error = None

    def run(self):
        try:
            while self.stop_at is None or self.next < self.stop_at:
                p = self.next % self.parts
                recs = [kproto.Record(key=b"k-%d" % self.next, value=b"v")]
                r = kproto.produce(self.c, self.topic, p, kproto.batch(records=recs))
                assert r["ErrorCode"] == 0, r
                self.next += 1
                time.sleep(0.004)
        except Exception as e:  # reported by the test
            self.error = e


def listed(c, group, gtype):
    """ListGroups v5 with a type filter: [(type, protocol type)] of this group."""
    r = c.request(16, 5, {"StatesFilter": [], "TypesFilter": [gtype]})
    return [(g["GroupType"], g["ProtocolType"]) for g in r["Groups"] if g["GroupId"] == group]


def committed_all(c, group, topic, parts):
    _, offs = kg.fetch_offsets(c, group, {topic: list(range(parts))})
    ends = {p: kproto.list_offsets(c, topic, p, -1)["Offset"] for p in range(parts)}
    return {p: offs[(topic, p)][0] for p in range(parts)} == ends, (offs, ends)


def test_upgrade_then_downgrade_while_producing(mbroker, topic_name, tmp_path):
    bs, parts = mbroker.bootstrap, 6
    slow = 120 if harness.external() else 60
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    kg.find_coordinator(c, "warm-up")
    group = "g4013-mixed-" + uuid.uuid4().hex[:6]
    jtools.classpath()
    stopdir = str(tmp_path)
    prod = Producer(bs, topic_name, parts)
    procs = []
    try:
        prod.start()
        procs += [Proc(bs, topic_name, group, n, CLASSIC, stopdir) for n in ("c1", "c2")]
        wait_classic(c, group, 2, slow)
        procs.append(Proc(bs, topic_name, group, "k1", CONSUMER, stopdir))
        d = wait_mixed(c, group, parts, slow)
        assert listed(c, group, "consumer") == [("consumer", "consumer")]
        assert listed(c, group, "classic") == []
        classic_ids = {m["MemberId"] for m in d["Members"] if m["MemberType"] == 0}
        tool, offsets = jtools.tools(
            ["groups", "--bootstrap-server", bs, "--describe", "--group", group, "--members"],
            ["groups", "--bootstrap-server", bs, "--describe", "--group", group])
        orows = {int(x["PARTITION"]): x for x in table(offsets["out"])}
        assert sorted(orows) == list(range(parts)), jtools.show(offsets)
        ids = {m["MemberId"] for m in d["Members"]}
        assert {x["CONSUMER-ID"] for x in orows.values()} <= ids, jtools.show(offsets)
        rows = table(tool["out"])
        assert len(rows) == 3, jtools.show(tool)
        assert sum(int(r["#PARTITIONS"]) for r in rows) == parts, jtools.show(tool)
        assert classic_ids <= {r["CONSUMER-ID"] for r in rows}, jtools.show(tool)

        recs = procs[2].stop()  # the consumer-protocol member leaves: back to classic
        d = wait_classic(c, group, 2, slow)
        assert {m["MemberId"] for m in d["Members"]} == classic_ids, d
        cd = describe(c, group)
        assert cd["ErrorCode"] == 69, cd  # GROUP_ID_NOT_FOUND: not a consumer group
        assert listed(c, group, "classic") == [("classic", "consumer")]
        assert recs, "the consumer-protocol member consumed nothing"

        prod.stop_at = prod.next + 300
        prod.join(120)
        assert prod.error is None, prod.error
        wait_for("every offset committed", lambda: committed_all(c, group, topic_name, parts),
                 slow)
        for p in procs[:2]:
            recs += p.stop()
    except BaseException:
        sys.stderr.write("\n".join(p.kill() for p in procs) + "\n")
        raise
    finally:
        prod.stop_at = 0
        for p in procs:
            p.kill()
    keys = {i for _, _, _, i in recs}
    assert keys == set(range(prod.next)), "%d records never consumed (first: %s)" % (
        len(set(range(prod.next)) - keys), sorted(set(range(prod.next)) - keys)[:10])
    assert {m for m, _, _, _ in recs} == {"c1", "c2", "k1"}


# ---------------------------------------------------------------- raw wire


def sub_v1(topics, owned=None):
    """ConsumerProtocolSubscription v1: topics, user data (null), owned partitions."""
    out = struct.pack(">hi", 1, len(topics))
    for t in topics:
        out += struct.pack(">h", len(t)) + t.encode()
    out += struct.pack(">i", -1)
    owned = owned or {}
    out += struct.pack(">i", len(owned))
    for t, ps in owned.items():
        out += struct.pack(">h", len(t)) + t.encode() + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out


def read_assignment(b):
    """A ConsumerProtocolAssignment: (version, {topic: [partitions]})."""
    ver, n = struct.unpack_from(">hi", b, 0)
    at, out = 6, {}
    for _ in range(n):
        (tl,) = struct.unpack_from(">h", b, at)
        t = b[at + 2:at + 2 + tl].decode()
        at += 2 + tl
        (np,) = struct.unpack_from(">i", b, at)
        out[t] = list(struct.unpack_from(">%di" % np, b, at + 4))
        at += 4 + 4 * np
    return ver, out


def classic_join(c, group, member_id, topic, owned=None):
    return kg.join(c, group, version=9, **{
        "member_id": member_id, "session_ms": 30000, "rebalance_ms": 30000,
        "protocols": [("range", sub_v1([topic], owned)), ("cooperative-sticky", sub_v1([topic], owned))]})


def share(c, group, mid, gen, topic, k):
    """Drives classic member `mid` (at generation gen) beside consumer member k until
    each owns half of the topic's 4 partitions; returns (generation, its assignment)."""
    got = {}
    for _ in range(200):
        k.beat()
        hbr = kg.heartbeat(c, group, gen, mid, version=4)
        if hbr["ErrorCode"] == 27:  # REBALANCE_IN_PROGRESS: rejoin, owning what it got
            r = classic_join(c, group, mid, topic, got)
            assert r["ErrorCode"] == 0, r
            gen = r["GenerationId"]
        else:
            assert hbr["ErrorCode"] == 0, hbr
        s = kg.sync(c, group, gen, mid, version=5, protocol_type="consumer",
                    protocol_name="range")
        assert s["ErrorCode"] in (0, 27), s
        if s["ErrorCode"] == 0:
            ver, got = read_assignment(s["Assignment"])
            assert ver == 1
        if sum(len(v) for v in got.values()) == 2 and k.count() == 2 and \
                describe(c, group)["GroupState"] == "Stable":
            return gen, got
        time.sleep(0.1)
    raise AssertionError("never shared: %s %s" % (got, k.owned))


def test_raw_classic_member_in_a_consumer_group(mbroker, topic_name):
    bs = mbroker.bootstrap
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, 4)
    kg.find_coordinator(c, "warm-up")
    group = "g4013-raw-" + uuid.uuid4().hex[:6]
    k = Member(c, group, [topic_name])
    for _ in range(100):
        k.beat()
        if k.count() == 4:
            break
        time.sleep(0.05)
    assert k.count() == 4
    r = classic_join(c, group, "", topic_name)
    assert r["ErrorCode"] == 79 and r["MemberId"], r  # MEMBER_ID_REQUIRED
    mid = r["MemberId"]
    r = classic_join(c, group, mid, topic_name)
    assert (r["ErrorCode"], r["MemberId"], r["ProtocolType"], r["ProtocolName"], r["Leader"],
            r["Members"]) == (0, mid, "consumer", "range", "", []), r
    gen = r["GenerationId"]
    d = describe(c, group)
    mine = [m for m in d["Members"] if m["MemberId"] == mid]
    assert mine and mine[0]["MemberType"] == 0 and mine[0]["MemberEpoch"] == gen, d
    gen, got = share(c, group, mid, gen, topic_name, k)
    assert sorted(got.get(topic_name, [])) and sum(len(v) for v in got.values()) == 2, got
    assert set(got[topic_name]).isdisjoint({p for _, p in k.parts()}), (got, k.owned)
    # A classic member commits with its generation.
    assert kg.commit(c, group, {(topic_name, got[topic_name][0]): 1}, generation=gen,
                     member_id=mid, version=9) == {(topic_name, got[topic_name][0]): 0}
    assert kg.commit(c, group, {(topic_name, got[topic_name][0]): 1}, generation=gen + 7,
                     member_id=mid, version=9) == {(topic_name, got[topic_name][0]): 22}
    # The classic member leaves with LeaveGroup; the consumer member takes everything.
    lv = kg.leave(c, group, members=[(mid, None)], version=5)
    assert lv["ErrorCode"] == 0 and [m["ErrorCode"] for m in lv["Members"]] == [0], lv
    for _ in range(100):
        k.beat()
        if k.count() == 4:
            break
        time.sleep(0.05)
    assert k.count() == 4, k.owned


# ---------------------------------------------------------------- librdkafka

RDK = os.path.join(os.path.dirname(__file__), "clients", "rdk_consumer_protocol.py")


def test_librdkafka_classic_and_consumer_members(mbroker, topic_name):
    """librdkafka (confluent-kafka of tests/.venv): m1 with group.protocol=classic reads
    alone, m2 with =consumer joins (the group becomes a consumer group) and gets
    partitions, then leaves (classic again) and m1 reads the rest: every record read
    once, at its offset, and every offset committed."""
    python = os.path.join(ktest.VENV, "bin", "python")
    assert os.access(python, os.X_OK), "%s missing: run tools/install-deps.sh test" % python
    bs, parts, n = mbroker.bootstrap, 4, 2000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    kg.find_coordinator(c, "warm-up")
    written = {}
    for p in range(parts):
        for first in range(0, n // parts, 250):
            recs = [kproto.Record(key=b"k-%d" % (p * 100000 + first + j), value=b"v")
                    for j in range(250)]
            r = kproto.produce(c, topic_name, p, kproto.batch(records=recs))
            assert r["ErrorCode"] == 0, r
            for j in range(250):
                written[p * 100000 + first + j] = (p, r["BaseOffset"] + j)
    group = "g4013-rdk-" + uuid.uuid4().hex[:6]
    proc = ktest.run([python, RDK, bs, topic_name, group, str(n), "classic,consumer"],
                     timeout=150, check=False, what="rdk_consumer_protocol",
                     env={"PYTHONPATH": ""})
    lines = proc.stdout.decode(errors="replace").splitlines()
    summary = [json.loads(x) for x in lines if x.startswith("{")]
    diag = "exit %d\n%s\n%s" % (proc.returncode, summary, ktest.tail(proc.stderr))
    assert proc.returncode == 0 and summary, diag
    assert not [e for e in summary[-1]["errors"] if "commit" in e or "m2 read nothing" in e], \
        diag
    read, members = {}, set()
    for ln in lines:
        f = ln.split()
        if f and f[0] == "REC":
            members.add(f[1])
            read.setdefault(int(f[4]), []).append((int(f[2]), int(f[3])))
    missing = set(written) - set(read)
    assert not missing, "%d records never read\n%s" % (len(missing), diag)
    assert all(v == [written[k]] for k, v in read.items()), "records read twice or elsewhere"
    assert members == {"m1", "m2"}, diag
    top, offs = kg.fetch_offsets(c, group, None)
    ends = {p: kproto.list_offsets(c, topic_name, p, -1)["Offset"] for p in range(parts)}
    assert {p: offs[(topic_name, p)][0] for p in range(parts)} == ends, offs
    # m2 left last-but-one: the group went back to the classic protocol.
    assert describe(c, group)["ErrorCode"] == 69


# ---------------------------------------------------------------- migration policy


def classic_group(c, group, topic):
    """One raw classic member, Stable with all partitions: (member id, generation)."""
    r = kg.join_two_step(c, group, 5, topics=[topic], session_ms=30000, rebalance_ms=30000)
    assert r["ErrorCode"] == 0, r
    mid, gen = r["MemberId"], r["GenerationId"]
    s = kg.sync(c, group, gen, mid, {mid: kg.assignment({topic: [0, 1]})})
    assert s["ErrorCode"] == 0, s
    return mid, gen


@pytest.mark.parametrize("policy", ["disabled", "downgrade"])
def test_policy_without_upgrade_keeps_classic_groups(broker_factory, topic_name, policy):
    b = broker_factory(dict(FAST, **{"group.consumer.migration.policy": policy}))
    c = kg.connect(b.bootstrap)
    kproto.create_topic(c, topic_name, 2)
    group = "g4013-pol-" + uuid.uuid4().hex[:6]
    mid, gen = classic_group(c, group, topic_name)
    k = Member(c, group, [topic_name])
    r = k.beat(expect=69)  # GROUP_ID_NOT_FOUND
    assert r["ErrorMessage"] == "Group %s is not a consumer group." % group, r
    assert kg.heartbeat(c, group, gen, mid)["ErrorCode"] == 0


def test_upgrade_only_policy_keeps_the_consumer_group(broker_factory, topic_name):
    b = broker_factory(dict(FAST, **{"group.consumer.migration.policy": "upgrade"}))
    c = kg.connect(b.bootstrap)
    kproto.create_topic(c, topic_name, 2)
    group = "g4013-up-" + uuid.uuid4().hex[:6]
    mid, gen = classic_group(c, group, topic_name)
    k = Member(c, group, [topic_name])
    k.beat()
    d = describe(c, group)
    assert d["ErrorCode"] == 0 and sorted(m["MemberType"] for m in d["Members"]) == [0, 1], d
    # Upgraded at the classic generation: the classic member is still in step.
    assert [m["MemberEpoch"] for m in d["Members"] if m["MemberType"] == 0] == [gen], d
    assert kg.heartbeat(c, group, gen, mid)["ErrorCode"] == 27  # rejoin: the group moved on
    assert hb(c, group, k.id, -1)["ErrorCode"] == 0  # the consumer member leaves
    d = describe(c, group)
    assert d["ErrorCode"] == 0 and [m["MemberType"] for m in d["Members"]] == [0], d
