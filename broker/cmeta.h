/*
 * cmeta: changes of the cluster's metadata, one interface with two
 * implementations (docs/cluster.md, "What lives where"):
 *  - a single node records them in its own log (cmeta_local.c: WAL records
 *    that the SQLite view and every segment's snapshot keep);
 *  - a cluster member writes them to etcd (cmeta_etcd.c) with
 *    compare-and-swap transactions, and every node, itself included, applies
 *    them from its watch.
 * Either way, `fn` runs once the change is durable and this node's memory
 * shows it (topics, configurations): with 0, or a Kafka error code (>= 0)
 * or an internal error (< 0; map it with sk_err_to_kafka).
 *
 * The metadata: topics (id, name, partition count, configuration overrides,
 * replication factor), producer ids, the broker properties changed at
 * runtime, group configs, users' SCRAM credentials and ACL bindings. Partition state (offsets, batches, producers' sequences, object
 * ranges, committed offsets) is not metadata: it is in the partition's log.
 *
 * Thread: the event loop. A non-zero return means fn will not run.
 */
#ifndef CMETA_H
#define CMETA_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "types.h"

typedef void (*sk_cmeta_fn)(void *arg, int err);
struct sk_gconf;
struct sk_acl;
/* A group's config overrides (NULL: none), valid during the call, and the
 * version a change of them must name. */
typedef void (*sk_cmeta_gconf_fn)(void *arg, int err, const struct sk_gconf *g, int64_t version);
typedef void (*sk_cmeta_pid_fn)(void *arg, int err, int64_t pid);
/* Every user with credentials, valid during the call. */
typedef struct sk_cmeta_user {
    const char *name;
    size_t len;
    const struct sk_gconf *set;
} sk_cmeta_user;
typedef void (*sk_cmeta_users_fn)(void *arg, int err, const sk_cmeta_user *users, int n);

typedef struct sk_topic_spec {
    const char *name;
    size_t len;
    int32_t nparts;
    int16_t rf;
    sk_tconf *conf; /* taken on success */
    bool internal;  /* __consumer_offsets */
} sk_topic_spec;

typedef struct sk_cmeta_ops {
    const char *name;
    /* *id is the new topic's id (known at once). */
    int (*create_topic)(sk_node *n, const sk_topic_spec *spec, sk_cmeta_fn fn, void *arg,
                        kc_uuid *id);
    int (*delete_topic)(sk_node *n, sk_topic *t, sk_cmeta_fn fn, void *arg);
    int (*add_partitions)(sk_node *n, sk_topic *t, int32_t nparts, sk_cmeta_fn fn, void *arg);
    /* conf: the complete set of overrides (taken on success). */
    int (*set_topic_config)(sk_node *n, sk_topic *t, sk_tconf *conf, sk_cmeta_fn fn, void *arg);
    int (*alloc_pid)(sk_node *n, sk_cmeta_pid_fn fn, void *arg);
    /* The complete set of broker properties changed at runtime. */
    int (*set_broker_config)(sk_node *n, int count, const char *const *names,
                             const size_t *nlens, const char *const *values, const size_t *vlens,
                             sk_cmeta_fn fn, void *arg);
    /* A group's config overrides; fn may run before the call returns. */
    int (*get_group_config)(sk_node *n, const char *group, size_t glen, sk_cmeta_gconf_fn fn,
                            void *arg);
    /* The complete set of a group's config overrides (gconf.h; count 0:
     * none), replacing the one read at `version` (else SK_ERR_AGAIN: another
     * change came first). */
    int (*set_group_config)(sk_node *n, const char *group, size_t glen, int64_t version,
                            int count, const char *const *names, const size_t *nlens,
                            const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                            void *arg);
    /* A user's SCRAM credentials (gconf.h's user configs), read and changed
     * as a group's config set is. */
    int (*get_user_config)(sk_node *n, const char *user, size_t ulen, sk_cmeta_gconf_fn fn,
                           void *arg);
    int (*set_user_config)(sk_node *n, const char *user, size_t ulen, int64_t version,
                           int count, const char *const *names, const size_t *nlens,
                           const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                           void *arg);
    /* Every user with credentials (at most SK_CMETA_MAX_USERS). */
    int (*list_user_configs)(sk_node *n, sk_cmeta_users_fn fn, void *arg);
    /* Creates (present) or deletes one ACL binding (acls.h); creating one
     * that exists or deleting one that does not is no error. */
    int (*set_acl)(sk_node *n, const struct sk_acl *a, bool present, sk_cmeta_fn fn, void *arg);
} sk_cmeta_ops;

#define SK_CMETA_MAX_USERS 10000

extern const sk_cmeta_ops sk_cmeta_local;
extern const sk_cmeta_ops sk_cmeta_etcd;

int sk_cmeta_create_topic(sk_node *n, const sk_topic_spec *spec, sk_cmeta_fn fn, void *arg,
                          kc_uuid *id) __attribute__((warn_unused_result));
int sk_cmeta_delete_topic(sk_node *n, sk_topic *t, sk_cmeta_fn fn, void *arg)
    __attribute__((warn_unused_result));
int sk_cmeta_add_partitions(sk_node *n, sk_topic *t, int32_t nparts, sk_cmeta_fn fn, void *arg)
    __attribute__((warn_unused_result));
int sk_cmeta_set_topic_config(sk_node *n, sk_topic *t, sk_tconf *conf, sk_cmeta_fn fn, void *arg)
    __attribute__((warn_unused_result));
int sk_cmeta_alloc_pid(sk_node *n, sk_cmeta_pid_fn fn, void *arg)
    __attribute__((warn_unused_result));
int sk_cmeta_set_broker_config(sk_node *n, int count, const char *const *names,
                               const size_t *nlens, const char *const *values,
                               const size_t *vlens, sk_cmeta_fn fn, void *arg)
    __attribute__((warn_unused_result));

int sk_cmeta_get_group_config(sk_node *n, const char *group, size_t glen, sk_cmeta_gconf_fn fn,
                              void *arg) __attribute__((warn_unused_result));
int sk_cmeta_set_group_config(sk_node *n, const char *group, size_t glen, int64_t version,
                              int count,
                              const char *const *names, const size_t *nlens,
                              const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                              void *arg) __attribute__((warn_unused_result));

int sk_cmeta_get_user_config(sk_node *n, const char *user, size_t ulen, sk_cmeta_gconf_fn fn,
                             void *arg) __attribute__((warn_unused_result));
int sk_cmeta_set_user_config(sk_node *n, const char *user, size_t ulen, int64_t version,
                             int count, const char *const *names, const size_t *nlens,
                             const char *const *values, const size_t *vlens, sk_cmeta_fn fn,
                             void *arg) __attribute__((warn_unused_result));

int sk_cmeta_list_user_configs(sk_node *n, sk_cmeta_users_fn fn, void *arg)
    __attribute__((warn_unused_result));

int sk_cmeta_set_acl(sk_node *n, const struct sk_acl *a, bool present, sk_cmeta_fn fn,
                     void *arg) __attribute__((warn_unused_result));
/* Cluster: reads every ACL binding of etcd into memory and follows their
 * changes with a watch (started with the cluster, ended with it). */
int sk_cmeta_follow_acls(sk_node *n) __attribute__((warn_unused_result));
void sk_cmeta_unfollow_acls(sk_node *n);

/* Cluster: creates the internal topic `name` (__consumer_offsets) unless a
 * creation is under way; its outcome is logged. */
int sk_cmeta_create_internal(sk_node *n, const char *name, int32_t nparts);

/* A fresh random (version 4) topic id. */
void sk_random_uuid(kc_uuid *u);

#endif
