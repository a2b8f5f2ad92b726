#include "placement.h"

#include <assert.h>
#include <stdlib.h>
#include <string.h>

#define NONE SIZE_MAX

/* Sort keys: every tie-break and every output order follows ids, never the
 * order of the input arrays, so that two controllers reading the same etcd
 * state in different orders plan the same actions. */
typedef struct node_key {
    int32_t id;
    size_t i;
} node_key;

typedef struct log_key {
    int64_t id;
    size_t i;
} log_key;

typedef struct part_key {
    kc_uuid topic;
    int32_t index;
    size_t i;
} part_key;

/* What a partition needs from rules 2 and 3, judged on the input. */
typedef enum { P_SETTLED, P_LOST, P_UNPLACED } p_need;

/* Invariants: eff[i] is the node index partition i counts on (NONE while it
 * is lost or unplaced and not yet given a node by this plan); load[k] is the
 * number of partitions with eff == k; part_done/log_done mark what this plan
 * already acted on; in_flight counts partitions moving or handing off once
 * the actions so far are applied. */
typedef struct plan {
    const pl_input *in;
    const pl_config *cfg;
    int64_t now_ms;
    pl_action *out;
    size_t cap, n;

    node_key *nodes;      /* by id; NULL: lookups scan in->nodes (pl_loads) */
    log_key *logs;        /* by id; NULL: lookups scan in->logs */
    part_key *parts;      /* by (topic, index) */
    size_t *group_of;     /* partition -> its topic's group */
    size_t *group_start;  /* group -> first position in parts[]; ngroups + 1 */
    size_t ngroups;
    size_t *zone_of;      /* node -> zone number */
    int32_t *zone_count;  /* scratch of choose_target, one per zone */
    size_t *last_zone;    /* group -> zone of this plan's last pick for it */
    unsigned char *need;  /* partition -> p_need */
    size_t *eff;
    int32_t *load;
    int32_t *custody;     /* node -> dead logs in its custody */
    unsigned char *part_done, *log_done;
    int64_t in_flight;
} plan;

const char *pl_act_name(pl_act_type t)
{
    switch (t) {
    case PL_ACT_CUSTODY:
        return "custody";
    case PL_ACT_PLACE:
        return "place";
    case PL_ACT_MOVE:
        return "move";
    case PL_ACT_RETARGET:
        return "retarget";
    }
    return "unknown";
}

/* ---- lookups ---- */

static int cmp_node_key(const void *a, const void *b)
{
    int32_t x = ((const node_key *)a)->id, y = ((const node_key *)b)->id;
    return (x > y) - (x < y);
}

static int cmp_log_key(const void *a, const void *b)
{
    int64_t x = ((const log_key *)a)->id, y = ((const log_key *)b)->id;
    return (x > y) - (x < y);
}

static int cmp_part_key(const void *a, const void *b)
{
    const part_key *x = a, *y = b;
    int c = memcmp(x->topic.b, y->topic.b, sizeof x->topic.b);
    if (c)
        return c;
    if (x->index != y->index)
        return (x->index > y->index) - (x->index < y->index);
    return (x->i > y->i) - (x->i < y->i);
}

static size_t node_at(const plan *p, int32_t id)
{
    if (p->nodes) {
        node_key k = {.id = id};
        const node_key *f = bsearch(&k, p->nodes, p->in->nnodes, sizeof k, cmp_node_key);
        return f ? f->i : NONE;
    }
    for (size_t i = 0; i < p->in->nnodes; i++)
        if (p->in->nodes[i].id == id)
            return i;
    return NONE;
}

static size_t log_at(const plan *p, int64_t id)
{
    if (p->logs) {
        log_key k = {.id = id};
        const log_key *f = bsearch(&k, p->logs, p->in->nlogs, sizeof k, cmp_log_key);
        return f ? f->i : NONE;
    }
    for (size_t i = 0; i < p->in->nlogs; i++)
        if (p->in->logs[i].id == id)
            return i;
    return NONE;
}

/* A node that may be given partitions. */
static bool takes(const plan *p, size_t node)
{
    return node != NONE && !p->in->nodes[node].draining;
}

