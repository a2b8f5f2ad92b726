"""Fetch, ListOffsets and OffsetForLeaderEpoch at the protocol level."""

import time

import pytest

import kproto as k

BASE_TS = 1700000000000


@pytest.fixture
def conn_topic(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
        yield c, topic_name


def produce_ts_batches(c, topic, n_batches=5, per_batch=3):
    """Batch i holds records with CreateTime BASE_TS + i*1000 + j*10 (j < per_batch)."""
    for i in range(n_batches):
        recs = [k.Record(b"v%d-%d" % (i, j), timestamp_delta=j * 10) for j in range(per_batch)]
        pr = k.produce(c, topic, 0, k.batch(records=recs, base_timestamp=BASE_TS + i * 1000))
        assert pr["ErrorCode"] == k.NONE and pr["BaseOffset"] == i * per_batch


# ---------------------------------------------------------------- long poll

def test_long_poll_wakes_on_produce(broker, conn_topic):
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"first"]))
    t = k.produce_later(broker.bootstrap, topic, 0, b"late", 1.0)
    t0 = time.time()
    _, p = k.fetch(c, topic, 0, 1, max_wait=5000, min_bytes=1)
    done = time.time()
    t.join()
    assert p["ErrorCode"] == k.NONE
    assert [v for b in k.parse_batches(p["Records"]) for _, v in b.offsets_values()] \
        == [b"late"]
    assert done - t0 >= 0.8, "returned before anything was produced"
    assert done - t.produced_at < 1.0, "took %.2fs after the produce" % (done - t.produced_at)


def test_long_poll_woken_with_too_little_still_times_out(broker, conn_topic):
    """A produce wakes the fetch, but below min_bytes: it waits on, and max_wait,
    counted from the request, still ends it with what there is."""
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"x"]))
    t = k.produce_later(broker.bootstrap, topic, 0, b"small", 0.3)
    t0 = time.time()
    _, p = k.fetch(c, topic, 0, 1, max_wait=1500, min_bytes=1 << 20, timeout=10)
    took = time.time() - t0
    t.join()
    assert p["ErrorCode"] == k.NONE
    assert [v for b in k.parse_batches(p["Records"]) for _, v in b.offsets_values()] \
        == [b"small"]
    assert 1.3 <= took <= 3.0, "max_wait 1500 ms took %.2fs" % took


def test_long_poll_times_out_empty(conn_topic):
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"x"]))
    t0 = time.time()
    _, p = k.fetch(c, topic, 0, 1, max_wait=1500, min_bytes=1)
    took = time.time() - t0
    assert p["ErrorCode"] == k.NONE and not p["Records"]
    assert p["HighWatermark"] == 1
    assert 1.3 <= took <= 3.0, "max_wait 1500 ms took %.2fs" % took


def test_max_wait_zero_returns_at_once(conn_topic):
    c, topic = conn_topic
    t0 = time.time()
    _, p = k.fetch(c, topic, 0, 0, max_wait=0, min_bytes=1)
    assert time.time() - t0 < 0.5
    assert p["ErrorCode"] == k.NONE and not p["Records"]


def test_min_bytes_satisfied_returns_at_once(conn_topic):
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"x" * 100]))
    t0 = time.time()
    _, p = k.fetch(c, topic, 0, 0, max_wait=5000, min_bytes=1)
    assert time.time() - t0 < 1.0
    assert len(k.parse_batches(p["Records"])) == 1


def test_long_poll_other_partition_does_not_wake(broker, conn_topic):
    """A produce to partition 1 does not answer a fetch waiting on partition 0 early."""
    c, topic = conn_topic
    t = k.produce_later(broker.bootstrap, topic, 1, b"elsewhere", 0.3)
    t0 = time.time()
    _, p = k.fetch(c, topic, 0, 0, max_wait=1500, min_bytes=1)
    t.join()
    assert time.time() - t0 >= 1.3 and not p["Records"]


