/*
 * vlog: one log as the broker uses it: a WAL and its SQLite view kept in
 * step (docs/architecture.md, "The rule for every change").
 *
 * Appends go to the WAL; each record, once durable, reaches the view in a
 * transaction (one at a time, at most one per view.commit.interval.ms, gathering
 * everything durable meanwhile). Callers can wait for a position to be
 * durable, or for the view to reflect it.
 *
 * A node has one vlog for its own log. In a cluster it opens one more for
 * each dead log in its custody (docs/cluster.md, "Unplanned").
 *
 * Opening (sk_vlog_open) is blocking and runs before the loop serves, or on
 * the loop thread when nothing waits on it (custody): it recovers the WAL
 * and replays into the view every record it does not reflect yet.
 *
 * Thread: the event loop, except sk_vlog_open (see above). Hooks run on the
 * loop.
 */
#ifndef VLOG_H
#define VLOG_H

#include <sys/uio.h>

#include "store.h"
#include "types.h"

typedef struct sk_vlog sk_vlog;

/* Called once the record is durable (err 0) or can never be (err < 0). */
typedef void (*sk_vlog_fn)(void *arg, int err);

typedef struct sk_vlog_hooks {
    void (*durable)(void *arg); /* a round of durability callbacks ran */
    void (*applied)(void *arg); /* the view reflects more of the WAL */
    void (*fenced)(void *arg);  /* a newer owner took the WAL over */
    void *arg;
} sk_vlog_hooks;

/* A vlog around an open store (taken; its thread not started yet). */
sk_vlog *sk_vlog_new(sk_node *n, int64_t id, sk_store *store, const sk_vlog_hooks *hooks);

/* Opens the WAL on `st` (taken) with `o`, replaying into the view from the
 * LSN it reflects. SK_ERR_AGAIN: the view is behind what the WAL retains
 * (its records were trimmed): the caller restores or resets the view and
 * tries again. Other errors with a reason in why. */
int sk_vlog_open(sk_vlog *v, wal_storage *st, const wal_opts *o, char *why, size_t whylen)
    __attribute__((warn_unused_result));
/* Starts the view's thread and the durability events (the loop runs next). */
int sk_vlog_start(sk_vlog *v) __attribute__((warn_unused_result));

/* Closes the WAL (syncing what is pending, running the last callbacks)
 * and lets the view catch up; readers of the WAL must have stopped. */
void sk_vlog_close(sk_vlog *v);
/* Closes if needed and frees everything, the store included. */
void sk_vlog_destroy(sk_vlog *v);

wal *sk_vlog_wal(const sk_vlog *v);
sk_store *sk_vlog_store(const sk_vlog *v);
int64_t sk_vlog_id(const sk_vlog *v);
/* The view reflects the WAL below this. */
wal_lsn sk_vlog_applied(const sk_vlog *v);

/* Appends a record (meta.h types). On success *lsn_end (may be NULL) is its
 * end, and fn runs once it is durable. */
int sk_vlog_append(sk_vlog *v, uint8_t type, const struct iovec *iov, int iovcnt, sk_vlog_fn fn,
                   void *arg, wal_lsn *lsn_end) __attribute__((warn_unused_result));
/* Appends a partition's batch (final offsets written in it): a DATA record,
 * or, when `link` is given, a LINK record to the batch in a payload log
 * (link->head holds the batch's header). crc_known: the batch's CRC field
 * is known right (validated just now), and the DATA record's CRC is derived
 * from it instead of reading the batch again (wal_appendv_known). */
struct kb_header;
struct sk_link;
int sk_vlog_append_data(sk_vlog *v, sk_part *p, const uint8_t *batch, uint32_t len,
                        const struct kb_header *h, const struct sk_link *link, bool crc_known,
                        sk_vlog_fn fn, void *arg, wal_lsn *lsn, wal_lsn *lsn_end)
    __attribute__((warn_unused_result));

/* Runs fn once the WAL is durable up to `end` (at once if it is). */
void sk_vlog_wait_durable(sk_vlog *v, wal_lsn end, sk_vlog_fn fn, void *arg);
/* Runs fn once the view reflects the WAL up to `end` (err < 0 when it never
 * will: the WAL or the view failed, or the vlog closes). */
void sk_vlog_wait_applied(sk_vlog *v, wal_lsn end, sk_vlog_fn fn, void *arg);

#endif
