/*
 * objfmt: writer, reader, block iteration and key names of Skiff's objects.
 * All integers are little-endian; the layout is in objfmt.h and
 * docs/objects.md.
 */
#include "objfmt.h"

#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sk_crc32c.h"
#include "sk_err.h"

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = v << 8 | p[i];
    return v;
}

static bool grow(void **p, size_t *cap, size_t need, size_t elem)
{
    if (need <= *cap)
        return true;
    size_t nc = *cap ? *cap : 16;
    while (nc < need)
        nc *= 2;
    void *np = realloc(*p, nc * elem);
    if (!np)
        return false;
    *p = np;
    *cap = nc;
    return true;
}

/* ---- writer ---- */

struct objfmt_writer {
    objfmt_kind kind;
    uint32_t block_size;
    int64_t created_ms;
    uint8_t *hdrs;              /* OBJFMT_BATCH_HEADER bytes per batch */
    const void **payloads;
    size_t nbatches, cap_hdrs, cap_payloads;
    objfmt_entry *blocks;
    size_t nblocks, cap_blocks;
    objfmt_stream *streams;
    size_t nstreams, cap_streams;
    uint64_t pos;               /* data bytes so far */
    bool block_open;
    bool finished;
    struct iovec *iov;
    int iovcnt;
    uint8_t *tail;              /* index + footer */
};

objfmt_writer *objfmt_writer_new(objfmt_kind kind, uint32_t block_size, int64_t created_ms)
{
    if (kind != OBJFMT_SO && kind != OBJFMT_SSO)
        return NULL;
    objfmt_writer *w = calloc(1, sizeof *w);
    if (!w)
        return NULL;
    w->kind = kind;
    w->block_size = block_size ? block_size : OBJFMT_DEFAULT_BLOCK_SIZE;
    w->created_ms = created_ms;
    return w;
}

void objfmt_writer_destroy(objfmt_writer *w)
{
    if (!w)
        return;
    free(w->hdrs);
    free(w->payloads);
    free(w->blocks);
    free(w->streams);
    free(w->iov);
    free(w->tail);
    free(w);
}

static int writer_add(objfmt_writer *w, uint64_t stream, const objfmt_batch *b,
                      const void *payload, const uint32_t *payload_crc);

int objfmt_writer_add(objfmt_writer *w, uint64_t stream, const objfmt_batch *b,
                      const void *payload)
{
    return writer_add(w, stream, b, payload, NULL);
}

int objfmt_writer_add_crc(objfmt_writer *w, uint64_t stream, const objfmt_batch *b,
                          const void *payload, uint32_t payload_crc)
{
    return writer_add(w, stream, b, payload, &payload_crc);
}

static int writer_add(objfmt_writer *w, uint64_t stream, const objfmt_batch *b,
                      const void *payload, const uint32_t *payload_crc)
{
    if (w->finished || b->size > OBJFMT_MAX_BATCH_SIZE || b->last_offset < b->base_offset ||
        (b->size > 0 && !payload))
        return SK_ERR_INVAL;
    objfmt_stream *st = w->nstreams ? &w->streams[w->nstreams - 1] : NULL;
    if (st) {
        if (stream < st->stream_id)
            return SK_ERR_INVAL;
        if (stream == st->stream_id && b->base_offset <= st->end_offset)
            return SK_ERR_INVAL;
        if (stream != st->stream_id && w->kind == OBJFMT_SO)
            return SK_ERR_INVAL;
    }
    uint64_t bytes = OBJFMT_BATCH_HEADER + (uint64_t)b->size;
    if (!grow((void **)&w->hdrs, &w->cap_hdrs, (w->nbatches + 1) * OBJFMT_BATCH_HEADER, 1) ||
        !grow((void **)&w->payloads, &w->cap_payloads, w->nbatches + 1, sizeof *w->payloads) ||
        !grow((void **)&w->blocks, &w->cap_blocks, w->nblocks + 1, sizeof *w->blocks) ||
        !grow((void **)&w->streams, &w->cap_streams, w->nstreams + 1, sizeof *w->streams))
        return SK_ERR_NOMEM;

    objfmt_entry *blk = w->block_open ? &w->blocks[w->nblocks - 1] : NULL;
    if (blk && (blk->stream_id != stream || blk->size + bytes > w->block_size ||
                (uint64_t)blk->record_count + b->record_count > UINT32_MAX))
        blk = NULL;
    st = w->nstreams ? &w->streams[w->nstreams - 1] : NULL; /* the arrays may have moved */
    bool new_stream = !st || st->stream_id != stream;
    if (new_stream) {
        st = &w->streams[w->nstreams++];
        memset(st, 0, sizeof *st);
        st->stream_id = stream;
        st->start_offset = b->base_offset;
        st->position = w->pos;
        st->first_block = (uint32_t)w->nblocks;
    }
    if (!blk) {
        blk = &w->blocks[w->nblocks++];
        memset(blk, 0, sizeof *blk);
        blk->stream_id = stream;
        blk->start_offset = b->base_offset;
        blk->position = w->pos;
        w->block_open = true;
        st->block_count++;
    }
    uint8_t *h = w->hdrs + w->nbatches * OBJFMT_BATCH_HEADER;
    put64(h, b->base_offset);
    put64(h + 8, b->last_offset);
    put32(h + 16, b->record_count);
    put32(h + 20, b->size);
    w->payloads[w->nbatches++] = payload;
    blk->crc = sk_crc32c_extend(blk->crc, h, OBJFMT_BATCH_HEADER);
    if (payload_crc)
        blk->crc = sk_crc32c_combine(blk->crc, *payload_crc, b->size);
    else if (b->size)
        blk->crc = sk_crc32c_extend(blk->crc, payload, b->size);
    blk->size += (uint32_t)bytes;
    blk->end_offset = b->last_offset;
    blk->record_count += b->record_count;
    blk->batch_count++;
    st->end_offset = b->last_offset;
    st->size += bytes;
    st->record_count += b->record_count;
    w->pos += bytes;
    return 0;
}

