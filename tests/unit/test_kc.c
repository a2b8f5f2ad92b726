/*
 * Tests of the Kafka codec (proto/kc.c) and the generated messages (kmsg).
 *
 * Besides hand-written frames, every generated API is round-tripped, request
 * and response, at every version: a deterministic filler sets every field
 * present in that version (nulls where nullable in a second pass), then
 * encode -> decode -> compare -> re-encode must give the same bytes.
 *
 * With SKIFF_GEN_CORPUS=<dir> in the environment, the test also writes one
 * request frame (without its size prefix) per API and version into <dir>,
 * named gen-<Api>-v<ver>.bin: the fuzzer's generated seed set.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "kc.h"
#include "kmsg.h"
#include "sk_arena.h"
#include "sk_err.h"

/* ------------------------------------------------------------ helpers */

static bool in_range(int16_t v, int16_t lo, int16_t hi)
{
    return lo >= 0 && v >= lo && v <= hi;
}

static bool present(const kc_field *f, int16_t v)
{
    return in_range(v, f->ver_min, f->ver_max);
}

static bool nullable(const kc_field *f, int16_t v)
{
    return in_range(v, f->null_min, f->null_max);
}

static bool tagged(const kc_field *f, int16_t v)
{
    return in_range(v, f->tag_min, f->tag_max);
}

static bool is_ptr(const kc_field *f)
{
    return f->type == KC_STRUCT && f->null_min >= 0;
}

static void hexdump(const char *what, const uint8_t *p, size_t n)
{
    fprintf(stderr, "%s (%zu bytes):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, "%s%02x", i % 32 ? " " : "\n  ", p[i]);
    fprintf(stderr, "\n");
}

#define CHECK(cond, ...)                                                                   \
    do {                                                                                   \
        if (!(cond)) {                                                                     \
            print_error(__VA_ARGS__);                                                      \
            print_error("\n");                                                             \
            fail_msg("check failed: %s", #cond);                                           \
        }                                                                                  \
    } while (0)

/* ------------------------------------------------------------- filler */

typedef struct filler {
    sk_arena *a;
    int16_t ver;
    bool flex;
    bool nulls; /* null wherever the version allows it */
    uint32_t seq;
} filler;

static void fill_struct(filler *F, const kc_struct *s, uint8_t *out);

/* Sets one value, different from the field's default (so tagged fields are
 * written), and different from value to value. */
static void fill_scalar(filler *F, uint8_t type, bool nul, int64_t def, double def_f,
                        uint8_t *p)
{
    uint32_t k = ++F->seq;
    switch ((kc_type)type) {
    case KC_BOOL:
        *(bool *)p = def == 0;
        break;
    case KC_INT8:
        *(int8_t *)p = (int8_t)(def + 1 + (int64_t)(k % 50));
        break;
    case KC_INT16:
        *(int16_t *)p = (int16_t)(def + 1 + (int64_t)(k % 1000));
        break;
    case KC_UINT16:
        *(uint16_t *)p = (uint16_t)(def + 1 + (int64_t)(k % 1000));
        break;
    case KC_INT32:
        *(int32_t *)p = (int32_t)(uint32_t)((uint64_t)def + 1 + (uint64_t)k * 77);
        break;
    case KC_UINT32:
        *(uint32_t *)p = (uint32_t)((uint64_t)def + 1 + (uint64_t)k * 77);
        break;
    case KC_INT64:
        *(int64_t *)p = (int64_t)((uint64_t)def + 1 + (uint64_t)k * 1000003u);
        break;
    case KC_FLOAT64:
        *(double *)p = def_f + 1.25 + k;
        break;
    case KC_UUID:
        for (int i = 0; i < 16; i++)
            p[i] = (uint8_t)(k * 31 + (unsigned)i + 1);
        break;
    case KC_STRING: {
        kc_str *s = (kc_str *)p;
        if (F->nulls && nul) {
            s->p = NULL;
            s->len = -1;
        } else {
            char *t = sk_arena_printf(F->a, "s%u-v%d", k, F->ver);
            s->p = t;
            s->len = (int32_t)strlen(t);
        }
        break;
    }
    case KC_BYTES:
    case KC_RECORDS: {
        const uint8_t *q = NULL;
        int32_t len = -1;
        if (!(F->nulls && nul)) {
            len = (int32_t)(k % 7 + 1);
            uint8_t *b = sk_arena_alloc(F->a, (size_t)len);
            for (int32_t i = 0; i < len; i++)
                b[i] = (uint8_t)(k + (uint32_t)i * 13);
            q = b;
        }
        if (type == KC_BYTES) {
            ((kc_bytes *)p)->p = q;
            ((kc_bytes *)p)->len = len;
        } else {
            kc_records *r = (kc_records *)p;
            memset(r, 0, sizeof *r);
            r->p = q;
            r->len = len;
        }
        break;
    }
    case KC_STRUCT:
    case KC_ARRAY:
        fail_msg("fill_scalar on a composite");
    }
}

static void fill_field(filler *F, const kc_field *f, uint8_t *base)
{
    uint8_t *p = base + f->offset;
    bool nul = nullable(f, F->ver);
    if (f->type == KC_ARRAY) {
        kc_array *arr = (kc_array *)p;
        if (F->nulls && nul) {
            arr->n = -1;
            arr->v = NULL;
            return;
        }
        arr->n = 2;
        if (f->elem_type == KC_STRUCT) {
            uint8_t *v = kc_new_array(F->a, f->sub, 2);
            assert_non_null(v);
            for (int i = 0; i < 2; i++)
                fill_struct(F, f->sub, v + (size_t)i * f->elem_size);
            arr->v = v;
        } else {
            uint8_t *v = sk_arena_calloc(F->a, 2, f->elem_size);
            assert_non_null(v);
            for (int i = 0; i < 2; i++)
                fill_scalar(F, f->elem_type, false, 0, 0.0, v + (size_t)i * f->elem_size);
            arr->v = v;
        }
        return;
    }
    if (f->type == KC_STRUCT) {
        if (!is_ptr(f)) {
            fill_struct(F, f->sub, p);
            return;
        }
        void *q = NULL;
        if (!(F->nulls && nul)) {
            q = sk_arena_alloc(F->a, f->sub->size);
            kc_init(f->sub, q);
            fill_struct(F, f->sub, q);
        }
        memcpy(p, &q, sizeof q);
        return;
    }
    fill_scalar(F, f->type, nul, f->def_int, f->def_float, p);
}

static void fill_struct(filler *F, const kc_struct *s, uint8_t *out)
{
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (!present(f, F->ver))
            continue;
        if (tagged(f, F->ver) && !F->flex)
            continue;
        fill_field(F, f, out);
    }
}

/* ------------------------------------------------------ deep compare */

static bool eq_struct(const kc_struct *s, int16_t ver, bool flex, const uint8_t *a,
                      const uint8_t *b, const char **where);

static bool eq_scalar(uint8_t type, const uint8_t *a, const uint8_t *b)
{
    switch ((kc_type)type) {
    case KC_BOOL:
        return *(const bool *)a == *(const bool *)b;
    case KC_INT8:
        return *(const int8_t *)a == *(const int8_t *)b;
    case KC_INT16:
    case KC_UINT16:
        return memcmp(a, b, 2) == 0;
    case KC_INT32:
    case KC_UINT32:
        return memcmp(a, b, 4) == 0;
    case KC_INT64:
    case KC_FLOAT64:
        return memcmp(a, b, 8) == 0;
    case KC_UUID:
        return memcmp(a, b, 16) == 0;
    case KC_STRING: {
        const kc_str *x = (const kc_str *)a, *y = (const kc_str *)b;
        return x->len == y->len && (x->len <= 0 || memcmp(x->p, y->p, (size_t)x->len) == 0);
    }
    case KC_BYTES: {
        const kc_bytes *x = (const kc_bytes *)a, *y = (const kc_bytes *)b;
        return x->len == y->len && (x->len <= 0 || memcmp(x->p, y->p, (size_t)x->len) == 0);
    }
    case KC_RECORDS: {
        const kc_records *x = (const kc_records *)a, *y = (const kc_records *)b;
        return x->len == y->len && (x->len <= 0 || memcmp(x->p, y->p, (size_t)x->len) == 0);
    }
    case KC_STRUCT:
    case KC_ARRAY:
        break;
    }
    return false;
}

static bool eq_struct(const kc_struct *s, int16_t ver, bool flex, const uint8_t *a,
                      const uint8_t *b, const char **where)
{
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (!present(f, ver) || (tagged(f, ver) && !flex))
            continue;
        const uint8_t *pa = a + f->offset, *pb = b + f->offset;
        bool ok = true;
        if (f->type == KC_ARRAY) {
            const kc_array *x = (const kc_array *)pa, *y = (const kc_array *)pb;
            ok = x->n == y->n;
            for (int32_t j = 0; ok && j < x->n; j++) {
                const uint8_t *ea = (const uint8_t *)x->v + (size_t)j * f->elem_size;
                const uint8_t *eb = (const uint8_t *)y->v + (size_t)j * f->elem_size;
                ok = f->elem_type == KC_STRUCT ? eq_struct(f->sub, ver, flex, ea, eb, where)
                                               : eq_scalar(f->elem_type, ea, eb);
            }
        } else if (f->type == KC_STRUCT && is_ptr(f)) {
            const uint8_t *qa, *qb;
            memcpy(&qa, pa, sizeof qa);
            memcpy(&qb, pb, sizeof qb);
            ok = (!qa && !qb) || (qa && qb && eq_struct(f->sub, ver, flex, qa, qb, where));
        } else if (f->type == KC_STRUCT) {
            ok = eq_struct(f->sub, ver, flex, pa, pb, where);
        } else {
            ok = eq_scalar(f->type, pa, pb);
        }
        if (!ok) {
            if (!*where)
                *where = f->name;
            return false;
        }
    }
    return true;
}

