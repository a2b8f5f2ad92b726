"""Cross-zone accounting (docs/zones.md, "Cross-zone accounting"): what the nodes count
against what crossed the region's router.

Three nodes, one per zone, zone routing on, each serving its metrics and /zones on its
zone's address. A client of zone b (client.id naming it) produces through the zone-b
node to partitions whose mains are in zones a and c: the records stay in zone b, the
confirms and their answers cross. Then a client of zone c asks the zone-a node for
metadata: client traffic across zones. For each window the nodes' cross-zone counters,
per ordered pair of zones, must agree with the nftables counters of the region (whose
bytes include 52 bytes of IP and TCP headers per packet, taken off before comparing);
the two nodes of a pair must agree with each other; the zone-b client's own traffic
with its node counts as own-zone; etcd (the region's) counts as of unknown zone; and
/zones and tools/zone-report.py answer with the same numbers.
"""

import json
import os
import re
import subprocess
import time
import urllib.request

import pytest

import harness
import kproto as k
import zones as zm

pytestmark = pytest.mark.cluster

PARTS = 6
BATCHES, RECORDS, SIZE = 60, 16, 1000
METADATA_REQUESTS = 200
HEADERS = 52          # IPv4 (20) + TCP (20) + timestamps option (12), per packet
TOLERANCE = 0.10
NODE_KINDS = ("confirm", "follow", "rpc")
IDLE_S = 3.0
ETCD_SKEW = 600       # bytes: about one lease keep-alive and its answer
REPORT = os.path.join(harness.ROOT, "tools", "zone-report.py")
METRIC = re.compile(r'^(\w+)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'(\w+)="([^"]*)"')


def scrape(node, path="/metrics"):
    with urllib.request.urlopen("http://%s%s" % (node.metrics, path), timeout=10) as r:
        return r.read().decode()


def zone_bytes(node):
    """{(direction, kind, zone): bytes} and {path: produced bytes} of one node."""
    by, produced = {}, {}
    for line in scrape(node).splitlines():
        m = METRIC.match(line)
        if not m:
            continue
        labels = dict(LABEL.findall(m.group(2) or ""))
        if m.group(1) == "skiff_zone_bytes_total":
            by[(labels["direction"], labels["kind"], labels["zone"])] = int(m.group(3))
            assert (labels["cross"] == "true") == (
                labels["zone"] not in (node.rack, "(unknown)")), line
        elif m.group(1) == "skiff_client_produced_bytes_total":
            produced[labels["path"]] = int(m.group(3))
    return by, produced


