#include "gconf.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "meta.h"
#include "node.h"
#include "sk_err.h"
#include "sk_map.h"

#define NO_BOUNDS NULL, NULL, 0, 0

/* Kafka 4.3's GroupConfig: defaults from the broker properties named as
 * synonyms, bounds from Kafka's broker defaults. */
static const sk_gconf_def defs[] = {
    {"consumer.session.timeout.ms", SK_GC_INT, "45000", "group.consumer.session.timeout.ms", 1,
     "group.consumer.min.session.timeout.ms", "group.consumer.max.session.timeout.ms", 45000,
     60000, "How long a member of a consumer group (KIP-848 protocol) may go without a "
            "heartbeat before it is removed."},
    {"consumer.heartbeat.interval.ms", SK_GC_INT, "5000", "group.consumer.heartbeat.interval.ms",
     1, "group.consumer.min.heartbeat.interval.ms", "group.consumer.max.heartbeat.interval.ms",
     5000, 15000, "The heartbeat interval the coordinator gives to consumer group members."},
    {"consumer.assignment.interval.ms", SK_GC_INT, "1000", "group.consumer.assignment.interval.ms",
     0, NULL, "group.consumer.max.assignment.interval.ms", 0, 15000,
     "The least time between two assignment updates of a consumer group."},
    {"share.session.timeout.ms", SK_GC_INT, "45000", "group.share.session.timeout.ms", 1,
     "group.share.min.session.timeout.ms", "group.share.max.session.timeout.ms", 45000, 60000,
     "How long a share group member may go without a heartbeat before it is removed."},
    {"share.heartbeat.interval.ms", SK_GC_INT, "5000", "group.share.heartbeat.interval.ms", 1,
     "group.share.min.heartbeat.interval.ms", "group.share.max.heartbeat.interval.ms", 5000,
     15000, "The heartbeat interval the coordinator gives to share group members."},
    {"share.record.lock.duration.ms", SK_GC_INT, "30000", "group.share.record.lock.duration.ms",
     1000, "group.share.min.record.lock.duration.ms", "group.share.max.record.lock.duration.ms",
     15000, 60000, "How long a share group member holds the records it acquired."},
    {"share.delivery.count.limit", SK_GC_INT, "5", "group.share.delivery.count.limit", 2, NULL,
     "group.share.max.delivery.count.limit", 2, 10,
     "How many times a record is delivered to a share group before it is given up."},
    {"share.partition.max.record.locks", SK_GC_INT, "2000",
     "group.share.partition.max.record.locks", 100, NULL,
     "group.share.max.partition.max.record.locks", 100, 4000,
     "The most records of one partition a share group may hold acquired at once."},
    {"share.assignment.interval.ms", SK_GC_INT, "1000", "group.share.assignment.interval.ms", 0,
     NULL, "group.share.max.assignment.interval.ms", 0, 15000,
     "The least time between two assignment updates of a share group."},
    {"share.auto.offset.reset", SK_GC_OFFSET_RESET, "latest", "share.auto.offset.reset", 0,
     NO_BOUNDS,
     "Where a share group starts reading a partition: earliest, latest, or "
     "by_duration:<ISO-8601 duration> back from now."},
    {"share.isolation.level", SK_GC_ISOLATION, "read_uncommitted", "share.isolation.level", 0,
     NO_BOUNDS, "Whether a share group is given transactional records before their commit "
           "(read_uncommitted) or only once committed (read_committed)."},
    {"share.renew.acknowledge.enable", SK_GC_BOOL, "true", "share.renew.acknowledge.enable", 0,
     NO_BOUNDS, "Whether share group members may renew the lock of records they hold."},
    {"streams.session.timeout.ms", SK_GC_INT, "45000", "group.streams.session.timeout.ms", 1,
     "group.streams.min.session.timeout.ms", "group.streams.max.session.timeout.ms", 45000,
     60000, "How long a streams group member may go without a heartbeat before it is removed."},
    {"streams.heartbeat.interval.ms", SK_GC_INT, "5000", "group.streams.heartbeat.interval.ms", 1,
     "group.streams.min.heartbeat.interval.ms", "group.streams.max.heartbeat.interval.ms", 5000,
     15000, "The heartbeat interval the coordinator gives to streams group members."},
    {"streams.num.standby.replicas", SK_GC_INT, "0", "group.streams.num.standby.replicas", 0,
     NULL, "group.streams.max.standby.replicas", 0, 2,
     "How many standby replicas of each task a streams group keeps."},
    {"streams.initial.rebalance.delay.ms", SK_GC_INT, "3000",
     "group.streams.initial.rebalance.delay.ms", 0, NO_BOUNDS,
     "How long a new streams group waits for more members before its first assignment."},
    {"streams.assignment.interval.ms", SK_GC_INT, "1000", "group.streams.assignment.interval.ms",
     0, NULL, "group.streams.max.assignment.interval.ms", 0, 15000,
     "The least time between two assignment updates of a streams group."},
};
#define NDEFS ((int)(sizeof defs / sizeof defs[0]))

