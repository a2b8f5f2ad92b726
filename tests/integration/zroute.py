"""Shared by the zone routing tests (test_7102 to test_7106, docs/zones.md): a zone
cluster with zone routing on, client ids that name a zone, clients run as processes
inside zones (stopped by their PIDs), and a topic read back whole from its mains.

Record format: producer ID writes record i with key "ID-i" and value value(ID, i, size)
("ID-i-" and a filler), as clients/zone_rw.py and tests/java's ZoneClient do; every
client reports a record it read as (partition, offset, digest of key and value).
"""

import json
import os
import re
import signal
import subprocess
import sys
import time

import urllib.request

import crashcheck
import harness
import kproto as k

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "clients"))
import jtools  # noqa: E402
import zone_rw  # noqa: E402

ZONE_RW = os.path.join(HERE, "clients", "zone_rw.py")

# Zone routing is off by default for now (docs/zones.md); rebalancing every second so
# that a restarted node gets partitions back soon.
ROUTING = {"zone.routing.enable": "true", "leader.imbalance.check.interval.seconds": "1"}

value = zone_rw.value
key = zone_rw.key
digest = zone_rw.digest


def client_id(zone, app="app"):
    """A client.id naming the zone (its broker.rack value), as docs/zones.md asks."""
    return "%s,skiff_az=%s" % (app, zone)


def routed_cluster(factory, topic, partitions, overrides=None, **kw):
    """A started ZoneCluster with zone routing on and `topic` created, its partitions'
    mains spread over the three nodes (every node main of some). Returns (cluster,
    {partition: (main, epoch)}) as a client of no zone sees them."""
    o = dict(ROUTING)
    o.update(overrides or {})
    cl = factory(overrides=o, **kw).start()
    cl.wait_balanced()
    cl.create_topic(topic, partitions)
    mains = cl.wait_balanced(topic)
    assert all(mains.get(n) for n in cl.nodes), "mains of %s: %r" % (topic, mains)
    return cl, cl.wait_leaders(topic, partitions)


class Procs:
    """Client processes started inside zones; output to files; each stopped by its PID
    (SIGKILL) at close() whatever happened."""

    def __init__(self, directory):
        self.dir = directory
        os.makedirs(directory, exist_ok=True)
        self.procs = []

    def start(self, zone, name, argv):
        out = os.path.join(self.dir, name + ".out")
        err = os.path.join(self.dir, name + ".err")
        with open(out, "wb") as fo, open(err, "wb") as fe:
            p = zone.popen(argv, stdout=fo, stderr=fe)
        p.name, p.out, p.err, p.t0 = name, out, err, time.monotonic()
        self.procs.append(p)
        return p

    def python(self, zone, name, args):
        return self.start(zone, name, [harness.PYTHON, ZONE_RW] + [str(a) for a in args])

    def java(self, zone, name, args, timeout):
        return self.start(zone, name, ["java"] + jtools.JVM + [
            "-cp", jtools.classpath(), "io.skiff.clients.ZoneClient", "--timeout",
            str(int(timeout))] + [str(a) for a in args])

    def wait(self, p, timeout):
        """(exit status, stdout lines, the JSON summary) of p; fails after timeout."""
        try:
            rc = p.wait(max(0.1, timeout - (time.monotonic() - p.t0)))
        except subprocess.TimeoutExpired:
            self.kill(p)
            raise AssertionError("%s did not finish in %.0fs:\n%s" % (p.name, timeout,
                                                                        self.tails(p)))
        with open(p.out, errors="replace") as f:
            lines = f.read().splitlines()
        summary = None
        for line in reversed(lines):
            if line.startswith("{"):
                summary = json.loads(line)
                break
        p.seconds = time.monotonic() - p.t0
        return rc, lines, summary

    def tails(self, p, n=3000):
        out = []
        for path in (p.out, p.err):
            try:
                with open(path, errors="replace") as f:
                    out.append("--- %s ---\n%s" % (os.path.basename(path), f.read()[-n:]))
            except OSError:
                pass
        return "\n".join(out)

    @staticmethod
    def kill(p):
        if p.poll() is None:
            os.kill(p.pid, signal.SIGKILL)
            p.wait()

    def close(self):
        for p in self.procs:
            self.kill(p)


