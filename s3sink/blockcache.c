/*
 * blockcache: LRU of verified data blocks with merged, shared fetches.
 *
 * A block is in the map from the moment it is requested: "loading" until
 * its fetch returns, then "ready". refs counts the reads that pin it (a
 * waiting read pins its blocks from the start). Ready blocks with no pins
 * sit on the LRU list, most recent first; only they are evicted.
 * A block's sk_ref counts the cache's own link (its place in the map) and
 * every hold on its bytes: leaving the cache drops the link, and the last
 * drop frees the block, so a held block outlives its eviction.
 *
 * Two lists hold the ready, unpinned blocks. "once": blocks that one reader
 * has read (its re-reads within opts.reread_us included: a consumer's next
 * fetch starts in the block where the last one ended), in the order of
 * their last release; it is kept within opts.once_bytes by dropping its
 * oldest. "lru": blocks read again later (a second consumer, a retry), and
 * blocks read ahead that nobody has read yet. Eviction takes the once
 * list's oldest first. So a catch-up cycles through a ring of once_bytes
 * and the pool, instead of faulting in the whole capacity and pushing out
 * what other readers share.
 *
 * Buffers: the last drop gives the block's buffer to the pool, which keeps
 * a few for the next fetches (fresh buffers cost a page fault per 4 KiB,
 * ~11 % of a catch-up's CPU). The pool has its own count, one per block
 * and one for the cache, because a held block may outlive the cache.
 */
#include "blockcache.h"

#include <assert.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"

struct bc_read;

struct waiter {
    struct bc_read *rd;
    size_t idx; /* in rd->out */
    struct waiter *next;
};

/* A free buffer of the pool, its header written in its own first bytes. */
struct pfree {
    struct pfree *next;
    size_t cap;
};

#define POOL_MAX_BUFS 1024
#define POOL_PAGE 4096

typedef struct bc_pool {
    sk_ref ref; /* the cache, and one per block */
    struct pfree *head;
    size_t bytes, n;
    size_t beyond; /* what the pool may keep past the cache's unused room */
    const blockcache *c; /* its room; NULL once closed */
    uint64_t reused;
    bool closed; /* the cache is gone: buffers given back are freed */
} bc_pool;

struct blockcache_block {
    sk_ref ref; /* first: the map's link, and one per hold (blockcache_hold) */
    bc_pool *pool;
    uint8_t *buf; /* data's buffer, OBJSTORE_PAD-aligned, from the pool */
    size_t cap;   /* of buf */
    uint8_t *mkey; /* object key, NUL, position (8 bytes) */
    size_t mklen;
    objfmt_entry e;
    uint8_t *data; /* in buf, at the offset the block has in its object's
                      pages (objstore_getv_padded) */
    int refs;
    bool loading;
    struct waiter *waiters;
    int64_t first_read_us; /* when a read first pinned it; 0: not yet */
    bool reread;           /* read again opts.reread_us or more after that */
    struct bc_list *list;  /* where it waits unpinned; NULL: pinned, loading */
    struct blockcache_block *prev, *next;
};

/* Ready, unpinned blocks, most recently released first. */
struct bc_list {
    blockcache_block *head, *tail;
    size_t bytes;
};

struct bc_read {
    blockcache *c;
    blockcache_block **out;
    size_t n;
    int missing;
    int err;
    int64_t start_us; /* when it began, to count how long it waited */
    blockcache_cb cb;
    void *arg;
};

/* One ranged GET of adjacent blocks, straight into their buffers. It holds
 * every block (sk_ref) until it ends: a cache destroyed meanwhile lets go of
 * the blocks, not of the memory the GET writes into. */
struct bc_fetch {
    blockcache *c; /* NULL once the cache is gone */
    size_t len;
    uint64_t off;
    int64_t start_us;
    blockcache_block **blocks;
    struct iovec *iov; /* each block's data */
    uint32_t *crcs;    /* each block's CRC-32C, as the fetch computed it */
    size_t nblocks, nheld;
    struct bc_fetch *prev, *next;
};

