#include "cluster.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cmeta.h"
#include "config.h"
#include "dynconf.h"
#include "controller.h"
#include "custody.h"
#include "etcd.h"
#include "follow.h"
#include "groups.h"
#include "handlers.h"
#include "handoff.h"
#include "link.h"
#include "node.h"
#include "payload.h"
#include "peer.h"
#include "plog.h"
#include "proxied.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "tconf.h"
#include "tls.h"
#include "wal.h"
#include "xzone.h"

#define OFFSETS_TOPIC "__consumer_offsets"
#define TICK_MS 500

struct sk_cluster {
    sk_node *n;
    cs_session *s;
    int64_t log_id;
    pthread_mutex_t rmu;
    sk_map *readers; /* log id -> wal_reader, for adopted batches */
    rpc_client *rpc; /* node-to-node calls (rpc/peer.h) */
    sk_handoffs *h;
    sk_custody *cu;
    sk_controller *ctl;
    sk_links *links;  /* this node as main of proxied batches */
    sk_proxy *proxy;  /* this node as proxy */
    sk_follows *follows; /* ... and its consumers' fetches */
    sk_map *fsessions;   /* proxies' poll sessions of this node (h_follow.c) */
    struct event *tick_ev;
    uint64_t ticks;
    bool started;
    bool closing;
    bool draining;
    int64_t drain_deadline_ms;
    void (*drain_done)(void *arg);
    void *drain_arg;
    struct event *drain_ev;
};

/* ---- names ---- */

int sk_cluster_log_url(const sk_config *cfg, int64_t log, char *buf, size_t len)
{
    /* The log's directory goes into the URL's path, before any query. */
    const char *url = cfg->wal_url;
    const char *q = strchr(url, '?');
    size_t plen = q ? (size_t)(q - url) : strlen(url);
    while (plen > 0 && url[plen - 1] == '/')
        plen--;
    int w = snprintf(buf, len, "%.*s/logs/%lld%s", (int)plen, url, (long long)log, q ? q : "");
    return w < 0 || (size_t)w >= len ? SK_ERR_INVAL : 0;
}

void sk_cluster_view_path(const sk_config *cfg, const char *kind, int64_t log, char *buf,
                          size_t len)
{
    snprintf(buf, len, "%s/%s-%lld.db", cfg->data_dir, kind, (long long)log);
}

/* ---- topics and partitions from etcd into memory ---- */

static int topic_conf(const sk_config *cfg, const cm_topic *mt, sk_tconf *out)
{
    size_t nl[256], vl[256];
    int n = mt->nconfigs < 256 ? mt->nconfigs : 256;
    for (int i = 0; i < n; i++) {
        nl[i] = strlen(mt->config_names[i]);
        vl[i] = strlen(mt->config_values[i]);
    }
    char why[256];
    int rc = sk_tconf_build(cfg, n, (const char *const *)mt->config_names, nl,
                            (const char *const *)mt->config_values, vl, out, why, sizeof why);
    if (rc)
        SK_WARN("cluster", "topic %s: a configuration this node does not accept (%s); using "
                "the defaults",
                mt->name, why);
    return rc;
}

static void topic_put(sk_cluster *c, const cm_topic *mt)
{
    sk_node *n = c->n;
    sk_topic *t = sk_topic_get_id(n, &mt->id);
    sk_tconf conf;
    if (topic_conf(n->cfg, mt, &conf) != 0 &&
        sk_tconf_build(n->cfg, 0, NULL, NULL, NULL, NULL, &conf, NULL, 0) != 0)
        return;
    if (!t) {
        t = sk_topic_new(n, &mt->id, mt->name, strlen(mt->name), mt->partitions, mt->rf, &conf,
                         mt->first_stream, SK_OWN_NONE);
        if (!t) {
            sk_tconf_free(&conf);
            SK_ERROR("cluster", "out of memory taking topic %s", mt->name);
            return;
        }
        t->internal = mt->internal;
    } else {
        sk_tconf_free(&t->conf);
        t->conf = conf;
        if (sk_topic_grow(t, mt->partitions, mt->first_stream + (uint64_t)t->nparts,
                          SK_OWN_NONE) != 0)
            SK_ERROR("cluster", "out of memory growing topic %s", mt->name);
    }
    /* The partitions' keys may have come first. */
    for (int32_t i = 0; i < t->nparts; i++) {
        const cm_part *cp = cm_part_get(cs_model(c->s), &t->id, i);
        if (cp)
            sk_handoff_reconcile(c->h, t->parts[i], cp);
    }
}

