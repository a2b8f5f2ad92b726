/* objfmt: write/read round trips of SOs and SSOs with many streams, batches
 * larger than a block, tail reads that miss part of the index, range
 * merging, corrupt footer/index/block detection, writer misuse, and object
 * key names. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <stdio.h>

#include "objfmt.h"
#include "sk_crc32c.h"
#include "sk_err.h"

struct xb {
    uint64_t stream;
    objfmt_batch b;
    uint8_t *payload;
};

struct obj {
    uint8_t *bytes;
    uint64_t size;
    struct xb *batches;
    size_t n;
    objfmt_writer *w;
};

static uint32_t rng_state = 12345;
static uint32_t rnd(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 17;
    rng_state ^= rng_state << 5;
    return rng_state;
}

static uint8_t *payload_for(uint64_t stream, uint64_t off, uint32_t size)
{
    uint8_t *p = malloc(size ? size : 1);
    for (uint32_t i = 0; i < size; i++)
        p[i] = (uint8_t)(stream * 31 + off * 7 + i);
    return p;
}

/* Builds an object of nstreams streams, batches per stream drawn at random;
 * stream `big` gets one batch of big_size bytes. */
static void build(struct obj *o, objfmt_kind kind, uint32_t block, int nstreams, int max_batches,
                  uint32_t max_size, int big, uint32_t big_size)
{
    memset(o, 0, sizeof *o);
    o->w = objfmt_writer_new(kind, block, 1700000000123);
    assert_non_null(o->w);
    size_t cap = 1024;
    o->batches = malloc(cap * sizeof *o->batches);
    for (int s = 0; s < nstreams; s++) {
        uint64_t stream = 1000 + (uint64_t)s * 3;
        uint64_t off = (uint64_t)(rnd() % 1000);
        int nb = 1 + (int)(rnd() % (uint32_t)max_batches);
        for (int i = 0; i < nb; i++) {
            if (o->n == cap) {
                cap *= 2;
                o->batches = realloc(o->batches, cap * sizeof *o->batches);
            }
            struct xb *x = &o->batches[o->n++];
            x->stream = stream;
            uint32_t recs = 1 + rnd() % 20;
            x->b.base_offset = off;
            x->b.last_offset = off + recs - 1;
            x->b.record_count = recs;
            x->b.size = (s == big && i == nb / 2) ? big_size : 1 + rnd() % max_size;
            if (rnd() % 17 == 0)
                x->b.size = 0; /* empty payloads are legal */
            x->payload = payload_for(stream, off, x->b.size);
            assert_int_equal(objfmt_writer_add(o->w, stream, &x->b, x->payload), 0);
            off += recs + (rnd() % 5 == 0 ? 3 : 0); /* sometimes a gap */
        }
    }
    const struct iovec *iov;
    int iovcnt;
    uint64_t expect = objfmt_writer_size(o->w);
    assert_int_equal(objfmt_writer_finish(o->w, &iov, &iovcnt, &o->size), 0);
    assert_int_equal(o->size, expect);
    o->bytes = malloc(o->size);
    uint64_t pos = 0;
    size_t payload_iovs = 0;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(o->bytes + pos, iov[i].iov_base, iov[i].iov_len);
        pos += iov[i].iov_len;
        for (size_t k = 0; k < o->n; k++)
            if (iov[i].iov_base == o->batches[k].payload && o->batches[k].b.size) {
                payload_iovs++;
                break;
            }
    }
    assert_int_equal(pos, o->size);
    /* every non-empty payload is referenced, not copied */
    size_t nonempty = 0;
    for (size_t k = 0; k < o->n; k++)
        nonempty += o->batches[k].b.size > 0;
    assert_int_equal(payload_iovs, nonempty);
}

static void obj_free(struct obj *o)
{
    for (size_t i = 0; i < o->n; i++)
        free(o->batches[i].payload);
    free(o->batches);
    free(o->bytes);
    objfmt_writer_destroy(o->w);
}

