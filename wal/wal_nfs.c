/*
 * NFSv3 backend of wal_storage through libnfs, in userspace.
 *
 * URL: nfs://host/path?version=3&nfsport=N&mountport=M[&uid=U&gid=G]
 *      [&timeo=MS][&filesync=BYTES][&depth=N][&pipeline=N]
 * `path` is the WAL's directory. The longest prefix of it that the server
 * lets us mount is mounted, and the rest is created. version must be 3
 * (libnfs 4.0's NFSv4 client is not usable here). docs/nfs.md lists the
 * parameters; the fault_* ones exist for tests only (every Nth WRITE answered
 * short or busy, COMMIT with a new verifier, reply dropping the connection).
 *
 * Two kinds of libnfs contexts (a context is not thread-safe):
 *  - the loop context: asynchronous create, write, remove and renew, issued
 *    on the event-loop thread as raw NFSv3 RPCs (CREATE GUARDED, WRITE,
 *    COMMIT, REMOVE, LOOKUP) against the directory's file handle, serviced
 *    by that loop (nfs_get_fd / nfs_which_events / nfs_service, plus a
 *    100 ms tick for libnfs's timeouts). The loop never waits on NFS.
 *  - a pool of up to POOL_MAX blocking contexts for list, size, pread,
 *    truncate and the owner files (start-up, close, and reader threads),
 *    one thread at a time each.
 *
 * Durability of a write: one WRITE FILE_SYNC when the whole write fits one
 * WRITE of at most `filesync` bytes (one round trip: measured faster on
 * small writes); otherwise UNSTABLE WRITEs of at most the server's wtmax,
 * up to `depth` in flight, then a COMMIT of the range. The COMMIT's write
 * verifier must equal every WRITE's: a different one means the server
 * restarted and may have lost them, so they are all sent again (a few
 * times, then the write fails transiently). A WRITE that the server took
 * only in part is continued with the rest. The WAL keeps up to `pipeline`
 * writes in flight (max_writes): the next group commit's WRITEs travel while
 * the previous one's COMMIT waits for the server's disk; `depth` bounds the
 * WRITEs of all of them together.
 *
 * Failures: a broken connection, an RPC timeout (timeo) or a connect or
 * mount that does not finish in time drops the context, fails every
 * operation in flight with SK_ERR_TIMEOUT (transient: the WAL sends it
 * again) and reconnects with backoff. Operations issued while disconnected
 * fail the same way at once. NFS3ERR_JUKEBOX, NOSPC, DQUOT and SERVERFAULT
 * are transient (SK_ERR_AGAIN); other NFS errors are permanent (SK_ERR_IO).
 * A create issued again after a transient failure accepts an existing file.
 * Completions are delivered from an event of the loop, never inside a call.
 */
#include <errno.h>
#include <event2/event.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* libnfs.h first: the raw headers need its definitions. */
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "wal_storage.h"

#define POOL_MAX 4
#define FH_MAX 64 /* NFS3_FHSIZE */
#define FH_CACHE 16
#define SYNC_FH_CACHE 4
#define DEFAULT_TIMEO_MS 10000
#define DEFAULT_DEPTH 16
#define DEFAULT_PIPELINE 2
#define RECONNECT_MIN_MS 20
#define RECONNECT_MAX_MS 1000
#define VERIFIER_RESENDS 3
#define UNSURE_MAX 8

struct fh {
    uint32_t len;
    char val[FH_MAX];
};

struct fhent {
    uint64_t seg;
    struct fh fh;
    bool used;
};

struct sctx {
    struct nfs_context *nfs; /* NULL until connected */
    bool busy;
    struct {
        uint64_t seg;
        struct nfsfh *fh;
    } fhc[SYNC_FH_CACHE];
    unsigned fhnext;
};

enum { K_CREATE, K_WRITE, K_REMOVE, K_RENEW };
enum { C_DOWN, C_CONNECTING, C_UP };

struct chunk {
    uint64_t off;      /* what is left to write (a short WRITE advances it) */
    uint32_t len;
    char *data;
    uint64_t off0;     /* the whole piece, written again after a verifier change */
    uint32_t len0;
    char *data0;
    bool sent, done;
    bool filesync;     /* every part's reply said FILE_SYNC */
    bool unstable;     /* some part's reply did not */
    bool has_verf;     /* an earlier part of this piece was written with verf */
    char verf[NFS3_WRITEVERFSIZE];
};

struct aop {
    struct aop *next;
    int kind;
    uint64_t seg; /* the epoch for a renewal */
    uint64_t off;
    wal_io_cb cb;
    void *arg;
    int err;
    /* write (and the renewal's put) */
    struct chunk *ch;
    int nch, inflight;
    bool filesync, committing;
    int resends;
    int step; /* renewal: 0 check next, 1 check own, 2 write; write: 1 looking a stale
                 handle up again once the pieces in flight are back, 2 done so */
    struct fh fh;
    bool have_fh;
    /* Failed while pieces were still in flight on this connection: finished
     * with this error once they are back (their replies still name it). */
    bool dead;
    int dead_err;
};

struct nfsb {
    wal_storage base;
    struct event_base *evb;
    char *url, *server, *mount_path, *rel; /* rel: directory under the mount, "" or "/a/b" */
    int timeo_ms, depth, pipeline;
    uint64_t filesync_max;
    int fault_short, fault_verf, fault_drop, fault_busy; /* every Nth WRITE / COMMIT /
                                                             RPC reply / WRITE */
    uint64_t nwrites, ncommits, nreplies, nbusy;

    /* loop context */
    struct nfs_context *nfs;
    int cstate;
    uint64_t gen;
    int64_t connect_start_us;
    int fd;
    short evmask;
    bool in_service;
    struct event *io_ev, *tick_ev, *retry_ev, *done_ev, *reap_ev;
    int backoff_ms;
    int64_t down_since_us, warned_us;
    struct nfs_context *dead[8];
    int ndead;
    struct fh dirfh;
    uint64_t wtmax;
    int writes_inflight;
    struct aop *active, *active_tail; /* started, in submission order */
    struct aop *waiting, *waiting_tail; /* issued while connecting */
    struct aop *done, *done_tail;
    struct fhent fhs[FH_CACHE];
    unsigned fhnext;
    uint64_t unsure[UNSURE_MAX]; /* creates whose outcome a broken connection hid */
    int nunsure;
    bool destroying;

    /* blocking pool */
    pthread_mutex_t pool_mu;
    pthread_cond_t pool_cv;
    struct sctx pool[POOL_MAX];
    int npool;
};

/* A raw RPC in flight: its operation, valid only while gen is current. */
struct req {
    struct nfsb *b;
    struct aop *op;
    uint64_t gen;
    int chunk;
};

static void op_finish(struct nfsb *b, struct aop *op, int err);
static void conn_fail(struct nfsb *b, const char *why);
static void pump(struct nfsb *b);
static void start_op(struct nfsb *b, struct aop *op);

/* libnfs keeps struct nfs_fh opaque; nfs_get_fh exists so that raw calls
 * can use a file opened with nfs_open, and its layout is that of nfs_fh3. */
static const nfs_fh3 *raw_fh(struct nfsfh *f)
{
    return (const nfs_fh3 *)(const void *)nfs_get_fh(f);
}

static bool fh_set(struct fh *dst, const nfs_fh3 *src)
{
    if (src->data.data_len == 0 || src->data.data_len > FH_MAX)
        return false;
    dst->len = src->data.data_len;
    memcpy(dst->val, src->data.data_val, src->data.data_len);
    return true;
}

static nfs_fh3 fh3(const struct fh *f)
{
    nfs_fh3 r;
    r.data.data_len = f->len;
    r.data.data_val = (char *)f->val;
    return r;
}

/* ---- URL ---- */

/* *out is lo when v is not a number in [lo, hi]. */
static int parse_int(const char *v, long lo, long hi, long *out)
{
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    bool ok = *v && !*end && !errno && x >= lo && x <= hi;
    *out = ok ? x : lo;
    return ok ? 0 : -1;
}

