/* broker/cleaner and kb_filter: the offset map of compaction, and the
 * rewrite of a batch without some of its records (offsets kept, delete
 * horizon set with timestamps unchanged, codecs). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "s3sink_fx.c"

#include "cleaner.h"
#include "kbatch.h"
#include "sk_crc32c.h"
#include "sk_err.h"

static void test_omap(void **state)
{
    (void)state;
    sk_omap *m = sk_omap_new(64 * SK_CLEAN_MAP_ENTRY);
    assert_non_null(m);
    assert_int_equal(sk_omap_get(m, (const uint8_t *)"a", 1), -1);
    sk_omap_put(m, (const uint8_t *)"a", 1, 5);
    sk_omap_put(m, (const uint8_t *)"b", 1, 6);
    sk_omap_put(m, (const uint8_t *)"a", 1, 9); /* a later record of the key wins */
    assert_int_equal(sk_omap_get(m, (const uint8_t *)"a", 1), 9);
    assert_int_equal(sk_omap_get(m, (const uint8_t *)"b", 1), 6);
    assert_int_equal(sk_omap_get(m, (const uint8_t *)"", 0), -1);
    /* 90% of 64 slots: 58 keys fit, 2 are in already. */
    assert_true(sk_omap_room(m, 56));
    assert_false(sk_omap_room(m, 57));
    char k[16];
    for (int i = 0; i < 56; i++) {
        int n = snprintf(k, sizeof k, "key-%d", i);
        sk_omap_put(m, (const uint8_t *)k, (size_t)n, 100 + i);
    }
    for (int i = 0; i < 56; i++) {
        int n = snprintf(k, sizeof k, "key-%d", i);
        assert_int_equal(sk_omap_get(m, (const uint8_t *)k, (size_t)n), 100 + i);
    }
    assert_false(sk_omap_room(m, 1));
    sk_omap_destroy(m);
    assert_null(sk_omap_new(8)); /* too small to hold anything */
}

#define BASE_TS 1700000000000LL

/* keys a, b, a, c(tombstone) at offsets 100..103, timestamps BASE_TS + 10 i. */
static size_t four_records(uint8_t *buf, size_t cap)
{
    kb_build_rec r[4] = {
        {{(const uint8_t *)"a", 1}, {(const uint8_t *)"1", 1}, BASE_TS},
        {{(const uint8_t *)"b", 1}, {(const uint8_t *)"2", 1}, BASE_TS + 10},
        {{(const uint8_t *)"a", 1}, {(const uint8_t *)"3", 1}, BASE_TS + 20},
        {{(const uint8_t *)"c", 1}, {NULL, -1}, BASE_TS + 30},
    };
    int64_t n = kb_build(buf, cap, r, 4, 7, 1, 0, 0);
    assert_true(n > 0);
    kb_set_base_offset(buf, 100);
    return (size_t)n;
}

static bool drop_first_a(void *arg, const kb_record *r)
{
    (void)arg;
    return r->offset != 100;
}

static bool drop_all(void *arg, const kb_record *r)
{
    (void)arg;
    (void)r;
    return false;
}

struct seen {
    int n;
    int64_t off[4], ts[4];
    char key[4];
};

static int collect(void *arg, const kb_record *r)
{
    struct seen *s = arg;
    s->off[s->n] = r->offset;
    s->ts[s->n] = r->timestamp;
    s->key[s->n] = (char)r->key.p[0];
    s->n++;
    return 0;
}

