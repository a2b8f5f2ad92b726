/* tcoord, the transaction coordinator as a state machine, driven with fake
 * time and fake producer ids: InitProducerId (new ids, epoch bumps, KIP-360
 * retries and fencing, epoch exhaustion, an init during an open
 * transaction), AddPartitionsToTxn / AddOffsetsToTxn checks, EndTxn in every
 * state, the pending-change protocol, timeouts and restore. The expected
 * codes are Apache Kafka 4.3's coordinator with transaction version 1. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sk_err.h"
#include "tcoord.h"

static sk_tc *mk(void)
{
    sk_tc_config cfg = {.max_timeout_ms = 900000};
    sk_tc *tc = sk_tc_new(&cfg);
    assert_non_null(tc);
    return tc;
}

static sk_tc_init_result init(sk_tc *tc, const char *id, int64_t exp_pid, int16_t exp_epoch,
                              int64_t fresh, int64_t now)
{
    sk_tc_init_args a = {.txn_id = id,
                         .timeout_ms = 60000,
                         .expected_pid = exp_pid,
                         .expected_epoch = exp_epoch,
                         .fresh_pid = fresh};
    sk_tc_init_result r;
    sk_tc_init_pid(tc, &a, now, &r);
    return r;
}

/* Init then make durable. */
static sk_tc_init_result init_ok(sk_tc *tc, const char *id, int64_t fresh, int64_t now)
{
    sk_tc_init_result r = init(tc, id, -1, -1, fresh, now);
    assert_int_equal(r.error, 0);
    assert_int_equal(sk_tc_apply(tc, id), 0);
    return r;
}

static const sk_tc_part P0 = {"t", 0}, P1 = {"t", 1};

static void test_init_new_and_bump(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    sk_tc_init_result r = init(tc, "a", -1, -1, 1000, 1);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.producer_id, 1000);
    assert_int_equal(r.producer_epoch, 0);
    assert_true(r.fresh_pid_used);
    /* Pending until durable: a second init is told to retry. */
    assert_null(sk_tc_get(tc, "a"));
    assert_int_equal(init(tc, "a", -1, -1, 1001, 2).error, SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(sk_tc_get(tc, "a")->state, SK_TC_EMPTY);
    /* A new producer with the same id: same producer id, epoch bumped. */
    r = init(tc, "a", -1, -1, 1002, 3);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.producer_id, 1000);
    assert_int_equal(r.producer_epoch, 1);
    assert_false(r.fresh_pid_used);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    sk_tc_free(tc);
}

static void test_init_timeout_bounds(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    sk_tc_init_args a = {.txn_id = "a", .timeout_ms = 900001, .expected_pid = -1};
    sk_tc_init_result r;
    sk_tc_init_pid(tc, &a, 0, &r);
    assert_int_equal(r.error, SK_KAFKA_INVALID_TRANSACTION_TIMEOUT);
    a.timeout_ms = 0;
    sk_tc_init_pid(tc, &a, 0, &r);
    assert_int_equal(r.error, SK_KAFKA_INVALID_TRANSACTION_TIMEOUT);
    assert_int_equal(sk_tc_count(tc), 0);
    sk_tc_free(tc);
}

static void test_revert_new(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    assert_int_equal(init(tc, "a", -1, -1, 7, 0).error, 0);
    sk_tc_revert(tc, "a");
    assert_int_equal(sk_tc_count(tc), 0);
    assert_null(sk_tc_get(tc, "a"));
    sk_tc_free(tc);
}

/* KIP-360: a producer bumping its own epoch with the expected one; a retry
 * of that bump gets the same answer; an older epoch is fenced. */
