"""The classic group protocol on the wire: the error paths clients rarely reach.

Raw requests (kproto + kgroup) walk members through FindCoordinator, JoinGroup,
SyncGroup, Heartbeat and LeaveGroup and check each error code against what
Apache Kafka 4.3.1 answers (the expectations were taken from it, and the tests
run against it with SKIFF_TEST_EXTERNAL). Session timeouts stay at Kafka's
minimum of 6 s where the test must also run against Kafka; rebalance timeouts
are short, and the initial rebalance delay is 0 (kafka-ref.sh sets it too).
"""

import time
import uuid

import pytest

import harness
import kgroup as kg
import kproto
from kgroup import (FENCED_INSTANCE_ID, ILLEGAL_GENERATION, INCONSISTENT_GROUP_PROTOCOL,
                    INVALID_GROUP_ID, INVALID_SESSION_TIMEOUT, MEMBER_ID_REQUIRED,
                    REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID)

FAST = {"group.initial.rebalance.delay.ms": "0"}


@pytest.fixture
def gbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def gid():
    return "g4001-" + uuid.uuid4().hex[:8]


def setup_topic(bs, topic, parts=2):
    c = kg.connect(bs)
    kproto.create_topic(c, topic, parts)
    kg.find_coordinator(c, "warm-up")
    return c


def test_find_coordinator_every_version(gbroker):
    c = kg.connect(gbroker.bootstrap)
    for v in range(0, 4):
        r = kg.find_coordinator(c, gid(), 0, v)
        assert r["ErrorCode"] == 0 and (r["Host"], r["Port"]) == (gbroker.host, gbroker.port), (v, r)
        assert r["NodeId"] >= 0
    for v in (4, 5, 6):
        keys = [gid(), gid(), gid()]
        r = c.request(10, v, {"KeyType": 0, "CoordinatorKeys": keys})
        got = [(x["Key"], x["ErrorCode"], x["Host"], x["Port"]) for x in r["Coordinators"]]
        assert got == [(k, 0, gbroker.host, gbroker.port) for k in keys], (v, r)
    # Transactions: this node coordinates transactional ids too (a single node).
    for v in (1, 3):
        r = kg.find_coordinator(c, "txn-" + gid(), 1, v)
        assert r["ErrorCode"] == 0 and (r["Host"], r["Port"]) == (gbroker.host, gbroker.port), (v, r)
    r = kg.find_coordinator(c, "txn-" + gid(), 1, 4)
    assert [(x["ErrorCode"], x["Host"], x["Port"]) for x in r["Coordinators"]] == \
        [(0, gbroker.host, gbroker.port)], r
    # Share groups (key type 2) are not enabled: INVALID_REQUEST, as Kafka 4.3.1 answers.
    r = kg.find_coordinator(c, gid(), 2, 6)
    assert [x["ErrorCode"] for x in r["Coordinators"]] == [kg.INVALID_REQUEST], r


