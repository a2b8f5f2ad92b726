/* gcoord, the classic group protocol as a state machine, driven with fake
 * time: joins (two-step, static), the initial rebalance delay, rebalance and
 * session timeouts, leader election and protocol votes, SyncGroup, heartbeats
 * and leaves in every state, and the OffsetCommit checks. The expected codes
 * are Apache Kafka 4.3.1's (the integration tests test_4001/4002 check the
 * same paths on the wire against it). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "gcoord.h"
#include "sk_err.h"

/* ---- recorded answers ---- */

typedef struct jslot {
    int calls;
    int16_t error;
    int32_t generation;
    char member[128], leader[128], proto[32], ptype[32];
    int nmembers;
    char members[8][128];
    char metadata[8][32];
} jslot;

typedef struct sslot {
    int calls;
    int16_t error;
    char assignment[64];
    int32_t alen;
} sslot;

static void cpy(char *dst, size_t cap, const char *src)
{
    snprintf(dst, cap, "%s", src ? src : "(null)");
}

static void on_join(void *arg, const sk_gc_join_result *r)
{
    jslot *s = arg;
    s->calls++;
    s->error = r->error;
    s->generation = r->generation;
    cpy(s->member, sizeof s->member, r->member_id);
    cpy(s->leader, sizeof s->leader, r->leader_id);
    cpy(s->proto, sizeof s->proto, r->protocol_name);
    cpy(s->ptype, sizeof s->ptype, r->protocol_type);
    s->nmembers = r->nmembers;
    for (int i = 0; i < r->nmembers && i < 8; i++) {
        cpy(s->members[i], sizeof s->members[i], r->members[i].member_id);
        snprintf(s->metadata[i], sizeof s->metadata[i], "%.*s", (int)r->members[i].metadata_len,
                 (const char *)r->members[i].metadata);
    }
}

static void on_sync(void *arg, const sk_gc_sync_result *r)
{
    sslot *s = arg;
    s->calls++;
    s->error = r->error;
    s->alen = r->assignment_len;
    snprintf(s->assignment, sizeof s->assignment, "%.*s", (int)r->assignment_len,
             (const char *)r->assignment);
}

/* ---- request builders ---- */

static const kc_str NOSTR = {NULL, -1};

static kc_str S(const char *s)
{
    return s ? (kc_str){s, (int32_t)strlen(s)} : NOSTR;
}

#define GROUP "g"
#define SESSION 10000
#define REBALANCE 5000

typedef struct jopts {
    const char *member, *instance, *ptype;
    const char *protos; /* "a,b,c": names; metadata is "<name>-<tag>" */
    const char *tag;
    int32_t session, rebalance;
    bool v4;
} jopts;

static sk_gc_protocol pbuf[8];
static char pnames[8][16], pmeta[8][32];

static void join_o(sk_gc *gc, jslot *s, jopts o, int64_t now)
{
    sk_gc_join_args a = {0};
    a.group_id = S(GROUP);
    a.member_id = S(o.member ? o.member : "");
    a.instance_id = S(o.instance);
    a.client_id = S("cli");
    a.client_host = S("/127.0.0.1");
    a.protocol_type = S(o.ptype ? o.ptype : "consumer");
    a.session_timeout_ms = o.session ? o.session : SESSION;
    a.rebalance_timeout_ms = o.rebalance ? o.rebalance : REBALANCE;
    a.require_known_member = o.v4;
    const char *p = o.protos ? o.protos : "range";
    int n = 0;
    while (*p && n < 8) {
        const char *comma = strchr(p, ',');
        size_t l = comma ? (size_t)(comma - p) : strlen(p);
        snprintf(pnames[n], sizeof pnames[n], "%.*s", (int)l, p);
        snprintf(pmeta[n], sizeof pmeta[n], "%.15s-%.15s", pnames[n], o.tag ? o.tag : "x");
        pbuf[n].name = S(pnames[n]);
        pbuf[n].metadata = (kc_bytes){(const uint8_t *)pmeta[n], (int32_t)strlen(pmeta[n])};
        n++;
        p += l + (comma ? 1 : 0);
    }
    a.nprotocols = n;
    a.protocols = pbuf;
    memset(s, 0, sizeof *s);
    sk_gc_join(gc, &a, now, on_join, s);
}

/* A dynamic v3 join (no two-step) with this member id ("" for a new member). */
static void join(sk_gc *gc, jslot *s, const char *member, int64_t now)
{
    join_o(gc, s, (jopts){.member = member}, now);
}

static void sync_p(sk_gc *gc, sslot *s, const char *member, int32_t gen, int n,
                   const char *const *ids, const char *const *as, kc_str ptype, kc_str pname,
                   const char *instance, int64_t now)
{
    sk_gc_assignment asg[8];
    for (int i = 0; i < n; i++) {
        asg[i].member_id = S(ids[i]);
        asg[i].assignment = (kc_bytes){(const uint8_t *)as[i], (int32_t)strlen(as[i])};
    }
    sk_gc_sync_args a = {0};
    a.group_id = S(GROUP);
    a.member_id = S(member);
    a.instance_id = S(instance);
    a.generation = gen;
    a.protocol_type = ptype;
    a.protocol_name = pname;
    a.nassignments = n;
    a.assignments = asg;
    memset(s, 0, sizeof *s);
    sk_gc_sync(gc, &a, now, on_sync, s);
}

static void sync_(sk_gc *gc, sslot *s, const char *member, int32_t gen, int n,
                  const char *const *ids, const char *const *as, int64_t now)
{
    sync_p(gc, s, member, gen, n, ids, as, NOSTR, NOSTR, NULL, now);
}

static int16_t hb(sk_gc *gc, const char *member, int32_t gen, int64_t now)
{
    return sk_gc_heartbeat(gc, S(GROUP), S(member), NOSTR, gen, now);
}

static int16_t hb_i(sk_gc *gc, const char *member, const char *inst, int32_t gen, int64_t now)
{
    return sk_gc_heartbeat(gc, S(GROUP), S(member), S(inst), gen, now);
}

static int16_t commit(sk_gc *gc, const char *member, const char *inst, int32_t gen, int16_t v)
{
    return sk_gc_check_commit(gc, S(GROUP), S(member), S(inst), gen, v);
}

