"""kafka-transactions.sh list and describe (org.apache.kafka.tools.TransactionsCommand of
Kafka 4.3.1) show an open transaction of the Java transactional producer, and its end
(docs/transactions.md). test_2011 checks the same APIs on the wire."""

import json
import os
import signal
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import jtools  # noqa: E402
import ktest  # noqa: E402


def table(r):
    """A tool's table: one dict per row, keyed by the header's columns."""
    assert r["exit"] in (None, 0), jtools.show(r)
    lines = [ln.split() for ln in r["out"].splitlines() if ln.strip()]
    assert lines, jtools.show(r)
    return [dict(zip(lines[0], row)) for row in lines[1:]]


def mine(rows, tid):
    return [x for x in rows if x.get("TransactionalId") == tid]


def test_list_and_describe_open_transaction(broker, topic_name):
    bs, tid = broker.bootstrap, "t2016-" + uuid.uuid4().hex[:8]
    ktest.create_topic(bs, topic_name, partitions=2)
    p = subprocess.Popen(["java"] + jtools.JVM + ["-cp", jtools.classpath(),
                                                 "io.skiff.clients.Txn", "-m", "open", "-b", bs,
                                                 "-t", topic_name, "-x", tid, "-n", "8"],
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = p.stdout.readline().decode()
        assert line.strip() == "OPEN", line
        lst, desc, prods = jtools.tools(
            ["transactions", "--bootstrap-server", bs, "list"],
            ["transactions", "--bootstrap-server", bs, "describe", "--transactional-id", tid],
            ["transactions", "--bootstrap-server", bs, "describe-producers",
             "--topic", topic_name, "--partition", "0"])
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()

    rows = mine(table(lst), tid)
    assert len(rows) == 1 and rows[0]["TransactionState"] == "Ongoing", jtools.show(lst)
    pid = rows[0]["ProducerId"]
    d = mine(table(desc), tid)
    assert len(d) == 1, jtools.show(desc)
    d = d[0]
    assert (d["ProducerId"], d["TransactionState"]) == (pid, "Ongoing"), jtools.show(desc)
    assert int(d["CurrentTransactionStartTimeMs"]) > 0, jtools.show(desc)
    assert sorted(d["TopicPartitions"].split(",")) == [
        "%s-%d" % (topic_name, i) for i in range(2)], jtools.show(desc)
    # The producer of the open transaction, with the transaction's first offset.
    pr = [x for x in table(prods) if x.get("ProducerId") == pid]
    assert len(pr) == 1 and pr[0]["CurrentTransactionStartOffset"] == "0", jtools.show(prods)

    # A new producer with the same id aborts the open transaction and commits its own.
    rc, out, err = jtools.java("Txn", ["-m", "commit-abort", "-b", bs, "-t", topic_name,
                                       "-x", tid, "-n", "2"])
    s = [json.loads(x) for x in out if x.startswith("{")]
    assert rc == 0 and s and len(s[-1]["committed"]) == 4, (out, ktest.tail(err))
    lst, desc = jtools.tools(
        ["transactions", "--bootstrap-server", bs, "list"],
        ["transactions", "--bootstrap-server", bs, "describe", "--transactional-id", tid])
    rows = mine(table(lst), tid)
    assert len(rows) == 1 and rows[0]["TransactionState"] == "CompleteCommit", jtools.show(lst)
    d = mine(table(desc), tid)
    assert len(d) == 1 and d[0]["TransactionState"] == "CompleteCommit", jtools.show(desc)
