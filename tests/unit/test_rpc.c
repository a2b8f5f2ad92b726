/*
 * Tests of the internal RPC layer: the generated HandoffReady declarations
 * (proto/krpc) through the codec, and the peer client (rpc/peer.c) against a
 * libevent server in this process, on loopback.
 *
 * The server decodes each request with the krpc descriptors and, depending
 * on its mode, answers (optionally holding a batch and answering it in
 * reverse order), stays silent, closes the connection, or answers with a bad
 * frame. Every callback records its outcome and whether it ran inside
 * rpc_call; the tests assert on those records.
 *
 * RPC_TEST_LOG=debug shows what the client logs.
 */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "kc.h"
#include "kmsg.h"
#include "krpc.h"
#include "peer.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static uint32_t be32(const uint8_t *b)
{
    return (uint32_t)b[0] << 24 | (uint32_t)b[1] << 16 | (uint32_t)b[2] << 8 | b[3];
}

static kc_uuid topic_id(uint8_t seed)
{
    kc_uuid u;
    for (int i = 0; i < 16; i++)
        u.b[i] = (uint8_t)(seed * 16 + i);
    return u;
}

/* ------------------------------------------------------------ codec */

static void test_api_table(void **state)
{
    (void)state;
    const kc_api *api = krpc_api_get(KR_HANDOFF_READY);
    assert_non_null(api);
    assert_int_equal(api->key, 10000);
    assert_string_equal(api->name, "HandoffReady");
    assert_int_equal(api->min_ver, 0);
    assert_int_equal(api->max_ver, 0);
    assert_int_equal(api->flex_min, 0);
    assert_ptr_equal(api->req, &kr_HandoffReadyRequest_desc);
    assert_ptr_equal(api->resp, &kr_HandoffReadyResponse_desc);
    assert_int_equal(KRPC_KEY_MIN, 10000);
    assert_int_equal(krpc_api_max_key(), KR_TXN_MARKERS);
    const kc_api *tm = krpc_api_get(KR_TXN_MARKERS);
    assert_non_null(tm);
    assert_string_equal(tm->name, "TxnMarkers");
    assert_ptr_equal(tm->req, &kr_TxnMarkersRequest_desc);
    assert_ptr_equal(tm->resp, &kr_TxnMarkersResponse_desc);
    const kc_api *ns = krpc_api_get(KR_NODE_STATUS);
    assert_non_null(ns);
    assert_string_equal(ns->name, "NodeStatus");
    assert_ptr_equal(ns->resp, &kr_NodeStatusResponse_desc);
    const kc_api *cf = krpc_api_get(KR_CONFIRM);
    assert_non_null(cf);
    assert_string_equal(cf->name, "Confirm");
    assert_ptr_equal(cf->req, &kr_ConfirmRequest_desc);
    assert_ptr_equal(cf->resp, &kr_ConfirmResponse_desc);
    assert_null(krpc_api_get(KRPC_KEY_MIN - 1));
    assert_null(krpc_api_get((int16_t)(krpc_api_max_key() + 1)));
    assert_null(krpc_api_get(18));
    assert_null(krpc_api_get(-1));
    /* The two tables never overlap. */
    assert_true(kc_api_max_key() < KRPC_KEY_MIN);
    assert_null(kc_api_get(KR_HANDOFF_READY));
}

static void test_handoff_ready_roundtrip(void **state)
{
    (void)state;
    kr_HandoffReadyRequest_Partition parts[3];
    for (int i = 0; i < 3; i++) {
        kc_init(&kr_HandoffReadyRequest_Partition_desc, &parts[i]);
        parts[i].topic_id = topic_id((uint8_t)(i + 1));
        parts[i].partition = i * 7;
        parts[i].epoch = 100 + i;
        parts[i].source_log = INT64_C(1) << (40 + i);
        parts[i].source_lsn = -1 - i;
    }
    kr_HandoffReadyRequest req;
    kc_init(&kr_HandoffReadyRequest_desc, &req);
    req.partitions.n = 3;
    req.partitions.v = parts;

    size_t n = kc_size(&kr_HandoffReadyRequest_desc, 0, true, &req);
    /* compact array count, then per partition 16+4+4+8+8 bytes and a tag byte,
     * then the struct's tag byte */
    assert_int_equal(n, 1 + 3 * (16 + 4 + 4 + 8 + 8 + 1) + 1);
    uint8_t *buf = malloc(n);
    assert_non_null(buf);
    assert_ptr_equal(kc_encode(&kr_HandoffReadyRequest_desc, 0, true, &req, buf), buf + n);
    assert_int_equal(buf[0], 4); /* uvarint(n + 1) */

    sk_arena *a = sk_arena_new(0);
    kr_HandoffReadyRequest got;
    kc_reader r;
    kc_reader_init(&r, buf, n);
    assert_int_equal(kc_decode(&kr_HandoffReadyRequest_desc, 0, true, &r, &got, a), 0);
    assert_ptr_equal(r.p, buf + n);
    assert_int_equal(got.partitions.n, 3);
    for (int i = 0; i < 3; i++) {
        const kr_HandoffReadyRequest_Partition *g = &got.partitions.v[i];
        assert_memory_equal(g->topic_id.b, parts[i].topic_id.b, 16);
        assert_int_equal(g->partition, parts[i].partition);
        assert_int_equal(g->epoch, parts[i].epoch);
        assert_true(g->source_log == parts[i].source_log);
        assert_true(g->source_lsn == parts[i].source_lsn);
    }
    /* A truncated body is refused. */
    kc_reader_init(&r, buf, n - 2);
    assert_int_equal(kc_decode(&kr_HandoffReadyRequest_desc, 0, true, &r, &got, a), SK_ERR_PARSE);

    kr_HandoffReadyResponse_Partition rp[2];
    for (int i = 0; i < 2; i++) {
        kc_init(&kr_HandoffReadyResponse_Partition_desc, &rp[i]);
        rp[i].topic_id = topic_id((uint8_t)(9 + i));
        rp[i].partition = i;
        rp[i].error_code = (int16_t)(i ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : 0);
    }
    kr_HandoffReadyResponse resp;
    kc_init(&kr_HandoffReadyResponse_desc, &resp);
    resp.error_code = SK_KAFKA_NONE;
    resp.partitions.n = 2;
    resp.partitions.v = rp;
    size_t m = kc_size(&kr_HandoffReadyResponse_desc, 0, true, &resp);
    uint8_t *rb = malloc(m);
    assert_non_null(rb);
    assert_ptr_equal(kc_encode(&kr_HandoffReadyResponse_desc, 0, true, &resp, rb), rb + m);
    kr_HandoffReadyResponse rgot;
    kc_reader_init(&r, rb, m);
    assert_int_equal(kc_decode(&kr_HandoffReadyResponse_desc, 0, true, &r, &rgot, a), 0);
    assert_int_equal(rgot.throttle_time_ms, 0);
    assert_int_equal(rgot.error_code, 0);
    assert_int_equal(rgot.partitions.n, 2);
    assert_memory_equal(rgot.partitions.v[1].topic_id.b, rp[1].topic_id.b, 16);
    assert_int_equal(rgot.partitions.v[1].partition, 1);
    assert_int_equal(rgot.partitions.v[1].error_code, SK_KAFKA_NOT_LEADER_OR_FOLLOWER);
    /* Re-encoding the decoded struct gives the same bytes. */
    uint8_t *rb2 = malloc(m);
    assert_non_null(rb2);
    assert_int_equal(kc_size(&kr_HandoffReadyResponse_desc, 0, true, &rgot), m);
    kc_encode(&kr_HandoffReadyResponse_desc, 0, true, &rgot, rb2);
    assert_memory_equal(rb, rb2, m);
    free(rb2);
    free(rb);
    free(buf);
    sk_arena_destroy(a);
}

