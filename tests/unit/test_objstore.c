/* objstore: the file:// backend in a temporary directory, then the s3://
 * backend against the S3 emulator (tools/s3rver.sh, SigV4 verified) started
 * by this test on a free loopback port: round trips, ranges, listing with
 * pagination, multipart, a wrong secret (403), injected faults and retries,
 * bounded concurrency, IMDSv2 credentials from a fake metadata server, and
 * shutdown with work in flight. The S3 part is skipped, with a message,
 * when node/npm are missing. Ends by printing latency and throughput
 * against the emulator (no timed assertions). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <event2/event.h>
#include <ftw.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "objstore.h"
#include "sk_crc32c.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

/* ---- helpers ---- */

static int rm_cb(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb;
    (void)flag;
    (void)ftw;
    return remove(path);
}

static void rm_rf(const char *dir)
{
    nftw(dir, rm_cb, 16, FTW_DEPTH | FTW_PHYS);
}

struct res {
    bool done;
    int err;
    uint8_t *data;
    size_t len;
    uint64_t size;
    int64_t mtime;
    objstore_list_page page;
    int calls;
};

static void done_cb(void *arg, int err)
{
    struct res *r = arg;
    r->done = true;
    r->err = err;
    r->calls++;
}

static void get_cb(void *arg, int err, uint8_t *data, size_t len, uint64_t obj_size)
{
    struct res *r = arg;
    r->done = true;
    r->err = err;
    r->data = data;
    r->len = len;
    r->size = obj_size;
    r->calls++;
}

static void head_cb(void *arg, int err, uint64_t size, int64_t mtime)
{
    struct res *r = arg;
    r->done = true;
    r->err = err;
    r->size = size;
    r->mtime = mtime;
    r->calls++;
}

static void list_cb(void *arg, int err, const objstore_list_page *page)
{
    struct res *r = arg;
    r->done = true;
    r->err = err;
    r->calls++;
    memset(&r->page, 0, sizeof r->page);
    if (err)
        return;
    r->page.n = page->n;
    r->page.entries = calloc(page->n + 1, sizeof *page->entries);
    for (size_t i = 0; i < page->n; i++) {
        r->page.entries[i] = page->entries[i];
        r->page.entries[i].key = strdup(page->entries[i].key);
    }
    r->page.next_token = page->next_token ? strdup(page->next_token) : NULL;
}

static void wait_all(struct event_base *base, struct res *r, int n)
{
    int64_t deadline = sk_mono_ms() + 20000;
    for (;;) {
        int done = 0;
        for (int i = 0; i < n; i++)
            done += r[i].done;
        if (done == n)
            return;
        assert_true(sk_mono_ms() < deadline);
        event_base_loop(base, EVLOOP_ONCE);
    }
}

static void wait_one(struct event_base *base, struct res *r)
{
    wait_all(base, r, 1);
}

static uint8_t *pattern(size_t n, unsigned seed)
{
    uint8_t *p = malloc(n ? n : 1);
    uint32_t x = seed * 2654435761u + 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        p[i] = (uint8_t)x;
    }
    return p;
}

static int do_put(struct event_base *base, objstore *s, const char *key, const void *p, size_t n)
{
    struct res r = {0};
    struct iovec v = {(void *)p, n};
    objstore_put(s, key, &v, 1, done_cb, &r);
    assert_false(r.done); /* never inside the call */
    wait_one(base, &r);
    assert_int_equal(r.calls, 1);
    return r.err;
}

static struct res do_get(struct event_base *base, objstore *s, const char *key, uint64_t off,
                         size_t len, void *buf)
{
    struct res r = {0};
    objstore_get(s, key, off, len, buf, get_cb, &r);
    assert_false(r.done);
    wait_one(base, &r);
    return r;
}

static struct res do_head(struct event_base *base, objstore *s, const char *key)
{
    struct res r = {0};
    objstore_head(s, key, head_cb, &r);
    assert_false(r.done);
    wait_one(base, &r);
    return r;
}

static int do_delete(struct event_base *base, objstore *s, const char *key)
{
    struct res r = {0};
    objstore_delete(s, key, done_cb, &r);
    assert_false(r.done);
    wait_one(base, &r);
    return r.err;
}

static struct res do_list(struct event_base *base, objstore *s, const char *prefix,
                          const char *token, int max)
{
    struct res r = {0};
    objstore_list(s, prefix, token, max, list_cb, &r);
    assert_false(r.done);
    wait_one(base, &r);
    return r;
}

/* ---- fixture ---- */

struct fx {
    char dir[64];
    char url[400];
    struct event_base *base;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/skiff-test-objstore-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    snprintf(f->url, sizeof f->url, "file://%s/objects", f->dir);
    f->base = event_base_new();
    *state = f;
    return 0;
}

static int teardown(void **state)
{
    struct fx *f = *state;
    rm_rf(f->dir);
    event_base_free(f->base);
    free(f);
    return 0;
}

static objstore *open_url(struct fx *f, const char *url, const objstore_opts *o)
{
    char why[256] = "";
    objstore *s = objstore_open(f->base, url, o, why, sizeof why);
    if (!s)
        fail_msg("objstore_open(%s): %s", url, why);
    return s;
}

/* ---- shared scenarios (both backends) ---- */

