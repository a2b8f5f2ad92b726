/*
 * DescribeQuorum, what kafka-metadata-quorum.sh describe reads.
 *
 * Kafka answers for its metadata log, __cluster_metadata-0. Skiff's
 * cluster metadata lives in etcd, or on a single node in its own log, and
 * the node that writes it stands for the quorum's leader:
 *  - a single node: itself, its WAL's owner epoch as leader epoch (it grows
 *    at every start) and the WAL's durable end as high watermark;
 *  - a cluster: the controller, the etcd revision at which it was elected as
 *    epoch (it grows at every election, clamped to int32) and the revision
 *    this node's model has reached as high watermark; the other live nodes
 *    are observers whose position this node does not know (-1).
 *
 * Thread: the event loop; answered at once from memory.
 */
#include <stdint.h>
#include <string.h>

#include "authz.h"
#include "cluster.h"
#include "cmodel.h"
#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "net.h"
#include "node.h"
#include "sk_err.h"
#include "sk_time.h"
#include "wal.h"

#define QUORUM_TOPIC "__cluster_metadata"

typedef kp_DescribeQuorumResponse_ReplicaState qstate;
typedef kp_DescribeQuorumResponse_PartitionData qpart;

/* Kafka answers only a request for exactly its metadata partition. */
static bool quorum_asked(const kp_DescribeQuorumRequest *req)
{
    if (req->topics.n != 1)
        return false;
    const kp_DescribeQuorumRequest_TopicData *t = &req->topics.v[0];
    return t->topic_name.len == (int32_t)strlen(QUORUM_TOPIC) &&
           memcmp(t->topic_name.p, QUORUM_TOPIC, strlen(QUORUM_TOPIC)) == 0 &&
           t->partitions.n == 1 && t->partitions.v[0].partition_index == 0;
}

/* Every partition asked gets `err` (Kafka's partition-level error answer). */
static void quorum_refuse(sk_req *r, int16_t err)
{
    kp_DescribeQuorumRequest *req = r->body;
    kp_DescribeQuorumResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_DescribeQuorumResponse_TopicData *ts =
        sk_req_array(r, &kp_DescribeQuorumResponse_TopicData_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    for (int32_t i = 0; i < nt; i++) {
        int32_t np = req->topics.v[i].partitions.n > 0 ? req->topics.v[i].partitions.n : 0;
        qpart *ps = sk_req_array(r, &kp_DescribeQuorumResponse_PartitionData_desc, np);
        if (np && !ps) {
            sk_req_close(r, "out of memory");
            return;
        }
        for (int32_t k = 0; k < np; k++) {
            ps[k].partition_index = req->topics.v[i].partitions.v[k].partition_index;
            ps[k].error_code = err;
        }
        ts[i].topic_name = req->topics.v[i].topic_name;
        ts[i].partitions.n = np;
        ts[i].partitions.v = ps;
    }
    resp->topics.n = nt;
    resp->topics.v = ts;
    sk_req_respond(r);
}

/* The leader's listener for this client, as the Nodes of v2. */
static bool quorum_nodes(sk_req *r, int32_t leader, kp_DescribeQuorumResponse *resp)
{
    sk_broker b;
    if (!sk_broker_addr(r, leader, &b))
        return true; /* not reachable on this listener: no endpoint to give */
    kp_DescribeQuorumResponse_Node *nd =
        sk_req_array(r, &kp_DescribeQuorumResponse_Node_desc, 1);
    kp_DescribeQuorumResponse_Listener *l =
        sk_req_array(r, &kp_DescribeQuorumResponse_Listener_desc, 1);
    if (!nd || !l)
        return false;
    l->name = sk_req_str(r, sk_conn_advertised(r->conn)->name);
    l->host = sk_req_str(r, b.host);
    l->port = (uint16_t)b.port;
    nd->node_id = leader;
    nd->listeners.n = 1;
    nd->listeners.v = l;
    resp->nodes.n = 1;
    resp->nodes.v = nd;
    return true;
}

/* The other live nodes of a cluster, as observers of unknown position. */
static bool quorum_observers(sk_req *r, int32_t leader, qpart *p)
{
    sk_node *n = r->node;
    size_t nn = 0;
    const cm_node *nodes = n->cluster ? cm_nodes(sk_cluster_model(n->cluster), &nn) : NULL;
    qstate *obs = sk_req_array(r, &kp_DescribeQuorumResponse_ReplicaState_desc, (int32_t)nn);
    if (nn && !obs)
        return false;
    int32_t k = 0;
    for (size_t i = 0; i < nn; i++) {
        if (nodes[i].id == leader)
            continue;
        obs[k].replica_id = nodes[i].id;
        obs[k].log_end_offset = -1;
        k++;
    }
    p->observers.n = k;
    p->observers.v = obs;
    return true;
}

static bool quorum_fill(sk_req *r, int32_t leader, int32_t epoch, int64_t hw)
{
    kp_DescribeQuorumResponse *resp = r->resp;
    kp_DescribeQuorumResponse_TopicData *t =
        sk_req_array(r, &kp_DescribeQuorumResponse_TopicData_desc, 1);
    qpart *p = sk_req_array(r, &kp_DescribeQuorumResponse_PartitionData_desc, 1);
    qstate *voter = sk_req_array(r, &kp_DescribeQuorumResponse_ReplicaState_desc, 1);
    if (!t || !p || !voter)
        return false;
    voter->replica_id = leader;
    voter->log_end_offset = hw;
    voter->last_caught_up_timestamp = sk_now_ms(); /* the leader is always caught up */
    p->partition_index = 0;
    p->leader_id = leader;
    p->leader_epoch = epoch;
    p->high_watermark = hw;
    p->current_voters.n = 1;
    p->current_voters.v = voter;
    if (!quorum_observers(r, leader, p))
        return false;
    t->topic_name = sk_req_str(r, QUORUM_TOPIC);
    t->partitions.n = 1;
    t->partitions.v = p;
    resp->topics.n = 1;
    resp->topics.v = t;
    return r->version < 2 || quorum_nodes(r, leader, resp);
}

void h_describe_quorum(sk_req *r)
{
    if (!sk_authorize_cluster(r, sk_authz_op(r))) {
        ((kp_DescribeQuorumResponse *)r->resp)->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    sk_node *n = r->node;
    if (!quorum_asked(r->body)) {
        quorum_refuse(r, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION);
        return;
    }
    int32_t leader = n->cfg->node_id;
    int64_t epoch = (int64_t)wal_owner_epoch(n->wal);
    int64_t hw = (int64_t)wal_durable_lsn(n->wal);
    if (n->cluster) {
        const cm_model *m = sk_cluster_model(n->cluster);
        const cm_ctrl *ctl = cm_controller_get(m);
        if (!ctl || ctl->node < 0) {
            /* Between two controllers, as Kafka between two leaders. */
            quorum_refuse(r, SK_KAFKA_NOT_LEADER_OR_FOLLOWER);
            return;
        }
        leader = ctl->node;
        epoch = ctl->mod_rev;
        hw = cm_revision(m);
    }
    if (!quorum_fill(r, leader, epoch > INT32_MAX ? INT32_MAX : (int32_t)epoch, hw)) {
        sk_req_close(r, "out of memory");
        return;
    }
    sk_req_respond(r);
}