/* ------------------------------------------------------------ server */

typedef enum {
    SRV_ANSWER,   /* answer every request (in batches, see `batch`) */
    SRV_SILENT,   /* read, never answer */
    SRV_CLOSE,    /* close the connection after reading one request */
    SRV_OVERSIZE, /* answer with an absurd size prefix */
    SRV_GARBAGE,  /* answer with a body that does not decode */
} srv_mode;

#define SRV_MAX 32

typedef struct held {
    struct bufferevent *bev;
    int32_t corr;
    kr_HandoffReadyRequest req;
    uint8_t *frame;
    sk_arena *arena;
} held;

typedef struct srv {
    struct event_base *base;
    struct evconnlistener *lev;
    int port;
    srv_mode mode;
    int batch;     /* hold this many requests, then answer them last first */
    int delay_ms;  /* SRV_ANSWER: answer this late (batch 1 only) */
    int accepted;
    int requests;
    int bad_requests;
    char client_id[64];
    struct bufferevent *conns[SRV_MAX];
    held held[SRV_MAX];
    int nheld;
} srv;

static void srv_conn_forget(srv *s, struct bufferevent *bev)
{
    for (int i = 0; i < SRV_MAX; i++)
        if (s->conns[i] == bev)
            s->conns[i] = NULL;
    for (int i = 0; i < s->nheld; i++)
        if (s->held[i].bev == bev)
            s->held[i].bev = NULL;
}

static void held_free(held *h)
{
    free(h->frame);
    sk_arena_destroy(h->arena);
    memset(h, 0, sizeof *h);
}

static void srv_answer(srv *s, held *h)
{
    if (!h->bev)
        return;
    int32_t n = h->req.partitions.n;
    kr_HandoffReadyResponse resp;
    kc_init(&kr_HandoffReadyResponse_desc, &resp);
    kr_HandoffReadyResponse_Partition *p = kc_new_array(h->arena,
                                                        &kr_HandoffReadyResponse_Partition_desc, n);
    for (int32_t i = 0; i < n; i++) {
        p[i].topic_id = h->req.partitions.v[i].topic_id;
        p[i].partition = h->req.partitions.v[i].partition;
        /* Recognisable per request: the epoch echoed as an error code. */
        p[i].error_code = (int16_t)h->req.partitions.v[i].epoch;
    }
    resp.partitions.n = n;
    resp.partitions.v = p;
    size_t body = kc_size(&kr_HandoffReadyResponse_desc, 0, true, &resp);
    size_t total = 4 + kc_resp_header_size(true) + body;
    uint8_t *out = malloc(total);
    uint8_t *o = kc_put_i32(out, (int32_t)(total - 4));
    o = kc_put_resp_header(o, h->corr, true);
    kc_encode(&kr_HandoffReadyResponse_desc, 0, true, &resp, o);
    bufferevent_write(h->bev, out, total);
    free(out);
    (void)s;
}

static void srv_answer_held(srv *s)
{
    for (int i = s->nheld - 1; i >= 0; i--) {
        srv_answer(s, &s->held[i]);
        held_free(&s->held[i]);
    }
    s->nheld = 0;
}

static void srv_delay_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv_answer_held(arg);
}

static void srv_bad_answer(srv *s, struct bufferevent *bev, int32_t corr)
{
    uint8_t out[16];
    uint8_t *o = out;
    if (s->mode == SRV_OVERSIZE) {
        o = kc_put_i32(o, 0x7ffffff0);
        o = kc_put_i32(o, corr);
        *o++ = 0;
    } else {
        /* header v1, then two bytes where ThrottleTimeMs needs four */
        o = kc_put_i32(o, 4 + 1 + 2);
        o = kc_put_i32(o, corr);
        *o++ = 0;
        *o++ = 0;
        *o++ = 0;
    }
    bufferevent_write(bev, out, (size_t)(o - out));
}

