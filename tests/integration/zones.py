"""Three availability zones on one machine, for the zone routing tests (test_71NN).

tools/zones.sh makes network namespaces PREFIX-a, -b and -c (the zones) and PREFIX-r
(the region, which routes between them and counts with nftables the bytes each zone
sends to each other zone); tools/zonefwd.py is a TCP forwarder with a one-way delay
and faults (this kernel has no netem). This module drives both:

- Zones.up(prefix) / down(): the namespaces; conftest's `zones` fixture makes one set
  per test session (prefix SKIFF_TEST_ZONES_PREFIX, given by tests/run.sh, which also
  removes it at the end whatever happened) and skips, with the reason, where this
  machine cannot have them (not root, no namespaces, no nftables).
- The region's services: the integration phase's NFS-Ganesha, S3 emulator and etcd
  listen on 127.0.0.1 of the root namespace; from a zone they are REGION_ADDR (the
  host's end of the region's link, where nftables hands TCP to 127.0.0.1, same port).
  Zones.regional(url) rewrites a URL for a zone. That traffic is counted apart
  (a->region, region->a): it is free on AWS.
- The root namespace (this test process) reaches every zone address directly, so
  cluster.py's checks (Metadata waits, read-backs) work unchanged; that traffic is
  counted apart too (host->a, a->host).
- Zone: run a client inside a zone (run/popen of any command, python, kcat, the Java
  programs of tests/java), or open sockets there from this process (inside(), conn()).
- Traffic: the byte matrix before/after a workload (`with zones.traffic() as t:`).
- ZoneFwd: a zonefwd between a zone and an address: interposed, every connection
  from that zone to the address goes through it (an nftables DNAT in the zone,
  which the forwarder's own connections, marked, escape); stall(), resume(), drop()...
- ZoneCluster: a cluster.Cluster with one node per zone: broker.rack = the zone's name,
  listeners and advertised.listeners on the zone's address, client.zone.cidrs mapping
  each zone's subnet to its name, each node started by `ip netns exec`. Clients of the
  root namespace (this process) are of no zone, so they are sent to the mains.
"""

import contextlib
import ctypes
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading

import cluster
import harness
import kproto as k

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "clients"))
import jtools  # noqa: E402

ZONES_SH = os.path.join(harness.ROOT, "tools", "zones.sh")
ZONEFWD = os.path.join(harness.ROOT, "tools", "zonefwd.py")
UNAVAILABLE = 77          # tools/zones.sh: this machine cannot have zones
CLONE_NEWNET = 0x40000000
FWD_MARK = 0x5A0F         # SO_MARK of a zonefwd's own connections


class ZonesUnavailable(Exception):
    """This machine cannot have zones; the message says why (tests skip with it)."""


def _sh(*args, timeout=120, check=True):
    r = subprocess.run([ZONES_SH] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, timeout=timeout)
    if r.returncode == UNAVAILABLE:
        raise ZonesUnavailable(r.stderr.decode(errors="replace").strip())
    if check and r.returncode != 0:
        raise RuntimeError("tools/zones.sh %s: exit %d: %s" % (
            " ".join(map(str, args)), r.returncode, r.stderr.decode(errors="replace")))
    return r.stdout.decode()


def _parse_env(text):
    out = {}
    for line in text.splitlines():
        m = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line)
        if m:
            out[m.group(1)] = m.group(2).strip('"')
    return out


def netns_inode(ns):
    return os.stat("/run/netns/%s" % ns).st_ino


def process_netns_inode(pid):
    return os.stat("/proc/%d/ns/net" % pid).st_ino


