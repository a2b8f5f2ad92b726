"""OffsetFetch shows only durable commits. An OffsetCommit is in memory as soon as
it is appended, but a crash before the WAL has it takes it back: an OffsetFetch
that saw it would have shown an offset that later goes back (Kafka shows a commit
once it is written).

The WAL is on this test's own NFS server, stopped with SIGSTOP to hold a commit
between its append and its durability: meanwhile OffsetFetch does not answer;
when the server goes on, both answer, the fetch with the new offset. Stopped
again, skiffd and the server are SIGKILLed with a commit held: after the restarts
the group has the last durable offset, which is the last one any OffsetFetch
showed.
"""

import os
import signal
import time
import uuid

import pytest

import kgroup as kg
import kproto as k
from test_3001_nfs_wal import nfs_broker
from test_3002_nfs_server_restart import own_nfs  # noqa: F401 (fixture)

pytestmark = pytest.mark.restarts


class Stopped:
    """The NFS server stopped (SIGSTOP) for the with block."""

    def __init__(self, srv):
        with open(os.path.join(srv.dir, "ganesha.pid")) as f:
            self.pid = int(f.read().strip())

    def __enter__(self):
        os.kill(self.pid, signal.SIGSTOP)
        return self

    def __exit__(self, *a):
        try:
            os.kill(self.pid, signal.SIGCONT)
        except ProcessLookupError:  # killed meanwhile
            pass


def offset(c, group, topic):
    err, offs = kg.fetch_offsets(c, group, {topic: [0]})
    assert err == 0 and offs[(topic, 0)][2] == 0, (err, offs)
    return offs[(topic, 0)][0]


def test_offset_fetch_waits_for_the_commit_to_be_durable(broker_factory, own_nfs,  # noqa: F811
                                                         topic_name):
    b = nfs_broker(broker_factory, own_nfs)
    group = "g4015-" + uuid.uuid4().hex[:6]
    tp = (topic_name, 0)
    with kg.connect(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        assert kg.commit(c, group, {tp: 10}) == {tp: 0}
        assert offset(c, group, topic_name) == 10

    # Held, then let go: both answer, the fetch with the new offset.
    ca, cb = kg.connect(b.bootstrap), kg.connect(b.bootstrap)
    with Stopped(own_nfs):
        com = kg.Background(kg.commit, ca, group, {tp: 20})
        time.sleep(0.3)
        fet = kg.Background(offset, cb, group, topic_name)
        time.sleep(1.0)
        assert not com.done(), "a commit answered while the WAL could not write"
        assert not fet.done(), "OffsetFetch answered %r before the commit was durable" % (
            fet.result,)
    assert com.get(30) == {tp: 0}
    assert fet.get(30) == 20
    ca.close()
    cb.close()

    # Held, then the node and the NFS server crash (the server before it read the
    # WRITE): the commit never acknowledged is gone, and no OffsetFetch showed it.
    ca, cb = kg.connect(b.bootstrap), kg.connect(b.bootstrap)
    with Stopped(own_nfs):
        com = kg.Background(kg.commit, ca, group, {tp: 30})
        time.sleep(0.3)
        fet = kg.Background(offset, cb, group, topic_name)
        time.sleep(1.0)
        assert not fet.done(), "OffsetFetch answered %r before the commit was durable" % (
            fet.result,)
        b.kill()
        own_nfs.halt(kill=True)
    ca.close()
    cb.close()
    own_nfs.resume()
    b.start()
    with kg.connect(b.bootstrap) as c:
        assert offset(c, group, topic_name) == 20
