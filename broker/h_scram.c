/*
 * DescribeUserScramCredentials and AlterUserScramCredentials, as
 * kafka-configs --entity-type users --alter --add-config 'SCRAM-SHA-256=[...]'
 * uses them (sasl.h).
 *
 * A user's credentials are one set in the metadata (gconf.h's user configs:
 * one entry per mechanism, scram.h's stored form). A change reads the set,
 * applies the request's deletions and upsertions for that user, and writes
 * the complete set back naming the version it read (cmeta.h). The client
 * sends a salt and the salted password; only the keys derived from them are
 * kept. Errors and messages are Kafka's.
 *
 * Thread: the event loop.
 */
#include <stdio.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "cmeta.h"
#include "dispatch.h"
#include "gconf.h"
#include "handlers.h"
#include "kmsg.h"
#include "node.h"
#include "scram.h"
#include "sk_arena.h"
#include "sk_err.h"

#define MECHS 2 /* SCRAM-SHA-256, SCRAM-SHA-512: codes 1 and 2 */

static void release(sk_req *r)
{
    if (--r->pending == 0)
        sk_req_respond(r);
}

static bool same(kc_str a, kc_str b)
{
    return a.len == b.len && (a.len <= 0 || memcmp(a.p, b.p, (size_t)a.len) == 0);
}

/* ---- Describe ---- */

typedef kp_DescribeUserScramCredentialsResponse_DescribeUserScramCredentialsResult d_result;

static void describe_set(sk_req *r, d_result *res, const sk_gconf *g)
{
    kp_DescribeUserScramCredentialsResponse_CredentialInfo *ci = sk_req_array(
        r, &kp_DescribeUserScramCredentialsResponse_CredentialInfo_desc, MECHS);
    int k = 0;
    for (int i = 0; ci && g && i < g->n; i++) {
        sk_scram_mech m = sk_scram_mech_named(g->names[i], strlen(g->names[i]));
        sk_scram_cred c;
        if (m && k < MECHS && sk_scram_cred_parse(m, g->values[i], strlen(g->values[i]), &c) == 0) {
            ci[k].mechanism = (int8_t)m;
            ci[k++].iterations = c.iterations;
        }
    }
    if (k == 0) {
        res->error_code = SK_KAFKA_RESOURCE_NOT_FOUND;
        res->error_message = sk_req_str(r, "Attempt to describe nonexistent user credentials");
        return;
    }
    res->credential_infos.n = k;
    res->credential_infos.v = ci;
}

typedef struct d_call {
    sk_req *r;
    d_result *res;
} d_call;

static void describe_got(void *arg, int err, const sk_gconf *g, int64_t version)
{
    (void)version;
    d_call *d = arg;
    if (err) {
        const char *msg = NULL;
        d->res->error_code = sk_change_error(err, &msg);
        d->res->error_message = sk_req_str(d->r, msg);
    } else {
        describe_set(d->r, d->res, g);
    }
    release(d->r);
}

/* Every user with credentials. */
static void describe_listed(void *arg, int err, const sk_cmeta_user *users, int n)
{
    sk_req *r = arg;
    kp_DescribeUserScramCredentialsResponse *resp = r->resp;
    if (err) {
        const char *msg = NULL;
        resp->error_code = sk_change_error(err, &msg);
        resp->error_message = sk_req_str(r, msg);
        sk_req_respond(r);
        return;
    }
    d_result *res = sk_req_array(
        r, &kp_DescribeUserScramCredentialsResponse_DescribeUserScramCredentialsResult_desc,
        n ? n : 1);
    int k = 0;
    for (int i = 0; res && i < n; i++) {
        res[k].user.p = sk_arena_strndup(r->arena, users[i].name, users[i].len);
        res[k].user.len = (int32_t)users[i].len;
        describe_set(r, &res[k], users[i].set);
        /* A user whose credentials were all deleted is not listed. */
        k += res[k].error_code == 0;
    }
    resp->results.n = k;
    resp->results.v = res;
    sk_req_respond(r);
}