/* Reads the object as a client would: the tail first, then more if asked. */
static objfmt_reader *open_obj(const struct obj *o, int *rounds)
{
    size_t tail = o->size < OBJFMT_TAIL_READ ? (size_t)o->size : OBJFMT_TAIL_READ;
    objfmt_reader *r = NULL;
    uint64_t need_off = 0;
    size_t need_len = 0;
    int rc = objfmt_reader_from_tail(o->bytes + o->size - tail, tail, o->size, &r, &need_off,
                                     &need_len);
    *rounds = 1;
    if (rc == SK_ERR_AGAIN) {
        assert_int_equal(need_off + need_len, o->size);
        assert_true(need_len > tail);
        rc = objfmt_reader_from_tail(o->bytes + need_off, need_len, o->size, &r, &need_off,
                                     &need_len);
        *rounds = 2;
    }
    assert_int_equal(rc, 0);
    return r;
}

/* Every batch of the object comes back, in order, from its blocks. */
static void check_contents(const struct obj *o, const objfmt_reader *r, uint32_t block)
{
    size_t nb;
    const objfmt_entry *blocks = objfmt_reader_blocks(r, &nb);
    size_t wn;
    const objfmt_entry *wblocks = objfmt_writer_blocks(o->w, &wn);
    assert_int_equal(nb, wn);
    assert_memory_equal(blocks, wblocks, nb * sizeof *blocks);
    size_t k = 0;
    for (size_t i = 0; i < nb; i++) {
        const objfmt_entry *e = &blocks[i];
        objfmt_iter it;
        assert_int_equal(objfmt_iter_init(&it, e, o->bytes + e->position, e->size), 0);
        objfmt_batch b;
        const uint8_t *p;
        uint32_t seen = 0;
        while (objfmt_iter_next(&it, &b, &p)) {
            assert_true(k < o->n);
            const struct xb *x = &o->batches[k++];
            assert_int_equal(x->stream, e->stream_id);
            assert_memory_equal(&b, &x->b, sizeof b);
            if (b.size)
                assert_memory_equal(p, x->payload, b.size);
            seen++;
        }
        assert_int_equal(seen, e->batch_count);
        /* a block passes the block size only when it is one batch */
        if (e->size > block)
            assert_int_equal(e->batch_count, 1);
    }
    assert_int_equal(k, o->n);
    size_t ns, wns;
    const objfmt_stream *st = objfmt_reader_streams(r, &ns);
    const objfmt_stream *wst = objfmt_writer_streams(o->w, &wns);
    assert_int_equal(ns, wns);
    assert_memory_equal(st, wst, ns * sizeof *st);
}