/* ------------------------------------------------------- round trips */

typedef struct encoded {
    uint8_t *buf;
    size_t len;
} encoded;

/* Fills, encodes, decodes, compares and re-encodes one message; returns the
 * first encoding (malloc'ed) for callers that want to keep it. */
static encoded roundtrip(const char *what, const kc_struct *s, int16_t ver, bool flex,
                         bool nulls)
{
    sk_arena *a = sk_arena_new(0);
    assert_non_null(a);
    uint8_t *in = sk_arena_alloc(a, s->size);
    kc_init(s, in);
    filler F = {.a = a, .ver = ver, .flex = flex, .nulls = nulls, .seq = (uint32_t)ver * 1000};
    fill_struct(&F, s, in);

    size_t n1 = kc_size(s, ver, flex, in);
    uint8_t *b1 = malloc(n1 + 8);
    assert_non_null(b1);
    memset(b1 + n1, 0xa5, 8);
    uint8_t *end = kc_encode(s, ver, flex, in, b1);
    CHECK((size_t)(end - b1) == n1, "%s v%d: kc_size %zu, kc_encode wrote %td", what, ver, n1,
          end - b1);
    for (int i = 0; i < 8; i++)
        CHECK(b1[n1 + i] == 0xa5, "%s v%d: encoder wrote past kc_size", what, ver);

    uint8_t *out = sk_arena_alloc(a, s->size);
    kc_reader r;
    kc_reader_init(&r, b1, n1);
    int rc = kc_decode(s, ver, flex, &r, out, a);
    if (rc)
        hexdump(what, b1, n1);
    CHECK(rc == 0, "%s v%d nulls=%d: decode failed (%s) at %zu", what, ver, nulls,
          sk_err_name(rc), r.err_at);
    CHECK(r.p == r.end, "%s v%d: decode left %td bytes", what, ver, r.end - r.p);

    const char *where = NULL;
    CHECK(eq_struct(s, ver, flex, in, out, &where), "%s v%d nulls=%d: field %s differs",
          what, ver, nulls, where ? where : "?");

    size_t n2 = kc_size(s, ver, flex, out);
    CHECK(n2 == n1, "%s v%d: re-encoded size %zu != %zu", what, ver, n2, n1);
    uint8_t *b2 = malloc(n2 + 1);
    end = kc_encode(s, ver, flex, out, b2);
    CHECK((size_t)(end - b2) == n2, "%s v%d: second encode size", what, ver);
    CHECK(memcmp(b1, b2, n1) == 0, "%s v%d: re-encoding differs", what, ver);
    free(b2);
    sk_arena_destroy(a);
    return (encoded){b1, n1};
}

static void test_roundtrip_all_apis(void **state)
{
    (void)state;
    int nmsg = 0;
    for (int key = 0; key <= kc_api_max_key(); key++) {
        const kc_api *api = kc_api_get((int16_t)key);
        if (!api)
            continue;
        assert_int_equal(api->key, key);
        assert_true(api->min_ver <= api->max_ver);
        for (int16_t v = api->min_ver; v <= api->max_ver; v++) {
            bool flex = v >= api->flex_min;
            for (int nulls = 0; nulls < 2; nulls++) {
                char what[96];
                snprintf(what, sizeof what, "%sRequest", api->name);
                free(roundtrip(what, api->req, v, flex, nulls).buf);
                snprintf(what, sizeof what, "%sResponse", api->name);
                free(roundtrip(what, api->resp, v, flex, nulls).buf);
                nmsg += 2;
            }
        }
    }
    assert_true(nmsg > 400);
    assert_null(kc_api_get(4));
    assert_null(kc_api_get(-1));
    assert_null(kc_api_get((int16_t)(kc_api_max_key() + 1)));
}

static void test_roundtrip_data_schemas(void **state)
{
    (void)state;
    for (int16_t v = KP_CONSUMER_PROTOCOL_SUBSCRIPTION_MIN_VER;
         v <= KP_CONSUMER_PROTOCOL_SUBSCRIPTION_MAX_VER; v++)
        for (int nulls = 0; nulls < 2; nulls++)
            free(roundtrip("ConsumerProtocolSubscription", &kp_ConsumerProtocolSubscription_desc,
                           v, false, nulls)
                     .buf);
    for (int16_t v = KP_CONSUMER_PROTOCOL_ASSIGNMENT_MIN_VER;
         v <= KP_CONSUMER_PROTOCOL_ASSIGNMENT_MAX_VER; v++)
        for (int nulls = 0; nulls < 2; nulls++)
            free(roundtrip("ConsumerProtocolAssignment", &kp_ConsumerProtocolAssignment_desc, v,
                           false, nulls)
                     .buf);
}

