#include "objupload.h"

#include <stdlib.h>
#include <string.h>

#include "sk_err.h"
#include "sk_time.h"

#define FIRST_BATCHES 1024

/* A piece of the arena: `used` of `cap` bytes hold copied batches. */
struct chunk {
    uint8_t *mem;
    size_t cap, used;
};

struct objup_set {
    uint64_t limit;
    objup_batch *b;
    size_t n, cap;
    uint64_t len; /* payload bytes of the batches, copied or referenced */
    struct chunk *chunks;
    size_t nchunks, capchunks;
    size_t cur; /* the chunk copies go to now */
};

objup_set *objup_set_new(uint64_t limit)
{
    objup_set *s = calloc(1, sizeof *s);
    if (s)
        s->limit = limit;
    return s;
}

void objup_set_destroy(objup_set *s)
{
    if (!s)
        return;
    for (size_t i = 0; i < s->nchunks; i++)
        free(s->chunks[i].mem);
    free(s->chunks);
    free(s->b);
    free(s);
}

/* Keeps the standard chunks, in order, up to OBJUP_ARENA_KEEP bytes; frees
 * the others (and every chunk made for one large batch). */
void objup_set_reset(objup_set *s, uint64_t limit)
{
    size_t kept = 0;
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->nchunks; i++) {
        struct chunk c = s->chunks[i];
        if (c.cap == OBJUP_CHUNK_BYTES && bytes + c.cap <= OBJUP_ARENA_KEEP) {
            bytes += c.cap;
            s->chunks[kept++] = (struct chunk){c.mem, c.cap, 0};
        } else {
            free(c.mem);
        }
    }
    s->nchunks = kept;
    s->cur = 0;
    s->n = 0;
    s->len = 0;
    s->limit = limit;
}

uint64_t objup_set_arena_bytes(const objup_set *s)
{
    uint64_t bytes = 0;
    for (size_t i = 0; i < s->nchunks; i++)
        bytes += s->chunks[i].cap;
    return bytes;
}

bool objup_set_full(const objup_set *s)
{
    return s->limit > 0 && s->len >= s->limit;
}

uint64_t objup_set_bytes(const objup_set *s)
{
    return s->len;
}

const objup_batch *objup_set_batches(const objup_set *s, size_t *n)
{
    *n = s->n;
    return s->b;
}

size_t objup_set_count(const objup_set *s)
{
    return s->n;
}

/* Room in *v (of *cap elements of `size` bytes) for element n: doubling,
 * from `first`. */
static int grow(void **v, size_t *cap, size_t n, size_t first, size_t size)
{
    if (n < *cap)
        return 0;
    size_t nc = *cap ? *cap * 2 : first;
    void *nv = realloc(*v, nc * size);
    if (!nv)
        return SK_ERR_NOMEM;
    *v = nv;
    *cap = nc;
    return 0;
}

/* A new chunk of at least `size` bytes after the current one. */
static int new_chunk(objup_set *s, size_t size)
{
    if (grow((void **)&s->chunks, &s->capchunks, s->nchunks, 16, sizeof *s->chunks) != 0)
        return SK_ERR_NOMEM;
    size_t cap = size > OBJUP_CHUNK_BYTES ? size : OBJUP_CHUNK_BYTES;
    uint8_t *mem = malloc(cap);
    if (!mem)
        return SK_ERR_NOMEM;
    /* Placed right after the current chunk: the free ones stay behind it. */
    size_t at = s->nchunks ? s->cur + 1 : 0;
    memmove(s->chunks + at + 1, s->chunks + at, (s->nchunks - at) * sizeof *s->chunks);
    s->chunks[at] = (struct chunk){mem, cap, 0};
    s->nchunks++;
    s->cur = at;
    return 0;
}

/* Room for `size` bytes in the arena: the current chunk, the next free
 * one, or a new one. */
static uint8_t *arena_alloc(objup_set *s, size_t size)
{
    while (s->cur < s->nchunks) {
        struct chunk *c = &s->chunks[s->cur];
        if (c->cap - c->used >= size) {
            c->used += size;
            return c->mem + c->used - size;
        }
        if (s->cur + 1 >= s->nchunks || s->chunks[s->cur + 1].cap < size)
            break;
        s->cur++;
    }
    if (new_chunk(s, size) != 0)
        return NULL;
    s->chunks[s->cur].used = size;
    return s->chunks[s->cur].mem;
}

static int reserve_batch(objup_set *s)
{
    return grow((void **)&s->b, &s->cap, s->n, FIRST_BATCHES, sizeof *s->b);
}

int objup_set_add_ref(objup_set *s, const objup_batch *b)
{
    if (objup_set_full(s))
        return SK_ERR_NOMEM;
    int rc = reserve_batch(s);
    if (rc != 0)
        return rc;
    s->b[s->n++] = *b;
    s->len += b->size;
    return 0;
}

