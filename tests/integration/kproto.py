"""A minimal Kafka wire-protocol client for raw integration tests.

Real clients hide framing, versions and error paths; these tests need to
send exactly the bytes they choose (bad sizes, bad batches, odd versions)
and to read exactly what the broker answers. This module gives:

* framing and request header v1/v2, response header v0/v1;
* a small schema-driven codec (non-flexible and flexible/compact encoding,
  tagged fields) with hand-written schemas for the requests the tests use:
  ApiVersions, Metadata, Produce, Fetch, ListOffsets, InitProducerId, AddPartitionsToTxn,
  AddOffsetsToTxn, EndTxn, TxnOffsetCommit, DescribeTransactions, ListTransactions,
  CreateTopics, OffsetForLeaderEpoch, DescribeLogDirs, AlterConfigs,
  IncrementalAlterConfigs, DescribeTopicPartitions, ElectLeaders, DescribeProducers,
  AlterReplicaLogDirs, DescribeQuorum (one schema per API: tests add theirs here);
* a RecordBatch v2 builder/parser with a pure-Python CRC-32C, able to build
  deliberately broken batches.

Schemas are written from Apache Kafka's message definitions. A field is
(name, type, versions[, options]); versions "3+" or "0-12"; options:
nullable (versions), tag (int; the field is tagged in flexible versions),
default, fields (for struct arrays).
"""

import socket
import struct
import threading
import time
import zlib

# ---------------------------------------------------------------- errors

NONE = 0
OFFSET_OUT_OF_RANGE = 1
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
MESSAGE_TOO_LARGE = 10
INVALID_TOPIC_EXCEPTION = 17
INVALID_REQUIRED_ACKS = 21
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REQUEST = 42
OUT_OF_ORDER_SEQUENCE_NUMBER = 45
DUPLICATE_SEQUENCE_NUMBER = 46
INVALID_PRODUCER_EPOCH = 47
UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
UNKNOWN_PRODUCER_ID = 59
UNSUPPORTED_COMPRESSION_TYPE = 76
INVALID_RECORD = 87
UNSUPPORTED_SASL_MECHANISM = 33
ILLEGAL_SASL_STATE = 34
SASL_AUTHENTICATION_FAILED = 58
RESOURCE_NOT_FOUND = 91
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
SECURITY_DISABLED = 54

API_NAMES = {
    0: "Produce", 1: "Fetch", 2: "ListOffsets", 3: "Metadata", 8: "OffsetCommit",
    9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
    13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups",
    17: "SaslHandshake", 18: "ApiVersions", 19: "CreateTopics", 20: "DeleteTopics",
    21: "DeleteRecords", 22: "InitProducerId", 23: "OffsetForLeaderEpoch",
    24: "AddPartitionsToTxn", 25: "AddOffsetsToTxn", 26: "EndTxn", 27: "WriteTxnMarkers",
    28: "TxnOffsetCommit", 29: "DescribeAcls", 30: "CreateAcls", 31: "DeleteAcls",
    32: "DescribeConfigs", 33: "AlterConfigs", 34: "AlterReplicaLogDirs",
    35: "DescribeLogDirs", 36: "SaslAuthenticate", 37: "CreatePartitions",
    38: "CreateDelegationToken", 39: "RenewDelegationToken", 40: "ExpireDelegationToken",
    41: "DescribeDelegationToken", 42: "DeleteGroups", 43: "ElectLeaders",
    44: "IncrementalAlterConfigs", 45: "AlterPartitionReassignments",
    46: "ListPartitionReassignments", 47: "OffsetDelete", 48: "DescribeClientQuotas",
    49: "AlterClientQuotas", 50: "DescribeUserScramCredentials",
    51: "AlterUserScramCredentials", 55: "DescribeQuorum", 57: "UpdateFeatures",
    60: "DescribeCluster", 61: "DescribeProducers", 64: "UnregisterBroker",
    65: "DescribeTransactions", 66: "ListTransactions", 68: "ConsumerGroupHeartbeat",
    69: "ConsumerGroupDescribe", 71: "GetTelemetrySubscriptions", 72: "PushTelemetry",
    74: "ListConfigResources", 75: "DescribeTopicPartitions",
}


class ProtocolError(Exception):
    pass


class ConnectionClosed(Exception):
    pass


# ---------------------------------------------------------------- primitives

def _vrange(spec):
    """'3+' -> (3, 32767); '0-12' -> (0, 12); '1' -> (1, 1); 'none' -> empty."""
    if spec is None or spec == "none":
        return (1, 0)
    if spec.endswith("+"):
        return (int(spec[:-1]), 32767)
    if "-" in spec:
        a, b = spec.split("-")
        return (int(a), int(b))
    return (int(spec), int(spec))


def _in(spec, v):
    lo, hi = _vrange(spec)
    return lo <= v <= hi


def uvarint(n):
    if n < 0:
        raise ValueError("uvarint of negative %d" % n)
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def varint(n):
    """Zigzag varint/varlong as used inside records."""
    return uvarint((n << 1) ^ (n >> 63))


class Reader:
    def __init__(self, data, pos=0):
        self.data = memoryview(bytes(data))
        self.pos = pos

    def remaining(self):
        return len(self.data) - self.pos

    def take(self, n):
        if n < 0 or self.pos + n > len(self.data):
            raise ProtocolError("short read: want %d at %d of %d" % (n, self.pos, len(self.data)))
        b = bytes(self.data[self.pos:self.pos + n])
        self.pos += n
        return b

    def _unpack(self, fmt, n):
        return struct.unpack(fmt, self.take(n))[0]

    def int8(self):
        return self._unpack(">b", 1)

    def int16(self):
        return self._unpack(">h", 2)

    def int32(self):
        return self._unpack(">i", 4)

    def uint32(self):
        return self._unpack(">I", 4)

    def int64(self):
        return self._unpack(">q", 8)

    def bool(self):
        return self.take(1) != b"\x00"

    def uuid(self):
        return self.take(16)

    def float64(self):
        return self._unpack(">d", 8)

    def uvarint(self):
        n = shift = 0
        while True:
            if shift > 63:
                raise ProtocolError("uvarint too long")
            b = self.take(1)[0]
            n |= (b & 0x7F) << shift
            shift += 7
            if not b & 0x80:
                return n

    def varint(self):
        u = self.uvarint()
        return (u >> 1) ^ -(u & 1)


# ---------------------------------------------------------------- schema codec

class F:
    """One field of a message schema."""

    def __init__(self, name, type_, versions, nullable=None, tag=None, default=None, fields=None):
        self.name = name
        self.type = type_
        self.versions = versions
        self.nullable = nullable
        self.tag = tag
        self.default = default
        self.fields = fields

    def present(self, v):
        return _in(self.versions, v)

    def is_nullable(self, v):
        return self.nullable is not None and _in(self.nullable, v)

    def default_value(self, v):
        if self.default is not None:
            return self.default
        if self.is_nullable(v) and self.type in ("string", "bytes", "records"):
            return None
        t = self.type
        if t.startswith("[]"):
            return []
        if t in ("string",):
            return ""
        if t in ("bytes", "records"):
            return b""
        if t == "bool":
            return False
        if t == "uuid":
            return b"\x00" * 16
        if t == "struct":
            return None
        return 0