uint64_t objfmt_writer_size(const objfmt_writer *w)
{
    return w->pos + (uint64_t)w->nblocks * OBJFMT_ENTRY_SIZE + OBJFMT_FOOTER_SIZE;
}

static void encode_entry(uint8_t *p, const objfmt_entry *e)
{
    put64(p, e->stream_id);
    put64(p + 8, e->start_offset);
    put64(p + 16, e->end_offset);
    put64(p + 24, e->position);
    put32(p + 32, e->size);
    put32(p + 36, e->record_count);
    put32(p + 40, e->batch_count);
    put32(p + 44, e->crc);
}

static void decode_entry(const uint8_t *p, objfmt_entry *e)
{
    e->stream_id = get64(p);
    e->start_offset = get64(p + 8);
    e->end_offset = get64(p + 16);
    e->position = get64(p + 24);
    e->size = get32(p + 32);
    e->record_count = get32(p + 36);
    e->batch_count = get32(p + 40);
    e->crc = get32(p + 44);
}

int objfmt_writer_finish(objfmt_writer *w, const struct iovec **iov, int *iovcnt, uint64_t *size)
{
    if (w->finished || w->nblocks == 0)
        return SK_ERR_INVAL;
    uint64_t index_size = (uint64_t)w->nblocks * OBJFMT_ENTRY_SIZE;
    if (index_size > OBJFMT_MAX_INDEX_SIZE || w->nbatches * 2 + 1 > (size_t)INT32_MAX)
        return SK_ERR_INVAL;
    w->tail = malloc((size_t)index_size + OBJFMT_FOOTER_SIZE);
    w->iov = malloc((w->nbatches * 2 + 1) * sizeof *w->iov);
    if (!w->tail || !w->iov)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < w->nblocks; i++)
        encode_entry(w->tail + i * OBJFMT_ENTRY_SIZE, &w->blocks[i]);
    uint8_t *f = w->tail + index_size;
    memset(f, 0, OBJFMT_FOOTER_SIZE);
    put64(f, w->pos);
    put32(f + 8, (uint32_t)index_size);
    put32(f + 12, (uint32_t)w->nblocks);
    put32(f + 16, sk_crc32c(w->tail, (size_t)index_size));
    f[20] = (uint8_t)w->kind;
    put64(f + 24, (uint64_t)w->created_ms);
    put32(f + 32, OBJFMT_VERSION);
    put32(f + 36, sk_crc32c(f, 36));
    memcpy(f + 40, OBJFMT_MAGIC, 8);

    int n = 0;
    for (size_t i = 0; i < w->nbatches; i++) {
        const uint8_t *h = w->hdrs + i * OBJFMT_BATCH_HEADER;
        w->iov[n].iov_base = (void *)h;
        w->iov[n].iov_len = OBJFMT_BATCH_HEADER;
        n++;
        uint32_t sz = get32(h + 20);
        if (sz) {
            w->iov[n].iov_base = (void *)w->payloads[i];
            w->iov[n].iov_len = sz;
            n++;
        }
    }
    w->iov[n].iov_base = w->tail;
    w->iov[n].iov_len = (size_t)index_size + OBJFMT_FOOTER_SIZE;
    n++;
    w->iovcnt = n;
    w->finished = true;
    w->block_open = false;
    *iov = w->iov;
    *iovcnt = n;
    *size = w->pos + index_size + OBJFMT_FOOTER_SIZE;
    return 0;
}

