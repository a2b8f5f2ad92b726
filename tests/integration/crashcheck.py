"""Crash scenarios and the log checks that judge them.

A scenario drives a *node* (anything with .bootstrap, .kill() = SIGKILL and .start()
on the same data and port: harness.Broker, or KafkaRefNode below) while clients work
against it, then reads every partition back with raw Fetch requests and checks the
invariants of DESIGN.md: every acknowledged record is at its acknowledged offset with
its value, offsets are contiguous from the log start, nothing is written twice, and
every stored batch is intact.

Run as a script it plays the same scenarios against Apache Kafka started by
tools/kafka-ref.sh, to check the checker:

    python3 tests/integration/crashcheck.py --kafka-dir /tmp/kref --port 19192
"""

import argparse
import os
import random
import signal
import subprocess
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import kproto as k  # noqa: E402


# ---------------------------------------------------------------- reading the log back

def connect(bootstrap, timeout=60.0):
    """A connection, retried while the node is (re)starting."""
    deadline = time.time() + timeout
    while True:
        try:
            c = k.Conn(bootstrap, timeout=15)
            k.api_versions(c, 0)
            return c
        except (OSError, k.ConnectionClosed, k.ProtocolError):
            if time.time() > deadline:
                raise
            time.sleep(0.1)


def read_partition(c, topic, partition, version=11):
    """(log start, high watermark, [Batch]) of a whole partition."""
    start = k.list_offsets(c, topic, partition, -2)
    assert start["ErrorCode"] == k.NONE, start
    offset = start["Offset"]
    batches = []
    hw = None
    while True:
        _, p = k.fetch(c, topic, partition, offset, version=version,
                       partition_max_bytes=4 << 20)
        assert p["ErrorCode"] == k.NONE, (topic, partition, offset, p["ErrorCode"])
        hw = p["HighWatermark"]
        got = [b for b in k.parse_batches(p["Records"]) if b.last_offset >= offset]
        if not got:
            assert offset >= hw, "no batch at offset %d below the high watermark %d of %s-%d" % (
                offset, hw, topic, partition)
            return start["Offset"], hw, batches
        batches += got
        offset = got[-1].last_offset + 1


class LogProblems(AssertionError):
    pass


def check_partition(log_start, hw, batches):
    """Offsets contiguous from log_start to hw, intact batches. Returns {offset: value}."""
    problems = []
    values = {}
    expect = log_start
    for b in batches:
        if not b.crc_ok:
            problems.append("CRC mismatch in %r" % b)
        if b.magic != 2:
            problems.append("magic %d in %r" % (b.magic, b))
        if b.base_offset > expect:
            problems.append("gap: offsets %d..%d missing" % (expect, b.base_offset - 1))
        elif b.base_offset < expect and b.last_offset >= expect and expect != log_start:
            problems.append("overlap at %d: %r" % (expect, b))
        if b.records is None:
            problems.append("unreadable records in %r" % b)
            continue
        deltas = [r.offset_delta for r in b.records]
        if deltas != list(range(b.records_count)) or b.last_offset_delta != b.records_count - 1:
            problems.append("offset deltas %r in %r" % (deltas[:10], b))
        for off, v in b.offsets_values():
            if off >= log_start:
                values[off] = v
        expect = b.last_offset + 1
    if batches and expect != hw:
        problems.append("last offset %d + 1 != high watermark %d" % (expect - 1, hw))
    if not batches and hw != log_start:
        problems.append("no batches but log start %d, high watermark %d" % (log_start, hw))
    return values, problems


