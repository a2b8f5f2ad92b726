/*
 * txns: the node's transaction coordinator (docs/transactions.md): the
 * tcoord state machine, made durable, plus what it does to partitions and
 * groups. In a cluster, a node coordinates the ids that hash to the
 * partitions of __consumer_offsets it serves (as for groups), and their
 * state moves with those partitions (hstate.h).
 *
 * Every change of a transactional id's state is a SK_META_TXN WAL record
 * holding its whole state (and the offsets TxnOffsetCommit gave the open
 * transaction), applied in memory once durable; the SQLite view keeps the
 * last record of each id in the transactions table and every WAL segment's
 * snapshot carries them all (SK_SNAP_TXNS), so a restart restores them.
 *
 * Record body: str txn id | u64 producer id | u16 epoch | u64 last producer
 *   id | u16 last epoch | u32 timeout ms | u8 state | u64 start ms | u64
 *   update ms | u32 n × (str topic, u32 partition) | u32 n × str group |
 *   u32 n × (str group, str topic, u32 partition, u64 offset, u32 leader
 *   epoch, str metadata)
 *
 * Ending a transaction (EndTxn, a timeout, or an InitProducerId that fences
 * an open one): the Prepare state is made durable, a control batch (commit
 * or abort marker) is appended to every partition of the transaction and,
 * on commit, the transaction's offsets are committed to their groups; once
 * all of it is durable the Complete state is written, and only then is the
 * client answered. A restart in a Prepare state finishes the job.
 *
 * Thread: the event loop (the record codec: any).
 */
#ifndef TXNS_H
#define TXNS_H

#include <stdbool.h>
#include <stdint.h>

#include "sk_buf.h"
#include "tcoord.h"
#include "node.h"
#include "types.h"

typedef struct sk_txns sk_txns;

/* An offset TxnOffsetCommit gave an open transaction. */
typedef struct sk_txoff {
    char *group, *topic, *meta;
    int32_t part, leader_epoch;
    int64_t offset;
} sk_txoff;

sk_txns *sk_txns_new(sk_node *n);
void sk_txns_destroy(sk_txns *tx);
sk_tc *sk_txns_tc(sk_txns *tx);

/* Applies a record body (start-up loading). */
int sk_txns_load(sk_txns *tx, const uint8_t *body, size_t len) __attribute__((warn_unused_result));
/* Writes the snapshot's sections: returns how many. */
uint32_t sk_txns_snapshot(const sk_txns *tx, sk_buf *b);
/* After loading: finishes transactions a crash left in a Prepare state. */
void sk_txns_recover(sk_txns *tx);

/* A cluster: forgets the ids `in` picks, whose coordination left with a
 * partition of __consumer_offsets (their state is in the HANDOFF record);
 * sk_txns_load takes them in on the adopter, whose tick finishes what a
 * Prepare state left. */
void sk_txns_release(sk_txns *tx, bool (*in)(void *arg, const char *id, size_t len), void *arg);

/* Makes the pending change of txn_id durable, then applies it (or reverts
 * it on error) and calls fn. Nonzero: nothing written (reverted). */
typedef void (*sk_txns_done_fn)(void *arg, int err);
int sk_txns_persist(sk_txns *tx, const char *txn_id, sk_txns_done_fn fn, void *arg)
    __attribute__((warn_unused_result));

/* Writes the markers of txn_id (applied in a Prepare state), commits its
 * offsets, completes it, then calls fn (may be NULL). */
int sk_txns_finish(sk_txns *tx, const char *txn_id, sk_txns_done_fn fn, void *arg)
    __attribute__((warn_unused_result));

/* TxnOffsetCommit: adds offsets to the open transaction (already checked)
 * durably, then fn. */
int sk_txns_add_offsets(sk_txns *tx, const char *txn_id, int n, const sk_txoff *offs,
                        sk_txns_done_fn fn, void *arg) __attribute__((warn_unused_result));

/* A control batch (commit or abort marker) of producer pid/epoch appended to
 * p, which this node serves; fn once durable. */
int sk_txns_append_marker(sk_node *n, sk_part *p, int64_t pid, int16_t epoch, bool commit,
                          sk_durable_fn fn, void *arg) __attribute__((warn_unused_result));
/* Commits the offsets of `group` among offs (an OffsetCommit record); fn
 * once durable. SK_ERR_NOENT (fn not called): none of that group. */
int sk_txns_commit_offsets(sk_node *n, const char *group, int noffs, const sk_txoff *offs,
                           sk_durable_fn fn, void *arg) __attribute__((warn_unused_result));

/* Whether an open transaction holds an offset of (group, topic, part) not
 * yet committed: OffsetFetch with RequireStable answers UNSTABLE_OFFSET_COMMIT. */
bool sk_txns_offset_pending(const sk_txns *tx, const char *group, size_t glen,
                            const char *topic, size_t tlen, int32_t part);

/* Record codec. */
void sk_txrec_put(sk_buf *b, const sk_tc_entry *e, int noffs, const sk_txoff *offs);
/* Fills e (owned: sk_tc_entry_clear) and offs (owned: sk_txoffs_free). */
int sk_txrec_get(const uint8_t *p, size_t n, sk_tc_entry *e, int *noffs, sk_txoff **offs)
    __attribute__((warn_unused_result));
void sk_txoffs_free(int n, sk_txoff *offs);

#endif
