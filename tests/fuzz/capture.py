#!/usr/bin/python3
"""Capture real clients' request frames as a seed corpus for the protocol fuzzers.

proxy mode: a TCP proxy from 127.0.0.1:LISTEN to an upstream broker that copies
bytes both ways untouched and writes every request frame it sees (without its
4-byte size prefix) to OUT/<client>-<ApiName>-v<version>-<n>.bin. Identical frames
are written once (files already in OUT count); --max-per-kind caps the files per
(client, API, version) and --max-size skips big frames.

    capture.py proxy --listen 19300 --upstream 127.0.0.1:19301 --client kcat --out DIR

Clients learn broker addresses from Metadata, so the upstream broker must
advertise the proxy's address (advertised.listeners=PLAINTEXT://127.0.0.1:LISTEN),
or clients would bypass the proxy after their first request.

seed mode: rebuilds the committed corpus from scratch. It starts Apache Kafka
4.3.1 with tools/kafka-ref.sh (advertising the proxy), then runs kcat,
confluent-kafka (librdkafka), kafka-python 2.0.2 and, if tests/java has been
built, the Java clients and tools through the proxy, one client name at a time:

    capture.py seed --out tests/fuzz/corpus

raw mode: writes frames built with the tests' raw client (kproto) for the versions
that name topics by id and the others Kafka 4.3 added with them (Produce v13, Fetch
v13-17, ListOffsets v8-10, Metadata v13, OffsetCommit/OffsetFetch v10,
DescribeLogDirs v5), valid and edge cases (the all-zero id), as
OUT/kproto-<ApiName>-v<version>-<n>.bin:

    capture.py raw --out tests/fuzz/corpus
"""

import argparse
import glob
import hashlib
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import kproto  # noqa: E402

PYTHON = "/usr/bin/python3"
# Kafka's own inter-broker clients (transaction markers, AddPartitionsToTxn
# verification) reach the broker through its advertised listener, i.e. the proxy.
BROKER_CLIENT_IDS = re.compile(r"^(broker-\d+-|AddPartitionsManager)")


# ---------------------------------------------------------------- proxy

class Corpus:
    """Writes distinct request frames, named by client, API and version."""

    def __init__(self, out, client, max_per_kind=0, max_size=65535):
        self.out, self.client = out, client
        self.max_per_kind, self.max_size = max_per_kind, max_size
        self.lock = threading.Lock()
        self.hashes = set()
        self.counts = {}
        self.written = self.skipped = 0
        os.makedirs(out, exist_ok=True)
        pat = re.compile(r"^(.+)-v(-?\d+)-(\d+)\.bin$")
        for path in glob.glob(os.path.join(out, "*.bin")):
            with open(path, "rb") as f:
                self.hashes.add(hashlib.sha256(f.read()).digest())
            m = pat.match(os.path.basename(path))
            if m:
                kind = (m.group(1), int(m.group(2)))
                self.counts[kind] = max(self.counts.get(kind, 0), int(m.group(3)) + 1)

    def add(self, payload):
        if len(payload) < 4 or len(payload) > self.max_size:
            self.skipped += 1
            return None
        key, version = struct.unpack(">hh", payload[:4])
        name = kproto.API_NAMES.get(key, "Api%d" % key)
        client = self.client
        if len(payload) >= 10:
            (n,) = struct.unpack(">h", payload[8:10])
            cid = payload[10:10 + n] if n > 0 else b""
            if BROKER_CLIENT_IDS.match(cid.decode("utf-8", "replace")):
                client = "kafkabroker"    # the broker talking to itself via its listener
        kind = ("%s-%s" % (client, name), version)
        digest = hashlib.sha256(payload).digest()
        with self.lock:
            if digest in self.hashes:
                return None
            n = self.counts.get(kind, 0)
            if self.max_per_kind and n >= self.max_per_kind:
                self.skipped += 1
                return None
            self.hashes.add(digest)
            self.counts[kind] = n + 1
            path = os.path.join(self.out, "%s-v%d-%d.bin" % (kind[0], version, n))
            with open(path, "wb") as f:
                f.write(payload)
            self.written += 1
            return path


