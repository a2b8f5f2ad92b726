"""Long administrative work reports its progress (docs/operations.md, "Work under way"):
the skiff_work_* metrics, a line of `skiffd status` while it runs, and a log line at its
start and at its end with its counts and duration.

- rebalance: two nodes serve a 12-partition topic and __consumer_offsets (6); a third
  joins, and the controller moves partitions to it one at a time
  (cluster.max.partition.moves=1) until it has its share. The run's total is what
  node 3 ends up serving, and `skiffd status` shows it under way.
- reassignment: kafka-reassign-partitions.sh moves every partition of a topic to the
  next node; the node that took the request counts them until each serves at its target.
- retention: one node sweeps its partitions every 500 ms; a sweep counts every partition
  of the topics it holds and says how many log starts it advanced.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time

import pytest

import cluster as cm
import harness
import s3env

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients"))
import jtools  # noqa: E402

PARTS = 12
UNDER_WAY = re.compile(r"^  node (\d+): (\w+), (\d+) of (\d+) partitions done, (\d+) left, "
                       r"for ([\d.]+) s$", re.M)


def work(m, name, kind):
    return m['skiff_%s{work="%s"}' % (name, kind)]


def metrics_cluster(cluster_factory, overrides):
    cl = cluster_factory(0, overrides=overrides)
    for _ in range(3):
        cl.add_node({"metrics.listener": "127.0.0.1:%d" % harness.free_port()}, start=False)
    return cl


def status(bootstrap):
    r = subprocess.run([harness.SKIFFD, "status", "--bootstrap", bootstrap, "--timeout-ms",
                        "3000"], capture_output=True, text=True, timeout=30)
    return r.stdout


class StatusWatch(threading.Thread):
    """Runs `skiffd status` over and over; keeps its "Under way" lines of one kind."""

    def __init__(self, bootstrap, kind):
        super().__init__(daemon=True)
        self.bootstrap, self.kind = bootstrap, kind
        self.seen, self.halt = [], threading.Event()

    def run(self):
        while not self.halt.is_set():
            for ln in UNDER_WAY.finditer(status(self.bootstrap)):
                if ln.group(2) == self.kind:
                    self.seen.append(tuple(int(ln.group(k)) for k in (1, 3, 4, 5)))

    def stop(self):
        self.halt.set()
        self.join(60)
        return self.seen


def controller(cl, ids):
    def find():
        for i in ids:
            if s3env.metrics(cl.node(i)).get("skiff_cluster_controller") == 1:
                return i
        return None
    return cm.wait_for(find, 30, "a controller among %r" % (ids,))


def log_lines(node, kind):
    text = node.log_since_start()
    return (re.findall(r"\[work\] %s started: (\d+) partitions to \w+" % kind, text),
            re.findall(r"\[work\] %s done: (\d+) of (\d+) partitions to \w+ \w+ in ([\d.]+) s"
                       % kind, text))


def settled_rebalance(cl, topic, ctl):
    """(mains of topic, of __consumer_offsets) once spread and the controller's run over."""
    def settled():
        mains, offsets = cl.mains(topic), cl.mains(cm.OFFSETS_TOPIC)
        counts = [len(mains.get(i, [])) + len(offsets.get(i, [])) for i in (1, 2, 3)]
        done = max(counts) - min(counts) <= 1 and \
            work(s3env.metrics(cl.node(ctl)), "work_running", "rebalance") == 0
        return done and (mains, offsets)
    return settled


def test_rebalance_after_a_join_reports_progress(cluster_factory, topic_name):
    cl = metrics_cluster(cluster_factory, {"leader.imbalance.check.interval.seconds": "2",
                                           "cluster.max.partition.moves": "1"})
    cl.nodes[1].start()
    cl.nodes[2].start()
    cl.wait_brokers({1, 2})
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    ctl = controller(cl, (1, 2))
    m = s3env.metrics(cl.node(ctl))
    runs = work(m, "work_runs_total", "rebalance")
    assert work(m, "work_running", "rebalance") == 0

    watch = StatusWatch(cl.node(1).bootstrap, "rebalance")
    watch.start()
    try:
        cl.nodes[3].start()
        cl.wait_brokers({1, 2, 3})
        mains, offsets = cm.wait_for(settled_rebalance(cl, topic_name, ctl), 90,
                                     "the rebalance to settle", interval=0.1)
    finally:
        seen = watch.stop()
    moved = len(mains.get(3, [])) + len(offsets.get(3, []))
    print("node 3 took %d partitions; status lines seen (node, done, total, left): %r" % (
        moved, seen))
    assert moved >= 4

    m = s3env.metrics(cl.node(ctl))
    assert work(m, "work_runs_total", "rebalance") == runs + 1
    assert work(m, "work_partitions_total", "rebalance") == moved
    assert work(m, "work_partitions_done", "rebalance") == moved
    assert work(m, "work_partitions_left", "rebalance") == 0
    assert work(m, "work_last_duration_seconds", "rebalance") > 0

    # One move at a time takes a while: `skiffd status` showed it on the controller.
    assert seen, "no rebalance line in skiffd status while node 3 took %d partitions" % moved
    for node, done, total, left in seen:
        assert node == ctl and done + left == total == moved and left > 0, seen
    assert [d for _, d, _, _ in seen] == sorted(d for _, d, _, _ in seen), seen  # only forward

    started, ended = log_lines(cl.node(ctl), "rebalance")
    assert str(moved) in started, started
    assert (str(moved), str(moved)) in [(d, t) for d, t, _ in ended], ended


