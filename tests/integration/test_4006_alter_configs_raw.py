"""AlterConfigs and IncrementalAlterConfigs on the wire: replace versus change, validate
only, bad values, list operations, unknown topics; and on skiffd the refusal, with a
message, of every topic config Skiff does not honour. Expectations from Kafka 4.3.1.
"""


import pytest

import harness
import kgroup as kg
import kproto

INVALID_CONFIG = 40
INVALID_REQUEST = 42
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC, BROKER = 2, 4
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3

@pytest.fixture
def conn(broker):
    c = kg.connect(broker.bootstrap)
    yield c
    c.close()


def alter(c, name, configs, version=1, validate=False, rtype=TOPIC):
    """Legacy AlterConfigs: configs {name: value}; returns (error, message)."""
    r = c.request(33, version, {"Resources": [{"ResourceType": rtype, "ResourceName": name, "Configs": [
        {"Name": k, "Value": v} for k, v in configs.items()]}], "ValidateOnly": validate})
    x = r["Responses"][0]
    return x["ErrorCode"], x["ErrorMessage"]


def incr(c, name, ops, version=1, validate=False, rtype=TOPIC):
    """ops: [(name, op, value)]; returns (error, message)."""
    r = c.request(44, version, {"Resources": [{"ResourceType": rtype, "ResourceName": name, "Configs": [
        {"Name": k, "ConfigOperation": op, "Value": v} for k, op, v in ops]}], "ValidateOnly": validate})
    x = r["Responses"][0]
    return x["ErrorCode"], x["ErrorMessage"]


def overrides(c, name):
    r = kg.describe_configs(c, TOPIC, name)["Results"][0]
    assert r["ErrorCode"] == 0, r
    return {x["Name"]: x["Value"] for x in r["Configs"] if x["ConfigSource"] == 1}


def test_alter_replaces_incremental_changes(conn, topic_name):
    c = conn
    kproto.create_topic(c, topic_name, 1)
    assert incr(c, topic_name, [("retention.ms", SET, "100000"), ("max.message.bytes", SET, "50000")])[0] == 0
    assert overrides(c, topic_name) == {"retention.ms": "100000", "max.message.bytes": "50000"}
    assert incr(c, topic_name, [("max.message.bytes", DELETE, None)], version=0)[0] == 0
    assert overrides(c, topic_name) == {"retention.ms": "100000"}
    # validate only: checked, not applied.
    assert incr(c, topic_name, [("retention.ms", SET, "5")], validate=True)[0] == 0
    assert alter(c, topic_name, {"retention.bytes": "1000"}, validate=True)[0] == 0
    assert overrides(c, topic_name) == {"retention.ms": "100000"}
    # The legacy AlterConfigs replaces the whole set.
    for v in (0, 1, 2):
        assert alter(c, topic_name, {"retention.bytes": "%d" % (1000 + v)}, version=v)[0] == 0
        assert overrides(c, topic_name) == {"retention.bytes": "%d" % (1000 + v)}
    # cleanup.policy is a list: APPEND/SUBTRACT work on it, nowhere else.
    assert incr(c, topic_name, [("cleanup.policy", APPEND, "delete")])[0] == 0
    assert incr(c, topic_name, [("cleanup.policy", SUBTRACT, "compact")])[0] == 0
    assert overrides(c, topic_name)["cleanup.policy"] == "delete"
    err, msg = incr(c, topic_name, [("retention.ms", APPEND, "1")])
    assert err == INVALID_CONFIG and "retention.ms" in msg, (err, msg)


