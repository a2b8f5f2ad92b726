/*
 * cmeta_etcd: a cluster member's metadata changes, written to etcd
 * (cmeta.h, docs/cluster.md "etcd keys"). Every change is a transaction
 * conditioned on the key's revision (or on its absence); the node applies it
 * like any other from its watch, and fn runs once the model has caught up
 * with the transaction. A new topic's partitions are created unplaced; the
 * controller places them, their targets adopt them, and CreateTopics waits
 * for that (up to TOPIC_READY_MS).
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "cmeta.h"
#include "config.h"
#include "etcd.h"
#include "acls.h"
#include "gconf.h"
#include "plog.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "tconf.h"

#define KEY_MAX 512
#define PARTS_PER_TXN 100 /* etcd refuses more than 128 operations in one */
#define REVISION_WAIT_MS 10000
#define TOPIC_READY_MS 5000
#define PID_BLOCK 1000
#define CAS_ATTEMPTS 5

static cs_session *sess(sk_node *n)
{
    return sk_cluster_session(n->cluster);
}

static const char *prefix(sk_node *n)
{
    return cs_prefix(sess(n));
}

/* ---- a change in flight ---- */

typedef struct change {
    sk_node *n;
    sk_cmeta_fn fn;
    void *arg;
    /* topics */
    cm_topic topic;     /* the value to write (configs owned here) */
    int32_t from, to;   /* partitions to create: [from, to) */
    int32_t next;       /* the next one to write */
    uint64_t first_stream;
    int64_t revision;   /* of the last transaction */
    int64_t ready_deadline;
    int attempts;
    bool wait_mains;    /* CreateTopics waits for the partitions' mains */
    struct event *ev;
} change;

static void change_free(change *c)
{
    for (int i = 0; i < c->topic.nconfigs; i++) {
        free(c->topic.config_names[i]);
        free(c->topic.config_values[i]);
    }
    free(c->topic.config_names);
    free(c->topic.config_values);
    if (c->ev)
        event_free(c->ev);
    free(c);
}

static void change_end(change *c, int err)
{
    if (c->fn)
        c->fn(c->arg, err);
    change_free(c);
}

static int copy_conf(cm_topic *t, const sk_tconf *conf)
{
    int n = conf ? conf->noverrides : 0;
    t->config_names = calloc((size_t)n + 1, sizeof *t->config_names);
    t->config_values = calloc((size_t)n + 1, sizeof *t->config_values);
    if (!t->config_names || !t->config_values)
        return SK_ERR_NOMEM;
    for (int i = 0; i < n; i++) {
        t->config_names[i] = strdup(conf->names[i]);
        t->config_values[i] = strdup(conf->values[i]);
        t->nconfigs = i + 1;
        if (!t->config_names[i] || !t->config_values[i])
            return SK_ERR_NOMEM;
    }
    return 0;
}

/* ---- waiting for the model ---- */

static bool mains_ready(change *c)
{
    sk_topic *t = sk_topic_get_id(c->n, &c->topic.id);
    if (!t)
        return false;
    for (int32_t i = c->from; i < c->to && i < t->nparts; i++)
        if (t->parts[i]->main_node < 0)
            return false;
    return true;
}

static void ready_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    change *c = arg;
    if (mains_ready(c) || sk_mono_ms() >= c->ready_deadline) {
        change_end(c, 0);
        return;
    }
    struct timeval tv = {0, 20000};
    event_add(c->ev, &tv);
}

static void caught_up(void *arg, int err)
{
    change *c = arg;
    if (err || !c->wait_mains) {
        change_end(c, err);
        return;
    }
    c->ready_deadline = sk_mono_ms() + TOPIC_READY_MS;
    c->ev = evtimer_new(c->n->base, ready_cb, c);
    if (!c->ev) {
        change_end(c, 0);
        return;
    }
    ready_cb(-1, 0, c);
}

static void wait_model(change *c)
{
    cs_wait_revision(sess(c->n), c->revision, REVISION_WAIT_MS, caught_up, c);
}

/* ---- transactions ---- */

static char *part_value(const change *c, int32_t i)
{
    cm_part p;
    memset(&p, 0, sizeof p);
    p.topic = c->topic.id;
    p.index = i;
    p.epoch = 0;
    p.node = -1;
    p.state = CM_PART_NEW;
    p.stream = c->first_stream + (uint64_t)(i - c->from);
    return cm_encode_part(&p);
}

