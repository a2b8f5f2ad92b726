"""SIGKILL of the node while keyed topics are compacted under load (issue 12,
"Compacted topics").

Between the PUT of a pass's object and its registration: uploads here write
StreamSetObjects and passes StreamObjects, so a proxy in front of the emulator holds the
answer to the first StreamObject PUT (the object is stored), and the node is killed. The
sources stay registered and every record is read back; the pass runs again after the
restart and the orphan GC deletes the unregistered object.

At random moments: a compacted topic (min.cleanable.dirty.ratio 0.01, the cleaner's backoff 0, uploads
every 200 ms) takes updates of 400 keys from an idempotent acks=all producer while the
node is killed five times at random moments, compaction passes running every few
hundred milliseconds. Afterwards, for every key, the last acknowledged value is
readable at its offset, or a later record of the key is (a record written but not
acknowledged before a kill); offsets increase; no stream range is registered twice;
and once the orphan GC has run, the bucket holds exactly the registered objects.
"""

import random
import threading
import time

import pytest

import keyed
import kproto
import s3env
from s3proxy import S3Proxy

pytestmark = pytest.mark.restarts

KEYS = 400


def test_sigkill_during_compaction(broker_factory, s3, topic_name):
    from confluent_kafka import Producer
    prefix = s3.new_prefix("t5007")
    b = broker_factory(s3env.s3_props(
        s3.url(prefix), s3_wal_upload_interval_ms=200, s3_compaction_interval_ms=200,
        s3_compaction_small_object_bytes=1, s3_object_delete_delay_ms=500,
        log_cleaner_backoff_ms=0, s3_orphan_min_age_ms=1000, s3_orphan_gc_interval_ms=700))
    s3env.create_topic(b, topic_name, 1, {"cleanup.policy": "compact",
                                          "min.cleanable.dirty.ratio": "0.01"})
    acked, errors, stop = {}, [], threading.Event()

    def on_delivery(err, msg):
        if err is not None:
            errors.append(str(err))
        else:
            k = msg.key().decode()
            if msg.offset() > acked.get(k, (-1, None))[0]:
                acked[k] = (msg.offset(), msg.value())

    def produce():
        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5,
                      "enable.idempotence": True, "message.timeout.ms": 120000,
                      "compression.type": "zstd"})
        n = 0
        while not stop.is_set():
            i = random.randrange(KEYS)
            try:
                p.produce(topic_name, key=b"k%d" % i, value=b"v%d-%d-" % (i, n) + b"x" * 300,
                          partition=0, on_delivery=on_delivery)
                n += 1
            except BufferError:
                p.poll(0.05)
            p.poll(0)
            if n % 200 == 0:
                time.sleep(0.02)
        assert p.flush(120) == 0

    th = threading.Thread(target=produce, daemon=True)
    th.start()
    passes = 0
    try:
        for _ in range(5):
            s3env.wait_metric(b, lambda m: m["skiff_log_cleaner_passes_total"] >= 1, 60,
                              "a compaction pass")
            time.sleep(random.uniform(0.0, 0.6))
            passes += s3env.metrics(b)["skiff_log_cleaner_passes_total"]
            b.kill()
            time.sleep(0.2)
            b.start()
    finally:
        stop.set()
        th.join(180)
    assert not th.is_alive(), "the producer did not finish"
    assert not errors, errors[:5]
    assert len(acked) == KEYS, len(acked)
    # Let the last records be uploaded and compacted, then read everything back.
    s3env.wait_metric(b, lambda m: m["skiff_log_cleaner_passes_total"] >= 1, 60, "a pass")
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        hw = kproto.list_offsets(c, topic_name, 0, -1)["Offset"]
    got = keyed.read_partition(b.bootstrap, topic_name, hw, "t5007-" + topic_name, 90)
    offsets = [o for o, _, _ in got]
    assert offsets == sorted(set(offsets)), "offsets not increasing"
    last = {}
    for off, k, v in got:
        last[k] = (off, v)
    lost = []
    for k, (off, v) in acked.items():
        have = last.get(k)
        if have is None or have[0] < off or (have[0] == off and have[1] != v):
            lost.append((k, off, have))
    assert not lost, "%d acknowledged latest values lost, e.g. %r" % (len(lost), lost[:3])
    for off, k, v in got:  # a surviving older record must not hide a later one
        assert off <= last[k][0]
    _, ranges = s3env.registry(b.data_dir)
    assert not s3env.registry_problems(ranges), s3env.registry_problems(ranges)[:3]
    s3env.wait_no_orphans(s3, prefix, b, 60)
    print("5007: %d records left of %d offsets, %d compaction passes seen before the kills" % (
        len(got), hw, passes))


def check_latest(b, topic, latest):
    """Every key's acknowledged latest value at its offset, and nothing older."""
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        hw = kproto.list_offsets(c, topic, 0, -1)["Offset"]
    got = keyed.read_partition(b.bootstrap, topic, hw, "t5007-" + topic, 90)
    last = {}
    for off, k, v in got:
        last[k] = (off, v)
    assert last == latest, sorted(k for k in latest if last.get(k) != latest[k])[:5]
    return got


def test_sigkill_between_pass_put_and_registration(broker_factory, s3, topic_name):
    from confluent_kafka import Producer
    prefix = s3.new_prefix("t5007b")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(s3env.s3_props(
            s3.url(prefix, proxy.port), s3_wal_upload_interval_ms=200,
            s3_compaction_interval_ms=200, s3_compaction_small_object_bytes=1,
            s3_object_delete_delay_ms=500, log_cleaner_backoff_ms=0,
            s3_orphan_min_age_ms=1000, s3_orphan_gc_interval_ms=700))
        s3env.create_topic(b, topic_name, 1, {"cleanup.policy": "compact",
                                              "min.cleanable.dirty.ratio": "0.01"})
        proxy.hold_response(methods=("PUT",), key_part="/so-")
        latest = {}

        def on_delivery(err, msg):
            assert err is None, err
            latest[msg.key().decode()] = (msg.offset(), msg.value())

        p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "linger.ms": 5})
        for r in range(6):
            for i in range(100):
                p.produce(topic_name, key=b"k%d" % i, value=b"r%d-%d" % (r, i), partition=0,
                          on_delivery=on_delivery)
            assert p.flush(30) == 0
            time.sleep(0.3)
        assert proxy.wait_held(1, 30), "no pass PUT a StreamObject"
        held = proxy.held_paths[0].split("?")[0].split("/%s/" % prefix.split("/")[-1], 1)[1]
        keys_before, _ = s3env.registry(b.data_dir)
        b.kill()
        proxy.passthrough()
        assert held in s3.keys(prefix, "data") and held not in keys_before, held
        b.start()
        s3env.wait_metric(b, lambda m: m["skiff_log_cleaner_passes_total"] >= 1, 60,
                          "a pass after the restart")
        got = check_latest(b, topic_name, latest)
        assert len(got) == 100, len(got)
        s3env.wait_no_orphans(s3, prefix, b, 60)
        assert held not in s3.keys(prefix, "data")
        _, ranges = s3env.registry(b.data_dir)
        assert not s3env.registry_problems(ranges), s3env.registry_problems(ranges)[:3]
