/*
 * cgroup: the consumer group protocol of KIP-848 (ConsumerGroupHeartbeat) as
 * a state machine, one instance holding every consumer-protocol group the
 * node coordinates.
 *
 * The coordinator assigns partitions itself (server-side assignors
 * `uniform` and `range`). Each group has a group epoch (bumped when members,
 * subscriptions or the subscribed topics' partition counts change) and a
 * target assignment computed at a group epoch (the assignment epoch). Each
 * member converges to its target on its own heartbeats: it first revokes
 * what the target takes from it (keeping its member epoch), and is given a
 * partition only once no other member holds it, so a partition is never
 * owned by two members at once. Static members (instance id) may leave
 * with epoch -2 and come back under a new member id with epoch 0: they
 * take over the old member's assignment without a new group epoch.
 *
 * No I/O and no clock of its own: every call takes `now` (monotonic ms) and
 * the topics the node knows, so unit tests drive it with fake time and fake
 * topics. Answers are filled in synchronously; pointers in a result stay
 * valid until the next call into the same sk_cg.
 *
 * Subscriptions by regex use POSIX extended regular expressions matched
 * against the whole topic name (Kafka uses RE2J syntax: classes like \d
 * and non-greedy or look-around forms are not available). Patterns longer
 * than SK_CG_REGEX_MAX, with back references or with repetition bounds
 * past 255 are refused (INVALID_REGULAR_EXPRESSION): they could stall the
 * event loop.
 *
 * Thread: single-threaded (the event loop). Strings passed in are copied.
 * Errors are Kafka codes (sk_err.h).
 */
#ifndef CGROUP_H
#define CGROUP_H

#include <stdbool.h>
#include <stdint.h>

#include "kc.h"

typedef struct sk_cg sk_cg;
typedef struct sk_cg_group sk_cg_group;

#define SK_CG_REGEX_MAX 1024

enum {
    SK_CG_LEAVE_EPOCH = -1,        /* a member leaving for good */
    SK_CG_LEAVE_STATIC_EPOCH = -2, /* a static member that will come back */
};

typedef enum sk_cg_state {
    SK_CG_EMPTY,
    SK_CG_ASSIGNING,   /* group epoch ahead of the assignment epoch */
    SK_CG_RECONCILING, /* some member has not reached the target */
    SK_CG_STABLE,
} sk_cg_state;

const char *sk_cg_state_name(sk_cg_state s);

typedef struct sk_cg_config {
    int32_t session_ms;   /* group.consumer.session.timeout.ms */
    int32_t heartbeat_ms; /* group.consumer.heartbeat.interval.ms */
    int32_t max_size;     /* group.consumer.max.size */
    const char *assignors; /* group.consumer.assignors: "uniform,range", first = default */
} sk_cg_config;

/* One topic the node knows (for subscriptions and assignment). */
typedef struct sk_cg_topic {
    const char *name;
    kc_uuid id;
    int32_t nparts;
} sk_cg_topic;

/* One partition of an assignment. Sets are sorted by (id, part). */
typedef struct sk_cg_tp {
    kc_uuid id;
    int32_t part;
    int32_t epoch; /* in a member's assignment: the member epoch it came with */
} sk_cg_tp;

typedef struct sk_cg_hb_args {
    kc_str group_id, member_id;
    kc_str instance_id, rack_id; /* len -1: null */
    kc_str client_id, client_host;
    int32_t member_epoch;
    int32_t rebalance_timeout_ms; /* -1: unchanged */
    int32_t nsubs;                /* -1: unchanged (null) */
    const kc_str *subs;
    kc_str regex;    /* len -1: unchanged */
    kc_str assignor; /* len -1: unchanged */
    int32_t nowned;  /* -1: unchanged (null) */
    const sk_cg_tp *owned;
    int32_t session_ms, heartbeat_ms; /* the group's own configs; 0: the node's */
    int16_t version;
} sk_cg_hb_args;

