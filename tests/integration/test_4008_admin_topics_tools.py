"""Kafka 4.3.1's AdminClient and tools on topics and partitions: describeTopics (which
goes through DescribeTopicPartitions: on skiffd the request counter says so) and
kafka-topics --describe, electLeaders and kafka-leader-election (no election needed
with one live leader per partition), describeProducers and kafka-transactions
describe-producers (an idempotent producer's state), kafka-metadata-quorum describe
(one voter, the broker, leading), kafka-reassign-partitions with log dirs
(AlterReplicaLogDirs). The same assertions hold against Apache Kafka with one
broker.
"""

import base64
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402

BROKER_ID = 1  # skiffd's node.id in the harness, and kafka-ref.sh's


@pytest.fixture
def mbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory({"metrics.listener": "127.0.0.1:%d" % harness.free_port()})


def dtp_requests(broker):
    """DescribeTopicPartitions requests the node has served (None against Kafka)."""
    if harness.external():
        return None
    import s3env
    return s3env.metrics(broker).get('skiff_requests_total{api="DescribeTopicPartitions"}', 0)


def ok(r):
    assert r["exit"] in (None, 0) and "error" not in r, jtools.show(r)
    return r


def java_uuid(raw):
    """Kafka's Uuid.toString: URL-safe base64 without padding."""
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def test_topics_elections_and_producers(mbroker, topic_name):
    bs, t = mbroker.bootstrap, topic_name
    c = kg.connect(bs)
    kproto.create_topic(c, t, 3)
    (mt,) = kproto.metadata(c, [t], version=12, allow_auto=False)["Topics"]
    ip = kproto.init_producer_id(c)
    pid, epoch = ip["ProducerId"], ip["ProducerEpoch"]
    for seq in (0, 2):
        b = kproto.batch([b"a", b"b"], producer_id=pid, producer_epoch=epoch, base_sequence=seq)
        assert kproto.produce(c, t, 0, b)["ErrorCode"] == 0
    before = dtp_requests(mbroker)

    res = jtools.tools(
        ["admin-topics", bs, t],
        ["topics", "--bootstrap-server", bs, "--describe", "--topic", t],
        ["admin-elect", bs, "preferred", t, "0", "1"],
        ["admin-elect", bs, "unclean", t, "2"],
        ["leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
         "--topic", t, "--partition", "0"],
        ["leader-election", "--bootstrap-server", bs, "--election-type", "preferred",
         "--all-topic-partitions"],
        ["admin-producers", bs, t, "0"],
        ["admin-producers", bs, t, "1"],
        ["transactions", "--bootstrap-server", bs, "describe-producers", "--topic", t,
         "--partition", "0"])
    adesc, tdesc, apref, aunclean, lone, lall, aprod, aprod1, tprod = res

    d = ok(adesc)["result"][t]
    assert d["id"] == java_uuid(mt["TopicId"]) and not d["internal"], d
    assert [(p["partition"], p["leader"], p["replicas"], p["isr"]) for p in d["partitions"]] == [
        (i, BROKER_ID, [BROKER_ID], [BROKER_ID]) for i in range(3)], d
    assert {"DESCRIBE", "READ", "WRITE", "DELETE", "ALTER"} <= set(d["ops"]), d
    out = ok(tdesc)["out"]
    assert "PartitionCount: 3" in out and "TopicId: %s" % d["id"] in out, jtools.show(tdesc)
    rows = [ln for ln in out.splitlines() if "Partition: " in ln and "Leader: " in ln]
    assert len(rows) == 3 and all("Leader: 1" in r and "Replicas: 1" in r and "Isr: 1" in r
                                  for r in rows), jtools.show(tdesc)
    if before is not None:
        # AdminClient's describeTopics and kafka-topics --describe asked DescribeTopicPartitions
        # (they fall back to Metadata only when a broker does not serve it).
        assert dtp_requests(mbroker) >= before + 2

    assert ok(apref)["result"] == {"%s-0" % t: "ElectionNotNeededException",
                                   "%s-1" % t: "ElectionNotNeededException"}, jtools.show(apref)
    assert ok(aunclean)["result"] == {"%s-2" % t: "ElectionNotNeededException"}, jtools.show(aunclean)
    assert "Valid replica already elected for partitions %s-0" % t in ok(lone)["out"], jtools.show(lone)
    assert "Unable to start" not in ok(lall)["out"] + lall["err"], jtools.show(lall)

    (st,) = ok(aprod)["result"]
    assert (st["pid"], st["epoch"], st["lastSequence"], st["coordinatorEpoch"], st["txnStart"]) == (
        pid, epoch, 3, None, None), st
    assert st["lastTimestamp"] > 0, st
    assert ok(aprod1)["result"] == [], jtools.show(aprod1)
    lines = [ln.split() for ln in ok(tprod)["out"].splitlines() if ln.strip()]
    assert lines[0][:4] == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence"], \
        jtools.show(tprod)
    assert [x[:4] for x in lines[1:]] == [[str(pid), str(epoch), "-1", "3"]], jtools.show(tprod)
    c.close()


