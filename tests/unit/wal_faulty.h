/*
 * wal_faulty: a wal_storage wrapper that injects faults, for tests.
 *
 * It passes every operation to an inner backend and, as the test's control
 * block says, fails a chosen write (before writing, after writing without
 * the sync, or after writing only a prefix), fails a chosen create or
 * remove, fails lease renewals, hides the inner backend's lock, delays
 * completions, or holds them until the test releases them in any order. It
 * counts the operations and remembers each write's size. With a transient
 * error (SK_ERR_TIMEOUT, SK_ERR_AGAIN) the same injections stand for an NFS
 * server that timed out, dropped the connection, or restarted and changed
 * its write verifier (fail_sync_at: written, not committed).
 *
 * Contract: loop thread only (pread/list/size/truncate and the blocking owner
 * calls pass through and keep the inner backend's rules). Renewals are
 * neither held nor counted among completions: the lease runs on its own. Owns the inner backend (destroyed with it);
 * borrows ctl, which must outlive the wrapper. Held and delayed completions
 * still run when the wrapper is destroyed.
 */
#ifndef WAL_FAULTY_H
#define WAL_FAULTY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "wal_storage.h"

#define WAL_FAULTY_MAX_WRITES 1024

typedef struct wal_faulty_ctl {
    /* Injections: 1-based number of the operation of that kind, 0 = none. */
    int fail_write_at;       /* fails with nothing written */
    int fail_write_n;        /* ... and so many writes from there (0: one) */
    int fail_sync_at;        /* the bytes are written but not synced, then it fails */
    int short_write_at;      /* only short_write_bytes are written, then it fails */
    size_t short_write_bytes;
    int fail_create_at;
    int fail_create_n;       /* consecutive creates failing (0: one) */
    int fail_remove_at;
    int err;                 /* error the injections report (0: SK_ERR_IO) */
    int fail_renew_at;       /* renewals failing, with renew_err (0: SK_ERR_TIMEOUT) */
    int fail_renew_n;        /* consecutive renewals failing (0: one; -1: all from there) */
    int renew_err;
    bool no_lock;            /* the backend seems to have no lock: leases decide */
    bool hold;               /* completions wait for wal_faulty_release */
    int delay_ms;            /* completions arrive this much later */
    int max_writes;          /* pipeline depth to announce (0: the inner backend's) */

    /* Counters. */
    int writes, creates, removes, renews, completions;
    uint64_t write_len[WAL_FAULTY_MAX_WRITES]; /* bytes of write number i+1 */
    uint64_t write_seg[WAL_FAULTY_MAX_WRITES];
} wal_faulty_ctl;

wal_storage *wal_faulty_new(struct event_base *base, wal_storage *inner, wal_faulty_ctl *ctl);

/* Completions being held, oldest first, and what each one completes
 * ("create", "write" or "remove"). */
int wal_faulty_held(wal_storage *s);
const char *wal_faulty_held_kind(wal_storage *s, int i);
/* Delivers held completion i (0 = oldest) from the event loop, soon. */
void wal_faulty_release(wal_storage *s, int i);
void wal_faulty_release_all(wal_storage *s);

#endif
