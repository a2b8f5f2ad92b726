/*
 * h_rpc: the handlers of Skiff's node-to-node RPCs (proto/rpc, keys from
 * KRPC_KEY_MIN), dispatched like Kafka's APIs through the one table of
 * dispatch.c, which never advertises them to clients.
 */
#include <stddef.h>

#include "cluster.h"
#include "dispatch.h"
#include "handlers.h"
#include "handoff.h"
#include "krpc.h"
#include "link.h"
#include "types.h"
#include "sk_err.h"

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
