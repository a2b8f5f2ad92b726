"""A mixed group (a classic and a consumer-protocol member in one consumer group) when
its coordinator node dies (docs/consumer-groups.md, docs/cluster.md).

Three nodes; a 4-partition topic. Through the group's coordinator (the main of its
__consumer_offsets partition) a consumer-protocol member and a classic member (raw
protocol) share the partitions, two each, and both commit. The coordinator is
SIGKILLed. On the node that takes the coordination over, ConsumerGroupDescribe shows
the same members (ids, epochs, MemberType 0 and 1, assignments), the committed offsets
are there, the classic member's Heartbeat with its generation is accepted and its
SyncGroup gives the same partitions, and the consumer member heartbeats on with its
epoch and partitions, as after a Kafka coordinator failover.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import cluster as cm  # noqa: E402
import kgroup as kg  # noqa: E402
from test_4010_consumer_group_raw import Member, describe, settle  # noqa: E402
from test_4013_mixed_group import classic_join, read_assignment, share  # noqa: E402
from test_7005_cluster_groups import coordinator_everywhere  # noqa: E402
from test_7012_cluster_consumer_protocol import committed  # noqa: E402

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 4


def members(d):
    return sorted((m["MemberId"], m["MemberEpoch"], m["MemberType"],
                   sorted((tp["TopicName"], p) for tp in m["Assignment"]["TopicPartitions"]
                          for p in tp["Partitions"]))
                  for m in d["Members"])


def test_mixed_group_survives_its_coordinator(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1",
                                       "group.consumer.heartbeat.interval.ms": "500"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    group = cm.group_id("g7020")
    coord = coordinator_everywhere(cl, group)
    c = cl.nodes[coord].conn()
    k = Member(c, group, [topic_name])
    settle([k], PARTS)
    r = classic_join(c, group, "", topic_name)
    assert r["ErrorCode"] == kg.MEMBER_ID_REQUIRED, r
    mid = r["MemberId"]
    r = classic_join(c, group, mid, topic_name)
    assert r["ErrorCode"] == 0, r
    gen, got = share(c, group, mid, r["GenerationId"], topic_name, k)
    mine = {(topic_name, p): 10 + p for p in got[topic_name]}
    assert set(kg.commit(c, group, mine, generation=gen, member_id=mid, version=9).values()) \
        == {0}
    theirs = {(topic_name, p): 20 + p for p in range(PARTS) if p not in got[topic_name]}
    assert set(kg.commit(c, group, theirs, generation=k.epoch, member_id=k.id,
                         version=9).values()) == {0}
    old = describe(c, group)
    assert sorted(m["MemberType"] for m in old["Members"]) == [0, 1], old
    before = committed(cl, coord, group, topic_name)
    assert before == {p: (10 if p in got[topic_name] else 20) + p for p in range(PARTS)}
    c.close()

    cl.kill(coord)
    new = cm.wait_for(lambda: (lambda x: x if x != coord else None)(
        coordinator_everywhere(cl, group)), 30, "a new coordinator of %s" % group)
    assert committed(cl, new, group, topic_name) == before, "committed offsets lost"
    c = cl.nodes[new].conn()
    k.c = c
    d = describe(c, group)
    for key in ("GroupState", "GroupEpoch", "AssignmentEpoch", "AssignorName"):
        assert d[key] == old[key], (key, old, d)
    assert members(d) == members(old), (old, d)
    assert kg.heartbeat(c, group, gen, mid, version=4)["ErrorCode"] == 0
    s = kg.sync(c, group, gen, mid, version=5, protocol_type="consumer", protocol_name="range")
    assert s["ErrorCode"] == 0 and read_assignment(s["Assignment"])[1] == got, s
    epoch = k.epoch
    k.beat()
    assert k.epoch == epoch and k.count() == 2, k.owned
    c.close()
