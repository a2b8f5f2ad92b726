"""Zombie fencing across a failover of the transaction coordinator (docs/transactions.md,
"In a cluster").

A Java transactional producer opens a transaction (z1-*) on a three-node cluster and
waits. The node coordinating its transactional id is SIGKILLed; the id's state moves to
a survivor with its partition of __consumer_offsets. A new producer with the same
transactional id initialises there: the new coordinator bumps the epoch and aborts the
open transaction, then the new producer commits two transactions around an aborted one.
The old producer, let go, is fenced. read_committed sees only the new producer's
committed records; read_uncommitted sees the old open transaction's records too.
"""

import os
import subprocess
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
from test_7017_cluster_txn import coordinator, java, spread_topic, started, summary, values  # noqa: E402,F401

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]


def test_zombie_fenced_across_failover(cluster_factory, topic_name, java):  # noqa: F811
    cl = started(cluster_factory)
    spread_topic(cl, topic_name)
    txn = "t7019-" + uuid.uuid4().hex[:8]
    coord = coordinator(cl, txn, 1)
    z = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1",
                          "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java.classpath,
                          "io.skiff.clients.Txn", "-m", "zombie-wait", "-b", cl.bootstrap,
                          "-t", topic_name, "-x", txn, "--timeout", "170"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        line = z.stdout.readline().decode()
        assert line.strip() == "READY", (line, z.stderr.read().decode()[-3000:])
        cl.kill(coord)
        s = summary(*java("Txn", ["-m", "commit-abort", "-b", cl.bootstrap, "-t", topic_name,
                                  "-x", txn, "-n", "3"]))
        zout, zerr = z.communicate(b"go\n", timeout=120)
    finally:
        if z.poll() is None:
            z.kill()
            z.wait()
    zs = summary(z.returncode, zout.decode().splitlines(), zerr.decode())
    assert zs["zombie_error"] in ("ProducerFencedException", "InvalidProducerEpochException"), zs
    assert coordinator(cl, txn, 1) != coord
    want = values("c1", 3) + values("c2", 3)
    assert sorted(s["committed"]) == sorted(want), s
    r = summary(*java("Txn", ["-m", "read", "-b", cl.bootstrap, "-t", topic_name]))
    assert sorted(r["committed"]) == sorted(want), r
    assert set(values("z1", 3)) <= set(r["uncommitted"]), r
    assert "z1late-0" not in r["committed"], r
