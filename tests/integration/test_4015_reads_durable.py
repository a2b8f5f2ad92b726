"""Reads show only durable state. An OffsetCommit or a CreateTopics is in memory
as soon as its record is appended, but a crash before the WAL has it takes it
back: an OffsetFetch or a Metadata that saw it would have shown an offset that
later goes back, a topic that later vanishes (Kafka shows a commit, a topic, once
it is written).

The WAL is on this test's own NFS server, stopped with SIGSTOP to hold a change
between its append and its durability: meanwhile the read does not answer; when
the server goes on, both answer, the read with the change. Stopped again,
skiffd and the server are SIGKILLed with a change held: after the restarts the
state is the last durable one, which is the last one any read showed.
"""

import time
import uuid

import pytest

import kgroup as kg
import kproto as k
from test_3001_nfs_wal import nfs_broker
from test_3002_nfs_server_restart import own_nfs  # noqa: F401 (fixture)

pytestmark = pytest.mark.restarts


def offset(c, group, topic):
    err, offs = kg.fetch_offsets(c, group, {topic: [0]})
    assert err == 0 and offs[(topic, 0)][2] == 0, (err, offs)
    return offs[(topic, 0)][0]


def topics(c):
    return {t["Name"] for t in k.metadata(c, None)["Topics"]}


def create(c, name):
    return k.create_topics(c, [(name, 1, 1)])["Topics"][0]["ErrorCode"]


def held(own_nfs, b, change, read, crash):
    """Holds `change` (run on one connection) on the stopped server while `read`
    runs on another; returns (change's result, read's result), or Nones after
    the crash, when both servers went down before the server read the WRITE."""
    ca, cb = kg.connect(b.bootstrap), kg.connect(b.bootstrap)
    try:
        with own_nfs.stopped():
            ch = kg.Background(change, ca)
            time.sleep(0.3)
            rd = kg.Background(read, cb)
            time.sleep(1.0)
            assert not ch.done(), "a change answered while the WAL could not write"
            assert not rd.done(), "a read answered %r before the change was durable" % (
                rd.result,)
            if crash:
                b.kill()
                own_nfs.halt(kill=True)
        if crash:
            own_nfs.resume()
            b.start()
            return None, None
        return ch.get(30), rd.get(30)
    finally:
        ca.close()
        cb.close()


def test_reads_wait_for_the_change_to_be_durable(broker_factory, own_nfs,  # noqa: F811
                                                 topic_name):
    b = nfs_broker(broker_factory, own_nfs)
    group = "g4015-" + uuid.uuid4().hex[:6]
    tp = (topic_name, 0)
    with kg.connect(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        assert kg.commit(c, group, {tp: 10}) == {tp: 0}
        assert offset(c, group, topic_name) == 10

    # Held, then let go: both answer, the read with the change.
    assert held(own_nfs, b, lambda c: kg.commit(c, group, {tp: 20}),
                lambda c: offset(c, group, topic_name), False) == ({tp: 0}, 20)
    t2 = topic_name + "-2"
    err, seen = held(own_nfs, b, lambda c: create(c, t2), topics, False)
    assert err == 0 and t2 in seen, (err, seen)

    # Held, then the node and the NFS server crash (the server before it read the
    # WRITE): the change never acknowledged is gone, and no read showed it.
    held(own_nfs, b, lambda c: kg.commit(c, group, {tp: 30}),
         lambda c: offset(c, group, topic_name), True)
    with kg.connect(b.bootstrap) as c:
        assert offset(c, group, topic_name) == 20
    t3 = topic_name + "-3"
    held(own_nfs, b, lambda c: create(c, t3), topics, True)
    with kg.connect(b.bootstrap) as c:
        seen = topics(c)
        assert t2 in seen and t3 not in seen, seen
