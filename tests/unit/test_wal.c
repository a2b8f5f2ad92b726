/* WAL: round trips, group commit, recovery of every torn tail, corruption,
 * segments and preambles, trimming, reads, injected storage faults and
 * back-pressure, on the POSIX backend in a temporary directory with a real
 * libevent loop. Ends with a short throughput measurement (printed only). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <errno.h>
#include <event2/event.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <ftw.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sk_crc32c.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "wal.h"
#include "wal_faulty.c"

/* ---- fixture: a temporary directory and an event loop ---- */

struct fx {
    char dir[64];
    struct event_base *base;
};

static int setup(void **state)
{
    struct fx *f = calloc(1, sizeof *f);
    strcpy(f->dir, "/tmp/skiff-test-wal-XXXXXX");
    if (!mkdtemp(f->dir))
        return -1;
    f->base = event_base_new();
    *state = f;
    return 0;
}

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

static int teardown(void **state)
{
    struct fx *f = *state;
    rm_rf(f->dir);
    event_base_free(f->base);
    free(f);
    return 0;
}

/* Runs the loop until cond(arg) holds; fails the test after 10 s. */
static void run_until(struct event_base *base, bool (*cond)(void *), void *arg)
{
    int64_t deadline = sk_mono_ms() + 10000;
    while (!cond(arg)) {
        assert_true(sk_mono_ms() < deadline);
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
}

/* A few non-blocking loop iterations: lets anything ready run. */
static void spin(struct event_base *base)
{
    for (int i = 0; i < 5; i++)
        event_base_loop(base, EVLOOP_NONBLOCK);
}

/* ---- replay and done logs ---- */

struct rec {
    wal_lsn lsn;
    uint8_t type;
    uint32_t len;
    uint8_t *data;
};

struct rlog {
    struct rec *r;
    size_t n, cap;
};

static int replay_collect(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *p, uint32_t len)
{
    struct rlog *l = arg;
    if (l->n == l->cap) {
        l->cap = l->cap ? l->cap * 2 : 64;
        l->r = realloc(l->r, l->cap * sizeof *l->r);
    }
    struct rec *r = &l->r[l->n++];
    r->lsn = lsn;
    r->type = type;
    r->len = len;
    r->data = malloc(len ? len : 1);
    memcpy(r->data, p, len);
    return 0;
}

static void rlog_free(struct rlog *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->r[i].data);
    free(l->r);
    memset(l, 0, sizeof *l);
}

/* The records of l that are not preambles. */
static size_t rlog_user(const struct rlog *l, struct rec **out)
{
    size_t k = 0;
    for (size_t i = 0; i < l->n; i++)
        if (l->r[i].type != WAL_T_PREAMBLE)
            out[k++] = &l->r[i];
    return k;
}

#define MAXD 4096
struct dlog {
    int n;
    wal_lsn lsn[MAXD];
    int err[MAXD];
    int completions[MAXD]; /* storage completions seen when done ran */
    wal_faulty_ctl *ctl;
};

static void done_cb(void *arg, int err, wal_lsn lsn)
{
    struct dlog *d = arg;
    assert_true(d->n < MAXD);
    d->lsn[d->n] = lsn;
    d->err[d->n] = err;
    d->completions[d->n] = d->ctl ? d->ctl->completions : 0;
    d->n++;
}

struct want {
    struct dlog *d;
    int n;
};

static bool done_reached(void *arg)
{
    struct want *w = arg;
    return w->d->n >= w->n;
}

static void wait_done(struct event_base *base, struct dlog *d, int n)
{
    struct want w = {d, n};
    run_until(base, done_reached, &w);
}

static void assert_lsn_order(const struct dlog *d)
{
    for (int i = 1; i < d->n; i++)
        assert_true(d->lsn[i] > d->lsn[i - 1]);
}

/* ---- payloads ---- */

static uint32_t plen_of(int i)
{
    return 10 + (uint32_t)((i * 37) % 200);
}

static void payload_of(int i, uint8_t *buf, uint32_t len)
{
    for (uint32_t k = 0; k < len; k++)
        buf[k] = (uint8_t)(i * 31 + k * 7 + 1);
}

static int append_i(wal *w, int i, struct dlog *d, wal_lsn *lsn)
{
    uint8_t buf[512];
    uint32_t len = plen_of(i);
    payload_of(i, buf, len);
    return wal_append(w, 10 + (uint8_t)(i % 5), buf, len, d ? done_cb : NULL, d, lsn);
}

static void check_rec(const struct rec *r, int i)
{
    uint8_t buf[512];
    uint32_t len = plen_of(i);
    payload_of(i, buf, len);
    assert_int_equal(r->type, 10 + (i % 5));
    assert_int_equal(r->len, len);
    assert_memory_equal(r->data, buf, len);
}

/* ---- preambles ---- */

struct pre {
    int calls;
    wal **w; /* to check that the triggering record is not placed yet */
    wal_lsn starts[256];
};

static int preamble_cb(void *arg, wal_lsn start, uint8_t **buf, uint32_t *len)
{
    struct pre *p = arg;
    if (p->w && *p->w)
        assert_int_equal(wal_end_lsn(*p->w), start);
    if (p->calls < 256)
        p->starts[p->calls] = start;
    p->calls++;
    char tmp[64];
    int n = snprintf(tmp, sizeof tmp, "pre@%llu", (unsigned long long)start);
    *buf = malloc((size_t)n);
    memcpy(*buf, tmp, (size_t)n);
    *len = (uint32_t)n;
    return 0;
}

/* ---- opening ---- */

static wal_opts opts_default(struct pre *p)
{
    wal_opts o = {
        .segment_bytes = 1 << 20,
        .max_pending_bytes = 8 << 20,
        .node_id = 7,
        .owner_epoch = 3,
        .preamble = p ? preamble_cb : NULL,
        .preamble_arg = p,
    };
    return o;
}

static wal *open_ex(struct fx *f, const wal_opts *o, wal_lsn from, struct rlog *l,
                    wal_faulty_ctl *ctl, wal_storage **stout, int *err, char *why, size_t wl)
{
    int e = 0;
    wal_storage *st = wal_posix_new(f->base, f->dir, &e);
    assert_non_null(st);
    if (ctl)
        st = wal_faulty_new(f->base, st, ctl);
    if (stout)
        *stout = st;
    return wal_open(f->base, st, o, from, l ? replay_collect : NULL, l, err, why, wl);
}

static wal *open_ok(struct fx *f, const wal_opts *o, wal_lsn from, struct rlog *l,
                    wal_faulty_ctl *ctl, wal_storage **stout)
{
    int err = 0;
    char why[512] = "";
    wal *w = open_ex(f, o, from, l, ctl, stout, &err, why, sizeof why);
    if (!w)
        fail_msg("wal_open: %s: %s", sk_err_name(err), why);
    return w;
}

static void seg_path(struct fx *f, wal_lsn seg, char *out, size_t len)
{
    char name[WAL_SEGMENT_NAME_MAX];
    snprintf(out, len, "%s/%s", f->dir, wal_segment_name(seg, name, sizeof name));
}

static long file_size(const char *path)
{
    struct stat st;
    return stat(path, &st) == 0 ? (long)st.st_size : -1;
}

static uint8_t *read_file(const char *path, size_t *len)
{
    FILE *fp = fopen(path, "rb");
    assert_non_null(fp);
    fseek(fp, 0, SEEK_END);
    long n = ftell(fp);
    fseek(fp, 0, SEEK_SET);
    uint8_t *b = malloc((size_t)n + 1);
    assert_int_equal(fread(b, 1, (size_t)n, fp), (size_t)n);
    fclose(fp);
    *len = (size_t)n;
    return b;
}

static void write_file(const char *path, const uint8_t *b, size_t len)
{
    FILE *fp = fopen(path, "wb");
    assert_non_null(fp);
    assert_int_equal(fwrite(b, 1, len, fp), len);
    fclose(fp);
}

static void flip_byte(const char *path, long off)
{
    int fd = open(path, O_RDWR);
    assert_true(fd >= 0);
    uint8_t c;
    assert_int_equal(pread(fd, &c, 1, off), 1);
    c ^= 0x40;
    assert_int_equal(pwrite(fd, &c, 1, off), 1);
    close(fd);
}

/* Appends records [from, to) and waits for them all. */
static void append_range(struct fx *f, wal *w, int from, int to, wal_lsn *lsns)
{
    static struct dlog d;
    memset(&d, 0, sizeof d);
    for (int i = from; i < to; i++)
        assert_int_equal(append_i(w, i, &d, lsns ? &lsns[i] : NULL), 0);
    wait_done(f->base, &d, to - from);
    for (int i = 0; i < d.n; i++)
        assert_int_equal(d.err[i], 0);
    assert_lsn_order(&d);
}

static int count_segment_files(struct fx *f)
{
    wal_storage *st;
    int e;
    st = wal_posix_new(f->base, f->dir, &e);
    uint64_t *v;
    size_t n;
    assert_int_equal(st->ops->list(st, &v, &n), 0);
    free(v);
    st->ops->destroy(st);
    return (int)n;
}

/* ---- tests ---- */

static void test_roundtrip(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal *w = NULL;
    p.w = &w;
    wal_opts o = opts_default(&p);
    struct rlog l = {0};
    w = open_ok(f, &o, 0, &l, NULL, NULL);
    assert_int_equal(l.n, 0);
    assert_int_equal(wal_end_lsn(w), 0);

    static struct dlog d;
    memset(&d, 0, sizeof d);
    wal_lsn lsns[100];
    for (int i = 0; i < 100; i++)
        assert_int_equal(append_i(w, i, &d, &lsns[i]), 0);
    assert_int_equal(lsns[0], WAL_SEGMENT_HEADER + WAL_RECORD_HEADER + strlen("pre@0"));
    assert_true(wal_pending_bytes(w) > 0);
    wait_done(f->base, &d, 100);
    assert_lsn_order(&d);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(d.err[i], 0);
        assert_int_equal(d.lsn[i], lsns[i]);
    }
    assert_int_equal(wal_durable_lsn(w), wal_end_lsn(w));
    assert_int_equal(wal_pending_bytes(w), 0);
    assert_int_equal(p.calls, 1);

    /* Reads verify and copy; a short buffer says how much is needed. */
    uint8_t buf[512], type;
    uint32_t len;
    assert_int_equal(wal_read_record(w, lsns[42], &type, buf, sizeof buf, &len), 0);
    assert_int_equal(len, plen_of(42));
    assert_int_equal(wal_read_record(w, lsns[42], &type, buf, 3, &len), SK_ERR_NOMEM);
    assert_int_equal(len, plen_of(42));
    assert_int_equal(wal_read_record(w, wal_end_lsn(w), &type, buf, sizeof buf, &len),
                     SK_ERR_INVAL);
    assert_int_equal(wal_read_record(w, lsns[42] + 1, &type, buf, sizeof buf, &len),
                     SK_ERR_CORRUPT);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.appends, 100);
    assert_true(s.commits >= 1 && s.commits <= 100);
    assert_int_equal(s.bytes_written, wal_end_lsn(w));
    assert_int_equal(s.segments, 1);
    /* Every commit is in the latency histogram once, the last one's in its bucket. */
    uint64_t in_hist = 0;
    for (int i = 0; i <= WAL_COMMIT_BUCKETS; i++)
        in_hist += s.commit_hist[i];
    assert_int_equal(in_hist, s.commits);
    assert_true(s.commit_us_sum >= (uint64_t)s.last_commit_us);
    int last = 0;
    while (last < WAL_COMMIT_BUCKETS && s.last_commit_us > wal_commit_bucket_us(last))
        last++;
    assert_true(s.commit_hist[last] >= 1);
    /* The POSIX backend times each write on its I/O thread: every commit is
     * in the I/O histograms too, and its parts fit in the whole. */
    uint64_t in_io = 0, in_wait = 0;
    for (int i = 0; i <= WAL_COMMIT_BUCKETS; i++) {
        in_io += s.io_hist[i];
        in_wait += s.io_wait_hist[i];
    }
    assert_int_equal(in_io, s.commits);
    assert_int_equal(in_wait, s.commits);
    assert_true(s.io_us_sum + s.io_wait_us_sum <= s.commit_us_sum);
    wal_lsn end = wal_end_lsn(w);
    wal_close(w);
    w = NULL;

    w = open_ok(f, &o, 0, &l, NULL, NULL);
    assert_int_equal(wal_end_lsn(w), end);
    assert_int_equal(wal_durable_lsn(w), end);
    assert_int_equal(l.n, 101);
    assert_int_equal(l.r[0].type, WAL_T_PREAMBLE);
    assert_int_equal(l.r[0].lsn, WAL_SEGMENT_HEADER);
    assert_memory_equal(l.r[0].data, "pre@0", 5);
    for (int i = 0; i < 100; i++) {
        assert_int_equal(l.r[i + 1].lsn, lsns[i]);
        check_rec(&l.r[i + 1], i);
    }
    rlog_free(&l);
    /* After recovery the next append starts a new segment. */
    append_range(f, w, 100, 101, NULL);
    wal_lsn *segs;
    size_t n;
    assert_int_equal(wal_segments_snapshot(w, &segs, &n), 0);
    assert_int_equal(n, 2);
    assert_int_equal(segs[1], end);
    free(segs);
    wal_close(w);
    w = NULL;

    w = open_ok(f, &o, 0, &l, NULL, NULL);
    struct rec *u[256];
    assert_int_equal(rlog_user(&l, u), 101);
    check_rec(u[100], 100);
    assert_int_equal(l.n, 103);
    rlog_free(&l);
    wal_close(w);
}

