"""SASL on the wire: SaslHandshake, SaslAuthenticate and the SCRAM credential APIs.

Each refusal is answered as Kafka 4.3 answers it (error code, message, closed
connection), and the node goes on serving other clients: a mechanism not
enabled, a request before authentication, SaslAuthenticate before a
handshake, a wrong password, an unknown user, malformed tokens. Also: the
session lifetime of connections.max.reauth.ms and re-authentication on the
same connection, and AlterUserScramCredentials' checks.

With SKIFF_TEST_AGAINST=kafka the same assertions run against Apache Kafka 4.3.1
started with the same listeners and users (secnode.KafkaRef), one per test.
"""

import os
import time

import pytest

import certs
import harness
import kproto as k
import secnode

skiff_only = pytest.mark.skipif(bool(harness.external()), reason="restarts its node")

SCRAM_FAILED = ("Authentication failed during authentication due to invalid credentials with "
                "SASL mechanism %s")


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9001"))


@pytest.fixture
def make_node(secure_node, pki):
    return lambda extra: secure_node(pki, extra)


@pytest.fixture
def node(make_node):
    b = make_node({"connections.max.reauth.ms": "600000"})
    secnode.add_scram_user(b.bootstrap, "alice", "alice-secret")
    return b


def logged(b, text):
    """Skiff logs who authenticated (Kafka does not, at its default level)."""
    return harness.external() or text in b.log_text()


def assert_serving(b, pki):
    with k.Conn(b.addr("SASL_SSL"), ssl_context=secnode.server_ctx(pki)) as c:
        assert secnode.scram_login(c, "SCRAM-SHA-512", "alice", "alice-secret")["ErrorCode"] == 0
        assert k.metadata(c, None)["Brokers"]
    with k.Conn(b.bootstrap) as c:
        assert k.api_versions(c)["ErrorCode"] == k.NONE


def test_scram_and_plain_logins_then_requests(node, pki):
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
            assert k.api_versions(c)["ErrorCode"] == k.NONE
            r = secnode.scram_login(c, mech, "alice", "alice-secret")
            assert r["ErrorCode"] == k.NONE and r["SessionLifetimeMs"] == 600000
            md = k.metadata(c, None)
            assert [(x["Host"], x["Port"]) for x in md["Brokers"]] == [
                ("127.0.0.1", node.ports["SASL_PLAINTEXT"])]
    with k.Conn(node.addr("SASL_SSL"), ssl_context=secnode.server_ctx(pki)) as c:
        r = secnode.plain_login(c, "bob", "bob-secret")
        assert r["ErrorCode"] == k.NONE
        assert k.metadata(c, None)["Brokers"][0]["Port"] == node.ports["SASL_SSL"]
    assert logged(node, "authenticated as User:alice")
    assert logged(node, "authenticated as User:bob")
    # SaslAuthenticate v0 (no session lifetime) works too.
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        assert secnode.scram_login(c, "SCRAM-SHA-256", "alice", "alice-secret",
                                   version=0)["ErrorCode"] == 0


def test_handshake_lists_mechanisms_and_refuses_others(node, pki):
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        r = c.request(17, 1, {"Mechanism": "GSSAPI"})
        assert r["ErrorCode"] == k.UNSUPPORTED_SASL_MECHANISM
        assert sorted(r["Mechanisms"]) == ["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512"]
        assert c.wait_closed(5.0)
    assert_serving(node, pki)


def closed_unanswered(c):
    """Closed. Skiff answers nothing; Kafka, once a handshake chose a mechanism, first
    answers the request with its API's error response (Metadata: an empty one)."""
    assert c.wait_closed(5.0)
    assert harness.external() or c.buf == b""


def test_requests_before_authentication_close_the_connection(node, pki):
    # A Metadata request first.
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        c.send(3, 9, {"AllowAutoTopicCreation": False, "Topics": None})
        assert c.wait_closed(5.0) and c.buf == b""
    # After the handshake, before SaslAuthenticate.
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        assert c.request(17, 1, {"Mechanism": "SCRAM-SHA-256"})["ErrorCode"] == k.NONE
        c.send(3, 9, {"AllowAutoTopicCreation": False, "Topics": None})
        closed_unanswered(c)
    # SaslAuthenticate without a handshake.
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        c.send(36, 2, {"AuthBytes": b"n,,n=alice,r=abc"})
        assert c.wait_closed(5.0) and c.buf == b""
    # Halfway through a SCRAM exchange.
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        c.request(17, 1, {"Mechanism": "SCRAM-SHA-256"})
        sc = secnode.ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
        assert c.request(36, 2, {"AuthBytes": sc.first()})["ErrorCode"] == k.NONE
        c.send(0, 9, {"Acks": -1, "TimeoutMs": 1000, "TopicData": []})
        closed_unanswered(c)
    assert_serving(node, pki)


