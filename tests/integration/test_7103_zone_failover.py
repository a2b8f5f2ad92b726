"""SIGKILL of a proxy node, and separately of a main node, while producers in every zone
write through proxies (docs/zones.md, "Payload logs and what keeps them"; docs/cluster.md,
"Unplanned: a node dies").

Five nodes with zone routing on: 1 in zone a, 2 in b, 3 in c, then 4 in c and 5 in a,
started after a 12-partition topic was placed on nodes 1-3 (rebalancing off, so that
nodes 4 and 5 are main of none of its partitions: pure proxies; __consumer_offsets has
one partition, so that placement, which counts it, gives each of nodes 1-3 some). In
each zone a confluent-kafka idempotent acks=all producer (crashcheck.ProduceLoad,
bootstrapped on its zone's nodes, client.id naming its zone) writes to every partition
throughout: two thirds of its batches go through a proxy of its zone to a main in
another zone.

- Proxy: node 4, zone c's proxy of some partitions (rendezvous between nodes 3 and 4),
  is SIGKILLed with batches in its payload log and confirms in flight. Zone c's
  producer must go on through node 3, retrying batches that the mains may already have
  linked from node 4's payload log (dead now, in a custodian's hands). Node 4 is
  restarted as a new incarnation (new data and payload logs).
- Main: node 1, main of a third of the partitions (zones b and c write to them through
  their proxies' confirms, zone a directly), is SIGKILLed; its partitions move to new
  mains (their custodian replays its log), and the proxies confirm to those. Zone a's
  producer goes on through node 5. The new mains upload what they adopted, and with it
  what they linked since, within seconds: the check waits for that, so that those
  batches are read from objects. Node 1 is restarted likewise.

Afterwards every acknowledged record is read back at its offset from the mains,
offsets contiguous, nothing twice, nothing never produced, and no producer saw a
failure. Printed: the time from the SIGKILL to each touched producer's first
acknowledgement on every partition the node served it (produce resumed).
"""

import time

import pytest

import cluster as cm
import crashcheck
import zroute as zr

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 12
GRACE = 0.1      # acknowledgements this soon after a SIGKILL were sent before it
LAYOUT = ["a", "b", "c", "c", "a"]

def zone_leaders(zone, node, topic):
    """{partition: leader} as `node` tells a client of `zone`."""
    md = zr.metadata_from(zone, node, [topic], zr.client_id(zone.name, "md"))
    t = md["Topics"][0]
    assert t["ErrorCode"] == 0, t
    return {p["PartitionIndex"]: p["LeaderId"] for p in t["Partitions"]}


def uploads(node):
    """How many uploads of its WAL to objects the node logged."""
    return node.log_text().count("[tier] uploaded WAL")


def wait_progress(loads, n, timeout, what):
    for ld in loads:
        base = ld.acked_count()
        cm.wait_for(lambda: ld.acked_count() >= base + n, timeout,
                    "%d more acknowledgements of producer %s %s" % (n, ld.run_id, what))


def resumed(load, parts, t_kill, timeout=60.0):
    """{partition: seconds from t_kill to load's first acknowledgement on it after}."""
    deadline = time.monotonic() + timeout
    got = {}
    while len(got) < len(parts):
        for p in parts:
            if p not in got:
                t = load.first_ack_after(p, t_kill + GRACE)
                if t is not None:
                    got[p] = t - t_kill
        if time.monotonic() > deadline:
            raise AssertionError(
                "%.0fs after the SIGKILL, producer %s has no acknowledgement on partitions %r "
                "(others: %r); its errors: %r" % (timeout, load.run_id,
                                                  sorted(set(parts) - set(got)), got,
                                                  load.errors[-5:]))
        time.sleep(0.05)
    return got


def restart(node):
    """Starts a SIGKILLed node again: a new incarnation, with a new log."""
    old = node.logs_written()
    node.start()
    new = node.logs_written()
    assert len(new) == len(old) + 1 and new[-1] not in old, \
        "node %d restarted without a new log: logs %r, then %r" % (node.node_id, old, new)
    return new[-1]


