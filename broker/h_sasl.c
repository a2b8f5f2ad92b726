#include <event2/event.h>
#include <openssl/crypto.h>
#include <openssl/rand.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "sasl.h"
#include "scram.h"
#include "cmeta.h"
#include "gconf.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

enum { MECH_NONE, MECH_PLAIN, MECH_SCRAM };

struct sk_sasl {
    int mech;              /* what the last handshake chose */
    sk_scram_mech smech;   /* MECH_SCRAM: which */
    bool exchanging;       /* a SCRAM exchange is under way */
    bool raw;              /* after a v0 handshake: bare tokens, no Kafka framing */
    char session_mech[16]; /* the mechanism of the authenticated session */
    int64_t reauth_ms;     /* when it last re-authenticated (monotonic; 0: never) */
    sk_scram_server *scram; /* its state (about 4 KiB: freed once authenticated) */
};

/* Kafka's messages for failed authentication. */
#define PLAIN_FAILED "Authentication failed: Invalid username or password"
#define SCRAM_FAILED_FMT                                                                       \
    "Authentication failed during authentication due to invalid credentials with SASL "       \
    "mechanism %s"

static void scram_state_free(struct sk_sasl *s)
{
    if (s->scram)
        OPENSSL_cleanse(s->scram, sizeof *s->scram);
    free(s->scram);
    s->scram = NULL;
}

void sk_sasl_free(struct sk_sasl *s)
{
    if (!s)
        return;
    scram_state_free(s);
    free(s);
}

static sk_secproto conn_protocol(const sk_conn *c)
{
    return c->node->cfg->listeners[c->listener].protocol;
}

bool sk_sasl_allows(sk_conn *c, int16_t key, const char **why)
{
    if (!SK_SEC_IS_SASL(conn_protocol(c)))
        return true;
    bool auth_api = key == 18 || key == 17 || key == 36;
    if (!c->authenticated) {
        if (key == 36 && !(c->sasl && c->sasl->mech != MECH_NONE)) {
            *why = "SaslAuthenticate before SaslHandshake";
            return false;
        }
        if (!auth_api)
            *why = "a request before SASL authentication";
        return auth_api;
    }
    if (c->session_end_ms && sk_mono_ms() > c->session_end_ms && !auth_api) {
        *why = "the SASL session expired (connections.max.reauth.ms) without re-authentication";
        return false;
    }
    return true;
}

bool sk_sasl_raw(const sk_conn *c)
{
    return c->sasl && c->sasl->raw && !c->authenticated;
}

/* Sends r's SaslAuthenticate answer: a Kafka response, or after a v0
 * handshake the bare token (a failure then just closes, as Kafka does). */
static void answer(sk_req *r)
{
    kp_SaslAuthenticateResponse *resp = r->resp;
    if (!r->raw_sasl) {
        sk_req_respond(r);
        return;
    }
    if (resp->error_code) {
        sk_req_close(r, NULL);
        return;
    }
    size_t n = resp->auth_bytes.len > 0 ? (size_t)resp->auth_bytes.len : 0;
    uint8_t *out = malloc(4 + n);
    if (!out) {
        sk_req_close(r, "out of memory");
        return;
    }
    out[0] = (uint8_t)(n >> 24);
    out[1] = (uint8_t)(n >> 16);
    out[2] = (uint8_t)(n >> 8);
    out[3] = (uint8_t)n;
    if (n)
        memcpy(out + 4, resp->auth_bytes.p, n);
    free(r->out);
    r->out = out;
    r->out_len = 4 + n;
    r->state = SK_REQ_DONE;
    sk_req_finish(r);
}

/* ---- failures: answered late, then the connection closes ---- */

static void late_answer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_req *r = arg;
    r->close_after_reply = true;
    answer(r);
}

static void auth_failed(sk_req *r, const char *msg)
{
    kp_SaslAuthenticateResponse *resp = r->resp;
    resp->error_code = SK_KAFKA_SASL_AUTHENTICATION_FAILED;
    resp->error_message = sk_req_str(r, msg);
    resp->auth_bytes.p = (const uint8_t *)"";
    resp->auth_bytes.len = 0;
    SK_INFO("sasl", "%s: authentication failed: %s", r->conn->peer, msg);
    int32_t ms = r->node->cfg->connection_failed_authentication_delay_ms;
    struct timeval tv = {ms / 1000, (ms % 1000) * 1000};
    if (ms <= 0 || event_base_once(r->node->base, -1, EV_TIMEOUT, late_answer, r, &tv) != 0)
        late_answer(-1, 0, r);
}