static void test_close_drains(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    o.preamble = NULL;
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < 50; i++)
        assert_int_equal(append_i(w, i, &d, NULL), 0);
    assert_int_equal(d.n, 0);
    wal_close(w); /* runs the loop until every record is durable */
    assert_int_equal(d.n, 50);
    for (int i = 0; i < 50; i++)
        assert_int_equal(d.err[i], 0);
    assert_lsn_order(&d);
    struct rlog l = {0};
    w = open_ok(f, &o, 0, &l, NULL, NULL);
    assert_int_equal(l.n, 51);
    assert_int_equal(l.r[0].len, 0); /* no preamble callback: empty preamble */
    rlog_free(&l);
    wal_close(w);
}

static bool held_is(void *arg)
{
    void **a = arg;
    return wal_faulty_held(a[0]) >= (int)(intptr_t)a[1];
}

static void wait_held(struct event_base *base, wal_storage *st, int n)
{
    void *a[2] = {st, (void *)(intptr_t)n};
    run_until(base, held_is, a);
}

/* Opens with completions held (ctl->hold) and appends record 0: the first
 * append starts the segment, whose file is created first; returns with that
 * create held. */
static wal *open_creating(struct fx *f, const wal_opts *o, wal_faulty_ctl *ctl, wal_storage **st,
                          struct dlog *d)
{
    wal *w = open_ok(f, o, 0, NULL, ctl, st);
    memset(d, 0, sizeof *d);
    d->ctl = ctl;
    assert_int_equal(append_i(w, 0, d, NULL), 0);
    wait_held(f->base, *st, 1);
    assert_string_equal(wal_faulty_held_kind(*st, 0), "create");
    return w;
}

static void test_group_commit(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_opts o = opts_default(&p);
    wal_faulty_ctl ctl = {.hold = true};
    wal_storage *st;
    static struct dlog d;
    wal *w = open_creating(f, &o, &ctl, &st, &d);

    /* What arrives while the segment's file is created joins the first
     * write. */
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    assert_int_equal(append_i(w, 2, &d, NULL), 0);
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1);
    assert_string_equal(wal_faulty_held_kind(st, 0), "write");
    assert_int_equal(ctl.writes, 1);
    assert_int_equal(ctl.write_len[0], wal_end_lsn(w));

    /* While write 1 is in flight: 20 appends, from several loop turns. */
    uint64_t bytes = 0;
    for (int i = 3; i < 23; i++) {
        assert_int_equal(append_i(w, i, &d, NULL), 0);
        bytes += WAL_RECORD_HEADER + plen_of(i);
        if (i % 5 == 0)
            spin(f->base);
    }
    spin(f->base);
    assert_int_equal(ctl.writes, 1);
    assert_int_equal(d.n, 0);
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1); /* write 2, issued as soon as write 1 completed */
    assert_int_equal(d.n, 3);
    assert_int_equal(ctl.writes, 2);
    assert_int_equal(ctl.write_len[1], bytes);

    bytes = 0;
    for (int i = 23; i < 28; i++) {
        assert_int_equal(append_i(w, i, &d, NULL), 0);
        bytes += WAL_RECORD_HEADER + plen_of(i);
    }
    spin(f->base);
    assert_int_equal(d.n, 3);
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1);
    assert_int_equal(d.n, 23);
    assert_int_equal(ctl.writes, 3);
    assert_int_equal(ctl.write_len[2], bytes);
    wal_faulty_release(st, 0);
    wait_done(f->base, &d, 28);
    assert_int_equal(ctl.writes, 3);

    /* LSN order, and each callback only after its own write completed
     * (completions: 1 create, then writes). */
    assert_lsn_order(&d);
    for (int i = 0; i < 28; i++) {
        assert_int_equal(d.err[i], 0);
        assert_int_equal(d.completions[i], i < 3 ? 2 : i < 23 ? 3 : 4);
    }
    ctl.hold = false;
    wal_close(w);
}

/* Writes n records into a fresh WAL; returns the file's bytes. */
static uint8_t *make_log(struct fx *f, int n, wal_lsn *lsns, size_t *flen)
{
    wal_opts o = opts_default(NULL);
    o.no_preallocate = true;
    o.no_direct_io = true;
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    append_range(f, w, 0, n, lsns);
    wal_close(w);
    char path[128];
    seg_path(f, 0, path, sizeof path);
    return read_file(path, flen);
}

static void reset_dir(struct fx *f)
{
    rm_rf(f->dir);
    assert_int_equal(mkdir(f->dir, 0755), 0);
}

/* Opens, expects records [0, n) then `extra` more from index 1000. */
static void expect_records(struct fx *f, int n, int extra)
{
    wal_opts o = opts_default(NULL);
    struct rlog l = {0};
    wal *w = open_ok(f, &o, 0, &l, NULL, NULL);
    struct rec *u[512];
    size_t k = rlog_user(&l, u);
    assert_int_equal(k, (size_t)(n + extra));
    for (int i = 0; i < n; i++)
        check_rec(u[i], i);
    for (int i = 0; i < extra; i++)
        check_rec(u[n + i], 1000 + i);
    rlog_free(&l);
    wal_close(w);
}

/* A backend that takes two writes at once (NFS): the next group commit goes
 * out while the previous one is in flight, completions arrive in any order,
 * and records are acknowledged in LSN order all the same. */
static void test_pipelined_writes(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_opts o = opts_default(&p);
    o.no_direct_io = true; /* direct I/O rewrites a partial block: appends in order only */
    wal_faulty_ctl ctl = {.hold = true, .max_writes = 2};
    wal_storage *st;
    static struct dlog d;
    wal *w = open_creating(f, &o, &ctl, &st, &d);
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1); /* write 1: record 0 */
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    wait_held(f->base, st, 2); /* write 2 (record 1) while write 1 flies */
    assert_int_equal(ctl.writes, 2);
    assert_int_equal(append_i(w, 2, &d, NULL), 0);
    assert_int_equal(append_i(w, 3, &d, NULL), 0);
    spin(f->base);
    assert_int_equal(ctl.writes, 2); /* the depth is 2: records 2 and 3 wait */

    /* Write 2 lands first: record 1 waits for record 0, write 3 goes. */
    wal_faulty_release(st, 1);
    wait_held(f->base, st, 2);
    assert_int_equal(ctl.writes, 3);
    assert_int_equal(ctl.write_len[2], 2 * WAL_RECORD_HEADER + plen_of(2) + plen_of(3));
    assert_int_equal(d.n, 0);
    assert_int_equal(wal_durable_lsn(w), 0);
    wal_faulty_release(st, 0); /* write 1: records 0 and 1 together */
    wait_done(f->base, &d, 2);
    spin(f->base);
    assert_int_equal(d.n, 2);
    wal_faulty_release(st, 0);
    wait_done(f->base, &d, 4);

    /* A new segment waits until everything before it is durable: its file
     * is created, and written, only once the old segment's write is back. */
    assert_int_equal(append_i(w, 4, &d, NULL), 0);
    wait_held(f->base, st, 1);
    wal_roll(w);
    assert_int_equal(append_i(w, 5, &d, NULL), 0);
    spin(f->base);
    assert_int_equal(wal_faulty_held(st), 1);
    assert_int_equal(ctl.creates, 1);
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1);
    assert_string_equal(wal_faulty_held_kind(st, 0), "create");
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1);
    assert_int_equal(p.calls, 2);
    assert_int_equal(ctl.write_seg[ctl.writes - 1], p.starts[1]);
    wal_faulty_release(st, 0);
    wait_done(f->base, &d, 6);
    assert_lsn_order(&d);
    for (int i = 0; i < d.n; i++)
        assert_int_equal(d.err[i], 0);
    ctl.hold = false;
    wal_close(w);
    expect_records(f, 6, 0);
}

/* Group-commit buffers are kept for reuse: rounds of two batches in flight
 * and a third open allocate buffers for three batches in the first round
 * and none after it (one kept buffer made every round allocate two). */
static void test_batches_reused(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_opts o = opts_default(&p);
    o.no_direct_io = true;
    wal_faulty_ctl ctl = {.hold = true, .max_writes = 2};
    wal_storage *st;
    static struct dlog d;
    wal *w = open_creating(f, &o, &ctl, &st, &d);
    wal_faulty_release(st, 0); /* the create */
    wait_held(f->base, st, 1);
    wal_faulty_release(st, 0); /* record 0's write */
    wait_done(f->base, &d, 1);
    wal_stats s;
    uint64_t warm = 0;
    int i = 1;
    for (int round = 0; round < 8; round++) {
        if (round == 1) {
            wal_get_stats(w, &s);
            warm = s.buffers_allocated;
        }
        assert_int_equal(append_i(w, i++, &d, NULL), 0);
        wait_held(f->base, st, 1);
        assert_int_equal(append_i(w, i++, &d, NULL), 0);
        wait_held(f->base, st, 2);
        assert_int_equal(append_i(w, i++, &d, NULL), 0); /* a third batch, open */
        spin(f->base);
        wal_faulty_release(st, 0);
        wal_faulty_release(st, 0);
        wait_held(f->base, st, 1);
        wal_faulty_release(st, 0);
        wait_done(f->base, &d, i);
    }
    wal_get_stats(w, &s);
    assert_true(warm >= 3);
    assert_int_equal(s.buffers_allocated, warm);
    for (int k = 0; k < d.n; k++)
        assert_int_equal(d.err[k], 0);
    assert_lsn_order(&d);
    ctl.hold = false;
    wal_close(w);
    expect_records(f, i, 0);
}

/* The first of two writes in flight fails transiently after the second one
 * landed: it goes out again, and nothing is acknowledged before it. */
static void test_pipelined_transient(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    o.no_direct_io = true; /* direct I/O rewrites a partial block: appends in order only */
    wal_faulty_ctl ctl = {.hold = true, .max_writes = 2, .fail_write_at = 2,
                          .err = SK_ERR_TIMEOUT};
    wal_storage *st;
    static struct dlog d;
    wal *w = open_creating(f, &o, &ctl, &st, &d);
    wal_faulty_release(st, 0);
    wait_held(f->base, st, 1);
    wal_faulty_release(st, 0); /* write 1 */
    wait_done(f->base, &d, 1);
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    wait_held(f->base, st, 1); /* write 2: fails */
    assert_int_equal(append_i(w, 2, &d, NULL), 0);
    wait_held(f->base, st, 2); /* write 3 */
    wal_faulty_release(st, 1);
    spin(f->base);
    assert_int_equal(d.n, 1);
    wal_faulty_release(st, 0); /* the failure: retried after a backoff */
    wait_held(f->base, st, 1);
    assert_int_equal(ctl.writes, 4);
    assert_int_equal(ctl.write_len[3], ctl.write_len[1]);
    assert_int_equal(d.n, 1);
    wal_faulty_release(st, 0);
    wait_done(f->base, &d, 3);
    for (int i = 0; i < 3; i++)
        assert_int_equal(d.err[i], 0);
    assert_lsn_order(&d);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.retries, 1);
    ctl.hold = false;
    wal_close(w);
    expect_records(f, 3, 0);
}

static void test_torn_tail_every_length(void **state)
{
    struct fx *f = *state;
    enum { N = 12 }; /* the last record, index 11, has a 17-byte payload */
    wal_lsn lsns[N];
    size_t flen;
    uint8_t *img = make_log(f, N, lsns, &flen);
    size_t last = (size_t)lsns[N - 1];
    size_t rlen = WAL_RECORD_HEADER + plen_of(N - 1);
    assert_int_equal(flen, last + rlen);
    char path[128];
    seg_path(f, 0, path, sizeof path);
    wal_opts o = opts_default(NULL);
    for (size_t cut = last; cut < last + rlen; cut++) {
        reset_dir(f);
        write_file(path, img, cut);
        struct rlog l = {0};
        wal *w = open_ok(f, &o, 0, &l, NULL, NULL);
        struct rec *u[16];
        assert_int_equal(rlog_user(&l, u), N - 1);
        rlog_free(&l);
        assert_int_equal(file_size(path), (long)last);
        assert_int_equal(wal_end_lsn(w), last);
        append_range(f, w, 1000, 1001, NULL);
        wal_close(w);
        expect_records(f, N - 1, 1);
    }
    free(img);
}

