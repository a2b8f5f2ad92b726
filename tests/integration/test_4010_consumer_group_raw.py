"""The KIP-848 consumer group protocol on the wire: ConsumerGroupHeartbeat and
ConsumerGroupDescribe, with the OffsetCommit/OffsetFetch, ListGroups and
DescribeGroups answers for a consumer-protocol group.

Raw requests (kproto) play members the way a client does: join with epoch 0,
heartbeat, give up what the coordinator takes away and say so with the owned
partitions. The codes and the order of events are Apache Kafka 4.3.1's, and the
tests run against it too (SKIFF_TEST_AGAINST=kafka) except where marked.
"""

import time
import uuid

import pytest

import harness
import kgroup as kg
import kproto

FENCED_MEMBER_EPOCH = 110
UNRELEASED_INSTANCE_ID = 111
UNSUPPORTED_ASSIGNOR = 112
STALE_MEMBER_EPOCH = 113


@pytest.fixture
def cbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory({"group.initial.rebalance.delay.ms": "0"})


def gid():
    return "g4010-" + uuid.uuid4().hex[:8]


def mid():
    return uuid.uuid4().hex[:22]


def prepare(bs, topic, parts=4):
    c = kg.connect(bs)
    kproto.create_topic(c, topic, parts)
    kg.find_coordinator(c, "warm-up")
    md = kproto.metadata(c, [topic], version=12)
    tid = md["Topics"][0]["TopicId"]
    return c, tid


def hb(c, group, member, epoch, topics=None, owned=None, instance=None, rebalance=-1,
       assignor=None, regex=None, version=1):
    """One ConsumerGroupHeartbeat, retried while the coordinator is loading (Kafka, just
    started, answers NOT_COORDINATOR until the group's offsets partition is loaded)."""
    deadline = time.time() + 20
    while True:
        r = c.request(68, version, {
            "GroupId": group, "MemberId": member, "MemberEpoch": epoch, "InstanceId": instance,
            "RackId": None, "RebalanceTimeoutMs": rebalance, "SubscribedTopicNames": topics,
            "SubscribedTopicRegex": regex, "ServerAssignor": assignor,
            "TopicPartitions": owned})
        if r["ErrorCode"] not in (14, 15, 16) or time.time() > deadline:
            return r
        time.sleep(0.2)


class Member:
    """A client's side of the protocol: what it owns, its epoch."""

    def __init__(self, c, group, topics, instance=None, member_id=None):
        self.c, self.group, self.topics, self.instance = c, group, topics, instance
        self.id = member_id or mid()
        self.epoch = 0
        self.owned = {}  # topic id -> sorted partitions
        self.changed = False

    def _owned_list(self):
        return [{"TopicId": t, "Partitions": ps} for t, ps in sorted(self.owned.items())]

    def beat(self, expect=0):
        full = self.epoch == 0
        r = hb(self.c, self.group, self.id, self.epoch,
               topics=self.topics if full else None,
               owned=[] if full else (self._owned_list() if self.changed else None),
               instance=self.instance, rebalance=30000 if full else -1)
        assert r["ErrorCode"] == expect, r
        if expect:
            return r
        self.changed = False
        self.epoch = r["MemberEpoch"]
        if r["Assignment"] is not None:
            new = {tp["TopicId"]: sorted(tp["Partitions"])
                   for tp in r["Assignment"]["TopicPartitions"] if tp["Partitions"]}
            self.changed = new != self.owned
            self.owned = new
        return r

    def count(self):
        return sum(len(p) for p in self.owned.values())

    def parts(self):
        return {(t, p) for t, ps in self.owned.items() for p in ps}


def settle(members, total, rounds=40):
    """Heartbeats until the members own `total` partitions and the group is Stable."""
    for _ in range(rounds):
        for m in members:
            m.beat()
        if sum(m.count() for m in members) == total and not any(m.changed for m in members) \
                and describe(members[0].c, members[0].group)["GroupState"] == "Stable":
            return
        time.sleep(0.05)
    raise AssertionError([(m.id, m.epoch, m.owned) for m in members])


def describe(c, group, version=1):
    return c.request(69, version, {"GroupIds": [group],
                                   "IncludeAuthorizedOperations": False})["Groups"][0]


