/*
 * fsession: the fetch session cache of KIP-227 (incremental fetch), as a
 * pure state machine.
 *
 * A session remembers, per partition a consumer fetches, what it asked
 * (fetch offset, max bytes, epochs) and what it was last answered (high
 * watermark, log start offset), so that later requests name only what
 * changed and answers carry only partitions with news. Sessions are kept in
 * the order Kafka keeps them: a partition that returned records moves to the
 * end, so the next fetch starts with the others.
 *
 * Eviction follows Kafka's FetchSessionCache: with every slot taken, a new
 * session replaces the least recently used one if it has been idle longer
 * than `eviction_ms`; otherwise the smallest (fewest partitions) session
 * that was already older than `eviction_ms` at its last use, if it is
 * smaller than the new one (followers, "privileged", outrank consumers).
 *
 * No I/O and no clock of its own: every call that needs time takes `now`
 * (monotonic ms). Thread: single-threaded (the event loop's). Topic names
 * passed in are copied. Errors are Kafka codes (sk_err.h) or SK_ERR_NOMEM
 * (an allocation, or the caps: SK_FS_MAX_PARTS partitions in a session,
 * SK_FS_MAX_CACHED in the whole cache, topic names up to 1024 bytes).
 */
#ifndef FSESSION_H
#define FSESSION_H

#include <stdbool.h>
#include <stdint.h>

#include "kc.h"

#define SK_FS_MAX_PARTS 100000 /* partitions in one session */
#define SK_FS_MAX_CACHED 1000000 /* partitions in all sessions of the cache */
#define SK_FS_EVICTION_MS 120000 /* Kafka's MIN_INCREMENTAL_FETCH_SESSION_EVICTION_MS */

typedef struct sk_fs_cache sk_fs_cache;
typedef struct sk_fs_session sk_fs_session;

/* A partition: by topic name (Fetch v7-12) or by topic id (v13+). */
typedef struct sk_fs_key {
    kc_str topic;
    kc_uuid topic_id;
    int32_t partition;
} sk_fs_key;

/* What the client asks of one partition. */
typedef struct sk_fs_params {
    int64_t fetch_offset, log_start_offset;
    int32_t max_bytes, leader_epoch, last_fetched_epoch;
} sk_fs_params;

/* A cached partition, in the session's order (next is NULL at the end). */
typedef struct sk_fs_part {
    sk_fs_key key; /* the topic name is the cache's copy */
    sk_fs_params req;
    int64_t hw, log_start; /* as last answered; hw -1 after an error */
    struct sk_fs_part *prev, *next;
} sk_fs_part;

/* What one partition of a response carries, for the news test. */
typedef struct sk_fs_answer {
    int64_t hw, log_start;
    int16_t error;
    bool records;   /* at least one byte of records */
    bool must_send; /* something else the client needs (preferred replica, diverging epoch) */
} sk_fs_answer;

sk_fs_cache *sk_fs_new(int32_t slots, int64_t eviction_ms, uint64_t seed);
void sk_fs_destroy(sk_fs_cache *c);
int32_t sk_fs_count(const sk_fs_cache *c);
int64_t sk_fs_partitions(const sk_fs_cache *c);
uint64_t sk_fs_evictions(const sk_fs_cache *c);
uint64_t sk_fs_created(const sk_fs_cache *c);

/* Full fetch (epoch 0): a new empty session of `size` partitions to come,
 * with epoch 1, or NULL when the cache has no room (even after eviction) or
 * no memory: the answer is then sessionless (session id 0). */
sk_fs_session *sk_fs_create(sk_fs_cache *c, int64_t now, bool privileged, bool uses_ids,
                            int32_t size);

/* Incremental fetch (epoch > 0): the session, or FETCH_SESSION_ID_NOT_FOUND,
 * INVALID_FETCH_SESSION_EPOCH, FETCH_SESSION_TOPIC_ID_ERROR. */
int sk_fs_get(sk_fs_cache *c, int32_t id, int32_t epoch, bool uses_ids, sk_fs_session **out)
    __attribute__((warn_unused_result));

/* The session `id` whatever its epoch, or NULL. */
sk_fs_session *sk_fs_find(sk_fs_cache *c, int32_t id);

/* Adds a partition at the end or updates its request parameters in place;
 * `hw` and `log_start` are stored only for a new partition (-1: none yet).
 * Returns 0 or SK_ERR_NOMEM. */
int sk_fs_put(sk_fs_session *s, const sk_fs_key *k, const sk_fs_params *p, int64_t hw,
              int64_t log_start) __attribute__((warn_unused_result));

/* ForgottenTopicsData: drops a partition if the session has it. */
void sk_fs_forget(sk_fs_session *s, const sk_fs_key *k);

/* After an incremental request's puts and forgets: a session left empty is
 * removed (false: serve the request sessionless, as Kafka does); otherwise it
 * is marked used at `now`, its epoch advances, and true is returned. */
bool sk_fs_commit(sk_fs_cache *c, sk_fs_session *s, int64_t now);

/* Removes a session (a full fetch naming it, or epoch -1); false if absent. */
bool sk_fs_remove(sk_fs_cache *c, int32_t id);

int32_t sk_fs_id(const sk_fs_session *s);
int32_t sk_fs_epoch(const sk_fs_session *s); /* the epoch the next request must carry */
int32_t sk_fs_size(const sk_fs_session *s);
sk_fs_part *sk_fs_first(sk_fs_session *s);
sk_fs_part *sk_fs_lookup(sk_fs_session *s, const sk_fs_key *k);

/* Incremental answer: whether partition `p` must be in the response, as
 * Kafka decides (records, a changed high watermark or log start offset, an
 * error, ...). Records what was answered and moves a partition that
 * returned records to the end of the session. */
bool sk_fs_answered(sk_fs_session *s, sk_fs_part *p, const sk_fs_answer *a);

#endif