_FIXED = {"int8": ">b", "int16": ">h", "int32": ">i", "int64": ">q", "uint16": ">H",
          "uint32": ">I", "float64": ">d"}


def _enc_value(t, val, v, flex, field):
    if t in _FIXED:
        return struct.pack(_FIXED[t], val)
    if t == "bool":
        return b"\x01" if val else b"\x00"
    if t == "uuid":
        assert len(val) == 16
        return bytes(val)
    if t == "string":
        if val is None:
            return uvarint(0) if flex else struct.pack(">h", -1)
        b = val.encode() if isinstance(val, str) else bytes(val)
        return (uvarint(len(b) + 1) if flex else struct.pack(">h", len(b))) + b
    if t in ("bytes", "records"):
        if val is None:
            return uvarint(0) if flex else struct.pack(">i", -1)
        b = bytes(val)
        return (uvarint(len(b) + 1) if flex else struct.pack(">i", len(b))) + b
    if t.startswith("[]"):
        et = t[2:]
        if val is None:
            return uvarint(0) if flex else struct.pack(">i", -1)
        out = [uvarint(len(val) + 1) if flex else struct.pack(">i", len(val))]
        for item in val:
            if et == "struct":
                out.append(encode_struct(field.fields, item, v, flex))
            else:
                out.append(_enc_value(et, item, v, flex, field))
        return b"".join(out)
    if t == "struct":
        # A nullable struct is preceded by an int8: -1 null, 1 present.
        if field.is_nullable(v):
            if val is None:
                return struct.pack(">b", -1)
            return struct.pack(">b", 1) + encode_struct(field.fields, val, v, flex)
        return encode_struct(field.fields, val, v, flex)
    raise ValueError("unknown type " + t)


def encode_struct(fields, obj, v, flex):
    """Encodes obj (a dict; missing keys take defaults) with the given schema."""
    obj = obj or {}
    out = []
    tagged = []
    for f in fields:
        if not f.present(v):
            continue
        val = obj.get(f.name, f.default_value(v))
        if flex and f.tag is not None:
            if f.name in obj and val is not None:
                tagged.append((f.tag, _enc_value(f.type, val, v, flex, f)))
            continue
        out.append(_enc_value(f.type, val, v, flex, f))
    if flex:
        extra = obj.get("_tags") or {}
        for tag, raw in extra.items():
            tagged.append((tag, raw))
        tagged.sort()
        out.append(uvarint(len(tagged)))
        for tag, raw in tagged:
            out.append(uvarint(tag) + uvarint(len(raw)) + raw)
    return b"".join(out)


def _dec_value(r, t, v, flex, field):
    if t in _FIXED:
        return r._unpack(_FIXED[t], struct.calcsize(_FIXED[t]))
    if t == "bool":
        return r.bool()
    if t == "uuid":
        return r.uuid()
    if t == "string":
        n = (r.uvarint() - 1) if flex else r.int16()
        if n < 0:
            return None
        return r.take(n).decode("utf-8", "replace")
    if t in ("bytes", "records"):
        n = (r.uvarint() - 1) if flex else r.int32()
        if n < 0:
            return None
        return r.take(n)
    if t.startswith("[]"):
        et = t[2:]
        n = (r.uvarint() - 1) if flex else r.int32()
        if n < 0:
            return None
        if n > r.remaining():
            raise ProtocolError("array count %d exceeds remaining bytes" % n)
        if et == "struct":
            return [decode_struct(r, field.fields, v, flex) for _ in range(n)]
        return [_dec_value(r, et, v, flex, field) for _ in range(n)]
    if t == "struct":
        if field.is_nullable(v) and r._unpack(">b", 1) < 0:
            return None
        return decode_struct(r, field.fields, v, flex)
    raise ValueError("unknown type " + t)


def decode_struct(r, fields, v, flex):
    obj = {}
    by_tag = {}
    for f in fields:
        if not f.present(v):
            continue
        if flex and f.tag is not None:
            by_tag[f.tag] = f
            obj[f.name] = f.default_value(v)
            continue
        obj[f.name] = _dec_value(r, f.type, v, flex, f)
    if flex:
        obj["_tags"] = {}          # unknown tags: raw bytes
        obj["_seen_tags"] = []     # every tag present on the wire
        ntags = r.uvarint()
        last = -1
        for _ in range(ntags):
            tag = r.uvarint()
            size = r.uvarint()
            raw = r.take(size)
            if tag <= last:
                raise ProtocolError("tags not in ascending order: %d after %d" % (tag, last))
            last = tag
            obj["_seen_tags"].append(tag)
            f = by_tag.get(tag)
            if f is not None:
                sub = Reader(raw)
                obj[f.name] = _dec_value(sub, f.type, v, flex, f)
                if sub.remaining():
                    raise ProtocolError("tag %d: %d bytes left over" % (tag, sub.remaining()))
            else:
                obj["_tags"][tag] = raw
    return obj


# ---------------------------------------------------------------- schemas

def S(name, versions, fields, **kw):
    """A struct array field."""
    return F(name, "[]struct", versions, fields=fields, **kw)


LEADER_ID_AND_EPOCH = [F("LeaderId", "int32", "0+", default=-1),
                       F("LeaderEpoch", "int32", "0+", default=-1)]
NODE_ENDPOINT = [F("NodeId", "int32", "0+"), F("Host", "string", "0+"),
                 F("Port", "int32", "0+"), F("Rack", "string", "0+", nullable="0+")]


class Api:
    def __init__(self, key, flex, request, response):
        self.key = key
        self.name = API_NAMES[key]
        self.flex = flex        # first flexible version
        self.request = request
        self.response = response

    def flexible(self, v):
        return self.flex is not None and v >= self.flex


APIS = {}


def _api(key, flex, request, response):
    APIS[key] = Api(key, flex, request, response)


_api(18, 3,
     [F("ClientSoftwareName", "string", "3+"), F("ClientSoftwareVersion", "string", "3+")],
     [F("ErrorCode", "int16", "0+"),
      S("ApiKeys", "0+", [F("ApiKey", "int16", "0+"), F("MinVersion", "int16", "0+"),
                          F("MaxVersion", "int16", "0+")]),
      F("ThrottleTimeMs", "int32", "1+"),
      S("SupportedFeatures", "3+", [F("Name", "string", "3+"), F("MinVersion", "int16", "3+"),
                                    F("MaxVersion", "int16", "3+")], tag=0),
      F("FinalizedFeaturesEpoch", "int64", "3+", tag=1, default=-1),
      S("FinalizedFeatures", "3+", [F("Name", "string", "3+"),
                                    F("MaxVersionLevel", "int16", "3+"),
                                    F("MinVersionLevel", "int16", "3+")], tag=2),
      F("ZkMigrationReady", "bool", "3+", tag=3)])

