/* objupload: the split rule (streams at the threshold get a StreamObject,
 * the rest share one StreamSetObject, threshold 0 splits every stream),
 * sorting, holes in a stream, the batch set's memory cap, batches by
 * reference, the arena (chunks, large batches, reuse after a reset, what a
 * reset keeps), and objup_put against a file store:
 * the objects' kinds, keys, ranges (offsets, sizes, records, largest
 * timestamps) and bytes read back through objfmt; an upload in pieces
 * (objup_put_start/_finish: the set grows while the first piece's PUTs go)
 * and the seam between its pieces. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "objfmt.h"
#include "objstore.h"
#include "objupload.h"
#include "s3sink_fx.c"
#include "sk_err.h"

static objup_batch mk(uint64_t stream, int64_t base, uint32_t size)
{
    return (objup_batch){stream, base, base + 9, base * 10, 10, size, 0, false, 0};
}

static void test_split_rule(void **state)
{
    (void)state;
    /* stream 1: 300 bytes, 2: 100, 3: 250, 4: 50 */
    objup_batch b[] = {mk(1, 0, 100), mk(1, 10, 200), mk(2, 0, 100), mk(3, 0, 125),
                       mk(3, 10, 125), mk(4, 5, 50)};
    objup_run r[6];
    size_t n = objup_split(b, 6, 250, r);
    assert_int_equal(n, 4);
    assert_true(r[0].first == 0 && r[0].n == 2 && r[0].bytes == 300 && r[0].own);
    assert_true(r[1].first == 2 && r[1].n == 1 && r[1].bytes == 100 && !r[1].own);
    assert_true(r[2].first == 3 && r[2].n == 2 && r[2].bytes == 250 && r[2].own); /* >= */
    assert_true(r[3].first == 5 && r[3].n == 1 && r[3].bytes == 50 && !r[3].own);
    /* 0: every stream its own StreamObject */
    n = objup_split(b, 6, 0, r);
    for (size_t i = 0; i < n; i++)
        assert_true(r[i].own);
    /* above everything: one StreamSetObject */
    n = objup_split(b, 6, 1000, r);
    for (size_t i = 0; i < n; i++)
        assert_false(r[i].own);
    assert_int_equal(objup_split(b, 0, 1, r), 0);
}

static void test_sort(void **state)
{
    (void)state;
    objup_batch b[] = {mk(3, 20, 1), mk(1, 10, 1), mk(3, 0, 1), mk(2, 0, 1), mk(1, 0, 1)};
    objup_sort(b, 5);
    uint64_t want[][2] = {{1, 0}, {1, 10}, {2, 0}, {3, 0}, {3, 20}};
    for (int i = 0; i < 5; i++) {
        assert_int_equal(b[i].stream, want[i][0]);
        assert_int_equal(b[i].base, want[i][1]);
    }
}

static void test_holes(void **state)
{
    (void)state;
    uint64_t stream = 0;
    int64_t before = 0, after = 0;
    /* mk's batches hold 10 offsets: base .. base + 9 */
    objup_batch ok[] = {mk(1, 0, 1), mk(1, 10, 1), mk(2, 500, 1), mk(3, 0, 1), mk(3, 10, 1)};
    assert_false(objup_first_hole(ok, 5, &stream, &before, &after));
    assert_false(objup_first_hole(ok, 0, &stream, &before, &after));
    /* stream 2 skips 20..29: adopted batches missing below newer ones */
    objup_batch holed[] = {mk(1, 0, 1), mk(2, 0, 1), mk(2, 10, 1), mk(2, 30, 1), mk(3, 50, 1)};
    assert_true(objup_first_hole(holed, 5, &stream, &before, &after));
    assert_int_equal(stream, 2);
    assert_int_equal(before, 19);
    assert_int_equal(after, 30);
    /* through a set, which sorts first */
    uint8_t payload[1] = {0};
    objup_set *s = objup_set_new(0);
    assert_non_null(s);
    objup_batch b[] = {mk(7, 40, 1), mk(7, 0, 1), mk(7, 10, 1)};
    for (int i = 0; i < 3; i++)
        assert_int_equal(objup_set_add(s, &b[i], payload), 0);
    assert_true(objup_set_hole(s, &stream, &before, &after));
    assert_true(stream == 7 && before == 19 && after == 40);
    objup_batch fill = mk(7, 20, 1), fill2 = mk(7, 30, 1);
    assert_int_equal(objup_set_add(s, &fill, payload), 0);
    assert_int_equal(objup_set_add(s, &fill2, payload), 0);
    assert_false(objup_set_hole(s, &stream, &before, &after));
    objup_set_destroy(s);
}

