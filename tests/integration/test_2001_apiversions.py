"""ApiVersions: advertised ranges, header rules and the unknown-version answer.

Generic tests run against Skiff and real Kafka (SKIFF_TEST_EXTERNAL); tests marked
skiff_only check the exact ranges Skiff must advertise (docs: COMPAT section 3),
which deliberately differ from Kafka 4.3.1's.
"""

import struct

import pytest

import harness
import kproto as k

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="Skiff-specific expectation (differs from Kafka)")

# Ranges Skiff must advertise exactly.
EXACT = {
    18: (0, 4),    # ApiVersions
    3: (0, 13),    # Metadata
    0: (0, 13),    # Produce: min 0 advertised (librdkafka <= 2.11.0 compression), v3+ served
    1: (4, 17),    # Fetch: topic ids from v13, without fetch sessions
    2: (1, 10),    # ListOffsets
    19: (2, 7),    # CreateTopics
    20: (1, 6),    # DeleteTopics
    37: (0, 3),    # CreatePartitions
    32: (1, 4),    # DescribeConfigs
    22: (0, 5),    # InitProducerId
    23: (2, 4),    # OffsetForLeaderEpoch
}

# Every other key Skiff may advertise, with its allowed (min, max ceiling): the min
# must equal Kafka 4.x's so that librdkafka's single-version feature checks pass;
# the max may grow up to Kafka 4.3's.
ALLOWED = {
    8: (2, 10), 9: (1, 10), 10: (0, 6), 11: (0, 9), 12: (0, 4), 13: (0, 5), 14: (0, 5),
    15: (0, 6), 16: (0, 5), 17: (0, 1), 21: (0, 2), 24: (0, 5), 25: (0, 4), 26: (0, 4),
    28: (0, 4), 29: (1, 3), 30: (1, 3), 31: (1, 3), 33: (0, 2), 35: (1, 5), 36: (0, 2),
    42: (0, 2), 43: (0, 2), 44: (0, 1), 45: (0, 1), 46: (0, 0), 47: (0, 0), 48: (0, 1),
    49: (0, 1), 50: (0, 0), 51: (0, 0), 55: (0, 2), 60: (0, 2), 61: (0, 0), 65: (0, 0), 66: (0, 1),
    74: (0, 0), 75: (0, 0),
    68: (0, 1), 69: (0, 1),  # ConsumerGroupHeartbeat, ConsumerGroupDescribe (KIP-848)
    34: (1, 2),  # AlterReplicaLogDirs (v0 was removed in Kafka 4.0)
}

# Never advertised: telemetry, share groups, streams groups, KRaft/inter-broker.
FORBIDDEN = {71, 72, 76, 77, 78, 79, 90, 91, 92, 88, 89, 27,
             52, 53, 54, 56, 57, 58, 59, 62, 63, 64, 67, 70, 73, 80, 81, 82, 83,
             84, 85, 86, 87, 4, 5, 6, 7}

# Skiff's node-to-node RPCs (proto/rpc) take keys from here on: served to other nodes,
# never advertised to clients.
INTERNAL_KEY_MIN = 10000

# librdkafka < 2.11.1 enables a feature only if the advertised range contains these.
FEATURE_VERSIONS = {0: (3, 7), 1: (4, 10), 10: (0,), 2: (1,), 22: (0,), 18: (0,),
                    17: (0, 1), 36: (0,), 8: (2,), 9: (1,), 11: (0,), 12: (0,),
                    13: (0,), 14: (0,)}


def ranges(resp):
    return {a["ApiKey"]: (a["MinVersion"], a["MaxVersion"]) for a in resp["ApiKeys"]}