void h_describe_user_scram_credentials(sk_req *r)
{
    kp_DescribeUserScramCredentialsRequest *req = r->body;
    kp_DescribeUserScramCredentialsResponse *resp = r->resp;
    if (!sk_authorize_cluster(r, sk_authz_op(r))) {
        /* Kafka's error answer: one result per user asked, without the
         * user's name (a null list gets none here; Kafka does not answer). */
        int32_t n = req->users.n > 0 ? req->users.n : 0;
        d_result *res = sk_req_array(
            r, &kp_DescribeUserScramCredentialsResponse_DescribeUserScramCredentialsResult_desc,
            n ? n : 1);
        for (int32_t i = 0; res && i < n; i++)
            res[i].error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        resp->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        resp->results.n = res ? n : 0;
        resp->results.v = res;
        sk_req_respond(r);
        return;
    }
    if (req->users.n <= 0) {
        if (sk_cmeta_list_user_configs(r->node, describe_listed, r) != 0) {
            resp->error_code = SK_KAFKA_REQUEST_TIMED_OUT;
            sk_req_respond(r);
        }
        return;
    }
    int32_t n = req->users.n;
    d_result *res = sk_req_array(
        r, &kp_DescribeUserScramCredentialsResponse_DescribeUserScramCredentialsResult_desc,
        n ? n : 1);
    if (!res) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->results.n = n;
    resp->results.v = res;
    r->pending = 1;
    for (int32_t i = 0; i < n; i++) {
        kc_str u = req->users.v[i].name;
        res[i].user = u;
        bool dup = false;
        for (int32_t j = 0; j < n; j++)
            dup |= j != i && same(u, req->users.v[j].name);
        d_call *d = sk_arena_alloc(r->arena, sizeof *d);
        if (dup || !d || u.len <= 0) {
            res[i].error_code = dup ? SK_KAFKA_DUPLICATE_RESOURCE : SK_KAFKA_RESOURCE_NOT_FOUND;
            res[i].error_message = sk_req_str(
                r, dup ? "Cannot describe SCRAM credentials for the same user twice in a "
                         "single request"
                       : "Attempt to describe nonexistent user credentials");
            continue;
        }
        *d = (d_call){r, &res[i]};
        r->pending++;
        if (sk_cmeta_get_user_config(r->node, u.p, (size_t)u.len, describe_got, d) != 0) {
            r->pending--;
            res[i].error_code = SK_KAFKA_REQUEST_TIMED_OUT;
        }
    }
    release(r);
}

/* ---- Alter ---- */

typedef kp_AlterUserScramCredentialsRequest_ScramCredentialDeletion a_del;
typedef kp_AlterUserScramCredentialsRequest_ScramCredentialUpsertion a_ups;
typedef kp_AlterUserScramCredentialsResponse_AlterUserScramCredentialsResult a_result;

typedef struct a_call {
    sk_req *r;
    a_result *res;
    kc_str user;
} a_call;

static void set_error(sk_req *r, a_result *res, int16_t code, const char *msg)
{
    if (res->error_code)
        return;
    res->error_code = code;
    res->error_message = sk_req_str(r, msg);
}

/* Kafka's checks of one user's changes, before anything is read. */
static void check_user(sk_req *r, const kp_AlterUserScramCredentialsRequest *req, a_result *res)
{
    kc_str u = res->user;
    int seen = 0;
    for (int32_t i = 0; i < req->deletions.n + req->upsertions.n; i++) {
        bool del = i < req->deletions.n;
        const a_del *d = del ? &req->deletions.v[i] : NULL;
        const a_ups *up = del ? NULL : &req->upsertions.v[i - req->deletions.n];
        if (!same(u, del ? d->name : up->name))
            continue;
        int8_t m = del ? d->mechanism : up->mechanism;
        if (m != SK_SCRAM_SHA_256 && m != SK_SCRAM_SHA_512) {
            set_error(r, res, SK_KAFKA_UNSUPPORTED_SASL_MECHANISM, "Unknown SCRAM mechanism");
            continue;
        }
        /* Kafka 4.3 takes one change per user and request, even for two
         * mechanisms. */
        if (seen++)
            set_error(r, res, SK_KAFKA_DUPLICATE_RESOURCE,
                      "A user credential cannot be altered twice in the same request");
        if (!del && up->iterations < SK_SCRAM_MIN_ITERATIONS)
            set_error(r, res, SK_KAFKA_UNACCEPTABLE_CREDENTIAL, "Too few iterations");
        if (!del && up->iterations > SK_SCRAM_MAX_ITERATIONS)
            set_error(r, res, SK_KAFKA_UNACCEPTABLE_CREDENTIAL, "Too many iterations");
        if (!del && (up->salt.len <= 0 || up->salt.len > SK_SCRAM_MAX_SALT ||
                     up->salted_password.len != (int32_t)sk_scram_hash_len(m)))
            set_error(r, res, SK_KAFKA_UNACCEPTABLE_CREDENTIAL, "Invalid salt or salted password");
    }
    if (u.len <= 0)
        set_error(r, res, SK_KAFKA_UNACCEPTABLE_CREDENTIAL, "Username must not be empty");
}

static void alter_done(void *arg, int err)
{
    a_call *a = arg;
    if (err) {
        const char *msg = NULL;
        a->res->error_code = sk_change_error(err, &msg);
        a->res->error_message = sk_req_str(a->r, msg);
    }
    release(a->r);
}

