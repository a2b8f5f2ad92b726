#include "dispatch.h"

#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "groups.h"
#include "handlers.h"
#include "kmsg.h"
#include "krpc.h"
#include "txpeer.h"
#include "metrics.h"
#include "net.h"
#include "node.h"
#include "sasl.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

static void h_api_versions(sk_req *r);

/* A read of state shown before it is durable waited for the WAL (one group
 * commit at most); it runs now, or the WAL failed or closes. */
static void shown_durable(void *arg, int err)
{
    sk_req *r = arg;
    r->pending--;
    if (err)
        sk_req_close(r, "the WAL failed or closes: what the request reads is not known durable");
    else
        r->entry->handler(r);
}

/* Versions follow the compatibility brief: never advertise what is not
 * served, never raise a minimum above Kafka 4's, and keep the single
 * versions old librdkafka probes for inside each range. Flexible-from is
 * filled in from the generated message specs at start-up. */
static sk_api_entry table[] = {
    /* key  min max flex impl handler api shows_state */
    {0, 0, 13, 0, 3, h_produce, NULL, false},
    {1, 4, 17, 0, 4, h_fetch, NULL, false},
    {2, 1, 10, 0, 1, h_list_offsets, NULL, false},
    {3, 0, 13, 0, 0, h_metadata, NULL, true},
    {8, 2, 10, 0, 2, h_offset_commit, NULL, false},
    {9, 1, 10, 0, 1, h_offset_fetch, NULL, true},
    {10, 0, 6, 0, 0, h_find_coordinator, NULL, false},
    {11, 0, 9, 0, 0, h_join_group, NULL, false},
    {12, 0, 4, 0, 0, h_heartbeat, NULL, false},
    {13, 0, 5, 0, 0, h_leave_group, NULL, false},
    {14, 0, 5, 0, 0, h_sync_group, NULL, false},
    {15, 0, 6, 0, 0, h_describe_groups, NULL, true},
    {16, 0, 5, 0, 0, h_list_groups, NULL, true},
    {17, 0, 1, 0, 0, h_sasl_handshake, NULL, false},
    {18, 0, 4, 0, 0, h_api_versions, NULL, false},
    {19, 2, 7, 0, 2, h_create_topics, NULL, false},
    {20, 1, 6, 0, 1, h_delete_topics, NULL, false},
    {21, 0, 2, 0, 0, h_delete_records, NULL, false},
    {22, 0, 5, 0, 0, h_init_producer_id, NULL, false},
    {23, 2, 4, 0, 2, h_offset_for_leader_epoch, NULL, false},
    {24, 0, 5, 0, 0, h_add_partitions_to_txn, NULL, false},
    {25, 0, 4, 0, 0, h_add_offsets_to_txn, NULL, false},
    {26, 0, 4, 0, 0, h_end_txn, NULL, false},
    {28, 0, 4, 0, 0, h_txn_offset_commit, NULL, false},
    {29, 1, 3, 0, 1, h_describe_acls, NULL, true},
    {30, 1, 3, 0, 1, h_create_acls, NULL, false},
    {31, 1, 3, 0, 1, h_delete_acls, NULL, false},
    {32, 1, 4, 0, 1, h_describe_configs, NULL, true},
    {33, 0, 2, 0, 0, h_alter_configs, NULL, false},
    {35, 1, 5, 0, 1, h_describe_log_dirs, NULL, false},
    {36, 0, 2, 0, 0, h_sasl_authenticate, NULL, false},
    {37, 0, 3, 0, 0, h_create_partitions, NULL, false},
    {42, 0, 2, 0, 0, h_delete_groups, NULL, false},
    {44, 0, 1, 0, 0, h_incremental_alter_configs, NULL, false},
    {45, 0, 1, 0, 0, h_alter_partition_reassignments, NULL, false},
    {46, 0, 0, 0, 0, h_list_partition_reassignments, NULL, false},
    {47, 0, 0, 0, 0, h_offset_delete, NULL, false},
    {50, 0, 0, 0, 0, h_describe_user_scram_credentials, NULL, true},
    {51, 0, 0, 0, 0, h_alter_user_scram_credentials, NULL, false},
    {60, 0, 2, 0, 0, h_describe_cluster, NULL, false},
    {34, 1, 2, 0, 1, h_alter_replica_log_dirs, NULL, false},
    {43, 0, 2, 0, 0, h_elect_leaders, NULL, false},
    {55, 0, 2, 0, 0, h_describe_quorum, NULL, false},
    {61, 0, 0, 0, 0, h_describe_producers, NULL, false},
    {65, 0, 0, 0, 0, h_describe_transactions, NULL, false},
    {66, 0, 1, 0, 0, h_list_transactions, NULL, false},
    {68, 0, 1, 0, 0, h_consumer_group_heartbeat, NULL, false},
    {69, 0, 1, 0, 0, h_consumer_group_describe, NULL, true},
    {75, 0, 0, 0, 0, h_describe_topic_partitions, NULL, true},
    /* Skiff's node-to-node RPCs (proto/rpc): served, never advertised. */
    {KR_HANDOFF_READY, 0, 0, 0, 0, h_handoff_ready, NULL, false},
    {KR_CONFIRM, 0, 0, 0, 0, h_confirm, NULL, false},
    {KR_FOLLOW, 0, 0, 0, 0, h_follow, NULL, false},
    {KR_NODE_STATUS, 0, 0, 0, 0, h_node_status, NULL, false},
    {KR_TXN_MARKERS, 0, 0, 0, 0, h_txn_markers, NULL, false},
};
#define NTABLE ((int)(sizeof table / sizeof table[0]))