class Zone:
    """One zone: its namespace, address and subnet."""

    def __init__(self, zones, name, ns, addr, cidr):
        self.zones, self.name, self.ns, self.addr, self.cidr = zones, name, ns, addr, cidr

    def __repr__(self):
        return "Zone(%s, %s, %s)" % (self.name, self.ns, self.addr)

    def cmd(self, argv):
        """argv run inside this zone (ip netns exec execs it: the PID is argv's own)."""
        return ["ip", "netns", "exec", self.ns] + list(argv)

    def run(self, argv, timeout=60, check=True, env=None, input=None, what=None):
        """Runs argv in this zone (ktest.run: bounded, output tails on failure)."""
        import ktest
        return ktest.run(self.cmd(argv), timeout=timeout, input=input, env=env, check=check,
                         what=what or "%s in zone %s" % (os.path.basename(argv[0]), self.name))

    def popen(self, argv, **kw):
        """subprocess.Popen of argv in this zone; the caller stops it by its PID."""
        return subprocess.Popen(self.cmd(argv), **kw)

    def python(self, args, timeout=60, check=True, env=None):
        """Debian's python3 (confluent-kafka, kafka-python) in this zone."""
        return self.run([harness.PYTHON] + list(args), timeout=timeout, check=check, env=env,
                        what="python3 %s in zone %s" % (args[0] if args else "", self.name))

    def kcat(self, args, timeout=60, check=True):
        return self.run(["kcat"] + list(args), timeout=timeout, check=check)

    def java(self, program, args, timeout=120, check=False):
        """An io.skiff.clients program of tests/java in this zone (as jtools.java)."""
        p = self.run(["java"] + jtools.JVM + ["-cp", jtools.classpath(),
                                              "io.skiff.clients." + program,
                                              "--timeout", str(timeout - 10)] + list(args),
                     timeout=timeout, check=check, what="%s in zone %s" % (program, self.name))
        return p.returncode, p.stdout.decode(errors="replace").splitlines(), p.stderr.decode(
            errors="replace")

    def inside(self, fn, *args, **kw):
        """fn(*args, **kw) called in a thread that entered this zone's namespace; its
        result returned (its exception raised). Sockets made there stay in the zone;
        so do the threads it starts (e.g. a confluent_kafka client's)."""
        out = {}

        def run():
            try:
                fd = os.open("/run/netns/%s" % self.ns, os.O_RDONLY)
                try:
                    if _libc().setns(fd, CLONE_NEWNET) != 0:
                        e = ctypes.get_errno()
                        raise OSError(e, "setns(%s): %s" % (self.ns, os.strerror(e)))
                finally:
                    os.close(fd)
                out["value"] = fn(*args, **kw)
            except BaseException as e:  # noqa: BLE001 - raised in the caller
                out["error"] = e

        t = threading.Thread(target=run, name="zone-%s" % self.name, daemon=True)
        t.start()
        t.join()
        if "error" in out:
            raise out["error"]
        return out.get("value")

    def conn(self, bootstrap, timeout=15.0, client_id="kproto"):
        """A kproto.Conn from this zone."""
        return self.inside(k.Conn, bootstrap, client_id=client_id, timeout=timeout)


_libc_handle = None


def _libc():
    global _libc_handle
    if _libc_handle is None:
        _libc_handle = ctypes.CDLL(None, use_errno=True)
    return _libc_handle


class Traffic:
    """Counter deltas over a `with zones.traffic()` block: bytes(src, dst) with src and
    dst zone names, "region" or "host"."""

    def __init__(self, zones):
        self.zones = zones
        self.before = zones.counters()
        self.after = None

    def stop(self):
        self.after = self.zones.counters()

    def delta(self):
        after = self.after if self.after is not None else self.zones.counters()
        return {key: after[key] - self.before.get(key, 0) for key in after}

    def bytes(self, src, dst):
        return self.delta()[(src, dst)]

    def cross_zone(self, src=None):
        """Bytes sent from zone to zone (from src only, when given)."""
        names = set(self.zones.names)
        return sum(v for (s, d), v in self.delta().items()
                   if s in names and d in names and (src is None or s == src))

    def matrix(self):
        """The zone-to-zone bytes as a text table, plus the region and host columns."""
        d = self.delta()
        cols = self.zones.names + ["region", "host"]
        lines = ["%-8s" % "from\\to" + "".join("%12s" % c for c in cols)]
        for s in self.zones.names:
            lines.append("%-8s" % s + "".join(
                "%12s" % ("-" if c == s else d.get((s, c), 0)) for c in cols))
        return "\n".join(lines)


