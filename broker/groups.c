#include "acl.h"
#include "authz.h"
#include "groups.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "authz.h"
#include "cgroup.h"
#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "gcoord.h"
#include "handlers.h"
#include "kmsg.h"
#include "meta.h"
#include "net.h"
#include "node.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "txns.h"

#define MAX_METADATA 4096 /* Kafka's offset.metadata.max.bytes */

/* ---- record codec ---- */

int sk_grec_init(sk_grec *g, const uint8_t *body, size_t len)
{
    memset(g, 0, sizeof *g);
    sk_rd_init(&g->rd, body, len);
    g->op = sk_rd_u8(&g->rd);
    g->group = (const char *)sk_rd_str(&g->rd, &g->glen);
    if (g->op == SK_GREC_COMMIT || g->op == SK_GREC_DELETE_OFFSETS)
        g->left = sk_rd_u32(&g->rd);
    else if (g->op != SK_GREC_DELETE_GROUP && g->op != SK_GREC_CGROUP)
        return SK_ERR_CORRUPT;
    return sk_rd_failed(&g->rd) ? SK_ERR_CORRUPT : 0;
}

size_t sk_grec_cgroup_len(const sk_grec *g)
{
    return g->op == SK_GREC_CGROUP ? sk_rd_left(&g->rd) : 0;
}

const uint8_t *sk_grec_cgroup(const sk_grec *g)
{
    sk_rd r = g->rd;
    return sk_rd_bytes(&r, sk_rd_left(&r));
}

int sk_grec_next(sk_grec *g, sk_grec_ent *e)
{
    if (g->left == 0)
        return sk_rd_left(&g->rd) == 0 ? 0 : -1;
    g->left--;
    memset(e, 0, sizeof *e);
    e->topic = (const char *)sk_rd_str(&g->rd, &e->tlen);
    e->part = (int32_t)sk_rd_u32(&g->rd);
    if (g->op == SK_GREC_COMMIT) {
        e->offset = (int64_t)sk_rd_u64(&g->rd);
        e->epoch = (int32_t)sk_rd_u32(&g->rd);
        e->meta = (const char *)sk_rd_str(&g->rd, &e->mlen);
        e->ts = (int64_t)sk_rd_u64(&g->rd);
    }
    return sk_rd_failed(&g->rd) ? -1 : 1;
}

void sk_grec_begin(sk_buf *b, uint8_t op, const char *group, size_t glen, uint32_t n)
{
    sk_buf_u8(b, op);
    sk_buf_str(b, group, glen);
    if (op == SK_GREC_COMMIT || op == SK_GREC_DELETE_OFFSETS)
        sk_buf_u32(b, n);
}

void sk_grec_put(sk_buf *b, uint8_t op, const sk_grec_ent *e)
{
    sk_buf_str(b, e->topic, e->tlen);
    sk_buf_u32(b, (uint32_t)e->part);
    if (op == SK_GREC_COMMIT) {
        sk_buf_u64(b, (uint64_t)e->offset);
        sk_buf_u32(b, (uint32_t)e->epoch);
        sk_buf_str(b, e->meta ? e->meta : "", e->mlen);
        sk_buf_u64(b, (uint64_t)e->ts);
    }
}

/* ---- committed offsets in memory ---- */

typedef struct goff {
    char *topic;
    int32_t part;
    int64_t offset;
    int32_t epoch;
    char *meta;
    size_t mlen;
    int64_t ts;
} goff;

typedef struct gstate {
    char *id;
    sk_map *offs; /* topic '\0' be32 partition -> goff */
    int64_t empty_since;
} gstate;

struct sk_groups {
    sk_node *n;
    sk_gc *gc;
    sk_cg *cg; /* consumer-protocol (KIP-848) groups */
    sk_map *states; /* group id -> gstate */
    struct event *tick_ev;
    struct event *expire_ev;
};

/* A group request refused: GROUP_AUTHORIZATION_FAILED when the client may
 * not do op, else the other error. */
static int16_t group_error(sk_req *r, kc_str group, int16_t other)
{
    return sk_authz_group(r, group, sk_authz_op(r)) ? other : SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
}

static size_t off_key(char *buf, size_t cap, const char *topic, size_t tlen, int32_t part)
{
    if (tlen + 5 > cap)
        tlen = cap - 5;
    memcpy(buf, topic, tlen);
    buf[tlen] = 0;
    uint32_t p = (uint32_t)part;
    buf[tlen + 1] = (char)(p >> 24);
    buf[tlen + 2] = (char)(p >> 16);
    buf[tlen + 3] = (char)(p >> 8);
    buf[tlen + 4] = (char)p;
    return tlen + 5;
}

static void goff_free(goff *o)
{
    free(o->topic);
    free(o->meta);
    free(o);
}

static void gstate_free(gstate *s)
{
    size_t it = 0;
    void *v;
    while (sk_map_next(s->offs, &it, NULL, NULL, &v))
        goff_free(v);
    sk_map_destroy(s->offs);
    free(s->id);
    free(s);
}

static gstate *state_get(sk_groups *gs, const char *id, size_t len, bool create)
{
    gstate *s = sk_map_get(gs->states, id, len);
    if (s || !create)
        return s;
    s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->id = strndup(id, len);
    s->offs = sk_map_new();
    s->empty_since = sk_mono_ms();
    if (!s->id || !s->offs || sk_map_put(gs->states, id, len, s) != 0) {
        sk_map_destroy(s->offs);
        free(s->id);
        free(s);
        return NULL;
    }
    return s;
}

static void state_drop(sk_groups *gs, gstate *s)
{
    sk_map_del(gs->states, s->id, strlen(s->id));
    gstate_free(s);
}

static int apply_ent(gstate *s, uint8_t op, const sk_grec_ent *e)
{
    char key[512];
    size_t kl = off_key(key, sizeof key, e->topic, e->tlen, e->part);
    goff *o = sk_map_get(s->offs, key, kl);
    if (op == SK_GREC_DELETE_OFFSETS) {
        if (o) {
            sk_map_del(s->offs, key, kl);
            goff_free(o);
        }
        return 0;
    }
    if (!o) {
        o = calloc(1, sizeof *o);
        if (!o)
            return SK_ERR_NOMEM;
        o->topic = strndup(e->topic, e->tlen);
        o->part = e->part;
        if (!o->topic || sk_map_put(s->offs, key, kl, o) != 0) {
            free(o->topic);
            free(o);
            return SK_ERR_NOMEM;
        }
    }
    /* Commit metadata is a byte string: NUL bytes included, never cut. */
    char *meta = malloc(e->mlen + 1);
    if (!meta)
        return SK_ERR_NOMEM;
    if (e->mlen)
        memcpy(meta, e->meta, e->mlen);
    meta[e->mlen] = 0;
    free(o->meta);
    o->meta = meta;
    o->mlen = e->mlen;
    o->offset = e->offset;
    o->epoch = e->epoch;
    o->ts = e->ts;
    return 0;
}

/* Applies a record body to memory: loading, and after each append. */
static int apply_body(sk_groups *gs, const uint8_t *body, size_t len)
{
    sk_grec g;
    if (sk_grec_init(&g, body, len) != 0)
        return SK_ERR_CORRUPT;
    if (g.op == SK_GREC_CGROUP) {
        size_t bl = sk_grec_cgroup_len(&g);
        if (bl)
            return sk_cg_import(gs->cg, g.group, g.glen, sk_grec_cgroup(&g), bl, sk_mono_ms());
        sk_cg_group *old = sk_cg_find(gs->cg, g.group, g.glen);
        if (old)
            sk_cg_remove(gs->cg, old);
        return 0;
    }
    if (g.op == SK_GREC_DELETE_GROUP) {
        gstate *s = state_get(gs, g.group, g.glen, false);
        if (s)
            state_drop(gs, s);
        sk_gc_group *cg = sk_gc_find(gs->gc, g.group, g.glen);
        if (cg && sk_gc_group_nmembers(cg) == 0)
            sk_gc_remove(gs->gc, cg);
        sk_cg_group *ng = sk_cg_find(gs->cg, g.group, g.glen);
        if (ng && sk_cg_group_nmembers(ng) == 0)
            sk_cg_remove(gs->cg, ng);
        return 0;
    }
    gstate *s = state_get(gs, g.group, g.glen, g.op == SK_GREC_COMMIT);
    if (!s)
        return g.op == SK_GREC_COMMIT ? SK_ERR_NOMEM : 0;
    sk_grec_ent e;
    int rc;
    while ((rc = sk_grec_next(&g, &e)) == 1)
        if (apply_ent(s, g.op, &e) != 0)
            return SK_ERR_NOMEM;
    return rc < 0 ? SK_ERR_CORRUPT : 0;
}

int sk_groups_load(sk_groups *gs, const uint8_t *body, size_t len)
{
    return apply_body(gs, body, len);
}

/* Appends a group record body as a WAL metadata record; the reads that
 * show groups wait for it (sk_node_shown). */
