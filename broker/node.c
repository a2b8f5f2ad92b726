#include "node.h"

#include <assert.h>
#include <errno.h>
#include <event2/event.h>
#include <event2/thread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <dirent.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cmeta.h"
#include "cluster.h"
#include "session.h"
#include "config.h"
#include "dynconf.h"
#include "fsession.h"
#include "acls.h"
#include "gconf.h"
#include "groups.h"
#include "txns.h"
#include "handlers.h"
#include "kbatch.h"
#include "meta.h"
#include "payload.h"
#include "metrics.h"
#include "net.h"
#include "plog.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "sk_workq.h"
#include "store.h"
#include "tconf.h"
#include "tier.h"
#include "vlog.h"
#include "xzone.h"
#include "zone.h"

/* How long a node that lost its log gives its last answers to leave. */
#define ABANDON_FLUSH_MS 200

/* The loop's timers fire at their microsecond (timerfd), not at the next
 * millisecond of epoll_wait: a proxy's confirm linger of ~100 us would
 * otherwise cost a whole millisecond on every proxied batch. */
static struct event_base *new_base(void)
{
    struct event_config *ec = event_config_new();
    if (!ec)
        return NULL;
    (void)event_config_set_flag(ec, EVENT_BASE_FLAG_PRECISE_TIMER);
    struct event_base *b = event_base_new_with_config(ec);
    event_config_free(ec);
    return b;
}

/* ---- appends and durability: the node's own log ---- */

static void begin_shutdown(sk_node *n);

/* Back-pressure: stop reading requests while too much waits for the WAL,
 * and slow producers down as the WAL fills (pace.h). */
static void check_pending(sk_node *n)
{
    if (wal_pending_bytes(n->wal) > (size_t)n->cfg->wal_max_pending_bytes)
        sk_net_pause(n);
    sk_node_pace_check(n);
}

static double log_fill(wal *w, int64_t max)
{
    return (double)(wal_end_lsn(w) - wal_start_lsn(w)) / (double)max;
}

double sk_node_wal_fill(const sk_node *n)
{
    double fill = log_fill(n->wal, n->cfg->wal_max_retained_bytes);
    if (n->payload) {
        double pf = log_fill(pay_wal(n->payload), n->cfg->wal_max_retained_bytes);
        if (pf > fill)
            fill = pf;
    }
    return fill;
}

static void pace_again(sk_node *n, int64_t ms);

static void pace_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_node *n = arg;
    bool was = n->pace.holding;
    double rate = !n->stopping && n->tier ? sk_tier_upload_rate(n->tier) : 0.0;
    int64_t next = sk_pace_step(&n->pace, sk_mono_ms(), sk_node_wal_fill(n), rate);
    if (n->pace.holding != was)
        sk_net_pace(n);
    if (next > 0)
        pace_again(n, next);
}

static void pace_again(sk_node *n, int64_t ms)
{
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    evtimer_add(n->pace_ev, &tv);
}

void sk_node_pace_check(sk_node *n)
{
    if (!n->pace.active && n->pace_ev && sk_node_wal_fill(n) > SK_PACE_START)
        event_active(n->pace_ev, EV_TIMEOUT, 0);
}

void sk_node_pace_take(sk_node *n, uint32_t bytes)
{
    if (!n->pace.active)
        return;
    bool was = n->pace.holding;
    int64_t wait = sk_pace_take(&n->pace, sk_mono_ms(), bytes);
    if (wait > 0 && !was) {
        sk_net_pace(n);
        pace_again(n, wait);
    }
}

int sk_node_append(sk_node *n, uint8_t type, const struct iovec *iov, int iovcnt,
                   sk_durable_fn fn, void *arg, wal_lsn *lsn_end)
{
    int rc = sk_vlog_append(n->log, type, iov, iovcnt, fn, arg, lsn_end);
    if (rc == 0)
        check_pending(n);
    return rc;
}

int sk_node_append_data(sk_node *n, sk_part *p, const uint8_t *batch, uint32_t len,
                        const kb_header *h, const sk_link *link, bool crc_known,
                        sk_durable_fn fn, void *arg, wal_lsn *lsn, wal_lsn *lsn_end)
{
    int rc = sk_vlog_append_data(n->log, p, batch, len, h, link, crc_known, fn, arg, lsn, lsn_end);
    if (rc == 0)
        check_pending(n);
    return rc;
}

void sk_node_wait_durable(sk_node *n, wal_lsn end, sk_durable_fn fn, void *arg)
{
    sk_vlog_wait_durable(n->log, end, fn, arg);
}

void sk_node_shown(sk_node *n, wal_lsn end)
{
    if (end > n->shown_end)
        n->shown_end = end;
}

static void own_durable(void *arg)
{
    sk_node *n = arg;
    if (n->paused && wal_pending_bytes(n->wal) <= (size_t)n->cfg->wal_max_pending_bytes / 2 &&
        !n->stopping)
        sk_net_resume(n);
    if (n->tier)
        sk_tier_kick(n->tier);
}

static void own_applied(void *arg)
{
    sk_node *n = arg;
    wal_lsn before = n->store_applied;
    n->store_applied = sk_vlog_applied(n->log);
    sk_parts_view_applied(n, before);
    sk_cache_evict(n);
    if (n->tier)
        sk_tier_kick(n->tier); /* uploads wait for the view (tier.c, upload_end) */
}

