/*
 * etcd: an asynchronous client of etcd's v3 JSON gateway (/v3/kv/range,
 * /v3/kv/put, /v3/kv/deleterange, /v3/kv/txn, /v3/lease/grant,
 * /v3/lease/keepalive, /v3/lease/revoke, /v3/watch), over libcurl, with JSON
 * encoded and parsed by jansson. Keys and values are byte strings (base64 on
 * the wire, never pasted into JSON text).
 *
 * Threads: one client thread runs a curl multi handle; the event loop never
 * blocks on etcd. Every call below is made on the loop thread, and every
 * callback runs later on the loop thread (never inside the call itself).
 * Results passed to callbacks are borrowed for the callback's duration.
 *
 * Endpoints: a comma-separated list of http://host:port. Each request goes to
 * the current endpoint; when it cannot connect, or the endpoint answers that
 * it has no leader or is not ready, the client moves to the next endpoint and
 * tries again, so that a member that is down or a leader election costs a
 * retry, not an error. A request that may have reached etcd and then failed
 * (a timeout, a broken connection after sending) is NOT retried: its callback
 * gets SK_ERR_TIMEOUT and the caller must treat it as "possibly applied"
 * (read back, or make the retry idempotent with a compare).
 * Ranges and keep-alives change nothing that a second copy would change
 * again, so they alone are tried again after such a failure, within their
 * timeout: measure a lease's deadline from the keep-alive call, not from
 * its callback. Requests ask etcd for a leader (the "hasleader" metadata,
 * as clientv3's WithRequireLeader): a member without one answers at once
 * and ends its watch streams, and the client moves on.
 *
 * Watches: a watch is a long-lived streaming request. The client resumes a
 * broken watch by itself, on the next endpoint, from the revision after the
 * last one it delivered, so the caller sees every event exactly once and in
 * order. When etcd has compacted that revision away, the watch ends with
 * SK_ERR_COMPACTED (the caller re-reads with a range and starts a new watch
 * from the range's revision + 1).
 *
 * Bounds: request bodies and responses are capped (etcd_opts.max_response);
 * a bigger response fails with SK_ERR_NOMEM. Requests wait in one queue
 * whose length is capped (SK_ERR_AGAIN beyond it).
 * max_queued counts unary requests, not watches; a body over
 * the cap is refused by the call itself. A watch message over the cap ends
 * the watch with SK_ERR_NOMEM (etcd sends a watch that catches up up to
 * 1000 revisions in one message). A watch whose caller's loop falls behind
 * stops reading its stream once a quarter of max_response bytes of events
 * wait for the loop, and reads on once they were delivered.
 *
 * Errors: SK_ERR_TIMEOUT (no answer within the request timeout: possibly
 * applied), SK_ERR_IO (no endpoint reachable, or an HTTP/gRPC error; the
 * message is logged), SK_ERR_COMPACTED (watch), SK_ERR_NOENT (lease not
 * found), SK_ERR_NOMEM, SK_ERR_AGAIN, SK_ERR_CLOSED (the client is being
 * destroyed: every pending callback runs with it).
 * a call either returns 0 and calls back exactly once, or
 * returns an error and never calls back; SK_ERR_INVAL for an empty key, a
 * NULL callback, an unknown compare or op. Result pointers passed to
 * callbacks are never NULL (an empty result with an error). A range at a
 * compacted revision fails with SK_ERR_COMPACTED; a put under a lease that
 * is gone, and a revoke of one, with SK_ERR_NOENT. The lease callback of a
 * failed keep-alive or revoke gets the id it asked about and TTL 0.
 */
#ifndef ETCD_H
#define ETCD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sk_err.h"

struct event_base;

typedef struct etcd etcd;
typedef struct etcd_watch etcd_watch;

typedef struct etcd_opts {
    int64_t request_timeout_ms; /* unary requests (0: 5000) */
    int64_t connect_timeout_ms; /* per endpoint (0: 1000) */
    size_t max_response;        /* bytes of one response or watch message (0: 8 MiB) */
    int max_queued;             /* requests waiting or in flight (0: 4096) */
    /* Byte accounting (NULL: none), called on the client's own thread, so
     * it only counts: bytes sent to (`out`) and received from (`in`) the
     * endpoint at index `endpoint` of the list given to etcd_new, HTTP
     * headers included, as each request attempt ends and as a watch's
     * stream arrives. */
    void (*account)(void *arg, int endpoint, uint64_t out, uint64_t in);
    void *account_arg;
} etcd_opts;

/* A key-value pair as etcd returns it. */
typedef struct etcd_kv {
    const uint8_t *key;
    size_t klen;
    const uint8_t *value;
    size_t vlen;
    int64_t create_revision, mod_revision, version, lease;
} etcd_kv;

/* NULL with a reason when the endpoint list is malformed. Connects lazily. */
etcd *etcd_new(struct event_base *base, const char *endpoints, const etcd_opts *o, char *why,
               size_t whylen);
/* Cancels every request and watch (their callbacks run with SK_ERR_CLOSED
 * before it returns) and frees the client. Loop thread, not from inside one
 * of this client's callbacks. */
void etcd_destroy(etcd *c);

/* The endpoint requests go to now (for logs and metrics). */
const char *etcd_endpoint(const etcd *c);

/* Statistics for metrics. */
typedef struct etcd_stats {
    uint64_t requests, errors, timeouts, endpoint_switches, watch_resumes;
    uint64_t latency_us_sum, latency_count; /* unary requests that got an answer */
    uint64_t watch_pauses; /* a watch stopped reading: its events waited for the loop */
} etcd_stats;
void etcd_get_stats(const etcd *c, etcd_stats *st);

