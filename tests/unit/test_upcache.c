/*
 * upcache: the WAL cache's batches an upload job holds, and their lifetimes.
 *
 * Collect takes the batches whose DATA record starts in [from, to), in LSN
 * order (not LINK records', not those outside the range), up to a byte
 * count; a held batch evicted, dropped by compaction or whose topic is
 * deleted keeps its bytes until the job releases it, and is freed then,
 * exactly once; a second release does nothing; the cursor finds records by
 * LSN. And the size that starts an upload, which bounds what one holds
 * beyond the cache.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "meta.h"
#include "plog.h"
#include "tier.h"
#include "upcache.h"

#include "cache_fx.c"

static int setup(void **state)
{
    return cache_fx_setup(state, 2);
}

static int teardown(void **state)
{
    return cache_fx_teardown(state);
}

/* Appends a batch at `base` of partition `part`, its record at lsn. */
static sk_cbatch *add(fixture *f, int32_t part, int64_t base, wal_lsn lsn, uint32_t len,
                      bool linked)
{
    sk_part *p = f->t->parts[part];
    sk_cbatch *b = calloc(1, sizeof *b + len);
    assert_non_null(b);
    b->base = b->last = base;
    b->lsn = lsn;
    b->len = len;
    b->linked = linked;
    b->crc_checked = lsn % 200 == 0; /* as if validated on the way in */
    b->data = (uint8_t *)(b + 1);
    memset(b->data, (int)(lsn & 0xff), len);
    assert_true(sk_cache_add(&f->n, p, b));
    b->ref.drop = counting_free;
    p->next_offset = p->hw = base + 1;
    return b;
}

/* Records at LSN 100, 200, ... 600; the one at 400 is a LINK. */
static void six(fixture *f)
{
    for (int i = 0; i < 6; i++)
        add(f, i % 2, i / 2, (wal_lsn)(100 * (i + 1)), 50 + (uint32_t)i, i == 3);
}

static void check_bytes(const sk_upcache *c)
{
    for (size_t i = 0; i < c->n; i++)
        for (uint32_t k = 0; k < c->v[i].len; k++)
            assert_int_equal(c->v[i].data[k], (uint8_t)(c->v[i].lsn & 0xff));
}

static void test_upcache_collects_the_range(void **state)
{
    fixture *f = *state;
    six(f);
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 200, 600, UINT64_MAX, &c), 0);
    /* 200, 300, 500: not 100 (below), 400 (a LINK), 600 (the end) */
    assert_int_equal(c.n, 3);
    assert_int_equal(c.v[0].lsn, 200);
    assert_int_equal(c.v[1].lsn, 300);
    assert_int_equal(c.v[2].lsn, 500);
    assert_int_equal(c.v[0].part, 1);
    assert_int_equal(c.v[1].part, 0);
    /* whether validation checked the batch's CRC field goes with it */
    assert_true(c.v[0].crc_checked);
    assert_false(c.v[1].crc_checked);
    assert_memory_equal(c.v[0].id.b, f->t->id.b, 16);
    assert_int_equal(c.bytes, 51 + 52 + 54);
    assert_int_equal(sk_upcache_record_len(&c.v[0]), SK_DATA_HEADER + 51);
    /* the cursor, forward only */
    assert_null(sk_upcache_at(&c, 100));
    assert_int_equal(sk_upcache_at(&c, 200)->lsn, 200);
    assert_null(sk_upcache_at(&c, 250));
    assert_null(sk_upcache_at(&c, 400));
    assert_int_equal(sk_upcache_at(&c, 500)->lsn, 500);
    assert_null(sk_upcache_at(&c, 600));
    check_bytes(&c);
    sk_upcache_release(&c);
    assert_int_equal(drops, 0); /* still cached */
    assert_int_equal(f->n.cache_bytes, 50 + 51 + 52 + 53 + 54 + 55);
}

/* Evicted while held: out of the cache and its count at once, bytes kept,
 * freed by the release, once. */
static void test_upcache_evicted_lives_until_released(void **state)
{
    fixture *f = *state;
    six(f);
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 0, 1000, UINT64_MAX, &c), 0);
    assert_int_equal(c.n, 5);
    f->cfg.wal_cache_bytes = 0;
    f->n.store_applied = 1 << 30;
    sk_cache_evict(&f->n);
    assert_int_equal(f->n.cache_bytes, 0);
    assert_int_equal(drops, 1); /* the LINK's entry, not held */
    check_bytes(&c);
    sk_upcache_release(&c);
    assert_int_equal(drops, 6);
    sk_upcache_release(&c); /* again: nothing */
    assert_int_equal(drops, 6);
    assert_int_equal(c.n, 0);
}