static void test_garbage_and_zero_tails(void **state)
{
    struct fx *f = *state;
    enum { N = 5 };
    wal_lsn lsns[N];
    size_t flen;
    uint8_t *img = make_log(f, N, lsns, &flen);
    char path[128];
    seg_path(f, 0, path, sizeof path);
    uint8_t *big = calloc(1, flen + 8192);
    memcpy(big, img, flen);

    /* Zeros (as preallocation leaves them). */
    reset_dir(f);
    write_file(path, big, flen + 8192);
    expect_records(f, N, 0);
    assert_int_equal(file_size(path), (long)flen);

    /* A hole followed by valid records (a crash with two pipelined writes in
     * flight, only the later one landed): the log ends at the hole; nothing
     * after it was acknowledged. */
    memset(big + lsns[2], 0, (size_t)(lsns[4] - lsns[2]));
    reset_dir(f);
    write_file(path, big, flen);
    expect_records(f, 2, 0);
    assert_int_equal(file_size(path), (long)lsns[2]);
    memcpy(big, img, flen);

    /* Garbage, and a header that claims an absurd length. */
    uint64_t x = 88172645463325252ull;
    for (size_t i = flen; i < flen + 8192; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        big[i] = (uint8_t)x;
    }
    reset_dir(f);
    write_file(path, big, flen + 8192);
    expect_records(f, N, 0);
    assert_int_equal(file_size(path), (long)flen);
    memset(big + flen, 0xff, 9);
    reset_dir(f);
    write_file(path, big, flen + 8192);
    expect_records(f, N, 0);
    assert_int_equal(file_size(path), (long)flen);

    /* A stale copy of a valid record at a wrong position is rejected: the
     * CRC covers the LSN. */
    memcpy(big + flen, img + lsns[1], WAL_RECORD_HEADER + plen_of(1));
    reset_dir(f);
    write_file(path, big, flen + WAL_RECORD_HEADER + plen_of(1));
    expect_records(f, N, 0);
    free(big);
    free(img);
}

static void test_bad_crc_last_segment(void **state)
{
    struct fx *f = *state;
    enum { N = 6 };
    wal_lsn lsns[N];
    size_t flen;
    free(make_log(f, N, lsns, &flen));
    char path[128];
    seg_path(f, 0, path, sizeof path);
    flip_byte(path, (long)lsns[3] + WAL_RECORD_HEADER + 2);
    wal_opts o = opts_default(NULL);
    struct rlog l = {0};
    wal *w = open_ok(f, &o, 0, &l, NULL, NULL);
    struct rec *u[16];
    assert_int_equal(rlog_user(&l, u), 3);
    rlog_free(&l);
    assert_int_equal(file_size(path), (long)lsns[3]);
    append_range(f, w, 1000, 1001, NULL);
    wal_close(w);
    expect_records(f, 3, 1);
}

/* Several segments of about 1 KiB. */
static wal *open_small(struct fx *f, struct pre *p, wal_faulty_ctl *ctl, wal_storage **st,
                       struct rlog *l, wal_lsn from)
{
    wal_opts o = opts_default(p);
    o.segment_bytes = 1024;
    return open_ok(f, &o, from, l, ctl, st);
}

static void test_bad_crc_earlier_segment(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[40];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 40, lsns);
    wal_close(w);
    assert_true(p.calls >= 3);
    char path[128];
    seg_path(f, 0, path, sizeof path);
    flip_byte(path, (long)lsns[2] + WAL_RECORD_HEADER);

    wal_opts o = opts_default(&p);
    o.segment_bytes = 1024;
    int err = 0;
    char why[512] = "";
    struct rlog l = {0};
    w = open_ex(f, &o, 0, &l, NULL, NULL, &err, why, sizeof why);
    assert_null(w);
    assert_int_equal(err, SK_ERR_CORRUPT);
    assert_non_null(strstr(why, "00000000000000000000.wal"));
    char at[64];
    snprintf(at, sizeof at, "offset %llu", (unsigned long long)lsns[2]);
    assert_non_null(strstr(why, at));
    assert_non_null(strstr(why, "CRC"));
    rlog_free(&l);

    /* A damaged header of an earlier segment, and a file whose name does
     * not match the start LSN inside it. */
    flip_byte(path, (long)lsns[2] + WAL_RECORD_HEADER);
    flip_byte(path, 20);
    w = open_ex(f, &o, 0, NULL, NULL, NULL, &err, why, sizeof why);
    assert_null(w);
    assert_int_equal(err, SK_ERR_CORRUPT);
    assert_non_null(strstr(why, "header"));
    flip_byte(path, 20);
    char other[128];
    seg_path(f, p.starts[1], other, sizeof other);
    seg_path(f, p.starts[1] + 1, path, sizeof path);
    assert_int_equal(rename(other, path), 0);
    w = open_ex(f, &o, 0, NULL, NULL, NULL, &err, why, sizeof why);
    assert_null(w);
    assert_int_equal(err, SK_ERR_CORRUPT);
    assert_int_equal(rename(path, other), 0);

    /* A segment cut short in the middle of the log. */
    uint8_t *b;
    size_t blen;
    seg_path(f, p.starts[1], path, sizeof path);
    b = read_file(path, &blen);
    /* Its data, not the file: direct I/O pads the file to whole blocks. */
    assert_true(blen >= p.starts[2] - p.starts[1]);
    write_file(path, b, (size_t)(p.starts[2] - p.starts[1]) - 1);
    free(b);
    w = open_ex(f, &o, 0, NULL, NULL, NULL, &err, why, sizeof why);
    assert_null(w);
    assert_int_equal(err, SK_ERR_CORRUPT);
    assert_non_null(strstr(why, "truncated record"));
}

static void test_roll_preamble_replay_from(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal *w = NULL;
    p.w = &w;
    wal_lsn lsns[80];
    w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    int segs_before = p.calls;
    assert_true(segs_before >= 5);
    /* Every segment reached segment_bytes before the next one started. */
    for (int i = 1; i < p.calls; i++)
        assert_true(p.starts[i] - p.starts[i - 1] >= 1024);
    wal_lsn end = wal_end_lsn(w);
    wal_roll(w);
    append_range(f, w, 60, 61, lsns);
    assert_int_equal(p.calls, segs_before + 1);
    assert_int_equal(p.starts[segs_before], end);
    int plen = snprintf(NULL, 0, "pre@%llu", (unsigned long long)end);
    assert_int_equal(lsns[60], end + WAL_SEGMENT_HEADER + WAL_RECORD_HEADER + (wal_lsn)plen);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.segments, (uint64_t)p.calls);
    wal_close(w);
    w = NULL;

    /* Full replay: each segment opens with its own preamble. */
    struct rlog l = {0};
    struct pre p2 = {0};
    w = open_small(f, &p2, NULL, NULL, &l, 0);
    int seen = 0, k = 0;
    for (size_t i = 0; i < l.n; i++) {
        if (l.r[i].type == WAL_T_PREAMBLE) {
            assert_int_equal(l.r[i].lsn, p.starts[seen] + WAL_SEGMENT_HEADER);
            char tmp[64];
            int n = snprintf(tmp, sizeof tmp, "pre@%llu", (unsigned long long)p.starts[seen]);
            assert_int_equal(l.r[i].len, n);
            assert_memory_equal(l.r[i].data, tmp, n);
            seen++;
        } else {
            assert_int_equal(l.r[i].lsn, lsns[k]);
            check_rec(&l.r[i], k);
            k++;
        }
    }
    assert_int_equal(seen, p.calls);
    assert_int_equal(k, 61);
    rlog_free(&l);
    wal_close(w);

    /* From the middle of the stream: exactly the records from there on. */
    w = open_small(f, &p2, NULL, NULL, &l, lsns[30]);
    assert_int_equal(l.r[0].lsn, lsns[30]);
    struct rec *u[128];
    assert_int_equal(rlog_user(&l, u), 31);
    for (int i = 0; i < 31; i++)
        check_rec(u[i], 30 + i);
    rlog_free(&l);
    wal_close(w);

    /* From before the first retained segment: everything. */
    w = open_small(f, &p2, NULL, NULL, &l, 0);
    assert_int_equal(rlog_user(&l, u), 61);
    rlog_free(&l);
    wal_close(w);
}

struct reader_arg {
    wal *w;
    wal_lsn *lsns;
    int n;
    _Atomic int stop;
    int ok, noent, bad;
};

static void *reader_main(void *arg)
{
    struct reader_arg *a = arg;
    uint8_t buf[512], type;
    uint32_t len;
    do {
        for (int i = 0; i < a->n; i++) {
            int rc = wal_read_record(a->w, a->lsns[i], &type, buf, sizeof buf, &len);
            if (rc == 0 && len == plen_of(i))
                a->ok++;
            else if (rc == SK_ERR_NOENT)
                a->noent++;
            else
                a->bad++;
        }
    } while (!a->stop);
    return NULL;
}

static bool removed_at_least(void *arg)
{
    void **a = arg;
    wal_stats s;
    wal_get_stats(a[0], &s);
    return s.segments_removed >= (uint64_t)(intptr_t)a[1];
}

static void wait_removed(struct event_base *base, wal *w, int n)
{
    void *a[2] = {w, (void *)(intptr_t)n};
    run_until(base, removed_at_least, a);
}

/* wal_scan: records read in order through one window per read, each the
 * same as wal_read_record gives; a window never serves bytes that became
 * durable after it was read, nor a segment trimmed since. */
static void check_scanned(wal *w, wal_scan *sc, const wal_lsn *lsns, int from, int to)
{
    for (int i = from; i < to; i++) {
        uint8_t type, expect[512];
        const uint8_t *rec;
        uint32_t len;
        assert_int_equal(wal_scan_record(w, sc, lsns[i], &type, &rec, &len), 0);
        assert_int_equal(type, 10 + i % 5);
        assert_int_equal(len, plen_of(i));
        payload_of(i, expect, len);
        assert_memory_equal(rec, expect, len);
    }
}

static void test_scan(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[90];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    int nseg = p.calls;
    assert_true(nseg >= 3);

    wal_scan sc = {0};
    check_scanned(w, &sc, lsns, 0, 60);
    /* One read per segment, not two per record. */
    assert_int_equal(sc.reads, (uint64_t)nseg);

    /* Records appended after the window was read: read again, not served
     * from what the window held past the durable LSN of then. */
    append_range(f, w, 60, 90, lsns);
    uint64_t before = sc.reads;
    check_scanned(w, &sc, lsns, 60, 90);
    assert_true(sc.reads > before);

    uint8_t type;
    const uint8_t *rec;
    uint32_t len;
    assert_int_equal(wal_scan_record(w, &sc, wal_end_lsn(w), &type, &rec, &len), SK_ERR_INVAL);
    assert_int_equal(wal_scan_record(w, &sc, lsns[42] + 1, &type, &rec, &len), SK_ERR_CORRUPT);

    /* A trimmed segment is gone even while the window holds its bytes. */
    check_scanned(w, &sc, lsns, 0, 1);
    wal_trim(w, lsns[40]);
    wait_removed(f->base, w, 1);
    assert_int_equal(wal_scan_record(w, &sc, lsns[0], &type, &rec, &len), SK_ERR_NOENT);
    wal_scan_reset(&sc);
    check_scanned(w, &sc, lsns, 40, 90);
    wal_scan_free(&sc);
    wal_close(w);
}

static void test_trim_and_read(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[60];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    int nseg = p.calls;
    assert_int_equal(count_segment_files(f), nseg);

    /* A reader thread keeps reading every record while segments go. */
    struct reader_arg ra = {.w = w, .lsns = lsns, .n = 60};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reader_main, &ra), 0);

    /* Segments wholly below record 40 go; the one holding it stays. */
    int below = 0;
    while (below + 1 < nseg && p.starts[below + 1] <= lsns[40])
        below++;
    assert_true(below >= 2);
    wal_trim(w, lsns[40]);
    wait_removed(f->base, w, below);
    spin(f->base);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.segments_removed, below);
    assert_int_equal(s.segments, nseg - below);
    assert_int_equal(wal_start_lsn(w), p.starts[below]);
    assert_int_equal(count_segment_files(f), nseg - below);

    uint8_t buf[512], type;
    uint32_t len;
    assert_int_equal(wal_read_record(w, lsns[0], &type, buf, sizeof buf, &len), SK_ERR_NOENT);
    assert_int_equal(wal_read_record(w, lsns[40], &type, buf, sizeof buf, &len), 0);
    assert_int_equal(type, 10 + 40 % 5);
    uint8_t expect[512];
    payload_of(40, expect, plen_of(40));
    assert_memory_equal(buf, expect, plen_of(40));

    /* Everything: the last segment always stays. */
    wal_trim(w, UINT64_MAX);
    wait_removed(f->base, w, nseg - 1);
    ra.stop = 1;
    pthread_join(th, NULL);
    assert_int_equal(ra.bad, 0);
    assert_true(ra.ok > 0);
    assert_int_equal(count_segment_files(f), 1);
    assert_int_equal(wal_start_lsn(w), p.starts[nseg - 1]);
    assert_int_equal(wal_read_record(w, lsns[40], &type, buf, sizeof buf, &len), SK_ERR_NOENT);
    assert_int_equal(wal_read_record(w, lsns[59], &type, buf, sizeof buf, &len), 0);
    wal_lsn end = wal_end_lsn(w);
    wal_close(w);

    struct rlog l = {0};
    w = open_small(f, &p, NULL, NULL, &l, 0);
    assert_int_equal(wal_start_lsn(w), p.starts[nseg - 1]);
    assert_int_equal(wal_end_lsn(w), end);
    assert_int_equal(l.r[0].lsn, p.starts[nseg - 1] + WAL_SEGMENT_HEADER);
    struct rec *u[64];
    size_t k = rlog_user(&l, u);
    assert_true(k > 0);
    check_rec(u[k - 1], 59);
    rlog_free(&l);
    wal_close(w);
}

