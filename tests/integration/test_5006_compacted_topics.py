"""Compacted topics (issue 12, "Compacted topics"): cleanup.policy=compact and
compact,delete are accepted, stored, described and altered as Kafka 4.3 checks
them, and a record without a key is refused on a compacted topic as Kafka
refuses it (INVALID_RECORD). Expectations hold against Apache Kafka too.
"""

import os
import sys
import time

import pytest

import kgroup as kg
import keyed
import kproto

INVALID_CONFIG = 40
INVALID_RECORD = 87
TOPIC = 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def conn(broker):
    c = kg.connect(broker.bootstrap)
    yield c
    c.close()


def incr(c, name, ops):
    r = c.request(44, 1, {"Resources": [{"ResourceType": TOPIC, "ResourceName": name, "Configs": [
        {"Name": k, "ConfigOperation": op, "Value": v} for k, op, v in ops]}],
        "ValidateOnly": False})
    x = r["Responses"][0]
    return x["ErrorCode"], x["ErrorMessage"]


def described(c, name):
    r = kg.describe_configs(c, TOPIC, name)["Results"][0]
    assert r["ErrorCode"] == 0, r
    return {x["Name"]: (x["Value"], x["ConfigSource"]) for x in r["Configs"]}


def test_cleanup_policy_round_trip(conn, topic_name):
    c = conn
    r = kproto.create_topics(c, [(topic_name, 1, 1, {"cleanup.policy": "compact"})])["Topics"][0]
    assert r["ErrorCode"] == 0, r
    got = {x["Name"]: x["Value"] for x in r["Configs"]}
    assert got["cleanup.policy"] == "compact", got
    kproto.wait_topic(c, topic_name, 1)
    assert described(c, topic_name)["cleanup.policy"] == ("compact", 1)
    # Both, in either order and with blanks, kept as Kafka's list parsing leaves them.
    for value in ("compact,delete", "delete, compact"):
        assert incr(c, topic_name, [("cleanup.policy", SET, value)])[0] == 0, value
        assert described(c, topic_name)["cleanup.policy"] == (value.replace(" ", ""), 1)
    assert incr(c, topic_name, [("cleanup.policy", SUBTRACT, "delete")])[0] == 0
    assert described(c, topic_name)["cleanup.policy"] == ("compact", 1)
    assert incr(c, topic_name, [("cleanup.policy", APPEND, "delete")])[0] == 0
    assert described(c, topic_name)["cleanup.policy"] == ("compact,delete", 1)
    # Kafka keeps each item once; the empty list (Kafka 4.2+) means neither.
    for value, stored in (("compact,compact", "compact"), (" compact ", "compact"), ("", ""),
                          ("compact,delete", "compact,delete")):
        assert incr(c, topic_name, [("cleanup.policy", SET, value)])[0] == 0, value
        assert described(c, topic_name)["cleanup.policy"] == (stored, 1), value
    for bad in ("Compact", "compact;delete", "shrink", "compact,"):
        err, msg = incr(c, topic_name, [("cleanup.policy", SET, bad)])
        assert err == INVALID_CONFIG and "cleanup.policy" in msg, (bad, err, msg)
    assert described(c, topic_name)["cleanup.policy"] == ("compact,delete", 1)
    for name, value in (("delete.retention.ms", "1000"), ("min.compaction.lag.ms", "0"),
                        ("max.compaction.lag.ms", "60000"), ("min.cleanable.dirty.ratio", "0.01")):
        assert incr(c, topic_name, [(name, SET, value)])[0] == 0, name
        assert described(c, topic_name)[name] == (value, 1), name
    assert incr(c, topic_name, [("cleanup.policy", DELETE, None)])[0] == 0
    assert described(c, topic_name)["cleanup.policy"][0] == "delete"


