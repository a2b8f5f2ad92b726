#include "xzone.h"

#include <event2/buffer.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "cluster.h"
#include "cmodel.h"
#include "config.h"
#include "krpc.h"
#include "net.h"
#include "peer.h"
#include "sk_log.h"
#include "sk_time.h"
#include "zone.h"

#define MAX_ETCD_ENDPOINTS 16 /* as many as the etcd client takes */
#define GIB 1073741824.0

struct sk_xzone {
    sk_zacct *acct;
    double price_per_gib;
    int etcd_slot[MAX_ETCD_ENDPOINTS];
    uint64_t produced_direct, produced_proxied;
};

/* ---- etcd endpoints' zones ---- */

/* The host of "http://host:port" (spaces around it allowed) into out. */
static bool endpoint_host(const char *ep, size_t len, char *out, size_t cap)
{
    while (len && *ep == ' ')
        ep++, len--;
    if (len < 7 || strncmp(ep, "http://", 7) != 0)
        return false;
    ep += 7;
    len -= 7;
    size_t n = 0;
    if (len && ep[0] == '[') {
        const char *close = memchr(ep, ']', len);
        if (!close)
            return false;
        ep++;
        n = (size_t)(close - ep);
    } else {
        while (n < len && ep[n] != ':' && ep[n] != '/')
            n++;
    }
    if (n == 0 || n >= cap)
        return false;
    memcpy(out, ep, n);
    out[n] = 0;
    return true;
}

/* The zone client.zone.cidrs gives the host's address ("" when none). */
static void host_zone(const struct zone_map *zones, const char *host, char out[ZONE_MAX])
{
    out[0] = 0;
    struct addrinfo hints = {0}, *res = NULL;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICHOST;
    if (getaddrinfo(host, NULL, &hints, &res) != 0) {
        hints.ai_flags = 0;
        if (getaddrinfo(host, NULL, &hints, &res) != 0) {
            SK_INFO("xzone", "etcd endpoint %s: no address; its traffic counts as of unknown zone",
                    host);
            return;
        }
    }
    zone_detect(zones, NULL, 0, res->ai_addr, NULL, out);
    freeaddrinfo(res);
}

static void etcd_zones(sk_xzone *x, const sk_config *cfg, const struct zone_map *zones)
{
    const char *p = cfg->etcd_endpoints ? cfg->etcd_endpoints : "";
    for (int i = 0; *p && i < MAX_ETCD_ENDPOINTS; i++) {
        size_t len = strcspn(p, ",");
        char host[256], zone[ZONE_MAX] = "";
        if (endpoint_host(p, len, host, sizeof host))
            host_zone(zones, host, zone);
        x->etcd_slot[i] = sk_zacct_zone(x->acct, zone);
        SK_DEBUG("xzone", "etcd endpoint %d (%.*s): zone '%s'", i, (int)len, p, zone);
        p += len;
        p += *p == ',';
    }
}

