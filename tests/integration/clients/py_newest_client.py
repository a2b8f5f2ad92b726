"""The newest Python clients from PyPI against the broker, for test_1008_newest_clients.py.

Runs on tests/.venv's python (tools/install-deps.sh test pins the versions), never on
Debian's, whose confluent-kafka and kafka-python are older:

    python py_newest_client.py CLIENT OP BOOTSTRAP TOPIC ARGS...

CLIENT is "confluent" (confluent-kafka, its wheel bundling librdkafka) or "kafka-python"
(the version on PYTHONPATH: 2.3 from the venv, 3.x from its own --target directory).
OP is one of
    admin    PARTITIONS          create the topic (retention.ms set), describe it and its configs
    produce  COUNT PARTITIONS    idempotent, acks=all, compressed; record i to partition i % PARTITIONS
    consume  GROUP COUNT         subscribe in a classic group, read COUNT records, commit
                                 exactly those, leave the group
    groups   GROUP               list the groups and describe GROUP
Records are printed as "ACK i partition offset" / "REC i partition offset"; every op ends
with one JSON line (with "error" when it failed).
"""

import json
import sys
import time
import traceback

RETENTION_MS = "123456789"


def value(i):
    return ("v-%d-" % i).encode() + bytes((i * 7 + j) % 251 for j in range(60))


def out(**kw):
    print(json.dumps(kw), flush=True)


# ---- confluent-kafka ----

def ck_admin(bootstrap, topic, parts):
    import confluent_kafka
    from confluent_kafka import TopicCollection
    from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

    a = AdminClient({"bootstrap.servers": bootstrap, "client.id": "skiff-test-newest"})
    a.create_topics([NewTopic(topic, num_partitions=parts, replication_factor=1,
                              config={"retention.ms": RETENTION_MS})],
                    operation_timeout=30)[topic].result(30)
    deadline = time.time() + 30
    while True:
        t = a.list_topics(topic=topic, timeout=10).topics.get(topic)
        if t is not None and t.error is None and len(t.partitions) == parts and all(
                p.leader >= 0 for p in t.partitions.values()):
            break
        assert time.time() < deadline, "topic not ready: %r" % (t and t.error)
        time.sleep(0.1)
    desc = a.describe_topics(TopicCollection([topic]))[topic].result(30)
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    cfg = a.describe_configs([res])[res].result(30)
    out(op="admin", client="confluent-kafka %s librdkafka %s" % (
        confluent_kafka.__version__, confluent_kafka.libversion()[0]),
        name=desc.name, topic_id=str(desc.topic_id),
        partitions=sorted(p.id for p in desc.partitions),
        leaders=[p.leader.id if p.leader is not None else -1 for p in desc.partitions],
        retention_ms=cfg["retention.ms"].value, cleanup_policy=cfg["cleanup.policy"].value)


def ck_produce(bootstrap, topic, count, parts):
    from confluent_kafka import Producer

    errors, acks = [], {}

    def on_delivery(err, msg):
        i = int(msg.key()[2:])
        if err is not None:
            errors.append("record %d: %s" % (i, err))
        else:
            acks[i] = (msg.partition(), msg.offset())

    p = Producer({"bootstrap.servers": bootstrap, "client.id": "skiff-test-newest",
                  "enable.idempotence": True, "acks": "all", "compression.type": "zstd",
                  "linger.ms": 5, "message.timeout.ms": 30000})
    for i in range(count):
        while True:
            try:
                p.produce(topic, key=b"k-%d" % i, value=value(i), partition=i % parts,
                          headers=[("idx", str(i).encode())], on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    left = p.flush(30)
    for i in sorted(acks):
        print("ACK %d %d %d" % ((i,) + acks[i]))
    out(op="produce", left=left, errors=errors[:5], acked=len(acks))


def ck_consume(bootstrap, topic, group, count):
    from confluent_kafka import Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "client.id": "skiff-test-newest",
                  "group.id": group, "group.protocol": "classic",
                  "partition.assignment.strategy": "range", "enable.auto.commit": False,
                  "auto.offset.reset": "earliest", "enable.partition.eof": False,
                  "fetch.wait.max.ms": 100, "session.timeout.ms": 10000})
    n, nxt, errors = 0, {}, []
    try:
        c.subscribe([topic])
        deadline = time.time() + 40
        while n < count and time.time() < deadline:
            for m in c.consume(num_messages=500, timeout=0.5):
                if m.error():
                    errors.append(str(m.error()))
                    continue
                if n >= count:
                    break
                i = int(m.key()[2:])
                good = m.value() == value(i) and dict(m.headers() or []).get("idx") == str(i).encode()
                print("REC %d %d %d%s" % (i, m.partition(), m.offset(), "" if good else " BAD"))
                nxt[m.partition()] = m.offset() + 1
                n += 1
        if nxt:
            c.commit(offsets=[TopicPartition(topic, q, o) for q, o in nxt.items()], asynchronous=False)
        committed = c.committed([TopicPartition(topic, q) for q in nxt], timeout=10)
        out(op="consume", read=n, errors=errors[:5],
            committed={str(tp.partition): tp.offset for tp in committed})
    finally:
        c.close()


def ck_groups(bootstrap, topic, group):
    from confluent_kafka.admin import AdminClient

    a = AdminClient({"bootstrap.servers": bootstrap, "client.id": "skiff-test-newest"})
    listed = a.list_consumer_groups().result(30)
    d = a.describe_consumer_groups([group])[group].result(30)
    out(op="groups", listed=[g.group_id for g in listed.valid], errors=[str(e) for e in listed.errors],
        group=d.group_id, state=str(d.state.name), protocol_type=getattr(d, "protocol_type", None))


# ---- kafka-python ----

