#include "sk_crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#define HAVE_X86 1
#endif

#define POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t table[8][256];
static uint32_t x2n[32]; /* x^(2^k) modulo the polynomial */

/* a * b modulo the polynomial, both reflected (x^0 is the top bit). */
static uint32_t multmodp(uint32_t a, uint32_t b)
{
    uint32_t p = 0;
    for (uint32_t m = 1u << 31; m && a; m >>= 1) {
        if (a & m) {
            p ^= b;
            a &= ~m;
        }
        b = (b & 1) ? (b >> 1) ^ POLY : b >> 1;
    }
    return p;
}
#ifdef HAVE_X86
/* The hardware path runs three streams at once (the crc32 instruction's
 * latency is three times its issue rate), over blocks of LONG, then SHORT
 * bytes, and joins them: a stream's register moved past n zero bytes is the
 * register times x^(8n) modulo the polynomial, a linear map applied here with
 * one table per byte of the register. */
#define LONG 8192
#define SHORT 256
static uint32_t shift_long[4][256], shift_short[4][256];
#endif
static bool have_hw, have_fold;
static pthread_once_t once = PTHREAD_ONCE_INIT;

#ifdef HAVE_X86
/* The tables that move a register past n zero bytes. */
static void shift_tables(uint32_t t[4][256], size_t n)
{
    uint32_t xn = 1u << 31; /* x^0 */
    for (size_t i = 0; i < 8 * n; i++)
        xn = (xn & 1) ? (xn >> 1) ^ POLY : xn >> 1;
    for (int k = 0; k < 4; k++)
        for (uint32_t b = 0; b < 256; b++)
            t[k][b] = multmodp(xn, b << (8 * k));
}

static uint32_t shifted(uint32_t t[4][256], uint32_t c)
{
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
}
#endif

#ifdef HAVE_X86
/* The folding path (CPUs with AVX-512 and VPCLMULQDQ) keeps 16 lanes of 128
 * message bits and moves each forward by D bits at a time with two
 * carry-less multiplies: a lane A = H x^64 + L (H its first 8 bytes, the
 * reflected order puts the high powers first) times x^D is H x^(D+64) +
 * L x^D, congruent modulo the polynomial to H (x^(D+64) mod P) + L (x^D mod
 * P), a 96-bit value that is XORed into the data D bits on. A reflected
 * carry-less product carries an extra factor x, so the constants are
 * x^(D+63) and x^(D-1) mod P, each in the top half of its 64-bit half-lane.
 * What is left, one 128-bit lane, gets the crc32 instruction. */
static uint64_t fold_k[5][2]; /* D = 2048, 512, 384, 256, 128 bits */
static const unsigned fold_d[5] = {2048, 512, 384, 256, 128};

/* x^k modulo the polynomial, reflected. */
static uint32_t xpow(unsigned k)
{
    uint32_t xn = 1u << 31; /* x^0 */
    for (unsigned j = 0; k; k >>= 1, j++)
        if (k & 1)
            xn = multmodp(x2n[j], xn);
    return xn;
}

static bool cpu_folds(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d) || !(c & bit_PCLMUL) || !(c & bit_OSXSAVE))
        return false;
    unsigned lo, hi;
    __asm__ volatile("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 0xe6) != 0xe6) /* the OS saves SSE, AVX and AVX-512 state */
        return false;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return false;
    return (b & bit_AVX512F) && (b & bit_AVX512VL) && (c & bit_VPCLMULQDQ);
}
#endif

static void init(void)
{
    x2n[0] = 1u << 30; /* x^1 */
    for (int k = 1; k < 32; k++)
        x2n[k] = multmodp(x2n[k - 1], x2n[k - 1]);
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
        table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int t = 1; t < 8; t++)
            table[t][n] = (table[t - 1][n] >> 8) ^ table[0][table[t - 1][n] & 0xff];
#ifdef HAVE_X86
    unsigned a, b, c, d;
    if (__get_cpuid(1, &a, &b, &c, &d))
        have_hw = (c & bit_SSE4_2) != 0;
    shift_tables(shift_long, LONG);
    shift_tables(shift_short, SHORT);
    for (int i = 0; i < 5; i++) {
        fold_k[i][0] = (uint64_t)xpow(fold_d[i] + 63) << 32;
        fold_k[i][1] = (uint64_t)xpow(fold_d[i] - 1) << 32;
    }
    have_fold = have_hw && cpu_folds();
#endif
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
    while (len && ((uintptr_t)p & 7)) {
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
        len--;
    }
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        v ^= crc;
        crc = table[7][v & 0xff] ^ table[6][(v >> 8) & 0xff] ^ table[5][(v >> 16) & 0xff] ^
              table[4][(v >> 24) & 0xff] ^ table[3][(v >> 32) & 0xff] ^
              table[2][(v >> 40) & 0xff] ^ table[1][(v >> 48) & 0xff] ^ table[0][v >> 56];
        p += 8;
        len -= 8;
    }
    while (len--)
        crc = (crc >> 8) ^ table[0][(crc ^ *p++) & 0xff];
    return crc;
}

#ifdef HAVE_X86
/* Three streams over blocks of `block` bytes while 3 * block remain. */
__attribute__((target("sse4.2"))) static uint64_t crc_hw3(uint64_t c, const unsigned char **pp,
                                                          size_t *len, size_t block,
                                                          uint32_t t[4][256])
{
    const unsigned char *p = *pp;
    while (*len >= 3 * block) {
        uint64_t c1 = 0, c2 = 0;
        for (size_t i = 0; i < block; i += 8) {
            uint64_t v0, v1, v2;
            memcpy(&v0, p + i, 8);
            memcpy(&v1, p + block + i, 8);
            memcpy(&v2, p + 2 * block + i, 8);
            c = _mm_crc32_u64(c, v0);
            c1 = _mm_crc32_u64(c1, v1);
            c2 = _mm_crc32_u64(c2, v2);
        }
        c = shifted(t, (uint32_t)c) ^ (uint32_t)c1;
        c = shifted(t, (uint32_t)c) ^ (uint32_t)c2;
        p += 3 * block;
        *len -= 3 * block;
    }
    *pp = p;
    return c;
}

