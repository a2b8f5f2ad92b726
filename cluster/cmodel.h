/*
 * cmodel: the cluster as etcd describes it (docs/cluster.md, "etcd keys"):
 * the keys' names, their JSON values, and an in-memory mirror kept up to
 * date by applying etcd's key-value pairs and watch events.
 *
 * The mirror holds the cluster id and counters, live nodes, logs, topics,
 * partitions, walrefs, payrefs, runtime broker configs and the controller,
 * each with the mod_revision of its key (the compare of every
 * compare-and-swap). It does no I/O: the session (cluster/session.h) feeds
 * it, and tells its user what changed through the change callback, one call
 * per key that changed (with the old and new values), in the order the
 * events came.
 *
 * Values are JSON objects encoded and parsed with jansson. Unknown fields are
 * ignored (a newer node may add some); a value that is not valid JSON or
 * lacks a required field is logged and treated as absent (never a crash).
 * Every field docs/cluster.md lists is required (all but a log's "kind",
 * absent from values older than it), with the JSON type and range given
 * there; strings longer than the CM_* limits, counts beyond them and unknown
 * enum words ("state", "kind") make a value invalid. A key of a known shape
 * whose name does not parse (nodes/x, a topic name with a character Kafka
 * refuses) is invalid the same way. Each invalid value or key is logged once
 * (module "cmodel"): again only when it is rewritten with a new mod_revision.
 *
 * Revisions: a put or a deletion whose mod_rev is older than the one the
 * model holds for that key is stale (a range and a watch may overlap) and
 * ignored; a put of the value and mod_rev the model already holds is a
 * duplicate and reports nothing.
 *
 * Contract: pure data structure, no locking: one thread (the loop) uses a
 * model. Strings handed in are copied; pointers handed out are borrowed and
 * stay valid until the next cm_apply_* / cm_reset / cm_destroy call. The
 * change callback must not call cm_apply_*, cm_reset_* or cm_destroy; it may
 * query the model, which already holds the new state.
 * Errors: SK_ERR_NOMEM (the model is left as it was), SK_ERR_PARSE (a value
 * or a key name that does not parse: logged, and the key treated as absent;
 * the model stays consistent and the caller may go on).
 */
#ifndef CMODEL_H
#define CMODEL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kc.h"

#define CM_ZONE_MAX 64
#define CM_HOST_MAX 256
#define CM_NAME_MAX 64   /* listener names */
#define CM_TOPIC_MAX 249 /* Kafka's longest topic name */
#define CM_MAX_LISTENERS 8
#define CM_CLUSTER_ID_MAX 64    /* buffer: ids of 1 to 63 printable ASCII characters */
#define CM_COUNTER_NAME_MAX 32  /* buffer: "next_" and [a-z0-9_] */
#define CM_CONFIG_NAME_MAX 255  /* longest config name (bytes) */
#define CM_CONFIG_VALUE_MAX 32767 /* longest config value: Kafka's STRING on the wire */
#define CM_MAX_CONFIGS 1024     /* configs of one topic or one config/broker key */

#define CM_WUR __attribute__((warn_unused_result))

/* ---- values ---- */

typedef struct cm_listener {
    char name[CM_NAME_MAX];
    char host[CM_HOST_MAX];
    int32_t port;
} cm_listener;

/* nodes/<id>: a live node (the key lives under the node's lease). */
typedef struct cm_node {
    int32_t id;
    char rack[CM_ZONE_MAX];
    int64_t log;
    int nlisteners;
    cm_listener listeners[CM_MAX_LISTENERS];
    bool draining;
    int64_t started_ms;
    int64_t mod_rev;
} cm_node;

typedef enum { CM_LOG_LIVE, CM_LOG_DEAD } cm_log_state;

/* What a log holds: a main's record batches (data), or the batches a proxy
 * received for mains of other zones (payload). "kind" is optional in the
 * value: absent reads as data, so values written before it still parse. */
typedef enum { CM_LOG_DATA, CM_LOG_PAYLOAD } cm_log_kind;

