/* cgroup, the KIP-848 consumer group protocol as a state machine, driven
 * with fake time and fake topics: joins, leaves, revocation before
 * assignment, session and revocation expiry, static members leaving and
 * coming back, both assignors, regex subscriptions, the request checks and
 * the OffsetCommit/OffsetFetch checks. Expected codes are Kafka 4.3's. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cgroup.h"
#include "sk_buf.h"
#include "sk_err.h"

#define GROUP "g"
#define SESSION 45000

static sk_cg_topic topics[2];
static int ntopics = 1;

static void set_topics(int32_t parts_a, int32_t parts_b)
{
    memset(topics, 0, sizeof topics);
    topics[0].name = "a";
    topics[0].id.b[15] = 1;
    topics[0].nparts = parts_a;
    topics[1].name = "b";
    topics[1].id.b[15] = 2;
    topics[1].nparts = parts_b;
    ntopics = parts_b > 0 ? 2 : 1;
}

static kc_str S(const char *s)
{
    return s ? (kc_str){s, (int32_t)strlen(s)} : (kc_str){NULL, -1};
}

static sk_cg *new_cg(const char *assignors, int32_t max_size)
{
    sk_cg_config c = {SESSION, 5000, max_size, assignors};
    sk_cg *cg = sk_cg_new(&c);
    assert_non_null(cg);
    return cg;
}

/* What a member last got. */
typedef struct mstate {
    const char *id, *instance;
    int32_t epoch;
    sk_cg_tp owned[64];
    int32_t nowned;
} mst;

typedef struct hb {
    const char *subs[2];
    int nsubs; /* -1: null */
    const char *regex, *assignor;
    bool send_owned;
    int32_t epoch_override; /* 0: use the member's */
    bool use_override;
} hb;

static sk_cg_hb_result last;

static int16_t beat(sk_cg *cg, mst *m, hb o, int64_t now)
{
    kc_str subs[2];
    for (int i = 0; i < o.nsubs && i < 2; i++)
        subs[i] = S(o.subs[i]);
    sk_cg_hb_args a = {0};
    a.group_id = S(GROUP);
    a.member_id = S(m->id);
    a.instance_id = S(m->instance);
    a.rack_id = S(NULL);
    a.client_id = S("cli");
    a.client_host = S("/127.0.0.1");
    a.member_epoch = o.use_override ? o.epoch_override : m->epoch;
    a.rebalance_timeout_ms = a.member_epoch == 0 ? 30000 : -1;
    a.nsubs = o.nsubs;
    a.subs = subs;
    a.regex = S(o.regex);
    a.assignor = S(o.assignor);
    a.nowned = a.member_epoch == 0 ? 0 : o.send_owned ? m->nowned : -1;
    a.owned = m->owned;
    a.version = 1;
    sk_cg_heartbeat(cg, &a, topics, ntopics, now, &last);
    if (last.error == 0) {
        m->epoch = last.member_epoch;
        if (last.has_assignment) {
            /* The client revokes what is gone and takes what is new. */
            m->nowned = last.nassigned;
            memcpy(m->owned, last.assigned, (size_t)last.nassigned * sizeof *m->owned);
        }
    }
    return last.error;
}

static const hb JOIN_A = {.subs = {"a"}, .nsubs = 1};
static const hb PLAIN = {.nsubs = -1};
static const hb ACK = {.nsubs = -1, .send_owned = true};

static bool owns(const mst *m, int topic, int32_t part)
{
    for (int32_t i = 0; i < m->nowned; i++)
        if (m->owned[i].id.b[15] == topic && m->owned[i].part == part)
            return true;
    return false;
}

static void no_overlap(const mst *x, const mst *y)
{
    for (int32_t i = 0; i < x->nowned; i++)
        assert_false(owns(y, x->owned[i].id.b[15], x->owned[i].part));
}

static void test_single_member_gets_everything(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst m = {.id = "m1"};
    assert_int_equal(beat(cg, &m, JOIN_A, 0), 0);
    assert_int_equal(m.epoch, 1);
    assert_true(last.has_assignment);
    assert_int_equal(m.nowned, 4);
    assert_int_equal(last.heartbeat_ms, 5000);
    sk_cg_group *g = sk_cg_find(cg, GROUP, 1);
    assert_non_null(g);
    assert_int_equal(sk_cg_group_state(g), SK_CG_STABLE);
    assert_string_equal(sk_cg_group_assignor(g), "uniform");
    /* A plain heartbeat changes nothing and carries no assignment. */
    assert_int_equal(beat(cg, &m, PLAIN, 1000), 0);
    assert_int_equal(m.epoch, 1);
    assert_false(last.has_assignment);
    sk_cg_destroy(cg);
}

