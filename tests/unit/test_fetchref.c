/*
 * Fetch responses send cached batches by reference: the lifetimes.
 *
 * A WAL cache entry a response points at survives its eviction until the
 * response lets go; the encoder leaves owned record pieces out of the frame
 * and the connection's output takes them by reference, so the bytes a client
 * receives are the ones a plain encoding gives; a response freed before it
 * is queued, or an output buffer freed with the response unsent, drops every
 * hold; compaction's drop of old entries spares the held ones too. The same
 * for blocks of the block cache (batches read from objects): a held block
 * survives its eviction, and a response queued on a connection that closes,
 * or still queued when the node shuts down, frees it once, whether the
 * cache goes before or after.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "blockcache.h"
#include "sk_crc32c.h"
#include "config.h"
#include "dispatch.h"
#include "kmsg.h"
#include "net.h"
#include "objfmt.h"
#include "plog.h"
#include "tconf.h"
#include "tobject.h"

#include "cache_fx.c"

static int setup(void **state)
{
    return cache_fx_setup(state, 1);
}

static int teardown(void **state)
{
    return cache_fx_teardown(state);
}

/* Appends a cache entry of `len` bytes filled with `fill` at `base`. */
static sk_cbatch *add(fixture *f, int64_t base, uint32_t len, uint8_t fill)
{
    sk_part *p = f->t->parts[0];
    sk_cbatch *b = calloc(1, sizeof *b + len);
    assert_non_null(b);
    b->base = base;
    b->last = base;
    b->lsn = (wal_lsn)base + 1;
    b->len = len;
    b->data = (uint8_t *)(b + 1);
    memset(b->data, fill, len);
    assert_true(sk_cache_add(&f->n, p, b));
    b->ref.drop = counting_free;
    p->next_offset = p->hw = base + 1;
    return b;
}

/* Held by a response, an evicted entry leaves the cache but keeps its bytes;
 * the last hold frees it. */
static void test_fetchref_evicted_entry_lives_until_released(void **state)
{
    fixture *f = *state;
    add(f, 0, 100, 0xa1);
    add(f, 1, 200, 0xb2);
    kc_bytes segs[4];
    sk_ref *refs[4];
    int64_t bytes;
    bool miss;
    int n = sk_part_cached(f->t->parts[0], 0, 2, 1 << 20, segs, refs, 4, &bytes, &miss);
    assert_int_equal(n, 2);
    assert_int_equal(bytes, 300);
    sk_ref_hold(refs[1]); /* a response keeps the second batch only */
    evict_all(f);
    assert_int_equal(f->n.cache_bytes, 0);
    assert_int_equal(f->t->parts[0]->cq_len, 0);
    assert_int_equal(drops, 1); /* the unheld one is gone at once */
    for (int i = 0; i < 200; i++)
        assert_int_equal(segs[1].p[i], 0xb2); /* not freed, not overwritten */
    sk_ref_put(refs[1]);
    assert_int_equal(drops, 2);
}

/* An entry still in the cache is not freed when a response lets go. */
static void test_fetchref_release_before_eviction(void **state)
{
    fixture *f = *state;
    sk_cbatch *b = add(f, 0, 64, 0x11);
    sk_ref_hold(&b->ref);
    sk_ref_put(&b->ref);
    assert_int_equal(drops, 0);
    assert_int_equal(f->n.cache_bytes, 64);
    evict_all(f);
    assert_int_equal(drops, 1);
}

/* Compaction's drop of old entries lets go of the cache's hold only: a
 * response still holding one keeps its bytes. */
static void test_fetchref_dropped_entry_lives_until_released(void **state)
{
    fixture *f = *state;
    sk_cbatch *b = add(f, 0, 128, 0x5c);
    add(f, 1, 64, 0x5d);
    sk_ref_hold(&b->ref);
    f->n.store_applied = 1 << 30;
    sk_cache_drop_below(&f->n, f->t->parts[0], 2);
    assert_int_equal(f->n.cache_bytes, 0);
    assert_int_equal(drops, 1);
    for (int i = 0; i < 128; i++)
        assert_int_equal(b->data[i], 0x5c);
    sk_ref_put(&b->ref);
    assert_int_equal(drops, 2);
}

