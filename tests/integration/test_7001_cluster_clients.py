"""Three nodes in three zones serve one topic together (docs/cluster.md).

A 12-partition topic gets 4 mains on each node; Metadata from every node lists the three
brokers with their racks and the same leaders at the same epochs; DescribeCluster agrees;
topics created, grown, reconfigured or deleted through one node are seen by the others;
a node that is not a partition's main answers NOT_LEADER_OR_FOLLOWER, and one that does
not coordinate a group NOT_COORDINATOR. Then the Java clients (4.3.1), librdkafka (kcat
and clients/rdk_produce) and kafka-python produce and consume through all three nodes,
every record read back at its acknowledged place.
"""

import json
import os
import shutil
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import cluster as cm  # noqa: E402
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto as k  # noqa: E402
import ktest  # noqa: E402

pytestmark = pytest.mark.cluster

PARTS = 12
RDK_SRC = os.path.join(ktest.HERE, "rdk_produce.c")


def started(cluster_factory):
    """Three nodes, __consumer_offsets spread over them (the first node places it alone;
    the rebalance a second after the others joined spreads it), so that a new topic's
    partitions spread evenly (placement counts every partition a node holds)."""
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1"}).start()
    cl.wait_balanced()
    return cl


def test_mains_on_every_node_and_one_view_of_the_cluster(cluster_factory, topic_name):
    cl = started(cluster_factory)
    leaders = cl.create_topic(topic_name, PARTS, via=1)
    per_node = {i: sorted(p for p, (ld, _) in leaders.items() if ld == i) for i in (1, 2, 3)}
    assert {i: len(ps) for i, ps in per_node.items()} == {1: 4, 2: 4, 3: 4}, \
        "mains of %s per node: %r" % (topic_name, per_node)
    assert all(e >= 1 for _, e in leaders.values()), leaders

    want_brokers = sorted((n.node_id, n.host, n.port, n.rack) for n in cl.nodes.values())
    views = {}
    for n in cl.nodes.values():
        with n.conn() as c:
            md = k.metadata(c, [topic_name, cm.OFFSETS_TOPIC], version=12, allow_auto=False)
            dc = cm.describe_cluster(c)
        brokers = sorted((b["NodeId"], b["Host"], b["Port"], b["Rack"]) for b in md["Brokers"])
        assert brokers == want_brokers, "node %d lists brokers %r" % (n.node_id, brokers)
        topics = {t["Name"]: t for t in md["Topics"]}
        for name, t in topics.items():
            assert t["ErrorCode"] == k.NONE, (n.node_id, name, t["ErrorCode"])
            for p in t["Partitions"]:
                assert p["ErrorCode"] == k.NONE, (n.node_id, name, p)
                assert p["ReplicaNodes"] == [p["LeaderId"]] and p["IsrNodes"] == [p["LeaderId"]], \
                    (n.node_id, name, p)
        assert topics[cm.OFFSETS_TOPIC]["IsInternal"], topics[cm.OFFSETS_TOPIC]
        assert len(topics[cm.OFFSETS_TOPIC]["Partitions"]) == cl.offsets_partitions
        views[n.node_id] = {
            "cluster": md["ClusterId"], "controller": md["ControllerId"],
            "leaders": {(name, p["PartitionIndex"]): (p["LeaderId"], p["LeaderEpoch"])
                        for name, t in topics.items() for p in t["Partitions"]}}
        assert dc["ErrorCode"] == k.NONE, dc
        dbrokers = sorted((b["BrokerId"], b["Host"], b["Port"], b["Rack"]) for b in dc["Brokers"])
        assert dbrokers == want_brokers, "DescribeCluster of node %d: %r" % (n.node_id, dbrokers)
        assert (dc["ClusterId"], dc["ControllerId"]) == (md["ClusterId"], md["ControllerId"]), \
            "node %d: DescribeCluster %r, Metadata %r" % (
                n.node_id, (dc["ClusterId"], dc["ControllerId"]),
                (md["ClusterId"], md["ControllerId"]))
    first = views[1]
    for i, v in views.items():
        assert v == first, "node %d sees %r, node 1 sees %r" % (i, v, first)
    assert first["cluster"] and first["controller"] in (1, 2, 3), first
    assert {ld for (t, _), (ld, _) in first["leaders"].items() if t == topic_name} == {1, 2, 3}

    # The Java AdminClient's view (DescribeCluster through any node).
    rc, out, err = jtools.java("Admin", ["-b", cl.bootstrap, "cluster"], timeout=90)
    res = jtools.json_lines(out)
    assert rc == 0 and res and res[0]["ok"], "describeCluster:\n%s\n%s" % ("\n".join(out),
                                                                           ktest.tail(err))
    jnodes = sorted((x["id"], x["host"], x["port"], x["rack"]) for x in res[0]["nodes"])
    assert jnodes == want_brokers, jnodes
    assert (res[0]["cluster_id"], res[0]["controller"]) == (first["cluster"], first["controller"])


