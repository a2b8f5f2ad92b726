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

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_omap),
        cmocka_unit_test(test_filter),
        cmocka_unit_test(test_filter_compressed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
