/* placement, the controller's decisions as a pure function, driven with fake
 * clusters and fake time: first placement over nodes and zones, custody of
 * dead and replaced logs, lost partitions, draining, the rebalance's delay,
 * threshold and bound, the cap, determinism, and a randomized simulation of
 * a controller and its nodes that checks the invariants after every call.
 *
 * Every call goes through plan_at(), which checks each action against an
 * oracle written from the header (the partition or log needed it, the epoch
 * grows by one, nothing is planned twice), that the same input in another
 * order plans the same actions, and, when the cap did not cut the call
 * short, that the actions leave nothing unplaced and that a second call plans
 * nothing more. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "placement.h"

#define MAXN 16
#define MAXP 256
#define MAXL 128
#define BIG 1024
#define FIRST_LOG 100

typedef struct cl {
    pl_node nodes[MAXN];
    size_t nnodes;
    pl_part parts[MAXP];
    size_t nparts;
    pl_log logs[MAXL];
    size_t nlogs;
    int64_t changed_ms;
    int64_t next_log;
    pl_config cfg;
} cl;

static pl_action acts[BIG]; /* the last plan_at's actions */

static const pl_config CFG = {
    .rebalance = true, .imbalance_pct = 0, .max_moves = 100, .rebalance_delay_ms = 0};

/* ---- building clusters ---- */

static cl *cl_new(void)
{
    cl *c = calloc(1, sizeof *c);
    assert_non_null(c);
    c->next_log = FIRST_LOG;
    c->cfg = CFG;
    return c;
}

static kc_uuid T(int tag)
{
    kc_uuid u = {{0}};
    u.b[0] = (uint8_t)tag;
    u.b[15] = 0x5a;
    return u;
}

static pl_input cl_in(const cl *c)
{
    return (pl_input){c->nodes, c->nnodes, c->parts, c->nparts, c->logs, c->nlogs, c->changed_ms};
}

static pl_node *node_of(cl *c, int32_t id)
{
    for (size_t k = 0; k < c->nnodes; k++)
        if (c->nodes[k].id == id)
            return &c->nodes[k];
    return NULL;
}

static pl_log *log_of(cl *c, int64_t id)
{
    for (size_t l = 0; l < c->nlogs; l++)
        if (c->logs[l].id == id)
            return &c->logs[l];
    return NULL;
}

static pl_part *part_of(cl *c, int tag, int32_t index)
{
    kc_uuid t = T(tag);
    for (size_t i = 0; i < c->nparts; i++)
        if (!memcmp(&c->parts[i].topic, &t, sizeof t) && c->parts[i].index == index)
            return &c->parts[i];
    return NULL;
}

static void add_log(cl *c, int64_t id, int32_t node, const char *zone)
{
    assert_true(c->nlogs < MAXL);
    pl_log *l = &c->logs[c->nlogs++];
    *l = (pl_log){.id = id, .node = node, .state = PL_LOG_LIVE, .custodian = -1};
    snprintf(l->zone, sizeof l->zone, "%s", zone);
}

/* A node starts: a new incarnation with a new log. */
static void join(cl *c, int32_t id, const char *zone, int64_t now)
{
    assert_null(node_of(c, id));
    assert_true(c->nnodes < MAXN);
    pl_node *n = &c->nodes[c->nnodes++];
    *n = (pl_node){.id = id, .log = ++c->next_log};
    snprintf(n->zone, sizeof n->zone, "%s", zone);
    add_log(c, n->log, id, zone);
    c->changed_ms = now;
}

/* A node's lease expires: its key goes, its log stays as etcd had it. */
static void kill_node(cl *c, int32_t id, int64_t now)
{
    pl_node *n = node_of(c, id);
    assert_non_null(n);
    size_t k = (size_t)(n - c->nodes);
    memmove(&c->nodes[k], &c->nodes[k + 1], (c->nnodes - k - 1) * sizeof *n);
    c->nnodes--;
    c->changed_ms = now;
}

/* A node comes back under the same id before anyone noticed it left. */
static void restart(cl *c, int32_t id, int64_t now)
{
    pl_node *n = node_of(c, id);
    assert_non_null(n);
    n->log = ++c->next_log;
    char zone[sizeof n->zone]; /* add_log's zone must not point into c */
    memcpy(zone, n->zone, sizeof zone);
    add_log(c, n->log, id, zone);
    c->changed_ms = now;
}

static void topic(cl *c, int tag, int n)
{
    for (int i = 0; i < n; i++) {
        assert_true(c->nparts < MAXP);
        c->parts[c->nparts++] =
            (pl_part){.topic = T(tag), .index = i, .state = PL_NEW, .node = -1, .src_log = -1};
    }
}

/* ---- the oracle: the header's rules, written plainly ---- */

static bool o_takes(cl *c, int32_t id)
{
    pl_node *n = node_of(c, id);
    return n && !n->draining;
}

static bool o_any_takes(cl *c)
{
    for (size_t k = 0; k < c->nnodes; k++)
        if (!c->nodes[k].draining)
            return true;
    return false;
}

static bool o_takes_in_zone(cl *c, const char *zone)
{
    for (size_t k = 0; k < c->nnodes; k++)
        if (!c->nodes[k].draining && !strcmp(c->nodes[k].zone, zone))
            return true;
    return false;
}

static bool o_log_dead(cl *c, int64_t log, int32_t node)
{
    pl_log *l = log_of(c, log);
    if (l && l->state == PL_LOG_DEAD)
        return true;
    pl_node *n = node_of(c, node);
    return !n || n->log > log;
}

static bool o_needs_custody(cl *c, const pl_log *l)
{
    if (l->state == PL_LOG_DEAD)
        return !node_of(c, l->custodian);
    return o_log_dead(c, l->id, l->node);
}

static bool o_lost(cl *c, const pl_part *p)
{
    switch (p->state) {
    case PL_NEW:
        return false;
    case PL_ACTIVE:
        return o_log_dead(c, p->log, p->node);
    default:
        return !o_takes(c, p->node);
    }
}

static bool o_unplaced(cl *c, const pl_part *p)
{
    return p->state == PL_NEW && !o_takes(c, p->node);
}

static bool o_drained(cl *c, const pl_part *p)
{
    pl_node *n = node_of(c, p->node);
    return p->state == PL_ACTIVE && !o_lost(c, p) && n && n->draining;
}

