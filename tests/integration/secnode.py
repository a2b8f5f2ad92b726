"""A node with every kind of listener, for the security tests (test_90xx).

node(factory, pki) starts skiffd with PLAINTEXT, SSL (client certificates
required), SASL_PLAINTEXT and SASL_SSL listeners on free ports, PLAIN users
admin and bob on the SASL listeners, and the mechanisms PLAIN, SCRAM-SHA-256
and SCRAM-SHA-512. add_scram_user() creates SCRAM credentials with
AlterUserScramCredentials, as kafka-configs.sh does (salt and salted password
made here). ScramClient is the client side of RFC 5802 for raw exchanges. KafkaRef is
the same node as Apache Kafka runs it (SKIFF_TEST_AGAINST=kafka).
"""

import base64
import hashlib
import hmac
import os
import shutil
import ssl
import subprocess

import certs
import harness
import kproto as k

PLAIN_USERS = {"admin": "admin-secret", "bob": "bob-secret"}
MECHS = {"SCRAM-SHA-256": (1, "sha256"), "SCRAM-SHA-512": (2, "sha512")}


def jaas(users):
    return ("org.apache.kafka.common.security.plain.PlainLoginModule required "
            + " ".join('user_%s="%s"' % kv for kv in users.items()) + ";")


def node(factory, pki, extra=None):
    b = factory(start=False)
    b.ports = {name: harness.free_port() for name in ("SSL", "SASL_PLAINTEXT", "SASL_SSL")}
    b.ports["PLAINTEXT"] = b.port
    ls = ",".join("%s://127.0.0.1:%d" % kv for kv in b.ports.items())
    props = {
        "listeners": ls,
        "advertised.listeners": ls,
        "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": jaas(PLAIN_USERS),
        "listener.name.sasl_ssl.plain.sasl.jaas.config": jaas(PLAIN_USERS),
        "connection.failed.authentication.delay.ms": "300",
        "log.level": "debug",  # the tests read who authenticated from the log
    }
    props.update(certs.tls_overrides(pki, "required"))
    props.update(extra or {})
    b.overrides.update(props)
    b.start()
    for p in b.ports.values():
        harness.wait_port("127.0.0.1", p)
    b.addr = lambda name: "127.0.0.1:%d" % b.ports[name]
    return b


def server_ctx(pki):
    """A client TLS context trusting the test CA (no client certificate)."""
    return ssl.create_default_context(cafile=pki["ca"])


def add_scram_user(bootstrap, user, password, mechs=("SCRAM-SHA-256", "SCRAM-SHA-512"),
                   iterations=4096):
    # One request per mechanism: Kafka takes one change per user and request.
    for m in mechs:
        code, h = MECHS[m]
        salt = os.urandom(16)
        ups = [{"Name": user, "Mechanism": code, "Iterations": iterations, "Salt": salt,
                "SaltedPassword": hashlib.pbkdf2_hmac(h, password.encode(), salt, iterations)}]
        with k.Conn(bootstrap) as c:
            resp = c.request(51, 0, {"Deletions": [], "Upsertions": ups})
        assert [r["ErrorCode"] for r in resp["Results"]] == [k.NONE], resp


class ScramClient:
    def __init__(self, mech, user, password, nonce="fyko+d2lbbFgONRv9qkxdawL"):
        self.h = MECHS[mech][1]
        self.user, self.password, self.nonce = user, password, nonce

    def first(self):
        self.bare = "n=%s,r=%s" % (self.user, self.nonce)
        return ("n,," + self.bare).encode()

    def final(self, server_first):
        sf = server_first.decode()
        attrs = dict(a.split("=", 1) for a in sf.split(","))
        salt = base64.b64decode(attrs["s"])
        salted = hashlib.pbkdf2_hmac(self.h, self.password.encode(), salt, int(attrs["i"]))
        ckey = hmac.new(salted, b"Client Key", self.h).digest()
        stored = hashlib.new(self.h, ckey).digest()
        without = "c=biws,r=" + attrs["r"]
        auth = ",".join((self.bare, sf, without)).encode()
        sig = hmac.new(stored, auth, self.h).digest()
        proof = bytes(a ^ b for a, b in zip(ckey, sig))
        skey = hmac.new(salted, b"Server Key", self.h).digest()
        self.expected = b"v=" + base64.b64encode(hmac.new(skey, auth, self.h).digest())
        return (without + ",p=" + base64.b64encode(proof).decode()).encode()