class Zones:
    """A set of zones made by tools/zones.sh (see the module's doc)."""

    def __init__(self, prefix, env):
        self.prefix = prefix
        self.env = env
        self.names = env["ZONES"].split()
        self.zones = {z: Zone(self, z, env["ZONE_NS_%s" % z], env["ZONE_ADDR_%s" % z],
                              env["ZONE_CIDR_%s" % z]) for z in self.names}
        self.region_ns = env["REGION_NS"]
        self.region_addr = env["REGION_ADDR"]
        self.host_addr = env["HOST_ADDR"]
        self.client_zone_cidrs = env["ZONE_CIDRS"]
        self.forwarders = []

    @classmethod
    def up(cls, prefix):
        """Makes the zones (raises ZonesUnavailable where this machine cannot). Any set
        left by a run that died is removed first."""
        _sh("gc", check=False)
        env = dict(os.environ, SKIFF_ZONES_OWNER_PID=str(os.getpid()))
        r = subprocess.run([ZONES_SH, "up", prefix], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=300, env=env)
        if r.returncode == UNAVAILABLE:
            raise ZonesUnavailable(r.stderr.decode(errors="replace").strip())
        if r.returncode != 0:
            raise RuntimeError("tools/zones.sh up %s: exit %d: %s" % (
                prefix, r.returncode, r.stderr.decode(errors="replace")))
        return cls(prefix, _parse_env(r.stdout.decode()))

    def down(self):
        self.stop_forwarders()
        _sh("down", self.prefix)

    def __getitem__(self, name):
        return self.zones[name]

    def __iter__(self):
        return iter(self.zones.values())

    def regional(self, text):
        """A URL (or list of URLs) of a service on this machine's loopback, as a zone
        reaches it."""
        return re.sub(r"(?<=://)(127\.0\.0\.1|localhost)(?=[:/?]|$)", self.region_addr, text)

    # --- counters
    def counters(self):
        """{(src, dst): bytes} of every counter of the region (see tools/zones.sh stats)."""
        out = {}
        for line in _sh("stats", self.prefix).splitlines():
            m = re.match(r"^(\S+)->(\S+) bytes=(\d+) packets=(\d+)$", line)
            if m:
                out[(m.group(1), m.group(2))] = int(m.group(3))
        if not out:
            raise RuntimeError("tools/zones.sh stats %s printed no counter" % self.prefix)
        return out

    @contextlib.contextmanager
    def traffic(self):
        t = Traffic(self)
        try:
            yield t
        finally:
            t.stop()

    # --- forwarders
    def forwarder(self, zone, target, delay_ms=1.0, interpose=True, reset_existing=False,
                  port=0):
        """Starts a zonefwd in `zone` (a name) forwarding to target ("host:port"). With
        interpose, every new connection from that zone to target goes through it (and
        with reset_existing, open ones are reset, so that their owners reconnect through
        it); else connect to its .address. Stopped by stop() or stop_forwarders()."""
        f = ZoneFwd(self[zone], target, delay_ms, port)
        self.forwarders.append(f)
        try:
            f.start()
            if interpose:
                f.interpose(reset_existing)
        except BaseException:
            f.stop()
            raise
        return f

    def stop_forwarders(self):
        while self.forwarders:
            self.forwarders.pop().stop()