def test_api_versions_advertise_the_consumer_protocol(cbroker):
    c = kg.connect(cbroker.bootstrap)
    keys = {k["ApiKey"]: (k["MinVersion"], k["MaxVersion"])
            for k in kproto.api_versions(c)["ApiKeys"]}
    assert keys.get(68) == (0, 1), keys.get(68)
    assert keys.get(69) == (0, 1), keys.get(69)


def test_request_checks(cbroker, topic_name):
    c, _ = prepare(cbroker.bootstrap, topic_name)
    g = gid()
    r = hb(c, g, "", 0, topics=[topic_name], owned=[], rebalance=30000)
    assert (r["ErrorCode"], r["ErrorMessage"]) == (kg.INVALID_REQUEST, "MemberId can't be empty."), r
    r = hb(c, "", mid(), 0, topics=[topic_name], owned=[], rebalance=30000)
    assert r["ErrorCode"] == kg.INVALID_REQUEST, r
    r = hb(c, g, mid(), 0, topics=[topic_name], owned=[])
    assert r["ErrorMessage"] == "RebalanceTimeoutMs must be provided in first request.", r
    r = hb(c, g, mid(), 0, topics=[topic_name], owned=None, rebalance=30000)
    assert r["ErrorMessage"] == "TopicPartitions must be empty when (re-)joining.", r
    r = hb(c, g, mid(), -3)
    assert (r["ErrorCode"], r["ErrorMessage"]) == (kg.INVALID_REQUEST, "MemberEpoch is invalid."), r
    r = hb(c, g, mid(), -2)
    assert (r["ErrorCode"], r["ErrorMessage"]) == (kg.INVALID_REQUEST, "InstanceId can't be null."), r
    r = hb(c, g, mid(), 0, topics=[topic_name], owned=[], rebalance=30000, assignor="sticky")
    assert r["ErrorCode"] == UNSUPPORTED_ASSIGNOR, r
    # A member unknown to a group that exists.
    m = Member(c, g, [topic_name])
    m.beat()
    r = hb(c, g, mid(), 5)
    assert r["ErrorCode"] == kg.UNKNOWN_MEMBER_ID, r
    # An epoch the coordinator never gave.
    r = hb(c, g, m.id, m.epoch + 10)
    assert r["ErrorCode"] == FENCED_MEMBER_EPOCH, r
    d = describe(c, "absent-" + gid())
    assert d["ErrorCode"] == kg.GROUP_ID_NOT_FOUND, d
    # A heartbeat past joining, or a leave, to a group the coordinator does not know.
    absent = "absent-" + gid()
    r = hb(c, absent, mid(), 5)
    assert (r["ErrorCode"], r["ErrorMessage"]) == (
        kg.GROUP_ID_NOT_FOUND, "Consumer group %s not found." % absent), r
    r = hb(c, "absent-" + gid(), mid(), -1)
    assert r["ErrorCode"] == kg.GROUP_ID_NOT_FOUND, r


