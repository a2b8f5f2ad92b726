/*
 * meta: the broker's WAL record types and their encodings.
 *
 * The WAL is the source of truth for everything a node knows. Record types:
 *  - SK_WAL_DATA: one RecordBatch of one partition, offsets already assigned:
 *      u8 version (1) | 16-byte topic id | u32 partition | batch bytes
 *  - SK_WAL_META: a change of metadata: u8 version (1) | u8 kind | fields
 *  - SK_WAL_LINK: a batch a proxy wrote to its payload log, given offsets
 *    here (docs/zones.md): u8 version (1) | 16-byte topic id | u32
 *    partition | u64 payload log id | u64 payload record LSN | u32 batch
 *    length | the batch's first 61 bytes as served (its final base offset
 *    and leader epoch). The link stands for the batch: it is indexed, read,
 *    uploaded and handed over like a DATA record at its own LSN.
 *  - SK_WAL_PAYLOAD, only in a payload log: a batch as a client sent it,
 *    offsets not yet assigned; laid out as SK_WAL_DATA.
 *  - WAL_T_PREAMBLE (the first record of every segment): a snapshot of all
 *    metadata as of the segment's start, so that any retained segment is a
 *    place to rebuild from (see snapshot below).
 * Integers are little-endian, strings u32 length + bytes (common/sk_buf.h).
 *
 * Contract: pure encoding and decoding, any thread. Decoders borrow the
 * input (names and config blocks point into it) and return 0 or
 * SK_ERR_CORRUPT.
 */
#ifndef META_H
#define META_H

#include <stddef.h>
#include <stdint.h>

#include "kbatch.h"
#include "kc.h"
#include "payload.h"
#include "sk_buf.h"
#include "types.h"

enum {
    SK_WAL_DATA = 2,
    SK_WAL_META = 3,
    SK_WAL_LINK = 4,
    SK_WAL_PAYLOAD = PAY_RECORD,
};

#define SK_DATA_HEADER 21 /* version + topic id + partition */
#define SK_LINK_SIZE (SK_DATA_HEADER + 8 + 8 + 4 + KB_HEADER_SIZE)
_Static_assert(PAY_HEADER == SK_DATA_HEADER, "payload records are laid out as data records");

enum sk_meta_kind {
    SK_META_TOPIC_CREATE = 1, /* id, name, partitions, rf, configs */
    SK_META_TOPIC_DELETE = 2, /* id */
    SK_META_TOPIC_CONFIG = 3, /* id, configs (the complete override set) */
    SK_META_PARTITIONS = 4,   /* id, new partition count */
    SK_META_LOG_START = 5,    /* id, partition, new log start offset */
    SK_META_PID = 6,          /* producer ids below this are taken */
    SK_META_CLUSTER = 7,      /* cluster id */
    SK_META_GROUP = 8,        /* consumer-group record (groups.c owns the body) */
    SK_META_BROKER_CONFIG = 9, /* the complete set of broker properties changed at runtime */
    SK_META_OBJECTS = 10,     /* objects registered (upload, compaction), others retired */
    SK_META_OBJECT_GONE = 11, /* a retired object was deleted from the store */
    SK_META_HANDOFF = 12,     /* a partition leaves this log, with its state (hstate.h) */
    SK_META_ADOPT = 13,       /* a partition joins this log, with its state (hstate.h) */
    SK_META_DROP = 14,        /* a partition's state is gone (id, partition): its topic was
                                 deleted, or etcd refused its adoption */
    SK_META_GROUP_CONFIG = 15, /* a group's complete config override set (gconf.h) */
    SK_META_USER_CONFIG = 16,  /* a user's complete set of SCRAM credentials (gconf.h) */
    SK_META_ACL = 17,          /* an ACL binding created or deleted (acls.h) */
    SK_META_TXN = 18,          /* a transactional id's whole state (txns.h owns the body) */
    SK_META_TXN_GONE = 19,     /* a transactional id expired: str id (txns.h) */
};

typedef struct sk_meta {
    uint8_t kind;
    kc_uuid id;
    const char *name;
    size_t name_len;
    int32_t nparts;
    int16_t rf;
    uint64_t first_stream; /* TOPIC_CREATE, PARTITIONS: stream id of the first new partition */
    int32_t part;
    int64_t value; /* log start, next pid */
    const uint8_t *configs; /* encoded config block */
    size_t configs_len;
    const uint8_t *body; /* SK_META_GROUP: the group record */
    size_t body_len;
} sk_meta;

