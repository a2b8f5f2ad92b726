/*
 * cache_fx: the fixture of the WAL cache's lifetime tests (test_fetchref,
 * test_upcache; included by them, after cmocka.h): a node with no loop and
 * one topic "t" of `nparts` partitions, whose cache entries, once added, are
 * freed through counting_free so that a test can count them.
 *
 * Contract: test thread only. A test that removes the topic sets f->t to
 * NULL; cache_fx_teardown removes it otherwise.
 */
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "plog.h"
#include "sk_map.h"

typedef struct {
    sk_node n;
    sk_config cfg;
    sk_topic *t;
} fixture;

static int drops; /* cache entries freed through counting_free */

static __attribute__((unused)) void counting_free(sk_ref *ref)
{
    drops++;
    free(ref); /* the entry; its ref is its first member */
}

/* Evicts every entry the cache may let go of. */
static __attribute__((unused)) void evict_all(fixture *f)
{
    f->cfg.wal_cache_bytes = 0;
    f->n.store_applied = 1 << 30;
    sk_cache_evict(&f->n);
}

static __attribute__((unused)) int cache_fx_setup(void **state, int32_t nparts)
{
    fixture *f = calloc(1, sizeof *f);
    assert_non_null(f);
    f->n.cfg = &f->cfg;
    f->cfg.wal_cache_bytes = 1 << 20;
    f->n.topics_by_name = sk_map_new();
    f->n.topics_by_id = sk_map_new();
    assert_non_null(f->n.topics_by_name);
    assert_non_null(f->n.topics_by_id);
    kc_uuid id = {{7, 7}};
    sk_tconf conf;
    memset(&conf, 0, sizeof conf);
    f->t = sk_topic_new(&f->n, &id, "t", 1, nparts, 1, &conf, 10, SK_OWN_ACTIVE);
    assert_non_null(f->t);
    drops = 0;
    *state = f;
    return 0;
}

static __attribute__((unused)) int cache_fx_teardown(void **state)
{
    fixture *f = *state;
    if (f->t)
        sk_topic_remove(&f->n, f->t);
    sk_map_destroy(f->n.topics_by_name);
    sk_map_destroy(f->n.topics_by_id);
    free(f);
    return 0;
}
