#include "net.h"

#include <arpa/inet.h>
#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <openssl/err.h>
#include <openssl/ssl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "peer.h"
#include "node.h"
#include "pmap.h"
#include "sasl.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "sk_workq.h"
#include "tls.h"
#include "xzone.h"
#include "zone.h"

/* Smallest request: api key, version, correlation id, client id length. */
#define MIN_FRAME 10

static void conn_read_cb(struct bufferevent *bev, void *arg);
static void conn_write_cb(struct bufferevent *bev, void *arg);
static void conn_event_cb(struct bufferevent *bev, short what, void *arg);
static void conn_kick_cb(evutil_socket_t fd, short what, void *arg);
static void process_input(sk_conn *c);

/* Connections whose last reference is gone wait on node->reap_list for the
 * reaper, which runs from its own event: never inside a callback of the
 * connection. */
static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_node *n = arg;
    while (n->reap_list) {
        sk_conn *c = n->reap_list;
        n->reap_list = c->next;
        sk_sasl_free(c->sasl);
        event_free(c->kick_ev);
        free(c);
    }
}

static void conn_unref(sk_conn *c)
{
    if (--c->refs > 0)
        return;
    sk_node *n = c->node;
    if (c->prev)
        c->prev->next = c->next;
    else
        n->conns = c->next;
    if (c->next)
        c->next->prev = c->prev;
    n->nconns--;
    c->next = n->reap_list;
    n->reap_list = c;
    event_active(n->reap_ev, EV_TIMEOUT, 0);
}

static void conn_close(sk_conn *c)
{
    if (c->closed)
        return;
    c->closed = true;
    SK_DEBUG("net", "closing connection from %s", c->peer);
    free(c->pend); /* a frame still being read */
    c->pend = NULL;
    if (c->bev) {
        /* Unsent answers hold cached memory by reference (WAL cache
         * entries, block cache blocks): let go now. bufferevent_free may
         * free the output later, from the loop or from event_base_free,
         * after the caches are gone (node.c, sk_node_destroy). */
        struct evbuffer *out = bufferevent_get_output(c->bev);
        evbuffer_drain(out, evbuffer_get_length(out));
        bufferevent_free(c->bev);
        c->bev = NULL;
    }
    conn_unref(c);
}

static void set_reading(sk_conn *c, bool on)
{
    if (c->closed || c->read_enabled == on)
        return;
    c->read_enabled = on;
    if (on)
        bufferevent_enable(c->bev, EV_READ);
    else
        bufferevent_disable(c->bev, EV_READ);
}

static bool may_read(const sk_conn *c)
{
    const sk_config *cfg = c->node->cfg;
    if (c->closed || c->close_after || c->node->paused || c->node->stopping)
        return false;
    if (c->producer && c->node->pace.holding)
        return false;
    if (c->ninflight >= cfg->max_inflight_requests_per_connection)
        return false;
    if ((int64_t)evbuffer_get_length(bufferevent_get_output(c->bev)) >
        cfg->max_output_bytes_per_connection)
        return false;
    return true;
}

static void free_ref_cb(const void *data, size_t len, void *extra)
{
    (void)data;
    (void)len;
    free(extra);
}

static void put_ref_cb(const void *data, size_t len, void *extra)
{
    (void)data;
    (void)len;
    sk_ref_put(extra);
}

/* Queues r's answer on out: the encoded bytes, and the record pieces the
 * encoder left out by reference, each hold passing to libevent, which drops
 * it once the bytes are written or the connection is freed. */
int sk_conn_queue_answer(struct evbuffer *out, sk_req *r, size_t *bytes)
{
    *bytes = r->out_len;
    if (r->npieces == 0) {
        if (evbuffer_add_reference(out, r->out, r->out_len, free_ref_cb, r->out) != 0)
            return -1;
        r->out = NULL;
        return 0;
    }
    size_t from = 0;
    for (int i = 0; i < r->npieces; i++) {
        kc_piece *pc = &r->pieces[i];
        if (evbuffer_add(out, r->out + from, pc->at - from) != 0 ||
            evbuffer_add_reference(out, pc->p, pc->len, put_ref_cb, pc->ref) != 0)
            return -1;
        pc->ref = NULL; /* the evbuffer holds it now */
        from = pc->at;
        *bytes += pc->len;
    }
    return evbuffer_add(out, r->out + from, r->out_len - from);
}

