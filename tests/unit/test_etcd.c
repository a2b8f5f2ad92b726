/*
 * test_etcd: the etcd client (cluster/etcd.h) against a real 3-member etcd
 * that this program starts with tools/etcd.sh in a temporary directory and
 * stops at the end, whatever happened. Without etcd installed the cluster
 * tests are skipped (exit 77) after the tests that need no server.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>
#include <curl/curl.h>
#include <event2/event.h>
#include <jansson.h>

#include "b64.h"
#include "etcd.h"
#include "sk_time.h"

/* ---- the cluster ---- */

static char cl_dir[64];
static bool cl_started;
static char cl_eps[3][64]; /* member i+1's client URL */

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

/* Runs tools/etcd.sh with the arguments; its exit status. */
static int etcd_sh(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static int etcd_sh(const char *fmt, ...)
{
    char args[256], cmd[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(args, sizeof args, fmt, ap);
    va_end(ap);
    snprintf(cmd, sizeof cmd, "%s/tools/etcd.sh %s", source_dir(), args);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The first line tools/etcd.sh prints, or "" when it fails. */
static void etcd_sh_line(char *out, size_t n, const char *args)
{
    char cmd[1024];
    snprintf(cmd, sizeof cmd, "%s/tools/etcd.sh %s 2>/dev/null", source_dir(), args);
    out[0] = '\0';
    FILE *p = popen(cmd, "r");
    if (!p)
        return;
    if (!fgets(out, (int)n, p))
        out[0] = '\0';
    out[strcspn(out, "\n")] = '\0';
    if (pclose(p) != 0)
        out[0] = '\0';
}

static void cluster_stop(void)
{
    if (!cl_started)
        return;
    cl_started = false;
    if (etcd_sh("stop %s", cl_dir) != 0)
        fprintf(stderr, "stopping etcd in %s failed\n", cl_dir);
    char cmd[256];
    snprintf(cmd, sizeof cmd, "rm -rf %s", cl_dir);
    if (system(cmd) != 0)
        fprintf(stderr, "removing %s failed\n", cl_dir);
}

/* 0 up, 77 etcd missing, else failure. */
static int cluster_start(void)
{
    strcpy(cl_dir, "/tmp/skiff-test-etcd-XXXXXX");
    if (!mkdtemp(cl_dir))
        return 1;
    char pid[32];
    snprintf(pid, sizeof pid, "%ld", (long)getpid());
    setenv("SKIFF_ETCD_OWNER_PID", pid, 1); /* the members die with this program */
    int rc = etcd_sh("start %s >%s/start.log 2>&1", cl_dir, cl_dir);
    if (rc != 0) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "cat %s/start.log >&2; rm -rf %s", cl_dir, cl_dir);
        if (system(cmd) != 0)
            fprintf(stderr, "cleaning %s failed\n", cl_dir);
        return rc;
    }
    cl_started = true;
    atexit(cluster_stop);
    for (int i = 0; i < 3; i++) {
        char args[128];
        snprintf(args, sizeof args, "endpoint %s %d", cl_dir, i + 1);
        etcd_sh_line(cl_eps[i], sizeof cl_eps[i], args);
        if (!cl_eps[i][0])
            return 1;
    }
    return 0;
}

static int leader_index(void)
{
    char args[128], out[16];
    snprintf(args, sizeof args, "leader %s", cl_dir);
    etcd_sh_line(out, sizeof out, args);
    return out[0] ? atoi(out) : 0;
}

/* Waits up to 10 s for a leader; its index (1..3). */
static int wait_leader(void)
{
    for (int i = 0; i < 100; i++) {
        int l = leader_index();
        if (l)
            return l;
        usleep(100 * 1000);
    }
    return 0;
}

static int member_of(const char *endpoint)
{
    for (int i = 0; i < 3; i++)
        if (strcmp(cl_eps[i], endpoint) == 0)
            return i + 1;
    return 0;
}

/* Whatever a test did to the members, the next one starts with three. */
static void cluster_heal(void)
{
    for (int i = 1; i <= 3; i++) {
        if (etcd_sh("cont-member %s %d 2>/dev/null", cl_dir, i) != 0)
            assert_int_equal(etcd_sh("start-member %s %d >/dev/null", cl_dir, i), 0);
    }
    assert_true(wait_leader() > 0);
}

/* Endpoint list with member `first` first, then the others in order. */
static void endpoints_from(char *out, size_t n, int first)
{
    snprintf(out, n, "%.63s,%.63s,%.63s", cl_eps[first - 1], cl_eps[first % 3], cl_eps[(first + 1) % 3]);
}

/* ---- the loop ---- */

struct fx {
    struct event_base *base;
    struct event *tick;
    etcd *c;
};

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    (void)arg;
}

static int fx_setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    f->base = event_base_new();
    /* EVLOOP_ONCE returns at least this often, so waits can time out. */
    f->tick = event_new(f->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 10000};
    event_add(f->tick, &tv);
    *state = f;
    return 0;
}

static int fx_teardown(void **state)
{
    struct fx *f = *state;
    etcd_destroy(f->c);
    event_free(f->tick);
    event_base_free(f->base);
    free(f);
    return 0;
}

static int fx_teardown_heal(void **state)
{
    fx_teardown(state);
    cluster_heal();
    return 0;
}

