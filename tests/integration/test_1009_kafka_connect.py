"""A Kafka Connect worker in distributed mode (connect-runtime and connect-file 4.x from
Maven Central, tests/java; org.apache.kafka.connect.cli.ConnectDistributed, what
bin/connect-distributed.sh runs) against the broker: its config, offset and status topics
are compacted, a FileStreamSource connector made through the REST API copies a file's lines
into a topic, and its offsets are stored: a restarted worker goes on where the first
stopped, without duplicates. With exactly.once.source.support=enabled (KIP-618, source
records and offsets in one transaction) the same holds across a SIGKILL of the worker
(docs/compatibility.md)."""

import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import ktest  # noqa: E402


class Worker:
    """One ConnectDistributed JVM with its REST listener on a free port."""

    def __init__(self, bootstrap, name, workdir, extra=None):
        self.port = harness.free_port()
        self.url = "http://127.0.0.1:%d" % self.port
        props = {
            "bootstrap.servers": bootstrap,
            "group.id": name,
            "config.storage.topic": name + "-configs",
            "offset.storage.topic": name + "-offsets",
            "status.storage.topic": name + "-status",
            "config.storage.replication.factor": "1",
            "offset.storage.replication.factor": "1",
            "status.storage.replication.factor": "1",
            "offset.storage.partitions": "3",
            "status.storage.partitions": "2",
            "key.converter": "org.apache.kafka.connect.storage.StringConverter",
            "value.converter": "org.apache.kafka.connect.storage.StringConverter",
            "offset.flush.interval.ms": "500",
            "listeners": self.url,
            "rest.advertised.host.name": "127.0.0.1",
            "rest.advertised.port": str(self.port),
        }
        props.update(extra or {})
        cfg = os.path.join(workdir, "worker-%d.properties" % self.port)
        with open(cfg, "w") as f:
            f.writelines("%s=%s\n" % kv for kv in props.items())
        self.log = open(os.path.join(workdir, "worker-%d.log" % self.port), "wb")
        self.proc = subprocess.Popen(
            ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
             "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", ktest.build_java(),
             "org.apache.kafka.connect.cli.ConnectDistributed", cfg],
            stdout=self.log, stderr=subprocess.STDOUT)
        self.logpath = self.log.name

    def call(self, method, path, body=None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        with urllib.request.urlopen(req, timeout=10) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw else None

    def wait(self, what, check, timeout=60):
        """Polls check() (a REST call) until it returns something true."""
        deadline, last = time.time() + timeout, None
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError("worker exited (%s) while waiting for %s:\n%s" % (
                    self.proc.returncode, what, self.tail()))
            try:
                got = check()
                if got:
                    return got
                last = got
            except (urllib.error.URLError, ConnectionError, OSError) as e:
                last = e
            time.sleep(0.5)
        raise AssertionError("%s: not after %ds (last %r)\n%s" % (what, timeout, last, self.tail()))

    def tail(self):
        self.log.flush()
        with open(self.logpath, "rb") as f:
            return ktest.tail(f.read(), 6000)

    def kill(self):
        self.proc.kill()
        self.proc.wait()
        self.log.close()

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()  # a graceful stop, as a rolling restart does
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()


def running(w, name):
    s, st = w.call("GET", "/connectors/%s/status" % name)
    return st["connector"]["state"] == "RUNNING" and st["tasks"] and all(
        t["state"] == "RUNNING" for t in st["tasks"]) and st


def read_topic(bootstrap, topic, want, timeout=45, committed=False):
    """Every value of the topic's partition 0 once want are there (and a second more)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t1009-" + uuid.uuid4().hex,
                  "enable.auto.commit": False,
                  "isolation.level": "read_committed" if committed else "read_uncommitted"})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    vals, deadline, settle = [], time.time() + timeout, None
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is not None and not m.error():
                vals.append(m.value().decode())
            if len(vals) >= want and settle is None:
                settle = time.time() + 1.0  # a duplicate would arrive now
            if settle is not None and time.time() > settle:
                break
    finally:
        c.close()
    return vals


def topic_configs(bootstrap, topics):
    from confluent_kafka.admin import AdminClient, ConfigResource
    admin = AdminClient({"bootstrap.servers": bootstrap})
    res = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    out = {}
    for r, f in admin.describe_configs(res).items():
        out[r.name] = {k: v.value for k, v in f.result(timeout=20).items()}
    return out


def test_connect_distributed_file_source(broker, topic_name, tmp_path):
    name = "t1009-" + uuid.uuid4().hex[:8]
    ktest.create_topic(broker.bootstrap, topic_name, partitions=1)
    src = tmp_path / "input.txt"
    first = ["line-%d" % i for i in range(50)]
    src.write_text("".join(x + "\n" for x in first))
    connector = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                 "file": str(src), "topic": topic_name, "tasks.max": "1"}

    w = Worker(broker.bootstrap, name, str(tmp_path))
    try:
        w.wait("REST up", lambda: w.call("GET", "/")[1].get("version"))
        st, _ = w.call("PUT", "/connectors/%s/config" % name, connector)
        assert st in (200, 201), st
        w.wait("connector running", lambda: running(w, name))
        got = read_topic(broker.bootstrap, topic_name, len(first))
        assert got == first, got
        # The source offset (the file position) is committed to the offset topic.
        offs = w.wait("offsets stored", lambda: w.call(
            "GET", "/connectors/%s/offsets" % name)[1]["offsets"])
        assert offs[0]["offset"]["position"] == sum(len(x) + 1 for x in first), offs
    finally:
        w.stop()

    cfg = topic_configs(broker.bootstrap, [name + "-configs", name + "-offsets",
                                           name + "-status"])
    assert all(c["cleanup.policy"] == "compact" for c in cfg.values()), cfg

    more = ["more-%d" % i for i in range(30)]
    with open(src, "a") as f:
        f.write("".join(x + "\n" for x in more))
    w = Worker(broker.bootstrap, name, str(tmp_path))
    try:
        w.wait("connector running again", lambda: running(w, name))
        got = read_topic(broker.bootstrap, topic_name, len(first) + len(more))
        assert got == first + more, got
    finally:
        w.stop()


def test_connect_exactly_once_source_across_worker_sigkill(broker, topic_name, tmp_path):
    """exactly.once.source.support=enabled (KIP-618): the source task writes its records and
    offsets in transactions, so a worker killed with SIGKILL and started again neither
    loses nor repeats a line, read read_committed."""
    name = "t1009x-" + uuid.uuid4().hex[:8]
    eos = {"exactly.once.source.support": "enabled"}
    ktest.create_topic(broker.bootstrap, topic_name, partitions=1)
    src = tmp_path / "input.txt"
    first = ["line-%d" % i for i in range(50)]
    src.write_text("".join(x + "\n" for x in first))
    connector = {"connector.class": "org.apache.kafka.connect.file.FileStreamSourceConnector",
                 "file": str(src), "topic": topic_name, "tasks.max": "1",
                 "exactly.once.support": "required"}
    w = Worker(broker.bootstrap, name, str(tmp_path), eos)
    try:
        w.wait("REST up", lambda: w.call("GET", "/")[1].get("version"))
        st, _ = w.call("PUT", "/connectors/%s/config" % name, connector)
        assert st in (200, 201), st
        w.wait("connector running", lambda: running(w, name))
        got = read_topic(broker.bootstrap, topic_name, len(first), committed=True)
        assert got == first, got
    finally:
        w.kill()
    more = ["more-%d" % i for i in range(30)]
    with open(src, "a") as f:
        f.write("".join(x + "\n" for x in more))
    w = Worker(broker.bootstrap, name, str(tmp_path), eos)
    try:
        w.wait("connector running again", lambda: running(w, name))
        got = read_topic(broker.bootstrap, topic_name, len(first) + len(more), committed=True)
        assert got == first + more, got
    finally:
        w.stop()