def nft(zones):
    """{(src, dst): (bytes, packets)} of the region's counters."""
    r = subprocess.run([zm.ZONES_SH, "stats", zones.prefix], stdout=subprocess.PIPE,
                       check=True, timeout=60)
    out = {}
    for line in r.stdout.decode().splitlines():
        m = re.match(r"^(\S+)->(\S+) bytes=(\d+) packets=(\d+)$", line)
        if m:
            out[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
    return out


class Window:
    """Node counters and nft counters before and after a workload."""

    def __init__(self, cl, zones):
        self.cl, self.zones = cl, zones
        self.nodes = {n.rack: n for n in cl.nodes.values()}

    def snap(self):
        """The nodes' counters, bracketed by the region's: what a node counted between
        two snapshots crossed the wire between the outer nft readings, and all that
        crossed between the inner ones was counted (scraping takes a while)."""
        wire0 = nft(self.zones)
        nodes = {z: zone_bytes(n) for z, n in self.nodes.items()}
        return nodes, nft(self.zones), wire0

    def __enter__(self):
        self.before = self.snap()
        return self

    def __exit__(self, *exc):
        time.sleep(0.3)  # the last ACKs
        self.after = self.snap()

    def node(self, zone, direction, kind=None, peer=None):
        """Bytes node `zone` counted in the window (every kind / peer zone when None)."""
        b, a = self.before[0][zone][0], self.after[0][zone][0]
        return sum(v - b.get(key, 0) for key, v in a.items()
                   if key[0] == direction and kind in (None, key[1]) and peer in (None, key[2]))

    def produced(self, zone, path):
        return self.after[0][zone][1].get(path, 0) - self.before[0][zone][1].get(path, 0)

    def wire(self, src, dst, outer=False):
        """(bytes, packets, TCP payload bytes) that went from zone src to zone dst,
        between the nft readings taken after the nodes' first snapshot and before
        their last one (outer: before the first and after the last)."""
        # snap()[1] is read just after the nodes' counters, snap()[2] just before.
        (b0, p0) = self.before[2 if outer else 1][(src, dst)]
        (b1, p1) = self.after[1 if outer else 2][(src, dst)]
        return b1 - b0, p1 - p0, (b1 - b0) - HEADERS * (p1 - p0)

    def pair(self, s, d):
        """What the nodes counted going from zone s to zone d: node-to-node bytes as the
        sender and as the receiver counted them, and client bytes (a node of s answering
        a client of d, or a client of s asking a node of d)."""
        sent = sum(self.node(s, "out", kk, d) for kk in NODE_KINDS)
        got = sum(self.node(d, "in", kk, s) for kk in NODE_KINDS)
        client = self.node(s, "out", "client", d) + self.node(d, "in", "client", s)
        return sent, got, client

    def table(self):
        lines = ["%-6s %10s %8s %12s %14s %14s %12s" % (
            "pair", "nft bytes", "packets", "nft payload", "node sent", "node received",
            "client")]
        for s in sorted(self.nodes):
            for d in sorted(self.nodes):
                if s != d:
                    lines.append("%-6s %10d %8d %12d %14d %14d %12d" % (
                        ("%s->%s" % (s, d),) + self.wire(s, d) + self.pair(s, d)))
        return "\n".join(lines)

    def check_etcd(self):
        """The region's only service in this test is etcd (the volume and the objects are
        local directories): each node's etcd bytes match its traffic with the region."""
        for z in sorted(self.nodes):
            for d, src, dst in (("out", z, "region"), ("in", "region", z)):
                inner, outer = self.wire(src, dst)[2], self.wire(src, dst, outer=True)[2]
                counted = self.node(z, d, "etcd")
                print("etcd %s->%s: nft payload %d to %d, node %s counted %d" % (
                    src, dst, inner, outer, z, counted))
                # A request or answer may be on its way at either end of the window.
                slack = TOLERANCE * max(outer, 1) + ETCD_SKEW
                assert inner - slack <= counted <= outer + slack, (
                    z, d, inner, outer, counted)

    def check_pairs(self):
        """Every ordered pair of zones: the nodes' counts match the wire's payload, and
        the two nodes of a pair agree."""
        for s in sorted(self.nodes):
            for d in sorted(self.nodes):
                if s == d:
                    continue
                _, _, pay = self.wire(s, d)
                sent, got, client = self.pair(s, d)
                assert abs(sent - got) <= 0.01 * max(sent, got) + 64, (s, d, self.table())
                counted = sent + client
                assert abs(counted - pay) <= TOLERANCE * max(pay, 1) + 200, (
                    s, d, self.table())


def test_nodes_count_what_crosses_zones(zones, zone_cluster_factory, topic_name):
    t0 = time.monotonic()
    local = os.path.join(harness.WORK, "%s-%d" % (topic_name, os.getpid()))
    cl = zone_cluster_factory(overrides={"zone.routing.enable": "true",
                                         "leader.imbalance.check.interval.seconds": "1",
                                         "zone.transfer.price.per.gib": "0.01",
                                         "wal.url": "file://%s/volume" % local,
                                         "objects.url": "file://%s/objects" % local})
    for n in cl.nodes.values():
        n.metrics = "%s:%d" % (zones[n.rack].addr, harness.free_port())
        n.overrides["metrics.listener"] = n.metrics
    cl.start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    mains = cl.wait_balanced(topic_name)
    a, b, c = cl.node_in("a"), cl.node_in("b"), cl.node_in("c")
    elsewhere = mains[a.node_id] + mains[c.node_id]
    assert mains[b.node_id] and mains[a.node_id] and mains[c.node_id], mains

    with zones["b"].conn(b.bootstrap, client_id="acct,skiff_az=b") as conn:
        md = k.metadata(conn, [topic_name], version=12, allow_auto=False)
        leaders = {p["PartitionIndex"]: p["LeaderId"] for p in md["Topics"][0]["Partitions"]}
        assert set(leaders.values()) == {b.node_id}, leaders   # zone routing: all via b
        for p in elsewhere:   # connections between the nodes, before counting
            assert k.produce(conn, topic_name, p, k.batch([b"warm"]))["ErrorCode"] == k.NONE

        # Zone b's client produces through its node to mains in zones a and c.
        produced = 0
        with Window(cl, zones) as w1:
            for i in range(BATCHES):
                recs = k.batch([(b"r%d-%d-" % (i, j)).ljust(SIZE, b".") for j in range(RECORDS)])
                pr = k.produce(conn, topic_name, elsewhere[i % len(elsewhere)], recs)
                assert pr["ErrorCode"] == k.NONE, pr
                produced += len(recs)
    print("zone-b client through the zone-b node, %d bytes of batches:\n%s" % (
        produced, w1.table()))
    w1.check_pairs()
    assert w1.produced("b", "proxied") == produced
    assert w1.produced("b", "direct") == 0
    # The records stayed in zone b: its client's bytes are own-zone, none cross.
    assert w1.node("b", "in", "client", "b") > produced
    assert w1.node("b", "in", "client", "a") == w1.node("b", "in", "client", "c") == 0
    crossed = sum(w1.wire(s, d)[0] for s in "abc" for d in "abc" if s != d)
    assert crossed < produced // 10, w1.table()
    cross_b = {kk: sum(w1.node("b", d, kk, z) for d in ("in", "out") for z in "ac")
               for kk in ("client", "confirm", "follow", "rpc", "etcd")}
    print("the zone-b node's cross-zone bytes by kind: %s" % cross_b)
    assert cross_b["confirm"] >= 0.9 * sum(cross_b.values()), cross_b
    assert w1.node("a", "in", "confirm", "b") > 0 and w1.node("c", "in", "confirm", "b") > 0

    # A client of zone c asks the zone-a node: client traffic across zones.
    with zones["c"].conn(a.bootstrap, client_id="meta,skiff_az=c") as conn:
        with Window(cl, zones) as w2:
            for _ in range(METADATA_REQUESTS):
                k.metadata(conn, [topic_name], version=12, allow_auto=False)
    print("zone-c client asking the zone-a node:\n%s" % w2.table())
    w2.check_pairs()
    assert w2.node("a", "in", "client", "c") > 0 and w2.node("a", "out", "client", "c") > 0

    # Idle, the nodes only talk to etcd, the region's: of unknown zone, never cross-zone.
    with Window(cl, zones) as w3:
        time.sleep(IDLE_S)
    print("idle for %.1f s:\n%s" % (IDLE_S, w3.table()))
    w3.check_pairs()
    w3.check_etcd()
    by, _ = zone_bytes(b)
    assert by.get(("out", "etcd", "(unknown)"), 0) > 0 and by.get(("in", "etcd", "(unknown)"), 0)
    assert not [key for key in by if key[1] == "etcd" and key[2] != "(unknown)"], by

    # /zones says the same as the metrics (nothing moves meanwhile).
    text = scrape(b, "/zones")
    by, prod = zone_bytes(b)
    print(text)
    assert "node %d, zone b" % b.node_id in text, text
    m = re.search(r"^\s+confirm\s+(\d+) \(.*?\)\s+(\d+) \(", text, re.M)
    assert m, text
    cin = sum(v for (d, kk, z), v in by.items() if d == "in" and kk == "confirm" and z in "ac")
    cout = sum(v for (d, kk, z), v in by.items() if d == "out" and kk == "confirm" and z in "ac")
    assert (int(m.group(1)), int(m.group(2))) == (cin, cout), (m.groups(), cin, cout)
    cross = sum(v for (d, kk, z), v in by.items() if z in ("a", "c"))
    ratio = float(re.search(r"per byte produced here: ([0-9.]+)", text).group(1))
    assert abs(ratio - cross / sum(prod.values())) < 1e-5, (ratio, cross, prod)
    assert "$0.01 per GiB" in text, text

    # The cluster's view sums the nodes.
    r = subprocess.run([harness.PYTHON, REPORT, "--json"] + [n.metrics for n in
                                                             cl.nodes.values()],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    assert r.returncode == 0, r.stderr.decode()
    s = json.loads(r.stdout)["cluster"]
    assert s["nodes"] == 3 and s["produced"] >= produced, s
    assert s["kinds"]["confirm"]["crossed"] > 0 and s["kinds"]["etcd"]["crossed"] == 0, s
    assert s["ratio"] < 0.1, s
    text = subprocess.run([harness.PYTHON, REPORT] + [n.metrics for n in cl.nodes.values()],
                          stdout=subprocess.PIPE, check=True, timeout=30).stdout.decode()
    print(text)
    assert "Crossed per byte produced" in text
    assert time.monotonic() - t0 < 60
