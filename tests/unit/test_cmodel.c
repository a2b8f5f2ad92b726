#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>
#include <jansson.h>

#include "cmodel.h"
#include "sk_err.h"

#define P "/skiff/"

/* ---------------------------------------------------------------- helpers */

static kc_uuid tid(int n)
{
    kc_uuid u;
    for (int i = 0; i < 16; i++)
        u.b[i] = (uint8_t)(0xa0 + i);
    u.b[0] = (uint8_t)(n & 0xff);
    u.b[1] = (uint8_t)(n >> 8);
    return u;
}

static const kc_uuid *T1(void)
{
    static kc_uuid u;
    static const uint8_t b[16] = {0x00, 0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77,
                                  0x88, 0x99, 0xaa, 0xbb, 0xcc, 0xdd, 0xee, 0xff};
    memcpy(u.b, b, 16);
    return &u;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* Captures stderr (where sk_log writes) to count the model's log lines. */
static int cap_saved = -1;
static FILE *cap_f;

static void cap_begin(void)
{
    fflush(stderr);
    cap_f = tmpfile();
    assert_non_null(cap_f);
    cap_saved = dup(2);
    assert_true(dup2(fileno(cap_f), 2) >= 0);
}

/* Lines logged by module cmodel since cap_begin; the text goes to buf. */
static int cap_end(char *buf, size_t len)
{
    fflush(stderr);
    assert_true(dup2(cap_saved, 2) >= 0);
    close(cap_saved);
    rewind(cap_f);
    int n = 0;
    char line[4096];
    size_t used = 0;
    if (buf && len)
        buf[0] = 0;
    while (fgets(line, sizeof line, cap_f)) {
        if (strstr(line, "[cmodel]"))
            n++;
        size_t l = strlen(line);
        if (buf && used + l < len) {
            memcpy(buf + used, line, l + 1);
            used += l;
        }
    }
    fclose(cap_f);
    return n;
}

/* ---- change recorder: each side of a change as a line of text ---- */

static void describe(cm_change_kind k, const void *p, char *o, size_t n)
{
    if (!p) {
        snprintf(o, n, "-");
        return;
    }
    switch (k) {
    case CM_CH_CLUSTER_ID:
        snprintf(o, n, "cid %s", (const char *)p);
        break;
    case CM_CH_COUNTER: {
        const cm_counter *c = p;
        /* the header's promise: the pointer also reads as the int64 value */
        snprintf(o, n, "%s=%lld@%lld", c->name, (long long)*(const int64_t *)p,
                 (long long)c->mod_rev);
        break;
    }
    case CM_CH_CONTROLLER: {
        const cm_ctrl *c = p;
        snprintf(o, n, "ctrl %d log %lld@%lld", (int)*(const int32_t *)p, (long long)c->log,
                 (long long)c->mod_rev);
        break;
    }
    case CM_CH_NODE: {
        const cm_node *x = p;
        snprintf(o, n, "node %d %s log %lld l%d%s@%lld", (int)x->id, x->rack, (long long)x->log,
                 x->nlisteners, x->draining ? " draining" : "", (long long)x->mod_rev);
        break;
    }
    case CM_CH_LOG: {
        const cm_log *x = p;
        snprintf(o, n, "log %lld node %d %s cust %d%s@%lld", (long long)x->id, (int)x->node,
                 x->state == CM_LOG_DEAD ? "dead" : "live", (int)x->custodian,
                 x->kind == CM_LOG_PAYLOAD ? " payload" : "", (long long)x->mod_rev);
        break;
    }
    case CM_CH_TOPIC: {
        const cm_topic *x = p;
        snprintf(o, n, "topic %s p%d c%d@%lld", x->name, (int)x->partitions, x->nconfigs,
                 (long long)x->mod_rev);
        break;
    }
    case CM_CH_PART: {
        static const char *st[] = {"new", "active", "moving", "handoff"};
        const cm_part *x = p;
        snprintf(o, n, "part %02x/%d e%d n%d %s@%lld", x->topic.b[0], (int)x->index,
                 (int)x->epoch, (int)x->node, st[x->state], (long long)x->mod_rev);
        break;
    }
    case CM_CH_WALREF: {
        const cm_walref *x = p;
        snprintf(o, n, "walref %02x/%d/%lld lsn %lld@%lld", x->topic.b[0], (int)x->index,
                 (long long)x->log, (long long)x->lsn, (long long)x->mod_rev);
        break;
    }
    case CM_CH_PAYREF: {
        const cm_payref *x = p;
        snprintf(o, n, "payref %lld/%lld lsn %lld@%lld", (long long)x->plog, (long long)x->mlog,
                 (long long)x->lsn, (long long)x->mod_rev);
        break;
    }
    case CM_CH_BCONF: {
        const cm_bconf *x = p;
        snprintf(o, n, "bconf %d %s=%s@%lld", (int)x->node, x->nconfigs ? x->names[0] : "",
                 x->nconfigs ? x->values[0] : "", (long long)x->mod_rev);
        break;
    }
    }
}

typedef struct rec {
    cm_change_kind kind;
    char was[320], now[320];
} rec;

typedef struct ctx {
    cm_model *m;
    rec r[64];
    size_t n;                 /* every change, even beyond r */
    size_t dels, adds, chgs;
    int model_mismatch;       /* a PART change the model did not already show */
} ctx;

static void on_change(void *arg, const cm_change *c)
{
    ctx *x = arg;
    if (x->n < 64) {
        rec *r = &x->r[x->n];
        r->kind = c->kind;
        describe(c->kind, c->was, r->was, sizeof r->was);
        describe(c->kind, c->now, r->now, sizeof r->now);
    }
    x->n++;
    if (!c->now)
        x->dels++;
    else if (!c->was)
        x->adds++;
    else
        x->chgs++;
    if (c->kind == CM_CH_PART) {
        const cm_part *p = c->now ? c->now : c->was;
        if (cm_part_get(x->m, &p->topic, p->index) != c->now)
            x->model_mismatch++;
    }
}

static void expect(ctx *x, size_t i, cm_change_kind k, const char *was, const char *now)
{
    assert_true(i < x->n);
    assert_int_equal(x->r[i].kind, k);
    assert_string_equal(x->r[i].was, was);
    assert_string_equal(x->r[i].now, now);
}

static cm_model *model(ctx *x)
{
    memset(x, 0, sizeof *x);
    x->m = cm_new(P, on_change, x);
    assert_non_null(x->m);
    return x->m;
}

/* ---- putting values of each kind through their key builder and encoder ---- */

static int put_raw(cm_model *m, const char *key, const char *val, int64_t rev)
{
    return cm_apply_put(m, (const uint8_t *)key, strlen(key), (const uint8_t *)val, strlen(val),
                        rev);
}

static int del_raw(cm_model *m, const char *key, int64_t rev)
{
    return cm_apply_delete(m, (const uint8_t *)key, strlen(key), rev);
}

static int put_enc(cm_model *m, const char *key, size_t klen, char *val, int64_t rev)
{
    assert_true(klen > 0);
    assert_non_null(val);
    int rc = put_raw(m, key, val, rev);
    free(val);
    return rc;
}

static int put_node(cm_model *m, int32_t id, const char *rack, int64_t log, bool draining,
                    int64_t rev)
{
    cm_node nd = {.id = id, .log = log, .nlisteners = 1, .draining = draining,
                  .started_ms = 1700000000000};
    snprintf(nd.rack, sizeof nd.rack, "%s", rack);
    snprintf(nd.listeners[0].name, sizeof nd.listeners[0].name, "PLAINTEXT");
    snprintf(nd.listeners[0].host, sizeof nd.listeners[0].host, "node%d.local", (int)id);
    nd.listeners[0].port = 9092;
    char k[256];
    return put_enc(m, k, cm_key_node(P, id, k, sizeof k), cm_encode_node(&nd), rev);
}

static int put_logk(cm_model *m, int64_t id, int32_t node, cm_log_state st, int32_t cust,
                    cm_log_kind kind, int64_t rev)
{
    cm_log l = {.id = id, .node = node, .state = st, .custodian = cust, .kind = kind};
    snprintf(l.rack, sizeof l.rack, "az1");
    char k[256];
    return put_enc(m, k, cm_key_log(P, id, k, sizeof k), cm_encode_log(&l), rev);
}

static int put_log(cm_model *m, int64_t id, int32_t node, cm_log_state st, int32_t cust,
                   int64_t rev)
{
    return put_logk(m, id, node, st, cust, CM_LOG_DATA, rev);
}

static int put_topic(cm_model *m, const char *name, kc_uuid id, int32_t parts, int64_t rev)
{
    char *names[] = {"retention.ms", "cleanup.policy"}, *values[] = {"1000", "delete"};
    cm_topic t = {.id = id, .partitions = parts, .rf = 3, .first_stream = 100, .nconfigs = 2,
                  .config_names = names, .config_values = values};
    snprintf(t.name, sizeof t.name, "%s", name);
    char k[512];
    return put_enc(m, k, cm_key_topic(P, name, k, sizeof k), cm_encode_topic(&t), rev);
}

static int put_part(cm_model *m, kc_uuid topic, int32_t index, int32_t epoch, int32_t node,
                    cm_part_state st, int64_t rev)
{
    cm_part p = {.topic = topic, .index = index, .epoch = epoch, .node = node, .state = st,
                 .log = st == CM_PART_ACTIVE ? 10 : 0, .stream = 100 + (uint64_t)index};
    char k[256];
    return put_enc(m, k, cm_key_part(P, &topic, index, k, sizeof k), cm_encode_part(&p), rev);
}

static int del_part(cm_model *m, kc_uuid topic, int32_t index, int64_t rev)
{
    char k[256];
    assert_true(cm_key_part(P, &topic, index, k, sizeof k) > 0);
    return del_raw(m, k, rev);
}

static int put_walref(cm_model *m, kc_uuid topic, int32_t index, int64_t log, int64_t lsn,
                      int64_t rev)
{
    char k[256];
    return put_enc(m, k, cm_key_walref(P, &topic, index, log, k, sizeof k),
                   cm_encode_walref(lsn), rev);
}

static int put_payref(cm_model *m, int64_t plog, int64_t mlog, int64_t lsn, int64_t rev)
{
    char k[256];
    return put_enc(m, k, cm_key_payref(P, plog, mlog, k, sizeof k), cm_encode_payref(lsn), rev);
}

static int del_payref(cm_model *m, int64_t plog, int64_t mlog, int64_t rev)
{
    char k[256];
    assert_true(cm_key_payref(P, plog, mlog, k, sizeof k) > 0);
    return del_raw(m, k, rev);
}

static int put_bconf(cm_model *m, int32_t node, const char *value, int64_t rev)
{
    char *names[] = {"log.retention.ms"}, *values[] = {(char *)value};
    char k[256];
    return put_enc(m, k, cm_key_bconf(P, node, k, sizeof k), cm_encode_bconf(1, names, values),
                   rev);
}

static int put_counter(cm_model *m, const char *name, int64_t next, int64_t rev)
{
    char k[256];
    return put_enc(m, k, cm_key_counter(P, name, k, sizeof k), cm_encode_counter(next), rev);
}

static int put_ctrl(cm_model *m, int32_t node, int64_t log, int64_t rev)
{
    char k[256];
    return put_enc(m, k, cm_key_controller(P, k, sizeof k), cm_encode_controller(node, log), rev);
}

static int put_cid(cm_model *m, const char *id, int64_t rev)
{
    char k[256];
    return put_enc(m, k, cm_key_cluster_id(P, k, sizeof k), cm_encode_cluster_id(id), rev);
}

/* ---------------------------------------------------------------- keys */

static void test_keys(void **state)
{
    (void)state;
    char b[512];
    const kc_uuid *t = T1();
#define KEY(call, want)                                  \
    do {                                                 \
        assert_int_equal((call), strlen(want));          \
        assert_string_equal(b, want);                    \
    } while (0)
    KEY(cm_key_cluster_id(P, b, sizeof b), "/skiff/cluster/id");
    KEY(cm_key_counter(P, "next_log", b, sizeof b), "/skiff/cluster/next_log");
    KEY(cm_key_counter(P, "next_stream", b, sizeof b), "/skiff/cluster/next_stream");
    KEY(cm_key_node(P, 3, b, sizeof b), "/skiff/nodes/3");
    KEY(cm_key_node(P, 0, b, sizeof b), "/skiff/nodes/0");
    KEY(cm_key_controller(P, b, sizeof b), "/skiff/controller");
    KEY(cm_key_log(P, 42, b, sizeof b), "/skiff/logs/42");
    KEY(cm_key_log(P, INT64_MAX, b, sizeof b), "/skiff/logs/9223372036854775807");
    KEY(cm_key_topic(P, "orders.v2_x-y", b, sizeof b), "/skiff/topics/orders.v2_x-y");
    KEY(cm_key_part(P, t, 7, b, sizeof b), "/skiff/parts/00112233445566778899aabbccddeeff/7");
    KEY(cm_key_topic_parts(P, t, b, sizeof b), "/skiff/parts/00112233445566778899aabbccddeeff/");
    KEY(cm_key_walref(P, t, 7, 12, b, sizeof b),
        "/skiff/walrefs/00112233445566778899aabbccddeeff-7/12");
    KEY(cm_key_part_walrefs(P, t, 7, b, sizeof b),
        "/skiff/walrefs/00112233445566778899aabbccddeeff-7/");
    KEY(cm_key_payref(P, 12, 3, b, sizeof b), "/skiff/payrefs/12/3");
    KEY(cm_key_payref(P, 0, INT64_MAX, b, sizeof b), "/skiff/payrefs/0/9223372036854775807");
    KEY(cm_key_log_payrefs(P, 12, b, sizeof b), "/skiff/payrefs/12/");
    KEY(cm_key_bconf(P, 2, b, sizeof b), "/skiff/config/broker/2");
    KEY(cm_key_bconf(P, -1, b, sizeof b), "/skiff/config/broker/default");
    KEY(cm_key_node("/other/prefix/", 1, b, sizeof b), "/other/prefix/nodes/1");

    /* The longest topic name fits; one more character is not a topic name. */
    char name[CM_TOPIC_MAX + 2];
    memset(name, 'a', CM_TOPIC_MAX);
    name[CM_TOPIC_MAX] = 0;
    assert_int_equal(cm_key_topic(P, name, b, sizeof b), strlen(P "topics/") + CM_TOPIC_MAX);
    name[CM_TOPIC_MAX] = 'a';
    name[CM_TOPIC_MAX + 1] = 0;
    strcpy(b, "junk");
    assert_int_equal(cm_key_topic(P, name, b, sizeof b), 0);
    assert_string_equal(b, "");

    /* Arguments the model would not read back. */
    const char *bad_topics[] = {"", ".", "..", "a/b", "sp ace", "é"};
    for (size_t i = 0; i < sizeof bad_topics / sizeof *bad_topics; i++)
        assert_int_equal(cm_key_topic(P, bad_topics[i], b, sizeof b), 0);
    assert_int_equal(cm_key_node(P, -1, b, sizeof b), 0);
    assert_int_equal(cm_key_log(P, -5, b, sizeof b), 0);
    assert_int_equal(cm_key_part(P, t, -1, b, sizeof b), 0);
    assert_int_equal(cm_key_walref(P, t, 0, -1, b, sizeof b), 0);
    assert_int_equal(cm_key_payref(P, -1, 3, b, sizeof b), 0);
    assert_int_equal(cm_key_payref(P, 12, -1, b, sizeof b), 0);
    assert_int_equal(cm_key_log_payrefs(P, -1, b, sizeof b), 0);
    assert_int_equal(cm_key_bconf(P, -2, b, sizeof b), 0);
    assert_int_equal(cm_key_counter(P, "id", b, sizeof b), 0);
    assert_int_equal(cm_key_counter(P, "next_", b, sizeof b), 0);
    assert_int_equal(cm_key_counter(P, "next_Log", b, sizeof b), 0);
    assert_int_equal(cm_key_counter(P, "next_a/b", b, sizeof b), 0);
    assert_int_equal(cm_key_counter(P, "next_aaaaaaaaaaaaaaaaaaaaaaaaaaaa", b, sizeof b), 0);

    /* Truncation: exactly the key and its NUL fit, one byte less does not. */
    const char *want = "/skiff/parts/00112233445566778899aabbccddeeff/7";
    size_t wl = strlen(want);
    char small[128];
    assert_int_equal(cm_key_part(P, t, 7, small, wl + 1), wl);
    assert_string_equal(small, want);
    memset(small, 'x', sizeof small);
    assert_int_equal(cm_key_part(P, t, 7, small, wl), 0);
    assert_int_equal(small[0], 0);
    assert_int_equal(cm_key_cluster_id(P, small, 5), 0);
    assert_int_equal(cm_key_controller(P, small, 0), 0);
    assert_int_equal(cm_key_walref(P, t, 7, 12, small, 20), 0);
    assert_int_equal(cm_key_payref(P, 12, 3, small, strlen("/skiff/payrefs/12/3")), 0);
    assert_int_equal(small[0], 0);
    assert_int_equal(cm_key_log_payrefs(P, 12, small, 10), 0);
    assert_int_equal(cm_key_bconf(P, -1, small, 10), 0);
#undef KEY
}

/* ---------------------------------------------------------------- codecs */

static void test_roundtrip_scalars(void **state)
{
    (void)state;
    char *s = cm_encode_cluster_id("MkU3OEVBNTcwNTJENDM2Qk");
    assert_string_equal(s, "{\"id\":\"MkU3OEVBNTcwNTJENDM2Qk\"}");
    char id[CM_CLUSTER_ID_MAX];
    assert_int_equal(cm_decode_cluster_id((uint8_t *)s, strlen(s), id, sizeof id), 0);
    assert_string_equal(id, "MkU3OEVBNTcwNTJENDM2Qk");
    char tiny[8];
    assert_int_equal(cm_decode_cluster_id((uint8_t *)s, strlen(s), tiny, sizeof tiny),
                     SK_ERR_PARSE);
    free(s);
    assert_null(cm_encode_cluster_id(""));
    assert_null(cm_encode_cluster_id("has space"));

    s = cm_encode_counter(42);
    assert_string_equal(s, "{\"next\":42}");
    int64_t next = 0;
    assert_int_equal(cm_decode_counter((uint8_t *)s, strlen(s), &next), 0);
    assert_int_equal(next, 42);
    free(s);
    s = cm_encode_counter(INT64_MAX);
    assert_int_equal(cm_decode_counter((uint8_t *)s, strlen(s), &next), 0);
    assert_true(next == INT64_MAX);
    free(s);
    assert_null(cm_encode_counter(-1));

    s = cm_encode_controller(3, 77);
    assert_string_equal(s, "{\"node\":3,\"log\":77}");
    int32_t node = 0;
    int64_t log = 0;
    assert_int_equal(cm_decode_controller((uint8_t *)s, strlen(s), &node, &log), 0);
    assert_int_equal(node, 3);
    assert_int_equal(log, 77);
    free(s);
    assert_null(cm_encode_controller(-1, 1));

    s = cm_encode_walref(4096);
    assert_string_equal(s, "{\"lsn\":4096}");
    cm_walref w;
    assert_int_equal(cm_decode_walref((uint8_t *)s, strlen(s), T1(), 7, 12, &w), 0);
    assert_memory_equal(&w.topic, T1(), sizeof w.topic);
    assert_int_equal(w.index, 7);
    assert_int_equal(w.log, 12);
    assert_int_equal(w.lsn, 4096);
    assert_int_equal(w.mod_rev, 0);
    free(s);
    assert_null(cm_encode_walref(-1));

    s = cm_encode_payref(4096);
    assert_string_equal(s, "{\"lsn\":4096}");
    cm_payref pr;
    assert_int_equal(cm_decode_payref((uint8_t *)s, strlen(s), 12, 3, &pr), 0);
    assert_int_equal(pr.plog, 12);
    assert_int_equal(pr.mlog, 3);
    assert_int_equal(pr.lsn, 4096);
    assert_int_equal(pr.mod_rev, 0);
    /* Ids come from the key: negative ones are refused. */
    assert_int_equal(cm_decode_payref((uint8_t *)s, strlen(s), -1, 3, &pr), SK_ERR_PARSE);
    assert_int_equal(cm_decode_payref((uint8_t *)s, strlen(s), 12, -1, &pr), SK_ERR_PARSE);
    free(s);
    s = cm_encode_payref(0);
    assert_string_equal(s, "{\"lsn\":0}");
    free(s);
    s = cm_encode_payref(INT64_MAX);
    assert_int_equal(cm_decode_payref((uint8_t *)s, strlen(s), 0, 0, &pr), 0);
    assert_true(pr.lsn == INT64_MAX);
    free(s);
    assert_null(cm_encode_payref(-1));
}

static void test_roundtrip_node_log(void **state)
{
    (void)state;
    cm_node nd = {.id = 4, .log = 17, .nlisteners = 2, .draining = true, .started_ms = 123456789};
    strcpy(nd.rack, "eu-west-1a");
    nd.listeners[0] = (cm_listener){.name = "PLAINTEXT", .host = "10.0.0.4", .port = 9092};
    nd.listeners[1] = (cm_listener){.name = "INTERNAL", .host = "node4.internal", .port = 19092};
    char *s = cm_encode_node(&nd);
    assert_string_equal(s, "{\"id\":4,\"rack\":\"eu-west-1a\",\"log\":17,\"listeners\":"
                           "[{\"name\":\"PLAINTEXT\",\"host\":\"10.0.0.4\",\"port\":9092},"
                           "{\"name\":\"INTERNAL\",\"host\":\"node4.internal\",\"port\":19092}],"
                           "\"draining\":true,\"started_ms\":123456789}");
    cm_node back;
    assert_int_equal(cm_decode_node((uint8_t *)s, strlen(s), 4, &back), 0);
    assert_int_equal(back.id, 4);
    assert_string_equal(back.rack, "eu-west-1a");
    assert_int_equal(back.log, 17);
    assert_int_equal(back.nlisteners, 2);
    assert_string_equal(back.listeners[1].name, "INTERNAL");
    assert_string_equal(back.listeners[1].host, "node4.internal");
    assert_int_equal(back.listeners[1].port, 19092);
    assert_true(back.draining);
    assert_int_equal(back.started_ms, 123456789);
    /* The key's id must be the value's. */
    assert_int_equal(cm_decode_node((uint8_t *)s, strlen(s), 5, &back), SK_ERR_PARSE);
    free(s);

    /* No rack, no listeners: still a node. */
    cm_node bare = {.id = 0};
    s = cm_encode_node(&bare);
    assert_int_equal(cm_decode_node((uint8_t *)s, strlen(s), 0, &back), 0);
    assert_string_equal(back.rack, "");
    assert_int_equal(back.nlisteners, 0);
    free(s);

    /* Encoders refuse what no decoder would read. */
    cm_node bad = nd;
    memset(bad.rack, 'r', sizeof bad.rack); /* no NUL inside the buffer */
    assert_null(cm_encode_node(&bad));
    bad = nd;
    bad.listeners[0].port = 0;
    assert_null(cm_encode_node(&bad));
    bad = nd;
    bad.nlisteners = CM_MAX_LISTENERS + 1;
    assert_null(cm_encode_node(&bad));
    bad = nd;
    bad.id = -3;
    assert_null(cm_encode_node(&bad));

    cm_log l = {.id = 9, .node = 2, .state = CM_LOG_DEAD, .custodian = -1};
    strcpy(l.rack, "az2");
    s = cm_encode_log(&l);
    assert_string_equal(s, "{\"node\":2,\"rack\":\"az2\",\"state\":\"dead\",\"custodian\":-1,"
                           "\"kind\":\"data\"}");
    cm_log lb;
    assert_int_equal(cm_decode_log((uint8_t *)s, strlen(s), 9, &lb), 0);
    assert_int_equal(lb.id, 9);
    assert_int_equal(lb.node, 2);
    assert_string_equal(lb.rack, "az2");
    assert_int_equal(lb.state, CM_LOG_DEAD);
    assert_int_equal(lb.custodian, -1);
    assert_int_equal(lb.kind, CM_LOG_DATA);
    free(s);
    /* A payload log; and a value without "kind" (written before it) is a data log's. */
    l.kind = CM_LOG_PAYLOAD;
    s = cm_encode_log(&l);
    assert_string_equal(s, "{\"node\":2,\"rack\":\"az2\",\"state\":\"dead\",\"custodian\":-1,"
                           "\"kind\":\"payload\"}");
    assert_int_equal(cm_decode_log((uint8_t *)s, strlen(s), 9, &lb), 0);
    assert_int_equal(lb.kind, CM_LOG_PAYLOAD);
    free(s);
    const char *old = "{\"node\":2,\"rack\":\"az2\",\"state\":\"live\",\"custodian\":-1}";
    lb.kind = CM_LOG_PAYLOAD;
    assert_int_equal(cm_decode_log((const uint8_t *)old, strlen(old), 9, &lb), 0);
    assert_int_equal(lb.kind, CM_LOG_DATA);
    l.kind = (cm_log_kind)2;
    assert_null(cm_encode_log(&l));
    l.kind = CM_LOG_DATA;
    l.state = CM_LOG_LIVE;
    l.custodian = 5;
    s = cm_encode_log(&l);
    assert_int_equal(cm_decode_log((uint8_t *)s, strlen(s), 9, &lb), 0);
    assert_int_equal(lb.state, CM_LOG_LIVE);
    assert_int_equal(lb.custodian, 5);
    free(s);
    l.state = (cm_log_state)7;
    assert_null(cm_encode_log(&l));
}

static void test_roundtrip_topic_part_bconf(void **state)
{
    (void)state;
    char *names[] = {"retention.ms", "cleanup.policy", "min.insync.replicas"};
    char *values[] = {"86400000", "compact,delete", ""};
    cm_topic t = {.id = *T1(), .partitions = 12, .rf = 3, .first_stream = 5000,
                  .internal = true, .nconfigs = 3, .config_names = names,
                  .config_values = values};
    strcpy(t.name, "__consumer_offsets");
    char *s = cm_encode_topic(&t);
    assert_string_equal(s, "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":12,"
                           "\"rf\":3,\"first_stream\":5000,\"internal\":true,\"configs\":"
                           "{\"retention.ms\":\"86400000\",\"cleanup.policy\":\"compact,delete\","
                           "\"min.insync.replicas\":\"\"}}");
    cm_topic tb;
    assert_int_equal(cm_decode_topic((uint8_t *)s, strlen(s), "__consumer_offsets", &tb), 0);
    assert_string_equal(tb.name, "__consumer_offsets");
    assert_memory_equal(&tb.id, T1(), 16);
    assert_int_equal(tb.partitions, 12);
    assert_int_equal(tb.rf, 3);
    assert_true(tb.first_stream == 5000);
    assert_true(tb.internal);
    assert_int_equal(tb.nconfigs, 3);
    for (int i = 0; i < 3; i++) {
        assert_string_equal(tb.config_names[i], names[i]);
        assert_string_equal(tb.config_values[i], values[i]);
    }
    cm_topic_clear(&tb);
    assert_int_equal(tb.nconfigs, 0);
    assert_null(tb.config_names);
    /* An invalid name from the key is refused. */
    assert_int_equal(cm_decode_topic((uint8_t *)s, strlen(s), "a b", &tb), SK_ERR_PARSE);
    free(s);

    t.nconfigs = 0;
    t.internal = false;
    s = cm_encode_topic(&t);
    assert_non_null(strstr(s, "\"configs\":{}"));
    assert_int_equal(cm_decode_topic((uint8_t *)s, strlen(s), "__consumer_offsets", &tb), 0);
    assert_int_equal(tb.nconfigs, 0);
    assert_false(tb.internal);
    cm_topic_clear(&tb);
    free(s);

    cm_topic bad = t;
    bad.partitions = 0;
    assert_null(cm_encode_topic(&bad));
    bad = t;
    strcpy(bad.name, "no/slash");
    assert_null(cm_encode_topic(&bad));
    bad = t;
    memset(&bad.id, 0, sizeof bad.id);
    assert_null(cm_encode_topic(&bad));
    bad = t;
    bad.first_stream = (uint64_t)INT64_MAX + 1;
    assert_null(cm_encode_topic(&bad));
    char *dup_names[] = {"a", "a"}, *dup_values[] = {"1", "2"};
    bad = t;
    bad.nconfigs = 2;
    bad.config_names = dup_names;
    bad.config_values = dup_values;
    assert_null(cm_encode_topic(&bad));

    /* Every state of a partition. */
    for (int st = CM_PART_NEW; st <= CM_PART_HANDOFF; st++) {
        cm_part p = {.topic = *T1(), .index = 5, .epoch = 3, .node = st == 0 ? -1 : 2,
                     .log = 7, .state = (cm_part_state)st, .stream = 1ull << 40,
                     .src_log = 6, .src_lsn = 1234567};
        s = cm_encode_part(&p);
        cm_part pb;
        assert_int_equal(cm_decode_part((uint8_t *)s, strlen(s), T1(), 5, &pb), 0);
        assert_memory_equal(&pb.topic, T1(), 16);
        assert_int_equal(pb.index, 5);
        assert_int_equal(pb.epoch, 3);
        assert_int_equal(pb.node, p.node);
        assert_int_equal(pb.log, 7);
        assert_int_equal(pb.state, st);
        assert_true(pb.stream == 1ull << 40);
        assert_int_equal(pb.src_log, 6);
        assert_int_equal(pb.src_lsn, 1234567);
        assert_false(pb.has_pref); /* absent: written before it existed */
        if (st == CM_PART_HANDOFF)
            assert_string_equal(s, "{\"epoch\":3,\"node\":2,\"log\":7,\"state\":\"handoff\","
                                   "\"stream\":1099511627776,\"src_log\":6,\"src_lsn\":1234567}");
        free(s);
    }
    /* The preferred node: optional, 0 to 2^31-1. */
    cm_part pp = {.topic = *T1(), .index = 1, .epoch = 2, .node = 3, .log = 4,
                  .state = CM_PART_ACTIVE, .stream = 5, .has_pref = true, .pref = 0};
    s = cm_encode_part(&pp);
    assert_string_equal(s, "{\"epoch\":2,\"node\":3,\"log\":4,\"state\":\"active\","
                           "\"stream\":5,\"src_log\":0,\"src_lsn\":0,\"pref\":0}");
    cm_part ppb;
    assert_int_equal(cm_decode_part((uint8_t *)s, strlen(s), T1(), 1, &ppb), 0);
    assert_true(ppb.has_pref);
    assert_int_equal(ppb.pref, 0);
    free(s);
    pp.pref = -1;
    assert_null(cm_encode_part(&pp));
    const char *badpref = "{\"epoch\":2,\"node\":3,\"log\":4,\"state\":\"active\","
                          "\"stream\":5,\"src_log\":0,\"src_lsn\":0,\"pref\":\"x\"}";
    assert_int_equal(cm_decode_part((const uint8_t *)badpref, strlen(badpref), T1(), 1, &ppb),
                     SK_ERR_PARSE);
    cm_part badp = {.topic = *T1(), .state = (cm_part_state)4};
    assert_null(cm_encode_part(&badp));
    badp.state = CM_PART_NEW;
    badp.node = -2;
    assert_null(cm_encode_part(&badp));

    char *bn[] = {"log.retention.ms", "num.io.threads"}, *bv[] = {"1000", "8"};
    s = cm_encode_bconf(2, bn, bv);
    assert_string_equal(s, "{\"log.retention.ms\":\"1000\",\"num.io.threads\":\"8\"}");
    cm_bconf b;
    assert_int_equal(cm_decode_bconf((uint8_t *)s, strlen(s), -1, &b), 0);
    assert_int_equal(b.node, -1);
    assert_int_equal(b.nconfigs, 2);
    assert_string_equal(b.names[1], "num.io.threads");
    assert_string_equal(b.values[1], "8");
    cm_bconf_clear(&b);
    free(s);
    s = cm_encode_bconf(0, NULL, NULL);
    assert_string_equal(s, "{}");
    assert_int_equal(cm_decode_bconf((uint8_t *)s, strlen(s), 3, &b), 0);
    assert_int_equal(b.node, 3);
    assert_int_equal(b.nconfigs, 0);
    free(s);
    char *empty[] = {""};
    assert_null(cm_encode_bconf(1, empty, bv));
    assert_null(cm_encode_bconf(2, dup_names, dup_values));
    assert_null(cm_encode_bconf(-1, NULL, NULL));
}

/* ---- generic decoding checks over every kind's fields ---- */

static int d_cid(const char *s)
{
    char id[CM_CLUSTER_ID_MAX];
    return cm_decode_cluster_id((const uint8_t *)s, strlen(s), id, sizeof id);
}
static int d_counter(const char *s)
{
    int64_t n;
    return cm_decode_counter((const uint8_t *)s, strlen(s), &n);
}
static int d_node(const char *s)
{
    cm_node n;
    return cm_decode_node((const uint8_t *)s, strlen(s), 4, &n);
}
static int d_ctrl(const char *s)
{
    int32_t n;
    int64_t l;
    return cm_decode_controller((const uint8_t *)s, strlen(s), &n, &l);
}
static int d_log(const char *s)
{
    cm_log l;
    return cm_decode_log((const uint8_t *)s, strlen(s), 9, &l);
}
static int d_topic(const char *s)
{
    cm_topic t;
    int rc = cm_decode_topic((const uint8_t *)s, strlen(s), "orders", &t);
    cm_topic_clear(&t);
    return rc;
}
static int d_part(const char *s)
{
    cm_part p;
    return cm_decode_part((const uint8_t *)s, strlen(s), T1(), 0, &p);
}
static int d_walref(const char *s)
{
    cm_walref w;
    return cm_decode_walref((const uint8_t *)s, strlen(s), T1(), 0, 1, &w);
}
static int d_payref(const char *s)
{
    cm_payref p;
    return cm_decode_payref((const uint8_t *)s, strlen(s), 1, 0, &p);
}
static int d_bconf(const char *s)
{
    cm_bconf b;
    int rc = cm_decode_bconf((const uint8_t *)s, strlen(s), 1, &b);
    cm_bconf_clear(&b);
    return rc;
}

static const char *const V_CID = "{\"id\":\"MkU3OEVBNTcwNTJENDM2Qk\"}";
static const char *const V_COUNTER = "{\"next\":5}";
static const char *const V_NODE =
    "{\"id\":4,\"rack\":\"a\",\"log\":1,\"listeners\":[{\"name\":\"P\",\"host\":\"h\","
    "\"port\":9092}],\"draining\":false,\"started_ms\":5}";
static const char *const V_CTRL = "{\"node\":1,\"log\":2}";
static const char *const V_LOG = "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1}";
static const char *const V_TOPIC =
    "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":3,\"rf\":1,"
    "\"first_stream\":0,\"internal\":false,\"configs\":{\"retention.ms\":\"5\"}}";
static const char *const V_PART = "{\"epoch\":1,\"node\":2,\"log\":3,\"state\":\"active\","
                                  "\"stream\":4,\"src_log\":0,\"src_lsn\":0}";
static const char *const V_WALREF = "{\"lsn\":7}";
static const char *const V_PAYREF = "{\"lsn\":0}";
static const char *const V_PLOG =
    "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,\"kind\":\"payload\"}";

/* Every kind whose value has named fields, in the order of valid_of(). */
static const struct kind_case {
    const char *what;
    int (*dec)(const char *);
} kinds[] = {
    {"cluster id", d_cid}, {"counter", d_counter}, {"node", d_node},   {"controller", d_ctrl},
    {"log", d_log},        {"topic", d_topic},     {"part", d_part},   {"walref", d_walref},
    {"payref", d_payref},
};

static const char *valid_of(size_t i)
{
    const char *v[] = {V_CID,  V_COUNTER, V_NODE,   V_CTRL,  V_LOG,
                       V_TOPIC, V_PART,   V_WALREF, V_PAYREF};
    return v[i];
}

static int dec_json(int (*dec)(const char *), json_t *o)
{
    char *s = json_dumps(o, JSON_COMPACT);
    assert_non_null(s);
    int rc = dec(s);
    free(s);
    return rc;
}

static void test_decode_unknown_fields(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        json_t *o = json_loads(valid_of(i), 0, NULL);
        assert_non_null(o);
        assert_int_equal(kinds[i].dec(valid_of(i)), 0);
        /* What a newer node might add: more fields, of any type. */
        json_object_set_new(o, "zone_v2", json_pack("{s:[i,i],s:n}", "x", 1, 2, "y"));
        json_object_set_new(o, "weight", json_real(0.5));
        json_object_set_new(o, "flag", json_null());
        assert_int_equal(dec_json(kinds[i].dec, o), 0);
        json_decref(o);
    }
    /* Inside a listener too; and the values read are still right. */
    const char *s = "{\"id\":4,\"rack\":\"a\",\"log\":1,\"listeners\":[{\"name\":\"P\","
                    "\"host\":\"h\",\"port\":9092,\"protocol\":\"SSL\",\"weight\":3}],"
                    "\"draining\":false,\"started_ms\":5,\"version\":{\"major\":2}}";
    cm_node n;
    assert_int_equal(cm_decode_node((const uint8_t *)s, strlen(s), 4, &n), 0);
    assert_int_equal(n.listeners[0].port, 9092);
    assert_string_equal(n.listeners[0].host, "h");
    const char *p = "{\"epoch\":9,\"node\":2,\"log\":3,\"state\":\"moving\",\"stream\":4,"
                    "\"src_log\":8,\"src_lsn\":0,\"target_zone\":\"b\",\"hint\":[1]}";
    cm_part pt;
    assert_int_equal(cm_decode_part((const uint8_t *)p, strlen(p), T1(), 3, &pt), 0);
    assert_int_equal(pt.epoch, 9);
    assert_int_equal(pt.state, CM_PART_MOVING);
    assert_int_equal(pt.src_log, 8);
}