static int append_record(sk_groups *gs, const sk_buf *body, sk_durable_fn fn, void *arg)
{
    if (sk_buf_failed(body))
        return SK_ERR_NOMEM;
    sk_buf b;
    sk_buf_init(&b, 0);
    sk_meta_group(&b, body->data, body->len);
    if (sk_buf_failed(&b)) {
        sk_buf_free(&b);
        return SK_ERR_NOMEM;
    }
    struct iovec iov = {b.data, b.len};
    wal_lsn end = 0;
    int rc = sk_node_append(gs->n, SK_WAL_META, &iov, 1, fn, arg, &end);
    sk_buf_free(&b);
    if (rc == 0)
        sk_node_shown(gs->n, end);
    return rc;
}

int sk_groups_append(sk_groups *gs, const sk_buf *body, sk_durable_fn fn, void *arg)
{
    int rc = append_record(gs, body, fn, arg);
    if (rc != 0)
        return rc;
    if (apply_body(gs, body->data, body->len) != 0)
        SK_WARN("groups", "a group record appended but not applied in memory");
    return 0;
}

void sk_groups_each_offset(const sk_groups *gs,
                           void (*fn)(void *arg, const char *group, const char *topic,
                                      int32_t part, int64_t offset),
                           void *arg)
{
    size_t it = 0;
    void *v;
    while (sk_map_next(gs->states, &it, NULL, NULL, &v)) {
        const gstate *s = v;
        size_t oit = 0;
        void *ov;
        while (sk_map_next(s->offs, &oit, NULL, NULL, &ov)) {
            const goff *o = ov;
            fn(arg, s->id, o->topic, o->part, o->offset);
        }
    }
}

/* A consumer-protocol group's state record body (op 4); NULL g: none. */
static void cgroup_body(sk_buf *body, const char *id, const sk_cg_group *g)
{
    sk_grec_begin(body, SK_GREC_CGROUP, id, strlen(id), 0);
    if (g)
        sk_cg_export(g, body);
}

static uint32_t snapshot_consumer_groups(const sk_groups *gs, sk_buf *b)
{
    uint32_t count = 0;
    size_t it = 0;
    sk_cg_group *g;
    while ((g = sk_cg_next(gs->cg, &it))) {
        sk_buf body;
        sk_buf_init(&body, 0);
        cgroup_body(&body, sk_cg_group_id(g), g);
        sk_buf_u8(b, SK_SNAP_GROUPS);
        sk_buf_str(b, (const char *)body.data, body.len);
        if (sk_buf_failed(&body))
            b->failed = true;
        sk_buf_free(&body);
        count++;
    }
    return count;
}

uint32_t sk_groups_snapshot(const sk_groups *gs, sk_buf *b)
{
    uint32_t count = snapshot_consumer_groups(gs, b);
    size_t it = 0;
    void *v;
    while (sk_map_next(gs->states, &it, NULL, NULL, &v)) {
        gstate *s = v;
        if (sk_map_count(s->offs) == 0)
            continue;
        sk_buf body;
        sk_buf_init(&body, 0);
        sk_grec_begin(&body, SK_GREC_COMMIT, s->id, strlen(s->id),
                      (uint32_t)sk_map_count(s->offs));
        size_t oit = 0;
        void *ov;
        while (sk_map_next(s->offs, &oit, NULL, NULL, &ov)) {
            goff *o = ov;
            sk_grec_ent e = {o->topic, strlen(o->topic), o->part, o->offset, o->epoch,
                             o->meta,  o->mlen,         o->ts};
            sk_grec_put(&body, SK_GREC_COMMIT, &e);
        }
        sk_buf_u8(b, SK_SNAP_GROUPS);
        sk_buf_str(b, (const char *)body.data, body.len);
        if (sk_buf_failed(&body))
            b->failed = true;
        sk_buf_free(&body);
        count++;
    }
    return count;
}

void sk_groups_topic_deleted(sk_groups *gs, const char *topic)
{
    size_t tl = strlen(topic);
    size_t it = 0;
    void *v;
    while (sk_map_next(gs->states, &it, NULL, NULL, &v)) {
        gstate *s = v;
        size_t oit = 0;
        const void *k;
        size_t kl;
        void *ov;
        while (sk_map_next(s->offs, &oit, &k, &kl, &ov)) {
            goff *o = ov;
            if (strlen(o->topic) == tl && memcmp(o->topic, topic, tl) == 0) {
                sk_map_del(s->offs, k, kl);
                goff_free(o);
            }
        }
    }
}

/* Consumer-protocol groups moved away: forgotten (members rejoin at the
 * new coordinator, which answers them UNKNOWN_MEMBER_ID first). */
static void release_consumer_groups(sk_groups *gs, bool (*in)(void *arg, const char *g, size_t len),
                                    void *arg)
{
    size_t it = 0, n = 0;
    sk_cg_group *g, **gone = NULL;
    while ((g = sk_cg_next(gs->cg, &it))) {
        const char *id = sk_cg_group_id(g);
        if (!in(arg, id, strlen(id)))
            continue;
        sk_cg_group **ng = realloc(gone, (n + 1) * sizeof *ng);
        if (!ng)
            break;
        gone = ng;
        gone[n++] = g;
    }
    for (size_t i = 0; i < n; i++)
        sk_cg_remove(gs->cg, gone[i]);
    free(gone);
}

void sk_groups_release(sk_groups *gs, bool (*in)(void *arg, const char *g, size_t len), void *arg)
{
    /* Collect first: removing changes the maps being walked. */
    size_t it = 0, n = 0;
    sk_gc_group *g, **gone = NULL;
    while ((g = sk_gc_next(gs->gc, &it))) {
        const char *id = sk_gc_group_id(g);
        if (!in(arg, id, strlen(id)))
            continue;
        sk_gc_group **ng = realloc(gone, (n + 1) * sizeof *ng);
        if (!ng)
            break;
        gone = ng;
        gone[n++] = g;
    }
    for (size_t i = 0; i < n; i++)
        sk_gc_evict(gs->gc, gone[i], SK_KAFKA_NOT_COORDINATOR);
    free(gone);
    release_consumer_groups(gs, in, arg);
    gstate **drop = NULL;
    size_t nd = 0;
    void *v;
    it = 0;
    while (sk_map_next(gs->states, &it, NULL, NULL, &v)) {
        gstate *s = v;
        if (!in(arg, s->id, strlen(s->id)))
            continue;
        gstate **nx = realloc(drop, (nd + 1) * sizeof *nx);
        if (!nx)
            break;
        drop = nx;
        drop[nd++] = s;
    }
    for (size_t i = 0; i < nd; i++) {
        sk_map_del(gs->states, drop[i]->id, strlen(drop[i]->id));
        gstate_free(drop[i]);
    }
    free(drop);
}

/* ---- consumer-protocol group state in the log ---- */

static void cgroup_written(void *arg, int err)
{
    sk_req *r = arg;
    if (!r) {
        if (err)
            SK_WARN("groups", "could not record a consumer group's state: %s", sk_err_name(err));
        return;
    }
    if (err && !r->async_err)
        r->async_err = err;
    if (--r->pending == 0)
        r->on_done(r);
}

/* Appends the state of consumer group `id` (g NULL: it has none any more).
 * The state in memory is already the new one: nothing is applied. With r,
 * r->pending counts the append until it is durable. */
int sk_groups_write_cgroup(sk_groups *gs, const char *id, const sk_cg_group *g, sk_req *r)
{
    sk_buf body;
    sk_buf_init(&body, 0);
    cgroup_body(&body, id, g);
    if (r)
        r->pending++;
    int rc = append_record(gs, &body, cgroup_written, r);
    if (rc != 0 && r)
        r->pending--;
    sk_buf_free(&body);
    return rc;
}

/* ---- timers ---- */

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_groups *gs = arg;
    sk_gc_tick(gs->gc, sk_mono_ms());
    if (sk_cg_tick(gs->cg, sk_mono_ms()) == 0)
        return;
    /* Members whose session ended are gone: record the groups they left;
     * one left with classic members only may become a classic group. */
    size_t it = 0;
    sk_cg_group *g, **down = NULL;
    size_t ndown = 0;
    while ((g = sk_cg_next(gs->cg, &it))) {
        if (!sk_cg_take_dirty(g))
            continue;
        if (sk_cg_all_classic(g)) {
            sk_cg_group **nd = realloc(down, (ndown + 1) * sizeof *nd);
            if (nd) {
                down = nd;
                down[ndown++] = g;
                continue;
            }
        }
        if (sk_groups_write_cgroup(gs, sk_cg_group_id(g), g, NULL) != 0)
            SK_WARN("groups", "could not record consumer group %s", sk_cg_group_id(g));
    }
    for (size_t i = 0; i < ndown; i++)
        if (!sk_groups_maybe_downgrade(gs, gs->n, down[i], NULL) &&
            sk_groups_write_cgroup(gs, sk_cg_group_id(down[i]), down[i], NULL) != 0)
            SK_WARN("groups", "could not record consumer group %s", sk_cg_group_id(down[i]));
    free(down);
}

static void expire_done(void *arg, int err)
{
    (void)arg;
    if (err)
        SK_WARN("groups", "could not record expired offsets: %s", sk_err_name(err));
}