def raw_api_versions(c, version, corr, body=b"", header_v2=None):
    if header_v2 is None:
        header_v2 = version >= 3
    c.send_frame(k.request_header(18, version, corr, "raw", flexible=header_v2) + body)
    return c.recv_frame()


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_every_version_answers_with_v0_response_header(broker, version):
    with k.Conn(broker.bootstrap) as c:
        body = b""
        if version >= 3:
            body = k.encode_struct(k.APIS[18].request, {"ClientSoftwareName": "kproto",
                                                        "ClientSoftwareVersion": "1.0"},
                                   version, True)
        payload = raw_api_versions(c, version, 4242, body)
        # strict decode with a v0 header: a tag byte after the correlation id would
        # shift every field and leave bytes over.
        corr, resp = k.decode_response(18, version, payload)
        assert corr == 4242
        assert resp["ErrorCode"] == k.NONE
        r = ranges(resp)
        assert r[18][0] == 0 and r[18][1] >= 4
        assert payload[4:6] == b"\x00\x00"  # ErrorCode right after the correlation id
        if version >= 1:
            assert resp["ThrottleTimeMs"] == 0


def test_all_versions_agree(broker):
    with k.Conn(broker.bootstrap) as c:
        seen = [ranges(k.api_versions(c, v)) for v in range(5)]
    for r in seen[1:]:
        assert r == seen[0]


@pytest.mark.parametrize("version", [0, 1, 2, 3, 4])
def test_no_internal_api_advertised(broker, version):
    """No client may see a key of Skiff's internal RPCs, in any ApiVersions version."""
    with k.Conn(broker.bootstrap) as c:
        r = ranges(k.api_versions(c, version))
    assert 18 in r and 3 in r, "the answer lists the public APIs"
    internal = sorted(key for key in r if key >= INTERNAL_KEY_MIN)
    assert not internal, "internal API keys advertised: %r" % internal


def _handoff_ready_body(parts):
    """HandoffReadyRequest v0 (flexible): compact array of (topic id, partition, epoch,
    source log, source LSN), each with an empty tag section, then the body's."""
    out = k.uvarint(len(parts) + 1)
    for topic, part, epoch, log, lsn in parts:
        out += topic + struct.pack(">iiqq", part, epoch, log, lsn) + b"\x00"
    return out + b"\x00"


@skiff_only
def test_internal_rpc_served_but_not_advertised(broker):
    """HandoffReady (key 10000) is served through the same dispatch table: response
    header v1, one entry per partition in the request's order. A node without etcd
    adopts nothing, so each partition carries an error."""
    parts = [(bytes(range(16)), 3, 7, 42, 1000), (bytes(range(16, 32)), 0, 2, 42, 1001)]
    with k.Conn(broker.bootstrap) as c:
        c.send_frame(k.request_header(INTERNAL_KEY_MIN, 0, 515, "skiff-node-9", flexible=True)
                     + _handoff_ready_body(parts))
        rd = k.Reader(c.recv_frame())
        assert rd.int32() == 515
        assert rd.uvarint() == 0  # header v1: empty tag section
        assert rd.int32() == 0    # ThrottleTimeMs
        assert rd.int16() == k.NONE
        n = rd.uvarint() - 1
        got = []
        for _ in range(n):
            topic, part, err = rd.uuid(), rd.int32(), rd.int16()
            assert rd.uvarint() == 0
            got.append((topic, part, err))
        assert rd.uvarint() == 0
        assert rd.remaining() == 0
        assert [(t, p) for t, p, _ in got] == [(t, p) for t, p, _, _, _ in parts]
        assert all(err != k.NONE for _, _, err in got), got
        # the connection stays usable, and ApiVersions still hides the key
        r = ranges(k.api_versions(c, 3))
        assert INTERNAL_KEY_MIN not in r


@pytest.mark.parametrize("version", [5, 127, 32767])
def test_unknown_version_gets_v0_error_body(broker, version):
    """Kafka answers an ApiVersions version it does not know with a v0 body:
    UNSUPPORTED_VERSION and a single entry telling its own ApiVersions range."""
    with k.Conn(broker.bootstrap) as c:
        payload = raw_api_versions(c, version, 77, body=b"whatever follows is ignored")
        corr, resp = k.decode_response(18, 0, payload)
        assert corr == 77
        assert resp["ErrorCode"] == k.UNSUPPORTED_VERSION
        assert [(a["ApiKey"], a["MinVersion"], a["MaxVersion"]) for a in resp["ApiKeys"]] \
            == [(18, 0, 4)]
        # the connection stays usable: clients retry with the indicated version
        assert k.api_versions(c, 4)["ErrorCode"] == k.NONE