/* ---- recycled segments (docs/wal.md, "Recycled segments") ---- */

/* The spares in the directory: their inodes, each checked cleared. */
static int spares_of(struct fx *f, ino_t *inos, int cap)
{
    DIR *d = opendir(f->dir);
    assert_non_null(d);
    struct dirent *de;
    int n = 0;
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l < 6 || strcmp(de->d_name + l - 6, ".spare") != 0)
            continue;
        char path[512];
        snprintf(path, sizeof path, "%s/%s", f->dir, de->d_name);
        size_t blen;
        uint8_t *b = read_file(path, &blen);
        assert_true(blen >= WAL_SEGMENT_HEADER);
        for (size_t i = 0; i < WAL_SEGMENT_HEADER; i++)
            assert_int_equal(b[i], 0);
        free(b);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_true(n < cap);
        inos[n++] = st.st_ino;
    }
    closedir(d);
    return n;
}

static bool ino_in(ino_t x, const ino_t *v, int n)
{
    for (int i = 0; i < n; i++)
        if (v[i] == x)
            return true;
    return false;
}

/* Replays the WAL and checks that its records are records [first, to). */
static void expect_tail(struct fx *f, int first, int to)
{
    struct rlog l = {0};
    struct pre p = {0};
    wal *w = open_small(f, &p, NULL, NULL, &l, 0);
    static struct rec *u[256];
    size_t k = rlog_user(&l, u);
    assert_int_equal(k, (size_t)(to - first));
    for (size_t j = 0; j < k; j++)
        check_rec(u[j], first + (int)j);
    rlog_free(&l);
    wal_close(w);
}

/* The first record of the segment holding lsn. */
static int first_in_segment(const struct pre *p, const wal_lsn *lsns, int n, wal_lsn lsn)
{
    wal_lsn seg = 0;
    for (int i = 0; i < p->calls && i < 256; i++)
        if (p->starts[i] <= lsn)
            seg = p->starts[i];
    int i = 0;
    while (i < n && lsns[i] < seg)
        i++;
    return i;
}

/* Trims every segment but the last one (which holds lsns[last]) and waits
 * for the removals: the trimmed files become spares. */
static void trim_all_but_last(struct fx *f, wal *w, const struct pre *p, const wal_lsn *lsns,
                              int last)
{
    wal_trim(w, lsns[last]);
    wait_removed(f->base, w, p->calls - 1);
    spin(f->base);
}

static void test_recycled_segments(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[120];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    int nseg = p.calls;
    assert_true(nseg >= 4);
    trim_all_but_last(f, w, &p, lsns, 59);
    ino_t sp[8];
    assert_int_equal(spares_of(f, sp, 8), 2);

    /* The next two segments are the spares, renamed and written over. */
    append_range(f, w, 60, 120, lsns);
    assert_true(p.calls >= nseg + 2);
    for (int i = nseg; i < nseg + 2; i++) {
        char path[512];
        seg_path(f, p.starts[i], path, sizeof path);
        struct stat st;
        assert_int_equal(stat(path, &st), 0);
        assert_true(ino_in(st.st_ino, sp, 2));
    }
    wal_close(w);
    expect_tail(f, first_in_segment(&p, lsns, 120, lsns[59]), 120);
}

/* A crash may leave a spare whose header was not cleared yet, or a spare
 * renamed to the next segment before that segment's first write. */
static void test_recycled_crash_states(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[120];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    char path[512], spare[512];
    seg_path(f, p.starts[0], path, sizeof path);
    size_t blen;
    uint8_t *first = read_file(path, &blen);
    trim_all_but_last(f, w, &p, lsns, 59);
    wal_lsn end = wal_end_lsn(w);
    wal_close(w);
    int keep = first_in_segment(&p, lsns, 60, lsns[59]);

    /* A spare with a valid header of its earlier life. */
    snprintf(spare, sizeof spare, "%s/%020llu.spare", f->dir, (unsigned long long)p.starts[0]);
    write_file(spare, first, blen);
    free(first);
    /* And the other spare, renamed to the segment that would start at the
     * end of the log: its header is cleared, the rest is an earlier life. */
    ino_t sp[8];
    DIR *d = opendir(f->dir);
    struct dirent *de;
    char other[512] = "";
    while ((de = readdir(d))) {
        size_t l = strlen(de->d_name);
        if (l > 6 && strcmp(de->d_name + l - 6, ".spare") == 0 &&
            strcmp(de->d_name, strrchr(spare, '/') + 1) != 0)
            snprintf(other, sizeof other, "%s/%s", f->dir, de->d_name);
    }
    closedir(d);
    assert_true(other[0]);
    seg_path(f, end, path, sizeof path);
    assert_int_equal(rename(other, path), 0);

    struct pre p2 = {0};
    w = open_small(f, &p2, NULL, NULL, NULL, 0);
    assert_int_equal(wal_end_lsn(w), end);
    assert_int_equal(spares_of(f, sp, 8), 1); /* cleared at start-up */
    append_range(f, w, 60, 120, lsns);
    assert_int_equal(p2.starts[0], end);
    wal_close(w);
    expect_tail(f, keep, 120);
}

/* A removal cut short by a crash leaves `<start>.wal.del` behind: gone at
 * the next start-up, and nothing else with it. */
static void test_removed_leftovers_purged(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[60];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    wal_close(w);
    char del[512], other[512];
    snprintf(del, sizeof del, "%s/%020llu.wal.del", f->dir, 12345ULL);
    snprintf(other, sizeof other, "%s/notes.wal.del", f->dir);
    write_file(del, (const uint8_t *)"x", 1);
    write_file(other, (const uint8_t *)"x", 1);
    struct pre p2 = {0};
    w = open_small(f, &p2, NULL, NULL, NULL, 0);
    assert_int_equal(access(del, F_OK), -1);
    assert_int_equal(access(other, F_OK), 0); /* not a segment's name */
    wal_close(w);
    expect_tail(f, 0, 60);
}

/* A WAL deleted for good leaves no spare behind. */
static void test_destroy_files_purges_spares(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[60];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 60, lsns);
    trim_all_but_last(f, w, &p, lsns, 59);
    wal_close(w);
    ino_t sp[8];
    assert_int_equal(spares_of(f, sp, 8), 2);
    char url[512], why[256] = "";
    snprintf(url, sizeof url, "file://%s", f->dir);
    assert_int_equal(wal_destroy_files(f->base, url, why, sizeof why), 0);
    assert_int_equal(spares_of(f, sp, 8), 0);
    assert_int_equal(count_segment_files(f), 0);
}

/* ---- direct I/O (docs/wal.md, "Direct I/O") ---- */

struct iow {
    bool done;
    int err;
};

static void iow_cb(void *a, int err)
{
    struct iow *w = a;
    w->done = true;
    w->err = err;
}

static bool iow_done(void *a)
{
    return ((struct iow *)a)->done;
}

/* Writes buf[off, off+len) at off in two pieces, as the WAL's iovecs come. */
static int st_write(struct fx *f, wal_storage *st, const uint8_t *buf, uint64_t off, size_t len)
{
    struct iow w = {0};
    struct iovec iov[2] = {{(void *)(buf + off), len / 3}, {(void *)(buf + off + len / 3), len - len / 3}};
    st->ops->write(st, 0, off, iov, 2, true, iow_cb, &w);
    run_until(f->base, iow_done, &w);
    return w.err;
}

static wal_storage *st_sole(struct fx *f, bool direct)
{
    int e = 0;
    wal_storage *st = wal_posix_new(f->base, f->dir, &e);
    assert_non_null(st);
    bool excl = false;
    assert_int_equal(st->ops->lock(st, &excl), 0);
    assert_true(excl);
    st->ops->sole_owner(st, direct);
    return st;
}

static void expect_file(struct fx *f, const uint8_t *want, size_t len, bool padded)
{
    char path[128];
    seg_path(f, 0, path, sizeof path);
    size_t got;
    uint8_t *b = read_file(path, &got);
    if (padded) {
        assert_int_equal(got, (len + 4095) / 4096 * 4096);
        for (size_t i = len; i < got; i++)
            assert_int_equal(b[i], 0);
    } else {
        assert_int_equal(got, len);
    }
    assert_memory_equal(b, want, len);
    free(b);
}

/* Pages of the file at path in the page cache. */
static long cached_pages(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat st;
    assert_true(fd >= 0 && fstat(fd, &st) == 0 && st.st_size > 0);
    size_t n = ((size_t)st.st_size + 4095) / 4096;
    unsigned char *v = malloc(n);
    void *m = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_SHARED, fd, 0);
    assert_true(v && m != MAP_FAILED && mincore(m, (size_t)st.st_size, v) == 0);
    long in = 0;
    for (size_t i = 0; i < n; i++)
        in += v[i] & 1;
    munmap(m, (size_t)st.st_size);
    free(v);
    close(fd);
    return in;
}

/* 3 MiB of a pattern that repeats nowhere a block apart. */
static uint8_t *direct_data(void)
{
    size_t total = 3u << 20;
    uint8_t *data = malloc(total);
    assert_non_null(data);
    for (size_t i = 0; i < total; i++)
        data[i] = (uint8_t)(i * 2654435761u >> 13);
    return data;
}

typedef int (*st_writer)(struct fx *f, wal_storage *st, const uint8_t *data, uint64_t off,
                         size_t len);

/* A new instance has no block kept: it reads the partial one back. */
static uint64_t write_fresh_instance(struct fx *f, const uint8_t *data, uint64_t off,
                                     st_writer wr)
{
    wal_storage *st = st_sole(f, true);
    assert_int_equal(wr(f, st, data, off, 5000), 0);
    off += 5000;
    expect_file(f, data, off, true);
    st->ops->destroy(st);
    return off;
}

static void test_posix_direct_io(void **state)
{
    struct fx *f = *state;
    uint8_t *data = direct_data();
    wal_storage *st = st_sole(f, true);
    struct iow w = {0};
    st->ops->create(st, 0, 0, iow_cb, &w);
    run_until(f->base, iow_done, &w);
    assert_int_equal(w.err, 0);
    /* Unaligned ends, exact blocks, and a write larger than the bounce
     * buffer, each read back at once and from the file. */
    size_t sizes[] = {1, 100, 4095, 4096, 4097, (3u << 19) + 5, 777, 8192};
    uint64_t off = 0;
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
        assert_int_equal(st_write(f, st, data, off, sizes[i]), 0);
        off += sizes[i];
        uint8_t *back = malloc(off);
        size_t got = 0;
        assert_int_equal(st->ops->pread(st, 0, 0, back, off, &got), 0);
        assert_true(got >= off);
        assert_memory_equal(back, data, off);
        free(back);
        expect_file(f, data, off, true);
    }
    /* A large aligned read is direct too: the file's pages stay out of the
     * page cache (where the buffered reads above put them: dropped first),
     * and the bytes past the end of the file are not read. */
    char path[128];
    seg_path(f, 0, path, sizeof path);
    int dropfd = open(path, O_RDONLY);
    assert_true(dropfd >= 0);
    assert_int_equal(posix_fadvise(dropfd, 0, 0, POSIX_FADV_DONTNEED), 0);
    close(dropfd);
    assert_int_equal(cached_pages(path), 0);
    uint8_t *big;
    assert_int_equal(posix_memalign((void **)&big, 4096, 4u << 20), 0);
    size_t got = 0;
    assert_int_equal(st->ops->pread(st, 0, 4096, big, 1u << 20, &got), 0);
    assert_int_equal(got, 1u << 20);
    assert_memory_equal(big, data + 4096, 1u << 20);
    assert_int_equal(cached_pages(path), 0);
    assert_int_equal(st->ops->pread(st, 0, 0, big, 4u << 20, &got), 0);
    assert_int_equal(got, (off + 4095) / 4096 * 4096);
    assert_memory_equal(big, data, off);
    free(big);
    st->ops->destroy(st);
    off = write_fresh_instance(f, data, off, st_write);
    /* Without direct I/O the same writes go through the page cache. */
    reset_dir(f);
    st = st_sole(f, false);
    memset(&w, 0, sizeof w);
    st->ops->create(st, 0, 0, iow_cb, &w);
    run_until(f->base, iow_done, &w);
    assert_int_equal(st_write(f, st, data, 0, 4097), 0);
    expect_file(f, data, 4097, false);
    st->ops->destroy(st);
    free(data);
}

/* A record whose last piece's CRC the caller gives (wal_appendv_known) is
 * the very record wal_appendv writes: reads verify it and recovery replays
 * it; a wrong CRC makes a record that reads as corrupt. */