_api(3, 9,
     [S("Topics", "0+", [F("TopicId", "uuid", "10+"),
                         F("Name", "string", "0+", nullable="10+")], nullable="1+"),
      F("AllowAutoTopicCreation", "bool", "4+", default=True),
      F("IncludeClusterAuthorizedOperations", "bool", "8-10"),
      F("IncludeTopicAuthorizedOperations", "bool", "8+")],
     [F("ThrottleTimeMs", "int32", "3+"),
      S("Brokers", "0+", [F("NodeId", "int32", "0+"), F("Host", "string", "0+"),
                          F("Port", "int32", "0+"), F("Rack", "string", "1+", nullable="1+")]),
      F("ClusterId", "string", "2+", nullable="2+"),
      F("ControllerId", "int32", "1+", default=-1),
      S("Topics", "0+", [
          F("ErrorCode", "int16", "0+"),
          F("Name", "string", "0+", nullable="12+"),
          F("TopicId", "uuid", "10+"),
          F("IsInternal", "bool", "1+"),
          S("Partitions", "0+", [
              F("ErrorCode", "int16", "0+"), F("PartitionIndex", "int32", "0+"),
              F("LeaderId", "int32", "0+"), F("LeaderEpoch", "int32", "7+", default=-1),
              F("ReplicaNodes", "[]int32", "0+"), F("IsrNodes", "[]int32", "0+"),
              F("OfflineReplicas", "[]int32", "5+")]),
          F("TopicAuthorizedOperations", "int32", "8+", default=-2147483648)]),
      F("ClusterAuthorizedOperations", "int32", "8-10", default=-2147483648),
      F("ErrorCode", "int16", "13+")])

_api(0, 9,
     [F("TransactionalId", "string", "3+", nullable="3+"),
      F("Acks", "int16", "0+"), F("TimeoutMs", "int32", "0+"),
      S("TopicData", "0+", [
          F("Name", "string", "0-12"), F("TopicId", "uuid", "13+"),
          S("PartitionData", "0+", [F("Index", "int32", "0+"),
                                    F("Records", "records", "0+", nullable="0+")])])],
     [S("Responses", "0+", [
         F("Name", "string", "0-12"), F("TopicId", "uuid", "13+"),
         S("PartitionResponses", "0+", [
             F("Index", "int32", "0+"), F("ErrorCode", "int16", "0+"),
             F("BaseOffset", "int64", "0+"),
             F("LogAppendTimeMs", "int64", "2+", default=-1),
             F("LogStartOffset", "int64", "5+", default=-1),
             S("RecordErrors", "8+", [F("BatchIndex", "int32", "8+"),
                                      F("BatchIndexErrorMessage", "string", "8+",
                                        nullable="8+")]),
             F("ErrorMessage", "string", "8+", nullable="8+"),
             F("CurrentLeader", "struct", "10+", tag=0, fields=LEADER_ID_AND_EPOCH)])]),
      F("ThrottleTimeMs", "int32", "1+"),
      S("NodeEndpoints", "10+", NODE_ENDPOINT, tag=0)])

_api(1, 12,
     [F("ClusterId", "string", "12+", nullable="12+", tag=0),
      F("ReplicaId", "int32", "0-14", default=-1),
      F("ReplicaState", "struct", "15+", tag=1,
        fields=[F("ReplicaId", "int32", "15+", default=-1),
                F("ReplicaEpoch", "int64", "15+", default=-1)]),
      F("MaxWaitMs", "int32", "0+"), F("MinBytes", "int32", "0+"),
      F("MaxBytes", "int32", "3+", default=0x7FFFFFFF),
      F("IsolationLevel", "int8", "4+"),
      F("SessionId", "int32", "7+"), F("SessionEpoch", "int32", "7+", default=-1),
      S("Topics", "0+", [
          F("Topic", "string", "0-12"), F("TopicId", "uuid", "13+"),
          S("Partitions", "0+", [
              F("Partition", "int32", "0+"),
              F("CurrentLeaderEpoch", "int32", "9+", default=-1),
              F("FetchOffset", "int64", "0+"),
              F("LastFetchedEpoch", "int32", "12+", default=-1),
              F("LogStartOffset", "int64", "5+", default=-1),
              F("PartitionMaxBytes", "int32", "0+"),
              F("ReplicaDirectoryId", "uuid", "17+", tag=0),
              F("HighWatermark", "int64", "18+", tag=1, default=0x7FFFFFFFFFFFFFFF)])]),
      S("ForgottenTopicsData", "7+", [F("Topic", "string", "7-12"), F("TopicId", "uuid", "13+"),
                                      F("Partitions", "[]int32", "7+")]),
      F("RackId", "string", "11+")],
     [F("ThrottleTimeMs", "int32", "1+"),
      F("ErrorCode", "int16", "7+"),
      F("SessionId", "int32", "7+"),
      S("Responses", "0+", [
          F("Topic", "string", "0-12"), F("TopicId", "uuid", "13+"),
          S("Partitions", "0+", [
              F("PartitionIndex", "int32", "0+"), F("ErrorCode", "int16", "0+"),
              F("HighWatermark", "int64", "0+"),
              F("LastStableOffset", "int64", "4+", default=-1),
              F("LogStartOffset", "int64", "5+", default=-1),
              F("DivergingEpoch", "struct", "12+", tag=0,
                fields=[F("Epoch", "int32", "12+", default=-1),
                        F("EndOffset", "int64", "12+", default=-1)]),
              F("CurrentLeader", "struct", "12+", tag=1, fields=LEADER_ID_AND_EPOCH),
              F("SnapshotId", "struct", "12+", tag=2,
                fields=[F("EndOffset", "int64", "0+", default=-1),
                        F("Epoch", "int32", "0+", default=-1)]),
              S("AbortedTransactions", "4+", [F("ProducerId", "int64", "4+"),
                                              F("FirstOffset", "int64", "4+")],
                nullable="4+"),
              F("PreferredReadReplica", "int32", "11+", default=-1),
              F("Records", "records", "0+", nullable="0+")])]),
      S("NodeEndpoints", "16+", NODE_ENDPOINT, tag=0)])

_api(2, 6,
     [F("ReplicaId", "int32", "0+", default=-1),
      F("IsolationLevel", "int8", "2+"),
      S("Topics", "0+", [
          F("Name", "string", "0+"),
          S("Partitions", "0+", [F("PartitionIndex", "int32", "0+"),
                                 F("CurrentLeaderEpoch", "int32", "4+", default=-1),
                                 F("Timestamp", "int64", "0+")])]),
      F("TimeoutMs", "int32", "10+")],
     [F("ThrottleTimeMs", "int32", "2+"),
      S("Topics", "0+", [
          F("Name", "string", "0+"),
          S("Partitions", "0+", [F("PartitionIndex", "int32", "0+"),
                                 F("ErrorCode", "int16", "0+"),
                                 F("Timestamp", "int64", "1+", default=-1),
                                 F("Offset", "int64", "1+", default=-1),
                                 F("LeaderEpoch", "int32", "4+", default=-1)])])])

