/*
 * h_rpc: the handlers of Skiff's node-to-node RPCs (proto/rpc, keys from
 * KRPC_KEY_MIN), dispatched like Kafka's APIs through the one table of
 * dispatch.c, which never advertises them to clients.
 */
#include <event2/buffer.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "handoff.h"
#include "krpc.h"
#include "link.h"
#include "metrics.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "types.h"
#include "xzone.h"

/* HandoffReady: a source node says partitions wait for this node. Each is
 * a hint handed to the handoff module, whose answer (the adoption still
 * follows etcd) goes back per partition, in the request's order. */
void h_handoff_ready(sk_req *r)
{
    const kr_HandoffReadyRequest *req = r->body;
    kr_HandoffReadyResponse *resp = r->resp;
    int32_t n = req->partitions.n > 0 ? req->partitions.n : 0;
    kr_HandoffReadyResponse_Partition *out = NULL;
    if (n > 0) {
        out = sk_req_array(r, &kr_HandoffReadyResponse_Partition_desc, n);
        if (!out) {
            sk_req_close(r, "out of memory");
            return;
        }
    }
    for (int32_t i = 0; i < n; i++) {
        const kr_HandoffReadyRequest_Partition *p = &req->partitions.v[i];
        out[i].topic_id = p->topic_id;
        out[i].partition = p->partition;
        /* A wire code whatever the module returns. */
        out[i].error_code = sk_err_to_kafka(sk_handoff_ready(r->node, &p->topic_id, p->partition,
                                                             p->epoch, p->source_log,
                                                             p->source_lsn));
    }
    resp->partitions.n = n;
    resp->partitions.v = out;
    sk_req_respond(r);
}

/* Confirm: a proxy names batches of this node's partitions in its payload
 * log (docs/zones.md); the links module answers once they are linked. */
void h_confirm(sk_req *r)
{
    if (!r->node->cluster) {
        kr_ConfirmResponse *resp = r->resp;
        resp->error_code = SK_KAFKA_NOT_LEADER_OR_FOLLOWER;
        sk_req_respond(r);
        return;
    }
    sk_links_confirm(sk_cluster_links(r->node->cluster), r);
}

/* The buffer's text, moved into the request's arena. */
static int take_text(sk_req *r, struct evbuffer *b, kc_str *out)
{
    size_t len = evbuffer_get_length(b);
    char *p = sk_arena_alloc(r->arena, len + 1);
    if (!p || len > INT32_MAX)
        return SK_ERR_NOMEM;
    evbuffer_remove(b, p, len);
    *out = (kc_str){p, (int32_t)len};
    return 0;
}

/* NodeStatus: what this node's metrics listener would say, for `skiffd status`. */
void h_node_status(sk_req *r)
{
    const kr_NodeStatusRequest *req = r->body;
    kr_NodeStatusResponse *resp = r->resp;
    const sk_config *cfg = r->node->cfg;
    resp->node_id = cfg->node_id;
    resp->rack = (kc_str){cfg->broker_rack, (int32_t)strlen(cfg->broker_rack)};
    struct evbuffer *b = evbuffer_new();
    int rc = b ? 0 : SK_ERR_NOMEM;
    if (rc == 0) {
        sk_metrics_render(r->node, b);
        rc = take_text(r, b, &resp->metrics);
    }
    if (rc == 0 && req->include_zone_report) {
        sk_xzone_report(r->node, b);
        rc = take_text(r, b, &resp->zone_report);
    }
    if (b)
        evbuffer_free(b);
    if (rc != 0) {
        sk_req_close(r, "out of memory");
        return;
    }
    sk_req_respond(r);
}