int sk_gconf_ndefs(void)
{
    return NDEFS;
}

const sk_gconf_def *sk_gconf_def_at(int i)
{
    return i >= 0 && i < NDEFS ? &defs[i] : NULL;
}

const sk_gconf_def *sk_gconf_find(const char *name, size_t len)
{
    for (int i = 0; i < NDEFS; i++)
        if (strlen(defs[i].name) == len && memcmp(defs[i].name, name, len) == 0)
            return &defs[i];
    return NULL;
}

/* ---- checks (Kafka's ConfigDef parsing, then the broker bounds) ---- */

/* An ISO-8601 duration as Java's Duration.parse reads it, not negative:
 * P[nD][T[nH][nM][n[.n]S]], at least one part, case-insensitive. */
static bool iso_duration(const char *s)
{
    if (toupper((unsigned char)*s++) != 'P')
        return false;
    bool any = false, time = false;
    const char *units = "D";
    while (*s) {
        if (!time && toupper((unsigned char)*s) == 'T') {
            time = true;
            units = "HMS";
            s++;
            if (!*s)
                return false;
            continue;
        }
        if (!isdigit((unsigned char)*s))
            return false;
        while (isdigit((unsigned char)*s))
            s++;
        if (*s == '.' && time) {
            s++;
            while (isdigit((unsigned char)*s))
                s++;
            if (toupper((unsigned char)*s) != 'S')
                return false;
        }
        const char *u = strchr(units, toupper((unsigned char)*s));
        if (!*s || !u)
            return false;
        units = u + 1;
        any = true;
        s++;
    }
    return any;
}

static int16_t check_int(const sk_gconf_def *d, const char *v, char *msg, size_t ml)
{
    char *end;
    errno = 0;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || errno || x < INT32_MIN || x > INT32_MAX || isspace((unsigned char)*v)) {
        snprintf(msg, ml, "Invalid value %s for configuration %s: Not a number of type INT", v,
                 d->name);
        return SK_KAFKA_INVALID_CONFIG;
    }
    if (x < d->at_least) {
        snprintf(msg, ml, "Invalid value %lld for configuration %s: Value must be at least %d",
                 x, d->name, (int)d->at_least);
        return SK_KAFKA_INVALID_CONFIG;
    }
    if (d->min_prop && x < d->min) {
        snprintf(msg, ml, "%s must be greater than or equal to %s", d->name, d->min_prop);
        return SK_KAFKA_INVALID_CONFIG;
    }
    if (d->max_prop && x > d->max) {
        snprintf(msg, ml, "%s must be less than or equal to %s", d->name, d->max_prop);
        return SK_KAFKA_INVALID_CONFIG;
    }
    return 0;
}

