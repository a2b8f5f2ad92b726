#include "etcd_json.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "b64.h"
#include "sk_err.h"

/* ---- stream splitter ---- */

/* Buffers of idle watches shrink back to this after a big message. */
#define EJ_KEEP_CAP (64 * 1024)

void ej_stream_init(ej_stream *s, size_t max)
{
    memset(s, 0, sizeof *s);
    s->max = max;
}

void ej_stream_reset(ej_stream *s)
{
    s->len = 0;
    s->depth = 0;
    s->in_str = s->esc = false;
    if (s->cap > EJ_KEEP_CAP) {
        free(s->buf);
        s->buf = NULL;
        s->cap = 0;
    }
}

void ej_stream_free(ej_stream *s)
{
    free(s->buf);
    s->buf = NULL;
    s->len = s->cap = 0;
}

static int stream_append(ej_stream *s, const char *p, size_t n)
{
    if (n > s->max - s->len)
        return EJ_TOO_BIG;
    if (s->len + n > s->cap) {
        size_t cap = s->cap ? s->cap : 4096;
        while (cap < s->len + n)
            cap *= 2;
        if (cap > s->max)
            cap = s->max;
        char *b = realloc(s->buf, cap);
        if (!b)
            return EJ_TOO_BIG;
        s->buf = b;
        s->cap = cap;
    }
    memcpy(s->buf + s->len, p, n);
    s->len += n;
    return EJ_MORE;
}

/* Advances the lexer over p[0..n) and returns how many bytes belong to the
 * current object: all of them, or up to and including its closing brace. */
static size_t stream_scan(ej_stream *s, const char *p, size_t n, bool *complete)
{
    *complete = false;
    for (size_t i = 0; i < n; i++) {
        char ch = p[i];
        if (s->in_str) {
            if (s->esc)
                s->esc = false;
            else if (ch == '\\')
                s->esc = true;
            else if (ch == '"')
                s->in_str = false;
        } else if (ch == '"') {
            s->in_str = true;
        } else if (ch == '{' || ch == '[') {
            s->depth++;
        } else if ((ch == '}' || ch == ']') && --s->depth == 0) {
            *complete = true;
            return i + 1;
        }
    }
    return n;
}

int ej_stream_feed(ej_stream *s, const char *p, size_t n, ej_msg_fn fn, void *ctx)
{
    size_t i = 0;
    while (i < n) {
        if (s->depth == 0) {
            char ch = p[i];
            if (ch == ' ' || ch == '\n' || ch == '\r' || ch == '\t') {
                i++;
                continue;
            }
            if (ch != '{')
                return EJ_BAD;
        }
        bool complete;
        size_t take = stream_scan(s, p + i, n - i, &complete);
        int rc = stream_append(s, p + i, take);
        if (rc != EJ_MORE)
            return rc;
        i += take;
        if (complete) {
            rc = fn(ctx, s->buf, s->len);
            ej_stream_reset(s);
            if (rc != EJ_MORE)
                return rc;
        }
    }
    return EJ_MORE;
}

/* ---- request bodies ---- */

/* Every setter below takes a possibly NULL value (an allocation that failed)
 * and reports failure, so that builders check once per field. */
static bool put(json_t *o, const char *name, json_t *v)
{
    return v && json_object_set_new(o, name, v) == 0;
}

static json_t *jbytes(const uint8_t *p, size_t n)
{
    size_t len = b64_encoded_len(n);
    char small[256];
    char *s = len < sizeof small ? small : malloc(len + 1);
    if (!s)
        return NULL;
    b64_encode(p, n, s);
    json_t *v = json_stringn(s, len);
    if (s != small)
        free(s);
    return v;
}

/* int64 as a decimal string: protobuf's JSON form, exact where a JSON
 * number might not be. */
static json_t *jint64(int64_t v)
{
    char s[24];
    snprintf(s, sizeof s, "%lld", (long long)v);
    return json_string(s);
}

/* range_end as etcd.h defines it: NULL for just the key; length 0 for "to
 * the end of the key space", which etcd spells as the single byte 0. */
