/*
 * session: this node's membership of the cluster (docs/cluster.md).
 *
 * Start-up (cs_start, blocking, before the node serves): waits for etcd
 * (retrying with backoff and saying so in the log), makes sure the cluster
 * id exists, allocates this incarnation's log id, takes a lease of
 * broker.session.timeout.ms, waits until no other process is registered
 * under this node id (a previous incarnation's lease runs out), registers
 * the node and its log, reads every key of the cluster into the model and
 * starts watching them.
 *
 * Then, on the loop: the lease is kept alive every heartbeat interval; each
 * successful keep-alive moves the lease deadline (its send time + the TTL
 * etcd granted, less a margin) and tells the node (on_deadline), which
 * acknowledges nothing past it. A keep-alive that finds the lease gone
 * means the cluster has moved on without this incarnation: on_lost. Watch
 * events feed the model (cmodel.h), whose changes reach the node through
 * on_change; a watch that lost its history re-reads everything (the model
 * then reports the differences). The session also runs for the controller
 * (the `controller` key under its lease) whenever nobody holds it, and says
 * so through on_controller.
 *
 * Thread: the event loop. Callbacks run on it.
 */
#ifndef SESSION_H
#define SESSION_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "cmodel.h"
#include "etcd.h"

struct event_base;

typedef struct cs_session cs_session;

typedef struct cs_callbacks {
    void (*on_change)(void *arg, const cm_change *c);
    /* The lease holds until `deadline_us` on the boot clock (sk_boot_us). */
    void (*on_deadline)(void *arg, int64_t deadline_us);
    /* The lease is gone: this incarnation is no longer a member. */
    void (*on_lost)(void *arg);
    /* This node became (true) or stopped being (false) the controller. */
    void (*on_controller)(void *arg, bool controller);
    void *arg;
} cs_callbacks;

typedef struct cs_opts {
    const char *endpoints;
    const char *prefix;
    int32_t node_id;
    const char *rack;
    const cm_listener *listeners;
    int nlisteners;
    int64_t session_ms;   /* broker.session.timeout.ms */
    int64_t heartbeat_ms; /* broker.heartbeat.interval.ms */
    /* How long start-up waits for etcd and for the node id to be free
     * before it gives up (0: forever). */
    int64_t start_timeout_ms;
    /* The etcd client's byte accounting (etcd_opts.account; NULL: none). */
    void (*etcd_account)(void *arg, int endpoint, uint64_t out, uint64_t in);
    void *etcd_account_arg;
} cs_opts;

/* Blocking start-up (see above). NULL with a reason when it gave up or the
 * options are invalid. */
cs_session *cs_start(struct event_base *base, const cs_opts *o, const cs_callbacks *cb,
                     char *why, size_t whylen);
/* Resigns: cancels the watch, revokes the lease (so that the node's keys go
 * at once, and the controller reacts without waiting for the TTL), waits up
 * to a second for that, and frees the session. Loop thread, outside the
 * session's callbacks. */
void cs_stop(cs_session *s);

etcd *cs_etcd(cs_session *s);
cm_model *cs_model(cs_session *s);
int64_t cs_log_id(const cs_session *s);
/* This incarnation's payload log (docs/zones.md): always cs_log_id + 1, so
 * that it is never older than the data log its node registers. */
int64_t cs_payload_log_id(const cs_session *s);
int64_t cs_lease(const cs_session *s);
const char *cs_prefix(const cs_session *s);
int32_t cs_node_id(const cs_session *s);
bool cs_is_controller(const cs_session *s);
/* The lease deadline now (boot clock; 0 before the first keep-alive). */
int64_t cs_deadline(const cs_session *s);

/* Marks this node draining (SIGTERM): the controller moves its partitions
 * away. */
void cs_set_draining(cs_session *s);

/* Runs fn once the model reflects etcd at `revision` or later (the revision
 * of a transaction this node made), or with SK_ERR_TIMEOUT after
 * timeout_ms. */
void cs_wait_revision(cs_session *s, int64_t revision, int64_t timeout_ms,
                      void (*fn)(void *arg, int err), void *arg);

/* Allocates `count` consecutive values of the counter `name` ("next_pid",
 * "next_stream", "next_log") with compare-and-swap; fn gets the first. */
void cs_alloc(cs_session *s, const char *name, int64_t count,
              void (*fn)(void *arg, int err, int64_t first), void *arg);

typedef struct cs_stats {
    uint64_t keepalives, keepalive_failures, watch_resets, lease_lapses;
    int64_t last_keepalive_us; /* round trip of the last one */
} cs_stats;
void cs_get_stats(const cs_session *s, cs_stats *st);

#endif
