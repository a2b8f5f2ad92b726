/*
 * DescribeAcls, CreateAcls and DeleteAcls, as kafka-acls.sh uses them, with
 * Kafka 4.3's filters, checks and errors (acl.h). The bindings are cluster
 * metadata (acls.h): a change is durable before it is answered.
 *
 * A filter with an unknown code (0, or one Kafka does not know) closes the
 * connection: Kafka cannot parse the request.
 *
 * Without an authorizer (authorizer.class.name) Kafka answers
 * SECURITY_DISABLED, and so does Skiff. DescribeAcls needs DESCRIBE on the
 * cluster, the others ALTER.
 *
 * Thread: the event loop.
 */
#include <stdio.h>
#include <string.h>

#include "acls.h"
#include "authz.h"
#include "cmeta.h"
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "node.h"
#include "sk_arena.h"
#include "sk_err.h"

#define NO_AUTHORIZER "No Authorizer is configured."
/* UNKNOWN_SERVER_ERROR as the wire has it (sk_err.h). */
#define UNKNOWN ((int16_t)sk_err_to_kafka(SK_KAFKA_UNKNOWN_SERVER_ERROR))

/* A request string as a C string in the arena (NULL stays NULL). */
static const char *cstr(sk_req *r, kc_str s)
{
    return s.len < 0 ? NULL : sk_arena_strndup(r->arena, s.p ? s.p : "", (size_t)s.len);
}

/* 0, or the error the whole request gets. */
static int16_t refused(sk_req *r, int8_t op, const char **msg)
{
    if (!sk_authz_on(r->node)) {
        *msg = NO_AUTHORIZER;
        return SK_KAFKA_SECURITY_DISABLED;
    }
    if (!sk_authorize_cluster(r, op)) {
        *msg = NULL;
        return SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
    }
    return 0;
}

/* ---- DescribeAcls ---- */

typedef kp_DescribeAclsResponse_DescribeAclsResource d_res;
typedef kp_DescribeAclsResponse_AclDescription d_acl;

static bool same_resource(const sk_acl *x, const sk_acl *y)
{
    return x->rtype == y->rtype && x->pattern == y->pattern && strcmp(x->name, y->name) == 0;
}

/* Matching bindings grouped by resource: a first pass finds each one's
 * resource and counts, the second fills arrays of the right size. */
static void describe_into(sk_req *r, const sk_acl *f, kp_DescribeAclsResponse *resp)
{
    sk_acl_set *s = sk_acls(r->node);
    int n = sk_acl_count(s), nres = 0;
    d_res *res = sk_req_array(r, &kp_DescribeAclsResponse_DescribeAclsResource_desc, n ? n : 1);
    int *of = sk_arena_alloc(r->arena, sizeof *of * (size_t)(n ? n : 1));
    const sk_acl **first = sk_arena_alloc(r->arena, sizeof *first * (size_t)(n ? n : 1));
    if (!res || !of || !first) {
        resp->error_code = UNKNOWN;
        return;
    }
    for (int i = 0; i < n; i++) {
        const sk_acl *a = sk_acl_at(s, i);
        of[i] = -1;
        if (!sk_acl_filter_matches(f, a))
            continue;
        int k = 0;
        while (k < nres && !same_resource(first[k], a))
            k++;
        if (k == nres) {
            first[nres++] = a;
            res[k] = (d_res){a->rtype, sk_req_str(r, a->name), a->pattern, {0, NULL}};
        }
        res[k].acls.n++;
        of[i] = k;
    }
    for (int k = 0; k < nres; k++) {
        res[k].acls.v = sk_req_array(r, &kp_DescribeAclsResponse_AclDescription_desc,
                                     res[k].acls.n);
        if (!res[k].acls.v) {
            resp->error_code = UNKNOWN;
            return;
        }
        res[k].acls.n = 0;
    }
    for (int i = 0; i < n; i++) {
        const sk_acl *a = sk_acl_at(s, i);
        if (of[i] >= 0)
            res[of[i]].acls.v[res[of[i]].acls.n++] =
                (d_acl){sk_req_str(r, a->principal), sk_req_str(r, a->host), a->op, a->perm};
    }
    resp->resources.n = nres;
    resp->resources.v = res;
}