/* Puts of partitions [c->next, c->next + max) into ops; returns how many. */
static size_t put_parts(change *c, etcd_op *ops, char (*keys)[KEY_MAX], char **vals, size_t max)
{
    size_t k = 0;
    for (; k < max && c->next < c->to; k++, c->next++) {
        size_t kl = cm_key_part(prefix(c->n), &c->topic.id, c->next, keys[k], KEY_MAX);
        vals[k] = part_value(c, c->next);
        ops[k] = (etcd_op){.type = ETCD_OP_PUT, .key = (const uint8_t *)keys[k], .klen = kl,
                           .value = (const uint8_t *)vals[k],
                           .vlen = vals[k] ? strlen(vals[k]) : 0};
    }
    return k;
}

static void more_parts(change *c);

static void parts_done(void *arg, int err, const etcd_txn_result *r)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    c->revision = r->revision;
    more_parts(c);
}

/* The partitions that did not fit in the topic's own transaction. */
static void more_parts(change *c)
{
    if (c->next >= c->to) {
        wait_model(c);
        return;
    }
    etcd_op ops[PARTS_PER_TXN];
    char(*keys)[KEY_MAX] = calloc(PARTS_PER_TXN, KEY_MAX);
    char *vals[PARTS_PER_TXN] = {0};
    int rc = keys ? 0 : SK_ERR_NOMEM;
    size_t k = rc ? 0 : put_parts(c, ops, keys, vals, PARTS_PER_TXN);
    for (size_t i = 0; i < k && rc == 0; i++)
        if (!vals[i])
            rc = SK_ERR_NOMEM;
    if (rc == 0)
        rc = etcd_txn(cs_etcd(sess(c->n)), NULL, 0, ops, k, NULL, 0, parts_done, c);
    for (size_t i = 0; i < k; i++)
        free(vals[i]);
    free(keys);
    if (rc)
        change_end(c, rc);
}

/* Writes the topic's value (conditioned on cmp) with the first partitions. */
static int topic_txn(change *c, const etcd_cmp *cmp, etcd_txn_cb cb)
{
    char tkey[KEY_MAX];
    size_t tkl = cm_key_topic(prefix(c->n), c->topic.name, tkey, sizeof tkey);
    char *tval = cm_encode_topic(&c->topic);
    etcd_op ops[1 + PARTS_PER_TXN];
    char(*keys)[KEY_MAX] = calloc(PARTS_PER_TXN, KEY_MAX);
    char *vals[PARTS_PER_TXN] = {0};
    int rc = tval && keys && tkl ? 0 : SK_ERR_NOMEM;
    size_t k = 0;
    if (rc == 0) {
        ops[0] = (etcd_op){.type = ETCD_OP_PUT, .key = (const uint8_t *)tkey, .klen = tkl,
                           .value = (const uint8_t *)tval, .vlen = strlen(tval)};
        int32_t save = c->next;
        k = put_parts(c, ops + 1, keys, vals, PARTS_PER_TXN);
        for (size_t i = 0; i < k && rc == 0; i++)
            if (!vals[i])
                rc = SK_ERR_NOMEM;
        if (rc == 0)
            rc = etcd_txn(cs_etcd(sess(c->n)), cmp, 1, ops, 1 + k, NULL, 0, cb, c);
        if (rc)
            c->next = save;
    }
    for (size_t i = 0; i < k; i++)
        free(vals[i]);
    free(keys);
    free(tval);
    return rc;
}

/* ---- create ---- */

static void created(void *arg, int err, const etcd_txn_result *r)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    if (!r->succeeded) {
        change_end(c, SK_KAFKA_TOPIC_ALREADY_EXISTS);
        return;
    }
    c->revision = r->revision;
    SK_INFO("cmeta", "created topic %s with %d partitions", c->topic.name, c->topic.partitions);
    more_parts(c);
}