def test_invalid_client_software_name(broker):
    """v3+ ClientSoftwareName/Version must match [a-zA-Z0-9](?:[a-zA-Z0-9\\-.]*[a-zA-Z0-9])?;
    Kafka answers INVALID_REQUEST with no ApiKeys and keeps the connection."""
    with k.Conn(broker.bootstrap) as c:
        resp = c.request(18, 3, {"ClientSoftwareName": "bad name!",
                                 "ClientSoftwareVersion": "1.0"})
        assert resp["ErrorCode"] == k.INVALID_REQUEST
        assert resp["ApiKeys"] == []
        assert k.api_versions(c, 3)["ErrorCode"] == k.NONE


def test_unknown_tags_and_null_client_id_are_accepted(broker):
    with k.Conn(broker.bootstrap) as c:
        resp = c.request(18, 3, {"ClientSoftwareName": "kproto", "ClientSoftwareVersion": "1",
                                 "_tags": {5: b"hello", 77: b""}})
        assert resp["ErrorCode"] == k.NONE
        # unknown tag in request header v2
        hdr = struct.pack(">hhih", 18, 3, 9, 1) + b"x" + b"\x01\x07\x02ab"
        body = k.encode_struct(k.APIS[18].request, {"ClientSoftwareName": "kproto",
                                                    "ClientSoftwareVersion": "1"}, 3, True)
        c.send_frame(hdr + body)
        corr, resp = k.decode_response(18, 3, c.recv_frame())
        assert corr == 9 and resp["ErrorCode"] == k.NONE
        # null ClientId (int16 -1) in header v1
        c.send_frame(struct.pack(">hhih", 18, 0, 10, -1))
        corr, resp = k.decode_response(18, 0, c.recv_frame())
        assert corr == 10 and resp["ErrorCode"] == k.NONE


@skiff_only
def test_exact_ranges(broker):
    with k.Conn(broker.bootstrap) as c:
        r = ranges(k.api_versions(c, 4))
    wrong = {key: (r.get(key), want) for key, want in EXACT.items() if r.get(key) != want}
    assert not wrong, "advertised vs required: %r" % wrong


@skiff_only
def test_nothing_forbidden_and_other_ranges_sane(broker):
    with k.Conn(broker.bootstrap) as c:
        r = ranges(k.api_versions(c, 4))
    forbidden = sorted(set(r) & FORBIDDEN)
    assert not forbidden, "must not advertise %r" % [k.API_NAMES.get(x, x) for x in forbidden]
    for key, (lo, hi) in r.items():
        assert key in EXACT or key in ALLOWED, "unexpected API key %d advertised" % key
        if key in ALLOWED:
            amin, amax = ALLOWED[key]
            assert lo == amin, "%s min %d, must be %d" % (k.API_NAMES.get(key), lo, amin)
            assert lo <= hi <= amax, "%s max %d, at most %d" % (k.API_NAMES.get(key), hi, amax)
        for v in FEATURE_VERSIONS.get(key, ()):
            assert lo <= v <= hi, "%s must contain v%d" % (k.API_NAMES.get(key), v)
    # a consumer needs these together
    groups = {8, 9, 10, 11, 12, 13, 14}
    assert not (groups & set(r)) or groups <= set(r), "partial group API set advertised"


@skiff_only
@pytest.mark.parametrize("version", [3, 4])
def test_no_features(broker, version):
    with k.Conn(broker.bootstrap) as c:
        resp = k.api_versions(c, version)
    # SupportedFeatures (tag 0) and FinalizedFeatures (tag 2) omitted; the epoch (tag 1)
    # absent or -1; no other tag.
    assert 0 not in resp["_seen_tags"] and 2 not in resp["_seen_tags"], resp["_seen_tags"]
    assert resp["FinalizedFeaturesEpoch"] == -1
    assert set(resp["_seen_tags"]) <= {1}, resp["_seen_tags"]
