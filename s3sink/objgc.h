/*
 * objgc: which objects the store may lose, and the orphan collector.
 *
 * Registered objects (objgc_decide, pure): a retired object is deleted once
 * its delete-after time has come (the delay lets reads in flight finish); a
 * live object left without any live range (retention, topic deletion) is
 * retired, to be deleted after the delay like the others. The caller
 * records both in its registry.
 *
 * Orphans: objects in the store that the registry does not know, left by a
 * crash or a failure between a PUT and its registration. A pass lists
 * "data/" and takes as candidates the objects of this node (named by
 * objfmt_make_key) older than min_age_ms (an upload or a compaction in
 * flight has not registered its objects yet) that the registry does not
 * know; it deletes those that were candidates in the previous pass too
 * (objgc_orphan_confirmed), so an object is deleted only after two passes
 * found it unknown. The caller keeps each pass's candidates for the next.
 * objgc_orphan_eligible and objgc_orphan_confirmed are the pure parts.
 *
 * Threads: objgc_decide, objgc_orphan_eligible, objgc_orphan_confirmed: any
 * thread. objgc_orphans_pass blocks on the object store and calls `known`
 * on the calling thread: never the loop thread.
 *
 * Ownership: objgc_orphans_pass borrows the store and `prev`, and appends
 * copies of the candidates' keys to `cands` (the caller's).
 *
 * Errors: objgc_orphans_pass returns the listing's error (objstore errors),
 * after deleting the confirmed candidates it found; a failed delete is left
 * for the next pass. A `known` that fails counts as known (nothing is
 * deleted on doubt). A candidate that does not fit in memory is skipped.
 */
#ifndef OBJGC_H
#define OBJGC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objreg.h"
#include "objstore.h"

typedef enum objgc_action {
    OBJGC_KEEP = 0,
    OBJGC_DELETE, /* retired and past its delete-after time */
    OBJGC_RETIRE, /* live without a live range */
} objgc_action;

objgc_action objgc_decide(const objreg_info *o, int64_t now_ms);

typedef struct objgc_orphan_params {
    uint32_t node_id;   /* only this node's objects are candidates */
    int64_t min_age_ms; /* and only those last modified this long ago */
} objgc_orphan_params;

/* Whether a listed object may be a candidate, before the registry is asked:
 * a key of objfmt_make_key's form, written by p->node_id, old enough. */
bool objgc_orphan_eligible(const char *key, int64_t mtime_ms, const objgc_orphan_params *p,
                           int64_t now_ms);
/* Whether a candidate of this pass was one in the previous pass. */
bool objgc_orphan_confirmed(const objreg_keys *prev, const char *key);

/* 1 when the registry knows the key, 0 when not, < 0 on error. */
typedef int (*objgc_known_fn)(void *arg, const char *key);

/* One pass: candidates appended to cands, confirmed ones deleted and
 * counted in *deleted. */
int objgc_orphans_pass(objstore *os, const objgc_orphan_params *p, int64_t now_ms,
                       objgc_known_fn known, void *arg, const objreg_keys *prev,
                       objreg_keys *cands, size_t *deleted) __attribute__((warn_unused_result));

#endif
