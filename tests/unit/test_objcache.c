/* blockcache and objindex (the read path over objects).
 *
 * blockcache: merged GETs and read-ahead, shared fetches for several
 * waiters, LRU eviction within the capacity, the ring of blocks read once,
 * pinned blocks, corrupt and failed fetches, destroy with fetches in flight,
 * all against a fake store whose GETs complete when the test says so; then
 * the real read path over the file:// objstore with an event loop.
 * objindex: tail reads (one GET, or two for a large index, HEAD when the
 * size is unknown), shared loads, LRU, missing and corrupt objects, destroy
 * with loads in flight. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <event2/event.h>
#include <ftw.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "blockcache.h"
#include "sk_crc32c.h"
#include "objindex.h"
#include "objfmt.h"
#include "objstore.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "tobject.h"

/* ---- an object to read ---- */

struct object {
    uint8_t *bytes;
    uint64_t size;
    objfmt_reader *r;
    const objfmt_entry *blocks;
    size_t nblocks;
    uint8_t *payload;
};

/* Stream 1: 10 blocks of 4 batches of 1000 bytes; stream 2: 3 blocks. */
static void make_object(struct object *o)
{
    memset(o, 0, sizeof *o);
    o->payload = malloc(1000);
    for (int i = 0; i < 1000; i++)
        o->payload[i] = (uint8_t)(i * 13);
    objfmt_writer *w = objfmt_writer_new(OBJFMT_SSO, 4 * (1000 + OBJFMT_BATCH_HEADER), 1);
    uint64_t off = 0;
    for (int i = 0; i < 40; i++, off += 5) {
        objfmt_batch b = {off, off + 4, 5, 1000};
        assert_int_equal(objfmt_writer_add(w, 1, &b, o->payload), 0);
    }
    off = 0;
    for (int i = 0; i < 12; i++, off += 5) {
        objfmt_batch b = {off, off + 4, 5, 1000};
        assert_int_equal(objfmt_writer_add(w, 2, &b, o->payload), 0);
    }
    tobject_finish(w, &o->bytes, &o->size, &o->r);
    o->blocks = objfmt_reader_blocks(o->r, &o->nblocks);
    assert_int_equal(o->nblocks, 13);
}

static void free_object(struct object *o)
{
    objfmt_reader_destroy(o->r);
    free(o->bytes);
    free(o->payload);
}

/* ---- a fake store: GETs wait until fake_complete ---- */

struct pending {
    char key[64];
    uint64_t off;
    size_t len;
    const struct iovec *iov; /* the blocks' buffers, borrowed until cb */
    int iovcnt;
    uint32_t *crcs;
    objstore_get_cb cb;
    void *arg;
};

struct fake {
    struct object *o;
    struct pending q[64];
    int n;
    int gets;
    int fail_next;      /* error for the next completions */
    int corrupt_next;   /* flip a byte in the next completions */
};

static void fake_fetch(void *ctx, const char *key, uint64_t off, const struct iovec *iov,
                       int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg)
{
    struct fake *f = ctx;
    assert_true(f->n < 64);
    struct pending *p = &f->q[f->n++];
    snprintf(p->key, sizeof p->key, "%s", key);
    p->off = off;
    p->len = 0;
    for (int i = 0; i < iovcnt; i++)
        p->len += iov[i].iov_len;
    p->iov = iov;
    p->iovcnt = iovcnt;
    p->crcs = crcs;
    p->cb = cb;
    p->arg = arg;
    f->gets++;
}

static void fake_complete(struct fake *f)
{
    while (f->n > 0) {
        struct pending p = f->q[0];
        memmove(f->q, f->q + 1, (size_t)(f->n - 1) * sizeof f->q[0]);
        f->n--;
        if (f->fail_next) {
            f->fail_next--;
            p.cb(p.arg, SK_ERR_IO, NULL, 0, 0);
            continue;
        }
        size_t at = 0;
        for (int i = 0; i < p.iovcnt; i++) {
            memcpy(p.iov[i].iov_base, f->o->bytes + p.off + at, p.iov[i].iov_len);
            at += p.iov[i].iov_len;
        }
        if (f->corrupt_next) {
            f->corrupt_next--;
            ((uint8_t *)p.iov[0].iov_base)[p.iov[0].iov_len / 2] ^= 0x40;
        }
        /* As a store does: the CRC of what it wrote, corrupt or not. */
        for (int i = 0; i < p.iovcnt; i++)
            p.crcs[i] = sk_crc32c(p.iov[i].iov_base, p.iov[i].iov_len);
        p.cb(p.arg, 0, NULL, p.len, f->o->size);
    }
}