static void scenario_roundtrip(struct fx *f, objstore *s, const char *key)
{
    size_t n = 300000;
    uint8_t *p = pattern(n, 1);
    struct iovec v[3] = {{p, 1000}, {p + 1000, 0}, {p + 1000, n - 1000}};
    struct res r = {0};
    objstore_put(s, key, v, 3, done_cb, &r);
    assert_false(r.done);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);

    /* whole, store-allocated */
    r = do_get(f->base, s, key, 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, n);
    assert_memory_equal(r.data, p, n);
    free(r.data);

    /* ranged into the caller's buffer */
    uint8_t buf[4096];
    r = do_get(f->base, s, key, 12345, sizeof buf, buf);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, sizeof buf);
    assert_ptr_equal(r.data, buf);
    assert_memory_equal(buf, p + 12345, sizeof buf);
    assert_int_equal(r.size, n);

    /* ranged, scattered into several of the caller's buffers (one GET) */
    uint8_t head[1000];
    struct iovec sv[2] = {{head, sizeof head}, {buf, sizeof buf}};
    r = (struct res){0};
    objstore_getv(s, key, 500, sv, 2, NULL, get_cb, &r);
    assert_false(r.done);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, sizeof head + sizeof buf);
    assert_null(r.data);
    assert_memory_equal(head, p + 500, sizeof head);
    assert_memory_equal(buf, p + 500 + sizeof head, sizeof buf);
    /* the same, with each buffer's CRC computed on the way */
    uint32_t crcs[2] = {1, 2};
    memset(head, 0, sizeof head);
    r = (struct res){0};
    objstore_getv(s, key, 500, sv, 2, crcs, get_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    assert_memory_equal(head, p + 500, sizeof head);
    assert_int_equal(crcs[0], sk_crc32c(p + 500, sizeof head));
    assert_int_equal(crcs[1], sk_crc32c(p + 500 + sizeof head, sizeof buf));

    /* ranged, store-allocated, to the end from an offset */
    r = do_get(f->base, s, key, n - 100, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, 100);
    assert_memory_equal(r.data, p + n - 100, 100);
    free(r.data);

    /* a range that passes the end is cut; one past the end reads nothing */
    r = do_get(f->base, s, key, n - 10, sizeof buf, buf);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, 10);
    assert_memory_equal(buf, p + n - 10, 10);
    r = do_get(f->base, s, key, n + 5, 100, NULL);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, 0);
    free(r.data);

    r = do_head(f->base, s, key);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.size, n);
    assert_true(r.mtime > sk_now_ms() - 600000 && r.mtime < sk_now_ms() + 600000);

    /* overwrite with a smaller object */
    assert_int_equal(do_put(f->base, s, key, "short", 5), 0);
    r = do_get(f->base, s, key, 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, 5);
    assert_memory_equal(r.data, "short", 5);
    free(r.data);

    /* empty object */
    char ekey[300];
    snprintf(ekey, sizeof ekey, "%s-empty", key);
    assert_int_equal(do_put(f->base, s, ekey, "", 0), 0);
    r = do_head(f->base, s, ekey);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.size, 0);
    assert_int_equal(do_delete(f->base, s, ekey), 0);

    /* missing keys */
    r = do_get(f->base, s, "no/such/key", 0, 10, NULL);
    assert_int_equal(r.err, SK_ERR_NOENT);
    assert_null(r.data);
    r = do_head(f->base, s, "no/such/key");
    assert_int_equal(r.err, SK_ERR_NOENT);

    assert_int_equal(do_delete(f->base, s, key), 0);
    r = do_get(f->base, s, key, 0, 10, NULL);
    assert_int_equal(r.err, SK_ERR_NOENT);
    assert_int_equal(do_delete(f->base, s, key), 0); /* missing: fine */

    /* keys the rule refuses, through the callback too */
    const char *bad[] = {"", "/abs", "a//b", ".hidden", "a/.b", "a/../b", "dir/", "ctl\x01"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        assert_int_equal(do_put(f->base, s, bad[i], "x", 1), SK_ERR_INVAL);
        r = do_get(f->base, s, bad[i], 0, 1, NULL);
        assert_int_equal(r.err, SK_ERR_INVAL);
    }
    free(p);
}

static void free_page(objstore_list_page *p)
{
    objstore_list_page_free(p);
}

static void scenario_list(struct fx *f, objstore *s)
{
    char key[64];
    for (int i = 0; i < 25; i++) {
        snprintf(key, sizeof key, "list/%c%c/obj-%02d", 'a' + i % 3, 'a' + i % 2, i);
        assert_int_equal(do_put(f->base, s, key, key, strlen(key)), 0);
    }
    assert_int_equal(do_put(f->base, s, "listx", "x", 1), 0);
    assert_int_equal(do_put(f->base, s, "other/obj", "x", 1), 0);

    char *token = NULL;
    char prev[64] = "";
    int total = 0, pages = 0;
    do {
        struct res r = do_list(f->base, s, "list/", token, 10);
        assert_int_equal(r.err, 0);
        pages++;
        for (size_t i = 0; i < r.page.n; i++) {
            objstore_entry *e = &r.page.entries[i];
            assert_true(strncmp(e->key, "list/", 5) == 0);
            assert_true(strcmp(prev, e->key) < 0);
            snprintf(prev, sizeof prev, "%s", e->key);
            assert_int_equal(e->size, strlen(e->key));
            assert_true(e->mtime_ms > 0);
            total++;
        }
        free(token);
        token = r.page.next_token ? strdup(r.page.next_token) : NULL;
        free_page(&r.page);
    } while (token);
    assert_int_equal(total, 25);
    assert_int_equal(pages, 3);

    /* a prefix that ends inside a name */
    struct res r = do_list(f->base, s, "list/b", NULL, 0);
    assert_int_equal(r.err, 0);
    int expect = 0;
    for (int i = 0; i < 25; i++)
        expect += i % 3 == 1;
    assert_int_equal(r.page.n, (size_t)expect);
    assert_null(r.page.next_token);
    free_page(&r.page);

    r = do_list(f->base, s, "list", NULL, 1000);
    assert_int_equal(r.page.n, 26); /* "listx" too */
    free_page(&r.page);

    r = do_list(f->base, s, "nothing/", NULL, 10);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.page.n, 0);
    assert_null(r.page.next_token);
    free_page(&r.page);

    for (int i = 0; i < 25; i++) {
        snprintf(key, sizeof key, "list/%c%c/obj-%02d", 'a' + i % 3, 'a' + i % 2, i);
        assert_int_equal(do_delete(f->base, s, key), 0);
    }
    do_delete(f->base, s, "listx");
    do_delete(f->base, s, "other/obj");
    r = do_list(f->base, s, "list/", NULL, 10);
    assert_int_equal(r.page.n, 0);
    free_page(&r.page);
}