static void topic_gone(sk_cluster *c, const cm_topic *was)
{
    sk_node *n = c->n;
    sk_topic *t = sk_topic_get_id(n, &was->id);
    if (!t)
        return;
    for (int32_t i = 0; i < t->nparts; i++)
        sk_handoff_drop(c->h, t->parts[i]);
    sk_groups_topic_deleted(n->groups, t->name);
    SK_INFO("cluster", "topic %s deleted", t->name);
    sk_topic_remove(n, t);
}

static void part_changed(sk_cluster *c, const cm_part *now, const cm_part *was)
{
    const cm_part *cp = now ? now : was;
    sk_topic *t = sk_topic_get_id(c->n, &cp->topic);
    sk_part *p = sk_part_get(t, cp->index);
    if (!p)
        return; /* its topic comes later: topic_put reconciles it then */
    if (now)
        sk_handoff_reconcile(c->h, p, now);
    else
        sk_handoff_drop(c->h, p);
}

/* Broker properties changed at runtime: the cluster-wide set applies. */
static void bconf_changed(sk_cluster *c, const cm_bconf *now, const cm_bconf *was)
{
    const cm_bconf *b = now ? now : was;
    if (b->node != -1)
        return;
    int n = now ? now->nconfigs : 0;
    size_t nl[128], vl[128];
    n = n < 128 ? n : 128;
    for (int i = 0; i < n; i++) {
        nl[i] = strlen(now->names[i]);
        vl[i] = strlen(now->values[i]);
    }
    if (sk_dynconf_apply(c->n, n, now ? (const char *const *)now->names : NULL, nl,
                         now ? (const char *const *)now->values : NULL, vl) != 0)
        SK_WARN("cluster", "cannot apply the broker configuration changed at runtime");
}

/* Where other nodes take RPCs: their inter-broker listener. */
static void peer_changed(sk_cluster *c, const cm_node *now, const cm_node *was)
{
    if (!now) {
        rpc_peer_remove(c->rpc, was->id);
        return;
    }
    if (now->id == c->n->cfg->node_id)
        return;
    const char *host;
    int32_t port;
    const char *lname = sk_config_inter_listener_name(c->n->cfg);
    if (sk_cluster_node_addr(c, now->id, lname, &host, &port, NULL) &&
        rpc_peer_set(c->rpc, now->id, host, port) != 0)
        SK_WARN("cluster", "cannot set the address of node %d", now->id);
}

static void on_change(void *arg, const cm_change *ch)
{
    sk_cluster *c = arg;
    if (!c->started)
        return;
    switch (ch->kind) {
    case CM_CH_TOPIC:
        if (ch->now)
            topic_put(c, ch->now);
        else
            topic_gone(c, ch->was);
        break;
    case CM_CH_PART:
        part_changed(c, ch->now, ch->was);
        sk_custody_part_changed(c->cu, ch->now ? ch->now : ch->was);
        break;
    case CM_CH_LOG:
        sk_custody_log_changed(c->cu, ch->now, ch->was);
        break;
    case CM_CH_WALREF:
    case CM_CH_PAYREF:
        sk_custody_walref_changed(c->cu);
        break;
    case CM_CH_NODE:
        peer_changed(c, ch->now, ch->was);
        break;
    case CM_CH_BCONF:
        bconf_changed(c, ch->now, ch->was);
        break;
    default:
        break;
    }
    sk_controller_kick(c->ctl);
}

