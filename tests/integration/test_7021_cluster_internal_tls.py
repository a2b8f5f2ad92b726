"""Authenticated node-to-node traffic (docs/security.md, "Node-to-node traffic").

Three nodes, each with three listeners: INTERNAL (SSL, client certificates required,
inter.broker.listener.name), CLIENTS (SASL_SSL, SCRAM and PLAIN) and PLAINTEXT (the
harness's own connection, whose User:ANONYMOUS gets ordinary ACLs but no
ClusterAction). The nodes authenticate to each other with their own keystore, whose
certificate makes them User:CN=127.0.0.1, a super user.

- Two idempotent acks=all producers log in with SCRAM over SASL_SSL and write to
  partitions of every node; the node leading some of them is SIGKILLed; the partitions
  move; the node comes back and rebalancing hands it partitions, announced with
  HandoffReady RPCs over mutual TLS (counted, none failed); every acknowledged record is
  read back afterwards; kcat consumes everything over SASL_SSL.
- A SCRAM user without ClusterAction sending internal RPCs (HandoffReady, Confirm) is
  answered CLUSTER_AUTHORIZATION_FAILED and nothing changes; naming itself a node in
  its client id gives it nothing either (its Produce to a topic it may not write is
  refused).
- Plaintext bytes, and a TLS client without a certificate, on the INTERNAL listener are
  refused; the nodes go on serving.
- In three zones with zone routing, the proxy path (Confirm and Follow RPCs) runs over
  the same mutual TLS, each node checking that the other's certificate names the zone
  address it dialled.
"""

import os
import socket
import ssl
import subprocess
import time
import uuid

import pytest

import certs
import cluster as cm
import harness
import kproto as k
import s3env
import secnode
from kproto import F, S, _api

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

NODE_PRINCIPAL = "User:CN=127.0.0.1"
PARTS = 6

# Two of Skiff's internal RPCs (proto/rpc), as a client that should not send them would.
k.API_NAMES.setdefault(10000, "HandoffReady")
k.API_NAMES.setdefault(10001, "Confirm")
_api(10000, 0,
     [S("Partitions", "0+", [F("TopicId", "uuid", "0+"), F("Partition", "int32", "0+"),
                             F("Epoch", "int32", "0+"), F("SourceLog", "int64", "0+"),
                             F("SourceLsn", "int64", "0+")])],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      S("Partitions", "0+", [F("TopicId", "uuid", "0+"), F("Partition", "int32", "0+"),
                             F("ErrorCode", "int16", "0+")])])
_api(10001, 0,
     [F("ProxyNode", "int32", "0+"), F("PayloadLog", "int64", "0+"),
      S("Batches", "0+", [F("TopicId", "uuid", "0+"), F("Partition", "int32", "0+"),
                          F("Epoch", "int32", "0+"), F("Lsn", "int64", "0+"),
                          F("Length", "int32", "0+"), F("Crc", "int32", "0+"),
                          F("ProducerId", "int64", "0+"), F("ProducerEpoch", "int16", "0+"),
                          F("BaseSequence", "int32", "0+"), F("LastOffsetDelta", "int32", "0+"),
                          F("MaxTimestamp", "int64", "0+"), F("DeadlineMs", "int64", "0+")])],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("PayrefRevision", "int64", "0+"),
      S("Batches", "0+", [F("Lsn", "int64", "0+"), F("ErrorCode", "int16", "0+"),
                          F("ErrorMessage", "string", "0+", nullable="0+"),
                          F("BaseOffset", "int64", "0+"), F("LogAppendTimeMs", "int64", "0+"),
                          F("LogStartOffset", "int64", "0+")])])


def binding(rtype, name, principal, op):
    return {"ResourceType": rtype, "ResourceName": name, "ResourcePatternType": 3,
            "Principal": principal, "Host": "*", "Operation": op, "PermissionType": 3}