def test_not_leader_and_not_coordinator_elsewhere(cluster_factory, topic_name):
    cl = started(cluster_factory)
    leaders = cl.create_topic(topic_name, PARTS)
    conns = {i: n.conn() for i, n in cl.nodes.items()}
    wrong = []
    try:
        for p, (leader, epoch) in sorted(leaders.items()):
            for i, c in conns.items():
                pr = k.produce(c, topic_name, p, k.batch([b"p%d-via-%d" % (p, i)]))
                lo = k.list_offsets(c, topic_name, p, -1)
                _, fe = k.fetch(c, topic_name, p, 0)
                got = (pr["ErrorCode"], lo["ErrorCode"], fe["ErrorCode"])
                want = (k.NONE,) * 3 if i == leader else (cm.NOT_LEADER_OR_FOLLOWER,) * 3
                if got != want:
                    wrong.append("%s-%d (main %d, epoch %d) via node %d: produce, list offsets,"
                                 " fetch errors %r, want %r" % (topic_name, p, leader, epoch, i,
                                                                 got, want))
                if i == leader and pr["ErrorCode"] == k.NONE and pr["BaseOffset"] != 0:
                    wrong.append("%s-%d: first record at offset %d" % (topic_name, p,
                                                                       pr["BaseOffset"]))
        # Every partition holds exactly the one record its main took.
        for p, (leader, _) in leaders.items():
            lo = k.list_offsets(conns[leader], topic_name, p, -1)
            if lo["Offset"] != 1:
                wrong.append("%s-%d: end offset %d after one accepted produce" % (
                    topic_name, p, lo["Offset"]))
        assert not wrong, "\n".join(wrong)

        # Groups: every node names the same coordinator, the main of the group's
        # __consumer_offsets partition; the others refuse the group's requests. (A group
        # id whose hash is not negative: test_group_partition_as_kafka covers those.)
        group = cm.group_id("g7001")
        op = cm.offsets_partition(group, cl.offsets_partitions)
        main = cl.leaders(cm.OFFSETS_TOPIC)[op][0]
        for i, c in conns.items():
            r = kg.find_coordinator(c, group)
            assert (r["ErrorCode"], r["NodeId"]) == (k.NONE, main), \
                "FindCoordinator(%s) via node %d: %r; main of %s-%d is %d" % (
                    group, i, r, cm.OFFSETS_TOPIC, op, main)
            assert (r["Host"], r["Port"]) == (cl.nodes[main].host, cl.nodes[main].port), r
        for i, c in conns.items():
            err = kg.commit(c, group, {(topic_name, 0): 1})[(topic_name, 0)]
            want = k.NONE if i == main else cm.NOT_COORDINATOR
            assert err == want, "OffsetCommit of %s via node %d: error %d, want %d" % (
                group, i, err, want)
            j = kg.join(c, group, member_id="", version=5)
            if i != main:
                assert j["ErrorCode"] == cm.NOT_COORDINATOR, "JoinGroup via node %d: %r" % (i, j)
        _, offs = kg.fetch_offsets(conns[main], group, {topic_name: [0]})
        assert offs[(topic_name, 0)][0] == 1, offs
    finally:
        for c in conns.values():
            c.close()


