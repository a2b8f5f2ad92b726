#include "hstate.h"

#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

#define HSTATE_VERSION 2 /* 1: the same without the transactional ids */

/* Caps on counts read from a record, so that a corrupt count cannot make
 * the decoder allocate without bound: each entry takes at least this many
 * bytes of the input. */
#define MIN_PRODUCER 19
#define MIN_BATCH 44
#define MIN_OBJECT 26
#define MIN_RANGE 40
#define MIN_GROUP 4

void sk_hstate_encode(sk_buf *b, const sk_hstate *h)
{
    sk_buf_u8(b, HSTATE_VERSION);
    sk_buf_put(b, h->id.b, 16);
    sk_buf_u32(b, (uint32_t)h->part);
    sk_buf_u32(b, (uint32_t)h->epoch);
    sk_buf_u64(b, h->stream);
    sk_buf_u64(b, (uint64_t)h->log_start);
    sk_buf_u64(b, (uint64_t)h->next_offset);
    sk_buf_u64(b, (uint64_t)h->max_ts);
    sk_buf_u64(b, (uint64_t)h->max_ts_base);
    sk_buf_u64(b, (uint64_t)h->src_log);
    sk_buf_u64(b, h->src_lsn);
    sk_buf_u32(b, h->nproducers);
    for (uint32_t i = 0; i < h->nproducers; i++)
        sk_pstate_put(b, &h->producers[i]);
    sk_buf_u32(b, h->nbatches);
    for (uint32_t i = 0; i < h->nbatches; i++) {
        const sk_hbatch *x = &h->batches[i];
        sk_buf_u64(b, (uint64_t)x->log);
        sk_buf_u64(b, x->lsn);
        sk_buf_u32(b, x->len);
        sk_buf_u64(b, (uint64_t)x->base);
        sk_buf_u64(b, (uint64_t)x->last);
        sk_buf_u64(b, (uint64_t)x->max_ts);
    }
    sk_buf_u32(b, h->nobjects);
    for (uint32_t i = 0; i < h->nobjects; i++) {
        const sk_hobj *o = &h->objects[i];
        sk_buf_str(b, o->key, o->klen);
        sk_buf_u8(b, o->kind);
        sk_buf_u64(b, o->size);
        sk_buf_u64(b, (uint64_t)o->created_ms);
        sk_buf_u8(b, o->flags);
        sk_buf_u32(b, o->nranges);
        for (uint32_t k = 0; k < o->nranges; k++) {
            const sk_hrange *r = &o->ranges[k];
            sk_buf_u64(b, r->start);
            sk_buf_u64(b, r->end);
            sk_buf_u64(b, r->size);
            sk_buf_u64(b, (uint64_t)r->max_ts);
            sk_buf_u64(b, r->records);
        }
    }
    sk_buf_u32(b, h->ngroups);
    for (uint32_t i = 0; i < h->ngroups; i++)
        sk_buf_str(b, (const char *)h->groups[i], h->group_lens[i]);
    sk_buf_u32(b, h->ntxns);
    for (uint32_t i = 0; i < h->ntxns; i++)
        sk_buf_str(b, (const char *)h->txns[i], h->txn_lens[i]);
    sk_buf_u32(b, h->ntxidx);
    for (uint32_t i = 0; i < h->ntxidx; i++) {
        sk_buf_u64(b, (uint64_t)h->txidx[i].pid);
        sk_buf_u64(b, (uint64_t)h->txidx[i].first);
        sk_buf_u64(b, (uint64_t)h->txidx[i].last);
    }
}

/* A count of entries of at least `min` bytes each, checked against what is
 * left of the input. */
static int rd_count(sk_rd *r, size_t min, uint32_t *n)
{
    *n = sk_rd_u32(r);
    if (sk_rd_failed(r) || (uint64_t)*n * min > sk_rd_left(r))
        return SK_ERR_CORRUPT;
    return 0;
}

static int decode_producers(sk_rd *r, sk_hstate *h)
{
    if (rd_count(r, MIN_PRODUCER, &h->nproducers))
        return SK_ERR_CORRUPT;
    h->producers = calloc(h->nproducers ? h->nproducers : 1, sizeof *h->producers);
    if (!h->producers)
        return SK_ERR_NOMEM;
    for (uint32_t i = 0; i < h->nproducers; i++)
        if (sk_pstate_get(r, &h->producers[i]) != 0)
            return SK_ERR_CORRUPT;
    return 0;
}