/* A request's bytes. Produce may keep batches of it in the WAL cache in
 * place (append.h): the frame then outlives its request. */
struct frame {
    sk_ref ref; /* first */
    uint8_t bytes[];
};

static void frame_drop(sk_ref *ref)
{
    free((struct frame *)ref);
}

static void req_free(sk_req *r)
{
    sk_conn *c = r->conn;
    if (r->cleanup)
        r->cleanup(r);
    sk_req_drop_pieces(r);
    sk_ref_put(r->frame_ref);
    free(r->out);
    sk_arena_destroy(r->arena);
    free(r);
    conn_unref(c);
}

/* Writes every finished request at the head of the queue, in order; on a
 * connection of another node, every finished request (its client matches
 * answers by correlation id, and a long-polling Follow must not hold up a
 * Confirm behind it). */
static void conn_flush(sk_conn *c)
{
    sk_req **pp = &c->head, *prev = NULL;
    while (*pp) {
        sk_req *r = *pp;
        if (r->state == SK_REQ_RUNNING) {
            if (!c->unordered)
                break;
            prev = r;
            pp = &r->next;
            continue;
        }
        *pp = r->next;
        if (c->tail == r)
            c->tail = prev;
        c->ninflight--;
        if (!c->closed && !c->close_after) {
            if (r->state == SK_REQ_DONE && r->out) {
                struct evbuffer *out = bufferevent_get_output(c->bev);
                size_t bytes;
                if (sk_conn_queue_answer(out, r, &bytes) == 0) {
                    sk_xzone_conn_bytes(c, SK_ZA_OUT, r->hdr.api_key, bytes);
                    c->close_after |= r->close_after_reply;
                } else
                    c->close_after = true;
            } else if (r->state == SK_REQ_CLOSE) {
                c->close_after = true;
            }
        }
        req_free(r);
    }
    if (c->closed)
        return;
    if (c->close_after) {
        set_reading(c, false);
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            event_active(c->kick_ev, EV_TIMEOUT, 0);
        return;
    }
    if (!c->read_enabled && may_read(c))
        event_active(c->kick_ev, EV_TIMEOUT, 0);
}

void sk_req_finish(sk_req *r)
{
    conn_flush(r->conn);
}

static void conn_kick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_conn *c = arg;
    if (c->closed)
        return;
    if (c->close_after) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            conn_close(c);
        return;
    }
    /* Input may already be buffered: bufferevents only call back on new
     * data, so look at it before waiting for more. */
    c->refs++;
    process_input(c);
    conn_unref(c);
}

/* The client id of a request frame: after the API key, version and
 * correlation id, a nullable string with an int16 length in every request
 * header version from 1 on. */
static kc_str frame_client_id(const uint8_t *frame, size_t len)
{
    kc_str s = {NULL, -1};
    int16_t n = (int16_t)(frame[8] << 8 | frame[9]);
    if (n >= 0 && (size_t)n <= len - MIN_FRAME) {
        s.p = (const char *)frame + MIN_FRAME;
        s.len = n;
    }
    return s;
}

/* A request frame (len >= MIN_FRAME) arrived: learn where the connection
 * is from on its first, count its bytes. */
static void frame_in(sk_conn *c, const uint8_t *frame, size_t len)
{
    if (!c->zone_known) {
        kc_str id = frame_client_id(frame, len);
        sk_conn_learn_zone(c, &id);
    }
    sk_xzone_conn_bytes(c, SK_ZA_IN, (int16_t)(frame[0] << 8 | frame[1]), 4 + len);
}

/* Frames this large, on a plain TCP connection, are read with recv()
 * straight into their buffer once their size is known: libevent reads at
 * most 4 KiB per call, with an ioctl and a wake-up each (some 400 system
 * calls per 600 KiB produce batch), and the frame was then copied out of
 * its input buffer. */
#define DIRECT_FRAME_MIN (64 * 1024)

/* Most bytes one write to a client's socket takes, when the socket has room.
 * libevent's default is 16 KiB: a 1 GB catch-up then took 62,000 writev
 * calls, each followed by a turn of the loop (epoll_wait, the timer's
 * timerfd_settime) and a wake-up. 1 MiB takes ~1,100. A write copies for
 * 0.1-0.3 ms, bounded also by the room in the socket's send buffer; the
 * loop's other work waits for that per connection writable in the same turn. */
