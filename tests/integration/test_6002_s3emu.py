"""tools/s3emu, the S3 emulator of the production-shaped benchmark target.

It must be a real S3 for what skiffd does, and must verify SigV4 like S3: every
operation skiffd uses (PUT, ranged GET, HEAD, ListObjectsV2 with continuation, DELETE,
multipart initiate / part / complete / abort) succeeds when signed with the secret and
is refused when signed with another (403 SignatureDoesNotMatch), when unsigned, or when
the body does not match its signed SHA-256; and a node uploading to it (multipart
included) serves back from objects, after a restart without WAL cache, every batch it
served before from its cache.
"""

import datetime
import hashlib
import hmac
import http.client
import os
import re
import shutil
import subprocess
import urllib.parse

import pytest

import harness
import s3env

MiB = 1 << 20
SECRET = "S3RVER"
SCRIPT = os.path.join(harness.ROOT, "tools", "s3emu.sh")


@pytest.fixture(scope="module")
def emu():
    d = os.path.join(harness.WORK, "s3emu-%d" % os.getpid())
    shutil.rmtree(d, ignore_errors=True)
    port = harness.free_port()
    env = dict(os.environ, SKIFF_S3RVER_OWNER_PID=str(os.getpid()))
    r = subprocess.run([SCRIPT, "start", d, str(port), "test"], env=env,
                       capture_output=True, text=True, timeout=600)
    if r.returncode == 77:
        pytest.skip(r.stderr.strip())
    assert r.returncode == 0, r.stderr
    try:
        yield port, d
    finally:
        subprocess.run([SCRIPT, "stop", d], timeout=30)
        shutil.rmtree(d, ignore_errors=True)


def uri_encode(s, slash):
    return urllib.parse.quote(s, safe="-_.~" + ("/" if slash else ""))