def test_reassignment_reports_progress(cluster_factory, topic_name, tmp_path):
    cl = metrics_cluster(cluster_factory, {"auto.leader.rebalance.enable": "false"})
    cl.start()  # nothing rebalances: the moves are the reassignment's alone
    cl.create_topic(topic_name, PARTS)
    cl.wait_leaders(topic_name, PARTS)
    before = cl.mains(topic_name)
    target = {p: i % 3 + 1 for i, ps in before.items() for p in ps}  # every one moves
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic_name, "partition": p, "replicas": [n]} for p, n in target.items()]}))
    res = jtools.tools(["reassign", "--bootstrap-server", cl.bootstrap,
                        "--reassignment-json-file", str(plan), "--execute"])[0]
    assert res["exit"] in (None, 0), jtools.show(res)

    def done():
        mains = cl.mains(topic_name)
        if {p: i for i, ps in mains.items() for p in ps} != target:
            return None
        for i in (1, 2, 3):
            m = s3env.metrics(cl.node(i))
            if work(m, "work_runs_total", "reassignment") and \
                    not work(m, "work_running", "reassignment"):
                return i, m
        return None
    took, m = cm.wait_for(done, 60, "the reassignment to complete")
    assert work(m, "work_runs_total", "reassignment") == 1
    assert work(m, "work_partitions_total", "reassignment") == PARTS
    assert work(m, "work_partitions_done", "reassignment") == PARTS
    assert work(m, "work_last_duration_seconds", "reassignment") > 0
    others = [s3env.metrics(cl.node(i)) for i in (1, 2, 3) if i != took]
    assert all(work(o, "work_runs_total", "reassignment") == 0 for o in others)
    started, ended = log_lines(cl.node(took), "reassignment")
    assert started == [str(PARTS)], started
    assert [(d, t) for d, t, _ in ended] == [(str(PARTS), str(PARTS))], ended


def test_retention_sweep_reports_progress(broker_factory, topic_name):
    b = broker_factory({"metrics.listener": "127.0.0.1:%d" % harness.free_port(),
                        "log.retention.check.interval.ms": "500",
                        "s3.wal.upload.interval.ms": "500"})
    expiring, kept = topic_name + "-exp", topic_name + "-keep"
    s3env.create_topic(b, expiring, 4, {"retention.ms": "1500"})
    s3env.create_topic(b, kept, 2)
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b.bootstrap})
    for i in range(40):
        p.produce(expiring, value=b"e" * 100, partition=i % 4)
        p.produce(kept, value=b"k" * 100, partition=i % 2)
    assert p.flush(30) == 0
    total = 4 + 2  # every partition of a topic with a retention is swept

    def advanced():
        m = s3env.metrics(b)
        starts = [m.get('skiff_partition_log_start_offset{topic="%s",partition="%d"}' % (
            expiring, i), 0) for i in range(4)]
        return all(s == 10 for s in starts) and m
    m = cm.wait_for(advanced, 30, "retention to empty %s" % expiring)
    assert work(m, "work_runs_total", "retention") >= 2
    assert work(m, "work_partitions_total", "retention") == total
    assert work(m, "work_last_duration_seconds", "retention") >= 0
    if not work(m, "work_running", "retention"):
        assert work(m, "work_partitions_done", "retention") == total

    text = b.log_text()
    started = re.findall(r"\[work\] retention started: (\d+) partitions to sweep", text)
    ended = re.findall(r"\[work\] retention done: (\d+) of (\d+) partitions to sweep swept in "
                       r"([\d.]+) s; (\d+) log starts advanced", text)
    assert started and set(started) == {str(total)}, started
    # the four partitions of the expiring topic moved their log start (in one sweep or
    # more); the kept topic's never did
    assert sum(int(a) for _, _, _, a in ended) >= 4, ended
    assert all(d == t == str(total) for d, t, _, _ in ended), ended
