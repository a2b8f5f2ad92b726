"""Group-coordinator APIs for the raw protocol client (kproto).

Adds to kproto.APIS the schemas of FindCoordinator, JoinGroup, SyncGroup,
Heartbeat, LeaveGroup, OffsetCommit, OffsetFetch, DescribeGroups,
ListGroups, DeleteGroups, OffsetDelete and DeleteRecords, written from
Apache Kafka's message definitions, plus small helpers that walk a member
through a join. Used by the test_40NN raw-protocol tests.
"""

import threading
import time

import kproto
from kproto import F, S, _api

# ---------------------------------------------------------------- error codes

OFFSET_METADATA_TOO_LARGE = 12
COORDINATOR_NOT_AVAILABLE = 15
ILLEGAL_GENERATION = 22
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_GROUP_ID = 24
UNKNOWN_MEMBER_ID = 25
INVALID_SESSION_TIMEOUT = 26
REBALANCE_IN_PROGRESS = 27
INVALID_REQUEST = 42
NON_EMPTY_GROUP = 68
GROUP_ID_NOT_FOUND = 69
MEMBER_ID_REQUIRED = 79
FENCED_INSTANCE_ID = 82
GROUP_SUBSCRIBED_TO_TOPIC = 86

# ---------------------------------------------------------------- schemas

_api(10, 3,
     [F("Key", "string", "0-3"), F("KeyType", "int8", "1+"),
      F("CoordinatorKeys", "[]string", "4+")],
     [F("ThrottleTimeMs", "int32", "1+"), F("ErrorCode", "int16", "0-3"),
      F("ErrorMessage", "string", "1-3", nullable="1-3"), F("NodeId", "int32", "0-3"),
      F("Host", "string", "0-3"), F("Port", "int32", "0-3"),
      S("Coordinators", "4+", [F("Key", "string", "4+"), F("NodeId", "int32", "4+"),
                               F("Host", "string", "4+"), F("Port", "int32", "4+"),
                               F("ErrorCode", "int16", "4+"),
                               F("ErrorMessage", "string", "4+", nullable="4+")])])

_api(11, 6,
     [F("GroupId", "string", "0+"), F("SessionTimeoutMs", "int32", "0+"),
      F("RebalanceTimeoutMs", "int32", "1+", default=-1), F("MemberId", "string", "0+"),
      F("GroupInstanceId", "string", "5+", nullable="5+"), F("ProtocolType", "string", "0+"),
      S("Protocols", "0+", [F("Name", "string", "0+"), F("Metadata", "bytes", "0+")]),
      F("Reason", "string", "8+", nullable="8+")],
     [F("ThrottleTimeMs", "int32", "2+"), F("ErrorCode", "int16", "0+"),
      F("GenerationId", "int32", "0+"), F("ProtocolType", "string", "7+", nullable="7+"),
      F("ProtocolName", "string", "0+", nullable="7+"), F("Leader", "string", "0+"),
      F("SkipAssignment", "bool", "9+"), F("MemberId", "string", "0+"),
      S("Members", "0+", [F("MemberId", "string", "0+"),
                          F("GroupInstanceId", "string", "5+", nullable="5+"),
                          F("Metadata", "bytes", "0+")])])

_api(14, 4,
     [F("GroupId", "string", "0+"), F("GenerationId", "int32", "0+"),
      F("MemberId", "string", "0+"), F("GroupInstanceId", "string", "3+", nullable="3+"),
      F("ProtocolType", "string", "5+", nullable="5+"),
      F("ProtocolName", "string", "5+", nullable="5+"),
      S("Assignments", "0+", [F("MemberId", "string", "0+"), F("Assignment", "bytes", "0+")])],
     [F("ThrottleTimeMs", "int32", "1+"), F("ErrorCode", "int16", "0+"),
      F("ProtocolType", "string", "5+", nullable="5+"),
      F("ProtocolName", "string", "5+", nullable="5+"), F("Assignment", "bytes", "0+")])

_api(12, 4,
     [F("GroupId", "string", "0+"), F("GenerationId", "int32", "0+"),
      F("MemberId", "string", "0+"), F("GroupInstanceId", "string", "3+", nullable="3+")],
     [F("ThrottleTimeMs", "int32", "1+"), F("ErrorCode", "int16", "0+")])

_api(13, 4,
     [F("GroupId", "string", "0+"), F("MemberId", "string", "0-2"),
      S("Members", "3+", [F("MemberId", "string", "3+"),
                          F("GroupInstanceId", "string", "3+", nullable="3+"),
                          F("Reason", "string", "5+", nullable="5+")])],
     [F("ThrottleTimeMs", "int32", "1+"), F("ErrorCode", "int16", "0+"),
      S("Members", "3+", [F("MemberId", "string", "3+"),
                          F("GroupInstanceId", "string", "3+", nullable="3+"),
                          F("ErrorCode", "int16", "3+")])])

