"""ssl.principal.mapping.rules beyond DEFAULT (docs/security.md, "Principal mapping
rules"): Kafka's RULE:pattern/replacement/[LU] syntax.

A node with an SSL listener (client certificates required) and the ACL authorizer maps
the test client's certificate (subject CN=alice,O=skiff-test) to User:ALICE; ACLs
granted to User:ALICE let kcat produce and consume over SSL, and Metadata on that
connection shows only what ALICE may describe. A node whose rules apply to no
certificate of the test refuses the connection and goes on serving; a malformed rule
list stops start-up with a message.
"""

import os
import subprocess

import pytest

import certs
import harness
import kproto as k

pytestmark = pytest.mark.skipif(bool(harness.external()),
                                reason="configures Skiff's own listeners")

RULES = "RULE:^CN=([a-z]+),O=skiff-test$/$1/U,RULE:^CN=(.*)$/$1/L,DEFAULT"


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9007"))


def ssl_node(broker_factory, pki, rules, extra=None):
    b = broker_factory(start=False)
    b.ssl_port = harness.free_port()
    ls = "PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d" % (b.port, b.ssl_port)
    b.overrides.update({"listeners": ls, "advertised.listeners": ls, "log.level": "debug",
                        "ssl.principal.mapping.rules": rules})
    b.overrides.update(certs.tls_overrides(pki, "required"))
    b.overrides.update(extra or {})
    b.start()
    harness.wait_port("127.0.0.1", b.ssl_port)
    return b


def client_ctx(pki):
    import ssl
    ctx = ssl.create_default_context(cafile=pki["ca"])
    ctx.load_cert_chain(pki["client"], pki["client_key"])
    return ctx


def kcat(b, pki, *args, stdin=None):
    p = subprocess.run(["kcat", "-b", "127.0.0.1:%d" % b.ssl_port,
                        "-X", "security.protocol=SSL", "-X", "ssl.ca.location=" + pki["ca"],
                        "-X", "ssl.certificate.location=" + pki["client"],
                        "-X", "ssl.key.location=" + pki["client_key"]] + list(args),
                       input=stdin, capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def allow(principal, topic, op):
    return {"ResourceType": 2, "ResourceName": topic, "ResourcePatternType": 3,
            "Principal": principal, "Host": "*", "Operation": op, "PermissionType": 3}


def test_rule_maps_the_certificate_to_the_principal_acls_name(broker_factory, pki):
    b = ssl_node(broker_factory, pki, RULES, {
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:ANONYMOUS"})
    with k.Conn(b.bootstrap) as c:
        for t in ("mapped", "hidden"):
            assert k.create_topics(c, [(t, 1, 1, {})])["Topics"][0]["ErrorCode"] == k.NONE
        resp = c.request(30, 3, {"Creations": [allow("User:ALICE", "mapped", 4),
                                               allow("User:ALICE", "mapped", 3)]})
        assert [r["ErrorCode"] for r in resp["Results"]] == [k.NONE, k.NONE]
    rc, _, err = kcat(b, pki, "-P", "-t", "mapped", stdin=b"one\ntwo\n")
    assert rc == 0, err
    rc, out, err = kcat(b, pki, "-C", "-t", "mapped", "-o", "beginning", "-e", "-q")
    assert rc == 0, err
    assert out.split() == ["one", "two"]
    assert "principal User:ALICE" in b.log_text()
    with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki)) as c:
        names = [t["Name"] for t in k.metadata(c, None)["Topics"]]
        assert names == ["mapped"]
        r = k.produce(c, "hidden", 0, k.batch([b"no"]))
        assert r["ErrorCode"] == k.TOPIC_AUTHORIZATION_FAILED


def test_no_rule_applies_the_connection_is_refused(broker_factory, pki):
    b = ssl_node(broker_factory, pki, "RULE:^CN=([a-z]+),O=elsewhere$/$1/")
    with pytest.raises((k.ConnectionClosed, OSError)):
        with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki)) as c:
            k.api_versions(c)
    assert "no ssl.principal.mapping.rules rule applies to CN=alice,O=skiff-test" in \
        b.log_text()
    with k.Conn(b.bootstrap) as c:
        assert k.api_versions(c)["ErrorCode"] == k.NONE


@pytest.mark.parametrize("rules", ["RULE:^CN=(.*)$/$1", "DEFAULT,MAYBE", "RULE:^CN=(.*$/$1/"])
def test_bad_rules_stop_start_up(rules):
    p = subprocess.run([harness.SKIFFD, "--override", "ssl.principal.mapping.rules=" + rules],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "property ssl.principal.mapping.rules:" in p.stderr, p.stderr
