/*
 * POSIX backend of wal_storage: one file per segment in one directory.
 *
 * Asynchronous operations (create, write, remove) run in submission order on
 * one IO thread (an sk_workq with one thread), so the WAL's ordering holds
 * without extra locking. Open segments keep their fd in a table shared by
 * the IO thread, the loop thread (recovery) and worker threads (pread); a
 * reference count keeps an fd open while a reader uses it, even when the
 * segment is removed meanwhile.
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/magic.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/types.h>
#include <unistd.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "sk_workq.h"
#include "wal_storage.h"

/* Trimmed segments kept for reuse, at most. */
#define WAL_POSIX_SPARES 2
/* Zeroed at the start of a spare: the segment header and then some. */
#define SPARE_ZERO_BYTES 4096
/* Direct I/O: offsets, lengths and buffers aligned to this (the largest
 * logical block size in use), written in place when the WAL laid the
 * buffer out for it (write_placed), else through a bounce buffer this large. */
#define DIO_ALIGN 4096
#define BOUNCE_BYTES (1u << 20)
#define DIO_READ_MIN (256u << 10) /* smaller reads go through the page cache */
_Static_assert(DIO_ALIGN == WAL_WRITE_ROOM, "write_placed lays buffers out for these blocks");

struct segfd {
    uint64_t seg;
    int fd;        /* buffered: reads, truncation, preallocation */
    int dfd;       /* O_DIRECT, for the writes of a direct-I/O WAL; -1 until then */
    int refs;      /* readers and the IO thread currently using fd */
    bool removed;  /* unlinked: close fd once refs drops to zero */
};

struct posix {
    wal_storage base;
    char *dir;
    int dirfd;
    int lockfd;         /* the directory's lock file, -1 until lock */
    sk_workq *io;
    sk_workq *rm; /* removals, apart: freeing a large file's blocks takes tens of
                     milliseconds that commits must not wait behind */
    pthread_mutex_t mu; /* guards segs and spares */
    struct segfd **segs;
    size_t nsegs, cap;
    /* Recycling (docs/wal.md, "Recycled segments"): trimmed segments kept as
     * <start>.spare files, their header zeroed, for the next creates. Only
     * while holding the lock proves this process alone uses the directory. */
    bool recycle;
    uint64_t spares[WAL_POSIX_SPARES]; /* their former start LSNs, which name them */
    size_t nspares;
    /* Direct I/O (docs/wal.md, "Direct I/O"), IO thread only once writes
     * begin: writes go out in DIO_ALIGN blocks through a bounce buffer, the
     * block holding a write's end kept to start the next write with. */
    bool direct;
    atomic_bool direct_reads; /* direct, for readers on other threads (px_pread) */
    uint8_t *bounce;       /* BOUNCE_BYTES, DIO_ALIGN-aligned */
    uint64_t tail_seg;     /* the segment and offset of the kept block */
    uint64_t tail_at;      /* UINT64_MAX: none */
    size_t tail_len;       /* its bytes of data; the rest of it is zeros */
    uint8_t tail[DIO_ALIGN];
    const struct op *done_op; /* loop thread: the op whose callback runs now */
};

struct op {
    struct posix *p;
    uint64_t seg, off, hint; /* seg: the epoch for a renewal */
    struct iovec *iov;
    int iovcnt;
    bool sync;
    bool placed; /* one buffer laid out for direct I/O (write_placed) */
    wal_io_cb cb;
    void *arg;
    int err;
    int64_t queued_us, began_us, ended_us; /* writes: submitted, I/O began, synced */
};

char *wal_segment_name(uint64_t seg, char *buf, size_t len)
{
    snprintf(buf, len, "%020llu.wal", (unsigned long long)seg);
    return buf;
}

char *wal_owner_name(uint64_t epoch, char *buf, size_t len)
{
    snprintf(buf, len, "%020llu.owner", (unsigned long long)epoch);
    return buf;
}

static bool parse_numbered(const char *name, const char *suffix, uint64_t *out)
{
    uint64_t v = 0;
    for (int i = 0; i < 20; i++) {
        if (name[i] < '0' || name[i] > '9')
            return false;
        uint64_t d = (uint64_t)(name[i] - '0');
        if (v > (UINT64_MAX - d) / 10)
            return false;
        v = v * 10 + d;
    }
    if (strcmp(name + 20, suffix) != 0)
        return false;
    *out = v;
    return true;
}

bool wal_segment_parse(const char *name, uint64_t *seg)
{
    return parse_numbered(name, ".wal", seg);
}

bool wal_owner_parse(const char *name, uint64_t *epoch)
{
    return parse_numbered(name, ".owner", epoch);
}

static int errno_to_sk(int e)
{
    return e == ENOENT ? SK_ERR_NOENT : e == EEXIST ? SK_ERR_EXIST : SK_ERR_IO;
}

/* Index of seg in the table, or where to insert it. Caller holds mu. */
static size_t seg_index(struct posix *p, uint64_t seg, bool *found)
{
    size_t lo = 0, hi = p->nsegs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (p->segs[mid]->seg < seg)
            lo = mid + 1;
        else
            hi = mid;
    }
    *found = lo < p->nsegs && p->segs[lo]->seg == seg;
    return lo;
}

