"""Group configs on the wire (DescribeConfigs, IncrementalAlterConfigs and AlterConfigs on
resource type GROUP): Kafka 4.3's names, defaults and synonyms, a group's own values
(source GROUP_CONFIG), validate only, deletion, the broker bounds and the parse errors,
unknown names, list operations, the empty group name; kafka-configs --entity-type groups
and the AdminClient's describeConfigs/incrementalAlterConfigs on a group; and on skiffd,
the values kept across a restart. Expectations from Kafka 4.3.1.
"""

import os
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402

INVALID_CONFIG = 40
INVALID_REQUEST = 42
GROUP = 32
SET, DELETE, APPEND, SUBTRACT = 0, 1, 2, 3
SRC_DEFAULT, SRC_GROUP = 5, 8
TYPE_BOOLEAN, TYPE_STRING, TYPE_INT = 1, 2, 3

# Kafka 4.3.1's group configs: (default, type, the broker property the default comes from).
DEFAULTS = {
    "consumer.session.timeout.ms": ("45000", TYPE_INT, "group.consumer.session.timeout.ms"),
    "consumer.heartbeat.interval.ms": ("5000", TYPE_INT, "group.consumer.heartbeat.interval.ms"),
    "consumer.assignment.interval.ms": ("1000", TYPE_INT, "group.consumer.assignment.interval.ms"),
    "share.session.timeout.ms": ("45000", TYPE_INT, "group.share.session.timeout.ms"),
    "share.heartbeat.interval.ms": ("5000", TYPE_INT, "group.share.heartbeat.interval.ms"),
    "share.record.lock.duration.ms": ("30000", TYPE_INT, "group.share.record.lock.duration.ms"),
    "share.delivery.count.limit": ("5", TYPE_INT, "group.share.delivery.count.limit"),
    "share.partition.max.record.locks": ("2000", TYPE_INT,
                                         "group.share.partition.max.record.locks"),
    "share.assignment.interval.ms": ("1000", TYPE_INT, "group.share.assignment.interval.ms"),
    "share.auto.offset.reset": ("latest", TYPE_STRING, "share.auto.offset.reset"),
    "share.isolation.level": ("read_uncommitted", TYPE_STRING, "share.isolation.level"),
    "share.renew.acknowledge.enable": ("true", TYPE_BOOLEAN, "share.renew.acknowledge.enable"),
    "streams.session.timeout.ms": ("45000", TYPE_INT, "group.streams.session.timeout.ms"),
    "streams.heartbeat.interval.ms": ("5000", TYPE_INT, "group.streams.heartbeat.interval.ms"),
    "streams.num.standby.replicas": ("0", TYPE_INT, "group.streams.num.standby.replicas"),
    "streams.initial.rebalance.delay.ms": ("3000", TYPE_INT,
                                           "group.streams.initial.rebalance.delay.ms"),
    "streams.assignment.interval.ms": ("1000", TYPE_INT, "group.streams.assignment.interval.ms"),
}


@pytest.fixture
def gbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory()


def incr(c, group, ops, validate=False):
    """ops: [(name, op, value)]; returns (error, message)."""
    r = c.request(44, 1, {"Resources": [{"ResourceType": GROUP, "ResourceName": group, "Configs": [
        {"Name": k, "ConfigOperation": op, "Value": v} for k, op, v in ops]}], "ValidateOnly": validate})
    (x,) = r["Responses"]
    assert (x["ResourceType"], x["ResourceName"]) == (GROUP, group), x
    return x["ErrorCode"], x["ErrorMessage"]


def describe(c, group, keys=None):
    """(error, {name: (value, source, type, [(synonym, value, source)])})."""
    (res,) = kg.describe_configs(c, GROUP, group, keys=keys, synonyms=True)["Results"]
    return res["ErrorCode"], {x["Name"]: (x["Value"], x["ConfigSource"], x["ConfigType"], [
        (s["Name"], s["Value"], s["Source"]) for s in x["Synonyms"]]) for x in res["Configs"]}


def group_name():
    return "g4009-" + uuid.uuid4().hex[:8]


def own(c, group):
    err, d = describe(c, group)
    assert err == 0
    return {k: v[0] for k, v in d.items() if v[1] == SRC_GROUP}


def own_is(c, group, want, timeout=10.0):
    """Whether the group's own values become `want`: a Kafka broker describes a change
    once its metadata has caught up, moments after answering it (skiffd at once)."""
    deadline = time.time() + timeout
    while True:
        got = own(c, group)
        if got == want or time.time() > deadline:
            assert got == want
            return True
        time.sleep(0.1)


def test_defaults_of_any_group(gbroker):
    c = kg.connect(gbroker.bootstrap)
    err, d = describe(c, group_name())
    assert err == 0
    assert {k: (v[0], v[1], v[2], v[3]) for k, v in d.items()} == {
        k: (dv, SRC_DEFAULT, t, [(syn, dv, SRC_DEFAULT)]) for k, (dv, t, syn) in DEFAULTS.items()}
    # Only the keys asked; unknown ones are left out.
    err, d = describe(c, group_name(), keys=["consumer.session.timeout.ms", "no.such.config"])
    assert (err, list(d)) == (0, ["consumer.session.timeout.ms"])
    (res,) = kg.describe_configs(c, GROUP, "")["Results"]
    assert res["ErrorCode"] == INVALID_REQUEST, res