_api(22, 2,
     [F("TransactionalId", "string", "0+", nullable="0+"),
      F("TransactionTimeoutMs", "int32", "0+"),
      F("ProducerId", "int64", "3+", default=-1),
      F("ProducerEpoch", "int16", "3+", default=-1),
      F("Enable2Pc", "bool", "6+"), F("KeepPreparedTxn", "bool", "6+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("ProducerId", "int64", "0+", default=-1), F("ProducerEpoch", "int16", "0+"),
      F("OngoingTxnProducerId", "int64", "6+", default=-1),
      F("OngoingTxnProducerEpoch", "int16", "6+", default=-1)])

# Transactions: AddPartitionsToTxn v0-5, AddOffsetsToTxn, EndTxn, TxnOffsetCommit.
# v4+ is the batched form brokers send the coordinator (VerifyOnly: KIP-890).
_api(24, 3,
     [S("Transactions", "4+", [F("TransactionalId", "string", "4+"),
                               F("ProducerId", "int64", "4+"),
                               F("ProducerEpoch", "int16", "4+"),
                               F("VerifyOnly", "bool", "4+"),
                               S("Topics", "4+", [F("Name", "string", "4+"),
                                                  F("Partitions", "[]int32", "4+")])]),
      F("TransactionalId", "string", "0-3"), F("ProducerId", "int64", "0-3"),
      F("ProducerEpoch", "int16", "0-3"),
      S("Topics", "0-3", [F("Name", "string", "0+"), F("Partitions", "[]int32", "0+")])],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "4+"),
      S("ResultsByTransaction", "4+", [
          F("TransactionalId", "string", "4+"),
          S("TopicResults", "4+", [F("Name", "string", "4+"),
                                   S("ResultsByPartition", "4+", [
                                       F("PartitionIndex", "int32", "4+"),
                                       F("PartitionErrorCode", "int16", "4+")])])]),
      S("Results", "0-3", [F("Name", "string", "0+"),
                           S("Partitions", "0+", [F("PartitionIndex", "int32", "0+"),
                                                  F("ErrorCode", "int16", "0+")])])])

_api(25, 3,
     [F("TransactionalId", "string", "0+"), F("ProducerId", "int64", "0+"),
      F("ProducerEpoch", "int16", "0+"), F("GroupId", "string", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+")])

_api(26, 3,
     [F("TransactionalId", "string", "0+"), F("ProducerId", "int64", "0+"),
      F("ProducerEpoch", "int16", "0+"), F("Committed", "bool", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("ProducerId", "int64", "5+", default=-1), F("ProducerEpoch", "int16", "5+", default=-1)])

_api(28, 3,
     [F("TransactionalId", "string", "0+"), F("GroupId", "string", "0+"),
      F("ProducerId", "int64", "0+"), F("ProducerEpoch", "int16", "0+"),
      F("GenerationId", "int32", "3+", default=-1), F("MemberId", "string", "3+", default=""),
      F("GroupInstanceId", "string", "3+", nullable="3+"),
      S("Topics", "0+", [F("Name", "string", "0+"),
                         S("Partitions", "0+", [
                             F("PartitionIndex", "int32", "0+"),
                             F("CommittedOffset", "int64", "0+"),
                             F("CommittedLeaderEpoch", "int32", "2+", default=-1),
                             F("CommittedMetadata", "string", "0+", nullable="0+")])])],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Topics", "0+", [F("Name", "string", "0+"),
                         S("Partitions", "0+", [F("PartitionIndex", "int32", "0+"),
                                                F("ErrorCode", "int16", "0+")])])])

_api(65, 0,
     [F("TransactionalIds", "[]string", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("TransactionStates", "0+", [
          F("ErrorCode", "int16", "0+"), F("TransactionalId", "string", "0+"),
          F("TransactionState", "string", "0+"), F("TransactionTimeoutMs", "int32", "0+"),
          F("TransactionStartTimeMs", "int64", "0+"), F("ProducerId", "int64", "0+"),
          F("ProducerEpoch", "int16", "0+"),
          S("Topics", "0+", [F("Topic", "string", "0+"),
                             F("Partitions", "[]int32", "0+")])])])

_api(66, 0,
     [F("StateFilters", "[]string", "0+"), F("ProducerIdFilters", "[]int64", "0+"),
      F("DurationFilter", "int64", "1+", default=-1),
      F("TransactionalIdPattern", "string", "2+", nullable="2+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("UnknownStateFilters", "[]string", "0+"),
      S("TransactionStates", "0+", [F("TransactionalId", "string", "0+"),
                                    F("ProducerId", "int64", "0+"),
                                    F("TransactionState", "string", "0+")])])

_api(19, 5,
     [S("Topics", "0+", [
         F("Name", "string", "0+"), F("NumPartitions", "int32", "0+"),
         F("ReplicationFactor", "int16", "0+"),
         S("Assignments", "0+", [F("PartitionIndex", "int32", "0+"),
                                 F("BrokerIds", "[]int32", "0+")]),
         S("Configs", "0+", [F("Name", "string", "0+"),
                             F("Value", "string", "0+", nullable="0+")])]),
      F("timeoutMs", "int32", "0+", default=60000),
      F("validateOnly", "bool", "1+")],
     [F("ThrottleTimeMs", "int32", "2+"),
      S("Topics", "0+", [
          F("Name", "string", "0+"), F("TopicId", "uuid", "7+"),
          F("ErrorCode", "int16", "0+"),
          F("ErrorMessage", "string", "1+", nullable="0+"),
          F("TopicConfigErrorCode", "int16", "5+", tag=0),
          F("NumPartitions", "int32", "5+", default=-1),
          F("ReplicationFactor", "int16", "5+", default=-1),
          S("Configs", "5+", [F("Name", "string", "5+"),
                              F("Value", "string", "5+", nullable="5+"),
                              F("ReadOnly", "bool", "5+"),
                              F("ConfigSource", "int8", "5+", default=-1),
                              F("IsSensitive", "bool", "5+")], nullable="5+")])])

_api(23, 4,
     [F("ReplicaId", "int32", "3+", default=-2),
      S("Topics", "0+", [
          F("Topic", "string", "0+"),
          S("Partitions", "0+", [F("Partition", "int32", "0+"),
                                 F("CurrentLeaderEpoch", "int32", "2+", default=-1),
                                 F("LeaderEpoch", "int32", "0+")])])],
     [F("ThrottleTimeMs", "int32", "2+"),
      S("Topics", "0+", [
          F("Topic", "string", "0+"),
          S("Partitions", "0+", [F("ErrorCode", "int16", "0+"),
                                 F("Partition", "int32", "0+"),
                                 F("LeaderEpoch", "int32", "1+", default=-1),
                                 F("EndOffset", "int64", "0+", default=-1)])])])

_api(35, 2,
     [S("Topics", "0+", [F("Topic", "string", "0+"), F("Partitions", "[]int32", "0+")],
        nullable="0+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "3+"),
      S("Results", "0+", [
          F("ErrorCode", "int16", "0+"), F("LogDir", "string", "0+"),
          S("Topics", "0+", [F("Name", "string", "0+"), S("Partitions", "0+", [
              F("PartitionIndex", "int32", "0+"), F("PartitionSize", "int64", "0+"),
              F("OffsetLag", "int64", "0+"), F("IsFutureKey", "bool", "0+")])]),
          F("TotalBytes", "int64", "4+", default=-1),
          F("UsableBytes", "int64", "4+", default=-1),
          F("IsCordoned", "bool", "5+")])])


# AlterConfigs and IncrementalAlterConfigs (group and topic resources).
_CONFIGS_RESP = [F("ThrottleTimeMs", "int32", "0+"),
                 S("Responses", "0+", [F("ErrorCode", "int16", "0+"),
                                       F("ErrorMessage", "string", "0+", nullable="0+"),
                                       F("ResourceType", "int8", "0+"),
                                       F("ResourceName", "string", "0+")])]
_api(33, 2,
     [S("Resources", "0+", [F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
                            S("Configs", "0+", [F("Name", "string", "0+"),
                                                F("Value", "string", "0+", nullable="0+")])]),
      F("ValidateOnly", "bool", "0+")], _CONFIGS_RESP)
_api(44, 1,
     [S("Resources", "0+", [F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
                            S("Configs", "0+", [F("Name", "string", "0+"),
                                                F("ConfigOperation", "int8", "0+"),
                                                F("Value", "string", "0+", nullable="0+")])]),
      F("ValidateOnly", "bool", "0+")], _CONFIGS_RESP)

# The admin APIs AdminClient and the tools probe for: DescribeTopicPartitions,
# ElectLeaders, DescribeProducers, AlterReplicaLogDirs, DescribeQuorum.
_CURSOR = [F("TopicName", "string", "0+"), F("PartitionIndex", "int32", "0+")]
_api(75, 0,
     [S("Topics", "0+", [F("Name", "string", "0+")]),
      F("ResponsePartitionLimit", "int32", "0+", default=2000),
      F("Cursor", "struct", "0+", nullable="0+", fields=_CURSOR)],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Topics", "0+", [
          F("ErrorCode", "int16", "0+"), F("Name", "string", "0+", nullable="0+"),
          F("TopicId", "uuid", "0+"), F("IsInternal", "bool", "0+"),
          S("Partitions", "0+", [
              F("ErrorCode", "int16", "0+"), F("PartitionIndex", "int32", "0+"),
              F("LeaderId", "int32", "0+"), F("LeaderEpoch", "int32", "0+"),
              F("ReplicaNodes", "[]int32", "0+"), F("IsrNodes", "[]int32", "0+"),
              F("EligibleLeaderReplicas", "[]int32", "0+", nullable="0+"),
              F("LastKnownElr", "[]int32", "0+", nullable="0+"),
              F("OfflineReplicas", "[]int32", "0+")]),
          F("TopicAuthorizedOperations", "int32", "0+")]),
      F("NextCursor", "struct", "0+", nullable="0+", fields=_CURSOR)])
_api(43, 2,
     [F("ElectionType", "int8", "1+"),
      S("TopicPartitions", "0+", [F("Topic", "string", "0+"), F("Partitions", "[]int32", "0+")],
        nullable="0+"),
      F("TimeoutMs", "int32", "0+", default=60000)],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "1+"),
      S("ReplicaElectionResults", "0+", [
          F("Topic", "string", "0+"),
          S("PartitionResult", "0+", [F("PartitionId", "int32", "0+"),
                                      F("ErrorCode", "int16", "0+"),
                                      F("ErrorMessage", "string", "0+", nullable="0+")])])])
