/*
 * Fetch responses send cached batches by reference: the lifetimes.
 *
 * A WAL cache entry a response points at survives its eviction until the
 * response lets go; the encoder leaves owned record pieces out of the frame
 * and the connection's output takes them by reference, so the bytes a client
 * receives are the ones a plain encoding gives; a response freed before it
 * is queued, or an output buffer freed with the response unsent, drops every
 * hold; compaction's drop of old entries spares the held ones too.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <event2/buffer.h>

#include "dispatch.h"
#include "kmsg.h"
#include "net.h"
#include "plog.h"
#include "tconf.h"

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
    memset(b->data, fill, len);
    sk_cache_add(&f->n, p, b);
    b->ref.drop = counting_free;
    p->next_offset = p->hw = base + 1;
    return b;
}

static void evict_all(fixture *f)
{
    f->cfg.wal_cache_bytes = 0;
    f->n.store_applied = 1 << 30;
    sk_cache_evict(&f->n);
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

/* A one-partition Fetch response (v12, flexible) whose records are the
 * cached batches of the fixture's partition. */
static sk_req *fetch_response(fixture *f, kp_FetchResponse *resp, bool owned)
{
    static kp_FetchResponse_FetchableTopicResponse tr;
    static kp_FetchResponse_PartitionData pd;
    static kc_bytes segs[8];
    static sk_ref *refs[8];
    int64_t bytes;
    bool miss;
    int n = sk_part_cached(f->t->parts[0], 0, f->t->parts[0]->hw, 1 << 20, segs, refs, 8, &bytes,
                           &miss);
    assert_true(n > 0);
    kc_init(&kp_FetchResponse_desc, resp);
    kc_init(&kp_FetchResponse_FetchableTopicResponse_desc, &tr);
    kc_init(&kp_FetchResponse_PartitionData_desc, &pd);
    pd.high_watermark = f->t->parts[0]->hw;
    pd.records = (kc_records){NULL, (int32_t)bytes, n, segs, owned ? refs : NULL};
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
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
