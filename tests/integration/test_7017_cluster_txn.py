"""Transactions in a three-node cluster (docs/transactions.md, "In a cluster").

The Java transactional producer (kafka-clients 4.x, tests/java Txn) writes to a topic
whose partitions have their mains on every node, while its transaction coordinator is
one node: the main of the transactional id's partition of __consumer_offsets. Markers
reach the other nodes' partitions through the TxnMarkers RPC, and each main verifies a
transactional batch with the coordinator (AddPartitionsToTxn v4, VerifyOnly) before it
takes it. Consume-transform-produce commits its group's offsets through a group
coordinator that is not the transaction coordinator.
"""

import os
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import cluster as cm  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto as k  # noqa: E402
import ktest  # noqa: E402

pytestmark = pytest.mark.cluster

PARTS = 6


@pytest.fixture(scope="module")
def java():
    """Runs an io.skiff.clients program: (exit code, stdout lines, stderr)."""
    return ktest.java_runner(120)


summary = ktest.json_summary


def values(prefix, n):
    return ["%s-%d" % (prefix, i) for i in range(n)]


def coordinator(cl, key, key_type):
    """The node every live node names for key (FindCoordinator v3), once they agree."""
    def agreed():
        seen = set()
        for n in cl.live():
            with n.conn() as c:
                r = kg.find_coordinator(c, key, key_type, 3)
                if r["ErrorCode"]:
                    return None
                seen.add(r["NodeId"])
        return seen.pop() if len(seen) == 1 else None
    return cm.wait_for(agreed, 30, "every node to name one coordinator of %s" % key)


def spread_topic(cl, topic):
    cl.create_topic(topic, PARTS, via=1)
    mains = cl.mains(topic)
    assert sum(1 for ps in mains.values() if ps) >= 2, mains
    return mains


def started(cluster_factory):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1"}).start()
    cl.wait_balanced()
    return cl


def test_commit_abort_over_nodes(cluster_factory, topic_name, java):
    cl = started(cluster_factory)
    spread_topic(cl, topic_name)
    txn = "t7017-" + uuid.uuid4().hex[:8]
    coord = coordinator(cl, txn, 1)
    # Every other node says NOT_COORDINATOR for the id's transaction APIs.
    for n in cl.live():
        if n.node_id == coord:
            continue
        with n.conn() as c:
            r = c.request(22, 4, {"TransactionalId": txn, "TransactionTimeoutMs": 60000,
                                  "ProducerId": -1, "ProducerEpoch": -1})
            assert r["ErrorCode"] == 16, r  # NOT_COORDINATOR
    s = summary(*java("Txn", ["-m", "commit-abort", "-b", cl.bootstrap, "-t", topic_name,
                              "-x", txn, "-n", "30"]))
    want = values("c1", 30) + values("c2", 30)
    assert sorted(s["committed"]) == sorted(want), s
    assert sorted(s["uncommitted"]) == sorted(want + values("a", 30)), s
    # Every partition of the topic got its markers, the remote ones too: the last stable
    # offset reached the end everywhere (read_committed ListOffsets latest).
    leaders = cl.leaders(topic_name)
    for p, (leader, _) in leaders.items():
        with cl.node(leader).conn() as c:
            lso = k.list_offsets(c, topic_name, p, -1, isolation=1)
            end = k.list_offsets(c, topic_name, p, -1)
            assert lso["ErrorCode"] == 0 and lso["Offset"] == end["Offset"] > 0, (p, lso, end)


def test_consume_transform_produce_remote_group(cluster_factory, topic_name, java):
    cl = started(cluster_factory)
    src, dst = topic_name + "-in", topic_name + "-out"
    spread_topic(cl, src)
    spread_topic(cl, dst)
    # A transactional id and a group whose coordinators are different nodes.
    txn = "t7017-" + uuid.uuid4().hex[:8]
    tc = coordinator(cl, txn, 1)
    while True:
        group = cm.group_id("g7017")
        gc = coordinator(cl, group, 0)
        if gc != tc:
            break
    rc, out, err = java("Produce", ["-b", cl.bootstrap, "-t", src, "-n", "120", "-P",
                                    str(PARTS)])
    assert rc == 0, ktest.tail(err)
    s = summary(*java("Txn", ["-m", "ctp", "-b", cl.bootstrap, "-i", src, "-o", dst,
                              "-g", group, "-x", txn, "-n", "120"]))
    assert s["processed"] == 120 and s["transactions"] >= 1, s
    with cl.node(gc).conn() as c:
        kg.find_coordinator(c, group)
        _, offs = kg.fetch_offsets(c, group, {src: list(range(PARTS))})
        assert sum(offs[(src, p)][0] for p in range(PARTS)) == 120, offs
    r = summary(*java("Txn", ["-m", "read", "-b", cl.bootstrap, "-t", dst]))
    assert len(r["committed"]) == 120, r
    assert all(v == v.upper() for v in r["committed"]), r