/* Inserts an entry for fd. Caller holds mu. */
static struct segfd *seg_insert(struct posix *p, size_t at, uint64_t seg, int fd)
{
    if (p->nsegs == p->cap) {
        size_t ncap = p->cap ? p->cap * 2 : 16;
        struct segfd **n = realloc(p->segs, ncap * sizeof *n);
        if (!n)
            return NULL;
        p->segs = n;
        p->cap = ncap;
    }
    struct segfd *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    e->seg = seg;
    e->fd = fd;
    e->dfd = -1;
    memmove(&p->segs[at + 1], &p->segs[at], (p->nsegs - at) * sizeof *p->segs);
    p->segs[at] = e;
    p->nsegs++;
    return e;
}

static void segfd_free(struct segfd *e)
{
    close(e->fd);
    if (e->dfd >= 0)
        close(e->dfd);
    free(e);
}

/* Takes a reference on seg's fd, opening the file when it has none yet.
 * With create, the file must not exist (O_EXCL). */
static int seg_get(struct posix *p, uint64_t seg, bool create, struct segfd **out)
{
    char name[WAL_SEGMENT_NAME_MAX];
    int rc = 0;
    pthread_mutex_lock(&p->mu);
    bool found;
    size_t at = seg_index(p, seg, &found);
    if (found) {
        if (create) {
            rc = SK_ERR_EXIST;
        } else {
            p->segs[at]->refs++;
            *out = p->segs[at];
        }
        goto out;
    }
    int flags = O_RDWR | O_CLOEXEC | (create ? O_CREAT | O_EXCL : 0);
    int fd;
    do
        fd = openat(p->dirfd, wal_segment_name(seg, name, sizeof name), flags, 0644);
    while (fd < 0 && errno == EINTR);
    if (fd < 0) {
        rc = errno_to_sk(errno);
        if (rc != SK_ERR_NOENT)
            SK_ERROR("wal_posix", "open %s/%s: %s", p->dir, name, strerror(errno));
        goto out;
    }
    struct segfd *e = seg_insert(p, at, seg, fd);
    if (!e) {
        close(fd);
        rc = SK_ERR_NOMEM;
        goto out;
    }
    e->refs = 1;
    *out = e;
out:
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static void seg_put(struct posix *p, struct segfd *e)
{
    pthread_mutex_lock(&p->mu);
    bool drop = --e->refs == 0 && e->removed;
    pthread_mutex_unlock(&p->mu);
    if (drop)
        segfd_free(e);
}

static int sync_dir(struct posix *p)
{
    if (fsync(p->dirfd) != 0) {
        SK_ERROR("wal_posix", "fsync directory %s: %s", p->dir, strerror(errno));
        return SK_ERR_IO;
    }
    return 0;
}

static int do_fsync(int fd, bool data_only)
{
    int r;
    do
        r = data_only ? fdatasync(fd) : fsync(fd);
    while (r != 0 && errno == EINTR);
    return r;
}

/* ---- blocking operations ---- */

/* On a kernel NFS mount, names and attributes come from the client's
 * caches (acdirmin..acdirmax, negative lookups included): asking the server
 * for the directory's attributes makes the client drop what changed. A
 * local file system does nothing here. */
static void refresh_dir(struct posix *p)
{
    struct statx sx;
    statx(p->dirfd, "", AT_EMPTY_PATH | AT_STATX_FORCE_SYNC, STATX_BASIC_STATS, &sx);
}

static int list_numbered(struct posix *p, bool (*parse)(const char *, uint64_t *),
                         uint64_t **starts, size_t *n)
{
    refresh_dir(p);
    *starts = NULL;
    *n = 0;
    int fd = dup(p->dirfd);
    if (fd < 0)
        return SK_ERR_IO;
    DIR *d = fdopendir(fd);
    if (!d) {
        close(fd);
        return SK_ERR_IO;
    }
    rewinddir(d);
    uint64_t *v = NULL;
    size_t cnt = 0, cap = 0;
    int rc = 0;
    struct dirent *de;
    errno = 0;
    while ((de = readdir(d)) != NULL) {
        uint64_t seg;
        if (!parse(de->d_name, &seg))
            continue;
        if (cnt == cap) {
            cap = cap ? cap * 2 : 16;
            uint64_t *nv = realloc(v, cap * sizeof *nv);
            if (!nv) {
                rc = SK_ERR_NOMEM;
                break;
            }
            v = nv;
        }
        v[cnt++] = seg;
    }
    if (!rc && errno != 0) {
        SK_ERROR("wal_posix", "readdir %s: %s", p->dir, strerror(errno));
        rc = SK_ERR_IO;
    }
    closedir(d);
    if (rc) {
        free(v);
        return rc;
    }
    /* Insertion sort: directories hold few segments, mostly in order. */
    for (size_t i = 1; i < cnt; i++) {
        uint64_t x = v[i];
        size_t j = i;
        while (j > 0 && v[j - 1] > x) {
            v[j] = v[j - 1];
            j--;
        }
        v[j] = x;
    }
    *starts = v;
    *n = cnt;
    return 0;
}

static int px_list(wal_storage *s, uint64_t **starts, size_t *n)
{
    return list_numbered(s->impl, wal_segment_parse, starts, n);
}

static int px_size(wal_storage *s, uint64_t seg, uint64_t *size)
{
    struct posix *p = s->impl;
    struct segfd *e;
    int rc = seg_get(p, seg, false, &e);
    if (rc)
        return rc;
    struct stat stt;
    if (fstat(e->fd, &stt) != 0) {
        SK_ERROR("wal_posix", "fstat segment %llu: %s", (unsigned long long)seg, strerror(errno));
        rc = SK_ERR_IO;
    } else {
        *size = (uint64_t)stt.st_size;
    }
    seg_put(p, e);
    return rc;
}

/* The descriptor a read of [off, off+len) into buf uses: a new O_DIRECT one
 * (the caller closes it) for whole aligned blocks of a WAL written with
 * O_DIRECT, whose pages are not in the page cache, so that a large read
 * (an upload reading back what the WAL cache no longer holds) is not copied
 * through it; else the segment's buffered one. */
static int read_fd(struct posix *p, const struct segfd *e, uint64_t off, const void *buf,
                   size_t len, bool *own)
{
    *own = false;
    if (len < DIO_READ_MIN || !atomic_load(&p->direct_reads) || off % DIO_ALIGN ||
        len % DIO_ALIGN || (uintptr_t)buf % DIO_ALIGN)
        return e->fd;
    char name[WAL_SEGMENT_NAME_MAX];
    int fd = openat(p->dirfd, wal_segment_name(e->seg, name, sizeof name),
                    O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (fd < 0)
        return e->fd; /* removed meanwhile: the open descriptor still reads it */
    *own = true;
    return fd;
}

static int px_pread(wal_storage *s, uint64_t seg, uint64_t off, void *buf, size_t len,
                    size_t *got)
{
    struct posix *p = s->impl;
    struct segfd *e;
    *got = 0;
    int rc = seg_get(p, seg, false, &e);
    if (rc)
        return rc;
    bool own;
    int fd = read_fd(p, e, off, buf, len, &own);
    size_t done = 0;
    while (done < len) {
        ssize_t n = pread(fd, (char *)buf + done, len - done, (off_t)(off + done));
        if (n < 0) {
            if (errno == EINTR)
                continue;
            SK_ERROR("wal_posix", "pread segment %llu at %llu: %s", (unsigned long long)seg,
                     (unsigned long long)(off + done), strerror(errno));
            rc = SK_ERR_IO;
            break;
        }
        if (n == 0)
            break;
        done += (size_t)n;
        if (own && done % DIO_ALIGN)
            break; /* the end of the file: no aligned offset to go on from */
    }
    if (own)
        close(fd);
    *got = done;
    seg_put(p, e);
    return rc;
}

static int px_truncate(wal_storage *s, uint64_t seg, uint64_t size)
{
    struct posix *p = s->impl;
    struct segfd *e;
    int rc = seg_get(p, seg, false, &e);
    if (rc)
        return rc;
    if (p->tail_seg == seg)
        p->tail_at = UINT64_MAX;
    if (ftruncate(e->fd, (off_t)size) != 0 || do_fsync(e->fd, false) != 0) {
        SK_ERROR("wal_posix", "truncate segment %llu to %llu: %s", (unsigned long long)seg,
                 (unsigned long long)size, strerror(errno));
        rc = SK_ERR_IO;
    }
    seg_put(p, e);
    return rc;
}

/* ---- recycled segments (docs/wal.md, "Recycled segments") ---- */

static char *spare_name(uint64_t seg, char *buf, size_t len)
{
    snprintf(buf, len, "%020llu.spare", (unsigned long long)seg);
    return buf;
}

/* Zeroes the start of spare `name` durably: renamed to a segment, it then
 * reads as a segment whose first write never finished, never as the
 * segment it was (whose header names another start). */
static int spare_clean(struct posix *p, const char *name)
{
    static const uint8_t zeros[SPARE_ZERO_BYTES];
    int fd = openat(p->dirfd, name, O_RDWR | O_CLOEXEC);
    if (fd < 0)
        return errno_to_sk(errno);
    ssize_t n;
    do
        n = pwrite(fd, zeros, sizeof zeros, 0);
    while (n < 0 && errno == EINTR);
    int rc = n == (ssize_t)sizeof zeros && do_fsync(fd, true) == 0 ? 0 : SK_ERR_IO;
    if (rc)
        SK_WARN("wal_posix", "cannot clear spare %s/%s: %s", p->dir, name, strerror(errno));
    close(fd);
    return rc;
}

/* Keeps the renamed file `name` (once segment `seg`) as a spare, or deletes
 * it when it cannot be cleared or the spares are full. */
static void spare_keep(struct posix *p, uint64_t seg, const char *name)
{
    bool kept = false;
    if (spare_clean(p, name) == 0) {
        pthread_mutex_lock(&p->mu);
        if (p->nspares < WAL_POSIX_SPARES) {
            p->spares[p->nspares++] = seg;
            kept = true;
        }
        pthread_mutex_unlock(&p->mu);
    }
    if (!kept && unlinkat(p->dirfd, name, 0) != 0 && errno != ENOENT)
        SK_WARN("wal_posix", "unlink %s/%s: %s", p->dir, name, strerror(errno));
}

/* Renames a spare to segment `seg`'s name: true when the segment's file is
 * now that spare. A spare that cannot be renamed is deleted. */
static bool spare_take(struct posix *p, uint64_t seg)
{
    pthread_mutex_lock(&p->mu);
    bool have = p->nspares > 0;
    uint64_t sp = have ? p->spares[--p->nspares] : 0;
    pthread_mutex_unlock(&p->mu);
    if (!have)
        return false;
    char from[WAL_SEGMENT_NAME_MAX + 8], to[WAL_SEGMENT_NAME_MAX];
    spare_name(sp, from, sizeof from);
    wal_segment_name(seg, to, sizeof to);
    if (renameat2(p->dirfd, from, p->dirfd, to, RENAME_NOREPLACE) == 0)
        return true;
    /* EEXIST: the create fails below as it would without spares. */
    if (errno != EEXIST)
        SK_WARN("wal_posix", "cannot reuse %s/%s: %s", p->dir, from, strerror(errno));
    unlinkat(p->dirfd, from, 0);
    return false;
}

/* At start-up, with the directory to itself: spares of an earlier run are
 * cleared again (a crash may have come between a segment's rename and its
 * clearing) and kept, up to the limit; the rest are deleted. */
static bool spare_parse(const char *name, uint64_t *seg)
{
    return parse_numbered(name, ".spare", seg);
}

static void spares_load(struct posix *p)
{
    uint64_t *v;
    size_t n;
    if (list_numbered(p, spare_parse, &v, &n) != 0)
        return;
    char name[WAL_SEGMENT_NAME_MAX + 8];
    for (size_t i = 0; i < n; i++)
        spare_keep(p, v[i], spare_name(v[i], name, sizeof name));
    free(v);
}

static int px_purge(wal_storage *s)
{
    struct posix *p = s->impl;
    uint64_t *v = NULL;
    size_t n = 0;
    int rc = list_numbered(p, spare_parse, &v, &n);
    char name[WAL_SEGMENT_NAME_MAX + 8];
    for (size_t i = 0; rc == 0 && i < n; i++) {
        if (unlinkat(p->dirfd, spare_name(v[i], name, sizeof name), 0) != 0 && errno != ENOENT) {
            SK_ERROR("wal_posix", "unlink %s/%s: %s", p->dir, name, strerror(errno));
            rc = SK_ERR_IO;
        }
    }
    free(v);
    pthread_mutex_lock(&p->mu);
    p->nspares = 0;
    p->recycle = false;
    pthread_mutex_unlock(&p->mu);
    return rc ? rc : sync_dir(p);
}

/* A removal cut short by a crash leaves its renamed segment behind
 * (`<start>.wal.del`): deleted at start-up. */
static bool removed_parse(const char *name, uint64_t *seg)
{
    return parse_numbered(name, ".wal.del", seg);
}

static void removed_purge(struct posix *p)
{
    uint64_t *v;
    size_t n;
    if (list_numbered(p, removed_parse, &v, &n) != 0)
        return;
    char name[WAL_SEGMENT_NAME_MAX], gone[WAL_SEGMENT_NAME_MAX + 8];
    for (size_t i = 0; i < n; i++) {
        snprintf(gone, sizeof gone, "%s.del", wal_segment_name(v[i], name, sizeof name));
        unlinkat(p->dirfd, gone, 0);
    }
    free(v);
}

/* ---- asynchronous operations (run on the IO thread) ---- */

static void op_done(void *arg)
{
    struct op *o = arg;
    o->p->done_op = o;
    o->cb(o->arg, o->err);
    o->p->done_op = NULL;
    free(o->iov);
    free(o);
}

static void create_work(void *arg)
{
    struct op *o = arg;
    struct posix *p = o->p;
    struct segfd *e;
    bool reused = spare_take(p, o->seg);
    o->err = seg_get(p, o->seg, !reused, &e);
    if (o->err) {
        if (o->err == SK_ERR_EXIST)
            SK_ERROR("wal_posix", "segment %llu already exists in %s", (unsigned long long)o->seg,
                     p->dir);
        return;
    }
    /* A reused file's blocks are written already: each later write+fdatasync
     * is an overwrite, with no extent to convert in the journal. Its pages
     * are read ahead, so that a write ending inside a page need not read
     * the rest of it first. */
    if (reused && o->hint > 0)
        posix_fadvise(e->fd, 0, (off_t)o->hint, POSIX_FADV_WILLNEED);
    /* Reserved blocks make each later write+fdatasync an overwrite, which
     * needs no block allocation nor size change in the journal. A file
     * system that cannot reserve just gets appends. */
    if (o->hint > 0 && fallocate(e->fd, 0, 0, (off_t)o->hint) != 0 && errno != EOPNOTSUPP)
        SK_WARN("wal_posix", "fallocate segment %llu: %s", (unsigned long long)o->seg,
                strerror(errno));
    /* The directory entry is what must survive now. The file's own metadata
     * (size, reserved blocks) needs no fsync of its own: every later
     * fdatasync persists what is needed to read the data it syncs. */
    o->err = sync_dir(p);
    seg_put(p, e);
}

/* Writes iov at off through the page cache. */
static int buffered_write(struct segfd *e, uint64_t off, struct iovec *iov, int cnt)
{
    while (cnt > 0 && iov->iov_len == 0) {
        iov++;
        cnt--;
    }
    while (cnt > 0) {
        ssize_t n = pwritev(e->fd, iov, cnt > IOV_MAX ? IOV_MAX : cnt, (off_t)off);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            SK_ERROR("wal_posix", "pwritev segment %llu at %llu: %s", (unsigned long long)e->seg,
                     (unsigned long long)off, n < 0 ? strerror(errno) : "wrote nothing");
            return SK_ERR_IO;
        }
        /* A short write: skip what went out and write the rest. */
        off += (uint64_t)n;
        size_t left = (size_t)n;
        while (cnt > 0 && left >= iov->iov_len) {
            left -= iov->iov_len;
            iov++;
            cnt--;
        }
        if (cnt > 0) {
            iov->iov_base = (char *)iov->iov_base + left;
            iov->iov_len -= left;
        }
    }
    return 0;
}

/* Opens seg's O_DIRECT fd. False, with direct I/O turned off for good,
 * when the file system cannot do it with DIO_ALIGN (tmpfs, a device with
 * larger blocks): writes then go through the page cache. */
static bool direct_open(struct posix *p, struct segfd *e)
{
    char name[WAL_SEGMENT_NAME_MAX];
    struct statx sx;
    const char *why = NULL;
    if (statx(e->fd, "", AT_EMPTY_PATH, STATX_DIOALIGN, &sx) != 0 ||
        !(sx.stx_mask & STATX_DIOALIGN) || sx.stx_dio_offset_align == 0)
        why = "the file system does not support it";
    else if (sx.stx_dio_offset_align > DIO_ALIGN || sx.stx_dio_mem_align > DIO_ALIGN)
        why = "its blocks are larger than 4 KiB";
    else if ((e->dfd = openat(p->dirfd, wal_segment_name(e->seg, name, sizeof name),
                              O_WRONLY | O_DIRECT | O_CLOEXEC)) < 0)
        why = strerror(errno);
    if (!why)
        return true;
    SK_INFO("wal_posix", "no direct I/O for the WAL in %s (%s): writing through the page cache",
            p->dir, why);
    p->direct = false;
    atomic_store(&p->direct_reads, false);
    return false;
}

/* The bytes of [at, off) that the next direct write must write again: the
 * kept block when it is that one, else read back from the file. */
static int direct_prefix(struct posix *p, struct segfd *e, uint64_t at, size_t pre, uint8_t *dst)
{
    if (p->tail_seg == e->seg && p->tail_at == at && p->tail_len == pre) {
        memcpy(dst, p->tail, pre);
        return 0;
    }
    size_t done = 0;
    while (done < pre) {
        ssize_t n = pread(e->fd, dst + done, pre - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            SK_ERROR("wal_posix", "read back segment %llu at %llu: %s", (unsigned long long)e->seg,
                     (unsigned long long)(at + done), n < 0 ? strerror(errno) : "end of file");
            return SK_ERR_IO;
        }
        done += (size_t)n;
    }
    return 0;
}

/* Writes iov at off with O_DIRECT: whole DIO_ALIGN blocks from the block
 * holding off, the partial block at the end padded with zeros (recovery
 * reads zeros as the end of the log) and written again, completed, by the
 * next write. */
/* Writes whole blocks buf[0, len) at `at`, both DIO_ALIGN-aligned. */
static int direct_pwrite(struct segfd *e, const uint8_t *buf, size_t len, uint64_t at)
{
    for (size_t done = 0; done < len;) {
        ssize_t n = pwrite(e->dfd, buf + done, len - done, (off_t)(at + done));
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0 || n % DIO_ALIGN) {
            SK_ERROR("wal_posix", "direct write segment %llu at %llu: %s",
                     (unsigned long long)e->seg, (unsigned long long)(at + done),
                     n < 0 ? strerror(errno) : "short write");
            return SK_ERR_IO;
        }
        done += (size_t)n;
    }
    return 0;
}