#define MAX_SINGLE_WRITE (1 << 20)

static struct frame *frame_new(sk_conn *c, int32_t size)
{
    struct frame *f = malloc(sizeof *f + (size_t)size);
    if (!f) {
        SK_ERROR("net", "%s: out of memory for a %d-byte request; closing", c->peer, size);
        conn_close(c);
        return NULL;
    }
    sk_ref_init(&f->ref, frame_drop);
    return f;
}

/* Queues and dispatches the request of a whole frame (which it takes). */
static void frame_dispatch(sk_conn *c, struct frame *f, int32_t size)
{
    sk_node *n = c->node;
    sk_req *r = calloc(1, sizeof *r);
    if (!r) {
        free(f);
        SK_ERROR("net", "%s: out of memory for a %d-byte request; closing", c->peer, size);
        conn_close(c);
        return;
    }
    if (size >= MIN_FRAME)
        frame_in(c, f->bytes, (size_t)size);
    r->conn = c;
    r->node = n;
    r->frame = f->bytes;
    r->frame_len = (size_t)size;
    r->frame_ref = &f->ref;
    r->state = SK_REQ_RUNNING;
    r->start_us = sk_mono_us();
    c->refs++;
    if (c->tail)
        c->tail->next = r;
    else
        c->head = r;
    c->tail = r;
    c->ninflight++;
    c->last_active_ms = sk_mono_ms();
    n->n_requests++;
    sk_dispatch(r);
}

/* Fills the frame being read directly: what the bufferevent already read
 * first, then from the socket until it would block. True once whole; the
 * connection is closed when the peer closes or fails inside the frame. */
static bool pend_fill(sk_conn *c, struct evbuffer *in)
{
    uint8_t *b = c->pend->bytes;
    int got = evbuffer_remove(in, b + c->pend_have, (size_t)c->pend_size - c->pend_have);
    c->pend_have += got > 0 ? (size_t)got : 0;
    evutil_socket_t fd = bufferevent_getfd(c->bev);
    while (c->pend_have < (size_t)c->pend_size) {
        ssize_t r = recv(fd, b + c->pend_have, (size_t)c->pend_size - c->pend_have, 0);
        if (r > 0) {
            c->pend_have += (size_t)r;
        } else if (r < 0 && errno == EINTR) {
            continue;
        } else if (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return false;
        } else {
            SK_DEBUG("net", "%s: %s inside a %d-byte request", c->peer,
                     r == 0 ? "closed" : strerror(errno), c->pend_size);
            conn_close(c);
            return false;
        }
    }
    return true;
}

static void process_input(sk_conn *c)
{
    sk_node *n = c->node;
    while (!c->closed) {
        struct evbuffer *in = bufferevent_get_input(c->bev);
        if (c->pend) {
            if (!pend_fill(c, in))
                break;
            struct frame *f = c->pend;
            c->pend = NULL;
            frame_dispatch(c, f, c->pend_size);
            continue;
        }
        if (!may_read(c)) {
            set_reading(c, false);
            return;
        }
        size_t avail = evbuffer_get_length(in);
        if (avail < 4)
            break;
        uint8_t hdr[4];
        evbuffer_copyout(in, hdr, 4);
        int32_t size = (int32_t)((uint32_t)hdr[0] << 24 | (uint32_t)hdr[1] << 16 |
                                 (uint32_t)hdr[2] << 8 | hdr[3]);
        /* Bare SASL tokens (sasl.h) may be shorter than a request header. */
        int min = sk_sasl_raw(c) ? 1 : MIN_FRAME;
        if (size < min || size > n->cfg->socket_request_max_bytes) {
            SK_WARN("net", "%s: request size %d outside [%d, %d] (socket.request.max.bytes); "
                    "closing the connection", c->peer, size, min,
                    n->cfg->socket_request_max_bytes);
            conn_close(c);
            return;
        }
        bool whole = avail >= 4 + (size_t)size;
        if (!whole && (size < DIRECT_FRAME_MIN || c->tls)) {
            /* Wake up only once the whole frame is here. */
            bufferevent_setwatermark(c->bev, EV_READ, 4 + (size_t)size, 0);
            break;
        }
        bufferevent_setwatermark(c->bev, EV_READ, 0, 0);
        struct frame *f = frame_new(c, size);
        if (!f)
            return;
        if (c->producer)
            sk_node_pace_take(n, (uint32_t)size);
        evbuffer_drain(in, 4);
        if (!whole) {
            c->pend = f;
            c->pend_have = 0;
            c->pend_size = size;
            continue;
        }
        evbuffer_remove(in, f->bytes, (size_t)size);
        frame_dispatch(c, f, size);
    }
    if (!c->closed && may_read(c))
        set_reading(c, true);
}

