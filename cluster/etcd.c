/*
 * etcd.c: the transport half of the etcd client. JSON lives in etcd_json.c.
 *
 * Two threads share one struct etcd:
 *  - the loop thread builds request bodies, queues requests and watches in
 *    sub_* and wakes the client thread; it runs every callback from drain(),
 *    which the mailbox calls once the client thread has put messages on the
 *    done list;
 *  - the client thread owns the curl multi handle, every easy handle, the
 *    endpoint choice, retries and the watch streams. It parses answers into
 *    arenas, so the loop only calls back.
 * Everything under `lock` is shared; fields marked "loop" or "client" are
 * only touched by that thread. A request or watch belongs to the client
 * thread from the moment it is taken off sub_* until its final message is
 * on the done list; a watch is freed by the loop when its final message (end)
 * comes out of the done list, which always follows its last event batch.
 */
#include "etcd.h"

#include <curl/curl.h>
#include <jansson.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "etcd_json.h"
#include "sk_arena.h"
#include "sk_log.h"
#include "sk_time.h"
#include "sk_workq.h"

#define MOD "etcd"
#define MAX_ENDPOINTS 16
#define MAX_ACTIVE 32          /* unary transfers at once; the rest wait in order */
#define BACKOFF_MIN_MS 50      /* after every endpoint failed once, or a short-lived watch stream */
#define BACKOFF_MAX_MS 1000
#define POLL_MAX_MS 1000
#define WATCH_STABLE_MS 1000   /* a watch stream that lived this long resumes at once */

/* ---- data ---- */

enum msg_type { DONE_REQ, DONE_BATCH, DONE_END };

/* An entry of the done list (client -> loop). */
struct msg {
    struct msg *next;
    enum msg_type type;
};

enum req_kind { RK_RANGE, RK_TXN, RK_PUT, RK_DELETE, RK_GRANT, RK_KEEPALIVE, RK_REVOKE };

/* What a failed attempt means for the request. */
enum verdict {
    V_OK,
    V_RETRY, /* etcd certainly did not apply it: try the next endpoint */
    V_MAYBE, /* it may have been applied: only reads are tried again */
    V_FAIL,  /* a final answer (err says which) */
};

struct req {
    struct msg m; /* first: the done list and CURLINFO_PRIVATE hold &m */
    struct req *next; /* sub, wait and active lists */
    etcd *c;
    enum req_kind kind;
    const char *path;
    char *body;
    size_t blen;
    union {
        etcd_range_cb range;
        etcd_txn_cb txn;
        etcd_lease_cb lease;
    } cb;
    void *arg;
    int64_t lease_id; /* keepalive, revoke */
    int64_t submit_us, deadline_ms;
    /* client */
    CURL *h;
    int ep;
    int tries;        /* attempts since the last backoff */
    int64_t backoff_ms, not_before_ms;
    int last_err;     /* reported when the deadline passes between attempts */
    ej_stream js;
    json_t *resp;     /* the first JSON object of the answer */
    bool stopped, too_big, bad;
    uint64_t body_in; /* bytes of this attempt's answer body */
    /* result (client writes, loop reads after the done list hand-over) */
    int err;
    bool answered;
    sk_arena *arena;
    union {
        etcd_range_result range;
        etcd_txn_result txn;
        struct {
            int64_t id, ttl;
        } lease;
    } res;
};

struct etcd_watch {
    struct msg end; /* first: the final message, and CURLINFO_PRIVATE */
    etcd *c;
    etcd_watch_cb cb;
    void *arg;
    uint8_t *key, *range_end;
    size_t klen, relen;
    bool cancelled;            /* loop */
    atomic_bool cancel_req;    /* loop -> client */
    atomic_size_t pending;     /* bytes of batches on the done list, not delivered */
    atomic_bool paused;        /* client paused the stream for pending */
    /* client */
    etcd_watch *next;
    CURL *h;
    int ep;
    int64_t next_rev;          /* first revision not delivered yet (0: from now) */
    int64_t restart_at_ms;     /* when h is NULL: start again then */
    int64_t started_ms, backoff_ms;
    bool heads_counted; /* this transfer's request and headers */
    ej_stream js;
    int end_err;
};

struct batch {
    struct msg m;
    etcd_watch *w;
    int64_t revision;
    etcd_event *evs;
    size_t n, bytes;
    sk_arena *arena; /* holds the batch itself */
};

struct etcd {
    struct event_base *base;
    sk_mailbox *mb;
    etcd_opts o;
    char *eps[MAX_ENDPOINTS];
    int nep;
    atomic_int ep;
    atomic_uint_fast64_t switches, resumes, pauses;
    struct curl_slist *hdrs;
    CURLM *multi;
    pthread_t thread;
    /* loop */
    bool closing;
    int queued;
    uint64_t requests, errors, timeouts, latency_us_sum, latency_count;
    /* shared */
    pthread_mutex_t lock;
    struct req *sub_head, *sub_tail;
    etcd_watch *wsub_head, *wsub_tail;
    bool stop, cancels;
    struct msg *done_head, *done_tail;
    bool drain_posted;
    /* client */
    struct req *wait_head, *wait_tail, *active;
    int nactive;
    etcd_watch *watches;
    int failures; /* endpoint switches since etcd last answered */
};

static void drain(void *arg);

/* ---- small helpers ---- */

static size_t arena_cap(const etcd *c)
{
    /* Decoded bytes are smaller than their base64, but an array of small
     * kvs costs more as structs than as JSON: room for both. */
    return c->o.max_response * 4 + (1u << 20);
}

/* Bytes of a watch's events that may wait for the loop before the client
 * stops reading its stream; it reads on below half of it. A quarter of the
 * message cap: a watch then holds at most 1.25 messages' worth. */
static size_t watch_hold(const etcd *c)
{
    return c->o.max_response / 4;
}

static void wake(etcd *c)
{
    curl_multi_wakeup(c->multi);
}