/* Keeps the partial last block of a direct write (`keep` bytes at `at`),
 * which the next write starts with. */
static void direct_keep(struct posix *p, struct segfd *e, uint64_t at, const uint8_t *b,
                        size_t keep)
{
    p->tail_seg = e->seg;
    p->tail_at = at;
    p->tail_len = keep;
    memcpy(p->tail, b, keep);
}

/* direct_write of a buffer laid out for it (wal_storage.h, write_placed):
 * the partial block before it and the zeros after it go into its own room,
 * and it is written from there, not copied. */
static int direct_write_placed(struct posix *p, struct segfd *e, uint64_t off,
                               const struct iovec *iov)
{
    size_t fill = (size_t)(off % DIO_ALIGN);
    uint64_t at = off - fill;
    uint8_t *start = (uint8_t *)iov->iov_base - fill;
    int rc = direct_prefix(p, e, at, fill, start);
    p->tail_at = UINT64_MAX;
    size_t end = fill + iov->iov_len;
    size_t len = (end + DIO_ALIGN - 1) & ~(size_t)(DIO_ALIGN - 1);
    if (!rc) {
        memset(start + end, 0, len - end);
        rc = direct_pwrite(e, start, len, at);
    }
    if (!rc && end % DIO_ALIGN)
        direct_keep(p, e, at + end - end % DIO_ALIGN, start + end - end % DIO_ALIGN,
                    end % DIO_ALIGN);
    return rc;
}

