"""S3 failing, then stalling, then back, under a steady producer (issue "S3 sink", item 8).

The node's objects.url goes through s3proxy.py. While the proxy answers every request
503 SlowDown, and then holds every request until the client's timeout, uploads fail
and the WAL fills up to wal.max.retained.bytes; the node then refuses produce requests
with NOT_ENOUGH_REPLICAS (retriable: librdkafka retries them) and keeps
reading. The test checks:

- no loss: every acknowledged record is read back at its offset, and the producer
  reports no failed delivery and no fatal error;
- retriable errors only: a raw produce during the outage gets NOT_ENOUGH_REPLICAS
  (19) or succeeds, nothing else;
- bounded WAL: retained bytes stay within wal.max.retained.bytes plus what the node
  accepted before it noticed (wal.max.pending.bytes);
- bounded memory: RSS stays under a bound derived from the configuration: the RSS
  of the idle node, plus wal.cache.bytes, plus twice s3.wal.upload.threshold (the
  upload's batches and their growth by doubling), plus s3.block.cache.bytes, plus
  wal.max.pending.bytes, plus the producer's requests in flight (max.in.flight x
  request size) and 32 MiB of slack for allocator and threads;
- recovery: once the proxy passes requests again, uploads resume, the WAL shrinks
  under its bound and the producer's backlog is delivered.
"""

import threading
import time

import pytest

import kproto as k
import s3env
from s3proxy import S3Proxy

MiB = 1 << 20
PARTS = 6
VALUE = 4096
CONF = dict(wal_max_retained_bytes=48 * MiB,
            wal_segment_bytes=4 * MiB,
            wal_cache_bytes=16 * MiB,
            wal_max_pending_bytes=8 * MiB,
            s3_wal_upload_threshold=8 * MiB,
            s3_wal_upload_interval_ms=500,
            s3_block_cache_bytes=16 * MiB,
            s3_request_timeout_ms=1500,
            s3_max_attempts=3)


