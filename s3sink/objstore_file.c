/*
 * file:// backend of objstore: one file per key under a root directory.
 *
 * Asynchronous operations run on an sk_workq (opts.max_inflight threads, at
 * most 16); blocking ones on the caller's thread. A put writes a temporary
 * file ".<name>.tmp.<pid>.<n>" in the key's directory, fsyncs it, renames it
 * over the key and fsyncs the directory: readers see the old object or the
 * whole new one, and after the callback the object survives a crash.
 * Temporary names start with '.', which no key may, so a listing never shows
 * them (and a crash leaves them for an operator, never as objects).
 * Where the file system allows it, the data is written with O_DIRECT from a
 * reused aligned buffer (the file's last block padded, then truncated to the
 * object's size): objects are read back rarely and through the block cache,
 * and a copy into the page cache cost the uploader more than building them.
 * Large gets read whole blocks with O_DIRECT as well: through such a buffer,
 * or in place into the padded buffers of objstore_getv_padded.
 * Directories are made on demand and removed when a delete empties them; a
 * put that races with that removal makes its directory again.
 */
#include <assert.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "objstore_impl.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_workq.h"

#define DIO_ALIGN 4096u
#define DIO_PIECE (4u << 20) /* bytes per direct write */
#define DIO_KEEP 4           /* aligned buffers kept for the next puts and gets */
#define DIO_READ_MIN (256u << 10) /* smaller gets go through the page cache */

struct fstore {
    char *root;
    int rootfd;
    sk_workq *q;
    atomic_bool closing;
    atomic_uint_fast64_t seq;
    atomic_bool no_direct; /* the file system refused O_DIRECT: the page cache only */
    pthread_mutex_t mu;    /* guards bufs */
    void *bufs[DIO_KEEP];  /* DIO_PIECE-sized, DIO_ALIGN-aligned, unused */
    int nbufs;
};

static struct fstore *F(objstore *s)
{
    return s->impl;
}

static int errno_to_sk(int e)
{
    switch (e) {
    case ENOENT:
    case ENOTDIR:
        return SK_ERR_NOENT;
    case ENOMEM:
        return SK_ERR_NOMEM;
    default:
        return SK_ERR_IO;
    }
}

