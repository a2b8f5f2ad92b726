/* Partitions moving between logs (docs/cluster.md, "HANDOFF and ADOPT"):
 * the state codec of hstate.c (round trips, and truncated, flipped and
 * absurd input), the record heads of meta.c, the SQLite view applying
 * HANDOFF, ADOPT and DROP and reading a partition's state back
 * (store_handoff.c), on real view files fed the records the broker writes,
 * and the migration of a schema-2 view. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>
#include <ftw.h>
#include <sqlite3.h>

#include "groups.h"
#include "hstate.h"
#include "kbatch.h"
#include "meta.h"
#include "objfmt.h"
#include "pstate.h"
#include "sk_err.h"
#include "store.h"

/* ---- helpers ---- */

static kc_uuid uuid_of(uint8_t seed)
{
    kc_uuid id;
    for (int i = 0; i < 16; i++)
        id.b[i] = (uint8_t)(seed + i * 7);
    return id;
}

static sk_pbatch pbatch(int32_t first_seq, int64_t base, int64_t last, int64_t ts)
{
    sk_pbatch pb = {first_seq, sk_seq_add(first_seq, (int32_t)(last - base)), base, last, ts, 0};
    return pb;
}

/* A producer state as bytes (oldest batch first), to compare two states by
 * what they hold rather than by where their ring starts. */
static void assert_pstate_equal(const sk_pstate *a, const sk_pstate *b)
{
    sk_buf x, y;
    sk_buf_init(&x, 0);
    sk_buf_init(&y, 0);
    sk_pstate_put(&x, a);
    sk_pstate_put(&y, b);
    assert_int_equal(x.len, y.len);
    assert_memory_equal(x.data, y.data, x.len);
    sk_buf_free(&x);
    sk_buf_free(&y);
}

static void assert_batch_equal(const sk_hbatch *a, const sk_hbatch *b)
{
    assert_int_equal(a->log, b->log);
    assert_int_equal(a->lsn, b->lsn);
    assert_int_equal(a->len, b->len);
    assert_int_equal(a->base, b->base);
    assert_int_equal(a->last, b->last);
    assert_int_equal(a->max_ts, b->max_ts);
}

static void assert_range_equal(const sk_hrange *a, const sk_hrange *b)
{
    assert_int_equal(a->start, b->start);
    assert_int_equal(a->end, b->end);
    assert_int_equal(a->size, b->size);
    assert_int_equal(a->max_ts, b->max_ts);
    assert_int_equal(a->records, b->records);
}

/* A commit body of one group (groups.h). */
static void commit_body(sk_buf *b, const char *group, const sk_grec_ent *e, uint32_t n)
{
    sk_buf_init(b, 0);
    sk_grec_begin(b, SK_GREC_COMMIT, group, strlen(group), n);
    for (uint32_t i = 0; i < n; i++)
        sk_grec_put(b, SK_GREC_COMMIT, &e[i]);
    assert_false(sk_buf_failed(b));
}

static sk_grec_ent ent(const char *topic, int32_t part, int64_t off, int32_t epoch,
                       const char *meta, int64_t ts)
{
    sk_grec_ent e = {topic, strlen(topic), part, off, epoch, meta, strlen(meta), ts};
    return e;
}

static const sk_hobj *find_hobj(const sk_hstate *h, const char *key)
{
    for (uint32_t i = 0; i < h->nobjects; i++)
        if (h->objects[i].klen == strlen(key) &&
            memcmp(h->objects[i].key, key, h->objects[i].klen) == 0)
            return &h->objects[i];
    return NULL;
}

/* Highest virtual size of the process so far (kB): a decoder that believed
 * an absurd count would map gigabytes, even if it never touched them. */
static long vm_peak_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (sscanf(line, "VmPeak: %ld kB", &kb) == 1)
            break;
    if (f)
        fclose(f);
    return kb;
}

/* ---- a rich state, built by hand ---- */

typedef struct rich {
    sk_hstate h;
    sk_pstate prods[3];
    sk_hbatch batches[4];
    sk_hobj objs[2];
    sk_hrange ranges[5];
    sk_buf bodies[3];
    const uint8_t *groups[3];
    size_t glens[3];
} rich;

static void rich_build(rich *r)
{
    memset(r, 0, sizeof *r);
    sk_hstate *h = &r->h;
    h->id = uuid_of(3);
    h->part = 5;
    h->epoch = 9;
    h->stream = 77;
    h->log_start = 100;
    h->next_offset = 260;
    h->max_ts = 1700000000123;
    h->max_ts_base = 240;
    h->src_log = 11;
    h->src_lsn = 987654321;

    /* A ring that wrapped (seven batches pushed), one with LogAppendTime
     * timestamps, one without batches. */
    r->prods[0].pid = 1000;
    for (int i = 0; i < 7; i++) {
        sk_pbatch pb = pbatch(i * 10, 100 + i * 10, 109 + i * 10, -1);
        sk_pstate_push(&r->prods[0], 3, &pb);
    }
    r->prods[0].last_ts = 1700000000001;
    r->prods[1].pid = 2000;
    sk_pbatch a = pbatch(INT32_MAX - 1, 200, 203, 1700000000050);
    sk_pbatch b = pbatch(2, 204, 204, 1700000000060);
    sk_pstate_push(&r->prods[1], 0, &a);
    sk_pstate_push(&r->prods[1], 0, &b);
    r->prods[2].pid = 3000;
    r->prods[2].epoch = 5;
    h->nproducers = 3;
    h->producers = r->prods;

    /* Batches of two logs. */
    for (int i = 0; i < 4; i++)
        r->batches[i] = (sk_hbatch){i < 2 ? 11 : 22, 4096u + (uint64_t)i * 1000, 300u + (uint32_t)i,
                                    220 + i * 10, 229 + i * 10, 1700000000100 + i};
    h->nbatches = 4;
    h->batches = r->batches;

    /* A StreamSetObject other streams share, and a StreamObject. */
    r->ranges[0] = (sk_hrange){100, 129, 5000, 1700000000010, 30};
    r->ranges[1] = (sk_hrange){130, 149, 3000, 1700000000020, 20};
    r->ranges[2] = (sk_hrange){150, 169, 3100, 1700000000030, 20};
    r->ranges[3] = (sk_hrange){170, 199, 4000, 1700000000040, 30};
    r->ranges[4] = (sk_hrange){200, 219, 2000, 1700000000045, 20};
    static const char k0[] = "sso/0/1700000000000-abc", k1[] = "so/77/170-def";
    r->objs[0] = (sk_hobj){k0, strlen(k0), OBJFMT_SSO, 65536, 1700000000000,
                           SK_HOBJ_SHARED, 3, &r->ranges[0]};
    r->objs[1] = (sk_hobj){k1, strlen(k1), OBJFMT_SO, 6000, 1700000000500, 0, 2,
                           &r->ranges[3]};
    h->nobjects = 2;
    h->objects = r->objs;
    h->nranges = 5;
    h->ranges = r->ranges;

    sk_grec_ent e1[] = {ent("orders", 0, 42, 3, "meta-a", 1700000000200),
                        ent("orders", 1, 43, -1, "", 1700000000201)};
    sk_grec_ent e2[] = {ent("payments", 7, 9000, 1, "x", 1700000000300)};
    sk_grec_ent e3[] = {ent("a", 0, 0, 0, "", 0), ent("b", 1, 1, 1, "m", 1),
                        ent("c", 2, 2, 2, "mm", 2)};
    commit_body(&r->bodies[0], "group-one", e1, 2);
    commit_body(&r->bodies[1], "group-two", e2, 1);
    commit_body(&r->bodies[2], "g3", e3, 3);
    for (int i = 0; i < 3; i++) {
        r->groups[i] = r->bodies[i].data;
        r->glens[i] = r->bodies[i].len;
    }
    h->ngroups = 3;
    h->groups = r->groups;
    h->group_lens = r->glens;
}

static void rich_free(rich *r)
{
    for (int i = 0; i < 3; i++)
        sk_buf_free(&r->bodies[i]);
}

static void encode(const sk_hstate *h, sk_buf *b)
{
    sk_buf_init(b, 0);
    sk_hstate_encode(b, h);
    assert_false(sk_buf_failed(b));
}

