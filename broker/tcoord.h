/*
 * tcoord: the transaction coordinator (KIP-98) as a state machine, one
 * instance holding every transactional id the node coordinates.
 *
 * Per transactional id: the producer id and epoch (with the previous ones,
 * for KIP-360 retries), the transaction timeout, the state (Empty, Ongoing,
 * PrepareCommit, PrepareAbort, CompleteCommit, CompleteAbort), the
 * partitions and consumer groups of the open transaction and when it began.
 * The checks and error codes are those of Apache Kafka 4.3's coordinator
 * with transaction version 1 (what the Java 4.x client uses against a broker
 * that does not advertise transaction.version 2): PRODUCER_FENCED,
 * INVALID_PRODUCER_ID_MAPPING, CONCURRENT_TRANSACTIONS, INVALID_TXN_STATE,
 * INVALID_TRANSACTION_TIMEOUT.
 *
 * Every change goes through two steps, like Kafka's pending transitions: a
 * call that changes an id computes its next state and marks the id pending
 * (further calls on it answer CONCURRENT_TRANSACTIONS); the caller makes
 * the change durable (sk_tc_entry_of gives what to persist) and then calls
 * sk_tc_apply, or sk_tc_revert when the write failed. sk_tc_restore loads a
 * persisted entry at start-up.
 *
 * No I/O and no clock of its own: every call takes `now` (ms, wall clock,
 * since start times are persisted), and new producer ids are handed in by the
 * caller, so unit tests drive it with fake time and fake ids.
 *
 * Thread: single-threaded (the event loop). Strings passed in are copied.
 * Errors are Kafka codes (sk_err.h); 0 is success.
 */
#ifndef TCOORD_H
#define TCOORD_H

#include <stdbool.h>
#include <stdint.h>

typedef struct sk_tc sk_tc;

typedef enum sk_tc_state {
    SK_TC_EMPTY,
    SK_TC_ONGOING,
    SK_TC_PREPARE_COMMIT,
    SK_TC_PREPARE_ABORT,
    SK_TC_COMPLETE_COMMIT,
    SK_TC_COMPLETE_ABORT,
} sk_tc_state;

const char *sk_tc_state_name(sk_tc_state s);

typedef struct sk_tc_part {
    char *topic;
    int32_t partition;
} sk_tc_part;

/* One transactional id's state: what a record persists. */
typedef struct sk_tc_entry {
    char *txn_id;
    int64_t producer_id, last_producer_id;
    int16_t producer_epoch, last_producer_epoch;
    int32_t timeout_ms;
    sk_tc_state state;
    int64_t start_ms;  /* when the open transaction began; -1: none */
    int64_t update_ms; /* last change */
    int nparts;
    sk_tc_part *parts;
    int ngroups;
    char **groups;
} sk_tc_entry;

typedef struct sk_tc_config {
    int32_t max_timeout_ms; /* transaction.max.timeout.ms */
} sk_tc_config;

sk_tc *sk_tc_new(const sk_tc_config *cfg);
void sk_tc_free(sk_tc *tc);

/* The current (applied) state of an id, NULL when unknown. Valid until the
 * next call that changes tc. */
const sk_tc_entry *sk_tc_get(const sk_tc *tc, const char *txn_id);
/* The state an id moves to (its pending change), NULL when none. */
const sk_tc_entry *sk_tc_pending(const sk_tc *tc, const char *txn_id);
bool sk_tc_is_pending(const sk_tc *tc, const char *txn_id);

/* Makes the pending change of txn_id current (0), or drops it (revert). */
int sk_tc_apply(sk_tc *tc, const char *txn_id) __attribute__((warn_unused_result));
void sk_tc_revert(sk_tc *tc, const char *txn_id);
/* Drops every state of an id (its coordination moved to another node). */
void sk_tc_forget(sk_tc *tc, const char *txn_id);
/* Loads a persisted entry (start-up): replaces any state of that id. */
int sk_tc_restore(sk_tc *tc, const sk_tc_entry *e) __attribute__((warn_unused_result));

typedef struct sk_tc_init_args {
    const char *txn_id;
    int32_t timeout_ms;
    int64_t expected_pid; /* -1: none (a new producer) */
    int16_t expected_epoch;
    int64_t fresh_pid; /* a never-used id, taken when one is needed */
} sk_tc_init_args;

typedef struct sk_tc_init_result {
    int16_t error;
    int64_t producer_id;
    int16_t producer_epoch;
    bool fresh_pid_used;
    /* Set when the call started aborting an open transaction (an init
     * while Ongoing): the caller must finish that abort (markers, then
     * sk_tc_complete) and the client retries. */
    bool aborting;
} sk_tc_init_result;

/* InitProducerId with a transactional id. On success with a pending change
 * the answer is sent once it is durable. */
void sk_tc_init_pid(sk_tc *tc, const sk_tc_init_args *a, int64_t now, sk_tc_init_result *res);

/* AddPartitionsToTxn (v3 and below): the whole request gets one error. */
int sk_tc_add_partitions(sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch, int n,
                         const sk_tc_part *parts, int64_t now)
    __attribute__((warn_unused_result));
/* AddOffsetsToTxn: the group's offsets join the transaction. */
int sk_tc_add_group(sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                    const char *group, int64_t now) __attribute__((warn_unused_result));
/* The checks a TxnOffsetCommit or a transactional Produce pass: the id is
 * known, the producer matches and the partition / group is in the open
 * transaction. */
int sk_tc_check_part(const sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                     const char *topic, int32_t partition) __attribute__((warn_unused_result));
int sk_tc_check_group(const sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                      const char *group) __attribute__((warn_unused_result));

/* EndTxn. On success *markers tells whether markers must be written (a
 * Prepare state is pending); false for an idempotent retry of a finished
 * transaction (nothing pending, answer at once). */
int sk_tc_end(sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch, bool commit,
              int64_t now, bool *markers) __attribute__((warn_unused_result));
/* After the markers are durable: PrepareX -> CompleteX (pending). */
int sk_tc_complete(sk_tc *tc, const char *txn_id, int64_t now)
    __attribute__((warn_unused_result));

/* Ids whose open transaction passed its timeout (up to max), applied and not
 * pending; then sk_tc_abort_expired fences the epoch and moves one to
 * PrepareAbort (pending), as Kafka's coordinator does. */
int sk_tc_expired(const sk_tc *tc, int64_t now, const char **ids, int max);
int sk_tc_abort_expired(sk_tc *tc, const char *txn_id, int64_t now)
    __attribute__((warn_unused_result));

/* Ids with no open transaction (Empty, CompleteCommit, CompleteAbort), not
 * pending, last changed at least idle_ms before now (up to max):
 * transactional.id.expiration.ms. */
int sk_tc_idle(const sk_tc *tc, int64_t now, int64_t idle_ms, const char **ids, int max);

/* Every id, applied state (listing, snapshots). */
int sk_tc_count(const sk_tc *tc);
const sk_tc_entry *sk_tc_at(const sk_tc *tc, int i);

/* Copies: entries handed out are owned by tc; these make independent ones. */
int sk_tc_entry_copy(sk_tc_entry *dst, const sk_tc_entry *src)
    __attribute__((warn_unused_result));
void sk_tc_entry_clear(sk_tc_entry *e);

#endif
