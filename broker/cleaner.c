#include "cleaner.h"

#include <openssl/evp.h>
#include <stdlib.h>
#include <string.h>

#include "kbatch.h"
#include "objfmt.h"
#include "objstore.h"
#include "sk_err.h"

/* ---- the offset map ---- */

struct sk_omap {
    uint64_t (*h)[2]; /* {0, 0}: empty slot */
    int64_t *off;
    uint64_t cap, n;
    EVP_MD_CTX *md; /* reused for every key's digest (the map is one thread's) */
};

/* 128 bits of the key's SHA-256, as Kafka's map keeps 128 bits of MD5. Two
 * keys with one hash would lose the older key's latest record, so the hash
 * is one no client can aim at, and wide enough that chance never meets it. */
static void key_hash(const sk_omap *m, const uint8_t *k, size_t len, uint64_t out[2])
{
    uint8_t d[EVP_MAX_MD_SIZE];
    unsigned dl = 0;
    if (EVP_DigestInit_ex(m->md, EVP_sha256(), NULL) != 1 ||
        EVP_DigestUpdate(m->md, k, len) != 1 || EVP_DigestFinal_ex(m->md, d, &dl) != 1 ||
        dl < 16)
        abort(); /* SHA-256 is always there; nothing sane goes on without it */
    memcpy(out, d, 16);
    if (!out[0] && !out[1])
        out[0] = 1;
}

sk_omap *sk_omap_new(uint64_t bytes)
{
    sk_omap *m = calloc(1, sizeof *m);
    uint64_t cap = bytes / SK_CLEAN_MAP_ENTRY;
    if (!m || cap < 16) {
        free(m);
        return NULL;
    }
    m->cap = cap;
    m->h = calloc(cap, sizeof *m->h);
    m->off = calloc(cap, sizeof *m->off);
    m->md = EVP_MD_CTX_new();
    if (!m->h || !m->off || !m->md) {
        sk_omap_destroy(m);
        return NULL;
    }
    return m;
}

void sk_omap_destroy(sk_omap *m)
{
    if (!m)
        return;
    free(m->h);
    free(m->off);
    EVP_MD_CTX_free(m->md);
    free(m);
}

bool sk_omap_room(const sk_omap *m, uint64_t n)
{
    return m->n + n <= m->cap - m->cap / 10; /* Kafka's dedupe load factor, 0.9 */
}

static bool slot_empty(const sk_omap *m, uint64_t i)
{
    return !m->h[i][0] && !m->h[i][1];
}

static uint64_t slot_of(const sk_omap *m, const uint64_t h[2])
{
    uint64_t i = h[0] % m->cap;
    while (!slot_empty(m, i) && (m->h[i][0] != h[0] || m->h[i][1] != h[1]))
        i = i + 1 == m->cap ? 0 : i + 1;
    return i;
}

void sk_omap_put(sk_omap *m, const uint8_t *key, size_t len, int64_t offset)
{
    uint64_t h[2];
    key_hash(m, key, len, h);
    uint64_t i = slot_of(m, h);
    if (slot_empty(m, i)) {
        if (m->n + 1 >= m->cap)
            return; /* sk_omap_room keeps callers away from this */
        m->h[i][0] = h[0];
        m->h[i][1] = h[1];
        m->n++;
    }
    m->off[i] = offset;
}

int64_t sk_omap_get(const sk_omap *m, const uint8_t *key, size_t len)
{
    uint64_t h[2];
    key_hash(m, key, len, h);
    uint64_t i = slot_of(m, h);
    return slot_empty(m, i) ? -1 : m->off[i];
}

/* ---- transactions ---- */

enum txn_kind { TXN_NONE, TXN_COMMITTED, TXN_ABORTED, TXN_KEEP };

/* What a batch is to the cleaner: plain or committed data is compacted,
 * aborted data removed, markers and data past the last stable offset kept. */