static void conn_read_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    sk_conn *c = arg;
    c->refs++;
    process_input(c);
    conn_unref(c);
}

static void conn_write_cb(struct bufferevent *bev, void *arg)
{
    (void)bev;
    sk_conn *c = arg;
    if (c->closed)
        return;
    if (c->close_after) {
        if (evbuffer_get_length(bufferevent_get_output(c->bev)) == 0)
            event_active(c->kick_ev, EV_TIMEOUT, 0);
        return;
    }
    if (!c->read_enabled && may_read(c))
        event_active(c->kick_ev, EV_TIMEOUT, 0);
}

/* Why a TLS connection failed: OpenSSL's errors, as text. */
static void tls_error(sk_conn *c, struct bufferevent *bev)
{
    unsigned long e = bufferevent_get_openssl_error(bev);
    if (!e)
        return;
    char msg[256];
    ERR_error_string_n(e, msg, sizeof msg);
    SSL *ssl = bufferevent_openssl_get_ssl(bev);
    long v = ssl ? SSL_get_verify_result(ssl) : X509_V_OK;
    if (ERR_GET_REASON(e) == SSL_R_UNEXPECTED_EOF_WHILE_READING)
        SK_DEBUG("net", "%s: TLS: the client left during the handshake", c->peer);
    else
        SK_INFO("net", "%s: TLS: %s%s%s; closing the connection", c->peer, msg,
                v != X509_V_OK ? ": client certificate: " : "",
                v != X509_V_OK ? X509_verify_cert_error_string(v) : "");
    while (bufferevent_get_openssl_error(bev))
        ;
}

static void conn_event_cb(struct bufferevent *bev, short what, void *arg)
{
    sk_conn *c = arg;
    if ((what & BEV_EVENT_CONNECTED) && c->tls) {
        char dn[256];
        if (sk_tls_principal(bufferevent_openssl_get_ssl(bev), c->node->pmap, c->principal,
                             sizeof c->principal, dn, sizeof dn) != 0) {
            /* As Kafka: a certificate no rule maps fails authentication. */
            SK_INFO("net", "%s: TLS: no ssl.principal.mapping.rules rule applies to %s; "
                    "closing the connection", c->peer, dn);
            conn_close(c);
            return;
        }
        SK_DEBUG("net", "%s: TLS established, principal %s", c->peer, c->principal);
        return;
    }
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        if (c->tls)
            tls_error(c, bev);
        if ((what & BEV_EVENT_ERROR) && EVUTIL_SOCKET_ERROR() != ECONNRESET)
            SK_DEBUG("net", "%s: %s", c->peer,
                     evutil_socket_error_to_string(EVUTIL_SOCKET_ERROR()));
        conn_close(c);
    }
}

/* The bufferevent of a new connection: TLS on SSL and SASL_SSL listeners. */
static struct bufferevent *conn_bev(sk_node *n, sk_conn *c, evutil_socket_t fd)
{
    sk_secproto proto = n->cfg->listeners[c->listener].protocol;
    c->authenticated = !SK_SEC_IS_SASL(proto);
    snprintf(c->principal, sizeof c->principal, "User:ANONYMOUS");
    if (!SK_SEC_IS_TLS(proto))
        return bufferevent_socket_new(n->base, fd, BEV_OPT_CLOSE_ON_FREE);
    c->tls = true;
    SSL *ssl = sk_tls_new_ssl(n->tls_ctx);
    if (!ssl)
        return NULL;
    /* As in Kafka, ssl.client.auth concerns SSL listeners: SASL_SSL clients
     * authenticate with SASL. */
    if (proto == SK_SEC_SASL_SSL)
        SSL_set_verify(ssl, SSL_VERIFY_NONE, NULL);
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        n->base, fd, ssl, BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) {
        SSL_free(ssl);
        return NULL;
    }
    bufferevent_openssl_set_allow_dirty_shutdown(bev, 1);
    return bev;
}

