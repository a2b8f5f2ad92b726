"""A cluster of skiffd nodes for the cluster tests (test_7NNN), and the checks that judge
it (docs/cluster.md).

A Cluster runs N nodes, ids 1..N in zones z1..zN, each with its own data.dir and port,
all with the same wal.url (the shared volume), objects.url and etcd.prefix:

- the shared volume is the integration phase's NFS-Ganesha (SKIFF_TEST_NFS_URL, under a
  directory of the test's own), else a directory under tests/.work;
- the object store is the phase's S3 emulator (SKIFF_TEST_S3_URL, under a prefix of the
  test's own), else file:// under the test's directory;
- etcd is the phase's 3-member etcd (SKIFF_TEST_ETCD_ENDPOINTS, conftest's `etcd`
  fixture) for tests that leave etcd alone, or one a test starts in its own directory
  (`own_etcd`) to kill or stop its members; every cluster has an etcd.prefix of its own.

Nodes are harness.Broker processes: kill() is SIGKILL, stop() SIGTERM, start() starts the
same node.id on the same data.dir and port again (a new incarnation, with a new log).

The checks: Metadata-based waits (brokers registered, every partition with a live
leader), a cluster-aware crashcheck.verify that reads each partition from its current
leader, a Metadata sampler that looks for two leaders of one partition at one epoch, and
an idempotent producer that notes when each acknowledgement arrived (failover times).
"""

import bisect
import os
import re
import shutil
import subprocess
import threading
import time
import uuid

import pytest

import crashcheck
import harness
import kgroup as kg
import kproto as k
from kproto import F, S, _api

ETCD_SH = os.path.join(harness.ROOT, "tools", "etcd.sh")

# error codes
UNKNOWN_TOPIC_OR_PARTITION = 3
LEADER_NOT_AVAILABLE = 5
NOT_LEADER_OR_FOLLOWER = 6
REQUEST_TIMED_OUT = 7
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15
NOT_COORDINATOR = 16
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
KAFKA_STORAGE_ERROR = 56
FENCED_LEADER_EPOCH = 74
UNKNOWN_LEADER_EPOCH = 75
# What a client retries on another node or later (Kafka's RetriableException codes).
RETRIABLE = {UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER,
             REQUEST_TIMED_OUT, COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE,
             NOT_COORDINATOR, NOT_ENOUGH_REPLICAS, NOT_ENOUGH_REPLICAS_AFTER_APPEND,
             KAFKA_STORAGE_ERROR, FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH}
# What a reader retries on the partition's (new) leader.
MOVED = {LEADER_NOT_AVAILABLE, NOT_LEADER_OR_FOLLOWER, FENCED_LEADER_EPOCH,
         UNKNOWN_LEADER_EPOCH, REQUEST_TIMED_OUT}

OFFSETS_TOPIC = "__consumer_offsets"

# ---------------------------------------------------------------- schemas (Kafka's specs)

_api(60, 0,
     [F("IncludeClusterAuthorizedOperations", "bool", "0+"),
      F("EndpointType", "int8", "1+", default=1),
      F("IncludeFencedBrokers", "bool", "2+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("ErrorMessage", "string", "0+", nullable="0+"),
      F("EndpointType", "int8", "1+", default=1),
      F("ClusterId", "string", "0+"), F("ControllerId", "int32", "0+", default=-1),
      S("Brokers", "0+", [F("BrokerId", "int32", "0+"), F("Host", "string", "0+"),
                          F("Port", "int32", "0+"),
                          F("Rack", "string", "0+", nullable="0+"),
                          F("IsFenced", "bool", "2+")]),
      F("ClusterAuthorizedOperations", "int32", "0+", default=-2147483648)])

_api(20, 4,
     [F("TopicNames", "[]string", "0-5"),
      S("Topics", "6+", [F("Name", "string", "6+", nullable="6+"), F("TopicId", "uuid", "6+")]),
      F("TimeoutMs", "int32", "0+")],
     [F("ThrottleTimeMs", "int32", "1+"),
      S("Responses", "0+", [F("Name", "string", "0+", nullable="6+"),
                            F("TopicId", "uuid", "6+"), F("ErrorCode", "int16", "0+"),
                            F("ErrorMessage", "string", "5+", nullable="5+")])])

_api(37, 2,
     [S("Topics", "0+", [F("Name", "string", "0+"), F("Count", "int32", "0+"),
                         S("Assignments", "0+", [F("BrokerIds", "[]int32", "0+")],
                           nullable="0+")]),
      F("TimeoutMs", "int32", "0+"), F("ValidateOnly", "bool", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Results", "0+", [F("Name", "string", "0+"), F("ErrorCode", "int16", "0+"),
                          F("ErrorMessage", "string", "0+", nullable="0+")])])

