"""The NFS server restarts while idempotent acks=all producers run against a node
whose WAL is on it: afterwards every acknowledged record is readable at its offset,
nothing is written twice, and the producers went on after each restart.

The server here is one of this test's own (tools/ganesha.sh), restarted with SIGKILL
(a crash: the write verifier changes, uncommitted WRITEs must go again) and with
SIGTERM.
"""

import os
import time

import pytest

import crashcheck
import harness
import kproto as k
from test_3001_nfs_wal import NfsServer, nfs_broker

pytestmark = pytest.mark.restarts


@pytest.fixture
def own_nfs(request):
    if harness.external():
        pytest.skip("needs brokers this harness starts (SKIFF_TEST_EXTERNAL is set)")
    srv = NfsServer.start(os.path.join(harness.WORK, "nfs-restart-%d" % os.getpid()))
    yield srv
    srv.stop()


def test_acked_records_survive_nfs_restarts(broker_factory, own_nfs, topic_name):
    b = nfs_broker(broker_factory, own_nfs)
    with crashcheck.connect(b.bootstrap) as c:
        k.create_topic(c, topic_name, 4)
    load = crashcheck.ProduceLoad(b.bootstrap, topic_name, 4, "nr%d" % os.getpid())
    load.start()
    progress = []
    try:
        for i, kill in enumerate([True, False, True]):
            time.sleep(1.5)
            progress.append(load.acked_count())
            own_nfs.restart(kill=kill, down=0.3)
            print("restart %d (%s): %d acknowledged before it"
                  % (i + 1, "SIGKILL" if kill else "SIGTERM", progress[-1]))
        deadline = time.time() + 60
        while load.acked_count() <= progress[-1] + 200 and time.time() < deadline:
            time.sleep(0.1)
    finally:
        left = load.finish()
    assert load.thread_error is None, load.thread_error
    assert not load.fatal, load.fatal[:5]
    assert left == 0, "%d messages still undelivered" % left
    assert not load.failed, load.failed[:3]
    assert all(b_ < a for a, b_ in zip(progress[1:], progress)), progress
    assert load.acked_count() > progress[-1]
    assert b.proc.poll() is None, "skiffd died"
    stats = crashcheck.verify(b.bootstrap, topic_name, 4, load.acked, load.produced,
                              load.partition_of)
    print("after NFS restarts: %r" % stats)
    log = b.log_text()
    assert "unreachable" in log and "reachable again" in log
    assert "WAL failed" not in log
    # The node survives its own restart too, with everything there.
    b.kill()
    b.start()
    crashcheck.verify(b.bootstrap, topic_name, 4, load.acked, load.produced, load.partition_of)