def secure_cluster(cluster_factory, pki):
    cl = cluster_factory(0, overrides={"leader.imbalance.check.interval.seconds": "2"})
    for _ in range(3):
        n = cl.add_node(start=False)
        n.internal_port, n.client_port = harness.free_port(), harness.free_port()
        n.overrides["metrics.listener"] = "127.0.0.1:%d" % harness.free_port()
        ls = "PLAINTEXT://127.0.0.1:%d,INTERNAL://127.0.0.1:%d,CLIENTS://127.0.0.1:%d" % (
            n.port, n.internal_port, n.client_port)
        n.overrides.update({
            "listeners": ls, "advertised.listeners": ls,
            "listener.security.protocol.map":
                "PLAINTEXT:PLAINTEXT,INTERNAL:SSL,CLIENTS:SASL_SSL",
            "inter.broker.listener.name": "INTERNAL",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
            "listener.name.clients.plain.sasl.jaas.config":
                secnode.jaas({"admin": "admin-secret"}),
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": NODE_PRINCIPAL + ";User:admin",
            "connection.failed.authentication.delay.ms": "50",
        })
        n.overrides.update(certs.tls_overrides(pki, "required"))
    cl.start()
    return cl


def grant(n, bindings, ctx):
    with k.Conn("127.0.0.1", n.client_port, ssl_context=ctx) as c:
        assert secnode.plain_login(c, "admin", "admin-secret")["ErrorCode"] == k.NONE
        resp = c.request(30, 3, {"Creations": bindings})
        assert [r["ErrorCode"] for r in resp["Results"]] == [k.NONE] * len(bindings), resp


def scram_conn(n, ctx, client_id="kproto"):
    c = k.Conn("127.0.0.1", n.client_port, ssl_context=ctx, client_id=client_id)
    assert secnode.scram_login(c, "SCRAM-SHA-512", "alice", "alice-secret")["ErrorCode"] == 0
    return c


def end_offsets(cl, topic):
    return {p: cl.read_partition(topic, p)[1] for p in range(PARTS)}


def handoff_rpcs(cl):
    """(HandoffReady RPCs sent, of which failed or refused), over the live nodes."""
    ms = [s3env.metrics(n) for n in cl.nodes.values() if n.alive]
    return (sum(m.get("skiff_cluster_handoff_rpcs_total", 0) for m in ms),
            sum(m.get("skiff_cluster_handoff_rpc_failures_total", 0) for m in ms))


def client_conf(pki):
    return {"security.protocol": "SASL_SSL", "ssl.ca.location": pki["ca"],
            "sasl.mechanisms": "SCRAM-SHA-512", "sasl.username": "alice",
            "sasl.password": "alice-secret"}