_api(33, 2,
     [S("Resources", "0+", [F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
                            S("Configs", "0+", [F("Name", "string", "0+"),
                                                F("Value", "string", "0+", nullable="0+")])]),
      F("ValidateOnly", "bool", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Responses", "0+", [F("ErrorCode", "int16", "0+"),
                            F("ErrorMessage", "string", "0+", nullable="0+"),
                            F("ResourceType", "int8", "0+"),
                            F("ResourceName", "string", "0+")])])

RESOURCE_TOPIC = 2


def describe_cluster(c, version=0):
    return c.request(60, version, {"IncludeClusterAuthorizedOperations": False})


def delete_topics(c, names, timeout_ms=30000, version=4):
    r = c.request(20, version, {"TopicNames": list(names), "TimeoutMs": timeout_ms})
    return {x["Name"]: x["ErrorCode"] for x in r["Responses"]}


def create_partitions(c, name, count, timeout_ms=30000, version=2):
    r = c.request(37, version, {"Topics": [{"Name": name, "Count": count, "Assignments": None}],
                                "TimeoutMs": timeout_ms, "ValidateOnly": False})
    x = r["Results"][0]
    return x["ErrorCode"], x["ErrorMessage"]


def alter_topic_configs(c, name, configs, version=1):
    """Legacy AlterConfigs (replaces the topic's overrides): returns (error, message)."""
    r = c.request(33, version, {"Resources": [{"ResourceType": RESOURCE_TOPIC,
                                               "ResourceName": name, "Configs": [
        {"Name": kk, "Value": v} for kk, v in configs.items()]}], "ValidateOnly": False})
    x = r["Responses"][0]
    return x["ErrorCode"], x["ErrorMessage"]


def topic_config(c, name, key):
    """(error, value, source) of one config of a topic, by DescribeConfigs."""
    r = kg.describe_configs(c, RESOURCE_TOPIC, name, [key])["Results"][0]
    if r["ErrorCode"] != k.NONE:
        return r["ErrorCode"], None, None
    for x in r["Configs"]:
        if x["Name"] == key:
            return k.NONE, x["Value"], x["ConfigSource"]
    return k.NONE, None, None


def java_string_hash(s):
    """Java's String.hashCode (of the UTF-16 code units; group ids here are ASCII)."""
    h = 0
    for ch in s:
        h = (31 * h + ord(ch)) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def offsets_partition(group, partitions):
    """The __consumer_offsets partition of a group: abs(hashCode) % N, as Kafka."""
    h = java_string_hash(group)
    # Kafka's Utils.abs: Integer.MIN_VALUE maps to 0
    return (0 if h == -(1 << 31) else abs(h)) % partitions


def group_id(prefix, negative=False, partitions=None):
    """A fresh group id whose String.hashCode is >= 0 (or, with negative, < 0 and, given
    the partition count, one where abs(hash) % N and (hash & 0x7fffffff) % N differ)."""
    while True:
        g = "%s-%s" % (prefix, uuid.uuid4().hex[:8])
        h = java_string_hash(g)
        if not negative and h >= 0:
            return g
        if negative and h < 0 and (partitions is None or (
                offsets_partition(g, partitions) != (h & 0x7FFFFFFF) % partitions)):
            return g


# ---------------------------------------------------------------- etcd