static sk_gc_state state(sk_gc *gc)
{
    sk_gc_group *g = sk_gc_find(gc, GROUP, strlen(GROUP));
    return g ? sk_gc_group_state(g) : SK_GC_DEAD;
}

static int32_t generation(sk_gc *gc)
{
    return sk_gc_group_generation(sk_gc_find(gc, GROUP, strlen(GROUP)));
}

static sk_gc *gc_new(int32_t delay)
{
    sk_gc_config cfg = {1000, 60000, delay};
    sk_gc *gc = sk_gc_new(&cfg);
    assert_non_null(gc);
    return gc;
}

/* A Stable group of n dynamic members joined at `now` (delay 0); ids out. */
static void stable_group(sk_gc *gc, int n, char ids[][128], int64_t now)
{
    jslot j[8];
    for (int i = 0; i < n; i++) {
        join(gc, &j[i], "", now);
        assert_int_equal(j[i].calls, 0);
    }
    sk_gc_tick(gc, now);
    const char *mids[8], *as[8];
    static char abuf[8][16];
    for (int i = 0; i < n; i++) {
        assert_int_equal(j[i].calls, 1);
        assert_int_equal(j[i].error, 0);
        strcpy(ids[i], j[i].member);
        mids[i] = ids[i];
        snprintf(abuf[i], sizeof abuf[i], "as-%d", i);
        as[i] = abuf[i];
    }
    int32_t gen = j[0].generation;
    sslot s[8];
    for (int i = 1; i < n; i++)
        sync_(gc, &s[i], ids[i], gen, 0, NULL, NULL, now);
    sync_(gc, &s[0], ids[0], gen, n, mids, as, now);
    for (int i = 0; i < n; i++) {
        assert_int_equal(s[i].calls, 1);
        assert_int_equal(s[i].error, 0);
        assert_string_equal(s[i].assignment, abuf[i]);
    }
    assert_int_equal(state(gc), SK_GC_STABLE);
}

/* ---- tests ---- */

static void test_two_step_join(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    jslot j, j2;
    join_o(gc, &j, (jopts){.v4 = true}, 0);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.error, SK_KAFKA_MEMBER_ID_REQUIRED);
    assert_int_equal(j.generation, -1);
    assert_memory_equal(j.member, "cli-", 4);
    char id[128];
    strcpy(id, j.member);
    /* A pending id is not a member: it cannot heartbeat. */
    assert_int_equal(hb(gc, id, 0, 1), SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* Each retry of the first step gets another id. */
    join_o(gc, &j2, (jopts){.v4 = true}, 2);
    assert_int_equal(j2.error, SK_KAFKA_MEMBER_ID_REQUIRED);
    assert_string_not_equal(j2.member, id);
    /* Step two: the member joins with its id; the rebalance ends at the tick. */
    join_o(gc, &j, (jopts){.member = id, .v4 = true}, 10);
    assert_int_equal(j.calls, 0);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    /* The other pending id has not come back: it holds the join until it
     * expires (its session timeout), or until the rebalance deadline. */
    sk_gc_tick(gc, 10);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.error, 0);
    assert_int_equal(j.generation, 1);
    assert_string_equal(j.member, id);
    assert_string_equal(j.leader, id);
    assert_string_equal(j.proto, "range");
    assert_string_equal(j.ptype, "consumer");
    assert_int_equal(j.nmembers, 1);
    assert_string_equal(j.metadata[0], "range-x");
    /* The expired pending id is refused. */
    sk_gc_tick(gc, 2 + SESSION);
    join_o(gc, &j, (jopts){.member = j2.member, .v4 = true}, 3 + SESSION);
    assert_int_equal(j.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* v0-v3: admitted in one step. */
    join(gc, &j, "", 4 + SESSION);
    assert_int_equal(j.calls, 0);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    sk_gc_destroy(gc, SK_KAFKA_COORDINATOR_NOT_AVAILABLE);
    assert_int_equal(j.calls, 1);
    assert_int_equal(j.error, SK_KAFKA_COORDINATOR_NOT_AVAILABLE);
}

static void test_pending_member_blocks_until_it_joins(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    char ids[2][128];
    stable_group(gc, 1, ids, 0);
    jslot p, j1, jp;
    join_o(gc, &p, (jopts){.v4 = true}, 100);
    assert_int_equal(p.error, SK_KAFKA_MEMBER_ID_REQUIRED);
    /* The leader rejoins: the pending member is awaited. */
    join(gc, &j1, ids[0], 100);
    assert_int_equal(j1.calls, 0);
    join_o(gc, &jp, (jopts){.member = p.member, .v4 = true}, 200);
    assert_int_equal(j1.calls, 1);
    assert_int_equal(jp.calls, 1);
    assert_int_equal(j1.nmembers, 2);
    assert_int_equal(jp.nmembers, 0);
    assert_string_equal(jp.leader, ids[0]);
    assert_int_equal(jp.generation, 2);
    sk_gc_destroy(gc, 0);
}

