#include "proxied.h"

#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cmodel.h"
#include "confirm.h"
#include "config.h"
#include "kbatch.h"
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

/* A hold whose release waits: for the model to reach `until` (an answered
 * batch), or for main log `mlog`'s payref to pass it (a doubtful one). */
typedef struct later {
    wal_lsn lsn;
    int64_t until; /* > 0: a revision */
    int64_t mlog;  /* else this */
} later;

struct sk_proxy {
    sk_node *n;
    sk_cluster *c;
    pay_log *pl;
    int64_t plog;
    cf_client *cf;
    later *later;
    size_t nlater, caplater;
    bool closing;
    sk_proxy_stats st;
};

/* ---- holds ---- */

static void release_later(sk_proxy *x, wal_lsn lsn, int64_t until, int64_t mlog)
{
    if (x->nlater == x->caplater) {
        size_t ncap = x->caplater ? x->caplater * 2 : 64;
        later *nl = realloc(x->later, ncap * sizeof *nl);
        if (!nl)
            return; /* held until the node stops: safe */
        x->later = nl;
        x->caplater = ncap;
    }
    x->later[x->nlater++] = (later){lsn, until, mlog};
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
    size_t k = 0;
    for (size_t i = 0; i < x->nlater; i++) {
        if (may_release(x, m, &x->later[i]))
            pay_release(x->pl, x->later[i].lsn);
        else
            x->later[k++] = x->later[i];
    }
    x->nlater = k;
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
            release_later(x, lsn, a->payref_revision, 0);
        else
            pay_release(x->pl, lsn); /* linked and seen, or refused: not linked */
        if (a->error == 0)
            x->st.linked++;
        done(e, a->error, a->message, a);
        return;
    case SK_ERR_TIMEOUT:
        /* The main may have linked it: held until its payref says. */
        x->st.timeouts++;
        release_later(x, lsn, 0, e->mlog);
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
        pay_release(x->pl, (wal_lsn)e->b.lsn);
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
                      .max_timestamp = h->max_timestamp};
    wal_lsn lsn;
    int rc = pay_append(x->pl, &p->topic->id, p->index, batch, len, payload_durable, e, &lsn);
    if (rc) {
        free(e);
        return rc == SK_ERR_AGAIN ? SK_KAFKA_REQUEST_TIMED_OUT : SK_KAFKA_KAFKA_STORAGE_ERROR;
    }
    e->b.lsn = (int64_t)lsn;
    x->st.batches++;
    x->st.bytes += len;
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
    cf_destroy(x->cf);
    pay_close(x->pl);
    free(x->later);
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
