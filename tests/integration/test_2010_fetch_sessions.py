"""Fetch sessions (KIP-227, incremental fetch) at the protocol level.

Every test passes against Apache Kafka 4.3.1 with the same assertions
(SKIFF_TEST_AGAINST=kafka) but the last three, which need a broker this harness
starts: with a small max.incremental.fetch.session.cache.slots, or restarted.
"""

import time

import pytest

import harness
import kproto as k
from s3env import metrics

FETCH_SESSION_ID_NOT_FOUND = 70
INVALID_FETCH_SESSION_EPOCH = 71
VERSION = 12


def part(p, offset, max_bytes=1 << 20):
    return {"Partition": p, "FetchOffset": offset, "PartitionMaxBytes": max_bytes}


def fetch(c, session_id, epoch, topics=None, forgotten=None, max_wait=0, min_bytes=0,
          version=VERSION):
    """topics: {topic: [(partition, offset), ...]}, forgotten: {topic: [partition, ...]}.
    Returns (top-level response, {(topic, partition): partition dict} in answer order)."""
    body = {"ReplicaId": -1, "MaxWaitMs": max_wait, "MinBytes": min_bytes,
            "MaxBytes": 0x7FFFFFFF, "IsolationLevel": 0,
            "SessionId": session_id, "SessionEpoch": epoch,
            "Topics": [{"Topic": t, "Partitions": [part(p, o) for p, o in ps]}
                       for t, ps in (topics or {}).items()],
            "ForgottenTopicsData": [{"Topic": t, "Partitions": ps}
                                    for t, ps in (forgotten or {}).items()],
            "RackId": ""}
    resp = c.request(1, version, body, timeout=30)
    parts = {}
    for tr in resp["Responses"]:
        for pd in tr["Partitions"]:
            parts[(tr["Topic"], pd["PartitionIndex"])] = pd
    return resp, parts


def values(pd):
    return [v for b in k.parse_batches(pd["Records"]) for _, v in b.offsets_values()]


@pytest.fixture
def topic3(broker, topic_name):
    """A topic of 3 partitions; partition i holds i+1 records."""
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 3)
        for i in range(3):
            for j in range(i + 1):
                pr = k.produce(c, topic_name, i, k.batch([b"p%d-%d" % (i, j)]))
                assert pr["ErrorCode"] == k.NONE
        yield c, topic_name


def new_session(c, t, offsets=(0, 0, 0)):
    resp, parts = fetch(c, 0, 0, {t: list(enumerate(offsets))})
    assert resp["ErrorCode"] == k.NONE
    assert resp["SessionId"] != 0, "the full fetch created no session"
    return resp["SessionId"], parts