def _kp3():
    import kafka
    return int(kafka.__version__.split(".")[0]) >= 3


def _get(d, *keys):
    """kafka-python 2 and 3 name the fields of their admin answers differently."""
    for k in keys:
        if k in d:
            return d[k]
    raise KeyError("none of %s in %r" % (keys, d))


def kp_admin(bootstrap, topic, parts):
    import kafka
    from kafka.admin import ConfigResource, ConfigResourceType, KafkaAdminClient, NewTopic

    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="skiff-test-newest")
    try:
        a.create_topics([NewTopic(topic, parts, 1, topic_configs={"retention.ms": RETENTION_MS})],
                        timeout_ms=30000)
        deadline = time.time() + 30
        while True:
            desc = [t for t in a.describe_topics([topic]) if _get(t, "topic", "name") == topic]
            ps = desc[0]["partitions"] if desc else []
            if desc and desc[0]["error_code"] == 0 and len(ps) == parts and all(
                    _get(p, "leader", "leader_id") >= 0 for p in ps):
                break
            assert time.time() < deadline, "topic not ready: %r" % desc
            time.sleep(0.1)
        entries = {}
        if _kp3():
            cfg = a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)],
                                     config_filter="all")
            for by_name in cfg.values():
                for name, configs in by_name.items():
                    if name == topic:
                        entries = {k: _get(v, "value", "config_value") if isinstance(v, dict) else v
                                   for k, v in configs.items()}
        else:
            for resp in a.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)]):
                for res in resp.resources:
                    for c in res[4]:
                        entries[c[0]] = c[1]
        out(op="admin", client="kafka-python %s" % kafka.__version__,
            name=topic, partitions=sorted(_get(p, "partition", "partition_index") for p in ps),
            leaders=[_get(p, "leader", "leader_id") for p in ps],
            retention_ms=entries.get("retention.ms"), cleanup_policy=entries.get("cleanup.policy"))
    finally:
        a.close()


def kp_produce(bootstrap, topic, count, parts):
    from kafka import KafkaProducer

    p = KafkaProducer(bootstrap_servers=bootstrap, client_id="skiff-test-newest", acks="all",
                      enable_idempotence=True, compression_type="gzip", linger_ms=5)
    futs = [p.send(topic, key=b"k-%d" % i, value=value(i), partition=i % parts,
                   headers=[("idx", str(i).encode())]) for i in range(count)]
    p.flush(30)
    errors = []
    for i, f in enumerate(futs):
        try:
            md = f.get(timeout=30)
            print("ACK %d %d %d" % (i, md.partition, md.offset))
        except Exception as e:  # noqa: BLE001 - reported to the test
            errors.append("record %d: %r" % (i, e))
    p.close(10)
    out(op="produce", left=0, errors=errors[:5], acked=count - len(errors))


def kp_consume(bootstrap, topic, group, count):
    from kafka import KafkaConsumer, TopicPartition
    from kafka.structs import OffsetAndMetadata

    c = KafkaConsumer(topic, bootstrap_servers=bootstrap, client_id="skiff-test-newest",
                      group_id=group, enable_auto_commit=False, auto_offset_reset="earliest",
                      fetch_max_wait_ms=100, session_timeout_ms=10000, heartbeat_interval_ms=1000)
    n, nxt = 0, {}
    try:
        deadline = time.time() + 40
        while n < count and time.time() < deadline:
            for tp, msgs in c.poll(timeout_ms=500, max_records=500).items():
                for m in msgs:
                    if n >= count:
                        break
                    i = int(m.key[2:])
                    good = m.value == value(i) and dict(m.headers or []).get("idx") == str(i).encode()
                    print("REC %d %d %d%s" % (i, m.partition, m.offset, "" if good else " BAD"))
                    nxt[m.partition] = m.offset + 1
                    n += 1
        offsets = {TopicPartition(topic, q): OffsetAndMetadata(o, "", -1) for q, o in nxt.items()}
        if offsets:
            c.commit(offsets)
        committed = {str(q): c.committed(TopicPartition(topic, q)) for q in nxt}
        out(op="consume", read=n, errors=[], committed=committed)
    finally:
        c.close()


def kp_groups(bootstrap, topic, group):
    from kafka.admin import KafkaAdminClient

    a = KafkaAdminClient(bootstrap_servers=bootstrap, client_id="skiff-test-newest")
    try:
        if _kp3():
            listed = [_get(g, "group_id", "group") for g in a.list_groups()]
            d = a.describe_groups([group])[group]
            out(op="groups", listed=listed, errors=[], group=_get(d, "group_id", "group"),
                state=str(_get(d, "group_state", "state")), protocol_type=d.get("protocol_type"))
        else:
            listed = [g[0] for g in a.list_consumer_groups()]
            d = a.describe_consumer_groups([group])[0]
            out(op="groups", listed=listed, errors=[], group=d.group, state=d.state,
                protocol_type=d.protocol_type)
    finally:
        a.close()


OPS = {("confluent", "admin"): ck_admin, ("confluent", "produce"): ck_produce,
       ("confluent", "consume"): ck_consume, ("confluent", "groups"): ck_groups,
       ("kafka-python", "admin"): kp_admin, ("kafka-python", "produce"): kp_produce,
       ("kafka-python", "consume"): kp_consume, ("kafka-python", "groups"): kp_groups}


def main():
    client, op, bootstrap, topic = sys.argv[1:5]
    args = [int(a) if a.isdigit() else a for a in sys.argv[5:]]
    try:
        OPS[(client, op)](bootstrap, topic, *args)
    except Exception:  # noqa: BLE001 - the test shows it
        out(op=op, error=traceback.format_exc())
        sys.exit(1)


if __name__ == "__main__":
    main()
