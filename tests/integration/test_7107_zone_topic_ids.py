"""Requests that name topics by id, through a proxy (docs/zones.md).

Three nodes, one per zone, zone routing on. A client of zone b, talking to the zone-b
node, writes with Produce v13 and reads with Fetch v17 a partition whose main is in
zone a: the proxy resolves the id, sends the batch on through its payload log and the
confirm RPC, and serves the read from its own caches; ListOffsets v10 is forwarded to
the main. The same client asking the zone-c node (which is not its zone's proxy) gets
NOT_LEADER_OR_FOLLOWER with the KIP-951 hint naming the zone-b node, as Metadata names
it to that client, with the main's epoch and the zone-b node's address.
"""

import pytest

import kproto as k
import zroute as zr

pytestmark = pytest.mark.cluster

PARTS = 6
NOT_LEADER_OR_FOLLOWER = 6


def plain(d):
    return None if d is None else {key: v for key, v in d.items() if not key.startswith("_")}


def test_topic_ids_through_a_proxy(zones, zone_cluster_factory, topic_name):
    cl, mains = zr.routed_cluster(zone_cluster_factory, topic_name, PARTS)
    main_a = cl.node_in("a").node_id
    part = next(p for p, (m, _) in sorted(mains.items()) if m == main_a)
    epoch = mains[part][1]
    proxy, other = cl.node_in("b"), cl.node_in("c")
    cid = zr.client_id("b", "ids")
    with zones["b"].conn(proxy.bootstrap, client_id=cid) as c:
        md = k.metadata(c, [topic_name], version=13, allow_auto=False)
        assert md["ErrorCode"] == k.NONE
        tid = md["Topics"][0]["TopicId"]
        body = {"TransactionalId": None, "Acks": -1, "TimeoutMs": 10000,
                "TopicData": [{"TopicId": tid, "PartitionData": [
                    {"Index": part, "Records": k.batch([b"p1", b"p2"])}]}]}
        tr = c.request(0, 13, body)["Responses"][0]
        pr = tr["PartitionResponses"][0]
        assert tr["TopicId"] == tid and (pr["ErrorCode"], pr["BaseOffset"]) == (0, 0), pr

        fb = k.fetch_body("", part, 0, max_wait=2000)
        fb["Topics"][0]["TopicId"] = tid
        ft = c.request(1, 17, fb)["Responses"][0]
        p = ft["Partitions"][0]
        assert ft["TopicId"] == tid and p["ErrorCode"] == k.NONE, p
        assert [v for b in k.parse_batches(p["Records"]) for _, v in b.offsets_values()] \
            == [b"p1", b"p2"]

        lo = k.list_offsets(c, topic_name, part, -1, version=10)
        assert (lo["ErrorCode"], lo["Offset"]) == (k.NONE, 2), lo

    with zones["b"].conn(other.bootstrap, client_id=cid) as c:
        want_ep = {"NodeId": proxy.node_id, "Host": proxy.host, "Port": proxy.port,
                   "Rack": "b"}
        resp = c.request(0, 13, body)
        pr = resp["Responses"][0]["PartitionResponses"][0]
        assert pr["ErrorCode"] == NOT_LEADER_OR_FOLLOWER, pr
        assert plain(pr["CurrentLeader"]) == {"LeaderId": proxy.node_id, "LeaderEpoch": epoch}
        assert [plain(e) for e in resp["NodeEndpoints"]] == [want_ep]
        resp = c.request(1, 16, fb)
        p = resp["Responses"][0]["Partitions"][0]
        assert p["ErrorCode"] == NOT_LEADER_OR_FOLLOWER, p
        assert plain(p["CurrentLeader"]) == {"LeaderId": proxy.node_id, "LeaderEpoch": epoch}
        assert [plain(e) for e in resp["NodeEndpoints"]] == [want_ep]
