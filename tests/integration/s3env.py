"""The S3 emulator for the object store tests (test_5NNN), and what they share.

tests/run.sh starts tools/s3rver.sh once for the integration phase and exports

    SKIFF_TEST_S3_URL   s3://BUCKET?region=us-east-1&endpoint=http://127.0.0.1:PORT&path-style=true
    SKIFF_TEST_S3_DIR   the emulator's data directory (it keeps every object as a file)
    AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY = S3RVER (inherited by the brokers)

When pytest runs without them, the `s3` fixture (conftest.py) starts its own emulator for
the session, and the tests skip with a message when node/npm are missing. Every test
works under a prefix of its own, so tests never see each other's objects.

Helpers: broker properties for an S3-backed node, Prometheus metrics, the bucket's keys
(read from the emulator's directory) with their footers and indexes parsed
(docs/objects.md), a skewed producer with deterministic values, and a reader that
hashes every batch of a topic with raw Fetch requests.
"""

import hashlib
import itertools
import os
import shutil
import struct
import subprocess
import threading
import time
import urllib.parse
import urllib.request
import uuid

import harness
import kproto as k

OBJ_SUFFIX = "._S3rver_object"


class S3Env:
    def __init__(self, url, data_dir):
        u = urllib.parse.urlsplit(url)
        assert u.scheme == "s3", url
        self.bucket = u.netloc
        self.base_prefix = u.path.strip("/")
        q = dict(urllib.parse.parse_qsl(u.query))
        self.region = q.get("region", "us-east-1")
        self.endpoint = q["endpoint"]
        ep = urllib.parse.urlsplit(self.endpoint)
        self.port = ep.port
        self.data_dir = data_dir

    def new_prefix(self, name):
        p = "%s-%s" % (name.replace("[", "-").replace("]", "")[:40], uuid.uuid4().hex[:6])
        return "%s/%s" % (self.base_prefix, p) if self.base_prefix else p

    def url(self, prefix, port=None):
        """objects.url of a node storing under prefix, through 127.0.0.1:port when given
        (a proxy), else straight to the emulator."""
        ep = "http://127.0.0.1:%d" % port if port else self.endpoint
        return "s3://%s/%s?region=%s&endpoint=%s&path-style=true" % (
            self.bucket, prefix, self.region, ep)

    def keys(self, prefix, sub=""):
        """Keys under prefix/sub, relative to prefix, sorted."""
        root = os.path.join(self.data_dir, self.bucket, prefix)
        out = []
        for d, _, files in os.walk(os.path.join(root, sub) if sub else root):
            for f in files:
                if f.endswith(OBJ_SUFFIX):
                    out.append(os.path.relpath(os.path.join(d, f[:-len(OBJ_SUFFIX)]), root))
        return sorted(out)

    def path(self, prefix, key):
        return os.path.join(self.data_dir, self.bucket, prefix, key + OBJ_SUFFIX)

    def objects(self, prefix):
        """{key: ObjInfo} of every data object under prefix. The emulator writes a file
        in place: one still being written (no valid footer yet) is left out."""
        out = {}
        for key in self.keys(prefix, "data"):
            try:
                out[key] = read_object_index(self.path(prefix, key))
            except (FileNotFoundError, ValueError):
                pass  # deleted meanwhile, or not complete yet
        return out


