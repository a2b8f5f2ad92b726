#include "session.h"

#include <event2/event.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

#define KEY_MAX 512
#define BACKOFF_MIN_MS 100
#define BACKOFF_MAX_MS 5000
#define ALLOC_ATTEMPTS 50

typedef struct revwait {
    struct revwait *next;
    int64_t revision;
    int64_t deadline_ms;
    void (*fn)(void *arg, int err);
    void *arg;
} revwait;

struct cs_session {
    struct event_base *base;
    etcd *e;
    cm_model *m;
    cs_callbacks cb;
    char *endpoints, *prefix, *rack;
    int32_t node_id;
    cm_listener listeners[CM_MAX_LISTENERS];
    int nlisteners;
    int64_t session_ms, heartbeat_ms;

    int64_t log_id;
    int64_t lease;
    int64_t ttl_s;
    int64_t deadline_us;
    bool controller;
    bool electing; /* a try for the controller key is in flight */
    bool lost;
    bool stopping;
    bool draining;

    etcd_watch *watch;
    bool resetting; /* re-reading everything after a compacted watch */
    bool keepalive_inflight;
    int64_t keepalive_sent_us;
    struct event *heartbeat_ev;
    struct event *elect_ev;  /* retries an election that failed to reach etcd */
    struct event *revwait_ev;
    revwait *revwaits;
    cs_stats st;
};

/* ---- blocking steps at start-up ---- */

static void wake_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* Runs the loop until *done, or until the deadline (monotonic ms, 0: none).
 * A private timer bounds each turn: a loopexit would outlive this call and
 * end the node's own dispatch later. */
static bool run_until(cs_session *s, const bool *done, int64_t deadline_ms)
{
    struct event *wake = evtimer_new(s->base, wake_cb, NULL);
    bool ok = true;
    while (!*done) {
        if (!wake || (deadline_ms && sk_mono_ms() >= deadline_ms)) {
            ok = *done;
            break;
        }
        struct timeval tv = {0, 20000};
        evtimer_add(wake, &tv);
        event_base_loop(s->base, EVLOOP_ONCE);
    }
    if (wake)
        event_free(wake);
    return ok;
}

static void sleep_loop(cs_session *s, int64_t ms)
{
    bool never = false;
    run_until(s, &never, sk_mono_ms() + ms);
}

struct sync {
    bool done;
    int err;
    bool succeeded;
    int64_t revision;
    int64_t id, ttl;
    /* range: the first key's value, copied */
    bool found;
    uint8_t value[4096];
    size_t vlen;
    int64_t mod_rev, lease;
};

static void sync_txn_cb(void *arg, int err, const etcd_txn_result *r)
{
    struct sync *y = arg;
    y->err = err;
    if (!err) {
        y->succeeded = r->succeeded;
        y->revision = r->revision;
        /* A range op in the ops that ran: keep its first key. */
        for (size_t i = 0; i < r->n; i++) {
            const etcd_op_result *o = &r->results[i];
            if (o->type == ETCD_OP_RANGE && o->range.n > 0) {
                const etcd_kv *kv = &o->range.kvs[0];
                y->found = true;
                y->vlen = kv->vlen < sizeof y->value ? kv->vlen : sizeof y->value;
                memcpy(y->value, kv->value, y->vlen);
                y->mod_rev = kv->mod_revision;
                y->lease = kv->lease;
            }
        }
    }
    y->done = true;
}

static void sync_range_cb(void *arg, int err, const etcd_range_result *r)
{
    struct sync *y = arg;
    y->err = err;
    if (!err) {
        y->revision = r->revision;
        if (r->n > 0) {
            y->found = true;
            y->vlen = r->kvs[0].vlen < sizeof y->value ? r->kvs[0].vlen : sizeof y->value;
            memcpy(y->value, r->kvs[0].value, y->vlen);
            y->mod_rev = r->kvs[0].mod_revision;
            y->lease = r->kvs[0].lease;
        }
    }
    y->done = true;
}

static void sync_lease_cb(void *arg, int err, int64_t id, int64_t ttl)
{
    struct sync *y = arg;
    y->err = err;
    y->id = id;
    y->ttl = ttl;
    y->done = true;
}

