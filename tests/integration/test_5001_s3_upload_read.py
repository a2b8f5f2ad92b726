"""Uploads into the S3 emulator and reads back from objects (issue "S3 sink", items 2-3).

~200 MB over 20 partitions with skewed sizes: four partitions take 10 shares each, the
other sixteen one share. With s3.wal.upload.threshold = 64 MiB an upload holds ~11 MiB of
each big partition (a StreamObject each, s3.stream.object.split.size = 8 MiB) and ~1 MiB
of each small one (together one StreamSetObject). The test checks the split in the
objects themselves (footer and index of every object in the emulator's directory) and
against the metrics, that the WAL got trimmed, and that a node restarted with
wal.cache.bytes=0 serves from objects (reading the next object ahead as a partition nears
the end of one) every batch byte-identical, with read-ahead and without, at the same offset, as
it served from its WAL cache before (SHA-1 per batch), every acknowledged value included,
cycling through a quarter of its block cache (blocks read once), and answers ListOffsets
by time from objects.
"""

import time

import pytest

import kproto
import s3env

pytestmark = pytest.mark.restarts

MiB = 1 << 20
PARTS = 20
WEIGHTS = [10] * 4 + [1] * 16
TOTAL = 200 * 1000 * 1000
VALUE = 16384


def test_upload_split_trim_and_read_back(broker_factory, s3, topic_name):
    t0 = time.time()
    prefix = s3.new_prefix("t5001")
    props = s3env.s3_props(s3.url(prefix),
                           s3_wal_upload_interval_ms=3000,
                           s3_wal_upload_threshold=64 * MiB,
                           wal_segment_bytes=16 * MiB,
                           wal_cache_bytes=256 * MiB)
    b = broker_factory(props)
    s3env.create_topic(b, topic_name, PARTS)

    prod = s3env.SkewedProducer(b.bootstrap, topic_name, WEIGHTS, VALUE)
    prod.produce_bytes(TOTAL, deadline=time.time() + 120)
    assert prod.flush(120) == 0, "records still undelivered"
    assert not prod.failed and not prod.fatal, (prod.failed[:3], prod.fatal[:3])
    t_produce = time.time() - t0

    # Everything uploaded (the lag left is metadata records, if any) and the WAL trimmed
    # to less than two segments: the view snapshot followed the registration.
    m = s3env.wait_metric(
        b, lambda m: m["skiff_s3_upload_lag_bytes"] < MiB and
        m["skiff_wal_retained_bytes"] < 32 * MiB, 90, "upload and WAL trim")
    t_upload = time.time() - t0

    # Reference: the batches as the WAL cache serves them (nothing read from objects).
    check = s3env.ValueCheck(prod.acked, VALUE)
    ref = s3env.read_topic(b.bootstrap, topic_name, PARTS, on_record=check)
    problems = check.report(ref)
    assert not problems, "\n".join(problems[:20])
    total_bytes = sum(i["bytes"] for i in ref.values())
    m = s3env.metrics(b)
    assert m["skiff_s3_read_bytes_total"] == 0, "the reference read touched objects"
    # a quarter of wal.cache.bytes, within [64 MiB, s3.wal.upload.threshold]
    assert m["skiff_s3_upload_trigger_bytes"] == 64 * MiB, m["skiff_s3_upload_trigger_bytes"]
    assert m["skiff_s3_upload_bytes_total"] == total_bytes, (m["skiff_s3_upload_bytes_total"],
                                                            total_bytes)

    # The split, in the objects themselves.
    objs = s3.objects(prefix)
    so = {kk: o for kk, o in objs.items() if o.kind == 1}
    sso = {kk: o for kk, o in objs.items() if o.kind == 2}
    assert len(so) + len(sso) == len(objs)
    assert len(so) == m["skiff_s3_stream_objects_put_total"], (len(so), m)
    assert len(sso) == m["skiff_s3_stream_set_objects_put_total"], (len(sso), m)
    assert all(kk.split("/")[-1].startswith("so-") for kk in so), sorted(so)
    assert all(kk.split("/")[-1].startswith("sso-") for kk in sso), sorted(sso)
    for kk, o in so.items():
        st = o.streams()
        assert len(st) == 1, (kk, st)
        assert list(st.values())[0][2] >= 8 * MiB, (kk, st)
    for kk, o in sso.items():
        for s, (_, _, nbytes) in o.streams().items():
            assert nbytes < 8 * MiB, (kk, s, nbytes)
    # Big partitions got StreamObjects, small ones never did.
    hw = {p: ref[p]["hw"] for p in range(PARTS)}
    cov = s3env.stream_coverage(objs)
    so_streams = {list(o.streams())[0] for o in so.values()}
    big_ends = {hw[p] for p in range(4)}
    assert not big_ends & {hw[p] for p in range(4, PARTS)}
    # a stream's coverage ends at its partition's high watermark: SO streams are big ones
    assert {max(r[1] for r in cov[s]) + 1 for s in so_streams} == big_ends, so_streams
    assert len(so_streams) == 4, so_streams
    assert len(so) >= 8, "expected at least two uploads with 4 StreamObjects: %d" % len(so)
    assert len(sso) >= 2
    problems = s3env.coverage_problems(cov, list(hw.values()))
    assert not problems, "\n".join(problems[:20])

    # From objects only: a restarted node with no WAL cache.
    b.kill()
    b.overrides["wal.cache.bytes"] = "0"
    b.start()
    t_r = time.time()
    got = s3env.read_topic(b.bootstrap, topic_name, PARTS)
    t_read = time.time() - t_r
    m = s3env.metrics(b)
    assert m["skiff_s3_read_bytes_total"] >= total_bytes * 0.95, m["skiff_s3_read_bytes_total"]
    # Each big partition crossed from one StreamObject to the next at least once: the next
    # was read ahead (and the reads from it are checked byte for byte below).
    assert m["skiff_s3_prefetches_total"] >= 4, m["skiff_s3_prefetches_total"]
    assert m["skiff_s3_prefetch_errors_total"] == 0, m["skiff_s3_prefetch_errors_total"]
    assert m["skiff_s3_block_gets_total"] > 0 and m["skiff_s3_block_get_bytes_total"] > 0, m
    # Read once: the catch-up cycled through a quarter of the block cache, not all of it.
    assert m["skiff_s3_block_cache_read_once_evictions_total"] > 0, m
    assert m["skiff_s3_block_cache_read_once_bytes"] <= 64 * MiB, m
    a, g = s3env.hashes(ref), s3env.hashes(got)
    diff = [x for x in set(a) | set(g) if a.get(x) != g.get(x)]
    assert not diff, "%d batches differ, e.g. %r" % (len(diff), sorted(diff)[:5])
    print("5001: %.0f MB in %d batches; produce %.1fs, uploaded+trimmed at %.1fs, "
          "%d SO + %d SSO, read back from objects %.1fs (%.0f MB/s), S3 requests %d" % (
              total_bytes / 1e6, len(a), t_produce, t_upload, len(so), len(sso), t_read,
              total_bytes / 1e6 / t_read, m["skiff_s3_requests_total"]))

    # ListOffsets by time, from objects too (the batches scanned where they lie in the block
    # cache): the first record at or after 0 is the first, and the record holding the
    # largest timestamp (-3) is found again by that timestamp.
    with kproto.Conn(b.bootstrap, timeout=30) as c:
        for p in range(4):
            first = kproto.list_offsets(c, topic_name, p, 0)
            top = kproto.list_offsets(c, topic_name, p, -3)
            again = kproto.list_offsets(c, topic_name, p, top["Timestamp"])
            for r in (first, top, again):
                assert r["ErrorCode"] == 0, (p, first, top, again)
            assert first["Offset"] == 0 and first["Timestamp"] > 0, (p, first)
            assert 0 <= top["Offset"] < hw[p] and top["Timestamp"] >= first["Timestamp"], (p, top)
            assert again["Offset"] <= top["Offset"], (p, top, again)
            assert again["Timestamp"] == top["Timestamp"], (p, top, again)

    # Without read-ahead (s3.block.readahead.bytes=0): each read GETs only the blocks it
    # wants, and serves the same batches.
    b.kill()
    b.overrides["s3.block.readahead.bytes"] = "0"
    b.start()
    got = s3env.read_topic(b.bootstrap, topic_name, PARTS)
    m = s3env.metrics(b)
    assert m["skiff_s3_block_readahead_total"] == 0, m["skiff_s3_block_readahead_total"]
    assert m["skiff_s3_block_gets_total"] > 0, m
    g = s3env.hashes(got)
    diff = [x for x in set(a) | set(g) if a.get(x) != g.get(x)]
    assert not diff, "no read-ahead: %d batches differ, e.g. %r" % (len(diff), sorted(diff)[:5])
