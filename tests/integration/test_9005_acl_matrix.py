"""The ACL matrix over SASL_PLAINTEXT with SCRAM users, raw protocol: root is a super user
(super.users), alice has ACLs on some resources, mallory none. Each request is allowed
or refused with the error code Kafka 4.3 gives: produce, fetch, metadata (topics alice
may not describe are hidden), create and delete topics, describe and alter configs,
the group APIs (ListGroups lists only what may be described), ListOffsets,
OffsetForLeaderEpoch, CreatePartitions, InitProducerId, the ACL and SCRAM credential APIs,
DescribeLogDirs, AlterReplicaLogDirs, and transactions (WRITE on a transactional id to use
it, READ on the group of its offsets). With
SKIFF_TEST_AGAINST=kafka, the same against Apache Kafka configured alike."""

import os
import time

import pytest

import certs
import cluster
import harness
import kgroup
import kproto as k
import ktxn
import secnode

AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "super.users": "User:root;User:ANONYMOUS"}
TAF, GAF, CAF = (k.TOPIC_AUTHORIZATION_FAILED, k.GROUP_AUTHORIZATION_FAILED,
                 k.CLUSTER_AUTHORIZATION_FAILED)
ANY = {"ResourceTypeFilter": 1, "ResourceNameFilter": None, "PatternTypeFilter": 1,
       "PrincipalFilter": None, "HostFilter": None, "Operation": 1, "PermissionType": 1}


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9005"))


def acl(rtype, name, principal, op, pattern=3, perm=3):
    return {"ResourceType": rtype, "ResourceName": name, "ResourcePatternType": pattern,
            "Principal": principal, "Host": "*", "Operation": op, "PermissionType": perm}


def login(b, user):
    c = k.Conn(b.addr("SASL_PLAINTEXT"))
    r = secnode.scram_login(c, "SCRAM-SHA-256", user, user + "-secret")
    assert r["ErrorCode"] == k.NONE, r
    return c


def test_matrix(secure_node, pki):
    b = prepare(secure_node(pki, AUTHZ))
    metadata_hides_topics(b)
    produce_fetch(b)
    create_delete_topics(b)
    configs(b)
    groups(b)
    acl_and_credential_apis(b)
    transactions(b)


def prepare(b):
    for u in ("root", "alice", "mallory"):
        secnode.add_scram_user(b.bootstrap, u, u + "-secret", mechs=("SCRAM-SHA-256",))
    with k.Conn(b.bootstrap) as c:
        for t in ("shared", "secret"):
            k.create_topic(c, t)
        resp = c.request(30, 3, {"Creations": [
            acl(2, "shared", "User:alice", 3), acl(2, "shared", "User:alice", 4),
            acl(2, "shared", "User:alice", 10),
            acl(2, "alice-", "User:alice", 2, pattern=4),
            acl(3, "g1", "User:alice", 3)]})
        assert [r["ErrorCode"] for r in resp["Results"]] == [k.NONE] * 5, resp
    deadline = time.time() + 30
    while len(acl_list(b)) < 5 and time.time() < deadline:
        time.sleep(0.2)  # Kafka's brokers learn them from the metadata log
    assert len(acl_list(b)) == 5
    return b


def acl_list(b):
    with k.Conn(b.bootstrap) as c:
        return [a for r in c.request(29, 3, ANY)["Resources"] for a in r["Acls"]]


def topics_seen(c):
    return sorted(t["Name"] for t in k.metadata(c, None, version=12)["Topics"])


def metadata_hides_topics(b):
    with login(b, "alice") as c:
        seen = topics_seen(c)
        assert "shared" in seen and "secret" not in seen
        resp = k.metadata(c, ["secret", "shared"], version=12, allow_auto=False)
        assert {t["Name"]: t["ErrorCode"] for t in resp["Topics"]} == {"secret": TAF,
                                                                       "shared": k.NONE}
        # Auto-creation needs CREATE: alice has it on alice-*, not elsewhere.
        resp = k.metadata(c, ["nobody-topic"], version=12, allow_auto=True)
        assert resp["Topics"][0]["ErrorCode"] == TAF
    with login(b, "mallory") as c:
        assert [t for t in topics_seen(c) if t in ("shared", "secret")] == []
    with login(b, "root") as c:
        assert {"shared", "secret"} <= set(topics_seen(c))