static void assert_hstate_equal(const sk_hstate *a, const sk_hstate *b)
{
    assert_memory_equal(a->id.b, b->id.b, 16);
    assert_int_equal(a->part, b->part);
    assert_int_equal(a->epoch, b->epoch);
    assert_int_equal(a->stream, b->stream);
    assert_int_equal(a->log_start, b->log_start);
    assert_int_equal(a->next_offset, b->next_offset);
    assert_int_equal(a->max_ts, b->max_ts);
    assert_int_equal(a->max_ts_base, b->max_ts_base);
    assert_int_equal(a->src_log, b->src_log);
    assert_int_equal(a->src_lsn, b->src_lsn);
    assert_int_equal(a->nproducers, b->nproducers);
    for (uint32_t i = 0; i < a->nproducers; i++)
        assert_pstate_equal(&a->producers[i], &b->producers[i]);
    assert_int_equal(a->nbatches, b->nbatches);
    for (uint32_t i = 0; i < a->nbatches; i++)
        assert_batch_equal(&a->batches[i], &b->batches[i]);
    assert_int_equal(a->nobjects, b->nobjects);
    for (uint32_t i = 0; i < a->nobjects; i++) {
        const sk_hobj *x = &a->objects[i], *y = &b->objects[i];
        assert_int_equal(x->klen, y->klen);
        assert_memory_equal(x->key, y->key, x->klen);
        assert_int_equal(x->kind, y->kind);
        assert_int_equal(x->size, y->size);
        assert_int_equal(x->created_ms, y->created_ms);
        assert_int_equal(x->flags, y->flags);
        assert_int_equal(x->nranges, y->nranges);
        for (uint32_t k = 0; k < x->nranges; k++)
            assert_range_equal(&x->ranges[k], &y->ranges[k]);
    }
    assert_int_equal(a->ngroups, b->ngroups);
    for (uint32_t i = 0; i < a->ngroups; i++) {
        assert_int_equal(a->group_lens[i], b->group_lens[i]);
        assert_memory_equal(a->groups[i], b->groups[i], a->group_lens[i]);
    }
}

/* What any successful decode must hold: every pointer inside the input or
 * the state's own arrays, and the input is exactly the state's encoding. */
static void assert_decoded_sane(const uint8_t *in, size_t n, const sk_hstate *h)
{
    uint64_t nr = 0;
    for (uint32_t i = 0; i < h->nobjects; i++) {
        const sk_hobj *o = &h->objects[i];
        assert_true((const uint8_t *)o->key >= in && (const uint8_t *)o->key + o->klen <= in + n);
        assert_true(o->ranges >= h->ranges && o->ranges + o->nranges <= h->ranges + h->nranges);
        nr += o->nranges;
    }
    assert_int_equal(nr, h->nranges);
    for (uint32_t i = 0; i < h->ngroups; i++)
        assert_true(h->groups[i] >= in && h->groups[i] + h->group_lens[i] <= in + n);
    for (uint32_t i = 0; i < h->nproducers; i++)
        assert_true(h->producers[i].n <= SK_PSTATE_BATCHES);
    sk_buf again;
    encode(h, &again);
    assert_int_equal(again.len, n);
    assert_memory_equal(again.data, in, n);
    sk_buf_free(&again);
}

/* Decodes a copy of exactly n bytes (so that ASan sees any read past them). */
static int decode_copy(const uint8_t *p, size_t n, size_t flip_at, uint8_t mask)
{
    uint8_t *c = malloc(n ? n : 1);
    assert_non_null(c);
    memcpy(c, p, n);
    if (flip_at < n)
        c[flip_at] ^= mask;
    sk_hstate h;
    int rc = sk_hstate_decode(c, n, &h);
    assert_true(rc == 0 || rc == SK_ERR_CORRUPT);
    if (rc == 0) {
        assert_decoded_sane(c, n, &h);
        sk_hstate_free(&h);
    } else {
        assert_null(h.producers);
        assert_null(h.batches);
        assert_null(h.objects);
        assert_null(h.ranges);
        assert_null(h.groups);
    }
    free(c);
    return rc;
}

/* ---- hstate codec ---- */

static void test_roundtrip_rich(void **state)
{
    (void)state;
    rich r;
    rich_build(&r);
    sk_buf b;
    encode(&r.h, &b);
    sk_hstate d;
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), 0);
    assert_hstate_equal(&r.h, &d);
    /* The wrapped ring still holds the newest five, oldest first. */
    assert_int_equal(d.producers[0].n, 5);
    assert_int_equal(d.producers[0].epoch, 3);
    assert_int_equal(sk_pstate_newest(&d.producers[0])->base, 160);
    assert_int_equal(sk_pstate_newest(&d.producers[1])->first_seq, 2);
    /* Strings are borrowed from the input, ranges are one array. */
    assert_true((const uint8_t *)d.objects[0].key > b.data &&
                (const uint8_t *)d.objects[0].key < b.data + b.len);
    assert_ptr_equal(d.objects[1].ranges, d.ranges + 3);
    assert_decoded_sane(b.data, b.len, &d);
    sk_hstate_free(&d);
    assert_null(d.producers);
    assert_int_equal(d.nobjects, 0);
    sk_buf_free(&b);
    rich_free(&r);
}

static void assert_roundtrip(const sk_hstate *h)
{
    sk_buf b;
    encode(h, &b);
    sk_hstate d;
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), 0);
    assert_hstate_equal(h, &d);
    sk_hstate_free(&d);
    sk_buf_free(&b);
}

/* Many entries of the smallest size, each list last in its state: the
 * decoder's caps on counts must not refuse a state that is really there. */
static void test_roundtrip_minimal_entries(void **state)
{
    (void)state;
    enum { N = 20 };
    sk_pstate prods[N];
    sk_hbatch batches[N];
    sk_hobj objs[N];
    sk_hrange ranges[N];
    const uint8_t *groups[N];
    size_t glens[N];
    memset(prods, 0, sizeof prods);
    memset(batches, 0, sizeof batches);
    memset(objs, 0, sizeof objs);
    memset(ranges, 0, sizeof ranges);
    for (int i = 0; i < N; i++) {
        prods[i].pid = i;
        batches[i].log = 1;
        objs[i].key = "";
        ranges[i] = (sk_hrange){(uint64_t)i, (uint64_t)i, 1, 0, 1};
        groups[i] = (const uint8_t *)"";
        glens[i] = 0;
    }
    sk_hstate h = {.id = uuid_of(1), .nproducers = N, .producers = prods};
    assert_roundtrip(&h);
    h = (sk_hstate){.id = uuid_of(1), .nbatches = N, .batches = batches};
    assert_roundtrip(&h);
    h = (sk_hstate){.id = uuid_of(1), .nobjects = N, .objects = objs};
    assert_roundtrip(&h);
    /* One object with every range. */
    objs[0].nranges = N;
    objs[0].ranges = ranges;
    h = (sk_hstate){.id = uuid_of(1), .nobjects = 1, .objects = objs, .nranges = N,
                    .ranges = ranges};
    assert_roundtrip(&h);
    h = (sk_hstate){.id = uuid_of(1), .ngroups = N, .groups = groups, .group_lens = glens};
    assert_roundtrip(&h);
}

static void test_roundtrip_empty(void **state)
{
    (void)state;
    sk_hstate h = {.id = uuid_of(2), .part = 0, .log_start = 7, .next_offset = 7, .max_ts = -1,
                   .max_ts_base = -1};
    assert_roundtrip(&h);
}

