"""Apache Kafka's Java producer (4.3.1) against the authorizer, over SASL_PLAINTEXT
with a SCRAM user: allowed on its own topic (WRITE there also covers its idempotent
producer id), refused on another one with TopicAuthorizationException, as Kafka's own
brokers refuse it. With SKIFF_TEST_AGAINST=kafka, the same against Apache Kafka."""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import certs  # noqa: E402
import harness  # noqa: E402
import jtools  # noqa: E402
import kproto as k  # noqa: E402
import secnode  # noqa: E402

AUTHZ = {"authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
         "super.users": "User:ANONYMOUS"}


@pytest.fixture(scope="module")
def pki():
    return certs.make(os.path.join(harness.WORK, "pki-9006"))


def produce(b, topic):
    jaas = ('org.apache.kafka.common.security.scram.ScramLoginModule required '
            'username="dave" password="dave-secret";')
    props = ["security.protocol=SASL_PLAINTEXT", "sasl.mechanism=SCRAM-SHA-256",
             "sasl.jaas.config=" + jaas, "max.block.ms=15000", "delivery.timeout.ms=20000",
             "request.timeout.ms=10000"]
    args = ["-b", b.addr("SASL_PLAINTEXT"), "-t", topic, "-n", "5"]
    for p in props:
        args += ["--prop", p]
    rc, out, err = jtools.java("Produce", args, timeout=90)
    summary = jtools.json_lines(out)
    assert summary, "no summary:\n%s\n%s" % ("\n".join(out[-5:]), err[-3000:])
    return rc, summary[-1]


def test_java_producer_refused(secure_node, pki):
    b = secure_node(pki, AUTHZ)
    secnode.add_scram_user(b.bootstrap, "dave", "dave-secret", mechs=("SCRAM-SHA-256",))
    with k.Conn(b.bootstrap) as c:
        for t in ("dave-topic", "locked"):
            k.create_topic(c, t)
        resp = c.request(30, 3, {"Creations": [
            {"ResourceType": 2, "ResourceName": "dave-topic", "ResourcePatternType": 3,
             "Principal": "User:dave", "Host": "*", "Operation": 4, "PermissionType": 3}]})
        assert resp["Results"][0]["ErrorCode"] == k.NONE
    rc, s = produce(b, "dave-topic")
    assert rc == 0 and s["acked"] == 5, s
    rc, s = produce(b, "locked")
    assert rc != 0 and s["acked"] == 0
    assert "TopicAuthorizationException: Not authorized to access topics: [locked]" in \
        s["first_error"], s
