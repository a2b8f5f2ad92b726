"""A two-node cluster with two listeners per node: PLAINTEXT for node-to-node traffic
(inter.broker.listener.name) and CLIENTS, a SASL_SSL listener named in
listener.security.protocol.map.

A SCRAM user created through node 1 is kept in etcd and logs in on node 2; Metadata
on the CLIENTS listener names every node's CLIENTS address (on PLAINTEXT, every
node's PLAINTEXT address); kcat produces to and consumes from partitions of both
nodes over SASL_SSL; a wrong password is refused on either node.
"""

import os
import subprocess

import pytest

import certs
import harness
import kproto as k
import secnode

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9001"))


def test_sasl_ssl_clients_plaintext_between_nodes(cluster_factory, pki):
    cl = cluster_factory(0)
    for _ in range(2):
        n = cl.add_node(start=False)
        n.client_port = harness.free_port()
        ls = "PLAINTEXT://127.0.0.1:%d,CLIENTS://127.0.0.1:%d" % (n.port, n.client_port)
        n.overrides.update({
            "listeners": ls, "advertised.listeners": ls,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SASL_SSL",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "connection.failed.authentication.delay.ms": "50",
        })
        n.overrides.update(certs.tls_overrides(pki))
    cl.start()
    n1, n2 = cl.node(1), cl.node(2)
    secnode.add_scram_user(n1.bootstrap, "dave", "dave-secret", mechs=("SCRAM-SHA-512",))

    ctx = secnode.server_ctx(pki)
    with k.Conn("127.0.0.1", n2.client_port, ssl_context=ctx) as c:
        assert secnode.scram_login(c, "SCRAM-SHA-512", "dave", "dave-secret")["ErrorCode"] == 0
        brokers = sorted((b["NodeId"], b["Port"]) for b in k.metadata(c, None)["Brokers"])
        assert brokers == [(1, n1.client_port), (2, n2.client_port)]
        d = c.request(50, 0, {"Users": [{"Name": "dave"}]})
        assert [i["Mechanism"] for i in d["Results"][0]["CredentialInfos"]] == [2]
        d = c.request(50, 0, {"Users": None})
        assert [(x["User"], [i["Iterations"] for i in x["CredentialInfos"]])
                for x in d["Results"]] == [("dave", [4096])]
    with n2.conn() as c:
        brokers = sorted((b["NodeId"], b["Port"]) for b in k.metadata(c, None)["Brokers"])
        assert brokers == [(1, n1.port), (2, n2.port)]
    for n in (n1, n2):
        with k.Conn("127.0.0.1", n.client_port, ssl_context=ctx) as c:
            r = secnode.scram_login(c, "SCRAM-SHA-512", "dave", "wrong")
            assert r["ErrorCode"] == k.SASL_AUTHENTICATION_FAILED

    cl.create_topic("secure-spread", 4, via=1)
    rdk = ["kcat", "-b", "127.0.0.1:%d" % n2.client_port, "-X", "security.protocol=SASL_SSL",
           "-X", "ssl.ca.location=" + pki["ca"], "-X", "sasl.mechanisms=SCRAM-SHA-512",
           "-X", "sasl.username=dave", "-X", "sasl.password=dave-secret"]
    values = ["m%d" % i for i in range(40)]
    p = subprocess.run(rdk + ["-P", "-t", "secure-spread", "-K:"],
                       input="".join("k%d:%s\n" % (i, v) for i, v in enumerate(values)).encode(),
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    p = subprocess.run(rdk + ["-C", "-t", "secure-spread", "-o", "beginning", "-e", "-q"],
                       capture_output=True, timeout=60)
    assert p.returncode == 0, p.stderr.decode()
    assert sorted(p.stdout.decode().split()) == sorted(values)
    assert all(n.alive for n in (n1, n2))