static int64_t in_flight(const cl *c)
{
    int64_t k = 0;
    for (size_t i = 0; i < c->nparts; i++)
        k += c->parts[i].state == PL_MOVING || c->parts[i].state == PL_HANDOFF;
    return k;
}

/* Partitions assigned to a node, in any state: the planner's load once
 * nothing is lost. */
static int load(const cl *c, int32_t id)
{
    int k = 0;
    for (size_t i = 0; i < c->nparts; i++)
        k += c->parts[i].node == id;
    return k;
}

static int zone_load(cl *c, const char *zone)
{
    int k = 0;
    for (size_t i = 0; i < c->nparts; i++) {
        pl_node *n = node_of(c, c->parts[i].node);
        k += n && !strcmp(n->zone, zone);
    }
    return k;
}

static int rank_of(cl *c, const pl_action *a)
{
    switch (a->type) {
    case PL_ACT_CUSTODY:
        return 0;
    case PL_ACT_RETARGET:
        return 1;
    case PL_ACT_PLACE:
        return 2;
    case PL_ACT_MOVE:
        return node_of(c, c->parts[a->part].node)->draining ? 3 : 4;
    }
    fail();
    return -1;
}

static void check_custody(cl *c, const pl_action *a)
{
    assert_true(a->log < c->nlogs);
    assert_int_equal(a->part, SIZE_MAX);
    const pl_log *l = &c->logs[a->log];
    assert_true(o_needs_custody(c, l));
    pl_node *n = node_of(c, a->node);
    assert_non_null(n);
    if (o_any_takes(c))
        assert_false(n->draining);
    if (l->zone[0] && o_takes_in_zone(c, l->zone))
        assert_string_equal(n->zone, l->zone);
}

static void check_part_action(cl *c, const pl_action *a, int64_t now)
{
    assert_true(a->part < c->nparts);
    assert_int_equal(a->log, SIZE_MAX);
    const pl_part *p = &c->parts[a->part];
    assert_true(o_takes(c, a->node));
    assert_int_equal(a->epoch, p->epoch + 1);
    switch (a->type) {
    case PL_ACT_PLACE:
        assert_true(o_unplaced(c, p));
        assert_int_equal(a->src_log, -1);
        break;
    case PL_ACT_RETARGET:
        assert_true(o_lost(c, p));
        assert_int_equal(a->src_log, p->state == PL_ACTIVE ? p->log : p->src_log);
        break;
    case PL_ACT_MOVE:
        assert_true(p->state == PL_ACTIVE && !o_lost(c, p));
        assert_int_equal(a->src_log, p->log);
        assert_int_not_equal(a->node, p->node);
        if (!node_of(c, p->node)->draining)
            assert_true(c->cfg.rebalance && now - c->changed_ms >= c->cfg.rebalance_delay_ms);
        break;
    default:
        fail();
    }
}

/* Each action is needed, targets a node that takes partitions, comes in
 * priority order, and touches its partition or log once; rebalance moves
 * never push the moves in flight past max_moves. */
static void check_actions(cl *c, int64_t now, size_t cap, size_t n)
{
    assert_true(n <= cap);
    bool part_seen[MAXP] = {0}, log_seen[MAXL] = {0};
    int last = 0;
    int64_t flight = in_flight(c), rebalance_moves = 0;
    for (size_t k = 0; k < n; k++) {
        const pl_action *a = &acts[k];
        int r = rank_of(c, a);
        assert_true(r >= last);
        last = r;
        if (a->type == PL_ACT_CUSTODY) {
            check_custody(c, a);
            assert_false(log_seen[a->log]);
            log_seen[a->log] = true;
            continue;
        }
        check_part_action(c, a, now);
        assert_false(part_seen[a->part]);
        part_seen[a->part] = true;
        flight += a->type == PL_ACT_MOVE ||
                  (a->type == PL_ACT_RETARGET && c->parts[a->part].state == PL_ACTIVE);
        rebalance_moves += r == 4;
    }
    if (rebalance_moves)
        assert_true(flight <= c->cfg.max_moves);
}

/* What the controller's transactions do. */
static void apply_to(cl *c, const pl_action *a, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        if (a[k].type == PL_ACT_CUSTODY) {
            c->logs[a[k].log].state = PL_LOG_DEAD;
            c->logs[a[k].log].custodian = a[k].node;
            continue;
        }
        pl_part *p = &c->parts[a[k].part];
        assert_true(a[k].epoch > p->epoch);
        if (a[k].type == PL_ACT_MOVE || p->state == PL_ACTIVE)
            p->state = PL_MOVING;
        else if (a[k].type == PL_ACT_PLACE)
            p->state = PL_NEW;
        p->node = a[k].node;
        p->epoch = a[k].epoch;
        p->src_log = a[k].src_log;
    }
}

static void apply(cl *c, size_t n)
{
    apply_to(c, acts, n);
}

/* After a call that was not cut short: nothing is lost, unplaced, left on a
 * draining node or without a custodian while someone could take it, and a
 * second call plans nothing. */
static void check_complete(const cl *c0, int64_t now, size_t n)
{
    static cl d;
    static pl_action again[BIG];
    d = *c0;
    apply_to(&d, acts, n);
    if (d.nnodes) {
        for (size_t l = 0; l < d.nlogs; l++)
            assert_false(o_needs_custody(&d, &d.logs[l]));
    }
    if (o_any_takes(&d)) {
        for (size_t i = 0; i < d.nparts; i++) {
            assert_false(o_lost(&d, &d.parts[i]));
            assert_false(o_unplaced(&d, &d.parts[i]));
            assert_false(o_drained(&d, &d.parts[i]));
        }
    }
    pl_input in = cl_in(&d);
    assert_int_equal(pl_plan(&in, &d.cfg, now, again, BIG), 0);
}

static void assert_act_equal(const pl_action *a, const pl_action *b)
{
    assert_int_equal(a->type, b->type);
    assert_int_equal(a->part, b->part);
    assert_int_equal(a->log, b->log);
    assert_int_equal(a->node, b->node);
    assert_int_equal(a->epoch, b->epoch);
    assert_int_equal(a->src_log, b->src_log);
}

static void assert_acts_equal(const pl_action *a, const pl_action *b, size_t n)
{
    for (size_t k = 0; k < n; k++)
        assert_act_equal(&a[k], &b[k]);
}

/* The same cluster with every array shuffled plans the same actions, their
 * indices pointing at the same entries. */
