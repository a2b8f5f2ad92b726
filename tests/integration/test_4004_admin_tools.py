"""Kafka 4.3.1's admin tools and AdminClient against the broker.

kafka-consumer-groups (ConsumerGroupCommand: list, describe with members and lag,
reset offsets to the earliest and to a date, delete), the AdminClient's group calls,
kafka-configs (kafka.admin.ConfigCommand: topic retention, dynamic broker properties
at the cluster default and for broker 1, surviving a restart on skiffd; a property
Skiff does not honour is refused with a message that says so), kafka-log-dirs,
kafka-delete-records, kafka-get-offsets and kafka-topics --describe/--alter.
Several tool runs share one JVM (io.skiff.clients.Tools) to keep JVM start-ups few.
"""

import json
import os
import sys
import time
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import jtools  # noqa: E402
import kgroup as kg  # noqa: E402
import kproto  # noqa: E402

FAST = {"group.initial.rebalance.delay.ms": "0"}
BROKER_ID = "1"  # skiffd's node.id in the harness, and kafka-ref.sh's


@pytest.fixture
def gbroker(broker_factory):
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory(FAST)


def ts(date):
    return int(time.mktime(time.strptime(date, "%Y-%m-%d")) * 1000)


def table(out, first_col="GROUP"):
    """Rows of a kafka-consumer-groups table, as dicts keyed by the header."""
    rows, header = [], None
    for ln in out.splitlines():
        f = ln.split()
        if not f:
            continue
        if f[0] == first_col:
            header = f
        elif header and len(f) == len(header):
            rows.append(dict(zip(header, f)))
    return rows


def ok(r):
    assert r["exit"] in (None, 0) and "error" not in r, jtools.show(r)
    return r