static int direct_write(struct posix *p, struct segfd *e, uint64_t off, const struct iovec *iov,
                        int cnt)
{
    uint64_t at = off & ~(uint64_t)(DIO_ALIGN - 1);
    size_t fill = (size_t)(off - at);
    int rc = direct_prefix(p, e, at, fill, p->bounce);
    p->tail_at = UINT64_MAX;
    int i = 0;
    size_t in = 0; /* bytes of iov[i] already copied */
    while (!rc) {
        while (fill < BOUNCE_BYTES && i < cnt) {
            size_t n = iov[i].iov_len - in;
            if (n > BOUNCE_BYTES - fill)
                n = BOUNCE_BYTES - fill;
            memcpy(p->bounce + fill, (const uint8_t *)iov[i].iov_base + in, n);
            fill += n;
            in += n;
            if (in == iov[i].iov_len) {
                i++;
                in = 0;
            }
        }
        size_t len = (fill + DIO_ALIGN - 1) & ~(size_t)(DIO_ALIGN - 1);
        memset(p->bounce + fill, 0, len - fill);
        rc = direct_pwrite(e, p->bounce, len, at);
        if (rc || i == cnt) {
            size_t keep = fill % DIO_ALIGN;
            if (!rc && keep)
                direct_keep(p, e, at + fill - keep, p->bounce + fill - keep, keep);
            break;
        }
        at += fill; /* fill == BOUNCE_BYTES: aligned */
        fill = 0;
    }
    return rc;
}

