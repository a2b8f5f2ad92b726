/*
 * confirm: the proxy's side of the confirm RPC (docs/zones.md, "Proxy
 * produce").
 *
 * Once a batch is durable in the proxy's payload log, the proxy tells the
 * partition's main where it is: about a hundred bytes per batch, never the
 * batch. Batches for one main wait in its queue until the queue's linger
 * ends (linger_us, ~100 µs) or it holds max_batches; then one
 * ConfirmRequest carries them all. Each batch's callback runs exactly once,
 * on the loop, never inside cf_send:
 *  - err 0: the main answered; a->error is its Kafka code for the batch (0:
 *    linked and durable, with its offsets);
 *  - SK_ERR_TIMEOUT: no answer before the batch's deadline. The main may
 *    have linked it;
 *  - SK_ERR_IO: the main was not reached, or the connection broke before
 *    the request was written: it did not link the batch;
 *  - SK_ERR_CLOSED: the client is being destroyed.
 * A request that may have been applied (the RPC timed out, or broke after
 * it was written) is sent again unchanged while its batches' deadlines
 * allow: the main answers a batch it already linked (same payload log and
 * position) with its first answer, so the retry is idempotent.
 *
 * Thread: the event loop.
 */
#ifndef CONFIRM_H
#define CONFIRM_H

#include <stdint.h>

#include "kc.h"
#include "peer.h"

typedef struct cf_client cf_client;

/* What the main needs to know of a batch before it reads it. */
typedef struct cf_batch {
    kc_uuid topic;
    int32_t part;
    int32_t epoch; /* the partition's epoch as the proxy knows it */
    int64_t lsn;   /* of the PAYLOAD record */
    int32_t len;
    uint32_t crc;
    int64_t producer_id;
    int16_t producer_epoch;
    int32_t base_sequence;
    int32_t last_offset_delta;
    int64_t max_timestamp;
    int64_t deadline_ms; /* wall clock: the main links it only before this */
} cf_batch;

typedef struct cf_answer {
    int16_t error;       /* Kafka code */
    const char *message; /* NULL, or valid during the callback */
    int64_t base_offset;
    int64_t log_append_time;
    int64_t log_start;
    /* The etcd revision from which the main's payref on this payload log
     * is there to be seen (the same for every batch of one answer). */
    int64_t payref_revision;
} cf_answer;

typedef void (*cf_fn)(void *arg, int err, const cf_answer *a);

typedef struct cf_opts {
    int32_t self;        /* this node's id */
    int64_t payload_log; /* this node's payload log */
    int64_t linger_us;   /* 0: 100 */
    int max_batches;     /* per request (0: 512) */
} cf_opts;

typedef struct cf_stats {
    uint64_t requests, batches, retries, timeouts, unreached;
    uint64_t linked;   /* answered 0 */
    uint64_t refused;  /* answered with an error code */
} cf_stats;

/* rpc is borrowed (it outlives the client). NULL when out of memory. */
cf_client *cf_new(struct event_base *base, rpc_client *rpc, const cf_opts *o);
/* Fails what waits with SK_ERR_CLOSED, then frees. The RPC client is
 * destroyed first: the calls in flight end there (SK_ERR_CLOSED). */
void cf_destroy(cf_client *c);

/* Queues b for `main` until deadline_us (sk_mono_us clock). Returns 0 (fn
 * will run) or SK_ERR_NOMEM (it will not). */
int cf_send(cf_client *c, int32_t main, const cf_batch *b, int64_t deadline_us, cf_fn fn,
            void *arg) __attribute__((warn_unused_result));

void cf_get_stats(const cf_client *c, cf_stats *st);

#endif