/* ---- fencing ---- */

static void on_deadline(void *arg, int64_t deadline_us)
{
    sk_cluster *c = arg;
    /* The first comes during the session's start, before the log opens:
     * the node sets it on its WAL once open. */
    if (c->n->wal)
        wal_set_ack_deadline(c->n->wal, deadline_us);
    if (c->n->payload)
        wal_set_ack_deadline(pay_wal(c->n->payload), deadline_us);
    if (c->cu)
        sk_custody_set_deadline(c->cu, deadline_us);
}

static void on_lost(void *arg)
{
    sk_cluster *c = arg;
    /* Whatever this incarnation still holds is being taken over: it
     * acknowledges nothing more (the deadline passed), and starts afresh. */
    SK_ERROR("cluster", "node %d lost its membership: restarting as a new incarnation",
             c->n->cfg->node_id);
    sk_node_stop(c->n, SK_EXIT_REJOIN);
}

static void on_controller(void *arg, bool controller)
{
    sk_cluster *c = arg;
    sk_controller_set_active(c->ctl, controller);
}

static void ensure_offsets_topic(sk_cluster *c);

/* Whether a live node other than this one, not draining, could adopt. */
static bool other_node_takes(sk_cluster *c)
{
    size_t nn;
    const cm_node *nodes = cm_nodes(cs_model(c->s), &nn);
    for (size_t i = 0; i < nn; i++)
        if (nodes[i].id != c->n->cfg->node_id && !nodes[i].draining)
            return true;
    return false;
}

/* ---- periodic reconciliation: what a lost reply or a failed CAS left ---- */

static void tick_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_cluster *c = arg;
    size_t it = 0;
    const cm_part *cp;
    cm_model *m = cs_model(c->s);
    while ((cp = cm_part_next(m, &it)) != NULL) {
        sk_part *p = sk_part_get(sk_topic_get_id(c->n, &cp->topic), cp->index);
        if (p)
            sk_handoff_reconcile(c->h, p, cp);
    }
    sk_custody_tick(c->cu);
    sk_handoff_retry(c->h);
    if (c->proxy)
        sk_proxy_tick(c->proxy);
    if (c->ticks % 4 == 0)
        sk_links_tick(c->links);
    if (++c->ticks % 10 == 0)
        sk_handoff_audit_walrefs(c->h);
    ensure_offsets_topic(c);
    sk_controller_kick(c->ctl);
    bool alone = c->draining && !other_node_takes(c);
    if (c->draining && c->drain_done &&
        (sk_handoff_owned(c->h) == 0 || alone || sk_mono_ms() >= c->drain_deadline_ms)) {
        if (sk_handoff_owned(c->h) && alone)
            SK_INFO("cluster", "controlled shutdown: no other live node can take the %zu "
                    "partitions here; they move when one joins",
                    sk_handoff_owned(c->h));
        else if (sk_handoff_owned(c->h))
            SK_WARN("cluster", "controlled shutdown: %zu partitions still here after %lld ms; "
                    "they move as after a crash",
                    sk_handoff_owned(c->h), (long long)c->n->cfg->controlled_shutdown_timeout_ms);
        else
            SK_INFO("cluster", "controlled shutdown: every partition moved to other nodes");
        void (*done)(void *) = c->drain_done;
        c->drain_done = NULL;
        done(c->drain_arg);
    }
}

/* ---- life ---- */

static void listeners_of(const sk_config *cfg, cm_listener *out, int *n)
{
    *n = 0;
    for (int i = 0; i < cfg->nadvertised && *n < CM_MAX_LISTENERS; i++) {
        cm_listener *l = &out[(*n)++];
        snprintf(l->name, sizeof l->name, "%s", cfg->advertised[i].name);
        snprintf(l->host, sizeof l->host, "%s", cfg->advertised[i].host);
        l->port = cfg->advertised[i].port;
    }
}