static void check_permuted(const cl *c, int64_t now, size_t cap, size_t n, uint64_t seed)
{
    static cl d;
    static pl_action got[BIG];
    size_t pn[MAXN], pp[MAXP], pl[MAXL]; /* new position -> old */
    size_t *perms[3] = {pn, pp, pl};
    size_t lens[3] = {c->nnodes, c->nparts, c->nlogs};
    for (int a = 0; a < 3; a++) {
        for (size_t i = 0; i < lens[a]; i++)
            perms[a][i] = i;
        for (size_t i = lens[a]; i > 1; i--) {
            seed = seed * 6364136223846793005ULL + 1442695040888963407ULL;
            size_t j = (size_t)(seed >> 33) % i, t = perms[a][i - 1];
            perms[a][i - 1] = perms[a][j];
            perms[a][j] = t;
        }
    }
    d = *c;
    for (size_t i = 0; i < c->nnodes; i++)
        d.nodes[i] = c->nodes[pn[i]];
    for (size_t i = 0; i < c->nparts; i++)
        d.parts[i] = c->parts[pp[i]];
    for (size_t i = 0; i < c->nlogs; i++)
        d.logs[i] = c->logs[pl[i]];
    pl_input in = cl_in(&d);
    assert_int_equal(pl_plan(&in, &d.cfg, now, got, cap), n);
    for (size_t k = 0; k < n; k++) {
        if (got[k].type == PL_ACT_CUSTODY)
            got[k].log = pl[got[k].log];
        else
            got[k].part = pp[got[k].part];
        assert_act_equal(&got[k], &acts[k]);
    }
}

/* The controller's call, with every check of the file. */
static size_t plan_at(cl *c, int64_t now, size_t cap)
{
    static uint64_t calls;
    static pl_action twice[BIG];
    assert_true(cap <= BIG);
    pl_input in = cl_in(c);
    memset(acts, 0xa5, sizeof acts);
    size_t n = pl_plan(&in, &c->cfg, now, acts, cap);
    check_actions(c, now, cap, n);
    assert_int_equal(pl_plan(&in, &c->cfg, now, twice, cap), n);
    assert_acts_equal(twice, acts, n);
    check_permuted(c, now, cap, n, ++calls);
    if (n < cap)
        check_complete(c, now, n);
    return n;
}

/* ---- what the nodes do between calls ---- */

/* Whether anyone can append HANDOFF to this log: its own node, or its
 * custodian once it is dead. */
static bool operated(cl *c, int64_t id)
{
    pl_log *l = log_of(c, id);
    if (!l)
        return false;
    if (l->state == PL_LOG_DEAD)
        return node_of(c, l->custodian) != NULL;
    pl_node *n = node_of(c, l->node);
    return n && n->log == id;
}

/* One step of one partition, if its actors are there. */
static bool advance(cl *c, pl_part *p)
{
    pl_node *t = node_of(c, p->node);
    switch (p->state) {
    case PL_NEW:
    case PL_HANDOFF:
        if (!t)
            return false;
        p->state = PL_ACTIVE;
        p->log = t->log;
        p->src_log = -1;
        return true;
    case PL_MOVING:
        if (!operated(c, p->src_log))
            return false;
        p->state = PL_HANDOFF;
        return true;
    case PL_ACTIVE:
        return false;
    }
    return false;
}

static bool referenced(const cl *c, int64_t log)
{
    for (size_t i = 0; i < c->nparts; i++) {
        const pl_part *p = &c->parts[i];
        if ((p->state == PL_ACTIVE && p->log == log) ||
            ((p->state == PL_MOVING || p->state == PL_HANDOFF) && p->src_log == log))
            return true;
    }
    return false;
}

/* Custodians delete the dead logs nothing needs any more. */
static void reap_logs(cl *c)
{
    for (size_t l = 0; l < c->nlogs;) {
        if (c->logs[l].state == PL_LOG_DEAD && node_of(c, c->logs[l].custodian) &&
            !referenced(c, c->logs[l].id)) {
            c->logs[l] = c->logs[--c->nlogs];
            continue;
        }
        l++;
    }
}

/* Every move, handoff and adoption that can happen does. */
static void settle(cl *c)
{
    bool moved = true;
    while (moved) {
        moved = false;
        for (size_t i = 0; i < c->nparts; i++)
            moved |= advance(c, &c->parts[i]);
    }
    reap_logs(c);
}

/* Plan, apply and settle until the cluster is quiet. */
static void converge(cl *c, int64_t *now)
{
    for (int round = 0; round < 200; round++) {
        settle(c);
        *now += c->cfg.rebalance_delay_ms + 1;
        size_t n = plan_at(c, *now, BIG);
        apply(c, n);
        if (n == 0 && in_flight(c) == 0)
            return;
    }
    fail_msg("no convergence");
}

static void assert_loads(cl *c, const int32_t *ids, const int *want, size_t n)
{
    for (size_t k = 0; k < n; k++)
        assert_int_equal(load(c, ids[k]), want[k]);
}

static size_t count_type(size_t n, pl_act_type t)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        k += acts[i].type == t;
    return k;
}

/* ---- first placement ---- */

static void test_place_three_zones(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "c", 0);
    topic(c, 1, 12);
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 12);
    for (size_t k = 0; k < n; k++) {
        assert_int_equal(acts[k].type, PL_ACT_PLACE);
        assert_int_equal(acts[k].part, k); /* by index */
        assert_int_equal(acts[k].epoch, 1);
        assert_int_equal(acts[k].node, (int32_t)(k % 3) + 1);
    }
    apply(c, n);
    assert_int_equal(plan_at(c, 0, BIG), 0);
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){4, 4, 4}, 3);
    assert_int_equal(zone_load(c, "a"), 4);
    assert_int_equal(zone_load(c, "b"), 4);
    assert_int_equal(zone_load(c, "c"), 4);
    /* A second topic of 3 spreads over the three too, on top of the first. */
    topic(c, 2, 3);
    n = plan_at(c, 0, BIG);
    assert_int_equal(n, 3);
    apply(c, n);
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){5, 5, 5}, 3);
    free(c);
}