static int parse_url(struct nfsb *b, const char *url, char *why, size_t wl)
{
    if (strncmp(url, "nfs://", 6) != 0) {
        snprintf(why, wl, "'%s' is not an nfs:// URL", url);
        return SK_ERR_INVAL;
    }
    const char *h = url + 6, *slash = strchr(h, '/');
    if (!slash || slash == h) {
        snprintf(why, wl, "'%s' names no host and directory (nfs://host/export/dir)", url);
        return SK_ERR_INVAL;
    }
    const char *q = strchr(slash, '?');
    size_t plen = q ? (size_t)(q - slash) : strlen(slash);
    b->server = strndup(h, (size_t)(slash - h));
    b->mount_path = strndup(slash, plen);
    if (!b->server || !b->mount_path)
        return SK_ERR_NOMEM;
    while (strlen(b->mount_path) > 1 && b->mount_path[strlen(b->mount_path) - 1] == '/')
        b->mount_path[strlen(b->mount_path) - 1] = 0;
    b->timeo_ms = DEFAULT_TIMEO_MS;
    b->depth = DEFAULT_DEPTH;
    b->pipeline = DEFAULT_PIPELINE;
    b->filesync_max = UINT64_MAX; /* capped by wtmax once connected */
    bool ports = false;
    for (const char *p = q ? q + 1 : NULL; p && *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        char kv[128];
        if (len >= sizeof kv) {
            snprintf(why, wl, "parameter too long in '%s'", url);
            return SK_ERR_INVAL;
        }
        memcpy(kv, p, len);
        kv[len] = 0;
        p = amp ? amp + 1 : NULL;
        if (!*kv)
            continue;
        char *eq = strchr(kv, '=');
        if (!eq) {
            snprintf(why, wl, "parameter '%s' has no value in '%s'", kv, url);
            return SK_ERR_INVAL;
        }
        *eq = 0;
        const char *k = kv, *v = eq + 1;
        long x;
        int bad = 0;
        if (strcmp(k, "version") == 0) {
            if (strcmp(v, "3") != 0) {
                snprintf(why, wl, "NFS version %s is not supported: use version=3", v);
                return SK_ERR_UNSUPPORTED;
            }
        } else if (strcmp(k, "nfsport") == 0 || strcmp(k, "mountport") == 0) {
            bad = parse_int(v, 1, 65535, &x);
            ports = true;
        } else if (strcmp(k, "uid") == 0 || strcmp(k, "gid") == 0) {
            bad = parse_int(v, 0, 0x7fffffff, &x);
        } else if (strcmp(k, "timeo") == 0) {
            bad = parse_int(v, 100, 600000, &x);
            b->timeo_ms = (int)x;
        } else if (strcmp(k, "depth") == 0) {
            bad = parse_int(v, 1, 256, &x);
            b->depth = (int)x;
        } else if (strcmp(k, "pipeline") == 0) {
            bad = parse_int(v, 1, 8, &x);
            b->pipeline = (int)x;
        } else if (strcmp(k, "filesync") == 0) {
            bad = parse_int(v, 0, 0x7fffffff, &x);
            b->filesync_max = (uint64_t)x;
        } else if (strcmp(k, "fault_short") == 0) {
            bad = parse_int(v, 1, 1000000, &x);
            b->fault_short = (int)x;
        } else if (strcmp(k, "fault_verf") == 0) {
            bad = parse_int(v, 1, 1000000, &x);
            b->fault_verf = (int)x;
        } else if (strcmp(k, "fault_drop") == 0) {
            bad = parse_int(v, 1, 1000000, &x);
            b->fault_drop = (int)x;
        } else if (strcmp(k, "fault_busy") == 0) {
            bad = parse_int(v, 1, 1000000, &x);
            b->fault_busy = (int)x;
        } else {
            snprintf(why, wl,
                     "unknown parameter '%s' in '%s' (known: version, nfsport, mountport, uid, "
                     "gid, timeo, filesync, depth, pipeline)",
                     k, url);
            return SK_ERR_INVAL;
        }
        if (bad) {
            snprintf(why, wl, "parameter %s has an invalid value '%s'", k, v);
            return SK_ERR_INVAL;
        }
    }
    (void)ports;
    return 0;
}

/* libnfs leaves Nagle's algorithm on: a small RPC sent while another is
 * unacknowledged (a lease renewal next to a WRITE, the tail of a large
 * WRITE) would wait for that ACK, up to a delayed-ACK period. */
static void no_delay(int fd)
{
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

/* A context with the URL's settings; not connected. */
static struct nfs_context *ctx_new(struct nfsb *b)
{
    struct nfs_context *nfs = nfs_init_context();
    if (!nfs)
        return NULL;
    /* Applies nfsport, mountport, uid, gid; the rest of the URL is ours. */
    struct nfs_url *u = nfs_parse_url_dir(nfs, b->url);
    if (u)
        nfs_destroy_url(u);
    nfs_set_version(nfs, NFS_V3);
    /* Reconnection is ours (with backoff, and with our own resends); a
     * directory cache would hide other owners' files. */
    nfs_set_autoreconnect(nfs, 0);
    nfs_set_dircache(nfs, 0);
    nfs_set_timeout(nfs, b->timeo_ms);
    return nfs;
}

/* ---- the blocking pool ---- */

static void path_of(struct nfsb *b, const char *name, char *buf, size_t len)
{
    snprintf(buf, len, "%s/%s", b->rel, name);
}

static void sctx_drop(struct sctx *c)
{
    for (int i = 0; i < SYNC_FH_CACHE; i++) {
        if (c->fhc[i].fh && c->nfs)
            nfs_close(c->nfs, c->fhc[i].fh);
        c->fhc[i].fh = NULL;
    }
    if (c->nfs)
        nfs_destroy_context(c->nfs);
    c->nfs = NULL;
}

static struct sctx *pool_get(struct nfsb *b, int *err)
{
    pthread_mutex_lock(&b->pool_mu);
    struct sctx *c = NULL;
    for (;;) {
        for (int i = 0; i < b->npool && !c; i++)
            if (!b->pool[i].busy)
                c = &b->pool[i];
        if (!c && b->npool < POOL_MAX)
            c = &b->pool[b->npool++];
        if (c)
            break;
        pthread_cond_wait(&b->pool_cv, &b->pool_mu);
    }
    c->busy = true;
    pthread_mutex_unlock(&b->pool_mu);
    *err = 0;
    if (!c->nfs) {
        c->nfs = ctx_new(b);
        if (!c->nfs) {
            *err = SK_ERR_NOMEM;
        } else if (nfs_mount(c->nfs, b->server, b->mount_path) != 0) {
            SK_WARN("wal_nfs", "mount %s:%s: %s", b->server, b->mount_path, nfs_get_error(c->nfs));
            nfs_destroy_context(c->nfs);
            c->nfs = NULL;
            *err = SK_ERR_IO;
        } else {
            no_delay(nfs_get_fd(c->nfs));
        }
    }
    if (*err) {
        pthread_mutex_lock(&b->pool_mu);
        c->busy = false;
        pthread_cond_signal(&b->pool_cv);
        pthread_mutex_unlock(&b->pool_mu);
        return NULL;
    }
    return c;
}

/* Errors that say nothing about the file but about the connection. */
static bool transport_error(int e)
{
    return e == -EIO || e == -EINTR || e == -EFAULT || e == -ENOMEM || e == -ETIMEDOUT ||
           e == -ECONNRESET || e == -EPIPE || e == -ENOTCONN || e == -ECONNREFUSED;
}

static void pool_put(struct nfsb *b, struct sctx *c, int nfs_err)
{
    if (nfs_err && transport_error(nfs_err))
        sctx_drop(c);
    pthread_mutex_lock(&b->pool_mu);
    c->busy = false;
    pthread_cond_signal(&b->pool_cv);
    pthread_mutex_unlock(&b->pool_mu);
}

static int map_errno(int e)
{
    if (e == 0)
        return 0;
    if (e == -ENOENT || e == -ESTALE)
        return SK_ERR_NOENT;
    if (e == -EEXIST)
        return SK_ERR_EXIST;
    return SK_ERR_IO;
}

/* Runs fn on a pool context, again on a fresh one after a transport error. */
typedef int (*sync_fn)(struct nfsb *b, struct sctx *c, void *arg);

static int with_ctx(struct nfsb *b, sync_fn fn, void *arg)
{
    int rc = SK_ERR_IO;
    for (int attempt = 0; attempt < 3; attempt++) {
        if (attempt) {
            struct timespec ts = {0, 100000000L * attempt * attempt};
            nanosleep(&ts, NULL);
        }
        int e;
        struct sctx *c = pool_get(b, &e);
        if (!c) {
            rc = e;
            continue;
        }
        int ne = fn(b, c, arg);
        pool_put(b, c, ne);
        if (!transport_error(ne))
            return map_errno(ne);
        SK_WARN("wal_nfs", "NFS call failed (%s); retrying on a new connection", strerror(-ne));
        rc = SK_ERR_IO;
    }
    return rc;
}

struct list_arg {
    bool (*parse)(const char *, uint64_t *);
    uint64_t *v;
    size_t n, cap;
};

static int list_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    struct list_arg *a = arg;
    a->n = 0;
    struct nfsdir *d;
    int e = nfs_opendir(c->nfs, *b->rel ? b->rel : "/", &d);
    if (e)
        return e;
    struct nfsdirent *de;
    while ((de = nfs_readdir(c->nfs, d)) != NULL) {
        uint64_t x;
        if (!a->parse(de->name, &x))
            continue;
        if (a->n == a->cap) {
            size_t ncap = a->cap ? a->cap * 2 : 16;
            uint64_t *nv = realloc(a->v, ncap * sizeof *nv);
            if (!nv) {
                nfs_closedir(c->nfs, d);
                return -ENOMEM;
            }
            a->v = nv;
            a->cap = ncap;
        }
        a->v[a->n++] = x;
    }
    nfs_closedir(c->nfs, d);
    return 0;
}

