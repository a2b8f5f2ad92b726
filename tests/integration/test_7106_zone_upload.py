"""Proxied batches once uploaded to objects (docs/zones.md; DESIGN.md "Data flow" 3-4).

Three nodes, one per zone, zone routing on, uploads every UPLOAD_MS (so that within the
test the mains put what they linked for proxies into objects, and consumers' proxies
read it from there). Idempotent acks=all producers in zones a and b (confluent-kafka,
client.id naming the zone) write to every partition: on each main, batches written
directly and batches linked for a proxy (a LINK record in the main's WAL, the payload
in the proxy's payload log) are interleaved. Once every node has uploaded what they
wrote, a consumer in each zone (kafka-python in a, confluent-kafka in b and c) reads
the topic from the beginning through the nodes of its zone.

Checked: every partition still starts at offset 0 (the topics keep the default
retention, 7 days: nothing may be deleted), every acknowledged record is at its offset,
offsets contiguous, nothing twice; and every consumer got the same bytes at the same
offsets as the mains serve.
"""

import collections
import json
import os
import re
import time

import pytest

import cluster as cm
import crashcheck
import zroute as zr

pytestmark = pytest.mark.cluster

PARTS = 12
UPLOAD_MS = 500
WRITE_S = 3.0
READERS = {"a": "kp", "b": "ck", "c": "ck"}


def uploads(node):
    return len(re.findall(r"\[tier\] uploaded WAL", node.log_since_start()))


def test_proxied_batches_survive_upload(zones, zone_cluster_factory, topic_name):
    t0 = time.monotonic()
    cl, mains = zr.routed_cluster(zone_cluster_factory, topic_name, PARTS, overrides={
        "s3.wal.upload.interval.ms": str(UPLOAD_MS)})
    loads = [zones[z].inside(cm.TimedLoad, cl.node_in(z).bootstrap, topic_name, PARTS,
                             "u%s-%d" % (z, int(time.time() * 1000) % 100000),
                             extra_conf={"client.id": zr.client_id(z, "load")},
                             rate_sleep=0.001) for z in "ab"]
    try:
        for ld in loads:
            ld.start()
        time.sleep(WRITE_S)
    finally:
        left = [ld.finish() for ld in loads]
    assert left == [0, 0], left
    cm.loads_ok(loads)
    # every node uploads what it wrote (and linked) within an interval or two
    time.sleep(4 * UPLOAD_MS / 1000.0)
    none = [n.node_id for n in cl.nodes.values() if not uploads(n)]
    assert not none, "nodes %s uploaded nothing in %.1f s with s3.wal.upload.interval.ms=%d" \
        " (their WALs hold what they linked for proxies)" % (
            none, WRITE_S + 4 * UPLOAD_MS / 1000.0, UPLOAD_MS)
    for n in cl.nodes.values():
        print("node %d: %s" % (n.node_id, "; ".join(
            line.split("[tier] ")[1] for line in n.log_since_start().splitlines()
            if "[tier] uploaded WAL" in line)[-300:]))
    moved = [line for n in cl.nodes.values() for line in n.log_since_start().splitlines()
             if "[retention]" in line]

    acked = [a for ld in loads for a in ld.acked]
    try:
        batches = zr.read_topic(cl, topic_name, PARTS)         # log start 0, contiguous
        stats = cm.verify_loads(cl, topic_name, PARTS, loads)
    except crashcheck.LogProblems as e:
        raise crashcheck.LogProblems("%s\nretention lines of the nodes:\n  %s" % (
            e, "\n  ".join(moved) or "(none)")) from None
    assert stats["records"] == stats["acked"] == len(acked), stats
    ref = {(p, b.base_offset + r.offset_delta): zr.digest(r.key, r.value)
           for p, bs in batches.items() for b in bs for r in b.records}

    procs = zr.Procs(os.path.join(cl.dir, "clients"))
    try:
        readers = {z: procs.python(zones[z], "read-" + z, [
            "read", kind, cl.node_in(z).bootstrap, topic_name, len(ref),
            zr.client_id(z, "reader"), "-", 60]) for z, kind in READERS.items()}
        for z, p in readers.items():
            rc, lines, summary = procs.wait(p, 90)
            assert rc == 0, "consumer in zone %s: %s\n%s" % (z, summary, procs.tails(p))
            reads = zr.reads_of(lines)
            dup = [x for x, c in collections.Counter((p_, o) for p_, o, _ in reads).items()
                   if c > 1]
            mine = {(p_, o): d for p_, o, d in reads}
            assert not dup and mine == ref, \
                "consumer in zone %s: %d read twice, %d missing, %d extra, %d differ" % (
                    z, len(dup), len(set(ref) - set(mine)), len(set(mine) - set(ref)),
                    sum(1 for x in set(ref) & set(mine) if ref[x] != mine[x]))
            print("consumer in zone %s (%s): %d records in %.1f s, as the mains serve them" % (
                z, READERS[z], len(reads), p.seconds))
    finally:
        procs.close()
    print("%d records (%s) checked after uploads; %.0f s in all" % (
        len(ref), json.dumps({ld.run_id: ld.acked_count() for ld in loads}),
        time.monotonic() - t0))