#define FOLD_TARGET __attribute__((target("sse4.2,pclmul,avx512f,avx512vl,vpclmulqdq")))

FOLD_TARGET static inline __m512i fold512(__m512i x, __m512i k, __m512i data)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), data, 0x96);
}

FOLD_TARGET static inline __m128i fold128(__m128i x, const uint64_t k[2], __m128i data)
{
    __m128i kk = _mm_loadu_si128((const __m128i *)k);
    return _mm_ternarylogic_epi64(_mm_clmulepi64_si128(x, kk, 0x00),
                                  _mm_clmulepi64_si128(x, kk, 0x11), data, 0x96);
}

FOLD_TARGET static __m512i k512(const uint64_t k[2])
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)k));
}

/* The register c (not inverted) moved over len >= 256 bytes at p. */
FOLD_TARGET static uint32_t crc_fold(uint32_t c, const unsigned char *p, size_t len)
{
    __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64);
    __m512i x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
    /* The register XORed into the first 32 bits, then a register of 0. */
    x0 = _mm512_xor_si512(x0, _mm512_maskz_set1_epi32(1, (int)c));
    p += 256;
    len -= 256;
    __m512i k = k512(fold_k[0]);
    for (; len >= 256; p += 256, len -= 256) {
        x0 = fold512(x0, k, _mm512_loadu_si512(p));
        x1 = fold512(x1, k, _mm512_loadu_si512(p + 64));
        x2 = fold512(x2, k, _mm512_loadu_si512(p + 128));
        x3 = fold512(x3, k, _mm512_loadu_si512(p + 192));
    }
    k = k512(fold_k[1]);
    x0 = fold512(x0, k, x1);
    x0 = fold512(x0, k, x2);
    x0 = fold512(x0, k, x3);
    for (; len >= 64; p += 64, len -= 64)
        x0 = fold512(x0, k, _mm512_loadu_si512(p));
    /* Four lanes into the last: 384, 256 and 128 bits on. */
    __m128i r = _mm512_extracti32x4_epi32(x0, 3);
    r = fold128(_mm512_extracti32x4_epi32(x0, 2), fold_k[4], r);
    r = fold128(_mm512_extracti32x4_epi32(x0, 1), fold_k[3], r);
    r = fold128(_mm512_castsi512_si128(x0), fold_k[2], r);
    for (; len >= 16; p += 16, len -= 16)
        r = fold128(r, fold_k[4], _mm_loadu_si128((const __m128i *)p));
    uint64_t v = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
    v = _mm_crc32_u64(v, (uint64_t)_mm_extract_epi64(r, 1));
    while (len--)
        v = _mm_crc32_u8((uint32_t)v, *p++);
    return (uint32_t)v;
}

__attribute__((target("sse4.2"))) static uint32_t crc_streams(uint32_t crc,
                                                              const unsigned char *p, size_t len)
{
    uint64_t c = crc;
    while (len && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
    c = crc_hw3(c, &p, &len, LONG, shift_long);
    c = crc_hw3(c, &p, &len, SHORT, shift_short);
    while (len >= 8) {
        uint64_t v;
        memcpy(&v, p, 8);
        c = _mm_crc32_u64(c, v);
        p += 8;
        len -= 8;
    }
    while (len--)
        c = _mm_crc32_u8((uint32_t)c, *p++);
    return (uint32_t)c;
}

static uint32_t crc_hw(uint32_t crc, const unsigned char *p, size_t len)
{
    return have_fold && len >= 256 ? crc_fold(crc, p, len) : crc_streams(crc, p, len);
}
#endif

uint32_t sk_crc32c_extend(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&once, init);
    crc = ~crc;
#ifdef HAVE_X86
    if (have_hw)
        return ~crc_hw(crc, buf, len);
#endif
    return ~crc_sw(crc, buf, len);
}

uint32_t sk_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b)
{
    pthread_once(&once, init);
    /* crc_a's register moved past len_b zero bytes: times x^(8 len_b). */
    uint32_t xn = 1u << 31; /* x^0 */
    for (unsigned k = 3; len_b; len_b >>= 1, k++)
        if (len_b & 1)
            xn = multmodp(x2n[k & 31], xn);
    return multmodp(xn, crc_a) ^ crc_b;
}

/* Exposed for the unit test that checks the paths agree. */
uint32_t sk_crc32c_hw3_for_test(uint32_t crc, const void *buf, size_t len, bool *ran);
uint32_t sk_crc32c_hw3_for_test(uint32_t crc, const void *buf, size_t len, bool *ran)
{
    pthread_once(&once, init);
    *ran = false;
#ifdef HAVE_X86
    if (have_hw) {
        *ran = true;
        return ~crc_streams(~crc, buf, len);
    }
#endif
    (void)buf;
    (void)len;
    return crc;
}

bool sk_crc32c_folds_for_test(void);
bool sk_crc32c_folds_for_test(void)
{
    pthread_once(&once, init);
    return have_fold;
}

uint32_t sk_crc32c_sw_for_test(uint32_t crc, const void *buf, size_t len);
uint32_t sk_crc32c_sw_for_test(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&once, init);
    return ~crc_sw(~crc, buf, len);
}