def _pump_requests(src, dst, corpus, stop):
    buf = b""
    try:
        while not stop.is_set():
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
            buf += data
            while len(buf) >= 4:
                (size,) = struct.unpack(">i", buf[:4])
                if size < 0 or size > 100 << 20:
                    buf = b""        # not Kafka framing; keep proxying, stop parsing
                    break
                if len(buf) < 4 + size:
                    break
                corpus.add(buf[4:4 + size])
                buf = buf[4 + size:]
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def _pump_raw(src, dst, stop):
    try:
        while not stop.is_set():
            data = src.recv(65536)
            if not data:
                break
            dst.sendall(data)
    except OSError:
        pass
    finally:
        for s in (src, dst):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class Proxy:
    def __init__(self, listen_port, upstream, corpus):
        self.upstream = upstream
        self.corpus = corpus
        self.stop = threading.Event()
        self.lsock = socket.socket()
        self.lsock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.lsock.bind(("127.0.0.1", listen_port))
        self.lsock.listen(64)
        self.lsock.settimeout(0.2)
        self.thread = threading.Thread(target=self._accept, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _accept(self):
        while not self.stop.is_set():
            try:
                cs, _ = self.lsock.accept()
            except socket.timeout:
                continue
            except OSError:
                return
            try:
                us = socket.create_connection(self.upstream, timeout=5)
                us.settimeout(None)
            except OSError:
                cs.close()
                continue
            cs.settimeout(None)
            for s in (cs, us):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_pump_requests, args=(cs, us, self.corpus, self.stop),
                             daemon=True).start()
            threading.Thread(target=_pump_raw, args=(us, cs, self.stop), daemon=True).start()

    def close(self):
        self.stop.set()
        self.lsock.close()
        self.thread.join(2)


def cmd_proxy(a):
    host, port = a.upstream.rsplit(":", 1)
    corpus = Corpus(a.out, a.client, a.max_per_kind, a.max_size)
    proxy = Proxy(a.listen, (host, int(port)), corpus).start()
    print("capture: 127.0.0.1:%d -> %s, client %s, into %s" % (a.listen, a.upstream,
                                                                a.client, a.out), flush=True)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    done.wait()
    proxy.close()
    print("capture: %d frames written, %d skipped" % (corpus.written, corpus.skipped))


# ---------------------------------------------------------------- seed corpus

def _free_port_pair():
    while True:
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        p = s.getsockname()[1]
        s.close()
        if p < 65000:
            try:
                for q in (p + 1, p + 2):
                    t = socket.socket()
                    t.bind(("127.0.0.1", q))
                    t.close()
                return p
            except OSError:
                continue


def _run(argv, timeout=120, env=None, ok=(0,), stdin=None):
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, env=env, input=stdin)
    if p.returncode not in ok:
        what = [x for x in argv if not x.startswith("/") and ":" not in x][:4]
        print("  ! %s exited %d: %s" % (" ".join(what), p.returncode,
                                       p.stdout.decode(errors="replace")[-600:]))
    return p.returncode


def _kcat(b, topic):
    kc = ["kcat", "-b", b, "-X", "socket.timeout.ms=10000"]
    lines = "".join("key%d:value %d\n" % (i, i) for i in range(30)).encode()
    _run(kc + ["-L"])
    _run(kc + ["-L", "-t", topic])
    for codec in ("none", "gzip", "snappy", "lz4", "zstd"):
        _run(kc + ["-P", "-t", topic, "-z", codec, "-K:"], stdin=lines)
    _run(kc + ["-P", "-t", topic, "-X", "enable.idempotence=true", "-p", "1"], stdin=lines)
    _run(kc + ["-P", "-t", topic, "-X", "acks=0"], stdin=b"fire\nforget\n")
    _run(kc + ["-P", "-t", topic, "-H", "h1=v1", "-H", "h2=", "-Z", "-K:", "-p", "0"],
         stdin=b"k-null:\n:v-nokey\nk:v\n")
    _run(kc + ["-P", "-t", topic, "-X", "linger.ms=50", "-X", "batch.num.messages=7"],
         stdin=lines)
    _run(kc + ["-L", "-J", "-t", topic + "-missing"], ok=(0, 1))
    _run(kc + ["-C", "-t", topic, "-o", "beginning", "-e", "-q"])
    _run(kc + ["-C", "-t", topic, "-o", "-5", "-e", "-q",
               "-X", "isolation.level=read_uncommitted"])
    _run(kc + ["-Q", "-t", "%s:0:%d" % (topic, int(time.time() * 1000) - 60000)])
    _run(kc + ["-G", "kcat-grp", topic, "-o", "beginning", "-e", "-q"], timeout=60)


