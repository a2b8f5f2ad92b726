"""ACLs in a two-node cluster: bindings created through node 1 are kept in etcd and
take effect on node 2 without a restart (its watch of etcd), and so does their
deletion. Clients log in with SCRAM on a SASL_PLAINTEXT listener; node-to-node
traffic and the administrator use PLAINTEXT, whose principal (User:ANONYMOUS) is a
super user."""

import time

import pytest

import harness
import kproto as k
import secnode

pytestmark = pytest.mark.cluster

ANY = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
       "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}
BINDING = {"ResourceType": 2, "ResourceName": "spread", "ResourcePatternType": 3,
           "Principal": "User:erin", "Host": "*", "Operation": 4, "PermissionType": 3}


def erin_sees(n):
    with k.Conn("127.0.0.1", n.client_port) as c:
        r = secnode.scram_login(c, "SCRAM-SHA-512", "erin", "erin-secret")
        assert r["ErrorCode"] == k.NONE, r
        return "spread" in [t["Name"] for t in k.metadata(c, None)["Topics"]]


def wait_for(what, cond, timeout=20.0):
    deadline = time.time() + timeout
    while not cond():
        assert time.time() < deadline, "timed out waiting for " + what
        time.sleep(0.2)


def test_acls_reach_the_other_node(cluster_factory):
    cl = cluster_factory(0)
    for _ in range(2):
        n = cl.add_node(start=False)
        n.client_port = harness.free_port()
        ls = "PLAINTEXT://127.0.0.1:%d,CLIENTS://127.0.0.1:%d" % (n.port, n.client_port)
        n.overrides.update({
            "listeners": ls, "advertised.listeners": ls,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CLIENTS:SASL_PLAINTEXT",
            "inter.broker.listener.name": "PLAINTEXT",
            "sasl.enabled.mechanisms": "SCRAM-SHA-512",
            "authorizer.class.name":
                "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
            "super.users": "User:ANONYMOUS",
        })
    cl.start()
    n1, n2 = cl.node(1), cl.node(2)
    secnode.add_scram_user(n1.bootstrap, "erin", "erin-secret", mechs=("SCRAM-SHA-512",))
    cl.create_topic("spread", 2, via=1)
    assert not erin_sees(n2)

    with n1.conn() as c:
        resp = c.request(30, 3, {"Creations": [BINDING]})
        assert resp["Results"][0]["ErrorCode"] == k.NONE
    wait_for("node 2 to apply the new binding", lambda: erin_sees(n2))
    with n2.conn() as c:
        acls = [(r["ResourceName"], a["Principal"], a["Operation"])
                for r in c.request(29, 3, ANY)["Resources"] for a in r["Acls"]]
    assert acls == [("spread", "User:erin", 4)]

    with n1.conn() as c:
        resp = c.request(31, 3, {"Filters": [dict(ANY, PrincipalFilter="User:erin")]})
        assert len(resp["FilterResults"][0]["MatchingAcls"]) == 1
    wait_for("node 2 to apply the deletion", lambda: not erin_sees(n2))
    assert all(n.alive for n in (n1, n2))