def test_full_fetch_creates_session(topic3):
    c, t = topic3
    sid, parts = new_session(c, t)
    assert list(parts) == [(t, 0), (t, 1), (t, 2)]
    for i in range(3):
        assert parts[(t, i)]["ErrorCode"] == k.NONE
        assert parts[(t, i)]["HighWatermark"] == i + 1
        assert values(parts[(t, i)]) == [b"p%d-%d" % (i, j) for j in range(i + 1)]
    # A sessionless full fetch (epoch -1) gets session id 0.
    resp, parts = fetch(c, 0, -1, {t: [(0, 0)]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == 0
    assert values(parts[(t, 0)]) == [b"p0-0"]


def test_incremental_omits_partitions_without_news(broker, topic3):
    c, t = topic3
    sid, _ = new_session(c, t)
    # The client moves its positions past what it got: nothing new anywhere.
    resp, parts = fetch(c, sid, 1, {t: [(0, 1), (1, 2), (2, 3)]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid
    assert parts == {}, "partitions without news were answered: %r" % list(parts)
    # Nothing named, nothing new: still an empty answer.
    resp, parts = fetch(c, sid, 2)
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid and parts == {}
    # A record on partition 1: only partition 1 comes back, at the session's offset.
    with k.Conn(broker.bootstrap) as c2:
        assert k.produce(c2, t, 1, k.batch([b"new"]))["ErrorCode"] == k.NONE
    resp, parts = fetch(c, sid, 3)
    assert list(parts) == [(t, 1)]
    assert parts[(t, 1)]["HighWatermark"] == 3
    assert values(parts[(t, 1)]) == [b"new"]
    # Once the client moved past it, partition 1 is quiet again.
    resp, parts = fetch(c, sid, 4, {t: [(1, 3)]})
    assert resp["ErrorCode"] == k.NONE and parts == {}


def test_incremental_long_poll_answers_the_partition_that_moved(broker, topic3):
    c, t = topic3
    sid, _ = new_session(c, t, (1, 2, 3))

    th = k.produce_later(broker.bootstrap, t, 2, b"late", 1.0)
    t0 = time.time()
    resp, parts = fetch(c, sid, 1, max_wait=8000, min_bytes=1)
    took = time.time() - t0
    th.join()
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid
    assert list(parts) == [(t, 2)]
    assert values(parts[(t, 2)]) == [b"late"]
    assert 0.8 <= took < 6.0, "took %.2fs" % took


def test_partitions_added_and_forgotten(broker, topic3):
    c, t = topic3
    resp, parts = fetch(c, 0, 0, {t: [(0, 0)]})
    sid = resp["SessionId"]
    assert sid != 0 and list(parts) == [(t, 0)]
    # Added: partitions 1 and 2 come with their records.
    resp, parts = fetch(c, sid, 1, {t: [(0, 1), (1, 0), (2, 1)]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid
    assert list(parts) == [(t, 1), (t, 2)]
    assert values(parts[(t, 1)]) == [b"p1-0", b"p1-1"]
    assert values(parts[(t, 2)]) == [b"p2-1", b"p2-2"]
    # Forgotten: partition 0 is no longer fetched, whatever happens to it.
    resp, parts = fetch(c, sid, 2, {t: [(1, 2), (2, 3)]}, forgotten={t: [0]})
    assert resp["ErrorCode"] == k.NONE and parts == {}
    with k.Conn(broker.bootstrap) as c2:
        assert k.produce(c2, t, 0, k.batch([b"unseen"]))["ErrorCode"] == k.NONE
        assert k.produce(c2, t, 2, k.batch([b"seen"]))["ErrorCode"] == k.NONE
    resp, parts = fetch(c, sid, 3)
    assert list(parts) == [(t, 2)]
    assert values(parts[(t, 2)]) == [b"seen"]
    # Added back, at the offset the client asks.
    resp, parts = fetch(c, sid, 4, {t: [(0, 1), (2, 4)]})
    assert list(parts) == [(t, 0)]
    assert values(parts[(t, 0)]) == [b"unseen"]
    # Forgetting every partition ends the session: a sessionless answer.
    resp, parts = fetch(c, sid, 5, forgotten={t: [0, 1, 2]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == 0 and parts == {}
    resp, parts = fetch(c, sid, 6)
    assert resp["ErrorCode"] == FETCH_SESSION_ID_NOT_FOUND


def test_error_partitions_are_always_answered(topic3):
    c, t = topic3
    sid, _ = new_session(c, t, (1, 2, 3))
    # A partition that does not exist joins the session with its error...
    resp, parts = fetch(c, sid, 1, {t: [(7, 0)]})
    assert resp["ErrorCode"] == k.NONE
    assert list(parts) == [(t, 7)]
    assert parts[(t, 7)]["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION
    # ... and is answered every time, while the others stay quiet.
    resp, parts = fetch(c, sid, 2)
    assert list(parts) == [(t, 7)]
    assert parts[(t, 7)]["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION
    resp, parts = fetch(c, sid, 3, forgotten={t: [7]})
    assert resp["ErrorCode"] == k.NONE and parts == {}


def test_wrong_epochs_and_unknown_sessions(topic3):
    c, t = topic3
    sid, _ = new_session(c, t)
    for bad in (2, 0x7FFFFFFF):
        resp, parts = fetch(c, sid, bad, {t: [(0, 1)]})
        assert resp["ErrorCode"] == INVALID_FETCH_SESSION_EPOCH, bad
        assert resp["SessionId"] == 0 and parts == {}
    # The session survives a wrong epoch.
    resp, parts = fetch(c, sid, 1, {t: [(0, 1), (1, 2), (2, 3)]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid and parts == {}
    # An epoch already used is wrong too.
    resp, _ = fetch(c, sid, 1)
    assert resp["ErrorCode"] == INVALID_FETCH_SESSION_EPOCH
    resp, _ = fetch(c, sid, 2)
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid
    # A session nobody created.
    other = sid + 1 if sid < 0x7FFFFFFF else sid - 1
    resp, parts = fetch(c, other, 1, {t: [(0, 0)]})
    assert resp["ErrorCode"] == FETCH_SESSION_ID_NOT_FOUND
    assert resp["SessionId"] == 0 and parts == {}
    # Session id 0 with a positive epoch names no session.
    resp, _ = fetch(c, 0, 1, {t: [(0, 0)]})
    assert resp["ErrorCode"] == FETCH_SESSION_ID_NOT_FOUND


def test_session_serves_another_connection(broker, topic3):
    c, t = topic3
    sid, _ = new_session(c, t, (1, 2, 3))
    with k.Conn(broker.bootstrap) as c2:
        resp, parts = fetch(c2, sid, 1)
        assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid and parts == {}
    resp, _ = fetch(c, sid, 2)
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid


def test_overlapping_requests_of_one_session(broker, topic3):
    """A long poll of epoch 1 is still waiting when epoch 2 comes on another connection:
    the later one is served, and the earlier one, once its wait ends, is answered
    INVALID_FETCH_SESSION_EPOCH (with the session id) rather than with stale news."""
    c, t = topic3
    sid, _ = new_session(c, t, (1, 2, 3))
    c.send(1, VERSION, {
        "ReplicaId": -1, "MaxWaitMs": 2000, "MinBytes": 1, "MaxBytes": 0x7FFFFFFF,
        "IsolationLevel": 0, "SessionId": sid, "SessionEpoch": 1, "Topics": [],
        "ForgottenTopicsData": [], "RackId": ""})
    time.sleep(0.3)
    with k.Conn(broker.bootstrap) as c2:
        resp, parts = fetch(c2, sid, 2)
        assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid and parts == {}
    resp = c.recv(timeout=30)
    assert resp["ErrorCode"] == INVALID_FETCH_SESSION_EPOCH
    assert resp["SessionId"] == sid and resp["Responses"] == []
    resp, _ = fetch(c, sid, 3)
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid


def test_closed_session(topic3):
    c, t = topic3
    sid, _ = new_session(c, t)
    # Epoch -1 closes the session and is served without one.
    resp, parts = fetch(c, sid, -1, {t: [(1, 0)]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == 0
    assert list(parts) == [(t, 1)] and values(parts[(t, 1)]) == [b"p1-0", b"p1-1"]
    resp, _ = fetch(c, sid, 1)
    assert resp["ErrorCode"] == FETCH_SESSION_ID_NOT_FOUND
    # A full fetch naming a session replaces it with a new one.
    sid, _ = new_session(c, t)
    resp, parts = fetch(c, sid, 0, {t: [(0, 0)]})
    assert resp["ErrorCode"] == k.NONE
    new = resp["SessionId"]
    assert new not in (0, sid) and list(parts) == [(t, 0)]
    resp, _ = fetch(c, sid, 1)
    assert resp["ErrorCode"] == FETCH_SESSION_ID_NOT_FOUND
    resp, parts = fetch(c, new, 1, {t: [(0, 1)]})
    assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == new and parts == {}


def test_versions_before_7_have_no_sessions(topic3):
    c, t = topic3
    resp, parts = fetch(c, 0, 0, {t: [(0, 0)]}, version=6)
    assert "SessionId" not in resp or resp["SessionId"] == 0
    assert values(parts[(t, 0)]) == [b"p0-0"]


# ---------------------------------------------------------------- eviction (Skiff only)

def test_full_cache_serves_new_fetches_sessionless(broker_factory, topic_name):
    b = broker_factory({"max.incremental.fetch.session.cache.slots": "2",
                        "metrics.listener": "127.0.0.1:%d" % harness.free_port()})
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 3)
        for i in range(3):
            for j in range(i + 1):
                assert k.produce(c, topic_name, i, k.batch([b"p%d-%d" % (i, j)]))["ErrorCode"] \
                    == k.NONE
        s1, _ = new_session(c, topic_name)
        s2, _ = new_session(c, topic_name, (1, 2, 3))
        m = metrics(b)
        assert m["skiff_fetch_sessions"] == 2
        assert m["skiff_fetch_session_partitions"] == 6
        # Full: neither session is stale (idle 2 min) nor old enough to give way.
        resp, parts = fetch(c, 0, 0, {topic_name: [(0, 0), (1, 0), (2, 0)]})
        assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == 0
        assert values(parts[(topic_name, 2)]) == [b"p2-0", b"p2-1", b"p2-2"]
        # The cached sessions go on.
        for sid in (s1, s2):
            resp, parts = fetch(c, sid, 1, {topic_name: [(0, 1), (1, 2), (2, 3)]})
            assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == sid
        # A closed one frees its slot.
        fetch(c, s1, -1)
        s3, _ = new_session(c, topic_name)
        assert s3 not in (s1, s2)
        m = metrics(b)
        assert m["skiff_fetch_sessions"] == 2
        assert m["skiff_fetch_session_evictions_total"] == 0


def test_no_slots_no_sessions(broker_factory, topic_name):
    b = broker_factory({"max.incremental.fetch.session.cache.slots": "0"})
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        resp, parts = fetch(c, 0, 0, {topic_name: [(0, 0)]})
        assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == 0
        assert parts[(topic_name, 0)]["ErrorCode"] == k.NONE


@pytest.mark.restarts
def test_sessions_die_with_the_node(broker_factory, topic_name):
    b = broker_factory()
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        assert k.produce(c, topic_name, 0, k.batch([b"x"]))["ErrorCode"] == k.NONE
        resp, _ = fetch(c, 0, 0, {topic_name: [(0, 0)]})
        sid = resp["SessionId"]
        assert sid != 0
    b.kill()
    b.start()
    with k.Conn(b.bootstrap) as c:
        resp, parts = fetch(c, sid, 1, {topic_name: [(0, 1)]})
        assert resp["ErrorCode"] == FETCH_SESSION_ID_NOT_FOUND and parts == {}
        # The client starts over with a full fetch.
        resp, parts = fetch(c, 0, 0, {topic_name: [(0, 0)]})
        assert resp["ErrorCode"] == k.NONE and resp["SessionId"] != 0
        assert values(parts[(topic_name, 0)]) == [b"x"]
