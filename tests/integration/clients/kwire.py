"""A few Kafka wire-protocol requests and a logging TCP proxy, for tests.

The integration tests drive real clients; this module only looks at what they
did: which API versions a broker advertises (ApiVersions v0), which record
batches a partition stores and with which codec (Fetch v4), and which
requests a client sent (a proxy that logs every request header).

    python3 kwire.py versions HOST:PORT
    python3 kwire.py batches HOST:PORT TOPIC PARTITION
    python3 kwire.py proxy LISTEN_PORT HOST:PORT LOGFILE     (until killed)
    python3 kwire.py summary LOGFILE                          (client -> api -> versions)

To see every request of a client, the broker must advertise the proxy's port
(for Kafka: KAFKA_REF_PROPS="advertised.listeners=PLAINTEXT://127.0.0.1:PROXYPORT"),
otherwise only the bootstrap connection goes through the proxy.
"""

import json
import socket
import struct
import sys
import threading
import time

# Apache Kafka 4.3.1 API keys 0-92, in key order.
API_NAMES = dict(enumerate("""
Produce Fetch ListOffsets Metadata LeaderAndIsr StopReplica UpdateMetadata
ControlledShutdown OffsetCommit OffsetFetch FindCoordinator JoinGroup Heartbeat
LeaveGroup SyncGroup DescribeGroups ListGroups SaslHandshake ApiVersions CreateTopics
DeleteTopics DeleteRecords InitProducerId OffsetForLeaderEpoch AddPartitionsToTxn
AddOffsetsToTxn EndTxn WriteTxnMarkers TxnOffsetCommit DescribeAcls CreateAcls
DeleteAcls DescribeConfigs AlterConfigs AlterReplicaLogDirs DescribeLogDirs
SaslAuthenticate CreatePartitions CreateDelegationToken RenewDelegationToken
ExpireDelegationToken DescribeDelegationToken DeleteGroups ElectLeaders
IncrementalAlterConfigs AlterPartitionReassignments ListPartitionReassignments
OffsetDelete DescribeClientQuotas AlterClientQuotas DescribeUserScramCredentials
AlterUserScramCredentials Vote BeginQuorumEpoch EndQuorumEpoch DescribeQuorum
AlterPartition UpdateFeatures Envelope FetchSnapshot DescribeCluster DescribeProducers
BrokerRegistration BrokerHeartbeat UnregisterBroker DescribeTransactions
ListTransactions AllocateProducerIds ConsumerGroupHeartbeat ConsumerGroupDescribe
ControllerRegistration GetTelemetrySubscriptions PushTelemetry AssignReplicasToDirs
ListConfigResources DescribeTopicPartitions ShareGroupHeartbeat ShareGroupDescribe
ShareFetch ShareAcknowledge AddRaftVoter RemoveRaftVoter UpdateRaftVoter
InitializeShareGroupState ReadShareGroupState WriteShareGroupState
DeleteShareGroupState ReadShareGroupStateSummary StreamsGroupHeartbeat
StreamsGroupDescribe DescribeShareGroupOffsets AlterShareGroupOffsets
DeleteShareGroupOffsets
""".split()))

CODECS = {0: "none", 1: "gzip", 2: "snappy", 3: "lz4", 4: "zstd"}


def api_name(key):
    return API_NAMES.get(key, "api%d" % key)


def _split(hostport):
    host, port = hostport.rsplit(":", 1)
    return host, int(port)


def _str16(s):
    if s is None:
        return struct.pack(">h", -1)
    b = s.encode()
    return struct.pack(">h", len(b)) + b


def _recv_exact(sock, n):
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise ConnectionError("connection closed after %d of %d bytes" % (len(buf), n))
        buf += chunk
    return bytes(buf)


