"""An adopter uploads the batches it adopted before the partition's newer ones, and
each only once (docs/cluster.md, "HANDOFF and ADOPT").

A partition's batches that its previous main had not uploaded stay in that main's WAL;
the adopter learns them from its SQLite view, which applies the ADOPT record a moment
after it is durable, and forgets them when it applies the registration of the objects
that took them. Here every view commits at most every 2 s (view.commit.interval.ms) and
a second topic keeps the nodes writing, so the adopter's view trails by up to 2 s while
it uploads soon after the adoption and every 64 KiB. An upload must neither carry the
partition's newer batches before the adopted ones nor carry the adopted ones a second
time with newer batches: either registers a range over a hole, which hides the batches
of the hole in another object. The adopter is then killed, so that the next main reads
the partition from the objects, and every acknowledged record is read back.
"""

import threading
import time

import pytest

import cluster as cm
import kproto as k

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

OVERRIDES = {
    "view.commit.interval.ms": "2000",
    # Uploads by size (and soon after an adoption): the first main writes less than
    # this, the adopter (with the second topic) far more.
    "s3.wal.upload.threshold": "65536",
    "s3.wal.upload.interval.ms": "600000",
}


def produce_some(cl, node, topic, start, count, acked, size=100):
    """`count` batches of 5 records to node; appends (0, offset, value) of each
    acknowledged record to acked. Returns the next value number."""
    with node.conn() as c:
        for _ in range(count):
            values = [b"v%07d-" % (start + i) + b"x" * size for i in range(5)]
            r = k.produce(c, topic, 0, k.batch(values))
            assert r["ErrorCode"] == k.NONE, r
            acked += [(0, r["BaseOffset"] + i, v) for i, v in enumerate(values)]
            start += len(values)
    return start


class Busy(threading.Thread):
    """Keeps live nodes' WALs and views busy: small batches to each partition of `topic`
    on its current leader unless that is `quiet`, errors ignored (leaders die here)."""

    def __init__(self, cl, topic, quiet):
        super().__init__(daemon=True)
        self.cl, self.topic, self.quiet = cl, topic, quiet
        self.stop = False
        self.sent = 0

    def run(self):
        while not self.stop:
            try:
                for p, (leader, _) in self.cl.leaders(self.topic).items():
                    node = self.cl.nodes.get(leader)
                    if node is None or node is self.quiet or not node.alive:
                        continue
                    with node.conn(timeout=5) as c:
                        for _ in range(20):
                            if k.produce(c, self.topic, p, k.batch([b"busy" * 50]))[
                                    "ErrorCode"] == k.NONE:
                                self.sent += 1
            except (OSError, AssertionError, k.ConnectionClosed, k.ProtocolError):
                time.sleep(0.05)


def uploads(node):
    return node.log_since_start().count("[tier] uploaded WAL")


def test_adopted_batches_go_up_before_newer_ones(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides=OVERRIDES).start()
    cl.create_topic(topic_name, 1)
    cl.create_topic(topic_name + "-busy", 3)
    first = cl.nodes[cl.wait_leaders(topic_name, 1)[0][0]]
    acked = []
    nxt = produce_some(cl, first, topic_name, 0, 4, acked, size=20)
    assert uploads(first) == 0, "the first main uploaded: nothing would be adopted from its WAL"

    # The first main stays below the upload threshold: its batches are left to adopt.
    busy = Busy(cl, topic_name + "-busy", quiet=first)
    busy.start()
    cm.wait_for(lambda: busy.sent >= 100, 30, "the second topic's traffic")
    first.kill()
    adopter = cl.nodes[cl.wait_leaders(topic_name, 1, timeout=60, exclude=[first.node_id])[0][0]]
    # Newer batches while the adopter's view has not applied the ADOPT yet, and after.
    t_end = time.monotonic() + 4.0
    while time.monotonic() < t_end:
        nxt = produce_some(cl, adopter, topic_name, nxt, 10, acked)
    base = uploads(adopter)
    cm.wait_for(lambda: uploads(adopter) >= base + 3, 30, "three more uploads by the adopter")
    assert "refused: stream" not in adopter.log_since_start(), adopter.log_since_start()[-3000:]

    busy.stop = True
    busy.join(30)
    adopter.kill()
    cl.wait_leaders(topic_name, 1, timeout=60, exclude=[first.node_id, adopter.node_id])
    stats = cl.verify(topic_name, 1, acked, {v for _, _, v in acked})
    assert stats["records"] == len(acked), stats
    print("%d records; the adopter uploaded %d times" % (len(acked), uploads(adopter)))