/* One request frame (without its size prefix), owned. Returns false when
 * the connection was closed. */
static bool srv_request(srv *s, struct bufferevent *bev, uint8_t *frame, size_t len)
{
    held h = {.bev = bev, .frame = frame, .arena = sk_arena_new(0)};
    kc_reader r;
    kc_reader_init(&r, frame, len);
    kc_req_header hdr;
    if (kc_read_req_header(&r, &hdr, true) != 0 || hdr.api_key != KR_HANDOFF_READY ||
        hdr.api_version != 0 ||
        kc_decode(&kr_HandoffReadyRequest_desc, 0, true, &r, &h.req, h.arena) != 0 ||
        r.p != r.end) {
        s->bad_requests++;
        held_free(&h);
        return true;
    }
    s->requests++;
    snprintf(s->client_id, sizeof s->client_id, "%.*s", hdr.client_id.len > 0 ?
             hdr.client_id.len : 0, hdr.client_id.p);
    h.corr = hdr.correlation_id;
    switch (s->mode) {
    case SRV_SILENT:
        held_free(&h);
        return true;
    case SRV_CLOSE:
        held_free(&h);
        srv_conn_forget(s, bev);
        bufferevent_free(bev);
        return false;
    case SRV_OVERSIZE:
    case SRV_GARBAGE:
        srv_bad_answer(s, bev, h.corr);
        held_free(&h);
        return true;
    case SRV_ANSWER:
        break;
    }
    s->held[s->nheld++] = h;
    if (s->delay_ms > 0) {
        struct timeval tv = {0, s->delay_ms * 1000};
        event_base_once(s->base, -1, EV_TIMEOUT, srv_delay_cb, s, &tv);
    } else if (s->nheld >= s->batch) {
        srv_answer_held(s);
    }
    return true;
}

static void srv_read_cb(struct bufferevent *bev, void *arg)
{
    srv *s = arg;
    struct evbuffer *in = bufferevent_get_input(bev);
    for (;;) {
        uint8_t h[4];
        if (evbuffer_copyout(in, h, 4) < 4)
            return;
        size_t size = be32(h);
        if (evbuffer_get_length(in) < 4 + size)
            return;
        uint8_t *frame = malloc(size);
        evbuffer_drain(in, 4);
        evbuffer_remove(in, frame, size);
        if (!srv_request(s, bev, frame, size))
            return;
    }
}

static void srv_event_cb(struct bufferevent *bev, short what, void *arg)
{
    srv *s = arg;
    if (what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)) {
        srv_conn_forget(s, bev);
        bufferevent_free(bev);
    }
}

static void srv_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                          int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    srv *s = arg;
    struct bufferevent *bev = bufferevent_socket_new(s->base, fd, BEV_OPT_CLOSE_ON_FREE);
    s->accepted++;
    for (int i = 0; i < SRV_MAX; i++)
        if (!s->conns[i]) {
            s->conns[i] = bev;
            break;
        }
    bufferevent_setcb(bev, srv_read_cb, NULL, srv_event_cb, s);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

/* Listens on 127.0.0.1:port (0: any free port). */
static void srv_start(srv *s, struct event_base *base, int port, srv_mode mode)
{
    memset(s, 0, sizeof *s);
    s->base = base;
    s->mode = mode;
    s->batch = 1;
    struct sockaddr_in sin = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->lev = evconnlistener_new_bind(base, srv_accept_cb, s,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                     (struct sockaddr *)&sin, sizeof sin);
    assert_non_null(s->lev);
    socklen_t len = sizeof sin;
    getsockname(evconnlistener_get_fd(s->lev), (struct sockaddr *)&sin, &len);
    s->port = ntohs(sin.sin_port);
}

/* Stops listening and closes every connection (the client sees EOF). */
static void srv_stop(srv *s)
{
    if (s->lev)
        evconnlistener_free(s->lev);
    s->lev = NULL;
    for (int i = 0; i < s->nheld; i++)
        held_free(&s->held[i]);
    s->nheld = 0;
    for (int i = 0; i < SRV_MAX; i++)
        if (s->conns[i]) {
            bufferevent_free(s->conns[i]);
            s->conns[i] = NULL;
        }
}

/* A loopback port nothing listens on. */
static int dead_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    socklen_t len = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &len);
    close(fd);
    return ntohs(sin.sin_port);
}

/* ------------------------------------------------------------ client */

static bool in_rpc_call; /* set around every rpc_call of the tests */
static int cb_inside_call;

typedef struct outcome {
    int ncb; /* callbacks run: must end up 1 */
    int err;
    int64_t at_ms;
    int32_t nparts;
    int32_t part[4];
    int16_t code[4];
    kc_uuid topic[4];
} outcome;

static void record_cb(void *arg, int err, const void *resp)
{
    outcome *o = arg;
    if (in_rpc_call)
        cb_inside_call++;
    o->ncb++;
    o->err = err;
    o->at_ms = now_ms();
    if (err == 0) {
        const kr_HandoffReadyResponse *r = resp;
        o->nparts = r->partitions.n;
        for (int32_t i = 0; i < r->partitions.n && i < 4; i++) {
            o->part[i] = r->partitions.v[i].partition;
            o->code[i] = r->partitions.v[i].error_code;
            o->topic[i] = r->partitions.v[i].topic_id;
        }
    }
}