static void own_fenced(void *arg)
{
    sk_node *n = arg;
    if (n->stopping)
        return;
    /* Another node took this WAL over: nothing more can be acknowledged
     * here. A single node stops and lets its supervisor decide; a cluster
     * member was counted dead, and starts again as a new incarnation. */
    SK_ERROR("node", "the WAL was taken over by a newer owner; stopping");
    sk_node_stop(n, n->cluster ? SK_EXIT_REJOIN : SK_EXIT_FENCED);
}

bool sk_node_wal_full(const sk_node *n)
{
    return wal_end_lsn(n->wal) - wal_start_lsn(n->wal) > (uint64_t)n->cfg->wal_max_retained_bytes;
}

int sk_node_read_log(sk_node *n, int64_t log, wal_lsn lsn, uint8_t *type, void *buf,
                     uint32_t cap, uint32_t *len)
{
    if (log == 0 || !n->cluster || log == sk_cluster_log_id(n->cluster))
        return wal_read_record(n->wal, lsn, type, buf, cap, len);
    if (n->payload && log == sk_cluster_payload_log_id(n->cluster))
        return wal_read_record(pay_wal(n->payload), lsn, type, buf, cap, len);
    return sk_cluster_read_foreign(n->cluster, log, lsn, type, buf, cap, len);
}

/* The batch a link stands for, laid out as a DATA record in buf. */
static int follow_link(sk_node *n, const uint8_t *rec, uint32_t rlen, uint8_t *buf, uint32_t cap,
                       uint32_t *len)
{
    sk_link l;
    if (!n->cluster || sk_link_decode(rec, rlen, &l) != 0)
        return SK_ERR_CORRUPT;
    uint8_t type;
    uint32_t plen;
    int rc = sk_node_read_log(n, l.plog, l.plsn, &type, buf, cap, &plen);
    if (rc == SK_ERR_NOMEM)
        *len = SK_DATA_HEADER + l.len;
    if (rc)
        return rc;
    kc_uuid id;
    int32_t part;
    const uint8_t *batch;
    uint32_t blen;
    kb_header h, lh;
    if (type != PAY_RECORD || pay_parse(buf, plen, &id, &part, &batch, &blen) != 0 ||
        memcmp(&id, &l.id, sizeof id) != 0 || part != l.part || blen != l.len ||
        kb_parse_header(batch, blen, &h) != 0 || kb_parse_header_copy(l.head, sizeof l.head, &lh) ||
        h.crc != lh.crc)
        return SK_ERR_CORRUPT;
    /* Same bytes but for the fields outside the CRC: offsets, epoch. */
    memcpy(buf + SK_DATA_HEADER, l.head, KB_HEADER_SIZE);
    *len = plen;
    return 0;
}

int sk_node_read_batch(sk_node *n, const sk_batch_loc *loc, uint8_t *type, void *buf,
                       uint32_t cap, uint32_t *len)
{
    /* A link is bigger than the smallest batches' records. */
    uint8_t small[SK_LINK_SIZE];
    uint8_t *dst = cap >= sizeof small ? buf : small;
    int rc = sk_node_read_log(n, loc->log, loc->lsn, type, dst, cap >= sizeof small ? cap : sizeof small,
                         len);
    if (rc == 0 && *type == SK_WAL_LINK) {
        uint8_t rec[SK_LINK_SIZE];
        if (*len != sizeof rec)
            return SK_ERR_CORRUPT;
        memcpy(rec, dst, sizeof rec);
        *type = SK_WAL_DATA;
        return follow_link(n, rec, sizeof rec, buf, cap, len);
    }
    if (rc == 0 && dst == small) {
        if (*len > cap)
            return SK_ERR_NOMEM;
        memcpy(buf, small, *len);
    }
    return rc;
}

int sk_node_read_job(sk_node *n, void (*fn)(void *), void (*done)(void *), void *arg)
{
    if (!n->readers)
        return SK_ERR_CLOSED;
    return sk_workq_submit(n->readers, fn, done, arg);
}

/* ---- partition metadata ---- */

static int append_meta(sk_node *n, sk_buf *b, sk_durable_fn fn, void *arg)
{
    if (sk_buf_failed(b)) {
        sk_buf_free(b);
        return SK_ERR_NOMEM;
    }
    struct iovec iov = {b->data, b->len};
    int rc = sk_node_append(n, SK_WAL_META, &iov, 1, fn, arg, NULL);
    sk_buf_free(b);
    return rc;
}

int sk_node_set_log_start(sk_node *n, sk_part *p, int64_t offset, sk_durable_fn fn, void *arg)
{
    sk_buf b;
    sk_buf_init(&b, 1024);
    sk_meta_log_start(&b, &p->topic->id, p->index, offset);
    int rc = append_meta(n, &b, fn, arg);
    if (rc == 0 && offset > p->log_start) {
        p->log_start = offset;
        sk_txidx_trim(&p->txidx, offset); /* aborted ranges wholly gone */
        if (p->next_offset < offset)
            p->next_offset = p->hw = offset;
        if (p->max_ts_base >= 0 && p->max_ts_base < offset) {
            p->max_ts = -1;
            p->max_ts_base = -1;
        }
    }
    return rc;
}

/* ---- segment preamble ---- */

static int preamble_cb(void *arg, wal_lsn start, uint8_t **buf, uint32_t *len)
{
    (void)start;
    return sk_snapshot_encode(arg, buf, len);
}

static int member_preamble(void *arg, wal_lsn start, uint8_t **buf, uint32_t *len)
{
    (void)start;
    return sk_snapshot_empty(arg, buf, len);
}

/* ---- start-up ---- */

