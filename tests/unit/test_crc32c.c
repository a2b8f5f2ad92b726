/* CRC-32C: published test vectors, hardware and table paths agreeing, and
 * extend() over split buffers. */
#include <setjmp.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "sk_crc32c.h"

/* Exported by sk_crc32c.c for this test: the table (software) path, the
 * crc32 instruction's three streams (*ran false without SSE4.2), and whether
 * sk_crc32c_extend folds long buffers with carry-less multiplies. */
uint32_t sk_crc32c_sw_for_test(uint32_t crc, const void *buf, size_t len);
uint32_t sk_crc32c_hw3_for_test(uint32_t crc, const void *buf, size_t len, bool *ran);
bool sk_crc32c_folds_for_test(void);

/* Every path over p[0..len) from seed agrees with `want`. */
static void assert_paths(uint32_t seed, const uint8_t *p, size_t len, uint32_t want)
{
    assert_int_equal(sk_crc32c_extend(seed, p, len), want);
    assert_int_equal(sk_crc32c_sw_for_test(seed, p, len), want);
    bool ran;
    uint32_t hw = sk_crc32c_hw3_for_test(seed, p, len, &ran);
    if (ran)
        assert_int_equal(hw, want);
}

/* xorshift64: deterministic, so that a failure can be replayed. */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static void test_check_value(void **state)
{
    (void)state;
    assert_int_equal(sk_crc32c("123456789", 9), 0xE3069283u);
    assert_int_equal(sk_crc32c_sw_for_test(0, "123456789", 9), 0xE3069283u);
    assert_int_equal(sk_crc32c("", 0), 0);
    assert_int_equal(sk_crc32c(NULL, 0), 0);
}

/* RFC 3720 (iSCSI), appendix B.4. */
static void test_rfc3720(void **state)
{
    (void)state;
    uint8_t b[32];
    memset(b, 0, sizeof(b));
    assert_int_equal(sk_crc32c(b, 32), 0x8A9136AAu);
    assert_int_equal(sk_crc32c_sw_for_test(0, b, 32), 0x8A9136AAu);
    memset(b, 0xff, sizeof(b));
    assert_int_equal(sk_crc32c(b, 32), 0x62A8AB43u);
    assert_int_equal(sk_crc32c_sw_for_test(0, b, 32), 0x62A8AB43u);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)i;
    assert_int_equal(sk_crc32c(b, 32), 0x46DD794Eu);
    assert_int_equal(sk_crc32c_sw_for_test(0, b, 32), 0x46DD794Eu);
    for (int i = 0; i < 32; i++)
        b[i] = (uint8_t)(31 - i);
    assert_int_equal(sk_crc32c(b, 32), 0x113FDB5Cu);
    assert_int_equal(sk_crc32c_sw_for_test(0, b, 32), 0x113FDB5Cu);
}

/* Bit-at-a-time reference, independent of both tables and the instruction. */
static uint32_t crc_bitwise(uint32_t crc, const uint8_t *p, size_t n)
{
    crc = ~crc;
    while (n--) {
        crc ^= *p++;
        for (int k = 0; k < 8; k++)
            crc = (crc >> 1) ^ (0x82F63B78u & (0u - (crc & 1)));
    }
    return ~crc;
}

static void test_paths_agree(void **state)
{
    (void)state;
    enum { MAX = 4096 + 64 };
    uint8_t *buf = malloc(MAX + 8);
    assert_non_null(buf);
    for (size_t i = 0; i < MAX + 8; i++)
        buf[i] = (uint8_t)rng();
    /* Every length to 300 and a spread beyond, at every alignment 0..7. */
    for (size_t len = 0; len <= MAX; len += len < 300 ? 1 : 37 + (len & 15)) {
        for (size_t align = 0; align < 8; align++) {
            const uint8_t *p = buf + align;
            uint32_t seed = (uint32_t)rng();
            assert_paths(seed, p, len, crc_bitwise(seed, p, len));
        }
    }
    free(buf);
}

/* Lengths about the blocks the hardware path runs three streams over (8192
 * and 256 bytes, three at a time), at odd alignments. */
static void test_three_streams(void **state)
{
    (void)state;
    enum { MAX = 2 * 3 * 8192 + 3 * 256 + 64 };
    static const size_t lens[] = {3 * 256 - 1, 3 * 256, 3 * 256 + 1, 3 * 256 + 8,
                                  2 * 3 * 256 + 13, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 7,
                                  3 * 8192 + 3 * 256, 2 * 3 * 8192 + 3 * 256 + 63};
    uint8_t *buf = malloc(MAX + 8);
    assert_non_null(buf);
    for (size_t i = 0; i < MAX + 8; i++)
        buf[i] = (uint8_t)rng();
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++) {
        for (size_t align = 0; align < 8; align += 3) {
            const uint8_t *p = buf + align;
            uint32_t seed = (uint32_t)rng();
            assert_paths(seed, p, lens[i], crc_bitwise(seed, p, lens[i]));
        }
    }
    free(buf);
}

