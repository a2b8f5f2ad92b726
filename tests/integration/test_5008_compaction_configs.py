"""Compacted topics (issue 12): what a consumer sees, also against Apache Kafka, and the
configurations that steer compaction on skiffd.

- Against both: a topic with cleanup.policy=compact, segment.ms=100 and
  min.cleanable.dirty.ratio=0.01 takes rounds of updates (and tombstones) of 30 keys,
  then records of a filler key that roll Kafka's segments; a consumer reading from the
  beginning (librdkafka through confluent-kafka, kcat, the Java console consumer) ends up with
  exactly one record per key, the latest, at the offset its producer was given.
- On skiffd: a dedupe buffer of 4 KiB (153 keys) cannot hold the 600 keys of the topic:
  compaction takes several passes and still converges; a topic with
  min.compaction.lag.ms of ten minutes is left alone; compact,delete also applies
  retention.ms; with min.cleanable.dirty.ratio=1, max.compaction.lag.ms alone gets new
  updates compacted.
"""

import os
import re
import sys
import time

import pytest

import harness
import keyed
import kproto

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import ktest  # noqa: E402

FILLER = "zz-filler"


@pytest.fixture
def cbroker(broker_factory, request):
    """skiffd with uploads and compaction every few hundred ms, or the external Kafka."""
    if harness.external():
        return harness.ExternalBroker(harness.external())
    s3 = request.getfixturevalue("s3")
    import s3env
    return broker_factory(s3env.s3_props(
        s3.url(s3.new_prefix("t5008")), s3_wal_upload_interval_ms=250,
        s3_compaction_interval_ms=300, s3_compaction_small_object_bytes=1,
        s3_object_delete_delay_ms=1000, log_cleaner_backoff_ms=0,
        log_cleaner_dedupe_buffer_size=4096))


def produce(bootstrap, topic, records, pause=0.0):
    """records: [(key, value or None)]; returns {key: (offset, value)} of the latest."""
    from confluent_kafka import Producer
    latest, errors = {}, []

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            latest[msg.key().decode()] = (msg.offset(), msg.value())

    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for k, v in records:
        p.produce(topic, key=k.encode(), value=v, partition=0, on_delivery=on_delivery)
        if pause:
            assert p.flush(30) == 0
            time.sleep(pause)
    assert p.flush(30) == 0 and not errors, errors[:3]
    return latest


def read_all(bootstrap, topic, hw):
    return keyed.read_partition(bootstrap, topic, hw, "t5008-%s-%d" % (topic, hw))


def hw_of(bootstrap, topic):
    with kproto.Conn(bootstrap, timeout=30) as c:
        return kproto.list_offsets(c, topic, 0, -1)["Offset"]


def one_per_key(got, latest, skip=()):
    """None when got holds exactly the latest record of each key (keys in skip aside)."""
    have = {}
    for off, k, v in got:
        if k in skip:
            continue
        if k in have:
            return "key %s at %d and %d" % (k, have[k][0], off)
        have[k] = (off, v)
    want = {k: v for k, v in latest.items() if k not in skip}
    if have != want:
        bad = sorted(k for k in set(have) | set(want) if have.get(k) != want.get(k))
        return "%d keys differ, e.g. %s: %r, want %r" % (len(bad), bad[0], have.get(bad[0]),
                                                         want.get(bad[0]))
    return None


def wait_one_per_key(b, topic, latest, timeout, skip=()):
    hw = hw_of(b.bootstrap, topic)
    deadline = time.time() + timeout
    while True:
        got = read_all(b.bootstrap, topic, hw)
        why = one_per_key(got, latest, skip)
        if why is None:
            return got
        assert time.time() < deadline, "not compacted after %ds: %s" % (timeout, why)
        time.sleep(1)


