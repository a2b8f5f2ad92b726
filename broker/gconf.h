/*
 * gconf: group configurations (DescribeConfigs and IncrementalAlterConfigs
 * on resource type GROUP), with Kafka 4.3's names, defaults and bounds.
 *
 * Kafka keeps them for the KIP-848 consumer protocol, share groups and
 * streams groups: they are checked, stored and described as Kafka does.
 * The consumer protocol (cgroup.c) applies consumer.session.timeout.ms and
 * consumer.heartbeat.interval.ms; the others have no effect.
 *
 * A group's overrides are one complete set, changed as a whole (cmeta.h):
 * on a single node a SK_META_GROUP_CONFIG WAL record, kept in the SQLite
 * view and in every snapshot (extra sections SK_SNAP_GROUP_CONFIGS); in a
 * cluster a key of etcd that every node mirrors. This module holds the sets
 * in memory (node->gconfs) and encodes the record bodies.
 *
 * Record and section body: str group | config block (meta.h).
 *
 * Thread: the event loop (the definitions and the codec: any).
 */
#ifndef GCONF_H
#define GCONF_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sk_buf.h"
#include "types.h"

typedef enum { SK_GC_INT, SK_GC_BOOL, SK_GC_ISOLATION, SK_GC_OFFSET_RESET } sk_gc_type;

typedef struct sk_gconf_def {
    const char *name;
    sk_gc_type type;
    const char *def;     /* the default, as text */
    const char *synonym; /* Kafka's broker property the default comes from */
    int32_t at_least;    /* SK_GC_INT: the lowest value parsed at all */
    const char *min_prop, *max_prop; /* SK_GC_INT: broker bounds (NULL: none) */
    int32_t min, max;
    const char *doc;
} sk_gconf_def;

int sk_gconf_ndefs(void);
const sk_gconf_def *sk_gconf_def_at(int i);
const sk_gconf_def *sk_gconf_find(const char *name, size_t len);

/* 0 when name=value is a valid group config, with the value as Kafka keeps
 * it in norm (trimmed; a number or a boolean in its canonical form), else a
 * Kafka error code with Kafka's message in msg. */
#define SK_GCONF_VALUE_MAX 256
int16_t sk_gconf_check(const char *name, size_t nlen, const char *value, size_t vlen,
                       char norm[SK_GCONF_VALUE_MAX], char *msg, size_t msglen);

/* A group's overrides. */
typedef struct sk_gconf sk_gconf;
struct sk_gconf {
    int n;
    char **names, **values;
};

/* NULL when the group has no override. */
const sk_gconf *sk_gconf_get(const sk_node *n, const char *group, size_t glen);
/* Makes (names, values) the group's complete set (count 0: none). */
int sk_gconf_apply(sk_node *n, const char *group, size_t glen, int count,
                   const char *const *names, const size_t *nlens, const char *const *values,
                   const size_t *vlens) __attribute__((warn_unused_result));
void sk_gconf_free_all(sk_node *n);

/*
 * User configs, Kafka's entity type "users": a user's SCRAM credentials, one
 * config per mechanism (scram.h's stored form), kept as group configs are
 * (SK_META_USER_CONFIG records, SK_SNAP_USER_CONFIGS sections, etcd keys
 * config/user/<name>) in node->uconfs, with the same body. The snapshot and
 * free functions above cover them too.
 */
const sk_gconf *sk_uconf_get(const sk_node *n, const char *user, size_t ulen);
int sk_uconf_apply(sk_node *n, const char *user, size_t ulen, int count,
                   const char *const *names, const size_t *nlens, const char *const *values,
                   const size_t *vlens) __attribute__((warn_unused_result));
int sk_uconf_load(sk_node *n, const uint8_t *body, size_t len) __attribute__((warn_unused_result));

/* The record/section body. */
void sk_gconf_body_put(sk_buf *b, const char *group, size_t glen, int count,
                       const char *const *names, const size_t *nlens, const char *const *values,
                       const size_t *vlens);
/* Applies a body (start-up loading, snapshots). */
int sk_gconf_load(sk_node *n, const uint8_t *body, size_t len) __attribute__((warn_unused_result));
/* Appends one snapshot extra section per group with overrides and per user
 * with credentials; returns how many. */
uint32_t sk_gconf_snapshot(const sk_node *n, sk_buf *b);

#endif
