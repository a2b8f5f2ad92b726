/*
 * pstate: idempotent-producer checks, as a Kafka 4 broker makes them.
 *
 * Per partition and producer id Skiff keeps the producer epoch and the last
 * five batches (first/last sequence, offsets). A batch is a duplicate when
 * its epoch and sequence range match one of them; otherwise its sequence
 * must follow the newest (or start at 0 with a new epoch). A producer id
 * with no state accepts any sequence.
 *
 * Contract: pure functions on caller-owned state, any thread (the loop uses
 * them on produce; the SQLite thread to maintain the producers table).
 */
#ifndef PSTATE_H
#define PSTATE_H

#include "types.h"

enum { SK_PSTATE_APPEND = 0, SK_PSTATE_DUPLICATE = 1 };

/* Returns SK_PSTATE_APPEND, SK_PSTATE_DUPLICATE (with *dup set to the
 * original batch), SK_KAFKA_INVALID_PRODUCER_EPOCH or
 * SK_KAFKA_OUT_OF_ORDER_SEQUENCE_NUMBER. ps may be NULL (unknown producer). */
int sk_pstate_check(const sk_pstate *ps, int16_t epoch, int32_t first_seq, int32_t last_seq,
                    const sk_pbatch **dup);

/* Records an appended batch; a new epoch forgets the older batches. */
void sk_pstate_push(sk_pstate *ps, int16_t epoch, const sk_pbatch *pb);

const sk_pbatch *sk_pstate_newest(const sk_pstate *ps);

/* Last sequence of a batch: base + count - 1, wrapping past INT32_MAX. */
static inline int32_t sk_seq_add(int32_t seq, int32_t delta)
{
    int64_t s = (int64_t)seq + delta;
    if (s > INT32_MAX)
        s -= (int64_t)INT32_MAX + 1;
    return (int32_t)s;
}

#endif
