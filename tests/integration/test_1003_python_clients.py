"""Debian's Python clients: confluent-kafka 1.7.0 (on librdkafka 2.0.2) and kafka-python 2.0.2.

Both produce records and read them back with manually assigned partitions;
each record must come back at the partition and offset its acknowledgement
gave. kafka-python runs with no api_version, as its users run it: it probes
the broker with ApiVersions v0 and a pipelined Metadata v0 and infers a broker
version from the ranges, then uses fixed request versions (COMPAT §0.4). A
logging proxy on the bootstrap connection checks that the probe happened.
"""

import os
import sys
import time
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import ktest  # noqa: E402
import kwire  # noqa: E402

N = 5000


def value(i):
    return ("v-%d-" % i).encode() + bytes((i * 7 + j) % 251 for j in range(60))


def test_confluent_kafka_produce_then_assign_consume(broker, topic_name):
    from confluent_kafka import OFFSET_BEGINNING, Consumer, Producer, TopicPartition

    parts = 2
    ktest.create_topic(broker.bootstrap, topic_name, partitions=parts)
    acks, errors = {}, []

    def on_delivery(err, msg):
        i = int(msg.key()[2:])
        if err is not None:
            errors.append("record %d: %s" % (i, err))
        else:
            acks[i] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": broker.bootstrap, "client.id": "skiff-test-confluent",
                  "acks": "all", "linger.ms": 5, "message.timeout.ms": 60000})
    deadline = time.time() + 60
    for i in range(N):
        while True:
            try:
                p.produce(topic_name, key=b"k-%d" % i, value=value(i), partition=i % parts,
                          headers=[("idx", str(i).encode())], on_delivery=on_delivery)
                break
            except BufferError:
                assert time.time() < deadline, "producer queue stayed full"
                p.poll(0.05)
        p.poll(0)
    left = p.flush(60)
    assert left == 0, "%d records not delivered after 60s; errors: %s" % (left, errors[:5])
    assert not errors and len(acks) == N, "errors: %s; %d acks of %d" % (errors[:5], len(acks), N)

    c = Consumer({"bootstrap.servers": broker.bootstrap, "client.id": "skiff-test-confluent",
                  "group.id": "skiff-test-" + uuid.uuid4().hex[:8], "enable.auto.commit": False,
                  "enable.partition.eof": False, "fetch.wait.max.ms": 100})
    try:
        c.assign([TopicPartition(topic_name, q, OFFSET_BEGINNING) for q in range(parts)])
        seen, bad = {}, []
        deadline = time.time() + 60
        while len(seen) < N and time.time() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    bad.append("consumer error: %s" % m.error())
                    continue
                i = int(m.key()[2:])
                where = (m.partition(), m.offset())
                if i in seen:
                    bad.append("record %d read twice, at %s and %s" % (i, seen[i], where))
                elif acks.get(i) != where:
                    bad.append("record %d read at %s, acknowledged at %s" % (i, where, acks.get(i)))
                elif m.value() != value(i) or dict(m.headers() or []).get("idx") != str(i).encode():
                    bad.append("record %d at %s: wrong value or header" % (i, where))
                seen[i] = where
    finally:
        c.close()
    assert not bad, "\n".join(bad[:20])
    assert len(seen) == N, "read %d of %d records in 60s" % (len(seen), N)


