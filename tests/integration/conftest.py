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


@pytest.fixture
def topic_name(request):
    return "t-%s-%s" % (request.node.name[:40].replace("[", "-").replace("]", ""),
                        uuid.uuid4().hex[:6])


@pytest.hookimpl(tryfirst=True, hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)
