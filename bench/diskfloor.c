/*
 * diskfloor: what the disk under a directory can do for a write-ahead log,
 * the floor that broker produce figures are compared against.
 *
 *   append     write 4 KiB at the end of a new file + fdatasync, N times
 *              (each sync also commits the new file size: the cost of a log
 *              that grows its file);
 *   overwrite  the same 4 KiB writes over a file that was fully written and
 *              synced beforehand (the cost of a log with preallocated segments);
 *   seq        1 MiB writes + fdatasync after each, for 10 s (the
 *              bandwidth ceiling of a synced log). The virtual disks here
 *              take the first few hundred MiB to a few GiB at ~1 GB/s (the
 *              host's cache) and then fall to the ~270 MB/s they sustain, so
 *              a short run measures the cache. Reported: the mean, the rate
 *              of the second half of the time (`sustained_mb_s`, the one to
 *              compare a long broker run with), and the slowest and fastest
 *              128 MiB windows;
 *   wakeup     not the disk: how late a thread wakes from a 1 ms timed sleep,
 *              the scheduling noise every latency measured on this machine
 *              also carries (shared or virtual CPUs show it in the tail).
 *   paced      (only when asked: --tests paced) records due at --rate per
 *              second from a schedule, as skload sends them, made durable
 *              like a group-committing log: each round appends one block +
 *              fdatasync for every record due by then, and each record's
 *              latency runs from its due time to the end of that sync. The
 *              floor of a broker's slow-rate p99 (compare.sh's (l)), the
 *              machine's wake-ups included; run it beside a load generator
 *              to see what the machine allows under that load.
 *
 * Prints one JSON object on stdout. Every loop is bounded by a count and by
 * --max-seconds. Files are created in --dir and removed at the end.
 */
#include "hdr.h"

#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <time.h>
#include <unistd.h>

static const char *dir;
static long iterations = 5000;
static long block = 4096;
static long seq_mib = 16384;
static double seq_seconds = 10;
static long seq_write = 1 << 20;
static double max_seconds = 60;
static char *tests = "append,overwrite,seq,wakeup";
static long wakeups = 2000;
static double rate = 2000;
static double paced_seconds = 10;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void die(const char *what, const char *path)
{
    fprintf(stderr, "diskfloor: %s %s: %s\n", what, path ? path : "", strerror(errno));
    exit(1);
}

static void fill_random(unsigned char *buf, size_t n, uint64_t seed)
{
    uint64_t x = seed | 1;
    for (size_t i = 0; i < n; i++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        buf[i] = (unsigned char)x;
    }
}

static void write_all(int fd, const unsigned char *buf, size_t n, off_t off, const char *path)
{
    while (n > 0) {
        ssize_t w = pwrite(fd, buf, n, off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            die("write", path);
        }
        buf += w;
        n -= (size_t)w;
        off += w;
    }
}

static const char *fs_name(long type)
{
    switch ((unsigned long)type) {
    case 0xEF53: return "ext4";
    case 0x58465342: return "xfs";
    case 0x9123683E: return "btrfs";
    case 0x01021994: return "tmpfs";
    case 0x6969: return "nfs";
    case 0x794C7630: return "overlay";
    case 0x2FC12FC1: return "zfs";
    case 0x65735546: return "fuse";
    default: return "other";
    }
}

static char *tmp_path(const char *tag)
{
    size_t n = strlen(dir) + 64;
    char *p = malloc(n);
    snprintf(p, n, "%s/diskfloor-%s.%ld", dir, tag, (long)getpid());
    return p;
}

/* A new file of test `tag` in --dir, open for writing (*fd), and a buffer of
 * n random bytes (*buf); test_file_done closes, removes and frees them. */