def test_two_step_join_sync_heartbeat_fencing(gbroker, topic_name):
    c = setup_topic(gbroker.bootstrap, topic_name)
    g = gid()
    subs = dict(topics=[topic_name], session_ms=10000, rebalance_ms=5000)
    # v4+: a dynamic member without an id is sent back with one (MEMBER_ID_REQUIRED).
    r = kg.join(c, g, 4, **subs)
    assert r["ErrorCode"] == MEMBER_ID_REQUIRED and r["MemberId"].startswith("kgroup-"), r
    assert r["GenerationId"] == -1, r
    pending = r["MemberId"]
    # The pending id is no member yet.
    assert kg.heartbeat(c, g, 0, pending)["ErrorCode"] == UNKNOWN_MEMBER_ID
    r = kg.join(c, g, 4, member_id=pending, **subs)
    assert r["ErrorCode"] == 0 and r["MemberId"] == pending and r["Leader"] == pending, r
    assert r["GenerationId"] == 1 and r["ProtocolName"] == "range", r
    assert [m["MemberId"] for m in r["Members"]] == [pending], r
    assert r["Members"][0]["Metadata"] == kg.subscription([topic_name]), r
    m, gen = pending, r["GenerationId"]

    # CompletingRebalance: heartbeats are fine, commits wait for the assignment.
    assert kg.heartbeat(c, g, gen, m)["ErrorCode"] == 0
    assert kg.commit(c, g, {(topic_name, 0): 1}, gen, m) == {(topic_name, 0): REBALANCE_IN_PROGRESS}
    # Fencing, with Kafka's codes.
    assert kg.heartbeat(c, g, gen, "nobody")["ErrorCode"] == UNKNOWN_MEMBER_ID
    assert kg.heartbeat(c, g, gen + 5, m)["ErrorCode"] == ILLEGAL_GENERATION
    assert kg.sync(c, g, gen + 1, m)["ErrorCode"] == ILLEGAL_GENERATION
    assert kg.sync(c, g, gen, "nobody")["ErrorCode"] == UNKNOWN_MEMBER_ID
    r = kg.sync(c, g, gen, m, version=5, protocol_type="consumer", protocol_name="roundrobin")
    assert r["ErrorCode"] == INCONSISTENT_GROUP_PROTOCOL, r
    mine = kg.assignment({topic_name: [0, 1]})
    r = kg.sync(c, g, gen, m, {m: mine}, version=5, protocol_type="consumer", protocol_name="range")
    assert r["ErrorCode"] == 0 and r["Assignment"] == mine, r
    assert (r["ProtocolType"], r["ProtocolName"]) == ("consumer", "range"), r

    # Stable.
    assert kg.heartbeat(c, g, gen, m)["ErrorCode"] == 0
    assert kg.heartbeat(c, g, gen, m, version=0)["ErrorCode"] == 0
    assert kg.heartbeat(c, g, gen, m, version=4)["ErrorCode"] == 0
    assert kg.commit(c, g, {(topic_name, 0): 5}, gen, m) == {(topic_name, 0): 0}
    assert kg.commit(c, g, {(topic_name, 0): 5}, gen + 1, m) == {(topic_name, 0): ILLEGAL_GENERATION}
    assert kg.commit(c, g, {(topic_name, 0): 5}, gen, "nobody") == {(topic_name, 0): UNKNOWN_MEMBER_ID}
    # A SyncGroup again in Stable returns the member's assignment.
    assert kg.sync(c, g, gen, m)["Assignment"] == mine
    # A follower-style rejoin of the only (leader) member forces a new generation.
    r = kg.join(c, g, 4, member_id=m, **subs)
    assert r["ErrorCode"] == 0 and r["GenerationId"] == gen + 1 and r["Leader"] == m, r
    d = kg.describe_groups(c, [g])["Groups"][0]
    assert d["GroupState"] == "CompletingRebalance", d
    assert kg.heartbeat(c, g, gen, m)["ErrorCode"] == ILLEGAL_GENERATION
    assert kg.sync(c, g, gen + 1, m, {m: mine})["ErrorCode"] == 0

    # LeaveGroup v3: per-member results, an unknown member gets UNKNOWN_MEMBER_ID.
    r = kg.leave(c, g, members=[(m, None), ("nobody", None)])
    assert r["ErrorCode"] == 0, r
    assert [(x["MemberId"], x["ErrorCode"]) for x in r["Members"]] == [(m, 0), ("nobody", UNKNOWN_MEMBER_ID)], r
    d = kg.describe_groups(c, [g])["Groups"][0]
    assert (d["GroupState"], d["Members"], d["ProtocolType"]) == ("Empty", [], "consumer"), d
    assert kg.heartbeat(c, g, gen + 1, m)["ErrorCode"] == UNKNOWN_MEMBER_ID
    # An unknown group: the member gets UNKNOWN_MEMBER_ID (v3+ per member, v0-2 at the top).
    r = kg.leave(c, gid(), members=[(m, None)])
    assert (r["ErrorCode"], [x["ErrorCode"] for x in r["Members"]]) == (0, [UNKNOWN_MEMBER_ID]), r
    assert kg.leave(c, gid(), member_id=m, version=0)["ErrorCode"] == UNKNOWN_MEMBER_ID

    # A pending member may leave before it joins; its id is then unknown.
    g2 = gid()
    r = kg.join(c, g2, 5, **subs)
    assert r["ErrorCode"] == MEMBER_ID_REQUIRED
    r2 = kg.leave(c, g2, members=[(r["MemberId"], None)])
    assert [x["ErrorCode"] for x in r2["Members"]] == [0], r2
    assert kg.join(c, g2, 5, member_id=r["MemberId"], **subs)["ErrorCode"] == UNKNOWN_MEMBER_ID
    # Both groups are listed, Empty, though neither has committed offsets.
    listed = {x["GroupId"]: (x["GroupState"], x["ProtocolType"]) for x in kg.list_groups(c)["Groups"]}
    assert (listed.get(g), listed.get(g2)) == (("Empty", "consumer"), ("Empty", "")), listed