def test_consumers_see_latest_per_key(cbroker, topic_name):
    b = cbroker
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        kproto.create_topic(c, topic_name, 1, {"cleanup.policy": "compact", "segment.ms": "100",
                                               "min.cleanable.dirty.ratio": "0.01"})
    recs = [("k%02d" % i, b"r%d-%d" % (r, i)) for r in range(5) for i in range(30)]
    recs += [("k%02d" % i, None) for i in range(5)]  # tombstones, kept: delete.retention.ms 1 day
    latest = produce(b.bootstrap, topic_name, recs)
    # Later records roll Kafka's segment (segment.ms), so that the updates are cleanable;
    # skiffd uploads them into objects meanwhile.
    latest.update(produce(b.bootstrap, topic_name, [(FILLER, b"f")] * 4, pause=0.3))
    # Kafka's cleaner wakes every log.cleaner.backoff.ms (15 s by default).
    got = wait_one_per_key(b, topic_name, latest, 90, skip=(FILLER,))
    assert len([g for g in got if g[1] != FILLER]) == 30
    # kcat reads across the gaps too, and sees the same records.
    out = ktest.run([ktest.which("kcat"), "-b", b.bootstrap, "-C", "-t", topic_name, "-p", "0",
                     "-o", "beginning", "-e", "-f", "%o %k\\n"], timeout=60,
                    what="kcat").stdout.decode()
    seen = [(int(o), k) for o, k in (ln.split() for ln in out.splitlines() if ln.strip())]
    assert [x for x in seen if x[1] != FILLER] == [(o, k) for o, k, _ in got if k != FILLER], \
        out[:300]
    # So does the Java consumer (kafka-console-consumer).
    import jtools
    r = jtools.tools(["console-consumer", "--bootstrap-server", b.bootstrap, "--topic",
                      topic_name, "--from-beginning", "--max-messages", str(len(got)),
                      "--timeout-ms", "30000", "--property", "print.offset=true",
                      "--property", "print.key=true"], timeout=120)[0]
    java = [(int(m.group(1)), m.group(2)) for m in
            re.finditer(r"Offset:(\d+)\t(\S+)", r["out"])]
    assert [x for x in java if x[1] != FILLER] == [(o, k) for o, k, _ in got if k != FILLER], \
        jtools.show(r)


def test_small_dedupe_buffer_takes_several_passes(cbroker, topic_name):
    if harness.external():
        pytest.skip("skiffd's log.cleaner.dedupe.buffer.size is set by this test's node")
    import s3env
    b = cbroker
    s3env.create_topic(b, topic_name, 1, {"cleanup.policy": "compact",
                                          "min.cleanable.dirty.ratio": "0.01"})
    lagged = topic_name + "-lag"
    s3env.create_topic(b, lagged, 1, {"cleanup.policy": "compact",
                                      "min.compaction.lag.ms": "600000"})
    recs = [("k%03d" % i, b"r%d-%d" % (r, i)) for r in range(4) for i in range(600)]
    latest = produce(b.bootstrap, topic_name, recs)
    produce(b.bootstrap, lagged, recs[:1200])
    wait_one_per_key(b, topic_name, latest, 90)
    m = s3env.metrics(b)
    assert m["skiff_log_cleaner_passes_total"] >= 3, m["skiff_log_cleaner_passes_total"]
    # min.compaction.lag.ms: nothing of the young topic was compacted.
    hw = hw_of(b.bootstrap, lagged)
    assert len(read_all(b.bootstrap, lagged, hw)) == 1200 == hw


def test_compact_delete_applies_retention(cbroker, topic_name):
    if harness.external():
        pytest.skip("Kafka deletes only closed segments; skiffd's objects are checked here")
    import s3env
    b = cbroker
    b.overrides["log.retention.check.interval.ms"] = "300"
    b.kill()
    b.start()
    s3env.create_topic(b, topic_name, 1, {"cleanup.policy": "compact,delete",
                                          "retention.ms": "2000"})
    produce(b.bootstrap, topic_name, [("k%d" % i, b"v") for i in range(50)])
    deadline = time.time() + 60
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        while kproto.list_offsets(c, topic_name, 0, -2)["Offset"] < 50:
            assert time.time() < deadline, "retention.ms did not apply to compact,delete"
            time.sleep(0.3)