static void test_api_table(void **state)
{
    (void)state;
    const kc_api *p = kc_api_get(KP_PRODUCE);
    assert_non_null(p);
    assert_string_equal(p->name, "Produce");
    assert_int_equal(p->min_ver, 3);
    assert_int_equal(p->max_ver, 13);
    assert_int_equal(p->flex_min, 9);
    assert_ptr_equal(p->req, &kp_ProduceRequest_desc);
    assert_ptr_equal(p->resp, &kp_ProduceResponse_desc);
    /* InitProducerId v6 is unstable in the specs: not in the range. */
    const kc_api *ipi = kc_api_get(KP_INIT_PRODUCER_ID);
    assert_int_equal(ipi->max_ver, 5);
    assert_int_equal(kc_api_get(KP_SASL_HANDSHAKE)->flex_min, KC_VMAX);
    assert_int_equal(kc_api_get(KP_API_VERSIONS)->flex_min, 3);
    assert_int_equal(kc_api_get(KP_JOIN_GROUP)->min_ver, 0);
    assert_int_equal(kc_api_max_key(), 75);
}

static void test_defaults(void **state)
{
    (void)state;
    kp_ProduceRequest pr;
    kc_init(&kp_ProduceRequest_desc, &pr);
    assert_int_equal(pr.transactional_id.len, -1);
    assert_int_equal(pr.topic_data.n, 0);

    kp_FetchResponse_PartitionData pd;
    kc_init(&kp_FetchResponse_PartitionData_desc, &pd);
    assert_int_equal(pd.last_stable_offset, -1);
    assert_int_equal(pd.log_start_offset, -1);
    assert_int_equal(pd.preferred_read_replica, -1);
    assert_int_equal(pd.diverging_epoch.epoch, -1);
    assert_int_equal(pd.current_leader.leader_id, -1);
    assert_int_equal(pd.records.len, 0);

    kp_FetchRequest_FetchPartition fp;
    kc_init(&kp_FetchRequest_FetchPartition_desc, &fp);
    assert_int_equal(fp.high_watermark, INT64_MAX);

    kp_DescribeTopicPartitionsRequest dtp;
    kc_init(&kp_DescribeTopicPartitionsRequest_desc, &dtp);
    assert_null(dtp.cursor);
    assert_int_equal(dtp.response_partition_limit, 2000);

    kp_MetadataRequest mr;
    kc_init(&kp_MetadataRequest_desc, &mr);
    assert_true(mr.allow_auto_topic_creation);

    kp_ApiVersionsResponse av;
    kc_init(&kp_ApiVersionsResponse_desc, &av);
    assert_int_equal(av.finalized_features_epoch, -1);

    kp_ListPartitionReassignmentsRequest lpr;
    kc_init(&kp_ListPartitionReassignmentsRequest_desc, &lpr);
    assert_int_equal(lpr.topics.n, -1);

    sk_arena *a = sk_arena_new(0);
    kp_FetchResponse_PartitionData *arr = kc_new_array(a, &kp_FetchResponse_PartitionData_desc, 3);
    assert_non_null(arr);
    assert_int_equal(arr[2].last_stable_offset, -1);
    sk_arena_destroy(a);
}

/* ------------------------------------------------------------ varints */

static void test_uvarint(void **state)
{
    (void)state;
    static const struct {
        uint32_t v;
        size_t n;
        uint8_t b[5];
    } vec[] = {
        {0, 1, {0x00}},
        {1, 1, {0x01}},
        {127, 1, {0x7f}},
        {128, 2, {0x80, 0x01}},
        {300, 2, {0xac, 0x02}},
        {16383, 2, {0xff, 0x7f}},
        {16384, 3, {0x80, 0x80, 0x01}},
        {2097151, 3, {0xff, 0xff, 0x7f}},
        {2097152, 4, {0x80, 0x80, 0x80, 0x01}},
        {268435455, 4, {0xff, 0xff, 0xff, 0x7f}},
        {268435456, 5, {0x80, 0x80, 0x80, 0x80, 0x01}},
        {UINT32_MAX, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
    };
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        uint8_t buf[8];
        assert_int_equal(kc_uvarint_size(vec[i].v), vec[i].n);
        assert_ptr_equal(kc_put_uvarint(buf, vec[i].v), buf + vec[i].n);
        assert_memory_equal(buf, vec[i].b, vec[i].n);
        kc_reader r;
        kc_reader_init(&r, vec[i].b, vec[i].n);
        uint32_t got = 1;
        assert_int_equal(kc_read_uvarint(&r, &got), 0);
        assert_int_equal(got, vec[i].v);
        assert_ptr_equal(r.p, r.end);
        /* Every strict prefix is unterminated. */
        for (size_t k = 0; k < vec[i].n; k++) {
            kc_reader_init(&r, vec[i].b, k);
            assert_int_equal(kc_read_uvarint(&r, &got), SK_ERR_PARSE);
        }
    }
    /* Too long, or bits past 32: rejected. */
    static const uint8_t six[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x00};
    static const uint8_t big5[] = {0xff, 0xff, 0xff, 0xff, 0x1f};
    static const uint8_t cont5[] = {0xff, 0xff, 0xff, 0xff, 0x8f, 0x00};
    const uint8_t *bad[] = {six, big5, cont5};
    size_t badn[] = {sizeof six, sizeof big5, sizeof cont5};
    for (size_t i = 0; i < 3; i++) {
        kc_reader r;
        kc_reader_init(&r, bad[i], badn[i]);
        uint32_t got;
        assert_int_equal(kc_read_uvarint(&r, &got), SK_ERR_PARSE);
        assert_int_equal(r.err_at, 0);
    }
    /* A non-minimal but in-range encoding is accepted (Kafka's reader does). */
    static const uint8_t pad[] = {0x81, 0x00};
    kc_reader r;
    kc_reader_init(&r, pad, sizeof pad);
    uint32_t got;
    assert_int_equal(kc_read_uvarint(&r, &got), 0);
    assert_int_equal(got, 1);
}

static void test_varint_zigzag(void **state)
{
    (void)state;
    static const struct {
        int32_t v;
        size_t n;
        uint8_t b[5];
    } vec[] = {
        {0, 1, {0x00}},
        {-1, 1, {0x01}},
        {1, 1, {0x02}},
        {-2, 1, {0x03}},
        {63, 1, {0x7e}},
        {-64, 1, {0x7f}},
        {64, 2, {0x80, 0x01}},
        {-65, 2, {0x81, 0x01}},
        {150, 2, {0xac, 0x02}},
        {INT32_MAX, 5, {0xfe, 0xff, 0xff, 0xff, 0x0f}},
        {INT32_MIN, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
    };
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        uint8_t buf[8];
        assert_int_equal(kc_varint_size(vec[i].v), vec[i].n);
        assert_ptr_equal(kc_put_varint(buf, vec[i].v), buf + vec[i].n);
        assert_memory_equal(buf, vec[i].b, vec[i].n);
        kc_reader r;
        kc_reader_init(&r, buf, vec[i].n);
        int32_t got = 12345;
        assert_int_equal(kc_read_varint(&r, &got), 0);
        assert_int_equal(got, vec[i].v);
        assert_ptr_equal(r.p, r.end);
        kc_reader_init(&r, buf, vec[i].n - 1);
        assert_int_equal(kc_read_varint(&r, &got), SK_ERR_PARSE);
    }
    static const uint8_t six[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0x01};
    kc_reader r;
    kc_reader_init(&r, six, sizeof six);
    int32_t got;
    assert_int_equal(kc_read_varint(&r, &got), SK_ERR_PARSE);
}