static void accept_cb(struct evconnlistener *lev, evutil_socket_t fd, struct sockaddr *sa,
                      int salen, void *arg)
{
    sk_node *n = arg;
    int li = 0;
    for (int i = 0; i < n->nlisteners; i++)
        if (n->listeners[i] == lev)
            li = n->listener_index_of[i];
    if (n->stopping) {
        evutil_closesocket(fd);
        return;
    }
    sk_conn *c = calloc(1, sizeof *c);
    if (!c) {
        evutil_closesocket(fd);
        return;
    }
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    c->node = n;
    c->listener = li;
    c->refs = 1;
    c->from_node = -1;
    c->za_slot = -1;
    c->bev = conn_bev(n, c, fd);
    if (c->bev)
        (void)bufferevent_set_max_single_write(c->bev, MAX_SINGLE_WRITE);
    c->kick_ev = event_new(n->base, -1, 0, conn_kick_cb, c);
    if (!c->bev || !c->kick_ev) {
        if (c->bev)
            bufferevent_free(c->bev);
        else
            evutil_closesocket(fd);
        if (c->kick_ev)
            event_free(c->kick_ev);
        free(c);
        return;
    }
    char host[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (sa->sa_family == AF_INET) {
        struct sockaddr_in *s4 = (struct sockaddr_in *)sa;
        inet_ntop(AF_INET, &s4->sin_addr, host, sizeof host);
        port = ntohs(s4->sin_port);
    } else if (sa->sa_family == AF_INET6) {
        struct sockaddr_in6 *s6 = (struct sockaddr_in6 *)sa;
        inet_ntop(AF_INET6, &s6->sin6_addr, host, sizeof host);
        port = ntohs(s6->sin6_port);
    }
    snprintf(c->peer, sizeof c->peer, "%s:%d", host, port);
    if ((size_t)salen <= sizeof c->addr)
        memcpy(&c->addr, sa, (size_t)salen);
    c->last_active_ms = sk_mono_ms();
    bufferevent_setcb(c->bev, conn_read_cb, conn_write_cb, conn_event_cb, c);
    /* Resume reading once half the output limit has drained. */
    bufferevent_setwatermark(c->bev, EV_WRITE, (size_t)n->cfg->max_output_bytes_per_connection / 2,
                             0);
    c->next = n->conns;
    if (n->conns)
        n->conns->prev = c;
    n->conns = c;
    n->nconns++;
    if (n->paused) {
        c->read_enabled = false;
        bufferevent_disable(c->bev, EV_READ);
    } else {
        c->read_enabled = true;
        bufferevent_enable(c->bev, EV_READ | EV_WRITE);
    }
    bufferevent_enable(c->bev, EV_WRITE);
    SK_DEBUG("net", "connection from %s", c->peer);
}

int sk_net_check_ports(const sk_config *cfg, char *why, size_t whylen)
{
    for (int i = 0; i < cfg->nlisteners; i++) {
        const sk_listener *l = &cfg->listeners[i];
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        char port[16];
        snprintf(port, sizeof port, "%d", l->port);
        if (getaddrinfo(l->host[0] ? l->host : NULL, port, &hints, &res) != 0)
            continue; /* sk_net_listen says why */
        int free_addrs = 0, err = 0;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
            int one = 1;
            if (fd < 0)
                continue;
            (void)setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
            if (bind(fd, ai->ai_addr, ai->ai_addrlen) == 0)
                free_addrs++;
            else
                err = errno;
            close(fd);
        }
        freeaddrinfo(res);
        if (!free_addrs && err) {
            snprintf(why, whylen, "listener %s://%s:%d: cannot bind: %s", l->name, l->host,
                     l->port, strerror(err));
            return SK_ERR_INVAL;
        }
    }
    return 0;
}

static bool needs_tls(const sk_config *cfg)
{
    for (int i = 0; i < cfg->nlisteners; i++)
        if (SK_SEC_IS_TLS(cfg->listeners[i].protocol))
            return true;
    return false;
}

typedef struct tls_reload {
    sk_node *n;
    SSL_CTX *ctx;
    bool want_client; /* the inter-broker listener is TLS: the client side too */
    SSL_CTX *client;  /* the node-to-node client's new context */
    char why[512];
} tls_reload;

static bool inter_tls(const sk_node *n)
{
    const sk_listener *inter = sk_config_inter_listener(n->cfg);
    return n->cluster && inter && SK_SEC_IS_TLS(inter->protocol);
}