/* A one-partition Fetch response (v12, flexible) whose records are segs. */
static sk_req *records_response(kp_FetchResponse *resp, const kc_bytes *segs, sk_ref *const *refs,
                                int n, int64_t bytes)
{
    static kp_FetchResponse_FetchableTopicResponse tr;
    static kp_FetchResponse_PartitionData pd;
    kc_init(&kp_FetchResponse_desc, resp);
    kc_init(&kp_FetchResponse_FetchableTopicResponse_desc, &tr);
    kc_init(&kp_FetchResponse_PartitionData_desc, &pd);
    pd.high_watermark = n;
    pd.records = (kc_records){NULL, (int32_t)bytes, n, segs, refs};
    tr.topic = (kc_str){"t", 1};
    tr.partitions.n = 1;
    tr.partitions.v = &pd;
    resp->responses.n = 1;
    resp->responses.v = &tr;
    sk_req *r = calloc(1, sizeof *r);
    assert_non_null(r);
    r->entry = sk_api_lookup(1);
    assert_non_null(r->entry);
    r->version = 12;
    r->flexible = true;
    r->hdr.correlation_id = 42;
    r->resp = resp;
    return r;
}

/* The same, whose records are the cached batches of the fixture's partition. */
static sk_req *fetch_response(fixture *f, kp_FetchResponse *resp, bool owned)
{
    static kc_bytes segs[8];
    static sk_ref *refs[8];
    int64_t bytes;
    bool miss;
    int n = sk_part_cached(f->t->parts[0], 0, f->t->parts[0]->hw, 1 << 20, segs, refs, 8, &bytes,
                           &miss);
    assert_true(n > 0);
    return records_response(resp, segs, owned ? refs : NULL, n, bytes);
}

static void free_req(sk_req *r)
{
    sk_req_drop_pieces(r);
    free(r->out);
    free(r);
}

/* What a client receives is what a plain (copying) encoding gives; the
 * output holds each entry until its bytes are drained. */
static void test_fetchref_output_holds_until_written(void **state)
{
    fixture *f = *state;
    add(f, 0, 3000, 0x5a);
    add(f, 1, 5000, 0xc3);
    kp_FetchResponse resp;
    sk_req *plain = fetch_response(f, &resp, false);
    assert_int_equal(sk_req_encode(plain), 0);
    assert_int_equal(plain->npieces, 0);
    sk_req *r = fetch_response(f, &resp, true);
    assert_int_equal(sk_req_encode(r), 0);
    assert_int_equal(r->npieces, 2);
    assert_int_equal(r->out_len + 8000, plain->out_len);
    struct evbuffer *out = evbuffer_new();
    assert_non_null(out);
    size_t sent;
    assert_int_equal(sk_conn_queue_answer(out, r, &sent), 0);
    assert_int_equal(sent, plain->out_len);
    free_req(r); /* the request goes; the output still holds */
    evict_all(f);
    assert_int_equal(drops, 0);
    assert_int_equal(evbuffer_get_length(out), plain->out_len);
    uint8_t *got = malloc(plain->out_len);
    assert_non_null(got);
    assert_int_equal(evbuffer_copyout(out, got, plain->out_len), (ev_ssize_t)plain->out_len);
    assert_memory_equal(got, plain->out, plain->out_len);
    /* Written up to the middle of the second batch: the first is let go. */
    size_t head = plain->out_len - 8000; /* frame bytes around the records */
    assert_int_equal(evbuffer_drain(out, head + 4000), 0);
    assert_int_equal(drops, 1);
    assert_int_equal(evbuffer_drain(out, evbuffer_get_length(out)), 0);
    assert_int_equal(drops, 2);
    free(got);
    evbuffer_free(out);
    free_req(plain);
}

/* A connection freed with the answer unsent frees the entries with it. */
static void test_fetchref_unsent_output_freed(void **state)
{
    fixture *f = *state;
    add(f, 0, 1000, 1);
    add(f, 1, 1000, 2);
    kp_FetchResponse resp;
    sk_req *r = fetch_response(f, &resp, true);
    assert_int_equal(sk_req_encode(r), 0);
    struct evbuffer *out = evbuffer_new();
    assert_non_null(out);
    size_t sent;
    assert_int_equal(sk_conn_queue_answer(out, r, &sent), 0);
    free_req(r);
    evict_all(f);
    assert_int_equal(drops, 0);
    evbuffer_free(out);
    assert_int_equal(drops, 2);
}

/* A request freed before its answer was queued (its connection closed
 * while an earlier request ran) drops its holds. */
static void test_fetchref_unqueued_request_freed(void **state)
{
    fixture *f = *state;
    add(f, 0, 500, 9);
    kp_FetchResponse resp;
    sk_req *r = fetch_response(f, &resp, true);
    assert_int_equal(sk_req_encode(r), 0);
    assert_int_equal(r->npieces, 1);
    evict_all(f);
    assert_int_equal(drops, 0);
    free_req(r);
    assert_int_equal(drops, 1);
}

/* Encoding again (a fetch answered after a re-evaluation would) does not
 * leak or double the holds. */
