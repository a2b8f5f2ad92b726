/*
 * plog: a partition adopted by this node is readable below its cache only
 * once the SQLite view has applied the adoption, and what waits on it is
 * woken exactly when the view gets there.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "plog.h"
#include "sk_map.h"
#include "tconf.h"

typedef struct {
    sk_waiter base;
    int wakes;
} counter;

static void count_wake(sk_waiter *w)
{
    ((counter *)w)->wakes++;
}

static void count_stop(sk_waiter *w)
{
    ((counter *)w)->wakes++;
}

typedef struct {
    sk_node n;
    sk_topic *t;
} fixture;

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->n.topics_by_name = sk_map_new();
    f->n.topics_by_id = sk_map_new();
    assert_non_null(f->n.topics_by_name);
    assert_non_null(f->n.topics_by_id);
    kc_uuid id = {{1, 2, 3}};
    sk_tconf conf;
    memset(&conf, 0, sizeof conf);
    f->t = sk_topic_new(&f->n, &id, "t", 1, 3, 1, &conf, 100, SK_OWN_ACTIVE);
    assert_non_null(f->t);
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    sk_topic_remove(&f->n, f->t);
    sk_map_destroy(f->n.topics_by_name);
    sk_map_destroy(f->n.topics_by_id);
    free(f);
    return 0;
}

/* A partition never adopted (single node, or created here) is always ready. */
static void never_adopted_is_ready(void **state)
{
    fixture *f = *state;
    assert_true(sk_part_view_ready(&f->n, f->t->parts[0]));
}

static void ready_once_the_view_passes_the_adoption(void **state)
{
    fixture *f = *state;
    sk_part *p = f->t->parts[1];
    f->n.store_applied = 1000;
    p->adopt_end = 1500;
    f->n.adopt_hi = 1500;
    assert_false(sk_part_view_ready(&f->n, p));
    f->n.store_applied = 1499;
    assert_false(sk_part_view_ready(&f->n, p));
    f->n.store_applied = 1500; /* the view covers the record's end */
    assert_true(sk_part_view_ready(&f->n, p));
}

static void waiters_woken_when_the_view_applies_the_adoption(void **state)
{
    fixture *f = *state;
    sk_part *a = f->t->parts[0], *b = f->t->parts[2];
    counter ca = {{count_wake, count_stop}, 0}, cb = {{count_wake, count_stop}, 0};
    assert_int_equal(sk_part_add_waiter(a, &ca.base), 0);
    assert_int_equal(sk_part_add_waiter(b, &cb.base), 0);
    a->adopt_end = 2000;
    b->adopt_end = 3000;
    f->n.adopt_hi = 3000;

    f->n.store_applied = 1500; /* neither yet */
    sk_parts_view_applied(&f->n, 1000);
    assert_int_equal(ca.wakes, 0);
    assert_int_equal(cb.wakes, 0);

    f->n.store_applied = 2500; /* a's adoption only */
    sk_parts_view_applied(&f->n, 1500);
    assert_int_equal(ca.wakes, 1);
    assert_int_equal(cb.wakes, 0);

    f->n.store_applied = 3000; /* b's, and a is not woken again */
    sk_parts_view_applied(&f->n, 2500);
    assert_int_equal(ca.wakes, 1);
    assert_int_equal(cb.wakes, 1);

    f->n.store_applied = 4000; /* past every adoption: nothing to do */
    sk_parts_view_applied(&f->n, 3000);
    assert_int_equal(ca.wakes, 1);
    assert_int_equal(cb.wakes, 1);
    sk_part_del_waiter(a, &ca.base);
    sk_part_del_waiter(b, &cb.base);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(never_adopted_is_ready, setup, teardown),
        cmocka_unit_test_setup_teardown(ready_once_the_view_passes_the_adoption, setup, teardown),
        cmocka_unit_test_setup_teardown(waiters_woken_when_the_view_applies_the_adoption, setup,
                                        teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