static void write_work(void *arg)
{
    struct op *o = arg;
    struct posix *p = o->p;
    struct segfd *e;
    o->began_us = sk_mono_us();
    o->err = seg_get(p, o->seg, false, &e);
    if (o->err)
        return;
    bool direct = p->direct && (e->dfd >= 0 || direct_open(p, e));
    if (!direct)
        o->err = buffered_write(e, o->off, o->iov, o->iovcnt);
    else if (o->placed)
        o->err = direct_write_placed(p, e, o->off, o->iov);
    else
        o->err = direct_write(p, e, o->off, o->iov, o->iovcnt);
    if (!o->err && o->sync && do_fsync(direct ? e->dfd : e->fd, true) != 0) {
        SK_ERROR("wal_posix", "fdatasync segment %llu: %s", (unsigned long long)o->seg,
                 strerror(errno));
        o->err = SK_ERR_IO;
    }
    o->ended_us = sk_mono_us();
    seg_put(p, e);
}

static bool px_write_timing(wal_storage *s, int64_t *wait_us, int64_t *io_us)
{
    const struct op *o = ((struct posix *)s->impl)->done_op;
    if (!o || !o->ended_us)
        return false;
    *wait_us = o->began_us - o->queued_us;
    *io_us = o->ended_us - o->began_us;
    return true;
}