struct rres {
    int calls;
    int err;
};

static void read_cb(void *arg, int err)
{
    struct rres *r = arg;
    r->calls++;
    r->err = err;
}

static void check_block(const struct object *o, blockcache_block *b, size_t idx)
{
    size_t len;
    const uint8_t *d = blockcache_data(b, &len);
    assert_int_equal(len, o->blocks[idx].size);
    assert_memory_equal(d, o->bytes + o->blocks[idx].position, len);
    assert_int_equal(blockcache_entry(b)->position, o->blocks[idx].position);
}

static blockcache *new_cache(struct fake *f, size_t capacity, size_t max_merge)
{
    blockcache_opts opts = {.capacity = capacity, .max_merge = max_merge, .fetch = fake_fetch,
                            .fetch_ctx = f};
    blockcache *c = blockcache_new(NULL, &opts);
    assert_non_null(c);
    return c;
}

static void release_all(blockcache *c, blockcache_block **out, size_t n)
{
    for (size_t i = 0; i < n; i++)
        blockcache_release(c, out[i]);
}

static void test_merge_and_readahead(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    blockcache *c = new_cache(&f, 1 << 20, 0);
    blockcache_block *out[3];
    struct rres r = {0};
    /* blocks 2..4 of stream 1 plus 3 read ahead: one GET of 6 blocks */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 2, 3, 3, out, read_cb, &r), 0);
    assert_int_equal(r.calls, 0);
    assert_int_equal(f.gets, 1);
    assert_int_equal(f.q[0].off, o.blocks[2].position);
    assert_int_equal(f.q[0].len, o.blocks[8].position - o.blocks[2].position);
    fake_complete(&f);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.err, 0);
    for (int i = 0; i < 3; i++)
        check_block(&o, out[i], 2 + (size_t)i);
    release_all(c, out, 3);
    /* the read-ahead blocks are there now */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 5, 3, 0, out, read_cb, &r),
                     BLOCKCACHE_HIT);
    assert_int_equal(f.gets, 1);
    for (int i = 0; i < 3; i++)
        check_block(&o, out[i], 5 + (size_t)i);
    release_all(c, out, 3);
    /* read-ahead stops at the end of the stream (block 9 is stream 1's last) */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 8, 1, 10, out, read_cb, &r), 0);
    assert_int_equal(f.q[0].len, o.blocks[10].position - o.blocks[8].position);
    fake_complete(&f);
    release_all(c, out, 1);
    /* a missing block between cached ones: GETs only for what is missing */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 3, 0, out, read_cb, &r), 0);
    assert_int_equal(f.n, 1);
    assert_int_equal(f.q[0].off, o.blocks[0].position);
    assert_int_equal(f.q[0].len, o.blocks[2].position); /* blocks 0 and 1; 2 is cached */
    fake_complete(&f);
    release_all(c, out, 3);
    /* the same block of another object is another block */
    int before = f.gets;
    assert_int_equal(blockcache_read(c, "other", o.blocks, o.nblocks, 0, 1, 0, out, read_cb, &r), 0);
    assert_int_equal(f.gets, before + 1);
    fake_complete(&f);
    release_all(c, out, 1);
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.readahead, 4);
    assert_int_equal(st.hits, 4);
    assert_int_equal(st.misses, 7);
    blockcache_destroy(c);

    /* max_merge splits a long run into several GETs */
    struct fake f2 = {.o = &o};
    c = new_cache(&f2, 1 << 20, 2 * o.blocks[0].size);
    blockcache_block *many[10];
    r = (struct rres){0};
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 10, 0, many, read_cb, &r), 0);
    assert_int_equal(f2.gets, 5);
    fake_complete(&f2);
    assert_int_equal(r.err, 0);
    for (int i = 0; i < 10; i++)
        check_block(&o, many[i], (size_t)i);
    release_all(c, many, 10);
    /* bad arguments fail at once */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 13, 1, 0, many, read_cb, &r),
                     SK_ERR_INVAL);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 12, 2, 0, many, read_cb, &r),
                     SK_ERR_INVAL);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 0, 0, many, read_cb, &r),
                     SK_ERR_INVAL);
    blockcache_destroy(c);
    free_object(&o);
}