static void test_sso_roundtrip(void **state)
{
    (void)state;
    struct obj o;
    uint32_t block = 64 * 1024;
    build(&o, OBJFMT_SSO, block, 60, 40, 8000, 7, 200 * 1024);
    int rounds;
    objfmt_reader *r = open_obj(&o, &rounds);
    const objfmt_footer *f = objfmt_reader_footer(r);
    assert_int_equal(f->kind, OBJFMT_SSO);
    assert_int_equal(f->version, OBJFMT_VERSION);
    assert_int_equal(f->created_ms, 1700000000123);
    check_contents(&o, r, block);

    /* ranges: a stream's blocks from an offset, merged into one range */
    size_t ns;
    const objfmt_stream *st = objfmt_reader_streams(r, &ns);
    assert_int_equal(ns, 60);
    size_t nb;
    const objfmt_entry *blocks = objfmt_reader_blocks(r, &nb);
    for (size_t s = 0; s < ns; s++) {
        objfmt_range rg[4];
        size_t n = objfmt_reader_ranges(r, st[s].stream_id, 0, 0, rg, 4);
        assert_int_equal(n, 1);
        assert_int_equal(rg[0].position, st[s].position);
        assert_int_equal(rg[0].size, st[s].size);
        assert_int_equal(rg[0].nblocks, st[s].block_count);
        /* from the last offset: only the last block */
        n = objfmt_reader_ranges(r, st[s].stream_id, st[s].end_offset, 0, rg, 4);
        assert_int_equal(n, 1);
        assert_int_equal(rg[0].nblocks, 1);
        assert_int_equal(rg[0].first_block, st[s].first_block + st[s].block_count - 1);
        /* past the end: nothing */
        assert_int_equal(objfmt_reader_ranges(r, st[s].stream_id, st[s].end_offset + 1, 0, rg, 4),
                         0);
        /* from the middle, each offset maps to the block that holds it */
        for (uint32_t b = st[s].first_block; b < st[s].first_block + st[s].block_count; b++) {
            size_t found;
            assert_int_equal(objfmt_reader_find(r, st[s].stream_id, blocks[b].start_offset, &found), 0);
            assert_int_equal(found, b);
            assert_int_equal(objfmt_reader_find(r, st[s].stream_id, blocks[b].end_offset, &found), 0);
            assert_int_equal(found, b);
        }
        /* max_bytes stops after the block that reaches it */
        n = objfmt_reader_ranges(r, st[s].stream_id, 0, 1, rg, 4);
        assert_int_equal(n, 1);
        assert_int_equal(rg[0].nblocks, 1);
    }
    size_t found;
    assert_int_equal(objfmt_reader_find(r, 999, 0, &found), SK_ERR_NOENT);
    assert_int_equal(objfmt_reader_find(r, 1001, 0, &found), SK_ERR_NOENT);
    objfmt_reader_destroy(r);
    obj_free(&o);
}

static void test_so_and_big_batches(void **state)
{
    (void)state;
    struct obj o;
    uint32_t block = 32 * 1024;
    build(&o, OBJFMT_SO, block, 1, 200, 4000, 0, 100 * 1024);
    int rounds;
    objfmt_reader *r = open_obj(&o, &rounds);
    assert_int_equal(rounds, 1);
    assert_int_equal(objfmt_reader_footer(r)->kind, OBJFMT_SO);
    check_contents(&o, r, block);
    size_t nb;
    const objfmt_entry *blocks = objfmt_reader_blocks(r, &nb);
    assert_true(nb > 3);
    bool saw_big = false;
    for (size_t i = 0; i < nb; i++)
        saw_big |= blocks[i].size > block;
    assert_true(saw_big);
    objfmt_reader_destroy(r);
    obj_free(&o);

    /* batches all larger than the block size: one block each */
    objfmt_writer *w = objfmt_writer_new(OBJFMT_SO, 1000, 0);
    uint8_t *p = payload_for(1, 0, 5000);
    for (int i = 0; i < 5; i++) {
        objfmt_batch b = {.base_offset = (uint64_t)i * 10, .last_offset = (uint64_t)i * 10 + 9,
                          .record_count = 10, .size = 5000};
        assert_int_equal(objfmt_writer_add(w, 7, &b, p), 0);
    }
    const struct iovec *iov;
    int cnt;
    uint64_t size;
    assert_int_equal(objfmt_writer_finish(w, &iov, &cnt, &size), 0);
    size_t n;
    objfmt_writer_blocks(w, &n);
    assert_int_equal(n, 5);
    objfmt_writer_destroy(w);
    free(p);
}

/* The index of a finished writer (its block entries, CRCs included). */
static uint8_t *finished_index(objfmt_writer *w, size_t *n)
{
    const objfmt_entry *e = objfmt_writer_blocks(w, n);
    uint8_t *copy = malloc(*n * sizeof *e);
    assert_non_null(copy);
    memcpy(copy, e, *n * sizeof *e);
    return copy;
}

/* A payload CRC the caller gives (objfmt_writer_add_crc) makes the very
 * blocks a computed one does, batches of every size, empty ones included,
 * across block boundaries. */