static void check_kept(const uint8_t *nb, size_t nlen, bool horizon)
{
    kb_header h;
    assert_int_equal(kb_parse_header(nb, nlen, &h), 0);
    assert_int_equal(h.base_offset, 100);
    assert_int_equal(h.last_offset_delta, 3); /* consumers still advance past 103 */
    assert_int_equal(h.records_count, 3);
    assert_int_equal(h.producer_id, 7);
    assert_int_equal(h.max_timestamp, BASE_TS + 30);
    assert_int_equal((h.attributes & KB_ATTR_DELETE_HORIZON) != 0, horizon);
    if (horizon)
        assert_int_equal(h.base_timestamp, BASE_TS + 5000);
    assert_int_equal(nlen, (size_t)h.batch_length + 12);
    assert_int_equal(h.crc, sk_crc32c(nb + 21, nlen - 21)); /* the CRC covers the rewrite */
    struct seen s = {0};
    assert_int_equal(kb_foreach_record(nb, nlen, 0, collect, &s), 0);
    assert_int_equal(s.n, 3);
    int64_t want_off[3] = {101, 102, 103};
    char want_key[3] = {'b', 'a', 'c'};
    for (int i = 0; i < 3; i++) {
        assert_int_equal(s.off[i], want_off[i]);
        assert_int_equal(s.ts[i], BASE_TS + 10 * (i + 1)); /* timestamps stay */
        assert_int_equal(s.key[i], want_key[i]);
    }
}

static void test_filter(void **state)
{
    (void)state;
    uint8_t buf[512], *nb;
    size_t len = four_records(buf, sizeof buf), nlen;
    int32_t kept;
    assert_int_equal(kb_filter(buf, len, drop_first_a, NULL, -1, &nb, &nlen, &kept), 0);
    assert_int_equal(kept, 3);
    check_kept(nb, nlen, false);
    /* With a delete horizon: baseTimestamp is the horizon, deltas rebased. */
    uint8_t *nb2;
    size_t nlen2;
    assert_int_equal(kb_filter(nb, nlen, drop_all, NULL, -1, &nb2, &nlen2, &kept), 0);
    assert_int_equal(kept, 0);
    kb_header h;
    assert_int_equal(kb_parse_header(nb2, nlen2, &h), 0);
    assert_int_equal(h.records_count, 0); /* an empty batch keeps its offsets */
    assert_int_equal(h.base_offset, 100);
    assert_int_equal(h.last_offset_delta, 3);
    free(nb2);
    free(nb);
    assert_int_equal(kb_filter(buf, len, drop_first_a, NULL, BASE_TS + 5000, &nb, &nlen, &kept),
                     0);
    check_kept(nb, nlen, true);
    /* Filtering it again keeps the horizon and the timestamps. */
    assert_int_equal(kb_filter(nb, nlen, drop_first_a, NULL, -1, &nb2, &nlen2, &kept), 0);
    check_kept(nb2, nlen2, true);
    free(nb2);
    free(nb);
}

/* A compressed batch is rewritten in its codec. */
static void test_filter_compressed(void **state)
{
    (void)state;
    uint8_t buf[512], *z, *nb;
    size_t len = four_records(buf, sizeof buf), zlen, nlen;
    assert_int_equal(kb_recompress(buf, len, KB_CODEC_ZSTD, 3, 0, &z, &zlen), 0);
    kb_set_base_offset(z, 100);
    int32_t kept;
    assert_int_equal(kb_filter(z, zlen, drop_first_a, NULL, -1, &nb, &nlen, &kept), 0);
    kb_header h;
    assert_int_equal(kb_parse_header(nb, nlen, &h), 0);
    assert_int_equal(h.attributes & KB_ATTR_CODEC_MASK, KB_CODEC_ZSTD);
    check_kept(nb, nlen, false);
    free(nb);
    free(z);
    /* Garbage records are refused, not trusted. */
    uint8_t bad[512];
    memcpy(bad, buf, len);
    bad[len - 3] ^= 0x7f;
    bad[len - 2] = 0xff;
    int rc = kb_filter(bad, len, drop_first_a, NULL, -1, &nb, &nlen, &kept);
    if (rc == 0)
        free(nb);
    else
        assert_int_equal(rc, SK_ERR_PARSE);
}

/* ---- a pass over objects ---- */

#define STREAM 7
#define NOW 1800000000000LL

/* Batches of 4 records each, keys k<offset % nkeys>, values "v<offset>"; the record at
 * offset 20 is a tombstone of k2. One object per `per` batches. */
