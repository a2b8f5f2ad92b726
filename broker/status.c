/*
 * status: `skiffd status` (status.h).
 */
#include "status.h"

#include <errno.h>
#include <netdb.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "kc.h"
#include "kmsg.h"
#include "krpc.h"
#include "sk_arena.h"

#define MAX_NODES 256
#define META_VERSION 12
#define GIB ((double)(1u << 30))

typedef struct node_row {
    int32_t id;
    char host[256], rack[64];
    int port;
    int leads;           /* partitions Metadata names it leader of */
    bool answered;       /* its NodeStatus came */
    char *metrics;       /* that answer's metrics text (malloc'd) */
    char *zones;         /* its /zones report, with --zones */
} node_row;

typedef struct status_opts {
    const char *bootstrap;
    int timeout_ms;
    bool zone_reports;
} status_opts;

/* ---- blocking Kafka-framed calls ---- */

static int dial(const char *host, int port, int timeout_ms)
{
    char ps[16];
    snprintf(ps, sizeof ps, "%d", port);
    struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
    if (getaddrinfo(host, ps, &hints, &res) != 0)
        return -1;
    int fd = -1;
    for (struct addrinfo *a = res; a && fd < 0; a = a->ai_next) {
        fd = socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
        if (fd < 0)
            continue;
        struct timeval tv = {timeout_ms / 1000, (timeout_ms % 1000) * 1000};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
        if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    return fd;
}

static int io_all(int fd, void *buf, size_t len, bool out)
{
    uint8_t *p = buf;
    while (len > 0) {
        ssize_t n = out ? write(fd, p, len) : read(fd, p, len);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int send_request(int fd, const kc_api *api, int16_t ver, const void *req)
{
    bool flex = ver >= api->flex_min;
    kc_req_header h = {api->key, ver, 1, {"skiffd-status", 13}};
    size_t len = kc_req_header_size(&h, flex) + kc_size(api->req, ver, flex, req);
    uint8_t *buf = malloc(len + 4);
    if (!buf)
        return -1;
    uint8_t *o = kc_put_i32(buf, (int32_t)len);
    o = kc_put_req_header(o, &h, flex);
    kc_encode(api->req, ver, flex, req, o);
    int rc = io_all(fd, buf, len + 4, true);
    free(buf);
    return rc;
}

/* One request and its response, decoded into resp (strings in the arena). */
static int call(int fd, const kc_api *api, int16_t ver, const void *req, void *resp,
                sk_arena *a)
{
    uint8_t lenb[4];
    if (send_request(fd, api, ver, req) != 0 || io_all(fd, lenb, 4, false) != 0)
        return -1;
    uint32_t len = (uint32_t)lenb[0] << 24 | (uint32_t)lenb[1] << 16 | lenb[2] << 8 | lenb[3];
    uint8_t *body = len < (1u << 30) ? sk_arena_alloc(a, len) : NULL;
    if (!body || io_all(fd, body, len, false) != 0)
        return -1;
    bool flex = ver >= api->flex_min;
    kc_reader r;
    kc_reader_init(&r, body, len);
    int32_t corr;
    if (kc_read_i32(&r, &corr) != 0 || corr != 1 || (flex && kc_skip_tags(&r) != 0))
        return -1;
    return kc_decode(api->resp, ver, flex, &r, resp, a);
}

/* ---- what the nodes say ---- */

static void copy_str(char *dst, size_t cap, kc_str s)
{
    size_t n = s.len > 0 ? (size_t)s.len : 0;
    if (n >= cap)
        n = cap - 1;
    memcpy(dst, s.p, n);
    dst[n] = 0;
}

static int count_leads(const kp_MetadataResponse *m, int32_t id)
{
    int n = 0;
    for (int32_t t = 0; t < m->topics.n; t++)
        for (int32_t p = 0; p < m->topics.v[t].partitions.n; p++)
            n += m->topics.v[t].partitions.v[p].leader_id == id;
    return n;
}

/* The live nodes, from the bootstrap node's Metadata. -1 when unreadable. */
static int read_metadata(const status_opts *o, node_row *rows, int cap)
{
    char host[256];
    const char *colon = strrchr(o->bootstrap, ':');
    if (!colon || colon == o->bootstrap || (size_t)(colon - o->bootstrap) >= sizeof host)
        return -1;
    snprintf(host, sizeof host, "%.*s", (int)(colon - o->bootstrap), o->bootstrap);
    int fd = dial(host, atoi(colon + 1), o->timeout_ms);
    if (fd < 0)
        return -1;
    sk_arena *a = sk_arena_new((size_t)1 << 28);
    kp_MetadataRequest req;
    kc_init(&kp_MetadataRequest_desc, &req);
    req.topics.n = -1; /* every topic */
    req.allow_auto_topic_creation = false;
    kp_MetadataResponse m;
    int n = -1;
    if (a && call(fd, kc_api_get(3), META_VERSION, &req, &m, a) == 0) {
        n = m.brokers.n < cap ? m.brokers.n : cap;
        for (int i = 0; i < n; i++) {
            const kp_MetadataResponse_MetadataResponseBroker *b = &m.brokers.v[i];
            rows[i] = (node_row){.id = b->node_id, .port = b->port};
            copy_str(rows[i].host, sizeof rows[i].host, b->host);
            copy_str(rows[i].rack, sizeof rows[i].rack, b->rack);
            rows[i].leads = count_leads(&m, b->node_id);
        }
    }
    close(fd);
    if (a)
        sk_arena_destroy(a);
    return n;
}

static char *dup_str(kc_str s)
{
    size_t n = s.len > 0 ? (size_t)s.len : 0;
    char *p = malloc(n + 1);
    if (p) {
        memcpy(p, s.p, n);
        p[n] = 0;
    }
    return p;
}

static void read_node(const status_opts *o, node_row *row)
{
    int fd = dial(row->host, row->port, o->timeout_ms);
    if (fd < 0)
        return;
    sk_arena *a = sk_arena_new((size_t)1 << 28);
    kr_NodeStatusRequest req = {.include_zone_report = o->zone_reports};
    kr_NodeStatusResponse resp;
    if (a && call(fd, krpc_api_get(KR_NODE_STATUS), 0, &req, &resp, a) == 0 &&
        resp.error_code == 0) {
        row->metrics = dup_str(resp.metrics);
        row->zones = dup_str(resp.zone_report);
        row->answered = row->metrics && row->zones;
    }
    close(fd);
    if (a)
        sk_arena_destroy(a);
}

/* Sum of the series `name` whose labels contain `want` (NULL: any). */
static double metric(const char *text, const char *name, const char *want)
{
    double sum = 0;
    size_t nl = strlen(name);
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1 : NULL) {
        if (strncmp(l, name, nl) != 0 || (l[nl] != ' ' && l[nl] != '{'))
            continue;
        const char *end = strchr(l, '\n');
        const char *val = l + nl;
        if (*val == '{') {
            const char *close_b = strstr(val, "} ");
            if (!close_b || (end && close_b > end))
                continue;
            if (want && !memmem(val, (size_t)(close_b - val), want, strlen(want)))
                continue;
            val = close_b + 1;
        } else if (want) {
            continue;
        }
        sum += strtod(val, NULL);
    }
    return sum;
}

/* ---- printing ---- */

static const char *human(double v, char *buf, size_t cap)
{
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int u = 0;
    while (v >= 1024 && u < 4) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

/* "ok", or what is wrong with the node. */
static const char *health(const node_row *r, char *buf, size_t cap)
{
    if (!r->answered)
        return "unreachable";
    const char *m = r->metrics;
    buf[0] = 0;
    if (metric(m, "skiff_wal_failed", NULL) > 0)
        strncat(buf, "wal-failed,", cap - strlen(buf) - 1);
    if (metric(m, "skiff_wal_unavailable", NULL) > 0)
        strncat(buf, "wal-unavailable,", cap - strlen(buf) - 1);
    if (metric(m, "skiff_back_pressure", NULL) > 0)
        strncat(buf, "back-pressure,", cap - strlen(buf) - 1);
    if (strstr(m, "\nskiff_cluster_lease_remaining_seconds ") &&
        metric(m, "skiff_cluster_lease_remaining_seconds", NULL) <= 0)
        strncat(buf, "lease-lapsed,", cap - strlen(buf) - 1);
    size_t n = strlen(buf);
    if (n == 0)
        return "ok";
    buf[n - 1] = 0;
    return buf;
}

static void print_node(const node_row *r)
{
    char h[128], b1[32], b2[32], b3[32], b4[32], addr[300], serves[16] = "-";
    const char *m = r->metrics ? r->metrics : "";
    snprintf(addr, sizeof addr, "%s:%d", r->host, r->port);
    /* Only cluster members count what they serve (a single node serves all). */
    if (strstr(m, "\nskiff_cluster_partitions_served "))
        snprintf(serves, sizeof serves, "%.0f", metric(m, "skiff_cluster_partitions_served", NULL));
    printf("%-6d %-12s %-22s %-16s %5d %6s %10s %10s %10s %6.0f/%-6.0f %10s\n", r->id,
           *r->rack ? r->rack : "-", addr, health(r, h, sizeof h), r->leads, serves,
           human(metric(m, "skiff_wal_pending_bytes", NULL), b1, sizeof b1),
           human(metric(m, "skiff_wal_retained_bytes", NULL), b2, sizeof b2),
           human(metric(m, "skiff_s3_upload_lag_bytes", NULL), b3, sizeof b3),
           metric(m, "skiff_s3_objects", "kind=\"stream\""),
           metric(m, "skiff_s3_objects", "kind=\"stream_set\""),
           human(metric(m, "skiff_s3_object_bytes", NULL), b4, sizeof b4));
}

/* A line per long piece of work a node runs now (progress.h). */
static void print_work(const node_row *rows, int n)
{
    static const char *works[] = {"rebalance", "reassignment", "retention"};
    bool any = false;
    for (int i = 0; i < n; i++) {
        for (int k = 0; rows[i].answered && k < 3; k++) {
            char want[48];
            snprintf(want, sizeof want, "work=\"%s\"", works[k]);
            const char *m = rows[i].metrics;
            if (metric(m, "skiff_work_running", want) <= 0)
                continue;
            if (!any)
                printf("\nUnder way:\n");
            any = true;
            printf("  node %d: %s, %.0f of %.0f partitions done, %.0f left, for %.1f s\n",
                   rows[i].id, works[k], metric(m, "skiff_work_partitions_done", want),
                   metric(m, "skiff_work_partitions_total", want),
                   metric(m, "skiff_work_partitions_left", want),
                   metric(m, "skiff_work_elapsed_seconds", want));
        }
    }
}

/* A byte between two nodes is seen by both (counted once); a byte between a
 * node and a client or etcd by one. */
static double crossed(const node_row *rows, int n, const char *kind, bool node_kind)
{
    char want[32];
    snprintf(want, sizeof want, "kind=\"%s\"", kind);
    double sum = 0;
    for (int i = 0; i < n; i++)
        if (rows[i].answered)
            sum += metric(rows[i].metrics, "skiff_zone_cross_bytes_total", want);
    return node_kind ? sum / 2 : sum;
}

/* What a classic Kafka cluster (RF=3, one replica per zone, three zones) sends
 * across zones for the same produced bytes (docs/benchmarks.md, "Bytes"). */
#define KAFKA_LEADER_ELSEWHERE (2.0 / 3.0) /* producers and leaders spread evenly */
#define KAFKA_REPLICA_COPIES 2.0          /* to the followers in the other two zones */
#define KAFKA_CROSS_PER_BYTE (KAFKA_LEADER_ELSEWHERE + KAFKA_REPLICA_COPIES)

static void print_kafka_model(double skiff, double produced, double price)
{
    char b[32];
    double kafka = produced * KAFKA_CROSS_PER_BYTE;
    printf("\nClassic Kafka, RF=3 over 3 zones, for the same produced bytes (model below):\n");
    printf("  crossed %.0f bytes (%s): %.4f per byte produced\n", kafka,
           human(kafka, b, sizeof b), KAFKA_CROSS_PER_BYTE);
    printf("  cost $%.6g; per GiB produced: $%.6g\n", kafka / GIB * 2 * price,
           KAFKA_CROSS_PER_BYTE * 2 * price);
    if (skiff > 0 && kafka > 0)
        printf("  Skiff's cross-zone bytes are 1/%.0f of Kafka's\n", kafka / skiff);
    printf("Model: producers and partition leaders spread evenly over the 3 zones, so 2/3 of\n"
           "  the bytes go to a leader in another zone; the leader copies each byte to its\n"
           "  followers in the 2 other zones; consumers set client.rack and fetch in their\n"
           "  zone (nothing across); Kafka's protocol overhead (about 1.5 %% measured) and its\n"
           "  coordination traffic are not counted; the same price per GiB each way.\n");
}

static void print_cross_zone(const node_row *rows, int n)
{
    static const char *kinds[] = {"client", "confirm", "follow", "rpc", "etcd"};
    double total = 0, produced = 0, price = 0;
    char b[32];
    printf("\nCross-zone traffic since each node started (bytes that crossed, counted once):\n");
    for (int k = 0; k < 5; k++) {
        double v = crossed(rows, n, kinds[k], k >= 1 && k <= 3);
        total += v;
        printf("  %-8s %14.0f (%s)\n", kinds[k], v, human(v, b, sizeof b));
    }
    printf("  %-8s %14.0f (%s)\n", "total", total, human(total, b, sizeof b));
    for (int i = 0; i < n; i++) {
        if (!rows[i].answered)
            continue;
        produced += metric(rows[i].metrics, "skiff_client_produced_bytes_total", NULL);
        price = metric(rows[i].metrics, "skiff_zone_transfer_price_per_gib", NULL);
    }
    printf("Produced by clients: %.0f bytes (%s); crossed per byte produced: %.6f\n", produced,
           human(produced, b, sizeof b), produced > 0 ? total / produced : 0.0);
    printf("Cost at $%g per GiB each way (both ends of every crossing): $%.6g", price,
           total / GIB * 2 * price);
    if (produced > 0)
        printf("; per GiB produced: $%.6g", total / produced * 2 * price);
    printf("\n");
    print_kafka_model(total, produced, price);
}

static int report(const status_opts *o, node_row *rows, int n)
{
    int bad = 0;
    printf("%d nodes (Metadata from %s)\n\n", n, o->bootstrap);
    printf("%-6s %-12s %-22s %-16s %5s %6s %10s %10s %10s %13s %10s\n", "node", "zone",
           "address", "health", "leads", "serves", "wal-pend", "wal-kept", "upload-lag",
           "objects s/set", "obj-bytes");
    for (int i = 0; i < n; i++) {
        char h[128];
        print_node(&rows[i]);
        bad |= strcmp(health(&rows[i], h, sizeof h), "ok") != 0;
    }
    print_work(rows, n);
    print_cross_zone(rows, n);
    for (int i = 0; o->zone_reports && i < n; i++)
        if (rows[i].answered)
            printf("\n%s", rows[i].zones);
    return bad ? 1 : 0;
}

static int usage(const char *msg)
{
    fprintf(stderr, "skiffd status: %s\nusage: skiffd status --bootstrap host:port "
                    "[--zones] [--timeout-ms N]\n", msg);
    return 2;
}

int sk_status_main(int argc, char **argv)
{
    status_opts o = {.timeout_ms = 5000};
    for (int i = 1; i < argc; i++) {
        if (strcmp(argv[i], "--bootstrap") == 0 && i + 1 < argc)
            o.bootstrap = argv[++i];
        else if (strcmp(argv[i], "--timeout-ms") == 0 && i + 1 < argc)
            o.timeout_ms = atoi(argv[++i]);
        else if (strcmp(argv[i], "--zones") == 0)
            o.zone_reports = true;
        else
            return usage("unknown argument");
    }
    if (!o.bootstrap || o.timeout_ms <= 0)
        return usage("--bootstrap host:port is needed");
    static node_row rows[MAX_NODES];
    int n = read_metadata(&o, rows, MAX_NODES);
    if (n < 0) {
        fprintf(stderr, "skiffd status: cannot read Metadata from %s\n", o.bootstrap);
        return 2;
    }
    for (int i = 0; i < n; i++)
        read_node(&o, &rows[i]);
    int rc = report(&o, rows, n);
    for (int i = 0; i < n; i++) {
        free(rows[i].metrics);
        free(rows[i].zones);
    }
    return rc;
}