def test_s3_down_then_slow_then_back(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5003")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(s3env.s3_props(s3.url(prefix, proxy.port), **CONF))
        s3env.create_topic(b, topic_name, PARTS)
        time.sleep(0.5)
        idle = s3env.rss_kib(b.proc.pid)
        # one request per connection in flight, up to ~1 MiB
        bound = idle + (CONF["wal_cache_bytes"] + 2 * CONF["s3_wal_upload_threshold"] +
                        CONF["s3_block_cache_bytes"] + CONF["wal_max_pending_bytes"] +
                        1 * MiB + 32 * MiB) // 1024
        prod = s3env.SkewedProducer(b.bootstrap, topic_name, [1] * PARTS, VALUE,
                                    extra={"linger.ms": 5, "batch.size": 131072})
        stop = threading.Event()
        samples = []
        retained = []

        def produce():
            while not stop.is_set():
                prod.produce_bytes(4 * MiB, stop=stop)

        def sample():
            while not stop.is_set() and b.proc is not None:
                samples.append(s3env.rss_kib(b.proc.pid))
                try:
                    retained.append(s3env.metrics(b)["skiff_wal_retained_bytes"])
                except OSError:
                    pass
                time.sleep(0.1)

        th = [threading.Thread(target=produce, daemon=True),
              threading.Thread(target=sample, daemon=True)]
        for t in th:
            t.start()
        try:
            s3env.wait_metric(b, lambda m: m["skiff_s3_uploads_total"] >= 2, 30,
                              "uploads before the outage")
            # 1. S3 answers 503 to everything: the WAL fills up, producers are throttled
            proxy.fail(503)
            m = s3env.wait_metric(
                b, lambda m: m["skiff_wal_retained_bytes"] >= CONF["wal_max_retained_bytes"],
                60, "the WAL to fill up")
            codes = set()
            with k.Conn(b.bootstrap, timeout=15) as c:
                for _ in range(5):
                    r = k.produce(c, topic_name, 0, k.batch([b"probe"]))
                    codes.add(r["ErrorCode"])
                    time.sleep(0.1)
            assert codes <= {k.NONE, 19}, codes
            assert 19 in codes, "no NOT_ENOUGH_REPLICAS with the WAL full: %r" % codes
            s3env.wait_metric(b, lambda m: m["skiff_s3_upload_failures_total"] >= 1, 60,
                              "failed uploads to be counted")
            acked_full = len(prod.acked)
            time.sleep(3)
            uploads_at_full = s3env.metrics(b)["skiff_s3_uploads_total"]
            # 2. S3 holds every request past the client's timeout
            proxy.stall()
            time.sleep(5)
            m = s3env.metrics(b)
            assert m["skiff_s3_uploads_total"] == uploads_at_full, "an upload got through"
            assert len(prod.acked) - acked_full < 2000, "produce went on with the WAL full"
            # 3. S3 is back
            proxy.passthrough()
            s3env.wait_metric(
                b, lambda m: m["skiff_s3_uploads_total"] > uploads_at_full + 2 and
                m["skiff_wal_retained_bytes"] < CONF["wal_max_retained_bytes"], 60,
                "uploads to resume and the WAL to shrink")
            m = s3env.metrics(b)
            assert time.time() - m["skiff_s3_last_upload_timestamp_seconds"] < 30, m
            acked_back = len(prod.acked)
            deadline = time.time() + 30
            while len(prod.acked) < acked_back + 2000 and time.time() < deadline:
                time.sleep(0.1)
            assert len(prod.acked) >= acked_back + 2000, "produce did not resume"
        finally:
            stop.set()
            for t in th:
                t.join(30)
        assert prod.flush(120) == 0, "records still undelivered"
        assert not prod.failed and not prod.fatal, (prod.failed[:3], prod.fatal[:3])
        peak = max(samples)
        peak_retained = max(retained)
        limit = CONF["wal_max_retained_bytes"] + CONF["wal_max_pending_bytes"]
        assert peak_retained <= limit, (peak_retained, limit)
        assert peak <= bound, "RSS peaked at %d KiB, bound %d KiB (idle %d KiB)" % (
            peak, bound, idle)
        check = s3env.ValueCheck(prod.acked, VALUE)
        log = s3env.read_topic(b.bootstrap, topic_name, PARTS, on_record=check)
        problems = check.report(log)
        assert not problems, "\n".join(problems[:20])
        m = s3env.metrics(b)
        print("5003: %d records acknowledged; RSS idle %d KiB, peak %d KiB (bound %d KiB); "
              "WAL retained peak %.1f MiB (limit %.1f MiB); injected %d, S3 retries %d" % (
                  len(prod.acked), idle, peak, bound, peak_retained / MiB, limit / MiB,
                  proxy.failed, m["skiff_s3_retries_total"]))


def test_refused_uploads_back_off(broker_factory, s3, topic_name):
    """An object store that refuses every PUT (403, not retried by the client) fails
    each upload at once: the uploader then waits between attempts (doubling, up to
    5 s) instead of trying again at every tick, and uploads resume once PUTs pass."""
    prefix = s3.new_prefix("t5003b")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(s3env.s3_props(s3.url(prefix, proxy.port), **CONF))
        s3env.create_topic(b, topic_name, PARTS)
        proxy.fail(403, methods=("PUT",))
        prod = s3env.SkewedProducer(b.bootstrap, topic_name, [1] * PARTS, VALUE)
        prod.produce_bytes(10 * MiB)  # past s3.wal.upload.threshold: wanted at once
        assert prod.flush(60) == 0, "records still undelivered"
        m = s3env.wait_metric(b, lambda m: m["skiff_s3_upload_failures_total"] >= 1, 30,
                              "a refused upload")
        first = m["skiff_s3_upload_failures_total"]
        time.sleep(6)
        failed = s3env.metrics(b)["skiff_s3_upload_failures_total"] - first
        # 0.2 + 0.4 + 0.8 + 1.6 + 3.2 s of pauses fit in 6 s: at most 5 more attempts
        assert failed <= 6, "%d failed uploads in 6 s: no pause between attempts" % failed
        assert "retrying in" in b.log_text()
        proxy.passthrough()
        s3env.wait_metric(b, lambda m: m["skiff_s3_uploads_total"] >= 1, 30,
                          "uploads to resume")
        assert not prod.failed and not prod.fatal, (prod.failed[:3], prod.fatal[:3])