_api(8, 8,
     [F("GroupId", "string", "0+"), F("GenerationIdOrMemberEpoch", "int32", "1+", default=-1),
      F("MemberId", "string", "1+"), F("GroupInstanceId", "string", "7+", nullable="7+"),
      F("RetentionTimeMs", "int64", "2-4", default=-1),
      S("Topics", "0+", [F("Name", "string", "0-9"), F("TopicId", "uuid", "10+"),
                         S("Partitions", "0+", [
          F("PartitionIndex", "int32", "0+"), F("CommittedOffset", "int64", "0+"),
          F("CommittedLeaderEpoch", "int32", "6+", default=-1),
          F("CommittedMetadata", "string", "0+", nullable="0+")])])],
     [F("ThrottleTimeMs", "int32", "3+"),
      S("Topics", "0+", [F("Name", "string", "0-9"), F("TopicId", "uuid", "10+"),
                         S("Partitions", "0+", [
          F("PartitionIndex", "int32", "0+"), F("ErrorCode", "int16", "0+")])])])

_OF_PART = [F("PartitionIndex", "int32", "0+"), F("CommittedOffset", "int64", "0+"),
            F("CommittedLeaderEpoch", "int32", "5+", default=-1),
            F("Metadata", "string", "0+", nullable="0+"), F("ErrorCode", "int16", "0+")]
_api(9, 6,
     [F("GroupId", "string", "0-7"),
      S("Topics", "0-7", [F("Name", "string", "0-7"), F("PartitionIndexes", "[]int32", "0-7")],
        nullable="2-7"),
      S("Groups", "8+", [F("GroupId", "string", "8+"),
                         F("MemberId", "string", "9+", nullable="9+"),
                         F("MemberEpoch", "int32", "9+", default=-1),
                         S("Topics", "8+", [F("Name", "string", "8-9"),
                                            F("TopicId", "uuid", "10+"),
                                            F("PartitionIndexes", "[]int32", "8+")],
                           nullable="8+")]),
      F("RequireStable", "bool", "7+")],
     [F("ThrottleTimeMs", "int32", "3+"),
      S("Topics", "0-7", [F("Name", "string", "0-7"), S("Partitions", "0-7", _OF_PART)]),
      F("ErrorCode", "int16", "2-7"),
      S("Groups", "8+", [F("GroupId", "string", "8+"),
                         S("Topics", "8+", [F("Name", "string", "8-9"),
                                            F("TopicId", "uuid", "10+"),
                                            S("Partitions", "8+", _OF_PART)]),
                         F("ErrorCode", "int16", "8+")])])

_api(15, 5,
     [F("Groups", "[]string", "0+"), F("IncludeAuthorizedOperations", "bool", "3+")],
     [F("ThrottleTimeMs", "int32", "1+"),
      S("Groups", "0+", [
          F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "6+", nullable="6+"),
          F("GroupId", "string", "0+"), F("GroupState", "string", "0+"),
          F("ProtocolType", "string", "0+"), F("ProtocolData", "string", "0+"),
          S("Members", "0+", [F("MemberId", "string", "0+"),
                              F("GroupInstanceId", "string", "4+", nullable="4+"),
                              F("ClientId", "string", "0+"), F("ClientHost", "string", "0+"),
                              F("MemberMetadata", "bytes", "0+"),
                              F("MemberAssignment", "bytes", "0+")]),
          F("AuthorizedOperations", "int32", "3+", default=-2147483648)])])

_api(16, 3,
     [F("StatesFilter", "[]string", "4+"), F("TypesFilter", "[]string", "5+")],
     [F("ThrottleTimeMs", "int32", "1+"), F("ErrorCode", "int16", "0+"),
      S("Groups", "0+", [F("GroupId", "string", "0+"), F("ProtocolType", "string", "0+"),
                         F("GroupState", "string", "4+"), F("GroupType", "string", "5+")])])

_api(42, 2,
     [F("GroupsNames", "[]string", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Results", "0+", [F("GroupId", "string", "0+"), F("ErrorCode", "int16", "0+")])])

_api(47, None,
     [F("GroupId", "string", "0+"),
      S("Topics", "0+", [F("Name", "string", "0+"),
                         S("Partitions", "0+", [F("PartitionIndex", "int32", "0+")])])],
     [F("ErrorCode", "int16", "0+"), F("ThrottleTimeMs", "int32", "0+"),
      S("Topics", "0+", [F("Name", "string", "0+"), S("Partitions", "0+", [
          F("PartitionIndex", "int32", "0+"), F("ErrorCode", "int16", "0+")])])])

_api(21, 2,
     [S("Topics", "0+", [F("Name", "string", "0+"), S("Partitions", "0+", [
         F("PartitionIndex", "int32", "0+"), F("Offset", "int64", "0+")])]),
      F("TimeoutMs", "int32", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Topics", "0+", [F("Name", "string", "0+"), S("Partitions", "0+", [
          F("PartitionIndex", "int32", "0+"), F("LowWatermark", "int64", "0+"),
          F("ErrorCode", "int16", "0+")])])])