static void put_log(fx *f, int nbatches, int per, int nkeys, objreg_object *objs, int *nobjs)
{
    *nobjs = 0;
    for (int o = 0; o < nbatches / per; o++) {
        objup_set *s = objup_set_new(0);
        for (int bi = o * per; bi < (o + 1) * per; bi++) {
            char keys[4][16], vals[4][16]; /* room for any int */
            kb_build_rec r[4];
            for (int i = 0; i < 4; i++) {
                int off = bi * 4 + i;
                snprintf(keys[i], sizeof keys[i], "k%d", off % nkeys);
                snprintf(vals[i], sizeof vals[i], "v%d", off);
                r[i] = (kb_build_rec){{(const uint8_t *)keys[i], (int32_t)strlen(keys[i])},
                                      {(const uint8_t *)vals[i], (int32_t)strlen(vals[i])},
                                      NOW - 100000};
                if (off == 20)
                    r[i].value = (kc_bytes){NULL, -1};
            }
            uint8_t buf[512];
            int64_t n = kb_build(buf, sizeof buf, r, 4, -1, -1, -1, 0);
            assert_true(n > 0);
            kb_set_base_offset(buf, bi * 4);
            objup_batch b = {STREAM, bi * 4, bi * 4 + 3, NOW - 100000, 4, (uint32_t)n, 0, false,
                             0};
            assert_int_equal(objup_set_add(s, &b, buf), 0);
        }
        objup_params p = {0, 256, 1};
        objreg_objects out = {0};
        assert_int_equal(objup_put(s, f->os, &p, &out), 0);
        assert_int_equal(out.n, 1);
        objs[(*nobjs)++] = out.v[0];
        free(out.v);
        objup_set_destroy(s);
    }
}

struct reg {
    objreg_object *objs;
    int n;
};

static int reg_live(void *arg, const char *key, objreg_range **ranges, size_t *n)
{
    struct reg *r = arg;
    for (int i = 0; i < r->n; i++)
        if (strcmp(r->objs[i].key, key) == 0) {
            *n = r->objs[i].nranges;
            *ranges = malloc(*n * sizeof **ranges);
            memcpy(*ranges, r->objs[i].ranges, *n * sizeof **ranges);
            return 0;
        }
    return SK_ERR_NOENT;
}

static void listing_of(const struct reg *r, objreg_info *infos)
{
    for (int i = 0; i < r->n; i++)
        infos[i] = (objreg_info){.kind = r->objs[i].kind, .size = r->objs[i].size,
                                 .created_ms = r->objs[i].created_ms, .delete_after_ms = -1,
                                 .nranges = r->objs[i].nranges};
    for (int i = 0; i < r->n; i++)
        snprintf(infos[i].key, sizeof infos[i].key, "%s", r->objs[i].key);
}

struct logrec {
    int n;
    int64_t off[64];
    char key[64][4];
    bool tomb[64];
};

static int add_rec(void *arg, const kb_record *r)
{
    struct logrec *l = arg;
    l->off[l->n] = r->offset;
    snprintf(l->key[l->n], sizeof l->key[0], "%.*s", (int)r->key.len, (const char *)r->key.p);
    l->tomb[l->n] = r->value.len < 0;
    l->n++;
    return 0;
}

/* Calls fn for every batch of object `key`, in the object's order. */
static void each_batch(fx *f, const char *key,
                       void (*fn)(void *arg, const objfmt_batch *b, const uint8_t *payload),
                       void *arg)
{
    uint8_t *data = NULL;
    size_t got = 0, nlen, nb;
    uint64_t size = 0, noff;
    objfmt_reader *rd = NULL;
    assert_int_equal(objstore_get_sync(f->os, key, 0, OBJSTORE_TO_END, NULL, &data, &got, &size),
                     0);
    assert_int_equal(objfmt_reader_from_tail(data, got, got, &rd, &noff, &nlen), 0);
    const objfmt_entry *bl = objfmt_reader_blocks(rd, &nb);
    for (size_t k = 0; k < nb; k++) {
        objfmt_iter it;
        objfmt_batch b;
        const uint8_t *pl;
        assert_int_equal(objfmt_iter_init(&it, &bl[k], data + bl[k].position, bl[k].size), 0);
        while (objfmt_iter_next(&it, &b, &pl) == 1)
            fn(arg, &b, pl);
    }
    objfmt_reader_destroy(rd);
    free(data);
}

