/*
 * peer: the outbound RPC client. See peer.h for the contract.
 *
 * Ownership: the client owns its peers (a map by node id); a peer owns its
 * queue of unsent calls and its current connection; a connection owns the
 * calls written on it (a list in send order, and a map by correlation id).
 * A call that has its outcome moves to the client's done list, whose event
 * runs the callbacks: user code never runs inside a connection's or a
 * timer's callback, so those may change any state without fearing
 * re-entry, and user code may call back into the client.
 *
 * A closed connection keeps its struct until the reaper's event frees it,
 * so a read callback that closes its own connection can still look at it
 * (as broker/net.c does for server connections).
 */
#include "peer.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/dns.h>
#include <event2/event.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "kmsg.h"
#include "krpc.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"

#define MUST_USE __attribute__((warn_unused_result))

typedef struct rpc_peer rpc_peer;
typedef struct rpc_conn rpc_conn;
typedef struct rpc_pending rpc_pending;

/* The resolver, held by the client and by each lookup in flight. A lookup
 * cancelled with its connection still calls back on a later pass of the
 * loop, and evdns must outlive that callback; so the last holder frees it,
 * from an event of its own rather than inside evdns's callback. */
typedef struct rpc_dns {
    struct event_base *ebase;
    struct evdns_base *base;
    int refs;
} rpc_dns;

/* One name being resolved for a connection. */
typedef struct rpc_lookup {
    rpc_dns *dns;
    rpc_conn *conn; /* NULL once the connection gave up on it */
    struct evdns_getaddrinfo_request *req;
} rpc_lookup;

/* Where a call is, which says what its timer means when it fires. */
typedef enum { AT_QUEUE, AT_SENT, AT_DONE } call_at;

struct rpc_pending {
    rpc_pending *prev, *next; /* in its peer's queue, its conn's sent list, or done */
    call_at at;
    rpc_client *client;
    rpc_peer *peer; /* AT_QUEUE */
    rpc_conn *conn; /* AT_SENT */
    int32_t corr;
    const kc_api *api;
    int16_t version;
    bool flexible;
    uint8_t *frame; /* the request, size prefix included, until handed to the socket */
    size_t frame_len;
    struct event *timer;
    rpc_cb cb;
    void *arg;
    /* The outcome, once AT_DONE. */
    int err;
    void *resp;      /* in arena; its strings point into rframe */
    uint8_t *rframe;
    sk_arena *arena;
};

typedef struct call_list {
    rpc_pending *head, *tail;
    size_t n;
} call_list;

struct rpc_conn {
    rpc_peer *peer; /* NULL once closed */
    struct bufferevent *bev;
    rpc_lookup *lookup; /* while its peer's name is resolved */
    bool closed;
    call_list sent;
    sk_map *by_corr; /* correlation id -> call in sent */
    rpc_conn *next_reap;
};

struct rpc_peer {
    rpc_client *client;
    int32_t node;
    char *host;
    int port;
    rpc_peer_state state;
    rpc_conn *conn;      /* CONNECTING and READY */
    struct event *timer; /* CONNECTING: the connect timeout; BACKOFF: the delay */
    bool delay_over;     /* BACKOFF whose delay ended with no call waiting */
    int64_t backoff_ms;  /* the next delay */
    call_list queue;
    size_t queued_bytes;
};

struct rpc_client {
    struct event_base *base;
    rpc_dns *dns; /* made for the first host name that is not numeric */
    rpc_opts o;
    char *nameservers; /* o.nameservers points here */
    char client_id[32];
    sk_map *peers; /* node id -> rpc_peer */
    call_list done;
    struct event *done_ev;
    rpc_conn *reap;
    struct event *reap_ev;
    int32_t next_corr;
    bool destroying;
    SSL_CTX *tls;     /* new connections are TLS ones (a reference), NULL: plaintext */
    bool check_host;  /* the peer's certificate must name the address dialled */
    uint64_t rand;
    rpc_stats st;
};

static void conn_read_cb(struct bufferevent *bev, void *arg);
static void conn_event_cb(struct bufferevent *bev, short what, void *arg);
static void peer_connect(rpc_peer *p);

/* ------------------------------------------------------------ lists */

static void list_push(call_list *l, rpc_pending *p)
{
    p->next = NULL;
    p->prev = l->tail;
    if (l->tail)
        l->tail->next = p;
    else
        l->head = p;
    l->tail = p;
    l->n++;
}

static void list_del(call_list *l, rpc_pending *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        l->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        l->tail = p->prev;
    p->prev = p->next = NULL;
    l->n--;
}

static inline uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

/* ------------------------------------------------------------ calls */

