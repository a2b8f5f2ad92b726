#include "plog.h"

#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "handlers.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "tconf.h"

static void part_free(sk_part *p)
{
    if (!p)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(p->producers, &it, NULL, NULL, &v))
        free(v);
    sk_map_destroy(p->producers);
    sk_txidx_clear(&p->txidx);
    free(p->cq);
    free(p->waiters);
    free(p->obj_hint);
    free(p->obj_next);
    free(p);
}

static sk_part *part_new(sk_topic *t, int32_t index)
{
    sk_part *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->topic = t;
    p->index = index;
    p->max_ts = -1;
    p->max_ts_base = -1;
    p->producers = sk_map_new();
    if (!p->producers) {
        free(p);
        return NULL;
    }
    return p;
}

int sk_topic_grow(sk_topic *t, int32_t nparts, uint64_t first_stream, sk_own own)
{
    if (nparts <= t->nparts)
        return 0;
    sk_part **np = realloc(t->parts, (size_t)nparts * sizeof *np);
    if (!np)
        return SK_ERR_NOMEM;
    t->parts = np;
    for (int32_t i = t->nparts; i < nparts; i++) {
        np[i] = part_new(t, i);
        if (np[i]) {
            np[i]->stream = first_stream + (uint64_t)(i - t->nparts);
            np[i]->own = own;
            np[i]->main_node = -1;
        }
        if (!np[i]) {
            for (int32_t j = t->nparts; j < i; j++)
                part_free(np[j]);
            return SK_ERR_NOMEM;
        }
    }
    t->nparts = nparts;
    return 0;
}

sk_topic *sk_topic_new(sk_node *n, const kc_uuid *id, const char *name, size_t len,
                       int32_t nparts, int16_t rf, sk_tconf *conf, uint64_t first_stream,
                       sk_own own)
{
    sk_topic *t = calloc(1, sizeof *t);
    if (!t)
        return NULL;
    t->name = strndup(name, len);
    t->id = *id;
    t->replication_factor = rf;
    t->first_stream = first_stream;
    t->conf = *conf;
    memset(conf, 0, sizeof *conf);
    if (!t->name || sk_topic_grow(t, nparts, first_stream, own) != 0 ||
        sk_map_put(n->topics_by_name, t->name, len, t) != 0 ||
        sk_map_put(n->topics_by_id, t->id.b, 16, t) != 0) {
        sk_map_del(n->topics_by_name, name, len);
        for (int32_t i = 0; i < t->nparts; i++)
            part_free(t->parts[i]);
        free(t->parts);
        sk_tconf_free(&t->conf);
        free(t->name);
        free(t);
        return NULL;
    }
    return t;
}

void sk_topic_remove(sk_node *n, sk_topic *t)
{
    sk_map_del(n->topics_by_name, t->name, strlen(t->name));
    sk_map_del(n->topics_by_id, t->id.b, 16);
    /* Drop the topic's batches from the global cache FIFO. */
    sk_cbatch **pp = &n->cache_head;
    sk_cbatch *prev = NULL;
    while (*pp) {
        sk_cbatch *b = *pp;
        if (b->part->topic == t) {
            *pp = b->gnext;
            n->cache_bytes -= b->cost;
            sk_ref_put(&b->ref);
        } else {
            prev = b;
            pp = &b->gnext;
        }
    }
    n->cache_tail = prev;
    for (int32_t i = 0; i < t->nparts; i++) {
        sk_part *p = t->parts[i];
        p->cq_len = 0;
        /* Parked fetches re-check and find the topic gone; they must not
         * keep a pointer to it. */
        sk_part_wake(p);
        part_free(p);
    }
    free(t->parts);
    sk_tconf_free(&t->conf);
    free(t->name);
    free(t);
}

sk_topic *sk_topic_get(const sk_node *n, const char *name, size_t len)
{
    return sk_map_get(n->topics_by_name, name, len);
}

sk_topic *sk_topic_get_id(const sk_node *n, const kc_uuid *id)
{
    return sk_map_get(n->topics_by_id, id->b, 16);
}

const char *sk_topic_name_invalid(const char *name, size_t len)
{
    if (len == 0)
        return "Topic name is illegal, it can't be empty";
    if (len > 249)
        return "Topic name is illegal, it can't be longer than 249 characters";
    if ((len == 1 && name[0] == '.') || (len == 2 && name[0] == '.' && name[1] == '.'))
        return "Topic name cannot be \".\" or \"..\"";
    for (size_t i = 0; i < len; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return "Topic name contains characters other than ASCII alphanumerics, '.', '_' "
                   "and '-'";
    }
    return NULL;
}