void h_describe_acls(sk_req *r)
{
    kp_DescribeAclsRequest *req = r->body;
    kp_DescribeAclsResponse *resp = r->resp;
    const char *msg = NULL;
    int16_t err = refused(r, sk_authz_op(r), &msg);
    sk_acl f = {req->resource_type_filter, req->pattern_type_filter,
                cstr(r, req->resource_name_filter), cstr(r, req->principal_filter),
                cstr(r, req->host_filter), req->operation, req->permission_type};
    /* Kafka cannot parse a filter with an unknown code: it closes. */
    if (sk_acl_filter_invalid(&f)) {
        sk_req_close(r, "an ACL filter with an unknown code");
        return;
    }
    if (err) {
        resp->error_code = err;
        resp->error_message = sk_req_str(r, msg);
    } else {
        describe_into(r, &f, resp);
    }
    sk_req_respond(r);
}

/* ---- CreateAcls ---- */

/* NULL when a binding may be created, else Kafka's message and code: a
 * pattern other than LITERAL or PREFIXED fails Kafka's request parsing
 * (UNKNOWN_SERVER_ERROR, no message), the rest its checks. */
static const char *creation_invalid(sk_req *r, const sk_acl *a, int16_t *code)
{
    if (a->pattern != SK_ACL_PAT_LITERAL && a->pattern != SK_ACL_PAT_PREFIXED) {
        *code = UNKNOWN;
        return NULL;
    }
    const char *why = sk_acl_invalid(a);
    if (!why)
        return NULL;
    *code = SK_KAFKA_INVALID_REQUEST;
    if (strcmp(why, SK_ACL_BAD_PRINCIPAL) != 0)
        return why;
    size_t len = strlen(a->principal ? a->principal : "") + 128;
    char *m = sk_arena_alloc(r->arena, len);
    if (m)
        snprintf(m, len,
                 "Could not parse principal from `%s` (no colon is present separating the "
                 "principal type from the principal name)",
                 a->principal ? a->principal : "");
    return m;
}

void h_create_acls(sk_req *r)
{
    kp_CreateAclsRequest *req = r->body;
    kp_CreateAclsResponse *resp = r->resp;
    int32_t n = req->creations.n > 0 ? req->creations.n : 0;
    kp_CreateAclsResponse_AclCreationResult *res =
        sk_req_array(r, &kp_CreateAclsResponse_AclCreationResult_desc, n ? n : 1);
    if (!res) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->results.n = n;
    resp->results.v = res;
    const char *msg = NULL;
    int16_t err = refused(r, sk_authz_op(r), &msg);
    r->pending = 1;
    for (int32_t i = 0; i < n; i++) {
        const kp_CreateAclsRequest_AclCreation *c = &req->creations.v[i];
        sk_acl a = {c->resource_type, c->resource_pattern_type, cstr(r, c->resource_name),
                    cstr(r, c->principal), cstr(r, c->host), c->operation, c->permission_type};
        int16_t code = err;
        const char *why = err ? msg : creation_invalid(r, &a, &code);
        if (code) {
            res[i].error_code = code;
            res[i].error_message = sk_req_str(r, why);
            continue;
        }
        sk_item *it = sk_item_new(r, &res[i].error_code, &res[i].error_message);
        if (!it) {
            res[i].error_code = UNKNOWN;
            continue;
        }
        r->pending++;
        int rc = sk_cmeta_set_acl(r->node, &a, true, sk_item_done, it);
        if (rc)
            sk_item_done(it, rc);
    }
    sk_item_done(&(sk_item){r, &(int16_t){0}, NULL}, 0);
}

/* ---- DeleteAcls ---- */

typedef kp_DeleteAclsResponse_DeleteAclsMatchingAcl m_acl;
typedef kp_DeleteAclsResponse_DeleteAclsFilterResult f_res;

/* A deletion to make once every filter has matched (the local metadata
 * applies each at once, which reorders the set). */
typedef struct del {
    sk_acl a; /* strings in the arena */
    m_acl *out;
} del;