/* Node-to-node TLS when the inter-broker listener is SSL: the node's own
 * certificate authenticates it to the others (docs/security.md). Read at
 * start-up, before the loop runs; SIGHUP reloads it (net.c). */
static int rpc_tls(sk_cluster *c, char *why, size_t whylen)
{
    const sk_config *cfg = c->n->cfg;
    const sk_listener *inter = sk_config_inter_listener(cfg);
    if (!inter || !SK_SEC_IS_TLS(inter->protocol))
        return 0;
    char inner[400];
    SSL_CTX *ctx = sk_tls_load_client(cfg, inner, sizeof inner);
    if (!ctx) {
        snprintf(why, whylen, "node-to-node TLS: %s", inner);
        return SK_ERR_INVAL;
    }
    rpc_client_set_tls(c->rpc, ctx, *cfg->ssl_endpoint_identification_algorithm != 0);
    sk_tls_free(ctx);
    return 0;
}

sk_cluster *sk_cluster_new(sk_node *n, char *why, size_t whylen)
{
    sk_cluster *c = calloc(1, sizeof *c);
    if (!c) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    c->n = n;
    pthread_mutex_init(&c->rmu, NULL);
    c->readers = sk_map_new();
    c->tick_ev = event_new(n->base, -1, EV_PERSIST, tick_cb, c);
    if (!c->readers || !c->tick_ev) {
        snprintf(why, whylen, "out of memory");
        sk_cluster_destroy(c);
        return NULL;
    }
    const sk_config *cfg = n->cfg;
    cm_listener ls[CM_MAX_LISTENERS];
    int nls = 0;
    listeners_of(cfg, ls, &nls);
    cs_opts o = {cfg->etcd_endpoints, cfg->etcd_prefix, cfg->node_id, cfg->broker_rack, ls, nls,
                 cfg->broker_session_timeout_ms, cfg->broker_heartbeat_interval_ms, 0,
                 sk_xzone_etcd_account, n->xzone};
    cs_callbacks cb = {on_change, on_deadline, on_lost, on_controller, c};
    c->s = cs_start(n->base, &o, &cb, why, whylen);
    if (!c->s) {
        sk_cluster_destroy(c);
        return NULL;
    }
    c->log_id = cs_log_id(c->s);
    rpc_opts ro = {0};
    ro.self_id = cfg->node_id;
    ro.account = sk_xzone_rpc_account;
    ro.account_arg = n;
    c->rpc = rpc_client_new(n->base, &ro);
    if (c->rpc && rpc_tls(c, why, whylen) != 0) {
        sk_cluster_destroy(c);
        return NULL;
    }
    c->h = c->rpc ? sk_handoffs_new(c) : NULL;
    c->cu = sk_custody_new(c);
    c->ctl = sk_controller_new(c);
    c->links = sk_links_new(n, c);
    c->follows = c->rpc ? sk_follows_new(n, c, c->rpc) : NULL;
    c->fsessions = sk_map_new();
    if (!c->rpc || !c->h || !c->cu || !c->ctl || !c->links || !c->follows || !c->fsessions) {
        snprintf(why, whylen, "out of memory");
        sk_cluster_destroy(c);
        return NULL;
    }
    return c;
}

/* Creates __consumer_offsets when the cluster has none yet. */
static void ensure_offsets_topic(sk_cluster *c)
{
    if (cm_topic_get(cs_model(c->s), OFFSETS_TOPIC))
        return;
    int rc = sk_cmeta_create_internal(c->n, OFFSETS_TOPIC, c->n->cfg->offsets_topic_num_partitions);
    if (rc && rc != SK_KAFKA_TOPIC_ALREADY_EXISTS)
        SK_WARN("cluster", "cannot create %s yet (%s); trying again", OFFSETS_TOPIC,
                sk_err_name(rc));
}

