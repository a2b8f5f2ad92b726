/*
 * wal_storage_open: picks a WAL storage backend from a URL.
 */
#include <stdio.h>
#include <string.h>

#include "sk_err.h"
#include "wal_storage.h"

wal_storage *wal_storage_open(struct event_base *base, const char *url, char *why, size_t whylen)
{
    const char *sep = url ? strstr(url, "://") : NULL;
    if (!sep) {
        snprintf(why, whylen,
                 "WAL URL '%s' has no scheme (expected file:///dir, file://dir or nfs://host/dir)",
                 url ? url : "");
        return NULL;
    }
    size_t slen = (size_t)(sep - url);
    if (slen == 4 && strncmp(url, "file", 4) == 0) {
        /* file:///abs/dir keeps its leading slash; file://rel/dir is relative. */
        const char *dir = sep + 3;
        if (*dir == '\0') {
            snprintf(why, whylen, "WAL URL '%s' names no directory", url);
            return NULL;
        }
        int err = 0;
        wal_storage *st = wal_posix_new(base, dir, &err);
        if (!st)
            snprintf(why, whylen, "WAL directory '%s': %s", dir, sk_err_name(err));
        return st;
    }
    if (slen == 3 && strncmp(url, "nfs", 3) == 0)
        return wal_nfs_new(base, url, why, whylen);
    snprintf(why, whylen, "unsupported WAL URL scheme '%.*s' in '%s' (supported: file, nfs)",
             (int)(slen > 32 ? 32 : slen), url, url);
    return NULL;
}

int wal_storage_check_url(const char *url, char *why, size_t whylen)
{
    if (url && strncmp(url, "nfs://", 6) == 0)
        return wal_nfs_check_url(url, why, whylen);
    if (url && strncmp(url, "file://", 7) == 0 && url[7])
        return 0;
    snprintf(why, whylen, "WAL URL '%s' is neither file:///dir nor nfs://host/dir?version=3",
             url ? url : "");
    return SK_ERR_INVAL;
}
