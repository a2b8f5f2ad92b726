#include "controller.h"

#include <event2/event.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "etcd.h"
#include "node.h"
#include "placement.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

#define KEY_MAX 512
#define DEBOUNCE_MS 5
#define TICK_MS 1000
#define PLAN_CAP 512

/* A move an administrator asked of this node, until the partition serves
 * at its target. */
typedef struct reassign {
    kc_uuid topic;
    int32_t part, epoch; /* the move's epoch */
    bool confirmed;      /* etcd took it */
} reassign;

struct move;
static void detach_moves(sk_controller *ctl);

struct sk_controller {
    sk_cluster *c;
    sk_node *n;
    bool active;
    bool planned;     /* a round is due */
    int inflight;     /* transactions of the last round not answered yet */
    struct event *round_ev, *tick_ev;
    /* the set of live nodes, to tell when it changed */
    int32_t *live;
    size_t nlive;
    int64_t nodes_changed_ms;
    sk_controller_stats st;
    reassign *ra; /* reassignments not done yet */
    size_t nra, cra;
    uint64_t ra_done;   /* done in the current reassignment run */
    struct move *moves; /* etcd transactions of reassignments not answered */
};

/* ---- what etcd says, as placement's input ---- */

typedef struct input {
    pl_input in;
    pl_node *nodes;
    pl_part *parts;
    pl_log *logs;
    const cm_part **mparts; /* parts[i] comes from mparts[i] */
    const cm_log **mlogs;
} input;

static void input_free(input *x)
{
    free(x->nodes);
    free(x->parts);
    free(x->logs);
    free(x->mparts);
    free(x->mlogs);
}

static pl_state pstate_of(cm_part_state s)
{
    switch (s) {
    case CM_PART_NEW:
        return PL_NEW;
    case CM_PART_ACTIVE:
        return PL_ACTIVE;
    case CM_PART_MOVING:
        return PL_MOVING;
    case CM_PART_HANDOFF:
        return PL_HANDOFF;
    }
    return PL_NEW;
}

static size_t count_parts(cm_model *m)
{
    size_t it = 0, n = 0;
    while (cm_part_next(m, &it))
        n++;
    return n;
}

static int build_input(sk_controller *ctl, input *x)
{
    cm_model *m = sk_cluster_model(ctl->c);
    memset(x, 0, sizeof *x);
    size_t nn, nl;
    const cm_node *nodes = cm_nodes(m, &nn);
    const cm_log *logs = cm_logs(m, &nl);
    size_t np = count_parts(m);
    x->nodes = calloc(nn + 1, sizeof *x->nodes);
    x->logs = calloc(nl + 1, sizeof *x->logs);
    x->mlogs = calloc(nl + 1, sizeof *x->mlogs);
    x->parts = calloc(np + 1, sizeof *x->parts);
    x->mparts = calloc(np + 1, sizeof *x->mparts);
    if (!x->nodes || !x->logs || !x->mlogs || !x->parts || !x->mparts)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < nn; i++) {
        pl_node *p = &x->nodes[i];
        p->id = nodes[i].id;
        snprintf(p->zone, sizeof p->zone, "%s", nodes[i].rack);
        p->log = nodes[i].log;
        p->draining = nodes[i].draining;
    }
    for (size_t i = 0; i < nl; i++) {
        pl_log *l = &x->logs[i];
        l->id = logs[i].id;
        l->node = logs[i].node;
        snprintf(l->zone, sizeof l->zone, "%s", logs[i].rack);
        l->state = logs[i].state == CM_LOG_DEAD ? PL_LOG_DEAD : PL_LOG_LIVE;
        l->custodian = logs[i].custodian;
        x->mlogs[i] = &logs[i];
    }
    size_t it = 0, k = 0;
    const cm_part *cp;
    while ((cp = cm_part_next(m, &it)) != NULL && k < np) {
        pl_part *p = &x->parts[k];
        p->topic = cp->topic;
        p->index = cp->index;
        p->state = pstate_of(cp->state);
        p->epoch = cp->epoch;
        p->node = cp->node;
        p->log = cp->log;
        p->src_log = cp->src_log;
        x->mparts[k++] = cp;
    }
    x->in = (pl_input){x->nodes, nn, x->parts, k, x->logs, nl, ctl->nodes_changed_ms};
    return 0;
}