static void test_varlong_zigzag(void **state)
{
    (void)state;
    static const struct {
        int64_t v;
        size_t n;
        uint8_t b[10];
    } vec[] = {
        {0, 1, {0x00}},
        {-1, 1, {0x01}},
        {1, 1, {0x02}},
        {-64, 1, {0x7f}},
        {64, 2, {0x80, 0x01}},
        {INT32_MAX, 5, {0xfe, 0xff, 0xff, 0xff, 0x0f}},
        {(int64_t)INT32_MAX + 1, 5, {0x80, 0x80, 0x80, 0x80, 0x10}},
        {INT32_MIN, 5, {0xff, 0xff, 0xff, 0xff, 0x0f}},
        {INT64_MAX, 10, {0xfe, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
        {INT64_MIN, 10, {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}},
    };
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        uint8_t buf[12];
        assert_int_equal(kc_varlong_size(vec[i].v), vec[i].n);
        assert_ptr_equal(kc_put_varlong(buf, vec[i].v), buf + vec[i].n);
        assert_memory_equal(buf, vec[i].b, vec[i].n);
        kc_reader r;
        kc_reader_init(&r, buf, vec[i].n);
        int64_t got = 12345;
        assert_int_equal(kc_read_varlong(&r, &got), 0);
        assert_true(got == vec[i].v);
        assert_ptr_equal(r.p, r.end);
        kc_reader_init(&r, buf, vec[i].n - 1);
        assert_int_equal(kc_read_varlong(&r, &got), SK_ERR_PARSE);
    }
    static const uint8_t eleven[] = {0x80, 0x80, 0x80, 0x80, 0x80, 0x80,
                                     0x80, 0x80, 0x80, 0x80, 0x00};
    static const uint8_t big10[] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03};
    kc_reader r;
    int64_t got;
    kc_reader_init(&r, eleven, sizeof eleven);
    assert_int_equal(kc_read_varlong(&r, &got), SK_ERR_PARSE);
    kc_reader_init(&r, big10, sizeof big10);
    assert_int_equal(kc_read_varlong(&r, &got), SK_ERR_PARSE);
    /* A 32-bit varint reader refuses what only fits 64 bits. */
    static const uint8_t v33[] = {0x80, 0x80, 0x80, 0x80, 0x10};
    int32_t g32;
    kc_reader_init(&r, v33, sizeof v33);
    assert_int_equal(kc_read_varint(&r, &g32), SK_ERR_PARSE);
}

static void test_primitives(void **state)
{
    (void)state;
    uint8_t buf[16];
    assert_ptr_equal(kc_put_i16(buf, -2), buf + 2);
    assert_ptr_equal(kc_put_i32(buf + 2, INT32_MIN), buf + 6);
    assert_ptr_equal(kc_put_i64(buf + 6, -3), buf + 14);
    static const uint8_t want[] = {0xff, 0xfe, 0x80, 0, 0, 0, 0xff, 0xff,
                                   0xff, 0xff, 0xff, 0xff, 0xff, 0xfd};
    assert_memory_equal(buf, want, sizeof want);
    kc_reader r;
    kc_reader_init(&r, buf, 14);
    int16_t a;
    int32_t b;
    int64_t c;
    int8_t d;
    assert_int_equal(kc_read_i16(&r, &a), 0);
    assert_int_equal(kc_read_i32(&r, &b), 0);
    assert_int_equal(kc_read_i64(&r, &c), 0);
    assert_int_equal(a, -2);
    assert_int_equal(b, INT32_MIN);
    assert_true(c == -3);
    assert_int_equal(kc_read_i8(&r, &d), SK_ERR_PARSE);
    assert_int_equal(r.err_at, 14);

    static const uint8_t s[] = {0x00, 0x03, 'a', 'b', 'c', 0xff, 0xff, 0xff, 0xfe, 0x00, 0x09};
    kc_str str;
    kc_reader_init(&r, s, sizeof s);
    assert_int_equal(kc_read_str16(&r, &str), 0);
    assert_int_equal(str.len, 3);
    assert_memory_equal(str.p, "abc", 3);
    assert_int_equal(kc_read_str16(&r, &str), 0);
    assert_int_equal(str.len, -1);
    assert_null(str.p);
    assert_int_equal(kc_read_str16(&r, &str), SK_ERR_PARSE); /* -2 */
    kc_reader_init(&r, s + 9, 2);
    assert_int_equal(kc_read_str16(&r, &str), SK_ERR_PARSE); /* longer than the frame */

    static const uint8_t tags[] = {0x02, 0x00, 0x01, 0xaa, 0x07, 0x00, 0x42};
    kc_reader_init(&r, tags, sizeof tags);
    assert_int_equal(kc_skip_tags(&r), 0);
    assert_ptr_equal(r.p, r.end - 1);
    static const uint8_t badtags[] = {0x01, 0x00, 0x05, 0xaa};
    kc_reader_init(&r, badtags, sizeof badtags);
    assert_int_equal(kc_skip_tags(&r), SK_ERR_PARSE);
}

/* ---------------------------------------------------- real frames */

static void test_frame_apiversions_v3(void **state)
{
    (void)state;
    static const uint8_t frame[] = {
        0x00, 0x12, 0x00, 0x03, 0x00, 0x00, 0x00, 0x01,              /* key 18 v3 corr 1 */
        0x00, 0x07, 'r', 'd', 'k', 'a', 'f', 'k', 'a',               /* client id */
        0x00,                                                        /* header tags */
        0x0b, 'l', 'i', 'b', 'r', 'd', 'k', 'a', 'f', 'k', 'a',      /* software name */
        0x06, '2', '.', '0', '.', '2',                               /* software version */
        0x00,                                                        /* body tags */
    };
    kc_reader r;
    kc_reader_init(&r, frame, sizeof frame);
    kc_req_header h;
    assert_int_equal(kc_read_req_header(&r, &h, true), 0);
    assert_int_equal(h.api_key, KP_API_VERSIONS);
    assert_int_equal(h.api_version, 3);
    assert_int_equal(h.correlation_id, 1);
    assert_int_equal(h.client_id.len, 7);
    assert_memory_equal(h.client_id.p, "rdkafka", 7);
    assert_int_equal(kc_req_header_size(&h, true), 18);

    sk_arena *a = sk_arena_new(0);
    kp_ApiVersionsRequest req;
    assert_int_equal(kc_decode(&kp_ApiVersionsRequest_desc, 3, true, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.client_software_name.len, 10);
    assert_memory_equal(req.client_software_name.p, "librdkafka", 10);
    assert_int_equal(req.client_software_version.len, 5);
    assert_memory_equal(req.client_software_version.p, "2.0.2", 5);

    /* And back, header included. */
    uint8_t out[sizeof frame];
    uint8_t *p = kc_put_req_header(out, &h, true);
    assert_int_equal(kc_size(&kp_ApiVersionsRequest_desc, 3, true, &req), sizeof frame - 18);
    p = kc_encode(&kp_ApiVersionsRequest_desc, 3, true, &req, p);
    assert_ptr_equal(p, out + sizeof frame);
    assert_memory_equal(out, frame, sizeof frame);
    sk_arena_destroy(a);
}

static void test_frame_metadata_v0(void **state)
{
    (void)state;
    static const uint8_t frame[] = {
        0x00, 0x03, 0x00, 0x00, 0x00, 0x00, 0x00, 0x07, /* key 3 v0 corr 7 */
        0xff, 0xff,                                     /* null client id */
        0x00, 0x00, 0x00, 0x02,                         /* 2 topics */
        0x00, 0x03, 'f', 'o', 'o', 0x00, 0x03, 'b', 'a', 'r',
    };
    kc_reader r;
    kc_reader_init(&r, frame, sizeof frame);
    kc_req_header h;
    assert_int_equal(kc_read_req_header(&r, &h, false), 0);
    assert_int_equal(h.api_key, KP_METADATA);
    assert_int_equal(h.api_version, 0);
    assert_int_equal(h.correlation_id, 7);
    assert_int_equal(h.client_id.len, -1);
    sk_arena *a = sk_arena_new(0);
    kp_MetadataRequest req;
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.topics.n, 2);
    assert_int_equal(req.topics.v[0].name.len, 3);
    assert_memory_equal(req.topics.v[0].name.p, "foo", 3);
    assert_memory_equal(req.topics.v[1].name.p, "bar", 3);
    /* Fields absent from v0 hold their defaults. */
    assert_true(req.allow_auto_topic_creation);

    /* A null array is an error in v0 (not nullable), fine in v1. */
    static const uint8_t nulltopics[] = {0xff, 0xff, 0xff, 0xff};
    kc_reader_init(&r, nulltopics, sizeof nulltopics);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &req, a), SK_ERR_PARSE);
    kc_reader_init(&r, nulltopics, sizeof nulltopics);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 1, false, &r, &req, a), 0);
    assert_int_equal(req.topics.n, -1);
    sk_arena_destroy(a);
}

