"""Idempotent producer: InitProducerId and the per-partition sequence checks.

Rules (Kafka 4.3.1, measured): a duplicate of any of the last 5 batches is answered
NONE with the original base offset and not appended; a gap -> OUT_OF_ORDER_SEQUENCE
(45); an epoch below the current one -> INVALID_PRODUCER_EPOCH (47); a new epoch must
start at sequence 0 (else 45); a producer id with no state accepts any sequence;
baseSequence < 0 with a producer id -> INVALID_RECORD (87).
"""

import pytest

import harness
import kproto as k

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="Skiff-specific expectation (differs from Kafka)")


class Idem:
    """Sends idempotent batches for one producer id to one partition."""

    def __init__(self, conn, topic, pid, partition=0, version=9):
        self.c, self.topic, self.pid = conn, topic, pid
        self.partition, self.version = partition, version

    def send(self, seq, n=1, epoch=0, pid=None, tag=b""):
        values = [b"%s-%d-%d" % (tag, epoch, seq + i) for i in range(n)]
        b = k.batch(values, producer_id=self.pid if pid is None else pid,
                    producer_epoch=epoch, base_sequence=seq)
        pr = k.produce(self.c, self.topic, self.partition, b, version=self.version)
        return pr["ErrorCode"], pr["BaseOffset"]


def log_values(c, topic, partition=0):
    out = []
    offset = 0
    while True:
        _, p = k.fetch(c, topic, partition, offset)
        batches = k.parse_batches(p["Records"])
        if not batches:
            return out
        for b in batches:
            out += [v for o, v in b.offsets_values() if o >= offset]
        offset = batches[-1].last_offset + 1