static void test_appendv_known_crc(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal *w = NULL;
    p.w = &w;
    wal_opts o = opts_default(&p);
    w = open_ok(f, &o, 0, NULL, NULL, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    uint8_t head[7] = {1, 2, 3, 4, 5, 6, 7}, body[3000];
    for (size_t i = 0; i < sizeof body; i++)
        body[i] = (uint8_t)(i * 13);
    uint32_t lens[] = {0, 1, 21, 3000};
    wal_lsn lsns[5];
    for (int i = 0; i < 4; i++) {
        struct iovec iov[2] = {{head, sizeof head}, {body, lens[i]}};
        assert_int_equal(wal_appendv_known(w, 11, iov, 2, sk_crc32c(body, lens[i]), done_cb, &d,
                                           &lsns[i]),
                         0);
    }
    struct iovec bad[2] = {{head, sizeof head}, {body, 100}};
    assert_int_equal(wal_appendv_known(w, 11, bad, 2, sk_crc32c(body, 100) ^ 1, done_cb, &d,
                                       &lsns[4]),
                     0);
    wait_done(f->base, &d, 5);
    uint8_t buf[4096], type;
    uint32_t len;
    for (int i = 0; i < 4; i++) {
        assert_int_equal(wal_read_record(w, lsns[i], &type, buf, sizeof buf, &len), 0);
        assert_int_equal(len, sizeof head + lens[i]);
        assert_memory_equal(buf + sizeof head, body, lens[i]);
    }
    assert_int_equal(wal_read_record(w, lsns[4], &type, buf, sizeof buf, &len), SK_ERR_CORRUPT);
    wal_close(w);
    /* Recovery replays the four and cuts the log at the bad one. */
    struct rlog l = {0};
    w = open_ok(f, &o, 0, &l, NULL, NULL);
    size_t got = 0;
    for (size_t i = 0; i < l.n; i++)
        if (l.r[i].type == 11) {
            assert_int_equal(l.r[i].lsn, lsns[got]);
            got++;
        }
    assert_int_equal(got, 4);
    rlog_free(&l);
    wal_close(w);
}

/* Writes data[off, off+len) with write_placed, from a buffer laid out as
 * the WAL lays its own (the room around it scribbled on, as a backend may). */
static int st_write_placed(struct fx *f, wal_storage *st, const uint8_t *data, uint64_t off,
                           size_t len)
{
    size_t head = off % WAL_WRITE_ROOM;
    size_t cap = (head + len + WAL_WRITE_ROOM - 1) / WAL_WRITE_ROOM * WAL_WRITE_ROOM;
    void *mem = NULL;
    assert_int_equal(posix_memalign(&mem, WAL_WRITE_ROOM, cap), 0);
    memset(mem, 0xee, cap);
    memcpy((uint8_t *)mem + head, data + off, len);
    struct iow w = {0};
    st->ops->write_placed(st, 0, off, (uint8_t *)mem + head, len, iow_cb, &w);
    run_until(f->base, iow_done, &w);
    /* The buffer's own bytes are left as they were. */
    assert_memory_equal((uint8_t *)mem + head, data + off, len);
    free(mem);
    return w.err;
}

/* The WAL's buffers laid out for direct I/O are written in place: the
 * partial block before each comes from the kept block or the file, zeros
 * follow it, and the file holds exactly what a bounce write gives. */
static void test_posix_direct_io_placed(void **state)
{
    struct fx *f = *state;
    uint8_t *data = direct_data();
    for (int direct = 1; direct >= 0; direct--) {
        reset_dir(f);
        wal_storage *st = st_sole(f, direct);
        assert_non_null(st->ops->write_placed);
        struct iow w = {0};
        st->ops->create(st, 0, 0, iow_cb, &w);
        run_until(f->base, iow_done, &w);
        assert_int_equal(w.err, 0);
        size_t sizes[] = {1, 100, 4095, 4096, 4097, (3u << 19) + 5, 777, 8192};
        uint64_t off = 0;
        for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) {
            /* Every other write through the bounce path: the kept block is
             * shared by both. */
            int rc = i % 2 ? st_write(f, st, data, off, sizes[i])
                           : st_write_placed(f, st, data, off, sizes[i]);
            assert_int_equal(rc, 0);
            off += sizes[i];
            expect_file(f, data, off, direct);
        }
        st->ops->destroy(st);
        if (direct)
            write_fresh_instance(f, data, off, st_write_placed);
    }
    free(data);
}

/* Fault tests: record 0 durable first, then records 1..3 meet the fault. */
static void fault_case(struct fx *f, wal_faulty_ctl *ctl, int expect_err)
{
    wal_storage *st;
    wal *w = open_ok(f, &(wal_opts){.segment_bytes = 1 << 20, .max_pending_bytes = 1 << 20}, 0,
                     NULL, ctl, &st);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 0, &d, NULL), 0);
    wait_done(f->base, &d, 1);
    assert_int_equal(d.err[0], 0);
    ctl->hold = true;
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    wait_held(f->base, st, 1); /* the faulty write, in flight */
    assert_int_equal(append_i(w, 2, &d, NULL), 0);
    assert_int_equal(append_i(w, 3, &d, NULL), 0);
    spin(f->base);
    assert_int_equal(d.n, 1);
    wal_faulty_release(st, 0);
    wait_done(f->base, &d, 4);
    for (int i = 1; i < 4; i++)
        assert_int_equal(d.err[i], expect_err);
    assert_lsn_order(&d);
    assert_true(wal_failed(w));
    assert_int_equal(wal_pending_bytes(w), 0);
    assert_int_equal(append_i(w, 4, &d, NULL), SK_ERR_IO);
    spin(f->base);
    assert_int_equal(d.n, 4);
    assert_int_equal(ctl->writes, 2);
    ctl->hold = false;
    wal_close(w);
}

static void test_fault_write_eio(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.fail_write_at = 2};
    fault_case(f, &ctl, SK_ERR_IO);
    expect_records(f, 1, 0);
}

static void test_fault_sync_eio(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.fail_sync_at = 2, .err = SK_ERR_FENCED};
    fault_case(f, &ctl, SK_ERR_FENCED);
    /* Written but never synced: it may or may not be there after a crash;
     * here the page cache still has it. Whatever is there is whole. */
    wal_opts o = opts_default(NULL);
    struct rlog l = {0};
    wal *w = open_ok(f, &o, 0, &l, NULL, NULL);
    struct rec *u[8];
    size_t k = rlog_user(&l, u);
    assert_true(k == 1 || k == 2);
    for (size_t i = 0; i < k; i++)
        check_rec(u[i], (int)i);
    rlog_free(&l);
    wal_close(w);
}

static void test_fault_short_write(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.short_write_at = 2, .short_write_bytes = 15};
    fault_case(f, &ctl, SK_ERR_IO);
    char path[128];
    seg_path(f, 0, path, sizeof path);
    long before = file_size(path);
    wal_opts o = opts_default(NULL);
    o.no_preallocate = true;
    o.no_direct_io = true;
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    long cut = file_size(path);
    assert_true(cut < before);
    append_range(f, w, 1000, 1001, NULL);
    wal_close(w);
    expect_records(f, 1, 1);
}

/* The real backend meets a short write: a file size limit lets pwritev write
 * part of a commit, and the rest fails (EFBIG). */
static void test_posix_short_write(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    o.no_preallocate = true;
    o.no_direct_io = true;
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    append_range(f, w, 0, 3, NULL);
    wal_lsn end = wal_end_lsn(w);

    struct rlimit old, lim;
    assert_int_equal(getrlimit(RLIMIT_FSIZE, &old), 0);
    void (*oldsig)(int) = signal(SIGXFSZ, SIG_IGN);
    lim = old;
    lim.rlim_cur = (rlim_t)end + 20;
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &lim), 0);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 3, &d, NULL), 0);
    assert_int_equal(append_i(w, 4, &d, NULL), 0);
    wait_done(f->base, &d, 2);
    assert_int_equal(setrlimit(RLIMIT_FSIZE, &old), 0);
    signal(SIGXFSZ, oldsig);
    assert_int_equal(d.err[0], SK_ERR_IO);
    assert_int_equal(d.err[1], SK_ERR_IO);
    assert_true(wal_failed(w));
    wal_close(w);

    char path[128];
    seg_path(f, 0, path, sizeof path);
    assert_int_equal(file_size(path), (long)end + 20);
    expect_records(f, 3, 0);
    assert_int_equal(file_size(path), (long)end);
}

static void test_fault_create(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.fail_create_at = 1};
    wal_storage *st;
    wal_opts o = opts_default(NULL);
    wal *w = open_ok(f, &o, 0, NULL, &ctl, &st);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 0, &d, NULL), 0);
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    wait_done(f->base, &d, 2);
    assert_int_equal(d.err[0], SK_ERR_IO);
    assert_int_equal(d.err[1], SK_ERR_IO);
    assert_true(wal_failed(w));
    assert_int_equal(ctl.writes, 0);
    wal_close(w);
}

/* Completions of different operations arrive in other orders than issued. */
static void test_reordered_completions(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_faulty_ctl ctl = {0};
    wal_storage *st;
    wal_lsn lsns[80];
    wal *w = open_small(f, &p, &ctl, &st, NULL, 0);
    append_range(f, w, 0, 40, lsns);
    /* A fresh segment, so that the next appends need no create. */
    wal_roll(w);
    append_range(f, w, 40, 41, lsns);

    static struct dlog d;
    memset(&d, 0, sizeof d);
    ctl.hold = true;
    wal_trim(w, lsns[35]); /* removes segments, oldest first */
    assert_int_equal(append_i(w, 41, &d, NULL), 0);
    wait_held(f->base, st, 2);
    /* Removals run apart from writes, so either may arrive first. */
    int wi = strcmp(wal_faulty_held_kind(st, 0), "write") == 0 ? 0 : 1;
    assert_string_equal(wal_faulty_held_kind(st, wi), "write");
    assert_string_equal(wal_faulty_held_kind(st, 1 - wi), "remove");
    uint8_t buf[512], type;
    uint32_t len;
    /* Trimmed at once for readers, even before the file is gone. */
    assert_int_equal(wal_read_record(w, lsns[0], &type, buf, sizeof buf, &len), SK_ERR_NOENT);
    wal_faulty_release(st, wi); /* the write completes first */
    wait_done(f->base, &d, 1);
    assert_int_equal(d.err[0], 0);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.segments_removed, 0);
    wal_faulty_release(st, 0); /* then the remove */
    wait_removed(f->base, w, 1);
    wait_held(f->base, st, 1); /* the next remove, issued after the first */
    assert_string_equal(wal_faulty_held_kind(st, 0), "remove");

    /* A write issued while that remove is held completes before it. */
    assert_int_equal(append_i(w, 42, &d, NULL), 0);
    wait_held(f->base, st, 2);
    assert_string_equal(wal_faulty_held_kind(st, 1), "write");
    wal_faulty_release(st, 1);
    wait_done(f->base, &d, 2);
    ctl.hold = false;
    wal_faulty_release_all(st);
    wait_removed(f->base, w, 2);

    /* Delayed completions under a stream of appends and trims. */
    ctl.delay_ms = 2;
    for (int i = 43; i < 80; i++) {
        assert_int_equal(append_i(w, i, &d, &lsns[i]), 0);
        if (i % 10 == 0) {
            wal_trim(w, lsns[i - 15]);
            spin(f->base);
        }
    }
    wait_done(f->base, &d, 2 + 80 - 43);
    for (int i = 0; i < d.n; i++)
        assert_int_equal(d.err[i], 0);
    assert_lsn_order(&d);
    wal_close(w);

    struct rlog l = {0};
    struct pre p2 = {0};
    w = open_small(f, &p2, NULL, NULL, &l, 0);
    struct rec *u[128];
    size_t k = rlog_user(&l, u);
    assert_true(k > 0);
    check_rec(u[k - 1], 79);
    rlog_free(&l);
    wal_close(w);
}

static bool completions_reached(void *arg)
{
    void **a = arg;
    return ((wal_faulty_ctl *)a[0])->completions >= (int)(intptr_t)a[1];
}

/* A failed remove stops trimming (no retry storm) until the next wal_trim. */
static void test_fault_remove_retry(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_faulty_ctl ctl = {.fail_remove_at = 1};
    wal_storage *st;
    wal_lsn lsns[40];
    wal *w = open_small(f, &p, &ctl, &st, NULL, 0);
    append_range(f, w, 0, 40, lsns);
    int nseg = p.calls;
    wal_trim(w, UINT64_MAX);
    void *a[2] = {&ctl, (void *)(intptr_t)(ctl.completions + 1)};
    run_until(f->base, completions_reached, a);
    spin(f->base);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.segments_removed, 0);
    assert_int_equal(ctl.removes, 1);
    assert_int_equal(count_segment_files(f), nseg);
    uint8_t buf[512], type;
    uint32_t len;
    assert_int_equal(wal_read_record(w, lsns[0], &type, buf, sizeof buf, &len), SK_ERR_NOENT);
    wal_trim(w, UINT64_MAX);
    wait_removed(f->base, w, nseg - 1);
    assert_int_equal(count_segment_files(f), 1);
    wal_close(w);
}

