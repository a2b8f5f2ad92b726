/*
 * objreg: what the uploader, compaction and the GC exchange with the object
 * registry, as s3sink sees it. The registry itself (where objects and their
 * ranges are recorded, how its records are encoded) belongs to the caller:
 * the broker keeps it in its WAL and SQLite view.
 *
 *  - objreg_range: one stream's part of an object, as the registry records
 *    it (offsets inclusive, bytes, largest timestamp, record count).
 *  - objreg_object: an object just written and PUT (by objupload or
 *    objcompact), with its ranges: what the caller registers.
 *  - objreg_info: one entry of a registry listing, the input of the
 *    compaction plan and of the GC decisions (objcompact, objgc).
 *  - objreg_objects, objreg_keys: growable lists of the above and of keys.
 *
 * Threads: plain data; any thread, one at a time per list.
 *
 * Ownership: a list owns its elements (an objreg_object owns its ranges,
 * objreg_keys its strings) until objreg_objects_free / objreg_keys_free.
 * An objreg_info borrows its ranges from whoever built the listing.
 *
 * Errors: SK_ERR_NOMEM.
 */
#ifndef OBJREG_H
#define OBJREG_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objfmt.h"

typedef struct objreg_range {
    uint64_t stream;
    uint64_t start, end; /* offsets, end inclusive */
    uint64_t size;       /* bytes of the stream's blocks in the object */
    int64_t max_ts;      /* largest batch timestamp, -1 when none is known */
    uint64_t records;
} objreg_range;

typedef struct objreg_object {
    char key[OBJFMT_KEY_MAX];
    objfmt_kind kind;
    uint64_t size;
    int64_t created_ms;
    objreg_range *ranges; /* one per stream, in stream order; owned */
    uint32_t nranges;
} objreg_object;

typedef struct objreg_info {
    char key[OBJFMT_KEY_MAX];
    objfmt_kind kind;
    uint64_t size;
    int64_t created_ms;
    int64_t delete_after_ms; /* -1 while live; once retired, when it may be deleted */
    uint32_t nranges;        /* live ranges the registry holds for it */
    /* Those ranges, or NULL when the lister did not load them; when set, it
     * holds nranges entries. Borrowed. */
    const objreg_range *ranges;
} objreg_info;

typedef struct objreg_objects {
    objreg_object *v;
    size_t n, cap;
} objreg_objects;

/* Appends *o (taking its ranges) or fails, leaving o->ranges to the caller. */
int objreg_objects_push(objreg_objects *l, const objreg_object *o)
    __attribute__((warn_unused_result));
void objreg_objects_free(objreg_objects *l);

typedef struct objreg_keys {
    char **v;
    size_t n, cap;
} objreg_keys;

/* Appends a copy of key. */
int objreg_keys_push(objreg_keys *l, const char *key)
    __attribute__((warn_unused_result));
/* Whether the list holds key (a linear scan). */
bool objreg_keys_has(const objreg_keys *l, const char *key);
void objreg_keys_free(objreg_keys *l);

#endif
