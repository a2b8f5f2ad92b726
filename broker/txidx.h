/*
 * txidx: a partition's transaction index, what read_committed reads need:
 * the transactions open on it (producer id -> offset of its first batch in
 * the transaction) and the aborted ones (producer id, first offset, offset
 * of the abort marker). The last stable offset is the first offset of the
 * oldest open transaction, else the high watermark.
 *
 * Fed with every appended batch (sk_txidx_batch), in offset order. Kept in
 * memory per partition; the SQLite view keeps the same in its txn_open and
 * txn_aborted tables (store.c) and snapshots carry it (SK_SNAP_TXIDX), so
 * a restart rebuilds it (sk_txidx_load).
 *
 * Pure, no I/O. Thread: the owner of the partition (the event loop), or
 * the store thread for its own copy.
 */
#ifndef TXIDX_H
#define TXIDX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef struct sk_txidx_ent {
    int64_t pid, first, last; /* last: the abort marker's offset (-1: open) */
} sk_txidx_ent;

typedef struct sk_txidx {
    sk_txidx_ent *open, *aborted;
    int nopen, capopen, naborted, capaborted;
} sk_txidx;

/* The marker type of a control batch: 1 commit, 0 abort, -1 none / unreadable. */
int sk_txidx_control_type(const uint8_t *batch, size_t len);

/* An appended batch: transactional data opens the producer's transaction
 * (when not open yet); a marker (control 0/1) closes it, keeping an aborted
 * one. Returns 0 or SK_ERR_NOMEM. */
int sk_txidx_batch(sk_txidx *x, int64_t pid, int64_t base, bool transactional, int control)
    __attribute__((warn_unused_result));
/* Restores one entry (last -1: an open transaction). */
int sk_txidx_load(sk_txidx *x, const sk_txidx_ent *e) __attribute__((warn_unused_result));
int64_t sk_txidx_lso(const sk_txidx *x, int64_t hw);
/* The first offset of pid's open transaction here, -1 when none. */
int64_t sk_txidx_open_first(const sk_txidx *x, int64_t pid);
/* The aborted transactions a read of [from, to) must know: those whose
 * marker is at or past `from` and whose first offset is below `to`. Fills
 * up to max, returns how many there are. */
int sk_txidx_aborted(const sk_txidx *x, int64_t from, int64_t to, sk_txidx_ent *out, int max);
/* Forgets aborted transactions wholly below log_start. */
void sk_txidx_trim(sk_txidx *x, int64_t log_start);
void sk_txidx_clear(sk_txidx *x);

#endif