static void test_decode_missing_and_wrong_types(void **state)
{
    (void)state;
    for (size_t i = 0; i < sizeof kinds / sizeof *kinds; i++) {
        json_t *o = json_loads(valid_of(i), 0, NULL);
        const char *f;
        json_t *v;
        size_t nfields = 0;
        json_object_foreach(o, f, v) {
            nfields++;
            /* Missing. */
            json_t *c = json_deep_copy(o);
            json_object_del(c, f);
            if (dec_json(kinds[i].dec, c) != SK_ERR_PARSE)
                fail_msg("%s without \"%s\" was accepted", kinds[i].what, f);
            json_decref(c);
            /* Every other JSON type in its place. */
            json_t *wrong[] = {json_string("1"), json_integer(1), json_real(1.0), json_true(),
                               json_null(),      json_array(),     json_object()};
            for (size_t w = 0; w < sizeof wrong / sizeof *wrong; w++) {
                bool same = json_typeof(wrong[w]) == json_typeof(v) ||
                            (json_is_boolean(wrong[w]) && json_is_boolean(v));
                if (!same) {
                    c = json_deep_copy(o);
                    json_object_set(c, f, wrong[w]);
                    if (dec_json(kinds[i].dec, c) != SK_ERR_PARSE)
                        fail_msg("%s with \"%s\" of JSON type %d was accepted", kinds[i].what,
                                 f, (int)json_typeof(wrong[w]));
                    json_decref(c);
                }
                json_decref(wrong[w]);
            }
        }
        assert_true(nfields >= 1);
        json_decref(o);
    }
    /* A listener's fields likewise. */
    const char *lf[] = {"name", "host", "port"};
    for (size_t i = 0; i < 3; i++) {
        json_t *o = json_loads(V_NODE, 0, NULL);
        json_object_del(json_array_get(json_object_get(o, "listeners"), 0), lf[i]);
        assert_int_equal(dec_json(d_node, o), SK_ERR_PARSE);
        json_decref(o);
        o = json_loads(V_NODE, 0, NULL);
        json_object_set_new(json_array_get(json_object_get(o, "listeners"), 0), lf[i],
                            i == 2 ? json_string("9092") : json_integer(1));
        assert_int_equal(dec_json(d_node, o), SK_ERR_PARSE);
        json_decref(o);
    }
    /* A log's "kind" may be missing (a data log), but not of another type. */
    json_t *o = json_loads(V_PLOG, 0, NULL);
    assert_int_equal(dec_json(d_log, o), 0);
    json_object_del(o, "kind");
    assert_int_equal(dec_json(d_log, o), 0);
    json_t *wrong[] = {json_integer(1), json_real(1.0), json_true(),
                       json_null(),     json_array(),   json_object()};
    for (size_t w = 0; w < sizeof wrong / sizeof *wrong; w++) {
        json_object_set_new(o, "kind", wrong[w]);
        assert_int_equal(dec_json(d_log, o), SK_ERR_PARSE);
    }
    json_decref(o);
}