static bool run_until(struct fx *f, const bool *flag, int64_t timeout_ms)
{
    int64_t end = sk_mono_ms() + timeout_ms;
    while (!*flag && sk_mono_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
    return *flag;
}

static void run_for(struct fx *f, int64_t ms)
{
    bool never = false;
    run_until(f, &never, ms);
}

static etcd *client(struct fx *f, const char *endpoints, const etcd_opts *o)
{
    char why[200] = "";
    etcd *c = etcd_new(f->base, endpoints, o, why, sizeof why);
    if (!c)
        fail_msg("etcd_new: %s", why);
    return c;
}

static etcd *cluster_client(struct fx *f)
{
    char eps[256];
    endpoints_from(eps, sizeof eps, 1);
    f->c = client(f, eps, NULL);
    return f->c;
}

/* ---- synchronous wrappers (results copied out of the callbacks) ---- */

typedef struct tkv {
    char key[64], val[128];
    size_t klen, vlen;
    int64_t create, mod, version, lease;
} tkv;

struct range_out {
    bool done;
    int err;
    int64_t revision, count;
    bool more;
    size_t n;
    tkv kvs[32];
};

static void copy_kv(tkv *t, const etcd_kv *kv)
{
    assert_true(kv->klen < sizeof t->key && kv->vlen < sizeof t->val);
    memcpy(t->key, kv->key, kv->klen);
    t->key[kv->klen] = '\0';
    memcpy(t->val, kv->value, kv->vlen);
    t->val[kv->vlen] = '\0';
    t->klen = kv->klen;
    t->vlen = kv->vlen;
    t->create = kv->create_revision;
    t->mod = kv->mod_revision;
    t->version = kv->version;
    t->lease = kv->lease;
}

static void copy_range(struct range_out *o, const etcd_range_result *r)
{
    o->revision = r->revision;
    o->count = r->count;
    o->more = r->more;
    o->n = r->n;
    assert_true(r->n <= 32);
    for (size_t i = 0; i < r->n; i++)
        copy_kv(&o->kvs[i], &r->kvs[i]);
}

static void range_cb(void *arg, int err, const etcd_range_result *r)
{
    struct range_out *o = arg;
    o->err = err;
    assert_non_null(r);
    if (!err)
        copy_range(o, r);
    o->done = true;
}

static const uint8_t *U(const char *s)
{
    return (const uint8_t *)s;
}

static struct range_out do_range_ex(struct fx *f, etcd *c, const char *key, const char *end,
                                    bool prefix, int64_t limit, int64_t rev, unsigned flags)
{
    struct range_out o = {0};
    uint8_t pe[64];
    size_t pelen = 0;
    if (prefix)
        pelen = etcd_prefix_end(U(key), strlen(key), pe);
    const uint8_t *re = prefix ? pe : end ? U(end) : NULL;
    size_t relen = prefix ? pelen : end ? strlen(end) : 0;
    assert_int_equal(etcd_range(c, U(key), strlen(key), re, relen, limit, rev, flags, range_cb, &o), 0);
    assert_true(run_until(f, &o.done, 15000));
    return o;
}

static struct range_out get(struct fx *f, const char *key)
{
    return do_range_ex(f, f->c, key, NULL, false, 0, 0, 0);
}

static struct range_out get_prefix(struct fx *f, const char *prefix)
{
    return do_range_ex(f, f->c, prefix, NULL, true, 0, 0, 0);
}

struct txn_out {
    bool done;
    int err;
    bool succeeded;
    int64_t revision;
    size_t n;
    etcd_op_type types[16];
    int64_t deleted[16];
    struct range_out range[4]; /* of the first four ops */
    int64_t done_ms;
};

static void txn_cb(void *arg, int err, const etcd_txn_result *r)
{
    struct txn_out *o = arg;
    o->err = err;
    assert_non_null(r);
    if (!err) {
        o->succeeded = r->succeeded;
        o->revision = r->revision;
        o->n = r->n;
        assert_true(r->n <= 16);
        for (size_t i = 0; i < r->n; i++) {
            o->types[i] = r->results[i].type;
            o->deleted[i] = r->results[i].deleted;
            if (r->results[i].type == ETCD_OP_RANGE && i < 4)
                copy_range(&o->range[i], &r->results[i].range);
        }
    }
    o->done_ms = sk_mono_ms();
    o->done = true;
}

static int64_t put_ok(struct fx *f, etcd *c, const char *key, const char *val, int64_t lease)
{
    struct txn_out o = {0};
    assert_int_equal(etcd_put(c, U(key), strlen(key), U(val), strlen(val), lease, txn_cb, &o), 0);
    assert_true(run_until(f, &o.done, 15000));
    if (o.err)
        fail_msg("put %s: %s", key, sk_err_name(o.err));
    assert_true(o.succeeded);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.types[0], ETCD_OP_PUT);
    assert_true(o.revision > 0);
    return o.revision;
}

static struct txn_out do_delete(struct fx *f, const char *key, bool prefix)
{
    struct txn_out o = {0};
    uint8_t pe[64];
    size_t pelen = prefix ? etcd_prefix_end(U(key), strlen(key), pe) : 0;
    assert_int_equal(etcd_delete(f->c, U(key), strlen(key), prefix ? pe : NULL, pelen, txn_cb, &o), 0);
    assert_true(run_until(f, &o.done, 15000));
    return o;
}

static struct txn_out do_txn(struct fx *f, const etcd_cmp *cmps, size_t ncmp, const etcd_op *s,
                             size_t ns, const etcd_op *fl, size_t nf)
{
    struct txn_out o = {0};
    assert_int_equal(etcd_txn(f->c, cmps, ncmp, s, ns, fl, nf, txn_cb, &o), 0);
    assert_true(run_until(f, &o.done, 15000));
    return o;
}

struct lease_out {
    bool done;
    int err;
    int64_t id, ttl;
};

static void lease_cb(void *arg, int err, int64_t id, int64_t ttl)
{
    struct lease_out *o = arg;
    o->err = err;
    o->id = id;
    o->ttl = ttl;
    o->done = true;
}

static struct lease_out lease_op(struct fx *f, int which, int64_t v)
{
    struct lease_out o = {0};
    int rc = which == 0   ? etcd_lease_grant(f->c, v, lease_cb, &o)
             : which == 1 ? etcd_lease_keepalive(f->c, v, lease_cb, &o)
                          : etcd_lease_revoke(f->c, v, lease_cb, &o);
    assert_int_equal(rc, 0);
    assert_true(run_until(f, &o.done, 15000));
    return o;
}

/* ---- watch collector ---- */

struct wev {
    etcd_ev_type type;
    char key[64], val[64];
    size_t vlen;
    int64_t mod;
};

struct wcol {
    bool ended;
    int err;
    size_t n, batches, progress;
    int64_t last_batch_rev;
    struct wev ev[512];
};

static void watch_cb(void *arg, int err, int64_t revision, const etcd_event *evs, size_t n)
{
    struct wcol *w = arg;
    assert_false(w->ended); /* nothing after the end */
    if (err) {
        w->err = err;
        w->ended = true;
        return;
    }
    if (n == 0) {
        w->progress++;
        return;
    }
    w->batches++;
    w->last_batch_rev = revision;
    for (size_t i = 0; i < n; i++) {
        assert_true(w->n < sizeof w->ev / sizeof w->ev[0]);
        struct wev *e = &w->ev[w->n++];
        e->type = evs[i].type;
        assert_true(evs[i].kv.klen < sizeof e->key);
        memcpy(e->key, evs[i].kv.key, evs[i].kv.klen);
        e->key[evs[i].kv.klen] = '\0';
        /* values are kept up to 63 bytes */
        e->vlen = evs[i].kv.vlen;
        size_t vl = e->vlen < sizeof e->val ? e->vlen : sizeof e->val - 1;
        memcpy(e->val, evs[i].kv.value, vl);
        e->val[vl] = '\0';
        e->mod = evs[i].kv.mod_revision;
        assert_true(e->mod <= revision);
    }
}

static bool wait_events(struct fx *f, struct wcol *w, size_t n, int64_t timeout_ms)
{
    int64_t end = sk_mono_ms() + timeout_ms;
    while (w->n < n && !w->ended && sk_mono_ms() < end)
        event_base_loop(f->base, EVLOOP_ONCE);
    return w->n >= n;
}

static etcd_watch *watch_prefix(etcd *c, const char *prefix, int64_t rev, struct wcol *w)
{
    uint8_t pe[64];
    size_t pelen = etcd_prefix_end(U(prefix), strlen(prefix), pe);
    etcd_watch *h = etcd_watch_start(c, U(prefix), strlen(prefix), pe, pelen, rev, watch_cb, w);
    assert_non_null(h);
    return h;
}

/* Revisions strictly ordered within a key's history and never decreasing. */
static void assert_ordered(const struct wcol *w)
{
    for (size_t i = 1; i < w->n; i++)
        assert_true(w->ev[i].mod >= w->ev[i - 1].mod);
}

/* ---- tests that need no server ---- */

