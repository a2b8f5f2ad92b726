/* objcompact: the plan (old StreamSetObjects split, small ones merged, a
 * lone small one left alone, the byte budget, retired and rangeless objects
 * ignored, small StreamObjects of one stream merged, SOs without loaded
 * ranges skipped, SSOs before SOs), the split size of each kind of plan,
 * and runs against a file store: only the batches inside live ranges are
 * kept, byte for byte, with timestamps from the caller's function. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "objcompact.h"
#include "objfmt.h"
#include "objupload.h"
#include "s3sink_fx.c"
#include "sk_err.h"

#define NOW 1000000000
#define SMALL 1000
#define BUDGET 10000
#define FORCE 60000

static const objcompact_params params = {SMALL, BUDGET, FORCE};

static objreg_range rng[8]; /* rng[s]: a range of stream s */

static objreg_info obj(const char *key, objfmt_kind kind, uint64_t size, int64_t age_ms,
                       int stream)
{
    objreg_info o = {.kind = kind, .size = size, .created_ms = NOW - age_ms,
                     .delete_after_ms = -1, .nranges = 1};
    snprintf(o.key, sizeof o.key, "%s", key);
    rng[stream] = (objreg_range){(uint64_t)stream, 0, 9, 100, -1, 10};
    if (kind == OBJFMT_SO)
        o.ranges = &rng[stream];
    return o;
}

static void plan(const objreg_info *objs, size_t n, objcompact_plan *p)
{
    assert_int_equal(objcompact_plan_make(objs, n, &params, NOW, p), 0);
}

static void expect(const objcompact_plan *p, objcompact_what what, size_t nsrc,
                   const size_t *src, uint64_t bytes)
{
    assert_int_equal(p->what, what);
    assert_int_equal(p->nsrc, nsrc);
    for (size_t i = 0; i < nsrc; i++)
        assert_int_equal(p->src[i], src[i]);
    assert_int_equal(p->bytes, bytes);
}

static void test_plan_nothing(void **state)
{
    (void)state;
    objcompact_plan p;
    plan(NULL, 0, &p);
    expect(&p, OBJCOMPACT_NONE, 0, NULL, 0);
    objcompact_plan_free(&p);
    /* a lone small SSO is not worth rewriting; big young ones stay */
    objreg_info o[] = {obj("a", OBJFMT_SSO, 500, 0, 1), obj("b", OBJFMT_SSO, 5000, 0, 1),
                       obj("c", OBJFMT_SO, 5000, FORCE * 2, 2)};
    plan(o, 3, &p);
    expect(&p, OBJCOMPACT_NONE, 0, NULL, 0);
    objcompact_plan_free(&p);
}

static void test_plan_merge_ssos(void **state)
{
    (void)state;
    objreg_info o[] = {obj("a", OBJFMT_SSO, 500, 0, 1), obj("b", OBJFMT_SSO, 5000, 0, 1),
                       obj("c", OBJFMT_SSO, 700, 10, 1), obj("d", OBJFMT_SO, 10, 0, 2),
                       obj("e", OBJFMT_SO, 10, 0, 2)};
    objcompact_plan p;
    plan(o, 5, &p);
    expect(&p, OBJCOMPACT_MERGE_SSO, 2, (size_t[]){0, 2}, 1200); /* before the SOs */
    assert_int_equal(objcompact_split_bytes(&p, 4096), 4096);
    objcompact_plan_free(&p);
    /* retired, or without a live range: not sources */
    o[0].delete_after_ms = NOW + 5;
    o[2].nranges = 0;
    plan(o, 5, &p);
    expect(&p, OBJCOMPACT_MERGE_SO, 2, (size_t[]){3, 4}, 20);
    objcompact_plan_free(&p);
}

static void test_plan_split_old(void **state)
{
    (void)state;
    /* one old SSO is split even alone and even when big; within budget */
    objreg_info o[] = {obj("a", OBJFMT_SSO, 6000, FORCE, 1), obj("b", OBJFMT_SSO, 5000, 0, 1),
                       obj("c", OBJFMT_SSO, 800, 0, 1), obj("d", OBJFMT_SSO, 4000, FORCE * 9, 1),
                       obj("e", OBJFMT_SSO, 900, 0, 1)};
    objcompact_plan p;
    plan(o, 5, &p);
    /* a 6000, c 6800, d would pass the budget, e 7700 */
    expect(&p, OBJCOMPACT_SPLIT_SSO, 3, (size_t[]){0, 2, 4}, 7700);
    assert_int_equal(objcompact_split_bytes(&p, 4096), 0);
    objcompact_plan_free(&p);
    plan(o, 1, &p);
    expect(&p, OBJCOMPACT_SPLIT_SSO, 1, (size_t[]){0}, 6000);
    objcompact_plan_free(&p);
    o[0].created_ms = NOW - FORCE + 1; /* not old yet: nothing is */
    plan(o, 2, &p);
    expect(&p, OBJCOMPACT_NONE, 0, NULL, 0);
    objcompact_plan_free(&p);
}