static int list_numbered(struct nfsb *b, bool (*parse)(const char *, uint64_t *),
                         uint64_t **out, size_t *n)
{
    struct list_arg a = {.parse = parse};
    int rc = with_ctx(b, list_fn, &a);
    if (rc) {
        free(a.v);
        return rc;
    }
    for (size_t i = 1; i < a.n; i++) {
        uint64_t x = a.v[i];
        size_t j = i;
        while (j > 0 && a.v[j - 1] > x) {
            a.v[j] = a.v[j - 1];
            j--;
        }
        a.v[j] = x;
    }
    *out = a.v;
    *n = a.n;
    return 0;
}

static int nb_list(wal_storage *s, uint64_t **starts, size_t *n)
{
    return list_numbered(s->impl, wal_segment_parse, starts, n);
}

static int nb_owner_list(wal_storage *s, uint64_t **epochs, size_t *n)
{
    return list_numbered(s->impl, wal_owner_parse, epochs, n);
}

struct path_arg {
    char path[512];
    uint64_t seg;
    uint64_t off, size;
    void *buf;
    const void *cbuf;
    size_t len, got;
};

static int size_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    (void)b;
    struct path_arg *a = arg;
    struct nfs_stat_64 st;
    int e = nfs_stat64(c->nfs, a->path, &st);
    if (!e)
        a->size = st.nfs_size;
    return e;
}

static int nb_size(wal_storage *s, uint64_t seg, uint64_t *size)
{
    struct nfsb *b = s->impl;
    struct path_arg a;
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_segment_name(seg, name, sizeof name), a.path, sizeof a.path);
    int rc = with_ctx(b, size_fn, &a);
    if (!rc)
        *size = a.size;
    return rc;
}

/* The context's open handle of a segment (cached: readers come back). */
static int sctx_open(struct nfsb *b, struct sctx *c, uint64_t seg, struct nfsfh **out)
{
    for (int i = 0; i < SYNC_FH_CACHE; i++)
        if (c->fhc[i].fh && c->fhc[i].seg == seg) {
            *out = c->fhc[i].fh;
            return 0;
        }
    char name[WAL_SEGMENT_NAME_MAX], path[512];
    path_of(b, wal_segment_name(seg, name, sizeof name), path, sizeof path);
    struct nfsfh *fh;
    int e = nfs_open(c->nfs, path, O_RDONLY, &fh);
    if (e)
        return e;
    unsigned k = c->fhnext++ % SYNC_FH_CACHE;
    if (c->fhc[k].fh)
        nfs_close(c->nfs, c->fhc[k].fh);
    c->fhc[k].fh = fh;
    c->fhc[k].seg = seg;
    *out = fh;
    return 0;
}

static void sctx_forget(struct sctx *c, uint64_t seg)
{
    for (int i = 0; i < SYNC_FH_CACHE; i++)
        if (c->fhc[i].fh && c->fhc[i].seg == seg) {
            nfs_close(c->nfs, c->fhc[i].fh);
            c->fhc[i].fh = NULL;
        }
}

static int pread_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    struct path_arg *a = arg;
    a->got = 0;
    struct nfsfh *fh;
    int e = sctx_open(b, c, a->seg, &fh);
    if (e)
        return e;
    while (a->got < a->len) {
        int r = nfs_pread(c->nfs, fh, a->off + a->got, a->len - a->got, (char *)a->buf + a->got);
        if (r < 0) {
            sctx_forget(c, a->seg);
            return r;
        }
        if (r == 0)
            break;
        a->got += (size_t)r;
    }
    return 0;
}

static int nb_pread(wal_storage *s, uint64_t seg, uint64_t off, void *buf, size_t len,
                    size_t *got)
{
    struct path_arg a = {.seg = seg, .off = off, .buf = buf, .len = len};
    int rc = with_ctx(s->impl, pread_fn, &a);
    *got = rc ? 0 : a.got;
    return rc;
}

static int truncate_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    (void)b;
    struct path_arg *a = arg;
    return nfs_truncate(c->nfs, a->path, a->size);
}

static int nb_truncate(wal_storage *s, uint64_t seg, uint64_t size)
{
    struct nfsb *b = s->impl;
    struct path_arg a = {.size = size};
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_segment_name(seg, name, sizeof name), a.path, sizeof a.path);
    return with_ctx(b, truncate_fn, &a);
}

static int unlink_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    (void)b;
    struct path_arg *a = arg;
    int e = nfs_unlink(c->nfs, a->path);
    return e == -ENOENT ? 0 : e;
}

static int nb_discard(wal_storage *s, uint64_t seg)
{
    struct nfsb *b = s->impl;
    struct path_arg a;
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_segment_name(seg, name, sizeof name), a.path, sizeof a.path);
    return with_ctx(b, unlink_fn, &a);
}

static int nb_owner_remove(wal_storage *s, uint64_t epoch)
{
    struct nfsb *b = s->impl;
    struct path_arg a;
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_owner_name(epoch, name, sizeof name), a.path, sizeof a.path);
    return with_ctx(b, unlink_fn, &a);
}

static int owner_read_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    (void)b;
    struct path_arg *a = arg;
    struct nfsfh *fh;
    a->got = 0;
    int e = nfs_open(c->nfs, a->path, O_RDONLY, &fh);
    if (e)
        return e;
    int r = nfs_pread(c->nfs, fh, 0, a->len, a->buf);
    nfs_close(c->nfs, fh);
    if (r < 0)
        return r;
    a->got = (size_t)r;
    return 0;
}

static int nb_owner_read(wal_storage *s, uint64_t epoch, void *buf, size_t cap, size_t *got)
{
    struct nfsb *b = s->impl;
    struct path_arg a = {.buf = buf, .len = cap};
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_owner_name(epoch, name, sizeof name), a.path, sizeof a.path);
    int rc = with_ctx(b, owner_read_fn, &a);
    *got = rc ? 0 : a.got;
    return rc;
}

static int write_all(struct nfs_context *nfs, struct nfsfh *fh, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        int w = nfs_pwrite(nfs, fh, done, len - done, (char *)buf + done);
        if (w < 0)
            return w;
        if (w == 0)
            return -EIO;
        done += (size_t)w;
    }
    /* FILE_SYNC already (O_SYNC); the COMMIT costs little and says so too. */
    return nfs_fsync(nfs, fh);
}

static int owner_create_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    struct path_arg *a = arg;
    struct nfsfh *fh;
    int e = nfs_create(c->nfs, a->path, O_EXCL | O_WRONLY | O_SYNC, 0644, &fh);
    if (e == -EEXIST && a->got) {
        /* Our own create, carried out before the connection broke, shows as
         * an existing file: it is ours when it holds our record. */
        char back[512];
        struct path_arg r = {.buf = back, .len = a->len < sizeof back ? a->len : sizeof back};
        memcpy(r.path, a->path, sizeof r.path);
        int re = owner_read_fn(b, c, &r);
        if (!re && r.got == a->len && memcmp(back, a->cbuf, a->len) == 0)
            return 0;
        return -EEXIST;
    }
    a->got = 1; /* any later attempt may meet this one's file */
    if (e)
        return e;
    e = write_all(c->nfs, fh, a->cbuf, a->len);
    nfs_close(c->nfs, fh);
    return e;
}

