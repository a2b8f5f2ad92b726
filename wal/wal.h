/*
 * wal: the write-ahead log: record format, group commit, recovery, trimming.
 *
 * The WAL is an append-only stream of records addressed by LSN (the byte
 * position in the stream). It is cut into segments; segment `S` holds the
 * stream bytes [S, next segment's start). Each segment file begins with a
 * fixed header (magic, version, node id, owner epoch, start LSN, CRC), and
 * its first record is a preamble supplied by the owner (Skiff's broker puts
 * a metadata snapshot there, so that any retained segment is a replay start).
 *
 * Record: u32 payload length, u32 CRC-32C, u8 type, payload. The CRC covers
 * the record's own LSN (8 bytes, not stored), the type and the payload, so
 * stale bytes at a wrong position never validate. Little-endian. The WAL
 * knows nothing of Kafka: types are the caller's, except WAL_T_PREAMBLE;
 * type 0 is never valid, so that zeroed (preallocated) space reads as the
 * end of the log. docs/wal.md describes the format and the algorithms.
 *
 * Group commit: appends are copied into a staging buffer; while one
 * write+sync is in flight, everything appended meanwhile waits and goes out
 * in the next single write+sync. Completions run in LSN order. One commit
 * never spans two segments, so a torn write can only be in the last segment.
 *
 * Ownership: a WAL belongs to one owner at a time, identified by an owner
 * epoch claimed on the volume (an owner file per epoch) and kept by a lease
 * that the WAL renews from the loop. wal_open claims the next epoch, waits
 * out the previous owner's lease when it cannot prove that owner dead, and
 * only then recovers; an owner that sees a newer epoch, or whose lease ran
 * out without renewal, acknowledges nothing more. docs/wal.md has the rules.
 *
 * Transient storage errors (wal_storage.h) never fail records: the WAL keeps
 * them queued and retries; back-pressure (SK_ERR_AGAIN) bounds the memory.
 *
 * Contract:
 *  - wal_open (claim and recovery) is blocking and runs before the loop
 *    serves; it may wait up to 1.2 lease periods during a takeover.
 *  - wal_append, wal_roll, wal_trim, wal_close, the getters and stats: the
 *    event-loop thread. wal_close must not be called from inside a callback
 *    of that loop (it runs the loop itself until the data is durable).
 *  - wal_read_record, wal_scan_record, wal_segments_snapshot: any thread,
 *    until wal_close
 *    (readers stop first).
 *  - Owns its staging memory and the storage (destroyed by wal_close, or by
 *    wal_open when it fails).
 * Errors: SK_ERR_AGAIN (staging cap reached: back-pressure), SK_ERR_IO
 * (storage failed permanently: the WAL is then failed, every later append
 * fails too), SK_ERR_FENCED (a newer owner took the WAL over: failed too;
 * from wal_open: a live owner holds it), SK_ERR_CORRUPT (recovery found
 * damage outside the last segment's tail), SK_ERR_INVAL (type 0, payload
 * over WAL_MAX_RECORD), SK_ERR_CLOSED.
 */
#ifndef WAL_H
#define WAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wal_storage.h"

struct event_base;

typedef uint64_t wal_lsn;
typedef struct wal wal;

#define WAL_T_PREAMBLE 1 /* first record of every segment */
#define WAL_RECORD_HEADER 9
#define WAL_SEGMENT_HEADER 40
#define WAL_MAX_RECORD (64u << 20) /* payload bound: a corrupt length stays harmless */

typedef struct wal_opts {
    uint64_t segment_bytes;     /* roll to a new segment past this size (0: 64 MiB) */
    uint64_t max_pending_bytes; /* staging cap; wal_append then says SK_ERR_AGAIN
                                   (0: 32 MiB) */
    uint32_t node_id;
    uint64_t owner_epoch;       /* the least epoch to claim; 0: the next one */
    bool no_preallocate;        /* do not reserve segment_bytes when creating a segment */
    bool no_direct_io;          /* write through the page cache even where O_DIRECT works */
    /* Lease of the owner (0: 10 s). Renewed every quarter of it. */
    int64_t lease_ms;
    /* How long the volume may fail to complete an operation before the WAL
     * calls itself unavailable (stats, log), and how long wal_close keeps
     * retrying before it gives up on records not yet durable (0: 30 s). */
    int64_t io_timeout_ms;
    /* A file on a local disk that this process keeps flock'ed (NULL: none),
     * naming its owner instance. When the previous owner of the WAL was a
     * process that held this same file and is gone, its lease needs no
     * waiting out: a node restarted on its data directory takes over at once. */
    const char *local_lock_path;
    /* Non-NULL: the previous owner is known to acknowledge nothing more (in
     * a cluster, its membership lease expired: see wal_set_ack_deadline), so
     * the WAL is taken over at once, even while that owner's process may
     * still hold the directory's lock. The text says why, for the log. */
    const char *takeover_proof;
    /* Returns a malloc'd preamble payload for a new segment starting at
     * `start` (the WAL frees it); NULL means empty preambles. Called on the
     * loop thread, synchronously inside wal_append, before the triggering
     * record is placed: the caller must append first and apply its effects
     * after. A non-zero return fails that append with the same error. */
    int (*preamble)(void *arg, wal_lsn start, uint8_t **buf, uint32_t *len);
    void *preamble_arg;
} wal_opts;