/* Loading the view into memory. */
static int load_head(void *arg, const sk_snap_head *h)
{
    sk_node *n = arg;
    snprintf(n->cluster_id, sizeof n->cluster_id, "%.*s", (int)h->cluster_id_len, h->cluster_id);
    n->next_pid = h->next_pid;
    n->next_stream = h->next_stream > 0 ? h->next_stream : 1;
    /* Runtime changes of broker properties apply before topics resolve
     * their defaults. */
    if (sk_dynconf_apply_block(n, h->broker_conf, h->broker_conf_len) != 0) {
        SK_ERROR("node", "corrupt broker configuration changes in the SQLite view");
        return SK_ERR_CORRUPT;
    }
    return 0;
}

static int load_topic(void *arg, const kc_uuid *id, const char *name, size_t name_len,
                      int32_t nparts, int16_t rf, const uint8_t *conf, size_t conf_len)
{
    sk_node *n = arg;
    sk_tconf tc;
    if (sk_tconf_from_block(n->cfg, conf, conf_len, &tc) != 0) {
        SK_ERROR("node", "topic %.*s has a configuration this skiffd does not accept",
                 (int)name_len, name);
        return SK_ERR_CORRUPT;
    }
    if (!sk_topic_new(n, id, name, name_len, nparts, rf, &tc, 0, SK_OWN_ACTIVE)) {
        sk_tconf_free(&tc);
        return SK_ERR_NOMEM;
    }
    return 0;
}

static int load_part(void *arg, const sk_snap_part *sp)
{
    sk_part *p = sk_part_get(sk_topic_get_id(arg, &sp->id), sp->part);
    if (!p)
        return 0;
    p->stream = sp->stream;
    p->log_start = sp->log_start;
    p->next_offset = p->hw = sp->next_offset;
    p->leader_epoch = sp->leader_epoch;
    p->max_ts = sp->max_ts;
    p->max_ts_base = sp->max_ts_base;
    return 0;
}

static int load_extra(void *arg, uint8_t kind, const uint8_t *body, size_t len)
{
    sk_node *n = arg;
    if (kind == SK_SNAP_GROUPS && sk_groups_load(n->groups, body, len) != 0) {
        SK_ERROR("node", "corrupt committed offsets in the SQLite view");
        return SK_ERR_CORRUPT;
    }
    /* A cluster's group configs come from etcd. */
    if (kind == SK_SNAP_GROUP_CONFIGS && !n->cluster && sk_gconf_load(n, body, len) != 0) {
        SK_ERROR("node", "corrupt group configs in the SQLite view");
        return SK_ERR_CORRUPT;
    }
    if (kind == SK_SNAP_ACLS && !n->cluster && sk_acls_load(n, body, len) != 0) {
        SK_ERROR("node", "corrupt ACLs in the SQLite view");
        return SK_ERR_CORRUPT;
    }
    if (kind == SK_SNAP_TXIDX) {
        kc_uuid id;
        int32_t part;
        sk_txidx_ent e;
        if (sk_txidx_section_get(body, len, &id, &part, &e) != 0)
            return SK_ERR_CORRUPT;
        sk_part *p = sk_part_get(sk_topic_get_id(n, &id), part);
        if (p && sk_txidx_load(&p->txidx, &e) != 0)
            return SK_ERR_NOMEM;
        return 0;
    }
    if (kind == SK_SNAP_TXNS && n->txns && sk_txns_load(n->txns, body, len) != 0) {
        SK_ERROR("node", "corrupt transaction state in the SQLite view");
        return SK_ERR_CORRUPT;
    }
    if (kind == SK_SNAP_USER_CONFIGS && !n->cluster && sk_uconf_load(n, body, len) != 0) {
        SK_ERROR("node", "corrupt user credentials in the SQLite view");
        return SK_ERR_CORRUPT;
    }
    return 0;
}

static int load_pstate(void *arg, const kc_uuid *id, int32_t part, const sk_pstate *ps)
{
    sk_part *p = sk_part_get(sk_topic_get_id(arg, id), part);
    if (!p)
        return 0;
    sk_pstate *dst = sk_part_pstate(p, ps->pid, true);
    if (!dst)
        return SK_ERR_NOMEM;
    *dst = *ps;
    return 0;
}

/* Opens the node's own log: its WAL at wal.url, replayed into the view. */
static int open_wal(sk_node *n, char *why, size_t whylen)
{
    char inner[512] = "";
    wal_storage *st = wal_storage_open(n->base, n->cfg->wal_url, inner, sizeof inner);
    if (!st) {
        snprintf(why, whylen, "property wal.url: %s", inner);
        return SK_ERR_INVAL;
    }
    wal_opts o = {0};
    o.segment_bytes = (uint64_t)n->cfg->wal_segment_bytes;
    /* Room for one whole request beyond the back-pressure threshold, so a
     * request admitted under the threshold always fits. */
    o.max_pending_bytes = (uint64_t)n->cfg->wal_max_pending_bytes +
                          (uint64_t)n->cfg->socket_request_max_bytes + (64u << 20);
    o.node_id = (uint32_t)n->cfg->node_id;
    o.owner_epoch = 0;
    o.lease_ms = n->cfg->wal_lease_ms;
    o.io_timeout_ms = n->cfg->wal_io_timeout_ms;
    o.no_direct_io = !n->cfg->wal_direct_io;
    /* Names this process as the WAL's owner on this data.dir: a restart
     * after a crash takes the WAL over without waiting out the lease. */
    char lock[4200];
    snprintf(lock, sizeof lock, "%s/wal.lock", n->cfg->data_dir);
    o.local_lock_path = lock;
    o.preamble = preamble_cb;
    o.preamble_arg = n;
    int rc = sk_vlog_open(n->log, st, &o, inner, sizeof inner);
    if (rc && rc != SK_ERR_AGAIN)
        snprintf(why, whylen, "cannot open the WAL at %s: %s", n->cfg->wal_url, inner);
    if (rc == 0)
        n->wal = sk_vlog_wal(n->log);
    return rc;
}

