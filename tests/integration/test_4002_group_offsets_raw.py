"""Committed offsets and group administration on the wire.

OffsetCommit v2-v9 and OffsetFetch v1-v9 (the v8+ multi-group layout, null
topics meaning "all", RequireStable), who may commit to which group
(generation -1 from an admin, Empty and absent groups), metadata size,
DeleteGroups, OffsetDelete, DescribeGroups and ListGroups. The expectations
are Apache Kafka 4.3.1's answers. The last tests are Skiff's own: offsets
survive SIGKILL and restart, and offsets of empty groups expire after
offsets.retention.minutes.
"""

import threading
import time
import uuid

import pytest

import harness
import kgroup as kg
import kproto
from kgroup import (GROUP_ID_NOT_FOUND, GROUP_SUBSCRIBED_TO_TOPIC, ILLEGAL_GENERATION,
                    NON_EMPTY_GROUP, OFFSET_METADATA_TOO_LARGE, UNKNOWN_MEMBER_ID)

UNKNOWN_TOPIC_OR_PARTITION = 3
FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def gbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def gid():
    return "g4002-" + uuid.uuid4().hex[:8]


def setup_topic(bs, topic, parts=3):
    c = kg.connect(bs)
    kproto.create_topic(c, topic, parts)
    kg.find_coordinator(c, "warm-up")
    return c


def stable_member(c, g, topic):
    """One member, Stable, subscribed to topic; returns (member id, generation)."""
    r = kg.join_two_step(c, g, 5, topics=[topic], session_ms=30000, rebalance_ms=5000)
    m, gen = r["MemberId"], r["GenerationId"]
    assert kg.sync(c, g, gen, m, {m: kg.assignment({topic: [0]})})["ErrorCode"] == 0
    return m, gen


def test_commit_and_fetch_every_version(gbroker, topic_name):
    c = setup_topic(gbroker.bootstrap, topic_name)
    g = gid()
    for v in range(2, 10):
        # v2-v9 by an admin (generation -1): each version's write reads back.
        errs = kg.commit(c, g, {(topic_name, 0): 100 + v, (topic_name, 1): 200 + v}, version=v,
                         metadata="meta-v%d" % v)
        assert errs == {(topic_name, 0): 0, (topic_name, 1): 0}, (v, errs)
        for fv in range(1, 8):
            top, offs = kg.fetch_offsets(c, g, {topic_name: [0, 1, 2]}, version=fv)
            assert top == 0
            assert offs == {(topic_name, 0): (100 + v, "meta-v%d" % v, 0),
                            (topic_name, 1): (200 + v, "meta-v%d" % v, 0),
                            (topic_name, 2): (-1, "", 0)}, (v, fv, offs)
    # CommittedLeaderEpoch (v6+) comes back from OffsetFetch v5+.
    resp = c.request(8, 8, {"GroupId": g, "GenerationIdOrMemberEpoch": -1, "MemberId": "",
                            "GroupInstanceId": None, "Topics": [{"Name": topic_name, "Partitions": [
                                {"PartitionIndex": 2, "CommittedOffset": 42,
                                 "CommittedLeaderEpoch": 7, "CommittedMetadata": None}]}]})
    assert resp["Topics"][0]["Partitions"][0]["ErrorCode"] == 0, resp
    r = c.request(9, 6, {"GroupId": g, "Topics": [{"Name": topic_name, "PartitionIndexes": [2]}],
                         "RequireStable": False})
    p = r["Topics"][0]["Partitions"][0]
    assert (p["CommittedOffset"], p["CommittedLeaderEpoch"]) == (42, 7), r
    # A null metadata is stored as "" (Kafka does the same).
    assert p["Metadata"] == "", r


