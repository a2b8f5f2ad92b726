"""Start, stop and kill skiffd nodes for the integration tests.

Every test gets brokers through the `broker` / `broker_factory` fixtures in
conftest.py, which use this module. A broker runs build/skiffd with its own
data directory under tests/.work and a free loopback port; its log goes to
<data dir>/skiffd.log and is printed when a test fails.

SKIFF_TEST_EXTERNAL=host:port points the tests at an already running broker
instead (for instance Apache Kafka started by tools/kafka-ref.sh): tests that
need to kill or restart the broker are then skipped.
"""

import os
import random
import shutil
import signal
import socket
import subprocess
import time

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
# Absolute: brokers run with their data directory as the working directory, and
# tests/run.sh passes SKIFF_BUILD relative to the repository (build).
BUILD = os.path.abspath(os.environ.get("SKIFF_BUILD", os.path.join(ROOT, "build")))
SKIFFD = os.path.join(BUILD, "skiffd")
WORK = os.environ.get("SKIFF_TEST_WORK", os.path.join(ROOT, "tests", ".work"))
PYTHON = "/usr/bin/python3"  # Debian's, which has confluent_kafka and kafka-python


def external():
    return os.environ.get("SKIFF_TEST_EXTERNAL")


_HANDED_OUT = set()


def free_port():
    """A loopback TCP port nothing listens on, never handed out before in this process.

    Picked below the ephemeral range (32768+, where the kernel's bind(0) would hand the
    same port to two callers before either binds it, and where outgoing connections take
    their own ports) and above tools/etcd.sh's 20000-31999."""
    for _ in range(1000):
        port = random.randrange(10000, 20000)
        if port in _HANDED_OUT:
            continue
        s = socket.socket()
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            continue
        finally:
            s.close()
        _HANDED_OUT.add(port)
        return port
    raise RuntimeError("no free port in 10000-19999 after 1000 tries")


def wait_port(host, port, timeout=30.0, proc=None):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError("skiffd exited with %s during start-up" % proc.returncode)
        try:
            with socket.create_connection((host, port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on %s:%d after %.0fs" % (host, port, timeout))


class Broker:
    """One skiffd process. Survives kill()/start() cycles on the same data dir and port."""

    def __init__(self, name, overrides=None, port=None, data_dir=None):
        self.name = name
        self.port = port or free_port()
        self.host = "127.0.0.1"
        self.data_dir = data_dir or os.path.join(WORK, name)
        self.overrides = dict(overrides or {})
        self.proc = None
        self.log_path = os.path.join(self.data_dir, "skiffd.log")

    @property
    def bootstrap(self):
        return "%s:%d" % (self.host, self.port)

    def argv(self):
        props = {
            "node.id": "1",
            "listeners": "PLAINTEXT://%s:%d" % (self.host, self.port),
            "advertised.listeners": "PLAINTEXT://%s:%d" % (self.host, self.port),
            "data.dir": self.data_dir,
        }
        props.update(self.overrides)
        argv = [SKIFFD]
        for k, v in props.items():
            argv += ["--override", "%s=%s" % (k, v)]
        return argv

    def start(self, timeout=30.0):
        os.makedirs(self.data_dir, exist_ok=True)
        log = open(self.log_path, "ab")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=subprocess.STDOUT,
                                     cwd=self.data_dir)
        log.close()
        wait_port(self.host, self.port, timeout, self.proc)
        return self

    def kill(self):
        """SIGKILL: the crash the durability tests are about."""
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
            self.proc.wait()
        self.proc = None

    def stop(self, timeout=30.0):
        """SIGTERM, a clean shutdown; returns the exit status."""
        if not self.proc:
            return None
        rc = self.proc.poll()
        if rc is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                rc = self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
                raise
        self.proc = None
        return rc

    def restart(self):
        self.kill()
        return self.start()

    def rss_kib(self):
        with open("/proc/%d/status" % self.proc.pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
        return None

    def log_text(self):
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def wipe(self):
        shutil.rmtree(self.data_dir, ignore_errors=True)


class ExternalBroker:
    """A broker this harness did not start and cannot restart."""

    def __init__(self, bootstrap):
        self.host, port = bootstrap.rsplit(":", 1)
        self.port = int(port)
        self.proc = None
        self.data_dir = None

    @property
    def bootstrap(self):
        return "%s:%d" % (self.host, self.port)

    def log_text(self):
        return ""
