#include "txns.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>

#include "append.h"
#include "cluster.h"
#include "config.h"
#include "groups.h"
#include "kbatch.h"
#include "meta.h"
#include "node.h"
#include "plog.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "txpeer.h"

#define TICK_MS 1000
#define MAX_EXPIRED 64

/* What the coordinator keeps beside tcoord for one id. */
typedef struct aux {
    char *id;
    int noffs;
    sk_txoff *offs;
    bool finishing; /* markers being written */
} aux;

struct sk_txns {
    sk_node *n;
    sk_tc *tc;
    int naux, capaux;
    aux *auxv;
    struct event *tick_ev;
    sk_txpeer *peer; /* verification cache (cluster) */
    int64_t last_cleanup_ms;
};

/* ---- record codec ---- */

static void put_str(sk_buf *b, const char *s)
{
    sk_buf_str(b, s ? s : "", s ? strlen(s) : 0);
}

void sk_txrec_put(sk_buf *b, const sk_tc_entry *e, int noffs, const sk_txoff *offs)
{
    put_str(b, e->txn_id);
    sk_buf_u64(b, (uint64_t)e->producer_id);
    sk_buf_u16(b, (uint16_t)e->producer_epoch);
    sk_buf_u64(b, (uint64_t)e->last_producer_id);
    sk_buf_u16(b, (uint16_t)e->last_producer_epoch);
    sk_buf_u32(b, (uint32_t)e->timeout_ms);
    sk_buf_u8(b, (uint8_t)e->state);
    sk_buf_u64(b, (uint64_t)e->start_ms);
    sk_buf_u64(b, (uint64_t)e->update_ms);
    sk_buf_u32(b, (uint32_t)e->nparts);
    for (int i = 0; i < e->nparts; i++) {
        put_str(b, e->parts[i].topic);
        sk_buf_u32(b, (uint32_t)e->parts[i].partition);
    }
    sk_buf_u32(b, (uint32_t)e->ngroups);
    for (int i = 0; i < e->ngroups; i++)
        put_str(b, e->groups[i]);
    sk_buf_u32(b, (uint32_t)noffs);
    for (int i = 0; i < noffs; i++) {
        put_str(b, offs[i].group);
        put_str(b, offs[i].topic);
        sk_buf_u32(b, (uint32_t)offs[i].part);
        sk_buf_u64(b, (uint64_t)offs[i].offset);
        sk_buf_u32(b, (uint32_t)offs[i].leader_epoch);
        put_str(b, offs[i].meta);
    }
}

static char *get_str(sk_rd *r)
{
    size_t n;
    const uint8_t *p = sk_rd_str(r, &n);
    if (sk_rd_failed(r) || (n && memchr(p, 0, n)))
        return NULL;
    char *s = malloc(n + 1);
    if (s) {
        if (n)
            memcpy(s, p, n);
        s[n] = 0;
    }
    return s;
}

void sk_txoffs_free(int n, sk_txoff *offs)
{
    for (int i = 0; i < n; i++) {
        free(offs[i].group);
        free(offs[i].topic);
        free(offs[i].meta);
    }
    free(offs);
}

/* A count read from a record, bounded by the bytes left (every element takes
 * at least `min` bytes), so corrupt input cannot ask for huge arrays. */
static int get_count(sk_rd *r, size_t min, uint32_t *out)
{
    *out = sk_rd_u32(r);
    return sk_rd_failed(r) || (size_t)*out > sk_rd_left(r) / min ? -1 : 0;
}

static int get_members(sk_rd *r, sk_tc_entry *e)
{
    uint32_t n;
    if (get_count(r, 8, &n) || (n && !(e->parts = calloc(n, sizeof *e->parts))))
        return -1;
    for (; (uint32_t)e->nparts < n; e->nparts++) {
        sk_tc_part *p = &e->parts[e->nparts];
        if (!(p->topic = get_str(r)))
            return -1;
        p->partition = (int32_t)sk_rd_u32(r);
    }
    if (get_count(r, 4, &n) || (n && !(e->groups = calloc(n, sizeof *e->groups))))
        return -1;
    for (; (uint32_t)e->ngroups < n; e->ngroups++)
        if (!(e->groups[e->ngroups] = get_str(r)))
            return -1;
    return sk_rd_failed(r) ? -1 : 0;
}