def test_pipelined_fetches_stay_in_order(broker, conn_topic):
    """A long-polling fetch holds back the answers pipelined behind it."""
    c, topic = conn_topic
    c.send(1, 11, k.fetch_body(topic, 0, 0, max_wait=800, min_bytes=1))
    c.send(18, 0, {})
    t0 = time.time()
    assert c.recv()["Responses"][0]["Partitions"][0]["ErrorCode"] == k.NONE
    assert c.recv()["ErrorCode"] == k.NONE
    assert time.time() - t0 >= 0.6


# ---------------------------------------------------------------- KIP-74 limits

@pytest.mark.parametrize("version", [4, 11, 12])
def test_first_batch_larger_than_limits_is_returned_whole(conn_topic, version):
    c, topic = conn_topic
    big = k.batch([b"x" * 50000])
    k.produce(c, topic, 0, big)
    k.produce(c, topic, 0, k.batch([b"small"]))
    for kw in ({"partition_max_bytes": 1000}, {"max_bytes": 1000},
               {"partition_max_bytes": 10, "max_bytes": 10}):
        _, p = k.fetch(c, topic, 0, 0, version=version, **kw)
        batches = k.parse_batches(p["Records"])
        assert len(batches) >= 1, kw
        assert batches[0].base_offset == 0 and batches[0].size == len(big), kw
        assert batches[0].crc_ok
        assert len(p["Records"]) <= len(big) + 1000, "limit %r ignored beyond the first batch" % kw


def test_limits_respected_after_first_batch(conn_topic):
    c, topic = conn_topic
    sizes = []
    for i in range(10):
        b = k.batch([b"%d" % i * 500])
        sizes.append(len(b))
        k.produce(c, topic, 0, b)
    limit = sizes[0] * 3 + sizes[0] // 2
    _, p = k.fetch(c, topic, 0, 0, partition_max_bytes=limit)
    assert len(p["Records"]) <= limit
    whole = k.parse_batches(p["Records"])
    assert [b.base_offset for b in whole] == list(range(len(whole)))
    assert 3 <= len(whole) <= 4 and all(b.crc_ok for b in whole)
    # response-level limit over two partitions: partition 1 empty, still consistent
    body = k.fetch_body(topic, 0, 0, max_bytes=limit, partition_max_bytes=1 << 20)
    body["Topics"][0]["Partitions"].append({"Partition": 1, "FetchOffset": 0,
                                            "PartitionMaxBytes": 1 << 20})
    resp = c.request(1, 11, body)
    total = sum(len(pp["Records"] or b"") for t in resp["Responses"] for pp in t["Partitions"])
    assert total <= limit


def test_fetch_from_middle_of_batch(conn_topic):
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"a", b"b", b"c"]))
    k.produce(c, topic, 0, k.batch([b"d"]))
    _, p = k.fetch(c, topic, 0, 1)
    batches = k.parse_batches(p["Records"])
    # the whole batch holding offset 1 comes back; the client skips offset 0
    assert batches[0].base_offset == 0 and batches[0].records_count == 3
    assert [v for b in batches for o, v in b.offsets_values() if o >= 1] == [b"b", b"c", b"d"]


@pytest.mark.parametrize("version", [4, 11, 12])
def test_fetched_batches_are_the_produced_bytes(conn_topic, version):
    """Only baseOffset and partitionLeaderEpoch (outside the CRC) may change."""
    c, topic = conn_topic
    sent = [k.batch([b"k%d" % i], producer_id=-1) for i in range(3)]
    sent.append(k.batch(records=[k.Record(b"val", key=b"key", headers=[("h", b"v"),
                                                                         ("n", None)])]))
    for b in sent:
        k.produce(c, topic, 0, b)
    _, p = k.fetch(c, topic, 0, 0, version=version)
    got = k.parse_batches(p["Records"])
    assert len(got) == 4
    for i, (s, g) in enumerate(zip(sent, got)):
        assert g.base_offset == i
        assert g.raw[8:12] == s[8:12] and g.raw[16:] == s[16:]
        assert g.crc_ok
    rec = got[3].records[0]
    assert (rec.key, rec.value, rec.headers) == (b"key", b"val", [(b"h", b"v"), (b"n", None)])


# ---------------------------------------------------------------- offsets, isolation