/* The topic deleted while held: the same. */
static void test_upcache_topic_deleted_lives_until_released(void **state)
{
    fixture *f = *state;
    six(f);
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 0, 1000, UINT64_MAX, &c), 0);
    sk_topic_remove(&f->n, f->t);
    f->t = NULL;
    assert_int_equal(drops, 1);
    assert_null(f->n.cache_head);
    check_bytes(&c);
    sk_upcache_release(&c);
    assert_int_equal(drops, 6);
}

/* Compaction drops a partition's old batches while held: the same. */
static void test_upcache_dropped_lives_until_released(void **state)
{
    fixture *f = *state;
    six(f);
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 0, 1000, UINT64_MAX, &c), 0);
    f->n.store_applied = 1 << 30;
    sk_cache_drop_below(&f->n, f->t->parts[0], 100);
    assert_int_equal(f->t->parts[0]->cq_len, 0);
    assert_int_equal(drops, 0);
    check_bytes(&c);
    sk_upcache_release(&c);
    assert_int_equal(drops, 3); /* partition 0's: 100, 300, 500 */
}

/* At most max_bytes, the batch that crosses it included. */
static void test_upcache_max_bytes(void **state)
{
    fixture *f = *state;
    six(f);
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 0, 1000, 51, &c), 0);
    assert_int_equal(c.n, 2); /* 50 bytes, then 51 crossing it */
    assert_int_equal(c.bytes, 101);
    sk_upcache_release(&c);
    assert_int_equal(sk_upcache_collect(&f->n, 0, 1000, 0, &c), 0);
    assert_int_equal(c.n, 0);
    sk_upcache_release(&c);
    assert_int_equal(drops, 0);
}

/* An empty cache, an empty range. */
static void test_upcache_empty(void **state)
{
    fixture *f = *state;
    sk_upcache c;
    assert_int_equal(sk_upcache_collect(&f->n, 0, 1000, UINT64_MAX, &c), 0);
    assert_int_equal(c.n, 0);
    assert_null(sk_upcache_at(&c, 0));
    sk_upcache_release(&c);
    six(f);
    assert_int_equal(sk_upcache_collect(&f->n, 300, 300, UINT64_MAX, &c), 0);
    assert_int_equal(c.n, 0);
    sk_upcache_release(&c);
}

/* The size that starts an upload: a quarter of the cache, so that an upload
 * in flight holds at most that much beyond it; never under 64 MiB (a small
 * cache does not make uploads tiny), never over s3.wal.upload.threshold. */
static void test_upload_trigger(void **state)
{
    (void)state;
    const uint64_t MiB = 1 << 20;
    sk_config cfg = {.wal_cache_bytes = 256 * MiB, .s3_upload_threshold = 500 * MiB};
    assert_int_equal(sk_tier_upload_trigger(&cfg), 64 * MiB);
    cfg.wal_cache_bytes = 1024 * MiB;
    assert_int_equal(sk_tier_upload_trigger(&cfg), 256 * MiB);
    cfg.wal_cache_bytes = 4096 * MiB;
    assert_int_equal(sk_tier_upload_trigger(&cfg), 500 * MiB);
    cfg.wal_cache_bytes = 0;
    assert_int_equal(sk_tier_upload_trigger(&cfg), SK_UPLOAD_TRIGGER_MIN);
    cfg.wal_cache_bytes = 100 * MiB;
    assert_int_equal(sk_tier_upload_trigger(&cfg), SK_UPLOAD_TRIGGER_MIN);
    cfg.s3_upload_threshold = 8 * MiB;
    assert_int_equal(sk_tier_upload_trigger(&cfg), 8 * MiB);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_upcache_collects_the_range, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upcache_evicted_lives_until_released, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upcache_topic_deleted_lives_until_released, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upcache_dropped_lives_until_released, setup,
                                        teardown),
        cmocka_unit_test_setup_teardown(test_upcache_max_bytes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_upcache_empty, setup, teardown),
        cmocka_unit_test(test_upload_trigger),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