def test_old_join_versions_admit_directly(gbroker, topic_name):
    """JoinGroup v0-v3 (kafka-python 2.0.2 uses v2) have no two-step join."""
    c = setup_topic(gbroker.bootstrap, topic_name)
    for v in (0, 1, 2, 3):
        g = gid()
        r = kg.join(c, g, v, topics=[topic_name], session_ms=10000, rebalance_ms=5000)
        assert r["ErrorCode"] == 0 and r["GenerationId"] == 1 and r["Leader"] == r["MemberId"], (v, r)
        assert r["MemberId"], (v, r)
        m = r["MemberId"]
        assert kg.sync(c, g, 1, m, {m: b"x"}, version=0)["Assignment"] == b"x"
        assert kg.heartbeat(c, g, 1, m, version=0)["ErrorCode"] == 0
        assert kg.leave(c, g, member_id=m, version=0)["ErrorCode"] == 0


def test_join_validation_errors(gbroker, topic_name):
    c = setup_topic(gbroker.bootstrap, topic_name)
    g = gid()
    r = kg.join_two_step(c, g, 5, topics=[topic_name], session_ms=10000, rebalance_ms=5000)
    assert r["ErrorCode"] == 0, r
    # Another protocol type, or no protocol in common with the members.
    r = kg.join(c, g, 5, protocol_type="connect", topics=[topic_name])
    assert r["ErrorCode"] == INCONSISTENT_GROUP_PROTOCOL, r
    r = kg.join(c, g, 5, protocols=[("sticky-only", b"")])
    assert r["ErrorCode"] == INCONSISTENT_GROUP_PROTOCOL, r
    # Session timeout outside [group.min.session.timeout.ms 6000, max 1800000].
    for ms in (10, 5999, 1800001):
        r = kg.join(c, gid(), 5, session_ms=ms)
        assert r["ErrorCode"] == INVALID_SESSION_TIMEOUT, (ms, r)
    # A member id the group does not know, in a group that exists or not.
    assert kg.join(c, g, 5, member_id="nobody", topics=[topic_name])["ErrorCode"] == UNKNOWN_MEMBER_ID
    assert kg.join(c, gid(), 5, member_id="nobody")["ErrorCode"] == UNKNOWN_MEMBER_ID
    assert kg.join(c, "", 5)["ErrorCode"] == INVALID_GROUP_ID