static int wait_sync(cs_session *s, struct sync *y, int rc)
{
    if (rc)
        return rc;
    run_until(s, &y->done, 0);
    return y->err;
}

/* Retries `step` while etcd cannot be reached, with backoff, saying so. */
static int with_retry(cs_session *s, const char *what, int64_t deadline_ms,
                      int (*step)(cs_session *s, void *arg), void *arg)
{
    int64_t backoff = BACKOFF_MIN_MS;
    for (int attempt = 0;; attempt++) {
        int rc = step(s, arg);
        if (rc != SK_ERR_IO && rc != SK_ERR_TIMEOUT && rc != SK_ERR_AGAIN)
            return rc;
        if (deadline_ms && sk_mono_ms() + backoff >= deadline_ms)
            return rc;
        if (attempt == 0 || backoff == BACKOFF_MAX_MS)
            SK_WARN("cluster", "waiting for etcd at %s to %s (%s); retrying every %lld ms at most",
                    s->endpoints, what, sk_err_name(rc), (long long)BACKOFF_MAX_MS);
        sleep_loop(s, backoff);
        backoff = backoff * 2 > BACKOFF_MAX_MS ? BACKOFF_MAX_MS : backoff * 2;
    }
}

/* ---- keys ---- */

static size_t key_counter(cs_session *s, const char *name, char *buf)
{
    return cm_key_counter(s->prefix, name, buf, KEY_MAX);
}

/* ---- start-up steps ---- */

static void random_cluster_id(char *out, size_t len)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    uint8_t r[16];
    if (getrandom(r, sizeof r, 0) != (ssize_t)sizeof r)
        for (size_t i = 0; i < sizeof r; i++)
            r[i] = (uint8_t)(rand() ^ (int)sk_mono_us());
    size_t k = 0;
    for (size_t i = 0; i < sizeof r && k + 1 < len && k < 22; i++)
        out[k++] = b64[r[i] & 63];
    out[k] = 0;
}

/* Creates the cluster id unless it exists. */
static int step_cluster_id(cs_session *s, void *arg)
{
    (void)arg;
    char key[KEY_MAX];
    size_t kl = cm_key_cluster_id(s->prefix, key, sizeof key);
    char id[32];
    random_cluster_id(id, sizeof id);
    char *val = cm_encode_cluster_id(id);
    if (!val)
        return SK_ERR_NOMEM;
    etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_CREATE,
                  .result = ETCD_CMP_EQUAL, .number = 0};
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = strlen(val)};
    struct sync y = {0};
    int rc = wait_sync(s, &y, etcd_txn(s->e, &c, 1, &put, 1, NULL, 0, sync_txn_cb, &y));
    free(val);
    return rc;
}

/* One compare-and-swap round of a counter: reads it, adds count. */
struct alloc_step {
    const char *name;
    int64_t count;
    int64_t first;
};

static int alloc_once(cs_session *s, const char *name, int64_t count, int64_t *first);

static int step_alloc(cs_session *s, void *arg)
{
    struct alloc_step *a = arg;
    for (int i = 0; i < ALLOC_ATTEMPTS; i++) {
        int rc = alloc_once(s, a->name, a->count, &a->first);
        if (rc != SK_ERR_EXIST)
            return rc;
    }
    return SK_ERR_AGAIN;
}

/* Reads the counter (blocking), then swaps it. SK_ERR_EXIST: it changed in
 * between; try again. */
static int alloc_once(cs_session *s, const char *name, int64_t count, int64_t *first)
{
    char key[KEY_MAX];
    size_t kl = key_counter(s, name, key);
    struct sync y = {0};
    int rc = wait_sync(s, &y, etcd_range(s->e, (const uint8_t *)key, kl, NULL, 0, 0, 0, 0,
                                         sync_range_cb, &y));
    if (rc)
        return rc;
    int64_t cur = 1;
    if (y.found && cm_decode_counter(y.value, y.vlen, &cur) != 0)
        return SK_ERR_CORRUPT;
    char *val = cm_encode_counter(cur + count);
    if (!val)
        return SK_ERR_NOMEM;
    etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl,
                  .target = y.found ? ETCD_TARGET_MOD : ETCD_TARGET_CREATE,
                  .result = ETCD_CMP_EQUAL, .number = y.found ? y.mod_rev : 0};
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = strlen(val)};
    struct sync t = {0};
    rc = wait_sync(s, &t, etcd_txn(s->e, &c, 1, &put, 1, NULL, 0, sync_txn_cb, &t));
    free(val);
    if (rc)
        return rc;
    if (!t.succeeded)
        return SK_ERR_EXIST;
    *first = cur;
    return 0;
}

