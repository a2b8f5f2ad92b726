/*
 * blockcache: a bounded LRU cache of objects' data blocks, for the read path.
 *
 * Blocks are keyed by (object key, block position) and described by their
 * objfmt index entries, so every block is checked (CRC-32C and structure)
 * once, when it arrives, and never enters the cache corrupt. The CRC is the
 * one the store computed while writing the block's buffer (objstore_getv). A read asks for
 * consecutive blocks of one object; the blocks it misses, and up to
 * `readahead` following blocks of the same stream (sequential catch-up), are
 * fetched with as few ranged GETs as possible: adjacent missing blocks are
 * merged into one GET of at most opts.max_merge bytes. The read-ahead window
 * is refilled only once fewer than half of its blocks are cached or on their
 * way, and then whole, so that a reader moving block by block gets GETs of
 * many blocks, not one per read. A block already being fetched is not
 * fetched again: later readers wait for the same GET.
 *
 * Read once: a block that only one reader has read (its own re-reads within
 * opts.reread_us included) is kept among the last opts.once_bytes of such
 * blocks, and evicted before any other; a block read again later joins the
 * LRU of shared blocks. So a catch-up reading history once cycles through a
 * ring of once_bytes (its buffers reused through the pool, not fresh pages
 * for the whole capacity) and leaves the rest of the cache to blocks that
 * readers share.
 *
 * Memory: opts.capacity bounds the bytes of cached blocks. Blocks handed to
 * readers are pinned until released and are never evicted; the cache may
 * pass its capacity by what readers pin, and it gives the excess back as
 * soon as they release. Read-ahead is skipped when it would not fit.
 *
 * Holds (by reference): a reader that keeps pointing into a block past its
 * release (a response sending the block's batches by reference) takes a
 * hold with blockcache_hold while the block is pinned, and drops it with
 * sk_ref_put when done. A held block is evicted like any other: it leaves
 * the cache and its byte count at once, but its bytes stay valid and
 * unchanged until the last hold goes, which frees it; that needs no cache,
 * so a hold may outlive the cache (blockcache_destroy warns: the broker
 * destroys its connections first).
 *
 * Buffers: a freed block's buffer (after its last hold, never before) goes
 * to a pool that the next fetches take from, so that a catch-up does not
 * fault in fresh pages for every block. The pool fills what the capacity
 * leaves unused by cached and loading blocks, plus twice opts.max_merge
 * bytes (at most 1024 buffers): cache and pool together stay within the
 * capacity plus two merged GETs. It keeps nothing once the cache is
 * destroyed.
 *
 * Threads: the loop thread only (the one the objstore delivers on), holds
 * and their drops included: sk_ref is not atomic, so whatever holds a block
 * (a response, an output buffer) must be freed on the loop thread. No other
 * thread touches the cache (the tier thread's jobs never do).
 * Callbacks run later on that thread, never inside blockcache_read; a
 * callback may read again, but must not destroy the cache.
 *
 * Ownership: the cache borrows the objstore (which must outlive it) and
 * copies keys and entries it keeps. A read fills the caller's out[] array,
 * which must stay valid until the callback; each block in it is pinned and
 * must be given back with blockcache_release.
 *
 * Errors: SK_ERR_INVAL (bad arguments), SK_ERR_NOMEM, and through the
 * callback the objstore's errors (SK_ERR_NOENT, SK_ERR_IO, SK_ERR_TIMEOUT),
 * SK_ERR_CORRUPT for a block that fails its check, SK_ERR_CLOSED when the
 * cache is destroyed first. After an error nothing is pinned and out[] is
 * all NULL.
 */
#ifndef BLOCKCACHE_H
#define BLOCKCACHE_H

#include <stddef.h>
#include <stdint.h>

#include "objfmt.h"
#include "objstore.h"
#include "sk_ref.h"

typedef struct blockcache blockcache;
typedef struct blockcache_block blockcache_block;

/* Where blocks come from: objstore_getv's shape (one GET into each block's
 * own buffer, nothing to cut up after, and the CRC-32C of each buffer's bytes
 * into crcs[i], computed as they arrive), so tests can stand in. */
typedef void (*blockcache_fetch_fn)(void *ctx, const char *key, uint64_t off,
                                    const struct iovec *iov, int iovcnt, uint32_t *crcs,
                                    objstore_get_cb cb, void *arg);

typedef struct blockcache_opts {
    size_t capacity;  /* bytes of cached blocks; default 256 MiB */
    size_t max_merge; /* largest merged GET; default 8 MiB (one block may be larger) */
    blockcache_fetch_fn fetch; /* NULL: objstore_getv on the store */
    void *fetch_ctx;
    size_t once_bytes;  /* blocks read once kept; default capacity / 4, at least
                           2 * max_merge, at most capacity */
    int64_t reread_us;  /* a read this long after the first is another reader's;
                           default 1 s */
    int64_t (*now_us)(void); /* monotonic clock of every timing here; NULL: sk_mono_us */
} blockcache_opts;

/* store may be NULL when opts->fetch is set. */
blockcache *blockcache_new(objstore *store, const blockcache_opts *opts);
/* Reads waiting on fetches fail with SK_ERR_CLOSED (their callbacks run
 * here); blocks still pinned by readers must have been released. */
void blockcache_destroy(blockcache *c);

typedef void (*blockcache_cb)(void *arg, int err);

#define BLOCKCACHE_HIT 1

/* Blocks entries[first .. first+nwant) of object `key` (entries: the
 * object's index, or any run of it; borrowed during the call). Returns
 * BLOCKCACHE_HIT when all are cached (out[] filled, cb never runs), 0 when
 * cb will run (out[] filled when err == 0), or a negative error at once. */
int blockcache_read(blockcache *c, const char *key, const objfmt_entry *entries, size_t nentries,
                    size_t first, size_t nwant, size_t readahead, blockcache_block **out,
                    blockcache_cb cb, void *arg);

const uint8_t *blockcache_data(const blockcache_block *b, size_t *len);
const objfmt_entry *blockcache_entry(const blockcache_block *b);
void blockcache_release(blockcache *c, blockcache_block *b);
/* A hold on a pinned block's bytes (see "Holds"), dropped with sk_ref_put;
 * valid after the block's release and eviction, until that drop. */
sk_ref *blockcache_hold(blockcache_block *b);

/* Drops the unpinned cached blocks of an object (after its deletion). */
void blockcache_forget(blockcache *c, const char *key);

typedef struct blockcache_stats {
    uint64_t hits, misses;      /* wanted blocks found / not found */
    uint64_t gets, get_bytes;   /* ranged GETs issued */
    uint64_t get_us;            /* their durations, summed (ended GETs) */
    uint64_t readahead;         /* blocks fetched ahead */
    uint64_t evictions, errors;
    uint64_t once_evictions;    /* of them, blocks read once, for the ring's bound */
    uint64_t waits, wait_us;    /* reads that waited for a GET, and how long in all */
    size_t used, capacity, blocks;
    size_t gets_in_flight, get_bytes_in_flight; /* now */
    uint64_t buffers_reused; /* fetches that took a buffer from the pool */
    size_t pool_bytes;       /* free buffers kept for them, now */
    size_t once_bytes;       /* blocks read once, cached now */
} blockcache_stats;
void blockcache_stats_get(const blockcache *c, blockcache_stats *out);

#endif