/* logs/<id> */
typedef struct cm_log {
    int64_t id;
    int32_t node;
    char rack[CM_ZONE_MAX];
    cm_log_state state;
    int32_t custodian; /* -1: none */
    cm_log_kind kind;
    int64_t mod_rev;
} cm_log;

/* topics/<name> */
typedef struct cm_topic {
    char name[CM_TOPIC_MAX + 1];
    kc_uuid id;
    int32_t partitions;
    int16_t rf;
    uint64_t first_stream; /* stream of partition 0 (each partition's key has its own) */
    bool internal;
    int nconfigs;
    char **config_names; /* malloc'd, owned by the model */
    char **config_values;
    int64_t mod_rev;
} cm_topic;

typedef enum { CM_PART_NEW, CM_PART_ACTIVE, CM_PART_MOVING, CM_PART_HANDOFF } cm_part_state;

/* parts/<topic id hex>/<index> */
typedef struct cm_part {
    kc_uuid topic;
    int32_t index;
    int32_t epoch;
    int32_t node; /* -1: none */
    int64_t log;  /* ACTIVE: the main's log; else 0 */
    cm_part_state state;
    uint64_t stream; /* id of the partition's data in objects, never reused */
    int64_t src_log; /* MOVING, HANDOFF */
    int64_t src_lsn; /* HANDOFF */
    /* The node the partition belongs on (Kafka's preferred replica): where
     * it was placed, reassigned or rebalanced to last; a failover or a
     * node's drain moves it elsewhere without changing this. Optional in the
     * value ("pref"), absent in those written before it existed. */
    bool has_pref;
    int32_t pref;
    int64_t mod_rev;
} cm_part;

/* walrefs/<topic id hex>-<index>/<log id> */
typedef struct cm_walref {
    kc_uuid topic;
    int32_t index;
    int64_t log;
    int64_t lsn; /* the lowest position the partition's main still reads */
    int64_t mod_rev;
} cm_walref;

/* payrefs/<payload log id>/<main log id>: the main log mlog may still need
 * records of the payload log plog at positions >= lsn. */
typedef struct cm_payref {
    int64_t plog;
    int64_t mlog;
    int64_t lsn;
    int64_t mod_rev;
} cm_payref;

/* cluster/next_<name>: a counter. `next` comes first so that a change's
 * pointer also reads as the int64 value (see cm_change). */
typedef struct cm_counter {
    int64_t next;
    char name[CM_COUNTER_NAME_MAX]; /* "next_log", ... */
    int64_t mod_rev;
} cm_counter;

/* controller: `node` comes first so that a change's pointer also reads as the
 * int32 node id (see cm_change). */
typedef struct cm_ctrl {
    int32_t node;
    int64_t log;
    int64_t mod_rev;
} cm_ctrl;

/* config/broker/<node id> or config/broker/default: runtime broker configs. */
typedef struct cm_bconf {
    int32_t node; /* -1: the cluster-wide default */
    int nconfigs;
    char **names, **values;
    int64_t mod_rev;
} cm_bconf;

/* ---- keys ----
 * Every key is the prefix (etcd.prefix, ending in '/') followed by the names
 * of docs/cluster.md. The builders write a NUL-terminated key into buf and
 * return its length, or 0 (and an empty buf) when it does not fit or when an
 * argument is one the model would refuse to read back (a negative id or
 * index, a topic name Kafka refuses, a counter name not "next_[a-z0-9_]+"). */
size_t cm_key_cluster_id(const char *prefix, char *buf, size_t len);
size_t cm_key_counter(const char *prefix, const char *name /* "next_log" ... */, char *buf,
                      size_t len);
size_t cm_key_node(const char *prefix, int32_t id, char *buf, size_t len);
size_t cm_key_controller(const char *prefix, char *buf, size_t len);
size_t cm_key_log(const char *prefix, int64_t id, char *buf, size_t len);
size_t cm_key_topic(const char *prefix, const char *name, char *buf, size_t len);
size_t cm_key_part(const char *prefix, const kc_uuid *topic, int32_t index, char *buf,
                   size_t len);
