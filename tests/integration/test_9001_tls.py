"""TLS: a node with a PLAINTEXT and an SSL listener at once.

Certificates are made by the test (certs.py). Checked: kcat (librdkafka)
produces and consumes over SSL with a client certificate; Metadata answers
each client with the addresses of the listener it came in on; the refusals a
TLS port makes (no certificate when one is required, an untrusted or expired
one, plaintext bytes), each leaving the node serving others; the principal
taken from the client certificate; and certificates reloaded on SIGHUP while
a connection made before stays open. The refusals run against Apache Kafka too
(SKIFF_TEST_AGAINST=kafka).
"""

import os
import shutil
import signal
import ssl
import subprocess
import time

import pytest

import certs
import harness
import kgroup
import kproto as k

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="configures Skiff's own listeners")


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9001"))


def tls_node(broker_factory, pki, client_auth="required", extra=None):
    ssl_port = harness.free_port()
    b = broker_factory(start=False)
    b.ssl_port = ssl_port
    props = {
        "listeners": "PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d" % (b.port, ssl_port),
        "advertised.listeners": "PLAINTEXT://127.0.0.1:%d,SSL://127.0.0.1:%d" % (b.port, ssl_port),
        "log.level": "debug",
    }
    props.update(certs.tls_overrides(pki, client_auth))
    props.update(extra or {})
    b.overrides.update(props)
    b.start()
    harness.wait_port("127.0.0.1", ssl_port)
    return b


def client_ctx(pki, cert="client"):
    ctx = ssl.create_default_context(cafile=pki["ca"])
    if cert:
        ctx.load_cert_chain(pki[cert], pki[cert + "_key"])
    return ctx


def kcat(*args, stdin=None):
    p = subprocess.run(["kcat"] + list(args), input=stdin, capture_output=True, timeout=30)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def ssl_kcat_args(b, pki, cert="client"):
    args = ["-b", "127.0.0.1:%d" % b.ssl_port, "-X", "security.protocol=SSL",
            "-X", "ssl.ca.location=" + pki["ca"]]
    if cert:
        args += ["-X", "ssl.certificate.location=" + pki[cert],
                 "-X", "ssl.key.location=" + pki[cert + "_key"]]
    return args


def assert_serving(b, pki):
    with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki)) as c:
        assert k.api_versions(c)["ErrorCode"] == k.NONE
    with k.Conn(b.bootstrap) as c:
        assert k.api_versions(c)["ErrorCode"] == k.NONE


@skiff_only
def test_kcat_over_ssl_with_client_certificate(broker_factory, pki):
    b = tls_node(broker_factory, pki)
    rc, out, err = kcat(*ssl_kcat_args(b, pki), "-P", "-t", "tls-topic",
                        stdin=b"one\ntwo\nthree\n")
    assert rc == 0, err
    rc, out, err = kcat(*ssl_kcat_args(b, pki), "-C", "-t", "tls-topic", "-o", "beginning",
                        "-e", "-q")
    assert rc == 0, err
    assert out.split() == ["one", "two", "three"]
    # The client certificate's subject is the connection's principal.
    assert "principal User:CN=alice,O=skiff-test" in b.log_text()


@skiff_only
def test_metadata_names_the_listener_the_client_came_in_on(broker_factory, pki):
    b = tls_node(broker_factory, pki)
    with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki)) as c:
        brokers = k.metadata(c, None, version=1)["Brokers"]
        assert [(x["Host"], x["Port"]) for x in brokers] == [("127.0.0.1", b.ssl_port)]
    with k.Conn(b.bootstrap) as c:
        brokers = k.metadata(c, None, version=1)["Brokers"]
        assert [(x["Host"], x["Port"]) for x in brokers] == [("127.0.0.1", b.port)]


def handshake_refused(b, ctx):
    """True when the node refuses the TLS handshake (or closes right after it)."""
    try:
        with k.Conn("127.0.0.1", b.ssl_port, ssl_context=ctx, timeout=5) as c:
            k.api_versions(c)
    except (ssl.SSLError, k.ConnectionClosed, ConnectionResetError, BrokenPipeError):
        return True
    return False