static void got_streams(void *arg, int err, int64_t first)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    c->first_stream = (uint64_t)first;
    c->topic.first_stream = (uint64_t)first;
    char tkey[KEY_MAX];
    size_t tkl = cm_key_topic(prefix(c->n), c->topic.name, tkey, sizeof tkey);
    etcd_cmp cmp = {.key = (const uint8_t *)tkey, .klen = tkl, .target = ETCD_TARGET_CREATE,
                    .result = ETCD_CMP_EQUAL, .number = 0};
    int rc = topic_txn(c, &cmp, created);
    if (rc)
        change_end(c, rc);
}

static int etcd_create_topic(sk_node *n, const sk_topic_spec *spec, sk_cmeta_fn fn, void *arg,
                             kc_uuid *id)
{
    if (spec->len > CM_TOPIC_MAX)
        return SK_KAFKA_INVALID_TOPIC_EXCEPTION;
    if (sk_topic_get(n, spec->name, spec->len))
        return SK_KAFKA_TOPIC_ALREADY_EXISTS;
    change *c = calloc(1, sizeof *c);
    if (!c)
        return SK_ERR_NOMEM;
    c->n = n;
    c->fn = fn;
    c->arg = arg;
    memcpy(c->topic.name, spec->name, spec->len);
    c->topic.name[spec->len] = 0;
    do
        sk_random_uuid(&c->topic.id);
    while (sk_topic_get_id(n, &c->topic.id));
    c->topic.partitions = spec->nparts;
    c->topic.rf = spec->rf;
    c->topic.internal = spec->internal;
    c->from = c->next = 0;
    c->to = spec->nparts;
    c->wait_mains = !spec->internal;
    if (copy_conf(&c->topic, spec->conf) != 0) {
        change_free(c);
        return SK_ERR_NOMEM;
    }
    /* The overrides now live in etcd: the caller's copy is ours to free. */
    sk_tconf_free(spec->conf);
    if (id)
        *id = c->topic.id;
    cs_alloc(sess(n), "next_stream", spec->nparts, got_streams, c);
    return 0;
}

/* ---- change an existing topic (partitions, configs) ---- */

static int topic_base(sk_node *n, const sk_topic *t, change **out)
{
    const cm_topic *mt = cm_topic_by_id(sk_cluster_model(n->cluster), &t->id);
    if (!mt)
        return SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
    change *c = calloc(1, sizeof *c);
    if (!c)
        return SK_ERR_NOMEM;
    c->n = n;
    c->topic = *mt;
    c->topic.nconfigs = 0;
    c->topic.config_names = c->topic.config_values = NULL;
    *out = c;
    return 0;
}

static etcd_cmp topic_cmp(const change *c, const char *tkey, size_t tkl, int64_t mod_rev)
{
    return (etcd_cmp){.key = (const uint8_t *)tkey, .klen = tkl, .target = ETCD_TARGET_MOD,
                      .result = ETCD_CMP_EQUAL, .number = mod_rev};
}

static void altered(void *arg, int err, const etcd_txn_result *r)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    if (!r->succeeded) {
        /* Changed meanwhile by another node: a new request sees it. */
        change_end(c, SK_KAFKA_REASSIGNMENT_IN_PROGRESS);
        return;
    }
    c->revision = r->revision;
    more_parts(c);
}

static int alter_txn(change *c, int64_t mod_rev)
{
    char tkey[KEY_MAX];
    size_t tkl = cm_key_topic(prefix(c->n), c->topic.name, tkey, sizeof tkey);
    etcd_cmp cmp = topic_cmp(c, tkey, tkl, mod_rev);
    return topic_txn(c, &cmp, altered);
}

static void grow_streams(void *arg, int err, int64_t first)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    c->first_stream = (uint64_t)first;
    int rc = alter_txn(c, c->revision);
    if (rc)
        change_end(c, rc);
}

static int etcd_add_partitions(sk_node *n, sk_topic *t, int32_t nparts, sk_cmeta_fn fn,
                               void *arg)
{
    change *c;
    int rc = topic_base(n, t, &c);
    if (rc)
        return rc;
    const cm_topic *mt = cm_topic_by_id(sk_cluster_model(n->cluster), &t->id);
    c->fn = fn;
    c->arg = arg;
    c->revision = mt->mod_rev;
    if (copy_conf(&c->topic, &t->conf) != 0) {
        change_free(c);
        return SK_ERR_NOMEM;
    }
    c->from = c->next = mt->partitions;
    c->to = nparts;
    c->topic.partitions = nparts;
    c->wait_mains = true;
    cs_alloc(sess(n), "next_stream", nparts - mt->partitions, grow_streams, c);
    return 0;
}