static void test_b64(void **state)
{
    (void)state;
    static const char *const vec[][2] = {{"", ""},         {"f", "Zg=="},       {"fo", "Zm8="},
                                         {"foo", "Zm9v"},  {"foob", "Zm9vYg=="}, {"fooba", "Zm9vYmE="},
                                         {"foobar", "Zm9vYmFy"}};
    char enc[64];
    uint8_t dec[64];
    for (size_t i = 0; i < sizeof vec / sizeof vec[0]; i++) {
        size_t n = strlen(vec[i][0]);
        b64_encode(U(vec[i][0]), n, enc);
        assert_string_equal(enc, vec[i][1]);
        assert_int_equal(b64_encoded_len(n), strlen(vec[i][1]));
        long d = b64_decode(vec[i][1], strlen(vec[i][1]), dec);
        assert_int_equal(d, (long)n);
        assert_memory_equal(dec, vec[i][0], n);
    }
    /* every byte value, every length up to 40, with and without padding */
    uint8_t raw[40];
    for (size_t i = 0; i < sizeof raw; i++)
        raw[i] = (uint8_t)(i * 73 + 255);
    for (size_t n = 0; n <= sizeof raw; n++) {
        char e[64];
        uint8_t d[64];
        b64_encode(raw, n, e);
        size_t el = strlen(e);
        assert_true(b64_decoded_max(el) <= sizeof d);
        assert_int_equal(b64_decode(e, el, d), (long)n);
        assert_memory_equal(d, raw, n);
        while (el && e[el - 1] == '=')
            el--;
        assert_int_equal(b64_decode(e, el, d), (long)n);
    }
    static const char *const bad[] = {"Z", "Zg=", "Zm9v!", "Zh==", "Zg==Zg==", "Z===", "Zm-v", "Zm_v"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        assert_int_equal(b64_decode(bad[i], strlen(bad[i]), dec), -1);
}

static void test_prefix_end(void **state)
{
    (void)state;
    uint8_t out[8];
    assert_int_equal(etcd_prefix_end(U("abc"), 3, out), 3);
    assert_memory_equal(out, "abd", 3);
    assert_int_equal(etcd_prefix_end(U("a\xff\xff"), 3, out), 1);
    assert_memory_equal(out, "b", 1);
    assert_int_equal(etcd_prefix_end(U("\xff\xff"), 2, out), 0);
    assert_int_equal(etcd_prefix_end(U(""), 0, out), 0);
    uint8_t k[3] = {'x', 0xfe, 0xff};
    assert_int_equal(etcd_prefix_end(k, 3, out), 2);
    assert_int_equal(out[0], 'x');
    assert_int_equal(out[1], 0xff);
}

static void test_new_and_closed(void **state)
{
    struct fx *f = *state;
    char why[200];
    static const char *const bad[] = {"", "localhost:2379", "http://", "http://a:1/v3",
                                      "http://a:1,,http://b:2", "https://a:1"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        why[0] = '\0';
        assert_null(etcd_new(f->base, bad[i], NULL, why, sizeof why));
        assert_true(why[0] != '\0');
    }
    /* Nothing listens on port 1: requests and watches end with
     * SK_ERR_CLOSED when the client goes, before etcd_destroy returns. */
    etcd *c = client(f, " http://127.0.0.1:1/ , http://127.0.0.1:2", NULL);
    assert_string_equal(etcd_endpoint(c), "http://127.0.0.1:1");
    struct range_out r = {0};
    struct txn_out t = {0};
    struct lease_out l = {0};
    struct wcol w = {0};
    assert_int_equal(etcd_range(c, U("k"), 1, NULL, 0, 0, 0, 0, range_cb, &r), 0);
    assert_int_equal(etcd_put(c, U("k"), 1, U("v"), 1, 0, txn_cb, &t), 0);
    assert_int_equal(etcd_lease_keepalive(c, 7, lease_cb, &l), 0);
    assert_non_null(etcd_watch_start(c, U("k"), 1, NULL, 0, 0, watch_cb, &w));
    /* a cancelled watch is never called again, even at the end */
    struct wcol w2 = {0};
    etcd_watch_cancel(etcd_watch_start(c, U("k"), 1, NULL, 0, 0, watch_cb, &w2));
    assert_int_equal(etcd_put(c, U(""), 0, U("v"), 1, 0, txn_cb, &t), SK_ERR_INVAL);
    assert_false(r.done || t.done || l.done); /* never inside the call */
    run_for(f, 30);
    etcd_destroy(c);
    assert_true(r.done && t.done && l.done && w.ended);
    assert_int_equal(r.err, SK_ERR_CLOSED);
    assert_int_equal(t.err, SK_ERR_CLOSED);
    assert_int_equal(l.err, SK_ERR_CLOSED);
    assert_int_equal(l.id, 7);
    assert_int_equal(w.err, SK_ERR_CLOSED);
    assert_false(w2.ended);
}

static void test_unreachable(void **state)
{
    struct fx *f = *state;
    etcd_opts o = {.request_timeout_ms = 600, .connect_timeout_ms = 200};
    f->c = client(f, "http://127.0.0.1:1,http://127.0.0.1:2", &o);
    struct txn_out t = {0};
    int64_t t0 = sk_mono_ms();
    assert_int_equal(etcd_put(f->c, U("k"), 1, U("v"), 1, 0, txn_cb, &t), 0);
    assert_true(run_until(f, &t.done, 5000));
    /* refused connections: certainly not applied, so not a timeout */
    assert_int_equal(t.err, SK_ERR_IO);
    assert_true(t.done_ms - t0 < 2000);
    etcd_stats st;
    etcd_get_stats(f->c, &st);
    assert_int_equal(st.requests, 1);
    assert_int_equal(st.errors, 1);
    assert_true(st.endpoint_switches >= 2);
}

/* ---- key-value ---- */

static void test_put_range(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    int64_t r1 = put_ok(f, f->c, "/t/pr/a", "1", 0);
    int64_t r2 = put_ok(f, f->c, "/t/pr/a", "2", 0);
    assert_true(r2 > r1);
    for (int i = 0; i < 5; i++) {
        char k[32], v[32];
        snprintf(k, sizeof k, "/t/pr/k%d", i);
        snprintf(v, sizeof v, "value %d", i);
        put_ok(f, f->c, k, v, 0);
    }
    put_ok(f, f->c, "/t/pr0", "outside", 0);

    struct range_out o = get(f, "/t/pr/a");
    assert_int_equal(o.err, 0);
    assert_int_equal(o.n, 1);
    assert_string_equal(o.kvs[0].val, "2");
    assert_int_equal(o.kvs[0].create, r1);
    assert_int_equal(o.kvs[0].mod, r2);
    assert_int_equal(o.kvs[0].version, 2);
    assert_int_equal(o.kvs[0].lease, 0);
    assert_int_equal(o.count, 1);
    assert_false(o.more);

    /* the old value at the old revision */
    o = do_range_ex(f, f->c, "/t/pr/a", NULL, false, 0, r1, 0);
    assert_int_equal(o.n, 1);
    assert_string_equal(o.kvs[0].val, "1");

    o = get(f, "/t/pr/missing");
    assert_int_equal(o.err, 0);
    assert_int_equal(o.n, 0);
    assert_int_equal(o.count, 0);
    assert_true(o.revision >= r2);

    o = get_prefix(f, "/t/pr/");
    assert_int_equal(o.n, 6);
    assert_int_equal(o.count, 6);
    assert_string_equal(o.kvs[0].key, "/t/pr/a");
    for (int i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof k, "/t/pr/k%d", i);
        assert_string_equal(o.kvs[i + 1].key, k);
    }

    o = do_range_ex(f, f->c, "/t/pr/", NULL, true, 2, 0, 0);
    assert_int_equal(o.n, 2);
    assert_true(o.more);
    assert_int_equal(o.count, 6);

    /* [k1, k3) */
    o = do_range_ex(f, f->c, "/t/pr/k1", "/t/pr/k3", false, 0, 0, 0);
    assert_int_equal(o.n, 2);
    assert_string_equal(o.kvs[1].key, "/t/pr/k2");

    o = do_range_ex(f, f->c, "/t/pr/", NULL, true, 0, 0, ETCD_KEYS_ONLY);
    assert_int_equal(o.n, 6);
    assert_int_equal(o.kvs[1].vlen, 0);
    assert_string_equal(o.kvs[1].key, "/t/pr/k0");

    o = do_range_ex(f, f->c, "/t/pr/", NULL, true, 0, 0, ETCD_COUNT_ONLY);
    assert_int_equal(o.n, 0);
    assert_int_equal(o.count, 6);

    /* bytes that are not text */
    const uint8_t bk[] = {'/', 't', '/', 'b', 0, 0xff, 0x80};
    const uint8_t bv[] = {0, 1, 2, 0xff, 0xfe, '"', '\\'};
    struct txn_out t = {0};
    assert_int_equal(etcd_put(f->c, bk, sizeof bk, bv, sizeof bv, 0, txn_cb, &t), 0);
    assert_true(run_until(f, &t.done, 5000));
    assert_int_equal(t.err, 0);
    o = (struct range_out){0};
    assert_int_equal(etcd_range(f->c, bk, sizeof bk, NULL, 0, 0, 0, 0, range_cb, &o), 0);
    assert_true(run_until(f, &o.done, 5000));
    assert_int_equal(o.n, 1);
    assert_int_equal(o.kvs[0].klen, sizeof bk);
    assert_memory_equal(o.kvs[0].key, bk, sizeof bk);
    assert_int_equal(o.kvs[0].vlen, sizeof bv);
    assert_memory_equal(o.kvs[0].val, bv, sizeof bv);

    /* a range to the end of the key space (range_end of length 0) */
    o = do_range_ex(f, f->c, "/t/pr/k4", "", false, 0, 0, ETCD_KEYS_ONLY);
    assert_true(o.n >= 2);
    assert_string_equal(o.kvs[0].key, "/t/pr/k4");
    assert_string_equal(o.kvs[1].key, "/t/pr0");

    etcd_stats st;
    etcd_get_stats(f->c, &st);
    assert_int_equal(st.errors, 0);
    assert_true(st.latency_count == st.requests && st.latency_us_sum > 0);
}