/* A reader moving one block at a time: the read-ahead window is refilled
 * once half of it is read, by one GET of a whole window, not one block per
 * read. */
static void test_readahead_window(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    blockcache *c = new_cache(&f, 1 << 20, 0);
    blockcache_block *out[1];
    struct rres r = {0};
    /* block 0 and the window 1..4: one GET */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 1, 4, out, read_cb, &r), 0);
    assert_int_equal(f.gets, 1);
    assert_int_equal(f.q[0].len, o.blocks[5].position);
    fake_complete(&f);
    release_all(c, out, 1);
    /* blocks 1 and 2: 3 and 2 blocks still ahead, no GET */
    for (size_t i = 1; i <= 2; i++) {
        assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, i, 1, 4, out, read_cb, &r),
                         BLOCKCACHE_HIT);
        release_all(c, out, 1);
    }
    assert_int_equal(f.gets, 1);
    /* block 3: one block ahead, fewer than half: blocks 5..8 in one GET */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 3, 1, 4, out, read_cb, &r),
                     BLOCKCACHE_HIT);
    release_all(c, out, 1);
    assert_int_equal(f.gets, 2);
    assert_int_equal(f.q[0].off, o.blocks[5].position);
    assert_int_equal(f.q[0].len, o.blocks[9].position - o.blocks[5].position);
    fake_complete(&f);
    /* the window stops at the end of the stream (block 9 is its last) */
    for (size_t i = 4; i <= 9; i++) {
        int rc = blockcache_read(c, "obj", o.blocks, o.nblocks, i, 1, 4, out, read_cb, &r);
        if (rc == 0)
            fake_complete(&f);
        else
            assert_int_equal(rc, BLOCKCACHE_HIT);
        check_block(&o, out[0], i);
        release_all(c, out, 1);
    }
    assert_int_equal(f.gets, 3); /* block 9 alone: the stream ends there */
    blockcache_destroy(c);
    free_object(&o);
}

/* What the metrics endpoint shows of a read that waits: GETs and their
 * bytes in flight while it waits, then how many reads waited. */
static void test_wait_stats(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    blockcache *c = new_cache(&f, 1 << 20, 0);
    blockcache_block *out[2];
    struct rres r = {0};
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 2, 0, out, read_cb, &r), 0);
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.gets, 1);
    assert_int_equal(st.gets_in_flight, 1);
    assert_int_equal(st.get_bytes_in_flight, o.blocks[2].position);
    assert_int_equal(st.waits, 0);
    fake_complete(&f);
    release_all(c, out, 2);
    blockcache_stats_get(c, &st);
    assert_int_equal(st.gets_in_flight, 0);
    assert_int_equal(st.get_bytes_in_flight, 0);
    assert_int_equal(st.get_bytes, o.blocks[2].position);
    assert_int_equal(st.waits, 1);
    /* a hit waits for nothing */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 1, 1, 0, out, read_cb, &r),
                     BLOCKCACHE_HIT);
    release_all(c, out, 1);
    blockcache_stats_get(c, &st);
    assert_int_equal(st.waits, 1);
    blockcache_destroy(c);
    free_object(&o);
}

/* Reading block i alone (no read-ahead), waiting for its GET if needed. */
static blockcache_block *read_one(blockcache *c, struct fake *f, const struct object *o, size_t i)
{
    blockcache_block *out[1];
    struct rres r = {0};
    int rc = blockcache_read(c, "obj", o->blocks, o->nblocks, i, 1, 0, out, read_cb, &r);
    if (rc == 0)
        fake_complete(f);
    assert_int_equal(r.err, 0);
    check_block(o, out[0], i);
    return out[0];
}

/* The buffer a block's bytes lie in: they start within its first page
 * (the block's offset in its object's pages, objstore_getv_padded). */
static uintptr_t buffer_of(const uint8_t *data)
{
    return (uintptr_t)data / OBJSTORE_PAD * OBJSTORE_PAD;
}

/* The buffer pool: a held block's buffer is never given to another block,
 * even evicted; once the hold goes, the next fetch reuses it. */
