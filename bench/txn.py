#!/usr/bin/env python3
"""make bench, transactions section: the Java transactional producer (tests/java TxnBench,
kafka-clients 4.3.1) against one skiffd and against Apache Kafka 4.3.1 on the same
machine, default and with log.flush.interval.messages=1 (Kafka fsyncs every append, as
Skiff acknowledges only what is durable). For each: transactions per second, records and
MB per second, and the latency of commitTransaction (p50, p99, max). Nothing is judged.

Environment (defaults in brackets; BENCH_SMOKE=1 shrinks it to a few seconds a target):
  SKIFF_BUILD=dir            [build] where skiffd is
  BENCH_WORK=dir             [bench/.work] results in DIR/txn/results (report.txt, .json)
  BENCH_TXN_TARGETS="..."    [skiff kafka kafka-fsync; smoke: skiff kafka]
  BENCH_TXN_DURATION=s       [20; smoke 2] measured seconds per target
  BENCH_WARMUP=s             [5; smoke 0.5]
  BENCH_TXN_RECORDS=n        [100; smoke 10] records per transaction
  BENCH_SIZE=bytes           [1024] record size
  BENCH_PARTITIONS=n         [4] partitions of the topic, each transaction writes to all
Exit status: 0 measured, 1 the harness failed.
"""

import json
import os
import signal
import subprocess
import sys
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration", "clients"))
sys.path.insert(0, os.path.join(ROOT, "tests", "integration"))
import harness  # noqa: E402
import ktest  # noqa: E402

SMOKE = os.environ.get("BENCH_SMOKE") == "1"
BUILD = os.path.abspath(os.environ.get("SKIFF_BUILD", os.path.join(ROOT, "build")))
WORK = os.path.join(os.path.abspath(os.environ.get("BENCH_WORK", os.path.join(ROOT, "bench",
                                                                               ".work"))), "txn")
KREF = os.path.join(ROOT, "tools", "kafka-ref.sh")
TARGETS = os.environ.get("BENCH_TXN_TARGETS", "skiff kafka" if SMOKE else
                         "skiff kafka kafka-fsync").split()
DURATION = float(os.environ.get("BENCH_TXN_DURATION", "2" if SMOKE else "20"))
WARMUP = float(os.environ.get("BENCH_WARMUP", "0.5" if SMOKE else "5"))
RECORDS = int(os.environ.get("BENCH_TXN_RECORDS", "10" if SMOKE else "100"))
SIZE = int(os.environ.get("BENCH_SIZE", "1024"))
PARTS = int(os.environ.get("BENCH_PARTITIONS", "4"))


def say(msg):
    sys.stderr.write("bench-txn: %s\n" % msg)


class Skiff:
    def __init__(self, d):
        self.dir, self.port, self.proc = d, harness.free_port(), None

    def start(self):
        os.makedirs(self.dir, exist_ok=True)
        log = open(os.path.join(self.dir, "skiffd.log"), "ab")
        bs = "127.0.0.1:%d" % self.port
        self.proc = subprocess.Popen(
            [os.path.join(BUILD, "skiffd"), "--override", "node.id=1",
             "--override", "data.dir=" + os.path.join(self.dir, "data"),
             "--override", "listeners=PLAINTEXT://" + bs,
             "--override", "advertised.listeners=PLAINTEXT://" + bs],
            stdout=log, stderr=subprocess.STDOUT, cwd=self.dir)
        log.close()
        harness.wait_port("127.0.0.1", self.port, 30, self.proc)
        return bs

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


class Kafka:
    def __init__(self, d, props=""):
        self.dir, self.port, self.props = d, harness.free_port(), props

    def start(self):
        env = dict(os.environ, KAFKA_REF_PROPS=self.props)
        subprocess.run([KREF, "start", self.dir, str(self.port)], env=env, check=True,
                       timeout=180, stdout=subprocess.DEVNULL)
        return "127.0.0.1:%d" % self.port

    def stop(self):
        subprocess.run([KREF, "stop", self.dir], timeout=60, stdout=subprocess.DEVNULL)


def broker(target):
    d = os.path.join(WORK, target)
    subprocess.run(["rm", "-rf", d], check=True)
    if target == "skiff":
        return Skiff(d)
    if target == "kafka":
        return Kafka(d)
    if target == "kafka-fsync":
        return Kafka(d, "log.flush.interval.messages=1")
    raise SystemExit("unknown target %s" % target)


def measure(target, cp):
    b = broker(target)
    bs = b.start()
    try:
        topic = "txnbench"
        ktest.create_topic(bs, topic, partitions=PARTS)
        p = ktest.run(["java", "-XX:+UseSerialGC", "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn",
                       "-cp", cp, "io.skiff.clients.TxnBench", "--timeout",
                       str(int(WARMUP + DURATION + 60)), "-b", bs, "-t", topic,
                       "-x", "txnbench-" + target, "-r", str(RECORDS), "-s", str(SIZE),
                       "-p", str(PARTS), "-w", str(WARMUP), "-d", str(DURATION)],
                      timeout=WARMUP + DURATION + 90, check=False, what="TxnBench")
        res = [json.loads(x) for x in p.stdout.decode(errors="replace").splitlines()
               if x.startswith('{"op":"txnbench"')]
        if p.returncode != 0 or not res or res[0]["transactions"] == 0:
            raise RuntimeError("TxnBench against %s: exit %d\n%s" % (
                target, p.returncode, ktest.tail(p.stderr, 3000)))
        return res[0]
    finally:
        b.stop()


def report(results):
    lines = ["Transactions: Java transactional producer (kafka-clients 4.3.1), %d records of "
             "%d bytes per transaction over %d partitions, %.0f s measured after %.1f s "
             "warm-up%s" % (RECORDS, SIZE, PARTS, DURATION, WARMUP,
                            "  ** SMOKE RUN: figures mean nothing **" if SMOKE else ""),
             "",
             "%-12s %10s %12s %8s %14s %14s %14s" % ("target", "txn/s", "records/s", "MB/s",
                                                     "commit p50 ms", "commit p99 ms",
                                                     "commit max ms")]
    for t, r in results.items():
        lines.append("%-12s %10.1f %12.0f %8.2f %14.2f %14.2f %14.2f" % (
            t, r["txn_per_s"], r["records_per_s"], r["mb_per_s"], r["commit_p50_ms"],
            r["commit_p99_ms"], r["commit_max_ms"]))
    try:
        lines += ["", "load average: %s" % open("/proc/loadavg").read().strip()]
    except OSError:
        pass
    return "\n".join(lines) + "\n"


def main():
    out = os.path.join(WORK, "results")
    os.makedirs(out, exist_ok=True)
    cp = ktest.build_java()
    results = {}
    for t in TARGETS:
        say("measuring %s" % t)
        try:
            results[t] = measure(t, cp)
        except Exception as e:  # noqa: BLE001 - any failure of the harness is reported
            say("FAILED: %s" % e)
            return 1
    text = report(results)
    with open(os.path.join(out, "report.txt"), "w") as f:
        f.write(text)
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump({"smoke": SMOKE, "records_per_txn": RECORDS, "record_size": SIZE,
                   "partitions": PARTS, "duration_s": DURATION, "results": results}, f, indent=1)
    sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
