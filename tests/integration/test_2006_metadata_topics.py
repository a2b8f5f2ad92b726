"""Metadata (all-topics forms, auto-creation) and CreateTopics validation."""

import time

import pytest

import cluster  # noqa: F401  (DescribeCluster's schema)
import harness
import kproto as k

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="Skiff-specific expectation (differs from Kafka)")


def wait_auto_created(c, name, version=0, timeout=15.0):
    """Kafka's first answer for an auto-created topic is an error (it is being
    created: UNKNOWN_TOPIC_OR_PARTITION in KRaft, LEADER_NOT_AVAILABLE in older
    brokers); clients simply ask again."""
    deadline = time.time() + timeout
    while True:
        md = k.metadata(c, [name], version=version)
        t = md["Topics"][0]
        assert t["ErrorCode"] in (k.NONE, k.UNKNOWN_TOPIC_OR_PARTITION, 5), t
        if t["ErrorCode"] == k.NONE and t["Partitions"] and \
                all(p["LeaderId"] >= 0 for p in t["Partitions"]):
            return t
        assert time.time() < deadline, "topic %s never auto-created: %r" % (name, t)
        time.sleep(0.1)


def names(md):
    return {t["Name"] for t in md["Topics"]}


@pytest.mark.parametrize("version", [0, 1, 4, 9])
def test_auto_create_by_metadata(broker, topic_name, version):
    with k.Conn(broker.bootstrap) as c:
        t = wait_auto_created(c, topic_name, version)
        assert t["Name"] == topic_name
        # and it is usable at once
        pr = k.produce(c, topic_name, 0, k.batch([b"auto"]))
        assert pr["ErrorCode"] == k.NONE


@skiff_only
def test_auto_created_topics_get_num_partitions(broker_factory, topic_name):
    b = broker_factory({"num.partitions": "3"})
    with k.Conn(b.bootstrap) as c:
        t = wait_auto_created(c, topic_name, 0)
        assert sorted(p["PartitionIndex"] for p in t["Partitions"]) == [0, 1, 2]
        # CreateTopics with -1 partitions takes the default too
        r = k.create_topics(c, [(topic_name + "-d", -1, -1)])["Topics"][0]
        assert r["ErrorCode"] == k.NONE and r["NumPartitions"] == 3
        assert r["ReplicationFactor"] == 1