static void test_txn(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    const char *k = "/t/txn/k";
    /* create if absent: CREATE == 0 */
    etcd_cmp absent = {.key = U(k), .klen = strlen(k), .target = ETCD_TARGET_CREATE,
                       .result = ETCD_CMP_EQUAL, .number = 0};
    etcd_op put1 = {.type = ETCD_OP_PUT, .key = U(k), .klen = strlen(k), .value = U("one"), .vlen = 3};
    etcd_op get1 = {.type = ETCD_OP_RANGE, .key = U(k), .klen = strlen(k)};
    struct txn_out o = do_txn(f, &absent, 1, &put1, 1, &get1, 1);
    assert_int_equal(o.err, 0);
    assert_true(o.succeeded);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.types[0], ETCD_OP_PUT);
    int64_t created = o.revision;

    /* again: the key exists, the failure branch reads it */
    o = do_txn(f, &absent, 1, &put1, 1, &get1, 1);
    assert_int_equal(o.err, 0);
    assert_false(o.succeeded);
    assert_int_equal(o.n, 1);
    assert_int_equal(o.types[0], ETCD_OP_RANGE);
    assert_int_equal(o.range[0].n, 1);
    assert_string_equal(o.range[0].kvs[0].val, "one");
    assert_int_equal(o.range[0].kvs[0].mod, created);
    assert_int_equal(o.revision, created); /* nothing written */

    /* compare-and-swap on mod_revision */
    etcd_cmp at = {.key = U(k), .klen = strlen(k), .target = ETCD_TARGET_MOD,
                   .result = ETCD_CMP_EQUAL, .number = created};
    etcd_op put2 = {.type = ETCD_OP_PUT, .key = U(k), .klen = strlen(k), .value = U("two"), .vlen = 3};
    o = do_txn(f, &at, 1, &put2, 1, NULL, 0);
    assert_true(o.succeeded);
    assert_true(o.revision > created);
    int64_t second = o.revision;
    /* the same CAS, now stale */
    o = do_txn(f, &at, 1, &put2, 1, &get1, 1);
    assert_int_equal(o.err, 0);
    assert_false(o.succeeded);
    assert_string_equal(o.range[0].kvs[0].val, "two");
    assert_int_equal(o.range[0].kvs[0].mod, second);

    /* value and version compares, several ops, a delete among them */
    put_ok(f, f->c, "/t/txn/other", "x", 0);
    etcd_cmp both[2] = {
        {.key = U(k), .klen = strlen(k), .target = ETCD_TARGET_VALUE, .result = ETCD_CMP_EQUAL,
         .value = U("two"), .vlen = 3},
        {.key = U(k), .klen = strlen(k), .target = ETCD_TARGET_VERSION, .result = ETCD_CMP_GREATER,
         .number = 1},
    };
    const char *other = "/t/txn/other";
    etcd_op ops[3] = {
        {.type = ETCD_OP_DELETE, .key = U(other), .klen = strlen(other)},
        {.type = ETCD_OP_PUT, .key = U(k), .klen = strlen(k), .value = U("three"), .vlen = 5},
        {.type = ETCD_OP_RANGE, .key = U("/t/txn/"), .klen = 7, .range_end = U("/t/txn0"), .relen = 7},
    };
    o = do_txn(f, both, 2, ops, 3, NULL, 0);
    assert_int_equal(o.err, 0);
    assert_true(o.succeeded);
    assert_int_equal(o.n, 3);
    assert_int_equal(o.types[0], ETCD_OP_DELETE);
    assert_int_equal(o.deleted[0], 1);
    assert_int_equal(o.types[2], ETCD_OP_RANGE);
    assert_int_equal(o.range[2].n, 1);
    assert_string_equal(o.range[2].kvs[0].val, "three");

    /* a malformed transaction: refused before anything is queued */
    etcd_cmp badcmp = absent;
    badcmp.target = (etcd_cmp_target)42;
    struct txn_out never = {0};
    assert_int_equal(etcd_txn(f->c, &badcmp, 1, &put1, 1, NULL, 0, txn_cb, &never), SK_ERR_INVAL);
    /* etcd's own refusal (the same key twice) is an error, not a retry */
    etcd_op dup[2] = {put1, put2};
    o = do_txn(f, NULL, 0, dup, 2, NULL, 0);
    assert_int_equal(o.err, SK_ERR_IO);
}