static void forget_empty_consumer_groups(sk_groups *gs)
{
    size_t it = 0, n = 0;
    sk_cg_group *g, **gone = NULL;
    while ((g = sk_cg_next(gs->cg, &it))) {
        const char *id = sk_cg_group_id(g);
        if (sk_cg_group_nmembers(g) > 0 || sk_map_get(gs->states, id, strlen(id)))
            continue;
        sk_cg_group **ng = realloc(gone, (n + 1) * sizeof *ng);
        if (!ng)
            break;
        gone = ng;
        gone[n++] = g;
    }
    for (size_t i = 0; i < n; i++) {
        if (sk_groups_write_cgroup(gs, sk_cg_group_id(gone[i]), NULL, NULL) != 0)
            continue; /* kept: its state stays in the log, so does it here */
        sk_cg_remove(gs->cg, gone[i]);
    }
    free(gone);
}

/* Offsets of a group that has been empty for offsets.retention.minutes
 * expire, each when it is that old too; a group left with nothing goes. */
static void expire_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_groups *gs = arg;
    sk_node *n = gs->n;
    int64_t now_mono = sk_mono_ms();
    int64_t now = sk_now_ms();
    int64_t retention = (int64_t)n->cfg->offsets_retention_minutes * 60000;
    size_t it = 0;
    void *v;
    /* Empty groups without committed offsets are forgotten, as Kafka's
     * cleanup does: nothing else would ever free them. */
    size_t git = 0;
    sk_gc_group *eg, **gone = NULL;
    size_t ngone = 0;
    while ((eg = sk_gc_next(gs->gc, &git))) {
        const char *id = sk_gc_group_id(eg);
        if (sk_gc_group_state(eg) != SK_GC_EMPTY || sk_gc_group_nmembers(eg) > 0 ||
            sk_map_get(gs->states, id, strlen(id)))
            continue;
        sk_gc_group **ng = realloc(gone, (ngone + 1) * sizeof *ng);
        if (!ng)
            break;
        gone = ng;
        gone[ngone++] = eg;
    }
    for (size_t i = 0; i < ngone; i++)
        sk_gc_remove(gs->gc, gone[i]);
    free(gone);
    forget_empty_consumer_groups(gs);
    /* Collect the victims first: appending applies changes to the map. */
    char **drop = NULL;
    size_t ndrop = 0;
    while (sk_map_next(gs->states, &it, NULL, NULL, &v)) {
        gstate *s = v;
        sk_gc_group *cg = sk_gc_find(gs->gc, s->id, strlen(s->id));
        sk_cg_group *ng = sk_cg_find(gs->cg, s->id, strlen(s->id));
        if ((cg && sk_gc_group_state(cg) != SK_GC_EMPTY) || (ng && sk_cg_group_nmembers(ng) > 0)) {
            s->empty_since = now_mono;
            continue;
        }
        if (now_mono - s->empty_since < retention)
            continue;
        char **nd = realloc(drop, (ndrop + 1) * sizeof *nd);
        if (!nd)
            break;
        drop = nd;
        drop[ndrop++] = strdup(s->id);
    }
    for (size_t i = 0; i < ndrop; i++) {
        gstate *s = drop[i] ? state_get(gs, drop[i], strlen(drop[i]), false) : NULL;
        if (!s) {
            free(drop[i]);
            continue;
        }
        sk_buf body;
        sk_buf_init(&body, 0);
        uint32_t nexp = 0;
        size_t oit = 0;
        void *ov;
        while (sk_map_next(s->offs, &oit, NULL, NULL, &ov))
            if (now - ((goff *)ov)->ts >= retention)
                nexp++;
        bool all = nexp == sk_map_count(s->offs);
        if (nexp == 0) {
            free(drop[i]);
            sk_buf_free(&body);
            continue;
        }
        if (all) {
            sk_grec_begin(&body, SK_GREC_DELETE_GROUP, s->id, strlen(s->id), 0);
        } else {
            sk_grec_begin(&body, SK_GREC_DELETE_OFFSETS, s->id, strlen(s->id), nexp);
            oit = 0;
            while (sk_map_next(s->offs, &oit, NULL, NULL, &ov)) {
                goff *o = ov;
                if (now - o->ts >= retention) {
                    sk_grec_ent e = {o->topic, strlen(o->topic), o->part, 0, 0, NULL, 0, 0};
                    sk_grec_put(&body, SK_GREC_DELETE_OFFSETS, &e);
                }
            }
        }
        /* Applied at once: s may be gone after the append. */
        if (sk_groups_append(gs, &body, expire_done, NULL) == 0)
            SK_INFO("groups", "group %s: %u committed offsets expired", drop[i], nexp);
        sk_buf_free(&body);
        free(drop[i]);
    }
    free(drop);
}

sk_groups *sk_groups_new(sk_node *n)
{
    sk_groups *gs = calloc(1, sizeof *gs);
    if (!gs)
        return NULL;
    gs->n = n;
    sk_gc_config gcfg = {n->cfg->group_min_session_timeout_ms, n->cfg->group_max_session_timeout_ms,
                         n->cfg->group_initial_rebalance_delay_ms};
    gs->gc = sk_gc_new(&gcfg);
    sk_cg_config ccfg = {n->cfg->group_consumer_session_timeout_ms,
                         n->cfg->group_consumer_heartbeat_interval_ms,
                         n->cfg->group_consumer_max_size, n->cfg->group_consumer_assignors};
    gs->cg = sk_cg_new(&ccfg);
    gs->states = sk_map_new();
    gs->tick_ev = event_new(n->base, -1, EV_PERSIST, tick_cb, gs);
    gs->expire_ev = event_new(n->base, -1, EV_PERSIST, expire_cb, gs);
    if (!gs->gc || !gs->cg || !gs->states || !gs->tick_ev || !gs->expire_ev) {
        sk_groups_destroy(gs);
        return NULL;
    }
    struct timeval tick = {0, 100000};
    event_add(gs->tick_ev, &tick);
    int64_t iv = n->cfg->offsets_retention_check_interval_ms;
    struct timeval etv = {iv / 1000, (iv % 1000) * 1000};
    event_add(gs->expire_ev, &etv);
    return gs;
}

void sk_groups_abort_waiters(sk_groups *gs)
{
    sk_gc_config gcfg = {gs->n->cfg->group_min_session_timeout_ms,
                         gs->n->cfg->group_max_session_timeout_ms,
                         gs->n->cfg->group_initial_rebalance_delay_ms};
    sk_gc *fresh = sk_gc_new(&gcfg);
    if (!fresh)
        return;
    sk_gc_destroy(gs->gc, SK_KAFKA_COORDINATOR_NOT_AVAILABLE);
    gs->gc = fresh;
}

void sk_groups_destroy(sk_groups *gs)
{
    if (!gs)
        return;
    if (gs->tick_ev)
        event_free(gs->tick_ev);
    if (gs->expire_ev)
        event_free(gs->expire_ev);
    sk_gc_destroy(gs->gc, SK_KAFKA_COORDINATOR_NOT_AVAILABLE);
    sk_cg_destroy(gs->cg);
    if (gs->states) {
        size_t it = 0;
        void *v;
        while (sk_map_next(gs->states, &it, NULL, NULL, &v))
            gstate_free(v);
        sk_map_destroy(gs->states);
    }
    free(gs);
}

sk_gc *sk_groups_gc(sk_groups *gs)
{
    return gs->gc;
}

sk_cg *sk_groups_cg(sk_groups *gs)
{
    return gs->cg;
}

bool sk_groups_has_offsets(sk_groups *gs, kc_str group)
{
    return group.len > 0 && state_get(gs, group.p, (size_t)group.len, false) != NULL;
}

void sk_groups_classic_gone(sk_groups *gs, kc_str group)
{
    sk_gc_group *g = sk_gc_find(gs->gc, group.p, (size_t)group.len);
    if (g && sk_gc_group_nmembers(g) == 0)
        sk_gc_remove(gs->gc, g);
}

/* ---- membership handlers ---- */

static kc_str arena_str(sk_req *r, const char *s)
{
    return s ? sk_req_str(r, s) : (kc_str){NULL, -1};
}

static void client_host(sk_req *r, char *buf, size_t len)
{
    /* Kafka shows the client's address with a leading slash. */
    const char *peer = r->conn->peer;
    const char *colon = strrchr(peer, ':');
    snprintf(buf, len, "/%.*s", colon ? (int)(colon - peer) : (int)strlen(peer), peer);
}

static void join_answer(void *arg, const sk_gc_join_result *res)
{
    sk_req *r = arg;
    kp_JoinGroupResponse *resp = r->resp;
    resp->error_code = res->error;
    resp->generation_id = res->generation;
    resp->protocol_type = arena_str(r, res->protocol_type);
    resp->protocol_name = arena_str(r, res->protocol_name);
    if (r->version < 7 && resp->protocol_name.len < 0)
        resp->protocol_name = sk_req_str(r, "");
    resp->leader = sk_req_str(r, res->leader_id ? res->leader_id : "");
    resp->member_id = sk_req_str(r, res->member_id ? res->member_id : "");
    resp->skip_assignment = false;
    if (res->nmembers > 0) {
        kp_JoinGroupResponse_JoinGroupResponseMember *ms =
            sk_req_array(r, &kp_JoinGroupResponse_JoinGroupResponseMember_desc, res->nmembers);
        if (ms) {
            for (int i = 0; i < res->nmembers; i++) {
                ms[i].member_id = sk_req_str(r, res->members[i].member_id);
                ms[i].group_instance_id = arena_str(r, res->members[i].instance_id);
                uint8_t *md = sk_arena_alloc(r->arena, (size_t)res->members[i].metadata_len + 1);
                if (md && res->members[i].metadata_len)
                    memcpy(md, res->members[i].metadata, (size_t)res->members[i].metadata_len);
                ms[i].metadata = (kc_bytes){md, md ? res->members[i].metadata_len : 0};
            }
            resp->members.n = res->nmembers;
            resp->members.v = ms;
        }
    }
    sk_req_respond(r);
}

