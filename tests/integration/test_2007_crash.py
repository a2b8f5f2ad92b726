"""SIGKILL skiffd under load, restart it on the same data directory and port, and
check the log against every acknowledgement (crashcheck.py has the checks; run it
as a script to play the same scenarios against Apache Kafka).

Seeds are random per run and printed; SKIFF_CRASH_SEED=N replays one.
"""

import os
import random

import pytest

import crashcheck

pytestmark = pytest.mark.restarts


def seed():
    s = int(os.environ.get("SKIFF_CRASH_SEED", random.randrange(1 << 30)))
    print("crash seed %d (SKIFF_CRASH_SEED=%d replays it)" % (s, s))
    return s


def test_acked_records_survive_repeated_sigkill(broker_factory, topic_name):
    b = broker_factory()
    stats = crashcheck.produce_through_kills(b, topic_name, partitions=4, kills=8,
                                             seed=seed(), gap=(0.8, 2.5), down=(0.0, 0.3))
    assert stats["records"] >= stats["acked"] > 0


def test_topic_creation_survives_sigkill(broker_factory, topic_name):
    b = broker_factory()
    stats = crashcheck.create_topics_through_kills(b, topic_name, kills=4, seed=seed(),
                                                   gap=(0.1, 0.8))
    assert stats["acked_topics"] > 0