/* A vlog around a store, with the hooks of the node's own log. */
static int new_own_log(sk_node *n, sk_store *store, int64_t id, char *why, size_t whylen);

/* Opens the view at dbpath (emptied first when `reset`) and the node's own
 * log on it; on failure neither stays open. SK_ERR_AGAIN as sk_vlog_open. */
static int try_open(sk_node *n, const char *dbpath, bool reset, char *why, size_t whylen)
{
    sk_store *store = sk_store_open(dbpath, why, whylen);
    if (!store)
        return SK_ERR_IO;
    if (reset && sk_store_reset(store) != 0) {
        snprintf(why, whylen, "cannot reset the SQLite view %s", dbpath);
        sk_store_close(store);
        return SK_ERR_IO;
    }
    int rc = new_own_log(n, store, 0, why, whylen);
    if (rc == 0)
        rc = open_wal(n, why, whylen);
    if (rc) {
        sk_vlog_destroy(n->log);
        n->log = NULL;
        n->store = NULL;
        n->wal = NULL;
    }
    return rc;
}

static int new_own_log(sk_node *n, sk_store *store, int64_t id, char *why, size_t whylen)
{
    sk_vlog_hooks h = {own_durable, own_applied, own_fenced, n};
    n->log = sk_vlog_new(n, id, store, &h);
    if (!n->log) {
        sk_store_close(store);
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    n->store = store;
    return 0;
}

static void make_cluster_id(char *out, size_t len)
{
    static const char b64[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    kc_uuid u;
    sk_random_uuid(&u);
    size_t k = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (int i = 0; i < 16 && k + 1 < len; i++) {
        acc = acc << 8 | u.b[i];
        bits += 8;
        while (bits >= 6 && k + 1 < len) {
            out[k++] = b64[(acc >> (bits - 6)) & 63];
            bits -= 6;
        }
    }
    if (bits > 0 && k + 1 < len)
        out[k++] = b64[(acc << (6 - bits)) & 63];
    out[k] = 0;
}

static int mkdir_p(const char *path)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s", path);
    for (char *p = tmp + 1; *p; p++)
        if (*p == '/') {
            *p = 0;
            if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
                return -1;
            *p = '/';
        }
    if (mkdir(tmp, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

/* Blocking start-up steps that wait for a service: `step` is tried again
 * with backoff, saying what it waits for, until it succeeds. */
static int startup_retry(sk_node *n, const char *what, int (*step)(sk_node *, void *, char *, size_t),
                         void *arg, char *why, size_t whylen)
{
    int64_t backoff = 100;
    for (int attempt = 0;; attempt++) {
        why[0] = 0;
        int rc = step(n, arg, why, whylen);
        if (rc == 0 || rc == SK_ERR_INVAL)
            return rc;
        if (attempt == 0 || backoff == 5000)
            SK_WARN("node", "waiting for %s: %s; retrying (every %lld ms at most)", what,
                    why[0] ? why : sk_err_name(rc), 5000LL);
        struct timespec ts = {backoff / 1000, (backoff % 1000) * 1000000L};
        nanosleep(&ts, NULL);
        backoff = backoff * 2 > 5000 ? 5000 : backoff * 2;
    }
}

static int restore_step(sk_node *n, void *arg, char *why, size_t whylen)
{
    return sk_tier_restore_view(n->cfg, arg, why, whylen) ? SK_ERR_IO : 0;
}

/* A single node: its one log at wal.url, its view in data.dir/skiff.db. */
static int open_single(sk_node *n, char *why, size_t whylen)
{
    const sk_config *cfg = n->cfg;
    char dbpath[4200];
    snprintf(dbpath, sizeof dbpath, "%s/skiff.db", cfg->data_dir);
    /* A wiped data.dir: the view comes back from its latest snapshot in the
     * object store, and the WAL replays from there. */
    int rc = startup_retry(n, "the object store", restore_step, dbpath, why, whylen);
    if (rc != 0)
        return rc;
    rc = try_open(n, dbpath, false, why, whylen);
    if (rc == SK_ERR_AGAIN) {
        /* The view missed records the WAL no longer holds. Its newest
         * snapshot in the object store is never older than the WAL's start
         * (the WAL is trimmed only below it): take that one first. */
        char stale[4300];
        snprintf(stale, sizeof stale, "%s.stale", dbpath);
        if (rename(dbpath, stale) == 0 && sk_tier_restore_view(cfg, dbpath, why, whylen) == 0) {
            rc = try_open(n, dbpath, false, why, whylen);
            if (rc == 0)
                SK_WARN("node", "the SQLite view was behind the retained WAL; restored its "
                        "snapshot at LSN %llu",
                        (unsigned long long)sk_store_applied(n->store));
        }
    }
    if (rc == SK_ERR_AGAIN) {
        SK_WARN("node", "the SQLite view is behind the retained WAL; rebuilding it from the WAL");
        rc = try_open(n, dbpath, true, why, whylen);
    }
    if (rc != 0)
        return rc;
    if (!sk_store_is_empty(n->store) && sk_store_applied(n->store) > wal_end_lsn(n->wal)) {
        snprintf(why, whylen,
                 "the SQLite view %s reflects the WAL up to LSN %llu but the WAL at %s ends at "
                 "LSN %llu: the WAL was replaced or truncated. Move %s away to rebuild the view "
                 "from this WAL",
                 dbpath, (unsigned long long)sk_store_applied(n->store), cfg->wal_url,
                 (unsigned long long)wal_end_lsn(n->wal), dbpath);
        return SK_ERR_IO;
    }
    n->store_applied = sk_store_applied(n->store);
    n->groups = sk_groups_new(n);
    n->txns = n->groups ? sk_txns_new(n) : NULL;
    if (!n->groups || !n->txns) {
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    sk_snapshot_visitor lv = {n, load_head, load_topic, load_part, load_pstate, load_extra};
    if (sk_store_load(n->store, &lv) != 0) {
        snprintf(why, whylen, "cannot load state from the SQLite view %s", dbpath);
        return SK_ERR_IO;
    }
    return 0;
}

/* A cluster member's storage for its own new log. */
static int member_wal_step(sk_node *n, void *arg, char *why, size_t whylen)
{
    const char *url = arg;
    wal_storage *st = wal_storage_open(n->base, url, why, whylen);
    if (!st)
        return SK_ERR_IO;
    wal_opts o = {0};
    o.segment_bytes = (uint64_t)n->cfg->wal_segment_bytes;
    o.max_pending_bytes = (uint64_t)n->cfg->wal_max_pending_bytes +
                          (uint64_t)n->cfg->socket_request_max_bytes + (64u << 20);
    o.node_id = (uint32_t)n->cfg->node_id;
    o.lease_ms = n->cfg->wal_lease_ms;
    o.io_timeout_ms = n->cfg->wal_io_timeout_ms;
    o.no_direct_io = !n->cfg->wal_direct_io;
    o.preamble = member_preamble;
    o.preamble_arg = n;
    int rc = sk_vlog_open(n->log, st, &o, why, whylen);
    if (rc == 0) {
        n->wal = sk_vlog_wal(n->log);
        /* Nothing is acknowledged past the membership lease. */
        wal_set_ack_deadline(n->wal, cs_deadline(sk_cluster_session(n->cluster)));
    }
    return rc;
}

/* The payload log (docs/zones.md): a fresh WAL with nothing to replay. */
static int payload_step(sk_node *n, void *arg, char *why, size_t whylen)
{
    const char *url = arg;
    wal_storage *st = wal_storage_open(n->base, url, why, whylen);
    if (!st)
        return SK_ERR_IO;
    wal_opts o = {0};
    o.segment_bytes = (uint64_t)n->cfg->wal_segment_bytes;
    o.max_pending_bytes = (uint64_t)n->cfg->wal_max_pending_bytes +
                          (uint64_t)n->cfg->socket_request_max_bytes + (64u << 20);
    o.node_id = (uint32_t)n->cfg->node_id;
    o.lease_ms = n->cfg->wal_lease_ms;
    o.io_timeout_ms = n->cfg->wal_io_timeout_ms;
    n->payload = pay_open(n->base, st, &o, why, whylen);
    if (!n->payload)
        return SK_ERR_IO;
    /* Like the data log: nothing is written past the membership lease. */
    wal_set_ack_deadline(pay_wal(n->payload), cs_deadline(sk_cluster_session(n->cluster)));
    return 0;
}

/* Views of earlier incarnations' logs: their logs are dead, taken over by
 * custodians that rebuild what they need from the shared volume. */
static void remove_old_views(const sk_config *cfg, const char *keep)
{
    DIR *d = opendir(cfg->data_dir);
    if (!d)
        return;
    struct dirent *e;
    char path[4400];
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "log-", 4) != 0 && strncmp(e->d_name, "custody-", 8) != 0)
            continue;
        snprintf(path, sizeof path, "%s/%s", cfg->data_dir, e->d_name);
        if (strncmp(path, keep, strlen(keep)) != 0)
            unlink(path);
    }
    closedir(d);
}

/* A cluster member: joins through etcd, then opens a new log of its own. */
static int open_member(sk_node *n, char *why, size_t whylen)
{
    const sk_config *cfg = n->cfg;
    if (sk_net_check_ports(cfg, why, whylen) != 0)
        return SK_ERR_INVAL;
    n->cluster = sk_cluster_new(n, why, whylen);
    if (!n->cluster)
        return SK_ERR_IO;
    n->cmeta = &sk_cmeta_etcd;
    int64_t log = sk_cluster_log_id(n->cluster);
    char dbpath[4200], url[4200];
    sk_cluster_view_path(cfg, "log", log, dbpath, sizeof dbpath);
    remove_old_views(cfg, dbpath);
    if (sk_cluster_log_url(cfg, log, url, sizeof url) != 0) {
        snprintf(why, whylen, "property wal.url: too long");
        return SK_ERR_INVAL;
    }
    sk_store *store = sk_store_open(dbpath, why, whylen);
    if (!store)
        return SK_ERR_IO;
    int rc = new_own_log(n, store, log, why, whylen);
    if (rc == 0)
        rc = startup_retry(n, "the shared volume", member_wal_step, url, why, whylen);
    char purl[4200];
    if (rc == 0 && sk_cluster_log_url(cfg, sk_cluster_payload_log_id(n->cluster), purl,
                                      sizeof purl) != 0) {
        snprintf(why, whylen, "property wal.url: too long");
        rc = SK_ERR_INVAL;
    }
    if (rc == 0)
        rc = startup_retry(n, "the shared volume", payload_step, purl, why, whylen);
    if (rc == 0) {
        n->groups = sk_groups_new(n);
        n->txns = n->groups ? sk_txns_new(n) : NULL;
        if (!n->groups || !n->txns) {
            snprintf(why, whylen, "out of memory");
            rc = SK_ERR_NOMEM;
        }
    }
    if (rc == 0)
        SK_INFO("node", "node %d writes log %lld at %s", cfg->node_id, (long long)log, url);
    return rc;
}

static void retention_cb(evutil_socket_t fd, short what, void *arg);
static void retention_sweep(sk_node *n, bool periodic);
static void signal_cb(evutil_socket_t fd, short what, void *arg);

sk_node *sk_node_new(sk_config *cfg, char *why, size_t whylen)
{
    sk_node *n = calloc(1, sizeof *n);
    if (!n) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    n->cfg = cfg;
    n->cmeta = &sk_cmeta_local;
    n->started_ms = sk_now_ms();
    sk_progress_init(&n->progress);
    evthread_use_pthreads();
    n->base = new_base();
    n->topics_by_name = sk_map_new();
    n->topics_by_id = sk_map_new();
    if (!n->base || !n->topics_by_name || !n->topics_by_id) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    n->zones = zone_map_new(cfg->client_zone_cidrs, cfg->listener_zones, why, whylen);
    if (!n->zones)
        goto fail;
    n->xzone = sk_xzone_new(cfg, n->zones, why, whylen);
    if (!n->xzone)
        goto fail;
    if (mkdir_p(cfg->data_dir) != 0) {
        snprintf(why, whylen, "property data.dir: cannot create %s: %s", cfg->data_dir,
                 strerror(errno));
        goto fail;
    }
    int rc = sk_config_cluster(cfg) ? open_member(n, why, whylen) : open_single(n, why, whylen);
    if (rc != 0)
        goto fail;
    if (sk_vlog_start(n->log) != 0) {
        snprintf(why, whylen, "cannot start the SQLite thread");
        goto fail;
    }
    n->tier = sk_tier_new(n, why, whylen);
    if (!n->tier)
        goto fail;
    /* A cluster member also reads for its zone's consumers of other mains'
     * partitions (proxy fetch): mostly waits on the shared volume. */
    n->readers = sk_workq_new(n->base, "skiff-read", n->cluster ? 4 : 2);
    if (!n->readers) {
        snprintf(why, whylen, "out of memory");
        goto fail;
    }
    if (n->cluster && sk_cluster_start(n->cluster) != 0) {
        snprintf(why, whylen, "cannot take the cluster's state");
        goto fail;
    }
    if (!n->cluster && !n->cluster_id[0]) {
        make_cluster_id(n->cluster_id, sizeof n->cluster_id);
        sk_buf b;
        sk_buf_init(&b, 256);
        sk_meta_cluster(&b, n->cluster_id);
        if (append_meta(n, &b, NULL, NULL) != 0) {
            snprintf(why, whylen, "cannot write the cluster id to the WAL");
            goto fail;
        }
    }
    SK_INFO("node", "node %d of cluster %s: %zu topics, WAL %s from LSN %llu to %llu",
            cfg->node_id, n->cluster_id, sk_map_count(n->topics_by_id), cfg->wal_url,
            (unsigned long long)wal_start_lsn(n->wal), (unsigned long long)wal_end_lsn(n->wal));
    return n;
fail:
    sk_node_destroy(n);
    return NULL;
}

/* ---- retention and WAL trimming ---- */

struct ret_item {
    kc_uuid id;
    int32_t part;
    uint64_t stream;
    int64_t cutoff, max_bytes;
    int64_t new_start;
    int rc;
};

struct ret_job {
    sk_node *n;
    struct ret_item *items;
    size_t nitems;
    int64_t own_log; /* the own log's id (cluster), else 0 */
    wal_lsn min_lsn;
    int lsn_rc;
};


static void ret_work(void *arg)
{
    struct ret_job *j = arg;
    /* Trim with what the view knows now: segments wholly below every
     * batch it still indexes. LOG_START records appended by this round
     * take effect in the next. */
    j->lsn_rc = sk_store_min_lsn(j->n->store, j->own_log, &j->min_lsn);
    for (size_t i = 0; i < j->nitems; i++) {
        struct ret_item *it = &j->items[i];
        it->rc = sk_store_retention_point(j->n->store, &it->id, it->part, it->stream, it->cutoff,
                                          it->max_bytes, &it->new_start);
        sk_progress_advance(&j->n->progress, SK_WORK_RETENTION);
    }
}

static void ret_done(void *arg)
{
    struct ret_job *j = arg;
    sk_node *n = j->n;
    n->retention_running = false;
    size_t advanced = 0;
    for (size_t i = 0; i < j->nitems && !n->stopping; i++) {
        struct ret_item *it = &j->items[i];
        sk_part *p = sk_part_get(sk_topic_get_id(n, &it->id), it->part);
        if (!p || it->rc != 0 || it->new_start == -2)
            continue;
        int64_t target = it->new_start == -1 ? p->hw : it->new_start;
        /* Never past what the view had indexed when the job ran: newer
         * batches were not considered. */
        if (target > p->hw)
            target = p->hw;
        if (target > p->log_start) {
            SK_INFO("retention", "%s-%d: log start %lld -> %lld", p->topic->name, p->index,
                    (long long)p->log_start, (long long)target);
            if (sk_node_set_log_start(n, p, target, NULL, NULL) != 0)
                break;
            advanced++;
        }
    }
    char detail[64];
    snprintf(detail, sizeof detail, "%zu log starts advanced", advanced);
    sk_progress_end(&n->progress, SK_WORK_RETENTION, detail, advanced > 0);
    if (j->lsn_rc == 0 && !n->stopping) {
        /* Below every batch still indexed in the WAL, below what the view
         * reflects, and below what objects and a view snapshot hold. */
        wal_lsn upto = j->min_lsn < n->store_applied ? j->min_lsn : n->store_applied;
        if (n->tier && sk_tier_trim_bound(n->tier) < upto)
            upto = sk_tier_trim_bound(n->tier);
        /* ...and below what adopters of partitions that left still read. */
        if (n->cluster) {
            wal_lsn ref = sk_cluster_walref_floor(n->cluster);
            if (ref < upto)
                upto = ref;
        }
        wal_trim(n->wal, upto);
    }
    free(j->items);
    free(j);
    if (n->retention_again)
        retention_sweep(n, n->retention_again_periodic);
}

/* periodic: the log.retention.check.interval.ms sweep, logged at INFO; the
 * others (after each view snapshot, to trim the WAL) log at DEBUG unless
 * they advance a log start. */
static void retention_sweep(sk_node *n, bool periodic)
{
    if (n->stopping)
        return;
    if (n->retention_running) {
        /* Asked again while running (a view snapshot allows a deeper trim):
         * run once more when this round is done. */
        n->retention_again = true;
        n->retention_again_periodic |= periodic;
        return;
    }
    n->retention_again = false;
    n->retention_again_periodic = false;
    struct ret_job *j = calloc(1, sizeof *j);
    if (!j)
        return;
    j->n = n;
    j->own_log = n->cluster ? sk_cluster_log_id(n->cluster) : 0;
    size_t cap = 0;
    size_t it = 0;
    void *v;
    int64_t now = sk_now_ms();
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *t = v;
        if ((t->conf.retention_ms < 0 && t->conf.retention_bytes < 0) ||
            !(t->conf.policy & SK_POLICY_DELETE)) /* compact alone keeps every key */
            continue;
        for (int32_t i = 0; i < t->nparts; i++) {
            if (j->nitems == cap) {
                cap = cap ? cap * 2 : 64;
                struct ret_item *ni = realloc(j->items, cap * sizeof *ni);
                if (!ni) {
                    free(j->items);
                    free(j);
                    return;
                }
                j->items = ni;
            }
            struct ret_item *ri = &j->items[j->nitems++];
            memset(ri, 0, sizeof *ri);
            ri->id = t->id;
            ri->part = i;
            ri->stream = t->parts[i]->stream;
            ri->cutoff = t->conf.retention_ms < 0 ? -1 : now - t->conf.retention_ms;
            ri->max_bytes = t->conf.retention_bytes;
        }
    }
    n->retention_running = true;
    sk_progress_begin(&n->progress, SK_WORK_RETENTION, j->nitems, !periodic);
    if (sk_node_read_job(n, ret_work, ret_done, j) != 0) {
        n->retention_running = false;
        sk_progress_end(&n->progress, SK_WORK_RETENTION, "not started: no reader", true);
        free(j->items);
        free(j);
    }
}

void sk_node_retention(sk_node *n)
{
    retention_sweep(n, false);
}

static void retention_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_node *n = arg;
    retention_sweep(n, true);
    sk_net_reap_idle(n);
}

