"""SIGKILL of nodes under load (docs/cluster.md, "Unplanned: a node dies").

Three nodes serve a 12-partition topic while three idempotent acks=all producers
(crashcheck.ProduceLoad) write to every partition. Five times a node that leads some of
its partitions is SIGKILLed; its lease expires, the controller names a custodian that
fences and replays the dead log and hands its partitions to the survivors. The schedule:
kill 1 is restarted (same node.id and data.dir: a new incarnation with a new log), kill 2
is left down, kill 3 takes a second node so that one node serves everything, then both
come back; kills 4 and 5 are restarted. Rebalancing (every 2 s) gives restarted nodes
partitions again, so later kills also hit partitions that moved before.

Afterwards every acknowledged record is read back at its offset from the partition's
current main, offsets are contiguous, nothing is duplicated, and no producer saw a
failure. The failover time of each kill (from the SIGKILL to the first acknowledged
produce on every partition the node led) is printed, not judged.

Seeds are random per run and printed; SKIFF_CRASH_SEED=N replays one.
"""

import os
import random
import time

import pytest

import cluster as cm

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 12
# Deliveries reported within this long after the SIGKILL are answers the node sent
# before it died (the lease alone keeps partitions away for over a second).
GRACE = 0.1


def seed():
    s = int(os.environ.get("SKIFF_CRASH_SEED", random.randrange(1 << 30)))
    print("crash seed %d (SKIFF_CRASH_SEED=%d replays it)" % (s, s))
    return s


def acked(loads):
    return sum(ld.acked_count() for ld in loads)


def wait_progress(loads, n, timeout, what):
    base = acked(loads)
    cm.wait_for(lambda: acked(loads) >= base + n, timeout,
                "%d more acknowledgements %s (at %d)" % (n, what, acked(loads)))


def failover(cl, loads, topic, victim, t_kill, affected, timeout=60.0):
    """{partition: seconds from the kill to its first acknowledgement after it}."""
    deadline = time.monotonic() + timeout
    got = {}
    while True:
        for p in affected:
            if p in got:
                continue
            ts = [t for t in (ld.first_ack_after(p, t_kill + GRACE) for ld in loads) if t]
            if ts:
                got[p] = min(ts) - t_kill
        if len(got) == len(affected):
            return got
        if time.monotonic() > deadline:
            try:
                leaders = cl.leaders(topic)
            except AssertionError as e:
                leaders = str(e)
            raise AssertionError(
                "%.0fs after node %d was SIGKILLed, partitions %r have no acknowledgement "
                "yet (others did: %r); leaders now %r; producer errors: %r" % (
                    timeout, victim, sorted(set(affected) - set(got)), got, leaders,
                    [e for ld in loads for e in ld.errors[-3:]]))
        time.sleep(0.05)


def test_acked_records_survive_five_sigkills(cluster_factory, topic_name):
    rnd = random.Random(seed())
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "2"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    loads = [cm.TimedLoad(cl.bootstrap, topic_name, PARTS, "r%d-%d" % (i, rnd.randrange(1 << 30)),
                          rate_sleep=0.001) for i in range(3)]
    for ld in loads:
        ld.start()
    # kill number -> restart the victim right after its partitions moved
    restart_after = {1: True, 2: False, 3: True, 4: True, 5: True}
    down = []
    report = []
    try:
        wait_progress(loads, 1000, 60, "before the first kill")
        for i in range(1, 6):
            time.sleep(rnd.uniform(0.3, 1.5))
            leaders = cl.wait_leaders(topic_name, PARTS, timeout=60)
            candidates = sorted({ld for ld, _ in leaders.values()})
            victim = rnd.choice(candidates)
            affected = sorted(p for p, (ld, _) in leaders.items() if ld == victim)
            node = cl.nodes[victim]
            log_before = node.logs_written()[-1]
            before = acked(loads)
            t_kill = time.monotonic()
            node.kill()
            down.append(victim)
            cl.wait_leaders(topic_name, PARTS, timeout=60, exclude=down)
            took = failover(cl, loads, topic_name, victim, t_kill, affected)
            line = ("kill %d: node %d (log %d) with partitions %s, %d acknowledged before; "
                    "every one acknowledged again after %.2f s (first %.2f s): %s" % (
                        i, victim, log_before, affected, before, max(took.values()),
                        min(took.values()),
                        ", ".join("%d: %.2f" % (p, s) for p, s in sorted(took.items()))))
            print(line)
            report.append((i, victim, max(took.values())))
            if restart_after[i]:
                for v in down:
                    n = cl.nodes[v]
                    old = n.logs_written()
                    n.start()
                    new = n.logs_written()
                    assert len(new) == len(old) + 1 and new[-1] not in old, \
                        "node %d restarted without a new log: logs %r, then %r" % (v, old, new)
                    print("   node %d back as a new incarnation (log %d)" % (v, new[-1]))
                down = []
                cl.wait_brokers()
                wait_progress(loads, 300, 60, "after the restart")
        wait_progress(loads, 1000, 60, "after the last kill")
    finally:
        left = [ld.finish() for ld in loads]
    assert left == [0, 0, 0], "records still undelivered: %r" % left
    cm.loads_ok(loads)
    stats = cm.verify_loads(cl, topic_name, PARTS, loads)
    assert stats["records"] >= stats["acked"] > 0, stats
    print("failover per kill (s): %s" % ", ".join("kill %d node %d %.2f" % r for r in report))
    print("checked %d records (%d acknowledged) in %d partitions" % (
        stats["records"], stats["acked"], PARTS))