static void test_delete(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    for (int i = 0; i < 4; i++) {
        char k[32];
        snprintf(k, sizeof k, "/t/del/%d", i);
        put_ok(f, f->c, k, "v", 0);
    }
    struct txn_out o = do_delete(f, "/t/del/0", false);
    assert_int_equal(o.err, 0);
    assert_true(o.succeeded);
    assert_int_equal(o.types[0], ETCD_OP_DELETE);
    assert_int_equal(o.deleted[0], 1);
    o = do_delete(f, "/t/del/0", false);
    assert_int_equal(o.err, 0);
    assert_int_equal(o.deleted[0], 0);
    assert_int_equal(get_prefix(f, "/t/del/").n, 3);
    o = do_delete(f, "/t/del/", true);
    assert_int_equal(o.deleted[0], 3);
    assert_int_equal(get_prefix(f, "/t/del/").n, 0);
}

/* ---- leases ---- */

static void test_lease(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    struct lease_out g = lease_op(f, 0, 1);
    assert_int_equal(g.err, 0);
    assert_true(g.id != 0);
    assert_true(g.ttl >= 1);
    put_ok(f, f->c, "/t/lease/a", "v", g.id);
    struct range_out o = get(f, "/t/lease/a");
    assert_int_equal(o.n, 1);
    assert_int_equal(o.kvs[0].lease, g.id);

    struct lease_out k = lease_op(f, 1, g.id);
    assert_int_equal(k.err, 0);
    assert_int_equal(k.id, g.id);
    assert_true(k.ttl >= 1);

    /* without keep-alives the lease expires and takes its key along */
    int64_t t0 = sk_mono_ms();
    while (get(f, "/t/lease/a").n == 1 && sk_mono_ms() - t0 < 8000)
        run_for(f, 100);
    assert_int_equal(get(f, "/t/lease/a").n, 0);
    assert_true(sk_mono_ms() - t0 >= 500);
    k = lease_op(f, 1, g.id);
    assert_int_equal(k.err, SK_ERR_NOENT);
    assert_int_equal(k.id, g.id);

    /* revoke: the key goes at once; a second revoke finds nothing */
    g = lease_op(f, 0, 30);
    assert_int_equal(g.err, 0);
    assert_int_equal(g.ttl, 30);
    put_ok(f, f->c, "/t/lease/b", "v", g.id);
    struct lease_out r = lease_op(f, 2, g.id);
    assert_int_equal(r.err, 0);
    assert_int_equal(get(f, "/t/lease/b").n, 0);
    r = lease_op(f, 2, g.id);
    assert_int_equal(r.err, SK_ERR_NOENT);
    assert_int_equal(lease_op(f, 1, g.id).err, SK_ERR_NOENT);
    /* a put under a lease that is gone is refused */
    struct txn_out t = {0};
    assert_int_equal(etcd_put(f->c, U("/t/lease/c"), 10, U("v"), 1, g.id, txn_cb, &t), 0);
    assert_true(run_until(f, &t.done, 5000));
    assert_int_equal(t.err, SK_ERR_NOENT);
}

/* ---- watches ---- */

static void test_watch_order(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    struct wcol w = {0};
    watch_prefix(f->c, "/t/wo/", 0, &w);
    /* The watch is live once an event of ours comes back. */
    int64_t revs[16];
    int n = 0;
    int64_t t0 = sk_mono_ms();
    while (w.n == 0 && sk_mono_ms() - t0 < 5000) {
        put_ok(f, f->c, "/t/wo/probe", "p", 0);
        run_for(f, 50);
    }
    assert_true(w.n > 0);
    run_for(f, 100);
    size_t base = w.n;
    for (int i = 0; i < 10; i++) {
        char k[32], v[32];
        snprintf(k, sizeof k, "/t/wo/%d", i % 3);
        snprintf(v, sizeof v, "%d", i);
        revs[n++] = put_ok(f, f->c, k, v, 0);
    }
    put_ok(f, f->c, "/t/wx", "not watched", 0);
    struct txn_out d = do_delete(f, "/t/wo/0", false);
    revs[n++] = d.revision;
    /* two puts in one transaction: one revision, two events */
    etcd_op two[2] = {
        {.type = ETCD_OP_PUT, .key = U("/t/wo/x"), .klen = 7, .value = U("x"), .vlen = 1},
        {.type = ETCD_OP_PUT, .key = U("/t/wo/y"), .klen = 7, .value = U("y"), .vlen = 1},
    };
    struct txn_out t = do_txn(f, NULL, 0, two, 2, NULL, 0);
    assert_true(wait_events(f, &w, base + 13, 5000));
    run_for(f, 100);
    assert_int_equal(w.n, base + 13);
    for (int i = 0; i < 10; i++) {
        const struct wev *e = &w.ev[base + i];
        char v[32];
        snprintf(v, sizeof v, "%d", i);
        assert_int_equal(e->type, ETCD_EV_PUT);
        assert_string_equal(e->val, v);
        assert_int_equal(e->mod, revs[i]);
    }
    const struct wev *e = &w.ev[base + 10];
    assert_int_equal(e->type, ETCD_EV_DELETE);
    assert_string_equal(e->key, "/t/wo/0");
    assert_int_equal(e->mod, revs[10]);
    assert_int_equal(w.ev[base + 11].mod, t.revision);
    assert_int_equal(w.ev[base + 12].mod, t.revision);
    assert_string_equal(w.ev[base + 11].key, "/t/wo/x");
    assert_string_equal(w.ev[base + 12].key, "/t/wo/y");
    assert_int_equal(w.last_batch_rev, t.revision);
    assert_ordered(&w);
    assert_false(w.ended);
}

static void test_watch_history_cancel(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    int64_t first = put_ok(f, f->c, "/t/wh/a", "1", 0);
    put_ok(f, f->c, "/t/wh/b", "2", 0);
    put_ok(f, f->c, "/t/wh/a", "3", 0);
    struct txn_out d = do_delete(f, "/t/wh/b", false);
    /* from an old revision: the history, then what comes */
    struct wcol w = {0};
    etcd_watch *h = watch_prefix(f->c, "/t/wh/", first, &w);
    assert_true(wait_events(f, &w, 4, 5000));
    assert_string_equal(w.ev[0].val, "1");
    assert_int_equal(w.ev[0].mod, first);
    assert_string_equal(w.ev[2].val, "3");
    assert_int_equal(w.ev[3].type, ETCD_EV_DELETE);
    assert_int_equal(w.ev[3].mod, d.revision);
    int64_t last = put_ok(f, f->c, "/t/wh/c", "4", 0);
    assert_true(wait_events(f, &w, 5, 5000));
    assert_int_equal(w.ev[4].mod, last);
    assert_ordered(&w);
    /* cancelled: nothing more, not even an end */
    etcd_watch_cancel(h);
    put_ok(f, f->c, "/t/wh/d", "5", 0);
    run_for(f, 300);
    assert_int_equal(w.n, 5);
    assert_false(w.ended);
}

