/*
 * peer: the outbound side of Skiff's node-to-node RPCs.
 *
 * The RPCs are declared in the JSON specs of proto/rpc (Kafka's message-spec
 * format, API keys from 10000) and generated into proto/krpc.{h,c}; they
 * travel in Kafka's framing (size, request header v2, body) to the peer's
 * inter-broker listener, where the broker's dispatch table serves them
 * (without advertising them in ApiVersions). Responses: size, response
 * header v1 (v0 for a version that is not flexible), body.
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
 * Connecting: a numeric address is connected to at once; a host name is
 * resolved asynchronously (evdns; its first address is tried). A connection
 * attempt lasts at most connect_timeout_ms. The delays of BACKOFF double from
 * backoff_min_ms up to backoff_max_ms (less up to a quarter, so that nodes do
 * not reconnect in step) and start again from the minimum once READY. When a
 * delay ends with no call waiting, the peer stays in BACKOFF with its delay
 * over, and the next call connects at once. Nothing closes an idle READY
 * connection but the peer itself.
 *
 * TLS (rpc_client_set_tls): connections are TLS ones, CONNECTING until the
 * handshake is over; the node's own certificate in the context is its
 * identity (mutual TLS) and the peer's certificate is checked by the
 * context's verification (and, with check_host, against the address
 * dialled). A failed handshake is a failed connection (BACKOFF), logged
 * with OpenSSL's reason.
 *
 * Calls: rpc_call encodes the request at once (the caller's struct is not
 * kept), queues it until the connection is READY, and matches the response
 * by correlation id. The callback runs exactly once, on the loop thread,
 * never inside rpc_call itself:
 *  - err 0: resp is the decoded response body (borrowed for the callback,
 *    allocated in an arena freed after it);
 *  - SK_ERR_TIMEOUT: no response within timeout_ms, or the connection broke
 *    after the request was written. The peer may have applied it: a retry
 *    must be idempotent. ("Written" means handed to the connection: a request
 *    still in its output buffer when it breaks counts as possibly applied.) A
 *    call's timeout does not close the connection; a response arriving after
 *    it is discarded;
 *  - SK_ERR_IO: the request was never written (no connection within the
 *    timeout, peer unknown or removed); it was not applied;
 *  - SK_ERR_AGAIN: the peer's queue is full (max_queued_bytes); not applied;
 *  - SK_ERR_PARSE: the response could not be decoded, or its frame was
 *    malformed or larger than max_response (the connection is dropped). The
 *    peer did get the request. When a bad frame cannot be matched to a call,
 *    every call written on the connection fails so; otherwise the others that
 *    were written fail with SK_ERR_TIMEOUT;
 *  - SK_ERR_CLOSED: the client is being destroyed (calls whose outcome was
 *    already known when rpc_client_destroy began get that outcome instead).
 * Callbacks run from an event of their own, never inside a connection's
 * callbacks, so they may call rpc_call, rpc_peer_set and rpc_peer_remove.
 *
 * Bounds: at most max_queued_bytes of encoded requests wait per peer (not
 * yet written, or written but still in the connection's output buffer), and
 * at most max_response bytes are accepted for one response frame (a larger
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
struct ssl_ctx_st;

typedef struct rpc_client rpc_client;

/* The client id of every request, followed by the sender's node id: how a
 * node tells another node's connection from a client's. */
#define RPC_CLIENT_ID_PREFIX "skiff-node-"

typedef enum {
    RPC_PEER_IDLE,
    RPC_PEER_CONNECTING,
    RPC_PEER_READY,
    RPC_PEER_BACKOFF
} rpc_peer_state;