/* Called once per valid record during recovery, in LSN order. Returning
 * non-zero stops recovery with that error. */
typedef int (*wal_replay_fn)(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *payload,
                             uint32_t len);

/* Called when a record is durable (err 0) or can never be (err < 0). */
typedef void (*wal_done_fn)(void *arg, int err, wal_lsn lsn);

/* Recovers and opens the WAL on `st` (taking ownership of it):
 *  1. lists the segments and validates every record;
 *  2. truncates the last segment at its first torn or invalid record;
 *     damage in any earlier segment is SK_ERR_CORRUPT (no start-up);
 *  3. calls replay for every record with lsn >= replay_from (from the first
 *     retained segment if replay_from is older than it);
 *  4. is then ready to append after the last valid record; the first append
 *     starts a new segment (with this owner's header and a fresh preamble),
 *     so recovered segments are never written again. A fresh WAL starts at
 *     LSN 0. A last segment left without a complete header or preamble (a
 *     crash while it was being started) is reused from its start.
 * Replay may have run for some records when recovery then fails. Writes a
 * reason (which file, which offset) into why on failure. */
wal *wal_open(struct event_base *base, wal_storage *st, const wal_opts *o, wal_lsn replay_from,
              wal_replay_fn replay, void *arg, int *err, char *why, size_t whylen);

/* Appends one record; the payload is copied. *lsn receives its position at
 * once; done (may be NULL) runs when it is durable. Returns 0, SK_ERR_AGAIN
 * (over the staging cap; nothing appended, done not called; the cap counts
 * the bytes not yet durable, and a record is always accepted when none are,
 * so some done callback is then still to come), SK_ERR_IO (failed WAL),
 * SK_ERR_INVAL, SK_ERR_NOMEM or the preamble callback's error. */
int wal_append(wal *w, uint8_t type, const void *payload, uint32_t len, wal_done_fn done,
               void *arg, wal_lsn *lsn);
/* Same, payload gathered from several pieces. */
int wal_appendv(wal *w, uint8_t type, const struct iovec *iov, int iovcnt, wal_done_fn done,
                void *arg, wal_lsn *lsn);
/* Same, where last_crc is the CRC-32C of the last piece's bytes, which the
 * caller established already (a checksum it verified): the record's CRC is
 * derived from it (sk_crc32c_combine) instead of reading those bytes again.
 * A wrong last_crc makes a record that recovery rejects as torn. */
int wal_appendv_known(wal *w, uint8_t type, const struct iovec *iov, int iovcnt,
                      uint32_t last_crc, wal_done_fn done, void *arg, wal_lsn *lsn)
    __attribute__((warn_unused_result));

/* The owner's second lease, when it has one (cluster membership): nothing
 * is written or acknowledged at or after `deadline_us` on the clock of
 * wal_clock_us (0: no such lease). Moving the deadline later resumes what
 * waited. Loop thread. */
void wal_set_ack_deadline(wal *w, int64_t deadline_us);
/* The clock of leases: it keeps counting while the machine is suspended. */
int64_t wal_clock_us(void);

/* Starts a new segment at the next append (used to let old ones be trimmed). */
void wal_roll(wal *w);

/* Deletes, in the background and oldest first, every segment that lies
 * wholly below `upto` (clamped to the durable LSN) and whose successor file
 * exists. The segment that holds the end of the stream is never deleted.
 * Reads of trimmed segments fail with SK_ERR_NOENT at once. */
void wal_trim(wal *w, wal_lsn upto);

wal_lsn wal_end_lsn(const wal *w);     /* after the last appended record */
wal_lsn wal_durable_lsn(const wal *w); /* after the last durable record */
wal_lsn wal_start_lsn(const wal *w);   /* first retained segment's start */
size_t wal_pending_bytes(const wal *w); /* appended, not yet durable */
bool wal_failed(const wal *w);
int wal_fail_error(const wal *w);       /* why it failed (0 when it did not) */
uint64_t wal_owner_epoch(const wal *w); /* the epoch this owner claimed */

/* Start LSNs of the retained segments, ascending, in a malloc'd array the
 * caller frees (any thread). */
int wal_segments_snapshot(wal *w, wal_lsn **starts, size_t *n);

/* Reads and verifies the record at lsn (any thread, blocking). On success
 * *type and *len are set and up to cap payload bytes copied into buf; a
 * payload longer than cap is SK_ERR_NOMEM with *len set. SK_ERR_NOENT when
 * the segment is gone (trimmed), SK_ERR_CORRUPT on a bad CRC or a position
 * that holds no record, SK_ERR_INVAL when lsn is not below the durable LSN. */
int wal_read_record(wal *w, wal_lsn lsn, uint8_t *type, void *buf, uint32_t cap, uint32_t *len);