/* In a cluster, a node coordinates the groups whose partition of
 * __consumer_offsets it serves; others are answered NOT_COORDINATOR and the
 * client asks FindCoordinator again. */
static bool coordinates(sk_req *r, kc_str group)
{
    sk_node *n = r->node;
    if (!n->cluster || group.len <= 0)
        return true; /* an empty group id gets its own error */
    return sk_part_serving(sk_cluster_group_part(n->cluster, group.p, (size_t)group.len));
}

bool sk_groups_coordinates(sk_req *r, kc_str group)
{
    return coordinates(r, group);
}

void h_join_group(sk_req *r)
{
    kp_JoinGroupRequest *req = r->body;
    sk_groups *gs = r->node->groups;
    if (!sk_authz_group(r, req->group_id, sk_authz_op(r)) || !coordinates(r, req->group_id)) {
        kp_JoinGroupResponse *resp = r->resp;
        resp->error_code = group_error(r, req->group_id, SK_KAFKA_NOT_COORDINATOR);
        sk_req_respond(r);
        return;
    }
    /* A consumer-protocol group with members takes the member in as a
     * classic member (a mixed group); an empty one becomes a classic group. */
    sk_cg_group *ng = req->group_id.len > 0 ? sk_cg_find(gs->cg, req->group_id.p, (size_t)req->group_id.len) : NULL;
    if (ng && sk_cg_group_nmembers(ng) > 0) {
        h_join_consumer_group(r, ng);
        return;
    }
    if (ng && sk_groups_write_cgroup(gs, sk_cg_group_id(ng), NULL, NULL) == 0)
        sk_cg_remove(gs->cg, ng);
    int32_t np = req->protocols.n > 0 ? req->protocols.n : 0;
    sk_gc_protocol *protos = sk_arena_calloc(r->arena, (size_t)np + 1, sizeof *protos);
    if (!protos) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < np; i++) {
        protos[i].name = req->protocols.v[i].name;
        protos[i].metadata = req->protocols.v[i].metadata;
    }
    char host[96];
    client_host(r, host, sizeof host);
    sk_gc_join_args a = {0};
    a.group_id = req->group_id;
    a.member_id = req->member_id;
    a.instance_id = r->version >= 5 ? req->group_instance_id : (kc_str){NULL, -1};
    a.client_id = r->hdr.client_id.len >= 0 ? r->hdr.client_id : (kc_str){"", 0};
    a.client_host = (kc_str){host, (int32_t)strlen(host)};
    a.protocol_type = req->protocol_type;
    a.session_timeout_ms = req->session_timeout_ms;
    a.rebalance_timeout_ms =
        r->version >= 1 && req->rebalance_timeout_ms > 0 ? req->rebalance_timeout_ms
                                                         : req->session_timeout_ms;
    a.nprotocols = np;
    a.protocols = protos;
    a.require_known_member = r->version >= 4;
    sk_gc_join(gs->gc, &a, sk_mono_ms(), join_answer, r);
}

static void sync_answer(void *arg, const sk_gc_sync_result *res)
{
    sk_req *r = arg;
    kp_SyncGroupResponse *resp = r->resp;
    resp->error_code = res->error;
    resp->protocol_type = arena_str(r, res->protocol_type);
    resp->protocol_name = arena_str(r, res->protocol_name);
    uint8_t *as = sk_arena_alloc(r->arena, (size_t)res->assignment_len + 1);
    if (as && res->assignment_len)
        memcpy(as, res->assignment, (size_t)res->assignment_len);
    resp->assignment = (kc_bytes){as, as ? res->assignment_len : 0};
    sk_req_respond(r);
}

void h_sync_group(sk_req *r)
{
    kp_SyncGroupRequest *req = r->body;
    sk_groups *gs = r->node->groups;
    if (!sk_authz_group(r, req->group_id, sk_authz_op(r)) || !coordinates(r, req->group_id)) {
        kp_SyncGroupResponse *resp = r->resp;
        resp->error_code = group_error(r, req->group_id, SK_KAFKA_NOT_COORDINATOR);
        sk_req_respond(r);
        return;
    }
    sk_cg_group *ng = req->group_id.len > 0 ? sk_cg_find(gs->cg, req->group_id.p, (size_t)req->group_id.len) : NULL;
    if (ng) {
        h_sync_consumer_group(r, ng);
        return;
    }
    int32_t na = req->assignments.n > 0 ? req->assignments.n : 0;
    sk_gc_assignment *as = sk_arena_calloc(r->arena, (size_t)na + 1, sizeof *as);
    if (!as) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < na; i++) {
        as[i].member_id = req->assignments.v[i].member_id;
        as[i].assignment = req->assignments.v[i].assignment;
    }
    sk_gc_sync_args a = {0};
    a.group_id = req->group_id;
    a.member_id = req->member_id;
    a.instance_id = r->version >= 3 ? req->group_instance_id : (kc_str){NULL, -1};
    a.generation = req->generation_id;
    a.protocol_type = r->version >= 5 ? req->protocol_type : (kc_str){NULL, -1};
    a.protocol_name = r->version >= 5 ? req->protocol_name : (kc_str){NULL, -1};
    a.nassignments = na;
    a.assignments = as;
    sk_gc_sync(gs->gc, &a, sk_mono_ms(), sync_answer, r);
}

void h_heartbeat(sk_req *r)
{
    kp_HeartbeatRequest *req = r->body;
    kp_HeartbeatResponse *resp = r->resp;
    sk_cg_group *ng = req->group_id.len > 0 ? sk_cg_find(r->node->groups->cg, req->group_id.p, (size_t)req->group_id.len) : NULL;
    resp->error_code =
        !sk_authz_group(r, req->group_id, sk_authz_op(r)) ? SK_KAFKA_GROUP_AUTHORIZATION_FAILED :
        !coordinates(r, req->group_id) ? SK_KAFKA_NOT_COORDINATOR :
        ng ? sk_groups_classic_heartbeat(r, ng) :
        sk_gc_heartbeat(r->node->groups->gc, req->group_id, req->member_id,
                        r->version >= 3 ? req->group_instance_id : (kc_str){NULL, -1},
                        req->generation_id, sk_mono_ms());
    sk_req_respond(r);
}

void h_leave_group(sk_req *r)
{
    kp_LeaveGroupRequest *req = r->body;
    kp_LeaveGroupResponse *resp = r->resp;
    sk_gc *gc = r->node->groups->gc;
    int64_t now = sk_mono_ms();
    if (!sk_authz_group(r, req->group_id, sk_authz_op(r)) || req->group_id.len <= 0 ||
        !coordinates(r, req->group_id)) {
        resp->error_code =
            req->group_id.len <= 0 ? SK_KAFKA_INVALID_GROUP_ID
                                   : group_error(r, req->group_id, SK_KAFKA_NOT_COORDINATOR);
        sk_req_respond(r);
        return;
    }
    sk_cg_group *ng = sk_cg_find(r->node->groups->cg, req->group_id.p, (size_t)req->group_id.len);
    if (ng && r->version < 3) {
        h_leave_consumer_group(r, ng);
        return;
    }
    if (r->version < 3) {
        resp->error_code = sk_gc_leave(gc, req->group_id, req->member_id, (kc_str){NULL, -1}, now);
        sk_req_respond(r);
        return;
    }
    int32_t nm = req->members.n > 0 ? req->members.n : 0;
    kp_LeaveGroupResponse_MemberResponse *ms =
        sk_req_array(r, &kp_LeaveGroupResponse_MemberResponse_desc, nm);
    if (nm && !ms) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->members.n = nm;
    resp->members.v = ms;
    for (int32_t i = 0; i < nm; i++) {
        ms[i].member_id = req->members.v[i].member_id;
        ms[i].group_instance_id = req->members.v[i].group_instance_id;
    }
    if (ng) { /* classic members of a consumer group */
        h_leave_consumer_group(r, ng);
        return;
    }
    /* An unknown group: each member gets UNKNOWN_MEMBER_ID, as in Kafka. */
    for (int32_t i = 0; i < nm; i++)
        ms[i].error_code = sk_gc_leave(gc, req->group_id, ms[i].member_id,
                                       ms[i].group_instance_id, now);
    sk_req_respond(r);
}

/* ---- listing and describing ---- */

static bool filter_match(const kc_str *v, int32_t n, const char *s)
{
    if (n <= 0)
        return true;
    for (int32_t i = 0; i < n; i++)
        if (v[i].len >= 0 && strlen(s) == (size_t)v[i].len && strncasecmp(v[i].p, s, (size_t)v[i].len) == 0)
            return true;
    return false;
}

