"""Transactions spoken by hand over kproto (the raw transaction tests share it): a
transactional producer, read_committed reads, the last stable offset, markers."""

import struct
import time
import uuid

import kgroup as kg
import kproto as k

NONE = 0
INVALID_PRODUCER_EPOCH = 47
INVALID_TXN_STATE = 48
INVALID_PRODUCER_ID_MAPPING = 49
INVALID_TRANSACTION_TIMEOUT = 50
CONCURRENT_TRANSACTIONS = 51
UNSTABLE_OFFSET_COMMIT = 88
PRODUCER_FENCED = 90
ATTR_TXN = 0x10
LATEST = -1


def find_txn_coordinator(c, tid):
    """FindCoordinator for a transactional id, retried while Kafka creates and loads its
    transaction state topic (COORDINATOR_NOT_AVAILABLE)."""
    deadline = time.time() + 30
    while True:
        r = kg.find_coordinator(c, tid, 1)
        if r["ErrorCode"] not in (14, 15) or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r["ErrorCode"] == NONE, r
    return r


def txn_id(prefix="t2011"):
    return "%s-%s" % (prefix, uuid.uuid4().hex[:8])


class Txn:
    """One transactional producer, spoken by hand."""

    def __init__(self, c, tid, timeout_ms=60000):
        self.c, self.tid, self.seq = c, tid, {}
        # As clients do: the coordinator first (Kafka creates its transaction state
        # topic on the first look-up).
        find_txn_coordinator(c, tid)
        self.init(timeout_ms)

    def init(self, timeout_ms=60000, retry=True):
        deadline = time.time() + 30
        while True:
            r = self.c.request(22, 4, {"TransactionalId": self.tid,
                                       "TransactionTimeoutMs": timeout_ms,
                                       "ProducerId": -1, "ProducerEpoch": -1})
            if not retry or r["ErrorCode"] not in (14, 15, 16, CONCURRENT_TRANSACTIONS) \
                    or time.time() > deadline:
                break
            time.sleep(0.2)
        assert r["ErrorCode"] == NONE, r
        self.pid, self.epoch = r["ProducerId"], r["ProducerEpoch"]
        return r

    def add(self, topic, parts=(0,), epoch=None):
        r = self.c.request(24, 3, {"TransactionalId": self.tid, "ProducerId": self.pid,
                                   "ProducerEpoch": self.epoch if epoch is None else epoch,
                                   "Topics": [{"Name": topic, "Partitions": list(parts)}]})
        return {(t["Name"], p["PartitionIndex"]): p["ErrorCode"]
                for t in r["Results"] for p in t["Partitions"]}

    def send(self, topic, values, part=0, epoch=None):
        seq = self.seq.get((topic, part), 0)
        b = k.batch(values, producer_id=self.pid,
                    producer_epoch=self.epoch if epoch is None else epoch,
                    base_sequence=seq, attributes=ATTR_TXN)
        resp = self.c.request(0, 9, k.produce_body(topic, part, b, txn_id=self.tid))
        pr = resp["Responses"][0]["PartitionResponses"][0]
        if pr["ErrorCode"] == NONE:
            self.seq[(topic, part)] = seq + len(values)
        return pr["ErrorCode"], pr["BaseOffset"]

    def end(self, commit, epoch=None, retry=True):
        deadline = time.time() + 30
        while True:
            r = self.c.request(26, 3, {"TransactionalId": self.tid, "ProducerId": self.pid,
                                       "ProducerEpoch": self.epoch if epoch is None else epoch,
                                       "Committed": commit})
            if not retry or r["ErrorCode"] != CONCURRENT_TRANSACTIONS or time.time() > deadline:
                return r["ErrorCode"]
            time.sleep(0.1)


def new_topic(bootstrap, topic, parts=1):
    c = k.Conn(bootstrap)
    k.create_topic(c, topic, parts)
    k.wait_topic(c, topic, parts)
    return c


def read(c, topic, isolation, part=0, offset=0):
    """Fetch once: (partition dict, batches)."""
    _, p = k.fetch(c, topic, part, offset, isolation=isolation)
    return p, k.parse_batches(p["Records"])


def wait_stable(c, topic, lso, offset=0, timeout=15):
    """read_committed fetches until the last stable offset reaches lso (Kafka writes its
    markers just after answering EndTxn, Skiff before): (partition dict, batches)."""
    deadline = time.time() + timeout
    while True:
        p, batches = read(c, topic, 1, offset=offset)
        if p["LastStableOffset"] >= lso or time.time() > deadline:
            return p, batches
        time.sleep(0.1)


def marker_type(b):
    """(version, type) of a control batch's record key: type 0 abort, 1 commit."""
    assert b.is_control and b.attributes & ATTR_TXN, b.attributes
    assert len(b.records) == 1
    return struct.unpack(">hh", b.records[0].key)