def call(port, method, path, query=None, body=b"", secret=SECRET, headers=None,
         payload_hash=None, sign=True):
    """(status, headers, body) of one request signed with SigV4 (header auth)."""
    query = query or {}
    qs = "&".join("%s=%s" % (uri_encode(kk, False), uri_encode(v, False))
                  for kk, v in sorted(query.items()))
    amzdate = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%dT%H%M%SZ")
    payload = payload_hash or (hashlib.sha256(body).hexdigest() if body else "UNSIGNED-PAYLOAD")
    h = {"host": "127.0.0.1:%d" % port, "x-amz-date": amzdate,
         "x-amz-content-sha256": payload}
    h.update({kk.lower(): v for kk, v in (headers or {}).items()})
    signed = ";".join(sorted(h))
    canon = "\n".join([method, uri_encode(path, True), qs,
                       "".join("%s:%s\n" % (kk, h[kk]) for kk in sorted(h)), signed, payload])
    scope = "%s/us-east-1/s3/aws4_request" % amzdate[:8]
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                         hashlib.sha256(canon.encode()).hexdigest()])
    key = ("AWS4" + secret).encode()
    for part in (amzdate[:8], "us-east-1", "s3", "aws4_request"):
        key = hmac.new(key, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(key, to_sign.encode(), hashlib.sha256).hexdigest()
    if sign:
        h["authorization"] = ("AWS4-HMAC-SHA256 Credential=S3RVER/%s, SignedHeaders=%s, "
                              "Signature=%s" % (scope, signed, sig))
    del h["host"]
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    try:
        c.request(method, uri_encode(path, True) + ("?" + qs if qs else ""), body=body,
                  headers=h)
        r = c.getresponse()
        return r.status, {kk.lower(): v for kk, v in r.getheaders()}, r.read()
    finally:
        c.close()


def code_of(body):
    m = re.search(rb"<Code>([^<]*)</Code>", body)
    return m.group(1).decode() if m else None


def test_operations_and_signatures(emu):
    port, d = emu
    data = os.urandom(3 * MiB + 17)
    key = "/test/p/one obj+x"
    assert call(port, "PUT", key, body=data)[0] == 200
    # a wrong secret, no signature, a body that is not the signed one: refused
    st, _, b = call(port, "PUT", "/test/p/bad", body=b"x", secret="wrong")
    assert (st, code_of(b)) == (403, "SignatureDoesNotMatch")
    st, _, b = call(port, "PUT", "/test/p/bad", body=b"x", sign=False)
    assert st == 403, (st, b)
    st, _, b = call(port, "PUT", "/test/p/bad", body=b"x",
                    payload_hash=hashlib.sha256(b"y").hexdigest())
    assert (st, code_of(b)) == (400, "XAmzContentSHA256Mismatch")
    assert not os.path.exists(os.path.join(d, "data", "test", "p", "bad"))
    for method, path, q, hdr in [("GET", key, None, {"Range": "bytes=0-9"}),
                                 ("HEAD", key, None, None),
                                 ("GET", "/test", {"list-type": "2", "prefix": "p/"}, None),
                                 ("POST", "/test/p/mp", {"uploads": ""}, None),
                                 ("DELETE", key, None, None)]:
        st, _, b = call(port, method, path, q, headers=hdr, secret="wrong")
        assert st == 403, (method, path, st, b)
    assert call(port, "GET", key)[2] == data, "the refused DELETE deleted"

    # ranged GETs and HEAD
    st, h, b = call(port, "GET", key, headers={"Range": "bytes=100-1048675"})
    assert (st, b) == (206, data[100:1048676])
    assert h["content-range"] == "bytes 100-1048675/%d" % len(data)
    assert call(port, "GET", key, headers={"Range": "bytes=-5"})[2] == data[-5:]
    assert call(port, "GET", key, headers={"Range": "bytes=%d-" % len(data)})[0] == 416
    st, h, _ = call(port, "HEAD", key)
    assert (st, int(h["content-length"])) == (200, len(data))
    assert call(port, "GET", "/test/p/none")[0] == 404

    # multipart: initiate, parts (signed payloads, a wrong secret refused), complete
    st, _, b = call(port, "POST", "/test/p/mp", {"uploads": ""})
    assert st == 200, b
    uid = re.search(rb"<UploadId>([^<]+)</UploadId>", b).group(1).decode()
    parts = [os.urandom(5 * MiB), os.urandom(MiB + 3)]
    st, _, b = call(port, "PUT", "/test/p/mp", {"partNumber": "1", "uploadId": uid},
                    body=parts[0], secret="wrong")
    assert (st, code_of(b)) == (403, "SignatureDoesNotMatch")
    etags = []
    for i, p in enumerate(parts):
        st, h, b = call(port, "PUT", "/test/p/mp", {"partNumber": str(i + 1), "uploadId": uid},
                        body=p)
        assert st == 200, b
        etags.append(h["etag"])
    xml = "<CompleteMultipartUpload>%s</CompleteMultipartUpload>" % "".join(
        "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>" % (i + 1, e)
        for i, e in enumerate(etags))
    st, _, b = call(port, "POST", "/test/p/mp", {"uploadId": uid}, body=xml.encode(),
                    secret="wrong")
    assert st == 403, b
    st, _, b = call(port, "POST", "/test/p/mp", {"uploadId": uid}, body=xml.encode())
    assert st == 200 and b"CompleteMultipartUploadResult" in b, b
    assert call(port, "GET", "/test/p/mp")[2] == b"".join(parts)
    # an aborted upload is gone
    uid2 = re.search(rb"<UploadId>([^<]+)</UploadId>",
                     call(port, "POST", "/test/p/mp2", {"uploads": ""})[2]).group(1).decode()
    assert call(port, "DELETE", "/test/p/mp2", {"uploadId": uid2})[0] == 204
    assert call(port, "PUT", "/test/p/mp2", {"partNumber": "1", "uploadId": uid2},
                body=b"x")[0] == 404

    # ListObjectsV2, two keys a page, in key order across directories
    for kk in ("p/a/1", "p/a-b", "p/b"):
        assert call(port, "PUT", "/test/" + kk, body=b"z")[0] == 200
    keys, token = [], None
    while True:
        q = {"list-type": "2", "max-keys": "2", "prefix": "p/"}
        if token:
            q["continuation-token"] = token
        st, _, b = call(port, "GET", "/test", q)
        assert st == 200, b
        keys += [x.decode() for x in re.findall(rb"<Key>([^<]*)</Key>", b)]
        m = re.search(rb"<NextContinuationToken>([^<]+)</NextContinuationToken>", b)
        if b"<IsTruncated>true</IsTruncated>" not in b:
            break
        token = m.group(1).decode()
    assert keys == sorted(["p/one obj+x", "p/mp", "p/a/1", "p/a-b", "p/b"]), keys
    assert call(port, "DELETE", key)[0] == 204
    assert call(port, "GET", key)[0] == 404


def test_node_uploads_and_reads_back(emu, broker_factory, topic_name):
    port, _ = emu
    os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = SECRET
    url = "s3://test/t6002?region=us-east-1&endpoint=http://127.0.0.1:%d&path-style=true" % port
    props = s3env.s3_props(url, s3_wal_upload_interval_ms=1000,
                           s3_wal_upload_threshold=32 * MiB, s3_part_size=5 * MiB,
                           wal_segment_bytes=16 * MiB)
    b = broker_factory(props)
    s3env.create_topic(b, topic_name, 4)
    prod = s3env.SkewedProducer(b.bootstrap, topic_name, [4, 1, 1, 1], 16384)
    prod.produce_bytes(60 * 1000 * 1000)
    assert prod.flush(120) == 0 and not prod.failed and not prod.fatal
    s3env.wait_metric(b, lambda m: m["skiff_s3_upload_lag_bytes"] < MiB and
                      m["skiff_wal_retained_bytes"] < 32 * MiB, 90, "upload and WAL trim")
    ref = s3env.read_topic(b.bootstrap, topic_name, 4)
    m = s3env.metrics(b)
    assert m["skiff_s3_stream_objects_put_total"] >= 1, m
    b.kill()
    b.overrides["wal.cache.bytes"] = "0"
    b.start()
    got = s3env.read_topic(b.bootstrap, topic_name, 4)
    assert s3env.metrics(b)["skiff_s3_read_bytes_total"] > 50 * 1000 * 1000
    a, g = s3env.hashes(ref), s3env.hashes(got)
    assert a == g, "%d batches differ" % len([x for x in set(a) | set(g) if a.get(x) != g.get(x)])