struct blockcache {
    objstore *store;
    blockcache_opts o;
    sk_map *map;
    struct bc_list lru, once;
    size_t used, loading_bytes;
    struct bc_fetch *fetches;
    size_t nfetches;
    bc_pool *pool;
    blockcache_stats st;
};

static void list_remove(blockcache_block *b)
{
    struct bc_list *l = b->list;
    if (!l)
        return;
    if (b->prev)
        b->prev->next = b->next;
    else
        l->head = b->next;
    if (b->next)
        b->next->prev = b->prev;
    else
        l->tail = b->prev;
    l->bytes -= b->e.size;
    b->prev = b->next = NULL;
    b->list = NULL;
}

static void list_push(struct bc_list *l, blockcache_block *b)
{
    b->prev = NULL;
    b->next = l->head;
    if (l->head)
        l->head->prev = b;
    else
        l->tail = b;
    l->head = b;
    l->bytes += b->e.size;
    b->list = l;
}

/* The block to evict first: the oldest read once, else the least recently
 * used; NULL when every block is pinned or loading. */
static blockcache_block *victim(const blockcache *c)
{
    return c->once.tail ? c->once.tail : c->lru.tail;
}

static void pool_drain(bc_pool *p)
{
    while (p->head) {
        struct pfree *f = p->head;
        p->head = f->next;
        free(f);
    }
    p->bytes = p->n = 0;
}

static void pool_ref_free(sk_ref *ref)
{
    bc_pool *p = (bc_pool *)ref;
    pool_drain(p);
    free(p);
}

/* A buffer of at least size bytes: a free one of about that size (blocks
 * differ by a batch or two), or a new one. */
static uint8_t *pool_get(bc_pool *p, size_t size, size_t *cap)
{
    for (struct pfree **pp = &p->head; *pp; pp = &(*pp)->next) {
        struct pfree *f = *pp;
        if (f->cap >= size && f->cap - size <= size / 8 + POOL_PAGE) {
            *pp = f->next;
            p->bytes -= f->cap;
            p->n--;
            p->reused++;
            *cap = f->cap;
            return (uint8_t *)f;
        }
    }
    /* Whole pages, in steps of an eighth of size's power of two: blocks of
     * about the same size get buffers of the same few sizes, which any of
     * them can take again (the fit above allows an eighth more). */
    size_t c = size < sizeof(struct pfree) ? sizeof(struct pfree) : size;
    size_t step = POOL_PAGE;
    while (step * 16 <= c)
        step *= 2;
    c = (c + step - 1) / step * step;
    uint8_t *d = aligned_alloc(OBJSTORE_PAD, c);
    *cap = d ? c : 0;
    return d;
}

/* The pool may fill what the cache's capacity leaves unused (by cached and
 * loading blocks), plus two of the largest GETs: what one read-ahead refill
 * takes at once. So a catch-up whose ring of read-once blocks is a quarter
 * of the capacity keeps the buffers of the blocks it has done with, instead
 * of giving them back to malloc and faulting in fresh pages for the next
 * GETs; and the cache, pool included, stays within its capacity plus two
 * GETs. */
static size_t pool_room(const bc_pool *p)
{
    const blockcache *c = p->c;
    size_t held = c->used + c->loading_bytes;
    return p->beyond + (held < c->o.capacity ? c->o.capacity - held : 0);
}

/* Only once nothing points into data any more (the block's last drop). */
static void pool_put(bc_pool *p, uint8_t *data, size_t cap)
{
    if (p->closed || p->n >= POOL_MAX_BUFS || p->bytes + cap > pool_room(p)) {
        free(data);
        return;
    }
    struct pfree *f = (struct pfree *)(void *)data;
    f->cap = cap;
    f->next = p->head;
    p->head = f;
    p->bytes += cap;
    p->n++;
}

