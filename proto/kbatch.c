#include "kbatch.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include <lz4frame.h>
#include <snappy-c.h>
#include <zlib.h>
#define ZSTD_STATIC_LINKING_ONLY /* ZSTD_decompressBound, exported by libzstd >= 1.4 */
#include <zstd.h>
#include <zstd_errors.h>

#include "kzip.h"
#include "sk_crc32c.h"
#include "sk_err.h"

/* Header field offsets (see kbatch.h). */
enum {
    OFF_BASE_OFFSET = 0,
    OFF_LENGTH = 8,
    OFF_EPOCH = 12,
    OFF_MAGIC = 16,
    OFF_CRC = 17,
    OFF_ATTR = 21,
    OFF_LAST_DELTA = 23,
    OFF_BASE_TS = 27,
    OFF_MAX_TS = 35,
    OFF_PID = 43,
    OFF_PEPOCH = 51,
    OFF_BASE_SEQ = 53,
    OFF_COUNT = 57,
};

/* Smallest batchLength Kafka's batch iterator accepts before looking further
 * (the v0 message overhead); below it the blob is corrupt, not incomplete. */
#define MIN_BATCH_LENGTH 14
/* Smallest well-formed record body: attributes, timestampDelta, offsetDelta,
 * keyLength, valueLength and headersCount, one byte each. */
#define MIN_RECORD_BODY 6

static inline uint16_t rd16(const uint8_t *p)
{
    return (uint16_t)((uint16_t)p[0] << 8 | p[1]);
}

static inline uint32_t rd32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t rd64(const uint8_t *p)
{
    return (uint64_t)rd32(p) << 32 | rd32(p + 4);
}

static inline void wr16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static inline void wr32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static inline void wr64(uint8_t *p, uint64_t v)
{
    wr32(p, (uint32_t)(v >> 32));
    wr32(p + 4, (uint32_t)v);
}

/* Addition that wraps instead of overflowing (hostile deltas). */
static inline int64_t add_wrap(int64_t a, int64_t b)
{
    return (int64_t)((uint64_t)a + (uint64_t)b);
}

/* ---- Header ------------------------------------------------------------ */

int64_t kb_total_size(const uint8_t *p, size_t len)
{
    if (len < KB_LOG_OVERHEAD)
        return -1;
    int32_t bl = (int32_t)rd32(p + OFF_LENGTH);
    if (bl < 0)
        return -1;
    return (int64_t)bl + KB_LOG_OVERHEAD;
}

/* Fills the fields of h that lie within the first n bytes (n >= 12). */
static void parse_fields(const uint8_t *p, size_t n, kb_header *h)
{
    memset(h, 0, sizeof(*h));
    h->base_offset = (int64_t)rd64(p + OFF_BASE_OFFSET);
    h->batch_length = (int32_t)rd32(p + OFF_LENGTH);
    if (n >= OFF_MAGIC + 1) {
        h->leader_epoch = (int32_t)rd32(p + OFF_EPOCH);
        h->magic = (int8_t)p[OFF_MAGIC];
    }
    if (n < KB_HEADER_SIZE)
        return;
    h->crc = rd32(p + OFF_CRC);
    h->attributes = (int16_t)rd16(p + OFF_ATTR);
    h->last_offset_delta = (int32_t)rd32(p + OFF_LAST_DELTA);
    h->base_timestamp = (int64_t)rd64(p + OFF_BASE_TS);
    h->max_timestamp = (int64_t)rd64(p + OFF_MAX_TS);
    h->producer_id = (int64_t)rd64(p + OFF_PID);
    h->producer_epoch = (int16_t)rd16(p + OFF_PEPOCH);
    h->base_sequence = (int32_t)rd32(p + OFF_BASE_SEQ);
    h->records_count = (int32_t)rd32(p + OFF_COUNT);
}

int kb_parse_header(const uint8_t *p, size_t len, kb_header *h)
{
    if (len < KB_HEADER_SIZE)
        return SK_ERR_PARSE;
    int64_t total = kb_total_size(p, len);
    if (total < KB_HEADER_SIZE || (uint64_t)total > len)
        return SK_ERR_PARSE;
    parse_fields(p, KB_HEADER_SIZE, h);
    return 0;
}

int kb_parse_header_copy(const uint8_t *p, size_t len, kb_header *h)
{
    if (len < KB_HEADER_SIZE)
        return SK_ERR_PARSE;
    int64_t total = kb_total_size(p, len);
    if (total < KB_HEADER_SIZE)
        return SK_ERR_PARSE;
    parse_fields(p, KB_HEADER_SIZE, h);
    return 0;
}

/* ---- Record varints (zigzag, as protobuf sint32/sint64) ----------------- */

/* Reads a zigzag varint of at most 5 bytes. Like Kafka, bits beyond 32 in
 * the fifth byte are dropped rather than refused. Returns false when the
 * bytes run out or a sixth byte would be needed. */
static inline bool get_varint(const uint8_t **pp, const uint8_t *end, int32_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) { /* one byte: the common case */
        uint32_t v = *p;
        *out = (int32_t)((v >> 1) ^ (0u - (v & 1)));
        *pp = p + 1;
        return true;
    }
    if (end - p >= 2 && !(p[1] & 0x80)) { /* two bytes: lengths of 64..8191 */
        uint32_t v = (uint32_t)(p[0] & 0x7f) | (uint32_t)p[1] << 7;
        *out = (int32_t)((v >> 1) ^ (0u - (v & 1)));
        *pp = p + 2;
        return true;
    }
    uint32_t v = 0;
    for (int shift = 0; shift <= 28; shift += 7) {
        if (p >= end)
            return false;
        uint8_t b = *p++;
        v |= (uint32_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int32_t)((v >> 1) ^ (0u - (v & 1)));
            *pp = p;
            return true;
        }
    }
    return false;
}