def test_refusals_leave_the_node_serving(secure_node, pki):
    b = secure_node(pki)  # Skiff, or Kafka with SKIFF_TEST_AGAINST=kafka
    b.ssl_port = b.ports["SSL"]
    # No client certificate where one is required.
    assert handshake_refused(b, client_ctx(pki, cert=None))
    # A certificate of an authority the node does not trust, and an expired one.
    assert handshake_refused(b, client_ctx(pki, cert="untrusted"))
    assert handshake_refused(b, client_ctx(pki, cert="expired"))
    if not harness.external():
        # With TLS 1.3 the client may see the refusal before the node has logged it.
        deadline = time.time() + 10
        while not any(m in b.log_text() for m in ("certificate expired",
                                                   "certificate has expired")):
            assert time.time() < deadline, "the expired certificate's refusal is not logged"
            time.sleep(0.05)
    # Plaintext Kafka bytes on the TLS port: closed, nothing answered.
    with k.Conn("127.0.0.1", b.ssl_port) as c:
        c.send(18, 3, {"ClientSoftwareName": "kproto", "ClientSoftwareVersion": "1"})
        assert c.wait_closed(5.0)
        assert not c.buf.startswith(b"\x00\x00")
    # kcat without a certificate fails too.
    rc, out, err = kcat(*ssl_kcat_args(b, pki, cert=None), "-L", "-m", "2")
    assert rc != 0
    assert_serving(b, pki)


@skiff_only
def test_requested_client_auth_accepts_anonymous(broker_factory, pki):
    b = tls_node(broker_factory, pki, client_auth="requested")
    with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki, cert=None)) as c:
        assert k.api_versions(c)["ErrorCode"] == k.NONE
    assert "principal User:ANONYMOUS" in b.log_text()
    assert handshake_refused(b, client_ctx(pki, cert="untrusted"))


@skiff_only
def test_sighup_reloads_certificates_without_dropping_connections(broker_factory, pki, tmp_path):
    # The node reads its keystore from a copy that the test then replaces.
    ks = str(tmp_path / "keystore.pem")
    shutil.copy(pki["keystore"], ks)
    b = tls_node(broker_factory, pki, extra={"ssl.keystore.location": ks})
    old = k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki))
    first = old.sock.getpeercert()["serialNumber"]
    # A new server certificate, same key and CA.
    d = pki["dir"]
    subprocess.run(["openssl", "x509", "-req", "-in", "server.csr", "-CA", "ca.pem", "-CAkey",
                    "ca.key", "-CAcreateserial", "-days", "5", "-out", "server2.pem",
                    "-extfile", "server.ext"], cwd=d, check=True, capture_output=True)
    with open(ks, "w") as out:
        for part in ("server.enc.key", "server2.pem", "ca.pem"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while "certificates and trust store reloaded" not in b.log_text():
        assert time.time() < deadline, "no reload logged"
        time.sleep(0.05)
    with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki)) as c:
        assert c.sock.getpeercert()["serialNumber"] != first
        assert k.api_versions(c)["ErrorCode"] == k.NONE
    # The connection made before the reload still works.
    assert k.api_versions(old)["ErrorCode"] == k.NONE
    old.close()
    # A broken keystore: the reload fails, the node keeps the last good one.
    with open(ks, "w") as out:
        out.write("not a PEM file\n")
    b.proc.send_signal(signal.SIGHUP)
    deadline = time.time() + 10
    while "TLS reload failed" not in b.log_text():
        assert time.time() < deadline, "no failed reload logged"
        time.sleep(0.05)
    assert_serving(b, pki)


@skiff_only
def test_secrets_are_not_shown(broker_factory, pki):
    b = tls_node(broker_factory, pki)
    with k.Conn(b.bootstrap) as c:
        resp = kgroup.describe_configs(c, 4, "1", ["ssl.key.password"])
    cfg = resp["Results"][0]["Configs"][0]
    assert cfg["Name"] == "ssl.key.password"
    assert cfg["Value"] is None and cfg["IsSensitive"]
    assert certs.KEY_PASSWORD not in b.log_text()


@skiff_only
def test_enabled_protocols(broker_factory, pki):
    b = tls_node(broker_factory, pki, extra={"ssl.enabled.protocols": "TLSv1.3"})
    old = client_ctx(pki)
    old.maximum_version = ssl.TLSVersion.TLSv1_2
    assert handshake_refused(b, old)
    with k.Conn("127.0.0.1", b.ssl_port, ssl_context=client_ctx(pki)) as c:
        assert c.sock.version() == "TLSv1.3"
        assert k.api_versions(c)["ErrorCode"] == k.NONE