def produce_fetch(b):
    rec = k.batch([b"v1"])
    with login(b, "alice") as c:
        assert k.produce(c, "shared", 0, rec)["ErrorCode"] == k.NONE
        assert k.fetch(c, "shared", 0, 0)[1]["ErrorCode"] == k.NONE
        assert k.produce(c, "secret", 0, rec)["ErrorCode"] == TAF
        assert k.init_producer_id(c)["ErrorCode"] == k.NONE  # WRITE on some topic
        assert k.list_offsets(c, "shared", 0, -1)["ErrorCode"] == k.NONE
        assert k.list_offsets(c, "secret", 0, -1)["ErrorCode"] == TAF
        assert cluster.create_partitions(c, "shared", 2)[0] == TAF
        assert k.offset_for_leader_epoch(c, "secret", 0, 0)["ErrorCode"] == TAF
        assert k.offset_for_leader_epoch(c, "shared", 0, 0)["ErrorCode"] == k.NONE
    with login(b, "mallory") as c:
        assert k.produce(c, "shared", 0, rec)["ErrorCode"] == TAF
        assert k.fetch(c, "shared", 0, 0)[1]["ErrorCode"] == TAF
        assert k.init_producer_id(c)["ErrorCode"] == CAF


def create_delete_topics(b):
    with login(b, "alice") as c:
        res = k.create_topics(c, [("alice-new", 1, 1), ("other-new", 1, 1)])["Topics"]
        assert [(t["Name"], t["ErrorCode"]) for t in res] == [("alice-new", k.NONE),
                                                              ("other-new", TAF)]
        assert cluster.delete_topics(c, ["alice-new", "shared", "secret"]) == {
            "alice-new": k.NONE, "shared": TAF, "secret": TAF}
    with login(b, "mallory") as c:
        res = k.create_topics(c, [("alice-other", 1, 1)])["Topics"]
        assert res[0]["ErrorCode"] == TAF


def configs(b):
    alter = {"Resources": [{"ResourceType": 2, "ResourceName": "shared", "Configs": [
        {"Name": "retention.ms", "ConfigOperation": 0, "Value": "100000"}]}],
        "ValidateOnly": True}
    with login(b, "alice") as c:
        assert kgroup.describe_configs(c, 2, "shared")["Results"][0]["ErrorCode"] == k.NONE
        assert kgroup.describe_configs(c, 2, "secret")["Results"][0]["ErrorCode"] == TAF
        assert kgroup.describe_configs(c, 4, "")["Results"][0]["ErrorCode"] == CAF
        assert c.request(44, 1, alter)["Responses"][0]["ErrorCode"] == TAF
    with login(b, "root") as c:
        assert c.request(44, 1, alter)["Responses"][0]["ErrorCode"] == k.NONE


def groups(b):
    with login(b, "root") as c:
        # Kafka's coordinator may still be loading: FindCoordinator waits for it.
        assert kgroup.find_coordinator(c, "g1")["ErrorCode"] == k.NONE
        assert kgroup.commit(c, "g1", {("secret", 0): 5}) == {("secret", 0): k.NONE}
    with login(b, "alice") as c:
        assert kgroup.find_coordinator(c, "g1")["ErrorCode"] == k.NONE
        assert kgroup.find_coordinator(c, "g2")["ErrorCode"] == GAF
        assert kgroup.commit(c, "g1", {("shared", 0): 1}) == {("shared", 0): k.NONE}
        assert kgroup.commit(c, "g1", {("secret", 0): 1}) == {("secret", 0): TAF}
        assert kgroup.commit(c, "g2", {("shared", 0): 1}) == {("shared", 0): GAF}
        err, offs = kgroup.fetch_offsets(c, "g1", {"shared": [0]})
        assert err == k.NONE and offs[("shared", 0)][0] == 1
        # Topics alice may not describe: refused when named, left out of "all".
        err, offs = kgroup.fetch_offsets(c, "g1", {"secret": [0]})
        assert offs[("secret", 0)] == (-1, "", TAF)
        err, offs = kgroup.fetch_offsets(c, "g1")
        assert err == k.NONE and list(offs) == [("shared", 0)]
        assert "g1" in [g["GroupId"] for g in kgroup.list_groups(c)["Groups"]]
    with login(b, "mallory") as c:
        assert kgroup.find_coordinator(c, "g1")["ErrorCode"] == GAF
        assert c.request(11, 5, kgroup.join_body("g1"))["ErrorCode"] == GAF
        assert kgroup.fetch_offsets(c, "g1", {"shared": [0]})[0] == GAF
        assert kgroup.delete_groups(c, ["g1"]) == {"g1": GAF}
        assert "g1" not in [g["GroupId"] for g in kgroup.list_groups(c)["Groups"]]