_api(61, 0,
     [S("Topics", "0+", [F("Name", "string", "0+"), F("PartitionIndexes", "[]int32", "0+")])],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Topics", "0+", [
          F("Name", "string", "0+"),
          S("Partitions", "0+", [
              F("PartitionIndex", "int32", "0+"), F("ErrorCode", "int16", "0+"),
              F("ErrorMessage", "string", "0+", nullable="0+"),
              S("ActiveProducers", "0+", [
                  F("ProducerId", "int64", "0+"), F("ProducerEpoch", "int32", "0+"),
                  F("LastSequence", "int32", "0+"), F("LastTimestamp", "int64", "0+"),
                  F("CoordinatorEpoch", "int32", "0+"),
                  F("CurrentTxnStartOffset", "int64", "0+")])])])])
_api(34, 2,
     [S("Dirs", "0+", [F("Path", "string", "0+"),
                       S("Topics", "0+", [F("Name", "string", "0+"),
                                          F("Partitions", "[]int32", "0+")])])],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Results", "0+", [F("TopicName", "string", "0+"),
                          S("Partitions", "0+", [F("PartitionIndex", "int32", "0+"),
                                                 F("ErrorCode", "int16", "0+")])])])
_REPLICA = [F("ReplicaId", "int32", "0+"), F("ReplicaDirectoryId", "uuid", "2+"),
            F("LogEndOffset", "int64", "0+"), F("LastFetchTimestamp", "int64", "1+", default=-1),
            F("LastCaughtUpTimestamp", "int64", "1+", default=-1)]
_api(55, 0,
     [S("Topics", "0+", [F("TopicName", "string", "0+"),
                         S("Partitions", "0+", [F("PartitionIndex", "int32", "0+")])])],
     [F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "2+", nullable="2+"),
      S("Topics", "0+", [
          F("TopicName", "string", "0+"),
          S("Partitions", "0+", [
              F("PartitionIndex", "int32", "0+"), F("ErrorCode", "int16", "0+"),
              F("ErrorMessage", "string", "2+", nullable="2+"),
              F("LeaderId", "int32", "0+"), F("LeaderEpoch", "int32", "0+"),
              F("HighWatermark", "int64", "0+"),
              S("CurrentVoters", "0+", _REPLICA), S("Observers", "0+", _REPLICA)])]),
      S("Nodes", "2+", [F("NodeId", "int32", "2+"),
                        S("Listeners", "2+", [F("Name", "string", "2+"), F("Host", "string", "2+"),
                                              F("Port", "uint16", "2+")])])])

_api(17, None, [F("Mechanism", "string", "0+")],
     [F("ErrorCode", "int16", "0+"), F("Mechanisms", "[]string", "0+")])
_api(36, 2, [F("AuthBytes", "bytes", "0+")],
     [F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "0+", nullable="0+"),
      F("AuthBytes", "bytes", "0+"), F("SessionLifetimeMs", "int64", "1+")])
_api(50, 0, [S("Users", "0+", [F("Name", "string", "0+")], nullable="0+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("ErrorMessage", "string", "0+", nullable="0+"),
      S("Results", "0+", [F("User", "string", "0+"), F("ErrorCode", "int16", "0+"),
                          F("ErrorMessage", "string", "0+", nullable="0+"),
                          S("CredentialInfos", "0+", [F("Mechanism", "int8", "0+"),
                                                      F("Iterations", "int32", "0+")])])])
_api(51, 0,
     [S("Deletions", "0+", [F("Name", "string", "0+"), F("Mechanism", "int8", "0+")]),
      S("Upsertions", "0+", [F("Name", "string", "0+"), F("Mechanism", "int8", "0+"),
                             F("Iterations", "int32", "0+"), F("Salt", "bytes", "0+"),
                             F("SaltedPassword", "bytes", "0+")])],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Results", "0+", [F("User", "string", "0+"), F("ErrorCode", "int16", "0+"),
                          F("ErrorMessage", "string", "0+", nullable="0+")])])


# ACLs: DescribeAcls, CreateAcls, DeleteAcls (flexible from v2).
_ACL_FILTER = [F("ResourceTypeFilter", "int8", "0+"),
               F("ResourceNameFilter", "string", "0+", nullable="0+"),
               F("PatternTypeFilter", "int8", "1+", default=3),
               F("PrincipalFilter", "string", "0+", nullable="0+"),
               F("HostFilter", "string", "0+", nullable="0+"),
               F("Operation", "int8", "0+"), F("PermissionType", "int8", "0+")]