static inline bool get_varlong(const uint8_t **pp, const uint8_t *end, int64_t *out)
{
    const uint8_t *p = *pp;
    if (p < end && !(*p & 0x80)) {
        uint64_t v = *p;
        *out = (int64_t)((v >> 1) ^ (0ull - (v & 1)));
        *pp = p + 1;
        return true;
    }
    uint64_t v = 0;
    for (int shift = 0; shift <= 63; shift += 7) {
        if (p >= end)
            return false;
        uint8_t b = *p++;
        v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80)) {
            *out = (int64_t)((v >> 1) ^ (0ull - (v & 1)));
            *pp = p;
            return true;
        }
    }
    return false;
}

static size_t put_uvarint64(uint8_t *p, uint64_t v)
{
    size_t n = 0;
    while (v >= 0x80) {
        p[n++] = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    p[n++] = (uint8_t)v;
    return n;
}

static size_t put_varint(uint8_t *p, int32_t v)
{
    return put_uvarint64(p, (uint32_t)(((uint32_t)v << 1) ^ (uint32_t)(v >> 31)));
}

static size_t put_varlong(uint8_t *p, int64_t v)
{
    return put_uvarint64(p, ((uint64_t)v << 1) ^ (uint64_t)(v >> 63));
}

static size_t varint_size(int32_t v)
{
    uint8_t tmp[5];
    return put_varint(tmp, v);
}

static size_t varlong_size(int64_t v)
{
    uint8_t tmp[10];
    return put_varlong(tmp, v);
}

/* ---- Record parsing ---------------------------------------------------- */

typedef struct rec_view {
    int64_t ts_delta;
    int32_t offset_delta;
    kc_bytes key, value;
    int32_t header_count;
    const uint8_t *headers;
    size_t headers_len;
} rec_view;

/* A length-prefixed byte string inside a record body: -1 is null, other
 * negative lengths are refused (Kafka would read them as null; no client
 * writes them and a consumer might not cope). */
static inline bool get_bytes(const uint8_t **pp, const uint8_t *end, bool nullable, kc_bytes *out)
{
    int32_t n;
    if (!get_varint(pp, end, &n))
        return false;
    if (n < 0) {
        if (n != -1 || !nullable)
            return false;
        out->p = NULL;
        out->len = -1;
        return true;
    }
    if ((size_t)(end - *pp) < (size_t)n)
        return false;
    out->p = *pp;
    out->len = n;
    *pp += n;
    return true;
}

/* Parses the record at *pp (bounded by end) and advances past it. The body
 * must be consumed exactly by its fields. */
static inline bool parse_record(const uint8_t **pp, const uint8_t *end, rec_view *r)
{
    const uint8_t *p = *pp;
    int32_t len;
    if (!get_varint(&p, end, &len) || len < MIN_RECORD_BODY || (size_t)(end - p) < (size_t)len)
        return false;
    const uint8_t *body_end = p + len;
    p++; /* record attributes: unused */
    if (!get_varlong(&p, body_end, &r->ts_delta) || !get_varint(&p, body_end, &r->offset_delta) ||
        !get_bytes(&p, body_end, true, &r->key) || !get_bytes(&p, body_end, true, &r->value) ||
        !get_varint(&p, body_end, &r->header_count) || r->header_count < 0)
        return false;
    r->headers = p;
    for (int32_t i = 0; i < r->header_count; i++) {
        kc_bytes hk, hv;
        if (!get_bytes(&p, body_end, false, &hk) || !get_bytes(&p, body_end, true, &hv))
            return false;
    }
    r->headers_len = (size_t)(p - r->headers);
    if (p != body_end)
        return false;
    *pp = body_end;
    return true;
}

/* ---- Decompression ----------------------------------------------------- */

#define DEFLATE_MAX_RATIO 1032
#define SNAPPY_MAX_RATIO 22

enum {
    DZ_OK = 0,
    DZ_BAD = 1,   /* not a valid stream of its codec */
    DZ_LIMIT = 2, /* would inflate past the cap */
    DZ_NOMEM = 3,
};

typedef struct dz_out {
    uint8_t *buf;
    size_t len, cap, max;
} dz_out;

static int dz_reserve(dz_out *o, size_t want)
{
    if (want > o->max)
        return DZ_LIMIT;
    if (want <= o->cap && o->buf)
        return DZ_OK;
    uint8_t *nb = realloc(o->buf, want ? want : 1);
    if (!nb)
        return DZ_NOMEM;
    o->buf = nb;
    o->cap = want;
    return DZ_OK;
}

/* Doubles the buffer (within the cap) when a streaming decoder ran out of
 * room. */
static int dz_grow(dz_out *o)
{
    if (o->cap >= o->max)
        return DZ_LIMIT;
    size_t want = o->cap > o->max / 2 ? o->max : o->cap * 2;
    return dz_reserve(o, want < 4096 ? 4096 : want);
}

/* First guess for codecs that do not state the decompressed size: enough for
 * a typical ratio in one go, so that most batches never reallocate. */
static size_t dz_guess(size_t n, size_t hint, size_t max)
{
    size_t g = hint ? hint : (n > SIZE_MAX / 4 ? SIZE_MAX : n * 4);
    if (g < 4096)
        g = 4096;
    return g > max ? max : g;
}

static int dz_gzip(const uint8_t *src, size_t n, dz_out *o)
{
    /* ISIZE (the last four bytes, little-endian) is the size mod 2^32 of the
     * last member: a hint only, the stream decides. */
    size_t hint = 0;
    if (n >= 18)
        hint = (size_t)src[n - 4] | (size_t)src[n - 3] << 8 | (size_t)src[n - 2] << 16 |
               (size_t)src[n - 1] << 24;
    /* Deflate cannot expand past about 1032:1; a larger claim is a lie. */
    if (hint / DEFLATE_MAX_RATIO > n)
        hint = 0;
    int rc = dz_reserve(o, dz_guess(n, hint, o->max));
    if (rc)
        return rc;
    z_stream zs;
    memset(&zs, 0, sizeof(zs));
    if (inflateInit2(&zs, 16 + MAX_WBITS) != Z_OK)
        return DZ_NOMEM;
    zs.next_in = (Bytef *)(uintptr_t)src;
    size_t in_left = n;
    for (;;) {
        /* zlib counts in uInt: feed at most UINT_MAX at a time. */
        uInt in_chunk = in_left > UINT_MAX ? UINT_MAX : (uInt)in_left;
        size_t out_room = o->cap - o->len;
        uInt out_chunk = out_room > UINT_MAX ? UINT_MAX : (uInt)out_room;
        zs.avail_in = in_chunk;
        zs.next_out = o->buf + o->len;
        zs.avail_out = out_chunk;
        int zr = inflate(&zs, Z_NO_FLUSH);
        in_left -= in_chunk - zs.avail_in;
        o->len += out_chunk - zs.avail_out;
        if (zr == Z_STREAM_END) {
            if (in_left == 0)
                break;
            /* Concatenated members are one stream (RFC 1952 2.2). */
            if (inflateReset(&zs) != Z_OK) {
                rc = DZ_BAD;
                break;
            }
            continue;
        }
        if (zr == Z_BUF_ERROR && zs.avail_out == 0) {
            if ((rc = dz_grow(o)) != DZ_OK)
                break;
            continue;
        }
        if (zr != Z_OK && zr != Z_BUF_ERROR) {
            rc = zr == Z_MEM_ERROR ? DZ_NOMEM : DZ_BAD;
            break;
        }
        if (zs.avail_out == 0) {
            if ((rc = dz_grow(o)) != DZ_OK)
                break;
        } else if (in_left == 0) {
            rc = DZ_BAD; /* input ended inside a member */
            break;
        }
    }
    inflateEnd(&zs);
    return rc;
}

/* Snappy's densest element is a 3-byte copy of 64 bytes, so a block
 * cannot expand more than ~21.4 times (plus its length preamble): a larger
 * stated size is refused before anything is allocated for it. */
static bool snappy_size_plausible(size_t ulen, size_t clen)
{
    return ulen / SNAPPY_MAX_RATIO <= clen;
}

static const uint8_t xerial_magic[8] = {0x82, 'S', 'N', 'A', 'P', 'P', 'Y', 0};
#define XERIAL_HEADER 16 /* magic, int32 version, int32 compatible version */

static int dz_snappy(const uint8_t *src, size_t n, dz_out *o)
{
    size_t ulen;
    int rc;
    if (n < XERIAL_HEADER || memcmp(src, xerial_magic, sizeof(xerial_magic)) != 0) {
        if (snappy_uncompressed_length((const char *)src, n, &ulen) != SNAPPY_OK ||
            !snappy_size_plausible(ulen, n))
            return DZ_BAD;
        if ((rc = dz_reserve(o, ulen)) != DZ_OK)
            return rc;
        size_t got = ulen;
        if (snappy_uncompress((const char *)src, n, (char *)o->buf, &got) != SNAPPY_OK ||
            got != ulen)
            return DZ_BAD;
        o->len = got;
        return DZ_OK;
    }
    /* Xerial framing: [int32 length][raw snappy block]... Every block states
     * its size, so one pass sums them (refusing bombs before allocating) and
     * a second decodes into one exact buffer. */
    size_t total = 0;
    for (size_t at = XERIAL_HEADER; at < n;) {
        if (n - at < 4)
            return DZ_BAD;
        int32_t clen = (int32_t)rd32(src + at);
        at += 4;
        if (clen <= 0 || (size_t)clen > n - at)
            return DZ_BAD;
        if (snappy_uncompressed_length((const char *)src + at, (size_t)clen, &ulen) !=
                SNAPPY_OK ||
            !snappy_size_plausible(ulen, (size_t)clen))
            return DZ_BAD;
        if (ulen > o->max - total)
            return DZ_LIMIT;
        total += ulen;
        at += (size_t)clen;
    }
    if ((rc = dz_reserve(o, total)) != DZ_OK)
        return rc;
    for (size_t at = XERIAL_HEADER; at < n;) {
        size_t clen = rd32(src + at);
        at += 4;
        size_t got = o->cap - o->len;
        if (snappy_uncompress((const char *)src + at, clen, (char *)o->buf + o->len, &got) !=
            SNAPPY_OK)
            return DZ_BAD;
        o->len += got;
        at += clen;
    }
    return o->len == total ? DZ_OK : DZ_BAD;
}

static int dz_lz4(const uint8_t *src, size_t n, dz_out *o)
{
    LZ4F_dctx *d;
    if (LZ4F_isError(LZ4F_createDecompressionContext(&d, LZ4F_VERSION)))
        return DZ_NOMEM;
    int rc = DZ_OK;
    size_t in = 0;
    /* The frame header may carry the content size, and always the block
     * size: together a good first guess. */
    LZ4F_frameInfo_t fi;
    size_t hsz = n;
    size_t hint = 0;
    if (LZ4F_isError(LZ4F_getFrameInfo(d, &fi, src, &hsz))) {
        rc = DZ_BAD;
        goto out;
    }
    in = hsz;
    if (fi.contentSize) {
        if (fi.contentSize > o->max) {
            rc = DZ_LIMIT;
            goto out;
        }
        hint = (size_t)fi.contentSize;
    } else {
        static const size_t block_max[] = {64 << 10, 256 << 10, 1 << 20, 4 << 20};
        size_t bm = fi.blockSizeID >= LZ4F_max64KB && fi.blockSizeID <= LZ4F_max4MB
                        ? block_max[fi.blockSizeID - LZ4F_max64KB]
                        : (size_t)64 << 10;
        hint = n > SIZE_MAX / 4 ? SIZE_MAX : n * 4;
        if (hint < bm)
            hint = bm;
    }
    if ((rc = dz_reserve(o, dz_guess(n, hint, o->max))) != DZ_OK)
        goto out;
    /* Without stableDst, LZ4F keeps the history it needs for linked blocks
     * in its own buffer between calls, so the output may move (realloc). */
    for (;;) {
        size_t dst_sz = o->cap - o->len, src_sz = n - in;
        size_t r = LZ4F_decompress(d, o->buf + o->len, &dst_sz, src + in, &src_sz, NULL);
        if (LZ4F_isError(r)) {
            rc = DZ_BAD;
            break;
        }
        in += src_sz;
        o->len += dst_sz;
        if (r == 0 && in == n)
            break; /* last frame complete, all input used */
        if (src_sz == 0 && dst_sz == 0) {
            if (o->len < o->cap) {
                rc = DZ_BAD; /* wants input that is not there */
                break;
            }
            if ((rc = dz_grow(o)) != DZ_OK)
                break;
        }
    }
out:
    LZ4F_freeDecompressionContext(d);
    return rc;
}

static int dz_zstd(const uint8_t *src, size_t n, dz_out *o)
{
    /* The bound is exact when frames state their size, else blocks times
     * their maximum size: allocate it (within the cap) and decode in one
     * shot, which needs no window buffer and no second copy. */
    unsigned long long stated = ZSTD_findDecompressedSize(src, n);
    if (stated == ZSTD_CONTENTSIZE_ERROR)
        return DZ_BAD;
    if (stated != ZSTD_CONTENTSIZE_UNKNOWN && stated > o->max)
        return DZ_LIMIT; /* refused before allocating */
    unsigned long long bound = ZSTD_decompressBound(src, n);
    if (bound == ZSTD_CONTENTSIZE_ERROR)
        return DZ_BAD;
    bool capped = bound > o->max;
    int rc = dz_reserve(o, capped ? o->max : (size_t)bound);
    if (rc)
        return rc;
    ZSTD_DCtx *d = ZSTD_createDCtx();
    if (!d)
        return DZ_NOMEM;
    size_t r = ZSTD_decompressDCtx(d, o->buf, o->cap, src, n);
    ZSTD_freeDCtx(d);
    if (ZSTD_isError(r)) {
        if (ZSTD_getErrorCode(r) == ZSTD_error_dstSize_tooSmall && capped)
            return DZ_LIMIT;
        return ZSTD_getErrorCode(r) == ZSTD_error_memory_allocation ? DZ_NOMEM : DZ_BAD;
    }
    o->len = r;
    return DZ_OK;
}

/* Decompresses a records section into a fresh buffer of at most max bytes
 * (*out, to free()). */
static int decompress(int codec, const uint8_t *src, size_t n, size_t max, uint8_t **out,
                      size_t *out_len)
{
    dz_out o = {.max = max};
    int rc;
    switch (codec) {
    case KB_CODEC_GZIP: rc = dz_gzip(src, n, &o); break;
    case KB_CODEC_SNAPPY: rc = dz_snappy(src, n, &o); break;
    case KB_CODEC_LZ4: rc = dz_lz4(src, n, &o); break;
    case KB_CODEC_ZSTD: rc = dz_zstd(src, n, &o); break;
    default: rc = DZ_BAD; break;
    }
    if (rc != DZ_OK) {
        free(o.buf);
        return rc;
    }
    *out = o.buf;
    *out_len = o.len;
    return DZ_OK;
}

/* ---- Validation -------------------------------------------------------- */

/* INT64_MAX turns a bound off; the differences, computed in uint64, are
 * exact whatever the signs. */
static inline bool ts_out_of_range(int64_t ts, int64_t now, int64_t before, int64_t after)
{
    if (ts < now)
        return before != INT64_MAX && (uint64_t)now - (uint64_t)ts > (uint64_t)before;
    return after != INT64_MAX && (uint64_t)ts - (uint64_t)now > (uint64_t)after;
}

typedef struct walk_ctx {
    const kb_header *h;
    const kb_limits *lim;
    int64_t before, after;
    bool check_ts;
} walk_ctx;

/* Walks the records of a (decompressed) records section. Framing and offset
 * faults stop the walk; key and timestamp faults are collected, as Kafka
 * collects per-record errors, so that INVALID_TIMESTAMP wins. */
static int walk_validate(const walk_ctx *c, const uint8_t *p, const uint8_t *end, int32_t *bad)
{
    int32_t n = c->h->records_count;
    int32_t first_ts = -1, first_key = -1;
    rec_view r;
    for (int32_t i = 0; i < n; i++) {
        if (!parse_record(&p, end, &r) || r.offset_delta != i) {
            *bad = i;
            return SK_KAFKA_INVALID_RECORD;
        }
        if (c->lim->compacted && r.key.len < 0 && first_key < 0)
            first_key = i;
        if (c->check_ts && first_ts < 0) {
            int64_t ts = add_wrap(c->h->base_timestamp, r.ts_delta);
            if (ts != -1 && ts_out_of_range(ts, c->lim->now_ms, c->before, c->after))
                first_ts = i;
        }
    }
    if (p != end) { /* bytes beyond the declared count */
        *bad = n;
        return SK_KAFKA_INVALID_RECORD;
    }
    if (first_ts >= 0) {
        *bad = first_ts;
        return SK_KAFKA_INVALID_TIMESTAMP;
    }
    if (first_key >= 0) {
        *bad = first_key;
        return SK_KAFKA_INVALID_RECORD;
    }
    return 0;
}

int kb_validate(const uint8_t *p, size_t len, const kb_limits *lim, kb_header *h_out,
                int32_t *bad_record)
{
    kb_header hl;
    kb_header *h = h_out ? h_out : &hl;
    int32_t bad_dummy;
    int32_t *bad = bad_record ? bad_record : &bad_dummy;
    *bad = -1;
    memset(h, 0, sizeof(*h));

    /* The order follows Kafka's: the request-level batch iteration first
     * (sizes, magic, codec, one batch), then the log's checks (base offset,
     * size, CRC), then the per-batch and per-record validation. */
    if (len < KB_LOG_OVERHEAD)
        return SK_KAFKA_INVALID_RECORD; /* no batch at all */
    parse_fields(p, len < KB_HEADER_SIZE ? len : KB_HEADER_SIZE, h);
    if (h->batch_length < MIN_BATCH_LENGTH)
        return SK_KAFKA_CORRUPT_MESSAGE;
    if (len <= OFF_MAGIC)
        return SK_KAFKA_INVALID_RECORD;
    if (h->magic < 0 || h->magic > 2)
        return SK_KAFKA_CORRUPT_MESSAGE;
    size_t total = (size_t)h->batch_length + KB_LOG_OVERHEAD;
    if (total > len || h->magic != 2)
        return SK_KAFKA_INVALID_RECORD;
    int codec = h->attributes & KB_ATTR_CODEC_MASK;
    if (total < KB_HEADER_SIZE) {
        /* Too short for a v2 header: Kafka reads the codec from what is
         * there, then fails the size check as corrupt. */
        if (total >= OFF_ATTR + 2)
            codec = rd16(p + OFF_ATTR) & KB_ATTR_CODEC_MASK;
        else
            codec = KB_CODEC_NONE;
    }
    if (codec > KB_CODEC_ZSTD || (codec == KB_CODEC_ZSTD && lim->produce_version < 7))
        return SK_KAFKA_UNSUPPORTED_COMPRESSION_TYPE;
    bool partial_tail = false;
    if (total != len) {
        /* Kafka looks for a second batch as for the first: a corrupt one is
         * CORRUPT_MESSAGE, a complete one INVALID_RECORD. It drops a partial
         * one silently and goes on with the first batch; Skiff stores
         * exactly what it validated, so it refuses that too, but only after
         * the first batch's own checks, which come first in Kafka. */
        const uint8_t *q = p + total;
        size_t rest = len - total;
        if (rest >= KB_LOG_OVERHEAD && (int32_t)rd32(q + OFF_LENGTH) < MIN_BATCH_LENGTH)
            return SK_KAFKA_CORRUPT_MESSAGE;
        if (rest > OFF_MAGIC && ((int8_t)q[OFF_MAGIC] < 0 || (int8_t)q[OFF_MAGIC] > 2))
            return SK_KAFKA_CORRUPT_MESSAGE;
        if (rest >= KB_LOG_OVERHEAD && rest >= (size_t)rd32(q + OFF_LENGTH) + KB_LOG_OVERHEAD)
            return SK_KAFKA_INVALID_RECORD;
        partial_tail = true;
    }
    if (h->base_offset != 0)
        return SK_KAFKA_INVALID_RECORD;
    int32_t max_bytes = lim->max_batch_bytes > 0 ? lim->max_batch_bytes : KB_DEFAULT_MAX_BATCH_BYTES;
    if (total > (size_t)max_bytes)
        return SK_KAFKA_MESSAGE_TOO_LARGE;
    if (total < KB_HEADER_SIZE)
        return SK_KAFKA_CORRUPT_MESSAGE;
    if (sk_crc32c(p + OFF_ATTR, total - OFF_ATTR) != h->crc)
        return SK_KAFKA_CORRUPT_MESSAGE;
    if (partial_tail)
        return SK_KAFKA_INVALID_RECORD;
    if ((int64_t)h->last_offset_delta + 1 <= 0 || h->records_count <= 0 ||
        (int64_t)h->last_offset_delta + 1 != h->records_count)
        return SK_KAFKA_INVALID_RECORD;
    if (h->attributes & KB_ATTR_CONTROL)
        return SK_KAFKA_INVALID_RECORD;
    if (h->producer_id >= 0 && h->base_sequence < 0)
        return SK_KAFKA_INVALID_RECORD;
    if (h->attributes & KB_ATTR_LOG_APPEND_TIME) {
        /* Only the broker may choose LogAppendTime. */
        *bad = 0;
        return SK_KAFKA_INVALID_TIMESTAMP;
    }
    if (!lim->validate_records)
        return 0;

    walk_ctx c = {
        .h = h,
        .lim = lim,
        .before = lim->ts_before_max_ms < 0 ? 0 : lim->ts_before_max_ms,
        .after = lim->ts_after_max_ms < 0 ? 0 : lim->ts_after_max_ms,
        .check_ts = !lim->log_append_time,
    };
    const uint8_t *recs = p + KB_HEADER_SIZE, *end = p + total;
    if (codec == KB_CODEC_NONE)
        return walk_validate(&c, recs, end, bad);

    uint8_t *buf;
    size_t blen;
    size_t max = lim->max_decompressed ? lim->max_decompressed : KB_DEFAULT_MAX_DECOMPRESSED;
    int dz = decompress(codec, recs, (size_t)(end - recs), max, &buf, &blen);
    if (dz == DZ_NOMEM)
        return SK_ERR_NOMEM;
    if (dz != DZ_OK)
        return SK_KAFKA_INVALID_RECORD;
    int rc = walk_validate(&c, buf, buf + blen, bad);
    free(buf);
    return rc;
}

/* ---- Recompression ------------------------------------------------------ */

int kb_codec_named(const char *name, size_t len)
{
    static const char *const names[] = {"uncompressed", "gzip", "snappy", "lz4", "zstd"};
    for (int c = KB_CODEC_NONE; c <= KB_CODEC_ZSTD; c++)
        if (strlen(names[c]) == len && memcmp(names[c], name, len) == 0)
            return c;
    return -1;
}

int kb_recompress(const uint8_t *p, size_t len, int codec, int level, size_t max_decompressed,
                  uint8_t **out, size_t *out_len)
{
    int64_t total = kb_total_size(p, len);
    if (total < KB_HEADER_SIZE || (size_t)total > len)
        return SK_ERR_PARSE;
    const uint8_t *recs = p + KB_HEADER_SIZE;
    size_t nrecs = (size_t)total - KB_HEADER_SIZE;
    int from = rd16(p + OFF_ATTR) & KB_ATTR_CODEC_MASK;
    uint8_t *plain = NULL, *packed = NULL;
    size_t plain_len = nrecs, packed_len = 0;
    if (from != KB_CODEC_NONE) {
        int rc = decompress(from, recs, nrecs,
                            max_decompressed ? max_decompressed : KB_DEFAULT_MAX_DECOMPRESSED,
                            &plain, &plain_len);
        if (rc != DZ_OK)
            return rc == DZ_NOMEM ? SK_ERR_NOMEM : SK_ERR_PARSE;
    }
    const uint8_t *src = plain ? plain : recs;
    if (codec != KB_CODEC_NONE) {
        int rc = kz_compress(codec, level, src, plain_len, &packed, &packed_len);
        if (rc != 0) {
            free(plain);
            return rc;
        }
    }
    const uint8_t *body = packed ? packed : src;
    size_t body_len = packed ? packed_len : plain_len;
    uint8_t *b = body_len <= INT32_MAX - KB_HEADER_SIZE ? malloc(KB_HEADER_SIZE + body_len) : NULL;
    if (b) {
        memcpy(b, p, KB_HEADER_SIZE);
        memcpy(b + KB_HEADER_SIZE, body, body_len);
        wr32(b + OFF_LENGTH, (uint32_t)(KB_HEADER_SIZE + body_len - KB_LOG_OVERHEAD));
        wr16(b + OFF_ATTR,
             (uint16_t)((rd16(p + OFF_ATTR) & ~KB_ATTR_CODEC_MASK) | (codec & KB_ATTR_CODEC_MASK)));
        kb_update_crc(b);
        *out = b;
        *out_len = KB_HEADER_SIZE + body_len;
    }
    free(plain);
    free(packed);
    return b ? 0 : SK_ERR_NOMEM;
}

/* ---- In-place rewrites ------------------------------------------------- */

void kb_set_base_offset(uint8_t *p, int64_t base_offset)
{
    wr64(p + OFF_BASE_OFFSET, (uint64_t)base_offset);
}

void kb_set_leader_epoch(uint8_t *p, int32_t epoch)
{
    wr32(p + OFF_EPOCH, (uint32_t)epoch);
}

void kb_update_crc(uint8_t *p)
{
    size_t total = (size_t)rd32(p + OFF_LENGTH) + KB_LOG_OVERHEAD;
    wr32(p + OFF_CRC, sk_crc32c(p + OFF_ATTR, total - OFF_ATTR));
}

uint32_t kb_whole_crc32c(const uint8_t *p, size_t len)
{
    return sk_crc32c_combine(sk_crc32c(p, OFF_ATTR), rd32(p + OFF_CRC), len - OFF_ATTR);
}

void kb_set_log_append_time(uint8_t *p, int64_t now_ms)
{
    wr16(p + OFF_ATTR, (uint16_t)(rd16(p + OFF_ATTR) | KB_ATTR_LOG_APPEND_TIME));
    wr64(p + OFF_MAX_TS, (uint64_t)now_ms);
    kb_update_crc(p);
}

/* ---- Iteration --------------------------------------------------------- */

static int walk_foreach(const kb_header *h, const uint8_t *p, const uint8_t *end, kb_record_fn fn,
                        void *arg)
{
    bool lat = (h->attributes & KB_ATTR_LOG_APPEND_TIME) != 0;
    rec_view v;
    kb_record r;
    for (int32_t i = 0; i < h->records_count; i++) {
        if (!parse_record(&p, end, &v))
            return SK_ERR_PARSE;
        r.offset = add_wrap(h->base_offset, v.offset_delta);
        r.timestamp = lat ? h->max_timestamp : add_wrap(h->base_timestamp, v.ts_delta);
        r.key = v.key;
        r.value = v.value;
        r.header_count = v.header_count;
        r.headers = v.headers;
        r.headers_len = v.headers_len;
        int rc = fn(arg, &r);
        if (rc < 0)
            return rc;
        if (rc > 0)
            return 0;
    }
    return p == end ? 0 : SK_ERR_PARSE;
}

int kb_foreach_record(const uint8_t *p, size_t len, size_t max_decompressed, kb_record_fn fn,
                      void *arg)
{
    kb_header h;
    if (kb_parse_header(p, len, &h) != 0 || h.records_count < 0)
        return SK_ERR_PARSE;
    const uint8_t *recs = p + KB_HEADER_SIZE, *end = p + (size_t)h.batch_length + KB_LOG_OVERHEAD;
    int codec = h.attributes & KB_ATTR_CODEC_MASK;
    if (codec == KB_CODEC_NONE)
        return walk_foreach(&h, recs, end, fn, arg);
    uint8_t *buf;
    size_t blen;
    size_t max = max_decompressed ? max_decompressed : KB_DEFAULT_MAX_DECOMPRESSED;
    int dz = decompress(codec, recs, (size_t)(end - recs), max, &buf, &blen);
    if (dz == DZ_NOMEM)
        return SK_ERR_NOMEM;
    if (dz != DZ_OK)
        return SK_ERR_PARSE;
    int rc = walk_foreach(&h, buf, buf + blen, fn, arg);
    free(buf);
    return rc;
}

/* ---- Filtering (compaction) --------------------------------------------- */

typedef struct filt {
    const kb_header *h;
    kb_keep_fn keep;
    void *arg;
    int64_t horizon; /* -1: timestamps deltas stay */
    uint8_t *out;
    size_t len;
    int32_t kept;
} filt;

/* Appends the record raw[0..n) (parsed as v), its timestamp delta rebased
 * when a horizon is set. */
static void filt_put(filt *f, const uint8_t *raw, size_t n, const rec_view *v)
{
    if (f->horizon < 0) {
        memcpy(f->out + f->len, raw, n);
        f->len += n;
        return;
    }
    const uint8_t *q = raw, *end = raw + n;
    int32_t blen;
    int64_t tsd;
    (void)get_varint(&q, end, &blen);
    const uint8_t *attr = q++;
    (void)get_varlong(&q, end, &tsd);
    int64_t nd = add_wrap(add_wrap(f->h->base_timestamp, v->ts_delta), -f->horizon);
    size_t rest = (size_t)(end - q);
    int32_t nlen = (int32_t)(1 + varlong_size(nd) + rest);
    f->len += put_varint(f->out + f->len, nlen);
    f->out[f->len++] = *attr;
    f->len += put_varlong(f->out + f->len, nd);
    memcpy(f->out + f->len, q, rest);
    f->len += rest;
}

static int filt_walk(filt *f, const uint8_t *p, const uint8_t *end)
{
    bool lat = (f->h->attributes & KB_ATTR_LOG_APPEND_TIME) != 0;
    rec_view v;
    for (int32_t i = 0; i < f->h->records_count; i++) {
        const uint8_t *raw = p;
        if (!parse_record(&p, end, &v))
            return SK_ERR_PARSE;
        kb_record r = {add_wrap(f->h->base_offset, v.offset_delta),
                       lat ? f->h->max_timestamp : add_wrap(f->h->base_timestamp, v.ts_delta),
                       v.key, v.value, v.header_count, v.headers, v.headers_len};
        if (!f->keep(f->arg, &r))
            continue;
        filt_put(f, raw, (size_t)(p - raw), &v);
        f->kept++;
    }
    return p == end ? 0 : SK_ERR_PARSE;
}

/* The default level of each codec (kzip.h), as Kafka's. */
static int default_level(int codec)
{
    return codec == KB_CODEC_LZ4 ? 9 : codec == KB_CODEC_ZSTD ? 3 : -1;
}

static int filt_seal(filt *f, const uint8_t *p, int codec, uint8_t **out, size_t *out_len)
{
    uint8_t *packed = NULL;
    size_t plen = f->len;
    if (codec != KB_CODEC_NONE && f->len > 0) {
        int rc = kz_compress(codec, default_level(codec), f->out, f->len, &packed, &plen);
        if (rc != 0)
            return rc;
    }
    const uint8_t *body = packed ? packed : f->out;
    uint8_t *b = malloc(KB_HEADER_SIZE + plen + 1);
    if (!b) {
        free(packed);
        return SK_ERR_NOMEM;
    }
    memcpy(b, p, KB_HEADER_SIZE);
    memcpy(b + KB_HEADER_SIZE, body, plen);
    free(packed);
    uint16_t attr = rd16(p + OFF_ATTR);
    if (f->horizon >= 0) {
        attr |= KB_ATTR_DELETE_HORIZON;
        wr64(b + OFF_BASE_TS, (uint64_t)f->horizon);
    }
    if (f->len == 0)
        attr &= (uint16_t)~KB_ATTR_CODEC_MASK; /* an empty batch has nothing to compress */
    wr16(b + OFF_ATTR, attr);
    wr32(b + OFF_COUNT, (uint32_t)f->kept);
    wr32(b + OFF_LENGTH, (uint32_t)(KB_HEADER_SIZE + plen - KB_LOG_OVERHEAD));
    kb_update_crc(b);
    *out = b;
    *out_len = KB_HEADER_SIZE + plen;
    return 0;
}

int kb_filter(const uint8_t *p, size_t len, kb_keep_fn keep, void *arg, int64_t horizon_ms,
              uint8_t **out, size_t *out_len, int32_t *kept)
{
    kb_header h;
    if (kb_parse_header(p, len, &h) != 0 || h.records_count < 0)
        return SK_ERR_PARSE;
    const uint8_t *recs = p + KB_HEADER_SIZE, *end = p + (size_t)h.batch_length + KB_LOG_OVERHEAD;
    int codec = h.attributes & KB_ATTR_CODEC_MASK;
    uint8_t *plain = NULL;
    size_t plain_len = (size_t)(end - recs);
    if (codec != KB_CODEC_NONE) {
        int dz = decompress(codec, recs, plain_len, KB_DEFAULT_MAX_DECOMPRESSED, &plain,
                            &plain_len);
        if (dz != DZ_OK)
            return dz == DZ_NOMEM ? SK_ERR_NOMEM : SK_ERR_PARSE;
    }
    const uint8_t *src = plain ? plain : recs;
    /* A rebased delta grows by at most 9 bytes, its length varint by 1. */
    filt f = {&h, keep, arg, horizon_ms, malloc(plain_len + (size_t)h.records_count * 10 + 1), 0,
              0};
    int rc = f.out ? filt_walk(&f, src, src + plain_len) : SK_ERR_NOMEM;
    if (rc == 0)
        rc = filt_seal(&f, p, codec, out, out_len);
    if (rc == 0)
        *kept = f.kept;
    free(f.out);
    free(plain);
    return rc;
}

/* ---- Builder ----------------------------------------------------------- */

static bool bytes_ok(kc_bytes b)
{
    return b.len == -1 || (b.len >= 0 && (b.len == 0 || b.p != NULL));
}

int64_t kb_build(uint8_t *out, size_t cap, const kb_build_rec *recs, int n, int64_t producer_id,
                 int16_t producer_epoch, int32_t base_sequence, int16_t attributes)
{
    if (n < 1 || (attributes & KB_ATTR_CODEC_MASK) != 0 || !recs || !out || cap < KB_HEADER_SIZE)
        return -1;
    int64_t base_ts = recs[0].timestamp, max_ts = recs[0].timestamp;
    size_t at = KB_HEADER_SIZE;
    for (int i = 0; i < n; i++) {
        const kb_build_rec *r = &recs[i];
        if (!bytes_ok(r->key) || !bytes_ok(r->value))
            return -1;
        if (r->timestamp > max_ts)
            max_ts = r->timestamp;
        int64_t ts_delta = add_wrap(r->timestamp, -base_ts);
        size_t klen = r->key.len > 0 ? (size_t)r->key.len : 0;
        size_t vlen = r->value.len > 0 ? (size_t)r->value.len : 0;
        size_t body = 1 + varlong_size(ts_delta) + varint_size(i) + varint_size(r->key.len) + klen +
                      varint_size(r->value.len) + vlen + 1;
        if (body > INT32_MAX)
            return -1;
        size_t need = varint_size((int32_t)body) + body;
        if (need > cap - at || at + need > (size_t)INT32_MAX)
            return -1;
        uint8_t *q = out + at;
        q += put_varint(q, (int32_t)body);
        *q++ = 0; /* record attributes */
        q += put_varlong(q, ts_delta);
        q += put_varint(q, i);
        q += put_varint(q, r->key.len);
        if (klen)
            memcpy(q, r->key.p, klen);
        q += klen;
        q += put_varint(q, r->value.len);
        if (vlen)
            memcpy(q, r->value.p, vlen);
        q += vlen;
        *q++ = 0; /* no headers */
        at += need;
    }
    wr64(out + OFF_BASE_OFFSET, 0);
    wr32(out + OFF_LENGTH, (uint32_t)(at - KB_LOG_OVERHEAD));
    wr32(out + OFF_EPOCH, UINT32_MAX); /* -1: set by the broker */
    out[OFF_MAGIC] = 2;
    wr16(out + OFF_ATTR, (uint16_t)attributes);
    wr32(out + OFF_LAST_DELTA, (uint32_t)(n - 1));
    wr64(out + OFF_BASE_TS, (uint64_t)base_ts);
    wr64(out + OFF_MAX_TS, (uint64_t)max_ts);
    wr64(out + OFF_PID, (uint64_t)producer_id);
    wr16(out + OFF_PEPOCH, (uint16_t)producer_epoch);
    wr32(out + OFF_BASE_SEQ, (uint32_t)base_sequence);
    wr32(out + OFF_COUNT, (uint32_t)n);
    kb_update_crc(out);
    return (int64_t)at;
}