/* POST /v3/kv/compaction, as an operator would (blocking: a test). */
static void compact(int64_t revision)
{
    char rev[24], url[128];
    snprintf(rev, sizeof rev, "%lld", (long long)revision);
    json_t *o = json_pack("{s:s, s:b}", "revision", rev, "physical", 1);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    snprintf(url, sizeof url, "%s/v3/kv/compaction", cl_eps[0]);
    CURL *h = curl_easy_init();
    curl_easy_setopt(h, CURLOPT_URL, url);
    curl_easy_setopt(h, CURLOPT_PROXY, "");
    curl_easy_setopt(h, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, 10000L);
    FILE *devnull = fopen("/dev/null", "w");
    curl_easy_setopt(h, CURLOPT_WRITEDATA, devnull);
    CURLcode rc = curl_easy_perform(h);
    long http = 0;
    curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &http);
    curl_easy_cleanup(h);
    fclose(devnull);
    free(body);
    assert_int_equal(rc, CURLE_OK);
    assert_int_equal(http, 200);
}

static void test_watch_compacted(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    int64_t old = put_ok(f, f->c, "/t/wc/a", "1", 0);
    put_ok(f, f->c, "/t/wc/a", "2", 0);
    int64_t now = put_ok(f, f->c, "/t/wc/a", "3", 0);
    compact(now);
    struct wcol w = {0};
    watch_prefix(f->c, "/t/wc/", old, &w);
    int64_t t0 = sk_mono_ms();
    while (!w.ended && sk_mono_ms() - t0 < 5000)
        event_base_loop(f->base, EVLOOP_ONCE);
    assert_true(w.ended);
    assert_int_equal(w.err, SK_ERR_COMPACTED);
    assert_int_equal(w.n, 0);
    /* a range at a compacted revision says so too */
    struct range_out o = do_range_ex(f, f->c, "/t/wc/a", NULL, false, 0, old, 0);
    assert_int_equal(o.err, SK_ERR_COMPACTED);
    /* from the compaction point on, the history is there */
    struct wcol w2 = {0};
    watch_prefix(f->c, "/t/wc/", now, &w2);
    assert_true(wait_events(f, &w2, 1, 5000));
    assert_string_equal(w2.ev[0].val, "3");
}

/* ---- caps ---- */

static void test_caps(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    char big[6000];
    memset(big, 'b', sizeof big - 1);
    big[sizeof big - 1] = '\0';
    put_ok(f, f->c, "/t/cap/big", big, 0);

    char eps[256];
    endpoints_from(eps, sizeof eps, 1);
    etcd_opts o = {.max_response = 4096, .max_queued = 2};
    struct fx g = {.base = f->base, .c = client(f, eps, &o)};
    /* an answer over max_response */
    struct range_out r = do_range_ex(f, g.c, "/t/cap/big", NULL, false, 0, 0, 0);
    assert_int_equal(r.err, SK_ERR_NOMEM);
    /* the same range without values fits */
    r = do_range_ex(f, g.c, "/t/cap/big", NULL, false, 0, 0, ETCD_KEYS_ONLY);
    assert_int_equal(r.err, 0);
    assert_int_equal(r.n, 1);
    /* a request body over it is refused at once */
    struct txn_out t = {0};
    assert_int_equal(etcd_put(g.c, U("/t/cap/x"), 8, U(big), strlen(big), 0, txn_cb, &t), SK_ERR_NOMEM);
    /* the queue holds two */
    struct range_out q[3] = {{0}};
    assert_int_equal(etcd_range(g.c, U("/t/cap/q"), 8, NULL, 0, 0, 0, 0, range_cb, &q[0]), 0);
    assert_int_equal(etcd_range(g.c, U("/t/cap/q"), 8, NULL, 0, 0, 0, 0, range_cb, &q[1]), 0);
    assert_int_equal(etcd_range(g.c, U("/t/cap/q"), 8, NULL, 0, 0, 0, 0, range_cb, &q[2]), SK_ERR_AGAIN);
    assert_true(run_until(f, &q[1].done, 5000));
    assert_true(run_until(f, &q[0].done, 5000));
    assert_int_equal(etcd_range(g.c, U("/t/cap/q"), 8, NULL, 0, 0, 0, 0, range_cb, &q[2]), 0);
    assert_true(run_until(f, &q[2].done, 5000));
    /* a watch message over the cap ends the watch */
    struct wcol w = {0};
    watch_prefix(g.c, "/t/cap/", 0, &w);
    int64_t t0 = sk_mono_ms();
    while (!w.ended && sk_mono_ms() - t0 < 5000) {
        put_ok(f, f->c, "/t/cap/big", big, 0);
        run_for(f, 100);
    }
    assert_true(w.ended);
    assert_int_equal(w.err, SK_ERR_NOMEM);
    etcd_destroy(g.c);
}

/* A watcher whose loop does not run: its client stops reading the stream
 * once events wait for the loop, and delivers everything, in order and
 * without a resume, once the loop runs again. */
static void test_watch_backpressure(void **state)
{
    struct fx *f = *state;
    cluster_client(f);
    struct fx *g = calloc(1, sizeof *g);
    g->base = event_base_new();
    g->tick = event_new(g->base, -1, EV_PERSIST, tick_cb, NULL);
    struct timeval tv = {0, 10000};
    event_add(g->tick, &tv);
    char eps[256];
    endpoints_from(eps, sizeof eps, 1);
    /* Events wait from 512 KiB on; 1.2 MB of them come. One message stays
     * far below the cap even when etcd batches a catch-up. */
    etcd_opts o = {.max_response = 2u << 20};
    g->c = client(g, eps, &o);
    struct wcol *w = calloc(1, sizeof *w);
    int64_t from = put_ok(f, f->c, "/t/bp/start", "s", 0);
    watch_prefix(g->c, "/t/bp/", from + 1, w);
    static char val[2048];
    memset(val, 'v', sizeof val - 1);
    char keys[10][32];
    etcd_op ops[10];
    for (int j = 0; j < 10; j++) {
        snprintf(keys[j], sizeof keys[j], "/t/bp/%d", j);
        ops[j] = (etcd_op){.type = ETCD_OP_PUT, .key = U(keys[j]), .klen = strlen(keys[j]),
                           .value = U(val), .vlen = strlen(val)};
    }
    int64_t revs[40];
    for (int i = 0; i < 40; i++) {
        struct txn_out t = do_txn(f, NULL, 0, ops, 10, NULL, 0);
        assert_int_equal(t.err, 0);
        revs[i] = t.revision;
    }
    run_for(f, 200); /* the watcher's stream fills up meanwhile */
    assert_int_equal(w->n, 0);
    assert_true(wait_events(g, w, 400, 10000));
    for (int i = 0; i < 400; i++) {
        assert_int_equal(w->ev[i].mod, revs[i / 10]);
        assert_string_equal(w->ev[i].key, keys[i % 10]);
        assert_int_equal(w->ev[i].vlen, strlen(val));
    }
    etcd_stats st;
    etcd_get_stats(g->c, &st);
    assert_true(st.watch_pauses >= 1);
    assert_int_equal(st.watch_resumes, 0);
    etcd_destroy(g->c);
    assert_true(w->ended);
    event_free(g->tick);
    event_base_free(g->base);
    free(g);
    free(w);
}

/* ---- failures ---- */

/* The only endpoint hangs (SIGSTOP): a write that was sent is "possibly
 * applied" at the request timeout; so is a read. */