/* The set of live nodes changed since the last round? */
static void note_nodes(sk_controller *ctl, const pl_input *in)
{
    bool same = in->nnodes == ctl->nlive;
    for (size_t i = 0; same && i < in->nnodes; i++)
        same = ctl->live[i] == in->nodes[i].id;
    if (same)
        return;
    int32_t *nl = realloc(ctl->live, (in->nnodes + 1) * sizeof *nl);
    if (!nl)
        return;
    ctl->live = nl;
    ctl->nlive = in->nnodes;
    char ids[256];
    size_t off = 0;
    ids[0] = 0;
    for (size_t i = 0; i < in->nnodes; i++) {
        nl[i] = in->nodes[i].id;
        if (off < sizeof ids)
            off += (size_t)snprintf(ids + off, sizeof ids - off, "%s%d", i ? "," : "", nl[i]);
    }
    ctl->nodes_changed_ms = sk_mono_ms();
    SK_INFO("controller", "live nodes now: %s", in->nnodes ? ids : "none");
}

/* ---- carrying actions out ---- */

static void action_done(void *arg, int err, const etcd_txn_result *r)
{
    sk_controller *ctl = arg;
    ctl->inflight--;
    if (err)
        ctl->st.failures++;
    else if (!r->succeeded)
        ctl->st.conflicts++;
    if (ctl->inflight == 0 && ctl->active)
        sk_controller_kick(ctl);
}

static int cas_put(sk_controller *ctl, const char *key, size_t kl, int64_t mod_rev, char *val)
{
    if (!val)
        return SK_ERR_NOMEM;
    etcd_cmp cmp = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_MOD,
                    .result = ETCD_CMP_EQUAL, .number = mod_rev};
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = strlen(val)};
    int rc = etcd_txn(cs_etcd(sk_cluster_session(ctl->c)), &cmp, 1, &put, 1, NULL, 0, action_done,
                      ctl);
    free(val);
    if (rc == 0)
        ctl->inflight++;
    return rc;
}

static int do_custody(sk_controller *ctl, const cm_log *ml, int32_t node)
{
    cm_log l = *ml;
    l.state = CM_LOG_DEAD;
    l.custodian = node;
    char key[KEY_MAX];
    size_t kl = cm_key_log(cs_prefix(sk_cluster_session(ctl->c)), l.id, key, sizeof key);
    SK_INFO("controller", "log %lld of node %d is dead: node %d takes it into custody",
            (long long)l.id, l.node, node);
    ctl->st.custody++;
    return cas_put(ctl, key, kl, ml->mod_rev, cm_encode_log(&l));
}

/* The partition's next value for a PLACE, MOVE or RETARGET. A placement
 * and a rebalancing move say where the partition belongs from now on (its
 * preferred node); a drain's move and a retarget after a failure do not, so
 * that ElectLeaders can bring it back. */
static cm_part next_value(const cm_part *cp, const pl_action *a, bool src_draining)
{
    cm_part p = *cp;
    p.node = a->node;
    p.epoch = a->epoch;
    switch (a->type) {
    case PL_ACT_PLACE:
        p.state = CM_PART_NEW;
        p.log = p.src_log = p.src_lsn = 0;
        p.has_pref = true;
        p.pref = a->node;
        break;
    case PL_ACT_MOVE:
        if (!src_draining) {
            p.has_pref = true;
            p.pref = a->node;
        }
        p.state = CM_PART_MOVING;
        p.src_log = a->src_log;
        p.src_lsn = 0;
        p.log = 0;
        break;
    default: /* RETARGET: a handoff keeps its record, the rest moves on */
        if (cp->state == CM_PART_HANDOFF)
            break;
        if (cp->state == CM_PART_NEW) {
            p.log = 0;
            break;
        }
        p.state = CM_PART_MOVING;
        p.src_log = a->src_log;
        p.src_lsn = 0;
        p.log = 0;
        break;
    }
    return p;
}

static int do_part(sk_controller *ctl, const cm_part *cp, const pl_action *a)
{
    const cm_node *src = cm_node_get(sk_cluster_model(ctl->c), cp->node);
    cm_part p = next_value(cp, a, src && src->draining);
    char key[KEY_MAX];
    size_t kl = cm_key_part(cs_prefix(sk_cluster_session(ctl->c)), &cp->topic, cp->index, key,
                            sizeof key);
    if (a->type == PL_ACT_PLACE)
        ctl->st.placed++;
    else if (a->type == PL_ACT_MOVE)
        ctl->st.moved++;
    else
        ctl->st.retargeted++;
    return cas_put(ctl, key, kl, cp->mod_rev, cm_encode_part(&p));
}