static int16_t check_text(const sk_gconf_def *d, const char *v, char *msg, size_t ml)
{
    switch (d->type) {
    case SK_GC_BOOL:
        if (strcasecmp(v, "true") == 0 || strcasecmp(v, "false") == 0)
            return 0;
        snprintf(msg, ml,
                 "Invalid value %s for configuration %s: Expected value to be either true or "
                 "false",
                 v, d->name);
        return SK_KAFKA_INVALID_CONFIG;
    case SK_GC_ISOLATION:
        if (strcmp(v, "read_committed") == 0 || strcmp(v, "read_uncommitted") == 0)
            return 0;
        snprintf(msg, ml,
                 "Invalid value %s for configuration %s: String must be one of: read_committed, "
                 "read_uncommitted",
                 v, d->name);
        return SK_KAFKA_INVALID_CONFIG;
    case SK_GC_OFFSET_RESET:
        if (strcmp(v, "earliest") == 0 || strcmp(v, "latest") == 0 ||
            (strncmp(v, "by_duration:", 12) == 0 && iso_duration(v + 12)))
            return 0;
        snprintf(msg, ml,
                 "Invalid value %s for configuration %s: the value must be 'earliest', 'latest' "
                 "or 'by_duration:<PnDTnHnMn.nS>'",
                 v, d->name);
        return SK_KAFKA_INVALID_CONFIG;
    case SK_GC_INT:
        break;
    }
    return check_int(d, v, msg, ml);
}

int16_t sk_gconf_check(const char *name, size_t nlen, const char *value, size_t vlen,
                       char norm[SK_GCONF_VALUE_MAX], char *msg, size_t msglen)
{
    const sk_gconf_def *d = sk_gconf_find(name, nlen);
    if (!d) {
        snprintf(msg, msglen, "Unknown group config name: %.*s", (int)(nlen > 200 ? 200 : nlen),
                 name);
        return SK_KAFKA_INVALID_CONFIG;
    }
    /* Kafka trims a value before parsing it. */
    while (vlen && isspace((unsigned char)*value)) {
        value++;
        vlen--;
    }
    while (vlen && isspace((unsigned char)value[vlen - 1]))
        vlen--;
    if (vlen >= SK_GCONF_VALUE_MAX) {
        snprintf(msg, msglen, "The value of %s is too long", d->name);
        return SK_KAFKA_INVALID_CONFIG;
    }
    memcpy(norm, value, vlen);
    norm[vlen] = 0;
    int16_t rc = check_text(d, norm, msg, msglen);
    if (rc == 0 && d->type == SK_GC_INT)
        snprintf(norm, SK_GCONF_VALUE_MAX, "%lld", strtoll(norm, NULL, 10));
    else if (rc == 0 && d->type == SK_GC_BOOL)
        snprintf(norm, SK_GCONF_VALUE_MAX, "%s", strcasecmp(norm, "true") == 0 ? "true" : "false");
    return rc;
}

/* ---- the sets in memory ---- */

static void gconf_free(sk_gconf *g)
{
    if (!g)
        return;
    for (int i = 0; i < g->n; i++) {
        free(g->names[i]);
        free(g->values[i]);
    }
    free(g->names);
    free(g->values);
    free(g);
}

const sk_gconf *sk_gconf_get(const sk_node *n, const char *group, size_t glen)
{
    return n->gconfs ? sk_map_get(n->gconfs, group, glen) : NULL;
}

const sk_gconf *sk_uconf_get(const sk_node *n, const char *user, size_t ulen)
{
    return n->uconfs ? sk_map_get(n->uconfs, user, ulen) : NULL;
}

static sk_gconf *gconf_new(int count, const char *const *names, const size_t *nlens,
                           const char *const *values, const size_t *vlens)
{
    sk_gconf *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->names = calloc((size_t)count, sizeof *g->names);
    g->values = calloc((size_t)count, sizeof *g->values);
    if (!g->names || !g->values) {
        gconf_free(g);
        return NULL;
    }
    for (; g->n < count; g->n++) {
        g->names[g->n] = strndup(names[g->n], nlens[g->n]);
        g->values[g->n] = strndup(values[g->n], vlens[g->n]);
        if (!g->names[g->n] || !g->values[g->n]) {
            g->n++;
            gconf_free(g);
            return NULL;
        }
    }
    return g;
}

/* Group and user sets are kept alike, each in its own map. */
static int set_apply(sk_map **map, const char *key, size_t klen, int count,
                     const char *const *names, const size_t *nlens, const char *const *values,
                     const size_t *vlens)
{
    if (!*map && !(*map = sk_map_new()))
        return SK_ERR_NOMEM;
    if (count <= 0) {
        gconf_free(sk_map_del(*map, key, klen));
        return 0;
    }
    sk_gconf *g = gconf_new(count, names, nlens, values, vlens);
    if (!g)
        return SK_ERR_NOMEM;
    sk_gconf *old = sk_map_get(*map, key, klen);
    if (sk_map_put(*map, key, klen, g) != 0) {
        gconf_free(g);
        return SK_ERR_NOMEM;
    }
    gconf_free(old);
    return 0;
}