static int64_t min64(int64_t a, int64_t b)
{
    return a < b ? a : b;
}

/* ---- the done list (client -> loop) ---- */

static void try_post(etcd *c)
{
    pthread_mutex_lock(&c->lock);
    bool post = c->done_head && !c->drain_posted;
    if (post)
        c->drain_posted = true;
    pthread_mutex_unlock(&c->lock);
    /* When the mailbox cannot take it, the client loop tries again. */
    if (post && sk_mailbox_post(c->mb, drain, c) != 0) {
        pthread_mutex_lock(&c->lock);
        c->drain_posted = false;
        pthread_mutex_unlock(&c->lock);
    }
}

static void post_msg(etcd *c, struct msg *m)
{
    m->next = NULL;
    pthread_mutex_lock(&c->lock);
    if (c->done_tail)
        c->done_tail->next = m;
    else
        c->done_head = m;
    c->done_tail = m;
    pthread_mutex_unlock(&c->lock);
    try_post(c);
}

static bool post_pending(etcd *c)
{
    pthread_mutex_lock(&c->lock);
    bool p = c->done_head && !c->drain_posted;
    pthread_mutex_unlock(&c->lock);
    return p;
}

/* ---- endpoints (client) ---- */

static void watch_stop_transfer(etcd *c, etcd_watch *w);

/* Moves requests away from ep after it failed. Watches streaming from ep
 * follow at once: a member that does not answer requests (stopped, cut off,
 * without a leader) may keep a watch stream open and silent forever. */
static void endpoint_failed(etcd *c, int ep, const char *why)
{
    if (c->nep == 1)
        return;
    int expect = ep;
    int next = (ep + 1) % c->nep;
    if (!atomic_compare_exchange_strong(&c->ep, &expect, next))
        return; /* someone moved on already */
    atomic_fetch_add(&c->switches, 1);
    /* One round of warnings per outage, not one per retry. */
    if (++c->failures <= c->nep)
        SK_WARN(MOD, "%s: %s; switching to %s", c->eps[ep], why, c->eps[next]);
    else
        SK_DEBUG(MOD, "%s: %s; switching to %s", c->eps[ep], why, c->eps[next]);
    if (c->failures == c->nep)
        SK_WARN(MOD, "no etcd endpoint answers; retrying quietly");
    int64_t now = sk_mono_ms();
    for (etcd_watch *w = c->watches; w; w = w->next) {
        if (w->h && w->ep == ep) {
            watch_stop_transfer(c, w);
            w->restart_at_ms = now;
            atomic_fetch_add(&c->resumes, 1);
        }
    }
}

static void endpoint_answered(etcd *c, int ep)
{
    if (c->failures >= c->nep)
        SK_INFO(MOD, "%s answers again", c->eps[ep]);
    c->failures = 0;
}

static CURL *easy_new(etcd *c, int ep, const char *path)
{
    CURL *h = curl_easy_init();
    if (!h)
        return NULL;
    char url[512];
    snprintf(url, sizeof url, "%s%s", c->eps[ep], path);
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http");
    curl_easy_setopt(h, CURLOPT_PROXY, ""); /* never an http_proxy from the environment */
    curl_easy_setopt(h, CURLOPT_HTTPHEADER, c->hdrs);
    curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)c->o.connect_timeout_ms);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPALIVE, 1L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPIDLE, 10L);
    curl_easy_setopt(h, CURLOPT_TCP_KEEPINTVL, 5L);
    return h;
}

/* ---- byte accounting (client) ---- */

static void account(etcd *c, int ep, uint64_t out, uint64_t in)
{
    if (c->o.account && (out || in))
        c->o.account(c->o.account_arg, ep, out, in);
}

/* What a transfer sent (request line, headers and body) and received before
 * its body (status line and headers). */
static void transfer_heads(CURL *h, uint64_t *out, uint64_t *in)
{
    long req = 0, hdr = 0;
    curl_easy_getinfo(h, CURLINFO_REQUEST_SIZE, &req);
    curl_easy_getinfo(h, CURLINFO_HEADER_SIZE, &hdr);
    *out = req > 0 ? (uint64_t)req : 0;
    *in = hdr > 0 ? (uint64_t)hdr : 0;
}

/* A unary attempt's bytes, as it ends: its body as the write callback
 * saw it (curl's own count leaves out what a callback refused, as the
 * keep-alive's first answer). */
static void account_attempt(etcd *c, struct req *r)
{
    uint64_t out, in;
    transfer_heads(r->h, &out, &in);
    account(c, r->ep, out, in + r->body_in);
}

/* A watch's request and response headers, once (its body is counted as it
 * arrives). */
static void account_watch_heads(etcd *c, etcd_watch *w)
{
    if (w->heads_counted || !w->h)
        return;
    uint64_t out, in;
    transfer_heads(w->h, &out, &in);
    w->heads_counted = true;
    account(c, w->ep, out, in);
}

/* ---- requests: answers (client) ---- */

static size_t req_write(char *p, size_t size, size_t nmemb, void *ud);

static bool contains(const char *s, const char *what)
{
    return s && strstr(s, what) != NULL;
}

/* etcd's own error answers. The gateway maps gRPC Unavailable to 503; some
 * of those come before etcd looked at the request (no leader: asked for with
 * the hasleader metadata, not capable), others after it was proposed (timed
 * out, stopped, leader changed), when it may still be applied. */
static enum verdict classify_error(int code, const char *msg, int *err)
{
    if (contains(msg, "no leader") || contains(msg, "not leader") ||
        contains(msg, "not capable") || contains(msg, "too many requests") ||
        contains(msg, "proposal dropped"))
        return V_RETRY;
    if (contains(msg, "timed out") || contains(msg, "deadline exceeded") ||
        contains(msg, "stopped") || contains(msg, "leader changed") ||
        contains(msg, "cancel") || contains(msg, "transport is closing"))
        return V_MAYBE;
    if (code == 11 && contains(msg, "compacted")) {
        *err = SK_ERR_COMPACTED;
        return V_FAIL;
    }
    if (code == 5) { /* NotFound: the lease */
        *err = SK_ERR_NOENT;
        return V_FAIL;
    }
    if (code == 14)
        return V_RETRY;
    *err = SK_ERR_IO;
    return V_FAIL;
}