static int decode_batches(sk_rd *r, sk_hstate *h)
{
    if (rd_count(r, MIN_BATCH, &h->nbatches))
        return SK_ERR_CORRUPT;
    h->batches = calloc(h->nbatches ? h->nbatches : 1, sizeof *h->batches);
    if (!h->batches)
        return SK_ERR_NOMEM;
    for (uint32_t i = 0; i < h->nbatches; i++) {
        sk_hbatch *x = &h->batches[i];
        x->log = (int64_t)sk_rd_u64(r);
        x->lsn = sk_rd_u64(r);
        x->len = sk_rd_u32(r);
        x->base = (int64_t)sk_rd_u64(r);
        x->last = (int64_t)sk_rd_u64(r);
        x->max_ts = (int64_t)sk_rd_u64(r);
        if (x->log == 0) /* every batch names the log whose WAL holds it */
            return SK_ERR_CORRUPT;
    }
    return sk_rd_failed(r) ? SK_ERR_CORRUPT : 0;
}

/* Objects, in two passes: the first counts ranges so that one array holds
 * them all. */
static int decode_objects(sk_rd *r, sk_hstate *h)
{
    if (rd_count(r, MIN_OBJECT, &h->nobjects))
        return SK_ERR_CORRUPT;
    h->objects = calloc(h->nobjects ? h->nobjects : 1, sizeof *h->objects);
    if (!h->objects)
        return SK_ERR_NOMEM;
    sk_rd first = *r;
    uint64_t nr = 0;
    for (uint32_t i = 0; i < h->nobjects; i++) {
        size_t kl;
        sk_rd_str(&first, &kl);
        sk_rd_bytes(&first, 1 + 8 + 8 + 1);
        uint32_t k;
        if (rd_count(&first, MIN_RANGE, &k))
            return SK_ERR_CORRUPT;
        sk_rd_bytes(&first, (size_t)k * MIN_RANGE);
        nr += k;
    }
    if (sk_rd_failed(&first))
        return SK_ERR_CORRUPT;
    h->nranges = (uint32_t)nr;
    h->ranges = calloc(nr ? nr : 1, sizeof *h->ranges);
    if (!h->ranges)
        return SK_ERR_NOMEM;
    sk_hrange *next = h->ranges;
    for (uint32_t i = 0; i < h->nobjects; i++) {
        sk_hobj *o = &h->objects[i];
        o->key = (const char *)sk_rd_str(r, &o->klen);
        o->kind = sk_rd_u8(r);
        o->size = sk_rd_u64(r);
        o->created_ms = (int64_t)sk_rd_u64(r);
        o->flags = sk_rd_u8(r);
        o->nranges = sk_rd_u32(r);
        o->ranges = next;
        for (uint32_t k = 0; k < o->nranges; k++, next++) {
            next->start = sk_rd_u64(r);
            next->end = sk_rd_u64(r);
            next->size = sk_rd_u64(r);
            next->max_ts = (int64_t)sk_rd_u64(r);
            next->records = sk_rd_u64(r);
        }
    }
    return sk_rd_failed(r) ? SK_ERR_CORRUPT : 0;
}

static int decode_groups(sk_rd *r, sk_hstate *h)
{
    if (rd_count(r, MIN_GROUP, &h->ngroups))
        return SK_ERR_CORRUPT;
    h->groups = calloc(h->ngroups ? h->ngroups : 1, sizeof *h->groups);
    h->group_lens = calloc(h->ngroups ? h->ngroups : 1, sizeof *h->group_lens);
    if (!h->groups || !h->group_lens)
        return SK_ERR_NOMEM;
    for (uint32_t i = 0; i < h->ngroups; i++)
        h->groups[i] = sk_rd_str(r, &h->group_lens[i]);
    return sk_rd_failed(r) ? SK_ERR_CORRUPT : 0;
}