def verify(bootstrap, topic, partitions, acked, produced_values=None, partition_of=None):
    """Checks a topic against the acknowledgements (partition, offset, value).

    produced_values: every value the clients tried to write (acknowledged or not);
    partition_of(value) -> the partition it was sent to. Returns a stats dict and
    raises LogProblems listing every violation."""
    problems = []
    logs = {}
    with connect(bootstrap) as c:
        for p in range(partitions):
            start, hw, batches = read_partition(c, topic, p)
            values, probs = check_partition(start, hw, batches)
            problems += ["%s-%d: %s" % (topic, p, x) for x in probs]
            logs[p] = (start, hw, values)
    for p, off, v in acked:
        start, hw, values = logs[p]
        if off < start:
            continue  # retention may remove old data; none of these tests use it
        got = values.get(off)
        if got != v:
            problems.append("acknowledged %r at %s-%d offset %d, log has %r" % (
                v, topic, p, off, got))
    seen = {}
    for p, (_, _, values) in logs.items():
        for off, v in values.items():
            if v in seen:
                problems.append("value %r twice: %s and %s" % (v, seen[v], (p, off)))
            seen[v] = (p, off)
            if produced_values is not None and v not in produced_values:
                problems.append("value %r at %d-%d was never produced" % (v, p, off))
            elif partition_of is not None and partition_of(v) != p:
                problems.append("value %r in partition %d, sent to %d" % (v, p, partition_of(v)))
    stats = {"records": len(seen), "acked": len(acked),
             "per_partition": {p: hw - s for p, (s, hw, _) in logs.items()}}
    if problems:
        raise LogProblems("%d problem(s):\n  %s" % (len(problems), "\n  ".join(problems[:50])))
    return stats


# ---------------------------------------------------------------- scenarios

class ProduceLoad:
    """A confluent-kafka idempotent acks=all producer writing unique values
    (run id + sequence number; partition = sequence % partitions) in a thread."""

    def __init__(self, bootstrap, topic, partitions, run_id, extra_conf=None):
        from confluent_kafka import Producer
        conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
                "linger.ms": 5, "message.timeout.ms": 300000,
                "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 300,
                "retry.backoff.ms": 50, "topic.metadata.refresh.interval.ms": 2000,
                "socket.connection.setup.timeout.ms": 5000}
        conf.update(extra_conf or {})
        if os.environ.get("SKIFF_RDK_DEBUG"):
            conf["debug"] = os.environ["SKIFF_RDK_DEBUG"]
        self.topic, self.partitions, self.run_id = topic, partitions, run_id
        self.producer = Producer(dict(conf, error_cb=self._on_error))
        self.acked = []          # (partition, offset, value)
        self.failed = []         # (value, error)
        self.fatal = []
        self.thread_error = None
        self.produced = set()
        self.stop_flag = threading.Event()
        self.lock = threading.Lock()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def value(self, seq):
        return b"%s-%09d" % (self.run_id.encode(), seq)

    def partition_of(self, value):
        return int(value.rsplit(b"-", 1)[1]) % self.partitions

    def _on_error(self, err):
        if err.fatal():
            self.fatal.append(str(err))

    def _on_delivery(self, err, msg):
        with self.lock:
            if err is None:
                self.acked.append((msg.partition(), msg.offset(), msg.value()))
            else:
                self.failed.append((msg.value(), str(err)))

    def _run(self, rate_sleep=0.0005):
        from confluent_kafka import KafkaException
        seq = 0
        try:
            while not self.stop_flag.is_set():
                v = self.value(seq)
                try:
                    self.producer.produce(self.topic, value=v, partition=seq % self.partitions,
                                          on_delivery=self._on_delivery)
                except BufferError:
                    self.producer.poll(0.05)
                    continue
                except KafkaException as e:
                    # metadata not (yet) showing every partition, e.g. right after a
                    # restart: the client refuses locally; try the same value again
                    if e.args[0].code() != -190:     # _UNKNOWN_PARTITION
                        raise
                    self.producer.poll(0.1)
                    continue
                self.produced.add(v)
                seq += 1
                self.producer.poll(0)
                if len(self.producer) > 2000:
                    self.producer.poll(0.02)
                elif rate_sleep:
                    time.sleep(rate_sleep)
        except Exception as e:  # noqa: BLE001 - reported by finish()
            self.thread_error = e

    def start(self):
        self.thread.start()
        return self

    def acked_count(self):
        with self.lock:
            return len(self.acked)

    def finish(self, timeout=90.0):
        self.stop_flag.set()
        self.thread.join(10)
        left = self.producer.flush(timeout)
        return left