typedef struct sk_cg_hb_result {
    int16_t error;
    const char *message; /* NULL: none */
    const char *member_id; /* NULL after a leave: the one the request gave */
    int32_t member_epoch;
    int32_t heartbeat_ms;
    bool has_assignment;
    int32_t nassigned;
    const sk_cg_tp *assigned;
} sk_cg_hb_result;

/* One ConsumerGroupHeartbeat. `topics` is every topic the node knows. */
void sk_cg_heartbeat(sk_cg *cg, const sk_cg_hb_args *a, const sk_cg_topic *topics, int ntopics,
                     int64_t now, sk_cg_hb_result *out);

/* Expires sessions and revocations that took too long; returns how many
 * members were removed. */
int sk_cg_tick(sk_cg *cg, int64_t now) __attribute__((warn_unused_result));

/* OffsetCommit of one partition by a member (v9+: member id and member
 * epoch). Returns 0 when it may commit. An epoch < 0 commits only to a
 * group without members. An epoch older than the member's is accepted for
 * a partition the member has held since that epoch (its heartbeat moved it
 * on while the commit was on its way), as Kafka 4.3 does. */
int16_t sk_cg_check_commit(const sk_cg_group *g, kc_str member_id, int32_t epoch,
                           int16_t api_version, const sk_cg_tp *tp)
    __attribute__((warn_unused_result));
/* OffsetFetch v9+ by a member; a null member id and epoch -1 always pass. */
int16_t sk_cg_check_fetch(const sk_cg_group *g, kc_str member_id, int32_t epoch)
    __attribute__((warn_unused_result));

sk_cg *sk_cg_new(const sk_cg_config *cfg);
void sk_cg_destroy(sk_cg *cg);
/* Is `name` one of the configured assignors? */
bool sk_cg_assignor_known(const sk_cg *cg, const char *name, size_t len);

/* Read access (ConsumerGroupDescribe, ListGroups, DescribeGroups). */
sk_cg_group *sk_cg_find(const sk_cg *cg, const char *group_id, size_t len);
sk_cg_group *sk_cg_next(const sk_cg *cg, size_t *it); /* *it = 0 to start */
const char *sk_cg_group_id(const sk_cg_group *g);
sk_cg_state sk_cg_group_state(const sk_cg_group *g);
int32_t sk_cg_group_epoch(const sk_cg_group *g);
int32_t sk_cg_assignment_epoch(const sk_cg_group *g);
const char *sk_cg_group_assignor(const sk_cg_group *g);
int sk_cg_group_nmembers(const sk_cg_group *g);
/* Does a member's subscription (names, or regex) take in this topic? */
bool sk_cg_group_subscribes(const sk_cg_group *g, const char *topic, size_t len);

/* A classic member's protocol: its name and its subscription metadata. */
typedef struct sk_cg_proto {
    kc_str name;
    kc_bytes metadata;
} sk_cg_proto;

typedef struct sk_cg_member_view {
    const char *member_id, *instance_id, *rack_id, *client_id, *client_host;
    int32_t member_epoch;
    int nsubs;
    char *const *subs;
    const char *regex; /* NULL: none */
    int32_t nassigned, ntarget;
    const sk_cg_tp *assigned, *target;
    bool classic; /* a member of the classic protocol (below) */
    int32_t session_ms, rebalance_ms;
    int nprotocols; /* classic: its protocols, in its order of preference */
    const sk_cg_proto *protocols;
} sk_cg_member_view;
void sk_cg_group_member(const sk_cg_group *g, int i, sk_cg_member_view *v);

/* ---- classic members (mixed groups) ----
 * A consumer group may hold members of the classic protocol, as in Kafka
 * 4: the members of a classic group it was converted from (online
 * upgrade), and classic consumers joining it later. Their JoinGroup is a
 * heartbeat carrying their whole state: the subscription and the
 * partitions they own come from their ConsumerProtocolSubscription (the
 * caller decodes it), the answer's generation is the member epoch and the
 * protocol its first one. SyncGroup gives its current assignment (the
 * caller encodes it as a ConsumerProtocolAssignment); Heartbeat answers
 * REBALANCE_IN_PROGRESS when it must rejoin to move on. Their session
 * timeout is the one of their JoinGroup. */