/* ---- SaslHandshake ---- */

static bool mechanism_enabled(const sk_config *cfg, const char *m, size_t len)
{
    const char *p = cfg->sasl_enabled_mechanisms;
    while (*p) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l == len && strncmp(p, m, len) == 0)
            return true;
        p += l;
    }
    return false;
}

static void fill_mechanisms(sk_req *r, kp_SaslHandshakeResponse *resp)
{
    const char *p = r->node->cfg->sasl_enabled_mechanisms;
    int n = 0;
    kc_str tmp[8];
    while (*p && n < 8) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l) {
            tmp[n].p = p;
            tmp[n].len = (int32_t)l;
            n++;
        }
        p += l;
    }
    kc_str *out = sk_arena_alloc(r->arena, sizeof *out * (size_t)(n ? n : 1));
    if (!out)
        return;
    memcpy(out, tmp, sizeof *out * (size_t)n);
    resp->mechanisms.n = n;
    resp->mechanisms.v = out;
}

void h_sasl_handshake(sk_req *r)
{
    sk_conn *c = r->conn;
    kp_SaslHandshakeRequest *req = r->body;
    kp_SaslHandshakeResponse *resp = r->resp;
    if (!SK_SEC_IS_SASL(conn_protocol(c))) {
        resp->error_code = SK_KAFKA_ILLEGAL_SASL_STATE;
        sk_req_respond(r);
        return;
    }
    fill_mechanisms(r, resp);
    const char *m = req->mechanism.p;
    size_t ml = req->mechanism.len > 0 ? (size_t)req->mechanism.len : 0;
    if (!mechanism_enabled(r->node->cfg, m ? m : "", ml)) {
        resp->error_code = SK_KAFKA_UNSUPPORTED_SASL_MECHANISM;
        SK_INFO("sasl", "%s: SASL mechanism %.*s is not enabled; closing", c->peer,
                (int)(ml > 64 ? 64 : ml), m ? m : "");
        r->close_after_reply = true;
        sk_req_respond(r);
        return;
    }
    if (!c->sasl && !(c->sasl = calloc(1, sizeof *c->sasl))) {
        sk_req_close(r, "out of memory");
        return;
    }
    /* KIP-368, as Kafka: re-authentication only where sessions expire, and
     * not twice within a second (else the handshake is refused, the
     * connection stays). */
    if (c->authenticated && (r->node->cfg->connections_max_reauth_ms <= 0 ||
                             (c->sasl->reauth_ms && sk_mono_ms() - c->sasl->reauth_ms < 1000))) {
        resp->error_code = SK_KAFKA_ILLEGAL_SASL_STATE;
        resp->mechanisms.n = 0;
        sk_req_respond(r);
        return;
    }
    c->sasl->exchanging = false;
    c->sasl->raw = r->version == 0;
    c->sasl->smech = sk_scram_mech_named(m, ml);
    c->sasl->mech = c->sasl->smech ? MECH_SCRAM : MECH_PLAIN;
    sk_req_respond(r);
}

/* ---- success ---- */

static void authenticated(sk_req *r, const char *user, size_t ulen)
{
    sk_conn *c = r->conn;
    char principal[sizeof c->principal];
    snprintf(principal, sizeof principal, "User:%.*s", (int)ulen, user);
    kp_SaslAuthenticateResponse *resp = r->resp;
    /* KIP-368: re-authentication may not change who the connection is. */
    if (c->authenticated && strcmp(principal, c->principal) != 0) {
        auth_failed(r, "Cannot change principals during re-authentication");
        return;
    }
    int64_t life = r->node->cfg->connections_max_reauth_ms;
    if (life > 0) {
        c->session_end_ms = sk_mono_ms() + life;
        resp->session_lifetime_ms = life;
    }
    snprintf(c->principal, sizeof c->principal, "%s", principal);
    snprintf(c->sasl->session_mech, sizeof c->sasl->session_mech, "%s",
             c->sasl->mech == MECH_PLAIN ? "PLAIN" : sk_scram_mech_name(c->sasl->smech));
    if (c->authenticated)
        c->sasl->reauth_ms = sk_mono_ms();
    c->authenticated = true;
    c->sasl->mech = MECH_NONE;
    c->sasl->exchanging = false;
    SK_DEBUG("sasl", "%s: authenticated as %s", c->peer, c->principal);
    answer(r);
}