static void tls_reload_work(void *arg)
{
    tls_reload *t = arg;
    t->ctx = sk_tls_load(t->n->cfg, t->why, sizeof t->why);
    if (t->ctx && t->want_client) {
        t->client = sk_tls_load_client(t->n->cfg, t->why, sizeof t->why);
        if (!t->client) {
            sk_tls_free(t->ctx);
            t->ctx = NULL;
        }
    }
}

static void tls_reload_done(void *arg)
{
    tls_reload *t = arg;
    t->n->tls_reloading = false;
    if (t->ctx) {
        sk_tls_swap(&t->n->tls_ctx, t->ctx);
        if (t->client) {
            const sk_config *cfg = t->n->cfg;
            rpc_client_set_tls(sk_cluster_rpc(t->n->cluster), t->client,
                               *cfg->ssl_endpoint_identification_algorithm != 0);
            sk_tls_free(t->client);
        }
        SK_INFO("net", "TLS key, certificates and trust store reloaded; new connections use "
                "them");
    } else {
        SK_ERROR("net", "TLS reload failed, the previous certificates stay in use: %s", t->why);
    }
    free(t);
}

void sk_net_reload_tls(sk_node *n)
{
    if (!needs_tls(n->cfg) || n->tls_reloading)
        return;
    tls_reload *t = calloc(1, sizeof *t);
    if (!t)
        return;
    t->n = n;
    t->want_client = inter_tls(n); /* read here: the worker touches no node state */
    if (sk_workq_submit(n->readers, tls_reload_work, tls_reload_done, t) != 0) {
        free(t);
        return;
    }
    n->tls_reloading = true;
}

int sk_net_listen(sk_node *n, char *why, size_t whylen)
{
    if (!n->reap_ev)
        n->reap_ev = event_new(n->base, -1, 0, reap_cb, n);
    /* Start-up, before the loop runs: the files are read here once. */
    if (needs_tls(n->cfg) && !n->tls_ctx) {
        n->tls_ctx = sk_tls_load(n->cfg, why, whylen);
        if (!n->tls_ctx)
            return SK_ERR_INVAL;
        /* Checked with the configuration already: this only compiles. */
        if (sk_pmap_parse(n->cfg->ssl_principal_mapping_rules, &n->pmap, why, whylen) != 0)
            return SK_ERR_INVAL;
    }
    for (int i = 0; i < n->cfg->nlisteners; i++) {
        const sk_listener *l = &n->cfg->listeners[i];
        struct addrinfo hints = {0}, *res = NULL;
        hints.ai_family = AF_UNSPEC;
        hints.ai_socktype = SOCK_STREAM;
        hints.ai_flags = AI_PASSIVE;
        char port[16];
        snprintf(port, sizeof port, "%d", l->port);
        int rc = getaddrinfo(l->host[0] ? l->host : NULL, port, &hints, &res);
        if (rc != 0) {
            snprintf(why, whylen, "listener %s://%s:%d: %s", l->name, l->host, l->port,
                     gai_strerror(rc));
            return SK_ERR_INVAL;
        }
        int bound = 0;
        char last_err[128] = "";
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
            if (n->nlisteners == (int)(sizeof n->listeners / sizeof n->listeners[0]))
                break;
            struct evconnlistener *lev = evconnlistener_new_bind(
                n->base, accept_cb, n, LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE | LEV_OPT_CLOSE_ON_EXEC,
                512, ai->ai_addr, (int)ai->ai_addrlen);
            if (!lev) {
                snprintf(last_err, sizeof last_err, "%s", strerror(errno));
                continue;
            }
            n->listener_index_of[n->nlisteners] = i;
            n->listeners[n->nlisteners++] = lev;
            bound++;
            /* A wildcard address covers both families on Linux. */
            if (!l->host[0])
                break;
        }
        freeaddrinfo(res);
        if (!bound) {
            snprintf(why, whylen, "listener %s://%s:%d: cannot bind: %s", l->name, l->host,
                     l->port, last_err);
            return SK_ERR_INVAL;
        }
        SK_INFO("net", "listening on %s://%s:%d (%s)", l->name, l->host[0] ? l->host : "*",
                l->port, sk_secproto_name(l->protocol));
    }
    return 0;
}

