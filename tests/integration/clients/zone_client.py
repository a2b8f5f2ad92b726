"""A client that produces, then reads back, for the zone tests: run it inside a zone.

    zone_client.py BOOTSTRAP TOPIC PARTITIONS COUNT SIZE [TIMEOUT_S]

Produces COUNT records of SIZE bytes, round-robin over PARTITIONS (comma-separated),
with confluent-kafka (acks=all, idempotent), then reads those partitions from the
beginning with kafka-python (no group: assign and seek). Prints one JSON line:
{"acked": [[partition, offset, value sha1], ...], "errors": [...],
 "read": [[partition, offset, value sha1], ...], "seconds": {...}}.
Exit status 0 when every record was acknowledged and read back once at its offset.
"""

import hashlib
import json
import sys
import time


def main():
    bootstrap, topic, parts_s, count_s, size_s = sys.argv[1:6]
    timeout = float(sys.argv[6]) if len(sys.argv) > 6 else 40.0
    parts = [int(x) for x in parts_s.split(",")]
    count, size = int(count_s), int(size_s)
    from confluent_kafka import Producer
    from kafka import KafkaConsumer, TopicPartition

    out = {"acked": [], "errors": [], "read": [], "seconds": {}}
    t0 = time.monotonic()
    p = Producer({"bootstrap.servers": bootstrap, "client.id": "zone-client",
                  "enable.idempotence": True, "acks": "all", "linger.ms": 5,
                  "message.timeout.ms": int(timeout * 1000)})

    def done(err, msg):
        if err is not None:
            out["errors"].append(str(err))
        else:
            out["acked"].append([msg.partition(), msg.offset(),
                                 hashlib.sha1(msg.value()).hexdigest()])

    for i in range(count):
        head = b"%s-%d-" % (topic.encode(), i)
        value = head + bytes((i + j) & 0xFF for j in range(max(0, size - len(head))))
        while True:
            try:
                p.produce(topic, value, partition=parts[i % len(parts)], on_delivery=done)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(timeout)
    if left:
        out["errors"].append("%d records not delivered in %.0fs" % (left, timeout))
    out["seconds"]["produce"] = round(time.monotonic() - t0, 3)

    t1 = time.monotonic()
    c = KafkaConsumer(bootstrap_servers=bootstrap, client_id="zone-client-reader",
                      group_id=None, enable_auto_commit=False, request_timeout_ms=15000,
                      fetch_max_wait_ms=100)
    try:
        tps = [TopicPartition(topic, x) for x in parts]
        c.assign(tps)
        c.seek_to_beginning(*tps)
        want = len(out["acked"])
        deadline = time.monotonic() + timeout
        while len(out["read"]) < want and time.monotonic() < deadline:
            for recs in c.poll(timeout_ms=500).values():
                for r in recs:
                    out["read"].append([r.partition, r.offset, hashlib.sha1(r.value).hexdigest()])
    finally:
        c.close()
    out["seconds"]["read"] = round(time.monotonic() - t1, 3)
    print(json.dumps(out))
    ok = (not out["errors"] and len(out["acked"]) == count
          and sorted(map(tuple, out["read"])) == sorted(map(tuple, out["acked"])))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