/* ---- PLAIN ---- */

/* Whether the JAAS text holds user_<user>="<password>". */
static bool plain_user_ok(const char *jaas, const char *user, size_t ulen, const char *pw,
                          size_t pwlen)
{
    for (const char *p = jaas; jaas && (p = strstr(p, "user_")); p += 5) {
        if (p != jaas && p[-1] != ' ' && p[-1] != '\t' && p[-1] != '\n')
            continue;
        const char *name = p + 5, *eq = strchr(name, '=');
        if (!eq || (size_t)(eq - name) != ulen || memcmp(name, user, ulen) != 0)
            continue;
        const char *v = eq + 1;
        if (*v != '"')
            return false;
        const char *end = strchr(v + 1, '"');
        if (!end)
            return false;
        size_t vl = (size_t)(end - v - 1);
        return vl == pwlen && CRYPTO_memcmp(v + 1, pw, pwlen) == 0;
    }
    return false;
}

static void plain_auth(sk_req *r, const uint8_t *tok, size_t len)
{
    /* authzid NUL authcid NUL password */
    const char *t = (const char *)tok;
    const char *z1 = memchr(t, 0, len);
    const char *z2 = z1 ? memchr(z1 + 1, 0, len - (size_t)(z1 + 1 - t)) : NULL;
    if (!z2) {
        auth_failed(r, "Invalid SASL/PLAIN response: expected 3 tokens");
        return;
    }
    const char *user = z1 + 1, *pw = z2 + 1;
    size_t zl = (size_t)(z1 - t), ul = (size_t)(z2 - user), pl = len - (size_t)(pw - t);
    if (ul == 0 || memchr(pw, 0, pl)) {
        auth_failed(r, "Authentication failed: username not specified");
        return;
    }
    if (zl && (zl != ul || memcmp(t, user, ul) != 0)) {
        auth_failed(r, "Authentication failed: Client requested an authorization id that is "
                       "different from username");
        return;
    }
    const char *jaas = r->node->cfg->listeners[r->conn->listener].plain_jaas;
    if (!plain_user_ok(jaas, user, ul, pw, pl)) {
        auth_failed(r, PLAIN_FAILED);
        return;
    }
    authenticated(r, user, ul);
}

/* ---- SCRAM ---- */

static void scram_failed(sk_req *r)
{
    char msg[200];
    snprintf(msg, sizeof msg, SCRAM_FAILED_FMT, sk_scram_mech_name(r->conn->sasl->smech));
    r->conn->sasl->exchanging = false;
    auth_failed(r, msg);
}

static void scram_got_user(void *arg, int err, const sk_gconf *g, int64_t version)
{
    (void)version;
    sk_req *r = arg;
    struct sk_sasl *s = r->conn->sasl;
    const char *name = sk_scram_mech_name(s->smech);
    sk_scram_cred cred;
    if (!s->scram) {
        scram_failed(r);
        return;
    }
    bool found = false;
    for (int i = 0; !err && g && i < g->n && !found; i++)
        found = strcmp(g->names[i], name) == 0 &&
                sk_scram_cred_parse(s->smech, g->values[i], strlen(g->values[i]), &cred) == 0;
    if (!found) {
        scram_failed(r);
        return;
    }
    uint8_t rnd[18];
    char nonce[32];
    if (RAND_bytes(rnd, sizeof rnd) != 1) {
        scram_failed(r);
        return;
    }
    sk_b64_encode(rnd, sizeof rnd, nonce);
    char out[SK_SCRAM_MAX_MSG];
    size_t ol;
    uint8_t *copy;
    if (sk_scram_server_first(s->scram, &cred, nonce, out, sizeof out, &ol) != 0 ||
        !(copy = sk_arena_alloc(r->arena, ol))) {
        scram_failed(r);
        return;
    }
    memcpy(copy, out, ol);
    kp_SaslAuthenticateResponse *resp = r->resp;
    resp->auth_bytes.p = copy;
    resp->auth_bytes.len = (int32_t)ol;
    answer(r);
}