typedef struct sk_cg_classic_args {
    kc_str group_id, member_id, instance_id; /* instance_id len -1: none */
    kc_str client_id, client_host, rack_id;  /* rack_id len -1: none */
    kc_str protocol_type;
    int32_t session_ms, rebalance_ms;
    int nprotocols;
    const sk_cg_proto *protocols;
    int32_t nsubs; /* from the subscription */
    const kc_str *subs;
    int32_t nowned; /* the partitions it owns (-1: not said) */
    const sk_cg_tp *owned;
} sk_cg_classic_args;

typedef struct sk_cg_classic_result {
    int16_t error;
    const char *member_id;
    int32_t generation;
    const char *protocol_name;
} sk_cg_classic_result;

/* A JoinGroup of a member with an id to a group with members. */
void sk_cg_classic_join(sk_cg *cg, const sk_cg_classic_args *a, const sk_cg_topic *topics,
                        int ntopics, int64_t now, sk_cg_classic_result *out);
/* 0, REBALANCE_IN_PROGRESS, UNKNOWN_MEMBER_ID, FENCED_INSTANCE_ID or
 * ILLEGAL_GENERATION. */
int16_t sk_cg_classic_heartbeat(sk_cg_group *g, kc_str member_id, kc_str instance_id,
                                int32_t generation, int64_t now)
    __attribute__((warn_unused_result));

typedef struct sk_cg_classic_sync_args {
    kc_str member_id, instance_id;
    int32_t generation;
    kc_str protocol_type, protocol_name; /* len -1: not given */
} sk_cg_classic_sync_args;

typedef struct sk_cg_classic_sync_result {
    const char *protocol_name;
    const uint8_t *metadata; /* of its first protocol (gives the version) */
    int32_t metadata_len;
    int32_t nassigned;
    const sk_cg_tp *assigned;
} sk_cg_classic_sync_result;

int16_t sk_cg_classic_sync(sk_cg *cg, sk_cg_group *g, const sk_cg_classic_sync_args *a,
                           int64_t now, sk_cg_classic_sync_result *out)
    __attribute__((warn_unused_result));
/* LeaveGroup of one classic member (by instance id alone: an admin). */
int16_t sk_cg_classic_leave(sk_cg_group *g, kc_str member_id, kc_str instance_id)
    __attribute__((warn_unused_result));
/* Has the group members, all of the classic protocol (it may downgrade)? */
bool sk_cg_all_classic(const sk_cg_group *g);

/* Online upgrade: the members of classic group `group_id` at `generation`
 * become classic members of a new consumer group at that epoch, each
 * keeping the partitions of its last assignment. 0 or SK_ERR_NOMEM. */
typedef struct sk_cg_adopted {
    sk_cg_classic_args member;
    int32_t nassigned;
    const sk_cg_tp *assigned;
} sk_cg_adopted;
int sk_cg_adopt_classic(sk_cg *cg, kc_str group_id, int32_t generation, int n,
                        const sk_cg_adopted *ms, int64_t now) __attribute__((warn_unused_result));

/* ---- durability ----
 * A group's state (epochs, members, subscriptions, assignments, targets;
 * not its timers) as one blob, written to the log whenever it changes and
 * loaded back on start-up or when the group's coordination moves here.
 * Loaded members get a fresh session timeout, as in Kafka. */
struct sk_buf;
/* True once since the group's state last changed (then cleared). */
bool sk_cg_take_dirty(sk_cg_group *g);
void sk_cg_export(const sk_cg_group *g, struct sk_buf *b);
/* Replaces the group `id` with the blob's state; 0, or SK_ERR_CORRUPT. */
int sk_cg_import(sk_cg *cg, const char *id, size_t idlen, const uint8_t *p, size_t len,
                 int64_t now) __attribute__((warn_unused_result));

/* Forgets a group without members (DeleteGroups, or a classic JoinGroup
 * taking an empty group over) or whose coordination moved away. */
void sk_cg_remove(sk_cg *cg, sk_cg_group *g);

#endif