static void test_truncated_everywhere(void **state)
{
    (void)state;
    rich r;
    rich_build(&r);
    sk_buf b;
    encode(&r.h, &b);
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(decode_copy(b.data, n, SIZE_MAX, 0), SK_ERR_CORRUPT);
    assert_int_equal(decode_copy(b.data, b.len, SIZE_MAX, 0), 0);
    /* One byte too many is as corrupt as one too few. */
    sk_buf_u8(&b, 0);
    assert_int_equal(decode_copy(b.data, b.len, SIZE_MAX, 0), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    rich_free(&r);
}

static void test_flipped_everywhere(void **state)
{
    (void)state;
    rich r;
    rich_build(&r);
    sk_buf b;
    encode(&r.h, &b);
    static const uint8_t masks[] = {0x01, 0x80, 0xff};
    int ok = 0, bad = 0;
    for (size_t i = 0; i < b.len; i++)
        for (size_t m = 0; m < sizeof masks; m++)
            if (decode_copy(b.data, b.len, i, masks[m]) == 0)
                ok++;
            else
                bad++;
    /* Both outcomes happen: flips in values decode, flips in counts and
     * lengths do not. */
    assert_true(ok > 0);
    assert_true(bad > 0);
    sk_buf_free(&b);
    rich_free(&r);
}

/* The fixed head of a state (through the source LSN), valid. */
static void head_only(sk_buf *b)
{
    sk_hstate h = {.id = uuid_of(4), .part = 1, .log_start = 0, .next_offset = 10};
    sk_buf_init(b, 0);
    sk_buf_u8(b, 1);
    sk_buf_put(b, h.id.b, 16);
    sk_buf_u32(b, 1);
    sk_buf_u32(b, 0);
    for (int i = 0; i < 7; i++)
        sk_buf_u64(b, i == 2 ? 10 : 0);
}

static void absurd(const char *what, uint32_t nprod, uint32_t nbatch, uint32_t nobj,
                   const uint8_t *tail, size_t tlen)
{
    sk_buf b;
    head_only(&b);
    sk_buf_u32(&b, nprod);
    if (nprod == 0)
        sk_buf_u32(&b, nbatch);
    if (nprod == 0 && nbatch == 0)
        sk_buf_u32(&b, nobj);
    sk_buf_put(&b, tail, tlen);
    /* A few hundred bytes more, so that a decoder trusting the count gets
     * some way into the entries. */
    for (int i = 0; i < 64; i++)
        sk_buf_u64(&b, 0x0101010101010101ull);
    long before = vm_peak_kb();
    sk_hstate h;
    int rc = sk_hstate_decode(b.data, b.len, &h);
    long grew = vm_peak_kb() - before;
    if (rc != SK_ERR_CORRUPT || grew > 64 * 1024)
        fail_msg("%s: rc %d, virtual size grew by %ld kB", what, rc, grew);
    assert_null(h.producers);
    assert_null(h.batches);
    sk_buf_free(&b);
}

static void test_absurd_counts(void **state)
{
    (void)state;
    absurd("producers", UINT32_MAX, 0, 0, NULL, 0);
    absurd("producers 2^26", 1u << 26, 0, 0, NULL, 0);
    absurd("batches", 0, UINT32_MAX, 0, NULL, 0);
    absurd("batches 2^26", 0, 1u << 26, 0, NULL, 0);
    absurd("objects", 0, 0, UINT32_MAX, NULL, 0);
    absurd("objects 2^26", 0, 0, 1u << 26, NULL, 0);
    /* One object whose range count, then whose key length, is absurd. */
    sk_buf t;
    sk_buf_init(&t, 0);
    sk_buf_str(&t, "k", 1);
    sk_buf_u8(&t, OBJFMT_SO);
    sk_buf_u64(&t, 1);
    sk_buf_u64(&t, 1);
    sk_buf_u8(&t, 0);
    sk_buf_u32(&t, 1u << 26);
    absurd("ranges", 0, 0, 1, t.data, t.len);
    t.len = 0;
    sk_buf_u32(&t, UINT32_MAX - 3);
    absurd("key length", 0, 0, 1, t.data, t.len);
    /* Groups: a count, then a body length. */
    t.len = 0;
    sk_buf_u32(&t, UINT32_MAX);
    absurd("groups", 0, 0, 0, t.data, t.len);
    t.len = 0;
    sk_buf_u32(&t, 1);
    sk_buf_u32(&t, UINT32_MAX);
    absurd("group length", 0, 0, 0, t.data, t.len);
    sk_buf_free(&t);
}

static void test_bad_head(void **state)
{
    (void)state;
    sk_hstate h = {.id = uuid_of(5), .part = 2, .log_start = 50, .next_offset = 60};
    sk_buf b;
    encode(&h, &b);
    sk_hstate d;
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), 0);
    sk_hstate_free(&d);
    b.data[0] = 3; /* an unknown version */
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    h.next_offset = 49; /* below the log start */
    encode(&h, &b);
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    h.next_offset = 60;
    h.part = -1;
    encode(&h, &b);
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    h.part = 2;
    h.log_start = -1;
    encode(&h, &b);
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    /* A producer ring of six batches, all of them there. */
    h.log_start = 50;
    sk_pstate ps = {.pid = 1};
    for (int i = 0; i < SK_PSTATE_BATCHES; i++) {
        sk_pbatch pb = pbatch(i, 50 + i, 50 + i, -1);
        sk_pstate_push(&ps, 0, &pb);
    }
    h.nproducers = 1;
    h.producers = &ps;
    encode(&h, &b);
    size_t n_at = 1 + 16 + 4 + 4 + 7 * 8 + 4 + 8 + 2 + 8;
    size_t batches_end = n_at + 1 + SK_PSTATE_BATCHES * 28;
    assert_int_equal(b.data[n_at], SK_PSTATE_BATCHES);
    assert_int_equal(sk_hstate_decode(b.data, b.len, &d), 0);
    sk_hstate_free(&d);
    sk_buf six;
    sk_buf_init(&six, 0);
    sk_buf_put(&six, b.data, batches_end);
    sk_buf_put(&six, b.data + batches_end - 28, 28);
    sk_buf_put(&six, b.data + batches_end, b.len - batches_end);
    six.data[n_at] = SK_PSTATE_BATCHES + 1;
    assert_int_equal(sk_hstate_decode(six.data, six.len, &d), SK_ERR_CORRUPT);
    sk_buf_free(&six);
    sk_buf_free(&b);
}

/* ---- the records (meta.c) ---- */