def acks_of(lines, ident):
    """{(partition, offset): value} of the "A i partition offset" lines of producer ident,
    and the "E ..." lines."""
    acked, errors = {}, []
    for line in lines:
        w = line.split()
        if w and w[0] == "A":
            acked[(int(w[2]), int(w[3]))] = int(w[1])
        elif w and w[0] == "E":
            errors.append(line)
    return acked, errors


def reads_of(lines):
    """[(partition, offset, digest)] of the "R partition offset digest" lines."""
    out = []
    for line in lines:
        w = line.split()
        if len(w) == 4 and w[0] == "R":
            out.append((int(w[1]), int(w[2]), w[3]))
    return out


def read_topic(cl, topic, partitions):
    """The topic read whole from its mains (this process is of no zone):
    {partition: [Batch]}, after crashcheck's checks (offsets contiguous from the log
    start to the high watermark, batches intact); raises LogProblems."""
    out, problems = {}, []
    for p in range(partitions):
        start, hw, batches = cl.read_partition(topic, p)
        _, probs = crashcheck.check_partition(start, hw, batches)
        problems += ["%s-%d: %s" % (topic, p, x) for x in probs]
        if start != 0:
            problems.append("%s-%d: log start %d, not 0" % (topic, p, start))
        out[p] = batches
    if problems:
        raise crashcheck.LogProblems("%d problem(s):\n  %s" % (len(problems),
                                                              "\n  ".join(problems[:50])))
    return out


def records_of(batches):
    """{partition: {offset: (key, value)}} of read_topic's batches."""
    return {p: {b.base_offset + r.offset_delta: (r.key, r.value) for b in bs for r in b.records}
            for p, bs in batches.items()}


def metadata_from(zone, node, topics, client, version=12):
    """Metadata of `topics` asked of `node` by a client in `zone` with client.id client
    (None: a client of this process, of no zone)."""
    if zone is None:
        with k.Conn(node.bootstrap, client_id=client or "kproto") as c:
            return k.metadata(c, topics, version=version, allow_auto=False)
    with zone.conn(node.bootstrap, client_id=client) as c:
        return k.metadata(c, topics, version=version, allow_auto=False)


# ---------------------------------------------------------------- the nodes' own counts

METRIC = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')
NODE_KINDS = ("confirm", "follow", "rpc")


def with_metrics(cl, zones):
    """Gives every node of cl a metrics listener on its zone's address (before start)."""
    for n in cl.nodes.values():
        n.metrics = "%s:%d" % (zones[n.rack].addr, harness.free_port())
        n.overrides["metrics.listener"] = n.metrics


def zone_counts(node):
    """{(direction, kind, peer zone): bytes} of skiff_zone_bytes_total on node's /metrics
    (docs/zones.md, "Cross-zone accounting": TCP payload, no IP/TCP headers)."""
    with urllib.request.urlopen("http://%s/metrics" % node.metrics, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for line in text.splitlines():
        m = METRIC.match(line)
        if m and m.group(1) == "skiff_zone_bytes_total":
            labels = dict(LABEL.findall(m.group(2) or ""))
            out[(labels["direction"], labels["kind"], labels["zone"])] = int(m.group(3))
    return out


def cross_by_kind(cl, before, after):
    """Bytes that crossed zones between two {node id: zone_counts} snapshots, by kind:
    node-to-node kinds as their senders counted them (each byte once), client bytes both
    ways as the nodes counted them."""
    out = {}
    for n in cl.nodes.values():
        b, a = before.get(n.node_id, {}), after.get(n.node_id, {})
        for key, v in a.items():
            direction, kind, zone = key
            if zone in (n.rack, "(unknown)"):
                continue
            if kind in NODE_KINDS and direction != "out":
                continue
            out[kind] = out.get(kind, 0) + v - b.get(key, 0)
    return out