static void call_free(rpc_pending *p)
{
    if (p->timer)
        event_free(p->timer);
    free(p->frame);
    free(p->rframe);
    if (p->arena)
        sk_arena_destroy(p->arena);
    free(p);
}

/* p has its outcome and is in no list: queue its callback. */
static void complete(rpc_client *c, rpc_pending *p, int err)
{
    if (p->timer)
        evtimer_del(p->timer);
    p->at = AT_DONE;
    p->peer = NULL;
    p->conn = NULL;
    p->err = err;
    if (err != 0) {
        c->st.errors++;
        if (err == SK_ERR_TIMEOUT)
            c->st.timeouts++;
    }
    list_push(&c->done, p);
    event_active(c->done_ev, EV_TIMEOUT, 0);
}

static void deliver(rpc_pending *p)
{
    p->cb(p->arg, p->err, p->err == 0 ? p->resp : NULL);
    call_free(p);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rpc_client *c = arg;
    /* Only the outcomes known now: those the callbacks cause wait for the
     * next round, so that the loop keeps serving everything else. */
    size_t n = c->done.n;
    while (n-- > 0 && c->done.head) {
        rpc_pending *p = c->done.head;
        list_del(&c->done, p);
        deliver(p);
    }
}

static void queue_del(rpc_peer *peer, rpc_pending *p)
{
    list_del(&peer->queue, p);
    peer->queued_bytes -= p->frame_len;
}

static void sent_del(rpc_conn *k, rpc_pending *p)
{
    list_del(&k->sent, p);
    sk_map_del(k->by_corr, &(int64_t){p->corr}, sizeof(int64_t));
}

static rpc_pending *sent_find(rpc_conn *k, int32_t corr)
{
    return sk_map_get_i64(k->by_corr, corr);
}

static void fail_queue(rpc_peer *peer, int err)
{
    while (peer->queue.head) {
        rpc_pending *p = peer->queue.head;
        queue_del(peer, p);
        complete(peer->client, p, err);
    }
}

static void fail_sent(rpc_conn *k, rpc_client *c, int err)
{
    while (k->sent.head) {
        rpc_pending *p = k->sent.head;
        sent_del(k, p);
        complete(c, p, err);
    }
}

static void call_timeout_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rpc_pending *p = arg;
    if (p->at == AT_QUEUE) {
        queue_del(p->peer, p);
        complete(p->client, p, SK_ERR_IO);
    } else if (p->at == AT_SENT) {
        sent_del(p->conn, p);
        complete(p->client, p, SK_ERR_TIMEOUT);
    }
}

/* ------------------------------------------------------ connections */

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rpc_client *c = arg;
    while (c->reap) {
        rpc_conn *k = c->reap;
        c->reap = k->next_reap;
        sk_map_destroy(k->by_corr);
        free(k);
    }
}

/* Closes k, whose written calls have been failed already; its struct
 * lives on until the reaper runs. */
static void conn_close(rpc_client *c, rpc_conn *k)
{
    k->closed = true;
    k->peer = NULL;
    if (k->lookup) {
        rpc_lookup *l = k->lookup;
        k->lookup = NULL;
        l->conn = NULL; /* its callback, now or later, only frees it */
        if (l->req)
            evdns_getaddrinfo_cancel(l->req);
    }
    if (k->bev) {
        bufferevent_free(k->bev);
        k->bev = NULL;
    }
    k->next_reap = c->reap;
    c->reap = k;
    event_active(c->reap_ev, EV_TIMEOUT, 0);
}

static int64_t next_delay(rpc_peer *peer)
{
    rpc_client *c = peer->client;
    int64_t d = peer->backoff_ms;
    peer->backoff_ms = d * 2 > c->o.backoff_max_ms ? c->o.backoff_max_ms : d * 2;
    /* xorshift64: a quarter of jitter needs no quality. */
    c->rand ^= c->rand << 13;
    c->rand ^= c->rand >> 7;
    c->rand ^= c->rand << 17;
    return d - (int64_t)(c->rand % (uint64_t)(d / 4 + 1));
}

static void timer_start(struct event *ev, int64_t ms)
{
    struct timeval tv = {.tv_sec = ms / 1000, .tv_usec = (ms % 1000) * 1000};
    evtimer_add(ev, &tv);
}

static void enter_backoff(rpc_peer *peer)
{
    peer->state = RPC_PEER_BACKOFF;
    peer->delay_over = false;
    timer_start(peer->timer, next_delay(peer));
}

/* The connection of peer broke: calls written on it fail with err, after
 * `culprit` (the call whose response was bad, taken off the sent list
 * already), which gets SK_ERR_PARSE. */