static enum txn_kind txn_kind(const sk_clean_cand *c, const kb_header *h, int64_t last)
{
    if (h->attributes & KB_ATTR_CONTROL)
        return TXN_KEEP;
    if (!(h->attributes & KB_ATTR_TRANSACTIONAL))
        return TXN_NONE;
    if (last >= c->lso)
        return TXN_KEEP;
    for (int i = 0; i < c->naborted; i++) {
        const sk_txidx_ent *e = &c->aborted[i];
        if (e->pid == h->producer_id && h->base_offset >= e->first &&
            (e->last < 0 || h->base_offset < e->last))
            return TXN_ABORTED;
    }
    return TXN_COMMITTED;
}

/* ---- choosing the stream ---- */

typedef struct seg {
    size_t obj; /* index in the listing */
    objreg_range r;
} seg;

typedef struct listing {
    const objreg_info *objs;
    size_t n;
    objreg_range **r; /* each live object's ranges */
    size_t *nr;
} listing;

static void listing_free(listing *l)
{
    for (size_t i = 0; l->r && i < l->n; i++)
        free(l->r[i]);
    free(l->r);
    free(l->nr);
}

static int listing_load(const objcompact_env *env, const objreg_info *objs, size_t n, listing *l)
{
    *l = (listing){objs, n, calloc(n + 1, sizeof *l->r), calloc(n + 1, sizeof *l->nr)};
    if (!l->r || !l->nr)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        if (objs[i].delete_after_ms >= 0 || objs[i].nranges == 0)
            continue;
        int rc = env->live(env->live_arg, objs[i].key, &l->r[i], &l->nr[i]);
        if (rc != 0)
            return rc;
    }
    return 0;
}

static int seg_cmp(const void *a, const void *b)
{
    const seg *x = a, *y = b;
    return (x->r.start > y->r.start) - (x->r.start < y->r.start);
}

/* The stream's ranges, in offset order (malloc'd). */
static seg *segs_of(const listing *l, uint64_t stream, size_t *n)
{
    size_t k = 0, cap = 16;
    seg *s = malloc(cap * sizeof *s);
    for (size_t i = 0; s && i < l->n; i++)
        for (size_t j = 0; j < l->nr[i]; j++) {
            if (l->r[i][j].stream != stream)
                continue;
            if (k == cap) {
                seg *ns = realloc(s, (cap *= 2) * sizeof *s);
                if (!ns) {
                    free(s);
                    return NULL;
                }
                s = ns;
            }
            s[k++] = (seg){i, l->r[i][j]};
        }
    if (s)
        qsort(s, k, sizeof *s, seg_cmp);
    *n = k;
    return s;
}

typedef struct choice {
    const sk_clean_cand *c;
    seg *segs;   /* all the stream's ranges (malloc'd) */
    seg *src;    /* the sources: src[0..nsrc), inside segs */
    size_t nsrc;
    bool whole;  /* the sources start at the stream's first range */
    uint64_t bytes;
    double ratio;
} choice;

/* How many ranges from segs[first] one pass takes: cleanable ones (older
 * than min.compaction.lag.ms), in objects within max_bytes. */
static size_t sources(const choice *ch, size_t first, size_t nsegs, const listing *l,
                      const sk_clean_params *p, uint64_t *bytes)
{
    size_t k = first;
    *bytes = 0;
    for (; k < nsegs; k++) {
        const seg *s = &ch->segs[k];
        if (ch->c->min_lag_ms > 0 && s->r.max_ts > p->now_ms - ch->c->min_lag_ms)
            break;
        uint64_t sz = l->objs[s->obj].size;
        if (k > first && *bytes + sz > p->max_bytes)
            break;
        *bytes += sz;
    }
    return k - first;
}

/* The sources: the oldest ranges; when those within max_bytes hold no
 * dirty data, a window from the first dirty range instead (which cannot
 * remove tombstones: an older record of the key may lie before it). */