static int etcd_set_topic_config(sk_node *n, sk_topic *t, sk_tconf *conf, sk_cmeta_fn fn,
                                 void *arg)
{
    change *c;
    int rc = topic_base(n, t, &c);
    if (rc)
        return rc;
    const cm_topic *mt = cm_topic_by_id(sk_cluster_model(n->cluster), &t->id);
    c->fn = fn;
    c->arg = arg;
    c->from = c->next = c->to = 0;
    if (copy_conf(&c->topic, conf) != 0) {
        change_free(c);
        return SK_ERR_NOMEM;
    }
    rc = alter_txn(c, mt->mod_rev);
    if (rc) {
        change_free(c);
        return rc;
    }
    sk_tconf_free(conf);
    return 0;
}

/* ---- delete ---- */

static void deleted(void *arg, int err, const etcd_txn_result *r)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    if (!r->succeeded) {
        change_end(c, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION);
        return;
    }
    c->revision = r->revision;
    SK_INFO("cmeta", "deleted topic %s", c->topic.name);
    wait_model(c);
}

static int etcd_delete_topic(sk_node *n, sk_topic *t, sk_cmeta_fn fn, void *arg)
{
    change *c;
    int rc = topic_base(n, t, &c);
    if (rc)
        return rc;
    const cm_topic *mt = cm_topic_by_id(sk_cluster_model(n->cluster), &t->id);
    c->fn = fn;
    c->arg = arg;
    const char *p = prefix(n);
    char tkey[KEY_MAX], pkey[KEY_MAX], pend[KEY_MAX], rkey[KEY_MAX], rend[KEY_MAX];
    size_t tkl = cm_key_topic(p, c->topic.name, tkey, sizeof tkey);
    size_t pkl = cm_key_topic_parts(p, &t->id, pkey, sizeof pkey);
    size_t pel = etcd_prefix_end((const uint8_t *)pkey, pkl, (uint8_t *)pend);
    /* walrefs/<topic>-<index>/...: every partition's, by the topic's prefix. */
    size_t rkl = cm_key_part_walrefs(p, &t->id, 0, rkey, sizeof rkey);
    while (rkl > 0 && rkey[rkl - 1] != '-')
        rkl--;
    size_t rel = etcd_prefix_end((const uint8_t *)rkey, rkl, (uint8_t *)rend);
    etcd_cmp cmp = topic_cmp(c, tkey, tkl, mt->mod_rev);
    etcd_op ops[3] = {
        {.type = ETCD_OP_DELETE, .key = (const uint8_t *)tkey, .klen = tkl},
        {.type = ETCD_OP_DELETE, .key = (const uint8_t *)pkey, .klen = pkl,
         .range_end = (const uint8_t *)pend, .relen = pel},
        {.type = ETCD_OP_DELETE, .key = (const uint8_t *)rkey, .klen = rkl,
         .range_end = (const uint8_t *)rend, .relen = rel},
    };
    rc = etcd_txn(cs_etcd(sess(n)), &cmp, 1, ops, 3, NULL, 0, deleted, c);
    if (rc)
        change_free(c);
    return rc;
}

/* ---- producer ids: blocks of PID_BLOCK from etcd ---- */

typedef struct pidreq {
    sk_node *n;
    sk_cmeta_pid_fn fn;
    void *arg;
    int64_t pid;
    int err;
} pidreq;

static void pid_deliver(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    pidreq *q = arg;
    q->fn(q->arg, q->err, q->err ? -1 : q->pid);
    free(q);
}

static void pid_block(void *arg, int err, int64_t first)
{
    pidreq *q = arg;
    sk_node *n = q->n;
    if (!err) {
        if (n->next_pid >= n->pid_block_end) {
            n->next_pid = first;
            n->pid_block_end = first + PID_BLOCK;
        }
        q->pid = n->next_pid++;
    }
    q->err = err;
    pid_deliver(-1, 0, q);
}