static int nb_owner_create(wal_storage *s, uint64_t epoch, const void *buf, size_t len)
{
    struct nfsb *b = s->impl;
    if (len > 512)
        return SK_ERR_INVAL;
    struct path_arg a = {.cbuf = buf, .len = len};
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_owner_name(epoch, name, sizeof name), a.path, sizeof a.path);
    return with_ctx(b, owner_create_fn, &a);
}

static int owner_put_fn(struct nfsb *b, struct sctx *c, void *arg)
{
    (void)b;
    struct path_arg *a = arg;
    struct nfsfh *fh;
    int e = nfs_open(c->nfs, a->path, O_WRONLY | O_SYNC, &fh);
    if (e)
        return e;
    e = write_all(c->nfs, fh, a->cbuf, a->len);
    nfs_close(c->nfs, fh);
    return e;
}

static int nb_owner_put(wal_storage *s, uint64_t epoch, const void *buf, size_t len)
{
    struct nfsb *b = s->impl;
    struct path_arg a = {.cbuf = buf, .len = len};
    char name[WAL_SEGMENT_NAME_MAX];
    path_of(b, wal_owner_name(epoch, name, sizeof name), a.path, sizeof a.path);
    return with_ctx(b, owner_put_fn, &a);
}

/* A userspace client holds no lock a kernel could check. */
static int nb_lock(wal_storage *s, bool *exclusive)
{
    (void)s;
    *exclusive = false;
    return 0;
}

/* ---- the loop context: events ---- */

static void update_io(struct nfsb *b);

static void io_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    struct nfsb *b = arg;
    if (!b->nfs || b->cstate == C_DOWN)
        return;
    int revents = (what & EV_READ ? POLLIN : 0) | (what & EV_WRITE ? POLLOUT : 0);
    /* A callback may drop the context (conn_fail): it stays alive until the
     * reaper runs, after this call. */
    struct nfs_context *nfs = b->nfs;
    b->in_service = true;
    int r = nfs_service(nfs, revents);
    b->in_service = false;
    if (r < 0)
        conn_fail(b, nfs_get_error(nfs));
    pump(b);
    update_io(b);
}

/* (Re)arms the io event for the context's current fd and wishes: the fd
 * changes while mounting (mountd, then nfsd), the wishes with the queue. */
static void update_io(struct nfsb *b)
{
    if (!b->nfs || b->cstate == C_DOWN) {
        if (b->fd >= 0)
            event_del(b->io_ev);
        b->fd = -1;
        return;
    }
    int fd = nfs_get_fd(b->nfs);
    int w = nfs_which_events(b->nfs);
    short mask = (short)((w & POLLIN ? EV_READ : 0) | (w & POLLOUT ? EV_WRITE : 0));
    if (fd == b->fd && mask == b->evmask)
        return;
    if (b->fd >= 0)
        event_del(b->io_ev);
    if (fd != b->fd)
        no_delay(fd);
    b->fd = fd;
    b->evmask = mask;
    if (fd < 0 || !mask)
        return;
    event_assign(b->io_ev, b->evb, fd, (short)(mask | EV_PERSIST), io_cb, b);
    event_add(b->io_ev, NULL);
}

/* Sends what was queued now rather than at the next loop turn. Not from
 * inside nfs_service (libnfs callbacks): that one writes on its way out. */
static void flush_out(struct nfsb *b)
{
    if (b->in_service || b->cstate == C_DOWN || !b->nfs)
        return;
    if (nfs_which_events(b->nfs) & POLLOUT) {
        struct nfs_context *nfs = b->nfs;
        b->in_service = true;
        int r = nfs_service(nfs, POLLOUT);
        b->in_service = false;
        if (r < 0)
            conn_fail(b, nfs_get_error(nfs));
    }
    update_io(b);
}

static void reconnect(struct nfsb *b);

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct nfsb *b = arg;
    if (!b->nfs || b->cstate == C_DOWN)
        return;
    if (b->cstate == C_CONNECTING &&
        sk_mono_us() - b->connect_start_us > (int64_t)b->timeo_ms * 1000) {
        conn_fail(b, "connect or mount timed out");
        return;
    }
    /* libnfs checks its RPC timeouts when serviced. */
    struct nfs_context *nfs = b->nfs;
    b->in_service = true;
    int r = nfs_service(nfs, 0);
    b->in_service = false;
    if (r < 0)
        conn_fail(b, nfs_get_error(nfs));
    pump(b);
    update_io(b);
}

static void retry_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    reconnect(arg);
}

static void reap_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct nfsb *b = arg;
    while (b->ndead > 0)
        nfs_destroy_context(b->dead[--b->ndead]);
}

static void done_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct nfsb *b = arg;
    while (b->done) {
        struct aop *op = b->done;
        b->done = op->next;
        if (!b->done)
            b->done_tail = NULL;
        op->cb(op->arg, op->err);
        free(op->ch);
        free(op);
    }
}

static void list_remove(struct aop **head, struct aop **tail, struct aop *op)
{
    struct aop *prev = NULL;
    for (struct aop *x = *head; x; prev = x, x = x->next) {
        if (x != op)
            continue;
        if (prev)
            prev->next = x->next;
        else
            *head = x->next;
        if (*tail == x)
            *tail = prev;
        x->next = NULL;
        return;
    }
}

static void list_push(struct aop **head, struct aop **tail, struct aop *op)
{
    op->next = NULL;
    if (*tail)
        (*tail)->next = op;
    else
        *head = op;
    *tail = op;
}

/* Completes op (removed from whatever list holds it) from the loop, soon. */
static void op_finish(struct nfsb *b, struct aop *op, int err)
{
    list_remove(&b->active, &b->active_tail, op);
    list_remove(&b->waiting, &b->waiting_tail, op);
    b->writes_inflight -= op->inflight;
    op->inflight = 0;
    op->err = err;
    list_push(&b->done, &b->done_tail, op);
    if (!b->destroying)
        event_active(b->done_ev, EV_TIMEOUT, 1);
}

/* Finishes op now, or once its WRITEs in flight are back. */
static void op_fail(struct nfsb *b, struct aop *op, int err)
{
    if (op->inflight > 0) {
        op->dead = true;
        op->dead_err = err;
        return;
    }
    op_finish(b, op, err);
}

/* ---- connection ---- */

static void log_down(struct nfsb *b, const char *why)
{
    int64_t now = sk_mono_us();
    if (!b->down_since_us)
        b->down_since_us = now;
    if (now - b->warned_us >= 5000000) {
        b->warned_us = now;
        SK_WARN("wal_nfs", "NFS server %s:%s unreachable (%s); reconnecting", b->server,
                b->mount_path, why && *why ? why : "connection lost");
    }
}

static void schedule_reconnect(struct nfsb *b)
{
    if (b->destroying || event_pending(b->retry_ev, EV_TIMEOUT, NULL))
        return;
    struct timeval tv = {b->backoff_ms / 1000, (b->backoff_ms % 1000) * 1000};
    event_add(b->retry_ev, &tv);
    b->backoff_ms = b->backoff_ms * 2 > RECONNECT_MAX_MS ? RECONNECT_MAX_MS : b->backoff_ms * 2;
}

static void unsure_add(struct nfsb *b, uint64_t seg)
{
    for (int i = 0; i < b->nunsure; i++)
        if (b->unsure[i] == seg)
            return;
    if (b->nunsure == UNSURE_MAX) {
        memmove(b->unsure, b->unsure + 1, (UNSURE_MAX - 1) * sizeof *b->unsure);
        b->nunsure--;
    }
    b->unsure[b->nunsure++] = seg;
}

static bool unsure_take(struct nfsb *b, uint64_t seg)
{
    for (int i = 0; i < b->nunsure; i++)
        if (b->unsure[i] == seg) {
            b->unsure[i] = b->unsure[--b->nunsure];
            return true;
        }
    return false;
}

/* The connection is unusable: fail what is in flight (transiently), drop
 * the context (later: we may be inside one of its callbacks), reconnect. */