/* Where two pieces of an upload meet: each stream of the second must go on
 * from its last offset in the first. */
static void test_seam(void **state)
{
    (void)state;
    uint64_t stream = 0;
    int64_t before = 0, after = 0;
    objup_batch a[] = {mk(1, 0, 1), mk(1, 10, 1), mk(2, 0, 1), mk(4, 100, 1)};
    objup_batch ok[] = {mk(1, 20, 1), mk(3, 0, 1), mk(4, 110, 1), mk(4, 120, 1)};
    assert_false(objup_seam_hole(a, 4, ok, 4, &stream, &before, &after));
    assert_false(objup_seam_hole(a, 0, ok, 4, &stream, &before, &after));
    assert_false(objup_seam_hole(a, 4, ok, 0, &stream, &before, &after));
    objup_batch skip[] = {mk(1, 20, 1), mk(2, 20, 1)}; /* stream 2 skips 10..19 */
    assert_true(objup_seam_hole(a, 4, skip, 2, &stream, &before, &after));
    assert_true(stream == 2 && before == 9 && after == 20);
    objup_batch again[] = {mk(1, 20, 1), mk(4, 105, 1)}; /* stream 4 repeats 105..109 */
    assert_true(objup_seam_hole(a, 4, again, 2, &stream, &before, &after));
    assert_true(stream == 4 && before == 109 && after == 105);

    /* through a set: the first piece sorted, the second added out of order */
    uint8_t payload[1] = {0};
    objup_set *s = objup_set_new(0);
    assert_non_null(s);
    objup_batch p1[] = {mk(7, 10, 1), mk(7, 0, 1), mk(8, 0, 1)};
    for (int i = 0; i < 3; i++)
        assert_int_equal(objup_set_add(s, &p1[i], payload), 0);
    assert_false(objup_set_hole_from(s, 0, &stream, &before, &after));
    objup_batch p2[] = {mk(8, 20, 1), mk(7, 30, 1), mk(7, 20, 1), mk(8, 10, 1)};
    for (int i = 0; i < 4; i++)
        assert_int_equal(objup_set_add(s, &p2[i], payload), 0);
    assert_false(objup_set_hole_from(s, 3, &stream, &before, &after));
    size_t n;
    const objup_batch *v = objup_set_batches(s, &n);
    assert_true(v[0].base == 0 && v[1].base == 10 && v[3].stream == 7 && v[3].base == 20 &&
                v[6].stream == 8 && v[6].base == 20); /* each piece sorted on its own */
    objup_batch late = mk(9, 0, 1), gap = mk(7, 50, 1);
    assert_int_equal(objup_set_add(s, &late, payload), 0);
    assert_int_equal(objup_set_add(s, &gap, payload), 0);
    assert_true(objup_set_hole_from(s, 3, &stream, &before, &after)); /* inside the piece */
    assert_true(stream == 7 && before == 39 && after == 50);
    objup_set_destroy(s);
}

