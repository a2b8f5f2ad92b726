/*
 * The peer client over TLS (rpc_client_set_tls): against a TLS server in this
 * process that requires a client certificate, a call goes through with the
 * client's certificate seen by the server (mutual TLS); it never reaches the
 * server, and fails SK_ERR_IO, when the client has no certificate, when the
 * server's certificate comes from an authority the client does not trust, or
 * (with check_host) when it names another address. Certificates
 * are made here with OpenSSL.
 */
#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/bufferevent_ssl.h>
#include <event2/event.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <openssl/evp.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <cmocka.h>

#include "kc.h"
#include "krpc.h"
#include "peer.h"
#include "sk_arena.h"
#include "sk_err.h"

/* ------------------------------------------------------- certificates */

typedef struct cred {
    EVP_PKEY *key;
    X509 *cert;
} cred;

/* A certificate for CN=cn, signed by issuer (NULL: self-signed, a CA),
 * naming IP address ip in subjectAltName when given. */
static cred make_cred(const char *cn, const cred *issuer, const char *ip)
{
    cred c;
    c.key = EVP_RSA_gen(2048);
    assert_non_null(c.key);
    c.cert = X509_new();
    X509_set_version(c.cert, 2);
    static long serial = 1;
    ASN1_INTEGER_set(X509_get_serialNumber(c.cert), serial++);
    X509_gmtime_adj(X509_getm_notBefore(c.cert), -3600);
    X509_gmtime_adj(X509_getm_notAfter(c.cert), 86400);
    X509_set_pubkey(c.cert, c.key);
    X509_NAME *name = X509_get_subject_name(c.cert);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)cn, -1, -1, 0);
    X509_set_issuer_name(c.cert, issuer ? X509_get_subject_name(issuer->cert) : name);
    X509V3_CTX v3;
    X509V3_set_ctx(&v3, issuer ? issuer->cert : c.cert, c.cert, NULL, NULL, 0);
    X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &v3, NID_basic_constraints,
                                              issuer ? "CA:FALSE" : "critical,CA:TRUE");
    X509_add_ext(c.cert, ext, -1);
    X509_EXTENSION_free(ext);
    if (ip) {
        char san[64];
        snprintf(san, sizeof san, "IP:%s", ip);
        ext = X509V3_EXT_conf_nid(NULL, &v3, NID_subject_alt_name, san);
        X509_add_ext(c.cert, ext, -1);
        X509_EXTENSION_free(ext);
    }
    assert_true(X509_sign(c.cert, issuer ? issuer->key : c.key, EVP_sha256()) > 0);
    return c;
}

static void cred_free(cred *c)
{
    EVP_PKEY_free(c->key);
    X509_free(c->cert);
}

/* A context trusting `ca`, presenting `own` when given. */
static SSL_CTX *make_ctx(bool server, const cred *own, const cred *ca)
{
    SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
    assert_non_null(ctx);
    if (own) {
        assert_int_equal(SSL_CTX_use_certificate(ctx, own->cert), 1);
        assert_int_equal(SSL_CTX_use_PrivateKey(ctx, own->key), 1);
    }
    assert_int_equal(X509_STORE_add_cert(SSL_CTX_get_cert_store(ctx), ca->cert), 1);
    SSL_CTX_set_verify(ctx, server ? SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT
                                   : SSL_VERIFY_PEER,
                       NULL);
    return ctx;
}

/* ------------------------------------------------------------ server */

typedef struct srv {
    struct event_base *base;
    struct evconnlistener *lev;
    SSL_CTX *ctx;
    int port;
    int requests;
    char peer_cn[64]; /* the client certificate's CN, as the server saw it */
    struct bufferevent *conns[8];
} srv;

static void srv_answer(struct bufferevent *bev, uint8_t *frame, size_t len, srv *s)
{
    kc_reader r;
    kc_reader_init(&r, frame, len);
    kc_req_header hdr;
    assert_int_equal(kc_read_req_header(&r, &hdr, true), 0);
    assert_int_equal(hdr.api_key, KR_HANDOFF_READY);
    s->requests++;
    X509 *peer = SSL_get1_peer_certificate(bufferevent_openssl_get_ssl(bev));
    if (peer) {
        X509_NAME_get_text_by_NID(X509_get_subject_name(peer), NID_commonName, s->peer_cn,
                                  sizeof s->peer_cn);
        X509_free(peer);
    }
    kr_HandoffReadyResponse resp;
    kc_init(&kr_HandoffReadyResponse_desc, &resp);
    size_t body = kc_size(&kr_HandoffReadyResponse_desc, 0, true, &resp);
    size_t total = 4 + kc_resp_header_size(true) + body;
    uint8_t *out = malloc(total);
    uint8_t *o = kc_put_i32(out, (int32_t)(total - 4));
    o = kc_put_resp_header(o, hdr.correlation_id, true);
    kc_encode(&kr_HandoffReadyResponse_desc, 0, true, &resp, o);
    bufferevent_write(bev, out, total);
    free(out);
}