static void test_place_two_zones(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "a", 0);
    join(c, 3, "b", 0);
    topic(c, 1, 12);
    apply(c, plan_at(c, 0, BIG));
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){4, 4, 4}, 3);
    assert_int_equal(zone_load(c, "a"), 8);
    assert_int_equal(zone_load(c, "b"), 4);
    /* Nodes first, then zones: the second partition goes to the other zone,
     * the third to the second node of the first. */
    assert_int_equal(part_of(c, 1, 0)->node, 1);
    assert_int_equal(part_of(c, 1, 1)->node, 3);
    assert_int_equal(part_of(c, 1, 2)->node, 2);
    free(c);
}

/* With equal loads, a topic's next partition goes to the zone holding fewer
 * of it, whatever the node ids say. */
static void test_place_zone_tiebreak(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "a", 0);
    join(c, 3, "a", 0);
    join(c, 4, "b", 0);
    topic(c, 1, 2);
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 2);
    assert_int_equal(acts[0].node, 1);
    assert_int_equal(acts[1].node, 4);
    free(c);
}

/* With loads and zone counts tied, the next partition of a topic goes to the
 * zone other than the one this call picked last for it. */
static void test_place_alternates_zones(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "a", 0);
    join(c, 3, "a", 0);
    join(c, 4, "b", 0);
    join(c, 5, "b", 0);
    join(c, 6, "b", 0);
    topic(c, 1, 3);
    topic(c, 2, 10);
    c->parts[0] = (pl_part){T(1), 0, PL_ACTIVE, 1, 4, node_of(c, 4)->log, -1};
    for (int i = 0; i < 10; i++) { /* 3 and 6 are busy */
        int32_t id = i < 5 ? 3 : 6;
        c->parts[3 + i] = (pl_part){T(2), i, PL_ACTIVE, 1, id, node_of(c, id)->log, -1};
    }
    c->cfg.rebalance = false;
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 2);
    assert_int_equal(acts[0].node, 1); /* zone a holds none of topic 1 */
    assert_int_equal(acts[1].node, 5); /* 2 and 5 tie; the last pick was in a */
    free(c);
}

static void test_place_without_zones(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "", 0);
    join(c, 2, "", 0);
    join(c, 3, "", 0);
    topic(c, 1, 13);
    apply(c, plan_at(c, 0, BIG));
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){5, 4, 4}, 3);
    /* A zoneless dead log goes to the fewest custodies, then the lowest id. */
    int64_t now = 0;
    converge(c, &now);
    int64_t dead = node_of(c, 3)->log;
    kill_node(c, 3, now);
    size_t n = plan_at(c, now, BIG);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(c->logs[acts[0].log].id, dead);
    assert_int_equal(acts[0].node, 1);
    apply(c, n);
    converge(c, &now);
    assert_loads(c, (int32_t[]){1, 2}, (int[]){7, 6}, 2);
    free(c);
}

/* ---- a node dies ---- */

static void test_node_dies(void **state)
{
    (void)state;
    cl *c = cl_new();
    const char *zones[] = {"a", "a", "b", "b", "c", "c"};
    for (int32_t id = 1; id <= 6; id++)
        join(c, id, zones[id - 1], 0);
    topic(c, 1, 24);
    int64_t now = 0;
    converge(c, &now);
    assert_int_equal(load(c, 1), 4);
    int64_t dead = node_of(c, 1)->log;
    int32_t before[MAXP];
    for (size_t i = 0; i < c->nparts; i++)
        before[i] = c->parts[i].epoch;

    kill_node(c, 1, now);
    size_t n = plan_at(c, now, BIG);
    assert_int_equal(n, 5);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(c->logs[acts[0].log].id, dead);
    assert_int_equal(acts[0].node, 2); /* the survivor of its zone */
    bool used[8] = {0};
    for (size_t k = 1; k < n; k++) {
        assert_int_equal(acts[k].type, PL_ACT_RETARGET);
        assert_int_equal(acts[k].src_log, dead);
        assert_int_equal(acts[k].epoch, before[acts[k].part] + 1);
        assert_false(used[acts[k].node]); /* spread over the survivors */
        used[acts[k].node] = true;
    }
    apply(c, n);
    for (size_t k = 1; k < n; k++)
        assert_int_equal(c->parts[acts[k].part].state, PL_MOVING);
    assert_int_equal(log_of(c, dead)->state, PL_LOG_DEAD);
    converge(c, &now);
    assert_null(log_of(c, dead)); /* its custodian deleted it */
    assert_loads(c, (int32_t[]){2, 3, 4, 5, 6}, (int[]){5, 5, 5, 5, 4}, 5);
    free(c);
}

/* Same node id, new log: the old log is dead, and the partitions on it come
 * back to the node that now has none. */
static void test_node_restarts(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "c", 0);
    topic(c, 1, 12);
    int64_t now = 0;
    converge(c, &now);
    int64_t old = node_of(c, 2)->log;
    restart(c, 2, now);
    pl_input in = cl_in(c);
    int32_t loads[3];
    pl_loads(&in, loads);
    assert_int_equal(loads[0], 4);
    assert_int_equal(loads[1], 0); /* what it served is on a dead log */
    assert_int_equal(loads[2], 4);

    size_t n = plan_at(c, now, BIG);
    assert_int_equal(n, 5);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(c->logs[acts[0].log].id, old);
    assert_int_equal(acts[0].node, 2); /* its zone's only node */
    for (size_t k = 1; k < n; k++) {
        assert_int_equal(acts[k].type, PL_ACT_RETARGET);
        assert_int_equal(acts[k].src_log, old);
        assert_int_equal(acts[k].node, 2);
        assert_int_equal(acts[k].epoch, 2);
    }
    apply(c, n);
    converge(c, &now);
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){4, 4, 4}, 3);
    for (size_t i = 0; i < c->nparts; i++)
        if (c->parts[i].node == 2)
            assert_int_equal(c->parts[i].log, node_of(c, 2)->log);
    free(c);
}

/* Without zones, ties would go to the lowest id: the restarted node still
 * gets its partitions back, as what it served counts on it no more. */
static void test_node_restarts_without_zones(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "", 0);
    join(c, 2, "", 0);
    join(c, 3, "", 0);
    topic(c, 1, 12);
    int64_t now = 0;
    converge(c, &now);
    restart(c, 2, now);
    size_t n = plan_at(c, now, BIG);
    assert_int_equal(n, 5);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(acts[0].node, 1); /* no zone: the lowest id */
    for (size_t k = 1; k < n; k++) {
        assert_int_equal(acts[k].type, PL_ACT_RETARGET);
        assert_int_equal(acts[k].node, 2);
    }
    free(c);
}