def test_rebalance_with_two_members(gbroker, topic_name):
    bs = gbroker.bootstrap
    c1 = setup_topic(bs, topic_name)
    c2, c3 = kg.connect(bs, "c2"), kg.connect(bs, "c3")
    g = gid()
    subs = dict(topics=[topic_name], session_ms=10000, rebalance_ms=3000)
    r = kg.join(c1, g, 3, **subs)
    m1, gen = r["MemberId"], r["GenerationId"]
    assert kg.sync(c1, g, gen, m1, {m1: kg.assignment({topic_name: [0, 1]})})["ErrorCode"] == 0

    # A second member starts a rebalance; its join waits for the first to rejoin.
    b2 = kg.Background(kg.join, c2, g, 3, **subs)
    d = kg.wait_state(c3, g, "PreparingRebalance")
    assert not b2.done()
    assert len(d["Members"]) == 2, d
    # REBALANCE_IN_PROGRESS tells the first member to rejoin; it may still commit.
    assert kg.heartbeat(c1, g, gen, m1)["ErrorCode"] == REBALANCE_IN_PROGRESS
    assert kg.sync(c1, g, gen, m1)["ErrorCode"] == REBALANCE_IN_PROGRESS
    assert kg.commit(c1, g, {(topic_name, 0): 3}, gen, m1) == {(topic_name, 0): 0}
    r1 = kg.join(c1, g, 3, member_id=m1, **subs)
    r2 = b2.get()
    assert r1["ErrorCode"] == 0 and r2["ErrorCode"] == 0, (r1, r2)
    assert r1["GenerationId"] == r2["GenerationId"] == gen + 1
    assert r1["Leader"] == r2["Leader"] == m1, "the existing leader stays leader"
    m2, gen2 = r2["MemberId"], r1["GenerationId"]
    assert sorted(x["MemberId"] for x in r1["Members"]) == sorted([m1, m2]) and r2["Members"] == []
    assert kg.heartbeat(c1, g, gen, m1)["ErrorCode"] == ILLEGAL_GENERATION

    # The follower's SyncGroup waits for the leader's assignment.
    s2 = kg.Background(kg.sync, c2, g, gen2, m2)
    time.sleep(0.5)
    assert not s2.done(), "a follower's SyncGroup was answered before the leader's"
    assert kg.commit(c3, g, {(topic_name, 0): 3}, gen2, m2) == {(topic_name, 0): REBALANCE_IN_PROGRESS}
    a1, a2 = kg.assignment({topic_name: [0]}), kg.assignment({topic_name: [1]})
    assert kg.sync(c1, g, gen2, m1, {m1: a1, m2: a2})["Assignment"] == a1
    assert s2.get()["Assignment"] == a2
    d = kg.describe_groups(c3, [g])["Groups"][0]
    assert (d["GroupState"], d["ProtocolType"], d["ProtocolData"]) == ("Stable", "consumer", "range")
    assigned = {x["MemberId"]: x["MemberAssignment"] for x in d["Members"]}
    assert assigned == {m1: a1, m2: a2}, d
    assert {x["ClientId"] for x in d["Members"]} == {"kgroup", "c2"}, d

    # A third member joins; m2 never rejoins and is dropped when the rebalance
    # timeout (3 s) is over.
    b3 = kg.Background(kg.join, c3, g, 3, **subs)
    kg.wait_state(c1, g, "PreparingRebalance")
    while len(kg.describe_groups(c1, [g])["Groups"][0]["Members"]) < 3:
        time.sleep(0.05)
    t0 = time.time()
    r1 = kg.join(c1, g, 3, member_id=m1, timeout=20, **subs)
    r3 = b3.get()
    took = time.time() - t0
    assert r1["ErrorCode"] == 0 and r3["ErrorCode"] == 0, (r1, r3)
    assert sorted(x["MemberId"] for x in r1["Members"]) == sorted([m1, r3["MemberId"]]), r1
    assert 1.5 < took < 10, "rebalance completed after %.1fs with a 3s rebalance timeout" % took
    assert kg.heartbeat(c2, g, gen2, m2)["ErrorCode"] == UNKNOWN_MEMBER_ID

    # LeaveGroup v0 of one member starts a rebalance for the other.
    gen3, m3 = r1["GenerationId"], r3["MemberId"]
    assert kg.leave(c3, g, member_id=m3, version=0)["ErrorCode"] == 0
    assert kg.heartbeat(c1, g, gen3, m1)["ErrorCode"] == REBALANCE_IN_PROGRESS
    r1 = kg.join(c1, g, 3, member_id=m1, **subs)
    assert (r1["ErrorCode"], r1["GenerationId"], len(r1["Members"])) == (0, gen3 + 1, 1), r1


