#include "custody.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "etcd.h"
#include "handoff.h"
#include "meta.h"
#include "node.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "sk_workq.h"
#include "store.h"
#include "tier_logs.h"
#include "vlog.h"
#include "wal.h"

#define KEY_MAX 512
#define RETRY_MS 2000

typedef enum { CU_OPENING, CU_OPEN, CU_FINISHING, CU_WAITING } cu_state;

typedef struct clog {
    sk_custody *cu;
    int64_t id;
    int32_t node; /* whose incarnation wrote it */
    cu_state state;
    bool payload; /* a payload log: nothing to replay, kept while mains read it */
    sk_vlog *v;   /* a data log, open */
    wal *pw;      /* a payload log, open (fenced) */
    wal_lsn pend; /* and its end */
    int64_t started_ms;
    int64_t retry_ms; /* CU_WAITING: when to try opening again */
    int64_t said_ms;  /* when it last said why it is still kept */
    /* the opening job */
    sk_store *store;
    wal_storage *st;
    int err;
    char why[512];
} clog;

struct sk_custody {
    sk_cluster *c;
    sk_node *n;
    sk_map *logs; /* id -> clog */
    sk_workq *q;  /* opening and deleting logs: blocking I/O */
    int64_t deadline_us;
    bool closing;
    sk_custody_stats st;
};

static int32_t me(const sk_custody *cu)
{
    return cu->n->cfg->node_id;
}

/* ---- opening a dead log (on the custody thread) ---- */

static int empty_preamble(void *arg, wal_lsn start, uint8_t **buf, uint32_t *len)
{
    (void)start;
    return sk_snapshot_empty(arg, buf, len);
}

static void open_work(void *arg)
{
    clog *l = arg;
    sk_node *n = l->cu->n;
    const sk_config *cfg = n->cfg;
    char dbpath[4200], url[4200];
    if (l->payload) {
        /* Nothing to restore: the log is only read by mains, by position. */
        l->err = sk_cluster_log_url(cfg, l->id, url, sizeof url) ? SK_ERR_INVAL : 0;
        if (l->err == 0) {
            l->st = wal_storage_open(n->base, url, l->why, sizeof l->why);
            l->err = l->st ? 0 : SK_ERR_IO;
        }
        return;
    }
    sk_cluster_view_path(cfg, "custody", l->id, dbpath, sizeof dbpath);
    /* A view left by an earlier custody of this log may be behind what a
     * later custodian appended: start from the snapshot every time. */
    unlink(dbpath);
    l->err = sk_tier_restore_log_view(cfg, l->id, dbpath, l->why, sizeof l->why);
    if (l->err)
        return;
    l->store = sk_store_open(dbpath, l->why, sizeof l->why);
    if (!l->store) {
        l->err = SK_ERR_IO;
        return;
    }
    if (sk_cluster_log_url(cfg, l->id, url, sizeof url) != 0) {
        l->err = SK_ERR_INVAL;
        return;
    }
    l->st = wal_storage_open(n->base, url, l->why, sizeof l->why);
    l->err = l->st ? 0 : SK_ERR_IO;
}

static int no_replay(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *p, uint32_t len)
{
    (void)arg;
    (void)lsn;
    (void)type;
    (void)p;
    (void)len;
    return 0;
}

/* A payload log is fenced and its torn tail cut: its end is then final. */
static void fence_payload_work(void *arg)
{
    clog *l = arg;
    sk_node *n = l->cu->n;
    char proof[128];
    snprintf(proof, sizeof proof, "the cluster saw node %d's lease expire", l->node);
    wal_opts o = {0};
    o.segment_bytes = (uint64_t)n->cfg->wal_segment_bytes;
    o.max_pending_bytes = 1u << 20;
    o.node_id = (uint32_t)l->node;
    o.lease_ms = n->cfg->wal_lease_ms;
    o.io_timeout_ms = n->cfg->wal_io_timeout_ms;
    o.no_direct_io = !n->cfg->wal_direct_io;
    o.takeover_proof = proof;
    wal_storage *st = l->st;
    l->st = NULL;
    l->pw = wal_open(n->base, st, &o, UINT64_MAX, no_replay, NULL, &l->err, l->why, sizeof l->why);
    if (l->pw)
        l->pend = wal_end_lsn(l->pw);
}