static void remove_work(void *arg)
{
    struct op *o = arg;
    struct posix *p = o->p;
    char name[WAL_SEGMENT_NAME_MAX];
    struct segfd *e = NULL;
    pthread_mutex_lock(&p->mu);
    bool found;
    size_t at = seg_index(p, o->seg, &found);
    if (found) {
        e = p->segs[at];
        memmove(&p->segs[at], &p->segs[at + 1], (p->nsegs - at - 1) * sizeof *p->segs);
        p->nsegs--;
        e->removed = true;
    }
    bool drop = e && e->refs == 0;
    /* A file a reader still reads is not rewritten under it. */
    bool keep = p->recycle && p->nspares < WAL_POSIX_SPARES && (!e || drop);
    /* Rename under the lock, so that no reader reopens the name meanwhile;
     * unlink outside it, since freeing the blocks is the slow part. */
    wal_segment_name(o->seg, name, sizeof name);
    char gone[WAL_SEGMENT_NAME_MAX + 8];
    if (keep)
        spare_name(o->seg, gone, sizeof gone);
    else
        snprintf(gone, sizeof gone, "%s.del", name);
    bool renamed = renameat(p->dirfd, name, p->dirfd, gone) == 0;
    if (!renamed && errno != ENOENT) {
        SK_ERROR("wal_posix", "rename %s/%s: %s", p->dir, name, strerror(errno));
        o->err = SK_ERR_IO;
    }
    pthread_mutex_unlock(&p->mu);
    if (drop)
        segfd_free(e);
    if (!o->err)
        o->err = sync_dir(p);
    if (renamed && keep) {
        spare_keep(p, o->seg, gone);
    } else if (renamed && unlinkat(p->dirfd, gone, 0) != 0 && errno != ENOENT) {
        SK_ERROR("wal_posix", "unlink %s/%s: %s", p->dir, gone, strerror(errno));
        o->err = SK_ERR_IO;
    }
}

static struct op *op_new(struct posix *p, uint64_t seg, wal_io_cb cb, void *arg)
{
    struct op *o = calloc(1, sizeof *o);
    if (!o)
        return NULL;
    o->p = p;
    o->seg = seg;
    o->cb = cb;
    o->arg = arg;
    return o;
}

/* Out of memory: the error must still arrive through the loop, never inside
 * the call, so the sk_workq carries an empty work item when it can. */
static void op_submit(struct posix *p, struct op *o, sk_work_fn work)
{
    if (sk_workq_submit(p->io, work, op_done, o) != 0) {
        SK_ERROR("wal_posix", "cannot queue an IO operation");
        o->err = SK_ERR_NOMEM;
        if (sk_workq_submit(p->io, NULL, op_done, o) != 0)
            abort();
    }
}

static void px_create(wal_storage *s, uint64_t seg, uint64_t size_hint, wal_io_cb cb, void *arg)
{
    struct posix *p = s->impl;
    struct op *o = op_new(p, seg, cb, arg);
    if (!o)
        abort();
    o->hint = size_hint;
    op_submit(p, o, create_work);
}

static void write_submit(wal_storage *s, uint64_t seg, uint64_t off, const struct iovec *iov,
                         int iovcnt, bool sync, bool placed, wal_io_cb cb, void *arg)
{
    struct posix *p = s->impl;
    struct op *o = op_new(p, seg, cb, arg);
    if (!o)
        abort();
    o->off = off;
    o->sync = sync;
    o->placed = placed;
    o->iovcnt = iovcnt;
    o->iov = malloc((size_t)(iovcnt > 0 ? iovcnt : 1) * sizeof *iov);
    if (!o->iov)
        abort();
    if (iovcnt > 0)
        memcpy(o->iov, iov, (size_t)iovcnt * sizeof *iov);
    o->queued_us = sk_mono_us();
    op_submit(p, o, write_work);
}

static void px_write(wal_storage *s, uint64_t seg, uint64_t off, const struct iovec *iov,
                     int iovcnt, bool sync, wal_io_cb cb, void *arg)
{
    write_submit(s, seg, off, iov, iovcnt, sync, false, cb, arg);
}

static void px_write_placed(wal_storage *s, uint64_t seg, uint64_t off, void *buf, size_t len,
                            wal_io_cb cb, void *arg)
{
    struct iovec iov = {.iov_base = buf, .iov_len = len};
    write_submit(s, seg, off, &iov, 1, true, true, cb, arg);
}