/* A log newer than its node's key is a new incarnation registering, not a
 * dead log. */
static void test_newer_log_is_not_dead(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    add_log(c, node_of(c, 1)->log + 50, 1, "a");
    assert_int_equal(plan_at(c, 0, BIG), 0);
    free(c);
}

static void test_target_dies_in_flight(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "c", 0);
    join(c, 4, "a", 0);
    int64_t l1 = node_of(c, 1)->log, l2 = node_of(c, 2)->log;
    topic(c, 1, 3);
    pl_part *mv = part_of(c, 1, 0), *ho = part_of(c, 1, 1), *ac = part_of(c, 1, 2);
    *mv = (pl_part){mv->topic, 0, PL_MOVING, 2, 3, -1, l1};
    *ho = (pl_part){ho->topic, 1, PL_HANDOFF, 5, 3, -1, l2};
    *ac = (pl_part){ac->topic, 2, PL_ACTIVE, 1, 1, l1, -1};
    int64_t l3 = node_of(c, 3)->log;
    kill_node(c, 3, 10);

    size_t n = plan_at(c, 10, BIG);
    assert_int_equal(n, 3);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(c->logs[acts[0].log].id, l3);
    assert_int_equal(acts[0].node, 1); /* no node in zone c: fewest, lowest id */
    assert_int_equal(acts[1].type, PL_ACT_RETARGET);
    assert_int_equal(acts[1].part, 0);
    assert_int_equal(acts[1].epoch, 3);
    assert_int_equal(acts[1].src_log, l1);
    assert_int_equal(acts[1].node, 2); /* empty, and zone a already has one */
    assert_int_equal(acts[2].type, PL_ACT_RETARGET);
    assert_int_equal(acts[2].part, 1);
    assert_int_equal(acts[2].epoch, 6);
    assert_int_equal(acts[2].src_log, l2);
    assert_int_equal(acts[2].node, 4);
    apply(c, n);
    assert_int_equal(mv->state, PL_MOVING);
    assert_int_equal(ho->state, PL_HANDOFF);
    int64_t now = 10;
    converge(c, &now);
    free(c);
}

/* A partition placed on a node that died before adopting it is placed again,
 * with a new epoch. */
static void test_new_on_dead_node(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    topic(c, 1, 1);
    c->parts[0].node = 7;
    c->parts[0].epoch = 1;
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].type, PL_ACT_PLACE);
    assert_int_equal(acts[0].epoch, 2);
    assert_int_equal(acts[0].node, 1);
    free(c);
}

/* A log marked dead while its node still lists it: what it served is lost. */
static void test_active_on_marked_dead_log(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "a", 0);
    topic(c, 1, 1);
    int64_t l1 = node_of(c, 1)->log;
    c->parts[0] = (pl_part){T(1), 0, PL_ACTIVE, 4, 1, l1, -1};
    log_of(c, l1)->state = PL_LOG_DEAD;
    log_of(c, l1)->custodian = 2;
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].type, PL_ACT_RETARGET);
    assert_int_equal(acts[0].src_log, l1);
    assert_int_equal(acts[0].epoch, 5);
    free(c);
}

/* ---- custody ---- */

static void test_custodian_died(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "a", 0);
    join(c, 3, "b", 0);
    add_log(c, 50, 9, "a");
    c->logs[c->nlogs - 1].state = PL_LOG_DEAD;
    c->logs[c->nlogs - 1].custodian = 7; /* gone */
    add_log(c, 51, 8, "a");
    c->logs[c->nlogs - 1].state = PL_LOG_DEAD;
    c->logs[c->nlogs - 1].custodian = 3; /* live: kept, though not of its zone */
    add_log(c, 52, 6, "a");
    c->logs[c->nlogs - 1].state = PL_LOG_DEAD;
    c->logs[c->nlogs - 1].custodian = 1;
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(c->logs[acts[0].log].id, 50);
    assert_int_equal(acts[0].node, 2); /* zone a, and 1 already has one */
    apply(c, n);
    assert_int_equal(plan_at(c, 0, BIG), 0);
    free(c);
}

/* Custody goes to a node that stays when there is one, even out of zone;
 * when every node drains, to a draining one. */
static void test_custody_and_draining(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "b", 0);
    node_of(c, 2)->draining = true;
    int64_t l3 = node_of(c, 3)->log;
    kill_node(c, 3, 0);
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(c->logs[acts[0].log].id, l3);
    assert_int_equal(acts[0].node, 1);

    node_of(c, 1)->draining = true;
    n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].node, 2); /* in zone */
    free(c);
}

/* ---- draining ---- */

static void test_draining(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "c", 0);
    join(c, 4, "c", 0);
    topic(c, 1, 12);
    int64_t now = 0;
    converge(c, &now);
    assert_int_equal(load(c, 3), 3);
    int64_t l1 = node_of(c, 1)->log, l3 = node_of(c, 3)->log;
    topic(c, 2, 2);
    pl_part *placed = part_of(c, 2, 0), *moving = part_of(c, 2, 1);
    *placed = (pl_part){placed->topic, 0, PL_NEW, 1, 3, -1, -1};
    *moving = (pl_part){moving->topic, 1, PL_MOVING, 3, 3, -1, l1};
    node_of(c, 3)->draining = true;
    c->cfg.max_moves = 1;                /* draining is not bounded by it */
    c->cfg.rebalance_delay_ms = 1 << 30; /* nor delayed */

    size_t n = plan_at(c, now, BIG);
    assert_int_equal(n, 5);
    assert_int_equal(acts[0].type, PL_ACT_RETARGET);
    assert_int_equal(acts[0].part, (size_t)(moving - c->parts));
    assert_int_equal(acts[0].src_log, l1);
    assert_int_equal(acts[0].epoch, 4);
    assert_int_equal(acts[1].type, PL_ACT_PLACE);
    assert_int_equal(acts[1].epoch, 2);
    for (size_t k = 2; k < n; k++) {
        assert_int_equal(acts[k].type, PL_ACT_MOVE);
        assert_int_equal(acts[k].src_log, l3);
        assert_int_equal(c->parts[acts[k].part].node, 3);
    }
    for (size_t k = 0; k < n; k++)
        assert_int_not_equal(acts[k].node, 3);
    apply(c, n);
    c->cfg.rebalance_delay_ms = 0;
    c->cfg.max_moves = 100;
    converge(c, &now);
    assert_int_equal(load(c, 3), 0);
    /* A draining node takes no new partition either. */
    topic(c, 3, 6);
    n = plan_at(c, now, BIG);
    for (size_t k = 0; k < n; k++)
        assert_int_not_equal(acts[k].node, 3);
    free(c);
}

