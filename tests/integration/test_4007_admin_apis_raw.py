"""The admin APIs that AdminClient and the tools probe for, on the wire:
DescribeTopicPartitions (answers as Metadata does, sorted, paged by a cursor and a
partition limit; unknown and invalid names; a cursor outside the list),
ElectLeaders (preferred and unclean on partitions with a live leader, unknown
partitions, all partitions), DescribeProducers (an idempotent producer's id, epoch,
last sequence and timestamp), AlterReplicaLogDirs (the current log dir, another) and
DescribeQuorum (the metadata partition led by the broker; any other partition).
Expectations from Kafka 4.3.1 with one broker: every test also runs against it.
"""

import uuid

import pytest

import kgroup as kg
import kproto

UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUEST = 42
LOG_DIR_NOT_FOUND = 57
ELECTION_NOT_NEEDED = 84
ZERO_UUID = b"\x00" * 16

BROKER_ID = 1  # skiffd's node.id in the harness, and kafka-ref.sh's


@pytest.fixture
def conn(broker):
    c = kg.connect(broker.bootstrap)
    yield c
    c.close()


def dtp(c, topics, limit=2000, cursor=None):
    return c.request(75, 0, {"Topics": [{"Name": t} for t in topics],
                             "ResponsePartitionLimit": limit, "Cursor": cursor})


def pages(r):
    """[(topic, [partition indexes])] of a DescribeTopicPartitions answer, and its cursor."""
    cur = r["NextCursor"]
    return ([(t["Name"], [p["PartitionIndex"] for p in t["Partitions"]]) for t in r["Topics"]],
            cur and (cur["TopicName"], cur["PartitionIndex"]))


def make_topics(c, counts):
    """Topics named <prefix>-a, -b, ... with the given partition counts; their names."""
    prefix = "t4007-" + uuid.uuid4().hex[:8]
    names = []
    for i, n in enumerate(counts):
        names.append("%s-%s" % (prefix, "abcdef"[i]))
        kproto.create_topic(c, names[-1], n)
    return names


def test_describe_topic_partitions_answers_as_metadata(conn):
    c = conn
    (t,) = make_topics(c, [3])
    md = c.request(3, 12, {"Topics": [{"Name": t}], "AllowAutoTopicCreation": False,
                           "IncludeTopicAuthorizedOperations": True})
    (mt,) = md["Topics"]
    r = dtp(c, [t])
    assert r["NextCursor"] is None, r
    (dt,) = r["Topics"]
    assert (dt["ErrorCode"], dt["Name"], dt["TopicId"], dt["IsInternal"]) == (0, t, mt["TopicId"], False)
    assert dt["TopicId"] != ZERO_UUID
    assert dt["TopicAuthorizedOperations"] == mt["TopicAuthorizedOperations"] != -2147483648, dt
    got = [(p["PartitionIndex"], p["ErrorCode"], p["LeaderId"], p["LeaderEpoch"], p["ReplicaNodes"],
            p["IsrNodes"], p["OfflineReplicas"]) for p in dt["Partitions"]]
    want = [(p["PartitionIndex"], p["ErrorCode"], p["LeaderId"], p["LeaderEpoch"], p["ReplicaNodes"],
             p["IsrNodes"], p["OfflineReplicas"]) for p in sorted(mt["Partitions"],
                                                                  key=lambda p: p["PartitionIndex"])]
    assert got == want, (got, want)
    assert [len(p["ReplicaNodes"]) for p in dt["Partitions"]] == [1, 1, 1]
    assert all(p["EligibleLeaderReplicas"] in (None, []) for p in dt["Partitions"]), dt


def test_describe_topic_partitions_unknown_and_invalid_names(conn):
    c = conn
    (t,) = make_topics(c, [1])
    missing = t + "-missing"
    r = dtp(c, [missing, "bad name!", t, t])
    got = [(x["Name"], x["ErrorCode"], x["TopicId"] == ZERO_UUID, len(x["Partitions"]))
           for x in r["Topics"]]
    # Sorted by name, each once.
    assert got == [("bad name!", INVALID_TOPIC_EXCEPTION, True, 0), (t, 0, False, 1),
                   (missing, UNKNOWN_TOPIC_OR_PARTITION, True, 0)], got
    assert r["NextCursor"] is None
    # Not created on the way.
    assert kproto.metadata(c, [missing], version=9, allow_auto=False)["Topics"][0]["ErrorCode"] == \
        UNKNOWN_TOPIC_OR_PARTITION