# ---------------------------------------------------------------- consumer protocol bytes


def subscription(topics, version=0):
    """ConsumerProtocolSubscription v0: version, topics, user data (null)."""
    import struct
    out = struct.pack(">hi", version, len(topics))
    for t in topics:
        b = t.encode()
        out += struct.pack(">h", len(b)) + b
    return out + struct.pack(">i", -1)


def assignment(parts, version=0):
    """ConsumerProtocolAssignment v0: {topic: [partitions]}."""
    import struct
    out = struct.pack(">hi", version, len(parts))
    for t, ps in parts.items():
        b = t.encode()
        out += struct.pack(">h", len(b)) + b + struct.pack(">i", len(ps))
        out += b"".join(struct.pack(">i", p) for p in ps)
    return out + struct.pack(">i", -1)


# ---------------------------------------------------------------- helpers

def find_coordinator(c, key, key_type=0, version=3, timeout=30.0):
    """FindCoordinator, retried while the coordinator is loading (Kafka just after start)."""
    deadline = time.time() + timeout
    while True:
        if version >= 4:
            resp = c.request(10, version, {"KeyType": key_type, "CoordinatorKeys": [key]})
            err = resp["Coordinators"][0]["ErrorCode"]
        else:
            resp = c.request(10, version, {"Key": key, "KeyType": key_type})
            err = resp["ErrorCode"]
        if err not in (14, 15) or key_type != 0 or time.time() > deadline:
            return resp
        time.sleep(0.2)


def join_body(group, member_id="", protocols=None, session_ms=10000, rebalance_ms=10000,
              instance_id=None, protocol_type="consumer", topics=("t",)):
    if protocols is None:
        protocols = [("range", subscription(list(topics)))]
    return {"GroupId": group, "SessionTimeoutMs": session_ms,
            "RebalanceTimeoutMs": rebalance_ms, "MemberId": member_id,
            "GroupInstanceId": instance_id, "ProtocolType": protocol_type,
            "Protocols": [{"Name": n, "Metadata": m} for n, m in protocols], "Reason": None}


def join(c, group, version=5, timeout=None, **kw):
    return c.request(11, version, join_body(group, **kw), timeout=timeout)


def join_two_step(c, group, version=5, **kw):
    """JoinGroup v4+ as Kafka's clients do it: MEMBER_ID_REQUIRED, then again with the id."""
    r = join(c, group, version, **kw)
    if r["ErrorCode"] == MEMBER_ID_REQUIRED:
        kw["member_id"] = r["MemberId"]
        r = join(c, group, version, **kw)
    return r


def sync(c, group, generation, member_id, assignments=None, version=3, instance_id=None,
         protocol_type=None, protocol_name=None, timeout=None):
    body = {"GroupId": group, "GenerationId": generation, "MemberId": member_id,
            "GroupInstanceId": instance_id, "ProtocolType": protocol_type,
            "ProtocolName": protocol_name,
            "Assignments": [{"MemberId": m, "Assignment": a}
                            for m, a in (assignments or {}).items()]}
    return c.request(14, version, body, timeout=timeout)


def heartbeat(c, group, generation, member_id, version=3, instance_id=None):
    return c.request(12, version, {"GroupId": group, "GenerationId": generation,
                                   "MemberId": member_id, "GroupInstanceId": instance_id})


def leave(c, group, member_id=None, members=None, version=3):
    """v0-2: member_id; v3+: members = [(member id, instance id or None)]."""
    if version < 3:
        return c.request(13, version, {"GroupId": group, "MemberId": member_id})
    return c.request(13, version, {"GroupId": group, "Members": [
        {"MemberId": m, "GroupInstanceId": i, "Reason": None} for m, i in members]})


def commit(c, group, offsets, generation=-1, member_id="", version=7, instance_id=None,
           metadata=""):
    """offsets: {(topic, partition): offset}. Returns {(topic, partition): error code}."""
    topics = {}
    for (t, p), o in offsets.items():
        topics.setdefault(t, []).append({"PartitionIndex": p, "CommittedOffset": o,
                                         "CommittedLeaderEpoch": -1,
                                         "CommittedMetadata": metadata})
    resp = c.request(8, version, {"GroupId": group, "GenerationIdOrMemberEpoch": generation,
                                  "MemberId": member_id, "GroupInstanceId": instance_id,
                                  "RetentionTimeMs": -1,
                                  "Topics": [{"Name": t, "Partitions": ps}
                                             for t, ps in topics.items()]})
    return {(t["Name"], p["PartitionIndex"]): p["ErrorCode"]
            for t in resp["Topics"] for p in t["Partitions"]}


