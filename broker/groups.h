/*
 * groups: the node's group coordinator: membership (gcoord) plus committed
 * offsets, which are as durable as data.
 *
 * A commit, an offset deletion or a group deletion is a SK_META_GROUP WAL
 * record, applied in memory after the append and answered once durable; the
 * SQLite view keeps a group_offsets table in step, and every WAL segment's
 * snapshot carries all committed offsets. A group's offsets are therefore
 * in the log, like a partition's batches: another node that takes the log
 * over (or that a group's coordination moves to) rebuilds them from it.
 *
 * Record body (inside SK_META_GROUP): u8 op | str group | entries
 *   op 1 commit:         u32 n, then n × (str topic, u32 partition,
 *                        u64 offset, u32 leader epoch, str metadata, u64 ts)
 *   op 2 delete offsets: u32 n, then n × (str topic, u32 partition)
 *   op 3 delete group (its offsets and its consumer-protocol state)
 *   op 4 consumer-protocol group state: the rest of the body is the blob
 *        of sk_cg_export (cgroup.h), the group's whole state; empty: the
 *        group has none any more (it became a classic group)
 *
 * Thread: the event loop (the record codec: any).
 */
#ifndef GROUPS_H
#define GROUPS_H

#include "sk_buf.h"
#include "types.h"

enum {
    SK_GREC_COMMIT = 1,
    SK_GREC_DELETE_OFFSETS = 2,
    SK_GREC_DELETE_GROUP = 3,
    SK_GREC_CGROUP = 4,
};

/* ---- record codec ---- */

typedef struct sk_grec {
    uint8_t op;
    const char *group;
    size_t glen;
    uint32_t left;
    sk_rd rd;
} sk_grec;

typedef struct sk_grec_ent {
    const char *topic;
    size_t tlen;
    int32_t part;
    int64_t offset;
    int32_t epoch;
    const char *meta;
    size_t mlen;
    int64_t ts;
} sk_grec_ent;

int sk_grec_init(sk_grec *g, const uint8_t *body, size_t len);
/* Op 4: the state blob (its length; the blob at *p). */
size_t sk_grec_cgroup_len(const sk_grec *g);
const uint8_t *sk_grec_cgroup(const sk_grec *g);
/* 1 with *e filled, 0 at the end, -1 when corrupt. */
int sk_grec_next(sk_grec *g, sk_grec_ent *e);

void sk_grec_begin(sk_buf *b, uint8_t op, const char *group, size_t glen, uint32_t n);
void sk_grec_put(sk_buf *b, uint8_t op, const sk_grec_ent *e);

/* ---- the coordinator ---- */

sk_groups *sk_groups_new(sk_node *n);
void sk_groups_destroy(sk_groups *gs);
/* Applies a record body (start-up loading and snapshots). */
int sk_groups_load(sk_groups *gs, const uint8_t *body, size_t len);
/* Appends a group record body (sk_grec_*) to the WAL, fn once durable, and
 * applies it in memory at once (a later snapshot holds it); reads wait for
 * it (sk_node_shown). */
int sk_groups_append(sk_groups *gs, const sk_buf *body, void (*fn)(void *arg, int err),
                     void *arg)
    __attribute__((warn_unused_result));
/* Writes the snapshot's extra sections: returns how many. */
uint32_t sk_groups_snapshot(const sk_groups *gs, sk_buf *b);
/* Forgets offsets of a deleted topic (the WAL record of the deletion
 * implies it; see store.c). */
void sk_groups_topic_deleted(sk_groups *gs, const char *topic);
/* Coordination of the groups `in` picks moved to another node (their
 * offsets partition's HANDOFF carries the committed offsets): members
 * waiting here are answered NOT_COORDINATOR, and membership and offsets
 * are forgotten. */
void sk_groups_release(sk_groups *gs, bool (*in)(void *arg, const char *g, size_t len),
                       void *arg);
/* Shutdown: answer every waiting join and sync. */
void sk_groups_abort_waiters(sk_groups *gs);
/* Calls fn for every committed offset of the groups this node coordinates. */
void sk_groups_each_offset(const sk_groups *gs,
                           void (*fn)(void *arg, const char *group, const char *topic,
                                      int32_t part, int64_t offset),
                           void *arg);

/* For the consumer-protocol handlers (h_cgroup.c). */
typedef struct sk_gc sk_gc;
typedef struct sk_cg sk_cg;
sk_gc *sk_groups_gc(sk_groups *gs);
sk_cg *sk_groups_cg(sk_groups *gs);
/* Does this node coordinate the group (always, on a single node)? */
bool sk_groups_coordinates(sk_req *r, kc_str group);
bool sk_groups_has_offsets(sk_groups *gs, kc_str group);
/* Appends consumer group `id`'s state (g NULL: it has none any more); with
 * r, r->pending counts it until durable and r->on_done runs then. */
typedef struct sk_cg_group sk_cg_group;
int sk_groups_write_cgroup(sk_groups *gs, const char *id, const sk_cg_group *g, sk_req *r)
    __attribute__((warn_unused_result));
/* A consumer-protocol group took the id over: forget an empty classic group. */
void sk_groups_classic_gone(sk_groups *gs, kc_str group);

/* Classic requests for a consumer group (mixed groups, h_cgroup.c). */
void h_join_consumer_group(sk_req *r, sk_cg_group *g);
void h_sync_consumer_group(sk_req *r, sk_cg_group *g);
void h_leave_consumer_group(sk_req *r, sk_cg_group *g);
int16_t sk_groups_classic_heartbeat(sk_req *r, sk_cg_group *g) __attribute__((warn_unused_result));
/* Online downgrade of g when its members are all classic and the policy
 * allows it (then true: g is gone, a classic group took its place, and the
 * change is appended, r->pending counting it when r is given). */
bool sk_groups_maybe_downgrade(sk_groups *gs, sk_node *n, sk_cg_group *g, sk_req *r);

void h_consumer_group_heartbeat(sk_req *r);
void h_consumer_group_describe(sk_req *r);
void h_join_group(sk_req *r);
void h_sync_group(sk_req *r);
void h_heartbeat(sk_req *r);
void h_leave_group(sk_req *r);
void h_list_groups(sk_req *r);
void h_describe_groups(sk_req *r);
void h_delete_groups(sk_req *r);
void h_offset_commit(sk_req *r);
void h_offset_fetch(sk_req *r);
void h_offset_delete(sk_req *r);

#endif