static void test_init_expected_epoch(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    init_ok(tc, "a", 50, 0);
    sk_tc_init_result r = init(tc, "a", 50, 0, 51, 1);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.producer_epoch, 1);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    r = init(tc, "a", 50, 0, 52, 2); /* the response was lost: retry */
    assert_int_equal(r.error, 0);
    assert_int_equal(r.producer_epoch, 1);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    /* A third init without expectation bumps; then the old one is fenced. */
    r = init(tc, "a", -1, -1, 53, 3);
    assert_int_equal(r.producer_epoch, 2);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(init(tc, "a", 50, 0, 54, 4).error, SK_KAFKA_PRODUCER_FENCED);
    assert_int_equal(init(tc, "a", 99, 0, 54, 4).error, SK_KAFKA_PRODUCER_FENCED);
    assert_false(sk_tc_is_pending(tc, "a"));
    sk_tc_free(tc);
}

static void test_epoch_exhausted_rotates(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    sk_tc_entry e = {.txn_id = "a",
                     .producer_id = 5,
                     .producer_epoch = INT16_MAX - 1,
                     .last_producer_id = -1,
                     .last_producer_epoch = -1,
                     .timeout_ms = 1000,
                     .state = SK_TC_COMPLETE_COMMIT,
                     .start_ms = -1};
    assert_int_equal(sk_tc_restore(tc, &e), 0);
    sk_tc_init_result r = init(tc, "a", 5, INT16_MAX - 1, 6, 0);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.producer_id, 6);
    assert_int_equal(r.producer_epoch, 0);
    assert_true(r.fresh_pid_used);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(sk_tc_get(tc, "a")->last_producer_id, 5);
    sk_tc_free(tc);
}

static void test_add_partitions(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    sk_tc_init_result r = init_ok(tc, "a", 10, 0);
    sk_tc_part ps[2] = {P0, P1};
    assert_int_equal(sk_tc_add_partitions(tc, "nope", 10, 0, 1, ps, 1),
                     SK_KAFKA_INVALID_PRODUCER_ID_MAPPING);
    assert_int_equal(sk_tc_add_partitions(tc, "a", 11, 0, 1, ps, 1),
                     SK_KAFKA_INVALID_PRODUCER_ID_MAPPING);
    assert_int_equal(sk_tc_add_partitions(tc, "a", 10, 1, 1, ps, 1), SK_KAFKA_PRODUCER_FENCED);
    /* Not yet added: produce is refused. */
    assert_int_equal(sk_tc_check_part(tc, "a", 10, 0, "t", 0), SK_KAFKA_INVALID_TXN_STATE);
    assert_int_equal(sk_tc_add_partitions(tc, "a", r.producer_id, 0, 1, ps, 100), 0);
    assert_true(sk_tc_is_pending(tc, "a"));
    assert_int_equal(sk_tc_add_partitions(tc, "a", 10, 0, 1, ps, 101),
                     SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    const sk_tc_entry *e = sk_tc_get(tc, "a");
    assert_int_equal(e->state, SK_TC_ONGOING);
    assert_int_equal(e->start_ms, 100);
    assert_int_equal(e->nparts, 1);
    /* Already there: nothing to write. */
    assert_int_equal(sk_tc_add_partitions(tc, "a", 10, 0, 1, ps, 200), 0);
    assert_false(sk_tc_is_pending(tc, "a"));
    assert_int_equal(sk_tc_add_partitions(tc, "a", 10, 0, 2, ps, 200), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    e = sk_tc_get(tc, "a");
    assert_int_equal(e->nparts, 2);
    assert_int_equal(e->start_ms, 100); /* the transaction began earlier */
    assert_int_equal(sk_tc_check_part(tc, "a", 10, 0, "t", 1), 0);
    assert_int_equal(sk_tc_check_part(tc, "a", 10, 1, "t", 1), SK_KAFKA_INVALID_PRODUCER_EPOCH);
    assert_int_equal(sk_tc_check_part(tc, "a", 10, 0, "u", 1), SK_KAFKA_INVALID_TXN_STATE);
    sk_tc_free(tc);
}

static void test_groups(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    init_ok(tc, "a", 10, 0);
    assert_int_equal(sk_tc_check_group(tc, "a", 10, 0, "g"), SK_KAFKA_INVALID_TXN_STATE);
    assert_int_equal(sk_tc_add_group(tc, "a", 10, 0, "g", 5), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(sk_tc_get(tc, "a")->state, SK_TC_ONGOING);
    assert_int_equal(sk_tc_check_group(tc, "a", 10, 0, "g"), 0);
    assert_int_equal(sk_tc_check_group(tc, "a", 10, 0, "h"), SK_KAFKA_INVALID_TXN_STATE);
    assert_int_equal(sk_tc_add_group(tc, "a", 10, 0, "g", 6), 0);
    assert_false(sk_tc_is_pending(tc, "a"));
    sk_tc_free(tc);
}

static void open_txn(sk_tc *tc, const char *id, int64_t pid, int16_t epoch, int64_t now)
{
    assert_int_equal(sk_tc_add_partitions(tc, id, pid, epoch, 1, &P0, now), 0);
    assert_int_equal(sk_tc_apply(tc, id), 0);
}

static void test_end_commit_and_retries(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    bool markers;
    init_ok(tc, "a", 10, 0);
    /* Nothing open: EndTxn is a state error. */
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 1, &markers), SK_KAFKA_INVALID_TXN_STATE);
    open_txn(tc, "a", 10, 0, 1);
    assert_int_equal(sk_tc_end(tc, "a", 10, 1, true, 2, &markers), SK_KAFKA_PRODUCER_FENCED);
    assert_int_equal(sk_tc_end(tc, "a", 9, 0, true, 2, &markers),
                     SK_KAFKA_INVALID_PRODUCER_ID_MAPPING);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 2, &markers), 0);
    assert_true(markers);
    assert_int_equal(sk_tc_pending(tc, "a")->state, SK_TC_PREPARE_COMMIT);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    /* While markers are written. */
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 3, &markers),
                     SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, false, 3, &markers), SK_KAFKA_INVALID_TXN_STATE);
    assert_int_equal(init(tc, "a", -1, -1, 11, 3).error, SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_add_partitions(tc, "a", 10, 0, 1, &P1, 3),
                     SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_complete(tc, "a", 4), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    const sk_tc_entry *e = sk_tc_get(tc, "a");
    assert_int_equal(e->state, SK_TC_COMPLETE_COMMIT);
    assert_int_equal(e->nparts, 0);
    /* A retried commit succeeds without markers; an abort does not. */
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 5, &markers), 0);
    assert_false(markers);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, false, 5, &markers), SK_KAFKA_INVALID_TXN_STATE);
    /* The next transaction starts from CompleteCommit. */
    open_txn(tc, "a", 10, 0, 6);
    assert_int_equal(sk_tc_get(tc, "a")->start_ms, 6);
    sk_tc_free(tc);
}