/* Unlinks p's batches from the node's FIFO and frees them. */
static void cache_drop(sk_node *n, sk_part *p)
{
    sk_cbatch **pp = &n->cache_head, *prev = NULL;
    while (*pp) {
        sk_cbatch *b = *pp;
        if (b->part == p) {
            *pp = b->gnext;
            n->cache_bytes -= b->cost;
            sk_ref_put(&b->ref);
        } else {
            prev = b;
            pp = &b->gnext;
        }
    }
    n->cache_tail = prev;
    p->cq_len = 0;
    p->cq_head = 0;
}

void sk_part_release(sk_node *n, sk_part *p)
{
    cache_drop(n, p);
    size_t it = 0;
    void *v;
    while (sk_map_next(p->producers, &it, NULL, NULL, &v))
        free(v);
    sk_map_destroy(p->producers);
    p->producers = sk_map_new();
    sk_txidx_clear(&p->txidx);
    p->log_start = p->next_offset = p->hw = 0;
    p->max_ts = p->max_ts_base = -1;
    free(p->obj_hint);
    p->obj_hint = NULL;
    free(p->obj_next);
    p->obj_next = NULL;
    sk_part_wake(p);
}

sk_pstate *sk_part_pstate(sk_part *p, int64_t pid, bool create)
{
    sk_pstate *ps = sk_map_get_i64(p->producers, pid);
    if (ps || !create)
        return ps;
    ps = calloc(1, sizeof *ps);
    if (!ps)
        return NULL;
    ps->pid = pid;
    if (sk_map_put_i64(p->producers, pid, ps) != 0) {
        free(ps);
        return NULL;
    }
    return ps;
}

/* ---- cache ---- */

static sk_cbatch *cq_at(const sk_part *p, uint32_t i)
{
    return p->cq[(p->cq_head + i) % p->cq_cap];
}

static void cbatch_free(sk_ref *ref)
{
    sk_cbatch *b = (sk_cbatch *)ref; /* ref is its first member */
    sk_ref_put(b->backing);
    free(b);
}

bool sk_cache_add(sk_node *n, sk_part *p, sk_cbatch *b)
{
    if (p->cq_len == p->cq_cap) {
        uint32_t ncap = p->cq_cap ? p->cq_cap * 2 : 16;
        sk_cbatch **nq = malloc(ncap * sizeof *nq);
        if (!nq) {
            /* Without room in the ring the batch stays out of the cache; it
             * is still in the WAL and, once durable, in the view. The view
             * lags a little, so wait for it before serving from storage:
             * dropping is only safe because eviction keeps the invariant
             * for everything older. */
            SK_WARN("cache", "out of memory growing the cache of %s-%d", p->topic->name,
                    p->index);
            cbatch_free(&b->ref);
            return false;
        }
        for (uint32_t i = 0; i < p->cq_len; i++)
            nq[i] = cq_at(p, i);
        free(p->cq);
        p->cq = nq;
        p->cq_cap = ncap;
        p->cq_head = 0;
    }
    sk_ref_init(&b->ref, cbatch_free);
    p->cq[(p->cq_head + p->cq_len) % p->cq_cap] = b;
    p->cq_len++;
    b->part = p;
    b->gnext = NULL;
    if (n->cache_tail)
        n->cache_tail->gnext = b;
    else
        n->cache_head = b;
    n->cache_tail = b;
    b->cost = b->len;
    n->cache_bytes += b->cost;
    return true;
}

void sk_cache_charge(sk_node *n, sk_cbatch *b, uint32_t extra)
{
    b->cost += extra;
    n->cache_bytes += extra;
}

void sk_cache_evict(sk_node *n)
{
    size_t limit = (size_t)n->cfg->wal_cache_bytes;
    while (n->cache_head && n->cache_bytes > limit) {
        sk_cbatch *b = n->cache_head;
        if (b->lsn >= n->store_applied)
            break;
        sk_part *p = b->part;
        /* Per-partition order equals WAL order, so b is p's oldest. */
        if (p->cq_len && cq_at(p, 0) == b) {
            p->cq_head = (p->cq_head + 1) % p->cq_cap;
            p->cq_len--;
        }
        n->cache_head = b->gnext;
        if (!n->cache_head)
            n->cache_tail = NULL;
        n->cache_bytes -= b->cost;
        sk_ref_put(&b->ref);
    }
}

void sk_cache_drop_below(sk_node *n, sk_part *p, int64_t below)
{
    sk_cbatch **pp = &n->cache_head, *prev = NULL;
    uint32_t dropped = 0;
    while (*pp) {
        sk_cbatch *b = *pp;
        if (b->part == p && b->last < below && b->lsn < n->store_applied &&
            dropped < p->cq_len && cq_at(p, dropped) == b) { /* p's oldest, in order */
            *pp = b->gnext;
            n->cache_bytes -= b->cost;
            sk_ref_put(&b->ref); /* a response or an upload may still hold it */
            dropped++;
        } else {
            prev = b;
            pp = &b->gnext;
        }
    }
    n->cache_tail = prev;
    if (dropped) {
        p->cq_head = (p->cq_head + dropped) % p->cq_cap;
        p->cq_len -= dropped;
    }
}

