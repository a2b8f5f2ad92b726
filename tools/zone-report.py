#!/usr/bin/python3
"""The cross-zone traffic and its cost for a whole cluster, from every node's metrics.

    tools/zone-report.py [--price DOLLARS] [--json] [--timeout S] ENDPOINT...

ENDPOINT is a node's metrics.listener (host:port, or http://host:port); list every node
of the cluster. Each node counts the bytes it exchanges with other availability zones
(docs/zones.md, "Cross-zone accounting"); this script reads their /metrics and sums:

- per node: its zone, the bytes clients produced through it, what it received from and
  sent to other zones, and what its side of that costs;
- per kind (client, confirm, follow, rpc, etcd): the bytes that crossed zones. A byte
  between two nodes is seen twice (sent by one, received by the other) and counted once;
  a byte between a node and a client or an etcd member is seen once, by the node;
- the cluster's ratio: bytes that crossed zones per byte produced, and the bill: AWS
  charges both ends of every crossing ($0.01/GiB out of one instance and $0.01/GiB into
  the other), so each GiB that crosses costs twice --price (default: the price the
  nodes report, zone.transfer.price.per.gib);
- the matrix of bytes the nodes sent, by their zone and the peer's.

Exit status 0, or 1 when a node cannot be read (the others are still reported).
"""

import argparse
import json
import re
import sys
import urllib.request

KINDS = ["client", "confirm", "follow", "rpc", "etcd"]
NODE_KINDS = {"confirm", "follow", "rpc"}
GIB = float(1 << 30)
LINE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})?\s+(\S+)')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """[(name, {label: value}, float)] of a Prometheus text exposition."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = LINE.match(line)
        if m:
            labels = dict(LABEL.findall(m.group(2) or ""))
            out.append((m.group(1), labels, float(m.group(3))))
    return out


def url_of(endpoint):
    if not endpoint.startswith("http://") and not endpoint.startswith("https://"):
        endpoint = "http://" + endpoint
    return endpoint if endpoint.rstrip("/").endswith("/metrics") else \
        endpoint.rstrip("/") + "/metrics"


def node_of(endpoint, samples):
    """One node's numbers from its metrics."""
    n = {"endpoint": endpoint, "node": None, "zone": "", "uptime_s": 0.0, "price": None,
         "produced": 0, "bytes": [], "cross": {d: {k: 0 for k in KINDS} for d in ("in", "out")}}
    for name, labels, v in samples:
        if name == "skiff_build_info":
            n["node"], n["zone"] = labels.get("node"), labels.get("zone", "")
        elif name == "skiff_uptime_seconds":
            n["uptime_s"] = v
        elif name == "skiff_zone_transfer_price_per_gib":
            n["price"] = v
        elif name == "skiff_client_produced_bytes_total":
            n["produced"] += int(v)
        elif name == "skiff_zone_bytes_total":
            n["bytes"].append({"direction": labels["direction"], "kind": labels["kind"],
                               "zone": labels["zone"], "cross": labels["cross"] == "true",
                               "bytes": int(v)})
            if labels["cross"] == "true":
                n["cross"][labels["direction"]][labels["kind"]] += int(v)
    return n


def fetch(endpoint, timeout):
    with urllib.request.urlopen(url_of(endpoint), timeout=timeout) as r:
        return node_of(endpoint, parse_metrics(r.read().decode("utf-8", "replace")))


def summarize(nodes, price):
    """The cluster's sums (see the module's doc)."""
    s = {"nodes": len(nodes), "price_per_gib": price, "produced": 0, "kinds": {},
         "matrix": {}, "node_side_bytes": 0}
    for n in nodes:
        s["produced"] += n["produced"]
        for b in n["bytes"]:
            if b["direction"] == "out":
                key = "%s>%s" % (n["zone"] or "(unknown)", b["zone"])
                s["matrix"][key] = s["matrix"].get(key, 0) + b["bytes"]
    for k in KINDS:
        i = sum(n["cross"]["in"][k] for n in nodes)
        o = sum(n["cross"]["out"][k] for n in nodes)
        crossed = (i + o) // 2 if k in NODE_KINDS else i + o
        s["kinds"][k] = {"in": i, "out": o, "crossed": crossed}
        s["node_side_bytes"] += i + o
    s["crossed"] = sum(v["crossed"] for v in s["kinds"].values())
    s["ratio"] = s["crossed"] / s["produced"] if s["produced"] else None
    s["cost_nodes"] = s["node_side_bytes"] / GIB * price
    s["cost_total"] = 2 * s["crossed"] / GIB * price
    s["cost_per_gib_produced"] = s["cost_total"] / (s["produced"] / GIB) if s["produced"] \
        else None
    return s