static void test_pool_reuse_after_hold(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    size_t bs = o.blocks[0].size;
    /* room for the pool; blocks read once still leave after two */
    blockcache *c = new_cache(&f, 8 * bs, bs);
    blockcache_block *b0 = read_one(c, &f, &o, 0);
    sk_ref *hold = blockcache_hold(b0);
    const uint8_t *held = blockcache_data(b0, NULL);
    assert_int_equal((uintptr_t)held - buffer_of(held), o.blocks[0].position % OBJSTORE_PAD);
    blockcache_release(c, b0);
    /* blocks 1..4 evict block 0 and each other: none may land in its buffer */
    for (size_t i = 1; i <= 4; i++) {
        blockcache_block *b = read_one(c, &f, &o, i);
        assert_true(buffer_of(blockcache_data(b, NULL)) != buffer_of(held));
        blockcache_release(c, b);
    }
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_true(st.evictions >= 3);
    assert_memory_equal(held, o.bytes + o.blocks[0].position, bs); /* unchanged */
    uint64_t reused = st.buffers_reused;
    assert_true(reused > 0); /* the unheld evicted blocks' buffers came back */
    /* the hold goes: its buffer joins the pool, and a fetch takes it */
    size_t pooled = st.pool_bytes;
    sk_ref_put(hold);
    blockcache_stats_get(c, &st);
    assert_true(st.pool_bytes >= pooled + bs);
    blockcache_block *b5 = read_one(c, &f, &o, 5);
    assert_true(buffer_of(blockcache_data(b5, NULL)) == buffer_of(held));
    blockcache_release(c, b5);
    blockcache_stats_get(c, &st);
    assert_true(st.buffers_reused >= reused + 1);
    blockcache_destroy(c);
    free_object(&o);
}

/* A hold outlives the cache and its pool: the block's bytes stay, and its
 * last drop frees them (ASan checks the rest). The pool keeps the freed
 * buffers that fit in the capacity, and no more than that plus two GETs. */
static void test_pool_hold_outlives_cache(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    size_t bs = o.blocks[0].size;
    /* GETs of one block; the capacity holds every block */
    blockcache *c = new_cache(&f, 1 << 20, bs);
    for (size_t i = 0; i < 8; i++)
        blockcache_release(c, read_one(c, &f, &o, i));
    blockcache_block *b9 = read_one(c, &f, &o, 9);
    sk_ref *hold = blockcache_hold(b9);
    blockcache_release(c, b9);
    blockcache_forget(c, "obj");
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.blocks, 0);
    size_t freed = 0;
    for (size_t i = 0; i < 8; i++)
        freed += o.blocks[i].size;
    assert_true(st.pool_bytes >= freed);
    assert_true(st.pool_bytes <= (1 << 20) + 2 * bs);
    blockcache_destroy(c);
    assert_memory_equal(blockcache_data(b9, NULL), o.bytes + o.blocks[9].position,
                        o.blocks[9].size);
    sk_ref_put(hold);
    free_object(&o);
}

static int64_t fake_now;
static int64_t fake_clock(void)
{
    return fake_now;
}

/* Read once: a scan cycles through once_bytes of blocks (buffers reused),
 * never the whole capacity; a block read again later stays through scans;
 * blocks read ahead and not read yet are not the ring's to drop. */