/* Whatever made this attempt end without a usable answer. */
static enum verdict classify_attempt(struct req *r, CURLcode rc, long http, int *err)
{
    if (r->too_big) {
        *err = SK_ERR_NOMEM;
        return V_FAIL;
    }
    int code;
    const char *msg;
    if (r->resp && ej_error(r->resp, &code, &msg)) {
        enum verdict v = classify_error(code, msg, err);
        SK_DEBUG(MOD, "%s%s: %s (grpc %d, http %ld)", r->c->eps[r->ep], r->path, msg, code, http);
        if (v == V_FAIL && *err == SK_ERR_IO)
            SK_WARN(MOD, "%s%s: %s (grpc %d)", r->c->eps[r->ep], r->path, msg, code);
        return v;
    }
    /* A whole answer counts even if the connection broke after it. */
    if (r->resp && http == 200)
        return V_OK;
    if (rc == CURLE_OK || r->stopped || r->bad) {
        if (http == 503)
            return V_RETRY;
        SK_WARN(MOD, "%s%s: HTTP %ld without an answer", r->c->eps[r->ep], r->path, http);
        *err = SK_ERR_IO;
        return V_FAIL;
    }
    /* A transfer error. Nothing sent yet means etcd never saw it. */
    long sent = 0;
    curl_easy_getinfo(r->h, CURLINFO_REQUEST_SIZE, &sent);
    SK_DEBUG(MOD, "%s%s: %s (%ld bytes sent)", r->c->eps[r->ep], r->path, curl_easy_strerror(rc),
             sent);
    return sent == 0 ? V_RETRY : V_MAYBE;
}

static int parse_answer(struct req *r)
{
    r->arena = sk_arena_new(arena_cap(r->c));
    if (!r->arena)
        return SK_ERR_NOMEM;
    int rc = 0;
    switch (r->kind) {
    case RK_RANGE: rc = ej_parse_range(r->arena, r->resp, &r->res.range); break;
    case RK_TXN: rc = ej_parse_txn(r->arena, r->resp, &r->res.txn); break;
    case RK_PUT: rc = ej_parse_single(r->arena, r->resp, ETCD_OP_PUT, &r->res.txn); break;
    case RK_DELETE: rc = ej_parse_single(r->arena, r->resp, ETCD_OP_DELETE, &r->res.txn); break;
    case RK_GRANT:
    case RK_KEEPALIVE: {
        /* The keep-alive stream wraps its answer in "result". */
        const json_t *o = json_object_get(r->resp, "result");
        o = o ? o : r->resp;
        r->res.lease.id = ej_int(o, "ID");
        r->res.lease.ttl = ej_int(o, "TTL");
        /* An expired or revoked lease answers TTL 0 (left out), not an error. */
        if (r->res.lease.ttl <= 0)
            rc = SK_ERR_NOENT;
        break;
    }
    case RK_REVOKE: r->res.lease.id = r->lease_id; break;
    }
    if (rc == SK_ERR_PARSE) {
        SK_WARN(MOD, "%s%s: malformed answer", r->c->eps[r->ep], r->path);
        rc = SK_ERR_IO;
    }
    return rc;
}

/* ---- requests: life cycle (client) ---- */

static void active_remove(etcd *c, struct req *r)
{
    for (struct req **p = &c->active; *p; p = &(*p)->next) {
        if (*p == r) {
            *p = r->next;
            c->nactive--;
            return;
        }
    }
}

static void attempt_end(etcd *c, struct req *r)
{
    if (r->h) {
        account_attempt(c, r);
        active_remove(c, r);
        curl_multi_remove_handle(c->multi, r->h);
        curl_easy_cleanup(r->h);
        r->h = NULL;
    }
    json_decref(r->resp);
    r->resp = NULL;
    ej_stream_reset(&r->js);
}

static void req_finish(etcd *c, struct req *r, int err)
{
    attempt_end(c, r);
    ej_stream_free(&r->js);
    r->err = err;
    post_msg(c, &r->m);
}

static void wait_push(etcd *c, struct req *r)
{
    r->next = NULL;
    if (c->wait_tail)
        c->wait_tail->next = r;
    else
        c->wait_head = r;
    c->wait_tail = r;
}

static void attempt_start(etcd *c, struct req *r)
{
    r->ep = atomic_load(&c->ep);
    r->stopped = r->too_big = r->bad = false;
    r->body_in = 0;
    int64_t left = r->deadline_ms - sk_mono_ms();
    CURL *h = easy_new(c, r->ep, r->path);
    if (!h) {
        req_finish(c, r, SK_ERR_NOMEM);
        return;
    }
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, r->body);
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)r->blen);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, (long)(left > 1 ? left : 1));
    curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, (long)min64(c->o.connect_timeout_ms, left > 1 ? left : 1));
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, req_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(h, CURLOPT_PRIVATE, r);
    r->h = h;
    r->next = c->active;
    c->active = r;
    c->nactive++;
    r->tries++;
    curl_multi_add_handle(c->multi, h);
}

/* Another attempt, on the endpoint that is current now; after every
 * endpoint failed once, after a pause that grows. */
