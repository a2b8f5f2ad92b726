#include "proxied.h"

#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cmodel.h"
#include "confirm.h"
#include "config.h"
#include "kbatch.h"
#include "node.h"
#include "payload.h"
#include "plog.h"
#include "route.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

/* A batch from its append to the payload log until its producer's answer. */
typedef struct pentry {
    sk_proxy *x;
    kc_uuid id;
    int32_t part;
    int32_t main;
    int64_t mlog; /* the main's log when the confirm went out */
    cf_batch b;
    int64_t deadline_us;
    sk_proxy_fn fn;
    void *arg;
} pentry;

/* A hold whose release waits: for the model to reach `until` (a batch the
 * main answered), or, for a batch whose confirm timed out, for a definite
 * answer: the main's payref passed it, its log is gone, or, asked again
 * after the batch's deadline, the main says it linked it or refuses it. */
typedef struct later {
    struct later *next;
    sk_proxy *x;
    wal_lsn lsn;
    int64_t until; /* > 0: a revision */
    int64_t mlog;  /* else: the main's log, */
    int32_t main;  /* its node, */
    cf_batch b;    /* and the batch to ask about */
    bool asking;
} later;

struct sk_proxy {
    sk_node *n;
    sk_cluster *c;
    pay_log *pl;
    int64_t plog;
    cf_client *cf;
    later *later; /* a list */
    bool closing;
    sk_proxy_stats st;
};

/* ---- holds ---- */

/* After this long past its deadline (ms), a batch's main is asked again:
 * clocks of nodes differ by less. */
#define CLOCK_SKEW_MS 5000

static void release_later(sk_proxy *x, wal_lsn lsn, int64_t until, const pentry *e)
{
    later *l = calloc(1, sizeof *l);
    if (!l)
        return; /* held until the node stops: safe */
    *l = (later){.next = x->later, .x = x, .lsn = lsn, .until = until};
    if (e) {
        l->mlog = e->mlog;
        l->main = e->main;
        l->b = e->b;
    }
    x->later = l;
}

static bool may_release(sk_proxy *x, const cm_model *m, const later *l)
{
    if (l->until > 0)
        return cm_revision(m) >= l->until;
    const cm_payref *pr = cm_payref_get(m, x->plog, l->mlog);
    if (pr)
        return pr->lsn > (int64_t)l->lsn;
    const cm_log *ml = cm_log_get(m, l->mlog);
    return !ml || ml->state != CM_LOG_LIVE;
}

static void resolved(void *arg, int err, const cf_answer *a)
{
    later *l = arg;
    l->asking = false;
    if (err || l->x->closing)
        return; /* asked again at a later tick */
    if (a->error == 0)
        l->until = a->payref_revision > 0 ? a->payref_revision : 1; /* linked */
    else
        l->until = 1; /* refused: never linked */
}

/* A doubtful batch past its deadline: the main answers for sure now. */
static void ask_again(sk_proxy *x, later *l)
{
    if (l->until > 0 || l->asking || sk_now_ms() < l->b.deadline_ms + CLOCK_SKEW_MS)
        return;
    if (cf_send(x->cf, l->main, &l->b, sk_mono_us() + 5000000, resolved, l) == 0)
        l->asking = true;
}

/* The lowest position a main still reads, from etcd. */
static wal_lsn payref_floor(sk_proxy *x, const cm_model *m)
{
    wal_lsn f = UINT64_MAX;
    size_t it = 0;
    const cm_payref *pr;
    while ((pr = cm_payref_next(m, &it)) != NULL)
        if (pr->plog == x->plog && (wal_lsn)pr->lsn < f)
            f = (wal_lsn)pr->lsn;
    return f;
}

void sk_proxy_tick(sk_proxy *x)
{
    if (x->closing)
        return;
    const cm_model *m = sk_cluster_model(x->c);
    for (later **pp = &x->later; *pp;) {
        later *l = *pp;
        if (!l->asking && may_release(x, m, l)) {
            pay_release(x->pl, l->lsn);
            *pp = l->next;
            free(l);
            continue;
        }
        ask_again(x, l);
        pp = &l->next;
    }
    pay_trim(x->pl, payref_floor(x, m));
}

/* ---- the answer ---- */

static void done(pentry *e, int16_t code, const char *msg, const cf_answer *a)
{
    if (code)
        e->x->st.refused++;
    e->fn(e->arg, code, msg, a ? a->base_offset : -1, a ? a->log_append_time : -1,
          a ? a->log_start : -1);
    free(e);
}

static void confirmed(void *arg, int err, const cf_answer *a)
{
    pentry *e = arg;
    sk_proxy *x = e->x;
    wal_lsn lsn = (wal_lsn)e->b.lsn;
    switch (err) {
    case 0:
        if (a->error == 0 && a->payref_revision > cm_revision(sk_cluster_model(x->c)))
            release_later(x, lsn, a->payref_revision, NULL);
        else
            pay_release(x->pl, lsn); /* linked and seen, or refused: not linked */
        if (a->error == 0)
            x->st.linked++;
        done(e, a->error, a->message, a);
        return;
    case SK_ERR_TIMEOUT:
        /* The main may have linked it: held until its payref says. */
        x->st.timeouts++;
        release_later(x, lsn, 0, e);
        done(e, SK_KAFKA_REQUEST_TIMED_OUT, "the partition's main did not answer in time", NULL);
        return;
    case SK_ERR_IO:
        x->st.unreached++;
        pay_release(x->pl, lsn);
        done(e, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, "the partition's main could not be reached",
             NULL);
        return;
    default:
        pay_release(x->pl, lsn);
        done(e, SK_KAFKA_REQUEST_TIMED_OUT, "this node is stopping", NULL);
        return;
    }
}

