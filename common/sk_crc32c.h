/*
 * sk_crc32c: CRC-32C (Castagnoli), as Kafka's RecordBatch and Skiff's WAL use.
 *
 * Contract: pure functions, any thread. Folds buffers of 256 bytes or more
 * with carry-less multiplies when the CPU has AVX-512 VPCLMULQDQ, else uses
 * the SSE4.2 crc32 instruction when it has that (both checked once), else a
 * table. sk_crc32c_extend continues a
 * running CRC so that split buffers give the same result as one;
 * sk_crc32c_combine joins the CRCs of two adjacent buffers.
 */
#ifndef SK_CRC32C_H
#define SK_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t sk_crc32c_extend(uint32_t crc, const void *buf, size_t len);
/* The CRC of a then b, from the CRC of each and b's length, without
 * reading either (a checksum established already need not be computed
 * again over the same bytes): O(log len_b). */
uint32_t sk_crc32c_combine(uint32_t crc_a, uint32_t crc_b, size_t len_b);

static inline uint32_t sk_crc32c(const void *buf, size_t len)
{
    return sk_crc32c_extend(0, buf, len);
}

#endif