static void retry_later(etcd *c, struct req *r)
{
    attempt_end(c, r);
    int64_t now = sk_mono_ms();
    r->not_before_ms = now;
    if (r->tries >= c->nep) {
        r->tries = 0;
        r->backoff_ms = r->backoff_ms ? min64(r->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
        r->not_before_ms = now + r->backoff_ms;
    }
    if (r->not_before_ms >= r->deadline_ms) {
        req_finish(c, r, r->last_err);
        return;
    }
    wait_push(c, r);
}

static bool idempotent(const struct req *r)
{
    /* A keep-alive sent twice only extends the lease twice. */
    return r->kind == RK_RANGE || r->kind == RK_KEEPALIVE;
}

static void req_done(etcd *c, struct req *r, CURLcode rc)
{
    long http = 0;
    curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &http);
    int err = 0;
    switch (classify_attempt(r, rc, http, &err)) {
    case V_OK:
        endpoint_answered(c, r->ep);
        r->answered = true;
        req_finish(c, r, parse_answer(r));
        return;
    case V_FAIL:
        endpoint_answered(c, r->ep);
        r->answered = true;
        req_finish(c, r, err);
        return;
    case V_RETRY:
        endpoint_failed(c, r->ep, "etcd did not take the request");
        r->last_err = SK_ERR_IO;
        retry_later(c, r);
        return;
    case V_MAYBE:
        endpoint_failed(c, r->ep, "no answer");
        r->last_err = SK_ERR_TIMEOUT;
        if (idempotent(r))
            retry_later(c, r);
        else
            req_finish(c, r, SK_ERR_TIMEOUT);
        return;
    }
}

static int req_on_msg(void *ctx, const char *p, size_t n)
{
    struct req *r = ctx;
    json_error_t jerr;
    r->resp = json_loadb(p, n, 0, &jerr);
    if (!r->resp)
        return EJ_BAD;
    /* The keep-alive stream stays open for more requests: its first answer
     * is the one. */
    return r->kind == RK_KEEPALIVE ? EJ_STOP : EJ_MORE;
}

static size_t req_write(char *p, size_t size, size_t nmemb, void *ud)
{
    struct req *r = ud;
    size_t n = size * nmemb;
    r->body_in += n;
    if (r->resp)
        return n; /* the rest of a unary answer: whitespace */
    int rc = ej_stream_feed(&r->js, p, n, req_on_msg, r);
    if (rc == EJ_MORE)
        return n;
    r->stopped = rc == EJ_STOP;
    r->too_big = rc == EJ_TOO_BIG;
    r->bad = rc == EJ_BAD;
    return 0; /* ends the transfer */
}

/* Starts what may start, fails what ran out of time; returns when the
 * first waiting request wants attention again. */
static int64_t start_waiting(etcd *c, int64_t now)
{
    int64_t due = now + POLL_MAX_MS;
    struct req *keep_head = NULL, *keep_tail = NULL, *r = c->wait_head;
    c->wait_head = c->wait_tail = NULL;
    while (r) {
        struct req *next = r->next;
        if (now >= r->deadline_ms) {
            req_finish(c, r, r->last_err);
        } else if (r->not_before_ms <= now && c->nactive < MAX_ACTIVE) {
            attempt_start(c, r);
        } else {
            due = min64(due, r->not_before_ms > now ? r->not_before_ms : r->deadline_ms);
            r->next = NULL;
            if (keep_tail)
                keep_tail->next = r;
            else
                keep_head = r;
            keep_tail = r;
        }
        r = next;
    }
    /* Requests queued meanwhile (by retries above) go after the kept ones. */
    if (keep_tail) {
        keep_tail->next = c->wait_head;
        if (!c->wait_head)
            c->wait_tail = keep_tail;
        c->wait_head = keep_head;
    }
    return due;
}

/* ---- watches (client) ---- */

static size_t watch_write(char *p, size_t size, size_t nmemb, void *ud);

static void watch_stop_transfer(etcd *c, etcd_watch *w)
{
    if (w->h) {
        account_watch_heads(c, w);
        curl_multi_remove_handle(c->multi, w->h);
        curl_easy_cleanup(w->h);
        w->h = NULL;
    }
    ej_stream_reset(&w->js);
    atomic_store(&w->paused, false);
}

static void watch_remove(etcd *c, etcd_watch *w)
{
    for (etcd_watch **p = &c->watches; *p; p = &(*p)->next) {
        if (*p == w) {
            *p = w->next;
            return;
        }
    }
}

static void watch_finish(etcd *c, etcd_watch *w, int err)
{
    watch_stop_transfer(c, w);
    watch_remove(c, w);
    ej_stream_free(&w->js);
    w->end_err = err;
    post_msg(c, &w->end);
}

static void watch_start_transfer(etcd *c, etcd_watch *w)
{
    json_t *body = ej_watch_create(w->key, w->klen, w->range_end, w->relen, w->next_rev);
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    w->ep = atomic_load(&c->ep);
    CURL *h = s ? easy_new(c, w->ep, "/v3/watch") : NULL;
    if (!h) {
        free(s);
        w->restart_at_ms = sk_mono_ms() + BACKOFF_MAX_MS; /* out of memory: later */
        return;
    }
    curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE, (long)strlen(s));
    curl_easy_setopt(h, CURLOPT_COPYPOSTFIELDS, s);
    free(s);
    curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, watch_write);
    curl_easy_setopt(h, CURLOPT_WRITEDATA, w);
    curl_easy_setopt(h, CURLOPT_PRIVATE, w);
    w->h = h;
    w->heads_counted = false;
    w->started_ms = sk_mono_ms();
    w->end_err = 0;
    curl_multi_add_handle(c->multi, h);
}

static int post_batch(etcd_watch *w, const json_t *res, size_t bytes, bool progress)
{
    etcd *c = w->c;
    sk_arena *a = sk_arena_new(arena_cap(c));
    struct batch *b = a ? sk_arena_alloc(a, sizeof *b) : NULL;
    if (!b) {
        sk_arena_destroy(a);
        return SK_ERR_NOMEM;
    }
    b->arena = a;
    b->w = w;
    b->m.type = DONE_BATCH;
    b->revision = ej_revision(res);
    int rc = progress ? 0
                      : ej_parse_events(a, json_object_get(res, "events"), w->next_rev, &b->evs,
                                        &b->n);
    if (rc || (!progress && b->n == 0)) {
        sk_arena_destroy(a);
        return rc;
    }
    w->next_rev = progress ? (b->revision + 1 > w->next_rev ? b->revision + 1 : w->next_rev)
                           : b->evs[b->n - 1].kv.mod_revision + 1;
    b->bytes = bytes;
    atomic_fetch_add(&w->pending, bytes);
    post_msg(c, &b->m);
    return 0;
}