void h_list_groups(sk_req *r)
{
    kp_ListGroupsRequest *req = r->body;
    kp_ListGroupsResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    size_t cap = sk_map_count(gs->states) + 16;
    {
        size_t it = 0;
        while (sk_gc_next(gs->gc, &it))
            cap++;
        it = 0;
        while (sk_cg_next(gs->cg, &it))
            cap++;
    }
    kp_ListGroupsResponse_ListedGroup *ls =
        sk_req_array(r, &kp_ListGroupsResponse_ListedGroup_desc, (int32_t)cap);
    if (!ls) {
        sk_req_close(r, "out of memory");
        return;
    }
    int32_t k = 0;
    size_t it = 0;
    sk_gc_group *g;
    bool type_ok = r->version < 5 || filter_match(req->types_filter.v, req->types_filter.n, "classic");
    while ((g = sk_gc_next(gs->gc, &it)) && (size_t)k < cap) {
        const char *id = sk_gc_group_id(g);
        const char *st = sk_gc_state_name(sk_gc_group_state(g));
        if (!type_ok || (r->version >= 4 && !filter_match(req->states_filter.v, req->states_filter.n, st)))
            continue;
        const char *pt = sk_gc_group_protocol_type(g);
        ls[k].group_id = sk_req_str(r, id);
        ls[k].protocol_type = sk_req_str(r, pt ? pt : "");
        ls[k].group_state = sk_req_str(r, st);
        ls[k].group_type = sk_req_str(r, "classic");
        k++;
    }
    it = 0;
    sk_cg_group *ng;
    bool ctype_ok = r->version < 5 || filter_match(req->types_filter.v, req->types_filter.n, "consumer");
    while ((ng = sk_cg_next(gs->cg, &it)) && (size_t)k < cap) {
        const char *st = sk_cg_state_name(sk_cg_group_state(ng));
        if (!ctype_ok || (r->version >= 4 && !filter_match(req->states_filter.v, req->states_filter.n, st)))
            continue;
        ls[k].group_id = sk_req_str(r, sk_cg_group_id(ng));
        ls[k].protocol_type = sk_req_str(r, "consumer");
        ls[k].group_state = sk_req_str(r, st);
        ls[k].group_type = sk_req_str(r, "consumer");
        k++;
    }
    it = 0;
    void *v;
    while (sk_map_next(gs->states, &it, NULL, NULL, &v) && (size_t)k < cap) {
        gstate *s = v;
        if (sk_gc_find(gs->gc, s->id, strlen(s->id)) || sk_cg_find(gs->cg, s->id, strlen(s->id)))
            continue;
        if (!type_ok || (r->version >= 4 && !filter_match(req->states_filter.v, req->states_filter.n, "Empty")))
            continue;
        ls[k].group_id = sk_req_str(r, s->id);
        ls[k].protocol_type = sk_req_str(r, "");
        ls[k].group_state = sk_req_str(r, "Empty");
        ls[k].group_type = sk_req_str(r, "classic");
        k++;
    }
    /* Without DESCRIBE on the cluster, only the groups the client may
     * describe are listed (Kafka's rule). */
    if (!sk_authorize_cluster(r, SK_ACL_OP_DESCRIBE)) {
        int32_t kept = 0;
        for (int32_t i = 0; i < k; i++)
            if (sk_authz_group(r, ls[i].group_id, sk_authz_op(r)))
                ls[kept++] = ls[i];
        k = kept;
    }
    resp->groups.n = k;
    resp->groups.v = ls;
    sk_req_respond(r);
}

static kc_bytes copy_bytes(sk_req *r, const uint8_t *p, int32_t len)
{
    uint8_t *d = sk_arena_alloc(r->arena, (size_t)(len > 0 ? len : 0) + 1);
    if (d && len > 0)
        memcpy(d, p, (size_t)len);
    return (kc_bytes){d, d ? (len > 0 ? len : 0) : 0};
}

void h_describe_groups(sk_req *r)
{
    kp_DescribeGroupsRequest *req = r->body;
    kp_DescribeGroupsResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    int32_t ng = req->groups.n > 0 ? req->groups.n : 0;
    kp_DescribeGroupsResponse_DescribedGroup *ds =
        sk_req_array(r, &kp_DescribeGroupsResponse_DescribedGroup_desc, ng);
    if (ng && !ds) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < ng; i++) {
        kc_str id = req->groups.v[i];
        kp_DescribeGroupsResponse_DescribedGroup *d = &ds[i];
        d->group_id = id;
        d->protocol_type = sk_req_str(r, "");
        d->protocol_data = sk_req_str(r, "");
        if (req->include_authorized_operations)
            d->authorized_operations = sk_authz_ops(r, SK_ACL_RES_GROUP, id.p ? id.p : "",
                                                    id.len > 0 ? (size_t)id.len : 0, SK_OPS_GROUP);
        if (!sk_authz_group(r, id, sk_authz_op(r))) {
            d->error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
            d->group_state = sk_req_str(r, "");
            continue;
        }
        if (!coordinates(r, id)) {
            d->error_code = SK_KAFKA_NOT_COORDINATOR;
            d->group_state = sk_req_str(r, "");
            continue;
        }
        sk_gc_group *g = id.len > 0 ? sk_gc_find(gs->gc, id.p, (size_t)id.len) : NULL;
        gstate *s = id.len > 0 ? state_get(gs, id.p, (size_t)id.len, false) : NULL;
        if (id.len > 0 && sk_cg_find(gs->cg, id.p, (size_t)id.len)) {
            /* Kafka's classic describe does not show other protocols' groups. */
            if (r->version >= 6) {
                d->error_code = SK_KAFKA_GROUP_ID_NOT_FOUND;
                char msg[300];
                snprintf(msg, sizeof msg, "Group %.*s is not a classic group.",
                         id.len > 255 ? 255 : id.len, id.p);
                d->error_message = sk_req_str(r, msg);
            }
            d->group_state = sk_req_str(r, "Dead");
            continue;
        }
        if (!g && !s) {
            if (r->version >= 6) {
                d->error_code = SK_KAFKA_GROUP_ID_NOT_FOUND;
                char msg[300];
                snprintf(msg, sizeof msg, "Group %.*s not found.", id.len > 255 ? 255 : id.len,
                         id.p);
                d->error_message = sk_req_str(r, msg);
            }
            d->group_state = sk_req_str(r, "Dead");
            continue;
        }
        if (!g) {
            d->group_state = sk_req_str(r, "Empty");
            continue;
        }
        sk_gc_state st = sk_gc_group_state(g);
        d->group_state = sk_req_str(r, sk_gc_state_name(st));
        const char *pt = sk_gc_group_protocol_type(g), *pn = sk_gc_group_protocol_name(g);
        d->protocol_type = sk_req_str(r, pt ? pt : "");
        d->protocol_data = sk_req_str(r, pn && st == SK_GC_STABLE ? pn : "");
        if (st == SK_GC_STABLE && pn)
            d->protocol_data = sk_req_str(r, pn);
        int nm = sk_gc_group_nmembers(g);
        kp_DescribeGroupsResponse_DescribedGroupMember *ms =
            sk_req_array(r, &kp_DescribeGroupsResponse_DescribedGroupMember_desc, nm);
        if (nm && !ms)
            continue;
        for (int k = 0; k < nm; k++) {
            sk_gc_member_view mv;
            sk_gc_group_member(g, k, &mv);
            ms[k].member_id = sk_req_str(r, mv.member_id);
            ms[k].group_instance_id = arena_str(r, mv.instance_id);
            ms[k].client_id = sk_req_str(r, mv.client_id);
            ms[k].client_host = sk_req_str(r, mv.client_host);
            /* Metadata and assignment only describe a settled group. */
            if (st == SK_GC_STABLE) {
                ms[k].member_metadata = copy_bytes(r, mv.metadata, mv.metadata_len);
                ms[k].member_assignment = copy_bytes(r, mv.assignment, mv.assignment_len);
            } else {
                ms[k].member_metadata = copy_bytes(r, NULL, 0);
                ms[k].member_assignment = copy_bytes(r, NULL, 0);
            }
        }
        d->members.n = nm;
        d->members.v = ms;
    }
    resp->groups.n = ng;
    resp->groups.v = ds;
    sk_req_respond(r);
}

/* ---- changes of committed offsets ---- */

static void change_durable(void *arg, int err)
{
    sk_req *r = arg;
    if (err && !r->async_err)
        r->async_err = err;
    if (--r->pending == 0)
        r->on_done(r);
}

/* Appends a group record and applies it in memory. */
static int append_group(sk_groups *gs, sk_buf *body, sk_req *r)
{
    r->pending++;
    int rc = sk_groups_append(gs, body, change_durable, r);
    if (rc != 0)
        r->pending--;
    return rc;
}

/* After a failed append the partitions that were to be written report a
 * retriable coordinator error. */
static void commit_finish(sk_req *r)
{
    if (r->async_err) {
        kp_OffsetCommitResponse *resp = r->resp;
        for (int32_t i = 0; i < resp->topics.n; i++)
            for (int32_t j = 0; j < resp->topics.v[i].partitions.n; j++)
                if (resp->topics.v[i].partitions.v[j].error_code == 0)
                    resp->topics.v[i].partitions.v[j].error_code =
                        SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    }
    sk_req_respond(r);
}