def request(hostport, key, version, body, timeout=10.0, client_id="skiff-test-kwire"):
    """One request with header v1 (non-flexible versions only); returns the body after the correlation id."""
    corr = 7
    payload = struct.pack(">hhi", key, version, corr) + _str16(client_id) + body
    with socket.create_connection(_split(hostport), timeout=timeout) as s:
        s.settimeout(timeout)
        s.sendall(struct.pack(">i", len(payload)) + payload)
        (size,) = struct.unpack(">i", _recv_exact(s, 4))
        if size < 4 or size > 256 << 20:
            raise ValueError("absurd response size %d" % size)
        resp = _recv_exact(s, size)
    (got,) = struct.unpack_from(">i", resp, 0)
    if got != corr:
        raise ValueError("correlation id %d, expected %d" % (got, corr))
    return resp[4:]


def api_versions(hostport, timeout=10.0):
    """{api_key: (min, max)} from an ApiVersions v0 request."""
    r = request(hostport, 18, 0, b"", timeout)
    err, n = struct.unpack_from(">hi", r, 0)
    if err != 0:
        raise ValueError("ApiVersions error %d" % err)
    out = {}
    for i in range(n):
        k, lo, hi = struct.unpack_from(">hhh", r, 6 + 6 * i)
        out[k] = (lo, hi)
    return out


class _Reader:
    def __init__(self, b):
        self.b, self.p = b, 0

    def take(self, fmt):
        v = struct.unpack_from(fmt, self.b, self.p)
        self.p += struct.calcsize(fmt)
        return v if len(v) > 1 else v[0]

    def string(self):
        n = self.take(">h")
        if n < 0:
            return None
        s = self.b[self.p:self.p + n].decode(errors="replace")
        self.p += n
        return s

    def bytes32(self):
        n = self.take(">i")
        if n < 0:
            return None
        s = self.b[self.p:self.p + n]
        self.p += n
        return s


def parse_batches(records):
    """Headers of the whole v2 record batches in a Fetch `records` blob (a truncated tail is ignored)."""
    out = []
    p = 0
    while len(records) - p >= 61:
        (base, length, ple, magic, crc, attrs, lod, base_ts, max_ts, pid, epoch, seq,
         count) = struct.unpack_from(">qiibIhiqqqhii", records, p)
        if p + 12 + length > len(records):
            break
        out.append({"base_offset": base, "length": length + 12, "magic": magic,
                    "attributes": attrs, "codec": CODECS.get(attrs & 7, "codec%d" % (attrs & 7)),
                    "last_offset_delta": lod, "records": count, "producer_id": pid,
                    "producer_epoch": epoch, "base_sequence": seq, "max_timestamp": max_ts,
                    "leader_epoch": ple})
        p += 12 + length
    return out


def fetch_v4(hostport, topic, partition, offset, max_bytes=8 << 20, timeout=10.0):
    """One Fetch v4; returns (error_code, high_watermark, batches)."""
    body = struct.pack(">iiiib", -1, 100, 1, max_bytes, 0)
    body += struct.pack(">i", 1) + _str16(topic)
    body += struct.pack(">iiqi", 1, partition, offset, max_bytes)
    r = _Reader(request(hostport, 1, 4, body, timeout))
    r.take(">i")  # throttle
    for _ in range(r.take(">i")):
        name = r.string()
        for _ in range(r.take(">i")):
            part, err, hw, lso = r.take(">ihqq")
            n_ab = r.take(">i")
            for _ in range(max(n_ab, 0)):
                r.take(">qq")
            recs = r.bytes32() or b""
            if name == topic and part == partition:
                return err, hw, parse_batches(recs)
    raise ValueError("partition %s-%d missing from the Fetch response" % (topic, partition))


def all_batches(hostport, topic, partition, deadline_s=60.0):
    """Every batch of a partition, from offset 0 to the high watermark (bounded in time)."""
    deadline = time.time() + deadline_s
    offset, out = 0, []
    while time.time() < deadline:
        err, hw, batches = fetch_v4(hostport, topic, partition, offset)
        if err != 0:
            raise ValueError("Fetch error %d at offset %d" % (err, offset))
        batches = [b for b in batches if b["base_offset"] + b["last_offset_delta"] >= offset]
        out += batches
        if batches:
            offset = batches[-1]["base_offset"] + batches[-1]["last_offset_delta"] + 1
        if offset >= hw:
            return out
        if not batches:
            time.sleep(0.05)
    raise TimeoutError("read %d batches up to offset %d in %.0fs" % (len(out), offset, deadline_s))