static int step_lease(cs_session *s, void *arg)
{
    (void)arg;
    struct sync y = {0};
    int64_t t0 = sk_boot_us();
    int rc = wait_sync(s, &y, etcd_lease_grant(s->e, s->ttl_s, sync_lease_cb, &y));
    if (rc)
        return rc;
    s->lease = y.id;
    s->ttl_s = y.ttl;
    s->deadline_us = t0 + y.ttl * 1000000 - y.ttl * 1000000 / 10;
    return 0;
}

static char *node_value(cs_session *s)
{
    cm_node nd;
    memset(&nd, 0, sizeof nd);
    nd.id = s->node_id;
    snprintf(nd.rack, sizeof nd.rack, "%s", s->rack);
    nd.log = s->log_id;
    nd.nlisteners = s->nlisteners;
    memcpy(nd.listeners, s->listeners, sizeof nd.listeners);
    nd.draining = s->draining;
    nd.started_ms = sk_now_ms();
    return cm_encode_node(&nd);
}

/* Registers the node (if its key is free) and its logs, in one transaction.
 * SK_ERR_EXIST: another process holds the node id. */
static int step_register(cs_session *s, void *arg)
{
    (void)arg;
    char nkey[KEY_MAX], lkey[KEY_MAX];
    size_t nkl = cm_key_node(s->prefix, s->node_id, nkey, sizeof nkey);
    size_t lkl = cm_key_log(s->prefix, s->log_id, lkey, sizeof lkey);
    cm_log lg;
    memset(&lg, 0, sizeof lg);
    lg.id = s->log_id;
    lg.node = s->node_id;
    snprintf(lg.rack, sizeof lg.rack, "%s", s->rack);
    lg.state = CM_LOG_LIVE;
    lg.custodian = -1;
    char *nv = node_value(s), *lv = cm_encode_log(&lg);
    /* The payload log (docs/zones.md) lives and dies with the data log. */
    char pkey[KEY_MAX];
    size_t pkl = cm_key_log(s->prefix, cs_payload_log_id(s), pkey, sizeof pkey);
    lg.id = cs_payload_log_id(s);
    lg.kind = CM_LOG_PAYLOAD;
    char *pv = cm_encode_log(&lg);
    int rc = SK_ERR_NOMEM;
    if (nv && lv && pv) {
        etcd_cmp c = {.key = (const uint8_t *)nkey, .klen = nkl, .target = ETCD_TARGET_CREATE,
                      .result = ETCD_CMP_EQUAL, .number = 0};
        etcd_op ops[3] = {
            {.type = ETCD_OP_PUT, .key = (const uint8_t *)nkey, .klen = nkl,
             .value = (const uint8_t *)nv, .vlen = strlen(nv), .lease = s->lease},
            {.type = ETCD_OP_PUT, .key = (const uint8_t *)lkey, .klen = lkl,
             .value = (const uint8_t *)lv, .vlen = strlen(lv)},
            {.type = ETCD_OP_PUT, .key = (const uint8_t *)pkey, .klen = pkl,
             .value = (const uint8_t *)pv, .vlen = strlen(pv)},
        };
        struct sync y = {0};
        rc = wait_sync(s, &y, etcd_txn(s->e, &c, 1, ops, 3, NULL, 0, sync_txn_cb, &y));
        if (rc == 0 && !y.succeeded)
            rc = SK_ERR_EXIST;
    }
    free(nv);
    free(lv);
    free(pv);
    return rc;
}

struct load {
    cs_session *s;
    bool done;
    int err;
};