static void test_set_cap(void **state)
{
    (void)state;
    uint8_t payload[3000];
    memset(payload, 7, sizeof payload);
    objup_set *s = objup_set_new(5000);
    assert_non_null(s);
    objup_batch b = mk(1, 0, 2000);
    assert_int_equal(objup_set_add(s, &b, payload), 0);
    assert_false(objup_set_full(s));
    b = mk(1, 10, 2000);
    assert_int_equal(objup_set_add(s, &b, payload), 0);
    assert_false(objup_set_full(s));
    b = mk(1, 20, 3000); /* crosses the limit: taken */
    assert_int_equal(objup_set_add(s, &b, payload), 0);
    assert_true(objup_set_full(s));
    assert_int_equal(objup_set_bytes(s), 7000);
    b = mk(1, 30, 1);
    assert_int_equal(objup_set_add(s, &b, payload), SK_ERR_NOMEM);
    assert_int_equal(objup_set_count(s), 3);
    objup_set_destroy(s);
    /* no limit */
    s = objup_set_new(0);
    for (int i = 0; i < 3000; i++) {
        b = mk(1, i * 10, 3000);
        assert_int_equal(objup_set_add(s, &b, payload), 0);
    }
    assert_false(objup_set_full(s));
    assert_int_equal(objup_set_bytes(s), 9000000);
    objup_set_destroy(s);
}


/* The limit counts referenced bytes like copied ones; a referenced batch
 * keeps the caller's pointer. */
static void test_set_ref_cap(void **state)
{
    (void)state;
    static uint8_t payload[3000];
    objup_set *s = objup_set_new(5000);
    assert_non_null(s);
    objup_batch b = mk(1, 0, 3000);
    b.data = payload;
    assert_int_equal(objup_set_add_ref(s, &b), 0);
    assert_false(objup_set_full(s));
    b = mk(1, 10, 2500);
    assert_int_equal(objup_set_add(s, &b, payload), 0);
    assert_true(objup_set_full(s));
    b.data = payload;
    assert_int_equal(objup_set_add_ref(s, &b), SK_ERR_NOMEM);
    size_t n;
    const objup_batch *v = objup_set_batches(s, &n);
    assert_int_equal(n, 2);
    assert_ptr_equal(v[0].data, payload);
    assert_ptr_not_equal(v[1].data, payload); /* the copy */
    assert_int_equal(objup_set_arena_bytes(s), OBJUP_CHUNK_BYTES);
    objup_set_destroy(s);
}

#define MiB (1u << 20)

/* Copies of `count` batches of `size` bytes, byte i of batch k being k + i. */
static void add_copies(objup_set *s, int count, uint32_t size, uint8_t *buf)
{
    for (int k = 0; k < count; k++) {
        for (uint32_t i = 0; i < size; i++)
            buf[i] = (uint8_t)(k + i);
        objup_batch b = mk(1, k * 10, size);
        assert_int_equal(objup_set_add(s, &b, buf), 0);
    }
}

static void check_copies(const objup_set *s, uint32_t size)
{
    size_t n;
    const objup_batch *v = objup_set_batches(s, &n);
    for (size_t k = 0; k < n; k++)
        for (uint32_t i = 0; i < size; i += 4099)
            assert_int_equal(v[k].data[i], (uint8_t)(k + i));
}

/* Chunks fill in turn, a batch larger than a chunk gets its own, a reset
 * keeps the standard chunks up to OBJUP_ARENA_KEEP and the next use copies
 * into the same memory. */
