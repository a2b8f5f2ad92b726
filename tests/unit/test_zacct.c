/* sk_zacct: interning of zone names, overflow into "other", what counts as
 * cross-zone, and counting from many threads at once. */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>

#include "sk_zacct.h"

static void test_interning(void **state)
{
    (void)state;
    sk_zacct *a = sk_zacct_new("b");
    assert_non_null(a);
    int own = sk_zacct_own(a);
    assert_int_equal(own, 1); /* the own zone takes the first named slot */
    assert_string_equal(sk_zacct_name(a, own), "b");
    assert_int_equal(sk_zacct_zone(a, "b"), own);
    assert_int_equal(sk_zacct_zone(a, ""), SK_ZA_UNKNOWN);
    assert_int_equal(sk_zacct_zone(a, NULL), SK_ZA_UNKNOWN);
    int za = sk_zacct_zone(a, "a");
    assert_int_equal(za, 2);
    assert_int_equal(sk_zacct_zone(a, "a"), za);
    assert_int_equal(sk_zacct_zone(a, "c"), 3);
    assert_string_equal(sk_zacct_name(a, za), "a");
    assert_string_equal(sk_zacct_name(a, SK_ZA_UNKNOWN), "");
    assert_string_equal(sk_zacct_name(a, SK_ZA_OTHER), "");
    assert_string_equal(sk_zacct_name(a, 17), ""); /* not taken */
    /* A name longer than the limit is cut, and found again by its long form. */
    char longz[200];
    memset(longz, 'z', sizeof longz - 1);
    longz[sizeof longz - 1] = 0;
    int zl = sk_zacct_zone(a, longz);
    assert_int_equal(strlen(sk_zacct_name(a, zl)), SK_ZA_NAME_MAX - 1);
    assert_int_equal(sk_zacct_zone(a, longz), zl);
    sk_zacct_destroy(a);
}

static void test_overflow_to_other(void **state)
{
    (void)state;
    sk_zacct *a = sk_zacct_new("own");
    char name[32];
    for (int i = 1; i < SK_ZA_NAMED; i++) {
        snprintf(name, sizeof name, "z%d", i);
        assert_int_equal(sk_zacct_zone(a, name), i + 1);
    }
    /* Every slot is taken: new names share "other", known ones keep theirs. */
    assert_int_equal(sk_zacct_zone(a, "late-1"), SK_ZA_OTHER);
    assert_int_equal(sk_zacct_zone(a, "late-2"), SK_ZA_OTHER);
    assert_int_equal(sk_zacct_zone(a, "z5"), 6);
    assert_int_equal(sk_zacct_zone(a, "own"), 1);
    assert_true(sk_zacct_cross(a, SK_ZA_OTHER));
    sk_zacct_add(a, sk_zacct_zone(a, "late-1"), SK_ZA_OUT, SK_ZA_CLIENT, 10);
    sk_zacct_add(a, sk_zacct_zone(a, "late-2"), SK_ZA_OUT, SK_ZA_CLIENT, 5);
    assert_int_equal(sk_zacct_get(a, SK_ZA_OTHER, SK_ZA_OUT, SK_ZA_CLIENT), 15);
    assert_int_equal(sk_zacct_cross_bytes(a, SK_ZA_OUT, SK_ZA_CLIENT), 15);
    sk_zacct_destroy(a);
}

static void test_cross_and_counts(void **state)
{
    (void)state;
    sk_zacct *a = sk_zacct_new("b");
    int own = sk_zacct_own(a), za = sk_zacct_zone(a, "a"), zc = sk_zacct_zone(a, "c");
    assert_false(sk_zacct_cross(a, own));
    assert_false(sk_zacct_cross(a, SK_ZA_UNKNOWN));
    assert_true(sk_zacct_cross(a, za));
    assert_false(sk_zacct_cross(a, -1));
    assert_false(sk_zacct_cross(a, SK_ZA_SLOTS));
    sk_zacct_add(a, own, SK_ZA_IN, SK_ZA_CLIENT, 1000);
    sk_zacct_add(a, za, SK_ZA_OUT, SK_ZA_CONFIRM, 80);
    sk_zacct_add(a, za, SK_ZA_IN, SK_ZA_CONFIRM, 40);
    sk_zacct_add(a, zc, SK_ZA_OUT, SK_ZA_CONFIRM, 8);
    sk_zacct_add(a, SK_ZA_UNKNOWN, SK_ZA_OUT, SK_ZA_ETCD, 300);
    sk_zacct_add(a, 999, SK_ZA_OUT, SK_ZA_ETCD, 1); /* out of range: unknown */
    sk_zacct_add(a, -5, SK_ZA_OUT, SK_ZA_ETCD, 1);
    sk_zacct_add(a, za, (sk_za_dir)7, SK_ZA_RPC, 1); /* ignored */
    sk_zacct_add(a, za, SK_ZA_OUT, (sk_za_kind)9, 1);
    assert_int_equal(sk_zacct_get(a, own, SK_ZA_IN, SK_ZA_CLIENT), 1000);
    assert_int_equal(sk_zacct_get(a, SK_ZA_UNKNOWN, SK_ZA_OUT, SK_ZA_ETCD), 302);
    assert_int_equal(sk_zacct_cross_bytes(a, SK_ZA_OUT, SK_ZA_CONFIRM), 88);
    assert_int_equal(sk_zacct_cross_bytes(a, SK_ZA_IN, SK_ZA_CONFIRM), 40);
    assert_int_equal(sk_zacct_cross_bytes(a, SK_ZA_IN, SK_ZA_CLIENT), 0);
    assert_int_equal(sk_zacct_cross_bytes(a, SK_ZA_OUT, SK_ZA_ETCD), 0);
    assert_int_equal(sk_zacct_get(a, za, SK_ZA_OUT, SK_ZA_RPC), 0);
    assert_string_equal(sk_za_kind_name(SK_ZA_FOLLOW), "follow");
    assert_string_equal(sk_za_kind_name(SK_ZA_ETCD), "etcd");
    assert_string_equal(sk_za_dir_name(SK_ZA_OUT), "out");
    sk_zacct_destroy(a);
}