def test_metadata_is_a_byte_string(gbroker, topic_name):
    """Commit metadata with NUL bytes comes back whole, from OffsetFetch v1-v7."""
    c = setup_topic(gbroker.bootstrap, topic_name)
    g = gid()
    metas = {0: "a\x00b", 1: "\x00" * 16 + "tail", 2: ("x\x00" * 2048)}
    for p, m in metas.items():
        assert kg.commit(c, g, {(topic_name, p): 10 + p}, metadata=m) == {(topic_name, p): 0}
    for fv in range(1, 8):
        top, offs = kg.fetch_offsets(c, g, {topic_name: [0, 1, 2]}, version=fv)
        assert top == 0
        assert offs == {(topic_name, p): (10 + p, m, 0) for p, m in metas.items()}, fv


def test_offset_fetch_all_topics_and_multi_group(gbroker, topic_name):
    c = setup_topic(gbroker.bootstrap, topic_name)
    other = topic_name + "-b"
    kproto.create_topic(c, other, 1)
    g1, g2, g3 = gid(), gid(), gid()
    assert set(kg.commit(c, g1, {(topic_name, 0): 5, (topic_name, 2): 6, (other, 0): 7}).values()) == {0}
    assert set(kg.commit(c, g2, {(other, 0): 9}).values()) == {0}
    # v2+: null topics = everything the group committed; a top-level error code.
    for v in (2, 5, 7):
        top, offs = kg.fetch_offsets(c, g1, None, version=v)
        assert top == 0 and offs == {(topic_name, 0): (5, "", 0), (topic_name, 2): (6, "", 0),
                                     (other, 0): (7, "", 0)}, (v, offs)
    top, offs = kg.fetch_offsets(c, g3, None)
    assert (top, offs) == (0, {}), "a group without offsets has none"
    top, offs = kg.fetch_offsets(c, g3, {topic_name: [0]})
    assert offs == {(topic_name, 0): (-1, "", 0)}
    # v8/v9: several groups in one request, each with its topics or null, and RequireStable.
    for v in (8, 9):
        r = c.request(9, v, {"Groups": [
            {"GroupId": g1, "MemberId": None, "MemberEpoch": -1, "Topics": None},
            {"GroupId": g2, "MemberId": None, "MemberEpoch": -1,
             "Topics": [{"Name": other, "PartitionIndexes": [0]}, {"Name": topic_name, "PartitionIndexes": [1]}]},
            {"GroupId": g3, "MemberId": None, "MemberEpoch": -1, "Topics": None}],
            "RequireStable": True})
        got = {grp["GroupId"]: (grp["ErrorCode"], {(t["Name"], p["PartitionIndex"]): (
            p["CommittedOffset"], p["ErrorCode"]) for t in grp["Topics"] for p in t["Partitions"]})
            for grp in r["Groups"]}
        assert got == {
            g1: (0, {(topic_name, 0): (5, 0), (topic_name, 2): (6, 0), (other, 0): (7, 0)}),
            g2: (0, {(other, 0): (9, 0), (topic_name, 1): (-1, 0)}),
            g3: (0, {})}, (v, got)
        assert [grp["GroupId"] for grp in r["Groups"]] == [g1, g2, g3]


