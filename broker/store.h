/*
 * store: the SQLite view of the WAL (partition metadata, batch index,
 * producer state, topics and configs).
 *
 * The view is derived, never primary: every change reaches it as a WAL
 * record that is already durable, and each transaction also records the WAL
 * position it reflects (kv 'applied'), so the view is always exactly the
 * WAL up to that position. At start-up the WAL is replayed from there; with
 * no database at all, from the oldest segment's preamble snapshot.
 *
 * Threads:
 *  - sk_store_open, _apply_sync, _load, _close: the main thread at start-up
 *    and shutdown, while no store thread runs.
 *  - sk_store_submit: the loop; the transaction runs on the store's own
 *    thread and `done` comes back on the loop.
 *  - sk_store_read_*: worker threads (each uses its own read connection).
 * Errors: SK_ERR_IO with a message (SQLite's) in the log.
 */
#ifndef STORE_H
#define STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "meta.h"
#include "types.h"

/* One WAL record as the view needs it. DATA records carry only what the
 * batch header says; META and PREAMBLE records carry their payload. */
typedef struct sk_store_rec {
    uint8_t type;
    wal_lsn lsn, end;
    kc_uuid id;
    int32_t part;
    int64_t base, last, max_ts, append_ts;
    uint32_t len; /* batch bytes */
    int64_t pid;
    int16_t epoch;
    int32_t base_seq;
    bool txn;       /* a transactional batch */
    int8_t control; /* a marker: 1 commit, 0 abort; -1 data, -2 unknown */
    uint8_t *payload; /* META/PREAMBLE, owned (malloc'd) */
    uint32_t plen;
} sk_store_rec;

/* Fills rec from a WAL record (copying META/PREAMBLE payloads). Returns 0,
 * SK_ERR_CORRUPT or SK_ERR_NOMEM. */
int sk_store_rec_parse(sk_store_rec *rec, wal_lsn lsn, uint8_t type, const uint8_t *payload,
                       uint32_t len);
/* Fills rec for a data record from its batch header. */
struct kb_header;
void sk_store_rec_data(sk_store_rec *rec, const kc_uuid *id, int32_t part,
                       const struct kb_header *h, uint32_t batch_len);
void sk_store_rec_free(sk_store_rec *rec);

sk_store *sk_store_open(const char *path, char *why, size_t whylen);
void sk_store_close(sk_store *s);

/* End LSN of the WAL the view reflects; 0 for an empty view. */
wal_lsn sk_store_applied(const sk_store *s);
bool sk_store_is_empty(const sk_store *s);
/* Drops everything (the view is ahead of or unrelated to the WAL). */
int sk_store_reset(sk_store *s);

/* Applies records in one transaction and records `end` as applied. A
 * PREAMBLE is applied only to an empty view (it is the whole state). */
int sk_store_apply_sync(sk_store *s, sk_store_rec *recs, size_t n, wal_lsn end);

/* Walks the view's state with the snapshot visitor (start-up loading). */
int sk_store_load(sk_store *s, const sk_snapshot_visitor *v);

/* A transaction being assembled by the loop. */
typedef struct sk_store_txn sk_store_txn;
sk_store_txn *sk_store_txn_new(void);
/* Takes ownership of rec's payload. */
int sk_store_txn_add(sk_store_txn *t, sk_store_rec *rec);
size_t sk_store_txn_count(const sk_store_txn *t);
void sk_store_txn_free(sk_store_txn *t);

typedef void (*sk_store_done_fn)(void *arg, int err, wal_lsn applied);
/* Starts the store thread. */
int sk_store_start(sk_store *s, struct event_base *base);
/* Applies t on the store thread (taking it), then calls done on the loop
 * with the end LSN of t's last record as the new applied position. */
void sk_store_submit(sk_store *s, sk_store_txn *t, sk_store_done_fn done, void *arg);
/* Applies t on the calling thread (shutdown, after sk_store_drain). */
int sk_store_txn_apply_sync(sk_store *s, sk_store_txn *t);
/* Waits for submitted transactions (shutdown). */
void sk_store_drain(sk_store *s);

/* ---- reads, from worker threads ---- */

typedef struct sk_batch_loc {
    int64_t base, last, max_ts;
    int64_t log; /* 0: this log's WAL; else the id of the log whose WAL holds it */
    wal_lsn lsn;
    uint32_t len;
} sk_batch_loc;

/* Batches of a partition holding offsets >= from, in order, until max_bytes
 * (at least one) or max_n. Returns the count (>= 0) or an error. */
int sk_store_read_batches(sk_store *s, const kc_uuid *id, int32_t part, int64_t from,
                          int64_t max_bytes, sk_batch_loc *out, int max_n);
/* The first batch with base < below_base whose max timestamp >= ts;
 * returns 1 when found, 0 when none, or an error. */
int sk_store_find_ts(sk_store *s, const kc_uuid *id, int32_t part, int64_t ts, int64_t below_base,
                     sk_batch_loc *out);
/* The batch holding `offset`; 1 found, 0 none, or an error. */
int sk_store_find_offset(sk_store *s, const kc_uuid *id, int32_t part, int64_t offset,
                         sk_batch_loc *out);
