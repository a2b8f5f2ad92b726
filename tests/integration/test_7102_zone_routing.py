"""Zone routing with real clients (docs/zones.md): Metadata names nodes of the client's
zone, and clients of every kind in every zone write and read a topic whose mains are
spread over three zones, with only coordination crossing zones.

Three nodes, one per zone (a, b, c), zone.routing.enable=true; a 12-partition topic
whose mains are spread over the three nodes (4 each). Every client names its zone in
its client.id (app,skiff_az=<zone>); this test process is of no zone.

- Metadata: a client of zone z, whichever node it asks, is told that every partition's
  leader (and its only replica and ISR) is the zone-z node, at the main's epoch; the
  broker list holds only zone z's nodes and the controller id is one of them. A client
  of no zone is told the mains, with every node. kcat (librdkafka) in each zone sees
  the same.
- One run: in each zone a confluent-kafka (idempotent), a Java (idempotent) and a
  kafka-python producer (acks=all; kafka-python 2.0.2 has no idempotence, so retries=0
  there) each write COUNT records of ~1 KB to every partition, while in each zone
  consumers of the three kinds (partitions assigned, or one group per consumer with
  subscribe) read everything, following the producers. Records go to partitions in
  runs of RUN (as Kafka's sticky partitioner places unkeyed records), linger.ms=50,
  batch.size=256 KB: batches of about 128 KB (printed), as a producer tuned for
  throughput sends them (docs/zones.md: what crosses zones is per batch).
  Afterwards the topic read from the mains has every acknowledged record at its
  offset, offsets contiguous, nothing missing, nothing twice, every value as
  produced; and every consumer, whichever zone and node served it, got exactly those
  bytes at those offsets, each once.
- Cross-zone bytes of that run: the region's nftables counters from the producers'
  start to the last consumer's end, zone to zone, divided by the bytes of the records
  produced (keys and values); printed with the matrix, and the test fails above 0.01.
  The per-batch overhead, as measured here (the nodes' skiff_zone_bytes_total, TCP
  payload, printed by kind): a proxied batch costs ~150 bytes between the two zones
  (its ~90-byte entry in a Confirm that carries every batch gathered for that main over
  proxy.confirm.linger.us, and its answer), plus the IP/TCP headers of those packets
  and their ACKs (52 bytes each); proxy fetch costs, for every zone whose consumers
  follow the partition, at most one Follow round per move of the main's high
  watermark (at this rate about one per batch: ~170 bytes, the answer with the
  watermarks and the batch's location, and the session's next poll, which names no
  partition); the groups' coordination (FindCoordinator names the main of the group's
  __consumer_offsets partition, possibly in another zone) crosses too, a few KB. In all
  about 900 bytes per batch with the headers.
"""

import collections
import json
import os
import shutil
import subprocess
import sys
import time

import pytest

import harness
import zones as zm
import zroute as zr

pytestmark = pytest.mark.cluster

PARTS = 12
SIZE = 1000                # bytes of a record's value (~1 KB)
COUNT = 1500               # records per producer (9 producers: ~13.6 MB of records)
RUN = 125                  # records in a row per partition (~128 KB)
LINGER_MS, BATCH = 50, 262144
MAX_RATIO = 0.01
KINDS = ("ck", "java", "kp")
# how each zone's consumers read: assigned partitions, or subscribed in a group
READERS = {("ck", "a"): "assign", ("java", "a"): "group", ("kp", "a"): "assign",
           ("ck", "b"): "group", ("java", "b"): "assign", ("kp", "b"): "assign",
           ("ck", "c"): "assign", ("java", "c"): "assign", ("kp", "c"): "group"}
PYCONF = {"ck": {"linger.ms": LINGER_MS, "batch.size": BATCH},
          "kp": {"linger_ms": LINGER_MS, "batch_size": BATCH}}


class CrossZoneTooHigh(AssertionError):
    """More bytes crossed zones than MAX_RATIO of the payload."""


def kcat_leaders(zone, bootstrap, topic, cid):
    """({partition: leader}, {broker id: "host:port"}) from kcat -L in zone."""
    out = zone.kcat(["-L", "-b", bootstrap, "-t", topic, "-m", "15", "-X",
                     "client.id=%s" % cid]).stdout.decode()
    leaders, brokers = {}, {}
    for line in out.splitlines():
        w = line.replace(",", " ").split()
        if len(w) >= 4 and w[0] == "broker" and w[2] == "at":
            brokers[int(w[1])] = w[3]
        if len(w) >= 4 and w[0] == "partition" and w[2] == "leader":
            leaders[int(w[1])] = int(w[3])
    return leaders, brokers, out


