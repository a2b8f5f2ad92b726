"""Reading a keyed partition back across the gaps compaction leaves (test_5006-5008)."""

import time


def read_partition(bootstrap, topic, hw, group, timeout=30.0):
    """[(offset, key, value)] of partition 0, from the beginning up to hw, read with
    librdkafka (which steps over the offsets compaction removed)."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
                  "enable.auto.commit": False, "fetch.wait.max.ms": 50})
    c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
    got, deadline = [], time.time() + timeout
    try:
        while time.time() < deadline:
            m = c.poll(0.2)
            if m is None or m.error():
                if c.position([TopicPartition(topic, 0)])[0].offset >= hw:
                    break
                continue
            got.append((m.offset(), m.key().decode(), m.value()))
            if m.offset() + 1 >= hw:
                break
    finally:
        c.close()
    return got