class Setup:
    pass


def start(zones, factory, topic):
    """The five nodes, the topic on nodes 1-3, zone routes, a producer per zone writing."""
    s = Setup()
    s.t0 = time.monotonic()
    cl = s.cl = factory(overrides=dict(zr.ROUTING, **{"auto.leader.rebalance.enable": "false"}),
                        layout=LAYOUT, offsets_partitions=1)
    for i in (1, 2, 3):
        cl.nodes[i].start()
    cl.wait_brokers()
    s.mains = cl.create_topic(topic, PARTS)
    by_main = {i: sorted(p for p, (m, _) in s.mains.items() if m == i) for i in (1, 2, 3)}
    assert all(by_main.values()), "mains of %s: %r" % (topic, s.mains)
    for i in (4, 5):
        cl.nodes[i].start()
    cl.wait_brokers()
    assert cl.wait_leaders(topic, PARTS) == s.mains       # 4 and 5 lead nothing

    # Who serves each zone: the main when it is in the zone, else a proxy of the zone.
    s.routes = {}
    for z in zones:
        home = {n.node_id: n for n in cl.nodes.values() if n.rack == z.name}
        first = home[min(home)]
        s.routes[z.name] = cm.wait_for(
            lambda: (lambda r: r if set(r.values()) <= set(home) else None)(
                zone_leaders(z, first, topic)), 15, "zone %s's routes" % z.name)
        print("zone %s is served by %r" % (z.name, s.routes[z.name]))

    s.loads = {}
    for z in zones:
        bs = ",".join(n.bootstrap for n in cl.nodes.values() if n.rack == z.name)
        s.loads[z.name] = z.inside(cm.TimedLoad, bs, topic, PARTS, "z%s-%d" % (
            z.name, int(time.time() * 1000) % 100000), extra_conf={
            "client.id": zr.client_id(z.name, "load")}, rate_sleep=0.001)
    for ld in s.loads.values():
        ld.start()
    return s


def finish(s, topic, t_kill):
    """Stops the producers and checks everything they had acknowledged."""
    left = {z: ld.finish() for z, ld in s.loads.items()}
    assert left == {z: 0 for z in s.loads}, "records still undelivered: %r" % left
    loads = list(s.loads.values())
    cm.loads_ok(loads)
    try:
        stats = cm.verify_loads(s.cl, topic, PARTS, loads)
    except crashcheck.LogProblems:
        explain(s.cl, topic, s.loads, t_kill)
        raise
    assert stats["records"] >= stats["acked"] > 0, stats
    print("checked %d records (%d acknowledged: %s) in %d partitions; %.0f s in all" % (
        stats["records"], stats["acked"], ", ".join(
            "zone %s %d" % (z, ld.acked_count()) for z, ld in sorted(s.loads.items())),
        PARTS, time.monotonic() - s.t0))


def explain(cl, topic, loads, t_kill):
    """For each partition with offset gaps: the gaps, and per producer the acknowledged
    records missing, with when they were acknowledged (seconds after the SIGKILL)."""
    for p in range(PARTS):
        start, hw, batches = cl.read_partition(topic, p)
        have, gaps, prev = set(), [], start
        for b in batches:
            if b.base_offset > prev:
                gaps.append((prev, b.base_offset - 1))
            prev = b.last_offset + 1
            have.update(range(b.base_offset, b.last_offset + 1))
        if not gaps:
            continue
        print("%s-%d (leader %r, log start %d, high watermark %d): %d gaps, first %r" % (
            topic, p, cl.leaders(topic)[p], start, hw, len(gaps), gaps[:5]))
        for z, ld in sorted(loads.items()):
            with ld.lock:
                acks = [o for pp, o, _ in ld.acked if pp == p]
                times = list(ld.ack_times.get(p, []))
            miss = [(o, round(t - t_kill, 2)) for o, t in zip(acks, times) if o not in have]
            if miss:
                print("   zone %s's producer: %d acknowledged records missing, acknowledged "
                      "%.2f to %.2f s after the SIGKILL, e.g. offsets %r" % (
                          z, len(miss), min(t for _, t in miss), max(t for _, t in miss),
                          [o for o, _ in miss[:5]]))