static void conn_fail(struct nfsb *b, const char *why)
{
    if (b->cstate == C_DOWN)
        return;
    log_down(b, why);
    b->cstate = C_DOWN;
    b->gen++;
    if (b->fd >= 0)
        event_del(b->io_ev);
    b->fd = -1;
    if (b->nfs) {
        if (b->ndead < (int)(sizeof b->dead / sizeof b->dead[0])) {
            b->dead[b->ndead++] = b->nfs;
            if (!b->destroying)
                event_active(b->reap_ev, EV_TIMEOUT, 1);
        } else if (!b->in_service) {
            nfs_destroy_context(b->nfs);
        }
        b->nfs = NULL;
    }
    while (b->active) {
        struct aop *op = b->active;
        if (op->kind == K_CREATE)
            unsure_add(b, op->seg);
        op_finish(b, op, SK_ERR_TIMEOUT);
    }
    while (b->waiting)
        op_finish(b, b->waiting, SK_ERR_TIMEOUT);
    b->writes_inflight = 0;
    schedule_reconnect(b);
}

static struct req *req_new(struct nfsb *b, struct aop *op, int chunk)
{
    struct req *r = malloc(sizeof *r);
    if (!r)
        abort();
    r->b = b;
    r->op = op;
    r->gen = b->gen;
    r->chunk = chunk;
    return r;
}

/* Takes r (freed); its op when the RPC belongs to the live connection. */
static struct aop *req_take(struct req *r, struct nfsb **bp)
{
    struct nfsb *b = r->b;
    bool live = r->gen == b->gen && b->cstate != C_DOWN && !b->destroying;
    struct aop *op = r->op;
    free(r);
    *bp = b;
    if (!live)
        return NULL;
    if (b->fault_drop && ++b->nreplies % (uint64_t)b->fault_drop == 0) {
        conn_fail(b, "fault_drop");
        return NULL;
    }
    return op;
}

static void closed_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
    (void)err;
    (void)nfs;
    (void)data;
    (void)priv;
}

static void dir_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
    struct nfsb *b;
    struct req *r = priv;
    bool live = r->gen == r->b->gen && r->b->cstate == C_CONNECTING && !r->b->destroying;
    b = r->b;
    free(r);
    if (!live) {
        if (!err)
            nfs_close_async(nfs, data, closed_cb, NULL);
        return;
    }
    if (err) {
        conn_fail(b, nfs_get_error(nfs));
        return;
    }
    struct nfsfh *fh = data;
    bool ok = fh_set(&b->dirfh, raw_fh(fh));
    nfs_close_async(nfs, fh, closed_cb, NULL);
    if (!ok) {
        conn_fail(b, "the server's directory handle is too large");
        return;
    }
    b->wtmax = nfs_get_writemax(nfs);
    if (b->wtmax == 0 || b->wtmax > (1u << 20))
        b->wtmax = 1u << 20;
    b->cstate = C_UP;
    b->backoff_ms = RECONNECT_MIN_MS;
    if (b->down_since_us) {
        SK_WARN("wal_nfs", "NFS server %s:%s reachable again after %lld ms", b->server,
                b->mount_path, (long long)((sk_mono_us() - b->down_since_us) / 1000));
        b->down_since_us = 0;
        b->warned_us = 0;
    }
    while (b->waiting) {
        struct aop *op = b->waiting;
        list_remove(&b->waiting, &b->waiting_tail, op);
        start_op(b, op);
    }
}

static void mount_cb(int err, struct nfs_context *nfs, void *data, void *priv)
{
    (void)data;
    struct req *r = priv;
    struct nfsb *b = r->b;
    bool live = r->gen == b->gen && b->cstate == C_CONNECTING && !b->destroying;
    if (!live) {
        free(r);
        return;
    }
    if (err) {
        free(r);
        conn_fail(b, nfs_get_error(nfs));
        return;
    }
    if (nfs_open_async(nfs, *b->rel ? b->rel : "/", O_RDONLY, dir_cb, r) != 0) {
        free(r);
        conn_fail(b, nfs_get_error(nfs));
    }
}

static void reconnect(struct nfsb *b)
{
    if (b->cstate != C_DOWN || b->destroying)
        return;
    b->nfs = ctx_new(b);
    if (!b->nfs) {
        schedule_reconnect(b);
        return;
    }
    b->cstate = C_CONNECTING;
    b->connect_start_us = sk_mono_us();
    struct req *r = req_new(b, NULL, 0);
    if (nfs_mount_async(b->nfs, b->server, b->mount_path, mount_cb, r) != 0) {
        free(r);
        conn_fail(b, nfs_get_error(b->nfs));
        return;
    }
    update_io(b);
}

/* ---- the loop context: operations ---- */

static int nfs_status_err(nfsstat3 st)
{
    switch (st) {
    case NFS3_OK:
        return 0;
    case NFS3ERR_JUKEBOX:
    case NFS3ERR_NOSPC:
    case NFS3ERR_DQUOT:
    case NFS3ERR_SERVERFAULT:
        return SK_ERR_AGAIN;
    case NFS3ERR_NOENT:
        return SK_ERR_NOENT;
    case NFS3ERR_EXIST:
        return SK_ERR_EXIST;
    default:
        return SK_ERR_IO;
    }
}

static void op_nfs_error(struct nfsb *b, struct aop *op, const char *what, nfsstat3 st)
{
    int e = nfs_status_err(st);
    sk_log(e == SK_ERR_AGAIN ? SK_LOG_WARN : SK_LOG_ERROR, "wal_nfs",
           "%s of %llu: %s", what, (unsigned long long)op->seg, nfsstat3_to_str(st));
    op_fail(b, op, e == SK_ERR_NOENT || e == SK_ERR_EXIST ? SK_ERR_IO : e);
}

static struct fhent *fh_find(struct nfsb *b, uint64_t seg)
{
    for (int i = 0; i < FH_CACHE; i++)
        if (b->fhs[i].used && b->fhs[i].seg == seg)
            return &b->fhs[i];
    return NULL;
}

static void fh_put(struct nfsb *b, uint64_t seg, const struct fh *fh)
{
    struct fhent *e = fh_find(b, seg);
    if (!e)
        e = &b->fhs[b->fhnext++ % FH_CACHE];
    e->seg = seg;
    e->fh = *fh;
    e->used = true;
}

static void fh_forget(struct nfsb *b, uint64_t seg)
{
    struct fhent *e = fh_find(b, seg);
    if (e)
        e->used = false;
}

static void op_name(struct aop *op, uint64_t id, char *buf)
{
    if (op->kind == K_RENEW)
        wal_owner_name(id, buf, WAL_SEGMENT_NAME_MAX);
    else
        wal_segment_name(id, buf, WAL_SEGMENT_NAME_MAX);
}

static void send_chunks(struct nfsb *b, struct aop *op);
static void lookup_cb(struct rpc_context *rpc, int status, void *data, void *priv);

static void send_lookup(struct nfsb *b, struct aop *op, uint64_t id)
{
    char name[WAL_SEGMENT_NAME_MAX];
    op_name(op, id, name);
    LOOKUP3args a;
    memset(&a, 0, sizeof a);
    a.what.dir = fh3(&b->dirfh);
    a.what.name = name;
    struct req *r = req_new(b, op, 0);
    if (rpc_nfs3_lookup_async(nfs_get_rpc_context(b->nfs), lookup_cb, &a, r) != 0) {
        free(r);
        conn_fail(b, "cannot queue LOOKUP");
    }
}

static void write_cb(struct rpc_context *rpc, int status, void *data, void *priv);
static void commit_cb(struct rpc_context *rpc, int status, void *data, void *priv);

static void send_commit(struct nfsb *b, struct aop *op)
{
    COMMIT3args a;
    memset(&a, 0, sizeof a);
    a.file = fh3(&op->fh);
    a.offset = op->off;
    uint64_t len = 0;
    for (int i = 0; i < op->nch; i++)
        len += op->ch[i].len;
    /* COMMIT counts are 32 bits; 0 means "to the end of the file". */
    a.count = len > 0xffffffffu ? 0 : (count3)len;
    op->committing = true;
    struct req *r = req_new(b, op, 0);
    if (rpc_nfs3_commit_async(nfs_get_rpc_context(b->nfs), commit_cb, &a, r) != 0) {
        free(r);
        conn_fail(b, "cannot queue COMMIT");
    }
}