int objup_set_add(objup_set *s, const objup_batch *b, const void *bytes)
{
    if (objup_set_full(s))
        return SK_ERR_NOMEM;
    int rc = reserve_batch(s);
    uint8_t *dst = rc == 0 ? arena_alloc(s, b->size ? b->size : 1) : NULL;
    if (!dst)
        return SK_ERR_NOMEM;
    memcpy(dst, bytes, b->size);
    objup_batch c = *b;
    c.data = dst;
    return objup_set_add_ref(s, &c);
}

/* ---- the split rule ---- */

static int batch_cmp(const void *a, const void *b)
{
    const objup_batch *x = a, *y = b;
    if (x->stream != y->stream)
        return x->stream < y->stream ? -1 : 1;
    return (x->base > y->base) - (x->base < y->base);
}

void objup_sort(objup_batch *b, size_t n)
{
    if (n > 1)
        qsort(b, n, sizeof *b, batch_cmp);
}

bool objup_first_hole(const objup_batch *b, size_t n, uint64_t *stream, int64_t *before,
                      int64_t *after)
{
    for (size_t i = 1; i < n; i++) {
        if (b[i].stream == b[i - 1].stream && b[i].base > b[i - 1].last + 1) {
            *stream = b[i].stream;
            *before = b[i - 1].last;
            *after = b[i].base;
            return true;
        }
    }
    return false;
}

/* The last batch of stream in a sorted array, or NULL. */
static const objup_batch *last_of(const objup_batch *b, size_t n, uint64_t stream)
{
    size_t lo = 0, hi = n; /* the first batch of a later stream */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (b[mid].stream <= stream)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo > 0 && b[lo - 1].stream == stream ? &b[lo - 1] : NULL;
}

bool objup_seam_hole(const objup_batch *a, size_t na, const objup_batch *b, size_t nb,
                     uint64_t *stream, int64_t *before, int64_t *after)
{
    for (size_t i = 0; i < nb; i++) {
        if (i > 0 && b[i].stream == b[i - 1].stream)
            continue;
        const objup_batch *l = last_of(a, na, b[i].stream);
        if (l && b[i].base != l->last + 1) {
            *stream = b[i].stream;
            *before = l->last;
            *after = b[i].base;
            return true;
        }
    }
    return false;
}

bool objup_set_hole_from(objup_set *s, size_t first, uint64_t *stream, int64_t *before,
                         int64_t *after)
{
    if (first > s->n)
        first = s->n;
    objup_sort(s->b + first, s->n - first);
    return objup_first_hole(s->b + first, s->n - first, stream, before, after) ||
           objup_seam_hole(s->b, first, s->b + first, s->n - first, stream, before, after);
}

bool objup_set_hole(objup_set *s, uint64_t *stream, int64_t *before, int64_t *after)
{
    return objup_set_hole_from(s, 0, stream, before, after);
}

size_t objup_split(const objup_batch *b, size_t n, uint64_t split_bytes, objup_run *out)
{
    size_t nruns = 0;
    for (size_t i = 0; i < n;) {
        objup_run r = {i, 0, 0, false};
        while (i < n && b[i].stream == b[r.first].stream)
            r.bytes += b[i++].size;
        r.n = i - r.first;
        r.own = r.bytes >= split_bytes;
        out[nruns++] = r;
    }
    return nruns;
}

/* ---- writing ---- */

/* The registry's ranges of a written object: objfmt's streams, with the
 * largest timestamp of each stream's batches (b is sorted, like the
 * streams). */
static int ranges_of(const objfmt_writer *w, const objup_batch *b, size_t n, objreg_object *o)
{
    size_t ns;
    const objfmt_stream *ss = objfmt_writer_streams(w, &ns);
    o->ranges = calloc(ns ? ns : 1, sizeof *o->ranges);
    if (!o->ranges)
        return SK_ERR_NOMEM;
    size_t i = 0;
    for (size_t k = 0; k < ns; k++) {
        objreg_range *r = &o->ranges[k];
        r->stream = ss[k].stream_id;
        r->start = ss[k].start_offset;
        r->end = ss[k].end_offset;
        r->size = ss[k].size;
        r->records = ss[k].record_count;
        r->max_ts = -1;
        while (i < n && b[i].stream < r->stream)
            i++;
        for (; i < n && b[i].stream == r->stream; i++)
            if (b[i].max_ts > r->max_ts)
                r->max_ts = b[i].max_ts;
    }
    o->nranges = (uint32_t)ns;
    return 0;
}

static int write_batches(objfmt_writer *w, const objup_batch *b, size_t n)
{
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++) {
        objfmt_batch ob = {(uint64_t)b[i].base, (uint64_t)b[i].last, b[i].records, b[i].size};
        rc = b[i].has_crc ? objfmt_writer_add_crc(w, b[i].stream, &ob, b[i].data, b[i].crc)
                          : objfmt_writer_add(w, b[i].stream, &ob, b[i].data);
    }
    return rc;
}

/* One object of an upload: written, its ranges taken, then PUT with the
 * others. Nothing in it points at the batch array (which a set may move as
 * it grows while the PUT goes): the writer's iovecs point at the bytes. */
struct pending {
    objfmt_writer *w;
    objreg_object o;
    const struct iovec *iov;
    int iovcnt;
};

