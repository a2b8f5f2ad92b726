"""A real Prometheus (Debian's) scrapes a running node, and a 3-node cluster, with the rules of
deploy/prometheus/skiff-alerts.yml, while a real client produces and consumes a known
workload; the series it stores, read back through its HTTP API, agree with the workload.
Then every series the Grafana dashboard (deploy/grafana/skiff-dashboard.json) names
exists on the node.

The node is a one-node cluster (etcd, and the S3 emulator when the phase has one), so that
the cluster, etcd and object store series exist too. Against three nodes, each node's series
follow from the partitions it leads, and their sums from the whole workload."""
import json
import os
import re
import shutil
import subprocess
import sys
import time
import urllib.parse
import urllib.request

import pytest

import harness

pytestmark = pytest.mark.cluster

RULES = os.path.join(harness.ROOT, "deploy", "prometheus", "skiff-alerts.yml")
DASHBOARD = os.path.join(harness.ROOT, "deploy", "grafana", "skiff-dashboard.json")
N = 2000
SIZE = 1000


class Prometheus:
    def __init__(self, workdir, targets):
        exe = shutil.which("prometheus")
        if not exe:
            pytest.skip("prometheus is missing (Debian's prometheus, tools/install-deps.sh test)")
        os.makedirs(workdir, exist_ok=True)
        cfg = os.path.join(workdir, "prometheus.yml")
        with open(cfg, "w") as f:
            f.write("global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
                    "rule_files: [%s]\n"
                    "scrape_configs:\n"
                    "  - job_name: skiff\n"
                    "    static_configs: [{targets: %s}]\n" % (
                        json.dumps(RULES), json.dumps(targets)))
        self.port = harness.free_port()
        self.log = open(os.path.join(workdir, "prometheus.log"), "w")
        self.proc = subprocess.Popen(
            [exe, "--config.file=" + cfg, "--storage.tsdb.path=" + os.path.join(workdir, "tsdb"),
             "--web.listen-address=127.0.0.1:%d" % self.port],
            stdout=self.log, stderr=subprocess.STDOUT)
        harness.wait_port("127.0.0.1", self.port, timeout=60, proc=self.proc)
        deadline = time.time() + 60  # it listens before it is ready (503 until then)
        while True:
            try:
                with urllib.request.urlopen("http://127.0.0.1:%d/-/ready" % self.port,
                                            timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            assert time.time() < deadline and self.proc.poll() is None, "Prometheus not ready"
            time.sleep(0.2)

    def query(self, q):
        url = "http://127.0.0.1:%d/api/v1/query?%s" % (self.port,
                                                        urllib.parse.urlencode({"query": q}))
        with urllib.request.urlopen(url, timeout=10) as r:
            body = json.load(r)
        assert body["status"] == "success", body
        return {json.dumps(x["metric"], sort_keys=True): float(x["value"][1])
                for x in body["data"]["result"]}

    def value(self, q):
        res = self.query(q)
        assert len(res) == 1, (q, res)
        return next(iter(res.values()))

    def wait(self, q, ok, timeout=60.0):
        """The value of q once ok(value) holds (Prometheus scrapes every second)."""
        deadline, last = time.time() + timeout, None
        while time.time() < deadline:
            res = self.query(q)
            if len(res) == 1:
                last = next(iter(res.values()))
                if ok(last):
                    return last
            time.sleep(0.5)
        raise AssertionError("%s: last %r" % (q, last))

    def stop(self):
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.log.close()


@pytest.fixture
def node(cluster_factory):
    metrics = "127.0.0.1:%d" % harness.free_port()
    cl = cluster_factory(1, overrides={"metrics.listener": metrics,
                                       "s3.wal.upload.interval.ms": "1000",
                                       "s3.compaction.interval.ms": "1000"})
    cl.start()
    n = cl.node(1)
    n.metrics = metrics
    return n


@pytest.fixture
def prometheus(node, tmp_path):
    p = Prometheus(str(tmp_path / "prometheus"), [node.metrics])
    yield p
    p.stop()


def produce_and_consume(bootstrap, topic):
    """N records of SIZE bytes; group <topic>-all reads them all and commits, group
    <topic>-half commits the middle offset."""
    from confluent_kafka import Consumer, Producer, TopicPartition
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5,
                  "client.id": "prom-test"})
    for i in range(N):
        p.produce(topic, value=(b"%08d" % i) * (SIZE // 8))
    assert p.flush(60) == 0
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": topic + "-all",
                  "auto.offset.reset": "earliest", "enable.auto.commit": False})
    c.subscribe([topic])
    got, deadline = 0, time.time() + 60
    while got < N and time.time() < deadline:
        for m in c.consume(500, 1.0):
            assert not m.error(), m.error()
            got += 1
    assert got == N
    c.commit(asynchronous=False)
    c.close()
    h = Consumer({"bootstrap.servers": bootstrap, "group.id": topic + "-half"})
    h.commit(offsets=[TopicPartition(topic, 0, N // 2)], asynchronous=False)
    h.close()


def test_prometheus_sees_the_workload(node, prometheus, topic_name):
    assert prometheus.wait('up{job="skiff"}', lambda v: v == 1) == 1
    produce_and_consume(node.bootstrap, topic_name)
    sent = N * SIZE

    produced = prometheus.wait("skiff_produced_bytes_total", lambda v: v >= sent)
    assert produced < sent * 1.2, produced  # batch and record headers, not more
    assert prometheus.wait("skiff_fetched_bytes_total", lambda v: v >= sent) < sent * 1.5
    assert prometheus.wait("skiff_wal_written_bytes_total", lambda v: v >= sent)
    assert prometheus.wait("skiff_s3_upload_bytes_total", lambda v: v >= sent)
    # The objects hold what was uploaded (listed by the next compaction pass).
    assert prometheus.wait("sum(skiff_s3_object_bytes)", lambda v: v >= sent) < sent * 1.2
    assert prometheus.value("sum(skiff_s3_objects)") >= 1
    assert prometheus.value("skiff_s3_upload_failures_total") == 0
    assert 0 <= prometheus.value("time() - skiff_s3_last_upload_timestamp_seconds") < 60

    # Every produce request was answered, and its latency observed once.
    q = 'skiff_request_latency_seconds_count{api="Produce"} - ' \
        'skiff_requests_total{api="Produce"}'
    assert prometheus.wait(q, lambda v: v == 0) == 0
    # Over every request since the start (a rate needs the series to change between two
    # scrapes, and the workload is shorter than that may take).
    p99 = prometheus.value('histogram_quantile(0.99, skiff_request_latency_seconds_bucket'
                           '{api="Produce"})')
    assert 0 < p99 < 5, p99
    assert prometheus.value("skiff_wal_commit_latency_seconds_count - "
                            "skiff_wal_commits_total") == 0
    assert prometheus.value("skiff_wal_commit_latency_seconds_count") > 0

    lag = 'skiff:consumer_group_lag{group="%s",topic="%s",partition="0"}'
    assert prometheus.wait(lag % (topic_name + "-half", topic_name),
                           lambda v: v == N - N // 2) == N - N // 2
    assert prometheus.wait(lag % (topic_name + "-all", topic_name), lambda v: v == 0) == 0
    print("produced %d bytes for %d sent, Produce p99 %.4f s" % (produced, sent, p99))
    # The rules were loaded and evaluated (the lag above is one), and the alerts about
    # this workload's path stay quiet (lease and etcd alerts depend on the machine's load).
    assert not prometheus.query('ALERTS{alertstate="firing",alertname=~"SkiffNodeDown|SkiffWal.*'
                                '|SkiffS3Errors|SkiffUploadLag|SkiffBackPressure"}')


def dashboard_series():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    names = set()
    for panel in dash["panels"]:
        for t in panel["targets"]:
            names.update(re.findall(r"\bskiff[_:][a-zA-Z0-9_:]*", t["expr"]))
    return names


def test_every_dashboard_series_exists(node, prometheus, topic_name):
    produce_and_consume(node.bootstrap, topic_name)
    names = dashboard_series()
    assert len(names) >= 20, names
    # Objects are counted by the compaction pass after the upload.
    prometheus.wait("sum(skiff_s3_object_bytes)", lambda v: v >= N * SIZE)
    with node.conn():  # a client connected while /metrics is read
        with urllib.request.urlopen("http://%s/metrics" % node.metrics, timeout=10) as r:
            text = r.read().decode()
    exposed = set(re.findall(r"^(skiff_[a-zA-Z0-9_]+)[{ ]", text, re.M))
    missing = sorted(x for x in names if ":" not in x and x not in exposed)
    assert not missing, missing
    for rec in (x for x in names if ":" in x):
        prometheus.wait("count(%s)" % rec, lambda v: v > 0)
    with open(RULES) as f:
        rules = f.read()
    assert all(re.search(r"\b%s\b" % re.escape(n), rules) or ":" not in n for n in names)
    sys.stdout.write("%d series in the dashboard, all exposed\n" % len(names))


PARTS = 6


def test_prometheus_scrapes_a_cluster(cluster_factory, topic_name, tmp_path):
    """Three nodes, each scraped as its own target: the per-node series of produced bytes
    follow from the partitions each node leads, and the cluster-wide sums from the whole
    workload."""
    cl = cluster_factory(0, overrides={"s3.wal.upload.interval.ms": "1000",
                                       "leader.imbalance.check.interval.seconds": "1"})
    for _ in range(3):
        cl.add_node({"metrics.listener": "127.0.0.1:%d" % harness.free_port()}, start=False)
    cl.start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    cl.wait_leaders(topic_name, PARTS)
    instance = {cl.node(i).overrides["metrics.listener"]: i for i in (1, 2, 3)}
    prom = Prometheus(str(tmp_path / "prometheus"), sorted(instance))
    try:
        assert prom.wait('count(up{job="skiff"} == 1)', lambda v: v == 3) == 3
        from confluent_kafka import Producer
        per_part = N // PARTS
        p = Producer({"bootstrap.servers": cl.bootstrap, "acks": "all", "linger.ms": 5})
        for i in range(per_part * PARTS):
            p.produce(topic_name, value=b"x" * SIZE, partition=i % PARTS)
        assert p.flush(60) == 0
        sent = per_part * PARTS * SIZE
        leads = {i: len(ps) for i, ps in cl.mains(topic_name).items()}
        assert sum(leads.values()) == PARTS, leads

        total = prom.wait("sum(skiff_produced_bytes_total)", lambda v: v >= sent)
        assert total < sent * 1.2, total
        by_node = {}
        prom.wait("count(skiff_produced_bytes_total)", lambda v: v == 3)
        for labels, v in prom.query("skiff_produced_bytes_total").items():
            by_node[instance[json.loads(labels)["instance"]]] = v
        for i in (1, 2, 3):
            want = leads.get(i, 0) * per_part * SIZE
            assert want <= by_node[i] <= want * 1.2, (i, leads, by_node)
        assert prom.wait("sum(skiff_wal_written_bytes_total)", lambda v: v >= sent) < sent * 1.5

        # The cluster as one: every partition served once, one controller, three live nodes
        # as every node sees it.
        served = PARTS + cl.offsets_partitions
        assert prom.wait("sum(skiff_cluster_partitions_served)", lambda v: v == served) == served
        assert prom.value("sum(skiff_cluster_controller)") == 1
        assert prom.value("min(skiff_cluster_live_nodes)") == 3
        assert prom.value('count(skiff_build_info{node=~"1|2|3"})') == 3
        assert not prom.query('ALERTS{alertstate="firing",alertname=~"SkiffNodeDown|SkiffWal.*'
                              '|SkiffS3Errors|SkiffUploadLag|SkiffBackPressure'
                              '|SkiffNoController"}')
        print("produced %d bytes for %d sent; by node %r (leading %r)" % (
            total, sent, by_node, leads))
    finally:
        prom.stop()