def start_emulator(work):
    """(S3Env, stop function) of an emulator this process starts, or (None, reason)."""
    d = os.path.join(work, "s3rver-%d" % os.getpid())
    port = harness.free_port()
    script = os.path.join(harness.ROOT, "tools", "s3rver.sh")
    env = dict(os.environ, SKIFF_S3RVER_OWNER_PID=str(os.getpid()))
    r = subprocess.run([script, "start", d, str(port), "test"], env=env,
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if r.returncode != 0:
        return None, "the S3 emulator did not start (tools/s3rver.sh exit %d): %s" % (
            r.returncode, r.stdout.decode(errors="replace")[-500:])

    def stop():
        subprocess.run([script, "stop", d])
        shutil.rmtree(d, ignore_errors=True)

    url = "s3://test?region=us-east-1&endpoint=http://127.0.0.1:%d&path-style=true" % port
    return S3Env(url, os.path.join(d, "data")), stop


# ---------------------------------------------------------------- objects (docs/objects.md)

class ObjInfo:
    def __init__(self, kind, size, created_ms, entries):
        self.kind = kind          # 1 SO, 2 SSO
        self.size = size
        self.created_ms = created_ms
        self.entries = entries    # [(stream, start, end, position, size, records, batches)]

    def streams(self):
        """{stream: (start, end, bytes)}"""
        out = {}
        for s, a, b, _, sz, _, _ in self.entries:
            if s in out:
                a0, b0, n0 = out[s]
                out[s] = (min(a0, a), max(b0, b), n0 + sz)
            else:
                out[s] = (a, b, sz)
        return out


def read_object_index(path):
    with open(path, "rb") as f:
        f.seek(0, 2)
        size = f.tell()
        if size < 48:
            raise ValueError("%s: %d bytes" % (path, size))
        f.seek(size - 48)
        foot = f.read(48)
        if foot[40:48] != b"SKIFFOBJ":
            raise ValueError("bad magic in %s" % path)
        ipos, isize, count, _crc, kind = struct.unpack("<QIIIB", foot[:21])
        created = struct.unpack("<q", foot[24:32])[0]
        if ipos + isize + 48 != size or isize != 48 * count:
            raise ValueError("bad footer in %s" % path)
        f.seek(ipos)
        idx = f.read(isize)
    entries = [struct.unpack("<QQQQIIII", idx[i * 48:(i + 1) * 48])[:7] for i in range(count)]
    return ObjInfo(kind, size, created, entries)


def stream_coverage(objs):
    """{stream: sorted [(start, end, key)]} over the given objects."""
    cov = {}
    for key, o in objs.items():
        for s, (a, b, _) in o.streams().items():
            cov.setdefault(s, []).append((a, b, key))
    for v in cov.values():
        v.sort()
    return cov


def coverage_problems(cov, expect_ends):
    """Each stream's ranges must tile [0, end) without overlap (no record in two
    objects); the multiset of ends must equal expect_ends (the partitions' high
    watermarks). Returns a list of problems."""
    problems = []
    ends = []
    for s, rs in cov.items():
        nxt = 0
        for a, b, key in rs:
            if a > nxt:
                problems.append("stream %d: offsets %d..%d in no object" % (s, nxt, a - 1))
            elif a < nxt:
                problems.append("stream %d: offsets %d..%d in two objects (%s)" % (
                    s, a, min(b, nxt - 1), key))
            nxt = max(nxt, b + 1)
        ends.append(nxt)
    if sorted(ends) != sorted(e for e in expect_ends if e > 0):
        problems.append("streams end at %r, partitions at %r" % (
            sorted(ends), sorted(expect_ends)))
    return problems


# ---------------------------------------------------------------- broker side

def s3_props(url, **extra):
    """Broker properties of an S3-backed node; extra: property=value with _ for ."""
    # Snapshots of the view as soon as an upload is registered: the tests
    # look at trimming and at the snapshot's PUT right after an upload.
    props = {"objects.url": url, "metrics.listener": "127.0.0.1:%d" % harness.free_port(),
             "s3.view.snapshot.interval.ms": "0"}
    for kk, v in extra.items():
        props[kk.replace("_", ".")] = str(v)
    return props


def metrics(broker):
    """{name: value} of a node's Prometheus metrics (labelled series keep their labels)."""
    port = int(broker.overrides["metrics.listener"].rsplit(":", 1)[1])
    with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % port, timeout=10) as r:
        text = r.read().decode()
    out = {}
    for ln in text.splitlines():
        if ln and not ln.startswith("#"):
            name, val = ln.rsplit(" ", 1)
            out[name] = float(val)
    return out


def wait_metric(broker, pred, timeout, what):
    deadline = time.time() + timeout
    m = None
    while time.time() < deadline:
        try:
            m = metrics(broker)
            if pred(m):
                return m
        except OSError:
            pass
        time.sleep(0.2)
    raise AssertionError("timed out after %.0fs waiting for %s; metrics: %r" % (
        timeout, what, {kk: v for kk, v in (m or {}).items()
                        if kk.startswith(("skiff_s3", "skiff_wal_ret", "skiff_wal_seg"))}))


def create_topic(broker, name, partitions, configs=None):
    with k.Conn(broker.bootstrap, timeout=30) as c:
        k.create_topic(c, name, partitions, configs)


def registry(data_dir):
    """(keys {key: delete_after}, ranges [(stream, start, end, key)]) of a node's
    SQLite view, read-only (the node may be running)."""
    import sqlite3
    con = sqlite3.connect("file:%s?mode=ro" % os.path.join(data_dir, "skiff.db"), uri=True,
                          timeout=10)
    try:
        keys = dict(con.execute("SELECT key, delete_after FROM objects").fetchall())
        ranges = con.execute("SELECT stream, start, end, key FROM object_ranges"
                             " ORDER BY stream, start").fetchall()
    finally:
        con.close()
    return keys, ranges