static void scenario_multipart(struct fx *f, objstore *s, size_t part, size_t n)
{
    uint8_t *p = pattern(n, 7);
    /* many small iovecs whose edges fall everywhere relative to the parts */
    int cnt = 0;
    struct iovec v[512];
    for (size_t off = 0; off < n && cnt < 511;) {
        size_t len = 1 + (off * 7919) % 40000;
        if (len > n - off)
            len = n - off;
        v[cnt].iov_base = p + off;
        v[cnt].iov_len = len;
        cnt++;
        off += len;
        if (cnt == 511 && off < n) {
            v[cnt].iov_base = p + off;
            v[cnt].iov_len = n - off;
            cnt++;
        }
    }
    objstore_stats before, after;
    objstore_stats_get(s, &before);
    struct res r = {0};
    objstore_put(s, "mp/object", v, cnt, done_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    objstore_stats_get(s, &after);
    assert_int_equal(after.multipart - before.multipart, 1);
    assert_int_equal(after.parts - before.parts, (n + part - 1) / part);

    r = do_get(f->base, s, "mp/object", 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, n);
    assert_memory_equal(r.data, p, n);
    free(r.data);
    r = do_get(f->base, s, "mp/object", part - 3, 10, NULL);
    assert_int_equal(r.len, 10);
    assert_memory_equal(r.data, p + part - 3, 10);
    free(r.data);

    /* a part refused for good: the upload is aborted and no object appears */
    objstore_inject(s, OBJSTORE_FAULT_403, 2, 1);
    r = (struct res){0};
    objstore_put(s, "mp/failed", v, cnt, done_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, SK_ERR_IO);
    objstore_stats_get(s, &after);
    assert_int_equal(after.aborts - before.aborts, 1);
    r = do_head(f->base, s, "mp/failed");
    assert_int_equal(r.err, SK_ERR_NOENT);
    objstore_inject(s, OBJSTORE_FAULT_NONE, 0, 0);
    assert_int_equal(do_delete(f->base, s, "mp/object"), 0);
    free(p);
}

struct sync_ctx {
    objstore *s;
    int failures;
};

static void *sync_thread(void *arg)
{
    struct sync_ctx *c = arg;
    objstore *s = c->s;
    uint8_t *p = pattern(70000, 3);
    struct iovec v = {p, 70000};
#define CHECK(x)                                                        \
    do {                                                                \
        if (!(x)) {                                                     \
            fprintf(stderr, "sync check failed: %s (line %d)\n", #x, __LINE__); \
            c->failures++;                                              \
        }                                                               \
    } while (0)
    CHECK(objstore_put_sync(s, "sync/a", &v, 1) == 0);
    uint8_t *data = NULL;
    size_t got = 0;
    uint64_t size = 0;
    CHECK(objstore_get_sync(s, "sync/a", 100, 1000, NULL, &data, &got, &size) == 0);
    CHECK(got == 1000 && data && memcmp(data, p + 100, 1000) == 0);
    free(data);
    uint8_t buf[64];
    CHECK(objstore_get_sync(s, "sync/a", 0, sizeof buf, buf, &data, &got, &size) == 0);
    CHECK(data == buf && got == sizeof buf && memcmp(buf, p, sizeof buf) == 0);
    int64_t mt = 0;
    CHECK(objstore_head_sync(s, "sync/a", &size, &mt) == 0 && size == 70000);
    objstore_list_page page;
    CHECK(objstore_list_sync(s, "sync/", NULL, 0, &page) == 0 && page.n == 1 &&
          strcmp(page.entries[0].key, "sync/a") == 0);
    objstore_list_page_free(&page);
    CHECK(objstore_delete_sync(s, "sync/a") == 0);
    CHECK(objstore_head_sync(s, "sync/a", &size, &mt) == SK_ERR_NOENT);
    CHECK(objstore_get_sync(s, "sync/a", 0, 10, NULL, &data, &got, &size) == SK_ERR_NOENT);
    /* several puts at once: each one's result, the first failure in order */
    struct iovec half = {p + 1000, 35000};
    objstore_put_req reqs[4] = {{"sync/m1", &v, 1}, {"sync//bad", &v, 1}, {"sync/m2", &half, 1},
                                {"sync/m3", &v, 1}};
    int errs[4] = {1, 1, 1, 1};
    CHECK(objstore_put_many_sync(s, reqs, 4, errs) == SK_ERR_INVAL);
    CHECK(errs[0] == 0 && errs[1] == SK_ERR_INVAL && errs[2] == 0 && errs[3] == 0);
    CHECK(objstore_head_sync(s, "sync/m2", &size, &mt) == 0 && size == 35000);
    CHECK(objstore_get_sync(s, "sync/m3", 69000, sizeof buf, buf, &data, &got, &size) == 0 &&
          got == 64 && memcmp(buf, p + 69000, 64) == 0);
    CHECK(objstore_put_many_sync(s, reqs + 2, 2, NULL) == 0);
    for (int i = 0; i < 4; i++)
        CHECK(i == 1 || objstore_delete_sync(s, reqs[i].key) == 0);
#undef CHECK
    free(p);
    return NULL;
}

static void scenario_sync(objstore *s)
{
    struct sync_ctx c = {.s = s};
    pthread_t t;
    pthread_create(&t, NULL, sync_thread, &c);
    pthread_join(t, NULL);
    assert_int_equal(c.failures, 0);
}

/* ---- file backend ---- */

static void test_file_roundtrip(void **state)
{
    struct fx *f = *state;
    objstore *s = open_url(f, f->url, NULL);
    assert_string_equal(objstore_kind(s), "file");
    scenario_roundtrip(f, s, "data/0123abcd/so-1-1700000000000.obj");
    /* a delete removes the directories it empties */
    char path[300];
    snprintf(path, sizeof path, "%s/objects/data/0123abcd", f->dir);
    struct stat st;
    assert_int_not_equal(stat(path, &st), 0);
    objstore_destroy(s);
}

static void test_file_list(void **state)
{
    struct fx *f = *state;
    objstore *s = open_url(f, f->url, NULL);
    /* a leftover temporary file is not an object */
    char path[300];
    snprintf(path, sizeof path, "%s/objects/list", f->dir);
    mkdir(path, 0755);
    snprintf(path, sizeof path, "%s/objects/list/.obj.tmp.1.1", f->dir);
    FILE *fp = fopen(path, "w");
    fputs("junk", fp);
    fclose(fp);
    scenario_list(f, s);
    objstore_destroy(s);
}

static int count_files(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int n = 0;
    struct dirent *de;
    while ((de = readdir(d)) != NULL)
        n += de->d_name[0] != '.' || strstr(de->d_name, ".tmp.") != NULL;
    closedir(d);
    return n;
}

static void test_file_multipart(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    objstore_opts_default(&o);
    o.part_size = 64 * 1024;
    objstore *s = open_url(f, f->url, &o);
    scenario_multipart(f, s, o.part_size, 1000 * 1000 + 17);
    char path[300];
    snprintf(path, sizeof path, "%s/objects/mp", f->dir);
    assert_int_equal(count_files(path), 0); /* no temporary file left behind */
    objstore_destroy(s);
}

/* Pages of the file at path in the page cache, or -1 when it cannot say. */
static long resident_pages(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size == 0) {
        if (fd >= 0)
            close(fd);
        return -1;
    }
    long pg = sysconf(_SC_PAGESIZE), n = (st.st_size + pg - 1) / pg, in = 0;
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    unsigned char *v = malloc((size_t)n);
    if (m != MAP_FAILED && v && mincore(m, (size_t)st.st_size, v) == 0)
        for (long i = 0; i < n; i++)
            in += v[i] & 1;
    else
        in = -1;
    free(v);
    if (m != MAP_FAILED)
        munmap(m, (size_t)st.st_size);
    close(fd);
    return in;
}

/* objstore_getv_padded: three buffers, each at its object offset modulo
 * OBJSTORE_PAD within pages of its own, the last one passing the end of
 * the object; read in place, leaving nothing in the page cache when
 * `uncached` (direct I/O works and the object was written that way). */
static void check_padded_get(struct fx *f, objstore *s, const uint8_t *p, size_t n, bool uncached)
{
    uint64_t off = 4097 + 13;
    size_t lens[3] = {300001, 5000, n - off - 300001 - 5000 + 777};
    uint8_t *bufs[3];
    struct iovec sv[3];
    uint64_t o = off;
    for (int i = 0; i < 3; i++) {
        size_t span = (lens[i] + 2 * OBJSTORE_PAD) / OBJSTORE_PAD * OBJSTORE_PAD;
        bufs[i] = aligned_alloc(OBJSTORE_PAD, span);
        assert_non_null(bufs[i]);
        memset(bufs[i], 0xa5, span);
        sv[i] = (struct iovec){bufs[i] + o % OBJSTORE_PAD, lens[i]};
        o += lens[i];
    }
    uint32_t crcs[3];
    struct res r = {0};
    objstore_getv_padded(s, "d/obj", off, sv, 3, crcs, get_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.len, n - off);
    size_t last = n - off - lens[0] - lens[1];
    assert_memory_equal(sv[0].iov_base, p + off, lens[0]);
    assert_memory_equal(sv[1].iov_base, p + off + lens[0], lens[1]);
    assert_memory_equal(sv[2].iov_base, p + off + lens[0] + lens[1], last);
    assert_int_equal(crcs[0], sk_crc32c(p + off, lens[0]));
    assert_int_equal(crcs[1], sk_crc32c(p + off + lens[0], lens[1]));
    assert_int_equal(crcs[2], sk_crc32c(p + off + lens[0] + lens[1], last));
    char path[300];
    snprintf(path, sizeof path, "%s/objects/d/obj", f->dir);
    if (uncached)
        assert_int_equal(resident_pages(path), 0);
    for (int i = 0; i < 3; i++)
        free(bufs[i]);
}

/* Sizes around the block and the direct-write piece, from pieces of odd
 * lengths, with parts on block boundaries (written with O_DIRECT where the
 * file system allows it: nothing left in the page cache) and parts that
 * are not (written through the page cache): every byte back, no padding,
 * large gets read past the page cache as well. */
static void test_file_direct_sizes(void **state)
{
    struct fx *f = *state;
    char probe[300];
    snprintf(probe, sizeof probe, "%s/probe", f->dir);
    int pfd = open(probe, O_WRONLY | O_CREAT | O_DIRECT, 0644);
    bool direct = pfd >= 0;
    if (pfd >= 0)
        close(pfd);
    const size_t sizes[] = {1, 4095, 4096, 4097, (4u << 20) - 1, (4u << 20) + 4100, 9u << 20};
    const size_t parts[] = {8u << 20, 10000};
    for (size_t pi = 0; pi < 2; pi++) {
        objstore_opts o;
        objstore_opts_default(&o);
        o.part_size = parts[pi];
        objstore *s = open_url(f, f->url, &o);
        for (size_t i = 0; i < sizeof sizes / sizeof *sizes; i++) {
            size_t n = sizes[i];
            uint8_t *p = pattern(n, (unsigned)(i + 7 * pi));
            struct iovec v[3] = {{p, n / 3}, {p + n / 3, n / 2 - n / 3}, {p + n / 2, n - n / 2}};
            struct res r = {0};
            objstore_put(s, "d/obj", v, 3, done_cb, &r);
            wait_one(f->base, &r);
            assert_int_equal(r.err, 0);
            char path[300];
            snprintf(path, sizeof path, "%s/objects/d/obj", f->dir);
            struct stat st;
            assert_int_equal(stat(path, &st), 0);
            assert_int_equal((size_t)st.st_size, n);
            if (direct && pi == 0)
                assert_int_equal(resident_pages(path), 0);
            r = do_get(f->base, s, "d/obj", 0, OBJSTORE_TO_END, NULL);
            assert_int_equal(r.err, 0);
            assert_int_equal(r.len, n);
            assert_memory_equal(r.data, p, n);
            free(r.data);
            if (n > 300000) {
                /* Large ranges, from unaligned offsets, into one buffer
                 * and scattered: read directly too, none cached. */
                r = do_get(f->base, s, "d/obj", 4097, n - 4097 - 3, NULL);
                assert_int_equal(r.err, 0);
                assert_int_equal(r.len, n - 4097 - 3);
                assert_memory_equal(r.data, p + 4097, r.len);
                free(r.data);
                size_t a = 100000, b = n - 777 - a;
                uint8_t *x = malloc(a), *y = malloc(b + 50);
                struct iovec sv[2] = {{x, a}, {y, b + 50}};
                uint32_t crcs[2];
                r = (struct res){0};
                objstore_getv(s, "d/obj", 777, sv, 2, crcs, get_cb, &r);
                wait_one(f->base, &r);
                assert_int_equal(r.err, 0);
                assert_int_equal(r.len, a + b);
                assert_memory_equal(x, p + 777, a);
                assert_memory_equal(y, p + 777 + a, b);
                assert_int_equal(crcs[0], sk_crc32c(p + 777, a));
                assert_int_equal(crcs[1], sk_crc32c(p + 777 + a, b));
                free(x);
                free(y);
                if (direct && pi == 0)
                    assert_int_equal(resident_pages(path), 0);
                check_padded_get(f, s, p, n, direct && pi == 0);
            }
            free(p);
        }
        objstore_destroy(s);
    }
}

static void test_file_faults_and_sync(void **state)
{
    struct fx *f = *state;
    objstore *s = open_url(f, f->url, NULL);
    assert_int_equal(do_put(f->base, s, "k", "v", 1), 0);
    objstore_inject(s, OBJSTORE_FAULT_503, 0, 2);
    struct res r = do_get(f->base, s, "k", 0, 1, NULL);
    assert_int_equal(r.err, SK_ERR_IO);
    assert_int_equal(do_put(f->base, s, "k2", "v", 1), SK_ERR_IO);
    r = do_get(f->base, s, "k", 0, 1, NULL);
    assert_int_equal(r.err, 0);
    free(r.data);
    objstore_inject(s, OBJSTORE_FAULT_TIMEOUT, 0, 1);
    r = do_head(f->base, s, "k");
    assert_int_equal(r.err, SK_ERR_TIMEOUT);
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_int_equal(st.injected, 3);
    assert_int_equal(st.err_throttle, 2);
    assert_int_equal(st.err_timeout, 1);
    assert_true(st.ops_failed >= 3);
    char le[200];
    objstore_last_error(s, le, sizeof le);
    assert_non_null(strstr(le, "injected"));
    scenario_sync(s);
    objstore_destroy(s);
}

static void test_file_relative_and_destroy(void **state)
{
    struct fx *f = *state;
    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->dir), 0);
    objstore *s = open_url(f, "file://rel/objs", NULL);
    assert_int_equal(do_put(f->base, s, "a", "hello", 5), 0);
    struct stat st;
    assert_int_equal(stat("rel/objs/a", &st), 0);
    /* operations still queued at destroy run their callbacks, once each */
    struct res r[40] = {{0}};
    for (int i = 0; i < 40; i++)
        objstore_get(s, "a", 0, 5, NULL, get_cb, &r[i]);
    objstore_destroy(s);
    for (int i = 0; i < 40; i++) {
        assert_int_equal(r[i].calls, 1);
        assert_true(r[i].err == 0 || r[i].err == SK_ERR_CLOSED);
        free(r[i].data);
    }
    assert_int_equal(chdir(cwd), 0);
}

