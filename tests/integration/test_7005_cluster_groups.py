"""A consumer group keeps its committed offsets across the death of its coordinator
(docs/cluster.md, "Consumer groups").

Three nodes; a 6-partition topic holds 9000 records. Three confluent-kafka consumers
form a group and commit synchronously what they processed after every batch. Every
node names the same coordinator (FindCoordinator), the main of the group's
__consumer_offsets partition. Once a third of the records is consumed, that node is
SIGKILLed: the partition moves to a survivor with its HANDOFF, which carries the
committed offsets; the members find the new coordinator and rejoin (memberships are not
carried) and the group goes on over the two remaining nodes.

Checks: right after the kill the new coordinator returns every offset whose commit was
confirmed before it; every record is consumed (none skipped), each at the offset its
producer was told; a record consumed twice was never covered by a confirmed commit before
it was consumed again (only what was not committed is read twice); in the end the
committed offsets are the end offsets.
"""

import threading
import time

import pytest

import cluster as cm
import kgroup as kg
import kproto as k

pytestmark = [pytest.mark.cluster, pytest.mark.restarts]

PARTS = 6
N = 9000


class Member:
    """One group member in a thread: consume a batch, commit it (sync), repeat."""

    def __init__(self, name, bootstrap, group, topic, throttle):
        from confluent_kafka import Consumer
        self.name, self.topic, self.throttle = name, topic, throttle
        self.errors = []
        self.c = Consumer({
            "bootstrap.servers": bootstrap, "group.id": group,
            "client.id": "skiff-7005-" + name, "enable.auto.commit": False,
            "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500, "max.poll.interval.ms": 60000,
            "fetch.wait.max.ms": 100, "topic.metadata.refresh.interval.ms": 1000,
            "reconnect.backoff.ms": 20, "reconnect.backoff.max.ms": 300,
            "socket.connection.setup.timeout.ms": 5000,
            # small fetches: a member's partitions interleave instead of one whole
            # partition first, so that every partition has commits when the coordinator dies
            "max.partition.fetch.bytes": 2048, "fetch.max.bytes": 8192, "message.max.bytes": 8192,
            "error_cb": lambda e: self.errors.append((time.monotonic(), str(e)))})
        self.consumed = []       # (t, member, partition, offset, key)
        self.commits = []        # (t, {partition: offset}, ok, error)
        self.assignments = []    # (t, [partitions])
        self.stop_flag = threading.Event()
        self.failure = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _assigned(self, consumer, parts):
        self.assignments.append((time.monotonic(), sorted(p.partition for p in parts)))

    def _run(self):
        from confluent_kafka import KafkaException, TopicPartition
        try:
            self.c.subscribe([self.topic], on_assign=self._assigned)
            while not self.stop_flag.is_set():
                msgs = self.c.consume(num_messages=20, timeout=0.2)
                upto = {}
                for m in msgs:
                    if m.error():
                        self.errors.append((time.monotonic(), str(m.error())))
                        continue
                    self.consumed.append((time.monotonic(), self.name, m.partition(),
                                          m.offset(), m.key()))
                    upto[m.partition()] = max(upto.get(m.partition(), -1), m.offset() + 1)
                if not upto:
                    continue
                try:
                    res = self.c.commit(offsets=[TopicPartition(self.topic, p, o)
                                                 for p, o in upto.items()],
                                        asynchronous=False)
                    bad = {tp.partition: str(tp.error) for tp in res or [] if tp.error}
                    ok = {p: o for p, o in upto.items() if p not in bad}
                    if ok:
                        self.commits.append((time.monotonic(), ok, True, None))
                    if bad:
                        self.commits.append((time.monotonic(), {p: upto[p] for p in bad},
                                             False, bad))
                except KafkaException as e:
                    self.commits.append((time.monotonic(), upto, False, str(e)))
                time.sleep(self.throttle)
        except Exception as e:  # noqa: BLE001 - reported by the test
            self.failure = e
        finally:
            try:
                self.c.close()
            except Exception as e:  # noqa: BLE001
                self.errors.append((time.monotonic(), "close: %r" % e))

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_flag.set()
        self.thread.join(60)
        assert not self.thread.is_alive(), "member %s did not stop" % self.name