/* A HandoffReady of one partition `part` at epoch `epoch`. */
static int call(rpc_client *c, int32_t node, int32_t part, int32_t epoch, int64_t timeout_ms,
                outcome *o)
{
    kr_HandoffReadyRequest_Partition p;
    kc_init(&kr_HandoffReadyRequest_Partition_desc, &p);
    p.topic_id = topic_id((uint8_t)part);
    p.partition = part;
    p.epoch = epoch;
    p.source_log = 7;
    p.source_lsn = 1000 + part;
    kr_HandoffReadyRequest req;
    kc_init(&kr_HandoffReadyRequest_desc, &req);
    req.partitions.n = 1;
    req.partitions.v = &p;
    memset(o, 0, sizeof *o);
    in_rpc_call = true;
    int rc = rpc_call(c, node, KR_HANDOFF_READY, 0, &req, timeout_ms, record_cb, o);
    in_rpc_call = false;
    return rc;
}

typedef struct fixture {
    struct event_base *base;
    struct event *tick; /* makes EVLOOP_ONCE return often */
    rpc_client *c;
} fixture;

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static int setup(void **state)
{
    fixture *f = calloc(1, sizeof *f);
    f->base = event_base_new();
    f->tick = event_new(f->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 2000};
    event_add(f->tick, &tv);
    rpc_opts o = {.self_id = 7, .connect_timeout_ms = 500, .backoff_min_ms = 20,
                  .backoff_max_ms = 160};
    f->c = rpc_client_new(f->base, &o);
    assert_non_null(f->c);
    cb_inside_call = 0;
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    fixture *f = *state;
    rpc_client_destroy(f->c);
    event_free(f->tick);
    event_base_free(f->base);
    free(f);
    assert_int_equal(cb_inside_call, 0);
    return 0;
}