/* Index in the ring of the batch holding `offset`, or -1 if older than the
 * cache, or cq_len if past its end. */
static int64_t cq_find(const sk_part *p, int64_t offset)
{
    if (p->cq_len == 0)
        return -1;
    if (offset < cq_at(p, 0)->base)
        return -1;
    uint32_t lo = 0, hi = p->cq_len; /* first index with last >= offset */
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (cq_at(p, mid)->last < offset)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo;
}

int64_t sk_part_cache_start(const sk_part *p)
{
    return p->cq_len ? cq_at(p, 0)->base : -1;
}

const sk_cbatch *sk_part_cached_at(const sk_part *p, int64_t offset)
{
    int64_t i = cq_find(p, offset);
    if (i < 0 || i >= p->cq_len)
        return NULL;
    const sk_cbatch *b = cq_at(p, (uint32_t)i);
    return b->base <= offset ? b : NULL;
}

int sk_part_cached(const sk_part *p, int64_t from, int64_t hw, int64_t max_bytes, kc_bytes *segs,
                   sk_ref **refs, int maxsegs, int64_t *bytes, bool *miss)
{
    *bytes = 0;
    *miss = false;
    if (from >= hw)
        return 0;
    int64_t i = cq_find(p, from);
    if (i < 0) {
        *miss = true;
        return 0;
    }
    int n = 0;
    for (; i < p->cq_len && n < maxsegs; i++) {
        const sk_cbatch *b = cq_at(p, (uint32_t)i);
        if (b->base >= hw)
            break;
        if (n > 0 && *bytes + b->len > max_bytes)
            break;
        segs[n].p = b->data;
        segs[n].len = (int32_t)b->len;
        if (refs)
            refs[n] = (sk_ref *)&b->ref;
        *bytes += b->len;
        n++;
        if (*bytes >= max_bytes)
            break;
    }
    return n;
}

int sk_part_cached_batches(const sk_part *p, int64_t from, int64_t hw, int64_t max_bytes,
                           const sk_cbatch **out, int max, bool *miss)
{
    *miss = false;
    if (from >= hw)
        return 0;
    int64_t i = cq_find(p, from);
    if (i < 0) {
        *miss = true;
        return 0;
    }
    int n = 0;
    int64_t bytes = 0;
    for (; i < p->cq_len && n < max; i++) {
        const sk_cbatch *b = cq_at(p, (uint32_t)i);
        if (b->base >= hw || (n > 0 && bytes + b->len > max_bytes))
            break;
        out[n++] = b;
        bytes += b->len;
        if (bytes >= max_bytes)
            break;
    }
    return n;
}

/* ---- parked fetches ---- */

int sk_part_add_waiter(sk_part *p, sk_waiter *w)
{
    if (p->nwaiters == p->capwaiters) {
        int ncap = p->capwaiters ? p->capwaiters * 2 : 4;
        sk_waiter **nw = realloc(p->waiters, (size_t)ncap * sizeof *nw);
        if (!nw)
            return SK_ERR_NOMEM;
        p->waiters = nw;
        p->capwaiters = ncap;
    }
    p->waiters[p->nwaiters++] = w;
    return 0;
}

void sk_part_del_waiter(sk_part *p, sk_waiter *w)
{
    for (int i = 0; i < p->nwaiters; i++)
        if (p->waiters[i] == w) {
            p->waiters[i] = p->waiters[--p->nwaiters];
            return;
        }
}

void sk_parts_view_applied(sk_node *n, wal_lsn before)
{
    /* Adoptions are rare: scan only while one may still be unapplied. */
    if (n->adopt_hi <= before)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *t = v;
        for (int32_t i = 0; i < t->nparts; i++) {
            sk_part *p = t->parts[i];
            if (p->adopt_end > before && p->adopt_end <= n->store_applied)
                sk_part_wake(p);
        }
    }
}

void sk_part_wake(sk_part *p)
{
    /* A woken waiter unregisters itself from its partitions, which changes
     * the array under us: take the list first. */
    int n = p->nwaiters;
    if (n == 0)
        return;
    sk_waiter *local[16];
    sk_waiter **list = n <= 16 ? local : malloc((size_t)n * sizeof *list);
    if (!list)
        return;
    memcpy(list, p->waiters, (size_t)n * sizeof *list);
    for (int i = 0; i < n; i++)
        list[i]->wake(list[i]);
    if (list != local)
        free(list);
}