/* The WAL's recovery and replay, on the custody thread too. */
static void replay_work(void *arg)
{
    clog *l = arg;
    sk_node *n = l->cu->n;
    char proof[128];
    snprintf(proof, sizeof proof, "the cluster saw node %d's lease expire", l->node);
    wal_opts o = {0};
    o.segment_bytes = (uint64_t)n->cfg->wal_segment_bytes;
    o.max_pending_bytes = 64u << 20;
    o.node_id = (uint32_t)l->node;
    o.lease_ms = n->cfg->wal_lease_ms;
    o.io_timeout_ms = n->cfg->wal_io_timeout_ms;
    o.no_direct_io = !n->cfg->wal_direct_io;
    o.takeover_proof = proof;
    o.preamble = empty_preamble;
    o.preamble_arg = n;
    wal_storage *st = l->st;
    l->st = NULL;
    l->err = sk_vlog_open(l->v, st, &o, l->why, sizeof l->why);
    if (l->err == SK_ERR_AGAIN) {
        snprintf(l->why, sizeof l->why,
                 "its view snapshot is behind what its WAL still holds: the WAL was trimmed "
                 "below the newest snapshot");
        l->err = SK_ERR_CORRUPT;
    }
}

static void reconcile_log(sk_custody *cu, clog *l);
static void open_done(void *arg);
static void replay_done(void *arg);

static void open_failed(clog *l)
{
    SK_ERROR("custody", "cannot open dead log %lld of node %d: %s; trying again",
             (long long)l->id, l->node, l->why[0] ? l->why : sk_err_name(l->err));
    if (l->v) {
        sk_vlog_destroy(l->v); /* takes the store */
        l->v = NULL;
        l->store = NULL;
    }
    if (l->store)
        sk_store_close(l->store);
    l->store = NULL;
    if (l->st)
        l->st->ops->destroy(l->st);
    l->st = NULL;
    l->state = CU_WAITING;
    l->retry_ms = sk_mono_ms() + RETRY_MS;
}

static void open_done(void *arg)
{
    clog *l = arg;
    sk_custody *cu = l->cu;
    if (cu->closing)
        return;
    if (l->err) {
        open_failed(l);
        return;
    }
    if (l->payload) {
        if (sk_workq_submit(cu->q, fence_payload_work, replay_done, l) != 0) {
            l->err = SK_ERR_CLOSED;
            open_failed(l);
        }
        return;
    }
    l->v = sk_vlog_new(cu->n, l->id, l->store, NULL);
    if (!l->v) {
        l->err = SK_ERR_NOMEM;
        open_failed(l);
        return;
    }
    l->store = NULL;
    if (sk_workq_submit(cu->q, replay_work, replay_done, l) != 0) {
        l->err = SK_ERR_CLOSED;
        open_failed(l);
    }
}

static void replay_done(void *arg)
{
    clog *l = arg;
    sk_custody *cu = l->cu;
    if (cu->closing)
        return;
    if (l->err || (!l->payload && sk_vlog_start(l->v) != 0)) {
        open_failed(l);
        return;
    }
    wal *w = l->payload ? l->pw : sk_vlog_wal(l->v);
    wal_set_ack_deadline(w, cu->deadline_us);
    l->state = CU_OPEN;
    cu->st.opened++;
    cu->st.last_open_ms = sk_mono_ms() - l->started_ms;
    SK_INFO("custody", "dead %s log %lld of node %d fenced%s in %lld ms (LSN %llu to %llu)",
            l->payload ? "payload" : "data", (long long)l->id, l->node,
            l->payload ? "" : " and replayed", (long long)cu->st.last_open_ms,
            (unsigned long long)wal_start_lsn(w), (unsigned long long)wal_end_lsn(w));
    reconcile_log(cu, l);
}