CK_SCRIPT = r"""
import sys, time
from confluent_kafka import Producer, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, NewPartitions, ConfigResource
b, topic = sys.argv[1], sys.argv[2]
a = AdminClient({"bootstrap.servers": b})
new = NewTopic(topic + "-ck", 2, 1, config={"retention.ms": "3600000"})
for f in a.create_topics([new]).values():
    f.result(30)
end = time.time() + 15
while topic + "-ck" not in a.list_topics(timeout=10).topics and time.time() < end:
    time.sleep(0.2)
time.sleep(1)
for f in a.describe_configs([ConfigResource("topic", topic + "-ck")]).values():
    f.result(30)
for f in a.create_partitions([NewPartitions(topic + "-ck", 3)]).values():
    f.result(30)
for conf in ({"enable.idempotence": True}, {"compression.codec": "lz4", "linger.ms": 20},
             {"compression.codec": "zstd"}, {"acks": 1, "compression.codec": "snappy"}):
    p = Producer(dict(conf, **{"bootstrap.servers": b}))
    for i in range(50):
        p.produce(topic, key=b"k%d" % i, value=b"v%d" % i, headers=[("h", b"x")])
    p.flush(30)
p = Producer({"bootstrap.servers": b, "transactional.id": "ck-txn"})
p.init_transactions(30)
p.begin_transaction()
for i in range(10):
    p.produce(topic, value=b"txn%d" % i)
p.commit_transaction(30)
p.begin_transaction()
p.produce(topic, value=b"aborted")
p.abort_transaction(30)
c = Consumer({"bootstrap.servers": b, "group.id": "ck-grp", "auto.offset.reset": "earliest",
              "isolation.level": "read_committed"})
c.subscribe([topic])
n, end = 0, time.time() + 20
while n < 100 and time.time() < end:
    m = c.poll(0.5)
    if m is not None and not m.error():
        n += 1
c.commit(asynchronous=False)
c.committed([TopicPartition(topic, 0)], timeout=10)
c.get_watermark_offsets(TopicPartition(topic, 0), timeout=10)
c.offsets_for_times([TopicPartition(topic, 0, int(time.time() * 1000) - 60000)], timeout=10)
c.close()
for f in a.delete_topics([topic + "-ck"]).values():
    f.result(30)
"""

KP_SCRIPT = r"""
import sys, time
import kafka
from kafka.admin import KafkaAdminClient, NewTopic, ConfigResource, ConfigResourceType
b, topic = sys.argv[1], sys.argv[2]
p = kafka.KafkaProducer(bootstrap_servers=b, acks="all")
for i in range(30):
    p.send(topic, key=b"k%d" % i, value=b"v%d" % i)
p.send(topic + "-auto", b"auto-created")
p.flush(30)
p.close(5)
p = kafka.KafkaProducer(bootstrap_servers=b, compression_type="gzip", acks=1)
for i in range(30):
    p.send(topic, value=b"gz%d" % i)
p.flush(30)
p.close(5)
c = kafka.KafkaConsumer(topic, bootstrap_servers=b, group_id="kp-grp",
                        auto_offset_reset="earliest", consumer_timeout_ms=8000)
n = 0
for m in c:
    n += 1
    if n >= 60:
        break
c.commit()
c.close()
ad = KafkaAdminClient(bootstrap_servers=b)
ad.create_topics([NewTopic(topic + "-kp", 2, 1)])
ad.describe_configs([ConfigResource(ConfigResourceType.TOPIC, topic)])
ad.list_consumer_groups()
ad.describe_consumer_groups(["kp-grp"])
ad.list_consumer_group_offsets("kp-grp")
ad.delete_topics([topic + "-kp"])
ad.close()
"""


