"""`make bench`'s harness on tiny sizes, so that it cannot rot (no timing is judged)."""
import os
import subprocess

import pytest

import harness


def test_bench_harness_smoke(tmp_path):
    if harness.external():
        pytest.skip("the benchmark starts its own skiffd")
    skload = os.path.join(harness.BUILD, "bench", "skload")
    if not os.path.exists(skload):
        pytest.skip("bench/skload is not built (librdkafka-dev missing)")
    # The security and transactions sections have their own smoke tests, test_9009 and
    # test_2017; the NFS and object store scripts run in bench-compare's, test_6001. One
    # kill is enough to run the failover code of bench/cluster.py (test_7002 kills five).
    env = dict(os.environ, BENCH_SMOKE="1", BENCH_NOBUILD="1", BENCH_WORK=str(tmp_path),
               SKIFF_BUILD=harness.BUILD, BENCH_SECURE="0", BENCH_TXN="0", BENCH_NFS="0",
               BENCH_S3="0", BENCH_CLUSTER_KILLS="1")
    p = subprocess.run([os.path.join(harness.ROOT, "bench", "run.sh")], env=env,
                       capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, "bench/run.sh failed:\n%s\n%s" % (p.stdout[-4000:], p.stderr[-4000:])
    report = (tmp_path / "results" / "report.txt").read_text()
    for needle in ("p99", "RSS", "MB/s"):
        assert needle in report, "report lacks %s:\n%s" % (needle, report)
