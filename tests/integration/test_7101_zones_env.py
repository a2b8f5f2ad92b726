"""The three-zone test environment itself (zones.py, tools/zones.sh, tools/zonefwd.py),
which the zone routing tests build on; not zone routing, which is off here
(zone.routing.enable=false: Metadata lists every node to a client of a known zone).

Three nodes, each in its zone's network namespace, form one cluster through the
region's etcd, shared volume and object store. A client inside zone a produces and
reads back through the zone-a node, on partitions whose main that node is: the
region's counters show no payload between zones then, while raw Produce requests
from zone a to the zone-b node show up as a->b bytes. A zonefwd interposed between
zone a and the zone-b node adds its one-way delay to every round trip, and its stall
holds a request without closing the connection until resume, its drop resets it,
its refuse closes new connections; with one per (zone, node of another zone) every
connection across zones is delayed and the cluster still serves.
"""

import json
import os
import socket
import statistics
import time

import pytest

import kproto as k
import zones as zm

pytestmark = pytest.mark.cluster

PARTS = 6
COUNT, SIZE = 300, 2000          # the zone-a client's records
RAW_BATCHES, RAW_RECORDS = 10, 32  # zone a -> zone-b node, SIZE bytes each
DELAY_MS = 1.0
ZONE_CLIENT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients",
                           "zone_client.py")


def rtt_ms(conn, n=40):
    """Median round trip of an ApiVersions request, in ms."""
    out = []
    for _ in range(n):
        t = time.perf_counter()
        r = k.api_versions(conn)
        out.append((time.perf_counter() - t) * 1000.0)
        assert r["ErrorCode"] == k.NONE, r
    return statistics.median(out)


