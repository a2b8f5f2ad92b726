"""etcd trouble under load (docs/cluster.md, "Fencing"). Each test runs an etcd of its own
(tools/etcd.sh in its work directory) to hurt it.

- The etcd leader is SIGKILLed, twice (restarted in between): writes resume once the
  remaining members elected a new leader, and the log checks pass.
- Every etcd member is SIGSTOPped: the nodes cannot renew their leases, so past their
  lease deadline (at most broker.session.timeout.ms after the last renewal) they
  acknowledge nothing: no delivery report arrives and a raw acks=all Produce to each
  node times out or gets a retriable error; fetches of data already durable are still
  answered. After SIGCONT the cluster recovers (nodes
  whose lease expired meanwhile start again as new incarnations) and writes resume
  within seconds.

Throughout, Metadata is sampled from every node every 100 ms: no two nodes may ever be
reported leader of one partition at one epoch; and (stronger) the log checks find no
offset assigned twice.
"""

import threading
import time

import pytest

import cluster as cm
import kproto as k

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 12
SESSION_MS = 2000
# After SIGCONT the expired leases are gone at once; the nodes start again as new
# incarnations and their logs' partitions move "as after a crash" (docs/cluster.md):
# a few seconds. This bound leaves room for a slow machine.
RECOVERY_S = 15


def acked(loads):
    return sum(ld.acked_count() for ld in loads)


def wait_progress(loads, n, timeout, what):
    base = acked(loads)
    cm.wait_for(lambda: acked(loads) >= base + n, timeout,
                "%d more acknowledgements %s (at %d)" % (n, what, acked(loads)))


def largest_ack_gap(loads, t0, t1):
    """The longest time in [t0, t1] with no acknowledgement of any partition."""
    ts = sorted(t for ld in loads for v in list(ld.ack_times.values()) for t in v
                if t0 <= t <= t1)
    edges = [t0] + ts + [t1]
    return max(b - a for a, b in zip(edges, edges[1:]))


def incarnation_restarts(cl):
    return {n.node_id: n.log_text().count("restarting as a new incarnation")
            for n in cl.nodes.values()}


def finish_and_check(cl, loads, sampler, topic):
    left = [ld.finish() for ld in loads]
    sampler.finish()
    assert left == [0] * len(loads), "records still undelivered: %r" % left
    cm.loads_ok(loads)
    conflicts = sampler.conflicts()
    assert not conflicts, "two leaders of one partition at one epoch (topic, partition, " \
        "epoch, {leader: [(s, reported by)]}): %r" % conflicts[:10]
    stats = cm.verify_loads(cl, topic, PARTS, loads)
    assert stats["records"] >= stats["acked"] > 0, stats
    print("checked %d records (%d acknowledged); %s" % (stats["records"], stats["acked"],
                                                        sampler.summary()))
    return stats


def start_cluster(cluster_factory, own_etcd, topic):
    cl = cluster_factory(3, etcd=own_etcd,
                         overrides={"broker.session.timeout.ms": str(SESSION_MS),
                                    "leader.imbalance.check.interval.seconds": "2"}).start()
    cl.wait_balanced()
    cl.create_topic(topic, PARTS)
    sampler = cm.MetadataSampler(cl, [topic, cm.OFFSETS_TOPIC]).start()
    loads = [cm.TimedLoad(cl.bootstrap, topic, PARTS, "e%d-%s" % (i, cl.tag), rate_sleep=0.001)
             for i in range(2)]
    for ld in loads:
        ld.start()
    return cl, sampler, loads


def test_etcd_leader_sigkill_under_load(cluster_factory, own_etcd, topic_name):
    cl, sampler, loads = start_cluster(cluster_factory, own_etcd, topic_name)
    try:
        wait_progress(loads, 1000, 60, "before etcd is hurt")
        for rnd in (1, 2):
            leader = own_etcd.leader()
            t0 = time.monotonic()
            own_etcd.kill_member(leader)
            wait_progress(loads, 2000, 60, "after etcd leader %d was killed" % leader)
            new = own_etcd.leader(timeout=30)
            assert new != leader, (new, leader)
            t1 = time.monotonic()
            print("round %d: etcd leader m%d SIGKILLed, m%d elected; longest pause in "
                  "acknowledgements %.2f s" % (rnd, leader, new, largest_ack_gap(loads, t0, t1)))
            own_etcd.start_member(leader)
            cl.wait_leaders(topic_name, PARTS, timeout=60)
            wait_progress(loads, 500, 60, "after etcd member %d came back" % leader)
    except BaseException:
        sampler.finish()
        for ld in loads:
            ld.finish(5)
        raise
    print("nodes restarted as new incarnations: %r" % incarnation_restarts(cl))
    finish_and_check(cl, loads, sampler, topic_name)


def probe(node, topic, partition, results, wait_s):
    """One raw acks=all Produce to node; results[node id] = its answer, or the exception
    (a timeout: no answer in wait_s)."""
    try:
        with k.Conn(node.bootstrap, timeout=wait_s) as c:
            results[node.node_id] = k.produce(c, topic, partition,
                                              k.batch([b"probe-%d" % node.node_id]),
                                              timeout_ms=int(wait_s * 1000) - 500)
    except Exception as e:  # noqa: BLE001 - judged by the caller
        results[node.node_id] = e


