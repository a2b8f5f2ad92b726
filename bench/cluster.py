#!/usr/bin/python3
"""make bench, cluster section: failover time of a 3-node Skiff cluster under SIGKILL, and
its produce latency beside a single node on the same machine and the same storage.

Run by bench/cluster.sh (which builds first); see bench/README.md ("The cluster").

  1. starts a 3-member etcd (tools/etcd.sh) and, when it can run here, NFS-Ganesha
     (tools/ganesha.sh) as the shared volume, else a local directory; objects on the
     local disk (file://) or, with BENCH_CLUSTER_OBJECTS=s3, in the S3 emulator;
  2. latency: one single skiffd, then a 3-node cluster, each with its WAL on that volume,
     under skload (a): acks=all 1 KiB records at a fixed rate, linger.ms=0;
  3. failover: idempotent acks=all producers (confluent-kafka) send one record per
     partition of a 12-partition topic every few ms while, BENCH_CLUSTER_KILLS times,
     a node is SIGKILLed (rotating), then restarted (a new incarnation) and given
     partitions back by rebalancing. Per kill: the time from the SIGKILL to the first
     acknowledgement on each partition the node led, and its split from the nodes' logs
     (detection, fencing + replay, handoff + adoption, client);
  4. reads every partition back and checks every acknowledged record at its offset;
  5. report (text, JSON, and the generated "Cluster" section of docs/benchmarks.md
     with BENCH_DOCS=1); every process it started is stopped by its PID, whatever
     happened.

Exit status: 0 measured (whatever the figures), 1 the harness failed, 77 etcd missing.
"""

import array
import bisect
import datetime
import json
import os
import platform
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import threading
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))


def env(name, default):
    v = os.environ.get(name, "")
    return v if v != "" else default


SMOKE = env("BENCH_SMOKE", "0") == "1"
BUILD = env("SKIFF_BUILD", os.path.join(ROOT, "build"))
if not os.path.isabs(BUILD):
    BUILD = os.path.join(ROOT, BUILD)
SKIFFD = os.path.join(BUILD, "skiffd")
SKLOAD = os.path.join(BUILD, "bench", "skload")
WORK = os.path.join(os.path.abspath(env("BENCH_WORK", os.path.join(ROOT, "bench", ".work"))),
                    "cluster")
OUT = os.path.join(WORK, "results")

KILLS = int(env("BENCH_CLUSTER_KILLS", "2" if SMOKE else "10"))
PARTS = int(env("BENCH_CLUSTER_PARTITIONS", "12"))
PRODUCERS = int(env("BENCH_CLUSTER_PRODUCERS", "3"))
INTERVAL_MS = float(env("BENCH_CLUSTER_INTERVAL_MS", "10"))
NFS = env("BENCH_CLUSTER_NFS", "1") != "0"
OBJECTS = env("BENCH_CLUSTER_OBJECTS", "file")
LATENCY = env("BENCH_CLUSTER_LATENCY", "1") != "0"
# single, cluster, (failover), cluster, single: each side measured before and after the
# other, so that the machine's drift does not fall on one side only
LAT_ROUNDS = 1 if env("BENCH_CLUSTER_LAT_ROUNDS", "1" if SMOKE else "2") == "1" else 2
RATE = int(env("BENCH_CLUSTER_RATE", env("BENCH_RATE", "200" if SMOKE else "2000")))
LAT_DURATION = float(env("BENCH_CLUSTER_DURATION", "2" if SMOKE else "20"))
LAT_WARMUP = float(env("BENCH_WARMUP", "0.5" if SMOKE else "5"))
SIZE = int(env("BENCH_SIZE", "1024"))
EXTRA_PROPS = env("BENCH_CLUSTER_PROPS", "").split()
DOCS = env("BENCH_DOCS", "0" if SMOKE else "1") == "1"
TARGET_FAILOVER_S = 5.0
SESSION_MS = 2000
HEARTBEAT_MS = 500

# Acknowledgements within this long after the SIGKILL are answers the node sent before it
# died: the lease alone keeps its partitions away for over a second.
GRACE = 0.1
# Client settings of the failover producers: the "client" part of the split depends on them.
CLIENT_CONF = {
    "enable.idempotence": True, "acks": "all", "linger.ms": 1,
    "message.timeout.ms": 300000, "retry.backoff.ms": 50,
    "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 300,
    "topic.metadata.refresh.interval.ms": 2000,
    "topic.metadata.refresh.fast.interval.ms": 100,
    "socket.connection.setup.timeout.ms": 5000,
}

STARTED = time.time()


def say(msg):
    sys.stderr.write("bench-cluster: %s\n" % msg)
    sys.stderr.flush()


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


# ---------------------------------------------------------------- processes

