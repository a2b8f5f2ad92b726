"""Transactions on the wire in a cluster (docs/transactions.md, "In a cluster"): every
node names the id's coordinator, the others answer NOT_COORDINATOR; a transactional
batch for a partition whose main is another node is verified with the coordinator
(retriable NOT_ENOUGH_REPLICAS until the answer, then taken, or refused with the
coordinator's code); AddPartitionsToTxn v4 VerifyOnly as Kafka's brokers send it; the
commit marker reaches the other node's partition; the verification ends with it."""

import time
import uuid

import pytest

import kgroup as kg
from cluster import wait_for
import kproto as k
from ktxn import (INVALID_PRODUCER_EPOCH, INVALID_TXN_STATE, NONE, Txn, marker_type, read,
                  txn_id)


NOT_ENOUGH_REPLICAS = 19
NOT_COORDINATOR = 16
TRANSACTIONAL_ID_NOT_FOUND = 105


def send_verified(t, c, topic, part, values, timeout=15):
    """Produce through c until the main has its verification answer."""
    deadline = time.time() + timeout
    while True:
        t.c, saved = c, t.c
        try:
            err, base = t.send(topic, values, part)
        finally:
            t.c = saved
        if err != NOT_ENOUGH_REPLICAS or time.time() > deadline:
            return err, base
        time.sleep(0.05)


def verify(c, tid, pid, epoch, topic, parts):
    r = c.request(24, 4, {"Transactions": [{
        "TransactionalId": tid, "ProducerId": pid, "ProducerEpoch": epoch, "VerifyOnly": True,
        "Topics": [{"Name": topic, "Partitions": parts}]}]})
    assert r["ErrorCode"] == NONE, r
    [tr] = r["ResultsByTransaction"]
    return {p["PartitionIndex"]: p["PartitionErrorCode"]
            for t in tr["TopicResults"] for p in t["ResultsByPartition"]}