/* The folding path: lengths about its 256-byte loop, its 64-byte and
 * 16-byte steps and its tail, at every alignment, and long buffers (one
 * MiB, the size of an object's block). */
static void test_fold(void **state)
{
    (void)state;
    if (!sk_crc32c_folds_for_test())
        fprintf(stderr, "note: this CPU does not fold (no AVX-512 VPCLMULQDQ); "
                        "the lengths below check the other paths\n");
    enum { BIG = 1 << 20 };
    uint8_t *buf = malloc(BIG + 64);
    assert_non_null(buf);
    for (size_t i = 0; i < BIG + 64; i++)
        buf[i] = (uint8_t)rng();
    static const size_t lens[] = {255, 256, 257, 271, 272, 287, 319, 320, 321, 335, 383,
                                  511, 512, 513, 575, 576, 767, 1023, 1024, 1039, 4096,
                                  4097 + 64 + 15, 65536 + 48 + 15};
    for (size_t i = 0; i < sizeof lens / sizeof lens[0]; i++)
        for (size_t align = 0; align < 64; align++) {
            const uint8_t *p = buf + align;
            uint32_t seed = (uint32_t)rng();
            assert_paths(seed, p, lens[i], crc_bitwise(seed, p, lens[i]));
        }
    for (size_t len = BIG - 17; len <= BIG; len += 17) {
        uint32_t seed = (uint32_t)rng();
        assert_paths(seed, buf + 3, len, crc_bitwise(seed, buf + 3, len));
    }
    /* All zeros and all ones: the register's XOR into the first lane. */
    memset(buf, 0, 4096);
    assert_paths(0, buf, 4096, crc_bitwise(0, buf, 4096));
    assert_paths(0xffffffffu, buf, 4096, crc_bitwise(0xffffffffu, buf, 4096));
    memset(buf, 0xff, 4096);
    assert_paths(0x12345678u, buf, 4096, crc_bitwise(0x12345678u, buf, 4096));
    free(buf);
}

static void test_extend_split(void **state)
{
    (void)state;
    enum { N = 1500 };
    uint8_t buf[N];
    for (size_t i = 0; i < N; i++)
        buf[i] = (uint8_t)rng();
    uint32_t whole = sk_crc32c(buf, N);
    for (size_t cut = 0; cut <= N; cut += cut < 64 ? 1 : 97) {
        uint32_t c = sk_crc32c(buf, cut);
        assert_int_equal(sk_crc32c_extend(c, buf + cut, N - cut), whole);
        uint32_t s = sk_crc32c_sw_for_test(0, buf, cut);
        assert_int_equal(sk_crc32c_sw_for_test(s, buf + cut, N - cut), whole);
    }
    /* Many small random pieces. */
    for (int round = 0; round < 50; round++) {
        uint32_t c = 0;
        size_t at = 0;
        while (at < N) {
            size_t piece = 1 + rng() % 40;
            if (piece > N - at)
                piece = N - at;
            c = sk_crc32c_extend(c, buf + at, piece);
            at += piece;
        }
        assert_int_equal(c, whole);
    }
}

/* The CRC of two joined buffers from the CRCs of each, at every split of
 * buffers of many lengths (the empty one included), equals the CRC of the
 * whole. */
static void test_combine(void **state)
{
    (void)state;
    size_t total = 70000;
    uint8_t *buf = malloc(total);
    assert_non_null(buf);
    for (size_t i = 0; i < total; i++)
        buf[i] = (uint8_t)(i * 2654435761u >> 11);
    size_t lens[] = {0, 1, 2, 21, 100, 4095, 4096, 8193, 65536, 70000};
    for (size_t l = 0; l < sizeof lens / sizeof lens[0]; l++) {
        size_t len = lens[l];
        uint32_t whole = sk_crc32c(buf, len);
        size_t splits[] = {0, 1, 21, len / 2, len ? len - 1 : 0, len};
        for (size_t k = 0; k < sizeof splits / sizeof splits[0]; k++) {
            size_t at = splits[k] <= len ? splits[k] : len;
            uint32_t a = sk_crc32c(buf, at), b = sk_crc32c(buf + at, len - at);
            assert_int_equal(sk_crc32c_combine(a, b, len - at), whole);
        }
    }
    free(buf);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_check_value),
        cmocka_unit_test(test_rfc3720),
        cmocka_unit_test(test_paths_agree),
        cmocka_unit_test(test_three_streams),
        cmocka_unit_test(test_fold),
        cmocka_unit_test(test_extend_split),
        cmocka_unit_test(test_combine),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