/* Runs the loop until *cond (an int) reaches want, or ms pass. */
static bool run_until(fixture *f, const int *cond, int want, int64_t ms)
{
    int64_t end = now_ms() + ms;
    while (*cond < want && now_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
    return *cond >= want;
}

static void run_for(fixture *f, int64_t ms)
{
    int64_t end = now_ms() + ms;
    while (now_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
}

/* ------------------------------------------------------------- tests */

static void test_calls_matched_out_of_order(void **state)
{
    fixture *f = *state;
    srv s;
    srv_start(&s, f->base, 0, SRV_ANSWER);
    s.batch = 3; /* answers the three calls last first */
    assert_int_equal(rpc_peer_set(f->c, 2, "127.0.0.1", s.port), 0);
    assert_int_equal(rpc_peer_get_state(f->c, 2), RPC_PEER_IDLE);
    outcome o[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(call(f->c, 2, 10 + i, 500 + i, 2000, &o[i]), 0);
    assert_int_equal(rpc_peer_get_state(f->c, 2), RPC_PEER_CONNECTING);
    int64_t t0 = now_ms();
    assert_true(run_until(f, &o[0].ncb, 1, 2000));
    assert_true(now_ms() - t0 < 1000);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(o[i].ncb, 1);
        assert_int_equal(o[i].err, 0);
        assert_int_equal(o[i].nparts, 1);
        assert_int_equal(o[i].part[0], 10 + i);
        assert_int_equal(o[i].code[0], 500 + i);
        kc_uuid t = topic_id((uint8_t)(10 + i));
        assert_memory_equal(o[i].topic[0].b, t.b, 16);
    }
    /* answered last first: the third callback ran before the first */
    assert_true(o[2].at_ms <= o[0].at_ms);
    assert_int_equal(s.requests, 3);
    assert_int_equal(s.bad_requests, 0);
    assert_int_equal(s.accepted, 1);
    assert_string_equal(s.client_id, "skiff-node-7");
    assert_int_equal(rpc_peer_get_state(f->c, 2), RPC_PEER_READY);

    /* The connection is kept for the next call. */
    s.batch = 1;
    outcome again;
    assert_int_equal(call(f->c, 2, 1, 42, 2000, &again), 0);
    assert_true(run_until(f, &again.ncb, 1, 2000));
    assert_int_equal(again.err, 0);
    assert_int_equal(again.code[0], 42);
    assert_int_equal(s.accepted, 1);

    rpc_stats st;
    rpc_get_stats(f->c, &st);
    assert_int_equal(st.calls, 4);
    assert_int_equal(st.errors, 0);
    assert_int_equal(st.connects, 1);
    assert_int_equal(st.connect_failures, 0);
    assert_true(st.bytes_out > 4 * 40 && st.bytes_in > 4 * 20);
    srv_stop(&s);
}

/* What rpc_opts.account saw. */
typedef struct acct_seen {
    int32_t node;
    int16_t key;
    size_t out, in;
    int nout, nin;
} acct_seen;

static void acct_cb(void *arg, int32_t node, int16_t key, size_t out, size_t in)
{
    acct_seen *a = arg;
    a->node = node;
    a->key = key;
    a->out += out;
    a->in += in;
    a->nout += out > 0;
    a->nin += in > 0;
}

static void test_byte_accounting(void **state)
{
    fixture *f = *state;
    acct_seen a = {0};
    rpc_opts opts = {.self_id = 7, .account = acct_cb, .account_arg = &a};
    rpc_client *c = rpc_client_new(f->base, &opts);
    srv s;
    srv_start(&s, f->base, 0, SRV_ANSWER);
    assert_int_equal(rpc_peer_set(c, 4, "127.0.0.1", s.port), 0);
    outcome o[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(call(c, 4, i, 1, 2000, &o[i]), 0);
    assert_true(run_until(f, &o[2].ncb, 1, 2000));
    rpc_stats st;
    rpc_get_stats(c, &st);
    /* Every frame, once each way, as the client's own totals count them. */
    assert_int_equal(a.nout, 3);
    assert_int_equal(a.nin, 3);
    assert_int_equal(a.out, st.bytes_out);
    assert_int_equal(a.in, st.bytes_in);
    assert_int_equal(a.node, 4);
    assert_int_equal(a.key, KR_HANDOFF_READY);
    rpc_client_destroy(c);
    srv_stop(&s);
}

static void test_peer_not_listening(void **state)
{
    fixture *f = *state;
    assert_int_equal(rpc_peer_set(f->c, 3, "127.0.0.1", dead_port()), 0);
    outcome o;
    int64_t t0 = now_ms();
    assert_int_equal(call(f->c, 3, 0, 1, 300, &o), 0);
    assert_int_equal(o.ncb, 0);
    rpc_peer_state seen[64];
    int nseen = 0;
    seen[nseen++] = rpc_peer_get_state(f->c, 3);
    while (o.ncb == 0 && now_ms() - t0 < 2000) {
        event_base_loop(f->base, EVLOOP_ONCE);
        rpc_peer_state st = rpc_peer_get_state(f->c, 3);
        if (st != seen[nseen - 1] && nseen < 64)
            seen[nseen++] = st;
    }
    assert_int_equal(o.ncb, 1);
    assert_int_equal(o.err, SK_ERR_IO);
    /* after its timeout, not at the first refusal */
    assert_true(o.at_ms - t0 >= 280);
    assert_true(o.at_ms - t0 < 1000);
    assert_int_equal(seen[0], RPC_PEER_CONNECTING);
    assert_true(nseen >= 3); /* CONNECTING, BACKOFF, CONNECTING, ... */
    assert_int_equal(seen[1], RPC_PEER_BACKOFF);
    for (int i = 0; i < nseen; i++) {
        assert_int_not_equal(seen[i], RPC_PEER_READY);
        assert_int_not_equal(seen[i], RPC_PEER_IDLE);
    }
    rpc_stats st;
    rpc_get_stats(f->c, &st);
    /* delays of 20, 40, 80, 160 ms (less jitter): a handful of attempts */
    assert_true(st.connect_failures >= 2 && st.connect_failures <= 10);
    assert_int_equal(st.connects, 0);
    assert_int_equal(st.errors, 1);
    assert_int_equal(st.timeouts, 0);
    assert_int_equal(st.bytes_out, 0);
}

static void test_server_closes_after_request(void **state)
{
    fixture *f = *state;
    srv s;
    srv_start(&s, f->base, 0, SRV_CLOSE);
    assert_int_equal(rpc_peer_set(f->c, 4, "127.0.0.1", s.port), 0);
    outcome o;
    int64_t t0 = now_ms();
    assert_int_equal(call(f->c, 4, 0, 1, 5000, &o), 0);
    assert_true(run_until(f, &o.ncb, 1, 3000));
    assert_int_equal(o.err, SK_ERR_TIMEOUT); /* written, so possibly applied */
    assert_true(o.at_ms - t0 < 2000);        /* at the EOF, not at the timeout */
    assert_int_equal(s.requests, 1);
    assert_int_equal(rpc_peer_get_state(f->c, 4), RPC_PEER_BACKOFF);
    rpc_stats st;
    rpc_get_stats(f->c, &st);
    assert_int_equal(st.timeouts, 1);
    srv_stop(&s);
}

static void test_server_never_answers(void **state)
{
    fixture *f = *state;
    srv s;
    srv_start(&s, f->base, 0, SRV_SILENT);
    assert_int_equal(rpc_peer_set(f->c, 5, "127.0.0.1", s.port), 0);
    outcome o;
    int64_t t0 = now_ms();
    assert_int_equal(call(f->c, 5, 0, 1, 200, &o), 0);
    assert_true(run_until(f, &o.ncb, 1, 2000));
    assert_int_equal(o.err, SK_ERR_TIMEOUT);
    assert_true(o.at_ms - t0 >= 190);
    assert_int_equal(s.requests, 1);
    /* A call's timeout leaves the connection up. */
    assert_int_equal(rpc_peer_get_state(f->c, 5), RPC_PEER_READY);

    /* A late answer is dropped and the next call gets its own. */
    s.mode = SRV_ANSWER;
    s.delay_ms = 150;
    outcome late, next;
    assert_int_equal(call(f->c, 5, 1, 11, 50, &late), 0);
    assert_true(run_until(f, &late.ncb, 1, 2000));
    assert_int_equal(late.err, SK_ERR_TIMEOUT);
    run_for(f, 200); /* the answer arrives, for no one */
    s.delay_ms = 0;
    assert_int_equal(call(f->c, 5, 2, 22, 2000, &next), 0);
    assert_true(run_until(f, &next.ncb, 1, 2000));
    assert_int_equal(next.err, 0);
    assert_int_equal(next.part[0], 2);
    assert_int_equal(next.code[0], 22);
    assert_int_equal(late.ncb, 1);
    assert_int_equal(s.accepted, 1);
    srv_stop(&s);
}

static void restart_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    srv *s = arg;
    srv_start(s, s->base, s->port, SRV_ANSWER);
}

static void test_reconnects_when_server_returns(void **state)
{
    fixture *f = *state;
    srv s;
    srv_start(&s, f->base, 0, SRV_ANSWER);
    int port = s.port;
    assert_int_equal(rpc_peer_set(f->c, 6, "127.0.0.1", port), 0);
    outcome o;
    assert_int_equal(call(f->c, 6, 0, 1, 2000, &o), 0);
    assert_true(run_until(f, &o.ncb, 1, 2000));
    assert_int_equal(o.err, 0);

    srv_stop(&s); /* EOF: READY -> BACKOFF */
    int64_t t0 = now_ms();
    while (rpc_peer_get_state(f->c, 6) == RPC_PEER_READY && now_ms() - t0 < 2000)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(rpc_peer_get_state(f->c, 6), RPC_PEER_BACKOFF);

    /* A call while the server is away waits, and goes once it is back. */
    struct timeval tv = {0, 300 * 1000};
    s.port = port;
    event_base_once(f->base, -1, EV_TIMEOUT, restart_cb, &s, &tv);
    outcome o2;
    t0 = now_ms();
    assert_int_equal(call(f->c, 6, 3, 33, 3000, &o2), 0);
    assert_true(run_until(f, &o2.ncb, 1, 4000));
    assert_int_equal(o2.err, 0);
    assert_int_equal(o2.code[0], 33);
    assert_true(o2.at_ms - t0 >= 290);
    assert_true(o2.at_ms - t0 < 1500); /* backoff capped at 160 ms */
    assert_int_equal(rpc_peer_get_state(f->c, 6), RPC_PEER_READY);
    rpc_stats st;
    rpc_get_stats(f->c, &st);
    assert_int_equal(st.connects, 2);
    assert_true(st.connect_failures >= 1);
    srv_stop(&s);
}

static void test_queue_cap(void **state)
{
    fixture *f = *state;
    rpc_client_destroy(f->c);
    /* A one-partition HandoffReady frame: size, header v2 with the client id,
     * body. */
    size_t frame = 4 + (2 + 2 + 4 + 2 + strlen("skiff-node-7") + 1) +
                   (1 + 16 + 4 + 4 + 8 + 8 + 1 + 1);
    rpc_opts opts = {.self_id = 7, .backoff_min_ms = 20, .backoff_max_ms = 40,
                     .max_queued_bytes = 2 * frame + frame / 2};
    f->c = rpc_client_new(f->base, &opts);
    assert_int_equal(rpc_peer_set(f->c, 8, "127.0.0.1", dead_port()), 0);
    outcome o[3];
    for (int i = 0; i < 3; i++)
        assert_int_equal(call(f->c, 8, i, 1, 200, &o[i]), 0);
    for (int i = 0; i < 3; i++)
        assert_int_equal(o[i].ncb, 0); /* never inside rpc_call */
    int64_t t0 = now_ms();
    assert_true(run_until(f, &o[2].ncb, 1, 1000));
    assert_int_equal(o[2].err, SK_ERR_AGAIN);
    assert_true(o[2].at_ms - t0 < 100); /* at once, not at the timeout */
    assert_true(run_until(f, &o[1].ncb, 1, 1000));
    assert_int_equal(o[0].err, SK_ERR_IO);
    assert_int_equal(o[1].err, SK_ERR_IO);
    /* Their room is free again. */
    outcome o4;
    assert_int_equal(call(f->c, 8, 9, 1, 50, &o4), 0);
    assert_true(run_until(f, &o4.ncb, 1, 1000));
    assert_int_equal(o4.err, SK_ERR_IO);
}

static void test_bad_response_frames(void **state)
{
    fixture *f = *state;
    rpc_client_destroy(f->c);
    rpc_opts opts = {.self_id = 7, .backoff_min_ms = 20, .max_response = 1 << 20};
    f->c = rpc_client_new(f->base, &opts);
    srv s;
    srv_start(&s, f->base, 0, SRV_OVERSIZE);
    assert_int_equal(rpc_peer_set(f->c, 9, "127.0.0.1", s.port), 0);
    outcome o;
    assert_int_equal(call(f->c, 9, 0, 1, 5000, &o), 0);
    assert_true(run_until(f, &o.ncb, 1, 2000));
    assert_int_equal(o.err, SK_ERR_PARSE);
    assert_int_equal(rpc_peer_get_state(f->c, 9), RPC_PEER_BACKOFF);

    /* A frame of the right size whose body does not decode. */
    s.mode = SRV_GARBAGE;
    outcome g;
    assert_int_equal(call(f->c, 9, 1, 1, 5000, &g), 0);
    assert_true(run_until(f, &g.ncb, 1, 2000));
    assert_int_equal(g.err, SK_ERR_PARSE);
    assert_int_equal(s.accepted, 2); /* each dropped its connection */
    assert_int_equal(s.requests, 2);

    /* The peer is usable again once it answers properly. */
    s.mode = SRV_ANSWER;
    outcome ok;
    assert_int_equal(call(f->c, 9, 2, 5, 5000, &ok), 0);
    assert_true(run_until(f, &ok.ncb, 1, 2000));
    assert_int_equal(ok.err, 0);
    assert_int_equal(ok.code[0], 5);
    srv_stop(&s);
}

static void test_address_change(void **state)
{
    fixture *f = *state;
    srv a, b;
    srv_start(&a, f->base, 0, SRV_SILENT);
    srv_start(&b, f->base, 0, SRV_ANSWER);
    assert_int_equal(rpc_peer_set(f->c, 10, "127.0.0.1", a.port), 0);
    outcome sent;
    int64_t t0 = now_ms();
    assert_int_equal(call(f->c, 10, 0, 1, 5000, &sent), 0);
    assert_true(run_until(f, &a.requests, 1, 2000));
    assert_int_equal(rpc_peer_get_state(f->c, 10), RPC_PEER_READY);
    /* The same address again changes nothing. */
    assert_int_equal(rpc_peer_set(f->c, 10, "127.0.0.1", a.port), 0);
    assert_int_equal(rpc_peer_get_state(f->c, 10), RPC_PEER_READY);
    assert_int_equal(sent.ncb, 0);

    assert_int_equal(rpc_peer_set(f->c, 10, "127.0.0.1", b.port), 0);
    assert_int_equal(rpc_peer_get_state(f->c, 10), RPC_PEER_IDLE);
    assert_int_equal(sent.ncb, 0); /* not inside rpc_peer_set either */
    assert_true(run_until(f, &sent.ncb, 1, 1000));
    assert_int_equal(sent.err, SK_ERR_TIMEOUT); /* written to the old address */
    assert_true(sent.at_ms - t0 < 2000);

    outcome o;
    assert_int_equal(call(f->c, 10, 4, 44, 2000, &o), 0);
    assert_true(run_until(f, &o.ncb, 1, 2000));
    assert_int_equal(o.err, 0);
    assert_int_equal(o.code[0], 44);
    assert_int_equal(b.requests, 1);
    assert_int_equal(a.requests, 1);

    assert_int_equal(rpc_peer_set(f->c, 10, NULL, 1), SK_ERR_INVAL);
    assert_int_equal(rpc_peer_set(f->c, 10, "127.0.0.1", 0), SK_ERR_INVAL);
    assert_int_equal(rpc_peer_set(f->c, 10, "127.0.0.1", 65536), SK_ERR_INVAL);
    srv_stop(&a);
    srv_stop(&b);
}

static void test_peer_remove(void **state)
{
    fixture *f = *state;
    srv s;
    srv_start(&s, f->base, 0, SRV_SILENT);
    assert_int_equal(rpc_peer_set(f->c, 11, "127.0.0.1", s.port), 0);
    assert_int_equal(rpc_peer_set(f->c, 12, "127.0.0.1", dead_port()), 0);
    outcome sent, unsent;
    assert_int_equal(call(f->c, 11, 0, 1, 5000, &sent), 0);
    assert_int_equal(call(f->c, 12, 0, 1, 5000, &unsent), 0);
    assert_true(run_until(f, &s.requests, 1, 2000));
    int64_t t0 = now_ms();
    rpc_peer_remove(f->c, 11);
    rpc_peer_remove(f->c, 12);
    rpc_peer_remove(f->c, 99); /* unknown: nothing */
    assert_int_equal(sent.ncb + unsent.ncb, 0);
    assert_true(run_until(f, &unsent.ncb, 1, 1000));
    assert_true(run_until(f, &sent.ncb, 1, 1000));
    assert_int_equal(sent.err, SK_ERR_TIMEOUT);
    assert_int_equal(unsent.err, SK_ERR_IO);
    assert_true(now_ms() - t0 < 500);
    assert_int_equal(rpc_peer_get_state(f->c, 11), RPC_PEER_IDLE);

    /* A removed node is unknown. */
    outcome o;
    assert_int_equal(call(f->c, 11, 0, 1, 5000, &o), 0);
    assert_true(run_until(f, &o.ncb, 1, 1000));
    assert_int_equal(o.err, SK_ERR_IO);
    srv_stop(&s);
}

typedef struct destroy_probe {
    outcome o;
    rpc_client *c;
    int call_rc;
} destroy_probe;

static void destroy_cb(void *arg, int err, const void *resp)
{
    destroy_probe *d = arg;
    record_cb(&d->o, err, resp);
    /* New calls are refused while the client goes. */
    outcome ignored;
    d->call_rc = call(d->c, 13, 0, 1, 1000, &ignored);
}

static void test_destroy_with_calls_in_flight(void **state)
{
    fixture *f = *state;
    srv s;
    srv_start(&s, f->base, 0, SRV_SILENT);
    assert_int_equal(rpc_peer_set(f->c, 13, "127.0.0.1", s.port), 0);
    assert_int_equal(rpc_peer_set(f->c, 14, "127.0.0.1", dead_port()), 0);
    outcome sent[2], unsent;
    assert_int_equal(call(f->c, 13, 0, 1, 5000, &sent[0]), 0);
    assert_int_equal(call(f->c, 13, 1, 1, 5000, &sent[1]), 0);
    assert_int_equal(call(f->c, 14, 0, 1, 5000, &unsent), 0);
    assert_true(run_until(f, &s.requests, 2, 2000));
    destroy_probe d = {.c = f->c};
    kr_HandoffReadyRequest req;
    kc_init(&kr_HandoffReadyRequest_desc, &req);
    assert_int_equal(rpc_call(f->c, 13, KR_HANDOFF_READY, 0, &req, 5000, destroy_cb, &d), 0);
    assert_true(run_until(f, &s.requests, 3, 2000));

    /* An outcome already known, its callback not run yet, is kept. */
    outcome known;
    assert_int_equal(call(f->c, 99, 0, 1, 5000, &known), 0);

    rpc_client_destroy(f->c);
    f->c = NULL;
    assert_int_equal(known.ncb, 1);
    assert_int_equal(known.err, SK_ERR_IO);
    assert_int_equal(sent[0].ncb, 1);
    assert_int_equal(sent[1].ncb, 1);
    assert_int_equal(unsent.ncb, 1);
    assert_int_equal(d.o.ncb, 1);
    assert_int_equal(sent[0].err, SK_ERR_CLOSED);
    assert_int_equal(sent[1].err, SK_ERR_CLOSED);
    assert_int_equal(unsent.err, SK_ERR_CLOSED);
    assert_int_equal(d.o.err, SK_ERR_CLOSED);
    assert_int_equal(d.call_rc, SK_ERR_CLOSED);
    run_for(f, 20); /* nothing of the client is left to fire */
    assert_int_equal(sent[0].ncb, 1);
    srv_stop(&s);
}

static void test_no_callback_inside_rpc_call(void **state)
{
    fixture *f = *state;
    outcome o;
    /* Unknown node: the failure comes later, from the loop. */
    assert_int_equal(call(f->c, 77, 0, 1, 1000, &o), 0);
    assert_int_equal(o.ncb, 0);
    assert_true(run_until(f, &o.ncb, 1, 500));
    assert_int_equal(o.err, SK_ERR_IO);

    /* Refused arguments: an error, and no callback ever. */
    kr_HandoffReadyRequest req;
    kc_init(&kr_HandoffReadyRequest_desc, &req);
    outcome never = {0};
    assert_int_equal(rpc_call(f->c, 77, (int16_t)(krpc_api_max_key() + 1), 0, &req, 1000,
                             record_cb, &never),
                     SK_ERR_INVAL);
    assert_int_equal(rpc_call(f->c, 77, KP_API_VERSIONS, 0, &req, 1000, record_cb, &never),
                     SK_ERR_INVAL);
    assert_int_equal(rpc_call(f->c, 77, KR_HANDOFF_READY, 1, &req, 1000, record_cb, &never),
                     SK_ERR_INVAL);
    assert_int_equal(rpc_call(f->c, 77, KR_HANDOFF_READY, 0, &req, 0, record_cb, &never),
                     SK_ERR_INVAL);
    assert_int_equal(rpc_call(f->c, 77, KR_HANDOFF_READY, 0, NULL, 1000, record_cb, &never),
                     SK_ERR_INVAL);
    run_for(f, 20);
    assert_int_equal(never.ncb, 0);

    /* READY peer: the answer too comes from the loop. */
    srv s;
    srv_start(&s, f->base, 0, SRV_ANSWER);
    assert_int_equal(rpc_peer_set(f->c, 15, "127.0.0.1", s.port), 0);
    outcome first, second;
    assert_int_equal(call(f->c, 15, 0, 1, 2000, &first), 0);
    assert_true(run_until(f, &first.ncb, 1, 2000));
    assert_int_equal(call(f->c, 15, 0, 2, 2000, &second), 0);
    assert_int_equal(second.ncb, 0);
    assert_true(run_until(f, &second.ncb, 1, 2000));
    assert_int_equal(second.err, 0);
    assert_int_equal(cb_inside_call, 0);
    srv_stop(&s);
}

/* A UDP socket on loopback that never answers: a name server that leaves
 * every lookup in flight. */
static int mute_nameserver(char *addr, size_t len)
{
    int fd = socket(AF_INET, SOCK_DGRAM, 0);
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof sin), 0);
    socklen_t sl = sizeof sin;
    getsockname(fd, (struct sockaddr *)&sin, &sl);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(sin.sin_port));
    return fd;
}