/* The last drop of a block's count: no cache, no hold points at it. */
static void block_ref_free(sk_ref *ref)
{
    blockcache_block *b = (blockcache_block *)ref;
    if (b->buf)
        pool_put(b->pool, b->buf, b->cap);
    sk_ref_put(&b->pool->ref);
    free(b->mkey);
    free(b);
}

static void block_free(blockcache_block *b)
{
    sk_ref_put(&b->ref);
}

/* Removes a block from the map (and the LRU) and lets go of it: freed now,
 * or by the last hold on its bytes. */
static void block_drop(blockcache *c, blockcache_block *b)
{
    list_remove(b);
    sk_map_del(c->map, b->mkey, b->mklen);
    if (!b->loading)
        c->used -= b->e.size;
    block_free(b);
}

static void evict(blockcache *c)
{
    while (c->used > c->o.capacity && victim(c)) {
        c->st.evictions++;
        block_drop(c, victim(c));
    }
}

/* A ready block's last pin went (or it arrived unread): onto its list. */
static void unpinned(blockcache *c, blockcache_block *b)
{
    assert(b->refs == 0 && !b->loading && !b->list);
    if (b->first_read_us == 0 || b->reread) {
        list_push(&c->lru, b);
        return;
    }
    list_push(&c->once, b);
    while (c->once.bytes > c->o.once_bytes && c->once.tail != b) {
        c->st.evictions++;
        c->st.once_evictions++;
        block_drop(c, c->once.tail);
    }
}

/* Room for `need` more bytes within the capacity, evicting unpinned blocks
 * (least recently used first) when needed; false when pins and fetches in
 * flight leave none. Read-ahead asks first: without eviction a cache full of
 * blocks read long ago would refuse every read-ahead for good. */
static bool make_room(blockcache *c, size_t need)
{
    while (c->used + c->loading_bytes + need > c->o.capacity && victim(c)) {
        c->st.evictions++;
        block_drop(c, victim(c));
    }
    return c->used + c->loading_bytes + need <= c->o.capacity;
}

static void store_fetch(void *ctx, const char *key, uint64_t off, const struct iovec *iov,
                        int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg)
{
    objstore_getv_padded(ctx, key, off, iov, iovcnt, crcs, cb, arg);
}

blockcache *blockcache_new(objstore *store, const blockcache_opts *opts)
{
    blockcache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    if (opts)
        c->o = *opts;
    if (c->o.capacity == 0)
        c->o.capacity = 256u << 20;
    if (c->o.max_merge == 0)
        c->o.max_merge = 8u << 20;
    if (c->o.once_bytes == 0) {
        c->o.once_bytes = c->o.capacity / 4;
        if (c->o.once_bytes < 2 * c->o.max_merge)
            c->o.once_bytes = 2 * c->o.max_merge;
    }
    if (c->o.once_bytes > c->o.capacity)
        c->o.once_bytes = c->o.capacity;
    if (c->o.reread_us == 0)
        c->o.reread_us = 1000000;
    if (!c->o.now_us)
        c->o.now_us = sk_mono_us;
    if (!c->o.fetch) {
        if (!store) {
            free(c);
            return NULL;
        }
        c->o.fetch = store_fetch;
        c->o.fetch_ctx = store;
    }
    c->store = store;
    c->map = sk_map_new();
    c->pool = calloc(1, sizeof *c->pool);
    if (!c->map || !c->pool) {
        sk_map_destroy(c->map);
        free(c->pool);
        free(c);
        return NULL;
    }
    sk_ref_init(&c->pool->ref, pool_ref_free);
    c->pool->beyond = 2 * c->o.max_merge < c->o.capacity ? 2 * c->o.max_merge : c->o.capacity;
    c->pool->c = c;
    return c;
}