/* What etcd_opts.account saw, from the client's thread. */
struct acct_seen {
    atomic_uint_fast64_t out, in;
    atomic_int bad_endpoint;
};

static void acct_cb(void *arg, int endpoint, uint64_t out, uint64_t in)
{
    struct acct_seen *a = arg;
    atomic_fetch_add(&a->out, out);
    atomic_fetch_add(&a->in, in);
    if (endpoint < 0 || endpoint >= 3)
        atomic_fetch_add(&a->bad_endpoint, 1);
}

static void range_done_cb(void *arg, int err, const etcd_range_result *r)
{
    assert_int_equal(err, 0);
    assert_int_equal(r->n, 1);
    *(bool *)arg = true;
}

static void test_byte_accounting(void **state)
{
    struct fx *f = *state;
    struct acct_seen a;
    atomic_init(&a.out, 0);
    atomic_init(&a.in, 0);
    atomic_init(&a.bad_endpoint, 0);
    char eps[256];
    endpoints_from(eps, sizeof eps, 1);
    etcd_opts o = {.account = acct_cb, .account_arg = &a};
    f->c = client(f, eps, &o);
    char big[3001];
    memset(big, 'v', 3000);
    big[3000] = 0;
    /* A put: the value goes out in base64 (4000 bytes) with the HTTP request. */
    put_ok(f, f->c, "/t/acct/big", big, 0);
    uint64_t out = atomic_load(&a.out), in = atomic_load(&a.in);
    assert_true(out > 4000 && out < 6000);
    assert_true(in > 100 && in < 2000);
    /* A range: the value comes back. */
    bool done = false;
    assert_int_equal(etcd_range(f->c, U("/t/acct/big"), 11, NULL, 0, 0, 0, 0, range_done_cb,
                                &done),
                     0);
    assert_true(run_until(f, &done, 5000));
    assert_true(atomic_load(&a.in) - in > 4000);
    assert_true(atomic_load(&a.out) - out < 1000);
    /* A keep-alive, whose answer the client stops reading after its first message. */
    struct lease_out l = lease_op(f, 0, 30);
    assert_int_equal(l.err, 0);
    in = atomic_load(&a.in);
    struct lease_out k = lease_op(f, 1, l.id);
    assert_int_equal(k.err, 0);
    assert_true(atomic_load(&a.in) - in > 100);
    /* A watch's stream, as it arrives. */
    struct wcol w = {0};
    watch_prefix(f->c, "/t/acct/w/", 0, &w);
    int64_t t0 = sk_mono_ms();
    while (w.n == 0 && sk_mono_ms() - t0 < 5000) {
        put_ok(f, f->c, "/t/acct/w/probe", "p", 0);
        run_for(f, 50);
    }
    assert_true(w.n > 0);
    run_for(f, 100);
    size_t base = w.n;
    in = atomic_load(&a.in);
    for (int i = 0; i < 3; i++)
        put_ok(f, f->c, "/t/acct/w/k", big, 0);
    assert_true(wait_events(f, &w, base + 3, 5000));
    run_for(f, 100);
    /* The puts' answers are small: three events of 4000 bytes of base64 came. */
    assert_true(atomic_load(&a.in) - in > 3 * 4000);
    assert_int_equal(atomic_load(&a.bad_endpoint), 0);
}

static void test_stopped_member_timeout(void **state)
{
    struct fx *f = *state;
    int l = wait_leader();
    int m = l % 3 + 1; /* a follower: the cluster keeps its leader */
    etcd_opts o = {.request_timeout_ms = 1000};
    f->c = client(f, cl_eps[m - 1], &o);
    put_ok(f, f->c, "/t/stop/a", "1", 0);
    assert_int_equal(etcd_sh("stop-member %s %d", cl_dir, m), 0);
    struct txn_out t = {0};
    struct range_out r = {0};
    int64_t t0 = sk_mono_ms();
    assert_int_equal(etcd_put(f->c, U("/t/stop/a"), 9, U("2"), 1, 0, txn_cb, &t), 0);
    assert_int_equal(etcd_range(f->c, U("/t/stop/a"), 9, NULL, 0, 0, 0, 0, range_cb, &r), 0);
    assert_true(run_until(f, &t.done, 5000));
    assert_true(run_until(f, &r.done, 5000));
    int64_t took = t.done_ms - t0;
    assert_int_equal(etcd_sh("cont-member %s %d", cl_dir, m), 0);
    assert_int_equal(t.err, SK_ERR_TIMEOUT);
    assert_int_equal(r.err, SK_ERR_TIMEOUT);
    assert_true(took >= 900 && took < 2500);
    etcd_stats st;
    etcd_get_stats(f->c, &st);
    assert_int_equal(st.timeouts, 2);
    /* the member is back: so is the client */
    assert_int_equal(get(f, "/t/stop/a").err, 0);
}

/* A member without a leader answers "no leader" (the client asks for that
 * answer instead of a wait): the client tries again until a leader exists. */
static void test_no_leader_retry(void **state)
{
    struct fx *f = *state;
    int m = 1;
    etcd_opts o = {.request_timeout_ms = 8000};
    f->c = client(f, cl_eps[m - 1], &o);
    put_ok(f, f->c, "/t/nl/a", "1", 0);
    assert_int_equal(etcd_sh("stop-member %s 2", cl_dir), 0);
    assert_int_equal(etcd_sh("stop-member %s 3", cl_dir), 0);
    /* leader lost (check-quorum steps a lone leader down) */
    run_for(f, 1500);
    struct txn_out t = {0};
    int64_t t0 = sk_mono_ms();
    assert_int_equal(etcd_put(f->c, U("/t/nl/a"), 7, U("2"), 1, 0, txn_cb, &t), 0);
    run_for(f, 1000);
    assert_false(t.done);
    assert_int_equal(etcd_sh("cont-member %s 2", cl_dir), 0);
    assert_int_equal(etcd_sh("cont-member %s 3", cl_dir), 0);
    assert_true(run_until(f, &t.done, 8000));
    assert_int_equal(t.err, 0);
    assert_true(t.done_ms - t0 >= 1000);
    struct range_out r = get(f, "/t/nl/a");
    assert_int_equal(r.n, 1);
    assert_string_equal(r.kvs[0].val, "2");
    assert_int_equal(r.kvs[0].version, 2); /* applied once */
}

struct many {
    struct txn_out t[20];
};

/* The leader dies; once the others elected a new one, requests sent to the
 * client (whose current endpoint is the dead member) all succeed. */
