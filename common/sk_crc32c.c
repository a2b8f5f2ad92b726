#include "sk_crc32c.h"

#include <pthread.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <cpuid.h>
#include <nmmintrin.h>
#define HAVE_X86 1
#endif

#define POLY 0x82f63b78u /* Castagnoli, reflected */

static uint32_t table[8][256];
static bool have_hw;
static pthread_once_t once = PTHREAD_ONCE_INIT;

static void init(void)
{
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
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
                                                         size_t len)
{
    uint64_t c = crc;
    while (len && ((uintptr_t)p & 7)) {
        c = _mm_crc32_u8((uint32_t)c, *p++);
        len--;
    }
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

/* Exposed for the unit test that checks both paths agree. */
uint32_t sk_crc32c_sw_for_test(uint32_t crc, const void *buf, size_t len);
uint32_t sk_crc32c_sw_for_test(uint32_t crc, const void *buf, size_t len)
{
    pthread_once(&once, init);
    return ~crc_sw(~crc, buf, len);
}