static void conn_drop(rpc_peer *peer, int err, rpc_pending *culprit, const char *why)
{
    rpc_client *c = peer->client;
    rpc_conn *k = peer->conn;
    /* An idle connection closed by the peer (its idle reaper) is routine. */
    sk_log(culprit || k->sent.n ? SK_LOG_INFO : SK_LOG_DEBUG, "rpc",
           "node %d (%s:%d): connection lost with %zu calls written: %s", peer->node, peer->host,
           peer->port, k->sent.n + (culprit ? 1 : 0), why);
    if (culprit)
        complete(c, culprit, SK_ERR_PARSE);
    fail_sent(k, c, err);
    conn_close(c, k);
    peer->conn = NULL;
    enter_backoff(peer);
}

static void connect_failed(rpc_peer *peer, const char *why)
{
    rpc_client *c = peer->client;
    SK_DEBUG("rpc", "node %d (%s:%d): cannot connect: %s", peer->node, peer->host, peer->port,
             why);
    c->st.connect_failures++;
    evtimer_del(peer->timer);
    conn_close(c, peer->conn);
    peer->conn = NULL;
    enter_backoff(peer);
}

static void account(rpc_client *c, int32_t node, int16_t key, size_t out, size_t in)
{
    if (c->o.account)
        c->o.account(c->o.account_arg, node, key, out, in);
}

/* Hands the waiting calls to the READY connection. */
static void flush_queue(rpc_peer *peer)
{
    rpc_conn *k = peer->conn;
    struct evbuffer *out = bufferevent_get_output(k->bev);
    while (peer->queue.head) {
        rpc_pending *p = peer->queue.head;
        /* Registered first: a response must always find its call. */
        if (sk_map_put_i64(k->by_corr, p->corr, p) != 0)
            return; /* out of memory: the call waits, at worst until its timeout */
        if (evbuffer_add(out, p->frame, p->frame_len) != 0) {
            sk_map_del(k->by_corr, &(int64_t){p->corr}, sizeof(int64_t));
            return;
        }
        queue_del(peer, p);
        peer->client->st.bytes_out += p->frame_len;
        account(peer->client, peer->node, p->api->key, p->frame_len, 0);
        free(p->frame);
        p->frame = NULL;
        p->at = AT_SENT;
        p->peer = NULL;
        p->conn = k;
        list_push(&k->sent, p);
    }
}

static void conn_ready(rpc_peer *peer)
{
    rpc_client *c = peer->client;
    rpc_conn *k = peer->conn;
    evtimer_del(peer->timer);
    peer->state = RPC_PEER_READY;
    peer->backoff_ms = c->o.backoff_min_ms;
    c->st.connects++;
    evutil_socket_t fd = bufferevent_getfd(k->bev);
    int one = 1;
    if (fd >= 0)
        (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    bufferevent_enable(k->bev, EV_READ | EV_WRITE);
    SK_DEBUG("rpc", "node %d (%s:%d): connected", peer->node, peer->host, peer->port);
    flush_queue(peer);
}

/* OpenSSL's reason for a TLS connection's failure, if it gave one. */
static bool tls_error(struct bufferevent *bev, char *out, size_t len)
{
    if (!bufferevent_openssl_get_ssl(bev))
        return false;
    unsigned long e = bufferevent_get_openssl_error(bev);
    while (bufferevent_get_openssl_error(bev))
        ;
    /* Socket errors (a peer not listening yet) are told as such. */
    if (!e || ERR_GET_LIB(e) == 0 || ERR_GET_LIB(e) == ERR_LIB_SYS)
        return false;
    ERR_error_string_n(e, out, len);
    return true;
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    rpc_conn *k = arg;
    if (k->closed)
        return;
    rpc_peer *peer = k->peer;
    if (what & BEV_EVENT_CONNECTED) {
        conn_ready(peer);
        return;
    }
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    char tls_why[256];
    const char *why = (what & BEV_EVENT_EOF) ? "closed by the peer"
                                             : evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR());
    if (tls_error(bev, tls_why, sizeof tls_why)) {
        /* A refused certificate does not heal by retrying: say so loudly. */
        SK_WARN("rpc", "node %d (%s:%d): TLS: %s", peer->node, peer->host, peer->port, tls_why);
        why = tls_why;
    }
    if (peer->state == RPC_PEER_CONNECTING)
        connect_failed(peer, why);
    else
        conn_drop(peer, SK_ERR_TIMEOUT, NULL, why);
}

/* Decodes the response to p held in frame (correlation id first); p takes
 * the frame. */
