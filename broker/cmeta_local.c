/*
 * cmeta_local: a single node's metadata changes, as records of its own log
 * (cmeta.h). Each change is appended, then applied in memory; fn runs once
 * the record is durable.
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "cmeta.h"
#include "config.h"
#include "dynconf.h"
#include "acls.h"
#include "gconf.h"
#include "sk_map.h"
#include "groups.h"
#include "meta.h"
#include "node.h"
#include "plog.h"
#include "sk_err.h"
#include "sk_log.h"
#include "tconf.h"

void sk_random_uuid(kc_uuid *u)
{
    if (getrandom(u->b, 16, 0) != 16) {
        for (int i = 0; i < 16; i++)
            u->b[i] = (uint8_t)rand();
    }
    u->b[6] = (uint8_t)((u->b[6] & 0x0f) | 0x40);
    u->b[8] = (uint8_t)((u->b[8] & 0x3f) | 0x80);
}

static int append_meta(sk_node *n, sk_buf *b, sk_cmeta_fn fn, void *arg)
{
    if (sk_buf_failed(b)) {
        sk_buf_free(b);
        return SK_ERR_NOMEM;
    }
    struct iovec iov = {b->data, b->len};
    wal_lsn end = 0;
    int rc = sk_node_append(n, SK_WAL_META, &iov, 1, fn, arg, &end);
    sk_buf_free(b);
    if (rc == 0)
        sk_node_shown(n, end);
    return rc;
}

static int local_create_topic(sk_node *n, const sk_topic_spec *spec, sk_cmeta_fn fn, void *arg,
                              kc_uuid *out)
{
    kc_uuid id;
    do
        sk_random_uuid(&id);
    while (sk_topic_get_id(n, &id));
    /* Build the record from a stack topic, append, then register. */
    uint64_t first_stream = n->next_stream;
    char *nm = strndup(spec->name, spec->len);
    if (!nm)
        return SK_ERR_NOMEM;
    sk_topic tmp = {.name = nm, .id = id, .nparts = spec->nparts, .conf = *spec->conf,
                    .replication_factor = spec->rf, .first_stream = first_stream};
    sk_buf b;
    sk_buf_init(&b, 1 << 20);
    sk_meta_topic_create(&b, &tmp);
    free(nm);
    int rc = append_meta(n, &b, fn, arg);
    if (rc != 0)
        return rc;
    n->next_stream = first_stream + (uint64_t)spec->nparts;
    sk_topic *t = sk_topic_new(n, &id, spec->name, spec->len, spec->nparts, spec->rf, spec->conf,
                               first_stream, SK_OWN_ACTIVE);
    if (!t) {
        SK_ERROR("node", "out of memory registering topic %.*s", (int)spec->len, spec->name);
        return SK_ERR_NOMEM;
    }
    SK_INFO("node", "created topic %s with %d partitions", t->name, spec->nparts);
    if (out)
        *out = id;
    return 0;
}

static int local_delete_topic(sk_node *n, sk_topic *t, sk_cmeta_fn fn, void *arg)
{
    sk_buf b;
    sk_buf_init(&b, 1024);
    sk_meta_topic_delete(&b, &t->id);
    int rc = append_meta(n, &b, fn, arg);
    if (rc == 0) {
        SK_INFO("node", "deleted topic %s", t->name);
        sk_groups_topic_deleted(n->groups, t->name);
        sk_topic_remove(n, t);
    }
    return rc;
}

static int local_add_partitions(sk_node *n, sk_topic *t, int32_t nparts, sk_cmeta_fn fn,
                                void *arg)
{
    sk_buf b;
    sk_buf_init(&b, 1024);
    uint64_t first_stream = n->next_stream;
    sk_meta_partitions(&b, &t->id, nparts, first_stream);
    int rc = append_meta(n, &b, fn, arg);
    if (rc == 0) {
        n->next_stream = first_stream + (uint64_t)(nparts - t->nparts);
        rc = sk_topic_grow(t, nparts, first_stream, SK_OWN_ACTIVE);
    }
    return rc;
}

static int local_set_topic_config(sk_node *n, sk_topic *t, sk_tconf *conf, sk_cmeta_fn fn,
                                  void *arg)
{
    sk_topic tmp = *t;
    tmp.conf = *conf;
    sk_buf b;
    sk_buf_init(&b, 1 << 20);
    sk_meta_topic_config(&b, &tmp);
    int rc = append_meta(n, &b, fn, arg);
    if (rc == 0) {
        sk_tconf_free(&t->conf);
        t->conf = *conf;
        memset(conf, 0, sizeof *conf);
    }
    return rc;
}

