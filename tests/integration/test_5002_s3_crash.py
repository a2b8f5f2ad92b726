"""SIGKILL at each step of an upload (issue "S3 sink", item 2 and 6).

The node's objects.url points at a proxy (s3proxy.py) in front of the emulator, which
lets a test stop an upload at a chosen step:

- between PUT and registration: the proxy forwards a data object's PUT (the object is
  stored) and withholds the answer; the node is killed while waiting for it. The object
  is an orphan: the restarted node uploads the same WAL range again, and the two-phase
  orphan GC (s3.orphan.min.age.ms / s3.orphan.gc.interval.ms made small) deletes it;
- between registration and WAL trim: the proxy holds the PUT of the view snapshot that
  has to precede the trim; the node is killed with its objects registered and its WAL
  untrimmed. The restart must not upload that range again;
- at random moments (uploads every 200 ms, 1 MiB segments trimmed continuously).

Each time: a producer (idempotent, acks=all) writes through the kill, every acknowledged
record is read back at its offset (crashcheck.verify), no stream range is registered
twice in the SQLite view, and once the GC has run the bucket's data objects are exactly
the registered ones.
"""

import random
import time

import pytest

import crashcheck
import s3env
from s3proxy import S3Proxy

pytestmark = pytest.mark.restarts

PARTS = 4


def props(s3, prefix, proxy, **extra):
    base = dict(s3_wal_upload_interval_ms=300, s3_orphan_min_age_ms=1000,
                s3_orphan_gc_interval_ms=700, wal_segment_bytes=1 << 20,
                log_retention_check_interval_ms=500)
    base.update(extra)
    return s3env.s3_props(s3.url(prefix, proxy.port), **base)


def start_load(b, topic):
    s3env.create_topic(b, topic, PARTS)
    load = crashcheck.ProduceLoad(b.bootstrap, topic, PARTS, "r%d" % random.randrange(1 << 30))
    return load.start()


def wait_acked(load, n, timeout=30):
    deadline = time.time() + timeout
    while load.acked_count() < n:
        assert time.time() < deadline, "only %d acknowledged" % load.acked_count()
        time.sleep(0.05)


def finish_and_verify(b, s3, prefix, topic, load):
    before = load.acked_count()
    wait_acked(load, before + 500)   # the producer got going again after the restart
    left = load.finish()
    assert load.thread_error is None, load.thread_error
    assert not load.fatal, load.fatal[:3]
    assert left == 0 and not load.failed, (left, load.failed[:3])
    stats = crashcheck.verify(b.bootstrap, topic, PARTS, load.acked, load.produced,
                              load.partition_of)
    # Everything uploaded, then the GC: the bucket holds exactly the registered objects.
    s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < 4096, 30, "upload")
    s3env.wait_no_orphans(s3, prefix, b, 30)
    _, ranges = s3env.registry(b.data_dir)
    problems = s3env.registry_problems(ranges)
    assert not problems, "\n".join(problems[:20])
    return stats


def test_kill_between_put_and_registration(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5002a")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(props(s3, prefix, proxy))
        load = start_load(b, topic_name)
        wait_acked(load, 2000)
        s3env.wait_metric(b, lambda m: m["skiff_s3_uploads_total"] >= 1, 20, "a first upload")
        proxy.hold_response(methods=("PUT",), key_part="/data/")
        assert proxy.wait_held(1, 20), "no data PUT reached the proxy"
        orphan = proxy.held_paths[0].split("?")[0].split("/%s/" % prefix.split("/")[-1], 1)[1]
        b.kill()
        proxy.passthrough()
        # the PUT completed: the object is in the bucket, and no registry knows it
        assert orphan in s3.keys(prefix, "data"), (orphan, s3.keys(prefix, "data"))
        b.start()
        stats = finish_and_verify(b, s3, prefix, topic_name, load)
        assert orphan not in s3.keys(prefix, "data")
        # the GC counts its deletions when its job is done, just after the DELETE
        s3env.wait_metric(b, lambda m: m["skiff_s3_orphans_deleted_total"] >= 1, 10,
                          "the GC to count the orphan it deleted")
        print("5002a: %r" % stats)


def test_kill_between_registration_and_trim(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5002b")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(props(s3, prefix, proxy))
        load = start_load(b, topic_name)
        wait_acked(load, 2000)
        m = s3env.wait_metric(b, lambda m: m["skiff_s3_view_snapshots_total"] >= 1, 20,
                              "a first snapshot")
        proxy.stall(methods=("PUT",), key_part="/snapshots/")
        assert proxy.wait_held(1, 20), "no snapshot PUT reached the proxy"
        m = s3env.metrics(b)
        uploads = m["skiff_s3_uploads_total"]
        keys_before, _ = s3env.registry(b.data_dir)
        assert keys_before, "nothing registered"
        b.kill()
        proxy.passthrough()
        b.start()
        stats = finish_and_verify(b, s3, prefix, topic_name, load)
        keys_after, _ = s3env.registry(b.data_dir)
        assert set(keys_before) <= set(keys_after), "registered objects were lost"
        print("5002b: %d uploads before the kill, %r" % (uploads, stats))


def test_kill_at_random_moments(broker_factory, s3, topic_name):
    prefix = s3.new_prefix("t5002c")
    with S3Proxy(s3.port) as proxy:
        b = broker_factory(props(s3, prefix, proxy, s3_wal_upload_interval_ms=200))
        seed = random.randrange(1 << 30)
        print("seed %d" % seed)
        stats = crashcheck.produce_through_kills(b, topic_name, partitions=PARTS, kills=5,
                                                 seed=seed, gap=(0.4, 1.2), down=(0, 0.1))
        s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < 4096, 30, "upload")
        s3env.wait_no_orphans(s3, prefix, b, 30)
        _, ranges = s3env.registry(b.data_dir)
        problems = s3env.registry_problems(ranges)
        assert not problems, "\n".join(problems[:20])
        print("5002c: %r" % stats)
