"""Retention and compaction of objects (issue "S3 sink", items 4 and 5).

Retention: three topics share uploads. `ret` (retention.ms=4000) has a big partition
(a StreamObject per upload, s3.stream.object.split.size being 256 KiB) and a small one
(inside the StreamSetObjects); `rb` has retention.bytes=1 MiB; `keep` has no limit.
Once `ret` expires, ListOffsets(earliest) reaches its high watermark, its StreamObjects
are deleted and compaction rewrites the StreamSetObjects without its part (a lone
StreamSetObject is rewritten only once older than s3.stream.set.object.force.split.ms,
6 s here); `rb` keeps
at least retention.bytes (Kafka deletes a segment only when what remains still holds
retention.bytes) and its earliest offset moves; `keep` is whole. In the end the bucket
holds exactly the registered objects, and no object holds a byte of `ret`.

Compaction: uploads of three partitions (one Produce request per round, so every upload
holds all three) make small StreamSetObjects. Compaction merges them, splits them into
StreamObjects once older than s3.stream.set.object.force.split.ms, and merges the small
StreamObjects of each partition into one StreamObject; retired sources are deleted after
s3.object.delete.delay.ms. The object count goes down to one StreamObject per partition,
no compaction ever writes a StreamSetObject of a single stream, and a node restarted
without WAL cache serves every batch byte-identical to what it served before.
"""

import threading
import time

import pytest

import kproto as k
import s3env

pytestmark = pytest.mark.restarts

KiB = 1024
MiB = 1 << 20


def test_retention_deletes_objects(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5004r")
    b = broker_factory(s3env.s3_props(
        s3.url(prefix), s3_wal_upload_interval_ms=300, log_retention_check_interval_ms=300,
        s3_compaction_interval_ms=500, s3_object_delete_delay_ms=1000,
        s3_stream_object_split_size=256 * KiB, s3_compaction_small_object_bytes=4 * MiB,
        s3_stream_set_object_force_split_ms=6000))
    ret, rb, keep = topic_name + "-ret", topic_name + "-rb", topic_name + "-keep"
    s3env.create_topic(b, ret, 2, {"retention.ms": "4000"})
    s3env.create_topic(b, rb, 1, {"retention.bytes": str(MiB)})
    s3env.create_topic(b, keep, 1)
    with k.Conn(b.bootstrap, timeout=30) as c:
        for i in range(6):
            # ret-0 and rb-0: 300 KiB (StreamObjects); ret-1, keep-0: 20 KiB (the SSO)
            s3env.produce_round(c, [(ret, 0, 150), (ret, 1, 10), (rb, 0, 150), (keep, 0, 10)],
                                "r%d" % i)
            time.sleep(0.4)
        t_last = time.time()
        s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < 4096, 20, "upload")
        streams = {(t, p): s for t in (ret, rb, keep)
                   for p, s in s3env.streams_of(b.data_dir, t).items()}
        ret_streams = {streams[(ret, 0)], streams[(ret, 1)]}
        before = s3.objects(prefix)
        assert any(set(o.streams()) == {streams[(ret, 0)]} for o in before.values()), \
            "no StreamObject of the big partition of ret"
        assert any(streams[(ret, 1)] in o.streams() and o.kind == 2 for o in before.values())
        # ret expires 4 s after its last record
        deadline = t_last + 30
        while True:
            lo = {p: (k.list_offsets(c, ret, p, -2)["Offset"], k.list_offsets(c, ret, p, -1)
                      ["Offset"]) for p in range(2)}
            if all(e == h for e, h in lo.values()):
                break
            assert time.time() < deadline, "ret did not expire: %r" % lo
            time.sleep(0.3)
        assert all(h > 0 for _, h in lo.values()), lo
        # no object holds a byte of ret any more; retired objects are gone
        deadline = time.time() + 30
        while True:
            keys, ranges = s3env.registry(b.data_dir)
            objs = s3.objects(prefix)
            left = [kk for kk, o in objs.items() if ret_streams & set(o.streams())]
            if not left and set(objs) == set(keys):
                break
            assert time.time() < deadline, "objects with ret data: %r; stored %d, " \
                "registered %d" % (left, len(objs), len(keys))
            time.sleep(0.3)
        assert not ret_streams & {r[0] for r in ranges}
        m = s3env.metrics(b)
        assert m["skiff_s3_objects_deleted_total"] >= 6, m["skiff_s3_objects_deleted_total"]
        # rb: the earliest offset moved, and at least retention.bytes remain
        e = k.list_offsets(c, rb, 0, -2)["Offset"]
        assert e > 0, "retention.bytes moved nothing"
        # Retention moves the log start to where an object's range starts, and no range
        # lies wholly below it; a compaction planned just before may still merge the
        # range below into its object, which then starts under the log start.
        kept = [r for r in ranges if r[0] == streams[(rb, 0)]]
        assert kept and min(r[1] for r in kept) <= e and all(r[2] >= e for r in kept), \
            (kept, e)
    log = s3env.read_topic(b.bootstrap, rb, 1)
    assert log[0]["bytes"] >= MiB, "retention.bytes=1 MiB kept only %d bytes" % log[0]["bytes"]
    log = s3env.read_topic(b.bootstrap, keep, 1)
    assert log[0]["start"] == 0 and log[0]["hw"] == 60 and len(log[0]["batches"]) == 6, log
    print("5004 retention: ret earliest=hw=%r, rb earliest %d (%d bytes kept), objects "
          "deleted %d" % (lo, e, s3env.read_topic(b.bootstrap, rb, 1)[0]["bytes"],
                          m["skiff_s3_objects_deleted_total"]))