def test_join_revoke_then_assign_describe_leave(cbroker, topic_name):
    c, tid = prepare(cbroker.bootstrap, topic_name)
    g = gid()
    a = Member(c, g, [topic_name])
    r = a.beat()
    assert r["HeartbeatIntervalMs"] == 5000 and r["MemberId"] == a.id, r
    settle([a], 4)
    e1 = a.epoch
    assert e1 >= 1 and a.parts() == {(tid, p) for p in range(4)}
    b = Member(c, g, [topic_name])
    r = b.beat()
    # Kafka may compute the new target later (it batches assignments for the group's
    # consumer.assignment.interval.ms): until then b is at the old epoch, with nothing.
    deadline = time.time() + 10
    while b.epoch <= e1 and time.time() < deadline:
        time.sleep(0.2)
        r = b.beat()
    e2 = b.epoch
    assert e2 > e1 and b.count() == 0, r  # its partitions are still a's
    r = a.beat()
    assert a.epoch == e1 and a.count() == 2, r  # a revokes first, keeping its epoch
    b.beat()
    assert b.count() == 0  # nothing until a says it let them go
    a.beat()  # with its owned partitions
    assert a.epoch == e2
    b.beat()
    assert b.count() == 2 and not (a.parts() & b.parts())
    d = describe(c, g)
    assert d["ErrorCode"] == 0 and d["GroupState"] == "Stable", d
    assert (d["GroupEpoch"], d["AssignmentEpoch"], d["AssignorName"]) == (e2, e2, "uniform"), d
    members = {m["MemberId"]: m for m in d["Members"]}
    assert set(members) == {a.id, b.id}, d
    for m in (a, b):
        dm = members[m.id]
        assert dm["MemberEpoch"] == e2 and dm["SubscribedTopicNames"] == [topic_name], dm
        assert dm["MemberType"] == 1, dm
        got = {(tp["TopicId"], p) for tp in dm["Assignment"]["TopicPartitions"]
               for p in tp["Partitions"]}
        assert got == m.parts(), dm
        assert all(tp["TopicName"] == topic_name for tp in dm["Assignment"]["TopicPartitions"])
    lg = c.request(16, 5, {"StatesFilter": [], "TypesFilter": ["consumer"]})
    listed = [(x["ProtocolType"], x["GroupState"], x["GroupType"])
              for x in lg["Groups"] if x["GroupId"] == g]
    assert listed == [("consumer", "Stable", "consumer")], lg
    lg = c.request(16, 5, {"StatesFilter": [], "TypesFilter": ["classic"]})
    assert g not in [x["GroupId"] for x in lg["Groups"]], lg
    dg = kg.describe_groups(c, [g], version=6)["Groups"][0]
    assert dg["ErrorCode"] == kg.GROUP_ID_NOT_FOUND, dg
    assert dg["ErrorMessage"] == "Group %s is not a classic group." % g, dg
    # b leaves: a gets everything back at a new epoch.
    r = hb(c, g, b.id, -1)
    assert (r["ErrorCode"], r["MemberEpoch"], r["MemberId"]) == (0, -1, b.id), r
    settle([a], 4)
    assert a.epoch > e2
    r = hb(c, g, b.id, e2)
    assert r["ErrorCode"] == kg.UNKNOWN_MEMBER_ID, r


def test_offsets_by_member_epoch(cbroker, topic_name):
    c, tid = prepare(cbroker.bootstrap, topic_name, parts=1)
    g = gid()
    a = Member(c, g, [topic_name])
    settle([a], 1)

    def commit(member_id, epoch, version=9):
        return kg.commit(c, g, {(topic_name, 0): 7}, generation=epoch, member_id=member_id,
                         version=version)[(topic_name, 0)]

    assert commit(a.id, a.epoch) == 0
    assert commit(a.id, a.epoch - 1) == STALE_MEMBER_EPOCH
    assert commit("nobody", a.epoch) == kg.UNKNOWN_MEMBER_ID
    assert commit("", -1) == kg.UNKNOWN_MEMBER_ID  # an admin commit to a group with members

    def fetch(member_id, epoch):
        r = c.request(9, 9, {"Groups": [{"GroupId": g, "MemberId": member_id,
                                         "MemberEpoch": epoch, "Topics": None}],
                             "RequireStable": False})["Groups"][0]
        offs = {(t["Name"], p["PartitionIndex"]): p["CommittedOffset"]
                for t in r["Topics"] for p in t["Partitions"]}
        return r["ErrorCode"], offs

    assert fetch(a.id, a.epoch) == (0, {(topic_name, 0): 7})
    assert fetch(None, -1) == (0, {(topic_name, 0): 7})
    assert fetch(a.id, a.epoch + 1)[0] == STALE_MEMBER_EPOCH
    assert fetch("nobody", 1)[0] == kg.UNKNOWN_MEMBER_ID
    # A classic group (here one known by an admin's commit) ignores the member.
    simple = "simple-" + gid()
    assert kg.commit(c, simple, {(topic_name, 0): 3}, version=9) == {(topic_name, 0): 0}
    r = c.request(9, 9, {"Groups": [{"GroupId": simple, "MemberId": "someone", "MemberEpoch": 4,
                                     "Topics": None}], "RequireStable": False})["Groups"][0]
    assert r["ErrorCode"] == 0 and r["Topics"][0]["Partitions"][0]["CommittedOffset"] == 3, r
    # The group is not empty: it cannot be deleted.
    assert kg.delete_groups(c, [g]) == {g: kg.NON_EMPTY_GROUP}
    # A classic member may join it (a mixed group, test_4013): first a member id.
    r = kg.join(c, g, 5, topics=[topic_name], session_ms=10000, rebalance_ms=5000)
    assert r["ErrorCode"] == kg.MEMBER_ID_REQUIRED and r["MemberId"], r
    hb(c, g, a.id, -1)
    assert kg.delete_groups(c, [g]) == {g: 0}