/* A consumer-protocol member's commit of one partition (Kafka checks the
 * member and its epoch before the topic). */
static int16_t commit_by_member(sk_req *r, sk_cg_group *g, const sk_topic *topic, int32_t part)
{
    kp_OffsetCommitRequest *req = r->body;
    sk_cg_tp tp = {{{0}}, part, 0};
    if (topic)
        tp.id = topic->id;
    return sk_cg_check_commit(g, req->member_id, req->generation_id_or_member_epoch, r->version,
                              topic ? &tp : NULL);
}

void h_offset_commit(sk_req *r)
{
    kp_OffsetCommitRequest *req = r->body;
    kp_OffsetCommitResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_OffsetCommitResponse_OffsetCommitResponseTopic *ts =
        sk_req_array(r, &kp_OffsetCommitResponse_OffsetCommitResponseTopic_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    int16_t gerr = 0;
    sk_cg_group *cgrp = NULL;
    if (!sk_authz_group(r, req->group_id, sk_authz_op(r)))
        gerr = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
    else if (req->group_id.len <= 0)
        gerr = SK_KAFKA_INVALID_GROUP_ID;
    else if (!coordinates(r, req->group_id))
        gerr = SK_KAFKA_NOT_COORDINATOR;
    else if ((cgrp = sk_cg_find(gs->cg, req->group_id.p, (size_t)req->group_id.len)))
        gerr = 0; /* checked for each partition below */
    else {
        gerr = sk_gc_check_commit(gs->gc, req->group_id, req->member_id,
                                  r->version >= 7 ? req->group_instance_id : (kc_str){NULL, -1},
                                  req->generation_id_or_member_epoch, r->version);
        /* A group known only by its committed offsets (after a restart, or
         * made by an admin's commit) is an Empty group to Kafka, which has
         * no member to match. */
        if ((gerr == SK_KAFKA_ILLEGAL_GENERATION || gerr == SK_KAFKA_GROUP_ID_NOT_FOUND) &&
            !sk_gc_find(gs->gc, req->group_id.p, (size_t)req->group_id.len) &&
            state_get(gs, req->group_id.p, (size_t)req->group_id.len, false))
            gerr = SK_KAFKA_UNKNOWN_MEMBER_ID;
    }
    uint32_t nok = 0;
    /* The names offsets are kept under: v10 names topics by id. */
    kc_str *names = sk_arena_calloc(r->arena, (size_t)nt + 1, sizeof *names);
    if (!names) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        kp_OffsetCommitRequest_OffsetCommitRequestTopic *t = &req->topics.v[i];
        int32_t np = t->partitions.n > 0 ? t->partitions.n : 0;
        ts[i].name = t->name;
        ts[i].topic_id = t->topic_id;
        ts[i].partitions.n = np;
        ts[i].partitions.v =
            sk_req_array(r, &kp_OffsetCommitResponse_OffsetCommitResponsePartition_desc, np);
        if (np && !ts[i].partitions.v) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *topic = sk_req_topic(r, 10, t->name, &t->topic_id);
        names[i] = r->version >= 10 && topic ? sk_req_str(r, topic->name) : t->name;
        for (int32_t j = 0; j < np; j++) {
            kp_OffsetCommitRequest_OffsetCommitRequestPartition *p = &t->partitions.v[j];
            kp_OffsetCommitResponse_OffsetCommitResponsePartition *o = &ts[i].partitions.v[j];
            o->partition_index = p->partition_index;
            /* Kafka resolves ids before it asks the coordinator. */
            if (gerr == SK_KAFKA_GROUP_AUTHORIZATION_FAILED)
                o->error_code = gerr;
            else if (r->version >= 10 && !topic)
                o->error_code = SK_KAFKA_UNKNOWN_TOPIC_ID;
            else if (!sk_authz_topic(r, topic, t->name, SK_ACL_OP_READ))
                o->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            else if (gerr)
                o->error_code = gerr;
            else if (cgrp && (o->error_code = commit_by_member(r, cgrp, topic, p->partition_index)))
                ;
            else if (p->committed_metadata.len > MAX_METADATA)
                o->error_code = SK_KAFKA_OFFSET_METADATA_TOO_LARGE;
            else if (!sk_part_get(topic, p->partition_index))
                o->error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            else
                nok++;
        }
    }
    if (nok == 0) {
        sk_req_respond(r);
        return;
    }
    sk_buf body;
    sk_buf_init(&body, 0);
    sk_grec_begin(&body, SK_GREC_COMMIT, req->group_id.p, (size_t)req->group_id.len, nok);
    int64_t now = sk_now_ms();
    for (int32_t i = 0; i < nt; i++) {
        const kp_OffsetCommitRequest_OffsetCommitRequestTopic *t = &req->topics.v[i];
        for (int32_t j = 0; j < ts[i].partitions.n; j++) {
            if (ts[i].partitions.v[j].error_code)
                continue;
            kp_OffsetCommitRequest_OffsetCommitRequestPartition *p = &t->partitions.v[j];
            sk_grec_ent e = {names[i].p,
                             (size_t)names[i].len,
                             p->partition_index,
                             p->committed_offset,
                             r->version >= 6 ? p->committed_leader_epoch : -1,
                             p->committed_metadata.len > 0 ? p->committed_metadata.p : "",
                             p->committed_metadata.len > 0 ? (size_t)p->committed_metadata.len : 0,
                             now};
            sk_grec_put(&body, SK_GREC_COMMIT, &e);
        }
    }
    r->pending = 1;
    r->on_done = commit_finish;
    int rc = append_group(gs, &body, r);
    sk_buf_free(&body);
    if (rc != 0)
        r->async_err = rc;
    if (--r->pending == 0)
        commit_finish(r);
}

static void fill_fetch_partition(gstate *s, kc_str topic, int32_t part, int64_t *off,
                                 int32_t *epoch, kc_str *meta, sk_req *r)
{
    *off = -1;
    *epoch = -1;
    *meta = sk_req_str(r, "");
    if (!s)
        return;
    char key[512];
    size_t kl = off_key(key, sizeof key, topic.p, (size_t)topic.len, part);
    goff *o = sk_map_get(s->offs, key, kl);
    if (!o)
        return;
    *off = o->offset;
    *epoch = o->epoch;
    char *m = sk_arena_strndup(r->arena, o->meta, o->mlen);
    if (m)
        *meta = (kc_str){m, (int32_t)o->mlen};
}

/* Distinct topics of a group's offsets, for "all topics" requests. */
static int collect_topics(gstate *s, sk_req *r, const char ***out)
{
    size_t cap = s ? sk_map_count(s->offs) : 0;
    const char **names = sk_arena_calloc(r->arena, cap + 1, sizeof *names);
    int n = 0;
    size_t it = 0;
    void *v;
    while (s && names && sk_map_next(s->offs, &it, NULL, NULL, &v)) {
        goff *o = v;
        bool seen = false;
        for (int i = 0; i < n && !seen; i++)
            seen = strcmp(names[i], o->topic) == 0;
        if (!seen)
            names[n++] = o->topic;
    }
    *out = names;
    return names ? n : 0;
}

static int count_parts(gstate *s, const char *topic)
{
    int n = 0;
    size_t it = 0;
    void *v;
    while (sk_map_next(s->offs, &it, NULL, NULL, &v))
        n += strcmp(((goff *)v)->topic, topic) == 0;
    return n;
}

/* A list of partition indexes, as both request layouts carry it. */
struct kc_i32s {
    int32_t n;
    int32_t *v;
};

/* One topic of an OffsetFetch answer, whatever the version's layout. */
typedef struct ofetch_topic {
    kc_str name;
    int32_t n;
    struct ofetch_part {
        int32_t idx;
        int64_t offset;
        int32_t epoch;
        kc_str meta;
        int16_t err; /* TOPIC_AUTHORIZATION_FAILED, else 0 */
    } * parts;
} ofetch_topic;

/* The committed offsets asked for: the named topics and partitions, or with
 * want == NULL every one the group has. Returns the count, -1 on memory. */