static void load_cb(void *arg, int err, const etcd_range_result *r)
{
    struct load *l = arg;
    cs_session *s = l->s;
    l->err = err;
    if (!err) {
        for (size_t i = 0; i < r->n; i++)
            cm_apply_put(s->m, r->kvs[i].key, r->kvs[i].klen, r->kvs[i].value, r->kvs[i].vlen,
                         r->kvs[i].mod_revision);
        cm_set_revision(s->m, r->revision);
    }
    l->done = true;
}

/* Reads every key of the cluster into the model (a fresh one, or one being
 * reset). */
static int read_all(cs_session *s)
{
    uint8_t end[KEY_MAX];
    size_t pl = strlen(s->prefix);
    size_t el = etcd_prefix_end((const uint8_t *)s->prefix, pl, end);
    struct load l = {s, false, 0};
    int rc = etcd_range(s->e, (const uint8_t *)s->prefix, pl, end, el, 0, 0, 0, load_cb, &l);
    if (rc)
        return rc;
    run_until(s, &l.done, 0);
    return l.err;
}

static int step_read_all(cs_session *s, void *arg)
{
    (void)arg;
    return read_all(s);
}

/* ---- the watch ---- */

static void watch_cb(void *arg, int err, int64_t revision, const etcd_event *evs, size_t n);
static void run_revwaits(cs_session *s, bool all_timeout);

static int start_watch(cs_session *s)
{
    uint8_t end[KEY_MAX];
    size_t pl = strlen(s->prefix);
    size_t el = etcd_prefix_end((const uint8_t *)s->prefix, pl, end);
    s->watch = etcd_watch_start(s->e, (const uint8_t *)s->prefix, pl, end, el,
                                cm_revision(s->m) + 1, watch_cb, s);
    return s->watch ? 0 : SK_ERR_NOMEM;
}

static void reset_cb(void *arg, int err, const etcd_range_result *r)
{
    cs_session *s = arg;
    if (s->stopping)
        return;
    if (err) {
        /* Try again soon: the node keeps its last view meanwhile. */
        SK_WARN("cluster", "cannot re-read the cluster's keys (%s); trying again",
                sk_err_name(err));
        s->resetting = false;
        event_active(s->elect_ev, EV_TIMEOUT, 0);
        return;
    }
    cm_reset_begin(s->m);
    for (size_t i = 0; i < r->n; i++)
        cm_apply_put(s->m, r->kvs[i].key, r->kvs[i].klen, r->kvs[i].value, r->kvs[i].vlen,
                     r->kvs[i].mod_revision);
    cm_set_revision(s->m, r->revision);
    cm_reset_end(s->m);
    s->resetting = false;
    s->st.watch_resets++;
    if (start_watch(s) != 0)
        SK_ERROR("cluster", "cannot restart the watch of the cluster's keys");
    run_revwaits(s, false);
}

static void reset_all(cs_session *s)
{
    if (s->resetting || s->stopping)
        return;
    s->resetting = true;
    uint8_t end[KEY_MAX];
    size_t pl = strlen(s->prefix);
    size_t el = etcd_prefix_end((const uint8_t *)s->prefix, pl, end);
    if (etcd_range(s->e, (const uint8_t *)s->prefix, pl, end, el, 0, 0, 0, reset_cb, s) != 0) {
        s->resetting = false;
        event_active(s->elect_ev, EV_TIMEOUT, 0);
    }
}

static void watch_cb(void *arg, int err, int64_t revision, const etcd_event *evs, size_t n)
{
    cs_session *s = arg;
    if (err) {
        s->watch = NULL;
        if (err == SK_ERR_CLOSED || s->stopping)
            return;
        SK_WARN("cluster", "the watch of the cluster's keys ended (%s): re-reading them",
                sk_err_name(err));
        reset_all(s);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const etcd_event *ev = &evs[i];
        if (ev->type == ETCD_EV_PUT)
            cm_apply_put(s->m, ev->kv.key, ev->kv.klen, ev->kv.value, ev->kv.vlen,
                         ev->kv.mod_revision);
        else
            cm_apply_delete(s->m, ev->kv.key, ev->kv.klen, ev->kv.mod_revision);
    }
    if (revision > cm_revision(s->m))
        cm_set_revision(s->m, revision);
    run_revwaits(s, false);
}