/* Writes one object of the sorted batches b[0..n) (its iovecs point at them). */
static int write_object(const objup_params *p, objfmt_kind kind, const objup_batch *b, size_t n,
                        struct pending *x)
{
    int64_t now = sk_now_ms();
    x->o = (objreg_object){.kind = kind, .created_ms = now};
    x->w = objfmt_writer_new(kind, p->block_bytes, now);
    if (!x->w)
        return SK_ERR_NOMEM;
    int rc = write_batches(x->w, b, n);
    if (rc == 0)
        rc = objfmt_writer_finish(x->w, &x->iov, &x->iovcnt, &x->o.size);
    if (rc == 0)
        rc = objfmt_make_key(x->o.key, sizeof x->o.key, "", kind, p->node_id, now);
    if (rc == 0)
        rc = ranges_of(x->w, b, n, &x->o);
    return rc;
}

/* Objects written and their PUTs under way, until objup_put_finish. */
struct objup_flight {
    struct pending *x;
    size_t nx;
    objstore_puts *puts;
};

static void flight_free(objup_flight *f)
{
    for (size_t i = 0; i < f->nx; i++) {
        objfmt_writer_destroy(f->x[i].w);
        free(f->x[i].o.ranges);
    }
    free(f->x);
    free(f);
}

/* Starts the PUTs of the written objects together (the store keeps up to
 * its max_inflight requests going); NULL when it cannot allocate. */
static objstore_puts *start_pending(objstore *os, const objup_flight *f)
{
    objstore_put_req *reqs = calloc(f->nx ? f->nx : 1, sizeof *reqs);
    if (!reqs)
        return NULL;
    for (size_t i = 0; i < f->nx; i++)
        reqs[i] = (objstore_put_req){f->x[i].o.key, f->x[i].iov, f->x[i].iovcnt};
    objstore_puts *puts = objstore_put_many_start(os, reqs, f->nx);
    free(reqs);
    return puts;
}

/* The StreamObjects of the runs that have their own, in order, then one
 * StreamSetObject of the others (their batches gathered, still sorted). All
 * are written before the first PUT and PUT together: an upload of several
 * objects takes about as long as its largest, not the sum. Memory is the
 * same (the objects' iovecs point at the set's batches). */
static int write_runs(objup_flight *f, const objup_params *p, const objup_batch *b, size_t nb,
                      const objup_run *runs, size_t nruns)
{
    objup_batch *small = malloc(nb * sizeof *small);
    f->x = calloc(nruns, sizeof *f->x); /* at most one object per run */
    size_t nsmall = 0;
    int rc = small && f->x ? 0 : SK_ERR_NOMEM;
    for (size_t r = 0; r < nruns && rc == 0; r++) {
        const objup_run *run = &runs[r];
        if (run->own) {
            rc = write_object(p, OBJFMT_SO, b + run->first, run->n, &f->x[f->nx++]);
            continue;
        }
        memcpy(small + nsmall, b + run->first, run->n * sizeof *b);
        nsmall += run->n;
    }
    if (rc == 0 && nsmall)
        rc = write_object(p, OBJFMT_SSO, small, nsmall, &f->x[f->nx++]);
    free(small);
    return rc;
}

int objup_put_start(objup_set *s, size_t first, objstore *os, const objup_params *p,
                    objup_flight **out)
{
    *out = NULL;
    if (first >= s->n)
        return 0;
    objup_batch *b = s->b + first;
    size_t n = s->n - first;
    objup_flight *f = calloc(1, sizeof *f);
    objup_run *runs = malloc(n * sizeof *runs);
    int rc = f && runs ? 0 : SK_ERR_NOMEM;
    if (rc == 0) {
        objup_sort(b, n);
        rc = write_runs(f, p, b, n, runs, objup_split(b, n, p->split_bytes, runs));
    }
    free(runs);
    if (rc == 0) {
        f->puts = start_pending(os, f);
        rc = f->puts ? 0 : SK_ERR_NOMEM;
    }
    if (rc != 0) { /* nothing was started */
        if (f)
            flight_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

int objup_put_finish(objup_flight *f, objreg_objects *out)
{
    if (!f)
        return 0;
    int *errs = calloc(f->nx ? f->nx : 1, sizeof *errs);
    int rc = objstore_put_many_wait(f->puts, errs);
    if (!errs)
        rc = SK_ERR_NOMEM; /* which were put is unknown: none is registered */
    for (size_t i = 0; i < f->nx && errs; i++) {
        if (errs[i] != 0)
            continue;
        int err = objreg_objects_push(out, &f->x[i].o);
        if (err == 0)
            f->x[i].o.ranges = NULL; /* out's now */
        else if (rc == 0)
            rc = err;
    }
    free(errs);
    flight_free(f);
    return rc;
}

int objup_put(objup_set *s, objstore *os, const objup_params *p, objreg_objects *out)
{
    objup_flight *f;
    int rc = objup_put_start(s, 0, os, p, &f);
    return rc ? rc : objup_put_finish(f, out);
}