def test_admin_requests_on_one_node_are_seen_by_all(cluster_factory, topic_name):
    cl = started(cluster_factory)
    a, b = topic_name + "-a", topic_name + "-b"
    c1, c2, c3 = (cl.nodes[i].conn() for i in (1, 2, 3))
    try:
        # CreateTopics on node 1 (waits until every node shows it, led, at one epoch)
        cl.create_topic(a, 3, via=1)
        r = k.create_topics(c3, [(a, 3, 1)])["Topics"][0]
        assert r["ErrorCode"] == k.TOPIC_ALREADY_EXISTS, "re-creating %s on node 3: %r" % (a, r)
        cl.create_topic(b, 2, via=3)

        # CreatePartitions on node 2
        err, msg = cm.create_partitions(c2, a, 6)
        assert err == k.NONE, "CreatePartitions %s to 6 via node 2: %d %s" % (a, err, msg)
        leaders = cl.wait_leaders(a, 6, timeout=30)
        for p in range(3, 6):
            leader = leaders[p][0]
            with cl.nodes[leader].conn() as c:
                pr = k.produce(c, a, p, k.batch([b"new-partition"]))
            assert (pr["ErrorCode"], pr["BaseOffset"]) == (k.NONE, 0), (p, leader, pr)

        # AlterConfigs on node 3, DescribeConfigs everywhere
        err, msg = cm.alter_topic_configs(c3, a, {"retention.ms": "3600000"})
        assert err == k.NONE, "AlterConfigs via node 3: %d %s" % (err, msg)
        for i, c in ((1, c1), (2, c2), (3, c3)):
            got = cm.wait_for(lambda: (lambda r: r if r[1] == "3600000" else None)(
                cm.topic_config(c, a, "retention.ms")), 15,
                "node %d to describe retention.ms=3600000 of %s (it says %r)" % (
                    i, a, cm.topic_config(c, a, "retention.ms")))
            assert got == (k.NONE, "3600000", 1), "node %d: %r (source 1 = topic)" % (i, got)

        # DeleteTopics on node 1: gone everywhere, and can be created again
        res = cm.delete_topics(c1, [b])
        assert res == {b: k.NONE}, "DeleteTopics %s via node 1: %r" % (b, res)
        for i, c in ((1, c1), (2, c2), (3, c3)):
            def gone(c=c):
                t = k.metadata(c, [b], version=12, allow_auto=False)["Topics"][0]
                return t["ErrorCode"] == cm.UNKNOWN_TOPIC_OR_PARTITION
            cm.wait_for(gone, 15, "node %d to forget deleted topic %s" % (i, b))
        res = cm.delete_topics(c2, [b])
        assert res == {b: cm.UNKNOWN_TOPIC_OR_PARTITION}, "deleting %s again: %r" % (b, res)
        cl.create_topic(b, 4, via=2)
        leaders = cl.leaders(b)
        for p, (leader, _) in leaders.items():
            with cl.nodes[leader].conn() as c:
                assert k.list_offsets(c, b, p, -1)["Offset"] == 0, \
                    "re-created %s-%d does not start empty" % (b, p)
        names = {t["Name"] for t in k.metadata(c3, None, version=12, allow_auto=False)["Topics"]}
        assert {a, b} <= names, names
    finally:
        for c in (c1, c2, c3):
            c.close()


def test_group_partition_as_kafka(cluster_factory):
    """Group ids with a negative String.hashCode: the coordinator is the main of
    partition abs(hashCode) % N of __consumer_offsets, as in Kafka."""
    cl = started(cluster_factory)
    leaders = cl.leaders(cm.OFFSETS_TOPIC)
    wrong = []
    with cl.nodes[1].conn() as c:
        for _ in range(12):
            g = cm.group_id("g7001n", negative=True, partitions=cl.offsets_partitions)
            r = kg.find_coordinator(c, g)
            assert r["ErrorCode"] == k.NONE, r
            p = cm.offsets_partition(g, cl.offsets_partitions)
            if r["NodeId"] != leaders[p][0]:
                wrong.append("%s (hashCode %d): coordinator %d, the main of %s-%d is %d" % (
                    g, cm.java_string_hash(g), r["NodeId"], cm.OFFSETS_TOPIC, p,
                    leaders[p][0]))
    if wrong:
        raise AssertionError("%d of 12 groups on another partition than Kafka's (mains %r):"
                             "\n  %s" % (len(wrong), leaders, "\n  ".join(wrong)))


# ---------------------------------------------------------------- clients