def test_protocol_selection_by_votes(gbroker):
    """Among the protocols every member supports, each votes for its first; most votes win."""
    bs = gbroker.bootstrap
    c1, c2, c3 = kg.connect(bs, "c1"), kg.connect(bs, "c2"), kg.connect(bs, "c3")
    g = gid()
    p1 = [("a", b"1"), ("b", b"2"), ("c", b"3")]
    r = kg.join(c1, g, 3, protocols=p1, session_ms=10000, rebalance_ms=3000)
    assert r["ProtocolName"] == "a", r  # alone, its first choice
    m1 = r["MemberId"]
    kg.sync(c1, g, 1, m1, {m1: b""})
    b2 = kg.Background(kg.join, c2, g, 3, protocols=[("b", b""), ("c", b""), ("a", b"")],
                       session_ms=10000, rebalance_ms=3000)
    kg.wait_state(c1, g, "PreparingRebalance")
    b3 = kg.Background(kg.join, c3, g, 3, protocols=[("c", b""), ("b", b"")],
                       session_ms=10000, rebalance_ms=3000)
    deadline = time.time() + 10
    while len(kg.describe_groups(c1, [g])["Groups"][0]["Members"]) < 3:
        assert time.time() < deadline, "the third member never showed up"
        time.sleep(0.05)
    r1 = kg.join(c1, g, 3, member_id=m1, protocols=p1, session_ms=10000, rebalance_ms=3000)
    r2, r3 = b2.get(), b3.get()
    # Candidates b and c (a lacks m3): m1 votes b, m2 b, m3 c.
    assert {r1["ProtocolName"], r2["ProtocolName"], r3["ProtocolName"]} == {"b"}, (r1, r2, r3)
    assert r1["GenerationId"] == 2 and len(r1["Members"]) == 3
    # The leader sees each member's metadata for the chosen protocol.
    md = {x["MemberId"]: x["Metadata"] for x in r1["Members"]}
    assert md[m1] == b"2", md


def test_static_membership(gbroker, topic_name):
    bs = gbroker.bootstrap
    c1 = setup_topic(bs, topic_name)
    c2, c3 = kg.connect(bs, "c2"), kg.connect(bs, "c3")
    g = gid()
    subs = dict(topics=[topic_name], session_ms=10000, rebalance_ms=3000)
    # A static member (group.instance.id) joins in one step, even with v5.
    r = kg.join(c1, g, 5, instance_id="inst-1", **subs)
    assert r["ErrorCode"] == 0 and r["GenerationId"] == 1, r
    assert r["Members"][0]["GroupInstanceId"] == "inst-1", r
    s1 = r["MemberId"]
    mine = kg.assignment({topic_name: [0, 1]})
    assert kg.sync(c1, g, 1, s1, {s1: mine}, instance_id="inst-1")["ErrorCode"] == 0
    d = kg.describe_groups(c3, [g])["Groups"][0]
    assert [x["GroupInstanceId"] for x in d["Members"]] == ["inst-1"], d

    # The same instance restarts (new connection, no member id): it gets a new id,
    # without a rebalance, and its old id is fenced.
    r = kg.join(c2, g, 5, instance_id="inst-1", **subs)
    s2 = r["MemberId"]
    assert r["ErrorCode"] == 0 and s2 != s1 and r["GenerationId"] == 1, r
    assert r["Leader"] != s2 and r["Members"] == [], \
        "a rejoining static leader must not be asked to assign again: %r" % r
    assert kg.sync(c2, g, 1, s2, instance_id="inst-1")["Assignment"] == mine
    assert kg.describe_groups(c3, [g])["Groups"][0]["GroupState"] == "Stable"
    assert kg.heartbeat(c2, g, 1, s2, instance_id="inst-1")["ErrorCode"] == 0
    assert kg.heartbeat(c1, g, 1, s1, instance_id="inst-1")["ErrorCode"] == FENCED_INSTANCE_ID
    assert kg.sync(c1, g, 1, s1, instance_id="inst-1")["ErrorCode"] == FENCED_INSTANCE_ID
    assert kg.join(c1, g, 5, member_id=s1, instance_id="inst-1", **subs)["ErrorCode"] == FENCED_INSTANCE_ID
    assert kg.commit(c1, g, {(topic_name, 0): 1}, 1, s1, instance_id="inst-1") == \
        {(topic_name, 0): FENCED_INSTANCE_ID}
    r = kg.leave(c1, g, members=[(s1, "inst-1")])
    assert [x["ErrorCode"] for x in r["Members"]] == [FENCED_INSTANCE_ID], r
    # An instance id the group does not know: UNKNOWN_MEMBER_ID, whatever the member id.
    assert kg.heartbeat(c2, g, 1, s2, instance_id="inst-2")["ErrorCode"] == UNKNOWN_MEMBER_ID
    assert kg.commit(c2, g, {(topic_name, 0): 1}, 1, s2, instance_id="inst-2") == \
        {(topic_name, 0): UNKNOWN_MEMBER_ID}
    assert kg.commit(c2, g, {(topic_name, 0): 7}, 1, s2, instance_id="inst-1") == {(topic_name, 0): 0}

    # LeaveGroup by instance id alone (what kafka-consumer-groups --delete-members does).
    r = kg.leave(c3, g, members=[("", "inst-9"), ("", "inst-1")])
    assert [x["ErrorCode"] for x in r["Members"]] == [UNKNOWN_MEMBER_ID, 0], r
    d = kg.describe_groups(c3, [g])["Groups"][0]
    assert (d["GroupState"], d["Members"]) == ("Empty", []), d


