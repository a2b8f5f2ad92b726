#!/usr/bin/env python3
"""synclat.py HOST:PORT TOPIC [--partitions N] [--rate R] [--seconds S] [--warmup S] [--size B]

Produce latency as one synchronous client sees it: a single thread, one TCP connection,
one Produce request (acks=all, one record of SIZE random bytes, partitions in turn) in
flight at a time, paced at RATE requests per second; no client library, no queues, no
threads between the application and the socket. Beside skload (librdkafka: an application
thread, a broker thread and a delivery-report thread per request), it tells how much of a
tail at a low rate is the broker's and how much is the client's.

The request bytes are built once per partition (a RecordBatch v2 is valid again as it is:
the broker assigns the offsets; its CRC covers neither them nor the header); only the
correlation id changes. TOPIC must exist with at least N partitions.

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


def crc32c_table():
    t = []
    for i in range(256):
        c = i
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        t.append(c)
    return t


TABLE = crc32c_table()


def crc32c(data):
    c = 0xFFFFFFFF
    for b in data:
        c = TABLE[(c ^ b) & 0xFF] ^ (c >> 8)
    return c ^ 0xFFFFFFFF


def varint(n):
    n = (n << 1) ^ (n >> 63)  # zigzag
    out = bytearray()
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def record_batch(value, now_ms):
    rec = b"\x00" + varint(0) + varint(0) + varint(-1) + varint(len(value)) + value + varint(0)
    rec = varint(len(rec)) + rec
    tail = struct.pack(">hiqqqhii", 0, 0, now_ms, now_ms, -1, -1, -1, 1) + rec
    crc = crc32c(tail)
    body = struct.pack(">ibI", -1, 2, crc) + tail  # leader epoch, magic, crc
    return struct.pack(">qi", 0, len(body)) + body


def produce_body(topic, partition, batch, timeout_ms=30000):
    t = topic.encode()
    return (struct.pack(">hhi", -1, -1, timeout_ms) +                 # txn id null, acks=all
            struct.pack(">ih", 1, len(t)) + t +                       # one topic
            struct.pack(">iii", 1, partition, len(batch)) + batch)    # one partition


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
    client = b"synclat"
    now_ms = int(time.time() * 1000)
    bodies = [produce_body(a.topic, p, record_batch(os.urandom(a.size), now_ms))
              for p in range(a.partitions)]
    # Response v3: correlation id, [topic: name, [partition: index, error_code, ...]]
    err_at = 4 + 4 + 2 + len(a.topic.encode()) + 4 + 4
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
        body = bodies[i % a.partitions]
        hdr = struct.pack(">hhih", 0, 3, i + 1, len(client)) + client
        frame = struct.pack(">i", len(hdr) + len(body)) + hdr + body
        sent = time.perf_counter_ns()
        s.sendall(frame)
        size = struct.unpack(">i", recv_exact(s, 4))[0]
        resp = recv_exact(s, size)
        done = time.perf_counter_ns()
        corr = struct.unpack_from(">i", resp, 0)[0]
        err = struct.unpack_from(">h", resp, err_at)[0] if len(resp) >= err_at + 2 else -1
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
    except (OSError, ConnectionError) as e:
        print("synclat.py: %s" % e, file=sys.stderr)
        sys.exit(1)
