"""The WAL on NFS (libnfs, NFSv3, NFS-Ganesha on loopback): produce and consume,
the SIGKILL crash checks of crashcheck.py, and a node whose data.dir is wiped.

The server: tests/run.sh starts one Ganesha for the integration phase and exports
SKIFF_TEST_NFS_URL (nfs://127.0.0.1/<dir>/export?version=3&nfsport=P&mountport=M);
without it, the first test of these modules starts one of its own with
tools/ganesha.sh (and stops it after). Each test gets its own WAL directory on
the export. The other test_300x modules import the helpers from here.
"""

import contextlib
import os
import random
import shutil
import signal
import subprocess
import time
import uuid

import pytest

import crashcheck
import harness
import kproto as k

pytestmark = pytest.mark.restarts

GANESHA = os.path.join(harness.ROOT, "tools", "ganesha.sh")


class NfsServer:
    """A Ganesha this process started (stop() stops it), or the one of tests/run.sh."""

    def __init__(self, base_url, directory=None):
        self.base_url = base_url
        self.dir = directory

    def url(self, sub):
        """The WAL URL of directory `sub` under the export."""
        path, query = self.base_url.split("?", 1)
        return "%s/%s?%s" % (path.rstrip("/"), sub, query)

    @classmethod
    def start(cls, directory, port=None, mnt=None):
        port = port or harness.free_port()
        mnt = mnt or harness.free_port()
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        r = subprocess.run([GANESHA, "start", directory, str(port), str(mnt)],
                           capture_output=True, text=True, timeout=60)
        if r.returncode == 77:
            pytest.skip("no NFS server here: " + r.stderr.strip())
        if r.returncode != 0:
            raise RuntimeError("tools/ganesha.sh start failed: %s %s" % (r.stdout, r.stderr))
        url = r.stdout.strip().splitlines()[-1]
        return cls(url, directory)

    def restart(self, kill=False, down=0.0):
        """Stops the server (SIGKILL: a crash, else SIGTERM) and starts it again on the
        same ports and export."""
        self.halt(kill)
        time.sleep(down)
        self.resume()

    def halt(self, kill=False):
        """Stops the server (SIGKILL: a crash, else SIGTERM), keeping its ports and export
        for resume()."""
        assert self.dir, "the shared server of tests/run.sh is not stopped by tests"
        args = [GANESHA, "stop", self.dir] + (["-9"] if kill else [])
        subprocess.run(args, check=True, timeout=60)

    @contextlib.contextmanager
    def stopped(self):
        """The server stopped (SIGSTOP) for the with block: what is sent to it waits
        unread in its sockets. It goes on (SIGCONT) after, unless halted meanwhile."""
        assert self.dir, "the shared server of tests/run.sh is not stopped by tests"
        with open(os.path.join(self.dir, "ganesha.pid")) as f:
            pid = int(f.read().strip())
        os.kill(pid, signal.SIGSTOP)
        try:
            yield
        finally:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:  # halted meanwhile
                pass

    def resume(self):
        """Starts a halted server again on the same ports and export."""
        with open(os.path.join(self.dir, "ganesha.ports")) as f:
            port, mnt = f.read().split()
        r = subprocess.run([GANESHA, "start", self.dir, port, mnt], capture_output=True,
                           text=True, timeout=60)
        assert r.returncode == 0, r.stdout + r.stderr

    def stop(self):
        if self.dir:
            r = subprocess.run([GANESHA, "stop", self.dir], timeout=60)
            if r.returncode == 0:
                shutil.rmtree(self.dir, ignore_errors=True)


_shared = {}


def shared_server():
    """The integration phase's server, or one started for this pytest run."""
    if harness.external():
        pytest.skip("needs brokers this harness starts (SKIFF_TEST_EXTERNAL is set)")
    url = os.environ.get("SKIFF_TEST_NFS_URL")
    if url:
        return NfsServer(url)
    if "server" not in _shared:
        _shared["server"] = NfsServer.start(os.path.join(harness.WORK, "nfs-%d" % os.getpid()))
    return _shared["server"]


@pytest.fixture(scope="session")
def nfs():
    """The NFS server (modules that import this fixture share it; a server started
    here is stopped at the end of the session)."""
    yield shared_server()
    srv = _shared.pop("server", None)
    if srv:
        srv.stop()


def nfs_broker(factory, server, sub=None, overrides=None, start=True, name=None):
    """A broker whose WAL is directory `sub` (unique by default) on `server`."""
    sub = sub or "wal-" + uuid.uuid4().hex[:10]
    o = {"wal.url": server.url(sub)}
    o.update(overrides or {})
    return factory(o, start=start, name=name)