def test_who_may_commit(gbroker, topic_name):
    c = setup_topic(gbroker.bootstrap, topic_name)
    tp = (topic_name, 0)
    g = gid()
    m, gen = stable_member(c, g, topic_name)
    # An admin (generation -1, no member id) may not commit to an active group.
    assert kg.commit(c, g, {tp: 1}) == {tp: UNKNOWN_MEMBER_ID}
    assert kg.commit(c, g, {tp: 1}, version=2) == {tp: UNKNOWN_MEMBER_ID}
    assert kg.commit(c, g, {tp: 1}, gen, m) == {tp: 0}
    assert kg.commit(c, g, {tp: 1}, gen + 1, m, version=9) == {tp: ILLEGAL_GENERATION}
    # Metadata up to offset.metadata.max.bytes (4096) is kept; one more byte is refused.
    assert kg.commit(c, g, {tp: 2}, gen, m, metadata="x" * 4096) == {tp: 0}
    assert kg.commit(c, g, {tp: 3}, gen, m, metadata="x" * 4097) == {tp: OFFSET_METADATA_TOO_LARGE}
    assert kg.fetch_offsets(c, g, {topic_name: [0]})[1][tp] == (2, "x" * 4096, 0)
    # Unknown topics and partitions.
    errs = kg.commit(c, g, {(topic_name + "-nope", 0): 1, (topic_name, 99): 1}, gen, m)
    assert errs == {(topic_name + "-nope", 0): UNKNOWN_TOPIC_OR_PARTITION,
                    (topic_name, 99): UNKNOWN_TOPIC_OR_PARTITION}, errs
    # Once the member left, the group is Empty: an admin may commit, a member of an
    # old generation is unknown.
    assert kg.leave(c, g, members=[(m, None)])["Members"][0]["ErrorCode"] == 0
    assert kg.commit(c, g, {tp: 10}) == {tp: 0}
    assert kg.commit(c, g, {tp: 11}, gen, m) == {tp: UNKNOWN_MEMBER_ID}
    assert kg.commit(c, g, {tp: 11}, gen, m, version=9) == {tp: UNKNOWN_MEMBER_ID}
    assert kg.fetch_offsets(c, g, {topic_name: [0]})[1][tp] == (10, "", 0)
    # A group that does not exist: generation -1 creates it, a generation does not.
    g2 = gid()
    assert kg.commit(c, g2, {tp: 1}, 3, "someone", version=8) == {tp: ILLEGAL_GENERATION}
    assert kg.commit(c, g2, {tp: 1}, 3, "someone", version=9) == {tp: GROUP_ID_NOT_FOUND}
    assert kg.fetch_offsets(c, g2, None)[1] == {}
    assert kg.commit(c, g2, {tp: 4}) == {tp: 0}
    assert kg.fetch_offsets(c, g2, None)[1] == {tp: (4, "", 0)}
    # ... and the group it made is Empty: a made-up member is unknown there.
    assert kg.commit(c, g2, {tp: 1}, 3, "someone") == {tp: UNKNOWN_MEMBER_ID}


