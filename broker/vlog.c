#include "vlog.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "kbatch.h"
#include "meta.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"


/* A callback waiting for the WAL to be durable, or the view to apply, up to
 * a position. */
typedef struct vwait {
    struct vwait *next;
    wal_lsn end;
    sk_vlog_fn fn;
    void *arg;
} vwait;

struct sk_vlog {
    sk_node *n;
    int64_t id;
    wal *wal;
    sk_store *store;
    sk_vlog_hooks hooks;
    wal_lsn applied;          /* the view reflects the WAL below this */
    vwait *dwaiters;          /* for durability, unordered */
    vwait *awaiters;          /* for the view, unordered */
    sk_store_txn *txn;        /* records durable since the last view update */
    bool inflight;            /* a view transaction runs */
    bool view_failed;         /* one failed: the view stays behind until restart */
    int64_t last_ms;          /* when the last one was submitted */
    struct event *flush_ev;   /* after durability callbacks */
    struct event *timer_ev;   /* submits the next transaction when due */
    bool closed;
};

/* One record between its append and its durability. */
struct pend {
    sk_vlog *v;
    sk_store_rec rec;
    sk_vlog_fn fn;
    void *arg;
};

sk_vlog *sk_vlog_new(sk_node *n, int64_t id, sk_store *store, const sk_vlog_hooks *hooks)
{
    sk_vlog *v = calloc(1, sizeof *v);
    if (!v)
        return NULL;
    v->n = n;
    v->id = id;
    v->store = store;
    if (hooks)
        v->hooks = *hooks;
    v->applied = sk_store_applied(store);
    return v;
}

wal *sk_vlog_wal(const sk_vlog *v)
{
    return v->wal;
}

sk_store *sk_vlog_store(const sk_vlog *v)
{
    return v->store;
}

int64_t sk_vlog_id(const sk_vlog *v)
{
    return v->id;
}

wal_lsn sk_vlog_applied(const sk_vlog *v)
{
    return v->applied;
}

/* ---- waiting ---- */

static void add_wait(vwait **list, wal_lsn end, sk_vlog_fn fn, void *arg)
{
    vwait *w = calloc(1, sizeof *w);
    if (!w) {
        fn(arg, SK_ERR_NOMEM);
        return;
    }
    w->end = end;
    w->fn = fn;
    w->arg = arg;
    w->next = *list;
    *list = w;
}

/* Runs (and unlinks) every waiter reached by `pos`, or all of them with err. */
static void run_waits(vwait **list, wal_lsn pos, int err)
{
    vwait **pp = list, *ready = NULL;
    while (*pp) {
        vwait *w = *pp;
        if (err || w->end <= pos) {
            *pp = w->next;
            w->next = ready;
            ready = w;
        } else {
            pp = &w->next;
        }
    }
    while (ready) {
        vwait *w = ready;
        ready = w->next;
        w->fn(w->arg, err);
        free(w);
    }
}

void sk_vlog_wait_durable(sk_vlog *v, wal_lsn end, sk_vlog_fn fn, void *arg)
{
    if (wal_durable_lsn(v->wal) >= end) {
        fn(arg, 0);
        return;
    }
    add_wait(&v->dwaiters, end, fn, arg);
}

void sk_vlog_wait_applied(sk_vlog *v, wal_lsn end, sk_vlog_fn fn, void *arg)
{
    if (v->applied >= end) {
        fn(arg, 0);
        return;
    }
    if (v->view_failed || !v->wal || wal_failed(v->wal)) {
        fn(arg, SK_ERR_IO);
        return;
    }
    add_wait(&v->awaiters, end, fn, arg);
}

/* ---- the view follows the WAL ---- */

static void store_done(void *arg, int err, wal_lsn applied)
{
    sk_vlog *v = arg;
    v->inflight = false;
    if (err) {
        /* The view is derived: a failed transaction is redone from the WAL
         * at the next start. Whoever waits for it now waits in vain. */
        SK_ERROR("vlog", "SQLite view update of log %lld failed (%s); it will be rebuilt from "
                 "the WAL at the next start",
                 (long long)v->id, sk_err_name(err));
        v->view_failed = true;
        run_waits(&v->awaiters, 0, SK_ERR_IO);
        return;
    }
    v->applied = applied;
    run_waits(&v->awaiters, applied, 0);
    if (v->hooks.applied)
        v->hooks.applied(v->hooks.arg);
    if (v->txn && sk_store_txn_count(v->txn))
        event_active(v->flush_ev, EV_TIMEOUT, 0);
}