static void test_writer_known_crc(void **state)
{
    (void)state;
    uint32_t sizes[] = {0, 1, 21, 700, 5000, 3, 1200};
    objfmt_writer *w[2] = {objfmt_writer_new(OBJFMT_SSO, 2048, 0),
                           objfmt_writer_new(OBJFMT_SSO, 2048, 0)};
    uint8_t *p[7];
    for (int i = 0; i < 7; i++) {
        p[i] = payload_for((uint64_t)i, 0, sizes[i]);
        objfmt_batch b = {.base_offset = (uint64_t)i * 10, .last_offset = (uint64_t)i * 10 + 9,
                          .record_count = 10, .size = sizes[i]};
        assert_int_equal(objfmt_writer_add(w[0], 7, &b, p[i]), 0);
        assert_int_equal(objfmt_writer_add_crc(w[1], 7, &b, p[i], sk_crc32c(p[i], sizes[i])), 0);
    }
    size_t n[2];
    uint8_t *idx[2];
    for (int k = 0; k < 2; k++) {
        const struct iovec *iov;
        int cnt;
        uint64_t size;
        assert_int_equal(objfmt_writer_finish(w[k], &iov, &cnt, &size), 0);
        idx[k] = finished_index(w[k], &n[k]);
    }
    assert_int_equal(n[0], n[1]);
    assert_true(n[0] > 2);
    assert_memory_equal(idx[0], idx[1], n[0] * sizeof(objfmt_entry));
    for (int k = 0; k < 2; k++) {
        free(idx[k]);
        objfmt_writer_destroy(w[k]);
    }
    for (int i = 0; i < 7; i++)
        free(p[i]);
}

static void test_large_index_needs_second_read(void **state)
{
    (void)state;
    struct obj o;
    /* 3000 streams of one small batch: a 144 KB index, more than the tail */
    build(&o, OBJFMT_SSO, 1024 * 1024, 3000, 1, 100, -1, 0);
    int rounds;
    objfmt_reader *r = open_obj(&o, &rounds);
    assert_int_equal(rounds, 2);
    check_contents(&o, r, 1024 * 1024);
    objfmt_reader_destroy(r);
    obj_free(&o);
}

static void refooter(uint8_t *f)
{
    /* recompute the footer CRC after an edit, to reach the later checks */
    uint32_t c = sk_crc32c(f, 36);
    for (int i = 0; i < 4; i++)
        f[36 + i] = (uint8_t)(c >> (8 * i));
}

static void reindex(struct obj *o, const objfmt_footer *f)
{
    uint8_t *idx = o->bytes + f->index_position;
    uint32_t c = sk_crc32c(idx, f->index_size);
    uint8_t *foot = o->bytes + o->size - OBJFMT_FOOTER_SIZE;
    for (int i = 0; i < 4; i++)
        foot[16 + i] = (uint8_t)(c >> (8 * i));
    refooter(foot);
}

static int try_open(const struct obj *o)
{
    objfmt_reader *r = NULL;
    uint64_t off;
    size_t len;
    int rc = objfmt_reader_from_tail(o->bytes, (size_t)o->size, o->size, &r, &off, &len);
    objfmt_reader_destroy(r);
    return rc;
}