def test_null_key_refused_on_compacted_topic(conn, topic_name):
    c = conn
    kproto.create_topic(c, topic_name, 1, {"cleanup.policy": "compact"})
    keyed = kproto.batch(records=[kproto.Record("v1", key="k1"), kproto.Record("v2", key="k2")])
    r = kproto.produce(c, topic_name, 0, keyed, version=9)
    assert r["ErrorCode"] == 0 and r["BaseOffset"] == 0, r
    mixed = kproto.batch(records=[kproto.Record("v3", key="k3"), kproto.Record("v4")])
    r = kproto.produce(c, topic_name, 0, mixed, version=9)
    assert r["ErrorCode"] == INVALID_RECORD, r
    assert [e["BatchIndex"] for e in r["RecordErrors"]] == [1], r
    # Nothing of the refused batch was written; a delete topic takes null keys.
    assert kproto.list_offsets(c, topic_name, 0, -1)["Offset"] == 2
    assert incr(c, topic_name, [("cleanup.policy", SET, "delete")])[0] == 0
    deadline = time.time() + 20  # Kafka applies a topic's new config asynchronously
    while True:
        r = kproto.produce(c, topic_name, 0, mixed, version=9)
        if r["ErrorCode"] != INVALID_RECORD or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r["ErrorCode"] == 0 and r["BaseOffset"] == 2, r


# ---- compaction on skiffd's objects ----

KEYS = 50
ROUNDS = 12
DEAD = 10  # keys k0..k9 get a tombstone in the round before the last


def produce_rounds(bootstrap, topic):
    """Rounds of an update of every key (lz4 batches), each acknowledged before the
    next; the keys below DEAD get a tombstone in the round before the last, and the
    last round updates the others only. Returns {key: (offset, value)} of the latest."""
    from confluent_kafka import Producer
    latest, errors = {}, []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            latest[msg.key().decode()] = (msg.offset(), msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "compression.type": "lz4", "enable.idempotence": True})
    for r in range(ROUNDS):
        for i in range(KEYS):
            if r == ROUNDS - 2 and i < DEAD:
                p.produce(topic, key=b"k%d" % i, value=None, partition=0, on_delivery=on_delivery)
            elif r < ROUNDS - 1 or i >= DEAD:
                p.produce(topic, key=b"k%d" % i, value=b"r%d-k%d" % (r, i) * 20, partition=0,
                          on_delivery=on_delivery)
        assert p.flush(30) == 0 and not errors, errors[:3]
        time.sleep(0.35)  # an upload between rounds: several objects
    return latest


def compacted_as_expected(got, latest, tombstones):
    """What is wrong with got, a log compacted down to `latest` (with or without the
    tombstones); None when nothing."""
    want = {kk: v for kk, v in latest.items() if tombstones or v[1] is not None}
    have = {}
    for off, kk, v in got:
        if kk in have:
            return "key %s twice (offsets %d and %d)" % (kk, have[kk][0], off)
        have[kk] = (off, v)
    if have != want:
        diff = sorted(kk for kk in set(have) | set(want) if have.get(kk) != want.get(kk))
        return "%d keys differ, e.g. %s: have %r, want %r" % (
            len(diff), diff[0], have.get(diff[0]), want.get(diff[0]))
    return None


def wait_compacted(b, topic, latest, hw, tombstones, timeout):
    deadline = time.time() + timeout
    while True:
        got = keyed.read_partition(b.bootstrap, topic, hw, "t5006-" + topic)
        why = compacted_as_expected(got, latest, tombstones)
        if why is None:
            return got
        assert time.time() < deadline, "not compacted after %ds: %s" % (timeout, why)
        time.sleep(0.5)


def cleaner_props(s3, prefix, **extra):
    import s3env
    # Object compaction merges nothing (small.object.bytes=1) and splits late, so the
    # cleaner's passes are what rewrites the objects here.
    return s3env.s3_props(
        s3.url(prefix), s3_wal_upload_interval_ms=250, s3_compaction_interval_ms=300,
        s3_compaction_small_object_bytes=1, s3_object_delete_delay_ms=1000,
        log_cleaner_backoff_ms=0, **extra)