def test_static_member_leaves_and_comes_back(cbroker, topic_name):
    c, tid = prepare(cbroker.bootstrap, topic_name)
    g = gid()
    a = Member(c, g, [topic_name], instance="ia")
    b = Member(c, g, [topic_name], instance="ib")
    settle([a, b], 4)
    before = b.parts()
    epoch = describe(c, g)["GroupEpoch"]
    # Same instance id while b is active.
    dup = Member(c, g, [topic_name], instance="ib")
    dup.beat(expect=UNRELEASED_INSTANCE_ID)
    r = hb(c, g, b.id, -2, instance="ib")
    assert (r["ErrorCode"], r["MemberEpoch"]) == (0, -2), r
    a.beat()
    assert a.count() == 2  # b's partitions wait for it
    b2 = Member(c, g, [topic_name], instance="ib")
    settle([a, b2], 4)
    assert b2.parts() == before
    assert describe(c, g)["GroupEpoch"] == epoch
    r = hb(c, g, b.id, b.epoch, instance="ib")
    assert r["ErrorCode"] == kg.FENCED_INSTANCE_ID, r


def test_range_assignor_and_regex(cbroker, topic_name):
    c, tid = prepare(cbroker.bootstrap, topic_name, parts=3)
    g = gid()
    ids = sorted([mid(), mid()])
    ms = []
    for i in ids:
        m = Member(c, g, [topic_name], member_id=i)
        r = hb(c, g, i, 0, topics=[topic_name], owned=[], rebalance=30000, assignor="range")
        assert r["ErrorCode"] == 0, r
        m.epoch = r["MemberEpoch"]
        ms.append(m)
    settle(ms, 3)
    assert describe(c, g)["AssignorName"] == "range"
    assert ms[0].parts() == {(tid, 0), (tid, 1)} and ms[1].parts() == {(tid, 2)}
    g2 = gid()
    r = hb(c, g2, mid(), 0, owned=[], rebalance=30000, regex=topic_name[:6] + ".*")
    assert r["ErrorCode"] == 0, r
    d = describe(c, g2)
    assert d["Members"][0]["SubscribedTopicRegex"] == topic_name[:6] + ".*", d


@pytest.mark.restarts
def test_membership_survives_a_restart(broker_factory, topic_name):
    """The group's state is in the log: after skiffd is SIGKILLed and restarted, members
    go on with their epochs and partitions (as after a Kafka coordinator failover), and
    a member that does not come back is removed after its session timeout."""
    b = broker_factory({"group.consumer.session.timeout.ms": "3000"})
    c, tid = prepare(b.bootstrap, topic_name)
    g = gid()
    a = Member(c, g, [topic_name], instance="ia")
    gone = Member(c, g, [topic_name])
    settle([a, gone], 4)
    # a is told to give partitions up to a third member before the kill.
    third = Member(c, g, [topic_name])
    third.beat()
    before = describe(c, g)
    c.close()
    b.kill()
    b.start()
    c = kg.connect(b.bootstrap)
    after = describe(c, g)
    for k in ("GroupEpoch", "AssignmentEpoch", "AssignorName"):
        assert after[k] == before[k], (k, before, after)
    assert {(m["MemberId"], m["MemberEpoch"], m["InstanceId"]) for m in after["Members"]} == \
        {(m["MemberId"], m["MemberEpoch"], m["InstanceId"]) for m in before["Members"]}, after
    for m in (a, third):
        m.c = c
    # a and the third member go on; `gone` never heartbeats again.
    deadline = time.time() + 15
    while time.time() < deadline:
        a.beat()
        third.beat()
        d = describe(c, g)
        if len(d["Members"]) == 2 and d["GroupState"] == "Stable" and \
                a.count() + third.count() == 4 and not (a.changed or third.changed):
            break
        time.sleep(0.2)
    d = describe(c, g)
    assert {m["MemberId"] for m in d["Members"]} == {a.id, third.id}, d
    assert a.count() + third.count() == 4 and not (a.parts() & third.parts())
