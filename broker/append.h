/*
 * append: a batch joins a partition (docs/architecture.md, "Produce";
 * docs/zones.md, "Proxy produce").
 *
 * Produce (a client's batch, bytes in hand) and the main's side of the
 * confirm RPC (a batch a proxy wrote to its payload log) end the same way:
 *  - sk_append_check: idempotence. SK_PSTATE_APPEND, SK_PSTATE_DUPLICATE
 *    (*dup is the batch already written: answer with its offsets once it is
 *    durable, sk_node_wait_durable), or a Kafka code;
 *  - sk_append: offsets and the leader epoch written into the cached bytes
 *    (a copy, or the request frame's own bytes when the caller lends them),
 *    LogAppendTime where the topic wants it (not for a linked batch: its
 *    proxy set it, and the payload's CRC covers it), the WAL record (DATA
 *    with the bytes, or a LINK to the payload), the cache, the producer
 *    state. When the record is durable the high watermark moves past the
 *    batch, then fn runs (even after the request that asked is gone).
 *
 * Thread: the event loop.
 */
#ifndef APPEND_H
#define APPEND_H

#include "node.h"
#include "types.h"

struct kb_header;
struct sk_link;

int sk_append_check(sk_part *p, const struct kb_header *h, const sk_pbatch **dup);

typedef struct sk_append_res {
    int64_t base;      /* the batch's first offset */
    int64_t append_ts; /* its LogAppendTime, or -1 */
    wal_lsn lsn, lsn_end; /* its record in the WAL */
    sk_cbatch *cached; /* its cache entry (NULL: out of memory, not cached);
                          valid until the loop runs on */
} sk_append_res;

/* Appends the batch (h describes it; it gets the final offsets). `link`,
 * when given, names the payload (id, part, plog, plsn, len); its header
 * copy is filled here. `backing`, when given, holds the memory of `batch`
 * and lends it: the offsets are then written into those very bytes, and
 * the cache entry keeps them in place (holding backing) instead of a copy;
 * nobody else may write them from then on. A lent batch must have been
 * validated (its CRC field checked): the WAL record's CRC is derived from
 * that field. Without backing the batch is copied and its CRC computed.
 * fn may be NULL. Returns 0, or (nothing appended, nothing held)
 * SK_ERR_AGAIN (the WAL is busy), SK_ERR_IO, SK_ERR_NOMEM. */
int sk_append(sk_node *n, sk_part *p, const uint8_t *batch, uint32_t len, struct kb_header *h,
              struct sk_link *link, sk_ref *backing, sk_durable_fn fn, void *arg,
              sk_append_res *out) __attribute__((warn_unused_result));

#endif