static int ofetch_collect(sk_req *r, gstate *s, int32_t nwant, const kc_str *want_names,
                          const struct kc_i32s *want_parts, ofetch_topic **out)
{
    const char **names = NULL;
    int nt = want_names ? nwant : collect_topics(s, r, &names);
    ofetch_topic *ts = sk_arena_calloc(r->arena, (size_t)nt + 1, sizeof *ts);
    if (!ts)
        return -1;
    int kept = 0;
    for (int i = 0; i < nt; i++) {
        kc_str tname = want_names ? want_names[i] : sk_req_str(r, names[i]);
        /* Topics the client may not describe: left out of "all", refused
         * when named (Kafka's unauthorized partition: offset -1, no
         * metadata). */
        bool denied = !sk_authz_topic(r, NULL, tname, SK_ACL_OP_DESCRIBE);
        if (denied && !want_names)
            continue;
        int np = want_names ? want_parts[i].n : count_parts(s, names[i]);
        if (np < 0)
            np = 0;
        struct ofetch_part *ps = sk_arena_calloc(r->arena, (size_t)np + 1, sizeof *ps);
        if (!ps)
            return -1;
        if (want_names) {
            for (int k = 0; k < np; k++)
                ps[k].idx = want_parts[i].v[k];
        } else {
            int k = 0;
            size_t it = 0;
            void *v;
            while (sk_map_next(s->offs, &it, NULL, NULL, &v) && k < np)
                if (strcmp(((goff *)v)->topic, names[i]) == 0)
                    ps[k++].idx = ((goff *)v)->part;
        }
        for (int k = 0; k < np; k++) {
            if (!denied) {
                fill_fetch_partition(s, tname, ps[k].idx, &ps[k].offset, &ps[k].epoch,
                                     &ps[k].meta, r);
                continue;
            }
            ps[k].offset = -1;
            ps[k].epoch = -1;
            ps[k].meta = sk_req_str(r, "");
            ps[k].err = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
        }
        ts[kept++] = (ofetch_topic){tname, np, ps};
    }
    *out = ts;
    return kept;
}

/* The request's topics as names and partition lists (both layouts). */
#define OFETCH_WANT(r, topics, names, parts)                                                  \
    do {                                                                                      \
        names = NULL;                                                                         \
        parts = NULL;                                                                         \
        if ((topics).n >= 0) {                                                                \
            names = sk_arena_calloc((r)->arena, (size_t)(topics).n + 1, sizeof *names);       \
            parts = sk_arena_calloc((r)->arena, (size_t)(topics).n + 1, sizeof *parts);       \
            for (int32_t q = 0; names && parts && q < (topics).n; q++) {                      \
                names[q] = (topics).v[q].name;                                                \
                parts[q].n = (topics).v[q].partition_indexes.n;                               \
                parts[q].v = (topics).v[q].partition_indexes.v;                               \
            }                                                                                 \
        }                                                                                     \
    } while (0)

/* v10 names topics by id: the names offsets are kept under, "" for an
 * unknown id (which has no offsets). */
static void ofetch_resolve(sk_req *r, const kp_OffsetFetchRequest_OffsetFetchRequestGroup *rg,
                           kc_str *names)
{
    for (int32_t q = 0; names && q < rg->topics.n; q++) {
        const sk_topic *t = sk_topic_get_id(r->node, &rg->topics.v[q].topic_id);
        names[q] = t ? sk_req_str(r, t->name) : (kc_str){"", 0};
    }
}

/* v10: a topic's id in the answer; an id asked for that names no topic gets
 * UNKNOWN_TOPIC_ID on each of its partitions. */
static void ofetch_topic_id(sk_req *r, const kp_OffsetFetchRequest_OffsetFetchRequestGroup *rg,
                            int i, kp_OffsetFetchResponse_OffsetFetchResponseTopics *out)
{
    if (rg->topics.n < 0) {
        const sk_topic *t = out->name.len > 0
                                ? sk_topic_get(r->node, out->name.p, (size_t)out->name.len)
                                : NULL;
        if (t)
            out->topic_id = t->id;
        return;
    }
    out->topic_id = rg->topics.v[i].topic_id;
    if (sk_topic_get_id(r->node, &out->topic_id))
        return;
    for (int32_t k = 0; k < out->partitions.n; k++)
        out->partitions.v[k].error_code = SK_KAFKA_UNKNOWN_TOPIC_ID;
}

/* RequireStable (KIP-447): an offset a transaction has yet to commit makes
 * the consumer wait (it retries), so that it never starts from an older one. */
static bool unstable(sk_req *r, kc_str group, kc_str topic, int32_t part)
{
    return group.len > 0 && topic.len > 0 &&
           sk_txns_offset_pending(r->node->txns, group.p, (size_t)group.len, topic.p,
                                  (size_t)topic.len, part);
}

void h_offset_fetch(sk_req *r)
{
    kp_OffsetFetchRequest *req = r->body;
    kp_OffsetFetchResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    kc_str *names;
    struct kc_i32s *parts;
    ofetch_topic *ot;
    if (r->version <= 7) {
        bool allowed = sk_authz_group(r, req->group_id, sk_authz_op(r));
        gstate *s = req->group_id.len > 0 && allowed
                        ? state_get(gs, req->group_id.p, (size_t)req->group_id.len, false)
                        : NULL;
        OFETCH_WANT(r, req->topics, names, parts);
        int nt = ofetch_collect(r, s, req->topics.n, names, parts, &ot);
        kp_OffsetFetchResponse_OffsetFetchResponseTopic *ts =
            nt < 0 ? NULL
                   : sk_req_array(r, &kp_OffsetFetchResponse_OffsetFetchResponseTopic_desc, nt);
        if (nt < 0 || (nt && !ts)) {
            sk_req_close(r, "out of memory");
            return;
        }
        for (int i = 0; i < nt; i++) {
            kp_OffsetFetchResponse_OffsetFetchResponsePartition *ps = sk_req_array(
                r, &kp_OffsetFetchResponse_OffsetFetchResponsePartition_desc, ot[i].n);
            if (ot[i].n && !ps) {
                sk_req_close(r, "out of memory");
                return;
            }
            for (int k = 0; k < ot[i].n; k++) {
                ps[k].partition_index = ot[i].parts[k].idx;
                ps[k].committed_offset = ot[i].parts[k].offset;
                ps[k].committed_leader_epoch = ot[i].parts[k].epoch;
                ps[k].metadata = ot[i].parts[k].meta;
                if (ot[i].parts[k].err)
                    ps[k].error_code = ot[i].parts[k].err;
                if (req->require_stable &&
                    unstable(r, req->group_id, ot[i].name, ps[k].partition_index)) {
                    ps[k].error_code = SK_KAFKA_UNSTABLE_OFFSET_COMMIT;
                    ps[k].committed_offset = -1;
                }
            }
            ts[i].name = ot[i].name;
            ts[i].partitions.n = ot[i].n;
            ts[i].partitions.v = ps;
        }
        resp->topics.n = nt;
        resp->topics.v = ts;
        if (!allowed)
            resp->error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
        else if (req->group_id.len <= 0)
            resp->error_code = SK_KAFKA_INVALID_GROUP_ID;
        else if (!coordinates(r, req->group_id))
            resp->error_code = SK_KAFKA_NOT_COORDINATOR;
        sk_req_respond(r);
        return;
    }
    int32_t ng = req->groups.n > 0 ? req->groups.n : 0;
    kp_OffsetFetchResponse_OffsetFetchResponseGroup *gr =
        sk_req_array(r, &kp_OffsetFetchResponse_OffsetFetchResponseGroup_desc, ng);
    if (ng && !gr) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t g = 0; g < ng; g++) {
        kp_OffsetFetchRequest_OffsetFetchRequestGroup *rg = &req->groups.v[g];
        gr[g].group_id = rg->group_id;
        bool allowed = sk_authz_group(r, rg->group_id, sk_authz_op(r));
        gstate *s = rg->group_id.len > 0 && allowed
                        ? state_get(gs, rg->group_id.p, (size_t)rg->group_id.len, false)
                        : NULL;
        sk_cg_group *cgrp =
            rg->group_id.len > 0 && allowed ? sk_cg_find(gs->cg, rg->group_id.p, (size_t)rg->group_id.len) : NULL;
        if (!allowed)
            gr[g].error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
        else if (rg->group_id.len <= 0)
            gr[g].error_code = SK_KAFKA_INVALID_GROUP_ID;
        else if (!coordinates(r, rg->group_id))
            gr[g].error_code = SK_KAFKA_NOT_COORDINATOR;
        else if (r->version >= 9 && cgrp) /* classic groups ignore the member, as Kafka */
            gr[g].error_code = sk_cg_check_fetch(cgrp, rg->member_id, rg->member_epoch);
        if (gr[g].error_code) {
            gr[g].topics.n = 0;
            continue;
        }
        OFETCH_WANT(r, rg->topics, names, parts);
        if (r->version >= 10)
            ofetch_resolve(r, rg, names);
        int nt = ofetch_collect(r, s, rg->topics.n, names, parts, &ot);
        kp_OffsetFetchResponse_OffsetFetchResponseTopics *ts =
            nt < 0 ? NULL
                   : sk_req_array(r, &kp_OffsetFetchResponse_OffsetFetchResponseTopics_desc, nt);
        if (nt < 0 || (nt && !ts)) {
            sk_req_close(r, "out of memory");
            return;
        }
        for (int i = 0; i < nt; i++) {
            kp_OffsetFetchResponse_OffsetFetchResponsePartitions *ps = sk_req_array(
                r, &kp_OffsetFetchResponse_OffsetFetchResponsePartitions_desc, ot[i].n);
            if (ot[i].n && !ps) {
                sk_req_close(r, "out of memory");
                return;
            }
            for (int k = 0; k < ot[i].n; k++) {
                ps[k].partition_index = ot[i].parts[k].idx;
                ps[k].committed_offset = ot[i].parts[k].offset;
                ps[k].committed_leader_epoch = ot[i].parts[k].epoch;
                ps[k].metadata = ot[i].parts[k].meta;
                if (ot[i].parts[k].err)
                    ps[k].error_code = ot[i].parts[k].err;
                if (req->require_stable &&
                    unstable(r, rg->group_id, ot[i].name, ps[k].partition_index)) {
                    ps[k].error_code = SK_KAFKA_UNSTABLE_OFFSET_COMMIT;
                    ps[k].committed_offset = -1;
                }
            }
            ts[i].name = ot[i].name;
            ts[i].partitions.n = ot[i].n;
            ts[i].partitions.v = ps;
            if (r->version >= 10)
                ofetch_topic_id(r, rg, i, &ts[i]);
        }
        gr[g].topics.n = nt;
        gr[g].topics.v = ts;
    }
    resp->groups.n = ng;
    resp->groups.v = gr;
    sk_req_respond(r);
}

