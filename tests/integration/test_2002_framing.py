"""Framing: pipelining, acks=0, and what a broker does with frames it cannot serve.

Kafka's rule, which Skiff follows: a request it cannot parse or serve (bad size,
unknown API key, unsupported version, Produce v0-2, a malformed body) closes that
connection; only ApiVersions answers an unknown version with an error body. Other
connections are never disturbed.
"""

import random
import socket
import struct
import time

import pytest

import harness
import kproto as k

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="Skiff-specific expectation (differs from Kafka)")

KAFKA_DEFAULT_MAX_REQUEST = 104857600


def assert_closed(c, why, timeout=5.0):
    assert c.wait_closed(timeout), "connection not closed after %s" % why
    assert c.buf == b"", "got bytes %r before close after %s" % (c.buf[:40], why)


def assert_serving(broker, witness=None):
    """The broker still answers, on an old connection and on a new one."""
    if witness is not None:
        assert k.api_versions(witness, 0)["ErrorCode"] == k.NONE
    with k.Conn(broker.bootstrap) as c:
        assert k.api_versions(c, 3)["ErrorCode"] == k.NONE
        assert k.metadata(c, None, version=1)["Brokers"]


@pytest.fixture
def witness(broker):
    with k.Conn(broker.bootstrap, client_id="witness") as c:
        k.api_versions(c, 3)
        yield c