static void test_initial_rebalance_delay(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(3000);
    jslot a, b, c;
    join_o(gc, &a, (jopts){.rebalance = 10000}, 0);
    join_o(gc, &b, (jopts){.rebalance = 10000}, 2000);
    /* Each newcomer buys another delay: 2000 + 3000. */
    assert_true(sk_gc_tick(gc, 4999) <= 5000);
    assert_int_equal(a.calls + b.calls, 0);
    sk_gc_tick(gc, 5000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(a.generation, 1);
    assert_string_equal(a.leader, a.member); /* the first joiner leads */
    assert_int_equal(a.nmembers, 2);
    sk_gc_destroy(gc, 0);

    /* The delays never go past a joiner's rebalance timeout: here the first
     * one's (0 + 4000), before the second's delay (2500 + 3000) is over. */
    gc = gc_new(3000);
    join_o(gc, &a, (jopts){.rebalance = 4000}, 0);
    join_o(gc, &b, (jopts){.rebalance = 1000}, 2500);
    sk_gc_tick(gc, 3999);
    assert_int_equal(a.calls, 0);
    sk_gc_tick(gc, 4000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    /* A later rebalance of the non-empty group is not delayed. */
    sslot s1, s2;
    const char *ids[] = {a.member, b.member}, *as[] = {"1", "2"};
    sync_(gc, &s2, b.member, 1, 0, NULL, NULL, 4001);
    sync_(gc, &s1, a.member, 1, 2, ids, as, 4001);
    jslot a2, b2;
    join(gc, &c, "", 5000);
    join(gc, &a2, a.member, 5001);
    join(gc, &b2, b.member, 5002);
    assert_int_equal(c.calls, 1);
    assert_int_equal(c.generation, 2);
    sk_gc_destroy(gc, 0);
}

static void test_rebalance_completes_when_all_rejoined(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    char ids[2][128];
    stable_group(gc, 2, ids, 0);
    jslot c, a, b;
    join(gc, &c, "", 100);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    assert_int_equal(hb(gc, ids[0], 1, 101), SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(hb(gc, ids[1], 0, 101), SK_KAFKA_ILLEGAL_GENERATION);
    join(gc, &a, ids[0], 200);
    assert_int_equal(c.calls + a.calls, 0);
    join(gc, &b, ids[1], 300);
    assert_int_equal(c.calls, 1);
    assert_int_equal(a.calls, 1);
    assert_int_equal(b.calls, 1);
    assert_int_equal(a.generation, 2);
    assert_string_equal(c.leader, ids[0]); /* the leader stays */
    assert_int_equal(a.nmembers, 3);
    assert_int_equal(b.nmembers + c.nmembers, 0);
    assert_int_equal(state(gc), SK_GC_COMPLETING);
    /* A retried join of a waiting member: the newer request wins. */
    jslot c2, c3;
    sslot s;
    const char *mids[] = {ids[0], ids[1], c.member}, *as[] = {"0", "1", "2"};
    sync_(gc, &s, ids[0], 2, 3, mids, as, 301);
    join(gc, &c2, "", 400); /* a fourth member */
    join(gc, &c3, c.member, 401);
    join(gc, &a, ids[0], 402);
    jslot c4;
    join(gc, &c4, c.member, 403); /* retry of c3 */
    assert_int_equal(c3.calls, 1);
    assert_int_equal(c3.error, SK_KAFKA_REBALANCE_IN_PROGRESS);
    join(gc, &b, ids[1], 404);
    assert_int_equal(c4.calls, 1);
    assert_int_equal(c4.error, 0);
    assert_int_equal(c4.generation, 3);
    sk_gc_destroy(gc, 0);
}

static void test_rebalance_timeout_removes_members(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    char ids[2][128];
    stable_group(gc, 2, ids, 0);
    jslot c, a;
    join(gc, &c, "", 1000); /* the rebalance timeout is the largest: 5000 */
    join(gc, &a, ids[0], 1100);
    int64_t next = sk_gc_tick(gc, 5999);
    assert_true(next <= 6000);
    assert_int_equal(a.calls, 0);
    sk_gc_tick(gc, 6000);
    assert_int_equal(a.calls, 1);
    assert_int_equal(c.calls, 1);
    assert_int_equal(a.nmembers, 2);
    assert_int_equal(hb(gc, ids[1], 1, 6001), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(commit(gc, ids[1], NULL, 1, 7), SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* No member rejoins at all: the group ends Empty. */
    sslot s;
    const char *mids[] = {ids[0], c.member}, *as[] = {"0", "1"};
    sync_(gc, &s, ids[0], 2, 2, mids, as, 6002);
    jslot d;
    join(gc, &d, "", 7000);
    sk_gc_tick(gc, 12000);
    assert_int_equal(d.calls, 1);
    assert_int_equal(d.nmembers, 1); /* the newcomer leads alone */
    assert_string_equal(d.leader, d.member);
    sk_gc_destroy(gc, 0);
}

static void test_session_timeout(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    char ids[2][128];
    stable_group(gc, 2, ids, 0);
    /* ids[0] heartbeats, ids[1] is silent. */
    assert_int_equal(hb(gc, ids[0], 1, 6000), 0);
    sk_gc_tick(gc, SESSION - 1);
    assert_int_equal(state(gc), SK_GC_STABLE);
    int64_t next = sk_gc_tick(gc, SESSION);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    assert_true(next <= SESSION + REBALANCE);
    assert_int_equal(hb(gc, ids[1], 1, SESSION + 1), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(hb(gc, ids[0], 1, SESSION + 1), SK_KAFKA_REBALANCE_IN_PROGRESS);
    jslot a;
    join(gc, &a, ids[0], SESSION + 2);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.nmembers, 1);
    assert_int_equal(a.generation, 2);
    sk_gc_destroy(gc, 0);

    /* A member waiting for its join answer does not expire, however long the
     * rebalance lasts; one that does not rejoin expires by its session. */
    gc = gc_new(0);
    jslot x, y, z, x2;
    join_o(gc, &x, (jopts){.rebalance = 50000}, 0);
    join_o(gc, &y, (jopts){.rebalance = 50000}, 0);
    sk_gc_tick(gc, 0);
    sslot sx, sy;
    const char *ids2[] = {x.member, y.member}, *as2[] = {"x", "y"};
    sync_(gc, &sy, y.member, 1, 0, NULL, NULL, 0);
    sync_(gc, &sx, x.member, 1, 2, ids2, as2, 0);
    join_o(gc, &z, (jopts){.rebalance = 50000}, 100);
    join_o(gc, &x2, (jopts){.member = x.member, .rebalance = 50000}, 200);
    sk_gc_tick(gc, SESSION - 1);
    assert_int_equal(x2.calls + z.calls, 0);
    sk_gc_tick(gc, SESSION + 1000); /* y's session is over, x and z wait */
    assert_int_equal(x2.calls, 1);
    assert_int_equal(z.calls, 1);
    assert_int_equal(x2.error, 0);
    assert_int_equal(x2.nmembers, 2);
    assert_int_equal(x2.generation, 2);
    /* A follower waiting for the leader's assignment does not expire either;
     * the leader that never syncs does, which ends the wait with
     * REBALANCE_IN_PROGRESS. */
    sslot sz;
    sync_(gc, &sz, z.member, 2, 0, NULL, NULL, SESSION + 1001);
    sk_gc_tick(gc, 2 * SESSION + 999);
    assert_int_equal(sz.calls, 0);
    sk_gc_tick(gc, 2 * SESSION + 1000);
    assert_int_equal(sz.calls, 1);
    assert_int_equal(sz.error, SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(hb(gc, z.member, 2, 2 * SESSION + 1001), SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(hb(gc, x.member, 2, 2 * SESSION + 1001), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sk_gc_destroy(gc, 0);
}

static void test_leader_and_protocol_votes(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    jslot a, b, c;
    join_o(gc, &a, (jopts){.protos = "a,b,c", .tag = "A"}, 0);
    join_o(gc, &b, (jopts){.protos = "b,c,a", .tag = "B"}, 0);
    join_o(gc, &c, (jopts){.protos = "c,b", .tag = "C"}, 0);
    sk_gc_tick(gc, 0);
    /* Candidates b and c (every member has them); votes: A b, B b, C c. */
    assert_string_equal(a.proto, "b");
    assert_string_equal(c.proto, "b");
    assert_string_equal(a.leader, a.member);
    assert_int_equal(a.nmembers, 3);
    for (int i = 0; i < 3; i++) {
        const char *want = strcmp(a.members[i], a.member) == 0   ? "b-A"
                           : strcmp(a.members[i], b.member) == 0 ? "b-B"
                                                                 : "b-C";
        assert_string_equal(a.metadata[i], want);
    }
    sk_gc_group *g = sk_gc_find(gc, GROUP, 1);
    assert_string_equal(sk_gc_group_protocol_name(g), "b");
    /* A joiner with no protocol in common, or another type, is refused. */
    jslot x;
    join_o(gc, &x, (jopts){.protos = "a"}, 1);
    assert_int_equal(x.error, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
    join_o(gc, &x, (jopts){.protos = "b", .ptype = "connect"}, 1);
    assert_int_equal(x.error, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
    /* The leader leaves: the next generation's leader is a remaining member. */
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(a.member), NOSTR, 2), 0);
    jslot b2, c2;
    join_o(gc, &b2, (jopts){.member = b.member, .protos = "b,c,a", .tag = "B"}, 3);
    join_o(gc, &c2, (jopts){.member = c.member, .protos = "c,b", .tag = "C"}, 3);
    assert_int_equal(b2.calls, 1);
    assert_true(strcmp(b2.leader, b.member) == 0 || strcmp(b2.leader, c.member) == 0);
    assert_int_equal(b2.generation, 2);
    sk_gc_destroy(gc, 0);
}

static void test_sync(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    jslot a, b, c;
    join(gc, &a, "", 0);
    join(gc, &b, "", 0);
    join(gc, &c, "", 0);
    sk_gc_tick(gc, 0);
    const char *leader = a.member;
    sslot sb, sc, sa, x;
    /* Followers wait for the leader. */
    sync_(gc, &sb, b.member, 1, 0, NULL, NULL, 1);
    sync_(gc, &sc, c.member, 1, 0, NULL, NULL, 1);
    assert_int_equal(sb.calls + sc.calls, 0);
    /* Errors while they wait. */
    sync_(gc, &x, b.member, 2, 0, NULL, NULL, 1);
    assert_int_equal(x.error, SK_KAFKA_ILLEGAL_GENERATION);
    sync_(gc, &x, "nobody", 1, 0, NULL, NULL, 1);
    assert_int_equal(x.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    sync_p(gc, &x, b.member, 1, 0, NULL, NULL, S("consumer"), S("roundrobin"), NULL, 1);
    assert_int_equal(x.error, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
    sync_p(gc, &x, b.member, 1, 0, NULL, NULL, S("connect"), S("range"), NULL, 1);
    assert_int_equal(x.error, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
    assert_int_equal(sb.calls, 0);
    /* A retried follower sync replaces the first. */
    sslot sb2;
    sync_p(gc, &sb2, b.member, 1, 0, NULL, NULL, S("consumer"), S("range"), NULL, 2);
    assert_int_equal(sb.calls, 1);
    assert_int_equal(sb.error, SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(commit(gc, b.member, NULL, 1, 7), SK_KAFKA_REBALANCE_IN_PROGRESS);
    /* The leader's assignment; c gets none (empty). */
    const char *ids[] = {leader, b.member, "stranger"}, *as[] = {"AA", "BB", "ZZ"};
    sync_(gc, &sa, leader, 1, 3, ids, as, 3);
    assert_int_equal(sa.calls, 1);
    assert_string_equal(sa.assignment, "AA");
    assert_int_equal(sb2.calls, 1);
    assert_string_equal(sb2.assignment, "BB");
    assert_int_equal(sc.calls, 1);
    assert_int_equal(sc.error, 0);
    assert_int_equal(sc.alen, 0);
    assert_int_equal(state(gc), SK_GC_STABLE);
    /* In Stable, SyncGroup returns the member's assignment again. */
    sync_(gc, &x, b.member, 1, 0, NULL, NULL, 4);
    assert_string_equal(x.assignment, "BB");
    sk_gc_member_view v;
    sk_gc_group *g = sk_gc_find(gc, GROUP, 1);
    int found = 0;
    for (int i = 0; i < sk_gc_group_nmembers(g); i++) {
        sk_gc_group_member(g, i, &v);
        if (strcmp(v.member_id, b.member) == 0) {
            found = 1;
            assert_int_equal(v.assignment_len, 2);
            assert_memory_equal(v.assignment, "BB", 2);
            assert_int_equal(v.metadata_len, 7);
            assert_memory_equal(v.metadata, "range-x", 7);
            assert_string_equal(v.client_id, "cli");
            assert_string_equal(v.client_host, "/127.0.0.1");
            assert_null(v.instance_id);
        }
    }
    assert_true(found);
    /* A rebalance starts: SyncGroup says REBALANCE_IN_PROGRESS; syncs that were
     * waiting in CompletingRebalance are answered with it too. */
    jslot d, a2, b2, c2;
    join(gc, &d, "", 10);
    sync_(gc, &x, b.member, 1, 0, NULL, NULL, 11);
    assert_int_equal(x.error, SK_KAFKA_REBALANCE_IN_PROGRESS);
    join(gc, &a2, a.member, 12);
    join(gc, &b2, b.member, 12);
    join(gc, &c2, c.member, 12);
    assert_int_equal(a2.generation, 2);
    sync_(gc, &sb, b.member, 2, 0, NULL, NULL, 13);
    jslot e;
    join(gc, &e, "", 14);
    assert_int_equal(sb.calls, 1);
    assert_int_equal(sb.error, SK_KAFKA_REBALANCE_IN_PROGRESS);
    sk_gc_destroy(gc, 0);
}

static void test_heartbeat_in_every_state(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    assert_int_equal(sk_gc_heartbeat(gc, S(""), S("m"), NOSTR, 0, 0), SK_KAFKA_INVALID_GROUP_ID);
    assert_int_equal(hb(gc, "m", 0, 0), SK_KAFKA_UNKNOWN_MEMBER_ID); /* no group */
    jslot a;
    join(gc, &a, "", 0);
    sk_gc_tick(gc, 0);
    /* CompletingRebalance. */
    assert_int_equal(hb(gc, a.member, 1, 1), 0);
    assert_int_equal(hb(gc, a.member, 0, 1), SK_KAFKA_ILLEGAL_GENERATION);
    assert_int_equal(hb(gc, "nobody", 1, 1), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sslot s;
    const char *ids[] = {a.member}, *as[] = {"x"};
    sync_(gc, &s, a.member, 1, 1, ids, as, 2);
    /* Stable; a heartbeat keeps the session alive. */
    assert_int_equal(hb(gc, a.member, 1, SESSION - 1), 0);
    sk_gc_tick(gc, SESSION + 100);
    assert_int_equal(state(gc), SK_GC_STABLE);
    assert_int_equal(hb(gc, a.member, 2, SESSION + 100), SK_KAFKA_ILLEGAL_GENERATION);
    /* A static member's heartbeat is judged by its instance id. */
    assert_int_equal(hb_i(gc, a.member, "inst", 1, SESSION + 101), SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* PreparingRebalance: a newcomer waits; the member must rejoin. */
    jslot n;
    join(gc, &n, "", SESSION + 150);
    assert_int_equal(hb(gc, a.member, 1, SESSION + 151), SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(hb(gc, a.member, 0, SESSION + 151), SK_KAFKA_ILLEGAL_GENERATION);
    assert_int_equal(hb(gc, "nobody", 1, SESSION + 151), SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* Empty. */
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(a.member), NOSTR, SESSION + 200), 0);
    assert_int_equal(n.calls, 1); /* the newcomer's rebalance completed alone */
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(n.member), NOSTR, SESSION + 200), 0);
    assert_int_equal(state(gc), SK_GC_EMPTY);
    assert_int_equal(hb(gc, a.member, 1, SESSION + 201), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(hb(gc, a.member, 2, SESSION + 201), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sk_gc_destroy(gc, 0);
}

static void test_leave(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    assert_int_equal(sk_gc_leave(gc, S(""), S("m"), NOSTR, 0), SK_KAFKA_INVALID_GROUP_ID);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S("m"), NOSTR, 0), SK_KAFKA_UNKNOWN_MEMBER_ID);
    char ids[3][128];
    stable_group(gc, 3, ids, 0);
    /* v0: by member id; a rebalance starts for the others. */
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(ids[2]), NOSTR, 10), 0);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(ids[2]), NOSTR, 10), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    /* A member leaving while its join waits: that join is answered UNKNOWN_MEMBER_ID. */
    jslot a;
    join(gc, &a, ids[0], 11);
    assert_int_equal(a.calls, 0);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(ids[0]), NOSTR, 12), 0);
    assert_int_equal(a.calls, 1);
    assert_int_equal(a.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* The last one rejoins: the rebalance completes, with a new leader. */
    jslot b;
    join(gc, &b, ids[1], 13);
    assert_int_equal(b.calls, 1);
    assert_int_equal(b.nmembers, 1);
    assert_string_equal(b.leader, ids[1]);
    /* By instance id (v3+ with an empty member id). */
    jslot s1, b2;
    join_o(gc, &s1, (jopts){.instance = "i1"}, 20);
    join(gc, &b2, ids[1], 21);
    assert_int_equal(s1.calls, 1);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(""), S("i9"), 22), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S("other"), S("i1"), 22), SK_KAFKA_FENCED_INSTANCE_ID);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(""), S("i1"), 22), 0);
    assert_int_equal(sk_gc_group_nmembers(sk_gc_find(gc, GROUP, 1)), 1);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    /* A pending (two-step) member may leave. */
    jslot p;
    join_o(gc, &p, (jopts){.v4 = true}, 30);
    assert_int_equal(p.error, SK_KAFKA_MEMBER_ID_REQUIRED);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(p.member), NOSTR, 31), 0);
    join_o(gc, &p, (jopts){.member = p.member, .v4 = true}, 32);
    assert_int_equal(p.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* The last member rejoins, then leaves: Empty, generation kept. */
    jslot b3;
    join(gc, &b3, ids[1], 40);
    assert_int_equal(b3.calls, 1);
    int32_t gen = generation(gc);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(ids[1]), NOSTR, 41), 0);
    assert_int_equal(state(gc), SK_GC_EMPTY);
    assert_int_equal(generation(gc), gen + 1);
    sk_gc_destroy(gc, 0);
}