static void send_chunks(struct nfsb *b, struct aop *op)
{
    if (op->dead)
        return;
    for (int i = 0; i < op->nch && b->writes_inflight < b->depth && b->cstate == C_UP; i++) {
        struct chunk *c = &op->ch[i];
        if (c->sent || c->done)
            continue;
        WRITE3args a;
        memset(&a, 0, sizeof a);
        a.file = fh3(&op->fh);
        a.offset = c->off;
        a.count = c->len;
        a.stable = op->filesync ? FILE_SYNC : UNSTABLE;
        a.data.data_len = c->len;
        a.data.data_val = c->data;
        c->sent = true;
        op->inflight++;
        b->writes_inflight++;
        struct req *r = req_new(b, op, i);
        if (rpc_nfs3_write_async(nfs_get_rpc_context(b->nfs), write_cb, &a, r) != 0) {
            free(r);
            conn_fail(b, "cannot queue WRITE");
            return;
        }
    }
}

/* Every chunk written: done if each went FILE_SYNC, else COMMIT. */
static void chunks_written(struct nfsb *b, struct aop *op)
{
    bool all_sync = true;
    for (int i = 0; i < op->nch; i++)
        all_sync = all_sync && op->ch[i].filesync;
    if (all_sync || op->nch == 0) {
        op_finish(b, op, 0);
        return;
    }
    send_commit(b, op);
}

static void resend_all(struct nfsb *b, struct aop *op, const char *why)
{
    if (++op->resends > VERIFIER_RESENDS) {
        SK_WARN("wal_nfs", "%s %d times for %llu: failing the write for now", why, op->resends,
                (unsigned long long)op->seg);
        op_finish(b, op, SK_ERR_TIMEOUT);
        return;
    }
    SK_INFO("wal_nfs", "%s: writing %d pieces of %llu at offset %llu again", why, op->nch,
            (unsigned long long)op->seg, (unsigned long long)op->off);
    for (int i = 0; i < op->nch; i++) {
        struct chunk *c = &op->ch[i];
        c->off = c->off0;
        c->len = c->len0;
        c->data = c->data0;
        c->sent = c->done = c->filesync = c->unstable = c->has_verf = false;
    }
    op->committing = false;
    send_chunks(b, op);
}

static void commit_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
    (void)rpc;
    struct nfsb *b;
    struct aop *op = req_take(priv, &b);
    if (!op)
        return;
    if (status != RPC_STATUS_SUCCESS) {
        conn_fail(b, status == RPC_STATUS_TIMEOUT ? "COMMIT timed out" : "COMMIT failed");
        return;
    }
    COMMIT3res *res = data;
    op->committing = false;
    if (res->status != NFS3_OK) {
        op_nfs_error(b, op, "COMMIT", res->status);
        return;
    }
    char verf[NFS3_WRITEVERFSIZE];
    memcpy(verf, res->COMMIT3res_u.resok.verf, sizeof verf);
    if (b->fault_verf && ++b->ncommits % (uint64_t)b->fault_verf == 0)
        verf[0] ^= 0x5a;
    for (int i = 0; i < op->nch; i++) {
        if (!op->ch[i].filesync && memcmp(op->ch[i].verf, verf, sizeof verf) != 0) {
            resend_all(b, op, "write verifier changed before COMMIT (server restart)");
            return;
        }
    }
    op_finish(b, op, 0);
}

static void write_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
    (void)rpc;
    struct req *r = priv;
    int ci = r->chunk;
    struct nfsb *b;
    struct aop *op = req_take(r, &b);
    if (!op)
        return;
    b->writes_inflight--;
    op->inflight--;
    if (status != RPC_STATUS_SUCCESS) {
        conn_fail(b, status == RPC_STATUS_TIMEOUT ? "WRITE timed out" : "WRITE failed");
        return;
    }
    if (op->dead) {
        if (op->inflight == 0)
            op_finish(b, op, op->dead_err);
        return;
    }
    WRITE3res *res = data;
    struct chunk *c = &op->ch[ci];
    nfsstat3 st = res->status;
    if (b->fault_busy && ++b->nbusy % (uint64_t)b->fault_busy == 0)
        st = NFS3ERR_JUKEBOX;
    if (st != NFS3_OK) {
        if (st == NFS3ERR_STALE && op->kind == K_WRITE && op->step < 2) {
            /* The handle went stale (a server whose handles are volatile
             * restarted): once the other pieces are back, look it up again. */
            if (op->step == 0)
                fh_forget(b, op->seg);
            op->step = 1;
            op->have_fh = false;
            c->sent = false;
            if (op->inflight == 0)
                send_lookup(b, op, op->seg);
            return;
        }
        op_nfs_error(b, op, "WRITE", st);
        return;
    }
    uint32_t count = res->WRITE3res_u.resok.count;
    if (b->fault_short && ++b->nwrites % (uint64_t)b->fault_short == 0 && count > 1)
        count /= 2;
    if (count > c->len)
        count = c->len;
    const char *verf = res->WRITE3res_u.resok.verf;
    if (c->has_verf && memcmp(c->verf, verf, sizeof c->verf) != 0) {
        /* The parts of this piece carry different verifiers: the server
         * restarted between them and may have lost the first. */
        if (op->inflight == 0)
            resend_all(b, op, "write verifier changed between WRITEs (server restart)");
        else
            op_fail(b, op, SK_ERR_TIMEOUT);
        return;
    }
    memcpy(c->verf, verf, sizeof c->verf);
    c->has_verf = true;
    if (res->WRITE3res_u.resok.committed != FILE_SYNC)
        c->unstable = true;
    if (count < c->len) {
        if (count == 0) {
            SK_WARN("wal_nfs", "WRITE of %llu at %llu took nothing", (unsigned long long)op->seg,
                    (unsigned long long)c->off);
            op_fail(b, op, SK_ERR_AGAIN);
            return;
        }
        /* A short write: the rest goes again as the same chunk. A chunk
         * whose pieces carry different verifiers is caught at COMMIT by the
         * last one's; the earlier piece is then resent with everything. */
        c->off += count;
        c->len -= count;
        c->data += count;
        c->sent = false;
        if (op->step == 1) {
            if (op->inflight == 0)
                send_lookup(b, op, op->seg);
            return;
        }
        send_chunks(b, op);
        return;
    }
    c->done = true;
    c->filesync = !c->unstable;
    if (op->step == 1) {
        if (op->inflight == 0)
            send_lookup(b, op, op->seg);
        return;
    }
    int left = 0;
    for (int i = 0; i < op->nch; i++)
        left += !op->ch[i].done;
    if (left == 0 && op->inflight == 0) {
        chunks_written(b, op);
        return;
    }
    /* Other operations' chunks may go now too. */
    for (struct aop *x = b->active; x && b->writes_inflight < b->depth; x = x->next)
        if (x->kind == K_WRITE && x->have_fh && !x->committing)
            send_chunks(b, x);
}

static void create_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
    (void)rpc;
    struct nfsb *b;
    struct aop *op = req_take(priv, &b);
    if (!op)
        return;
    if (status != RPC_STATUS_SUCCESS) {
        conn_fail(b, status == RPC_STATUS_TIMEOUT ? "CREATE timed out" : "CREATE failed");
        return;
    }
    CREATE3res *res = data;
    bool again = unsure_take(b, op->seg);
    if (res->status == NFS3ERR_EXIST && again) {
        SK_INFO("wal_nfs", "segment %llu exists: created before the connection broke",
                (unsigned long long)op->seg);
        op_finish(b, op, 0);
        return;
    }
    if (res->status != NFS3_OK) {
        if (res->status == NFS3ERR_EXIST) {
            SK_ERROR("wal_nfs", "segment %llu already exists", (unsigned long long)op->seg);
            op_finish(b, op, SK_ERR_EXIST);
            return;
        }
        op_nfs_error(b, op, "CREATE", res->status);
        return;
    }
    post_op_fh3 *ofh = &res->CREATE3res_u.resok.obj;
    struct fh fh;
    if (ofh->handle_follows && fh_set(&fh, &ofh->post_op_fh3_u.handle))
        fh_put(b, op->seg, &fh);
    op_finish(b, op, 0);
}