static void test_meta_records(void **state)
{
    (void)state;
    rich r;
    rich_build(&r);
    sk_buf state_b, b;
    encode(&r.h, &state_b);
    static const uint8_t kinds[] = {SK_META_HANDOFF, SK_META_ADOPT};
    for (int k = 0; k < 2; k++) {
        sk_buf_init(&b, 0);
        if (kinds[k] == SK_META_HANDOFF)
            sk_meta_handoff(&b, &r.h);
        else
            sk_meta_adopt(&b, &r.h);
        sk_meta m;
        assert_int_equal(sk_meta_decode(b.data, b.len, &m), 0);
        assert_int_equal(m.kind, kinds[k]);
        assert_ptr_equal(m.body, b.data + 2);
        assert_int_equal(m.body_len, state_b.len);
        assert_memory_equal(m.body, state_b.data, state_b.len);
        sk_buf_free(&b);
    }
    kc_uuid id = uuid_of(9);
    sk_buf_init(&b, 0);
    sk_meta_drop(&b, &id, 12);
    assert_int_equal(b.len, 2 + 16 + 4);
    sk_meta m;
    assert_int_equal(sk_meta_decode(b.data, b.len, &m), 0);
    assert_int_equal(m.kind, SK_META_DROP);
    assert_memory_equal(m.id.b, id.b, 16);
    assert_int_equal(m.part, 12);
    for (size_t n = 0; n < b.len; n++)
        assert_int_equal(sk_meta_decode(b.data, n, &m), SK_ERR_CORRUPT);
    sk_buf_u8(&b, 0);
    assert_int_equal(sk_meta_decode(b.data, b.len, &m), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    /* A kind this version does not know, and a head of another version. */
    sk_buf_init(&b, 0);
    sk_meta_head(&b, 0xee);
    assert_int_equal(sk_meta_decode(b.data, b.len, &m), SK_ERR_CORRUPT);
    b.data[0] = 2;
    b.data[1] = SK_META_HANDOFF;
    assert_int_equal(sk_meta_decode(b.data, b.len, &m), SK_ERR_CORRUPT);
    sk_buf_free(&b);
    sk_buf_free(&state_b);
    rich_free(&r);
}

/* ---- the view ---- */

#define LOG_A 11 /* the log ids of views A and B */
#define LOG_B 22
#define STREAM0 7 /* streams of the topic's partitions 0 and 1 */
#define STREAM1 8
#define PID0 1000
#define PID1 2000

typedef struct fx {
    char dir[64];
    char path_a[96], path_b[96];
    sk_store *a, *b;
    kc_uuid topic;
} fx;

static int setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    if (!f)
        return -1;
    strcpy(f->dir, "/tmp/skiff-test-hstate-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->path_a, sizeof f->path_a, "%s/a.db", f->dir);
    snprintf(f->path_b, sizeof f->path_b, "%s/b.db", f->dir);
    char why[256];
    f->a = sk_store_open(f->path_a, why, sizeof why);
    f->b = sk_store_open(f->path_b, why, sizeof why);
    f->topic = uuid_of(0x40);
    *state = f;
    return f->a && f->b ? 0 : -1;
}

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static int teardown(void **state)
{
    fx *f = *state;
    sk_store_close(f->a);
    sk_store_close(f->b);
    nftw(f->dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
    free(f);
    return 0;
}

/* Records for one transaction of a view, at consecutive LSNs of its log. */
typedef struct feed {
    sk_store_rec recs[32];
    size_t n;
    wal_lsn lsn;
} feed;

/* A META record as vlog.c hands it to the view. Returns its LSN. */
static wal_lsn feed_meta(feed *f, sk_buf *b)
{
    assert_false(sk_buf_failed(b));
    assert_true(f->n < sizeof f->recs / sizeof f->recs[0]);
    sk_store_rec *r = &f->recs[f->n++];
    assert_int_equal(sk_store_rec_parse(r, f->lsn, SK_WAL_META, b->data, (uint32_t)b->len), 0);
    sk_buf_free(b);
    f->lsn = r->end;
    return r->lsn;
}

/* What a DATA record put in the view. */
typedef struct applied {
    int32_t part;
    int64_t base, last, max_ts;
    wal_lsn lsn;
    uint32_t len;
} applied;

/* A DATA record of `count` records at `base`, as vlog.c's
 * sk_vlog_append_data hands it to the view: header fields from the batch,
 * the LSN where the record starts. */
static applied feed_data(feed *f, const kc_uuid *id, int32_t part, int64_t base, int32_t count,
                         int64_t max_ts, int64_t pid, int16_t epoch, int32_t seq)
{
    uint32_t len = KB_HEADER_SIZE + 40 + (uint32_t)count * 3;
    uint8_t *batch = calloc(1, len);
    assert_non_null(batch);
    /* Big-endian fields of the RecordBatch header (kbatch.h). */
    uint64_t fields[][2] = {{(uint64_t)base, 8},   {len - 12, 4},          {0, 4},
                            {2, 1},                {0, 4},                 {0, 2},
                            {(uint64_t)count - 1, 4}, {(uint64_t)max_ts - 5, 8},
                            {(uint64_t)max_ts, 8}, {(uint64_t)pid, 8},     {(uint64_t)epoch, 2},
                            {(uint64_t)seq, 4},    {(uint64_t)count, 4}};
    size_t at = 0;
    for (size_t i = 0; i < sizeof fields / sizeof fields[0]; i++)
        for (uint64_t k = 0; k < fields[i][1]; k++)
            batch[at++] = (uint8_t)(fields[i][0] >> (8 * (fields[i][1] - 1 - k)));
    assert_int_equal(at, KB_HEADER_SIZE);
    kb_header h;
    assert_int_equal(kb_parse_header(batch, len, &h), 0);
    assert_int_equal(h.base_offset, base);
    assert_int_equal(h.producer_id, pid);
    free(batch);
    assert_true(f->n < sizeof f->recs / sizeof f->recs[0]);
    sk_store_rec *r = &f->recs[f->n++];
    sk_store_rec_data(r, id, part, &h, len);
    r->lsn = f->lsn;
    r->end = f->lsn + WAL_RECORD_HEADER + SK_DATA_HEADER + len;
    f->lsn = r->end;
    return (applied){part, base, base + count - 1, max_ts, r->lsn, len};
}

static void feed_apply(sk_store *s, feed *f)
{
    assert_int_equal(sk_store_apply_sync(s, f->recs, f->n, f->lsn), 0);
    for (size_t i = 0; i < f->n; i++)
        sk_store_rec_free(&f->recs[i]);
    f->n = 0;
    assert_int_equal(sk_store_applied(s), f->lsn);
}

static void feed_group(feed *f, const char *group, const sk_grec_ent *e, uint32_t n)
{
    sk_buf body, b;
    commit_body(&body, group, e, n);
    sk_buf_init(&b, 0);
    sk_meta_group(&b, body.data, body.len);
    sk_buf_free(&body);
    feed_meta(f, &b);
}

static void feed_topic(feed *f, const kc_uuid *id, const char *name, int32_t nparts,
                       uint64_t first_stream)
{
    sk_topic t;
    memset(&t, 0, sizeof t);
    t.name = (char *)name;
    t.id = *id;
    t.nparts = nparts;
    t.replication_factor = 1;
    t.first_stream = first_stream;
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_topic_create(&b, &t);
    feed_meta(f, &b);
}

/* One integer out of a view file, read beside the store (-1: no row). */
static int64_t q1(const char *path, const char *sql)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open_v2(path, &db, SQLITE_OPEN_READONLY, NULL), SQLITE_OK);
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        fail_msg("%s: %s", sql, sqlite3_errmsg(db));
    int64_t v = -1;
    if (sqlite3_step(st) == SQLITE_ROW)
        v = sqlite3_column_type(st, 0) == SQLITE_NULL ? -2 : sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    sqlite3_close(db);
    return v;
}

static bool keep_named(void *arg, const char *group, size_t len)
{
    return strlen(arg) == len && memcmp(arg, group, len) == 0;
}

static bool keep_all(void *arg, const char *group, size_t len)
{
    (void)arg;
    (void)group;
    (void)len;
    return true;
}

typedef struct owned {
    int n;
    kc_uuid ids[8];
    int32_t parts[8];
} owned;

static void on_owned(void *arg, const kc_uuid *id, int32_t part)
{
    owned *o = arg;
    if (o->n < 8) {
        o->ids[o->n] = *id;
        o->parts[o->n] = part;
    }
    o->n++;
}

static owned owned_of(sk_store *s)
{
    owned o = {0};
    assert_int_equal(sk_store_owned_partitions(s, on_owned, &o), 0);
    return o;
}

/* View A as a node leaves it before a handoff: topic "t" with two
 * partitions, batches of an idempotent producer on each, an upload that put
 * the oldest into a StreamSetObject (both streams) and a StreamObject
 * (partition 0), newer batches still in the WAL, a log start moved, and the
 * commits of two groups. */
typedef struct scene {
    applied p0[7], p1[2];
    wal_lsn upload_end;
    sk_grec_ent keep[2], other[1];
} scene;

static const char SSO_KEY[] = "sso/1/1700000000000-aaaa";
static const char SO_KEY[] = "so/7/1700000000001-bbbb";

static void feed_objects(feed *f, const scene *sc)
{
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_objects_begin(&b, sc->upload_end, 2);
    sk_oobj sso = {SSO_KEY, strlen(SSO_KEY), OBJFMT_SSO, 9000, 1700000000000, 2};
    sk_meta_objects_obj(&b, &sso);
    sk_orange r0 = {STREAM0, 0, 4, sc->p0[0].len + sc->p0[1].len, sc->p0[1].max_ts, 5};
    sk_orange r1 = {STREAM1, 0, 3, sc->p1[0].len, sc->p1[0].max_ts, 4};
    sk_meta_objects_range(&b, &r0);
    sk_meta_objects_range(&b, &r1);
    sk_oobj so = {SO_KEY, strlen(SO_KEY), OBJFMT_SO, 7000, 1700000000001, 2};
    sk_meta_objects_obj(&b, &so);
    sk_orange r2 = {STREAM0, 5, 7, sc->p0[2].len, sc->p0[2].max_ts, 3};
    sk_orange r3 = {STREAM0, 8, 9, sc->p0[3].len, sc->p0[3].max_ts, 2};
    sk_meta_objects_range(&b, &r2);
    sk_meta_objects_range(&b, &r3);
    sk_meta_objects_retired(&b, 0);
    feed_meta(f, &b);
}

static void fill_a(fx *f, scene *sc)
{
    feed fd = {.lsn = 4096};
    const kc_uuid *t = &f->topic;
    feed_topic(&fd, t, "t", 2, STREAM0);
    sc->keep[0] = ent("t", 0, 3, 1, "m-a", 111);
    sc->keep[1] = ent("t", 1, 5, 1, "", 112);
    sc->other[0] = ent("t", 0, 2, 0, "m-o", 113);
    feed_group(&fd, "g-keep", sc->keep, 2);
    feed_group(&fd, "g-other", sc->other, 1);
    sc->p0[0] = feed_data(&fd, t, 0, 0, 3, 1000, PID0, 2, 0);
    sc->p0[1] = feed_data(&fd, t, 0, 3, 2, 1030, PID0, 2, 3);
    sc->p1[0] = feed_data(&fd, t, 1, 0, 4, 1040, PID1, 0, 0);
    /* The largest timestamp is in a batch that goes into objects. */
    sc->p0[2] = feed_data(&fd, t, 0, 5, 3, 99999, PID0, 2, 5);
    sc->p0[3] = feed_data(&fd, t, 0, 8, 2, 1080, PID0, 2, 8);
    feed_apply(f->a, &fd);
    sc->upload_end = fd.lsn;
    feed_objects(&fd, sc);
    sc->p0[4] = feed_data(&fd, t, 0, 10, 1, 1100, -1, -1, -1);
    sc->p0[5] = feed_data(&fd, t, 0, 11, 2, 1110, PID0, 2, 10);
    sc->p0[6] = feed_data(&fd, t, 0, 13, 2, 1130, PID0, 2, 12);
    sc->p1[1] = feed_data(&fd, t, 1, 4, 2, 1140, PID1, 0, 4);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_log_start(&b, t, 0, 3);
    feed_meta(&fd, &b);
    feed_apply(f->a, &fd);
}

/* The producer state partition 0 must have: the newest five of its six
 * idempotent batches. */