/* Data records. */
void sk_data_header(uint8_t out[SK_DATA_HEADER], const kc_uuid *id, int32_t part);
int sk_data_decode(const uint8_t *p, size_t n, kc_uuid *id, int32_t *part, const uint8_t **batch,
                   size_t *batch_len);

/* Link records. */
typedef struct sk_link {
    kc_uuid id;
    int32_t part;
    int64_t plog;  /* the payload log */
    wal_lsn plsn;  /* the PAYLOAD record's LSN there */
    uint32_t len;  /* batch bytes */
    uint8_t head[KB_HEADER_SIZE];
} sk_link;
void sk_link_encode(uint8_t out[SK_LINK_SIZE], const sk_link *l);
int sk_link_decode(const uint8_t *p, size_t n, sk_link *l);

/* Metadata records. HANDOFF and ADOPT give their state in body (see
 * hstate.h); DROP gives id and part. */
int sk_meta_decode(const uint8_t *p, size_t n, sk_meta *m);
/* The first two bytes of every metadata record: version and kind. */
void sk_meta_head(sk_buf *b, uint8_t kind);
void sk_meta_topic_create(sk_buf *b, const sk_topic *t);
void sk_meta_topic_delete(sk_buf *b, const kc_uuid *id);
void sk_meta_topic_config(sk_buf *b, const sk_topic *t);
void sk_meta_partitions(sk_buf *b, const kc_uuid *id, int32_t nparts, uint64_t first_stream);
void sk_meta_log_start(sk_buf *b, const kc_uuid *id, int32_t part, int64_t log_start);
void sk_meta_pid(sk_buf *b, int64_t next_pid);
void sk_meta_cluster(sk_buf *b, const char *cluster_id);
void sk_meta_group(sk_buf *b, const void *body, size_t len);
/* body: txns.h's */
void sk_meta_txn(sk_buf *b, const void *body, size_t len);
/* body: str transactional id */
void sk_meta_txn_gone(sk_buf *b, const char *id, size_t len);
/* body: gconf.h's */
void sk_meta_group_config(sk_buf *b, const void *body, size_t len);
/* body: gconf.h's */
void sk_meta_user_config(sk_buf *b, const void *body, size_t len);
void sk_meta_acl(sk_buf *b, const void *body, size_t len);
void sk_meta_broker_config(sk_buf *b, int n, char *const *names, char *const *values);

/* Object registry records.
 *   OBJECTS: u64 upload end LSN (0 when not an upload) | u32 nnew | objects |
 *            u32 nretired | (str key, u64 delete-after ms) each
 *     object: str key | u8 kind | u64 size | u64 created ms | u32 nranges |
 *             (u64 stream, u64 start, u64 end, u64 size, u64 max ts,
 *              u64 records) each
 *   OBJECT_GONE: str key
 * An upload's registration carries the WAL position below which every batch
 * is now in objects. */
typedef struct sk_orange {
    uint64_t stream, start, end, size;
    int64_t max_ts;
    uint64_t records;
} sk_orange;

typedef struct sk_oobj {
    const char *key;
    size_t klen;
    uint8_t kind;
    uint64_t size;
    int64_t created_ms;
    uint32_t nranges;
} sk_oobj;

typedef struct sk_orec {
    uint64_t upload_end;
    sk_rd rd;
    uint32_t objs_left, ranges_left, retired_left;
    int phase; /* 0 objects, 1 retired */
} sk_orec;

void sk_meta_objects_begin(sk_buf *b, uint64_t upload_end, uint32_t nnew);
void sk_meta_objects_obj(sk_buf *b, const sk_oobj *o);
void sk_meta_objects_range(sk_buf *b, const sk_orange *r);
void sk_meta_objects_retired(sk_buf *b, uint32_t nretired);
void sk_meta_objects_retire(sk_buf *b, const char *key, size_t klen, int64_t delete_after_ms);
void sk_meta_object_gone(sk_buf *b, const char *key, size_t klen);

/* Walks an OBJECTS body: objects (each followed by its ranges), then the
 * retired keys. Each returns 1, 0 at the end of its list, -1 if corrupt. */