static void test_set_arena(void **state)
{
    (void)state;
    uint8_t *buf = malloc(10 * MiB);
    assert_non_null(buf);
    objup_set *s = objup_set_new(0);
    assert_non_null(s);
    add_copies(s, 20, 3 * MiB / 2, buf); /* 5 a chunk: 4 chunks */
    check_copies(s, 3 * MiB / 2);
    assert_int_equal(objup_set_arena_bytes(s), 4 * (uint64_t)OBJUP_CHUNK_BYTES);
    objup_batch big = mk(2, 0, 10 * MiB);
    memset(buf, 0x5a, 10 * MiB);
    assert_int_equal(objup_set_add(s, &big, buf), 0);
    assert_int_equal(objup_set_arena_bytes(s), 4 * (uint64_t)OBJUP_CHUNK_BYTES + 10 * MiB);
    size_t n;
    const uint8_t *first = objup_set_batches(s, &n)[0].data;
    assert_int_equal(objup_set_batches(s, &n)[20].data[10 * MiB - 1], 0x5a);

    objup_set_reset(s, 0);
    assert_int_equal(objup_set_count(s), 0);
    assert_int_equal(objup_set_bytes(s), 0);
    assert_int_equal(objup_set_arena_bytes(s), 4 * (uint64_t)OBJUP_CHUNK_BYTES);
    add_copies(s, 20, 3 * MiB / 2, buf);
    check_copies(s, 3 * MiB / 2);
    assert_ptr_equal(objup_set_batches(s, &n)[0].data, first); /* the same pages */
    assert_int_equal(objup_set_arena_bytes(s), 4 * (uint64_t)OBJUP_CHUNK_BYTES);

    /* past what a reset keeps */
    objup_set_reset(s, 0);
    int many = (int)(OBJUP_ARENA_KEEP / MiB) + 16;
    add_copies(s, many, MiB, buf);
    check_copies(s, MiB);
    assert_true(objup_set_arena_bytes(s) > OBJUP_ARENA_KEEP);
    objup_set_reset(s, 4096);
    assert_int_equal(objup_set_arena_bytes(s), OBJUP_ARENA_KEEP);
    objup_batch b = mk(1, 0, 5000);
    assert_int_equal(objup_set_add(s, &b, buf), 0);
    assert_true(objup_set_full(s)); /* the new limit */
    objup_set_destroy(s);
    free(buf);
}

/* Batches of streams 10 (big), 20 and 30 (small), added out of order. */
static objup_set *sample_set(void)
{
    objup_set *s = objup_set_new(0);
    int64_t next[3] = {0, 0, 0};
    for (int i = 0; i < 60; i++) {
        int k = i % 5 < 3 ? 0 : 1 + i % 2;
        uint32_t size = k == 0 ? 4000 : 300;
        uint8_t *p = fx_payload(10 + 10 * (uint64_t)k, next[k], size);
        /* timestamps peak in the middle: the largest is not the last */
        int64_t ts = 1000 + (i < 30 ? i : 60 - i);
        objup_batch b = {10 + 10 * (uint64_t)k, next[k], next[k] + 4, ts, 5, size, 0, false, 0};
        assert_int_equal(objup_set_add(s, &b, p), 0);
        next[k] += 5;
        free(p);
    }
    return s;
}

static void test_put_split(void **state)
{
    fx *f = *state;
    objup_set *s = sample_set();
    objup_params p = {50000, 16384, 7};
    objreg_objects out = {0};
    assert_int_equal(objup_put(s, f->os, &p, &out), 0);
    /* stream 10: 36 x 4000 bytes, its own SO; 20 and 30 in one SSO, last */
    assert_int_equal(out.n, 2);
    assert_int_equal(out.v[0].kind, OBJFMT_SO);
    assert_int_equal(out.v[1].kind, OBJFMT_SSO);
    assert_int_equal(out.v[0].nranges, 1);
    assert_int_equal(out.v[1].nranges, 2);
    const objreg_range *r = &out.v[0].ranges[0];
    assert_true(r->stream == 10 && r->start == 0 && r->end == 36 * 5 - 1 &&
                r->records == 36 * 5);
    assert_int_equal(r->max_ts, 1000 + 30); /* i = 30, a big batch */
    r = &out.v[1].ranges[0];
    assert_true(r->stream == 20 && r->start == 0 && r->end == 12 * 5 - 1);
    assert_int_equal(r->max_ts, 1000 + 28); /* i = 28 */
    r = &out.v[1].ranges[1];
    assert_true(r->stream == 30 && r->start == 0 && r->end == 12 * 5 - 1);
    assert_int_equal(r->max_ts, 1000 + 29); /* i = 29 */
    for (size_t i = 0; i < out.n; i++) {
        objfmt_kind kind;
        uint32_t node;
        int64_t created;
        assert_int_equal(objfmt_parse_key(out.v[i].key, &kind, &node, &created), 0);
        assert_true(kind == out.v[i].kind && node == 7 && created == out.v[i].created_ms);
    }
    assert_int_equal(fx_check_object(f, &out.v[0]) + fx_check_object(f, &out.v[1]), 60);
    objreg_objects_free(&out);
    objup_set_destroy(s);
}

