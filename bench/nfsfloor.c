/*
 * nfsfloor: what an NFSv3 server can do for a write-ahead log, measured from
 * userspace with libnfs (the client the WAL's nfs:// backend uses). It is the
 * floor that produce figures with the WAL on NFS are compared against.
 *
 *   commit    write 4 KiB at the end of a new file (WRITE UNSTABLE), then
 *             COMMIT that range, N times: the latency of one durable small
 *             append, two round trips;
 *   filesync  the same 4 KiB appends as one WRITE FILE_SYNC each: one round
 *             trip, the server syncs before it answers;
 *   seq       1 MiB WRITE UNSTABLE (split at the server's wtmax, every piece
 *             in flight at once), then COMMIT, again and again for S seconds:
 *             the bandwidth ceiling of a log that commits every MiB.
 *
 * Usage: nfsfloor --url nfs://host/export/dir?version=3&nfsport=P&mountport=M
 *                 [--iterations N] [--seq-seconds S] [--block BYTES]
 *
 * The directory in the URL must exist. Prints one JSON object on stdout;
 * files are created there and removed at the end. Every loop is bounded by a
 * count and by time. Blocking: a private poll loop on one libnfs context.
 */
#include "hdr.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

/* libnfs.h first: the other two need its definitions. */
#include <nfsc/libnfs.h>
#include <nfsc/libnfs-raw.h>
#include <nfsc/libnfs-raw-nfs.h>

static const char *url;
static long iterations = 2000;
static long block = 4096;
static double seq_seconds = 5;
static long seq_write = 1 << 20;
static double max_seconds = 60;

static struct nfs_context *nfs;
static struct rpc_context *rpc;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what)
{
    fprintf(stderr, "nfsfloor: %s: %s\n", what, nfs ? nfs_get_error(nfs) : "");
    exit(1);
}

/* One outstanding RPC: done when its callback ran. */
struct call {
    bool done;
    bool ok;
    uint32_t count;     /* WRITE: bytes the server took */
    int committed;      /* WRITE: stable_how of the reply */
    char verf[NFS3_WRITEVERFSIZE];
};

static void service(void)
{
    struct pollfd pfd = {.fd = nfs_get_fd(nfs), .events = (short)nfs_which_events(nfs)};
    int r = poll(&pfd, 1, 100);
    if (r < 0 && errno != EINTR)
        die("poll");
    if (nfs_service(nfs, r > 0 ? pfd.revents : 0) < 0)
        die("nfs_service");
}

static void wait_calls(struct call *c, int n)
{
    int64_t deadline = now_ns() + (int64_t)(max_seconds * 1e9);
    for (;;) {
        int left = 0;
        for (int i = 0; i < n; i++)
            left += !c[i].done;
        if (!left)
            break;
        if (now_ns() > deadline) {
            fprintf(stderr, "nfsfloor: no answer from the server\n");
            exit(1);
        }
        service();
    }
    for (int i = 0; i < n; i++)
        if (!c[i].ok) {
            fprintf(stderr, "nfsfloor: an RPC failed: %s\n", nfs_get_error(nfs));
            exit(1);
        }
}

static void write_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    (void)r;
    struct call *c = priv;
    c->done = true;
    WRITE3res *res = data;
    if (status == RPC_STATUS_SUCCESS && res->status == NFS3_OK) {
        c->ok = true;
        c->count = res->WRITE3res_u.resok.count;
        c->committed = res->WRITE3res_u.resok.committed;
        memcpy(c->verf, res->WRITE3res_u.resok.verf, sizeof c->verf);
    }
}

static void commit_cb(struct rpc_context *r, int status, void *data, void *priv)
{
    (void)r;
    struct call *c = priv;
    COMMIT3res *res = data;
    c->done = true;
    c->ok = status == RPC_STATUS_SUCCESS && res->status == NFS3_OK;
    if (c->ok)
        memcpy(c->verf, res->COMMIT3res_u.resok.verf, sizeof c->verf);
}