/* Keys from KRPC_KEY_MIN on are Skiff's own RPCs, described by krpc; no
 * client may see them in ApiVersions. */
static bool internal_api(int16_t key)
{
    return key >= KRPC_KEY_MIN;
}

static void table_init(void)
{
    static bool done;
    if (done)
        return;
    done = true;
    /* The key alone tells the two apart only while Kafka's stay below. */
    if (kc_api_max_key() >= KRPC_KEY_MIN) {
        SK_ERROR("dispatch", "Kafka API key %d reaches the internal range", kc_api_max_key());
        abort();
    }
    for (int i = 0; i < NTABLE; i++) {
        int16_t key = table[i].key;
        const kc_api *api = internal_api(key) ? krpc_api_get(key) : kc_api_get(key);
        if (!api) {
            SK_ERROR("dispatch", "API %d has no generated descriptors", table[i].key);
            abort();
        }
        table[i].api = api;
        table[i].flex = api->flex_min;
        /* Advertising past the spec would be a lie the codec cannot serve. */
        if (table[i].max > api->max_ver || table[i].impl_min < api->min_ver) {
            SK_ERROR("dispatch", "API %s: table range %d-%d outside the spec's %d-%d", api->name,
                     table[i].impl_min, table[i].max, api->min_ver, api->max_ver);
            abort();
        }
    }
}

const sk_api_entry *sk_api_table(int *n)
{
    table_init();
    *n = NTABLE;
    return table;
}

const sk_api_entry *sk_api_lookup(int16_t key)
{
    table_init();
    for (int i = 0; i < NTABLE; i++)
        if (table[i].key == key)
            return &table[i];
    return NULL;
}

kc_str sk_req_str(sk_req *r, const char *s)
{
    kc_str out = {NULL, -1};
    if (!s)
        return out;
    size_t n = strlen(s);
    char *p = sk_arena_strndup(r->arena, s, n);
    if (!p)
        return out;
    out.p = p;
    out.len = (int32_t)n;
    return out;
}

void *sk_req_array(sk_req *r, const kc_struct *elem, int32_t n)
{
    return kc_new_array(r->arena, elem, n);
}

void *sk_req_new_resp(sk_req *r)
{
    const kc_struct *d = r->entry->api->resp;
    void *p = sk_arena_alloc(r->arena, d->size);
    if (p)
        kc_init(d, p);
    return p;
}

static void put_be32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

void sk_req_drop_pieces(sk_req *r)
{
    for (int i = 0; i < r->npieces; i++)
        sk_ref_put(r->pieces[i].ref);
    free(r->pieces);
    r->pieces = NULL;
    r->npieces = 0;
}

/* Room for the pieces of `body` that have an owner (a Fetch response's
 * cached batches), which the encoder lists instead of copying; none when
 * there are none or there is no memory (then they are copied). */
static kc_gather gather_room(const kc_struct *d, int16_t ver, bool flexible, const void *body)
{
    kc_gather g = {NULL, 0, 0};
    int n = kc_count_refs(d, ver, flexible, body);
    if (n > 0 && (g.v = malloc((size_t)n * sizeof *g.v)) != NULL)
        g.cap = n;
    return g;
}

/* Encodes `body` of message `d` at `ver` into r->out, with the response
 * header; ApiVersions always gets header v0 (clients parse it before they
 * know whether the broker speaks flexible versions). Record pieces with an
 * owner stay where they are: r->pieces lists them, each held until it is
 * handed to the connection's output or the request is freed. */