static void test_put_all_own_and_empty(void **state)
{
    fx *f = *state;
    objup_set *s = sample_set();
    objup_params p = {0, 0, 3};
    objreg_objects out = {0};
    assert_int_equal(objup_put(s, f->os, &p, &out), 0);
    assert_int_equal(out.n, 3);
    for (size_t i = 0; i < out.n; i++) {
        assert_int_equal(out.v[i].kind, OBJFMT_SO);
        assert_int_equal(out.v[i].ranges[0].stream, 10 + 10 * i);
        fx_check_object(f, &out.v[i]);
    }
    objreg_objects_free(&out);
    objup_set_destroy(s);
    s = objup_set_new(0);
    assert_int_equal(objup_put(s, f->os, &p, &out), 0);
    assert_int_equal(out.n, 0);
    objup_set_destroy(s);
}

/* The same batches, every other one by reference, then the set reused
 * (reset) for a second upload: the objects hold the same bytes. */
static void test_put_by_ref_and_reuse(void **state)
{
    fx *f = *state;
    objup_set *s = objup_set_new(0);
    uint8_t *kept[60];
    for (int round = 0; round < 2; round++) {
        int64_t next[3] = {0, 0, 0};
        for (int i = 0; i < 60; i++) {
            int k = i % 5 < 3 ? 0 : 1 + i % 2;
            uint32_t size = k == 0 ? 4000 : 300;
            kept[i] = fx_payload(10 + 10 * (uint64_t)k, next[k], size);
            objup_batch b = {10 + 10 * (uint64_t)k, next[k], next[k] + 4, 1000 + i, 5, size,
                             kept[i], false, 0};
            assert_int_equal(i % 2 ? objup_set_add(s, &b, kept[i]) : objup_set_add_ref(s, &b), 0);
            next[k] += 5;
        }
        objup_params p = {50000, 16384, 7};
        objreg_objects out = {0};
        assert_int_equal(objup_put(s, f->os, &p, &out), 0);
        assert_int_equal(out.n, 2);
        assert_int_equal(fx_check_object(f, &out.v[0]) + fx_check_object(f, &out.v[1]), 60);
        objreg_objects_free(&out);
        objup_set_reset(s, 0);
        for (int i = 0; i < 60; i++)
            free(kept[i]);
    }
    objup_set_destroy(s);
}

static void test_put_refused(void **state)
{
    fx *f = *state;
    objup_set *s = objup_set_new(0);
    uint8_t p[10] = {0};
    objup_batch a = mk(1, 0, 10), b = mk(1, 5, 10); /* overlapping offsets */
    assert_int_equal(objup_set_add(s, &a, p), 0);
    assert_int_equal(objup_set_add(s, &b, p), 0);
    objup_params prm = {0, 0, 1};
    objreg_objects out = {0};
    assert_int_equal(objup_put(s, f->os, &prm, &out), SK_ERR_INVAL);
    assert_int_equal(out.n, 0);
    objup_set_destroy(s);
}

