"""kafkajs 2.2.4 over SASL_SSL with SCRAM-SHA-512 and over SSL with a client certificate
(docs/security.md).

On a node with every kind of listener (secnode.py; with SKIFF_TEST_AGAINST=kafka, Apache
Kafka configured alike): a SCRAM user is created with AlterUserScramCredentials; kafkajs
creates a topic and produces to it over SASL_SSL as that user; its group consumer reads
every record back over SSL, authenticated by the test client certificate, each at the
offset the producer was given; a wrong password fails with kafkajs's SASL
authentication error, and the node serves on.
"""

import json
import os
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import certs  # noqa: E402
import harness  # noqa: E402
import ktest  # noqa: E402
import secnode  # noqa: E402

SCRIPT = os.path.join(ktest.HERE, "kafkajs_client.js")


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9001"))


@pytest.fixture(scope="module")
def node_modules():
    try:
        return ktest.install_kafkajs()
    except RuntimeError as e:
        pytest.skip(str(e))


def kafkajs(node_modules, security, *args):
    env = {"NODE_PATH": node_modules, "KAFKAJS_NO_PARTITIONER_WARNING": "1",
           "SKIFF_TEST_TIMEOUT_MS": "90000", "SKIFF_KAFKAJS_SECURITY": json.dumps(security)}
    p = ktest.run(["node", SCRIPT] + [str(a) for a in args], timeout=120, env=env, check=False,
                  what="kafkajs " + args[0])
    lines = p.stdout.decode(errors="replace").splitlines()
    res = [json.loads(line) for line in lines if line.startswith("{")]
    diag = "exit %d\n%s\n--- stderr ---\n%s" % (p.returncode, "\n".join(
        line for line in lines if line.startswith("{")), ktest.tail(p.stderr))
    return p.returncode, lines, res, diag


def scram(pki, password):
    return {"ssl": {"ca": pki["ca"]},
            "sasl": {"mechanism": "scram-sha-512", "username": "jsuser", "password": password}}


def client_cert(pki):
    return {"ssl": {"ca": pki["ca"], "cert": pki["client"], "key": pki["client_key"]}}


def marks(lines, tag):
    out = {}
    for line in lines:
        if line.startswith(tag + " "):
            i, p, off = map(int, line.split()[1:])
            out[i] = (p, off)
    return out


def test_kafkajs_scram_over_sasl_ssl_and_certificate_over_ssl(secure_node, pki, node_modules):
    b = secure_node(pki)
    secnode.add_scram_user(b.bootstrap, "jsuser", "jsuser-secret", mechs=("SCRAM-SHA-512",))
    topic = "kafkajs-secure-" + uuid.uuid4().hex[:6]
    n, parts = 600, 2

    rc, lines, res, diag = kafkajs(node_modules, scram(pki, "jsuser-secret"), "admin-produce",
                                   b.addr("SASL_SSL"), topic, n, parts)
    assert rc == 0 and res and "error" not in res[-1], diag
    acks = marks(lines, "ACK")
    assert len(acks) == n, diag

    rc, lines, res, diag = kafkajs(node_modules, client_cert(pki), "group-consume",
                                   b.addr("SSL"), topic, n, "js-" + uuid.uuid4().hex[:8])
    assert rc == 0 and res and "error" not in res[-1], diag
    assert res[-1]["received"] == n and res[-1]["bad"] == 0, diag
    recs = marks(lines, "REC")
    wrong = [(i, at, acks.get(i)) for i, at in recs.items() if acks.get(i) != at]
    assert not wrong, "read at another offset than acknowledged: %r" % wrong[:10]

    rc, lines, res, diag = kafkajs(node_modules, scram(pki, "wrong"), "admin-produce",
                                   b.addr("SASL_SSL"), topic + "-x", 1, 1)
    assert rc != 0 and res and res[-1].get("error") == "KafkaJSSASLAuthenticationError", diag

    if not harness.external():
        log = b.log_text()
        assert "authenticated as User:jsuser" in log
        assert "principal User:CN=alice,O=skiff-test" in log
        assert "jsuser-secret" not in log
        assert b.proc.poll() is None
