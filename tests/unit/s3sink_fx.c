/*
 * s3sink_fx: the fixture of the test_s3sink_* programs (included by them,
 * after cmocka.h): a file object store in a temporary directory, payloads
 * with a recognizable pattern, and a check that an object put by objupload
 * or objcompact holds what its registry entry says, byte for byte.
 *
 * Contract: test thread only; the store's blocking calls need no running
 * loop. fx_teardown removes the directory.
 */
#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objfmt.h"
#include "objreg.h"
#include "objstore.h"

#define FX_FN static __attribute__((unused))

typedef struct fx {
    char dir[64];
    struct event_base *base;
    objstore *os;
} fx;

FX_FN int fx_setup(void **state)
{
    fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/skiff-test-s3sink-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    char url[128], why[256] = "";
    snprintf(url, sizeof url, "file://%s/objects", f->dir);
    f->base = event_base_new();
    f->os = objstore_open(f->base, url, NULL, why, sizeof why);
    if (!f->os) {
        fprintf(stderr, "objstore_open(%s): %s\n", url, why);
        return -1;
    }
    *state = f;
    return 0;
}

FX_FN int fx_teardown(void **state)
{
    fx *f = *state;
    objstore_destroy(f->os);
    event_base_free(f->base);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", f->dir);
    if (system(cmd) != 0)
        fprintf(stderr, "could not remove %s\n", f->dir);
    free(f);
    return 0;
}

/* The payload of the batch of `stream` at `base`: the same bytes wherever
 * the batch is written, so that a rewritten object can be checked. */
FX_FN uint8_t *fx_payload(uint64_t stream, int64_t base, uint32_t size)
{
    uint8_t *p = malloc(size ? size : 1);
    for (uint32_t i = 0; i < size; i++)
        p[i] = (uint8_t)(stream * 131 + (uint64_t)base * 7 + i);
    return p;
}

FX_FN void fx_check_batch(uint64_t stream, const objfmt_batch *b, const uint8_t *payload)
{
    uint8_t *want = fx_payload(stream, (int64_t)b->base_offset, b->size);
    assert_memory_equal(payload, want, b->size ? b->size : 0);
    free(want);
}

/* GETs the object and checks kind, size, its streams against o's ranges,
 * and every batch's bytes. Returns the number of batches. */
FX_FN size_t fx_check_object(fx *f, const objreg_object *o)
{
    uint8_t *data = NULL;
    size_t got = 0;
    uint64_t size = 0;
    assert_int_equal(objstore_get_sync(f->os, o->key, 0, OBJSTORE_TO_END, NULL, &data, &got,
                                       &size),
                     0);
    assert_int_equal(got, o->size);
    objfmt_reader *r = NULL;
    uint64_t noff;
    size_t nlen;
    assert_int_equal(objfmt_reader_from_tail(data, got, got, &r, &noff, &nlen), 0);
    assert_int_equal(objfmt_reader_footer(r)->kind, o->kind);
    assert_int_equal(objfmt_reader_footer(r)->created_ms, o->created_ms);
    size_t ns;
    const objfmt_stream *ss = objfmt_reader_streams(r, &ns);
    assert_int_equal(ns, o->nranges);
    for (size_t i = 0; i < ns; i++) {
        assert_int_equal(ss[i].stream_id, o->ranges[i].stream);
        assert_int_equal(ss[i].start_offset, o->ranges[i].start);
        assert_int_equal(ss[i].end_offset, o->ranges[i].end);
        assert_int_equal(ss[i].size, o->ranges[i].size);
        assert_int_equal(ss[i].record_count, o->ranges[i].records);
    }
    size_t nb, batches = 0;
    const objfmt_entry *bl = objfmt_reader_blocks(r, &nb);
    for (size_t i = 0; i < nb; i++) {
        objfmt_iter it;
        assert_int_equal(objfmt_iter_init(&it, &bl[i], data + bl[i].position, bl[i].size), 0);
        objfmt_batch b;
        const uint8_t *payload;
        while (objfmt_iter_next(&it, &b, &payload) == 1) {
            fx_check_batch(bl[i].stream_id, &b, payload);
            batches++;
        }
    }
    objfmt_reader_destroy(r);
    free(data);
    return batches;
}

/* Whether the store holds key. */
FX_FN int fx_exists(fx *f, const char *key)
{
    uint64_t size;
    int64_t mtime;
    return objstore_head_sync(f->os, key, &size, &mtime) == 0;
}