def test_pipelined_requests_answered_in_order(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
        k.produce(c, topic_name, 0, k.batch([b"first"]))
        rnd = random.Random(2002)
        kinds = [
            (18, 0, {}), (18, 1, {}), (18, 2, {}),
            (18, 3, {"ClientSoftwareName": "p", "ClientSoftwareVersion": "1"}),
            (18, 4, {"ClientSoftwareName": "p", "ClientSoftwareVersion": "1"}),
            (3, 0, {"Topics": [{"Name": topic_name}]}), (3, 1, {"Topics": None}),
            (3, 9, {"Topics": [{"Name": topic_name}], "AllowAutoTopicCreation": False}),
            (3, 12, {"Topics": None, "AllowAutoTopicCreation": False}),
            (2, 1, {"ReplicaId": -1, "Topics": [{"Name": topic_name, "Partitions": [
                {"PartitionIndex": 0, "Timestamp": -1}]}]}),
            (2, 7, {"ReplicaId": -1, "Topics": [{"Name": topic_name, "Partitions": [
                {"PartitionIndex": 1, "Timestamp": -2}]}]}),
            (1, 4, k.fetch_body(topic_name, 0, 0)), (1, 11, k.fetch_body(topic_name, 0, 0)),
            (1, 12, k.fetch_body(topic_name, 1, 0)),
            (0, 7, k.produce_body(topic_name, 1, None)),  # records filled in below
        ]
        data = b""
        sent = []
        for i in range(50):
            key, ver, body = kinds[rnd.randrange(len(kinds))] if i else kinds[0]
            if key == 0:
                body = k.produce_body(topic_name, 1, k.batch([b"pipelined-%d" % i]))
            corr = rnd.randrange(-2 ** 31, 2 ** 31)  # any int32 is echoed, even negative
            frame, _ = c.build(key, ver, body, corr=corr)
            data += frame
            sent.append((corr, key, ver))
        c.send_raw(data)  # all 50 in one write
        produce_offsets = []
        for corr, key, ver in sent:
            payload = c.recv_frame()
            got, resp = k.decode_response(key, ver, payload)
            assert got == corr, "response out of order: corr %d, expected %d (%s v%d)" % (
                got, corr, k.API_NAMES[key], ver)
            c.pending.pop(0)
            if key == 0:
                pr = resp["Responses"][0]["PartitionResponses"][0]
                assert pr["ErrorCode"] == k.NONE
                produce_offsets.append(pr["BaseOffset"])
            elif key == 18:
                assert resp["ErrorCode"] == k.NONE
        # produces pipelined on one connection are appended in request order
        assert produce_offsets == sorted(produce_offsets)
        assert len(set(produce_offsets)) == len(produce_offsets)


def test_kafka_python_probe_pipeline(broker):
    """kafka-python 2.0.2 writes ApiVersions v0 and Metadata v0 back to back."""
    with k.Conn(broker.bootstrap) as c:
        a, _ = c.build(18, 0, {})
        m, _ = c.build(3, 0, {"Topics": []})
        c.send_raw(a + m)
        assert c.recv()["ErrorCode"] == k.NONE
        assert c.recv()["Brokers"]


def test_acks0_gets_no_response(broker, topic_name):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        data = b""
        for i in range(5):
            f, _ = c.build(0, 7, k.produce_body(topic_name, 0, k.batch([b"a0-%d" % i]), acks=0),
                           expect_response=False)
            data += f
        f, corr = c.build(18, 0, {})
        data += f
        f, _ = c.build(0, 7, k.produce_body(topic_name, 0, k.batch([b"a1"]), acks=1))
        data += f
        f, _ = c.build(0, 9, k.produce_body(topic_name, 0, k.batch([b"a0-last"]), acks=0),
                       expect_response=False)
        data += f
        f, _ = c.build(18, 3, {"ClientSoftwareName": "p", "ClientSoftwareVersion": "1"})
        data += f
        c.send_raw(data)
        assert c.recv()["ErrorCode"] == k.NONE           # ApiVersions right after 5 acks=0
        pr = c.recv()["Responses"][0]["PartitionResponses"][0]
        assert pr["ErrorCode"] == k.NONE and pr["BaseOffset"] == 5
        assert c.recv()["ErrorCode"] == k.NONE           # ApiVersions v3
        assert c.wait_closed(0.5) is False and c.buf == b""  # nothing else comes
        _, p = k.fetch(c, topic_name, 0, 0)
        values = [v for b in k.parse_batches(p["Records"]) for _, v in b.offsets_values()]
        assert values == [b"a0-0", b"a0-1", b"a0-2", b"a0-3", b"a0-4", b"a1", b"a0-last"]


def test_acks0_error_closes_connection(broker, witness, topic_name):
    """A failing acks=0 produce cannot be answered, so Kafka closes the connection to
    tell the producer (KafkaApis: close on error when acks=0); nothing is written."""
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        f1, _ = c.build(0, 7, k.produce_body(topic_name, 0, k.batch([b"x"], crc=1), acks=0),
                        expect_response=False)
        f2, _ = c.build(18, 0, {})
        c.send_raw(f1 + f2)
        assert_closed(c, "acks=0 produce with a bad CRC")
    with k.Conn(broker.bootstrap) as c:
        assert k.list_offsets(c, topic_name, 0, -1)["Offset"] == 0
    assert_serving(broker, witness)


def test_request_trickled_byte_by_byte(broker):
    with k.Conn(broker.bootstrap) as c:
        f, _ = c.build(3, 9, {"Topics": None, "AllowAutoTopicCreation": False})
        for i in range(len(f)):
            c.send_raw(f[i:i + 1])
            if i % 7 == 0:
                time.sleep(0.002)
        assert c.recv()["Brokers"]


@pytest.mark.parametrize("size", [KAFKA_DEFAULT_MAX_REQUEST + 1, 0x7FFFFFFF])
def test_size_above_socket_request_max_bytes(broker, witness, size):
    with k.Conn(broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", size) + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x00")
        assert_closed(c, "size %d" % size)
    assert_serving(broker, witness)


@pytest.mark.parametrize("size", [-1, -5, -0x80000000, 0])
def test_negative_or_zero_size(broker, witness, size):
    with k.Conn(broker.bootstrap) as c:
        c.send_raw(struct.pack(">i", size) + b"\x00" * 16)
        assert_closed(c, "size %d" % size)
    assert_serving(broker, witness)


@skiff_only
def test_socket_request_max_bytes_override(broker_factory):
    b = broker_factory({"socket.request.max.bytes": "65536"})
    with k.Conn(b.bootstrap) as witness:
        name = "t-maxreq-%d" % random.randrange(1 << 30)
        k.create_topic(witness, name, 1)
        small = k.produce_body(name, 0, k.batch([b"s" * 60000]))
        big = k.produce_body(name, 0, k.batch([b"b" * 70000]))
        with k.Conn(b.bootstrap) as c:
            pr = c.request(0, 7, small)["Responses"][0]["PartitionResponses"][0]
            assert pr["ErrorCode"] == k.NONE
            c.send(0, 7, big)
            assert_closed(c, "a 70000-byte request with socket.request.max.bytes=65536")
        assert_serving(b, witness)


def test_truncated_frame_then_close(broker, witness):
    for cut in (1, 3, 4, 10, 30):
        c = k.Conn(broker.bootstrap)
        f, _ = c.build(3, 9, {"Topics": None})
        c.send_raw(f[:cut])
        time.sleep(0.05)
        c.close()
    assert_serving(broker, witness)


def test_truncated_frame_then_half_close(broker, witness):
    """The client stops sending mid-frame (FIN): the broker closes its side."""
    with k.Conn(broker.bootstrap) as c:
        f, _ = c.build(18, 0, {})
        c.send_raw(f[:-2])
        c.sock.shutdown(socket.SHUT_WR)
        assert_closed(c, "half-close inside a frame", timeout=10)
    assert_serving(broker, witness)


def test_frame_larger_than_sent_waits(broker):
    """A frame whose size announces more than has arrived yet is not an error."""
    with k.Conn(broker.bootstrap) as c:
        f, _ = c.build(18, 0, {})
        c.send_raw(f[:6])
        assert c.wait_closed(1.0) is False
        c.send_raw(f[6:])
        assert c.recv()["ErrorCode"] == k.NONE


def test_large_produce_frame_in_pieces(broker, witness, topic_name):
    """Frames of 64 KiB and more are read straight from the socket into their buffer
    (net.c): one arriving in pieces, with pauses, and a small request pipelined right
    behind it in the same write, are answered in order, and the batch reads back
    byte for byte; one cut short by a close costs nothing to other connections."""
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        values = [bytes([i % 251]) * 1000 for i in range(200)]
        f, _ = c.build(0, 7, k.produce_body(topic_name, 0, k.batch(values)))
        tail, _ = c.build(18, 0, {})
        assert len(f) > 128 * 1024
        cuts = [0, 3, 4, 5000, 70000, 70001, 150000, len(f)]
        for a, b in zip(cuts, cuts[1:]):
            c.send_raw(f[a:b] if b < len(f) else f[a:] + tail)
            time.sleep(0.02)
        r = c.recv()["Responses"][0]["PartitionResponses"][0]
        assert r["ErrorCode"] == k.NONE and r["BaseOffset"] == 0
        assert c.recv()["ErrorCode"] == k.NONE
        got = []
        while len(got) < len(values):
            _, part = k.fetch(c, topic_name, 0, len(got))
            batches = k.parse_batches(part["Records"])
            assert all(b.crc_ok for b in batches)
            got += [rec.value for b in batches for rec in b.records]
        assert got == values
    c = k.Conn(broker.bootstrap)
    f, _ = c.build(0, 7, k.produce_body(topic_name, 0, k.batch(values)))
    c.send_raw(f[:100000])
    time.sleep(0.05)
    c.close()
    assert_serving(broker, witness)


@pytest.mark.parametrize("garbage", [
    b"GET / HTTP/1.1\r\nHost: localhost\r\n\r\n",
    b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\x00" * 64,   # TLS ClientHello
    b"\xff" * 64,
    struct.pack(">i", 12) + b"\x7a" * 12,   # a plausible size, then junk
], ids=["http", "tls", "ff", "junk-frame"])
def test_garbage_bytes(broker, witness, garbage):
    with k.Conn(broker.bootstrap) as c:
        c.send_raw(garbage)
        assert_closed(c, "garbage %r" % garbage[:10])
    assert_serving(broker, witness)


@pytest.mark.parametrize("key", [99, 1000, 32767, -1, 4, 5, 6, 7])
def test_unknown_api_key_closes(broker, witness, key):
    with k.Conn(broker.bootstrap) as c:
        c.send_frame(struct.pack(">hhih", key, 0, 1, 1) + b"x" + b"\x00" * 16)
        assert_closed(c, "API key %d" % key)
    assert_serving(broker, witness)


@pytest.mark.parametrize("version", [0, 1, 2])
def test_produce_v0_to_v2_closes(broker, witness, topic_name, version):
    """Produce 0-2 are advertised (for librdkafka's compression check) but never served."""
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        c.send(0, version, k.produce_body(topic_name, 0, k.batch([b"old"])))
        assert_closed(c, "Produce v%d" % version)
    with k.Conn(broker.bootstrap) as c:
        assert k.list_offsets(c, topic_name, 0, -1)["Offset"] == 0  # nothing written
    assert_serving(broker, witness)


# (key, version) unknown to both Kafka 4.3.1 and Skiff
UNKNOWN_VERSIONS = [(3, 14), (3, 100), (0, 14), (0, -1), (1, 3), (1, 19), (2, 0), (2, 12),
                    (19, 1), (19, 8), (22, 7), (23, 1), (23, 5)]


@pytest.mark.parametrize("key,version", UNKNOWN_VERSIONS)
def test_unknown_version_of_known_api_closes(broker, witness, key, version):
    with k.Conn(broker.bootstrap) as c:
        c.send_frame(k.request_header(key, version, 1, "x", flexible=False) + b"\x00" * 24)
        assert_closed(c, "%s v%d" % (k.API_NAMES[key], version))
    assert_serving(broker, witness)


# versions Kafka 4.3.1 serves but Skiff does not advertise, with well-formed bodies
ABOVE_SKIFF = [
    (1, 18, k.fetch_body("t", 0, 0)),
    (2, 11, {"ReplicaId": -1, "Topics": [{"Name": "t", "Partitions": [
        {"PartitionIndex": 0, "Timestamp": -1}]}]}),
]


@skiff_only
@pytest.mark.parametrize("key,version,body", ABOVE_SKIFF,
                         ids=["%s-v%d" % (k.API_NAMES[a], v) for a, v, _ in ABOVE_SKIFF])
def test_version_above_advertised_closes(broker, witness, key, version, body):
    with k.Conn(broker.bootstrap) as c:
        c.send(key, version, body)
        assert_closed(c, "%s v%d" % (k.API_NAMES[key], version))
    assert_serving(broker, witness)


def test_apiversions_v5_with_header_v1_closes(broker, witness):
    """An unknown ApiVersions version still has to come with request header v2 (the
    version of the header follows the request version, >= 3 -> v2); without the tag
    byte the header cannot be parsed and Kafka closes the connection."""
    with k.Conn(broker.bootstrap) as c:
        c.send_frame(k.request_header(18, 5, 1, "x", flexible=False))
        assert_closed(c, "ApiVersions v5 with request header v1")
    assert_serving(broker, witness)


@pytest.mark.parametrize("key,version,body", [
    (3, 9, b"\x05"),                             # array of 4 topics, then nothing
    (3, 1, b"\x00\x00\x00\x05\x00"),             # array count 5, one byte
    (3, 1, b"\x7f\xff\xff\xff"),                 # absurd array count
    (3, 9, b"\xff\xff\xff\xff\x0f"),             # absurd compact array count
    (0, 7, b"\xff\xff\x00\x01\x00\x00\x27\x10\x00\x00\x00\x01\x00\x05ab"),  # short string
    (1, 12, b""),                                # empty body
    (19, 5, b"\x02\x80\x80\x80\x80\x80\x80\x80\x80\x80\x80\x01"),  # varint too long
])
def test_malformed_body_closes(broker, witness, key, version, body):
    with k.Conn(broker.bootstrap) as c:
        flex = k.APIS[key].flexible(version)
        c.send_frame(k.request_header(key, version, 1, "x", flexible=flex) + body)
        assert_closed(c, "malformed %s v%d" % (k.API_NAMES[key], version))
    assert_serving(broker, witness)


def test_bad_connections_do_not_disturb_a_busy_one(broker, topic_name):
    """While other connections send garbage, a pipelining producer keeps its order."""
    with k.Conn(broker.bootstrap) as good:
        k.create_topic(good, topic_name, 1)
        bad_inputs = [struct.pack(">i", -1), b"\xff" * 32,
                      k.frame(struct.pack(">hhih", 99, 0, 1, 0)),
                      k.frame(k.request_header(0, 1, 1, "x", False) + b"\x00" * 10)]
        offsets = []
        for round_ in range(10):
            for i in range(5):
                good.send(0, 7, k.produce_body(topic_name, 0, k.batch([b"%d-%d" % (round_, i)])))
            bads = []
            for raw in bad_inputs:
                c = k.Conn(broker.bootstrap)
                c.send_raw(raw)
                bads.append(c)
            for _ in range(5):
                pr = good.recv()["Responses"][0]["PartitionResponses"][0]
                assert pr["ErrorCode"] == k.NONE
                offsets.append(pr["BaseOffset"])
            for c in bads:
                c.close()
        assert offsets == list(range(50))