static void test_read_once_ring(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    size_t bs = o.blocks[0].size;
    fake_now = 1000000;
    blockcache_opts opts = {.capacity = 12 * bs, .max_merge = bs, .fetch = fake_fetch,
                            .fetch_ctx = &f, .once_bytes = 3 * bs, .reread_us = 1000,
                            .now_us = fake_clock};
    blockcache *c = blockcache_new(NULL, &opts);
    assert_non_null(c);
    for (size_t i = 0; i < 10; i++) {
        blockcache_release(c, read_one(c, &f, &o, i));
        /* the reader's next fetch starts where this one ended: not a second reader */
        blockcache_release(c, read_one(c, &f, &o, i));
    }
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.gets, 10);
    assert_int_equal(st.once_evictions, 7);
    assert_int_equal(st.evictions, 7);
    assert_int_equal(st.once_bytes, 3 * bs);
    assert_int_equal(st.used, 3 * bs);
    assert_true(st.buffers_reused >= 5);
    /* a second reader, later: block 8 is shared now */
    fake_now += 2000;
    blockcache_release(c, read_one(c, &f, &o, 8));
    blockcache_stats_get(c, &st);
    assert_int_equal(st.once_bytes, 2 * bs);
    /* another scan of the whole object passes by it */
    for (size_t i = 0; i < o.nblocks; i++)
        if (i != 8)
            blockcache_release(c, read_one(c, &f, &o, i));
    blockcache_block *out[3];
    struct rres r = {0};
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 8, 1, 0, out, read_cb, &r),
                     BLOCKCACHE_HIT);
    blockcache_release(c, out[0]);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 9, 1, 0, out, read_cb, &r),
                     0); /* read once, long gone */
    fake_complete(&f);
    blockcache_release(c, out[0]);
    blockcache_stats_get(c, &st);
    assert_true(st.used <= 12 * bs);
    assert_int_equal(st.once_bytes, 3 * bs);
    /* read-ahead: blocks 1..5 wait unread while the ring turns over */
    blockcache_forget(c, "obj");
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 1, 5, out, read_cb, &r), 0);
    fake_complete(&f);
    assert_int_equal(r.err, 0);
    blockcache_release(c, out[0]);
    for (size_t i = 10; i < o.nblocks; i++)
        blockcache_release(c, read_one(c, &f, &o, i));
    for (size_t i = 1; i <= 5; i++) {
        assert_int_equal(
            blockcache_read(c, "obj", o.blocks, o.nblocks, i, 1, 0, out, read_cb, &r),
            BLOCKCACHE_HIT);
        check_block(&o, out[0], i);
        blockcache_release(c, out[0]);
    }
    blockcache_destroy(c);
    free_object(&o);
}

static void test_shared_fetch(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    blockcache *c = new_cache(&f, 1 << 20, 0);
    blockcache_block *a[2], *b[1], *d[2];
    struct rres ra = {0}, rb = {0}, rd = {0};
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 3, 2, 0, a, read_cb, &ra), 0);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 4, 1, 0, b, read_cb, &rb), 0);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 4, 2, 0, d, read_cb, &rd), 0);
    assert_int_equal(f.gets, 2); /* blocks 3-4, then only 5 */
    fake_complete(&f);
    assert_int_equal(ra.calls, 1);
    assert_int_equal(rb.calls, 1);
    assert_int_equal(rd.calls, 1);
    assert_ptr_equal(a[1], b[0]);
    assert_ptr_equal(b[0], d[0]);
    check_block(&o, d[1], 5);
    release_all(c, a, 2);
    release_all(c, b, 1);
    release_all(c, d, 2);
    blockcache_destroy(c);
    free_object(&o);
}

static void test_lru_and_pins(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    size_t bs = o.blocks[0].size;
    blockcache *c = new_cache(&f, 3 * bs, 0);
    blockcache_block *out[4];
    struct rres r = {0};
    for (size_t i = 0; i < 5; i++) {
        assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, i, 1, 0, out, read_cb, &r), 0);
        fake_complete(&f);
        assert_int_equal(r.err, 0);
        blockcache_release(c, out[0]);
    }
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_true(st.used <= 3 * bs);
    assert_int_equal(st.evictions, 2);
    /* 0 and 1 went first; 2..4 remain */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 2, 3, 0, out, read_cb, &r),
                     BLOCKCACHE_HIT);
    /* held blocks stay while others come and go */
    blockcache_block *more[4];
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 5, 4, 0, more, read_cb, &r), 0);
    fake_complete(&f);
    blockcache_stats_get(c, &st);
    assert_int_equal(st.used, 7 * bs); /* over capacity by what is pinned */
    for (int i = 0; i < 3; i++)
        check_block(&o, out[i], 2 + (size_t)i);
    release_all(c, out, 3);
    release_all(c, more, 4);
    blockcache_stats_get(c, &st);
    assert_true(st.used <= 3 * bs);
    /* the most recently used survive */
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 6, 3, 0, more, read_cb, &r),
                     BLOCKCACHE_HIT);
    release_all(c, more, 3);
    /* read-ahead evicts unpinned blocks for room, but does not push the
     * cache past its capacity: block 0 and two blocks ahead, not five */
    int gets = f.gets;
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 1, 5, out, read_cb, &r), 0);
    assert_int_equal(f.gets, gets + 1);
    assert_int_equal(f.q[0].len, o.blocks[3].position);
    fake_complete(&f);
    blockcache_stats_get(c, &st);
    assert_true(st.used <= 3 * bs);
    release_all(c, out, 1);
    /* a pinned cache leaves no room: no read-ahead at all */
    blockcache_block *pin[3];
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 3, 0, pin, read_cb, &r),
                     BLOCKCACHE_HIT);
    gets = f.gets;
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 5, 1, 3, out, read_cb, &r), 0);
    assert_int_equal(f.gets, gets + 1);
    assert_int_equal(f.q[0].len, o.blocks[5].size);
    fake_complete(&f);
    release_all(c, out, 1);
    release_all(c, pin, 3);
    /* forget drops an object's unpinned blocks */
    blockcache_forget(c, "obj");
    blockcache_stats_get(c, &st);
    assert_int_equal(st.used, 0);
    assert_int_equal(st.blocks, 0);
    blockcache_destroy(c);
    free_object(&o);
}