static void test_corruption(void **state)
{
    (void)state;
    struct obj o;
    build(&o, OBJFMT_SSO, 16 * 1024, 5, 20, 3000, -1, 0);
    assert_int_equal(try_open(&o), 0);
    objfmt_footer f;
    assert_int_equal(objfmt_footer_parse(o.bytes, (size_t)o.size, o.size, &f), 0);
    uint8_t *foot = o.bytes + o.size - OBJFMT_FOOTER_SIZE;

    /* every single-bit flip in the footer is caught */
    for (int i = 0; i < OBJFMT_FOOTER_SIZE * 8; i++) {
        foot[i / 8] ^= (uint8_t)(1u << (i % 8));
        assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
        foot[i / 8] ^= (uint8_t)(1u << (i % 8));
    }
    /* a wrong object size */
    objfmt_reader *r;
    uint64_t off;
    size_t len;
    assert_int_equal(objfmt_reader_from_tail(o.bytes + 1, (size_t)o.size - 1, o.size - 1, &r,
                                             &off, &len),
                     SK_ERR_CORRUPT);
    /* a footer with a valid CRC but another version, kind, or bounds */
    uint8_t save[OBJFMT_FOOTER_SIZE];
    memcpy(save, foot, sizeof save);
    foot[32] = 2;
    refooter(foot);
    assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
    memcpy(foot, save, sizeof save);
    foot[20] = 3;
    refooter(foot);
    assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
    memcpy(foot, save, sizeof save);
    foot[12]++; /* count disagrees with size */
    refooter(foot);
    assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
    memcpy(foot, save, sizeof save);
    assert_int_equal(try_open(&o), 0);

    /* any flipped index byte fails the index CRC */
    uint8_t *idx = o.bytes + f.index_position;
    for (uint32_t i = 0; i < f.index_size; i += 7) {
        idx[i] ^= 0x10;
        assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
        idx[i] ^= 0x10;
    }
    /* an index with a valid CRC but entries out of order, or a hole */
    uint8_t e0[OBJFMT_ENTRY_SIZE];
    memcpy(e0, idx, sizeof e0);
    memcpy(idx, idx + OBJFMT_ENTRY_SIZE, OBJFMT_ENTRY_SIZE);
    memcpy(idx + OBJFMT_ENTRY_SIZE, e0, OBJFMT_ENTRY_SIZE);
    reindex(&o, &f);
    assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
    memcpy(idx + OBJFMT_ENTRY_SIZE, idx, OBJFMT_ENTRY_SIZE);
    memcpy(idx, e0, OBJFMT_ENTRY_SIZE);
    idx[32]++; /* block 0 one byte longer: blocks no longer tile the data */
    reindex(&o, &f);
    assert_int_equal(try_open(&o), SK_ERR_CORRUPT);
    idx[32]--;
    reindex(&o, &f);
    assert_int_equal(try_open(&o), 0);

    /* a flipped data byte fails its block's CRC, and only that block's */
    int rounds;
    r = open_obj(&o, &rounds);
    size_t nb;
    const objfmt_entry *blocks = objfmt_reader_blocks(r, &nb);
    const objfmt_entry *e = &blocks[nb / 2];
    uint8_t *blk = o.bytes + e->position;
    blk[e->size / 2] ^= 1;
    objfmt_iter it;
    assert_int_equal(objfmt_iter_init(&it, e, blk, e->size), SK_ERR_CORRUPT);
    assert_int_equal(objfmt_block_verify(e, blk, e->size), SK_ERR_CORRUPT);
    objfmt_batch b;
    const uint8_t *p;
    assert_int_equal(objfmt_iter_next(&it, &b, &p), 0); /* a failed init iterates nothing */
    assert_int_equal(objfmt_block_verify(&blocks[0], o.bytes + blocks[0].position, blocks[0].size), 0);
    blk[e->size / 2] ^= 1;
    assert_int_equal(objfmt_block_verify(e, blk, e->size), 0);
    /* wrong length, or a block that is not the one the entry describes */
    assert_int_equal(objfmt_block_verify(e, blk, e->size - 1), SK_ERR_CORRUPT);
    assert_int_equal(objfmt_block_verify(e, o.bytes + blocks[0].position, e->size), SK_ERR_CORRUPT);
    /* a block with a valid CRC but a lying batch header */
    uint8_t *copy = malloc(e->size);
    memcpy(copy, blk, e->size);
    copy[20] ^= 0x01; /* first batch's size */
    objfmt_entry fake = *e;
    fake.crc = sk_crc32c(copy, e->size);
    assert_int_equal(objfmt_block_verify(&fake, copy, e->size), SK_ERR_CORRUPT);
    /* the unverified iterator never reads past the block */
    objfmt_iter_init_verified(&it, copy, e->size);
    size_t total = 0;
    while (objfmt_iter_next(&it, &b, &p))
        total += OBJFMT_BATCH_HEADER + b.size;
    assert_true(total <= e->size);
    free(copy);
    objfmt_reader_destroy(r);
    obj_free(&o);
}