/* Rule 1's test, also for a log etcd has no key for. Log ids grow, so a log
 * newer than its node's current one belongs to an incarnation that has not
 * republished its nodes/ key yet: it is not dead. */
static bool log_dead(const plan *p, int64_t log, int32_t node)
{
    size_t l = log_at(p, log);
    if (l != NONE && p->in->logs[l].state == PL_LOG_DEAD)
        return true;
    size_t n = node_at(p, node);
    return n == NONE || p->in->nodes[n].log > log;
}

static p_need need_of(const plan *p, const pl_part *pt)
{
    switch (pt->state) {
    case PL_NEW:
        return takes(p, node_at(p, pt->node)) ? P_SETTLED : P_UNPLACED;
    case PL_ACTIVE:
        return log_dead(p, pt->log, pt->node) ? P_LOST : P_SETTLED;
    case PL_MOVING:
    case PL_HANDOFF:
        return takes(p, node_at(p, pt->node)) ? P_SETTLED : P_LOST;
    }
    return P_SETTLED; /* a state this code does not know: leave it alone */
}

static bool needs_custody(const plan *p, const pl_log *lg)
{
    if (lg->state == PL_LOG_DEAD)
        return node_at(p, lg->custodian) == NONE;
    return log_dead(p, lg->id, lg->node);
}

void pl_loads(const pl_input *in, int32_t *load)
{
    plan p = {.in = in};
    for (size_t k = 0; k < in->nnodes; k++)
        load[k] = 0;
    for (size_t i = 0; i < in->nparts; i++)
        if (need_of(&p, &in->parts[i]) == P_SETTLED)
            load[node_at(&p, in->parts[i].node)]++;
}

/* ---- scratch ---- */

static void *zalloc(size_t n, size_t size)
{
    return calloc(n ? n : 1, size);
}

static void plan_free(plan *p)
{
    free(p->nodes);
    free(p->logs);
    free(p->parts);
    free(p->group_of);
    free(p->group_start);
    free(p->zone_of);
    free(p->zone_count);
    free(p->last_zone);
    free(p->need);
    free(p->eff);
    free(p->load);
    free(p->custody);
    free(p->part_done);
    free(p->log_done);
}

static bool plan_alloc(plan *p)
{
    const pl_input *in = p->in;
    p->nodes = zalloc(in->nnodes, sizeof *p->nodes);
    p->logs = zalloc(in->nlogs, sizeof *p->logs);
    p->parts = zalloc(in->nparts, sizeof *p->parts);
    p->group_of = zalloc(in->nparts, sizeof *p->group_of);
    p->group_start = zalloc(in->nparts + 1, sizeof *p->group_start);
    p->zone_of = zalloc(in->nnodes, sizeof *p->zone_of);
    p->zone_count = zalloc(in->nnodes, sizeof *p->zone_count);
    p->last_zone = zalloc(in->nparts, sizeof *p->last_zone);
    p->need = zalloc(in->nparts, sizeof *p->need);
    p->eff = zalloc(in->nparts, sizeof *p->eff);
    p->load = zalloc(in->nnodes, sizeof *p->load);
    p->custody = zalloc(in->nnodes, sizeof *p->custody);
    p->part_done = zalloc(in->nparts, sizeof *p->part_done);
    p->log_done = zalloc(in->nlogs, sizeof *p->log_done);
    return p->nodes && p->logs && p->parts && p->group_of && p->group_start && p->zone_of &&
           p->zone_count && p->last_zone && p->need && p->eff && p->load && p->custody &&
           p->part_done && p->log_done;
}

static bool same_zone(const char *a, const char *b)
{
    return strncmp(a, b, PL_ZONE_MAX) == 0;
}

static void index_nodes(plan *p)
{
    const pl_input *in = p->in;
    for (size_t k = 0; k < in->nnodes; k++)
        p->nodes[k] = (node_key){in->nodes[k].id, k};
    qsort(p->nodes, in->nnodes, sizeof *p->nodes, cmp_node_key);
    /* Zones are numbered in node id order; nodes without a zone share one. */
    size_t nzones = 0;
    for (size_t a = 0; a < in->nnodes; a++) {
        size_t k = p->nodes[a].i, z = nzones;
        for (size_t b = 0; b < a && z == nzones; b++)
            if (same_zone(in->nodes[p->nodes[b].i].zone, in->nodes[k].zone))
                z = p->zone_of[p->nodes[b].i];
        p->zone_of[k] = z;
        nzones += z == nzones;
    }
}

