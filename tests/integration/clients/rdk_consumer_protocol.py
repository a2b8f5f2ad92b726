"""librdkafka consumers (confluent-kafka of tests/.venv) with group.protocol=consumer.

usage: rdk_consumer_protocol.py BOOTSTRAP TOPIC GROUP N [PROTOCOL1,PROTOCOL2]

PROTOCOL1,PROTOCOL2: the group.protocol of m1 and m2 (default consumer,consumer;
classic,consumer makes a mixed group: m2 joining upgrades it, m2 leaving downgrades it).

Two members m1 and m2 of GROUP read TOPIC (N records in all) and commit
synchronously after each batch: m1 reads a tenth alone; m2 joins, and both read
slowly (5 records every 100 ms each) until m2 has read some (the group has shared
the partitions); m2 closes (leaving the group) and m1 reads the rest. Prints "REC member
partition offset key" per record, "ASSIGN member p,p.." per assignment callback,
then one JSON line {"op": "rdk-consumer-protocol", "records": ..., "errors": [...]}.
"""

import json
import sys
import threading
import time

from confluent_kafka import Consumer, KafkaException, TopicPartition, libversion


def main():
    bootstrap, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    protocols = dict(zip(("m1", "m2"), (sys.argv[5] if len(sys.argv) > 5
                                        else "consumer,consumer").split(",")))
    lock = threading.Lock()
    out, errors = [], []
    counts = {"m1": 0, "m2": 0}
    stop = {"m1": threading.Event(), "m2": threading.Event()}
    slow = threading.Event()

    def member(name):
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                      "group.protocol": protocols[name], "client.id": "skiff-rdk-" + name,
                      "enable.auto.commit": False, "auto.offset.reset": "earliest",
                      # small fetches: a member holds little beyond what it is reading,
                      # so that partitions it gives up have records left for the other
                      "queued.min.messages": 10, "fetch.max.bytes": 8192, "message.max.bytes": 8192,
                      "max.partition.fetch.bytes": 2048, "fetch.wait.max.ms": 100,
                      "error_cb": lambda e: errors.append("%s: %s" % (name, e))})

        def assigned(_c, parts):
            with lock:
                out.append("ASSIGN %s %s" % (name, ",".join(str(p.partition) for p in parts)))
        c.subscribe([topic], on_assign=assigned)
        try:
            while not stop[name].is_set():
                msgs = c.consume(num_messages=5 if slow.is_set() else 50, timeout=0.1)
                upto = {}
                for m in msgs:
                    if m.error():
                        errors.append("%s: %s" % (name, m.error()))
                        continue
                    with lock:
                        out.append("REC %s %d %d %s" % (name, m.partition(), m.offset(),
                                                        m.key().decode()[2:]))
                        counts[name] += 1
                    upto[m.partition()] = m.offset() + 1
                if upto:
                    try:
                        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in upto.items()],
                                 asynchronous=False)
                    except KafkaException as e:
                        errors.append("%s: commit %s" % (name, e))
                if slow.is_set():
                    time.sleep(0.1)
        finally:
            c.close()

    def wait(pred, seconds):
        deadline = time.time() + seconds
        while time.time() < deadline and not pred():
            time.sleep(0.05)
        return pred()

    threads = {name: threading.Thread(target=member, args=(name,)) for name in ("m1", "m2")}
    threads["m1"].start()
    wait(lambda: counts["m1"] >= n // 10, 30)
    slow.set()
    threads["m2"].start()
    if not wait(lambda: counts["m2"] >= 5, 40):
        errors.append("m2 read nothing: the group never gave it partitions")
    stop["m2"].set()
    threads["m2"].join(30)
    slow.clear()
    wait(lambda: counts["m1"] + counts["m2"] >= n, 40)
    stop["m1"].set()
    threads["m1"].join(30)
    for line in out:
        print(line)
    print(json.dumps({"op": "rdk-consumer-protocol", "records": counts, "errors": errors,
                      "librdkafka": libversion()[0]}))


if __name__ == "__main__":
    main()
