#include "append.h"

#include <stdlib.h>
#include <string.h>

#include "kbatch.h"
#include "meta.h"
#include "plog.h"
#include "pstate.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

/* From the append until the record is durable. The partition is found
 * again then: it may have been handed over or deleted meanwhile. */
struct durable {
    sk_node *n;
    kc_uuid id;
    int32_t part;
    int64_t last;
    sk_durable_fn fn;
    void *arg;
};

static void durable_cb(void *arg, int err)
{
    struct durable *d = arg;
    sk_part *p = sk_part_get(sk_topic_get_id(d->n, &d->id), d->part);
    if (p && p->own == SK_OWN_NONE)
        p = NULL; /* handed over meanwhile: its state went with its HANDOFF */
    if (err == 0 && p && d->last + 1 > p->hw) {
        p->hw = d->last + 1;
        sk_part_wake(p);
    }
    if (d->fn)
        d->fn(d->arg, err);
    free(d);
}

int sk_append_check(sk_part *p, const kb_header *h, const sk_pbatch **dup)
{
    if (h->producer_id < 0)
        return SK_PSTATE_APPEND;
    sk_pstate *ps = sk_part_pstate(p, h->producer_id, false);
    int last_seq = sk_seq_add(h->base_sequence, h->last_offset_delta);
    return sk_pstate_check(ps, h->producer_epoch, h->base_sequence, last_seq, dup);
}

/* Effects that follow a successful append (see node.h); false when the
 * cache could not take the batch (out of memory: cb is gone). */
static bool after_append(sk_node *n, sk_part *p, sk_cbatch *cb, const kb_header *h,
                         int64_t append_ts, wal_lsn lsn_end)
{
    p->next_offset = cb->last + 1;
    if (h->max_timestamp > p->max_ts) {
        p->max_ts = h->max_timestamp;
        p->max_ts_base = cb->base;
    }
    /* A transaction marker ends a transaction; it is no batch of the
     * producer's sequence. */
    if (h->producer_id >= 0 && !(h->attributes & KB_ATTR_CONTROL)) {
        sk_pstate *ps = sk_part_pstate(p, h->producer_id, true);
        if (ps) {
            sk_pbatch pb = {h->base_sequence, sk_seq_add(h->base_sequence, h->last_offset_delta),
                            cb->base, cb->last, append_ts, lsn_end};
            sk_pstate_push(ps, h->producer_epoch, &pb);
            ps->last_ts = sk_now_ms();
        }
    }
    if ((h->attributes & KB_ATTR_TRANSACTIONAL) &&
        sk_txidx_batch(&p->txidx, h->producer_id, cb->base, true,
                       (h->attributes & KB_ATTR_CONTROL) ? sk_txidx_control_type(cb->data, cb->len)
                                                         : -1) != 0)
        SK_WARN("append", "%s-%d: transaction index out of memory", p->topic->name, p->index);
    n->n_produced_batches++;
    n->n_produced_bytes += cb->len;
    return sk_cache_add(n, p, cb);
}

/* The cache entry of a batch: the bytes in place when the caller lends
 * them (backing), else a copy after the struct. Holds nothing yet. */
static sk_cbatch *cbatch_new(const uint8_t *batch, uint32_t len, sk_ref *backing)
{
    sk_cbatch *cb = malloc(sizeof *cb + (backing ? 0 : len));
    if (!cb)
        return NULL;
    if (backing) {
        cb->data = (uint8_t *)batch;
    } else {
        cb->data = (uint8_t *)(cb + 1);
        memcpy(cb->data, batch, len);
    }
    cb->backing = NULL;
    cb->len = len;
    return cb;
}

int sk_append(sk_node *n, sk_part *p, const uint8_t *batch, uint32_t len, kb_header *h,
              sk_link *link, sk_ref *backing, sk_durable_fn fn, void *arg, sk_append_res *out)
{
    sk_cbatch *cb = cbatch_new(batch, len, backing);
    struct durable *d = malloc(sizeof *d);
    if (!cb || !d) {
        free(cb);
        free(d);
        return SK_ERR_NOMEM;
    }
    int64_t base = p->next_offset;
    kb_set_base_offset(cb->data, base);
    kb_set_leader_epoch(cb->data, p->leader_epoch);
    int64_t append_ts = (h->attributes & KB_ATTR_LOG_APPEND_TIME) ? h->max_timestamp : -1;
    if (!link && p->topic->conf.log_append_time) {
        int64_t now = sk_now_ms();
        kb_set_log_append_time(cb->data, now);
        h->attributes |= KB_ATTR_LOG_APPEND_TIME;
        h->max_timestamp = now;
        append_ts = now;
    }
    h->base_offset = base;
    h->leader_epoch = p->leader_epoch;
    cb->base = base;
    cb->last = base + h->last_offset_delta;
    cb->max_ts = h->max_timestamp;
    if (link)
        memcpy(link->head, cb->data, KB_HEADER_SIZE);
    *d = (struct durable){n, p->topic->id, p->index, cb->last, fn, arg};
    wal_lsn lsn, lsn_end;
    /* A lent batch is the request's, validated just now: its CRC field
     * is right (LogAppendTime above set it again). */
    int rc = sk_node_append_data(n, p, cb->data, cb->len, h, link, backing != NULL, durable_cb, d,
                                 &lsn, &lsn_end);
    if (rc != 0) {
        free(cb);
        free(d);
        return rc;
    }
    cb->lsn = lsn;
    cb->linked = link != NULL;
    cb->crc_checked = backing != NULL;
    if (backing) {
        sk_ref_hold(backing);
        cb->backing = backing;
    }
    out->cached = after_append(n, p, cb, h, append_ts, lsn_end) ? cb : NULL;
    out->base = base;
    out->append_ts = append_ts;
    out->lsn = lsn;
    out->lsn_end = lsn_end;
    return 0;
}