static void srv_read_cb(struct bufferevent *bev, void *arg)
{
    struct evbuffer *in = bufferevent_get_input(bev);
    uint8_t h[4];
    while (evbuffer_copyout(in, h, 4) == 4) {
        size_t size = (size_t)h[0] << 24 | (size_t)h[1] << 16 | (size_t)h[2] << 8 | h[3];
        if (evbuffer_get_length(in) < 4 + size)
            return;
        uint8_t *frame = malloc(size);
        evbuffer_drain(in, 4);
        evbuffer_remove(in, frame, size);
        srv_answer(bev, frame, size, arg);
        free(frame);
    }
}

static void srv_event_cb(struct bufferevent *bev, short what, void *arg)
{
    srv *s = arg;
    if (!(what & (BEV_EVENT_EOF | BEV_EVENT_ERROR)))
        return;
    for (int i = 0; i < 8; i++)
        if (s->conns[i] == bev)
            s->conns[i] = NULL;
    bufferevent_free(bev);
}

static void srv_accept_cb(struct evconnlistener *l, evutil_socket_t fd, struct sockaddr *sa,
                          int salen, void *arg)
{
    (void)l;
    (void)sa;
    (void)salen;
    srv *s = arg;
    struct bufferevent *bev = bufferevent_openssl_socket_new(
        s->base, fd, SSL_new(s->ctx), BUFFEREVENT_SSL_ACCEPTING, BEV_OPT_CLOSE_ON_FREE);
    for (int i = 0; i < 8; i++)
        if (!s->conns[i]) {
            s->conns[i] = bev;
            break;
        }
    bufferevent_setcb(bev, srv_read_cb, NULL, srv_event_cb, s);
    bufferevent_enable(bev, EV_READ | EV_WRITE);
}

static void srv_start(srv *s, struct event_base *base, SSL_CTX *ctx)
{
    memset(s, 0, sizeof *s);
    s->base = base;
    s->ctx = ctx;
    struct sockaddr_in sin = {.sin_family = AF_INET};
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    s->lev = evconnlistener_new_bind(base, srv_accept_cb, s,
                                     LEV_OPT_CLOSE_ON_FREE | LEV_OPT_REUSEABLE, 16,
                                     (struct sockaddr *)&sin, sizeof sin);
    assert_non_null(s->lev);
    socklen_t len = sizeof sin;
    getsockname(evconnlistener_get_fd(s->lev), (struct sockaddr *)&sin, &len);
    s->port = ntohs(sin.sin_port);
}

static void srv_stop(srv *s)
{
    evconnlistener_free(s->lev);
    for (int i = 0; i < 8; i++)
        if (s->conns[i])
            bufferevent_free(s->conns[i]);
    SSL_CTX_free(s->ctx);
}

/* ------------------------------------------------------------- calls */

typedef struct outcome {
    int ncb;
    int err;
} outcome;

static void record_cb(void *arg, int err, const void *resp)
{
    (void)resp;
    outcome *o = arg;
    o->ncb++;
    o->err = err;
}

static int64_t now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

/* One HandoffReady through a client with TLS context `client` to a server
 * with context `server` (taken); returns the call's outcome, the server's
 * request count and the CN it saw. */
static outcome one_call(SSL_CTX *client, SSL_CTX *server, bool check_host, const char *dial,
                        int *requests, char *cn, size_t cnlen)
{
    struct event_base *base = event_base_new();
    struct event *tick = event_new(base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 2000};
    event_add(tick, &tv);
    srv s;
    srv_start(&s, base, server);
    rpc_opts o = {.self_id = 3, .connect_timeout_ms = 2000, .backoff_min_ms = 20};
    rpc_client *c = rpc_client_new(base, &o);
    assert_non_null(c);
    rpc_client_set_tls(c, client, check_host);
    assert_int_equal(rpc_peer_set(c, 1, dial, s.port), 0);
    kr_HandoffReadyRequest req;
    kc_init(&kr_HandoffReadyRequest_desc, &req);
    outcome out = {0, 0};
    assert_int_equal(rpc_call(c, 1, KR_HANDOFF_READY, 0, &req, 1500, record_cb, &out), 0);
    int64_t end = now_ms() + 5000;
    while (out.ncb == 0 && now_ms() < end)
        event_base_loop(base, EVLOOP_ONCE);
    assert_int_equal(out.ncb, 1);
    *requests = s.requests;
    snprintf(cn, cnlen, "%s", s.peer_cn);
    rpc_client_destroy(c);
    srv_stop(&s);
    event_base_loop(base, EVLOOP_NONBLOCK);
    event_free(tick);
    event_base_free(base);
    return out;
}

