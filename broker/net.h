/*
 * net: listeners, connections, Kafka framing and in-order responses.
 *
 * Each connection reads size-prefixed frames (the size checked against
 * socket.request.max.bytes before anything is allocated), turns each into an
 * sk_req handed to the dispatcher, and writes responses strictly in request
 * order, whatever order handlers finish in. Requests that end without a
 * response (acks=0 produce) are skipped in that order. A frame of 64 KiB or
 * more on a plain TCP connection is allocated once its size is read and
 * filled with recv() straight from the socket, not through libevent's input
 * buffer (4 KiB per read, and a copy out of it); the frame is reference-
 * counted (sk_req.frame_ref), as produce may keep batches of it cached.
 *
 * Back-pressure: a connection stops being read while it has
 * socket.max.inflight.requests requests in flight or more than
 * socket.max.output.bytes of replies its client has not taken, and every
 * connection stops being read while the WAL holds more than
 * wal.max.pending.bytes not yet durable (sk_net_pause/resume). As the WAL
 * fills towards wal.max.retained.bytes, what connections that produce send
 * is metered, and they are not read while out of their share (pace.h,
 * sk_net_pace).
 *
 * Responses go out without copying their record bytes: the pieces the
 * encoder left out (cache entries, storage read buffers) are added to the
 * output by reference, each holding its owner until written; a connection
 * freed with output unsent drops those holds with its buffer.
 *
 * Lifetime: a connection is reference-counted (one reference while open,
 * one per live request). It is freed from a deferred event once closed and
 * unreferenced, never inside one of its own callbacks.
 *
 * Thread: the event loop only.
 */
#ifndef NET_H
#define NET_H

#include <stddef.h>
#include <sys/socket.h>

#include "types.h"

struct sk_conn {
    sk_node *node;
    struct bufferevent *bev;
    struct event *kick_ev; /* deferred work: resume reading, close, free */
    int refs;
    bool closed;       /* no more reading or writing; waits for refs to drop */
    bool close_after;  /* close once the output buffer drains */
    bool read_enabled;
    bool producer;     /* a client's that sent a Produce: paced (pace.h) */
    sk_req *head, *tail; /* requests in arrival order */
    bool unordered;      /* another node's: answers go out as they are ready */
    int ninflight;
    int listener; /* index into cfg->listeners */
    char peer[64];
    int64_t last_active_ms;
    sk_conn *next, *prev;
    char zone[64]; /* the client's zone, "" when unknown */
    bool zone_known;
    int32_t from_node; /* another node's connection: its id; else -1 */
    int za_slot;       /* its zone's slot in the accounting (xzone.h), -1 until known */
    struct sockaddr_storage addr;
    /* security (docs/security.md) */
    bool tls;             /* an SSL or SASL_SSL listener's */
    bool authenticated;   /* SASL done, or a listener without SASL */
    char principal[256];  /* User:ANONYMOUS, User:CN=... or User:alice */
    struct sk_sasl *sasl; /* the SASL exchange under way (sasl.h), NULL: none */
    int64_t session_end_ms; /* connections.max.reauth.ms: monotonic end, 0: none */
    /* A large request frame read straight from the socket (net.c): its
     * bytes so far, of pend_size; NULL when none is under way. */
    struct frame *pend;
    size_t pend_have;
    int32_t pend_size;
};

int sk_net_listen(sk_node *n, char *why, size_t whylen);
/* Whether every listener's port can be bound now (a cluster member checks
 * before it joins, rather than join and leave at once). */
int sk_net_check_ports(const sk_config *cfg, char *why, size_t whylen)
    __attribute__((warn_unused_result));
struct evbuffer;
/* Appends r's encoded answer to out: r->out copied around its record
 * pieces, which go by reference, their holds passing to out (dropped once
 * written or when out is freed). *bytes: the whole answer's size. 0, or -1
 * when libevent fails (the holds not passed are still r's). */
int sk_conn_queue_answer(struct evbuffer *out, sk_req *r, size_t *bytes)
    __attribute__((warn_unused_result));
/* Learns the connection's zone from its first request (see proxy/zone.h). */
void sk_conn_learn_zone(sk_conn *c, const kc_str *client_id);
/* The address clients of this connection's listener should use. */
const struct sk_listener *sk_conn_advertised(const sk_conn *c);
void sk_net_stop_accepting(sk_node *n);
/* Frees what the network layer holds once every connection is gone. */
void sk_net_destroy(sk_node *n);
/* Closes every connection (shutdown), freeing their unsent output and the
 * holds it has on cached memory. */
void sk_net_close_all(sk_node *n);
/* Connections not closed yet. */
int sk_net_open_conns(const sk_node *n);
/* True when no connection has a request in flight or unsent output. */
bool sk_net_idle(const sk_node *n);

/* WAL back-pressure: stop or restart reading every connection. */
void sk_net_pause(sk_node *n);
void sk_net_resume(sk_node *n);
/* The pacer (pace.h) started or stopped holding producers: stop or restart
 * reading the connections that produced. */
void sk_net_pace(sk_node *n);

/* SIGHUP: reads the TLS files again off the loop and, when they make a
 * valid context, gives it to new connections (open ones keep theirs). */
void sk_net_reload_tls(sk_node *n);

/* Closes connections idle for longer than connections.max.idle.ms. */
void sk_net_reap_idle(sk_node *n);

/* A handler finished r (its state is DONE, SILENT or CLOSE): write what is
 * now at the head of the connection's queue and release what was written.
 * May be called from any loop callback, including inside the dispatch. */
void sk_req_finish(sk_req *r);

#endif
