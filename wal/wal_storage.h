/*
 * wal_storage: the small storage interface under the WAL.
 *
 * A WAL is a sequence of segment files, each named by the LSN of its first
 * byte. Backends: POSIX files (a local disk, or a kernel-mounted FSx/NFS
 * path: wal_posix.c) and userspace NFSv3 through libnfs (wal_nfs.c). Tests
 * wrap a backend in a fault-injecting one (tests/unit/wal_faulty.c).
 *
 * Contract:
 *  - Blocking calls (list, size, pread, truncate) are for start-up and
 *    recovery, which run before the event loop serves anything, and for
 *    worker threads (pread). pread must be safe from any thread concurrently
 *    with everything else.
 *  - Asynchronous calls (create, write, remove) are made on the event-loop
 *    thread; their callback runs later on the loop thread, never inside the
 *    call itself. err is 0 or a negative sk_err (SK_ERR_IO, SK_ERR_TIMEOUT,
 *    SK_ERR_FENCED...). A write with sync=true completes only once the bytes
 *    are durable (fdatasync, NFS COMMIT or FILE_SYNC). A backend may run
 *    several asynchronous operations at once (an NFS backend keeps several
 *    WRITEs in flight) and complete them in any order; the WAL orders what
 *    must be ordered by waiting for callbacks.
 *  - create makes the file durably (the directory entry included); once its
 *    callback said 0 the file survives a crash. size_hint is the size the
 *    caller expects the file to reach: a backend may reserve that space in
 *    advance (bytes never written then read as zeros), or ignore it.
 *  - remove deletes the file durably; a missing file is not an error.
 *  - The backend borrows iov buffers until the write callback runs; the iov
 *    array itself only during the call.
 *  - pread and size of a segment that does not exist (never created, or
 *    removed) return SK_ERR_NOENT.
 *  - truncate cuts the file to size durably before it returns.
 *  - destroy waits for outstanding operations (their callbacks still run).
 */
#ifndef WAL_STORAGE_H
#define WAL_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct event_base;

typedef struct wal_storage wal_storage;
typedef void (*wal_io_cb)(void *arg, int err);

typedef struct wal_storage_ops {
    const char *name;
    /* Segment start LSNs, ascending, in a malloc'd array the caller frees. */
    int (*list)(wal_storage *s, uint64_t **starts, size_t *n);
    int (*size)(wal_storage *s, uint64_t seg, uint64_t *size);
    /* Reads up to len bytes at off; *got < len only at end of file. */
    int (*pread)(wal_storage *s, uint64_t seg, uint64_t off, void *buf, size_t len, size_t *got);
    int (*truncate)(wal_storage *s, uint64_t seg, uint64_t size);

    void (*create)(wal_storage *s, uint64_t seg, uint64_t size_hint, wal_io_cb cb, void *arg);
    void (*write)(wal_storage *s, uint64_t seg, uint64_t off, const struct iovec *iov, int iovcnt,
                  bool sync, wal_io_cb cb, void *arg);
    void (*remove)(wal_storage *s, uint64_t seg, wal_io_cb cb, void *arg);

    void (*destroy)(wal_storage *s);
} wal_storage_ops;

struct wal_storage {
    const wal_storage_ops *ops;
    void *impl;
};

/* File name of segment `seg`: 20 decimal digits and ".wal" (25 bytes with
 * the NUL). Returns buf. */
#define WAL_SEGMENT_NAME_MAX 32
char *wal_segment_name(uint64_t seg, char *buf, size_t len);
/* Parses such a name; false when `name` is not a segment file name. */
bool wal_segment_parse(const char *name, uint64_t *seg);

/* POSIX backend over directory `dir` (created if missing). One IO thread
 * runs create, write and remove; pread runs on the caller's thread. */
wal_storage *wal_posix_new(struct event_base *base, const char *dir, int *err);

/* Picks the backend from a URL: file:///abs/dir or file://rel/dir, and
 * nfs://host/export/path?version=3&nfsport=N&mountport=M when built in.
 * On failure returns NULL and writes a reason into why. */
wal_storage *wal_storage_open(struct event_base *base, const char *url, char *why, size_t whylen);

#endif
