"""Ownership of a WAL on NFS: a second skiffd on the same WAL is refused while the
owner lives (another data.dir: by the owner's fresh lease; the same data.dir: by its
lock file), and the WAL stays valid; a node that takes over the WAL of a paused owner
whose lease ran out fences it: the old owner acknowledges nothing more, and every
record it did acknowledge is in the new owner's log.
"""

import os
import signal
import time
import uuid

import pytest

import crashcheck
import harness
import kproto as k
from test_3001_nfs_wal import nfs, nfs_broker  # noqa: F401 (fixture)

pytestmark = pytest.mark.restarts


def expect_refused(b, text):
    with pytest.raises(RuntimeError):
        b.start(timeout=15)
    assert b.proc.poll() not in (None, 0)
    assert text in b.log_text(), b.log_text()[-2000:]


def test_second_skiffd_on_the_same_wal_is_refused(broker_factory, nfs, topic_name):  # noqa: F811
    sub = "wal-" + uuid.uuid4().hex[:10]
    b1 = nfs_broker(broker_factory, nfs, sub)
    with crashcheck.connect(b1.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
    load = crashcheck.ProduceLoad(b1.bootstrap, topic_name, 2, "f1")
    load.start()
    time.sleep(1.0)

    # Another node (own data.dir) on the same WAL: the owner's lease is fresh.
    b2 = nfs_broker(broker_factory, nfs, sub, start=False)
    expect_refused(b2, "another skiffd uses this WAL")
    # A second process on the owner's own data.dir: its lock file is held.
    b3 = harness.Broker(b1.name + "-twin", dict(b1.overrides), data_dir=b1.data_dir)
    try:
        t0 = time.time()
        expect_refused(b3, "already runs with this data directory")
        assert time.time() - t0 < 10
    finally:
        b3.kill()

    time.sleep(1.0)
    assert load.finish() == 0
    assert not load.failed and not load.fatal and load.thread_error is None
    assert b1.proc.poll() is None
    crashcheck.verify(b1.bootstrap, topic_name, 2, load.acked, load.produced, load.partition_of)
    # The WAL is intact: the owner restarts on it and finds everything.
    b1.kill()
    b1.start()
    crashcheck.verify(b1.bootstrap, topic_name, 2, load.acked, load.produced, load.partition_of)


def test_takeover_fences_a_paused_owner(broker_factory, nfs, topic_name):  # noqa: F811
    lease = 1000
    sub = "wal-" + uuid.uuid4().hex[:10]
    o = {"wal.lease.ms": str(lease)}
    b1 = nfs_broker(broker_factory, nfs, sub, overrides=o)
    with crashcheck.connect(b1.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
    load = crashcheck.ProduceLoad(b1.bootstrap, topic_name, 2, "p1",
                                  extra_conf={"message.timeout.ms": 8000})
    load.start()
    time.sleep(1.5)
    os.kill(b1.proc.pid, signal.SIGSTOP)
    try:
        acked_before = load.acked_count()
        assert acked_before > 0
        time.sleep(lease / 1000.0 + 0.2)
        t0 = time.time()
        b2 = nfs_broker(broker_factory, nfs, sub, overrides=o)
        assert time.time() - t0 >= 1.2 * lease / 1000.0 - 0.1
        assert "waiting" in b2.log_text()
    finally:
        os.kill(b1.proc.pid, signal.SIGCONT)
    # The old owner wakes up: its lease ran out, and its next renewal finds the new
    # epoch. Whatever it still answers, it acknowledges nothing more.
    deadline = time.time() + 10
    while "is fenced" not in b1.log_text() and time.time() < deadline:
        time.sleep(0.1)
    assert "is fenced" in b1.log_text()
    time.sleep(1.0)
    load.finish(timeout=10)
    assert load.thread_error is None
    b1.kill()
    # Every record the old owner acknowledged, before or after the pause, is in the
    # new owner's log at its offset; the rest may or may not be.
    stats = crashcheck.verify(b2.bootstrap, topic_name, 2, load.acked, load.produced,
                              load.partition_of)
    assert stats["acked"] >= acked_before
    # The new owner serves writes.
    with crashcheck.connect(b2.bootstrap) as c:
        r = k.produce(c, topic_name, 0, k.batch([b"after-takeover"]))
        assert r["ErrorCode"] == k.NONE, r