static void test_frame_produce_v3(void **state)
{
    (void)state;
    static const uint8_t frame[] = {
        0x00, 0x00, 0x00, 0x03, 0x00, 0x00, 0x00, 0x2a, /* key 0 v3 corr 42 */
        0x00, 0x04, 't', 'e', 's', 't',                 /* client id */
        0xff, 0xff,                                     /* transactional id null */
        0xff, 0xff,                                     /* acks -1 */
        0x00, 0x00, 0x75, 0x30,                         /* timeout 30000 */
        0x00, 0x00, 0x00, 0x01,                         /* 1 topic */
        0x00, 0x05, 't', 'o', 'p', 'i', 'c',
        0x00, 0x00, 0x00, 0x01,                         /* 1 partition */
        0x00, 0x00, 0x00, 0x02,                         /* index 2 */
        0x00, 0x00, 0x00, 0x05, 'h', 'e', 'l', 'l', 'o', /* records */
    };
    kc_reader r;
    kc_reader_init(&r, frame, sizeof frame);
    kc_req_header h;
    assert_int_equal(kc_read_req_header(&r, &h, false), 0);
    assert_int_equal(h.api_key, KP_PRODUCE);
    assert_int_equal(h.api_version, 3);
    assert_int_equal(h.correlation_id, 42);
    sk_arena *a = sk_arena_new(0);
    kp_ProduceRequest req;
    assert_int_equal(kc_decode(&kp_ProduceRequest_desc, 3, false, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.transactional_id.len, -1);
    assert_int_equal(req.acks, -1);
    assert_int_equal(req.timeout_ms, 30000);
    assert_int_equal(req.topic_data.n, 1);
    kp_ProduceRequest_TopicProduceData *t = &req.topic_data.v[0];
    assert_int_equal(t->name.len, 5);
    assert_memory_equal(t->name.p, "topic", 5);
    assert_int_equal(t->partition_data.n, 1);
    assert_int_equal(t->partition_data.v[0].index, 2);
    assert_int_equal(t->partition_data.v[0].records.len, 5);
    assert_memory_equal(t->partition_data.v[0].records.p, "hello", 5);
    /* Decoded slices point into the frame. */
    assert_ptr_equal(t->partition_data.v[0].records.p, frame + sizeof frame - 5);
    sk_arena_destroy(a);
}

static void test_frame_produce_v9(void **state)
{
    (void)state;
    static const uint8_t body[] = {
        0x06, 't', 'x', 'n', '-', '1',   /* transactional id "txn-1" */
        0x00, 0x01,                      /* acks 1 */
        0x00, 0x00, 0x03, 0xe8,          /* timeout 1000 */
        0x02,                            /* 1 topic */
        0x02, 't',                       /* name "t" */
        0x03,                            /* 2 partitions */
        0x00, 0x00, 0x00, 0x00, 0x00,    /* index 0, null records */
        0x00,                            /* partition tags */
        0x00, 0x00, 0x00, 0x01, 0x03, 'a', 'b',
        0x00,
        0x00,                            /* topic tags */
        0x00,                            /* body tags */
    };
    kc_reader r;
    kc_reader_init(&r, body, sizeof body);
    sk_arena *a = sk_arena_new(0);
    kp_ProduceRequest req;
    assert_int_equal(kc_decode(&kp_ProduceRequest_desc, 9, true, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.transactional_id.len, 5);
    assert_int_equal(req.acks, 1);
    assert_int_equal(req.timeout_ms, 1000);
    assert_int_equal(req.topic_data.n, 1);
    assert_int_equal(req.topic_data.v[0].partition_data.n, 2);
    assert_int_equal(req.topic_data.v[0].partition_data.v[0].records.len, -1);
    assert_int_equal(req.topic_data.v[0].partition_data.v[1].index, 1);
    assert_int_equal(req.topic_data.v[0].partition_data.v[1].records.len, 2);
    uint8_t out[sizeof body];
    assert_int_equal(kc_size(&kp_ProduceRequest_desc, 9, true, &req), sizeof body);
    assert_ptr_equal(kc_encode(&kp_ProduceRequest_desc, 9, true, &req, out), out + sizeof body);
    assert_memory_equal(out, body, sizeof body);
    sk_arena_destroy(a);
}

static void test_encode_apiversions_response(void **state)
{
    (void)state;
    kp_ApiVersionsResponse_ApiVersion k = {.api_key = 18, .min_version = 0, .max_version = 4};
    kp_ApiVersionsResponse resp;
    kc_init(&kp_ApiVersionsResponse_desc, &resp);
    resp.api_keys.n = 1;
    resp.api_keys.v = &k;

    static const uint8_t v0[] = {0x00, 0x00, 0x00, 0x00, 0x00, 0x01,
                                 0x00, 0x12, 0x00, 0x00, 0x00, 0x04};
    uint8_t out[64];
    assert_int_equal(kc_size(&kp_ApiVersionsResponse_desc, 0, false, &resp), sizeof v0);
    assert_ptr_equal(kc_encode(&kp_ApiVersionsResponse_desc, 0, false, &resp, out),
                     out + sizeof v0);
    assert_memory_equal(out, v0, sizeof v0);

    /* v3: compact array, element tags, throttle time, body tags; the tagged
     * fields hold their defaults and are left out. */
    static const uint8_t v3[] = {0x00, 0x00, 0x02, 0x00, 0x12, 0x00, 0x00, 0x00,
                                 0x04, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    assert_int_equal(kc_size(&kp_ApiVersionsResponse_desc, 3, true, &resp), sizeof v3);
    assert_ptr_equal(kc_encode(&kp_ApiVersionsResponse_desc, 3, true, &resp, out),
                     out + sizeof v3);
    assert_memory_equal(out, v3, sizeof v3);

    /* A non-default tagged field is written, with its tag and size. */
    resp.finalized_features_epoch = 5;
    static const uint8_t v3t[] = {0x00, 0x00, 0x02, 0x00, 0x12, 0x00, 0x00, 0x00, 0x04,
                                  0x00, 0x00, 0x00, 0x00, 0x00, 0x01, 0x01, 0x08, 0x00,
                                  0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x05};
    assert_int_equal(kc_size(&kp_ApiVersionsResponse_desc, 3, true, &resp), sizeof v3t);
    assert_ptr_equal(kc_encode(&kp_ApiVersionsResponse_desc, 3, true, &resp, out),
                     out + sizeof v3t);
    assert_memory_equal(out, v3t, sizeof v3t);

    uint8_t hdr[8];
    assert_int_equal(kc_resp_header_size(false), 4);
    assert_int_equal(kc_resp_header_size(true), 5);
    assert_ptr_equal(kc_put_resp_header(hdr, 0x01020304, false), hdr + 4);
    assert_ptr_equal(kc_put_resp_header(hdr, 0x01020304, true), hdr + 5);
    static const uint8_t h1[] = {1, 2, 3, 4, 0};
    assert_memory_equal(hdr, h1, 5);
}

static void test_fetch_response_segments_and_tags(void **state)
{
    (void)state;
    static const uint8_t s1[] = {'a', 'b'}, s2[] = {'c'};
    kc_bytes segs[3] = {{s1, 2}, {NULL, 0}, {s2, 1}};
    kp_FetchResponse_PartitionData pd;
    kc_init(&kp_FetchResponse_PartitionData_desc, &pd);
    pd.high_watermark = 10;
    pd.last_stable_offset = 10;
    pd.log_start_offset = 0;
    pd.aborted_transactions.n = -1;
    pd.current_leader.leader_id = 1;
    pd.current_leader.leader_epoch = 5;
    pd.records.len = 3;
    pd.records.nseg = 3;
    pd.records.segs = segs;
    kp_FetchResponse_FetchableTopicResponse t;
    kc_init(&kp_FetchResponse_FetchableTopicResponse_desc, &t);
    t.topic = (kc_str){"t", 1};
    t.partitions.n = 1;
    t.partitions.v = &pd;
    kp_FetchResponse resp;
    kc_init(&kp_FetchResponse_desc, &resp);
    resp.responses.n = 1;
    resp.responses.v = &t;

    static const uint8_t want[] = {
        0x00, 0x00, 0x00, 0x00,                         /* throttle */
        0x00, 0x00,                                     /* error */
        0x00, 0x00, 0x00, 0x00,                         /* session */
        0x02, 0x02, 't',                                /* 1 topic "t" */
        0x02,                                           /* 1 partition */
        0x00, 0x00, 0x00, 0x00,                         /* index */
        0x00, 0x00,                                     /* error */
        0, 0, 0, 0, 0, 0, 0, 10,                        /* high watermark */
        0, 0, 0, 0, 0, 0, 0, 10,                        /* last stable */
        0, 0, 0, 0, 0, 0, 0, 0,                         /* log start */
        0x00,                                           /* aborted: null */
        0xff, 0xff, 0xff, 0xff,                         /* preferred replica */
        0x04, 'a', 'b', 'c',                            /* records from 3 segments */
        0x01, 0x01, 0x09, 0, 0, 0, 1, 0, 0, 0, 5, 0x00, /* tag 1: CurrentLeader */
        0x00,                                           /* topic tags */
        0x00,                                           /* body tags */
    };
    uint8_t out[sizeof want + 8];
    assert_int_equal(kc_size(&kp_FetchResponse_desc, 12, true, &resp), sizeof want);
    assert_ptr_equal(kc_encode(&kp_FetchResponse_desc, 12, true, &resp, out),
                     out + sizeof want);
    assert_memory_equal(out, want, sizeof want);

    /* Decoding gives one contiguous slice. */
    sk_arena *a = sk_arena_new(0);
    kp_FetchResponse back;
    kc_reader r;
    kc_reader_init(&r, want, sizeof want);
    assert_int_equal(kc_decode(&kp_FetchResponse_desc, 12, true, &r, &back, a), 0);
    kp_FetchResponse_PartitionData *bp = &back.responses.v[0].partitions.v[0];
    assert_int_equal(bp->records.len, 3);
    assert_int_equal(bp->records.nseg, 0);
    assert_memory_equal(bp->records.p, "abc", 3);
    assert_int_equal(bp->current_leader.leader_id, 1);
    assert_int_equal(bp->current_leader.leader_epoch, 5);
    assert_int_equal(bp->diverging_epoch.epoch, -1);
    assert_int_equal(bp->aborted_transactions.n, -1);

    /* A known tag whose declared size does not match its value is refused. */
    uint8_t bad[sizeof want + 1];
    size_t tagpos = sizeof want - 14; /* the 0x01 count before tag 1 */
    assert_int_equal(want[tagpos], 0x01);
    memcpy(bad, want, tagpos + 2);
    bad[tagpos + 2] = 0x0a; /* size 10 instead of 9 */
    memcpy(bad + tagpos + 3, want + tagpos + 3, 9);
    bad[tagpos + 12] = 0x00; /* the extra byte */
    memcpy(bad + tagpos + 13, want + tagpos + 12, sizeof want - tagpos - 12);
    kc_reader_init(&r, bad, sizeof bad);
    assert_int_equal(kc_decode(&kp_FetchResponse_desc, 12, true, &r, &back, a), SK_ERR_PARSE);

    /* In v4 (not flexible) tagged fields do not exist: nothing written. */
    size_t n4 = kc_size(&kp_FetchResponse_desc, 4, false, &resp);
    uint8_t *o4 = malloc(n4);
    assert_ptr_equal(kc_encode(&kp_FetchResponse_desc, 4, false, &resp, o4), o4 + n4);
    kc_reader_init(&r, o4, n4);
    assert_int_equal(kc_decode(&kp_FetchResponse_desc, 4, false, &r, &back, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(back.responses.v[0].partitions.v[0].current_leader.leader_id, -1);
    assert_memory_equal(back.responses.v[0].partitions.v[0].records.p, "abc", 3);
    free(o4);
    sk_arena_destroy(a);
}

/* Produce v13 names a topic by its id, in place of the name. */
static void test_frame_produce_v13(void **state)
{
    (void)state;
    static const uint8_t body[] = {
        0x00,                            /* transactional id null */
        0xff, 0xff,                      /* acks -1 */
        0x00, 0x00, 0x03, 0xe8,          /* timeout 1000 */
        0x02,                            /* 1 topic */
        0x10, 0x11, 0x12, 0x13, 0x14, 0x15, 0x16, 0x17, /* topic id */
        0x18, 0x19, 0x1a, 0x1b, 0x1c, 0x1d, 0x1e, 0x1f,
        0x02,                            /* 1 partition */
        0x00, 0x00, 0x00, 0x03, 0x03, 'a', 'b',
        0x00,                            /* partition tags */
        0x00,                            /* topic tags */
        0x00,                            /* body tags */
    };
    kc_reader r;
    kc_reader_init(&r, body, sizeof body);
    sk_arena *a = sk_arena_new(0);
    kp_ProduceRequest req;
    assert_int_equal(kc_decode(&kp_ProduceRequest_desc, 13, true, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.topic_data.n, 1);
    assert_memory_equal(req.topic_data.v[0].topic_id.b, body + 8, 16);
    assert_int_equal(req.topic_data.v[0].name.len, 0); /* absent in v13: the default */
    assert_int_equal(req.topic_data.v[0].partition_data.v[0].index, 3);
    uint8_t out[sizeof body];
    assert_int_equal(kc_size(&kp_ProduceRequest_desc, 13, true, &req), sizeof body);
    assert_ptr_equal(kc_encode(&kp_ProduceRequest_desc, 13, true, &req, out), out + sizeof body);
    assert_memory_equal(out, body, sizeof body);
    /* The same topic id is not on the wire in v12: the name is. */
    assert_int_equal(kc_size(&kp_ProduceRequest_desc, 12, true, &req), sizeof body - 16 + 1);
    sk_arena_destroy(a);
}

/* Fetch v16: a partition's KIP-951 hint (tag 1) and the response's
 * NodeEndpoints (tag 0 of the body), by topic id. */
static void test_fetch_v16_leader_hint(void **state)
{
    (void)state;
    kp_FetchResponse_PartitionData pd;
    kc_init(&kp_FetchResponse_PartitionData_desc, &pd);
    pd.error_code = 6;
    pd.aborted_transactions.n = -1;
    pd.records = (kc_records){NULL, -1, 0, NULL, NULL};
    pd.current_leader.leader_id = 2;
    pd.current_leader.leader_epoch = 7;
    kp_FetchResponse_FetchableTopicResponse t;
    kc_init(&kp_FetchResponse_FetchableTopicResponse_desc, &t);
    memset(t.topic_id.b, 0xab, 16);
    t.partitions.n = 1;
    t.partitions.v = &pd;
    kp_FetchResponse_NodeEndpoint ep;
    kc_init(&kp_FetchResponse_NodeEndpoint_desc, &ep);
    ep = (kp_FetchResponse_NodeEndpoint){2, {"h", 1}, 9092, {NULL, -1}};
    kp_FetchResponse resp;
    kc_init(&kp_FetchResponse_desc, &resp);
    resp.responses.n = 1;
    resp.responses.v = &t;
    resp.node_endpoints.n = 1;
    resp.node_endpoints.v = &ep;

    static const uint8_t want[] = {
        0x00, 0x00, 0x00, 0x00,                         /* throttle */
        0x00, 0x00,                                     /* error */
        0x00, 0x00, 0x00, 0x00,                         /* session */
        0x02,                                           /* 1 topic */
        0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, /* topic id */
        0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab, 0xab,
        0x02,                                           /* 1 partition */
        0x00, 0x00, 0x00, 0x00,                         /* index */
        0x00, 0x06,                                     /* NOT_LEADER_OR_FOLLOWER */
        0, 0, 0, 0, 0, 0, 0, 0,                         /* high watermark */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* last stable */
        0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, /* log start */
        0x00,                                           /* aborted: null */
        0xff, 0xff, 0xff, 0xff,                         /* preferred replica */
        0x00,                                           /* records: null */
        0x01, 0x01, 0x09, 0, 0, 0, 2, 0, 0, 0, 7, 0x00, /* tag 1: CurrentLeader */
        0x00,                                           /* topic tags */
        0x01, 0x00, 0x0d,                               /* body tag 0: NodeEndpoints */
        0x02, 0, 0, 0, 2, 0x02, 'h', 0x00, 0x00, 0x23, 0x84, 0x00, 0x00,
    };
    uint8_t out[sizeof want + 8];
    assert_int_equal(kc_size(&kp_FetchResponse_desc, 16, true, &resp), sizeof want);
    assert_ptr_equal(kc_encode(&kp_FetchResponse_desc, 16, true, &resp, out),
                     out + sizeof want);
    assert_memory_equal(out, want, sizeof want);
    sk_arena *a = sk_arena_new(0);
    kp_FetchResponse back;
    kc_reader r;
    kc_reader_init(&r, want, sizeof want);
    assert_int_equal(kc_decode(&kp_FetchResponse_desc, 16, true, &r, &back, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(back.node_endpoints.n, 1);
    assert_int_equal(back.node_endpoints.v[0].port, 9092);
    assert_int_equal(back.responses.v[0].partitions.v[0].current_leader.leader_epoch, 7);
    /* v15 has no NodeEndpoints: the body's tag section stays empty. */
    assert_int_equal(kc_size(&kp_FetchResponse_desc, 15, true, &resp), sizeof want - 15);
    sk_arena_destroy(a);
}

static void test_unknown_tags_skipped(void **state)
{
    (void)state;
    /* ApiVersions v3 request body with two unknown tags at the top level. */
    static const uint8_t body[] = {
        0x03, 'c', 'l', 0x02, '1',
        0x02, 0x05, 0x03, 0xaa, 0xbb, 0xcc, 0x63, 0x00,
    };
    sk_arena *a = sk_arena_new(0);
    kp_ApiVersionsRequest req;
    kc_reader r;
    kc_reader_init(&r, body, sizeof body);
    assert_int_equal(kc_decode(&kp_ApiVersionsRequest_desc, 3, true, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.client_software_name.len, 2);
    assert_int_equal(req.client_software_version.len, 1);

    /* Metadata v12 request: an unknown tag inside a topic element, and one
     * in the body next to nothing known. */
    static const uint8_t md[] = {
        0x02,                                     /* 1 topic */
        0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 9, /* topic id */
        0x02, 'x',                                /* name */
        0x01, 0x07, 0x02, 0x11, 0x22,             /* element tags: tag 7, 2 bytes */
        0x01,                                     /* allow auto topic creation */
        0x00,                                     /* include topic authorized ops */
        0x01, 0x80, 0x01, 0x00,                   /* body tags: tag 128, empty */
    };
    kp_MetadataRequest mr;
    kc_reader_init(&r, md, sizeof md);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 12, true, &r, &mr, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(mr.topics.n, 1);
    assert_int_equal(mr.topics.v[0].topic_id.b[15], 9);
    assert_int_equal(mr.topics.v[0].name.len, 1);
    assert_true(mr.allow_auto_topic_creation);
    assert_false(mr.include_topic_authorized_operations);

    /* Unknown tag whose size runs past the frame. */
    static const uint8_t over[] = {0x03, 'c', 'l', 0x02, '1', 0x01, 0x05, 0x09, 0xaa};
    kc_reader_init(&r, over, sizeof over);
    assert_int_equal(kc_decode(&kp_ApiVersionsRequest_desc, 3, true, &r, &req, a), SK_ERR_PARSE);
    assert_int_equal(r.err_at, 6);
    sk_arena_destroy(a);
}

static void test_nullable_struct(void **state)
{
    (void)state;
    static const uint8_t nul[] = {0x01, 0x00, 0x00, 0x07, 0xd0, 0xff, 0x00};
    static const uint8_t set[] = {0x01, 0x00, 0x00, 0x00, 0x0a, 0x01, 0x02, 'a',
                                  0x00, 0x00, 0x00, 0x03, 0x00, 0x00};
    sk_arena *a = sk_arena_new(0);
    kp_DescribeTopicPartitionsRequest req;
    kc_reader r;
    kc_reader_init(&r, nul, sizeof nul);
    assert_int_equal(kc_decode(&kp_DescribeTopicPartitionsRequest_desc, 0, true, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_int_equal(req.topics.n, 0);
    assert_int_equal(req.response_partition_limit, 2000);
    assert_null(req.cursor);
    kc_reader_init(&r, set, sizeof set);
    assert_int_equal(kc_decode(&kp_DescribeTopicPartitionsRequest_desc, 0, true, &r, &req, a), 0);
    assert_ptr_equal(r.p, r.end);
    assert_non_null(req.cursor);
    assert_int_equal(req.cursor->topic_name.len, 1);
    assert_int_equal(req.cursor->partition_index, 3);
    uint8_t out[sizeof set];
    assert_int_equal(kc_size(&kp_DescribeTopicPartitionsRequest_desc, 0, true, &req), sizeof set);
    kc_encode(&kp_DescribeTopicPartitionsRequest_desc, 0, true, &req, out);
    assert_memory_equal(out, set, sizeof set);
    sk_arena_destroy(a);
}

static void test_hostile_counts(void **state)
{
    (void)state;
    /* Metadata v0: 2^31-1 topics in a 10-byte frame: refused before any
     * allocation. */
    static const uint8_t huge[] = {0x7f, 0xff, 0xff, 0xff, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00};
    sk_arena *a = sk_arena_new(1 << 20);
    kp_MetadataRequest mr;
    kc_reader r;
    kc_reader_init(&r, huge, sizeof huge);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &mr, a), SK_ERR_PARSE);
    assert_int_equal(r.err_at, 0);
    assert_int_equal(sk_arena_used(a), 0);
    /* Same in a flexible version: uvarint count 2^32-2. */
    static const uint8_t hugef[] = {0xff, 0xff, 0xff, 0xff, 0x0f, 0x00, 0x00, 0x00};
    kc_reader_init(&r, hugef, sizeof hugef);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 9, true, &r, &mr, a), SK_ERR_PARSE);
    assert_int_equal(sk_arena_used(a), 0);
    /* Negative counts other than -1, and string lengths past the frame. */
    static const uint8_t neg[] = {0xff, 0xff, 0xff, 0xfe};
    kc_reader_init(&r, neg, sizeof neg);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 1, false, &r, &mr, a), SK_ERR_PARSE);
    static const uint8_t longstr[] = {0x00, 0x00, 0x00, 0x01, 0x7f, 0xff, 'a'};
    kc_reader_init(&r, longstr, sizeof longstr);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &mr, a), SK_ERR_PARSE);
    assert_int_equal(r.err_at, 4);
    /* A null where the version does not allow it. */
    static const uint8_t nullname[] = {0x00, 0x00, 0x00, 0x01, 0xff, 0xff};
    kc_reader_init(&r, nullname, sizeof nullname);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &mr, a), SK_ERR_PARSE);
    sk_arena_destroy(a);

    /* A plausible count whose elements exceed the arena cap: SK_ERR_NOMEM. */
    uint8_t many[4 + 2 * 200];
    memset(many, 0, sizeof many);
    many[3] = 200;
    a = sk_arena_new(256);
    kc_reader_init(&r, many, sizeof many);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &mr, a), SK_ERR_NOMEM);
    sk_arena_destroy(a);
    a = sk_arena_new(0);
    kc_reader_init(&r, many, sizeof many);
    assert_int_equal(kc_decode(&kp_MetadataRequest_desc, 0, false, &r, &mr, a), 0);
    assert_int_equal(mr.topics.n, 200);
    sk_arena_destroy(a);
}