class LoggingProxy:
    """Forwards TCP connections to a broker and records every request header sent to it.

    `requests` holds dicts {conn, client_id, key, api, version, corr, t}. Frames are
    parsed only in the client-to-broker direction; bytes are forwarded untouched.
    """

    def __init__(self, target, listen_port=0, log_path=None):
        self.target = _split(target)
        self.requests = []
        self.log = open(log_path, "a", buffering=1) if log_path else None
        self.lock = threading.Lock()
        self.srv = socket.socket()
        self.srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.srv.bind(("127.0.0.1", listen_port))
        self.srv.listen(64)
        self.port = self.srv.getsockname()[1]
        self.closed = False
        self.conns = 0
        self.socks = []
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def address(self):
        return "127.0.0.1:%d" % self.port

    def _accept(self):
        while not self.closed:
            try:
                c, _ = self.srv.accept()
            except OSError:
                return
            try:
                u = socket.create_connection(self.target, timeout=10)
                u.settimeout(None)
            except OSError:
                c.close()
                continue
            with self.lock:
                self.conns += 1
                cid = self.conns
                self.socks += [c, u]
            threading.Thread(target=self._up, args=(cid, c, u), daemon=True).start()
            threading.Thread(target=self._down, args=(u, c), daemon=True).start()

    def _record(self, cid, frame):
        if len(frame) < 10:
            return
        key, ver, corr = struct.unpack_from(">hhi", frame, 0)
        (n,) = struct.unpack_from(">h", frame, 8)
        client_id = frame[10:10 + n].decode(errors="replace") if n >= 0 else None
        rec = {"conn": cid, "client_id": client_id, "key": key, "api": api_name(key),
               "version": ver, "corr": corr, "t": round(time.time(), 3)}
        with self.lock:
            self.requests.append(rec)
            if self.log:
                self.log.write(json.dumps(rec) + "\n")

    def _up(self, cid, c, u):
        buf = bytearray()
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    break
                u.sendall(data)
                buf += data
                while len(buf) >= 4:
                    (size,) = struct.unpack_from(">i", buf, 0)
                    if size < 0 or len(buf) < 4 + size:
                        break
                    self._record(cid, bytes(buf[4:4 + min(size, 4096)]))
                    del buf[:4 + size]
        except OSError:
            pass
        finally:
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def _down(self, u, c):
        try:
            while True:
                data = u.recv(65536)
                if not data:
                    break
                c.sendall(data)
        except OSError:
            pass
        finally:
            for s in (c, u):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self):
        self.closed = True
        self.srv.close()
        with self.lock:
            for s in self.socks:
                try:
                    s.close()
                except OSError:
                    pass
        if self.log:
            self.log.close()


def summarize(requests):
    """{client_id: {api name: sorted versions}}"""
    out = {}
    for r in requests:
        out.setdefault(r["client_id"], {}).setdefault(r["api"], set()).add(r["version"])
    return {c: {a: sorted(v) for a, v in sorted(apis.items())} for c, apis in sorted(
        out.items(), key=lambda kv: str(kv[0]))}


def main(argv):
    if len(argv) >= 2 and argv[0] == "versions":
        for k, (lo, hi) in sorted(api_versions(argv[1]).items()):
            print("%3d %-28s %d-%d" % (k, api_name(k), lo, hi))
    elif len(argv) == 4 and argv[0] == "batches":
        for b in all_batches(argv[1], argv[2], int(argv[3])):
            print(json.dumps(b))
    elif len(argv) == 4 and argv[0] == "proxy":
        p = LoggingProxy(argv[2], int(argv[1]), argv[3])
        print("proxy %s -> %s" % (p.address, argv[2]), flush=True)
        while True:
            time.sleep(3600)
    elif len(argv) == 2 and argv[0] == "summary":
        with open(argv[1]) as f:
            reqs = [json.loads(line) for line in f if line.strip()]
        for client, apis in summarize(reqs).items():
            print(client)
            for api, vs in apis.items():
                print("    %-26s %s" % (api, ",".join(map(str, vs))))
    else:
        sys.stderr.write(__doc__)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