class ZoneFwd:
    """One tools/zonefwd.py process, in a zone (see Zones.forwarder)."""

    _seq = 0

    def __init__(self, zone, target, delay_ms, port=0):
        ZoneFwd._seq += 1
        self.zone = zone
        self.target = target
        self.delay_ms = delay_ms
        self.port = port
        self.proc = None
        self.table = None
        self.dir = os.path.join(harness.WORK, "zonefwd-%d-%d" % (os.getpid(), ZoneFwd._seq))
        self.control = os.path.join(self.dir, "ctl.sock")
        self.log_path = os.path.join(self.dir, "zonefwd.log")

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    @property
    def address(self):
        return "%s:%d" % (self.zone.addr, self.port)

    def start(self, timeout=15.0):
        os.makedirs(self.dir, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = self.zone.popen(
            [harness.PYTHON, ZONEFWD, "--listen", "%s:%d" % (self.zone.addr, self.port),
             "--target", self.target, "--delay-ms", str(self.delay_ms), "--control",
             self.control, "--mark", str(FWD_MARK), "--owner-pid", str(os.getpid())],
            stdout=subprocess.PIPE, stderr=log)
        log.close()
        line = _readline(self.proc, timeout)
        m = re.match(r"zonefwd listening (\S+):(\d+) ", line)
        if not m:
            self.stop()
            raise RuntimeError("zonefwd did not start: %r; log: %s" % (line, self.log_tail()))
        self.port = int(m.group(2))
        return self

    def interpose(self, reset_existing=False):
        host, port = self.target.rsplit(":", 1)
        self.table = "zfwd_%d" % self.port
        rules = ("table ip %s {\n chain out {\n  type nat hook output priority -100;"
                 " policy accept;\n  meta mark != %d ip daddr %s tcp dport %s dnat to %s\n"
                 " }\n}\n") % (self.table, FWD_MARK, host, port, self.address)
        self.zone.run(["nft", "-f", "-"], input=rules.encode(), timeout=30)
        if reset_existing:
            self.zone.run(["ss", "-K", "dst", host, "dport", "=", port], timeout=30, check=False)

    def command(self, line, timeout=10.0):
        s = socket.socket(socket.AF_UNIX)
        s.settimeout(timeout)
        try:
            s.connect(self.control)
            s.sendall((line + "\n").encode())
            got = s.makefile("rb").readline()
        finally:
            s.close()
        r = json.loads(got)
        assert r.get("ok"), "zonefwd %s: %r" % (line, r)
        return r

    def stats(self):
        return self.command("stats")

    def stall(self):
        return self.command("stall")

    def resume(self):
        return self.command("resume")

    def drop(self):
        """Resets every open connection (RST both ways)."""
        return self.command("drop")

    def close_all(self):
        return self.command("close")

    def refuse(self):
        return self.command("refuse")

    def set_delay(self, ms):
        self.delay_ms = ms
        return self.command("delay %s" % ms)

    def log_tail(self, n=3000):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-n:]
        except OSError:
            return ""

    def stop(self):
        """Removes the interposition, then SIGTERM (SIGKILL after 5 s) by PID."""
        if self.table:
            self.zone.run(["nft", "delete", "table", "ip", self.table], timeout=30, check=False)
            self.table = None
        if self.proc is not None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
                try:
                    self.proc.wait(5)
                except subprocess.TimeoutExpired:
                    self.proc.kill()
                    self.proc.wait()
            if self.proc.stdout:
                self.proc.stdout.close()
            self.proc = None
        for p in (self.control, self.log_path):
            with contextlib.suppress(OSError):
                os.unlink(p)
        with contextlib.suppress(OSError):
            os.rmdir(self.dir)


def _readline(proc, timeout):
    """The first stdout line of proc, within timeout."""
    out = {}
    t = threading.Thread(target=lambda: out.setdefault("line", proc.stdout.readline()),
                         daemon=True)
    t.start()
    t.join(timeout)
    return out.get("line", b"").decode(errors="replace")


class ZoneCluster(cluster.Cluster):
    """A cluster.Cluster whose node i runs in zone layout[i-1] (default: one per zone,
    a, b, c; nodes added later go round the zones again)."""

    def __init__(self, name, etcd, zones, layout=None, overrides=None, offsets_partitions=6):
        self.zones = zones
        self.layout = list(layout or zones.names)
        super().__init__(name, etcd, 0, overrides, offsets_partitions)
        for key in ("etcd.endpoints", "wal.url", "objects.url"):
            self.common[key] = zones.regional(self.common[key])
        self.common.setdefault("client.zone.cidrs", zones.client_zone_cidrs)
        for _ in self.layout:
            self.add_node(start=False)

    def zone_of(self, i):
        return self.zones[self.layout[(i - 1) % len(self.layout)]]

    def node_place(self, i):
        z = self.zone_of(i)
        return z.name, {"host": z.addr, "cmd_prefix": z.cmd([])}

    def node_in(self, zone):
        """The first node of zone `zone` (a name)."""
        for n in self.nodes.values():
            if n.rack == zone:
                return n
        raise KeyError("no node in zone %s" % zone)

    def delay_between_zones(self, delay_ms=1.0, reset_existing=True):
        """A zonefwd from every zone to every node of another zone (interposed, open
        connections reset so that they come back through it): every connection across
        zones, node to node or client to node, gets delay_ms each way. Returns them;
        they stop with the zones' other forwarders."""
        out = []
        for z in self.zones:
            for n in self.nodes.values():
                if n.rack != z.name:
                    out.append(self.zones.forwarder(z.name, n.bootstrap, delay_ms,
                                                    reset_existing=reset_existing))
        return out

    def describe(self):
        return "%s; zones %s: %s" % (super().describe(), self.zones.prefix, ", ".join(
            "node %d in %s (%s)" % (n.node_id, n.rack, n.bootstrap) for n in self.nodes.values()))