def human(v):
    v = float(v)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if v < 1024 or unit == "TiB":
            return "%d B" % v if unit == "B" else "%.2f %s" % (v, unit)
        v /= 1024


def dollars(v):
    return "$%.2f" % v if v >= 1 else "$%.4g" % v


def uptime(s):
    s = int(s)
    return "%dh%02dm%02ds" % (s // 3600, s // 60 % 60, s % 60)


def print_report(nodes, s, out):
    zones = sorted({n["zone"] for n in nodes})
    w = out.write
    w("Cross-zone traffic of %d nodes (zones %s)\n\n" % (len(nodes), ", ".join(
        z or "(unknown)" for z in zones)))
    w("  %-5s %-10s %-10s %14s %14s %14s %12s\n" % (
        "node", "zone", "uptime", "produced", "cross in", "cross out", "node's cost"))
    for n in nodes:
        i, o = sum(n["cross"]["in"].values()), sum(n["cross"]["out"].values())
        w("  %-5s %-10s %-10s %14s %14s %14s %12s\n" % (
            n["node"], n["zone"] or "(unknown)", uptime(n["uptime_s"]), human(n["produced"]),
            human(i), human(o), dollars((i + o) / GIB * s["price_per_gib"])))
    w("\nBytes that crossed zones, by kind (between two nodes: once; between a node and a "
      "client or etcd: both ways):\n")
    w("  %-8s %16s %16s %16s\n" % ("kind", "nodes received", "nodes sent", "crossed"))
    for k in KINDS:
        v = s["kinds"][k]
        w("  %-8s %16d %16d %16d\n" % (k, v["in"], v["out"], v["crossed"]))
    w("  %-8s %16s %16s %16d (%s)\n\n" % ("total", "", "", s["crossed"], human(s["crossed"])))
    w("Produced by clients: %d bytes (%s)\n" % (s["produced"], human(s["produced"])))
    w("Crossed per byte produced: %s\n" % (
        "%.6f" % s["ratio"] if s["ratio"] is not None else "n/a (nothing produced)"))
    w("Cost at %s per GiB each way: %s in all (both ends of every crossing), of which the "
      "nodes' side %s\n" % (dollars(s["price_per_gib"]), dollars(s["cost_total"]),
                            dollars(s["cost_nodes"])))
    if s["cost_per_gib_produced"] is not None:
        w("  per GiB produced: %s\n" % dollars(s["cost_per_gib_produced"]))
    peers = sorted({k.split(">", 1)[1] for k in s["matrix"]})
    w("\nBytes the nodes sent, by their zone (rows) and the peer's (columns), every kind:\n")
    w("  %-10s" % "from\\to" + "".join("%14s" % p for p in peers) + "\n")
    for z in zones:
        zn = z or "(unknown)"
        w("  %-10s" % zn + "".join("%14d" % s["matrix"].get("%s>%s" % (zn, p), 0)
                                   for p in peers) + "\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("endpoints", nargs="+", metavar="ENDPOINT",
                    help="a node's metrics.listener, host:port or http://host:port")
    ap.add_argument("--price", type=float, default=None,
                    help="dollars per GiB crossing zones, each way (default: the nodes')")
    ap.add_argument("--json", action="store_true", help="print the numbers as JSON")
    ap.add_argument("--timeout", type=float, default=5.0, help="seconds per node")
    a = ap.parse_args(argv)
    nodes, failed = [], 0
    for e in a.endpoints:
        try:
            nodes.append(fetch(e, a.timeout))
        except (OSError, ValueError, KeyError) as ex:
            sys.stderr.write("zone-report: %s: %s\n" % (e, ex))
            failed += 1
    prices = {n["price"] for n in nodes if n["price"] is not None}
    price = a.price if a.price is not None else (max(prices) if prices else 0.01)
    if a.price is None and len(prices) > 1:
        sys.stderr.write("zone-report: the nodes have different prices %s; using %g\n" % (
            sorted(prices), price))
    s = summarize(nodes, price)
    if a.json:
        json.dump({"nodes": nodes, "cluster": s}, sys.stdout, indent=1, sort_keys=True)
        sys.stdout.write("\n")
    else:
        print_report(nodes, s, sys.stdout)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