/* One message of a watch stream: {"result": WatchResponse} or {"error": ...}. */
static int watch_message(etcd_watch *w, const json_t *o, size_t bytes)
{
    int code;
    const char *msg;
    if (ej_error(o, &code, &msg)) {
        SK_INFO(MOD, "watch on %s: %s", w->c->eps[w->ep], msg);
        return EJ_STOP;
    }
    const json_t *res = json_object_get(o, "result");
    if (!json_is_object(res))
        return EJ_BAD;
    if (json_is_true(json_object_get(res, "canceled")) || ej_int(res, "compact_revision") > 0) {
        const char *why = json_string_value(json_object_get(res, "cancel_reason"));
        SK_INFO(MOD, "watch canceled at revision %lld (compacted to %lld): %s",
                (long long)w->next_rev, (long long)ej_int(res, "compact_revision"),
                why ? why : "compacted");
        w->end_err = SK_ERR_COMPACTED;
        return EJ_STOP;
    }
    if (json_is_true(json_object_get(res, "created"))) {
        /* "From now on": now is this revision, resumes go on after it. */
        if (w->next_rev == 0)
            w->next_rev = ej_revision(res) + 1;
        endpoint_answered(w->c, w->ep);
        return EJ_MORE;
    }
    bool progress = json_array_size(json_object_get(res, "events")) == 0;
    if (post_batch(w, res, bytes, progress) != 0) {
        /* Nothing was delivered from this message: read it again later. */
        return EJ_STOP;
    }
    return EJ_MORE;
}

static int watch_on_msg(void *ctx, const char *p, size_t n)
{
    etcd_watch *w = ctx;
    json_error_t jerr;
    json_t *o = json_loadb(p, n, 0, &jerr);
    if (!o)
        return EJ_BAD;
    int rc = watch_message(w, o, n);
    json_decref(o);
    return rc;
}

static size_t watch_write(char *p, size_t size, size_t nmemb, void *ud)
{
    etcd_watch *w = ud;
    size_t n = size * nmemb;
    /* Paused before pending is read again, so that the loop, which lowers
     * pending and then reads paused, never misses a wake-up. */
    if (atomic_load(&w->pending) > watch_hold(w->c)) {
        atomic_store(&w->paused, true);
        if (atomic_load(&w->pending) > watch_hold(w->c)) {
            SK_DEBUG(MOD, "watch paused: %zu bytes wait for the loop", atomic_load(&w->pending));
            atomic_fetch_add(&w->c->pauses, 1);
            return CURL_WRITEFUNC_PAUSE;
        }
        atomic_store(&w->paused, false);
    }
    account_watch_heads(w->c, w);
    account(w->c, w->ep, 0, n);
    int rc = ej_stream_feed(&w->js, p, n, watch_on_msg, w);
    if (rc == EJ_MORE)
        return n;
    if (rc == EJ_TOO_BIG) {
        SK_WARN(MOD, "watch message larger than %zu bytes", w->c->o.max_response);
        w->end_err = SK_ERR_NOMEM;
    }
    return 0;
}

static void watch_done(etcd *c, etcd_watch *w, CURLcode rc)
{
    if (w->end_err) {
        watch_finish(c, w, w->end_err);
        return;
    }
    /* Every other end of the stream is a broken stream: etcd never ends a
     * watch by itself. One that broke soon after it started waits, and
     * longer each time: the endpoints may all be down, or without leader. */
    int64_t now = sk_mono_ms();
    bool stable = now - w->started_ms >= WATCH_STABLE_MS;
    sk_log(stable ? SK_LOG_INFO : SK_LOG_DEBUG, MOD,
           "watch stream from %s ended (%s); resuming at revision %lld", c->eps[w->ep],
           rc == CURLE_OK ? "closed" : curl_easy_strerror(rc), (long long)w->next_rev);
    int ep = w->ep;
    watch_stop_transfer(c, w);
    endpoint_failed(c, ep, "watch stream broken");
    atomic_fetch_add(&c->resumes, 1);
    if (stable)
        w->backoff_ms = 0;
    else
        w->backoff_ms = w->backoff_ms ? min64(w->backoff_ms * 2, BACKOFF_MAX_MS) : BACKOFF_MIN_MS;
    w->restart_at_ms = now + w->backoff_ms;
}

static int64_t service_watches(etcd *c, int64_t now, bool cancels)
{
    int64_t due = now + POLL_MAX_MS;
    etcd_watch *w = c->watches;
    while (w) {
        etcd_watch *next = w->next;
        if (cancels && atomic_load(&w->cancel_req)) {
            watch_finish(c, w, SK_ERR_CLOSED);
        } else if (!w->h && w->restart_at_ms <= now) {
            watch_start_transfer(c, w);
        } else if (!w->h) {
            due = min64(due, w->restart_at_ms);
        } else if (atomic_load(&w->paused) && atomic_load(&w->pending) <= watch_hold(c) / 2) {
            atomic_store(&w->paused, false);
            curl_easy_pause(w->h, CURLPAUSE_CONT);
        }
        w = next;
    }
    return due;
}

/* ---- the client thread ---- */

static bool take_submissions(etcd *c, bool *cancels)
{
    pthread_mutex_lock(&c->lock);
    bool stop = c->stop;
    struct req *r = c->sub_head;
    etcd_watch *w = c->wsub_head;
    c->sub_head = c->sub_tail = NULL;
    c->wsub_head = c->wsub_tail = NULL;
    *cancels = c->cancels;
    c->cancels = false;
    pthread_mutex_unlock(&c->lock);
    while (r) {
        struct req *next = r->next;
        wait_push(c, r);
        r = next;
    }
    while (w) {
        etcd_watch *next = w->next;
        w->next = c->watches;
        c->watches = w;
        w = next;
    }
    return stop;
}