static void test_static_member_rejoin(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    jslot s, d;
    join_o(gc, &s, (jopts){.instance = "i1"}, 0);
    join(gc, &d, "", 0);
    sk_gc_tick(gc, 0);
    assert_string_equal(s.leader, s.member);
    char old[128];
    strcpy(old, s.member);
    sslot ss, sd;
    const char *ids[] = {old, d.member}, *as[] = {"S", "D"};
    sync_p(gc, &ss, old, 1, 2, ids, as, NOSTR, NOSTR, "i1", 1);
    sync_(gc, &sd, d.member, 1, 0, NULL, NULL, 1);
    assert_int_equal(state(gc), SK_GC_STABLE);

    /* Restarted with a new member id, same protocols: no rebalance; the former
     * leader is told the old leader id, so that it does not assign again. */
    jslot s2;
    join_o(gc, &s2, (jopts){.instance = "i1", .tag = "changed"}, 100);
    assert_int_equal(s2.calls, 1);
    assert_int_equal(s2.error, 0);
    assert_int_equal(s2.generation, 1);
    assert_string_not_equal(s2.member, old);
    assert_string_equal(s2.leader, old);
    assert_int_equal(s2.nmembers, 0);
    assert_int_equal(state(gc), SK_GC_STABLE);
    sync_p(gc, &ss, s2.member, 1, 0, NULL, NULL, NOSTR, NOSTR, "i1", 101);
    assert_string_equal(ss.assignment, "S");
    /* The old id is fenced everywhere. */
    assert_int_equal(hb_i(gc, old, "i1", 1, 102), SK_KAFKA_FENCED_INSTANCE_ID);
    assert_int_equal(hb_i(gc, s2.member, "i1", 1, 102), 0);
    assert_int_equal(commit(gc, old, "i1", 1, 7), SK_KAFKA_FENCED_INSTANCE_ID);
    jslot x;
    join_o(gc, &x, (jopts){.member = old, .instance = "i1"}, 103);
    assert_int_equal(x.error, SK_KAFKA_FENCED_INSTANCE_ID);
    sync_p(gc, &ss, old, 1, 0, NULL, NULL, NOSTR, NOSTR, "i1", 103);
    assert_int_equal(ss.error, SK_KAFKA_FENCED_INSTANCE_ID);
    /* Its member id with another instance id: fenced too; an unknown instance: unknown. */
    assert_int_equal(hb_i(gc, d.member, "i1", 1, 104), SK_KAFKA_FENCED_INSTANCE_ID);
    assert_int_equal(hb_i(gc, s2.member, "i7", 1, 104), SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* The leader is now the new id: its JoinGroup starts a rebalance. */
    assert_string_equal(s2.leader, old);
    jslot s3, d2;
    join_o(gc, &s3, (jopts){.member = s2.member, .instance = "i1"}, 110);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    join(gc, &d2, d.member, 111);
    assert_int_equal(s3.generation, 2);
    assert_string_equal(s3.leader, s2.member);

    /* A static rejoin while a join waits: the waiting request is fenced, and
     * during CompletingRebalance a rejoin means a new rebalance. */
    jslot s4;
    join_o(gc, &s4, (jopts){.instance = "i1"}, 120);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    assert_int_equal(s4.calls, 0);
    jslot s5;
    join_o(gc, &s5, (jopts){.instance = "i1"}, 121);
    assert_int_equal(s4.calls, 1);
    assert_int_equal(s4.error, SK_KAFKA_FENCED_INSTANCE_ID);
    jslot d3;
    join(gc, &d3, d.member, 122);
    assert_int_equal(s5.calls, 1);
    assert_int_equal(s5.generation, 3);

    /* In Stable, a change of the selected protocol does rebalance. */
    sslot y;
    const char *ids3[] = {s5.member, d.member}, *as3[] = {"S", "D"};
    sync_p(gc, &y, s5.member, 3, 2, ids3, as3, NOSTR, NOSTR, "i1", 123);
    sync_(gc, &y, d.member, 3, 0, NULL, NULL, 123);
    assert_int_equal(state(gc), SK_GC_STABLE);
    jslot s6;
    join_o(gc, &s6, (jopts){.instance = "i1", .protos = "roundrobin,range"}, 130);
    assert_int_equal(s6.calls, 1); /* "range" still wins: d votes it, s6 has it */
    assert_int_equal(state(gc), SK_GC_STABLE);
    sk_gc_destroy(gc, 0);
}

static void test_static_member_kept_through_rebalance(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    jslot s, d;
    join_o(gc, &s, (jopts){.instance = "i1"}, 0); /* the leader */
    join(gc, &d, "", 0);
    sk_gc_tick(gc, 0);
    assert_string_equal(s.leader, s.member);
    sslot x;
    const char *ids[] = {s.member, d.member}, *as[] = {"S", "D"};
    sync_p(gc, &x, s.member, 1, 2, ids, as, NOSTR, NOSTR, "i1", 1);
    /* A newcomer; d rejoins, the static leader does not (it is restarting). */
    jslot n, d2;
    join(gc, &n, "", 100);
    join(gc, &d2, d.member, 100);
    assert_int_equal(d2.calls, 0); /* the static member is awaited */
    sk_gc_tick(gc, 100 + REBALANCE);
    assert_int_equal(d2.calls, 1);
    assert_int_equal(n.calls, 1);
    /* It stays a member; a member that rejoined leads. */
    assert_int_equal(sk_gc_group_nmembers(sk_gc_find(gc, GROUP, 1)), 3);
    assert_string_equal(d2.leader, d.member);
    assert_int_equal(d2.nmembers, 3);
    assert_int_equal(hb_i(gc, s.member, "i1", 1, 101 + REBALANCE), SK_KAFKA_ILLEGAL_GENERATION);
    /* Back, with its member id: the current generation, as a follower. */
    jslot s2;
    join_o(gc, &s2, (jopts){.member = s.member, .instance = "i1"}, 102 + REBALANCE);
    assert_int_equal(s2.calls, 1);
    assert_int_equal(s2.error, 0);
    assert_int_equal(s2.generation, 2);
    assert_string_equal(s2.leader, d.member);
    sk_gc_destroy(gc, 0);

    /* Only static members that did not rejoin: the rebalance waits again;
     * they leave by their session timeout. */
    gc = gc_new(0);
    jslot a, b;
    join_o(gc, &a, (jopts){.instance = "i1"}, 0);
    sk_gc_tick(gc, 0);
    const char *ids2[] = {a.member}, *as2[] = {"A"};
    sync_p(gc, &x, a.member, 1, 1, ids2, as2, NOSTR, NOSTR, "i1", 0);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(a.member), S("i1"), 1), 0);
    join_o(gc, &a, (jopts){.instance = "i1"}, 2);
    sk_gc_tick(gc, 2);
    sync_p(gc, &x, a.member, 3, 1, ids2, as2, NOSTR, NOSTR, "i1", 2);
    join_o(gc, &b, (jopts){.instance = "i2"}, 3);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    sk_gc_leave(gc, S(GROUP), S(""), S("i2"), 4); /* b gives up; a never rejoins */
    sk_gc_tick(gc, 3 + REBALANCE);
    assert_int_equal(state(gc), SK_GC_PREPARING);
    sk_gc_tick(gc, 2 + SESSION);
    assert_int_equal(state(gc), SK_GC_EMPTY);
    sk_gc_destroy(gc, 0);
}