/* Random damage anywhere: the reader refuses or reads consistently, never
 * past its buffers (ASan runs this too). */
static void test_random_damage(void **state)
{
    (void)state;
    struct obj o;
    build(&o, OBJFMT_SSO, 8 * 1024, 8, 10, 2000, -1, 0);
    uint8_t *copy = malloc(o.size);
    int opened = 0;
    for (int round = 0; round < 3000; round++) {
        memcpy(copy, o.bytes, o.size);
        int flips = 1 + (int)(rnd() % 4);
        for (int k = 0; k < flips; k++) {
            /* bias towards the tail, where index and footer live */
            uint64_t at = rnd() % 2 ? o.size - 1 - rnd() % 600 : rnd() % o.size;
            copy[at] ^= (uint8_t)(1 + rnd() % 255);
        }
        size_t tail = (size_t)(rnd() % o.size) + 1;
        objfmt_reader *r = NULL;
        uint64_t off;
        size_t len;
        int rc = objfmt_reader_from_tail(copy + o.size - tail, tail, o.size, &r, &off, &len);
        if (rc == SK_ERR_AGAIN) {
            assert_true(off + len == o.size);
            rc = objfmt_reader_from_tail(copy + off, len, o.size, &r, &off, &len);
        }
        if (rc != 0) {
            assert_null(r);
            continue;
        }
        opened++;
        size_t nb;
        const objfmt_entry *blocks = objfmt_reader_blocks(r, &nb);
        for (size_t i = 0; i < nb; i++) {
            const objfmt_entry *e = &blocks[i];
            assert_true(e->position + e->size <= o.size);
            objfmt_iter it;
            if (objfmt_iter_init(&it, e, copy + e->position, e->size) != 0)
                continue;
            objfmt_batch b;
            const uint8_t *p;
            while (objfmt_iter_next(&it, &b, &p))
                assert_true(p + b.size <= copy + e->position + e->size);
        }
        objfmt_reader_destroy(r);
    }
    assert_true(opened > 0); /* damage confined to data blocks leaves the index readable */
    free(copy);
    obj_free(&o);
}

static void test_writer_misuse(void **state)
{
    (void)state;
    uint8_t p[16] = {0};
    objfmt_batch b = {.base_offset = 10, .last_offset = 19, .record_count = 10, .size = 16};
    objfmt_writer *w = objfmt_writer_new(OBJFMT_SSO, 0, 0);
    const struct iovec *iov;
    int cnt;
    uint64_t size;
    assert_int_equal(objfmt_writer_finish(w, &iov, &cnt, &size), SK_ERR_INVAL); /* empty */
    assert_int_equal(objfmt_writer_add(w, 5, &b, p), 0);
    assert_int_equal(objfmt_writer_add(w, 5, &b, p), SK_ERR_INVAL); /* same offsets */
    objfmt_batch o2 = {.base_offset = 15, .last_offset = 30, .record_count = 1, .size = 16};
    assert_int_equal(objfmt_writer_add(w, 5, &o2, p), SK_ERR_INVAL); /* overlap */
    assert_int_equal(objfmt_writer_add(w, 4, &b, p), SK_ERR_INVAL);  /* stream order */
    objfmt_batch bad = {.base_offset = 50, .last_offset = 40, .record_count = 1, .size = 16};
    assert_int_equal(objfmt_writer_add(w, 6, &bad, p), SK_ERR_INVAL);
    objfmt_batch nopayload = {.base_offset = 50, .last_offset = 50, .record_count = 1, .size = 4};
    assert_int_equal(objfmt_writer_add(w, 6, &nopayload, NULL), SK_ERR_INVAL);
    objfmt_batch next = {.base_offset = 20, .last_offset = 20, .record_count = 1, .size = 16};
    assert_int_equal(objfmt_writer_add(w, 5, &next, p), 0);
    assert_int_equal(objfmt_writer_add(w, 6, &b, p), 0); /* another stream may restart */
    assert_int_equal(objfmt_writer_finish(w, &iov, &cnt, &size), 0);
    assert_int_equal(objfmt_writer_add(w, 7, &b, p), SK_ERR_INVAL); /* after finish */
    assert_int_equal(objfmt_writer_finish(w, &iov, &cnt, &size), SK_ERR_INVAL);
    objfmt_writer_destroy(w);

    w = objfmt_writer_new(OBJFMT_SO, 0, 0);
    assert_int_equal(objfmt_writer_add(w, 5, &b, p), 0);
    assert_int_equal(objfmt_writer_add(w, 6, &next, p), SK_ERR_INVAL); /* SO: one stream */
    objfmt_writer_destroy(w);
    assert_null(objfmt_writer_new((objfmt_kind)9, 0, 0));
}