static bool put_range_end(json_t *o, const uint8_t *re, size_t relen)
{
    static const uint8_t zero = 0;
    if (!re)
        return true;
    return relen ? put(o, "range_end", jbytes(re, relen)) : put(o, "range_end", jbytes(&zero, 1));
}

static json_t *finish(json_t *o, bool ok)
{
    if (!ok) {
        json_decref(o);
        return NULL;
    }
    return o;
}

json_t *ej_range(const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
                 int64_t limit, int64_t revision, unsigned flags)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = put(o, "key", jbytes(key, klen)) && put_range_end(o, range_end, relen);
    if (ok && limit > 0)
        ok = put(o, "limit", jint64(limit));
    if (ok && revision > 0)
        ok = put(o, "revision", jint64(revision));
    if (ok && (flags & ETCD_KEYS_ONLY))
        ok = put(o, "keys_only", json_true());
    if (ok && (flags & ETCD_COUNT_ONLY))
        ok = put(o, "count_only", json_true());
    return finish(o, ok);
}

json_t *ej_put(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen, int64_t lease)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = put(o, "key", jbytes(key, klen)) && put(o, "value", jbytes(value, vlen));
    if (ok && lease)
        ok = put(o, "lease", jint64(lease));
    return finish(o, ok);
}

json_t *ej_delete(const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen)
{
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = put(o, "key", jbytes(key, klen)) && put_range_end(o, range_end, relen);
    return finish(o, ok);
}

static const char *const cmp_results[] = {"EQUAL", "GREATER", "LESS", "NOT_EQUAL"};
static const char *const cmp_targets[] = {"VERSION", "CREATE", "MOD", "VALUE", "LEASE"};
/* The Compare field that holds the operand, by target. */
static const char *const cmp_fields[] = {"version", "create_revision", "mod_revision", "value",
                                         "lease"};

static json_t *compare(const etcd_cmp *c)
{
    if ((unsigned)c->result > ETCD_CMP_NOT_EQUAL || (unsigned)c->target > ETCD_TARGET_LEASE ||
        !c->key || !c->klen)
        return NULL;
    json_t *o = json_object();
    if (!o)
        return NULL;
    bool ok = put(o, "key", jbytes(c->key, c->klen)) && put_range_end(o, c->range_end, c->relen) &&
              put(o, "result", json_string(cmp_results[c->result])) &&
              put(o, "target", json_string(cmp_targets[c->target]));
    const char *field = cmp_fields[c->target];
    if (ok && c->target == ETCD_TARGET_VALUE)
        ok = put(o, field, jbytes(c->value, c->vlen));
    else if (ok)
        ok = put(o, field, jint64(c->number));
    return finish(o, ok);
}

static json_t *request_op(const etcd_op *op)
{
    if (!op->key || !op->klen)
        return NULL;
    json_t *inner;
    const char *name;
    switch (op->type) {
    case ETCD_OP_RANGE:
        inner = ej_range(op->key, op->klen, op->range_end, op->relen, 0, 0, 0);
        name = "request_range";
        break;
    case ETCD_OP_PUT:
        inner = ej_put(op->key, op->klen, op->value, op->vlen, op->lease);
        name = "request_put";
        break;
    case ETCD_OP_DELETE:
        inner = ej_delete(op->key, op->klen, op->range_end, op->relen);
        name = "request_delete_range";
        break;
    default:
        return NULL;
    }
    json_t *o = json_object();
    if (!o) {
        json_decref(inner);
        return NULL;
    }
    return finish(o, put(o, name, inner));
}

static bool put_ops(json_t *o, const char *name, const etcd_op *ops, size_t n)
{
    json_t *a = json_array();
    bool ok = a != NULL;
    for (size_t i = 0; ok && i < n; i++) {
        json_t *op = request_op(&ops[i]);
        ok = op && json_array_append_new(a, op) == 0;
    }
    if (!ok) {
        json_decref(a);
        return false;
    }
    return put(o, name, a);
}