static void test_decode_bad_values(void **state)
{
    (void)state;
    static const struct {
        int (*dec)(const char *);
        const char *json;
    } bad[] = {
        /* not JSON, or not one object */
        {d_part, ""},
        {d_part, "{"},
        {d_part, "null"},
        {d_part, "[]"},
        {d_part, "42"},
        {d_part, "\"x\""},
        {d_walref, "{\"lsn\":7} {}"},
        {d_walref, "{\"lsn\":7}garbage"},
        {d_walref, "{\"lsn\":7,\"lsn\":8}"},
        {d_walref, "{\"lsn\":99999999999999999999}"},
        {d_walref, "{\"lsn\":-1}"},
        {d_walref, "{\"lsn\":7.0}"},
        {d_walref, "{'lsn':7}"},
        {d_payref, "{\"lsn\":-1}"},
        {d_payref, "{\"lsn\":7.0}"},
        {d_payref, "{\"lsn\":\"7\"}"},
        {d_payref, "{\"lsn\":99999999999999999999}"},
        {d_payref, "{\"lsn\":7,\"lsn\":8}"},
        {d_payref, "{\"LSN\":7}"},
        {d_counter, "{\"next\":-5}"},
        /* out of range, unknown words */
        {d_part, "{\"epoch\":-1,\"node\":2,\"log\":3,\"state\":\"active\",\"stream\":4,"
                 "\"src_log\":0,\"src_lsn\":0}"},
        {d_part, "{\"epoch\":2147483648,\"node\":2,\"log\":3,\"state\":\"active\",\"stream\":4,"
                 "\"src_log\":0,\"src_lsn\":0}"},
        {d_part, "{\"epoch\":1,\"node\":-2,\"log\":3,\"state\":\"active\",\"stream\":4,"
                 "\"src_log\":0,\"src_lsn\":0}"},
        {d_part, "{\"epoch\":1,\"node\":2,\"log\":3,\"state\":\"sleeping\",\"stream\":4,"
                 "\"src_log\":0,\"src_lsn\":0}"},
        {d_part, "{\"epoch\":1,\"node\":2,\"log\":3,\"state\":\"ACTIVE\",\"stream\":4,"
                 "\"src_log\":0,\"src_lsn\":0}"},
        {d_part, "{\"epoch\":1,\"node\":2,\"log\":3,\"state\":\"active\",\"stream\":-4,"
                 "\"src_log\":0,\"src_lsn\":0}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"zombie\",\"custodian\":-1}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-2}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                "\"kind\":\"proxy\"}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                "\"kind\":\"Payload\"}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                "\"kind\":\"\"}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                "\"kind\":\"payload-and-more-than-fifteen\"}"},
        {d_log, "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                "\"kind\":\"data\",\"kind\":\"payload\"}"},
        {d_ctrl, "{\"node\":-1,\"log\":2}"},
        {d_node, "{\"id\":4,\"rack\":\"a\",\"log\":1,\"listeners\":[{\"name\":\"P\",\"host\":"
                 "\"h\",\"port\":70000}],\"draining\":false,\"started_ms\":5}"},
        {d_node, "{\"id\":4,\"rack\":\"a\",\"log\":1,\"listeners\":[7],\"draining\":false,"
                 "\"started_ms\":5}"},
        {d_node, "{\"id\":4,\"rack\":\"a\",\"log\":1,\"listeners\":[{\"name\":\"\",\"host\":"
                 "\"h\",\"port\":1}],\"draining\":false,\"started_ms\":5}"},
        {d_node, "{\"id\":5,\"rack\":\"a\",\"log\":1,\"listeners\":[],\"draining\":false,"
                 "\"started_ms\":5}"},
        {d_node, "{\"id\":4,\"rack\":\"a\\u0000b\",\"log\":1,\"listeners\":[],\"draining\":"
                 "false,\"started_ms\":5}"},
        {d_node, "{\"id\":4,\"rack\":\"a\",\"log\":1,\"listeners\":[],\"draining\":0,"
                 "\"started_ms\":5}"},
        {d_topic, "{\"id\":\"00112233445566778899AABBCCDDEEFF\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeef\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeefg\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{}}"},
        {d_topic, "{\"id\":\"00000000000000000000000000000000\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":0,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":3,\"rf\":32768,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{\"a\":1}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{\"a\":\"1\",\"b\":null}}"},
        {d_topic, "{\"id\":\"00112233445566778899aabbccddeeff\",\"partitions\":3,\"rf\":1,"
                  "\"first_stream\":0,\"internal\":false,\"configs\":{\"\":\"1\"}}"},
        {d_bconf, "{\"a\":1}"},
        {d_bconf, "{\"a\":\"1\",\"a\":\"2\"}"},
        {d_bconf, "{\"a\":[\"1\"]}"},
        {d_bconf, "[]"},
        {d_cid, "{\"id\":\"\"}"},
        {d_cid, "{\"id\":\"two words\"}"},
        {d_cid, "{\"id\":7}"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        if (bad[i].dec(bad[i].json) != SK_ERR_PARSE)
            fail_msg("accepted: %s", bad[i].json);

    /* Bytes that are not UTF-8, and a NULL or empty buffer. */
    const uint8_t latin1[] = "{\"lsn\":7,\"x\":\"\xe9\"}";
    cm_walref w;
    assert_int_equal(cm_decode_walref(latin1, sizeof latin1 - 1, T1(), 0, 0, &w), SK_ERR_PARSE);
    assert_int_equal(cm_decode_walref(NULL, 0, T1(), 0, 0, &w), SK_ERR_PARSE);
    /* Not NUL-terminated: the decoder reads n bytes, no more. */
    const char *pad = "{\"lsn\":7}}}}";
    assert_int_equal(cm_decode_walref((const uint8_t *)pad, 9, T1(), 0, 0, &w), 0);
    assert_int_equal(w.lsn, 7);
    assert_int_equal(cm_decode_walref((const uint8_t *)pad, 8, T1(), 0, 0, &w), SK_ERR_PARSE);
}

/* A JSON string of n copies of c. */
static json_t *jrep(char c, size_t n)
{
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = 0;
    json_t *j = json_string(s);
    free(s);
    return j;
}

static void test_decode_limits(void **state)
{
    (void)state;
    static const struct {
        const char *field; /* in V_NODE, or in its first listener ("l.") */
        size_t max;
    } lim[] = {{"rack", CM_ZONE_MAX - 1}, {"l.name", CM_NAME_MAX - 1}, {"l.host", CM_HOST_MAX - 1}};
    for (size_t i = 0; i < sizeof lim / sizeof *lim; i++) {
        for (size_t n = lim[i].max; n <= lim[i].max + 1; n++) {
            json_t *o = json_loads(V_NODE, 0, NULL);
            json_t *in = o;
            const char *f = lim[i].field;
            if (!strncmp(f, "l.", 2)) {
                in = json_array_get(json_object_get(o, "listeners"), 0);
                f += 2;
            }
            json_object_set_new(in, f, jrep('x', n));
            assert_int_equal(dec_json(d_node, o), n <= lim[i].max ? 0 : SK_ERR_PARSE);
            json_decref(o);
        }
    }
    /* Listeners: up to CM_MAX_LISTENERS. */
    for (int n = CM_MAX_LISTENERS; n <= CM_MAX_LISTENERS + 1; n++) {
        json_t *o = json_loads(V_NODE, 0, NULL);
        json_t *ls = json_object_get(o, "listeners");
        json_t *l0 = json_array_get(ls, 0);
        for (int k = 1; k < n; k++)
            json_array_append_new(ls, json_deep_copy(l0));
        assert_int_equal(dec_json(d_node, o), n <= CM_MAX_LISTENERS ? 0 : SK_ERR_PARSE);
        json_decref(o);
    }
    /* Cluster id, config names and values. */
    for (size_t n = CM_CLUSTER_ID_MAX - 1; n <= CM_CLUSTER_ID_MAX; n++) {
        json_t *o = json_pack("{s:o}", "id", jrep('c', n));
        assert_int_equal(dec_json(d_cid, o), n < CM_CLUSTER_ID_MAX ? 0 : SK_ERR_PARSE);
        json_decref(o);
    }
    for (size_t n = CM_CONFIG_NAME_MAX; n <= CM_CONFIG_NAME_MAX + 1; n++) {
        char *name = malloc(n + 1);
        memset(name, 'n', n);
        name[n] = 0;
        json_t *o = json_object();
        json_object_set_new(o, name, json_string("v"));
        assert_int_equal(dec_json(d_bconf, o), n <= CM_CONFIG_NAME_MAX ? 0 : SK_ERR_PARSE);
        json_decref(o);
        free(name);
    }
    for (size_t n = CM_CONFIG_VALUE_MAX; n <= CM_CONFIG_VALUE_MAX + 1; n++) {
        json_t *o = json_pack("{s:o}", "v", jrep('v', n));
        assert_int_equal(dec_json(d_bconf, o), n <= CM_CONFIG_VALUE_MAX ? 0 : SK_ERR_PARSE);
        json_decref(o);
    }
    for (int n = CM_MAX_CONFIGS; n <= CM_MAX_CONFIGS + 1; n++) {
        json_t *cfg = json_object();
        for (int k = 0; k < n; k++) {
            char name[32];
            snprintf(name, sizeof name, "c%d", k);
            json_object_set_new(cfg, name, json_string("1"));
        }
        assert_int_equal(dec_json(d_bconf, cfg), n <= CM_MAX_CONFIGS ? 0 : SK_ERR_PARSE);
        json_t *t = json_loads(V_TOPIC, 0, NULL);
        json_object_set_new(t, "configs", cfg);
        assert_int_equal(dec_json(d_topic, t), n <= CM_MAX_CONFIGS ? 0 : SK_ERR_PARSE);
        json_decref(t);
    }
}

/* ---------------------------------------------------------------- the model */

static void test_apply_each_kind(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    kc_uuid t = tid(1);
    char k[256];

    assert_int_equal(put_cid(m, "MkU3OEVBNTcwNTJENDM2Qk", 1), 0);
    expect(&x, 0, CM_CH_CLUSTER_ID, "-", "cid MkU3OEVBNTcwNTJENDM2Qk");
    assert_string_equal(cm_cluster_id(m), "MkU3OEVBNTcwNTJENDM2Qk");

    assert_int_equal(put_counter(m, "next_log", 10, 2), 0);
    assert_int_equal(put_counter(m, "next_log", 11, 3), 0);
    expect(&x, 1, CM_CH_COUNTER, "-", "next_log=10@2");
    expect(&x, 2, CM_CH_COUNTER, "next_log=10@2", "next_log=11@3");
    assert_int_equal(cm_counter_get(m, "next_log")->next, 11);
    assert_int_equal(cm_counter_get(m, "next_log")->mod_rev, 3);
    assert_null(cm_counter_get(m, "next_pid"));

    assert_int_equal(put_node(m, 2, "az1", 10, false, 4), 0);
    assert_int_equal(put_node(m, 2, "az1", 10, true, 5), 0);
    expect(&x, 3, CM_CH_NODE, "-", "node 2 az1 log 10 l1@4");
    expect(&x, 4, CM_CH_NODE, "node 2 az1 log 10 l1@4", "node 2 az1 log 10 l1 draining@5");
    const cm_node *nd = cm_node_get(m, 2);
    assert_non_null(nd);
    assert_true(nd->draining);
    assert_string_equal(nd->listeners[0].host, "node2.local");

    assert_int_equal(put_ctrl(m, 2, 10, 6), 0);
    expect(&x, 5, CM_CH_CONTROLLER, "-", "ctrl 2 log 10@6");
    assert_int_equal(cm_controller(m), 2);
    assert_int_equal(cm_controller_get(m)->log, 10);

    assert_int_equal(put_log(m, 10, 2, CM_LOG_LIVE, -1, 7), 0);
    assert_int_equal(put_log(m, 10, 2, CM_LOG_DEAD, 3, 8), 0);
    expect(&x, 6, CM_CH_LOG, "-", "log 10 node 2 live cust -1@7");
    expect(&x, 7, CM_CH_LOG, "log 10 node 2 live cust -1@7", "log 10 node 2 dead cust 3@8");
    assert_int_equal(cm_log_get(m, 10)->custodian, 3);

    assert_int_equal(put_topic(m, "orders", t, 2, 9), 0);
    assert_int_equal(put_topic(m, "orders", t, 4, 10), 0);
    expect(&x, 8, CM_CH_TOPIC, "-", "topic orders p2 c2@9");
    expect(&x, 9, CM_CH_TOPIC, "topic orders p2 c2@9", "topic orders p4 c2@10");
    const cm_topic *tp = cm_topic_get(m, "orders");
    assert_non_null(tp);
    assert_int_equal(tp->partitions, 4);
    assert_string_equal(tp->config_values[1], "delete");
    assert_ptr_equal(cm_topic_by_id(m, &t), tp);

    assert_int_equal(put_part(m, t, 1, 1, -1, CM_PART_NEW, 11), 0);
    assert_int_equal(put_part(m, t, 1, 1, 2, CM_PART_ACTIVE, 12), 0);
    expect(&x, 10, CM_CH_PART, "-", "part 01/1 e1 n-1 new@11");
    expect(&x, 11, CM_CH_PART, "part 01/1 e1 n-1 new@11", "part 01/1 e1 n2 active@12");
    assert_int_equal(cm_part_get(m, &t, 1)->log, 10);
    assert_null(cm_part_get(m, &t, 0));

    assert_int_equal(put_walref(m, t, 1, 10, 4096, 13), 0);
    assert_int_equal(put_walref(m, t, 1, 10, 8192, 14), 0);
    expect(&x, 12, CM_CH_WALREF, "-", "walref 01/1/10 lsn 4096@13");
    expect(&x, 13, CM_CH_WALREF, "walref 01/1/10 lsn 4096@13", "walref 01/1/10 lsn 8192@14");
    assert_int_equal(cm_walref_get(m, &t, 1, 10)->lsn, 8192);

    assert_int_equal(put_bconf(m, -1, "1000", 15), 0);
    assert_int_equal(put_bconf(m, 2, "2000", 16), 0);
    assert_int_equal(put_bconf(m, -1, "3000", 17), 0);
    expect(&x, 14, CM_CH_BCONF, "-", "bconf -1 log.retention.ms=1000@15");
    expect(&x, 15, CM_CH_BCONF, "-", "bconf 2 log.retention.ms=2000@16");
    expect(&x, 16, CM_CH_BCONF, "bconf -1 log.retention.ms=1000@15",
           "bconf -1 log.retention.ms=3000@17");
    assert_string_equal(cm_bconf_get(m, -1)->values[0], "3000");
    assert_string_equal(cm_bconf_get(m, 2)->values[0], "2000");
    assert_int_equal(x.n, 17);

    /* Deletions, each with the value it had. */
    cm_key_bconf(P, 2, k, sizeof k);
    assert_int_equal(del_raw(m, k, 20), 0);
    expect(&x, 17, CM_CH_BCONF, "bconf 2 log.retention.ms=2000@16", "-");
    assert_null(cm_bconf_get(m, 2));
    cm_key_walref(P, &t, 1, 10, k, sizeof k);
    assert_int_equal(del_raw(m, k, 21), 0);
    expect(&x, 18, CM_CH_WALREF, "walref 01/1/10 lsn 8192@14", "-");
    assert_int_equal(del_part(m, t, 1, 22), 0);
    expect(&x, 19, CM_CH_PART, "part 01/1 e1 n2 active@12", "-");
    cm_key_topic(P, "orders", k, sizeof k);
    assert_int_equal(del_raw(m, k, 23), 0);
    expect(&x, 20, CM_CH_TOPIC, "topic orders p4 c2@10", "-");
    assert_null(cm_topic_get(m, "orders"));
    assert_null(cm_topic_by_id(m, &t));
    cm_key_log(P, 10, k, sizeof k);
    assert_int_equal(del_raw(m, k, 24), 0);
    expect(&x, 21, CM_CH_LOG, "log 10 node 2 dead cust 3@8", "-");
    cm_key_controller(P, k, sizeof k);
    assert_int_equal(del_raw(m, k, 25), 0);
    expect(&x, 22, CM_CH_CONTROLLER, "ctrl 2 log 10@6", "-");
    assert_int_equal(cm_controller(m), -1);
    assert_null(cm_controller_get(m));
    cm_key_node(P, 2, k, sizeof k);
    assert_int_equal(del_raw(m, k, 26), 0);
    expect(&x, 23, CM_CH_NODE, "node 2 az1 log 10 l1 draining@5", "-");
    cm_key_counter(P, "next_log", k, sizeof k);
    assert_int_equal(del_raw(m, k, 27), 0);
    expect(&x, 24, CM_CH_COUNTER, "next_log=11@3", "-");
    cm_key_cluster_id(P, k, sizeof k);
    assert_int_equal(del_raw(m, k, 28), 0);
    expect(&x, 25, CM_CH_CLUSTER_ID, "cid MkU3OEVBNTcwNTJENDM2Qk", "-");
    assert_string_equal(cm_cluster_id(m), "");
    /* Deleting what is absent reports nothing. */
    assert_int_equal(del_raw(m, k, 29), 0);
    assert_int_equal(del_part(m, t, 5, 30), 0);
    assert_int_equal(x.n, 26);
    assert_int_equal(x.model_mismatch, 0); /* the callback saw the model's new state */
    cm_destroy(m);
}

static void test_payrefs_and_log_kind(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    char k[256], logs[2048];

    /* A payload log; a data log whose value predates "kind". */
    assert_int_equal(put_logk(m, 20, 3, CM_LOG_LIVE, -1, CM_LOG_PAYLOAD, 1), 0);
    expect(&x, 0, CM_CH_LOG, "-", "log 20 node 3 live cust -1 payload@1");
    assert_int_equal(cm_log_get(m, 20)->kind, CM_LOG_PAYLOAD);
    assert_int_equal(put_raw(m, P "logs/10", V_LOG, 2), 0);
    expect(&x, 1, CM_CH_LOG, "-", "log 10 node 2 live cust -1@2");
    assert_int_equal(cm_log_get(m, 10)->kind, CM_LOG_DATA);
    /* "data" written out is the same value: a duplicate. Another kind, even
     * at the same revision, is a change. */
    const char *data = "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                       "\"kind\":\"data\"}";
    assert_int_equal(put_raw(m, P "logs/10", data, 2), 0);
    assert_int_equal(x.n, 2);
    assert_int_equal(put_raw(m, P "logs/10", V_PLOG, 2), 0);
    expect(&x, 2, CM_CH_LOG, "log 10 node 2 live cust -1@2",
           "log 10 node 2 live cust -1 payload@2");
    /* An unknown kind: the log is absent (a deletion), logged once. */
    cap_begin();
    const char *proxy = "{\"node\":2,\"rack\":\"a\",\"state\":\"live\",\"custodian\":-1,"
                        "\"kind\":\"proxy\"}";
    assert_int_equal(put_raw(m, P "logs/10", proxy, 3), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, P "logs/10", proxy, 3), SK_ERR_PARSE);
    assert_int_equal(cap_end(logs, sizeof logs), 1);
    assert_non_null(strstr(logs, "\"kind\" is the unknown word \"proxy\""));
    expect(&x, 3, CM_CH_LOG, "log 10 node 2 live cust -1 payload@2", "-");
    assert_null(cm_log_get(m, 10));
    assert_int_equal(put_log(m, 10, 2, CM_LOG_LIVE, -1, 4), 0);
    expect(&x, 4, CM_CH_LOG, "-", "log 10 node 2 live cust -1@4");

    /* payrefs: new, changed, another main log, looked up. */
    assert_int_equal(put_payref(m, 20, 10, 0, 5), 0);
    assert_int_equal(put_payref(m, 20, 10, 4096, 6), 0);
    assert_int_equal(put_raw(m, P "payrefs/20/11", "{\"lsn\":7}", 7), 0);
    expect(&x, 5, CM_CH_PAYREF, "-", "payref 20/10 lsn 0@5");
    expect(&x, 6, CM_CH_PAYREF, "payref 20/10 lsn 0@5", "payref 20/10 lsn 4096@6");
    expect(&x, 7, CM_CH_PAYREF, "-", "payref 20/11 lsn 7@7");
    assert_int_equal(cm_payref_get(m, 20, 10)->lsn, 4096);
    assert_int_equal(cm_payref_get(m, 20, 10)->mod_rev, 6);
    assert_int_equal(cm_payref_get(m, 20, 11)->plog, 20);
    assert_int_equal(cm_payref_get(m, 20, 11)->mlog, 11);
    assert_null(cm_payref_get(m, 10, 20));
    assert_null(cm_payref_get(m, 20, 12));
    /* A duplicate, a stale put and a stale deletion: nothing. */
    assert_int_equal(put_payref(m, 20, 10, 4096, 6), 0);
    assert_int_equal(put_payref(m, 20, 10, 1, 5), 0);
    assert_int_equal(del_payref(m, 20, 10, 5), 0);
    assert_int_equal(x.n, 8);
    assert_int_equal(cm_payref_get(m, 20, 10)->lsn, 4096);
    /* Another lsn at the same revision is a change (equality reads every field). */
    assert_int_equal(put_payref(m, 20, 10, 4097, 6), 0);
    expect(&x, 8, CM_CH_PAYREF, "payref 20/10 lsn 4096@6", "payref 20/10 lsn 4097@6");

    /* Garbage over a payref: gone, logged once per revision. */
    cm_key_payref(P, 20, 11, k, sizeof k);
    cap_begin();
    assert_int_equal(put_raw(m, k, "{\"lsn\":-1}", 8), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, k, "{\"lsn\":-1}", 8), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, k, "{\"lsn\":7.5}", 9), SK_ERR_PARSE);
    assert_int_equal(cap_end(logs, sizeof logs), 2);
    assert_non_null(strstr(logs, "/skiff/payrefs/20/11"));
    assert_non_null(strstr(logs, "\"lsn\" -1 out of range"));
    assert_non_null(strstr(logs, "\"lsn\" is not an integer"));
    expect(&x, 9, CM_CH_PAYREF, "payref 20/11 lsn 7@7", "-");
    assert_null(cm_payref_get(m, 20, 11));

    /* Gone. */
    assert_int_equal(del_payref(m, 20, 10, 10), 0);
    expect(&x, 10, CM_CH_PAYREF, "payref 20/10 lsn 4097@6", "-");
    assert_int_equal(del_payref(m, 20, 10, 11), 0); /* already absent */
    assert_int_equal(x.n, 11);
    size_t it = 0;
    assert_null(cm_payref_next(m, &it));
    assert_int_equal(x.model_mismatch, 0);
    cm_destroy(m);
}