class Etcd:
    """A 3-member etcd of tools/etcd.sh: the integration phase's (never hurt by a test)
    or one a test started in its own directory (own: stopped by its fixture)."""

    def __init__(self, directory, endpoints, own):
        self.dir, self.endpoints, self.own = directory, endpoints, own

    @classmethod
    def start(cls, directory):
        """Starts one in `directory` (fresh); skips the test when etcd is not installed."""
        shutil.rmtree(directory, ignore_errors=True)
        os.makedirs(directory)
        env = dict(os.environ, SKIFF_ETCD_OWNER_PID=str(os.getpid()))
        r = subprocess.run([ETCD_SH, "start", directory], env=env, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, timeout=120)
        out = r.stdout.decode(errors="replace")
        if r.returncode == 77:
            pytest.skip("etcd is not installed: %s" % out.strip())
        if r.returncode != 0:
            raise RuntimeError("tools/etcd.sh start %s failed (exit %d):\n%s" % (
                directory, r.returncode, out[-3000:]))
        return cls(directory, cls._sh("endpoints", directory), True)

    @staticmethod
    def _sh(*args, check=True):
        r = subprocess.run([ETCD_SH] + [str(a) for a in args], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=60)
        if check and r.returncode != 0:
            raise AssertionError("tools/etcd.sh %s: exit %d: %s" % (
                " ".join(map(str, args)), r.returncode, r.stderr.decode(errors="replace")))
        return r.stdout.decode().strip()

    def _hurt(self):
        assert self.own, "the phase's etcd is shared: a test hurts only an etcd of its own"

    def leader(self, timeout=10.0):
        """Index (1..3) of the current leader."""
        deadline = time.time() + timeout
        while True:
            r = subprocess.run([ETCD_SH, "leader", self.dir], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, timeout=30)
            if r.returncode == 0:
                return int(r.stdout.decode().strip())
            if time.time() > deadline:
                raise AssertionError("etcd has no leader after %.0fs: %s" % (
                    timeout, r.stderr.decode(errors="replace")))
            time.sleep(0.1)

    def kill_member(self, i):
        self._hurt()
        self._sh("kill", self.dir, i)

    def stop_member(self, i):
        self._hurt()
        self._sh("stop-member", self.dir, i)

    def cont_member(self, i):
        self._hurt()
        self._sh("cont-member", self.dir, i)

    def start_member(self, i):
        self._hurt()
        self._sh("start-member", self.dir, i)

    def log_tails(self, n=3000):
        out = []
        for i in (1, 2, 3):
            try:
                with open(os.path.join(self.dir, "m%d.log" % i), errors="replace") as f:
                    out.append("--- etcd member %d log (tail) ---\n%s" % (i, f.read()[-n:]))
            except OSError:
                pass
        return "\n".join(out)

    def stop(self):
        """Stops an etcd of a test's own: SIGKILL first (its data is thrown away, and
        members stopping together take seconds to hand leadership around), then
        tools/etcd.sh stop for whatever is left."""
        if self.own:
            for i in (1, 2, 3):
                subprocess.run([ETCD_SH, "kill", self.dir, str(i)], stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, timeout=60)
            subprocess.run([ETCD_SH, "stop", self.dir], timeout=60)


def shared_wal_url(sub, local_dir):
    """The shared volume of one cluster: directory `sub` on the phase's NFS-Ganesha, else
    the local directory local_dir."""
    base = os.environ.get("SKIFF_TEST_NFS_URL")
    if base:
        path, query = base.split("?", 1)
        return "%s/%s?%s" % (path.rstrip("/"), sub, query)
    os.makedirs(local_dir, exist_ok=True)
    return "file://" + local_dir


def objects_url(name, local_dir):
    """The phase's S3 emulator under a prefix of this cluster's own, else file://local_dir."""
    url = os.environ.get("SKIFF_TEST_S3_URL")
    if url and os.environ.get("SKIFF_TEST_S3_DIR") and not os.environ.get("SKIFF_TEST_S3_SKIP"):
        import s3env
        env = s3env.S3Env(url, os.environ["SKIFF_TEST_S3_DIR"])
        return env.url(env.new_prefix(name))
    os.makedirs(local_dir, exist_ok=True)
    return "file://" + local_dir


# ---------------------------------------------------------------- nodes

