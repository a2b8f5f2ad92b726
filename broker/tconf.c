#include "tconf.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "config.h"
#include "kbatch.h"
#include "meta.h"
#include "sk_err.h"

#define NO_SEGMENTS "Skiff has no log segments: a partition lives in the shared WAL, then in objects."
#define NO_REPLICAS "Skiff has no replicas: the shared volume holds the one copy, objects the rest."
#define ALL_TIERED "Every byte goes to the object store; retention.ms and retention.bytes decide when it goes."
#define LMAX 9223372036854775807.0
#define IMAX 2147483647.0

static const sk_tconf_def defs[] = {
    /* Honoured. */
    {"cleanup.policy", NULL, "delete",
     "delete, compact, or both (comma-separated): delete applies retention.ms and "
     "retention.bytes; compact keeps the latest record of each key.", SK_TC_SPECIAL, 0, 0},
    {"retention.ms", "log.retention.ms", NULL,
     "Batches older than this are deleted (-1: forever).", SK_TC_SPECIAL, 0, 0},
    {"retention.bytes", "log.retention.bytes", NULL,
     "Per-partition size beyond which the oldest batches are deleted (-1: no limit).",
     SK_TC_SPECIAL, 0, 0},
    {"max.message.bytes", "message.max.bytes", NULL, "Largest record batch accepted.",
     SK_TC_SPECIAL, 0, 0},
    {"message.timestamp.type", "log.message.timestamp.type", NULL,
     "CreateTime or LogAppendTime.", SK_TC_SPECIAL, 0, 0},
    {"message.timestamp.before.max.ms", "log.message.timestamp.before.max.ms", NULL,
     "Largest accepted distance of a CreateTime timestamp into the past.", SK_TC_SPECIAL, 0, 0},
    {"message.timestamp.after.max.ms", "log.message.timestamp.after.max.ms", NULL,
     "Largest accepted distance of a CreateTime timestamp into the future.", SK_TC_SPECIAL, 0, 0},
    {"min.insync.replicas", NULL, "1",
     "Accepted from 1 to 3: acks=all waits until the batch is durable on the shared volume, "
     "which is at least as strong as any in-sync replica count.", SK_TC_SPECIAL, 0, 0},
    {"compression.type", "compression.type", NULL,
     "The codec batches are stored in: a batch produced with another is recompressed "
     "(`uncompressed`, `gzip`, `snappy`, `lz4`, `zstd`); `producer` keeps the producer's.",
     SK_TC_SPECIAL, 0, 0},
    {"compression.gzip.level", "compression.gzip.level", NULL, "The level of gzip recompression.",
     SK_TC_INT, -1, 9},
    {"compression.lz4.level", "compression.lz4.level", NULL, "The level of lz4 recompression.",
     SK_TC_INT, 1, 17},
    {"compression.zstd.level", "compression.zstd.level", NULL, "The level of zstd recompression.",
     SK_TC_INT, -131072, 22},
    /* Stored and described, checked as Kafka checks them. */
    {"delete.retention.ms", "log.cleaner.delete.retention.ms", NULL,
     "How long a tombstone stays after the compaction that first kept it.", SK_TC_LONG, 0, LMAX},
    {"file.delete.delay.ms", NULL, "60000", NO_SEGMENTS, SK_TC_LONG, 0, LMAX},
    {"flush.messages", NULL, "9223372036854775807",
     "Every acknowledged batch is already durable on the shared volume.", SK_TC_LONG, 1, LMAX},
    {"flush.ms", NULL, "9223372036854775807",
     "Every acknowledged batch is already durable on the shared volume.", SK_TC_LONG, 0, LMAX},
    {"follower.replication.throttled.replicas", NULL, "", NO_REPLICAS, SK_TC_THROTTLED, 0, 0},
    {"index.interval.bytes", NULL, "4096", NO_SEGMENTS, SK_TC_INT, 0, IMAX},
    {"leader.replication.throttled.replicas", NULL, "", NO_REPLICAS, SK_TC_THROTTLED, 0, 0},
    {"local.retention.bytes", NULL, "-2", ALL_TIERED, SK_TC_LONG, -2, LMAX},
    {"local.retention.ms", NULL, "-2", ALL_TIERED, SK_TC_LONG, -2, LMAX},
    {"max.compaction.lag.ms", "log.cleaner.max.compaction.lag.ms", NULL,
     "Records older than this are compacted whatever the dirty ratio.", SK_TC_LONG, 1, LMAX},
    {"min.cleanable.dirty.ratio", "log.cleaner.min.cleanable.ratio", NULL,
     "A partition is compacted once this share of its bytes in objects is not compacted yet.",
     SK_TC_DOUBLE, 0, 1},
    {"min.compaction.lag.ms", "log.cleaner.min.compaction.lag.ms", NULL,
     "Records younger than this are not compacted.", SK_TC_LONG, 0, LMAX},
    {"preallocate", NULL, "false", NO_SEGMENTS, SK_TC_BOOL, 0, 0},
    {"remote.log.copy.disable", NULL, "false", ALL_TIERED, SK_TC_BOOL, 0, 0},
    {"remote.log.delete.on.disable", NULL, "false", ALL_TIERED, SK_TC_BOOL, 0, 0},
    {"remote.storage.enable", NULL, "false",
     "Only false, as on a Kafka without tiered storage: " ALL_TIERED, SK_TC_BOOL, 0, 0},
    {"segment.bytes", NULL, "1073741824", NO_SEGMENTS, SK_TC_INT, 14, IMAX},
    {"segment.index.bytes", NULL, "10485760", NO_SEGMENTS, SK_TC_INT, 4, IMAX},
    {"segment.jitter.ms", NULL, "0", NO_SEGMENTS, SK_TC_LONG, 0, LMAX},
    {"segment.ms", NULL, "604800000", NO_SEGMENTS, SK_TC_LONG, 1, LMAX},
    {"unclean.leader.election.enable", NULL, "false", NO_REPLICAS, SK_TC_BOOL, 0, 0},
};
#define NDEFS ((int)(sizeof defs / sizeof defs[0]))

