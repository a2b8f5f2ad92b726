"""A consumer-protocol (KIP-848) group keeps working when its coordinator node dies
(docs/consumer-groups.md, docs/cluster.md).

Three nodes; a 4-partition topic holds 2000 records. A Java 4.3 consumer with
group.protocol=consumer reads half and commits. A member (raw protocol) then owns
every partition through the group's coordinator, the main of the group's
__consumer_offsets partition, which is SIGKILLed. The coordination moves to a
survivor with the committed offsets and the group's state: the offsets are all
there, and the member goes on heartbeating at the new coordinator with the same
epoch and partitions, as after a Kafka coordinator failover. A Java consumer then
resumes the group exactly at the committed offsets and reads the other half, each
record once.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import cluster as cm  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto as k  # noqa: E402
import ktest  # noqa: E402
from test_4010_consumer_group_raw import Member, describe, hb, settle  # noqa: E402
from test_7005_cluster_groups import coordinator_everywhere  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 4
N = 2000


def produce(cl, topic):
    from confluent_kafka import Producer
    acks, errors = {}, []

    def cb(err, m):
        if err:
            errors.append(str(err))
        else:
            acks[m.key()] = (m.partition(), m.offset())
    p = Producer({"bootstrap.servers": cl.bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(N):
        p.produce(topic, key=b"k-%d" % i, value=b"v", partition=i % PARTS, on_delivery=cb)
        p.poll(0)
    assert p.flush(60) == 0 and not errors and len(acks) == N, (len(acks), errors[:3])


def committed(cl, node_id, group, topic):
    def ask():
        try:
            with cl.nodes[node_id].conn() as c:
                top, offs = kg.fetch_offsets(c, group, {topic: list(range(PARTS))})
        except (OSError, k.ConnectionClosed, k.ProtocolError):
            return None
        if top in (cm.COORDINATOR_LOAD_IN_PROGRESS, cm.COORDINATOR_NOT_AVAILABLE,
                   cm.NOT_COORDINATOR):
            return None
        assert top == k.NONE, top
        return {p: offs[(topic, p)][0] for p in range(PARTS)}
    return cm.wait_for(ask, 30, "node %d to answer OffsetFetch for %s" % (node_id, group))


def parse(lines):
    return [(int(f[2]), int(f[3]), int(f[4])) for f in (ln.split() for ln in lines)
            if f and f[0] == "REC"]


def test_consumer_group_survives_its_coordinator(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1",
                                       "group.consumer.heartbeat.interval.ms": "500"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    produce(cl, topic_name)
    group = cm.group_id("g7012")
    coord = coordinator_everywhere(cl, group)
    args = ["-m", "consume", "-b", cl.bootstrap, "-t", topic_name, "-g", group,
            "--read-timeout", "60", "--prop", "max.poll.records=50",
            "--prop", "group.protocol=consumer"]
    rc, out, err = jtools.java("GroupConsume", args + ["-n", str(N // 2)])
    assert rc == 0, ktest.tail(err)
    first = parse(out)
    before = committed(cl, coord, group, topic_name)
    for p in range(PARTS):
        read = [off for q, off, _ in first if q == p]
        assert before[p] == (max(read) + 1 if read else -1), (p, before, len(read))

    c = cl.nodes[coord].conn()
    tid = cl.metadata([topic_name])["Topics"][0]["TopicId"]
    m = Member(c, group, [topic_name])
    settle([m], PARTS)
    old = describe(c, group)
    assert m.parts() == {(tid, p) for p in range(PARTS)}
    c.close()

    cl.kill(coord)
    new = cm.wait_for(lambda: (lambda x: x if x != coord else None)(
        coordinator_everywhere(cl, group)), 30, "a new coordinator of %s" % group)
    assert committed(cl, new, group, topic_name) == before, "committed offsets lost"

    c = cl.nodes[new].conn()
    m.c = c
    d = describe(c, group)
    for key in ("GroupState", "GroupEpoch", "AssignmentEpoch", "AssignorName"):
        assert d[key] == old[key], (key, old, d)
    assert [(x["MemberId"], x["MemberEpoch"]) for x in d["Members"]] == [(m.id, m.epoch)], d
    epoch = m.epoch
    m.beat()
    assert m.epoch == epoch and m.parts() == {(tid, p) for p in range(PARTS)}, m.owned
    r = hb(c, group, m.id, -1)
    assert r["ErrorCode"] == 0, r
    c.close()

    rc, out, err = jtools.java("GroupConsume", args + ["-n", str(N - len(first))])
    summary = jtools.json_lines(out)[-1]
    assert rc == 0, "%s\n%s" % (summary, ktest.tail(err))
    second = parse(out)
    starts = {int(p): o for p, o in summary["first_offsets"].items()}
    for p in range(PARTS):
        if before[p] < N // PARTS:
            assert starts.get(p) == max(before[p], 0), (p, starts, before)
    keys = [i for _, _, i in first + second]
    assert len(keys) == N and len(set(keys)) == N, "%d read, %d distinct, %d written" % (
        len(keys), len(set(keys)), N)
