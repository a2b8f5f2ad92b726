"""franz-go (kgo v1.22.3, Go module proxy): producer and group consumer by topic id, in
classic groups and in KIP-848 consumer-protocol groups.

franz-go takes min(its max, broker max) for every request, and names topics by id
(Produce v13, Fetch v13+, OffsetCommit/OffsetFetch v10) once Metadata gives it ids
(COMPAT §0.7). clients/franz produces records round-robin over three partitions, reads
them all in a group and commits, produces three more, and reads them in the same group
from its commit: the commit went out and came back by topic id. Its debug log says
which version of each request it chose.

The client is built by tests/run.sh into ~/.cache/skiff/go (once); the test is skipped
when Go is missing or the build fails.
"""

import collections
import os
import re
import sys
import uuid

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(__file__), "clients"))
import harness  # noqa: E402
import kproto as k  # noqa: E402
import ktest  # noqa: E402

skiff_only = pytest.mark.skipif(bool(harness.external()),
                                reason="Skiff-specific expectation (differs from Kafka)")


@pytest.fixture(scope="module")
def franz():
    try:
        return ktest.build_franz()
    except RuntimeError as e:
        pytest.skip(str(e))


def versions_used(stderr):
    """{request name: set of versions} from franz-go's "wrote <Name> v<N>" debug lines."""
    out = collections.defaultdict(set)
    for name, v in re.findall(r"wrote (\w+) v(\d+)", stderr.decode(errors="replace")):
        out[name].add(int(v))
    return out


def run_franz(franz, broker, topic_name, extra=(), group=None):
    with k.Conn(broker.bootstrap) as c:
        k.create_topic(c, topic_name, 3)
    group = group or "franz-" + uuid.uuid4().hex[:8]
    p = ktest.run([franz, "-b", broker.bootstrap, "-t", topic_name, "-g", group, "-n", "30"]
                  + list(extra), timeout=150, what="franz")
    return p.stdout.decode().splitlines(), versions_used(p.stderr)


def test_produce_consume_commit_resume_by_topic_id(franz, broker, topic_name):
    lines, used = run_franz(franz, broker, topic_name)
    assert lines == ["P 30", "C1 30", "P 3", "C2 second-0 second-1 second-2"], lines
    assert used["Produce"] == {13}, used
    assert min(used["Fetch"]) >= 13, used
    assert used["OffsetCommit"] == {10}, used
    assert used["OffsetFetch"] == {10}, used


@skiff_only
def test_newest_versions_skiff_advertises(franz, broker, topic_name):
    lines, used = run_franz(franz, broker, topic_name)
    assert lines[-1] == "C2 second-0 second-1 second-2", lines
    assert used["Fetch"] == {17} and used["ListOffsets"] <= {10} and used["Metadata"] == {13}, \
        used


def test_consumer_protocol_groups(franz, broker, topic_name):
    """The same run with kgo.ServerSideBalancer: franz-go joins with ConsumerGroupHeartbeat
    (KIP-848) and never with JoinGroup; the commit, made with the member's epoch, resumes
    the second consumer. The group is a consumer-protocol group afterwards."""
    group = "franz848-" + uuid.uuid4().hex[:8]
    lines, used = run_franz(franz, broker, topic_name, ["-848"], group=group)
    assert lines == ["P 30", "C1 30", "P 3", "C2 second-0 second-1 second-2"], lines
    assert used["ConsumerGroupHeartbeat"] == {1}, used
    assert not used["JoinGroup"] and not used["SyncGroup"], used
    assert used["OffsetCommit"] == {10}, used
    with k.Conn(broker.bootstrap) as c:
        g = c.request(69, 1, {"GroupIds": [group], "IncludeAuthorizedOperations": False})[
            "Groups"][0]
    assert g["ErrorCode"] == k.NONE and g["GroupState"] == "Empty", g
    assert g["AssignorName"] in ("uniform", "range"), g