def test_nodes_authenticate_each_other(cluster_factory, pki_7021):
    pki = pki_7021
    ctx = secnode.server_ctx(pki)
    cl = secure_cluster(cluster_factory, pki)
    n1 = cl.node(1)
    anon = "User:ANONYMOUS"
    grant(n1, [binding(2, "*", anon, 2), binding(3, "*", anon, 2),
               binding(4, "kafka-cluster", anon, 5), binding(4, "kafka-cluster", anon, 7),
               binding(4, "kafka-cluster", anon, 8),
               binding(2, "secure-load", "User:alice", 4),
               binding(2, "secure-load", "User:alice", 3),
               binding(4, "kafka-cluster", "User:alice", 12)], ctx)
    secnode.add_scram_user(n1.bootstrap, "alice", "alice-secret", mechs=("SCRAM-SHA-512",))
    topic = "secure-load"
    cl.create_topic(topic, PARTS)
    cl.create_topic("guarded", 1)

    clients = ",".join("127.0.0.1:%d" % n.client_port for n in cl.nodes.values())
    loads = [cm.TimedLoad(clients, topic, PARTS, "s%d-%s" % (i, uuid.uuid4().hex[:6]),
                          extra_conf=client_conf(pki), rate_sleep=0.002) for i in range(2)]
    for ld in loads:
        ld.start()
    try:
        cm.wait_for(lambda: sum(ld.acked_count() for ld in loads) >= 500, 60,
                    "500 acknowledgements over SASL_SSL")
        leaders = cl.wait_leaders(topic, PARTS, timeout=60)
        assert len({ld for ld, _ in leaders.values()}) >= 2, leaders
        victim = max({ld for ld, _ in leaders.values()})
        cl.kill(victim)
        cl.wait_leaders(topic, PARTS, timeout=60, exclude=[victim])
        base = sum(ld.acked_count() for ld in loads)
        cm.wait_for(lambda: sum(ld.acked_count() for ld in loads) >= base + 500, 60,
                    "500 more acknowledgements after node %d was SIGKILLed" % victim)
        # Back as a new incarnation: rebalancing hands it partitions, and the nodes
        # handing them over tell it with HandoffReady, over mutual TLS.
        sent0, failed0 = handoff_rpcs(cl)
        cl.start_node(victim)
        cl.wait_brokers()
        cm.wait_for(lambda: handoff_rpcs(cl)[0] > sent0 and victim in cl.mains(topic)
                    and cl.mains(topic)[victim], 60,
                    "partitions handed to node %d with HandoffReady RPCs" % victim)
        base = sum(ld.acked_count() for ld in loads)
        cm.wait_for(lambda: sum(ld.acked_count() for ld in loads) >= base + 500, 60,
                    "500 more acknowledgements after node %d came back" % victim)
    finally:
        left = [ld.finish() for ld in loads]
    assert left == [0, 0], "records still undelivered: %r" % left
    cm.loads_ok(loads)
    stats = cm.verify_loads(cl, topic, PARTS, loads)
    assert stats["records"] >= stats["acked"] > 0, stats
    print("node %d SIGKILLed; %d records checked (%d acknowledged)" % (
        victim, stats["records"], stats["acked"]))

    sent, failed = handoff_rpcs(cl)
    assert sent > sent0 and failed == failed0, (sent0, failed0, sent, failed)
    for n in cl.nodes.values():
        assert "TLS:" not in n.log_since_start(), "node %d: a TLS failure" % n.node_id

    live = [n for n in cl.nodes.values() if n.alive]
    rdk = ["kcat", "-b", ",".join("127.0.0.1:%d" % n.client_port for n in live),
           "-X", "security.protocol=SASL_SSL", "-X", "ssl.ca.location=" + pki["ca"],
           "-X", "sasl.mechanisms=SCRAM-SHA-512", "-X", "sasl.username=alice",
           "-X", "sasl.password=alice-secret"]
    p = subprocess.run(rdk + ["-C", "-t", topic, "-o", "beginning", "-e", "-q"],
                       capture_output=True, timeout=120)
    assert p.returncode == 0, p.stderr.decode()
    assert len(p.stdout.split()) == stats["records"]

    refusals(cl, live, topic, ctx, pki)


def refusals(cl, live, topic, ctx, pki):
    before = end_offsets(cl, topic)
    md = cl.metadata([topic], version=12)["Topics"][0]
    tid, epochs = md["TopicId"], {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"])
                                  for p in md["Partitions"]}
    for n in live:
        mine = [p for p, (ld, _) in epochs.items() if ld == n.node_id]
        for cid in ("kproto", "skiff-node-%d" % live[0].node_id):
            with scram_conn(n, ctx, cid) as c:
                r = c.request(10000, 0, {"Partitions": [
                    {"TopicId": tid, "Partition": p, "Epoch": epochs[p][1] + 1,
                     "SourceLog": 1, "SourceLsn": 0} for p in mine]})
                assert r["ErrorCode"] == k.CLUSTER_AUTHORIZATION_FAILED, r
                r = c.request(10001, 0, {"ProxyNode": live[0].node_id, "PayloadLog": 1,
                                         "Batches": [
                    {"TopicId": tid, "Partition": p, "Epoch": epochs[p][1], "Lsn": 0,
                     "Length": 61, "Crc": 0, "ProducerId": -1, "ProducerEpoch": -1,
                     "BaseSequence": -1, "LastOffsetDelta": 0,
                     "MaxTimestamp": int(time.time() * 1000),
                     "DeadlineMs": int(time.time() * 1000) + 10000} for p in mine]})
                assert r["ErrorCode"] == k.CLUSTER_AUTHORIZATION_FAILED, r
                # A node's client id earns nothing: alice may not write "guarded".
                pr = k.produce(c, "guarded", 0, k.batch([b"not-a-node"]))
                assert pr["ErrorCode"] == k.TOPIC_AUTHORIZATION_FAILED, pr
        assert "Confirm refused to User:alice" in n.log_text()
    # Plaintext anonymous, even naming a node, gets no more.
    with k.Conn(live[0].bootstrap, client_id="skiff-node-%d" % live[-1].node_id) as c:
        r = c.request(10000, 0, {"Partitions": []})
        assert r["ErrorCode"] == k.CLUSTER_AUTHORIZATION_FAILED, r
    assert end_offsets(cl, topic) == before
    assert cl.leaders(topic) == {p: v for p, v in epochs.items()}

    for n in live:
        # Plaintext bytes on the TLS port: the connection is closed.
        with socket.create_connection(("127.0.0.1", n.internal_port), timeout=10) as s:
            s.sendall(k.encode_request(18, 0, {}, 1))
            data = b""
            try:
                while True:
                    chunk = s.recv(4096)
                    if not chunk:
                        break
                    data += chunk
            except ConnectionResetError:
                pass
            assert not data.startswith(b"\x00\x00"), "a Kafka answer on the TLS port"
        # TLS without a client certificate: the handshake (or the first read) fails.
        with pytest.raises((ssl.SSLError, ConnectionResetError, k.ConnectionClosed, OSError)):
            with k.Conn("127.0.0.1", n.internal_port, ssl_context=ctx) as c:
                k.api_versions(c)
    assert all(n.alive for n in live)
    with live[0].conn() as c:
        assert k.metadata(c, [topic])["Topics"][0]["ErrorCode"] == k.NONE


