"""The newest client releases from the registries, beside Debian's (test_1003, test_1005).

Users bring newer clients than Debian packages. Each runs here as its users run it,
with the same assertions against skiffd and against Apache Kafka
(SKIFF_TEST_AGAINST=kafka):

- confluent-kafka from PyPI (its wheel bundles librdkafka 2.1x), kafka-python 2.3 and
  kafka-python 3.x, pinned in tools/install-deps.sh (tests/.venv): an admin client
  creates a topic with a config and describes the topic and its configs; an idempotent
  producer (acks=all, zstd or gzip) writes records; a classic group consumer reads half
  of them, commits exactly what it read and leaves; a second one in the same group
  resumes at the committed offsets and reads the rest; the admin client then lists the
  groups and describes the group.
- @platformatic/kafka, the newest on npm (ktest.PLATFORMATIC_VERSION), on the Node.js 24
  of tests/.venv (it needs Node >= 22, the system's is older): it fetches with
  Fetch v13+ (topics by id) when the broker offers it, and failed against Skiff before
  topic-id versions were served. Admin create and list, an idempotent gzip producer, and
  two group consumers in turn, resuming at the committed offsets.

Every record must come back once, at the partition and offset it was acknowledged at,
in order within its partition, with its value and header. kafkajs: 2.2.4 is still the
newest on npm, and test_1005 runs it.
"""

import json
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import ktest  # noqa: E402

PY_SCRIPT = os.path.join(ktest.HERE, "py_newest_client.py")
JS_SCRIPT = os.path.join(ktest.HERE, "platformatic_client.mjs")
RETENTION_MS = "123456789"  # py_newest_client.RETENTION_MS
# Each consumer joins an empty group: no wait for more members, as kafka-ref.sh sets for Kafka.
FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def broker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def _py_clients():
    venv_pins, target_pins = ktest.pypi_pins()
    clients = [pytest.param("confluent", "confluent-kafka %s" % venv_pins.get("confluent-kafka"),
                            None, id="confluent-kafka-" + str(venv_pins.get("confluent-kafka"))),
               pytest.param("kafka-python", "kafka-python %s" % venv_pins.get("kafka-python"),
                            None, id="kafka-python-" + str(venv_pins.get("kafka-python")))]
    for name, version in sorted(target_pins.items()):
        if name == "kafka-python":
            clients.append(pytest.param(
                "kafka-python", "kafka-python %s" % version,
                os.path.join(ktest.VENV, "targets", "%s-%s" % (name, version)),
                id="kafka-python-" + version))
    return clients


def _run(cmd, env, what):
    p = ktest.run(cmd, timeout=90, env=env, check=False, what=what)
    lines = p.stdout.decode(errors="replace").splitlines()
    res = [json.loads(line) for line in lines if line.startswith("{")]
    diag = "%s: exit %d after %.1fs\n%s\n--- stderr ---\n%s" % (
        what, p.returncode, p.seconds, "\n".join(line for line in lines if line.startswith("{")),
        ktest.tail(p.stderr))
    assert p.returncode == 0 and res and "error" not in res[-1], "%s failed: %s" % (what, diag)
    return lines, res[-1], diag


def _records(lines, tag):
    """{i: (partition, offset)} from "ACK/REC i p off" lines, and the problems seen."""
    got, order, problems = {}, [], []
    for line in lines:
        if line.startswith(tag + " "):
            f = line.split()
            i, p, off = int(f[1]), int(f[2]), int(f[3])
            if len(f) > 4:
                problems.append("record %d at %d@%d: wrong value or header" % (i, p, off))
            if i in got:
                problems.append("record %d twice: at %s and %s" % (i, got[i], (p, off)))
            got[i] = (p, off)
            order.append((p, off))
    last = {}
    for p, off in order:
        if off <= last.get(p, -1):
            problems.append("partition %d: offset %d after %d" % (p, off, last[p]))
        last[p] = off
    return got, problems


def _check_read(read, acks, problems, what):
    assert not problems, "%s: %s" % (what, problems[:10])
    wrong = {i: (w, acks.get(i)) for i, w in read.items() if acks.get(i) != w}
    assert not wrong, "%s: records read elsewhere than acknowledged (read, acked): %s" % (
        what, dict(list(wrong.items())[:10]))