def _java(b, topic):
    jar = os.path.join(ROOT, "tests", "java", "target", "skiff-java-clients.jar")
    cpf = os.path.join(ROOT, "tests", "java", "target", "classpath.txt")
    if not (os.path.exists(jar) and os.path.exists(cpf)):
        print("  (tests/java not built: no Java capture)")
        return
    with open(cpf) as f:
        cp = jar + ":" + f.read().strip()
    j = ["java", "-Xmx256m", "-cp", cp]
    _run(j + ["io.skiff.clients.Admin", "-b", b, "create", "-t", topic + "-j", "-P", "3",
              "--config", "retention.ms=3600000", "+", "describe", "-t", topic + "-j",
              "+", "list", "+", "configs", "-t", topic + "-j", "+", "cluster"])
    _run(j + ["io.skiff.clients.Produce", "-b", b, "-t", topic + "-j", "-n", "200", "-P", "3"])
    _run(j + ["io.skiff.clients.Produce", "-b", b, "-t", topic + "-z", "-n", "100", "-P", "0",
              "--prop", "compression.type=zstd", "--prop", "linger.ms=20"])
    _run(j + ["io.skiff.clients.Produce", "-b", b, "-t", topic + "-s", "-n", "50", "-P", "0",
              "--prop", "compression.type=snappy", "--prop", "enable.idempotence=false",
              "--prop", "acks=1"])
    _run(j + ["io.skiff.clients.Consume", "-b", b, "-t", topic + "-j", "-n", "200"])
    _run(j + ["org.apache.kafka.tools.consumer.ConsoleConsumer", "--bootstrap-server", b,
              "--topic", topic + "-j", "--group", "java-grp", "--from-beginning",
              "--max-messages", "50", "--timeout-ms", "15000"], ok=(0, 1))
    _run(j + ["org.apache.kafka.tools.consumer.group.ConsumerGroupCommand",
              "--bootstrap-server", b, "--describe", "--group", "java-grp"], ok=(0, 1))
    _run(j + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--describe",
              "--topic", topic + "-j"])
    _run(j + ["org.apache.kafka.tools.TopicCommand", "--bootstrap-server", b, "--alter",
              "--topic", topic + "-j", "--partitions", "4"])
    _run(j + ["io.skiff.clients.Admin", "-b", b, "delete", "-t", "%s-j,%s-z,%s-s" % (
        topic, topic, topic)])


CLIENTS = ["kcat", "confluent", "kafkapython", "java"]


def cmd_seed(a):
    out = os.path.abspath(a.out)
    names = [n for n in CLIENTS if not a.only or n in a.only.split(",")]
    if a.clean and os.path.isdir(out):
        # only the captures this run redoes: the directory also holds other seeds
        # (generated gen-*.bin, crash-*.bin regressions) that are not ours to drop
        for n in names + ([] if a.only else ["kafkabroker"]):
            for p in glob.glob(os.path.join(out, n + "-*-v*-*.bin")):
                os.remove(p)
    listen = _free_port_pair()
    kport = listen + 1
    work = tempfile.mkdtemp(prefix="skiff-capture-")
    env = dict(os.environ, KAFKA_REF_CONTROLLER_PORT=str(listen + 2),
               KAFKA_REF_HEAP="-Xmx768m", KAFKA_REF_NUM_PARTITIONS="2",
               KAFKA_REF_PROPS="advertised.listeners=PLAINTEXT://127.0.0.1:%d" % listen)
    script = os.environ.get("KAFKA_REF_SCRIPT", os.path.join(ROOT, "tools", "kafka-ref.sh"))
    subprocess.run([script, "start", work, str(kport)], env=env, check=True)
    b = "127.0.0.1:%d" % listen
    clients = {"kcat": lambda t: _kcat(b, t),
               "confluent": lambda t: _run([PYTHON, "-c", CK_SCRIPT, b, t], timeout=180),
               "kafkapython": lambda t: _run([PYTHON, "-c", KP_SCRIPT, b, t], timeout=180),
               "java": lambda t: _java(b, t)}
    try:
        for name in names:
            drive = clients[name]
            corpus = Corpus(out, name, a.max_per_kind, a.max_size)
            proxy = Proxy(listen, ("127.0.0.1", kport), corpus).start()
            t0 = time.time()
            try:
                drive("seed-%s" % name)
            finally:
                time.sleep(0.5)
                proxy.close()
            print("%s: %d frames written, %d skipped, %.0fs" % (
                name, corpus.written, corpus.skipped, time.time() - t0), flush=True)
    finally:
        subprocess.run([script, "stop", work], env=env)
        shutil.rmtree(work, ignore_errors=True)
    files = [p for n in names + ["kafkabroker"]
             for p in glob.glob(os.path.join(out, n + "-*-v*-*.bin"))]
    print("captured corpus: %d files, %d bytes, largest %d" % (
        len(files), sum(os.path.getsize(p) for p in files),
        max([os.path.getsize(p) for p in files] or [0])))


