"""Compacted topics (issue 12, "Compacted topics"): cleanup.policy=compact and
compact,delete are accepted, stored, described and altered as Kafka 4.3 checks
them, and a record without a key is refused on a compacted topic as Kafka
refuses it (INVALID_RECORD). Expectations hold against Apache Kafka too.
"""

import time

import pytest

import kgroup as kg
import kproto

INVALID_CONFIG = 40
INVALID_RECORD = 87
TOPIC = 2
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3


@pytest.fixture
def conn(broker):
    c = kg.connect(broker.bootstrap)
    yield c
    c.close()


def incr(c, name, ops):
    r = c.request(44, 1, {"Resources": [{"ResourceType": TOPIC, "ResourceName": name, "Configs": [
        {"Name": k, "ConfigOperation": op, "Value": v} for k, op, v in ops]}],
        "ValidateOnly": False})
    x = r["Responses"][0]
    return x["ErrorCode"], x["ErrorMessage"]


def described(c, name):
    r = kg.describe_configs(c, TOPIC, name)["Results"][0]
    assert r["ErrorCode"] == 0, r
    return {x["Name"]: (x["Value"], x["ConfigSource"]) for x in r["Configs"]}


def test_cleanup_policy_round_trip(conn, topic_name):
    c = conn
    r = kproto.create_topics(c, [(topic_name, 1, 1, {"cleanup.policy": "compact"})])["Topics"][0]
    assert r["ErrorCode"] == 0, r
    got = {x["Name"]: x["Value"] for x in r["Configs"]}
    assert got["cleanup.policy"] == "compact", got
    kproto.wait_topic(c, topic_name, 1)
    assert described(c, topic_name)["cleanup.policy"] == ("compact", 1)
    # Both, in either order and with blanks, kept as Kafka's list parsing leaves them.
    for value in ("compact,delete", "delete, compact"):
        assert incr(c, topic_name, [("cleanup.policy", SET, value)])[0] == 0, value
        assert described(c, topic_name)["cleanup.policy"] == (value.replace(" ", ""), 1)
    assert incr(c, topic_name, [("cleanup.policy", SUBTRACT, "delete")])[0] == 0
    assert described(c, topic_name)["cleanup.policy"] == ("compact", 1)
    assert incr(c, topic_name, [("cleanup.policy", APPEND, "delete")])[0] == 0
    assert described(c, topic_name)["cleanup.policy"] == ("compact,delete", 1)
    for bad in ("Compact", "compact;delete", "shrink"):
        err, msg = incr(c, topic_name, [("cleanup.policy", SET, bad)])
        assert err == INVALID_CONFIG and "cleanup.policy" in msg, (bad, err, msg)
    assert described(c, topic_name)["cleanup.policy"] == ("compact,delete", 1)
    for name, value in (("delete.retention.ms", "1000"), ("min.compaction.lag.ms", "0"),
                        ("max.compaction.lag.ms", "60000"), ("min.cleanable.dirty.ratio", "0.01")):
        assert incr(c, topic_name, [(name, SET, value)])[0] == 0, name
        assert described(c, topic_name)[name] == (value, 1), name
    assert incr(c, topic_name, [("cleanup.policy", DELETE, None)])[0] == 0
    assert described(c, topic_name)["cleanup.policy"][0] == "delete"


def test_null_key_refused_on_compacted_topic(conn, topic_name):
    c = conn
    kproto.create_topic(c, topic_name, 1, {"cleanup.policy": "compact"})
    keyed = kproto.batch(records=[kproto.Record("v1", key="k1"), kproto.Record("v2", key="k2")])
    r = kproto.produce(c, topic_name, 0, keyed, version=9)
    assert r["ErrorCode"] == 0 and r["BaseOffset"] == 0, r
    mixed = kproto.batch(records=[kproto.Record("v3", key="k3"), kproto.Record("v4")])
    r = kproto.produce(c, topic_name, 0, mixed, version=9)
    assert r["ErrorCode"] == INVALID_RECORD, r
    assert [e["BatchIndex"] for e in r["RecordErrors"]] == [1], r
    # Nothing of the refused batch was written; a delete topic takes null keys.
    assert kproto.list_offsets(c, topic_name, 0, -1)["Offset"] == 2
    assert incr(c, topic_name, [("cleanup.policy", SET, "delete")])[0] == 0
    deadline = time.time() + 20  # Kafka applies a topic's new config asynchronously
    while True:
        r = kproto.produce(c, topic_name, 0, mixed, version=9)
        if r["ErrorCode"] != INVALID_RECORD or time.time() > deadline:
            break
        time.sleep(0.2)
    assert r["ErrorCode"] == 0 and r["BaseOffset"] == 2, r