static void test_commit_checks(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    /* Absent group. */
    for (int16_t v = 2; v <= 9; v++) {
        assert_int_equal(commit(gc, "", NULL, -1, v), 0);
        assert_int_equal(commit(gc, "m", NULL, -1, v), 0);
        assert_int_equal(commit(gc, "m", NULL, 3, v),
                         v >= 9 ? SK_KAFKA_GROUP_ID_NOT_FOUND : SK_KAFKA_ILLEGAL_GENERATION);
    }
    assert_int_equal(sk_gc_check_commit(gc, S(""), S(""), NOSTR, -1, 7), 0);
    jslot a;
    join(gc, &a, "", 0);
    /* PreparingRebalance (the first): nobody knows a member id yet. */
    assert_int_equal(commit(gc, "", NULL, -1, 7), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sk_gc_tick(gc, 0);
    /* CompletingRebalance. */
    assert_int_equal(commit(gc, a.member, NULL, 1, 7), SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(commit(gc, a.member, NULL, 0, 7), SK_KAFKA_ILLEGAL_GENERATION);
    assert_int_equal(commit(gc, "nobody", NULL, 1, 7), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(commit(gc, "", NULL, -1, 2), SK_KAFKA_UNKNOWN_MEMBER_ID);
    sslot s;
    const char *ids[] = {a.member}, *as[] = {"x"};
    sync_(gc, &s, a.member, 1, 1, ids, as, 1);
    /* Stable. */
    for (int16_t v = 2; v <= 9; v++) {
        assert_int_equal(commit(gc, a.member, NULL, 1, v), 0);
        assert_int_equal(commit(gc, a.member, NULL, 2, v), SK_KAFKA_ILLEGAL_GENERATION);
        assert_int_equal(commit(gc, "", NULL, -1, v), SK_KAFKA_UNKNOWN_MEMBER_ID);
        assert_int_equal(commit(gc, a.member, NULL, -1, v), SK_KAFKA_ILLEGAL_GENERATION);
        assert_int_equal(commit(gc, a.member, "inst", 1, v), SK_KAFKA_UNKNOWN_MEMBER_ID);
    }
    /* PreparingRebalance: a known member of the current generation may commit. */
    jslot n;
    join(gc, &n, "", 2);
    assert_int_equal(commit(gc, a.member, NULL, 1, 7), 0);
    assert_int_equal(commit(gc, a.member, NULL, 2, 7), SK_KAFKA_ILLEGAL_GENERATION);
    assert_int_equal(commit(gc, "", NULL, -1, 7), SK_KAFKA_UNKNOWN_MEMBER_ID);
    jslot a2;
    join(gc, &a2, a.member, 2);
    assert_int_equal(n.calls, 1);
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(n.member), NOSTR, 2), 0);
    /* Empty: generation -1 may commit (admin tools), nobody else is a member. */
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(a.member), NOSTR, 2), 0);
    for (int16_t v = 2; v <= 9; v++) {
        assert_int_equal(commit(gc, "", NULL, -1, v), 0);
        assert_int_equal(commit(gc, "m", NULL, -1, v), 0);
        assert_int_equal(commit(gc, a.member, NULL, 1, v), SK_KAFKA_UNKNOWN_MEMBER_ID);
        assert_int_equal(commit(gc, "", NULL, 0, v), SK_KAFKA_UNKNOWN_MEMBER_ID);
    }
    /* Static members. */
    jslot si;
    join_o(gc, &si, (jopts){.instance = "i1"}, 3);
    sk_gc_tick(gc, 3);
    const char *ids2[] = {si.member}, *as2[] = {"y"};
    int32_t gen = si.generation;
    sync_p(gc, &s, si.member, gen, 1, ids2, as2, NOSTR, NOSTR, "i1", 4);
    assert_int_equal(commit(gc, si.member, "i1", gen, 7), 0);
    assert_int_equal(commit(gc, si.member, NULL, gen, 6), 0);
    assert_int_equal(commit(gc, "other", "i1", gen, 7), SK_KAFKA_FENCED_INSTANCE_ID);
    assert_int_equal(commit(gc, si.member, "i2", gen, 7), SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_int_equal(commit(gc, si.member, "i1", gen - 1, 7), SK_KAFKA_ILLEGAL_GENERATION);
    sk_gc_destroy(gc, 0);
}