static void pick_sources(choice *ch, size_t nsegs, const listing *l, const sk_clean_params *p)
{
    ch->whole = true;
    ch->src = ch->segs;
    ch->nsrc = sources(ch, 0, nsegs, l, p, &ch->bytes);
    if (ch->nsrc == 0 || (int64_t)ch->segs[ch->nsrc - 1].r.end >= ch->c->clean_end)
        return;
    size_t first = ch->nsrc;
    while (first < nsegs && (int64_t)ch->segs[first].r.end < ch->c->clean_end)
        first++;
    if (first == nsegs)
        return; /* nothing dirty: the oldest ones (their tombstones may expire) */
    ch->whole = false;
    ch->src = ch->segs + first;
    ch->nsrc = sources(ch, first, nsegs, l, p, &ch->bytes);
}

/* Whether the candidate is due, and how dirty it is. */
static bool evaluate(choice *ch, size_t nsegs, const listing *l, const sk_clean_params *p)
{
    const sk_clean_cand *c = ch->c;
    uint64_t total = 0, dirty = 0;
    bool overdue = false;
    for (size_t i = 0; i < nsegs; i++) {
        const objreg_range *r = &ch->segs[i].r;
        total += r->size;
        if ((int64_t)r->end < c->clean_end)
            continue;
        dirty += r->size;
        overdue |= r->max_ts >= 0 && c->max_lag_ms < INT64_MAX &&
                   r->max_ts < p->now_ms - c->max_lag_ms;
    }
    pick_sources(ch, nsegs, l, p);
    if (ch->nsrc == 0 || total == 0)
        return false;
    ch->ratio = (double)dirty / (double)total;
    bool in_reach = (int64_t)ch->src[ch->nsrc - 1].r.end >= c->clean_end;
    bool horizon = c->horizon_ms >= 0 && c->horizon_ms <= p->now_ms;
    return horizon || (in_reach && dirty > 0 && (ch->ratio >= c->min_dirty_ratio || overdue));
}

/* The dirtiest due candidate; best->segs malloc'd, NULL when none. */
static int choose(const listing *l, const sk_clean_cand *cands, size_t nc,
                  const sk_clean_params *p, choice *best)
{
    *best = (choice){0};
    for (size_t i = 0; i < nc; i++) {
        size_t nsegs;
        choice ch = {&cands[i], segs_of(l, cands[i].stream, &nsegs), NULL, 0, true, 0, 0};
        if (!ch.segs)
            return SK_ERR_NOMEM;
        if (evaluate(&ch, nsegs, l, p) && (!best->segs || ch.ratio > best->ratio)) {
            free(best->segs);
            *best = ch;
        } else {
            free(ch.segs);
        }
    }
    return 0;
}

/* ---- the offset map of the sources ---- */

typedef struct mapper {
    const sk_clean_cand *c;
    sk_omap *m;
    int64_t from; /* the first dirty offset */
    int64_t end;  /* where the map stops (exclusive); -1 while it goes on */
} mapper;

/* The map stops at the first record that does not fit: the rewrite keeps
 * every record from there on, in the middle of a batch if need be. */
static int map_record(void *arg, const kb_record *r)
{
    mapper *mp = arg;
    if (r->key.len < 0 || r->offset < mp->from)
        return 0;
    if (!sk_omap_room(mp->m, 1)) {
        mp->end = r->offset;
        return 1;
    }
    sk_omap_put(mp->m, r->key.p, (size_t)r->key.len, r->offset);
    return 0;
}

static int map_batch(mapper *mp, const objreg_range *sr, const objfmt_batch *b,
                     const uint8_t *payload)
{
    if ((int64_t)b->last_offset < mp->from || b->base_offset < sr->start ||
        b->last_offset > sr->end)
        return 0;
    kb_header h;
    if (kb_parse_header(payload, b->size, &h) != 0)
        return SK_ERR_PARSE;
    enum txn_kind k = txn_kind(mp->c, &h, (int64_t)b->last_offset);
    if (k == TXN_KEEP || k == TXN_ABORTED)
        return 0;
    return kb_foreach_record(payload, b->size, 0, map_record, mp);
}