def test_three_zones_one_cluster_counters_and_forwarder(zones, zone_cluster_factory, zone_fwd,
                                                        topic_name):
    t0 = time.monotonic()
    with zones.traffic() as whole:
        cl = zone_cluster_factory(
            overrides={"leader.imbalance.check.interval.seconds": "1",
                       "zone.routing.enable": "false"}).start()
        cl.wait_balanced()

        # Each node runs in its zone's namespace, on its zone's address, with the region's
        # services named by the region's address.
        for n in cl.nodes.values():
            z = zones[n.rack]
            assert zm.process_netns_inode(n.pid) == zm.netns_inode(z.ns), \
                "node %d (pid %d) is not in %s" % (n.node_id, n.pid, z.ns)
            assert n.host == z.addr, (n.node_id, n.host, z.addr)
            for key in ("etcd.endpoints", "wal.url", "objects.url"):
                assert "127.0.0.1" not in n.overrides[key], (key, n.overrides[key])
        assert sorted(n.rack for n in cl.nodes.values()) == zones.names

        # A client inside zone a sees the three nodes at their zones' addresses.
        a, b = cl.node_in("a"), cl.node_in("b")
        out = zones["a"].kcat(["-L", "-b", a.bootstrap, "-m", "10"]).stdout.decode()
        listed = {}
        for line in out.splitlines():
            words = line.split()
            if len(words) >= 4 and words[0] == "broker" and words[2] == "at":
                listed[int(words[1])] = words[3]
        assert listed == {n.node_id: n.bootstrap for n in cl.nodes.values()}, out

        cl.create_topic(topic_name, PARTS)
        mains = cl.mains(topic_name)
        pa, pb = mains.get(a.node_id), mains.get(b.node_id)
        assert pa and pb, "mains of %s: %r" % (topic_name, mains)

        # Same zone: bootstrap and partitions on the zone-a node.
        with zones.traffic() as same:
            r = zones["a"].python([ZONE_CLIENT, a.bootstrap, topic_name,
                                   ",".join(map(str, pa)), str(COUNT), str(SIZE)],
                                  timeout=90, check=False)
        res = json.loads(r.stdout.decode().strip().splitlines()[-1])
        assert r.returncode == 0, "zone client: %s\n%s" % (
            {x: res[x] if x != "acked" and x != "read" else len(res[x]) for x in res},
            r.stderr.decode(errors="replace")[-3000:])
        assert len(res["acked"]) == COUNT and len(res["read"]) == COUNT
        payload = COUNT * SIZE
        print("same-zone workload (%d bytes of records, %s):\n%s" % (
            payload, res["seconds"], same.matrix()))
        assert same.cross_zone() < payload // 20, \
            "a zone-a client of the zone-a node made the zones exchange %d bytes:\n%s" % (
                same.cross_zone(), same.matrix())
        assert same.bytes("a", "region") > 0, same.matrix()   # the WAL on the region's volume

        # Across zones: raw Produce from zone a straight to the zone-b node.
        raw = 0
        with zones.traffic() as cross:
            with zones["a"].conn(b.bootstrap) as c:
                for i in range(RAW_BATCHES):
                    vals = [(b"x%d-%d-" % (i, j)).ljust(SIZE, b".") for j in range(RAW_RECORDS)]
                    pr = k.produce(c, topic_name, pb[i % len(pb)], k.batch(vals))
                    assert pr["ErrorCode"] == k.NONE, pr
                    raw += sum(map(len, vals))
        print("zone a -> zone-b node (%d bytes of records):\n%s" % (raw, cross.matrix()))
        assert cross.bytes("a", "b") >= raw, cross.matrix()
        assert cross.bytes("b", "a") < raw // 10, cross.matrix()

        # The forwarder: direct round trips from zone a to the zone-b node, then through
        # a zonefwd interposed on that address.
        with zones["a"].conn(b.bootstrap) as c:
            direct = rtt_ms(c)
        f = zone_fwd("a", b.bootstrap, delay_ms=DELAY_MS)
        assert f.stats()["accepted"] == 0
        with zones["a"].conn(b.bootstrap) as c:
            via = rtt_ms(c)
            st = f.stats()
            assert (st["accepted"], st["active"]) == (1, 1), st
            print("ApiVersions round trip zone a -> zone-b node: %.3f ms direct, %.3f ms "
                  "through zonefwd (%.1f ms one way): +%.3f ms" % (direct, via, DELAY_MS,
                                                                  via - direct))
            # never less than the two delays; the rest is the forwarder's own hop
            assert via >= 2 * DELAY_MS, (direct, via)
            assert 2 * DELAY_MS - 0.5 <= via - direct <= 2 * DELAY_MS + 4.0, (direct, via)

            # stall: the request waits, the connection stays open; resume delivers it
            f.stall()
            c.send(18, 3, {"ClientSoftwareName": "zonefwd", "ClientSoftwareVersion": "1"})
            with pytest.raises(socket.timeout):
                c.recv(timeout=1.0)
            assert f.stats()["active"] == 1
            f.resume()
            assert c.recv(timeout=5.0)["ErrorCode"] == k.NONE

            # drop: both sides reset
            assert f.drop()["dropped"] == 1
            assert c.wait_closed(5.0), "the connection survived a drop"
        st = f.stats()
        assert st["active"] == 0 and st["bytes_up"] > 0 and st["bytes_down"] > 0, st

        # refuse: new connections are closed at once; zone c's are not interposed
        f.refuse()
        with zones["a"].conn(b.bootstrap) as c:
            assert c.wait_closed(5.0), "a connection survived refuse"
        with zones["c"].conn(b.bootstrap) as c:
            assert k.api_versions(c)["ErrorCode"] == k.NONE
        st = f.stats()
        assert (st["accepted"], st["refused"]) == (1, 1), st
        f.resume()

        pid = f.pid
        f.stop()
        assert f.proc is None and not os.path.exists("/proc/%d" % pid)
        with zones["a"].conn(b.bootstrap) as c:        # direct again
            assert rtt_ms(c, 5) < 2 * DELAY_MS

        # Every connection across zones delayed: a forwarder per (zone, node elsewhere);
        # the nodes' own connections come back through them, and the cluster serves.
        fwds = cl.delay_between_zones(DELAY_MS)
        assert len(fwds) == 6
        with zones["c"].conn(a.bootstrap) as c:
            assert rtt_ms(c, 10) >= 2 * DELAY_MS
        with zones["a"].conn(b.bootstrap) as c:
            pr = k.produce(c, topic_name, pb[0], k.batch([b"delayed"]))
            assert pr["ErrorCode"] == k.NONE, pr
        assert sum(x.stats()["accepted"] for x in fwds) >= 2
        zones.stop_forwarders()

    print("whole test:\n%s" % whole.matrix())
    assert whole.bytes("host", "a") > 0 and whole.bytes("a", "region") > 0
    assert time.monotonic() - t0 < 60


def test_regional_rewrites_loopback_urls(zones):
    r = zones.region_addr
    assert zones.regional("http://127.0.0.1:2379,http://127.0.0.1:2380") == \
        "http://%s:2379,http://%s:2380" % (r, r)
    assert zones.regional("nfs://127.0.0.1/x/export?version=3&nfsport=1") == \
        "nfs://%s/x/export?version=3&nfsport=1" % r
    assert zones.regional("s3://b?endpoint=http://127.0.0.1:9000&path-style=true") == \
        "s3://b?endpoint=http://%s:9000&path-style=true" % r
    assert zones.regional("file:///tmp/127.0.0.1") == "file:///tmp/127.0.0.1"