int sk_tconf_ndefs(void)
{
    return NDEFS;
}

const sk_tconf_def *sk_tconf_def_at(int i)
{
    return i >= 0 && i < NDEFS ? &defs[i] : NULL;
}

const sk_tconf_def *sk_tconf_find(const char *name, size_t len)
{
    for (int i = 0; i < NDEFS; i++)
        if (strlen(defs[i].name) == len && memcmp(defs[i].name, name, len) == 0)
            return &defs[i];
    return NULL;
}

/* v[0..n) as a C string in buf; false when empty or too long. */
static bool terminated(char *buf, size_t cap, const char *v, size_t n)
{
    if (n == 0 || n >= cap)
        return false;
    memcpy(buf, v, n);
    buf[n] = 0;
    return true;
}

static bool parse_long(const char *v, size_t n, long long *out)
{
    char buf[32], *end;
    if (!terminated(buf, sizeof buf, v, n))
        return false;
    errno = 0;
    *out = strtoll(buf, &end, 10);
    return !*end && !errno;
}

static bool eq(const char *v, size_t n, const char *lit)
{
    return strlen(lit) == n && memcmp(v, lit, n) == 0;
}

static bool parse_double(const char *v, size_t n, double *out)
{
    char buf[64], *end;
    if (!terminated(buf, sizeof buf, v, n))
        return false;
    errno = 0;
    *out = strtod(buf, &end);
    return !*end && !errno && *out == *out;
}

/* "", "*", or partition:broker entries separated by commas (Kafka's
 * ThrottledReplicaListValidator). */
static bool throttled_ok(const char *v, size_t n)
{
    if (n == 0 || (n == 1 && v[0] == '*'))
        return true;
    size_t i = 0;
    for (;;) {
        while (i < n && v[i] == ' ')
            i++;
        size_t d1 = i;
        while (i < n && v[i] >= '0' && v[i] <= '9')
            i++;
        if (i == d1 || i >= n || v[i++] != ':')
            return false;
        size_t d2 = i;
        while (i < n && v[i] >= '0' && v[i] <= '9')
            i++;
        if (i == d2)
            return false;
        while (i < n && v[i] == ' ')
            i++;
        if (i == n)
            return true;
        if (v[i++] != ',')
            return false;
    }
}