static void test_staging_cap(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.hold = true};
    wal_storage *st;
    wal_opts o = opts_default(NULL);
    o.max_pending_bytes = 4096;
    wal *w = open_ok(f, &o, 0, NULL, &ctl, &st);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    uint8_t big[1000];
    memset(big, 7, sizeof big);
    int accepted = 0;
    for (;;) {
        wal_lsn end = wal_end_lsn(w);
        int rc = wal_append(w, 9, big, sizeof big, done_cb, &d, NULL);
        if (rc == SK_ERR_AGAIN) {
            assert_int_equal(wal_end_lsn(w), end); /* nothing appended */
            break;
        }
        assert_int_equal(rc, 0);
        accepted++;
    }
    assert_int_equal(accepted, 4); /* 40 + 9 + 4 * 1009 <= 4096 */
    assert_true(wal_pending_bytes(w) <= 4096);
    wait_held(f->base, st, 1);
    assert_string_equal(wal_faulty_held_kind(st, 0), "create");
    assert_int_equal(d.n, 0);
    wal_faulty_release_all(st);
    wait_held(f->base, st, 1);
    assert_string_equal(wal_faulty_held_kind(st, 0), "write");
    wal_faulty_release_all(st);
    wait_done(f->base, &d, 4);
    assert_int_equal(wal_pending_bytes(w), 0);

    /* With nothing pending, even a record over the cap goes in. */
    uint8_t *huge = calloc(1, 10000);
    assert_int_equal(wal_append(w, 9, huge, 10000, done_cb, &d, NULL), 0);
    assert_int_equal(wal_append(w, 9, big, 10, done_cb, &d, NULL), SK_ERR_AGAIN);
    free(huge);
    wait_held(f->base, st, 1);
    wal_faulty_release_all(st);
    wait_done(f->base, &d, 5);

    /* Invalid records. */
    assert_int_equal(wal_append(w, 0, big, 10, NULL, NULL, NULL), SK_ERR_INVAL);
    struct iovec iov = {.iov_base = big, .iov_len = (size_t)WAL_MAX_RECORD + 1};
    assert_int_equal(wal_appendv(w, 9, &iov, 1, NULL, NULL, NULL), SK_ERR_INVAL);
    ctl.hold = false;
    wal_close(w);
}

static void test_appendv_pieces(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    uint8_t whole[300];
    payload_of(3, whole, sizeof whole);
    struct iovec iov[3] = {{whole, 1}, {whole + 1, 0}, {whole + 1, 299}};
    wal_lsn lsn;
    assert_int_equal(wal_appendv(w, 12, iov, 3, done_cb, &d, &lsn), 0);
    wait_done(f->base, &d, 1);
    uint8_t buf[300], type;
    uint32_t len;
    assert_int_equal(wal_read_record(w, lsn, &type, buf, sizeof buf, &len), 0);
    assert_int_equal(type, 12);
    assert_int_equal(len, 300);
    assert_memory_equal(buf, whole, 300);
    wal_close(w);
}

static int preamble_fails_once(void *arg, wal_lsn start, uint8_t **buf, uint32_t *len)
{
    int *calls = arg;
    if ((*calls)++ == 0)
        return SK_ERR_NOMEM;
    *buf = malloc(1);
    **buf = 'p';
    *len = 1;
    return 0;
}

/* A preamble that cannot be built fails the append and changes nothing. */
static void test_preamble_error(void **state)
{
    struct fx *f = *state;
    int calls = 0;
    wal_opts o = opts_default(NULL);
    o.preamble = preamble_fails_once;
    o.preamble_arg = &calls;
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    assert_int_equal(append_i(w, 0, NULL, NULL), SK_ERR_NOMEM);
    assert_int_equal(wal_end_lsn(w), 0);
    assert_int_equal(wal_pending_bytes(w), 0);
    wal_lsn *segs;
    size_t n;
    assert_int_equal(wal_segments_snapshot(w, &segs, &n), 0);
    assert_int_equal(n, 0);
    free(segs);
    append_range(f, w, 0, 1, NULL);
    assert_int_equal(calls, 2);
    wal_close(w);
    expect_records(f, 1, 0);
}

/* A crash while a new segment was being started leaves its file without a
 * complete header, or without a complete preamble: it is reused. */
static void test_unfinished_last_segment(void **state)
{
    struct fx *f = *state;
    struct pre p = {0};
    wal_lsn lsns[40];
    wal *w = open_small(f, &p, NULL, NULL, NULL, 0);
    append_range(f, w, 0, 40, lsns);
    wal_close(w);
    int nseg = p.calls;
    wal_lsn lastseg = p.starts[nseg - 1];
    int in_last = 0;
    for (int i = 0; i < 40; i++)
        in_last += lsns[i] >= lastseg;
    char path[128];
    seg_path(f, lastseg, path, sizeof path);
    size_t blen;
    uint8_t *img = read_file(path, &blen);

    size_t cuts[] = {0, 20, WAL_SEGMENT_HEADER, WAL_SEGMENT_HEADER + 5};
    for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
        write_file(path, img, cuts[c]);
        struct rlog l = {0};
        struct pre p2 = {0};
        w = open_small(f, &p2, NULL, NULL, &l, 0);
        struct rec *u[64];
        assert_int_equal(rlog_user(&l, u), (size_t)(40 - in_last));
        rlog_free(&l);
        assert_int_equal(wal_end_lsn(w), lastseg);
        assert_int_equal(file_size(path), 0);
        /* The next append rewrites the segment from its start; a roll asked
         * for now is satisfied by that segment. */
        wal_roll(w);
        append_range(f, w, 40 - in_last, 40, NULL);
        assert_int_equal(p2.calls, 1);
        assert_int_equal(p2.starts[0], lastseg);
        wal_close(w);
        w = open_small(f, &p2, NULL, NULL, &l, 0);
        assert_int_equal(rlog_user(&l, u), 40);
        for (int i = 0; i < 40; i++)
            check_rec(u[i], i);
        rlog_free(&l);
        wal_close(w);
    }
    free(img);
}

/* ---- transient storage errors: the records stay queued ---- */

/* Record 0 durable, then records 1..3 meet transient failures (a timeout,
 * a connection drop, a write verifier that changed: the bytes may or may not
 * be there) and go out again until the volume takes them. */
static void transient_case(struct fx *f, wal_faulty_ctl *ctl, int retries)
{
    wal_storage *st;
    wal *w = open_ok(f, &(wal_opts){.segment_bytes = 1 << 20, .max_pending_bytes = 1 << 20}, 0,
                     NULL, ctl, &st);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 0, &d, NULL), 0);
    wait_done(f->base, &d, 1);
    for (int i = 1; i < 4; i++)
        assert_int_equal(append_i(w, i, &d, NULL), 0);
    wait_done(f->base, &d, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(d.err[i], 0);
    assert_lsn_order(&d);
    assert_false(wal_failed(w));
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.retries, (uint64_t)retries);
    assert_false(s.unavailable);
    assert_int_equal(s.outage_ms, 0);
    wal_close(w);
    expect_records(f, 4, 0);
}

static void test_transient_write_retried(void **state)
{
    wal_faulty_ctl ctl = {.fail_write_at = 2, .fail_write_n = 3, .err = SK_ERR_TIMEOUT,
                          .delay_ms = 2};
    transient_case(*state, &ctl, 3);
}

/* Written, not committed, then the server restarted (new verifier): the
 * same bytes go to the same place again. */
static void test_transient_verifier_change(void **state)
{
    wal_faulty_ctl ctl = {.fail_sync_at = 2, .err = SK_ERR_TIMEOUT};
    transient_case(*state, &ctl, 1);
}

static void test_transient_short_write(void **state)
{
    wal_faulty_ctl ctl = {.short_write_at = 2, .short_write_bytes = 15, .err = SK_ERR_AGAIN};
    transient_case(*state, &ctl, 1);
}

static void test_transient_create(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.fail_create_at = 1, .fail_create_n = 2, .err = SK_ERR_TIMEOUT};
    wal_storage *st;
    wal *w = open_ok(f, &(wal_opts){0}, 0, NULL, &ctl, &st);
    append_range(f, w, 0, 3, NULL);
    assert_int_equal(ctl.creates, 3);
    assert_false(wal_failed(w));
    wal_close(w);
    expect_records(f, 3, 0);
}

static bool unavailable(void *arg)
{
    wal_stats s;
    wal_get_stats(arg, &s);
    return s.unavailable;
}

/* A long outage: nothing fails, memory stays within the staging cap (the
 * caller sees SK_ERR_AGAIN), the WAL reports itself unavailable after
 * io_timeout_ms, and everything goes through once the volume is back. */
static void test_outage_keeps_records(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.fail_write_at = 2, .fail_write_n = -1, .err = SK_ERR_TIMEOUT};
    wal_storage *st;
    wal_opts o = opts_default(NULL);
    o.max_pending_bytes = 8192;
    o.io_timeout_ms = 150;
    wal *w = open_ok(f, &o, 0, NULL, &ctl, &st);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 0, &d, NULL), 0);
    wait_done(f->base, &d, 1);
    int n = 1;
    while (append_i(w, n, &d, NULL) == 0)
        n++;
    assert_int_equal(append_i(w, n, &d, NULL), SK_ERR_AGAIN);
    assert_true(wal_pending_bytes(w) <= 8192);
    run_until(f->base, unavailable, w);
    assert_int_equal(d.n, 1);
    assert_false(wal_failed(w));
    wal_stats s;
    wal_get_stats(w, &s);
    assert_true(s.retries >= 3);
    assert_true(s.outage_ms >= 150);
    ctl.fail_write_at = 0; /* the volume is back */
    wait_done(f->base, &d, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(d.err[i], 0);
    assert_lsn_order(&d);
    assert_false(unavailable(w));
    wal_close(w);
    expect_records(f, n, 0);
}

/* wal_close gives up on records the volume never takes, after
 * io_timeout_ms, and fails them instead of waiting forever. */
static void test_close_gives_up(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.fail_write_at = 2, .fail_write_n = -1, .err = SK_ERR_TIMEOUT};
    wal_opts o = opts_default(NULL);
    o.io_timeout_ms = 100;
    wal *w = open_ok(f, &o, 0, NULL, &ctl, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    append_range(f, w, 0, 1, NULL);
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    spin(f->base);
    int64_t t0 = sk_mono_ms();
    wal_close(w);
    assert_true(sk_mono_ms() - t0 >= 100);
    assert_int_equal(d.n, 1);
    assert_true(d.err[0] == SK_ERR_TIMEOUT || d.err[0] == SK_ERR_CLOSED);
    /* Not released: the next owner cannot know that nothing is in flight,
     * but this process's lock of the directory proves it gone. */
    expect_records(f, 1, 0);
}

/* ---- ownership, leases and fencing ---- */

static void test_lease_lapse_holds_acks(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.no_lock = true};
    wal_storage *st;
    wal_opts o = opts_default(NULL);
    o.lease_ms = 200;
    wal *w = open_ok(f, &o, 0, NULL, &ctl, &st);
    append_range(f, w, 0, 1, NULL);

    /* Renewals fail from now on; a write completes after the lease ran
     * out: landed, not acknowledged. */
    ctl.fail_renew_at = ctl.renews + 1;
    ctl.fail_renew_n = -1;
    ctl.hold = true;
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 1, &d, NULL), 0);
    wait_held(f->base, st, 1);
    struct timespec ts = {0, 300 * 1000000L};
    nanosleep(&ts, NULL);
    wal_faulty_release_all(st);
    for (int i = 0; i < 20; i++)
        spin(f->base);
    assert_int_equal(d.n, 0);
    /* An append now is not even written while there is no lease. */
    int writes = ctl.writes;
    assert_int_equal(append_i(w, 2, &d, NULL), 0);
    for (int i = 0; i < 20; i++)
        spin(f->base);
    assert_int_equal(ctl.writes, writes);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.lease_lapses, 1);
    /* Renewals work again: both go through, in order. */
    ctl.fail_renew_at = 0;
    ctl.hold = false;
    wait_done(f->base, &d, 2);
    assert_int_equal(d.err[0], 0);
    assert_int_equal(d.err[1], 0);
    assert_lsn_order(&d);
    wal_close(w);
    expect_records(f, 3, 0);
}

static wal *open_base(struct fx *f, struct event_base *base, const wal_opts *o,
                      wal_faulty_ctl *ctl, struct rlog *l, int *err, char *why, size_t wl)
{
    int e = 0;
    wal_storage *st = wal_posix_new(base, f->dir, &e);
    assert_non_null(st);
    st = wal_faulty_new(base, st, ctl);
    return wal_open(base, st, o, 0, l ? replay_collect : NULL, l, err, why, wl);
}

/* Two processes' worth of WALs on one directory, as on a shared volume
 * without locks: the second is refused while the first's lease is fresh,
 * takes over once it ran out (bumping the epoch and waiting), and the first
 * then acknowledges nothing more. */