class Node(harness.Broker):
    """One skiffd node of a Cluster."""

    def __init__(self, cluster, node_id, rack, overrides, host=None, cmd_prefix=None):
        """host: the address to listen on and advertise (default 127.0.0.1);
        cmd_prefix: what runs skiffd (e.g. ip netns exec NS), which must exec it so
        that the process started is the node (its PID is the one signalled)."""
        self.node_id = node_id
        self.rack = rack
        self.cluster = cluster
        props = {"node.id": str(node_id), "broker.rack": rack}
        props.update(overrides)
        super().__init__("%s-n%d" % (cluster.name, node_id), props,
                         data_dir=os.path.join(cluster.dir, "n%d" % node_id))
        if host:
            self.host = host
        self.cmd_prefix = list(cmd_prefix or [])
        self.log_mark = 0
        self.starts = 0

    def argv(self):
        return self.cmd_prefix + super().argv()

    def start(self, timeout=30.0):
        try:
            self.log_mark = os.path.getsize(self.log_path)
        except OSError:
            self.log_mark = 0
        self.starts += 1
        return super().start(timeout)

    @property
    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    @property
    def pid(self):
        return self.proc.pid if self.proc else None

    def log_since_start(self):
        return self.log_text()[self.log_mark:]

    def logs_written(self):
        """The log ids this node wrote, in order (one per incarnation)."""
        return [int(m) for m in re.findall(r"node %d writes log (\d+) at" % self.node_id,
                                           self.log_text())]

    def conn(self, timeout=15.0):
        return k.Conn(self.bootstrap, timeout=timeout)