@pytest.fixture
def setup(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
        r = k.init_producer_id(c, 4)
        assert r["ErrorCode"] == k.NONE
        yield c, topic_name, r["ProducerId"]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_init_producer_id_distinct(broker, version):
    with k.Conn(broker.bootstrap) as c:
        ids = []
        for _ in range(5):
            r = k.init_producer_id(c, version)
            assert r["ErrorCode"] == k.NONE
            assert r["ProducerId"] >= 0 and r["ProducerEpoch"] == 0
            ids.append(r["ProducerId"])
    assert len(set(ids)) == len(ids)


def test_init_producer_id_with_existing_id_gives_a_new_one(broker):
    """Without a transactional id, a v3+ request carrying an id/epoch still gets a new
    id at epoch 0 (Kafka does not bump epochs for idempotent producers)."""
    with k.Conn(broker.bootstrap) as c:
        first = k.init_producer_id(c, 4)
        again = k.init_producer_id(c, 4, producer_id=first["ProducerId"], epoch=0)
        assert again["ErrorCode"] == k.NONE
        assert again["ProducerId"] != first["ProducerId"] and again["ProducerEpoch"] == 0


def test_duplicates_within_last_five_batches(setup):
    c, topic, pid = setup
    p = Idem(c, topic, pid)
    offsets = []
    for i in range(6):
        err, off = p.send(i * 2, 2)
        assert err == k.NONE
        offsets.append(off)
    assert offsets == [0, 2, 4, 6, 8, 10]
    # batches 1..5 are the last five: retried, each gets its original offset
    for i in (1, 5, 3, 2, 4):
        assert p.send(i * 2, 2) == (k.NONE, offsets[i])
    # batch 0 has left the window: it is now out of order
    assert p.send(0, 2)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER
    # a retry that does not match a batch exactly is out of order too
    assert p.send(6, 1)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert p.send(12, 1) == (k.NONE, 12)
    assert len(log_values(c, topic)) == 13


def test_out_of_order(setup):
    c, topic, pid = setup
    p = Idem(c, topic, pid)
    assert p.send(0, 3) == (k.NONE, 0)
    assert p.send(4)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER     # gap
    assert p.send(1)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER     # overlaps, not a duplicate
    assert p.send(3) == (k.NONE, 3)
    assert log_values(c, topic) == [b"-0-0", b"-0-1", b"-0-2", b"-0-3"]


def test_epochs(setup):
    c, topic, pid = setup
    p = Idem(c, topic, pid)
    assert p.send(0, 2, epoch=0) == (k.NONE, 0)
    assert p.send(5, epoch=1)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER   # new epoch, seq != 0
    assert p.send(0, epoch=1) == (k.NONE, 2)
    assert p.send(2, epoch=0)[0] == k.INVALID_PRODUCER_EPOCH          # stale
    assert p.send(0, epoch=0)[0] == k.INVALID_PRODUCER_EPOCH
    assert p.send(1, epoch=1) == (k.NONE, 3)
    assert p.send(0, epoch=7) == (k.NONE, 4)                          # jumps are fine
    assert p.send(0, epoch=1)[0] == k.INVALID_PRODUCER_EPOCH


def test_sequence_wraps_only_within_an_epoch(setup):
    c, topic, pid = setup
    p = Idem(c, topic, pid)
    # unknown producer: any sequence, even the last int32
    assert p.send(2147483646, 1)[0] == k.NONE
    assert p.send(2147483647, 1)[0] == k.NONE
    assert p.send(0, 1)[0] == k.NONE                                  # wraps to 0
    assert p.send(1, 1)[0] == k.NONE


def test_unknown_producer_accepts_any_sequence(setup):
    c, topic, pid = setup
    p = Idem(c, topic, pid)
    stranger = pid + 100000   # never handed out by InitProducerId
    assert p.send(42, pid=stranger, epoch=3) == (k.NONE, 0)
    assert p.send(43, pid=stranger, epoch=3) == (k.NONE, 1)
    assert p.send(42, pid=stranger, epoch=3) == (k.NONE, 0)          # duplicate
    assert p.send(45, pid=stranger, epoch=3)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER


def test_negative_base_sequence(setup):
    c, topic, pid = setup
    p = Idem(c, topic, pid)
    for seq in (-1, -5):
        assert p.send(seq)[0] == k.INVALID_RECORD
    assert p.send(0) == (k.NONE, 0)


def test_state_is_per_partition_and_per_producer(setup):
    c, topic, pid = setup
    p0 = Idem(c, topic, pid, partition=0)
    p1 = Idem(c, topic, pid, partition=1)
    assert p0.send(0, 3)[0] == k.NONE
    assert p1.send(0, 1)[0] == k.NONE        # partition 1 starts at 0 too
    assert p1.send(3)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER
    other = k.init_producer_id(c, 4)["ProducerId"]
    assert p0.send(0, pid=other)[0] == k.NONE
    assert p0.send(3)[0] == k.NONE


def test_non_idempotent_batches_are_never_deduplicated(setup):
    c, topic, _ = setup
    b = k.batch([b"same"])
    assert [k.produce(c, topic, 0, b)["BaseOffset"] for _ in range(3)] == [0, 1, 2]


def test_duplicate_keeps_other_flexible_versions(setup):
    """Dedup works whatever Produce version the retry uses."""
    c, topic, pid = setup
    first = Idem(c, topic, pid, version=3).send(0, 2)
    assert first == (k.NONE, 0)
    for v in (7, 9):
        assert Idem(c, topic, pid, version=v).send(0, 2) == (k.NONE, 0)


def test_real_idempotent_producer(broker, topic_name):
    from confluent_kafka import Producer
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
    p = Producer({"bootstrap.servers": broker.bootstrap, "enable.idempotence": True,
                  "linger.ms": 2})
    acked = []
    for i in range(200):
        p.produce(topic_name, value=b"%d" % i, partition=i % 2,
                  on_delivery=lambda e, m: acked.append(e is None))
    assert p.flush(30) == 0
    assert acked == [True] * 200
    with k.Conn(broker.bootstrap) as c:
        vals = log_values(c, topic_name, 0) + log_values(c, topic_name, 1)
        _, part = k.fetch(c, topic_name, 0, 0)
        pids = {b.producer_id for b in k.parse_batches(part["Records"])}
    assert sorted(vals, key=int) == [b"%d" % i for i in range(200)]
    assert len(pids) == 1 and min(pids) >= 0


def test_transactional_producer_initialises(broker):
    """A transactional producer finds its coordinator and gets a producer id at once
    (docs/transactions.md); a raw InitProducerId with a transactional id gets one too."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": broker.bootstrap, "transactional.id": "t2004-txn"})
    p.init_transactions(30)
    with k.Conn(broker.bootstrap) as c:
        r = c.request(22, 4, {"TransactionalId": "t2004-raw", "TransactionTimeoutMs": 60000,
                              "ProducerId": -1, "ProducerEpoch": -1})
    assert r["ErrorCode"] == 0 and r["ProducerId"] >= 0 and r["ProducerEpoch"] == 0, r


@skiff_only
def test_producer_ids_never_reused_across_restarts(broker_factory):
    b = broker_factory()
    seen = set()
    for round_ in range(3):
        with k.Conn(b.bootstrap) as c:
            for _ in range(5):
                r = k.init_producer_id(c, 4)
                assert r["ErrorCode"] == k.NONE
                assert r["ProducerId"] not in seen, "id %d reused after restart %d" % (
                    r["ProducerId"], round_)
                seen.add(r["ProducerId"])
        if round_ == 0:
            b.kill()        # SIGKILL
        else:
            assert b.stop() == 0
        b.start()


@skiff_only
def test_producer_state_survives_sigkill(broker_factory, topic_name):
    b = broker_factory()
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        pid = k.init_producer_id(c, 4)["ProducerId"]
        p = Idem(c, topic_name, pid)
        offsets = [p.send(i * 3, 3)[1] for i in range(5)]
        assert offsets == [0, 3, 6, 9, 12]
        assert p.send(0, epoch=2) == (k.NONE, 15)       # epoch 2 now current
        assert p.send(1, epoch=2) == (k.NONE, 16)
    b.kill()
    b.start()
    with k.Conn(b.bootstrap) as c:
        p = Idem(c, topic_name, pid)
        assert p.send(1, epoch=2) == (k.NONE, 16)       # duplicate -> original offset
        assert p.send(0, epoch=2) == (k.NONE, 15)
        assert p.send(0, epoch=1)[0] == k.INVALID_PRODUCER_EPOCH
        assert p.send(3, epoch=2)[0] == k.OUT_OF_ORDER_SEQUENCE_NUMBER
        assert p.send(2, epoch=2) == (k.NONE, 17)
        assert len(log_values(c, topic_name)) == 18
    # and once more, after a clean shutdown
    assert b.stop() == 0
    b.start()
    with k.Conn(b.bootstrap) as c:
        p = Idem(c, topic_name, pid)
        assert p.send(2, epoch=2) == (k.NONE, 17)
        assert p.send(3, epoch=2) == (k.NONE, 18)
