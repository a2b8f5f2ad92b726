import os
import shutil
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "restarts: the test kills or restarts brokers itself")
    config.addinivalue_line("markers", "cluster: the test runs several nodes through etcd")


@pytest.fixture
def broker_factory(request):
    """Makes skiffd nodes with property overrides; all are stopped after the test."""
    made = []

    def make(overrides=None, start=True, name=None):
        if harness.external():
            pytest.skip("needs a broker this harness starts (SKIFF_TEST_EXTERNAL is set)")
        name = name or "%s-%d" % (request.node.name.replace("/", "_")[:60], len(made))
        b = harness.Broker(name, overrides)
        b.wipe()
        made.append(b)
        if start:
            b.start()
        return b

    yield make
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    for b in made:
        if failed:
            sys.stderr.write("\n--- %s log (tail) ---\n%s\n" % (b.name, b.log_text()[-20000:]))
        b.kill()
        if not failed:
            b.wipe()


@pytest.fixture
def broker(broker_factory):
    """One broker with default settings, or the external one."""
    if harness.external():
        return harness.ExternalBroker(harness.external())
    return broker_factory()


@pytest.fixture(scope="session")
def s3():
    """The S3 emulator of the object store tests (s3env.py): the one tests/run.sh
    started (SKIFF_TEST_S3_URL, SKIFF_TEST_S3_DIR), else one started for this session."""
    import s3env
    if harness.external():
        pytest.skip("needs brokers this harness starts (SKIFF_TEST_EXTERNAL is set)")
    if os.environ.get("SKIFF_TEST_S3_SKIP"):
        pytest.skip("S3 emulator unavailable: %s" % os.environ["SKIFF_TEST_S3_SKIP"])
    url = os.environ.get("SKIFF_TEST_S3_URL")
    if url:
        if not os.environ.get("SKIFF_TEST_S3_DIR"):
            pytest.skip("SKIFF_TEST_S3_URL is set without SKIFF_TEST_S3_DIR")
        yield s3env.S3Env(url, os.environ["SKIFF_TEST_S3_DIR"])
        return
    env, stop = s3env.start_emulator(harness.WORK)
    if env is None:
        pytest.skip(stop)
    # the emulator's fixed credentials, for the brokers the tests start
    os.environ["AWS_ACCESS_KEY_ID"] = os.environ["AWS_SECRET_ACCESS_KEY"] = "S3RVER"
    try:
        yield env
    finally:
        stop()


@pytest.fixture(scope="session")
def etcd():
    """The etcd of the cluster tests that leave etcd alone (cluster.Etcd): the one
    tests/run.sh started (SKIFF_TEST_ETCD_ENDPOINTS, SKIFF_TEST_ETCD_DIR), else one
    started for this session with tools/etcd.sh. Skips when etcd is not installed."""
    import cluster
    if harness.external():
        pytest.skip("needs nodes this harness starts (SKIFF_TEST_EXTERNAL is set)")
    if os.environ.get("SKIFF_TEST_ETCD_SKIP"):
        pytest.skip("etcd unavailable: %s" % os.environ["SKIFF_TEST_ETCD_SKIP"])
    endpoints = os.environ.get("SKIFF_TEST_ETCD_ENDPOINTS")
    if endpoints:
        yield cluster.Etcd(os.environ.get("SKIFF_TEST_ETCD_DIR"), endpoints, own=False)
        return
    e = cluster.Etcd.start(os.path.join(harness.WORK, "etcd-%d" % os.getpid()))
    try:
        yield e
    finally:
        e.stop()
        shutil.rmtree(e.dir, ignore_errors=True)


@pytest.fixture
def own_etcd(request):
    """A 3-member etcd of this test's own (tools/etcd.sh in its work directory), for the
    tests that kill or stop etcd members; stopped after the test."""
    import cluster
    if harness.external():
        pytest.skip("needs nodes this harness starts (SKIFF_TEST_EXTERNAL is set)")
    d = os.path.join(harness.WORK, "etcd-%s" % request.node.name.replace("/", "_")[:60])
    e = cluster.Etcd.start(d)
    yield e
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    if failed:
        sys.stderr.write("\n%s\n" % e.log_tails())
    e.stop()
    if not failed:
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def cluster_factory(request):
    """Makes cluster.Cluster objects (not started: call .start()); etcd= the test's own
    etcd, else the shared one. After the test every node is SIGKILLed; on failure their
    logs' tails are printed, else their directories are removed."""
    import cluster
    made = []

    def make(n=3, etcd=None, overrides=None, offsets_partitions=6, name=None):
        if harness.external():
            pytest.skip("needs nodes this harness starts (SKIFF_TEST_EXTERNAL is set)")
        if etcd is None:
            etcd = request.getfixturevalue("etcd")
        name = name or "%s-%d" % (request.node.name.replace("/", "_")[:60], len(made))
        cl = cluster.Cluster(name, etcd, n, overrides, offsets_partitions)
        made.append(cl)
        print(cl.describe())
        return cl

    yield make
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    for cl in made:
        if failed:
            sys.stderr.write("\n%s\n%s\n" % (cl.describe(), cl.log_tails()))
        cl.kill_all()
        if not failed:
            shutil.rmtree(cl.dir, ignore_errors=True)


