"""skiffd's process lifecycle: clean shutdown, configuration errors, --help."""

import os
import socket
import subprocess
import threading
import time

import pytest

import harness
import kproto as k

pytestmark = [pytest.mark.restarts,
              pytest.mark.skipif(bool(harness.external()), reason="runs skiffd itself")]

PROPERTIES = ["auto.create.topics.enable", "num.partitions", "message.max.bytes",
              "socket.request.max.bytes", "log.retention.ms", "listeners",
              "advertised.listeners", "node.id", "data.dir", "wal.url"]


def read_all(bootstrap, topic, partition=0):
    with k.Conn(bootstrap) as c:
        out = []
        offset = 0
        while True:
            _, p = k.fetch(c, topic, partition, offset)
            assert p["ErrorCode"] == k.NONE
            batches = [b for b in k.parse_batches(p["Records"]) if b.last_offset >= offset]
            if not batches:
                return out
            for b in batches:
                assert b.crc_ok
                out += [(o, v) for o, v in b.offsets_values() if o >= offset]
            offset = batches[-1].last_offset + 1


def test_sigterm_exits_zero_and_keeps_everything(broker_factory, topic_name):
    b = broker_factory()
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 2)
        want = []
        for i in range(100):
            acks = (1, -1, 0)[i % 3]
            part = i % 2
            if acks == 0:
                c.send(0, 7, k.produce_body(topic_name, part, k.batch([b"v%d" % i]), acks=0),
                       expect_response=False)
            else:
                assert k.produce(c, topic_name, part, k.batch([b"v%d" % i]),
                                 acks=acks)["ErrorCode"] == k.NONE
            want.append((part, b"v%d" % i))
        k.api_versions(c, 0)    # every acks=0 produce before it has been handled
        pid = k.init_producer_id(c, 4)["ProducerId"]
    t0 = time.time()
    assert b.stop() == 0
    assert time.time() - t0 < 10, "clean shutdown took %.1fs" % (time.time() - t0)
    b.start()
    for part in (0, 1):
        got = read_all(b.bootstrap, topic_name, part)
        assert [o for o, _ in got] == list(range(len(got)))
        assert [v for _, v in got] == [v for p, v in want if p == part]
    with k.Conn(b.bootstrap) as c:
        assert k.init_producer_id(c, 4)["ProducerId"] != pid


def test_sigterm_with_busy_connections(broker_factory, topic_name):
    """Shutdown does not wait for clients: open connections, a pending long poll
    and a half-sent request do not delay it."""
    b = broker_factory()
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
        k.produce(c, topic_name, 0, k.batch([b"x"]))
    idle = [k.Conn(b.bootstrap) for _ in range(5)]
    poller = k.Conn(b.bootstrap)
    poller.send(1, 11, k.fetch_body(topic_name, 0, 1, max_wait=30000, min_bytes=1))
    partial = k.Conn(b.bootstrap)
    f, _ = partial.build(18, 0, {})
    partial.send_raw(f[:5])
    time.sleep(0.3)
    t0 = time.time()
    assert b.stop() == 0
    assert time.time() - t0 < 10
    for c in idle + [poller, partial]:
        assert c.wait_closed(2)
        c.close()
    b.start()
    assert read_all(b.bootstrap, topic_name) == [(0, b"x")]


def test_sigterm_during_produce_load(broker_factory, topic_name):
    """Everything acknowledged before SIGTERM is there after the restart."""
    b = broker_factory()
    with k.Conn(b.bootstrap) as c:
        k.create_topic(c, topic_name, 1)
    acked = []
    stop = threading.Event()

    def load():
        try:
            with k.Conn(b.bootstrap) as c:
                i = 0
                while not stop.is_set():
                    pr = k.produce(c, topic_name, 0, k.batch([b"L%d" % i]))
                    if pr["ErrorCode"] == k.NONE:
                        acked.append((pr["BaseOffset"], b"L%d" % i))
                    i += 1
        except (OSError, k.ConnectionClosed):
            pass

    t = threading.Thread(target=load)
    t.start()
    time.sleep(1.0)
    assert b.stop() == 0
    stop.set()
    t.join(10)
    assert acked
    b.start()
    got = dict(read_all(b.bootstrap, topic_name))
    assert all(got.get(o) == v for o, v in acked)