static int etcd_alloc_pid(sk_node *n, sk_cmeta_pid_fn fn, void *arg)
{
    pidreq *q = calloc(1, sizeof *q);
    if (!q)
        return SK_ERR_NOMEM;
    q->n = n;
    q->fn = fn;
    q->arg = arg;
    if (n->next_pid < n->pid_block_end) {
        /* From this node's block: answered from the loop, never inside the
         * call. */
        q->pid = n->next_pid++;
        if (event_base_once(n->base, -1, EV_TIMEOUT, pid_deliver, q, NULL) != 0) {
            free(q);
            return SK_ERR_NOMEM;
        }
        return 0;
    }
    cs_alloc(sess(n), "next_pid", PID_BLOCK, pid_block, q);
    return 0;
}

/* ---- broker configuration changed at runtime: cluster-wide ---- */

static void bconf_put(void *arg, int err, const etcd_txn_result *r)
{
    change *c = arg;
    if (err) {
        change_end(c, err);
        return;
    }
    c->revision = r->revision;
    wait_model(c);
}

static int etcd_set_broker_config(sk_node *n, int count, const char *const *names,
                                  const size_t *nlens, const char *const *values,
                                  const size_t *vlens, sk_cmeta_fn fn, void *arg)
{
    char **cn = calloc((size_t)count + 1, sizeof *cn);
    char **cv = calloc((size_t)count + 1, sizeof *cv);
    int rc = cn && cv ? 0 : SK_ERR_NOMEM;
    for (int k = 0; rc == 0 && k < count; k++) {
        cn[k] = strndup(names[k], nlens[k]);
        cv[k] = strndup(values[k], vlens[k]);
        if (!cn[k] || !cv[k])
            rc = SK_ERR_NOMEM;
    }
    char *val = rc ? NULL : cm_encode_bconf(count, cn, cv);
    for (int k = 0; cn && cv && k < count; k++) {
        free(cn[k]);
        free(cv[k]);
    }
    free(cn);
    free(cv);
    change *c = val ? calloc(1, sizeof *c) : NULL;
    if (!c) {
        free(val);
        return SK_ERR_NOMEM;
    }
    c->n = n;
    c->fn = fn;
    c->arg = arg;
    char key[KEY_MAX];
    size_t kl = cm_key_bconf(prefix(n), -1, key, sizeof key);
    rc = etcd_put(cs_etcd(sess(n)), (const uint8_t *)key, kl, (const uint8_t *)val, strlen(val),
                  0, bconf_put, c);
    free(val);
    if (rc)
        change_free(c);
    return rc;
}

/* ---- group configs: config/group/<group id>, one JSON value like a
 * broker config's, changed with a compare of its mod revision ---- */

typedef struct gcall {
    sk_cmeta_gconf_fn get_fn;
    sk_cmeta_fn set_fn;
    void *arg;
} gcall;

/* The key, malloc'd: a group id may be long and hold any byte. `dir` is
 * config/group/ or, for users' SCRAM credentials, config/user/. */
static char *set_key(sk_node *n, const char *dir, const char *group, size_t glen, size_t *klen)
{
    const char *pre = prefix(n);
    size_t pl = strlen(pre), dl = strlen(dir), kl = pl + dl + glen;
    char *k = malloc(kl + 1);
    if (!k)
        return NULL;
    memcpy(k, pre, pl);
    memcpy(k + pl, dir, dl);
    memcpy(k + kl - glen, group, glen);
    k[kl] = 0;
    *klen = kl;
    return k;
}

static void gconf_got(void *arg, int err, const etcd_range_result *r)
{
    gcall *g = arg;
    if (err || r->n == 0) {
        g->get_fn(g->arg, err, NULL, 0);
        free(g);
        return;
    }
    cm_bconf b;
    int rc = cm_decode_bconf(r->kvs[0].value, r->kvs[0].vlen, -1, &b);
    sk_gconf set = {rc ? 0 : b.nconfigs, rc ? NULL : b.names, rc ? NULL : b.values};
    if (rc)
        SK_WARN("cmeta", "unreadable group config at %.*s", (int)r->kvs[0].klen,
                (const char *)r->kvs[0].key);
    g->get_fn(g->arg, rc == SK_ERR_NOMEM ? rc : 0, set.n ? &set : NULL, r->kvs[0].mod_revision);
    if (rc == 0)
        cm_bconf_clear(&b);
    free(g);
}