/* Batches of streams 10 and 20 from offset `from`, `count` of each, copied. */
static void add_piece(objup_set *s, int64_t from, int count, uint32_t size)
{
    for (int i = 0; i < count; i++)
        for (uint64_t st = 10; st <= 20; st += 10) {
            int64_t base = from + 5 * i;
            uint8_t *p = fx_payload(st, base, size);
            objup_batch b = {st, base, base + 4, 1000 + base, 5, size, 0, false, 0};
            assert_int_equal(objup_set_add(s, &b, p), 0);
            free(p);
        }
}

/* The first piece's PUTs go while the set grows (its batch array moves:
 * more than its first 1024 entries) and takes more chunks; the second
 * piece follows on. Every batch of both is in the objects, each piece's
 * own, in the order put. */
static void test_put_pieces(void **state)
{
    fx *f = *state;
    objup_set *s = objup_set_new(0);
    objup_params p = {0, 16384, 7};
    add_piece(s, 0, 100, 20000);
    const objup_batch *before = objup_set_batches(s, &(size_t){0});
    objup_flight *head = NULL, *rest = NULL;
    assert_int_equal(objup_put_start(s, 0, f->os, &p, &head), 0);
    assert_non_null(head);
    size_t first = objup_set_count(s);
    add_piece(s, 500, 1500, 3000); /* 3000 more entries, ~9 MB: a second chunk */
    assert_ptr_not_equal(objup_set_batches(s, &(size_t){0}), before);
    uint64_t stream;
    int64_t b4, af;
    assert_false(objup_set_hole_from(s, first, &stream, &b4, &af));
    assert_int_equal(objup_put_start(s, first, f->os, &p, &rest), 0);
    objreg_objects out = {0};
    assert_int_equal(objup_put_finish(head, &out), 0);
    assert_int_equal(objup_put_finish(rest, &out), 0);
    assert_int_equal(out.n, 4);
    int64_t want[4][2] = {{0, 499}, {0, 499}, {500, 7999}, {500, 7999}};
    size_t batches = 0;
    for (size_t i = 0; i < 4; i++) {
        assert_int_equal(out.v[i].kind, OBJFMT_SO);
        const objreg_range *r = &out.v[i].ranges[0];
        assert_int_equal(r->stream, 10 + 10 * (i % 2));
        assert_int_equal(r->start, want[i][0]);
        assert_int_equal(r->end, want[i][1]);
        batches += fx_check_object(f, &out.v[i]);
    }
    assert_int_equal(batches, 200 + 3000);
    objreg_objects_free(&out);
    objup_set_destroy(s);
}

/* A piece that objfmt refuses starts nothing; nothing to put is no flight. */
static void test_put_start_refused(void **state)
{
    fx *f = *state;
    objup_set *s = objup_set_new(0);
    objup_params prm = {0, 0, 1};
    objup_flight *fl = (objup_flight *)s;
    assert_int_equal(objup_put_start(s, 0, f->os, &prm, &fl), 0);
    assert_null(fl); /* an empty set */
    uint8_t p[10] = {0};
    objup_batch a = mk(1, 0, 10), b = mk(1, 5, 10);
    assert_int_equal(objup_set_add(s, &a, p), 0);
    assert_int_equal(objup_set_add(s, &b, p), 0);
    assert_int_equal(objup_put_start(s, 0, f->os, &prm, &fl), SK_ERR_INVAL);
    assert_null(fl);
    objreg_objects out = {0};
    assert_int_equal(objup_put_finish(NULL, &out), 0);
    assert_int_equal(out.n, 0);
    objup_set_destroy(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_split_rule),
        cmocka_unit_test(test_sort),
        cmocka_unit_test(test_holes),
        cmocka_unit_test(test_seam),
        cmocka_unit_test(test_set_cap),
        cmocka_unit_test(test_set_ref_cap),
        cmocka_unit_test(test_set_arena),
        cmocka_unit_test_setup_teardown(test_put_split, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_put_all_own_and_empty, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_put_refused, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_put_by_ref_and_reuse, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_put_pieces, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_put_start_refused, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
