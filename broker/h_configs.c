/*
 * AlterConfigs, IncrementalAlterConfigs, DeleteRecords, DescribeCluster and
 * DescribeLogDirs: the rest of what Kafka's admin tools use.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>

#include "acl.h"
#include "authz.h"
#include "cmeta.h"
#include "config.h"
#include "dispatch.h"
#include "dynconf.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "store.h"
#include "tconf.h"

enum { RES_TOPIC = 2, RES_BROKER = 4, RES_GROUP = 32 };
enum { OP_SET = 0, OP_DELETE = 1, OP_APPEND = 2, OP_SUBTRACT = 3 };

#define MAXC 64

/* A resource's new set of overrides, built before anything changes. */
struct cset {
    int n;
    const char *names[MAXC], *values[MAXC];
    size_t nl[MAXC], vl[MAXC];
};

static int cset_find(const struct cset *c, const char *name, size_t len)
{
    for (int i = 0; i < c->n; i++)
        if (c->nl[i] == len && memcmp(c->names[i], name, len) == 0)
            return i;
    return -1;
}

static bool cset_set(struct cset *c, const char *name, size_t nl, const char *value, size_t vl)
{
    int i = cset_find(c, name, nl);
    if (i < 0) {
        if (c->n == MAXC)
            return false;
        i = c->n++;
        c->names[i] = name;
        c->nl[i] = nl;
    }
    c->values[i] = value;
    c->vl[i] = vl;
    return true;
}

static void cset_del(struct cset *c, const char *name, size_t nl)
{
    int i = cset_find(c, name, nl);
    if (i < 0)
        return;
    c->n--;
    c->names[i] = c->names[c->n];
    c->nl[i] = c->nl[c->n];
    c->values[i] = c->values[c->n];
    c->vl[i] = c->vl[c->n];
}

static void alter_done(void *arg, int err)
{
    sk_req *r = arg;
    if (err && !r->async_err)
        r->async_err = err;
    if (--r->pending == 0)
        r->on_done(r);
}

/* Result slot of either API (both responses have the same layout). */
typedef struct res_out {
    int16_t *error_code;
    kc_str *error_message;
} res_out;

static void fail(sk_req *r, res_out o, int16_t code, const char *msg)
{
    *o.error_code = code;
    *o.error_message = sk_req_str(r, msg);
}

static bool broker_is_me(sk_req *r, kc_str name)
{
    char idbuf[16];
    snprintf(idbuf, sizeof idbuf, "%d", r->node->cfg->node_id);
    return name.len == 0 ||
           ((size_t)name.len == strlen(idbuf) && memcmp(name.p, idbuf, (size_t)name.len) == 0);
}