def run_skiffd(tmp_path, overrides=(), extra_args=(), timeout=10):
    br = harness.Broker("cfg", data_dir=str(tmp_path / "data"))
    argv = br.argv()
    for kv in overrides:
        argv += ["--override", kv]
    argv += list(extra_args)
    t0 = time.time()
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       timeout=timeout, cwd=str(tmp_path))
    return p.returncode, p.stdout.decode(errors="replace"), time.time() - t0


BAD_CONFIGS = [
    ("no.such.prop=1", "no.such.prop", ["unknown"]),
    ("num.partitions=abc", "num.partitions", ["abc"]),
    ("num.partitions=0", "num.partitions", ["0"]),
    ("num.partitions=", "num.partitions", []),
    ("message.max.bytes=-5", "message.max.bytes", ["-5"]),
    ("socket.request.max.bytes=lots", "socket.request.max.bytes", ["lots"]),
    ("auto.create.topics.enable=maybe", "auto.create.topics.enable", ["maybe"]),
    ("log.retention.ms=1.5h", "log.retention.ms", ["1.5h"]),
    ("listeners=garbage", "listeners", ["garbage"]),
    ("listeners=PLAINTEXT://127.0.0.1:99999", "listeners", ["99999"]),
    ("node.id=-7", "node.id", ["-7"]),
]


@pytest.mark.parametrize("kv,prop,words", BAD_CONFIGS, ids=[c[0] for c in BAD_CONFIGS])
def test_bad_property_exits_nonzero_naming_it(tmp_path, kv, prop, words):
    rc, out, took = run_skiffd(tmp_path, [kv])
    assert rc != 0, "skiffd accepted %s:\n%s" % (kv, out[-2000:])
    assert took < 5, "took %.1fs to reject %s" % (took, kv)
    assert prop in out, "output does not name %s:\n%s" % (prop, out[-2000:])
    for w in words:
        assert w.lower() in out.lower(), "output does not say %r:\n%s" % (w, out[-2000:])
    assert "Segmentation" not in out and rc > 0


@pytest.mark.parametrize("args", [["--override", "num.partitions"], ["--no-such-option"],
                                  ["--override"]], ids=["no-equals", "bad-option", "no-arg"])
def test_bad_command_line(tmp_path, args):
    rc, out, took = run_skiffd(tmp_path, extra_args=args)
    assert rc != 0 and took < 5
    assert out.strip(), "no explanation printed"


def test_port_in_use(tmp_path):
    s = socket.socket()
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind(("127.0.0.1", 0))
    s.listen(1)
    port = s.getsockname()[1]
    try:
        rc, out, took = run_skiffd(tmp_path, ["listeners=PLAINTEXT://127.0.0.1:%d" % port,
                                              "advertised.listeners=PLAINTEXT://127.0.0.1:%d"
                                              % port])
        assert rc != 0 and took < 5
        assert str(port) in out
    finally:
        s.close()


def test_unusable_data_dir(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    rc, out, took = run_skiffd(tmp_path, ["data.dir=%s/sub" % blocker])
    assert rc != 0 and took < 5
    assert "data.dir" in out or str(blocker) in out


def test_help_lists_properties(tmp_path):
    p = subprocess.run([harness.SKIFFD, "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, timeout=10, cwd=str(tmp_path))
    out = p.stdout.decode(errors="replace")
    assert p.returncode == 0
    missing = [x for x in PROPERTIES if x not in out]
    assert not missing, "--help does not list %r" % missing
    assert not os.listdir(tmp_path), "--help created files"