static sk_pstate expected_p0_producer(const scene *sc)
{
    sk_pstate ps;
    memset(&ps, 0, sizeof ps);
    ps.pid = PID0;
    static const int idem[] = {0, 1, 2, 3, 5, 6};
    static const int32_t seqs[] = {0, 3, 5, 8, 10, 12};
    for (int i = 0; i < 6; i++) {
        const applied *a = &sc->p0[idem[i]];
        sk_pbatch pb = pbatch(seqs[i], a->base, a->last, -1);
        sk_pstate_push(&ps, 2, &pb);
    }
    ps.last_ts = sc->p0[6].max_ts;
    return ps;
}

static void encode_state(sk_store *s, const kc_uuid *id, int32_t part, int64_t own_log,
                         sk_store_group_filter want, void *arg, sk_buf *out)
{
    sk_buf_init(out, 0);
    assert_int_equal(sk_store_encode_state(s, id, part, own_log, want, arg, out), 0);
    assert_false(sk_buf_failed(out));
}

/* The state of partition 0 in view A, as fill_a made it. */
static void assert_p0_state(const fx *f, const scene *sc, const sk_hstate *h)
{
    assert_memory_equal(h->id.b, f->topic.b, 16);
    assert_int_equal(h->part, 0);
    assert_int_equal(h->epoch, 0);
    assert_int_equal(h->stream, STREAM0);
    assert_int_equal(h->log_start, 3);
    assert_int_equal(h->next_offset, 15);
    assert_int_equal(h->max_ts, 99999);
    assert_int_equal(h->max_ts_base, 5);
    assert_int_equal(h->src_log, 0);
    assert_int_equal(h->src_lsn, 0);

    assert_int_equal(h->nproducers, 1);
    sk_pstate want = expected_p0_producer(sc);
    assert_pstate_equal(&h->producers[0], &want);
    assert_int_equal(h->producers[0].epoch, 2);
    assert_int_equal(h->producers[0].n, 5);

    /* Only the batches after the upload, in this log (named by its id). */
    assert_int_equal(h->nbatches, 3);
    for (int i = 0; i < 3; i++) {
        const applied *a = &sc->p0[4 + i];
        sk_hbatch x = {LOG_A, a->lsn, a->len, a->base, a->last, a->max_ts};
        assert_batch_equal(&h->batches[i], &x);
    }

    assert_int_equal(h->nobjects, 2);
    assert_int_equal(h->nranges, 3);
    const sk_hobj *sso = find_hobj(h, SSO_KEY), *so = find_hobj(h, SO_KEY);
    assert_non_null(sso);
    assert_non_null(so);
    assert_int_equal(sso->kind, OBJFMT_SSO);
    assert_int_equal(sso->size, 9000);
    assert_int_equal(sso->created_ms, 1700000000000);
    assert_int_equal(sso->flags, SK_HOBJ_SHARED); /* partition 1 still has a range in it */
    assert_int_equal(sso->nranges, 1);
    sk_hrange r0 = {0, 4, sc->p0[0].len + sc->p0[1].len, (int64_t)sc->p0[1].max_ts, 5};
    assert_range_equal(&sso->ranges[0], &r0);
    assert_int_equal(so->kind, OBJFMT_SO);
    assert_int_equal(so->size, 7000);
    assert_int_equal(so->created_ms, 1700000000001);
    assert_int_equal(so->flags, 0);
    assert_int_equal(so->nranges, 2);
    sk_hrange r2 = {5, 7, sc->p0[2].len, sc->p0[2].max_ts, 3};
    sk_hrange r3 = {8, 9, sc->p0[3].len, sc->p0[3].max_ts, 2};
    assert_range_equal(&so->ranges[0], &r2);
    assert_range_equal(&so->ranges[1], &r3);

    /* The kept group's whole commit, as one body. */
    assert_int_equal(h->ngroups, 1);
    sk_buf body;
    commit_body(&body, "g-keep", sc->keep, 2);
    assert_int_equal(h->group_lens[0], body.len);
    assert_memory_equal(h->groups[0], body.data, body.len);
    sk_buf_free(&body);
}

static void test_encode_state(void **state)
{
    fx *f = *state;
    scene sc;
    fill_a(f, &sc);
    sk_buf enc;
    encode_state(f->a, &f->topic, 0, LOG_A, keep_named, "g-keep", &enc);
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &h), 0);
    assert_p0_state(f, &sc, &h);
    sk_hstate_free(&h);
    sk_buf_free(&enc);
    /* Without a filter no group travels; an unknown partition has no state. */
    encode_state(f->a, &f->topic, 1, LOG_A, NULL, NULL, &enc);
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &h), 0);
    assert_int_equal(h.ngroups, 0);
    assert_int_equal(h.stream, STREAM1);
    assert_int_equal(h.nbatches, 1);
    assert_int_equal(h.nobjects, 1);
    sk_hstate_free(&h);
    sk_buf_free(&enc);
    sk_buf_init(&enc, 0);
    assert_int_equal(sk_store_encode_state(f->a, &f->topic, 2, LOG_A, NULL, NULL, &enc),
                     SK_ERR_NOENT);
    assert_int_equal(enc.len, 0);
    sk_buf_free(&enc);
}

/* Appends the HANDOFF of partition 0 to view A; returns its LSN and leaves
 * the state in *enc. */
static wal_lsn handoff_a(fx *f, sk_buf *enc)
{
    encode_state(f->a, &f->topic, 0, LOG_A, keep_named, "g-keep", enc);
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(enc->data, enc->len, &h), 0);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_handoff(&b, &h);
    sk_hstate_free(&h);
    feed fd = {.lsn = sk_store_applied(f->a)};
    wal_lsn at = feed_meta(&fd, &b);
    feed_apply(f->a, &fd);
    return at;
}

static char qbuf[512];
__attribute__((format(printf, 1, 2))) static const char *sqlf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(qbuf, sizeof qbuf, fmt, ap);
    va_end(ap);
    return qbuf;
}

static void test_handoff(void **state)
{
    fx *f = *state;
    scene sc;
    fill_a(f, &sc);
    sk_buf enc;
    wal_lsn at = handoff_a(f, &enc);
    sk_buf_free(&enc);
    const char *pa = f->path_a;

    /* Partition 0 is gone: row, producers, batches, ranges. */
    owned o = owned_of(f->a);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.parts[0], 1);
    sk_buf none;
    sk_buf_init(&none, 0);
    assert_int_equal(sk_store_encode_state(f->a, &f->topic, 0, LOG_A, NULL, NULL, &none),
                     SK_ERR_NOENT);
    sk_buf_free(&none);
    assert_int_equal(q1(pa, "SELECT count(*) FROM partitions WHERE part = 0"), 0);
    assert_int_equal(q1(pa, "SELECT count(*) FROM producers WHERE part = 0"), 0);
    assert_int_equal(q1(pa, "SELECT count(*) FROM batches WHERE part = 0"), 0);
    assert_int_equal(q1(pa, sqlf("SELECT count(*) FROM object_ranges WHERE stream = %d", STREAM0)),
                     0);
    sk_batch_loc locs[8];
    assert_int_equal(sk_store_read_batches(f->a, &f->topic, 0, 0, 1 << 20, locs, 8), 0);
    sk_obj_loc ol;
    assert_int_equal(sk_store_find_object(f->a, STREAM0, 0, &ol), 0);

    /* The StreamObject went with the partition: forgotten, not retired. */
    assert_int_equal(sk_store_object_known(f->a, SO_KEY), 0);
    /* The StreamSetObject stays, shared now, live, with partition 1's range. */
    assert_int_equal(sk_store_object_known(f->a, SSO_KEY), 1);
    assert_int_equal(q1(pa, sqlf("SELECT shared FROM objects WHERE key = '%s'", SSO_KEY)), 1);
    assert_int_equal(q1(pa, sqlf("SELECT delete_after FROM objects WHERE key = '%s'", SSO_KEY)),
                     -2);
    sk_orange *rs;
    size_t nr;
    assert_int_equal(sk_store_object_ranges(f->a, SSO_KEY, &rs, &nr), 0);
    assert_int_equal(nr, 1);
    assert_int_equal(rs[0].stream, STREAM1);
    free(rs);

    /* The kept group's offsets left with the partition, the other's stay. */
    assert_int_equal(q1(pa, "SELECT count(*) FROM group_offsets WHERE grp = 'g-keep'"), 0);
    assert_int_equal(q1(pa, "SELECT off FROM group_offsets WHERE grp = 'g-other'"), 2);

    wal_lsn lsn = 0;
    assert_int_equal(sk_store_handoff_lsn(f->a, &f->topic, 0, &lsn), 0);
    assert_int_equal(lsn, at);
    assert_int_equal(sk_store_handoff_lsn(f->a, &f->topic, 1, &lsn), SK_ERR_NOENT);

    /* Partition 1 is whole, and its state now says the SSO is shared even
     * though no other stream of this view has a range in it. */
    sk_buf e1;
    encode_state(f->a, &f->topic, 1, LOG_A, NULL, NULL, &e1);
    sk_hstate h1;
    assert_int_equal(sk_hstate_decode(e1.data, e1.len, &h1), 0);
    assert_int_equal(h1.next_offset, 6);
    assert_int_equal(h1.nproducers, 1);
    assert_int_equal(h1.producers[0].pid, PID1);
    assert_int_equal(h1.nbatches, 1);
    assert_int_equal(h1.batches[0].lsn, sc.p1[1].lsn);
    assert_int_equal(h1.nobjects, 1);
    assert_int_equal(h1.objects[0].flags, SK_HOBJ_SHARED);
    sk_hstate_free(&h1);
    sk_buf_free(&e1);
}