static void test_errors(void **state)
{
    (void)state;
    struct object o;
    make_object(&o);
    struct fake f = {.o = &o};
    blockcache *c = new_cache(&f, 1 << 20, 0);
    blockcache_block *out[3], *other[1];
    struct rres r = {0}, r2 = {0};
    /* a corrupt block fails its readers and is not kept */
    f.corrupt_next = 1;
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 1, 0, out, read_cb, &r), 0);
    fake_complete(&f);
    assert_int_equal(r.err, SK_ERR_CORRUPT);
    assert_null(out[0]);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 1, 0, out, read_cb, &r), 0);
    fake_complete(&f);
    assert_int_equal(r.err, 0);
    check_block(&o, out[0], 0);
    blockcache_release(c, out[0]);
    /* a failed GET fails every read waiting on it, and pins nothing */
    f.fail_next = 1;
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 0, 3, 0, out, read_cb, &r), 0);
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 2, 1, 0, other, read_cb, &r2), 0);
    fake_complete(&f);
    assert_int_equal(r.err, SK_ERR_IO);
    assert_int_equal(r2.err, SK_ERR_IO);
    for (int i = 0; i < 3; i++)
        assert_null(out[i]);
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.blocks, 1); /* only block 0, cached before */
    /* destroy with a fetch in flight: the waiter hears SK_ERR_CLOSED at once,
     * the late completion is harmless */
    r = (struct rres){0};
    assert_int_equal(blockcache_read(c, "obj", o.blocks, o.nblocks, 4, 2, 2, out, read_cb, &r), 0);
    blockcache_destroy(c);
    assert_int_equal(r.calls, 1);
    assert_int_equal(r.err, SK_ERR_CLOSED);
    fake_complete(&f);
    assert_int_equal(r.calls, 1);
    free_object(&o);
}

/* ---- the real read path: objfmt + objstore (file://) + blockcache ---- */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

struct done {
    bool done;
    int err;
};

static void put_cb(void *arg, int err)
{
    struct done *d = arg;
    d->done = true;
    d->err = err;
}

static void read_done(void *arg, int err)
{
    struct done *d = arg;
    d->done = true;
    d->err = err;
}

static void loop_until(struct event_base *base, bool *flag)
{
    int64_t deadline = sk_mono_ms() + 10000;
    while (!*flag) {
        assert_true(sk_mono_ms() < deadline);
        event_base_loop(base, EVLOOP_ONCE);
    }
}

