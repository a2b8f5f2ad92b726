#include "confirm.h"

#include <assert.h>
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "krpc.h"
#include "sk_err.h"
#include "sk_map.h"
#include "sk_time.h"

#define RETRY_DELAY_US 20000

/* A batch from cf_send until its callback. */
typedef struct entry {
    cf_batch b;
    int64_t deadline_us;
    cf_fn fn;
    void *arg;
    struct entry *next;
} entry;

/* One main's queue: batches not sent yet. */
typedef struct mainq {
    cf_client *c;
    int32_t node;
    entry *head, **tail;
    int n;
    struct event *timer; /* linger, or a retry's delay */
    bool armed;
} mainq;

/* A request in flight. */
typedef struct call {
    mainq *q;
    entry **e;
    int n;
} call;

struct cf_client {
    struct event_base *base;
    rpc_client *rpc;
    cf_opts o;
    sk_map *queues; /* node id -> mainq */
    int inflight;   /* calls whose rpc callback is still to come */
    bool closing;
    cf_stats st;
};

static void flush(mainq *q);

static void timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    mainq *q = arg;
    q->armed = false;
    flush(q);
}

static void arm(mainq *q, int64_t us)
{
    if (q->armed)
        return;
    struct timeval tv = {us / 1000000, us % 1000000};
    q->armed = event_add(q->timer, &tv) == 0;
}

static mainq *queue_of(cf_client *c, int32_t node)
{
    mainq *q = sk_map_get(c->queues, &node, sizeof node);
    if (q)
        return q;
    q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    q->c = c;
    q->node = node;
    q->tail = &q->head;
    q->timer = evtimer_new(c->base, timer_cb, q);
    if (!q->timer || sk_map_put(c->queues, &node, sizeof node, q) != 0) {
        if (q->timer)
            event_free(q->timer);
        free(q);
        return NULL;
    }
    return q;
}

static void push(mainq *q, entry *e)
{
    e->next = NULL;
    *q->tail = e;
    q->tail = &e->next;
    q->n++;
}

static void finish(cf_client *c, entry *e, int err, const cf_answer *a)
{
    if (err == SK_ERR_TIMEOUT)
        c->st.timeouts++;
    else if (err == SK_ERR_IO)
        c->st.unreached++;
    else if (err == 0 && a->error == 0)
        c->st.linked++;
    else if (err == 0)
        c->st.refused++;
    e->fn(e->arg, err, a);
    free(e);
}

/* ---- answers ---- */

static void answer_all(call *k, const kr_ConfirmResponse *r)
{
    cf_client *c = k->q->c;
    for (int i = 0; i < k->n; i++) {
        entry *e = k->e[i];
        cf_answer a = {r->error_code, NULL, -1, -1, -1, r->payref_revision};
        if (!r->error_code) {
            const kr_ConfirmResponse_Batch *rb = i < r->batches.n ? &r->batches.v[i] : NULL;
            if (!rb || rb->lsn != e->b.lsn) {
                a.error = SK_KAFKA_UNKNOWN_SERVER_ERROR;
                a.message = "the main's answer does not match the request";
            } else {
                a.error = rb->error_code;
                a.message = rb->error_message.len > 0 ? rb->error_message.p : NULL;
                a.base_offset = rb->base_offset;
                a.log_append_time = rb->log_append_time_ms;
                a.log_start = rb->log_start_offset;
            }
        }
        finish(c, e, 0, &a);
    }
}

/* The request may have been applied: send its batches again while their
 * deadlines allow (the main answers them with their first answers). */
static void retry_or_fail(call *k, int err)
{
    cf_client *c = k->q->c;
    int64_t now = sk_mono_us();
    bool again = false;
    for (int i = 0; i < k->n; i++) {
        entry *e = k->e[i];
        if (c->closing || e->deadline_us <= now) {
            finish(c, e, c->closing ? SK_ERR_CLOSED : err, NULL);
            continue;
        }
        c->st.retries++;
        push(k->q, e);
        again = true;
    }
    if (again)
        arm(k->q, RETRY_DELAY_US);
}

static void rpc_done(void *arg, int err, const void *resp)
{
    call *k = arg;
    cf_client *c = k->q->c;
    c->inflight--;
    if (err == 0) {
        answer_all(k, resp);
    } else if (err == SK_ERR_TIMEOUT || err == SK_ERR_PARSE) {
        retry_or_fail(k, SK_ERR_TIMEOUT);
    } else {
        /* Never written (or refused by the client): not applied. */
        for (int i = 0; i < k->n; i++)
            finish(c, k->e[i], err == SK_ERR_CLOSED ? SK_ERR_CLOSED : SK_ERR_IO, NULL);
    }
    free(k->e);
    free(k);
}