def test_consumer_groups_tool_and_admin(gbroker, topic_name):
    bs = gbroker.bootstrap
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, 3)
    t = topic_name
    # Partition 0: five records of 2020, five of 2021; partitions 1 and 2: ten of now.
    assert kproto.produce(c, t, 0, kproto.batch([b"old"] * 5, base_timestamp=ts("2020-01-01"),
                                                max_timestamp=ts("2020-01-01")))["ErrorCode"] == 0
    assert kproto.produce(c, t, 0, kproto.batch([b"new"] * 5, base_timestamp=ts("2021-01-01"),
                                                max_timestamp=ts("2021-01-01")))["ErrorCode"] == 0
    for p in (1, 2):
        assert kproto.produce(c, t, p, kproto.batch([b"x"] * 10))["ErrorCode"] == 0
    active, idle = "g4004-active-" + uuid.uuid4().hex[:6], "g4004-idle-" + uuid.uuid4().hex[:6]
    kg.find_coordinator(c, active)
    r = kg.join_two_step(c, active, 5, topics=[t], session_ms=60000, rebalance_ms=10000)
    m, gen = r["MemberId"], r["GenerationId"]
    assert kg.sync(c, active, gen, m, {m: kg.assignment({t: [0, 1, 2]})})["ErrorCode"] == 0
    assert set(kg.commit(c, active, {(t, 0): 4, (t, 1): 10, (t, 2): 0}, gen, m).values()) == {0}
    assert set(kg.commit(c, idle, {(t, 0): 2, (t, 1): 3}).values()) == {0}

    g = ["groups", "--bootstrap-server", bs]
    res = jtools.tools(
        g + ["--list"],
        g + ["--describe", "--group", active],
        g + ["--describe", "--group", active, "--members", "--verbose"],
        g + ["--describe", "--group", active, "--state"],
        ["admin-describe", bs, active],
        ["admin-offsets", bs, active],
        ["admin-groups", bs],
        g + ["--reset-offsets", "--group", active, "--all-topics", "--to-earliest", "--execute"],
        g + ["--reset-offsets", "--group", idle, "--topic", t, "--to-earliest", "--execute"],
        ["admin-offsets", bs, idle],
        g + ["--reset-offsets", "--group", idle, "--all-topics", "--to-datetime",
             "2020-06-01T00:00:00.000", "--execute"],
        ["admin-offsets", bs, idle],
        g + ["--delete", "--group", active],
        g + ["--delete", "--group", idle],
        g + ["--delete", "--group", idle],
        g + ["--list"])
    (lst, desc, members, state, adesc, aoffs, agroups, reset_active, reset_early, offs_early,
     reset_date, offs_date, del_active, del_idle, del_again, lst2) = res

    listed = ok(lst)["out"].split()
    assert active in listed and idle in listed, jtools.show(lst)
    rows = {int(x["PARTITION"]): x for x in table(ok(desc)["out"])}
    assert sorted(rows) == [0, 1, 2], jtools.show(desc)
    assert [(rows[p]["CURRENT-OFFSET"], rows[p]["LOG-END-OFFSET"], rows[p]["LAG"]) for p in range(3)] == [
        ("4", "10", "6"), ("10", "10", "0"), ("0", "10", "10")], jtools.show(desc)
    assert {rows[p]["CONSUMER-ID"] for p in range(3)} == {m}, jtools.show(desc)
    assert {rows[p]["CLIENT-ID"] for p in range(3)} == {"kgroup"}, jtools.show(desc)
    (mrow,) = table(ok(members)["out"])
    assert (mrow["CONSUMER-ID"], mrow["#PARTITIONS"]) == (m, "3"), jtools.show(members)
    (srow,) = table(ok(state)["out"])
    assert (srow["ASSIGNMENT-STRATEGY"], srow["STATE"], srow["#MEMBERS"]) == ("range", "Stable", "1"), \
        jtools.show(state)
    d = ok(adesc)["result"]
    assert (d["state"], d["assignor"], d["simple"]) == ("Stable", "range", False), d
    assert [(x["member"], x["client"], x["assignment"]) for x in d["members"]] == [
        (m, "kgroup", ["%s-0" % t, "%s-1" % t, "%s-2" % t])], d
    lags = {k: (v["offset"], v["lag"]) for k, v in ok(aoffs)["result"].items()}
    assert lags == {"%s-0" % t: (4, 6), "%s-1" % t: (10, 0), "%s-2" % t: (0, 10)}, lags
    byid = {x["group"]: x for x in ok(agroups)["result"]}
    assert byid[active]["state"] == "Stable" and byid[idle]["state"] == "Empty", byid
    assert byid[idle]["simple"] is True and byid[active]["simple"] is False, byid

    # An active group's offsets cannot be reset.
    assert "inactive" in reset_active["out"] + reset_active["err"], jtools.show(reset_active)
    new = {int(x["PARTITION"]): x["NEW-OFFSET"] for x in table(ok(reset_early)["out"])}
    assert new == {0: "0", 1: "0", 2: "0"}, jtools.show(reset_early)
    assert {k: v["offset"] for k, v in ok(offs_early)["result"].items()} == {
        "%s-%d" % (t, p): 0 for p in range(3)}
    # To a date: the first record at or after it (partition 0: the first of 2021).
    new = {int(x["PARTITION"]): x["NEW-OFFSET"] for x in table(ok(reset_date)["out"])}
    assert new == {0: "5", 1: "0", 2: "0"}, jtools.show(reset_date)
    assert {k: v["offset"] for k, v in ok(offs_date)["result"].items()}["%s-0" % t] == 5

    assert "not empty" in (del_active["out"] + del_active["err"]).lower() or \
        "NonEmptyGroup" in del_active["out"] + del_active["err"], jtools.show(del_active)
    assert "successful" in ok(del_idle)["out"], jtools.show(del_idle)
    assert "GroupIdNotFoundException" in del_again["out"] + del_again["err"], jtools.show(del_again)
    listed = ok(lst2)["out"].split()
    assert active in listed and idle not in listed, jtools.show(lst2)
    # What the tools did, read back raw.
    assert kg.fetch_offsets(c, idle, None)[1] == {}
    assert kg.fetch_offsets(c, active, None)[1] == {(t, 0): (4, "", 0), (t, 1): (10, "", 0),
                                                    (t, 2): (0, "", 0)}
    assert kg.heartbeat(c, active, gen, m)["ErrorCode"] == 0


def configs_out(r):
    """{name: value} from a kafka-configs --describe."""
    out = {}
    for ln in r["out"].splitlines():
        ln = ln.strip()
        if "=" in ln and " sensitive=" in ln:
            k, v = ln.split(" sensitive=")[0].split("=", 1)
            out[k] = v
    return out


