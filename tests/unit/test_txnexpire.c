/* transactional.id.expiration.ms (docs/transactions.md): which ids the
 * coordinator forgets (tcoord.c sk_tc_idle): ended or never begun, idle long
 * enough, no change in flight; and the record that forgets one (meta.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "meta.h"
#include "sk_err.h"
#include "tcoord.h"

static void put(sk_tc *tc, const char *id, sk_tc_state st, int64_t update_ms)
{
    sk_tc_entry e = {0};
    e.txn_id = (char *)id;
    e.producer_id = 7;
    e.last_producer_id = -1;
    e.last_producer_epoch = -1;
    e.timeout_ms = 60000;
    e.state = st;
    e.start_ms = st == SK_TC_ONGOING ? update_ms : -1;
    e.update_ms = update_ms;
    assert_int_equal(sk_tc_restore(tc, &e), 0);
}

static bool has(const char **ids, int n, const char *id)
{
    for (int i = 0; i < n; i++)
        if (strcmp(ids[i], id) == 0)
            return true;
    return false;
}

static void test_idle_ids(void **st)
{
    (void)st;
    sk_tc_config cfg = {.max_timeout_ms = 900000};
    sk_tc *tc = sk_tc_new(&cfg);
    put(tc, "empty-old", SK_TC_EMPTY, 1000);
    put(tc, "commit-old", SK_TC_COMPLETE_COMMIT, 1000);
    put(tc, "abort-old", SK_TC_COMPLETE_ABORT, 2000);
    put(tc, "commit-new", SK_TC_COMPLETE_COMMIT, 9500);
    put(tc, "open-old", SK_TC_ONGOING, 1000);
    put(tc, "prepare-old", SK_TC_PREPARE_COMMIT, 1000);
    put(tc, "pending-old", SK_TC_EMPTY, 1000);
    sk_tc_part p = {"t", 0};
    assert_int_equal(sk_tc_add_partitions(tc, "pending-old", 7, 0, 1, &p, 1000), 0);
    assert_true(sk_tc_is_pending(tc, "pending-old"));
    const char *ids[16];
    int n = sk_tc_idle(tc, 10000, 8000, ids, 16);
    assert_int_equal(n, 3);
    assert_true(has(ids, n, "empty-old") && has(ids, n, "commit-old") && has(ids, n, "abort-old"));
    /* Exactly the expiration is old enough; the limit holds. */
    assert_int_equal(sk_tc_idle(tc, 10000, 9000, ids, 16), 2);
    assert_int_equal(sk_tc_idle(tc, 10000, 8000, ids, 1), 1);
    sk_tc_forget(tc, "empty-old");
    assert_int_equal(sk_tc_idle(tc, 10000, 8000, ids, 16), 2);
    sk_tc_free(tc);
}

static void test_gone_record(void **st)
{
    (void)st;
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_txn_gone(&b, "tx-1", 4);
    sk_meta m;
    assert_int_equal(sk_meta_decode(b.data, b.len, &m), 0);
    assert_int_equal(m.kind, SK_META_TXN_GONE);
    sk_rd r;
    sk_rd_init(&r, m.body, m.body_len);
    size_t n;
    const uint8_t *id = sk_rd_str(&r, &n);
    assert_int_equal(n, 4);
    assert_memory_equal(id, "tx-1", 4);
    sk_buf_free(&b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_idle_ids),
        cmocka_unit_test(test_gone_record),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