def test_metadata_quorum_tool(mbroker):
    bs = mbroker.bootstrap
    q = ["metadata-quorum", "--bootstrap-server", bs, "describe"]
    status, repl = jtools.tools(q + ["--status"], q + ["--replication"])
    fields = dict(ln.split(":", 1) for ln in ok(status)["out"].splitlines() if ":" in ln)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    assert fields.get("LeaderId") == str(BROKER_ID), jtools.show(status)
    assert int(fields["LeaderEpoch"]) >= 0 and int(fields["HighWatermark"]) >= 0, fields
    assert fields["CurrentVoters"].startswith('[{"id": %d' % BROKER_ID), jtools.show(status)
    rows = [ln.split() for ln in ok(repl)["out"].splitlines() if ln.strip()]
    assert rows[0][:2] == ["NodeId", "DirectoryId"] and rows[1][0] == str(BROKER_ID), jtools.show(repl)
    assert rows[1][-1] == "Leader", jtools.show(repl)


def test_reassign_tool_with_log_dirs(mbroker, topic_name, tmp_path):
    """kafka-reassign-partitions with log dirs: AlterReplicaLogDirs to the dir the broker
    has (DescribeLogDirs names it), where the replica already is, succeeds and verifies as
    complete; a dir the broker does not have fails with LogDirNotFoundException."""
    import json
    from test_4007_admin_apis_raw import ZERO_UUID  # noqa: F401  (its schemas: DescribeLogDirs)
    bs, t = mbroker.bootstrap, topic_name
    c = kg.connect(bs)
    kproto.create_topic(c, t, 1)
    (ld,) = c.request(35, 2, {"Topics": []})["Results"]
    c.close()
    plans = []
    for name, d in (("here", ld["LogDir"]), ("elsewhere", "/t4008/no/such/dir")):
        plans.append(tmp_path / (name + ".json"))
        plans[-1].write_text(json.dumps({"version": 1, "partitions": [
            {"topic": t, "partition": 0, "replicas": [BROKER_ID], "log_dirs": [d]}]}))
    r = ["reassign", "--bootstrap-server", bs, "--reassignment-json-file"]
    execute, verify, bad = jtools.tools(r + [str(plans[0]), "--execute"],
                                        r + [str(plans[0]), "--verify"],
                                        r + [str(plans[1]), "--execute"])
    assert "Successfully started moving log directory to %s for replica %s-0 with broker %d" % (
        ld["LogDir"], t, BROKER_ID) in ok(execute)["out"], jtools.show(execute)
    assert "Reassignment of replica %s-0-%d completed successfully." % (t, BROKER_ID) in \
        ok(verify)["out"], jtools.show(verify)
    assert bad["exit"] == 1 and "LogDirNotFoundException" in bad["out"] + bad["err"], \
        jtools.show(bad)
