"""etcd backup and restore as docs/operations.md ("etcd: backup and restore") says: an
`etcdctl snapshot save` of a running cluster, the loss of every etcd member, an
`etcdctl snapshot restore` into a new etcd, and the node started again against it.
Every acknowledged record comes back; a topic created after the snapshot does not."""
import os
import shutil
import subprocess
import time

import pytest

import cluster as cm
import harness

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 2
N = 200


def etcdctl(*args, timeout=60):
    exe = shutil.which("etcdctl")
    if not exe:
        pytest.skip("etcdctl is missing (Debian's etcd-client)")
    r = subprocess.run([exe] + [str(a) for a in args], env=dict(os.environ, ETCDCTL_API="3"),
                       capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, (args, r.stdout, r.stderr)
    return r.stdout


def produce(bootstrap, topic):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True})
    values = {b"r%05d" % i for i in range(N)}
    for i, v in enumerate(sorted(values)):
        p.produce(topic, value=v, partition=i % PARTS)
    assert p.flush(60) == 0
    return values


def consume(bootstrap, topic):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "restore-check",
                  "enable.auto.commit": False})
    c.assign([TopicPartition(topic, p, 0) for p in range(PARTS)])
    got, deadline = set(), time.time() + 60
    while len(got) < N and time.time() < deadline:
        for m in c.consume(500, 1.0):
            assert not m.error(), m.error()
            got.add(m.value())
    c.close()
    return got


class RestoredEtcd:
    """One member restored from a snapshot, in its own data directory and ports."""

    def __init__(self, snapshot, workdir):
        self.client, peer = harness.free_port(), harness.free_port()
        self.url = "http://127.0.0.1:%d" % self.client
        peer_url = "http://127.0.0.1:%d" % peer
        data = os.path.join(workdir, "restored")
        etcdctl("snapshot", "restore", snapshot, "--name", "r1", "--data-dir", data,
                "--initial-cluster", "r1=" + peer_url, "--initial-advertise-peer-urls",
                peer_url, "--initial-cluster-token", "skiff-restored")
        self.log = open(os.path.join(workdir, "restored.log"), "w")
        self.proc = subprocess.Popen(
            ["etcd", "--name", "r1", "--data-dir", data, "--listen-client-urls", self.url,
             "--advertise-client-urls", self.url, "--listen-peer-urls", peer_url,
             "--initial-advertise-peer-urls", peer_url], stdout=self.log,
            stderr=subprocess.STDOUT)
        cm.wait_for(self.healthy, 30, "the restored etcd to answer", interval=0.2)

    def healthy(self):
        try:
            etcdctl("--endpoints", self.url, "endpoint", "health", timeout=10)
            return True
        except AssertionError:
            return False

    def stop(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()


def test_snapshot_restore_brings_the_cluster_back(cluster_factory, own_etcd, topic_name,
                                                  tmp_path):
    cl = cluster_factory(1, etcd=own_etcd).start()
    cl.create_topic(topic_name, PARTS)
    values = produce(cl.bootstrap, topic_name)

    snap = tmp_path / "etcd.db"
    endpoint = own_etcd.endpoints.split(",")[0]
    etcdctl("--endpoints", endpoint, "snapshot", "save", snap)
    later = topic_name + "-later"
    cl.create_topic(later, 1)

    # Every member lost: the nodes stop first, as the procedure says.
    assert cl.stop(1) == 0
    own_etcd.stop()

    restored = RestoredEtcd(snap, str(tmp_path))
    try:
        cl.node(1).overrides["etcd.endpoints"] = restored.url
        cl.start_node(1, timeout=60)
        cl.wait_leaders(topic_name, PARTS, timeout=60)
        got = consume(cl.bootstrap, topic_name)
        assert got == values, "%d of %d records back after the restore" % (
            len(got & values), len(values))
        names = {t["Name"] for t in cl.metadata(None)["Topics"]}
        assert topic_name in names and later not in names, names
    finally:
        cl.kill_all()
        restored.stop()