def test_metadata_names_the_clients_zone(zones, zone_cluster_factory, topic_name):
    t0 = time.monotonic()
    cl, mains = zr.routed_cluster(zone_cluster_factory, topic_name, PARTS)
    per_node = collections.Counter(m for m, _ in mains.values())
    print("mains of %s (partition: node, epoch): %r" % (topic_name, mains))
    assert set(per_node) == set(cl.nodes), per_node

    # A client of no zone (this process) is told the mains, with every node, by any node.
    for n in cl.nodes.values():
        md = zr.metadata_from(None, n, [topic_name], "nozone-app")
        t = md["Topics"][0]
        assert t["ErrorCode"] == 0, t
        got = {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"]) for p in t["Partitions"]}
        assert got == mains, "node %d to a client of no zone: %r, mains %r" % (
            n.node_id, got, mains)
        assert sorted(b["NodeId"] for b in md["Brokers"]) == sorted(cl.nodes), md["Brokers"]

    # A client of zone z: the zone-z node leads everything, whichever node it asks.
    for z in zones:
        home = cl.node_in(z.name)
        cid = zr.client_id(z.name, "md")
        for n in cl.nodes.values():
            md = zr.metadata_from(z, n, [topic_name], cid)
            t = md["Topics"][0]
            assert t["ErrorCode"] == 0, t
            where = "node %d to a client of zone %s" % (n.node_id, z.name)
            brokers = {b["NodeId"]: b for b in md["Brokers"]}
            assert set(brokers) == {home.node_id}, "%s lists brokers %r" % (where, brokers)
            assert brokers[home.node_id]["Rack"] == z.name, (where, brokers)
            assert "%s:%d" % (brokers[home.node_id]["Host"], brokers[home.node_id]["Port"]) \
                == home.bootstrap, (where, brokers)
            assert md["ControllerId"] in brokers, (where, md["ControllerId"])
            assert sorted(p["PartitionIndex"] for p in t["Partitions"]) == list(range(PARTS))
            for p in t["Partitions"]:
                i = p["PartitionIndex"]
                assert p["ErrorCode"] == 0, (where, p)
                assert p["LeaderId"] == home.node_id, \
                    "%s: partition %d led by %d (main %d), not the zone's node %d" % (
                        where, i, p["LeaderId"], mains[i][0], home.node_id)
                assert p["LeaderEpoch"] == mains[i][1], \
                    "%s: partition %d at epoch %d, the main's is %d" % (
                        where, i, p["LeaderEpoch"], mains[i][1])
                assert p["ReplicaNodes"] == [home.node_id] and \
                    p["IsrNodes"] == [home.node_id], (where, p)

        # librdkafka's view (kcat -L), bootstrapped on every node
        for n in cl.nodes.values():
            leaders, listed, out = kcat_leaders(z, n.bootstrap, topic_name, cid)
            assert leaders == {i: home.node_id for i in range(PARTS)}, \
                "kcat in zone %s via node %d:\n%s" % (z.name, n.node_id, out)
            assert listed == {home.node_id: home.bootstrap}, out

    # Without skiff_az in its client.id, a client in zone a is still of zone a (the
    # nodes' client.zone.cidrs); this process, of no zone, is told the mains.
    a = cl.node_in("a")
    leaders, _, out = kcat_leaders(zones["a"], a.bootstrap, topic_name, "plain-kcat")
    assert leaders == {i: a.node_id for i in range(PARTS)}, out
    r = subprocess.run(["kcat", "-L", "-b", cl.node_in("b").bootstrap, "-t", topic_name,
                        "-m", "15", "-X", "client.id=nozone-kcat"], stdout=subprocess.PIPE,
                       timeout=30)
    got = {}
    for line in r.stdout.decode().splitlines():
        w = line.replace(",", " ").split()
        if len(w) >= 4 and w[0] == "partition" and w[2] == "leader":
            got[int(w[1])] = int(w[3])
    assert got == {i: m for i, (m, _) in mains.items()}, r.stdout.decode()
    print("metadata checks: %.1f s" % (time.monotonic() - t0))


class Run:
    """What the run of every client in every zone left (see run())."""


def _workload(cl, zones, topic):
    r = Run()
    r.cl, r.topic = cl, topic
    r.t0 = time.monotonic()
    _, r.mains = zr.routed_cluster(lambda overrides: cl, topic, PARTS)
    r.t_ready = time.monotonic()
    total = 9 * COUNT
    procs = zr.Procs(os.path.join(cl.dir, "clients"))
    producers, readers = {}, {}
    try:
        r.counts_before = {n.node_id: zr.zone_counts(n) for n in cl.nodes.values()}
        with zones.traffic() as r.traffic:
            for z in zones:
                bs = cl.node_in(z.name).bootstrap
                for kind in KINDS:
                    name = "%s%s" % (kind, z.name)
                    group = "g-%s-%s" % (name, topic[-6:]) \
                        if READERS[(kind, z.name)] == "group" else None
                    cid = zr.client_id(z.name, "c-" + name)
                    if kind == "java":
                        args = ["-m", "read", "-b", bs, "-t", topic, "-n", total,
                                "--read-timeout", 150, "--prop", "client.id=" + cid]
                        readers[name] = procs.java(z, "read-" + name,
                                                   args + (["-g", group] if group else []),
                                                   timeout=170)
                    else:
                        readers[name] = procs.python(z, "read-" + name, [
                            "read", kind, bs, topic, total, cid, group or "-", 150])
                for kind in KINDS:
                    ident = "%s%s" % (kind, z.name)
                    cid = zr.client_id(z.name, "p-" + ident)
                    if kind == "java":
                        producers[ident] = procs.java(z, "produce-" + ident, [
                            "-m", "produce", "-b", bs, "-t", topic, "-P", PARTS, "--run", RUN,
                            "-n", COUNT, "--size", SIZE, "--id", ident,
                            "--prop", "client.id=" + cid, "--prop", "acks=all",
                            "--prop", "enable.idempotence=true",
                            "--prop", "linger.ms=%d" % LINGER_MS,
                            "--prop", "batch.size=%d" % BATCH], timeout=150)
                    else:
                        producers[ident] = procs.python(z, "produce-" + ident, [
                            "produce", kind, bs, topic, "%d/%d" % (PARTS, RUN), COUNT, SIZE,
                            ident, cid, json.dumps(PYCONF[kind])])
            r.produced = {}
            for ident, p in producers.items():
                rc, lines, summary = procs.wait(p, 170)
                assert rc == 0, "producer %s: %s\n%s" % (ident, summary, procs.tails(p))
                acked, errors = zr.acks_of(lines, ident)
                assert len(acked) == COUNT and not errors, (ident, len(acked), errors[:5])
                r.produced[ident] = (acked, summary, p.seconds)
            r.t_produced = time.monotonic()
            r.reads = {}
            for name, p in readers.items():
                rc, lines, summary = procs.wait(p, 200)
                assert rc == 0, "consumer %s: %s\n%s" % (name, summary, procs.tails(p))
                r.reads[name] = (zr.reads_of(lines), summary, p.seconds)
        r.counts_after = {n.node_id: zr.zone_counts(n) for n in cl.nodes.values()}
    finally:
        procs.close()
    r.t_read = time.monotonic()
    r.batches = zr.read_topic(cl, topic, PARTS)
    r.records = zr.records_of(r.batches)
    for ident, (_, s, secs) in sorted(r.produced.items()):
        print("producer %-6s %d records in %.1f s" % (ident, COUNT, secs))
    for name, (reads, s, secs) in sorted(r.reads.items()):
        print("consumer %-6s (%s) %d records in %.1f s" % (
            name, READERS[(name[:-1], name[-1])], len(reads), secs))
    print("cluster ready in %.1f s; produced in %.1f s, read in %.1f s" % (
        r.t_ready - r.t0, r.t_produced - r.t_ready, r.t_read - r.t_ready))
    return r


@pytest.fixture(scope="module")
def run(request, zones, etcd):
    """The run of every client in every zone, on a cluster of this module's own (stopped
    at the end of the module: its nodes SIGKILLed by PID, its directory removed unless
    a test failed, its nodes' logs printed then)."""
    if harness.external():
        pytest.skip("needs nodes this harness starts (SKIFF_TEST_EXTERNAL is set)")
    failed_before = request.session.testsfailed
    cl = zm.ZoneCluster("test_7102-run-%d" % os.getpid(), etcd, zones,
                        overrides=dict(zr.ROUTING))
    zr.with_metrics(cl, zones)
    print(cl.describe())
    failed = True
    try:
        topic = "t7102-%s" % cl.tag
        yield _workload(cl, zones, topic)
        failed = request.session.testsfailed > failed_before
    finally:
        zones.stop_forwarders()
        if failed:
            sys.stderr.write("\n%s\n%s\n" % (cl.describe(), cl.log_tails()))
        cl.kill_all()
        if not failed:
            shutil.rmtree(cl.dir, ignore_errors=True)


def test_every_client_every_zone_reads_what_all_wrote(run):
    records, total = run.records, 9 * COUNT
    # The topic, read from its mains: contiguous (read_topic), complete, nothing twice,
    # every value as produced and where it was sent.
    problems = []
    seen = {}
    for p, recs in records.items():
        for off, (kk, v) in recs.items():
            ident, _, i = kk.decode().rpartition("-")
            i = int(i)
            if ident not in run.produced or v != zr.value(ident, i, SIZE) or \
                    zr.zone_rw.partition(i, PARTS, RUN) != p:
                problems.append("%d@%d: unexpected record %r" % (p, off, kk))
            if (ident, i) in seen:
                problems.append("%s-%d twice: %r and %r" % (ident, i, seen[(ident, i)], (p, off)))
            seen[(ident, i)] = (p, off)
    for ident, (acked, _, _) in run.produced.items():
        for (p, off), i in acked.items():
            if seen.get((ident, i)) != (p, off):
                problems.append("%s-%d acknowledged at %d@%d, in the log at %r" % (
                    ident, i, p, off, seen.get((ident, i))))
    assert not problems, "\n".join(problems[:30])
    assert len(seen) == total, "%d records in the log, %d produced" % (len(seen), total)
    ref = {(p, off): zr.digest(kk, v) for p, recs in records.items()
           for off, (kk, v) in recs.items()}

    # Every consumer, whichever zone, the same bytes at the same offsets, each once.
    for name, (reads, _, _) in sorted(run.reads.items()):
        dup = [x for x, c in collections.Counter((p, o) for p, o, _ in reads).items() if c > 1]
        assert not dup, "consumer %s read offsets twice: %r" % (name, dup[:10])
        mine = {(p, o): d for p, o, d in reads}
        missing = sorted(set(ref) - set(mine))
        extra = sorted(set(mine) - set(ref))
        differ = sorted(x for x in set(ref) & set(mine) if ref[x] != mine[x])
        assert not (missing or extra or differ), \
            "consumer %s: %d missing (e.g. %r), %d not in the log (%r), %d differ (%r)" % (
                name, len(missing), missing[:5], len(extra), extra[:5], len(differ), differ[:5])


def test_cross_zone_bytes_of_that_run(run):
    zone_of_node = {n.node_id: n.rack for n in run.cl.nodes.values()}
    payload = sum(len(kk) + len(v) for recs in run.records.values() for kk, v in recs.values())
    sizes = collections.defaultdict(list)
    proxied = 0
    for p, bs in run.batches.items():
        for b in bs:
            ident = b.records[0].key.decode().rpartition("-")[0]
            sizes[ident].append(b.size)
            if ident[-1] != zone_of_node[run.mains[p][0]]:
                proxied += 1
    nbatches = sum(len(v) for v in sizes.values())
    for ident, v in sorted(sizes.items()):
        print("  batches of %-6s %4d, %6.0f bytes on average" % (ident, len(v), sum(v) / len(v)))
    cross = run.traffic.cross_zone()
    ratio = cross / payload
    print("bytes between zones over the run:\n%s" % run.traffic.matrix())
    kinds = zr.cross_by_kind(run.cl, run.counts_before, run.counts_after)
    print("as the nodes counted them (TCP payload): %s; per batch: confirm %.0f bytes per "
          "proxied batch, follow %.0f bytes per batch" % (
              ", ".join("%s %d" % kv for kv in sorted(kinds.items())),
              kinds.get("confirm", 0) / max(1, proxied), kinds.get("follow", 0) / nbatches))
    print("cross-zone %d bytes / %d bytes of records = %.4f (limit %.2f); %d batches of "
          "%.0f bytes on average, %d of them proxied; %.0f cross-zone bytes per batch" % (
              cross, payload, ratio, MAX_RATIO, nbatches, payload / nbatches, proxied,
              cross / nbatches))
    if ratio > MAX_RATIO:
        raise CrossZoneTooHigh("%d bytes crossed zones, %.4f of the %d bytes of records "
                               "(limit %.2f):\n%s" % (cross, ratio, payload, MAX_RATIO,
                                                      run.traffic.matrix()))
