"""A mixed group (a classic and a consumer-protocol Java 4.3.1 member in one consumer
group) when skiffd is SIGKILLed under load: the group's state, its classic member
included, comes back from the log, and both members go on from their committed
offsets.

A producer writes all along (every acknowledged record is kept); the members read
and commit. skiffd is SIGKILLed while both produce and consume, and restarted:
ConsumerGroupDescribe shows both members again (MemberType 0 and 1, the same member
ids), no committed offset went back, and in the end every acknowledged record was
consumed, the committed offsets are the end offsets, and no record below the offsets
committed before the kill was read twice.
"""

import os
import sys
import threading
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
from test_4010_consumer_group_raw import describe  # noqa: E402
from test_4013_mixed_group import (CLASSIC, CONSUMER, FAST, Proc, committed_all,  # noqa: E402
                                   wait_classic, wait_for)

PARTS = 4


class Producer(threading.Thread):
    """Writes "k-i" to partition i % PARTS, one record a request, through broker
    restarts: acked[i] = (partition, offset) for every acknowledged record."""

    def __init__(self, bs, topic):
        super().__init__(daemon=True)
        self.bs, self.topic = bs, topic
        self.acked, self.next, self.stop_at = {}, 0, None

    def run(self):
        c = None
        while self.stop_at is None or self.next < self.stop_at:
            try:
                c = c or kg.connect(self.bs)
                p = self.next % PARTS
                r = kproto.produce(c, self.topic, p, kproto.batch(
                    records=[kproto.Record(key=b"k-%d" % self.next, value=b"v")]))
                if r["ErrorCode"] == 0:
                    self.acked[self.next] = (p, r["BaseOffset"])
                    self.next += 1
                time.sleep(0.003)
            except (OSError, kproto.ConnectionClosed, kproto.ProtocolError):
                c = None
                self.next += 1  # its fate is unknown: not counted either way
                time.sleep(0.2)


def kinds(d):
    return sorted((m["MemberType"], m["MemberId"]) for m in d.get("Members") or [])


def both_own(c, group):
    d = describe(c, group)
    ms = d.get("Members") or []
    own = [sum(len(tp["Partitions"]) for tp in m["Assignment"]["TopicPartitions"]) for m in ms]
    return (d["ErrorCode"] == 0 and d["GroupState"] == "Stable"
            and sorted(m["MemberType"] for m in ms) == [0, 1] and sum(own) == PARTS
            and all(own)), d


def offsets(c, group, topic):
    _, offs = kg.fetch_offsets(c, group, {topic: list(range(PARTS))})
    return {p: offs[(topic, p)][0] for p in range(PARTS)}


@pytest.mark.restarts
def test_mixed_group_survives_node_sigkill(broker_factory, topic_name, tmp_path):
    b = broker_factory(FAST)
    bs = b.bootstrap
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, PARTS)
    group = "g4014-" + uuid.uuid4().hex[:6]
    jtools.classpath()
    stopdir = str(tmp_path)
    prod = Producer(bs, topic_name)
    procs, recs = [], []
    try:
        prod.start()
        procs.append(Proc(bs, topic_name, group, "c1", CLASSIC, stopdir))
        wait_classic(c, group, 1, 60)
        procs.append(Proc(bs, topic_name, group, "k1", CONSUMER, stopdir))
        before = kinds(wait_for("both kinds owning partitions", lambda: both_own(c, group), 60))
        wait_for("records read and committed",
                 lambda: (lambda o: (min(o.values()) > 50, o))(offsets(c, group, topic_name)),
                 60)
        committed = offsets(c, group, topic_name)
        c.close()

        b.kill()
        b.start()
        c = kg.connect(bs)
        after = describe(c, group)
        assert after["ErrorCode"] == 0 and kinds(after) == before, (before, after)
        now = offsets(c, group, topic_name)
        assert all(now[p] >= committed[p] for p in range(PARTS)), (committed, now)
        time.sleep(2)  # more records after the restart
        prod.stop_at = prod.next
        prod.join(60)
        wait_for("both kinds owning partitions", lambda: both_own(c, group), 60)
        wait_for("every offset committed",
                 lambda: committed_all(c, group, topic_name, PARTS), 90)
        for p in procs:
            recs += p.stop()
    except BaseException:
        sys.stderr.write("\n".join(p.kill() for p in procs) + "\n")
        raise
    finally:
        prod.stop_at = 0
        for p in procs:
            p.kill()
    read = {}
    for _, part, off, i in recs:
        read.setdefault(i, []).append((part, off))
    missing = set(prod.acked) - set(read)
    assert not missing, "%d acknowledged records never consumed, e.g. %s" % (
        len(missing), sorted(missing)[:5])
    wrong = {i: v for i, v in read.items() if i in prod.acked and set(v) != {prod.acked[i]}}
    assert not wrong, "records read at other offsets: %s" % list(wrong.items())[:5]
    twice = {i: v for i, v in read.items() if len(v) > 1 and v[0][1] < committed[v[0][0]]}
    assert not twice, "committed records read again: %s" % list(twice.items())[:5]
    assert {m for m, _, _, _ in recs} == {"c1", "k1"}