static int get_offs(sk_rd *r, int *noffs, sk_txoff **offs)
{
    uint32_t n;
    *noffs = 0;
    *offs = NULL;
    if (get_count(r, 32, &n) || (n && !(*offs = calloc(n, sizeof **offs))))
        return -1;
    for (uint32_t i = 0; i < n; i++) {
        sk_txoff *o = &(*offs)[i];
        *noffs = (int)i + 1; /* counted before it is filled: a partial one is freed too */
        if (!(o->group = get_str(r)) || !(o->topic = get_str(r)))
            return -1;
        o->part = (int32_t)sk_rd_u32(r);
        o->offset = (int64_t)sk_rd_u64(r);
        o->leader_epoch = (int32_t)sk_rd_u32(r);
        if (!(o->meta = get_str(r)))
            return -1;
    }
    return sk_rd_failed(r) ? -1 : 0;
}

int sk_txrec_get(const uint8_t *p, size_t n, sk_tc_entry *e, int *noffs, sk_txoff **offs)
{
    sk_rd r;
    sk_rd_init(&r, p, n);
    memset(e, 0, sizeof *e);
    *noffs = 0;
    *offs = NULL;
    e->txn_id = get_str(&r);
    e->producer_id = (int64_t)sk_rd_u64(&r);
    e->producer_epoch = (int16_t)sk_rd_u16(&r);
    e->last_producer_id = (int64_t)sk_rd_u64(&r);
    e->last_producer_epoch = (int16_t)sk_rd_u16(&r);
    e->timeout_ms = (int32_t)sk_rd_u32(&r);
    e->state = (sk_tc_state)sk_rd_u8(&r);
    e->start_ms = (int64_t)sk_rd_u64(&r);
    e->update_ms = (int64_t)sk_rd_u64(&r);
    bool ok = e->txn_id && !sk_rd_failed(&r) && e->state <= SK_TC_COMPLETE_ABORT &&
              get_members(&r, e) == 0 && get_offs(&r, noffs, offs) == 0 && sk_rd_left(&r) == 0;
    if (!ok) {
        sk_tc_entry_clear(e);
        sk_txoffs_free(*noffs, *offs);
        *noffs = 0;
        *offs = NULL;
        return SK_ERR_CORRUPT;
    }
    return 0;
}

/* ---- per-id extras ---- */

