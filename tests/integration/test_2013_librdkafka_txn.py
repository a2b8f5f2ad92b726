"""librdkafka's transactional API (confluent-kafka): a committed and an aborted
transaction, read back by read_committed and read_uncommitted consumers
(docs/transactions.md)."""

import uuid

import kproto as k


def consume_all(bootstrap, topic, isolation):
    from confluent_kafka import Consumer, TopicPartition
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "g2013-" + uuid.uuid4().hex[:8],
                  "isolation.level": isolation, "enable.partition.eof": True,
                  "enable.auto.commit": False})
    try:
        c.assign([TopicPartition(topic, 0, 0)])
        vals = []
        while True:
            m = c.poll(15)
            assert m is not None, "no end of partition within 15 s; got %s" % vals
            if m.error():
                assert m.error().code() == -191, m.error()  # _PARTITION_EOF
                return vals
            vals.append(m.value().decode())
    finally:
        c.close()


def test_commit_and_abort(broker, topic_name):
    from confluent_kafka import Producer
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        k.wait_topic(c, topic_name, 1)
    p = Producer({"bootstrap.servers": broker.bootstrap,
                  "transactional.id": "t2013-" + uuid.uuid4().hex[:8]})
    p.init_transactions(30)
    for prefix, commit in (("c1", True), ("a", False), ("c2", True)):
        p.begin_transaction()
        for i in range(5):
            p.produce(topic_name, value="%s-%d" % (prefix, i), partition=0)
        p.flush(30)
        if commit:
            p.commit_transaction(30)
        else:
            p.abort_transaction(30)
    want = ["c1-%d" % i for i in range(5)] + ["c2-%d" % i for i in range(5)]
    assert consume_all(broker.bootstrap, topic_name, "read_committed") == want
    got = consume_all(broker.bootstrap, topic_name, "read_uncommitted")
    assert got == want[:5] + ["a-%d" % i for i in range(5)] + want[5:], got