def registry_problems(ranges):
    """Overlapping ranges of one stream: a record registered twice."""
    problems = []
    last = {}
    for s, a, b, key in ranges:
        if s in last and a <= last[s][0]:
            problems.append("stream %d: %d..%d in %s overlaps %s" % (s, a, b, key, last[s][1]))
        last[s] = (max(b, last.get(s, (b, ""))[0]), key)
    return problems


def wait_no_orphans(s3, prefix, broker, timeout):
    """Waits until the bucket's data objects are exactly those the registry knows."""
    deadline = time.time() + timeout
    while True:
        keys, _ = registry(broker.data_dir)
        stored = set(s3.keys(prefix, "data"))
        if stored == set(keys):
            return stored
        if time.time() > deadline:
            raise AssertionError("after %.0fs: %d objects stored and not registered (%r), "
                                 "%d registered and not stored (%r)" % (
                                     timeout, len(stored - set(keys)),
                                     sorted(stored - set(keys))[:3],
                                     len(set(keys) - stored), sorted(set(keys) - stored)[:3]))
        time.sleep(0.2)


def streams_of(data_dir, topic):
    """{partition: stream id} of a topic, from a node's SQLite view."""
    import sqlite3
    con = sqlite3.connect("file:%s?mode=ro" % os.path.join(data_dir, "skiff.db"), uri=True,
                          timeout=10)
    try:
        rows = con.execute("SELECT p.part, p.stream FROM partitions p JOIN topics t"
                           " ON t.id = p.topic WHERE t.name = ?", (topic,)).fetchall()
    finally:
        con.close()
    return dict(rows)


def produce_round(c, parts, tag, value_size=2048):
    """One Produce request (acks=all) carrying one batch for each (topic, partition,
    records) in parts, so that they land in the WAL together. Values are
    tag-topic-partition-i. Returns {(topic, partition): base offset}."""
    by_topic = {}
    for topic, p, n in parts:
        vals = [(b"%s-%s-%d-%d-" % (tag.encode(), topic.encode(), p, i)).ljust(value_size, b".")
                for i in range(n)]
        by_topic.setdefault(topic, []).append({"Index": p, "Records": k.batch(vals)})
    body = {"TransactionalId": None, "Acks": -1, "TimeoutMs": 10000,
            "TopicData": [{"Name": t, "PartitionData": pd} for t, pd in by_topic.items()]}
    resp = c.request(0, 7, body)
    out = {}
    for tr in resp["Responses"]:
        for pr in tr["PartitionResponses"]:
            assert pr["ErrorCode"] == k.NONE, (tr["Name"], pr)
            out[(tr["Name"], pr["Index"])] = pr["BaseOffset"]
    return out


def rss_kib(pid):
    with open("/proc/%d/status" % pid) as f:
        for ln in f:
            if ln.startswith("VmRSS:"):
                return int(ln.split()[1])
    return 0


# ---------------------------------------------------------------- producing

def value_of(partition, seq, size):
    """The deterministic value of record `seq` of a partition."""
    d = hashlib.sha256(b"%d-%d" % (partition, seq)).digest()
    return (d * (size // 32 + 1))[:size]


class SkewedProducer:
    """confluent-kafka, acks=all, idempotent; partition p gets weights[p] shares of
    the records. Keeps (partition, offset, seq) of every acknowledgement."""

    def __init__(self, bootstrap, topic, weights, value_size=16384, extra=None):
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
                "linger.ms": 10, "batch.size": 262144, "queue.buffering.max.kbytes": 65536,
                "compression.type": "none", "message.timeout.ms": 300000,
                "retry.backoff.ms": 100, "socket.connection.setup.timeout.ms": 5000,
                "reconnect.backoff.ms": 50, "reconnect.backoff.max.ms": 500}
        conf.update(extra or {})
        self.errors = []
        self.fatal = []
        self.p = Producer(dict(conf, error_cb=self._err))
        self.topic, self.size = topic, value_size
        self.order = list(itertools.chain.from_iterable([i] * w for i, w in enumerate(weights)))
        self.seq = 0
        self.sent = 0
        self.acked = []
        self.failed = []
        self.lock = threading.Lock()

    def _err(self, e):
        self.errors.append(str(e))
        if e.fatal():
            self.fatal.append(str(e))

    def _cb(self, err, msg):
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), int(msg.key())))
            else:
                self.failed.append(str(err))

    def produce_bytes(self, total, deadline=None, stop=None):
        """Queues records until `total` value bytes (or the deadline / stop event)."""
        target = self.sent + total
        while self.sent < target:
            if (deadline and time.time() > deadline) or (stop and stop.is_set()):
                break
            part = self.order[self.seq % len(self.order)]
            v = value_of(part, self.seq, self.size)
            try:
                self.p.produce(self.topic, v, key=b"%d" % self.seq, partition=part,
                               on_delivery=self._cb)
            except BufferError:
                self.p.poll(0.05)
                continue
            self.seq += 1
            self.sent += self.size
            self.p.poll(0)

    def flush(self, timeout=120):
        return self.p.flush(timeout)


