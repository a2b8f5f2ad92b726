"""SIGTERM of a node under load: a controlled shutdown (docs/cluster.md, "Planned move").

Three nodes serve a 12-partition topic while three idempotent acks=all producers write
to every partition. A node that leads some of them gets SIGTERM: it marks itself
draining, hands every partition over (HANDOFF, then the new mains ADOPT), and exits 0
well before controlled.shutdown.timeout.ms. Producers in flight get retriable errors
and continue on the new mains: no delivery fails. The node is started again (a new
incarnation, which the rebalance gives partitions), then another node gets SIGTERM.
Afterwards every acknowledged record is read back at its offset, offsets contiguous,
nothing duplicated. The pause each handover caused is printed, not judged.
"""

import time

import pytest

import cluster as cm

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 12
SHUTDOWN_MS = 20000


def acked(loads):
    return sum(ld.acked_count() for ld in loads)


def wait_progress(loads, n, timeout, what):
    base = acked(loads)
    cm.wait_for(lambda: acked(loads) >= base + n, timeout,
                "%d more acknowledgements %s (at %d)" % (n, what, acked(loads)))


def test_sigterm_hands_partitions_over_under_load(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "2",
                                       "controlled.shutdown.timeout.ms": str(SHUTDOWN_MS)})
    cl.start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    loads = [cm.TimedLoad(cl.bootstrap, topic_name, PARTS, "s%d-%s" % (i, cl.tag),
                          rate_sleep=0.001) for i in range(3)]
    for ld in loads:
        ld.start()
    victims = []
    try:
        wait_progress(loads, 1000, 60, "before the first SIGTERM")
        for rnd in (1, 2):
            leaders = cl.wait_leaders(topic_name, PARTS, timeout=60)
            mains = {}
            for p, (ld, _) in leaders.items():
                mains.setdefault(ld, []).append(p)
            # the node leading the most partitions, not one stopped before
            victim = max((v for v in mains if v not in victims), key=lambda v: len(mains[v]))
            victims.append(victim)
            node = cl.nodes[victim]
            affected = sorted(mains[victim])
            t0 = time.monotonic()
            rc = node.stop(timeout=SHUTDOWN_MS / 1000.0 + 30)
            took = time.monotonic() - t0
            log = node.log_since_start()
            assert rc == 0, "node %d exited %s after SIGTERM" % (victim, rc)
            assert "controlled shutdown: every partition moved to other nodes" in log, \
                "node %d stopped without handing every partition over:\n%s" % (
                    victim, "\n".join(ln for ln in log.splitlines() if "shutdown" in ln))
            assert took < SHUTDOWN_MS / 1000.0, took
            after = cl.wait_leaders(topic_name, PARTS, timeout=30, exclude=[victim])
            t_exit = time.monotonic()
            for p in affected:
                cm.wait_for(lambda p=p: any(ld.first_ack_after(p, t_exit) for ld in loads), 30,
                            "an acknowledgement of partition %d after node %d exited" % (
                                p, victim))
            wait_progress(loads, 500, 60, "after node %d stopped" % victim)
            pauses = {p: cm.ack_gap(loads, p, t0, time.monotonic()) for p in affected}
            print("SIGTERM %d: node %d handed %s over and exited 0 in %.2f s; new mains %s; "
                  "longest pause in acknowledgements per partition: %s" % (
                      rnd, victim, affected, took, {p: after[p][0] for p in affected},
                      ", ".join("%d: %.2f s" % kv for kv in sorted(pauses.items()))))
            node.start()
            cl.wait_brokers()
            # the rebalance gives the restarted node partitions again
            cm.wait_for(lambda: cl.mains(topic_name).get(victim), 30,
                        "node %d to lead partitions again" % victim)
        wait_progress(loads, 1000, 60, "at the end")
    finally:
        left = [ld.finish() for ld in loads]
    assert left == [0, 0, 0], "records still undelivered: %r" % left
    cm.loads_ok(loads)
    stats = cm.verify_loads(cl, topic_name, PARTS, loads)
    assert stats["records"] >= stats["acked"] > 0, stats
    print("checked %d records (%d acknowledged)" % (stats["records"], stats["acked"]))
