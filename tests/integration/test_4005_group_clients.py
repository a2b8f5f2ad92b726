"""Consumer groups with the C and Python clients: kcat -G (librdkafka 2.0.2's balanced
consumer), confluent-kafka 1.7.0 and kafka-python 2.0.2 (JoinGroup v2, SyncGroup and
Heartbeat v1, OffsetCommit v2, OffsetFetch v1, fixed: COMPAT §0.4).

Each test fills a topic, consumes it with a group, and checks that every record was
read once and that the group's committed offsets (read back with a raw OffsetFetch)
are the partitions' end offsets; a second run of the group then reads only what was
written after.
"""

import os
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
import ktest  # noqa: E402

FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def gbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def fill(bs, topic, parts, n, start=0):
    """Writes records "r-<i>" (key "k-<i>"), i = start..start+n-1, round robin; returns
    the end offset of each partition."""
    c = kg.connect(bs)
    by_part = {}
    for i in range(start, start + n):
        by_part.setdefault(i % parts, []).append(i)
    for p, idx in by_part.items():
        for k in range(0, len(idx), 500):
            chunk = idx[k:k + 500]
            recs = [kproto.Record(key=b"k-%d" % i, value=b"r-%d" % i) for i in chunk]
            r = kproto.produce(c, topic, p, kproto.batch(records=recs))
            assert r["ErrorCode"] == 0, r
    ends = {p: kproto.list_offsets(c, topic, p, -1)["Offset"] for p in range(parts)}
    c.close()
    return ends


def committed(bs, group, topic, parts):
    c = kg.connect(bs)
    kg.find_coordinator(c, group)
    top, offs = kg.fetch_offsets(c, group, {topic: list(range(parts))})
    c.close()
    assert top == 0
    return {p: offs[(topic, p)][0] for p in range(parts)}


def wait_committed(bs, group, topic, parts, want, timeout=30):
    deadline = time.time() + timeout
    while True:
        got = committed(bs, group, topic, parts)
        if got == want or time.time() > deadline:
            return got
        time.sleep(0.2)


def test_kcat_balanced_consumer(gbroker, topic_name):
    kcat = ktest.which("kcat")
    bs, parts, n = gbroker.bootstrap, 4, 2000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    ends = fill(bs, topic_name, parts, n)
    group = "g4005-kcat-" + uuid.uuid4().hex[:6]

    def consume(count):
        # -G: balanced consumer (JoinGroup/SyncGroup/Heartbeat/OffsetCommit), -c: stop
        # after count messages (offsets are committed on close). No -o: with -G it would
        # override the committed offsets.
        p = ktest.run([kcat, "-b", bs, "-G", group, "-c", str(count), "-q", "-f", "%k %s\\n",
                       "-X", "session.timeout.ms=6000",
                       "-X", "auto.commit.interval.ms=200", "-X", "fetch.wait.max.ms=100",
                       "-X", "topic.auto.offset.reset=earliest", topic_name],
                      timeout=90, what="kcat -G")
        return [ln for ln in p.stdout.decode(errors="replace").splitlines() if ln]

    lines = consume(n)
    got = sorted(int(ln.split()[0][2:]) for ln in lines)
    assert got == list(range(n)), "kcat -G read %d records, %d distinct" % (len(got), len(set(got)))
    assert wait_committed(bs, group, topic_name, parts, ends) == ends
    ends2 = fill(bs, topic_name, parts, 100, start=n)
    lines = consume(100)
    got = sorted(int(ln.split()[0][2:]) for ln in lines)
    assert got == list(range(n, n + 100)), "the second run did not resume at the committed offsets"
    assert wait_committed(bs, group, topic_name, parts, ends2) == ends2
    d = kg.describe_groups(c, [group])["Groups"][0]
    assert d["GroupState"] == "Empty" and d["Members"] == [], d