/* A partition leaving a draining node goes where its topic is thinnest,
 * not counting the place it leaves. */
static void test_drain_keeps_topic_spread(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "a", 0);
    topic(c, 1, 2);
    topic(c, 2, 1);
    c->parts[0] = (pl_part){T(1), 0, PL_ACTIVE, 1, 1, node_of(c, 1)->log, -1};
    c->parts[1] = (pl_part){T(1), 1, PL_ACTIVE, 1, 2, node_of(c, 2)->log, -1};
    c->parts[2] = (pl_part){T(2), 0, PL_ACTIVE, 1, 3, node_of(c, 3)->log, -1};
    node_of(c, 1)->draining = true;
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].type, PL_ACT_MOVE);
    assert_int_equal(acts[0].node, 3); /* zone a: topic 1 stays in two zones */
    free(c);
}

/* ---- rebalance ---- */

static cl *balanced_three(int64_t *now)
{
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "c", 0);
    topic(c, 1, 12);
    *now = 0;
    converge(c, now);
    return c;
}

static void test_rebalance_after_join(void **state)
{
    (void)state;
    int64_t now;
    cl *c = balanced_three(&now);
    c->cfg.rebalance_delay_ms = 5000;
    c->cfg.max_moves = 2;
    join(c, 4, "a", 10000);
    assert_int_equal(plan_at(c, 12000, BIG), 0); /* too early */
    assert_int_equal(plan_at(c, 14999, BIG), 0);
    size_t n = plan_at(c, 15000, BIG);
    assert_int_equal(n, 2);
    for (size_t k = 0; k < n; k++) {
        const pl_part *p = &c->parts[acts[k].part];
        assert_int_equal(acts[k].type, PL_ACT_MOVE);
        assert_int_equal(acts[k].node, 4);
        assert_int_equal(acts[k].src_log, p->log);
        assert_int_equal(acts[k].epoch, p->epoch + 1);
    }
    assert_int_equal(c->parts[acts[0].part].node, 1); /* most loaded, lowest id */
    assert_int_equal(c->parts[acts[1].part].node, 2);
    apply(c, n);
    assert_int_equal(plan_at(c, 15000, BIG), 0); /* two in flight already */
    settle(c);
    n = plan_at(c, 16000, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(c->parts[acts[0].part].node, 3);
    apply(c, n);
    settle(c);
    assert_int_equal(plan_at(c, 17000, BIG), 0);
    assert_loads(c, (int32_t[]){1, 2, 3, 4}, (int[]){3, 3, 3, 3}, 4);
    free(c);
}

/* Partitions of topic `tag` served by node `id`. */
static int topic_on(cl *c, int tag, int32_t id)
{
    kc_uuid t = T(tag);
    int n = 0;
    for (size_t i = 0; i < c->nparts; i++)
        n += !memcmp(&c->parts[i].topic, &t, sizeof t) && c->parts[i].state == PL_ACTIVE &&
             c->parts[i].node == id;
    return n;
}

/* A node that joins takes its share of each topic, not only of the total:
 * two nodes serving a 12-partition topic and 6 internal partitions, then a
 * third, end at 4 + 2 each, not 3 + 3, 3 + 3 and 6 + 0. */
static void test_rebalance_spreads_each_topic(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    topic(c, 1, 12);
    topic(c, 2, 6);
    int64_t now = 0;
    converge(c, &now);
    assert_loads(c, (int32_t[]){1, 2}, (int[]){9, 9}, 2);
    join(c, 3, "c", now);
    converge(c, &now);
    for (int32_t id = 1; id <= 3; id++) {
        assert_int_equal(topic_on(c, 1, id), 4);
        assert_int_equal(topic_on(c, 2, id), 2);
    }
    free(c);
}

static void test_rebalance_threshold(void **state)
{
    (void)state;
    int64_t now;
    cl *c = balanced_three(&now);
    join(c, 4, "d", now);
    c->cfg.imbalance_pct = 50; /* 4 <= 1.5 * mean 3 */
    assert_int_equal(plan_at(c, now, BIG), 0);
    c->cfg.imbalance_pct = 10; /* 4 > 1.1 * 3 */
    assert_int_equal(plan_at(c, now, BIG), 3);
    c->cfg.rebalance = false;
    assert_int_equal(plan_at(c, now, BIG), 0);
    c->cfg.rebalance = true;
    c->cfg.max_moves = 0;
    assert_int_equal(plan_at(c, now, BIG), 0);
    free(c);

    /* Within one of each other is balanced, whatever the threshold. */
    c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    join(c, 3, "c", 0);
    topic(c, 1, 11);
    now = 0;
    converge(c, &now);
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){4, 4, 3}, 3);
    assert_int_equal(plan_at(c, now, BIG), 0);
    free(c);
}

static void test_rebalance_counts_in_flight(void **state)
{
    (void)state;
    int64_t now;
    cl *c = balanced_three(&now);
    c->cfg.max_moves = 2;
    join(c, 4, "d", now);
    join(c, 5, "e", now);
    /* One partition already on its way (toward 5): one more may go. */
    pl_part *p = part_of(c, 1, 0);
    p->src_log = p->log;
    p->state = PL_MOVING;
    p->node = 5;
    p->epoch++;
    size_t n = plan_at(c, now, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].node, 4);
    /* A death's retargets fill the budget before the rebalance does. */
    apply(c, n);
    settle(c);
    kill_node(c, 3, now);
    n = plan_at(c, now, BIG);
    assert_int_equal(count_type(n, PL_ACT_RETARGET), 4);
    assert_int_equal(count_type(n, PL_ACT_MOVE), 0);
    free(c);
}

/* The rebalance takes from the topic crowding the source most, though
 * another topic sorts first. */
static void test_rebalance_spreads_topic(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    topic(c, 1, 1);
    topic(c, 2, 3);
    for (size_t i = 0; i < c->nparts; i++) {
        c->parts[i].state = PL_ACTIVE;
        c->parts[i].epoch = 1;
        c->parts[i].node = 1;
        c->parts[i].log = node_of(c, 1)->log;
    }
    c->cfg.max_moves = 1;
    size_t n = plan_at(c, 0, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].part, 1); /* topic 2, partition 0 */
    assert_int_equal(acts[0].node, 2);
    free(c);
}