static void index_logs(plan *p)
{
    const pl_input *in = p->in;
    for (size_t l = 0; l < in->nlogs; l++)
        p->logs[l] = (log_key){in->logs[l].id, l};
    qsort(p->logs, in->nlogs, sizeof *p->logs, cmp_log_key);
    for (size_t l = 0; l < in->nlogs; l++) {
        const pl_log *lg = &in->logs[l];
        size_t c = node_at(p, lg->custodian);
        if (lg->state == PL_LOG_DEAD && c != NONE)
            p->custody[c]++;
    }
}

static void index_parts(plan *p)
{
    const pl_input *in = p->in;
    for (size_t i = 0; i < in->nparts; i++)
        p->parts[i] = (part_key){in->parts[i].topic, in->parts[i].index, i};
    qsort(p->parts, in->nparts, sizeof *p->parts, cmp_part_key);
    for (size_t pos = 0; pos < in->nparts; pos++) {
        if (pos == 0 || memcmp(&p->parts[pos].topic, &p->parts[pos - 1].topic,
                               sizeof(kc_uuid)) != 0)
            p->group_start[p->ngroups++] = pos;
        p->group_of[p->parts[pos].i] = p->ngroups - 1;
    }
    p->group_start[p->ngroups] = in->nparts;
    for (size_t g = 0; g < p->ngroups; g++)
        p->last_zone[g] = NONE;
    for (size_t i = 0; i < in->nparts; i++) {
        const pl_part *pt = &in->parts[i];
        p->need[i] = (unsigned char)need_of(p, pt);
        p->eff[i] = p->need[i] == P_SETTLED ? node_at(p, pt->node) : NONE;
        if (p->eff[i] != NONE)
            p->load[p->eff[i]]++;
        if (pt->state == PL_MOVING || pt->state == PL_HANDOFF)
            p->in_flight++;
    }
}

static bool plan_init(plan *p)
{
    if (!plan_alloc(p))
        return false;
    index_nodes(p);
    index_logs(p);
    index_parts(p);
    return true;
}

/* ---- choices ---- */

static bool full(const plan *p)
{
    return p->n >= p->cap;
}

/* A partition this plan may still act on; an epoch that cannot grow any more
 * is left alone rather than wrapped. */
static bool part_open(const plan *p, size_t i)
{
    return !p->part_done[i] && p->in->parts[i].epoch < INT32_MAX;
}

/* Custodian: a node that takes partitions before a draining one (which would
 * hand custody on again soon), then one of the log's zone (its replay reads
 * stay in the zone; a log without a zone prefers none), then the fewest logs
 * in custody. */
static bool better_custodian(const plan *p, const pl_log *lg, size_t a, size_t b)
{
    const pl_node *na = &p->in->nodes[a], *nb = &p->in->nodes[b];
    if (na->draining != nb->draining)
        return !na->draining;
    bool fa = lg->zone[0] && !same_zone(lg->zone, na->zone);
    bool fb = lg->zone[0] && !same_zone(lg->zone, nb->zone);
    if (fa != fb)
        return !fa;
    return p->custody[a] < p->custody[b];
}

/* The walk in id order settles the remaining ties, to the lowest id. */
static size_t choose_custodian(const plan *p, const pl_log *lg)
{
    size_t best = NONE;
    for (size_t a = 0; a < p->in->nnodes; a++) {
        size_t k = p->nodes[a].i;
        if (best == NONE || better_custodian(p, lg, k, best))
            best = k;
    }
    return best;
}

static bool better_target(const plan *p, size_t g, size_t a, size_t b)
{
    if (p->load[a] != p->load[b])
        return p->load[a] < p->load[b];
    int32_t za = p->zone_count[p->zone_of[a]], zb = p->zone_count[p->zone_of[b]];
    if (za != zb)
        return za < zb;
    bool ra = p->zone_of[a] == p->last_zone[g], rb = p->zone_of[b] == p->last_zone[g];
    return !ra && rb;
}

