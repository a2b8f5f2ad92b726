"""The admin APIs of test_4007 in a three-node cluster: every node describes a topic's
partitions with DescribeTopicPartitions as Metadata does (each partition led by its
main, spread over the nodes), finds no election needed for any partition, answers
DescribeProducers for the partitions it serves and NOT_LEADER_OR_FOLLOWER for the
others (but to a client of its zone, for which it proxies them: it asks the main), and describes the quorum as led by the cluster's controller with the other
nodes as observers. Group configs set through any node are the cluster's. A preferred
election brings partitions back to the node they belong on after its drain.
"""

import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import cluster as cm  # noqa: E402
import kproto as k  # noqa: E402
from test_4007_admin_apis_raw import ELECTION_NOT_NEEDED, dtp, elect, pages, quorum  # noqa: E402

pytestmark = pytest.mark.cluster

PARTS = 6
NOT_LEADER_OR_FOLLOWER = 6


def test_admin_apis_on_every_node(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1"}).start()
    cl.wait_balanced()
    t = topic_name
    leaders = cl.create_topic(t, PARTS, via=1)
    assert len({ld for ld, _ in leaders.values()}) > 1, leaders
    main0 = leaders[0][0]
    with cl.node(main0).conn() as c:
        ip = k.init_producer_id(c)
        b = k.batch([b"x"], producer_id=ip["ProducerId"], producer_epoch=ip["ProducerEpoch"],
                    base_sequence=0)
        assert k.produce(c, t, 0, b)["ErrorCode"] == 0
    for n in cl.nodes.values():
        with n.conn() as c:
            controller = cm.describe_cluster(c)["ControllerId"]
            (md,) = k.metadata(c, [t], version=12, allow_auto=False)["Topics"]
            r = dtp(c, [t], limit=4)
            assert pages(r) == ([(t, [0, 1, 2, 3])], (t, 4)), r
            r2 = dtp(c, [t], cursor={"TopicName": t, "PartitionIndex": 4})
            parts = r["Topics"][0]["Partitions"] + r2["Topics"][0]["Partitions"]
            got = {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"], p["ReplicaNodes"])
                   for p in parts}
            want = {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"], p["ReplicaNodes"])
                    for p in md["Partitions"]}
            assert got == want, "node %d: %r, Metadata %r" % (n.node_id, got, want)
            assert {p: v[0] for p, v in got.items()} == {p: ld for p, (ld, _) in leaders.items()}

            res, _, top = elect(c, {t: list(range(PARTS))})
            assert top == 0 and {v[0] for v in res.values()} == {ELECTION_NOT_NEEDED}, res

            pr = c.request(61, 0, {"Topics": [{"Name": t, "PartitionIndexes": list(range(PARTS))}]})
            errs = {p["PartitionIndex"]: p["ErrorCode"] for p in pr["Topics"][0]["Partitions"]}
            assert errs == {p: 0 if ld == n.node_id else NOT_LEADER_OR_FOLLOWER
                            for p, (ld, _) in leaders.items()}, (n.node_id, errs)
            if n.node_id == main0:
                (st,) = pr["Topics"][0]["Partitions"][0]["ActiveProducers"]
                assert (st["ProducerId"], st["LastSequence"]) == (ip["ProducerId"], 0), st

            # A client of the node's zone is sent to it for every partition (zone routing,
            # docs/zones.md): DescribeTopicPartitions says so, and as a proxy the node asks
            # the main for the producers.
            with k.Conn(n.bootstrap, client_id="t7007,skiff_az=%s" % n.rack) as zc:
                zr = dtp(zc, [t])
                assert {p["LeaderId"] for p in zr["Topics"][0]["Partitions"]} == {n.node_id}, zr
                zp = zc.request(61, 0, {"Topics": [{"Name": t, "PartitionIndexes": [0]}]})
                (zpp,) = zp["Topics"][0]["Partitions"]
                assert zpp["ErrorCode"] == 0, (n.node_id, zpp)
                assert [(s["ProducerId"], s["LastSequence"]) for s in zpp["ActiveProducers"]] == \
                    [(ip["ProducerId"], 0)], zpp

            q = quorum(c, 2, [("__cluster_metadata", [0])])
            (qp,) = q["Topics"][0]["Partitions"]
            assert (qp["ErrorCode"], qp["LeaderId"]) == (0, controller), q
            assert [v["ReplicaId"] for v in qp["CurrentVoters"]] == [controller], q
            assert sorted(o["ReplicaId"] for o in qp["Observers"]) == sorted(
                i for i in cl.live_ids() if i != controller), q
            assert qp["LeaderEpoch"] > 0 and qp["HighWatermark"] > 0, q


def test_group_configs_are_the_clusters(cluster_factory):
    """A group's configs set through one node are what every node describes, a change
    through another keeps the first one's entries, and a deletion is seen everywhere."""
    from test_4009_group_configs_raw import DELETE, SET, group_name, incr, own
    cl = cluster_factory(3).start()
    g = group_name()
    with cl.node(1).conn() as c:
        assert incr(c, g, [("consumer.session.timeout.ms", SET, "50000")]) == (0, None)
    with cl.node(2).conn() as c:
        assert own(c, g) == {"consumer.session.timeout.ms": "50000"}
        assert incr(c, g, [("share.isolation.level", SET, "read_committed")]) == (0, None)
    for i in (1, 2, 3):
        with cl.node(i).conn() as c:
            assert own(c, g) == {"consumer.session.timeout.ms": "50000",
                                 "share.isolation.level": "read_committed"}, i
    with cl.node(3).conn() as c:
        assert incr(c, g, [("consumer.session.timeout.ms", DELETE, None),
                           ("share.isolation.level", DELETE, None)]) == (0, None)
    with cl.node(1).conn() as c:
        assert own(c, g) == {}


def test_preferred_election_brings_partitions_back(cluster_factory, topic_name):
    """A node's drain moves its partitions away but leaves them belonging to it; once it
    is back (no automatic rebalance here), a preferred election moves them back, with
    their records, and finds no election needed for the others."""
    PREFERRED_LEADER_NOT_AVAILABLE = 80
    cl = cluster_factory(3, overrides={"auto.leader.rebalance.enable": "false"}).start()
    t = topic_name
    before = cl.create_topic(t, PARTS, via=1)
    on2 = sorted(p for p, (ld, _) in before.items() if ld == 2)
    assert on2 and len(on2) < PARTS, before
    for p in range(PARTS):
        with cl.node(before[p][0]).conn() as c:
            assert k.produce(c, t, p, k.batch([b"before-%d" % p]))["ErrorCode"] == 0
    cl.stop(2)
    away = cl.wait_leaders(t, PARTS, exclude=(2,))
    assert all(away[p][0] != 2 for p in range(PARTS)), away
    with cl.node(3).conn() as c:
        res, _, top = elect(c, {t: list(range(PARTS))})
    assert top == 0 and {p: v[0] for (_, p), v in res.items()} == {
        p: PREFERRED_LEADER_NOT_AVAILABLE if p in on2 else ELECTION_NOT_NEEDED
        for p in range(PARTS)}, res

    cl.start_node(2)
    cl.wait_brokers()
    assert {p: ld for p, (ld, _) in cl.wait_leaders(t, PARTS).items()} == {
        p: ld for p, (ld, _) in away.items()}, "partitions moved back without an election"
    t0 = time.time()
    with cl.node(3).conn() as c:
        res, _, top = elect(c, {t: list(range(PARTS))})
    t_answer = time.time() - t0
    assert top == 0 and {p: v[0] for (_, p), v in res.items()} == {
        p: 0 if p in on2 else ELECTION_NOT_NEEDED for p in range(PARTS)}, res
    back = cm.wait_for(lambda: (lambda ls: ls if all(ls[p][0] == 2 for p in on2) else None)(
        cl.wait_leaders(t, PARTS)), 30, "the partitions back on node 2")
    print("7007: election answered in %.0f ms; %d partitions served by node 2 again %.0f ms "
          "after it" % (t_answer * 1000, len(on2), (time.time() - t0) * 1000))
    assert {p: ld for p, (ld, _) in back.items()} == {p: ld for p, (ld, _) in before.items()}
    assert all(back[p][1] > away[p][1] for p in on2), (away, back)
    for p in on2:
        _, _, batches = cl.read_partition(t, p)
        assert [r.value for b in batches for r in b.records] == [b"before-%d" % p], batches
    # Every partition is where it belongs now.
    with cl.node(1).conn() as c:
        res, _, _ = elect(c, {t: list(range(PARTS))})
    assert {v[0] for v in res.values()} == {ELECTION_NOT_NEEDED}, res