def produce_through_kills(node, topic, partitions=4, kills=5, seed=None, gap=(0.8, 2.5),
                          down=(0.0, 0.3), log=print):
    """Continuous idempotent produce while `node` is SIGKILLed and restarted `kills`
    times; then verifies the topic. Returns the stats."""
    rnd = random.Random(seed)
    with connect(node.bootstrap) as c:
        k.create_topic(c, topic, partitions)
    load = ProduceLoad(node.bootstrap, topic, partitions, "r%d" % rnd.randrange(1 << 30))
    load.start()
    progress = []
    try:
        # the first kill falls on a producer that has started: a cold client
        # (imports, first metadata) can take longer than the shortest gap
        deadline = time.time() + 30
        while load.acked_count() == 0 and time.time() < deadline:
            time.sleep(0.05)
        for i in range(kills):
            time.sleep(rnd.uniform(*gap))
            before = load.acked_count()
            node.kill()
            time.sleep(rnd.uniform(*down))
            node.start()
            progress.append(before)
            log("kill %d: %d acknowledged before it" % (i + 1, before))
        # let the producer get going again after the last restart
        deadline = time.time() + 30
        while load.acked_count() <= progress[-1] + 100 and time.time() < deadline:
            time.sleep(0.1)
        time.sleep(0.5)
    finally:
        left = load.finish()
    assert load.thread_error is None, "producer thread died: %r" % load.thread_error
    assert not load.fatal, "fatal producer errors: %r" % load.fatal[:5]
    assert left == 0, "%d messages still undelivered" % left
    assert not load.failed, "%d delivery failures, e.g. %r" % (len(load.failed), load.failed[:3])
    assert all(b < a for a, b in zip(progress[1:], progress)), \
        "the producer made no progress between some kills: %r" % progress
    assert load.acked_count() > progress[-1], "nothing acknowledged after the last restart"
    stats = verify(node.bootstrap, topic, partitions, load.acked, load.produced,
                   load.partition_of)
    stats["kills"] = kills
    stats["acked_before_kills"] = progress
    log("produce-through-kills: %r" % stats)
    return stats


