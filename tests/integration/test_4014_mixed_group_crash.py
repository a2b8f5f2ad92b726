"""A mixed group (a classic and a consumer-protocol Java 4.3.1 member in one consumer
group) when skiffd is SIGKILLed: the group's state, its classic member included, comes
back from the log, and both members go on from their committed offsets.

The members read every acknowledged record of the first half and commit it; skiffd is
SIGKILLed and restarted; ConsumerGroupDescribe shows both members again (MemberType 0
and 1, the same member ids); the second half is produced; in the end every record was
consumed exactly once (nothing committed was lost, nothing read twice) and the
committed offsets are the end offsets.
"""

import os
import sys
import tempfile
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402
from test_4010_consumer_group_raw import describe  # noqa: E402
from test_4013_mixed_group import (CLASSIC, CONSUMER, FAST, Proc, committed_all,  # noqa: E402
                                   wait_classic, wait_for)


def produce(c, topic, parts, first, count):
    """Records "k-i" for i in [first, first+count), round robin; every ack checked."""
    for p in range(parts):
        keys = [i for i in range(first, first + count) if i % parts == p]
        for k in range(0, len(keys), 100):
            recs = [kproto.Record(key=b"k-%d" % i, value=b"v") for i in keys[k:k + 100]]
            r = kproto.produce(c, topic, p, kproto.batch(records=recs))
            assert r["ErrorCode"] == 0, r


def kinds(d):
    return sorted((m["MemberType"], m["MemberId"]) for m in d.get("Members") or [])


def both_own(c, group, parts):
    d = describe(c, group)
    ms = d.get("Members") or []
    own = [sum(len(tp["Partitions"]) for tp in m["Assignment"]["TopicPartitions"]) for m in ms]
    return (d["ErrorCode"] == 0 and d["GroupState"] == "Stable"
            and sorted(m["MemberType"] for m in ms) == [0, 1] and sum(own) == parts
            and all(own)), d


@pytest.mark.restarts
def test_mixed_group_survives_node_sigkill(broker_factory, topic_name):
    b = broker_factory(FAST)
    bs, parts, half = b.bootstrap, 4, 1200
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, parts)
    group = "g4014-" + uuid.uuid4().hex[:6]
    jtools.classpath()
    stopdir = tempfile.mkdtemp(prefix="g4014-")
    procs = []
    recs = []
    try:
        produce(c, topic_name, parts, 0, half)
        procs.append(Proc(bs, topic_name, group, "c1", CLASSIC, stopdir))
        wait_classic(c, group, 1, 60)
        procs.append(Proc(bs, topic_name, group, "k1", CONSUMER, stopdir))
        before = kinds(wait_for("both kinds owning partitions",
                                lambda: both_own(c, group, parts), 60))
        wait_for("the first half committed",
                 lambda: committed_all(c, group, topic_name, parts), 60)
        c.close()

        b.kill()
        b.start()
        c = kg.connect(bs)
        after = describe(c, group)
        assert after["ErrorCode"] == 0 and kinds(after) == before, (before, after)
        produce(c, topic_name, parts, half, half)
        wait_for("both kinds owning partitions", lambda: both_own(c, group, parts), 60)
        wait_for("every offset committed",
                 lambda: committed_all(c, group, topic_name, parts), 90)
        for p in procs:
            recs += p.stop()
    except BaseException:
        sys.stderr.write("\n".join(p.kill() for p in procs) + "\n")
        raise
    finally:
        for p in procs:
            p.kill()
    keys = [i for _, _, _, i in recs]
    assert sorted(set(keys)) == list(range(2 * half)), "%d of %d records consumed" % (
        len(set(keys)), 2 * half)
    assert len(keys) == len(set(keys)), "%d records read twice" % (len(keys) - len(set(keys)))
    assert {m for m, _, _, _ in recs} == {"c1", "k1"}