@pytest.fixture(scope="session")
def zones():
    """Three availability zones for this session (zones.Zones: network namespaces
    SKIFF_TEST_ZONES_PREFIX-a/-b/-c, as tests/run.sh names them, else skz-<pid>),
    made when a test first asks and removed at the end of the session. Skips, with
    the reason, where this machine cannot have them (not root, no namespaces)."""
    import zones as zm
    if os.environ.get("SKIFF_TEST_ZONES_SKIP"):
        pytest.skip("no zones: %s" % os.environ["SKIFF_TEST_ZONES_SKIP"])
    prefix = os.environ.get("SKIFF_TEST_ZONES_PREFIX") or "skz-%d" % os.getpid()
    try:
        z = zm.Zones.up(prefix)
    except zm.ZonesUnavailable as e:
        pytest.skip("this machine cannot have zones: %s" % e)
    try:
        yield z
    finally:
        z.down()


@pytest.fixture
def zone_fwd(request):
    """Starts zonefwd forwarders in zones: make(zone, "host:port", delay_ms=1,
    interpose=True, reset_existing=False) (zones.Zones.forwarder). Each is stopped, by
    its PID, after the test, and its interposition removed."""
    made = []

    def make(zone, target, delay_ms=1.0, interpose=True, reset_existing=False):
        z = request.getfixturevalue("zones")
        f = z.forwarder(zone, target, delay_ms, interpose, reset_existing)
        made.append((z, f))
        return f

    yield make
    for z, f in made:
        f.stop()
        if f in z.forwarders:
            z.forwarders.remove(f)


@pytest.fixture
def zone_cluster_factory(request):
    """Makes zones.ZoneCluster objects (not started: call .start()): one node per zone
    (layout= zone names, one per node), through the session's zones and the shared
    etcd (etcd= a test's own). After the test the zones' forwarders are stopped and
    every node is SIGKILLed, by their PIDs; on failure the nodes' logs' tails are
    printed, else their directories are removed."""
    import zones as zm
    made = []

    def make(overrides=None, layout=None, offsets_partitions=6, etcd=None, name=None):
        if harness.external():
            pytest.skip("needs nodes this harness starts (SKIFF_TEST_EXTERNAL is set)")
        z = request.getfixturevalue("zones")
        if etcd is None:
            etcd = request.getfixturevalue("etcd")
        name = name or "%s-%d" % (request.node.name.replace("/", "_")[:60], len(made))
        cl = zm.ZoneCluster(name, etcd, z, layout, overrides, offsets_partitions)
        made.append(cl)
        print(cl.describe())
        return cl

    yield make
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    for cl in made:
        cl.zones.stop_forwarders()
        if failed:
            sys.stderr.write("\n%s\n%s\n" % (cl.describe(), cl.log_tails()))
        cl.kill_all()
        if not failed:
            shutil.rmtree(cl.dir, ignore_errors=True)


@pytest.fixture
def secure_node(request):
    """Makes a node with PLAINTEXT, SSL, SASL_PLAINTEXT and SASL_SSL listeners
    (secnode.py): skiffd, or with SKIFF_TEST_AGAINST=kafka an Apache Kafka configured
    alike. make(pki, extra_properties)."""
    import secnode
    refs = []

    def make(pki, extra=None):
        if harness.external():
            refs.append(secnode.KafkaRef("%s-kafka%d" % (request.node.name[:50], len(refs)),
                                         pki, extra))
            return refs[-1]
        return secnode.node(request.getfixturevalue("broker_factory"), pki, extra)

    yield make
    for r in refs:
        r.stop()


@pytest.fixture
def topic_name(request):
    return "t-%s-%s" % (request.node.name[:40].replace("[", "-").replace("]", ""),
                        uuid.uuid4().hex[:6])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