TOPIC_ID = bytes(range(0x10, 0x20))


def _raw_frames():
    """(api key, version, body) of each kproto frame, in file order."""
    import kgroup  # noqa: F401 (registers the group APIs' schemas in kproto)
    k = kproto
    out = []
    for tid in (TOPIC_ID, bytes(16)):
        out.append((0, 13, {"TransactionalId": None, "Acks": -1, "TimeoutMs": 3000,
                            "TopicData": [{"TopicId": tid, "PartitionData": [
                                {"Index": 0, "Records": k.batch([b"a", b"bc"],
                                                                base_timestamp=1700000000000)},
                                {"Index": 1, "Records": None}]}]}))
    for v in (13, 15, 16, 17):
        body = k.fetch_body("", 0, 5, max_wait=500)
        body["Topics"][0]["TopicId"] = TOPIC_ID
        body["ForgottenTopicsData"] = [{"TopicId": TOPIC_ID, "Partitions": [1]}]
        out.append((1, v, body))
    for v in (8, 9, 10):
        out.append((2, v, {"ReplicaId": -1, "IsolationLevel": 1, "TimeoutMs": 2000,
                           "Topics": [{"Name": "t", "Partitions": [
                               {"PartitionIndex": 0, "Timestamp": ts} for ts in (-4, -5)]}]}))
    out.append((3, 13, {"Topics": [{"TopicId": TOPIC_ID, "Name": None}],
                        "AllowAutoTopicCreation": False}))
    out.append((8, 10, {"GroupId": "g", "GenerationIdOrMemberEpoch": -1, "MemberId": "",
                        "GroupInstanceId": None, "Topics": [{"TopicId": TOPIC_ID, "Partitions": [
                            {"PartitionIndex": 0, "CommittedOffset": 7,
                             "CommittedLeaderEpoch": 3, "CommittedMetadata": None}]}]}))
    for topics in ([{"TopicId": TOPIC_ID, "PartitionIndexes": [0, 1]}], None):
        out.append((9, 10, {"Groups": [{"GroupId": "g", "MemberId": None, "MemberEpoch": -1,
                                        "Topics": topics}], "RequireStable": True}))
    out.append((35, 5, {"Topics": [{"Topic": "t", "Partitions": [0]}]}))
    return out


def cmd_raw(a):
    os.makedirs(a.out, exist_ok=True)
    seen = {}
    for key, v, body in _raw_frames():
        name = kproto.API_NAMES[key]
        n = seen.get((key, v), 0)
        seen[(key, v)] = n + 1
        path = os.path.join(a.out, "kproto-%s-v%d-%d.bin" % (name, v, n))
        with open(path, "wb") as f:
            f.write(kproto.encode_request(key, v, body, 1000 + len(seen)))
    print("wrote %d frames into %s" % (sum(seen.values()), a.out))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("proxy", help="capture frames between clients and a broker")
    p.add_argument("--listen", type=int, required=True)
    p.add_argument("--upstream", required=True, help="host:port of the real broker")
    p.add_argument("--client", required=True, help="client name for the file names")
    p.add_argument("--out", required=True)
    p.add_argument("--max-per-kind", type=int, default=0, help="0 = no cap")
    p.add_argument("--max-size", type=int, default=65535)
    s = sub.add_parser("seed", help="rebuild the seed corpus against Kafka 4.3.1")
    s.add_argument("--out", default=os.path.join(HERE, "corpus"))
    s.add_argument("--max-per-kind", type=int, default=10)
    s.add_argument("--max-size", type=int, default=65535)
    s.add_argument("--only", help="comma-separated client names")
    s.add_argument("--clean", action="store_true",
                   help="first delete the earlier captures of these clients in --out")
    r = sub.add_parser("raw", help="write kproto frames of the topic-id versions")
    r.add_argument("--out", default=os.path.join(HERE, "corpus"))
    a = ap.parse_args()
    {"proxy": cmd_proxy, "seed": cmd_seed, "raw": cmd_raw}[a.cmd](a)


if __name__ == "__main__":
    main()
