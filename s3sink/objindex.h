/*
 * objindex: the indexes of objects, loaded asynchronously and kept in a
 * small LRU, for the read path (the step before blockcache).
 *
 * Loading an object's index is the tail read of docs/objects.md: a HEAD
 * when the caller does not know the object's size, a ranged GET of the last
 * OBJFMT_TAIL_READ bytes, and a second GET when the index is larger than
 * that. Concurrent requests for the same object share one load. At most
 * opts.max_objects indexes are kept; the least recently used unreferenced
 * one goes first.
 *
 * Threads: the loop thread only; callbacks run later on it, never inside
 * objindex_get, and must not destroy the objindex.
 *
 * Ownership: borrows the objstore (it must outlive the objindex). A handle
 * from objindex_get pins its reader until objindex_release; the reader is
 * read-only and may be used by anyone holding the handle.
 *
 * Errors: SK_ERR_INVAL, SK_ERR_NOMEM at once; through the callback the
 * objstore's errors (SK_ERR_NOENT for a missing object, SK_ERR_IO,
 * SK_ERR_TIMEOUT), SK_ERR_CORRUPT for an object whose footer or index fails
 * its checks (nothing is cached then), SK_ERR_CLOSED when destroyed first.
 */
#ifndef OBJINDEX_H
#define OBJINDEX_H

#include <stddef.h>
#include <stdint.h>

#include "objfmt.h"
#include "objstore.h"

typedef struct objindex objindex;
typedef struct objindex_ref objindex_ref;

typedef struct objindex_opts {
    size_t max_objects; /* default 4096 */
} objindex_opts;

objindex *objindex_new(objstore *store, const objindex_opts *opts);
/* Loads waiting for the store fail with SK_ERR_CLOSED (callbacks run
 * here); every handle must have been released. */
void objindex_destroy(objindex *x);

typedef void (*objindex_cb)(void *arg, int err, objindex_ref *ref);

#define OBJINDEX_HIT 1

/* The index of `key`, whose size is obj_size (0: unknown, a HEAD finds it).
 * Returns OBJINDEX_HIT with *out set when cached (cb never runs), 0 when cb
 * will run, or a negative error at once. */
int objindex_get(objindex *x, const char *key, uint64_t obj_size, objindex_ref **out,
                 objindex_cb cb, void *arg);
const objfmt_reader *objindex_reader(const objindex_ref *r);
/* The object's size (as loaded). */
uint64_t objindex_size(const objindex_ref *r);
void objindex_release(objindex *x, objindex_ref *r);
/* Drops an unreferenced cached index (after the object's deletion). */
void objindex_forget(objindex *x, const char *key);

typedef struct objindex_stats {
    uint64_t hits, loads, load_errors, gets, heads, evictions;
    size_t cached;
} objindex_stats;
void objindex_stats_get(const objindex *x, objindex_stats *out);

#endif