static void test_read_path_over_file_store(void **state)
{
    (void)state;
    char dir[64] = "/tmp/skiff-test-objcache-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char url[128];
    snprintf(url, sizeof url, "file://%s", dir);
    struct event_base *base = event_base_new();
    char why[200];
    objstore *s = objstore_open(base, url, NULL, why, sizeof why);
    assert_non_null(s);
    struct object o;
    make_object(&o);
    struct iovec v = {o.bytes, o.size};
    struct done d = {0};
    objstore_put(s, "data/x/so-1-1.obj", &v, 1, put_cb, &d);
    loop_until(base, &d.done);
    assert_int_equal(d.err, 0);

    blockcache_opts opts = {.capacity = 1 << 20};
    blockcache *c = blockcache_new(s, &opts);
    /* stream 2 from offset 17: the block that holds it and what follows */
    objfmt_range rg;
    assert_int_equal(objfmt_reader_ranges(o.r, 2, 17, 0, &rg, 1), 1);
    blockcache_block *out[3];
    d = (struct done){0};
    int rc = blockcache_read(c, "data/x/so-1-1.obj", o.blocks, o.nblocks, rg.first_block,
                             rg.nblocks, 0, out, read_done, &d);
    assert_int_equal(rc, 0);
    loop_until(base, &d.done);
    assert_int_equal(d.err, 0);
    uint64_t next = 0;
    int batches = 0;
    for (uint32_t i = 0; i < rg.nblocks; i++) {
        size_t len;
        const uint8_t *p = blockcache_data(out[i], &len);
        objfmt_iter it;
        objfmt_iter_init_verified(&it, p, len);
        objfmt_batch b;
        const uint8_t *pl;
        while (objfmt_iter_next(&it, &b, &pl)) {
            if (b.last_offset < 17)
                continue;
            assert_true(b.base_offset >= next);
            next = b.last_offset + 1;
            assert_memory_equal(pl, o.payload, b.size);
            batches++;
        }
        blockcache_release(c, out[i]);
    }
    assert_int_equal(next, 60);
    assert_int_equal(batches, 9); /* 15..19 through 55..59 */
    blockcache_destroy(c);
    objstore_destroy(s);
    free_object(&o);
    event_base_free(base);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- objindex ---- */

struct ixres {
    int calls;
    int err;
    objindex_ref *ref;
};

static void ix_cb(void *arg, int err, objindex_ref *ref)
{
    struct ixres *r = arg;
    r->calls++;
    r->err = err;
    r->ref = ref;
}

static void ix_wait(struct event_base *base, struct ixres *r, int n)
{
    int64_t deadline = sk_mono_ms() + 10000;
    for (;;) {
        int done = 0;
        for (int i = 0; i < n; i++)
            done += r[i].calls > 0;
        if (done == n)
            return;
        assert_true(sk_mono_ms() < deadline);
        event_base_loop(base, EVLOOP_ONCE);
    }
}

/* An SSO of n streams of one 100-byte batch each. */
static uint8_t *many_streams(int n, uint64_t *size)
{
    static uint8_t payload[100];
    objfmt_writer *w = objfmt_writer_new(OBJFMT_SSO, 0, 1);
    for (int i = 0; i < n; i++) {
        objfmt_batch b = {0, 0, 1, sizeof payload};
        assert_int_equal(objfmt_writer_add(w, (uint64_t)i, &b, payload), 0);
    }
    const struct iovec *iov;
    int cnt;
    assert_int_equal(objfmt_writer_finish(w, &iov, &cnt, size), 0);
    uint8_t *bytes = malloc(*size);
    uint64_t pos = 0;
    for (int i = 0; i < cnt; i++) {
        memcpy(bytes + pos, iov[i].iov_base, iov[i].iov_len);
        pos += iov[i].iov_len;
    }
    objfmt_writer_destroy(w);
    return bytes;
}

static void put_bytes(struct event_base *base, objstore *s, const char *key, const void *p,
                      uint64_t n)
{
    struct iovec v = {(void *)p, (size_t)n};
    struct done d = {0};
    objstore_put(s, key, &v, 1, put_cb, &d);
    loop_until(base, &d.done);
    assert_int_equal(d.err, 0);
}

static void test_objindex(void **state)
{
    (void)state;
    char dir[64] = "/tmp/skiff-test-objindex-XXXXXX";
    assert_non_null(mkdtemp(dir));
    char url[128];
    snprintf(url, sizeof url, "file://%s", dir);
    struct event_base *base = event_base_new();
    char why[200];
    objstore *s = objstore_open(base, url, NULL, why, sizeof why);
    assert_non_null(s);
    uint64_t big_size, small_size;
    uint8_t *big = many_streams(3000, &big_size); /* index > the tail read */
    uint8_t *small = many_streams(3, &small_size);
    put_bytes(base, s, "big", big, big_size);
    put_bytes(base, s, "small", small, small_size);
    put_bytes(base, s, "junk", "not an object at all, just some bytes of junk that is long enough", 66);

    objindex_opts io = {.max_objects = 2};
    objindex *x = objindex_new(s, &io);
    objindex_ref *ref = NULL;
    /* three readers of one object share one load (two GETs: tail, index) */
    struct ixres r[3] = {{0}};
    for (int i = 0; i < 3; i++)
        assert_int_equal(objindex_get(x, "big", big_size, &ref, ix_cb, &r[i]), 0);
    assert_int_equal(r[0].calls, 0);
    ix_wait(base, r, 3);
    objindex_stats st;
    objindex_stats_get(x, &st);
    assert_int_equal(st.loads, 1);
    assert_int_equal(st.gets, 2);
    size_t ns;
    for (int i = 0; i < 3; i++) {
        assert_int_equal(r[i].err, 0);
        assert_ptr_equal(r[i].ref, r[0].ref);
        objfmt_reader_streams(objindex_reader(r[i].ref), &ns);
        assert_int_equal(ns, 3000);
        assert_int_equal(objindex_size(r[i].ref), big_size);
    }
    /* cached now */
    assert_int_equal(objindex_get(x, "big", big_size, &ref, ix_cb, &r[0]), OBJINDEX_HIT);
    assert_ptr_equal(ref, r[1].ref);
    objindex_release(x, ref);
    for (int i = 0; i < 3; i++)
        objindex_release(x, r[i].ref);
    /* size unknown: a HEAD first, then one GET */
    struct ixres q = {0};
    assert_int_equal(objindex_get(x, "small", 0, &ref, ix_cb, &q), 0);
    ix_wait(base, &q, 1);
    assert_int_equal(q.err, 0);
    objfmt_reader_streams(objindex_reader(q.ref), &ns);
    assert_int_equal(ns, 3);
    objindex_stats_get(x, &st);
    assert_int_equal(st.heads, 1);
    assert_int_equal(st.gets, 3);
    objindex_release(x, q.ref);
    /* missing and corrupt objects fail and are not cached */
    q = (struct ixres){0};
    assert_int_equal(objindex_get(x, "missing", 0, &ref, ix_cb, &q), 0);
    ix_wait(base, &q, 1);
    assert_int_equal(q.err, SK_ERR_NOENT);
    q = (struct ixres){0};
    assert_int_equal(objindex_get(x, "junk", 66, &ref, ix_cb, &q), 0);
    ix_wait(base, &q, 1);
    assert_int_equal(q.err, SK_ERR_CORRUPT);
    assert_null(q.ref);
    assert_int_equal(objindex_get(x, "junk", 10, &ref, ix_cb, &q), SK_ERR_CORRUPT);
    objindex_stats_get(x, &st);
    assert_int_equal(st.load_errors, 2);
    assert_int_equal(st.cached, 2);
    /* a third object evicts the least recently used ("big") */
    put_bytes(base, s, "small2", small, small_size);
    q = (struct ixres){0};
    assert_int_equal(objindex_get(x, "small2", small_size, &ref, ix_cb, &q), 0);
    ix_wait(base, &q, 1);
    objindex_release(x, q.ref);
    objindex_stats_get(x, &st);
    assert_int_equal(st.evictions, 1);
    assert_int_equal(objindex_get(x, "small", small_size, &ref, ix_cb, &q), OBJINDEX_HIT);
    objindex_release(x, ref);
    objindex_forget(x, "small");
    objindex_stats_get(x, &st);
    assert_int_equal(st.cached, 1);
    /* destroy with a load in flight: CLOSED at once, the late answer is harmless */
    q = (struct ixres){0};
    assert_int_equal(objindex_get(x, "big", big_size, &ref, ix_cb, &q), 0);
    objindex_destroy(x);
    assert_int_equal(q.calls, 1);
    assert_int_equal(q.err, SK_ERR_CLOSED);
    objstore_destroy(s);
    free(big);
    free(small);
    event_base_free(base);
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

int main(void)
{
    sk_log_set_level(SK_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_merge_and_readahead),
        cmocka_unit_test(test_readahead_window),
        cmocka_unit_test(test_wait_stats),
        cmocka_unit_test(test_pool_reuse_after_hold),
        cmocka_unit_test(test_pool_hold_outlives_cache),
        cmocka_unit_test(test_read_once_ring),
        cmocka_unit_test(test_shared_fetch),
        cmocka_unit_test(test_lru_and_pins),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_read_path_over_file_store),
        cmocka_unit_test(test_objindex),
    };
    return cmocka_run_group_tests_name("blockcache", tests, NULL, NULL);
}