def test_session_timeout_removes_a_silent_member(broker_factory, topic_name):
    """A member that stops heartbeating is removed after its session timeout.

    Against Kafka the session timeout cannot go below 6 s; skiffd is started
    with a 1 s minimum and the member asks for 1.5 s."""
    if harness.external():
        b, session = harness.ExternalBroker(harness.external()), 6000
    else:
        b, session = broker_factory(dict(FAST, **{"group.min.session.timeout.ms": "1000"})), 1500
    c1 = setup_topic(b.bootstrap, topic_name)
    c2 = kg.connect(b.bootstrap, "c2")
    g = gid()
    subs = dict(topics=[topic_name], session_ms=session, rebalance_ms=session)
    r = kg.join(c1, g, 3, **subs)
    m1 = r["MemberId"]
    kg.sync(c1, g, 1, m1, {m1: b""})
    # m2 joins and stays alive by heartbeating; m1 goes silent.
    b2 = kg.Background(kg.join, c2, g, 3, **subs)
    kg.wait_state(c1, g, "PreparingRebalance")
    r1 = kg.join(c1, g, 3, member_id=m1, **subs)
    r2 = b2.get()
    m2, gen = r2["MemberId"], r2["GenerationId"]
    assert kg.sync(c1, g, gen, m1, {m1: b"1", m2: b"2"})["ErrorCode"] == 0
    assert kg.sync(c2, g, gen, m2)["Assignment"] == b"2"
    del r1
    t0 = time.time()
    deadline = t0 + session / 1000.0 * 3 + 5
    while True:
        e = kg.heartbeat(c2, g, gen, m2)["ErrorCode"]
        if e == REBALANCE_IN_PROGRESS:
            break
        assert e == 0 and time.time() < deadline, "m1's session never expired (heartbeat %d)" % e
        time.sleep(0.2)
    took = time.time() - t0
    assert took >= session / 1000.0 * 0.8, "m1 expired after %.1fs, session %dms" % (took, session)
    r = kg.join(c2, g, 3, member_id=m2, **subs)
    assert (r["ErrorCode"], r["Leader"], [x["MemberId"] for x in r["Members"]]) == (0, m2, [m2]), r
    assert kg.heartbeat(c1, g, gen, m1)["ErrorCode"] == UNKNOWN_MEMBER_ID
    # The last member leaves by silence too: the group ends Empty.
    kg.sync(c2, g, r["GenerationId"], m2, {m2: b""})
    deadline = time.time() + session / 1000.0 * 3 + 5
    while kg.describe_groups(c1, [g])["Groups"][0]["GroupState"] != "Empty":
        assert time.time() < deadline, "the silent last member was never removed"
        time.sleep(0.2)
