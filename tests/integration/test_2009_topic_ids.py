"""The versions of Kafka 4.3 that name topics by id, and the others added with them.

Produce v13 and Fetch v13-17 by topic id (UNKNOWN_TOPIC_ID for an unknown or all-zero
id), Metadata v13 (top-level error code), the KIP-951 leader hints (CurrentLeader and
NodeEndpoints) that Produce v10+ and Fetch v16+ carry with NOT_LEADER_OR_FOLLOWER in a
cluster, ListOffsets v8-10 (-4 earliest-local, -5 latest-tiered), DescribeLogDirs v5,
and OffsetCommit/OffsetFetch v10 by topic id. Every test but those marked skiff_only
(and the cluster ones) runs against Kafka too, with the same assertions.
"""

import time
import uuid

import pytest

import harness
import kgroup as kg
import kproto as k
import s3env

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="Skiff-specific expectation (differs from Kafka)")

UNKNOWN_TOPIC_ID = 100
NOT_LEADER_OR_FOLLOWER = 6
ZERO_ID = bytes(16)
FETCH_VERSIONS = [13, 14, 15, 16, 17]


@pytest.fixture
def conn_topic(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
        yield c, topic_name


def topic_id(c, topic, version=12):
    md = k.metadata(c, [topic], version=version, allow_auto=False)
    t = md["Topics"][0]
    assert t["ErrorCode"] == k.NONE and t["TopicId"] != ZERO_ID, t
    return t["TopicId"]


def produce_by_id(c, tid, partition, records, version=13):
    body = {"TransactionalId": None, "Acks": -1, "TimeoutMs": 10000,
            "TopicData": [{"TopicId": tid,
                           "PartitionData": [{"Index": partition, "Records": records}]}]}
    resp = c.request(0, version, body)
    assert len(resp["Responses"]) == 1
    return resp, resp["Responses"][0]


def fetch_by_id(c, tid, partition, offset, version, max_wait=0):
    body = k.fetch_body("", partition, offset, max_wait=max_wait)
    body["Topics"][0]["TopicId"] = tid
    resp = c.request(1, version, body)
    return resp, resp["Responses"][0]


def plain(d):
    """A decoded struct without kproto's bookkeeping of tagged fields."""
    if d is None:
        return None
    return {key: v for key, v in d.items() if not key.startswith("_")}


def values(records):
    return [v for b in k.parse_batches(records) for _, v in b.offsets_values()]


# ---------------------------------------------------------------- produce and fetch by id

@pytest.mark.parametrize("version", FETCH_VERSIONS)
def test_produce_v13_and_fetch_by_id(conn_topic, version):
    c, topic = conn_topic
    tid = topic_id(c, topic)
    resp, tr = produce_by_id(c, tid, 1, k.batch([b"a", b"b", b"c"]))
    assert tr["TopicId"] == tid
    pr = tr["PartitionResponses"][0]
    assert (pr["Index"], pr["ErrorCode"], pr["BaseOffset"]) == (1, k.NONE, 0), pr
    _, tr = produce_by_id(c, tid, 1, k.batch([b"d"]))
    assert tr["PartitionResponses"][0]["BaseOffset"] == 3

    resp, ft = fetch_by_id(c, tid, 1, 0, version)
    assert resp["ErrorCode"] == k.NONE and ft["TopicId"] == tid
    p = ft["Partitions"][0]
    assert (p["PartitionIndex"], p["ErrorCode"], p["HighWatermark"]) == (1, k.NONE, 4), p
    assert values(p["Records"]) == [b"a", b"b", b"c", b"d"]
    # The same data by name, through an older version.
    _, p12 = k.fetch(c, topic, 1, 0, version=12)
    assert p12["Records"] == p["Records"]


@pytest.mark.parametrize("tid", [uuid.uuid4().bytes, ZERO_ID], ids=["unknown", "zero"])
def test_produce_v13_unknown_or_zero_id(conn_topic, tid):
    c, _ = conn_topic
    _, tr = produce_by_id(c, tid, 0, k.batch([b"x"]))
    assert tr["TopicId"] == tid
    pr = tr["PartitionResponses"][0]
    assert pr["ErrorCode"] == UNKNOWN_TOPIC_ID and pr["BaseOffset"] == -1, pr


@pytest.mark.parametrize("version", [13, 16])
@pytest.mark.parametrize("tid", [uuid.uuid4().bytes, ZERO_ID], ids=["unknown", "zero"])
def test_fetch_unknown_or_zero_id(conn_topic, tid, version):
    c, _ = conn_topic
    resp, ft = fetch_by_id(c, tid, 0, 0, version)
    assert resp["ErrorCode"] == k.NONE
    assert ft["TopicId"] == tid
    assert ft["Partitions"][0]["ErrorCode"] == UNKNOWN_TOPIC_ID, ft


def test_fetch_v16_unknown_partition_of_known_id(conn_topic):
    c, topic = conn_topic
    _, ft = fetch_by_id(c, topic_id(c, topic), 7, 0, 16)
    assert ft["Partitions"][0]["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_v17_long_poll_by_id(broker, conn_topic):
    c, topic = conn_topic
    tid = topic_id(c, topic)
    t0 = time.time()
    _, ft = fetch_by_id(c, tid, 0, 0, 17, max_wait=600)
    assert time.time() - t0 >= 0.5, "an empty fetch returned before MaxWaitMs"
    assert ft["Partitions"][0]["ErrorCode"] == k.NONE and not ft["Partitions"][0]["Records"]


# ---------------------------------------------------------------- Metadata 13

def test_metadata_v13(conn_topic):
    c, topic = conn_topic
    md = k.metadata(c, [topic], version=13, allow_auto=False)
    assert md["ErrorCode"] == k.NONE
    t = md["Topics"][0]
    assert t["ErrorCode"] == k.NONE and t["TopicId"] != ZERO_ID and len(t["Partitions"]) == 2
    assert t["TopicId"] == topic_id(c, topic, version=10)
    by_id = c.request(3, 13, {"Topics": [{"TopicId": t["TopicId"], "Name": None}],
                              "AllowAutoTopicCreation": False})
    assert by_id["ErrorCode"] == k.NONE
    assert by_id["Topics"][0]["Name"] == topic and by_id["Topics"][0]["ErrorCode"] == k.NONE


# ---------------------------------------------------------------- leader hints (cluster)

def _not_main(cl, topic):
    """(partition, its main, its epoch, a node that is not its main)."""
    leaders = cl.leaders(topic)
    for part, (main, epoch) in sorted(leaders.items()):
        if main >= 0:
            other = next(i for i in cl.live_ids() if i != main)
            return part, main, epoch, other
    raise AssertionError("no partition has a main: %r" % leaders)


@pytest.mark.cluster
def test_leader_hints_in_a_cluster(cluster_factory, topic_name):
    cl = cluster_factory(2).start()
    cl.create_topic(topic_name, 4, via=1)
    part, main, epoch, other = _not_main(cl, topic_name)
    want_ep = {"NodeId": main, "Host": cl.node(main).host, "Port": cl.node(main).port,
               "Rack": cl.node(main).rack or None}
    with cl.node(other).conn() as c:
        tid = topic_id(c, topic_name)
        for version in (10, 13):
            if version >= 13:
                resp, tr = produce_by_id(c, tid, part, k.batch([b"x"]))
            else:
                resp = c.request(0, version, k.produce_body(topic_name, part, k.batch([b"x"])))
                tr = resp["Responses"][0]
            pr = tr["PartitionResponses"][0]
            assert pr["ErrorCode"] == NOT_LEADER_OR_FOLLOWER, pr
            assert plain(pr["CurrentLeader"]) == {"LeaderId": main, "LeaderEpoch": epoch}, pr
            assert [plain(e) for e in resp["NodeEndpoints"]] == [want_ep], resp["NodeEndpoints"]
        for version in (16, 17):
            resp, ft = fetch_by_id(c, tid, part, 0, version)
            p = ft["Partitions"][0]
            assert p["ErrorCode"] == NOT_LEADER_OR_FOLLOWER, p
            assert plain(p["CurrentLeader"]) == {"LeaderId": main, "LeaderEpoch": epoch}, p
            assert [plain(e) for e in resp["NodeEndpoints"]] == [want_ep], resp["NodeEndpoints"]
        # Before v16 a fetch carries no hint.
        resp, ft = fetch_by_id(c, tid, part, 0, 15)
        no_hint = {"LeaderId": -1, "LeaderEpoch": -1}
        assert plain(ft["Partitions"][0]["CurrentLeader"]) in (None, no_hint)
    # The main itself serves the same request by id.
    with cl.node(main).conn() as c:
        _, tr = produce_by_id(c, tid, part, k.batch([b"y"]))
        assert tr["PartitionResponses"][0]["ErrorCode"] == k.NONE
        resp, ft = fetch_by_id(c, tid, part, 0, 17)
        assert values(ft["Partitions"][0]["Records"]) == [b"y"]
        assert resp.get("NodeEndpoints") in ([], None)


# ---------------------------------------------------------------- ListOffsets v8-10

@pytest.mark.parametrize("version", [8, 9, 10])
def test_list_offsets_new_versions(conn_topic, version):
    c, topic = conn_topic
    for _ in range(3):
        assert k.produce(c, topic, 0, k.batch([b"x", b"y"]))["ErrorCode"] == k.NONE
    lo = k.list_offsets(c, topic, 0, -1, version=version)
    assert (lo["ErrorCode"], lo["Offset"]) == (k.NONE, 6)
    lo = k.list_offsets(c, topic, 0, -2, version=version)
    assert (lo["ErrorCode"], lo["Offset"]) == (k.NONE, 0)
    # Earliest-local: nothing has left the local log (Skiff: the WAL) yet.
    lo = k.list_offsets(c, topic, 0, -4, version=version)
    assert (lo["ErrorCode"], lo["Offset"], lo["Timestamp"]) == (k.NONE, 0, -1), lo
    if version >= 9:
        # Latest-tiered: nothing in remote storage (Skiff: the object store) yet.
        lo = k.list_offsets(c, topic, 0, -5, version=version)
        assert (lo["ErrorCode"], lo["Offset"], lo["Timestamp"]) == (k.NONE, -1, -1), lo


def test_list_offsets_v10_timeout_and_empty_partition(conn_topic):
    c, topic = conn_topic
    got = []
    for ts in (-1, -2, -4, -5):
        body = {"ReplicaId": -1, "IsolationLevel": 0, "TimeoutMs": 5000,
                "Topics": [{"Name": topic, "Partitions": [
                    {"PartitionIndex": 1, "Timestamp": ts}]}]}
        p = c.request(2, 10, body)["Topics"][0]["Partitions"][0]
        got.append((p["ErrorCode"], p["Offset"]))
    assert got == [(0, 0), (0, 0), (0, 0), (0, -1)]


@skiff_only
def test_list_offsets_latest_tiered_after_upload(broker_factory, s3, topic_name):
    """-5 names the last offset in the object store once the WAL's data is uploaded."""
    b = broker_factory(s3env.s3_props(s3.url(s3.new_prefix("t2009")),
                                      s3_wal_upload_interval_ms=300))
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        for _ in range(3):
            assert k.produce(c, topic_name, 0, k.batch([b"x", b"y"]))["ErrorCode"] == k.NONE
        deadline = time.time() + 30
        while True:
            lo = k.list_offsets(c, topic_name, 0, -5, version=9)
            if lo["Offset"] == 5 or time.time() > deadline:
                break
            time.sleep(0.2)
        assert (lo["ErrorCode"], lo["Offset"]) == (k.NONE, 5), lo
        lo = k.list_offsets(c, topic_name, 0, -4, version=9)
        assert lo["ErrorCode"] == k.NONE and 0 <= lo["Offset"] <= 6, lo


# ---------------------------------------------------------------- DescribeLogDirs 5

def test_describe_log_dirs_v5(conn_topic):
    c, topic = conn_topic
    assert k.produce(c, topic, 0, k.batch([b"x"]))["ErrorCode"] == k.NONE
    resp = c.request(35, 5, {"Topics": [{"Topic": topic, "Partitions": [0, 1]}]})
    assert resp["ErrorCode"] == k.NONE and resp["Results"]
    for res in resp["Results"]:
        assert res["ErrorCode"] == k.NONE and res["IsCordoned"] is False
    parts = {p["PartitionIndex"] for res in resp["Results"] for t in res["Topics"]
             if t["Name"] == topic for p in t["Partitions"]}
    assert parts == {0, 1}


# ---------------------------------------------------------------- OffsetCommit/OffsetFetch 10

def commit_v10(c, group, tid, offsets):
    """offsets: {partition: offset}; returns the response's only topic."""
    resp = c.request(8, 10, {"GroupId": group, "GenerationIdOrMemberEpoch": -1, "MemberId": "",
                             "GroupInstanceId": None, "Topics": [{"TopicId": tid, "Partitions": [
                                 {"PartitionIndex": p, "CommittedOffset": o,
                                  "CommittedLeaderEpoch": -1, "CommittedMetadata": "m%d" % p}
                                 for p, o in offsets.items()]}]})
    assert len(resp["Topics"]) == 1
    return resp["Topics"][0]


def fetch_v10(c, group, topics):
    """topics: [(topic id, [partitions])] or None; returns the group's answer."""
    resp = c.request(9, 10, {"Groups": [{
        "GroupId": group, "MemberId": None, "MemberEpoch": -1,
        "Topics": None if topics is None else [{"TopicId": tid, "PartitionIndexes": ps}
                                               for tid, ps in topics]}],
        "RequireStable": False})
    assert len(resp["Groups"]) == 1
    return resp["Groups"][0]


def test_offset_commit_and_fetch_v10_by_id(conn_topic):
    c, topic = conn_topic
    tid = topic_id(c, topic)
    group = "g2009-" + uuid.uuid4().hex[:8]
    kg.find_coordinator(c, group)
    tr = commit_v10(c, group, tid, {0: 11, 1: 22})
    assert tr["TopicId"] == tid
    assert sorted((p["PartitionIndex"], p["ErrorCode"]) for p in tr["Partitions"]) == \
        [(0, 0), (1, 0)]
    g = fetch_v10(c, group, [(tid, [0, 1])])
    assert g["ErrorCode"] == k.NONE and len(g["Topics"]) == 1
    assert g["Topics"][0]["TopicId"] == tid
    assert sorted((p["PartitionIndex"], p["CommittedOffset"], p["Metadata"], p["ErrorCode"])
                  for p in g["Topics"][0]["Partitions"]) == [(0, 11, "m0", 0), (1, 22, "m1", 0)]
    # Kept under the topic's name: older versions read them back.
    _, offs = kg.fetch_offsets(c, group, {topic: [0, 1]}, version=7)
    assert offs == {(topic, 0): (11, "m0", 0), (topic, 1): (22, "m1", 0)}
    # All topics of the group (null list) come with their ids.
    g = fetch_v10(c, group, None)
    assert [t["TopicId"] for t in g["Topics"]] == [tid]


@pytest.mark.parametrize("tid", [uuid.uuid4().bytes, ZERO_ID], ids=["unknown", "zero"])
def test_offset_commit_and_fetch_v10_unknown_id(conn_topic, tid):
    c, _ = conn_topic
    group = "g2009-" + uuid.uuid4().hex[:8]
    kg.find_coordinator(c, group)
    tr = commit_v10(c, group, tid, {0: 5})
    assert tr["TopicId"] == tid
    assert [p["ErrorCode"] for p in tr["Partitions"]] == [UNKNOWN_TOPIC_ID]
    g = fetch_v10(c, group, [(tid, [0])])
    assert g["ErrorCode"] == k.NONE
    p = g["Topics"][0]["Partitions"][0]
    assert (p["ErrorCode"], p["CommittedOffset"]) == (UNKNOWN_TOPIC_ID, -1), p