def test_describe_topic_partitions_cursor_paging(conn):
    c = conn
    a, b = make_topics(c, [3, 2])
    assert pages(dtp(c, [b, a], limit=2)) == ([(a, [0, 1])], (a, 2))
    assert pages(dtp(c, [b, a], limit=2, cursor={"TopicName": a, "PartitionIndex": 2})) == \
        ([(a, [2]), (b, [0])], (b, 1))
    assert pages(dtp(c, [b, a], limit=2, cursor={"TopicName": b, "PartitionIndex": 1})) == \
        ([(b, [1])], None)
    # A limit that ends with a topic: the next one starts the cursor.
    assert pages(dtp(c, [a, b], limit=3)) == ([(a, [0, 1, 2])], (b, 0))
    # A limit below 1 counts as 1, one above 2000 as 2000.
    assert pages(dtp(c, [a, b], limit=0)) == ([(a, [0])], (a, 1))
    assert pages(dtp(c, [a, b], limit=-5)) == ([(a, [0])], (a, 1))
    assert pages(dtp(c, [a, b], limit=1 << 30)) == ([(a, [0, 1, 2]), (b, [0, 1])], None)
    # A cursor past a topic's last partition: the topic, with none.
    assert pages(dtp(c, [a, b], cursor={"TopicName": a, "PartitionIndex": 7})) == \
        ([(a, []), (b, [0, 1])], None)
    # Every topic (an empty list): sorted from the cursor's topic on.
    r = dtp(c, [], limit=2, cursor={"TopicName": a, "PartitionIndex": 1})
    assert pages(r) == ([(a, [1, 2])], (b, 0)), pages(r)


def test_describe_topic_partitions_cursor_outside_the_list(conn):
    c = conn
    a, b = make_topics(c, [1, 1])
    r = dtp(c, [a], cursor={"TopicName": b, "PartitionIndex": 0})
    assert [(x["Name"], x["ErrorCode"], x["Partitions"]) for x in r["Topics"]] == \
        [(a, INVALID_REQUEST, [])], r
    r = dtp(c, [a, b], cursor={"TopicName": a, "PartitionIndex": -1})
    assert [(x["Name"], x["ErrorCode"]) for x in r["Topics"]] == \
        [(a, INVALID_REQUEST), (b, INVALID_REQUEST)], r
    # Every topic, from a cursor at a topic that does not exist: those after it.
    r = dtp(c, [], cursor={"TopicName": a + "-missing", "PartitionIndex": 0})
    names = [x["Name"] for x in r["Topics"]]
    assert b in names and a not in names and names == sorted(names), names
    assert all(x["ErrorCode"] == 0 and x["Name"] > a + "-missing" for x in r["Topics"]), r


def elect(c, parts, version=2, etype=0):
    """parts: {topic: [partition]} or None; returns ({(topic, partition): (error, msg)},
    [topics named], top-level error)."""
    tp = None if parts is None else [{"Topic": t, "Partitions": ps} for t, ps in parts.items()]
    r = c.request(43, version, {"ElectionType": etype, "TopicPartitions": tp})
    out = {(x["Topic"], p["PartitionId"]): (p["ErrorCode"], p["ErrorMessage"])
           for x in r["ReplicaElectionResults"] for p in x["PartitionResult"]}
    return out, [x["Topic"] for x in r["ReplicaElectionResults"]], r.get("ErrorCode", 0)


def test_elect_leaders_with_live_leaders(conn):
    c = conn
    (t,) = make_topics(c, [2])
    missing = "t4007-missing-" + uuid.uuid4().hex[:8]
    for version, etype in ((0, 0), (1, 0), (2, 0), (2, 1)):
        res, _, top = elect(c, {t: [0, 1, 9], missing: [0]}, version, etype)
        assert top == 0
        assert {k: v[0] for k, v in res.items()} == {
            (t, 0): ELECTION_NOT_NEEDED, (t, 1): ELECTION_NOT_NEEDED,
            (t, 9): UNKNOWN_TOPIC_OR_PARTITION, (missing, 0): UNKNOWN_TOPIC_OR_PARTITION}, res
        assert res[(t, 0)][1], res
    # All partitions: every topic is named, no partition needed an election.
    res, topics, top = elect(c, None)
    assert top == 0 and t in topics and not [k for k in res if k[0] == t], (res, topics)