static void start_open(sk_custody *cu, clog *l)
{
    l->state = CU_OPENING;
    l->err = 0;
    l->why[0] = 0;
    if (!l->started_ms)
        l->started_ms = sk_mono_ms();
    SK_INFO("custody", "taking dead log %lld of node %d into custody", (long long)l->id, l->node);
    if (sk_workq_submit(cu->q, open_work, open_done, l) != 0) {
        l->err = SK_ERR_CLOSED;
        open_failed(l);
    }
}

/* ---- handing its partitions over ---- */

static void handed(void *arg, int err)
{
    sk_custody *cu = arg;
    if (!cu->closing && err == 0)
        cu->st.handoffs++;
}

/* What in etcd still needs log `id`: partitions served from it or leaving
 * it, and walrefs of adopters still reading it. */
static bool log_needed(sk_custody *cu, int64_t id, size_t *parts, size_t *refs)
{
    cm_model *m = sk_cluster_model(cu->c);
    size_t it = 0;
    const cm_part *p;
    *parts = *refs = 0;
    while ((p = cm_part_next(m, &it)) != NULL) {
        if (p->state == CM_PART_ACTIVE && p->log == id)
            (*parts)++;
        else if ((p->state == CM_PART_MOVING || p->state == CM_PART_HANDOFF) && p->src_log == id)
            (*parts)++;
    }
    it = 0;
    const cm_walref *r;
    while ((r = cm_walref_next(m, &it)) != NULL)
        if (r->log == id)
            (*refs)++;
    return *parts || *refs;
}

/* Mains that may still read payload log `id` below its end: their
 * payrefs on it (a payref of a log that is gone needs nothing). */
static size_t payload_readers(sk_custody *cu, int64_t id, wal_lsn end)
{
    cm_model *m = sk_cluster_model(cu->c);
    size_t it = 0, n = 0;
    const cm_payref *r;
    while ((r = cm_payref_next(m, &it)) != NULL)
        if (r->plog == id && (wal_lsn)r->lsn < end && cm_log_get(m, r->mlog))
            n++;
    return n;
}

static void finish_log(sk_custody *cu, clog *l);

static void reconcile_log(sk_custody *cu, clog *l)
{
    if (l->state != CU_OPEN)
        return;
    if (l->payload) {
        size_t readers = payload_readers(cu, l->id, l->pend);
        if (readers == 0) {
            finish_log(cu, l);
            return;
        }
        int64_t now = sk_mono_ms();
        if (now - l->said_ms >= 30000) {
            l->said_ms = now;
            SK_INFO("custody", "dead payload log %lld still needed: %zu mains may read it",
                    (long long)l->id, readers);
        }
        return;
    }
    cm_model *m = sk_cluster_model(cu->c);
    sk_handoffs *h = sk_cluster_handoffs(cu->c);
    size_t it = 0;
    const cm_part *p;
    while ((p = cm_part_next(m, &it)) != NULL)
        if (p->state == CM_PART_MOVING && p->src_log == l->id)
            sk_handoff_write(h, l->v, l->id, &p->topic, p->index, handed, cu);
    size_t parts, refs, pending = sk_handoff_pending(h, l->id);
    if (!log_needed(cu, l->id, &parts, &refs) && pending == 0) {
        finish_log(cu, l);
        return;
    }
    int64_t now = sk_mono_ms();
    if (now - l->said_ms >= 30000) {
        l->said_ms = now;
        SK_INFO("custody", "dead log %lld still needed: %zu partitions served from or leaving it, "
                "%zu adopters reading it, %zu handoffs to publish",
                (long long)l->id, parts, refs, pending);
    }
}

/* ---- deleting a log nobody needs ---- */

static void delete_work(void *arg)
{
    clog *l = arg;
    const sk_config *cfg = l->cu->n->cfg;
    char url[4200];
    l->err = sk_cluster_log_url(cfg, l->id, url, sizeof url);
    if (l->err == 0)
        l->err = wal_destroy_files(l->cu->n->base, url, l->why, sizeof l->why);
    if (l->err == 0)
        l->err = sk_tier_forget_log(cfg, l->id);
    char dbpath[4200];
    sk_cluster_view_path(cfg, "custody", l->id, dbpath, sizeof dbpath);
    unlink(dbpath);
}