/* Appends the ADOPT of a state (as encoded by a view) to view s, with its
 * source set; returns its LSN. */
static wal_lsn adopt(sk_store *s, const sk_buf *enc, int64_t src_log, wal_lsn src_lsn)
{
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(enc->data, enc->len, &h), 0);
    h.src_log = src_log;
    h.src_lsn = src_lsn;
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_adopt(&b, &h);
    sk_hstate_free(&h);
    feed fd = {.lsn = sk_store_applied(s) ? sk_store_applied(s) : 1000000};
    wal_lsn at = feed_meta(&fd, &b);
    feed_apply(s, &fd);
    return at;
}

static void test_adopt(void **state)
{
    fx *f = *state;
    scene sc;
    fill_a(f, &sc);
    sk_buf enc;
    wal_lsn at = handoff_a(f, &enc);
    adopt(f->b, &enc, LOG_A, at);

    /* B gives back the same state: batches still in A's log. */
    sk_buf back;
    encode_state(f->b, &f->topic, 0, LOG_B, keep_all, NULL, &back);
    assert_int_equal(back.len, enc.len);
    assert_memory_equal(back.data, enc.data, enc.len);
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(back.data, back.len, &h), 0);
    assert_p0_state(f, &sc, &h);
    sk_hstate_free(&h);
    sk_buf_free(&back);

    owned o = owned_of(f->b);
    assert_int_equal(o.n, 1);
    assert_memory_equal(o.ids[0].b, f->topic.b, 16);
    assert_int_equal(o.parts[0], 0);

    /* Reads find the batches in A's log. */
    sk_batch_loc locs[8];
    assert_int_equal(sk_store_read_batches(f->b, &f->topic, 0, 10, 1 << 20, locs, 8), 3);
    for (int i = 0; i < 3; i++) {
        assert_int_equal(locs[i].log, LOG_A);
        assert_int_equal(locs[i].lsn, sc.p0[4 + i].lsn);
        assert_int_equal(locs[i].base, sc.p0[4 + i].base);
        assert_int_equal(locs[i].len, sc.p0[4 + i].len);
    }
    sk_batch_loc l;
    assert_int_equal(sk_store_find_offset(f->b, &f->topic, 0, 12, &l), 1);
    assert_int_equal(l.log, LOG_A);
    assert_int_equal(l.base, 11);
    assert_int_equal(l.lsn, sc.p0[5].lsn);
    assert_int_equal(sk_store_find_offset(f->b, &f->topic, 0, 15, &l), 0);

    /* And the older offsets in the objects. */
    sk_obj_loc ol;
    assert_int_equal(sk_store_find_object(f->b, STREAM0, 3, &ol), 1);
    assert_string_equal(ol.key, SSO_KEY);
    assert_int_equal(ol.start, 0);
    assert_int_equal(ol.end, 4);
    assert_int_equal(ol.obj_size, 9000);
    assert_int_equal(sk_store_find_object(f->b, STREAM0, 8, &ol), 1);
    assert_string_equal(ol.key, SO_KEY);
    assert_int_equal(ol.start, 8);
    assert_int_equal(ol.size, sc.p0[3].len);
    const char *pb = f->path_b;
    assert_int_equal(q1(pb, sqlf("SELECT shared FROM objects WHERE key = '%s'", SSO_KEY)), 1);
    assert_int_equal(q1(pb, sqlf("SELECT shared FROM objects WHERE key = '%s'", SO_KEY)), 0);
    assert_int_equal(q1(pb, "SELECT off FROM group_offsets WHERE grp = 'g-keep' AND part = 1"), 5);

    /* Nothing of B's own WAL is needed yet; then a batch appended here is. */
    wal_lsn min;
    assert_int_equal(sk_store_min_lsn(f->b, LOG_B, &min), 0);
    assert_int_equal(min, UINT64_MAX);
    feed fd = {.lsn = sk_store_applied(f->b)};
    applied local = feed_data(&fd, &f->topic, 0, 15, 4, 1200, PID0, 2, 14);
    feed_apply(f->b, &fd);
    assert_true(local.lsn > sc.p0[6].lsn);
    assert_int_equal(sk_store_min_lsn(f->b, LOG_B, &min), 0);
    assert_int_equal(min, local.lsn);
    assert_int_equal(sk_store_find_offset(f->b, &f->topic, 0, 16, &l), 1);
    assert_int_equal(l.log, 0);
    encode_state(f->b, &f->topic, 0, LOG_B, keep_all, NULL, &back);
    assert_int_equal(sk_hstate_decode(back.data, back.len, &h), 0);
    assert_int_equal(h.nbatches, 4);
    assert_int_equal(h.batches[2].log, LOG_A);
    assert_int_equal(h.batches[3].log, LOG_B);
    assert_int_equal(h.batches[3].lsn, local.lsn);
    assert_int_equal(h.next_offset, 19);
    assert_int_equal(sk_pstate_newest(&h.producers[0])->base, 15);
    sk_hstate_free(&h);
    sk_buf_free(&back);
    sk_buf_free(&enc);
}

static void test_drop(void **state)
{
    fx *f = *state;
    scene sc;
    fill_a(f, &sc);
    sk_buf enc;
    wal_lsn at = handoff_a(f, &enc);
    adopt(f->b, &enc, LOG_A, at);
    sk_buf_free(&enc);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_drop(&b, &f->topic, 0);
    feed fd = {.lsn = sk_store_applied(f->b)};
    feed_meta(&fd, &b);
    feed_apply(f->b, &fd);

    assert_int_equal(owned_of(f->b).n, 0);
    sk_buf_init(&b, 0);
    assert_int_equal(sk_store_encode_state(f->b, &f->topic, 0, LOG_B, NULL, NULL, &b),
                     SK_ERR_NOENT);
    sk_buf_free(&b);
    sk_batch_loc locs[4];
    assert_int_equal(sk_store_read_batches(f->b, &f->topic, 0, 0, 1 << 20, locs, 4), 0);
    sk_obj_loc ol;
    assert_int_equal(sk_store_find_object(f->b, STREAM0, 0, &ol), 0);
    assert_int_equal(q1(f->path_b, "SELECT count(*) FROM producers"), 0);
    /* Its objects stay registered without ranges, for the tier to retire. */
    assert_int_equal(sk_store_object_known(f->b, SO_KEY), 1);
    assert_int_equal(q1(f->path_b, "SELECT count(*) FROM object_ranges"), 0);
    wal_lsn lsn;
    assert_int_equal(sk_store_handoff_lsn(f->b, &f->topic, 0, &lsn), SK_ERR_NOENT);

    /* The topic is deleted later: A forgets that it handed the partition
     * off, and partition 1 goes too. */
    assert_int_equal(sk_store_handoff_lsn(f->a, &f->topic, 0, &lsn), 0);
    feed fa = {.lsn = sk_store_applied(f->a)};
    for (int32_t p = 0; p < 2; p++) {
        sk_buf_init(&b, 0);
        sk_meta_drop(&b, &f->topic, p);
        feed_meta(&fa, &b);
    }
    feed_apply(f->a, &fa);
    assert_int_equal(sk_store_handoff_lsn(f->a, &f->topic, 0, &lsn), SK_ERR_NOENT);
    assert_int_equal(owned_of(f->a).n, 0);
    assert_int_equal(q1(f->path_a, "SELECT count(*) FROM batches"), 0);
    assert_int_equal(q1(f->path_a, "SELECT count(*) FROM producers"), 0);
    assert_int_equal(sk_store_object_known(f->a, SSO_KEY), 1);
    assert_int_equal(q1(f->path_a, "SELECT count(*) FROM object_ranges"), 0);
}