static void test_ignored_keys(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    const char *node = "{\"id\":1,\"rack\":\"a\",\"log\":1,\"listeners\":[],\"draining\":false,"
                       "\"started_ms\":5}";
    const char *ignored[] = {
        "/other/nodes/1", "/skiff", "/skiffnodes/1", "nodes/1", "/Skiff/nodes/1",
        "/skiff/", "/skiff/foo", "/skiff/cluster/features", "/skiff/cluster/id/x",
        "/skiff/nodes/1/x", "/skiff/config/topic/orders", "/skiff/config/broker/1/x",
        "/skiff/parts/abc", "/skiff/controllers", "/skiff/topics/a/b",
        "/skiff/walrefs/x", "/skiff/logs/1/y", "/skiff/payrefs", "/skiff/payrefs/1",
        "/skiff/payrefs/1/2/3", "/skiff/payrefs/1/2/",
    };
    cap_begin();
    for (size_t i = 0; i < sizeof ignored / sizeof *ignored; i++) {
        assert_int_equal(put_raw(m, ignored[i], node, 1), 0);
        assert_int_equal(put_raw(m, ignored[i], "garbage", 2), 0);
        assert_int_equal(del_raw(m, ignored[i], 3), 0);
    }
    /* A key with a NUL byte in it is just bytes. */
    const uint8_t nul[] = "/skiff/no\0des/1";
    assert_int_equal(cm_apply_put(m, nul, sizeof nul - 1, (const uint8_t *)node, strlen(node), 4),
                     0);
    assert_int_equal(cap_end(NULL, 0), 0);
    assert_int_equal(x.n, 0);
    size_t n;
    cm_nodes(m, &n);
    assert_int_equal(n, 0);
    assert_null(cm_node_get(m, 1));
    cm_destroy(m);
}