static void key_deleted(void *arg, int err, const etcd_txn_result *r)
{
    (void)r;
    sk_custody *cu = arg;
    if (!cu->closing && err)
        SK_WARN("custody", "cannot delete a finished log's key (%s); the next custodian will",
                sk_err_name(err));
}

static void del_key(sk_custody *cu, const char *key, size_t kl, bool prefix)
{
    cs_session *s = sk_cluster_session(cu->c);
    char end[KEY_MAX];
    size_t el = 0;
    if (prefix) {
        memcpy(end, key, kl);
        end[kl - 1]++; /* the key ends with '/': its range ends at '0' */
        el = kl;
    }
    if (etcd_delete(cs_etcd(s), (const uint8_t *)key, kl, prefix ? (const uint8_t *)end : NULL,
                    el, key_deleted, cu) != 0)
        SK_WARN("custody", "cannot delete %.*s", (int)kl, key);
}

/* A finished log's keys: its payrefs (a data log's on payload logs, or
 * every one on a payload log), then its logs/ key. */
static void delete_keys(sk_custody *cu, clog *l)
{
    cs_session *s = sk_cluster_session(cu->c);
    char key[KEY_MAX];
    size_t kl;
    if (l->payload) {
        kl = cm_key_log_payrefs(cs_prefix(s), l->id, key, sizeof key);
        del_key(cu, key, kl, true);
    } else {
        size_t it = 0;
        const cm_payref *r;
        while ((r = cm_payref_next(sk_cluster_model(cu->c), &it)) != NULL)
            if (r->mlog == l->id) {
                kl = cm_key_payref(cs_prefix(s), r->plog, r->mlog, key, sizeof key);
                del_key(cu, key, kl, false);
            }
    }
    kl = cm_key_log(cs_prefix(s), l->id, key, sizeof key);
    del_key(cu, key, kl, false);
}

static void delete_done(void *arg)
{
    clog *l = arg;
    sk_custody *cu = l->cu;
    if (cu->closing)
        return;
    if (l->err) {
        SK_WARN("custody", "cannot delete dead log %lld yet: %s", (long long)l->id,
                l->why[0] ? l->why : sk_err_name(l->err));
        l->state = CU_WAITING;
        l->retry_ms = sk_mono_ms() + RETRY_MS;
        return;
    }
    delete_keys(cu, l);
    cu->st.finished++;
    SK_INFO("custody", "dead %s log %lld of node %d: %s; log deleted after %lld ms",
            l->payload ? "payload" : "data", (long long)l->id, l->node,
            l->payload ? "no main reads it any more" : "every partition moved",
            (long long)(sk_mono_ms() - l->started_ms));
    sk_map_del(cu->logs, &l->id, sizeof l->id);
    free(l);
}

static void finish_log(sk_custody *cu, clog *l)
{
    l->state = CU_FINISHING;
    /* Appends to it are over: close it (on the loop: the WAL's close runs
     * it), then delete its files off the loop. */
    sk_vlog_destroy(l->v);
    l->v = NULL;
    if (l->pw)
        wal_close(l->pw);
    l->pw = NULL;
    if (sk_workq_submit(cu->q, delete_work, delete_done, l) != 0) {
        l->state = CU_WAITING;
        l->retry_ms = sk_mono_ms() + RETRY_MS;
    }
}

/* ---- what etcd says ---- */

static clog *find(sk_custody *cu, int64_t id)
{
    return sk_map_get(cu->logs, &id, sizeof id);
}

