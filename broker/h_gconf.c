/*
 * Group configs in DescribeConfigs, AlterConfigs and IncrementalAlterConfigs
 * (resource type GROUP), as kafka-configs --entity-type groups uses them.
 *
 * Every request reads the group's current set from the metadata (cmeta.h:
 * memory on a single node, etcd in a cluster) and, to change it, writes the
 * complete new set back, naming the version it read: two changes racing in
 * a cluster cannot lose one another's entries (the second gets a retriable
 * error). The names, defaults and checks are gconf.c's.
 *
 * Thread: the event loop.
 */
#include <stdio.h>
#include <string.h>

#include "cmeta.h"
#include "dispatch.h"
#include "gconf.h"
#include "handlers.h"
#include "kmsg.h"
#include "node.h"
#include "sk_arena.h"
#include "sk_err.h"

/* Kafka's DescribeConfigs source of a group's own value, and its types. */
enum { SRC_DEFAULT = 5, SRC_GROUP = 8 };
enum { TYPE_BOOLEAN = 1, TYPE_STRING = 2, TYPE_INT = 3 };
enum { OP_SET = 0, OP_DELETE = 1, OP_APPEND = 2, OP_SUBTRACT = 3 };
#define GMAX 32

typedef kp_DescribeConfigsResponse_DescribeConfigsResourceResult dc_entry;
typedef kp_DescribeConfigsResponse_DescribeConfigsSynonym dc_syn;

static void release(sk_req *r)
{
    if (--r->pending == 0) {
        if (r->on_done)
            r->on_done(r);
        else
            sk_req_respond(r);
    }
}

static const char *override_of(const sk_gconf *g, const char *name)
{
    for (int i = 0; g && i < g->n; i++)
        if (strcmp(g->names[i], name) == 0)
            return g->values[i];
    return NULL;
}

/* ---- DescribeConfigs ---- */

struct gdesc {
    sk_req *r;
    const kp_DescribeConfigsRequest_DescribeConfigsResource *res;
    kp_DescribeConfigsResponse_DescribeConfigsResult *out;
};

static bool wanted(const kp_DescribeConfigsRequest_DescribeConfigsResource *res, const char *name)
{
    if (res->configuration_keys.n < 0)
        return true;
    for (int32_t i = 0; i < res->configuration_keys.n; i++) {
        kc_str k = res->configuration_keys.v[i];
        if (k.len >= 0 && (size_t)k.len == strlen(name) && memcmp(k.p, name, (size_t)k.len) == 0)
            return true;
    }
    return false;
}

static int8_t type_of(const sk_gconf_def *d)
{
    return d->type == SK_GC_INT ? TYPE_INT : d->type == SK_GC_BOOL ? TYPE_BOOLEAN : TYPE_STRING;
}

/* The group's own value first, then the broker default it overrides. */
static void describe_synonyms(sk_req *r, const sk_gconf_def *d, const char *own, dc_entry *c)
{
    dc_syn *syn = sk_req_array(r, &kp_DescribeConfigsResponse_DescribeConfigsSynonym_desc, 2);
    if (!syn)
        return;
    int ns = 0;
    if (own)
        syn[ns++] = (dc_syn){sk_req_str(r, d->name), sk_req_str(r, own), SRC_GROUP};
    syn[ns++] = (dc_syn){sk_req_str(r, d->synonym), sk_req_str(r, d->def), SRC_DEFAULT};
    c->synonyms.n = ns;
    c->synonyms.v = syn;
}

