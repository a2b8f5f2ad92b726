/*
 * KIP-951 leader hints: when a Produce (v10+) or Fetch (v16+) partition is
 * answered NOT_LEADER_OR_FOLLOWER (or, for Fetch, FENCED_LEADER_EPOCH) in
 * a cluster, the answer names the node to use instead and the partition's
 * epoch (CurrentLeader), and carries that node's address (NodeEndpoints),
 * so that the client moves without a metadata round trip. The node named
 * is the one Metadata names to the same client (sk_leader_hint).
 */
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "node.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"

/* The nodes named in one response's hints, each once, with their address
 * for r's client. */
typedef struct hints {
    sk_broker *bs;
    int n;
} hints;

static bool hints_init(sk_req *r, hints *h, int cap)
{
    h->bs = sk_arena_alloc(r->arena, (size_t)(cap > 0 ? cap : 1) * sizeof *h->bs);
    h->n = 0;
    return h->bs != NULL;
}

/* Whether p gets a hint: a node to name, whose address the client can be
 * given (a leader without an endpoint would not be followed). */
static bool hints_add(sk_req *r, hints *h, const sk_part *p, int32_t *leader, int32_t *epoch)
{
    if (!sk_leader_hint(r, p, leader, epoch))
        return false;
    for (int i = 0; i < h->n; i++)
        if (h->bs[i].id == *leader)
            return true;
    if (!sk_broker_addr(r, *leader, &h->bs[h->n]))
        return false;
    h->n++;
    return true;
}

/* KIP-951 (v10+): a partition answered NOT_LEADER_OR_FOLLOWER names the
 * node to use instead, and the response carries that node's address. */
void sk_produce_hints(sk_req *r)
{
    kp_ProduceResponse *resp = r->resp;
    if (r->version < 10 || !r->node->cluster)
        return;
    int total = 0;
    for (int32_t i = 0; i < resp->responses.n; i++)
        total += resp->responses.v[i].partition_responses.n;
    hints h;
    if (!hints_init(r, &h, total))
        return;
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_ProduceResponse_TopicProduceResponse *tr = &resp->responses.v[i];
        sk_topic *t = sk_req_topic(r, 13, tr->name, &tr->topic_id);
        for (int32_t j = 0; j < tr->partition_responses.n; j++) {
            kp_ProduceResponse_PartitionProduceResponse *pr = &tr->partition_responses.v[j];
            int32_t leader, epoch;
            if (pr->error_code != SK_KAFKA_NOT_LEADER_OR_FOLLOWER ||
                !hints_add(r, &h, sk_part_get(t, pr->index), &leader, &epoch))
                continue;
            pr->current_leader.leader_id = leader;
            pr->current_leader.leader_epoch = epoch;
        }
    }
    kp_ProduceResponse_NodeEndpoint *eps =
        h.n > 0 ? sk_req_array(r, &kp_ProduceResponse_NodeEndpoint_desc, h.n) : NULL;
    resp->node_endpoints.n = eps ? h.n : 0;
    resp->node_endpoints.v = eps;
    for (int i = 0; eps && i < h.n; i++) {
        eps[i].node_id = h.bs[i].id;
        eps[i].host = sk_req_str(r, h.bs[i].host);
        eps[i].port = h.bs[i].port;
        eps[i].rack = sk_req_str(r, h.bs[i].rack);
    }
}

/* KIP-951 (v16+): a partition answered NOT_LEADER_OR_FOLLOWER or
 * FENCED_LEADER_EPOCH names the node to use and its epoch, and the response
 * carries that node's address. Built in the evaluation's arena. */
void sk_fetch_hints(sk_req *r)
{
    kp_FetchRequest *req = r->body;
    kp_FetchResponse *resp = r->resp;
    if (r->version < 16 || !r->node->cluster)
        return;
    int total = 0;
    for (int32_t i = 0; i < resp->responses.n; i++)
        total += resp->responses.v[i].partitions.n;
    hints h;
    if (!hints_init(r, &h, total))
        return;
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_FetchRequest_FetchTopic *ft = &req->topics.v[i];
        sk_topic *t = sk_req_topic(r, 13, ft->topic, &ft->topic_id);
        for (int32_t j = 0; j < resp->responses.v[i].partitions.n; j++) {
            kp_FetchResponse_PartitionData *pd = &resp->responses.v[i].partitions.v[j];
            int32_t leader, epoch;
            bool moved = pd->error_code == SK_KAFKA_NOT_LEADER_OR_FOLLOWER ||
                         pd->error_code == SK_KAFKA_FENCED_LEADER_EPOCH;
            if (!moved || !hints_add(r, &h, sk_part_get(t, pd->partition_index), &leader, &epoch))
                continue;
            pd->current_leader.leader_id = leader;
            pd->current_leader.leader_epoch = epoch;
        }
    }
    kp_FetchResponse_NodeEndpoint *eps =
        h.n > 0 ? sk_req_array(r, &kp_FetchResponse_NodeEndpoint_desc, h.n) : NULL;
    resp->node_endpoints.n = eps ? h.n : 0;
    resp->node_endpoints.v = eps;
    for (int i = 0; eps && i < h.n; i++) {
        eps[i].node_id = h.bs[i].id;
        eps[i].host = sk_req_str(r, h.bs[i].host);
        eps[i].port = h.bs[i].port;
        eps[i].rack = sk_req_str(r, h.bs[i].rack);
    }
}