static void test_end_abort(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    bool markers;
    init_ok(tc, "a", 10, 0);
    open_txn(tc, "a", 10, 0, 1);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, false, 2, &markers), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, false, 3, &markers),
                     SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 3, &markers), SK_KAFKA_INVALID_TXN_STATE);
    assert_int_equal(sk_tc_complete(tc, "a", 4), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(sk_tc_get(tc, "a")->state, SK_TC_COMPLETE_ABORT);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, false, 5, &markers), 0);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 5, &markers), SK_KAFKA_INVALID_TXN_STATE);
    sk_tc_free(tc);
}

/* A new producer instance while a transaction is open: the coordinator
 * fences the old epoch, aborts, and tells the new one to retry. */
static void test_zombie_fenced(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    bool markers;
    init_ok(tc, "a", 10, 0);
    open_txn(tc, "a", 10, 0, 1);
    sk_tc_init_result r = init(tc, "a", -1, -1, 11, 2);
    assert_int_equal(r.error, SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_true(r.aborting);
    const sk_tc_entry *p = sk_tc_pending(tc, "a");
    assert_int_equal(p->state, SK_TC_PREPARE_ABORT);
    assert_int_equal(p->producer_epoch, 1);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(init(tc, "a", -1, -1, 11, 3).error, SK_KAFKA_CONCURRENT_TRANSACTIONS);
    assert_int_equal(sk_tc_complete(tc, "a", 4), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    r = init(tc, "a", -1, -1, 11, 5);
    assert_int_equal(r.error, 0);
    assert_int_equal(r.producer_id, 10);
    assert_int_equal(r.producer_epoch, 2);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    /* The zombie, still at epoch 0. */
    assert_int_equal(sk_tc_add_partitions(tc, "a", 10, 0, 1, &P0, 6), SK_KAFKA_PRODUCER_FENCED);
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 6, &markers), SK_KAFKA_PRODUCER_FENCED);
    assert_int_equal(sk_tc_check_part(tc, "a", 10, 0, "t", 0), SK_KAFKA_INVALID_PRODUCER_EPOCH);
    sk_tc_free(tc);
}