static void describe_got(void *arg, int err, const sk_gconf *g, int64_t version)
{
    struct gdesc *x = arg;
    sk_req *r = x->r;
    const kp_DescribeConfigsRequest *req = r->body;
    (void)version;
    int nd = sk_gconf_ndefs();
    dc_entry *cs = err ? NULL
                       : sk_req_array(
                             r, &kp_DescribeConfigsResponse_DescribeConfigsResourceResult_desc, nd);
    if (!cs) {
        const char *msg = NULL;
        x->out->error_code = sk_change_error(err ? err : SK_ERR_NOMEM, &msg);
        x->out->error_message = sk_req_str(r, msg ? msg : "the group's configs cannot be read");
        release(r);
        return;
    }
    int k = 0;
    for (int i = 0; i < nd; i++) {
        const sk_gconf_def *d = sk_gconf_def_at(i);
        if (!wanted(x->res, d->name))
            continue;
        const char *own = override_of(g, d->name);
        dc_entry *c = &cs[k++];
        c->name = sk_req_str(r, d->name);
        c->value = sk_req_str(r, own ? own : d->def);
        c->config_source = own ? SRC_GROUP : SRC_DEFAULT;
        c->config_type = type_of(d);
        if (req->include_documentation)
            c->documentation = sk_req_str(r, d->doc);
        if (req->include_synonyms)
            describe_synonyms(r, d, own, c);
    }
    x->out->configs.n = k;
    x->out->configs.v = cs;
    x->out->error_message = sk_req_str(r, "");
    release(r);
}

void sk_describe_group_configs(sk_req *r,
                               const kp_DescribeConfigsRequest_DescribeConfigsResource *res,
                               kp_DescribeConfigsResponse_DescribeConfigsResult *out)
{
    kc_str g = res->resource_name;
    if (g.len <= 0) {
        out->error_code = SK_KAFKA_INVALID_REQUEST;
        out->error_message = sk_req_str(r, "Group name must not be empty");
        return;
    }
    struct gdesc *x = sk_arena_alloc(r->arena, sizeof *x);
    if (!x) {
        out->error_code = SK_KAFKA_REQUEST_TIMED_OUT;
        return;
    }
    *x = (struct gdesc){r, res, out};
    r->pending++;
    int rc = sk_cmeta_get_group_config(r->node, g.p, (size_t)g.len, describe_got, x);
    if (rc != 0) {
        r->pending--;
        const char *msg = NULL;
        out->error_code = sk_change_error(rc, &msg);
        out->error_message = msg ? sk_req_str(r, msg) : (kc_str){NULL, -1};
    }
}

/* ---- AlterConfigs, IncrementalAlterConfigs ---- */

struct galter {
    sk_req *r;
    kc_str group;
    const sk_gconf_op *ops;
    int nops;
    bool replace, validate_only;
    int16_t *err;
    kc_str *msg;
};

/* The new complete set. */
struct gset {
    int n;
    const char *names[GMAX], *values[GMAX];
    size_t nl[GMAX], vl[GMAX];
};

static int gset_find(const struct gset *s, kc_str name)
{
    for (int i = 0; i < s->n; i++)
        if (s->nl[i] == (size_t)name.len && memcmp(s->names[i], name.p, s->nl[i]) == 0)
            return i;
    return -1;
}

static void alter_fail(struct galter *a, int16_t code, const char *msg)
{
    *a->err = code;
    *a->msg = sk_req_str(a->r, msg);
}