# ---------------------------------------------------------------- reading back

def _records_values(raw):
    """[(offset delta, key, value)] of an uncompressed v2 batch."""
    r = k.Reader(raw, 61)
    n = struct.unpack(">i", raw[57:61])[0]
    out = []
    for _ in range(n):
        r.varint()
        r.int8()
        r.varint()
        od = r.varint()
        kl = r.varint()
        key = r.take(kl) if kl >= 0 else None
        vl = r.varint()
        val = r.take(vl) if vl >= 0 else None
        for _ in range(r.varint()):
            r.take(r.varint())
            hl = r.varint()
            if hl >= 0:
                r.take(hl)
        out.append((od, key, val))
    return out


def read_topic(bootstrap, topic, partitions, on_record=None, timeout=120, max_bytes=8 << 20):
    """Reads every partition from its log start with raw Fetch requests.
    Returns {partition: {"start", "hw", "batches": [(base, last, sha1)], "bytes"}};
    on_record(partition, offset, key, value) sees every record."""
    out = {}
    deadline = time.time() + timeout
    with k.Conn(bootstrap, timeout=60) as c:
        for p in range(partitions):
            lo = k.list_offsets(c, topic, p, -2)
            assert lo["ErrorCode"] == k.NONE, lo
            off = start = lo["Offset"]
            info = {"start": start, "batches": [], "bytes": 0}
            while True:
                assert time.time() < deadline, "reading %s-%d timed out at %d" % (topic, p, off)
                _, pd = k.fetch(c, topic, p, off, partition_max_bytes=max_bytes,
                                max_bytes=max_bytes, timeout=60)
                assert pd["ErrorCode"] == k.NONE, (topic, p, off, pd["ErrorCode"])
                info["hw"] = pd["HighWatermark"]
                data = pd["Records"] or b""
                pos = got = 0
                while len(data) - pos >= 61:
                    base, ln = struct.unpack(">qi", data[pos:pos + 12])
                    if pos + 12 + ln > len(data):
                        break
                    raw = data[pos:pos + 12 + ln]
                    pos += 12 + ln
                    last = base + struct.unpack(">i", raw[23:27])[0]
                    if last < off:
                        continue
                    info["batches"].append((base, last, hashlib.sha1(raw).hexdigest()))
                    info["bytes"] += len(raw)
                    if on_record:
                        for od, key, val in _records_values(raw):
                            on_record(p, base + od, key, val)
                    off = last + 1
                    got += 1
                if not got:
                    if off >= info["hw"]:
                        break
                    # empty answer below the high watermark: the object read failed
                    # (the broker answers no error); try again
                    time.sleep(0.1)
            out[p] = info
    return out


class ValueCheck:
    """on_record for read_topic: every acknowledged record at its offset with its value."""

    def __init__(self, acked, value_size):
        self.want = {(p, off): seq for p, off, seq in acked}
        self.size = value_size
        self.seen = set()
        self.problems = []

    def __call__(self, p, off, key, val):
        seq = self.want.get((p, off))
        if seq is None:
            return  # not acknowledged (or a batch of another producer): not judged
        self.seen.add((p, off))
        if key != b"%d" % seq or val != value_of(p, seq, self.size):
            self.problems.append("p%d: offset %d holds key %r, acknowledged seq %d" % (
                p, off, key, seq))

    def report(self, log):
        problems = list(self.problems)
        for p, info in log.items():
            nxt = info["start"]
            for base, last, _ in info["batches"]:
                if base != nxt:
                    problems.append("p%d: batch at %d, expected %d" % (p, base, nxt))
                nxt = last + 1
            if nxt != info["hw"]:
                problems.append("p%d: log ends at %d, high watermark %d" % (p, nxt, info["hw"]))
        missing = [pk for pk in self.want if pk not in self.seen and pk[1] >= log[pk[0]]["start"]]
        if missing:
            problems.append("%d acknowledged records missing, e.g. %r" % (
                len(missing), sorted(missing)[:5]))
        return problems


def hashes(log):
    return {(p, b, l): h for p, info in log.items() for b, l, h in info["batches"]}
