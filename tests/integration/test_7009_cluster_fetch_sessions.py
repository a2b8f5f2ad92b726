"""Fetch sessions in a cluster: a partition that moves away from the session's node
(kafka-reassign-partitions.sh) is answered NOT_LEADER_OR_FOLLOWER inside the session,
every time, while the other partitions stay quiet; the consumer forgets it there and
fetches it from its new main in a session of that node (sessions are per node)."""

import json
import os
import sys
import time

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import jtools  # noqa: E402
import kproto as k  # noqa: E402

pytestmark = pytest.mark.cluster

NOT_LEADER_OR_FOLLOWER = 6


def fetch(c, sid, epoch, topic, parts=(), forgotten=()):
    body = {"ReplicaId": -1, "MaxWaitMs": 0, "MinBytes": 0, "MaxBytes": 0x7FFFFFFF,
            "IsolationLevel": 0, "SessionId": sid, "SessionEpoch": epoch,
            "Topics": [{"Topic": topic, "Partitions": [
                {"Partition": p, "FetchOffset": o, "PartitionMaxBytes": 1 << 20}
                for p, o in parts]}] if parts else [],
            "ForgottenTopicsData": [{"Topic": topic, "Partitions": list(forgotten)}]
            if forgotten else [],
            "RackId": ""}
    resp = c.request(1, 12, body, timeout=30)
    assert resp["ErrorCode"] == k.NONE, resp
    return resp, {pd["PartitionIndex"]: pd for tr in resp["Responses"] for pd in tr["Partitions"]}


def values(pd):
    return [v for b in k.parse_batches(pd["Records"]) for _, v in b.offsets_values()]


def test_partition_moved_away_is_answered_in_the_session(cluster_factory, topic_name,
                                                         tmp_path):
    cl = cluster_factory(2).start()
    cl.wait_brokers()
    cl.create_topic(topic_name, 4)
    leaders = cl.wait_leaders(topic_name, 4)
    a = leaders[0][0]
    mine = sorted(p for p, (n, _) in leaders.items() if n == a)
    b = next(i for i in cl.nodes if i != a)
    with cl.nodes[a].conn() as c:
        for p in mine:
            assert k.produce(c, topic_name, p, k.batch([b"v%d" % p]))["ErrorCode"] == k.NONE
        resp, parts = fetch(c, 0, 0, topic_name, [(p, 0) for p in mine])
        sid = resp["SessionId"]
        assert sid != 0
        assert {p: values(pd) for p, pd in parts.items()} == {p: [b"v%d" % p] for p in mine}
        resp, parts = fetch(c, sid, 1, topic_name, [(p, 1) for p in mine])
        assert parts == {}

        plan = tmp_path / "move.json"
        plan.write_text(json.dumps({"version": 1, "partitions": [
            {"topic": topic_name, "partition": 0, "replicas": [b]}]}))
        r = jtools.tools(["reassign", "--bootstrap-server", cl.nodes[b].bootstrap,
                          "--reassignment-json-file", str(plan), "--execute"])[0]
        assert r["exit"] in (0, None), jtools.show(r)
        deadline = time.time() + 30
        while cl.leaders(topic_name, via=a)[0][0] != b:
            assert time.time() < deadline, "partition 0 still on node %d" % a
            time.sleep(0.2)

        # The moved partition comes with its error, the others stay quiet; again and again.
        for epoch in (2, 3):
            resp, parts = fetch(c, sid, epoch, topic_name)
            assert resp["SessionId"] == sid
            assert list(parts) == [0], parts
            assert parts[0]["ErrorCode"] == NOT_LEADER_OR_FOLLOWER
        # Forgotten, the session goes on without it.
        rest = [p for p in mine if p != 0]
        resp, parts = fetch(c, sid, 4, topic_name, forgotten=[0])
        assert parts == {} and resp["SessionId"] == (sid if rest else 0)

    with cl.nodes[b].conn() as c:
        assert k.produce(c, topic_name, 0, k.batch([b"after"]))["ErrorCode"] == k.NONE
        resp, parts = fetch(c, 0, 0, topic_name, [(0, 1)])
        assert resp["SessionId"] not in (0, sid)
        assert parts[0]["ErrorCode"] == k.NONE and values(parts[0]) == [b"after"]