/* A second member: the first must revoke before the second gets anything,
 * and no partition is ever owned twice. */
static void test_revocation_before_assignment(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1"}, b = {.id = "m2"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &b, JOIN_A, 10), 0);
    /* b is at the new epoch, but waits for partitions a still holds. */
    assert_int_equal(b.epoch, 2);
    assert_int_equal(b.nowned, 0);
    assert_int_equal(sk_cg_group_state(sk_cg_find(cg, GROUP, 1)), SK_CG_RECONCILING);
    /* a is told to keep 2: it stays at epoch 1 until it acknowledges. */
    assert_int_equal(beat(cg, &a, PLAIN, 20), 0);
    assert_int_equal(a.epoch, 1);
    assert_true(last.has_assignment);
    assert_int_equal(a.nowned, 2);
    /* b heartbeats again: still nothing, a has not confirmed. */
    assert_int_equal(beat(cg, &b, PLAIN, 30), 0);
    assert_int_equal(b.nowned, 0);
    /* a confirms with its owned partitions and moves to epoch 2. */
    assert_int_equal(beat(cg, &a, ACK, 40), 0);
    assert_int_equal(a.epoch, 2);
    assert_int_equal(beat(cg, &b, PLAIN, 50), 0);
    assert_true(last.has_assignment);
    assert_int_equal(b.nowned, 2);
    no_overlap(&a, &b);
    assert_int_equal(sk_cg_group_state(sk_cg_find(cg, GROUP, 1)), SK_CG_STABLE);
    sk_cg_destroy(cg);
}