static void read_finish(struct bc_read *rd)
{
    rd->c->st.waits++;
    rd->c->st.wait_us += (uint64_t)(rd->c->o.now_us() - rd->start_us);
    if (rd->err != 0) {
        for (size_t i = 0; i < rd->n; i++) {
            if (rd->out[i]) {
                blockcache_release(rd->c, rd->out[i]);
                rd->out[i] = NULL;
            }
        }
    }
    rd->cb(rd->arg, rd->err);
    free(rd);
}

/* A block's fetch ended: wake its waiters. On error the block leaves. */
static void block_resolved(blockcache *c, blockcache_block *b, int err)
{
    struct waiter *w = b->waiters;
    b->waiters = NULL;
    b->loading = false;
    c->loading_bytes -= b->e.size;
    if (err != 0) {
        c->st.errors++;
        /* The waiters' pins go with the block. */
        for (struct waiter *x = w; x; x = x->next)
            x->rd->out[x->idx] = NULL;
        list_remove(b);
        sk_map_del(c->map, b->mkey, b->mklen);
        block_free(b);
    } else if (b->refs == 0) {
        unpinned(c, b);
    }
    while (w) {
        struct waiter *n = w->next;
        struct bc_read *rd = w->rd;
        if (err != 0 && rd->err == 0)
            rd->err = err;
        free(w);
        if (--rd->missing == 0)
            read_finish(rd);
        w = n;
    }
}

static void fetch_unlink(blockcache *c, struct bc_fetch *f)
{
    c->nfetches--;
    if (f->prev)
        f->prev->next = f->next;
    else
        c->fetches = f->next;
    if (f->next)
        f->next->prev = f->prev;
}

static void fetch_free(struct bc_fetch *f)
{
    for (size_t i = 0; i < f->nheld; i++)
        sk_ref_put(&f->blocks[i]->ref);
    free(f->blocks);
    free(f->iov);
    free(f->crcs);
    free(f);
}

static void fetch_done(void *arg, int err, uint8_t *data, size_t len, uint64_t obj_size)
{
    (void)obj_size;
    (void)data;
    struct bc_fetch *f = arg;
    blockcache *c = f->c;
    if (!c) {
        fetch_free(f);
        return;
    }
    fetch_unlink(c, f);
    c->st.get_us += (uint64_t)(c->o.now_us() - f->start_us);
    if (err == 0 && len != f->len) {
        SK_WARN("blockcache", "short read: %zu of %zu bytes at %llu", len, f->len,
                (unsigned long long)f->off);
        err = SK_ERR_CORRUPT;
    }
    for (size_t i = 0; i < f->nblocks; i++) {
        blockcache_block *b = f->blocks[i];
        int berr = err;
        if (berr == 0 &&
            (berr = objfmt_block_verify_crc(&b->e, b->data, b->e.size, f->crcs[i])) != 0)
            SK_WARN("blockcache", "block at %llu of %s fails its check",
                    (unsigned long long)b->e.position, (const char *)b->mkey);
        if (berr == 0)
            c->used += b->e.size;
        block_resolved(c, b, berr);
    }
    fetch_free(f);
    evict(c);
}

static int make_mkey(const char *key, uint64_t pos, uint8_t **out, size_t *len)
{
    size_t kl = strlen(key);
    uint8_t *m = malloc(kl + 1 + 8);
    if (!m)
        return SK_ERR_NOMEM;
    memcpy(m, key, kl + 1);
    memcpy(m + kl + 1, &pos, 8);
    *out = m;
    *len = kl + 1 + 8;
    return 0;
}

static blockcache_block *block_new(blockcache *c, const char *key, const objfmt_entry *e)
{
    blockcache_block *b = calloc(1, sizeof *b);
    if (!b || make_mkey(key, e->position, &b->mkey, &b->mklen) != 0) {
        free(b);
        return NULL;
    }
    sk_ref_init(&b->ref, block_ref_free);
    b->pool = c->pool;
    sk_ref_hold(&c->pool->ref);
    b->e = *e;
    b->loading = true;
    if (sk_map_put(c->map, b->mkey, b->mklen, b) != 0) {
        block_free(b);
        return NULL;
    }
    c->loading_bytes += e->size;
    return b;
}