def seed():
    s = int(os.environ.get("SKIFF_CRASH_SEED", random.randrange(1 << 30)))
    print("crash seed %d (SKIFF_CRASH_SEED=%d replays it)" % (s, s))
    return s


def test_produce_consume_on_nfs(broker_factory, nfs, topic_name):
    from confluent_kafka import Consumer, Producer
    b = nfs_broker(broker_factory, nfs)
    assert "opened on nfs" in b.log_text()
    with crashcheck.connect(b.bootstrap) as c:
        k.create_topic(c, topic_name, 3)
    acked = []
    p = Producer({"bootstrap.servers": b.bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 2})
    values = [b"nfs-%06d-" % i + os.urandom(random.randrange(1, 3000)) for i in range(3000)]
    for i, v in enumerate(values):
        while True:
            try:
                p.produce(topic_name, value=v, partition=i % 3,
                          on_delivery=lambda err, m: acked.append((err, m.partition(),
                                                                   m.offset(), m.value())))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0
    assert all(err is None for err, _, _, _ in acked), [a for a in acked if a[0]][:3]
    assert len(acked) == len(values)
    stats = crashcheck.verify(b.bootstrap, topic_name, 3, [(pa, o, v) for _, pa, o, v in acked],
                              set(values))
    assert stats["records"] == len(values)

    cons = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "g-" + topic_name,
                     "auto.offset.reset": "earliest", "enable.auto.commit": False})
    cons.subscribe([topic_name])
    got = set()
    deadline = time.time() + 60
    while len(got) < len(values) and time.time() < deadline:
        m = cons.poll(0.5)
        if m is not None and m.error() is None:
            got.add(m.value())
    cons.close()
    assert got == set(values)


def test_acked_records_survive_repeated_sigkill_on_nfs(broker_factory, nfs, topic_name):
    b = nfs_broker(broker_factory, nfs)
    stats = crashcheck.produce_through_kills(b, topic_name, partitions=4, kills=5, seed=seed(),
                                             gap=(0.8, 2.0), down=(0.0, 0.3))
    assert stats["records"] >= stats["acked"] > 0
    # Every restart took the WAL over at once: the dead process held the same
    # data.dir's lock file.
    log = b.log_text()
    assert "takes the WAL over from epoch" in log
    assert "waiting" not in log


def test_topic_creation_survives_sigkill_on_nfs(broker_factory, nfs, topic_name):
    b = nfs_broker(broker_factory, nfs)
    stats = crashcheck.create_topics_through_kills(b, topic_name, kills=3, seed=seed(),
                                                   gap=(0.1, 0.8))
    assert stats["acked_topics"] > 0


def produce_acked(bootstrap, topic, partitions, n, tag):
    """n idempotent acks=all records; returns [(partition, offset, value)]."""
    load = crashcheck.ProduceLoad(bootstrap, topic, partitions, tag)
    load.start()
    deadline = time.time() + 60
    while load.acked_count() < n and time.time() < deadline:
        time.sleep(0.05)
    assert load.finish() == 0
    assert not load.failed and not load.fatal and load.thread_error is None
    return load


def test_wiped_data_dir_rebuilds_from_nfs(broker_factory, nfs, topic_name):
    """Losing a node's local disk loses nothing: a node with an empty data.dir
    rebuilds its view from the WAL on the volume, after a crash (it waits for the
    dead owner's lease: nothing local proves that owner gone) and after a clean stop
    (the owner released the WAL: no wait)."""
    lease = 1500
    b = nfs_broker(broker_factory, nfs, overrides={"wal.lease.ms": str(lease)})
    with crashcheck.connect(b.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
    load = produce_acked(b.bootstrap, topic_name, 2, 2000, "w1")
    acked = list(load.acked)

    b.kill()
    shutil.rmtree(b.data_dir)
    # A fresh lease refuses a new owner that cannot prove the old one dead.
    with pytest.raises(RuntimeError):
        b.start(timeout=15)
    assert "another skiffd uses this WAL" in b.log_text()
    time.sleep(lease / 1000.0)
    t0 = time.time()
    b.start(timeout=30)
    took = time.time() - t0
    assert took >= 1.2 * lease / 1000.0 - 0.2, took
    crashcheck.verify(b.bootstrap, topic_name, 2, acked, load.produced, load.partition_of)

    load2 = produce_acked(b.bootstrap, topic_name, 2, 500, "w2")
    acked += load2.acked
    assert b.stop() == 0
    shutil.rmtree(b.data_dir)
    t0 = time.time()
    b.start(timeout=30)
    assert time.time() - t0 < lease / 1000.0
    assert "released the WAL" in b.log_text()
    crashcheck.verify(b.bootstrap, topic_name, 2, acked, load.produced | load2.produced,
                      load.partition_of)