@pytest.mark.cluster
def test_remote_partitions(cluster_factory, topic_name):
    cl = cluster_factory(2, overrides={"leader.imbalance.check.interval.seconds": "1"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, 4, via=1)
    cl.wait_balanced(topic_name)
    tid = txn_id("t2014")
    coords = set()
    for n in cl.live():
        with n.conn() as c:
            r = kg.find_coordinator(c, tid, 1, 3)
            assert r["ErrorCode"] == NONE, r
            coords.add(r["NodeId"])
    assert len(coords) == 1, coords
    coord = coords.pop()
    other = next(i for i in cl.live_ids() if i != coord)
    remote = cl.mains(topic_name).get(other, [])
    if len(remote) < 2:
        pytest.skip("the topic's partitions did not spread: %r" % cl.mains(topic_name))
    with cl.node(other).conn() as c:
        r = c.request(22, 4, {"TransactionalId": tid, "TransactionTimeoutMs": 60000,
                              "ProducerId": -1, "ProducerEpoch": -1})
        assert r["ErrorCode"] == NOT_COORDINATOR, r
        # Idempotent producers are served by every node.
        r = k.init_producer_id(c, 4)
        assert r["ErrorCode"] == NONE and r["ProducerId"] >= 0, r
    cc, oc = cl.node(coord).conn(), cl.node(other).conn()
    try:
        t = Txn(cc, tid)
        p_in, p_out = remote[0], remote[1]
        assert t.add(topic_name, [p_in]) == {(topic_name, p_in): NONE}
        assert send_verified(t, oc, topic_name, p_in, [b"x0", b"x1"]) == (NONE, 0)
        # A partition not in the transaction is refused once the coordinator answers.
        assert send_verified(t, oc, topic_name, p_out, [b"y"])[0] == INVALID_TXN_STATE
        # The batched form, as Kafka's brokers send it, to the coordinator only.
        assert verify(cc, tid, t.pid, t.epoch, topic_name, [p_in, p_out]) == \
            {p_in: NONE, p_out: INVALID_TXN_STATE}
        assert verify(cc, tid, t.pid, t.epoch + 1, topic_name, [p_in]) == \
            {p_in: INVALID_PRODUCER_EPOCH}
        assert verify(oc, tid, t.pid, t.epoch, topic_name, [p_in]) == {p_in: NOT_COORDINATOR}
        assert t.end(True) == NONE
        # The coordinator's EndTxn answered once the other node's marker was durable.
        p, batches = read(oc, topic_name, 1, part=p_in)
        assert p["LastStableOffset"] == 3 and p["HighWatermark"] == 3, p
        assert [(b.base_offset, b.is_control) for b in batches] == [(0, False), (2, True)]
        assert marker_type(batches[1]) == (0, 1)
        # The marker ended the verification: a new transaction must add it again.
        r = cc.request(22, 4, {"TransactionalId": tid, "TransactionTimeoutMs": 60000,
                               "ProducerId": t.pid, "ProducerEpoch": t.epoch})
        assert r["ErrorCode"] == NONE, r
        t.pid, t.epoch = r["ProducerId"], r["ProducerEpoch"]
        t.seq = {}
        assert send_verified(t, oc, topic_name, p_in, [b"z"])[0] == INVALID_TXN_STATE
    finally:
        cc.close()
        oc.close()


def describe(c, tid):
    r = c.request(65, 0, {"TransactionalIds": [tid]})
    [s] = r["TransactionStates"]
    return s


@pytest.mark.cluster
def test_transactional_id_expiration(cluster_factory, topic_name):
    """transactional.id.expiration.ms: an id whose last transaction ended that long ago is
    forgotten, durably (a failover of its coordinator does not bring it back), and its
    next InitProducerId gets a new producer id; an id with an open transaction stays."""
    cl = cluster_factory(2, overrides={
        "leader.imbalance.check.interval.seconds": "1",
        "transactional.id.expiration.ms": "1500",
        "transaction.remove.expired.transaction.cleanup.interval.ms": "200"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, 1, via=1)
    cl.wait_leaders(topic_name, 1)
    tid, open_tid = txn_id("t2014x"), None
    with cl.any_conn() as c:
        coord = kg.find_coordinator(c, tid, 1, 3)["NodeId"]
    # A second id with the same coordinator keeps its transaction open.
    while open_tid is None:
        cand = txn_id("t2014o")
        with cl.any_conn() as c:
            if kg.find_coordinator(c, cand, 1, 3)["NodeId"] == coord:
                open_tid = cand
    leader = cl.leaders(topic_name)[0][0]
    with cl.node(coord).conn() as cc, cl.node(leader).conn() as lc:
        t = Txn(cc, tid)
        assert t.add(topic_name, [0]) == {(topic_name, 0): NONE}
        assert send_verified(t, lc, topic_name, 0, [b"e"])[0] == NONE
        assert t.end(True) == NONE
        o = Txn(cc, open_tid, timeout_ms=120000)
        assert o.add(topic_name, [0]) == {(topic_name, 0): NONE}
        assert describe(cc, tid)["TransactionState"] == "CompleteCommit"
        deadline = time.time() + 15
        while describe(cc, tid)["ErrorCode"] == NONE and time.time() < deadline:
            time.sleep(0.2)
        assert describe(cc, tid)["ErrorCode"] == TRANSACTIONAL_ID_NOT_FOUND
        assert describe(cc, open_tid)["TransactionState"] == "Ongoing"
        old_pid = t.pid
    # SIGKILL the coordinator: its ids move with the HANDOFF of their partition, the
    # expired one is not among them.
    cl.kill(coord)
    survivor = next(iter(cl.live_ids()))

    def moved():
        with cl.node(survivor).conn() as c:
            r = kg.find_coordinator(c, tid, 1, 3)
            return r["NodeId"] if r["ErrorCode"] == NONE and r["NodeId"] == survivor else None
    assert wait_for(moved, 30, "the coordinator of %s to move" % tid) == survivor
    with cl.node(survivor).conn() as c:
        assert describe(c, open_tid)["TransactionState"] in ("Ongoing", "PrepareAbort",
                                                             "CompleteAbort")
        assert describe(c, tid)["ErrorCode"] == TRANSACTIONAL_ID_NOT_FOUND
        t2 = Txn(c, tid)
        assert t2.pid != old_pid and t2.epoch == 0, (t2.pid, t2.epoch, old_pid)


ILLEGAL_GENERATION = 22
UNKNOWN_MEMBER_ID = 25
FENCED_INSTANCE_ID = 82


def test_txn_offset_commit_member_checks(broker, topic_name):
    """TxnOffsetCommit v3 carries the consumer's generation, member id and instance id
    (KIP-447): the group coordinator checks them as Kafka 4.3 does for a transactional
    commit (classic groups)."""
    c = k.Conn(broker.bootstrap)
    k.create_topic(c, topic_name, 1)
    k.wait_topic(c, topic_name, 1)
    group = "g2014-" + uuid.uuid4().hex[:8]
    deadline = time.time() + 30
    while True:  # Kafka loads its offsets partition after the first look-up
        kg.find_coordinator(c, group)
        j = kg.join_two_step(c, group, instance_id="i1", topics=(topic_name,))
        if j["ErrorCode"] not in (14, 15, 16) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert j["ErrorCode"] == NONE, j
    gen, member = j["GenerationId"], j["MemberId"]
    assert kg.sync(c, group, gen, member, {member: b""}, instance_id="i1")["ErrorCode"] == NONE
    t = Txn(c, txn_id("t2014g"))
    absent = group + "-absent"
    for g in (group, absent):
        r = c.request(25, 3, {"TransactionalId": t.tid, "ProducerId": t.pid,
                              "ProducerEpoch": t.epoch, "GroupId": g})
        assert r["ErrorCode"] == NONE, r

    def commit(g, generation, member_id, instance_id=None):
        r = c.request(28, 3, {"TransactionalId": t.tid, "GroupId": g, "ProducerId": t.pid,
                              "ProducerEpoch": t.epoch, "GenerationId": generation,
                              "MemberId": member_id, "GroupInstanceId": instance_id,
                              "Topics": [{"Name": topic_name, "Partitions": [
                                  {"PartitionIndex": 0, "CommittedOffset": 3,
                                   "CommittedLeaderEpoch": -1, "CommittedMetadata": ""}]}]})
        return [p["ErrorCode"] for tp in r["Topics"] for p in tp["Partitions"]][0]

    assert commit(group, gen, member, "i1") == NONE
    assert commit(group, gen + 1, member, "i1") == ILLEGAL_GENERATION
    assert commit(group, gen, "nobody") == UNKNOWN_MEMBER_ID
    assert commit(group, gen, "nobody", "i1") == FENCED_INSTANCE_ID
    # Without a generation or member: allowed even while the group has members.
    assert commit(group, -1, "") == NONE
    assert commit(absent, 4, "x") == ILLEGAL_GENERATION
    assert commit(absent, -1, "") == NONE
    assert t.end(True) == NONE
    c.close()


UNSTABLE_OFFSET_COMMIT = 88


@pytest.mark.cluster
def test_offsets_through_another_group_coordinator(cluster_factory, topic_name):
    """TxnOffsetCommit sent to a group's coordinator that does not coordinate the
    transactional id: the offsets wait with the transaction (RequireStable answers
    UNSTABLE_OFFSET_COMMIT there), are committed there with the commit marker, and
    an abort leaves the committed offset as it was."""
    cl = cluster_factory(2, overrides={"leader.imbalance.check.interval.seconds": "1"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, 1, via=1)
    tid = txn_id("t2014c")
    with cl.any_conn() as c:
        tc = kg.find_coordinator(c, tid, 1, 3)["NodeId"]
        while True:
            group = "g2014c-" + uuid.uuid4().hex[:8]
            gc = kg.find_coordinator(c, group, 0, 3)["NodeId"]
            if gc != tc:
                break
    cc, gcn = cl.node(tc).conn(), cl.node(gc).conn()

    def stable(offset_wanted):
        r = gcn.request(9, 7, {"GroupId": group, "RequireStable": True,
                               "Topics": [{"Name": topic_name, "PartitionIndexes": [0]}]})
        return [(p["CommittedOffset"], p["ErrorCode"]) for t in r["Topics"]
                for p in t["Partitions"]] == [offset_wanted]

    try:
        for commit, off in ((True, 7), (False, 9)):
            t = Txn(cc, tid)
            r = cc.request(25, 3, {"TransactionalId": tid, "ProducerId": t.pid,
                                   "ProducerEpoch": t.epoch, "GroupId": group})
            assert r["ErrorCode"] == NONE, r
            r = gcn.request(28, 3, {"TransactionalId": tid, "GroupId": group,
                                    "ProducerId": t.pid, "ProducerEpoch": t.epoch,
                                    "GenerationId": -1, "MemberId": "",
                                    "GroupInstanceId": None,
                                    "Topics": [{"Name": topic_name, "Partitions": [
                                        {"PartitionIndex": 0, "CommittedOffset": off,
                                         "CommittedLeaderEpoch": -1,
                                         "CommittedMetadata": "m"}]}]})
            assert [p["ErrorCode"] for tp in r["Topics"] for p in tp["Partitions"]] == \
                [NONE], r
            assert stable((-1, UNSTABLE_OFFSET_COMMIT))
            assert t.end(commit) == NONE
            # EndTxn answered once the group's coordinator committed (or dropped) them.
            assert stable((7, NONE))
    finally:
        cc.close()
        gcn.close()
