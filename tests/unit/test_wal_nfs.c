/* WAL on the libnfs backend against a real NFSv3 server: NFS-Ganesha on
 * loopback, started here with tools/ganesha.sh on free ports (skipped when
 * Ganesha, rpcbind or root are missing). Round trips with multi-WRITE
 * commits and reads from another thread, injected short WRITEs, changed
 * write verifiers and dropped connections, a server killed and restarted
 * under load, and fencing between two owners of one WAL directory. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "wal.h"

static char gdir[64];    /* the server's directory; "" when not started */
static char base_url[256];
static char skip_why[768];
static const char *script;

static int free_port(void)
{
    int s = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof a) != 0 ||
        getsockname(s, (struct sockaddr *)&a, &len) != 0) {
        if (s >= 0)
            close(s);
        return -1;
    }
    close(s);
    return ntohs(a.sin_port);
}

static int ganesha(const char *args)
{
    char cmd[512];
    snprintf(cmd, sizeof cmd, "%s %s >>%s/script.log 2>&1", script, args, gdir);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

static int group_setup(void **state)
{
    (void)state;
    const char *src = getenv("SKIFF_SOURCE_DIR");
    static char path[512];
    snprintf(path, sizeof path, "%s/tools/ganesha.sh", src ? src : ".");
    script = path;
    if (access(script, X_OK) != 0) {
        snprintf(skip_why, sizeof skip_why, "%s not found (SKIFF_SOURCE_DIR)", script);
        return 0;
    }
    strcpy(gdir, "/tmp/skiff-test-nfs-XXXXXX");
    if (!mkdtemp(gdir)) {
        gdir[0] = 0;
        snprintf(skip_why, sizeof skip_why, "mkdtemp failed");
        return 0;
    }
    int port = free_port(), mnt = free_port();
    char args[256];
    snprintf(args, sizeof args, "start %s %d %d", gdir, port, mnt);
    int rc = ganesha(args);
    if (rc != 0) {
        snprintf(skip_why, sizeof skip_why, "tools/ganesha.sh start: exit %d (log %s/script.log)",
                 rc, gdir);
        return 0;
    }
    snprintf(base_url, sizeof base_url, "nfs://127.0.0.1%s/export/%%s?version=3&nfsport=%d&"
             "mountport=%d%%s", gdir, port, mnt);
    return 0;
}

static int group_teardown(void **state)
{
    (void)state;
    if (gdir[0]) {
        char args[128];
        snprintf(args, sizeof args, "stop %s", gdir);
        ganesha(args);
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", gdir);
        if (system(cmd) != 0)
            fprintf(stderr, "cannot remove %s\n", gdir);
    }
    return 0;
}

static void need_server(void)
{
    if (!base_url[0]) {
        fprintf(stderr, "[ skipped ] no NFS server: %s\n", skip_why);
        skip();
    }
}

static void url_of(char *out, size_t len, const char *sub, const char *extra)
{
    snprintf(out, len, base_url, sub, extra ? extra : "");
}

/* ---- records ---- */

static uint32_t plen_of(int i)
{
    return i == 77 ? (3u << 20) + 12345 : 10 + (uint32_t)((i * 131) % 3000);
}

static uint8_t *payload(int i, uint32_t *len)
{
    *len = plen_of(i);
    uint8_t *b = malloc(*len);
    for (uint32_t k = 0; k < *len; k++)
        b[k] = (uint8_t)(i * 31 + k * 7 + 1);
    return b;
}

#define MAXD 4096
struct dlog {
    int n;
    wal_lsn lsn[MAXD];
    int err[MAXD];
};

static void done_cb(void *arg, int err, wal_lsn lsn)
{
    struct dlog *d = arg;
    assert_true(d->n < MAXD);
    d->lsn[d->n] = lsn;
    d->err[d->n] = err;
    d->n++;
}

static void run_until_n(struct event_base *base, struct dlog *d, int n, int seconds)
{
    int64_t deadline = sk_mono_ms() + seconds * 1000;
    while (d->n < n) {
        assert_true(sk_mono_ms() < deadline);
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
}

static int append_i(wal *w, int i, struct dlog *d, wal_lsn *lsn)
{
    uint32_t len;
    uint8_t *b = payload(i, &len);
    int rc = wal_append(w, (uint8_t)(10 + i % 5), b, len, d ? done_cb : NULL, d, lsn);
    free(b);
    return rc;
}

struct replay {
    int n;
    int idx[MAXD];
    bool bad;
};

static int replay_cb(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *p, uint32_t len)
{
    (void)lsn;
    struct replay *r = arg;
    if (type == WAL_T_PREAMBLE)
        return 0;
    /* Which record: find i with the same length and first byte pattern. */
    int found = -1;
    for (int i = 0; i < 4000 && found < 0; i++) {
        if (plen_of(i) != len || type != 10 + i % 5)
            continue;
        if (p[0] == (uint8_t)(i * 31 + 1) && p[len - 1] == (uint8_t)(i * 31 + (len - 1) * 7 + 1))
            found = i;
    }
    if (found < 0 || r->n >= MAXD)
        r->bad = true;
    else
        r->idx[r->n++] = found;
    return 0;
}

static wal *open_url(struct event_base *base, const char *url, const wal_opts *o,
                     struct replay *r, int *err, char *why, size_t wl)
{
    wal_storage *st = wal_storage_open(base, url, why, wl);
    if (!st) {
        *err = SK_ERR_IO;
        return NULL;
    }
    return wal_open(base, st, o, 0, r ? replay_cb : NULL, r, err, why, wl);
}

static wal *open_ok(struct event_base *base, const char *url, const wal_opts *o,
                    struct replay *r)
{
    int err = 0;
    char why[512] = "";
    wal *w = open_url(base, url, o, r, &err, why, sizeof why);
    if (!w)
        fail_msg("open %s: %s: %s", url, sk_err_name(err), why);
    return w;
}

/* Reopens without faults and expects records [0, n) in order. */
static void expect_records(struct event_base *base, const char *sub, int n)
{
    char url[512];
    url_of(url, sizeof url, sub, NULL);
    struct replay r = {0};
    wal_opts o = {.node_id = 1};
    wal *w = open_ok(base, url, &o, &r);
    assert_false(r.bad);
    assert_int_equal(r.n, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(r.idx[i], i);
    wal_close(w);
}

/* ---- tests ---- */

struct rd {
    wal *w;
    wal_lsn *lsns;
    int n;
    int ok;
};

static void *reader(void *arg)
{
    struct rd *r = arg;
    uint32_t cap = 4u << 20;
    uint8_t *buf = malloc(cap);
    for (int i = 0; i < r->n; i++) {
        uint8_t type;
        uint32_t len, elen;
        if (wal_read_record(r->w, r->lsns[i], &type, buf, cap, &len) != 0)
            continue;
        uint8_t *e = payload(i, &elen);
        if (len == elen && memcmp(buf, e, len) == 0 && type == 10 + i % 5)
            r->ok++;
        free(e);
    }
    free(buf);
    return NULL;
}

/* Records of many sizes, one of 3 MiB (several WRITEs and a COMMIT), small
 * segments, reads from another thread (the blocking pool), trimming,
 * recovery. */
static void test_nfs_roundtrip(void **state)
{
    (void)state;
    need_server();
    struct event_base *base = event_base_new();
    char url[512];
    url_of(url, sizeof url, "roundtrip/wal", NULL);
    wal_opts o = {.node_id = 1, .segment_bytes = 256 << 10, .lease_ms = 2000};
    wal *w = open_ok(base, url, &o, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    static wal_lsn lsns[200];
    for (int i = 0; i < 200; i++) {
        assert_int_equal(append_i(w, i, &d, &lsns[i]), 0);
        if (i % 40 == 39)
            run_until_n(base, &d, i + 1, 30);
    }
    run_until_n(base, &d, 200, 30);
    for (int i = 0; i < 200; i++)
        assert_int_equal(d.err[i], 0);
    for (int i = 1; i < 200; i++)
        assert_true(d.lsn[i] > d.lsn[i - 1]);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_true(s.segments >= 2);

    struct rd r = {.w = w, .lsns = lsns, .n = 200};
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, reader, &r), 0);
    pthread_join(th, NULL);
    assert_int_equal(r.ok, 200);

    /* Trimming below record 150 removes whole segments, oldest first. */
    wal_trim(w, lsns[150]);
    int64_t deadline = sk_mono_ms() + 10000;
    for (;;) {
        wal_get_stats(w, &s);
        if (s.segments_removed > 0 || sk_mono_ms() > deadline)
            break;
        struct timeval tv = {0, 10000};
        event_base_loopexit(base, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
    assert_true(s.segments_removed > 0);
    uint8_t buf[16], type;
    uint32_t len;
    assert_int_equal(wal_read_record(w, lsns[0], &type, buf, sizeof buf, &len), SK_ERR_NOENT);
    wal_close(w);

    struct replay rp = {0};
    w = open_ok(base, url, &o, &rp);
    assert_false(rp.bad);
    assert_true(rp.n > 0 && rp.n <= 200);
    assert_int_equal(rp.idx[rp.n - 1], 199);
    wal_close(w);
    event_base_free(base);
}

#define FAULTS "&fault_short=3&fault_verf=2&fault_drop=13&fault_busy=7&filesync=0"

/* Appends n records on the URL with `extra` (faults): each lands once, in
 * order, nothing fails, and a reopen finds them all. spread: one loop turn
 * per append, so that several group commits travel at once; else batches of
 * ten, each waited for. */
static void faults_case(const char *sub, const char *extra, const wal_opts *o, int n, bool spread)
{
    need_server();
    struct event_base *base = event_base_new();
    char url[512];
    url_of(url, sizeof url, sub, extra);
    wal *w = open_ok(base, url, o, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < n; i++) {
        assert_int_equal(append_i(w, i, &d, NULL), 0);
        if (spread)
            event_base_loop(base, EVLOOP_NONBLOCK);
        else if (i % 10 == 9)
            run_until_n(base, &d, i + 1, 60);
    }
    run_until_n(base, &d, n, 120);
    for (int i = 0; i < n; i++)
        assert_int_equal(d.err[i], 0);
    for (int i = 1; i < n; i++)
        assert_true(d.lsn[i] > d.lsn[i - 1]);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_true(s.retries > 0);
    assert_false(wal_failed(w));
    wal_close(w);
    expect_records(base, sub, n);
    event_base_free(base);
}

/* Every 3rd WRITE answered short, every 7th busy (NFS3ERR_JUKEBOX, while
 * other pieces are still in flight), every 2nd COMMIT with a new verifier,
 * the connection dropped at every 13th reply: everything still lands once,
 * in order, and nothing fails. */
static void test_nfs_injected_faults(void **state)
{
    (void)state;
    faults_case("faults", FAULTS, &(wal_opts){.node_id = 1, .lease_ms = 5000}, 120, false);
}

/* The same faults with four group commits in flight (pipeline=4), over
 * small segments. */
static void test_nfs_pipelined_faults(void **state)
{
    (void)state;
    faults_case("pipelined", FAULTS "&pipeline=4",
                &(wal_opts){.node_id = 1, .segment_bytes = 16 << 10, .lease_ms = 5000}, 200, true);
}

struct restarter {
    int delay_ms, down_ms, rc;
    atomic_bool done;
    char args_stop[128], args_start[128];
};

static void *restart_main(void *arg)
{
    struct restarter *r = arg;
    struct timespec ts = {r->delay_ms / 1000, (r->delay_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    r->rc = ganesha(r->args_stop);
    ts = (struct timespec){r->down_ms / 1000, (r->down_ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
    if (!r->rc)
        r->rc = ganesha(r->args_start);
    atomic_store(&r->done, true);
    return NULL;
}

/* The server is killed and started again while records are appended: the
 * WAL keeps them queued, reconnects, sends again what was not committed,
 * and no record fails or is lost. */
static void test_nfs_server_restart(void **state)
{
    (void)state;
    need_server();
    struct event_base *base = event_base_new();
    char url[512];
    url_of(url, sizeof url, "restart", NULL);
    wal_opts o = {.node_id = 1, .lease_ms = 10000};
    wal *w = open_ok(base, url, &o, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    struct restarter r = {.delay_ms = 300, .down_ms = 300};
    int port = 0, mnt = 0;
    sscanf(strstr(url, "nfsport="), "nfsport=%d&mountport=%d", &port, &mnt);
    snprintf(r.args_stop, sizeof r.args_stop, "stop %s -9", gdir);
    snprintf(r.args_start, sizeof r.args_start, "start %s %d %d", gdir, port, mnt);
    pthread_t th;
    assert_int_equal(pthread_create(&th, NULL, restart_main, &r), 0);
    /* Appends are paced (one per 2 ms) and go on until well after the
     * server is back: on a fast machine an unpaced loop was over before
     * the server was even stopped, and nothing was tested. */
    int n = 0;
    int64_t next_at = sk_mono_ms(), back_at = 0, give_up = sk_mono_ms() + 30000;
    while (n < MAXD - 2 && sk_mono_ms() < give_up) {
        int64_t now = sk_mono_ms();
        if (!back_at && atomic_load(&r.done))
            back_at = now;
        if (back_at && now - back_at > 500)
            break;
        if (now < next_at) {
            /* not yet */
        } else if (wal_pending_bytes(w) < (1 << 20) && n != 77) {
            next_at = now + 2;
            assert_int_equal(append_i(w, n, &d, NULL), 0);
            n++;
        } else if (n == 77) {
            next_at = now + 2;
            n++; /* skip the big one here: it has its own test */
            assert_int_equal(append_i(w, 0, NULL, NULL), 0);
        }
        struct timeval tv = {0, 2000};
        event_base_loopexit(base, &tv);
        event_base_loop(base, EVLOOP_ONCE);
    }
    pthread_join(th, NULL);
    assert_int_equal(r.rc, 0);
    int expect = n > 77 ? n - 1 : n;
    run_until_n(base, &d, expect, 60);
    for (int i = 0; i < d.n; i++)
        assert_int_equal(d.err[i], 0);
    wal_stats s;
    wal_get_stats(w, &s);
    assert_true(s.retries > 0);
    wal_close(w);
    /* Record 77 was replaced by a copy of record 0 above. */
    struct replay rp = {0};
    wal_opts o2 = {.node_id = 1};
    w = open_ok(base, url, &o2, &rp);
    assert_false(rp.bad);
    assert_int_equal(rp.n, n);
    for (int i = 0; i < n; i++)
        assert_int_equal(rp.idx[i], i == 77 ? 0 : i);
    wal_close(w);
    event_base_free(base);
}

/* Two owners of one WAL directory on NFS (no lock to help): refused while
 * the first's lease is fresh, taken over once it ran out; the first is then
 * fenced by the new epoch's owner file. */
static void test_nfs_fencing(void **state)
{
    (void)state;
    need_server();
    struct event_base *b1 = event_base_new(), *b2 = event_base_new();
    char url[512];
    url_of(url, sizeof url, "fencing", NULL);
    wal_opts o = {.node_id = 1, .lease_ms = 400};
    wal *w1 = open_ok(b1, url, &o, NULL);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    for (int i = 0; i < 5; i++)
        assert_int_equal(append_i(w1, i, &d, NULL), 0);
    run_until_n(b1, &d, 5, 30);
    int err = 0;
    char why[512] = "";
    assert_null(open_url(b2, url, &o, NULL, &err, why, sizeof why));
    assert_int_equal(err, SK_ERR_FENCED);
    assert_non_null(strstr(why, "another skiffd uses this WAL"));

    struct timespec ts = {0, 450 * 1000000L};
    nanosleep(&ts, NULL);
    struct replay rp = {0};
    wal *w2 = open_ok(b2, url, &o, &rp);
    assert_int_equal(rp.n, 5);
    assert_int_equal(wal_owner_epoch(w2), wal_owner_epoch(w1) + 1);

    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w1, 5, &d, NULL), 0);
    run_until_n(b1, &d, 1, 30);
    assert_int_equal(d.err[0], SK_ERR_FENCED);
    wal_close(w1);

    memset(&d, 0, sizeof d);
    for (int i = 5; i < 8; i++)
        assert_int_equal(append_i(w2, i, &d, NULL), 0);
    run_until_n(b2, &d, 3, 30);
    for (int i = 0; i < 3; i++)
        assert_int_equal(d.err[i], 0);
    wal_close(w2);
    expect_records(b1, "fencing", 8);
    event_base_free(b1);
    event_base_free(b2);
}

static void test_nfs_unreachable(void **state)
{
    (void)state;
    need_server();
    struct event_base *base = event_base_new();
    char why[512] = "";
    int port = free_port();
    char url[256];
    snprintf(url, sizeof url, "nfs://127.0.0.1/x?version=3&nfsport=%d&mountport=%d&timeo=500",
             port, port);
    assert_null(wal_storage_open(base, url, why, sizeof why));
    assert_non_null(strstr(why, "cannot mount"));
    event_base_free(base);
}

/* Parameters out of range or not numbers refuse the URL; no server needed. */
static void test_nfs_url_values(void **state)
{
    (void)state;
    char why[512] = "";
    assert_int_equal(wal_nfs_check_url("nfs://h/x?timeo=500&depth=4&pipeline=2", why, sizeof why),
                     0);
    const char *bad[] = {"timeo=50", "timeo=", "timeo=5x", "depth=0", "pipeline=9",
                         "nfsport=70000", "filesync=-1", "fault_drop=0"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char url[128];
        snprintf(url, sizeof url, "nfs://h/x?%s", bad[i]);
        assert_int_equal(wal_nfs_check_url(url, why, sizeof why), SK_ERR_INVAL);
        assert_non_null(strstr(why, "invalid value"));
    }
}

/* ---- measurement (printed, never asserted) ----
 * WAL_BENCH_MS (default 0: skipped): the WAL alone on NFS, 1 KiB appends at
 * the max rate (bursts of 64 per loop turn until the staging cap pushes
 * back), for pipeline depths 1, 2 and 4; this process's CPU and the
 * server's per GB made durable. No Kafka, no load generator, no uploader. */

struct nbench {
    wal *w;
    struct event *ev;
    uint8_t payload[1024];
    bool stop;
};

static void nbench_done(void *arg, int err, wal_lsn lsn)
{
    (void)arg;
    (void)lsn;
    assert_int_equal(err, 0);
}

static void nbench_turn(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct nbench *b = arg;
    if (b->stop)
        return;
    for (int i = 0; i < 64; i++)
        if (wal_append(b->w, 9, b->payload, sizeof b->payload, nbench_done, b, NULL) != 0)
            break;
    struct timeval zero = {0, 0};
    event_add(b->ev, &zero);
}

static double self_cpu_s(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
           (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

/* The NFS server's user + system CPU seconds (its pid file in gdir). */
static double server_cpu_s(void)
{
    char path[600], buf[1024];
    snprintf(path, sizeof path, "%s/ganesha.pid", gdir);
    FILE *f = fopen(path, "r");
    int pid = 0;
    if (!f)
        return 0;
    if (fscanf(f, "%d", &pid) != 1)
        pid = 0;
    fclose(f);
    snprintf(path, sizeof path, "/proc/%d/stat", pid);
    f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')');
    unsigned long ut = 0, st = 0;
    /* After the command: state and fields 4..13, then utime, stime. */
    if (!p || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %lu %lu", &ut, &st) != 2)
        return 0;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

static void nbench_run(int pipeline, int ms)
{
    struct event_base *base = event_base_new();
    char url[512], sub[32], extra[32];
    snprintf(sub, sizeof sub, "bench%d", pipeline);
    snprintf(extra, sizeof extra, "&pipeline=%d", pipeline);
    url_of(url, sizeof url, sub, extra);
    wal_opts o = {.node_id = 1, .segment_bytes = 1ull << 30, .max_pending_bytes = 32 << 20};
    wal *w = open_ok(base, url, &o, NULL);
    struct nbench *b = calloc(1, sizeof *b);
    b->w = w;
    b->ev = event_new(base, -1, 0, nbench_turn, b);
    static struct dlog d;
    memset(&d, 0, sizeof d);
    assert_int_equal(append_i(w, 0, &d, NULL), 0); /* the segment exists before the clock */
    run_until_n(base, &d, 1, 30);
    wal_stats s0, s;
    wal_get_stats(w, &s0);
    double cpu0 = self_cpu_s(), srv0 = server_cpu_s();
    int64_t t0 = sk_mono_us();
    struct timeval zero = {0, 0};
    event_add(b->ev, &zero);
    while (sk_mono_us() - t0 < (int64_t)ms * 1000)
        event_base_loop(base, EVLOOP_ONCE);
    b->stop = true;
    wal_get_stats(w, &s);
    double secs = (double)(sk_mono_us() - t0) / 1e6;
    double cpu = self_cpu_s() - cpu0, srv = server_cpu_s() - srv0;
    wal_close(w);
    event_free(b->ev);
    free(b);
    char why[256];
    if (wal_destroy_files(base, url, why, sizeof why) != 0)
        fprintf(stderr, "bench files left: %s\n", why);
    event_base_free(base);
    uint64_t commits = s.commits - s0.commits, bytes = s.bytes_written - s0.bytes_written;
    double gb = (double)bytes / 1e9;
    printf("[ wal bench ] nfs pipeline=%d, 1 KiB appends at max rate for %.1f s: %.1f MB/s, "
           "%.0f commits/s, %.2f MB/commit, commit mean %.1f ms; CPU s/GB: WAL process %.2f, "
           "NFS server %.2f\n",
           pipeline, secs, (double)bytes / secs / 1e6, (double)commits / secs,
           commits ? (double)bytes / (double)commits / 1e6 : 0.0,
           commits ? (double)(s.commit_us_sum - s0.commit_us_sum) / (double)commits / 1000 : 0.0,
           gb > 0 ? cpu / gb : 0.0, gb > 0 ? srv / gb : 0.0);
}

static void test_nfs_bench(void **state)
{
    (void)state;
    const char *env = getenv("WAL_BENCH_MS");
    int ms = env ? atoi(env) : 0;
    if (ms <= 0)
        skip();
    need_server();
    for (int p = 1; p <= 4; p *= 2)
        nbench_run(p, ms);
}

int main(void)
{
    const char *lv = getenv("WAL_TEST_LOG");
    sk_log_set_level(lv && sk_log_parse_level(lv) >= 0 ? sk_log_parse_level(lv) : SK_LOG_ERROR);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_nfs_roundtrip),
        cmocka_unit_test(test_nfs_injected_faults),
        cmocka_unit_test(test_nfs_pipelined_faults),
        cmocka_unit_test(test_nfs_server_restart),
        cmocka_unit_test(test_nfs_fencing),
        cmocka_unit_test(test_nfs_unreachable),
        cmocka_unit_test(test_nfs_url_values),
        cmocka_unit_test(test_nfs_bench),
    };
    return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
