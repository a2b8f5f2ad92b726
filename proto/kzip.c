#include "kzip.h"

#include <stdlib.h>
#include <string.h>

#include <lz4frame.h>
#include <snappy-c.h>
#include <zlib.h>
#include <zstd.h>

#include "kbatch.h"
#include "sk_err.h"

#define SNAPPY_BLOCK (32u << 10)

static const uint8_t xerial_header[16] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0,
                                          0,    0,   0,   1,   0,   0,   0,   1};

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static int zip_gzip(int level, const uint8_t *src, size_t n, uint8_t **out, size_t *out_len)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    /* 15 window bits, +16: a gzip header and trailer instead of zlib's. */
    if (deflateInit2(&z, level < -1 || level > 9 ? Z_DEFAULT_COMPRESSION : level, Z_DEFLATED,
                     15 + 16, 8, Z_DEFAULT_STRATEGY) != Z_OK)
        return SK_ERR_NOMEM;
    uLong cap = deflateBound(&z, (uLong)n) + 32;
    uint8_t *buf = malloc(cap);
    if (!buf) {
        deflateEnd(&z);
        return SK_ERR_NOMEM;
    }
    z.next_in = (Bytef *)(uintptr_t)src;
    z.avail_in = (uInt)n;
    z.next_out = buf;
    z.avail_out = (uInt)cap;
    int rc = deflate(&z, Z_FINISH);
    size_t len = z.total_out;
    deflateEnd(&z);
    if (rc != Z_STREAM_END) {
        free(buf);
        return SK_ERR_INVAL;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

static int zip_snappy(const uint8_t *src, size_t n, uint8_t **out, size_t *out_len)
{
    size_t blocks = n / SNAPPY_BLOCK + 1;
    size_t cap = sizeof xerial_header + blocks * 4 + snappy_max_compressed_length(SNAPPY_BLOCK) * blocks;
    uint8_t *buf = malloc(cap);
    if (!buf)
        return SK_ERR_NOMEM;
    memcpy(buf, xerial_header, sizeof xerial_header);
    size_t pos = sizeof xerial_header;
    for (size_t off = 0; off < n; off += SNAPPY_BLOCK) {
        size_t in = n - off < SNAPPY_BLOCK ? n - off : SNAPPY_BLOCK;
        size_t clen = cap - pos - 4;
        if (snappy_compress((const char *)src + off, in, (char *)buf + pos + 4, &clen) !=
            SNAPPY_OK) {
            free(buf);
            return SK_ERR_INVAL;
        }
        put32(buf + pos, (uint32_t)clen);
        pos += 4 + clen;
    }
    *out = buf;
    *out_len = pos;
    return 0;
}

static int zip_lz4(int level, const uint8_t *src, size_t n, uint8_t **out, size_t *out_len)
{
    LZ4F_preferences_t prefs;
    memset(&prefs, 0, sizeof prefs);
    prefs.frameInfo.blockSizeID = LZ4F_max64KB;
    prefs.frameInfo.blockMode = LZ4F_blockIndependent;
    prefs.frameInfo.contentChecksumFlag = LZ4F_noContentChecksum;
    prefs.frameInfo.blockChecksumFlag = LZ4F_noBlockChecksum;
    prefs.compressionLevel = level;
    size_t cap = LZ4F_compressFrameBound(n, &prefs);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return SK_ERR_NOMEM;
    size_t len = LZ4F_compressFrame(buf, cap, src, n, &prefs);
    if (LZ4F_isError(len)) {
        free(buf);
        return SK_ERR_INVAL;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

static int zip_zstd(int level, const uint8_t *src, size_t n, uint8_t **out, size_t *out_len)
{
    size_t cap = ZSTD_compressBound(n);
    uint8_t *buf = malloc(cap);
    if (!buf)
        return SK_ERR_NOMEM;
    size_t len = ZSTD_compress(buf, cap, src, n, level);
    if (ZSTD_isError(len)) {
        free(buf);
        return SK_ERR_INVAL;
    }
    *out = buf;
    *out_len = len;
    return 0;
}

int kz_compress(int codec, int level, const uint8_t *src, size_t n, uint8_t **out,
                size_t *out_len)
{
    switch (codec) {
    case KB_CODEC_GZIP: return zip_gzip(level, src, n, out, out_len);
    case KB_CODEC_SNAPPY: return zip_snappy(src, n, out, out_len);
    case KB_CODEC_LZ4: return zip_lz4(level, src, n, out, out_len);
    case KB_CODEC_ZSTD: return zip_zstd(level, src, n, out, out_len);
    default: return SK_ERR_INVAL;
    }
}
