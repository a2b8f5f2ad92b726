/*
 * peer: the outbound side of Skiff's node-to-node RPCs.
 *
 * The RPCs are declared in proto/rpc/*.json (Kafka's message-spec format,
 * API keys from 10000) and generated into proto/krpc.{h,c}; they travel in
 * Kafka's framing (size, request header v2, body) to the peer's
 * inter-broker listener, where the broker's dispatch table serves them
 * (without advertising them in ApiVersions).
 *
 * An rpc_client keeps one connection per peer node, each in one of the
 * states below, and moves between them only as drawn:
 *
 *     IDLE --call--> CONNECTING --connected--> READY
 *                        |                       |
 *                        +--failed--> BACKOFF <--+ (error, EOF, bad frame)
 *                                       |
 *                        CONNECTING <---+ (after the delay, if calls wait)
 *
 * A peer whose address changes (it restarted elsewhere) or that is removed
 * goes back to IDLE (or is freed), failing what it had in flight.
 *
 * Calls: rpc_call encodes the request at once (the caller's struct is not
 * kept), queues it until the connection is READY, and matches the response
 * by correlation id. The callback runs exactly once, on the loop thread,
 * never inside rpc_call itself:
 *  - err 0: resp is the decoded response body (borrowed for the callback,
 *    allocated in an arena freed after it);
 *  - SK_ERR_TIMEOUT: no response within timeout_ms, or the connection broke
 *    after the request was written. The peer may have applied it: a retry
 *    must be idempotent;
 *  - SK_ERR_IO: the request was never written (no connection within the
 *    timeout, peer unknown or removed); it was not applied;
 *  - SK_ERR_AGAIN: the peer's queue is full (max_queued_bytes); not applied;
 *  - SK_ERR_PARSE: the response could not be decoded (the connection is
 *    dropped);
 *  - SK_ERR_CLOSED: the client is being destroyed.
 *
 * Bounds: at most max_queued_bytes of encoded requests wait per peer, and at
 * most max_response bytes are accepted for one response frame (a larger
 * size prefix drops the connection).
 *
 * Thread: the event loop only. Destroy from outside the client's callbacks.
 */
#ifndef PEER_H
#define PEER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kc.h"

struct event_base;

typedef struct rpc_client rpc_client;

typedef enum {
    RPC_PEER_IDLE,
    RPC_PEER_CONNECTING,
    RPC_PEER_READY,
    RPC_PEER_BACKOFF
} rpc_peer_state;

typedef struct rpc_opts {
    int32_t self_id;           /* sent as client id "skiff-node-<id>" */
    int64_t connect_timeout_ms; /* 0: 2000 */
    int64_t backoff_min_ms;     /* 0: 50 */
    int64_t backoff_max_ms;     /* 0: 2000 */
    size_t max_queued_bytes;    /* per peer (0: 16 MiB) */
    size_t max_response;        /* bytes of one response frame (0: 64 MiB) */
} rpc_opts;

rpc_client *rpc_client_new(struct event_base *base, const rpc_opts *o);
/* Fails every call in flight (SK_ERR_CLOSED) and frees everything. */
void rpc_client_destroy(rpc_client *c);

/* Sets or changes the address of a peer node. A changed address closes the
 * old connection (its calls fail as described above). */
int rpc_peer_set(rpc_client *c, int32_t node, const char *host, int port)
    __attribute__((warn_unused_result));
/* Forgets a peer: its calls fail (SK_ERR_IO if unsent, SK_ERR_TIMEOUT if sent). */
void rpc_peer_remove(rpc_client *c, int32_t node);
rpc_peer_state rpc_peer_get_state(const rpc_client *c, int32_t node);

typedef void (*rpc_cb)(void *arg, int err, const void *resp);

/* Sends request `req` (a struct of the API's generated request type) with API
 * `key` at `version` to `node`. Returns 0 (cb will run) or an error (cb will
 * not run): SK_ERR_INVAL for an unknown API or version, SK_ERR_NOMEM. */
int rpc_call(rpc_client *c, int32_t node, int16_t key, int16_t version, const void *req,
             int64_t timeout_ms, rpc_cb cb, void *arg) __attribute__((warn_unused_result));

typedef struct rpc_stats {
    uint64_t calls, errors, timeouts, connects, connect_failures;
    uint64_t bytes_out, bytes_in;
} rpc_stats;
void rpc_get_stats(const rpc_client *c, rpc_stats *st);

#endif