def test_delete_groups_offset_delete_describe_list(gbroker, topic_name):
    c = setup_topic(gbroker.bootstrap, topic_name)
    other = topic_name + "-b"
    kproto.create_topic(c, other, 1)
    active, empty, absent = gid(), gid(), gid()
    m, gen = stable_member(c, active, topic_name)
    assert set(kg.commit(c, active, {(topic_name, 0): 3, (other, 0): 4}, gen, m).values()) == {0}
    assert set(kg.commit(c, empty, {(topic_name, 1): 5, (other, 0): 6}).values()) == {0}

    # OffsetDelete: not while a member subscribes to the topic; other topics may go.
    top, errs = kg.offset_delete(c, active, {topic_name: [0], other: [0]})
    assert top == 0 and errs == {(topic_name, 0): GROUP_SUBSCRIBED_TO_TOPIC, (other, 0): 0}, errs
    assert kg.fetch_offsets(c, active, None)[1] == {(topic_name, 0): (3, "", 0)}
    top, errs = kg.offset_delete(c, empty, {topic_name: [1, 7], other + "-nope": [0]})
    assert top == 0 and errs == {(topic_name, 1): 0, (topic_name, 7): UNKNOWN_TOPIC_OR_PARTITION,
                                 (other + "-nope", 0): UNKNOWN_TOPIC_OR_PARTITION}, errs
    assert kg.fetch_offsets(c, empty, None)[1] == {(other, 0): (6, "", 0)}
    assert kg.offset_delete(c, absent, {topic_name: [0]}) == (GROUP_ID_NOT_FOUND, {})

    # DescribeGroups: v0-v5 describe an unknown group as Dead, v6 says GROUP_ID_NOT_FOUND.
    for v in (0, 3, 5):
        d = kg.describe_groups(c, [absent], v)["Groups"][0]
        assert (d["ErrorCode"], d["GroupState"], d["Members"]) == (0, "Dead", []), (v, d)
    d = kg.describe_groups(c, [absent], 6)["Groups"][0]
    assert d["ErrorCode"] == GROUP_ID_NOT_FOUND and d["GroupState"] == "Dead", d
    assert d["ErrorMessage"] == "Group %s not found." % absent, d
    r = kg.describe_groups(c, [active, empty, absent], 6)["Groups"]
    assert [(x["GroupId"], x["ErrorCode"], x["GroupState"]) for x in r] == [
        (active, 0, "Stable"), (empty, 0, "Empty"), (absent, GROUP_ID_NOT_FOUND, "Dead")], r
    d = r[0]
    assert (d["ProtocolType"], d["ProtocolData"]) == ("consumer", "range"), d
    (mem,) = d["Members"]
    assert mem["MemberId"] == m and mem["ClientId"] == "kgroup", mem
    assert mem["ClientHost"].lstrip("/") == "127.0.0.1", mem
    assert mem["MemberMetadata"] == kg.subscription([topic_name]), mem
    assert mem["MemberAssignment"] == kg.assignment({topic_name: [0]}), mem
    assert d["AuthorizedOperations"] == -2147483648, d

    # ListGroups: v4 filters by state, v5 by type ("classic").
    def listed(v, states=None, types=None):
        body = {"StatesFilter": states or [], "TypesFilter": types or []}
        r = c.request(16, v, body)
        assert r["ErrorCode"] == 0, r
        return {x["GroupId"]: x for x in r["Groups"] if x["GroupId"] in (active, empty, absent)}

    for v in (0, 2, 3):
        got = listed(v)
        assert set(got) == {active, empty}, (v, got)
        assert got[active]["ProtocolType"] == "consumer", got
    got = listed(4)
    assert (got[active]["GroupState"], got[empty]["GroupState"]) == ("Stable", "Empty"), got
    assert set(listed(4, ["Stable"])) == {active}
    assert set(listed(4, ["empty"])) == {empty}, "state filters ignore case, as in Kafka"
    got = listed(5, types=["classic"])
    assert set(got) == {active, empty} and got[active]["GroupType"] == "classic", got
    assert set(listed(5, types=["consumer"])) == set()

    # DeleteGroups: NON_EMPTY_GROUP with members, GROUP_ID_NOT_FOUND when unknown.
    assert kg.delete_groups(c, [active, empty, absent]) == {
        active: NON_EMPTY_GROUP, empty: 0, absent: GROUP_ID_NOT_FOUND}
    assert kg.fetch_offsets(c, empty, None)[1] == {}
    assert kg.delete_groups(c, [empty]) == {empty: GROUP_ID_NOT_FOUND}
    assert kg.leave(c, active, members=[(m, None)])["Members"][0]["ErrorCode"] == 0
    assert kg.delete_groups(c, [active], version=0) == {active: 0}
    assert kg.fetch_offsets(c, active, None)[1] == {}
    assert set(listed(4)) == set()


@pytest.mark.restarts
def test_offsets_survive_sigkill_and_restart(broker_factory, topic_name):
    b = broker_factory(FAST)
    c = setup_topic(b.bootstrap, topic_name)
    gs = [gid() for _ in range(3)]
    want = {}
    for i, g in enumerate(gs):
        offs = {(topic_name, p): 1000 * i + 10 * p + 1 for p in range(3)}
        assert set(kg.commit(c, g, offs, metadata="m%d" % i).values()) == {0}
        want[g] = {tp: (o, "m%d" % i, 0) for tp, o in offs.items()}
    # Later commits replace earlier ones; a deleted group and deleted offsets stay deleted.
    assert kg.commit(c, gs[0], {(topic_name, 0): 5}, metadata="again\x00nul") == \
        {(topic_name, 0): 0}
    want[gs[0]][(topic_name, 0)] = (5, "again\x00nul", 0)
    assert kg.offset_delete(c, gs[1], {topic_name: [2]})[1] == {(topic_name, 2): 0}
    del want[gs[1]][(topic_name, 2)]
    assert kg.delete_groups(c, [gs[2]]) == {gs[2]: 0}
    want[gs[2]] = {}
    c.close()

    for round_ in range(2):
        b.kill()
        b.start()
        c = kg.connect(b.bootstrap)
        for g in gs:
            assert kg.fetch_offsets(c, g, None)[1] == want[g], (round_, g)
        # A group that exists only by its offsets is Empty after the restart.
        d = kg.describe_groups(c, [gs[0], gs[2]], 6)["Groups"]
        assert [(x["ErrorCode"], x["GroupState"]) for x in d] == [(0, "Empty"), (GROUP_ID_NOT_FOUND, "Dead")], d
        assert kg.commit(c, gs[0], {(topic_name, 1): 1}, 4, "old-member") == \
            {(topic_name, 1): UNKNOWN_MEMBER_ID}
        c.close()
    # And a group can be used again after the restart.
    c = kg.connect(b.bootstrap)
    m, gen = stable_member(c, gs[0], topic_name)
    assert kg.commit(c, gs[0], {(topic_name, 1): 77}, gen, m) == {(topic_name, 1): 0}
    b.kill()
    b.start()
    c = kg.connect(b.bootstrap)
    assert kg.fetch_offsets(c, gs[0], {topic_name: [1]})[1] == {(topic_name, 1): (77, "", 0)}


