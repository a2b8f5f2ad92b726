import os
import shutil
import sys
import uuid

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import harness  # noqa: E402


def pytest_configure(config):
    config.addinivalue_line("markers", "restarts: the test kills or restarts brokers itself")


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


@pytest.fixture
def topic_name(request):
    return "t-%s-%s" % (request.node.name[:40].replace("[", "-").replace("]", ""),
                        uuid.uuid4().hex[:6])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
