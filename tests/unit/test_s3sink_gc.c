/* objgc: the decision for registered objects (retired ones deleted once
 * their time has come, live ones without a range retired), which listed
 * objects may be orphans (this node's, old enough, named by objfmt), and
 * the two passes against a file store: an unknown object is deleted only
 * when the previous pass found it unknown too, known and young objects and
 * other nodes' are never, and a registry error counts as known. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "objfmt.h"
#include "objgc.h"
#include "s3sink_fx.c"
#include "sk_err.h"
#include "sk_time.h"

static void test_decide(void **state)
{
    (void)state;
    objreg_info o = {.delete_after_ms = -1, .nranges = 2};
    assert_int_equal(objgc_decide(&o, 1000), OBJGC_KEEP);
    o.nranges = 0;
    assert_int_equal(objgc_decide(&o, 1000), OBJGC_RETIRE);
    o.delete_after_ms = 1001; /* retired: deleted from 1001 on, ranges or not */
    assert_int_equal(objgc_decide(&o, 1000), OBJGC_KEEP);
    assert_int_equal(objgc_decide(&o, 1001), OBJGC_DELETE);
    o.nranges = 3;
    assert_int_equal(objgc_decide(&o, 5000), OBJGC_DELETE);
    o.delete_after_ms = 0;
    assert_int_equal(objgc_decide(&o, 0), OBJGC_DELETE);
}

static void test_eligible(void **state)
{
    (void)state;
    objgc_orphan_params p = {3, 1000};
    char key[OBJFMT_KEY_MAX];
    assert_int_equal(objfmt_make_key(key, sizeof key, "", OBJFMT_SSO, 3, 5000), 0);
    assert_true(objgc_orphan_eligible(key, 5000, &p, 6000));
    assert_false(objgc_orphan_eligible(key, 5001, &p, 6000)); /* too young */
    /* the age is the store's modification time, not the name's */
    assert_true(objgc_orphan_eligible(key, 100, &p, 1100));
    assert_int_equal(objfmt_make_key(key, sizeof key, "", OBJFMT_SO, 4, 5000), 0);
    assert_false(objgc_orphan_eligible(key, 0, &p, 6000)); /* another node's */
    assert_false(objgc_orphan_eligible("data/x/so-3-1.obj", 0, &p, 6000));
    assert_false(objgc_orphan_eligible("snapshots/node-3/1.db", 0, &p, 6000));
}

static void test_confirmed(void **state)
{
    (void)state;
    objreg_keys prev = {0};
    assert_false(objgc_orphan_confirmed(&prev, "a"));
    assert_int_equal(objreg_keys_push(&prev, "a"), 0);
    assert_int_equal(objreg_keys_push(&prev, "b"), 0);
    assert_true(objgc_orphan_confirmed(&prev, "b"));
    assert_false(objgc_orphan_confirmed(&prev, "c"));
    objreg_keys_free(&prev);
    assert_int_equal(prev.n, 0);
}

/* The registry of the pass test: keys[0..nknown) are known; fail makes
 * every lookup an error. */
struct registry {
    const char **known;
    size_t nknown;
    int fail;
    int asked;
};

static int known_fn(void *arg, const char *key)
{
    struct registry *r = arg;
    r->asked++;
    if (r->fail)
        return SK_ERR_IO;
    for (size_t i = 0; i < r->nknown; i++)
        if (strcmp(r->known[i], key) == 0)
            return 1;
    return 0;
}

static void put_key(fx *f, char *key, objfmt_kind kind, uint32_t node)
{
    assert_int_equal(objfmt_make_key(key, OBJFMT_KEY_MAX, "", kind, node, 1700000000000), 0);
    struct iovec iov = {"x", 1};
    assert_int_equal(objstore_put_sync(f->os, key, &iov, 1), 0);
}

static int pass(fx *f, struct registry *r, int64_t min_age, objreg_keys *prev, size_t *deleted)
{
    objgc_orphan_params p = {3, min_age};
    objreg_keys cands = {0};
    int rc = objgc_orphans_pass(f->os, &p, sk_now_ms(), known_fn, r, prev, &cands, deleted);
    objreg_keys_free(prev);
    *prev = cands;
    return rc;
}

static void test_two_passes(void **state)
{
    fx *f = *state;
    char reg[OBJFMT_KEY_MAX], orphan[OBJFMT_KEY_MAX], other[OBJFMT_KEY_MAX];
    char late[OBJFMT_KEY_MAX];
    put_key(f, reg, OBJFMT_SSO, 3);
    put_key(f, orphan, OBJFMT_SO, 3);
    put_key(f, other, OBJFMT_SO, 4);
    const char *known[] = {reg};
    struct registry r = {known, 1, 0, 0};
    objreg_keys prev = {0};
    size_t deleted = 9;
    /* too young for anything */
    assert_int_equal(pass(f, &r, 3600 * 1000, &prev, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(prev.n, 0);
    assert_int_equal(r.asked, 0);
    /* first pass: a candidate, not deleted */
    assert_int_equal(pass(f, &r, 0, &prev, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(prev.n, 1);
    assert_string_equal(prev.v[0], orphan);
    assert_true(fx_exists(f, orphan));
    /* a registry that fails: nothing is a candidate (doubt keeps objects) */
    r.fail = 1;
    objreg_keys keep = {0};
    assert_int_equal(objreg_keys_push(&keep, prev.v[0]), 0);
    assert_int_equal(pass(f, &r, 0, &prev, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_int_equal(prev.n, 0);
    assert_true(fx_exists(f, orphan));
    r.fail = 0;
    objreg_keys_free(&prev);
    prev = keep;
    /* an object that appeared since is a candidate of this pass only */
    put_key(f, late, OBJFMT_SSO, 3);
    assert_int_equal(pass(f, &r, 0, &prev, &deleted), 0);
    assert_int_equal(deleted, 1);
    assert_false(fx_exists(f, orphan));
    assert_true(fx_exists(f, reg));
    assert_true(fx_exists(f, other));
    assert_true(fx_exists(f, late));
    /* registered meanwhile: no longer a candidate, never deleted */
    const char *known2[] = {reg, late};
    r.known = known2;
    r.nknown = 2;
    assert_int_equal(pass(f, &r, 0, &prev, &deleted), 0);
    assert_int_equal(deleted, 0);
    assert_true(fx_exists(f, late));
    objreg_keys_free(&prev);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decide),
        cmocka_unit_test(test_eligible),
        cmocka_unit_test(test_confirmed),
        cmocka_unit_test_setup_teardown(test_two_passes, fx_setup, fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