static int get_set(sk_node *n, const char *dir, const char *group, size_t glen,
                   sk_cmeta_gconf_fn fn, void *arg)
{
    size_t kl;
    char *key = set_key(n, dir, group, glen, &kl);
    gcall *g = key ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        free(key);
        return SK_ERR_NOMEM;
    }
    *g = (gcall){fn, NULL, arg};
    int rc = etcd_range(cs_etcd(sess(n)), (const uint8_t *)key, kl, NULL, 0, 1, 0, 0,
                        gconf_got, g);
    free(key);
    if (rc)
        free(g);
    return rc;
}

static void gconf_put(void *arg, int err, const etcd_txn_result *r)
{
    gcall *g = arg;
    g->set_fn(g->arg, err ? err : r->succeeded ? 0 : SK_ERR_AGAIN);
    free(g);
}

/* The JSON value of a set (NULL: out of memory). */
static char *gconf_value(int count, const char *const *names, const size_t *nlens,
                         const char *const *values, const size_t *vlens)
{
    char **cn = calloc((size_t)count + 1, sizeof *cn);
    char **cv = calloc((size_t)count + 1, sizeof *cv);
    bool ok = cn && cv;
    for (int k = 0; ok && k < count; k++) {
        cn[k] = strndup(names[k], nlens[k]);
        cv[k] = strndup(values[k], vlens[k]);
        ok = cn[k] && cv[k];
    }
    char *val = ok ? cm_encode_bconf(count, cn, cv) : NULL;
    for (int k = 0; cn && cv && k < count; k++) {
        free(cn[k]);
        free(cv[k]);
    }
    free(cn);
    free(cv);
    return val;
}

static int put_set(sk_node *n, const char *dir, const char *group, size_t glen, int64_t version,
                   int count, const char *const *names, const size_t *nlens,
                   const char *const *values, const size_t *vlens, sk_cmeta_fn fn, void *arg)
{
    size_t kl;
    char *key = set_key(n, dir, group, glen, &kl);
    char *val = count > 0 ? gconf_value(count, names, nlens, values, vlens) : NULL;
    gcall *g = key && (val || count <= 0) ? calloc(1, sizeof *g) : NULL;
    if (!g) {
        free(key);
        free(val);
        return SK_ERR_NOMEM;
    }
    *g = (gcall){NULL, fn, arg};
    etcd_cmp cmp = {(const uint8_t *)key, kl, NULL, 0, ETCD_TARGET_MOD, ETCD_CMP_EQUAL,
                    version, NULL, 0};
    etcd_op op = {count > 0 ? ETCD_OP_PUT : ETCD_OP_DELETE, (const uint8_t *)key, kl, NULL, 0,
                  (const uint8_t *)val, val ? strlen(val) : 0, 0};
    int rc = etcd_txn(cs_etcd(sess(n)), &cmp, 1, &op, 1, NULL, 0, gconf_put, g);
    free(key);
    free(val);
    if (rc)
        free(g);
    return rc;
}

static int etcd_get_group_config(sk_node *n, const char *group, size_t glen,
                                 sk_cmeta_gconf_fn fn, void *arg)
{
    return get_set(n, "config/group/", group, glen, fn, arg);
}

static int etcd_set_group_config(sk_node *n, const char *group, size_t glen, int64_t version,
                                 int count, const char *const *names, const size_t *nlens,
                                 const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                                 void *arg)
{
    return put_set(n, "config/group/", group, glen, version, count, names, nlens, values, vlens,
                   fn, arg);
}

static int etcd_get_user_config(sk_node *n, const char *user, size_t ulen,
                                sk_cmeta_gconf_fn fn, void *arg)
{
    return get_set(n, "config/user/", user, ulen, fn, arg);
}

static int etcd_set_user_config(sk_node *n, const char *user, size_t ulen, int64_t version,
                                int count, const char *const *names, const size_t *nlens,
                                const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                                void *arg)
{
    return put_set(n, "config/user/", user, ulen, version, count, names, nlens, values, vlens,
                   fn, arg);
}

typedef struct ulist {
    sk_cmeta_users_fn fn;
    void *arg;
    size_t skip; /* the key prefix: what follows is the user name */
} ulist;