@pytest.mark.parametrize("version", [4, 11, 12])
def test_read_committed_lso_equals_high_watermark(conn_topic, version):
    c, topic = conn_topic
    for i in range(3):
        k.produce(c, topic, 0, k.batch([b"%d" % i]))
    _, p = k.fetch(c, topic, 0, 0, version=version, isolation=1)
    assert p["ErrorCode"] == k.NONE
    assert p["HighWatermark"] == 3 and p["LastStableOffset"] == 3
    assert not p["AbortedTransactions"]
    assert len(k.parse_batches(p["Records"])) == 3
    assert k.list_offsets(c, topic, 0, -1, isolation=1)["Offset"] == 3


@pytest.mark.parametrize("version", [4, 11, 12])
def test_offset_out_of_range(conn_topic, version):
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"a", b"b"]))
    for off in (3, 1000, 1 << 62, -1, -7):
        _, p = k.fetch(c, topic, 0, off, version=version)
        assert p["ErrorCode"] == k.OFFSET_OUT_OF_RANGE, off
        assert not p["Records"]
    _, p = k.fetch(c, topic, 0, 2, version=version)       # exactly the log end: fine
    assert p["ErrorCode"] == k.NONE and not p["Records"] and p["HighWatermark"] == 2
    if version >= 5:
        assert p["LogStartOffset"] == 0


def test_fetch_unknown_topic_or_partition(conn_topic, topic_name):
    c, topic = conn_topic
    _, p = k.fetch(c, topic, 5, 0)
    assert p["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION
    _, p = k.fetch(c, topic_name + "-none", 0, 0)
    assert p["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION


def test_sessionless_fetch(conn_topic):
    """A full fetch with epoch -1 asks for no session and gets SessionId 0 (sessions
    themselves: test_2010_fetch_sessions.py)."""
    c, topic = conn_topic
    resp, p = k.fetch(c, topic, 0, 0, version=11)
    assert resp["ErrorCode"] == k.NONE and p["ErrorCode"] == k.NONE
    assert resp["SessionId"] == 0


@pytest.mark.parametrize("version", [1, 7])
def test_list_offsets_earliest_latest(conn_topic, version):
    c, topic = conn_topic
    assert k.list_offsets(c, topic, 0, -2, version)["Offset"] == 0
    assert k.list_offsets(c, topic, 0, -1, version)["Offset"] == 0
    produce_ts_batches(c, topic)
    e = k.list_offsets(c, topic, 0, -2, version)
    l_ = k.list_offsets(c, topic, 0, -1, version)
    assert (e["ErrorCode"], e["Offset"], e["Timestamp"]) == (k.NONE, 0, -1)
    assert (l_["ErrorCode"], l_["Offset"], l_["Timestamp"]) == (k.NONE, 15, -1)


@pytest.mark.parametrize("version", [1, 7])
def test_list_offsets_by_timestamp(conn_topic, version):
    """The first offset whose CreateTime >= target, to the record inside a batch."""
    c, topic = conn_topic
    produce_ts_batches(c, topic)
    cases = [(BASE_TS - 1, 0, BASE_TS), (BASE_TS, 0, BASE_TS), (BASE_TS + 1, 1, BASE_TS + 10),
             (BASE_TS + 20, 2, BASE_TS + 20), (BASE_TS + 21, 3, BASE_TS + 1000),
             (BASE_TS + 2015, 8, BASE_TS + 2020), (BASE_TS + 4020, 14, BASE_TS + 4020)]
    for target, offset, ts in cases:
        r = k.list_offsets(c, topic, 0, target, version)
        assert (r["ErrorCode"], r["Offset"], r["Timestamp"]) == (k.NONE, offset, ts), target
    r = k.list_offsets(c, topic, 0, BASE_TS + 4021, version)    # after every record
    assert (r["ErrorCode"], r["Offset"], r["Timestamp"]) == (k.NONE, -1, -1)


def test_list_offsets_by_timestamp_unordered_batches(conn_topic):
    """Timestamps need not grow with offsets: the answer is the first offset (in
    offset order) whose timestamp is >= target."""
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"late"], base_timestamp=BASE_TS + 5000))
    k.produce(c, topic, 0, k.batch([b"early"], base_timestamp=BASE_TS))
    r = k.list_offsets(c, topic, 0, BASE_TS + 10)
    assert (r["Offset"], r["Timestamp"]) == (0, BASE_TS + 5000)
    r = k.list_offsets(c, topic, 0, BASE_TS)
    assert (r["Offset"], r["Timestamp"]) == (0, BASE_TS + 5000)


