#!/usr/bin/env python3
"""promhist.py BEFORE AFTER NAME...: what histograms of skiffd's metrics counted between two
scrapes of its /metrics (text files), as one JSON object: per NAME (an unlabelled Prometheus
histogram) the count and the p50 / p90 / p99 / p99.9 as the upper bounds of their buckets,
in ms (null above the last finite bound). The bench scripts put the broker's own view (its
WAL's group commits, its produce latency) beside what the load generator measured."""
import json
import re
import sys

LINE = re.compile(r'^(\w+)_bucket\{le="([^"]+)"\} (\d+)$')


def load(path):
    h = {}
    with open(path) as f:
        for ln in f:
            m = LINE.match(ln.strip())
            if m:
                h.setdefault(m.group(1), []).append((m.group(2), int(m.group(3))))
    return h


def quantiles(before, after):
    base = dict(before)
    cum = [(le, n - base.get(le, 0)) for le, n in after]
    total = cum[-1][1] if cum else 0
    out = {"count": total}
    for key, q in (("p50_ms", 0.5), ("p90_ms", 0.9), ("p99_ms", 0.99), ("p999_ms", 0.999)):
        le = next((le for le, n in cum if total and n >= q * total), None)
        out[key] = None if le in (None, "+Inf") else float(le) * 1000
    return out


def main():
    if len(sys.argv) < 4:
        sys.exit(__doc__)
    a, b = load(sys.argv[1]), load(sys.argv[2])
    print(json.dumps({n: quantiles(a.get(n, []), b[n]) for n in sys.argv[3:] if n in b}))


if __name__ == "__main__":
    main()