static void payload_durable(void *arg, int err, wal_lsn lsn)
{
    pentry *e = arg;
    sk_proxy *x = e->x;
    (void)lsn;
    if (x->closing)
        return;
    if (err) {
        /* Never confirmed, so never visible. Abandoned: this node left the
         * cluster, and the client goes to another node of its zone. */
        pay_release(x->pl, (wal_lsn)e->b.lsn);
        if (err == SK_ERR_CLOSED || err == SK_ERR_FENCED)
            done(e, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, "this node left the cluster", NULL);
        else
            done(e, SK_KAFKA_KAFKA_STORAGE_ERROR, "the proxy's payload log failed", NULL);
        return;
    }
    /* The main now (it may have moved while the payload was written). */
    sk_part *p = sk_part_get(sk_topic_get_id(x->n, &e->id), e->part);
    const cm_model *m = sk_cluster_model(x->c);
    const cm_node *mn = p && p->main_node >= 0 ? cm_node_get(m, p->main_node) : NULL;
    if (!mn || mn->id == x->n->cfg->node_id) {
        pay_release(x->pl, (wal_lsn)e->b.lsn);
        done(e, SK_KAFKA_NOT_LEADER_OR_FOLLOWER, "the partition's main changed", NULL);
        return;
    }
    e->main = mn->id;
    e->mlog = mn->log;
    e->b.epoch = p->leader_epoch;
    if (cf_send(x->cf, e->main, &e->b, e->deadline_us, confirmed, e) != 0) {
        pay_release(x->pl, (wal_lsn)e->b.lsn);
        done(e, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory", NULL);
    }
}

int16_t sk_proxy_produce(sk_proxy *x, sk_part *p, const uint8_t *batch, uint32_t len,
                         const kb_header *h, int64_t deadline_us, sk_proxy_fn fn, void *arg)
{
    if (x->closing)
        return SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
    pentry *e = calloc(1, sizeof *e);
    if (!e)
        return SK_KAFKA_REQUEST_TIMED_OUT;
    *e = (pentry){.x = x, .id = p->topic->id, .part = p->index, .main = -1,
                  .deadline_us = deadline_us, .fn = fn, .arg = arg};
    e->b = (cf_batch){.topic = p->topic->id, .part = p->index, .epoch = p->leader_epoch,
                      .len = (int32_t)len, .crc = h->crc, .producer_id = h->producer_id,
                      .producer_epoch = h->producer_epoch, .base_sequence = h->base_sequence,
                      .last_offset_delta = h->last_offset_delta,
                      .max_timestamp = h->max_timestamp,
                      .deadline_ms = sk_now_ms() + (deadline_us - sk_mono_us()) / 1000};
    wal_lsn lsn;
    int rc = pay_append(x->pl, &p->topic->id, p->index, batch, len, payload_durable, e, &lsn);
    if (rc) {
        free(e);
        return rc == SK_ERR_AGAIN ? SK_KAFKA_REQUEST_TIMED_OUT : SK_KAFKA_KAFKA_STORAGE_ERROR;
    }
    e->b.lsn = (int64_t)lsn;
    x->st.batches++;
    x->st.bytes += len;
    sk_node_pace_check(x->n);
    return 0;
}

/* ---- routing ---- */

bool sk_proxy_serves(sk_node *n, const char *zone, const sk_part *p)
{
    if (!n->cluster || !n->payload || !n->cfg->zone_routing_enable || !zone || !zone[0] ||
        sk_part_serving(p))
        return false;
    const cm_model *m = sk_cluster_model(n->cluster);
    int32_t main = p->main_node >= 0 && cm_node_get(m, p->main_node) ? p->main_node : -1;
    if (main < 0 || main == n->cfg->node_id)
        return false;
    return zr_leader(m, main, zone, &p->topic->id, p->index) == n->cfg->node_id;
}

bool sk_proxy_full(const sk_proxy *x)
{
    wal *w = pay_wal(x->pl);
    return wal_end_lsn(w) - wal_start_lsn(w) > (uint64_t)x->n->cfg->wal_max_retained_bytes;
}

/* ---- life ---- */

sk_proxy *sk_proxy_new(sk_node *n, sk_cluster *c, rpc_client *rpc, pay_log *pl, int64_t plog)
{
    sk_proxy *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    *x = (sk_proxy){.n = n, .c = c, .pl = pl, .plog = plog};
    cf_opts o = {.self = n->cfg->node_id, .payload_log = plog,
                 .linger_us = n->cfg->confirm_linger_us};
    x->cf = cf_new(n->base, rpc, &o);
    if (!x->cf) {
        free(x);
        return NULL;
    }
    return x;
}

void sk_proxy_close(sk_proxy *x)
{
    if (x)
        x->closing = true;
}

void sk_proxy_destroy(sk_proxy *x)
{
    if (!x)
        return;
    cf_destroy(x->cf); /* ends the questions in flight */
    pay_close(x->pl);
    while (x->later) {
        later *l = x->later;
        x->later = l->next;
        free(l);
    }
    free(x);
}

void sk_proxy_get_stats(const sk_proxy *x, sk_proxy_stats *st)
{
    *st = x->st;
    cf_stats cs;
    cf_get_stats(x->cf, &cs);
    st->confirm_requests = cs.requests;
    st->confirm_retries = cs.retries;
    st->holds = pay_holds(x->pl);
    wal *w = pay_wal(x->pl);
    st->payload_retained = wal_end_lsn(w) - wal_start_lsn(w);
}
