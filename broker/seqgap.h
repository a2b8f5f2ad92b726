/*
 * seqgap: the sequence gaps a main's links leave behind (docs/zones.md,
 * "Errors and retries").
 *
 * A batch of an idempotent producer that the main answers REQUEST_TIMED_OUT
 * without linking it (its confirm came after its deadline, the WAL pushed
 * back) leaves a gap in that producer's sequence. A client takes
 * REQUEST_TIMED_OUT as "possibly written", since a Kafka leader gives it only
 * after appending, and expects the batches it sent behind that one to follow
 * on: OUT_OF_ORDER_SEQUENCE for the next would read to it as a lost sync,
 * which librdkafka makes a fatal error. So a batch refused as out of order
 * that starts exactly where a gap ends is answered REQUEST_TIMED_OUT as well
 * (the gap then ends after it), and the client sends them all again from the
 * first. A batch of that producer linked closes its gap.
 *
 * A fixed number of gaps is remembered, the oldest forgotten first: a
 * forgotten gap only gives back Kafka's own answer, OUT_OF_ORDER_SEQUENCE.
 * Pure: no I/O, no clock. Thread: the caller's (the event loop).
 */
#ifndef SEQGAP_H
#define SEQGAP_H

#include <stdbool.h>
#include <stdint.h>

#include "kc.h"

#define SK_SEQGAPS 64

/* One producer's sequence on one partition, and where a batch would start
 * that follows on from the batches refused. */
typedef struct sk_seqgap {
    kc_uuid topic;
    int32_t part;
    int16_t producer_epoch;
    int64_t producer_id; /* -1: a free slot */
    int32_t next_seq;
} sk_seqgap;

typedef struct sk_seqgaps {
    sk_seqgap g[SK_SEQGAPS];
    int next; /* the slot a new gap takes */
} sk_seqgaps;

/* A batch as the gaps see it. */
typedef struct sk_seqbatch {
    kc_uuid topic;
    int32_t part;
    int64_t producer_id; /* < 0: not idempotent, never a gap */
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t last_offset_delta;
} sk_seqbatch;

void sk_seqgaps_init(sk_seqgaps *s);
/* b was answered REQUEST_TIMED_OUT and not linked. */
void sk_seqgap_note(sk_seqgaps *s, const sk_seqbatch *b);
/* Whether b, refused as out of order, starts where a gap ends. */
bool sk_seqgap_follows(const sk_seqgaps *s, const sk_seqbatch *b);
/* b was linked: its producer's sequence is whole again. */
void sk_seqgap_close(sk_seqgaps *s, const sk_seqbatch *b);

#endif
