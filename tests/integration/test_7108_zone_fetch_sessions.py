"""Fetch sessions through a zone's proxy (docs/zones.md, "Proxy fetch"; KIP-227).

Three nodes, one per zone, zone routing on, a 3-partition topic with a main on each node.
A raw-protocol consumer in zone b fetches every partition from zone b's node: one
partition it serves as main, two as the proxy of mains in zones a and c. Inside one
fetch session, the incremental answers carry exactly the partitions with news, whether
the node serves them as main or as proxy, including a proxy long poll woken by a
produce to the main in another zone.
"""

import threading
import time

import pytest

import kproto as k
import zroute as zr

pytestmark = pytest.mark.cluster

PARTS = 3


def fetch(c, sid, epoch, topics=None, max_wait=0, min_bytes=0):
    body = {"ReplicaId": -1, "MaxWaitMs": max_wait, "MinBytes": min_bytes,
            "MaxBytes": 0x7FFFFFFF, "IsolationLevel": 0, "SessionId": sid,
            "SessionEpoch": epoch,
            "Topics": [{"Topic": t, "Partitions": [
                {"Partition": p, "FetchOffset": o, "PartitionMaxBytes": 1 << 20}
                for p, o in ps]} for t, ps in (topics or {}).items()],
            "ForgottenTopicsData": [], "RackId": "b"}
    resp = c.request(1, 12, body, timeout=30)
    parts = {pd["PartitionIndex"]: pd for tr in resp["Responses"] for pd in tr["Partitions"]}
    return resp, parts


def values(pd):
    return [v for b in k.parse_batches(pd["Records"]) for _, v in b.offsets_values()]


def produce(cl, leaders, topic, p, value):
    with cl.nodes[leaders[p][0]].conn() as c:
        assert k.produce(c, topic, p, k.batch([value]))["ErrorCode"] == k.NONE


class Session:
    """A consumer's side of one fetch session: positions, epochs, what came."""

    def __init__(self, c, topic, sid, positions):
        self.c, self.topic, self.sid = c, topic, sid
        self.epoch = 1
        self.pos = dict(positions)
        self.moved = dict(positions)  # named in the next request

    def fetch(self, max_wait=0, min_bytes=0):
        """One incremental fetch; returns {partition: [values]} of what came."""
        resp, parts = fetch(self.c, self.sid, self.epoch,
                            {self.topic: sorted(self.moved.items())} if self.moved else None,
                            max_wait, min_bytes)
        assert resp["ErrorCode"] == k.NONE and resp["SessionId"] == self.sid, resp
        self.epoch += 1
        self.moved = {}
        got = {}
        for p, pd in parts.items():
            assert pd["ErrorCode"] == k.NONE, (p, pd)
            recs = [(o, v) for b in k.parse_batches(pd["Records"]) for o, v in b.offsets_values()]
            if recs:
                got[p] = [v for _, v in recs]
                self.pos[p] = self.moved[p] = recs[-1][0] + 1
        return got

    def until(self, want, timeout=10.0):
        """Long polls until every partition of `want` {p: n} brought n records."""
        got = {}
        deadline = time.time() + timeout
        while time.time() < deadline and any(len(got.get(p, [])) < n for p, n in want.items()):
            for p, vs in self.fetch(max_wait=1000, min_bytes=1).items():
                got.setdefault(p, []).extend(vs)
        return got


def test_proxy_fetch_inside_a_session(zones, zone_cluster_factory, topic_name):
    cl, leaders = zr.routed_cluster(zone_cluster_factory, topic_name, PARTS)
    node = cl.node_in("b")
    proxied = [p for p in range(PARTS) if leaders[p][0] != node.node_id]
    assert len(proxied) == 2, leaders
    for p in range(PARTS):
        produce(cl, leaders, topic_name, p, b"first-%d" % p)
    with zones["b"].conn(node.bootstrap, client_id=zr.client_id("b", "sessions")) as c:
        # Full fetch: a proxy answers a partition it never followed once it asked its
        # main, so read until all three came.
        got, sid, epoch = {}, 0, 0
        deadline = time.time() + 15
        while len(got) < PARTS and time.time() < deadline:
            resp, parts = fetch(c, 0, 0, {topic_name: [(p, 0) for p in range(PARTS)]},
                                max_wait=1000, min_bytes=1)
            assert resp["ErrorCode"] == k.NONE
            got = {p: values(pd) for p, pd in parts.items() if values(pd)}
            sid = resp["SessionId"]
        assert sid != 0
        assert got == {p: [b"first-%d" % p] for p in range(PARTS)}, got
        # Positions moved: nothing new anywhere, the answer is empty.
        ses = Session(c, topic_name, sid, {p: 1 for p in range(PARTS)})
        assert ses.fetch() == {}
        resp, parts = fetch(c, sid, ses.epoch)
        ses.epoch += 1
        assert resp["ErrorCode"] == k.NONE and parts == {}, "partitions without news: %r" % parts
        # A record on a proxied partition wakes a long poll of the session, and only
        # that partition is answered.
        target = proxied[0]

        def later():
            time.sleep(1.0)
            produce(cl, leaders, topic_name, target, b"late")

        th = threading.Thread(target=later)
        th.start()
        t0 = time.time()
        got = ses.fetch(max_wait=8000, min_bytes=1)
        th.join()
        assert got == {target: [b"late"]}, got
        assert time.time() - t0 >= 0.8
        # Every partition again, main and proxied alike, each record once.
        for p in range(PARTS):
            produce(cl, leaders, topic_name, p, b"second-%d" % p)
        got = ses.until({p: 1 for p in range(PARTS)})
        assert got == {p: [b"second-%d" % p] for p in range(PARTS)}, got
        assert ses.fetch() == {}