int sk_cluster_start(sk_cluster *c)
{
    sk_node *n = c->n;
    cm_model *m = cs_model(c->s);
    snprintf(n->cluster_id, sizeof n->cluster_id, "%s", cm_cluster_id(m));
    c->started = true;
    size_t it = 0;
    const cm_topic *mt;
    while ((mt = cm_topic_next(m, &it)) != NULL)
        topic_put(c, mt);
    const cm_node *nodes;
    size_t nn;
    nodes = cm_nodes(m, &nn);
    for (size_t i = 0; i < nn; i++)
        peer_changed(c, &nodes[i], NULL);
    if (n->payload) {
        c->proxy = sk_proxy_new(n, c, c->rpc, n->payload, cs_payload_log_id(c->s));
        if (!c->proxy)
            return SK_ERR_NOMEM;
    }
    size_t lit = 0;
    const cm_log *logs = cm_logs(m, &lit);
    for (size_t i = 0; i < lit; i++)
        sk_custody_log_changed(c->cu, &logs[i], NULL);
    ensure_offsets_topic(c);
    if (sk_cmeta_follow_acls(n) != 0)
        SK_WARN("cluster", "cannot read the ACLs of etcd");
    struct timeval tv = {0, TICK_MS * 1000};
    event_add(c->tick_ev, &tv);
    sk_controller_set_active(c->ctl, cs_is_controller(c->s));
    return 0;
}

void sk_cluster_drain(sk_cluster *c, void (*done)(void *arg), void *arg)
{
    c->draining = true;
    c->drain_done = done;
    c->drain_arg = arg;
    c->drain_deadline_ms = sk_mono_ms() + c->n->cfg->controlled_shutdown_timeout_ms;
    SK_INFO("cluster", "controlled shutdown: moving %zu partitions to other nodes",
            sk_handoff_owned(c->h));
    /* A draining controller stays the controller: it moves its own
     * partitions away like anyone's, and its lease ends with the node. */
    cs_set_draining(c->s);
    event_active(c->tick_ev, EV_TIMEOUT, 0);
}

void sk_cluster_close(sk_cluster *c)
{
    if (!c || c->closing)
        return;
    c->closing = true;
    c->started = false;
    sk_cmeta_unfollow_acls(c->n);
    if (c->tick_ev)
        event_del(c->tick_ev);
    if (c->ctl)
        sk_controller_set_active(c->ctl, false);
    sk_handoffs_close(c->h);
    sk_custody_close(c->cu);
    sk_links_close(c->links);
    sk_proxy_close(c->proxy);
    sk_follows_close(c->follows);
}

void sk_cluster_destroy(sk_cluster *c)
{
    if (!c)
        return;
    sk_cluster_close(c);
    if (c->tick_ev)
        event_free(c->tick_ev);
    /* The session's etcd client answers what is still in flight, so the
     * modules whose callbacks those are go after it. */
    cs_stop(c->s);
    c->s = NULL;
    /* Likewise the RPC client: its calls in flight end here, answering
     * the handoffs and the proxy. */
    rpc_client_destroy(c->rpc);
    c->rpc = NULL;
    sk_controller_destroy(c->ctl);
    sk_custody_destroy(c->cu);
    sk_handoffs_destroy(c->h);
    sk_links_destroy(c->links);
    sk_follows_destroy(c->follows);
    if (c->fsessions)
        h_follow_sessions_free(c->fsessions);
    if (c->proxy) {
        sk_proxy_destroy(c->proxy); /* closes the payload log */
        c->n->payload = NULL;
    }
    if (c->readers) {
        size_t it = 0;
        void *v;
        while (sk_map_next(c->readers, &it, NULL, NULL, &v))
            wal_reader_close(v);
        sk_map_destroy(c->readers);
    }
    pthread_mutex_destroy(&c->rmu);
    free(c);
}

/* ---- queries ---- */

cs_session *sk_cluster_session(sk_cluster *c)
{
    return c->s;
}

cm_model *sk_cluster_model(sk_cluster *c)
{
    return cs_model(c->s);
}

struct sk_controller *sk_cluster_ctl(sk_cluster *c)
{
    return c->ctl;
}