const objfmt_entry *objfmt_writer_blocks(const objfmt_writer *w, size_t *n)
{
    *n = w->nblocks;
    return w->blocks;
}

const objfmt_stream *objfmt_writer_streams(const objfmt_writer *w, size_t *n)
{
    *n = w->nstreams;
    return w->streams;
}

/* ---- reader ---- */

struct objfmt_reader {
    objfmt_footer f;
    objfmt_entry *blocks;
    size_t nblocks;
    objfmt_stream *streams;
    size_t nstreams;
};

int objfmt_footer_parse(const void *p, size_t len, uint64_t obj_size, objfmt_footer *f)
{
    if (len < OBJFMT_FOOTER_SIZE || obj_size < OBJFMT_FOOTER_SIZE)
        return SK_ERR_CORRUPT;
    const uint8_t *b = (const uint8_t *)p + len - OBJFMT_FOOTER_SIZE;
    if (memcmp(b + 40, OBJFMT_MAGIC, 8) != 0 || get32(b + 36) != sk_crc32c(b, 36))
        return SK_ERR_CORRUPT;
    memset(f, 0, sizeof *f);
    f->index_position = get64(b);
    f->index_size = get32(b + 8);
    f->index_count = get32(b + 12);
    f->index_crc = get32(b + 16);
    f->kind = (objfmt_kind)b[20];
    f->created_ms = (int64_t)get64(b + 24);
    f->version = get32(b + 32);
    if (f->version != OBJFMT_VERSION)
        return SK_ERR_CORRUPT;
    if (f->kind != OBJFMT_SO && f->kind != OBJFMT_SSO)
        return SK_ERR_CORRUPT;
    if (b[21] || b[22] || b[23])
        return SK_ERR_CORRUPT;
    if (f->index_count == 0 || (uint64_t)f->index_count * OBJFMT_ENTRY_SIZE != f->index_size ||
        f->index_size > OBJFMT_MAX_INDEX_SIZE)
        return SK_ERR_CORRUPT;
    if (f->index_position > obj_size ||
        obj_size - f->index_position != (uint64_t)f->index_size + OBJFMT_FOOTER_SIZE)
        return SK_ERR_CORRUPT;
    return 0;
}

int objfmt_reader_open(const objfmt_footer *f, const void *index, size_t len, objfmt_reader **out)
{
    *out = NULL;
    if (len != f->index_size || sk_crc32c(index, len) != f->index_crc)
        return SK_ERR_CORRUPT;
    objfmt_reader *r = calloc(1, sizeof *r);
    if (!r)
        return SK_ERR_NOMEM;
    r->f = *f;
    r->nblocks = f->index_count;
    r->blocks = malloc(r->nblocks * sizeof *r->blocks);
    r->streams = malloc(r->nblocks * sizeof *r->streams);
    if (!r->blocks || !r->streams) {
        objfmt_reader_destroy(r);
        return SK_ERR_NOMEM;
    }
    uint64_t expect_pos = 0;
    for (size_t i = 0; i < r->nblocks; i++) {
        objfmt_entry *e = &r->blocks[i];
        decode_entry((const uint8_t *)index + i * OBJFMT_ENTRY_SIZE, e);
        bool ok = e->position == expect_pos && e->start_offset <= e->end_offset &&
                  e->batch_count > 0 &&
                  (uint64_t)e->size >= (uint64_t)e->batch_count * OBJFMT_BATCH_HEADER &&
                  e->position + e->size <= f->index_position;
        if (ok && i > 0) {
            const objfmt_entry *p = &r->blocks[i - 1];
            ok = p->stream_id < e->stream_id ||
                 (p->stream_id == e->stream_id && p->end_offset < e->start_offset);
            if (ok && f->kind == OBJFMT_SO)
                ok = p->stream_id == e->stream_id;
        }
        if (!ok) {
            objfmt_reader_destroy(r);
            return SK_ERR_CORRUPT;
        }
        expect_pos += e->size;
        objfmt_stream *st = r->nstreams ? &r->streams[r->nstreams - 1] : NULL;
        if (!st || st->stream_id != e->stream_id) {
            st = &r->streams[r->nstreams++];
            memset(st, 0, sizeof *st);
            st->stream_id = e->stream_id;
            st->start_offset = e->start_offset;
            st->position = e->position;
            st->first_block = (uint32_t)i;
        }
        st->end_offset = e->end_offset;
        st->size += e->size;
        st->record_count += e->record_count;
        st->block_count++;
    }
    if (expect_pos != f->index_position) {
        objfmt_reader_destroy(r);
        return SK_ERR_CORRUPT;
    }
    *out = r;
    return 0;
}