/* ---- controller election ---- */

static void elect_done(void *arg, int err, const etcd_txn_result *r)
{
    (void)r;
    cs_session *s = arg;
    s->electing = false;
    if (s->stopping)
        return;
    /* Whether we won shows in the model (the watch brings the key): a reply
     * lost on the way must not leave two minds about it. */
    if (err && cm_controller(s->m) < 0) {
        struct timeval tv = {0, 500000};
        evtimer_add(s->elect_ev, &tv);
    }
}

static void try_elect(cs_session *s)
{
    if (s->electing || s->stopping || s->lost || s->draining || cm_controller(s->m) >= 0)
        return;
    char key[KEY_MAX];
    size_t kl = cm_key_controller(s->prefix, key, sizeof key);
    char *val = cm_encode_controller(s->node_id, s->log_id);
    if (!val)
        return;
    etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_CREATE,
                  .result = ETCD_CMP_EQUAL, .number = 0};
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = strlen(val), .lease = s->lease};
    s->electing = etcd_txn(s->e, &c, 1, &put, 1, NULL, 0, elect_done, s) == 0;
    free(val);
}

static void elect_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cs_session *s = arg;
    if (!s->watch && !s->resetting && !s->stopping) {
        reset_all(s);
        return;
    }
    try_elect(s);
}

/* The model says who the controller is: follow it. */
static void controller_changed(cs_session *s)
{
    int32_t c = cm_controller(s->m);
    bool me = c == s->node_id && !s->lost;
    if (me != s->controller) {
        s->controller = me;
        SK_INFO("cluster", "node %d %s the controller", s->node_id, me ? "is now" : "is no longer");
        if (s->cb.on_controller)
            s->cb.on_controller(s->cb.arg, me);
    }
    if (c < 0)
        try_elect(s);
}

static void model_changed(void *arg, const cm_change *c)
{
    cs_session *s = arg;
    if (c->kind == CM_CH_CONTROLLER)
        controller_changed(s);
    if (s->cb.on_change)
        s->cb.on_change(s->cb.arg, c);
}

/* ---- the lease ---- */

static void keepalive_done(void *arg, int err, int64_t id, int64_t ttl)
{
    (void)id;
    cs_session *s = arg;
    s->keepalive_inflight = false;
    if (s->stopping)
        return;
    s->st.last_keepalive_us = sk_boot_us() - s->keepalive_sent_us;
    if (err == SK_ERR_NOENT || (err == 0 && ttl <= 0)) {
        if (!s->lost) {
            s->lost = true;
            SK_ERROR("cluster", "the lease of node %d is gone: the cluster counts this "
                     "incarnation (log %lld) dead",
                     s->node_id, (long long)s->log_id);
            if (s->controller) {
                s->controller = false;
                if (s->cb.on_controller)
                    s->cb.on_controller(s->cb.arg, false);
            }
            if (s->cb.on_lost)
                s->cb.on_lost(s->cb.arg);
        }
        return;
    }
    if (err) {
        s->st.keepalive_failures++;
        if (sk_boot_us() >= s->deadline_us)
            s->st.lease_lapses++;
        return;
    }
    s->st.keepalives++;
    /* etcd counts the TTL from when it got the keep-alive, which is after we
     * sent it: a deadline from the send time never outlives the lease. The
     * margin covers clocks that run at slightly different rates. */
    int64_t ttl_us = ttl * 1000000;
    int64_t margin = ttl_us / 20 > 50000 ? ttl_us / 20 : 50000;
    int64_t deadline = s->keepalive_sent_us + ttl_us - margin;
    if (deadline > s->deadline_us) {
        s->deadline_us = deadline;
        if (s->cb.on_deadline)
            s->cb.on_deadline(s->cb.arg, deadline);
    }
}

static void heartbeat_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    cs_session *s = arg;
    if (s->keepalive_inflight || s->lost || s->stopping)
        return;
    s->keepalive_sent_us = sk_boot_us();
    s->keepalive_inflight =
        etcd_lease_keepalive(s->e, s->lease, keepalive_done, s) == 0;
    run_revwaits(s, false);
}

