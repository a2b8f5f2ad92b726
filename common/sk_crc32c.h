/*
 * sk_crc32c: CRC-32C (Castagnoli), as Kafka's RecordBatch and Skiff's WAL use.
 *
 * Contract: pure functions, any thread. Uses the SSE4.2 crc32 instruction when
 * the CPU has it (checked once), else a table. sk_crc32c_extend continues a
 * running CRC so that split buffers give the same result as one.
 */
#ifndef SK_CRC32C_H
#define SK_CRC32C_H

#include <stddef.h>
#include <stdint.h>

uint32_t sk_crc32c_extend(uint32_t crc, const void *buf, size_t len);

static inline uint32_t sk_crc32c(const void *buf, size_t len)
{
    return sk_crc32c_extend(0, buf, len);
}

#endif