def test_kafka_python_probe_admin_produce_assign_consume(broker, topic_name):
    from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer, TopicPartition
    from kafka.admin import NewTopic

    proxy = kwire.LoggingProxy(broker.bootstrap)
    parts = 2
    try:
        # No api_version anywhere: kafka-python must probe and infer it.
        admin = KafkaAdminClient(bootstrap_servers=proxy.address, client_id="skiff-test-kp-admin",
                                 request_timeout_ms=15000)
        try:
            admin.create_topics([NewTopic(topic_name, parts, 1)], timeout_ms=15000)
        finally:
            admin.close()
        prod = KafkaProducer(bootstrap_servers=proxy.address, client_id="skiff-test-kp-producer",
                             acks="all", linger_ms=5, request_timeout_ms=15000, max_block_ms=30000,
                             retries=5)
        inferred = prod.config["api_version"]
        try:
            futs = [prod.send(topic_name, key=b"k-%d" % i, value=value(i), partition=i % parts,
                              headers=[("idx", str(i).encode())]) for i in range(N)]
            prod.flush(timeout=60)
            acks = {}
            for i, f in enumerate(futs):
                md = f.get(timeout=30)
                acks[i] = (md.partition, md.offset)
        finally:
            prod.close(timeout=10)

        cons = KafkaConsumer(bootstrap_servers=proxy.address, client_id="skiff-test-kp-consumer",
                             group_id=None, enable_auto_commit=False, request_timeout_ms=15000,
                             fetch_max_wait_ms=100)
        seen, bad = {}, []
        try:
            tps = [TopicPartition(topic_name, q) for q in range(parts)]
            cons.assign(tps)
            cons.seek_to_beginning(*tps)
            deadline = time.time() + 60
            while len(seen) < N and time.time() < deadline:
                for tp, msgs in cons.poll(timeout_ms=500, max_records=2000).items():
                    for m in msgs:
                        i = int(m.key[2:])
                        where = (m.partition, m.offset)
                        if i in seen:
                            bad.append("record %d read twice, at %s and %s" % (i, seen[i], where))
                        elif acks.get(i) != where:
                            bad.append("record %d read at %s, acknowledged at %s" % (i, where, acks.get(i)))
                        elif m.value != value(i) or dict(m.headers).get("idx") != str(i).encode():
                            bad.append("record %d at %s: wrong value or header" % (i, where))
                        seen[i] = where
        finally:
            cons.close()
    finally:
        proxy.close()
    reqs = proxy.requests
    first = [(r["api"], r["version"]) for r in reqs if r["conn"] == 1][:2]
    assert first == [("ApiVersions", 0), ("Metadata", 0)], \
        "kafka-python's probe was %s, expected ApiVersions v0 then Metadata v0" % first
    assert inferred >= (0, 11), "kafka-python inferred broker version %s from the ApiVersions ranges" % (
        inferred,)
    assert not bad, "\n".join(bad[:20])
    assert len(seen) == N, "read %d of %d records in 60s (kafka-python inferred %s)" % (
        len(seen), N, inferred)


def test_kafka_python_auto_creates_topic_on_produce(broker, topic_name):
    """kafka-python (and its test suite) creates topics by producing to them (Metadata auto-create)."""
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition

    prod = KafkaProducer(bootstrap_servers=broker.bootstrap, client_id="skiff-test-kp-auto",
                         acks="all", request_timeout_ms=15000, max_block_ms=30000)
    try:
        md = prod.send(topic_name, key=b"k-0", value=value(0)).get(timeout=30)
        md1 = prod.send(topic_name, key=b"k-1", value=value(1), partition=md.partition).get(timeout=30)
    finally:
        prod.close(timeout=10)
    assert md1.offset == md.offset + 1 and md.offset == 0, (md, md1)
    cons = KafkaConsumer(bootstrap_servers=broker.bootstrap, client_id="skiff-test-kp-auto",
                         group_id=None, enable_auto_commit=False, request_timeout_ms=15000)
    got = []
    try:
        tp = TopicPartition(topic_name, md.partition)
        cons.assign([tp])
        cons.seek_to_beginning(tp)
        deadline = time.time() + 30
        while len(got) < 2 and time.time() < deadline:
            for msgs in cons.poll(timeout_ms=500).values():
                got += [(m.offset, m.key, m.value) for m in msgs]
    finally:
        cons.close()
    assert got == [(0, b"k-0", value(0)), (1, b"k-1", value(1))], got