def fetch_offsets(c, group, topics=None, version=7):
    """OffsetFetch up to v7. topics: {topic: [partitions]} or None (all).
    Returns (top-level error, {(topic, partition): (offset, metadata, error)})."""
    body = {"GroupId": group, "RequireStable": False,
            "Topics": None if topics is None else [
                {"Name": t, "PartitionIndexes": ps} for t, ps in topics.items()]}
    resp = c.request(9, version, body)
    out = {(t["Name"], p["PartitionIndex"]): (p["CommittedOffset"], p["Metadata"],
                                              p["ErrorCode"])
           for t in resp["Topics"] for p in t["Partitions"]}
    return resp.get("ErrorCode", 0), out


def describe_groups(c, groups, version=5):
    return c.request(15, version, {"Groups": groups, "IncludeAuthorizedOperations": False})


def list_groups(c, version=4, states=None):
    return c.request(16, version, {"StatesFilter": states or [], "TypesFilter": []})


def delete_groups(c, groups, version=2):
    resp = c.request(42, version, {"GroupsNames": groups})
    return {r["GroupId"]: r["ErrorCode"] for r in resp["Results"]}


def offset_delete(c, group, offsets):
    """offsets: {topic: [partitions]}. Returns (top-level error, {(t, p): error})."""
    resp = c.request(47, 0, {"GroupId": group, "Topics": [
        {"Name": t, "Partitions": [{"PartitionIndex": p} for p in ps]}
        for t, ps in offsets.items()]})
    return resp["ErrorCode"], {(t["Name"], p["PartitionIndex"]): p["ErrorCode"]
                               for t in resp["Topics"] for p in t["Partitions"]}


class Background:
    """Runs fn(*args) in a thread (for a join or sync the broker holds back)."""

    def __init__(self, fn, *args, **kw):
        self.result = None
        self.error = None
        self.t = threading.Thread(target=self._run, args=(fn, args, kw), daemon=True)
        self.t.start()

    def _run(self, fn, args, kw):
        try:
            self.result = fn(*args, **kw)
        except Exception as e:  # noqa: BLE001 - reported by get()
            self.error = e

    def done(self):
        return not self.t.is_alive()

    def get(self, timeout=30.0):
        self.t.join(timeout)
        if self.t.is_alive():
            raise AssertionError("no answer in %.0fs" % timeout)
        if self.error is not None:
            raise self.error
        return self.result


def connect(bootstrap, client_id="kgroup"):
    return kproto.Conn(bootstrap, client_id=client_id, timeout=30.0)

# ---------------------------------------------------------------- configs (for admin checks)

_api(32, 4,
     [S("Resources", "0+", [F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
                            F("ConfigurationKeys", "[]string", "0+", nullable="0+")]),
      F("IncludeSynonyms", "bool", "1+"), F("IncludeDocumentation", "bool", "3+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Results", "0+", [
          F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "0+", nullable="0+"),
          F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
          S("Configs", "0+", [
              F("Name", "string", "0+"), F("Value", "string", "0+", nullable="0+"),
              F("ReadOnly", "bool", "0+"), F("ConfigSource", "int8", "1+", default=-1),
              F("IsSensitive", "bool", "0+"),
              S("Synonyms", "1+", [F("Name", "string", "1+"),
                                   F("Value", "string", "1+", nullable="0+"),
                                   F("Source", "int8", "1+")]),
              F("ConfigType", "int8", "3+"),
              F("Documentation", "string", "3+", nullable="0+")])])])


def describe_configs(c, rtype, name, keys=None, synonyms=False, version=4, documentation=False):
    return c.request(32, version, {"Resources": [{"ResourceType": rtype, "ResourceName": name,
                                                  "ConfigurationKeys": keys}],
                                   "IncludeSynonyms": synonyms,
                                   "IncludeDocumentation": documentation})


def wait_state(c, group, state, timeout=15.0):
    """Polls DescribeGroups until the group is in `state`; returns the described group."""
    deadline = time.time() + timeout
    while True:
        d = describe_groups(c, [group])["Groups"][0]
        if d["GroupState"] == state:
            return d
        if time.time() > deadline:
            raise AssertionError("group %s still %s after %.0fs, not %s" % (
                group, d["GroupState"], timeout, state))
        time.sleep(0.05)
