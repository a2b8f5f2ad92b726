"""The transactions benchmark (bench/txn.py, a section of `make bench`) on tiny sizes: the
Java transactional producer against skiffd and Apache Kafka, the report written, both
brokers stopped. No timing is judged."""
import json
import os
import subprocess

import pytest

import harness

KREF = os.path.join(harness.ROOT, "tools", "kafka-ref.sh")


def test_txn_bench_smoke(tmp_path):
    if harness.external():
        pytest.skip("the benchmark starts its own skiffd and Kafka")
    # A first download of Kafka from Maven Central must not count against the run.
    subprocess.run([KREF, "fetch"], check=True, timeout=600)
    env = dict(os.environ, BENCH_SMOKE="1", BENCH_WORK=str(tmp_path), SKIFF_BUILD=harness.BUILD)
    p = subprocess.run(["/usr/bin/python3", os.path.join(harness.ROOT, "bench", "txn.py")],
                       env=env, capture_output=True, text=True, timeout=240)
    assert p.returncode == 0, "bench/txn.py failed:\n%s\n%s" % (p.stdout[-4000:],
                                                                 p.stderr[-4000:])
    out = tmp_path / "txn" / "results"
    text = (out / "report.txt").read_text()
    assert "SMOKE RUN" in text and "commit p99 ms" in text, text
    rep = json.loads((out / "report.json").read_text())
    assert sorted(rep["results"]) == ["kafka", "skiff"], rep
    for target, r in rep["results"].items():
        assert r["transactions"] > 0 and r["records"] == r["transactions"] * 10, (target, r)
        assert 0 < r["commit_p50_ms"] <= r["commit_p99_ms"] <= r["commit_max_ms"], (target, r)
        assert target in text, text
    # Both brokers were stopped before the script returned.
    st = subprocess.run([KREF, "status", str(tmp_path / "txn" / "kafka")], timeout=30)
    assert st.returncode != 0, "Kafka still runs"
    assert "skiffd" not in subprocess.run(
        ["pgrep", "-a", "-f", str(tmp_path / "txn" / "skiff")], capture_output=True,
        text=True).stdout