def produce(cl, topic):
    """N records, key k-i to partition i % PARTS, acks=all; returns {key: (p, offset)}."""
    from confluent_kafka import Producer
    acks, errors = {}, []

    def cb(err, m):
        if err:
            errors.append(str(err))
        else:
            acks[m.key()] = (m.partition(), m.offset())
    p = Producer({"bootstrap.servers": cl.bootstrap, "acks": "all", "linger.ms": 5,
                  "enable.idempotence": True, "batch.num.messages": 50})
    for i in range(N):
        while True:
            try:
                p.produce(topic, key=b"k-%d" % i, value=b"v-%d" % i, partition=i % PARTS,
                          on_delivery=cb)
                break
            except BufferError:
                p.poll(0.05)
        p.poll(0)
    assert p.flush(60) == 0 and not errors and len(acks) == N, (len(acks), errors[:3])
    return acks


def coordinators(cl, group):
    """{node: (error, coordinator)} of FindCoordinator asked of every live node."""
    seen = {}
    for n in cl.live():
        with n.conn() as c:
            r = kg.find_coordinator(c, group)
        seen[n.node_id] = (r["ErrorCode"], r["NodeId"])
    return seen


def agreed(seen):
    """The coordinator every node names without error, or None."""
    ok = len(set(seen.values())) == 1 and next(iter(seen.values()))[0] == k.NONE
    return next(iter(seen.values()))[1] if ok else None


def coordinator_everywhere(cl, group):
    """The coordinator every live node names (asserting they agree)."""
    seen = coordinators(cl, group)
    assert agreed(seen) is not None, "FindCoordinator(%s) per node: %r" % (group, seen)
    return agreed(seen)


def committed(cl, node_id, group, topic):
    """{partition: committed offset} from node_id, retried while it is not (yet) the
    coordinator or still loading."""
    def ask():
        try:
            with cl.nodes[node_id].conn() as c:
                top, offs = kg.fetch_offsets(c, group, {topic: list(range(PARTS))})
        except (OSError, k.ConnectionClosed, k.ProtocolError):
            return None
        if top in (cm.COORDINATOR_LOAD_IN_PROGRESS, cm.COORDINATOR_NOT_AVAILABLE,
                   cm.NOT_COORDINATOR):
            return None
        assert top == k.NONE, "OffsetFetch of %s on node %d: error %d" % (group, node_id, top)
        errs = {p: offs[(topic, p)][2] for p in range(PARTS) if offs[(topic, p)][2]}
        assert not errs, "OffsetFetch of %s on node %d: partition errors %r" % (
            group, node_id, errs)
        return {p: offs[(topic, p)][0] for p in range(PARTS)}
    return cm.wait_for(ask, 30, "node %d to answer OffsetFetch for %s" % (node_id, group))


