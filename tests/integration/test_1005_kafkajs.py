"""kafkajs 2.2.4 (npm): Admin, producer and, when the broker has groups, the group consumer.

kafkajs never uses flexible versions and takes min(its max, broker max)
without looking at the broker's minimum (COMPAT §0.5). Its consumer works
only in a consumer group, so what its producer wrote is read back by
assignment with confluent-kafka; the kafkajs group consumer test runs only
when the broker advertises the classic group APIs (skipped otherwise).

kafkajs is installed by this test with npm into ~/.cache/skiff/node (once);
the test is skipped if node/npm are missing or the install fails.
"""

import json
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import ktest  # noqa: E402
import kwire  # noqa: E402

SCRIPT = os.path.join(ktest.HERE, "kafkajs_client.js")
GROUP_APIS = {8: "OffsetCommit", 9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup",
              12: "Heartbeat", 13: "LeaveGroup", 14: "SyncGroup"}


def value(i):
    return ("v-%d-" % i).encode() + bytes((i * 7 + j) % 251 for j in range(60))


@pytest.fixture(scope="module")
def kafkajs():
    try:
        node_modules = ktest.install_kafkajs()
    except RuntimeError as e:
        pytest.skip(str(e))
    env = {"NODE_PATH": node_modules, "KAFKAJS_NO_PARTITIONER_WARNING": "1",
           "SKIFF_TEST_TIMEOUT_MS": "90000"}

    def run(*args):
        p = ktest.run(["node", SCRIPT] + [str(a) for a in args], timeout=120, env=env, check=False,
                      what="kafkajs " + args[0])
        lines = p.stdout.decode(errors="replace").splitlines()
        res = [json.loads(line) for line in lines if line.startswith("{")]
        diag = "exit %d\n%s\n--- stderr ---\n%s" % (p.returncode, "\n".join(
            line for line in lines if line.startswith("{")), ktest.tail(p.stderr))
        assert p.returncode == 0 and res and "error" not in res[-1], "kafkajs %s failed: %s" % (
            args[0], diag)
        return lines, res, diag

    return run


def _acks(lines):
    acks = {}
    for line in lines:
        if line.startswith("ACK "):
            i, p, off = map(int, line.split()[1:])
            acks[i] = (p, off)
    return acks


def test_kafkajs_admin_and_producer(broker, topic_name, kafkajs):
    n, parts = 4000, 2
    lines, res, diag = kafkajs("admin-produce", broker.bootstrap, topic_name, n, parts)
    admin = next(r for r in res if r["op"] == "admin")
    assert admin["created"] is True and admin["listed"] is True, diag
    assert sorted(p["partition"] for p in admin["partitions"]) == list(range(parts)), diag
    for p in admin["partitions"]:
        assert p["error"] == 0 and p["leader"] >= 0 and p["replicas"] == [p["leader"]], diag

    acks = _acks(lines)
    assert len(acks) == n, diag
    produce = next(r for r in res if r["op"] == "produce")
    per_part = {p: sum(1 for (q, _) in acks.values() if q == p) for p in range(parts)}
    assert {o["partition"]: (int(o["low"]), int(o["high"])) for o in produce["offsets"]} == {
        p: (0, c) for p, c in per_part.items()}, diag

    seen, problems = ktest.read_assigned(broker.bootstrap, topic_name, parts, n)
    for i, (p, off) in sorted(acks.items()):
        if i not in seen:
            continue
        got = seen[i]
        if got[:2] != (p, off):
            problems.append("record %d read at %s, acknowledged at %s" % (i, got[:2], (p, off)))
        elif got[2] != value(i) or got[3].get("idx") != str(i).encode():
            problems.append("record %d: wrong value or header" % i)
    assert not problems, "\n".join(problems[:20])

    lines, res, diag = kafkajs("delete", broker.bootstrap, topic_name)
    assert res[-1]["listed"] is False, diag


def test_kafkajs_group_consumer(broker, topic_name, kafkajs):
    versions = kwire.api_versions(broker.bootstrap)
    missing = [name for key, name in GROUP_APIS.items() if key not in versions]
    if missing:
        pytest.skip("the broker does not advertise the consumer group APIs %s" % ", ".join(missing))
    n, parts = 2000, 2
    lines, res, diag = kafkajs("admin-produce", broker.bootstrap, topic_name, n, parts)
    acks = _acks(lines)
    lines, res, diag = kafkajs("group-consume", broker.bootstrap, topic_name, n,
                               "skiff-test-" + uuid.uuid4().hex[:8])
    assert res[-1]["received"] == n and res[-1]["bad"] == 0, diag
    wrong = []
    for line in lines:
        if line.startswith("REC "):
            i, p, off = map(int, line.split()[1:])
            if acks.get(i) != (p, off):
                wrong.append("record %d read at %s, acknowledged at %s" % (i, (p, off), acks.get(i)))
    assert not wrong, "\n".join(wrong[:20])