sk_xzone *sk_xzone_new(const sk_config *cfg, const struct zone_map *zones, char *why,
                       size_t whylen)
{
    sk_xzone *x = calloc(1, sizeof *x);
    if (x)
        x->acct = sk_zacct_new(cfg->broker_rack);
    if (!x || !x->acct) {
        free(x);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    x->price_per_gib = strtod(cfg->zone_transfer_price_per_gib, NULL);
    etcd_zones(x, cfg, zones);
    return x;
}

void sk_xzone_destroy(sk_xzone *x)
{
    if (!x)
        return;
    sk_zacct_destroy(x->acct);
    free(x);
}

/* ---- counting ---- */

static sk_za_kind kind_of_key(int16_t key)
{
    if (key == KR_CONFIRM)
        return SK_ZA_CONFIRM;
    if (key == KR_FOLLOW)
        return SK_ZA_FOLLOW;
    return SK_ZA_RPC;
}

/* The slot of node `id`'s zone, from etcd's view of it; unknown while it
 * is not there. */
static int node_slot(sk_node *n, int32_t id, bool *found)
{
    const cm_node *cn = n->cluster ? cm_node_get(sk_cluster_model(n->cluster), id) : NULL;
    *found = cn != NULL;
    return cn ? sk_zacct_zone(n->xzone->acct, cn->rack) : SK_ZA_UNKNOWN;
}

/* RPC_CLIENT_ID_PREFIX "<id>": the id, else -1. */
static int32_t node_of_client_id(const char *id, size_t len)
{
    size_t pl = strlen(RPC_CLIENT_ID_PREFIX);
    if (len <= pl || len > pl + 10 || memcmp(id, RPC_CLIENT_ID_PREFIX, pl) != 0)
        return -1;
    int64_t v = 0;
    for (size_t i = pl; i < len; i++) {
        if (id[i] < '0' || id[i] > '9')
            return -1;
        v = v * 10 + (id[i] - '0');
    }
    return v <= INT32_MAX ? (int32_t)v : -1;
}

void sk_xzone_conn_learn(sk_conn *c, const char *client_id, size_t len)
{
    if (!c->node->xzone)
        return;
    c->from_node = client_id ? node_of_client_id(client_id, len) : -1;
    c->za_slot = c->from_node >= 0 ? -1 : sk_zacct_zone(c->node->xzone->acct, c->zone);
}

static int conn_slot(sk_conn *c)
{
    if (c->za_slot >= 0)
        return c->za_slot;
    if (c->from_node < 0)
        return SK_ZA_UNKNOWN;
    bool found;
    int slot = node_slot(c->node, c->from_node, &found);
    if (found)
        c->za_slot = slot;
    return slot;
}

void sk_xzone_conn_bytes(sk_conn *c, sk_za_dir d, int16_t key, size_t bytes)
{
    sk_xzone *x = c->node->xzone;
    if (!x)
        return;
    bool node_api = c->from_node >= 0 || key >= KRPC_KEY_MIN;
    sk_za_kind k = node_api ? kind_of_key(key) : SK_ZA_CLIENT;
    sk_zacct_add(x->acct, conn_slot(c), d, k, bytes);
}

void sk_xzone_rpc_account(void *node, int32_t peer, int16_t key, size_t out, size_t in)
{
    sk_node *n = node;
    if (!n->xzone)
        return;
    bool found;
    int slot = node_slot(n, peer, &found);
    sk_zacct_add(n->xzone->acct, slot, SK_ZA_OUT, kind_of_key(key), out);
    sk_zacct_add(n->xzone->acct, slot, SK_ZA_IN, kind_of_key(key), in);
}

void sk_xzone_etcd_account(void *xzone, int endpoint, uint64_t out, uint64_t in)
{
    sk_xzone *x = xzone;
    int slot = endpoint >= 0 && endpoint < MAX_ETCD_ENDPOINTS ? x->etcd_slot[endpoint]
                                                              : SK_ZA_UNKNOWN;
    sk_zacct_add(x->acct, slot, SK_ZA_OUT, SK_ZA_ETCD, out);
    sk_zacct_add(x->acct, slot, SK_ZA_IN, SK_ZA_ETCD, in);
}

void sk_xzone_produced(sk_node *n, bool proxied, size_t bytes)
{
    if (!n->xzone)
        return;
    if (proxied)
        n->xzone->produced_proxied += bytes;
    else
        n->xzone->produced_direct += bytes;
}

/* ---- what is shown ---- */

/* A slot's zone as a label value: "(unknown)" and "(other)" cannot be zone
 * names (broker.rack allows no parentheses). */
static const char *slot_label(const sk_zacct *a, int slot)
{
    if (slot == SK_ZA_UNKNOWN)
        return "(unknown)";
    if (slot == SK_ZA_OTHER)
        return "(other)";
    return sk_zacct_name(a, slot);
}

/* A label value as the exposition format wants it: backslash, quote and
 * newline escaped (a rack read from etcd is another node's word). */
static const char *escaped(const char *v, char *buf, size_t cap)
{
    size_t o = 0;
    for (; *v && o + 3 < cap; v++) {
        if (*v == '\\' || *v == '"' || *v == '\n')
            buf[o++] = '\\';
        buf[o++] = *v == '\n' ? 'n' : *v;
    }
    buf[o] = 0;
    return buf;
}

static uint64_t cross_total(const sk_zacct *a, sk_za_dir d)
{
    uint64_t sum = 0;
    for (int k = 0; k < SK_ZA_KINDS; k++)
        sum += sk_zacct_cross_bytes(a, d, (sk_za_kind)k);
    return sum;
}

static void metric_row(const sk_zacct *a, int s, sk_za_dir d, sk_za_kind k, struct evbuffer *b)
{
    uint64_t v = sk_zacct_get(a, s, d, k);
    char zone[2 * SK_ZA_NAME_MAX];
    if (v)
        evbuffer_add_printf(b, "skiff_zone_bytes_total{direction=\"%s\",kind=\"%s\",zone=\"%s\","
                               "cross=\"%s\"} %llu\n",
                            sk_za_dir_name(d), sk_za_kind_name(k),
                            escaped(slot_label(a, s), zone, sizeof zone),
                            sk_zacct_cross(a, s) ? "true" : "false", (unsigned long long)v);
}

static void metrics_by_zone(const sk_zacct *a, struct evbuffer *b)
{
    evbuffer_add_printf(
        b, "# HELP skiff_zone_bytes_total Bytes this node received (in) from and sent (out) to "
           "peers, by kind and the peer's zone (\"(unknown)\": not known; \"(other)\": past the "
           "first %d zones seen); cross=\"true\" where the peer's zone is known and not this "
           "node's.\n# TYPE skiff_zone_bytes_total counter\n",
        SK_ZA_NAMED);
    for (int s = 0; s < SK_ZA_SLOTS; s++)
        for (int d = 0; d < SK_ZA_DIRS; d++)
            for (int k = 0; k < SK_ZA_KINDS; k++)
                metric_row(a, s, (sk_za_dir)d, (sk_za_kind)k, b);
}

static void metrics_cross(const sk_zacct *a, struct evbuffer *b)
{
    evbuffer_add_printf(b, "# HELP skiff_zone_cross_bytes_total Bytes exchanged with other "
                           "zones (what the cloud bills), by direction and kind.\n"
                           "# TYPE skiff_zone_cross_bytes_total counter\n");
    for (int d = 0; d < SK_ZA_DIRS; d++)
        for (int k = 0; k < SK_ZA_KINDS; k++)
            evbuffer_add_printf(b, "skiff_zone_cross_bytes_total{direction=\"%s\",kind=\"%s\"} "
                                   "%llu\n",
                                sk_za_dir_name((sk_za_dir)d), sk_za_kind_name((sk_za_kind)k),
                                (unsigned long long)sk_zacct_cross_bytes(a, (sk_za_dir)d,
                                                                         (sk_za_kind)k));
}

void sk_xzone_metrics(sk_node *n, struct evbuffer *b)
{
    sk_xzone *x = n->xzone;
    if (!x)
        return;
    metrics_by_zone(x->acct, b);
    metrics_cross(x->acct, b);
    evbuffer_add_printf(
        b, "# HELP skiff_client_produced_bytes_total Record batch bytes clients produced "
           "through this node: appended here as main (direct), or sent on to a main in another "
           "zone (proxied).\n# TYPE skiff_client_produced_bytes_total counter\n"
           "skiff_client_produced_bytes_total{path=\"direct\"} %llu\n"
           "skiff_client_produced_bytes_total{path=\"proxied\"} %llu\n",
        (unsigned long long)x->produced_direct, (unsigned long long)x->produced_proxied);
    evbuffer_add_printf(b, "# HELP skiff_zone_transfer_price_per_gib zone.transfer.price.per.gib: "
                           "dollars per GiB crossing zones, in each direction.\n"
                           "# TYPE skiff_zone_transfer_price_per_gib gauge\n"
                           "skiff_zone_transfer_price_per_gib %g\n",
                        x->price_per_gib);
}

/* ---- the report ---- */

/* "12345 B", "1.2 MiB"... */
static const char *human(uint64_t v, char *buf, size_t cap)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    double d = (double)v;
    int u = 0;
    while (d >= 1024.0 && u < 5)
        d /= 1024.0, u++;
    if (u == 0)
        snprintf(buf, cap, "%llu B", (unsigned long long)v);
    else
        snprintf(buf, cap, "%.2f %s", d, units[u]);
    return buf;
}