static void truncations(const char *what, const kc_struct *s, int16_t ver, bool flex)
{
    encoded e = roundtrip(what, s, ver, flex, false);
    sk_arena *a = sk_arena_new(0);
    void *out = sk_arena_alloc(a, s->size);
    for (size_t n = 0; n < e.len; n++) {
        uint8_t *copy = malloc(n ? n : 1); /* exact size, so ASan sees overreads */
        memcpy(copy, e.buf, n);
        kc_reader r;
        kc_reader_init(&r, copy, n);
        int rc = kc_decode(s, ver, flex, &r, out, a);
        CHECK(rc == SK_ERR_PARSE, "%s v%d truncated to %zu of %zu: rc %d", what, ver, n, e.len,
              rc);
        CHECK(r.err_at <= n, "%s v%d: err_at %zu past %zu", what, ver, r.err_at, n);
        free(copy);
        sk_arena_reset(a);
        out = sk_arena_alloc(a, s->size);
    }
    free(e.buf);
    sk_arena_destroy(a);
}

static void test_truncation(void **state)
{
    (void)state;
    truncations("ProduceRequest", &kp_ProduceRequest_desc, 3, false);
    truncations("ProduceRequest", &kp_ProduceRequest_desc, 9, true);
    truncations("ProduceResponse", &kp_ProduceResponse_desc, 10, true);
    truncations("FetchRequest", &kp_FetchRequest_desc, 15, true);
    truncations("FetchResponse", &kp_FetchResponse_desc, 4, false);
    truncations("FetchResponse", &kp_FetchResponse_desc, 16, true);
    truncations("MetadataResponse", &kp_MetadataResponse_desc, 12, true);
    truncations("ApiVersionsResponse", &kp_ApiVersionsResponse_desc, 3, true);
    truncations("JoinGroupRequest", &kp_JoinGroupRequest_desc, 6, true);
    truncations("DescribeTopicPartitionsResponse", &kp_DescribeTopicPartitionsResponse_desc, 0,
                true);
    truncations("ConsumerProtocolSubscription", &kp_ConsumerProtocolSubscription_desc, 3, false);
}