/* B adopts, hands off, and adopts again: the second ADOPT clears the
 * handoff B had noted, and brings the state back whole. */
static void test_adopt_after_handoff(void **state)
{
    fx *f = *state;
    scene sc;
    fill_a(f, &sc);
    sk_buf enc;
    wal_lsn at = handoff_a(f, &enc);
    adopt(f->b, &enc, LOG_A, at);

    sk_buf again;
    encode_state(f->b, &f->topic, 0, LOG_B, keep_all, NULL, &again);
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(again.data, again.len, &h), 0);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_handoff(&b, &h);
    sk_hstate_free(&h);
    feed fd = {.lsn = sk_store_applied(f->b)};
    wal_lsn hat = feed_meta(&fd, &b);
    feed_apply(f->b, &fd);
    wal_lsn lsn = 0;
    assert_int_equal(sk_store_handoff_lsn(f->b, &f->topic, 0, &lsn), 0);
    assert_int_equal(lsn, hat);
    assert_int_equal(owned_of(f->b).n, 0);
    assert_int_equal(q1(f->path_b, "SELECT count(*) FROM objects"), 0);
    assert_int_equal(q1(f->path_b, "SELECT count(*) FROM group_offsets"), 0);

    adopt(f->b, &again, LOG_B, hat);
    assert_int_equal(sk_store_handoff_lsn(f->b, &f->topic, 0, &lsn), SK_ERR_NOENT);
    assert_int_equal(owned_of(f->b).n, 1);
    sk_buf back;
    encode_state(f->b, &f->topic, 0, LOG_B, keep_all, NULL, &back);
    assert_int_equal(back.len, enc.len);
    assert_memory_equal(back.data, enc.data, enc.len);
    sk_buf_free(&back);
    sk_buf_free(&again);
    sk_buf_free(&enc);
}

/* A state whose batches are in two logs, one of them the adopter's own (a
 * partition that came back): each keeps the log it names, and only the one
 * in the adopter's WAL holds its WAL back. */
static void test_adopt_own_log_batch(void **state)
{
    fx *f = *state;
    sk_hbatch batches[2] = {{LOG_A, 5000, 200, 0, 4, 10}, {LOG_B, 300, 210, 5, 9, 20}};
    sk_hstate h = {.id = f->topic, .part = 1, .epoch = 4, .stream = STREAM1, .log_start = 0,
                   .next_offset = 10, .max_ts = 20, .max_ts_base = 5, .nbatches = 2,
                   .batches = batches};
    sk_buf enc;
    encode(&h, &enc);
    adopt(f->b, &enc, LOG_A, 4242);
    sk_buf back;
    encode_state(f->b, &f->topic, 1, LOG_B, NULL, NULL, &back);
    assert_int_equal(back.len, enc.len);
    assert_memory_equal(back.data, enc.data, enc.len);
    sk_buf_free(&back);
    sk_batch_loc l;
    assert_int_equal(sk_store_find_offset(f->b, &f->topic, 1, 7, &l), 1);
    assert_int_equal(l.log, LOG_B);
    assert_int_equal(l.lsn, 300);
    assert_int_equal(sk_store_find_offset(f->b, &f->topic, 1, 0, &l), 1);
    assert_int_equal(l.log, LOG_A);
    wal_lsn min;
    assert_int_equal(sk_store_min_lsn(f->b, LOG_B, &min), 0);
    assert_int_equal(min, 300);
    sk_buf_free(&enc);
}

/* Each offset of the partition is in exactly one place: a batch in a log
 * or a range of an object. */
static void assert_covered_once(const sk_hstate *h)
{
    for (int64_t off = h->log_start; off < h->next_offset; off++) {
        int n = 0;
        for (uint32_t i = 0; i < h->nbatches; i++)
            n += h->batches[i].base <= off && off <= h->batches[i].last;
        for (uint32_t i = 0; i < h->nranges; i++)
            n += (int64_t)h->ranges[i].start <= off && off <= (int64_t)h->ranges[i].end;
        if (n != 1)
            fail_msg("offset %lld is in %d places", (long long)off, n);
    }
}

/* A write of the view slipped in while a reader connection is about to run
 * the statement that starts with `before` (the store thread applying
 * records while a worker reads). Reader connections opened after
 * slip_arm get the hook. */
static struct {
    sk_store *s;
    feed *fd;
    const char *before;
    int rc;
    bool done;
} slip;

static int slip_trace(unsigned type, void *ctx, void *p, void *x)
{
    (void)ctx;
    (void)x;
    const char *sql = type == SQLITE_TRACE_STMT ? sqlite3_sql(p) : NULL;
    if (!sql || slip.done || strncmp(sql, slip.before, strlen(slip.before)) != 0)
        return 0;
    slip.done = true;
    slip.rc = sk_store_apply_sync(slip.s, slip.fd->recs, slip.fd->n, slip.fd->lsn);
    return 0;
}

static int slip_init(sqlite3 *db, char **err, const struct sqlite3_api_routines *api)
{
    (void)err;
    (void)api;
    sqlite3_trace_v2(db, SQLITE_TRACE_STMT, slip_trace, NULL);
    return SQLITE_OK;
}

/* An upload registered while partition 0's state is read, between its
 * batches and its objects: the state is the view before it or after it,
 * never offsets in both. */
static void test_encode_consistent_read(void **state)
{
    fx *f = *state;
    scene sc;
    fill_a(f, &sc);
    feed fd = {.lsn = sk_store_applied(f->a)};
    static const char key[] = "sso/1/1700000009999-cccc";
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_objects_begin(&b, fd.lsn, 1);
    sk_oobj o = {key, strlen(key), OBJFMT_SSO, 5000, 1700000009999, 2};
    sk_meta_objects_obj(&b, &o);
    sk_orange r0 = {STREAM0, 10, 14, 900, sc.p0[6].max_ts, 5};
    sk_orange r1 = {STREAM1, 4, 5, 300, sc.p1[1].max_ts, 2};
    sk_meta_objects_range(&b, &r0);
    sk_meta_objects_range(&b, &r1);
    sk_meta_objects_retired(&b, 0);
    feed_meta(&fd, &b);

    slip.s = f->a;
    slip.fd = &fd;
    slip.before = "SELECT r.key";
    slip.done = false;
    assert_int_equal(sqlite3_auto_extension((void (*)(void))slip_init), SQLITE_OK);
    sk_buf enc;
    encode_state(f->a, &f->topic, 0, LOG_A, keep_named, "g-keep", &enc);
    sqlite3_cancel_auto_extension((void (*)(void))slip_init);
    assert_true(slip.done);
    assert_int_equal(slip.rc, 0);
    for (size_t i = 0; i < fd.n; i++)
        sk_store_rec_free(&fd.recs[i]);
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &h), 0);
    assert_covered_once(&h);
    sk_hstate_free(&h);
    sk_buf_free(&enc);

    /* Read again, the upload is all there is. */
    encode_state(f->a, &f->topic, 0, LOG_A, keep_named, "g-keep", &enc);
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &h), 0);
    assert_covered_once(&h);
    assert_int_equal(h.nbatches, 0);
    assert_int_equal(h.nobjects, 3);
    sk_hstate_free(&h);
    sk_buf_free(&enc);
}

/* A group whose commits do not fit in one record: the view says so rather
 * than give a state whose group body does not parse. */
static void test_encode_group_too_big(void **state)
{
    fx *f = *state;
    enum { PER_REC = 500, RECS = 33, META = 4096 };
    char *meta = malloc(META + 1);
    assert_non_null(meta);
    memset(meta, 'm', META);
    meta[META] = 0;
    sk_grec_ent *e = calloc(PER_REC, sizeof *e);
    assert_non_null(e);
    feed fd = {.lsn = 4096};
    for (int r = 0; r < RECS; r++) {
        for (int i = 0; i < PER_REC; i++)
            e[i] = ent("t", r * PER_REC + i, i, 0, meta, 1);
        feed_group(&fd, "g-big", e, PER_REC);
        feed_apply(f->a, &fd);
    }
    free(e);
    free(meta);
    feed_topic(&fd, &f->topic, "t", 1, STREAM0);
    feed_apply(f->a, &fd);

    sk_buf enc;
    sk_buf_init(&enc, 0);
    int rc = sk_store_encode_state(f->a, &f->topic, 0, LOG_A, keep_all, NULL, &enc);
    if (rc == 0) {
        sk_hstate h;
        assert_int_equal(sk_hstate_decode(enc.data, enc.len, &h), 0);
        assert_int_equal(h.ngroups, 1);
        sk_grec g;
        assert_int_equal(sk_grec_init(&g, h.groups[0], h.group_lens[0]), 0);
        sk_grec_ent x;
        int n = 0, more;
        while ((more = sk_grec_next(&g, &x)) == 1)
            n++;
        assert_int_equal(more, 0);
        assert_int_equal(n, PER_REC * RECS);
        sk_hstate_free(&h);
    } else {
        assert_int_equal(rc, SK_ERR_NOMEM);
    }
    sk_buf_free(&enc);
}