/* ---- run and shutdown ---- */


static void shutdown_check_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_node *n = arg;
    if (!sk_net_idle(n) && sk_mono_ms() < n->shutdown_deadline)
        return;
    if (!sk_net_idle(n))
        SK_WARN("node", "shutdown: requests still in flight after the grace period");
    event_del(n->shutdown_ev);
    sk_net_close_all(n);
    event_base_loopexit(n->base, NULL);
}

static void begin_shutdown(sk_node *n)
{
    if (n->stopping)
        return;
    n->stopping = true;
    SK_INFO("node", "shutting down: finishing in-flight requests");
    sk_net_stop_accepting(n);
    sk_metrics_stop(n);
    sk_net_pause(n);
    sk_fetch_wake_all(n);
    sk_groups_abort_waiters(n->groups);
    sk_tier_stop(n->tier);
    n->shutdown_deadline = sk_mono_ms() + 30000;
    n->shutdown_ev = event_new(n->base, -1, EV_PERSIST, shutdown_check_cb, n);
    struct timeval tv = {0, 10000};
    event_add(n->shutdown_ev, &tv);
}

static void drained(void *arg)
{
    begin_shutdown(arg);
}

void sk_node_stop(sk_node *n, int exit_code)
{
    if (!n->stopping)
        n->exit_code = exit_code;
    begin_shutdown(n);
    /* Fenced, or the membership lost: nothing in flight can be acknowledged
     * any more. Appends waiting for the WAL fail now, so that their clients
     * get NOT_LEADER_OR_FOLLOWER (not persisted here: retry on the new main,
     * as a Kafka leader answers what waits when it loses leadership)
     * rather than a closed connection, which clients must take for "possibly
     * persisted". The answers get a moment to leave, then connections close. */
    if (exit_code == SK_EXIT_FENCED || exit_code == SK_EXIT_REJOIN) {
        wal_abandon(n->wal);
        if (n->payload)
            wal_abandon(pay_wal(n->payload));
        n->shutdown_deadline = sk_mono_ms() + ABANDON_FLUSH_MS;
    }
}