static void log_round(const pl_action *acts, size_t n)
{
    size_t counts[4] = {0};
    for (size_t i = 0; i < n; i++)
        counts[acts[i].type]++;
    SK_INFO("controller", "round: %zu custody, %zu placed, %zu moved, %zu retargeted",
            counts[PL_ACT_CUSTODY], counts[PL_ACT_PLACE], counts[PL_ACT_MOVE],
            counts[PL_ACT_RETARGET]);
}

/* ---- progress (progress.h) ---- */

static uint64_t count_moving(const pl_input *in)
{
    uint64_t n = 0;
    for (size_t i = 0; i < in->nparts; i++)
        n += in->parts[i].state == PL_MOVING || in->parts[i].state == PL_HANDOFF;
    return n;
}

/* Moves placement would still start, were there no limit on moves in flight. */
static uint64_t count_to_move(const pl_input *in, const pl_config *pc, int64_t now)
{
    pl_config all = *pc;
    all.max_moves = in->nparts < INT_MAX ? (int)in->nparts + 1 : INT_MAX;
    size_t cap = in->nparts + in->nlogs + 1;
    pl_action *acts = calloc(cap, sizeof *acts);
    if (!acts)
        return 0;
    size_t n = pl_plan(in, &all, now, acts, cap);
    uint64_t moves = 0;
    for (size_t i = 0; i < n; i++)
        moves += acts[i].type == PL_ACT_MOVE;
    free(acts);
    return moves;
}

/* done + left = total, the total growing when more work appears. */
static void track(sk_progress *pr, sk_work_kind k, uint64_t left)
{
    const sk_work *w = &pr->w[k];
    uint64_t done = atomic_load(&w->done), total = w->total;
    if (done + left > total)
        total = done + left;
    else
        done = total - left;
    sk_progress_set(pr, k, done, total);
}

static void track_rebalance(sk_controller *ctl, const pl_input *in, const pl_config *pc,
                            int64_t now)
{
    sk_progress *pr = &ctl->n->progress;
    uint64_t left = count_moving(in) + count_to_move(in, pc, now);
    if (!sk_progress_running(pr, SK_WORK_REBALANCE)) {
        if (left)
            sk_progress_begin(pr, SK_WORK_REBALANCE, left, false);
        return;
    }
    track(pr, SK_WORK_REBALANCE, left);
    if (left == 0)
        sk_progress_end(pr, SK_WORK_REBALANCE, NULL, true);
}

static bool reassign_done(cm_model *m, const reassign *r)
{
    const cm_part *cp = cm_part_get(m, &r->topic, r->part);
    return r->confirmed && (!cp || (cp->epoch >= r->epoch && cp->state == CM_PART_ACTIVE));
}

static void track_reassigns(sk_controller *ctl)
{
    sk_progress *pr = &ctl->n->progress;
    bool running = sk_progress_running(pr, SK_WORK_REASSIGN);
    if (!running && ctl->nra == 0)
        return;
    if (!running) {
        sk_progress_begin(pr, SK_WORK_REASSIGN, ctl->nra, false);
        ctl->ra_done = 0;
    }
    cm_model *m = sk_cluster_model(ctl->c);
    size_t k = 0;
    for (size_t i = 0; i < ctl->nra; i++) {
        if (reassign_done(m, &ctl->ra[i]))
            ctl->ra_done++;
        else
            ctl->ra[k++] = ctl->ra[i];
    }
    ctl->nra = k;
    sk_progress_set(pr, SK_WORK_REASSIGN, ctl->ra_done, ctl->ra_done + ctl->nra);
    if (ctl->nra == 0)
        sk_progress_end(pr, SK_WORK_REASSIGN, NULL, true);
}

static void reassign_add(sk_controller *ctl, const kc_uuid *topic, int32_t part, int32_t epoch)
{
    if (ctl->nra == ctl->cra) {
        size_t cap = ctl->cra ? ctl->cra * 2 : 16;
        reassign *v = realloc(ctl->ra, cap * sizeof *v);
        if (!v)
            return; /* not counted: progress is a report, the move goes on */
        ctl->ra = v;
        ctl->cra = cap;
    }
    ctl->ra[ctl->nra++] = (reassign){*topic, part, epoch, false};
}