/* The user's new set: its current entries with the request's changes. */
static int new_set(sk_req *r, const sk_gconf *g, a_call *a, const char **names, size_t *nl,
                   const char **values, size_t *vl)
{
    const kp_AlterUserScramCredentialsRequest *req = r->body;
    int n = 0;
    for (int m = SK_SCRAM_SHA_256; m <= SK_SCRAM_SHA_512; m++) {
        const char *name = sk_scram_mech_name(m), *value = NULL;
        for (int i = 0; g && i < g->n; i++)
            if (strcmp(g->names[i], name) == 0)
                value = g->values[i];
        for (int32_t i = 0; i < req->deletions.n; i++)
            if (same(a->user, req->deletions.v[i].name) && req->deletions.v[i].mechanism == m) {
                if (!value)
                    set_error(r, a->res, SK_KAFKA_RESOURCE_NOT_FOUND,
                              "Attempt to delete a user credential that does not exist");
                value = NULL;
            }
        for (int32_t i = 0; i < req->upsertions.n; i++) {
            const a_ups *up = &req->upsertions.v[i];
            sk_scram_cred c;
            char *text = sk_arena_alloc(r->arena, 512);
            if (!same(a->user, up->name) || up->mechanism != m)
                continue;
            if (!text ||
                sk_scram_cred_make(m, up->salt.p, (size_t)up->salt.len, up->salted_password.p,
                                   (size_t)up->salted_password.len, up->iterations, &c) != 0 ||
                sk_scram_cred_format(m, &c, text, 512) != 0)
                return SK_ERR_NOMEM;
            value = text;
        }
        if (value) {
            names[n] = name;
            nl[n] = strlen(name);
            values[n] = value;
            vl[n++] = strlen(value);
        }
    }
    return n;
}

static void alter_got(void *arg, int err, const sk_gconf *g, int64_t version)
{
    a_call *a = arg;
    sk_req *r = a->r;
    const char *names[MECHS], *values[MECHS];
    size_t nl[MECHS], vl[MECHS];
    int n = err ? err : new_set(r, g, a, names, nl, values, vl);
    if (n < 0 || a->res->error_code) {
        if (n < 0)
            alter_done(a, n);
        else
            release(r);
        return;
    }
    int rc = sk_cmeta_set_user_config(r->node, a->user.p, (size_t)a->user.len, version, n, names,
                                      nl, values, vl, alter_done, a);
    if (rc != 0)
        alter_done(a, rc);
}

/* Each user once, in the order the request first names them. */
static int32_t distinct_users(sk_req *r, const kp_AlterUserScramCredentialsRequest *req,
                              a_result *res)
{
    int32_t k = 0;
    for (int32_t i = 0; i < req->deletions.n + req->upsertions.n; i++) {
        kc_str u = i < req->deletions.n ? req->deletions.v[i].name
                                        : req->upsertions.v[i - req->deletions.n].name;
        bool seen = false;
        for (int32_t j = 0; j < k; j++)
            seen |= same(res[j].user, u);
        if (!seen)
            res[k++].user = u;
    }
    (void)r;
    return k;
}

void h_alter_user_scram_credentials(sk_req *r)
{
    kp_AlterUserScramCredentialsRequest *req = r->body;
    kp_AlterUserScramCredentialsResponse *resp = r->resp;
    int32_t total = (req->deletions.n > 0 ? req->deletions.n : 0) +
                    (req->upsertions.n > 0 ? req->upsertions.n : 0);
    req->deletions.n = req->deletions.n > 0 ? req->deletions.n : 0;
    req->upsertions.n = req->upsertions.n > 0 ? req->upsertions.n : 0;
    a_result *res = sk_req_array(
        r, &kp_AlterUserScramCredentialsResponse_AlterUserScramCredentialsResult_desc,
        total ? total : 1);
    if (!res) {
        sk_req_close(r, "out of memory");
        return;
    }
    int32_t n = distinct_users(r, req, res);
    resp->results.n = n;
    resp->results.v = res;
    r->pending = 1;
    bool allowed = sk_authorize_cluster(r, sk_authz_op(r));
    for (int32_t i = 0; i < n; i++) {
        if (!allowed)
            set_error(r, &res[i], SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED, NULL);
        check_user(r, req, &res[i]);
        a_call *a = sk_arena_alloc(r->arena, sizeof *a);
        if (res[i].error_code || !a)
            continue;
        *a = (a_call){r, &res[i], res[i].user};
        r->pending++;
        if (sk_cmeta_get_user_config(r->node, a->user.p, (size_t)a->user.len, alter_got, a) != 0)
            alter_done(a, SK_ERR_AGAIN);
    }
    release(r);
}