static void test_invalid_values_and_keys(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    kc_uuid t = tid(2);
    char k[256], logs[8192];
    cm_key_part(P, &t, 0, k, sizeof k);

    assert_int_equal(put_part(m, t, 0, 1, 2, CM_PART_ACTIVE, 1), 0);
    cap_begin();
    /* Garbage over a valid value: the key is absent now, and that is a deletion. */
    assert_int_equal(put_raw(m, k, "{\"epoch\":\"one\"}", 2), SK_ERR_PARSE);
    /* The same garbage again (a reset, a duplicate event): not logged again. */
    assert_int_equal(put_raw(m, k, "{\"epoch\":\"one\"}", 2), SK_ERR_PARSE);
    assert_int_equal(cap_end(logs, sizeof logs), 1);
    assert_non_null(strstr(logs, "/skiff/parts/02"));
    assert_non_null(strstr(logs, "\"epoch\" is not an integer"));
    assert_int_equal(x.n, 2);
    expect(&x, 1, CM_CH_PART, "part 02/0 e1 n2 active@1", "-");
    assert_null(cm_part_get(m, &t, 0));

    cap_begin();
    assert_int_equal(put_raw(m, k, "not json", 3), SK_ERR_PARSE); /* rewritten: logged */
    assert_int_equal(del_raw(m, k, 4), 0);                         /* gone: forgotten */
    assert_int_equal(put_raw(m, k, "not json", 3), SK_ERR_PARSE);  /* logged anew */
    assert_int_equal(cap_end(logs, sizeof logs), 2);
    assert_non_null(strstr(logs, "not JSON"));
    assert_int_equal(x.n, 2); /* the key was absent throughout */

    /* A valid value replaces the garbage, and later garbage is logged again. */
    assert_int_equal(put_part(m, t, 0, 2, 3, CM_PART_ACTIVE, 5), 0);
    expect(&x, 2, CM_CH_PART, "-", "part 02/0 e2 n3 active@5");
    cap_begin();
    assert_int_equal(put_raw(m, k, "not json", 3), 0); /* older than the value held: stale */
    assert_int_equal(cm_part_get(m, &t, 0)->epoch, 2);
    assert_int_equal(put_raw(m, k, "[]", 6), SK_ERR_PARSE);
    assert_int_equal(cap_end(logs, sizeof logs), 1); /* the stale one is not even parsed */
    assert_non_null(strstr(logs, "mod_revision 6"));
    expect(&x, 3, CM_CH_PART, "part 02/0 e2 n3 active@5", "-");

    /* Over-long names from etcd: a node's rack, a topic's name in its key. */
    char rack[CM_ZONE_MAX + 1];
    memset(rack, 'r', CM_ZONE_MAX);
    rack[CM_ZONE_MAX] = 0;
    char val[512];
    snprintf(val, sizeof val,
             "{\"id\":1,\"rack\":\"%s\",\"log\":1,\"listeners\":[],\"draining\":false,"
             "\"started_ms\":5}",
             rack);
    char tkey[512] = P "topics/";
    memset(tkey + strlen(tkey), 't', CM_TOPIC_MAX + 1);
    tkey[strlen(P "topics/") + CM_TOPIC_MAX + 1] = 0;
    cap_begin();
    assert_int_equal(put_raw(m, P "nodes/1", val, 7), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, tkey, V_TOPIC, 8), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, tkey, V_TOPIC, 8), SK_ERR_PARSE);
    /* Keys of a known shape that do not parse. */
    const char *badkeys[] = {
        P "nodes/abc", P "nodes/01", P "nodes/-1", P "nodes/2147483648", P "nodes/",
        P "logs/1x", P "topics/has space", P "topics/..",
        P "parts/00112233445566778899AABBCCDDEEFF/0", P "parts/0011/0",
        P "parts/00112233445566778899aabbccddeeff/x",
        P "walrefs/00112233445566778899aabbccddeeff/1",
        P "walrefs/00112233445566778899aabbccddeeff-/1",
        P "walrefs/00112233445566778899aabbccddeeff-1/-1", P "config/broker/dflt",
        P "cluster/next_Log", P "payrefs/01/2", P "payrefs/1/02", P "payrefs/x/2",
        P "payrefs/1/-2", P "payrefs/1/", P "payrefs//2", P "payrefs/9223372036854775808/2",
        P "payrefs/1/+2"};
    for (size_t i = 0; i < sizeof badkeys / sizeof *badkeys; i++)
        assert_int_equal(put_raw(m, badkeys[i], "{}", 9), SK_ERR_PARSE);
    int lines = cap_end(logs, sizeof logs);
    assert_int_equal(lines, 2 + (int)(sizeof badkeys / sizeof *badkeys));
    assert_non_null(strstr(logs, "\"rack\" of 64 bytes"));
    assert_non_null(strstr(logs, "not a valid key name"));
    assert_null(cm_node_get(m, 1));
    size_t it = 0;
    assert_null(cm_topic_next(m, &it));

    /* Non-printable bytes in a key are escaped in the log line. */
    const uint8_t weird[] = P "nodes/\x01\xff";
    cap_begin();
    assert_int_equal(cm_apply_put(m, weird, sizeof weird - 1, (const uint8_t *)"{}", 2, 10),
                     SK_ERR_PARSE);
    assert_int_equal(cap_end(logs, sizeof logs), 1);
    assert_non_null(strstr(logs, "nodes/\\x01\\xff"));
    cm_destroy(m);
}