/* The bindings one filter matches; each is deleted once per request. */
static void match(sk_req *r, const sk_acl *f, f_res *out, bool *gone, del *dels, int *ndels)
{
    sk_acl_set *s = sk_acls(r->node);
    int n = sk_acl_count(s);
    m_acl *m = sk_req_array(r, &kp_DeleteAclsResponse_DeleteAclsMatchingAcl_desc, n ? n : 1);
    if (!m) {
        out->error_code = UNKNOWN;
        return;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
        const sk_acl *a = sk_acl_at(s, i);
        if (!sk_acl_filter_matches(f, a))
            continue;
        m[k] = (m_acl){0, {NULL, -1}, a->rtype, sk_req_str(r, a->name), a->pattern,
                       sk_req_str(r, a->principal), sk_req_str(r, a->host), a->op, a->perm};
        if (!gone[i]) {
            gone[i] = true;
            dels[(*ndels)++] = (del){{a->rtype, a->pattern, m[k].resource_name.p,
                                      m[k].principal.p, m[k].host.p, a->op, a->perm},
                                     &m[k]};
        }
        k++;
    }
    out->matching_acls.n = k;
    out->matching_acls.v = m;
}

static void delete_all(sk_req *r, del *dels, int ndels)
{
    for (int i = 0; i < ndels; i++) {
        sk_item *it = sk_item_new(r, &dels[i].out->error_code, &dels[i].out->error_message);
        if (!it || !dels[i].a.name || !dels[i].a.principal || !dels[i].a.host) {
            dels[i].out->error_code = UNKNOWN;
            continue;
        }
        r->pending++;
        int rc = sk_cmeta_set_acl(r->node, &dels[i].a, false, sk_item_done, it);
        if (rc)
            sk_item_done(it, rc);
    }
}

void h_delete_acls(sk_req *r)
{
    kp_DeleteAclsRequest *req = r->body;
    kp_DeleteAclsResponse *resp = r->resp;
    int32_t n = req->filters.n > 0 ? req->filters.n : 0;
    f_res *res = sk_req_array(r, &kp_DeleteAclsResponse_DeleteAclsFilterResult_desc, n ? n : 1);
    int nacl = sk_acl_count(sk_acls(r->node));
    bool *gone = sk_arena_alloc(r->arena, (size_t)(nacl ? nacl : 1));
    del *dels = sk_arena_alloc(r->arena, sizeof *dels * (size_t)(nacl ? nacl : 1));
    int ndels = 0;
    if (!res || !gone || !dels) {
        sk_req_close(r, "out of memory");
        return;
    }
    memset(gone, 0, (size_t)(nacl ? nacl : 1));
    resp->filter_results.n = n;
    resp->filter_results.v = res;
    const char *msg = NULL;
    int16_t err = refused(r, sk_authz_op(r), &msg);
    for (int32_t i = 0; i < n; i++) {
        const kp_DeleteAclsRequest_DeleteAclsFilter *c = &req->filters.v[i];
        sk_acl f = {c->resource_type_filter, c->pattern_type_filter, NULL, NULL, NULL,
                    c->operation, c->permission_type};
        if (sk_acl_filter_invalid(&f)) {
            sk_req_close(r, "an ACL filter with an unknown code");
            return;
        }
    }
    r->pending = 1;
    for (int32_t i = 0; i < n; i++) {
        const kp_DeleteAclsRequest_DeleteAclsFilter *c = &req->filters.v[i];
        sk_acl f = {c->resource_type_filter, c->pattern_type_filter,
                    cstr(r, c->resource_name_filter), cstr(r, c->principal_filter),
                    cstr(r, c->host_filter), c->operation, c->permission_type};
        const char *why = err ? msg : sk_acl_filter_invalid(&f);
        if (err || why) {
            res[i].error_code = err ? err : SK_KAFKA_INVALID_REQUEST;
            res[i].error_message = sk_req_str(r, why);
            continue;
        }
        match(r, &f, &res[i], gone, dels, &ndels);
    }
    delete_all(r, dels, ndels);
    sk_item_done(&(sk_item){r, &(int16_t){0}, NULL}, 0);
}