/* A node that left and came back gets its share in one call, once the delay
 * has passed since it came back, not a partition per call. */
static void test_rejoin_gets_share_once(void **state)
{
    (void)state;
    int64_t now;
    cl *c = balanced_three(&now);
    c->cfg.rebalance_delay_ms = 3000;
    kill_node(c, 3, now);
    converge(c, &now);
    assert_loads(c, (int32_t[]){1, 2}, (int[]){6, 6}, 2);
    join(c, 3, "c", now);
    assert_int_equal(plan_at(c, now + 100, BIG), 0);
    size_t n = plan_at(c, now + 3000, BIG);
    assert_int_equal(n, 4);
    for (size_t k = 0; k < n; k++)
        assert_int_equal(acts[k].node, 3);
    apply(c, n);
    settle(c);
    assert_int_equal(plan_at(c, now + 3000, BIG), 0);
    assert_loads(c, (int32_t[]){1, 2, 3}, (int[]){4, 4, 4}, 3);
    free(c);
}

/* ---- the cap ---- */

static void test_cap(void **state)
{
    (void)state;
    int64_t now;
    cl *c = balanced_three(&now);
    kill_node(c, 3, now);
    topic(c, 2, 2);
    assert_int_equal(plan_at(c, now, 1), 1);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY); /* most urgent first */
    size_t n = plan_at(c, now, 2);
    assert_int_equal(n, 2);
    assert_int_equal(acts[0].type, PL_ACT_CUSTODY);
    assert_int_equal(acts[1].type, PL_ACT_RETARGET);
    apply(c, n);
    n = plan_at(c, now, 4);
    assert_int_equal(n, 4);
    assert_int_equal(count_type(n, PL_ACT_RETARGET), 3);
    assert_int_equal(count_type(n, PL_ACT_PLACE), 1);
    apply(c, n);
    n = plan_at(c, now, BIG);
    assert_int_equal(n, 1);
    assert_int_equal(acts[0].type, PL_ACT_PLACE);
    apply(c, n);
    assert_int_equal(plan_at(c, now, BIG), 0);
    assert_int_equal(plan_at(c, now, 0), 0);
    free(c);
}

static void test_no_live_nodes(void **state)
{
    (void)state;
    int64_t now;
    cl *c = balanced_three(&now);
    topic(c, 2, 4);
    kill_node(c, 1, now);
    kill_node(c, 2, now);
    kill_node(c, 3, now);
    assert_int_equal(plan_at(c, now, BIG), 0);
    /* The first node back takes custody of all three logs and everything. */
    join(c, 4, "", now);
    size_t n = plan_at(c, now, BIG);
    assert_int_equal(count_type(n, PL_ACT_CUSTODY), 3);
    assert_int_equal(count_type(n, PL_ACT_RETARGET), 12);
    assert_int_equal(count_type(n, PL_ACT_PLACE), 4);
    free(c);
}

/* ---- determinism ---- */

static void test_deterministic(void **state)
{
    (void)state;
    cl *c = cl_new();
    const char *zones[] = {"a", "b", "c", "a", "b"};
    for (int32_t id = 1; id <= 5; id++)
        join(c, id, zones[id - 1], 0);
    topic(c, 9, 7);
    topic(c, 3, 11);
    topic(c, 5, 4);
    int64_t now = 0;
    converge(c, &now);
    kill_node(c, 2, now);
    restart(c, 4, now);
    node_of(c, 5)->draining = true;
    topic(c, 7, 5);
    size_t n = plan_at(c, now, BIG); /* checks repeat and shuffled orders */
    assert_true(n > 0);
    pl_action first[BIG];
    memcpy(first, acts, n * sizeof *acts);
    for (int round = 0; round < 20; round++) {
        assert_int_equal(plan_at(c, now, BIG), n);
        assert_acts_equal(acts, first, n);
    }
    free(c);
}

/* Scratch memory that cannot be had plans nothing: a partition count whose
 * scratch overflows makes calloc fail before anything is read. */
static void test_allocation_failure(void **state)
{
    (void)state;
    cl *c = cl_new();
    join(c, 1, "a", 0);
    topic(c, 1, 1);
    pl_input in = cl_in(c);
    in.nparts = SIZE_MAX / 4;
    assert_int_equal(pl_plan(&in, &c->cfg, 0, acts, BIG), 0);
    free(c);
}

/* Under ASan, a failed allocation returns NULL as it does in production. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "allocator_may_return_null=1";
}

static void test_names_and_loads(void **state)
{
    (void)state;
    assert_string_equal(pl_act_name(PL_ACT_CUSTODY), "custody");
    assert_string_equal(pl_act_name(PL_ACT_PLACE), "place");
    assert_string_equal(pl_act_name(PL_ACT_MOVE), "move");
    assert_string_equal(pl_act_name(PL_ACT_RETARGET), "retarget");
    cl *c = cl_new();
    join(c, 1, "a", 0);
    join(c, 2, "b", 0);
    topic(c, 1, 3);
    c->parts[0].node = 2; /* placed: counts */
    c->parts[1].node = 1;
    c->parts[1].state = PL_MOVING; /* target: counts */
    c->parts[2].node = 5;
    c->parts[2].state = PL_HANDOFF; /* to a gone node: counts nowhere */
    pl_input in = cl_in(c);
    int32_t loads[2];
    pl_loads(&in, loads);
    assert_int_equal(loads[0], 1);
    assert_int_equal(loads[1], 1);
    free(c);
}

/* ---- randomized: a controller and its nodes ---- */

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static uint32_t rn(uint64_t *s, uint32_t n)
{
    return n ? (uint32_t)(rnd(s) % n) : 0;
}

#define SIM_NODES 8

static const char *sim_zone(int mode, int32_t id)
{
    static const char *z[] = {"z0", "z1", "z2"};
    return mode == 0 ? "" : z[id % (mode + 1)];
}

static int32_t pick_node(cl *c, uint64_t *s)
{
    return c->nnodes ? c->nodes[rn(s, (uint32_t)c->nnodes)].id : -1;
}

/* Mostly joins and deaths, at rates that keep a few nodes up; now and then
 * every node at once. */