static int MUST_USE decode_response(rpc_pending *p, uint8_t *frame, size_t len)
{
    p->rframe = frame;
    kc_reader r;
    kc_reader_init(&r, frame + 4, len - 4);
    if (p->flexible && kc_skip_tags(&r) != 0)
        return SK_ERR_PARSE;
    /* Counts are checked against the bytes left before anything is
     * allocated, so the frame bounds the arena; the cap is a backstop. */
    p->arena = sk_arena_new(len * 64 + ((size_t)1 << 20));
    if (!p->arena)
        return SK_ERR_NOMEM;
    p->resp = sk_arena_alloc(p->arena, p->api->resp->size);
    if (!p->resp)
        return SK_ERR_NOMEM;
    int rc = kc_decode(p->api->resp, p->version, p->flexible, &r, p->resp, p->arena);
    if (rc != 0)
        return rc;
    return r.p == r.end ? 0 : SK_ERR_PARSE;
}

/* One whole response frame (without its size prefix), owned. */
static void handle_frame(rpc_conn *k, uint8_t *frame, size_t len)
{
    rpc_peer *peer = k->peer;
    int32_t corr = (int32_t)be32(frame);
    rpc_pending *p = sent_find(k, corr);
    account(peer->client, peer->node, p ? p->api->key : -1, 0, 4 + len);
    if (!p) {
        /* The answer to a call that timed out. */
        SK_DEBUG("rpc", "node %d: response %d to no waiting call, dropped", peer->node, corr);
        free(frame);
        return;
    }
    sent_del(k, p);
    int rc = decode_response(p, frame, len);
    if (rc != 0) {
        SK_WARN("rpc", "node %d: %s v%d response %d cannot be decoded (%s)", peer->node,
                p->api->name, p->version, corr, sk_err_name(rc));
        conn_drop(peer, SK_ERR_TIMEOUT, p, "undecodable response");
        return;
    }
    complete(peer->client, p, 0);
}

/* A size prefix that cannot be right: blame the call it names when its
 * correlation id is already here, else every call written. */
static void bad_size(rpc_conn *k, struct evbuffer *in, int32_t size)
{
    rpc_peer *peer = k->peer;
    uint8_t h[8];
    rpc_pending *culprit = NULL;
    if (evbuffer_copyout(in, h, 8) == 8)
        culprit = sent_find(k, (int32_t)be32(h + 4));
    if (culprit)
        sent_del(k, culprit);
    SK_WARN("rpc", "node %d (%s:%d): response size %d outside [4, %zu]", peer->node, peer->host,
            peer->port, size, peer->client->o.max_response);
    conn_drop(peer, culprit ? SK_ERR_TIMEOUT : SK_ERR_PARSE, culprit, "bad response frame");
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
    rpc_conn *k = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    while (!k->closed) {
        size_t avail = evbuffer_get_length(in);
        uint8_t h[4];
        if (avail < 4)
            break;
        evbuffer_copyout(in, h, 4);
        int32_t size = (int32_t)be32(h);
        if (size < 4 || (size_t)size > k->peer->client->o.max_response) {
            bad_size(k, in, size);
            return;
        }
        if (avail < 4 + (size_t)size) {
            /* Wake up only once the whole frame is here. */
            bufferevent_setwatermark(bev, EV_READ, 4 + (size_t)size, 0);
            break;
        }
        bufferevent_setwatermark(bev, EV_READ, 0, 0);
        uint8_t *frame = malloc((size_t)size);
        if (!frame) {
            conn_drop(k->peer, SK_ERR_TIMEOUT, NULL, "out of memory for a response");
            return;
        }
        evbuffer_drain(in, 4);
        evbuffer_remove(in, frame, (size_t)size);
        k->peer->client->st.bytes_in += 4 + (size_t)size;
        handle_frame(k, frame, (size_t)size);
    }
}

/* Fills *ss when host is a numeric address. */
static bool numeric_addr(const char *host, int port, struct sockaddr_storage *ss, int *len)
{
    memset(ss, 0, sizeof *ss);
    struct sockaddr_in *s4 = (struct sockaddr_in *)ss;
    struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)ss;
    if (inet_pton(AF_INET, host, &s4->sin_addr) == 1) {
        s4->sin_family = AF_INET;
        s4->sin_port = htons((uint16_t)port);
        *len = sizeof *s4;
        return true;
    }
    if (inet_pton(AF_INET6, host, &s6->sin6_addr) == 1) {
        s6->sin6_family = AF_INET6;
        s6->sin6_port = htons((uint16_t)port);
        *len = sizeof *s6;
        return true;
    }
    return false;
}