_api(29, 2, _ACL_FILTER,
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("ErrorMessage", "string", "0+", nullable="0+"),
      S("Resources", "0+", [F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
                            F("PatternType", "int8", "1+", default=3),
                            S("Acls", "0+", [F("Principal", "string", "0+"),
                                             F("Host", "string", "0+"),
                                             F("Operation", "int8", "0+"),
                                             F("PermissionType", "int8", "0+")])])])
_api(30, 2,
     [S("Creations", "0+", [F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
                            F("ResourcePatternType", "int8", "1+", default=3),
                            F("Principal", "string", "0+"), F("Host", "string", "0+"),
                            F("Operation", "int8", "0+"), F("PermissionType", "int8", "0+")])],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Results", "0+", [F("ErrorCode", "int16", "0+"),
                          F("ErrorMessage", "string", "0+", nullable="0+")])])
_api(31, 2, [S("Filters", "0+", _ACL_FILTER)],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("FilterResults", "0+", [
          F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "0+", nullable="0+"),
          S("MatchingAcls", "0+", [
              F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "0+", nullable="0+"),
              F("ResourceType", "int8", "0+"), F("ResourceName", "string", "0+"),
              F("PatternType", "int8", "1+", default=3), F("Principal", "string", "0+"),
              F("Host", "string", "0+"), F("Operation", "int8", "0+"),
              F("PermissionType", "int8", "0+")])])])

# The KIP-848 consumer group protocol: ConsumerGroupHeartbeat, ConsumerGroupDescribe.
_CG_TPS = [F("TopicId", "uuid", "0+"), F("Partitions", "[]int32", "0+")]
_api(68, 0,
     [F("GroupId", "string", "0+"), F("MemberId", "string", "0+"),
      F("MemberEpoch", "int32", "0+"), F("InstanceId", "string", "0+", nullable="0+"),
      F("RackId", "string", "0+", nullable="0+"),
      F("RebalanceTimeoutMs", "int32", "0+", default=-1),
      F("SubscribedTopicNames", "[]string", "0+", nullable="0+"),
      F("SubscribedTopicRegex", "string", "1+", nullable="1+"),
      F("ServerAssignor", "string", "0+", nullable="0+"),
      S("TopicPartitions", "0+", _CG_TPS, nullable="0+")],
     [F("ThrottleTimeMs", "int32", "0+"), F("ErrorCode", "int16", "0+"),
      F("ErrorMessage", "string", "0+", nullable="0+"),
      F("MemberId", "string", "0+", nullable="0+"), F("MemberEpoch", "int32", "0+"),
      F("HeartbeatIntervalMs", "int32", "0+"),
      F("Assignment", "struct", "0+", nullable="0+",
        fields=[S("TopicPartitions", "0+", _CG_TPS)])])
_CG_DESC_ASSIGNMENT = [S("TopicPartitions", "0+", [F("TopicId", "uuid", "0+"),
                                                   F("TopicName", "string", "0+"),
                                                   F("Partitions", "[]int32", "0+")])]
_api(69, 0,
     [F("GroupIds", "[]string", "0+"), F("IncludeAuthorizedOperations", "bool", "0+")],
     [F("ThrottleTimeMs", "int32", "0+"),
      S("Groups", "0+", [
          F("ErrorCode", "int16", "0+"), F("ErrorMessage", "string", "0+", nullable="0+"),
          F("GroupId", "string", "0+"), F("GroupState", "string", "0+"),
          F("GroupEpoch", "int32", "0+"), F("AssignmentEpoch", "int32", "0+"),
          F("AssignorName", "string", "0+"),
          S("Members", "0+", [
              F("MemberId", "string", "0+"), F("InstanceId", "string", "0+", nullable="0+"),
              F("RackId", "string", "0+", nullable="0+"), F("MemberEpoch", "int32", "0+"),
              F("ClientId", "string", "0+"), F("ClientHost", "string", "0+"),
              F("SubscribedTopicNames", "[]string", "0+"),
              F("SubscribedTopicRegex", "string", "0+", nullable="0+"),
              F("Assignment", "struct", "0+", fields=_CG_DESC_ASSIGNMENT),
              F("TargetAssignment", "struct", "0+", fields=_CG_DESC_ASSIGNMENT),
              F("MemberType", "int8", "1+", default=-1)]),
          F("AuthorizedOperations", "int32", "0+", default=-2147483648)])])


def request_header(key, version, corr, client_id="kproto", flexible=None):
    """Request header v1, or v2 (v1 plus an empty tag section) for flexible versions."""
    if flexible is None:
        flexible = key in APIS and APIS[key].flexible(version)
    cid = _enc_value("string", client_id, 0, False, None)
    h = struct.pack(">hhi", key, version, corr) + cid
    return h + (b"\x00" if flexible else b"")


def encode_request(key, version, body, corr, client_id="kproto"):
    api = APIS[key]
    flex = api.flexible(version)
    return request_header(key, version, corr, client_id, flex) + \
        encode_struct(api.request, body, version, flex)


def response_flexible_header(key, version):
    """Response header v1 for flexible versions, except ApiVersions (always v0)."""
    return key != 18 and APIS[key].flexible(version)


def decode_response(key, version, payload, strict=True):
    """payload: the frame without its size prefix. Returns (correlation id, body dict)."""
    r = Reader(payload)
    corr = r.int32()
    if response_flexible_header(key, version):
        decode_struct(r, [], version, True)
    api = APIS[key]
    body = decode_struct(r, api.response, version, api.flexible(version))
    if strict and r.remaining():
        raise ProtocolError("%s v%d response: %d bytes left over" % (
            api.name, version, r.remaining()))
    return corr, body


def decode_request(payload):
    """Decodes a request frame (used by the capture proxy and for sanity checks).
    Returns (key, version, corr, client_id, body or None if the API is unknown here)."""
    r = Reader(payload)
    key, version, corr = r.int16(), r.int16(), r.int32()
    client_id = _dec_value(r, "string", 0, False, None)
    body = None
    if key in APIS:
        flex = APIS[key].flexible(version)
        if flex:
            decode_struct(r, [], version, True)
        body = decode_struct(r, APIS[key].request, version, flex)
    return key, version, corr, client_id, body


# ---------------------------------------------------------------- connection

def frame(payload):
    return struct.pack(">i", len(payload)) + payload