/* parts/<topic>/ : the prefix of all of a topic's partitions */
size_t cm_key_topic_parts(const char *prefix, const kc_uuid *topic, char *buf, size_t len);
size_t cm_key_walref(const char *prefix, const kc_uuid *topic, int32_t index, int64_t log,
                     char *buf, size_t len);
/* walrefs/<topic>-<index>/ : the walrefs of one partition */
size_t cm_key_part_walrefs(const char *prefix, const kc_uuid *topic, int32_t index, char *buf,
                           size_t len);
size_t cm_key_payref(const char *prefix, int64_t plog, int64_t mlog, char *buf, size_t len);
/* payrefs/<plog>/ : the payrefs of one payload log */
size_t cm_key_log_payrefs(const char *prefix, int64_t plog, char *buf, size_t len);
size_t cm_key_bconf(const char *prefix, int32_t node /* -1: default */, char *buf, size_t len);

/* ---- value codecs ----
 * Encoders return a malloc'd NUL-terminated JSON text (NULL: out of memory,
 * or a value its decoder would refuse: never write what no node can read).
 * Decoders fill *out from a value (not NUL-terminated), the fields that come
 * from the key (ids, names) included, and return 0 or SK_ERR_PARSE (or
 * SK_ERR_NOMEM); mod_rev is left 0. A decoded topic or bconf owns its config
 * arrays: cm_topic_clear / cm_bconf_clear free them. */
char *cm_encode_cluster_id(const char *id);
int cm_decode_cluster_id(const uint8_t *v, size_t n, char *out, size_t outlen);
char *cm_encode_counter(int64_t next);
int cm_decode_counter(const uint8_t *v, size_t n, int64_t *next);
char *cm_encode_node(const cm_node *nd);
char *cm_encode_controller(int32_t node, int64_t log);
char *cm_encode_log(const cm_log *l);
char *cm_encode_topic(const cm_topic *t);
char *cm_encode_part(const cm_part *p);
char *cm_encode_walref(int64_t lsn);
char *cm_encode_payref(int64_t lsn);
char *cm_encode_bconf(int n, char *const *names, char *const *values);

/* The decoders of the other kinds (the model's own); ids and names come from
 * the key. A node's "id" field must equal the key's. */
int cm_decode_node(const uint8_t *v, size_t n, int32_t id, cm_node *out) CM_WUR;
int cm_decode_controller(const uint8_t *v, size_t n, int32_t *node, int64_t *log) CM_WUR;
int cm_decode_log(const uint8_t *v, size_t n, int64_t id, cm_log *out) CM_WUR;
int cm_decode_topic(const uint8_t *v, size_t n, const char *name, cm_topic *out) CM_WUR;
int cm_decode_part(const uint8_t *v, size_t n, const kc_uuid *topic, int32_t index,
                   cm_part *out) CM_WUR;
int cm_decode_walref(const uint8_t *v, size_t n, const kc_uuid *topic, int32_t index,
                     int64_t log, cm_walref *out) CM_WUR;
int cm_decode_payref(const uint8_t *v, size_t n, int64_t plog, int64_t mlog,
                     cm_payref *out) CM_WUR;
int cm_decode_bconf(const uint8_t *v, size_t n, int32_t node, cm_bconf *out) CM_WUR;
void cm_topic_clear(cm_topic *t);
void cm_bconf_clear(cm_bconf *b);

/* ---- the mirror ---- */

typedef struct cm_model cm_model;

typedef enum {
    CM_CH_CLUSTER_ID,
    CM_CH_NODE,
    CM_CH_CONTROLLER,
    CM_CH_LOG,
    CM_CH_TOPIC,
    CM_CH_PART,
    CM_CH_WALREF,
    CM_CH_PAYREF,
    CM_CH_BCONF,
    CM_CH_COUNTER
} cm_change_kind;