static void test_leader_kill_failover(void **state)
{
    struct fx *f = *state;
    int l = wait_leader();
    assert_true(l > 0);
    char eps[256];
    endpoints_from(eps, sizeof eps, l);
    f->c = client(f, eps, NULL);
    put_ok(f, f->c, "/t/lk/warm", "1", 0);
    assert_int_equal(member_of(etcd_endpoint(f->c)), l);
    assert_int_equal(etcd_sh("kill %s %d", cl_dir, l), 0);
    int nl = wait_leader();
    assert_true(nl > 0 && nl != l);
    struct many *m = calloc(1, sizeof *m);
    for (int i = 0; i < 20; i++) {
        char k[32];
        snprintf(k, sizeof k, "/t/lk/%02d", i);
        assert_int_equal(etcd_put(f->c, U(k), strlen(k), U("v"), 1, 0, txn_cb, &m->t[i]), 0);
    }
    for (int i = 0; i < 20; i++) {
        assert_true(run_until(f, &m->t[i].done, 10000));
        assert_int_equal(m->t[i].err, 0);
    }
    free(m);
    assert_int_equal(get_prefix(f, "/t/lk/").n, 21);
    assert_true(member_of(etcd_endpoint(f->c)) != l);
    etcd_stats st;
    etcd_get_stats(f->c, &st);
    assert_true(st.endpoint_switches >= 1);
    assert_int_equal(st.errors, 0);
}

/* The member a watch streams from dies: the watch goes on from another
 * member, every event once and in order. */
static void test_watch_resume_after_kill(void **state)
{
    struct fx *f = *state;
    int l = wait_leader();
    int victim = l % 3 + 1; /* a follower, so writes go on meanwhile */
    char weps[256], eps[256];
    endpoints_from(weps, sizeof weps, victim);
    endpoints_from(eps, sizeof eps, l);
    f->c = client(f, eps, NULL);
    struct fx g = {.base = f->base, .c = client(f, weps, NULL)};
    struct wcol w = {0};
    watch_prefix(g.c, "/t/wr/", 0, &w);
    /* live once the probe comes back */
    int64_t t0 = sk_mono_ms();
    while (w.n == 0 && sk_mono_ms() - t0 < 5000) {
        put_ok(f, f->c, "/t/wr/probe", "p", 0);
        run_for(f, 50);
    }
    assert_true(w.n > 0);
    run_for(f, 100);
    size_t base = w.n;
    int64_t revs[40];
    for (int i = 0; i < 40; i++) {
        if (i == 15) {
            assert_int_equal(member_of(etcd_endpoint(g.c)), victim);
            assert_int_equal(etcd_sh("kill %s %d", cl_dir, victim), 0);
        }
        char k[32], v[32];
        snprintf(k, sizeof k, "/t/wr/%02d", i % 7);
        snprintf(v, sizeof v, "%d", i);
        revs[i] = put_ok(f, f->c, k, v, 0);
    }
    assert_true(wait_events(f, &w, base + 40, 10000));
    run_for(f, 200);
    assert_int_equal(w.n, base + 40);
    for (int i = 0; i < 40; i++) {
        char v[32];
        snprintf(v, sizeof v, "%d", i);
        assert_string_equal(w.ev[base + i].val, v);
        assert_int_equal(w.ev[base + i].mod, revs[i]);
    }
    assert_false(w.ended);
    assert_true(member_of(etcd_endpoint(g.c)) != victim);
    etcd_stats st;
    etcd_get_stats(g.c, &st);
    assert_true(st.watch_resumes >= 1);
    etcd_destroy(g.c);
    assert_true(w.ended);
    assert_int_equal(w.err, SK_ERR_CLOSED);
}

/* A stopped member keeps a watch stream open and silent. Once a request of
 * the same client times out there, the watch moves too and goes on. */
static void test_watch_leaves_stopped_member(void **state)
{
    struct fx *f = *state;
    int l = wait_leader();
    int m = l % 3 + 1;
    char weps[256], eps[256];
    endpoints_from(weps, sizeof weps, m);
    endpoints_from(eps, sizeof eps, l);
    f->c = client(f, eps, NULL);
    etcd_opts o = {.request_timeout_ms = 800};
    struct fx g = {.base = f->base, .c = client(f, weps, &o)};
    struct wcol w = {0};
    watch_prefix(g.c, "/t/ws/", 0, &w);
    int64_t t0 = sk_mono_ms();
    while (w.n == 0 && sk_mono_ms() - t0 < 5000) {
        put_ok(f, f->c, "/t/ws/probe", "p", 0);
        run_for(f, 50);
    }
    assert_true(w.n > 0);
    run_for(f, 100);
    size_t base = w.n;
    assert_int_equal(etcd_sh("stop-member %s %d", cl_dir, m), 0);
    struct txn_out t = {0};
    assert_int_equal(etcd_put(g.c, U("/t/ws/p"), 7, U("p"), 1, 0, txn_cb, &t), 0);
    assert_true(run_until(f, &t.done, 5000));
    assert_int_equal(t.err, SK_ERR_TIMEOUT);
    assert_true(member_of(etcd_endpoint(g.c)) != m);
    int64_t revs[5];
    for (int i = 0; i < 5; i++) {
        char k[32];
        snprintf(k, sizeof k, "/t/ws/%d", i);
        revs[i] = put_ok(f, f->c, k, "v", 0);
    }
    assert_true(wait_events(f, &w, base + 5, 5000));
    for (int i = 0; i < 5; i++) {
        assert_int_equal(w.ev[base + i].mod, revs[i]);
        assert_true(strncmp(w.ev[base + i].key, "/t/ws/p", 7) != 0); /* not applied meanwhile */
    }
    assert_int_equal(etcd_sh("cont-member %s %d", cl_dir, m), 0);
    run_for(f, 500);
    /* the put that timed out may apply late; if so, it comes once */
    size_t late = 0;
    for (size_t i = base + 5; i < w.n; i++) {
        assert_string_equal(w.ev[i].key, "/t/ws/p");
        late++;
    }
    assert_true(late <= 1);
    assert_int_equal(get(f, "/t/ws/p").n, late);
    assert_false(w.ended);
    etcd_destroy(g.c);
}

int main(void)
{
    const struct CMUnitTest offline[] = {
        cmocka_unit_test(test_b64),
        cmocka_unit_test(test_prefix_end),
        cmocka_unit_test_setup_teardown(test_new_and_closed, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_unreachable, fx_setup, fx_teardown),
    };
    const struct CMUnitTest online[] = {
        cmocka_unit_test_setup_teardown(test_put_range, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_txn, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_delete, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_lease, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_watch_order, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_watch_history_cancel, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_watch_compacted, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_caps, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_watch_backpressure, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_byte_accounting, fx_setup, fx_teardown),
        cmocka_unit_test_setup_teardown(test_stopped_member_timeout, fx_setup, fx_teardown_heal),
        cmocka_unit_test_setup_teardown(test_no_leader_retry, fx_setup, fx_teardown_heal),
        cmocka_unit_test_setup_teardown(test_leader_kill_failover, fx_setup, fx_teardown_heal),
        cmocka_unit_test_setup_teardown(test_watch_resume_after_kill, fx_setup, fx_teardown_heal),
        cmocka_unit_test_setup_teardown(test_watch_leaves_stopped_member, fx_setup, fx_teardown_heal),
    };
    int failed = cmocka_run_group_tests_name("etcd offline", offline, NULL, NULL);
    int rc = cluster_start();
    if (rc == 77) {
        fprintf(stderr, "etcd is not installed: the tests against a cluster are skipped\n");
        return failed ? 1 : 77;
    }
    if (rc != 0) {
        fprintf(stderr, "could not start the etcd cluster\n");
        return 1;
    }
    failed += cmocka_run_group_tests_name("etcd cluster", online, NULL, NULL);
    cluster_stop();
    return failed ? 1 : 0;
}