/* libnfs keeps struct nfs_fh opaque; nfs_get_fh exists so that raw calls can
 * use a file opened with nfs_open, and its layout is that of nfs_fh3. */
static nfs_fh3 *raw_fh(struct nfsfh *f)
{
    return (nfs_fh3 *)(void *)nfs_get_fh(f);
}

static void send_write(nfs_fh3 *fh, uint64_t off, const unsigned char *buf, uint32_t len,
                       stable_how how, struct call *c)
{
    WRITE3args a;
    memset(&a, 0, sizeof a);
    a.file = *fh;
    a.offset = off;
    a.count = len;
    a.stable = how;
    a.data.data_len = len;
    a.data.data_val = (char *)buf;
    memset(c, 0, sizeof *c);
    if (rpc_nfs3_write_async(rpc, write_cb, &a, c) != 0)
        die("WRITE");
}

static void send_commit(nfs_fh3 *fh, uint64_t off, uint32_t len, struct call *c)
{
    COMMIT3args a;
    memset(&a, 0, sizeof a);
    a.file = *fh;
    a.offset = off;
    a.count = len;
    memset(c, 0, sizeof *c);
    if (rpc_nfs3_commit_async(rpc, commit_cb, &a, c) != 0)
        die("COMMIT");
}

static struct nfsfh *create_file(const char *tag, char *path, size_t plen)
{
    snprintf(path, plen, "/nfsfloor-%s.%ld", tag, (long)getpid());
    struct nfsfh *fh;
    if (nfs_open2(nfs, path, O_CREAT | O_EXCL | O_RDWR, 0644, &fh) != 0)
        die("create");
    return fh;
}

