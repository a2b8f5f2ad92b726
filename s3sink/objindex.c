/*
 * objindex: asynchronous tail reads of objects into objfmt readers, cached.
 *
 * An entry is "loading" (waiters queued) from the first request until its
 * reader is built, then "ready". refs counts handles given out; ready
 * entries without refs sit on the LRU list.
 */
#include "objindex.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"

struct ix_waiter {
    objindex_cb cb;
    void *arg;
    struct ix_waiter *next;
};

struct objindex_ref {
    objindex *x;       /* NULL once the objindex is gone (load in flight) */
    char *key;
    uint64_t size;
    objfmt_reader *r;
    bool loading;
    int refs;
    struct ix_waiter *waiters;
    uint8_t *buf;      /* tail buffer of the load in flight */
    size_t buf_len;
    struct objindex_ref *prev, *next; /* LRU */
    bool in_lru;
    struct objindex_ref *lprev, *lnext; /* loads in flight */
};

struct objindex {
    objstore *store;
    objindex_opts o;
    sk_map *map;
    objindex_ref *lru_head, *lru_tail;
    objindex_ref *loads;
    objindex_stats st;
};

static void lru_remove(objindex *x, objindex_ref *e)
{
    if (!e->in_lru)
        return;
    if (e->prev)
        e->prev->next = e->next;
    else
        x->lru_head = e->next;
    if (e->next)
        e->next->prev = e->prev;
    else
        x->lru_tail = e->prev;
    e->prev = e->next = NULL;
    e->in_lru = false;
}

static void lru_push(objindex *x, objindex_ref *e)
{
    e->prev = NULL;
    e->next = x->lru_head;
    if (x->lru_head)
        x->lru_head->prev = e;
    else
        x->lru_tail = e;
    x->lru_head = e;
    e->in_lru = true;
}

static void entry_free(objindex_ref *e)
{
    objfmt_reader_destroy(e->r);
    free(e->buf);
    free(e->key);
    free(e);
}

static void entry_drop(objindex *x, objindex_ref *e)
{
    lru_remove(x, e);
    sk_map_del(x->map, e->key, strlen(e->key));
    entry_free(e);
}

static void evict(objindex *x)
{
    while (sk_map_count(x->map) > x->o.max_objects && x->lru_tail) {
        x->st.evictions++;
        entry_drop(x, x->lru_tail);
    }
}

objindex *objindex_new(objstore *store, const objindex_opts *opts)
{
    if (!store)
        return NULL;
    objindex *x = calloc(1, sizeof *x);
    if (!x)
        return NULL;
    if (opts)
        x->o = *opts;
    if (x->o.max_objects == 0)
        x->o.max_objects = 4096;
    x->store = store;
    x->map = sk_map_new();
    if (!x->map) {
        free(x);
        return NULL;
    }
    return x;
}

static void loads_unlink(objindex *x, objindex_ref *e)
{
    if (e->lprev)
        e->lprev->lnext = e->lnext;
    else
        x->loads = e->lnext;
    if (e->lnext)
        e->lnext->lprev = e->lprev;
    e->lprev = e->lnext = NULL;
}

/* The load ended: hand the entry to its waiters, or fail them. */
static void load_done(objindex *x, objindex_ref *e, int err)
{
    loads_unlink(x, e);
    free(e->buf);
    e->buf = NULL;
    e->loading = false;
    struct ix_waiter *w = e->waiters;
    e->waiters = NULL;
    if (err != 0) {
        x->st.load_errors++;
        sk_map_del(x->map, e->key, strlen(e->key));
        while (w) {
            struct ix_waiter *n = w->next;
            w->cb(w->arg, err, NULL);
            free(w);
            w = n;
        }
        entry_free(e);
        return;
    }
    x->st.loads++;
    int n = 0;
    for (struct ix_waiter *k = w; k; k = k->next)
        n++;
    e->refs += n;
    while (w) {
        struct ix_waiter *nx = w->next;
        w->cb(w->arg, 0, e);
        free(w);
        w = nx;
    }
}

static void tail_cb(void *arg, int err, uint8_t *data, size_t len, uint64_t obj_size);

static void read_tail(objindex_ref *e, uint64_t off, size_t len)
{
    e->buf = malloc(len ? len : 1);
    e->buf_len = len;
    if (!e->buf) {
        load_done(e->x, e, SK_ERR_NOMEM);
        return;
    }
    e->x->st.gets++;
    objstore_get(e->x->store, e->key, off, len, e->buf, tail_cb, e);
}

static void tail_cb(void *arg, int err, uint8_t *data, size_t len, uint64_t obj_size)
{
    (void)obj_size;
    objindex_ref *e = arg;
    objindex *x = e->x;
    if (!x) {
        entry_free(e);
        return;
    }
    if (err == 0 && (data != e->buf || len != e->buf_len))
        err = SK_ERR_CORRUPT; /* shorter than the size we were told */
    if (err == 0) {
        uint64_t need_off;
        size_t need_len;
        err = objfmt_reader_from_tail(e->buf, e->buf_len, e->size, &e->r, &need_off, &need_len);
        if (err == SK_ERR_AGAIN) {
            free(e->buf);
            e->buf = NULL;
            read_tail(e, need_off, need_len);
            return;
        }
        if (err != 0)
            SK_WARN("objindex", "%s: footer or index fails its checks (%s)", e->key,
                    sk_err_name(err));
    }
    load_done(x, e, err);
}

