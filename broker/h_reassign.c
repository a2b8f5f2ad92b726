/*
 * AlterPartitionReassignments and ListPartitionReassignments, what
 * kafka-reassign-partitions.sh uses, and ElectLeaders
 * (kafka-leader-election.sh).
 *
 * Skiff keeps one copy of a partition (the shared volume is the replica), so
 * a reassignment names the node that should serve it: the first replica of
 * the list; the others are not used. A move is a handoff like a rebalance's
 * (docs/cluster.md, "Planned move") and takes seconds; it cannot be
 * cancelled once started. A single node can only be "moved" to itself.
 * With auto.leader.rebalance.enable the controller may later move a
 * partition again to even the load.
 *
 * ElectLeaders: a partition's preferred node is where it belongs
 * (cm_part.pref: where it was placed, reassigned or rebalanced to last). A
 * preferred election moves a partition that a failover or a node's drain
 * left elsewhere back there, as a reassignment does; one already there, or
 * on a single node, needs none (ELECTION_NOT_NEEDED). An unclean election is
 * never needed while the main is live: one node serves a partition, and
 * between two mains the controller is already choosing the next.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "authz.h"
#include "cluster.h"
#include "cmodel.h"
#include "config.h"
#include "controller.h"
#include "dispatch.h"
#include "handlers.h"
#include "kmsg.h"
#include "node.h"
#include "plog.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_map.h"

typedef kp_AlterPartitionReassignmentsResponse_ReassignablePartitionResponse presp;

static void set_err(sk_req *r, presp *o, int16_t code, const char *msg)
{
    o->error_code = code;
    o->error_message = msg ? sk_req_str(r, msg) : (kc_str){NULL, -1};
}

static void moved(void *arg, int16_t err)
{
    sk_item *it = arg;
    if (err)
        *it->error_code = err;
    sk_item_done(it, 0);
}

/* One partition of the request. */
typedef kp_AlterPartitionReassignmentsRequest_ReassignablePartition preq;