static void px_remove(wal_storage *s, uint64_t seg, wal_io_cb cb, void *arg)
{
    struct posix *p = s->impl;
    struct op *o = op_new(p, seg, cb, arg);
    if (!o)
        abort();
    if (sk_workq_submit(p->rm, remove_work, op_done, o) != 0)
        op_submit(p, o, remove_work);
}

static void px_destroy(wal_storage *s)
{
    if (!s)
        return;
    struct posix *p = s->impl;
    sk_workq_destroy(p->rm);
    sk_workq_destroy(p->io);
    for (size_t i = 0; i < p->nsegs; i++) {
        segfd_free(p->segs[i]);
    }
    free(p->segs);
    free(p->bounce);
    if (p->lockfd >= 0)
        close(p->lockfd);
    close(p->dirfd);
    pthread_mutex_destroy(&p->mu);
    free(p->dir);
    free(p);
}

/* ---- segment removal during recovery, owner files and the lock ---- */

static int px_discard(wal_storage *s, uint64_t seg)
{
    struct posix *p = s->impl;
    char name[WAL_SEGMENT_NAME_MAX];
    wal_segment_name(seg, name, sizeof name);
    pthread_mutex_lock(&p->mu);
    bool found;
    size_t at = seg_index(p, seg, &found);
    struct segfd *e = NULL;
    if (found) {
        e = p->segs[at];
        memmove(&p->segs[at], &p->segs[at + 1], (p->nsegs - at - 1) * sizeof *p->segs);
        p->nsegs--;
        e->removed = true;
    }
    int rc = 0;
    if (unlinkat(p->dirfd, name, 0) != 0 && errno != ENOENT) {
        SK_ERROR("wal_posix", "unlink %s/%s: %s", p->dir, name, strerror(errno));
        rc = SK_ERR_IO;
    }
    bool drop = e && e->refs == 0;
    pthread_mutex_unlock(&p->mu);
    if (drop)
        segfd_free(e);
    return rc ? rc : sync_dir(p);
}

static int px_owner_list(wal_storage *s, uint64_t **epochs, size_t *n)
{
    return list_numbered(s->impl, wal_owner_parse, epochs, n);
}

