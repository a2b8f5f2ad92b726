"""An idempotent librdkafka (2.0.2) producer: every delivery report is read back at its offset.

clients/rdk_produce.c produces with acks=all and enable.idempotence=true, keeps
each delivery report's partition and offset, then reads the partitions back
with the legacy per-partition consumer and checks each record at the place
its report gave. The test also checks that librdkafka obtained a producer id
(InitProducerId) and that the broker stored batches carrying that id with
gap-free sequence numbers, so idempotence was really in use.
"""

import json
import os
import re
import shutil
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import ktest  # noqa: E402
import kwire  # noqa: E402

SRC = os.path.join(ktest.HERE, "rdk_produce.c")


@pytest.fixture(scope="module")
def rdk_produce():
    """build/tests/rdk_produce when it is up to date, else compiled here from the source."""
    built = os.path.join(harness.BUILD, "tests", "rdk_produce")
    if os.path.exists(built) and os.path.getmtime(built) >= os.path.getmtime(SRC):
        return built
    out = os.path.join(ktest.WORK, "bin", "rdk_produce")
    os.makedirs(os.path.dirname(out), exist_ok=True)
    cc = shutil.which("cc") or shutil.which("gcc")
    flags = ktest.run(["pkg-config", "--cflags", "--libs", "rdkafka"], timeout=30).stdout.decode().split()
    ktest.run([cc, "-std=c11", "-D_GNU_SOURCE", "-O2", "-Wall", "-Wextra", "-Werror", "-o", out, SRC]
              + flags, timeout=120, what="cc rdk_produce.c")
    return out


@pytest.mark.parametrize("partitions,count", [(1, 20000), (3, 30000)])
def test_idempotent_produce_then_read_at_reported_offsets(broker, topic_name, rdk_produce,
                                                          partitions, count):
    ktest.create_topic(broker.bootstrap, topic_name, partitions=partitions)
    p = ktest.run([rdk_produce, "-b", broker.bootstrap, "-t", topic_name, "-n", str(count),
                   "-P", str(partitions), "-T", "90", "-X", "debug=eos,feature,broker"],
                  timeout=120, check=False)
    out, err = p.stdout.decode(errors="replace"), p.stderr.decode(errors="replace")
    problems = "\n".join(line for line in err.splitlines() if not line.startswith("%7|"))
    assert p.returncode == 0, "rdk_produce exited %d\n%s\nproblems:\n%s\nlog tail:\n%s" % (
        p.returncode, out, ktest.tail(problems), ktest.tail(err))
    summary = json.loads(out.strip().splitlines()[-1])
    assert summary["ok"] and summary["read"] == count

    assert "Enabling feature IdempotentProducer" in err, "librdkafka did not enable idempotence"
    m = re.search(r"Acquired PID\{Id:(\d+),Epoch:(\d+)\}", err)
    assert m, "no producer id acquired (InitProducerId):\n" + ktest.tail(err)
    pid, epoch = int(m.group(1)), int(m.group(2))

    # A fresh topic: offsets per partition are exactly 0..count-1 (contiguous, no gaps).
    for part in summary["partitions"]:
        assert part["min_offset"] == 0 and part["max_offset"] == part["count"] - 1, part
    assert sum(part["count"] for part in summary["partitions"]) == count

    # The broker stored the producer id, epoch and gap-free sequences in the batch headers.
    for part in range(partitions):
        batches = kwire.all_batches(broker.bootstrap, topic_name, part)
        seq = 0
        for b in batches:
            assert (b["producer_id"], b["producer_epoch"]) == (pid, epoch), b
            assert b["base_sequence"] == seq, "partition %d: batch at offset %d has sequence %d, want %d" % (
                part, b["base_offset"], b["base_sequence"], seq)
            seq += b["records"]
        assert seq == next(x["count"] for x in summary["partitions"] if x["partition"] == part)
