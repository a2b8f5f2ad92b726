/* txns' record codec: a transactional id's state with its partitions, groups
 * and pending offsets survives encoding; every truncation of a record and
 * absurd counts are refused as corrupt, never read past the input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sk_err.h"
#include "txns.h"

static void encode(sk_buf *b)
{
    sk_tc_part parts[2] = {{"orders", 3}, {"audit", 0}};
    char *groups[1] = {"billing"};
    sk_tc_entry e = {.txn_id = "app-1",
                     .producer_id = 1234567890123LL,
                     .producer_epoch = 7,
                     .last_producer_id = -1,
                     .last_producer_epoch = 6,
                     .timeout_ms = 60000,
                     .state = SK_TC_PREPARE_COMMIT,
                     .start_ms = 1700000000000LL,
                     .update_ms = 1700000000500LL,
                     .nparts = 2,
                     .parts = parts,
                     .ngroups = 1,
                     .groups = groups};
    sk_txoff offs[1] = {{"billing", "orders", "meta", 3, 5, 42}};
    sk_buf_init(b, 0);
    sk_txrec_put(b, &e, 1, offs);
    assert_false(sk_buf_failed(b));
}

static void test_roundtrip(void **st)
{
    (void)st;
    sk_buf b;
    encode(&b);
    sk_tc_entry e;
    int n;
    sk_txoff *offs;
    assert_int_equal(sk_txrec_get(b.data, b.len, &e, &n, &offs), 0);
    assert_string_equal(e.txn_id, "app-1");
    assert_int_equal(e.producer_id, 1234567890123LL);
    assert_int_equal(e.producer_epoch, 7);
    assert_int_equal(e.last_producer_epoch, 6);
    assert_int_equal(e.state, SK_TC_PREPARE_COMMIT);
    assert_int_equal(e.start_ms, 1700000000000LL);
    assert_int_equal(e.nparts, 2);
    assert_string_equal(e.parts[1].topic, "audit");
    assert_int_equal(e.parts[0].partition, 3);
    assert_int_equal(e.ngroups, 1);
    assert_string_equal(e.groups[0], "billing");
    assert_int_equal(n, 1);
    assert_string_equal(offs[0].topic, "orders");
    assert_string_equal(offs[0].meta, "meta");
    assert_int_equal(offs[0].offset, 42);
    assert_int_equal(offs[0].leader_epoch, 5);
    sk_tc_entry_clear(&e);
    sk_txoffs_free(n, offs);
    sk_buf_free(&b);
}

static void test_truncated_and_corrupt(void **st)
{
    (void)st;
    sk_buf b;
    encode(&b);
    sk_tc_entry e;
    int n;
    sk_txoff *offs;
    for (size_t len = 0; len < b.len; len++) {
        uint8_t *copy = malloc(len + 1); /* exactly len bytes readable */
        memcpy(copy, b.data, len);
        assert_int_equal(sk_txrec_get(copy, len, &e, &n, &offs), SK_ERR_CORRUPT);
        assert_null(e.txn_id);
        assert_null(offs);
        free(copy);
    }
    /* A trailing byte, a state out of range, a huge partition count. */
    uint8_t *copy = malloc(b.len + 1);
    memcpy(copy, b.data, b.len);
    copy[b.len] = 0;
    assert_int_equal(sk_txrec_get(copy, b.len + 1, &e, &n, &offs), SK_ERR_CORRUPT);
    size_t state_at = 4 + 5 + 8 + 2 + 8 + 2 + 4;
    copy[state_at] = 9;
    assert_int_equal(sk_txrec_get(copy, b.len, &e, &n, &offs), SK_ERR_CORRUPT);
    copy[state_at] = SK_TC_ONGOING;
    size_t nparts_at = state_at + 1 + 8 + 8;
    memset(copy + nparts_at, 0xff, 4);
    assert_int_equal(sk_txrec_get(copy, b.len, &e, &n, &offs), SK_ERR_CORRUPT);
    free(copy);
    sk_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip),
        cmocka_unit_test(test_truncated_and_corrupt),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
