#!/usr/bin/env python3
"""The S3 emulator's own ranged-GET throughput: the floor skiffd's catch-up reads are
judged against (bench/s3.sh); with --put, its PUT throughput: the floor of skiffd's
uploads.

Reads the given objects with signed (SigV4) ranged GETs of RANGE bytes, CONC of them in
flight on persistent connections, objects in order and each from start to end, until
--max-bytes or --max-seconds; one JSON line per shape on stdout:
{"range": R, "concurrency": C, "bytes": B, "seconds": S, "mb_s": X, "requests": N}.

usage: s3raw.py --endpoint http://127.0.0.1:PORT --bucket B --keys FILE
                [--shape RANGE:CONC]... [--max-bytes N] [--max-seconds S]
       s3raw.py --endpoint ... --bucket B --put SIZE:CONC [--max-seconds S]
FILE holds "key size" lines. --put writes objects of SIZE bytes under s3raw-put/ (single
PUTs, CONC in flight) for S seconds and deletes them; its JSON line has "put": true. Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY
(default S3RVER, the emulator's).
"""

import argparse
import datetime
import hashlib
import hmac
import http.client
import json
import os
import queue
import sys
import threading
import time
import urllib.parse


def sign(method, host, path, region, access, secret, extra_headers):
    now = datetime.datetime.now(datetime.timezone.utc)
    amzdate = now.strftime("%Y%m%dT%H%M%SZ")
    date = amzdate[:8]
    headers = {"host": host, "x-amz-content-sha256": "UNSIGNED-PAYLOAD", "x-amz-date": amzdate}
    signed = ";".join(sorted(headers))
    canon = "\n".join([method, path, "",
                       "".join("%s:%s\n" % (h, headers[h]) for h in sorted(headers)),
                       signed, "UNSIGNED-PAYLOAD"])
    scope = "%s/%s/s3/aws4_request" % (date, region)
    to_sign = "\n".join(["AWS4-HMAC-SHA256", amzdate, scope,
                         hashlib.sha256(canon.encode()).hexdigest()])
    k = ("AWS4" + secret).encode()
    for part in (date, region, "s3", "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    sig = hmac.new(k, to_sign.encode(), hashlib.sha256).hexdigest()
    out = dict(headers)
    del out["host"]
    out["Authorization"] = ("AWS4-HMAC-SHA256 Credential=%s/%s, SignedHeaders=%s, Signature=%s"
                            % (access, scope, signed, sig))
    out.update(extra_headers)
    return out


class Client:
    """One persistent connection to the endpoint, signing each request; reconnects after a
    failed one."""

    def __init__(self, a, timeout):
        self.a, self.timeout = a, timeout
        self.ep = urllib.parse.urlsplit(a.endpoint)
        self.access = os.environ.get("AWS_ACCESS_KEY_ID", "S3RVER")
        self.secret = os.environ.get("AWS_SECRET_ACCESS_KEY", "S3RVER")
        self.conn = self._connect()

    def _connect(self):
        return http.client.HTTPConnection(self.ep.hostname, self.ep.port, timeout=self.timeout)

    def call(self, method, path, extra=None, body=None):
        """(status, response body), or (None, b"") when the request failed."""
        extra = dict(extra or {})
        if body is not None:
            extra["Content-Length"] = str(len(body))
        h = sign(method, self.ep.netloc, path, self.a.region, self.access, self.secret, extra)
        try:
            self.conn.request(method, path, body=body, headers=h)
            r = self.conn.getresponse()
            return r.status, r.read()
        except (OSError, http.client.HTTPException):
            self.conn.close()
            self.conn = self._connect()
            return None, b""

    def close(self):
        self.conn.close()


def run_shape(a, keys, rng, conc):
    work = queue.Queue()
    planned = 0
    for key, size in keys:
        off = 0
        while off < size and planned < a.max_bytes:
            n = min(rng, size - off)
            work.put((key, off, n))
            off += n
            planned += n
    deadline = time.time() + a.max_seconds
    lock = threading.Lock()
    tot = {"bytes": 0, "requests": 0, "errors": 0}

    def worker():
        c = Client(a, 60)
        while time.time() < deadline:
            try:
                key, off, n = work.get_nowait()
            except queue.Empty:
                break
            path = "/%s/%s" % (a.bucket, urllib.parse.quote(key, safe="/-_.~"))
            status, body = c.call("GET", path, {"Range": "bytes=%d-%d" % (off, off + n - 1)})
            ok = status == 206 and len(body) == n
            with lock:
                tot["requests"] += 1
                if ok:
                    tot["bytes"] += n
                else:
                    tot["errors"] += 1
        c.close()

    t0 = time.time()
    ths = [threading.Thread(target=worker) for _ in range(conc)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    secs = time.time() - t0
    return {"range": rng, "concurrency": conc, "bytes": tot["bytes"], "seconds": round(secs, 3),
            "mb_s": round(tot["bytes"] / secs / 1e6, 1) if secs > 0 else 0,
            "requests": tot["requests"], "errors": tot["errors"]}


def run_put(a, size, conc):
    body = os.urandom(size)
    deadline = time.time() + a.max_seconds
    lock = threading.Lock()
    tot = {"bytes": 0, "requests": 0, "errors": 0, "last": time.time()}
    made = []

    def worker(w):
        c = Client(a, 120)
        i = 0
        while time.time() < deadline:
            path = "/%s/s3raw-put/%d-%d" % (a.bucket, w, i)
            i += 1
            ok = c.call("PUT", path, body=body)[0] == 200
            with lock:
                tot["requests"] += 1
                tot["bytes" if ok else "errors"] += size if ok else 1
                tot["last"] = max(tot["last"], time.time())
                made.append(path)
        for path in made[w::conc]:
            c.call("DELETE", path)
        c.close()

    t0 = time.time()
    ths = [threading.Thread(target=worker, args=(w,)) for w in range(conc)]
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    secs = tot["last"] - t0  # the last PUT's end: the deletes are not timed
    return {"put": True, "size": size, "concurrency": conc, "bytes": tot["bytes"],
            "seconds": round(secs, 3),
            "mb_s": round(tot["bytes"] / secs / 1e6, 1) if secs > 0 else 0,
            "requests": tot["requests"], "errors": tot["errors"]}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--endpoint", required=True)
    ap.add_argument("--bucket", required=True)
    ap.add_argument("--region", default="us-east-1")
    ap.add_argument("--keys")
    ap.add_argument("--put", action="append", default=[])
    ap.add_argument("--shape", action="append", default=[])
    ap.add_argument("--max-bytes", type=int, default=1 << 30)
    ap.add_argument("--max-seconds", type=float, default=20)
    a = ap.parse_args()
    for shape in a.put:
        size, conc = (int(x) for x in shape.split(":"))
        print(json.dumps(run_put(a, size, conc)), flush=True)
    if a.put:
        return
    if not a.keys:
        sys.exit("--keys or --put is needed")
    keys = []
    with open(a.keys) as f:
        for ln in f:
            if ln.strip():
                key, size = ln.split()
                keys.append((key, int(size)))
    if not keys:
        sys.exit("no objects to read")
    for shape in a.shape or ["1048576:4"]:
        rng, conc = (int(x) for x in shape.split(":"))
        print(json.dumps(run_shape(a, keys, rng, conc)), flush=True)


if __name__ == "__main__":
    main()