def create_topics_through_kills(node, prefix, kills=3, seed=None, gap=(0.2, 1.0), log=print):
    """Creates topics one by one (partition counts 1..4) while the node is SIGKILLed;
    afterwards every acknowledged topic exists whole, no topic exists half-made,
    and every partition takes writes."""
    rnd = random.Random(seed)
    acked = {}            # name -> partitions
    attempted = {}
    stop = threading.Event()
    errors = []

    def creator():
        i = 0
        c = None
        while not stop.is_set():
            name = "%s-%d" % (prefix, i)
            parts = i % 4 + 1
            attempted[name] = parts
            try:
                if c is None:
                    c = connect(node.bootstrap, timeout=60)
                r = k.create_topics(c, [(name, parts, 1)], timeout_ms=10000)["Topics"][0]
            except (OSError, k.ConnectionClosed, k.ProtocolError):
                if c is not None:
                    c.close()
                c = None
                time.sleep(0.05)
                continue            # same name again: it may or may not exist now
            time.sleep(0.005)   # a few hundred topics suffice; the kill moment matters
            if r["ErrorCode"] == k.NONE:
                acked[name] = parts
            elif r["ErrorCode"] == k.TOPIC_ALREADY_EXISTS:
                acked[name] = parts     # created before the crash, answer lost
            else:
                errors.append((name, r["ErrorCode"], r["ErrorMessage"]))
            i += 1
        if c is not None:
            c.close()

    t = threading.Thread(target=creator, daemon=True)
    t.start()
    try:
        for n in range(kills):
            time.sleep(rnd.uniform(*gap))
            node.kill()
            node.start()
            log("topic-creation kill %d: %d topics acknowledged" % (n + 1, len(acked)))
        time.sleep(0.5)
    finally:
        stop.set()
        t.join(90)
    assert not t.is_alive(), "topic creator stuck"
    assert not errors, "CreateTopics errors: %r" % errors[:5]
    problems = []
    with connect(node.bootstrap) as c:
        # Kafka's brokers learn new topics from the controller asynchronously: give the
        # metadata a few seconds to show every acknowledged topic
        deadline = time.time() + 15
        while True:
            md = k.metadata(c, None, version=9, allow_auto=False)
            present = {tp["Name"]: tp for tp in md["Topics"]
                       if tp["Name"].startswith(prefix + "-")}
            if set(acked) <= set(present) or time.time() > deadline:
                break
            time.sleep(0.2)
        for name, parts in acked.items():
            if name not in present:
                problems.append("acknowledged topic %s missing" % name)
        for name, tp in present.items():
            want = attempted.get(name)
            got = sorted(p["PartitionIndex"] for p in tp["Partitions"])
            if want is None:
                problems.append("topic %s was never requested" % name)
            elif tp["ErrorCode"] != k.NONE or got != list(range(want)):
                problems.append("topic %s: error %d, partitions %r, want %d" % (
                    name, tp["ErrorCode"], got, want))
        if not problems:
            for name, tp in present.items():
                k.wait_topic(c, name, attempted[name])
                for p in range(attempted[name]):
                    pr = k.produce(c, name, p, k.batch([b"after-crash"]))
                    if pr["ErrorCode"] != k.NONE:
                        problems.append("produce to %s-%d: %d" % (name, p, pr["ErrorCode"]))
                r = k.create_topics(c, [(name, 1, 1)])["Topics"][0]
                if r["ErrorCode"] != k.TOPIC_ALREADY_EXISTS:
                    problems.append("re-creating %s: %d" % (name, r["ErrorCode"]))
    if problems:
        raise LogProblems("%d problem(s):\n  %s" % (len(problems), "\n  ".join(problems[:50])))
    stats = {"acked_topics": len(acked), "present": len(present), "kills": kills}
    log("create-topics-through-kills: %r" % stats)
    return stats


# ---------------------------------------------------------------- Kafka as the node

class KafkaRefNode:
    """Apache Kafka from tools/kafka-ref.sh, killed with SIGKILL like skiffd."""

    def __init__(self, directory, port):
        self.dir, self.port = directory, port
        self.bootstrap = "127.0.0.1:%d" % port
        root = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
        self.script = os.environ.get("KAFKA_REF_SCRIPT",
                                     os.path.join(root, "tools", "kafka-ref.sh"))
        self.env = dict(os.environ, KAFKA_REF_CONTROLLER_PORT=str(port + 1),
                        KAFKA_REF_HEAP=os.environ.get("KAFKA_REF_HEAP", "-Xmx768m"))

    def start(self):
        subprocess.run([self.script, "start", self.dir, str(self.port)], env=self.env,
                       check=True)

    def kill(self):
        with open(os.path.join(self.dir, "kafka.pid")) as f:
            pid = int(f.read())
        os.kill(pid, signal.SIGKILL)
        while os.path.exists("/proc/%d" % pid):
            try:
                os.waitpid(pid, os.WNOHANG)
            except ChildProcessError:
                pass
            time.sleep(0.05)

    def stop(self):
        subprocess.run([self.script, "stop", self.dir], env=self.env, check=False)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kafka-dir", required=True)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--kills", type=int, default=3)
    ap.add_argument("--seed", type=int, default=None)
    a = ap.parse_args()
    node = KafkaRefNode(a.kafka_dir, a.port)
    node.start()
    try:
        tag = "%06x" % random.randrange(1 << 24)
        produce_through_kills(node, "crash-" + tag, kills=a.kills, seed=a.seed,
                              gap=(8, 12), down=(0, 0.2))
        create_topics_through_kills(node, "ctk-" + tag, kills=2, seed=a.seed, gap=(2, 4))
    finally:
        node.stop()


if __name__ == "__main__":
    main()