def assert_spread(cl, topic):
    mains = cl.mains(topic)
    assert all(len(v) == PARTS // 3 for v in mains.values()) and len(mains) == 3, \
        "mains of %s moved during the test: %r" % (topic, mains)


def test_java_clients_through_all_nodes(cluster_factory, topic_name):
    cl = started(cluster_factory)
    n = 12000
    rc, out, err = jtools.java("Admin", ["-b", cl.nodes[2].bootstrap, "create", "-t", topic_name,
                                         "-P", str(PARTS), "-R", "1"], timeout=90)
    res = jtools.json_lines(out)
    assert rc == 0 and res and res[0]["ok"], "create:\n%s\n%s" % ("\n".join(out), ktest.tail(err))
    cl.wait_leaders(topic_name, PARTS)
    assert_spread(cl, topic_name)

    rc, out, err = jtools.java("Produce", ["-b", cl.bootstrap, "-t", topic_name, "-n", str(n),
                                           "-P", str(PARTS)], timeout=120)
    summary = jtools.json_lines(out)
    assert rc == 0 and summary, "producer failed:\n%s\n%s" % ("\n".join(out[-5:]), ktest.tail(err))
    summary = summary[-1]
    assert summary["acked"] == n and summary["errors"] == 0, summary
    assert summary["idempotence"] is True and summary["acks"] == "-1", summary
    acks = {}
    for line in out:
        if line.startswith("ACK "):
            i, p, off = map(int, line.split()[1:])
            acks[i] = (p, off)
    assert len(acks) == n
    for p in range(PARTS):
        offs = sorted(o for (q, o) in acks.values() if q == p)
        assert offs == list(range(n // PARTS)), "partition %d: offsets %s..%s of %d" % (
            p, offs[:1], offs[-1:], len(offs))

    rc, out, err = jtools.java("Consume", ["-b", cl.bootstrap, "-t", topic_name, "-n", str(n)],
                               timeout=120)
    summary = jtools.json_lines(out)
    assert summary, "consumer printed no summary (rc %d):\n%s" % (rc, ktest.tail(err))
    summary = summary[-1]
    bad = [line for line in out if line.startswith("BAD ")]
    assert rc == 0 and summary["ok"], "consumer: %s\n%s\n%s" % (summary, "\n".join(bad[:20]),
                                                                ktest.tail(err))
    wrong = []
    for line in out:
        if line.startswith("REC "):
            p, off, i = map(int, line.split()[1:])
            if acks.get(i) != (p, off):
                wrong.append("record %d read at %s, acknowledged at %s" % (i, (p, off), acks.get(i)))
    assert not wrong, "\n".join(wrong[:20])
    assert summary["end_offsets"] == {str(p): n // PARTS for p in range(PARTS)}, summary
    assert_spread(cl, topic_name)


@pytest.fixture(scope="module")
def rdk_produce():
    """build/tests/rdk_produce when it is up to date, else compiled here from the source."""
    built = os.path.join(harness.BUILD, "tests", "rdk_produce")
    if os.path.exists(built) and os.path.getmtime(built) >= os.path.getmtime(RDK_SRC):
        return built
    out = os.path.join(ktest.WORK, "bin", "rdk_produce")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    flags = ktest.run(["pkg-config", "--cflags", "--libs", "rdkafka"],
                      timeout=30).stdout.decode().split()
    ktest.run([cc, "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-o", out,
               RDK_SRC] + flags, timeout=120, what="cc rdk_produce.c")
    return out


def test_librdkafka_and_kafka_python_through_all_nodes(cluster_factory, topic_name, rdk_produce,
                                                       tmp_path):
    cl = started(cluster_factory)
    t_rdk, t_kcat, t_kp = topic_name + "-rdk", topic_name + "-kcat", topic_name + "-kp"
    for t in (t_rdk, t_kcat, t_kp):
        cl.create_topic(t, PARTS)
        assert_spread(cl, t)

    # librdkafka's idempotent producer, every delivery report read back at its place
    n = 24000
    p = ktest.run([rdk_produce, "-b", cl.bootstrap, "-t", t_rdk, "-n", str(n), "-P", str(PARTS),
                   "-T", "90"], timeout=120, check=False)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    assert p.returncode == 0, "rdk_produce exited %d\n%s\n%s" % (p.returncode, out,
                                                                ktest.tail(err))
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["ok"] and summary["read"] == n, summary
    for part in summary["partitions"]:
        assert part["min_offset"] == 0 and part["max_offset"] == part["count"] - 1, part
    assert sorted(x["partition"] for x in summary["partitions"]) == list(range(PARTS))

    # kcat: keyed records spread by librdkafka's partitioner, read back from all partitions
    kcat = ktest.which("kcat")
    m = 6000
    lines = ["key-%d:value-%d-%s" % (i, i, "x" * (i % 50)) for i in range(m)]
    src = tmp_path / "kcat.txt"
    src.write_text("\n".join(lines) + "\n")
    ktest.run([kcat, "-b", cl.bootstrap, "-P", "-t", t_kcat, "-K", ":", "-X", "acks=all",
               "-X", "enable.idempotence=true", "-X", "linger.ms=5", "-l", str(src)],
              timeout=90, what="kcat producer")
    c = ktest.run([kcat, "-b", cl.bootstrap, "-C", "-t", t_kcat, "-o", "beginning", "-e", "-q",
                   "-c", str(m), "-f", "%p %o %k:%s\\n", "-X", "fetch.wait.max.ms=100"],
                  timeout=90, what="kcat consumer")
    got = c.stdout.decode(errors="replace").splitlines()
    read = {}
    dup = []
    for line in got:
        part, off, rec = line.split(" ", 2)
        if rec in read:
            dup.append(rec)
        read[rec] = (int(part), int(off))
    assert not dup, "kcat read %d records twice, e.g. %r" % (len(dup), dup[:5])
    assert set(read) == set(lines), "kcat read %d of %d records (missing e.g. %r)" % (
        len(set(read) & set(lines)), m, sorted(set(lines) - set(read))[:5])
    for part in range(PARTS):
        offs = sorted(o for q, o in read.values() if q == part)
        assert offs == list(range(len(offs))), "kcat: %s-%d offsets not contiguous" % (t_kcat, part)
    leaders = cl.leaders(t_kcat)
    assert {leaders[q][0] for q, _ in read.values()} == {1, 2, 3}, \
        "kcat's records were not written through every node"

    # kafka-python: producer and an assigned consumer over the three nodes
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    nk = 3000
    prod = KafkaProducer(bootstrap_servers=cl.bootstrap.split(","), client_id="skiff-test-kp",
                         acks="all", linger_ms=5, request_timeout_ms=15000, max_block_ms=30000,
                         retries=5)
    try:
        futs = [prod.send(t_kp, key=b"k-%d" % i, value=b"v-%d" % i, partition=i % PARTS)
                for i in range(nk)]
        prod.flush(timeout=60)
        acks = {}
        for i, f in enumerate(futs):
            md = f.get(timeout=30)
            acks[i] = (md.partition, md.offset)
    finally:
        prod.close(timeout=10)
    cons = KafkaConsumer(bootstrap_servers=cl.bootstrap.split(","), client_id="skiff-test-kp",
                         group_id=None, enable_auto_commit=False, request_timeout_ms=15000,
                         fetch_max_wait_ms=100)
    seen, bad = {}, []
    try:
        tps = [TopicPartition(t_kp, q) for q in range(PARTS)]
        cons.assign(tps)
        cons.seek_to_beginning(*tps)
        deadline = time.time() + 60
        while len(seen) < nk and time.time() < deadline:
            for _, msgs in cons.poll(timeout_ms=500, max_records=2000).items():
                for mm in msgs:
                    i = int(mm.key[2:])
                    where = (mm.partition, mm.offset)
                    if i in seen:
                        bad.append("record %d read twice, at %s and %s" % (i, seen[i], where))
                    elif acks.get(i) != where or mm.value != b"v-%d" % i:
                        bad.append("record %d read at %s, acknowledged at %s" % (
                            i, where, acks.get(i)))
                    seen[i] = where
    finally:
        cons.close()
    assert not bad, "\n".join(bad[:20])
    assert len(seen) == nk, "kafka-python read %d of %d records in 60s" % (len(seen), nk)
    for t in (t_rdk, t_kcat, t_kp):
        assert_spread(cl, t)