static bool stopping(const sk_vlog *v)
{
    return v->n->stopping;
}

static void flush_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_vlog *v = arg;
    if (!v->wal)
        return;
    run_waits(&v->dwaiters, wal_durable_lsn(v->wal), wal_failed(v->wal) ? SK_ERR_IO : 0);
    if (v->hooks.durable)
        v->hooks.durable(v->hooks.arg);
    /* One transaction at a time keeps the view's 'applied' exact and lets
     * the next one gather everything that became durable meanwhile; and at
     * most one per view.commit.interval.ms: each writes whole SQLite pages,
     * so a transaction per group commit would write the data a second time. */
    if (v->inflight || v->view_failed || !v->txn || sk_store_txn_count(v->txn) == 0)
        return;
    int64_t wait = v->last_ms + v->n->cfg->view_commit_interval_ms - sk_mono_ms();
    if (wait > 0 && !stopping(v)) {
        if (!evtimer_pending(v->timer_ev, NULL)) {
            struct timeval tv = {(time_t)(wait / 1000), (long)(wait % 1000) * 1000};
            evtimer_add(v->timer_ev, &tv);
        }
        return;
    }
    v->last_ms = sk_mono_ms();
    sk_store_txn *t = v->txn;
    v->txn = NULL;
    v->inflight = true;
    /* Every record in t is durable and the WAL completes in order, so the
     * view reflects the WAL up to the end of t's last record. */
    sk_store_submit(v->store, t, store_done, v);
}

/* ---- appends ---- */

static void append_done(void *arg, int err, wal_lsn lsn)
{
    (void)lsn;
    struct pend *pe = arg;
    sk_vlog *v = pe->v;
    if (err == 0) {
        if (!v->txn)
            v->txn = sk_store_txn_new();
        if (!v->txn || sk_store_txn_add(v->txn, &pe->rec) != 0) {
            /* The view falls behind; it is rebuilt from the WAL at the next
             * start. Keep the cache from evicting what it cannot find. */
            SK_ERROR("vlog", "out of memory queueing a record for the SQLite view");
        }
        event_active(v->flush_ev, EV_TIMEOUT, 0);
    }
    else if (v->flush_ev) {
        /* Failures end the waits for durability too. */
        event_active(v->flush_ev, EV_TIMEOUT, 0);
    }
    sk_store_rec_free(&pe->rec);
    if (pe->fn)
        pe->fn(pe->arg, err);
    free(pe);
    if (err == SK_ERR_FENCED && v->hooks.fenced)
        v->hooks.fenced(v->hooks.arg);
}

/* last_crc: the CRC of the last piece, when known (wal_appendv_known). */
static int append_pend(sk_vlog *v, uint8_t type, const struct iovec *iov, int iovcnt,
                       const uint32_t *last_crc, struct pend *pe, sk_vlog_fn fn, void *arg,
                       wal_lsn *lsn_end)
{
    size_t len = 0;
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    wal_lsn lsn;
    int rc = last_crc ? wal_appendv_known(v->wal, type, iov, iovcnt, *last_crc, append_done, pe,
                                          &lsn)
                      : wal_appendv(v->wal, type, iov, iovcnt, append_done, pe, &lsn);
    if (rc != 0) {
        sk_store_rec_free(&pe->rec);
        free(pe);
        return rc;
    }
    pe->rec.lsn = lsn;
    pe->rec.end = lsn + WAL_RECORD_HEADER + len;
    pe->v = v;
    pe->fn = fn;
    pe->arg = arg;
    if (lsn_end)
        *lsn_end = pe->rec.end;
    return 0;
}

