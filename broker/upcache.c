#include "upcache.h"

#include <stdlib.h>

#include "meta.h"
#include "sk_err.h"

static bool usable(const sk_cbatch *b, wal_lsn from, wal_lsn to)
{
    return !b->linked && b->lsn >= from && b->lsn < to;
}

int sk_upcache_collect(sk_node *n, wal_lsn from, wal_lsn to, uint64_t max_bytes,
                       sk_upcache *out)
{
    *out = (sk_upcache){0};
    size_t cap = 0;
    for (sk_cbatch *b = n->cache_head; b && b->lsn < to && out->bytes < max_bytes;
         b = b->gnext) {
        if (!usable(b, from, to))
            continue;
        if (out->n == cap) {
            cap = cap ? cap * 2 : 256;
            sk_upbatch *nv = realloc(out->v, cap * sizeof *nv);
            if (!nv) {
                sk_upcache_release(out);
                return SK_ERR_NOMEM;
            }
            out->v = nv;
        }
        sk_ref_hold(&b->ref);
        out->v[out->n++] = (sk_upbatch){b->lsn, b->part->topic->id, b->part->index, b->len,
                                        b->data, &b->ref, b->crc_checked};
        out->bytes += b->len;
    }
    return 0;
}

const sk_upbatch *sk_upcache_at(sk_upcache *c, wal_lsn lsn)
{
    while (c->at < c->n && c->v[c->at].lsn < lsn)
        c->at++;
    return c->at < c->n && c->v[c->at].lsn == lsn ? &c->v[c->at] : NULL;
}

uint32_t sk_upcache_record_len(const sk_upbatch *b)
{
    return SK_DATA_HEADER + b->len;
}

void sk_upcache_release(sk_upcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        sk_ref_put(c->v[i].ref);
    free(c->v);
    *c = (sk_upcache){0};
}