/* cleanup.policy as SK_POLICY_* bits, or -1: a comma-separated list whose
 * items, trimmed, are compact or delete (Kafka's ValidList). */
static int policy_of(const char *v, size_t n)
{
    int bits = 0;
    size_t i = 0;
    for (;;) {
        while (i < n && v[i] == ' ')
            i++;
        size_t s = i;
        while (i < n && v[i] != ',')
            i++;
        size_t e = i;
        while (e > s && v[e - 1] == ' ')
            e--;
        if (eq(v + s, e - s, "compact"))
            bits |= SK_POLICY_COMPACT;
        else if (eq(v + s, e - s, "delete"))
            bits |= SK_POLICY_DELETE;
        else
            return -1;
        if (i == n)
            return bits;
        i++; /* the comma */
    }
}

#define CODEC_UNKNOWN (-2)

/* compression.type's value as the codec batches are stored in: -1 for
 * producer, a KB_CODEC_*, or CODEC_UNKNOWN. */
static int codec_of(const char *v, size_t n)
{
    if (eq(v, n, "producer"))
        return -1;
    int c = kb_codec_named(v, n);
    return c >= 0 ? c : CODEC_UNKNOWN;
}

/* A stored configuration's value, checked by its type and bounds. */
static const char *check_typed(const sk_tconf_def *d, const char *value, size_t vlen)
{
    static char why[160];
    long long v;
    double x = 0;
    switch (d->type) {
    case SK_TC_BOOL:
        if (vlen == 5 && strncasecmp(value, "false", 5) == 0)
            return NULL;
        if (vlen == 4 && strncasecmp(value, "true", 4) == 0)
            return strcmp(d->name, "remote.storage.enable") == 0
                       ? "must be false: there is no tiered storage to enable (every byte "
                         "already goes to the object store)"
                       : NULL;
        return "must be true or false";
    case SK_TC_THROTTLED:
        if (vlen > SK_TCONF_VALUE_MAX)
            return "is too long";
        return throttled_ok(value, vlen) ? NULL
                                         : "must be *, or partition:broker pairs separated by commas";
    case SK_TC_DOUBLE:
        if (!parse_double(value, vlen, &x))
            return "is not a number";
        break;
    case SK_TC_INT:
    case SK_TC_LONG:
        if (!parse_long(value, vlen, &v))
            return "is not an integer";
        x = (double)v;
        break;
    case SK_TC_SPECIAL:
        return NULL;
    }
    if (x < d->min || x > d->max) {
        if (d->max >= 9e18)
            snprintf(why, sizeof why, "must be %.0f or more", d->min);
        else if (d->type == SK_TC_DOUBLE)
            snprintf(why, sizeof why, "must be between %g and %g", d->min, d->max);
        else
            snprintf(why, sizeof why, "must be between %.0f and %.0f", d->min, d->max);
        return why;
    }
    return NULL;
}

const char *sk_tconf_check(const char *name, size_t nlen, const char *value, size_t vlen)
{
    const sk_tconf_def *d = sk_tconf_find(name, nlen);
    if (!d)
        return "is not a topic configuration of Kafka 4.3 (see docs/topic-configs.md)";
    if (d->type != SK_TC_SPECIAL)
        return check_typed(d, value, vlen);
    long long v;
    if (strcmp(d->name, "cleanup.policy") == 0)
        return policy_of(value, vlen) >= 0 ? NULL : "must be a list of compact and delete";
    if (strcmp(d->name, "compression.type") == 0)
        return codec_of(value, vlen) != CODEC_UNKNOWN
                   ? NULL
                   : "must be one of uncompressed, zstd, lz4, snappy, gzip, producer";
    if (strcmp(d->name, "message.timestamp.type") == 0)
        return eq(value, vlen, "CreateTime") || eq(value, vlen, "LogAppendTime")
                   ? NULL
                   : "must be CreateTime or LogAppendTime";
    if (!parse_long(value, vlen, &v))
        return "is not an integer";
    if (strcmp(d->name, "retention.ms") == 0 || strcmp(d->name, "retention.bytes") == 0)
        return v >= -1 ? NULL : "must be -1 or more";
    if (strcmp(d->name, "max.message.bytes") == 0)
        return v >= 64 && v <= INT32_MAX ? NULL : "must be between 64 and 2147483647";
    if (strcmp(d->name, "min.insync.replicas") == 0)
        return v >= 1 && v <= 3 ? NULL : "must be between 1 and 3";
    return v >= 0 ? NULL : "must be 0 or more";
}