static int encode_into(sk_req *r, const kc_struct *d, int16_t ver, bool flexible, bool flex_header,
                       const void *body)
{
    size_t hsz = kc_resp_header_size(flex_header);
    size_t bsz = kc_size(d, ver, flexible, body);
    size_t total = 4 + hsz + bsz;
    if (total - 4 > INT32_MAX)
        return SK_ERR_NOMEM;
    kc_gather g = gather_room(d, ver, flexible, body);
    uint8_t *out = malloc(total);
    if (!out) {
        free(g.v);
        return SK_ERR_NOMEM;
    }
    put_be32(out, (uint32_t)(total - 4));
    uint8_t *p = kc_put_resp_header(out + 4, r->hdr.correlation_id, flex_header);
    uint8_t *end = kc_encode_gather(d, ver, flexible, body, p, &g);
    size_t wrote = (size_t)(end - out);
    for (int i = 0; i < g.n; i++) {
        g.v[i].at += (size_t)(p - out);
        wrote += g.v[i].len;
    }
    if (wrote != total) {
        SK_ERROR("dispatch", "%s v%d: encoder wrote %zu bytes, sized %zu", r->entry->api->name,
                 ver, wrote, total);
        free(g.v);
        free(out);
        return SK_ERR_PARSE;
    }
    for (int i = 0; i < g.n; i++)
        sk_ref_hold(g.v[i].ref);
    sk_req_drop_pieces(r);
    free(r->out);
    r->out = out;
    r->out_len = (size_t)(end - out);
    r->pieces = g.n ? g.v : NULL;
    r->npieces = g.n;
    if (!g.n)
        free(g.v);
    return 0;
}

/* Kafka's TotalTimeMs: from the frame's arrival to its answer, waits included. */
static void observe_latency(sk_req *r)
{
    int16_t key = r->hdr.api_key;
    if (key >= 0 && key < SK_METRICS_APIS)
        sk_metrics_observe(&r->node->metrics.request_latency[key], sk_mono_us() - r->start_us);
}

int sk_req_encode(sk_req *r)
{
    bool flex_header = r->flexible && r->entry->key != 18;
    return encode_into(r, r->entry->api->resp, r->version, r->flexible, flex_header, r->resp);
}

void sk_req_respond(sk_req *r)
{
    if (sk_req_encode(r) != 0) {
        sk_req_close(r, "response encoding failed");
        return;
    }
    observe_latency(r);
    r->state = SK_REQ_DONE;
    sk_req_finish(r);
}

void sk_req_silent(sk_req *r)
{
    observe_latency(r);
    r->state = SK_REQ_SILENT;
    sk_req_finish(r);
}

void sk_req_close(sk_req *r, const char *why)
{
    if (why)
        SK_WARN("dispatch", "%s: closing connection: %s", r->conn->peer, why);
    r->state = SK_REQ_CLOSE;
    sk_req_finish(r);
}

/* ---- ApiVersions ---- */

static void api_versions_fill(sk_req *r, kp_ApiVersionsResponse *resp, int16_t error)
{
    resp->error_code = error;
    if (error == SK_KAFKA_UNSUPPORTED_VERSION) {
        /* Tell the client the range of ApiVersions itself, and nothing else,
         * so that it retries with a version we speak. */
        kp_ApiVersionsResponse_ApiVersion *v =
            sk_req_array(r, &kp_ApiVersionsResponse_ApiVersion_desc, 1);
        if (v) {
            const sk_api_entry *e = sk_api_lookup(18);
            v[0].api_key = 18;
            v[0].min_version = e->min;
            v[0].max_version = e->max;
            resp->api_keys.n = 1;
            resp->api_keys.v = v;
        }
        return;
    }
    kp_ApiVersionsResponse_ApiVersion *v =
        sk_req_array(r, &kp_ApiVersionsResponse_ApiVersion_desc, NTABLE);
    if (!v)
        return;
    int n = 0;
    for (int i = 0; i < NTABLE; i++) {
        if (internal_api(table[i].key))
            continue;
        v[n].api_key = table[i].key;
        v[n].min_version = table[i].min;
        v[n].max_version = table[i].max;
        n++;
    }
    resp->api_keys.n = n;
    resp->api_keys.v = v;
    resp->finalized_features_epoch = -1;
}

/* ClientSoftwareName/Version: [a-zA-Z0-9](?:[a-zA-Z0-9.-]*[a-zA-Z0-9])? */
static bool software_name_valid(kc_str s)
{
    if (s.len <= 0)
        return false;
    for (int32_t i = 0; i < s.len; i++) {
        char c = s.p[i];
        bool alnum = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
        bool edge = i == 0 || i == s.len - 1;
        if (!alnum && (edge || (c != '.' && c != '-')))
            return false;
    }
    return true;
}