static int px_owner_read(wal_storage *s, uint64_t epoch, void *buf, size_t cap, size_t *got)
{
    struct posix *p = s->impl;
    char name[WAL_SEGMENT_NAME_MAX];
    *got = 0;
    int fd = openat(p->dirfd, wal_owner_name(epoch, name, sizeof name), O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno_to_sk(errno);
    int rc = 0;
    while (*got < cap) {
        ssize_t r = pread(fd, (char *)buf + *got, cap - *got, (off_t)*got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = SK_ERR_IO;
            break;
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    close(fd);
    return rc;
}

static int write_whole(int fd, const void *buf, size_t len)
{
    size_t done = 0;
    while (done < len) {
        ssize_t w = pwrite(fd, (const char *)buf + done, len - done, (off_t)done);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return SK_ERR_IO;
        done += (size_t)w;
    }
    return do_fsync(fd, true) == 0 ? 0 : SK_ERR_IO;
}

static int px_owner_create(wal_storage *s, uint64_t epoch, const void *buf, size_t len)
{
    struct posix *p = s->impl;
    char name[WAL_SEGMENT_NAME_MAX];
    int fd = openat(p->dirfd, wal_owner_name(epoch, name, sizeof name),
                    O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
    if (fd < 0)
        return errno_to_sk(errno);
    int rc = write_whole(fd, buf, len);
    close(fd);
    if (rc) {
        SK_ERROR("wal_posix", "write %s/%s: %s", p->dir, name, strerror(errno));
        return rc;
    }
    return sync_dir(p);
}

/* By name every time: a removed owner file must show as missing, which an
 * fd kept open would hide. */
static int owner_put(struct posix *p, uint64_t epoch, const void *buf, size_t len)
{
    char name[WAL_SEGMENT_NAME_MAX];
    int fd = openat(p->dirfd, wal_owner_name(epoch, name, sizeof name), O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return errno_to_sk(errno);
    int rc = write_whole(fd, buf, len);
    if (rc)
        SK_ERROR("wal_posix", "write %s/%s: %s", p->dir, name, strerror(errno));
    close(fd);
    return rc;
}

static int px_owner_put(wal_storage *s, uint64_t epoch, const void *buf, size_t len)
{
    return owner_put(s->impl, epoch, buf, len);
}

static int px_owner_remove(wal_storage *s, uint64_t epoch)
{
    struct posix *p = s->impl;
    char name[WAL_SEGMENT_NAME_MAX];
    if (unlinkat(p->dirfd, wal_owner_name(epoch, name, sizeof name), 0) != 0) {
        if (errno == ENOENT)
            return 0;
        return SK_ERR_IO;
    }
    return sync_dir(p);
}

static bool owner_exists(struct posix *p, uint64_t epoch)
{
    char name[WAL_SEGMENT_NAME_MAX];
    struct stat st;
    return fstatat(p->dirfd, wal_owner_name(epoch, name, sizeof name), &st, 0) == 0;
}

static void renew_work(void *arg)
{
    struct op *o = arg;
    struct posix *p = o->p;
    refresh_dir(p);
    if (owner_exists(p, o->seg + 1) || !owner_exists(p, o->seg)) {
        o->err = SK_ERR_FENCED;
        return;
    }
    o->err = owner_put(p, o->seg, o->iov[0].iov_base, o->iov[0].iov_len);
}

/* A local file system is seen by this system alone: if no process here
 * holds the lock, no process anywhere uses the WAL. On a network file
 * system the lock may be local to this client, so it proves nothing. */
static bool local_fs(long type)
{
    switch (type) {
    case EXT4_SUPER_MAGIC: /* ext2, ext3 and ext4 share it */
    case XFS_SUPER_MAGIC:
    case BTRFS_SUPER_MAGIC:
    case TMPFS_MAGIC:
    case OVERLAYFS_SUPER_MAGIC:
    case F2FS_SUPER_MAGIC:
        return true;
    default:
        return false;
    }
}

static int px_lock(wal_storage *s, bool *exclusive)
{
    struct posix *p = s->impl;
    *exclusive = false;
    if (p->lockfd < 0) {
        int fd = openat(p->dirfd, "owner.lock", O_RDWR | O_CREAT | O_CLOEXEC, 0644);
        if (fd < 0) {
            SK_ERROR("wal_posix", "open %s/owner.lock: %s", p->dir, strerror(errno));
            return SK_ERR_IO;
        }
        if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
            int e = errno;
            close(fd);
            if (e == EWOULDBLOCK)
                return SK_ERR_FENCED;
            SK_WARN("wal_posix", "flock %s/owner.lock: %s", p->dir, strerror(e));
            return 0;
        }
        p->lockfd = fd;
    }
    struct statfs sf;
    *exclusive = fstatfs(p->dirfd, &sf) == 0 && local_fs((long)sf.f_type);
    return 0;
}

static void px_sole_owner(wal_storage *s, bool direct_io)
{
    struct posix *p = s->impl;
    if (!p->recycle) {
        p->recycle = true;
        spares_load(p);
    }
    if (direct_io && !p->bounce) {
        void *b = NULL;
        if (posix_memalign(&b, DIO_ALIGN, BOUNCE_BYTES) == 0)
            p->bounce = b;
        else
            SK_WARN("wal_posix", "no memory for direct I/O: writing through the page cache");
    }
    p->direct = direct_io && p->bounce;
    atomic_store(&p->direct_reads, p->direct);
}

static void px_renew(wal_storage *s, uint64_t epoch, const void *buf, size_t len, wal_io_cb cb,
                     void *arg);

static const wal_storage_ops posix_ops = {
    .name = "posix",
    .list = px_list,
    .size = px_size,
    .pread = px_pread,
    .truncate = px_truncate,
    .create = px_create,
    .write = px_write,
    .write_placed = px_write_placed,
    .remove = px_remove,
    .discard = px_discard,
    .purge = px_purge,
    .owner_list = px_owner_list,
    .owner_read = px_owner_read,
    .owner_create = px_owner_create,
    .owner_put = px_owner_put,
    .owner_remove = px_owner_remove,
    .renew = px_renew,
    .lock = px_lock,
    .sole_owner = px_sole_owner,
    .write_timing = px_write_timing,
    .destroy = px_destroy,
};

static void px_renew(wal_storage *s, uint64_t epoch, const void *buf, size_t len, wal_io_cb cb,
                     void *arg)
{
    struct posix *p = s->impl;
    struct op *o = op_new(p, epoch, cb, arg);
    if (!o || !(o->iov = malloc(sizeof *o->iov)))
        abort();
    o->iov[0].iov_base = (void *)buf;
    o->iov[0].iov_len = len;
    o->iovcnt = 1;
    op_submit(p, o, renew_work);
}

static void sync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd >= 0) {
        fsync(fd);
        close(fd);
    }
}

/* mkdir -p, making each new directory's entry durable in its parent. */
static int make_dirs(const char *dir)
{
    char *path = strdup(dir);
    if (!path)
        return SK_ERR_NOMEM;
    int rc = 0;
    size_t len = strlen(path), parent_end = 0; /* path[0, parent_end) is the parent */
    for (size_t i = 1; i <= len && !rc; i++) {
        if (path[i] != '/' && path[i] != '\0')
            continue;
        char c = path[i];
        path[i] = '\0';
        if (mkdir(path, 0755) == 0) {
            if (parent_end == 0) {
                sync_path(path[0] == '/' ? "/" : ".");
            } else {
                path[parent_end] = '\0';
                sync_path(path);
                path[parent_end] = '/';
            }
        } else if (errno != EEXIST) {
            SK_ERROR("wal_posix", "mkdir %s: %s", path, strerror(errno));
            rc = SK_ERR_IO;
        }
        path[i] = c;
        parent_end = i;
    }
    free(path);
    return rc;
}

wal_storage *wal_posix_new(struct event_base *base, const char *dir, int *err)
{
    int rc = make_dirs(dir);
    if (rc) {
        *err = rc;
        return NULL;
    }
    int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) {
        SK_ERROR("wal_posix", "open directory %s: %s", dir, strerror(errno));
        *err = errno_to_sk(errno);
        return NULL;
    }
    struct posix *p = calloc(1, sizeof *p);
    if (!p || !(p->dir = strdup(dir))) {
        free(p);
        close(dfd);
        *err = SK_ERR_NOMEM;
        return NULL;
    }
    p->dirfd = dfd;
    p->lockfd = -1;
    p->tail_at = UINT64_MAX;
    pthread_mutex_init(&p->mu, NULL);
    p->io = sk_workq_new(base, "wal-io", 1);
    p->rm = sk_workq_new(base, "wal-rm", 1);
    removed_purge(p);
    p->base.ops = &posix_ops;
    p->base.impl = p;
    *err = 0;
    return &p->base;
}