static void dns_free_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rpc_dns *d = arg;
    evdns_base_free(d->base, 0);
    free(d);
}

/* in_evdns: called from inside one of evdns's callbacks. */
static void dns_unref(rpc_dns *d, bool in_evdns)
{
    if (--d->refs > 0)
        return;
    if (!in_evdns) {
        dns_free_cb(-1, 0, d);
        return;
    }
    struct timeval now = {0, 0};
    if (event_base_once(d->ebase, -1, EV_TIMEOUT, dns_free_cb, d, &now) != 0)
        SK_WARN("rpc", "cannot schedule the resolver's release; it is leaked");
}

/* Checks "ip[:port],..." (b NULL), or adds each server to evdns. */
static int MUST_USE dns_servers(struct evdns_base *b, const char *list)
{
    char *copy = strdup(list);
    if (!copy)
        return SK_ERR_NOMEM;
    int rc = 0, n = 0;
    char *save = NULL;
    for (char *t = strtok_r(copy, ", ", &save); t && rc == 0; t = strtok_r(NULL, ", ", &save)) {
        struct sockaddr_storage ss;
        int len = sizeof ss;
        n++;
        if (b ? evdns_base_nameserver_ip_add(b, t) != 0
              : evutil_parse_sockaddr_port(t, (struct sockaddr *)&ss, &len) != 0) {
            SK_ERROR("rpc", "name server %s: not an ip[:port]", t);
            rc = SK_ERR_INVAL;
        }
    }
    free(copy);
    return rc == 0 && n == 0 ? SK_ERR_INVAL : rc;
}

static rpc_dns *dns_new(rpc_client *c)
{
    rpc_dns *d = calloc(1, sizeof *d);
    if (!d)
        return NULL;
    d->ebase = c->base;
    d->refs = 1;
    if (!c->nameservers) {
        d->base = evdns_base_new(c->base, EVDNS_BASE_INITIALIZE_NAMESERVERS);
        if (d->base)
            return d;
    } else if ((d->base = evdns_base_new(c->base, 0)) != NULL) {
        if (dns_servers(d->base, c->nameservers) == 0 &&
            evdns_base_load_hosts(d->base, NULL) == 0)
            return d;
        evdns_base_free(d->base, 0);
    }
    free(d);
    return NULL;
}

