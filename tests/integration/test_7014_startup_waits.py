"""A node that starts while a service it needs is unreachable waits for it (docs/cluster.md,
"Running a cluster": a node starts serving only once it has joined).

For each of etcd (a cluster member), the shared volume (a cluster member whose wal.url is on
an NFS server of the test's own) and the object store (a single node with an empty data.dir,
whose view comes back from the object store): the service is made unreachable, the node is
started, and for a few seconds

- the process keeps running (it does not exit),
- its log says what it waits for,
- its Kafka port accepts no connection (it serves nothing before its state is complete);

then the service comes back, the node opens its port, and acks=all produce works, every
acknowledged record read back at its offset.
"""

import os
import socket
import threading
import time

import pytest

import cluster as cm
import crashcheck
import harness
import kproto as k
import s3env
from s3proxy import S3Proxy
from test_3001_nfs_wal import NfsServer

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

WAIT_S = 4


class Starting:
    """node.start() in a thread: it returns once the node's port is open."""

    def __init__(self, node, timeout=90.0):
        self.node, self.err = node, None
        self.t = threading.Thread(target=self._run, args=(timeout,), daemon=True)
        self.t.start()
        deadline = time.time() + 10
        while node.proc is None and self.t.is_alive() and time.time() < deadline:
            time.sleep(0.01)

    def _run(self, timeout):
        try:
            self.node.start(timeout)
        except Exception as e:  # reported by join()
            self.err = e

    def join(self, timeout=120.0):
        self.t.join(timeout)
        assert not self.t.is_alive(), "the node did not open its port"
        if self.err:
            raise self.err


def port_open(host, port):
    try:
        with socket.create_connection((host, port), timeout=1.0):
            return True
    except OSError:
        return False


def assert_waiting(node, says):
    """For WAIT_S seconds: alive, port closed; then its log says `says`."""
    deadline = time.time() + WAIT_S
    while time.time() < deadline:
        assert node.proc is not None and node.proc.poll() is None, \
            "the node exited instead of waiting:\n%s" % node.log_text()[-3000:]
        assert not port_open(node.host, node.port), \
            "the node serves before its state is complete"
        time.sleep(0.2)
    log = node.log_text()
    assert says in log, "the log does not say %r:\n%s" % (says, log[-3000:])


def produce_and_check(bootstrap, topic, parts, tag):
    load = crashcheck.ProduceLoad(bootstrap, topic, parts, tag)
    load.start()
    deadline = time.time() + 60
    while load.acked_count() < 300 and time.time() < deadline:
        time.sleep(0.1)
    left = load.finish()
    assert load.thread_error is None, load.thread_error
    assert not load.fatal and not load.failed, (load.fatal[:3], load.failed[:3])
    assert left == 0 and load.acked_count() >= 300, (left, load.acked_count())
    return crashcheck.verify(bootstrap, topic, parts, load.acked, load.produced,
                             load.partition_of)


def test_member_waits_for_etcd(cluster_factory, own_etcd, topic_name):
    for i in (1, 2, 3):  # SIGSTOP: connections are accepted but never answered
        own_etcd.stop_member(i)
    cl = cluster_factory(1, etcd=own_etcd)
    node = cl.node(1)
    starting = Starting(node)
    assert_waiting(node, "waiting for etcd")
    for i in (1, 2, 3):
        own_etcd.cont_member(i)
    starting.join()
    cl.wait_brokers({1})
    cl.create_topic(topic_name, 4)
    print(produce_and_check(cl.bootstrap, topic_name, 4, "etcd-" + cl.tag))


@pytest.fixture
def halted_nfs(request):
    """An NFS server of the test's own, stopped (its ports and export kept) until
    .resume()."""
    if harness.external():
        pytest.skip("needs brokers this harness starts (SKIFF_TEST_EXTERNAL is set)")
    srv = NfsServer.start(os.path.join(harness.WORK, "nfs-7014-%d" % os.getpid()))
    srv.halt()
    yield srv
    srv.stop()


def test_member_waits_for_the_shared_volume(cluster_factory, halted_nfs, topic_name):
    cl = cluster_factory(1, overrides={"wal.url": halted_nfs.url("cluster-7014")})
    node = cl.node(1)
    starting = Starting(node)
    assert_waiting(node, "waiting for the shared volume")
    halted_nfs.resume()
    starting.join()
    cl.wait_brokers({1})
    cl.create_topic(topic_name, 4)
    print(produce_and_check(cl.bootstrap, topic_name, 4, "nfs-" + cl.tag))


def test_empty_data_dir_waits_for_the_object_store(broker_factory, s3, topic_name):
    with S3Proxy(s3.port) as proxy:
        proxy.fail(503)
        b = broker_factory(s3env.s3_props(s3.url(s3.new_prefix("start-wait"), proxy.port)),
                           start=False)
        starting = Starting(b)
        assert_waiting(b, "waiting for the object store")
        proxy.passthrough()
        starting.join()
        with crashcheck.connect(b.bootstrap) as c:
            k.create_topic(c, topic_name, 4)
        print(produce_and_check(b.bootstrap, topic_name, 4, "s3-%d" % os.getpid()))