static void log_batch(void *arg, const objfmt_batch *b, const uint8_t *payload)
{
    assert_int_equal(kb_foreach_record(payload, b->size, 0, add_rec, arg), 0);
}

/* The records of the objects, in order; checks that the stream's ranges
 * cover [0, end] without a hole. */
static void read_log(fx *f, const objreg_objects *o, int64_t end, struct logrec *l)
{
    l->n = 0;
    int64_t next = 0;
    for (size_t i = 0; i < o->n; i++) {
        assert_int_equal(o->v[i].nranges, 1);
        assert_int_equal(o->v[i].ranges[0].start, next);
        next = (int64_t)o->v[i].ranges[0].end + 1;
        each_batch(f, o->v[i].key, log_batch, l);
    }
    assert_int_equal(next, end + 1);
}

static uint64_t max_bytes = 1 << 20;

static int run_pass(fx *f, struct reg *r, sk_clean_cand *c, uint64_t map_bytes, int64_t now,
                    objreg_objects *out, sk_clean_result *res)
{
    objreg_info infos[8];
    listing_of(r, infos);
    objcompact_env env = {f->os, reg_live, r, NULL, {0, 256, 1}, NULL, NULL};
    sk_clean_params p = {map_bytes, max_bytes, now};
    objreg_keys retired = {0};
    *out = (objreg_objects){0};
    int rc = sk_cleaner_run(&env, infos, (size_t)r->n, c, 1, &p, &retired, out, res);
    objreg_keys_free(&retired);
    return rc;
}

/* Two objects of 10 batches (offsets 0..79, keys k0..k5): one pass keeps the
 * latest of each key at its offset, with the stream covered without a hole;
 * the tombstone of k2 (offset 20) is not the latest of k2 and goes. */
static void test_pass_keeps_latest(void **state)
{
    fx *f = *state;
    objreg_object objs[2];
    int n;
    put_log(f, 20, 10, 6, objs, &n);
    struct reg r = {objs, n};
    sk_clean_cand c = {STREAM, INT64_MAX, NULL, 0, 0, -1, 1000, 0, INT64_MAX, 0.5};
    objreg_objects out;
    sk_clean_result res;
    assert_int_equal(run_pass(f, &r, &c, 1 << 20, NOW, &out, &res), 0);
    assert_true(res.ran);
    assert_int_equal(res.clean_end, 80);
    assert_int_equal(res.records_removed, 80 - 6);
    struct logrec l;
    read_log(f, &out, 79, &l);
    assert_int_equal(l.n, 6);
    for (int i = 0; i < 6; i++) {
        assert_int_equal(l.off[i], 74 + i); /* k2 at 74, ..., k1 at 79 */
        assert_false(l.tomb[i]);
    }
    objreg_objects_free(&out);
    for (int i = 0; i < n; i++)
        free(objs[i].ranges);
}

/* A map of 16 slots holds 15 keys: over 24 distinct keys, the pass stops at
 * the first record that does not fit, in the middle of a batch, and keeps
 * everything from there. Then the tombstone's delete horizon. */