static void collect_done(etcd *c)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(c->multi, &left))) {
        if (m->msg != CURLMSG_DONE)
            continue;
        CURL *h = m->easy_handle;
        CURLcode rc = m->data.result; /* m dies with the handle */
        struct msg *priv = NULL;
        curl_easy_getinfo(h, CURLINFO_PRIVATE, &priv);
        /* A request's message is DONE_REQ from birth, a watch's DONE_END. */
        if (priv->type == DONE_END)
            watch_done(c, (etcd_watch *)priv, rc);
        else
            req_done(c, (struct req *)priv, rc);
    }
}

static void shutdown_all(etcd *c)
{
    bool cancels;
    take_submissions(c, &cancels);
    while (c->active)
        req_finish(c, c->active, SK_ERR_CLOSED);
    while (c->wait_head) {
        struct req *r = c->wait_head;
        c->wait_head = r->next;
        req_finish(c, r, SK_ERR_CLOSED);
    }
    c->wait_tail = NULL;
    while (c->watches)
        watch_finish(c, c->watches, SK_ERR_CLOSED);
}

static void *client_main(void *arg)
{
    etcd *c = arg;
    for (;;) {
        bool cancels;
        if (take_submissions(c, &cancels))
            break;
        int running;
        curl_multi_perform(c->multi, &running);
        collect_done(c);
        /* Transfers added here make curl_multi_poll return at once: curl
         * gives a new handle a timeout of zero. */
        int64_t now = sk_mono_ms();
        int64_t due = min64(start_waiting(c, now), service_watches(c, now, cancels));
        if (post_pending(c)) {
            try_post(c);
            due = min64(due, now + 10);
        }
        int64_t tmo = due - sk_mono_ms();
        curl_multi_poll(c->multi, NULL, 0, tmo > 0 ? (int)tmo : 0, NULL);
    }
    shutdown_all(c);
    return NULL;
}

/* ---- delivery (loop) ---- */

static void deliver_req(etcd *c, struct req *r)
{
    c->queued--;
    if (r->err) {
        c->errors++;
        if (r->err == SK_ERR_TIMEOUT)
            c->timeouts++;
    }
    if (r->answered) {
        c->latency_us_sum += (uint64_t)(sk_mono_us() - r->submit_us);
        c->latency_count++;
    }
    static const etcd_range_result no_range;
    static const etcd_txn_result no_txn;
    switch (r->kind) {
    case RK_RANGE: r->cb.range(r->arg, r->err, r->err ? &no_range : &r->res.range); break;
    case RK_TXN:
    case RK_PUT:
    case RK_DELETE: r->cb.txn(r->arg, r->err, r->err ? &no_txn : &r->res.txn); break;
    case RK_GRANT:
    case RK_KEEPALIVE:
    case RK_REVOKE:
        r->cb.lease(r->arg, r->err, r->err ? r->lease_id : r->res.lease.id,
                    r->err ? 0 : r->res.lease.ttl);
        break;
    }
    sk_arena_destroy(r->arena);
    free(r->body);
    free(r);
}

static void free_watch(etcd_watch *w)
{
    free(w->key);
    free(w->range_end);
    free(w);
}

static void deliver_batch(etcd *c, struct batch *b)
{
    etcd_watch *w = b->w;
    if (!w->cancelled)
        w->cb(w->arg, 0, b->revision, b->evs, b->n);
    size_t left = atomic_fetch_sub(&w->pending, b->bytes) - b->bytes;
    if (atomic_load(&w->paused) && left <= watch_hold(c) / 2 && !c->closing)
        wake(c);
    sk_arena_destroy(b->arena);
}

static void deliver_end(etcd_watch *w)
{
    if (!w->cancelled)
        w->cb(w->arg, w->end_err, 0, NULL, 0);
    free_watch(w);
}

static void drain(void *arg)
{
    etcd *c = arg;
    pthread_mutex_lock(&c->lock);
    struct msg *m = c->done_head;
    c->done_head = c->done_tail = NULL;
    c->drain_posted = false;
    pthread_mutex_unlock(&c->lock);
    while (m) {
        struct msg *next = m->next;
        switch (m->type) {
        case DONE_REQ: deliver_req(c, (struct req *)m); break;
        case DONE_BATCH: deliver_batch(c, (struct batch *)m); break;
        case DONE_END: deliver_end((etcd_watch *)m); break;
        }
        m = next;
    }
}

/* ---- construction ---- */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int parse_endpoints(etcd *c, const char *list, char *why, size_t whylen)
{
    const char *p = list ? list : "";
    while (*p) {
        size_t n = strcspn(p, ",");
        const char *s = p;
        while (n && *s == ' ')
            s++, n--;
        while (n && (s[n - 1] == ' ' || s[n - 1] == '/'))
            n--;
        if (n <= 7 || strncmp(s, "http://", 7) != 0 || n > 256 || memchr(s + 7, '/', n - 7)) {
            snprintf(why, whylen, "etcd endpoint '%.*s' is not http://host:port", (int)n, s);
            return SK_ERR_INVAL;
        }
        if (c->nep == MAX_ENDPOINTS) {
            snprintf(why, whylen, "more than %d etcd endpoints", MAX_ENDPOINTS);
            return SK_ERR_INVAL;
        }
        c->eps[c->nep] = strndup(s, n);
        if (!c->eps[c->nep++]) {
            snprintf(why, whylen, "out of memory");
            return SK_ERR_NOMEM;
        }
        p += strcspn(p, ",");
        p += *p == ',';
    }
    if (c->nep == 0) {
        snprintf(why, whylen, "no etcd endpoint given");
        return SK_ERR_INVAL;
    }
    return 0;
}

