"""Certificates for the security tests, made with the openssl command line.

make(dir) writes, under dir: a CA (ca.pem, ca.key), the node's key and chain in
one PEM file (server.pem, its key encrypted with KEY_PASSWORD) for 127.0.0.1
and localhost, a client certificate signed by the CA (client.pem +
client.key, subject CN=alice,O=skiff-test), an expired client certificate
(expired.pem/.key) and one from another CA the node does not trust
(untrusted.pem/.key), and client-keystore.pem (client key and certificate,
for the Java clients). Returns a dict of the paths.
"""

import os
import subprocess

KEY_PASSWORD = "keystore-secret"


def _ssl(*args, cwd):
    subprocess.run(["openssl"] + list(args), cwd=cwd, check=True, capture_output=True)


def _cert(d, name, subj, ca, days=30, ext=None, backdate=False):
    _ssl("req", "-new", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
         "-subj", subj, "-out", name + ".csr", cwd=d)
    args = ["x509", "-req", "-in", name + ".csr", "-CA", ca + ".pem", "-CAkey", ca + ".key",
            "-CAcreateserial", "-out", name + ".pem"]
    if backdate:
        _expired(d, name, ca)
        return
    args += ["-days", str(days)]
    if ext:
        with open(os.path.join(d, name + ".ext"), "w") as f:
            f.write(ext)
        args += ["-extfile", name + ".ext"]
    _ssl(*args, cwd=d)


def _expired(d, name, ca):
    """Valid from 3 days ago to yesterday (`openssl ca` sets both dates)."""
    db = os.path.join(d, "ca-db")
    os.makedirs(db, exist_ok=True)
    open(os.path.join(db, "index.txt"), "w").close()
    with open(os.path.join(db, "serial"), "w") as f:
        f.write("1000\n")
    with open(os.path.join(d, "ca.cnf"), "w") as f:
        f.write("[ca]\ndefault_ca=c\n[c]\ndir=%s\ndatabase=$dir/index.txt\n"
                "serial=$dir/serial\nnew_certs_dir=$dir\ndefault_md=sha256\n"
                "policy=p\n[p]\ncommonName=supplied\n" % db)
    _ssl("ca", "-batch", "-config", "ca.cnf", "-cert", ca + ".pem", "-keyfile", ca + ".key",
         "-in", name + ".csr", "-out", name + ".pem", "-notext", "-startdate", _ago(3),
         "-enddate", _ago(1), cwd=d)


def _ago(days):
    import datetime
    t = datetime.datetime.now(datetime.timezone.utc) - datetime.timedelta(days=days)
    return t.strftime("%Y%m%d%H%M%SZ")


def _ca(d, name, cn):
    _ssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", name + ".key",
         "-subj", "/CN=" + cn, "-days", "30", "-out", name + ".pem", cwd=d)


def make(d):
    os.makedirs(d, exist_ok=True)
    if os.path.exists(os.path.join(d, "done")):
        return paths(d)
    _ca(d, "ca", "skiff-test-ca")
    _ca(d, "other-ca", "someone-else")
    _cert(d, "server", "/CN=127.0.0.1", "ca",
          ext="subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    # The node's keystore: the encrypted key (PKCS#8 with a scheme Java reads too, for
    # Apache Kafka under SKIFF_TEST_AGAINST=kafka), then the chain.
    _ssl("pkcs8", "-topk8", "-in", "server.key", "-v1", "PBE-SHA1-3DES",
         "-passout", "pass:" + KEY_PASSWORD, "-out", "server.enc.key", cwd=d)
    with open(os.path.join(d, "server-keystore.pem"), "w") as out:
        for part in ("server.enc.key", "server.pem", "ca.pem"):
            with open(os.path.join(d, part)) as f:
                out.write(f.read())
    _cert(d, "client", "/O=skiff-test/CN=alice", "ca")
    _cert(d, "expired", "/CN=old-client", "ca", backdate=True)
    _cert(d, "untrusted", "/CN=mallory", "other-ca")
    open(os.path.join(d, "done"), "w").close()
    return paths(d)


def paths(d):
    # The Java clients' keystore: key and certificate in one PEM file.
    ks = os.path.join(d, "client-keystore.pem")
    if not os.path.exists(ks):
        with open(ks + ".tmp", "w") as out:
            for part in ("client.key", "client.pem"):
                with open(os.path.join(d, part)) as f:
                    out.write(f.read())
        os.rename(ks + ".tmp", ks)
    p = {n: os.path.join(d, n + ".pem") for n in ("ca", "client", "expired", "untrusted")}
    p.update({n + "_key": os.path.join(d, n + ".key") for n in ("client", "expired", "untrusted")})
    p["keystore"] = os.path.join(d, "server-keystore.pem")
    p["client_keystore"] = ks
    p["dir"] = d
    return p


def tls_overrides(p, client_auth="none"):
    """Node properties for an SSL listener with these certificates."""
    return {
        "ssl.keystore.location": p["keystore"],
        "ssl.key.password": KEY_PASSWORD,
        "ssl.truststore.location": p["ca"],
        "ssl.client.auth": client_auth,
    }