def test_group_keeps_committed_offsets_when_its_coordinator_dies(cluster_factory, topic_name):
    cl = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1"}).start()
    cl.wait_balanced()
    cl.create_topic(topic_name, PARTS)
    acks = produce(cl, topic_name)
    ends = {p: sum(1 for q, _ in acks.values() if q == p) for p in range(PARTS)}

    group = cm.group_id("g7005")   # hash >= 0: test_7001 covers the mapping of the others
    op = cm.offsets_partition(group, cl.offsets_partitions)
    coord = coordinator_everywhere(cl, group)
    assert coord == cl.leaders(cm.OFFSETS_TOPIC)[op][0], \
        "the coordinator of %s is %d, the main of %s-%d is %d" % (
            group, coord, cm.OFFSETS_TOPIC, op, cl.leaders(cm.OFFSETS_TOPIC)[op][0])
    print("group %s: %s-%d, coordinator node %d" % (group, cm.OFFSETS_TOPIC, op, coord))

    members = [Member("m%d" % i, cl.bootstrap, group, topic_name, throttle=0.05).start()
               for i in (1, 2, 3)]

    def consumed():
        return [x for m in members for x in list(m.consumed)]

    def confirmed(before=None):
        out = {}
        for m in members:
            for t, offs, ok, _ in list(m.commits):
                if ok and (before is None or t <= before):
                    for p, o in offs.items():
                        out[p] = max(out.get(p, -1), o)
        return out

    try:
        cm.wait_for(lambda: len(consumed()) >= N // 3 and len(confirmed()) == PARTS, 60,
                    "the group to consume a third of the records and commit in every partition")
        before = confirmed()
        t_kill = time.monotonic()
        cl.kill(coord)
        print("SIGKILL of coordinator node %d after %d records consumed; confirmed commits %r"
              % (coord, len(consumed()), before))
        # The live nodes learn the new placement one after the other: until they
        # agree, one may still name the dead node.
        new = cm.wait_for(lambda: (lambda c: c if c != coord else None)(
            agreed(coordinators(cl, group))), 30, "a new coordinator of %s" % group)
        assert coordinator_everywhere(cl, group) == new
        after = committed(cl, new, group, topic_name)
        print("new coordinator node %d (%.2f s after the kill) has %r" % (
            new, time.monotonic() - t_kill, after))
        lost = {p: (before[p], after.get(p)) for p in before if after.get(p, -1) < before[p]}
        assert not lost, "committed offsets lost with coordinator node %d (partition: " \
            "(confirmed before the kill, committed now)): %r" % (coord, lost)

        keys = {kk for _, _, _, _, kk in consumed()}
        cm.wait_for(lambda: len({x[4] for x in consumed()}) >= N, 90,
                    "every record to be consumed (%d of %d)" % (len(keys), N))
        cm.wait_for(lambda: committed(cl, new, group, topic_name) == ends, 30,
                    "the committed offsets to reach the end offsets %r" % ends)
    finally:
        for m in members:
            m.stop()
    for m in members:
        assert m.failure is None, "member %s died: %r" % (m.name, m.failure)

    events = sorted(consumed())
    firsts_after = {}
    for t, name, p, off, key in events:
        if t > t_kill and p not in firsts_after:
            firsts_after[p] = (round(t - t_kill, 2), name, off)
    print("first record consumed per partition after the kill (s, member, offset): %r" %
          firsts_after)

    problems = []
    by_key = {}
    for t, name, p, off, key in events:
        if acks.get(key) != (p, off):
            problems.append("%r consumed at %d@%d by %s, acknowledged at %r" % (
                key, p, off, name, acks.get(key)))
        by_key.setdefault(key, []).append((t, name, p, off))
    missing = set(acks) - set(by_key)
    if missing:
        problems.append("%d records never consumed, e.g. %r" % (len(missing),
                                                                sorted(missing)[:5]))
    commits = [(t, p, o) for m in members for t, offs, ok, _ in m.commits if ok
               for p, o in offs.items()]
    twice = 0
    for key, seen in by_key.items():
        if len(seen) < 2:
            continue
        twice += 1
        p, off = seen[0][2], seen[0][3]
        for t2, name2, _, _ in seen[1:]:
            cover = [(round(tc - t_kill, 2), o) for tc, q, o in commits
                     if q == p and o > off and tc < t2]
            if cover:
                problems.append(
                    "%r (%d@%d) consumed again by %s %.2f s after the kill although commits "
                    "covering it were confirmed (s after the kill, offset): %r" % (
                        key, p, off, name2, t2 - t_kill, cover[:3]))
    failed = [(round(t - t_kill, 2), m.name, e) for m in members
              for t, _, ok, e in m.commits if not ok]
    print("%d records consumed, %d distinct, %d consumed twice; %d commits failed: %r" % (
        len(events), len(by_key), twice, len(failed), failed[:5]))
    print("assignments: %r" % {m.name: [(round(t - t_kill, 2), ps) for t, ps in m.assignments]
                               for m in members})
    assert not problems, "%d problem(s):\n  %s" % (len(problems), "\n  ".join(problems[:30]))