static void lookup_cb(int result, struct evutil_addrinfo *ai, void *arg)
{
    rpc_lookup *l = arg;
    rpc_conn *k = l->conn;
    rpc_dns *d = l->dns;
    free(l);
    if (k) {
        k->lookup = NULL;
        if (result != 0 || !ai)
            connect_failed(k->peer, result ? evutil_gai_strerror(result) : "no address");
        else if (bufferevent_socket_connect(k->bev, ai->ai_addr, (int)ai->ai_addrlen) != 0)
            connect_failed(k->peer, evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
    }
    if (ai)
        evutil_freeaddrinfo(ai);
    dns_unref(d, true);
}

/* Resolves the peer's name, then connects to its first address. */
static int MUST_USE start_lookup(rpc_peer *peer, rpc_conn *k)
{
    rpc_client *c = peer->client;
    if (!c->dns && !(c->dns = dns_new(c)))
        return SK_ERR_NOMEM;
    rpc_lookup *l = calloc(1, sizeof *l);
    if (!l)
        return SK_ERR_NOMEM;
    l->dns = c->dns;
    l->conn = k;
    c->dns->refs++;
    k->lookup = l;
    char port[8];
    snprintf(port, sizeof port, "%d", peer->port);
    struct evutil_addrinfo hints;
    memset(&hints, 0, sizeof hints);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_protocol = IPPROTO_TCP;
    struct evdns_getaddrinfo_request *req =
        evdns_getaddrinfo(c->dns->base, peer->host, port, &hints, lookup_cb, l);
    /* NULL: answered at once (hosts file), and lookup_cb freed l. */
    if (req)
        l->req = req;
    return 0;
}

/* 0, SK_ERR_IO (errno tells) or SK_ERR_NOMEM. */
static int MUST_USE start_connect(rpc_peer *peer, rpc_conn *k)
{
    struct sockaddr_storage ss;
    int len;
    if (numeric_addr(peer->host, peer->port, &ss, &len))
        return bufferevent_socket_connect(k->bev, (struct sockaddr *)&ss, len) ? SK_ERR_IO : 0;
    return start_lookup(peer, k);
}

/* An SSL for a connection to peer, checking that its certificate names the
 * address dialled (an IP address, or a DNS name also sent as SNI). */
static SSL *peer_ssl(rpc_client *c, const rpc_peer *peer)
{
    SSL *ssl = SSL_new(c->tls);
    if (!ssl || !c->check_host)
        return ssl;
    struct sockaddr_storage ss;
    int len;
    int ok = numeric_addr(peer->host, peer->port, &ss, &len)
                 ? X509_VERIFY_PARAM_set1_ip_asc(SSL_get0_param(ssl), peer->host)
                 : SSL_set1_host(ssl, peer->host) && SSL_set_tlsext_host_name(ssl, peer->host);
    if (!ok) {
        SSL_free(ssl);
        return NULL;
    }
    return ssl;
}

/* A plaintext or (with a TLS context) a TLS bufferevent, not connected. */
static struct bufferevent *peer_bev(rpc_client *c, const rpc_peer *peer)
{
    if (!c->tls)
        return bufferevent_socket_new(c->base, -1, BEV_OPT_CLOSE_ON_FREE);
    SSL *ssl = peer_ssl(c, peer);
    if (!ssl)
        return NULL;
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        c->base, -1, ssl, BUFFEREVENT_SSL_CONNECTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    /* A node that dies mid-record is a broken connection like any other. */
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

/* Most bytes one write to a peer takes (libevent's default, 16 KiB, costs a
 * turn of the loop per 16 KiB of a large request: broker/net.c). */
#define MAX_SINGLE_WRITE (1 << 20)

static void peer_connect(rpc_peer *peer)
{
    rpc_client *c = peer->client;
    rpc_conn *k = calloc(1, sizeof *k);
    struct bufferevent *bev = peer_bev(c, peer);
    if (bev)
        (void)bufferevent_set_max_single_write(bev, MAX_SINGLE_WRITE);
    sk_map *m = sk_map_new();
    peer->state = RPC_PEER_CONNECTING;
    if (!k || !bev || !m) {
        free(k);
        if (bev)
            bufferevent_free(bev);
        if (m)
            sk_map_destroy(m);
        c->st.connect_failures++;
        enter_backoff(peer);
        return;
    }
    k->peer = peer;
    k->bev = bev;
    k->by_corr = m;
    peer->conn = k;
    bufferevent_setcb(bev, conn_read_cb, NULL, conn_event_cb, k);
    timer_start(peer->timer, c->o.connect_timeout_ms);
    /* A name resolved at once (hosts file) may fail the connection inside
     * this call: k then is closed. */
    int rc = start_connect(peer, k);
    if (rc != 0 && !k->closed)
        connect_failed(peer, rc == SK_ERR_IO ? evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR())
                                             : "out of memory");
}

/* ------------------------------------------------------------ peers */

static rpc_peer *peer_find(const rpc_client *c, int32_t node)
{
    return sk_map_get_i64(c->peers, node);
}

/* Something to send: move toward READY, or send. */
static void peer_kick(rpc_peer *peer)
{
    switch (peer->state) {
    case RPC_PEER_IDLE:
        peer_connect(peer);
        break;
    case RPC_PEER_READY:
        flush_queue(peer);
        break;
    case RPC_PEER_BACKOFF:
        if (peer->delay_over)
            peer_connect(peer);
        break;
    case RPC_PEER_CONNECTING:
        break;
    }
}

static void peer_timer_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    rpc_peer *peer = arg;
    if (peer->state == RPC_PEER_CONNECTING) {
        connect_failed(peer, "connect timed out");
    } else if (peer->state == RPC_PEER_BACKOFF) {
        if (peer->queue.head)
            peer_connect(peer);
        else
            peer->delay_over = true;
    }
}

/* Back to IDLE: unsent calls fail with unsent_err, written ones with
 * sent_err. */
static void peer_reset(rpc_peer *peer, int unsent_err, int sent_err)
{
    rpc_client *c = peer->client;
    fail_queue(peer, unsent_err);
    if (peer->conn) {
        fail_sent(peer->conn, c, sent_err);
        conn_close(c, peer->conn);
        peer->conn = NULL;
    }
    evtimer_del(peer->timer);
    peer->state = RPC_PEER_IDLE;
    peer->delay_over = false;
    peer->backoff_ms = c->o.backoff_min_ms;
}

static void peer_free(rpc_peer *peer)
{
    event_free(peer->timer);
    free(peer->host);
    free(peer);
}

