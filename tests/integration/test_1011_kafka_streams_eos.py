"""A Kafka Streams application (kafka-streams 4.x, tests/java StreamsCount) with
processing.guarantee=exactly_once_v2, a repartition (groupBy on the value) and a state store
with its changelog (count): it counts a known input exactly, and again across a SIGKILL of
the node in the middle of processing (docs/compatibility.md).

Exactly: the application writes each new count, so a read_committed consumer of the output
must see, for every word, the counts 1, 2, ..., n in order and nothing else; a record
processed twice, or a count lost, would show."""

import json
import os
import random
import subprocess
import sys
import threading
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import ktest  # noqa: E402

WORDS = 8


def expected_input(seed):
    """(the input values in a shuffled order, word -> count)."""
    want = {"w%d" % i: 10 * (i + 1) for i in range(WORDS)}
    vals = [w for w, n in want.items() for _ in range(n)]
    random.Random(seed).shuffle(vals)
    return vals, want


def produce(bootstrap, topic, values, step=0, pause=0.0):
    """Every value, acknowledged (acks=all, idempotent: retried across a restart of the
    node); with step, that many at a time, pause seconds apart."""
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                  "linger.ms": 5})
    errors = []
    for i, v in enumerate(values):
        p.produce(topic, value=v.encode(),
                  on_delivery=lambda err, msg: err and errors.append(str(err)))
        if step and i % step == step - 1:
            p.poll(pause)
    assert p.flush(60) == 0 and not errors, errors


class Output:
    """A read_committed consumer of the output topic's partition, assigned (no group that a
    restart of the node could rebalance), from the beginning: every count seen per word,
    in offset order, each offset once."""

    def __init__(self, bootstrap, topic):
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
        self.c = Consumer({"bootstrap.servers": bootstrap, "group.id": "t1011-" + uuid.uuid4().hex,
                           "isolation.level": "read_committed", "enable.auto.commit": False})
        self.c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        self.records = {}

    @property
    def seen(self):
        out = {}
        for off in sorted(self.records):
            k, v = self.records[off]
            out.setdefault(k, []).append(v)
        return out

    def poll(self, seconds):
        end = time.time() + seconds
        while time.time() < end:
            m = self.c.poll(0.2)
            if m is None or m.error():
                continue
            self.records[m.offset()] = (m.key().decode(), int(m.value().decode()))

    def wait(self, want, timeout):
        """Polls until every word's last count is want's; returns the counts seen."""
        deadline = time.time() + timeout
        while time.time() < deadline:
            self.poll(1)
            if {w: c[-1] for w, c in self.seen.items()} == want:
                break
        self.poll(1)  # anything past the expected count would show now
        return self.seen

    def close(self):
        self.c.close()


class App:
    """The StreamsCount JVM; its stdout lines are collected by a thread."""

    def __init__(self, bootstrap, src, dst, app_id, state_dir, timeout=240):
        cmd = ["java", "-XX:TieredStopAtLevel=1", "-XX:+UseSerialGC",
               "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", ktest.build_java(),
               "io.skiff.clients.StreamsCount", "--timeout", str(timeout), "-b", bootstrap,
               "-i", src, "-o", dst, "-a", app_id, "-d", state_dir]
        self.lines = []
        self.errpath = os.path.join(state_dir, "streams-%d.log" % time.monotonic_ns())
        self.err = open(self.errpath, "wb")
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=self.err)
        self.t = threading.Thread(target=self._read, daemon=True)
        self.t.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line.decode(errors="replace").strip())

    def states(self):
        """The state changes and errors the application printed."""
        return [json.loads(x) for x in self.lines if x.startswith("{")]

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.err.close()
        with open(self.errpath, "rb") as f:
            # Its warnings and errors but the clients' reconnections.
            return "\n".join(ln for ln in f.read().decode(errors="replace").splitlines()
                             if ("WARN" in ln or "ERROR" in ln) and "NetworkClient" not in ln)


def exact(seen, want):
    """The words whose committed counts are not exactly 1..n (or that are not wanted)."""
    return {w: seen.get(w) for w in set(seen) | set(want)
            if seen.get(w) != list(range(1, want.get(w, 0) + 1))}


def setup_topics(bootstrap, name):
    src, dst = name + "-in", name + "-out"
    ktest.create_topic(bootstrap, src, partitions=2)
    ktest.create_topic(bootstrap, dst, partitions=1)
    return src, dst


def test_streams_eos_count(broker, topic_name, tmp_path):
    src, dst = setup_topics(broker.bootstrap, topic_name)
    values, want = expected_input(1011)
    produce(broker.bootstrap, src, values)
    app = App(broker.bootstrap, src, dst, "t1011-" + uuid.uuid4().hex[:8], str(tmp_path))
    out = Output(broker.bootstrap, dst)
    try:
        seen = out.wait(want, 75)
    finally:
        out.close()
        err = app.stop()
    assert exact(seen, want) == {}, "wrong counts %s\nstates %s\n%s" % (
        exact(seen, want), app.states(), ktest.tail(err))


@pytest.mark.restarts
def test_streams_eos_count_across_sigkill(broker_factory, topic_name, tmp_path):
    b = broker_factory()
    src, dst = setup_topics(b.bootstrap, topic_name)
    values, want = expected_input(10110)
    first = len(values) // 3
    produce(b.bootstrap, src, values[:first])
    app_id = "t1011k-" + uuid.uuid4().hex[:8]
    apps = [App(b.bootstrap, src, dst, app_id, str(tmp_path))]
    out = Output(b.bootstrap, dst)
    # The rest of the input arrives while the application works and the node dies.
    failed = []

    def produce_rest():
        try:
            produce(b.bootstrap, src, values[first:], 10, 0.05)
        except Exception as e:  # noqa: BLE001 - reported by the test's thread
            failed.append(e)
    rest = threading.Thread(target=produce_rest)
    try:
        # SIGKILL of the node as soon as the first counts are committed, while the
        # application is working through the input.
        deadline = time.time() + 60
        while not out.records and time.time() < deadline:
            out.poll(0.2)
        assert out.records, "no output after 60 s: %s" % apps[0].states()
        rest.start()
        time.sleep(0.3)
        b.kill()
        b.start()
        rest.join(90)
        assert not rest.is_alive() and not failed, failed
        deadline = time.time() + 75
        while time.time() < deadline:
            out.poll(1)
            if {w: c[-1] for w, c in out.seen.items()} == want:
                break
            if apps[-1].proc.poll() is not None:  # died: a restarted instance goes on
                apps.append(App(b.bootstrap, src, dst, app_id, str(tmp_path)))
        out.poll(1)
        seen = out.seen
    finally:
        out.close()
        errs = [a.stop() for a in apps]
    assert exact(seen, want) == {}, "wrong counts %s\nstates %s\n%s" % (
        exact(seen, want), [a.states() for a in apps], ktest.tail(errs[-1]))