static void test_topic_ids(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    kc_uuid a = tid(10), b = tid(11);
    assert_int_equal(put_topic(m, "alpha", a, 1, 1), 0);
    /* A second name claiming alpha's id is garbage. */
    cap_begin();
    assert_int_equal(put_topic(m, "beta", a, 1, 2), SK_ERR_PARSE);
    char logs[1024];
    assert_int_equal(cap_end(logs, sizeof logs), 1);
    assert_non_null(strstr(logs, "alpha"));
    assert_null(cm_topic_get(m, "beta"));
    assert_string_equal(cm_topic_by_id(m, &a)->name, "alpha");
    /* The same name re-created with another id: the id index follows. */
    assert_int_equal(put_topic(m, "alpha", b, 1, 3), 0);
    assert_null(cm_topic_by_id(m, &a));
    assert_string_equal(cm_topic_by_id(m, &b)->name, "alpha");
    assert_int_equal(put_topic(m, "beta", a, 1, 4), 0);
    assert_string_equal(cm_topic_by_id(m, &a)->name, "beta");
    /* Garbage over alpha removes it from both indexes. */
    cap_begin();
    assert_int_equal(put_raw(m, P "topics/alpha", "{}", 5), SK_ERR_PARSE);
    assert_int_equal(cap_end(NULL, 0), 1);
    assert_null(cm_topic_get(m, "alpha"));
    assert_null(cm_topic_by_id(m, &b));
    assert_string_equal(cm_topic_by_id(m, &a)->name, "beta");
    assert_int_equal(x.n, 4); /* alpha, alpha changed, beta, alpha deleted */
    expect(&x, 3, CM_CH_TOPIC, "topic alpha p1 c2@3", "-");
    cm_destroy(m);
}