/* A producer id is taken once its record is durable. */
struct pid_wait {
    sk_cmeta_pid_fn fn;
    void *arg;
    int64_t pid;
};

static void pid_durable(void *arg, int err)
{
    struct pid_wait *w = arg;
    w->fn(w->arg, err, err ? -1 : w->pid);
    free(w);
}

static int local_alloc_pid(sk_node *n, sk_cmeta_pid_fn fn, void *arg)
{
    struct pid_wait *w = calloc(1, sizeof *w);
    if (!w)
        return SK_ERR_NOMEM;
    w->fn = fn;
    w->arg = arg;
    w->pid = n->next_pid;
    sk_buf b;
    sk_buf_init(&b, 64);
    sk_meta_pid(&b, w->pid + 1);
    int rc = append_meta(n, &b, pid_durable, w);
    if (rc != 0) {
        free(w);
        return rc;
    }
    n->next_pid = w->pid + 1;
    return 0;
}

static int local_set_broker_config(sk_node *n, int count, const char *const *names,
                                   const size_t *nlens, const char *const *values,
                                   const size_t *vlens, sk_cmeta_fn fn, void *arg)
{
    return sk_dynconf_commit(n, count, names, nlens, values, vlens, fn, arg);
}

/* One writer (this loop), so the version is only a formality. */
static int local_get_group_config(sk_node *n, const char *group, size_t glen,
                                  sk_cmeta_gconf_fn fn, void *arg)
{
    fn(arg, 0, sk_gconf_get(n, group, glen), 0);
    return 0;
}

static int local_set_group_config(sk_node *n, const char *group, size_t glen, int64_t version,
                                  int count, const char *const *names, const size_t *nlens,
                                  const char *const *values, const size_t *vlens,
                                  sk_cmeta_fn fn, void *arg)
{
    (void)version;
    sk_buf body;
    sk_buf_init(&body, 1 << 20);
    sk_gconf_body_put(&body, group, glen, count, names, nlens, values, vlens);
    sk_buf b;
    sk_buf_init(&b, 1 << 20);
    sk_meta_group_config(&b, body.data, body.len);
    if (sk_buf_failed(&body))
        b.failed = true;
    sk_buf_free(&body);
    int rc = append_meta(n, &b, fn, arg);
    /* fn runs once durable; memory that cannot follow is rebuilt at start. */
    if (rc == 0 && sk_gconf_apply(n, group, glen, count, names, nlens, values, vlens) != 0)
        SK_WARN("cmeta", "group %.*s: the new configs are recorded but not applied in memory",
                (int)(glen > 200 ? 200 : glen), group);
    return rc;
}

static int local_get_user_config(sk_node *n, const char *user, size_t ulen,
                                 sk_cmeta_gconf_fn fn, void *arg)
{
    fn(arg, 0, sk_uconf_get(n, user, ulen), 0);
    return 0;
}

static int local_set_user_config(sk_node *n, const char *user, size_t ulen, int64_t version,
                                 int count, const char *const *names, const size_t *nlens,
                                 const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                                 void *arg)
{
    (void)version;
    sk_buf body;
    sk_buf_init(&body, 1 << 20);
    sk_gconf_body_put(&body, user, ulen, count, names, nlens, values, vlens);
    sk_buf b;
    sk_buf_init(&b, 1 << 20);
    sk_meta_user_config(&b, body.data, body.len);
    if (sk_buf_failed(&body))
        b.failed = true;
    sk_buf_free(&body);
    int rc = append_meta(n, &b, fn, arg);
    if (rc == 0 && sk_uconf_apply(n, user, ulen, count, names, nlens, values, vlens) != 0)
        SK_WARN("cmeta", "user credentials are recorded but not applied in memory");
    return rc;
}