static void test_fencing_takeover(void **state)
{
    struct fx *f = *state;
    struct event_base *b1 = f->base, *b2 = event_base_new();
    wal_faulty_ctl c1 = {.no_lock = true}, c2 = {.no_lock = true};
    wal_opts o = opts_default(NULL);
    o.lease_ms = 300;
    int err = 0;
    char why[512] = "";
    wal *w1 = open_base(f, b1, &o, &c1, NULL, &err, why, sizeof why);
    assert_non_null(w1);
    uint64_t e1 = wal_owner_epoch(w1);
    append_range(f, w1, 0, 5, NULL);

    wal *w2 = open_base(f, b2, &o, &c2, NULL, &err, why, sizeof why);
    assert_null(w2);
    assert_int_equal(err, SK_ERR_FENCED);
    assert_non_null(strstr(why, "another skiffd uses this WAL"));

    /* w1's loop stops (a paused or partitioned process): no renewals. */
    struct timespec ts = {0, 350 * 1000000L};
    nanosleep(&ts, NULL);
    int64_t t0 = sk_mono_ms();
    struct rlog l = {0};
    w2 = open_base(f, b2, &o, &c2, &l, &err, why, sizeof why);
    if (!w2)
        fail_msg("takeover: %s", why);
    assert_true(sk_mono_ms() - t0 >= 360); /* 1.2 leases */
    assert_int_equal(wal_owner_epoch(w2), e1 + 1);
    struct rec *u[16];
    assert_int_equal(rlog_user(&l, u), 5);
    rlog_free(&l);

    /* w1 wakes up: its lease ran out, its next renewal finds epoch + 1. */
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w1, 100, &d, NULL), 0);
    wait_done(b1, &d, 1);
    assert_int_equal(d.err[0], SK_ERR_FENCED);
    assert_true(wal_failed(w1));
    assert_int_equal(wal_fail_error(w1), SK_ERR_FENCED);
    assert_int_equal(append_i(w1, 101, &d, NULL), SK_ERR_IO);
    wal_close(w1);

    struct fx f2 = *f;
    f2.base = b2;
    append_range(&f2, w2, 5, 8, NULL);
    wal_close(w2);
    event_base_free(b2);
    expect_records(f, 8, 0);
}

/* A cluster node's membership lease gates writes and acknowledgements like
 * the WAL's own lease: past the deadline nothing is acknowledged; moving the
 * deadline later lets the waiting records through, in order. */
/* Records 0 and 1 acknowledged, then the membership deadline passes and
 * records 2 and 3 (logged in d) wait. */
static wal *two_waiting(struct fx *f, struct dlog *d)
{
    wal_opts o = opts_default(NULL);
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    wal_set_ack_deadline(w, wal_clock_us() + 10 * 1000000LL);
    append_range(f, w, 0, 2, NULL);
    wal_set_ack_deadline(w, wal_clock_us() - 1);
    memset(d, 0, sizeof *d);
    assert_int_equal(append_i(w, 2, d, NULL), 0);
    assert_int_equal(append_i(w, 3, d, NULL), 0);
    for (int i = 0; i < 50; i++)
        spin(f->base);
    assert_int_equal(d->n, 0);
    return w;
}

static void test_ack_deadline(void **state)
{
    struct fx *f = *state;
    static struct dlog d;
    wal *w = two_waiting(f, &d);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.lease_lapses, 1);

    wal_set_ack_deadline(w, wal_clock_us() + 10 * 1000000LL);
    wait_done(f->base, &d, 2);
    assert_int_equal(d.err[0], 0);
    assert_int_equal(d.err[1], 0);
    assert_lsn_order(&d);
    wal_set_ack_deadline(w, 0);
    append_range(f, w, 4, 5, NULL);
    wal_close(w);
    expect_records(f, 5, 0);
}

/* An owner whose membership is gone abandons its WAL: what waits fails at
 * once with SK_ERR_CLOSED instead of at the close, later appends fail, and
 * what was durable before stays. */
static void test_abandon(void **state)
{
    struct fx *f = *state;
    static struct dlog d;
    wal *w = two_waiting(f, &d);
    wal_abandon(w);
    assert_int_equal(d.n, 2);
    assert_int_equal(d.err[0], SK_ERR_CLOSED);
    assert_int_equal(d.err[1], SK_ERR_CLOSED);
    assert_true(wal_failed(w));
    assert_int_not_equal(append_i(w, 4, &d, NULL), 0);
    wal_abandon(w); /* twice is harmless */
    assert_int_equal(d.n, 2);
    wal_close(w);
    expect_records(f, 2, 0);
}

/* A takeover with proof from outside (a cluster saw the owner's lease
 * expire) neither waits out the old lease nor stops at the directory lock
 * the old process may still hold; the old owner is fenced all the same. */
static void test_takeover_with_proof(void **state)
{
    struct fx *f = *state;
    struct event_base *b2 = event_base_new();
    wal_opts o = opts_default(NULL);
    o.lease_ms = 5000;
    int err = 0;
    char why[512] = "";
    wal_faulty_ctl c1 = {0}, c2 = {0};
    wal *w1 = open_base(f, f->base, &o, &c1, NULL, &err, why, sizeof why);
    assert_non_null(w1);
    uint64_t e1 = wal_owner_epoch(w1);
    append_range(f, w1, 0, 4, NULL);

    /* Without proof the directory lock held by w1 refuses a second owner. */
    assert_null(open_base(f, b2, &o, &c2, NULL, &err, why, sizeof why));
    assert_int_equal(err, SK_ERR_FENCED);
    wal_opts o2 = o;
    o2.takeover_proof = "its membership lease expired";
    int64_t t0 = sk_mono_ms();
    struct rlog l = {0};
    wal *w2 = open_base(f, b2, &o2, &c2, &l, &err, why, sizeof why);
    if (!w2)
        fail_msg("takeover: %s", why);
    assert_true(sk_mono_ms() - t0 < 2000);
    assert_int_equal(wal_owner_epoch(w2), e1 + 1);
    struct rec *u[16];
    assert_int_equal(rlog_user(&l, u), 4);
    rlog_free(&l);

    /* The old owner, past its membership deadline, writes nothing more. */
    wal_set_ack_deadline(w1, wal_clock_us() - 1);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w1, 100, &d, NULL), 0);
    for (int i = 0; i < 30; i++)
        spin(f->base);
    assert_int_equal(d.n, 0);
    wal_stats s;
    wal_get_stats(w1, &s);
    assert_int_equal(s.bytes_written > 0, 1);
    uint64_t written = s.bytes_written;
    for (int i = 0; i < 30; i++)
        spin(f->base);
    wal_get_stats(w1, &s);
    assert_int_equal(s.bytes_written, written);
    wal_close(w1);

    struct fx f2 = *f;
    f2.base = b2;
    append_range(&f2, w2, 4, 6, NULL);
    wal_close(w2);
    event_base_free(b2);
    expect_records(f, 6, 0);
}

/* Another node reads records of a WAL it does not own, at LSNs it was
 * given, including in segments created after it opened the reader. */
static void test_reader(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    o.segment_bytes = 64 << 10;
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    wal_lsn lsns[40];
    append_range(f, w, 0, 10, lsns);
    int e = 0;
    char why[256] = "";
    wal_storage *st = wal_posix_new(f->base, f->dir, &e);
    assert_non_null(st);
    wal_reader *r = wal_reader_open(st, why, sizeof why);
    assert_non_null(r);
    append_range(f, w, 10, 40, lsns);
    uint8_t *buf = malloc(256 << 10);
    for (int i = 0; i < 40; i++) {
        uint8_t type;
        uint32_t len;
        assert_int_equal(wal_reader_read(r, lsns[i], &type, buf, 256 << 10, &len), 0);
        struct rec rc = {lsns[i], type, len, buf};
        check_rec(&rc, i);
    }
    uint8_t type;
    uint32_t len;
    /* A position inside a record is no record. */
    assert_int_not_equal(wal_reader_read(r, lsns[3] + 1, &type, buf, 256 << 10, &len), 0);
    /* A payload bigger than the buffer says how big it is. */
    assert_int_equal(wal_reader_read(r, lsns[5], &type, buf, 1, &len), SK_ERR_NOMEM);
    assert_int_equal(len, plen_of(5));
    free(buf);
    wal_reader_close(r);
    wal_close(w);
}

/* A segment whose header names an older epoch than a segment before it was
 * created late by a fenced owner: recovery removes it. One of a newer epoch
 * than the claimed one means the owner files were tampered with. */
static void put_segment(struct fx *f, wal_lsn seg, uint64_t epoch)
{
    uint8_t h[WAL_SEGMENT_HEADER + WAL_RECORD_HEADER];
    memset(h, 0, sizeof h);
    memcpy(h, "SKIFFWAL", 8);
    h[8] = 1;
    h[12] = 7;
    for (int i = 0; i < 8; i++) {
        h[16 + i] = (uint8_t)(epoch >> (8 * i));
        h[24 + i] = (uint8_t)(seg >> (8 * i));
    }
    uint32_t c = sk_crc32c(h, 36);
    for (int i = 0; i < 4; i++)
        h[36 + i] = (uint8_t)(c >> (8 * i));
    /* An empty preamble: CRC of lsn || type. */
    uint8_t pre[9];
    wal_lsn lsn = seg + WAL_SEGMENT_HEADER;
    for (int i = 0; i < 8; i++)
        pre[i] = (uint8_t)(lsn >> (8 * i));
    pre[8] = WAL_T_PREAMBLE;
    c = sk_crc32c(pre, 9);
    for (int i = 0; i < 4; i++)
        h[WAL_SEGMENT_HEADER + 4 + i] = (uint8_t)(c >> (8 * i));
    h[WAL_SEGMENT_HEADER + 8] = WAL_T_PREAMBLE;
    char path[128];
    seg_path(f, seg, path, sizeof path);
    write_file(path, h, sizeof h);
}

static void test_stale_epoch_segment(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    uint64_t e1 = wal_owner_epoch(w);
    append_range(f, w, 0, 3, NULL);
    wal_close(w);
    w = open_ok(f, &o, 0, NULL, NULL, NULL);
    assert_int_equal(wal_owner_epoch(w), e1 + 1);
    append_range(f, w, 3, 6, NULL);
    wal_lsn end = wal_end_lsn(w);
    wal_close(w);
    assert_int_equal(count_segment_files(f), 2);

    put_segment(f, end, e1); /* the old owner's late create */
    w = open_ok(f, &o, 0, NULL, NULL, NULL);
    assert_int_equal(wal_end_lsn(w), end);
    wal_close(w);
    assert_int_equal(count_segment_files(f), 2);
    expect_records(f, 6, 0);

    put_segment(f, end, 1000);
    int err = 0;
    char why[512] = "";
    assert_null(open_ex(f, &o, 0, NULL, NULL, NULL, &err, why, sizeof why));
    assert_int_equal(err, SK_ERR_CORRUPT);
    assert_non_null(strstr(why, "newer than the epoch"));
}

/* Locks: the directory's (POSIX on a local disk: proof enough to take over
 * at once) and the caller's local lock file (a restart on the same data
 * directory), each refusing a second live user. */
static void test_locks(void **state)
{
    struct fx *f = *state;
    wal_opts o = opts_default(NULL);
    o.lease_ms = 60000;
    wal *w1 = open_ok(f, &o, 0, NULL, NULL, NULL);
    int err = 0;
    char why[512] = "";
    assert_null(open_ex(f, &o, 0, NULL, NULL, NULL, &err, why, sizeof why));
    assert_int_equal(err, SK_ERR_FENCED);
    assert_non_null(strstr(why, "lock of this WAL's directory"));
    wal_close(w1);

    char lock[128];
    snprintf(lock, sizeof lock, "%s.lock", f->dir);
    o.local_lock_path = lock;
    wal_faulty_ctl c1 = {.no_lock = true}, c2 = {.no_lock = true};
    w1 = open_ok(f, &o, 0, NULL, &c1, NULL);
    assert_null(open_ex(f, &o, 0, NULL, &c2, NULL, &err, why, sizeof why));
    assert_int_equal(err, SK_ERR_FENCED);
    assert_non_null(strstr(why, "holds the lock file"));
    wal_close(w1);
    /* Released at close: the next owner starts at once. */
    int64_t t0 = sk_mono_ms();
    w1 = open_ok(f, &o, 0, NULL, &c2, NULL);
    assert_true(sk_mono_ms() - t0 < 30000);
    wal_close(w1);
    unlink(lock);
}

/* A process that holds the local lock file dies without closing (SIGKILL):
 * a restart with the same lock file takes over at once, a process without
 * it has to wait for the lease. */
static void test_restart_after_kill(void **state)
{
    struct fx *f = *state;
    char lock[128];
    snprintf(lock, sizeof lock, "%s.lock", f->dir);
    wal_opts o = opts_default(NULL);
    o.lease_ms = 60000;
    o.local_lock_path = lock;
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        struct event_base *base = event_base_new();
        wal_faulty_ctl c = {.no_lock = true};
        int e = 0;
        char why[256];
        wal_storage *st = wal_faulty_new(base, wal_posix_new(base, f->dir, &e), &c);
        wal *w = wal_open(base, st, &o, 0, NULL, NULL, &e, why, sizeof why);
        struct fx cf = {.base = base};
        if (w)
            append_range(&cf, w, 0, 4, NULL);
        kill(getpid(), SIGKILL);
        _exit(1);
    }
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFSIGNALED(status));

    wal_faulty_ctl c = {.no_lock = true};
    int err = 0;
    char why[512] = "";
    wal_opts other = o;
    other.local_lock_path = NULL;
    assert_null(open_ex(f, &other, 0, NULL, &c, NULL, &err, why, sizeof why));
    assert_int_equal(err, SK_ERR_FENCED);
    int64_t t0 = sk_mono_ms();
    struct rlog l = {0};
    wal *w = open_ok(f, &o, 0, &l, &c, NULL);
    assert_true(sk_mono_ms() - t0 < 5000);
    struct rec *u[8];
    assert_int_equal(rlog_user(&l, u), 4);
    rlog_free(&l);
    wal_close(w);
    unlink(lock);
}