def failed_login(c, login, *args):
    t0 = time.time()
    r = login(c, *args)
    took = time.time() - t0
    assert r["ErrorCode"] == k.SASL_AUTHENTICATION_FAILED, r
    assert took >= 0.25, "answered after %.3fs, before the failure delay" % took
    assert c.wait_closed(5.0)
    return r


def test_wrong_password_and_unknown_user(node, pki):
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
            r = failed_login(c, secnode.scram_login, mech, "alice", "wrong")
            assert r["ErrorMessage"] == SCRAM_FAILED % mech
        with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
            r = failed_login(c, secnode.scram_login, mech, "nobody", "x")
            assert r["ErrorMessage"] == SCRAM_FAILED % mech
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        r = failed_login(c, secnode.plain_login, "bob", "wrong")
        assert r["ErrorMessage"] == "Authentication failed: Invalid username or password"
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        failed_login(c, secnode.plain_login, "alice", "alice-secret")  # not a PLAIN user
    # Malformed tokens are failures too, never a crash.
    for tok in (b"", b"\0only-two", b"garbage", b"\xff" * 300):
        with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
            c.request(17, 1, {"Mechanism": "SCRAM-SHA-512"})
            r = c.request(36, 2, {"AuthBytes": tok})
            assert r["ErrorCode"] == k.SASL_AUTHENTICATION_FAILED
        with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
            c.request(17, 1, {"Mechanism": "PLAIN"})
            assert c.request(36, 2, {"AuthBytes": tok})["ErrorCode"] == k.SASL_AUTHENTICATION_FAILED
    assert "alice-secret" not in node.log_text() and "bob-secret" not in node.log_text()
    assert_serving(node, pki)


def test_sasl_apis_on_a_listener_without_sasl(node):
    with k.Conn(node.bootstrap) as c:
        assert c.request(17, 1, {"Mechanism": "PLAIN"})["ErrorCode"] == k.ILLEGAL_SASL_STATE
        assert c.request(36, 2, {"AuthBytes": b"x"})["ErrorCode"] == k.ILLEGAL_SASL_STATE
        assert k.api_versions(c)["ErrorCode"] == k.NONE


def test_reauthentication_and_session_expiry(make_node):
    b = make_node({"connections.max.reauth.ms": "2500"})
    secnode.add_scram_user(b.bootstrap, "alice", "alice-secret")
    secnode.add_scram_user(b.bootstrap, "carol", "carol-secret")
    with k.Conn(b.addr("SASL_PLAINTEXT")) as c:
        r = secnode.scram_login(c, "SCRAM-SHA-256", "alice", "alice-secret")
        assert r["SessionLifetimeMs"] == 2500
        # Re-authentication on the same connection, as the same user, same mechanism.
        assert secnode.scram_login(c, "SCRAM-SHA-256", "alice", "alice-secret")["ErrorCode"] == 0
        assert k.metadata(c, None)["Brokers"]
        # Not twice within a second: a handshake sooner is refused, the connection stays.
        assert c.request(17, 1, {"Mechanism": "SCRAM-SHA-256"})["ErrorCode"] == \
            k.ILLEGAL_SASL_STATE
        assert k.metadata(c, None)["Brokers"]
        time.sleep(1.1)
        # Another principal may not take the connection over.
        r = secnode.scram_login(c, "SCRAM-SHA-256", "carol", "carol-secret")
        assert r["ErrorCode"] == k.SASL_AUTHENTICATION_FAILED
        assert c.wait_closed(5.0)
    # Nor may another mechanism renew the session.
    with k.Conn(b.addr("SASL_PLAINTEXT")) as c:
        secnode.scram_login(c, "SCRAM-SHA-256", "alice", "alice-secret")
        assert c.request(17, 1, {"Mechanism": "SCRAM-SHA-512"})["ErrorCode"] == k.NONE
        sc = secnode.ScramClient("SCRAM-SHA-512", "alice", "alice-secret")
        c.send(36, 2, {"AuthBytes": sc.first()})
        assert c.wait_closed(5.0) and c.buf == b""
    with k.Conn(b.addr("SASL_PLAINTEXT")) as c:
        secnode.scram_login(c, "SCRAM-SHA-256", "alice", "alice-secret")
        time.sleep(2.7)
        # The session is over: the next request closes the connection.
        c.send(3, 9, {"AllowAutoTopicCreation": False, "Topics": None})
        assert c.wait_closed(5.0) and c.buf == b""


