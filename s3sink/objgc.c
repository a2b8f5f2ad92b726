#include "objgc.h"

#include <stdlib.h>
#include <string.h>

#include "objfmt.h"
#include "sk_err.h"
#include "sk_log.h"

#define LIST_PAGE 1000

objgc_action objgc_decide(const objreg_info *o, int64_t now_ms)
{
    if (o->delete_after_ms >= 0)
        return o->delete_after_ms <= now_ms ? OBJGC_DELETE : OBJGC_KEEP;
    return o->nranges == 0 ? OBJGC_RETIRE : OBJGC_KEEP;
}

bool objgc_orphan_eligible(const char *key, int64_t mtime_ms, const objgc_orphan_params *p,
                           int64_t now_ms)
{
    objfmt_kind kind;
    uint32_t node;
    int64_t created;
    return objfmt_parse_key(key, &kind, &node, &created) == 0 && node == p->node_id &&
           now_ms - mtime_ms >= p->min_age_ms;
}

bool objgc_orphan_confirmed(const objreg_keys *prev, const char *key)
{
    return objreg_keys_has(prev, key);
}

/* Candidates of one listing page. */
static void page_candidates(const objstore_list_page *page, const objgc_orphan_params *p,
                            int64_t now_ms, objgc_known_fn known, void *arg, objreg_keys *cands)
{
    for (size_t i = 0; i < page->n; i++) {
        const objstore_entry *e = &page->entries[i];
        if (!objgc_orphan_eligible(e->key, e->mtime_ms, p, now_ms) || known(arg, e->key) != 0)
            continue;
        if (objreg_keys_push(cands, e->key) != 0)
            SK_WARN("objgc", "no memory for orphan candidate %s", e->key);
    }
}

static int list_candidates(objstore *os, const objgc_orphan_params *p, int64_t now_ms,
                           objgc_known_fn known, void *arg, objreg_keys *cands)
{
    char *token = NULL;
    int rc;
    do {
        objstore_list_page page;
        rc = objstore_list_sync(os, "data/", token, LIST_PAGE, &page);
        free(token);
        token = NULL;
        if (rc != 0)
            break;
        page_candidates(&page, p, now_ms, known, arg, cands);
        token = page.next_token ? strdup(page.next_token) : NULL;
        objstore_list_page_free(&page);
    } while (token);
    return rc;
}

int objgc_orphans_pass(objstore *os, const objgc_orphan_params *p, int64_t now_ms,
                       objgc_known_fn known, void *arg, const objreg_keys *prev,
                       objreg_keys *cands, size_t *deleted)
{
    *deleted = 0;
    int rc = list_candidates(os, p, now_ms, known, arg, cands);
    /* The registry was asked again for every candidate above: one confirmed
     * now was unknown in both passes. */
    for (size_t i = 0; i < cands->n; i++) {
        if (!objgc_orphan_confirmed(prev, cands->v[i]) ||
            objstore_delete_sync(os, cands->v[i]) != 0)
            continue;
        SK_INFO("objgc", "deleted orphan object %s", cands->v[i]);
        (*deleted)++;
    }
    return rc;
}