int sk_orec_init(sk_orec *o, const uint8_t *body, size_t len);
int sk_orec_next_obj(sk_orec *o, sk_oobj *obj);
int sk_orec_next_range(sk_orec *o, sk_orange *r);
int sk_orec_next_retired(sk_orec *o, const char **key, size_t *klen, int64_t *delete_after_ms);

/* Config blocks: u32 count, then name and value strings. */
void sk_conf_block_put(sk_buf *b, int n, char *const *names, char *const *values);
/* Iterates a block; returns 1 per pair, 0 at the end, -1 when corrupt. */
typedef struct sk_conf_iter {
    sk_rd rd;
    uint32_t left;
} sk_conf_iter;
int sk_conf_iter_init(sk_conf_iter *it, const uint8_t *p, size_t n);
int sk_conf_iter_next(sk_conf_iter *it, const char **name, size_t *nlen, const char **value,
                      size_t *vlen);

/* Producer state (also the SQLite producers.state blob). */
void sk_pstate_put(sk_buf *b, const sk_pstate *ps);
int sk_pstate_get(sk_rd *r, sk_pstate *ps);

/* Snapshot: the preamble of every WAL segment.
 *   u8 version | str cluster id | u64 next pid | u64 next stream id |
 *   config block of the broker properties changed at runtime |
 *   u32 ntopics | topics...
 *   topic: id | str name | u32 nparts | u16 rf | config block | partitions
 *   partition: u64 stream id | u64 log start | u64 next offset |
 *              u32 leader epoch | u64 max ts | u64 max ts base |
 *              u32 nproducers | pstates
 *   then u32 nextra | extra sections (u8 kind | str body), e.g. groups. */
int sk_snapshot_encode(const sk_node *n, uint8_t **out, uint32_t *len);
/* The preamble of a cluster member's logs: no metadata at all. Their topics
 * are in etcd, and a partition's state comes with its ADOPT record; a log's
 * view is rebuilt from its snapshot in the object store and the WAL, never
 * from a preamble (the WAL is trimmed only below the newest snapshot). */
int sk_snapshot_empty(const sk_node *n, uint8_t **out, uint32_t *len);

typedef struct sk_snap_head {
    const char *cluster_id;
    size_t cluster_id_len;
    int64_t next_pid;
    uint64_t next_stream;
    const uint8_t *broker_conf; /* config block */
    size_t broker_conf_len;
} sk_snap_head;

typedef struct sk_snap_part {
    kc_uuid id;
    int32_t part;
    uint64_t stream;
    int64_t log_start, next_offset;
    int32_t leader_epoch;
    int64_t max_ts, max_ts_base;
} sk_snap_part;

/* Visits a snapshot: topic_fn for each topic (with its config block),
 * part_fn for each partition, pstate_fn for each producer, extra_fn for
 * each extra section. Any callback may be NULL. */
typedef struct sk_snapshot_visitor {
    void *arg;
    int (*head)(void *arg, const sk_snap_head *h);
    int (*topic)(void *arg, const kc_uuid *id, const char *name, size_t name_len, int32_t nparts,
                 int16_t rf, const uint8_t *configs, size_t configs_len);
    int (*part)(void *arg, const sk_snap_part *p);
    int (*pstate)(void *arg, const kc_uuid *id, int32_t part, const sk_pstate *ps);
    int (*extra)(void *arg, uint8_t kind, const uint8_t *body, size_t len);
} sk_snapshot_visitor;
int sk_snapshot_visit(const uint8_t *p, size_t n, const sk_snapshot_visitor *v);

/* Kinds of extra snapshot sections. */
enum {
    SK_SNAP_GROUPS = 1,
    SK_SNAP_GROUP_CONFIGS = 2,
    SK_SNAP_USER_CONFIGS = 3,
    SK_SNAP_ACLS = 4,  /* an ACL binding (acls.h) */
    SK_SNAP_TXNS = 5,  /* a transactional id's state (txns.h) */
    SK_SNAP_TXIDX = 6, /* an entry of a partition's transaction index (txidx.h) */
};
/* SK_SNAP_TXIDX body: 16-byte topic id | u32 partition | u64 producer id |
 * u64 first offset | u64 abort marker offset (all ones: open). */
void sk_txidx_section_put(sk_buf *b, const kc_uuid *id, int32_t part, const sk_txidx_ent *e);
int sk_txidx_section_get(const uint8_t *p, size_t n, kc_uuid *id, int32_t *part,
                         sk_txidx_ent *e);

#endif
