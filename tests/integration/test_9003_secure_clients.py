"""Real clients over SSL and SASL_SSL: Apache Kafka's Java clients and tools 4.3.1,
kcat (librdkafka) and kafka-python.

kafka-configs.sh creates a SCRAM user through the PLAINTEXT listener; that
user then produces and consumes over SASL_SSL with SCRAM-SHA-512 (Java, kcat)
and SCRAM-SHA-256 (kafka-python); a PLAIN user runs AdminClient over
SASL_SSL; the Java consumer reads over SSL with a client certificate; a wrong
password fails with Kafka's authentication error and the node serves on. With
SKIFF_TEST_AGAINST=kafka, the same against Apache Kafka configured alike.
"""

import os
import subprocess
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import certs  # noqa: E402
import harness  # noqa: E402
import jtools  # noqa: E402
import ktest  # noqa: E402
import secnode  # noqa: E402


TOPIC = "secure-clients"


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9001"))


def java_props(pki, protocol, mech=None, user=None, password=None, cert=False):
    props = ["security.protocol=" + protocol, "ssl.truststore.type=PEM",
             "ssl.truststore.location=" + pki["ca"]]
    if cert:
        props += ["ssl.keystore.type=PEM", "ssl.keystore.location=" + pki["client_keystore"]]
    if mech:
        module = ("org.apache.kafka.common.security.plain.PlainLoginModule" if mech == "PLAIN"
                  else "org.apache.kafka.common.security.scram.ScramLoginModule")
        props += ["sasl.mechanism=" + mech,
                  'sasl.jaas.config=%s required username="%s" password="%s";' % (
                      module, user, password)]
    out = []
    for p in props:
        out += ["--prop", p]
    return out


def kcat(*args, stdin=None):
    p = subprocess.run(["kcat"] + list(args), input=stdin, capture_output=True, timeout=60)
    return p.returncode, p.stdout.decode(), p.stderr.decode()


def test_tools_java_kcat_and_kafka_python(secure_node, pki):
    b = secure_node(pki)
    # kafka-configs.sh makes the SCRAM user, through the PLAINTEXT listener.
    user = ["configs", "--bootstrap-server", b.bootstrap, "--entity-type", "users",
            "--entity-name", "carol"]
    # One mechanism per command: Kafka takes one change per user and request.
    res = jtools.tools(
        user + ["--alter", "--add-config", "SCRAM-SHA-256=[iterations=8192,password=carol-secret]"],
        user + ["--alter", "--add-config", "SCRAM-SHA-512=[password=carol-secret]"])
    for alter in res:
        assert alter["exit"] in (None, 0) and "Completed updating config" in alter["out"], \
            jtools.show(alter)

    # Java producer over SASL_SSL with SCRAM-SHA-512.
    rc, out, err = jtools.java("Produce", ["-b", b.addr("SASL_SSL"), "-t", TOPIC, "-n", "200"]
                               + java_props(pki, "SASL_SSL", "SCRAM-SHA-512", "carol",
                                            "carol-secret"))
    summary = jtools.json_lines(out)
    assert rc == 0 and summary and summary[-1]["acked"] == 200, \
        "producer:\n%s\n%s" % ("\n".join(out[-5:]), ktest.tail(err))
    # Java consumer over SSL with a client certificate.
    rc, out, err = jtools.java("Consume", ["-b", b.addr("SSL"), "-t", TOPIC, "-n", "200"]
                               + java_props(pki, "SSL", cert=True))
    summary = jtools.json_lines(out)
    assert rc == 0 and summary and summary[-1]["ok"], \
        "consumer:\n%s\n%s" % ("\n".join(out[-5:]), ktest.tail(err))
    # AdminClient over SASL_SSL as a PLAIN user: the node it names is the SASL_SSL address.
    rc, out, err = jtools.java("Admin", ["-b", b.addr("SASL_SSL"), "cluster"]
                               + java_props(pki, "SASL_SSL", "PLAIN", "admin", "admin-secret"))
    cl = jtools.json_lines(out)
    assert rc == 0 and cl and cl[0]["ok"], "admin:\n%s\n%s" % ("\n".join(out), ktest.tail(err))
    assert [(n["host"], n["port"]) for n in cl[0]["nodes"]] == [("127.0.0.1",
                                                                 b.ports["SASL_SSL"])]
    # A wrong password: Kafka's authentication error.
    rc, out, err = jtools.java("Produce", ["-b", b.addr("SASL_SSL"), "-t", TOPIC, "-n", "1"]
                               + java_props(pki, "SASL_SSL", "SCRAM-SHA-512", "carol", "nope"),
                               timeout=60)
    assert rc != 0
    assert "invalid credentials with SASL mechanism SCRAM-SHA-512" in "\n".join(out) + err

    if not harness.external():
        # Debian's librdkafka 2.0 repeats the client nonce in its final SCRAM message:
        # Kafka 4.3 refuses that, Skiff takes it (docs/compatibility.md).
        kcat_scram(b, pki)
    kafka_python_scram(b, pki)

    log = b.log_text()
    if not harness.external():
        assert "authenticated as User:carol" in log and "authenticated as User:admin" in log
        assert b.proc.poll() is None
    assert "carol-secret" not in log and "admin-secret" not in log


def kcat_scram(b, pki):
    """kcat (librdkafka) over SASL_SSL with SCRAM-SHA-512."""
    rdk = ["-b", b.addr("SASL_SSL"), "-X", "security.protocol=SASL_SSL", "-X",
           "ssl.ca.location=" + pki["ca"], "-X", "sasl.mechanisms=SCRAM-SHA-512",
           "-X", "sasl.username=carol", "-X", "sasl.password=carol-secret"]
    rc, o, e = kcat(*rdk, "-P", "-t", TOPIC + "-kcat", stdin=b"k1\nk2\n")
    assert rc == 0, e
    rc, o, e = kcat(*rdk, "-C", "-t", TOPIC + "-kcat", "-o", "beginning", "-e", "-q")
    assert rc == 0 and o.split() == ["k1", "k2"], e


def kafka_python_scram(b, pki):
    """kafka-python 2.0 over SASL_SSL with SCRAM-SHA-256 (a v0 handshake, bare tokens)."""
    from kafka import KafkaConsumer, KafkaProducer
    kw = dict(bootstrap_servers=b.addr("SASL_SSL"), security_protocol="SASL_SSL",
              ssl_cafile=pki["ca"], sasl_mechanism="SCRAM-SHA-256",
              sasl_plain_username="carol", sasl_plain_password="carol-secret")
    prod = KafkaProducer(**kw)
    prod.send(TOPIC + "-py", b"from-python").get(timeout=30)
    prod.close()
    cons = KafkaConsumer(TOPIC + "-py", auto_offset_reset="earliest", consumer_timeout_ms=10000,
                         **kw)
    assert [m.value for m in cons][:1] == [b"from-python"]
    cons.close()
