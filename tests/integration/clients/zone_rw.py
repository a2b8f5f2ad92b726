"""Python producers and consumers of the zone routing tests (test_71NN): run inside a
zone. Records and digests are those of tests/java's ZoneClient, so that any client
checks what any other wrote.

    zone_rw.py produce KIND BOOTSTRAP TOPIC PARTS COUNT SIZE ID CLIENT_ID [CONF_JSON]
    zone_rw.py read KIND BOOTSTRAP TOPIC COUNT CLIENT_ID [GROUP] [TIMEOUT_S] [CONF_JSON]

KIND: ck (confluent-kafka, librdkafka) or kp (kafka-python). produce writes record i
to partition partition(i, PARTS) (PARTS "P" or "P/RUN": runs of RUN records per
partition, as Kafka's sticky partitioner makes for unkeyed records), key "ID-i",
value value(ID, i, SIZE); prints "A i partition offset" per acknowledged record,
"E i error" per failed one, then a JSON summary.
read reads TOPIC from the beginning, every partition assigned (or subscribed as a
member of GROUP) until COUNT records arrived; prints "R partition offset digest" per
record, then a JSON summary. CONF_JSON: client properties (librdkafka names for ck,
kafka-python keyword arguments for kp) over the defaults. Exit 0 when everything was
acknowledged / read.
"""

import hashlib
import json
import sys
import time