static const char *dollars(double v, char *buf, size_t cap)
{
    snprintf(buf, cap, v >= 1.0 ? "$%.2f" : "$%.4g", v);
    return buf;
}

static void report_head(sk_node *n, struct evbuffer *b)
{
    const sk_config *cfg = n->cfg;
    int64_t up = (sk_now_ms() - n->started_ms) / 1000;
    const char *zone = cfg->broker_rack[0] ? cfg->broker_rack : "unknown (broker.rack is empty)";
    evbuffer_add_printf(b, "Cross-zone traffic of node %d, zone %s, over %lldh%02lldm%02llds "
                           "since it started\n\n",
                        cfg->node_id, zone, (long long)(up / 3600), (long long)(up / 60 % 60),
                        (long long)(up % 60));
    sk_xzone *x = n->xzone;
    char h1[32], h2[32], h3[32];
    evbuffer_add_printf(b, "Produced by clients through this node: %llu bytes (%s; direct %s, "
                           "proxied %s)\n\n",
                        (unsigned long long)(x->produced_direct + x->produced_proxied),
                        human(x->produced_direct + x->produced_proxied, h1, sizeof h1),
                        human(x->produced_direct, h2, sizeof h2),
                        human(x->produced_proxied, h3, sizeof h3));
}

static void report_kinds(const sk_zacct *a, struct evbuffer *b)
{
    char h1[32], h2[32];
    evbuffer_add_printf(b, "Bytes exchanged with other zones:\n  %-9s %28s %28s\n", "kind",
                        "in", "out");
    for (int k = 0; k < SK_ZA_KINDS; k++) {
        uint64_t in = sk_zacct_cross_bytes(a, SK_ZA_IN, (sk_za_kind)k);
        uint64_t out = sk_zacct_cross_bytes(a, SK_ZA_OUT, (sk_za_kind)k);
        evbuffer_add_printf(b, "  %-9s %14llu (%11s) %14llu (%11s)\n",
                            sk_za_kind_name((sk_za_kind)k), (unsigned long long)in,
                            human(in, h1, sizeof h1), (unsigned long long)out,
                            human(out, h2, sizeof h2));
    }
    uint64_t in = cross_total(a, SK_ZA_IN), out = cross_total(a, SK_ZA_OUT);
    evbuffer_add_printf(b, "  %-9s %14llu (%11s) %14llu (%11s)\n\n", "total",
                        (unsigned long long)in, human(in, h1, sizeof h1),
                        (unsigned long long)out, human(out, h2, sizeof h2));
}