static void set_opts(etcd *c, const etcd_opts *o)
{
    if (o)
        c->o = *o;
    if (c->o.request_timeout_ms <= 0)
        c->o.request_timeout_ms = 5000;
    if (c->o.connect_timeout_ms <= 0)
        c->o.connect_timeout_ms = 1000;
    if (c->o.max_response == 0)
        c->o.max_response = 8u << 20;
    if (c->o.max_queued <= 0)
        c->o.max_queued = 4096;
}

static void free_client(etcd *c)
{
    if (c->mb)
        sk_mailbox_destroy(c->mb);
    if (c->multi)
        curl_multi_cleanup(c->multi);
    curl_slist_free_all(c->hdrs);
    for (int i = 0; i < c->nep; i++)
        free(c->eps[i]);
    pthread_mutex_destroy(&c->lock);
    free(c);
}

static int start_client(etcd *c)
{
    /* hasleader: a member without a leader answers "no leader" at once
     * (and closes watch streams) instead of holding the request until its
     * own timeout; this is clientv3's WithRequireLeader. Expect: no
     * 100-continue round trip for big bodies. */
    static const char *const headers[] = {"Content-Type: application/json",
                                          "Grpc-Metadata-hasleader: true", "Expect:"};
    for (size_t i = 0; i < sizeof headers / sizeof headers[0]; i++) {
        struct curl_slist *l = curl_slist_append(c->hdrs, headers[i]);
        if (!l)
            return SK_ERR_NOMEM;
        c->hdrs = l;
    }
    c->mb = sk_mailbox_new(c->base);
    c->multi = curl_multi_init();
    if (!c->mb || !c->multi)
        return SK_ERR_NOMEM;
    if (pthread_create(&c->thread, NULL, client_main, c) != 0)
        return SK_ERR_NOMEM;
    return 0;
}

etcd *etcd_new(struct event_base *base, const char *endpoints, const etcd_opts *o, char *why,
               size_t whylen)
{
    char dummy[8];
    if (!why || !whylen) {
        why = dummy;
        whylen = sizeof dummy;
    }
    pthread_once(&curl_once, curl_init_once);
    etcd *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    pthread_mutex_init(&c->lock, NULL);
    c->base = base;
    set_opts(c, o);
    if (parse_endpoints(c, endpoints, why, whylen) != 0) {
        free_client(c);
        return NULL;
    }
    if (start_client(c) != 0) {
        snprintf(why, whylen, "cannot start the etcd client thread");
        free_client(c);
        return NULL;
    }
    return c;
}

void etcd_destroy(etcd *c)
{
    if (!c)
        return;
    c->closing = true;
    pthread_mutex_lock(&c->lock);
    c->stop = true;
    pthread_mutex_unlock(&c->lock);
    wake(c);
    pthread_join(c->thread, NULL);
    /* The client thread put everything it held on the done list, answered
     * or SK_ERR_CLOSED; calls made from these callbacks get SK_ERR_CLOSED. */
    drain(c);
    free_client(c);
}

const char *etcd_endpoint(const etcd *c)
{
    return c->eps[atomic_load(&((etcd *)c)->ep)];
}

void etcd_get_stats(const etcd *c, etcd_stats *st)
{
    memset(st, 0, sizeof *st);
    st->requests = c->requests;
    st->errors = c->errors;
    st->timeouts = c->timeouts;
    st->endpoint_switches = atomic_load(&((etcd *)c)->switches);
    st->watch_resumes = atomic_load(&((etcd *)c)->resumes);
    st->watch_pauses = atomic_load(&((etcd *)c)->pauses);
    st->latency_us_sum = c->latency_us_sum;
    st->latency_count = c->latency_count;
}

size_t etcd_prefix_end(const uint8_t *p, size_t plen, uint8_t *out)
{
    for (size_t i = plen; i-- > 0;) {
        if (p[i] < 0xff) {
            uint8_t last = (uint8_t)(p[i] + 1);
            memmove(out, p, i);
            out[i] = last;
            return i + 1;
        }
    }
    return 0;
}

/* ---- submission (loop) ---- */

/* Checks common to every call, before any work. */
static int admit(etcd *c, bool has_cb, size_t klen, size_t bytes)
{
    if (c->closing)
        return SK_ERR_CLOSED;
    if (!has_cb || !klen) /* etcd has no empty key */
        return SK_ERR_INVAL;
    if (c->queued >= c->o.max_queued)
        return SK_ERR_AGAIN;
    /* Base64 grows bytes by a third: what cannot fit is refused unencoded. */
    if (bytes / 3 * 4 > c->o.max_response)
        return SK_ERR_NOMEM;
    return 0;
}

static struct req *req_new(etcd *c, enum req_kind kind, const char *path, void *arg,
                           int64_t lease_id)
{
    struct req *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->m.type = DONE_REQ;
    r->c = c;
    r->kind = kind;
    r->path = path;
    r->arg = arg;
    r->lease_id = lease_id;
    r->last_err = SK_ERR_TIMEOUT;
    ej_stream_init(&r->js, c->o.max_response);
    return r;
}

/* Queues r with body (both owned from here on, freed on failure). */
static int submit(etcd *c, struct req *r, json_t *body)
{
    char *s = body ? json_dumps(body, JSON_COMPACT) : NULL;
    json_decref(body);
    size_t n = s ? strlen(s) : 0;
    if (!s || n > c->o.max_response) {
        free(s);
        free(r);
        return SK_ERR_NOMEM; /* a body over the cap, too */
    }
    r->body = s;
    r->blen = n;
    r->submit_us = sk_mono_us();
    r->deadline_ms = r->submit_us / 1000 + c->o.request_timeout_ms;
    pthread_mutex_lock(&c->lock);
    if (c->sub_tail)
        c->sub_tail->next = r;
    else
        c->sub_head = r;
    c->sub_tail = r;
    pthread_mutex_unlock(&c->lock);
    wake(c);
    c->queued++;
    c->requests++;
    return 0;
}