static void test_url_errors(void **state)
{
    struct fx *f = *state;
    char why[256];
    const char *bad[] = {"nothing", "ftp://x", "file://", "s3://", "s3:///prefix?region=x",
                         "s3://b?region=r&bogus=1", "s3://b?region=r&endpoint=ftp://h",
                         "s3://b?region=r&endpoint=http://h/path", "s3://b?region=r&path-style=maybe",
                         "s3://b?region"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        objstore *s = objstore_open(f->base, bad[i], NULL, why, sizeof why);
        if (s)
            fail_msg("%s was accepted", bad[i]);
        assert_true(why[0] != '\0');
    }
    /* AWS needs a region */
    char *r1 = getenv("AWS_REGION") ? strdup(getenv("AWS_REGION")) : NULL;
    char *r2 = getenv("AWS_DEFAULT_REGION") ? strdup(getenv("AWS_DEFAULT_REGION")) : NULL;
    unsetenv("AWS_REGION");
    unsetenv("AWS_DEFAULT_REGION");
    assert_null(objstore_open(f->base, "s3://bucket/prefix", NULL, why, sizeof why));
    assert_non_null(strstr(why, "region"));
    if (r1)
        setenv("AWS_REGION", r1, 1);
    if (r2)
        setenv("AWS_DEFAULT_REGION", r2, 1);
    free(r1);
    free(r2);
}

