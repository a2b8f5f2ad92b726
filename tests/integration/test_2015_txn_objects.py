"""Transactions and the object store: markers are batches, uploaded like any other, and a
read_committed read served from objects (a restarted node without WAL cache) sees what it
saw from the WAL cache: the last stable offset, the aborted transactions, the markers."""

import time

import pytest

import kproto as k
import s3env
from ktxn import NONE, Txn, marker_type, new_topic, read, txn_id

pytestmark = pytest.mark.restarts


def snapshot(c, topic):
    p, batches = read(c, topic, 1)
    return (p["LastStableOffset"], p["HighWatermark"],
            [(a["ProducerId"], a["FirstOffset"]) for a in p["AbortedTransactions"]],
            [(b.base_offset, b.is_control, marker_type(b) if b.is_control else None,
              [r.value for r in b.records]) for b in batches])


def test_read_committed_from_objects(broker_factory, s3, topic_name):
    props = s3env.s3_props(s3.url(s3.new_prefix("t2015")), s3_wal_upload_interval_ms=500)
    b = broker_factory(props)
    c = new_topic(b.bootstrap, topic_name)
    t = Txn(c, txn_id("t2015"))
    for vals, commit in (([b"keep-0", b"keep-1"], True), ([b"drop-0"], False),
                         ([b"keep-2"], True)):
        assert t.add(topic_name) == {(topic_name, 0): NONE}
        assert t.send(topic_name, vals)[0] == NONE
        assert t.end(commit) == NONE
    before = snapshot(c, topic_name)
    assert before[:3] == (7, 7, [(t.pid, 3)]), before
    c.close()
    s3env.wait_metric(b, lambda m: m["skiff_s3_upload_bytes_total"] > 0 and
                      m["skiff_s3_upload_lag_bytes"] < 4096, 60, "the upload")
    b.kill()
    b.overrides["wal.cache.bytes"] = "0"
    b.start()
    with k.Conn(b.bootstrap) as c:
        deadline = time.time() + 15
        while True:
            after = snapshot(c, topic_name)
            if after == before or time.time() > deadline:
                break
            time.sleep(0.2)
    assert after == before
    assert s3env.metrics(b)["skiff_s3_read_bytes_total"] > 0