static void remove_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
    (void)rpc;
    struct nfsb *b;
    struct aop *op = req_take(priv, &b);
    if (!op)
        return;
    if (status != RPC_STATUS_SUCCESS) {
        conn_fail(b, status == RPC_STATUS_TIMEOUT ? "REMOVE timed out" : "REMOVE failed");
        return;
    }
    REMOVE3res *res = data;
    fh_forget(b, op->seg);
    if (res->status != NFS3_OK && res->status != NFS3ERR_NOENT) {
        op_nfs_error(b, op, "REMOVE", res->status);
        return;
    }
    op_finish(b, op, 0);
}

static void begin_write(struct nfsb *b, struct aop *op)
{
    uint64_t len = 0;
    for (int i = 0; i < op->nch; i++)
        len += op->ch[i].len;
    op->filesync = op->nch == 1 && len <= b->filesync_max && len <= b->wtmax;
    send_chunks(b, op);
}

static void lookup_cb(struct rpc_context *rpc, int status, void *data, void *priv)
{
    (void)rpc;
    struct nfsb *b;
    struct aop *op = req_take(priv, &b);
    if (!op)
        return;
    if (status != RPC_STATUS_SUCCESS) {
        conn_fail(b, status == RPC_STATUS_TIMEOUT ? "LOOKUP timed out" : "LOOKUP failed");
        return;
    }
    LOOKUP3res *res = data;
    if (op->kind == K_RENEW && op->step < 2) {
        if (op->step == 0) {
            /* The next epoch's owner file must not exist. */
            if (res->status == NFS3_OK) {
                op_finish(b, op, SK_ERR_FENCED);
                return;
            }
            if (res->status != NFS3ERR_NOENT) {
                op_nfs_error(b, op, "LOOKUP", res->status);
                return;
            }
            op->step = 1;
            send_lookup(b, op, op->seg);
            return;
        }
        if (res->status == NFS3ERR_NOENT) {
            op_finish(b, op, SK_ERR_FENCED); /* our own file was removed */
            return;
        }
        if (res->status != NFS3_OK || !fh_set(&op->fh, &res->LOOKUP3res_u.resok.object)) {
            op_nfs_error(b, op, "LOOKUP", res->status == NFS3_OK ? NFS3ERR_BADHANDLE
                                                                   : res->status);
            return;
        }
        op->step = 2;
        op->have_fh = true;
        op->filesync = true;
        send_chunks(b, op);
        return;
    }
    if (res->status != NFS3_OK) {
        op_nfs_error(b, op, "LOOKUP", res->status);
        return;
    }
    if (!fh_set(&op->fh, &res->LOOKUP3res_u.resok.object)) {
        op_nfs_error(b, op, "LOOKUP", NFS3ERR_BADHANDLE);
        return;
    }
    fh_put(b, op->seg, &op->fh);
    op->have_fh = true;
    if (op->step == 1) {
        op->step = 2;
        for (int i = 0; i < op->nch; i++)
            if (!op->ch[i].done)
                op->ch[i].sent = false;
        send_chunks(b, op);
        return;
    }
    begin_write(b, op);
}

static void start_op(struct nfsb *b, struct aop *op)
{
    list_push(&b->active, &b->active_tail, op);
    char name[WAL_SEGMENT_NAME_MAX];
    switch (op->kind) {
    case K_CREATE: {
        wal_segment_name(op->seg, name, sizeof name);
        CREATE3args a;
        memset(&a, 0, sizeof a);
        a.where.dir = fh3(&b->dirfh);
        a.where.name = name;
        a.how.mode = GUARDED;
        a.how.createhow3_u.obj_attributes.mode.set_it = 1;
        a.how.createhow3_u.obj_attributes.mode.set_mode3_u.mode = 0644;
        struct req *r = req_new(b, op, 0);
        if (rpc_nfs3_create_async(nfs_get_rpc_context(b->nfs), create_cb, &a, r) != 0) {
            free(r);
            conn_fail(b, "cannot queue CREATE");
        }
        break;
    }
    case K_REMOVE: {
        wal_segment_name(op->seg, name, sizeof name);
        REMOVE3args a;
        memset(&a, 0, sizeof a);
        a.object.dir = fh3(&b->dirfh);
        a.object.name = name;
        struct req *r = req_new(b, op, 0);
        if (rpc_nfs3_remove_async(nfs_get_rpc_context(b->nfs), remove_cb, &a, r) != 0) {
            free(r);
            conn_fail(b, "cannot queue REMOVE");
        }
        break;
    }
    case K_RENEW:
        op->step = 0;
        send_lookup(b, op, op->seg + 1);
        break;
    case K_WRITE: {
        struct fhent *e = fh_find(b, op->seg);
        if (e) {
            op->fh = e->fh;
            op->have_fh = true;
            begin_write(b, op);
        } else {
            send_lookup(b, op, op->seg);
        }
        break;
    }
    }
}

/* Gives operations waiting for a WRITE slot their turn. */
static void pump(struct nfsb *b)
{
    if (b->cstate != C_UP)
        return;
    for (struct aop *x = b->active; x && b->writes_inflight < b->depth; x = x->next)
        if ((x->kind == K_WRITE || (x->kind == K_RENEW && x->step == 2)) && x->have_fh &&
            !x->committing)
            send_chunks(b, x);
}

static void submit(struct nfsb *b, struct aop *op)
{
    /* The first operation connects; so does one after a failure once the
     * backoff is over. */
    if (b->cstate == C_DOWN && !event_pending(b->retry_ev, EV_TIMEOUT, NULL))
        reconnect(b);
    if (b->cstate == C_UP) {
        start_op(b, op);
        flush_out(b);
        return;
    }
    if (b->cstate == C_CONNECTING) {
        list_push(&b->waiting, &b->waiting_tail, op);
        return;
    }
    /* Down: the caller retries after its backoff; meanwhile we reconnect. */
    op_finish(b, op, SK_ERR_TIMEOUT);
    schedule_reconnect(b);
}

static struct aop *aop_new(int kind, uint64_t seg, wal_io_cb cb, void *arg)
{
    struct aop *op = calloc(1, sizeof *op);
    if (!op)
        abort();
    op->kind = kind;
    op->seg = seg;
    op->cb = cb;
    op->arg = arg;
    return op;
}

static void nb_create(wal_storage *s, uint64_t seg, uint64_t size_hint, wal_io_cb cb, void *arg)
{
    (void)size_hint; /* NFSv3 has no way to reserve space */
    submit(s->impl, aop_new(K_CREATE, seg, cb, arg));
}

/* Cuts iov into chunks of at most max bytes. */
static void make_chunks(struct aop *op, uint64_t off, const struct iovec *iov, int iovcnt,
                        uint64_t max)
{
    int n = 0;
    for (int i = 0; i < iovcnt; i++)
        n += (int)((iov[i].iov_len + max - 1) / max);
    op->ch = calloc((size_t)(n ? n : 1), sizeof *op->ch);
    if (!op->ch)
        abort();
    uint64_t at = off;
    for (int i = 0; i < iovcnt; i++) {
        for (size_t done = 0; done < iov[i].iov_len;) {
            size_t take = iov[i].iov_len - done < max ? iov[i].iov_len - done : (size_t)max;
            struct chunk *c = &op->ch[op->nch++];
            c->off = c->off0 = at;
            c->len = c->len0 = (uint32_t)take;
            c->data = c->data0 = (char *)iov[i].iov_base + done;
            at += take;
            done += take;
        }
    }
}

static void nb_write(wal_storage *s, uint64_t seg, uint64_t off, const struct iovec *iov,
                     int iovcnt, bool sync, wal_io_cb cb, void *arg)
{
    struct nfsb *b = s->impl;
    (void)sync; /* every write is made durable: the WAL only asks for that */
    struct aop *op = aop_new(K_WRITE, seg, cb, arg);
    op->off = off;
    make_chunks(op, off, iov, iovcnt, b->wtmax ? b->wtmax : (1u << 20));
    submit(b, op);
}

static void nb_remove(wal_storage *s, uint64_t seg, wal_io_cb cb, void *arg)
{
    submit(s->impl, aop_new(K_REMOVE, seg, cb, arg));
}

static void nb_renew(wal_storage *s, uint64_t epoch, const void *buf, size_t len, wal_io_cb cb,
                     void *arg)
{
    struct aop *op = aop_new(K_RENEW, epoch, cb, arg);
    struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
    make_chunks(op, 0, &iov, 1, 1u << 20);
    submit(s->impl, op);
}