def scram_login(c, mech, user, password, version=2):
    """Handshake and SCRAM exchange on kproto connection c; returns the last response."""
    hs = c.request(17, 1, {"Mechanism": mech})
    assert hs["ErrorCode"] == k.NONE, hs
    sc = ScramClient(mech, user, password)
    r1 = c.request(36, version, {"AuthBytes": sc.first()})
    if r1["ErrorCode"] != k.NONE:
        return r1
    r2 = c.request(36, version, {"AuthBytes": sc.final(r1["AuthBytes"])})
    if r2["ErrorCode"] == k.NONE:
        assert r2["AuthBytes"] == sc.expected, "the server's signature does not verify"
    return r2


def plain_login(c, user, password, version=2):
    hs = c.request(17, 1, {"Mechanism": "PLAIN"})
    assert hs["ErrorCode"] == k.NONE, hs
    return c.request(36, version, {"AuthBytes": b"\0" + user.encode() + b"\0" + password.encode()})


class KafkaRef:
    """Apache Kafka 4.3.1 (tools/kafka-ref.sh) with the listeners and users of node(), so
    that SKIFF_TEST_AGAINST=kafka runs the same assertions against it. Kafka needs a
    ScramLoginModule entry per SASL listener and SCRAM mechanism, and its CONTROLLER
    listener kept."""

    def __init__(self, name, pki, extra=None):
        self.dir = os.path.join(harness.WORK, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.port = harness.free_port()
        self.host = "127.0.0.1"
        self.proc = None
        self.ports = {n: harness.free_port() for n in ("SSL", "SASL_PLAINTEXT", "SASL_SSL")}
        self.ports["PLAINTEXT"] = self.port
        cport = harness.free_port()
        ls = ",".join("%s://127.0.0.1:%d" % kv for kv in self.ports.items())
        props = {
            "listeners": ls + ",CONTROLLER://127.0.0.1:%d" % cport,
            "advertised.listeners": ls,
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:"
                                              "SASL_PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:PLAINTEXT",
            "sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
            "connection.failed.authentication.delay.ms": "300",
            "ssl.keystore.type": "PEM", "ssl.truststore.type": "PEM",
        }
        props.update(certs.tls_overrides(pki, "required"))
        for lst in ("sasl_plaintext", "sasl_ssl"):
            props["listener.name.%s.plain.sasl.jaas.config" % lst] = jaas(PLAIN_USERS)
            for m in ("scram-sha-256", "scram-sha-512"):
                props["listener.name.%s.%s.sasl.jaas.config" % (lst, m)] = (
                    "org.apache.kafka.common.security.scram.ScramLoginModule required;")
        props.update(extra or {})
        env = dict(os.environ, KAFKA_REF_CONTROLLER_PORT=str(cport),
                   KAFKA_REF_HEAP="-Xms256m -Xmx512m",
                   KAFKA_REF_PROPS="\n".join("%s=%s" % kv for kv in props.items()))
        subprocess.run([os.path.join(harness.ROOT, "tools", "kafka-ref.sh"), "start", self.dir,
                        str(self.port)], env=env, check=True, timeout=180)

    @property
    def bootstrap(self):
        return "127.0.0.1:%d" % self.port

    def addr(self, name):
        return "127.0.0.1:%d" % self.ports[name]

    def log_text(self):
        with open(os.path.join(self.dir, "kafka.log"), errors="replace") as f:
            return f.read()

    def stop(self):
        subprocess.run([os.path.join(harness.ROOT, "tools", "kafka-ref.sh"), "stop", self.dir],
                       timeout=60)