@pytest.mark.parametrize("client,label,pythonpath", _py_clients())
def test_newest_python_client(broker, topic_name, client, label, pythonpath):
    python = os.path.join(ktest.VENV, "bin", "python")
    assert os.access(python, os.X_OK), "%s missing: run tools/install-deps.sh test" % python
    if pythonpath is not None:
        assert os.path.isdir(pythonpath), "%s missing: run tools/install-deps.sh test" % pythonpath
    env = {"PYTHONPATH": pythonpath or ""}
    n, parts = 1000, 2
    group = "skiff-test-newest-" + uuid.uuid4().hex[:8]

    def run(op, *args):
        return _run([python, PY_SCRIPT, client, op, broker.bootstrap, topic_name] + [
            str(a) for a in args], env, "%s %s" % (label, op))

    _, admin, diag = run("admin", parts)
    assert admin["client"].startswith(label), "%s is not the pinned %s: %s" % (
        admin["client"], label, diag)
    assert admin["name"] == topic_name and admin["partitions"] == list(range(parts)), diag
    assert all(leader >= 0 for leader in admin["leaders"]), diag
    assert admin["retention_ms"] == RETENTION_MS and admin["cleanup_policy"] == "delete", diag
    if "topic_id" in admin:
        assert admin["topic_id"] not in ("", "AAAAAAAAAAAAAAAAAAAAAA"), diag

    lines, produce, diag = run("produce", n, parts)
    assert produce["left"] == 0 and not produce["errors"] and produce["acked"] == n, diag
    acks, problems = _records(lines, "ACK")
    assert not problems and len(acks) == n, diag
    for q in range(parts):
        mine = sorted(i for i, (p, _) in acks.items() if p == q)
        assert [acks[i][1] for i in mine] == list(range(len(mine))), (
            "partition %d: acknowledged offsets are not 0..n-1 in send order: %s" % (q, diag))

    first_n = n // 2
    lines, first, diag = run("consume", group, first_n)
    assert first["read"] == first_n and not first["errors"], diag
    read1, problems = _records(lines, "REC")
    _check_read(read1, acks, problems, "first consumer")
    resume = {str(q): max([off for p, off in read1.values() if p == q], default=-1) + 1
              for q in range(parts)}
    assert {q: o for q, o in first["committed"].items()} == {
        q: o for q, o in resume.items() if o > 0}, "committed offsets: %s" % diag

    lines, second, diag = run("consume", group, n - first_n)
    assert second["read"] == n - first_n and not second["errors"], diag
    read2, problems = _records(lines, "REC")
    _check_read(read2, acks, problems, "second consumer")
    again = sorted(set(read1) & set(read2))
    assert not again, "the second consumer read again what the first committed: %s" % again[:10]
    for i, (p, off) in read2.items():
        assert off >= resume[str(p)], "record %d at %d@%d, before the committed %s" % (
            i, p, off, resume)
    assert set(read1) | set(read2) == set(range(n))

    _, groups, diag = run("groups", group)
    assert group in groups["listed"] and not groups["errors"], diag
    assert groups["group"] == group and groups["state"].lower() == "empty", diag
    assert groups["protocol_type"] in (None, "consumer"), diag


@pytest.fixture(scope="module")
def platformatic():
    try:
        node_modules = ktest.install_npm("@platformatic/kafka", ktest.PLATFORMATIC_VERSION)
        node = ktest.venv_node()
    except RuntimeError as e:
        raise AssertionError("%s (tools/install-deps.sh test installs node, npm and the venv)" % e)
    env = {"SKIFF_NODE_MODULES": node_modules, "SKIFF_TEST_TIMEOUT_MS": "40000"}
    return lambda *args: _run([node, JS_SCRIPT] + [str(a) for a in args], env,
                              "@platformatic/kafka %s %s" % (ktest.PLATFORMATIC_VERSION, args[0]))


def test_platformatic_kafka(broker, topic_name, platformatic):
    n, parts = 600, 2
    group = "skiff-test-platformatic-" + uuid.uuid4().hex[:8]
    lines, res, diag = platformatic("admin-produce", broker.bootstrap, topic_name, n, parts)
    admin = next(json.loads(line) for line in lines if '"op":"admin"' in line)
    assert [(t["name"], t["partitions"]) for t in admin["created"]] == [(topic_name, parts)], diag
    assert admin["listed"] is True, diag
    produce = next(json.loads(line) for line in lines if '"op":"produce"' in line)
    assert produce["count"] == n, diag
    assert res["op"] == "apis" and "0" in res["versions"], diag  # Produce: v11 is its newest
    # One producer, each batch acknowledged before the next: record i lands at
    # partition i % parts, offset i // parts.
    acks = {i: (i % parts, i // parts) for i in range(n)}

    first_n = n // 2
    lines, first, diag = platformatic("group-consume", broker.bootstrap, topic_name, group, first_n)
    consume = next(json.loads(line) for line in lines if '"op":"consume"' in line)
    assert consume["read"] == first_n and consume["badValues"] == 0, diag
    # Kafka 4.3 and Skiff serve Fetch up to v17 (its newest): topics named by their ids.
    print("@platformatic/kafka request versions: %s, %s" % (res["versions"], first["versions"]))
    assert first["op"] == "apis" and min(first["versions"]["1"]) >= 13, diag
    read1, problems = _records(lines, "REC")
    _check_read(read1, acks, problems, "first consumer")

    lines, second, diag = platformatic("group-consume", broker.bootstrap, topic_name, group,
                                       n - first_n)
    consume = next(json.loads(line) for line in lines if '"op":"consume"' in line)
    assert consume["read"] == n - first_n and consume["badValues"] == 0, diag
    read2, problems = _records(lines, "REC")
    _check_read(read2, acks, problems, "second consumer")
    again = sorted(set(read1) & set(read2))
    assert not again, "the second consumer read again what the first committed: %s" % again[:10]
    assert set(read1) | set(read2) == set(range(n))