def test_configs_tool(gbroker, topic_name):
    bs = gbroker.bootstrap
    c = kg.connect(bs)
    kproto.create_topic(c, topic_name, 1)
    t2 = topic_name + "-plain"
    kproto.create_topic(c, t2, 1)
    cfg = ["configs", "--bootstrap-server", bs]
    top = cfg + ["--entity-type", "topics", "--entity-name", topic_name]
    brk = cfg + ["--entity-type", "brokers", "--entity-name", BROKER_ID]
    dflt = cfg + ["--entity-type", "brokers", "--entity-default"]
    try:
        res = jtools.tools(
            top + ["--alter", "--add-config", "retention.ms=3600000,max.message.bytes=200000"],
            top + ["--describe"],
            top + ["--alter", "--delete-config", "max.message.bytes"],
            top + ["--describe"],
            top + ["--alter", "--add-config", "segment.bytes=2000000"],
            top + ["--alter", "--add-config", "cleanup.policy=compact"],
            top + ["--describe", "--all"],
            dflt + ["--alter", "--add-config", "log.retention.ms=7200000"],
            dflt + ["--describe"],
            brk + ["--alter", "--add-config", "log.retention.ms=5400000"],
            brk + ["--describe"],
            cfg + ["--entity-type", "topics", "--entity-name", t2, "--describe", "--all"])
        (alter, d1, delete, d2, seg, compact, dall, dflt_alter, dflt_d, brk_alter, brk_d, plain) = res
        assert "Completed updating config" in ok(alter)["out"], jtools.show(alter)
        got = configs_out(ok(d1))
        assert (got.get("retention.ms"), got.get("max.message.bytes")) == ("3600000", "200000"), \
            jtools.show(d1)
        assert "DYNAMIC_TOPIC_CONFIG:retention.ms=3600000" in d1["out"], jtools.show(d1)
        ok(delete)
        got = configs_out(ok(d2))
        assert got.get("retention.ms") == "3600000" and "max.message.bytes" not in got, jtools.show(d2)
        # Kafka's segment.bytes is stored and described (Skiff has no segments).
        assert "Completed updating config" in ok(seg)["out"], jtools.show(seg)
        assert "Completed updating config" in ok(compact)["out"], jtools.show(compact)
        assert configs_out(ok(dall)).get("cleanup.policy") == "compact", jtools.show(dall)
        assert configs_out(dall).get("segment.bytes") == "2000000", jtools.show(dall)
        assert configs_out(ok(dall)).get("retention.ms") == "3600000", jtools.show(dall)

        assert "Completed updating default config for brokers" in ok(dflt_alter)["out"], \
            jtools.show(dflt_alter)
        assert configs_out(ok(dflt_d)).get("log.retention.ms") == "7200000", jtools.show(dflt_d)
        assert "Completed updating config for broker %s" % BROKER_ID in ok(brk_alter)["out"]
        assert configs_out(ok(brk_d)).get("log.retention.ms") == "5400000", jtools.show(brk_d)
        # A topic without its own retention.ms follows the broker's dynamic value.
        assert configs_out(ok(plain)).get("retention.ms") == "5400000", jtools.show(plain)

        if not harness.external():
            # Refused on skiffd: a static property, and one Skiff does not have.
            res = jtools.tools(
                brk + ["--alter", "--add-config", "socket.request.max.bytes=2000000"],
                brk + ["--alter", "--add-config", "log.cleaner.threads=2"])
            for r, why in zip(res, ("cannot be changed while the node runs",
                                    "is not a broker property of Skiff")):
                assert r["exit"] == 1 and why in r["err"], jtools.show(r)
            # Dynamic properties survive a restart (SIGKILL).
            gbroker.kill()
            gbroker.start()
            res = jtools.tools(brk + ["--describe"], top + ["--describe"],
                               cfg + ["--entity-type", "topics", "--entity-name", t2, "--describe", "--all"])
            assert configs_out(ok(res[0])).get("log.retention.ms") == "5400000", jtools.show(res[0])
            assert configs_out(ok(res[1])).get("retention.ms") == "3600000", jtools.show(res[1])
            assert configs_out(ok(res[2])).get("retention.ms") == "5400000", jtools.show(res[2])
    finally:
        # The reference Kafka is shared by every test: leave its broker configs as found.
        jtools.tools(brk + ["--alter", "--delete-config", "log.retention.ms"],
                     dflt + ["--alter", "--delete-config", "log.retention.ms"])
    res = jtools.tools(brk + ["--describe"],
                       cfg + ["--entity-type", "topics", "--entity-name", t2, "--describe", "--all"])
    assert "log.retention.ms" not in configs_out(ok(res[0])), jtools.show(res[0])
    assert configs_out(ok(res[1])).get("retention.ms") == "604800000", jtools.show(res[1])