/* Lowest LSN of this log's WAL that an indexed batch still needs
 * (UINT64_MAX if none): batches it wrote, and those of partitions that came
 * back to it (indexed under own_log, the log's id). */
int sk_store_min_lsn(sk_store *s, int64_t own_log, wal_lsn *out);
/* Where retention moves the log start: batches are deleted from the oldest
 * while their max timestamp is below cutoff_ts (-1: no time limit) or what
 * remains after them still holds max_bytes (-1: no limit; as Kafka deletes
 * a segment for size), looking at the
 * stream's object ranges first (whole ranges go), then at its batches still
 * in the WAL. *new_start is the first offset kept, -1 when everything goes,
 * -2 when the partition holds nothing. */
int sk_store_retention_point(sk_store *s, const kc_uuid *id, int32_t part, uint64_t stream,
                             int64_t cutoff_ts, int64_t max_bytes, int64_t *new_start);

/* ---- the object registry (reads, from worker threads) ---- */

#define SK_OBJ_KEY_MAX 320

typedef struct sk_obj_loc {
    char key[SK_OBJ_KEY_MAX];
    uint64_t obj_size;
    int64_t start, end; /* offsets of the stream's range in the object */
    int64_t max_ts;
    uint64_t size;
} sk_obj_loc;

/* The range of `stream` holding offsets >= offset that starts lowest:
 * 1 found, 0 none, or an error. */
int sk_store_find_object(sk_store *s, uint64_t stream, int64_t offset, sk_obj_loc *out);
/* The range of `stream` that ends highest: 1 found, 0 none, or an error. */
int sk_store_last_object(sk_store *s, uint64_t stream, sk_obj_loc *out);
/* The first range of `stream` whose max timestamp reaches ts. */
int sk_store_find_object_ts(sk_store *s, uint64_t stream, int64_t ts, sk_obj_loc *out);
/* WAL position below which every batch is in objects (0: none yet). */
wal_lsn sk_store_uploaded(sk_store *s);

typedef struct sk_obj_info {
    char key[SK_OBJ_KEY_MAX];
    int kind;
    uint64_t size;
    int64_t created_ms;
    int64_t delete_after_ms; /* -1 while live */
    uint32_t nranges;
} sk_obj_info;
/* Every registered object (live and retired), in key order. */
int sk_store_list_objects(sk_store *s, void (*fn)(void *arg, const sk_obj_info *o), void *arg);
/* The live ranges of an object (malloc'd; the caller frees). */
int sk_store_object_ranges(sk_store *s, const char *key, sk_orange **out, size_t *n);
/* 1 when the registry knows the key (live or retired), 0 when not. */
int sk_store_object_known(sk_store *s, const char *key);

/* Copies the view into a new SQLite file at dest (online, from a worker
 * thread) and gives the WAL position the copy reflects. */
int sk_store_backup(sk_store *s, const char *dest, wal_lsn *applied);

/* ---- partitions moving between logs (store_handoff.c) ---- */

/* Picks the consumer groups whose committed offsets travel with a partition
 * (those that hash to an offsets partition), and likewise the transactional
 * ids whose state travels with it. */
typedef bool (*sk_store_group_filter)(void *arg, const char *group, size_t len);
/* Encodes the partition's whole state as the view holds it now (hstate.h's
 * format, source fields 0) into out; batches of this log are given log id
 * own_log. Worker threads. SK_ERR_NOENT when the view has no such partition. */
int sk_store_encode_state(sk_store *s, const kc_uuid *id, int32_t part, int64_t own_log,
                          sk_store_group_filter want, void *arg, sk_buf *out);
/* Where this log's HANDOFF of the partition is (SK_ERR_NOENT: none). */
int sk_store_handoff_lsn(sk_store *s, const kc_uuid *id, int32_t part, wal_lsn *lsn);
/* Batches indexed in another log's WAL (adopted, not yet in objects), or
 * in this log's WAL under its own id (a partition that came back), ordered
 * by partition and offset, until max_bytes (always whole prefixes of a
 * partition's run). *more is set when some were left out. Worker threads. */
int sk_store_foreign_batches(sk_store *s, int64_t max_bytes,
                             void (*fn)(void *arg, const kc_uuid *id, int32_t part,
                                        const sk_batch_loc *loc),
                             void *arg, bool *more);
/* Whether the partition still has batches indexed in log `log`'s WAL:
 * 1 yes, 0 no, or an error. Also 1 while the view has not applied this
 * node's WAL up to `need` (read in the same snapshot): a partition adopted
 * moments ago is in the WAL before it is in the view, and an answer of 0
 * then would let another log's batches go before they are in objects. */
int sk_store_has_log_batches(sk_store *s, const kc_uuid *id, int32_t part, int64_t log,
                             wal_lsn need);
/* The partitions this view holds. */
int sk_store_owned_partitions(sk_store *s, void (*fn)(void *arg, const kc_uuid *id, int32_t part),
                              void *arg);

/* Calls fn for every partition with the bytes of its retained batches. */
int sk_store_partition_bytes(sk_store *s,
                             void (*fn)(void *arg, const kc_uuid *id, int32_t part, int64_t bytes),
                             void *arg);

#endif