/* ---- waiting for a revision ---- */

static void run_revwaits(cs_session *s, bool all_timeout)
{
    int64_t rev = cm_revision(s->m), now = sk_mono_ms();
    revwait **pp = &s->revwaits, *ready = NULL;
    while (*pp) {
        revwait *w = *pp;
        bool reached = w->revision <= rev;
        if (reached || all_timeout || now >= w->deadline_ms) {
            *pp = w->next;
            w->next = ready;
            ready = w;
            if (reached)
                w->deadline_ms = -1;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        revwait *w = ready;
        ready = w->next;
        w->fn(w->arg, w->deadline_ms == -1 ? 0 : (all_timeout ? SK_ERR_CLOSED : SK_ERR_TIMEOUT));
        free(w);
    }
}

static void revwait_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    run_revwaits(arg, false);
}

void cs_wait_revision(cs_session *s, int64_t revision, int64_t timeout_ms,
                      void (*fn)(void *arg, int err), void *arg)
{
    if (revision <= cm_revision(s->m)) {
        fn(arg, 0);
        return;
    }
    revwait *w = calloc(1, sizeof *w);
    if (!w) {
        fn(arg, SK_ERR_NOMEM);
        return;
    }
    w->revision = revision;
    w->deadline_ms = sk_mono_ms() + timeout_ms;
    w->fn = fn;
    w->arg = arg;
    w->next = s->revwaits;
    s->revwaits = w;
    struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
    event_add(s->revwait_ev, &tv);
}

/* ---- counters, asynchronously ---- */

struct alloc {
    cs_session *s;
    char name[32];
    int64_t count;
    int attempts;
    int64_t cur;
    void (*fn)(void *arg, int err, int64_t first);
    void *arg;
};

static void alloc_read(struct alloc *a);

static void alloc_swapped(void *arg, int err, const etcd_txn_result *r)
{
    struct alloc *a = arg;
    if (err == 0 && !r->succeeded && ++a->attempts < ALLOC_ATTEMPTS) {
        alloc_read(a); /* someone else took a block meanwhile */
        return;
    }
    if (err == 0 && !r->succeeded)
        err = SK_ERR_AGAIN;
    a->fn(a->arg, err, err ? -1 : a->cur);
    free(a);
}

static void alloc_got(void *arg, int err, const etcd_range_result *r)
{
    struct alloc *a = arg;
    cs_session *s = a->s;
    int64_t cur = 1, mod = 0;
    if (!err && r->n > 0) {
        mod = r->kvs[0].mod_revision;
        if (cm_decode_counter(r->kvs[0].value, r->kvs[0].vlen, &cur) != 0)
            err = SK_ERR_CORRUPT;
    }
    char key[KEY_MAX];
    size_t kl = key_counter(s, a->name, key);
    char *val = err ? NULL : cm_encode_counter(cur + a->count);
    if (!err && !val)
        err = SK_ERR_NOMEM;
    if (!err) {
        etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl,
                      .target = mod ? ETCD_TARGET_MOD : ETCD_TARGET_CREATE,
                      .result = ETCD_CMP_EQUAL, .number = mod};
        etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                       .value = (const uint8_t *)val, .vlen = strlen(val)};
        a->cur = cur;
        err = etcd_txn(s->e, &c, 1, &put, 1, NULL, 0, alloc_swapped, a);
    }
    free(val);
    if (err) {
        a->fn(a->arg, err, -1);
        free(a);
    }
}

static void alloc_read(struct alloc *a)
{
    char key[KEY_MAX];
    size_t kl = key_counter(a->s, a->name, key);
    int rc = etcd_range(a->s->e, (const uint8_t *)key, kl, NULL, 0, 0, 0, 0, alloc_got, a);
    if (rc) {
        a->fn(a->arg, rc, -1);
        free(a);
    }
}

