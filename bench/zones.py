#!/usr/bin/python3
"""make bench, zones section: zone routing in three availability zones with an inter-zone
delay (issue 10). What a client pays in latency when its partition's main is in another
zone (the proxy path), and how many bytes cross zones per byte produced, beside Apache
Kafka with three replicas, one broker per zone, on the same machine and the same workload.

Run by bench/zones.sh (which builds first); see bench/README.md ("Zones").

  1. makes three zones with tools/zones.sh (network namespaces; nftables counters give the
     bytes each zone sends to each other zone): without root, namespaces or nftables the
     section is skipped and says why (exit 77);
  2. starts the region's services on the root namespace's loopback, which the zones reach
     at the region address: a 3-member etcd, NFS-Ganesha as the shared volume (else a
     local directory), objects on the local disk (or the S3 emulator);
  3. puts a tools/zonefwd.py (a one-way delay, BENCH_ZONES_DELAY_MS) between every zone
     and every node of another zone: every connection across zones, node to node and
     client to node, is delayed; nothing between a zone and the region is;
  4. Skiff: three nodes, one per zone (`broker.rack` = zone, `zone.routing.enable=true`);
     a topic whose mains are spread over the nodes; in each zone two skload processes
     (clients tagged `client.id=...,skiff_az=<zone>`): one producing to the partitions
     whose main is in its zone, one to the others (served by the zone's proxy), each with
     an e2e consumer in the same process and zone. Two phases on the same processes'
     layout:
       latency  fixed rate, small batches (linger.ms=1): produce latency per kind of
                partition, end-to-end latency, and the zone-to-zone bytes;
       batching fixed rate, full batches of BENCH_ZONES_BATCH_SIZE bytes (each producer
                fills one partition's batch, then moves to the next, as Kafka's default
                partitioner does with keyless records): zone-to-zone bytes per produced
                byte with realistic batching;
  5. Apache Kafka 4.3.1 (tools/kafka-ref.sh's jars): three KRaft nodes (broker and
     controller), one per zone, `broker.rack` set, RF=3, `min.insync.replicas=2`,
     acks=all, consumers with `client.rack` (KIP-392: they fetch from the replica in
     their zone), the same delay, the same two phases;
  6. the report: text, Markdown, JSON, and with BENCH_DOCS=1 the generated "Zones"
     section of docs/benchmarks.md. Targets are labels, never assertions.

Every process started here is stopped by its PID (and carries setpriv --pdeathsig KILL:
it dies with this driver); the zones are removed whatever happened (tools/zones.sh gc
removes them should this driver be SIGKILLed).

Exit status: 0 measured (whatever the figures), 1 the harness failed, 77 skipped (no zones
on this machine, or etcd missing).
"""

import datetime
import json
import os
import platform
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request

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
                    "zones")
OUT = os.path.join(WORK, "results")
PYTHON = "/usr/bin/python3" if os.access("/usr/bin/python3", os.X_OK) else sys.executable

DELAY_MS = float(env("BENCH_ZONES_DELAY_MS", "1"))
PARTS = int(env("BENCH_ZONES_PARTITIONS", "12"))
SIZE = int(env("BENCH_SIZE", "1024"))
# latency phase: records/s per zone, spread over the partitions in proportion
LAT_RATE = float(env("BENCH_ZONES_RATE", "200" if SMOKE else "300"))
LAT_LINGER = env("BENCH_ZONES_LINGER_MS", "1")
LAT_DURATION = float(env("BENCH_ZONES_DURATION", "2" if SMOKE else "30"))
WARMUP = float(env("BENCH_ZONES_WARMUP", "0.5" if SMOKE else "10"))
# batching phase: MB/s (10^6 B of record payload) per zone, full batches of BATCH_SIZE
BATCH_MBS = float(env("BENCH_ZONES_BATCH_MBS", "0.5" if SMOKE else "4"))
BATCH_SIZE = int(env("BENCH_ZONES_BATCH_SIZE", "131072"))
BATCH_LINGER = env("BENCH_ZONES_BATCH_LINGER_MS", "200")
BATCH_DURATION = float(env("BENCH_ZONES_BATCH_DURATION", "2" if SMOKE else "20"))
BATCH_WARMUP = float(env("BENCH_ZONES_BATCH_WARMUP", "0.5" if SMOKE else "5"))
# latency: small batches; batching: full batches; produce-only: the same without consumers
PHASES = env("BENCH_ZONES_PHASES", "latency batching produce-only").split()
# the latency workload, unmeasured, on every fresh cluster first (a fresh JVM runs its first
# seconds interpreted; Skiff gets the same)
PRIME = float(env("BENCH_ZONES_PRIME", "0" if SMOKE else "15"))
# each skload process also consumes its partitions in its zone (e2e); 0: producers only
CONSUMERS = env("BENCH_ZONES_CONSUMERS", "1") != "0"
# pause before each measured phase: a Skiff proxy keeps polling its mains for a partition 5 s
# after its last consumer, which must not leak into the next phase's counters
GAP = float(env("BENCH_ZONES_GAP", "0" if SMOKE else "7"))
# producer settings of every phase, both systems (the Java client's default in-flight bound:
# librdkafka's, 1000000, lets tiny requests queue without bound behind a broker that
# serves one request per connection at a time, as Kafka does)
PRODUCER_PROPS = ["max.in.flight.requests.per.connection=5"] + env("BENCH_ZONES_PRODUCER_PROPS", "").split()
SYSTEMS = env("BENCH_ZONES_SYSTEMS", "skiff" if SMOKE else "skiff kafka").split()
if env("BENCH_ZONES_KAFKA", "1") == "0":
    SYSTEMS = [s for s in SYSTEMS if s != "kafka"]
KAFKA_HEAP = env("BENCH_ZONES_KAFKA_HEAP", "-Xms1g -Xmx1g")
NFS = env("BENCH_ZONES_NFS", "1") != "0"
OBJECTS = env("BENCH_ZONES_OBJECTS", "file")
EXTRA_PROPS = env("BENCH_ZONES_PROPS", "").split()
DOCS = env("BENCH_DOCS", "0" if SMOKE else "1") == "1"
# the brokers' data, the shared volume and the objects (GBs after a full run) are deleted at
# the end; logs and results stay
KEEP = env("BENCH_ZONES_KEEP", "0") == "1"

TARGET_PROXY_P99_MS = 10.0
TARGET_CROSS_PER_BYTE = 0.002
TARGET_VS_KAFKA = 0.001
ZONES = ["a", "b", "c"]
FWD_MARK = 0x5A0F            # SO_MARK of a zonefwd's own connections (as tests' zones.py)
KAFKA_VERSION = "4.3.1"

STARTED = time.time()


def say(msg):
    sys.stderr.write("bench-zones: %s\n" % msg)
    sys.stderr.flush()


class Failed(Exception):
    pass


class Skipped(Exception):
    pass


# ---------------------------------------------------------------- processes

def launcher():
    """setpriv --pdeathsig KILL: a process we start dies with this driver, even when the
    driver is SIGKILLed (ip netns exec execs its command, so the flag reaches it)."""
    p = shutil.which("setpriv")
    return [p, "--pdeathsig", "KILL"] if p else []


_picked = set()


def pick_port():
    """A port below the ephemeral range that nothing on the host listens on (the zones
    are other namespaces, but the region's services share the host's)."""
    used = set()
    for f in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(f) as fh:
                next(fh)
                for line in fh:
                    used.add(int(line.split()[1].rsplit(":", 1)[1], 16))
        except OSError:
            pass
    for _ in range(1000):
        p = random.randrange(20000, 32000)
        if p not in used and p not in _picked:
            _picked.add(p)
            return p
    raise Failed("no free port")


def port_open(host, port, timeout=0.5):
    try:
        with socket.create_connection((host, port), timeout=timeout):
            return True
    except OSError:
        return False


def stop_proc(proc, timeout=10.0, sig=signal.SIGTERM):
    """SIGTERM (or sig) to proc by its PID, SIGKILL after timeout; reaps it."""
    if proc is None:
        return
    try:
        if proc.poll() is None:
            proc.send_signal(sig)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
    except OSError:
        pass


def wait_for(pred, timeout, what, interval=0.2):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.monotonic() > deadline:
            raise Failed("timed out after %.0f s waiting for %s" % (timeout, what))
        time.sleep(interval)


TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid):
    """User + system CPU seconds of a process (all its threads), or None."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            x = f.read().rsplit(")", 1)[1].split()
        return (int(x[11]) + int(x[12])) / float(TICK)
    except (OSError, ValueError, IndexError):
        return None


def cpu_of(groups):
    """{group: CPU seconds} of {group: [pid, ...]} (processes gone count nothing)."""
    return {g: sum(c for c in (cpu_seconds(p) for p in pids if p) if c is not None)
            for g, pids in groups.items()}


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def tail(path, n=3000):
    try:
        with open(path, errors="replace") as f:
            return f.read()[-n:]
    except OSError:
        return ""


# ---------------------------------------------------------------- zones

ZONES_SH = os.path.join(ROOT, "tools", "zones.sh")
ZONEFWD = os.path.join(ROOT, "tools", "zonefwd.py")


class Zones:
    """A set of zones from tools/zones.sh (see its header): namespaces PREFIX-a/-b/-c, the
    region PREFIX-r with the byte counters."""

    def __init__(self, prefix):
        self.prefix = prefix
        self.env = None
        self.fwds = []

    def up(self):
        subprocess.run([ZONES_SH, "gc"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=120)
        e = dict(os.environ, SKIFF_ZONES_OWNER_PID=str(os.getpid()))
        r = subprocess.run([ZONES_SH, "up", self.prefix], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300, env=e)
        err = r.stderr.decode(errors="replace").strip()
        if r.returncode == 77:
            raise Skipped("this machine cannot have zones: %s" % (err.splitlines() or ["?"])[-1])
        if r.returncode != 0:
            self.env = {}      # down() removes whatever was made
            raise Failed("tools/zones.sh up %s: exit %d: %s" % (self.prefix, r.returncode, err))
        self.env = {}
        for line in r.stdout.decode().splitlines():
            m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
            if m:
                self.env[m.group(1)] = m.group(2).strip('"')
        self.region = self.env["REGION_ADDR"]
        say("zones %s: a %s, b %s, c %s; region %s" % (
            self.prefix, self.addr("a"), self.addr("b"), self.addr("c"), self.region))

    def ns(self, z):
        return self.env["ZONE_NS_%s" % z]

    def addr(self, z):
        return self.env["ZONE_ADDR_%s" % z]

    def cmd(self, z, argv):
        return launcher() + ["ip", "netns", "exec", self.ns(z)] + list(argv)

    def regional(self, text):
        """A URL of a service on the host's loopback as a zone reaches it."""
        return re.sub(r"(?<=://)(127\.0\.0\.1|localhost)(?=[:/?]|$)", self.region, text)

    def check_region(self, urls):
        """Every zone reaches the region's services (host:port of each URL, at the region
        address): a clear failure now rather than nodes waiting for etcd later."""
        targets = sorted({(self.region, int(m.group(1))) for u in urls
                          for m in re.finditer(r"(?::|port=)(\d+)", self.regional(u))})
        code = ("import socket,sys\nbad=[]\nfor h,p in %r:\n try:\n  socket.create_connection("
                "(h,p),timeout=3).close()\n except OSError as e:\n  bad.append('%%s:%%d %%s'%%(h,p,e))\n"
                "print('; '.join(bad))\nsys.exit(1 if bad else 0)\n" % (targets,))
        for z in ZONES:
            r = subprocess.run(["ip", "netns", "exec", self.ns(z), PYTHON, "-c", code],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=60)
            if r.returncode != 0:
                raise Failed("zone %s cannot reach the region's services: %s" % (
                    z, r.stdout.decode(errors="replace").strip()))

    def counters(self):
        """{(src, dst): bytes} of the region's counters (zone->zone, zone->region, ...)."""
        r = subprocess.run([ZONES_SH, "stats", self.prefix], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        out = {}
        for line in r.stdout.decode().splitlines():
            m = re.match(r"^(\S+)->(\S+) bytes=(\d+) packets=(\d+)$", line)
            if m:
                out[(m.group(1), m.group(2))] = (int(m.group(3)), int(m.group(4)))
        if not out:
            raise Failed("tools/zones.sh stats %s printed no counter: %s" % (
                self.prefix, r.stderr.decode(errors="replace")))
        return out

    def forward(self, z, target):
        """A zonefwd in zone z towards target (host:port of another zone), interposed:
        every new connection from z to target goes through it."""
        f = ZoneFwd(self, z, target)
        self.fwds.append(f)
        f.start()
        return f

    def forwarded(self):
        """TCP payload bytes the forwarders carried (both directions, all of them): the
        application's bytes across zones, without IP and TCP headers."""
        total = 0
        for f in self.fwds:
            st = f.stats()
            if st is None:
                return None
            total += st.get("bytes_up", 0) + st.get("bytes_down", 0)
        return total

    def stop_forwarders(self):
        while self.fwds:
            self.fwds.pop().stop()

    def down(self):
        self.stop_forwarders()
        if self.env is not None:
            r = subprocess.run([ZONES_SH, "down", self.prefix], stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=120)
            if r.returncode != 0 or b"still run" in r.stdout:
                say("tools/zones.sh down %s: %s" % (self.prefix,
                                                    r.stdout.decode(errors="replace").strip()))
            self.env = None


class ZoneFwd:
    """One tools/zonefwd.py in a zone, interposed by an nftables DNAT on that zone's output
    (its own connections, marked, escape it)."""

    seq = 0

    def __init__(self, zones, z, target):
        ZoneFwd.seq += 1
        self.zones, self.z, self.target = zones, z, target
        self.dir = os.path.join(WORK, "fwd")
        os.makedirs(self.dir, exist_ok=True)
        self.control = os.path.join(self.dir, "f%d.sock" % ZoneFwd.seq)
        self.log = os.path.join(self.dir, "f%d-%s-%s.log" % (ZoneFwd.seq, z, target.replace(":", "_")))
        self.proc = None
        self.table = None
        self.port = None

    def start(self, timeout=15.0):
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(self.zones.cmd(self.z, [
                PYTHON, ZONEFWD, "--listen", "%s:0" % self.zones.addr(self.z),
                "--target", self.target, "--delay-ms", str(DELAY_MS), "--control", self.control,
                "--mark", str(FWD_MARK), "--owner-pid", str(os.getpid()), "--lifetime", "7200",
                "--max-conns", "256"]), stdout=subprocess.PIPE, stderr=log,
                stdin=subprocess.DEVNULL)
        got = {}
        t = threading.Thread(target=lambda: got.setdefault("line", self.proc.stdout.readline()),
                             daemon=True)
        t.start()
        t.join(timeout)
        line = got.get("line", b"").decode(errors="replace")
        m = re.match(r"zonefwd listening (\S+):(\d+) ", line)
        if not m:
            raise Failed("zonefwd in zone %s towards %s did not start: %r %s" % (
                self.z, self.target, line, tail(self.log)))
        self.port = int(m.group(2))
        host, port = self.target.rsplit(":", 1)
        self.table = "zfwd_%d" % self.port
        rules = ("table ip %s {\n chain out {\n  type nat hook output priority -100;"
                 " policy accept;\n  meta mark != %d ip daddr %s tcp dport %s dnat to %s:%d\n"
                 " }\n}\n") % (self.table, FWD_MARK, host, port, self.zones.addr(self.z), self.port)
        r = subprocess.run(["ip", "netns", "exec", self.zones.ns(self.z), "nft", "-f", "-"],
                           input=rules.encode(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           timeout=30)
        if r.returncode != 0:
            raise Failed("nft in zone %s: %s" % (self.z, r.stdout.decode(errors="replace")))

    def stats(self):
        try:
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(5)
            s.connect(self.control)
            s.sendall(b"stats\n")
            got = s.makefile("rb").readline()
            s.close()
            return json.loads(got)
        except (OSError, ValueError):
            return None

    def stop(self):
        if self.table and self.zones.env:
            subprocess.run(["ip", "netns", "exec", self.zones.ns(self.z), "nft", "delete", "table",
                            "ip", self.table], stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=30)
        self.table = None
        if self.proc is not None:
            stop_proc(self.proc, 5)
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None
        try:
            os.unlink(self.control)
        except OSError:
            pass


# ---------------------------------------------------------------- the region's services

class Services:
    """etcd, NFS-Ganesha, the S3 emulator on the host's loopback, started and stopped by
    their tools/ scripts (which signal only the PIDs they recorded)."""

    def __init__(self):
        self.etcd_dir = os.path.join(WORK, "etcd")
        self.ganesha_dir = os.path.join(WORK, "ganesha")
        self.s3_dir = os.path.join(WORK, "s3rver")
        self.etcd = self.ganesha = self.s3 = False
        self.endpoints = None
        self.nfs_base = None
        self.nfs_why = None
        self.s3_url = None

    def start(self):
        os.makedirs(self.etcd_dir, exist_ok=True)
        e = dict(os.environ, SKIFF_ETCD_OWNER_PID=str(os.getpid()))
        r = subprocess.run([os.path.join(ROOT, "tools", "etcd.sh"), "start", self.etcd_dir],
                           env=e, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=180)
        out = r.stdout.decode(errors="replace")
        if r.returncode == 77:
            raise Skipped("etcd is not installed: %s" % out.strip())
        self.etcd = True
        if r.returncode != 0:
            raise Failed("tools/etcd.sh start: exit %d\n%s" % (r.returncode, out[-2000:]))
        self.endpoints = subprocess.check_output(
            [os.path.join(ROOT, "tools", "etcd.sh"), "endpoints", self.etcd_dir],
            timeout=30).decode().strip()
        say("etcd %s" % self.endpoints)
        if NFS:
            os.makedirs(self.ganesha_dir, exist_ok=True)
            r = subprocess.run([os.path.join(ROOT, "tools", "ganesha.sh"), "start",
                                self.ganesha_dir, str(pick_port()), str(pick_port())],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
            out = r.stdout.decode(errors="replace")
            if r.returncode == 77:
                self.nfs_why = (out.strip().splitlines() or ["Ganesha cannot run here"])[-1]
                say("no NFS server here (%s): the shared volume is a local directory"
                    % self.nfs_why)
            elif r.returncode != 0:
                self.ganesha = True
                raise Failed("tools/ganesha.sh start: exit %d\n%s" % (r.returncode, out[-2000:]))
            else:
                self.ganesha = True
                self.nfs_base = out.strip().splitlines()[-1]
                say("NFS-Ganesha: %s" % self.nfs_base)
        else:
            self.nfs_why = "BENCH_ZONES_NFS=0"
        if OBJECTS == "s3":
            port = pick_port()
            e = dict(os.environ, SKIFF_S3RVER_OWNER_PID=str(os.getpid()))
            r = subprocess.run([os.path.join(ROOT, "tools", "s3rver.sh"), "start", self.s3_dir,
                                str(port), "bench"], env=e, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, timeout=300)
            self.s3 = r.returncode != 77
            if r.returncode != 0:
                raise Failed("tools/s3rver.sh start: exit %d (BENCH_ZONES_OBJECTS=s3)\n%s" % (
                    r.returncode, r.stdout.decode(errors="replace")[-2000:]))
            os.environ.setdefault("AWS_ACCESS_KEY_ID", "S3RVER")
            os.environ.setdefault("AWS_SECRET_ACCESS_KEY", "S3RVER")
            self.s3_url = ("s3://bench/%%s?region=us-east-1&endpoint=http://127.0.0.1:%d"
                           "&path-style=true" % port)
            say("S3 emulator on 127.0.0.1:%d" % port)

    def ganesha_pid(self):
        try:
            with open(os.path.join(self.ganesha_dir, "ganesha.pid")) as f:
                return int(f.read().split()[0])
        except (OSError, ValueError, IndexError):
            return None

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


# ---------------------------------------------------------------- brokers

class Broker:
    """A broker process in a zone: Skiff's skiffd or Kafka's JVM. stop() is SIGTERM by
    PID (SIGKILL after a while)."""

    def __init__(self, zones, z, node_id, directory):
        self.zones, self.z, self.node_id, self.dir = zones, z, node_id, directory
        self.host = zones.addr(z)
        self.port = pick_port()
        self.bootstrap = "%s:%d" % (self.host, self.port)
        self.log_path = os.path.join(directory, "broker.log")
        self.proc = None

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def launch(self, argv):
        os.makedirs(self.dir, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self.proc = subprocess.Popen(self.zones.cmd(self.z, argv), stdout=log,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         cwd=self.dir)

    def wait_listening(self, timeout, ready=None):
        deadline = time.monotonic() + timeout
        while not (port_open(self.host, self.port) and (ready is None or ready())):
            if self.proc.poll() is not None:
                raise Failed("%s exited (%s) during start-up; log %s:\n%s" % (
                    self.name(), self.proc.returncode, self.log_path, tail(self.log_path)))
            if time.monotonic() > deadline:
                raise Failed("%s does not serve on %s after %.0f s; log %s:\n%s" % (
                    self.name(), self.bootstrap, timeout, self.log_path, tail(self.log_path)))
            time.sleep(0.1)

    def name(self):
        return "node %d (zone %s)" % (self.node_id, self.z)

    def stop(self, timeout=15.0):
        stop_proc(self.proc, timeout)


class Skiffd(Broker):
    def __init__(self, zones, z, node_id, directory, props):
        super().__init__(zones, z, node_id, directory)
        self.mport = pick_port()
        self.props = {"node.id": str(node_id), "broker.rack": z,
                      "data.dir": os.path.join(directory, "data"),
                      "listeners": "PLAINTEXT://%s" % self.bootstrap,
                      "advertised.listeners": "PLAINTEXT://%s" % self.bootstrap,
                      "metrics.listener": "%s:%d" % (self.host, self.mport)}
        self.props.update(props)

    def start(self):
        argv = [SKIFFD]
        for k, v in self.props.items():
            argv += ["--override", "%s=%s" % (k, v)]
        for kv in EXTRA_PROPS:
            argv += ["--override", kv]
        self.launch(argv)
        self.wait_listening(30)

    def name(self):
        return "skiffd node %d (zone %s)" % (self.node_id, self.z)

    def metrics(self):
        """{name{labels}: value} of /metrics (counters we read), or {} when it fails."""
        try:
            with urllib.request.urlopen("http://%s:%d/metrics" % (self.host, self.mport),
                                        timeout=5) as r:
                text = r.read().decode(errors="replace")
        except OSError:
            return {}
        out = {}
        for line in text.splitlines():
            if line.startswith("#") or not line.strip():
                continue
            k, _, v = line.rpartition(" ")
            try:
                out[k] = float(v)
            except ValueError:
                pass
        return out


def stop_all(nodes, timeout):
    """SIGTERM to every node at once (by PID), SIGKILL to those still running after timeout
    (a KRaft quorum stopped one node at a time loses its majority half way)."""
    for n in nodes:
        if n.alive:
            try:
                n.proc.send_signal(signal.SIGTERM)
            except OSError:
                pass
    deadline = time.monotonic() + timeout
    for n in nodes:
        if n.proc is not None:
            stop_proc(n.proc, max(0.1, deadline - time.monotonic()))


def kafka_classpath():
    r = subprocess.run([os.path.join(ROOT, "tools", "kafka-ref.sh"), "classpath"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=1800)
    if r.returncode != 0:
        raise Failed("tools/kafka-ref.sh classpath (Kafka %s from Maven Central): %s" % (
            KAFKA_VERSION, r.stderr.decode(errors="replace")[-2000:]))
    return r.stdout.decode().strip()


class KafkaNode(Broker):
    """One KRaft node, broker and controller, in a zone."""

    def __init__(self, zones, z, node_id, directory):
        super().__init__(zones, z, node_id, directory)
        self.cport = pick_port()

    def name(self):
        return "Kafka node %d (zone %s)" % (self.node_id, self.z)

    def configure(self, voters, cluster_id, classpath):
        self.classpath = classpath
        self.props_path = os.path.join(self.dir, "server.properties")
        os.makedirs(self.dir, exist_ok=True)
        lines = [
            "# generated by bench/zones.py",
            "process.roles=broker,controller",
            "node.id=%d" % self.node_id,
            "controller.quorum.voters=%s" % voters,
            "listeners=PLAINTEXT://%s,CONTROLLER://%s:%d" % (self.bootstrap, self.host, self.cport),
            "advertised.listeners=PLAINTEXT://%s" % self.bootstrap,
            "controller.listener.names=CONTROLLER",
            "inter.broker.listener.name=PLAINTEXT",
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "log.dirs=%s" % os.path.join(self.dir, "data"),
            "broker.rack=%s" % self.z,
            "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector",
            "num.partitions=1",
            "auto.create.topics.enable=false",
            "default.replication.factor=3",
            "min.insync.replicas=2",
            "offsets.topic.replication.factor=3",
            "offsets.topic.num.partitions=6",
            "transaction.state.log.replication.factor=3",
            "transaction.state.log.min.isr=2",
            "group.initial.rebalance.delay.ms=0",
        ]
        with open(self.props_path, "w") as f:
            f.write("\n".join(lines) + "\n")
        java = ["java"] + KAFKA_HEAP.split() + [
            "-XX:+UseG1GC", "-Djava.awt.headless=true",
            "-Dorg.slf4j.simpleLogger.defaultLogLevel=info",
            "-Dorg.slf4j.simpleLogger.showDateTime=true", "-cp", classpath]
        self.java = java
        r = subprocess.run(java + ["kafka.tools.StorageTool", "format", "-t", cluster_id, "-c",
                                   self.props_path], stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=180)
        if r.returncode != 0:
            raise Failed("formatting %s: %s" % (self.name(), r.stdout.decode(errors="replace")[-2000:]))

    def launch_node(self):
        self.launch(self.java + ["kafka.Kafka", self.props_path])

    def ready(self):
        return "Kafka Server started" in tail(self.log_path, 1 << 30)


# ---------------------------------------------------------------- asking a cluster

class FileLogger:
    def __init__(self, path):
        self.path = path

    def log(self, level, fmt, *args):
        with open(self.path, "a") as f:
            f.write("%.3f %s\n" % (time.time(), fmt % args if args else fmt))


def admin(bootstrap):
    from confluent_kafka.admin import AdminClient
    return AdminClient({"bootstrap.servers": bootstrap, "socket.connection.setup.timeout.ms": 3000,
                        "client.id": "bench-zones-admin",
                        "logger": FileLogger(os.path.join(OUT, "admin.log"))})


def metadata(adm, topic=None):
    from confluent_kafka import KafkaException
    deadline = time.monotonic() + 20
    while True:
        try:
            return adm.list_topics(topic=topic, timeout=5)
        except KafkaException as e:
            if time.monotonic() > deadline:
                raise Failed("Metadata: %s" % e)
            time.sleep(0.2)


def partitions_of(adm, topic):
    """{partition: (leader, replicas, isrs)} as Metadata of a client of no zone says."""
    md = metadata(adm, topic)
    t = md.topics.get(topic)
    if t is None or t.error is not None:
        return {}
    return {p: (pm.leader, list(pm.replicas), list(pm.isrs)) for p, pm in t.partitions.items()}


def spread(adm, topic, ids, parts):
    """{node: [partitions it leads]} once every partition has a leader among ids and each
    node leads its share; else None."""
    ps = partitions_of(adm, topic)
    if len(ps) != parts or any(v[0] not in ids for v in ps.values()):
        return None
    by = {n: sorted(p for p, v in ps.items() if v[0] == n) for n in ids}
    lo, hi = parts // len(ids), -(-parts // len(ids))
    return by if all(lo <= len(v) <= hi for v in by.values()) else None


def create_topic(adm, topic, parts, rf, config=None):
    from confluent_kafka.admin import NewTopic
    fs = adm.create_topics([NewTopic(topic, parts, rf, config=config or {})], request_timeout=30)
    try:
        fs[topic].result(60)
    except Exception as e:  # noqa: BLE001
        raise Failed("CreateTopics %s: %s" % (topic, e))


def unserved(bootstrap, topic, parts, timeout=15.0):
    """Partitions of topic that do not acknowledge a record within timeout: {p: error}."""
    from confluent_kafka import Producer
    errs = {}
    pr = Producer({"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 0,
                   "client.id": "bench-zones-probe", "message.timeout.ms": int(timeout * 1000),
                   "logger": FileLogger(os.path.join(OUT, "admin.log"))})

    def done(err, msg):
        if err is not None:
            errs[msg.partition()] = str(err)
    for p in range(parts):
        pr.produce(topic, value=b"probe", partition=p, on_delivery=done)
    left = pr.flush(timeout + 10)
    if left:
        errs[-1] = "%d probes undelivered" % left
    return errs


# ---------------------------------------------------------------- the workload

def plan(mains):
    """Per zone: ("local", partitions whose leader (main) is in the zone) and ("remote",
    the others), each with its share of the zone's rate."""
    out = []
    for z in ZONES:
        local = sorted(p for p, zz in mains.items() if zz == z)
        remote = sorted(p for p, zz in mains.items() if zz != z)
        for kind, ps in (("local", local), ("remote", remote)):
            if ps:
                out.append({"zone": z, "kind": kind, "partitions": ps,
                            "share": len(ps) / float(len(mains))})
    return out


def phase_params(phase):
    if phase == "prime":
        return {"rate_per_zone": LAT_RATE, "linger_ms": LAT_LINGER, "batch_size": None,
                "sticky": 1, "warmup": 0, "duration": PRIME}
    if phase == "latency":
        return {"rate_per_zone": LAT_RATE, "linger_ms": LAT_LINGER, "batch_size": None,
                "sticky": 1, "warmup": WARMUP, "duration": LAT_DURATION}
    per_zone = BATCH_MBS * 1e6 / SIZE
    # records that fill one batch: value + up to 16 B of record framing, 61 B of batch
    # header; batch.num.messages = that count makes librdkafka send the batch as soon as
    # its last record is queued (batch.size alone would leave it to linger.ms)
    sticky = max(1, (BATCH_SIZE - 61) // (SIZE + 16))
    return {"rate_per_zone": per_zone, "linger_ms": BATCH_LINGER, "batch_size": BATCH_SIZE,
            "sticky": sticky, "warmup": BATCH_WARMUP, "duration": BATCH_DURATION,
            "consumers": phase != "produce-only"}


def run_phase(system, phase, zones, boots, mains, topic, snapshot_extra=None, cpu_groups=None):
    """Six skload processes (local and remote in each zone), all at once; the zone-to-zone
    counters around them. Returns the phase's record."""
    prm = phase_params(phase)
    jobs = plan(mains)
    procs = []
    bound = prm["warmup"] + prm["duration"] + 90
    if phase != "prime" and GAP > 0:
        time.sleep(GAP)
    before = zones.counters()
    fwd0 = zones.forwarded()
    groups = dict(cpu_groups() if cpu_groups else {},
                  forwarders=[f.proc.pid for f in zones.fwds if f.proc])
    cpu0 = cpu_of(groups)
    extra0 = snapshot_extra() if snapshot_extra else None
    t0 = time.time()
    load0 = loadavg()
    say("%s %s: %s" % (system, phase, ", ".join(
        "%s/%s %s %.0f rec/s" % (j["zone"], j["kind"], ",".join(map(str, j["partitions"])),
                                 prm["rate_per_zone"] * j["share"]) for j in jobs)))
    try:
        for j in jobs:
            name = "%s-%s-%s-%s" % (system, phase, j["zone"], j["kind"])
            rate = prm["rate_per_zone"] * j["share"]
            cmd = [SKLOAD, "-b", boots[j["zone"]], "-t", topic, "--no-create", "-s", str(SIZE),
                   "-a", "all", "--warmup", str(prm["warmup"]), "-d", str(prm["duration"]),
                   "-P", "1", "-r", "%.3f" % rate, "--linger-ms", str(prm["linger_ms"]),
                   "--partitions-list", ",".join(map(str, j["partitions"])),
                   "--sticky", str(prm["sticky"]), "--max-inflight", "20000",
                   "--max-behind", "10",
                   "--client-id", "bench-%s-%s,skiff_az=%s" % (j["kind"], phase, j["zone"]),
                   "--json", "--buckets", "--progress", "5"]
            for kv in PRODUCER_PROPS:
                cmd += ["-X", kv]
            if CONSUMERS and prm.get("consumers", True):
                cmd += ["--e2e", "--e2e-timeout", "15", "-C", "client.rack=%s" % j["zone"]]
            if prm["batch_size"]:
                cmd += ["--batch-size", str(prm["batch_size"]),
                        "-X", "batch.num.messages=%d" % prm["sticky"]]
            o = open(os.path.join(OUT, name + ".json"), "wb")
            e = open(os.path.join(OUT, name + ".log"), "wb")
            p = subprocess.Popen(zones.cmd(j["zone"], cmd), stdout=o, stderr=e,
                                 stdin=subprocess.DEVNULL)
            o.close()
            e.close()
            procs.append((j, name, p))
        deadline = time.monotonic() + bound
        for j, name, p in procs:
            try:
                p.wait(max(1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                say("%s still running after %.0f s: stopped" % (name, bound))
                stop_proc(p, 20, signal.SIGINT)
    finally:
        for _, _, p in procs:
            stop_proc(p, 5, signal.SIGKILL)
    after = zones.counters()
    cpu1 = cpu_of(groups)
    fwd1 = zones.forwarded()
    extra1 = snapshot_extra() if snapshot_extra else None
    runs = []
    for j, name, p in procs:
        r = None
        try:
            with open(os.path.join(OUT, name + ".json")) as f:
                r = json.loads(f.read().strip().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            pass
        runs.append(dict(j, name=name, rate=prm["rate_per_zone"] * j["share"], result=r,
                         exit=p.returncode))
    delta = {"%s->%s" % k: [after[k][0] - before.get(k, (0, 0))[0],
                            after[k][1] - before.get(k, (0, 0))[1]] for k in after}
    return {"system": system, "phase": phase, "params": prm, "topic": topic, "runs": runs,
            "cpu_s": {g: cpu1[g] - cpu0[g] for g in groups},
            "counters": delta, "forwarded": None if fwd0 is None or fwd1 is None else fwd1 - fwd0,
            "seconds": time.time() - t0, "load_before": load0,
            "load_after": loadavg(), "extra_before": extra0, "extra_after": extra1}


# ---------------------------------------------------------------- the systems

def skiff_system(zones, svc, res):
    prefix = "/skiff-bench-zones-%x/" % random.randrange(1 << 32)
    common = {"etcd.endpoints": zones.regional(svc.endpoints), "etcd.prefix": prefix,
              "wal.url": zones.regional(svc.wal_url("skiff")),
              "objects.url": zones.regional(svc.objects_url("skiff")),
              "zone.routing.enable": "true",
              "offsets.topic.num.partitions": "6",
              "leader.imbalance.check.interval.seconds": "2",
              "group.initial.rebalance.delay.ms": "0"}
    nodes = [Skiffd(zones, z, i + 1, os.path.join(WORK, "skiff", "n%d" % (i + 1)), common)
             for i, z in enumerate(ZONES)]
    res["skiff_props"] = dict(common, **{"broker.rack": "<zone>", "node.id": "1..3"})
    try:
        for z in ZONES:
            for n in nodes:
                if n.z != z:
                    zones.forward(z, n.bootstrap)
        for n in nodes:
            n.start()
        say("skiff: nodes %s" % " ".join("%d@%s" % (n.node_id, n.bootstrap) for n in nodes))
        adm = admin(",".join(n.bootstrap for n in nodes))
        ids = {n.node_id for n in nodes}
        wait_for(lambda: {b for b in metadata(adm).brokers} == ids, 60, "3 registered nodes")
        wait_for(lambda: spread(adm, "__consumer_offsets", ids, 6), 90,
                 "__consumer_offsets spread over the 3 nodes")
        topic = None
        for attempt in range(1, 4):
            t = "zones-%d" % attempt
            create_topic(adm, t, PARTS, 1)
            try:
                wait_for(lambda: spread(adm, t, ids, PARTS), 60, "%s spread over the nodes" % t)
            except Failed as e:
                say(str(e))
            errs = unserved(",".join(n.bootstrap for n in nodes), t, PARTS)
            if not errs:
                topic = t
                break
            msg = "new topic %s: partitions %s acknowledged nothing within 15 s (%s)" % (
                t, sorted(errs), "; ".join(sorted(set(errs.values()))))
            say(msg)
            res.setdefault("anomalies", []).append(msg)
        if topic is None:
            raise Failed("no Skiff topic with every partition served after 3 attempts")
        zone_of = {n.node_id: n.z for n in nodes}

        def mains_now():
            return {p: zone_of.get(v[0]) for p, v in partitions_of(adm, topic).items()}
        mains = mains_now()
        boots = {n.z: n.bootstrap for n in nodes}

        def snap():
            out = {}
            for n in nodes:
                m = n.metrics()
                out[n.node_id] = {k: v for k, v in m.items() if k.startswith((
                    "skiff_produced_batches_total", "skiff_produced_bytes_total",
                    "skiff_fetched_bytes_total", "skiff_requests_total"))}
            return out
        def cpus():
            return {"brokers": [n.proc.pid for n in nodes if n.proc], "nfs": [svc.ganesha_pid()]}
        for phase in (["prime"] if PRIME > 0 else []) + PHASES:
            ph = run_phase("skiff", phase, zones, boots, mains, topic, snap, cpus)
            if phase == "prime":
                res.setdefault("primes", []).append(prime_record(ph))
                continue
            for n in nodes:
                if not n.alive:
                    raise Failed("%s died during the %s phase:\n%s" % (n.name(), phase,
                                                                        tail(n.log_path)))
            after = mains_now()
            if after != mains:
                msg = "skiff %s: mains moved during the phase: %s -> %s" % (phase, mains, after)
                say(msg)
                res.setdefault("anomalies", []).append(msg)
                mains = after
            ph["mains"] = {str(p): z for p, z in sorted(mains.items())}
            res["phases"].append(ph)
            summarize_phase(ph)
    finally:
        upto = log_sizes(nodes)
        stop_all(nodes, 15)
        zones.stop_forwarders()
        res["skiff_log_problems"] = log_problems(nodes)
        res["skiff_log_problems_before_stop"] = len(log_problems(nodes, upto))


def kafka_system(zones, res):
    classpath = kafka_classpath()
    nodes = [KafkaNode(zones, z, i + 1, os.path.join(WORK, "kafka", "n%d" % (i + 1)))
             for i, z in enumerate(ZONES)]
    voters = ",".join("%d@%s:%d" % (n.node_id, n.host, n.cport) for n in nodes)
    import base64
    cid = base64.urlsafe_b64encode(os.urandom(16)).decode().rstrip("=")
    try:
        for n in nodes:
            n.configure(voters, cid, classpath)
        for z in ZONES:
            for n in nodes:
                if n.z != z:
                    zones.forward(z, n.bootstrap)
                    zones.forward(z, "%s:%d" % (n.host, n.cport))
        for n in nodes:
            n.launch_node()
        for n in nodes:
            n.wait_listening(180, n.ready)
        say("kafka: nodes %s" % " ".join("%d@%s" % (n.node_id, n.bootstrap) for n in nodes))
        adm = admin(",".join(n.bootstrap for n in nodes))
        ids = {n.node_id for n in nodes}
        wait_for(lambda: {b for b in metadata(adm).brokers} == ids, 120, "3 Kafka brokers")
        topic = "zones-kafka"
        create_topic(adm, topic, PARTS, 3, {"min.insync.replicas": "2"})

        def full_isr():
            ps = partitions_of(adm, topic)
            return len(ps) == PARTS and all(v[0] in ids and len(v[2]) == 3 for v in ps.values())
        wait_for(full_isr, 60, "every partition of %s with 3 in-sync replicas" % topic)
        errs = unserved(",".join(n.bootstrap for n in nodes), topic, PARTS)
        if errs:
            raise Failed("Kafka topic %s: partitions %s acknowledged nothing: %s" % (
                topic, sorted(errs), errs))
        zone_of = {n.node_id: n.z for n in nodes}
        ps = partitions_of(adm, topic)
        res["kafka_replicas"] = {str(p): [zone_of.get(r) for r in v[1]] for p, v in sorted(ps.items())}

        def mains_now():
            return {p: zone_of.get(v[0]) for p, v in partitions_of(adm, topic).items()}
        mains = mains_now()
        boots = {n.z: n.bootstrap for n in nodes}
        def cpus():
            return {"brokers": [n.proc.pid for n in nodes if n.proc]}
        for phase in (["prime"] if PRIME > 0 else []) + PHASES:
            ph = run_phase("kafka", phase, zones, boots, mains, topic, None, cpus)
            if phase == "prime":
                res.setdefault("primes", []).append(prime_record(ph))
                continue
            for n in nodes:
                if not n.alive:
                    raise Failed("%s died during the %s phase:\n%s" % (n.name(), phase,
                                                                        tail(n.log_path)))
            after = mains_now()
            if after != mains:
                msg = "kafka %s: leaders moved during the phase: %s -> %s" % (phase, mains, after)
                say(msg)
                res.setdefault("anomalies", []).append(msg)
                mains = after
            ph["mains"] = {str(p): z for p, z in sorted(mains.items())}
            res["phases"].append(ph)
            summarize_phase(ph)
    finally:
        upto = log_sizes(nodes)
        stop_all(nodes, 30)
        zones.stop_forwarders()
        res["kafka_log_problems"] = log_problems(nodes, upto)


# ---------------------------------------------------------------- figures

def pooled(results, key="latency"):
    """Percentiles of the runs' histograms together (nearest rank over the summed buckets,
    upper edges, as skload reports them)."""
    results = [r for r in results if r]
    if not results:
        return None
    buckets = {}
    mx = 0.0
    for r in results:
        h = r if key == "latency" else r.get("e2e") or {}
        for up, c in h.get("latency_buckets") or []:
            buckets[up] = buckets.get(up, 0) + c
        mx = max(mx, (h.get("latency") or {}).get("max_ms", 0.0))
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
    return {"count": total, "p50_ms": min(mx, q(0.5)), "p90_ms": min(mx, q(0.9)),
            "p99_ms": min(mx, q(0.99)), "p999_ms": min(mx, q(0.999)), "max_ms": mx}


def summarize_phase(ph):
    """Adds ph["summary"]: pooled latencies per kind, bytes across zones per produced byte."""
    s = {"kinds": {}}
    for kind in ("local", "remote"):
        rs = [x["result"] for x in ph["runs"] if x["kind"] == kind]
        ok = [r for r in rs if r]
        s["kinds"][kind] = {
            "produce": pooled(ok), "e2e": pooled(ok, "e2e"),
            "acked": sum(r["acked"] for r in ok), "failed": sum(r["failed"] for r in ok),
            "unsent": sum(r.get("unsent", 0) for r in ok),
            "consumed": sum((r.get("e2e") or {}).get("consumed", 0) for r in ok),
            "fell_behind": any(r.get("fell_behind") for r in ok),
            "missing": len(rs) - len(ok),
            "errors": merge_errors(ok)}
    ok = [x["result"] for x in ph["runs"] if x["result"]]
    produced = sum(r["acked"] for r in ok) * SIZE
    c = ph["counters"]
    cross = sum(c["%s->%s" % (a, b)][0] for a in ZONES for b in ZONES if a != b)
    packets = sum(c["%s->%s" % (a, b)][1] for a in ZONES for b in ZONES if a != b)
    region = sum(c["%s->region" % a][0] + c["region->%s" % a][0] for a in ZONES)
    s.update({"produced_bytes": produced, "cross_bytes": cross, "cross_packets": packets,
              "cross_app_bytes": ph.get("forwarded"),
              "region_bytes": region,
              "cross_per_byte": cross / float(produced) if produced else None,
              "matrix": {a: {b: c["%s->%s" % (a, b)][0] for b in ZONES if b != a} for a in ZONES}})
    cpu = dict(ph.get("cpu_s") or {})
    cpu["clients"] = sum(r.get("client_cpu_cores", 0) * (r.get("duration_s", 0) or 0) for r in ok)
    s["cpu_cores"] = {g: v / ph["seconds"] for g, v in cpu.items() if ph.get("seconds")}
    eb, ea = ph.get("extra_before"), ph.get("extra_after")
    if eb and ea:
        def total(snap, name):
            return sum(v for node in snap.values() for k, v in node.items() if k == name)
        batches = total(ea, "skiff_produced_batches_total") - total(eb, "skiff_produced_batches_total")
        s["batches"] = batches
        s["batch_bytes_mean"] = ((total(ea, "skiff_produced_bytes_total")
                                  - total(eb, "skiff_produced_bytes_total")) / batches
                                 if batches else None)
        s["cross_per_batch"] = cross / float(batches) if batches else None
    ph["summary"] = s
    return s


def prime_record(ph):
    """What the unmeasured priming run did: acknowledged, failed, p99 of each process."""
    return {"system": ph["system"], "seconds": ph["seconds"], "runs": [
        {"zone": x["zone"], "kind": x["kind"], "acked": x["result"] and x["result"]["acked"],
         "failed": x["result"] and x["result"]["failed"],
         "p99_ms": x["result"] and x["result"]["latency"]["p99_ms"]} for x in ph["runs"]]}


def merge_errors(rs):
    out = {}
    for r in rs:
        for k, v in (r.get("errors") or {}).items():
            out[k] = out.get(k, 0) + v
    return out


def phase_of(res, system, phase):
    for ph in res.get("phases", []):
        if ph["system"] == system and ph["phase"] == phase:
            return ph
    return None


def overall(res):
    """The figures the targets are judged on."""
    o = {}
    for phase in PHASES:
        sk, ka = phase_of(res, "skiff", phase), phase_of(res, "kafka", phase)
        sx = sk["summary"]["cross_per_byte"] if sk else None
        kx = ka["summary"]["cross_per_byte"] if ka else None
        o[phase] = {"skiff": sx, "kafka": kx,
                    "ratio": sx / kx if sx is not None and kx else None}
    lat = phase_of(res, "skiff", "latency")
    proxy = lat["summary"]["kinds"]["remote"]["produce"] if lat else None
    byte_phase = "batching" if "batching" in PHASES else (PHASES[0] if PHASES else None)
    t = []
    p99 = proxy["p99_ms"] if proxy else None
    t.append({"name": "produce p99, proxy path (latency phase)", "target": "<= %g ms" % TARGET_PROXY_P99_MS,
              "value": None if p99 is None else "%.2f ms" % p99,
              "ok": None if p99 is None else p99 <= TARGET_PROXY_P99_MS})
    x = o.get(byte_phase, {}).get("skiff")
    t.append({"name": "Skiff cross-zone bytes per produced byte (%s phase)" % byte_phase,
              "target": "<= %g" % TARGET_CROSS_PER_BYTE,
              "value": None if x is None else "%.5f" % x,
              "ok": None if x is None else x <= TARGET_CROSS_PER_BYTE})
    r = o.get(byte_phase, {}).get("ratio")
    t.append({"name": "Skiff / Kafka cross-zone bytes (%s phase)" % byte_phase,
              "target": "<= 1/%d" % round(1 / TARGET_VS_KAFKA),
              "value": None if r is None else "%.5f (1/%.0f)" % (r, 1 / r if r else float("inf")),
              "ok": None if r is None else r <= TARGET_VS_KAFKA})
    return {"per_phase": o, "targets": t, "byte_phase": byte_phase}


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
    dirty = [l[3:] for l in subprocess.run(
        ["git", "-C", ROOT, "status", "--porcelain", "--", "broker", "cluster", "wal", "s3sink",
         "rpc", "proto", "proxy", "common"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        timeout=30).stdout.decode().splitlines() if l.strip()]
    try:
        import confluent_kafka
        lib = confluent_kafka.libversion()[0]
    except ImportError:
        lib = "?"
    return {"commit": head, "uncommitted": dirty, "librdkafka": lib,
            "kafka": KAFKA_VERSION if "kafka" in SYSTEMS else None}


def fs_of(path):
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


LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z (\w+)\s+\[([\w-]+)\] (.*)$")
# slf4j-simple as tools/kafka-ref.sh runs Kafka: "MS [thread] LEVEL logger - message"
KLINE = re.compile(r"^(\d+) \[([^\]]*)\] (\w+) (\S+) - (.*)$")


def log_sizes(nodes):
    out = {}
    for n in nodes:
        try:
            out[n.node_id] = os.path.getsize(n.log_path)
        except OSError:
            pass
    return out


def log_problems(nodes, upto=None):
    """WARN and ERROR lines of the nodes' logs (up to upto[node id] bytes: before they were
    stopped), grouped by their text with numbers masked."""
    groups = {}
    for n in nodes:
        try:
            with open(n.log_path, errors="replace") as f:
                text = f.read()
        except OSError:
            continue
        if upto and n.node_id in upto:
            text = text[:upto[n.node_id]]
        for line in text.splitlines():
            m = LINE.match(line)
            if m:
                level, where, msg = m.group(2), m.group(3), m.group(4)
            else:
                k = KLINE.match(line)
                if not k:
                    continue
                level, where, msg = k.group(3), k.group(4), k.group(5)
            if level not in ("WARN", "ERROR"):
                continue
            key = (level, where, re.sub(r"\d+", "N", msg)[:160])
            g = groups.setdefault(key, {"count": 0, "level": level, "nodes": [],
                                        "first": "node %d: %s" % (n.node_id, line.strip())})
            g["count"] += 1
            if n.node_id not in g["nodes"]:
                g["nodes"].append(n.node_id)
    return sorted(groups.values(), key=lambda g: (g["level"] != "ERROR", -g["count"]))


def fmt(x, nd=2):
    return "n/a" if x is None else "%.*f" % (nd, x)


def ms(x):
    if x is None:
        return "n/a"
    return "%.2f" % x if x < 100 else "%.0f" % x


def label(ok):
    return "n/a" if ok is None else ("PASS" if ok else "FAIL")


def storage_text(res):
    st = res.get("storage", {})
    if st.get("wal") == "nfs":
        w = ("NFS-Ganesha on the host's loopback (tools/ganesha.sh, NFSv3 over TCP, VFS FSAL, "
             "export on %s), reached from the zones at the region address through libnfs"
             % st.get("export_fs", "?"))
    else:
        w = "a local directory (%s; %s)" % (st.get("volume_fs", "?"), st.get("why") or "no NFS")
    o = ("the S3 emulator (tools/s3rver.sh)" if st.get("objects") == "s3"
         else "the local disk (`file://`, %s)" % st.get("objects_fs", "?"))
    return w, o


def workload_text(phase, res):
    c = res["config"]
    if phase == "latency":
        return ("fixed rate, %g records/s of %d B per zone (%g MB/s in all), linger.ms=%s: "
                "about one record per batch; %g s measured after %g s warm-up" % (
                    c["lat_rate"], c["size"], c["lat_rate"] * 3 * c["size"] / 1e6,
                    c["lat_linger"], c["lat_duration"], c["warmup"]))
    p = res.get("config_batch") or phase_params("batching")
    return ("fixed rate, %g MB/s of %d B records per zone (%g MB/s in all); each producer "
            "sends %d records to a partition, then moves to the next (as Kafka's default "
            "partitioner does with keyless records), in batches of those %d records "
            "(batch.size=%d, batch.num.messages=%d: a batch leaves as soon as it is full; "
            "linger.ms=%s is never reached), %s; %g s measured after %g s warm-up" % (
                c["batch_mbs"], c["size"], c["batch_mbs"] * 3, p["sticky"], p["sticky"],
                c["batch_size"], p["sticky"], c["batch_linger"],
                "no consumers" if phase == "produce-only" else "with the consumers",
                c["batch_duration"], c["batch_warmup"]))


CPU_NAMES = (("brokers", "brokers"), ("nfs", "NFS server"), ("forwarders", "zonefwd"),
             ("clients", "skload (measured part)"))


def cpu_text(s):
    c = s.get("cpu_cores") or {}
    return ", ".join("%s %.2f" % (name, c[g]) for g, name in CPU_NAMES if g in c)


def phase_rows(ph):
    """Rows of (label, produce latency dict, e2e dict, acked, failed) for one phase."""
    rows = []
    for kind in ("local", "remote"):
        k = ph["summary"]["kinds"][kind]
        for x in ph["runs"]:
            if x["kind"] != kind:
                continue
            r = x["result"]
            rows.append(("%s, zone %s" % (kind, x["zone"]), r and r["latency"],
                         r and (r.get("e2e") or {}).get("latency"), r and r["acked"],
                         r and r["failed"]))
        rows.append(("**%s, pooled**" % kind, k["produce"], k["e2e"], k["acked"], k["failed"]))
    return rows


KIND_TEXT = {
    "skiff": {"local": "main in the client's zone", "remote": "main in another zone: the zone's proxy"},
    "kafka": {"local": "leader in the client's zone", "remote": "leader in another zone"},
}


def text_report(res, o):
    L = []
    p = L.append
    m, sw = res["machine"], res["software"]
    p("Skiff zone-routing benchmark%s: %d cores (%s), %.1f GiB, %s, kernel %s; load %s -> %s" % (
        " (SMOKE: tiny sizes, figures meaningless)" if res.get("smoke") else "", m["cores"],
        m["cpu"], m["mem_gib"], m["os"], m["kernel"], res["load_before"], res.get("load_after", "?")))
    p("skiffd at %s%s; librdkafka %s%s" % (
        sw["commit"], " + uncommitted changes in %s" % ", ".join(sw["uncommitted"][:8])
        if sw["uncommitted"] else "", sw["librdkafka"],
        "; Apache Kafka %s" % sw["kafka"] if sw.get("kafka") else ""))
    w, ob = storage_text(res)
    p("zones a, b, c (network namespaces), %g ms one-way delay on every zone-to-zone "
      "connection (tools/zonefwd.py); shared volume: %s; objects: %s; etcd: 3 members in the region"
      % (res["config"]["delay_ms"], w, ob))
    for phase in PHASES:
        p("")
        p("== %s phase: %s" % (phase, workload_text(phase, res)))
        for system in SYSTEMS:
            ph = phase_of(res, system, phase)
            if not ph:
                continue
            s = ph["summary"]
            p("  %s (load %s -> %s, %.0f s)" % (system, ph["load_before"], ph["load_after"],
                                                ph["seconds"]))
            for name, lat, e2e, acked, failed in phase_rows(ph):
                name = name.replace("*", "")
                if lat:
                    p("    %-18s produce p50 %7s p99 %7s p99.9 %7s max %7s | e2e p50 %7s p99 %7s"
                      " | %s acked, %s failed" % (
                          name, ms(lat["p50_ms"]), ms(lat["p99_ms"]), ms(lat["p999_ms"]),
                          ms(lat["max_ms"]), ms(e2e and e2e["p50_ms"]), ms(e2e and e2e["p99_ms"]),
                          acked, failed))
                else:
                    p("    %-18s no result" % name)
            p("    produced %.1f MB; zone-to-zone %.3f MB (%d packets): %.5f per produced byte%s"
              % (s["produced_bytes"] / 1e6, s["cross_bytes"] / 1e6, s["cross_packets"],
                 s["cross_per_byte"] or 0,
                 "; %d batches (%.0f B mean), %.0f B across zones per batch" % (
                     s["batches"], s["batch_bytes_mean"] or 0, s["cross_per_batch"] or 0)
                 if s.get("batches") else ""))
            p("    zone -> zone bytes: %s" % ", ".join(
                "%s->%s %d" % (a, b, s["matrix"][a][b]) for a in ZONES for b in ZONES if a != b))
            if s.get("cross_app_bytes") is not None:
                p("    of which TCP payload (the forwarders' count): %.3f MB" % (s["cross_app_bytes"] / 1e6))
            p("    CPU, cores over the phase: %s" % cpu_text(s))
            for kind in ("local", "remote"):
                k = s["kinds"][kind]
                if k["errors"] or k["unsent"] or k["fell_behind"] or k["missing"]:
                    p("    %s: errors %s, unsent %d%s%s" % (
                        kind, k["errors"], k["unsent"], ", FELL BEHIND" if k["fell_behind"] else "",
                        ", %d runs without result" % k["missing"] if k["missing"] else ""))
    note = fill_note(res)
    if note:
        p("")
        p(note)
    p("")
    for phase, v in o["per_phase"].items():
        if v["ratio"] is not None:
            p("%s phase: cross-zone bytes per produced byte, Skiff %.5f, Kafka %.3f: Skiff/Kafka %.5f"
              % (phase, v["skiff"], v["kafka"], v["ratio"]))
    p("")
    p("Targets (labels, not assertions)")
    for t in o["targets"]:
        p("  %-58s %-22s %-10s %s" % (t["name"], t["value"] or "n/a", t["target"], label(t["ok"])))
    for a in res.get("anomalies", []):
        p("anomaly: %s" % a)
    probs = res.get("skiff_log_problems") or []
    if probs:
        p("")
        p("WARN/ERROR lines of the Skiff nodes' logs (grouped):")
        for g in probs[:20]:
            p("  %5d x %s" % (g["count"], g["first"][:240]))
    if res.get("failure"):
        p("")
        p("FAILED: %s" % res["failure"])
    return "\n".join(L)


BEGIN = "<!-- bench-zones:begin (generated by bench/zones.py; edits here are overwritten) -->"
END = "<!-- bench-zones:end -->"


SYSNAME = {"skiff": "Skiff", "kafka": "Kafka"}


def fill_note(res):
    """What the batching phases' latencies mostly are: the wait for a batch to fill."""
    c = res["config"]
    b = res.get("config_batch") or phase_params("batching")
    if not any(ph in c["phases"] for ph in ("batching", "produce-only")):
        return None
    per_zone = b["rate_per_zone"]
    waits = []
    for kind, share in (("local", 1 / 3.0), ("remote", 2 / 3.0)):
        rate = per_zone * share
        if rate > 0:
            waits.append("%.0f ms at a %s producer's %.0f records/s" % (
                1000.0 * b["sticky"] / rate, kind, rate))
    return ("In the batching phases a batch of %d records takes %s to fill, and each record "
            "waits up to that long before it is sent: those latencies are mostly that wait, "
            "and compare the systems rather than the paths." % (b["sticky"], " and ".join(waits)))


def markdown(res, o):
    m, sw, c = res["machine"], res["software"], res["config"]
    w, ob = storage_text(res)
    L = []
    p = L.append
    p("### Setting")
    p("")
    p("- Machine: %d cores (%s), %.1f GiB of memory, %s, kernel %s; the cores and the disk "
      "are shared with other engineers' builds and tests. Load average (1, 5, 15 min) %s at "
      "the start, %s at the end; %.0f s in all." % (
          m["cores"], m["cpu"], m["mem_gib"], m["os"], m["kernel"], res["load_before"],
          res.get("load_after", "?"), res.get("seconds", 0)))
    p("- Software: skiffd at %s%s; skload on librdkafka %s%s." % (
        sw["commit"], " with uncommitted changes in %s" % ", ".join("`%s`" % x for x in sw["uncommitted"][:8])
        if sw["uncommitted"] else "", sw["librdkafka"],
        "; Apache Kafka %s (tools/kafka-ref.sh's jars, heap `%s`, G1)" % (sw["kafka"], c["kafka_heap"])
        if sw.get("kafka") else ""))
    p("- Zones: `tools/zones.sh`, three network namespaces a, b, c routed through a region "
      "namespace whose nftables counters give the bytes each zone sends to each other zone "
      "(IP packets: headers, TCP acknowledgements and retransmissions included). Every "
      "connection from a zone to a broker of another zone goes through a `tools/zonefwd.py` "
      "of its zone that delays each direction by %g ms (measured 1.2 to 1.4 ms one way, its "
      "own hop included: docs/DEVELOPING.md); nothing is delayed between a zone and the "
      "region's services." % c["delay_ms"])
    p("- Region (free to reach from every zone, as in AWS): shared volume %s; objects on %s; "
      "etcd, 3 members (`tools/etcd.sh`)." % (w, ob))
    p("- Skiff: three nodes, one per zone, `broker.rack` = the zone, `zone.routing.enable=true`, "
      "`offsets.topic.num.partitions=6`, `leader.imbalance.check.interval.seconds=2`, "
      "everything else default (acks=all is durable on the shared volume: group commit with "
      "a COMMIT). Clients are tagged `client.id=...,skiff_az=<zone>`; Metadata names each "
      "partition's main for a client of the main's zone and the zone's proxy for the others.")
    if "kafka" in c["systems"]:
        p("- Kafka: three KRaft nodes (broker and controller each), one per zone, `broker.rack` "
          "= the zone, `replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector`; "
          "the topic has RF=3 (one replica per zone, rack-aware placement) and "
          "`min.insync.replicas=2`; data on the local disk with Kafka's defaults (acks=all "
          "is acknowledged once the in-sync replicas hold the record in memory, no fsync). "
          "Consumers set `client.rack` = their zone (KIP-392: they fetch from the replica in "
          "their zone).")
    p("- Workload, the same for both: a topic of %d partitions; in each zone two skload "
      "processes, one producing to the partitions whose main (Skiff) or leader (Kafka) is "
      "in its zone (*local*), the other to the rest (*remote*: through the zone's proxy on "
      "Skiff, to a leader in another zone on Kafka), each at its share of the zone's rate, "
      "so that every partition receives the same from every zone; acks=all, %s, no "
      "compression, random (incompressible) records. Except in *produce-only*, each "
      "process also consumes its partitions in its zone (skload e2e: librdkafka's simple "
      "consumer, `fetch.wait.max.ms=500`), so that each zone reads the whole topic once. "
      "Latency from each record's scheduled send time (no coordinated omission); *e2e* = "
      "scheduled send time to consumption. Each fresh cluster is first primed with %g s "
      "of the latency workload, not measured." % (
          c["partitions"], ", ".join("`%s`" % x for x in c.get("producer_props", [])) or "librdkafka's defaults",
          c.get("prime", 0)))
    for phase in c["phases"]:
        p("  - **%s**: %s." % (phase, workload_text(phase, res)))
    p("- Cross-zone bytes: the counters' zone-to-zone total from just before the skload "
      "processes start to just after the last one exits (start-up, warm-up and drain "
      "included), over the payload they had acknowledged (records × %d B); the forwarders "
      "count the TCP payload of the same traffic." % c["size"])
    p("")
    p("### Latency")
    p("")
    p("Milliseconds, the three zones' histograms pooled (per zone: `results/report.txt`).")
    p("")
    p("| phase | system | client → partition | produce p50 | p99 | p99.9 | max | e2e p50 | e2e p99 | e2e p99.9 | records |")
    p("|---|---|---|---|---|---|---|---|---|---|---|")
    for phase in c["phases"]:
        for system in c["systems"]:
            ph = phase_of(res, system, phase)
            if not ph:
                continue
            for kind in ("local", "remote"):
                k = ph["summary"]["kinds"][kind]
                lat, e2e = k["produce"], k["e2e"]
                if not lat:
                    p("| %s | %s | %s | no result | | | | | | | |" % (phase, SYSNAME[system], KIND_TEXT[system][kind]))
                    continue
                bad = []
                if k["failed"]:
                    bad.append("%d failed" % k["failed"])
                if k["unsent"]:
                    bad.append("%d unsent" % k["unsent"])
                p("| %s | %s | %s | %s | %s | %s | %s | %s | %s | %s | %d%s |" % (
                    phase, SYSNAME[system], KIND_TEXT[system][kind], ms(lat["p50_ms"]),
                    ms(lat["p99_ms"]), ms(lat["p999_ms"]), ms(lat["max_ms"]),
                    ms(e2e and e2e["p50_ms"]), ms(e2e and e2e["p99_ms"]), ms(e2e and e2e["p999_ms"]),
                    k["acked"], " (%s)" % ", ".join(bad) if bad else ""))
    p("")
    note = fill_note(res)
    if note:
        p(note)
        p("")
    p("Load average (1 min) before → after each phase: %s." % "; ".join(
        "%s %s %s → %s" % (SYSNAME[ph["system"]], ph["phase"], ph["load_before"].split()[0],
                           ph["load_after"].split()[0]) for ph in res.get("phases", [])))
    p("")
    p("### Bytes across zones")
    p("")
    p("| phase | system | produced MB | zone-to-zone MB (TCP payload) | per produced byte | batches (mean size) | bytes across per batch | CPU, cores |")
    p("|---|---|---|---|---|---|---|---|")
    for phase in c["phases"]:
        for system in c["systems"]:
            ph = phase_of(res, system, phase)
            if not ph:
                continue
            s = ph["summary"]
            p("| %s | %s | %.1f | %.3f (%s) | %s | %s | %s | %s |" % (
                phase, SYSNAME[system], s["produced_bytes"] / 1e6, s["cross_bytes"] / 1e6,
                "%.3f" % (s["cross_app_bytes"] / 1e6) if s.get("cross_app_bytes") is not None else "?",
                "%.5f" % s["cross_per_byte"] if s["cross_per_byte"] is not None else "n/a",
                "%d (%.0f B)" % (s["batches"], s["batch_bytes_mean"] or 0) if s.get("batches") else "",
                "%.0f" % s["cross_per_batch"] if s.get("cross_per_batch") else "",
                cpu_text(s)))
    p("")
    p("Batches are Skiff's (`skiff_produced_batches_total` of the three nodes); CPU is "
      "user + system time of the brokers, the NFS server, the forwarders and the skload "
      "processes over the phase, in cores (2 in the machine).")
    p("")
    for phase, v in o["per_phase"].items():
        if v["ratio"] is not None:
            p("- %s: Skiff / Kafka = %.5f (1/%.0f)." % (phase, v["ratio"], 1 / v["ratio"]))
    p("")
    p("Zone → zone bytes (from → to):")
    p("")
    p("| phase | system | " + " | ".join("%s→%s" % (a, b) for a in ZONES for b in ZONES if a != b) + " |")
    p("|---|---|" + "---|" * 6)
    for phase in c["phases"]:
        for system in c["systems"]:
            ph = phase_of(res, system, phase)
            if ph:
                s = ph["summary"]
                p("| %s | %s | %s |" % (phase, SYSNAME[system], " | ".join(
                    "%d" % s["matrix"][a][b] for a in ZONES for b in ZONES if a != b)))
    p("")
    p("### Targets")
    p("")
    p("Labels, not assertions.")
    p("")
    p("| target | measured | |")
    p("|---|---|---|")
    for t in o["targets"]:
        p("| %s %s | %s | %s |" % (t["name"], t["target"], t["value"] or "n/a",
                                   "**FAIL**" if t["ok"] is False else label(t["ok"])))
    p("")
    if res.get("anomalies"):
        p("Anomalies: " + "; ".join(res["anomalies"]))
        p("")
    for key, who in (("skiff_log_problems", "Skiff nodes"), ("kafka_log_problems", "Kafka nodes, until they were stopped")):
        if key not in res:
            continue
        probs = res.get(key) or []
        if probs:
            p("WARN and ERROR lines in the logs of the %s (grouped, numbers masked): %s." % (
                who, "; ".join("%d × `%s`" % (g["count"], g["first"].split(": ", 1)[-1][:150].replace("`", "'"))
                               for g in probs[:6])))
        else:
            p("No WARN or ERROR line in the logs of the %s." % who)
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
        doc = doc.rstrip("\n") + "\n\n## Zones\n\n`make bench` ends with `bench/zones.sh` " \
            "(see [bench/README.md](../bench/README.md), \"Zones\"), which rewrites the " \
            "section below.\n\n" + block + "\n"
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(doc)
    os.replace(tmp, path)


def write_reports(res, o):
    text = text_report(res, o)
    with open(os.path.join(OUT, "report.txt"), "w") as f:
        f.write(text + "\n")
    with open(os.path.join(OUT, "report.md"), "w") as f:
        f.write(markdown(res, o) + "\n")
    with open(os.path.join(OUT, "report.json"), "w") as f:
        json.dump(dict(res, overall=o), f, indent=1, default=str)
    return text


# ---------------------------------------------------------------- main

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
    for script, sub in (("ganesha.sh", "ganesha"), ("etcd.sh", "etcd")):
        subprocess.run([os.path.join(ROOT, "tools", script), "stop", os.path.join(WORK, sub)],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    shutil.rmtree(WORK, ignore_errors=True)
    os.makedirs(OUT)
    res = {"smoke": SMOKE, "machine": machine(), "software": software(),
           "load_before": loadavg(), "phases": [], "started": datetime.datetime.utcnow().isoformat() + "Z",
           "config": {"delay_ms": DELAY_MS, "partitions": PARTS, "size": SIZE,
                      "lat_rate": LAT_RATE, "lat_linger": LAT_LINGER, "lat_duration": LAT_DURATION,
                      "warmup": WARMUP, "batch_mbs": BATCH_MBS, "batch_size": BATCH_SIZE,
                      "batch_linger": BATCH_LINGER, "batch_duration": BATCH_DURATION,
                      "batch_warmup": BATCH_WARMUP, "phases": PHASES, "systems": SYSTEMS,
                      "kafka_heap": KAFKA_HEAP, "prime": PRIME, "consumers": CONSUMERS,
                      "gap": GAP,
                      "producer_props": PRODUCER_PROPS},
           "config_batch": phase_params("batching")}
    zones = Zones("skzb-%d" % os.getpid())
    svc = Services()
    rc = 0
    try:
        zones.up()
        svc.start()
        zones.check_region([svc.endpoints] + ([svc.nfs_base] if svc.nfs_base else [])
                           + ([svc.s3_url] if svc.s3_url else []))
        res["storage"] = {
            "wal": "nfs" if svc.nfs_base else "local", "why": svc.nfs_why,
            "export_fs": fs_of(os.path.join(svc.ganesha_dir, "export")) if svc.nfs_base else None,
            "volume_fs": fs_of(WORK), "objects": "s3" if svc.s3_url else "file",
            "objects_fs": fs_of(WORK)}
        if "skiff" in SYSTEMS:
            skiff_system(zones, svc, res)
        if "kafka" in SYSTEMS:
            kafka_system(zones, res)
    except Skipped as e:
        say("zones section skipped: %s" % e)
        rc = 77
    except Failed as e:
        say("FAILED: %s" % e)
        res["failure"] = str(e)
        rc = 1
    except KeyboardInterrupt:
        say("interrupted")
        res["failure"] = "interrupted"
        rc = 130
    finally:
        zones.down()
        svc.stop()
        if not KEEP:
            drop_bulk()
    if rc == 77:
        return rc
    res["load_after"] = loadavg()
    res["seconds"] = time.time() - STARTED
    o = overall(res)
    print(write_reports(res, o))
    say("report: %s (%.0f s in all)" % (os.path.join(OUT, "report.txt"), res["seconds"]))
    if rc == 0:
        for ph in res["phases"]:
            for kind, k in ph["summary"]["kinds"].items():
                if not k["produce"]:
                    say("FAILED: %s %s phase: the %s runs measured nothing (logs in %s)" % (
                        ph["system"], ph["phase"], kind, OUT))
                    rc = 1
    if rc == 0 and DOCS:
        splice_docs(markdown(res, o))
        say("docs/benchmarks.md: Zones section rewritten")
    return rc


def drop_bulk():
    """Deletes what a run wrote in bulk (brokers' data, the shared volume, the objects,
    etcd's data), keeping logs and results."""
    import glob
    for d in (glob.glob(os.path.join(WORK, "skiff", "n*", "data"))
              + glob.glob(os.path.join(WORK, "kafka", "n*", "data"))
              + [os.path.join(WORK, "ganesha", "export"), os.path.join(WORK, "volume"),
                 os.path.join(WORK, "objects"), os.path.join(WORK, "s3rver", "data")]
              + glob.glob(os.path.join(WORK, "etcd", "m*.etcd"))):
        shutil.rmtree(d, ignore_errors=True)


def report_only(results, docs):
    """bench/zones.py --report RESULTS [--docs]: the reports again from a run's report.json."""
    global OUT, PHASES, SYSTEMS, SIZE
    OUT = os.path.abspath(results)
    with open(os.path.join(OUT, "report.json")) as f:
        res = json.load(f)
    PHASES, SYSTEMS = res["config"]["phases"], res["config"]["systems"]
    SIZE = res["config"]["size"]
    for ph in res["phases"]:
        summarize_phase(ph)
    o = overall(res)
    print(write_reports(res, o))
    if docs:
        splice_docs(markdown(res, o))
        say("docs/benchmarks.md: Zones section rewritten")
    return 0


def on_signal(signum, frame):
    raise KeyboardInterrupt


if __name__ == "__main__":
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    if len(sys.argv) > 1:
        if sys.argv[1] != "--report" or len(sys.argv) < 3:
            sys.exit("usage: bench/zones.py [--report RESULTS_DIR [--docs]]")
        sys.exit(report_only(sys.argv[2], "--docs" in sys.argv[3:]))
    sys.exit(main())