def test_sigkill_of_a_proxy_under_cross_zone_produce(zones, zone_cluster_factory, topic_name):
    s = start(zones, zone_cluster_factory, topic_name)
    via4 = sorted(p for p, ld in s.routes["c"].items() if ld == 4)
    assert via4, "node 4 proxies no partition for zone c: %r" % s.routes["c"]
    assert all(s.mains[p][0] not in (3, 4) for p in via4)
    t_kill = time.monotonic()
    try:
        wait_progress(s.loads.values(), 500, 60, "before the kill")
        n4 = s.cl.nodes[4]
        log4 = n4.logs_written()[-1]
        before = sum(ld.acked_count() for ld in s.loads.values())
        t_kill = time.monotonic()
        n4.kill()
        took = resumed(s.loads["c"], via4, t_kill)
        print("SIGKILL of proxy node 4 (log %d; zone c's proxy of partitions %s, mains %s), "
              "%d acknowledged before: zone c's producer acknowledged on each again after "
              "%.2f s (first %.2f s)" % (log4, via4, [s.mains[p][0] for p in via4], before,
                                         max(took.values()), min(took.values())))
        after = zone_leaders(zones["c"], s.cl.nodes[3], topic_name)
        assert set(after.values()) == {3}, "zone c after node 4 died: %r" % after
        wait_progress(s.loads.values(), 300, 60, "after the kill")
        print("node 4 back as a new incarnation (log %d)" % restart(n4))
        s.cl.wait_brokers()
        wait_progress(s.loads.values(), 300, 60, "after node 4's restart")
    except BaseException:
        for ld in s.loads.values():
            ld.finish(10)
        raise
    finish(s, topic_name, t_kill)
    print("produce resumed %.2f s after the SIGKILL of the proxy" % max(took.values()))


def test_sigkill_of_a_main_under_cross_zone_produce(zones, zone_cluster_factory, topic_name):
    s = start(zones, zone_cluster_factory, topic_name)
    lost = sorted(p for p, (m, _) in s.mains.items() if m == 1)
    t_kill = time.monotonic()
    try:
        wait_progress(s.loads.values(), 500, 60, "before the kill")
        n1 = s.cl.nodes[1]
        log1 = n1.logs_written()[-1]
        before = sum(ld.acked_count() for ld in s.loads.values())
        ups = {n.node_id: uploads(n) for n in s.cl.nodes.values()}
        t_kill = time.monotonic()
        n1.kill()
        s.cl.wait_leaders(topic_name, PARTS, timeout=60, exclude=[1])
        per_zone = {z: resumed(ld, lost, t_kill) for z, ld in s.loads.items()}
        worst = max(max(v.values()) for v in per_zone.values())
        print("SIGKILL of main node 1 (log %d; main of partitions %s), %d acknowledged "
              "before: produce resumed on each after %s; new mains %r" % (
                  log1, lost, before, "; ".join(
                      "zone %s %.2f s (first %.2f s)" % (z, max(v.values()), min(v.values()))
                      for z, v in sorted(per_zone.items())),
                  {p: s.cl.leaders(topic_name)[p][0] for p in lost}))
        wait_progress(s.loads.values(), 300, 60, "after the kill")
        new = {s.cl.leaders(topic_name)[p][0] for p in lost}
        cm.wait_for(lambda: all(uploads(s.cl.nodes[i]) > ups[i] for i in new), 30,
                    "the new mains %s to upload" % sorted(new))
        print("node 1 back as a new incarnation (log %d)" % restart(n1))
        s.cl.wait_brokers()
        wait_progress(s.loads.values(), 300, 60, "after node 1's restart")
    except BaseException:
        for ld in s.loads.values():
            ld.finish(10)
        raise
    finish(s, topic_name, t_kill)
    print("produce resumed %.2f s after the SIGKILL of the main" % worst)