def test_compaction_keeps_latest_per_key(broker_factory, s3, topic_name):
    import s3env
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
    import ktest
    prefix = s3.new_prefix("t5006")
    b = broker_factory(cleaner_props(s3, prefix))
    s3env.create_topic(b, topic_name, 1, {"cleanup.policy": "compact",
                                          "min.cleanable.dirty.ratio": "0.01",
                                          "delete.retention.ms": "5000"})
    latest = produce_rounds(b.bootstrap, topic_name)
    hw = ROUNDS * KEYS - DEAD
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        assert kproto.list_offsets(c, topic_name, 0, -1)["Offset"] == hw
    got = wait_compacted(b, topic_name, latest, hw, True, 60)
    m = s3env.metrics(b)
    assert m["skiff_log_cleaner_passes_total"] >= 1, m
    assert m["skiff_log_cleaner_records_removed_total"] >= hw - KEYS - 5, m
    # Offsets did not move: the high watermark and the log start stay.
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        assert kproto.list_offsets(c, topic_name, 0, -1)["Offset"] == hw
        assert kproto.list_offsets(c, topic_name, 0, -2)["Offset"] == 0
    # kcat reads across the gaps too, and sees the same records.
    out = ktest.run([ktest.which("kcat"), "-b", b.bootstrap, "-C", "-t", topic_name, "-p", "0",
                     "-o", "beginning", "-e", "-Z", "-f", "%o %k %S\\n"], timeout=60,
                    what="kcat consumer").stdout
    lines = [ln.split() for ln in out.decode().splitlines() if ln.strip()]
    assert [(int(o), kk) for o, kk, _ in lines] == [(o, kk) for o, kk, _ in got], out[:400]
    # Tombstones go once delete.retention.ms has passed since the pass that kept them.
    got = wait_compacted(b, topic_name, latest, hw, False, 60)
    assert len(got) == KEYS - DEAD
    # A restart reads the same from the objects alone.
    b.kill()
    b.overrides["wal.cache.bytes"] = "0"
    b.start()
    assert compacted_as_expected(keyed.read_partition(b.bootstrap, topic_name, hw, "t5006-" + topic_name), latest, False) is None
    s3env.wait_no_orphans(s3, prefix, b, 30)
    print("5006 compaction: %d of %d records left, %d passes" % (
        len(got), hw, s3env.metrics(b)["skiff_log_cleaner_passes_total"]))


def read_isolated(bootstrap, topic, committed):
    """{key: [values]} of partition 0 from the beginning, read_committed or not."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t5006-txn-%d" % committed,
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50,
                  "isolation.level": "read_committed" if committed else "read_uncommitted",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    out, deadline = {}, time.time() + 30
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is None:
                continue
            if m.error():
                if m.error().code() == -191:  # _PARTITION_EOF
                    break
                continue
            out.setdefault(m.key().decode(), []).append(m.value())
    finally:
        c.close()
    return out


def test_compaction_removes_aborted_transactions(broker_factory, s3, topic_name):
    """Records of an aborted transaction are removed by compaction, as Kafka's cleaner
    removes them; committed transactional records are compacted like any other."""
    from confluent_kafka import Producer
    import s3env
    prefix = s3.new_prefix("t5006t")
    b = broker_factory(cleaner_props(s3, prefix))
    s3env.create_topic(b, topic_name, 1, {"cleanup.policy": "compact",
                                          "min.cleanable.dirty.ratio": "0.01"})
    p = Producer({"bootstrap.servers": b.bootstrap, "transactional.id": "t5006-" + topic_name,
                  "linger.ms": 5})
    p.init_transactions(30)
    for tag, keys, commit in ((b"c1", range(10), True), (b"ab", range(15), False),
                              (b"c3", range(5, 10), True)):
        p.begin_transaction()
        for i in keys:
            p.produce(topic_name, key=b"k%d" % i, value=tag, partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
        time.sleep(0.4)  # an upload each
    want = {"k%d" % i: [b"c1" if i < 5 else b"c3"] for i in range(10)}
    deadline = time.time() + 60
    while True:
        got = read_isolated(b.bootstrap, topic_name, False)
        if got == want:
            break
        assert time.time() < deadline, "read_uncommitted after compaction: %r" % got
        time.sleep(0.5)
    assert read_isolated(b.bootstrap, topic_name, True) == want
    m = s3env.metrics(b)
    assert m["skiff_log_cleaner_records_removed_total"] >= 15 + 5, m