void sk_custody_log_changed(sk_custody *cu, const cm_log *now, const cm_log *was)
{
    if (cu->closing)
        return;
    const cm_log *lg = now ? now : was;
    clog *l = find(cu, lg->id);
    bool mine = now && now->state == CM_LOG_DEAD && now->custodian == me(cu);
    if (!mine) {
        /* No longer ours (another custodian, or the key is gone): a log
         * still opening is dropped when its job ends. */
        if (l && l->state == CU_OPEN) {
            sk_vlog_destroy(l->v);
            if (l->pw)
                wal_close(l->pw);
            sk_map_del(cu->logs, &l->id, sizeof l->id);
            free(l);
        } else if (l && l->state == CU_WAITING) {
            sk_map_del(cu->logs, &l->id, sizeof l->id);
            free(l);
        }
        return;
    }
    if (l)
        return;
    l = calloc(1, sizeof *l);
    if (!l)
        return;
    l->cu = cu;
    l->id = now->id;
    l->node = now->node;
    l->payload = now->kind == CM_LOG_PAYLOAD;
    if (sk_map_put(cu->logs, &l->id, sizeof l->id, l) != 0) {
        free(l);
        return;
    }
    start_open(cu, l);
}

void sk_custody_part_changed(sk_custody *cu, const cm_part *p)
{
    if (cu->closing)
        return;
    int64_t id = p->state == CM_PART_ACTIVE ? p->log : p->src_log;
    clog *l = id ? find(cu, id) : NULL;
    if (l)
        reconcile_log(cu, l);
}

void sk_custody_walref_changed(sk_custody *cu)
{
    sk_custody_tick(cu);
}

void sk_custody_tick(sk_custody *cu)
{
    if (cu->closing)
        return;
    size_t it = 0;
    void *v;
    clog *todo[64];
    size_t n = 0;
    while (n < 64 && sk_map_next(cu->logs, &it, NULL, NULL, &v))
        todo[n++] = v;
    int64_t now = sk_mono_ms();
    for (size_t i = 0; i < n; i++) {
        clog *l = todo[i];
        if (l->state == CU_WAITING && now >= l->retry_ms)
            start_open(cu, l);
        else
            reconcile_log(cu, l);
    }
}

void sk_custody_set_deadline(sk_custody *cu, int64_t deadline_us)
{
    cu->deadline_us = deadline_us;
    size_t it = 0;
    void *v;
    while (sk_map_next(cu->logs, &it, NULL, NULL, &v)) {
        clog *l = v;
        if (l->state == CU_OPEN)
            wal_set_ack_deadline(l->payload ? l->pw : sk_vlog_wal(l->v), deadline_us);
    }
}

size_t sk_custody_count(const sk_custody *cu)
{
    return sk_map_count(cu->logs);
}

void sk_custody_get_stats(const sk_custody *cu, sk_custody_stats *st)
{
    *st = cu->st;
}

/* ---- life ---- */

sk_custody *sk_custody_new(sk_cluster *c)
{
    sk_custody *cu = calloc(1, sizeof *cu);
    if (!cu)
        return NULL;
    cu->c = c;
    cu->n = sk_cluster_node(c);
    cu->logs = sk_map_new();
    cu->q = sk_workq_new(cu->n->base, "skiff-custody", 1);
    if (!cu->logs || !cu->q) {
        sk_custody_destroy(cu);
        return NULL;
    }
    return cu;
}

void sk_custody_close(sk_custody *cu)
{
    if (!cu || cu->closing)
        return;
    cu->closing = true;
    /* Jobs first: they use the logs. */
    sk_workq_destroy(cu->q);
    cu->q = NULL;
    size_t it = 0;
    void *v;
    while (sk_map_next(cu->logs, &it, NULL, NULL, &v)) {
        clog *l = v;
        if (l->pw)
            wal_close(l->pw);
        l->pw = NULL;
        sk_vlog_destroy(l->v);
        l->v = NULL;
        if (l->store)
            sk_store_close(l->store);
        l->store = NULL;
        if (l->st)
            l->st->ops->destroy(l->st);
        l->st = NULL;
    }
}

void sk_custody_destroy(sk_custody *cu)
{
    if (!cu)
        return;
    sk_custody_close(cu);
    size_t it = 0;
    void *v;
    while (sk_map_next(cu->logs, &it, NULL, NULL, &v))
        free(v);
    sk_map_destroy(cu->logs);
    free(cu);
}