class Cluster:
    """N nodes sharing wal.url, objects.url and etcd.prefix (see the module's doc)."""

    def __init__(self, name, etcd, n=3, overrides=None, offsets_partitions=6):
        self.name = name
        self.etcd = etcd
        self.tag = uuid.uuid4().hex[:8]
        self.dir = os.path.join(harness.WORK, name)
        shutil.rmtree(self.dir, ignore_errors=True)
        os.makedirs(self.dir)
        self.prefix = "/skiff-%s-%s/" % (re.sub(r"[^a-zA-Z0-9_-]", "-", name[:30]), self.tag)
        self.wal_url = shared_wal_url("cluster-%s-%s" % (name[:40], self.tag),
                                      os.path.join(self.dir, "volume"))
        self.objects_url = objects_url(name, os.path.join(self.dir, "objects"))
        self.common = {
            "etcd.endpoints": etcd.endpoints,
            "etcd.prefix": self.prefix,
            "wal.url": self.wal_url,
            "objects.url": self.objects_url,
            "offsets.topic.num.partitions": str(offsets_partitions),
            "group.initial.rebalance.delay.ms": "0",
        }
        self.common.update(overrides or {})
        self.offsets_partitions = int(self.common["offsets.topic.num.partitions"])
        self.nodes = {}
        for _ in range(n):
            self.add_node(start=False)

    def describe(self):
        return "cluster %s: %d nodes, wal.url %s, objects.url %s, etcd %s prefix %s" % (
            self.name, len(self.nodes), self.wal_url, self.objects_url, self.etcd.endpoints,
            self.prefix)

    # --- nodes
    def node_place(self, i):
        """(rack, Node keyword arguments) of node i: zones.ZoneCluster puts nodes in
        network namespaces."""
        return "z%d" % i, {}

    def add_node(self, overrides=None, start=True):
        i = len(self.nodes) + 1
        props = dict(self.common)
        props.update(overrides or {})
        rack, where = self.node_place(i)
        n = Node(self, i, rack, props, **where)
        shutil.rmtree(n.data_dir, ignore_errors=True)
        self.nodes[i] = n
        if start:
            n.start()
        return n

    def start(self):
        for n in self.nodes.values():
            n.start()
        self.wait_brokers()
        return self

    def node(self, i):
        return self.nodes[i]

    def live(self):
        return [n for n in self.nodes.values() if n.alive]

    def live_ids(self):
        return {n.node_id for n in self.live()}

    @property
    def bootstrap(self):
        """Every node, as clients are configured for a cluster."""
        return ",".join(n.bootstrap for n in self.nodes.values())

    def kill(self, i):
        self.nodes[i].kill()

    def stop(self, i, timeout=60.0):
        return self.nodes[i].stop(timeout)

    def start_node(self, i, timeout=30.0):
        return self.nodes[i].start(timeout)

    def restart(self, i):
        self.nodes[i].kill()
        return self.nodes[i].start()

    def kill_all(self):
        for n in self.nodes.values():
            n.kill()

    def log_tails(self, n=15000):
        return "\n".join("--- node %d (%s, pid %s) log (tail) ---\n%s" % (
            nd.node_id, nd.bootstrap, nd.pid, nd.log_text()[-n:]) for nd in self.nodes.values())

    # --- asking the cluster
    def any_conn(self, prefer=None, timeout=15.0):
        """A connection to a live node (prefer's first)."""
        order = ([prefer] if prefer else []) + [n for n in self.live() if n is not prefer]
        last = None
        for n in order:
            if not n.alive:
                continue
            try:
                return n.conn(timeout)
            except OSError as e:
                last = e
        raise AssertionError("no live node answers (%r)" % last)

    def metadata(self, topics, via=None, version=12):
        node = self.nodes[via] if isinstance(via, int) else via
        with self.any_conn(node) as c:
            return k.metadata(c, topics, version=version, allow_auto=False)

    def leaders(self, topic, via=None):
        """{partition: (leader, epoch)} as one node (via, else any live one) reports it."""
        md = self.metadata([topic], via)
        t = md["Topics"][0]
        assert t["ErrorCode"] == k.NONE, "Metadata of %s: error %d" % (topic, t["ErrorCode"])
        return {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"]) for p in t["Partitions"]}

    def mains(self, topic, via=None):
        """{node id: [partitions it leads]} for every live node."""
        out = {i: [] for i in self.live_ids()}
        for p, (leader, _) in sorted(self.leaders(topic, via).items()):
            out.setdefault(leader, []).append(p)
        return out

    def wait_brokers(self, ids=None, timeout=30.0):
        """Until Metadata from every live node lists exactly the node ids `ids` (default:
        the live nodes)."""
        want = set(ids) if ids is not None else self.live_ids()
        deadline = time.time() + timeout
        seen = {}
        while True:
            ok = True
            for n in self.live():
                try:
                    with n.conn() as c:
                        md = k.metadata(c, [], version=12, allow_auto=False)
                    seen[n.node_id] = sorted(b["NodeId"] for b in md["Brokers"])
                except (OSError, k.ConnectionClosed, k.ProtocolError) as e:
                    seen[n.node_id] = repr(e)
                if seen[n.node_id] != sorted(want):
                    ok = False
            if ok:
                return
            if time.time() > deadline:
                raise AssertionError("after %.0fs the nodes list these brokers: %r, want %r" % (
                    timeout, seen, sorted(want)))
            time.sleep(0.1)

    def wait_leaders(self, topic, partitions, timeout=30.0, exclude=(), serving=True):
        """Until Metadata from every live node shows every partition of topic led, at the
        same epoch, by one live node not in exclude, and (serving) that node answers
        ListOffsets for it. Returns {partition: (leader, epoch)}."""
        deadline = time.time() + timeout
        last = None
        while True:
            try:
                last = self._leaders_settled(topic, partitions, exclude, serving)
                if not isinstance(last, str):
                    return last
            except (OSError, k.ConnectionClosed, k.ProtocolError) as e:
                last = repr(e)
            if time.time() > deadline:
                raise AssertionError("%s: not every partition has a live leader after %.0fs: %s"
                                     % (topic, timeout, last))
            time.sleep(0.1)

    def _leaders_settled(self, topic, partitions, exclude, serving):
        live = self.live_ids() - set(exclude)
        views = {}
        for n in self.live():
            with n.conn() as c:
                md = k.metadata(c, [topic], version=12, allow_auto=False)
            t = md["Topics"][0]
            if t["ErrorCode"] != k.NONE:
                return "node %d: Metadata error %d" % (n.node_id, t["ErrorCode"])
            views[n.node_id] = {p["PartitionIndex"]: (p["LeaderId"], p["LeaderEpoch"])
                                for p in t["Partitions"]}
        if not views:
            return "no live node"
        first = next(iter(views.values()))
        if sorted(first) != list(range(partitions)):
            return "partitions %r" % sorted(first)
        for i, v in views.items():
            if v != first:
                return "nodes disagree: %r" % views
        bad = {p: le for p, le in first.items() if le[0] not in live}
        if bad:
            return "partitions without a live leader: %r" % bad
        if serving:
            for p, (leader, _) in first.items():
                with self.nodes[leader].conn() as c:
                    e = k.list_offsets(c, topic, p, -1)["ErrorCode"]
                if e != k.NONE:
                    return "%s-%d: ListOffsets on its leader %d: error %d" % (topic, p, leader, e)
        return first

    def wait_balanced(self, topic=OFFSETS_TOPIC, timeout=30.0):
        """Until every live node leads its share of topic's partitions (the mean, rounded
        down or up): the controller rebalances leader.imbalance.check.interval.seconds
        after the set of nodes changed. Placement counts every partition a node holds,
        so a topic created before that lands unevenly. Returns {node: [partitions]}."""
        def balanced():
            try:
                mains = self.mains(topic)
            except (OSError, k.ConnectionClosed, k.ProtocolError, AssertionError):
                return None
            live = self.live_ids()
            total = sum(len(v) for v in mains.values())
            lo, hi = total // len(live), -(-total // len(live))
            if set(mains) == live and all(lo <= len(v) <= hi for v in mains.values()):
                return mains
            return None
        try:
            return wait_for(balanced, timeout, "the partitions of %s to spread over nodes %s" % (
                topic, sorted(self.live_ids())))
        except AssertionError as e:
            raise AssertionError("%s: mains %r" % (e, self.mains(topic))) from None

    def create_topic(self, name, partitions, configs=None, via=None, timeout=30.0):
        node = self.nodes[via] if isinstance(via, int) else via
        with self.any_conn(node) as c:
            r = k.create_topics(c, [(name, partitions, 1, configs or {})])["Topics"][0]
        assert r["ErrorCode"] == k.NONE, "CreateTopics %s: %d %s" % (
            name, r["ErrorCode"], r["ErrorMessage"])
        return self.wait_leaders(name, partitions, timeout)

    # --- reading back
    def read_partition(self, topic, p, timeout=60.0):
        """(log start, high watermark, [Batch]) of a partition, read whole from its current
        leader; started again on another leader when it moves meanwhile."""
        deadline = time.time() + timeout
        last = None
        while True:
            try:
                leader = self.leaders(topic).get(p, (-1, -1))[0]
                if leader in self.nodes and self.nodes[leader].alive:
                    with self.nodes[leader].conn(timeout=30) as c:
                        return _read_whole(c, topic, p)
                last = "leader %d" % leader
            except _Moved as e:
                last = str(e)
            except (OSError, k.ConnectionClosed, k.ProtocolError) as e:
                last = repr(e)
            if time.time() > deadline:
                raise AssertionError("cannot read %s-%d in %.0fs: %s" % (topic, p, timeout, last))
            time.sleep(0.1)

    def verify(self, topic, partitions, acked, produced_values=None, partition_of=None):
        """crashcheck.verify for a cluster: every partition read from its leader, then the
        same invariants: every acknowledged record at its offset, offsets contiguous from
        the log start, no value twice, batches intact, nothing never produced, every
        value in the partition it was sent to. Returns stats; raises LogProblems."""
        logs = {}
        batches_of = {}
        problems = []
        for p in range(partitions):
            start, hw, batches = self.read_partition(topic, p)
            values, probs = crashcheck.check_partition(start, hw, batches)
            problems += ["%s-%d: %s" % (topic, p, x) for x in probs]
            logs[p] = (start, hw, values)
            batches_of[p] = batches
        for p, off, v in acked:
            start, hw, values = logs[p]
            if off < start:
                continue
            got = values.get(off)
            if got != v:
                problems.append("acknowledged %r at %s-%d offset %d, log has %r" % (
                    v, topic, p, off, got))
        seen = {}
        for p, (_, _, values) in logs.items():
            for off, v in values.items():
                if v in seen:
                    # The batches say who wrote each copy (producer id, epoch, sequence).
                    problems.append("value %r twice: %s in %r and %s in %r" % (
                        v, seen[v], _batch_at(batches_of[seen[v][0]], seen[v][1]), (p, off),
                        _batch_at(batches_of[p], off)))
                seen[v] = (p, off)
                if produced_values is not None and v not in produced_values:
                    problems.append("value %r at %d-%d was never produced" % (v, p, off))
                elif partition_of is not None and partition_of(v) != p:
                    problems.append("value %r in partition %d, sent to %d" % (
                        v, p, partition_of(v)))
        stats = {"records": len(seen), "acked": len(acked),
                 "per_partition": {p: hw - s for p, (s, hw, _) in logs.items()}}
        if problems:
            raise crashcheck.LogProblems("%d problem(s):\n  %s" % (
                len(problems), "\n  ".join(problems[:50])))
        return stats


def _batch_at(batches, offset):
    return next((b for b in batches if b.base_offset <= offset <= b.last_offset), None)


class _Moved(Exception):
    pass


def _read_whole(c, topic, p):
    start = k.list_offsets(c, topic, p, -2)
    if start["ErrorCode"] in MOVED:
        raise _Moved("%s-%d ListOffsets: error %d" % (topic, p, start["ErrorCode"]))
    assert start["ErrorCode"] == k.NONE, (topic, p, start)
    offset = start["Offset"]
    batches = []
    empty_since = None
    while True:
        _, pd = k.fetch(c, topic, p, offset, version=11, partition_max_bytes=4 << 20,
                        timeout=30)
        if pd["ErrorCode"] in MOVED:
            raise _Moved("%s-%d Fetch at %d: error %d" % (topic, p, offset, pd["ErrorCode"]))
        assert pd["ErrorCode"] == k.NONE, (topic, p, offset, pd["ErrorCode"])
        hw = pd["HighWatermark"]
        got = [b for b in k.parse_batches(pd["Records"]) if b.last_offset >= offset]
        if not got and offset < hw:
            # A main that adopted the partition moments ago answers from its view,
            # which applies the adoption up to ~100 ms after it serves: an empty answer
            # below the high watermark then, which clients simply fetch again. Anything
            # longer is missing data.
            now = time.monotonic()
            empty_since = empty_since or now
            assert now - empty_since < 5.0, \
                "no batch at offset %d below the high watermark %d of %s-%d for 5 s" % (
                    offset, hw, topic, p)
            time.sleep(0.2)
            continue
        if empty_since:
            print("%s-%d: offset %d readable after %.2f s of empty answers" % (
                topic, p, offset, time.monotonic() - empty_since))
            empty_since = None
        if not got:
            return start["Offset"], hw, batches
        batches += got
        offset = got[-1].last_offset + 1


# ---------------------------------------------------------------- load and observation

class TimedLoad(crashcheck.ProduceLoad):
    """crashcheck.ProduceLoad (idempotent, acks=all) that also notes when each
    acknowledgement arrived, per partition, and errors reported by the client."""

    def __init__(self, bootstrap, topic, partitions, run_id, extra_conf=None,
                 rate_sleep=0.0005):
        super().__init__(bootstrap, topic, partitions, run_id, extra_conf)
        self.ack_times = {}      # partition -> [monotonic time], in arrival order
        self.errors = []         # (monotonic time, error string) from error_cb
        self.thread = threading.Thread(target=self._run, kwargs={"rate_sleep": rate_sleep},
                                       daemon=True)

    def _on_error(self, err):
        self.errors.append((time.monotonic(), str(err)))
        super()._on_error(err)

    def _on_delivery(self, err, msg):
        super()._on_delivery(err, msg)
        if err is None:
            with self.lock:
                self.ack_times.setdefault(msg.partition(), []).append(time.monotonic())

    def first_ack_after(self, p, t):
        """Monotonic time of the first acknowledgement of partition p after t, or None."""
        with self.lock:
            ts = self.ack_times.get(p, [])
            i = bisect.bisect_right(ts, t)
            return ts[i] if i < len(ts) else None

    def acks_between(self, t0, t1):
        with self.lock:
            return sum(bisect.bisect_left(ts, t1) - bisect.bisect_right(ts, t0)
                       for ts in self.ack_times.values())


def ack_gap(loads, p, t0, t1):
    """The longest time within [t0, t1] during which partition p had no acknowledgement
    from any of the loads."""
    ts = []
    for ld in loads:
        with ld.lock:
            ts += [t for t in ld.ack_times.get(p, []) if t0 <= t <= t1]
    edges = [t0] + sorted(ts) + [t1]
    return max(b - a for a, b in zip(edges, edges[1:]))


def loads_ok(loads):
    """Assertions every load must pass after finish(): no failure anywhere."""
    for ld in loads:
        assert ld.thread_error is None, "producer %s: thread died: %r" % (ld.run_id,
                                                                          ld.thread_error)
        assert not ld.fatal, "producer %s: fatal errors: %r" % (ld.run_id, ld.fatal[:5])
        assert not ld.failed, "producer %s: %d delivery failures, e.g. %r" % (
            ld.run_id, len(ld.failed), ld.failed[:3])


def verify_loads(cl, topic, partitions, loads):
    acked = [a for ld in loads for a in ld.acked]
    produced = set()
    for ld in loads:
        produced |= ld.produced
    return cl.verify(topic, partitions, acked, produced, loads[0].partition_of)


class MetadataSampler:
    """Asks every node for Metadata of `topics` every `interval` s (one thread per node,
    nodes added to the cluster later included) and keeps, per (topic, partition, epoch),
    which leaders were reported, by whom and when."""

    def __init__(self, cluster, topics, interval=0.1):
        self.cluster, self.topics, self.interval = cluster, list(topics), interval
        self.seen = {}           # (topic, p, epoch) -> {leader: [(t, reporter)]}
        self.samples = 0
        self.failures = 0
        self.lock = threading.Lock()
        self.stop_flag = threading.Event()
        self.threads = {}
        self.errors = []
        self.t0 = None
        self.duration = None

    def start(self):
        self.t0 = time.monotonic()
        self.watcher = threading.Thread(target=self._watch, daemon=True)
        self.watcher.start()
        return self

    def _watch(self):
        while not self.stop_flag.is_set():
            for nid, n in list(self.cluster.nodes.items()):
                if nid not in self.threads:
                    t = threading.Thread(target=self._run, args=(n,), daemon=True)
                    self.threads[nid] = t
                    t.start()
            self.stop_flag.wait(0.2)

    def _ask(self, n, c):
        md = k.metadata(c, self.topics, version=12, allow_auto=False)
        t = round(time.monotonic() - self.t0, 2)
        with self.lock:
            self.samples += 1
            for tp in md["Topics"]:
                if tp["ErrorCode"] != k.NONE:
                    continue
                for p in tp["Partitions"]:
                    if p["LeaderId"] < 0:
                        continue
                    key = (tp["Name"], p["PartitionIndex"], p["LeaderEpoch"])
                    self.seen.setdefault(key, {}).setdefault(p["LeaderId"], []).append(
                        (t, n.node_id))

    def _run(self, n):
        c = None
        try:
            while not self.stop_flag.is_set():
                t = time.monotonic()
                if n.alive:
                    try:
                        if c is None:
                            c = k.Conn(n.bootstrap, timeout=1.0)
                        self._ask(n, c)
                    except (OSError, k.ConnectionClosed, k.ProtocolError):
                        if c is not None:
                            c.close()
                        c = None
                        with self.lock:
                            self.failures += 1
                self.stop_flag.wait(max(0.0, self.interval - (time.monotonic() - t)))
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.errors.append(e)
        finally:
            if c is not None:
                c.close()

    def finish(self):
        self.stop_flag.set()
        self.watcher.join(10)
        for t in list(self.threads.values()):
            t.join(10)
        self.duration = time.monotonic() - self.t0
        assert not self.errors, "the Metadata sampler died: %r" % self.errors[:3]

    def summary(self):
        return "%d Metadata samples from %d nodes in %.0f s (%d failed)" % (
            self.samples, len(self.threads), self.duration or 0, self.failures)

    def conflicts(self):
        """[(topic, partition, epoch, {leader: first (t, reporter) samples})] where two
        nodes were reported leader at one epoch."""
        with self.lock:
            return [(t, p, e, {ld: v[:3] for ld, v in leaders.items()})
                    for (t, p, e), leaders in sorted(self.seen.items()) if len(leaders) > 1]


def wait_for(pred, timeout, what, interval=0.1):
    """Polls pred() until it returns a true value (returned); fails saying `what`."""
    deadline = time.time() + timeout
    while True:
        v = pred()
        if v:
            return v
        if time.time() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(interval)