/* ---- the S3 emulator ---- */

static char s3_dir[64];
static int s3_port;
static bool s3_up;
static char s3_skip_reason[200];

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    bind(fd, (struct sockaddr *)&a, sizeof a);
    socklen_t l = sizeof a;
    getsockname(fd, (struct sockaddr *)&a, &l);
    close(fd);
    return ntohs(a.sin_port);
}

static const char *source_dir(void)
{
    static char dir[512];
    const char *env = getenv("SKIFF_SOURCE_DIR");
    if (env && *env)
        return env;
    snprintf(dir, sizeof dir, "%s", __FILE__);
    char *p = strstr(dir, "/tests/unit/");
    if (p)
        *p = '\0';
    else
        strcpy(dir, ".");
    return dir;
}

static int s3_group_setup(void **state)
{
    (void)state;
    strcpy(s3_dir, "/tmp/skiff-test-s3rver-XXXXXX");
    if (!mkdtemp(s3_dir))
        return -1;
    char cmd[1024];
    /* The emulator exits by itself should this program die before stopping it. */
    snprintf(cmd, sizeof cmd, "%ld", (long)getpid());
    setenv("SKIFF_S3RVER_OWNER_PID", cmd, 1);
    for (int tries = 0; tries < 3 && !s3_up; tries++) {
        s3_port = free_port();
        snprintf(cmd, sizeof cmd, "%s/tools/s3rver.sh start %s %d test >%s/start.log 2>&1",
                 source_dir(), s3_dir, s3_port, s3_dir);
        int rc = system(cmd);
        int code = WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
        if (code == 0) {
            s3_up = true;
        } else if (code == 77) {
            snprintf(s3_skip_reason, sizeof s3_skip_reason,
                     "S3 emulator unavailable (node/npm missing): S3 tests skipped");
            break;
        } else {
            snprintf(cmd, sizeof cmd, "cat %s/start.log >&2", s3_dir);
            if (system(cmd) != 0)
                break;
        }
    }
    if (!s3_up && !s3_skip_reason[0])
        return -1; /* node is there but the emulator would not start: a failure */
    if (!s3_up)
        fprintf(stderr, "%s\n", s3_skip_reason);
    return 0;
}

static int s3_group_teardown(void **state)
{
    (void)state;
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s/tools/s3rver.sh stop %s", source_dir(), s3_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "stopping the S3 emulator failed\n");
    rm_rf(s3_dir);
    return 0;
}

static void s3_opts(objstore_opts *o)
{
    objstore_opts_default(o);
    o->access_key = "S3RVER";
    o->secret_key = "S3RVER";
    o->backoff_base_ms = 5;
    o->backoff_max_ms = 50;
    o->request_timeout_ms = 10000;
}

static objstore *s3_open(struct fx *f, const char *prefix, const objstore_opts *o)
{
    if (!s3_up)
        skip();
    char url[300];
    snprintf(url, sizeof url, "s3://test/%s?region=us-east-1&endpoint=http://127.0.0.1:%d&path-style=true",
             prefix, s3_port);
    snprintf(f->url, sizeof f->url, "%s", url);
    return open_url(f, url, o);
}

static void test_s3_roundtrip(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    objstore *s = s3_open(f, "cluster-a", &o);
    assert_string_equal(objstore_kind(s), "s3");
    scenario_roundtrip(f, s, "data/0123abcd/so-1-1700000000000.obj");
    /* keys that need encoding */
    scenario_roundtrip(f, s, "odd keys/with space+plus=eq&amp~tilde(1)");
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_int_equal(st.retries, 0);
    assert_true(st.bytes_up > 300000 && st.bytes_down > 300000);
    objstore_destroy(s);
}

static void test_s3_list(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    objstore *s = s3_open(f, "pfx", &o);
    scenario_list(f, s);
    objstore_destroy(s);
    /* without a prefix, keys come back whole */
    s = s3_open(f, "", &o);
    assert_int_equal(do_put(f->base, s, "top/level", "x", 1), 0);
    struct res r = do_list(f->base, s, "top/", NULL, 10);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.page.n, 1);
    assert_string_equal(r.page.entries[0].key, "top/level");
    free_page(&r.page);
    assert_int_equal(do_delete(f->base, s, "top/level"), 0);
    objstore_destroy(s);
}

static void test_s3_multipart(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    o.part_size = 256 * 1024;
    objstore *s = s3_open(f, "mp", &o);
    scenario_multipart(f, s, o.part_size, 1024 * 1024 + 123);
    objstore_destroy(s);
    /* the same with signed payloads (x-amz-content-sha256 = the body's hash) */
    o.sign_payload = true;
    s = s3_open(f, "mp-signed", &o);
    scenario_multipart(f, s, o.part_size, 600 * 1024);
    assert_int_equal(do_put(f->base, s, "small", "payload", 7), 0);
    struct res r = do_get(f->base, s, "small", 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.len, 7);
    free(r.data);
    objstore_destroy(s);
}