def acl_and_credential_apis(b):
    with login(b, "alice") as c:
        assert c.request(29, 3, ANY)["ErrorCode"] == CAF
        resp = c.request(30, 3, {"Creations": [acl(2, "x", "User:alice", 2)]})
        assert resp["Results"][0]["ErrorCode"] == CAF
        resp = c.request(31, 3, {"Filters": [ANY]})
        assert resp["FilterResults"][0]["ErrorCode"] == CAF
        resp = c.request(35, 4, {"Topics": None})
        assert resp["ErrorCode"] == CAF and resp["Results"] == []
        resp = c.request(34, 2, {"Dirs": [{"Path": "/nowhere", "Topics": [
            {"Name": "shared", "Partitions": [0]}]}]})
        assert [p["ErrorCode"] for t in resp["Results"] for p in t["Partitions"]] == [CAF]
        resp = c.request(50, 0, {"Users": [{"Name": "alice"}]})
        assert resp["ErrorCode"] == CAF
        assert [(x["User"], x["ErrorCode"]) for x in resp["Results"]] == [("", CAF)]
    with login(b, "root") as c:
        assert c.request(29, 3, ANY)["ErrorCode"] == k.NONE
        assert c.request(35, 4, {"Topics": None})["ErrorCode"] == k.NONE
        resp = c.request(50, 0, {"Users": [{"Name": "alice"}]})
        assert resp["ErrorCode"] == k.NONE and resp["Results"][0]["ErrorCode"] == k.NONE


TXAF = 53  # TRANSACTIONAL_ID_AUTHORIZATION_FAILED


def transactions(b):
    with k.Conn(b.bootstrap) as c:
        resp = c.request(30, 3, {"Creations": [acl(5, "tx-alice", "User:alice", 4)]})
        assert resp["Results"][0]["ErrorCode"] == k.NONE, resp
    deadline = time.time() + 30
    while len(acl_list(b)) < 6 and time.time() < deadline:
        time.sleep(0.2)
    init = {"TransactionTimeoutMs": 60000, "ProducerId": -1, "ProducerEpoch": -1}
    with login(b, "alice") as c:
        # WRITE implies DESCRIBE: alice finds and uses her transactional id only.
        tx = ktxn.Txn(c, "tx-alice")
        assert kgroup.find_coordinator(c, "tx-other", 1)["ErrorCode"] == TXAF
        assert c.request(22, 4, dict(init, TransactionalId="tx-other"))["ErrorCode"] == TXAF
        assert tx.add("shared") == {("shared", 0): k.NONE}
        assert tx.send("shared", [b"t1"])[0] == k.NONE
        r = c.request(25, 3, {"TransactionalId": "tx-alice", "ProducerId": tx.pid,
                              "ProducerEpoch": tx.epoch, "GroupId": "g2"})
        assert r["ErrorCode"] == GAF, r
        assert tx.end(False) == k.NONE
    with login(b, "mallory") as c:
        assert kgroup.find_coordinator(c, "tx-alice", 1)["ErrorCode"] == TXAF
        assert c.request(22, 4, dict(init, TransactionalId="tx-alice"))["ErrorCode"] == TXAF
        r = c.request(26, 3, {"TransactionalId": "tx-alice", "ProducerId": tx.pid,
                              "ProducerEpoch": tx.epoch, "Committed": True})
        assert r["ErrorCode"] == TXAF, r
        r = c.request(65, 0, {"TransactionalIds": ["tx-alice"]})
        assert r["TransactionStates"][0]["ErrorCode"] == TXAF, r
