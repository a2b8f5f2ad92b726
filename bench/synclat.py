#!/usr/bin/env python3
"""synclat.py HOST:PORT TOPIC [--partitions N] [--rate R] [--seconds S] [--warmup S] [--size B]

Produce latency as one synchronous client sees it: a single thread, one TCP connection,
one Produce request (acks=all, one record of SIZE random bytes, partitions in turn) in
flight at a time, paced at RATE requests per second; no client library, no queues, no
threads between the application and the socket. Beside skload (librdkafka: an application
thread, a broker thread and a delivery-report thread per request), it tells how much of a
tail at a low rate is the broker's and how much is the client's.

The request bytes are built once per partition with the tests' codec
(tests/integration/kproto.py; a RecordBatch v2 is valid again as it is: the broker assigns
the offsets, and its CRC covers neither them nor the header); only the correlation id
changes. TOPIC must exist with at least N partitions.

Prints one JSON object: count, errors, and for "service" (request written -> response
read) and "latency" (due time -> response read, so that a slow response also delays the
requests behind it) p50 / p90 / p99 / p99.9 / max in ms. Exit status 1 when a request
failed or the connection broke.
"""
import argparse
import gc
import json
import os
import socket
import struct
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests",
                                "integration"))
import kproto as k  # noqa: E402  (the tests' Kafka codec: request bytes, batches)

VERSION = 7


def produce_frame(topic, partition, value):
    """One Produce request (acks=all, one record), framed, correlation id 0."""
    body = k.produce_body(topic, partition, k.batch([value]), acks=-1, timeout_ms=30000)
    return bytearray(k.frame(k.encode_request(0, VERSION, body, 0, "synclat")))


def recv_exact(s, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = s.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("the broker closed the connection")
        buf += chunk
    return bytes(buf)


def quantiles(v):
    v = sorted(v)
    if not v:
        return {}
    q = lambda p: round(v[min(len(v) - 1, int(p * len(v)))] / 1e6, 3)
    return {"p50_ms": q(0.5), "p90_ms": q(0.9), "p99_ms": q(0.99), "p999_ms": q(0.999),
            "max_ms": round(v[-1] / 1e6, 3)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("broker")
    ap.add_argument("topic")
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--rate", type=float, default=2000)
    ap.add_argument("--seconds", type=float, default=15)
    ap.add_argument("--warmup", type=float, default=4)
    ap.add_argument("--size", type=int, default=1024)
    a = ap.parse_args()
    host, port = a.broker.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=30)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    frames = [produce_frame(a.topic, p, os.urandom(a.size)) for p in range(a.partitions)]
    total = int((a.seconds + a.warmup) * a.rate)
    skip = int(a.warmup * a.rate)
    service, latency, errors = [], [], 0
    gc.disable()
    t0 = time.perf_counter_ns() + 100_000_000
    step = 1e9 / a.rate
    for i in range(total):
        due = t0 + int(i * step)
        wait = due - time.perf_counter_ns()
        if wait > 0:
            time.sleep(wait / 1e9)
        frame = frames[i % a.partitions]
        struct.pack_into(">i", frame, 8, i + 1)  # after the size, the API key and version
        sent = time.perf_counter_ns()
        s.sendall(frame)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        resp = recv_exact(s, size)
        done = time.perf_counter_ns()
        corr, body = k.decode_response(0, VERSION, resp)
        err = body["Responses"][0]["PartitionResponses"][0]["ErrorCode"]
        if corr != i + 1 or err != 0:
            errors += 1
        if i >= skip:
            service.append(done - sent)
            latency.append(done - due)
    s.close()
    print(json.dumps({"broker": a.broker, "topic": a.topic, "rate": a.rate,
                      "count": len(service), "errors": errors,
                      "service": quantiles(service), "latency": quantiles(latency)}))
    return 1 if errors else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except (OSError, ConnectionError, k.ProtocolError) as e:
        print("synclat.py: %s" % e, file=sys.stderr)
        sys.exit(1)
