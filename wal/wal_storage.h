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
 *
 * Errors of asynchronous calls come in two classes:
 *  - transient: SK_ERR_TIMEOUT (the volume did not answer, the connection
 *    broke, the server restarted and lost uncommitted data) and SK_ERR_AGAIN
 *    (the server is busy or out of space for now). Nothing of the operation
 *    is known durable, and issuing it again with the same arguments is
 *    correct: the WAL retries with backoff. A create issued again after a
 *    transient error succeeds when its file exists (it may be this very
 *    create that the server carried out).
 *  - permanent: everything else. After a failed fdatasync a POSIX file's
 *    state is unknown, so the POSIX backend never reports transient errors.
 *
 * Ownership (docs/wal.md, "Ownership and fencing"): the WAL directory also
 * holds one small owner file per owner epoch, named by the epoch
 * (20 digits, ".owner"). The owner_* calls are blocking (start-up, close);
 * renew is asynchronous like write. lock takes a lock that the backend's
 * host can check (POSIX: flock of a file in the directory) and says whether
 * holding it proves that no other process uses the WAL.
 */
#ifndef WAL_STORAGE_H
#define WAL_STORAGE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

#include "sk_err.h"

struct event_base;

typedef struct wal_storage wal_storage;
typedef void (*wal_io_cb)(void *arg, int err);

/* The block size write_placed lays buffers out for (direct I/O). */
#define WAL_WRITE_ROOM 4096

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
    /* Optional: a synced write of one buffer the WAL laid out for direct
     * I/O, which a backend may then write in place instead of copying it
     * into a bounce buffer: buf - off % WAL_WRITE_ROOM is WAL_WRITE_ROOM-
     * aligned, and the bytes from there to buf and from buf + len to the
     * next multiple of WAL_WRITE_ROOM (counted from that aligned start) are
     * the backend's to overwrite until the callback. Otherwise as write. */
    void (*write_placed)(wal_storage *s, uint64_t seg, uint64_t off, void *buf, size_t len,
                         wal_io_cb cb, void *arg);
    void (*remove)(wal_storage *s, uint64_t seg, wal_io_cb cb, void *arg);
    /* Blocking remove of a segment (recovery drops segments a fenced owner
     * left behind); a missing file is not an error. */
    int (*discard)(wal_storage *s, uint64_t seg);
    /* Blocking: deletes the files a backend keeps for reuse (the POSIX
     * backend's spare segments), for a WAL that is gone for good. NULL when
     * the backend keeps none. */
    int (*purge)(wal_storage *s);

    /* Owner files. list: the epochs present, ascending (malloc'd). read:
     * SK_ERR_NOENT when absent. create: exclusive and durable, SK_ERR_EXIST
     * when the file exists. put: overwrites an existing file durably
     * (SK_ERR_NOENT when it is gone). remove: a missing file is fine. */
    int (*owner_list)(wal_storage *s, uint64_t **epochs, size_t *n);
    int (*owner_read)(wal_storage *s, uint64_t epoch, void *buf, size_t cap, size_t *got);
    int (*owner_create)(wal_storage *s, uint64_t epoch, const void *buf, size_t len);
    int (*owner_put)(wal_storage *s, uint64_t epoch, const void *buf, size_t len);
    int (*owner_remove)(wal_storage *s, uint64_t epoch);
    /* Asynchronous lease renewal: checks, in this order and against the
     * volume itself (no cache), that the owner file of epoch + 1 does not
     * exist (else SK_ERR_FENCED) and that the one of `epoch` still does
     * (else SK_ERR_FENCED), then overwrites the latter with buf durably.
     * buf is borrowed until the callback. */
    void (*renew)(wal_storage *s, uint64_t epoch, const void *buf, size_t len, wal_io_cb cb,
                  void *arg);
    /* Blocking. SK_ERR_FENCED when another process holds the lock; else 0,
     * with *exclusive true when holding it proves that no other process
     * anywhere uses this WAL (a local file system), false when it proves
     * nothing (no lock, or a network file system). */
    int (*lock)(wal_storage *s, bool *exclusive);
    /* Optional. Called, before any create or write, once a WAL owner has
     * claimed the WAL and `lock` said exclusive: the backend may then use
     * what is safe only for a process alone with its files (the POSIX
     * backend: spare segments; O_DIRECT writes when direct_io). */
    void (*sole_owner)(wal_storage *s, bool direct_io);
    /* Optional: how many writes the WAL should keep in flight at once (its
     * group commits pipelined: the next batch is written while the previous
     * one syncs). NULL or 1: one at a time (a local disk, whose single IO
     * thread gains nothing from more). At most 8 are used. A backend that
     * says more than 1 must take writes into one segment at any offsets and
     * complete them in any order (the WAL may write a later range of a
     * segment while an earlier one is still in flight). */
    int (*max_writes)(wal_storage *s);
    /* Optional, for metrics: called by the WAL inside a write's callback,
     * where that write's time in the backend went. *wait_us: queued before
     * its I/O began (behind other operations of the same thread, or its
     * thread waiting for a CPU); *io_us: the write and its sync themselves,
     * as the thread that issued them saw them. False (or NULL): not known.
     * A group commit's latency minus these two is the wake-up of the loop. */
    bool (*write_timing)(wal_storage *s, int64_t *wait_us, int64_t *io_us);

    void (*destroy)(wal_storage *s);
} wal_storage_ops;

static inline bool wal_storage_transient(int err)
{
    return err == SK_ERR_TIMEOUT || err == SK_ERR_AGAIN;
}

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
/* The same for owner files: 20 digits and ".owner". */
char *wal_owner_name(uint64_t epoch, char *buf, size_t len);
bool wal_owner_parse(const char *name, uint64_t *epoch);

/* POSIX backend over directory `dir` (created if missing). One IO thread
 * runs create, write and remove; pread runs on the caller's thread. */
wal_storage *wal_posix_new(struct event_base *base, const char *dir, int *err);

/* Userspace NFSv3 backend (wal_nfs.c) on nfs://host/path?version=3&...
 * (parameters in wal_nfs.c and docs/nfs.md). Blocking: it mounts the
 * export and creates the directory before it returns. The event-loop thread
 * issues asynchronous calls on one libnfs context serviced by that loop;
 * blocking calls use a small pool of other contexts. */
wal_storage *wal_nfs_new(struct event_base *base, const char *url, char *why, size_t whylen);

/* Checks `url` as wal_nfs_new would parse it (host, path, parameters),
 * without connecting: any thread. 0 or an sk_err with the reason in why. */
int wal_nfs_check_url(const char *url, char *why, size_t whylen);
/* The same for any WAL URL: its scheme, and an nfs:// URL's parts. */
int wal_storage_check_url(const char *url, char *why, size_t whylen);

/* Picks the backend from a URL: file:///abs/dir or file://rel/dir, and
 * nfs://host/export/path?version=3&nfsport=N&mountport=M.
 * On failure returns NULL and writes a reason into why. */
wal_storage *wal_storage_open(struct event_base *base, const char *url, char *why, size_t whylen);

#endif