static void report_cost(sk_node *n, struct evbuffer *b)
{
    sk_xzone *x = n->xzone;
    uint64_t cross = cross_total(x->acct, SK_ZA_IN) + cross_total(x->acct, SK_ZA_OUT);
    uint64_t produced = x->produced_direct + x->produced_proxied;
    double cost = (double)cross / GIB * x->price_per_gib;
    char d1[32], d2[32];
    if (produced)
        evbuffer_add_printf(b, "Cross-zone bytes (in + out) per byte produced here: %.6f\n",
                            (double)cross / (double)produced);
    else
        evbuffer_add_printf(b, "Cross-zone bytes (in + out) per byte produced here: n/a "
                               "(nothing produced through this node)\n");
    evbuffer_add_printf(b, "Cost at %s per GiB in each direction (zone.transfer.price.per.gib), "
                           "this node's side (what it sends plus what it receives): %s\n",
                        dollars(x->price_per_gib, d1, sizeof d1), dollars(cost, d2, sizeof d2));
    if (produced)
        evbuffer_add_printf(b, "  per GiB produced through this node: %s\n",
                            dollars(cost / ((double)produced / GIB), d1, sizeof d1));
    evbuffer_add_printf(b, "\n");
}

static void report_zone_row(const sk_zacct *a, int s, int k, struct evbuffer *b)
{
    uint64_t in = sk_zacct_get(a, s, SK_ZA_IN, (sk_za_kind)k);
    uint64_t out = sk_zacct_get(a, s, SK_ZA_OUT, (sk_za_kind)k);
    if (!in && !out)
        return;
    char h1[32], h2[32];
    const char *what = sk_zacct_cross(a, s)          ? "cross-zone"
                       : s == SK_ZA_UNKNOWN          ? "zone unknown"
                       : s == sk_zacct_own(a)        ? "own zone"
                                                     : "own zone unknown";
    evbuffer_add_printf(b, "  %-16s %-8s %14llu (%11s) %14llu (%11s)  %s\n", slot_label(a, s),
                        sk_za_kind_name((sk_za_kind)k), (unsigned long long)in,
                        human(in, h1, sizeof h1), (unsigned long long)out,
                        human(out, h2, sizeof h2), what);
}

static void report_zones(const sk_zacct *a, struct evbuffer *b)
{
    evbuffer_add_printf(b, "All traffic by peer zone:\n  %-16s %-8s %28s %28s\n", "zone", "kind",
                        "in", "out");
    for (int s = 0; s < SK_ZA_SLOTS; s++)
        for (int k = 0; k < SK_ZA_KINDS; k++)
            report_zone_row(a, s, k, b);
    evbuffer_add_printf(b, "\n");
}

void sk_xzone_report(sk_node *n, struct evbuffer *b)
{
    if (!n->xzone)
        return;
    report_head(n, b);
    report_kinds(n->xzone->acct, b);
    report_cost(n, b);
    report_zones(n->xzone->acct, b);
    evbuffer_add_printf(
        b, "How to read it: bytes are Kafka frames and HTTP messages as the sockets carry them; "
           "each packet adds about 52 bytes of IP and TCP headers. A peer is of unknown zone "
           "when client.zone.cidrs does not place its address (etcd endpoints, clients) or "
           "etcd does not know the node; \"(other)\" holds zones past the first %d. A main "
           "receives the confirms of batches produced through nodes of other zones, so one "
           "node's ratio says little: tools/zone-report.py sums every node's.\n",
        SK_ZA_NAMED);
}