static void test_host_names(void **state)
{
    fixture *f = *state;
    rpc_client_destroy(f->c);
    char ns[64];
    int nsfd = mute_nameserver(ns, sizeof ns);
    rpc_opts opts = {.self_id = 7, .connect_timeout_ms = 100, .backoff_min_ms = 20,
                     .nameservers = ns};
    f->c = rpc_client_new(f->base, &opts);
    assert_non_null(f->c);
    srv s;
    srv_start(&s, f->base, 0, SRV_ANSWER);
    /* From the hosts file, through evdns. */
    assert_int_equal(rpc_peer_set(f->c, 16, "localhost", s.port), 0);
    outcome o;
    assert_int_equal(call(f->c, 16, 1, 61, 2000, &o), 0);
    assert_int_equal(o.ncb, 0);
    assert_true(run_until(f, &o.ncb, 1, 2000));
    assert_int_equal(o.err, 0);
    assert_int_equal(o.code[0], 61);

    /* A lookup that never ends counts against the connect timeout. */
    assert_int_equal(rpc_peer_set(f->c, 17, "node-17.skiff.test", 9092), 0);
    outcome slow;
    assert_int_equal(call(f->c, 17, 0, 1, 5000, &slow), 0);
    run_for(f, 40);
    assert_int_equal(rpc_peer_get_state(f->c, 17), RPC_PEER_CONNECTING);
    rpc_stats st;
    int64_t t0 = now_ms();
    do {
        event_base_loop(f->base, EVLOOP_ONCE);
        rpc_get_stats(f->c, &st);
    } while (st.connect_failures == 0 && now_ms() - t0 < 2000);
    assert_int_equal(st.connect_failures, 1);
    assert_int_equal(slow.ncb, 0); /* it waits for its own timeout */

    /* The client can go with a lookup in flight; evdns calls back later. */
    t0 = now_ms();
    while (rpc_peer_get_state(f->c, 17) != RPC_PEER_CONNECTING && now_ms() - t0 < 2000)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_int_equal(rpc_peer_get_state(f->c, 17), RPC_PEER_CONNECTING);
    rpc_client_destroy(f->c);
    f->c = NULL;
    assert_int_equal(slow.ncb, 1);
    assert_int_equal(slow.err, SK_ERR_CLOSED);
    run_for(f, 20); /* evdns finishes cancelling; the resolver goes */
    srv_stop(&s);
    close(nsfd);

    /* Name servers that are not addresses. */
    rpc_opts bad = {.self_id = 7, .nameservers = "not-an-ip"};
    assert_null(rpc_client_new(f->base, &bad));
    bad.nameservers = " , ";
    assert_null(rpc_client_new(f->base, &bad));
    bad.nameservers = "127.0.0.1:53, [::1]:53";
    f->c = rpc_client_new(f->base, &bad);
    assert_non_null(f->c);
}

int main(void)
{
    const char *lv = getenv("RPC_TEST_LOG");
    sk_log_set_level(lv && sk_log_parse_level(lv) >= 0 ? sk_log_parse_level(lv) : SK_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_api_table),
        cmocka_unit_test(test_handoff_ready_roundtrip),
        cmocka_unit_test_setup_teardown(test_calls_matched_out_of_order, setup, teardown),
        cmocka_unit_test_setup_teardown(test_byte_accounting, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_not_listening, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_closes_after_request, setup, teardown),
        cmocka_unit_test_setup_teardown(test_server_never_answers, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reconnects_when_server_returns, setup, teardown),
        cmocka_unit_test_setup_teardown(test_queue_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_response_frames, setup, teardown),
        cmocka_unit_test_setup_teardown(test_address_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_peer_remove, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_with_calls_in_flight, setup, teardown),
        cmocka_unit_test_setup_teardown(test_no_callback_inside_rpc_call, setup, teardown),
        cmocka_unit_test_setup_teardown(test_host_names, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