def test_set_delete_and_validate_only(gbroker):
    c = kg.connect(gbroker.bootstrap)
    g = group_name()
    assert incr(c, g, [("consumer.session.timeout.ms", SET, "50000"),
                       ("share.auto.offset.reset", SET, "by_duration:PT1H"),
                       ("share.renew.acknowledge.enable", SET, "FALSE")]) == (0, None)
    assert own_is(c, g, {"consumer.session.timeout.ms": "50000",
                         "share.auto.offset.reset": "by_duration:PT1H",
                         "share.renew.acknowledge.enable": "false"})
    err, d = describe(c, g, keys=["consumer.session.timeout.ms"])
    assert d["consumer.session.timeout.ms"][3] == [
        ("consumer.session.timeout.ms", "50000", SRC_GROUP),
        ("group.consumer.session.timeout.ms", "45000", SRC_DEFAULT)], d
    assert incr(c, g, [("consumer.session.timeout.ms", DELETE, None),
                       ("streams.num.standby.replicas", SET, "2")]) == (0, None)
    assert own_is(c, g, {"share.auto.offset.reset": "by_duration:PT1H",
                         "share.renew.acknowledge.enable": "false",
                         "streams.num.standby.replicas": "2"})
    # Validate only: checked, not kept.
    assert incr(c, g, [("share.delivery.count.limit", SET, "3")], validate=True) == (0, None)
    assert "share.delivery.count.limit" not in own(c, g)
    # Values are kept as parsed: trimmed, numbers and booleans in their usual form.
    assert incr(c, g, [("consumer.heartbeat.interval.ms", SET, " +6000 "),
                       ("share.renew.acknowledge.enable", SET, " True")]) == (0, None)
    assert own_is(c, g, {"share.auto.offset.reset": "by_duration:PT1H",
                         "share.renew.acknowledge.enable": "true",
                         "streams.num.standby.replicas": "2",
                         "consumer.heartbeat.interval.ms": "6000"})
    # The legacy AlterConfigs replaces the whole set.
    r = c.request(33, 2, {"Resources": [{"ResourceType": GROUP, "ResourceName": g, "Configs": [
        {"Name": "share.isolation.level", "Value": "read_committed"}]}]})
    assert r["Responses"][0]["ErrorCode"] == 0, r
    assert own_is(c, g, {"share.isolation.level": "read_committed"})
    # Deleting what is not set is no error; the group is back to its defaults.
    assert incr(c, g, [("share.isolation.level", DELETE, None),
                       ("consumer.heartbeat.interval.ms", DELETE, None)]) == (0, None)
    assert own_is(c, g, {})


@pytest.mark.parametrize("name,value,message", [
    ("consumer.session.timeout.ms", "44999", "consumer.session.timeout.ms must be greater than or "
     "equal to group.consumer.min.session.timeout.ms"),
    ("consumer.session.timeout.ms", "60001", "consumer.session.timeout.ms must be less than or "
     "equal to group.consumer.max.session.timeout.ms"),
    ("consumer.session.timeout.ms", "0", "Invalid value 0 for configuration "
     "consumer.session.timeout.ms: Value must be at least 1"),
    ("consumer.heartbeat.interval.ms", "abc", "Invalid value abc for configuration "
     "consumer.heartbeat.interval.ms: Not a number of type INT"),
    ("consumer.heartbeat.interval.ms", "2147483648", "Invalid value 2147483648 for configuration "
     "consumer.heartbeat.interval.ms: Not a number of type INT"),
    ("consumer.assignment.interval.ms", "15001", "consumer.assignment.interval.ms must be less "
     "than or equal to group.consumer.max.assignment.interval.ms"),
    ("share.record.lock.duration.ms", "999", "Invalid value 999 for configuration "
     "share.record.lock.duration.ms: Value must be at least 1000"),
    ("share.record.lock.duration.ms", "14999", "share.record.lock.duration.ms must be greater "
     "than or equal to group.share.min.record.lock.duration.ms"),
    ("share.delivery.count.limit", "11", "share.delivery.count.limit must be less than or equal "
     "to group.share.max.delivery.count.limit"),
    ("share.partition.max.record.locks", "99", "Invalid value 99 for configuration "
     "share.partition.max.record.locks: Value must be at least 100"),
    ("streams.num.standby.replicas", "3", "streams.num.standby.replicas must be less than or "
     "equal to group.streams.max.standby.replicas"),
    ("share.isolation.level", "READ_COMMITTED", "Invalid value READ_COMMITTED for configuration "
     "share.isolation.level: String must be one of: read_committed, read_uncommitted"),
    ("share.renew.acknowledge.enable", "yes", "Invalid value yes for configuration "
     "share.renew.acknowledge.enable: Expected value to be either true or false"),
    ("share.auto.offset.reset", "by_duration:xx", None),
    ("no.such.config", "1", "Unknown group config name: no.such.config"),
])
def test_invalid_values(gbroker, name, value, message):
    c = kg.connect(gbroker.bootstrap)
    g = group_name()
    err, msg = incr(c, g, [(name, SET, value)])
    assert err == INVALID_CONFIG, (err, msg)
    if message:
        assert msg == message
    else:
        assert msg and name in msg and value in msg, msg
    assert own_is(c, g, {})