class Conn:
    """One TCP connection. Requests may be pipelined: send() many, then recv()."""

    def __init__(self, host, port=None, client_id="kproto", timeout=15.0, ssl_context=None):
        """ssl_context: an ssl.SSLContext to speak TLS with (SSL, SASL_SSL listeners)."""
        if port is None:
            host, port = host.rsplit(":", 1)
        self.addr = (host, int(port))
        self.client_id = client_id
        self.timeout = timeout
        self.sock = socket.create_connection(self.addr, timeout=timeout)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ssl_context is not None:
            self.sock = ssl_context.wrap_socket(self.sock, server_hostname=host)
        self.next_corr = 1
        self.pending = []   # (corr, key, version) in send order
        self.buf = b""

    def close(self):
        try:
            self.sock.close()
        except OSError:
            pass

    def __enter__(self):
        return self

    def __exit__(self, *a):
        self.close()

    # --- sending
    def send_raw(self, data):
        self.sock.sendall(data)

    def send_frame(self, payload):
        self.sock.sendall(frame(payload))

    def build(self, key, version, body=None, corr=None, expect_response=True):
        """Returns (framed bytes, corr) and records the pending response."""
        if corr is None:
            corr = self.next_corr
            self.next_corr += 1
        payload = encode_request(key, version, body or {}, corr, self.client_id)
        if expect_response:
            self.pending.append((corr, key, version))
        return frame(payload), corr

    def send(self, key, version, body=None, corr=None, expect_response=True):
        data, corr = self.build(key, version, body, corr, expect_response)
        self.sock.sendall(data)
        return corr

    # --- receiving
    def _fill(self, n, deadline):
        while len(self.buf) < n:
            left = deadline - time.time()
            if left <= 0:
                raise socket.timeout("timed out waiting for %d bytes" % n)
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(1 << 20)
            except ConnectionResetError:
                chunk = b""
            if not chunk:
                raise ConnectionClosed("connection closed by peer")
            self.buf += chunk

    def recv_frame(self, timeout=None):
        deadline = time.time() + (self.timeout if timeout is None else timeout)
        self._fill(4, deadline)
        (size,) = struct.unpack(">i", self.buf[:4])
        if size < 4:
            raise ProtocolError("response size %d" % size)
        self._fill(4 + size, deadline)
        payload = self.buf[4:4 + size]
        self.buf = self.buf[4 + size:]
        return payload

    def recv(self, timeout=None, strict=True):
        """Next response, decoded for the oldest pending request: (corr, body)."""
        if not self.pending:
            raise ProtocolError("no request pending")
        payload = self.recv_frame(timeout)
        corr, key, version = self.pending.pop(0)
        got, body = decode_response(key, version, payload, strict)
        if got != corr:
            raise ProtocolError("correlation id %d, expected %d" % (got, corr))
        return body

    def request(self, key, version, body=None, timeout=None):
        self.send(key, version, body)
        return self.recv(timeout)

    def wait_closed(self, timeout=5.0):
        """True if the peer closes the connection within timeout (bytes received first
        are kept in self.buf)."""
        deadline = time.time() + timeout
        while True:
            left = deadline - time.time()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True
            self.buf += chunk


# ---------------------------------------------------------------- request helpers

def api_versions(c, version=3):
    body = {}
    if version >= 3:
        body = {"ClientSoftwareName": "kproto", "ClientSoftwareVersion": "1.0"}
    return c.request(18, version, body)


def metadata(c, topics, version=9, allow_auto=True):
    """topics: None (all topics, v1+) or a list of names."""
    body = {"AllowAutoTopicCreation": allow_auto,
            "Topics": None if topics is None else [{"Name": t} for t in topics]}
    return c.request(3, version, body)


def produce_body(topic, partition, records, acks=-1, timeout_ms=10000, txn_id=None):
    return {"TransactionalId": txn_id, "Acks": acks, "TimeoutMs": timeout_ms,
            "TopicData": [{"Name": topic,
                           "PartitionData": [{"Index": partition, "Records": records}]}]}


def produce(c, topic, partition, records, version=7, acks=-1, timeout_ms=10000):
    """Produces one partition's records; returns that partition's response dict."""
    resp = c.request(0, version, produce_body(topic, partition, records, acks, timeout_ms))
    return resp["Responses"][0]["PartitionResponses"][0]


def fetch_body(topic, partition, offset, max_wait=0, min_bytes=1, max_bytes=0x7FFFFFFF,
               partition_max_bytes=1 << 20, isolation=0):
    return {"ReplicaId": -1, "MaxWaitMs": max_wait, "MinBytes": min_bytes,
            "MaxBytes": max_bytes, "IsolationLevel": isolation, "SessionId": 0,
            "SessionEpoch": -1,
            "Topics": [{"Topic": topic, "Partitions": [
                {"Partition": partition, "FetchOffset": offset,
                 "PartitionMaxBytes": partition_max_bytes}]}],
            "ForgottenTopicsData": [], "RackId": ""}


def fetch(c, topic, partition, offset, version=11, timeout=None, **kw):
    """Fetches one partition; returns (top-level response, partition dict)."""
    resp = c.request(1, version, fetch_body(topic, partition, offset, **kw), timeout=timeout)
    return resp, resp["Responses"][0]["Partitions"][0]


def produce_later(bootstrap, topic, partition, value, delay):
    """Produces one record `value` from a connection of its own, `delay` seconds from
    now, in a thread (asserting success). Returns the started thread; its
    produced_at is the time it sent the request."""
    def run():
        time.sleep(delay)
        with Conn(bootstrap) as c2:
            th.produced_at = time.time()
            assert produce(c2, topic, partition, batch([value]))["ErrorCode"] == NONE

    th = threading.Thread(target=run)
    th.produced_at = None
    th.start()
    return th


def list_offsets(c, topic, partition, timestamp, version=7, isolation=0):
    body = {"ReplicaId": -1, "IsolationLevel": isolation,
            "Topics": [{"Name": topic, "Partitions": [
                {"PartitionIndex": partition, "Timestamp": timestamp}]}]}
    resp = c.request(2, version, body)
    return resp["Topics"][0]["Partitions"][0]


def init_producer_id(c, version=4, txn_id=None, producer_id=-1, epoch=-1, timeout=20.0):
    """InitProducerId, retried while the broker's coordinator is still loading
    (COORDINATOR_LOAD_IN_PROGRESS 14 / COORDINATOR_NOT_AVAILABLE 15 / NOT_COORDINATOR 16,
    as Kafka answers right after start-up)."""
    deadline = time.time() + timeout
    while True:
        resp = c.request(22, version, {"TransactionalId": txn_id, "TransactionTimeoutMs": 60000,
                                       "ProducerId": producer_id, "ProducerEpoch": epoch})
        if resp["ErrorCode"] not in (14, 15, 16) or time.time() > deadline:
            return resp
        time.sleep(0.2)


def create_topics(c, topics, version=5, validate_only=False, timeout_ms=30000):
    """topics: list of (name, partitions, replication factor[, {config: value}])."""
    body = {"Topics": [{"Name": t[0], "NumPartitions": t[1], "ReplicationFactor": t[2],
                        "Assignments": [],
                        "Configs": [{"Name": k, "Value": v}
                                    for k, v in (t[3] if len(t) > 3 else {}).items()]}
                       for t in topics],
            "timeoutMs": timeout_ms, "validateOnly": validate_only}
    return c.request(19, version, body)


def create_topic(c, name, partitions=1, configs=None, timeout=20.0):
    """Creates a topic, asserting success, and waits until every partition answers
    ListOffsets without error (a new Kafka partition briefly has no leader)."""
    res = create_topics(c, [(name, partitions, 1, configs or {})])["Topics"][0]
    if res["ErrorCode"] != NONE:
        raise AssertionError("CreateTopics %s: %d %s" % (name, res["ErrorCode"],
                                                         res["ErrorMessage"]))
    wait_topic(c, name, partitions, timeout)
    return res


def wait_topic(c, name, partitions, timeout=20.0):
    """Waits until Metadata shows the topic with a leader for every partition and
    every partition answers ListOffsets(latest) without error."""
    deadline = time.time() + timeout
    while True:
        md = metadata(c, [name], version=9, allow_auto=False)
        t = md["Topics"][0]
        if (t["ErrorCode"] == NONE and len(t["Partitions"]) == partitions
                and all(p["LeaderId"] >= 0 for p in t["Partitions"])
                and all(list_offsets(c, name, p, -1)["ErrorCode"] == NONE
                        for p in range(partitions))):
            return md
        if time.time() > deadline:
            raise AssertionError("topic %s not ready: %r" % (name, t))
        time.sleep(0.1)


