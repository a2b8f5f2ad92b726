"""ACLs with kafka-acls.sh (Apache Kafka 4.3.1's AclCommand): bindings added, listed
and removed through a node whose authorizer is on (authorizer.class.name), the
changes durable across a restart; a node without an authorizer answers the ACL
APIs with SECURITY_DISABLED, as Kafka does. With SKIFF_TEST_AGAINST=kafka, the
listing and removal against Apache Kafka configured alike."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import certs  # noqa: E402
import harness  # noqa: E402
import jtools  # noqa: E402
import kproto as k  # noqa: E402

AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "super.users": "User:admin;User:ANONYMOUS"}


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9004"))


def acls(b, *args):
    return ["acls", "--bootstrap-server", b.bootstrap] + list(args)


def ok(r):
    assert r["exit"] in (None, 0), jtools.show(r)
    return r["out"]


def describe_all(b):
    with k.Conn(b.bootstrap) as c:
        resp = c.request(29, 3, {"ResourceTypeFilter": 1, "ResourceNameFilter": None,
                                 "PatternTypeFilter": 1, "PrincipalFilter": None,
                                 "HostFilter": None, "Operation": 1, "PermissionType": 1})
    assert resp["ErrorCode"] == k.NONE, resp
    return sorted((r["ResourceType"], r["ResourceName"], r["PatternType"], a["Principal"],
                   a["Host"], a["Operation"], a["PermissionType"])
                  for r in resp["Resources"] for a in r["Acls"])


def test_kafka_acls_add_list_remove(secure_node, pki):
    b = secure_node(pki, AUTHZ)
    add, lst, rm = jtools.tools(
        acls(b, "--add", "--allow-principal", "User:alice", "--operation", "Read",
             "--operation", "Describe", "--topic", "orders", "--group", "billing"),
        acls(b, "--list", "--topic", "orders"),
        acls(b, "--add", "--deny-principal", "User:bob", "--operation", "Write",
             "--topic", "app.", "--resource-pattern-type", "prefixed"))
    ok(add)
    out = ok(lst)
    assert "User:alice" in out and "READ" in out and "DESCRIBE" in out, jtools.show(lst)
    ok(rm)
    assert describe_all(b) == sorted([
        (2, "orders", 3, "User:alice", "*", 3, 3), (2, "orders", 3, "User:alice", "*", 8, 3),
        (3, "billing", 3, "User:alice", "*", 3, 3), (3, "billing", 3, "User:alice", "*", 8, 3),
        (2, "app.", 4, "User:bob", "*", 4, 2)])

    if not harness.external():
        # Durable: the bindings come back with the node.
        b.restart()
        harness.wait_port("127.0.0.1", b.port)
        assert len(describe_all(b)) == 5

    (rm,) = jtools.tools(acls(b, "--remove", "--force", "--allow-principal", "User:alice",
                              "--operation", "Read", "--topic", "orders"))
    ok(rm)
    assert (2, "orders", 3, "User:alice", "*", 3, 3) not in describe_all(b)
    assert len(describe_all(b)) == 4


def test_acl_checks_and_filters(secure_node, pki):
    b = secure_node(pki, AUTHZ)
    c_ok = {"ResourceType": 2, "ResourceName": "t", "ResourcePatternType": 3,
            "Principal": "User:x", "Host": "*", "Operation": 3, "PermissionType": 3}
    bad = [dict(c_ok, ResourceType=4, ResourceName="not-the-cluster"),
           dict(c_ok, ResourcePatternType=2), dict(c_ok, Principal="nocolon"),
           dict(c_ok, ResourceName="")]
    with k.Conn(b.bootstrap) as c:
        resp = c.request(30, 3, {"Creations": [c_ok]})
        assert [r["ErrorCode"] for r in resp["Results"]] == [k.NONE]
        got = []
        for bc in bad:
            resp = c.request(30, 3, {"Creations": [bc]})
            got.append((resp["Results"][0]["ErrorCode"], resp["Results"][0]["ErrorMessage"]))
        # Kafka's parsing takes no MATCH pattern to create: UNKNOWN_SERVER_ERROR.
        assert got == [
            (k.INVALID_REQUEST, "The only valid name for the CLUSTER resource is kafka-cluster"),
            (-1, None),
            (k.INVALID_REQUEST, "Could not parse principal from `nocolon` (no colon is present "
                                "separating the principal type from the principal name)"),
            (k.INVALID_REQUEST, "Invalid empty resource name")]
        # A MATCH filter finds the literal binding by the topic's name.
        f = {"ResourceTypeFilter": 2, "ResourceNameFilter": "t", "PatternTypeFilter": 2,
             "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}
        resp = c.request(29, 3, f)
        assert [(r["ResourceName"], len(r["Acls"])) for r in resp["Resources"]] == [("t", 1)]
        resp = c.request(31, 3, {"Filters": [dict(f, PatternTypeFilter=3)]})
        res = resp["FilterResults"]
        assert res[0]["ErrorCode"] == k.NONE and len(res[0]["MatchingAcls"]) == 1
        assert c.request(29, 3, f)["Resources"] == []
    # A filter with the UNKNOWN operation (0) does not parse: Kafka closes.
    with k.Conn(b.bootstrap) as c:
        with pytest.raises(k.ConnectionClosed):
            c.request(31, 3, {"Filters": [dict(f, Operation=0)]})


@pytest.mark.skipif(bool(harness.external()), reason="a node without an authorizer")
def test_no_authorizer(broker):
    with k.Conn(broker.bootstrap) as c:
        resp = c.request(29, 3, {"ResourceTypeFilter": 1, "ResourceNameFilter": None,
                                 "PatternTypeFilter": 1, "PrincipalFilter": None,
                                 "HostFilter": None, "Operation": 1, "PermissionType": 1})
        assert resp["ErrorCode"] == k.SECURITY_DISABLED
        assert resp["ErrorMessage"] == "No Authorizer is configured."
        resp = c.request(30, 3, {"Creations": [
            {"ResourceType": 2, "ResourceName": "t", "ResourcePatternType": 3,
             "Principal": "User:x", "Host": "*", "Operation": 3, "PermissionType": 3}]})
        assert resp["Results"][0]["ErrorCode"] == k.SECURITY_DISABLED
