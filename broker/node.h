/*
 * node: one skiffd process: start-up and recovery, the WAL with its
 * durability callbacks, the SQLite view kept in step with it, the WAL
 * cache, retention, and shutdown.
 *
 * Start-up (sk_node_new) is blocking and runs before the loop serves: it
 * opens the SQLite view, recovers the WAL, replays into the view every
 * record the view does not reflect yet (rebuilding it from the oldest
 * segment's snapshot when it is missing, behind the retained WAL, or ahead of
 * it), then loads topics, partitions and producer state into memory.
 *
 * Rule for every change: append the WAL record first, then change the
 * in-memory state, and acknowledge only from the durability callback. The
 * in-memory state is thus the end of the appended stream; a segment
 * preamble snapshot taken at any append is consistent with the stream.
 *
 * Thread: the event loop (sk_node_run runs it).
 */
#ifndef NODE_H
#define NODE_H

#include <sys/uio.h>

#include "types.h"

/* Exit statuses of sk_node_run besides 0: the own WAL was taken over by a
 * newer owner (single node), or the cluster counted this incarnation dead
 * and the process should start again (main re-executes itself). */
enum { SK_EXIT_FENCED = 3, SK_EXIT_REJOIN = 4 };

sk_node *sk_node_new(sk_config *cfg, char *why, size_t whylen);
/* Listens and serves until SIGTERM/SIGINT; returns the exit status. */
int sk_node_run(sk_node *n);
void sk_node_destroy(sk_node *n);
/* Stops serving and makes sk_node_run return exit_code (loop thread). With
 * SK_EXIT_FENCED or SK_EXIT_REJOIN nothing in flight can be acknowledged any
 * more: connections close at once instead of after a grace period. */
void sk_node_stop(sk_node *n, int exit_code);

/* Called once the record is durable (err 0) or can never be (err < 0). */
typedef void (*sk_durable_fn)(void *arg, int err);

/* Appends a record (see meta.h for types). On success *lsn_end is the
 * record's end LSN, and fn runs once it is durable; the record reaches the
 * SQLite view after that. Returns SK_ERR_IO when the WAL has failed. */
int sk_node_append(sk_node *n, uint8_t type, const struct iovec *iov, int iovcnt,
                   sk_durable_fn fn, void *arg, wal_lsn *lsn_end);
/* Appends a partition's batch (final offsets already written in it), as a
 * DATA record or as a LINK to a payload log (sk_vlog_append_data, crc_known
 * as there). *lsn is where the record starts, *lsn_end where it ends. */
struct kb_header;
struct sk_link;
int sk_node_append_data(sk_node *n, sk_part *p, const uint8_t *batch, uint32_t len,
                        const struct kb_header *h, const struct sk_link *link, bool crc_known,
                        sk_durable_fn fn, void *arg, wal_lsn *lsn, wal_lsn *lsn_end);
/* Runs fn once the WAL is durable up to `end` (at once if it already is). */
void sk_node_wait_durable(sk_node *n, wal_lsn end, sk_durable_fn fn, void *arg);
/* A record appended up to `end` changed what reads show at once (metadata,
 * groups): the reads marked in the dispatch table wait for it (shown_end). */
void sk_node_shown(sk_node *n, wal_lsn end);

/* True while the WAL holds more than wal.max.retained.bytes (uploads to the
 * object store are behind): produce is refused with a retriable error. */
bool sk_node_wal_full(const sk_node *n);
/* How full the WAL is, as a share of wal.max.retained.bytes: of the own log,
 * or of the payload log when that is fuller. */
double sk_node_wal_fill(const sk_node *n);
/* After an append: starts pacing producers (pace.h) once the WAL is full
 * enough; the pacer's timer takes it from there. */
void sk_node_pace_check(sk_node *n);
/* A connection that produces sent a request of `bytes`: takes them from the
 * pacer's tokens, and stops reading producers when they run out. */
void sk_node_pace_take(sk_node *n, uint32_t bytes);
/* Reads the WAL record of a batch the view indexes: in this node's own WAL,
 * or (a cluster's adopted partitions) in the WAL of the log that holds it.
 * A LINK record is followed to its payload log: the answer is then a DATA
 * record of the batch as served (the link's header on the payload's
 * records). Reader threads; errors as wal_read_record, SK_ERR_CORRUPT when
 * the payload is not the linked batch. */
struct sk_batch_loc;
/* Reads the record at lsn of any log's WAL: this node's own log (log 0 or
 * its id), its payload log, or another log on the shared volume. Reader
 * threads; errors as wal_read_record. */
int sk_node_read_log(sk_node *n, int64_t log, wal_lsn lsn, uint8_t *type, void *buf,
                     uint32_t cap, uint32_t *len) __attribute__((warn_unused_result));
int sk_node_read_batch(sk_node *n, const struct sk_batch_loc *loc, uint8_t *type, void *buf,
                       uint32_t cap, uint32_t *len);
/* Runs fn on a reader thread, then done on the loop. */
int sk_node_read_job(sk_node *n, void (*fn)(void *), void (*done)(void *), void *arg);

/* Moves a partition's log start (retention, DeleteRecords): appended to the
 * WAL and applied in memory; `fn` runs when durable. Topics, producer ids
 * and configurations change through cmeta.h. */
int sk_node_set_log_start(sk_node *n, sk_part *p, int64_t offset, sk_durable_fn fn, void *arg);

/* Runs retention now (tests and the periodic timer). */
void sk_node_retention(sk_node *n);

#endif