/* Adds the stream's batches of one source to the map. */
static int map_source(const objcompact_env *env, const char *key, const objreg_range *sr,
                      mapper *mp)
{
    uint8_t *data = NULL;
    size_t got = 0;
    uint64_t size = 0, need_off;
    size_t need_len, nb = 0;
    objfmt_reader *r = NULL;
    int rc = objstore_get_sync(env->os, key, 0, OBJSTORE_TO_END, NULL, &data, &got, &size);
    if (rc == 0)
        rc = objfmt_reader_from_tail(data, got, got, &r, &need_off, &need_len);
    const objfmt_entry *bl = rc == 0 ? objfmt_reader_blocks(r, &nb) : NULL;
    for (size_t i = 0; rc == 0 && i < nb && mp->end < 0; i++) {
        if (bl[i].stream_id != sr->stream)
            continue;
        objfmt_iter it;
        objfmt_batch b;
        const uint8_t *payload;
        rc = objfmt_iter_init(&it, &bl[i], data + bl[i].position, bl[i].size);
        while (rc == 0 && mp->end < 0 && objfmt_iter_next(&it, &b, &payload) == 1)
            rc = map_batch(mp, sr, &b, payload);
    }
    objfmt_reader_destroy(r);
    free(data);
    return rc;
}

/* ---- the rewrite ---- */

typedef struct fctx {
    const sk_clean_cand *c;
    uint64_t stream;
    const sk_omap *m;
    int64_t map_end, cov_start, cov_end, now, retention;
    bool whole; /* from the stream's start: expired tombstones may go */
    /* the batch at hand */
    bool has_horizon;
    int64_t horizon;
    bool need_horizon;
    int32_t kept, tombstones;
    /* producers whose transactional data the pass kept since their last marker */
    int64_t *pids; /* open addressing, 0 free (ids are at least 0: stored + 1) */
    bool *pid_data;
    size_t npids, pid_cap;
    int alloc_err;
    /* totals */
    uint64_t removed, batches_removed;
    int64_t min_horizon;
} fctx;

/* The slot of producer `pid` in the table, made when absent; NULL when out
 * of memory. */
static bool *pid_slot(fctx *f, int64_t pid)
{
    if (f->npids * 10 >= f->pid_cap * 7) {
        size_t ncap = f->pid_cap ? f->pid_cap * 2 : 64;
        int64_t *np = calloc(ncap, sizeof *np);
        bool *nd = calloc(ncap, sizeof *nd);
        if (!np || !nd) {
            free(np);
            free(nd);
            f->alloc_err = SK_ERR_NOMEM;
            return NULL;
        }
        for (size_t i = 0; i < f->pid_cap; i++) {
            if (!f->pids[i])
                continue;
            size_t j = (uint64_t)f->pids[i] % ncap;
            while (np[j])
                j = (j + 1) % ncap;
            np[j] = f->pids[i];
            nd[j] = f->pid_data[i];
        }
        free(f->pids);
        free(f->pid_data);
        f->pids = np;
        f->pid_data = nd;
        f->pid_cap = ncap;
    }
    int64_t k = pid + 1;
    size_t j = (uint64_t)k % f->pid_cap;
    while (f->pids[j] && f->pids[j] != k)
        j = (j + 1) % f->pid_cap;
    if (!f->pids[j]) {
        f->pids[j] = k;
        f->npids++;
    }
    return &f->pid_data[j];
}

static bool decide(void *arg, const kb_record *r)
{
    fctx *f = arg;
    if (r->offset >= f->map_end || r->key.len < 0)
        return true;
    if (sk_omap_get(f->m, r->key.p, (size_t)r->key.len) > r->offset)
        return false; /* a later record of the key is in the map */
    if (r->value.len >= 0)
        return true;
    if (f->has_horizon)
        return !f->whole || f->now < f->horizon;
    f->need_horizon = true;
    return true;
}

static int count_kept(void *arg, const kb_record *r)
{
    fctx *f = arg;
    if (decide(f, r)) {
        f->kept++;
        f->tombstones += r->value.len < 0;
    }
    return 0;
}

static void note_horizon(fctx *f, int64_t h)
{
    if (f->tombstones > 0 && (f->min_horizon < 0 || h < f->min_horizon))
        f->min_horizon = h;
}

static void note_marker_horizon(fctx *f, int64_t h)
{
    if (f->min_horizon < 0 || h < f->min_horizon)
        f->min_horizon = h;
}

