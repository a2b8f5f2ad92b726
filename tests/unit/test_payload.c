/* proxy/payload: a payload log on a real WAL in a temporary directory:
 * records, holds, and trimming that never passes a hold or the floor. */
#define _XOPEN_SOURCE 700
#include <event2/event.h>
#include <ftw.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "payload.h"
#include "sk_err.h"
#include "sk_time.h"

struct fx {
    char dir[64];
    struct event_base *base;
    pay_log *p;
    int durable, failed;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/skiff-test-payload-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->base = event_base_new();
    int e = 0;
    wal_storage *st = wal_posix_new(f->base, f->dir, &e);
    if (!st)
        return -1;
    wal_opts o = {0};
    o.segment_bytes = 64 << 10; /* small segments: trimming shows */
    o.no_preallocate = true;
    char why[256];
    f->p = pay_open(f->base, st, &o, why, sizeof why);
    if (!f->p)
        return -1;
    *state = f;
    return 0;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    struct fx *f = *state;
    pay_close(f->p);
    nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    event_base_free(f->base);
    free(f);
    return 0;
}

static void on_durable(void *arg, int err, wal_lsn lsn)
{
    struct fx *f = arg;
    (void)lsn;
    if (err)
        f->failed++;
    else
        f->durable++;
}

static void run_until_durable(struct fx *f, int n)
{
    int64_t deadline = sk_mono_ms() + 10000;
    while (f->durable + f->failed < n) {
        assert_true(sk_mono_ms() < deadline);
        struct timeval tv = {0, 10000};
        event_base_loopexit(f->base, &tv);
        event_base_loop(f->base, EVLOOP_ONCE);
    }
    assert_int_equal(f->failed, 0);
}

static kc_uuid topic(void)
{
    kc_uuid t;
    for (int i = 0; i < 16; i++)
        t.b[i] = (uint8_t)(0xa0 + i);
    return t;
}

static void fill(uint8_t *b, uint32_t len, int seed)
{
    for (uint32_t i = 0; i < len; i++)
        b[i] = (uint8_t)(seed * 31 + i);
}

static void test_records_round_trip(void **state)
{
    struct fx *f = *state;
    kc_uuid t = topic();
    uint8_t batch[300], back[400];
    wal_lsn lsn[3];
    for (int i = 0; i < 3; i++) {
        fill(batch, sizeof batch, i);
        assert_int_equal(pay_append(f->p, &t, 7 + i, batch, sizeof batch, on_durable, f, &lsn[i]),
                         0);
    }
    assert_true(lsn[0] < lsn[1] && lsn[1] < lsn[2]);
    run_until_durable(f, 3);
    for (int i = 0; i < 3; i++) {
        kc_uuid rt;
        int32_t part;
        uint32_t len;
        assert_int_equal(pay_read(f->p, lsn[i], &rt, &part, back, sizeof back, &len), 0);
        fill(batch, sizeof batch, i);
        assert_int_equal(len, sizeof batch);
        assert_int_equal(part, 7 + i);
        assert_memory_equal(&rt, &t, sizeof t);
        assert_memory_equal(back, batch, sizeof batch);
    }
    /* Not a payload record's position. */
    kc_uuid rt;
    int32_t part;
    uint32_t len;
    assert_int_not_equal(pay_read(f->p, lsn[0] + 1, &rt, &part, back, sizeof back, &len), 0);
    /* The header codec refuses what it did not write. */
    const uint8_t *b;
    uint32_t bl;
    uint8_t bad[PAY_HEADER] = {9};
    assert_int_equal(pay_parse(bad, sizeof bad, &rt, &part, &b, &bl), SK_ERR_CORRUPT);
    assert_int_equal(pay_parse(bad, 3, &rt, &part, &b, &bl), SK_ERR_CORRUPT);
}

static void test_holds(void **state)
{
    struct fx *f = *state;
    kc_uuid t = topic();
    uint8_t batch[100] = {1};
    wal_lsn lsn[5];
    assert_int_equal(pay_oldest_hold(f->p), UINT64_MAX);
    for (int i = 0; i < 5; i++)
        assert_int_equal(pay_append(f->p, &t, 0, batch, sizeof batch, on_durable, f, &lsn[i]), 0);
    assert_int_equal(pay_holds(f->p), 5);
    assert_int_equal(pay_oldest_hold(f->p), lsn[0]);
    /* Released out of order: the oldest is the oldest still held. */
    pay_release(f->p, lsn[1]);
    pay_release(f->p, lsn[3]);
    assert_int_equal(pay_oldest_hold(f->p), lsn[0]);
    pay_release(f->p, lsn[0]);
    assert_int_equal(pay_oldest_hold(f->p), lsn[2]);
    /* Twice, or a position never held: nothing. */
    pay_release(f->p, lsn[0]);
    pay_release(f->p, lsn[2] + 1);
    assert_int_equal(pay_holds(f->p), 2);
    pay_release(f->p, lsn[2]);
    pay_release(f->p, lsn[4]);
    assert_int_equal(pay_holds(f->p), 0);
    assert_int_equal(pay_oldest_hold(f->p), UINT64_MAX);
    run_until_durable(f, 5);
}

/* Appends n batches of len bytes, all durable; their positions in out. */
static void append_many(struct fx *f, int n, uint32_t len, wal_lsn *out)
{
    kc_uuid t = topic();
    uint8_t *batch = calloc(1, len);
    int before = f->durable;
    for (int i = 0; i < n; i++)
        assert_int_equal(pay_append(f->p, &t, 0, batch, len, on_durable, f, &out[i]), 0);
    free(batch);
    run_until_durable(f, before + n);
}

static void settle(struct fx *f)
{
    for (int i = 0; i < 50; i++) {
        struct timeval tv = {0, 10000};
        event_base_loopexit(f->base, &tv);
        event_base_loop(f->base, EVLOOP_ONCE);
    }
}

static void test_trim_stops_at_holds_and_floor(void **state)
{
    struct fx *f = *state;
    enum { N = 40 };
    wal_lsn lsn[N];
    append_many(f, N, 8000, lsn); /* ~320 KB: several 64 KB segments */
    wal *w = pay_wal(f->p);
    wal_lsn start0 = wal_start_lsn(w);
    /* Everything is held: nothing goes, whatever the floor. */
    pay_trim(f->p, UINT64_MAX);
    settle(f);
    assert_int_equal(wal_start_lsn(w), start0);
    /* Released up to 30, but the floor says a main still reads from 10. */
    for (int i = 0; i < 30; i++)
        pay_release(f->p, lsn[i]);
    pay_trim(f->p, lsn[10]);
    settle(f);
    wal_lsn s1 = wal_start_lsn(w);
    assert_true(s1 <= lsn[10]);
    kc_uuid rt;
    int32_t part;
    uint32_t len;
    uint8_t *buf = malloc(9000);
    assert_int_equal(pay_read(f->p, lsn[10], &rt, &part, buf, 9000, &len), 0);
    /* The floor moves on: trimming stops at the oldest hold (30). */
    pay_trim(f->p, UINT64_MAX);
    settle(f);
    wal_lsn s2 = wal_start_lsn(w);
    assert_true(s2 > s1);
    assert_true(s2 <= lsn[30]);
    assert_int_equal(pay_read(f->p, lsn[30], &rt, &part, buf, 9000, &len), 0);
    assert_int_equal(pay_read(f->p, lsn[0], &rt, &part, buf, 9000, &len), SK_ERR_NOENT);
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_records_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_holds, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_stops_at_holds_and_floor, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