static void test_s3_wrong_secret(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    o.secret_key = "not-the-secret";
    objstore *s = s3_open(f, "auth", &o);
    assert_int_equal(do_put(f->base, s, "k", "v", 1), SK_ERR_IO);
    char le[512];
    objstore_last_error(s, le, sizeof le);
    assert_non_null(strstr(le, "HTTP 403"));
    assert_non_null(strstr(le, "SignatureDoesNotMatch"));
    struct res r = do_get(f->base, s, "k", 0, 1, NULL);
    assert_int_equal(r.err, SK_ERR_IO);
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_int_equal(st.retries, 0); /* a refusal is not retried */
    assert_int_equal(st.err_4xx, 2);
    objstore_destroy(s);
}

static void test_s3_retries(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    o.max_attempts = 4;
    objstore *s = s3_open(f, "retry", &o);
    assert_int_equal(do_put(f->base, s, "k", "value", 5), 0);

    objstore_inject(s, OBJSTORE_FAULT_503, 0, 2);
    struct res r = do_get(f->base, s, "k", 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.err, 0);
    assert_memory_equal(r.data, "value", 5);
    free(r.data);
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_int_equal(st.retries, 2);
    assert_int_equal(st.err_throttle, 2);
    /* a scattered get retried: its CRCs are of the bytes it ended with */
    objstore_inject(s, OBJSTORE_FAULT_503, 0, 1);
    char x[2], y[3];
    struct iovec sv[2] = {{x, 2}, {y, 3}};
    uint32_t crcs[2] = {7, 7};
    r = (struct res){0};
    objstore_getv(s, "k", 0, sv, 2, crcs, get_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    assert_int_equal(crcs[0], sk_crc32c("va", 2));
    assert_int_equal(crcs[1], sk_crc32c("lue", 3));
    objstore_stats_get(s, &st);
    assert_int_equal(st.retries, 3);

    objstore_inject(s, OBJSTORE_FAULT_500, 0, 3);
    assert_int_equal(do_put(f->base, s, "k2", "v2", 2), 0);
    objstore_inject(s, OBJSTORE_FAULT_CONNECT, 0, 1);
    r = do_head(f->base, s, "k2");
    assert_int_equal(r.err, 0);
    assert_int_equal(r.size, 2);
    objstore_stats_get(s, &st);
    assert_int_equal(st.retries, 7);
    assert_int_equal(st.err_5xx, 3);
    assert_int_equal(st.err_conn, 1);

    /* more failures than attempts: the last one's kind decides the error */
    objstore_inject(s, OBJSTORE_FAULT_TIMEOUT, 0, 4);
    r = do_get(f->base, s, "k", 0, 1, NULL);
    assert_int_equal(r.err, SK_ERR_TIMEOUT);
    objstore_inject(s, OBJSTORE_FAULT_500, 0, 4);
    r = do_head(f->base, s, "k");
    assert_int_equal(r.err, SK_ERR_IO);
    char le[300];
    objstore_last_error(s, le, sizeof le);
    assert_non_null(strstr(le, "HTTP 500 InternalError"));

    /* failures inside a multipart upload: retried parts, then success */
    objstore_opts_default(&o);
    s3_opts(&o);
    o.part_size = 100 * 1024;
    objstore *m = s3_open(f, "retry-mp", &o);
    uint8_t *p = pattern(450 * 1024, 9);
    objstore_inject(m, OBJSTORE_FAULT_503, 2, 3);
    struct iovec v = {p, 450 * 1024};
    r = (struct res){0};
    objstore_put(m, "big", &v, 1, done_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    r = do_get(f->base, m, "big", 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.len, 450 * 1024);
    assert_memory_equal(r.data, p, 450 * 1024);
    free(r.data);
    objstore_stats_get(m, &st);
    assert_int_equal(st.retries, 3);
    assert_int_equal(st.aborts, 0);
    free(p);
    objstore_destroy(m);
    objstore_destroy(s);
}

static void test_s3_concurrency(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    o.max_inflight = 3;
    objstore *s = s3_open(f, "conc", &o);
    size_t n = 2 << 20;
    uint8_t *p = pattern(n, 11);
    struct iovec v = {p, n};
    struct res pr = {0};
    objstore_put(s, "obj", &v, 1, done_cb, &pr);
    wait_one(f->base, &pr);
    assert_int_equal(pr.err, 0);
    enum { N = 30 };
    struct res r[N] = {{0}};
    uint8_t *bufs = malloc((size_t)N * 65536);
    for (int i = 0; i < N; i++)
        objstore_get(s, "obj", (uint64_t)i * 65536, 65536, bufs + (size_t)i * 65536, get_cb, &r[i]);
    objstore_stats st;
    objstore_stats_get(s, &st);
    wait_all(f->base, r, N);
    for (int i = 0; i < N; i++) {
        assert_int_equal(r[i].err, 0);
        assert_int_equal(r[i].len, 65536);
        assert_memory_equal(r[i].data, p + (size_t)i * 65536, 65536);
    }
    objstore_stats_get(s, &st);
    assert_true(st.inflight_peak <= 3);
    assert_true(st.inflight_peak >= 2);
    assert_int_equal(st.inflight, 0);
    assert_int_equal(st.queued, 0);

    /* shutdown with work queued: every callback once, CLOSED or done */
    struct res q[N] = {{0}};
    for (int i = 0; i < N; i++)
        objstore_get(s, "obj", 0, 65536, bufs + (size_t)i * 65536, get_cb, &q[i]);
    objstore_destroy(s);
    for (int i = 0; i < N; i++) {
        assert_int_equal(q[i].calls, 1);
        assert_true(q[i].err == 0 || q[i].err == SK_ERR_CLOSED);
    }
    free(bufs);
    free(p);
}

static void test_s3_sync(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    objstore *s = s3_open(f, "sync", &o);
    scenario_sync(s);
    /* objstore_put_many_sync had its puts in flight together */
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_true(st.inflight_peak >= 2);
    objstore_destroy(s);
}

/* A fake EC2 instance-metadata service (IMDSv2) on loopback. */
struct imds {
    int fd, port;
    pthread_t t;
    atomic_int hits, token_puts;
    atomic_bool stop;
    int64_t expires_ms;
};

static void *imds_main(void *arg)
{
    struct imds *m = arg;
    while (!atomic_load(&m->stop)) {
        int c = accept(m->fd, NULL, NULL);
        if (c < 0)
            continue;
        char req[4096];
        ssize_t n = 0, r;
        while (n < (ssize_t)sizeof req - 1 && (r = read(c, req + n, sizeof req - 1 - (size_t)n)) > 0) {
            n += r;
            req[n] = '\0';
            if (strstr(req, "\r\n\r\n"))
                break;
        }
        req[n > 0 ? n : 0] = '\0';
        atomic_fetch_add(&m->hits, 1);
        char body[1024];
        int status = 200;
        bool has_token = strstr(req, "X-aws-ec2-metadata-token: tok-123") != NULL;
        if (strncmp(req, "PUT /latest/api/token ", 22) == 0 &&
            strstr(req, "X-aws-ec2-metadata-token-ttl-seconds:")) {
            atomic_fetch_add(&m->token_puts, 1);
            strcpy(body, "tok-123");
        } else if (!has_token) {
            status = 401;
            strcpy(body, "");
        } else if (strncmp(req, "GET /latest/meta-data/iam/security-credentials/ ", 48) == 0) {
            strcpy(body, "skiff-role\n");
        } else if (strncmp(req, "GET /latest/meta-data/iam/security-credentials/skiff-role ",
                           58) == 0) {
            time_t t = (time_t)(m->expires_ms / 1000);
            struct tm tm;
            gmtime_r(&t, &tm);
            char exp[64];
            strftime(exp, sizeof exp, "%Y-%m-%dT%H:%M:%SZ", &tm);
            snprintf(body, sizeof body,
                     "{\n  \"Code\" : \"Success\",\n  \"Type\" : \"AWS-HMAC\",\n"
                     "  \"AccessKeyId\" : \"S3RVER\",\n  \"SecretAccessKey\" : \"S3RVER\",\n"
                     "  \"Token\" : \"session\\/token+1\",\n  \"Expiration\" : \"%s\"\n}\n",
                     exp);
        } else {
            status = 404;
            strcpy(body, "");
        }
        char resp[1400];
        int rl = snprintf(resp, sizeof resp,
                          "HTTP/1.1 %d X\r\nContent-Length: %zu\r\nConnection: close\r\n\r\n%s",
                          status, strlen(body), body);
        if (write(c, resp, (size_t)rl) < 0)
            perror("imds write");
        close(c);
    }
    return NULL;
}

static void imds_start(struct imds *m, int64_t expires_ms)
{
    memset(m, 0, sizeof *m);
    m->expires_ms = expires_ms;
    m->fd = socket(AF_INET, SOCK_STREAM, 0);
    int one = 1;
    setsockopt(m->fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(m->fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(m->fd, (struct sockaddr *)&a, &l);
    m->port = ntohs(a.sin_port);
    listen(m->fd, 16);
    struct timeval tv = {0, 100000};
    setsockopt(m->fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    pthread_create(&m->t, NULL, imds_main, m);
}

static void imds_stop(struct imds *m)
{
    atomic_store(&m->stop, true);
    pthread_join(m->t, NULL);
    close(m->fd);
}

static void test_s3_imds_credentials(void **state)
{
    struct fx *f = *state;
    if (!s3_up)
        skip();
    char *saved[3];
    const char *names[3] = {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"};
    for (int i = 0; i < 3; i++) {
        saved[i] = getenv(names[i]) ? strdup(getenv(names[i])) : NULL;
        unsetenv(names[i]);
    }
    struct imds m;
    imds_start(&m, sk_now_ms() + 3600 * 1000);
    char imds_url[64];
    snprintf(imds_url, sizeof imds_url, "http://127.0.0.1:%d", m.port);
    objstore_opts o;
    objstore_opts_default(&o);
    o.imds_url = imds_url;
    o.backoff_base_ms = 5;
    objstore *s = s3_open(f, "imds", &o);
    assert_int_equal(do_put(f->base, s, "k", "imds", 4), 0);
    struct res r = do_get(f->base, s, "k", 0, OBJSTORE_TO_END, NULL);
    assert_int_equal(r.err, 0);
    assert_memory_equal(r.data, "imds", 4);
    free(r.data);
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_int_equal(st.creds_refreshes, 1);
    assert_int_equal(atomic_load(&m.hits), 3); /* token, role, credentials */
    objstore_destroy(s);

    /* credentials that expire within the refresh margin are fetched again */
    o.creds_refresh_margin_s = 7200;
    s = s3_open(f, "imds", &o);
    r = do_head(f->base, s, "k");
    assert_int_equal(r.err, 0);
    usleep(1100 * 1000);
    r = do_head(f->base, s, "k");
    assert_int_equal(r.err, 0);
    objstore_stats_get(s, &st);
    assert_int_equal(st.creds_refreshes, 2);
    assert_int_equal(atomic_load(&m.token_puts), 3);
    assert_int_equal(do_delete(f->base, s, "k"), 0);
    objstore_destroy(s);
    imds_stop(&m);

    /* no metadata service at all: a clear failure, not a hang */
    o.imds_url = "http://127.0.0.1:1";
    o.max_attempts = 2;
    s = s3_open(f, "imds", &o);
    r = do_head(f->base, s, "k");
    assert_int_equal(r.err, SK_ERR_IO);
    char le[300];
    objstore_last_error(s, le, sizeof le);
    assert_non_null(strstr(le, "no credentials"));
    objstore_destroy(s);

    /* credentials from the environment */
    setenv("AWS_ACCESS_KEY_ID", "S3RVER", 1);
    setenv("AWS_SECRET_ACCESS_KEY", "S3RVER", 1);
    setenv("AWS_SESSION_TOKEN", "env-session", 1);
    o.imds_url = "http://127.0.0.1:1";
    s = s3_open(f, "env", &o);
    assert_int_equal(do_put(f->base, s, "k", "env", 3), 0);
    assert_int_equal(do_delete(f->base, s, "k"), 0);
    objstore_destroy(s);
    for (int i = 0; i < 3; i++) {
        if (saved[i])
            setenv(names[i], saved[i], 1);
        else
            unsetenv(names[i]);
        free(saved[i]);
    }
}

/* A server that accepts connections and never answers, and a port where
 * nobody listens: real per-attempt timeouts and connection failures. */
struct blackhole {
    int fd, port;
    pthread_t t;
    atomic_bool stop;
    int conns[16];
    int nconns;
};

static void *blackhole_main(void *arg)
{
    struct blackhole *b = arg;
    while (!atomic_load(&b->stop)) {
        int c = accept(b->fd, NULL, NULL);
        if (c >= 0 && b->nconns < 16)
            b->conns[b->nconns++] = c;
        else if (c >= 0)
            close(c);
    }
    return NULL;
}

static void test_s3_timeouts_and_refusals(void **state)
{
    struct fx *f = *state;
    struct blackhole b = {0};
    b.fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    assert_int_equal(bind(b.fd, (struct sockaddr *)&a, sizeof a), 0);
    socklen_t l = sizeof a;
    getsockname(b.fd, (struct sockaddr *)&a, &l);
    b.port = ntohs(a.sin_port);
    listen(b.fd, 16);
    struct timeval tv = {0, 50000};
    setsockopt(b.fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    pthread_create(&b.t, NULL, blackhole_main, &b);

    objstore_opts o;
    s3_opts(&o);
    o.request_timeout_ms = 200;
    o.max_attempts = 2;
    char url[200];
    snprintf(url, sizeof url, "s3://b?endpoint=http://127.0.0.1:%d&path-style=true", b.port);
    objstore *s = open_url(f, url, &o);
    int64_t t0 = sk_mono_ms();
    struct res r = do_get(f->base, s, "k", 0, 10, NULL);
    int64_t dt = sk_mono_ms() - t0;
    assert_int_equal(r.err, SK_ERR_TIMEOUT);
    assert_true(dt >= 400 && dt < 5000);
    objstore_stats st;
    objstore_stats_get(s, &st);
    assert_int_equal(st.err_timeout, 2);
    assert_int_equal(st.retries, 1);
    objstore_destroy(s);
    atomic_store(&b.stop, true);
    pthread_join(b.t, NULL);
    for (int i = 0; i < b.nconns; i++)
        close(b.conns[i]);
    close(b.fd);

    /* nobody listens there any more: refused, retried, then SK_ERR_IO */
    o.max_attempts = 3;
    s = open_url(f, url, &o);
    assert_int_equal(do_put(f->base, s, "k", "v", 1), SK_ERR_IO);
    objstore_stats_get(s, &st);
    assert_int_equal(st.err_conn, 3);
    assert_int_equal(st.retries, 2);
    char le[300];
    objstore_last_error(s, le, sizeof le);
    assert_non_null(strstr(le, "PUT k"));
    objstore_destroy(s);
}

/* ---- measurements against the emulator (printed only) ---- */

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

static void print_lat(const char *what, int64_t *us, int n)
{
    qsort(us, (size_t)n, sizeof *us, cmp_i64);
    printf("  %-24s p50 %7.2f ms  p90 %7.2f ms  max %7.2f ms  (n=%d)\n", what, us[n / 2] / 1000.0,
           us[n * 9 / 10] / 1000.0, us[n - 1] / 1000.0, n);
}

static void test_s3_measure(void **state)
{
    struct fx *f = *state;
    objstore_opts o;
    s3_opts(&o);
    o.max_inflight = 16;
    objstore *s = s3_open(f, "bench", &o);
    size_t mib = 1 << 20;
    uint8_t *p = pattern(16 * mib, 5);
    int64_t lat[40];
    printf("objstore against the S3 emulator (127.0.0.1, s3rver 4.0.4):\n");
    for (int i = 0; i < 20; i++) {
        int64_t t0 = sk_mono_us();
        assert_int_equal(do_put(f->base, s, "put1m", p + (size_t)i * 1000, mib), 0);
        lat[i] = sk_mono_us() - t0;
    }
    print_lat("PUT 1 MiB", lat, 20);
    struct iovec v = {p, 16 * mib};
    struct res r = {0};
    objstore_put(s, "obj16m", &v, 1, done_cb, &r);
    wait_one(f->base, &r);
    assert_int_equal(r.err, 0);
    uint8_t *buf = malloc(16 * mib);
    for (int i = 0; i < 40; i++) {
        int64_t t0 = sk_mono_us();
        r = do_get(f->base, s, "obj16m", (uint64_t)(i * 99991) % (15 * mib), 4096, buf);
        lat[i] = sk_mono_us() - t0;
        assert_int_equal(r.len, 4096);
    }
    print_lat("ranged GET 4 KiB", lat, 40);
    for (int i = 0; i < 20; i++) {
        int64_t t0 = sk_mono_us();
        r = do_get(f->base, s, "obj16m", (uint64_t)i * mib / 2, mib, buf);
        lat[i] = sk_mono_us() - t0;
        assert_int_equal(r.len, mib);
    }
    print_lat("ranged GET 1 MiB", lat, 20);
    /* throughput: 48 ranged GETs of 1 MiB at several concurrency levels */
    int levels[] = {1, 4, 16};
    for (size_t li = 0; li < 3; li++) {
        objstore_destroy(s);
        o.max_inflight = levels[li];
        s = s3_open(f, "bench", &o);
        enum { N = 48 };
        struct res rs[N];
        memset(rs, 0, sizeof rs);
        struct rusage ru0, ru1;
        getrusage(RUSAGE_SELF, &ru0);
        int64_t t0 = sk_mono_us();
        for (int i = 0; i < N; i++)
            objstore_get(s, "obj16m", (uint64_t)(i % 16) * mib, mib, buf + (size_t)(i % 16) * mib,
                         get_cb, &rs[i]);
        wait_all(f->base, rs, N);
        int64_t dt = sk_mono_us() - t0;
        getrusage(RUSAGE_SELF, &ru1);
        double cpu_us = (double)(ru1.ru_utime.tv_sec - ru0.ru_utime.tv_sec + ru1.ru_stime.tv_sec -
                                 ru0.ru_stime.tv_sec) * 1e6 +
                        (double)(ru1.ru_utime.tv_usec - ru0.ru_utime.tv_usec +
                                 ru1.ru_stime.tv_usec - ru0.ru_stime.tv_usec);
        for (int i = 0; i < N; i++)
            assert_int_equal(rs[i].len, mib);
        printf("  ranged GET 1 MiB x %d, %2d in flight: %7.1f MB/s (client CPU %.0f%% of one core)\n",
               N, levels[li], (double)N * (double)mib / (double)dt, 100.0 * cpu_us / (double)dt);
    }
    objstore_destroy(s);
    free(buf);
    free(p);
}

int main(void)
{
    const char *lvl = getenv("OBJSTORE_TEST_LOG");
    sk_log_set_level(lvl ? sk_log_parse_level(lvl) : SK_LOG_ERROR);
    const struct CMUnitTest file_tests[] = {
        cmocka_unit_test_setup_teardown(test_file_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_multipart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_direct_sizes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_faults_and_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_file_relative_and_destroy, setup, teardown),
        cmocka_unit_test_setup_teardown(test_url_errors, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_timeouts_and_refusals, setup, teardown),
    };
    const struct CMUnitTest s3_tests[] = {
        cmocka_unit_test_setup_teardown(test_s3_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_list, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_multipart, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_wrong_secret, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_retries, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_concurrency, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_sync, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_imds_credentials, setup, teardown),
        cmocka_unit_test_setup_teardown(test_s3_measure, setup, teardown),
    };
    int failed = cmocka_run_group_tests_name("objstore_file", file_tests, NULL, NULL);
    failed += cmocka_run_group_tests_name("objstore_s3", s3_tests, s3_group_setup, s3_group_teardown);
    return failed;
}