void sk_tconf_free(sk_tconf *c)
{
    for (int i = 0; i < c->noverrides; i++) {
        free(c->names[i]);
        free(c->values[i]);
    }
    free(c->names);
    free(c->values);
    c->names = c->values = NULL;
    c->noverrides = 0;
}

static const char *override_of(const sk_tconf *c, const char *name)
{
    for (int i = 0; i < c->noverrides; i++)
        if (strcmp(c->names[i], name) == 0)
            return c->values[i];
    return NULL;
}

const char *sk_tconf_value(const sk_config *cfg, const sk_tconf *c, int i, char *buf, size_t len,
                           int *source)
{
    const sk_tconf_def *d = &defs[i];
    const char *o = override_of(c, d->name);
    if (o) {
        *source = 1;
        snprintf(buf, len, "%s", o);
        return buf;
    }
    if (d->broker_prop) {
        const sk_prop *p = sk_config_find(d->broker_prop);
        *source = sk_config_is_explicit(cfg, p) ? 2 : 0;
        return sk_config_get_text(cfg, p, buf, len);
    }
    *source = 0;
    snprintf(buf, len, "%s", d->fixed_default);
    return buf;
}

/* Resolves the honoured fields from overrides and broker defaults. */
void sk_tconf_resolve(const sk_config *cfg, sk_tconf *c)
{
    char buf[SK_TCONF_VALUE_MAX + 1];
    int src;
    int32_t levels[KB_CODEC_ZSTD + 1] = {0};
    int codec = -1;
    for (int i = 0; i < NDEFS; i++) {
        const char *v = sk_tconf_value(cfg, c, i, buf, sizeof buf, &src);
        const char *n = defs[i].name;
        if (strcmp(n, "cleanup.policy") == 0)
            c->policy = policy_of(v, strlen(v));
        else if (strcmp(n, "delete.retention.ms") == 0)
            c->delete_retention_ms = strtoll(v, NULL, 10);
        else if (strcmp(n, "min.compaction.lag.ms") == 0)
            c->min_compaction_lag_ms = strtoll(v, NULL, 10);
        else if (strcmp(n, "max.compaction.lag.ms") == 0)
            c->max_compaction_lag_ms = strtoll(v, NULL, 10);
        else if (strcmp(n, "min.cleanable.dirty.ratio") == 0)
            c->min_dirty_ratio = strtod(v, NULL);
        else if (strcmp(n, "retention.ms") == 0)
            c->retention_ms = strtoll(v, NULL, 10);
        else if (strcmp(n, "retention.bytes") == 0)
            c->retention_bytes = strtoll(v, NULL, 10);
        else if (strcmp(n, "max.message.bytes") == 0)
            c->max_message_bytes = (int32_t)strtoll(v, NULL, 10);
        else if (strcmp(n, "message.timestamp.type") == 0)
            c->log_append_time = strcmp(v, "LogAppendTime") == 0;
        else if (strcmp(n, "message.timestamp.before.max.ms") == 0)
            c->ts_before_max_ms = strtoll(v, NULL, 10);
        else if (strcmp(n, "message.timestamp.after.max.ms") == 0)
            c->ts_after_max_ms = strtoll(v, NULL, 10);
        else if (strcmp(n, "compression.type") == 0)
            codec = codec_of(v, strlen(v));
        else if (strcmp(n, "compression.gzip.level") == 0)
            levels[KB_CODEC_GZIP] = (int32_t)strtol(v, NULL, 10);
        else if (strcmp(n, "compression.lz4.level") == 0)
            levels[KB_CODEC_LZ4] = (int32_t)strtol(v, NULL, 10);
        else if (strcmp(n, "compression.zstd.level") == 0)
            levels[KB_CODEC_ZSTD] = (int32_t)strtol(v, NULL, 10);
    }
    c->recompress = codec >= 0;
    c->codec = (int8_t)(codec >= 0 ? codec : 0);
    c->codec_level = codec > 0 ? levels[codec] : 0;
}

