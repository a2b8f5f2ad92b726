"""A node that joins takes its share (docs/cluster.md, controller: "rebalances";
auto.leader.rebalance.enable, leader.imbalance.check.interval.seconds).

Two nodes serve a 12-partition topic (6 mains each) while two idempotent producers
write to every partition. A third node joins; leader.imbalance.check.interval.seconds
is 2 on every node, so a couple of seconds later the controller moves partitions to it
(planned moves: HANDOFF and ADOPT under load) until it is main of about a third of the
topic (4 of 12, give or take one). The producers never fail, and every acknowledged
record is read back at its offset afterwards.

Also: the controller waits leader.imbalance.check.interval.seconds after the set of
nodes changed before it rebalances (`skiffd --help`), so a node that joins serves
nothing during that time.
"""

import time

import pytest

import cluster as cm

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 12
INTERVAL_S = 2


def acked(loads):
    return sum(ld.acked_count() for ld in loads)


def wait_progress(loads, n, timeout, what):
    base = acked(loads)
    cm.wait_for(lambda: acked(loads) >= base + n, timeout,
                "%d more acknowledgements %s (at %d)" % (n, what, acked(loads)))


def test_joining_node_takes_a_share_under_load(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={
        "leader.imbalance.check.interval.seconds": str(INTERVAL_S)})
    cl.nodes[1].start()
    cl.nodes[2].start()
    cl.wait_brokers({1, 2})
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    before = cl.mains(topic_name)
    assert sorted(len(v) for v in before.values()) == [6, 6], \
        "two nodes should lead 6 partitions each: %r" % before
    sampler = cm.MetadataSampler(cl, [topic_name, cm.OFFSETS_TOPIC]).start()
    loads = [cm.TimedLoad(cl.bootstrap, topic_name, PARTS, "j%d-%s" % (i, cl.tag),
                          rate_sleep=0.001) for i in range(2)]
    for ld in loads:
        ld.start()
    try:
        wait_progress(loads, 1000, 60, "before the third node joins")
        t_join = time.monotonic()
        cl.nodes[3].start()
        cl.wait_brokers({1, 2, 3})

        def settled():
            try:
                mains = cl.mains(topic_name)
                offsets = cl.mains(cm.OFFSETS_TOPIC)
            except AssertionError:
                return None
            total = {i: len(mains.get(i, [])) + len(offsets.get(i, [])) for i in (1, 2, 3)}
            # the controller stops when no node has more than the least loaded + 1
            if max(total.values()) - min(total.values()) <= 1 and -1 not in mains:
                return mains, offsets
            return None
        mains, offsets = cm.wait_for(settled, 60, "the rebalance to settle (mains now %r)" % (
            cl.mains(topic_name),))
        took = time.monotonic() - t_join
        cl.wait_leaders(topic_name, PARTS, timeout=30)
        print("%.1f s after node 3 joined: mains of %s %r, of %s %r" % (
            took, topic_name, mains, cm.OFFSETS_TOPIC, offsets))
        wait_progress(loads, 1000, 60, "after the rebalance")
    except BaseException:
        sampler.finish()
        for ld in loads:
            ld.finish(5)
        raise
    left = [ld.finish() for ld in loads]
    sampler.finish()
    assert left == [0, 0], "records still undelivered: %r" % left
    cm.loads_ok(loads)
    stats = cm.verify_loads(cl, topic_name, PARTS, loads)
    print("checked %d records (%d acknowledged); %s" % (stats["records"], stats["acked"],
                                                         sampler.summary()))
    assert not sampler.conflicts(), sampler.conflicts()[:10]
    assert mains.get(3), "node 3 leads no partition of %s after the rebalance: %r" % (
        topic_name, mains)
    if not all(3 <= len(mains.get(i, [])) <= 5 for i in (1, 2, 3)):
        raise AssertionError(
            "after node 3 joined, the mains of the 12 partitions of %s are %r (and of %s %r):"
            " the new node should serve about 4 of them, every node 3 to 5" % (
                topic_name, mains, cm.OFFSETS_TOPIC, offsets))


def rounds(cl):
    return "\n".join(ln for n in cl.nodes.values() for ln in n.log_text().splitlines()
                     if "[controller] round:" in ln or "joined cluster" in ln)


def test_rebalance_waits_for_the_check_interval(cluster_factory, topic_name):
    interval = 4
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": str(interval)})
    cl.nodes[1].start()
    cl.nodes[2].start()
    cl.wait_brokers({1, 2})
    cl.wait_balanced(timeout=30)
    cl.create_topic(topic_name, PARTS)
    time.sleep(interval + 0.5)  # the last change of the node set is long past
    cl.nodes[3].start()         # returns once node 3 registered and listens
    t_joined = time.monotonic()
    early = None
    while time.monotonic() < t_joined + interval - 0.5:
        led = {t: ps for t in (topic_name, cm.OFFSETS_TOPIC)
               for ps in [cl.mains(t).get(3, [])] if ps}
        if led and early is None:
            early = (time.monotonic() - t_joined, led)
        time.sleep(0.1)
    got = cm.wait_for(lambda: cl.mains(topic_name).get(3), interval + 15,
                      "node 3 to become main of a partition of %s" % topic_name)
    print("%.1f s after joining, node 3 leads %s; controller rounds:\n%s" % (
        time.monotonic() - t_joined, got, rounds(cl)))
    if early:
        raise AssertionError(
            "node 3 became main of %r %.2f s after it joined, though "
            "leader.imbalance.check.interval.seconds is %d; controller rounds and joins:\n%s" % (
                early[1], early[0], interval, rounds(cl)))