int64_t sk_cluster_log_id(const sk_cluster *c)
{
    return c->log_id;
}

int64_t sk_cluster_payload_log_id(const sk_cluster *c)
{
    return cs_payload_log_id(c->s);
}

sk_node *sk_cluster_node(sk_cluster *c)
{
    return c->n;
}

rpc_client *sk_cluster_rpc(sk_cluster *c)
{
    return c->rpc;
}

sk_links *sk_cluster_links(sk_cluster *c)
{
    return c->links;
}

sk_proxy *sk_cluster_proxy(sk_cluster *c)
{
    return c->proxy;
}

sk_follows *sk_cluster_follows(sk_cluster *c)
{
    return c->follows;
}

sk_map *sk_cluster_follow_sessions(sk_cluster *c)
{
    return c->fsessions;
}

sk_handoffs *sk_cluster_handoffs(sk_cluster *c)
{
    return c->h;
}

int32_t sk_cluster_controller(sk_cluster *c)
{
    return cm_controller(cs_model(c->s));
}

const cm_part *sk_cluster_part_state(sk_cluster *c, const sk_part *p)
{
    return cm_part_get(cs_model(c->s), &p->topic->id, p->index);
}

bool sk_cluster_node_addr(sk_cluster *c, int32_t node, const char *listener, const char **host,
                          int32_t *port, const char **rack)
{
    const cm_node *nd = cm_node_get(cs_model(c->s), node);
    if (!nd || nd->nlisteners == 0)
        return false;
    const cm_listener *l = &nd->listeners[0];
    for (int i = 0; listener && i < nd->nlisteners; i++)
        if (strcmp(nd->listeners[i].name, listener) == 0)
            l = &nd->listeners[i];
    *host = l->host;
    *port = l->port;
    if (rack)
        *rack = nd->rack;
    return true;
}

wal_lsn sk_cluster_walref_floor(sk_cluster *c)
{
    wal_lsn floor = UINT64_MAX;
    size_t it = 0;
    const cm_walref *r;
    while ((r = cm_walref_next(cs_model(c->s), &it)) != NULL)
        if (r->log == c->log_id && (wal_lsn)r->lsn < floor)
            floor = (wal_lsn)r->lsn;
    sk_handoff_pending_floor(c->h, c->log_id, &floor);
    return floor;
}

/* ---- other logs' batches ---- */

static wal_reader *reader_for(sk_cluster *c, int64_t log)
{
    pthread_mutex_lock(&c->rmu);
    wal_reader *r = sk_map_get_i64(c->readers, log);
    pthread_mutex_unlock(&c->rmu);
    if (r)
        return r;
    /* Opened outside the lock: mounting an NFS export blocks. */
    char url[4200], why[512];
    if (sk_cluster_log_url(c->n->cfg, log, url, sizeof url) != 0)
        return NULL;
    wal_storage *st = wal_storage_open(c->n->base, url, why, sizeof why);
    if (!st) {
        SK_WARN("cluster", "cannot open log %lld's WAL at %s: %s", (long long)log, url, why);
        return NULL;
    }
    wal_reader *nr = wal_reader_open(st, why, sizeof why);
    if (!nr) {
        SK_WARN("cluster", "cannot read log %lld's WAL: %s", (long long)log, why);
        return NULL;
    }
    pthread_mutex_lock(&c->rmu);
    r = sk_map_get_i64(c->readers, log);
    if (!r && sk_map_put_i64(c->readers, log, nr) == 0) {
        r = nr;
        nr = NULL;
    }
    pthread_mutex_unlock(&c->rmu);
    wal_reader_close(nr);
    return r;
}

int sk_cluster_read_foreign(sk_cluster *c, int64_t log, wal_lsn lsn, uint8_t *type, void *buf,
                            uint32_t cap, uint32_t *len)
{
    wal_reader *r = reader_for(c, log);
    if (!r)
        return SK_ERR_IO;
    return wal_reader_read(r, lsn, type, buf, cap, len);
}