def test_log_dirs_delete_records_topics(gbroker, topic_name):
    bs = gbroker.bootstrap
    c = kg.connect(bs)
    t = topic_name
    kproto.create_topic(c, t, 2)
    for p in range(2):
        for _ in range(2):
            assert kproto.produce(c, t, p, kproto.batch([b"v" * 100] * 5))["ErrorCode"] == 0
    spec = os.path.join(harness.WORK, "delete-records-%s.json" % uuid.uuid4().hex[:8])
    os.makedirs(harness.WORK, exist_ok=True)
    with open(spec, "w") as f:
        json.dump({"version": 1, "partitions": [{"topic": t, "partition": 0, "offset": 6},
                                                {"topic": t, "partition": 1, "offset": 999}]}, f)
    tp = ["topics", "--bootstrap-server", bs]
    try:
        res = jtools.tools(
            tp + ["--describe", "--topic", t],
            tp + ["--alter", "--topic", t, "--partitions", "4"],
            tp + ["--alter", "--topic", t, "--partitions", "3"],
            tp + ["--describe", "--topic", t],
            ["log-dirs", "--bootstrap-server", bs, "--describe", "--topic-list", t],
            ["delete-records", "--bootstrap-server", bs, "--offset-json-file", spec],
            ["get-offsets", "--bootstrap-server", bs, "--topic", t, "--time", "-2"],
            ["get-offsets", "--bootstrap-server", bs, "--topic", t, "--time", "-1"])
    finally:
        os.unlink(spec)
    desc, grow, shrink, desc2, logdirs, delrec, earliest, latest = res
    assert "PartitionCount: 2" in ok(desc)["out"], jtools.show(desc)
    assert grow["exit"] in (None, 0) and "Error" not in grow["out"], jtools.show(grow)
    assert shrink["exit"] == 1 and "InvalidPartitionsException" in shrink["err"], jtools.show(shrink)
    assert "PartitionCount: 4" in ok(desc2)["out"], jtools.show(desc2)
    assert desc2["out"].count("Leader: %s" % BROKER_ID) == 4, jtools.show(desc2)

    js = [ln for ln in ok(logdirs)["out"].splitlines() if ln.startswith("{")]
    assert js, jtools.show(logdirs)
    (brk,) = json.loads(js[0])["brokers"]
    assert str(brk["broker"]) == BROKER_ID
    sizes = {}
    for ld in brk["logDirs"]:
        assert ld["error"] is None and ld["logDir"], ld
        for p in ld["partitions"]:
            sizes[p["partition"]] = p["size"]
    assert set(sizes) == {"%s-%d" % (t, p) for p in range(4)}, sizes
    assert sizes["%s-0" % t] > 1000 and sizes["%s-3" % t] == 0, sizes

    out = ok(delrec)["out"]
    assert "partition: %s-0\tlow_watermark: 6" % t in out, jtools.show(delrec)
    assert "partition: %s-1\terror: org.apache.kafka.common.errors.OffsetOutOfRangeException" % t in out, \
        jtools.show(delrec)
    assert sorted(ok(earliest)["out"].split()) == ["%s:0:6" % t, "%s:1:0" % t, "%s:2:0" % t,
                                                   "%s:3:0" % t], jtools.show(earliest)
    assert sorted(ok(latest)["out"].split()) == ["%s:0:10" % t, "%s:1:10" % t, "%s:2:0" % t,
                                                 "%s:3:0" % t], jtools.show(latest)
    # Raw: the log start moved; a fetch below it is out of range; new partitions work.
    assert kproto.list_offsets(c, t, 0, -2)["Offset"] == 6
    _, p0 = kproto.fetch(c, t, 0, 0)
    assert p0["ErrorCode"] == kproto.OFFSET_OUT_OF_RANGE, p0
    _, p0 = kproto.fetch(c, t, 0, 6)
    assert p0["ErrorCode"] == 0 and kproto.parse_batches(p0["Records"])[0].base_offset <= 6, p0
    assert kproto.produce(c, t, 3, kproto.batch([b"x"]))["ErrorCode"] == 0