static void test_join_errors(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    jslot x;
    sk_gc_join_args a = {0};
    a.group_id = S("");
    a.member_id = S("");
    a.instance_id = NOSTR;
    a.protocol_type = S("consumer");
    a.session_timeout_ms = SESSION;
    sk_gc_join(gc, &a, 0, on_join, &x);
    assert_int_equal(x.error, SK_KAFKA_INVALID_GROUP_ID);
    join_o(gc, &x, (jopts){.session = 999}, 0);
    assert_int_equal(x.error, SK_KAFKA_INVALID_SESSION_TIMEOUT);
    join_o(gc, &x, (jopts){.session = 60001}, 0);
    assert_int_equal(x.error, SK_KAFKA_INVALID_SESSION_TIMEOUT);
    join_o(gc, &x, (jopts){.session = 1000}, 0); /* bounds included */
    assert_int_equal(x.calls, 0);
    sk_gc_tick(gc, 0);
    assert_int_equal(x.error, 0);
    join_o(gc, &x, (jopts){.ptype = ""}, 1);
    assert_int_equal(x.error, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
    join_o(gc, &x, (jopts){.member = "nobody"}, 1);
    assert_int_equal(x.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    memset(&x, 0, sizeof x);
    a.group_id = S("other");
    a.member_id = S("nobody");
    a.protocol_type = S("consumer");
    sk_gc_join(gc, &a, 1, on_join, &x);
    assert_int_equal(x.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    assert_null(sk_gc_find(gc, "other", 5));
    /* A sync or heartbeat naming an unknown group. */
    sslot s;
    sk_gc_sync_args sa = {0};
    sa.group_id = S("nope");
    sa.member_id = S("m");
    sa.instance_id = NOSTR;
    sa.protocol_type = sa.protocol_name = NOSTR;
    sk_gc_sync(gc, &sa, 1, on_sync, &s);
    assert_int_equal(s.error, SK_KAFKA_UNKNOWN_MEMBER_ID);
    sa.group_id = S("");
    sk_gc_sync(gc, &sa, 1, on_sync, &s);
    assert_int_equal(s.error, SK_KAFKA_INVALID_GROUP_ID);
    sk_gc_destroy(gc, 0);
}

static void test_listing_and_remove(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    assert_string_equal(sk_gc_state_name(SK_GC_EMPTY), "Empty");
    assert_string_equal(sk_gc_state_name(SK_GC_PREPARING), "PreparingRebalance");
    assert_string_equal(sk_gc_state_name(SK_GC_COMPLETING), "CompletingRebalance");
    assert_string_equal(sk_gc_state_name(SK_GC_STABLE), "Stable");
    assert_string_equal(sk_gc_state_name(SK_GC_DEAD), "Dead");
    char ids[1][128];
    stable_group(gc, 1, ids, 0);
    size_t it = 0;
    sk_gc_group *g = sk_gc_next(gc, &it);
    assert_non_null(g);
    assert_string_equal(sk_gc_group_id(g), GROUP);
    assert_string_equal(sk_gc_group_protocol_type(g), "consumer");
    assert_null(sk_gc_next(gc, &it));
    assert_int_equal(sk_gc_leave(gc, S(GROUP), S(ids[0]), NOSTR, 1), 0);
    sk_gc_remove(gc, sk_gc_find(gc, GROUP, 1));
    assert_null(sk_gc_find(gc, GROUP, 1));
    it = 0;
    assert_null(sk_gc_next(gc, &it));
    /* A group starts again from generation 0 once removed. */
    jslot a;
    join(gc, &a, "", 2);
    sk_gc_tick(gc, 2);
    assert_int_equal(a.generation, 1);
    sk_gc_destroy(gc, 0);
}

/* Online downgrade: members adopted from a consumer group at generation 7
 * keep their protocols and last assignments; the group rebalances at once
 * (their heartbeats say so, commits at their generation pass) and ends at
 * generation 8 once both rejoined. */
static void test_adopt_from_consumer_group(void **st)
{
    (void)st;
    sk_gc *gc = gc_new(0);
    sk_gc_protocol protos[2] = {{S("range"), {(const uint8_t *)"range-md", 8}},
                                {S("cooperative-sticky"), {(const uint8_t *)"cs-md", 5}}};
    sk_gc_adopted ms[2] = {0};
    const char *ids[2] = {"c1", "c2"};
    for (int i = 0; i < 2; i++) {
        sk_gc_join_args *a = &ms[i].member;
        a->group_id = S(GROUP);
        a->member_id = S(ids[i]);
        a->instance_id = NOSTR;
        a->client_id = S("cli");
        a->client_host = S("/h");
        a->protocol_type = S("consumer");
        a->session_timeout_ms = SESSION;
        a->rebalance_timeout_ms = REBALANCE;
        a->nprotocols = 2;
        a->protocols = protos;
        ms[i].assignment = (kc_bytes){(const uint8_t *)(i ? "as-2" : "as-1"), 4};
    }
    assert_int_equal(sk_gc_adopt(gc, S(GROUP), 7, 2, ms, 0), 0);
    assert_int_equal(sk_gc_adopt(gc, S(GROUP), 7, 2, ms, 0), SK_ERR_EXIST);
    sk_gc_group *g = sk_gc_find(gc, GROUP, 1);
    assert_int_equal(sk_gc_group_state(g), SK_GC_PREPARING);
    assert_int_equal(generation(gc), 7);
    assert_string_equal(sk_gc_group_protocol_type(g), "consumer");
    assert_string_equal(sk_gc_group_protocol_name(g), "range");
    sk_gc_member_view v;
    sk_gc_group_member(g, 1, &v);
    assert_int_equal(v.nprotocols, 2);
    assert_int_equal(v.session_ms, SESSION);
    assert_int_equal(v.assignment_len, 4);
    assert_memory_equal(v.assignment, "as-2", 4);
    sk_gc_protocol p = sk_gc_group_member_protocol(g, 1, 1);
    assert_int_equal(p.metadata.len, 5);
    assert_int_equal(hb(gc, "c1", 7, 10), SK_KAFKA_REBALANCE_IN_PROGRESS);
    assert_int_equal(sk_gc_check_commit(gc, S(GROUP), S("c1"), NOSTR, 7, 8), 0);
    jslot j1, j2;
    join(gc, &j1, "c1", 20);
    assert_int_equal(j1.calls, 0);
    join(gc, &j2, "c2", 30);
    assert_int_equal(j1.calls, 1);
    assert_int_equal(j2.error, 0);
    assert_int_equal(j2.generation, 8);
    sk_gc_destroy(gc, SK_KAFKA_COORDINATOR_NOT_AVAILABLE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_step_join),
        cmocka_unit_test(test_pending_member_blocks_until_it_joins),
        cmocka_unit_test(test_initial_rebalance_delay),
        cmocka_unit_test(test_rebalance_completes_when_all_rejoined),
        cmocka_unit_test(test_rebalance_timeout_removes_members),
        cmocka_unit_test(test_session_timeout),
        cmocka_unit_test(test_leader_and_protocol_votes),
        cmocka_unit_test(test_sync),
        cmocka_unit_test(test_heartbeat_in_every_state),
        cmocka_unit_test(test_leave),
        cmocka_unit_test(test_static_member_rejoin),
        cmocka_unit_test(test_static_member_kept_through_rebalance),
        cmocka_unit_test(test_commit_checks),
        cmocka_unit_test(test_join_errors),
        cmocka_unit_test(test_listing_and_remove),
        cmocka_unit_test(test_adopt_from_consumer_group),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