/* etcd answered the move: confirmed, or forgotten (it did not happen). */
static void reassign_settle(sk_controller *ctl, const kc_uuid *topic, int32_t part,
                            int32_t epoch, bool took)
{
    for (size_t i = 0; i < ctl->nra; i++) {
        reassign *r = &ctl->ra[i];
        if (r->part != part || r->epoch != epoch || memcmp(&r->topic, topic, sizeof *topic))
            continue;
        if (took)
            r->confirmed = true;
        else
            ctl->ra[i] = ctl->ra[--ctl->nra];
        return;
    }
}

static void round_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_controller *ctl = arg;
    ctl->planned = false;
    if (!ctl->active || ctl->inflight > 0)
        return; /* their answers plan the next round */
    input x;
    if (build_input(ctl, &x) != 0) {
        input_free(&x);
        return;
    }
    note_nodes(ctl, &x.in);
    x.in.nodes_changed_ms = ctl->nodes_changed_ms;
    const sk_config *cfg = ctl->n->cfg;
    pl_config pc = {cfg->auto_leader_rebalance_enable, cfg->leader_imbalance_per_broker_percentage,
                    cfg->cluster_max_moves, cfg->leader_imbalance_check_interval_seconds * 1000};
    int64_t now = sk_mono_ms();
    track_rebalance(ctl, &x.in, &pc, now);
    pl_action *acts = calloc(PLAN_CAP, sizeof *acts);
    size_t n = acts ? pl_plan(&x.in, &pc, now, acts, PLAN_CAP) : 0;
    ctl->st.rounds++;
    if (n)
        log_round(acts, n);
    for (size_t i = 0; i < n; i++) {
        const pl_action *a = &acts[i];
        int rc = a->type == PL_ACT_CUSTODY ? do_custody(ctl, x.mlogs[a->log], a->node)
                                           : do_part(ctl, x.mparts[a->part], a);
        if (rc)
            ctl->st.failures++;
        else
            ctl->st.actions++;
    }
    free(acts);
    input_free(&x);
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_controller_kick(arg);
}

/* ---- life ---- */

sk_controller *sk_controller_new(sk_cluster *c)
{
    sk_controller *ctl = calloc(1, sizeof *ctl);
    if (!ctl)
        return NULL;
    ctl->c = c;
    ctl->n = sk_cluster_node(c);
    ctl->round_ev = evtimer_new(ctl->n->base, round_cb, ctl);
    ctl->tick_ev = event_new(ctl->n->base, -1, EV_PERSIST, tick_cb, ctl);
    if (!ctl->round_ev || !ctl->tick_ev) {
        sk_controller_destroy(ctl);
        return NULL;
    }
    ctl->nodes_changed_ms = sk_mono_ms();
    return ctl;
}

void sk_controller_destroy(sk_controller *ctl)
{
    if (!ctl)
        return;
    if (ctl->round_ev)
        event_free(ctl->round_ev);
    if (ctl->tick_ev)
        event_free(ctl->tick_ev);
    detach_moves(ctl);
    free(ctl->live);
    free(ctl->ra);
    free(ctl);
}

void sk_controller_set_active(sk_controller *ctl, bool on)
{
    if (on == ctl->active)
        return;
    ctl->active = on;
    if (on) {
        /* Time-based decisions count from now: a new controller does not
         * know when the nodes last changed. */
        ctl->nodes_changed_ms = sk_mono_ms();
        struct timeval tv = {TICK_MS / 1000, (TICK_MS % 1000) * 1000};
        event_add(ctl->tick_ev, &tv);
        sk_controller_kick(ctl);
    } else {
        event_del(ctl->tick_ev);
        event_del(ctl->round_ev);
        ctl->planned = false;
        sk_progress_end(&ctl->n->progress, SK_WORK_REBALANCE, "controller duties given up",
                        true);
    }
}

void sk_controller_kick(sk_controller *ctl)
{
    if (!ctl)
        return;
    track_reassigns(ctl);
    if (!ctl->active || ctl->planned)
        return;
    ctl->planned = true;
    struct timeval tv = {0, DEBOUNCE_MS * 1000};
    evtimer_add(ctl->round_ev, &tv);
}