static void test_stale_and_duplicates(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    assert_int_equal(put_node(m, 1, "a", 5, false, 5), 0);
    assert_int_equal(put_node(m, 1, "a", 5, false, 5), 0); /* the same event twice */
    assert_int_equal(x.n, 1);
    assert_int_equal(put_node(m, 1, "b", 6, false, 4), 0); /* older than what is held */
    assert_string_equal(cm_node_get(m, 1)->rack, "a");
    assert_int_equal(del_raw(m, P "nodes/1", 3), 0); /* a deletion older than the value */
    assert_non_null(cm_node_get(m, 1));
    assert_int_equal(x.n, 1);
    /* Only the mod_revision changed: still a change (the next compare needs it). */
    assert_int_equal(put_node(m, 1, "a", 5, false, 8), 0);
    expect(&x, 1, CM_CH_NODE, "node 1 a log 5 l1@5", "node 1 a log 5 l1@8");
    assert_int_equal(cm_node_get(m, 1)->mod_rev, 8);
    assert_int_equal(del_raw(m, P "nodes/1", 9), 0);
    expect(&x, 2, CM_CH_NODE, "node 1 a log 5 l1@8", "-");

    /* Singletons and tables alike. */
    assert_int_equal(put_ctrl(m, 1, 2, 10), 0);
    assert_int_equal(put_ctrl(m, 3, 4, 9), 0);
    assert_int_equal(cm_controller(m), 1);
    assert_int_equal(put_cid(m, "abc", 10), 0);
    assert_int_equal(put_cid(m, "abc", 10), 0);
    assert_int_equal(put_cid(m, "xyz", 9), 0);
    assert_string_equal(cm_cluster_id(m), "abc");
    kc_uuid t = tid(3);
    assert_int_equal(put_part(m, t, 0, 1, 1, CM_PART_ACTIVE, 10), 0);
    assert_int_equal(put_part(m, t, 0, 1, 1, CM_PART_ACTIVE, 10), 0);
    assert_int_equal(put_part(m, t, 0, 2, 2, CM_PART_ACTIVE, 9), 0);
    assert_int_equal(del_part(m, t, 0, 9), 0);
    assert_int_equal(cm_part_get(m, &t, 0)->epoch, 1);
    assert_int_equal(x.n, 6); /* node: 3, controller, cluster id, partition */
    cm_destroy(m);
}

static void test_queries(void **state)
{
    (void)state;
    cm_model *m = cm_new(P, NULL, NULL); /* no callback at all */
    assert_non_null(m);
    assert_string_equal(cm_cluster_id(m), "");
    assert_int_equal(cm_controller(m), -1);
    size_t n = 99;
    cm_nodes(m, &n);
    assert_int_equal(n, 0);
    cm_logs(m, &n);
    assert_int_equal(n, 0);

    int ids[] = {5, 1, 3, 100, 0, 42};
    for (size_t i = 0; i < 6; i++)
        assert_int_equal(put_node(m, ids[i], "z", ids[i], false, (int64_t)i + 1), 0);
    const cm_node *nodes = cm_nodes(m, &n);
    assert_int_equal(n, 6);
    int want[] = {0, 1, 3, 5, 42, 100};
    for (size_t i = 0; i < n; i++)
        assert_int_equal(nodes[i].id, want[i]);
    assert_int_equal(del_raw(m, P "nodes/3", 10), 0);
    assert_int_equal(del_raw(m, P "nodes/0", 11), 0);
    nodes = cm_nodes(m, &n);
    assert_int_equal(n, 4);
    assert_int_equal(nodes[0].id, 1);
    assert_int_equal(nodes[1].id, 5);
    assert_int_equal(nodes[3].id, 100);
    assert_null(cm_node_get(m, 3));
    assert_int_equal(cm_node_get(m, 42)->log, 42);

    for (int64_t l = 20; l > 10; l--)
        assert_int_equal(put_log(m, l, (int32_t)l % 3, CM_LOG_LIVE, -1, 20 + l), 0);
    const cm_log *logs = cm_logs(m, &n);
    assert_int_equal(n, 10);
    int64_t sum = 0;
    for (size_t i = 0; i < n; i++)
        sum += logs[i].id;
    assert_int_equal(sum, 155);
    assert_int_equal(cm_log_get(m, 14)->node, 2);
    assert_null(cm_log_get(m, 10));

    /* Topics, partitions, walrefs: every one visited once. */
    for (int i = 0; i < 30; i++) {
        char name[32];
        snprintf(name, sizeof name, "topic-%d", i);
        assert_int_equal(put_topic(m, name, tid(i + 1), 3, 100 + i), 0);
        for (int p = 0; p < 3; p++) {
            assert_int_equal(put_part(m, tid(i + 1), p, 1, p, CM_PART_ACTIVE, 200 + i), 0);
            assert_int_equal(put_walref(m, tid(i + 1), p, 7, i * 10 + p, 300 + i), 0);
        }
    }
    assert_int_equal(del_raw(m, P "topics/topic-7", 400), 0);
    int seen[31] = {0};
    size_t it = 0, count = 0;
    for (const cm_topic *t; (t = cm_topic_next(m, &it)) != NULL; count++) {
        int i;
        assert_int_equal(sscanf(t->name, "topic-%d", &i), 1);
        assert_int_equal(t->id.b[0], i + 1);
        seen[i]++;
        assert_ptr_equal(cm_topic_get(m, t->name), t);
        assert_ptr_equal(cm_topic_by_id(m, &t->id), t);
    }
    assert_int_equal(count, 29);
    for (int i = 0; i < 30; i++)
        assert_int_equal(seen[i], i == 7 ? 0 : 1);
    kc_uuid t8 = tid(8);
    assert_null(cm_topic_get(m, "topic-7"));
    assert_null(cm_topic_by_id(m, &t8));
    assert_null(cm_topic_get(m, ""));
    assert_null(cm_topic_get(m, NULL));

    it = count = 0;
    int64_t psum = 0;
    for (const cm_part *p; (p = cm_part_next(m, &it)) != NULL; count++)
        psum += p->index;
    assert_int_equal(count, 90);
    assert_int_equal(psum, 90);
    it = count = 0;
    for (const cm_walref *w; (w = cm_walref_next(m, &it)) != NULL; count++)
        assert_int_equal(w->lsn, (w->topic.b[0] - 1) * 10 + w->index);
    assert_int_equal(count, 90);
    kc_uuid t5 = tid(5);
    assert_int_equal(cm_walref_get(m, &t5, 2, 7)->lsn, 42);
    assert_null(cm_walref_get(m, &t5, 2, 8));
    assert_int_equal(cm_part_get(m, &t5, 2)->node, 2);
    assert_null(cm_part_get(m, &t5, 3));

    /* payrefs: every one visited once. */
    for (int64_t pl = 0; pl < 10; pl++)
        for (int64_t ml = 0; ml < 10; ml++)
            assert_int_equal(put_payref(m, 100 + pl, ml, pl * 100 + ml, 600 + pl * 10 + ml), 0);
    assert_int_equal(del_payref(m, 103, 4, 700), 0);
    int pseen[10][10] = {{0}};
    it = count = 0;
    for (const cm_payref *p; (p = cm_payref_next(m, &it)) != NULL; count++) {
        assert_int_equal(p->lsn, (p->plog - 100) * 100 + p->mlog);
        assert_ptr_equal(cm_payref_get(m, p->plog, p->mlog), p);
        pseen[p->plog - 100][p->mlog]++;
    }
    assert_int_equal(count, 99);
    for (int pl = 0; pl < 10; pl++)
        for (int ml = 0; ml < 10; ml++)
            assert_int_equal(pseen[pl][ml], pl == 3 && ml == 4 ? 0 : 1);
    assert_null(cm_payref_get(m, 103, 4));
    assert_int_equal(cm_payref_get(m, 109, 9)->lsn, 909);

    assert_null(cm_bconf_get(m, -1));
    assert_int_equal(put_bconf(m, -1, "5", 500), 0);
    assert_string_equal(cm_bconf_get(m, -1)->values[0], "5");
    assert_null(cm_bconf_get(m, 0));
    assert_null(cm_counter_get(m, "next_log"));
    assert_null(cm_counter_get(m, NULL));
    assert_int_equal(put_counter(m, "next_stream", 77, 501), 0);
    assert_int_equal(cm_counter_get(m, "next_stream")->next, 77);
    assert_string_equal(cm_counter_get(m, "next_stream")->name, "next_stream");
    cm_destroy(m);
}

static void test_revision(void **state)
{
    (void)state;
    cm_model *m = cm_new(P, NULL, NULL);
    assert_int_equal(cm_revision(m), 0);
    assert_int_equal(put_node(m, 1, "a", 1, false, 5), 0);
    assert_int_equal(cm_revision(m), 5);
    assert_int_equal(put_node(m, 2, "a", 1, false, 3), 0); /* an older key of a range */
    assert_int_equal(cm_revision(m), 5);
    assert_int_equal(del_raw(m, P "nodes/2", 9), 0);
    assert_int_equal(cm_revision(m), 9);
    cap_begin();
    assert_int_equal(put_raw(m, P "nodes/3", "garbage", 10), SK_ERR_PARSE);
    assert_int_equal(cap_end(NULL, 0), 1);
    assert_int_equal(cm_revision(m), 10); /* applied, if only as absent */
    assert_int_equal(put_raw(m, P "unknown/key", "{}", 11), 0);
    assert_int_equal(cm_revision(m), 11);
    assert_int_equal(put_raw(m, "/elsewhere/nodes/1", "{}", 30), 0);
    assert_int_equal(cm_revision(m), 11); /* not this model's */
    cm_set_revision(m, 20); /* a range's header revision */
    assert_int_equal(cm_revision(m), 20);
    cm_reset_begin(m);
    assert_int_equal(put_node(m, 1, "a", 1, false, 5), 0);
    cm_reset_end(m);
    cm_set_revision(m, 40);
    assert_int_equal(cm_revision(m), 40);
    cm_destroy(m);
}

/* The state before a reset, at revisions 1..n. */
static void reset_fixture(cm_model *m, kc_uuid ta, kc_uuid tb)
{
    assert_int_equal(put_cid(m, "cid", 1), 0);
    assert_int_equal(put_counter(m, "next_log", 12, 2), 0);
    assert_int_equal(put_node(m, 1, "a", 10, false, 3), 0);
    assert_int_equal(put_node(m, 2, "b", 11, false, 4), 0);
    assert_int_equal(put_log(m, 10, 1, CM_LOG_LIVE, -1, 5), 0);
    assert_int_equal(put_log(m, 11, 2, CM_LOG_LIVE, -1, 6), 0);
    assert_int_equal(put_topic(m, "a", ta, 2, 7), 0);
    assert_int_equal(put_topic(m, "b", tb, 1, 8), 0);
    assert_int_equal(put_part(m, ta, 0, 1, 1, CM_PART_ACTIVE, 9), 0);
    assert_int_equal(put_part(m, ta, 1, 1, 2, CM_PART_ACTIVE, 10), 0);
    assert_int_equal(put_part(m, tb, 0, 1, 2, CM_PART_ACTIVE, 11), 0);
    assert_int_equal(put_walref(m, tb, 0, 11, 100, 12), 0);
    assert_int_equal(put_bconf(m, -1, "1", 13), 0);
    assert_int_equal(put_ctrl(m, 2, 11, 14), 0);
    /* Node 2's payload log, which log 10 (node 1's) reads. */
    assert_int_equal(put_logk(m, 12, 2, CM_LOG_LIVE, -1, CM_LOG_PAYLOAD, 15), 0);
    assert_int_equal(put_payref(m, 12, 10, 500, 16), 0);
}