int sk_vlog_append(sk_vlog *v, uint8_t type, const struct iovec *iov, int iovcnt, sk_vlog_fn fn,
                   void *arg, wal_lsn *lsn_end)
{
    struct pend *pe = calloc(1, sizeof *pe);
    if (!pe)
        return SK_ERR_NOMEM;
    /* The view needs the record whole: gather the pieces when there are
     * several (metadata records, which are small). */
    size_t len = 0;
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    uint8_t *flat = NULL;
    const uint8_t *whole = iovcnt == 1 ? iov[0].iov_base : NULL;
    if (!whole) {
        flat = calloc(1, len ? len : 1);
        if (!flat) {
            free(pe);
            return SK_ERR_NOMEM;
        }
        size_t k = 0;
        for (int i = 0; i < iovcnt; i++) {
            memcpy(flat + k, iov[i].iov_base, iov[i].iov_len);
            k += iov[i].iov_len;
        }
        whole = flat;
    }
    int rc = sk_store_rec_parse(&pe->rec, 0, type, whole, (uint32_t)len);
    free(flat);
    if (rc != 0) {
        free(pe);
        return rc;
    }
    return append_pend(v, type, iov, iovcnt, NULL, pe, fn, arg, lsn_end);
}

int sk_vlog_append_data(sk_vlog *v, sk_part *p, const uint8_t *batch, uint32_t len,
                        const kb_header *h, const sk_link *link, bool crc_known, sk_vlog_fn fn,
                        void *arg, wal_lsn *lsn, wal_lsn *lsn_end)
{
    struct pend *pe = calloc(1, sizeof *pe);
    if (!pe)
        return SK_ERR_NOMEM;
    uint8_t head[SK_DATA_HEADER], lrec[SK_LINK_SIZE];
    sk_store_rec_data(&pe->rec, &p->topic->id, p->index, h, len);
    if (pe->rec.control == -2)
        pe->rec.control = (int8_t)sk_txidx_control_type(batch, len);
    struct iovec iov[2];
    int iovcnt = 1;
    if (link) {
        sk_link_encode(lrec, link);
        iov[0] = (struct iovec){lrec, sizeof lrec};
    } else {
        sk_data_header(head, &p->topic->id, p->index);
        iov[0] = (struct iovec){head, sizeof head};
        iov[1] = (struct iovec){(void *)batch, len};
        iovcnt = 2;
    }
    uint32_t crc = 0;
    if (crc_known && !link)
        crc = kb_whole_crc32c(batch, len);
    wal_lsn end;
    int rc = append_pend(v, link ? SK_WAL_LINK : SK_WAL_DATA, iov, iovcnt,
                         crc_known && !link ? &crc : NULL, pe, fn, arg, &end);
    if (rc == 0) {
        size_t rlen = link ? sizeof lrec : sizeof head + len;
        if (lsn)
            *lsn = end - WAL_RECORD_HEADER - rlen;
        if (lsn_end)
            *lsn_end = end;
    }
    return rc;
}

/* ---- opening: recovery and replay into the view ---- */

struct replay {
    sk_vlog *v;
    sk_store_rec *recs;
    size_t nrecs, cap;
    wal_lsn last_end;
    wal_lsn expect; /* the view's applied LSN: the first record must start there */
    bool first;
    bool gap; /* the view is behind the retained WAL */
};

static int replay_flush(struct replay *rp)
{
    if (rp->nrecs == 0)
        return 0;
    int rc = sk_store_apply_sync(rp->v->store, rp->recs, rp->nrecs, rp->last_end);
    for (size_t i = 0; i < rp->nrecs; i++)
        sk_store_rec_free(&rp->recs[i]);
    rp->nrecs = 0;
    return rc;
}