static bool keep_none(void *arg, const kb_record *r)
{
    (void)arg;
    (void)r;
    return false;
}

static bool edge_batch(const fctx *f, const objfmt_batch *b)
{
    return (int64_t)b->base_offset == f->cov_start || (int64_t)b->last_offset == f->cov_end;
}

/* A batch of an aborted transaction goes, or is emptied at an edge. */
static int drop_aborted(fctx *f, const objfmt_batch *b, const uint8_t *payload, uint8_t **out,
                        uint32_t *out_size, uint32_t *records)
{
    f->removed += b->record_count;
    if (!edge_batch(f, b)) {
        f->batches_removed++;
        return 2;
    }
    uint8_t *nb;
    size_t nlen;
    int32_t kept;
    int rc = kb_filter(payload, b->size, keep_none, NULL, -1, &nb, &nlen, &kept);
    if (rc != 0)
        return rc;
    *out = nb;
    *out_size = (uint32_t)nlen;
    *records = 0;
    return 1;
}

static bool keep_all(void *arg, const kb_record *r)
{
    (void)arg;
    (void)r;
    return true;
}

/* A transaction's marker goes once none of its data is left, as with
 * Kafka's cleaner: a pass from the stream's start that kept nothing of the
 * producer's data since its previous marker gives the marker a delete
 * horizon (delete.retention.ms from now), and a pass after the horizon
 * removes it. Markers at or past the last stable offset, at an edge of the
 * pass, or met by a pass that may not see all of their data stay. */
static int marker(fctx *f, const objfmt_batch *b, const kb_header *h, const uint8_t *payload,
                  uint8_t **out, uint32_t *out_size, uint32_t *records)
{
    bool *d = pid_slot(f, h->producer_id);
    if (!d)
        return f->alloc_err;
    bool had_data = *d;
    *d = false;
    if (!f->whole || had_data || (int64_t)b->last_offset >= f->c->lso || edge_batch(f, b))
        return 0;
    if (h->attributes & KB_ATTR_DELETE_HORIZON) {
        if (f->now < h->base_timestamp) {
            note_marker_horizon(f, h->base_timestamp);
            return 0;
        }
        f->removed += b->record_count;
        f->batches_removed++;
        return 2;
    }
    int64_t hz = f->now + f->retention;
    note_marker_horizon(f, hz);
    uint8_t *nb;
    size_t nlen;
    int32_t kept;
    int rc = kb_filter(payload, b->size, keep_all, NULL, hz, &nb, &nlen, &kept);
    if (rc != 0)
        return rc;
    *out = nb;
    *out_size = (uint32_t)nlen;
    *records = (uint32_t)kept;
    return 1;
}

static int filter(void *arg, uint64_t stream, const objfmt_batch *b, const uint8_t *payload,
                  uint8_t **out, uint32_t *out_size, uint32_t *records)
{
    fctx *f = arg;
    if (stream != f->stream || (int64_t)b->base_offset >= f->map_end)
        return 0;
    kb_header h;
    if (kb_parse_header(payload, b->size, &h) != 0)
        return SK_ERR_PARSE;
    if (h.attributes & KB_ATTR_CONTROL)
        return marker(f, b, &h, payload, out, out_size, records);
    enum txn_kind k = txn_kind(f->c, &h, (int64_t)b->last_offset);
    if (k == TXN_KEEP)
        return 0;
    if (k == TXN_ABORTED)
        return drop_aborted(f, b, payload, out, out_size, records);
    f->has_horizon = (h.attributes & KB_ATTR_DELETE_HORIZON) != 0;
    f->horizon = h.base_timestamp;
    f->need_horizon = false;
    f->kept = f->tombstones = 0;
    int rc = kb_foreach_record(payload, b->size, 0, count_kept, f);
    if (rc != 0)
        return rc;
    int64_t hz = f->need_horizon ? f->now + f->retention : -1;
    note_horizon(f, f->has_horizon ? f->horizon : hz);
    if (k == TXN_COMMITTED && f->kept > 0) {
        bool *d = pid_slot(f, h.producer_id);
        if (!d)
            return f->alloc_err;
        *d = true;
    }
    if (f->kept == h.records_count && !f->need_horizon)
        return 0;
    f->removed += (uint64_t)(h.records_count - f->kept);
    if (f->kept == 0 && !edge_batch(f, b)) {
        f->batches_removed++;
        return 2;
    }
    uint8_t *nb;
    size_t nlen;
    int32_t kept;
    rc = kb_filter(payload, b->size, decide, f, hz, &nb, &nlen, &kept);
    if (rc != 0)
        return rc;
    *out = nb;
    *out_size = (uint32_t)nlen;
    *records = (uint32_t)kept;
    return 1;
}