int etcd_range(etcd *c, const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
               int64_t limit, int64_t revision, unsigned flags, etcd_range_cb cb, void *arg)
{
    int rc = admit(c, cb != NULL, klen, klen + relen);
    if (rc)
        return rc;
    struct req *r = req_new(c, RK_RANGE, "/v3/kv/range", arg, 0);
    if (!r)
        return SK_ERR_NOMEM;
    r->cb.range = cb;
    return submit(c, r, ej_range(key, klen, range_end, relen, limit, revision, flags));
}

static size_t ops_bytes(const etcd_op *ops, size_t n)
{
    size_t b = 0;
    for (size_t i = 0; i < n; i++)
        b += ops[i].klen + ops[i].relen + ops[i].vlen;
    return b;
}

int etcd_txn(etcd *c, const etcd_cmp *cmps, size_t ncmp, const etcd_op *success, size_t nsuccess,
             const etcd_op *failure, size_t nfailure, etcd_txn_cb cb, void *arg)
{
    size_t bytes = ops_bytes(success, nsuccess) + ops_bytes(failure, nfailure);
    for (size_t i = 0; i < ncmp; i++)
        bytes += cmps[i].klen + cmps[i].relen + cmps[i].vlen;
    int rc = admit(c, cb != NULL, 1, bytes);
    if (rc)
        return rc;
    /* ej_txn refuses out-of-range enums and empty keys. */
    json_t *body = ej_txn(cmps, ncmp, success, nsuccess, failure, nfailure);
    if (!body)
        return SK_ERR_INVAL;
    struct req *r = req_new(c, RK_TXN, "/v3/kv/txn", arg, 0);
    if (!r) {
        json_decref(body);
        return SK_ERR_NOMEM;
    }
    r->cb.txn = cb;
    return submit(c, r, body);
}

int etcd_put(etcd *c, const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
             int64_t lease, etcd_txn_cb cb, void *arg)
{
    int rc = admit(c, cb != NULL, klen, klen + vlen);
    if (rc)
        return rc;
    struct req *r = req_new(c, RK_PUT, "/v3/kv/put", arg, 0);
    if (!r)
        return SK_ERR_NOMEM;
    r->cb.txn = cb;
    return submit(c, r, ej_put(key, klen, value, vlen, lease));
}

int etcd_delete(etcd *c, const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
                etcd_txn_cb cb, void *arg)
{
    int rc = admit(c, cb != NULL, klen, klen + relen);
    if (rc)
        return rc;
    struct req *r = req_new(c, RK_DELETE, "/v3/kv/deleterange", arg, 0);
    if (!r)
        return SK_ERR_NOMEM;
    r->cb.txn = cb;
    return submit(c, r, ej_delete(key, klen, range_end, relen));
}

static int lease_call(etcd *c, enum req_kind kind, const char *path, json_t *body, int64_t id,
                      etcd_lease_cb cb, void *arg)
{
    int rc = admit(c, cb != NULL, 1, 0);
    struct req *r = rc ? NULL : req_new(c, kind, path, arg, id);
    if (!r) {
        json_decref(body);
        return rc ? rc : SK_ERR_NOMEM;
    }
    r->cb.lease = cb;
    return submit(c, r, body);
}

int etcd_lease_grant(etcd *c, int64_t ttl_s, etcd_lease_cb cb, void *arg)
{
    if (ttl_s <= 0)
        return SK_ERR_INVAL;
    return lease_call(c, RK_GRANT, "/v3/lease/grant", ej_lease_ttl(ttl_s), 0, cb, arg);
}

int etcd_lease_keepalive(etcd *c, int64_t id, etcd_lease_cb cb, void *arg)
{
    return lease_call(c, RK_KEEPALIVE, "/v3/lease/keepalive", ej_lease_id(id), id, cb, arg);
}

int etcd_lease_revoke(etcd *c, int64_t id, etcd_lease_cb cb, void *arg)
{
    return lease_call(c, RK_REVOKE, "/v3/lease/revoke", ej_lease_id(id), id, cb, arg);
}

/* ---- watches (loop) ---- */

static uint8_t *dup_bytes(const uint8_t *p, size_t n)
{
    uint8_t *d = malloc(n ? n : 1);
    if (d && n)
        memcpy(d, p, n);
    return d;
}

etcd_watch *etcd_watch_start(etcd *c, const uint8_t *key, size_t klen, const uint8_t *range_end,
                             size_t relen, int64_t start_revision, etcd_watch_cb cb, void *arg)
{
    if (c->closing || !cb || !klen || (klen + relen) / 3 * 4 > c->o.max_response)
        return NULL;
    etcd_watch *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->end.type = DONE_END;
    w->c = c;
    w->cb = cb;
    w->arg = arg;
    w->key = dup_bytes(key, klen);
    w->klen = klen;
    w->range_end = range_end ? dup_bytes(range_end, relen) : NULL;
    w->relen = relen;
    w->next_rev = start_revision > 0 ? start_revision : 0;
    ej_stream_init(&w->js, c->o.max_response);
    if (!w->key || (range_end && !w->range_end)) {
        free_watch(w);
        return NULL;
    }
    pthread_mutex_lock(&c->lock);
    if (c->wsub_tail)
        c->wsub_tail->next = w;
    else
        c->wsub_head = w;
    c->wsub_tail = w;
    pthread_mutex_unlock(&c->lock);
    wake(c);
    return w;
}

void etcd_watch_cancel(etcd_watch *w)
{
    if (!w)
        return;
    etcd *c = w->c;
    w->cancelled = true;
    atomic_store(&w->cancel_req, true);
    pthread_mutex_lock(&c->lock);
    c->cancels = true;
    pthread_mutex_unlock(&c->lock);
    if (!c->closing)
        wake(c);
}