void sk_conn_learn_zone(sk_conn *c, const kc_str *client_id)
{
    if (c->zone_known)
        return;
    c->zone_known = true;
    char z[ZONE_MAX];
    zone_detect(c->node->zones, client_id->len > 0 ? client_id->p : NULL,
                client_id->len > 0 ? (size_t)client_id->len : 0, (struct sockaddr *)&c->addr,
                c->node->cfg->listeners[c->listener].name, z);
    snprintf(c->zone, sizeof c->zone, "%s", z);
    sk_xzone_conn_learn(c, client_id->len > 0 ? client_id->p : NULL,
                        client_id->len > 0 ? (size_t)client_id->len : 0);
    if (z[0])
        SK_DEBUG("net", "%s (client %.*s) is in zone %s", c->peer,
                 client_id->len > 0 ? client_id->len : 0, client_id->p, z);
}

const sk_listener *sk_conn_advertised(const sk_conn *c)
{
    const sk_config *cfg = c->node->cfg;
    const char *name = cfg->listeners[c->listener].name;
    for (int i = 0; i < cfg->nadvertised; i++)
        if (strcmp(cfg->advertised[i].name, name) == 0)
            return &cfg->advertised[i];
    return &cfg->advertised[0];
}

void sk_net_destroy(sk_node *n)
{
    sk_net_stop_accepting(n);
    if (n->reap_ev) {
        reap_cb(-1, 0, n);
        event_free(n->reap_ev);
        n->reap_ev = NULL;
    }
    sk_tls_free(n->tls_ctx);
    n->tls_ctx = NULL;
    sk_pmap_free(n->pmap);
    n->pmap = NULL;
}

void sk_net_stop_accepting(sk_node *n)
{
    for (int i = 0; i < n->nlisteners; i++)
        evconnlistener_free(n->listeners[i]);
    n->nlisteners = 0;
}

void sk_net_close_all(sk_node *n)
{
    sk_conn *c = n->conns;
    while (c) {
        sk_conn *next = c->next;
        conn_close(c);
        c = next;
    }
}

int sk_net_open_conns(const sk_node *n)
{
    int k = 0;
    for (const sk_conn *c = n->conns; c; c = c->next)
        k += !c->closed;
    return k;
}

bool sk_net_idle(const sk_node *n)
{
    for (const sk_conn *c = n->conns; c; c = c->next) {
        if (c->closed)
            continue;
        if (c->head)
            return false;
        if (c->bev && evbuffer_get_length(bufferevent_get_output(c->bev)) > 0)
            return false;
    }
    return true;
}

void sk_net_pause(sk_node *n)
{
    if (n->paused)
        return;
    n->paused = true;
    for (sk_conn *c = n->conns; c; c = c->next)
        set_reading(c, false);
}

void sk_net_resume(sk_node *n)
{
    if (!n->paused)
        return;
    n->paused = false;
    for (sk_conn *c = n->conns; c; c = c->next)
        if (!c->closed && may_read(c))
            event_active(c->kick_ev, EV_TIMEOUT, 0);
}

/* Producers out of tokens: stop reading them all. Tokens back: wake them,
 * each time starting one further down the list, so that the first to read
 * (and take the tokens) is not always the same connection. */
void sk_net_pace(sk_node *n)
{
    if (n->pace.holding) {
        for (sk_conn *c = n->conns; c; c = c->next)
            if (c->producer)
                set_reading(c, false);
        return;
    }
    size_t first = n->pace_turn++ % (n->nconns ? n->nconns : 1), i = 0;
    sk_conn *start = n->conns;
    for (; start && i < first; i++)
        start = start->next;
    for (int pass = 0; pass < 2; pass++) {
        sk_conn *end = pass ? start : NULL;
        for (sk_conn *c = pass ? n->conns : start; c != end; c = c->next)
            if (c->producer && !c->closed && !c->read_enabled && may_read(c))
                event_active(c->kick_ev, EV_TIMEOUT, 0);
    }
}

void sk_net_reap_idle(sk_node *n)
{
    int64_t limit = n->cfg->connections_max_idle_ms;
    if (limit <= 0)
        return;
    int64_t now = sk_mono_ms();
    sk_conn *c = n->conns;
    while (c) {
        sk_conn *next = c->next;
        if (!c->closed && !c->head && now - c->last_active_ms > limit) {
            SK_DEBUG("net", "%s idle for %lld ms: closing", c->peer,
                     (long long)(now - c->last_active_ms));
            conn_close(c);
        }
        c = next;
    }
}
