"""An upload that reads back from the WAL goes in pieces; one that fails after its first
piece was stored deletes what it stored (broker/tier.c, read_and_put).

The node's WAL cache is 1 MiB and an upload starts once 8 MiB are not uploaded (no timed
upload: s3.wal.upload.interval.ms is long), so the upload reads its batches back from the
WAL and PUTs its first quarter while it reads the rest. The proxy in front of the emulator
lets the first data PUT through and fails the others (500, which the store retries until
it gives up): the first upload fails after its first piece was stored. The test checks:

- the node deletes that piece's object at once (a DELETE through the proxy), where the
  orphan GC, with its default hour, would have left it; the GC deletes nothing;
- with the proxy passing everything again, the upload is retried and goes in pieces
  (skiff_s3_uploads_pieced_total), the bucket holds exactly the registered objects, and
  every acknowledged record is read back at its offset.
"""

import time

import s3env
from s3proxy import S3Proxy

MiB = 1 << 20
VALUE = 4096
CONF = dict(wal_cache_bytes=1 * MiB,
            s3_wal_upload_threshold=8 * MiB,
            s3_wal_upload_interval_ms=600000)


def key_of(path, prefix):
    return path.split("?")[0].split("/%s/" % prefix.split("/")[-1], 1)[1]


def test_failed_upload_deletes_its_first_piece(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5010")
    with S3Proxy(s3.port) as proxy:
        proxy.fail_after(1, 500, methods=("PUT",), key_part="/data/")
        b = broker_factory(s3env.s3_props(s3.url(prefix, proxy.port), **CONF))
        s3env.create_topic(b, topic_name, 1)
        prod = s3env.SkewedProducer(b.bootstrap, topic_name, [1], VALUE)
        prod.produce_bytes(10 * MiB)
        assert prod.flush(120) == 0, "records still undelivered"
        s3env.wait_metric(b, lambda m: m["skiff_s3_upload_failures_total"] >= 1, 120,
                          "the first upload to fail")
        assert len(proxy.passed_paths) == 1, proxy.passed_paths
        first = key_of(proxy.passed_paths[0], prefix)
        deadline = time.time() + 10
        while first in s3.keys(prefix, "data"):
            assert time.time() < deadline, "%s, put by the failed upload, still stored" % first
            time.sleep(0.1)
        assert proxy.seen.get("DELETE", 0) >= 1, proxy.seen

        proxy.passthrough()
        m = s3env.wait_metric(b, lambda m: m["skiff_s3_uploads_pieced_total"] >= 1, 120,
                              "an upload in pieces")
        assert m["skiff_s3_orphans_deleted_total"] == 0, m
        stored = s3env.wait_no_orphans(s3, prefix, b, 30)
        assert first not in stored
        assert not prod.failed and not prod.fatal, (prod.failed[:3], prod.fatal[:3])
        check = s3env.ValueCheck(prod.acked, VALUE)
        log = s3env.read_topic(b.bootstrap, topic_name, 1, on_record=check)
        problems = check.report(log)
        assert not problems, "\n".join(problems[:20])
        print("5010: %d records acknowledged; %d upload(s) failed, %d in pieces, %d objects "
              "stored" % (len(prod.acked), m["skiff_s3_upload_failures_total"],
                          m["skiff_s3_uploads_pieced_total"], len(stored)))