/* ---- the pass ---- */

static int build_map(const objcompact_env *env, const listing *l, const choice *ch, mapper *mp)
{
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ch->nsrc && mp->end < 0; i++)
        rc = map_source(env, l->objs[ch->src[i].obj].key, &ch->src[i].r, mp);
    if (rc == 0 && mp->end < 0)
        mp->end = (int64_t)ch->src[ch->nsrc - 1].r.end + 1;
    return rc;
}

static int rewrite(objcompact_env *env, const listing *l, const choice *ch, fctx *f,
                   objreg_keys *retired, objreg_objects *out)
{
    objcompact_plan plan = {OBJCOMPACT_SPLIT_SSO, calloc(ch->nsrc, sizeof(size_t)), ch->nsrc,
                            /* horizons may make a batch a few bytes longer */
                            ch->bytes + ch->bytes / 4 + (1u << 20)};
    if (!plan.src)
        return SK_ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < ch->nsrc; i++) {
        plan.src[i] = ch->src[i].obj;
        rc = objreg_keys_push(retired, l->objs[ch->src[i].obj].key);
    }
    env->filter = filter;
    env->filter_arg = f;
    if (rc == 0)
        rc = objcompact_run(env, &plan, (const char *const *)retired->v, out);
    env->filter = NULL;
    free(plan.src);
    return rc;
}

static int clean(objcompact_env *env, const listing *l, const choice *ch,
                 const sk_clean_params *p, objreg_keys *retired, objreg_objects *out,
                 sk_clean_result *res)
{
    int64_t from = ch->c->clean_end;
    if (from < (int64_t)ch->src[0].r.start)
        from = (int64_t)ch->src[0].r.start;
    mapper mp = {ch->c, sk_omap_new(p->map_bytes), from, -1};
    if (!mp.m)
        return SK_ERR_NOMEM;
    int rc = build_map(env, l, ch, &mp);
    fctx f = {.c = ch->c,
              .stream = ch->c->stream,
              .m = mp.m,
              .map_end = mp.end,
              .cov_start = (int64_t)ch->src[0].r.start,
              .cov_end = (int64_t)ch->src[ch->nsrc - 1].r.end,
              .whole = ch->whole,
              .now = p->now_ms,
              .retention = ch->c->delete_retention_ms,
              .min_horizon = -1};
    if (rc == 0)
        rc = rewrite(env, l, ch, &f, retired, out);
    sk_omap_destroy(mp.m);
    free(f.pids);
    free(f.pid_data);
    if (rc != 0)
        return rc;
    *res = (sk_clean_result){true, ch->c->stream, mp.end, f.min_horizon, ch->bytes, f.removed,
                             f.batches_removed};
    return 0;
}

int sk_cleaner_run(objcompact_env *env, const objreg_info *objs, size_t n,
                   const sk_clean_cand *cands, size_t ncands, const sk_clean_params *p,
                   objreg_keys *retired, objreg_objects *out, sk_clean_result *res)
{
    *res = (sk_clean_result){0};
    res->horizon_ms = -1;
    listing l;
    int rc = listing_load(env, objs, n, &l);
    choice ch = {0};
    if (rc == 0)
        rc = choose(&l, cands, ncands, p, &ch);
    if (rc == 0 && ch.segs)
        rc = clean(env, &l, &ch, p, retired, out, res);
    free(ch.segs);
    listing_free(&l);
    return rc;
}