static void test_small_map_and_tombstone_horizon(void **state)
{
    fx *f = *state;
    objreg_object big[1];
    int nb;
    put_log(f, 6, 6, 1000, big, &nb);
    struct reg rb = {big, nb};
    sk_clean_cand c = {STREAM, INT64_MAX, NULL, 0, 0, -1, 1000, 0, INT64_MAX, 0.5};
    objreg_objects out;
    sk_clean_result res;
    assert_int_equal(run_pass(f, &rb, &c, 16 * SK_CLEAN_MAP_ENTRY, NOW, &out, &res), 0);
    assert_int_equal(res.clean_end, 15);
    assert_int_equal(res.records_removed, 0);
    objreg_objects_free(&out);
    free(big[0].ranges);

    objreg_object objs[1];
    int n;
    put_log(f, 6, 6, 6, objs, &n); /* offsets 0..23; k2's last record is the tombstone at 20 */
    struct reg r = {objs, n};
    /* A full map: the tombstone of k2 is the latest, kept with a horizon. */
    assert_int_equal(run_pass(f, &r, &c, 1 << 20, NOW, &out, &res), 0);
    assert_int_equal(res.horizon_ms, NOW + 1000);
    struct logrec l;
    read_log(f, &out, 23, &l);
    assert_int_equal(l.n, 6);
    assert_int_equal(l.off[2], 20);
    assert_true(l.tomb[2]);
    /* The next pass, after the horizon, removes it; offsets still covered. */
    struct reg r2 = {out.v, (int)out.n};
    c.clean_end = 24;
    c.horizon_ms = res.horizon_ms;
    objreg_objects out2;
    assert_int_equal(run_pass(f, &r2, &c, 1 << 20, NOW + 999, &out2, &res), 0);
    assert_false(res.ran); /* nothing dirty, the horizon not reached: no pass */
    objreg_objects_free(&out2);
    assert_int_equal(run_pass(f, &r2, &c, 1 << 20, NOW + 1000, &out2, &res), 0);
    assert_true(res.ran);
    read_log(f, &out2, 23, &l);
    assert_int_equal(l.n, 5);
    for (int i = 0; i < l.n; i++)
        assert_false(l.tomb[i]);
    assert_int_equal(res.horizon_ms, -1);
    objreg_objects_free(&out2);
    objreg_objects_free(&out);
    free(objs[0].ranges);
}

/* Objects beyond what one pass may read: the oldest first, then, once they
 * hold nothing dirty, a window from the first dirty object. */
static void test_window_past_the_oldest(void **state)
{
    fx *f = *state;
    objreg_object objs[3];
    int n;
    put_log(f, 30, 10, 6, objs, &n); /* offsets 0..39, 40..79, 80..119 */
    struct reg r = {objs, n};
    max_bytes = objs[0].size; /* one object a pass */
    sk_clean_cand c = {STREAM, INT64_MAX, NULL, 0, 0, -1, 1000, 0, INT64_MAX, 0.01};
    objreg_objects out;
    sk_clean_result res;
    assert_int_equal(run_pass(f, &r, &c, 1 << 20, NOW, &out, &res), 0);
    assert_true(res.ran);
    assert_int_equal(res.clean_end, 40); /* the oldest object */
    struct logrec l;
    read_log(f, &out, 39, &l);
    assert_int_equal(l.n, 6);
    objreg_objects_free(&out);
    c.clean_end = 40; /* the registry unchanged here: the oldest still holds nothing dirty */
    assert_int_equal(run_pass(f, &r, &c, 1 << 20, NOW, &out, &res), 0);
    assert_true(res.ran);
    assert_int_equal(res.clean_end, 80);
    assert_int_equal(out.n, 1);
    assert_int_equal(out.v[0].ranges[0].start, 40);
    assert_int_equal(out.v[0].ranges[0].end, 79);
    objreg_objects_free(&out);
    max_bytes = 1 << 20;
    for (int i = 0; i < n; i++)
        free(objs[i].ranges);
}

/* One batch at `off` into set s: keys (NULL: a commit marker of pid 5). */
static void put_batch(objup_set *s, int64_t off, const char *const *keys, int n, bool txn)
{
    char vals[4][8];
    kb_build_rec r[4];
    uint8_t ctl_key[4] = {0, 0, 0, 1}, ctl_val[6] = {0};
    int16_t attrs = txn ? KB_ATTR_TRANSACTIONAL : 0;
    if (!keys) {
        r[0] = (kb_build_rec){{ctl_key, 4}, {ctl_val, 6}, NOW - 100000};
        n = 1;
        attrs = KB_ATTR_TRANSACTIONAL | KB_ATTR_CONTROL;
    }
    for (int i = 0; keys && i < n; i++) {
        snprintf(vals[i], sizeof vals[i], "v%d", (int)off + i);
        r[i] = (kb_build_rec){{(const uint8_t *)keys[i], (int32_t)strlen(keys[i])},
                              {(const uint8_t *)vals[i], (int32_t)strlen(vals[i])},
                              NOW - 100000};
    }
    uint8_t buf[512];
    int64_t len = kb_build(buf, sizeof buf, r, n, txn || !keys ? 5 : -1, txn || !keys ? 0 : -1,
                           txn ? (int32_t)off : -1, attrs);
    assert_true(len > 0);
    kb_set_base_offset(buf, off);
    objup_batch b = {STREAM, off, off + n - 1, NOW - 100000, (uint32_t)n, (uint32_t)len,
                     0, false, 0};
    assert_int_equal(objup_set_add(s, &b, buf), 0);
}