int objfmt_reader_from_tail(const void *tail, size_t tail_len, uint64_t obj_size,
                            objfmt_reader **out, uint64_t *need_off, size_t *need_len)
{
    *out = NULL;
    if (tail_len > obj_size)
        return SK_ERR_INVAL;
    objfmt_footer f;
    int rc = objfmt_footer_parse(tail, tail_len, obj_size, &f);
    if (rc != 0)
        return rc;
    uint64_t tail_start = obj_size - tail_len;
    if (f.index_position < tail_start) {
        *need_off = f.index_position;
        *need_len = (size_t)(obj_size - f.index_position);
        return SK_ERR_AGAIN;
    }
    const uint8_t *index = (const uint8_t *)tail + (f.index_position - tail_start);
    return objfmt_reader_open(&f, index, f.index_size, out);
}

void objfmt_reader_destroy(objfmt_reader *r)
{
    if (!r)
        return;
    free(r->blocks);
    free(r->streams);
    free(r);
}

const objfmt_footer *objfmt_reader_footer(const objfmt_reader *r)
{
    return &r->f;
}

const objfmt_entry *objfmt_reader_blocks(const objfmt_reader *r, size_t *n)
{
    *n = r->nblocks;
    return r->blocks;
}

const objfmt_stream *objfmt_reader_streams(const objfmt_reader *r, size_t *n)
{
    *n = r->nstreams;
    return r->streams;
}

int objfmt_reader_find(const objfmt_reader *r, uint64_t stream, uint64_t from_offset,
                       size_t *block)
{
    /* First block ordered at or after (stream, end >= from_offset). */
    size_t lo = 0, hi = r->nblocks;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        const objfmt_entry *e = &r->blocks[mid];
        if (e->stream_id < stream || (e->stream_id == stream && e->end_offset < from_offset))
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == r->nblocks || r->blocks[lo].stream_id != stream)
        return SK_ERR_NOENT;
    *block = lo;
    return 0;
}

size_t objfmt_reader_ranges(const objfmt_reader *r, uint64_t stream, uint64_t from_offset,
                            uint64_t max_bytes, objfmt_range *out, size_t max_out)
{
    size_t i;
    if (max_out == 0 || objfmt_reader_find(r, stream, from_offset, &i) != 0)
        return 0;
    size_t n = 0;
    uint64_t total = 0;
    for (; i < r->nblocks && r->blocks[i].stream_id == stream; i++) {
        const objfmt_entry *e = &r->blocks[i];
        objfmt_range *cur = n ? &out[n - 1] : NULL;
        if (cur && cur->position + cur->size == e->position) {
            cur->size += e->size;
            cur->nblocks++;
            cur->end_offset = e->end_offset;
        } else {
            if (n == max_out)
                break;
            cur = &out[n++];
            cur->position = e->position;
            cur->size = e->size;
            cur->first_block = (uint32_t)i;
            cur->nblocks = 1;
            cur->start_offset = e->start_offset;
            cur->end_offset = e->end_offset;
        }
        total += e->size;
        if (max_bytes && total >= max_bytes)
            break;
    }
    return n;
}

/* ---- data blocks ---- */

int objfmt_block_verify(const objfmt_entry *e, const void *data, size_t len)
{
    if (len != e->size)
        return SK_ERR_CORRUPT;
    return objfmt_block_verify_crc(e, data, len, sk_crc32c(data, len));
}