static void users_got(void *arg, int err, const etcd_range_result *r)
{
    ulist *l = arg;
    size_t n = err ? 0 : r->n;
    sk_cmeta_user *u = calloc(n ? n : 1, sizeof *u);
    cm_bconf *b = calloc(n ? n : 1, sizeof *b);
    sk_gconf *sets = calloc(n ? n : 1, sizeof *sets);
    int k = 0;
    for (size_t i = 0; u && b && sets && i < n; i++) {
        const etcd_kv *kv = &r->kvs[i];
        if (kv->klen <= l->skip || cm_decode_bconf(kv->value, kv->vlen, -1, &b[k]) != 0)
            continue;
        sets[k] = (sk_gconf){b[k].nconfigs, b[k].names, b[k].values};
        u[k] = (sk_cmeta_user){(const char *)kv->key + l->skip, kv->klen - l->skip, &sets[k]};
        k++;
    }
    l->fn(l->arg, err ? err : (u && b && sets) ? 0 : SK_ERR_NOMEM, u, k);
    for (int i = 0; b && i < k; i++)
        cm_bconf_clear(&b[i]);
    free(u);
    free(b);
    free(sets);
    free(l);
}

static int etcd_list_user_configs(sk_node *n, sk_cmeta_users_fn fn, void *arg)
{
    size_t kl;
    char *key = set_key(n, "config/user/", "", 0, &kl);
    ulist *l = key ? calloc(1, sizeof *l) : NULL;
    if (!l) {
        free(key);
        return SK_ERR_NOMEM;
    }
    *l = (ulist){fn, arg, kl};
    /* The range of every key under the prefix: its last byte, plus one. */
    char *end = strdup(key);
    if (!end) {
        free(key);
        free(l);
        return SK_ERR_NOMEM;
    }
    end[kl - 1]++;
    int rc = etcd_range(cs_etcd(sess(n)), (const uint8_t *)key, kl, (const uint8_t *)end, kl,
                        SK_CMETA_MAX_USERS, 0, 0, users_got, l);
    free(key);
    free(end);
    if (rc)
        free(l);
    return rc;
}

/* ---- ACL bindings: config/acl/<text> (acls.h), value {} ---- */

#define ACL_DIR "config/acl/"

typedef struct acall {
    sk_node *n;
    sk_acl a;
    char text[SK_ACL_TEXT_MAX];
    bool present;
    sk_cmeta_fn fn;
    void *arg;
} acall;

static void acl_written(void *arg, int err, const etcd_txn_result *r)
{
    (void)r;
    acall *c = arg;
    /* The watch brings it too; memory follows at once for this node's
     * next request. */
    if (!err && sk_acls_apply(c->n, &c->a, c->present) != 0)
        SK_WARN("cmeta", "an ACL change is in etcd but not applied in memory");
    c->fn(c->arg, err);
    free(c);
}

static int etcd_set_acl(sk_node *n, const sk_acl *a, bool present, sk_cmeta_fn fn, void *arg)
{
    acall *c = calloc(1, sizeof *c);
    if (!c)
        return SK_ERR_NOMEM;
    *c = (acall){.n = n, .present = present, .fn = fn, .arg = arg};
    size_t tl = sk_acl_encode(a, c->text, sizeof c->text);
    size_t kl;
    char *key = tl ? set_key(n, ACL_DIR, c->text, tl, &kl) : NULL;
    /* c->a points into c->text, decoded in place once the key is made. */
    if (!key || sk_acl_decode(c->text, tl, &c->a) != 0) {
        free(key);
        free(c);
        return SK_ERR_NOMEM;
    }
    int rc = present ? etcd_put(cs_etcd(sess(n)), (const uint8_t *)key, kl,
                                (const uint8_t *)"{}", 2, 0, acl_written, c)
                     : etcd_delete(cs_etcd(sess(n)), (const uint8_t *)key, kl, NULL, 0,
                                   acl_written, c);
    free(key);
    if (rc)
        free(c);
    return rc;
}

static void acl_event(sk_node *n, const etcd_kv *kv, bool present, size_t skip)
{
    if (kv->klen <= skip)
        return;
    if (sk_acls_apply_text(n, (const char *)kv->key + skip, kv->klen - skip, present) != 0)
        SK_WARN("cmeta", "unreadable ACL key %.*s", (int)(kv->klen > 300 ? 300 : kv->klen),
                (const char *)kv->key);
}