json_t *ej_txn(const etcd_cmp *cmps, size_t ncmp, const etcd_op *success, size_t nsuccess,
               const etcd_op *failure, size_t nfailure)
{
    json_t *o = json_object();
    json_t *a = json_array();
    bool ok = o && a;
    for (size_t i = 0; ok && i < ncmp; i++) {
        json_t *c = compare(&cmps[i]);
        ok = c && json_array_append_new(a, c) == 0;
    }
    if (!ok) {
        json_decref(a);
        json_decref(o);
        return NULL;
    }
    ok = put(o, "compare", a) && put_ops(o, "success", success, nsuccess) &&
         put_ops(o, "failure", failure, nfailure);
    return finish(o, ok);
}

json_t *ej_lease_ttl(int64_t ttl_s)
{
    json_t *o = json_object();
    return o ? finish(o, put(o, "TTL", jint64(ttl_s))) : NULL;
}

json_t *ej_lease_id(int64_t id)
{
    json_t *o = json_object();
    return o ? finish(o, put(o, "ID", jint64(id))) : NULL;
}

json_t *ej_watch_create(const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
                        int64_t start_revision)
{
    json_t *cr = json_object();
    if (!cr)
        return NULL;
    /* progress_notify lets an idle watch move its resume point forward, so
     * that a resume after a quiet hour does not start below a compaction. */
    bool ok = put(cr, "key", jbytes(key, klen)) && put_range_end(cr, range_end, relen) &&
              put(cr, "progress_notify", json_true());
    if (ok && start_revision > 0)
        ok = put(cr, "start_revision", jint64(start_revision));
    if (!ok) {
        json_decref(cr);
        return NULL;
    }
    json_t *o = json_object();
    if (!o) {
        json_decref(cr);
        return NULL;
    }
    return finish(o, put(o, "create_request", cr));
}

/* ---- answers ---- */

int64_t ej_int(const json_t *o, const char *name)
{
    const json_t *v = json_object_get(o, name);
    if (json_is_integer(v))
        return json_integer_value(v);
    if (!json_is_string(v))
        return 0;
    const char *s = json_string_value(v);
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end)
        return 0;
    return x;
}

int64_t ej_revision(const json_t *o)
{
    return ej_int(json_object_get(o, "header"), "revision");
}

static int get_bytes(sk_arena *a, const json_t *o, const char *name, const uint8_t **p, size_t *n)
{
    const json_t *v = json_object_get(o, name);
    *p = (const uint8_t *)"";
    *n = 0;
    if (!v)
        return 0;
    if (!json_is_string(v))
        return SK_ERR_PARSE;
    size_t sl = json_string_length(v);
    if (sl == 0)
        return 0;
    uint8_t *buf = sk_arena_alloc(a, b64_decoded_max(sl));
    if (!buf)
        return SK_ERR_NOMEM;
    long len = b64_decode(json_string_value(v), sl, buf);
    if (len < 0)
        return SK_ERR_PARSE;
    *p = buf;
    *n = (size_t)len;
    return 0;
}

static int parse_kv(sk_arena *a, const json_t *o, etcd_kv *kv)
{
    if (!json_is_object(o))
        return SK_ERR_PARSE;
    int rc = get_bytes(a, o, "key", &kv->key, &kv->klen);
    if (!rc)
        rc = get_bytes(a, o, "value", &kv->value, &kv->vlen);
    kv->create_revision = ej_int(o, "create_revision");
    kv->mod_revision = ej_int(o, "mod_revision");
    kv->version = ej_int(o, "version");
    kv->lease = ej_int(o, "lease");
    return rc;
}

int ej_parse_range(sk_arena *a, const json_t *o, etcd_range_result *r)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(o))
        return SK_ERR_PARSE;
    r->revision = ej_revision(o);
    r->more = json_is_true(json_object_get(o, "more"));
    r->count = ej_int(o, "count");
    const json_t *kvs = json_object_get(o, "kvs");
    if (!kvs)
        return 0;
    if (!json_is_array(kvs))
        return SK_ERR_PARSE;
    size_t n = json_array_size(kvs);
    etcd_kv *out = sk_arena_calloc(a, n ? n : 1, sizeof *out);
    if (!out)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = parse_kv(a, json_array_get(kvs, i), &out[i]);
        if (rc)
            return rc;
    }
    r->kvs = out;
    r->n = n;
    return 0;
}