int rpc_peer_set(rpc_client *c, int32_t node, const char *host, int port)
{
    if (!host || !host[0] || port < 1 || port > 65535)
        return SK_ERR_INVAL;
    if (c->destroying)
        return SK_ERR_CLOSED;
    rpc_peer *peer = peer_find(c, node);
    if (peer && peer->port == port && strcmp(peer->host, host) == 0)
        return 0;
    char *h = strdup(host);
    if (!h)
        return SK_ERR_NOMEM;
    if (peer) {
        SK_INFO("rpc", "node %d moves from %s:%d to %s:%d", node, peer->host, peer->port, host,
                port);
        peer_reset(peer, SK_ERR_IO, SK_ERR_TIMEOUT);
        free(peer->host);
        peer->host = h;
        peer->port = port;
        return 0;
    }
    peer = calloc(1, sizeof *peer);
    if (peer)
        peer->timer = evtimer_new(c->base, peer_timer_cb, peer);
    if (!peer || !peer->timer || sk_map_put_i64(c->peers, node, peer) != 0) {
        if (peer && peer->timer)
            event_free(peer->timer);
        free(peer);
        free(h);
        return SK_ERR_NOMEM;
    }
    peer->client = c;
    peer->node = node;
    peer->host = h;
    peer->port = port;
    peer->state = RPC_PEER_IDLE;
    peer->backoff_ms = c->o.backoff_min_ms;
    return 0;
}

void rpc_peer_remove(rpc_client *c, int32_t node)
{
    if (c->destroying)
        return;
    rpc_peer *peer = peer_find(c, node);
    if (!peer)
        return;
    peer_reset(peer, SK_ERR_IO, SK_ERR_TIMEOUT);
    sk_map_del(c->peers, &(int64_t){node}, sizeof(int64_t));
    peer_free(peer);
}

rpc_peer_state rpc_peer_get_state(const rpc_client *c, int32_t node)
{
    const rpc_peer *peer = peer_find(c, node);
    return peer ? peer->state : RPC_PEER_IDLE;
}

const char *rpc_peer_state_name(rpc_peer_state s)
{
    switch (s) {
    case RPC_PEER_IDLE:
        return "IDLE";
    case RPC_PEER_CONNECTING:
        return "CONNECTING";
    case RPC_PEER_READY:
        return "READY";
    case RPC_PEER_BACKOFF:
        return "BACKOFF";
    }
    return "?";
}

/* ------------------------------------------------------------- calls */

/* Bytes waiting for the peer: unsent, and written but not yet taken by
 * the socket. */
static size_t peer_pending_bytes(const rpc_peer *peer)
{
    size_t n = peer->queued_bytes;
    if (peer->conn && peer->conn->bev)
        n += evbuffer_get_length(bufferevent_get_output(peer->conn->bev));
    return n;
}

static int32_t next_corr(rpc_client *c)
{
    int32_t id = c->next_corr;
    c->next_corr = id == INT32_MAX ? 1 : id + 1;
    return id;
}

/* Encodes the request frame of p: size, header v1/v2, body. */
static int MUST_USE encode_request(rpc_client *c, rpc_pending *p, const void *req)
{
    kc_req_header h = {
        .api_key = p->api->key,
        .api_version = p->version,
        .correlation_id = p->corr,
        .client_id = {c->client_id, (int32_t)strlen(c->client_id)},
    };
    size_t hsz = kc_req_header_size(&h, p->flexible);
    size_t bsz = kc_size(p->api->req, p->version, p->flexible, req);
    if (hsz + bsz > INT32_MAX)
        return SK_ERR_INVAL;
    p->frame_len = 4 + hsz + bsz;
    p->frame = malloc(p->frame_len);
    if (!p->frame)
        return SK_ERR_NOMEM;
    uint8_t *o = kc_put_i32(p->frame, (int32_t)(hsz + bsz));
    o = kc_put_req_header(o, &h, p->flexible);
    o = kc_encode(p->api->req, p->version, p->flexible, req, o);
    if ((size_t)(o - p->frame) != p->frame_len) {
        SK_ERROR("rpc", "%s v%d: encoder wrote %zu bytes, sized %zu", p->api->name, p->version,
                 (size_t)(o - p->frame), p->frame_len);
        return SK_ERR_INVAL;
    }
    return 0;
}