void sk_controller_get_stats(const sk_controller *ctl, sk_controller_stats *st)
{
    *st = ctl->st;
}

/* ---- moves asked for by an administrator ---- */

typedef struct move {
    void (*fn)(void *arg, int16_t err);
    void *arg;
    sk_controller *ctl; /* NULL once the controller is gone */
    struct move *next;  /* in ctl->moves */
    kc_uuid topic;
    int32_t part, epoch;
} move;

static void unlink_move(move *mv)
{
    if (!mv->ctl)
        return;
    for (move **pp = &mv->ctl->moves; *pp; pp = &(*pp)->next)
        if (*pp == mv) {
            *pp = mv->next;
            break;
        }
}

static void detach_moves(sk_controller *ctl)
{
    for (move *mv = ctl->moves; mv; mv = mv->next)
        mv->ctl = NULL;
    ctl->moves = NULL;
}

static void move_done(void *arg, int err, const etcd_txn_result *r)
{
    move *mv = arg;
    int16_t code = 0;
    if (err)
        code = SK_KAFKA_REQUEST_TIMED_OUT;
    else if (!r->succeeded)
        code = SK_KAFKA_REASSIGNMENT_IN_PROGRESS; /* it changed meanwhile */
    if (mv->ctl) {
        unlink_move(mv);
        reassign_settle(mv->ctl, &mv->topic, mv->part, mv->epoch, code == 0);
    }
    mv->fn(mv->arg, code);
    free(mv);
}

static void move_noop(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    move *mv = arg;
    mv->fn(mv->arg, 0);
    free(mv);
}

/* The move counts as reassignment work from now on; its answer settles it. */
static void track_move(sk_controller *ctl, move *mv, const kc_uuid *topic, int32_t part,
                       int32_t epoch)
{
    if (!ctl)
        return;
    mv->ctl = ctl;
    mv->topic = *topic;
    mv->part = part;
    mv->epoch = epoch;
    mv->next = ctl->moves;
    ctl->moves = mv;
    reassign_add(ctl, topic, part, epoch);
}

int16_t sk_controller_move(sk_cluster *c, const kc_uuid *topic, int32_t part, int32_t node,
                           void (*fn)(void *arg, int16_t err), void *arg)
{
    cm_model *m = sk_cluster_model(c);
    const cm_part *cp = cm_part_get(m, topic, part);
    if (!cp)
        return SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
    const cm_node *target = cm_node_get(m, node);
    if (!target || target->draining)
        return SK_KAFKA_INVALID_REPLICA_ASSIGNMENT;
    if (cp->state != CM_PART_ACTIVE)
        return SK_KAFKA_REASSIGNMENT_IN_PROGRESS;
    move *mv = calloc(1, sizeof *mv);
    if (!mv)
        return SK_KAFKA_REQUEST_TIMED_OUT;
    mv->fn = fn;
    mv->arg = arg;
    if (cp->node == node) {
        /* There already: answered from the loop, never inside the call. */
        if (event_base_once(sk_cluster_node(c)->base, -1, EV_TIMEOUT, move_noop, mv, NULL) != 0) {
            free(mv);
            return SK_KAFKA_REQUEST_TIMED_OUT;
        }
        return 0;
    }
    cm_part p = *cp;
    p.state = CM_PART_MOVING;
    p.src_log = cp->log;
    p.src_lsn = 0;
    p.log = 0;
    p.node = node;
    p.epoch = cp->epoch + 1;
    p.has_pref = true; /* a reassignment says where it belongs */
    p.pref = node;
    char key[KEY_MAX];
    cs_session *s = sk_cluster_session(c);
    size_t kl = cm_key_part(cs_prefix(s), topic, part, key, sizeof key);
    char *val = cm_encode_part(&p);
    etcd_cmp cmp = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_MOD,
                    .result = ETCD_CMP_EQUAL, .number = cp->mod_rev};
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = val ? strlen(val) : 0};
    int rc = val ? etcd_txn(cs_etcd(s), &cmp, 1, &put, 1, NULL, 0, move_done, mv) : SK_ERR_NOMEM;
    free(val);
    if (rc) {
        free(mv);
        return SK_KAFKA_REQUEST_TIMED_OUT;
    }
    track_move(sk_cluster_ctl(c), mv, topic, part, p.epoch);
    return 0;
}
