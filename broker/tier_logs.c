#include "tier_logs.h"

#include <event2/event.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "objstore.h"
#include "sk_err.h"
#include "sk_log.h"
#include "store.h"

void sk_tier_snapshot_prefix(const sk_config *cfg, int64_t log, char *buf, size_t len)
{
    if (log)
        snprintf(buf, len, "snapshots/log-%lld/", (long long)log);
    else
        snprintf(buf, len, "snapshots/node-%d/", cfg->node_id);
}

/* A private object store on a private loop: these run off the node's loop. */
static objstore *open_store(const sk_config *cfg, struct event_base **base, char *why,
                            size_t whylen)
{
    *base = event_base_new();
    objstore_opts o;
    objstore_opts_default(&o);
    o.max_inflight = cfg->s3_max_inflight;
    o.part_size = (size_t)cfg->s3_part_size;
    o.request_timeout_ms = cfg->s3_request_timeout_ms;
    o.max_attempts = cfg->s3_max_attempts;
    char inner[256] = "";
    objstore *os = *base ? objstore_open(*base, cfg->objects_url, &o, inner, sizeof inner) : NULL;
    if (!os) {
        snprintf(why, whylen, "property objects.url: %s", inner);
        if (*base)
            event_base_free(*base);
        *base = NULL;
    }
    return os;
}

static void close_store(objstore *os, struct event_base *base)
{
    objstore_destroy(os);
    event_base_free(base);
}

/* Keys carry the LSN in 20 digits: the greatest key is the newest. */
static int newest_key(objstore *os, const char *prefix, char *best, size_t len)
{
    best[0] = 0;
    char *token = NULL;
    int rc;
    do {
        objstore_list_page page;
        rc = objstore_list_sync(os, prefix, token, 1000, &page);
        free(token);
        token = NULL;
        if (rc != 0)
            break;
        for (size_t i = 0; i < page.n; i++)
            if (strcmp(page.entries[i].key, best) > 0)
                snprintf(best, len, "%s", page.entries[i].key);
        token = page.next_token ? strdup(page.next_token) : NULL;
        objstore_list_page_free(&page);
    } while (token);
    return rc;
}

static int write_file(const char *dbpath, const uint8_t *data, size_t got)
{
    char tmp[4200];
    snprintf(tmp, sizeof tmp, "%s.restore", dbpath);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    size_t off = 0;
    while (fd >= 0 && off < got) {
        ssize_t w = write(fd, data + off, got - off);
        if (w <= 0)
            break;
        off += (size_t)w;
    }
    int rc = 0;
    if (fd < 0 || off != got || fsync(fd) != 0 || rename(tmp, dbpath) != 0)
        rc = SK_ERR_IO;
    if (fd >= 0)
        close(fd);
    return rc;
}

int sk_tier_restore_from(const sk_config *cfg, const char *prefix, const char *dbpath, char *why,
                         size_t whylen)
{
    struct stat stt;
    if (stat(dbpath, &stt) == 0)
        return 0;
    struct event_base *base;
    objstore *os = open_store(cfg, &base, why, whylen);
    if (!os)
        return SK_ERR_INVAL;
    char best[SK_OBJ_KEY_MAX];
    int rc = newest_key(os, prefix, best, sizeof best);
    if (rc == 0 && best[0]) {
        uint8_t *data = NULL;
        size_t got = 0;
        uint64_t size = 0;
        rc = objstore_get_sync(os, best, 0, OBJSTORE_TO_END, NULL, &data, &got, &size);
        if (rc == 0)
            rc = write_file(dbpath, data, got);
        if (rc == 0)
            SK_INFO("tier", "restored a SQLite view from %s (%zu bytes)", best, got);
        free(data);
    }
    if (rc != 0)
        snprintf(why, whylen, "cannot restore the SQLite view from %s%s: %s", cfg->objects_url,
                 prefix, sk_err_name(rc));
    close_store(os, base);
    return rc;
}

int sk_tier_restore_log_view(const sk_config *cfg, int64_t log, const char *dbpath, char *why,
                             size_t whylen)
{
    char prefix[64];
    sk_tier_snapshot_prefix(cfg, log, prefix, sizeof prefix);
    return sk_tier_restore_from(cfg, prefix, dbpath, why, whylen);
}

int sk_tier_forget_log(const sk_config *cfg, int64_t log)
{
    char why[256];
    struct event_base *base;
    objstore *os = open_store(cfg, &base, why, sizeof why);
    if (!os)
        return SK_ERR_INVAL;
    char prefix[64];
    sk_tier_snapshot_prefix(cfg, log, prefix, sizeof prefix);
    objstore_list_page page;
    int rc = objstore_list_sync(os, prefix, NULL, 1000, &page);
    if (rc == 0) {
        for (size_t i = 0; rc == 0 && i < page.n; i++)
            rc = objstore_delete_sync(os, page.entries[i].key);
        objstore_list_page_free(&page);
    }
    close_store(os, base);
    return rc;
}