static void h_api_versions(sk_req *r)
{
    kp_ApiVersionsRequest *req = r->body;
    if (r->version >= 3 && (!software_name_valid(req->client_software_name) ||
                            !software_name_valid(req->client_software_version))) {
        kp_ApiVersionsResponse *resp = r->resp;
        resp->error_code = SK_KAFKA_INVALID_REQUEST;
        resp->finalized_features_epoch = -1;
        sk_req_respond(r);
        return;
    }
    if (r->version >= 3 && req->client_software_name.len > 0)
        SK_DEBUG("dispatch", "%s: client %.*s %.*s", r->conn->peer,
                 req->client_software_name.len, req->client_software_name.p,
                 req->client_software_version.len > 0 ? req->client_software_version.len : 0,
                 req->client_software_version.p);
    api_versions_fill(r, r->resp, SK_KAFKA_NONE);
    sk_req_respond(r);
}

/* An ApiVersions request of a version we do not know: its body cannot be
 * parsed, so answer with a v0 body (which every version can read) holding
 * UNSUPPORTED_VERSION and our ApiVersions range. */
static void api_versions_unsupported(sk_req *r)
{
    kp_ApiVersionsResponse *resp = sk_arena_alloc(r->arena, sizeof *resp);
    if (!resp) {
        sk_req_close(r, "out of memory");
        return;
    }
    kc_init(&kp_ApiVersionsResponse_desc, resp);
    api_versions_fill(r, resp, SK_KAFKA_UNSUPPORTED_VERSION);
    if (encode_into(r, &kp_ApiVersionsResponse_desc, 0, false, false, resp) != 0) {
        sk_req_close(r, "response encoding failed");
        return;
    }
    r->state = SK_REQ_DONE;
    sk_req_finish(r);
}

/* ---- dispatch ---- */

/* Every internal RPC, whatever its key, needs ClusterAction (authz.h): a
 * refusal is answered before the body is even decoded, with
 * CLUSTER_AUTHORIZATION_FAILED in the response's top-level ErrorCode, or
 * by closing the connection when the response has none. */
static bool refuse_internal(sk_req *r)
{
    int16_t err = sk_authz_internal(r);
    if (err == 0)
        return false;
    SK_WARN("dispatch", "%s: %s refused to %s (no ClusterAction on the cluster)", r->conn->peer,
            r->entry->api->name, r->conn->principal);
    const kc_struct *d = r->entry->api->resp;
    for (uint16_t i = 0; i < d->nfields; i++) {
        const kc_field *f = &d->fields[i];
        if (f->type == KC_INT16 && strcmp(f->name, "ErrorCode") == 0 && f->tag_min < 0) {
            memcpy((uint8_t *)r->resp + f->offset, &err, sizeof err);
            sk_req_respond(r);
            return true;
        }
    }
    sk_req_close(r, NULL);
    return true;
}