static int local_list_user_configs(sk_node *n, sk_cmeta_users_fn fn, void *arg)
{
    sk_map *m = n->uconfs;
    size_t cnt = m ? sk_map_count(m) : 0, it = 0;
    if (cnt > SK_CMETA_MAX_USERS)
        cnt = SK_CMETA_MAX_USERS;
    sk_cmeta_user *u = calloc(cnt ? cnt : 1, sizeof *u);
    if (!u)
        return SK_ERR_NOMEM;
    int k = 0;
    const void *key;
    size_t klen;
    void *v;
    while (m && (size_t)k < cnt && sk_map_next(m, &it, &key, &klen, &v))
        u[k++] = (sk_cmeta_user){key, klen, v};
    fn(arg, 0, u, k);
    free(u);
    return 0;
}

static int local_set_acl(sk_node *n, const sk_acl *a, bool present, sk_cmeta_fn fn, void *arg)
{
    sk_buf body;
    sk_buf_init(&body, 0);
    int rc = sk_acls_body_put(&body, a, present);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_acl(&b, body.data, body.len);
    if (rc || sk_buf_failed(&body))
        b.failed = true;
    sk_buf_free(&body);
    rc = append_meta(n, &b, fn, arg);
    if (rc == 0 && sk_acls_apply(n, a, present) != 0)
        SK_WARN("cmeta", "an ACL change is recorded but not applied in memory");
    return rc;
}

const sk_cmeta_ops sk_cmeta_local = {
    "local",
    local_create_topic,
    local_delete_topic,
    local_add_partitions,
    local_set_topic_config,
    local_alloc_pid,
    local_set_broker_config,
    local_get_group_config,
    local_set_group_config,
    local_get_user_config,
    local_set_user_config,
    local_list_user_configs,
    local_set_acl,
};

/* ---- the interface ---- */

int sk_cmeta_create_topic(sk_node *n, const sk_topic_spec *spec, sk_cmeta_fn fn, void *arg,
                          kc_uuid *id)
{
    return n->cmeta->create_topic(n, spec, fn, arg, id);
}

int sk_cmeta_delete_topic(sk_node *n, sk_topic *t, sk_cmeta_fn fn, void *arg)
{
    return n->cmeta->delete_topic(n, t, fn, arg);
}

int sk_cmeta_add_partitions(sk_node *n, sk_topic *t, int32_t nparts, sk_cmeta_fn fn, void *arg)
{
    return n->cmeta->add_partitions(n, t, nparts, fn, arg);
}

int sk_cmeta_set_topic_config(sk_node *n, sk_topic *t, sk_tconf *conf, sk_cmeta_fn fn, void *arg)
{
    return n->cmeta->set_topic_config(n, t, conf, fn, arg);
}

int sk_cmeta_alloc_pid(sk_node *n, sk_cmeta_pid_fn fn, void *arg)
{
    return n->cmeta->alloc_pid(n, fn, arg);
}

int sk_cmeta_get_group_config(sk_node *n, const char *group, size_t glen, sk_cmeta_gconf_fn fn,
                              void *arg)
{
    return n->cmeta->get_group_config(n, group, glen, fn, arg);
}

int sk_cmeta_set_group_config(sk_node *n, const char *group, size_t glen, int64_t version,
                              int count, const char *const *names, const size_t *nlens,
                              const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                              void *arg)
{
    return n->cmeta->set_group_config(n, group, glen, version, count, names, nlens, values,
                                      vlens, fn, arg);
}

int sk_cmeta_set_broker_config(sk_node *n, int count, const char *const *names,
                               const size_t *nlens, const char *const *values,
                               const size_t *vlens, sk_cmeta_fn fn, void *arg)
{
    return n->cmeta->set_broker_config(n, count, names, nlens, values, vlens, fn, arg);
}

int sk_cmeta_get_user_config(sk_node *n, const char *user, size_t ulen, sk_cmeta_gconf_fn fn,
                             void *arg)
{
    return n->cmeta->get_user_config(n, user, ulen, fn, arg);
}

int sk_cmeta_set_user_config(sk_node *n, const char *user, size_t ulen, int64_t version,
                             int count, const char *const *names, const size_t *nlens,
                             const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                             void *arg)
{
    return n->cmeta->set_user_config(n, user, ulen, version, count, names, nlens, values, vlens,
                                     fn, arg);
}

int sk_cmeta_set_acl(sk_node *n, const sk_acl *a, bool present, sk_cmeta_fn fn, void *arg)
{
    return n->cmeta->set_acl(n, a, present, fn, arg);
}

int sk_cmeta_list_user_configs(sk_node *n, sk_cmeta_users_fn fn, void *arg)
{
    return n->cmeta->list_user_configs(n, fn, arg);
}