@pytest.fixture(scope="module")
def pki_7021():
    return certs.make(os.path.join(harness.WORK, "pki-7021"))


def test_proxy_path_over_mutual_tls(zones, zone_cluster_factory, pki_7021):
    """Zone routing (docs/zones.md) with the nodes on an SSL inter-broker listener whose
    certificates name their zone addresses: a client of zone b writes, through the
    zone-b proxy, to a partition whose main is in zone a (the proxy's Confirm RPC goes to
    the main over mutual TLS, the address checked) and reads it back from the proxy (its
    Follow RPCs, the same way); the main has the records."""
    import zroute as zr
    pki = pki_7021
    addrs = [zones[z].addr for z in zones.names]
    certs._cert(pki["dir"], "zone-node", "/CN=skiff-node", "ca",
                ext="subjectAltName=" + ",".join("IP:" + a for a in addrs) + "\n")
    keystore = os.path.join(pki["dir"], "zone-node-keystore.pem")
    with open(keystore, "w") as out:
        for part in ("zone-node.key", "zone-node.pem"):
            with open(os.path.join(pki["dir"], part)) as f:
                out.write(f.read())
    cl = zone_cluster_factory(overrides=dict(zr.ROUTING))
    for n in cl.nodes.values():
        n.internal_port = harness.free_port()
        ls = "PLAINTEXT://%s:%d,INTERNAL://%s:%d" % (n.host, n.port, n.host, n.internal_port)
        n.overrides.update({
            "listeners": ls, "advertised.listeners": ls,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,INTERNAL:SSL",
            "inter.broker.listener.name": "INTERNAL",
            "ssl.keystore.location": keystore, "ssl.truststore.location": pki["ca"],
            "ssl.client.auth": "required",
        })
    cl.start()
    cl.wait_balanced()
    topic = "zone-tls"
    cl.create_topic(topic, 3)
    mains = cl.wait_balanced(topic)
    main_a = cl.node_in("a").node_id
    part = mains[main_a][0]
    proxy = cl.node_in("b")
    values = [b"z%d" % i for i in range(20)]
    with zones["b"].conn(proxy.bootstrap, client_id=zr.client_id("b", "tls")) as c:
        md = k.metadata(c, [topic], version=12, allow_auto=False)
        leader = {p["PartitionIndex"]: p["LeaderId"] for p in md["Topics"][0]["Partitions"]}
        assert leader[part] == proxy.node_id, md
        pr = k.produce(c, topic, part, k.batch(values))
        assert (pr["ErrorCode"], pr["BaseOffset"]) == (k.NONE, 0), pr
        got = []
        deadline = time.time() + 20
        while len(got) < len(values) and time.time() < deadline:
            _, p = k.fetch(c, topic, part, len(got), max_wait=500)
            assert p["ErrorCode"] == k.NONE, p
            got += [v for b in k.parse_batches(p["Records"]) for _, v in b.offsets_values()]
        assert got == values
    _, hw, batches = cl.read_partition(topic, part)
    assert hw == len(values)
    assert [v for b in batches for _, v in b.offsets_values()] == values
    for n in cl.nodes.values():
        assert "TLS:" not in n.log_since_start(), "node %d: a TLS failure" % n.node_id