@pytest.mark.cluster
@pytest.mark.restarts
def test_cluster_main_compacts(cluster_factory, topic_name):
    """In a cluster, the partition's main compacts it; after the main is killed, the next
    main serves the compacted objects."""
    cl = cluster_factory(2, overrides={
        "s3.wal.upload.interval.ms": "250", "s3.compaction.interval.ms": "300",
        "s3.compaction.small.object.bytes": "1", "s3.object.delete.delay.ms": "1000",
        "log.cleaner.backoff.ms": "0"}).start()
    cl.create_topic(topic_name, 1, {"cleanup.policy": "compact",
                                    "min.cleanable.dirty.ratio": "0.01"})
    main = cl.nodes[cl.leaders(topic_name)[0][0]]
    recs = [("k%03d" % i, b"r%d-%d" % (r, i)) for r in range(4) for i in range(100)]
    latest = {}
    for r in range(4):  # a few uploads
        latest.update(produce(main.bootstrap, topic_name, recs[r * 100:(r + 1) * 100]))
        time.sleep(0.3)
    wait_one_per_key(main, topic_name, latest, 60)
    assert "[tier] compacted stream" in main.log_since_start()
    main.kill()
    deadline = time.time() + 60
    while True:
        leader = cl.leaders(topic_name, via=cl.live()[0])[0][0]
        if leader in cl.nodes and leader != main.node_id and cl.nodes[leader].alive:
            break
        assert time.time() < deadline, "no new main"
        time.sleep(0.2)
    got = wait_one_per_key(cl.nodes[leader], topic_name, latest, 30)
    assert len(got) == 100


def test_max_compaction_lag_overrides_the_dirty_ratio(cbroker, topic_name):
    """min.cleanable.dirty.ratio=1: after the first pass (everything dirty), more updates
    leave the ratio below 1; only max.compaction.lag.ms gets them compacted."""
    if harness.external():
        pytest.skip("on Kafka the ratio counts closed segments; skiffd's objects here")
    b = cbroker
    lagged, plain = topic_name + "-lag", topic_name + "-plain"
    import s3env
    s3env.create_topic(b, lagged, 1, {"cleanup.policy": "compact",
                                      "min.cleanable.dirty.ratio": "1",
                                      "max.compaction.lag.ms": "2000"})
    s3env.create_topic(b, plain, 1, {"cleanup.policy": "compact",
                                     "min.cleanable.dirty.ratio": "1"})
    first = [("k%02d" % i, b"a%d" % i) for i in range(40)]
    latest = {t: produce(b.bootstrap, t, first) for t in (lagged, plain)}
    # A first pass over each, with everything dirty, and covering all of it.
    deadline = time.time() + 60
    stream = {}
    while len(stream) < 2:  # the view knows the topics a moment after they are made
        stream = {t: s3env.streams_of(b.data_dir, t).get(0) for t in (lagged, plain)}
        stream = {t: v for t, v in stream.items() if v is not None}
        assert time.time() < deadline, "the view has no stream for the topics"
        time.sleep(0.1)
    while not all("compacted stream %d below offset 40:" % stream[t] in b.log_text()
                  for t in (lagged, plain)):
        assert time.time() < deadline, "no first pass over both topics"
        time.sleep(0.2)
    second = [("k%02d" % i, b"b%d" % i) for i in range(20)]
    for t in (lagged, plain):
        latest[t].update(produce(b.bootstrap, t, second))
    wait_one_per_key(b, lagged, latest[lagged], 60)
    got = read_all(b.bootstrap, plain, hw_of(b.bootstrap, plain))
    assert len(got) == 60, "a ratio below min.cleanable.dirty.ratio was compacted: %d" % len(got)
