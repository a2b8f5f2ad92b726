/*
 * Produce caches batches in place, in the request frame that carried them
 * (append.h): the lifetimes this creates.
 *
 * The frame lives as long as its request or any cache entry that keeps
 * bytes of it, whichever goes last: the request going first leaves the
 * entries' bytes intact; an entry evicted while a fetch response or an
 * upload job holds it keeps the frame until that hold is put; a topic
 * removed under held entries frees the frame once, with the last hold. The
 * cache counts the part of the frame no entry covers on one entry, so that
 * its size returns to zero when the last entry goes.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "upcache.h"

#include "cache_fx.c"

/* A request frame as net.c makes one, counting its frees. */
typedef struct {
    sk_ref ref;
    uint8_t bytes[4096];
} tframe;

static int frames_freed;

static void tframe_drop(sk_ref *ref)
{
    frames_freed++;
    free(ref);
}

static tframe *tframe_new(void)
{
    tframe *fr = malloc(sizeof *fr);
    assert_non_null(fr);
    sk_ref_init(&fr->ref, tframe_drop); /* the request's hold */
    for (size_t i = 0; i < sizeof fr->bytes; i++)
        fr->bytes[i] = (uint8_t)(i * 7);
    return fr;
}

static int setup(void **state)
{
    frames_freed = 0;
    return cache_fx_setup(state, 2);
}

static int teardown(void **state)
{
    return cache_fx_teardown(state);
}

/* Caches [at, at + len) of fr in place for partition `part`, as sk_append
 * does: the entry holds the frame, the cache owns the entry (its real
 * drop, which puts the frame). */
static sk_cbatch *add_in_place(fixture *f, tframe *fr, int32_t part, int64_t base, wal_lsn lsn,
                               uint32_t at, uint32_t len)
{
    sk_part *p = f->t->parts[part];
    sk_cbatch *b = calloc(1, sizeof *b);
    assert_non_null(b);
    b->base = b->last = base;
    b->lsn = lsn;
    b->len = len;
    b->data = fr->bytes + at;
    sk_ref_hold(&fr->ref);
    b->backing = &fr->ref;
    assert_true(sk_cache_add(&f->n, p, b));
    p->next_offset = p->hw = base + 1;
    return b;
}

/* The oldest cached batch of partition `part`. */
static sk_cbatch *cq_first(fixture *f, int32_t part)
{
    sk_part *p = f->t->parts[part];
    assert_true(p->cq_len > 0);
    return p->cq[p->cq_head];
}

/* A request whose frame carried two batches, both cached in place (the
 * first partition 0's offset 0 at LSN 100, frame bytes [0, 512); the second
 * as given, right after it), then answered and freed: only the entries hold
 * the frame now. */
static tframe *answered(fixture *f, int32_t part, int64_t base, wal_lsn lsn, uint32_t len)
{
    tframe *fr = tframe_new();
    add_in_place(f, fr, 0, 0, 100, 0, 512);
    add_in_place(f, fr, part, base, lsn, 512, len);
    sk_ref_put(&fr->ref);
    return fr;
}

static void assert_frame_bytes(const uint8_t *p, uint32_t at, uint32_t len)
{
    for (uint32_t i = 0; i < len; i++)
        assert_int_equal(p[i], (uint8_t)((at + i) * 7));
}

/* The request is answered and freed first: the cached bytes stay, and the
 * frame goes with the last entry. */
static void test_inplace_frame_outlives_request(void **state)
{
    fixture *f = *state;
    answered(f, 1, 0, 200, 2000);
    assert_int_equal(frames_freed, 0);
    assert_frame_bytes(cq_first(f, 0)->data, 0, 512);
    assert_frame_bytes(cq_first(f, 1)->data, 512, 2000);
    evict_all(f);
    assert_int_equal(frames_freed, 1);
    assert_int_equal(f->n.cache_bytes, 0);
}

/* An entry a fetch response holds survives its eviction, and so does the
 * frame under it; the response's put frees both. */
static void test_inplace_fetch_hold_keeps_frame(void **state)
{
    fixture *f = *state;
    answered(f, 0, 1, 200, 512);
    kc_bytes segs[2];
    sk_ref *refs[2];
    int64_t bytes;
    bool miss;
    int n = sk_part_cached(f->t->parts[0], 0, 2, 1 << 20, segs, refs, 2, &bytes, &miss);
    assert_int_equal(n, 2);
    sk_ref_hold(refs[1]);
    evict_all(f);
    assert_int_equal(frames_freed, 0);
    assert_frame_bytes(segs[1].p, 512, 512);
    sk_ref_put(refs[1]);
    assert_int_equal(frames_freed, 1);
}

/* An upload job's holds keep the frame past eviction until the release. */
static void test_inplace_upload_hold_keeps_frame(void **state)
{
    fixture *f = *state;
    answered(f, 1, 0, 900, 900);
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 0, 10000, UINT64_MAX, &c), 0);
    assert_int_equal(c.n, 2);
    evict_all(f);
    assert_int_equal(frames_freed, 0);
    const sk_upbatch *u = sk_upcache_at(&c, 900);
    assert_non_null(u);
    assert_frame_bytes(u->data, 512, 900);
    sk_upcache_release(&c);
    assert_int_equal(frames_freed, 1);
}

/* The frame's bytes no entry covers count once in the cache's size, and
 * leave it with their entry. */
static void test_inplace_frame_charged_once(void **state)
{
    fixture *f = *state;
    tframe *fr = tframe_new();
    add_in_place(f, fr, 0, 0, 100, 10, 1000);
    sk_cbatch *last = add_in_place(f, fr, 1, 0, 200, 1010, 3000);
    sk_cache_charge(&f->n, last, (uint32_t)sizeof fr->bytes - 4000);
    assert_int_equal(f->n.cache_bytes, sizeof fr->bytes);
    sk_ref_put(&fr->ref);
    evict_all(f);
    assert_int_equal(f->n.cache_bytes, 0);
    assert_int_equal(frames_freed, 1);
}

/* Removing the topic under a held entry frees the frame once, at the last
 * hold. */
static void test_inplace_topic_removed_under_hold(void **state)
{
    fixture *f = *state;
    tframe *fr = tframe_new();
    sk_cbatch *a = add_in_place(f, fr, 0, 0, 100, 0, 256);
    add_in_place(f, fr, 1, 0, 200, 256, 256);
    sk_ref_hold(&a->ref); /* a response still sending it */
    sk_ref_put(&fr->ref);
    sk_topic_remove(&f->n, f->t);
    f->t = NULL;
    assert_int_equal(frames_freed, 0);
    assert_frame_bytes(a->data, 0, 256);
    sk_ref_put(&a->ref);
    assert_int_equal(frames_freed, 1);
    assert_int_equal(f->n.cache_bytes, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_inplace_frame_outlives_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inplace_fetch_hold_keeps_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inplace_upload_hold_keeps_frame, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inplace_frame_charged_once, setup, teardown),
        cmocka_unit_test_setup_teardown(test_inplace_topic_removed_under_hold, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