static void signal_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    sk_node *n = arg;
    SK_INFO("node", "signal %d received", (int)fd);
    /* A cluster member first hands its partitions to other nodes (a second
     * signal stops it at once: they then move as after a crash). */
    if (n->cluster && !n->draining && !n->stopping) {
        n->draining = true;
        sk_cluster_drain(n->cluster, drained, n);
        return;
    }
    begin_shutdown(n);
}

/* SIGHUP: certificates are read again (docs/security.md). */
static void sighup_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    SK_INFO("node", "SIGHUP: reloading the TLS key and certificates");
    sk_net_reload_tls(arg);
}

int sk_node_run(sk_node *n)
{
    char why[512];
    if (sk_net_listen(n, why, sizeof why) != 0 || sk_metrics_start(n, why, sizeof why) != 0) {
        SK_ERROR("node", "%s", why);
        return 1;
    }
    signal(SIGPIPE, SIG_IGN);
    int sigs[] = {SIGTERM, SIGINT};
    for (int i = 0; i < 2; i++) {
        n->sig_ev[i] = evsignal_new(n->base, sigs[i], signal_cb, n);
        event_add(n->sig_ev[i], NULL);
    }
    n->sig_ev[2] = evsignal_new(n->base, SIGHUP, sighup_cb, n);
    event_add(n->sig_ev[2], NULL);
    sk_tier_start(n->tier);
    n->pace_ev = evtimer_new(n->base, pace_cb, n);
    n->retention_ev = event_new(n->base, -1, EV_PERSIST, retention_cb, n);
    int64_t iv = n->cfg->log_retention_check_interval_ms;
    struct timeval tv = {iv / 1000, (iv % 1000) * 1000};
    event_add(n->retention_ev, &tv);
    SK_INFO("node", "serving");
    event_base_dispatch(n->base);

    /* Readers use the WAL: finish them first (their answers go to closed
     * connections). Everything acknowledged is durable already; closing the
     * WAL syncs whatever is still pending, then the view catches up. */
    sk_cluster_close(n->cluster);
    sk_workq_destroy(n->readers);
    n->readers = NULL;
    sk_tier_drain(n->tier);
    sk_vlog_close(n->log);
    n->wal = NULL;
    /* Last: the lease ends with the cluster's session, once nothing more
     * will be acknowledged. */
    sk_cluster_destroy(n->cluster);
    n->cluster = NULL;
    SK_INFO("node", "stopped");
    return n->exit_code;
}