def test_describe_producers(conn):
    c = conn
    (t,) = make_topics(c, [2])
    ip = kproto.init_producer_id(c)
    assert ip["ErrorCode"] == 0, ip
    pid, epoch = ip["ProducerId"], ip["ProducerEpoch"]
    before = kproto.now_ms()
    for seq in (0, 3):
        b = kproto.batch([b"x", b"y", b"z"], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        assert kproto.produce(c, t, 0, b)["ErrorCode"] == 0
    r = c.request(61, 0, {"Topics": [{"Name": t, "PartitionIndexes": [0, 1, 5]},
                                     {"Name": t + "-missing", "PartitionIndexes": [0]}]})
    res = {(x["Name"], p["PartitionIndex"]): p for x in r["Topics"] for p in x["Partitions"]}
    p0 = res[(t, 0)]
    assert p0["ErrorCode"] == 0, p0
    (st,) = p0["ActiveProducers"]
    assert (st["ProducerId"], st["ProducerEpoch"], st["LastSequence"], st["CoordinatorEpoch"],
            st["CurrentTxnStartOffset"]) == (pid, epoch, 5, -1, -1), st
    assert before - 60000 <= st["LastTimestamp"] <= kproto.now_ms() + 60000, st
    assert (res[(t, 1)]["ErrorCode"], res[(t, 1)]["ActiveProducers"]) == (0, [])
    assert res[(t, 5)]["ErrorCode"] == UNKNOWN_TOPIC_OR_PARTITION
    assert res[(t + "-missing", 0)]["ErrorCode"] == UNKNOWN_TOPIC_OR_PARTITION


def test_alter_replica_log_dirs(conn):
    c = conn
    (t,) = make_topics(c, [2])
    dirs = c.request(35, 2, {"Topics": []})["Results"]
    assert len(dirs) == 1 and dirs[0]["ErrorCode"] == 0, dirs
    here = dirs[0]["LogDir"]
    r = c.request(34, 2, {"Dirs": [
        {"Path": here, "Topics": [{"Name": t, "Partitions": [0, 9]},
                                  {"Name": t + "-missing", "Partitions": [0]}]},
        {"Path": "/t4007/no/such/dir", "Topics": [{"Name": t, "Partitions": [1]}]}]})
    got = {(x["TopicName"], p["PartitionIndex"]): p["ErrorCode"]
           for x in r["Results"] for p in x["Partitions"]}
    assert got == {(t, 0): 0, (t, 9): UNKNOWN_TOPIC_OR_PARTITION,
                   (t + "-missing", 0): UNKNOWN_TOPIC_OR_PARTITION,
                   (t, 1): LOG_DIR_NOT_FOUND}, got


def quorum(c, version, topics):
    return c.request(55, version, {"Topics": [{"TopicName": t, "Partitions": [
        {"PartitionIndex": p} for p in ps]} for t, ps in topics]})


def test_describe_quorum(conn):
    c = conn
    for version in (0, 1, 2):
        r = quorum(c, version, [("__cluster_metadata", [0])])
        assert r["ErrorCode"] == 0, r
        (t,) = r["Topics"]
        (p,) = t["Partitions"]
        assert (t["TopicName"], p["PartitionIndex"], p["ErrorCode"], p["LeaderId"]) == (
            "__cluster_metadata", 0, 0, BROKER_ID), r
        assert p["LeaderEpoch"] >= 0 and p["HighWatermark"] >= 0, p
        assert BROKER_ID in [v["ReplicaId"] for v in p["CurrentVoters"]], p
        if version >= 1:
            (lv,) = [v for v in p["CurrentVoters"] if v["ReplicaId"] == BROKER_ID]
            assert lv["LastCaughtUpTimestamp"] > 0, lv
        if version >= 2:
            nodes = {n["NodeId"]: n["Listeners"] for n in r["Nodes"]}
            assert nodes.get(BROKER_ID) and all(x["Port"] > 0 for x in nodes[BROKER_ID]), r
    # Only the metadata partition is described.
    for topics in ([("__cluster_metadata", [1])], [("__consumer_offsets", [0])],
                   [("__cluster_metadata", [0, 1])]):
        r = quorum(c, 2, topics)
        assert r["ErrorCode"] == 0, r
        got = [(t["TopicName"], p["PartitionIndex"], p["ErrorCode"])
               for t in r["Topics"] for p in t["Partitions"]]
        assert got == [(t, p, UNKNOWN_TOPIC_OR_PARTITION) for t, ps in topics for p in ps], r