def test_list_offsets_max_timestamp(conn_topic):
    """-3 (v7+): the offset and timestamp of the record with the largest timestamp,
    even when it sits inside a batch."""
    c, topic = conn_topic
    assert k.list_offsets(c, topic, 0, -3)["Offset"] == -1
    produce_ts_batches(c, topic, n_batches=2)
    recs = [k.Record(b"m0", timestamp_delta=0), k.Record(b"max", timestamp_delta=9000),
            k.Record(b"m2", timestamp_delta=5)]
    k.produce(c, topic, 0, k.batch(records=recs, base_timestamp=BASE_TS))   # offsets 6..8
    k.produce(c, topic, 0, k.batch([b"after"], base_timestamp=BASE_TS + 3000))
    r = k.list_offsets(c, topic, 0, -3)
    assert (r["ErrorCode"], r["Offset"], r["Timestamp"]) == (k.NONE, 7, BASE_TS + 9000)


def test_list_offsets_unknown_partition(conn_topic):
    c, topic = conn_topic
    assert k.list_offsets(c, topic, 9, -1)["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION


# ---------------------------------------------------------------- leader epochs

def leader_epoch(c, topic, partition=0):
    md = k.metadata(c, [topic], version=9, allow_auto=False)
    [p] = [p for p in md["Topics"][0]["Partitions"] if p["PartitionIndex"] == partition]
    assert p["LeaderEpoch"] >= 0
    return p["LeaderEpoch"]


@pytest.mark.parametrize("version", [2, 3, 4])
def test_offset_for_leader_epoch(conn_topic, version):
    c, topic = conn_topic
    for i in range(4):
        k.produce(c, topic, 0, k.batch([b"%d" % i, b"x"]))
    epoch = leader_epoch(c, topic)
    for current in (-1, epoch):
        r = k.offset_for_leader_epoch(c, topic, 0, epoch, current_leader_epoch=current,
                                      version=version)
        assert (r["ErrorCode"], r["LeaderEpoch"], r["EndOffset"]) == (k.NONE, epoch, 8)
    # batches carry the epoch they were written in
    _, p = k.fetch(c, topic, 0, 0)
    assert {b.partition_leader_epoch for b in k.parse_batches(p["Records"])} == {epoch}
    # a current epoch the broker has not reached yet
    r = k.offset_for_leader_epoch(c, topic, 0, epoch, current_leader_epoch=epoch + 5,
                                  version=version)
    assert r["ErrorCode"] == 75     # UNKNOWN_LEADER_EPOCH
    # an epoch beyond the current one: undefined
    r = k.offset_for_leader_epoch(c, topic, 0, epoch + 1, version=version)
    assert (r["ErrorCode"], r["LeaderEpoch"], r["EndOffset"]) == (k.NONE, -1, -1)
    r = k.offset_for_leader_epoch(c, topic, 4, epoch, version=version)
    assert r["ErrorCode"] == k.UNKNOWN_TOPIC_OR_PARTITION


def test_fetch_with_current_leader_epoch(conn_topic):
    c, topic = conn_topic
    k.produce(c, topic, 0, k.batch([b"a"]))
    epoch = leader_epoch(c, topic)
    body = k.fetch_body(topic, 0, 0)
    body["Topics"][0]["Partitions"][0]["CurrentLeaderEpoch"] = epoch
    p = c.request(1, 11, body)["Responses"][0]["Partitions"][0]
    assert p["ErrorCode"] == k.NONE and len(k.parse_batches(p["Records"])) == 1
    body["Topics"][0]["Partitions"][0]["CurrentLeaderEpoch"] = epoch + 3
    p = c.request(1, 11, body)["Responses"][0]["Partitions"][0]
    assert p["ErrorCode"] == 75 and not p["Records"]