/* ------------------------------------------------- corpus generator */

static void write_corpus(const char *dir)
{
    int files = 0;
    for (int key = 0; key <= kc_api_max_key(); key++) {
        const kc_api *api = kc_api_get((int16_t)key);
        if (!api)
            continue;
        for (int16_t v = api->min_ver; v <= api->max_ver; v++) {
            bool flex = v >= api->flex_min;
            encoded body = roundtrip(api->name, api->req, v, flex, false);
            kc_req_header h = {.api_key = (int16_t)key,
                               .api_version = v,
                               .correlation_id = 1000 + v,
                               .client_id = {"skiff-gen", 9}};
            size_t hn = kc_req_header_size(&h, flex);
            uint8_t *frame = malloc(hn + body.len);
            assert_ptr_equal(kc_put_req_header(frame, &h, flex), frame + hn);
            memcpy(frame + hn, body.buf, body.len);
            char path[4096];
            snprintf(path, sizeof path, "%s/gen-%s-v%d.bin", dir, api->name, v);
            FILE *f = fopen(path, "wb");
            assert_non_null(f);
            assert_int_equal(fwrite(frame, 1, hn + body.len, f), hn + body.len);
            assert_int_equal(fclose(f), 0);
            free(frame);
            free(body.buf);
            files++;
        }
    }
    fprintf(stderr, "wrote %d seed frames into %s\n", files, dir);
}

