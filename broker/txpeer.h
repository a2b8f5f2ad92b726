/*
 * txpeer: transactions across the nodes of a cluster (docs/transactions.md,
 * "In a cluster"). The coordinator of a transactional id is the main of its
 * partition of __consumer_offsets; what it cannot do on its own partitions
 * goes through this module:
 *
 *  - markers: the TxnMarkers RPC asks the main of a partition to append a
 *    commit or abort marker (and, for a group's offsets partition, to commit
 *    the transaction's offsets of that group) and answers once durable. A
 *    marker applied twice is harmless (txidx.h: readers take the first), so
 *    a timed-out call is simply sent again by the coordinator's tick;
 *  - offsets of a transaction a group's coordinator handed to the
 *    transaction's coordinator: remembered (in memory) until the marker
 *    RPC of that producer comes (commit: with the offsets; abort: without),
 *    so that RequireStable waits for them;
 *  - verification (KIP-890 part 1): a main that takes a transactional batch
 *    for a transaction coordinated elsewhere asks the coordinator
 *    (AddPartitionsToTxn v4, VerifyOnly) whether the partition is in the
 *    producer's open transaction, and caches the answer per producer id,
 *    epoch and partition until a marker of that producer arrives.
 *
 * Thread: the event loop. Errors: SK_ERR_* (sk_err.h) or Kafka codes.
 */
#ifndef TXPEER_H
#define TXPEER_H

#include <stdbool.h>
#include <stdint.h>

#include "dispatch.h"
#include "kmsg.h"
#include "node.h"
#include "tcoord.h"
#include "txns.h"
#include "types.h"

typedef struct sk_txpeer sk_txpeer;

sk_txpeer *sk_txpeer_new(void);
/* The node's (held by its sk_txns). */
sk_txpeer *sk_txns_peer(sk_txns *tx);
void sk_txpeer_free(sk_txpeer *tp);

/* Coordinator: the marker of e's producer (commit or abort) on p, served by
 * another node; with `group`, the offsets of that group among offs instead
 * (p: the group's partition of __consumer_offsets). fn once the main
 * answered: 0, or CONCURRENT_TRANSACTIONS when the call failed (the Prepare
 * state stays, and the tick sends it again). */
int sk_txpeer_markers(sk_node *n, const sk_tc_entry *e, bool commit, sk_part *p,
                      const char *group, int noffs, const sk_txoff *offs, sk_durable_fn fn,
                      void *arg) __attribute__((warn_unused_result));

/* Main: whether partition (topic, part) is verified in the open transaction
 * of txn_id with producer pid/epoch. 0: yes; a Kafka code: the
 * coordinator's refusal (answered once); SK_ERR_AGAIN: being asked (the
 * producer retries). */
int sk_txpeer_verify(sk_node *n, const char *txn_id, int64_t pid, int16_t epoch,
                     const char *topic, int32_t part) __attribute__((warn_unused_result));

/* Group coordinator: the offsets of req were handed to the transaction's
 * coordinator; until a marker of that producer arrives (or
 * transaction.max.timeout.ms and a minute pass), sk_txpeer_offset_pending
 * says they wait. Kept in memory only: a hint for RequireStable. */
void sk_txpeer_offsets_handed(sk_node *n, const kp_TxnOffsetCommitRequest *req);
bool sk_txpeer_offset_pending(sk_txpeer *tp, const char *group, size_t glen, const char *topic,
                              size_t tlen, int32_t part);

/* The TxnMarkers RPC (h_rpc's table). */
void h_txn_markers(sk_req *r);

#endif