int sk_gconf_apply(sk_node *n, const char *group, size_t glen, int count,
                   const char *const *names, const size_t *nlens, const char *const *values,
                   const size_t *vlens)
{
    return set_apply(&n->gconfs, group, glen, count, names, nlens, values, vlens);
}

int sk_uconf_apply(sk_node *n, const char *user, size_t ulen, int count,
                   const char *const *names, const size_t *nlens, const char *const *values,
                   const size_t *vlens)
{
    return set_apply(&n->uconfs, user, ulen, count, names, nlens, values, vlens);
}

static void sets_free(sk_map **map)
{
    if (!*map)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(*map, &it, NULL, NULL, &v))
        gconf_free(v);
    sk_map_destroy(*map);
    *map = NULL;
}

void sk_gconf_free_all(sk_node *n)
{
    sets_free(&n->gconfs);
    sets_free(&n->uconfs);
}

/* ---- bodies ---- */

void sk_gconf_body_put(sk_buf *b, const char *group, size_t glen, int count,
                       const char *const *names, const size_t *nlens, const char *const *values,
                       const size_t *vlens)
{
    sk_buf_str(b, group, glen);
    sk_buf_u32(b, (uint32_t)count);
    for (int i = 0; i < count; i++) {
        sk_buf_str(b, names[i], nlens[i]);
        sk_buf_str(b, values[i], vlens[i]);
    }
}

enum { LOAD_MAX = 64 };

static int set_load(sk_map **map, const uint8_t *body, size_t len)
{
    sk_rd r;
    sk_rd_init(&r, body, len);
    size_t glen;
    const char *group = (const char *)sk_rd_str(&r, &glen);
    if (sk_rd_failed(&r))
        return SK_ERR_CORRUPT;
    sk_conf_iter it;
    if (sk_conf_iter_init(&it, r.p, sk_rd_left(&r)) != 0)
        return SK_ERR_CORRUPT;
    const char *names[LOAD_MAX], *values[LOAD_MAX];
    size_t nl[LOAD_MAX], vl[LOAD_MAX];
    int count = 0, rc;
    while (count < LOAD_MAX &&
           (rc = sk_conf_iter_next(&it, &names[count], &nl[count], &values[count], &vl[count])) ==
               1)
        count++;
    if (rc < 0)
        return SK_ERR_CORRUPT;
    return set_apply(map, group, glen, count, names, nl, values, vl);
}

int sk_gconf_load(sk_node *n, const uint8_t *body, size_t len)
{
    return set_load(&n->gconfs, body, len);
}

int sk_uconf_load(sk_node *n, const uint8_t *body, size_t len)
{
    return set_load(&n->uconfs, body, len);
}

static uint32_t set_snapshot(sk_map *map, uint8_t kind, sk_buf *b)
{
    if (!map)
        return 0;
    uint32_t k = 0;
    size_t it = 0;
    const void *key;
    size_t klen;
    void *v;
    while (sk_map_next(map, &it, &key, &klen, &v)) {
        const sk_gconf *g = v;
        size_t nl[LOAD_MAX], vl[LOAD_MAX];
        int cnt = g->n < LOAD_MAX ? g->n : LOAD_MAX;
        for (int i = 0; i < cnt; i++) {
            nl[i] = strlen(g->names[i]);
            vl[i] = strlen(g->values[i]);
        }
        sk_buf body;
        sk_buf_init(&body, 0);
        sk_gconf_body_put(&body, key, klen, cnt, (const char *const *)g->names, nl,
                          (const char *const *)g->values, vl);
        sk_buf_u8(b, kind);
        sk_buf_str(b, (const char *)body.data, body.len);
        if (sk_buf_failed(&body))
            b->failed = true;
        sk_buf_free(&body);
        k++;
    }
    return k;
}

uint32_t sk_gconf_snapshot(const sk_node *n, sk_buf *b)
{
    return set_snapshot(n->gconfs, SK_SNAP_GROUP_CONFIGS, b) +
           set_snapshot(n->uconfs, SK_SNAP_USER_CONFIGS, b);
}
