"""SIGKILL of a transaction coordinator under load (docs/transactions.md, "In a
cluster").

Three nodes; a Java transactional producer (tests/java Txn, mode load) runs transactions
of six records spread over the six partitions of a topic, whose mains are on every node.
Once some have committed, the node coordinating its transactional id is SIGKILLed: the
id's partition of __consumer_offsets moves to a survivor with its HANDOFF, which carries
the transaction state; the survivor finishes a transaction it finds in a Prepare state
(markers sent again) and the producer goes on with the new coordinator.

Checks: transactions commit after the kill; a read_committed consumer sees every
transaction whose commit returned, whole, and of the others (whose commit failed) each
either whole or not at all; none of a transaction is seen twice. The same with SIGTERM
(a controlled shutdown: the HANDOFF is written by the node itself).
"""

import collections
import json
import os
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import cluster as cm  # noqa: E402
import ktest  # noqa: E402
from test_7017_cluster_txn import coordinator, java, spread_topic, started, summary  # noqa: E402,F401

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

K = 6
N = 120


@pytest.mark.parametrize("how", ["sigkill", "sigterm"])
def test_coordinator_down_under_load(cluster_factory, topic_name, java, how):  # noqa: F811
    cl = started(cluster_factory)
    spread_topic(cl, topic_name)
    txn = "t7018-" + uuid.uuid4().hex[:8]
    coord = coordinator(cl, txn, 1)
    p = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1",
                          "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java.classpath,
                          "io.skiff.clients.Txn", "-m", "load", "-b", cl.bootstrap,
                          "-t", topic_name, "-x", txn, "-n", str(N), "-k", str(K),
                          "--timeout", "170"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    lines = []
    try:
        while len([x for x in lines if x.startswith("COMMITTED")]) < 15:
            line = p.stdout.readline().decode()
            assert line, "the producer ended early: %s" % ktest.tail(p.stderr.read().decode())
            lines.append(line.strip())
        if how == "sigkill":
            cl.kill(coord)   # transactions in flight
        else:
            cl.stop(coord)   # a planned move: the node hands its partitions over, then exits
        at_kill = len([x for x in lines if x.startswith("COMMITTED")])
        rest, err = p.communicate(timeout=180)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    out = lines + rest.decode(errors="replace").splitlines()
    s = summary(p.returncode, out, err.decode(errors="replace"))
    committed, unknown = set(s["committed_txns"]), set(s["unknown_txns"])
    assert len(committed) > at_kill, (at_kill, s)
    new_coord = coordinator(cl, txn, 1)
    assert new_coord != coord and new_coord in cl.live_ids(), new_coord
    r = summary(*java("Txn", ["-m", "read", "-b", cl.bootstrap, "-t", topic_name]))
    seen = collections.Counter()
    for v in r["committed"]:
        t, _, i = v[1:].partition("-")
        seen[int(t)] += 1
    for t in committed:
        assert seen[t] == K, ("committed transaction %d seen %d times" % (t, seen[t]), s)
    for t, cnt in seen.items():
        assert t in committed or t in unknown, ("transaction %d never ran" % t, s)
        assert cnt == K, ("transaction %d partly visible: %d of %d" % (t, cnt, K), s, r)
