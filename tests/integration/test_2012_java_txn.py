"""The Java transactional producer (kafka-clients 4.x, tests/java Txn): commit and abort
seen by read_committed and read_uncommitted consumers, consume-transform-produce with
sendOffsetsToTransaction, a zombie producer fenced, a transaction aborted at its timeout,
and SIGKILL of the node with a transaction open (docs/transactions.md)."""

import os
import signal
import subprocess
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto as k  # noqa: E402
import ktest  # noqa: E402


@pytest.fixture(scope="module")
def java():
    """Runs an io.skiff.clients program: (exit code, stdout lines, stderr)."""
    return ktest.java_runner(90)


summary = ktest.json_summary


def tid():
    return "t2012-" + uuid.uuid4().hex[:8]


def values(prefix, n):
    return ["%s-%d" % (prefix, i) for i in range(n)]


def make_topic(bootstrap, topic, parts=1):
    with k.Conn(bootstrap) as c:
        k.create_topic(c, topic, parts)
        k.wait_topic(c, topic, parts)


def test_commit_and_abort(broker, topic_name, java):
    make_topic(broker.bootstrap, topic_name, 2)
    s = summary(*java("Txn", ["-m", "commit-abort", "-b", broker.bootstrap, "-t", topic_name,
                              "-x", tid(), "-n", "10"]))
    want = values("c1", 10) + values("c2", 10)
    assert sorted(s["committed"]) == sorted(want), s
    assert sorted(s["uncommitted"]) == sorted(want + values("a", 10)), s


def test_consume_transform_produce(broker, topic_name, java):
    src, dst, group = topic_name + "-in", topic_name + "-out", "g2012-" + uuid.uuid4().hex[:8]
    make_topic(broker.bootstrap, src, 2)
    make_topic(broker.bootstrap, dst, 1)
    rc, out, err = java("Produce", ["-b", broker.bootstrap, "-t", src, "-n", "60", "-P", "2"])
    assert rc == 0, ktest.tail(err)
    s = summary(*java("Txn", ["-m", "ctp", "-b", broker.bootstrap, "-i", src, "-o", dst,
                              "-g", group, "-x", tid(), "-n", "60"]))
    assert s["processed"] == 60 and s["transactions"] >= 1, s
    with k.Conn(broker.bootstrap) as c:
        kg.find_coordinator(c, group)
        _, offs = kg.fetch_offsets(c, group, {src: [0, 1]})
        assert offs[(src, 0)][0] + offs[(src, 1)][0] == 60, offs
        p, batches = None, []
        deadline = time.time() + 15
        while time.time() < deadline:
            _, p = k.fetch(c, dst, 0, 0, isolation=1)
            batches = k.parse_batches(p["Records"])
            data = [r.value for b in batches if not b.is_control for r in b.records]
            if len(data) == 60:
                break
            time.sleep(0.2)
        assert len(data) == 60 and all(v == v.upper() for v in data), p


def test_zombie_fenced(broker, topic_name, java):
    make_topic(broker.bootstrap, topic_name)
    s = summary(*java("Txn", ["-m", "zombie", "-b", broker.bootstrap, "-t", topic_name,
                              "-x", tid()]))
    assert s["zombie_error"] in ("ProducerFencedException", "InvalidProducerEpochException"), s
    assert s["committed"] == values("z2", 3), s


def test_open_transaction_aborted_at_timeout(broker, topic_name, java):
    make_topic(broker.bootstrap, topic_name)
    # Kafka looks for expired transactions every 10 s, Skiff every second.
    wait = "12000" if harness.external() else "3000"
    s = summary(*java("Txn", ["-m", "timeout", "-b", broker.bootstrap, "-t", topic_name,
                              "-x", tid(), "-T", "2000", "-wait", wait]))
    assert s["commit_error"] != "none", s
    assert s["committed"] == [], s
    assert s["uncommitted"] == values("late", 3), s


@pytest.mark.restarts
def test_sigkill_with_open_transaction(broker_factory, topic_name, java):
    b = broker_factory()
    make_topic(b.bootstrap, topic_name)
    txn = tid()
    p = subprocess.Popen(["java", "-XX:TieredStopAtLevel=1",
                          "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", java.classpath,
                          "io.skiff.clients.Txn", "-m", "open", "-b", b.bootstrap,
                          "-t", topic_name, "-x", txn, "-n", "5"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = p.stdout.readline().decode()
        assert line.strip() == "OPEN", line
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    b.kill()   # SIGKILL with the transaction open
    b.start()
    # The coordinator remembers the open transaction: a new producer with the same id
    # aborts it, then commits its own; read_committed sees only that.
    s = summary(*java("Txn", ["-m", "commit-abort", "-b", b.bootstrap, "-t", topic_name,
                              "-x", txn, "-n", "2"]))
    assert sorted(s["committed"]) == sorted(values("c1", 2) + values("c2", 2)), s
    assert sorted(s["uncommitted"]) == sorted(values("o", 5) + values("c1", 2) +
                                              values("a", 2) + values("c2", 2)), s