static size_t acl_prefix(sk_node *n, char *buf, size_t len)
{
    int k = snprintf(buf, len, "%s" ACL_DIR, prefix(n));
    return k > 0 && (size_t)k < len ? (size_t)k : 0;
}

static void acl_watched(void *arg, int err, int64_t revision, const etcd_event *evs, size_t nev);

static void acl_watch_from(sk_node *n, int64_t revision)
{
    char key[512];
    uint8_t end[512];
    size_t kl = acl_prefix(n, key, sizeof key);
    size_t el = etcd_prefix_end((const uint8_t *)key, kl, end);
    n->acl_watch =
        etcd_watch_start(cs_etcd(sess(n)), (const uint8_t *)key, kl, end, el, revision,
                         acl_watched, n);
    if (!n->acl_watch)
        SK_WARN("cmeta", "cannot watch the ACLs of etcd");
}

static void acls_read(void *arg, int err, const etcd_range_result *r)
{
    sk_node *n = arg;
    if (err) {
        SK_WARN("cmeta", "cannot read the ACLs of etcd (%s)", sk_err_name(err));
        return;
    }
    char key[512];
    size_t skip = acl_prefix(n, key, sizeof key);
    /* The whole set anew. */
    sk_acls_free(n);
    for (size_t i = 0; i < r->n; i++)
        acl_event(n, &r->kvs[i], true, skip);
    acl_watch_from(n, r->revision + 1);
}

static int acl_read_all(sk_node *n)
{
    char key[512];
    uint8_t end[512];
    size_t kl = acl_prefix(n, key, sizeof key);
    size_t el = etcd_prefix_end((const uint8_t *)key, kl, end);
    return etcd_range(cs_etcd(sess(n)), (const uint8_t *)key, kl, end, el, 0, 0, 0, acls_read,
                      n);
}

static void acl_watched(void *arg, int err, int64_t revision, const etcd_event *evs, size_t nev)
{
    (void)revision;
    sk_node *n = arg;
    if (err) {
        n->acl_watch = NULL;
        /* History lost: read everything again, then watch anew. */
        if (err == SK_ERR_COMPACTED && acl_read_all(n) != 0)
            SK_WARN("cmeta", "cannot read the ACLs of etcd again");
        return;
    }
    char key[512];
    size_t skip = acl_prefix(n, key, sizeof key);
    for (size_t i = 0; i < nev; i++)
        acl_event(n, &evs[i].kv, evs[i].type == ETCD_EV_PUT, skip);
}

int sk_cmeta_follow_acls(sk_node *n)
{
    return acl_read_all(n);
}

void sk_cmeta_unfollow_acls(sk_node *n)
{
    if (n->acl_watch)
        etcd_watch_cancel(n->acl_watch);
    n->acl_watch = NULL;
}

const sk_cmeta_ops sk_cmeta_etcd = {
    "etcd",
    etcd_create_topic,
    etcd_delete_topic,
    etcd_add_partitions,
    etcd_set_topic_config,
    etcd_alloc_pid,
    etcd_set_broker_config,
    etcd_get_group_config,
    etcd_set_group_config,
    etcd_get_user_config,
    etcd_set_user_config,
    etcd_list_user_configs,
    etcd_set_acl,
};

/* ---- the internal topic ---- */

static void internal_done(void *arg, int err)
{
    sk_node *n = arg;
    n->creating_internal = false;
    if (err && err != SK_KAFKA_TOPIC_ALREADY_EXISTS)
        SK_WARN("cmeta", "cannot create __consumer_offsets yet (%s); trying again",
                sk_err_name(err));
}

int sk_cmeta_create_internal(sk_node *n, const char *name, int32_t nparts)
{
    if (n->creating_internal)
        return 0;
    sk_tconf conf;
    if (sk_tconf_build(n->cfg, 0, NULL, NULL, NULL, NULL, &conf, NULL, 0) != 0)
        return SK_ERR_NOMEM;
    sk_topic_spec spec = {name, strlen(name), nparts, 1, &conf, true};
    int rc = etcd_create_topic(n, &spec, internal_done, n, NULL);
    if (rc)
        sk_tconf_free(&conf);
    else
        n->creating_internal = true;
    return rc;
}