static void test_plan_merge_sos(void **state)
{
    (void)state;
    objreg_info o[] = {obj("a", OBJFMT_SO, 100, 0, 3), /* alone in its stream */
                       obj("b", OBJFMT_SO, 200, 0, 4), obj("c", OBJFMT_SO, 5000, 0, 4),
                       obj("d", OBJFMT_SO, 300, 0, 5), obj("e", OBJFMT_SO, 400, 0, 4),
                       obj("f", OBJFMT_SO, 500, 0, 4)};
    objcompact_plan p;
    plan(o, 6, &p);
    /* stream 4: b, e, f (c is not small) */
    expect(&p, OBJCOMPACT_MERGE_SO, 3, (size_t[]){1, 4, 5}, 1100);
    assert_int_equal(objcompact_split_bytes(&p, 4096), 0);
    objcompact_plan_free(&p);
    /* ranges not loaded: skipped, as when the registry lost them */
    o[4].ranges = NULL;
    o[5].ranges = NULL;
    plan(o, 6, &p);
    expect(&p, OBJCOMPACT_NONE, 0, NULL, 0);
    objcompact_plan_free(&p);
    assert_true(objcompact_wants_ranges(&o[0], &params));
    assert_false(objcompact_wants_ranges(&o[2], &params)); /* big */
    o[0].delete_after_ms = 0;
    assert_false(objcompact_wants_ranges(&o[0], &params)); /* retired */
    objreg_info sso = obj("g", OBJFMT_SSO, 10, 0, 1);
    assert_false(objcompact_wants_ranges(&sso, &params));
}

static void test_plan_budget_sos(void **state)
{
    (void)state;
    objreg_info o[12];
    for (int i = 0; i < 12; i++) {
        char k[8];
        snprintf(k, sizeof k, "k%02d", i);
        o[i] = obj(k, OBJFMT_SO, 900, 0, 6);
    }
    objcompact_plan p;
    plan(o, 12, &p);
    assert_int_equal(p.what, OBJCOMPACT_MERGE_SO);
    assert_int_equal(p.nsrc, 11); /* 11 x 900 <= 10000 */
    assert_int_equal(p.bytes, 9900);
    objcompact_plan_free(&p);
}

/* ---- runs ---- */

static int64_t ts_of(const void *payload, uint32_t size)
{
    (void)payload;
    return size;
}

/* The registry of the run tests: the live ranges of each key. */
struct registry {
    const char *keys[4];
    objreg_range live[4][2];
    size_t nlive[4];
    int asked;
};

static int live_of(void *arg, const char *key, objreg_range **ranges, size_t *n)
{
    struct registry *r = arg;
    r->asked++;
    for (int i = 0; i < 4; i++) {
        if (!r->keys[i] || strcmp(r->keys[i], key) != 0)
            continue;
        *n = r->nlive[i];
        *ranges = malloc((*n ? *n : 1) * sizeof **ranges);
        memcpy(*ranges, r->live[i], *n * sizeof **ranges);
        return 0;
    }
    return SK_ERR_IO;
}

static objcompact_env env_of(fx *f, struct registry *r, objcompact_ts_fn ts)
{
    return (objcompact_env){f->os, live_of, r, ts, {1 << 20, 0, 2}, NULL, NULL};
}

/* Puts one object of `kind` with batches of the given streams (5 batches
 * each, offsets 0, 10, ..., 40, sizes 100 + stream * 10 + offset). */
static objreg_object put_src(fx *f, objfmt_kind kind, const uint64_t *streams, size_t n)
{
    objup_set *s = objup_set_new(0);
    for (size_t i = 0; i < n; i++)
        for (int64_t off = 0; off < 50; off += 10) {
            uint32_t size = (uint32_t)(100 + streams[i] * 10 + (uint64_t)off);
            uint8_t *pl = fx_payload(streams[i], off, size);
            objup_batch b = {streams[i], off, off + 9, 0, 10, size, 0, false, 0};
            assert_int_equal(objup_set_add(s, &b, pl), 0);
            free(pl);
        }
    objup_params p = {kind == OBJFMT_SO ? 0 : UINT64_MAX, 256, 1};
    objreg_objects out = {0};
    assert_int_equal(objup_put(s, f->os, &p, &out), 0);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.v[0].kind, kind);
    objreg_object o = out.v[0];
    free(out.v);
    objup_set_destroy(s);
    return o;
}