def test_bounds_are_inclusive(gbroker):
    c = kg.connect(gbroker.bootstrap)
    g = group_name()
    for name, value in (("consumer.session.timeout.ms", "45000"), ("consumer.session.timeout.ms", "60000"),
                        ("consumer.heartbeat.interval.ms", " 15000 "), ("share.delivery.count.limit", "2"),
                        ("share.partition.max.record.locks", "4000"),
                        ("streams.initial.rebalance.delay.ms", "2147483647"),
                        ("share.auto.offset.reset", "earliest")):
        assert incr(c, g, [(name, SET, value)], validate=True) == (0, None), (name, value)


def test_bad_requests(gbroker):
    c = kg.connect(gbroker.bootstrap)
    g = group_name()
    assert incr(c, "", [("consumer.session.timeout.ms", SET, "50000")])[0] == INVALID_REQUEST
    assert incr(c, g, [("consumer.session.timeout.ms", SET, None)])[0] == INVALID_REQUEST
    assert incr(c, g, [("consumer.session.timeout.ms", APPEND, "1")]) == (
        INVALID_CONFIG, "Can't APPEND to key consumer.session.timeout.ms because its type is not LIST.")
    assert incr(c, g, [("consumer.session.timeout.ms", SUBTRACT, "1")])[0] == INVALID_CONFIG
    assert own_is(c, g, {})


def test_group_configs_survive_a_restart(broker_factory):
    if harness.external():
        pytest.skip("restarts the broker it started")
    b = broker_factory()
    c = kg.connect(b.bootstrap)
    g, h = group_name(), group_name()
    assert incr(c, g, [("consumer.session.timeout.ms", SET, "55000")]) == (0, None)
    assert incr(c, h, [("streams.num.standby.replicas", SET, "1")]) == (0, None)
    assert incr(c, h, [("streams.num.standby.replicas", DELETE, None)]) == (0, None)
    c.close()
    b.kill()
    b.start()
    c = kg.connect(b.bootstrap)
    assert own_is(c, g, {"consumer.session.timeout.ms": "55000"})
    assert own_is(c, h, {})


def configs_out(r):
    """{name: value} of the lines kafka-configs --describe prints."""
    out = {}
    for ln in r["out"].splitlines():
        if ln.startswith("  ") and "=" in ln:
            name, rest = ln.strip().split("=", 1)
            out[name] = rest.split(" sensitive=")[0]
    return out


def test_kafka_configs_tool_and_admin_client(gbroker):
    bs, g = gbroker.bootstrap, group_name()
    cfg = ["configs", "--bootstrap-server", bs, "--entity-type", "groups", "--entity-name", g]
    # The pauses let a Kafka broker's metadata catch up with a change (skiffd needs none).
    res = jtools.tools(
        cfg + ["--alter", "--add-config",
               "consumer.session.timeout.ms=50000,consumer.heartbeat.interval.ms=6000"],
        ["sleep", "500"],
        cfg + ["--describe"],
        cfg + ["--describe", "--all"],
        cfg + ["--alter", "--delete-config", "consumer.heartbeat.interval.ms"],
        cfg + ["--alter", "--add-config", "consumer.session.timeout.ms=1"],
        ["sleep", "500"],
        cfg + ["--describe"],
        ["admin-group-configs", bs, g, "share.isolation.level=read_committed",
         "consumer.session.timeout.ms="])
    add, _, desc, desc_all, delete, bad, _, desc2, admin = res
    for r in (add, desc, desc_all, delete, desc2, admin):
        assert r["exit"] in (None, 0) and "error" not in r, jtools.show(r)
    assert configs_out(desc) == {"consumer.session.timeout.ms": "50000",
                                 "consumer.heartbeat.interval.ms": "6000"}, jtools.show(desc)
    every = configs_out(desc_all)
    assert set(every) == set(DEFAULTS), jtools.show(desc_all)
    assert every["consumer.session.timeout.ms"] == "50000" and every["share.delivery.count.limit"] == "5"
    assert bad["exit"] == 1 and "group.consumer.min.session.timeout.ms" in bad["out"] + bad["err"], \
        jtools.show(bad)
    assert configs_out(desc2) == {"consumer.session.timeout.ms": "50000"}, jtools.show(desc2)
    got = admin["result"]
    assert got["share.isolation.level"] == ["read_committed", "DYNAMIC_GROUP_CONFIG"], got
    assert got["consumer.session.timeout.ms"] == ["45000", "DEFAULT_CONFIG"], got
    assert len(got) == len(DEFAULTS), got