def test_bad_values_and_unknown_resources(conn, topic_name):
    c = conn
    kproto.create_topic(c, topic_name, 1)
    for name, value in (("retention.ms", "soon"), ("max.message.bytes", "-5"),
                        ("message.timestamp.type", "WallClock"), ("no.such.config", "1")):
        err, msg = incr(c, topic_name, [(name, SET, value)])
        assert err == INVALID_CONFIG and msg, (name, value, err, msg)
        err, msg = alter(c, topic_name, {name: value})
        assert err == INVALID_CONFIG and msg, (name, value, err, msg)
    assert overrides(c, topic_name) == {}
    absent = topic_name + "-absent"
    assert incr(c, absent, [("retention.ms", SET, "1000")])[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert alter(c, absent, {"retention.ms": "1000"})[0] == UNKNOWN_TOPIC_OR_PARTITION
    assert kg.describe_configs(c, TOPIC, absent)["Results"][0]["ErrorCode"] == UNKNOWN_TOPIC_OR_PARTITION


def test_kafka_topic_configs_are_accepted_and_described(conn, topic_name):
    """Every topic config Kafka has is accepted with Kafka's checks, stored and described
    (what it does in Skiff is in its documentation); what Skiff cannot do (tiered
    storage) is refused, and says so."""
    c = conn
    kproto.create_topic(c, topic_name, 1)
    stored = [("segment.bytes", "2000000"), ("segment.ms", "60000"),
              ("unclean.leader.election.enable", "true"), ("min.compaction.lag.ms", "1000"),
              ("flush.messages", "1"), ("local.retention.ms", "-2"),
              ("min.cleanable.dirty.ratio", "0.25"), ("compression.zstd.level", "-5"),
              ("compression.type", "lz4"),
              ("leader.replication.throttled.replicas", "0:1,1:2"),
              ("follower.replication.throttled.replicas", "*"), ("preallocate", "TRUE")]
    for name, value in stored:
        err, msg = incr(c, topic_name, [(name, SET, value)])
        assert err == 0, (name, value, err, msg)
    # Booleans are described as Kafka describes them, whatever their case when set.
    assert overrides(c, topic_name) == dict(stored, preallocate="true")
    # APPEND works on the throttled replica lists as on cleanup.policy.
    assert incr(c, topic_name, [("leader.replication.throttled.replicas", APPEND, "2:3")])[0] == 0
    assert overrides(c, topic_name)["leader.replication.throttled.replicas"] == "0:1,1:2,2:3"
    # Kafka's own bounds.
    bad = [("segment.bytes", "13"), ("segment.ms", "0"), ("flush.messages", "0"),
           ("min.cleanable.dirty.ratio", "1.5"), ("compression.lz4.level", "18"),
           ("local.retention.bytes", "-3"), ("preallocate", "yes"),
           ("compression.type", "brotli"),
           ("leader.replication.throttled.replicas", "0-1")]
    for name, value in bad:
        err, msg = incr(c, topic_name, [(name, SET, value)])
        assert err == INVALID_CONFIG and name in msg, (name, value, err, msg)
    if harness.external():
        return
    # What Skiff cannot do.
    for name, value in (("remote.storage.enable", "true"),):
        err, msg = incr(c, topic_name, [(name, SET, value)])
        assert err == INVALID_CONFIG, (name, value, err, msg)
        assert name in msg and "must be" in msg, msg
    # CreateTopics takes them too, and answers them with the others.
    r = kproto.create_topics(c, [(topic_name + "-b", 1, 1, {"segment.bytes": "2000000"})])["Topics"][0]
    assert r["ErrorCode"] == 0, r
    got = {x["Name"]: x["Value"] for x in r["Configs"]}
    assert got["segment.bytes"] == "2000000" and got["segment.ms"] == "604800000", got
    # DescribeConfigs: Kafka's types, and the documentation says what Skiff does.
    d = kg.describe_configs(c, TOPIC, topic_name, keys=["segment.bytes", "preallocate",
                                                        "min.cleanable.dirty.ratio",
                                                        "leader.replication.throttled.replicas"],
                            documentation=True)["Results"][0]["Configs"]
    types = {x["Name"]: x["ConfigType"] for x in d}
    assert types == {"segment.bytes": 3, "preallocate": 1, "min.cleanable.dirty.ratio": 6,
                     "leader.replication.throttled.replicas": 7}, d
    doc = {x["Name"]: x["Documentation"] for x in d}
    assert "no log segments" in doc["segment.bytes"], doc


def test_static_and_unknown_broker_properties_are_refused(conn):
    if harness.external():
        pytest.skip("Skiff's broker properties")
    c = conn
    # Broker properties: static ones and unknown ones, each with a reason.
    for name, value, why in (("socket.request.max.bytes", "2000000", "restart"),
                             ("num.network.threads", "4", "not a broker property"),
                             ("log.retention.ms", "soon", "integer")):
        err, msg = incr(c, "1", [(name, SET, value)], rtype=BROKER)
        assert err == INVALID_CONFIG and name in msg and why in msg, (name, err, msg)
    err, msg = incr(c, "99", [("log.retention.ms", SET, "1000")], rtype=BROKER)
    assert err == INVALID_REQUEST, (err, msg)


