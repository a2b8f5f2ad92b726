/*
 * gcoord: the classic consumer-group protocol as a state machine.
 *
 * Membership only: JoinGroup (two-step join with MEMBER_ID_REQUIRED, static
 * membership), SyncGroup, Heartbeat, LeaveGroup, session and rebalance
 * timeouts, generation fencing. Committed offsets live in groups.c, which
 * asks this module whether a member may commit.
 *
 * No I/O and no clock of its own: every call takes `now` (monotonic ms) and
 * answers through callbacks, so unit tests drive it with fake time. Join and
 * sync answers may come later (when the rebalance completes), from inside
 * another call (a join completing the rebalance answers every member) or
 * from sk_gc_tick. A callback must not call back into gcoord.
 *
 * Thread: single-threaded (the event loop). Strings passed in are copied.
 * Errors are Kafka codes (sk_err.h).
 */
#ifndef GCOORD_H
#define GCOORD_H

#include <stdbool.h>
#include <stdint.h>

#include "kc.h"

typedef struct sk_gc sk_gc;
typedef struct sk_gc_group sk_gc_group;

typedef enum sk_gc_state {
    SK_GC_EMPTY,
    SK_GC_PREPARING,  /* PreparingRebalance */
    SK_GC_COMPLETING, /* CompletingRebalance */
    SK_GC_STABLE,
    SK_GC_DEAD,
} sk_gc_state;

const char *sk_gc_state_name(sk_gc_state s);

typedef struct sk_gc_config {
    int32_t min_session_ms, max_session_ms;
    int32_t initial_rebalance_delay_ms;
} sk_gc_config;

typedef struct sk_gc_protocol {
    kc_str name;
    kc_bytes metadata;
} sk_gc_protocol;

typedef struct sk_gc_join_args {
    kc_str group_id, member_id, instance_id; /* instance_id len -1: none */
    kc_str client_id, client_host;
    kc_str protocol_type;
    int32_t session_timeout_ms, rebalance_timeout_ms;
    int nprotocols;
    const sk_gc_protocol *protocols;
    bool require_known_member; /* v4+: two-step join for dynamic members */
} sk_gc_join_args;

typedef struct sk_gc_member_info {
    const char *member_id;
    const char *instance_id; /* NULL: none */
    const uint8_t *metadata; /* of the selected protocol */
    int32_t metadata_len;
} sk_gc_member_info;

typedef struct sk_gc_join_result {
    int16_t error;
    int32_t generation;
    const char *protocol_type; /* NULL when none */
    const char *protocol_name;
    const char *leader_id;
    const char *member_id;
    /* Only for the leader: every member with its metadata. */
    int nmembers;
    const sk_gc_member_info *members;
} sk_gc_join_result;

typedef void (*sk_gc_join_cb)(void *arg, const sk_gc_join_result *res);

void sk_gc_join(sk_gc *gc, const sk_gc_join_args *a, int64_t now, sk_gc_join_cb cb, void *arg);

typedef struct sk_gc_assignment {
    kc_str member_id;
    kc_bytes assignment;
} sk_gc_assignment;

typedef struct sk_gc_sync_args {
    kc_str group_id, member_id, instance_id;
    int32_t generation;
    kc_str protocol_type, protocol_name; /* len -1: not given (before v5) */
    int nassignments;
    const sk_gc_assignment *assignments;
} sk_gc_sync_args;

typedef struct sk_gc_sync_result {
    int16_t error;
    const char *protocol_type, *protocol_name;
    const uint8_t *assignment;
    int32_t assignment_len;
} sk_gc_sync_result;

typedef void (*sk_gc_sync_cb)(void *arg, const sk_gc_sync_result *res);

void sk_gc_sync(sk_gc *gc, const sk_gc_sync_args *a, int64_t now, sk_gc_sync_cb cb, void *arg);

int16_t sk_gc_heartbeat(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                        int32_t generation, int64_t now);

/* Removes one member (by id, or by instance id when member_id is empty). */
int16_t sk_gc_leave(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                    int64_t now);

/* May a member with this id and generation commit offsets now? Follows
 * Kafka's OffsetCommit rules for classic groups (see groups.c). */
int16_t sk_gc_check_commit(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                           int32_t generation, int16_t api_version);
/* The same for TxnOffsetCommit v3+ (Kafka's transactional rules): an absent
 * group takes generation -1 only (else ILLEGAL_GENERATION); without a
 * generation or member any group may be committed to, and a rebalance
 * does not stop it. */
int16_t sk_gc_check_txn_commit(sk_gc *gc, kc_str group_id, kc_str member_id,
                               kc_str instance_id, int32_t generation);

/* Expires sessions and pending members, completes rebalances whose time is
 * up. Call it periodically; it returns the next time it needs a call. */
int64_t sk_gc_tick(sk_gc *gc, int64_t now);

sk_gc *sk_gc_new(const sk_gc_config *cfg);
/* Answers every waiting join and sync with `error` and frees everything. */
void sk_gc_destroy(sk_gc *gc, int16_t error);

/* Read access for DescribeGroups/ListGroups/DeleteGroups. */
sk_gc_group *sk_gc_find(const sk_gc *gc, const char *group_id, size_t len);
sk_gc_state sk_gc_group_state(const sk_gc_group *g);
const char *sk_gc_group_id(const sk_gc_group *g);
const char *sk_gc_group_protocol_type(const sk_gc_group *g);
const char *sk_gc_group_protocol_name(const sk_gc_group *g);
int32_t sk_gc_group_generation(const sk_gc_group *g);
int sk_gc_group_nmembers(const sk_gc_group *g);
typedef struct sk_gc_member_view {
    const char *member_id, *instance_id, *client_id, *client_host;
    const uint8_t *metadata; /* of the selected protocol, or NULL */
    int32_t metadata_len;
    const uint8_t *assignment;
    int32_t assignment_len;
    int32_t session_ms, rebalance_ms;
    int nprotocols;
} sk_gc_member_view;
void sk_gc_group_member(const sk_gc_group *g, int i, sk_gc_member_view *v);
/* Member i's protocol k (0 <= k < nprotocols), pointing into the group. */
sk_gc_protocol sk_gc_group_member_protocol(const sk_gc_group *g, int i, int k);

/* Online downgrade: a consumer group whose members all speak the classic
 * protocol becomes classic group `group_id` (which must not exist) at
 * `generation`, its members with their protocols and their last
 * assignments, and a rebalance starts at once (PreparingRebalance): the
 * members learn it from their next heartbeat and rejoin. */
typedef struct sk_gc_adopted {
    sk_gc_join_args member; /* ids, client, timeouts, protocols */
    kc_bytes assignment;
} sk_gc_adopted;
int sk_gc_adopt(sk_gc *gc, kc_str group_id, int32_t generation, int n, const sk_gc_adopted *ms,
                int64_t now) __attribute__((warn_unused_result));
/* Iteration over groups: *it = 0 to start; NULL at the end. */
sk_gc_group *sk_gc_next(const sk_gc *gc, size_t *it);
/* Forgets an empty group (DeleteGroups). */
void sk_gc_remove(sk_gc *gc, sk_gc_group *g);
/* Forgets a group whose coordination moved away: members waiting in a join
 * or a sync are answered `error` (NOT_COORDINATOR). */
void sk_gc_evict(sk_gc *gc, sk_gc_group *g, int16_t error);

#endif
