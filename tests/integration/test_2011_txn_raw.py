"""Transactions on the wire (docs/transactions.md): InitProducerId with a transactional id,
AddPartitionsToTxn, transactional Produce, EndTxn and its markers, the last stable offset
and the aborted transactions of read_committed fetches, ListOffsets by isolation level,
AddOffsetsToTxn / TxnOffsetCommit, the coordinator's checks, timeouts, and the state after
SIGKILL. The codes are Kafka 4.3.1's (transaction version 1, the client protocol)."""

import time
import uuid

import pytest

import kgroup as kg
import kproto as k
from ktxn import (ATTR_TXN, CONCURRENT_TRANSACTIONS, INVALID_PRODUCER_ID_MAPPING,  # noqa: F401
                  INVALID_TRANSACTION_TIMEOUT, INVALID_TXN_STATE, LATEST, NONE,
                  PRODUCER_FENCED, UNSTABLE_OFFSET_COMMIT, Txn, find_txn_coordinator,
                  marker_type, new_topic, read, txn_id, wait_stable)


def test_commit_abort_lso_and_aborted_list(broker, topic_name):
    c = new_topic(broker.bootstrap, topic_name)
    t = Txn(c, txn_id())
    assert t.add(topic_name) == {(topic_name, 0): NONE}
    assert t.send(topic_name, [b"c0", b"c1"]) == (NONE, 0)
    # Open: read_committed stops at the first offset of the open transaction.
    p, batches = read(c, topic_name, 1)
    assert p["HighWatermark"] == 2 and p["LastStableOffset"] == 0 and batches == [], p
    assert k.list_offsets(c, topic_name, 0, LATEST, isolation=1)["Offset"] == 0
    assert k.list_offsets(c, topic_name, 0, LATEST, isolation=0)["Offset"] == 2
    p, batches = read(c, topic_name, 0)
    assert [b.base_offset for b in batches] == [0], p
    assert t.end(True) == NONE
    # Committed: data and the commit marker are stable.
    p, batches = wait_stable(c, topic_name, 3)
    assert p["HighWatermark"] == 3 and p["LastStableOffset"] == 3, p
    assert p["AbortedTransactions"] == [], p
    assert [(b.base_offset, b.is_control) for b in batches] == [(0, False), (2, True)]
    ctl = batches[1]
    assert (ctl.producer_id, ctl.producer_epoch) == (t.pid, t.epoch)
    assert marker_type(ctl) == (0, 1)
    assert k.list_offsets(c, topic_name, 0, LATEST, isolation=1)["Offset"] == 3
    # A second transaction of the same producer, aborted.
    assert t.add(topic_name) == {(topic_name, 0): NONE}
    assert t.send(topic_name, [b"a0"]) == (NONE, 3)
    assert t.end(False) == NONE
    p, batches = wait_stable(c, topic_name, 5, offset=3)
    assert p["LastStableOffset"] == 5, p
    assert [(a["ProducerId"], a["FirstOffset"]) for a in p["AbortedTransactions"]] == \
        [(t.pid, 3)], p
    assert marker_type(batches[-1]) == (0, 0)
    # read_uncommitted gets no aborted list.
    p, _ = read(c, topic_name, 0, offset=3)
    assert not p["AbortedTransactions"], p
    c.close()


def test_coordinator_checks(broker, topic_name):
    c = new_topic(broker.bootstrap, topic_name, 2)
    tid = txn_id()
    find_txn_coordinator(c, tid)
    r = c.request(22, 4, {"TransactionalId": tid, "TransactionTimeoutMs": 900001,
                          "ProducerId": -1, "ProducerEpoch": -1})
    assert r["ErrorCode"] == INVALID_TRANSACTION_TIMEOUT, r
    t = Txn(c, tid)
    assert t.epoch == 0
    # Nothing open: EndTxn is a state error.
    assert t.end(True, retry=False) == INVALID_TXN_STATE
    # Wrong epoch, unknown id.
    assert t.add(topic_name, epoch=t.epoch + 1) == {(topic_name, 0): PRODUCER_FENCED}
    other = Txn.__new__(Txn)
    other.c, other.tid, other.pid, other.epoch, other.seq = c, txn_id(), t.pid, 0, {}
    assert other.add(topic_name) == {(topic_name, 0): INVALID_PRODUCER_ID_MAPPING}
    # An unknown partition fails the request: the others are not attempted.
    got = t.add(topic_name, parts=(0, 7))
    assert got == {(topic_name, 0): 55, (topic_name, 7): 3}, got
    # A transactional batch for a partition not in the transaction.
    assert t.add(topic_name, parts=(0,)) == {(topic_name, 0): NONE}
    assert t.send(topic_name, [b"x"], part=1)[0] == INVALID_TXN_STATE
    assert t.send(topic_name, [b"x"], part=0)[0] == NONE
    assert t.end(True) == NONE
    # A retried commit succeeds (Kafka answers CONCURRENT_TRANSACTIONS while its markers
    # are written: retried); an abort of the committed transaction does not.
    assert t.end(True) == NONE
    assert t.end(False, retry=False) == INVALID_TXN_STATE
    # A new producer instance bumps the epoch and fences the old one.
    old = t.epoch
    t.init()
    assert t.epoch == old + 1
    assert t.add(topic_name, epoch=old) == {(topic_name, 0): PRODUCER_FENCED}
    assert t.end(True, epoch=old, retry=False) == PRODUCER_FENCED
    c.close()


