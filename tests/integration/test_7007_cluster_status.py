"""`skiffd status --bootstrap host:port` against a running 3-node cluster (docs/operations.md,
"skiffd status"): every node with its zone and health, the partitions it leads and serves,
its WAL backlog, upload lag and objects, and the cross-zone report; a killed node shows as
unreachable and makes the exit status 1."""
import re
import subprocess
import time

import pytest

import harness

pytestmark = pytest.mark.cluster

PARTS = 6
N = 300
SIZE = 1000
ROW = re.compile(r"^(\d+)\s+(\S+)\s+(\S+)\s+(\S+)\s+(\d+)\s+(\d+|-)\s+(\S+ \S+)\s+(\S+ \S+)\s+"
                 r"(\S+ \S+)\s+(\d+)/(\d+)\s+(\S+ \S+)$")


def status(bootstrap, *args):
    r = subprocess.run([harness.SKIFFD, "status", "--bootstrap", bootstrap,
                        "--timeout-ms", "3000"] + list(args),
                       capture_output=True, text=True, timeout=60)
    print(r.stdout, r.stderr)
    rows = {}
    for line in r.stdout.splitlines():
        m = ROW.match(line)
        if m:
            rows[int(m.group(1))] = {"zone": m.group(2), "addr": m.group(3),
                                     "health": m.group(4), "leads": int(m.group(5)),
                                     "serves": m.group(6), "pending": m.group(7),
                                     "kept": m.group(8), "lag": m.group(9),
                                     "objects": int(m.group(10)) + int(m.group(11)),
                                     "object_bytes": m.group(12)}
    return r, rows


def produce(bootstrap, topic):
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5})
    for i in range(N):
        p.produce(topic, value=b"x" * SIZE, partition=i % PARTS)
    assert p.flush(60) == 0


def check_kafka_model(out, produced):
    """The classic-Kafka line follows from the workload: N records of SIZE bytes, spread
    evenly over the zones (2/3 to a leader elsewhere) and copied to 2 other zones."""
    price = 0.01  # zone.transfer.price.per.gib's default, as the cost line above says
    per_byte = 2 / 3 + 2
    m = re.search(r"^  crossed (\d+) bytes \(.*\): ([\d.]+) per byte produced$", out, re.M)
    assert m, out
    kafka = int(m.group(1))
    assert abs(kafka - produced * per_byte) <= 1, (kafka, produced)
    # At least every record's payload: batches add headers, never remove payload.
    assert N * SIZE * per_byte <= kafka < N * SIZE * per_byte * 1.2
    assert float(m.group(2)) == pytest.approx(per_byte, abs=1e-4)
    m = re.search(r"^  cost \$(\S+); per GiB produced: \$(\S+)$", out, re.M)
    assert m, out
    assert float(m.group(1)) == pytest.approx(kafka / 2**30 * 2 * price, rel=1e-4)
    assert float(m.group(2)) == pytest.approx(per_byte * 2 * price, rel=1e-4)
    skiff = int(re.search(r"^  total\s+(\d+) \(", out, re.M).group(1))
    ratio = float(re.search(r"Skiff's cross-zone bytes are 1/(\d+) of Kafka's", out).group(1))
    assert ratio == pytest.approx(kafka / skiff, abs=0.5)
    # The workload's producer is in no zone; its bytes are Skiff's client bytes, and
    # the rest (confirms, follows, etcd) is small: Skiff sends less than Kafka would.
    assert skiff < kafka
    for word in ("2/3", "client.rack", "protocol overhead"):
        assert word in out.split("Model:")[1], word


def test_status_of_a_running_cluster(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1",
                                       "s3.wal.upload.interval.ms": "1000",
                                       "s3.compaction.interval.ms": "1000"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS, via=1)
    produce(cl.bootstrap, topic_name)
    total = PARTS + cl.offsets_partitions

    deadline = time.time() + 30
    while True:  # until uploads, and the objects' count, caught up with the workload
        r, rows = status(cl.node(1).bootstrap)
        if r.returncode == 0 and len(rows) == 3 and \
                all(x["lag"] == "0 B" for x in rows.values()) and \
                sum(x["objects"] for x in rows.values()) > 0:
            break
        assert time.time() < deadline, r.stdout
        time.sleep(1)

    assert r.returncode == 0, (r.stdout, r.stderr)
    assert r.stdout.startswith("3 nodes (Metadata from %s)" % cl.node(1).bootstrap)
    assert sorted(rows) == [1, 2, 3], rows
    for i, row in rows.items():
        assert row["zone"] == cl.node(i).rack
        assert row["addr"] == cl.node(i).bootstrap
        assert row["health"] == "ok"
        assert int(row["serves"]) == row["leads"] > 0, row  # a quiet cluster: nothing moving
    assert sum(row["leads"] for row in rows.values()) == total

    produced = int(re.search(r"Produced by clients: (\d+) bytes", r.stdout).group(1))
    assert N * SIZE <= produced < N * SIZE * 1.2, produced
    for kind in ("client", "confirm", "follow", "rpc", "etcd", "total"):
        assert re.search(r"^  %s\s+\d+ \(" % kind, r.stdout, re.M), kind
    assert "Cost at $0.01 per GiB each way" in r.stdout
    check_kafka_model(r.stdout, produced)

    r, _ = status(cl.node(2).bootstrap, "--zones")
    assert r.returncode == 0
    assert r.stdout.count("Cross-zone traffic of node") == 3, r.stdout

    # Killed, node 3 stays listed until its lease runs out (broker.session.timeout.ms,
    # 2 s), unreachable; then it is gone and its partitions served by the others.
    cl.kill(3)
    r, rows = status(cl.node(1).bootstrap)
    assert rows[1]["health"] == rows[2]["health"] == "ok"
    if 3 in rows:
        assert rows[3]["health"] == "unreachable" and rows[3]["serves"] == "-", r.stdout
        assert r.returncode == 1
    deadline = time.time() + 30
    while sorted(rows) != [1, 2] or r.returncode != 0 or \
            sum(x["leads"] for x in rows.values()) != total:
        assert time.time() < deadline, r.stdout
        time.sleep(1)
        r, rows = status(cl.node(1).bootstrap)


def test_status_without_a_cluster_says_why():
    r = subprocess.run([harness.SKIFFD, "status", "--bootstrap",
                        "127.0.0.1:%d" % harness.free_port(), "--timeout-ms", "500"],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "cannot read Metadata" in r.stderr, r
    r = subprocess.run([harness.SKIFFD, "status"], capture_output=True, text=True, timeout=30)
    assert r.returncode == 2 and "--bootstrap" in r.stderr, r


def test_status_of_a_single_node(broker_factory, topic_name):
    b = broker_factory()
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": b.bootstrap})
    p.produce(topic_name, value=b"x" * SIZE)
    assert p.flush(30) == 0
    r, rows = status(b.bootstrap)
    assert r.returncode == 0 and r.stdout.startswith("1 nodes"), r.stdout
    assert rows[1]["health"] == "ok" and rows[1]["zone"] == "-" and rows[1]["serves"] == "-"
    assert rows[1]["leads"] >= 1
    produced = int(re.search(r"Produced by clients: (\d+) bytes", r.stdout).group(1))
    assert produced >= SIZE