/* One key changed. For a deletion `now` is NULL; for a creation `was` is.
 * Both point at objects of the kind's type (cm_node, cm_log, cm_topic,
 * cm_part, cm_walref, cm_payref, cm_bconf; for CONTROLLER an int32_t node
 * id; for CLUSTER_ID a char string; for COUNTER the int64 value), valid only
 * during the call. CONTROLLER's pointers are in fact cm_ctrl and COUNTER's
 * cm_counter (whose first members are that id and that value), so that a
 * user may also read the controller's log or the counter's name. A put that
 * changes only the mod_revision is a change too. */
typedef struct cm_change {
    cm_change_kind kind;
    const void *was, *now;
} cm_change;

typedef void (*cm_change_fn)(void *arg, const cm_change *c);

/* prefix: etcd.prefix, ending in '/'. fn may be NULL. */
cm_model *cm_new(const char *prefix, cm_change_fn fn, void *arg);
void cm_destroy(cm_model *m);

/* A key-value pair (from a range or a PUT event) or a deletion. Keys outside
 * the prefix, and unknown key names, are ignored (return 0). mod_rev is the
 * key's mod_revision (for a deletion, the revision of the DELETE event). A
 * deletion returns 0 even for an invalid key name: the garbage is gone. */
int cm_apply_put(cm_model *m, const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                 int64_t mod_rev);
int cm_apply_delete(cm_model *m, const uint8_t *key, size_t klen, int64_t mod_rev);

/* The whole state anew (after a watch lost its history): begin, then the
 * range's pairs with cm_apply_put, then end, which reports, as changes, the
 * keys that were in the model and are not in the new state (deletions) and
 * those whose value changed. Nothing is reported before cm_reset_end; then
 * deletions come first, dependents before what they depend on (walrefs,
 * payrefs, partitions, topics, bconfs, counters, logs, nodes, controller,
 * cluster id), then creations and changes in the opposite order (cluster
 * id, counters, nodes, logs, topics, partitions, walrefs, payrefs, bconfs,
 * controller).
 * Between begin and end, queries see the new state as far as it was applied;
 * a second cm_reset_begin before cm_reset_end drops that partial state and
 * starts again. */
void cm_reset_begin(cm_model *m);
void cm_reset_end(cm_model *m);

/* The revision of the newest event or range applied. */
int64_t cm_revision(const cm_model *m);
void cm_set_revision(cm_model *m, int64_t rev);

/* ---- queries ---- */

const char *cm_cluster_id(const cm_model *m); /* "" when not known yet */
int32_t cm_controller(const cm_model *m);     /* -1 when none */
const cm_ctrl *cm_controller_get(const cm_model *m); /* NULL when none */
/* name: "next_log" ...; NULL when the key is absent. */
const cm_counter *cm_counter_get(const cm_model *m, const char *name);

const cm_node *cm_node_get(const cm_model *m, int32_t id);
/* Live nodes by ascending id (an array owned by the model). */
const cm_node *cm_nodes(const cm_model *m, size_t *n);

const cm_log *cm_log_get(const cm_model *m, int64_t id);
/* Logs by ascending id (an array owned by the model). */
const cm_log *cm_logs(const cm_model *m, size_t *n);

const cm_topic *cm_topic_get(const cm_model *m, const char *name);
const cm_topic *cm_topic_by_id(const cm_model *m, const kc_uuid *id);
/* Iteration: *it starts at 0; NULL at the end. */
const cm_topic *cm_topic_next(const cm_model *m, size_t *it);

const cm_part *cm_part_get(const cm_model *m, const kc_uuid *topic, int32_t index);
const cm_part *cm_part_next(const cm_model *m, size_t *it);

const cm_walref *cm_walref_next(const cm_model *m, size_t *it);
const cm_walref *cm_walref_get(const cm_model *m, const kc_uuid *topic, int32_t index,
                               int64_t log);

const cm_payref *cm_payref_next(const cm_model *m, size_t *it);
const cm_payref *cm_payref_get(const cm_model *m, int64_t plog, int64_t mlog);

const cm_bconf *cm_bconf_get(const cm_model *m, int32_t node /* -1: default */);

#endif