/* A block's buffer: its bytes padded to whole OBJSTORE_PAD pages of its
 * object, wherever it starts in them. */
static size_t padded_size(size_t size)
{
    return (size + OBJSTORE_PAD - 1) / OBJSTORE_PAD * OBJSTORE_PAD + OBJSTORE_PAD;
}

/* A fetch of blocks[0..n), each with its buffer and held; NULL without
 * memory (then nothing changed). */
static struct bc_fetch *fetch_new(blockcache_block **blocks, size_t n)
{
    struct bc_fetch *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    if (!(f->blocks = malloc(n * sizeof *f->blocks)) || !(f->iov = malloc(n * sizeof *f->iov)) ||
        !(f->crcs = calloc(n, sizeof *f->crcs))) {
        fetch_free(f); /* holds nothing yet */
        return NULL;
    }
    for (size_t k = 0; k < n; k++) {
        blockcache_block *b = blocks[k];
        if (!b->buf && !(b->buf = pool_get(b->pool, padded_size(b->e.size), &b->cap))) {
            f->nblocks = f->nheld = 0;
            fetch_free(f); /* the buffers stay with their blocks */
            return NULL;
        }
        b->data = b->buf + b->e.position % OBJSTORE_PAD;
        f->blocks[k] = b;
        f->iov[k] = (struct iovec){b->data, b->e.size};
    }
    for (size_t k = 0; k < n; k++)
        sk_ref_hold(&f->blocks[k]->ref);
    f->nblocks = f->nheld = n;
    return f;
}

/* Issues GETs for blocks[0..n) (in position order), merging neighbours. */
static void fetch_blocks(blockcache *c, const char *key, blockcache_block **blocks, size_t n)
{
    size_t i = 0;
    while (i < n) {
        size_t j = i + 1;
        uint64_t len = blocks[i]->e.size;
        while (j < n && blocks[j - 1]->e.position + blocks[j - 1]->e.size == blocks[j]->e.position &&
               len + blocks[j]->e.size <= c->o.max_merge) {
            len += blocks[j]->e.size;
            j++;
        }
        struct bc_fetch *f = fetch_new(blocks + i, j - i);
        if (!f) {
            for (size_t k = i; k < j; k++)
                block_resolved(c, blocks[k], SK_ERR_NOMEM);
            i = j;
            continue;
        }
        f->c = c;
        f->len = (size_t)len;
        f->off = blocks[i]->e.position;
        f->start_us = c->o.now_us();
        f->next = c->fetches;
        if (c->fetches)
            c->fetches->prev = f;
        c->fetches = f;
        c->nfetches++;
        c->st.gets++;
        c->st.get_bytes += len;
        c->o.fetch(c->o.fetch_ctx, key, f->off, f->iov, (int)f->nblocks, f->crcs, fetch_done, f);
        i = j;
    }
}

/* Map key of (key, pos) in buf (at least BC_MKEY_MAX bytes). */
#define BC_MKEY_MAX (1024 + 1 + 8)
static size_t mkey_into(uint8_t *buf, const char *key, uint64_t pos)
{
    size_t kl = strlen(key);
    memcpy(buf, key, kl + 1);
    memcpy(buf + kl + 1, &pos, 8);
    return kl + 1 + 8;
}

static blockcache_block *lookup(blockcache *c, const char *key, uint64_t pos)
{
    uint8_t mk[BC_MKEY_MAX];
    size_t n = mkey_into(mk, key, pos);
    return sk_map_get(c->map, mk, n);
}

/* Takes back what a failed blockcache_read did to out[0..n): nothing was
 * fetched yet, so no callback is owed. */