/* ---- sending ---- */

static void fill(kr_ConfirmRequest_Batch *rb, const cf_batch *b)
{
    rb->topic_id = b->topic;
    rb->partition = b->part;
    rb->epoch = b->epoch;
    rb->lsn = b->lsn;
    rb->length = b->len;
    rb->crc = (int32_t)b->crc;
    rb->producer_id = b->producer_id;
    rb->producer_epoch = b->producer_epoch;
    rb->base_sequence = b->base_sequence;
    rb->last_offset_delta = b->last_offset_delta;
    rb->max_timestamp = b->max_timestamp;
    rb->deadline_ms = b->deadline_ms;
}

/* Takes up to max_batches from the queue into one call. */
static call *take(mainq *q, int64_t *timeout_us)
{
    cf_client *c = q->c;
    int n = q->n < c->o.max_batches ? q->n : c->o.max_batches;
    call *k = calloc(1, sizeof *k);
    entry **es = malloc((size_t)n * sizeof *es);
    if (!k || !es) {
        free(k);
        free(es);
        return NULL;
    }
    int64_t latest = 0;
    for (int i = 0; i < n; i++) {
        entry *e = q->head;
        q->head = e->next;
        es[i] = e;
        if (e->deadline_us > latest)
            latest = e->deadline_us;
    }
    q->n -= n;
    if (!q->head)
        q->tail = &q->head;
    *k = (call){q, es, n};
    *timeout_us = latest - sk_mono_us();
    return k;
}

static void flush(mainq *q)
{
    cf_client *c = q->c;
    while (q->n > 0) {
        int64_t timeout_us;
        call *k = take(q, &timeout_us);
        if (!k) {
            arm(q, RETRY_DELAY_US); /* out of memory: later */
            return;
        }
        kr_ConfirmRequest req = {c->o.self, c->o.payload_log, {k->n, NULL}};
        req.batches.v = calloc((size_t)k->n, sizeof *req.batches.v);
        int rc = req.batches.v ? 0 : SK_ERR_NOMEM;
        for (int i = 0; rc == 0 && i < k->n; i++)
            fill(&req.batches.v[i], &k->e[i]->b);
        int64_t ms = timeout_us > 1000 ? timeout_us / 1000 : 1;
        if (rc == 0)
            rc = rpc_call(c->rpc, q->node, KR_CONFIRM, 0, &req, ms, rpc_done, k);
        free(req.batches.v);
        if (rc != 0) {
            for (int i = 0; i < k->n; i++)
                finish(c, k->e[i], SK_ERR_IO, NULL);
            free(k->e);
            free(k);
            continue;
        }
        c->inflight++;
        c->st.requests++;
        c->st.batches += (uint64_t)k->n;
    }
}

int cf_send(cf_client *c, int32_t main, const cf_batch *b, int64_t deadline_us, cf_fn fn,
            void *arg)
{
    mainq *q = queue_of(c, main);
    entry *e = q ? malloc(sizeof *e) : NULL;
    if (!e)
        return SK_ERR_NOMEM;
    *e = (entry){*b, deadline_us, fn, arg, NULL};
    push(q, e);
    if (q->n >= c->o.max_batches) {
        if (q->armed) {
            event_del(q->timer);
            q->armed = false;
        }
        arm(q, 0); /* from its own event: never inside cf_send */
    } else {
        arm(q, c->o.linger_us);
    }
    return 0;
}

/* ---- life ---- */

cf_client *cf_new(struct event_base *base, rpc_client *rpc, const cf_opts *o)
{
    cf_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base = base;
    c->rpc = rpc;
    c->o = *o;
    if (c->o.linger_us <= 0)
        c->o.linger_us = 100;
    if (c->o.max_batches <= 0)
        c->o.max_batches = 512;
    c->queues = sk_map_new();
    if (!c->queues) {
        free(c);
        return NULL;
    }
    return c;
}

void cf_destroy(cf_client *c)
{
    if (!c)
        return;
    /* The RPC client went first: its calls in flight have ended. */
    assert(c->inflight == 0);
    c->closing = true;
    size_t it = 0;
    void *v;
    while (sk_map_next(c->queues, &it, NULL, NULL, &v)) {
        mainq *q = v;
        event_free(q->timer);
        while (q->head) {
            entry *e = q->head;
            q->head = e->next;
            finish(c, e, SK_ERR_CLOSED, NULL);
        }
        free(q);
    }
    sk_map_destroy(c->queues);
    free(c);
}

void cf_get_stats(const cf_client *c, cf_stats *st)
{
    *st = c->st;
}
