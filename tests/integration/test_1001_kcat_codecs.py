"""kcat (librdkafka 2.0.2) produces and consumes 100,000 records with each codec.

librdkafka before 2.11.1 compresses only if the broker's advertised Produce
range overlaps v0..2 (COMPAT §0.1) and otherwise silently sends uncompressed
batches. So besides reading every record back in order, the test proves that
compression really happened three ways: librdkafka's feature decisions
(debug=feature,broker), its per-batch produce log (debug=msg names the codec),
and the codec bits of the batches the broker stores (a raw Fetch v4).
"""

import os
import re
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import ktest  # noqa: E402
import kwire  # noqa: E402

N = 100_000
PAD = "abcdefghij" * 6  # 70-byte records: compressible, and 100k of them stay small (7 MB)
CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]


def record(i):
    return "m%06d-%s" % (i, PAD)


@pytest.fixture(scope="module")
def messages(tmp_path_factory):
    path = tmp_path_factory.mktemp("kcat") / "messages.txt"
    path.write_text("".join(record(i) + "\n" for i in range(N)))
    return str(path)


@pytest.mark.parametrize("codec", CODECS)
def test_kcat_codec_roundtrip(broker, topic_name, messages, codec):
    kcat = ktest.which("kcat")
    ktest.create_topic(broker.bootstrap, topic_name, partitions=1)

    p = ktest.run([kcat, "-b", broker.bootstrap, "-P", "-t", topic_name, "-p", "0", "-z", codec,
                   "-X", "linger.ms=20", "-X", "batch.num.messages=10000",
                   "-X", "message.timeout.ms=60000", "-X", "debug=broker,feature,msg",
                   "-l", messages], timeout=90, what="kcat producer")
    err = p.stderr.decode(errors="replace")
    assert "does not support compression" not in err, \
        "librdkafka refused to compress (COMPAT §0.1): " + "\n".join(
            line for line in err.splitlines() if "compression" in line)
    assert "% ERROR" not in err and "Delivery failed" not in err, ktest.tail(err)
    # Feature decisions made from the broker's ApiVersions ranges (COMPAT §0.3).
    for feature in ["MsgVer2"] + {"lz4": ["LZ4"], "zstd": ["ZSTD"]}.get(codec, []):
        assert "Enabling feature %s" % feature in err, \
            "librdkafka did not enable %s:\n%s" % (feature, "\n".join(
                line for line in err.splitlines() if "eature" in line))
    # Every produced batch names its codec: "Produce MessageSet with N message(s) (..., zstd)".
    sets = re.findall(r"Produce MessageSet with (\d+) message\(s\) \(([^)]*)\)", err)
    assert sets, "no produce debug lines from librdkafka:\n" + ktest.tail(err)
    codecs_used = {s[1].rsplit(",", 1)[-1].strip() for s in sets}
    assert codecs_used == {"uncompressed" if codec == "none" else codec}, "batches were sent with %s, not %s" % (codecs_used, codec)
    assert sum(int(s[0]) for s in sets) >= N

    # What the broker stores: whole v2 batches, with the producer's codec.
    batches = kwire.all_batches(broker.bootstrap, topic_name, 0)
    stored = {b["codec"] for b in batches}
    assert stored == {codec}, "broker stores batches with codec %s, the producer sent %s" % (
        stored, codec)
    assert {b["magic"] for b in batches} == {2}
    assert sum(b["records"] for b in batches) == N
    assert [b["base_offset"] for b in batches] == sorted(b["base_offset"] for b in batches)

    c = ktest.run([kcat, "-b", broker.bootstrap, "-C", "-t", topic_name, "-p", "0",
                   "-o", "beginning", "-c", str(N), "-e", "-q", "-f", "%o %s\\n",
                   "-X", "fetch.wait.max.ms=100"], timeout=90, what="kcat consumer")
    lines = c.stdout.decode(errors="replace").splitlines()
    bad = []
    for i, line in enumerate(lines[:N]):
        want = "%d %s" % (i, record(i))
        if line != want:
            bad.append("offset %d: got %r, want %r" % (i, line[:90], want[:90]))
            if len(bad) >= 10:
                break
    assert not bad and len(lines) == N, "read back %d of %d records; first problems:\n%s\nstderr:\n%s" % (
        len(lines), N, "\n".join(bad), ktest.tail(c.stderr))