void sk_node_destroy(sk_node *n)
{
    if (!n)
        return;
    /* Invariant: connections close before the caches their responses point
     * into are destroyed (the block cache with the tier, the WAL cache with
     * the topics), so that every response queued on a connection, with its
     * holds on cached memory, is freed before that memory's owner. (A hold
     * outliving its cache is safe, sk_ref frees the memory, but it would run
     * from event_base_free, last.) Requests still running end while the
     * caches go (a read fails with SK_ERR_CLOSED) and answer to closed
     * connections, which queue nothing. The connections themselves are
     * reaped last (sk_net_destroy): requests that end hold them. */
    sk_net_close_all(n);
    /* Readers and tier jobs use the WAL: they stop first. */
    sk_cluster_close(n->cluster);
    if (n->readers)
        sk_workq_destroy(n->readers);
    n->readers = NULL;
    sk_tier_drain(n->tier);
    sk_vlog_close(n->log);
    n->wal = NULL;
    sk_cluster_destroy(n->cluster);
    n->cluster = NULL;
    pay_close(n->payload); /* when no proxy took it */
    n->payload = NULL;
    assert(sk_net_open_conns(n) == 0); /* the order above */
    sk_tier_destroy(n->tier);
    n->tier = NULL;
    sk_txns_destroy(n->txns);
    n->txns = NULL;
    sk_groups_destroy(n->groups);
    n->groups = NULL;
    sk_fs_destroy(n->fsessions);
    n->fsessions = NULL;
    sk_dynconf_free(n);
    sk_gconf_free_all(n);
    sk_acls_free(n);
    zone_map_destroy(n->zones);
    sk_vlog_destroy(n->log);
    n->log = NULL;
    n->store = NULL;
    size_t it = 0;
    void *v;
    /* Collect first: removing changes the map being walked. */
    while (n->topics_by_id && sk_map_count(n->topics_by_id)) {
        it = 0;
        if (!sk_map_next(n->topics_by_id, &it, NULL, NULL, &v))
            break;
        sk_topic_remove(n, v);
    }
    sk_map_destroy(n->topics_by_name);
    sk_map_destroy(n->topics_by_id);
    for (int i = 0; i < 3; i++)
        if (n->sig_ev[i])
            event_free(n->sig_ev[i]);
    if (n->retention_ev)
        event_free(n->retention_ev);
    if (n->pace_ev)
        event_free(n->pace_ev);
    sk_net_destroy(n);
    if (n->shutdown_ev)
        event_free(n->shutdown_ev);
    n->shutdown_ev = NULL;
    /* After every client that counts into it (the etcd client's thread, the
     * RPC client, connections) is gone. */
    sk_xzone_destroy(n->xzone);
    n->xzone = NULL;
    if (n->base)
        event_base_free(n->base);
    free(n);
}