def offset_for_leader_epoch(c, topic, partition, leader_epoch, current_leader_epoch=-1,
                            version=4):
    body = {"ReplicaId": -1, "Topics": [{"Topic": topic, "Partitions": [
        {"Partition": partition, "CurrentLeaderEpoch": current_leader_epoch,
         "LeaderEpoch": leader_epoch}]}]}
    resp = c.request(23, version, body)
    return resp["Topics"][0]["Partitions"][0]


# ---------------------------------------------------------------- CRC-32C

def _crc32c_table():
    poly = 0x82F63B78
    table = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ poly if c & 1 else c >> 1
        table.append(c)
    return table


_CRC_TABLE = _crc32c_table()


def crc32c(data, crc=0):
    crc ^= 0xFFFFFFFF
    t = _CRC_TABLE
    for b in bytes(data):
        crc = t[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------- RecordBatch v2

CODEC_NONE, CODEC_GZIP, CODEC_SNAPPY, CODEC_LZ4, CODEC_ZSTD = 0, 1, 2, 3, 4
ATTR_LOG_APPEND_TIME = 0x08
ATTR_TRANSACTIONAL = 0x10
ATTR_CONTROL = 0x20


class Record:
    def __init__(self, value, key=None, headers=(), timestamp_delta=0, offset_delta=None,
                 attributes=0):
        self.value = value.encode() if isinstance(value, str) else value
        self.key = key.encode() if isinstance(key, str) else key
        self.headers = list(headers)
        self.timestamp_delta = timestamp_delta
        self.offset_delta = offset_delta
        self.attributes = attributes

    def encode(self, offset_delta):
        od = self.offset_delta if self.offset_delta is not None else offset_delta
        body = bytes([self.attributes]) + varint(self.timestamp_delta) + varint(od)
        for b in (self.key, self.value):
            body += varint(-1) if b is None else varint(len(b)) + b
        body += varint(len(self.headers))
        for hk, hv in self.headers:
            hk = hk.encode() if isinstance(hk, str) else hk
            hv = hv.encode() if isinstance(hv, str) else hv
            body += varint(len(hk)) + hk
            body += varint(-1) if hv is None else varint(len(hv)) + hv
        return varint(len(body)) + body

    def __repr__(self):
        return "Record(key=%r, value=%r, ts+%d, off+%s)" % (
            self.key, self.value, self.timestamp_delta, self.offset_delta)


def now_ms():
    return int(time.time() * 1000)


def batch(values=None, records=None, base_offset=0, partition_leader_epoch=-1, magic=2,
          attributes=0, last_offset_delta=None, base_timestamp=None, max_timestamp=None,
          producer_id=-1, producer_epoch=-1, base_sequence=-1, records_count=None,
          crc=None, records_blob=None, compress=None):
    """Builds one RecordBatch v2. Every field can be forced, to build broken batches.

    values: list of values (str/bytes) -> one record each; or records: list of Record.
    compress: None or CODEC_GZIP (the records section is gzip-compressed and the codec
    bits are set). records_blob replaces the encoded records section as-is."""
    if records is None:
        records = [Record(v) for v in (values or [])]
    if base_timestamp is None:
        base_timestamp = now_ms()
    if records_blob is None:
        records_blob = b"".join(r.encode(i) for i, r in enumerate(records))
        if compress == CODEC_GZIP:
            co = zlib.compressobj(6, zlib.DEFLATED, 31)
            records_blob = co.compress(records_blob) + co.flush()
            attributes = (attributes & ~7) | CODEC_GZIP
        elif compress:
            raise ValueError("only gzip compression is built in")
    n = len(records)
    if last_offset_delta is None:
        last_offset_delta = max(n - 1, 0)
    if records_count is None:
        records_count = n
    if max_timestamp is None:
        max_timestamp = base_timestamp + max([r.timestamp_delta for r in records] or [0])
    after_crc = struct.pack(">hiqqqhii", attributes, last_offset_delta, base_timestamp,
                            max_timestamp, producer_id, producer_epoch, base_sequence,
                            records_count) + records_blob
    if crc is None:
        crc = crc32c(after_crc)
    tail = struct.pack(">ibI", partition_leader_epoch, magic, crc) + after_crc
    return struct.pack(">qi", base_offset, len(tail)) + tail


class Batch:
    """A parsed RecordBatch (any magic is reported; records decoded for uncompressed v2)."""

    HEADER = 61

    def __init__(self, data, pos):
        r = Reader(data, pos)
        self.pos = pos
        self.base_offset = r.int64()
        self.batch_length = r.int32()
        self.size = self.batch_length + 12
        self.partition_leader_epoch = r.int32()
        self.magic = r.int8()
        self.crc = r.uint32()
        self.raw = bytes(data[pos:pos + self.size])
        self.attributes = r.int16()
        self.last_offset_delta = r.int32()
        self.base_timestamp = r.int64()
        self.max_timestamp = r.int64()
        self.producer_id = r.int64()
        self.producer_epoch = r.int16()
        self.base_sequence = r.int32()
        self.records_count = r.int32()
        self.crc_ok = crc32c(self.raw[21:]) == self.crc
        self.codec = self.attributes & 7
        self.is_control = bool(self.attributes & ATTR_CONTROL)
        self.records = None
        if self.codec in (CODEC_NONE, CODEC_GZIP) and self.magic == 2:
            blob = self.raw[self.HEADER:]
            if self.codec == CODEC_GZIP:
                blob = zlib.decompress(blob, 31)
            rr = Reader(blob)
            self.records = []
            for _ in range(self.records_count):
                rr.varint()  # length
                attrs = rr.int8()
                tsd = rr.varint()
                od = rr.varint()
                kl = rr.varint()
                key = rr.take(kl) if kl >= 0 else None
                vl = rr.varint()
                val = rr.take(vl) if vl >= 0 else None
                headers = []
                for _ in range(rr.varint()):
                    hk = rr.take(rr.varint())
                    hl = rr.varint()
                    headers.append((hk, rr.take(hl) if hl >= 0 else None))
                self.records.append(Record(val, key, headers, tsd, od, attrs))

    @property
    def last_offset(self):
        return self.base_offset + self.last_offset_delta

    def offsets_values(self):
        """[(offset, value)] of the batch's records."""
        return [(self.base_offset + r.offset_delta, r.value) for r in self.records or []]

    def __repr__(self):
        return "Batch(base=%d, count=%d, pid=%d, epoch=%d, seq=%d, %d bytes)" % (
            self.base_offset, self.records_count, self.producer_id, self.producer_epoch,
            self.base_sequence, self.size)


def parse_batches(data):
    """Whole batches in a Records blob; a truncated trailing batch is ignored (KIP-74)."""
    out = []
    pos = 0
    data = data or b""
    while len(data) - pos >= 17:
        (length,) = struct.unpack(">i", data[pos + 8:pos + 12])
        if pos + 12 + length > len(data):
            break
        out.append(Batch(data, pos))
        pos += 12 + length
    return out
