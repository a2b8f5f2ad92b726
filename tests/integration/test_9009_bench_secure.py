"""`make bench`'s security section (bench/secure.sh) on tiny sizes, so that it cannot rot:
certificates made, skiffd measured over PLAINTEXT and SASL_SSL, Apache Kafka over
SASL_SSL, the report written with every figure, no broker left running. No timing is
judged."""
import json
import os
import shutil
import subprocess

import pytest

import harness

KREF = os.path.join(harness.ROOT, "tools", "kafka-ref.sh")


def test_bench_secure_smoke(tmp_path):
    if harness.external():
        pytest.skip("the benchmark starts its own skiffd and Kafka")
    if not os.path.exists(os.path.join(harness.BUILD, "bench", "skload")):
        pytest.skip("bench/skload is not built (librdkafka-dev missing)")
    if not shutil.which("java"):
        pytest.skip("java is missing (make test-deps)")
    subprocess.run([KREF, "fetch"], check=True, timeout=600)
    env = dict(os.environ, BENCH_SMOKE="1", BENCH_WORK=str(tmp_path), SKIFF_BUILD=harness.BUILD)
    p = subprocess.run([os.path.join(harness.ROOT, "bench", "secure.sh")], env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "bench/secure.sh failed:\n%s\n%s" % (p.stdout[-4000:],
                                                                   p.stderr[-4000:])
    out = tmp_path / "secure"
    report = (out / "report.md").read_text()
    for needle in ("SMOKE", "Skiff, PLAINTEXT", "Skiff, SASL_SSL",
                   "Apache Kafka 4.3.1, SASL_SSL", "(a) p99 ms", "(b) MB/s"):
        assert needle in report, "report lacks %r:\n%s" % (needle, report)
    summary = json.loads((out / "report.json").read_text())
    assert summary["missing"] == []
    for t in ("skiff-plaintext", "skiff-sasl_ssl", "kafka-sasl_ssl"):
        assert summary["targets"][t]["a_p99_ms"] > 0 and summary["targets"][t]["b_mbs"] > 0
    # Both brokers stopped, by their PIDs, before the script returned.
    for who in ("skiffd", "Kafka"):
        pid = int(p.stderr.split("bench/secure: %s pid " % who)[1].split(":")[0])
        assert not running(pid), "%s (pid %d) still runs" % (who, pid)


def running(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