/* A connection being set up is finished first: libnfs frees a pending
 * connect or mount only when it completes. Bounded by timeo. */
static void finish_connecting(struct nfsb *b)
{
    int64_t deadline = sk_mono_us() + (int64_t)b->timeo_ms * 1000;
    while (b->cstate == C_CONNECTING && b->nfs && sk_mono_us() < deadline) {
        struct pollfd pfd = {.fd = nfs_get_fd(b->nfs), .events = (short)nfs_which_events(b->nfs)};
        int r = poll(&pfd, 1, 50);
        struct nfs_context *nfs = b->nfs;
        b->in_service = true;
        int e = nfs_service(nfs, r > 0 ? pfd.revents : 0);
        b->in_service = false;
        if (e < 0)
            conn_fail(b, nfs_get_error(nfs));
    }
}

static void nb_destroy(wal_storage *s)
{
    if (!s)
        return;
    struct nfsb *b = s->impl;
    finish_connecting(b);
    b->destroying = true;
    /* The WAL waited for its operations; whatever is left gave up. */
    while (b->active)
        op_finish(b, b->active, SK_ERR_CLOSED);
    while (b->waiting)
        op_finish(b, b->waiting, SK_ERR_CLOSED);
    done_cb(-1, 0, b);
    b->gen++;
    if (b->nfs)
        nfs_destroy_context(b->nfs);
    b->nfs = NULL;
    reap_cb(-1, 0, b);
    for (int i = 0; i < b->npool; i++)
        sctx_drop(&b->pool[i]);
    struct event *evs[] = {b->io_ev, b->tick_ev, b->retry_ev, b->done_ev, b->reap_ev};
    for (size_t i = 0; i < sizeof evs / sizeof evs[0]; i++)
        if (evs[i])
            event_free(evs[i]);
    pthread_mutex_destroy(&b->pool_mu);
    pthread_cond_destroy(&b->pool_cv);
    free(b->url);
    free(b->server);
    free(b->mount_path);
    free(b->rel);
    free(b);
}

static int nb_max_writes(wal_storage *s)
{
    return ((struct nfsb *)s->impl)->pipeline;
}

static const wal_storage_ops nfs_ops = {
    .name = "nfs",
    .list = nb_list,
    .size = nb_size,
    .pread = nb_pread,
    .truncate = nb_truncate,
    .create = nb_create,
    .write = nb_write,
    .remove = nb_remove,
    .discard = nb_discard,
    .owner_list = nb_owner_list,
    .owner_read = nb_owner_read,
    .owner_create = nb_owner_create,
    .owner_put = nb_owner_put,
    .owner_remove = nb_owner_remove,
    .renew = nb_renew,
    .lock = nb_lock,
    .max_writes = nb_max_writes,
    .destroy = nb_destroy,
};

/* ---- set-up ---- */

static bool mount_refused(int e)
{
    return e == -ENOENT || e == -EACCES || e == -ENOTDIR || e == -EPERM;
}

/* Mounts the deepest existing prefix of the URL's path, creates the rest,
 * and mounts the whole path when the server allows it (else files are
 * named through the rest, relative to the prefix). */
static int discover(struct nfsb *b, char *why, size_t wl)
{
    char *full = strdup(b->mount_path);
    if (!full)
        return SK_ERR_NOMEM;
    size_t len = strlen(full);
    size_t cut = len; /* full[0, cut) is the prefix tried */
    struct nfs_context *nfs = NULL;
    int rc = 0;
    for (;;) {
        char save = full[cut];
        full[cut] = 0;
        nfs = ctx_new(b);
        if (!nfs) {
            rc = SK_ERR_NOMEM;
            break;
        }
        int e = nfs_mount(nfs, b->server, cut ? full : "/");
        full[cut] = save;
        if (e == 0)
            break;
        if (!mount_refused(e) || cut == 0) {
            snprintf(why, wl, "cannot mount %s:%s: %s", b->server, b->mount_path,
                     nfs_get_error(nfs));
            nfs_destroy_context(nfs);
            nfs = NULL;
            rc = SK_ERR_IO;
            break;
        }
        nfs_destroy_context(nfs);
        nfs = NULL;
        while (cut > 0 && full[cut - 1] != '/')
            cut--;
        if (cut > 0)
            cut--; /* drop the slash too */
    }
    if (rc) {
        free(full);
        return rc;
    }
    if (cut < len) {
        /* Create the missing directories under the mounted prefix. */
        for (size_t i = cut + 1; i <= len; i++) {
            if (full[i] != '/' && full[i] != 0)
                continue;
            char save = full[i];
            full[i] = 0;
            int e = nfs_mkdir(nfs, full + cut);
            full[i] = save;
            if (e && e != -EEXIST) {
                snprintf(why, wl, "cannot create %s on %s: %s", b->mount_path, b->server,
                         nfs_get_error(nfs));
                rc = SK_ERR_IO;
                break;
            }
        }
    }
    if (!rc && cut < len) {
        struct nfs_context *whole = ctx_new(b);
        if (whole && nfs_mount(whole, b->server, b->mount_path) == 0) {
            nfs_destroy_context(nfs);
            nfs = whole;
            b->rel = strdup("");
        } else {
            if (whole)
                nfs_destroy_context(whole);
            b->rel = strdup(full + cut);
            full[cut] = 0;
            free(b->mount_path);
            b->mount_path = strdup(cut ? full : "/");
        }
    } else if (!rc) {
        b->rel = strdup("");
    }
    free(full);
    if (rc || !b->rel || !b->mount_path) {
        if (nfs)
            nfs_destroy_context(nfs);
        return rc ? rc : SK_ERR_NOMEM;
    }
    /* The first context of the pool. */
    no_delay(nfs_get_fd(nfs));
    b->pool[0].nfs = nfs;
    b->npool = 1;
    b->wtmax = nfs_get_writemax(nfs);
    if (b->wtmax == 0 || b->wtmax > (1u << 20))
        b->wtmax = 1u << 20;
    return 0;
}

int wal_nfs_check_url(const char *url, char *why, size_t whylen)
{
    struct nfsb b = {0};
    int rc = parse_url(&b, url, why, whylen);
    free(b.server);
    free(b.mount_path);
    return rc;
}

wal_storage *wal_nfs_new(struct event_base *base, const char *url, char *why, size_t whylen)
{
    struct nfsb *b = calloc(1, sizeof *b);
    if (!b) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    b->evb = base;
    b->fd = -1;
    b->cstate = C_DOWN;
    b->backoff_ms = RECONNECT_MIN_MS;
    pthread_mutex_init(&b->pool_mu, NULL);
    pthread_cond_init(&b->pool_cv, NULL);
    b->url = strdup(url);
    b->io_ev = event_new(base, -1, 0, io_cb, b);
    b->tick_ev = event_new(base, -1, EV_PERSIST, tick_cb, b);
    b->retry_ev = event_new(base, -1, 0, retry_cb, b);
    b->done_ev = event_new(base, -1, 0, done_cb, b);
    b->reap_ev = event_new(base, -1, 0, reap_cb, b);
    b->base.ops = &nfs_ops;
    b->base.impl = b;
    int rc = b->url && b->io_ev && b->tick_ev && b->retry_ev && b->done_ev && b->reap_ev
                 ? parse_url(b, url, why, whylen)
                 : SK_ERR_NOMEM;
    if (!rc)
        rc = discover(b, why, whylen);
    if (rc) {
        if (rc == SK_ERR_NOMEM)
            snprintf(why, whylen, "out of memory");
        nb_destroy(&b->base);
        return NULL;
    }
    if (b->filesync_max > b->wtmax)
        b->filesync_max = b->wtmax;
    struct timeval tv = {0, 100000};
    event_add(b->tick_ev, &tv);
    SK_INFO("wal_nfs", "NFSv3 %s mounted %s%s (wtmax %llu, FILE_SYNC up to %llu bytes, %d WRITEs in "
            "flight, %d group commits in flight, timeo %d ms)",
            b->server, b->mount_path, b->rel, (unsigned long long)b->wtmax,
            (unsigned long long)b->filesync_max, b->depth, b->pipeline, b->timeo_ms);
    return &b->base;
}