def test_confluent_kafka_group_of_two(gbroker, topic_name):
    from confluent_kafka import Consumer

    bs, parts, n = gbroker.bootstrap, 4, 4000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    ends = fill(bs, topic_name, parts, n)
    group = "g4005-ck-" + uuid.uuid4().hex[:6]
    conf = {"bootstrap.servers": bs, "group.id": group, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "fetch.wait.max.ms": 100,
            "enable.partition.eof": False}
    consumers = [Consumer(dict(conf, **{"client.id": "ck-%d" % i})) for i in range(2)]
    seen, dup, per = {}, [], [0, 0]
    try:
        for k in consumers:
            k.subscribe([topic_name])
        deadline = time.time() + 60
        while len(seen) < n and time.time() < deadline:
            for i, k in enumerate(consumers):
                msgs = k.consume(num_messages=500, timeout=0.2)
                for m in msgs:
                    assert m.error() is None, m.error()
                    key = int(m.key()[2:])
                    if key in seen:
                        dup.append(key)
                    seen[key] = (m.partition(), m.offset())
                    per[i] += 1
                if msgs:
                    k.commit(asynchronous=False)
        assignments = [sorted(tp.partition for tp in k.assignment()) for k in consumers]
    finally:
        for k in consumers:
            k.close()
    assert len(seen) == n and not dup, "read %d of %d, %d twice" % (len(seen), n, len(dup))
    assert sorted(assignments[0] + assignments[1]) == list(range(parts)), assignments
    assert per[0] > 0 and per[1] > 0, "one member of two read everything: %s" % per
    assert committed(bs, group, topic_name, parts) == ends


def test_kafka_python_group_consumer(gbroker, topic_name):
    from kafka import KafkaConsumer

    bs, parts, n = gbroker.bootstrap, 4, 3000
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    ends = fill(bs, topic_name, parts, n)
    group = "g4005-kp-" + uuid.uuid4().hex[:6]

    def run(expect):
        # No api_version: kafka-python 2.0.2 probes the broker and then uses fixed versions.
        cons = KafkaConsumer(topic_name, bootstrap_servers=bs, group_id=group,
                             client_id="kp-group", auto_offset_reset="earliest",
                             enable_auto_commit=False, session_timeout_ms=10000,
                             heartbeat_interval_ms=1000, request_timeout_ms=30000,
                             fetch_max_wait_ms=100)
        got = []
        try:
            deadline = time.time() + 60
            while len(got) < expect and time.time() < deadline:
                batch = cons.poll(timeout_ms=500, max_records=1000)
                for msgs in batch.values():
                    got += [int(m.key[2:]) for m in msgs]
                if batch:
                    cons.commit()
            assignment = sorted(tp.partition for tp in cons.assignment())
        finally:
            cons.close()
        return got, assignment

    got, assignment = run(n)
    assert sorted(got) == list(range(n)), "read %d records, %d distinct" % (len(got), len(set(got)))
    assert assignment == list(range(parts))
    assert committed(bs, group, topic_name, parts) == ends
    fill(bs, topic_name, parts, 50, start=n)
    got, _ = run(50)
    assert sorted(got) == list(range(n, n + 50)), "the second run did not resume at the committed offsets"


def test_java_console_consumer_with_group(gbroker, topic_name):
    """kafka-console-consumer.sh --group: it commits as it goes, and a second run resumes."""
    import jtools

    bs, parts, n = gbroker.bootstrap, 3, 300
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    ends = fill(bs, topic_name, parts, n)
    group = "g4005-console-" + uuid.uuid4().hex[:6]
    cc = ["console-consumer", "--bootstrap-server", bs, "--topic", topic_name, "--group", group,
          "--timeout-ms", "20000", "--property", "print.key=true",
          "--consumer-property", "session.timeout.ms=6000"]
    (r,) = jtools.tools(cc + ["--from-beginning", "--max-messages", str(n)])
    keys = sorted(int(ln.split()[0][2:]) for ln in r["out"].splitlines() if ln.startswith("k-"))
    assert keys == list(range(n)), jtools.show(r)
    assert wait_committed(bs, group, topic_name, parts, ends) == ends
    fill(bs, topic_name, parts, 30, start=n)
    (r,) = jtools.tools(cc + ["--max-messages", "30"])
    keys = sorted(int(ln.split()[0][2:]) for ln in r["out"].splitlines() if ln.startswith("k-"))
    assert keys == list(range(n, n + 30)), jtools.show(r)