void cs_alloc(cs_session *s, const char *name, int64_t count,
              void (*fn)(void *arg, int err, int64_t first), void *arg)
{
    struct alloc *a = calloc(1, sizeof *a);
    if (!a) {
        fn(arg, SK_ERR_NOMEM, -1);
        return;
    }
    a->s = s;
    snprintf(a->name, sizeof a->name, "%s", name);
    a->count = count;
    a->fn = fn;
    a->arg = arg;
    alloc_read(a);
}

/* ---- life ---- */

static void session_free(cs_session *s)
{
    if (s->watch)
        etcd_watch_cancel(s->watch);
    s->watch = NULL;
    run_revwaits(s, true);
    if (s->heartbeat_ev)
        event_free(s->heartbeat_ev);
    if (s->elect_ev)
        event_free(s->elect_ev);
    if (s->revwait_ev)
        event_free(s->revwait_ev);
    etcd_destroy(s->e);
    cm_destroy(s->m);
    free(s->endpoints);
    free(s->prefix);
    free(s->rack);
    free(s);
}

static int new_session(cs_session **out, struct event_base *base, const cs_opts *o,
                       const cs_callbacks *cb, char *why, size_t whylen)
{
    cs_session *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    *out = s;
    s->base = base;
    if (cb)
        s->cb = *cb;
    s->endpoints = strdup(o->endpoints);
    s->prefix = strdup(o->prefix);
    s->rack = strdup(o->rack ? o->rack : "");
    s->node_id = o->node_id;
    s->nlisteners = o->nlisteners < CM_MAX_LISTENERS ? o->nlisteners : CM_MAX_LISTENERS;
    memcpy(s->listeners, o->listeners, (size_t)s->nlisteners * sizeof *s->listeners);
    s->session_ms = o->session_ms;
    s->heartbeat_ms = o->heartbeat_ms;
    s->ttl_s = (o->session_ms + 999) / 1000;
    s->heartbeat_ev = event_new(base, -1, EV_PERSIST, heartbeat_cb, s);
    s->elect_ev = evtimer_new(base, elect_cb, s);
    s->revwait_ev = evtimer_new(base, revwait_cb, s);
    s->m = cm_new(o->prefix, model_changed, s);
    if (!s->endpoints || !s->prefix || !s->rack || !s->heartbeat_ev || !s->elect_ev ||
        !s->revwait_ev || !s->m) {
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    etcd_opts eo = {0};
    eo.request_timeout_ms = o->session_ms > 2000 ? o->session_ms / 2 : 1000;
    eo.account = o->etcd_account;
    eo.account_arg = o->etcd_account_arg;
    s->e = etcd_new(base, o->endpoints, &eo, why, whylen);
    return s->e ? 0 : SK_ERR_INVAL;
}

/* Registration, waiting while a previous incarnation holds the node id. */
static int register_node(cs_session *s, int64_t deadline_ms, char *why, size_t whylen)
{
    for (int attempt = 0;; attempt++) {
        int rc = with_retry(s, "register this node", deadline_ms, step_register, NULL);
        if (rc == SK_ERR_NOENT) {
            /* Our own lease ran out while we waited (nothing renews it before
             * the session starts): the previous holder's outlived it, as after
             * an etcd restore or a new etcd leader extending every lease. */
            SK_INFO("cluster", "node id %d: the lease taken to register expired while waiting; "
                    "taking a new one", s->node_id);
            rc = with_retry(s, "take a lease", deadline_ms, step_lease, NULL);
            if (rc)
                return rc;
            continue;
        }
        if (rc != SK_ERR_EXIST)
            return rc;
        if (deadline_ms && sk_mono_ms() >= deadline_ms) {
            snprintf(why, whylen, "node id %d stays registered by another process in etcd",
                     s->node_id);
            return rc;
        }
        if (attempt == 0)
            SK_WARN("cluster", "node id %d is registered by another process (a previous run "
                    "whose lease has not expired yet, or another node with the same node.id): "
                    "waiting",
                    s->node_id);
        sleep_loop(s, 250);
    }
}

cs_session *cs_start(struct event_base *base, const cs_opts *o, const cs_callbacks *cb,
                     char *why, size_t whylen)
{
    cs_session *s = NULL;
    if (new_session(&s, base, o, cb, why, whylen) != 0) {
        if (s)
            session_free(s);
        return NULL;
    }
    int64_t deadline = o->start_timeout_ms ? sk_mono_ms() + o->start_timeout_ms : 0;
    /* Two ids: the data log, and the payload log right after it. */
    struct alloc_step log = {"next_log", 2, 0};
    int rc = with_retry(s, "create the cluster id", deadline, step_cluster_id, NULL);
    if (rc == 0)
        rc = with_retry(s, "allocate a log id", deadline, step_alloc, &log);
    s->log_id = log.first;
    if (rc == 0)
        rc = with_retry(s, "take a lease", deadline, step_lease, NULL);
    if (rc == 0)
        rc = register_node(s, deadline, why, whylen);
    if (rc == 0)
        rc = with_retry(s, "read the cluster's keys", deadline, step_read_all, NULL);
    if (rc == 0)
        rc = start_watch(s);
    if (rc) {
        if (!why[0])
            snprintf(why, whylen, "cannot join the cluster through etcd at %s: %s", o->endpoints,
                     sk_err_name(rc));
        session_free(s);
        return NULL;
    }
    struct timeval tv = {s->heartbeat_ms / 1000, (s->heartbeat_ms % 1000) * 1000};
    event_add(s->heartbeat_ev, &tv);
    if (s->cb.on_deadline)
        s->cb.on_deadline(s->cb.arg, s->deadline_us);
    SK_INFO("cluster", "node %d joined cluster %s through etcd at %s: log %lld, lease %llx "
            "(TTL %lld s)",
            s->node_id, cm_cluster_id(s->m), s->endpoints, (long long)s->log_id,
            (unsigned long long)s->lease, (long long)s->ttl_s);
    controller_changed(s);
    return s;
}

static void revoke_done(void *arg, int err, int64_t id, int64_t ttl)
{
    (void)err;
    (void)id;
    (void)ttl;
    *(bool *)arg = true;
}

void cs_stop(cs_session *s)
{
    if (!s)
        return;
    s->stopping = true;
    event_del(s->heartbeat_ev);
    if (s->watch)
        etcd_watch_cancel(s->watch);
    s->watch = NULL;
    bool done = false;
    if (!s->lost && etcd_lease_revoke(s->e, s->lease, revoke_done, &done) == 0)
        run_until(s, &done, sk_mono_ms() + 1000);
    session_free(s);
}

/* ---- small things ---- */

etcd *cs_etcd(cs_session *s)
{
    return s->e;
}

cm_model *cs_model(cs_session *s)
{
    return s->m;
}

int64_t cs_log_id(const cs_session *s)
{
    return s->log_id;
}

int64_t cs_payload_log_id(const cs_session *s)
{
    return s->log_id + 1;
}

int64_t cs_lease(const cs_session *s)
{
    return s->lease;
}

const char *cs_prefix(const cs_session *s)
{
    return s->prefix;
}

int32_t cs_node_id(const cs_session *s)
{
    return s->node_id;
}

bool cs_is_controller(const cs_session *s)
{
    return s->controller;
}

int64_t cs_deadline(const cs_session *s)
{
    return s->deadline_us;
}

static void drain_put_done(void *arg, int err, const etcd_txn_result *r)
{
    (void)r;
    cs_session *s = arg;
    if (err && !s->stopping)
        SK_WARN("cluster", "cannot mark node %d draining in etcd (%s); its partitions move when "
                "it stops",
                s->node_id, sk_err_name(err));
}

void cs_set_draining(cs_session *s)
{
    if (s->draining || s->lost)
        return;
    s->draining = true;
    char key[KEY_MAX];
    size_t kl = cm_key_node(s->prefix, s->node_id, key, sizeof key);
    char *val = node_value(s);
    if (!val)
        return;
    if (etcd_put(s->e, (const uint8_t *)key, kl, (const uint8_t *)val, strlen(val), s->lease,
                 drain_put_done, s) != 0)
        SK_WARN("cluster", "cannot mark node %d draining", s->node_id);
    free(val);
}

void cs_get_stats(const cs_session *s, cs_stats *st)
{
    *st = s->st;
}