static aux *aux_get(sk_txns *tx, const char *id, bool create)
{
    for (int i = 0; i < tx->naux; i++)
        if (strcmp(tx->auxv[i].id, id) == 0)
            return &tx->auxv[i];
    if (!create)
        return NULL;
    if (tx->naux == tx->capaux) {
        int cap = tx->capaux ? tx->capaux * 2 : 16;
        aux *v = realloc(tx->auxv, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        tx->auxv = v;
        tx->capaux = cap;
    }
    aux *a = &tx->auxv[tx->naux];
    memset(a, 0, sizeof *a);
    if (!(a->id = strdup(id)))
        return NULL;
    tx->naux++;
    return a;
}

static void aux_set_offs(aux *a, int n, sk_txoff *offs)
{
    sk_txoffs_free(a->noffs, a->offs);
    a->noffs = n;
    a->offs = offs;
}

static bool same(const char *s, const char *p, size_t n)
{
    return strlen(s) == n && memcmp(s, p, n) == 0;
}

bool sk_txns_offset_pending(const sk_txns *tx, const char *group, size_t glen,
                            const char *topic, size_t tlen, int32_t part)
{
    if (tx && sk_txpeer_offset_pending(tx->peer, group, glen, topic, tlen, part))
        return true;
    for (int i = 0; tx && i < tx->naux; i++)
        for (int j = 0; j < tx->auxv[i].noffs; j++) {
            const sk_txoff *o = &tx->auxv[i].offs[j];
            if (o->part == part && same(o->group, group, glen) && same(o->topic, topic, tlen))
                return true;
        }
    return false;
}

/* ---- durability ---- */

typedef struct pjob {
    sk_txns *tx;
    char *id;
    sk_txns_done_fn fn;
    void *arg;
    int noffs; /* offsets to install once durable (add_offsets), -1: none */
    sk_txoff *offs;
} pjob;

static int append_body(sk_txns *tx, const sk_tc_entry *e, int noffs, const sk_txoff *offs,
                       sk_durable_fn fn, void *arg)
{
    sk_buf body, b;
    sk_buf_init(&body, 0);
    sk_txrec_put(&body, e, noffs, offs);
    sk_buf_init(&b, 0);
    sk_meta_txn(&b, body.data, body.len);
    int rc = sk_buf_failed(&b) || sk_buf_failed(&body) ? SK_ERR_NOMEM : 0;
    struct iovec iov = {b.data, b.len};
    if (rc == 0)
        rc = sk_node_append(tx->n, SK_WAL_META, &iov, 1, fn, arg, NULL);
    sk_buf_free(&b);
    sk_buf_free(&body);
    return rc;
}

static void pjob_free(pjob *j)
{
    if (j->noffs > 0)
        sk_txoffs_free(j->noffs, j->offs);
    free(j->id);
    free(j);
}

static void persisted(void *arg, int err)
{
    pjob *j = arg;
    sk_txns *tx = j->tx;
    if (err) {
        sk_tc_revert(tx->tc, j->id);
    } else if (j->noffs >= 0) {
        aux *a = aux_get(tx, j->id, true);
        if (a) {
            aux_set_offs(a, j->noffs, j->offs);
            j->noffs = -1;
        }
    } else if ((err = sk_tc_apply(tx->tc, j->id)) == 0) {
        const sk_tc_entry *e = sk_tc_get(tx->tc, j->id);
        aux *a = aux_get(tx, j->id, false);
        if (a && e && (e->state == SK_TC_COMPLETE_COMMIT || e->state == SK_TC_COMPLETE_ABORT))
            aux_set_offs(a, 0, NULL);
    }
    if (err)
        SK_WARN("txns", "transaction state of %s not recorded: %s", j->id, sk_err_name(err));
    if (j->fn)
        j->fn(j->arg, err);
    pjob_free(j);
}

static pjob *pjob_new(sk_txns *tx, const char *id, sk_txns_done_fn fn, void *arg)
{
    pjob *j = calloc(1, sizeof *j);
    if (!j || !(j->id = strdup(id))) {
        free(j);
        return NULL;
    }
    j->tx = tx;
    j->fn = fn;
    j->arg = arg;
    j->noffs = -1;
    return j;
}

int sk_txns_persist(sk_txns *tx, const char *txn_id, sk_txns_done_fn fn, void *arg)
{
    const sk_tc_entry *e = sk_tc_pending(tx->tc, txn_id);
    if (!e)
        return SK_ERR_INVAL;
    aux *a = aux_get(tx, txn_id, false);
    pjob *j = pjob_new(tx, txn_id, fn, arg);
    int rc = j ? append_body(tx, e, a ? a->noffs : 0, a ? a->offs : NULL, persisted, j)
               : SK_ERR_NOMEM;
    if (rc) {
        sk_tc_revert(tx->tc, txn_id);
        if (j)
            pjob_free(j);
    }
    return rc;
}

static int copy_offs(sk_txoff *dst, const sk_txoff *src)
{
    dst->part = src->part;
    dst->offset = src->offset;
    dst->leader_epoch = src->leader_epoch;
    dst->group = strdup(src->group);
    dst->topic = strdup(src->topic);
    dst->meta = strdup(src->meta ? src->meta : "");
    return dst->group && dst->topic && dst->meta ? 0 : -1;
}

static bool same_off(const sk_txoff *a, const sk_txoff *b)
{
    return a->part == b->part && strcmp(a->group, b->group) == 0 &&
           strcmp(a->topic, b->topic) == 0;
}

/* The id's offsets with the new ones (a newer offset of the same partition
 * replaces the older). */
static int merge_offs(const aux *a, int n, const sk_txoff *add, int *outn, sk_txoff **out)
{
    int have = a ? a->noffs : 0;
    sk_txoff *v = calloc((size_t)(have + n) + 1, sizeof *v);
    int k = 0, rc = v ? 0 : -1;
    for (int i = 0; rc == 0 && i < have; i++)
        rc = copy_offs(&v[k++], &a->offs[i]);
    for (int i = 0; rc == 0 && i < n; i++) {
        int at = k;
        for (int j = 0; j < k; j++)
            if (same_off(&v[j], &add[i]))
                at = j;
        if (at < k) {
            free(v[at].group);
            free(v[at].topic);
            free(v[at].meta);
        } else {
            k++;
        }
        rc = copy_offs(&v[at], &add[i]);
    }
    if (rc) {
        sk_txoffs_free(k, v);
        return SK_ERR_NOMEM;
    }
    *outn = k;
    *out = v;
    return 0;
}

int sk_txns_add_offsets(sk_txns *tx, const char *txn_id, int n, const sk_txoff *offs,
                        sk_txns_done_fn fn, void *arg)
{
    const sk_tc_entry *e = sk_tc_get(tx->tc, txn_id);
    if (!e || sk_tc_is_pending(tx->tc, txn_id))
        return SK_ERR_AGAIN;
    pjob *j = pjob_new(tx, txn_id, fn, arg);
    if (!j)
        return SK_ERR_NOMEM;
    int rc = merge_offs(aux_get(tx, txn_id, false), n, offs, &j->noffs, &j->offs);
    if (rc == 0)
        rc = append_body(tx, e, j->noffs, j->offs, persisted, j);
    if (rc)
        pjob_free(j);
    return rc;
}

/* ---- markers ---- */

typedef struct fjob {
    sk_txns *tx;
    char *id;
    sk_txns_done_fn fn;
    void *arg;
    int pending, err;
} fjob;

static void fjob_end(fjob *f, int err)
{
    aux *a = aux_get(f->tx, f->id, false);
    if (a)
        a->finishing = false;
    if (f->fn)
        f->fn(f->arg, err);
    free(f->id);
    free(f);
}

static void completed(void *arg, int err)
{
    fjob_end(arg, err);
}

static void finish_step(fjob *f)
{
    sk_txns *tx = f->tx;
    int err = f->err;
    if (err == 0)
        err = sk_tc_complete(tx->tc, f->id, sk_now_ms());
    if (err == 0)
        err = sk_txns_persist(tx, f->id, completed, f);
    if (err) {
        /* The Prepare state stays: the tick tries again. */
        SK_WARN("txns", "transaction %s not completed: %s", f->id, sk_err_name(err));
        fjob_end(f, err);
    }
}

static void part_durable(void *arg, int err)
{
    fjob *f = arg;
    if (err && !f->err)
        f->err = err;
    if (--f->pending == 0)
        finish_step(f);
}

/* A control batch: key = version 0 | type (0 abort, 1 commit); value =
 * version 0 | coordinator epoch (0). */
static int marker(uint8_t *out, size_t cap, int64_t pid, int16_t epoch, bool commit)
{
    uint8_t key[4] = {0, 0, 0, commit ? 1 : 0};
    uint8_t val[6] = {0};
    kb_build_rec rec = {{key, 4}, {val, 6}, sk_now_ms()};
    return (int)kb_build(out, cap, &rec, 1, pid, epoch, -1, KB_ATTR_TRANSACTIONAL | KB_ATTR_CONTROL);
}

int sk_txns_append_marker(sk_node *n, sk_part *p, int64_t pid, int16_t epoch, bool commit,
                          sk_durable_fn fn, void *arg)
{
    uint8_t buf[256];
    int len = marker(buf, sizeof buf, pid, epoch, commit);
    kb_header h;
    if (len < 0 || kb_parse_header(buf, (size_t)len, &h) != 0)
        return SK_ERR_INVAL;
    sk_append_res res;
    return sk_append(n, p, buf, (uint32_t)len, &h, NULL, NULL, fn, arg, &res);
}

static bool remote(sk_node *n, const sk_part *p)
{
    return n->cluster && !sk_part_serving(p);
}

static int write_marker(fjob *f, const sk_tc_entry *e, const sk_tc_part *tp, bool commit)
{
    sk_topic *t = sk_topic_get(f->tx->n, tp->topic, strlen(tp->topic));
    sk_part *p = t ? sk_part_get(t, tp->partition) : NULL;
    if (!p)
        return 0; /* deleted since: nothing to mark */
    f->pending++;
    int rc = remote(f->tx->n, p)
                 ? sk_txpeer_markers(f->tx->n, e, commit, p, NULL, 0, NULL, part_durable, f)
                 : sk_txns_append_marker(f->tx->n, p, e->producer_id, e->producer_epoch, commit,
                                         part_durable, f);
    if (rc)
        f->pending--;
    return rc;
}

int sk_txns_commit_offsets(sk_node *n, const char *group, int noffs, const sk_txoff *offs,
                           sk_durable_fn fn, void *arg)
{
    uint32_t k = 0;
    for (int i = 0; i < noffs; i++)
        k += strcmp(offs[i].group, group) == 0;
    if (k == 0)
        return SK_ERR_NOENT;
    sk_buf body;
    sk_buf_init(&body, 0);
    sk_grec_begin(&body, SK_GREC_COMMIT, group, strlen(group), k);
    for (int i = 0; i < noffs; i++) {
        const sk_txoff *o = &offs[i];
        if (strcmp(o->group, group) != 0)
            continue;
        const char *meta = o->meta ? o->meta : "";
        sk_grec_ent ent = {o->topic,        strlen(o->topic), o->part,     o->offset,
                           o->leader_epoch, meta,             strlen(meta), sk_now_ms()};
        sk_grec_put(&body, SK_GREC_COMMIT, &ent);
    }
    int rc = sk_groups_append(n->groups, &body, fn, arg);
    sk_buf_free(&body);
    return rc;
}

/* Commits the transaction's offsets of one group: here as an OffsetCommit,
 * or through the group's coordinator in a cluster, which also hears of an
 * abort (it stops holding RequireStable for them). */
static int commit_group(fjob *f, const sk_tc_entry *e, const aux *a, const char *group,
                        bool commit)
{
    sk_node *n = f->tx->n;
    sk_part *gp = n->cluster ? sk_cluster_group_part(n->cluster, group, strlen(group)) : NULL;
    if (!commit && !(gp && remote(n, gp)))
        return 0;
    f->pending++;
    int rc = gp && remote(n, gp)
                 ? sk_txpeer_markers(n, e, commit, gp, group, a->noffs, a->offs, part_durable, f)
                 : sk_txns_commit_offsets(n, group, a->noffs, a->offs, part_durable, f);
    if (rc)
        f->pending--;
    return rc == SK_ERR_NOENT ? 0 : rc;
}

int sk_txns_finish(sk_txns *tx, const char *txn_id, sk_txns_done_fn fn, void *arg)
{
    const sk_tc_entry *e = sk_tc_get(tx->tc, txn_id);
    if (!e || (e->state != SK_TC_PREPARE_COMMIT && e->state != SK_TC_PREPARE_ABORT))
        return SK_ERR_INVAL;
    aux *a = aux_get(tx, txn_id, true);
    fjob *f = calloc(1, sizeof *f);
    if (!a || !f || !(f->id = strdup(txn_id))) {
        free(f);
        return SK_ERR_NOMEM;
    }
    a->finishing = true;
    f->tx = tx;
    f->fn = fn;
    f->arg = arg;
    f->pending = 1; /* until every write is started */
    bool commit = e->state == SK_TC_PREPARE_COMMIT;
    int rc = 0;
    for (int i = 0; rc == 0 && i < e->nparts; i++)
        rc = write_marker(f, e, &e->parts[i], commit);
    for (int i = 0; rc == 0 && i < e->ngroups; i++)
        rc = commit_group(f, e, a, e->groups[i], commit);
    if (rc)
        f->err = rc;
    part_durable(f, 0);
    return 0;
}

/* ---- timeouts and recovery ---- */

static void finish_logged(void *arg, int err)
{
    (void)arg;
    if (err)
        SK_WARN("txns", "ending a transaction failed: %s", sk_err_name(err));
}

static void abort_persisted(void *arg, int err)
{
    pjob *j = arg; /* only its id and tx: a bare holder */
    if (err == 0 && sk_txns_finish(j->tx, j->id, finish_logged, NULL) != 0)
        SK_WARN("txns", "could not abort transaction %s", j->id);
    pjob_free(j);
}

/* Fences the epoch of an expired transaction and aborts it. */
static void abort_expired(sk_txns *tx, const char *id, int64_t now)
{
    pjob *holder = pjob_new(tx, id, NULL, NULL);
    if (!holder)
        return;
    SK_INFO("txns", "transaction %s passed its timeout: aborting it", id);
    int rc = sk_tc_abort_expired(tx->tc, id, now);
    if (rc == 0)
        rc = sk_txns_persist(tx, id, abort_persisted, holder);
    if (rc)
        pjob_free(holder);
}

/* Whether this node still acts for the id: in a cluster its partition of
 * __consumer_offsets may be leaving, and what the tick would write then
 * might miss the HANDOFF (the adopter finishes or expires it instead). */
static bool acting(const sk_txns *tx, const char *id)
{
    if (!tx->n->cluster)
        return true;
    return sk_part_serving(sk_cluster_group_part(tx->n->cluster, id, strlen(id)));
}

void sk_txns_recover(sk_txns *tx)
{
    for (int i = 0; i < sk_tc_count(tx->tc); i++) {
        const sk_tc_entry *e = sk_tc_at(tx->tc, i);
        if (!e || sk_tc_is_pending(tx->tc, e->txn_id) || !acting(tx, e->txn_id))
            continue;
        if (e->state != SK_TC_PREPARE_COMMIT && e->state != SK_TC_PREPARE_ABORT)
            continue;
        aux *a = aux_get(tx, e->txn_id, false);
        if (a && a->finishing)
            continue;
        if (sk_txns_finish(tx, e->txn_id, finish_logged, NULL) != 0)
            SK_WARN("txns", "could not finish transaction %s", e->txn_id);
    }
}

/* ---- transactional.id.expiration.ms ---- */

static void aux_drop(sk_txns *tx, const char *id);

typedef struct txgone {
    sk_txns *tx;
    char *id;
    int64_t update_ms; /* the state expired; a change since keeps the id */
} txgone;

static void gone_durable(void *arg, int err)
{
    txgone *g = arg;
    const sk_tc_entry *e = sk_tc_get(g->tx->tc, g->id);
    if (err == 0 && e && e->update_ms == g->update_ms && !sk_tc_is_pending(g->tx->tc, g->id)) {
        sk_tc_forget(g->tx->tc, g->id);
        aux_drop(g->tx, g->id);
    }
    free(g->id);
    free(g);
}

/* Forgets an id durably: a record, then memory once it is durable. */
static void expire_id(sk_txns *tx, const char *id)
{
    const sk_tc_entry *e = sk_tc_get(tx->tc, id);
    txgone *g = e ? calloc(1, sizeof *g) : NULL;
    if (!g || !(g->id = strdup(id))) {
        free(g);
        return;
    }
    g->tx = tx;
    g->update_ms = e->update_ms;
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_txn_gone(&b, id, strlen(id));
    struct iovec iov = {b.data, b.len};
    int rc = sk_buf_failed(&b) ? SK_ERR_NOMEM
                               : sk_node_append(tx->n, SK_WAL_META, &iov, 1, gone_durable, g, NULL);
    sk_buf_free(&b);
    if (rc) {
        free(g->id);
        free(g);
        return;
    }
    SK_INFO("txns", "transactional id %s expired (transactional.id.expiration.ms)", id);
}

static void expire_idle(sk_txns *tx, int64_t now)
{
    const sk_config *cfg = tx->n->cfg;
    if (now - tx->last_cleanup_ms < cfg->transaction_cleanup_interval_ms)
        return;
    tx->last_cleanup_ms = now;
    const char *ids[MAX_EXPIRED];
    char *copy[MAX_EXPIRED];
    int n = sk_tc_idle(tx->tc, now, cfg->transactional_id_expiration_ms, ids, MAX_EXPIRED);
    for (int i = 0; i < n; i++)
        copy[i] = strdup(ids[i]);
    for (int i = 0; i < n; i++) {
        if (copy[i] && acting(tx, copy[i]))
            expire_id(tx, copy[i]);
        free(copy[i]);
    }
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_txns *tx = arg;
    int64_t now = sk_now_ms();
    const char *ids[MAX_EXPIRED];
    char *copy[MAX_EXPIRED];
    int n = sk_tc_expired(tx->tc, now, ids, MAX_EXPIRED);
    for (int i = 0; i < n; i++)
        copy[i] = strdup(ids[i]);
    for (int i = 0; i < n; i++) {
        if (copy[i] && acting(tx, copy[i]))
            abort_expired(tx, copy[i], now);
        free(copy[i]);
    }
    sk_txns_recover(tx);
    expire_idle(tx, now);
}

/* ---- coordination moving (cluster) ---- */

static void aux_drop(sk_txns *tx, const char *id)
{
    for (int i = 0; i < tx->naux; i++) {
        if (strcmp(tx->auxv[i].id, id) != 0)
            continue;
        free(tx->auxv[i].id);
        sk_txoffs_free(tx->auxv[i].noffs, tx->auxv[i].offs);
        tx->auxv[i] = tx->auxv[--tx->naux];
        return;
    }
}

void sk_txns_release(sk_txns *tx, bool (*in)(void *arg, const char *id, size_t len), void *arg)
{
    /* Collect first: forgetting reorders the table being walked. */
    int n = sk_tc_count(tx->tc), k = 0;
    char **gone = calloc((size_t)n + 1, sizeof *gone);
    if (!gone)
        return;
    for (int i = 0; i < n; i++) {
        const sk_tc_entry *e = sk_tc_at(tx->tc, i);
        if (e && in(arg, e->txn_id, strlen(e->txn_id)))
            gone[k++] = strdup(e->txn_id);
    }
    for (int i = 0; i < k; i++) {
        if (!gone[i])
            continue;
        sk_tc_forget(tx->tc, gone[i]);
        aux_drop(tx, gone[i]);
        free(gone[i]);
    }
    free(gone);
}

/* ---- life ---- */

sk_txns *sk_txns_new(sk_node *n)
{
    sk_txns *tx = calloc(1, sizeof *tx);
    if (!tx)
        return NULL;
    sk_tc_config cfg = {.max_timeout_ms = n->cfg->transaction_max_timeout_ms};
    tx->n = n;
    tx->tc = sk_tc_new(&cfg);
    tx->peer = sk_txpeer_new();
    if (n->base)
        tx->tick_ev = event_new(n->base, -1, EV_PERSIST, tick_cb, tx);
    if (!tx->tc || !tx->peer || (n->base && !tx->tick_ev)) {
        sk_txns_destroy(tx);
        return NULL;
    }
    if (tx->tick_ev) {
        struct timeval tv = {TICK_MS / 1000, (TICK_MS % 1000) * 1000};
        event_add(tx->tick_ev, &tv);
    }
    return tx;
}

void sk_txns_destroy(sk_txns *tx)
{
    if (!tx)
        return;
    if (tx->tick_ev)
        event_free(tx->tick_ev);
    for (int i = 0; i < tx->naux; i++) {
        free(tx->auxv[i].id);
        sk_txoffs_free(tx->auxv[i].noffs, tx->auxv[i].offs);
    }
    free(tx->auxv);
    sk_tc_free(tx->tc);
    sk_txpeer_free(tx->peer);
    free(tx);
}

sk_txpeer *sk_txns_peer(sk_txns *tx)
{
    return tx->peer;
}

sk_tc *sk_txns_tc(sk_txns *tx)
{
    return tx->tc;
}

int sk_txns_load(sk_txns *tx, const uint8_t *body, size_t len)
{
    sk_tc_entry e;
    int noffs;
    sk_txoff *offs;
    int rc = sk_txrec_get(body, len, &e, &noffs, &offs);
    if (rc)
        return rc;
    rc = sk_tc_restore(tx->tc, &e);
    aux *a = rc == 0 ? aux_get(tx, e.txn_id, noffs > 0) : NULL;
    if (a) {
        aux_set_offs(a, noffs, offs);
        offs = NULL;
        noffs = 0;
    }
    sk_txoffs_free(noffs, offs);
    sk_tc_entry_clear(&e);
    return rc ? SK_ERR_NOMEM : 0;
}

uint32_t sk_txns_snapshot(const sk_txns *tx, sk_buf *b)
{
    uint32_t k = 0;
    for (int i = 0; i < sk_tc_count(tx->tc); i++) {
        const sk_tc_entry *e = sk_tc_at(tx->tc, i);
        if (!e)
            continue;
        const aux *a = aux_get((sk_txns *)tx, e->txn_id, false);
        sk_buf body;
        sk_buf_init(&body, 0);
        sk_txrec_put(&body, e, a ? a->noffs : 0, a ? a->offs : NULL);
        sk_buf_u8(b, SK_SNAP_TXNS);
        sk_buf_str(b, (const char *)body.data, body.len);
        if (sk_buf_failed(&body))
            b->failed = true;
        sk_buf_free(&body);
        k++;
    }
    return k;
}