static void test_fetchref_encode_twice(void **state)
{
    fixture *f = *state;
    add(f, 0, 700, 3);
    kp_FetchResponse resp;
    sk_req *r = fetch_response(f, &resp, true);
    assert_int_equal(sk_req_encode(r), 0);
    assert_int_equal(sk_req_encode(r), 0);
    evict_all(f);
    assert_int_equal(drops, 0);
    free_req(r);
    assert_int_equal(drops, 1);
}

/* ---- blocks of the block cache ---- */

#define OBJ_BATCH 3000 /* bytes; two batches per block, four blocks */

struct obj {
    uint8_t *bytes;
    uint64_t size;
    objfmt_reader *r;
    const objfmt_entry *blocks;
    size_t nblocks;
};

static void obj_make(struct obj *o)
{
    memset(o, 0, sizeof *o);
    objfmt_writer *w = objfmt_writer_new(OBJFMT_SO, 2 * (OBJ_BATCH + OBJFMT_BATCH_HEADER), 1);
    assert_non_null(w);
    static uint8_t payload[8][OBJ_BATCH]; /* the writer borrows it */
    for (uint64_t i = 0; i < 8; i++) {
        memset(payload[i], 0x40 + (int)i, OBJ_BATCH);
        objfmt_batch b = {i, i, 1, OBJ_BATCH};
        assert_int_equal(objfmt_writer_add(w, 1, &b, payload[i]), 0);
    }
    tobject_finish(w, &o->bytes, &o->size, &o->r);
    o->blocks = objfmt_reader_blocks(o->r, &o->nblocks);
    assert_int_equal(o->nblocks, 4);
}

static void obj_free(struct obj *o)
{
    objfmt_reader_destroy(o->r);
    free(o->bytes);
}

/* A GET that completes at once (the read then returns BLOCKCACHE_HIT). */
static void obj_fetch(void *ctx, const char *key, uint64_t off, const struct iovec *iov,
                      int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg)
{
    (void)key;
    struct obj *o = ctx;
    size_t at = 0;
    for (int i = 0; i < iovcnt; i++) {
        memcpy(iov[i].iov_base, o->bytes + off + at, iov[i].iov_len);
        crcs[i] = sk_crc32c(iov[i].iov_base, iov[i].iov_len);
        at += iov[i].iov_len;
    }
    cb(arg, 0, NULL, at, o->size);
}

static void no_cb(void *arg, int err)
{
    (void)arg;
    (void)err;
    fail();
}

/* A cache of two blocks over o. */
static blockcache *obj_cache(struct obj *o)
{
    blockcache_opts opts = {.capacity = 2 * o->blocks[0].size, .fetch = obj_fetch,
                            .fetch_ctx = o};
    blockcache *c = blockcache_new(NULL, &opts);
    assert_non_null(c);
    return c;
}

static void (*block_drop_fn)(sk_ref *);

static void counting_block_drop(sk_ref *ref)
{
    drops++;
    block_drop_fn(ref);
}

/* Reads block i (pinned into *b) and takes a hold on it, whose last drop
 * counts in `drops`. */
static sk_ref *hold_block(blockcache *c, struct obj *o, size_t i, blockcache_block **b)
{
    assert_int_equal(blockcache_read(c, "obj", o->blocks, o->nblocks, i, 1, 0, b, no_cb, NULL),
                     BLOCKCACHE_HIT);
    sk_ref *h = blockcache_hold(*b);
    block_drop_fn = h->drop;
    h->drop = counting_block_drop;
    return h;
}

/* Reads every other block in turn: the two-block cache evicts block 0. */
static void read_others(blockcache *c, struct obj *o)
{
    for (size_t i = 1; i < o->nblocks; i++) {
        blockcache_block *b;
        assert_int_equal(blockcache_read(c, "obj", o->blocks, o->nblocks, i, 1, 0, &b, no_cb,
                                         NULL),
                         BLOCKCACHE_HIT);
        blockcache_release(c, b);
    }
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.blocks, 2);
    assert_true(st.evictions >= 2);
}

/* Evicted while a response holds it, a block leaves the cache (and its byte
 * count) but keeps its bytes, unchanged; the last hold frees it, once. */
static void test_fetchref_block_evicted_while_held(void **state)
{
    (void)state;
    struct obj o;
    obj_make(&o);
    blockcache *c = obj_cache(&o);
    blockcache_block *b;
    sk_ref *h = hold_block(c, &o, 0, &b);
    size_t len;
    const uint8_t *d = blockcache_data(b, &len);
    blockcache_release(c, b);
    read_others(c, &o);
    blockcache_stats st;
    blockcache_stats_get(c, &st);
    assert_int_equal(st.used, 2 * o.blocks[0].size);
    assert_int_equal(drops, 0);
    assert_memory_equal(d, o.bytes + o.blocks[0].position, len);
    sk_ref_hold(h); /* a second response */
    sk_ref_put(h);
    assert_int_equal(drops, 0);
    sk_ref_put(h);
    assert_int_equal(drops, 1);
    blockcache_destroy(c);
    assert_int_equal(drops, 1);
    obj_free(&o);
}

