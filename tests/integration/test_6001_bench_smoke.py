"""`make bench-compare`'s harness on tiny sizes: skiffd and Apache Kafka started, every
workload run against Skiff, Kafka default and Kafka flush.messages=1, the report (and the
plots, when gnuplot is installed) written, nothing left running. No timing is judged."""
import json
import os
import shutil
import subprocess
import time

import pytest

import harness

KREF = os.path.join(harness.ROOT, "tools", "kafka-ref.sh")


def pids_of(pattern):
    out = subprocess.run(["pgrep", "-f", pattern], capture_output=True, text=True).stdout
    return {int(x) for x in out.split()}


def test_bench_compare_smoke(tmp_path):
    if harness.external():
        pytest.skip("the benchmark starts its own skiffd and Kafka")
    if not os.path.exists(os.path.join(harness.BUILD, "bench", "skload")):
        pytest.skip("bench/skload is not built (librdkafka-dev missing)")
    if not shutil.which("java"):
        pytest.skip("java is missing (make test-deps)")
    # A first download of Kafka from Maven Central must not count against the run.
    subprocess.run([KREF, "fetch"], check=True, timeout=600)

    work = tmp_path / "compare"
    env = dict(os.environ, BENCH_SMOKE="1", BENCH_NOBUILD="1", BENCH_WORK=str(work),
               SKIFF_BUILD=harness.BUILD)
    t0 = time.monotonic()
    p = subprocess.run([os.path.join(harness.ROOT, "bench", "compare.sh")], env=env,
                       capture_output=True, text=True, timeout=240)
    took = time.monotonic() - t0
    print("bench/compare.sh smoke run: %.1f s" % took)
    assert p.returncode == 0, "bench/compare.sh failed:\n%s\n%s" % (p.stdout[-4000:],
                                                                     p.stderr[-4000:])
    out = work / "results"
    report = (out / "report.md").read_text()
    for needle in ("SMOKE RUN", "(a) produce latency p99", "(b) 16 KiB max throughput",
                   "(c) end-to-end latency p99", "(d) catch-up read", "(e) idle RSS",
                   "Skiff / Kafka fsync", "Disk floor", "Load average"):
        assert needle in report, "report lacks %r:\n%s" % (needle, report)
    summary = json.loads((out / "report.json").read_text())
    assert not summary["missing"], summary["missing"]
    for target in ("skiff", "kafka", "kafka-fsync"):
        s = summary["summary"][target]
        for key in ("a_p99", "b1k_mbs", "b16k_mbs", "c_p99", "d_mbs", "idle_rss"):
            assert key in s and s[key]["median"] > 0, (target, key, s.get(key))
    # The fsync target's topics really carry flush.messages=1 (skload created them).
    log = (out / "runs" / "r1" / "kafka-fsync" / "a.json").read_text()
    assert json.loads(log)["acked"] > 0
    if shutil.which("gnuplot"):
        for png in ("produce_latency_cdf", "e2e_latency_cdf", "throughput", "resources"):
            assert (out / "plots" / (png + ".png")).stat().st_size > 1000, png
    # Both brokers stopped, by their PIDs, before the script returned.
    assert not pids_of("kafka.Kafka %s" % work), "Kafka left running"
    assert not pids_of("data.dir=%s" % work), "skiffd left running"