static int replay_cb(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *payload, uint32_t len)
{
    struct replay *rp = arg;
    if (rp->first) {
        rp->first = false;
        /* A view that is not empty must continue exactly where the replay
         * starts: at its applied LSN, or at the preamble of a segment that
         * starts there. Otherwise it missed records that were trimmed. */
        bool ok = sk_store_is_empty(rp->v->store) || lsn == rp->expect ||
                  (type == WAL_T_PREAMBLE && lsn == rp->expect + WAL_SEGMENT_HEADER);
        if (!ok) {
            rp->gap = true;
            return SK_ERR_CORRUPT;
        }
    }
    if (rp->nrecs == rp->cap) {
        size_t ncap = rp->cap ? rp->cap * 2 : 1024;
        sk_store_rec *nr = realloc(rp->recs, ncap * sizeof *nr);
        if (!nr)
            return SK_ERR_NOMEM;
        rp->recs = nr;
        rp->cap = ncap;
    }
    int rc = sk_store_rec_parse(&rp->recs[rp->nrecs], lsn, type, payload, len);
    if (rc != 0) {
        SK_ERROR("vlog", "log %lld: WAL record at LSN %llu (type %d) cannot be parsed",
                 (long long)rp->v->id, (unsigned long long)lsn, type);
        return rc;
    }
    rp->nrecs++;
    rp->last_end = lsn + WAL_RECORD_HEADER + len;
    if (rp->nrecs >= 4096)
        return replay_flush(rp);
    return 0;
}

static void replay_free(struct replay *rp)
{
    for (size_t i = 0; i < rp->nrecs; i++)
        sk_store_rec_free(&rp->recs[i]);
    free(rp->recs);
    rp->recs = NULL;
    rp->nrecs = 0;
}

int sk_vlog_open(sk_vlog *v, wal_storage *st, const wal_opts *o, char *why, size_t whylen)
{
    char inner[512] = "";
    struct replay rp = {0};
    rp.v = v;
    rp.first = true;
    wal_lsn from = sk_store_applied(v->store);
    rp.expect = from;
    int err = 0;
    v->wal = wal_open(v->n->base, st, o, from, replay_cb, &rp, &err, inner, sizeof inner);
    if (!v->wal) {
        replay_free(&rp);
        if (rp.gap)
            return SK_ERR_AGAIN;
        snprintf(why, whylen, "%s", inner);
        return err ? err : SK_ERR_IO;
    }
    err = replay_flush(&rp);
    replay_free(&rp);
    if (err) {
        snprintf(why, whylen, "cannot bring the SQLite view up to date with the WAL");
        return err;
    }
    v->applied = sk_store_applied(v->store);
    return 0;
}

int sk_vlog_start(sk_vlog *v)
{
    if (sk_store_start(v->store, v->n->base) != 0)
        return SK_ERR_NOMEM;
    v->flush_ev = event_new(v->n->base, -1, 0, flush_cb, v);
    v->timer_ev = evtimer_new(v->n->base, flush_cb, v);
    if (!v->flush_ev || !v->timer_ev)
        return SK_ERR_NOMEM;
    return 0;
}

/* ---- closing ---- */

void sk_vlog_close(sk_vlog *v)
{
    if (!v || v->closed)
        return;
    v->closed = true;
    if (v->wal)
        wal_close(v->wal);
    v->wal = NULL;
    if (!v->store)
        return;
    /* Everything acknowledged is durable already; the view catches up with
     * what is still queued for it, or replays it at the next start. */
    sk_store_drain(v->store);
    if (v->txn && sk_store_txn_count(v->txn) && !v->view_failed &&
        sk_store_txn_apply_sync(v->store, v->txn) != 0)
        SK_WARN("vlog", "the SQLite view of log %lld could not take the last records; the "
                "next start replays them from the WAL",
                (long long)v->id);
    sk_store_txn_free(v->txn);
    v->txn = NULL;
    v->applied = sk_store_applied(v->store);
    run_waits(&v->awaiters, v->applied, 0);
    run_waits(&v->awaiters, 0, SK_ERR_CLOSED);
    run_waits(&v->dwaiters, 0, SK_ERR_CLOSED);
}

void sk_vlog_destroy(sk_vlog *v)
{
    if (!v)
        return;
    sk_vlog_close(v);
    run_waits(&v->dwaiters, 0, SK_ERR_CLOSED);
    run_waits(&v->awaiters, 0, SK_ERR_CLOSED);
    if (v->flush_ev)
        event_free(v->flush_ev);
    if (v->timer_ev)
        event_free(v->timer_ev);
    if (v->store)
        sk_store_close(v->store);
    free(v);
}