def used_ports():
    out = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    out.add(int(line.split()[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    return out


_picked = set()


def pick_port():
    """A free port below the ephemeral range, so that no outgoing connection takes it
    between the pick and the bind."""
    used = used_ports()
    for _ in range(1000):
        p = random.randrange(20000, 32000)
        if p not in used and p not in _picked:
            _picked.add(p)
            return p
    raise Failed("no free port")


def port_open(port):
    import socket
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return True
    except OSError:
        return False


def launcher():
    """setpriv --pdeathsig KILL: a process we start dies with this driver, even when
    the driver is SIGKILLed."""
    p = shutil.which("setpriv")
    return [p, "--pdeathsig", "KILL"] if p else []


class Skiffd:
    """One skiffd process: kill() is SIGKILL, start() the same node.id, data.dir and port
    again (in cluster mode a new incarnation with a new log)."""

    def __init__(self, name, node_id, data_dir, props):
        self.name, self.node_id, self.data_dir = name, node_id, data_dir
        self.port = pick_port()
        self.bootstrap = "127.0.0.1:%d" % self.port
        self.props = {"node.id": str(node_id), "data.dir": data_dir,
                      "listeners": "PLAINTEXT://%s" % self.bootstrap,
                      "advertised.listeners": "PLAINTEXT://%s" % self.bootstrap}
        self.props.update(props)
        self.log_path = os.path.join(data_dir, "skiffd.log")
        self.proc = None
        self.starts = 0

    def argv(self):
        a = launcher() + [SKIFFD]
        for k, v in self.props.items():
            a += ["--override", "%s=%s" % (k, v)]
        for kv in EXTRA_PROPS:
            a += ["--override", kv]
        return a

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def start(self, timeout=30.0):
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                         stdin=subprocess.DEVNULL, cwd=self.data_dir)
        self.starts += 1
        deadline = time.monotonic() + timeout
        while not port_open(self.port):
            if self.proc.poll() is not None:
                raise Failed("%s exited (%s) during start-up; log %s:\n%s" % (
                    self.name, self.proc.returncode, self.log_path, self.tail()))
            if time.monotonic() > deadline:
                raise Failed("%s does not listen on %s after %.0f s" % (
                    self.name, self.bootstrap, timeout))
            time.sleep(0.05)
        return self

    def kill(self):
        if self.alive:
            self.proc.send_signal(signal.SIGKILL)
        if self.proc:
            self.proc.wait()

    def stop(self, timeout=10.0):
        """SIGTERM by PID, SIGKILL after timeout."""
        if not self.proc:
            return
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.send_signal(signal.SIGKILL)
                self.proc.wait()

    def tail(self, n=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def logs_written(self):
        try:
            with open(self.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            return []
        return [int(m) for m in re.findall(r"node %d writes log (\d+) at" % self.node_id, text)]


class Services:
    """etcd, NFS-Ganesha, the S3 emulator: started by their tools/ scripts, stopped by the
    same scripts (which signal the PIDs they recorded)."""

    def __init__(self):
        self.etcd_dir = os.path.join(WORK, "etcd")
        self.ganesha_dir = os.path.join(WORK, "ganesha")
        self.s3_dir = os.path.join(WORK, "s3rver")
        self.etcd = self.ganesha = self.s3 = False
        self.endpoints = None
        self.nfs_base = None
        self.nfs_why = None
        self.s3_url = None

    def start_etcd(self):
        os.makedirs(self.etcd_dir, exist_ok=True)
        e = dict(os.environ, SKIFF_ETCD_OWNER_PID=str(os.getpid()))
        r = subprocess.run([os.path.join(ROOT, "tools", "etcd.sh"), "start", self.etcd_dir],
                           env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
        out = r.stdout.decode(errors="replace")
        if r.returncode == 77:
            raise Skipped("etcd is not installed: %s" % out.strip())
        if r.returncode != 0:
            raise Failed("tools/etcd.sh start: exit %d\n%s" % (r.returncode, out[-2000:]))
        self.etcd = True
        self.endpoints = subprocess.check_output(
            [os.path.join(ROOT, "tools", "etcd.sh"), "endpoints", self.etcd_dir],
            timeout=30).decode().strip()
        say("etcd %s" % self.endpoints)

    def start_ganesha(self):
        if not NFS:
            self.nfs_why = "BENCH_CLUSTER_NFS=0"
            return
        os.makedirs(self.ganesha_dir, exist_ok=True)
        r = subprocess.run([os.path.join(ROOT, "tools", "ganesha.sh"), "start", self.ganesha_dir,
                            str(pick_port()), str(pick_port())],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode(errors="replace")
        if r.returncode == 77:
            self.nfs_why = out.strip().splitlines()[-1] if out.strip() else "Ganesha cannot run here"
            say("no NFS server here (%s): the shared volume is a local directory" % self.nfs_why)
            return
        if r.returncode != 0:
            self.ganesha = True   # whatever it left running is stopped at the end
            raise Failed("tools/ganesha.sh start: exit %d\n%s" % (r.returncode, out[-2000:]))
        self.ganesha = True
        self.nfs_base = out.strip().splitlines()[-1]
        say("NFS-Ganesha: %s" % self.nfs_base)

    def start_s3(self):
        if OBJECTS != "s3":
            return
        port = pick_port()
        e = dict(os.environ, SKIFF_S3RVER_OWNER_PID=str(os.getpid()))
        r = subprocess.run([os.path.join(ROOT, "tools", "s3rver.sh"), "start", self.s3_dir,
                            str(port), "bench"], env=e, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=300)
        out = r.stdout.decode(errors="replace")
        if r.returncode != 0:
            self.s3 = r.returncode != 77
            raise Failed("tools/s3rver.sh start: exit %d (BENCH_CLUSTER_OBJECTS=s3)\n%s" % (
                r.returncode, out[-2000:]))
        self.s3 = True
        os.environ.setdefault("AWS_ACCESS_KEY_ID", "S3RVER")
        os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "S3RVER")
        self.s3_url = ("s3://bench/%%s?region=us-east-1&endpoint=http://127.0.0.1:%d"
                       "&path-style=true" % port)
        say("S3 emulator on 127.0.0.1:%d" % port)

    def wal_url(self, sub):
        if self.nfs_base:
            path, query = self.nfs_base.split("?", 1)
            os.makedirs(os.path.join(self.ganesha_dir, "export", sub), exist_ok=True)
            return "%s/%s?%s" % (path.rstrip("/"), sub, query)
        d = os.path.join(WORK, "volume", sub)
        os.makedirs(d, exist_ok=True)
        return "file://" + d

    def objects_url(self, sub):
        if self.s3_url:
            return self.s3_url % sub
        d = os.path.join(WORK, "objects", sub)
        os.makedirs(d, exist_ok=True)
        return "file://" + d

    def stop(self):
        for ok, cmd in ((self.s3, ["s3rver.sh", "stop", self.s3_dir]),
                        (self.ganesha, ["ganesha.sh", "stop", self.ganesha_dir]),
                        (self.etcd, ["etcd.sh", "stop", self.etcd_dir])):
            if ok:
                try:
                    subprocess.run([os.path.join(ROOT, "tools", cmd[0])] + cmd[1:],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                   timeout=90)
                except (OSError, subprocess.TimeoutExpired) as e:
                    say("stopping %s: %r" % (cmd[0], e))
        self.s3 = self.ganesha = self.etcd = False


# ---------------------------------------------------------------- asking the cluster

class FileLogger:
    """A logger for librdkafka (confluent-kafka calls .log(level, fmt, *args)) that appends
    to a file instead of stderr."""

    def __init__(self, path):
        self.path = path

    def log(self, level, fmt, *args):
        with open(self.path, "a") as f:
            f.write("%.3f %s\n" % (time.time(), fmt % args if args else fmt))


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 3000,
                        "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 300,
                        "logger": FileLogger(os.path.join(OUT, "admin.log"))})


def metadata(adm, topic=None, timeout=3.0):
    """ClusterMetadata, retried for up to 10 s (a dead node may be asked first)."""
    from confluent_kafka import KafkaException
    deadline = time.monotonic() + 10
    while True:
        try:
            return adm.list_topics(topic=topic, timeout=timeout)
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise Failed("Metadata: %s" % e)
            time.sleep(0.1)


def leaders(adm, topic):
    md = metadata(adm, topic)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}, md
    return {p: t.partitions[p].leader for p in t.partitions}, md


def wait_for(pred, timeout, what, interval=0.1):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failed("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


def spread(adm, topic, nodes, parts=None):
    """{node: [partitions]} when every partition of topic has one of `nodes` as leader and
    every node leads its share (the mean, rounded down or up); else None."""
    parts = parts or PARTS
    ld, _ = leaders(adm, topic)
    if len(ld) != parts or any(v not in nodes for v in ld.values()):
        return None
    by = {n: sorted(p for p, v in ld.items() if v == n) for n in nodes}
    lo, hi = parts // len(nodes), -(-parts // len(nodes))
    return by if all(lo <= len(v) <= hi for v in by.values()) else None


def all_leaders(adm, nodes):
    """{(topic, partition): leader} of every topic, or None while a partition has no leader
    among `nodes`."""
    md = metadata(adm)
    out = {}
    for name, t in md.topics.items():
        if t.error is not None:
            return None
        for p, pm in t.partitions.items():
            if pm.leader not in nodes:
                return None
            out[(name, p)] = pm.leader
    return out


def settled(adm, nodes, victim, loads, quiet=1.5, timeout=30.0):
    """Waits until every partition of every topic has a live leader, `victim` leads at least
    one partition, the leaders have not changed for `quiet` s and every partition of the
    load's topic is acknowledged again (rebalancing after a restart is over). Returns the
    seconds until the leaders last changed, or None at the timeout."""
    t0 = time.monotonic()
    last, since = None, t0
    while time.monotonic() - t0 < timeout:
        cur = all_leaders(adm, nodes)
        now = time.monotonic()
        if cur != last:
            last, since = cur, now
        elif (cur is not None and now - since >= quiet and steady(loads)
              and victim in cur.values()):
            return since - t0
        time.sleep(0.2)
    return None


def create_topic(adm, topic):
    from confluent_kafka.admin import NewTopic
    fs = adm.create_topics([NewTopic(topic, PARTS, 1)], request_timeout=30)
    fs[topic].result(60)


# ---------------------------------------------------------------- the failover load

class ClientLog:
    """librdkafka's log of the failover producers (with debug=metadata,topic), written to
    results/clients.log instead of stderr; keeps when each producer learned a new leader
    of a partition ("Topic T [P]: migrating from broker A to B")."""

    RE = re.compile(r"Topic (\S+) \[(\d+)\]: migrating from broker (-?\d+) to (-?\d+)")

    def __init__(self, path):
        self.f = open(path, "w")
        self.lock = threading.Lock()
        self.learned = {}        # (producer, partition) -> [(monotonic time, leader)]

    def for_producer(self, idx, topic):
        log = self

        class Logger:
            def log(self, level, fmt, *args):
                now = time.monotonic()
                msg = fmt % args if args else fmt
                m = ClientLog.RE.search(msg)
                with log.lock:
                    log.f.write("%.3f p%d %s\n" % (time.time(), idx, msg))
                    if m and m.group(1) == topic:
                        log.learned.setdefault((idx, int(m.group(2))), []).append(
                            (now, int(m.group(4))))
        return Logger()

    def learned_after(self, idx, p, t, old):
        """When producer idx first learned, after t, a leader of p other than old."""
        with self.lock:
            for when, leader in self.learned.get((idx, p), []):
                if when > t and leader not in (old, -1):
                    return when
        return None

    def close(self):
        with self.lock:
            self.f.close()


class Load(threading.Thread):
    """One idempotent acks=all producer: a record to every partition every INTERVAL_MS,
    value "<run> <partition> <seq> <send time us>". Keeps, per partition and in arrival
    order, the acknowledgement times, send times, offsets and sequence numbers."""

    def __init__(self, idx, bootstrap, topic, run, clog):
        super().__init__(daemon=True, name="load-%d" % idx)
        from confluent_kafka import Producer
        self.idx, self.topic, self.run_id = idx, topic, run
        self.producer = Producer(dict(CLIENT_CONF, **{
            "bootstrap.servers": bootstrap, "error_cb": self._on_error,
            "debug": "metadata,topic", "logger": clog.for_producer(idx, topic)}))
        self.ack_t = [array.array("d") for _ in range(PARTS)]
        self.send_t = [array.array("d") for _ in range(PARTS)]
        self.ack_off = [array.array("q") for _ in range(PARTS)]
        self.ack_seq = [array.array("q") for _ in range(PARTS)]
        self.sent = 0
        self.failed = []
        self.errors = []
        self.fatal = []
        self.thread_error = None
        self.stop_flag = threading.Event()
        self.left = None

    def _on_error(self, err):
        self.errors.append((time.monotonic(), str(err)))
        if err.fatal():
            self.fatal.append(str(err))

    def _on_delivery(self, err, msg):
        now = time.monotonic()
        if err is not None:
            if len(self.failed) < 1000:
                self.failed.append((msg.value(), str(err)))
            else:
                self.failed.append(None)
            return
        f = msg.value().split(b" ")
        p = msg.partition()
        self.ack_t[p].append(now)
        self.send_t[p].append(int(f[3]) / 1e6)
        self.ack_off[p].append(msg.offset())
        self.ack_seq[p].append(int(f[2]))

    def run(self):
        from confluent_kafka import KafkaException
        pr = self.producer
        interval = INTERVAL_MS / 1000.0
        seq = 0
        nxt = time.monotonic()
        run_b = self.run_id.encode()
        try:
            while not self.stop_flag.is_set():
                for p in range(PARTS):
                    v = b"%s %d %d %d" % (run_b, p, seq, int(time.monotonic() * 1e6))
                    try:
                        pr.produce(self.topic, value=v, partition=p, on_delivery=self._on_delivery)
                        seq += 1
                    except BufferError:
                        pr.poll(0.05)
                    except KafkaException as e:
                        if e.args[0].code() != -190:     # _UNKNOWN_PARTITION: metadata not there yet
                            raise
                self.sent = seq
                nxt += interval
                now = time.monotonic()
                if nxt < now - 1.0:
                    nxt = now               # far behind (the machine stalled): no burst
                while True:
                    pr.poll(max(0.0, nxt - time.monotonic()))
                    if time.monotonic() >= nxt:
                        break
        except Exception as e:  # noqa: BLE001 - reported
            self.thread_error = e
        self.sent = seq

    def finish(self, timeout):
        self.stop_flag.set()
        self.join(10)
        self.left = self.producer.flush(timeout)
        return self.left

    def acked(self):
        return sum(len(a) for a in self.ack_t)

    def first_ack_after(self, p, t):
        a = self.ack_t[p]
        i = bisect.bisect_right(a, t)
        return a[i] if i < len(a) else None

    def first_ack_sent_after(self, p, t):
        """Acknowledgement time of the first acknowledged record sent after t (records of a
        partition are acknowledged in the order they were sent)."""
        s = self.send_t[p]
        i = bisect.bisect_right(s, t)
        return self.ack_t[p][i] if i < len(s) else None

    def last_ack(self, p):
        a = self.ack_t[p]
        return a[-1] if len(a) else None


def acked_total(loads):
    return sum(ld.acked() for ld in loads)


def steady(loads, within=0.5):
    """Every partition acknowledged within the last `within` s."""
    now = time.monotonic()
    for p in range(PARTS):
        last = max((ld.last_ack(p) or 0) for ld in loads)
        if now - last > within:
            return False
    return True


# ---------------------------------------------------------------- the nodes' logs

LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (\w+)\s+\[([\w-]+)\] (.*)$")


class Logs:
    """Every node's log, parsed as it grows: (wall time, node, level, module, message)."""

    def __init__(self, nodes):
        self.nodes = nodes
        self.pos = {n.node_id: 0 for n in nodes}
        self.lines = []

    def read(self):
        for n in self.nodes:
            try:
                with open(n.log_path, "rb") as f:
                    f.seek(self.pos[n.node_id])
                    data = f.read()
            except OSError:
                continue
            cut = data.rfind(b"\n") + 1
            self.pos[n.node_id] += cut
            for raw in data[:cut].decode(errors="replace").splitlines():
                m = LINE.match(raw)
                if not m:
                    continue
                t = datetime.datetime.strptime(m.group(1), "%Y-%m-%dT%H:%M:%S.%f").replace(
                    tzinfo=datetime.timezone.utc).timestamp()
                self.lines.append((t, n.node_id, m.group(2), m.group(3), m.group(4)))

    def window(self, t0, t1, exclude=()):
        return sorted(x for x in self.lines if t0 <= x[0] <= t1 and x[1] not in exclude)


RE_DEAD = re.compile(r"log (\d+) of node (\d+) is dead: node (\d+) takes it into custody")
RE_TAKE = re.compile(r"taking dead log (\d+) of node (\d+) into custody")
RE_REPLAYED = re.compile(r"dead log (\d+) of node (\d+) fenced and replayed in (\d+) ms "
                         r"\(LSN (\d+) to (\d+)\)")
RE_HANDOFF = re.compile(r"^(\S+)-(\d+): HANDOFF of log (\d+) at LSN (\d+) published \((\d+) ms\)")
RE_ADOPT = re.compile(r"^(\S+)-(\d+): now served here at epoch (\d+) \(offsets (-?\d+)\.\.(-?\d+)\)"
                      r", adopted in (\d+) ms")
RE_RESTORED = re.compile(r"restored a SQLite view from snapshots/log-(\d+)/(\d+)\.db")
RE_OPENED = re.compile(r"opened on (\w+) as owner epoch \d+ \(lease \d+ ms\): \d+ segments, "
                       r"LSN (\d+) to (\d+)")
RE_CONTROLLER = re.compile(r"node (\d+) is now the controller")
RE_ROUND = re.compile(r"round: (\d+) custody, (\d+) placed, (\d+) moved, (\d+) retargeted")


def split_of(lines, kill, topic):
    """The failover of one kill taken apart from the nodes' log lines (wall times)."""
    L, N, t_kill = kill["log"], kill["victim"], kill["t_kill_wall"]
    parts = set(kill["partitions"])
    s = {"missing": []}
    dead = take = replayed = elected = rnd = restored = None
    opened = []
    handoff, adopt = {}, {}
    warnings = []
    for t, node, level, module, msg in lines:
        if level in ("WARN", "ERROR") and len(warnings) < 20:
            warnings.append("%.3f node %d %s [%s] %s" % (t - t_kill, node, level, module, msg))
        m = RE_CONTROLLER.search(msg)
        if m and elected is None and int(m.group(1)) == node:
            elected = (t, node)
        m = RE_DEAD.search(msg)
        if m and dead is None and module == "controller" and (
                (L is not None and int(m.group(1)) == L) or (L is None and int(m.group(2)) == N)):
            dead = (t, node, int(m.group(3)), int(m.group(1)))
        m = RE_ROUND.search(msg)
        if m and rnd is None and dead is not None and t >= dead[0] and module == "controller":
            rnd = (t, node, int(m.group(1)), int(m.group(3)))
        m = RE_TAKE.search(msg)
        if m and take is None and dead is not None and int(m.group(1)) == dead[3]:
            take = (t, node)
        m = RE_RESTORED.search(msg)
        if (m and restored is None and dead is not None and int(m.group(1)) == dead[3]
                and node == dead[2]):
            restored = (t, node, int(m.group(2)))
        m = RE_OPENED.search(msg)
        if m and dead is not None and node == dead[2] and module == "wal":
            opened.append((t, int(m.group(2)), int(m.group(3))))
        m = RE_REPLAYED.search(msg)
        if m and replayed is None and dead is not None and int(m.group(1)) == dead[3]:
            replayed = (t, node, int(m.group(3)), int(m.group(4)), int(m.group(5)))
        m = RE_HANDOFF.search(msg)
        if (m and m.group(1) == topic and int(m.group(2)) in parts and dead is not None
                and int(m.group(3)) == dead[3] and int(m.group(2)) not in handoff):
            handoff[int(m.group(2))] = (t, node, int(m.group(5)))
        m = RE_ADOPT.search(msg)
        if m and m.group(1) == topic:
            p = int(m.group(2))
            if p in handoff and p not in adopt and t >= handoff[p][0] - 0.002:
                adopt[p] = (t, node, int(m.group(6)), int(m.group(3)))
    s["warnings"] = warnings
    if kill["was_controller"]:
        if elected:
            s["election"] = elected[0] - t_kill
            s["new_controller"] = elected[1]
        else:
            s["missing"].append("'node M is now the controller' after the controller was killed")
    if not dead:
        s["missing"].append("controller's 'log %s of node %d is dead' line" % (L, N))
        return s
    s["detection"] = dead[0] - t_kill
    s["controller"] = dead[1]
    s["custodian"] = dead[2]
    if rnd:
        s["round_moved"] = rnd[3]
    if take:
        s["custody_start"] = take[0] - dead[0]
    else:
        s["missing"].append("custodian's 'taking dead log %d into custody'" % dead[3])
    if not replayed:
        s["missing"].append("custodian's 'dead log %d ... fenced and replayed' line" % dead[3])
        return s
    s["fence_replay"] = replayed[0] - dead[0]
    s["replay_logged_ms"] = replayed[2]
    s["lsn"] = [replayed[3], replayed[4]]
    # inside it: the view restored from its snapshot, the WAL opened (fenced: its torn
    # tail found by reading every segment from its start), the rest of the replay. The
    # WAL's "opened on" line names no log: matched by its LSN range.
    op = [x for x in opened if x[1] == replayed[3] and x[2] == replayed[4] and x[0] <= replayed[0]]
    if restored:
        s["snapshot_lsn"] = restored[2]
    if take and op:
        s["wal_open"] = op[-1][0] - (restored[0] if restored else take[0])
        s["replay_after_open"] = replayed[0] - op[-1][0]
        if restored:
            s["view_restore"] = restored[0] - take[0]
    if set(handoff) != parts:
        s["missing"].append("'HANDOFF of log %d ... published' of partitions %s" % (
            dead[3], sorted(parts - set(handoff))))
    if set(adopt) != parts:
        s["missing"].append("'now served here' after the HANDOFF of partitions %s" % (
            sorted(parts - set(adopt))))
    if handoff:
        t_h = max(v[0] for v in handoff.values())
        s["handoff"] = t_h - replayed[0]
        s["handoff_logged_ms_max"] = max(v[2] for v in handoff.values())
        if adopt:
            t_a = max(v[0] for v in adopt.values())
            s["adoption"] = t_a - t_h
            s["reassignment"] = t_a - replayed[0]
            s["adopted_logged_ms_max"] = max(v[2] for v in adopt.values())
            s["adopters"] = {str(p): v[1] for p, v in sorted(adopt.items())}
            s["t_last_adopt_wall"] = t_a
            s["per_partition"] = {str(p): {"handoff": handoff[p][0] - t_kill,
                                           "adopted": adopt[p][0] - t_kill}
                                  for p in sorted(adopt) if p in handoff}
    return s


# ---------------------------------------------------------------- read-back

def verify(bootstrap, topic, loads):
    """Reads every partition whole (librdkafka fetches from each partition's leader) and
    checks: offsets contiguous from the log start, every value once, in the partition it
    was sent to and produced by one of our producers, and every acknowledged record at its
    acknowledged offset. Returns (stats, problems)."""
    from confluent_kafka import Consumer, TopicPartition
    runs = {ld.run_id.encode(): ld for ld in loads}
    problems = []
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-cluster-verify",
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.max.bytes": 16 << 20, "max.partition.fetch.bytes": 4 << 20})
    seen = {ld.run_id: bytearray(ld.sent + 1) for ld in loads}
    records = 0
    deadline = time.monotonic() + 180
    try:
        for p in range(PARTS):
            lo, hi = c.get_watermark_offsets(TopicPartition(topic, p), timeout=30)
            slots = array.array("q", [-1]) * max(0, hi - lo)
            c.assign([TopicPartition(topic, p, lo)])
            expect = lo
            while expect < hi:
                if time.monotonic() > deadline:
                    raise Failed("read-back of %s-%d: at offset %d of %d..%d after 180 s" % (
                        topic, p, expect, lo, hi))
                for m in c.consume(10000, 1.0):
                    if m.error():
                        problems.append("%s-%d: consumer error %s" % (topic, p, m.error()))
                        continue
                    off = m.offset()
                    if off >= hi:
                        continue
                    if off != expect:
                        problems.append("%s-%d: offset %d after %d (gap or repeat)" % (
                            topic, p, off, expect - 1))
                    expect = off + 1
                    records += 1
                    if m.value() == b"probe":
                        continue            # make_topic's check that the partition is served
                    f = m.value().split(b" ")
                    ld = runs.get(f[0]) if len(f) == 4 else None
                    if ld is None:
                        problems.append("%s-%d@%d: value %r never produced" % (
                            topic, p, off, m.value()[:60]))
                        continue
                    fp, seq = int(f[1]), int(f[2])
                    if fp != p:
                        problems.append("%s-%d@%d: value sent to partition %d" % (topic, p, off, fp))
                    if seq > ld.sent:
                        problems.append("%s-%d@%d: sequence %d never sent" % (topic, p, off, seq))
                        continue
                    if seen[ld.run_id][seq]:
                        problems.append("%s-%d@%d: %r twice" % (topic, p, off, m.value()))
                    seen[ld.run_id][seq] = 1
                    slots[off - lo] = ld.idx << 40 | seq
            for ld in loads:
                offs, seqs = ld.ack_off[p], ld.ack_seq[p]
                for i in range(len(offs)):
                    off = offs[i]
                    if off < lo or off >= hi:
                        problems.append("%s-%d: acknowledged offset %d outside %d..%d" % (
                            topic, p, off, lo, hi))
                    elif slots[off - lo] != (ld.idx << 40 | seqs[i]):
                        problems.append("%s-%d: acknowledged seq %d of %s at offset %d, log has %s"
                                        % (topic, p, seqs[i], ld.run_id, off, slots[off - lo]))
            if len(problems) > 200:
                break
    finally:
        c.close()
    return {"records": records, "acked": acked_total(loads)}, problems


# ---------------------------------------------------------------- phases

def skload(bootstrap, topic, out_name):
    bound = LAT_DURATION + LAT_WARMUP + 120
    cmd = [SKLOAD, "-b", bootstrap, "-t", topic, "-p", str(PARTS), "-s", str(SIZE), "-a", "all",
           "--warmup", str(LAT_WARMUP), "-d", str(LAT_DURATION), "-P", "1", "-r", str(RATE),
           "--linger-ms", "0", "--max-inflight", "20000", "--json", "--progress", "0",
           "--buckets"]
    with open(os.path.join(OUT, out_name + ".json"), "wb") as o, \
            open(os.path.join(OUT, out_name + ".log"), "wb") as e:
        p = subprocess.Popen(launcher() + cmd, stdout=o, stderr=e)
        try:
            p.wait(bound)
        except subprocess.TimeoutExpired:
            p.send_signal(signal.SIGKILL)
            p.wait()
    try:
        with open(os.path.join(OUT, out_name + ".json")) as f:
            r = json.loads(f.read().strip().splitlines()[-1])
        return r if r.get("measured") else None
    except (OSError, ValueError, IndexError):
        return None


def latency_single(svc, res, rnd):
    """One latency run against a fresh single node (no etcd), its WAL on the shared volume."""
    sub = "single%d" % rnd
    say("latency: single node (round %d), WAL %s" % (rnd, svc.wal_url(sub + "-wal")))
    n = Skiffd(sub, 1, os.path.join(WORK, sub), {
        "wal.url": svc.wal_url(sub + "-wal"), "objects.url": svc.objects_url(sub)})
    try:
        n.start()
        r = skload(n.bootstrap, "lat-single", "latency_single%d" % rnd)
        if not n.alive:
            raise Failed("the single node died during the latency run: %s" % n.tail())
    finally:
        n.stop()
    res["latency_runs"].append({"target": "single", "round": rnd, "result": r})


def latency_cluster(adm, nodes, res, rnd):
    lat = make_topic(adm, "lat%d" % rnd, nodes, res)
    say("latency: 3-node cluster (round %d)" % rnd)
    r = skload(",".join(n.bootstrap for n in nodes), lat, "latency_cluster%d" % rnd)
    for n in nodes:
        if not n.alive:
            raise Failed("node %d died during the latency run:\n%s" % (n.node_id, n.tail()))
    # its partitions would otherwise move with every kill too
    delete_topic(adm, lat)
    res["latency_runs"].append({"target": "cluster", "round": rnd, "result": r})


def pooled(runs):
    """Percentiles of the runs' histograms together (nearest rank over the summed buckets,
    upper edges, as skload reports them), or None when a run measured nothing."""
    if not runs or any(r is None for r in runs):
        return None
    buckets = {}
    for r in runs:
        for up, c in r.get("latency_buckets") or []:
            buckets[up] = buckets.get(up, 0) + c
    total = sum(buckets.values())
    if not total:
        return None
    edges = sorted(buckets.items())

    def q(x):
        rank = max(1, -(-int(x * total * 1000000) // 1000000))
        acc = 0
        for up, c in edges:
            acc += c
            if acc >= rank:
                return up / 1000.0
        return edges[-1][0] / 1000.0
    mx = max(r["latency"]["max_ms"] for r in runs)
    return {"latency": {"count": total, "p50_ms": min(mx, q(0.5)), "p99_ms": min(mx, q(0.99)),
                        "p999_ms": min(mx, q(0.999)), "max_ms": mx},
            "acked": sum(r["acked"] for r in runs), "failed": sum(r["failed"] for r in runs),
            "records_s": statistics.mean(r["records_s"] for r in runs), "runs": len(runs)}


def node_props(svc, prefix):
    return {"etcd.endpoints": svc.endpoints, "etcd.prefix": prefix,
            "wal.url": svc.wal_url("cluster"), "objects.url": svc.objects_url("cluster"),
            "broker.session.timeout.ms": str(SESSION_MS),
            "broker.heartbeat.interval.ms": str(HEARTBEAT_MS),
            "offsets.topic.num.partitions": "6",
            "leader.imbalance.check.interval.seconds": "2",
            "group.initial.rebalance.delay.ms": "0"}


def start_cluster(svc, nodes):
    for n in nodes:
        n.start()
    adm = admin(",".join(n.bootstrap for n in nodes))
    ids = {n.node_id for n in nodes}
    wait_for(lambda: {b for b in metadata(adm).brokers} == ids, 60, "3 registered nodes")
    # Placement counts every partition a node holds: topics are created once the nodes
    # share __consumer_offsets evenly (rebalanced after the nodes joined).
    wait_for(lambda: spread(adm, "__consumer_offsets", ids, 6), 60,
             "__consumer_offsets spread over the 3 nodes")
    return adm


def unserved(bootstrap, topic, timeout=15.0):
    """Partitions of topic that do not acknowledge a record within `timeout` s:
    {partition: error}."""
    from confluent_kafka import Producer
    errs = {}
    pr = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                   "message.timeout.ms": int(timeout * 1000),
                   "logger": FileLogger(os.path.join(OUT, "admin.log"))})

    def done(err, msg):
        if err is not None:
            errs[msg.partition()] = str(err)
    for p in range(PARTS):
        pr.produce(topic, value=b"probe", partition=p, on_delivery=done)
    left = pr.flush(timeout + 10)
    if left:
        errs[-1] = "%d probes undelivered" % left
    return errs


def make_topic(adm, base, nodes, res, attempts=3):
    """Creates a topic of PARTS partitions (base-1, base-2, ...), waits until its partitions
    are spread over the nodes and checks that every one of them acknowledges a record. A
    partition that does not is a fault of the cluster: noted in res["anomalies"], and the
    next attempt makes a new topic."""
    ids = {n.node_id for n in nodes if n.alive}
    bootstrap = ",".join(n.bootstrap for n in nodes)
    for i in range(1, attempts + 1):
        topic = "%s-%d" % (base, i)
        create_topic(adm, topic)
        try:
            wait_for(lambda: spread(adm, topic, ids), 60,
                     "the partitions of %s to spread over nodes %s" % (topic, sorted(ids)))
        except Failed:
            ld, _ = leaders(adm, topic)
            say("%s not evenly spread after 60 s: %s" % (topic, ld))
        errs = unserved(bootstrap, topic)
        if not errs:
            return topic
        ld, _ = leaders(adm, topic)
        msg = ("new topic %s: partitions %s acknowledged nothing within 15 s (%s); Metadata "
               "leaders %s" % (topic, sorted(errs), "; ".join(sorted(set(errs.values()))),
                               {p: ld.get(p) for p in sorted(errs)}))
        say(msg)
        res.setdefault("anomalies", []).append(msg)
    raise Failed("no topic with every partition served after %d attempts" % attempts)


def delete_topic(adm, topic):
    try:
        adm.delete_topics([topic], request_timeout=30)[topic].result(60)
    except Exception as e:  # noqa: BLE001 - the failover phase does not need it gone
        say("deleting %s: %s" % (topic, e))


def gaps(loads, t0, t1):
    """The longest time between two acknowledgements of one partition within [t0, t1]."""
    worst = 0.0
    for ld in loads:
        for a in ld.ack_t:
            i = max(0, bisect.bisect_left(a, t0) - 1)
            j = bisect.bisect_right(a, t1)
            prev = None
            for k in range(i, min(j + 1, len(a))):
                if prev is not None:
                    worst = max(worst, a[k] - prev)
                prev = a[k]
    return worst


def failover(adm, nodes, topic, logs, res):
    bootstrap = ",".join(n.bootstrap for n in nodes)
    by = {n.node_id: n for n in nodes}
    tag = "%x" % random.randrange(1 << 32)
    clog = ClientLog(os.path.join(OUT, "clients.log"))
    loads = [Load(i, bootstrap, topic, "r%d-%s" % (i, tag), clog) for i in range(PRODUCERS)]
    for ld in loads:
        ld.start()
    kills = res["kills"]
    try:
        wait_for(lambda: steady(loads), 60, "acknowledgements on every partition")
        time.sleep(1.0)
        for i in range(KILLS):
            ids = {n.node_id for n in nodes}
            try:
                wait_for(lambda: steady(loads), 60, "acknowledgements on every partition")
            except Failed as e:
                say("kill %d: %s; killing anyway" % (i + 1, e))
            ld_before, md = leaders(adm, topic)
            # nodes 1, 2, 3, 1, ...; the next one when this one leads no partition of topic
            victim, affected = None, []
            for j in range(len(nodes)):
                cand = by[1 + (i + j) % len(nodes)]
                affected = sorted(p for p, v in ld_before.items() if v == cand.node_id)
                if affected:
                    victim = cand
                    break
                say("kill %d: node %d leads no partition of %s: the next node instead" % (
                    i + 1, cand.node_id, topic))
            if victim is None:
                raise Failed("no node leads a partition of %s: %s" % (topic, ld_before))
            logs_before = victim.logs_written()
            kill = {"kill": i + 1, "victim": victim.node_id, "partitions": affected,
                    "log": logs_before[-1] if logs_before else None,
                    "controller_before": md.controller_id,
                    "was_controller": md.controller_id == victim.node_id,
                    "acked_before": acked_total(loads)}
            wall0, mono0 = time.time(), time.monotonic()
            victim.proc.send_signal(signal.SIGKILL)
            wall1, mono1 = time.time(), time.monotonic()
            victim.proc.wait()
            t_kill = (mono0 + mono1) / 2
            kill["t_kill_wall"] = (wall0 + wall1) / 2
            off = kill["t_kill_wall"] - t_kill       # wall = mono + off
            say("kill %d: SIGKILL node %d (pid %d, log %s%s), partitions %s" % (
                i + 1, victim.node_id, victim.pid, kill["log"],
                ", the controller" if kill["was_controller"] else "", affected))
            got, sent_after = {}, {}
            deadline = t_kill + 60
            while len(got) < len(affected) and time.monotonic() < deadline:
                for p in affected:
                    if p not in got:
                        ts = [t for t in (ld.first_ack_after(p, t_kill + GRACE) for ld in loads) if t]
                        if ts:
                            got[p] = min(ts)
                time.sleep(0.02)
            # the first acknowledged record of each partition that was sent after the kill
            for p in affected:
                ts = [t for t in (ld.first_ack_sent_after(p, t_kill) for ld in loads) if t]
                if ts:
                    sent_after[p] = min(ts) - t_kill
            kill["grace_acks"] = sum(
                bisect.bisect_right(ld.ack_t[p], t_kill + GRACE) - bisect.bisect_right(ld.ack_t[p], t_kill)
                for ld in loads for p in affected)
            kill["failover"] = {str(p): got[p] - t_kill for p in sorted(got)}
            kill["sent_after"] = {str(p): v for p, v in sorted(sent_after.items())}
            kill["timed_out"] = sorted(set(affected) - set(got))
            kill["failover_max"] = max(kill["failover"].values()) if got and not kill["timed_out"] else None
            kill["failover_first"] = min(kill["failover"].values()) if got else None
            t_end = max(got.values()) if got else time.monotonic()
            time.sleep(0.3)
            logs.read()
            lines = logs.window(kill["t_kill_wall"] - 0.05, t_end + off + 0.3,
                                exclude=(victim.node_id,))
            sp = split_of(lines, kill, topic)
            learned = {}
            for p in affected:
                ts = [t for t in (clog.learned_after(ld.idx, p, t_kill, victim.node_id)
                                  for ld in loads) if t]
                if ts:
                    learned[p] = min(ts)
            if "t_last_adopt_wall" in sp and got:
                t_a = sp.pop("t_last_adopt_wall") - off
                sp["client"] = t_end - t_a
                if len(learned) == len(affected):
                    sp["client_learned"] = max(learned.values()) - t_a
                per = sp.get("per_partition", {})
                for p, v in per.items():
                    if int(p) in got:
                        v["acked"] = got[int(p)] - t_kill
                    if int(p) in learned:
                        v["learned"] = learned[int(p)] - t_kill
            kill["split"] = sp
            kills.append(kill)
            say("kill %d: failover %s s (first %s s); detection %s, fencing+replay %s, "
                "handoff %s, adoption %s, client %s%s" % (
                    i + 1, fmt(kill["failover_max"]), fmt(kill["failover_first"]),
                    fmt(sp.get("detection")), fmt(sp.get("fence_replay")), fmt(sp.get("handoff")),
                    fmt(sp.get("adoption")), fmt(sp.get("client")),
                    "; missing: " + "; ".join(sp["missing"]) if sp["missing"] else ""))
            if kill["timed_out"]:
                say("kill %d: partitions %s not acknowledged 60 s after the kill" % (
                    i + 1, kill["timed_out"]))
            # a new incarnation of the victim, and partitions back by rebalancing
            victim.start()
            new = victim.logs_written()
            kill["new_log"] = new[-1] if len(new) > len(logs_before) else None
            t_restart = time.monotonic()
            kill["back_s"] = settled(adm, ids, victim.node_id, loads)
            if kill["back_s"] is None:
                say("kill %d: node %d leads no partition 30 s after its restart, or the "
                    "leaders keep changing" % (i + 1, victim.node_id))
            time.sleep(0.5)
            # rebalancing gave the node partitions back: planned moves under load
            kill["rebalance_pause"] = gaps(loads, t_restart, time.monotonic())
    finally:
        for ld in loads:
            ld.finish(60)
        clog.close()
    res["load"] = {
        "producers": PRODUCERS, "interval_ms": INTERVAL_MS,
        "sent": sum(ld.sent for ld in loads), "acked": acked_total(loads),
        "undelivered": sum(ld.left or 0 for ld in loads),
        "failed": sum(len(ld.failed) for ld in loads),
        "failed_examples": [x for ld in loads for x in ld.failed if x][:5],
        "fatal": [x for ld in loads for x in ld.fatal][:5],
        "thread_errors": [repr(ld.thread_error) for ld in loads if ld.thread_error],
        "client_errors": len([1 for ld in loads for _ in ld.errors]),
    }
    say("load: %(sent)d sent, %(acked)d acknowledged, %(failed)d failed, %(undelivered)d "
        "undelivered" % res["load"])
    say("reading %s back" % topic)
    t0 = time.monotonic()
    stats, problems = verify(bootstrap, topic, loads)
    stats["seconds"] = time.monotonic() - t0
    stats["problems"] = problems[:50]
    stats["problem_count"] = len(problems)
    res["verify"] = stats
    say("read-back: %d records, %d acknowledged, %d problem(s)" % (
        stats["records"], stats["acked"], len(problems)))


def fmt(x, nd=2):
    return "n/a" if x is None else "%.*f" % (nd, x)


# ---------------------------------------------------------------- report

def machine():
    model = ""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    model = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    mem = 0
    try:
        with open("/proc/meminfo") as f:
            mem = int(f.readline().split()[1]) / 1048576
    except (OSError, ValueError, IndexError):
        pass
    osname = ""
    try:
        with open("/etc/os-release") as f:
            for line in f:
                if line.startswith("PRETTY_NAME="):
                    osname = line.split("=", 1)[1].strip().strip('"')
    except OSError:
        pass
    return {"cores": os.cpu_count(), "cpu": model, "mem_gib": round(mem, 1), "os": osname,
            "kernel": platform.release()}


def software():
    def git(*a):
        try:
            return subprocess.check_output(["git", "-C", ROOT] + list(a), timeout=30,
                                           stderr=subprocess.DEVNULL).decode().strip()
        except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired):
            return ""
    head = git("rev-parse", "--short", "HEAD")
    # not git(): its strip() would eat the status column of the first line (" M broker/...")
    dirty = [l[3:] for l in subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--", "broker", "cluster", "wal", "s3sink",
         "rpc", "proto", "proxy", "common"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        timeout=30).stdout.decode().splitlines() if l.strip()]
    import confluent_kafka
    return {"commit": head, "uncommitted": dirty, "librdkafka": confluent_kafka.libversion()[0],
            "confluent_kafka": confluent_kafka.version()[0]}


def fs_of(path):
    """The file system type of the mount holding path (/proc/mounts: ext4, xfs, ...)."""
    path = os.path.realpath(path)
    best, kind = "", "?"
    try:
        with open("/proc/mounts") as f:
            for line in f:
                x = line.split()
                if len(x) >= 3 and (path == x[1] or path.startswith(x[1].rstrip("/") + "/")) \
                        and len(x[1]) > len(best):
                    best, kind = x[1], x[2]
    except OSError:
        pass
    return kind


def quantile(xs, q):
    xs = sorted(xs)
    if not xs:
        return None
    k = max(0, min(len(xs) - 1, int(-(-q * len(xs) // 1)) - 1))
    return xs[k]


def summarize(res):
    kills = res.get("kills", [])
    full = [k["failover_max"] for k in kills if k.get("failover_max") is not None]
    incomplete = [k for k in kills if k.get("failover_max") is None]
    per_part = [v for k in kills for v in k.get("failover", {}).values()]
    comp = {}
    for name in ("detection", "election", "custody_start", "fence_replay", "view_restore",
                 "wal_open", "replay_after_open", "handoff", "adoption", "reassignment", "client",
                 "client_learned"):
        xs = [k["split"][name] for k in kills if name in k.get("split", {})]
        if xs:
            comp[name] = {"p50": statistics.median(xs), "max": max(xs), "n": len(xs)}
        if name == "detection":
            for sub, ctl in (("detection_controller", True), ("detection_other", False)):
                xs = [k["split"]["detection"] for k in kills
                      if "detection" in k.get("split", {}) and k["was_controller"] == ctl]
                if xs:
                    comp[sub] = {"p50": statistics.median(xs), "max": max(xs), "n": len(xs)}
    sent_after = [max(k["sent_after"].values()) for k in kills
                  if k.get("sent_after") and len(k["sent_after"]) == len(k["partitions"])]
    s = {"kills": len(kills), "complete": len(full),
         "sent_after_p50": statistics.median(sent_after) if sent_after else None,
         "sent_after_max": max(sent_after) if sent_after else None,
         "p50": statistics.median(full) if full else None,
         "max": max(full) if full else None,
         "partition_p50": statistics.median(per_part) if per_part else None,
         "partition_p99": quantile(per_part, 0.99),
         "split": comp}
    ok = None
    if kills:
        ok = bool(full) and not incomplete and s["max"] <= TARGET_FAILOVER_S
    s["target"] = {"name": "failover max over kills <= %.0f s" % TARGET_FAILOVER_S, "ok": ok}
    runs = res.get("latency_runs", [])
    a = res["latency_single"] = pooled([x["result"] for x in runs if x["target"] == "single"])
    b = res["latency_cluster"] = pooled([x["result"] for x in runs if x["target"] == "cluster"])
    if a and b and a["latency"]["p99_ms"] > 0:
        s["p99_ratio"] = b["latency"]["p99_ms"] / a["latency"]["p99_ms"]
        s["p50_ratio"] = b["latency"]["p50_ms"] / a["latency"]["p50_ms"] if a["latency"]["p50_ms"] else None
    return s


def label(ok):
    return "n/a" if ok is None else ("PASS" if ok else "MISS")


def storage_text(res):
    st = res["storage"]
    if st["wal"] == "nfs":
        w = ("NFS-Ganesha on loopback (tools/ganesha.sh, NFSv3 over TCP, VFS FSAL, export on %s), "
             "reached through libnfs (`wal.url=nfs://...`)" % st["export_fs"])
    else:
        w = "a local directory (`wal.url=file://...`, %s; %s)" % (st["volume_fs"], st["why"])
    o = ("the S3 emulator (tools/s3rver.sh, `objects.url=s3://...`)" if st["objects"] == "s3"
         else "the local disk (`objects.url=file://...`, %s)" % st["objects_fs"])
    return w, o


def text_report(res, s):
    lines = []
    p = lines.append
    m, sw = res["machine"], res["software"]
    p("Skiff cluster benchmark%s: %d cores (%s), %.1f GiB, %s, kernel %s; load %s -> %s" % (
        " (SMOKE: tiny sizes, figures meaningless)" if SMOKE else "", m["cores"], m["cpu"],
        m["mem_gib"], m["os"], m["kernel"], res["load_before"], res.get("load_after", "?")))
    p("skiffd at %s%s; confluent-kafka %s on librdkafka %s" % (
        sw["commit"], " + uncommitted changes in %s" % ", ".join(sw["uncommitted"][:8])
        if sw["uncommitted"] else "", sw["confluent_kafka"], sw["librdkafka"]))
    w, o = storage_text(res)
    p("shared volume (WAL): %s" % w)
    p("objects: %s" % o)
    p("etcd: 3 members on loopback (tools/etcd.sh: heartbeat 100 ms, election 500 ms)")
    p("")
    if res.get("latency_runs"):
        p("Produce latency: acks=all, %d B records, %d rec/s fixed rate from 1 producer "
          "(skload, latency from the scheduled send time), linger.ms=0, %d partitions, "
          "%g s after %g s warm-up; in run order, then each side's runs pooled" % (
              SIZE, RATE, PARTS, LAT_DURATION, LAT_WARMUP))
        rows = [("%s, round %d" % ("single node" if x["target"] == "single" else "3-node cluster",
                                   x["round"]), x["result"]) for x in res["latency_runs"]]
        rows += [("single node, pooled", res.get("latency_single")),
                 ("3-node cluster, pooled", res.get("latency_cluster"))]
        for name, r in rows:
            if r:
                h = r["latency"]
                p("  %-24s p50 %7.3f  p99 %7.3f  p999 %7.3f  max %8.3f ms  (%d acked, %d failed, "
                  "%.0f rec/s)" % (name, h["p50_ms"], h["p99_ms"], h["p999_ms"], h["max_ms"],
                                   r["acked"], r["failed"], r["records_s"]))
            else:
                p("  %-24s NO RESULT" % name)
        p("")
    kills = res.get("kills", [])
    if kills:
        p("Failover: %d SIGKILLs (nodes rotating, each restarted as a new incarnation), %d "
          "idempotent acks=all producers, one record per partition every %g ms each, "
          "%d partitions" % (len(kills), PRODUCERS, INTERVAL_MS, PARTS))
        p("  failover = SIGKILL -> first acknowledgement (more than %.0f ms after it) on every "
          "partition the node led; split from the nodes' logs; (leader) = last adoption -> "
          "every producer knew the new leaders (librdkafka's log)" % (GRACE * 1000))
        p("  %-4s %-4s %-12s %8s %8s | %9s %8s %8s %8s %8s (%7s) | %s" % (
            "kill", "node", "partitions", "failover", "first", "detection", "fnc+rpl",
            "handoff", "adopt", "client", "leader", "notes"))
        for k in kills:
            sp = k.get("split", {})
            notes = []
            if k["was_controller"]:
                notes.append("controller (re-elected after %s s)" % fmt(sp.get("election")))
            if sp.get("replay_logged_ms") is not None:
                notes.append("replay %d ms" % sp["replay_logged_ms"])
            if k.get("timed_out"):
                notes.append("NO ACK on %s within 60 s" % k["timed_out"])
            if sp.get("missing"):
                notes.append("missing: " + "; ".join(sp["missing"]))
            p("  %-4d %-4d %-12s %8s %8s | %9s %8s %8s %8s %8s (%7s) | %s" % (
                k["kill"], k["victim"], ",".join(map(str, k["partitions"])),
                fmt(k.get("failover_max")), fmt(k.get("failover_first")),
                fmt(sp.get("detection")), fmt(sp.get("fence_replay")), fmt(sp.get("handoff")),
                fmt(sp.get("adoption")), fmt(sp.get("client")), fmt(sp.get("client_learned")),
                ", ".join(notes)))
        p("  over kills: p50 %s s, max %s s; over partitions: p50 %s s, p99 %s s; first "
          "acknowledged record sent after the kill: p50 %s s, max %s s" % (
              fmt(s["p50"]), fmt(s["max"]), fmt(s["partition_p50"]), fmt(s["partition_p99"]),
              fmt(s["sent_after_p50"]), fmt(s["sent_after_max"])))
        p("  split, p50 (max) over kills: %s" % ", ".join(
            "%s %s (%s)" % (n, fmt(v["p50"]), fmt(v["max"])) for n, v in s["split"].items()))
        ld = res.get("load", {})
        p("  load: %d sent, %d acknowledged, %d failed, %d undelivered at the end, %d client "
          "error callbacks" % (ld.get("sent", 0), ld.get("acked", 0), ld.get("failed", 0),
                               ld.get("undelivered", 0), ld.get("client_errors", 0)))
        for x in (ld.get("fatal") or []) + (ld.get("thread_errors") or []) + \
                [str(e) for e in ld.get("failed_examples") or []]:
            p("  PRODUCER PROBLEM: %s" % x[:200])
        v = res.get("verify")
        if v:
            p("  read-back: %d records read, %d acknowledged checked at their offsets: %s" % (
                v["records"], v["acked"], "OK" if not v["problem_count"] else
                "%d PROBLEM(S): %s" % (v["problem_count"], "; ".join(v["problems"][:5]))))
        rp = [k["rebalance_pause"] for k in kills if k.get("rebalance_pause") is not None]
        if rp:
            p("  rebalancing after each restart (planned moves under load): longest pause of "
              "a partition p50 %s s, max %s s" % (fmt(statistics.median(rp)), fmt(max(rp))))
        p("")
    for a in res.get("anomalies", []):
        p("ANOMALY: %s" % a)
    probs = res.get("node_log_problems") or []
    if probs:
        p("Node log WARN/ERROR lines (grouped, numbers masked): %d kinds" % len(probs))
        for g in probs[:12]:
            p("  %5d x %s" % (g["count"], g["first"][:220]))
    if probs or res.get("anomalies"):
        p("")
    p("Targets (labels, not assertions)")
    t = s["target"]
    p("  %-48s %-20s %s" % (t["name"], "%s s" % fmt(s["max"]), label(t["ok"])))
    p("  %-48s %-20s %s" % ("produce p99, cluster / single node", fmt(s.get("p99_ratio")),
                            "(reported)"))
    return "\n".join(lines)


BEGIN = "<!-- bench-cluster:begin (generated by bench/cluster.py; edits here are overwritten) -->"
END = "<!-- bench-cluster:end -->"


def markdown(res, s):
    m, sw = res["machine"], res["software"]
    w, o = storage_text(res)
    L = []
    p = L.append
    p("### Setting")
    p("")
    p("- Machine: %d cores (%s), %.1f GiB of memory, %s, kernel %s; the cores and the disk "
      "are shared with other engineers' builds and tests. Load average (1, 5, 15 min) %s at "
      "the start, %s at the end." % (m["cores"], m["cpu"], m["mem_gib"], m["os"], m["kernel"],
                                     res["load_before"], res.get("load_after", "?")))
    p("- Software: skiffd at %s%s; producers on confluent-kafka %s (librdkafka %s); skload on "
      "the same librdkafka." % (
          sw["commit"], " with uncommitted changes in %s" % ", ".join("`%s`" % x for x in sw["uncommitted"][:8])
          if sw["uncommitted"] else "", sw["confluent_kafka"], sw["librdkafka"]))
    p("- Shared volume (the WAL of every node, and of the single node): %s." % w)
    p("- Objects: %s." % o)
    p("- etcd: 3 members on loopback (`tools/etcd.sh`: heartbeat 100 ms, election 500 ms).")
    p("- Nodes 1..3 in zones z1..z3 on one machine: `broker.session.timeout.ms=%d`, "
      "`broker.heartbeat.interval.ms=%d`, `offsets.topic.num.partitions=6`, "
      "`leader.imbalance.check.interval.seconds=2`; everything else default." % (
          SESSION_MS, HEARTBEAT_MS))
    p("")
    kills = res.get("kills", [])
    if kills:
        p("### Failover")
        p("")
        p("%d SIGKILLs of a node, rotating over nodes 1, 2, 3, under %d idempotent acks=all "
          "producers (confluent-kafka, `linger.ms=1`, `retry.backoff.ms=50`, "
          "`topic.metadata.refresh.fast.interval.ms=100`, `reconnect.backoff.max.ms=300`) that "
          "each send one record to every partition of a %d-partition topic every %g ms. After "
          "each kill the node is started again (same `node.id` and `data.dir`: a new "
          "incarnation with a new log) and the next kill waits until rebalancing has given it "
          "partitions back and the leaders have been stable for 1.5 s. **Failover** of a partition: SIGKILL → the first "
          "acknowledgement the producers receive for it (later than %d ms after the kill: "
          "earlier ones were sent by the dying node); of a kill: the largest over the "
          "partitions the node led (Metadata just before the kill)." % (
              len(kills), PRODUCERS, PARTS, INTERVAL_MS, GRACE * 1000))
        p("")
        p("The split, from the nodes' log lines (wall clock, ms): **detection** = kill → the "
          "controller's `log L of node N is dead: node M takes it into custody` (lease expiry, "
          "the watch, and a controller election when the controller was killed); **fencing + "
          "replay** = → the custodian's `dead log L of node N fenced and replayed`; "
          "**handoff** = → the last `HANDOFF of log L ... published` of the node's partitions; "
          "**adoption** = → the last `now served here` of those partitions; **client** = → "
          "the kill's last first acknowledgement (metadata refresh and retry backoff of "
          "librdkafka; *leader known*: the part until every producer had logged the new "
          "leaders, `migrating from broker A to B` in librdkafka's debug log). The five add up "
          "to the failover.")
        p("")
        p("| kill | node | partitions | failover s | first s | detection | fencing + replay "
          "| handoff | adoption | client | (leader known) | notes |")
        p("|---|---|---|---|---|---|---|---|---|---|---|---|")
        for k in kills:
            sp = k.get("split", {})
            notes = []
            if k["was_controller"]:
                notes.append("was the controller (new one after %s s)" % fmt(sp.get("election")))
            if sp.get("replay_logged_ms") is not None:
                notes.append("replay %d ms" % sp["replay_logged_ms"])
            if k.get("timed_out"):
                notes.append("**no acknowledgement on %s within 60 s**" % k["timed_out"])
            if sp.get("missing"):
                notes.append("missing: " + "; ".join(sp["missing"]))
            p("| %d | %d | %s | %s | %s | %s | %s | %s | %s | %s | (%s) | %s |" % (
                k["kill"], k["victim"], " ".join(map(str, k["partitions"])),
                fmt(k.get("failover_max")), fmt(k.get("failover_first")), fmt(sp.get("detection")),
                fmt(sp.get("fence_replay")), fmt(sp.get("handoff")), fmt(sp.get("adoption")),
                fmt(sp.get("client")), fmt(sp.get("client_learned")), "; ".join(notes)))
        p("")
        p("| over %d kills | p50 | max |" % len(kills))
        p("|---|---|---|")
        p("| failover (s) | %s | %s |" % (fmt(s["p50"]), fmt(s["max"])))
        names = {"detection": "detection",
                 "detection_controller": "detection, kills of the controller",
                 "detection_other": "detection, other kills",
                 "election": "new controller elected, from the kill (kills of the controller)",
                 "custody_start": "custodian starts (after detection)",
                 "fence_replay": "fencing + replay",
                 "view_restore": "of which: view restored from its snapshot",
                 "wal_open": "of which: WAL opened (fenced, every segment read from its start)",
                 "replay_after_open": "of which: the rest of the replay",
                 "handoff": "handoff", "adoption": "adoption",
                 "reassignment": "handoff + adoption", "client": "client",
                 "client_learned": "of which: until every producer knew the new leaders"}
        for n, v in s["split"].items():
            p("| %s (s%s) | %s | %s |" % (names.get(n, n), ", %d kills" % v["n"]
                                          if v["n"] != len(kills) else "", fmt(v["p50"]),
                                          fmt(v["max"])))
        p("| failover of one partition (s), over all kills | %s (p50) | %s (p99) |" % (
            fmt(s["partition_p50"]), fmt(s["partition_p99"])))
        p("| SIGKILL → first acknowledgement of a record *sent* after it, every partition (s) "
          "| %s | %s |" % (fmt(s["sent_after_p50"]), fmt(s["sent_after_max"])))
        p("")
        sp50 = s["split"]
        parts = [(n, sp50[k]["p50"]) for n, k in (
            ("detection", "detection"), ("fencing + replay", "fence_replay"),
            ("handoff + adoption", "reassignment"), ("client", "client")) if k in sp50]
        if s["p50"] and parts:
            p("Where the time goes (each part's median over the kills, beside the failover's "
              "p50 of %s s): %s. Detection "
              "cannot be shorter than the lease: a node's lease expires "
              "`broker.session.timeout.ms` (%d ms) after its last keep-alive, sent every "
              "`broker.heartbeat.interval.ms` (%d ms), so %.1f to %.1f s after the kill; "
              "librdkafka asks again for the leader of a partition whose leader is down once a "
              "second, which bounds the client part by about 1 s." % (
                  fmt(s["p50"]), ", ".join("%s %s s (%.0f %%)" % (n, fmt(v), 100.0 * v / s["p50"])
                                           for n, v in parts),
                  SESSION_MS, HEARTBEAT_MS, (SESSION_MS - HEARTBEAT_MS) / 1000.0,
                  SESSION_MS / 1000.0))
            p("")
        rp = [k["rebalance_pause"] for k in kills if k.get("rebalance_pause") is not None]
        if rp:
            p("Rebalancing after each restart (planned moves, under the same load): the longest "
              "pause of a partition between two acknowledgements, p50 %s s, max %s s over the "
              "restarts." % (fmt(statistics.median(rp)), fmt(max(rp))))
            p("")
        ld, v = res.get("load", {}), res.get("verify")
        p("Load: %d records sent, %d acknowledged, %d failed, %d undelivered at the end." % (
            ld.get("sent", 0), ld.get("acked", 0), ld.get("failed", 0), ld.get("undelivered", 0)))
        if v:
            p("Read-back (every partition read whole through librdkafka from its leader): %d "
              "records, offsets contiguous, no value twice or misplaced, every one of the %d "
              "acknowledged records at its acknowledged offset: **%s**." % (
                  v["records"], v["acked"], "OK" if not v["problem_count"] else
                  "%d problem(s)" % v["problem_count"]))
        p("")
    a, b = res.get("latency_single"), res.get("latency_cluster")
    if res.get("latency_runs"):
        p("### Produce latency, 3 nodes beside one")
        p("")
        p("skload (a) of `make bench`: acks=all, %d B records at %d records/s from one producer, "
          "`linger.ms=0`, %d partitions, %g s after %g s warm-up, latency from each record's "
          "scheduled send time. The single node (no etcd) and the cluster (bootstrap: all three "
          "nodes; the producer sends each partition to its main) write their WAL to the same "
          "shared volume, one after the other in the same run%s; each run on a new topic (and "
          "the single node fresh each time)." % (
              SIZE, RATE, PARTS, LAT_DURATION, LAT_WARMUP,
              ", in the order single, cluster, (the failover runs), cluster, single, so that "
              "drift of the machine does not fall on one side only; *pooled* = the histograms "
              "of a side's runs added up" if LAT_ROUNDS == 2 else ""))
        p("")
        p("| | p50 ms | p99 ms | p99.9 ms | max ms | acknowledged |")
        p("|---|---|---|---|---|---|")
        rows = [("%s, run %d" % ("single node" if x["target"] == "single" else "3-node cluster",
                                 x["round"]), x["result"]) for x in res["latency_runs"]]
        rows += [("**single node, pooled**", a), ("**3-node cluster, pooled**", b)]
        for name, r in rows:
            if r:
                h = r["latency"]
                p("| %s | %.3f | %.3f | %.3f | %.3f | %d |" % (name, h["p50_ms"], h["p99_ms"],
                                                             h["p999_ms"], h["max_ms"], r["acked"]))
            else:
                p("| %s | no result | | | | |" % name)
        p("")
    probs = res.get("node_log_problems") or []
    if probs or res.get("anomalies"):
        p("### Anomalies")
        p("")
        for a in res.get("anomalies", []):
            p("- %s" % a)
        if probs:
            p("- WARN/ERROR lines in the nodes' logs (grouped, numbers masked; first of each):")
            p("")
            p("  | count | first line |")
            p("  |---|---|")
            for g in probs[:12]:
                p("  | %d | `%s` |" % (g["count"], g["first"][:200].replace("|", "\\|")))
        p("")
    p("### Targets")
    p("")
    p("Labels, not assertions.")
    p("")
    p("| target | measured | |")
    p("|---|---|---|")
    t = s["target"]
    p("| failover, max over kills ≤ %.0f s | %s s (p50 %s s) | %s |" % (
        TARGET_FAILOVER_S, fmt(s["max"]), fmt(s["p50"]),
        "**MISS**" if t["ok"] is False else label(t["ok"])))
    p("| produce p99, 3-node cluster / single node | %s | reported |" % fmt(s.get("p99_ratio")))
    p("")
    return "\n".join(L)


def splice_docs(section):
    path = os.path.join(ROOT, "docs", "benchmarks.md")
    with open(path) as f:
        doc = f.read()
    block = BEGIN + "\n\n" + section + "\n" + END
    if BEGIN in doc and END in doc:
        a = doc.index(BEGIN)
        b = doc.index(END) + len(END)
        doc = doc[:a] + block + doc[b:]
    else:
        doc = doc.rstrip("\n") + "\n\n## Cluster\n\n`make bench` ends with `bench/cluster.sh` " \
            "(see [bench/README.md](../bench/README.md), \"The cluster\"), which rewrites the " \
            "section below.\n\n" + block + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(doc)
    os.replace(tmp, path)


# ---------------------------------------------------------------- main

def log_problems(nodes):
    """WARN and ERROR lines of every node's log over the whole run, grouped by their text
    with numbers masked: [{"count", "level", "first": line}], most frequent first."""
    groups = {}
    for n in nodes:
        try:
            with open(n.log_path, errors="replace") as f:
                for line in f:
                    m = LINE.match(line.rstrip("\n"))
                    if not m or m.group(2) not in ("WARN", "ERROR"):
                        continue
                    key = (m.group(2), m.group(3), re.sub(r"\d+", "N", m.group(4))[:160])
                    g = groups.setdefault(key, {"count": 0, "level": m.group(2),
                                                "first": "node %d: %s" % (n.node_id, line.strip())})
                    g["count"] += 1
        except OSError:
            pass
    return sorted(groups.values(), key=lambda g: (g["level"] != "ERROR", -g["count"]))


def stop_all(nodes, timeout=10.0):
    """SIGTERM to every node at once (by PID), SIGKILL to those still running after
    `timeout` s."""
    for n in nodes:
        try:
            if n.alive:
                n.proc.send_signal(signal.SIGTERM)
        except OSError:
            pass
    deadline = time.monotonic() + timeout
    for n in nodes:
        if n.proc is None:
            continue
        try:
            n.proc.wait(max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            n.proc.send_signal(signal.SIGKILL)
            n.proc.wait()


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def main():
    for p in (SKIFFD, SKLOAD):
        if not os.access(p, os.X_OK):
            say("FAILED: %s missing (SKIFF_BUILD=%s)" % (p, BUILD))
            return 1
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        say("FAILED: confluent_kafka is missing from %s" % sys.executable)
        return 1
    subprocess.run([os.path.join(ROOT, "tools", "ganesha.sh"), "stop",
                    os.path.join(WORK, "ganesha")], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    subprocess.run([os.path.join(ROOT, "tools", "etcd.sh"), "stop", os.path.join(WORK, "etcd")],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(OUT)
    res = {"smoke": SMOKE, "machine": machine(), "software": software(),
           "load_before": loadavg(), "kills": [], "latency_runs": [],
           "config": {"kills": KILLS, "partitions": PARTS, "producers": PRODUCERS,
                      "interval_ms": INTERVAL_MS, "rate": RATE, "duration": LAT_DURATION,
                      "warmup": LAT_WARMUP, "size": SIZE, "client": CLIENT_CONF,
                      "grace_s": GRACE, "lat_rounds": LAT_ROUNDS, "session_ms": SESSION_MS,
                      "heartbeat_ms": HEARTBEAT_MS}}
    svc = Services()
    nodes = []
    rc = 0
    try:
        svc.start_etcd()
        svc.start_ganesha()
        svc.start_s3()
        res["storage"] = {
            "wal": "nfs" if svc.nfs_base else "local",
            "why": svc.nfs_why,
            "export_fs": fs_of(os.path.join(svc.ganesha_dir, "export")) if svc.nfs_base else None,
            "volume_fs": fs_of(WORK),
            "objects": "s3" if svc.s3_url else "file",
            "objects_fs": fs_of(WORK)}
        if LATENCY:
            latency_single(svc, res, 1)
        prefix = "/skiff-bench-%x/" % random.randrange(1 << 32)
        nodes = [Skiffd("node%d" % i, i, os.path.join(WORK, "n%d" % i),
                        dict(node_props(svc, prefix), **{"broker.rack": "z%d" % i}))
                 for i in (1, 2, 3)]
        say("cluster: nodes %s, WAL %s" % (" ".join(n.bootstrap for n in nodes),
                                           svc.wal_url("cluster")))
        adm = start_cluster(svc, nodes)
        logs = Logs(nodes)
        if LATENCY:
            latency_cluster(adm, nodes, res, 1)
        if KILLS > 0:
            topic = make_topic(adm, "failover", nodes, res)
            failover(adm, nodes, topic, logs, res)
            for n in nodes:
                if not n.alive:
                    raise Failed("node %d died during the failover run:\n%s" % (n.node_id, n.tail()))
        if LATENCY and LAT_ROUNDS == 2:
            # every node restarted by now (after kills, if any): settle, then measure again
            wait_for(lambda: all_leaders(adm, {n.node_id for n in nodes}), 60,
                     "every partition led by a live node")
            latency_cluster(adm, nodes, res, 2)
            logs.read()
            stop_all(nodes)
            latency_single(svc, res, 2)
    except Skipped as e:
        say("cluster section skipped: %s" % e)
        rc = 77
    except Failed as e:
        say("FAILED: %s" % e)
        res["failure"] = str(e)
        rc = 1
    except KeyboardInterrupt:
        say("interrupted")
        rc = 130
    finally:
        stop_all(nodes)
        svc.stop()
    if rc == 77:
        return rc
    res["node_log_problems"] = log_problems(nodes)
    res["load_after"] = loadavg()
    res["seconds"] = time.time() - STARTED
    s = summarize(res)
    res["summary"] = s
    if "storage" not in res:
        return rc or 1
    print(write_reports(res, s))
    say("report: %s (%.0f s in all)" % (os.path.join(OUT, "report.txt"), res["seconds"]))
    if rc == 0 and KILLS > 0 and not s["complete"]:
        say("FAILED: no kill measured")
        rc = 1
    if rc == 0 and LATENCY and not (s.get("p99_ratio") is not None):
        say("FAILED: a latency run measured nothing (logs in %s)" % OUT)
        rc = 1
    if rc == 0 and DOCS:
        splice_docs(markdown(res, s))
        say("docs/benchmarks.md: Cluster section rewritten")
    return rc


def write_reports(res, s):
    """report.txt, report.md and report.json in OUT; returns the text."""
    text = text_report(res, s)
    with open(os.path.join(OUT, "report.txt"), "w") as f:
        f.write(text + "\n")
    md = markdown(res, s)
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(md + "\n")
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump(res, f, indent=1, default=str)
    return text


def report_only(results, docs):
    """bench/cluster.py --report RESULTS [--docs]: the reports (and the docs section) again
    from a run's report.json, with the settings that run used."""
    global OUT, PARTS, PRODUCERS, INTERVAL_MS, RATE, LAT_DURATION, LAT_WARMUP, SIZE, GRACE
    global LAT_ROUNDS, SESSION_MS, HEARTBEAT_MS, SMOKE
    OUT = os.path.abspath(results)
    with open(os.path.join(OUT, "report.json")) as f:
        res = json.load(f)
    c = res["config"]
    PARTS, PRODUCERS, INTERVAL_MS = c["partitions"], c["producers"], c["interval_ms"]
    RATE, LAT_DURATION, LAT_WARMUP, SIZE = c["rate"], c["duration"], c["warmup"], c["size"]
    GRACE = c["grace_s"]
    LAT_ROUNDS = c.get("lat_rounds", LAT_ROUNDS)
    SESSION_MS = c.get("session_ms", SESSION_MS)
    HEARTBEAT_MS = c.get("heartbeat_ms", HEARTBEAT_MS)
    SMOKE = res.get("smoke", False)
    s = summarize(res)
    res["summary"] = s
    print(write_reports(res, s))
    if docs:
        splice_docs(markdown(res, s))
        say("docs/benchmarks.md: Cluster section rewritten")
    return 0


def on_signal(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if len(sys.argv) > 1:
        if sys.argv[1] != "--report" or len(sys.argv) < 3:
            sys.exit("usage: bench/cluster.py [--report RESULTS_DIR [--docs]]")
        sys.exit(report_only(sys.argv[2], "--docs" in sys.argv[3:]))
    sys.exit(main())
