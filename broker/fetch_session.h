/*
 * fetch_session: the Fetch handler's session stages (KIP-227, Fetch v7+),
 * over the node's session cache (fsession.h, n->fsessions).
 *
 * Parse stage (sk_fetch_session_open, before the fetch is evaluated): a full
 * request (epoch 0) closes the session it names and asks for a new one at
 * the answer; epoch -1 closes it and is served without one; an incremental
 * request updates its session (added and updated partitions, forgotten
 * ones) and is rewritten in place to list every partition of the session,
 * in the session's order, so that the fetch itself knows nothing of
 * sessions.
 *
 * Build stage (sk_fetch_session_answer, just before the answer is sent): a
 * full fetch creates the session from what it answered; an incremental one
 * keeps only the partitions with news (records, a changed high watermark or
 * log start offset, an error).
 *
 * Thread: the event loop. The rewritten request lives in the arena given to
 * open, which must outlive the request. Errors are Kafka codes, answered as
 * Kafka does: top-level, session id 0, no partitions.
 */
#ifndef FETCH_SESSION_H
#define FETCH_SESSION_H

#include <stdint.h>

#include "sk_arena.h"
#include "types.h"

enum { SK_FETCH_SESSIONLESS, SK_FETCH_FULL, SK_FETCH_INCREMENTAL };

typedef struct sk_fetch_session {
    int kind;
    int32_t id, epoch; /* incremental: the session and the epoch it moved to */
} sk_fetch_session;

int sk_fetch_session_open(sk_req *r, sk_arena *keep, sk_fetch_session *fs)
    __attribute__((warn_unused_result));
void sk_fetch_session_answer(sk_req *r, const sk_fetch_session *fs);

/* The node's cache, made at first use; NULL without memory. */
struct sk_fs_cache *sk_fetch_sessions(sk_node *n);

#endif