typedef struct pki {
    cred ca, other_ca, server, node, stranger_server, elsewhere_server;
} pki;

static int setup(void **state)
{
    pki *p = calloc(1, sizeof *p);
    p->ca = make_cred("rpc-test-ca", NULL, NULL);
    p->other_ca = make_cred("someone-else", NULL, NULL);
    p->server = make_cred("node-1", &p->ca, "127.0.0.1");
    p->node = make_cred("node-3", &p->ca, "127.0.0.1");
    p->stranger_server = make_cred("node-1", &p->other_ca, "127.0.0.1");
    p->elsewhere_server = make_cred("node-1", &p->ca, "127.0.0.2");
    *state = p;
    return 0;
}

static int teardown(void **state)
{
    pki *p = *state;
    cred_free(&p->ca);
    cred_free(&p->other_ca);
    cred_free(&p->server);
    cred_free(&p->node);
    cred_free(&p->stranger_server);
    cred_free(&p->elsewhere_server);
    free(p);
    return 0;
}

static void test_rpc_auth_mutual_tls(void **state)
{
    pki *p = *state;
    SSL_CTX *client = make_ctx(false, &p->node, &p->ca);
    int requests;
    char cn[64];
    outcome o = one_call(client, make_ctx(true, &p->server, &p->ca), true, "127.0.0.1",
                         &requests, cn, sizeof cn);
    assert_int_equal(o.err, 0);
    assert_int_equal(requests, 1);
    /* The server saw the node's own certificate. */
    assert_string_equal(cn, "node-3");
    SSL_CTX_free(client);
}

static void test_rpc_auth_no_client_certificate(void **state)
{
    pki *p = *state;
    SSL_CTX *client = make_ctx(false, NULL, &p->ca);
    int requests;
    char cn[64];
    outcome o = one_call(client, make_ctx(true, &p->server, &p->ca), true, "127.0.0.1",
                         &requests, cn, sizeof cn);
    /* TLS 1.3: the server refuses after the client's handshake is over, so the
     * request may have been written: it fails either way, and is never served. */
    assert_true(o.err == SK_ERR_IO || o.err == SK_ERR_TIMEOUT);
    assert_int_equal(requests, 0);
    SSL_CTX_free(client);
}

static void test_rpc_auth_untrusted_server(void **state)
{
    pki *p = *state;
    SSL_CTX *client = make_ctx(false, &p->node, &p->ca);
    int requests;
    char cn[64];
    outcome o = one_call(client, make_ctx(true, &p->stranger_server, &p->other_ca), true,
                         "127.0.0.1", &requests, cn, sizeof cn);
    assert_int_equal(o.err, SK_ERR_IO);
    assert_int_equal(requests, 0);
    SSL_CTX_free(client);
}

static void test_rpc_auth_host_checked(void **state)
{
    pki *p = *state;
    /* A certificate of the right authority for another address: refused with
     * check_host (ssl.endpoint.identification.algorithm=https), accepted
     * without. */
    SSL_CTX *client = make_ctx(false, &p->node, &p->ca);
    int requests;
    char cn[64];
    outcome o = one_call(client, make_ctx(true, &p->elsewhere_server, &p->ca), true,
                         "127.0.0.1", &requests, cn, sizeof cn);
    assert_int_equal(o.err, SK_ERR_IO);
    assert_int_equal(requests, 0);
    o = one_call(client, make_ctx(true, &p->elsewhere_server, &p->ca), false, "127.0.0.1",
                 &requests, cn, sizeof cn);
    assert_int_equal(o.err, 0);
    assert_int_equal(requests, 1);
    SSL_CTX_free(client);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rpc_auth_mutual_tls),
        cmocka_unit_test(test_rpc_auth_no_client_certificate),
        cmocka_unit_test(test_rpc_auth_untrusted_server),
        cmocka_unit_test(test_rpc_auth_host_checked),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