static void read_undo(blockcache *c, struct bc_read *rd, blockcache_block **out, size_t n)
{
    for (size_t k = 0; k < n; k++) {
        blockcache_block *b = out[k];
        struct waiter **pp = &b->waiters;
        while (*pp) {
            if ((*pp)->rd == rd) {
                struct waiter *w = *pp;
                *pp = w->next;
                free(w);
            } else {
                pp = &(*pp)->next;
            }
        }
        b->refs--;
        if (b->loading && b->refs == 0 && !b->waiters) {
            c->loading_bytes -= b->e.size;
            sk_map_del(c->map, b->mkey, b->mklen);
            block_free(b);
        } else if (!b->loading && b->refs == 0) {
            unpinned(c, b);
        }
        out[k] = NULL;
    }
}

int blockcache_read(blockcache *c, const char *key, const objfmt_entry *entries, size_t nentries,
                    size_t first, size_t nwant, size_t readahead, blockcache_block **out,
                    blockcache_cb cb, void *arg)
{
    if (!key || strlen(key) > 1024 || !entries || nwant == 0 || first >= nentries ||
        nwant > nentries - first || !out || !cb)
        return SK_ERR_INVAL;
    if (readahead > nentries)
        readahead = nentries;
    blockcache_block **wanted_blocks = malloc((nwant + readahead) * sizeof *wanted_blocks);
    struct bc_read *rd = calloc(1, sizeof *rd);
    if (!wanted_blocks || !rd) {
        free(wanted_blocks);
        free(rd);
        return SK_ERR_NOMEM;
    }
    rd->c = c;
    rd->out = out;
    rd->n = nwant;
    rd->cb = cb;
    rd->arg = arg;
    int64_t now = c->o.now_us();
    rd->start_us = now;
    size_t nwanted_blocks = 0;
    uint64_t hits = 0, misses = 0;
    for (size_t i = 0; i < nwant; i++) {
        const objfmt_entry *e = &entries[first + i];
        blockcache_block *b = lookup(c, key, e->position);
        bool fresh = false;
        if (!b) {
            b = block_new(c, key, e);
            fresh = true;
        }
        struct waiter *w = b && b->loading ? calloc(1, sizeof *w) : NULL;
        if (!b || (b->loading && !w)) {
            if (b && fresh) {
                c->loading_bytes -= b->e.size;
                sk_map_del(c->map, b->mkey, b->mklen);
                block_free(b);
            }
            read_undo(c, rd, out, i);
            free(wanted_blocks);
            free(rd);
            return SK_ERR_NOMEM;
        }
        list_remove(b);
        b->refs++;
        out[i] = b;
        if (b->first_read_us == 0)
            b->first_read_us = now;
        else if (now - b->first_read_us >= c->o.reread_us)
            b->reread = true;
        if (w) {
            w->rd = rd;
            w->idx = i;
            w->next = b->waiters;
            b->waiters = w;
            rd->missing++;
            misses++;
            if (fresh)
                wanted_blocks[nwanted_blocks++] = b;
        } else {
            hits++;
        }
    }
    c->st.hits += hits;
    c->st.misses += misses;
    /* Read-ahead: following blocks of the same stream, while they fit. The
     * window is refilled only once half of it is read, and then with a whole
     * window: a reader catching up block by block gets GETs of many blocks
     * (up to max_merge), not a GET of one block per read. */
    uint64_t stream = entries[first].stream_id;
    size_t ra = first + nwant, ahead = 0;
    for (; ra < nentries && ahead < readahead; ra++, ahead++) {
        const objfmt_entry *e = &entries[ra];
        const objfmt_entry *p = &entries[ra - 1];
        if (e->stream_id != stream || p->position + p->size != e->position ||
            !lookup(c, key, e->position))
            break;
    }
    size_t until = ahead * 2 < readahead ? ra + readahead : ra;
    for (; ra < nentries && ra < until; ra++) {
        const objfmt_entry *e = &entries[ra];
        const objfmt_entry *p = &entries[ra - 1];
        if (e->stream_id != stream || p->position + p->size != e->position)
            break;
        if (lookup(c, key, e->position))
            continue;
        if (!make_room(c, e->size))
            break;
        blockcache_block *b = block_new(c, key, e);
        if (!b)
            break;
        c->st.readahead++;
        wanted_blocks[nwanted_blocks++] = b;
    }
    /* The guard keeps a fetch that fails at once (no memory) from running
     * the callback inside this call: such a read fails by return value. */
    rd->missing++;
    fetch_blocks(c, key, wanted_blocks, nwanted_blocks);
    free(wanted_blocks);
    if (--rd->missing == 0) {
        int err = rd->err;
        if (err != 0) {
            for (size_t i = 0; i < nwant; i++) {
                if (out[i]) {
                    blockcache_release(c, out[i]);
                    out[i] = NULL;
                }
            }
        }
        free(rd);
        return err != 0 ? err : BLOCKCACHE_HIT;
    }
    return 0;
}