/* ---- key-value ---- */

/* The end of the range of every key with prefix p (etcd's "prefix" rule:
 * the last byte below 0xff incremented, the rest cut), written to out (at
 * least plen bytes); returns its length (0 means "to the end of the key
 * space", written as a single NUL byte on the wire). */
size_t etcd_prefix_end(const uint8_t *p, size_t plen, uint8_t *out);

typedef struct etcd_range_result {
    int64_t revision; /* of the store when the range was served */
    const etcd_kv *kvs;
    size_t n;
    bool more;     /* the limit cut the answer */
    int64_t count; /* keys in the whole range */
} etcd_range_result;

typedef void (*etcd_range_cb)(void *arg, int err, const etcd_range_result *r);

/* Keys in [key, range_end) (range_end NULL: just key). limit 0: no limit.
 * revision 0: the newest. */
enum { ETCD_KEYS_ONLY = 1, ETCD_COUNT_ONLY = 2 };
int etcd_range(etcd *c, const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
               int64_t limit, int64_t revision, unsigned flags, etcd_range_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* ---- transactions ---- */

typedef enum { ETCD_CMP_EQUAL, ETCD_CMP_GREATER, ETCD_CMP_LESS, ETCD_CMP_NOT_EQUAL } etcd_cmp_result;
typedef enum {
    ETCD_TARGET_VERSION,
    ETCD_TARGET_CREATE,
    ETCD_TARGET_MOD,
    ETCD_TARGET_VALUE,
    ETCD_TARGET_LEASE
} etcd_cmp_target;

typedef struct etcd_cmp {
    const uint8_t *key;
    size_t klen;
    const uint8_t *range_end; /* NULL: just key */
    size_t relen;
    etcd_cmp_target target;
    etcd_cmp_result result;
    int64_t number;      /* VERSION, CREATE, MOD, LEASE */
    const uint8_t *value; /* VALUE */
    size_t vlen;
} etcd_cmp;

typedef enum { ETCD_OP_RANGE, ETCD_OP_PUT, ETCD_OP_DELETE } etcd_op_type;

typedef struct etcd_op {
    etcd_op_type type;
    const uint8_t *key;
    size_t klen;
    const uint8_t *range_end; /* RANGE, DELETE: NULL for just key */
    size_t relen;
    const uint8_t *value; /* PUT */
    size_t vlen;
    int64_t lease; /* PUT: 0 for none */
} etcd_op;

typedef struct etcd_op_result {
    etcd_op_type type;
    etcd_range_result range; /* RANGE */
    int64_t deleted;          /* DELETE */
} etcd_op_result;

typedef struct etcd_txn_result {
    bool succeeded; /* the compares held: the success ops ran */
    int64_t revision;
    const etcd_op_result *results; /* of the ops that ran, in order */
    size_t n;
} etcd_txn_result;

typedef void (*etcd_txn_cb)(void *arg, int err, const etcd_txn_result *r);

/* All compares hold -> the success ops, else the failure ops; atomically.
 * Everything is copied before the call returns. */
int etcd_txn(etcd *c, const etcd_cmp *cmps, size_t ncmp, const etcd_op *success, size_t nsuccess,
             const etcd_op *failure, size_t nfailure, etcd_txn_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* Shorthands: a transaction of one op without compares. */
int etcd_put(etcd *c, const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
             int64_t lease, etcd_txn_cb cb, void *arg) __attribute__((warn_unused_result));
int etcd_delete(etcd *c, const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
                etcd_txn_cb cb, void *arg) __attribute__((warn_unused_result));

/* ---- leases ---- */

/* ttl_s: seconds asked for; the callback gets the id and the TTL granted. */
typedef void (*etcd_lease_cb)(void *arg, int err, int64_t id, int64_t ttl_s);
int etcd_lease_grant(etcd *c, int64_t ttl_s, etcd_lease_cb cb, void *arg)
    __attribute__((warn_unused_result));
/* One keep-alive round trip. The callback gets the remaining TTL; a lease
 * that expired or was revoked is SK_ERR_NOENT. */
int etcd_lease_keepalive(etcd *c, int64_t id, etcd_lease_cb cb, void *arg)
    __attribute__((warn_unused_result));
int etcd_lease_revoke(etcd *c, int64_t id, etcd_lease_cb cb, void *arg)
    __attribute__((warn_unused_result));

/* ---- watches ---- */

typedef enum { ETCD_EV_PUT, ETCD_EV_DELETE } etcd_ev_type;

typedef struct etcd_event {
    etcd_ev_type type;
    etcd_kv kv; /* DELETE: key and mod_revision only */
} etcd_event;

/* Events come in revision order, in batches (err 0, n >= 1, revision = the
 * store's revision in that message). A progress notification (n == 0) may
 * come too. err != 0 ends the watch (SK_ERR_COMPACTED, SK_ERR_CLOSED); after
 * that callback the watch is gone and must not be cancelled. */
typedef void (*etcd_watch_cb)(void *arg, int err, int64_t revision, const etcd_event *evs,
                              size_t n);

/* Watches [key, range_end) from start_revision (0: from now on). NULL when
 * the client is closing, the key is empty or memory ran out. */
etcd_watch *etcd_watch_start(etcd *c, const uint8_t *key, size_t klen, const uint8_t *range_end,
                             size_t relen, int64_t start_revision, etcd_watch_cb cb, void *arg);
/* Ends a watch; its callback is not called again. */
void etcd_watch_cancel(etcd_watch *w);

#endif