int objfmt_block_verify_crc(const objfmt_entry *e, const void *data, size_t len, uint32_t crc)
{
    if (len != e->size || crc != e->crc)
        return SK_ERR_CORRUPT;
    const uint8_t *p = data, *end = p + len;
    uint32_t batches = 0;
    uint64_t records = 0, prev_last = 0;
    while (p < end) {
        if ((size_t)(end - p) < OBJFMT_BATCH_HEADER)
            return SK_ERR_CORRUPT;
        uint64_t base = get64(p), last = get64(p + 8);
        uint32_t count = get32(p + 16), size = get32(p + 20);
        if (last < base || (size_t)(end - p) - OBJFMT_BATCH_HEADER < size)
            return SK_ERR_CORRUPT;
        if (batches == 0 ? base != e->start_offset : base <= prev_last)
            return SK_ERR_CORRUPT;
        prev_last = last;
        records += count;
        batches++;
        p += OBJFMT_BATCH_HEADER + size;
    }
    if (batches != e->batch_count || records != e->record_count || prev_last != e->end_offset)
        return SK_ERR_CORRUPT;
    return 0;
}

int objfmt_iter_init(objfmt_iter *it, const objfmt_entry *e, const void *data, size_t len)
{
    it->p = it->end = NULL;
    int rc = objfmt_block_verify(e, data, len);
    if (rc != 0)
        return rc;
    objfmt_iter_init_verified(it, data, len);
    return 0;
}

void objfmt_iter_init_verified(objfmt_iter *it, const void *data, size_t len)
{
    it->p = data;
    it->end = it->p + len;
}

int objfmt_iter_next(objfmt_iter *it, objfmt_batch *b, const uint8_t **payload)
{
    if (!it->p || (size_t)(it->end - it->p) < OBJFMT_BATCH_HEADER)
        return 0;
    b->base_offset = get64(it->p);
    b->last_offset = get64(it->p + 8);
    b->record_count = get32(it->p + 16);
    b->size = get32(it->p + 20);
    if ((size_t)(it->end - it->p) - OBJFMT_BATCH_HEADER < b->size) {
        it->p = it->end; /* a block that was not verified: stop, never overrun */
        return 0;
    }
    *payload = it->p + OBJFMT_BATCH_HEADER;
    it->p += OBJFMT_BATCH_HEADER + b->size;
    return 1;
}

/* ---- keys ---- */

static const char *kind_name(objfmt_kind k)
{
    return k == OBJFMT_SO ? "so" : "sso";
}

int objfmt_make_key(char *buf, size_t len, const char *prefix, objfmt_kind kind, uint32_t node,
                    int64_t created_ms)
{
    if (kind != OBJFMT_SO && kind != OBJFMT_SSO)
        return SK_ERR_INVAL;
    uint8_t rnd[16];
    if (RAND_bytes(rnd, sizeof rnd) != 1 && getrandom(rnd, sizeof rnd, 0) != (ssize_t)sizeof rnd)
        return SK_ERR_IO;
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    size_t pl = prefix ? strlen(prefix) : 0;
    while (pl > 0 && prefix[pl - 1] == '/')
        pl--;
    int n = snprintf(buf, len, "%.*s%sdata/%s/%s-%u-%lld.obj", (int)pl, pl ? prefix : "",
                     pl ? "/" : "", hex, kind_name(kind), node, (long long)created_ms);
    if (n < 0 || (size_t)n >= len)
        return SK_ERR_INVAL;
    return 0;
}

int objfmt_parse_key(const char *key, objfmt_kind *kind, uint32_t *node, int64_t *created_ms)
{
    const char *name = strrchr(key, '/');
    if (!name || name - key < 33)
        return SK_ERR_PARSE;
    const char *hex = name - 32;
    if (hex[-1] != '/')
        return SK_ERR_PARSE;
    for (int i = 0; i < 32; i++) {
        char c = hex[i];
        if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f')))
            return SK_ERR_PARSE;
    }
    const char *data = hex - 1;
    if (data - key < 4 || memcmp(data - 4, "data", 4) != 0 ||
        (data - 4 != key && data[-5] != '/'))
        return SK_ERR_PARSE;
    name++;
    objfmt_kind k;
    if (strncmp(name, "so-", 3) == 0) {
        k = OBJFMT_SO;
        name += 3;
    } else if (strncmp(name, "sso-", 4) == 0) {
        k = OBJFMT_SSO;
        name += 4;
    } else {
        return SK_ERR_PARSE;
    }
    char *end;
    if (*name < '0' || *name > '9')
        return SK_ERR_PARSE;
    unsigned long long nd = strtoull(name, &end, 10);
    if (*end != '-' || nd > UINT32_MAX || end[1] < '0' || end[1] > '9')
        return SK_ERR_PARSE;
    long long t = strtoll(end + 1, &end, 10);
    if (strcmp(end, ".obj") != 0)
        return SK_ERR_PARSE;
    *kind = k;
    *node = (uint32_t)nd;
    *created_ms = t;
    return 0;
}
