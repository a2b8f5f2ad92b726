/*
 * hstate: a partition's whole state as it moves between logs
 * (docs/cluster.md, "HANDOFF and ADOPT"), and its encoding, the body of the
 * SK_META_HANDOFF and SK_META_ADOPT records.
 *
 *   u8 version (2) | topic id (16) | u32 partition | u32 epoch | u64 stream |
 *   u64 log start | u64 next offset | u64 max ts | u64 max ts base |
 *   u64 source log | u64 source LSN          (ADOPT: where the HANDOFF was)
 *   u32 nproducers | producer states (meta.h's sk_pstate_put)
 *   u32 nbatches | (u64 log, u64 lsn, u32 len, u64 base, u64 last, u64 max ts)
 *   u32 nobjects | (str key, u8 kind, u64 size, u64 created ms, u8 flags,
 *                   u32 nranges, (u64 start, u64 end, u64 size, u64 max ts,
 *                   u64 records) each)       (ranges of this partition's stream)
 *   u32 ngroups | str group record body (groups.h, op COMMIT) each
 *   u32 ntxns | str transactional id record body (txns.h) each
 *                                            (the ids hashed to this
 *                                            partition of __consumer_offsets)
 *   u32 ntxidx | (u64 pid, u64 first offset, u64 abort marker's offset or
 *                 -1 for an open transaction) each   (txidx.h)
 *   (the last two: version 2; version 1, still read, has neither)
 *
 * Batches name the log whose WAL holds them (never 0: the writer of a
 * HANDOFF puts its own log id for its own batches). Object flags:
 * SK_HOBJ_SHARED when other streams of the object stay with other logs.
 *
 * Contract: pure, any thread. sk_hstate_decode allocates the arrays (freed by
 * sk_hstate_free) and borrows strings from the input, which must outlive it.
 * Errors: SK_ERR_CORRUPT, SK_ERR_NOMEM.
 */
#ifndef HSTATE_H
#define HSTATE_H

#include <stddef.h>
#include <stdint.h>

#include "kc.h"
#include "meta.h"
#include "sk_buf.h"
#include "txidx.h"
#include "types.h"

enum { SK_HOBJ_SHARED = 1 };

typedef struct sk_hbatch {
    int64_t log;
    uint64_t lsn;
    uint32_t len;
    int64_t base, last, max_ts;
} sk_hbatch;

typedef struct sk_hrange {
    uint64_t start, end, size;
    int64_t max_ts;
    uint64_t records;
} sk_hrange;

typedef struct sk_hobj {
    const char *key;
    size_t klen;
    uint8_t kind;
    uint64_t size;
    int64_t created_ms;
    uint8_t flags;
    uint32_t nranges;
    sk_hrange *ranges; /* into sk_hstate.ranges */
} sk_hobj;

typedef struct sk_hstate {
    kc_uuid id;
    int32_t part;
    int32_t epoch;
    uint64_t stream;
    int64_t log_start, next_offset, max_ts, max_ts_base;
    int64_t src_log;
    uint64_t src_lsn;
    uint32_t nproducers;
    sk_pstate *producers;
    uint32_t nbatches;
    sk_hbatch *batches;
    uint32_t nobjects;
    sk_hobj *objects;
    uint32_t nranges; /* all objects' ranges, in object order */
    sk_hrange *ranges;
    uint32_t ngroups;
    const uint8_t **groups; /* group record bodies */
    size_t *group_lens;
    uint32_t ntxns;
    const uint8_t **txns; /* SK_META_TXN record bodies of the ids hashed here */
    size_t *txn_lens;
    uint32_t ntxidx;
    sk_txidx_ent *txidx; /* the partition's open and aborted transactions */
} sk_hstate;

void sk_hstate_encode(sk_buf *b, const sk_hstate *h);
int sk_hstate_decode(const uint8_t *p, size_t n, sk_hstate *h)
    __attribute__((warn_unused_result));
/* Frees what decode (or a builder) allocated: the arrays, not the strings. */
void sk_hstate_free(sk_hstate *h);

/* The records: head + state. */
void sk_meta_handoff(sk_buf *b, const sk_hstate *h);
void sk_meta_adopt(sk_buf *b, const sk_hstate *h);
/* DROP: u8 version | u8 kind | topic id | u32 partition */
void sk_meta_drop(sk_buf *b, const kc_uuid *id, int32_t part);

#endif