static int decode_txns(sk_rd *r, sk_hstate *h)
{
    if (rd_count(r, MIN_GROUP, &h->ntxns))
        return SK_ERR_CORRUPT;
    h->txns = calloc(h->ntxns ? h->ntxns : 1, sizeof *h->txns);
    h->txn_lens = calloc(h->ntxns ? h->ntxns : 1, sizeof *h->txn_lens);
    if (!h->txns || !h->txn_lens)
        return SK_ERR_NOMEM;
    for (uint32_t i = 0; i < h->ntxns; i++)
        h->txns[i] = sk_rd_str(r, &h->txn_lens[i]);
    return sk_rd_failed(r) ? SK_ERR_CORRUPT : 0;
}

static int decode_txidx(sk_rd *r, sk_hstate *h)
{
    if (rd_count(r, 24, &h->ntxidx))
        return SK_ERR_CORRUPT;
    h->txidx = calloc(h->ntxidx ? h->ntxidx : 1, sizeof *h->txidx);
    if (!h->txidx)
        return SK_ERR_NOMEM;
    for (uint32_t i = 0; i < h->ntxidx; i++) {
        h->txidx[i].pid = (int64_t)sk_rd_u64(r);
        h->txidx[i].first = (int64_t)sk_rd_u64(r);
        h->txidx[i].last = (int64_t)sk_rd_u64(r);
    }
    return sk_rd_failed(r) ? SK_ERR_CORRUPT : 0;
}

int sk_hstate_decode(const uint8_t *p, size_t n, sk_hstate *h)
{
    memset(h, 0, sizeof *h);
    sk_rd r;
    sk_rd_init(&r, p, n);
    uint8_t version = sk_rd_u8(&r);
    if (version != 1 && version != HSTATE_VERSION)
        return SK_ERR_CORRUPT;
    const uint8_t *id = sk_rd_bytes(&r, 16);
    if (id)
        memcpy(h->id.b, id, 16);
    h->part = (int32_t)sk_rd_u32(&r);
    h->epoch = (int32_t)sk_rd_u32(&r);
    h->stream = sk_rd_u64(&r);
    h->log_start = (int64_t)sk_rd_u64(&r);
    h->next_offset = (int64_t)sk_rd_u64(&r);
    h->max_ts = (int64_t)sk_rd_u64(&r);
    h->max_ts_base = (int64_t)sk_rd_u64(&r);
    h->src_log = (int64_t)sk_rd_u64(&r);
    h->src_lsn = sk_rd_u64(&r);
    int rc = sk_rd_failed(&r) ? SK_ERR_CORRUPT : 0;
    if (rc == 0)
        rc = decode_producers(&r, h);
    if (rc == 0)
        rc = decode_batches(&r, h);
    if (rc == 0)
        rc = decode_objects(&r, h);
    if (rc == 0)
        rc = decode_groups(&r, h);
    if (rc == 0 && version >= 2)
        rc = decode_txns(&r, h);
    if (rc == 0 && version >= 2)
        rc = decode_txidx(&r, h);
    if (rc == 0 && (sk_rd_failed(&r) || sk_rd_left(&r) != 0 || h->part < 0 ||
                    h->log_start < 0 || h->next_offset < h->log_start))
        rc = SK_ERR_CORRUPT;
    if (rc)
        sk_hstate_free(h);
    return rc;
}

void sk_hstate_free(sk_hstate *h)
{
    free(h->producers);
    free(h->batches);
    free(h->objects);
    free(h->ranges);
    free(h->groups);
    free(h->group_lens);
    free(h->txns);
    free(h->txn_lens);
    free(h->txidx);
    h->txidx = NULL;
    h->ntxidx = 0;
    h->txns = NULL;
    h->txn_lens = NULL;
    h->ntxns = 0;
    h->producers = NULL;
    h->batches = NULL;
    h->objects = NULL;
    h->ranges = NULL;
    h->groups = NULL;
    h->group_lens = NULL;
    h->nproducers = h->nbatches = h->nobjects = h->nranges = h->ngroups = 0;
}

void sk_meta_handoff(sk_buf *b, const sk_hstate *h)
{
    sk_meta_head(b, SK_META_HANDOFF);
    sk_hstate_encode(b, h);
}

void sk_meta_adopt(sk_buf *b, const sk_hstate *h)
{
    sk_meta_head(b, SK_META_ADOPT);
    sk_hstate_encode(b, h);
}

void sk_meta_drop(sk_buf *b, const kc_uuid *id, int32_t part)
{
    sk_meta_head(b, SK_META_DROP);
    sk_buf_put(b, id->b, 16);
    sk_buf_u32(b, (uint32_t)part);
}