static int count_records(void *arg, const kb_record *r)
{
    (void)r;
    (*(int *)arg)++;
    return 0;
}

struct markers {
    int n;
    int64_t *off;
};

static void marker_batch(void *arg, const objfmt_batch *b, const uint8_t *payload)
{
    struct markers *m = arg;
    kb_header h;
    assert_int_equal(kb_parse_header(payload, b->size, &h), 0);
    int recs = 0;
    assert_int_equal(kb_foreach_record(payload, b->size, 0, count_records, &recs), 0);
    if ((h.attributes & KB_ATTR_CONTROL) && recs > 0)
        m->off[m->n++] = h.base_offset;
}

/* The markers left in the objects: their offsets in off[], how many. */
static int markers_of(fx *f, const objreg_objects *o, int64_t *off)
{
    struct markers m = {0, off};
    for (size_t i = 0; i < o->n; i++)
        each_batch(f, o->v[i].key, marker_batch, &m);
    return m.n;
}

/* A committed transaction whose records later ones of their keys replaced
 * loses its marker: a delete horizon at the first pass, removal at the first
 * pass after it. The marker of a transaction with a record left stays. */
static void test_markers_of_emptied_transactions(void **state)
{
    fx *f = *state;
    static const char *const x[] = {"x"}, *const ab[] = {"a", "b"}, *const c1[] = {"c"},
                             *const y[] = {"y"};
    objup_set *s = objup_set_new(0);
    put_batch(s, 0, x, 1, false);
    put_batch(s, 1, ab, 2, true); /* transaction 1 */
    put_batch(s, 3, NULL, 0, false);
    put_batch(s, 4, ab, 2, false); /* replaces all of transaction 1 */
    put_batch(s, 6, c1, 1, true);  /* transaction 2: its record stays */
    put_batch(s, 7, NULL, 0, false);
    put_batch(s, 8, y, 1, false);
    objup_params p = {0, 256, 1};
    objreg_objects in = {0};
    assert_int_equal(objup_put(s, f->os, &p, &in), 0);
    objup_set_destroy(s);
    struct reg r = {in.v, (int)in.n};
    sk_clean_cand c = {STREAM, INT64_MAX, NULL, 0, 0, -1, 1000, 0, INT64_MAX, 0.1};
    objreg_objects out, out2;
    sk_clean_result res;
    int64_t mk[8];
    assert_int_equal(run_pass(f, &r, &c, 1 << 20, NOW, &out, &res), 0);
    assert_true(res.ran);
    assert_int_equal(res.horizon_ms, NOW + 1000);
    assert_int_equal(markers_of(f, &out, mk), 2); /* the first now has a horizon */
    struct reg r2 = {out.v, (int)out.n};
    c.clean_end = res.clean_end;
    c.horizon_ms = res.horizon_ms;
    assert_int_equal(run_pass(f, &r2, &c, 1 << 20, NOW + 1000, &out2, &res), 0);
    assert_true(res.ran);
    assert_int_equal(markers_of(f, &out2, mk), 1);
    assert_int_equal(mk[0], 7);
    struct logrec l;
    read_log(f, &out2, 8, &l); /* offsets still covered without a hole */
    objreg_objects_free(&out2);
    objreg_objects_free(&out);
    objreg_objects_free(&in);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_omap),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_filter_compressed),
        cmocka_unit_test_setup_teardown(test_pass_keeps_latest, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_small_map_and_tombstone_horizon, fx_setup,
                                        fx_teardown),
        cmocka_unit_test_setup_teardown(test_window_past_the_oldest, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_markers_of_emptied_transactions, fx_setup,
                                        fx_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