static void scram_first(sk_req *r, const uint8_t *tok, size_t len)
{
    struct sk_sasl *s = r->conn->sasl;
    char why[128];
    if (!s->scram && !(s->scram = malloc(sizeof *s->scram))) {
        scram_failed(r);
        return;
    }
    sk_scram_init(s->scram, s->smech);
    if (sk_scram_client_first(s->scram, tok, len, why, sizeof why) != 0) {
        SK_DEBUG("sasl", "%s: SCRAM: %s", r->conn->peer, why);
        scram_failed(r);
        return;
    }
    s->exchanging = true;
    int rc = sk_cmeta_get_user_config(r->node, s->scram->user, strlen(s->scram->user),
                                      scram_got_user, r);
    if (rc != 0)
        scram_failed(r);
}

static void scram_final(sk_req *r, const uint8_t *tok, size_t len)
{
    struct sk_sasl *s = r->conn->sasl;
    char why[128] = "no exchange under way", out[SK_SCRAM_MAX_MSG];
    size_t ol;
    uint8_t *copy;
    if (!s->scram ||
        sk_scram_client_final(s->scram, tok, len, out, sizeof out, &ol, why, sizeof why) != 0 ||
        !(copy = sk_arena_alloc(r->arena, ol))) {
        SK_DEBUG("sasl", "%s: SCRAM: %s", r->conn->peer, why);
        scram_failed(r);
        return;
    }
    memcpy(copy, out, ol);
    kp_SaslAuthenticateResponse *resp = r->resp;
    resp->auth_bytes.p = copy;
    resp->auth_bytes.len = (int32_t)ol;
    authenticated(r, s->scram->user, strlen(s->scram->user));
    scram_state_free(s);
}

/* A bare token after a v0 handshake: served as SaslAuthenticate v0. */
void sk_sasl_raw_token(sk_req *r)
{
    r->raw_sasl = true;
    r->entry = sk_api_lookup(36);
    r->version = 0;
    r->hdr.api_key = 36;
    r->arena = sk_arena_new((size_t)r->frame_len * 2 + 65536);
    kp_SaslAuthenticateRequest *req = r->arena ? sk_arena_alloc(r->arena, sizeof *req) : NULL;
    r->resp = r->arena ? sk_req_new_resp(r) : NULL;
    if (!req || !r->resp) {
        sk_req_close(r, "out of memory");
        return;
    }
    req->auth_bytes.p = r->frame;
    req->auth_bytes.len = (int32_t)r->frame_len;
    r->body = req;
    h_sasl_authenticate(r);
}

void h_sasl_authenticate(sk_req *r)
{
    sk_conn *c = r->conn;
    kp_SaslAuthenticateRequest *req = r->body;
    kp_SaslAuthenticateResponse *resp = r->resp;
    resp->auth_bytes.p = (const uint8_t *)"";
    resp->auth_bytes.len = 0;
    if (!SK_SEC_IS_SASL(conn_protocol(c)) || !c->sasl || c->sasl->mech == MECH_NONE) {
        resp->error_code = SK_KAFKA_ILLEGAL_SASL_STATE;
        resp->error_message = sk_req_str(r, "Unexpected SaslAuthenticate request");
        sk_req_respond(r);
        return;
    }
    /* KIP-368, as Kafka: a session is renewed with the mechanism it began
     * with; another one closes the connection. */
    const char *mech = c->sasl->mech == MECH_PLAIN ? "PLAIN" : sk_scram_mech_name(c->sasl->smech);
    if (c->authenticated && strcmp(mech, c->sasl->session_mech) != 0) {
        sk_req_close(r, "re-authentication with another SASL mechanism");
        return;
    }
    const uint8_t *tok = req->auth_bytes.p ? req->auth_bytes.p : (const uint8_t *)"";
    size_t len = req->auth_bytes.len > 0 ? (size_t)req->auth_bytes.len : 0;
    if (c->sasl->mech == MECH_PLAIN)
        plain_auth(r, tok, len);
    else if (!c->sasl->exchanging)
        scram_first(r, tok, len);
    else
        scram_final(r, tok, len);
}