def test_offsets_visible_at_commit(broker, topic_name):
    c = new_topic(broker.bootstrap, topic_name)
    group = "g2011-" + uuid.uuid4().hex[:8]
    t = Txn(c, txn_id())
    r = c.request(25, 3, {"TransactionalId": t.tid, "ProducerId": t.pid,
                          "ProducerEpoch": t.epoch, "GroupId": group})
    assert r["ErrorCode"] == NONE, r
    kg.find_coordinator(c, group)
    r = c.request(28, 3, {"TransactionalId": t.tid, "GroupId": group, "ProducerId": t.pid,
                          "ProducerEpoch": t.epoch, "GenerationId": -1, "MemberId": "",
                          "GroupInstanceId": None,
                          "Topics": [{"Name": topic_name, "Partitions": [
                              {"PartitionIndex": 0, "CommittedOffset": 5,
                               "CommittedLeaderEpoch": -1, "CommittedMetadata": "m"}]}]})
    assert [p["ErrorCode"] for tp in r["Topics"] for p in tp["Partitions"]] == [NONE], r
    _, offs = kg.fetch_offsets(c, group, {topic_name: [0]})
    assert offs[(topic_name, 0)][0] == -1, offs
    # A consumer asking for stable offsets (KIP-447) is told to wait.
    r = c.request(9, 7, {"GroupId": group, "RequireStable": True,
                         "Topics": [{"Name": topic_name, "PartitionIndexes": [0]}]})
    assert [(p["CommittedOffset"], p["ErrorCode"]) for t in r["Topics"]
            for p in t["Partitions"]] == [(-1, UNSTABLE_OFFSET_COMMIT)], r
    assert t.end(True) == NONE
    # Kafka makes them visible when its marker reaches the group's offsets partition,
    # just after answering; Skiff before answering.
    deadline = time.time() + 10
    while True:
        _, offs = kg.fetch_offsets(c, group, {topic_name: [0]})
        if offs[(topic_name, 0)][0] != -1 or time.time() > deadline:
            break
        time.sleep(0.1)
    assert offs[(topic_name, 0)][:2] == (5, "m"), offs
    c.close()


def test_timeout_aborts_and_fences(broker, topic_name):
    c = new_topic(broker.bootstrap, topic_name)
    t = Txn(c, txn_id(), timeout_ms=1000)
    assert t.add(topic_name) == {(topic_name, 0): NONE}
    assert t.send(topic_name, [b"late"]) == (NONE, 0)
    # Kafka checks timeouts every 10 s (transaction.abort.timed.out.transaction.cleanup
    # .interval.ms), Skiff every second.
    deadline = time.time() + 25
    while True:
        p, batches = read(c, topic_name, 1)
        if p["LastStableOffset"] == 2 or time.time() > deadline:
            break
        time.sleep(0.3)
    assert p["LastStableOffset"] == 2 and p["HighWatermark"] == 2, p
    assert [(a["ProducerId"], a["FirstOffset"]) for a in p["AbortedTransactions"]] == \
        [(t.pid, 0)], p
    assert batches[-1].producer_epoch == t.epoch + 1 and marker_type(batches[-1]) == (0, 0)
    assert t.end(True, retry=False) == PRODUCER_FENCED
    c.close()


