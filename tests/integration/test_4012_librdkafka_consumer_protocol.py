"""librdkafka (confluent-kafka 2.16.1 of tests/.venv, librdkafka 2.16.0) consumers with
group.protocol=consumer (KIP-848), through clients/rdk_consumer_protocol.py.

Two members share a 4-partition topic of 2000 records and commit after each batch: m1
alone, then with m2 (who must get partitions), then alone again once m2 has left. Every record is read, at the offset it was written, by the member
that owned its partition then; the group's committed offsets end at the end offsets,
and ConsumerGroupDescribe shows the group Empty with the uniform assignor. The same
assertions hold against Kafka 4.3.1.
"""

import json
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
import ktest  # noqa: E402
from test_4010_consumer_group_raw import describe  # noqa: E402

SCRIPT = os.path.join(os.path.dirname(__file__), "clients", "rdk_consumer_protocol.py")


@pytest.fixture
def cbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory({"group.initial.rebalance.delay.ms": "0",
                           "group.consumer.heartbeat.interval.ms": "500"})


def test_librdkafka_members_share_and_leave(cbroker, topic_name):
    python = os.path.join(ktest.VENV, "bin", "python")
    assert os.access(python, os.X_OK), "%s missing: run tools/install-deps.sh test" % python
    bs, parts, n = cbroker.bootstrap, 4, 2000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    written = {}
    for p in range(parts):
        for first in range(0, n // parts, 250):
            recs = [kproto.Record(key=b"k-%d" % (p * 100000 + first + j), value=b"v")
                    for j in range(250)]
            r = kproto.produce(c, topic_name, p, kproto.batch(records=recs))
            assert r["ErrorCode"] == 0, r
            for j in range(250):
                written[p * 100000 + first + j] = (p, r["BaseOffset"] + j)
    group = "g4012-" + uuid.uuid4().hex[:8]
    proc = ktest.run([python, SCRIPT, bs, topic_name, group, str(n)], timeout=120, check=False,
                     what="rdk_consumer_protocol", env={"PYTHONPATH": ""})
    lines = proc.stdout.decode(errors="replace").splitlines()
    summary = [json.loads(x) for x in lines if x.startswith("{")]
    diag = "exit %d\n%s\n%s" % (proc.returncode, summary, ktest.tail(proc.stderr))
    assert proc.returncode == 0 and summary, diag
    s = summary[-1]
    assert s["librdkafka"].startswith("2.16"), diag
    assert not [e for e in s["errors"] if "commit" in e or "m2 read nothing" in e], diag
    read = {}
    members = set()
    for ln in lines:
        f = ln.split()
        if f and f[0] == "REC":
            members.add(f[1])
            read.setdefault(int(f[4]), []).append((int(f[2]), int(f[3])))
    missing = set(written) - set(read)
    assert not missing, "%d records never read, e.g. %s\n%s" % (
        len(missing), sorted(missing)[:5], diag)
    wrong = {k: (v, written[k]) for k, v in read.items() if any(x != written[k] for x in v)}
    assert not wrong, "records read at other offsets: %s" % list(wrong.items())[:5]
    twice = {k: v for k, v in read.items() if len(v) > 1}
    assert not twice, "%d records read twice, e.g. %s\n%s" % (
        len(twice), list(twice.items())[:5], diag)
    assert members == {"m1", "m2"}, diag
    top, offs = kg.fetch_offsets(c, group, None)
    ends = {p: kproto.list_offsets(c, topic_name, p, -1)["Offset"] for p in range(parts)}
    assert {p: offs[(topic_name, p)][0] for p in range(parts)} == ends, offs
    d = describe(c, group)
    assert (d["ErrorCode"], d["GroupState"], d["AssignorName"]) == (0, "Empty", "uniform"), d