/* Does any member's subscription name this topic? Unreadable metadata
 * counts as subscribed: deleting offsets a consumer needs is the worse
 * mistake. */
static bool group_subscribed(sk_gc_group *g, kc_str topic, sk_arena *a)
{
    const char *pt = sk_gc_group_protocol_type(g);
    if (!pt || strcmp(pt, "consumer") != 0)
        return true;
    for (int i = 0; i < sk_gc_group_nmembers(g); i++) {
        sk_gc_member_view mv;
        sk_gc_group_member(g, i, &mv);
        if (!mv.metadata || mv.metadata_len < 2)
            return true;
        int16_t ver = (int16_t)(mv.metadata[0] << 8 | mv.metadata[1]);
        if (ver > KP_CONSUMER_PROTOCOL_SUBSCRIPTION_MAX_VER)
            ver = KP_CONSUMER_PROTOCOL_SUBSCRIPTION_MAX_VER;
        if (ver < 0)
            return true;
        kc_reader rd;
        kc_reader_init(&rd, mv.metadata + 2, (size_t)mv.metadata_len - 2);
        kp_ConsumerProtocolSubscription sub;
        if (kc_decode(&kp_ConsumerProtocolSubscription_desc, ver, false, &rd, &sub, a) != 0)
            return true;
        for (int32_t k = 0; k < sub.topics.n; k++)
            if (sub.topics.v[k].len == topic.len &&
                memcmp(sub.topics.v[k].p, topic.p, (size_t)topic.len) == 0)
                return true;
    }
    return false;
}

static void delete_offsets_finish(sk_req *r)
{
    if (r->async_err) {
        kp_OffsetDeleteResponse *resp = r->resp;
        resp->error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    }
    sk_req_respond(r);
}

void h_offset_delete(sk_req *r)
{
    kp_OffsetDeleteRequest *req = r->body;
    kp_OffsetDeleteResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    sk_gc_group *g = req->group_id.len > 0 ? sk_gc_find(gs->gc, req->group_id.p, (size_t)req->group_id.len) : NULL;
    gstate *s = req->group_id.len > 0 ? state_get(gs, req->group_id.p, (size_t)req->group_id.len, false) : NULL;
    if (!sk_authz_group(r, req->group_id, sk_authz_op(r))) {
        resp->error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    if (req->group_id.len <= 0 || !coordinates(r, req->group_id)) {
        resp->error_code =
            req->group_id.len <= 0 ? SK_KAFKA_INVALID_GROUP_ID : SK_KAFKA_NOT_COORDINATOR;
        sk_req_respond(r);
        return;
    }
    sk_cg_group *ng = sk_cg_find(gs->cg, req->group_id.p, (size_t)req->group_id.len);
    if (!g && !s && !ng) {
        resp->error_code = SK_KAFKA_GROUP_ID_NOT_FOUND;
        sk_req_respond(r);
        return;
    }
    bool active = g && sk_gc_group_nmembers(g) > 0;
    bool cactive = ng && sk_cg_group_nmembers(ng) > 0;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_OffsetDeleteResponse_OffsetDeleteResponseTopic *ts =
        sk_req_array(r, &kp_OffsetDeleteResponse_OffsetDeleteResponseTopic_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    uint32_t nok = 0;
    for (int32_t i = 0; i < nt; i++) {
        kp_OffsetDeleteRequest_OffsetDeleteRequestTopic *t = &req->topics.v[i];
        int32_t np = t->partitions.n > 0 ? t->partitions.n : 0;
        ts[i].name = t->name;
        ts[i].partitions.n = np;
        ts[i].partitions.v =
            sk_req_array(r, &kp_OffsetDeleteResponse_OffsetDeleteResponsePartition_desc, np);
        if (np && !ts[i].partitions.v) {
            sk_req_close(r, "out of memory");
            return;
        }
        bool subscribed = (active && group_subscribed(g, t->name, r->arena)) ||
                          (cactive && t->name.len > 0 &&
                           sk_cg_group_subscribes(ng, t->name.p, (size_t)t->name.len));
        sk_topic *topic = t->name.len > 0 ? sk_topic_get(r->node, t->name.p, (size_t)t->name.len) : NULL;
        bool denied = !sk_authz_topic(r, topic, t->name, SK_ACL_OP_READ);
        for (int32_t j = 0; j < np; j++) {
            kp_OffsetDeleteResponse_OffsetDeleteResponsePartition *o = &ts[i].partitions.v[j];
            o->partition_index = t->partitions.v[j].partition_index;
            if (denied)
                o->error_code = SK_KAFKA_TOPIC_AUTHORIZATION_FAILED;
            else if (subscribed)
                o->error_code = SK_KAFKA_GROUP_SUBSCRIBED_TO_TOPIC;
            else if (!sk_part_get(topic, o->partition_index))
                o->error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
            else
                nok++;
        }
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    if (nok == 0 || !s) {
        sk_req_respond(r);
        return;
    }
    sk_buf body;
    sk_buf_init(&body, 0);
    sk_grec_begin(&body, SK_GREC_DELETE_OFFSETS, req->group_id.p, (size_t)req->group_id.len, nok);
    for (int32_t i = 0; i < nt; i++)
        for (int32_t j = 0; j < ts[i].partitions.n; j++) {
            if (ts[i].partitions.v[j].error_code)
                continue;
            sk_grec_ent e = {req->topics.v[i].name.p, (size_t)req->topics.v[i].name.len,
                             ts[i].partitions.v[j].partition_index, 0, 0, NULL, 0, 0};
            sk_grec_put(&body, SK_GREC_DELETE_OFFSETS, &e);
        }
    r->pending = 1;
    r->on_done = delete_offsets_finish;
    if (append_group(gs, &body, r) != 0)
        r->async_err = SK_ERR_IO;
    sk_buf_free(&body);
    if (--r->pending == 0)
        delete_offsets_finish(r);
}

static void delete_groups_finish(sk_req *r)
{
    if (r->async_err) {
        kp_DeleteGroupsResponse *resp = r->resp;
        for (int32_t i = 0; i < resp->results.n; i++)
            if (resp->results.v[i].error_code == 0)
                resp->results.v[i].error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    }
    sk_req_respond(r);
}

void h_delete_groups(sk_req *r)
{
    kp_DeleteGroupsRequest *req = r->body;
    kp_DeleteGroupsResponse *resp = r->resp;
    sk_groups *gs = r->node->groups;
    int32_t ng = req->groups_names.n > 0 ? req->groups_names.n : 0;
    kp_DeleteGroupsResponse_DeletableGroupResult *rs =
        sk_req_array(r, &kp_DeleteGroupsResponse_DeletableGroupResult_desc, ng);
    if (ng && !rs) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->results.n = ng;
    resp->results.v = rs;
    r->pending = 1;
    r->on_done = delete_groups_finish;
    for (int32_t i = 0; i < ng; i++) {
        kc_str id = req->groups_names.v[i];
        rs[i].group_id = id;
        if (!sk_authz_group(r, id, sk_authz_op(r))) {
            rs[i].error_code = SK_KAFKA_GROUP_AUTHORIZATION_FAILED;
            continue;
        }
        if (id.len <= 0) {
            rs[i].error_code = SK_KAFKA_INVALID_GROUP_ID;
            continue;
        }
        if (!coordinates(r, id)) {
            rs[i].error_code = SK_KAFKA_NOT_COORDINATOR;
            continue;
        }
        sk_gc_group *g = sk_gc_find(gs->gc, id.p, (size_t)id.len);
        gstate *s = state_get(gs, id.p, (size_t)id.len, false);
        if (!g && !s && !sk_cg_find(gs->cg, id.p, (size_t)id.len)) {
            rs[i].error_code = SK_KAFKA_GROUP_ID_NOT_FOUND;
            continue;
        }
        sk_cg_group *cgrp = sk_cg_find(gs->cg, id.p, (size_t)id.len);
        if ((g && sk_gc_group_nmembers(g) > 0) || (cgrp && sk_cg_group_nmembers(cgrp) > 0)) {
            rs[i].error_code = SK_KAFKA_NON_EMPTY_GROUP;
            continue;
        }
        sk_buf body;
        sk_buf_init(&body, 0);
        sk_grec_begin(&body, SK_GREC_DELETE_GROUP, id.p, (size_t)id.len, 0);
        int rc = append_group(gs, &body, r);
        sk_buf_free(&body);
        if (rc != 0)
            rs[i].error_code = SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    }
    if (--r->pending == 0)
        delete_groups_finish(r);
}
