"""A topic's compression.type: batches produced with another codec are stored in the
topic's, as Kafka stores them, and every client reads them back.

kcat (librdkafka 2.0.2) produces with one codec into topics whose compression.type names
another (or `uncompressed`); the batches the broker stores (a raw Fetch v4) carry the
topic's codec; kcat and the Java console consumer (kafka-clients 4.x, whose lz4 and snappy
readers are the strictest) read every record back, in order. The same assertions hold
against Apache Kafka (SKIFF_TEST_AGAINST=kafka).
"""

import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import jtools  # noqa: E402
import ktest  # noqa: E402
import kwire  # noqa: E402

N = 3000
PAD = "abcdefghij" * 5

# topic compression.type -> the codec the producer uses (always a different one)
CASES = {"gzip": "lz4", "snappy": "zstd", "lz4": "gzip", "zstd": "snappy", "uncompressed": "lz4"}


def record(i):
    return "r%05d-%s" % (i, PAD)


def test_batches_stored_in_the_topics_codec(broker, topic_name, tmp_path):
    kcat = ktest.which("kcat")
    path = tmp_path / "records.txt"
    path.write_text("".join(record(i) + "\n" for i in range(N)))
    want = [record(i) for i in range(N)]
    topics = {}
    for codec, sent in CASES.items():
        t = "%s-%s" % (topic_name, codec)
        topics[codec] = t
        ktest.create_topic(broker.bootstrap, t, partitions=1, config={"compression.type": codec})
        p = ktest.run([kcat, "-b", broker.bootstrap, "-P", "-t", t, "-p", "0", "-z", sent,
                       "-X", "linger.ms=20", "-X", "batch.num.messages=1000",
                       "-X", "message.timeout.ms=60000", "-l", str(path)],
                      timeout=90, what="kcat producer")
        err = p.stderr.decode(errors="replace")
        assert "% ERROR" not in err and "Delivery failed" not in err, ktest.tail(err)

        batches = kwire.all_batches(broker.bootstrap, t, 0)
        stored = {b["codec"] for b in batches}
        expect = "none" if codec == "uncompressed" else codec
        assert stored == {expect}, "topic %s (%s): stored %s, produced with %s" % (
            t, codec, stored, sent)
        assert sum(b["records"] for b in batches) == N

        c = ktest.run([kcat, "-b", broker.bootstrap, "-C", "-t", t, "-p", "0", "-o", "beginning",
                       "-c", str(N), "-e", "-q", "-f", "%s\\n", "-X", "fetch.wait.max.ms=100"],
                      timeout=90, what="kcat consumer")
        got = c.stdout.decode(errors="replace").splitlines()
        assert got == want, "%s: kcat read %d of %d records back (first: %r)\n%s" % (
            codec, len(got), N, got[:2], ktest.tail(c.stderr))

    # The Java consumer reads every topic (one JVM for all of them).
    cmds = [["console-consumer", "--bootstrap-server", broker.bootstrap, "--topic", t,
             "--from-beginning", "--max-messages", str(N), "--timeout-ms", "30000"]
            for t in topics.values()]
    results = jtools.tools(*cmds, timeout=240)
    for codec, r in zip(topics, results):
        lines = [ln for ln in r["out"].splitlines() if ln.startswith("r")]
        assert lines == want, "%s: the Java consumer read %d of %d records\n%s" % (
            codec, len(lines), N, jtools.show(r))
