/* txidx, a partition's transaction index: open transactions and the last
 * stable offset, aborted ranges and which of them a read must know, markers
 * read back from control batches built as the coordinator builds them. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "kbatch.h"
#include "txidx.h"

static void test_lso_and_aborted(void **st)
{
    (void)st;
    sk_txidx x = {0};
    assert_int_equal(sk_txidx_lso(&x, 10), 10);
    assert_int_equal(sk_txidx_batch(&x, 7, 3, true, -1), 0);
    assert_int_equal(sk_txidx_batch(&x, 7, 5, true, -1), 0); /* already open */
    assert_int_equal(sk_txidx_batch(&x, 8, 6, true, -1), 0);
    assert_int_equal(sk_txidx_batch(&x, 9, 7, false, -1), 0); /* not transactional */
    assert_int_equal(sk_txidx_lso(&x, 10), 3);
    assert_int_equal(sk_txidx_open_first(&x, 7), 3);
    assert_int_equal(sk_txidx_open_first(&x, 9), -1);
    assert_int_equal(sk_txidx_batch(&x, 7, 8, true, 0), 0); /* abort marker */
    assert_int_equal(sk_txidx_lso(&x, 10), 6);
    assert_int_equal(sk_txidx_batch(&x, 8, 9, true, 1), 0); /* commit marker */
    assert_int_equal(sk_txidx_lso(&x, 10), 10);
    sk_txidx_ent e[2];
    assert_int_equal(sk_txidx_aborted(&x, 0, 10, e, 2), 1);
    assert_int_equal(e[0].pid, 7);
    assert_int_equal(e[0].first, 3);
    assert_int_equal(e[0].last, 8);
    assert_int_equal(sk_txidx_aborted(&x, 9, 10, e, 2), 0); /* read past its marker */
    assert_int_equal(sk_txidx_aborted(&x, 0, 3, e, 2), 0);  /* read before it */
    assert_int_equal(sk_txidx_batch(&x, 5, 11, true, 1), 0); /* marker with no data here */
    sk_txidx_trim(&x, 9);
    assert_int_equal(sk_txidx_aborted(&x, 0, 10, e, 2), 0);
    sk_txidx_ent open = {4, 12, -1};
    assert_int_equal(sk_txidx_load(&x, &open), 0);
    assert_int_equal(sk_txidx_lso(&x, 20), 12);
    sk_txidx_clear(&x);
}

static void test_control_type(void **st)
{
    (void)st;
    uint8_t buf[128], key[4] = {0, 0, 0, 1}, val[6] = {0};
    kb_build_rec rec = {{key, 4}, {val, 6}, 1000};
    int64_t n = kb_build(buf, sizeof buf, &rec, 1, 42, 3, -1, KB_ATTR_TRANSACTIONAL | KB_ATTR_CONTROL);
    assert_true(n > 0);
    assert_int_equal(sk_txidx_control_type(buf, (size_t)n), 1);
    key[3] = 0;
    n = kb_build(buf, sizeof buf, &rec, 1, 42, 3, -1, KB_ATTR_TRANSACTIONAL | KB_ATTR_CONTROL);
    assert_int_equal(sk_txidx_control_type(buf, (size_t)n), 0);
    n = kb_build(buf, sizeof buf, &rec, 1, 42, 3, 0, KB_ATTR_TRANSACTIONAL);
    assert_int_equal(sk_txidx_control_type(buf, (size_t)n), -1);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_lso_and_aborted),
        cmocka_unit_test(test_control_type),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