def test_alter_and_describe_scram_credentials(node):
    with k.Conn(node.bootstrap) as c:
        d = c.request(50, 0, {"Users": [{"Name": "alice"}, {"Name": "nobody"}]})
        res = {r["User"]: r for r in d["Results"]}
        assert sorted((i["Mechanism"], i["Iterations"]) for i in res["alice"]["CredentialInfos"]) \
            == [(1, 4096), (2, 4096)]
        assert res["nobody"]["ErrorCode"] == k.RESOURCE_NOT_FOUND
        ups = lambda name, mech, it: {"Name": name, "Mechanism": mech, "Iterations": it,  # noqa
                                      "Salt": b"s" * 16, "SaltedPassword": b"p" * 32}
        r = c.request(51, 0, {"Deletions": [{"Name": "ghost", "Mechanism": 1}],
                              "Upsertions": [ups("few", 1, 100), ups("bad-mech", 9, 4096),
                                             ups("", 1, 4096)]})
        codes = {x["User"]: x["ErrorCode"] for x in r["Results"]}
        assert codes == {"ghost": k.RESOURCE_NOT_FOUND, "few": 93, "bad-mech":
                         k.UNSUPPORTED_SASL_MECHANISM, "": 93}
        # One user twice in a request, even for two mechanisms (Kafka 4.3).
        for dels, upss in (([{"Name": "alice", "Mechanism": 1}], [ups("alice", 1, 4096)]),
                           ([], [ups("alice", 1, 4096), ups("alice", 2, 4096)])):
            r = c.request(51, 0, {"Deletions": dels, "Upsertions": upss})
            assert [(x["ErrorCode"], x["ErrorMessage"]) for x in r["Results"]] == [
                (92, "A user credential cannot be altered twice in the same request")]
        # Deleting one mechanism leaves the other.
        r = c.request(51, 0, {"Deletions": [{"Name": "alice", "Mechanism": 1}], "Upsertions": []})
        assert [x["ErrorCode"] for x in r["Results"]] == [k.NONE]
        # (Kafka's brokers learn the change a moment after they answer it.)
        deadline = time.time() + 10
        while True:
            d = c.request(50, 0, {"Users": None})
            got = [(x["User"], [i["Mechanism"] for i in x["CredentialInfos"]])
                   for x in d["Results"]]
            if got == [("alice", [2])] or time.time() > deadline:
                break
            time.sleep(0.1)
        assert got == [("alice", [2])]
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        r = secnode.scram_login(c, "SCRAM-SHA-256", "alice", "alice-secret")
        assert r["ErrorCode"] == k.SASL_AUTHENTICATION_FAILED


@skiff_only
def test_credentials_survive_a_restart(node):
    node.restart()
    for p in node.ports.values():
        harness.wait_port("127.0.0.1", p)
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        assert secnode.scram_login(c, "SCRAM-SHA-512", "alice", "alice-secret")["ErrorCode"] == 0


def test_handshake_v0_then_bare_tokens(node):
    """Kafka's original SASL framing (kafka-python 2.0 uses it): after a v0 handshake the
    tokens travel as bare size-prefixed frames, without Kafka headers."""
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        assert c.request(17, 0, {"Mechanism": "SCRAM-SHA-256"})["ErrorCode"] == k.NONE
        sc = secnode.ScramClient("SCRAM-SHA-256", "alice", "alice-secret")
        c.send_frame(sc.first())
        c.send_frame(sc.final(c.recv_frame()))
        assert c.recv_frame() == sc.expected
        assert k.metadata(c, None)["Brokers"]
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        assert c.request(17, 0, {"Mechanism": "PLAIN"})["ErrorCode"] == k.NONE
        c.send_frame(b"\0bob\0bob-secret")
        c._fill(4, time.time() + 5)
        assert c.buf[:4] == b"\0\0\0\0"  # an empty token: PLAIN has no server answer
        c.buf = c.buf[4:]
        assert k.api_versions(c)["ErrorCode"] == k.NONE
    # A failure closes the connection without an answer.
    with k.Conn(node.addr("SASL_PLAINTEXT")) as c:
        assert c.request(17, 0, {"Mechanism": "PLAIN"})["ErrorCode"] == k.NONE
        c.send_frame(b"\0bob\0wrong")
        assert c.wait_closed(5.0) and c.buf == b""
