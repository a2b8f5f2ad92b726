/* Transactional ids moving with their partition of __consumer_offsets
 * (docs/transactions.md, "In a cluster"): the HANDOFF/ADOPT state carries
 * their records and the partition's transaction index (hstate.c, version 2;
 * version 1 records still decode), the
 * records parse back to the ids' state, and the coordinator forgets an id
 * that left (tcoord.c). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "hstate.h"
#include "sk_err.h"
#include "tcoord.h"
#include "txns.h"

static sk_tc_entry entry(const char *id, int64_t pid, sk_tc_state st)
{
    static sk_tc_part parts[2] = {{"orders", 0}, {"orders", 3}};
    static char *groups[1] = {"g1"};
    sk_tc_entry e = {0};
    e.txn_id = (char *)id;
    e.producer_id = pid;
    e.producer_epoch = 4;
    e.last_producer_id = -1;
    e.last_producer_epoch = -1;
    e.timeout_ms = 60000;
    e.state = st;
    e.start_ms = 1000;
    e.update_ms = 2000;
    e.nparts = 2;
    e.parts = parts;
    e.ngroups = 1;
    e.groups = groups;
    return e;
}

static void body_of(sk_buf *b, const sk_tc_entry *e)
{
    sk_txoff off = {"g1", "in", "m", 2, 7, 42};
    sk_buf_init(b, 0);
    sk_txrec_put(b, e, 1, &off);
    assert_false(sk_buf_failed(b));
}

static void state_with(sk_hstate *h, int n, sk_buf *bodies)
{
    memset(h, 0, sizeof *h);
    h->part = 3;
    h->epoch = 2;
    h->next_offset = 10;
    h->ntxns = (uint32_t)n;
    h->txns = calloc((size_t)n + 1, sizeof *h->txns);
    h->txn_lens = calloc((size_t)n + 1, sizeof *h->txn_lens);
    assert_non_null(h->txns);
    assert_non_null(h->txn_lens);
    for (int i = 0; i < n; i++) {
        h->txns[i] = bodies[i].data;
        h->txn_lens[i] = bodies[i].len;
    }
    /* The partition's transaction index: one open, one aborted. */
    h->ntxidx = 2;
    h->txidx = calloc(2, sizeof *h->txidx);
    assert_non_null(h->txidx);
    h->txidx[0] = (sk_txidx_ent){11, 4, -1};
    h->txidx[1] = (sk_txidx_ent){12, 1, 3};
}

static void test_txns_round_trip(void **st)
{
    (void)st;
    sk_buf bodies[2];
    sk_tc_entry a = entry("tx-a", 11, SK_TC_ONGOING), b = entry("tx-b", 12, SK_TC_PREPARE_COMMIT);
    body_of(&bodies[0], &a);
    body_of(&bodies[1], &b);
    sk_hstate h, d;
    state_with(&h, 2, bodies);
    sk_buf enc;
    sk_buf_init(&enc, 0);
    sk_hstate_encode(&enc, &h);
    assert_int_equal(enc.data[0], 2);
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &d), 0);
    assert_int_equal(d.ntxns, 2);
    assert_int_equal(d.ntxidx, 2);
    assert_int_equal(d.txidx[0].pid, 11);
    assert_int_equal(d.txidx[0].last, -1);
    assert_int_equal(d.txidx[1].first, 1);
    assert_int_equal(d.txidx[1].last, 3);
    for (int i = 0; i < 2; i++) {
        sk_tc_entry e;
        int noffs;
        sk_txoff *offs;
        assert_int_equal(d.txn_lens[i], bodies[i].len);
        assert_int_equal(sk_txrec_get(d.txns[i], d.txn_lens[i], &e, &noffs, &offs), 0);
        assert_string_equal(e.txn_id, i ? "tx-b" : "tx-a");
        assert_int_equal(e.state, i ? SK_TC_PREPARE_COMMIT : SK_TC_ONGOING);
        assert_int_equal(e.nparts, 2);
        assert_int_equal(noffs, 1);
        assert_int_equal(offs[0].offset, 42);
        sk_tc_entry_clear(&e);
        sk_txoffs_free(noffs, offs);
    }
    sk_hstate_free(&d);
    /* Every cut of the record fails cleanly. */
    for (size_t n = 0; n < enc.len; n++) {
        uint8_t *c = malloc(n ? n : 1);
        memcpy(c, enc.data, n);
        assert_int_equal(sk_hstate_decode(c, n, &d) == 0 ? 0 : 1, n == enc.len ? 0 : 1);
        free(c);
    }
    sk_hstate_free(&h);
    sk_buf_free(&enc);
    sk_buf_free(&bodies[0]);
    sk_buf_free(&bodies[1]);
}

/* A record written before the section existed (version 1) has no ids. */
static void test_version1_has_no_txns(void **st)
{
    (void)st;
    sk_hstate h, d;
    state_with(&h, 0, NULL);
    h.ntxidx = 0;
    sk_buf enc;
    sk_buf_init(&enc, 0);
    sk_hstate_encode(&enc, &h);
    enc.data[0] = 1;
    assert_int_equal(sk_hstate_decode(enc.data, enc.len - 8, &d), 0);
    assert_int_equal(d.ntxns, 0);
    assert_int_equal(d.ntxidx, 0);
    sk_hstate_free(&d);
    /* Version 2 without its count is cut short. */
    enc.data[0] = 2;
    assert_int_equal(sk_hstate_decode(enc.data, enc.len - 8, &d), SK_ERR_CORRUPT);
    enc.data[0] = 3;
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &d), SK_ERR_CORRUPT);
    sk_hstate_free(&h);
    sk_buf_free(&enc);
}

static void test_forget(void **st)
{
    (void)st;
    sk_tc_config cfg = {.max_timeout_ms = 900000};
    sk_tc *tc = sk_tc_new(&cfg);
    sk_tc_entry a = entry("tx-a", 11, SK_TC_ONGOING), b = entry("tx-b", 12, SK_TC_EMPTY);
    assert_int_equal(sk_tc_restore(tc, &a), 0);
    assert_int_equal(sk_tc_restore(tc, &b), 0);
    assert_int_equal(sk_tc_count(tc), 2);
    sk_tc_forget(tc, "tx-a");
    sk_tc_forget(tc, "unknown");
    assert_int_equal(sk_tc_count(tc), 1);
    assert_null(sk_tc_get(tc, "tx-a"));
    assert_non_null(sk_tc_get(tc, "tx-b"));
    /* An id that comes back is whole again. */
    assert_int_equal(sk_tc_restore(tc, &a), 0);
    assert_int_equal(sk_tc_get(tc, "tx-a")->producer_id, 11);
    assert_int_equal(sk_tc_check_part(tc, "tx-a", 11, 4, "orders", 3), 0);
    assert_int_equal(sk_tc_check_part(tc, "tx-a", 11, 4, "orders", 1), SK_KAFKA_INVALID_TXN_STATE);
    sk_tc_free(tc);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_txns_round_trip),
        cmocka_unit_test(test_version1_has_no_txns),
        cmocka_unit_test(test_forget),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