static void sim_event(cl *c, uint64_t *s, int zmode, int *tags, int64_t now)
{
    uint32_t ev = rn(s, 100);
    int32_t id = pick_node(c, s);
    if (ev < 10 && *tags < 250) {
        int n = 1 + (int)rn(s, 8);
        if (c->nparts + (size_t)n <= MAXP)
            topic(c, ++*tags, n);
    } else if (ev < 18 && id >= 0 && (c->nnodes > 2 || rn(s, 4) == 0)) {
        kill_node(c, id, now);
    } else if (ev < 32 && c->nlogs < MAXL - 1) {
        int32_t nid = (int32_t)rn(s, SIM_NODES);
        if (!node_of(c, nid))
            join(c, nid, sim_zone(zmode, nid), now);
    } else if (ev < 36 && id >= 0 && c->nlogs < MAXL - 1) {
        restart(c, id, now);
    } else if (ev < 40 && id >= 0) {
        node_of(c, id)->draining = true;
    } else if (ev == 40) {
        while (c->nnodes)
            kill_node(c, c->nodes[0].id, now);
    }
}

/* Nodes get on with their part, some of the time; drained nodes exit. */
static void sim_nodes(cl *c, uint64_t *s, int64_t now)
{
    for (size_t i = 0; i < c->nparts; i++)
        if (rn(s, 2))
            advance(c, &c->parts[i]);
    for (size_t k = 0; k < c->nnodes; k++) {
        if (c->nodes[k].draining && load(c, c->nodes[k].id) == 0 && rn(s, 2)) {
            kill_node(c, c->nodes[k].id, now);
            break;
        }
    }
    reap_logs(c);
}

static void check_quiet(cl *c)
{
    int min = INT32_MAX, max = 0, count = 0, total = 0;
    for (size_t i = 0; i < c->nparts; i++) {
        const pl_part *p = &c->parts[i];
        assert_int_equal(p->state, PL_ACTIVE);
        assert_true(o_takes(c, p->node));
        assert_int_equal(p->log, node_of(c, p->node)->log);
    }
    for (size_t l = 0; l < c->nlogs; l++)
        assert_false(o_needs_custody(c, &c->logs[l]));
    for (size_t k = 0; k < c->nnodes; k++) {
        if (c->nodes[k].draining)
            continue;
        int n = load(c, c->nodes[k].id);
        min = n < min ? n : min;
        max = n > max ? n : max;
        total += n;
        count++;
    }
    if (!c->cfg.rebalance || c->cfg.max_moves <= 0)
        return;
    if (c->cfg.imbalance_pct == 0)
        assert_true(max <= min + 1);
    else
        assert_true(max <= min + 1 ||
                    (int64_t)max * 100 * count <= (int64_t)(100 + c->cfg.imbalance_pct) * total);
}

static void sim_cluster(uint64_t seed)
{
    static const int pcts[] = {0, 0, 10, 50};
    static const int64_t delays[] = {0, 1000, 5000};
    uint64_t s = seed * 0x9e3779b97f4a7c15ULL + 1;
    cl *c = cl_new();
    c->cfg = (pl_config){.rebalance = rn(&s, 4) != 0,
                         .imbalance_pct = pcts[rn(&s, 4)],
                         .max_moves = (int)rn(&s, 5),
                         .rebalance_delay_ms = delays[rn(&s, 3)]};
    int zmode = (int)rn(&s, 3), tags = 0;
    int64_t now = 0;
    int32_t epochs[MAXP];
    int32_t first = 1 + (int32_t)rn(&s, 4);
    for (int32_t id = 0; id < first; id++)
        join(c, id, sim_zone(zmode, id), now);
    for (int step = 0; step < 120; step++) {
        sim_event(c, &s, zmode, &tags, now);
        sim_nodes(c, &s, now);
        now += rn(&s, 3000);
        for (size_t i = 0; i < c->nparts; i++)
            epochs[i] = c->parts[i].epoch;
        size_t cap = rn(&s, 2) ? BIG : 1 + rn(&s, 4);
        apply(c, plan_at(c, now, cap));
        for (size_t i = 0; i < c->nparts; i++)
            assert_true(c->parts[i].epoch >= epochs[i]);
    }
    /* Quiet down: someone to take everything, no more events. */
    if (!o_any_takes(c)) {
        for (int32_t id = 0; id < SIM_NODES && !o_any_takes(c); id++)
            if (!node_of(c, id))
                join(c, id, sim_zone(zmode, id), now);
    }
    for (int round = 0; round < 50; round++) {
        converge(c, &now);
        size_t before = c->nnodes;
        for (int k = 0; k < 4; k++)
            sim_nodes(c, &s, now); /* drained nodes leave */
        if (c->nnodes == before && in_flight(c) == 0)
            break;
    }
    converge(c, &now);
    check_quiet(c);
    free(c);
}

static void test_randomized(void **state)
{
    (void)state;
    for (uint64_t seed = 1; seed <= 300; seed++)
        sim_cluster(seed);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_place_three_zones),
        cmocka_unit_test(test_place_two_zones),
        cmocka_unit_test(test_place_zone_tiebreak),
        cmocka_unit_test(test_place_alternates_zones),
        cmocka_unit_test(test_place_without_zones),
        cmocka_unit_test(test_node_dies),
        cmocka_unit_test(test_node_restarts),
        cmocka_unit_test(test_node_restarts_without_zones),
        cmocka_unit_test(test_newer_log_is_not_dead),
        cmocka_unit_test(test_target_dies_in_flight),
        cmocka_unit_test(test_new_on_dead_node),
        cmocka_unit_test(test_active_on_marked_dead_log),
        cmocka_unit_test(test_custodian_died),
        cmocka_unit_test(test_custody_and_draining),
        cmocka_unit_test(test_draining),
        cmocka_unit_test(test_drain_keeps_topic_spread),
        cmocka_unit_test(test_rebalance_after_join),
        cmocka_unit_test(test_rebalance_spreads_each_topic),
        cmocka_unit_test(test_rebalance_threshold),
        cmocka_unit_test(test_rebalance_counts_in_flight),
        cmocka_unit_test(test_rebalance_spreads_topic),
        cmocka_unit_test(test_rejoin_gets_share_once),
        cmocka_unit_test(test_cap),
        cmocka_unit_test(test_no_live_nodes),
        cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_allocation_failure),
        cmocka_unit_test(test_names_and_loads),
        cmocka_unit_test(test_randomized),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