/* A response whose records are block 0's two batches, by reference (as an
 * object read gives them), encoded; *plain is the copying encoding. */
static sk_req *block_response(blockcache *c, struct obj *o, kp_FetchResponse *resp,
                              sk_req **plain)
{
    static kc_bytes segs[2];
    static sk_ref *refs[2];
    blockcache_block *b;
    sk_ref *h = hold_block(c, o, 0, &b);
    size_t len;
    objfmt_iter it;
    const uint8_t *d = blockcache_data(b, &len);
    objfmt_iter_init_verified(&it, d, len);
    objfmt_batch bt;
    for (int i = 0; i < 2; i++) {
        assert_int_equal(objfmt_iter_next(&it, &bt, &segs[i].p), 1);
        segs[i].len = (int32_t)bt.size;
        refs[i] = h;
    }
    *plain = records_response(resp, segs, NULL, 2, 2 * OBJ_BATCH);
    assert_int_equal(sk_req_encode(*plain), 0);
    sk_req *r = records_response(resp, segs, refs, 2, 2 * OBJ_BATCH);
    assert_int_equal(sk_req_encode(r), 0);
    assert_int_equal(r->npieces, 2);
    sk_ref_put(h); /* the read's own hold goes with its result */
    blockcache_release(c, b);
    return r;
}

/* The response queued on an output buffer: *out. */
static void queue(sk_req *r, struct evbuffer **out)
{
    *out = evbuffer_new();
    assert_non_null(*out);
    size_t sent;
    assert_int_equal(sk_conn_queue_answer(*out, r, &sent), 0);
    free_req(r);
}

/* A connection closed with such a response queued (unsent) frees the block
 * once, after its eviction. */
static void test_fetchref_block_conn_closed_with_response(void **state)
{
    (void)state;
    struct obj o;
    obj_make(&o);
    blockcache *c = obj_cache(&o);
    kp_FetchResponse resp;
    sk_req *plain;
    struct evbuffer *out;
    queue(block_response(c, &o, &resp, &plain), &out);
    read_others(c, &o);
    assert_int_equal(drops, 0);
    size_t n = evbuffer_get_length(out);
    assert_int_equal(n, plain->out_len);
    uint8_t *got = malloc(n);
    assert_non_null(got);
    assert_int_equal(evbuffer_copyout(out, got, n), (ev_ssize_t)n);
    assert_memory_equal(got, plain->out, n);
    evbuffer_drain(out, n - OBJ_BATCH); /* the first batch is written */
    assert_int_equal(drops, 0);
    evbuffer_free(out); /* closed with the rest unsent */
    assert_int_equal(drops, 1);
    free(got);
    free_req(plain);
    blockcache_destroy(c);
    assert_int_equal(drops, 1);
    obj_free(&o);
}

/* Shutdown with a response in flight: the connection's output goes before
 * the cache (node.c), then the cache frees the block, once. In the other
 * order the bytes stay valid until the output goes, which frees them. */
static void test_fetchref_block_shutdown_with_response(void **state)
{
    (void)state;
    struct obj o;
    obj_make(&o);
    kp_FetchResponse resp;
    sk_req *plain;
    struct evbuffer *out;
    blockcache *c = obj_cache(&o);
    queue(block_response(c, &o, &resp, &plain), &out);
    free_req(plain);
    evbuffer_free(out); /* the connection closes: the cache alone keeps it */
    assert_int_equal(drops, 0);
    blockcache_destroy(c);
    assert_int_equal(drops, 1);

    c = obj_cache(&o);
    queue(block_response(c, &o, &resp, &plain), &out);
    blockcache_destroy(c);
    assert_int_equal(drops, 1);
    uint8_t *got = malloc(plain->out_len);
    assert_non_null(got);
    assert_int_equal(evbuffer_copyout(out, got, plain->out_len), (ev_ssize_t)plain->out_len);
    assert_memory_equal(got, plain->out, plain->out_len);
    evbuffer_free(out);
    assert_int_equal(drops, 2);
    free(got);
    free_req(plain);
    obj_free(&o);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_fetchref_evicted_entry_lives_until_released, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_release_before_eviction, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_dropped_entry_lives_until_released, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_output_holds_until_written, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_unsent_output_freed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_unqueued_request_freed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_encode_twice, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_block_evicted_while_held, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_block_conn_closed_with_response, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_fetchref_block_shutdown_with_response, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