void sk_dispatch(sk_req *r)
{
    table_init();
    if (sk_sasl_raw(r->conn)) {
        sk_sasl_raw_token(r);
        return;
    }
    if (r->frame_len < 8) {
        sk_req_close(r, "request shorter than its header");
        return;
    }
    int16_t key = (int16_t)(r->frame[0] << 8 | r->frame[1]);
    int16_t ver = (int16_t)(r->frame[2] << 8 | r->frame[3]);
    r->hdr.api_key = key;
    r->hdr.api_version = ver;
    r->hdr.correlation_id = (int32_t)((uint32_t)r->frame[4] << 24 | (uint32_t)r->frame[5] << 16 |
                                      (uint32_t)r->frame[6] << 8 | r->frame[7]);
    r->version = ver;
    const sk_api_entry *e = sk_api_lookup(key);
    if (!e) {
        SK_WARN("dispatch", "%s: unknown API key %d (version %d); closing the connection",
                r->conn->peer, key, ver);
        r->state = SK_REQ_CLOSE;
        sk_req_finish(r);
        return;
    }
    r->entry = e;
    const char *why = NULL;
    if (!sk_sasl_allows(r->conn, key, &why)) {
        SK_WARN("dispatch", "%s: %s (API key %d); closing the connection", r->conn->peer, why,
                key);
        r->state = SK_REQ_CLOSE;
        sk_req_finish(r);
        return;
    }
    if (internal_api(key))
        r->conn->unordered = true; /* another node's connection (net.h) */
    if (key >= 0 && key < SK_METRICS_APIS)
        r->node->metrics.requests[key]++;
    /* The arena holds the decoded request (bounded by the frame: the codec
     * checks every count against the bytes left) and the response, which
     * grows with the node's own state (a Metadata answer for every topic);
     * the cap only stops runaway growth. */
    r->arena = sk_arena_new((size_t)r->frame_len * 8 + ((size_t)1 << 30));
    if (!r->arena) {
        sk_req_close(r, "out of memory");
        return;
    }
    if (key == 18 && ver > e->max) {
        /* The body is unknown, but the header must still parse: versions
         * from 3 on use header v2, as any future one will. */
        kc_reader hr;
        kc_reader_init(&hr, r->frame, r->frame_len);
        if (kc_read_req_header(&hr, &r->hdr, true) != 0) {
            SK_WARN("dispatch", "%s: ApiVersions v%d: malformed request header at byte %zu; "
                    "closing", r->conn->peer, ver, hr.err_at);
            r->state = SK_REQ_CLOSE;
            sk_req_finish(r);
            return;
        }
        api_versions_unsupported(r);
        return;
    }
    if (ver < e->impl_min || ver > e->max) {
        SK_WARN("dispatch", "%s: %s version %d is not served (%d-%d); closing the connection",
                r->conn->peer, e->api->name, ver, e->impl_min, e->max);
        r->state = SK_REQ_CLOSE;
        sk_req_finish(r);
        return;
    }
    r->flexible = ver >= e->flex;
    kc_reader rd;
    kc_reader_init(&rd, r->frame, r->frame_len);
    if (kc_read_req_header(&rd, &r->hdr, r->flexible) != 0) {
        SK_WARN("dispatch", "%s: %s v%d: malformed request header at byte %zu; closing",
                r->conn->peer, e->api->name, ver, rd.err_at);
        r->state = SK_REQ_CLOSE;
        sk_req_finish(r);
        return;
    }
    sk_conn_learn_zone(r->conn, &r->hdr.client_id);
    r->body = sk_arena_alloc(r->arena, e->api->req->size);
    r->resp = sk_req_new_resp(r);
    if (!r->body || !r->resp) {
        sk_req_close(r, "out of memory");
        return;
    }
    if (internal_api(key) && refuse_internal(r))
        return;
    int rc = kc_decode(e->api->req, ver, r->flexible, &rd, r->body, r->arena);
    if (rc != 0) {
        SK_WARN("dispatch", "%s: %s v%d: cannot decode the request (%s at byte %zu of %zu); "
                "closing the connection",
                r->conn->peer, e->api->name, ver, sk_err_name(rc), rd.err_at, r->frame_len);
        r->state = SK_REQ_CLOSE;
        sk_req_finish(r);
        return;
    }
    sk_node *n = r->node;
    if (e->shows_state && n->wal && n->shown_end > wal_durable_lsn(n->wal)) {
        if (wal_failed(n->wal)) { /* it will not get there */
            sk_req_close(r, "the WAL failed: what the request reads is not known durable");
            return;
        }
        r->pending++;
        sk_node_wait_durable(n, n->shown_end, shown_durable, r);
        return;
    }
    e->handler(r);
}

/* ---- items of a request ---- */

sk_item *sk_item_new(sk_req *r, int16_t *error_code, kc_str *error_message)
{
    sk_item *it = sk_arena_alloc(r->arena, sizeof *it);
    if (it) {
        it->r = r;
        it->error_code = error_code;
        it->error_message = error_message;
    }
    return it;
}

int16_t sk_change_error(int err, const char **msg)
{
    switch (err) {
    case SK_ERR_TIMEOUT:
        *msg = "the change was not confirmed in time; it may still take effect";
        return SK_KAFKA_REQUEST_TIMED_OUT;
    case SK_ERR_AGAIN:
    case SK_ERR_NOMEM:
        *msg = "the node is busy; try again";
        return SK_KAFKA_REQUEST_TIMED_OUT;
    case SK_ERR_IO:
        *msg = "the change could not be recorded durably";
        return SK_KAFKA_KAFKA_STORAGE_ERROR;
    case SK_ERR_CLOSED:
        *msg = "the node is shutting down";
        return SK_KAFKA_NOT_CONTROLLER;
    default:
        *msg = NULL;
        return sk_err_to_kafka(err);
    }
}

void sk_item_done(void *arg, int err)
{
    sk_item *it = arg;
    sk_req *r = it->r;
    if (err) {
        const char *msg = NULL;
        *it->error_code = sk_change_error(err, &msg);
        if (it->error_message && msg)
            *it->error_message = sk_req_str(r, msg);
    }
    if (--r->pending == 0) {
        if (r->on_done)
            r->on_done(r);
        else
            sk_req_respond(r);
    }
}
