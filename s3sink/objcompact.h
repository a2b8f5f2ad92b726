/*
 * objcompact: compaction of objects, planned from a registry listing and
 * carried out against the object store.
 *
 * The plan (objcompact_plan_make) is a pure function of the listing, the
 * parameters and the time. Only live objects with live ranges take part;
 * one plan is one of:
 *  1. StreamSetObjects: every SSO older than p->force_split_ms or smaller
 *     than p->small_bytes, in listing order while their sizes fit in
 *     p->max_bytes. If one is old, the result is split into a StreamObject
 *     per stream (OBJCOMPACT_SPLIT_SSO); else they are merged by the upload
 *     rule (OBJCOMPACT_MERGE_SSO), and a lone small SSO is left alone (not
 *     worth rewriting).
 *  2. Else, small StreamObjects of one stream, at least two, merged into one
 *     StreamObject (OBJCOMPACT_MERGE_SO): the first small SO in listing
 *     order whose stream has another gives the stream (an SO's stream is
 *     that of its first live range). The result is never an SSO: below the
 *     split size the upload rule would write one, which a later pass would
 *     split back into StreamObjects that merge again, rewriting the same
 *     bytes forever.
 *  3. Else nothing (OBJCOMPACT_NONE).
 *
 * The run (objcompact_run) asks the registry for each source's live ranges,
 * GETs the source whole and keeps the batches that lie inside those ranges
 * (retention may have dropped a stream's old ranges, deletion a whole
 * topic), then writes and PUTs the result with objupload. The caller then registers the new objects and
 * retires the sources in one step.
 *
 * Memory: the kept batches (at most the plan's bytes, which the plan keeps
 * within p->max_bytes) plus one source object at a time.
 *
 * Threads: objcompact_plan_make and objcompact_plan_free: any thread.
 * objcompact_run blocks on the object store: never the loop thread.
 *
 * Ownership: the plan borrows nothing (its source indexes refer to the
 * listing it was made from). objcompact_run borrows env and keys; the
 * objects it appends to `out` are the caller's.
 *
 * Errors: SK_ERR_NOMEM; from the run also env->live's errors, the
 * objstore's, SK_ERR_CORRUPT for a source that fails objfmt's checks, and
 * objupload's.
 */
#ifndef OBJCOMPACT_H
#define OBJCOMPACT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "objreg.h"
#include "objstore.h"
#include "objupload.h"

typedef struct objcompact_params {
    uint64_t small_bytes;   /* objects below this size are merged */
    uint64_t max_bytes;     /* total size of the sources of one plan */
    int64_t force_split_ms; /* SSOs at least this old are split */
} objcompact_params;

typedef enum objcompact_what {
    OBJCOMPACT_NONE = 0,
    OBJCOMPACT_MERGE_SSO,
    OBJCOMPACT_SPLIT_SSO,
    OBJCOMPACT_MERGE_SO,
} objcompact_what;

typedef struct objcompact_plan {
    objcompact_what what;
    size_t *src;    /* indexes of the sources in the listing, in listing order */
    size_t nsrc;
    uint64_t bytes; /* their total size */
} objcompact_plan;

/* Plans one compaction from objs[0..n) (the planner reads the ranges of
 * live StreamObjects only; an SO without them loaded is skipped). */
int objcompact_plan_make(const objreg_info *objs, size_t n, const objcompact_params *p,
                         int64_t now_ms, objcompact_plan *out) __attribute__((warn_unused_result));
void objcompact_plan_free(objcompact_plan *plan);
/* Whether the plan reads o's ranges (a live StreamObject below
 * p->small_bytes: for its stream). A lister need load no others. */
bool objcompact_wants_ranges(const objreg_info *o, const objcompact_params *p);

/* The upload rule's split size for the plan's result: 0 (one StreamObject
 * per stream) when splitting SSOs or merging SOs, else upload_split. */
uint64_t objcompact_split_bytes(const objcompact_plan *plan, uint64_t upload_split);

/* The live ranges the registry holds now for a source: *ranges malloc'd
 * (the run frees it), *n of them; 0 or an error. */
typedef int (*objcompact_live_fn)(void *arg, const char *key, objreg_range **ranges, size_t *n);

/* A batch's largest timestamp, read from its payload (-1 when unknown):
 * payloads are opaque to s3sink. */
typedef int64_t (*objcompact_ts_fn)(const void *payload, uint32_t size);

/* Rewrites a kept batch (compaction of keyed topics, whose records s3sink
 * does not read): returns 0 to keep it as it is; 1 to keep *out instead
 * (malloc'd, the run frees it; *out_size bytes, *records records, the same
 * offsets); 2 to drop it; or an error, which stops the run. */
typedef int (*objcompact_filter_fn)(void *arg, uint64_t stream, const objfmt_batch *b,
                                    const uint8_t *payload, uint8_t **out, uint32_t *out_size,
                                    uint32_t *records);

/* What a run reads from and writes to. */
typedef struct objcompact_env {
    objstore *os;            /* sources are read and results put here */
    objcompact_live_fn live; /* asked for each source just before it is read */
    void *live_arg;
    objcompact_ts_fn ts;     /* NULL: timestamps unknown */
    objup_params up;         /* the upload's; objcompact_split_bytes adapts its split */
    objcompact_filter_fn filter; /* NULL: every live batch is kept as it is */
    void *filter_arg;
} objcompact_env;

/* Carries out the plan: keys holds the plan->nsrc sources' keys, in the
 * plan's order. */
int objcompact_run(const objcompact_env *env, const objcompact_plan *plan,
                   const char *const *keys, objreg_objects *out)
    __attribute__((warn_unused_result));

#endif