static void test_timeout_abort(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    bool markers;
    init_ok(tc, "a", 10, 0); /* timeout 60000 */
    init_ok(tc, "b", 20, 0);
    open_txn(tc, "a", 10, 0, 1000);
    const char *ids[4];
    assert_int_equal(sk_tc_expired(tc, 61000, ids, 4), 0);
    assert_int_equal(sk_tc_expired(tc, 61001, ids, 4), 1);
    assert_string_equal(ids[0], "a");
    assert_int_equal(sk_tc_abort_expired(tc, "a", 61001), 0);
    assert_int_equal(sk_tc_expired(tc, 61002, ids, 4), 0); /* pending */
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    assert_int_equal(sk_tc_get(tc, "a")->state, SK_TC_PREPARE_ABORT);
    assert_int_equal(sk_tc_complete(tc, "a", 61002), 0);
    assert_int_equal(sk_tc_apply(tc, "a"), 0);
    /* The producer learns it was fenced when it tries to commit. */
    assert_int_equal(sk_tc_end(tc, "a", 10, 0, true, 61003, &markers), SK_KAFKA_PRODUCER_FENCED);
    assert_int_equal(sk_tc_abort_expired(tc, "b", 61003), SK_KAFKA_INVALID_TXN_STATE);
    sk_tc_free(tc);
}

static void test_restore_and_copy(void **st)
{
    (void)st;
    sk_tc *tc = mk();
    sk_tc_part parts[2] = {{"x", 3}, {"y", 4}};
    char *groups[1] = {"g"};
    sk_tc_entry e = {.txn_id = "r",
                     .producer_id = 77,
                     .producer_epoch = 4,
                     .last_producer_id = -1,
                     .last_producer_epoch = 3,
                     .timeout_ms = 5000,
                     .state = SK_TC_ONGOING,
                     .start_ms = 10,
                     .nparts = 2,
                     .parts = parts,
                     .ngroups = 1,
                     .groups = groups};
    assert_int_equal(sk_tc_restore(tc, &e), 0);
    assert_int_equal(sk_tc_check_part(tc, "r", 77, 4, "y", 4), 0);
    assert_int_equal(sk_tc_check_group(tc, "r", 77, 4, "g"), 0);
    sk_tc_entry c = {0};
    assert_int_equal(sk_tc_entry_copy(&c, sk_tc_get(tc, "r")), 0);
    assert_string_equal(c.parts[1].topic, "y");
    assert_int_equal(c.start_ms, 10);
    sk_tc_entry_clear(&c);
    const char *ids[2];
    assert_int_equal(sk_tc_expired(tc, 5011, ids, 2), 1);
    sk_tc_free(tc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_init_new_and_bump),
        cmocka_unit_test(test_init_timeout_bounds),
        cmocka_unit_test(test_revert_new),
        cmocka_unit_test(test_init_expected_epoch),
        cmocka_unit_test(test_epoch_exhausted_rotates),
        cmocka_unit_test(test_add_partitions),
        cmocka_unit_test(test_groups),
        cmocka_unit_test(test_end_commit_and_retries),
        cmocka_unit_test(test_end_abort),
        cmocka_unit_test(test_zombie_fenced),
        cmocka_unit_test(test_timeout_abort),
        cmocka_unit_test(test_restore_and_copy),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