/* ---- migration ---- */

/* broker/store.c's schema at version 2, before the cluster. */
static const char *const schema_v2 =
    "CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v BLOB);"
    "CREATE TABLE IF NOT EXISTS topics(id BLOB PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
    "  partitions INTEGER NOT NULL, rf INTEGER NOT NULL, configs BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS partitions(topic BLOB, part INTEGER, stream INTEGER,"
    "  log_start INTEGER, next_offset INTEGER, leader_epoch INTEGER, max_ts INTEGER,"
    "  max_ts_base INTEGER, bytes INTEGER, PRIMARY KEY(topic, part)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS batches(topic BLOB, part INTEGER, base INTEGER, last INTEGER,"
    "  lsn INTEGER, len INTEGER, max_ts INTEGER, PRIMARY KEY(topic, part, base)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS batches_lsn ON batches(lsn);"
    "CREATE TABLE IF NOT EXISTS producers(topic BLOB, part INTEGER, pid INTEGER, state BLOB,"
    "  PRIMARY KEY(topic, part, pid)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS group_offsets(grp TEXT, topic TEXT, part INTEGER, off INTEGER,"
    "  epoch INTEGER, meta BLOB, ts INTEGER, PRIMARY KEY(grp, topic, part)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS objects(key TEXT PRIMARY KEY, kind INTEGER, size INTEGER,"
    "  created INTEGER, delete_after INTEGER) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS object_ranges(stream INTEGER, start INTEGER, end INTEGER,"
    "  key TEXT, size INTEGER, max_ts INTEGER, records INTEGER, PRIMARY KEY(stream, start))"
    "  WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS object_ranges_key ON object_ranges(key);";

static void exec_ok(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK)
        fail_msg("%s: %s", sql, msg ? msg : "?");
}

/* A schema-2 view as a node before the cluster left it: a topic, a
 * partition with a batch in the WAL and a range in an object, a producer,
 * a group's commit. */
static void write_v2(const char *path, const kc_uuid *id)
{
    sqlite3 *db;
    assert_int_equal(sqlite3_open(path, &db), SQLITE_OK);
    exec_ok(db, "PRAGMA journal_mode=WAL");
    exec_ok(db, schema_v2);
    exec_ok(db, "INSERT INTO kv(k, v) VALUES('schema', 2), ('applied', 777000),"
                " ('uploaded', 500000), ('next_stream', 31)");
    char hex[33];
    for (int i = 0; i < 16; i++)
        snprintf(hex + 2 * i, 3, "%02x", id->b[i]);
    exec_ok(db, sqlf("INSERT INTO topics VALUES(x'%s', 'old', 1, 1, x'00000000')", hex));
    exec_ok(db, sqlf("INSERT INTO partitions VALUES(x'%s', 0, 30, 0, 20, 2, 1234, 10, 150)", hex));
    exec_ok(db, sqlf("INSERT INTO batches VALUES(x'%s', 0, 10, 19, 600000, 150, 1234)", hex));
    exec_ok(db, "INSERT INTO objects VALUES('so/30/1', 1, 4000, 1699999999999, NULL)");
    exec_ok(db, "INSERT INTO object_ranges VALUES(30, 0, 9, 'so/30/1', 3900, 1200, 10)");
    sk_pstate ps = {.pid = 77, .epoch = 1};
    sk_pbatch pb = pbatch(0, 10, 19, -1);
    sk_pstate_push(&ps, 1, &pb);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_pstate_put(&b, &ps);
    sqlite3_stmt *st;
    assert_int_equal(sqlite3_prepare_v2(db, "INSERT INTO producers VALUES(?1, 0, 77, ?2)", -1,
                                        &st, NULL),
                     SQLITE_OK);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, b.data, (int)b.len, SQLITE_STATIC);
    assert_int_equal(sqlite3_step(st), SQLITE_DONE);
    sqlite3_finalize(st);
    sk_buf_free(&b);
    exec_ok(db, "INSERT INTO group_offsets VALUES('g', 'old', 0, 15, 2, x'', 99)");
    sqlite3_close(db);
}

static void test_migrate_2_3(void **state)
{
    fx *f = *state;
    char path[128];
    snprintf(path, sizeof path, "%s/v2.db", f->dir);
    kc_uuid id = uuid_of(0x70);
    write_v2(path, &id);
    char why[256] = "";
    sk_store *s = sk_store_open(path, why, sizeof why);
    if (!s)
        fail_msg("open: %s", why);
    assert_int_equal(q1(path, "SELECT v FROM kv WHERE k = 'schema'"), 3);
    assert_int_equal(sk_store_applied(s), 777000);
    assert_false(sk_store_is_empty(s));
    assert_int_equal(sk_store_uploaded(s), 500000);

    /* The rows are there, with the new columns at their defaults. */
    assert_int_equal(q1(path, "SELECT log FROM batches"), 0);
    assert_int_equal(q1(path, "SELECT shared FROM objects"), 0);
    assert_int_equal(q1(path, "SELECT count(*) FROM handoffs"), 0);
    sk_batch_loc l;
    assert_int_equal(sk_store_find_offset(s, &id, 0, 15, &l), 1);
    assert_int_equal(l.log, 0);
    assert_int_equal(l.lsn, 600000);
    assert_int_equal(l.len, 150);
    wal_lsn min;
    assert_int_equal(sk_store_min_lsn(s, LOG_A, &min), 0);
    assert_int_equal(min, 600000);
    sk_obj_loc ol;
    assert_int_equal(sk_store_find_object(s, 30, 0, &ol), 1);
    assert_string_equal(ol.key, "so/30/1");
    owned o = owned_of(s);
    assert_int_equal(o.n, 1);

    /* The migrated view reads a partition's state and applies a handoff. */
    sk_buf enc;
    encode_state(s, &id, 0, LOG_A, keep_all, NULL, &enc);
    sk_hstate h;
    assert_int_equal(sk_hstate_decode(enc.data, enc.len, &h), 0);
    assert_int_equal(h.epoch, 2);
    assert_int_equal(h.stream, 30);
    assert_int_equal(h.next_offset, 20);
    assert_int_equal(h.nproducers, 1);
    assert_int_equal(h.producers[0].pid, 77);
    assert_int_equal(h.nbatches, 1);
    assert_int_equal(h.batches[0].log, LOG_A);
    assert_int_equal(h.nobjects, 1);
    assert_int_equal(h.objects[0].flags, 0);
    assert_int_equal(h.ngroups, 1);
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_handoff(&b, &h);
    sk_hstate_free(&h);
    sk_buf_free(&enc);
    feed fd = {.lsn = sk_store_applied(s)};
    wal_lsn at = feed_meta(&fd, &b);
    feed_apply(s, &fd);
    wal_lsn lsn;
    assert_int_equal(sk_store_handoff_lsn(s, &id, 0, &lsn), 0);
    assert_int_equal(lsn, at);
    assert_int_equal(sk_store_object_known(s, "so/30/1"), 0);
    sk_store_close(s);

    /* Open again: already at schema 3, nothing more to migrate. */
    s = sk_store_open(path, why, sizeof why);
    if (!s)
        fail_msg("reopen: %s", why);
    assert_int_equal(sk_store_handoff_lsn(s, &id, 0, &lsn), 0);
    assert_int_equal(lsn, at);
    assert_int_equal(q1(path, "SELECT v FROM kv WHERE k = 'schema'"), 3);
    sk_store_close(s);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_rich),
        cmocka_unit_test(test_roundtrip_minimal_entries),
        cmocka_unit_test(test_roundtrip_empty),
        cmocka_unit_test(test_truncated_everywhere),
        cmocka_unit_test(test_flipped_everywhere),
        cmocka_unit_test(test_absurd_counts),
        cmocka_unit_test(test_bad_head),
        cmocka_unit_test(test_meta_records),
        cmocka_unit_test_setup_teardown(test_encode_state, setup, teardown),
        cmocka_unit_test_setup_teardown(test_handoff, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt, setup, teardown),
        cmocka_unit_test_setup_teardown(test_drop, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_after_handoff, setup, teardown),
        cmocka_unit_test_setup_teardown(test_adopt_own_log_batch, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encode_consistent_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_encode_group_too_big, setup, teardown),
        cmocka_unit_test_setup_teardown(test_migrate_2_3, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