/* Reads this WAL's records in LSN order for one thread that walks a range
 * (the uploader reading back what the WAL cache no longer holds): one
 * storage read per window of up to WAL_SCAN_WINDOW bytes instead of two per
 * record, each record verified as wal_read_record verifies it. The window
 * only ever holds bytes below the durable LSN of when it was read, and
 * belongs to the one segment it was read from. Any thread, until wal_close;
 * one scan per thread (it is not locked). Zero-initialised is a valid scan. */
#define WAL_SCAN_WINDOW (4u << 20)
typedef struct wal_scan {
    uint8_t *buf;
    size_t cap;
    wal_lsn seg;  /* the segment the window is of */
    wal_lsn base; /* the LSN of buf[0] */
    size_t len;   /* verified-durable bytes in buf */
    uint64_t reads; /* storage reads so far (for tests) */
} wal_scan;

/* The record at lsn: *payload points into the window until the next call
 * on this scan (or wal_scan_reset/free). Errors as wal_read_record, and
 * SK_ERR_NOMEM when no window can hold the record. */
int wal_scan_record(wal *w, wal_scan *s, wal_lsn lsn, uint8_t *type, const uint8_t **payload,
                    uint32_t *len) __attribute__((warn_unused_result));
/* Forgets the window (the next call reads again), keeps the buffer. */
void wal_scan_reset(wal_scan *s);
void wal_scan_free(wal_scan *s);

/* Reads and verifies the record at lsn of segment `seg` on storage `st`
 * (blocking, any thread), a record that must end at or below `bound`.
 * Errors as wal_read_record. */
int wal_read_at(wal_storage *st, wal_lsn seg, wal_lsn lsn, wal_lsn bound, uint8_t *type,
                void *buf, uint32_t cap, uint32_t *len);

/* ---- reading another owner's WAL ----
 * A node that adopted partitions from another log reads their batches from
 * that log's segments until it has them in objects. A reader never claims,
 * writes, recovers or trims: it reads verified records at LSNs it was told
 * about (records known durable), and lists the segments again when an LSN
 * lies beyond the ones it knows. Any thread; a mutex guards the list. */
typedef struct wal_reader wal_reader;
/* Takes ownership of st (destroyed by wal_reader_close, or here on failure). */
wal_reader *wal_reader_open(wal_storage *st, char *why, size_t whylen);
int wal_reader_read(wal_reader *r, wal_lsn lsn, uint8_t *type, void *buf, uint32_t cap,
                    uint32_t *len);
void wal_reader_close(wal_reader *r);

/* Deletes every segment and owner file of the WAL at `url` (a dead log
 * nobody needs any more). Blocking, any thread; nobody may own the WAL. */
int wal_destroy_files(struct event_base *base, const char *url, char *why, size_t whylen);

/* The owner gives up writing: its membership is gone or it was fenced, so
 * nothing appended is to be acknowledged any more. Everything waiting fails
 * now with SK_ERR_CLOSED (the callbacks run inside the call), so that
 * callers answer at once instead of at the close; what already reached the
 * volume stays there for the next owner. A no-op on a failed WAL (a fenced
 * one failed its waiters already), from inside a done callback, and while a
 * write is in flight: what waits then fails at the close. */
void wal_abandon(wal *w);

/* Finishes the in-flight and pending commits and removals, then frees
 * everything; the remaining done callbacks run (with their result) before it
 * returns. Appends made from those callbacks get SK_ERR_CLOSED. */
void wal_close(wal *w);

/* Statistics for metrics. */
/* Buckets of the group-commit latency histograms: upper bounds in µs. */
#define WAL_COMMIT_BUCKETS 16
int64_t wal_commit_bucket_us(int i);

typedef struct wal_stats {
    uint64_t appends, commits, bytes_written; /* bytes_written: durable, headers included */
    uint64_t segments, segments_removed;      /* segments: retained now */
    int64_t last_commit_us; /* duration of the last write+sync */
    uint64_t commit_us_sum; /* of every write+sync */
    uint64_t commit_hist[WAL_COMMIT_BUCKETS + 1]; /* write+syncs by duration, last: more */
    /* Where a commit's time went, when the backend knows (write_timing in
     * wal_storage.h): queued before its I/O began, and the write + sync
     * themselves; the rest of commit_hist is the loop's wake-up. */
    uint64_t io_wait_us_sum, io_wait_hist[WAL_COMMIT_BUCKETS + 1];
    uint64_t io_us_sum, io_hist[WAL_COMMIT_BUCKETS + 1];
    uint64_t owner_epoch;
    uint64_t retries;       /* operations issued again after a transient error */
    uint64_t lease_lapses;  /* times acknowledgements stopped for want of a lease */
    uint64_t buffers_allocated; /* group-commit buffers allocated or grown: flat once
                                   the batches kept for reuse are warm */
    bool unavailable;       /* the volume has failed to complete an operation, or
                               to renew the lease, for io_timeout_ms or more */
    int64_t outage_ms;      /* how long the current trouble lasts (0: none) */
} wal_stats;
void wal_get_stats(const wal *w, wal_stats *st);

#endif