int rpc_call(rpc_client *c, int32_t node, int16_t key, int16_t version, const void *req,
             int64_t timeout_ms, rpc_cb cb, void *arg)
{
    if (!req || !cb || timeout_ms <= 0)
        return SK_ERR_INVAL;
    if (c->destroying)
        return SK_ERR_CLOSED;
    /* Skiff's own RPCs, or a Kafka API a proxy asks a main on a client's
     * behalf; not ApiVersions, whose response header breaks the rule. */
    const kc_api *api = key >= KRPC_KEY_MIN ? krpc_api_get(key)
                        : key == KP_API_VERSIONS ? NULL
                                                 : kc_api_get(key);
    if (!api || version < api->min_ver || version > api->max_ver)
        return SK_ERR_INVAL;
    rpc_pending *p = calloc(1, sizeof *p);
    if (!p)
        return SK_ERR_NOMEM;
    p->client = c;
    p->api = api;
    p->version = version;
    p->flexible = version >= api->flex_min;
    p->corr = next_corr(c);
    p->cb = cb;
    p->arg = arg;
    p->timer = evtimer_new(c->base, call_timeout_cb, p);
    int rc = p->timer ? encode_request(c, p, req) : SK_ERR_NOMEM;
    if (rc != 0) {
        call_free(p);
        return rc;
    }
    c->st.calls++;
    rpc_peer *peer = peer_find(c, node);
    if (!peer) {
        complete(c, p, SK_ERR_IO);
        return 0;
    }
    if (peer_pending_bytes(peer) + p->frame_len > c->o.max_queued_bytes) {
        complete(c, p, SK_ERR_AGAIN);
        return 0;
    }
    timer_start(p->timer, timeout_ms);
    p->at = AT_QUEUE;
    p->peer = peer;
    list_push(&peer->queue, p);
    peer->queued_bytes += p->frame_len;
    peer_kick(peer);
    return 0;
}

void rpc_get_stats(const rpc_client *c, rpc_stats *st)
{
    *st = c->st;
}

/* ----------------------------------------------------------- client */

static void opts_defaults(rpc_opts *o)
{
    if (o->connect_timeout_ms <= 0)
        o->connect_timeout_ms = 2000;
    if (o->backoff_min_ms <= 0)
        o->backoff_min_ms = 50;
    if (o->backoff_max_ms <= 0)
        o->backoff_max_ms = 2000;
    if (o->backoff_max_ms < o->backoff_min_ms)
        o->backoff_max_ms = o->backoff_min_ms;
    if (o->max_queued_bytes == 0)
        o->max_queued_bytes = (size_t)16 << 20;
    if (o->max_response == 0)
        o->max_response = (size_t)64 << 20;
    if (o->max_response > INT32_MAX)
        o->max_response = INT32_MAX;
}

rpc_client *rpc_client_new(struct event_base *base, const rpc_opts *o)
{
    rpc_client *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->base = base;
    if (o)
        c->o = *o;
    opts_defaults(&c->o);
    if (c->o.nameservers && dns_servers(NULL, c->o.nameservers) != 0) {
        free(c);
        return NULL;
    }
    c->nameservers = c->o.nameservers ? strdup(c->o.nameservers) : NULL;
    c->o.nameservers = c->nameservers;
    snprintf(c->client_id, sizeof c->client_id, RPC_CLIENT_ID_PREFIX "%d", (int)c->o.self_id);
    c->next_corr = 1;
    c->rand = 0x9e3779b97f4a7c15ull ^ (uint64_t)(uintptr_t)c;
    c->peers = sk_map_new();
    c->done_ev = event_new(base, -1, 0, done_cb, c);
    c->reap_ev = event_new(base, -1, 0, reap_cb, c);
    if (!c->peers || !c->done_ev || !c->reap_ev || (c->o.nameservers && !c->nameservers)) {
        if (c->peers)
            sk_map_destroy(c->peers);
        if (c->done_ev)
            event_free(c->done_ev);
        if (c->reap_ev)
            event_free(c->reap_ev);
        free(c->nameservers);
        free(c);
        return NULL;
    }
    return c;
}

void rpc_client_destroy(rpc_client *c)
{
    if (!c)
        return;
    c->destroying = true;
    size_t it = 0;
    const void *key;
    size_t klen;
    void *val;
    while (sk_map_next(c->peers, &it, &key, &klen, &val)) {
        rpc_peer *peer = val;
        peer_reset(peer, SK_ERR_CLOSED, SK_ERR_CLOSED);
        peer_free(peer);
    }
    sk_map_destroy(c->peers);
    /* Outcomes known before, then the calls just failed, in that order. */
    while (c->done.head) {
        rpc_pending *p = c->done.head;
        list_del(&c->done, p);
        deliver(p);
    }
    reap_cb(-1, 0, c);
    event_free(c->done_ev);
    event_free(c->reap_ev);
    if (c->dns)
        dns_unref(c->dns, false);
    free(c->nameservers);
    SSL_CTX_free(c->tls);
    free(c);
}

void rpc_client_set_tls(rpc_client *c, SSL_CTX *ctx, bool check_host)
{
    if (ctx)
        SSL_CTX_up_ref(ctx);
    SSL_CTX_free(c->tls);
    c->tls = ctx;
    c->check_host = check_host;
}