static void test_reset(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    kc_uuid ta = tid(0xa), tb = tid(0xb);
    reset_fixture(m, ta, tb);
    /* Garbage already logged once before the reset. */
    cap_begin();
    assert_int_equal(put_raw(m, P "nodes/9", "junk", 17), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, P "logs/99", "junk", 18), SK_ERR_PARSE);
    x.n = x.dels = x.adds = x.chgs = 0;

    /* Node 2 died while the watch was lost: its key, the controller's, topic
     * b and its walref are gone; node 3 joined; a/0 moved to it. */
    cm_reset_begin(m);
    assert_int_equal(put_cid(m, "cid", 1), 0);
    assert_int_equal(put_counter(m, "next_log", 13, 20), 0);
    assert_int_equal(put_node(m, 1, "a", 10, false, 3), 0);
    assert_int_equal(put_node(m, 3, "c", 12, false, 21), 0);
    assert_int_equal(put_log(m, 10, 1, CM_LOG_LIVE, -1, 5), 0);
    assert_int_equal(put_log(m, 11, 2, CM_LOG_DEAD, 1, 22), 0);
    assert_int_equal(put_topic(m, "a", ta, 2, 7), 0);
    assert_int_equal(put_part(m, ta, 0, 2, 3, CM_PART_MOVING, 23), 0);
    assert_int_equal(put_part(m, ta, 1, 1, 2, CM_PART_ACTIVE, 10), 0);
    assert_int_equal(put_bconf(m, -1, "1", 13), 0);
    assert_int_equal(put_logk(m, 12, 2, CM_LOG_DEAD, 1, CM_LOG_PAYLOAD, 24), 0);
    assert_int_equal(put_payref(m, 12, 10, 600, 25), 0);
    assert_int_equal(put_raw(m, P "nodes/9", "junk", 17), SK_ERR_PARSE); /* same garbage */
    /* Nothing is reported while the new state is incomplete... */
    assert_int_equal(x.n, 0);
    /* ...but queries see it. */
    assert_null(cm_node_get(m, 2));
    assert_non_null(cm_node_get(m, 3));
    cm_reset_end(m);
    assert_int_equal(cap_end(NULL, 0), 2); /* nodes/9 and logs/99, once each */

    assert_int_equal(x.n, 11);
    /* Deletions, dependents first. */
    expect(&x, 0, CM_CH_WALREF, "walref 0b/0/11 lsn 100@12", "-");
    expect(&x, 1, CM_CH_PART, "part 0b/0 e1 n2 active@11", "-");
    expect(&x, 2, CM_CH_TOPIC, "topic b p1 c2@8", "-");
    expect(&x, 3, CM_CH_NODE, "node 2 b log 11 l1@4", "-");
    expect(&x, 4, CM_CH_CONTROLLER, "ctrl 2 log 11@14", "-");
    /* Then creations and changes. */
    expect(&x, 5, CM_CH_COUNTER, "next_log=12@2", "next_log=13@20");
    expect(&x, 6, CM_CH_NODE, "-", "node 3 c log 12 l1@21");
    expect(&x, 7, CM_CH_LOG, "log 11 node 2 live cust -1@6", "log 11 node 2 dead cust 1@22");
    expect(&x, 8, CM_CH_LOG, "log 12 node 2 live cust -1 payload@15",
           "log 12 node 2 dead cust 1 payload@24");
    expect(&x, 9, CM_CH_PART, "part 0a/0 e1 n1 active@9", "part 0a/0 e2 n3 moving@23");
    expect(&x, 10, CM_CH_PAYREF, "payref 12/10 lsn 500@16", "payref 12/10 lsn 600@25");
    assert_int_equal(x.dels, 5);
    assert_int_equal(x.adds, 1);
    assert_int_equal(x.chgs, 5);
    assert_int_equal(x.model_mismatch, 0);

    /* The model is the new state. */
    size_t n;
    const cm_node *nodes = cm_nodes(m, &n);
    assert_int_equal(n, 2);
    assert_int_equal(nodes[0].id, 1);
    assert_int_equal(nodes[1].id, 3);
    assert_int_equal(cm_controller(m), -1);
    assert_null(cm_topic_get(m, "b"));
    assert_null(cm_topic_by_id(m, &tb));
    assert_string_equal(cm_topic_by_id(m, &ta)->name, "a");
    size_t it = 0;
    assert_null(cm_walref_next(m, &it));
    assert_int_equal(cm_payref_get(m, 12, 10)->lsn, 600);
    assert_int_equal(cm_part_get(m, &ta, 0)->state, CM_PART_MOVING);
    assert_string_equal(cm_cluster_id(m), "cid");

    /* Events after the reset are reported one by one again. */
    assert_int_equal(put_ctrl(m, 1, 10, 30), 0);
    expect(&x, 11, CM_CH_CONTROLLER, "-", "ctrl 1 log 10@30");

    /* logs/99 was not in the new state: forgotten, so logged when it returns;
     * nodes/9 was, so it stays quiet. */
    cap_begin();
    assert_int_equal(put_raw(m, P "logs/99", "junk", 18), SK_ERR_PARSE);
    assert_int_equal(put_raw(m, P "nodes/9", "junk", 17), SK_ERR_PARSE);
    assert_int_equal(cap_end(NULL, 0), 1);
    cm_destroy(m);
}

static void test_reset_restart_and_empty(void **state)
{
    (void)state;
    ctx x;
    cm_model *m = model(&x);
    kc_uuid ta = tid(0xa), tb = tid(0xb);
    reset_fixture(m, ta, tb);
    x.n = 0;
    /* A reset begun again drops the partial state: what it held is not
     * reported as created. */
    cm_reset_begin(m);
    assert_int_equal(put_node(m, 7, "x", 1, false, 50), 0);
    cm_reset_begin(m);
    assert_null(cm_node_get(m, 7));
    reset_fixture(m, ta, tb); /* the same state as before */
    cm_reset_end(m);
    assert_int_equal(x.n, 0);
    cm_reset_end(m); /* without a begin: nothing */
    assert_int_equal(x.n, 0);

    /* An empty new state: everything deleted, in dependency order. */
    cm_reset_begin(m);
    cm_reset_end(m);
    assert_int_equal(x.n, 16);
    assert_int_equal(x.dels, 16);
    static const cm_change_kind order[] = {
        CM_CH_WALREF, CM_CH_PAYREF, CM_CH_PART,    CM_CH_PART, CM_CH_PART,
        CM_CH_TOPIC,  CM_CH_TOPIC,  CM_CH_BCONF,   CM_CH_COUNTER, CM_CH_LOG,
        CM_CH_LOG,    CM_CH_LOG,    CM_CH_NODE,    CM_CH_NODE, CM_CH_CONTROLLER,
        CM_CH_CLUSTER_ID};
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(x.r[i].kind, order[i]);
    expect(&x, 1, CM_CH_PAYREF, "payref 12/10 lsn 500@16", "-");
    expect(&x, 12, CM_CH_NODE, "node 1 a log 10 l1@3", "-"); /* nodes by ascending id */
    expect(&x, 15, CM_CH_CLUSTER_ID, "cid cid", "-");
    size_t it = 0;
    assert_null(cm_part_next(m, &it));
    assert_string_equal(cm_cluster_id(m), "");

    /* From nothing to the whole state: creations, what others depend on first. */
    x.n = x.dels = x.adds = x.chgs = 0;
    cm_reset_begin(m);
    reset_fixture(m, ta, tb);
    cm_reset_end(m);
    assert_int_equal(x.n, 16);
    assert_int_equal(x.adds, 16);
    static const cm_change_kind created[] = {
        CM_CH_CLUSTER_ID, CM_CH_COUNTER, CM_CH_NODE,   CM_CH_NODE,  CM_CH_LOG,
        CM_CH_LOG,        CM_CH_LOG,     CM_CH_TOPIC,  CM_CH_TOPIC, CM_CH_PART,
        CM_CH_PART,       CM_CH_PART,    CM_CH_WALREF, CM_CH_PAYREF, CM_CH_BCONF,
        CM_CH_CONTROLLER};
    for (size_t i = 0; i < 16; i++)
        assert_int_equal(x.r[i].kind, created[i]);
    expect(&x, 6, CM_CH_LOG, "-", "log 12 node 2 live cust -1 payload@15");
    expect(&x, 13, CM_CH_PAYREF, "-", "payref 12/10 lsn 500@16");

    /* A destroy in the middle of a reset frees both states. */
    cm_reset_begin(m);
    reset_fixture(m, tb, ta);
    cm_destroy(m);
}

/* 200 topics of 100 partitions: applied, looked up, iterated, reset. */
static void test_large(void **state)
{
    (void)state;
    enum { TOPICS = 200, PARTS = 100 };
    ctx x;
    cm_model *m = model(&x);
    char *vals[4];
    for (int s = 0; s < 4; s++) {
        cm_part p = {.epoch = 1 + s, .node = s, .log = 5, .state = CM_PART_ACTIVE, .stream = 9};
        vals[s] = cm_encode_part(&p);
    }
    double t0 = now_s();
    int64_t rev = 1;
    for (int t = 0; t < TOPICS; t++) {
        char name[32];
        snprintf(name, sizeof name, "t%03d", t);
        assert_int_equal(put_topic(m, name, tid(t + 1), PARTS, rev++), 0);
        for (int p = 0; p < PARTS; p++) {
            kc_uuid u = tid(t + 1);
            char k[256];
            cm_key_part(P, &u, p, k, sizeof k);
            assert_int_equal(put_raw(m, k, vals[(t + p) % 4], rev++), 0);
        }
    }
    double t_apply = now_s() - t0;
    assert_int_equal(x.adds, TOPICS + TOPICS * PARTS);

    /* A million lookups: a linear scan would take minutes. */
    t0 = now_s();
    int found = 0;
    for (int round = 0; round < 50; round++)
        for (int t = 0; t < TOPICS; t++) {
            kc_uuid u = tid(t + 1);
            for (int p = 0; p < PARTS; p++) {
                const cm_part *cp = cm_part_get(m, &u, p);
                found += cp && cp->index == p && cp->epoch == 1 + (t + p) % 4;
            }
        }
    for (int round = 0; round < 50; round++)
        for (int t = 0; t < TOPICS; t++) {
            char name[32];
            snprintf(name, sizeof name, "t%03d", t);
            kc_uuid u = tid(t + 1);
            found += cm_topic_get(m, name) == cm_topic_by_id(m, &u);
        }
    double t_lookup = now_s() - t0;
    assert_int_equal(found, 50 * TOPICS * PARTS + 50 * TOPICS);
    size_t it = 0, count = 0;
    while (cm_part_next(m, &it))
        count++;
    assert_int_equal(count, TOPICS * PARTS);

    /* Delete one topic's partitions. */
    kc_uuid u0 = tid(1);
    for (int p = 0; p < PARTS; p++)
        assert_int_equal(del_part(m, u0, p, rev++), 0);
    assert_null(cm_part_get(m, &u0, 0));
    it = count = 0;
    while (cm_part_next(m, &it))
        count++;
    assert_int_equal(count, (TOPICS - 1) * PARTS);

    /* A reset to the odd topics, unchanged, and one partition changed. */
    t0 = now_s();
    x.n = x.dels = x.adds = x.chgs = 0;
    cm_reset_begin(m);
    rev = 1;
    for (int t = 0; t < TOPICS; t++) {
        char name[32];
        snprintf(name, sizeof name, "t%03d", t);
        if (t % 2 == 0) {
            rev += 1 + PARTS;
            continue;
        }
        assert_int_equal(put_topic(m, name, tid(t + 1), PARTS, rev++), 0);
        for (int p = 0; p < PARTS; p++, rev++) {
            kc_uuid u = tid(t + 1);
            char k[256];
            cm_key_part(P, &u, p, k, sizeof k);
            bool moved = t == 1 && p == 0;
            assert_int_equal(put_raw(m, k, vals[(t + p + moved) % 4], moved ? 999999 : rev),
                             0);
        }
    }
    cm_reset_end(m);
    double t_reset = now_s() - t0;
    /* t000's partitions were already gone; its topic key was not. */
    assert_int_equal(x.dels, (TOPICS / 2 - 1) * PARTS + TOPICS / 2);
    assert_int_equal(x.adds, 0);
    assert_int_equal(x.chgs, 1);
    assert_int_equal(x.model_mismatch, 0);
    it = count = 0;
    while (cm_part_next(m, &it))
        count++;
    assert_int_equal(count, TOPICS / 2 * PARTS);
    print_message("20000 partitions: applied in %.3f s, 1M lookups in %.3f s, reset in %.3f s\n",
                  t_apply, t_lookup, t_reset);
    /* Generous bounds (sanitizers, a loaded machine), far below a linear model's. */
    assert_true(t_apply < 20.0);
    assert_true(t_lookup < 5.0);
    assert_true(t_reset < 20.0);
    for (int s = 0; s < 4; s++)
        free(vals[s]);
    cm_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_keys),
        cmocka_unit_test(test_roundtrip_scalars),
        cmocka_unit_test(test_roundtrip_node_log),
        cmocka_unit_test(test_roundtrip_topic_part_bconf),
        cmocka_unit_test(test_decode_unknown_fields),
        cmocka_unit_test(test_decode_missing_and_wrong_types),
        cmocka_unit_test(test_decode_bad_values),
        cmocka_unit_test(test_decode_limits),
        cmocka_unit_test(test_apply_each_kind),
        cmocka_unit_test(test_payrefs_and_log_kind),
        cmocka_unit_test(test_ignored_keys),
        cmocka_unit_test(test_invalid_values_and_keys),
        cmocka_unit_test(test_topic_ids),
        cmocka_unit_test(test_stale_and_duplicates),
        cmocka_unit_test(test_queries),
        cmocka_unit_test(test_revision),
        cmocka_unit_test(test_reset),
        cmocka_unit_test(test_reset_restart_and_empty),
        cmocka_unit_test(test_large),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