static void start_tail(objindex_ref *e)
{
    size_t len = e->size < OBJFMT_TAIL_READ ? (size_t)e->size : OBJFMT_TAIL_READ;
    if (e->size < OBJFMT_FOOTER_SIZE) {
        SK_WARN("objindex", "%s: %llu bytes cannot be an object", e->key,
                (unsigned long long)e->size);
        load_done(e->x, e, SK_ERR_CORRUPT);
        return;
    }
    read_tail(e, e->size - len, len);
}

static void head_cb(void *arg, int err, uint64_t size, int64_t mtime_ms)
{
    (void)mtime_ms;
    objindex_ref *e = arg;
    if (!e->x) {
        entry_free(e);
        return;
    }
    if (err != 0) {
        load_done(e->x, e, err);
        return;
    }
    e->size = size;
    start_tail(e);
}

int objindex_get(objindex *x, const char *key, uint64_t obj_size, objindex_ref **out,
                 objindex_cb cb, void *arg)
{
    if (!key || !*key || !out || !cb)
        return SK_ERR_INVAL;
    size_t kl = strlen(key);
    objindex_ref *e = sk_map_get(x->map, key, kl);
    if (e && !e->loading) {
        lru_remove(x, e);
        e->refs++;
        x->st.hits++;
        *out = e;
        return OBJINDEX_HIT;
    }
    struct ix_waiter *w = calloc(1, sizeof *w);
    if (!w)
        return SK_ERR_NOMEM;
    w->cb = cb;
    w->arg = arg;
    if (e) {
        w->next = e->waiters;
        e->waiters = w;
        return 0;
    }
    e = calloc(1, sizeof *e);
    if (!e || !(e->key = strdup(key)) || sk_map_put(x->map, e->key, kl, e) != 0) {
        if (e)
            free(e->key);
        free(e);
        free(w);
        return SK_ERR_NOMEM;
    }
    e->x = x;
    e->size = obj_size;
    e->loading = true;
    e->waiters = w;
    e->lnext = x->loads;
    if (x->loads)
        x->loads->lprev = e;
    x->loads = e;
    if (obj_size == 0) {
        x->st.heads++;
        objstore_head(x->store, key, head_cb, e);
    } else {
        /* objstore completes later, so the waiters never run in this call;
         * an allocation failure here is reported the same way */
        size_t len = obj_size < OBJFMT_TAIL_READ ? (size_t)obj_size : OBJFMT_TAIL_READ;
        if (obj_size < OBJFMT_FOOTER_SIZE) {
            loads_unlink(x, e);
            sk_map_del(x->map, e->key, kl);
            entry_free(e);
            free(w);
            return SK_ERR_CORRUPT;
        }
        e->buf = malloc(len);
        e->buf_len = len;
        if (!e->buf) {
            loads_unlink(x, e);
            sk_map_del(x->map, e->key, kl);
            entry_free(e);
            free(w);
            return SK_ERR_NOMEM;
        }
        x->st.gets++;
        objstore_get(x->store, key, obj_size - len, len, e->buf, tail_cb, e);
    }
    return 0;
}

const objfmt_reader *objindex_reader(const objindex_ref *r)
{
    return r->r;
}

uint64_t objindex_size(const objindex_ref *r)
{
    return r->size;
}

void objindex_release(objindex *x, objindex_ref *r)
{
    if (!r || r->refs <= 0)
        return;
    if (--r->refs == 0) {
        lru_push(x, r);
        evict(x);
    }
}

void objindex_forget(objindex *x, const char *key)
{
    objindex_ref *e = sk_map_get(x->map, key, strlen(key));
    if (e && !e->loading && e->refs == 0)
        entry_drop(x, e);
}

void objindex_stats_get(const objindex *x, objindex_stats *out)
{
    *out = x->st;
    out->cached = sk_map_count(x->map);
}

void objindex_destroy(objindex *x)
{
    if (!x)
        return;
    /* Loads in flight: their store callbacks come later and only free. */
    while (x->loads) {
        objindex_ref *e = x->loads;
        loads_unlink(x, e);
        sk_map_del(x->map, e->key, strlen(e->key));
        struct ix_waiter *w = e->waiters;
        e->waiters = NULL;
        e->x = NULL;
        while (w) {
            struct ix_waiter *n = w->next;
            w->cb(w->arg, SK_ERR_CLOSED, NULL);
            free(w);
            w = n;
        }
    }
    size_t it = 0;
    const void *k;
    size_t kl;
    void *v;
    while (sk_map_next(x->map, &it, &k, &kl, &v)) {
        objindex_ref *e = v;
        if (e->refs > 0)
            SK_WARN("objindex", "destroyed with %s still referenced", e->key);
        entry_drop(x, e);
    }
    sk_map_destroy(x->map);
    free(x);
}