static int replay_slowly(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *p, uint32_t len)
{
    (void)arg;
    (void)lsn;
    (void)type;
    (void)p;
    (void)len;
    struct timespec ts = {0, 30 * 1000000L};
    nanosleep(&ts, NULL);
    return 0;
}

/* A recovery longer than the lease renews it as it goes: the WAL is not up
 * for takeover while it is being read, and serves at once afterwards. */
static void test_long_recovery_keeps_lease(void **state)
{
    struct fx *f = *state;
    wal_faulty_ctl ctl = {.no_lock = true};
    wal_opts o = opts_default(NULL);
    o.lease_ms = 120;
    wal *w = open_ok(f, &o, 0, NULL, &ctl, NULL);
    append_range(f, w, 0, 12, NULL);
    wal_close(w);
    int e = 0;
    wal_storage *st = wal_faulty_new(f->base, wal_posix_new(f->base, f->dir, &e), &ctl);
    char why[256] = "";
    w = wal_open(f->base, st, &o, 0, replay_slowly, NULL, &e, why, sizeof why);
    assert_non_null(w);
    append_range(f, w, 12, 13, NULL);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_int_equal(s.lease_lapses, 0);
    wal_close(w);
}

static void test_storage_url(void **state)
{
    struct fx *f = *state;
    char why[256] = "", url[128];
    snprintf(url, sizeof url, "file://%s/abs", f->dir);
    wal_storage *st = wal_storage_open(f->base, url, why, sizeof why);
    assert_non_null(st);
    assert_string_equal(st->ops->name, "posix");
    st->ops->destroy(st);
    struct stat sb;
    char path[128];
    snprintf(path, sizeof path, "%s/abs", f->dir);
    assert_int_equal(stat(path, &sb), 0);

    char cwd[512];
    assert_non_null(getcwd(cwd, sizeof cwd));
    assert_int_equal(chdir(f->dir), 0);
    st = wal_storage_open(f->base, "file://rel/dir", why, sizeof why);
    assert_non_null(st);
    st->ops->destroy(st);
    assert_int_equal(chdir(cwd), 0);
    snprintf(path, sizeof path, "%s/rel/dir", f->dir);
    assert_int_equal(stat(path, &sb), 0);

    assert_null(wal_storage_open(f->base, "s3://bucket/wal", why, sizeof why));
    assert_non_null(strstr(why, "unsupported WAL URL scheme"));
    /* nfs:// URLs are checked before anything connects. */
    assert_null(wal_storage_open(f->base, "nfs://127.0.0.1/export/wal?version=4", why,
                                 sizeof why));
    assert_non_null(strstr(why, "use version=3"));
    assert_null(wal_storage_open(f->base, "nfs://127.0.0.1/export/wal?version=3&nfsprt=1", why,
                                 sizeof why));
    assert_non_null(strstr(why, "unknown parameter 'nfsprt'"));
    assert_null(wal_storage_open(f->base, "nfs://127.0.0.1/export?timeo=x", why, sizeof why));
    assert_non_null(strstr(why, "timeo"));
    assert_null(wal_storage_open(f->base, "nfs:///export", why, sizeof why));
    assert_non_null(strstr(why, "no host"));
    assert_null(wal_storage_open(f->base, "/plain/path", why, sizeof why));
    assert_non_null(strstr(why, "no scheme"));
    assert_null(wal_storage_open(f->base, "file://", why, sizeof why));

    uint64_t v;
    assert_true(wal_segment_parse("00000000000000001234.wal", &v));
    assert_int_equal(v, 1234);
    assert_false(wal_segment_parse("0000000000000001234.wal", &v));
    assert_false(wal_segment_parse("00000000000000001234.wal.tmp", &v));
    assert_false(wal_segment_parse("99999999999999999999.wal", &v));
}

/* ---- measurement (printed, never asserted) ----
 * WAL_BENCH_MS: duration per configuration (0 skips), WAL_BENCH_WINDOW: a
 * closed loop with that many records in flight instead of the max rate. */

struct bench {
    wal *w;
    struct event *ev;
    uint8_t payload[1024];
    uint64_t done, commits_seen;
    int64_t lat[65536];
    int nlat;
    int window; /* 0: appends at max rate; else that many records in flight */
    bool stop;
};

static void bench_done(void *arg, int err, wal_lsn lsn)
{
    (void)lsn;
    struct bench *b = arg;
    assert_int_equal(err, 0);
    b->done++;
    wal_stats s;
    wal_get_stats(b->w, &s);
    if (s.commits != b->commits_seen) {
        b->commits_seen = s.commits;
        if (b->nlat < 65536)
            b->lat[b->nlat++] = s.last_commit_us;
    }
    /* Closed loop: each acknowledged record lets its producer send the next. */
    if (b->window && !b->stop)
        wal_append(b->w, 9, b->payload, sizeof b->payload, bench_done, b, NULL);
}

/* Each loop turn appends a burst, as connections would, until the staging
 * cap pushes back. */
static void bench_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct bench *b = arg;
    if (b->stop)
        return;
    for (int i = 0; i < 64; i++)
        if (wal_append(b->w, 9, b->payload, sizeof b->payload, bench_done, b, NULL) != 0)
            break;
    struct timeval zero = {0, 0};
    event_add(b->ev, &zero); /* next loop turn, after IO completions */
}

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return x < y ? -1 : x > y;
}

enum bench_mode { BENCH_PREALLOC, BENCH_APPEND, BENCH_RECYCLED, BENCH_RECYCLED_BUFFERED };
static const char *const bench_mode_name[] = {"preallocated", "appending", "recycled",
                                              "recycled, page cache"};

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* Fills and trims segments until the WAL has spares to reuse. */
static void bench_make_spares(struct fx *f, wal *w, struct bench *b)
{
    wal_stats s;
    wal_get_stats(w, &s);
    uint64_t removed = s.segments_removed;
    /* 12 MiB in 1 MiB steps (the staging cap is 4 MiB), trimming as we go. */
    for (int step = 0; step < 12; step++) {
        static struct dlog d;
        memset(&d, 0, sizeof d);
        wal_lsn last = 0;
        for (int i = 0; i < 1024; i++)
            assert_int_equal(wal_append(w, 9, b->payload, sizeof b->payload, done_cb, &d, &last), 0);
        wait_done(f->base, &d, 1024);
        wal_trim(w, last);
    }
    wait_removed(f->base, w, (int)removed + 2);
}

static void bench_run(struct fx *f, enum bench_mode mode, int window)
{
    reset_dir(f);
    bool recycled = mode == BENCH_RECYCLED || mode == BENCH_RECYCLED_BUFFERED;
    wal_opts o = {.segment_bytes = recycled ? 4 << 20 : 64 << 20,
                  .max_pending_bytes = 4 << 20, .no_preallocate = mode == BENCH_APPEND,
                  .no_direct_io = mode == BENCH_RECYCLED_BUFFERED};
    wal *w = open_ok(f, &o, 0, NULL, NULL, NULL);
    struct bench *b = calloc(1, sizeof *b);
    b->w = w;
    b->ev = event_new(f->base, -1, 0, bench_turn, b);
    b->window = window;
    if (recycled)
        bench_make_spares(f, w, b);
    const char *env = getenv("WAL_BENCH_MS");
    /* Short by default: unit runs should not write gigabytes. */
    int64_t ms = env ? atoi(env) : 200;
    /* The first segment is created before the clock starts. */
    append_range(f, w, 0, 1, NULL);
    wal_stats s0;
    wal_get_stats(w, &s0);
    double cpu0 = cpu_seconds();
    int64_t t0 = sk_mono_us();
    struct timeval zero = {0, 0};
    if (window)
        for (int i = 0; i < window; i++)
            wal_append(w, 9, b->payload, sizeof b->payload, bench_done, b, NULL);
    else
        event_add(b->ev, &zero);
    while (sk_mono_us() - t0 < ms * 1000)
        event_base_loop(f->base, EVLOOP_ONCE);
    b->stop = true;
    uint64_t done = b->done;
    double secs = (double)(sk_mono_us() - t0) / 1e6;
    double cpu = cpu_seconds() - cpu0;
    wal_stats s;
    wal_get_stats(w, &s);
    wal_close(w);
    event_free(b->ev);
    uint64_t commits = s.commits - s0.commits;
    qsort(b->lat, (size_t)b->nlat, sizeof b->lat[0], cmp64);
    char how[64];
    if (window)
        snprintf(how, sizeof how, "%d in flight", window);
    else
        snprintf(how, sizeof how, "at max rate");
    printf("[ wal bench ] posix %s, 1 KiB appends %s for %.2f s: %.0f commits/s, "
           "%.1f records/commit, %.1f MB/s, %.2f CPU s/GB, commit p50 %lld us, p99 %lld us\n",
           bench_mode_name[mode], how, secs, (double)commits / secs,
           commits ? (double)done / (double)commits : 0.0,
           (double)(s.bytes_written - s0.bytes_written) / secs / 1e6,
           s.bytes_written > s0.bytes_written
               ? cpu / ((double)(s.bytes_written - s0.bytes_written) / 1e9)
               : 0.0,
           b->nlat ? (long long)b->lat[b->nlat / 2] : 0LL,
           b->nlat ? (long long)b->lat[b->nlat * 99 / 100] : 0LL);
    free(b);
}

static void test_bench(void **state)
{
    struct fx *f = *state;
    const char *env = getenv("WAL_BENCH_MS");
    if (env && atoi(env) == 0)
        skip();
    const char *win = getenv("WAL_BENCH_WINDOW");
    int window = win ? atoi(win) : 0;
    bench_run(f, BENCH_PREALLOC, window);
    bench_run(f, BENCH_APPEND, window);
    bench_run(f, BENCH_RECYCLED, window);
    bench_run(f, BENCH_RECYCLED_BUFFERED, window);
}

int main(void)
{
    /* WAL_TEST_LOG=info shows what recovery logs. */
    const char *lv = getenv("WAL_TEST_LOG");
    sk_log_set_level(lv && sk_log_parse_level(lv) >= 0 ? sk_log_parse_level(lv) : SK_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_roundtrip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_drains, setup, teardown),
        cmocka_unit_test_setup_teardown(test_group_commit, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_writes, setup, teardown),
        cmocka_unit_test_setup_teardown(test_batches_reused, setup, teardown),
        cmocka_unit_test_setup_teardown(test_pipelined_transient, setup, teardown),
        cmocka_unit_test_setup_teardown(test_torn_tail_every_length, setup, teardown),
        cmocka_unit_test_setup_teardown(test_garbage_and_zero_tails, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_crc_last_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bad_crc_earlier_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_roll_preamble_replay_from, setup, teardown),
        cmocka_unit_test_setup_teardown(test_trim_and_read, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recycled_segments, setup, teardown),
        cmocka_unit_test_setup_teardown(test_recycled_crash_states, setup, teardown),
        cmocka_unit_test_setup_teardown(test_removed_leftovers_purged, setup, teardown),
        cmocka_unit_test_setup_teardown(test_destroy_files_purges_spares, setup, teardown),
        cmocka_unit_test_setup_teardown(test_posix_direct_io, setup, teardown),
        cmocka_unit_test_setup_teardown(test_posix_direct_io_placed, setup, teardown),
        cmocka_unit_test_setup_teardown(test_appendv_known_crc, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_write_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_sync_eio, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_short_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_posix_short_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reordered_completions, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fault_remove_retry, setup, teardown),
        cmocka_unit_test_setup_teardown(test_staging_cap, setup, teardown),
        cmocka_unit_test_setup_teardown(test_appendv_pieces, setup, teardown),
        cmocka_unit_test_setup_teardown(test_preamble_error, setup, teardown),
        cmocka_unit_test_setup_teardown(test_unfinished_last_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transient_write_retried, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transient_verifier_change, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transient_short_write, setup, teardown),
        cmocka_unit_test_setup_teardown(test_transient_create, setup, teardown),
        cmocka_unit_test_setup_teardown(test_outage_keeps_records, setup, teardown),
        cmocka_unit_test_setup_teardown(test_close_gives_up, setup, teardown),
        cmocka_unit_test_setup_teardown(test_lease_lapse_holds_acks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_fencing_takeover, setup, teardown),
        cmocka_unit_test_setup_teardown(test_ack_deadline, setup, teardown),
        cmocka_unit_test_setup_teardown(test_abandon, setup, teardown),
        cmocka_unit_test_setup_teardown(test_takeover_with_proof, setup, teardown),
        cmocka_unit_test_setup_teardown(test_reader, setup, teardown),
        cmocka_unit_test_setup_teardown(test_scan, setup, teardown),
        cmocka_unit_test_setup_teardown(test_stale_epoch_segment, setup, teardown),
        cmocka_unit_test_setup_teardown(test_locks, setup, teardown),
        cmocka_unit_test_setup_teardown(test_restart_after_kill, setup, teardown),
        cmocka_unit_test_setup_teardown(test_long_recovery_keeps_lease, setup, teardown),
        cmocka_unit_test_setup_teardown(test_storage_url, setup, teardown),
        cmocka_unit_test_setup_teardown(test_bench, setup, teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