@pytest.mark.restarts
def test_offsets_of_empty_groups_expire(broker_factory, topic_name):
    """offsets.retention.minutes (minimum 1): an empty group's offsets go once the group
    has been empty, and each offset unchanged, that long; an active group's stay.

    This costs a minute: the property is in minutes, as in Kafka."""
    b = broker_factory(dict(FAST, **{"offsets.retention.minutes": "1",
                                     "offsets.retention.check.interval.ms": "500"}))
    c = setup_topic(b.bootstrap, topic_name)
    active, empty, late, gone = gid(), gid(), gid(), gid()
    # A group without offsets is forgotten once Empty (at the next check).
    gm, _ = stable_member(c, gone, topic_name)
    assert kg.leave(c, gone, members=[(gm, None)])["Members"][0]["ErrorCode"] == 0
    m, gen = stable_member(c, active, topic_name)
    tp = (topic_name, 0)
    assert kg.commit(c, active, {tp: 1}, gen, m) == {tp: 0}
    assert kg.commit(c, empty, {tp: 2}) == {tp: 0}
    stop = threading.Event()
    errors = []

    def heartbeats():
        hc = kg.connect(b.bootstrap, "heartbeats")
        while not stop.wait(1.0):
            e = kg.heartbeat(hc, active, gen, m)["ErrorCode"]
            if e:
                errors.append(e)
        hc.close()

    t = threading.Thread(target=heartbeats, daemon=True)
    t.start()
    try:
        time.sleep(30)
        assert kg.commit(c, late, {tp: 3}) == {tp: 0}  # younger: outlives the first check
        deadline = time.time() + 60
        while kg.fetch_offsets(c, empty, None)[1]:
            assert time.time() < deadline, "an empty group's offsets outlived 1 minute by far"
            time.sleep(0.5)
        expired_at = time.time()
        assert kg.fetch_offsets(c, active, None)[1] == {tp: (1, "", 0)}, \
            "the offsets of a group with a live member expired"
        assert kg.fetch_offsets(c, late, None)[1] == {tp: (3, "", 0)}, \
            "offsets younger than the retention expired"
        listed = {x["GroupId"] for x in kg.list_groups(c)["Groups"]}
        assert empty not in listed and active in listed and late in listed, listed
        assert gone not in listed, "an Empty group without offsets was never forgotten"
        d = kg.describe_groups(c, [gone], 6)["Groups"][0]
        assert d["ErrorCode"] == GROUP_ID_NOT_FOUND, d
    finally:
        stop.set()
        t.join(5)
    assert not errors, "heartbeats failed: %s" % errors
    assert expired_at > 0
    # The expiry is durable.
    b.kill()
    b.start()
    c = kg.connect(b.bootstrap)
    assert kg.fetch_offsets(c, empty, None)[1] == {}
    assert kg.fetch_offsets(c, active, None)[1] == {tp: (1, "", 0)}