/* The target rule of the header. The partition itself is left out of its
 * topic's zone counts: the place it leaves is no reason to avoid a zone. */
static size_t choose_target(plan *p, size_t part)
{
    size_t g = p->group_of[part];
    memset(p->zone_count, 0, p->in->nnodes * sizeof *p->zone_count);
    for (size_t pos = p->group_start[g]; pos < p->group_start[g + 1]; pos++) {
        size_t q = p->parts[pos].i;
        if (q != part && p->eff[q] != NONE)
            p->zone_count[p->zone_of[p->eff[q]]]++;
    }
    size_t best = NONE;
    for (size_t a = 0; a < p->in->nnodes; a++) {
        size_t k = p->nodes[a].i;
        if (takes(p, k) && (best == NONE || better_target(p, g, k, best)))
            best = k;
    }
    return best;
}

/* ---- actions ---- */

static void emit_custody(plan *p, size_t log, size_t node)
{
    assert(!full(p) && !p->log_done[log] && node != NONE);
    p->out[p->n++] = (pl_action){.type = PL_ACT_CUSTODY,
                                 .part = NONE,
                                 .log = log,
                                 .node = p->in->nodes[node].id,
                                 .epoch = 0,
                                 .src_log = -1};
    p->log_done[log] = 1;
    p->custody[node]++;
}

static void emit_part(plan *p, pl_act_type type, size_t part, size_t node, int64_t src_log)
{
    const pl_part *pt = &p->in->parts[part];
    assert(!full(p) && part_open(p, part) && takes(p, node));
    assert(type != PL_ACT_CUSTODY);
    p->out[p->n++] = (pl_action){.type = type,
                                 .part = part,
                                 .log = NONE,
                                 .node = p->in->nodes[node].id,
                                 .epoch = pt->epoch + 1,
                                 .src_log = src_log};
    p->part_done[part] = 1;
    if (p->eff[part] != NONE)
        p->load[p->eff[part]]--;
    p->eff[part] = node;
    p->load[node]++;
    p->last_zone[p->group_of[part]] = p->zone_of[node];
    if (type == PL_ACT_MOVE || (type == PL_ACT_RETARGET && pt->state == PL_ACTIVE))
        p->in_flight++;
}

/* ---- the decisions, most urgent first ---- */

static void plan_custody(plan *p)
{
    for (size_t a = 0; a < p->in->nlogs && !full(p); a++) {
        size_t l = p->logs[a].i;
        const pl_log *lg = &p->in->logs[l];
        if (needs_custody(p, lg))
            emit_custody(p, l, choose_custodian(p, lg));
    }
}

static void plan_lost(plan *p)
{
    for (size_t pos = 0; pos < p->in->nparts && !full(p); pos++) {
        size_t i = p->parts[pos].i;
        const pl_part *pt = &p->in->parts[i];
        if (p->need[i] != P_LOST || !part_open(p, i))
            continue;
        size_t t = choose_target(p, i);
        if (t == NONE)
            return;
        emit_part(p, PL_ACT_RETARGET, i, t, pt->state == PL_ACTIVE ? pt->log : pt->src_log);
    }
}

static void plan_place(plan *p)
{
    for (size_t pos = 0; pos < p->in->nparts && !full(p); pos++) {
        size_t i = p->parts[pos].i;
        if (p->need[i] != P_UNPLACED || !part_open(p, i))
            continue;
        size_t t = choose_target(p, i);
        if (t == NONE)
            return;
        emit_part(p, PL_ACT_PLACE, i, t, -1);
    }
}

/* Draining is not bounded by max_moves: the node waits for it to exit. */
static void plan_drain(plan *p)
{
    for (size_t pos = 0; pos < p->in->nparts && !full(p); pos++) {
        size_t i = p->parts[pos].i;
        const pl_part *pt = &p->in->parts[i];
        if (p->need[i] != P_SETTLED || pt->state != PL_ACTIVE || !part_open(p, i) ||
            !p->in->nodes[p->eff[i]].draining)
            continue;
        size_t t = choose_target(p, i);
        if (t == NONE)
            return;
        emit_part(p, PL_ACT_MOVE, i, t, pt->log);
    }
}