/* Removes the blanks of a list value in place. */
static void unblank(char *v)
{
    char *w = v;
    for (char *c = v; *c; c++)
        if (*c != ' ')
            *w++ = *c;
    *w = 0;
}

int sk_tconf_build(const sk_config *cfg, int n, const char *const *names, const size_t *nlens,
                   const char *const *values, const size_t *vlens, sk_tconf *out, char *why,
                   size_t whylen)
{
    memset(out, 0, sizeof *out);
    for (int i = 0; i < n; i++) {
        const char *reason = sk_tconf_check(names[i], nlens[i], values[i], vlens[i]);
        if (reason) {
            snprintf(why, whylen, "Invalid value '%.*s' for configuration %.*s: %s",
                     (int)(vlens[i] > 200 ? 200 : vlens[i]), values[i],
                     (int)(nlens[i] > 200 ? 200 : nlens[i]), names[i], reason);
            if (!sk_tconf_find(names[i], nlens[i]))
                snprintf(why, whylen, "Unknown or unsupported topic configuration %.*s: %s",
                         (int)(nlens[i] > 200 ? 200 : nlens[i]), names[i], reason);
            return SK_KAFKA_INVALID_CONFIG;
        }
    }
    if (n > 0) {
        out->names = calloc((size_t)n, sizeof(char *));
        out->values = calloc((size_t)n, sizeof(char *));
        if (!out->names || !out->values) {
            sk_tconf_free(out);
            snprintf(why, whylen, "out of memory");
            return SK_ERR_NOMEM;
        }
    }
    for (int i = 0; i < n; i++) {
        /* A later duplicate replaces an earlier one. */
        int slot = out->noverrides;
        for (int j = 0; j < out->noverrides; j++)
            if (strlen(out->names[j]) == nlens[i] && memcmp(out->names[j], names[i], nlens[i]) == 0)
                slot = j;
        char *nv = strndup(values[i], vlens[i]);
        const sk_tconf_def *d = sk_tconf_find(names[i], nlens[i]);
        if (nv && d && d->type == SK_TC_BOOL) /* described as Kafka does: true or false */
            for (char *c = nv; *c; c++)
                *c = (char)tolower((unsigned char)*c);
        if (nv && d && strcmp(d->name, "cleanup.policy") == 0)
            unblank(nv); /* Kafka keeps the parsed list: "a, b" is "a,b" */
        if (slot == out->noverrides) {
            out->names[slot] = strndup(names[i], nlens[i]);
            out->noverrides++;
        } else {
            free(out->values[slot]);
        }
        out->values[slot] = nv;
        if (!out->names[slot] || !nv) {
            sk_tconf_free(out);
            snprintf(why, whylen, "out of memory");
            return SK_ERR_NOMEM;
        }
    }
    sk_tconf_resolve(cfg, out);
    return 0;
}

int sk_tconf_from_block(const sk_config *cfg, const uint8_t *block, size_t len, sk_tconf *out)
{
    sk_conf_iter it;
    if (sk_conf_iter_init(&it, block, len) != 0)
        return SK_ERR_CORRUPT;
    enum { MAXC = 64 };
    const char *names[MAXC], *values[MAXC];
    size_t nl[MAXC], vl[MAXC];
    int n = 0, rc;
    while ((rc = sk_conf_iter_next(&it, &names[n], &nl[n], &values[n], &vl[n])) == 1)
        if (++n == MAXC)
            break;
    if (rc < 0)
        return SK_ERR_CORRUPT;
    char why[256];
    rc = sk_tconf_build(cfg, n, names, nl, values, vl, out, why, sizeof why);
    return rc == 0 ? 0 : SK_ERR_CORRUPT;
}