/* Applies one operation to s; false (with the error set) when refused. */
static bool apply_op(struct galter *a, struct gset *s, const sk_gconf_op *op)
{
    char msg[512];
    int i = gset_find(s, op->name);
    int nl = op->name.len > 200 ? 200 : op->name.len;
    if (op->op == OP_DELETE) {
        if (i >= 0) {
            s->n--;
            s->names[i] = s->names[s->n], s->nl[i] = s->nl[s->n];
            s->values[i] = s->values[s->n], s->vl[i] = s->vl[s->n];
        }
        return true;
    }
    if (op->op == OP_APPEND || op->op == OP_SUBTRACT) {
        snprintf(msg, sizeof msg, "Can't %s to key %.*s because its type is not LIST.",
                 op->op == OP_APPEND ? "APPEND" : "SUBTRACT", nl, op->name.p);
        alter_fail(a, SK_KAFKA_INVALID_CONFIG, msg);
        return false;
    }
    if (op->op != OP_SET) {
        alter_fail(a, SK_KAFKA_INVALID_REQUEST, "unknown configuration operation");
        return false;
    }
    if (op->value.len < 0) {
        snprintf(msg, sizeof msg, "Null value not supported for : %.*s", nl, op->name.p);
        alter_fail(a, SK_KAFKA_INVALID_REQUEST, msg);
        return false;
    }
    char norm[SK_GCONF_VALUE_MAX];
    int16_t code = sk_gconf_check(op->name.p, (size_t)op->name.len, op->value.p,
                                  (size_t)op->value.len, norm, msg, sizeof msg);
    const char *kept = code ? NULL : sk_arena_strndup(a->r->arena, norm, strlen(norm));
    if (code || !kept) {
        alter_fail(a, code ? code : SK_KAFKA_REQUEST_TIMED_OUT, code ? msg : "out of memory");
        return false;
    }
    if (i < 0 && s->n == GMAX) {
        alter_fail(a, SK_KAFKA_INVALID_CONFIG, "too many configurations");
        return false;
    }
    if (i < 0) {
        i = s->n++;
        s->names[i] = op->name.p;
        s->nl[i] = (size_t)op->name.len;
    }
    s->values[i] = kept;
    s->vl[i] = strlen(kept);
    return true;
}

static void alter_write(struct galter *a, const struct gset *s, int64_t version)
{
    sk_req *r = a->r;
    sk_item *it = sk_item_new(r, a->err, a->msg);
    if (!it) {
        alter_fail(a, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return;
    }
    r->pending++;
    int rc = sk_cmeta_set_group_config(r->node, a->group.p, (size_t)a->group.len, version, s->n,
                                       s->names, s->nl, s->values, s->vl, sk_item_done, it);
    if (rc != 0) {
        r->pending--;
        const char *m = NULL;
        int16_t code = sk_change_error(rc, &m);
        alter_fail(a, code, m ? m : "the change cannot be recorded");
    }
}

static void alter_got(void *arg, int err, const sk_gconf *g, int64_t version)
{
    struct galter *a = arg;
    struct gset s = {0};
    if (err) {
        const char *m = NULL;
        int16_t code = sk_change_error(err, &m);
        alter_fail(a, code, m ? m : "the group's configs cannot be read");
        release(a->r);
        return;
    }
    /* The current entries are copied: the set read lives only in this call. */
    for (int i = 0; !a->replace && g && i < g->n && s.n < GMAX; i++, s.n++) {
        s.names[s.n] = sk_arena_strndup(a->r->arena, g->names[i], strlen(g->names[i]));
        s.values[s.n] = sk_arena_strndup(a->r->arena, g->values[i], strlen(g->values[i]));
        s.nl[s.n] = strlen(g->names[i]);
        s.vl[s.n] = strlen(g->values[i]);
    }
    bool ok = true;
    for (int i = 0; i < a->nops && ok; i++)
        ok = apply_op(a, &s, &a->ops[i]);
    if (ok && !a->validate_only)
        alter_write(a, &s, version);
    release(a->r);
}

void sk_alter_group_configs(sk_req *r, kc_str group, const sk_gconf_op *ops, int nops,
                            bool replace, bool validate_only, int16_t *err, kc_str *msg)
{
    *msg = (kc_str){NULL, -1}; /* Kafka's answer to a success */
    if (group.len <= 0) {
        *err = SK_KAFKA_INVALID_REQUEST;
        *msg = sk_req_str(r, "Default group resources are not allowed.");
        return;
    }
    struct galter *a = sk_arena_alloc(r->arena, sizeof *a);
    if (!a) {
        *err = SK_KAFKA_REQUEST_TIMED_OUT;
        return;
    }
    *a = (struct galter){r, group, ops, nops, replace, validate_only, err, msg};
    r->pending++;
    int rc = sk_cmeta_get_group_config(r->node, group.p, (size_t)group.len, alter_got, a);
    if (rc != 0) {
        r->pending--;
        const char *m = NULL;
        *err = sk_change_error(rc, &m);
        *msg = m ? sk_req_str(r, m) : (kc_str){NULL, -1};
    }
}