@skiff_only
def test_auto_create_disabled(broker_factory, topic_name):
    b = broker_factory({"auto.create.topics.enable": "false"})
    with k.Conn(b.bootstrap) as c:
        for v in (0, 1, 4, 9, 12):
            md = k.metadata(c, [topic_name], version=v)
            assert md["Topics"][0]["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION
        time.sleep(0.3)
        assert topic_name not in names(k.metadata(c, None, version=1))


@pytest.mark.parametrize("version", [4, 9, 12])
def test_allow_auto_topic_creation_false(broker, topic_name, version):
    with k.Conn(broker.bootstrap) as c:
        for _ in range(2):
            md = k.metadata(c, [topic_name], version=version, allow_auto=False)
            [t] = md["Topics"]
            assert t["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION and t["Partitions"] == []
            assert t["Name"] == topic_name
            time.sleep(0.3)
        assert topic_name not in names(k.metadata(c, None, version=1))


def test_all_topics_forms(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name + "-a", 1)
        k.create_topic(c, topic_name + "-b", 3)
        want = {topic_name + "-a", topic_name + "-b"}
        assert want <= names(k.metadata(c, [], version=0))            # v0: empty = all
        for v in (1, 4, 9, 12):
            md = k.metadata(c, None, version=v, allow_auto=False)     # v1+: null = all
            assert want <= names(md), v
            [b] = [t for t in md["Topics"] if t["Name"] == topic_name + "-b"]
            assert len(b["Partitions"]) == 3
        # v1+: an empty list means no topics
        assert k.metadata(c, [], version=1)["Topics"] == []
        assert k.metadata(c, [], version=12, allow_auto=False)["Topics"] == []


@pytest.mark.parametrize("version", [0, 1, 9, 12])
def test_single_node_is_leader_replica_isr(broker, topic_name, version):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 4)
        md = k.metadata(c, [topic_name], version=version, allow_auto=False)
        [node] = md["Brokers"]
        assert node["Host"] == broker.host and node["Port"] == broker.port
        nid = node["NodeId"]
        assert nid >= 0
        if version >= 1:
            assert md["ControllerId"] in (nid, -1)
        if version >= 2:
            assert md["ClusterId"]
        [t] = md["Topics"]
        assert t["ErrorCode"] == k.NONE and t["Name"] == topic_name
        if version >= 1:
            assert t["IsInternal"] is False
        if version >= 10:
            assert t["TopicId"] != b"\x00" * 16
        assert sorted(p["PartitionIndex"] for p in t["Partitions"]) == [0, 1, 2, 3]
        for p in t["Partitions"]:
            assert p["ErrorCode"] == k.NONE
            assert p["LeaderId"] == nid
            assert p["ReplicaNodes"] == [nid] and p["IsrNodes"] == [nid]
            if version >= 5:
                assert p["OfflineReplicas"] == []
            if version >= 7:
                assert p["LeaderEpoch"] >= 0
            if version >= 8:
                assert t["TopicAuthorizedOperations"] == -2147483648


def test_unknown_and_known_topics_mixed(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        md = k.metadata(c, [topic_name, topic_name + "-nope"], version=9, allow_auto=False)
        errs = {t["Name"]: t["ErrorCode"] for t in md["Topics"]}
        assert errs == {topic_name: k.NONE, topic_name + "-nope": k.UNKNOWN_TOPIC_OR_PARTITION}


# Kafka's supported operations as bit fields (bit n: AclOperation n); with no
# authorizer every one of them is allowed.
TOPIC_OPS = sum(1 << b for b in (3, 4, 5, 6, 7, 8, 10, 11))     # READ .. ALTER_CONFIGS
CLUSTER_OPS = sum(1 << b for b in (5, 7, 8, 9, 10, 11, 12))     # CREATE .. IDEMPOTENT_WRITE


def test_authorized_operations(broker, topic_name):
    """Asked for, Metadata gives the topic bit field for every topic, known or not, and
    the cluster's (v8-v10); DescribeCluster gives the cluster's."""
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        body = {"AllowAutoTopicCreation": False, "IncludeClusterAuthorizedOperations": True,
                "IncludeTopicAuthorizedOperations": True,
                "Topics": [{"Name": topic_name}, {"Name": topic_name + "-absent"}]}
        md = c.request(3, 10, body)
        ops = {t["Name"]: (t["ErrorCode"], t["TopicAuthorizedOperations"]) for t in md["Topics"]}
        assert ops == {topic_name: (k.NONE, TOPIC_OPS),
                       topic_name + "-absent": (k.UNKNOWN_TOPIC_OR_PARTITION, TOPIC_OPS)}, ops
        assert md["ClusterAuthorizedOperations"] == CLUSTER_OPS, md
        # Not asked: Kafka's "absent" value.
        md = c.request(3, 12, {"AllowAutoTopicCreation": False,
                               "IncludeTopicAuthorizedOperations": False,
                               "Topics": [{"Name": topic_name}]})
        assert md["Topics"][0]["TopicAuthorizedOperations"] == -2147483648, md
        dc = c.request(60, 0, {"IncludeClusterAuthorizedOperations": True})
        assert dc["ClusterAuthorizedOperations"] == CLUSTER_OPS, dc


def test_metadata_invalid_topic_name(broker):
    with k.Conn(broker.bootstrap) as c:
        for bad in ("bad name!", "x" * 300):
            md = k.metadata(c, [bad], version=1)
            assert md["Topics"][0]["ErrorCode"] == k.INVALID_TOPIC_EXCEPTION


# ---------------------------------------------------------------- CreateTopics

INVALID = [
    ("invalid-chars", "bad name!", 1, 1, k.INVALID_TOPIC_EXCEPTION),
    ("slash", "a/b", 1, 1, k.INVALID_TOPIC_EXCEPTION),
    ("too-long", "a" * 250, 1, 1, k.INVALID_TOPIC_EXCEPTION),
    ("empty", "", 1, 1, k.INVALID_TOPIC_EXCEPTION),
    ("dot", ".", 1, 1, k.INVALID_TOPIC_EXCEPTION),
    ("dotdot", "..", 1, 1, k.INVALID_TOPIC_EXCEPTION),
    ("partitions-0", None, 0, 1, k.INVALID_PARTITIONS),
    ("partitions-neg", None, -2, 1, k.INVALID_PARTITIONS),
    ("rf-4", None, 1, 4, k.INVALID_REPLICATION_FACTOR),
    ("rf-0", None, 1, 0, k.INVALID_REPLICATION_FACTOR),
]


@pytest.mark.parametrize("case", INVALID, ids=[x[0] for x in INVALID])
@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_invalid(broker, topic_name, case, validate_only):
    _, name, parts, rf, want = case
    name = topic_name if name is None else name
    with k.Conn(broker.bootstrap) as c:
        r = k.create_topics(c, [(name, parts, rf)], validate_only=validate_only)["Topics"][0]
        assert r["Name"] == name
        assert r["ErrorCode"] == want, r
        assert r["ErrorMessage"], "no ErrorMessage for error %d" % want
        assert (r["NumPartitions"], r["ReplicationFactor"]) == (-1, -1)
        md = k.metadata(c, [name], version=9, allow_auto=False)
        assert md["Topics"][0]["ErrorCode"] != k.NONE


def test_create_topics_name_of_249_chars(broker, topic_name):
    name = (topic_name + "-" + "x" * 249)[:249]
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, name, 1)
        assert k.produce(c, name, 0, k.batch([b"long"]))["ErrorCode"] == k.NONE


def test_create_topics_existing(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
        for vo in (False, True):
            r = k.create_topics(c, [(topic_name, 5, 1)], validate_only=vo)["Topics"][0]
            assert r["ErrorCode"] == k.TOPIC_ALREADY_EXISTS and r["ErrorMessage"]
        t = k.metadata(c, [topic_name], version=9, allow_auto=False)["Topics"][0]
        assert len(t["Partitions"]) == 2


def test_create_topics_validate_only_creates_nothing(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        r = k.create_topics(c, [(topic_name, 3, 1)], validate_only=True)["Topics"][0]
        assert (r["ErrorCode"], r["NumPartitions"], r["ReplicationFactor"]) == (k.NONE, 3, 1)
        time.sleep(0.5)
        md = k.metadata(c, [topic_name], version=9, allow_auto=False)
        assert md["Topics"][0]["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION
        # and a real creation afterwards works
        k.create_topic(c, topic_name, 3)


def test_create_topics_duplicate_name_in_one_request(broker, topic_name):
    """Kafka answers a name given twice with a single INVALID_REQUEST entry."""
    with k.Conn(broker.bootstrap) as c:
        rs = k.create_topics(c, [(topic_name, 1, 1), (topic_name, 1, 1)])["Topics"]
        assert [(r["Name"], r["ErrorCode"]) for r in rs] == [(topic_name, k.INVALID_REQUEST)]
        assert rs[0]["ErrorMessage"]


def test_create_topics_several_at_once(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        rs = k.create_topics(c, [(topic_name + "-1", 1, 1), (topic_name + "-bad!", 1, 1),
                                 (topic_name + "-3", 3, -1), (topic_name + "-4", 0, 1)])
        errs = {r["Name"]: r["ErrorCode"] for r in rs["Topics"]}
        assert errs == {topic_name + "-1": k.NONE,
                        topic_name + "-bad!": k.INVALID_TOPIC_EXCEPTION,
                        topic_name + "-3": k.NONE, topic_name + "-4": k.INVALID_PARTITIONS}
        k.wait_topic(c, topic_name + "-3", 3)


@pytest.mark.parametrize("version", [2, 4, 5, 7])
def test_create_topics_versions(broker, topic_name, version):
    with k.Conn(broker.bootstrap) as c:
        body = {"Topics": [{"Name": topic_name, "NumPartitions": 2, "ReplicationFactor": 1,
                            "Assignments": [], "Configs": []}],
                "timeoutMs": 30000, "validateOnly": False}
        r = c.request(19, version, body)["Topics"][0]
        assert r["ErrorCode"] == k.NONE and r["Name"] == topic_name
        if version >= 5:
            assert (r["NumPartitions"], r["ReplicationFactor"]) == (2, 1)
            assert r["Configs"] is not None
        if version >= 7:
            assert r["TopicId"] != b"\x00" * 16
        k.wait_topic(c, topic_name, 2)


def test_create_topics_configs(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        r = k.create_topics(c, [(topic_name, 1, 1, {"retention.ms": "60000"})])["Topics"][0]
        assert r["ErrorCode"] == k.NONE
        cfg = {x["Name"]: x["Value"] for x in r["Configs"]}
        assert cfg.get("retention.ms") == "60000"
        r = k.create_topics(c, [(topic_name + "-x", 1, 1,
                                 {"retention.ms": "abc"})])["Topics"][0]
        assert r["ErrorCode"] == 40 and r["ErrorMessage"]       # INVALID_CONFIG
        r = k.create_topics(c, [(topic_name + "-y", 1, 1,
                                 {"no.such.config": "1"})])["Topics"][0]
        assert r["ErrorCode"] == 40 and r["ErrorMessage"]


def test_kafka_python_auto_creates_and_produces(broker, topic_name):
    """kafka-python 2.0.2 relies on Metadata v0/v1 auto-creation."""
    import kafka
    p = kafka.KafkaProducer(bootstrap_servers=broker.bootstrap, acks=1,
                            max_block_ms=20000)
    md = p.send(topic_name, b"hello").get(timeout=20)
    p.close(5)
    assert md.topic == topic_name and md.offset == 0
