"""Producers slowed down, not refused, when uploads are slower than produce (broker/pace.h).

The node's objects.url goes through s3proxy.py, which passes PUTs as if through one
link of UPLOAD_BPS. A producer sends about twice that. The WAL fills past half of
wal.max.retained.bytes; from there the node meters what it reads from the producer's
connection to the upload rate times a factor that falls with the fill, intake settles
at what uploads take, and the WAL never reaches its limit. The test checks:

- pacing engaged: skiff_produce_paced_seconds_total grew and skiff_produce_pace_bytes_per_second
  was above 0 while the WAL was between half and full;
- no refusal: skiff_produce_wal_full_refusals_total stays 0 and the retained bytes stay
  below wal.max.retained.bytes, and acknowledgements went on while paced;
- a connection that never produced is read at once: Metadata answers while paced;
- the WAL is trimmed under the backlog: view snapshots are stored while paced, though
  uploads follow each other at once (each registers before the view has applied the
  last; a snapshot must not wait for the newest registration);
- compaction passes are not starved by the backlog: with a pass due every second (and
  nothing small enough to merge, so that passes only list the registry), the objects
  they count go on growing while paced;
- uploads behind read their batches back from the WAL, and go in pieces: the first
  quarter's objects are PUT while the rest is read (skiff_s3_uploads_pieced_total grew
  while paced), and the records read back below come from those objects;
- recovery: with the link at full speed, the WAL drains below half and pacing ends;
- no loss: every acknowledged record is read back at its offset, and the producer
  reports no failed delivery.
"""

import threading
import time

import kproto as k
import s3env
from s3proxy import S3Proxy

MiB = 1 << 20
PARTS = 4
VALUE = 4096
UPLOAD_BPS = 8e6
PRODUCE_BPS = 16e6
CONF = dict(wal_max_retained_bytes=96 * MiB,
            wal_segment_bytes=4 * MiB,
            wal_cache_bytes=16 * MiB,
            wal_max_pending_bytes=8 * MiB,
            s3_wal_upload_threshold=8 * MiB,
            s3_wal_upload_interval_ms=500,
            s3_compaction_interval_ms=1000,
            s3_compaction_small_object_bytes=1,
            s3_request_timeout_ms=60000)


def test_producers_paced_before_the_wal_is_full(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5009")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(s3env.s3_props(s3.url(prefix, proxy.port), **CONF))
        s3env.create_topic(b, topic_name, PARTS)
        prod = s3env.SkewedProducer(b.bootstrap, topic_name, [1] * PARTS, VALUE,
                                    extra={"linger.ms": 5, "batch.size": 131072})
        stop = threading.Event()
        samples = []  # (time, metrics, acknowledged so far)

        def produce():
            start = time.time()
            while not stop.is_set():
                ahead = prod.sent / PRODUCE_BPS - (time.time() - start)
                if ahead > 0:
                    time.sleep(min(ahead, 0.05))
                    prod.p.poll(0)
                    continue
                prod.produce_bytes(256 * 1024, stop=stop)

        def sample():
            while not stop.is_set():
                try:
                    samples.append((time.time(), s3env.metrics(b), len(prod.acked)))
                except OSError:
                    pass
                time.sleep(0.1)

        proxy.slow(UPLOAD_BPS, methods=("PUT",))
        th = [threading.Thread(target=produce, daemon=True),
              threading.Thread(target=sample, daemon=True)]
        for t in th:
            t.start()
        try:
            s3env.wait_metric(b, lambda m: m["skiff_produce_paced_seconds_total"] >= 4, 120,
                              "producers to be paced")
            with k.Conn(b.bootstrap, timeout=5) as c:
                t0 = time.time()
                k.metadata(c, [topic_name])
                meta_s = time.time() - t0
            time.sleep(5)
            # uploads at full speed: the WAL drains and pacing ends
            proxy.passthrough()
            stop.set()
            for t in th:
                t.join(30)
            s3env.wait_metric(b, lambda m: m["skiff_wal_fill_ratio"] < 0.5 and
                              m["skiff_produce_pace_bytes_per_second"] == 0, 120,
                              "the WAL to drain and pacing to end")
        finally:
            stop.set()
            proxy.passthrough()
        assert prod.flush(120) == 0, "records still undelivered"
        assert not prod.failed and not prod.fatal, (prod.failed[:3], prod.fatal[:3])
        m = s3env.metrics(b)
        assert m["skiff_produce_wal_full_refusals_total"] == 0, m
        peak = max(s[1]["skiff_wal_retained_bytes"] for s in samples)
        assert peak < CONF["wal_max_retained_bytes"], (peak, CONF["wal_max_retained_bytes"])
        paced = [s for s in samples if s[1]["skiff_produce_pace_bytes_per_second"] > 0]
        assert paced, "no sample saw a pace share above 0"
        assert paced[-1][2] > paced[0][2], "nothing was acknowledged while paced"
        assert min(s[1]["skiff_wal_fill_ratio"] for s in paced) > 0.45
        snaps = (paced[-1][1]["skiff_s3_view_snapshots_total"] -
                 paced[0][1]["skiff_s3_view_snapshots_total"])
        assert snaps >= 2, "%d view snapshots while paced: the WAL was not trimmed" % snaps

        pieced = (paced[-1][1]["skiff_s3_uploads_pieced_total"] -
                  paced[0][1]["skiff_s3_uploads_pieced_total"])
        assert pieced > 0, "no upload went in pieces while paced"

        def listed(m):
            return sum(v for kk, v in m.items() if kk.startswith("skiff_s3_object_bytes{"))
        grew = listed(paced[-1][1]) - listed(paced[0][1])
        assert grew > 0, "no compaction pass listed the registry while paced"

        check = s3env.ValueCheck(prod.acked, VALUE)
        log = s3env.read_topic(b.bootstrap, topic_name, PARTS, on_record=check)
        problems = check.report(log)
        assert not problems, "\n".join(problems[:20])
        span = paced[-1][0] - paced[0][0]
        print("5009: %d records acknowledged; paced %.1f s (over %.1f s), pace %.1f-%.1f MB/s, "
              "WAL peak %.1f MiB (limit %.1f MiB), %.1f MB/s acknowledged while paced, "
              "uploads %.1f MB/s (%d in pieces), %d view snapshots and %.1f MB more objects listed while paced; "
              "Metadata in %.3f s while paced" % (
                  len(prod.acked), m["skiff_produce_paced_seconds_total"], span,
                  min(s[1]["skiff_produce_pace_bytes_per_second"] for s in paced) / 1e6,
                  max(s[1]["skiff_produce_pace_bytes_per_second"] for s in paced) / 1e6,
                  peak / MiB,
                  CONF["wal_max_retained_bytes"] / MiB,
                  (paced[-1][2] - paced[0][2]) * VALUE / max(span, 1e-3) / 1e6,
                  paced[-1][1]["skiff_s3_upload_rate_bytes_per_second"] / 1e6, pieced, snaps,
                  grew / 1e6,
                  meta_s))