static void test_leave_gives_partitions_back(void **st)
{
    (void)st;
    set_topics(3, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1"}, b = {.id = "m2"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &b, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0);
    assert_int_equal(beat(cg, &a, ACK, 0), 0);
    assert_int_equal(beat(cg, &b, PLAIN, 0), 0);
    assert_int_equal(a.nowned + b.nowned, 3);
    hb leave = {.nsubs = -1, .use_override = true, .epoch_override = -1};
    assert_int_equal(beat(cg, &b, leave, 0), 0);
    assert_int_equal(last.member_epoch, -1);
    assert_int_equal(sk_cg_group_nmembers(sk_cg_find(cg, GROUP, 1)), 1);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0);
    assert_int_equal(a.nowned, 3);
    assert_int_equal(a.epoch, 3);
    /* The member that left is unknown now. */
    b.epoch = 3;
    assert_int_equal(beat(cg, &b, PLAIN, 0), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sk_cg_destroy(cg);
}

static void test_session_expiry(void **st)
{
    (void)st;
    set_topics(2, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1"}, b = {.id = "m2"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &b, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0);
    assert_int_equal(beat(cg, &a, ACK, 0), 0);
    assert_int_equal(beat(cg, &b, PLAIN, 0), 0);
    assert_int_equal(b.nowned, 1);
    /* a keeps beating, b goes silent. */
    assert_int_equal(sk_cg_tick(cg, SESSION - 1), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 40000), 0);
    assert_int_equal(sk_cg_tick(cg, SESSION), 1);
    assert_int_equal(beat(cg, &a, PLAIN, 46000), 0);
    assert_int_equal(a.nowned, 2);
    sk_cg_destroy(cg);
}

/* A member that does not revoke within its rebalance timeout is removed,
 * and its partitions go to the others. */
static void test_revocation_timeout(void **st)
{
    (void)st;
    set_topics(2, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1"}, b = {.id = "m2"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &b, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 100), 0); /* told to revoke, never acks */
    assert_int_equal(sk_cg_tick(cg, 100 + 30000), 1);
    assert_int_equal(beat(cg, &b, PLAIN, 30200), 0);
    assert_int_equal(b.nowned, 2);
    sk_cg_destroy(cg);
}

static void test_static_member_rejoins(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1", .instance = "i1"}, b = {.id = "m2", .instance = "i2"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &b, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0);
    assert_int_equal(beat(cg, &a, ACK, 0), 0);
    assert_int_equal(beat(cg, &b, PLAIN, 0), 0);
    int32_t epoch = sk_cg_group_epoch(sk_cg_find(cg, GROUP, 1));
    mst old_b = b;
    /* Another process with the same instance id while b is active. */
    mst dup = {.id = "m3", .instance = "i2"};
    assert_int_equal(beat(cg, &dup, JOIN_A, 0), SK_KAFKA_UNRELEASED_INSTANCE_ID);
    /* b leaves for a restart (epoch -2): it keeps its partitions. */
    hb sleave = {.nsubs = -1, .use_override = true, .epoch_override = -2};
    assert_int_equal(beat(cg, &b, sleave, 100), 0);
    assert_int_equal(last.member_epoch, -2);
    assert_int_equal(beat(cg, &a, PLAIN, 200), 0);
    assert_int_equal(a.nowned, 2);
    /* It comes back under a new member id and gets the same partitions,
     * without a new group epoch. */
    mst b2 = {.id = "m4", .instance = "i2"};
    assert_int_equal(beat(cg, &b2, JOIN_A, 300), 0);
    assert_int_equal(b2.nowned, 2);
    for (int32_t i = 0; i < old_b.nowned; i++)
        assert_true(owns(&b2, 1, old_b.owned[i].part));
    assert_int_equal(sk_cg_group_epoch(sk_cg_find(cg, GROUP, 1)), epoch);
    /* The old member id is fenced by the instance id. */
    assert_int_equal(beat(cg, &b, PLAIN, 400), SK_KAFKA_FENCED_INSTANCE_ID);
    /* A static member gone for its session is removed. */
    assert_int_equal(beat(cg, &b2, sleave, 500), 0);
    assert_int_equal(beat(cg, &a, PLAIN, SESSION + 400), 0);
    assert_int_equal(sk_cg_tick(cg, 500 + SESSION), 1);
    assert_int_equal(beat(cg, &a, PLAIN, SESSION + 600), 0);
    assert_int_equal(a.nowned, 4);
    sk_cg_destroy(cg);
}

static void test_fencing(void **st)
{
    (void)st;
    set_topics(2, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    hb ahead = {.nsubs = -1, .use_override = true, .epoch_override = 7};
    assert_int_equal(beat(cg, &a, ahead, 0), SK_KAFKA_FENCED_MEMBER_EPOCH);
    /* Unknown member, unknown group. */
    mst x = {.id = "zz", .epoch = 3};
    assert_int_equal(beat(cg, &x, PLAIN, 0), SK_KAFKA_UNKNOWN_MEMBER_ID);
    hb leave = {.nsubs = -1, .use_override = true, .epoch_override = -1};
    assert_int_equal(beat(cg, &x, leave, 0), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sk_cg_destroy(cg);
    /* A group the coordinator does not know. */
    cg = new_cg(NULL, 0);
    assert_int_equal(beat(cg, &x, PLAIN, 0), SK_KAFKA_GROUP_ID_NOT_FOUND);
    assert_int_equal(beat(cg, &x, leave, 0), SK_KAFKA_GROUP_ID_NOT_FOUND);
    sk_cg_destroy(cg);
}

static void test_request_checks(void **st)
{
    (void)st;
    set_topics(2, 0);
    sk_cg *cg = new_cg(NULL, 1);
    mst a = {.id = ""};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), SK_KAFKA_INVALID_REQUEST);
    assert_string_equal(last.message, "MemberId can't be empty.");
    mst b = {.id = "m1"};
    assert_int_equal(beat(cg, &b, PLAIN, 0), SK_KAFKA_INVALID_REQUEST);
    hb bad_epoch = {.nsubs = -1, .use_override = true, .epoch_override = -3};
    assert_int_equal(beat(cg, &b, bad_epoch, 0), SK_KAFKA_INVALID_REQUEST);
    assert_string_equal(last.message, "MemberEpoch is invalid.");
    hb sleave = {.nsubs = -1, .use_override = true, .epoch_override = -2};
    assert_int_equal(beat(cg, &b, sleave, 0), SK_KAFKA_INVALID_REQUEST);
    hb unknown_assignor = {.subs = {"a"}, .nsubs = 1, .assignor = "sticky"};
    assert_int_equal(beat(cg, &b, unknown_assignor, 0), SK_KAFKA_UNSUPPORTED_ASSIGNOR);
    hb bad_re = {.nsubs = -1, .regex = "a("};
    assert_int_equal(beat(cg, &b, bad_re, 0), SK_KAFKA_INVALID_REGULAR_EXPRESSION);
    /* Patterns that would stall the loop. */
    static const char *const costly[] = {"(a)\\1", "(a{1000}){1000}", "a{2,300}", "x{0,99999}"};
    for (size_t i = 0; i < sizeof costly / sizeof costly[0]; i++) {
        hb c_re = {.nsubs = -1, .regex = costly[i]};
        assert_int_equal(beat(cg, &b, c_re, 0), SK_KAFKA_INVALID_REGULAR_EXPRESSION);
    }
    hb fine_re = {.subs = {"a"}, .nsubs = 1, .regex = "t,300|b{1,3}"};
    mst d = {.id = "m9"};
    assert_int_equal(beat(cg, &d, fine_re, 0), 0);
    hb leave9 = {.nsubs = -1, .use_override = true, .epoch_override = -1};
    assert_int_equal(beat(cg, &d, leave9, 0), 0);
    /* group.consumer.max.size = 1 */
    assert_int_equal(beat(cg, &b, JOIN_A, 0), 0);
    mst c = {.id = "m2"};
    assert_int_equal(beat(cg, &c, JOIN_A, 0), SK_KAFKA_GROUP_MAX_SIZE_REACHED);
    sk_cg_destroy(cg);
}

static void test_range_assignor(void **st)
{
    (void)st;
    set_topics(3, 3);
    sk_cg *cg = new_cg("range,uniform", 0);
    hb both = {.subs = {"a", "b"}, .nsubs = 2};
    mst a = {.id = "m1"}, b = {.id = "m2"};
    assert_int_equal(beat(cg, &a, both, 0), 0);
    assert_int_equal(beat(cg, &b, both, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0);
    assert_int_equal(beat(cg, &a, ACK, 0), 0);
    assert_int_equal(beat(cg, &b, PLAIN, 0), 0);
    assert_string_equal(sk_cg_group_assignor(sk_cg_find(cg, GROUP, 1)), "range");
    /* Per topic: m1 gets 0 and 1, m2 gets 2. */
    assert_int_equal(a.nowned, 4);
    assert_true(owns(&a, 1, 0) && owns(&a, 1, 1) && owns(&a, 2, 0) && owns(&a, 2, 1));
    assert_int_equal(b.nowned, 2);
    assert_true(owns(&b, 1, 2) && owns(&b, 2, 2));
    sk_cg_destroy(cg);
}

static void test_uniform_assignor_balance_and_regex(void **st)
{
    (void)st;
    set_topics(3, 3);
    sk_cg *cg = new_cg(NULL, 0);
    hb re = {.nsubs = -1, .regex = "a|b"};
    hb ra = {.subs = {"a"}, .nsubs = 1, .assignor = "uniform"};
    mst a = {.id = "m1"}, b = {.id = "m2"}, c = {.id = "m3"};
    assert_int_equal(beat(cg, &a, re, 0), 0);
    assert_int_equal(a.nowned, 6);
    assert_true(sk_cg_group_subscribes(sk_cg_find(cg, GROUP, 1), "b", 1));
    assert_int_equal(beat(cg, &b, re, 0), 0);
    assert_int_equal(beat(cg, &c, ra, 0), 0);
    for (int round = 0; round < 4; round++) {
        assert_int_equal(beat(cg, &a, ACK, 0), 0);
        assert_int_equal(beat(cg, &b, ACK, 0), 0);
        assert_int_equal(beat(cg, &c, ACK, 0), 0);
    }
    assert_int_equal(a.nowned + b.nowned + c.nowned, 6);
    assert_int_equal(a.nowned, 2);
    assert_int_equal(b.nowned, 2);
    assert_int_equal(c.nowned, 2);
    for (int32_t i = 0; i < c.nowned; i++)
        assert_int_equal(c.owned[i].id.b[15], 1); /* only topic a */
    no_overlap(&a, &b);
    no_overlap(&a, &c);
    no_overlap(&b, &c);
    assert_int_equal(sk_cg_group_state(sk_cg_find(cg, GROUP, 1)), SK_CG_STABLE);
    /* More partitions: a new group epoch and a new target. */
    int32_t e = sk_cg_group_epoch(sk_cg_find(cg, GROUP, 1));
    set_topics(6, 3);
    assert_int_equal(beat(cg, &c, ACK, 0), 0);
    assert_int_equal(sk_cg_group_epoch(sk_cg_find(cg, GROUP, 1)), e + 1);
    sk_cg_destroy(cg);
}

static void test_offset_checks(void **st)
{
    (void)st;
    set_topics(2, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1"};
    sk_cg_tp p0 = {topics[0].id, 0, 0}, p1 = {topics[0].id, 1, 0};
    assert_int_equal(sk_cg_check_commit(NULL, S(""), -1, 9, &p0), 0);
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    sk_cg_group *g = sk_cg_find(cg, GROUP, 1);
    assert_int_equal(sk_cg_check_commit(g, S("m1"), 1, 9, &p0), 0);
    assert_int_equal(sk_cg_check_commit(g, S("m1"), 0, 9, &p0), SK_KAFKA_STALE_MEMBER_EPOCH);
    assert_int_equal(sk_cg_check_commit(g, S("m1"), 2, 9, &p0), SK_KAFKA_STALE_MEMBER_EPOCH);
    assert_int_equal(sk_cg_check_commit(g, S("m1"), 1, 8, &p0), SK_KAFKA_UNSUPPORTED_VERSION);
    assert_int_equal(sk_cg_check_commit(g, S("zz"), 1, 9, &p0), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(sk_cg_check_commit(g, S(""), -1, 9, &p0), SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* A second member: m1 keeps p0 (held since epoch 1) and gives p1 up;
     * after its acknowledgement (epoch 2), a commit still at epoch 1 is
     * accepted for p0 only. */
    mst b = {.id = "m2"};
    assert_int_equal(beat(cg, &b, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0);
    assert_int_equal(beat(cg, &a, ACK, 0), 0);
    assert_int_equal(a.epoch, 2);
    const sk_cg_tp *kept = &a.owned[0];
    const sk_cg_tp *gone = kept->part == 0 ? &p1 : &p0;
    assert_int_equal(sk_cg_check_commit(g, S("m1"), 1, 9, kept), 0);
    assert_int_equal(sk_cg_check_commit(g, S("m1"), 1, 9, gone), SK_KAFKA_STALE_MEMBER_EPOCH);
    assert_int_equal(sk_cg_check_fetch(g, S(NULL), -1), 0);
    assert_int_equal(sk_cg_check_fetch(g, S("m1"), 2), 0);
    assert_int_equal(sk_cg_check_fetch(g, S("m1"), 3), SK_KAFKA_STALE_MEMBER_EPOCH);
    assert_int_equal(sk_cg_check_fetch(g, S("zz"), 1), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sk_cg_destroy(cg);
}

/* The state written to the log comes back the same: members go on with
 * their epochs and assignments; a truncated blob is refused. */
static void test_export_import(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst a = {.id = "m1", .instance = "i1"}, b = {.id = "m2"};
    hb re = {.nsubs = -1, .regex = "a"};
    assert_int_equal(beat(cg, &a, JOIN_A, 0), 0);
    assert_int_equal(beat(cg, &b, re, 0), 0);
    assert_int_equal(beat(cg, &a, PLAIN, 0), 0); /* a is revoking now */
    sk_cg_group *g = sk_cg_find(cg, GROUP, 1);
    assert_true(sk_cg_take_dirty(g));
    assert_false(sk_cg_take_dirty(g));
    sk_buf blob;
    sk_buf_init(&blob, 0);
    sk_cg_export(g, &blob);
    assert_false(sk_buf_failed(&blob));

    sk_cg *cg2 = new_cg(NULL, 0);
    assert_int_equal(sk_cg_import(cg2, GROUP, 1, blob.data, blob.len - 1, 1000), SK_ERR_CORRUPT);
    assert_null(sk_cg_find(cg2, GROUP, 1));
    assert_int_equal(sk_cg_import(cg2, GROUP, 1, blob.data, blob.len, 1000), 0);
    sk_cg_group *g2 = sk_cg_find(cg2, GROUP, 1);
    assert_non_null(g2);
    assert_int_equal(sk_cg_group_epoch(g2), sk_cg_group_epoch(g));
    assert_int_equal(sk_cg_assignment_epoch(g2), sk_cg_assignment_epoch(g));
    assert_int_equal(sk_cg_group_nmembers(g2), 2);
    assert_int_equal(sk_cg_group_state(g2), sk_cg_group_state(g));
    for (int i = 0; i < 2; i++) {
        sk_cg_member_view v1, v2;
        sk_cg_group_member(g, i, &v1);
        sk_cg_group_member(g2, i, &v2);
        assert_string_equal(v1.member_id, v2.member_id);
        assert_int_equal(v1.member_epoch, v2.member_epoch);
        assert_int_equal(v1.nassigned, v2.nassigned);
        assert_int_equal(v1.ntarget, v2.ntarget);
        assert_memory_equal(v1.assigned, v2.assigned, (size_t)v1.nassigned * sizeof *v1.assigned);
        assert_true((v1.regex == NULL) == (v2.regex == NULL));
        assert_true((v1.instance_id == NULL) == (v2.instance_id == NULL));
    }
    /* Both go on where they were: a acknowledges, b gets its partitions. */
    assert_int_equal(beat(cg2, &a, ACK, 2000), 0);
    assert_int_equal(beat(cg2, &b, PLAIN, 2000), 0);
    assert_int_equal(a.nowned + b.nowned, 4);
    no_overlap(&a, &b);
    /* Sessions restart at the import. */
    assert_int_equal(sk_cg_tick(cg2, 1000 + SESSION - 1), 0);
    sk_buf_free(&blob);
    sk_cg_destroy(cg2);
    sk_cg_destroy(cg);
}

/* ---- classic members (mixed groups) ---- */

static const sk_cg_proto RANGE_PROTO[] = {{{"range", 5}, {(const uint8_t *)"\0\1md", 4}}};

/* A classic member's JoinGroup; `m` owns what its SyncGroup gave it. */
static sk_cg_classic_result cjoin(sk_cg *cg, mst *m, const char *ptype, int64_t now)
{
    kc_str subs[1] = {S("a")};
    sk_cg_classic_args a = {0};
    a.group_id = S(GROUP);
    a.member_id = S(m->id);
    a.instance_id = S(m->instance);
    a.client_id = S("cli");
    a.client_host = S("/127.0.0.1");
    a.rack_id = S(NULL);
    a.protocol_type = S(ptype);
    a.session_ms = 10000;
    a.rebalance_ms = 30000;
    a.nprotocols = 1;
    a.protocols = RANGE_PROTO;
    a.nsubs = 1;
    a.subs = subs;
    a.nowned = m->nowned;
    a.owned = m->owned;
    sk_cg_classic_result r;
    sk_cg_classic_join(cg, &a, topics, ntopics, now, &r);
    if (r.error == 0)
        m->epoch = r.generation;
    return r;
}

static int16_t csync(sk_cg *cg, mst *m, int64_t now)
{
    sk_cg_classic_sync_args a = {S(m->id), S(m->instance), m->epoch, S("consumer"), S("range")};
    sk_cg_classic_sync_result r;
    int16_t err = sk_cg_classic_sync(cg, sk_cg_find(cg, GROUP, 1), &a, now, &r);
    if (err == 0) {
        assert_string_equal(r.protocol_name, "range");
        assert_int_equal(r.metadata_len, 4);
        m->nowned = r.nassigned;
        memcpy(m->owned, r.assigned, (size_t)r.nassigned * sizeof *m->owned);
    }
    return err;
}

static int16_t cbeat(sk_cg *cg, mst *m, int64_t now)
{
    return sk_cg_classic_heartbeat(sk_cg_find(cg, GROUP, 1), S(m->id), S(m->instance), m->epoch,
                                   now);
}

/* A classic member joins a consumer group: it is driven by rebalances,
 * gets its share from the server-side assignor, never a partition the
 * consumer member still holds, and commits with its generation. */
static void test_classic_member_in_consumer_group(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst k = {.id = "k1"}, c = {.id = "c1"};
    assert_int_equal(beat(cg, &k, JOIN_A, 0), 0);
    assert_int_equal(k.nowned, 4);
    assert_int_equal(cjoin(cg, &c, "other", 10).error, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
    sk_cg_classic_result r = cjoin(cg, &c, "consumer", 10);
    assert_int_equal(r.error, 0);
    assert_string_equal(r.member_id, "c1");
    assert_string_equal(r.protocol_name, "range");
    assert_int_equal(r.generation, 2);
    /* Everything is still k's: c gets nothing yet. */
    assert_int_equal(csync(cg, &c, 20), 0);
    assert_int_equal(c.nowned, 0);
    assert_int_equal(cbeat(cg, &c, 30), 0);
    /* k gives two up; then c is told to rejoin, and gets them. */
    assert_int_equal(beat(cg, &k, PLAIN, 40), 0);
    assert_int_equal(beat(cg, &k, ACK, 50), 0);
    assert_int_equal(k.nowned, 2);
    assert_int_equal(cbeat(cg, &c, 60), SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(cjoin(cg, &c, "consumer", 70).error, 0);
    assert_int_equal(csync(cg, &c, 80), 0);
    assert_int_equal(c.nowned, 2);
    no_overlap(&k, &c);
    assert_int_equal(cbeat(cg, &c, 90), 0);
    sk_cg_group *g = sk_cg_find(cg, GROUP, 1);
    assert_int_equal(sk_cg_group_state(g), SK_CG_STABLE);
    sk_cg_member_view v;
    for (int i = 0; i < 2; i++) {
        sk_cg_group_member(g, i, &v);
        assert_int_equal(v.classic, strcmp(v.member_id, "c1") == 0);
    }
    /* Fencing: a wrong generation, a consumer heartbeat with its id. */
    mst wrong = c;
    wrong.epoch = c.epoch + 1;
    assert_int_equal(cbeat(cg, &wrong, 95), SK_KAFKA_ILLEGAL_GENERATION);
    assert_int_equal(beat(cg, &c, PLAIN, 95), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(sk_cg_check_commit(g, S("c1"), c.epoch, 8, &c.owned[0]), 0);
    assert_int_equal(sk_cg_check_commit(g, S("c1"), c.epoch - 1, 8, &c.owned[0]),
                     SK_KAFKA_ILLEGAL_GENERATION);
    assert_int_equal(sk_cg_check_fetch(g, S("c1"), c.epoch + 1), SK_KAFKA_ILLEGAL_GENERATION);
    /* Its session is the one of its JoinGroup. */
    assert_int_equal(beat(cg, &k, PLAIN, 9000), 0);
    assert_int_equal(sk_cg_tick(cg, 9000 + 1500), 1);
    assert_int_equal(sk_cg_group_nmembers(g), 1);
    sk_cg_destroy(cg);
}

/* Online upgrade: the classic group's members keep their partitions at its
 * generation; a consumer member joining moves the group on; the classic
 * members leave with LeaveGroup; all of it survives export and import. */
static void test_adopt_classic_then_leave(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    kc_str subs[1] = {S("a")};
    sk_cg_tp p01[2] = {{topics[0].id, 0, 0}, {topics[0].id, 1, 0}};
    sk_cg_tp p23[2] = {{topics[0].id, 2, 0}, {topics[0].id, 3, 0}};
    sk_cg_adopted ms[2] = {0};
    for (int i = 0; i < 2; i++) {
        sk_cg_classic_args *a = &ms[i].member;
        a->group_id = S(GROUP);
        a->member_id = S(i ? "c2" : "c1");
        a->instance_id = S(NULL);
        a->rack_id = S(NULL);
        a->client_id = S("cli");
        a->client_host = S("/h");
        a->protocol_type = S("consumer");
        a->session_ms = 10000;
        a->rebalance_ms = 30000;
        a->nprotocols = 1;
        a->protocols = RANGE_PROTO;
        a->nsubs = 1;
        a->subs = subs;
        a->nowned = -1;
        ms[i].nassigned = 2;
        ms[i].assigned = i ? p23 : p01;
    }
    assert_int_equal(sk_cg_adopt_classic(cg, S(GROUP), 5, 2, ms, 0), 0);
    sk_cg_group *g = sk_cg_find(cg, GROUP, 1);
    assert_int_equal(sk_cg_group_epoch(g), 5);
    assert_int_equal(sk_cg_group_state(g), SK_CG_STABLE);
    assert_true(sk_cg_all_classic(g));
    mst c1 = {.id = "c1", .epoch = 5};
    assert_int_equal(cbeat(cg, &c1, 10), 0);
    assert_int_equal(csync(cg, &c1, 10), 0);
    assert_int_equal(c1.nowned, 2);
    /* A consumer member joins: the classic ones must rejoin. */
    mst k = {.id = "k1"};
    assert_int_equal(beat(cg, &k, JOIN_A, 20), 0);
    assert_false(sk_cg_all_classic(g));
    assert_int_equal(cbeat(cg, &c1, 30), SK_KAFKA_REBALANCE_IN_PROGRESS);
    /* Export and import keep the classic members. */
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_cg_export(g, &b);
    sk_cg *cg2 = new_cg(NULL, 0);
    assert_int_equal(sk_cg_import(cg2, GROUP, 1, b.data, b.len, 40), 0);
    sk_buf_free(&b);
    sk_cg_group *g2 = sk_cg_find(cg2, GROUP, 1);
    int classic = 0;
    for (int i = 0; i < sk_cg_group_nmembers(g2); i++) {
        sk_cg_member_view v;
        sk_cg_group_member(g2, i, &v);
        if (v.classic) {
            classic++;
            assert_int_equal(v.session_ms, 10000);
            assert_int_equal(v.nprotocols, 1);
            assert_int_equal(v.protocols[0].metadata.len, 4);
        }
    }
    assert_int_equal(classic, 2);
    assert_int_equal(cbeat(cg2, &c1, 50), SK_KAFKA_REBALANCE_IN_PROGRESS);
    /* LeaveGroup of classic members; a consumer member's id is refused. */
    assert_int_equal(sk_cg_classic_leave(g2, S("k1"), S(NULL)), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(sk_cg_classic_leave(g2, S("c1"), S(NULL)), 0);
    assert_int_equal(sk_cg_classic_leave(g2, S("c2"), S(NULL)), 0);
    assert_int_equal(sk_cg_group_nmembers(g2), 1);
    assert_false(sk_cg_all_classic(g2));
    sk_cg_destroy(cg2);
    sk_cg_destroy(cg);
}

/* Kafka's join timeout: a classic member told to rejoin that keeps
 * heartbeating without rejoining is removed after its rebalance timeout;
 * one that joined and never syncs too. */
static void test_classic_join_and_sync_timeouts(void **st)
{
    (void)st;
    set_topics(4, 0);
    sk_cg *cg = new_cg(NULL, 0);
    mst k = {.id = "k1"}, c = {.id = "c1"}, d = {.id = "d1"};
    assert_int_equal(beat(cg, &k, JOIN_A, 0), 0);
    assert_int_equal(cjoin(cg, &c, "consumer", 0).error, 0);
    assert_int_equal(csync(cg, &c, 0), 0);
    assert_int_equal(cjoin(cg, &d, "consumer", 0).error, 0); /* never syncs */
    sk_cg_group *g = sk_cg_find(cg, GROUP, 1);
    for (int64_t t = 1000; t <= 29000; t += 7000) {
        assert_int_equal(beat(cg, &k, ACK, t), 0);
        assert_int_equal(cbeat(cg, &c, t), SK_KAFKA_REBALANCE_IN_PROGRESS);
        int16_t e = cbeat(cg, &d, t); /* alive, whatever it is told */
        assert_true(e == 0 || e == SK_KAFKA_REBALANCE_IN_PROGRESS);
    }
    assert_int_equal(sk_cg_tick(cg, 29500), 0);
    assert_int_equal(sk_cg_tick(cg, 30000), 1); /* d: no SyncGroup in 30 s */
    assert_int_equal(sk_cg_tick(cg, 31001), 1); /* c: told at 1000, never rejoined */
    assert_int_equal(sk_cg_group_nmembers(g), 1);
    sk_cg_destroy(cg);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_member_gets_everything),
        cmocka_unit_test(test_revocation_before_assignment),
        cmocka_unit_test(test_leave_gives_partitions_back),
        cmocka_unit_test(test_session_expiry),
        cmocka_unit_test(test_revocation_timeout),
        cmocka_unit_test(test_static_member_rejoins),
        cmocka_unit_test(test_fencing),
        cmocka_unit_test(test_request_checks),
        cmocka_unit_test(test_range_assignor),
        cmocka_unit_test(test_uniform_assignor_balance_and_regex),
        cmocka_unit_test(test_offset_checks),
        cmocka_unit_test(test_export_import),
        cmocka_unit_test(test_classic_member_in_consumer_group),
        cmocka_unit_test(test_adopt_classic_then_leave),
        cmocka_unit_test(test_classic_join_and_sync_timeouts),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