static int fsync_dirat(int rootfd, const char *dir)
{
    int fd = openat(rootfd, *dir ? dir : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    int rc = fsync(fd);
    close(fd);
    return rc;
}

/* Makes every directory of key (relative to the root); new ones are made
 * durable by an fsync of their parent. */
static int make_dirs(struct fstore *f, const char *key)
{
    char path[1100];
    size_t n = strlen(key);
    if (n >= sizeof path)
        return SK_ERR_INVAL;
    memcpy(path, key, n + 1);
    for (char *p = strchr(path, '/'); p; p = strchr(p + 1, '/')) {
        *p = '\0';
        if (mkdirat(f->rootfd, path, 0755) == 0) {
            char *slash = strrchr(path, '/');
            if (slash) {
                *slash = '\0';
                fsync_dirat(f->rootfd, path);
                *slash = '/';
            } else {
                fsync_dirat(f->rootfd, "");
            }
        } else if (errno != EEXIST) {
            int e = errno;
            SK_ERROR("objstore", "mkdir %s/%s: %s", f->root, path, strerror(e));
            return errno_to_sk(e);
        }
        *p = '/';
    }
    return 0;
}

static void dir_of(const char *key, char *dir, size_t len)
{
    const char *slash = strrchr(key, '/');
    size_t n = slash ? (size_t)(slash - key) : 0;
    if (n >= len)
        n = len - 1;
    memcpy(dir, key, n);
    dir[n] = '\0';
}

/* Writes bytes [off, off+len) of the iovec at file offset off. */
static int write_range(int fd, const struct iovec *iov, int iovcnt, uint64_t off, uint64_t len)
{
    uint64_t base = 0;
    int i = 0;
    while (i < iovcnt && base + iov[i].iov_len <= off) {
        base += iov[i].iov_len;
        i++;
    }
    while (len > 0) {
        struct iovec v[64];
        int nv = 0;
        uint64_t want = 0, b = base, o = off;
        for (int j = i; j < iovcnt && nv < 64 && want < len; j++) {
            size_t in = (size_t)(o - b);
            size_t take = iov[j].iov_len - in;
            if (take > len - want)
                take = (size_t)(len - want);
            v[nv].iov_base = (uint8_t *)iov[j].iov_base + in;
            v[nv].iov_len = take;
            nv++;
            want += take;
            o += take;
            b += iov[j].iov_len;
        }
        ssize_t w = pwritev(fd, v, nv, (off_t)off);
        if (w < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        if (w == 0) {
            errno = EIO;
            return -1;
        }
        off += (uint64_t)w;
        len -= (uint64_t)w;
        while (i < iovcnt && base + iov[i].iov_len <= off) {
            base += iov[i].iov_len;
            i++;
        }
    }
    return 0;
}

/* Writes [off, off+len) in pieces, starting the write-back of each piece at
 * once and waiting for the one two pieces back: a large object then reaches
 * the disk as it is written, not in one burst at the final fsync that would
 * queue the WAL's own syncs behind it. */
#define WB_PIECE (8u << 20)
static int write_range_wb(int fd, const struct iovec *iov, int iovcnt, uint64_t off,
                          uint64_t len)
{
    uint64_t end = off + len;
    while (off < end) {
        uint64_t n = end - off < WB_PIECE ? end - off : WB_PIECE;
        if (write_range(fd, iov, iovcnt, off, n) != 0)
            return -1;
        sync_file_range(fd, (off_t)off, (off_t)n, SYNC_FILE_RANGE_WRITE);
        if (off >= 2 * (uint64_t)WB_PIECE)
            sync_file_range(fd, (off_t)(off - 2 * (uint64_t)WB_PIECE), WB_PIECE,
                            SYNC_FILE_RANGE_WAIT_BEFORE | SYNC_FILE_RANGE_WRITE |
                                SYNC_FILE_RANGE_WAIT_AFTER);
        off += n;
    }
    return 0;
}

/* An aligned buffer of DIO_PIECE bytes, reused when one is free. */
static void *dio_buf_take(struct fstore *f)
{
    void *b = NULL;
    pthread_mutex_lock(&f->mu);
    if (f->nbufs > 0)
        b = f->bufs[--f->nbufs];
    pthread_mutex_unlock(&f->mu);
    if (!b && posix_memalign(&b, DIO_ALIGN, DIO_PIECE) != 0)
        b = NULL;
    return b;
}

static void dio_buf_give(struct fstore *f, void *b)
{
    if (!b)
        return;
    pthread_mutex_lock(&f->mu);
    if (f->nbufs < DIO_KEEP) {
        f->bufs[f->nbufs++] = b;
        b = NULL;
    }
    pthread_mutex_unlock(&f->mu);
    free(b);
}

/* Writes [off, off+len) through buf with O_DIRECT on dfd: off is aligned,
 * every piece but the object's last is whole blocks; the last is padded
 * with zeros, which the caller truncates away. */
static int write_range_direct(int dfd, const struct iovec *iov, int iovcnt, uint64_t off,
                              uint64_t len, uint8_t *buf)
{
    while (len > 0) {
        size_t n = len < DIO_PIECE ? (size_t)len : DIO_PIECE;
        size_t whole = (n + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN;
        struct os_iov_pos at = {0, 0};
        os_iov_copy(iov, iovcnt, off, buf, n, &at);
        memset(buf + n, 0, whole - n);
        size_t done = 0;
        while (done < whole) {
            ssize_t w = pwrite(dfd, buf + done, whole - done, (off_t)(off + done));
            if (w < 0 && errno == EINTR)
                continue;
            if (w <= 0 || (size_t)w % DIO_ALIGN) {
                if (w >= 0)
                    errno = EIO;
                return -1;
            }
            done += (size_t)w;
        }
        off += n;
        len -= n;
    }
    return 0;
}

/* The O_DIRECT descriptor of a new temporary file, or -1 to write through
 * the page cache: the file system cannot (tmpfs; remembered), the parts
 * would not start on block boundaries, or no aligned buffer is free. */
static int open_direct(objstore *s, const char *tmp, void **buf)
{
    struct fstore *f = F(s);
    *buf = NULL;
    if (atomic_load(&f->no_direct) || s->opts.part_size % DIO_ALIGN)
        return -1;
    int dfd = openat(f->rootfd, tmp, O_WRONLY | O_DIRECT | O_CLOEXEC);
    if (dfd < 0) {
        if (errno == EINVAL && !atomic_exchange(&f->no_direct, true))
            SK_INFO("objstore", "no direct I/O for objects in %s: writing through the page cache",
                    f->root);
        return -1;
    }
    if (!(*buf = dio_buf_take(f))) {
        close(dfd);
        return -1;
    }
    return dfd;
}

/* One attempt's fault, mapped to the error the operation fails with. */
static int take_fault(objstore *s)
{
    atomic_fetch_add(&s->st_requests, 1);
    objstore_fault f = os_fault_take(s);
    if (f != OBJSTORE_FAULT_NONE)
        os_set_last_error(s, "injected fault %d", (int)f);
    switch (f) {
    case OBJSTORE_FAULT_NONE:
        return 0;
    case OBJSTORE_FAULT_500:
        atomic_fetch_add(&s->st_5xx, 1);
        return SK_ERR_IO;
    case OBJSTORE_FAULT_503:
        atomic_fetch_add(&s->st_throttle, 1);
        return SK_ERR_IO;
    case OBJSTORE_FAULT_TIMEOUT:
        atomic_fetch_add(&s->st_timeout, 1);
        return SK_ERR_TIMEOUT;
    case OBJSTORE_FAULT_CONNECT:
        atomic_fetch_add(&s->st_conn, 1);
        return SK_ERR_IO;
    case OBJSTORE_FAULT_403:
        atomic_fetch_add(&s->st_4xx, 1);
        return SK_ERR_IO;
    }
    return SK_ERR_IO;
}

static void direct_done(struct fstore *f, int *dfd, void **buf)
{
    if (*dfd >= 0)
        close(*dfd);
    *dfd = -1;
    dio_buf_give(f, *buf);
    *buf = NULL;
}

static int file_put(objstore *s, struct os_op *op)
{
    struct fstore *f = F(s);
    char dir[1100], tmp[1200];
    dir_of(op->key, dir, sizeof dir);
    const char *name = strrchr(op->key, '/');
    name = name ? name + 1 : op->key;
    snprintf(tmp, sizeof tmp, "%s%s.%s.tmp.%ld.%llu", dir, *dir ? "/" : "", name, (long)getpid(),
             (unsigned long long)atomic_fetch_add(&f->seq, 1));

    int fd = -1, rc = 0;
    for (int tries = 0; tries < 3 && fd < 0; tries++) {
        if ((rc = make_dirs(f, op->key)) != 0)
            return rc;
        fd = openat(f->rootfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
        if (fd < 0 && errno != ENOENT)
            break;
    }
    if (fd < 0) {
        int e = errno;
        SK_ERROR("objstore", "create %s/%s: %s", f->root, tmp, strerror(e));
        os_set_last_error(s, "PUT %s: %s", op->key, strerror(e));
        return errno_to_sk(e);
    }

    void *dbuf;
    int dfd = open_direct(s, tmp, &dbuf);
    bool multipart = op->total > s->opts.part_size;
    if (multipart)
        atomic_fetch_add(&s->st_multipart, 1);
    else if ((rc = take_fault(s)) != 0)
        goto fail;
    for (uint64_t off = 0; off < op->total || (off == 0 && op->total == 0);) {
        uint64_t n = op->total - off;
        if (multipart) {
            if (n > s->opts.part_size)
                n = s->opts.part_size;
            if ((rc = take_fault(s)) != 0)
                goto fail;
        }
        int wr = n > 0 && dfd >= 0 ? write_range_direct(dfd, op->iov, op->iovcnt, off, n, dbuf) : 0;
        if (wr != 0 && errno == EINVAL) {
            /* Opened, yet refused: no direct I/O here after all. */
            if (!atomic_exchange(&f->no_direct, true))
                SK_INFO("objstore", "direct writes refused in %s: writing through the page cache",
                        f->root);
            direct_done(f, &dfd, &dbuf);
            wr = 0;
        }
        if (wr == 0 && n > 0 && dfd < 0)
            wr = write_range_wb(fd, op->iov, op->iovcnt, off, n);
        if (wr != 0) {
            int e = errno;
            SK_ERROR("objstore", "write %s/%s: %s", f->root, tmp, strerror(e));
            os_set_last_error(s, "PUT %s: %s", op->key, strerror(e));
            rc = errno_to_sk(e);
            goto fail;
        }
        if (multipart)
            atomic_fetch_add(&s->st_parts, 1);
        atomic_fetch_add(&s->st_up, n);
        off += n;
        if (n == 0)
            break;
    }
    /* Direct writes padded the last block (a no-op when they did not). */
    if (op->total % DIO_ALIGN && ftruncate(fd, (off_t)op->total) != 0) {
        int e = errno;
        SK_ERROR("objstore", "truncate %s/%s: %s", f->root, tmp, strerror(e));
        os_set_last_error(s, "PUT %s: truncate: %s", op->key, strerror(e));
        rc = SK_ERR_IO;
        goto fail;
    }
    if (fsync(fd) != 0) {
        int e = errno;
        SK_ERROR("objstore", "fsync %s/%s: %s", f->root, tmp, strerror(e));
        os_set_last_error(s, "PUT %s: fsync: %s", op->key, strerror(e));
        rc = SK_ERR_IO;
        goto fail;
    }
    close(fd);
    fd = -1;
    direct_done(f, &dfd, &dbuf);
    if (renameat(f->rootfd, tmp, f->rootfd, op->key) != 0) {
        int e = errno;
        SK_ERROR("objstore", "rename %s/%s: %s", f->root, tmp, strerror(e));
        os_set_last_error(s, "PUT %s: rename: %s", op->key, strerror(e));
        rc = e == EISDIR ? SK_ERR_INVAL : SK_ERR_IO;
        goto fail;
    }
    if (fsync_dirat(f->rootfd, dir) != 0) {
        int e = errno;
        SK_ERROR("objstore", "fsync directory %s/%s: %s", f->root, dir, strerror(e));
        return SK_ERR_IO;
    }
    return 0;
fail:
    if (fd >= 0)
        close(fd);
    direct_done(f, &dfd, &dbuf);
    unlinkat(f->rootfd, tmp, 0);
    if (multipart)
        atomic_fetch_add(&s->st_aborts, 1);
    return rc ? rc : SK_ERR_IO;
}

/* n bytes at off into dst; fewer at the end of the file; -1 on error. */
static ssize_t read_at(int fd, uint8_t *dst, size_t n, uint64_t off)
{
    size_t got = 0;
    while (got < n) {
        ssize_t r = pread(fd, dst + got, n - got, (off_t)(off + got));
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -1;
        if (r == 0)
            break;
        got += (size_t)r;
    }
    return (ssize_t)got;
}

/* Copies n bytes into the get's destination at offset `at` of what it
 * asked for: its buffer, or its scattered buffers. */
static void deliver(struct os_op *op, size_t at, const uint8_t *src, size_t n)
{
    if (op->scatter)
        os_iov_fill(op->iov, op->iovcnt, at, src, n, &op->at, op->crcs);
    else
        memcpy((uint8_t *)op->buf + at, src, n);
}

/* The O_DIRECT descriptor to read key, or -1 (a file system that refuses
 * O_DIRECT turns direct I/O off: tmpfs, not again). */
static int direct_open_read(struct fstore *f, const char *key)
{
    int dfd = openat(f->rootfd, key, O_RDONLY | O_DIRECT | O_CLOEXEC);
    if (dfd < 0 && errno == EINVAL)
        atomic_store(&f->no_direct, true);
    return dfd;
}

enum direct_read { DR_OK, DR_REFUSED, DR_FAILED };

/* One direct pread of n bytes at off into buf (*r: the bytes read). A
 * refusal of the first read of a get (opened, yet refused: no direct I/O
 * here after all) turns direct I/O off; any other error fails. */
static enum direct_read direct_pread(struct fstore *f, int dfd, void *buf, size_t n, uint64_t off,
                                     bool first, ssize_t *r)
{
    do
        *r = pread(dfd, buf, n, (off_t)off);
    while (*r < 0 && errno == EINTR);
    if (*r >= 0)
        return DR_OK;
    if (errno == EINVAL && first) {
        atomic_store(&f->no_direct, true);
        return DR_REFUSED;
    }
    return DR_FAILED;
}

/* Closes a direct read's descriptor, keeping errno. */
static void direct_close(int dfd)
{
    int e = errno;
    close(dfd);
    errno = e;
}

/* Reads want bytes from op->off with O_DIRECT through an aligned buffer,
 * whole blocks at a time: the object's pages are not in the page cache (it
 * was written directly), and a buffered read would copy every byte through
 * it on the way. Returns the bytes delivered, or -1 when it could not start
 * (the caller reads buffered) or failed (errno set; *failed true). */
static ssize_t read_direct(struct fstore *f, const char *key, struct os_op *op, size_t want,
                           bool *failed)
{
    *failed = false;
    int dfd = direct_open_read(f, key);
    if (dfd < 0)
        return -1;
    uint8_t *buf = dio_buf_take(f);
    if (!buf) {
        close(dfd);
        return -1;
    }
    size_t got = 0;
    enum direct_read dr = DR_OK;
    while (got < want) {
        uint64_t pos = op->off + got, aoff = pos / DIO_ALIGN * DIO_ALIGN;
        size_t lead = (size_t)(pos - aoff), n = DIO_PIECE;
        if (lead + (want - got) < n)
            n = (lead + (want - got) + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN;
        ssize_t r;
        if ((dr = direct_pread(f, dfd, buf, n, aoff, got == 0, &r)) != DR_OK)
            break;
        if ((size_t)r <= lead)
            break; /* the end of the file */
        size_t take = (size_t)r - lead;
        if (take > want - got)
            take = want - got;
        deliver(op, got, buf + lead, take);
        got += take;
        if ((size_t)r < n)
            break;
    }
    int e = errno;
    dio_buf_give(f, buf);
    errno = e;
    direct_close(dfd);
    *failed = dr == DR_FAILED;
    return dr != DR_OK ? -1 : (ssize_t)got;
}

/* A padded scattered get (objstore_getv_padded): each buffer's whole
 * blocks read with O_DIRECT in place, into the padding the caller gave it,
 * with no copy. Returns as read_direct. */
static ssize_t read_in_place(struct fstore *f, struct os_op *op, size_t want, bool *failed)
{
    _Static_assert(DIO_ALIGN == OBJSTORE_PAD, "padding is the direct I/O alignment");
    *failed = false;
    int dfd = direct_open_read(f, op->key);
    if (dfd < 0)
        return -1;
    size_t got = 0;
    enum direct_read dr = DR_OK;
    for (int i = 0; i < op->iovcnt && got < want; i++) {
        uint64_t pos = op->off + got;
        size_t lead = (size_t)(pos % DIO_ALIGN), len = op->iov[i].iov_len;
        if (len > want - got)
            len = want - got;
        uint8_t *start = (uint8_t *)op->iov[i].iov_base - lead;
        assert((uintptr_t)start % DIO_ALIGN == 0);
        size_t n = (lead + len + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN;
        ssize_t r;
        if ((dr = direct_pread(f, dfd, start, n, pos - lead, got == 0, &r)) != DR_OK)
            break;
        size_t take = (size_t)r > lead ? (size_t)r - lead : 0;
        if (take > len)
            take = len;
        os_get_read_into(op, i, op->iov[i].iov_base, take);
        got += take;
        if (take < len)
            break; /* the end of the file */
    }
    direct_close(dfd);
    *failed = dr == DR_FAILED;
    return dr != DR_OK ? -1 : (ssize_t)got;
}

static int file_get(objstore *s, struct os_op *op)
{
    struct fstore *f = F(s);
    int rc = take_fault(s);
    if (rc != 0)
        return rc;
    int fd = openat(f->rootfd, op->key, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        if (errno_to_sk(e) == SK_ERR_NOENT) {
            atomic_fetch_add(&s->st_notfound, 1);
            return SK_ERR_NOENT;
        }
        SK_ERROR("objstore", "open %s/%s: %s", f->root, op->key, strerror(e));
        return SK_ERR_IO;
    }
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        close(fd);
        atomic_fetch_add(&s->st_notfound, 1);
        return SK_ERR_NOENT;
    }
    uint64_t size = (uint64_t)st.st_size;
    op->obj_size = size;
    uint64_t avail = op->off < size ? size - op->off : 0;
    size_t want = op->len == OBJSTORE_TO_END || op->len > avail ? (size_t)avail : op->len;
    if (!op->buf && !op->scatter) {
        op->buf = malloc(want ? want : 1);
        if (!op->buf) {
            close(fd);
            return SK_ERR_NOMEM;
        }
        op->own_buf = true;
    }
    size_t got = 0;
    bool failed = false;
    ssize_t dr = -1;
    if (want >= DIO_READ_MIN && !atomic_load(&f->no_direct))
        dr = op->padded ? read_in_place(f, op, want, &failed)
                        : read_direct(f, op->key, op, want, &failed);
    if (failed) {
        int e = errno;
        SK_ERROR("objstore", "read %s/%s: %s", f->root, op->key, strerror(e));
        close(fd);
        return SK_ERR_IO;
    }
    if (dr >= 0)
        got = want = (size_t)dr;
    /* A scattered get reads each buffer in turn, straight from the file. */
    for (int i = 0; got < want && i < (op->scatter ? op->iovcnt : 1); i++) {
        uint8_t *dst = op->scatter ? op->iov[i].iov_base : op->buf;
        size_t n = op->scatter ? op->iov[i].iov_len : want;
        ssize_t r = read_at(fd, dst, n < want - got ? n : want - got, op->off + got);
        if (r < 0) {
            int e = errno;
            SK_ERROR("objstore", "read %s/%s: %s", f->root, op->key, strerror(e));
            close(fd);
            return SK_ERR_IO;
        }
        if (op->scatter)
            os_get_read_into(op, i, dst, (size_t)r);
        got += (size_t)r;
        if ((size_t)r < n)
            break; /* shrank meanwhile: cannot happen to an immutable object */
    }
    close(fd);
    op->got = got;
    atomic_fetch_add(&s->st_down, got);
    return 0;
}

static int file_head(objstore *s, struct os_op *op)
{
    struct fstore *f = F(s);
    int rc = take_fault(s);
    if (rc != 0)
        return rc;
    struct stat st;
    if (fstatat(f->rootfd, op->key, &st, 0) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) {
            SK_ERROR("objstore", "stat %s/%s: %s", f->root, op->key, strerror(errno));
            return SK_ERR_IO;
        }
        atomic_fetch_add(&s->st_notfound, 1);
        return SK_ERR_NOENT;
    }
    if (!S_ISREG(st.st_mode)) {
        atomic_fetch_add(&s->st_notfound, 1);
        return SK_ERR_NOENT;
    }
    op->obj_size = (uint64_t)st.st_size;
    op->mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
    return 0;
}

static int file_delete(objstore *s, struct os_op *op)
{
    struct fstore *f = F(s);
    int rc = take_fault(s);
    if (rc != 0)
        return rc;
    if (unlinkat(f->rootfd, op->key, 0) != 0) {
        if (errno == ENOENT || errno == ENOTDIR)
            return 0;
        int e = errno;
        SK_ERROR("objstore", "unlink %s/%s: %s", f->root, op->key, strerror(e));
        os_set_last_error(s, "DELETE %s: %s", op->key, strerror(e));
        return SK_ERR_IO;
    }
    char dir[1100];
    dir_of(op->key, dir, sizeof dir);
    if (fsync_dirat(f->rootfd, dir) != 0) {
        SK_ERROR("objstore", "fsync directory %s/%s: %s", f->root, dir, strerror(errno));
        return SK_ERR_IO;
    }
    /* Remove directories the delete emptied; the first non-empty one stops. */
    while (*dir) {
        if (unlinkat(f->rootfd, dir, AT_REMOVEDIR) != 0)
            break;
        char *slash = strrchr(dir, '/');
        if (slash)
            *slash = '\0';
        else
            dir[0] = '\0';
    }
    return 0;
}

/* ---- list ---- */

struct keyvec {
    char **v;
    size_t n, cap;
};

static int keyvec_add(struct keyvec *kv, const char *k)
{
    if (kv->n == kv->cap) {
        size_t nc = kv->cap ? kv->cap * 2 : 64;
        char **nv = realloc(kv->v, nc * sizeof *nv);
        if (!nv)
            return SK_ERR_NOMEM;
        kv->v = nv;
        kv->cap = nc;
    }
    kv->v[kv->n] = strdup(k);
    if (!kv->v[kv->n])
        return SK_ERR_NOMEM;
    kv->n++;
    return 0;
}

/* Walks directory `rel` (relative to the root), adding keys that start with
 * `prefix` and sort after `after`. */
static int walk(struct fstore *f, const char *rel, const char *prefix, const char *after,
                struct keyvec *kv, int depth)
{
    if (depth > 64)
        return 0;
    int dfd = openat(f->rootfd, *rel ? rel : ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0)
        return errno == ENOENT || errno == ENOTDIR ? 0 : SK_ERR_IO;
    DIR *d = fdopendir(dfd);
    if (!d) {
        close(dfd);
        return SK_ERR_IO;
    }
    int rc = 0;
    struct dirent *de;
    char key[1100];
    size_t plen = strlen(prefix);
    while (rc == 0 && (de = readdir(d)) != NULL) {
        if (de->d_name[0] == '.')
            continue;
        int n = snprintf(key, sizeof key, "%s%s%s", rel, *rel ? "/" : "", de->d_name);
        if (n < 0 || (size_t)n >= sizeof key)
            continue;
        bool is_dir;
        if (de->d_type == DT_DIR || de->d_type == DT_REG) {
            is_dir = de->d_type == DT_DIR;
        } else {
            struct stat st;
            if (fstatat(f->rootfd, key, &st, AT_SYMLINK_NOFOLLOW) != 0)
                continue;
            if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode))
                continue;
            is_dir = S_ISDIR(st.st_mode);
        }
        size_t klen = (size_t)n;
        if (is_dir) {
            /* Descend only where keys with the prefix can be. */
            size_t cmp = klen < plen ? klen : plen;
            if (strncmp(key, prefix, cmp) != 0)
                continue;
            rc = walk(f, key, prefix, after, kv, depth + 1);
        } else {
            if (klen < plen || strncmp(key, prefix, plen) != 0)
                continue;
            if (after && strcmp(key, after) <= 0)
                continue;
            rc = keyvec_add(kv, key);
        }
    }
    closedir(d);
    return rc;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int file_list(objstore *s, struct os_op *op)
{
    struct fstore *f = F(s);
    int rc = take_fault(s);
    if (rc != 0)
        return rc;
    char start[1100];
    dir_of(op->key, start, sizeof start);
    struct keyvec kv = {0};
    rc = walk(f, start, op->key, op->token, &kv, 0);
    if (rc == 0) {
        if (kv.n > 1)
            qsort(kv.v, kv.n, sizeof *kv.v, cmp_str);
        size_t take = kv.n < (size_t)op->max_keys ? kv.n : (size_t)op->max_keys;
        if (kv.n > take && !(op->page.next_token = strdup(kv.v[take - 1])))
            rc = SK_ERR_NOMEM;
        op->page.entries = calloc(take ? take : 1, sizeof *op->page.entries);
        if (!op->page.entries)
            rc = SK_ERR_NOMEM;
        for (size_t i = 0; rc == 0 && i < take; i++) {
            struct stat st;
            if (fstatat(f->rootfd, kv.v[i], &st, 0) != 0)
                continue; /* deleted meanwhile */
            objstore_entry *e = &op->page.entries[op->page.n++];
            e->key = kv.v[i];
            kv.v[i] = NULL;
            e->size = (uint64_t)st.st_size;
            e->mtime_ms = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
        }
    }
    for (size_t i = 0; i < kv.n; i++)
        free(kv.v[i]);
    free(kv.v);
    return rc;
}

/* ---- dispatch ---- */

static void run_op(struct os_op *op)
{
    objstore *s = op->s;
    struct fstore *f = F(s);
    atomic_fetch_sub(&s->st_queued, op->sync ? 0 : 1);
    if (atomic_load(&f->closing)) {
        op->err = SK_ERR_CLOSED;
        os_op_complete(op);
        return;
    }
    os_inflight_add(s, 1);
    switch (op->kind) {
    case OS_PUT:
        op->err = file_put(s, op);
        break;
    case OS_GET:
        op->err = file_get(s, op);
        break;
    case OS_HEAD:
        op->err = file_head(s, op);
        break;
    case OS_DELETE:
        op->err = file_delete(s, op);
        break;
    case OS_LIST:
        op->err = file_list(s, op);
        break;
    }
    os_inflight_add(s, -1);
    os_op_complete(op);
}

static void work(void *arg)
{
    run_op(arg);
}

static void file_submit(objstore *s, struct os_op *op)
{
    struct fstore *f = F(s);
    if (op->sync) {
        run_op(op);
        return;
    }
    atomic_fetch_add(&s->st_queued, 1);
    if (atomic_load(&f->closing) || sk_workq_submit(f->q, work, NULL, op) != 0) {
        atomic_fetch_sub(&s->st_queued, 1);
        op->err = SK_ERR_CLOSED;
        os_op_complete(op);
    }
}

static void file_shutdown(objstore *s)
{
    struct fstore *f = F(s);
    atomic_store(&f->closing, true);
    sk_workq_destroy(f->q);
    f->q = NULL;
}

static void file_free(objstore *s)
{
    struct fstore *f = F(s);
    close(f->rootfd);
    for (int i = 0; i < f->nbufs; i++)
        free(f->bufs[i]);
    pthread_mutex_destroy(&f->mu);
    free(f->root);
    free(f);
}

static const struct objstore_backend file_backend = {
    .name = "file",
    .submit = file_submit,
    .shutdown = file_shutdown,
    .free_impl = file_free,
};

static int mkdir_p(const char *dir)
{
    char path[PATH_MAX];
    size_t n = strlen(dir);
    if (n == 0 || n >= sizeof path)
        return -1;
    memcpy(path, dir, n + 1);
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        if (mkdir(path, 0755) != 0 && errno != EEXIST)
            return -1;
        *p = '/';
    }
    if (mkdir(path, 0755) != 0 && errno != EEXIST)
        return -1;
    return 0;
}

int os_file_open(objstore *s, const char *dir, char *why, size_t whylen)
{
    if (!dir || !*dir) {
        snprintf(why, whylen, "objects URL names no directory");
        return SK_ERR_INVAL;
    }
    if (mkdir_p(dir) != 0) {
        snprintf(why, whylen, "objects directory '%s': %s", dir, strerror(errno));
        return SK_ERR_IO;
    }
    struct fstore *f = calloc(1, sizeof *f);
    if (!f || !(f->root = strdup(dir))) {
        free(f);
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    pthread_mutex_init(&f->mu, NULL);
    f->rootfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (f->rootfd < 0) {
        pthread_mutex_destroy(&f->mu);
        snprintf(why, whylen, "objects directory '%s': %s", dir, strerror(errno));
        free(f->root);
        free(f);
        return SK_ERR_IO;
    }
    int nthreads = s->opts.max_inflight > 16 ? 16 : s->opts.max_inflight;
    f->q = sk_workq_new(s->base, "objstore-file", nthreads);
    s->impl = f;
    s->be = &file_backend;
    return 0;
}