const uint8_t *blockcache_data(const blockcache_block *b, size_t *len)
{
    if (len)
        *len = b->e.size;
    return b->data;
}

const objfmt_entry *blockcache_entry(const blockcache_block *b)
{
    return &b->e;
}

void blockcache_release(blockcache *c, blockcache_block *b)
{
    if (!b || b->refs <= 0)
        return;
    if (--b->refs == 0 && !b->loading) {
        unpinned(c, b);
        evict(c);
    }
}

sk_ref *blockcache_hold(blockcache_block *b)
{
    sk_ref_hold(&b->ref);
    return &b->ref;
}

void blockcache_forget(blockcache *c, const char *key)
{
    size_t kl = strlen(key);
    size_t it = 0;
    const void *k;
    size_t klen;
    void *v;
    while (sk_map_next(c->map, &it, &k, &klen, &v)) {
        blockcache_block *b = v;
        if (klen == kl + 9 && memcmp(k, key, kl + 1) == 0 && b->refs == 0 && !b->loading)
            block_drop(c, b);
    }
}

void blockcache_stats_get(const blockcache *c, blockcache_stats *out)
{
    *out = c->st;
    out->used = c->used;
    out->capacity = c->o.capacity;
    out->blocks = sk_map_count(c->map);
    out->gets_in_flight = c->nfetches;
    out->buffers_reused = c->pool->reused;
    out->pool_bytes = c->pool->bytes;
    out->once_bytes = c->once.bytes;
    out->get_bytes_in_flight = c->loading_bytes;
}

void blockcache_destroy(blockcache *c)
{
    if (!c)
        return;
    /* Fetches in flight: detach them (their completion only frees), and
     * fail the reads that wait on them. */
    while (c->fetches) {
        struct bc_fetch *f = c->fetches;
        fetch_unlink(c, f);
        f->c = NULL;
        for (size_t i = 0; i < f->nblocks; i++)
            block_resolved(c, f->blocks[i], SK_ERR_CLOSED);
        f->nblocks = 0;
    }
    size_t it = 0;
    const void *k;
    size_t klen;
    void *v;
    size_t held = 0;
    while (sk_map_next(c->map, &it, &k, &klen, &v)) {
        blockcache_block *b = v;
        if (b->refs > 0)
            SK_WARN("blockcache", "destroyed with a block still pinned");
        held += b->ref.n > 1;
        block_drop(c, b);
    }
    /* Safe (the last hold frees such a block), but the broker frees the
     * responses that point into blocks before the cache (node.c). */
    if (held)
        SK_WARN("blockcache", "destroyed while %zu blocks are still held", held);
    c->pool->closed = true;
    c->pool->c = NULL;
    pool_drain(c->pool);
    sk_ref_put(&c->pool->ref);
    sk_map_destroy(c->map);
    free(c);
}