static int parse_op_response(sk_arena *a, const json_t *o, etcd_op_result *res)
{
    const json_t *v;
    memset(res, 0, sizeof *res);
    if ((v = json_object_get(o, "response_range"))) {
        res->type = ETCD_OP_RANGE;
        return ej_parse_range(a, v, &res->range);
    }
    if ((v = json_object_get(o, "response_put"))) {
        res->type = ETCD_OP_PUT;
        return json_is_object(v) ? 0 : SK_ERR_PARSE;
    }
    if ((v = json_object_get(o, "response_delete_range"))) {
        res->type = ETCD_OP_DELETE;
        res->deleted = ej_int(v, "deleted");
        return json_is_object(v) ? 0 : SK_ERR_PARSE;
    }
    return SK_ERR_PARSE; /* response_txn: this client never nests transactions */
}

int ej_parse_txn(sk_arena *a, const json_t *o, etcd_txn_result *r)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(o))
        return SK_ERR_PARSE;
    r->succeeded = json_is_true(json_object_get(o, "succeeded"));
    r->revision = ej_revision(o);
    const json_t *rs = json_object_get(o, "responses");
    if (!rs)
        return 0;
    if (!json_is_array(rs))
        return SK_ERR_PARSE;
    size_t n = json_array_size(rs);
    etcd_op_result *out = sk_arena_calloc(a, n ? n : 1, sizeof *out);
    if (!out)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) {
        int rc = parse_op_response(a, json_array_get(rs, i), &out[i]);
        if (rc)
            return rc;
    }
    r->results = out;
    r->n = n;
    return 0;
}

int ej_parse_single(sk_arena *a, const json_t *o, etcd_op_type type, etcd_txn_result *r)
{
    memset(r, 0, sizeof *r);
    if (!json_is_object(o))
        return SK_ERR_PARSE;
    etcd_op_result *res = sk_arena_calloc(a, 1, sizeof *res);
    if (!res)
        return SK_ERR_NOMEM;
    res->type = type;
    if (type == ETCD_OP_DELETE)
        res->deleted = ej_int(o, "deleted");
    r->succeeded = true;
    r->revision = ej_revision(o);
    r->results = res;
    r->n = 1;
    return 0;
}

static int parse_event(sk_arena *a, const json_t *o, etcd_event *ev)
{
    if (!json_is_object(o))
        return SK_ERR_PARSE;
    const char *type = json_string_value(json_object_get(o, "type"));
    /* PUT is enum value 0, which the gateway leaves out. */
    ev->type = type && strcmp(type, "DELETE") == 0 ? ETCD_EV_DELETE : ETCD_EV_PUT;
    return parse_kv(a, json_object_get(o, "kv"), &ev->kv);
}

int ej_parse_events(sk_arena *a, const json_t *events, int64_t min_revision, etcd_event **evs,
                    size_t *n)
{
    *evs = NULL;
    *n = 0;
    if (!events)
        return 0;
    if (!json_is_array(events))
        return SK_ERR_PARSE;
    size_t total = json_array_size(events);
    etcd_event *out = sk_arena_calloc(a, total ? total : 1, sizeof *out);
    if (!out)
        return SK_ERR_NOMEM;
    size_t k = 0;
    for (size_t i = 0; i < total; i++) {
        int rc = parse_event(a, json_array_get(events, i), &out[k]);
        if (rc)
            return rc;
        if (out[k].kv.mod_revision >= min_revision)
            k++;
    }
    *evs = out;
    *n = k;
    return 0;
}

bool ej_error(const json_t *o, int *grpc_code, const char **message)
{
    const json_t *e = json_object_get(o, "error");
    if (!e)
        return false;
    const json_t *src = json_is_object(e) ? e : o;
    const json_t *code = json_object_get(src, "grpc_code");
    if (!code)
        code = json_object_get(src, "code");
    *grpc_code = json_is_integer(code) ? (int)json_integer_value(code) : -1;
    *message = json_string_value(json_object_get(src, "message"));
    if (!*message)
        *message = json_is_string(e) ? json_string_value(e) : "(no message)";
    return true;
}
