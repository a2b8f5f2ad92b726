#include "objcompact.h"

#include <stdbool.h>
#include <stdlib.h>

#include "sk_err.h"

/* ---- the plan ---- */

static bool live(const objreg_info *o)
{
    return o->delete_after_ms < 0 && o->nranges > 0;
}

static void pick(objcompact_plan *plan, size_t i, const objreg_info *o)
{
    plan->src[plan->nsrc++] = i;
    plan->bytes += o->size;
}

static void drop_all(objcompact_plan *plan)
{
    plan->nsrc = 0;
    plan->bytes = 0;
}

/* 1. StreamSetObjects: the old ones are split, small ones merged. */
static void plan_ssos(const objreg_info *objs, size_t n, const objcompact_params *p,
                      int64_t now_ms, objcompact_plan *plan)
{
    bool split_all = false;
    for (size_t i = 0; i < n; i++) {
        const objreg_info *o = &objs[i];
        if (!live(o) || o->kind != OBJFMT_SSO)
            continue;
        bool old = now_ms - o->created_ms >= p->force_split_ms;
        if ((old || o->size < p->small_bytes) && plan->bytes + o->size <= p->max_bytes) {
            pick(plan, i, o);
            split_all |= old;
        }
    }
    if (plan->nsrc == 1 && !split_all)
        drop_all(plan);
    if (plan->nsrc > 0)
        plan->what = split_all ? OBJCOMPACT_SPLIT_SSO : OBJCOMPACT_MERGE_SSO;
}

bool objcompact_wants_ranges(const objreg_info *o, const objcompact_params *p)
{
    return live(o) && o->kind == OBJFMT_SO && o->size < p->small_bytes;
}

static bool small_so(const objreg_info *o, const objcompact_params *p, uint64_t *stream)
{
    if (!objcompact_wants_ranges(o, p) || !o->ranges)
        return false;
    *stream = o->ranges[0].stream;
    return true;
}

/* 2. Small StreamObjects of one stream. Listings are in key order (random),
 * so the stream's objects are found through their ranges. */
static void plan_sos(const objreg_info *objs, size_t n, const objcompact_params *p,
                     objcompact_plan *plan)
{
    for (size_t i = 0; i < n && plan->nsrc == 0; i++) {
        uint64_t stream, other;
        if (!small_so(&objs[i], p, &stream))
            continue;
        for (size_t k = 0; k < n; k++)
            if (small_so(&objs[k], p, &other) && other == stream &&
                plan->bytes + objs[k].size <= p->max_bytes)
                pick(plan, k, &objs[k]);
        if (plan->nsrc < 2)
            drop_all(plan);
    }
    if (plan->nsrc > 0)
        plan->what = OBJCOMPACT_MERGE_SO;
}

int objcompact_plan_make(const objreg_info *objs, size_t n, const objcompact_params *p,
                         int64_t now_ms, objcompact_plan *out)
{
    *out = (objcompact_plan){OBJCOMPACT_NONE, calloc(n + 1, sizeof *out->src), 0, 0};
    if (!out->src)
        return SK_ERR_NOMEM;
    plan_ssos(objs, n, p, now_ms, out);
    if (out->nsrc == 0)
        plan_sos(objs, n, p, out);
    return 0;
}

void objcompact_plan_free(objcompact_plan *plan)
{
    free(plan->src);
    *plan = (objcompact_plan){0};
}

uint64_t objcompact_split_bytes(const objcompact_plan *plan, uint64_t upload_split)
{
    bool per_stream = plan->what == OBJCOMPACT_SPLIT_SSO || plan->what == OBJCOMPACT_MERGE_SO;
    return per_stream ? 0 : upload_split;
}

/* ---- the run ---- */

static bool inside(const objreg_range *live, size_t nlive, uint64_t stream, const objfmt_batch *b)
{
    for (size_t k = 0; k < nlive; k++)
        if (live[k].stream == stream && b->base_offset >= live[k].start &&
            b->last_offset <= live[k].end)
            return true;
    return false;
}

/* Adds the batches of one block that lie inside live ranges, checking the
 * block first. */
static int keep_block(const objcompact_env *env, const objreg_range *live, size_t nlive,
                      const objfmt_entry *e, const uint8_t *data, objup_set *set)
{
    objfmt_iter it;
    int rc = objfmt_iter_init(&it, e, data, e->size);
    objfmt_batch b;
    const uint8_t *payload;
    while (rc == 0 && objfmt_iter_next(&it, &b, &payload) == 1) {
        if (!inside(live, nlive, e->stream_id, &b))
            continue;
        uint8_t *rew = NULL;
        int f = env->filter ? env->filter(env->filter_arg, e->stream_id, &b, payload, &rew,
                                          &b.size, &b.record_count)
                            : 0;
        if (f < 0)
            return f;
        if (f == 2)
            continue;
        const uint8_t *bytes = f == 1 ? rew : payload;
        objup_batch ub = {e->stream_id,
                          (int64_t)b.base_offset,
                          (int64_t)b.last_offset,
                          env->ts ? env->ts(bytes, b.size) : -1,
                          b.record_count,
                          b.size, 0, false, 0};
        rc = objup_set_add(set, &ub, bytes);
        free(rew);
    }
    return rc;
}

/* GETs a whole object and adds the batches inside live ranges to the set. */
static int keep_live(const objcompact_env *env, const char *key, const objreg_range *live,
                     size_t nlive, objup_set *set)
{
    uint8_t *data = NULL;
    size_t got = 0;
    uint64_t size = 0;
    int rc = objstore_get_sync(env->os, key, 0, OBJSTORE_TO_END, NULL, &data, &got, &size);
    objfmt_reader *r = NULL;
    uint64_t need_off;
    size_t need_len;
    if (rc == 0)
        rc = objfmt_reader_from_tail(data, got, got, &r, &need_off, &need_len);
    size_t nb = 0;
    const objfmt_entry *bl = rc == 0 ? objfmt_reader_blocks(r, &nb) : NULL;
    for (size_t i = 0; rc == 0 && i < nb; i++)
        rc = keep_block(env, live, nlive, &bl[i], data + bl[i].position, set);
    objfmt_reader_destroy(r);
    free(data);
    return rc;
}

/* The registry is asked right before the read, so that what retention
 * dropped meanwhile is left out. */
static int load_source(const objcompact_env *env, const char *key, objup_set *set)
{
    objreg_range *live = NULL;
    size_t nlive = 0;
    int rc = env->live(env->live_arg, key, &live, &nlive);
    if (rc == 0)
        rc = keep_live(env, key, live, nlive, set);
    free(live);
    return rc;
}

int objcompact_run(const objcompact_env *env, const objcompact_plan *plan,
                   const char *const *keys, objreg_objects *out)
{
    if (plan->what == OBJCOMPACT_NONE || plan->nsrc == 0)
        return 0;
    /* The payloads kept are fewer bytes than the objects that hold them. */
    objup_set *set = objup_set_new(plan->bytes);
    if (!set)
        return SK_ERR_NOMEM;
    int rc = 0;
    for (size_t i = 0; i < plan->nsrc && rc == 0; i++)
        rc = load_source(env, keys[i], set);
    objup_params p = env->up;
    p.split_bytes = objcompact_split_bytes(plan, env->up.split_bytes);
    if (rc == 0)
        rc = objup_put(set, env->os, &p, out);
    objup_set_destroy(set);
    return rc;
}
