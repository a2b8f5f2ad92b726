"""`make bench-compare`'s harness on tiny sizes: skiffd (production-shaped, with its objects
in the S3 emulator on a tmpfs, and all on one disk) and Apache Kafka started, every workload
run against both Skiffs, Kafka default and Kafka flush.messages=1, the NFS and object store
sections run, the report with every figure of the performance targets (and the plots, when
gnuplot is installed) written, nothing left running. No timing is judged."""
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
                       capture_output=True, text=True, timeout=300)
    took = time.monotonic() - t0
    print("bench/compare.sh smoke run: %.1f s" % took)
    assert p.returncode == 0, "bench/compare.sh failed:\n%s\n%s" % (p.stdout[-4000:],
                                                                     p.stderr[-4000:])
    out = work / "results"
    report = (out / "report.md").read_text()
    for needle in ("SMOKE RUN", "(a) produce latency p99", "(b) 16 KiB max throughput",
                   "(c) end-to-end latency p99", "(d) catch-up read", "(e) idle RSS",
                   "(l) produce latency p99", "(e) loaded RSS during (b)",
                   "Skiff prod / Kafka fsync", "Skiff 1 disk / Kafka", "Disk floor", "Socket floor",
                   "Load average", "WAL on NFS (bench/nfs.sh)", "from objects (bench/s3.sh)",
                   "### Targets"):
        assert needle in report, "report lacks %r:\n%s" % (needle, report)
    summary = json.loads((out / "report.json").read_text())
    # The production-shaped target's emulator: s3emu, s3rver only where Go is missing.
    params = json.loads((out / "params.json").read_text())
    go = shutil.which("go") or os.path.exists("/usr/local/go/bin/go")
    assert params["s3_emulator"] == ("s3emu" if go else "s3rver"), params
    assert not summary["missing"], summary["missing"]
    for target in ("skiff-s3", "skiff", "kafka", "kafka-fsync"):
        s = summary["summary"][target]
        for key in ("a_p99", "b1k_mbs", "b16k_mbs", "c_p99", "d_mbs", "d2_mbs", "idle_rss",
                    "l_p99", "loaded_rss"):
            assert key in s and s[key]["median"] > 0, (target, key, s.get(key))
        # CPU from /proc ticks (10 ms) over 1 s runs: present, but may round to 0; tail
        # reads are (c)'s CPU minus (a)'s, a difference such short runs leave to noise.
        for key in ("b1k_cpu_gb", "b16k_cpu_gb", "d_cpu_gb", "d2_cpu_gb"):
            assert key in s and s[key]["median"] >= 0, (target, key, s.get(key))
        assert "tail_cpu_gb" in s, (target, sorted(s))
    for target in ("skiff-s3", "skiff"):
        assert summary["summary"][target]["rss_bound"]["median"] > 0
    # Who used the cores during (b): the whole machine for every target; the emulator,
    # which shares them, for the production-shaped one (the one that puts objects to it).
    for target in ("skiff-s3", "skiff", "kafka", "kafka-fsync"):
        s = summary["summary"][target]
        for key in ("b1k_busy", "b16k_busy"):
            assert 0 < s[key]["median"] <= os.cpu_count() + 0.5, (target, key, s.get(key))
        assert ("b16k_emu_cores" in s) == (target == "skiff-s3"), (target, sorted(s))
        assert s["d_fault_mib"]["median"] >= 0, (target, s.get("d_fault_mib"))
    s = summary["summary"]["skiff-s3"]
    assert s["b1k_emu_cores"]["median"] >= 0 and s["b16k_emu_cores"]["median"] >= 0, s
    assert "S3 emulator CPU s per GB it stored during (b) 16 KiB" in report
    fm = json.loads((out / "freshmem.json").read_text())
    assert fm["mib"] == 64 and fm["mb_s"] > 0 and fm["cpu_s_per_gb"] >= 0, fm
    assert "Fresh memory (`bench/freshmem.py`)" in report
    # (l) once more from bench/synclat.py's one synchronous client, on every broker.
    for target in ("skiff-s3", "skiff", "kafka", "kafka-fsync"):
        s = summary["summary"][target]
        assert s["lsync_p99"]["median"] > 0 and s["lsvc_p99"]["median"] > 0, (target, sorted(s))
    assert "one synchronous client (synclat.py)" in report
    # (l) ran after the harness waited for a quiet broker and disk, and said what it saw:
    # Skiff's upload lag read from its metrics endpoint, the page cache for every target.
    for target in ("skiff-s3", "skiff", "kafka", "kafka-fsync"):
        q = (out / "runs" / "r1" / target / "quiesce_l.txt").read_text().split()
        assert q[0] == "waited_s" and int(q[1]) >= 0 and "dirty_kib" in q, (target, q)
        lag = q[q.index("upload_lag_bytes") + 1]
        assert (lag != "na") == target.startswith("skiff"), (target, q)
        assert "quiesce_s" in summary["summary"][target], target
    assert "(l) ran on a quiesced broker and disk" in report
    for sec, keys in (("nfs", ("p99", "raw_p99", "mbs", "seq_mbs", "sync_p99")),
                      ("s3", ("catchup_mbs", "raw_best_mbs"))):
        fig = summary["sections"][sec]["r1"]
        for key in keys:
            assert fig[key] > 0, (sec, key, fig)
    # The object store section reads from the production-shaped target's emulator, and
    # says who used the cores during its catch-up.
    s3 = summary["sections"]["s3"]["r1"]
    assert s3["emulator"] == params["s3_emulator"], (s3, params)
    assert s3["busy_cores"] >= 0 and s3["skiffd_s_gb"] >= 0 and s3["emulator_s_gb"] >= 0, s3
    assert "cores busy" in report
    # Every target of the performance issue has its row, measured (a positive ratio and
    # a label), but the CPU ones that the ticks of a smoke run may leave without a ratio.
    rows = summary["targets"]
    assert len(rows) == 25, [r["figure"] for r in rows]
    for r in rows:
        if "broker CPU" in r["figure"]:
            assert r["label"] in ("PASS", "MISS", "n/a"), r
            continue
        assert r["median"] > 0 and r["label"] in ("PASS", "MISS"), r
    for fig in ("CPU per GB acknowledged, 1 KiB", "CPU per GB acknowledged, 16 KiB",
                "CPU per GB read, catch-up", "CPU per GB read, tail", "(a) / Kafka default",
                "(l) / disk 4 KiB append", "1 KiB / Kafka default", "synced 1 MiB sequential",
                "/ Kafka flush.messages=1", "WAL on NFS: throughput", "WAL on NFS: produce p99",
                "best raw ranged GET", "catch-up (d)", "loaded RSS during (b) / Kafka",
                "configured bound"):
        assert any(fig in r["figure"] for r in rows), fig
    # The fsync target's topics really carry flush.messages=1 (skload created them).
    log = (out / "runs" / "r1" / "kafka-fsync" / "a.json").read_text()
    assert json.loads(log)["acked"] > 0
    if shutil.which("gnuplot"):
        for png in ("produce_latency_cdf", "e2e_latency_cdf", "throughput", "resources",
                    "targets"):
            assert (out / "plots" / (png + ".png")).stat().st_size > 1000, png
    # Both brokers stopped, by their PIDs, before the script returned.
    assert not pids_of("kafka.Kafka %s" % work), "Kafka left running"
    assert not pids_of("data.dir=%s" % work), "skiffd left running"
    assert not pids_of("s3rver/server.js %s" % work), "S3 emulator left running"
    assert not pids_of("s3emu -dir %s" % work), "S3 emulator left running"
    assert not pids_of("ganesha.nfsd.*%s" % work), "NFS-Ganesha left running"
    assert not os.path.ismount(str(work / "s3tmpfs")), "tmpfs left mounted"
