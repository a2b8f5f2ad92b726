/* pace, producers metered as the WAL fills, driven with fake time: the
 * factor of the upload rate at each fill, tokens taken and given back, the
 * hold after a large request, the end of metering when the fill falls, the
 * rate is unknown or uploads fail, the held time it counts, and a model of a
 * WAL that uploads drain slower than producers would fill it, whose fill
 * settles below the limit instead of reaching it. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include "pace.h"

#define NEAR(a, b) ((a) > (b) - 1e-9 && (a) < (b) + 1e-9)

static void test_factor(void **state)
{
    (void)state;
    assert_true(sk_pace_factor(0.0) == 0.0);
    assert_true(sk_pace_factor(SK_PACE_START) == 0.0);
    assert_true(NEAR(sk_pace_factor(SK_PACE_START + 1e-12), SK_PACE_MAX_FACTOR));
    double mid = sk_pace_factor((SK_PACE_START + 1.0) / 2);
    assert_true(NEAR(mid, (SK_PACE_MAX_FACTOR + SK_PACE_MIN_FACTOR) / 2));
    assert_true(sk_pace_factor(0.999999) >= SK_PACE_MIN_FACTOR);
    /* Full: produce is refused, and the refusals go back at once. */
    assert_true(sk_pace_factor(1.0) == 0.0);
    assert_true(sk_pace_factor(3.0) == 0.0);
    double prev = 1e9;
    for (double f = SK_PACE_START + 0.01; f < 1.0; f += 0.01) {
        assert_true(sk_pace_factor(f) < prev);
        prev = sk_pace_factor(f);
    }
}

static void test_tokens(void **state)
{
    (void)state;
    sk_pace p = {0};
    /* Below the start, or no rate known: nothing to do, no timer, and
     * requests are not metered. */
    assert_int_equal(sk_pace_step(&p, 1000, 0.2, 1e6), 0);
    assert_int_equal(sk_pace_step(&p, 1000, 0.9, 0.0), 0);
    assert_false(p.active);
    assert_int_equal(sk_pace_take(&p, 1000, 1 << 20), 0);
    assert_false(p.holding);
    /* 0.75 full, uploads at 1 MB/s: producers may send 1.05 MB/s. */
    double factor = sk_pace_factor(0.75);
    assert_int_equal(sk_pace_step(&p, 1000, 0.75, 1e6), SK_PACE_TICK_MS);
    assert_true(p.active);
    assert_true(NEAR(p.rate, 1000.0 * factor));
    /* A 21 000-byte request takes the bucket 20 ms below 0. */
    int64_t w = sk_pace_take(&p, 1000, 21000);
    assert_int_equal(w, 20);
    assert_true(p.holding);
    /* A step before then keeps holding, and says when to look again. */
    assert_int_equal(sk_pace_step(&p, 1010, 0.75, 1e6), 10);
    assert_true(p.holding);
    assert_int_equal(sk_pace_step(&p, 1021, 0.75, 1e6), SK_PACE_TICK_MS);
    assert_false(p.holding);
    assert_int_equal(p.held_ms, 21);
    /* Tokens pile up no further than SK_PACE_BURST_MS of the rate. */
    assert_int_equal(sk_pace_step(&p, 5000, 0.75, 1e6), SK_PACE_TICK_MS);
    assert_true(p.tokens <= p.rate * SK_PACE_BURST_MS + 1e-6);
    assert_int_equal(sk_pace_take(&p, 5000, 1000), 0);
    assert_false(p.holding);
    /* A huge request: the wait is cut to a tick, where the step looks at
     * the fill again. */
    assert_int_equal(sk_pace_take(&p, 5000, 50u << 20), SK_PACE_TICK_MS);
    assert_true(p.holding);
    assert_int_equal(sk_pace_held_ms(&p, 5030), 21 + 30);
    /* The fill falls below the start while held: metering ends at once,
     * the hold counted up to then. */
    assert_int_equal(sk_pace_step(&p, 5040, 0.4, 1e6), 0);
    assert_false(p.active);
    assert_false(p.holding);
    assert_int_equal(p.held_ms, 21 + 40);
    assert_int_equal(sk_pace_held_ms(&p, 9000), 21 + 40);
}

static void test_full_and_failing(void **state)
{
    (void)state;
    sk_pace p = {0};
    assert_int_equal(sk_pace_step(&p, 0, 0.9, 1e6), SK_PACE_TICK_MS);
    assert_true(sk_pace_take(&p, 0, 100000) > 0);
    assert_true(p.holding);
    /* Full: not held (produce is refused, and should be at once), looked
     * at every tick. */
    assert_int_equal(sk_pace_step(&p, 10, 1.2, 1e6), SK_PACE_TICK_MS);
    assert_true(p.active);
    assert_false(p.holding);
    assert_int_equal(sk_pace_take(&p, 10, 100000), 0);
    /* Trimmed below full: metered again. */
    assert_int_equal(sk_pace_step(&p, 110, 0.95, 1e6), SK_PACE_TICK_MS);
    assert_true(sk_pace_take(&p, 110, 100000) > 0);
    assert_true(p.holding);
    /* Uploads fail (rate 0): waiting does not help, metering ends. */
    assert_int_equal(sk_pace_step(&p, 130, 0.95, 0.0), 0);
    assert_false(p.active);
    assert_false(p.holding);
    assert_int_equal(sk_pace_take(&p, 140, 100000), 0);
    assert_false(p.holding);
}

/* A WAL of 100 MB that a producer would fill at `in` bytes per ms in
 * requests of 64 KiB while read, and that uploads drain at `out` bytes per
 * ms once past a quarter: the fill settles between the start and the
 * limit, whatever the producer would send. */
static void settle(double in, double out, double *lo, double *hi)
{
    const double cap = 100e6;
    sk_pace p = {0};
    double wal = 0, owed = 0;
    int64_t next_step = 0;
    *lo = 1e18;
    *hi = 0;
    for (int64_t now = 0; now < 600000; now++) {
        if (now >= next_step || (!p.active && wal / cap > SK_PACE_START)) {
            int64_t d = sk_pace_step(&p, now, wal / cap, out * 1000);
            next_step = d ? now + d : INT64_MAX;
        }
        owed += in;
        while (!p.holding && owed >= 65536 && wal < cap) {
            owed -= 65536;
            wal += 65536;
            int64_t d = sk_pace_take(&p, now, 65536);
            if (d)
                next_step = now + d;
        }
        if (owed > 1e6)
            owed = 1e6; /* what the client and the sockets hold, at most */
        if (wal > cap / 4)
            wal -= out;
        if (now > 300000) {
            if (wal < *lo)
                *lo = wal;
            if (wal > *hi)
                *hi = wal;
        }
    }
}

static void test_settles(void **state)
{
    (void)state;
    double lo, hi;
    /* Producers would send 1.6x, 4x and 50x what uploads take. */
    double ratios[] = {1.6, 4, 50};
    for (size_t i = 0; i < sizeof ratios / sizeof *ratios; i++) {
        settle(ratios[i] * 1000, 1000, &lo, &hi);
        assert_true(lo > SK_PACE_START * 100e6);
        assert_true(hi < 0.99 * 100e6);
    }
    /* Uploads faster than producers: never metered, the WAL stays near
     * where uploads start. */
    settle(500, 600, &lo, &hi);
    assert_true(hi < SK_PACE_START * 100e6);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_factor),
        cmocka_unit_test(test_tokens),
        cmocka_unit_test(test_full_and_failing),
        cmocka_unit_test(test_settles),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