/* ---- groups ---- */

int32_t sk_group_hash(const char *group, size_t len)
{
    /* Java hashes the UTF-16 code units of the string. */
    uint32_t h = 0;
    size_t i = 0;
    while (i < len) {
        uint32_t cp;
        unsigned char b = (unsigned char)group[i];
        size_t need = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 1;
        if (i + need > len)
            need = 1;
        if (need == 1) {
            cp = b;
        } else {
            cp = b & (0xff >> (need + 1));
            for (size_t k = 1; k < need; k++)
                cp = cp << 6 | ((unsigned char)group[i + k] & 0x3f);
        }
        i += need;
        if (cp >= 0x10000) {
            cp -= 0x10000;
            h = h * 31 + (0xd800 + (cp >> 10));
            h = h * 31 + (0xdc00 + (cp & 0x3ff));
        } else {
            h = h * 31 + cp;
        }
    }
    return (int32_t)h;
}

sk_part *sk_cluster_group_part(sk_cluster *c, const char *group, size_t len)
{
    sk_topic *t = sk_topic_get(c->n, OFFSETS_TOPIC, strlen(OFFSETS_TOPIC));
    if (!t || t->nparts <= 0)
        return NULL;
    return t->parts[sk_group_partition(group, len, t->nparts)];
}

int32_t sk_group_partition(const char *group, size_t len, int32_t nparts)
{
    /* Kafka's Utils.abs: Math.abs, but 0 for Integer.MIN_VALUE. */
    int32_t h = sk_group_hash(group, len);
    int32_t a = h == INT32_MIN ? 0 : h < 0 ? -h : h;
    return a % nparts;
}

/* ---- metrics ---- */

void sk_cluster_get_stats(sk_cluster *c, sk_cluster_stats *st)
{
    memset(st, 0, sizeof *st);
    st->log_id = c->log_id;
    st->controller = cs_is_controller(c->s);
    cm_nodes(cs_model(c->s), &st->live_nodes);
    st->partitions_served = sk_handoff_owned(c->h);
    st->custody_logs = sk_custody_count(c->cu);
    st->lease_left_s = (double)(cs_deadline(c->s) - sk_boot_us()) / 1e6;
    cs_stats ss;
    cs_get_stats(c->s, &ss);
    st->keepalives = ss.keepalives;
    st->keepalive_failures = ss.keepalive_failures;
    st->watch_resets = ss.watch_resets;
    st->lease_lapses = ss.lease_lapses;
    sk_handoff_stats hs;
    sk_handoff_get_stats(c->h, &hs);
    st->adopted = hs.adopted;
    st->left = hs.left;
    st->published = hs.published;
    st->publish_retries = hs.publish_retries;
    st->rpc_sent = hs.rpc_sent;
    st->rpc_failed = hs.rpc_failed;
    st->last_adopt_s = (double)hs.last_adopt_ms / 1000.0;
    st->last_leave_s = (double)hs.last_leave_ms / 1000.0;
    sk_custody_stats cus;
    sk_custody_get_stats(c->cu, &cus);
    st->custody_opened = cus.opened;
    st->custody_finished = cus.finished;
    st->custody_last_open_s = (double)cus.last_open_ms / 1000.0;
    sk_controller_stats ks;
    sk_controller_get_stats(c->ctl, &ks);
    st->rounds = ks.rounds;
    st->actions = ks.actions;
    st->conflicts = ks.conflicts;
    st->failures = ks.failures;
    etcd_stats es;
    etcd_get_stats(cs_etcd(c->s), &es);
    st->etcd_requests = es.requests;
    st->etcd_errors = es.errors;
    st->etcd_timeouts = es.timeouts;
    st->etcd_switches = es.endpoint_switches;
    st->etcd_watch_resumes = es.watch_resumes;
    st->etcd_latency_sum_s = (double)es.latency_us_sum / 1e6;
    st->etcd_latency_count = es.latency_count;
}