/* Applies `c` as the complete new override set of a resource. */
static void apply_set(sk_req *r, int8_t type, kc_str name, struct cset *c, bool validate_only,
                      res_out o)
{
    sk_node *n = r->node;
    char msg[512];
    if (type == RES_TOPIC) {
        sk_topic *t = name.len > 0 ? sk_topic_get(n, name.p, (size_t)name.len) : NULL;
        if (!t) {
            fail(r, o, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist.");
            return;
        }
        sk_tconf conf;
        int rc = sk_tconf_build(n->cfg, c->n, c->names, c->nl, c->values, c->vl, &conf, msg,
                                sizeof msg);
        if (rc != 0) {
            fail(r, o, rc > 0 ? (int16_t)rc : SK_KAFKA_INVALID_CONFIG, msg);
            return;
        }
        if (validate_only) {
            sk_tconf_free(&conf);
            return;
        }
        sk_item *it = sk_item_new(r, o.error_code, o.error_message);
        if (!it) {
            sk_tconf_free(&conf);
            fail(r, o, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
            return;
        }
        r->pending++;
        rc = sk_cmeta_set_topic_config(n, t, &conf, sk_item_done, it);
        if (rc != 0) {
            r->pending--;
            sk_tconf_free(&conf);
            const char *m = NULL;
            int16_t code = sk_change_error(rc, &m);
            fail(r, o, code, m ? m : "the change cannot be recorded");
        }
        return;
    }
    for (int i = 0; i < c->n; i++) {
        char buf[256];
        const char *why =
            sk_dynconf_check(c->names[i], c->nl[i], c->values[i], c->vl[i], buf, sizeof buf);
        if (why) {
            snprintf(msg, sizeof msg, "Broker configuration %.*s: %s", (int)c->nl[i],
                     c->names[i], why);
            fail(r, o, SK_KAFKA_INVALID_CONFIG, msg);
            return;
        }
    }
    if (validate_only)
        return;
    sk_item *it = sk_item_new(r, o.error_code, o.error_message);
    if (!it) {
        fail(r, o, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return;
    }
    r->pending++;
    int rc = sk_cmeta_set_broker_config(n, c->n, c->names, c->nl, c->values, c->vl,
                                        sk_item_done, it);
    if (rc != 0) {
        r->pending--;
        const char *m = NULL;
        int16_t code = sk_change_error(rc, &m);
        fail(r, o, code, m ? m : "the change cannot be recorded");
    }
}

/* The current overrides of a resource, as a starting set. */
static bool current_set(sk_req *r, int8_t type, kc_str name, struct cset *c, res_out o)
{
    sk_node *n = r->node;
    c->n = 0;
    if (type == RES_TOPIC) {
        sk_topic *t = name.len > 0 ? sk_topic_get(n, name.p, (size_t)name.len) : NULL;
        if (!t) {
            fail(r, o, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION, "The topic does not exist.");
            return false;
        }
        for (int i = 0; i < t->conf.noverrides && i < MAXC; i++) {
            /* Copies: the topic's strings change when the new set lands. */
            c->names[i] = sk_arena_strndup(r->arena, t->conf.names[i], strlen(t->conf.names[i]));
            c->values[i] =
                sk_arena_strndup(r->arena, t->conf.values[i], strlen(t->conf.values[i]));
            c->nl[i] = strlen(t->conf.names[i]);
            c->vl[i] = strlen(t->conf.values[i]);
            c->n++;
        }
        return true;
    }
    if (type == RES_BROKER) {
        if (!broker_is_me(r, name)) {
            fail(r, o, SK_KAFKA_INVALID_REQUEST, "Unexpected broker id");
            return false;
        }
        for (int i = 0; i < n->ndyn && i < MAXC; i++) {
            c->names[i] = sk_arena_strndup(r->arena, n->dyn_names[i], strlen(n->dyn_names[i]));
            c->values[i] = sk_arena_strndup(r->arena, n->dyn_values[i], strlen(n->dyn_values[i]));
            c->nl[i] = strlen(n->dyn_names[i]);
            c->vl[i] = strlen(n->dyn_values[i]);
            c->n++;
        }
        return true;
    }
    fail(r, o, SK_KAFKA_INVALID_REQUEST,
         "Only topic, broker and group configurations can be altered");
    return false;
}

/* ---- groups (h_gconf.c) ---- */

static void alter_group(sk_req *r, const kp_AlterConfigsRequest_AlterConfigsResource *res,
                        bool validate_only, res_out o)
{
    int n = res->configs.n > 0 ? res->configs.n : 0, k = 0;
    sk_gconf_op *ops = sk_arena_alloc(r->arena, (size_t)(n ? n : 1) * sizeof *ops);
    if (!ops) {
        fail(r, o, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return;
    }
    /* The legacy API replaces the set; a null value leaves a config out. */
    for (int i = 0; i < n; i++)
        if (res->configs.v[i].value.len >= 0)
            ops[k++] = (sk_gconf_op){res->configs.v[i].name, 0, res->configs.v[i].value};
    sk_alter_group_configs(r, res->resource_name, ops, k, true, validate_only, o.error_code,
                           o.error_message);
}

static void incr_alter_group(sk_req *r,
                             const kp_IncrementalAlterConfigsRequest_AlterConfigsResource *res,
                             bool validate_only, res_out o)
{
    int n = res->configs.n > 0 ? res->configs.n : 0;
    sk_gconf_op *ops = sk_arena_alloc(r->arena, (size_t)(n ? n : 1) * sizeof *ops);
    if (!ops) {
        fail(r, o, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return;
    }
    for (int i = 0; i < n; i++)
        ops[i] = (sk_gconf_op){res->configs.v[i].name, res->configs.v[i].config_operation,
                               res->configs.v[i].value};
    sk_alter_group_configs(r, res->resource_name, ops, n, false, validate_only, o.error_code,
                           o.error_message);
}

static void alter_finish(sk_req *r)
{
    if (r->async_err) {
        /* The change may not be durable: say so on every success. */
        if (r->entry->key == 33) {
            kp_AlterConfigsResponse *resp = r->resp;
            for (int32_t i = 0; i < resp->responses.n; i++)
                if (!resp->responses.v[i].error_code)
                    resp->responses.v[i].error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
        } else {
            kp_IncrementalAlterConfigsResponse *resp = r->resp;
            for (int32_t i = 0; i < resp->responses.n; i++)
                if (!resp->responses.v[i].error_code)
                    resp->responses.v[i].error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
        }
    }
    sk_req_respond(r);
}

void h_alter_configs(sk_req *r)
{
    kp_AlterConfigsRequest *req = r->body;
    kp_AlterConfigsResponse *resp = r->resp;
    int32_t nr = req->resources.n > 0 ? req->resources.n : 0;
    kp_AlterConfigsResponse_AlterConfigsResourceResponse *rs =
        sk_req_array(r, &kp_AlterConfigsResponse_AlterConfigsResourceResponse_desc, nr);
    if (nr && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->responses.n = nr;
    resp->responses.v = rs;
    r->pending = 1;
    r->on_done = alter_finish;
    for (int32_t i = 0; i < nr; i++) {
        kp_AlterConfigsRequest_AlterConfigsResource *res = &req->resources.v[i];
        rs[i].resource_type = res->resource_type;
        rs[i].resource_name = res->resource_name;
        res_out o = {&rs[i].error_code, &rs[i].error_message};
        struct cset c = {0};
        int16_t denied = sk_authz_config(r, res->resource_type, res->resource_name,
                                         sk_authz_op(r));
        if (denied) {
            rs[i].error_code = denied;
            continue;
        }
        if (res->resource_type == RES_GROUP) {
            alter_group(r, res, req->validate_only, o);
            continue;
        }
        if (res->resource_type == RES_BROKER && !broker_is_me(r, res->resource_name)) {
            fail(r, o, SK_KAFKA_INVALID_REQUEST, "Unexpected broker id");
            continue;
        }
        if (res->resource_type != RES_TOPIC && res->resource_type != RES_BROKER) {
            fail(r, o, SK_KAFKA_INVALID_REQUEST,
                 "Only topic, broker and group configurations can be altered");
            continue;
        }
        bool ok = true;
        for (int32_t k = 0; k < res->configs.n && ok; k++) {
            kp_AlterConfigsRequest_AlterableConfig *ac = &res->configs.v[k];
            if (ac->name.len <= 0)
                continue;
            if (ac->value.len < 0)
                continue; /* a null value leaves the property at its default */
            ok = cset_set(&c, ac->name.p, (size_t)ac->name.len, ac->value.p,
                          (size_t)ac->value.len);
        }
        if (!ok) {
            fail(r, o, SK_KAFKA_INVALID_REQUEST, "too many configurations");
            continue;
        }
        apply_set(r, res->resource_type, res->resource_name, &c, req->validate_only, o);
    }
    if (--r->pending == 0)
        alter_finish(r);
}

/* The elements of a comma-separated list value, trimmed, with or without one
 * of them. */
static char *list_op(sk_req *r, const char *cur, size_t cl, const char *item, size_t il,
                     bool add)
{
    char *out = sk_arena_alloc(r->arena, cl + il + 2);
    if (!out)
        return NULL;
    size_t k = 0;
    bool present = false;
    const char *p = cur, *end = cur + cl;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end, *next = e + 1;
        while (p < e && *p == ' ') /* items trimmed, as Kafka parses a list */
            p++;
        while (e > p && e[-1] == ' ')
            e--;
        bool same = (size_t)(e - p) == il && memcmp(p, item, il) == 0;
        present |= same;
        if (e > p && !(same && !add)) {
            if (k)
                out[k++] = ',';
            memcpy(out + k, p, (size_t)(e - p));
            k += (size_t)(e - p);
        }
        p = next;
    }
    if (add && !present && il) {
        if (k)
            out[k++] = ',';
        memcpy(out + k, item, il);
        k += il;
    }
    out[k] = 0;
    return out;
}

void h_incremental_alter_configs(sk_req *r)
{
    kp_IncrementalAlterConfigsRequest *req = r->body;
    kp_IncrementalAlterConfigsResponse *resp = r->resp;
    int32_t nr = req->resources.n > 0 ? req->resources.n : 0;
    kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse *rs = sk_req_array(
        r, &kp_IncrementalAlterConfigsResponse_AlterConfigsResourceResponse_desc, nr);
    if (nr && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->responses.n = nr;
    resp->responses.v = rs;
    r->pending = 1;
    r->on_done = alter_finish;
    for (int32_t i = 0; i < nr; i++) {
        kp_IncrementalAlterConfigsRequest_AlterConfigsResource *res = &req->resources.v[i];
        rs[i].resource_type = res->resource_type;
        rs[i].resource_name = res->resource_name;
        res_out o = {&rs[i].error_code, &rs[i].error_message};
        struct cset c;
        int16_t denied = sk_authz_config(r, res->resource_type, res->resource_name,
                                         sk_authz_op(r));
        if (denied) {
            rs[i].error_code = denied;
            continue;
        }
        if (res->resource_type == RES_GROUP) {
            incr_alter_group(r, res, req->validate_only, o);
            continue;
        }
        if (!current_set(r, res->resource_type, res->resource_name, &c, o))
            continue;
        const char *bad = NULL;
        char msg[512];
        for (int32_t k = 0; k < res->configs.n && !bad; k++) {
            kp_IncrementalAlterConfigsRequest_AlterableConfig *ac = &res->configs.v[k];
            if (ac->name.len <= 0) {
                bad = "a configuration name is empty";
                continue;
            }
            const char *nm = ac->name.p;
            size_t nl = (size_t)ac->name.len;
            switch (ac->config_operation) {
            case OP_SET:
                if (ac->value.len < 0)
                    bad = "SET needs a value";
                else if (!cset_set(&c, nm, nl, ac->value.p, (size_t)ac->value.len))
                    bad = "too many configurations";
                break;
            case OP_DELETE:
                cset_del(&c, nm, nl);
                break;
            case OP_APPEND:
            case OP_SUBTRACT: {
                /* Only list-valued properties take these: cleanup.policy and
                 * the throttled replica lists. */
                const sk_tconf_def *ld = sk_tconf_find(nm, nl);
                if (res->resource_type != RES_TOPIC || !ld ||
                    !(strcmp(ld->name, "cleanup.policy") == 0 || ld->type == SK_TC_THROTTLED)) {
                    snprintf(msg, sizeof msg,
                             "Config value append/subtract is not allowed for config %.*s: it "
                             "is not a list",
                             (int)nl, nm);
                    bad = msg;
                    break;
                }
                int idx = cset_find(&c, nm, nl);
                const char *cur = idx >= 0 ? c.values[idx] : ld->fixed_default;
                size_t cl = idx >= 0 ? c.vl[idx] : strlen(ld->fixed_default);
                char *nv = list_op(r, cur, cl, ac->value.len > 0 ? ac->value.p : "",
                                   ac->value.len > 0 ? (size_t)ac->value.len : 0,
                                   ac->config_operation == OP_APPEND);
                if (!nv || !cset_set(&c, nm, nl, nv, strlen(nv)))
                    bad = "out of memory";
                break;
            }
            default:
                bad = "unknown configuration operation";
            }
        }
        if (bad) {
            fail(r, o, SK_KAFKA_INVALID_CONFIG, bad);
            continue;
        }
        apply_set(r, res->resource_type, res->resource_name, &c, req->validate_only, o);
    }
    if (--r->pending == 0)
        alter_finish(r);
}

/* ---- DeleteRecords ---- */

struct dr_item {
    kp_DeleteRecordsResponse_DeleteRecordsPartitionResult *out;
};

static void dr_finish(sk_req *r)
{
    if (r->async_err) {
        kp_DeleteRecordsResponse *resp = r->resp;
        for (int32_t i = 0; i < resp->topics.n; i++)
            for (int32_t j = 0; j < resp->topics.v[i].partitions.n; j++)
                if (!resp->topics.v[i].partitions.v[j].error_code)
                    resp->topics.v[i].partitions.v[j].error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
    }
    sk_req_respond(r);
}

void h_delete_records(sk_req *r)
{
    kp_DeleteRecordsRequest *req = r->body;
    kp_DeleteRecordsResponse *resp = r->resp;
    sk_node *n = r->node;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_DeleteRecordsResponse_DeleteRecordsTopicResult *ts =
        sk_req_array(r, &kp_DeleteRecordsResponse_DeleteRecordsTopicResult_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    r->pending = 1;
    r->on_done = dr_finish;
    for (int32_t i = 0; i < nt; i++) {
        kp_DeleteRecordsRequest_DeleteRecordsTopic *t = &req->topics.v[i];
        int32_t np = t->partitions.n > 0 ? t->partitions.n : 0;
        ts[i].name = t->name;
        ts[i].partitions.n = np;
        ts[i].partitions.v =
            sk_req_array(r, &kp_DeleteRecordsResponse_DeleteRecordsPartitionResult_desc, np);
        if (np && !ts[i].partitions.v) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *topic = t->name.len > 0 ? sk_topic_get(n, t->name.p, (size_t)t->name.len) : NULL;
        bool denied = !sk_authz_topic(r, topic, t->name, sk_authz_op(r));
        for (int32_t j = 0; j < np; j++) {
            kp_DeleteRecordsRequest_DeleteRecordsPartition *dp = &t->partitions.v[j];
            kp_DeleteRecordsResponse_DeleteRecordsPartitionResult *o = &ts[i].partitions.v[j];
            o->partition_index = dp->partition_index;
            o->low_watermark = -1;
            if (denied) {
                o->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
                continue;
            }
            sk_part *p = sk_part_get(topic, dp->partition_index);
            if (!sk_part_serving(p)) {
                o->error_code =
                    p ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
                continue;
            }
            /* -1 means "up to the high watermark". */
            int64_t target = dp->offset == -1 ? p->hw : dp->offset;
            if (target < 0 || target > p->hw) {
                o->error_code = SK_KAFKA_OFFSET_OUT_OF_RANGE;
                continue;
            }
            if (target <= p->log_start) {
                o->low_watermark = p->log_start;
                continue;
            }
            r->pending++;
            if (sk_node_set_log_start(n, p, target, alter_done, r) != 0) {
                r->pending--;
                o->error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
                continue;
            }
            o->low_watermark = target;
        }
    }
    if (--r->pending == 0)
        dr_finish(r);
}

/* ---- DescribeCluster ---- */

void h_describe_cluster(sk_req *r)
{
    kp_DescribeClusterRequest *req = r->body;
    kp_DescribeClusterResponse *resp = r->resp;
    sk_node *n = r->node;
    if (r->version >= 1 && req->endpoint_type != 1) {
        resp->error_code = SK_KAFKA_MISMATCHED_ENDPOINT_TYPE;
        resp->error_message = sk_req_str(r, "This node is a broker, not a controller");
        resp->endpoint_type = 1;
        resp->cluster_id = sk_req_str(r, n->cluster_id);
        sk_req_respond(r);
        return;
    }
    sk_broker *bs;
    int nb = sk_brokers_for(r, &bs);
    kp_DescribeClusterResponse_DescribeClusterBroker *b =
        nb >= 0 ? sk_req_array(r, &kp_DescribeClusterResponse_DescribeClusterBroker_desc, nb)
                : NULL;
    if (nb < 0 || (nb && !b)) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int i = 0; i < nb; i++) {
        b[i].broker_id = bs[i].id;
        b[i].host = sk_req_str(r, bs[i].host);
        b[i].port = bs[i].port;
        b[i].rack = bs[i].rack ? sk_req_str(r, bs[i].rack) : (kc_str){NULL, -1};
    }
    resp->endpoint_type = 1;
    resp->cluster_id = sk_req_str(r, n->cluster_id);
    resp->controller_id = sk_controller_for(r);
    resp->brokers.n = nb;
    resp->brokers.v = b;
    if (req->include_cluster_authorized_operations)
        resp->cluster_authorized_operations =
            sk_authz_ops(r, SK_ACL_RES_CLUSTER, SK_ACL_CLUSTER_NAME, strlen(SK_ACL_CLUSTER_NAME),
                         SK_OPS_CLUSTER);
    sk_req_respond(r);
}

/* ---- DescribeLogDirs ---- */

struct ld_row {
    kc_uuid id;
    int32_t part;
    int64_t bytes;
};

struct ld_job {
    sk_req *r;
    struct ld_row *rows;
    size_t n, cap;
    int rc;
    int64_t total, usable;
};

static void ld_row(void *arg, const kc_uuid *id, int32_t part, int64_t bytes)
{
    struct ld_job *j = arg;
    if (j->n == j->cap) {
        size_t ncap = j->cap ? j->cap * 2 : 256;
        struct ld_row *nr = realloc(j->rows, ncap * sizeof *nr);
        if (!nr)
            return;
        j->rows = nr;
        j->cap = ncap;
    }
    j->rows[j->n++] = (struct ld_row){*id, part, bytes};
}

static void ld_work(void *arg)
{
    struct ld_job *j = arg;
    j->rc = sk_store_partition_bytes(j->r->node->store, ld_row, j);
    struct statvfs vfs;
    j->total = j->usable = -1;
    if (statvfs(j->r->node->cfg->data_dir, &vfs) == 0) {
        j->total = (int64_t)vfs.f_blocks * (int64_t)vfs.f_frsize;
        j->usable = (int64_t)vfs.f_bavail * (int64_t)vfs.f_frsize;
    }
}

static bool topic_wanted(const kp_DescribeLogDirsRequest *req, const sk_topic *t, int32_t part)
{
    if (req->topics.n < 0)
        return true;
    for (int32_t i = 0; i < req->topics.n; i++) {
        const kp_DescribeLogDirsRequest_DescribableLogDirTopic *dt = &req->topics.v[i];
        if ((size_t)dt->topic.len != strlen(t->name) ||
            memcmp(dt->topic.p, t->name, (size_t)dt->topic.len) != 0)
            continue;
        for (int32_t k = 0; k < dt->partitions.n; k++)
            if (dt->partitions.v[k] == part)
                return true;
    }
    return false;
}

static void ld_done(void *arg)
{
    struct ld_job *j = arg;
    sk_req *r = j->r;
    sk_node *n = r->node;
    kp_DescribeLogDirsRequest *req = r->body;
    kp_DescribeLogDirsResponse *resp = r->resp;
    kp_DescribeLogDirsResponse_DescribeLogDirsResult *res =
        sk_req_array(r, &kp_DescribeLogDirsResponse_DescribeLogDirsResult_desc, 1);
    if (!res) {
        free(j->rows);
        free(j);
        sk_req_close(r, "out of memory");
        return;
    }
    res->log_dir = sk_req_str(r, n->cfg->wal_url);
    res->total_bytes = j->total;
    res->usable_bytes = j->usable;
    if (j->rc != 0)
        res->error_code = SK_KAFKA_KAFKA_STORAGE_ERROR;
    size_t ntopics = sk_map_count(n->topics_by_id);
    kp_DescribeLogDirsResponse_DescribeLogDirsTopic *ts =
        sk_req_array(r, &kp_DescribeLogDirsResponse_DescribeLogDirsTopic_desc, (int32_t)ntopics);
    int32_t k = 0;
    size_t it = 0;
    void *v;
    while (ts && sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        sk_topic *t = v;
        int32_t np = 0;
        for (int32_t p = 0; p < t->nparts; p++)
            np += topic_wanted(req, t, p);
        if (np == 0)
            continue;
        kp_DescribeLogDirsResponse_DescribeLogDirsPartition *ps =
            sk_req_array(r, &kp_DescribeLogDirsResponse_DescribeLogDirsPartition_desc, np);
        if (!ps)
            continue;
        int32_t m = 0;
        for (int32_t p = 0; p < t->nparts; p++) {
            if (!topic_wanted(req, t, p))
                continue;
            ps[m].partition_index = p;
            for (size_t x = 0; x < j->n; x++)
                if (j->rows[x].part == p && memcmp(j->rows[x].id.b, t->id.b, 16) == 0)
                    ps[m].partition_size = j->rows[x].bytes;
            ps[m].offset_lag = 0;
            m++;
        }
        ts[k].name = sk_req_str(r, t->name);
        ts[k].partitions.n = m;
        ts[k].partitions.v = ps;
        k++;
    }
    res->topics.n = k;
    res->topics.v = ts;
    resp->results.n = 1;
    resp->results.v = res;
    free(j->rows);
    free(j);
    sk_req_respond(r);
}

void h_describe_log_dirs(sk_req *r)
{
    if (!sk_authorize_cluster(r, sk_authz_op(r))) {
        ((kp_DescribeLogDirsResponse *)r->resp)->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    struct ld_job *j = calloc(1, sizeof *j);
    if (!j) {
        sk_req_close(r, "out of memory");
        return;
    }
    j->r = r;
    if (sk_node_read_job(r->node, ld_work, ld_done, j) != 0) {
        free(j);
        sk_req_close(r, "shutting down");
    }
}