static void test_gen_corpus(void **state)
{
    (void)state;
    const char *dir = getenv("SKIFF_GEN_CORPUS");
    if (!dir || !*dir) {
        skip();
        return;
    }
    write_corpus(dir);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_uvarint),
        cmocka_unit_test(test_varint_zigzag),
        cmocka_unit_test(test_varlong_zigzag),
        cmocka_unit_test(test_primitives),
        cmocka_unit_test(test_api_table),
        cmocka_unit_test(test_defaults),
        cmocka_unit_test(test_frame_apiversions_v3),
        cmocka_unit_test(test_frame_metadata_v0),
        cmocka_unit_test(test_frame_produce_v3),
        cmocka_unit_test(test_frame_produce_v9),
        cmocka_unit_test(test_frame_produce_v13),
        cmocka_unit_test(test_fetch_v16_leader_hint),
        cmocka_unit_test(test_encode_apiversions_response),
        cmocka_unit_test(test_fetch_response_segments_and_tags),
        cmocka_unit_test(test_unknown_tags_skipped),
        cmocka_unit_test(test_nullable_struct),
        cmocka_unit_test(test_hostile_counts),
        cmocka_unit_test(test_truncation),
        cmocka_unit_test(test_roundtrip_all_apis),
        cmocka_unit_test(test_roundtrip_data_schemas),
        cmocka_unit_test(test_gen_corpus),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