static char *test_file(const char *tag, size_t n, uint64_t seed, int *fd, unsigned char **buf)
{
    char *path = tmp_path(tag);
    *fd = open(path, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
    if (*fd < 0)
        die("open", path);
    *buf = malloc(n);
    fill_random(*buf, n, seed);
    return path;
}

static void test_file_done(char *path, int fd, unsigned char *buf)
{
    free(buf);
    close(fd);
    unlink(path);
    free(path);
}

/* Ends a test's JSON object with its latency histogram, which it frees. */
static void put_latency(hdr_t *h, FILE *out)
{
    hdr_json(h, out);
    fprintf(out, "}");
    hdr_destroy(h);
}

/* 4 KiB write + fdatasync; `prealloc` first writes and syncs the whole file. */
static void run_small(const char *name, int prealloc, FILE *out)
{
    int fd;
    unsigned char *buf;
    char *path = test_file(name, (size_t)block, 0x5eed, &fd, &buf);
    if (prealloc) {
        size_t chunk = 1 << 20;
        unsigned char *z = malloc(chunk);
        fill_random(z, chunk, 0xfeed);
        off_t total = (off_t)iterations * block;
        for (off_t off = 0; off < total; off += (off_t)chunk) {
            size_t n = total - off < (off_t)chunk ? (size_t)(total - off) : chunk;
            write_all(fd, z, n, off, path);
        }
        if (fsync(fd) < 0)
            die("fsync", path);
        free(z);
    }
    hdr_t *h = hdr_new();
    int64_t start = now_ns(), limit = start + (int64_t)(max_seconds * 1e9);
    long i;
    for (i = 0; i < iterations; i++) {
        /* New bytes each time, so no layer can skip an identical write. */
        memcpy(buf, &i, sizeof(i));
        int64_t t0 = now_ns();
        write_all(fd, buf, (size_t)block, (off_t)i * block, path);
        if (fdatasync(fd) < 0)
            die("fdatasync", path);
        int64_t t1 = now_ns();
        hdr_record(h, (t1 - t0 + 500) / 1000);
        if (t1 > limit) {
            i++;
            break;
        }
    }
    double secs = (double)(now_ns() - start) / 1e9;
    fprintf(out, "\"%s\":{\"iterations\":%ld,\"bytes\":%ld,\"seconds\":%.3f,\"latency\":",
            name, i, block, secs);
    put_latency(h, out);
    test_file_done(path, fd, buf);
}

static void run_seq(FILE *out)
{
    int fd;
    unsigned char *buf;
    char *path = test_file("seq", (size_t)seq_write, 0xbeef, &fd, &buf);
    long writes = (seq_mib << 20) / seq_write;
    if (writes < 1)
        writes = 1;
    hdr_t *h = hdr_new();
    /* Bandwidth per window of 128 MiB, for the report of phases. */
    long per_window = (128L << 20) / seq_write > 0 ? (128L << 20) / seq_write : 1;
    double wmin = 0, wmax = 0;
    int64_t start = now_ns(), wstart = start;
    int64_t until = start + (int64_t)(seq_seconds * 1e9);
    int64_t limit = start + (int64_t)(max_seconds * 1e9);
    int64_t half = start + (until - start) / 2; /* second half: the sustained rate */
    int64_t half_t = 0;
    long half_i = 0;
    long i;
    for (i = 0; i < writes; i++) {
        memcpy(buf, &i, sizeof(i));
        int64_t t0 = now_ns();
        write_all(fd, buf, (size_t)seq_write, (off_t)i * seq_write, path);
        if (fdatasync(fd) < 0)
            die("fdatasync", path);
        int64_t t1 = now_ns();
        hdr_record(h, (t1 - t0 + 500) / 1000);
        if (!half_t && t1 >= half) {
            half_t = t1;
            half_i = i + 1;
        }
        if ((i + 1) % per_window == 0) {
            double r = (double)per_window * (double)seq_write / ((double)(t1 - wstart) / 1e9) / 1e6;
            if (wmin == 0 || r < wmin)
                wmin = r;
            if (r > wmax)
                wmax = r;
            wstart = t1;
        }
        if (t1 >= until || t1 > limit) {
            i++;
            break;
        }
    }
    int64_t end = now_ns();
    double secs = (double)(end - start) / 1e9;
    double bytes = (double)i * (double)seq_write;
    double mbs = bytes / secs / 1e6;
    /* Ended by --seq-mib before half time: no second half, the mean stands in. */
    double sustained = half_t && end > half_t
                           ? (double)(i - half_i) * (double)seq_write / ((double)(end - half_t) / 1e9) / 1e6
                           : mbs;
    fprintf(out,
            "\"seq\":{\"write_bytes\":%ld,\"writes\":%ld,\"total_bytes\":%.0f,"
            "\"seconds\":%.3f,\"mb_s\":%.1f,\"mib_s\":%.1f,\"sustained_mb_s\":%.1f,"
            "\"window_mib\":%ld,\"window_min_mb_s\":%.1f,\"window_max_mb_s\":%.1f,\"latency\":",
            seq_write, i, bytes, secs, mbs, bytes / secs / 1048576.0, sustained,
            per_window * seq_write >> 20, wmin, wmax);
    put_latency(h, out);
    test_file_done(path, fd, buf);
}

static void sleep_until(int64_t due)
{
    struct timespec ts = {.tv_sec = due / 1000000000LL, .tv_nsec = due % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void run_wakeup(FILE *out)
{
    hdr_t *h = hdr_new();
    int64_t start = now_ns(), limit = start + (int64_t)(max_seconds * 1e9);
    long i;
    for (i = 0; i < wakeups; i++) {
        int64_t due = start + (i + 1) * 1000000LL;
        sleep_until(due);
        int64_t t = now_ns();
        hdr_record(h, (t - due) / 1000);
        if (t > limit) {
            i++;
            break;
        }
    }
    fprintf(out, "\"wakeup\":{\"iterations\":%ld,\"interval_ms\":1,\"latency\":", i);
    put_latency(h, out);
}

static void run_paced(FILE *out)
{
    int fd;
    unsigned char *buf;
    char *path = test_file("paced", (size_t)block, 0xface, &fd, &buf);
    hdr_t *h = hdr_new();
    double step = 1e9 / rate;
    int64_t start = now_ns(), until = start + (int64_t)(paced_seconds * 1e9);
    int64_t limit = start + (int64_t)(max_seconds * 1e9);
    long next = 0, rounds = 0;
    for (;;) {
        int64_t due = start + (int64_t)((double)next * step);
        if (due >= until || now_ns() > limit)
            break;
        sleep_until(due);
        /* Everything due by now goes into this round, as in a group commit. */
        long last = next + (long)((double)(now_ns() - due) / step);
        memcpy(buf, &rounds, sizeof(rounds));
        write_all(fd, buf, (size_t)block, (off_t)rounds * block, path);
        if (fdatasync(fd) < 0)
            die("fdatasync", path);
        int64_t t = now_ns();
        for (long i = next; i <= last; i++)
            hdr_record(h, (t - (start + (int64_t)((double)i * step))) / 1000);
        next = last + 1;
        rounds++;
    }
    fprintf(out, "\"paced\":{\"rate\":%.1f,\"records\":%ld,\"rounds\":%ld,\"bytes\":%ld,"
                 "\"seconds\":%.3f,\"latency\":",
            rate, next, rounds, block, (double)(now_ns() - start) / 1e9);
    put_latency(h, out);
    test_file_done(path, fd, buf);
}

static void usage(int rc)
{
    fprintf(rc ? stderr : stdout,
            "usage: diskfloor --dir DIR [options]\n"
            "  --dir DIR            directory on the disk to measure (the broker's data.dir disk)\n"
            "  --iterations N       4 KiB append / overwrite iterations (default 5000)\n"
            "  --block BYTES        size of the small writes (default 4096)\n"
            "  --seq-seconds S      duration of the sequential test (default 10)\n"
            "  --seq-mib N          at most N MiB written by it (default 16384)\n"
            "  --seq-write BYTES    size of each sequential write (default 1048576)\n"
            "  --max-seconds S      time bound of each test (default 60)\n"
            "  --wakeups N          timed 1 ms sleeps of the wakeup test (default 2000)\n"
            "  --tests LIST         comma list of append,overwrite,seq,wakeup (default),\n"
            "                       paced (only when named)\n"
            "  --rate N             records/s of the paced test (default 2000)\n"
            "  --paced-seconds S    duration of the paced test (default 10)\n");
    exit(rc);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"dir", required_argument, 0, 'd'},
        {"iterations", required_argument, 0, 'n'},
        {"block", required_argument, 0, 'b'},
        {"seq-mib", required_argument, 0, 'm'},
        {"seq-seconds", required_argument, 0, 'S'},
        {"seq-write", required_argument, 0, 'w'},
        {"max-seconds", required_argument, 0, 't'},
        {"tests", required_argument, 0, 'T'},
        {"wakeups", required_argument, 0, 'W'},
        {"rate", required_argument, 0, 'r'},
        {"paced-seconds", required_argument, 0, 'P'},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "d:n:b:m:S:w:t:T:W:r:P:h", opts, NULL)) != -1) {
        switch (c) {
        case 'd': dir = optarg; break;
        case 'n': iterations = atol(optarg); break;
        case 'b': block = atol(optarg); break;
        case 'm': seq_mib = atol(optarg); break;
        case 'S': seq_seconds = atof(optarg); break;
        case 'w': seq_write = atol(optarg); break;
        case 't': max_seconds = atof(optarg); break;
        case 'T': tests = optarg; break;
        case 'W': wakeups = atol(optarg); break;
        case 'r': rate = atof(optarg); break;
        case 'P': paced_seconds = atof(optarg); break;
        case 'h': usage(0); break;
        default: usage(2);
        }
    }
    if (!dir || iterations < 1 || block < 1 || seq_mib < 1 || seq_write < 1 || max_seconds <= 0 ||
        seq_seconds <= 0 || rate <= 0 || paced_seconds <= 0)
        usage(2);

    prctl(PR_SET_TIMERSLACK, 1000UL); /* as skload's sender: measure the kernel, not the slack */
    struct statfs sf;
    if (statfs(dir, &sf) < 0)
        die("statfs", dir);
    printf("{\"dir\":\"%s\",\"fs\":\"%s\",\"fs_type\":\"0x%lx\"", dir, fs_name((long)sf.f_type),
           (unsigned long)sf.f_type);
    if (strstr(tests, "append")) {
        printf(",");
        run_small("append", 0, stdout);
    }
    if (strstr(tests, "overwrite")) {
        printf(",");
        run_small("overwrite", 1, stdout);
    }
    if (strstr(tests, "seq")) {
        printf(",");
        run_seq(stdout);
    }
    if (strstr(tests, "wakeup") && wakeups > 0) {
        printf(",");
        run_wakeup(stdout);
    }
    if (strstr(tests, "paced")) {
        printf(",");
        run_paced(stdout);
    }
    printf("}\n");
    return 0;
}