@pytest.mark.restarts
def test_state_survives_sigkill(broker_factory, topic_name):
    b = broker_factory()
    c = new_topic(b.bootstrap, topic_name)
    committed, aborted = Txn(c, txn_id()), Txn(c, txn_id())
    for t, v in ((committed, b"keep"), (aborted, b"drop")):
        assert t.add(topic_name) == {(topic_name, 0): NONE}
        assert t.send(topic_name, [v])[0] == NONE
    c.close()
    b.kill()   # SIGKILL with two open transactions
    b.start()
    c = k.Conn(b.bootstrap)
    committed.c = aborted.c = c
    p, _ = read(c, topic_name, 1)
    assert p["LastStableOffset"] == 0 and p["HighWatermark"] == 2, p
    # The coordinator remembers both: one is committed by its producer...
    assert committed.end(True) == NONE
    # ...the other is aborted by a new instance of its producer (same id, epoch fenced).
    r = c.request(22, 4, {"TransactionalId": aborted.tid, "TransactionTimeoutMs": 60000,
                          "ProducerId": -1, "ProducerEpoch": -1})
    assert r["ErrorCode"] == CONCURRENT_TRANSACTIONS, r
    old = (aborted.pid, aborted.epoch)
    aborted.init()
    assert aborted.pid == old[0] and aborted.epoch == old[1] + 2
    p, batches = wait_stable(c, topic_name, 4)
    assert p["LastStableOffset"] == 4, p
    assert [(a["ProducerId"], a["FirstOffset"]) for a in p["AbortedTransactions"]] == \
        [(old[0], 1)], p
    data = [r.value for x in batches if not x.is_control for r in x.records]
    assert data == [b"keep", b"drop"]
    # And after another restart the index is rebuilt the same.
    c.close()
    b.kill()
    b.start()
    with k.Conn(b.bootstrap) as c:
        p2, _ = read(c, topic_name, 1)
        assert (p2["LastStableOffset"], p2["AbortedTransactions"]) == \
            (4, p["AbortedTransactions"]), p2


def test_list_and_describe_transactions(broker, topic_name):
    """What kafka-transactions.sh list / describe show."""
    c = new_topic(broker.bootstrap, topic_name, 2)
    t = Txn(c, txn_id())
    assert t.add(topic_name, parts=(0, 1)) == {(topic_name, 0): NONE, (topic_name, 1): NONE}
    r = c.request(66, 1, {"StateFilters": ["Ongoing", "Bogus"], "ProducerIdFilters": [t.pid],
                          "DurationFilter": -1})
    assert r["ErrorCode"] == NONE and r["UnknownStateFilters"] == ["Bogus"], r
    assert [(x["TransactionalId"], x["ProducerId"], x["TransactionState"])
            for x in r["TransactionStates"]] == [(t.tid, t.pid, "Ongoing")], r
    r = c.request(65, 0, {"TransactionalIds": [t.tid, txn_id()]})
    known, unknown = r["TransactionStates"]
    assert known["ErrorCode"] == NONE and known["TransactionState"] == "Ongoing", known
    assert (known["ProducerId"], known["ProducerEpoch"], known["TransactionTimeoutMs"]) == \
        (t.pid, t.epoch, 60000), known
    assert known["TransactionStartTimeMs"] > 0, known
    assert [(x["Topic"], sorted(x["Partitions"])) for x in known["Topics"]] == \
        [(topic_name, [0, 1])], known
    assert unknown["ErrorCode"] == 105, unknown  # TRANSACTIONAL_ID_NOT_FOUND
    # kafka-transactions.sh describe-producers: the open transaction's first offset.
    assert t.send(topic_name, [b"x"], part=1) == (NONE, 0)
    r = c.request(61, 0, {"Topics": [{"Name": topic_name, "PartitionIndexes": [1]}]})
    ps = r["Topics"][0]["Partitions"][0]["ActiveProducers"]
    assert [(x["ProducerId"], x["CurrentTxnStartOffset"]) for x in ps] == [(t.pid, 0)], r
    assert t.end(False) == NONE
    deadline = time.time() + 15
    while True:
        r = c.request(66, 1, {"StateFilters": ["Ongoing"], "ProducerIdFilters": [t.pid],
                              "DurationFilter": -1})
        if not r["TransactionStates"] or time.time() > deadline:
            break
        time.sleep(0.1)
    assert r["TransactionStates"] == [], r
    c.close()