def value(ident, i, size):
    """Record i of producer `ident`: "ID-i-" and a filler to SIZE bytes, whose byte j is
    'a' + (i + j) % 26."""
    head = ("%s-%d-" % (ident, i)).encode()
    n = max(0, size - len(head))
    k = i % 26
    return head + (ALPHABET * (n // 26 + 2))[k:k + n]


ALPHABET = bytes(range(97, 123))


def partition(i, parts, run=1):
    """Where record i goes: runs of `run` records per partition, round the partitions."""
    return (i // run) % parts


def parts_arg(text):
    """(partitions, run) of a PARTS argument, "P" or "P/RUN"."""
    p, _, r = str(text).partition("/")
    return int(p), int(r or 1)


def key(ident, i):
    return ("%s-%d" % (ident, i)).encode()


def digest(k, v):
    h = hashlib.sha1()
    h.update(k or b"")
    h.update(b"|")
    h.update(v or b"")
    return h.hexdigest()[:16]


def produce_ck(bootstrap, topic, parts, run, count, size, ident, client_id, conf):
    from confluent_kafka import Producer
    c = {"bootstrap.servers": bootstrap, "client.id": client_id, "enable.idempotence": True,
         "acks": "all", "linger.ms": 10, "batch.size": 65536, "message.timeout.ms": 60000}
    c.update(conf)
    p = Producer(c)
    lines, errors = [], []

    def done(err, msg, i):
        if err is not None:
            errors.append("E %d %s" % (i, err))
        else:
            lines.append("A %d %d %d" % (i, msg.partition(), msg.offset()))

    for i in range(count):
        while True:
            try:
                p.produce(topic, value(ident, i, size), key(ident, i),
                          partition=partition(i, parts, run),
                          on_delivery=lambda err, msg, i=i: done(err, msg, i))
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(90)
    return lines, errors, left


def produce_kp(bootstrap, topic, parts, run, count, size, ident, client_id, conf):
    from kafka import KafkaProducer
    kw = {"bootstrap_servers": bootstrap, "client_id": client_id, "acks": "all",
          "linger_ms": 10, "batch_size": 65536, "retries": 0, "request_timeout_ms": 30000,
          "max_block_ms": 30000}
    kw.update(conf)
    p = KafkaProducer(**kw)
    lines, errors, futs = [], [], []
    for i in range(count):
        futs.append((i, p.send(topic, value=value(ident, i, size), key=key(ident, i),
                               partition=partition(i, parts, run))))
    p.flush(90)
    for i, f in futs:
        try:
            md = f.get(timeout=1)
            lines.append("A %d %d %d" % (i, md.partition, md.offset))
        except Exception as e:  # noqa: BLE001 - reported
            errors.append("E %d %r" % (i, e))
    p.close(10)
    return lines, errors, 0


def read_ck(bootstrap, topic, count, client_id, group, timeout, conf):
    from confluent_kafka import Consumer, TopicPartition, OFFSET_BEGINNING
    c = {"bootstrap.servers": bootstrap, "client.id": client_id,
         "group.id": group or "zone-rw-assign-%s" % client_id.split(",")[0],
         "enable.auto.commit": False, "auto.offset.reset": "earliest",
         "session.timeout.ms": 10000, "heartbeat.interval.ms": 1000}
    c.update(conf)
    cons = Consumer(c)
    out = []
    errors = []
    try:
        if group:
            cons.subscribe([topic])
        else:
            md = cons.list_topics(topic, timeout=30)
            parts = sorted(md.topics[topic].partitions)
            cons.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for m in cons.consume(500, 0.5):
                if m.error():
                    errors.append(str(m.error()))
                    continue
                out.append("R %d %d %s" % (m.partition(), m.offset(), digest(m.key(), m.value())))
    finally:
        cons.close()
    return out, errors


def read_kp(bootstrap, topic, count, client_id, group, timeout, conf):
    from kafka import KafkaConsumer, TopicPartition
    kw = {"bootstrap_servers": bootstrap, "client_id": client_id, "group_id": group,
          "enable_auto_commit": False, "auto_offset_reset": "earliest",
          "request_timeout_ms": 30000, "fetch_max_wait_ms": 200,
          "session_timeout_ms": 10000, "heartbeat_interval_ms": 1000}
    kw.update(conf)
    cons = KafkaConsumer(**kw)
    out = []
    try:
        if group:
            cons.subscribe([topic])
        else:
            parts = None
            deadline = time.monotonic() + 30
            while not parts and time.monotonic() < deadline:
                parts = cons.partitions_for_topic(topic)
                if not parts:
                    time.sleep(0.2)
            tps = [TopicPartition(topic, p) for p in sorted(parts or [])]
            cons.assign(tps)
            cons.seek_to_beginning(*tps)
        deadline = time.monotonic() + timeout
        while len(out) < count and time.monotonic() < deadline:
            for recs in cons.poll(timeout_ms=500).values():
                for r in recs:
                    out.append("R %d %d %s" % (r.partition, r.offset, digest(r.key, r.value)))
    finally:
        cons.close()
    return out, []


def main():
    mode, kind = sys.argv[1], sys.argv[2]
    t0 = time.monotonic()
    if mode == "produce":
        bootstrap, topic, parts, count, size, ident, client_id = sys.argv[3:10]
        conf = json.loads(sys.argv[10]) if len(sys.argv) > 10 else {}
        fn = {"ck": produce_ck, "kp": produce_kp}[kind]
        lines, errors, left = fn(bootstrap, topic, *parts_arg(parts), int(count), int(size),
                                 ident, client_id, conf)
        sys.stdout.write("".join(x + "\n" for x in lines + errors))
        print(json.dumps({"op": "produce", "kind": kind, "sent": int(count),
                          "acked": len(lines), "errors": len(errors), "left": left,
                          "first_error": errors[0] if errors else None,
                          "ms": int((time.monotonic() - t0) * 1000)}))
        return 0 if len(lines) == int(count) else 1
    bootstrap, topic, count, client_id = sys.argv[3:7]
    group = sys.argv[7] if len(sys.argv) > 7 and sys.argv[7] != "-" else None
    timeout = float(sys.argv[8]) if len(sys.argv) > 8 else 60.0
    conf = json.loads(sys.argv[9]) if len(sys.argv) > 9 else {}
    fn = {"ck": read_ck, "kp": read_kp}[kind]
    out, errors = fn(bootstrap, topic, int(count), client_id, group, timeout, conf)
    sys.stdout.write("".join(x + "\n" for x in out))
    print(json.dumps({"op": "read", "kind": kind, "expected": int(count),
                      "received": len(out), "group": group, "errors": errors[:5],
                      "ms": int((time.monotonic() - t0) * 1000)}))
    return 0 if len(out) >= int(count) else 1


if __name__ == "__main__":
    sys.exit(main())