static void alter_one(sk_req *r, sk_topic *t, const preq *rp, presp *o)
{
    sk_node *n = r->node;
    o->partition_index = rp->partition_index;
    o->error_message = (kc_str){NULL, -1};
    sk_part *p = sk_part_get(t, rp->partition_index);
    if (!p) {
        set_err(r, o, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION, "The partition does not exist.");
        return;
    }
    if (rp->replicas.n < 0) {
        const cm_part *cp = n->cluster ? sk_cluster_part_state(n->cluster, p) : NULL;
        bool moving = cp && cp->state != CM_PART_ACTIVE && cp->state != CM_PART_NEW;
        set_err(r, o, moving ? SK_KAFKA_INVALID_REQUEST : SK_KAFKA_NO_REASSIGNMENT_IN_PROGRESS,
                moving ? "A move cannot be cancelled: it completes within seconds." : NULL);
        return;
    }
    if (rp->replicas.n == 0) {
        set_err(r, o, SK_KAFKA_INVALID_REPLICA_ASSIGNMENT, "The replica list is empty.");
        return;
    }
    int32_t target = rp->replicas.v[0];
    if (!n->cluster) {
        if (target != n->cfg->node_id)
            set_err(r, o, SK_KAFKA_INVALID_REPLICA_ASSIGNMENT,
                    "A single node serves every partition itself.");
        return;
    }
    sk_item *it = sk_item_new(r, &o->error_code, &o->error_message);
    if (!it) {
        set_err(r, o, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return;
    }
    r->pending++;
    int16_t rc = sk_controller_move(n->cluster, &t->id, p->index, target, moved, it);
    if (rc) {
        r->pending--;
        set_err(r, o, rc,
                rc == SK_KAFKA_INVALID_REPLICA_ASSIGNMENT
                    ? "The first replica must be a live node that is not shutting down."
                    : NULL);
    }
}

void h_alter_partition_reassignments(sk_req *r)
{
    if (!sk_authorize_cluster(r, sk_authz_op(r))) {
        ((kp_AlterPartitionReassignmentsResponse *)r->resp)->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    kp_AlterPartitionReassignmentsRequest *req = r->body;
    kp_AlterPartitionReassignmentsResponse *resp = r->resp;
    int32_t nt = req->topics.n > 0 ? req->topics.n : 0;
    kp_AlterPartitionReassignmentsResponse_ReassignableTopicResponse *ts = sk_req_array(
        r, &kp_AlterPartitionReassignmentsResponse_ReassignableTopicResponse_desc, nt);
    if (nt && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    resp->responses.n = nt;
    resp->responses.v = ts;
    resp->allow_replication_factor_change = req->allow_replication_factor_change;
    r->pending = 1;
    for (int32_t i = 0; i < nt; i++) {
        kp_AlterPartitionReassignmentsRequest_ReassignableTopic *rt = &req->topics.v[i];
        int32_t np = rt->partitions.n > 0 ? rt->partitions.n : 0;
        ts[i].name = rt->name;
        ts[i].partitions.n = np;
        ts[i].partitions.v = sk_req_array(
            r, &kp_AlterPartitionReassignmentsResponse_ReassignablePartitionResponse_desc, np);
        if (np && !ts[i].partitions.v) {
            sk_req_close(r, "out of memory");
            return;
        }
        sk_topic *t = rt->name.len > 0 ? sk_topic_get(r->node, rt->name.p, (size_t)rt->name.len)
                                       : NULL;
        for (int32_t j = 0; j < np; j++) {
            if (!t) {
                ts[i].partitions.v[j].partition_index = rt->partitions.v[j].partition_index;
                set_err(r, &ts[i].partitions.v[j], SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION,
                        "The topic does not exist.");
                continue;
            }
            alter_one(r, t, &rt->partitions.v[j], &ts[i].partitions.v[j]);
        }
    }
    if (--r->pending == 0)
        sk_req_respond(r);
}

/* ---- ListPartitionReassignments ---- */

typedef kp_ListPartitionReassignmentsResponse_OngoingPartitionReassignment ongoing;

static bool wanted(const kp_ListPartitionReassignmentsRequest *req, const char *topic,
                   int32_t part)
{
    if (req->topics.n < 0)
        return true;
    size_t tl = strlen(topic);
    for (int32_t i = 0; i < req->topics.n; i++) {
        const kp_ListPartitionReassignmentsRequest_ListPartitionReassignmentsTopics *t =
            &req->topics.v[i];
        if (t->name.len < 0 || (size_t)t->name.len != tl || memcmp(t->name.p, topic, tl) != 0)
            continue;
        for (int32_t k = 0; k < t->partition_indexes.n; k++)
            if (t->partition_indexes.v[k] == part)
                return true;
    }
    return false;
}

/* Two node ids in the request's arena. */
static int32_t *pair(sk_req *r, int32_t a, int32_t b)
{
    int32_t *v = sk_arena_alloc(r->arena, 2 * sizeof *v);
    if (v) {
        v[0] = a;
        v[1] = b;
    }
    return v;
}

/* A partition moving from the node of its source log to its target. */
static bool fill_ongoing(sk_req *r, cm_model *m, const cm_part *cp, ongoing *o)
{
    const cm_log *src = cm_log_get(m, cp->src_log);
    int32_t from = src ? src->node : -1;
    o->partition_index = cp->index;
    int32_t *rep = pair(r, from, cp->node);
    int32_t *add = pair(r, cp->node, -1);
    int32_t *rem = pair(r, from, -1);
    if (!rep || !add || !rem)
        return false;
    bool known = from >= 0 && from != cp->node;
    o->replicas.n = known ? 2 : 1;
    o->replicas.v = known ? rep : rep + 1;
    o->adding_replicas.n = 1;
    o->adding_replicas.v = add;
    o->removing_replicas.n = known ? 1 : 0;
    o->removing_replicas.v = rem;
    return true;
}

typedef kp_ListPartitionReassignmentsResponse_OngoingTopicReassignment otopic;

static int collect_topic(sk_req *r, const kp_ListPartitionReassignmentsRequest *req, cm_model *m,
                         const cm_topic *mt, otopic *out)
{
    ongoing *ps = sk_req_array(
        r, &kp_ListPartitionReassignmentsResponse_OngoingPartitionReassignment_desc,
        mt->partitions);
    if (mt->partitions && !ps)
        return -1;
    int32_t k = 0;
    for (int32_t i = 0; i < mt->partitions; i++) {
        const cm_part *cp = cm_part_get(m, &mt->id, i);
        if (!cp || (cp->state != CM_PART_MOVING && cp->state != CM_PART_HANDOFF) ||
            !wanted(req, mt->name, i))
            continue;
        if (!fill_ongoing(r, m, cp, &ps[k]))
            return -1;
        k++;
    }
    out->name = sk_req_str(r, mt->name);
    out->partitions.n = k;
    out->partitions.v = ps;
    return k;
}

void h_list_partition_reassignments(sk_req *r)
{
    if (!sk_authorize_cluster(r, sk_authz_op(r))) {
        ((kp_ListPartitionReassignmentsResponse *)r->resp)->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    kp_ListPartitionReassignmentsRequest *req = r->body;
    kp_ListPartitionReassignmentsResponse *resp = r->resp;
    sk_node *n = r->node;
    resp->topics.n = 0;
    if (!n->cluster) {
        sk_req_respond(r); /* a single node never moves anything */
        return;
    }
    cm_model *m = sk_cluster_model(n->cluster);
    size_t it = 0, count = 0;
    while (cm_topic_next(m, &it))
        count++;
    otopic *ts = sk_req_array(
        r, &kp_ListPartitionReassignmentsResponse_OngoingTopicReassignment_desc, (int32_t)count);
    if (count && !ts) {
        sk_req_close(r, "out of memory");
        return;
    }
    it = 0;
    int32_t k = 0;
    const cm_topic *mt;
    while ((mt = cm_topic_next(m, &it)) != NULL && (size_t)k < count) {
        int got = collect_topic(r, req, m, mt, &ts[k]);
        if (got < 0) {
            sk_req_close(r, "out of memory");
            return;
        }
        if (got > 0)
            k++;
    }
    resp->topics.n = k;
    resp->topics.v = ts;
    sk_req_respond(r);
}

/* ---- ElectLeaders ---- */

/* Kafka's election types (ElectLeaders v1+; v0 is always preferred). */
enum { ELECT_PREFERRED = 0, ELECT_UNCLEAN = 1 };

typedef kp_ElectLeadersResponse_PartitionResult eresult;

static void elected(void *arg, int16_t err)
{
    sk_item *it = arg;
    if (err) {
        *it->error_code = SK_KAFKA_PREFERRED_LEADER_NOT_AVAILABLE;
        *it->error_message = sk_req_str(it->r, "The move to the preferred node failed; try again.");
    }
    sk_item_done(it, 0);
}

/* A preferred election in a cluster: NULL when started or not needed (the
 * code set), else why the preferred node cannot take the partition now. */
static const char *elect_preferred(sk_req *r, const sk_part *p, eresult *o)
{
    sk_cluster *c = r->node->cluster;
    const cm_part *cp = sk_cluster_part_state(c, p);
    int32_t main = sk_part_main_live(r, p);
    int32_t pref = cp && cp->has_pref ? cp->pref : main;
    if (main >= 0 && main == pref) {
        o->error_code = SK_KAFKA_ELECTION_NOT_NEEDED;
        return NULL;
    }
    if (!cp || main < 0 || cp->state != CM_PART_ACTIVE)
        return "The partition is moving between nodes; try again once it is served.";
    const cm_node *nd = cm_node_get(sk_cluster_model(c), pref);
    if (!nd || nd->draining)
        return "The partition's preferred node is not live.";
    sk_item *it = sk_item_new(r, &o->error_code, &o->error_message);
    if (!it)
        return "out of memory";
    r->pending++;
    if (sk_controller_move(c, &p->topic->id, p->index, pref, elected, it) != 0) {
        r->pending--;
        return "The partition cannot move now; try again.";
    }
    o->error_message = (kc_str){NULL, -1};
    return NULL;
}

/* The outcome for one partition, as Kafka's controller decides it. */
static void elect_one(sk_req *r, const sk_topic *t, int32_t part, int8_t type, eresult *o)
{
    const sk_part *p = sk_part_get(t, part);
    const char *msg = NULL;
    o->partition_id = part;
    o->error_code = 0;
    if (!p) {
        o->error_code = SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
        msg = t ? "No such partition." : "No such topic.";
    } else if (type == ELECT_PREFERRED && r->node->cluster) {
        msg = elect_preferred(r, p, o);
        if (msg)
            o->error_code = SK_KAFKA_PREFERRED_LEADER_NOT_AVAILABLE;
    } else if (sk_part_main_live(r, p) < 0) {
        o->error_code = type == ELECT_UNCLEAN ? SK_KAFKA_ELIGIBLE_LEADERS_NOT_AVAILABLE
                                              : SK_KAFKA_PREFERRED_LEADER_NOT_AVAILABLE;
        msg = "The partition is moving between nodes; it has a leader again within seconds.";
    } else {
        o->error_code = SK_KAFKA_ELECTION_NOT_NEEDED;
    }
    if (o->error_code == SK_KAFKA_ELECTION_NOT_NEEDED)
        msg = "Leader election not needed for topic partition.";
    if (msg)
        o->error_message = sk_req_str(r, msg);
}

/* Every partition of every topic: Kafka lists only those an election
 * concerned, with each topic (possibly with no partitions). */
static int elect_all(sk_req *r, int8_t type, kp_ElectLeadersResponse *resp)
{
    sk_node *n = r->node;
    size_t count = sk_map_count(n->topics_by_name);
    kp_ElectLeadersResponse_ReplicaElectionResult *ts = sk_req_array(
        r, &kp_ElectLeadersResponse_ReplicaElectionResult_desc, (int32_t)count);
    if (count && !ts)
        return -1;
    size_t it = 0, k = 0;
    void *v;
    while (sk_map_next(n->topics_by_name, &it, NULL, NULL, &v) && k < count) {
        const sk_topic *t = v;
        eresult *ps = sk_req_array(r, &kp_ElectLeadersResponse_PartitionResult_desc, t->nparts);
        if (t->nparts && !ps)
            return -1;
        int32_t m = 0;
        for (int32_t i = 0; i < t->nparts; i++) {
            elect_one(r, t, i, type, &ps[m]);
            if (ps[m].error_code != SK_KAFKA_ELECTION_NOT_NEEDED)
                m++;
        }
        ts[k].topic = sk_req_str(r, t->name);
        ts[k].partition_result.n = m;
        ts[k].partition_result.v = ps;
        k++;
    }
    resp->replica_election_results.n = (int32_t)k;
    resp->replica_election_results.v = ts;
    return 0;
}

static int elect_listed(sk_req *r, int8_t type, kp_ElectLeadersResponse *resp)
{
    kp_ElectLeadersRequest *req = r->body;
    int32_t nt = req->topic_partitions.n;
    kp_ElectLeadersResponse_ReplicaElectionResult *ts =
        sk_req_array(r, &kp_ElectLeadersResponse_ReplicaElectionResult_desc, nt);
    if (nt && !ts)
        return -1;
    for (int32_t i = 0; i < nt; i++) {
        const kp_ElectLeadersRequest_TopicPartitions *rt = &req->topic_partitions.v[i];
        int32_t np = rt->partitions.n > 0 ? rt->partitions.n : 0;
        eresult *ps = sk_req_array(r, &kp_ElectLeadersResponse_PartitionResult_desc, np);
        if (np && !ps)
            return -1;
        const sk_topic *t = rt->topic.len > 0
                                ? sk_topic_get(r->node, rt->topic.p, (size_t)rt->topic.len)
                                : NULL;
        for (int32_t k = 0; k < np; k++)
            elect_one(r, t, rt->partitions.v[k], type, &ps[k]);
        ts[i].topic = rt->topic;
        ts[i].partition_result.n = np;
        ts[i].partition_result.v = ps;
    }
    resp->replica_election_results.n = nt;
    resp->replica_election_results.v = ts;
    return 0;
}

void h_elect_leaders(sk_req *r)
{
    if (!sk_authorize_cluster(r, sk_authz_op(r))) {
        ((kp_ElectLeadersResponse *)r->resp)->error_code = SK_KAFKA_CLUSTER_AUTHORIZATION_FAILED;
        sk_req_respond(r);
        return;
    }
    kp_ElectLeadersRequest *req = r->body;
    kp_ElectLeadersResponse *resp = r->resp;
    int8_t type = r->version >= 1 ? req->election_type : ELECT_PREFERRED;
    if (type != ELECT_PREFERRED && type != ELECT_UNCLEAN) {
        resp->error_code = SK_KAFKA_INVALID_REQUEST;
        sk_req_respond(r);
        return;
    }
    r->pending = 1; /* moves to preferred nodes answer later */
    int rc = req->topic_partitions.n < 0 ? elect_all(r, type, resp)
                                         : elect_listed(r, type, resp);
    if (rc != 0) {
        sk_req_close(r, "out of memory");
        return;
    }
    if (--r->pending == 0)
        sk_req_respond(r);
}