def fetch_durable(node, topic, partition):
    """(error, batches) of a Fetch from offset 0 (records acknowledged before etcd
    stopped, hence durable)."""
    with k.Conn(node.bootstrap, timeout=5) as c:
        _, pd = k.fetch(c, topic, partition, 0, timeout=5)
    return pd["ErrorCode"], len(k.parse_batches(pd["Records"]))


def test_nodes_cut_off_from_etcd_stop_acknowledging(cluster_factory, own_etcd, topic_name):
    probe_topic = topic_name + "-probe"
    cl, sampler, loads = start_cluster(cluster_factory, own_etcd, topic_name)
    stopped = []
    try:
        probe_leaders = cl.create_topic(probe_topic, 6)
        wait_progress(loads, 1000, 60, "before etcd is stopped")
        leaders = cl.leaders(topic_name)
        for i in (1, 2, 3):
            own_etcd.stop_member(i)
            stopped.append(i)
        t_stop = time.monotonic()
        # Past every lease deadline: nothing may be acknowledged from here until SIGCONT.
        quiet_from = t_stop + SESSION_MS / 1000.0 + 0.5
        time.sleep(quiet_from - time.monotonic())
        results = {}
        threads = []
        for nid in (1, 2, 3):
            p = next((q for q, (ld, _) in sorted(probe_leaders.items()) if ld == nid), 0)
            t = threading.Thread(target=probe, args=(cl.nodes[nid], probe_topic, p, results, 3.5))
            t.start()
            threads.append(t)
        # Data already durable stays readable from its main.
        fetched = {}
        for nid in (1, 2, 3):
            p = next((q for q, (ld, _) in sorted(leaders.items()) if ld == nid), None)
            if p is not None:
                fetched[(nid, p)] = fetch_durable(cl.nodes[nid], topic_name, p)
        for t in threads:
            t.join(10)
        time.sleep(max(0.0, t_stop + 6.5 - time.monotonic()))
        t_cont = time.monotonic()
        late = sum(ld.acks_between(quiet_from, t_cont) for ld in loads)
        early = sum(ld.acks_between(t_stop, quiet_from) for ld in loads)
        for i in stopped:
            own_etcd.cont_member(i)
        stopped = []
        last = max([t for ld in loads for v in list(ld.ack_times.values()) for t in v
                    if t < t_cont] or [0])
        print("etcd stopped for %.1f s: %d acknowledgements in the first %.1f s (lease "
              "deadline), the last %.2f s after the stop, %d after; probes: %r" % (
                  t_cont - t_stop, early, quiet_from - t_stop, last - t_stop, late, results))
        assert late == 0, "%d records acknowledged between %.1f s after every etcd member " \
            "stopped and their SIGCONT (%.1f s)" % (late, quiet_from - t_stop, t_cont - t_stop)
        for nid, r in sorted(results.items()):
            if isinstance(r, dict):
                assert r["ErrorCode"] in cm.RETRIABLE, \
                    "node %d answered a Produce while cut off from etcd: %r" % (nid, r)
            else:
                assert isinstance(r, (OSError, k.ConnectionClosed)), \
                    "probe of node %d: %r" % (nid, r)
        assert sorted(results) == [1, 2, 3], results
        print("fetches while etcd was stopped ((node, partition): (error, batches)): %r" % (
            fetched,))
        assert fetched and all(e == k.NONE and n > 0 for e, n in fetched.values()), \
            "a node cut off from etcd must answer fetches of durable data: %r" % fetched

        # Recovery: every node serves again (possibly as a new incarnation), writes resume.
        wait_progress(loads, 2000, 90, "after etcd came back")
        resumed = min(t for t in (ld.first_ack_after(p, t_cont) for ld in loads
                                  for p in range(PARTS)) if t) - t_cont
        print("writes resumed %.2f s after SIGCONT" % resumed)
        cm.wait_for(lambda: all(n.alive for n in cl.nodes.values()), 30, "every node to run")
        cl.wait_brokers(timeout=60)
        cl.wait_leaders(topic_name, PARTS, timeout=60)
        wait_progress(loads, 1000, 60, "once every node is back")
    except BaseException:
        for i in stopped:
            own_etcd.cont_member(i)
        sampler.finish()
        for ld in loads:
            ld.finish(5)
        raise
    print("nodes restarted as new incarnations: %r" % incarnation_restarts(cl))
    finish_and_check(cl, loads, sampler, topic_name)
    # The probe topic: whatever it holds is intact and contiguous (the probes were never
    # acknowledged, so they may or may not be there).
    cl.verify(probe_topic, 6, [])
    if resumed > RECOVERY_S:
        raise AssertionError(
            "writes resumed only %.1f s after etcd came back (bound %d s); the nodes' "
            "restarts:\n%s" % (resumed, RECOVERY_S, "\n".join(
                ln for n in cl.nodes.values() for ln in n.log_text().splitlines()
                if "lost its membership" in ln or "finishing in-flight" in ln
                or "closing with" in ln or "starting again" in ln)))