typedef struct rpc_opts {
    int32_t self_id;           /* sent as client id RPC_CLIENT_ID_PREFIX "<id>" */
    int64_t connect_timeout_ms; /* 0: 2000 */
    int64_t backoff_min_ms;     /* 0: 50 */
    int64_t backoff_max_ms;     /* 0: 2000 */
    size_t max_queued_bytes;    /* per peer (0: 16 MiB) */
    size_t max_response;        /* bytes of one response frame (0: 64 MiB) */
    /* Name servers for host names, "ip[:port],..." (copied), instead of
     * those of /etc/resolv.conf (NULL). /etc/hosts is read either way. */
    const char *nameservers;
    /* Byte accounting (NULL: none): called on the loop thread from inside
     * the client's own callbacks, so it only counts and never calls into
     * the client. `out` bytes of one request frame to `node`
     * handed to its connection, or `in` bytes of one response frame read
     * from it (key -1 when no call waits for it any more); frames with
     * their size prefix, `key` the call's API key. */
    void (*account)(void *arg, int32_t node, int16_t key, size_t out, size_t in);
    void *account_arg;
} rpc_opts;

/* NULL when out of memory, or when nameservers is not a list of addresses. */
rpc_client *rpc_client_new(struct event_base *base, const rpc_opts *o);
/* Fails every call in flight (SK_ERR_CLOSED) and frees everything, but for
 * a name lookup in flight: evdns completes its cancellation, and the
 * resolver is freed, on a later pass of the loop (run it once more before
 * freeing the event base). */
void rpc_client_destroy(rpc_client *c);

/* Connections made from now on use TLS with ctx, a client context (the
 * client keeps a reference; NULL: plaintext again); open ones keep theirs. */
void rpc_client_set_tls(rpc_client *c, struct ssl_ctx_st *ctx, bool check_host);

/* Sets or changes the address of a peer node. A changed address closes the
 * old connection (its calls fail as described above: SK_ERR_IO if unsent,
 * SK_ERR_TIMEOUT if sent) and the peer goes back to IDLE. The same address
 * again changes nothing. Returns 0, SK_ERR_INVAL (no host, a port outside
 * 1-65535), SK_ERR_NOMEM, or SK_ERR_CLOSED while the client is destroyed. */
int rpc_peer_set(rpc_client *c, int32_t node, const char *host, int port)
    __attribute__((warn_unused_result));
/* Forgets a peer: its calls fail (SK_ERR_IO if unsent, SK_ERR_TIMEOUT if sent). */
void rpc_peer_remove(rpc_client *c, int32_t node);
/* IDLE for a node that is not known. */
rpc_peer_state rpc_peer_get_state(const rpc_client *c, int32_t node);
/* "IDLE", "CONNECTING", "READY", "BACKOFF", for logs. */
const char *rpc_peer_state_name(rpc_peer_state s);

typedef void (*rpc_cb)(void *arg, int err, const void *resp);

/* Sends request `req` (a struct of the API's generated request type) with API
 * `key` at `version` to `node`: one of the internal APIs of krpc.h, or a
 * Kafka API of kmsg.h but ApiVersions (a proxy asking a main what a client
 * asked it). Returns 0 (cb will run) or an error (cb will not run):
 * SK_ERR_INVAL for an unknown API or version, a NULL req or cb, or
 * timeout_ms <= 0; SK_ERR_NOMEM; SK_ERR_CLOSED from a callback run by
 * rpc_client_destroy. */
int rpc_call(rpc_client *c, int32_t node, int16_t key, int16_t version, const void *req,
             int64_t timeout_ms, rpc_cb cb, void *arg) __attribute__((warn_unused_result));

/* calls: accepted by rpc_call; errors: calls that ended with an error (of
 * which timeouts: SK_ERR_TIMEOUT); connects: connections that became READY;
 * connect_failures: attempts that did not; bytes: frames, size prefix
 * included. */
typedef struct rpc_stats {
    uint64_t calls, errors, timeouts, connects, connect_failures;
    uint64_t bytes_out, bytes_in;
} rpc_stats;
void rpc_get_stats(const rpc_client *c, rpc_stats *st);

#endif