static void test_keys(void **state)
{
    (void)state;
    char key[OBJFMT_KEY_MAX], other[OBJFMT_KEY_MAX];
    objfmt_kind k;
    uint32_t node;
    int64_t t;
    assert_int_equal(objfmt_make_key(key, sizeof key, NULL, OBJFMT_SO, 3, 1700000000000), 0);
    assert_int_equal(strncmp(key, "data/", 5), 0);
    assert_int_equal(strlen(key), strlen("data/") + 32 + strlen("/so-3-1700000000000.obj"));
    assert_int_equal(objfmt_parse_key(key, &k, &node, &t), 0);
    assert_int_equal(k, OBJFMT_SO);
    assert_int_equal(node, 3);
    assert_int_equal(t, 1700000000000);

    assert_int_equal(objfmt_make_key(key, sizeof key, "cluster-1/", OBJFMT_SSO, 4000000000u, 5), 0);
    assert_int_equal(strncmp(key, "cluster-1/data/", 15), 0);
    assert_int_equal(objfmt_parse_key(key, &k, &node, &t), 0);
    assert_int_equal(k, OBJFMT_SSO);
    assert_int_equal(node, 4000000000u);
    assert_int_equal(t, 5);

    /* no coordination needed: names do not collide */
    assert_int_equal(objfmt_make_key(other, sizeof other, "cluster-1", OBJFMT_SSO, 4000000000u, 5), 0);
    assert_string_not_equal(key, other);

    assert_int_equal(objfmt_make_key(key, 20, NULL, OBJFMT_SO, 1, 1), SK_ERR_INVAL);
    const char *bad[] = {"", "data/abc/so-1-1.obj", "so-1-1.obj",
                         "data/0123456789abcdef0123456789abcdef/xo-1-1.obj",
                         "data/0123456789abcdef0123456789abcdeg/so-1-1.obj",
                         "data/0123456789abcdef0123456789abcdef/so-1-1.bin",
                         "data/0123456789abcdef0123456789abcdef/so--1.obj",
                         "xdata/0123456789abcdef0123456789abcdef/so-1-1.obj",
                         "data/0123456789abcdef0123456789abcdef/so-99999999999-1.obj"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(objfmt_parse_key(bad[i], &k, &node, &t), SK_ERR_PARSE);
    assert_int_equal(objfmt_parse_key("p/q/data/0123456789abcdef0123456789abcdef/sso-7-42.obj", &k,
                                      &node, &t),
                     0);
    assert_int_equal(node, 7);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sso_roundtrip),
        cmocka_unit_test(test_so_and_big_batches),
        cmocka_unit_test(test_writer_known_crc),
        cmocka_unit_test(test_large_index_needs_second_read),
        cmocka_unit_test(test_corruption),
        cmocka_unit_test(test_random_damage),
        cmocka_unit_test(test_writer_misuse),
        cmocka_unit_test(test_keys),
    };
    return cmocka_run_group_tests_name("objfmt", tests, NULL, NULL);
}