static void test_run_merge_keeps_live(void **state)
{
    fx *f = *state;
    objreg_object a = put_src(f, OBJFMT_SSO, (uint64_t[]){1, 2}, 2);
    objreg_object b = put_src(f, OBJFMT_SSO, (uint64_t[]){3}, 1);
    /* live: stream 1 from offset 20 (retention), stream 2 gone (a deleted
     * topic), stream 3 whole */
    struct registry r = {{a.key, b.key}, {{{1, 20, 49, 0, 0, 30}}, {b.ranges[0]}}, {1, 1}, 0};
    const char *keys[] = {a.key, b.key};
    objcompact_plan p = {OBJCOMPACT_MERGE_SSO, (size_t[]){0, 1}, 2, a.size + b.size};
    objcompact_env env = env_of(f, &r, ts_of);
    objreg_objects out = {0};
    assert_int_equal(objcompact_run(&env, &p, keys, &out), 0);
    assert_int_equal(r.asked, 2);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.v[0].kind, OBJFMT_SSO);
    assert_int_equal(out.v[0].nranges, 2);
    const objreg_range *rg = out.v[0].ranges;
    assert_true(rg[0].stream == 1 && rg[0].start == 20 && rg[0].end == 49 && rg[0].records == 30);
    assert_int_equal(rg[0].max_ts, 100 + 10 + 40);
    assert_true(rg[1].stream == 3 && rg[1].start == 0 && rg[1].end == 49);
    assert_int_equal(rg[1].max_ts, 100 + 30 + 40);
    assert_int_equal(fx_check_object(f, &out.v[0]), 3 + 5);
    objreg_objects_free(&out);
    free(a.ranges);
    free(b.ranges);
}

static void test_run_split_and_merge_so(void **state)
{
    fx *f = *state;
    objreg_object a = put_src(f, OBJFMT_SSO, (uint64_t[]){1, 2, 3}, 3);
    struct registry r = {{a.key}, {{a.ranges[0], a.ranges[1]}}, {2}, 0};
    const char *keys[] = {a.key};
    objcompact_plan p = {OBJCOMPACT_SPLIT_SSO, (size_t[]){0}, 1, a.size};
    objcompact_env env = env_of(f, &r, NULL);
    objreg_objects out = {0};
    assert_int_equal(objcompact_run(&env, &p, keys, &out), 0);
    assert_int_equal(out.n, 2); /* stream 3 is not live: one StreamObject each for 1 and 2 */
    for (size_t i = 0; i < 2; i++) {
        assert_int_equal(out.v[i].kind, OBJFMT_SO);
        assert_int_equal(out.v[i].ranges[0].stream, i + 1);
        assert_int_equal(out.v[i].ranges[0].max_ts, -1);
        assert_int_equal(fx_check_object(f, &out.v[i]), 5);
    }
    /* merging StreamObjects of one stream gives a StreamObject, never an
     * SSO below the split size */
    struct registry r2 = {{out.v[1].key}, {{out.v[1].ranges[0]}}, {1}, 0};
    const char *keys2[] = {out.v[1].key};
    objcompact_plan m = {OBJCOMPACT_MERGE_SO, (size_t[]){0}, 1, out.v[1].size};
    env = env_of(f, &r2, ts_of);
    objreg_objects merged = {0};
    assert_int_equal(objcompact_run(&env, &m, keys2, &merged), 0);
    assert_int_equal(merged.n, 1);
    assert_int_equal(merged.v[0].kind, OBJFMT_SO);
    assert_int_equal(fx_check_object(f, &merged.v[0]), 5);
    objreg_objects_free(&merged);
    objreg_objects_free(&out);
    free(a.ranges);
}

static void test_run_errors(void **state)
{
    fx *f = *state;
    const char *key = "data/00000000000000000000000000000000/so-1-1.obj";
    struct registry r = {{key}, {{{1, 0, 100, 0, 0, 0}}}, {1}, 0};
    objcompact_plan p = {OBJCOMPACT_MERGE_SO, (size_t[]){0}, 1, 1000};
    objcompact_env env = env_of(f, &r, NULL);
    objreg_objects out = {0};
    assert_int_equal(objcompact_run(&env, &p, &key, &out), SK_ERR_NOENT);
    /* not an object */
    struct iovec iov = {"not an object, not at all", 25};
    assert_int_equal(objstore_put_sync(f->os, key, &iov, 1), 0);
    assert_int_equal(objcompact_run(&env, &p, &key, &out), SK_ERR_CORRUPT);
    /* the registry fails: nothing is read */
    const char *unknown = "data/00000000000000000000000000000000/so-1-2.obj";
    assert_int_equal(objcompact_run(&env, &p, &unknown, &out), SK_ERR_IO);
    assert_int_equal(out.n, 0);
    /* nothing planned: nothing done */
    objcompact_plan none = {0};
    r.asked = 0;
    assert_int_equal(objcompact_run(&env, &none, NULL, &out), 0);
    assert_int_equal(out.n, 0);
    assert_int_equal(r.asked, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_plan_nothing),
        cmocka_unit_test(test_plan_merge_ssos),
        cmocka_unit_test(test_plan_split_old),
        cmocka_unit_test(test_plan_merge_sos),
        cmocka_unit_test(test_plan_budget_sos),
        cmocka_unit_test_setup_teardown(test_run_merge_keeps_live, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_run_split_and_merge_so, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_run_errors, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