static void test_own_zone_unknown(void **state)
{
    (void)state;
    /* A node without broker.rack cannot tell: nothing is cross-zone. */
    sk_zacct *a = sk_zacct_new("");
    assert_int_equal(sk_zacct_own(a), SK_ZA_UNKNOWN);
    int za = sk_zacct_zone(a, "a");
    assert_int_equal(za, 1);
    assert_false(sk_zacct_cross(a, za));
    sk_zacct_add(a, za, SK_ZA_OUT, SK_ZA_CLIENT, 7);
    assert_int_equal(sk_zacct_cross_bytes(a, SK_ZA_OUT, SK_ZA_CLIENT), 0);
    assert_int_equal(sk_zacct_get(a, za, SK_ZA_OUT, SK_ZA_CLIENT), 7);
    sk_zacct_destroy(a);
    a = sk_zacct_new(NULL);
    assert_int_equal(sk_zacct_own(a), SK_ZA_UNKNOWN);
    sk_zacct_destroy(a);
}

#define THREADS 8
#define ROUNDS 20000
#define ZONES 40 /* more than the named slots: some go to "other" */

struct worker {
    sk_zacct *a;
    int id;
};

/* Each thread interns every zone (in its own order) and counts into it. */
static void *work(void *arg)
{
    struct worker *w = arg;
    char name[16];
    for (int r = 0; r < ROUNDS; r++) {
        int z = (r * 7 + w->id * 13) % ZONES;
        snprintf(name, sizeof name, "zone-%d", z);
        int slot = sk_zacct_zone(w->a, name);
        sk_zacct_add(w->a, slot, (sk_za_dir)(r & 1), (sk_za_kind)(r % SK_ZA_KINDS), 3);
    }
    return NULL;
}

static void test_threads(void **state)
{
    (void)state;
    sk_zacct *a = sk_zacct_new("zone-0");
    pthread_t t[THREADS];
    struct worker w[THREADS];
    for (int i = 0; i < THREADS; i++) {
        w[i] = (struct worker){a, i};
        assert_int_equal(pthread_create(&t[i], NULL, work, &w[i]), 0);
    }
    for (int i = 0; i < THREADS; i++)
        pthread_join(t[i], NULL);
    /* Every count landed somewhere, nothing twice. */
    uint64_t sum = 0;
    for (int s = 0; s < SK_ZA_SLOTS; s++)
        for (int d = 0; d < SK_ZA_DIRS; d++)
            for (int k = 0; k < SK_ZA_KINDS; k++)
                sum += sk_zacct_get(a, s, (sk_za_dir)d, (sk_za_kind)k);
    assert_int_equal(sum, (uint64_t)THREADS * ROUNDS * 3);
    /* Each name holds one slot, all distinct; the latecomers share "other". */
    char name[16];
    int seen[SK_ZA_SLOTS] = {0}, named = 0;
    for (int z = 0; z < ZONES; z++) {
        snprintf(name, sizeof name, "zone-%d", z);
        int slot = sk_zacct_zone(a, name);
        assert_true(slot >= 1 && slot < SK_ZA_SLOTS);
        if (slot != SK_ZA_OTHER) {
            assert_int_equal(seen[slot]++, 0);
            assert_string_equal(sk_zacct_name(a, slot), name);
            named++;
        }
    }
    assert_int_equal(named, SK_ZA_NAMED);
    assert_int_equal(sk_zacct_zone(a, "zone-0"), 1);
    assert_true(sk_zacct_get(a, SK_ZA_OTHER, SK_ZA_IN, SK_ZA_CLIENT) +
                    sk_zacct_get(a, SK_ZA_OTHER, SK_ZA_OUT, SK_ZA_CLIENT) >
                0);
    sk_zacct_destroy(a);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_interning),
        cmocka_unit_test(test_overflow_to_other),
        cmocka_unit_test(test_cross_and_counts),
        cmocka_unit_test(test_own_zone_unknown),
        cmocka_unit_test(test_threads),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
