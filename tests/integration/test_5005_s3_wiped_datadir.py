"""A node whose data.dir is wiped comes back whole (issue "S3 sink", item 7).

The WAL lives on the shared volume, the SQLite view in data.dir on the node's local disk:
the case the issue means is losing the local disk, so the test keeps the WAL in its own
directory (wal.url) and wipes data.dir only. Before the wipe the node has uploaded most
of its data (the WAL trimmed below the view snapshot stored in the object store), and
holds a tail that exists only in the WAL (written after the last snapshot). After the
wipe and a restart the node must serve the same topics and configs, the same log start
and high watermark per partition, every batch byte-identical at its offset, the
committed offsets of a group, a group's configs (set before the trimmed part of the
WAL: only the snapshot has them), and go on assigning offsets where it stopped.
"""

import os
import shutil
import time

import pytest

import harness
import kgroup
import kproto as k
import s3env
from test_4009_group_configs_raw import SET, incr, own

pytestmark = pytest.mark.restarts

MiB = 1 << 20
PARTS = 4


def test_wiped_data_dir_restores_from_snapshot_and_wal(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5005")
    wal_dir = os.path.join(harness.WORK, "wal-" + prefix.replace("/", "-"))
    shutil.rmtree(wal_dir, ignore_errors=True)
    try:
        b = broker_factory(s3env.s3_props(
            s3.url(prefix), wal_url="file://" + wal_dir, s3_wal_upload_interval_ms=500,
            s3_wal_upload_threshold=4 * MiB, wal_segment_bytes=2 * MiB))
        s3env.create_topic(b, topic_name, PARTS, {"retention.ms": "86400000",
                                                 "max.message.bytes": "2000000"})
        cgroup = "gc-" + prefix.replace("/", "-")
        with k.Conn(b.bootstrap, timeout=30) as c:
            assert incr(c, cgroup, [("consumer.session.timeout.ms", SET, "50000")]) == (0, None)
        prod = s3env.SkewedProducer(b.bootstrap, topic_name, [3, 1, 1, 1], 8192)
        prod.produce_bytes(24 * MiB)
        assert prod.flush(60) == 0
        s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < 4096 and
                          m["skiff_s3_view_snapshots_total"] >= 1 and
                          m["skiff_wal_retained_bytes"] < 8 * MiB, 60,
                          "upload, snapshot and trim")
        group = "g-" + prefix.replace("/", "-")
        with k.Conn(b.bootstrap, timeout=30) as c:
            assert set(kgroup.commit(c, group, {(topic_name, p): 7 + p
                                                for p in range(PARTS)}).values()) == {0}
            # the tail: in the WAL only (killed before an upload or a snapshot sees it)
            for i in range(3):
                r = k.produce(c, topic_name, i % PARTS, k.batch([b"tail-%d" % i]))
                assert r["ErrorCode"] == k.NONE, r
        ref = s3env.read_topic(b.bootstrap, topic_name, PARTS)
        check = s3env.ValueCheck(prod.acked, 8192)
        b.kill()
        assert os.listdir(wal_dir), "the WAL is not where wal.url says"
        b.wipe()
        assert not os.path.exists(b.data_dir)
        b.start()
        t0 = time.time()
        got = s3env.read_topic(b.bootstrap, topic_name, PARTS, on_record=check)
        t_read = time.time() - t0
        problems = check.report(got)
        assert not problems, "\n".join(problems[:20])
        assert {p: (i["start"], i["hw"]) for p, i in got.items()} == \
            {p: (i["start"], i["hw"]) for p, i in ref.items()}
        a, g = s3env.hashes(ref), s3env.hashes(got)
        assert a == g, "batches differ after the wipe: %r" % sorted(
            x for x in set(a) | set(g) if a.get(x) != g.get(x))[:5]
        m = s3env.metrics(b)
        assert m["skiff_s3_read_bytes_total"] > 0, "nothing came from objects"
        with k.Conn(b.bootstrap, timeout=30) as c:
            _, offs = kgroup.fetch_offsets(c, group, {topic_name: list(range(PARTS))})
            assert {kk: v[0] for kk, v in offs.items()} == {
                (topic_name, p): 7 + p for p in range(PARTS)}, offs
            conf = kgroup.describe_configs(c, 2, topic_name, ["retention.ms"])
            assert conf["Results"][0]["Configs"][0]["Value"] == "86400000", conf
            assert own(c, cgroup) == {"consumer.session.timeout.ms": "50000"}
            # offsets go on where they stopped
            for p in range(PARTS):
                r = k.produce(c, topic_name, p, k.batch([b"after"]))
                assert r["ErrorCode"] == k.NONE and r["BaseOffset"] == ref[p]["hw"], (p, r)
        print("5005: %d batches, %.0f MB restored; read back in %.1fs" % (
            len(a), sum(i["bytes"] for i in got.values()) / 1e6, t_read))
    finally:
        shutil.rmtree(wal_dir, ignore_errors=True)