static void fill(unsigned char *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

/* 4 KiB appends: one WRITE+COMMIT, or one WRITE FILE_SYNC, each. */
static void small_appends(const char *tag, bool filesync, FILE *out)
{
    char path[256];
    struct nfsfh *f = create_file(tag, path, sizeof path);
    nfs_fh3 *fh = raw_fh(f);
    unsigned char *buf = malloc((size_t)block);
    hdr_t *h = hdr_new();
    if (!buf || !h)
        die("out of memory");
    int64_t t0 = now_ns(), stop = t0 + (int64_t)(max_seconds * 1e9);
    long i;
    for (i = 0; i < iterations && now_ns() < stop; i++) {
        fill(buf, (size_t)block, (uint64_t)i + 1);
        uint64_t off = (uint64_t)i * (uint64_t)block;
        struct call w, c;
        int64_t s = now_ns();
        send_write(fh, off, buf, (uint32_t)block, filesync ? FILE_SYNC : UNSTABLE, &w);
        wait_calls(&w, 1);
        if (w.count != (uint32_t)block) {
            fprintf(stderr, "nfsfloor: short WRITE (%u of %ld bytes)\n", w.count, block);
            exit(1);
        }
        if (filesync) {
            if (w.committed != FILE_SYNC) {
                fprintf(stderr, "nfsfloor: FILE_SYNC WRITE answered as %d\n", w.committed);
                exit(1);
            }
        } else {
            send_commit(fh, off, (uint32_t)block, &c);
            wait_calls(&c, 1);
        }
        hdr_record(h, (now_ns() - s) / 1000);
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    fprintf(out, "\"%s\":{\"iterations\":%ld,\"bytes\":%ld,\"seconds\":%.3f,\"latency\":", tag, i,
            block, secs);
    hdr_json(h, out);
    fprintf(out, "}");
    nfs_close(nfs, f);
    nfs_unlink(nfs, path);
    hdr_destroy(h);
    free(buf);
}

/* 1 MiB WRITEs (pieces of wtmax, all in flight) + COMMIT, for seq_seconds. */
static void sequential(FILE *out)
{
    char path[256];
    struct nfsfh *f = create_file("seq", path, sizeof path);
    nfs_fh3 *fh = raw_fh(f);
    uint64_t wmax = nfs_get_writemax(nfs);
    if (wmax == 0 || wmax > (uint64_t)seq_write)
        wmax = (uint64_t)seq_write;
    int pieces = (int)(((uint64_t)seq_write + wmax - 1) / wmax);
    unsigned char *buf = malloc((size_t)seq_write);
    struct call *calls = calloc((size_t)pieces, sizeof *calls);
    hdr_t *h = hdr_new();
    if (!buf || !calls || !h)
        die("out of memory");
    fill(buf, (size_t)seq_write, 7);
    int64_t t0 = now_ns(), stop = t0 + (int64_t)(seq_seconds * 1e9);
    uint64_t off = 0;
    long n = 0;
    while (now_ns() < stop) {
        int64_t s = now_ns();
        for (int i = 0; i < pieces; i++) {
            uint64_t po = (uint64_t)i * wmax;
            uint64_t pl = (uint64_t)seq_write - po < wmax ? (uint64_t)seq_write - po : wmax;
            send_write(fh, off + po, buf + po, (uint32_t)pl, UNSTABLE, &calls[i]);
        }
        wait_calls(calls, pieces);
        struct call c;
        send_commit(fh, off, (uint32_t)seq_write, &c);
        wait_calls(&c, 1);
        hdr_record(h, (now_ns() - s) / 1000);
        off += (uint64_t)seq_write;
        n++;
    }
    double secs = (double)(now_ns() - t0) / 1e9;
    fprintf(out,
            "\"seq\":{\"writes\":%ld,\"write_bytes\":%ld,\"wtmax\":%llu,\"total_bytes\":%llu,"
            "\"seconds\":%.3f,\"mb_s\":%.1f,\"latency\":",
            n, seq_write, (unsigned long long)wmax, (unsigned long long)off, secs,
            secs > 0 ? (double)off / 1e6 / secs : 0.0);
    hdr_json(h, out);
    fprintf(out, "}");
    nfs_close(nfs, f);
    nfs_unlink(nfs, path);
    hdr_destroy(h);
    free(calls);
    free(buf);
}

static void usage(void)
{
    fprintf(stderr, "usage: nfsfloor --url nfs://host/export/dir?version=3&nfsport=P&mountport=M\n"
                    "                [--iterations N] [--seq-seconds S] [--block BYTES]\n"
                    "                [--max-seconds S]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"url", required_argument, NULL, 'u'},
        {"iterations", required_argument, NULL, 'n'},
        {"seq-seconds", required_argument, NULL, 's'},
        {"block", required_argument, NULL, 'b'},
        {"max-seconds", required_argument, NULL, 'm'},
        {NULL, 0, NULL, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'u': url = optarg; break;
        case 'n': iterations = atol(optarg); break;
        case 's': seq_seconds = atof(optarg); break;
        case 'b': block = atol(optarg); break;
        case 'm': max_seconds = atof(optarg); break;
        default: usage();
        }
    }
    if (!url || iterations <= 0 || block <= 0 || block > (1 << 20) || seq_seconds < 0)
        usage();
    nfs = nfs_init_context();
    if (!nfs)
        die("nfs_init_context");
    struct nfs_url *u = nfs_parse_url_dir(nfs, url);
    if (!u || !u->server || !u->path)
        die("URL");
    nfs_set_timeout(nfs, 30000);
    if (nfs_mount(nfs, u->server, u->path) != 0)
        die("mount");
    rpc = nfs_get_rpc_context(nfs);
    /* As the WAL does: no Nagle delay for a WRITE sent while another is
     * unacknowledged (the sequential test keeps several in flight). */
    int one = 1;
    setsockopt(nfs_get_fd(nfs), IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    printf("{\"url\":\"%s\"", url);
    printf(",");
    small_appends("commit", false, stdout);
    printf(",");
    small_appends("filesync", true, stdout);
    if (seq_seconds > 0) {
        printf(",");
        sequential(stdout);
    }
    printf("}\n");
    nfs_destroy_url(u);
    nfs_destroy_context(nfs);
    return 0;
}
