/*
 * wal_reader: records of another owner's WAL, read in place (wal.h).
 */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

#include "sk_err.h"
#include "wal.h"

struct wal_reader {
    wal_storage *st;
    pthread_mutex_t mu;
    uint64_t *segs; /* start LSNs, ascending */
    size_t nsegs;
};

static int relist(wal_reader *r)
{
    uint64_t *segs = NULL;
    size_t n = 0;
    int rc = r->st->ops->list(r->st, &segs, &n);
    if (rc)
        return rc;
    pthread_mutex_lock(&r->mu);
    free(r->segs);
    r->segs = segs;
    r->nsegs = n;
    pthread_mutex_unlock(&r->mu);
    return 0;
}

wal_reader *wal_reader_open(wal_storage *st, char *why, size_t whylen)
{
    wal_reader *r = calloc(1, sizeof *r);
    if (!r) {
        st->ops->destroy(st);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    r->st = st;
    pthread_mutex_init(&r->mu, NULL);
    int rc = relist(r);
    if (rc) {
        snprintf(why, whylen, "cannot list the WAL's segments: %s", sk_err_name(rc));
        wal_reader_close(r);
        return NULL;
    }
    return r;
}

/* The segment holding lsn, and the next segment's start (the bound no
 * record of it may cross; none for the last one), from what is known now. */
static int locate(wal_reader *r, wal_lsn lsn, wal_lsn *seg, wal_lsn *bound)
{
    int rc = SK_ERR_NOENT;
    pthread_mutex_lock(&r->mu);
    for (size_t i = r->nsegs; i-- > 0;) {
        if (r->segs[i] <= lsn) {
            *seg = r->segs[i];
            *bound = i + 1 < r->nsegs ? r->segs[i + 1] : UINT64_MAX;
            rc = 0;
            break;
        }
    }
    pthread_mutex_unlock(&r->mu);
    return rc;
}

int wal_reader_read(wal_reader *r, wal_lsn lsn, uint8_t *type, void *buf, uint32_t cap,
                    uint32_t *len)
{
    wal_lsn seg = 0, bound = 0;
    int rc = locate(r, lsn, &seg, &bound);
    if (rc == 0)
        rc = wal_read_at(r->st, seg, lsn, bound, type, buf, cap, len);
    if (rc == 0 || rc == SK_ERR_NOMEM)
        return rc;
    /* Segments may have come or gone since the last listing: look again. */
    int lr = relist(r);
    if (lr)
        return lr;
    if (locate(r, lsn, &seg, &bound) != 0)
        return SK_ERR_NOENT;
    return wal_read_at(r->st, seg, lsn, bound, type, buf, cap, len);
}

void wal_reader_close(wal_reader *r)
{
    if (!r)
        return;
    if (r->st)
        r->st->ops->destroy(r->st);
    pthread_mutex_destroy(&r->mu);
    free(r->segs);
    free(r);
}

int wal_destroy_files(struct event_base *base, const char *url, char *why, size_t whylen)
{
    wal_storage *st = wal_storage_open(base, url, why, whylen);
    if (!st)
        return SK_ERR_IO;
    uint64_t *v = NULL;
    size_t n = 0;
    int rc = st->ops->list(st, &v, &n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = st->ops->discard(st, v[i]);
    free(v);
    v = NULL;
    n = 0;
    if (rc == 0 && st->ops->purge)
        rc = st->ops->purge(st);
    if (rc == 0)
        rc = st->ops->owner_list(st, &v, &n);
    for (size_t i = 0; rc == 0 && i < n; i++)
        rc = st->ops->owner_remove(st, v[i]);
    free(v);
    if (rc)
        snprintf(why, whylen, "cannot delete the WAL's files: %s", sk_err_name(rc));
    st->ops->destroy(st);
    return rc;
}