def test_compaction_merges_splits_and_keeps_every_byte(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5004c")
    b = broker_factory(s3env.s3_props(
        s3.url(prefix), s3_wal_upload_interval_ms=300, s3_compaction_interval_ms=500,
        s3_compaction_small_object_bytes=4 * MiB, s3_object_delete_delay_ms=1000,
        s3_stream_set_object_force_split_ms=3000))
    s3env.create_topic(b, topic_name, 3)
    seen = {}        # key -> (kind, streams)
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            for kk, o in s3.objects(prefix).items():
                seen.setdefault(kk, (o.kind, frozenset(o.streams())))
            time.sleep(0.1)

    th = threading.Thread(target=watch, daemon=True)
    th.start()
    try:
        with k.Conn(b.bootstrap, timeout=30) as c:
            for i in range(6):
                s3env.produce_round(c, [(topic_name, p, 20 + 10 * p) for p in range(3)],
                                    "a%d" % i)
                time.sleep(0.45)
            s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < 4096, 20,
                              "upload")
            uploads = s3env.metrics(b)["skiff_s3_uploads_total"]
            assert uploads >= 4, uploads
            wait_one_so_per_stream(b, s3, prefix, 3, 30)
            # more small SSOs: split again, then the StreamObjects of each stream merged
            for i in range(2):
                s3env.produce_round(c, [(topic_name, p, 20) for p in range(3)], "b%d" % i)
                time.sleep(0.45)
            s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < 4096, 20,
                              "upload")
            wait_one_so_per_stream(b, s3, prefix, 3, 30)
    finally:
        stop.set()
        th.join(10)
    ref = s3env.read_topic(b.bootstrap, topic_name, 3)
    m = s3env.metrics(b)
    assert m["skiff_s3_compactions_total"] >= 3, m["skiff_s3_compactions_total"]
    single = sorted(kk for kk, (kind, st) in seen.items() if kind == 2 and len(st) < 3)
    assert not single, "StreamSetObjects of fewer than 3 streams were written: %r" % [
        (kk, sorted(seen[kk][1])) for kk in single]
    s3env.wait_no_orphans(s3, prefix, b, 20)
    b.kill()
    b.overrides["wal.cache.bytes"] = "0"
    b.start()
    got = s3env.read_topic(b.bootstrap, topic_name, 3)
    assert s3env.metrics(b)["skiff_s3_read_bytes_total"] > 0
    a, g = s3env.hashes(ref), s3env.hashes(got)
    assert a == g, "batches differ after compaction: %r" % sorted(
        x for x in set(a) | set(g) if a.get(x) != g.get(x))[:5]
    assert sum(i["hw"] for i in got.values()) == 6 * (20 + 30 + 40) + 2 * 3 * 20
    print("5004 compaction: %d uploads, %d compactions, %d objects deleted; "
          "%d distinct objects seen" % (
              m["skiff_s3_uploads_total"], m["skiff_s3_compactions_total"],
              m["skiff_s3_objects_deleted_total"], len(seen)))


def wait_one_so_per_stream(b, s3, prefix, nstreams, timeout):
    deadline = time.time() + timeout
    while True:
        keys, ranges = s3env.registry(b.data_dir)
        live = [kk for kk, after in keys.items() if after is None]
        objs = s3.objects(prefix)
        kinds = sorted((objs[kk].kind, len(objs[kk].streams())) for kk in live if kk in objs)
        if kinds == [(1, 1)] * nstreams:
            return
        assert time.time() < deadline, "live objects (kind, streams): %r" % kinds
        time.sleep(0.2)