/* The most loaded node that takes partitions; ties to the lowest id. */
static size_t most_loaded(const plan *p)
{
    size_t best = NONE;
    for (size_t a = 0; a < p->in->nnodes; a++) {
        size_t k = p->nodes[a].i;
        if (takes(p, k) && (best == NONE || p->load[k] > p->load[best]))
            best = k;
    }
    return best;
}

static bool imbalanced(const plan *p, size_t src)
{
    int64_t total = 0, count = 0, min = INT64_MAX;
    for (size_t k = 0; k < p->in->nnodes; k++) {
        if (!takes(p, k))
            continue;
        total += p->load[k];
        count++;
        min = p->load[k] < min ? p->load[k] : min;
    }
    int64_t max = p->load[src];
    int64_t pct = p->cfg->imbalance_pct > 0 ? p->cfg->imbalance_pct : 0;
    return max > min + 1 && max * 100 * count > (100 + pct) * total;
}

static bool movable(const plan *p, size_t i, size_t src)
{
    return p->eff[i] == src && p->need[i] == P_SETTLED && p->in->parts[i].state == PL_ACTIVE &&
           part_open(p, i);
}

/* The least loaded node that takes partitions (ties to the lowest id): where
 * a move from the most loaded one goes. */
static size_t least_loaded(const plan *p)
{
    size_t best = NONE;
    for (size_t a = 0; a < p->in->nnodes; a++) {
        size_t k = p->nodes[a].i;
        if (takes(p, k) && (best == NONE || p->load[k] < p->load[best]))
            best = k;
    }
    return best;
}

/* The lowest-numbered active partition on src of the topic whose spread
 * between src and dst is widest (it holds the most on src and the fewest on
 * dst), ties to the topic with the most on src, then the lowest topic id:
 * every move evens a topic as well as the loads, so that each topic ends
 * spread over the nodes, not only the total. */
static size_t pick_movable(const plan *p, size_t src, size_t dst)
{
    size_t best = NONE;
    int32_t best_gap = INT32_MIN, best_on_src = 0;
    for (size_t g = 0; g < p->ngroups; g++) {
        size_t first = NONE;
        int32_t on_src = 0, on_dst = 0;
        for (size_t pos = p->group_start[g]; pos < p->group_start[g + 1]; pos++) {
            size_t q = p->parts[pos].i;
            on_src += p->eff[q] == src;
            on_dst += dst != NONE && p->eff[q] == dst;
            if (first == NONE && movable(p, q, src))
                first = q;
        }
        int32_t gap = on_src - on_dst;
        if (first != NONE &&
            (gap > best_gap || (gap == best_gap && on_src > best_on_src))) {
            best = first;
            best_gap = gap;
            best_on_src = on_src;
        }
    }
    return best;
}

static void plan_rebalance(plan *p)
{
    const pl_config *c = p->cfg;
    if (!c->rebalance || c->max_moves <= 0 ||
        p->now_ms - p->in->nodes_changed_ms < c->rebalance_delay_ms)
        return;
    while (!full(p) && p->in_flight < c->max_moves) {
        size_t src = most_loaded(p);
        if (src == NONE || !imbalanced(p, src))
            return;
        size_t i = pick_movable(p, src, least_loaded(p));
        if (i == NONE)
            return; /* what weighs on src is still landing: wait for it */
        size_t t = choose_target(p, i);
        assert(t != NONE && p->load[t] + 1 < p->load[src]);
        emit_part(p, PL_ACT_MOVE, i, t, p->in->parts[i].log);
    }
}

size_t pl_plan(const pl_input *in, const pl_config *cfg, int64_t now_ms, pl_action *out,
               size_t cap)
{
    assert(in && cfg && (out || cap == 0));
    if (cap == 0 || in->nnodes == 0)
        return 0;
    plan p = {.in = in, .cfg = cfg, .now_ms = now_ms, .out = out, .cap = cap};
    if (plan_init(&p)) {
        plan_custody(&p);
        plan_lost(&p);
        plan_place(&p);
        plan_drain(&p);
        plan_rebalance(&p);
    }
    plan_free(&p);
    assert(p.n <= cap);
    return p.n;
}
