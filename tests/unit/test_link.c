/* LINK records (broker/meta.h): their codec, and how the view indexes one:
 * as the batch it stands for, at the link's own position. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kbatch.h"
#include "meta.h"
#include "sk_err.h"
#include "store.h"

/* A real batch of three records, with its final offsets. */
static int64_t make_batch(uint8_t *out, size_t cap, int64_t base)
{
    kb_build_rec r[3];
    for (int i = 0; i < 3; i++)
        r[i] = (kb_build_rec){{NULL, -1}, {(const uint8_t *)"value", 5}, 1700000000000 + i};
    int64_t len = kb_build(out, cap, r, 3, 42, 1, 7, 0);
    assert_true(len > 0);
    kb_set_base_offset(out, base);
    kb_set_leader_epoch(out, 5);
    return len;
}

static sk_link link_of(const uint8_t *batch, int64_t len)
{
    sk_link l;
    memset(&l, 0, sizeof l);
    for (int i = 0; i < 16; i++)
        l.id.b[i] = (uint8_t)(i + 1);
    l.part = 3;
    l.plog = 12;
    l.plsn = 123456;
    l.len = (uint32_t)len;
    memcpy(l.head, batch, KB_HEADER_SIZE);
    return l;
}

static void test_codec(void **state)
{
    (void)state;
    uint8_t batch[512];
    int64_t len = make_batch(batch, sizeof batch, 1000);
    sk_link l = link_of(batch, len), back;
    uint8_t rec[SK_LINK_SIZE];
    sk_link_encode(rec, &l);
    assert_int_equal(sk_link_decode(rec, sizeof rec, &back), 0);
    assert_memory_equal(&back.id, &l.id, sizeof l.id);
    assert_int_equal(back.part, 3);
    assert_int_equal(back.plog, 12);
    assert_int_equal(back.plsn, 123456);
    assert_int_equal(back.len, (uint32_t)len);
    assert_memory_equal(back.head, batch, KB_HEADER_SIZE);
    /* Wrong size, no payload log, a length the header does not give. */
    assert_int_equal(sk_link_decode(rec, sizeof rec - 1, &back), SK_ERR_CORRUPT);
    sk_link bad = l;
    bad.plog = 0;
    sk_link_encode(rec, &bad);
    assert_int_equal(sk_link_decode(rec, sizeof rec, &back), SK_ERR_CORRUPT);
    bad = l;
    bad.len = l.len + 1;
    sk_link_encode(rec, &bad);
    assert_int_equal(sk_link_decode(rec, sizeof rec, &back), SK_ERR_CORRUPT);
    bad = l;
    memset(bad.head + 8, 0, 4); /* batchLength 0: not a batch */
    sk_link_encode(rec, &bad);
    assert_int_equal(sk_link_decode(rec, sizeof rec, &back), SK_ERR_CORRUPT);
}

static void test_view_indexes_the_batch(void **state)
{
    (void)state;
    uint8_t batch[512];
    int64_t len = make_batch(batch, sizeof batch, 1000);
    sk_link l = link_of(batch, len);
    uint8_t rec[SK_LINK_SIZE];
    sk_link_encode(rec, &l);
    sk_store_rec r;
    assert_int_equal(sk_store_rec_parse(&r, 5000, SK_WAL_LINK, rec, sizeof rec), 0);
    /* Indexed like a data record of that batch, at the link's position. */
    assert_int_equal(r.type, SK_WAL_DATA);
    assert_int_equal(r.lsn, 5000);
    assert_int_equal(r.end, 5000 + WAL_RECORD_HEADER + SK_LINK_SIZE);
    assert_int_equal(r.part, 3);
    assert_int_equal(r.base, 1000);
    assert_int_equal(r.last, 1002);
    assert_int_equal(r.len, (uint32_t)len);
    assert_int_equal(r.pid, 42);
    assert_int_equal(r.base_seq, 7);
    assert_int_equal(r.max_ts, 1700000000002);
    sk_store_rec_free(&r);
    /* A damaged link is refused, never indexed. */
    rec[SK_DATA_HEADER + 2] ^= 0xff;
    rec[0] = 9;
    assert_int_equal(sk_store_rec_parse(&r, 5000, SK_WAL_LINK, rec, sizeof rec), SK_ERR_CORRUPT);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codec),
        cmocka_unit_test(test_view_indexes_the_batch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
