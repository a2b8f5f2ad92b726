/*
 * fuzz_request: libFuzzer target for the Kafka codec on the request path.
 *
 * Input: one request frame without its 4-byte size (header, then body).
 * The header is read as v2 when the API version is flexible for that API
 * (ApiVersions included, whatever the version says), else v1; known APIs at
 * a version in their range are decoded with an arena capped at 4x the input
 * plus 64 KiB. The body is decoded both as the request and as the response
 * of that API (the same codec serves test clients and proxies), and the
 * consumer-protocol blobs of JoinGroup/SyncGroup as the data schemas.
 *
 * Whenever a decode succeeds:
 *  - kc_size equals what kc_encode writes, and is no larger than the input
 *    the decode consumed (re-encoding only drops unknown tags and padding);
 *  - that encoding decodes again, completely, and re-encodes to the same
 *    bytes.
 * A broken invariant aborts under libFuzzer; skiff_fuzz_request returns -1
 * for it so that test_fuzz_replay (which #includes this file) can report it.
 */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kc.h"
#include "kmsg.h"
#include "sk_arena.h"
#include "sk_err.h"

int skiff_fuzz_request(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int broken(const char *what, int16_t ver, const char *msg)
{
    fprintf(stderr, "fuzz_request: %s v%d: %s\n", what, ver, msg);
    return -1;
}

/* Decodes p[0..n) as s into a fresh struct from `a`; on success checks the
 * invariants above and returns the struct in *decoded (else NULL). */
static int check_body(const char *what, const kc_struct *s, int16_t ver, bool flex,
                      const uint8_t *p, size_t n, size_t cap, sk_arena *a, void **decoded)
{
    *decoded = NULL;
    void *msg = sk_arena_alloc(a, s->size);
    if (!msg)
        return 0;
    kc_reader r;
    kc_reader_init(&r, p, n);
    int rc = kc_decode(s, ver, flex, &r, msg, a);
    if (rc == SK_ERR_PARSE || rc == SK_ERR_NOMEM)
        return r.err_at <= n ? 0 : broken(what, ver, "err_at past the input");
    if (rc != 0)
        return broken(what, ver, "unexpected error code");
    size_t used = (size_t)(r.p - p);

    int ret = 0;
    size_t sz = kc_size(s, ver, flex, msg);
    if (sz > used)
        return broken(what, ver, "re-encoding larger than the input");
    uint8_t *enc = malloc(sz + 1), *enc2 = NULL;
    sk_arena *a2 = sk_arena_new(cap);
    if (!enc || !a2)
        goto out;
    if ((size_t)(kc_encode(s, ver, flex, msg, enc) - enc) != sz) {
        ret = broken(what, ver, "kc_size differs from what kc_encode wrote");
        goto out;
    }
    void *msg2 = sk_arena_alloc(a2, s->size);
    if (!msg2)
        goto out;
    kc_reader_init(&r, enc, sz);
    rc = kc_decode(s, ver, flex, &r, msg2, a2);
    if (rc != 0 || r.p != r.end) {
        ret = broken(what, ver, "own encoding does not decode completely");
        goto out;
    }
    size_t sz2 = kc_size(s, ver, flex, msg2);
    enc2 = malloc(sz2 + 1);
    if (!enc2)
        goto out;
    if (sz2 != sz || (size_t)(kc_encode(s, ver, flex, msg2, enc2) - enc2) != sz ||
        memcmp(enc, enc2, sz) != 0) {
        ret = broken(what, ver, "re-encoding is not stable");
        goto out;
    }
    *decoded = msg;
out:
    free(enc);
    free(enc2);
    sk_arena_destroy(a2);
    return ret;
}

/* A consumer-protocol blob: int16 version, then the body of that version
 * (a newer version is read with the newest layout known, trailing bytes
 * allowed, as consumers do). */
static int check_blob(const char *what, const kc_struct *s, int16_t max_ver, kc_bytes b,
                      size_t cap, sk_arena *a)
{
    if (b.len < 2)
        return 0;
    kc_reader r;
    kc_reader_init(&r, b.p, (size_t)b.len);
    int16_t ver;
    if (kc_read_i16(&r, &ver) || ver < 0)
        return 0;
    if (ver > max_ver)
        ver = max_ver;
    void *decoded;
    return check_body(what, s, ver, false, r.p, (size_t)(r.end - r.p), cap, a, &decoded);
}

static int check_group_blobs(int16_t key, bool is_req, const void *msg, size_t cap, sk_arena *a)
{
    const kc_struct *sub = &kp_ConsumerProtocolSubscription_desc;
    const kc_struct *asg = &kp_ConsumerProtocolAssignment_desc;
    int16_t sub_max = KP_CONSUMER_PROTOCOL_SUBSCRIPTION_MAX_VER;
    int16_t asg_max = KP_CONSUMER_PROTOCOL_ASSIGNMENT_MAX_VER;
    int bad = 0;
    if (key == KP_JOIN_GROUP && is_req) {
        const kp_JoinGroupRequest *m = msg;
        for (int32_t i = 0; i < m->protocols.n && !bad; i++)
            bad = check_blob("Subscription", sub, sub_max, m->protocols.v[i].metadata, cap, a);
    } else if (key == KP_JOIN_GROUP) {
        const kp_JoinGroupResponse *m = msg;
        for (int32_t i = 0; i < m->members.n && !bad; i++)
            bad = check_blob("Subscription", sub, sub_max, m->members.v[i].metadata, cap, a);
    } else if (key == KP_SYNC_GROUP && is_req) {
        const kp_SyncGroupRequest *m = msg;
        for (int32_t i = 0; i < m->assignments.n && !bad; i++)
            bad = check_blob("Assignment", asg, asg_max, m->assignments.v[i].assignment, cap, a);
    } else if (key == KP_SYNC_GROUP) {
        const kp_SyncGroupResponse *m = msg;
        bad = check_blob("Assignment", asg, asg_max, m->assignment, cap, a);
    }
    return bad;
}

int skiff_fuzz_request(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    int16_t key = (int16_t)((data[0] << 8) | data[1]);
    int16_t ver = (int16_t)((data[2] << 8) | data[3]);
    const kc_api *api = kc_api_get(key);
    if (!api)
        return 0;
    bool flex = ver >= api->flex_min;
    kc_reader r;
    kc_reader_init(&r, data, size);
    kc_req_header h;
    if (kc_read_req_header(&r, &h, flex) != 0)
        return r.err_at <= size ? 0 : broken("RequestHeader", ver, "err_at past the input");
    if (h.api_key != key || h.api_version != ver)
        return broken("RequestHeader", ver, "key or version misread");
    if (ver < api->min_ver || ver > api->max_ver)
        return 0;

    const uint8_t *body = r.p;
    size_t n = (size_t)(r.end - r.p);
    size_t cap = 4 * size + 65536;
    int bad = 0;
    for (int pass = 0; pass < 2 && !bad; pass++) {
        bool is_req = pass == 0;
        sk_arena *a = sk_arena_new(cap);
        if (!a)
            return 0;
        void *msg;
        bad = check_body(api->name, is_req ? api->req : api->resp, ver, flex, body, n, cap, a,
                         &msg);
        if (!bad && msg)
            bad = check_group_blobs(key, is_req, msg, cap, a);
        sk_arena_destroy(a);
    }
    return bad;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (skiff_fuzz_request(data, size) != 0)
        abort();
    return 0;
}
