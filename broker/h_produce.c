/*
 * Produce: validate each partition's batch, deduplicate idempotent retries,
 * assign offsets, append to the WAL, and answer once every append of the
 * request is durable (acks=1 and acks=all alike: the WAL is the replica).
 */
#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "acl.h"
#include "authz.h"
#include "append.h"
#include "cluster.h"
#include "config.h"
#include "dispatch.h"
#include "handlers.h"
#include "kbatch.h"
#include "kmsg.h"
#include "net.h"
#include "metrics.h"
#include "node.h"
#include "plog.h"
#include "proxied.h"
#include "pstate.h"
#include "sk_arena.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"
#include "tcoord.h"
#include "groups.h"
#include "txns.h"
#include "txpeer.h"
#include "xzone.h"

/* One partition's append in flight, waited for by its request. Allocated
 * outside the request's arena: a request answered at its deadline is gone
 * before its appends are durable. */
struct pappend {
    sk_req *r; /* NULL once nobody waits for the answer */
    sk_node *n;
    kp_ProduceResponse_PartitionProduceResponse *pr;
    kc_uuid id;
    int32_t part;
    int slot; /* index in the request's list */
};

/* The request's side: its deadline and what it still waits for. */
struct pctx {
    struct event *timer;
    struct pappend **waits;
    int nwaits, capwaits;
    /* Batches cached in place in the request frame (append.h): the last
     * of them, and their bytes. */
    sk_cbatch *last_in_place;
    size_t in_place;
};

static void pctx_cleanup(sk_req *r)
{
    struct pctx *c = r->hctx;
    if (!c)
        return;
    /* Whatever still waits must not point back at a freed request. */
    for (int i = 0; i < c->nwaits; i++)
        if (c->waits[i])
            c->waits[i]->r = NULL;
    if (c->timer)
        event_free(c->timer);
    free(c->waits);
    free(c);
    r->hctx = NULL;
}

static bool track(sk_req *r, struct pappend *pa)
{
    struct pctx *c = r->hctx;
    if (c->nwaits == c->capwaits) {
        int ncap = c->capwaits ? c->capwaits * 2 : 8;
        struct pappend **nw = realloc(c->waits, (size_t)ncap * sizeof *nw);
        if (!nw)
            return false;
        c->waits = nw;
        c->capwaits = ncap;
    }
    pa->slot = c->nwaits;
    c->waits[c->nwaits++] = pa;
    return true;
}

static void untrack(struct pappend *pa)
{
    if (pa->r) {
        struct pctx *c = pa->r->hctx;
        c->waits[pa->slot] = NULL;
    }
}

static void produce_respond(sk_req *r)
{
    sk_produce_hints(r);
    sk_req_respond(r);
}

static void produce_maybe_respond(sk_req *r)
{
    if (--r->pending > 0)
        return;
    sk_metrics_observe(&r->node->metrics.produce_latency, sk_mono_us() - r->start_us);
    produce_respond(r);
}

/* The producer's timeout passed with appends not yet durable (a slow or
 * unreachable volume): answer with a retriable error. The appends stay
 * queued and become durable in order; an idempotent retry of them is then
 * answered as a duplicate. */
static void deadline_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sk_req *r = arg;
    struct pctx *c = r->hctx;
    for (int i = 0; i < c->nwaits; i++) {
        struct pappend *pa = c->waits[i];
        if (!pa)
            continue;
        pa->pr->error_code = SK_KAFKA_REQUEST_TIMED_OUT;
        pa->pr->base_offset = -1;
        if (r->version >= 8)
            pa->pr->error_message = sk_req_str(r, "the write-ahead log did not become durable "
                                                  "within the request timeout");
        pa->r = NULL;
        c->waits[i] = NULL;
    }
    r->pending = 0;
    produce_respond(r);
}

/* A WAL failed under an append: the code the client gets. Abandoned or
 * fenced, this node lost the partition's log, and the client goes to the
 * new main; any other failure is the volume's. */
static void set_wal_error(struct pappend *pa, int err)
{
    bool lost = err == SK_ERR_CLOSED || err == SK_ERR_FENCED;
    pa->pr->error_code = lost ? SK_KAFKA_NOT_LEADER_OR_FOLLOWER : SK_KAFKA_KAFKA_STORAGE_ERROR;
    pa->pr->base_offset = -1;
    if (pa->r->version >= 8)
        pa->pr->error_message = sk_req_str(pa->r, lost ? "this node no longer serves the "
                                                         "partition's log"
                                                       : "the write-ahead log failed");
}

static void append_durable(void *arg, int err)
{
    struct pappend *pa = arg;
    untrack(pa);
    if (pa->r) {
        sk_part *p = sk_part_get(sk_topic_get_id(pa->n, &pa->id), pa->part);
        if (err != 0) {
            set_wal_error(pa, err);
        } else if (p && p->own != SK_OWN_NONE) {
            pa->pr->log_start_offset = p->log_start;
        }
        produce_maybe_respond(pa->r);
    }
    free(pa);
}

static void dup_durable(void *arg, int err)
{
    struct pappend *pa = arg;
    if (!pa->r) {
        free(pa);
        return;
    }
    untrack(pa);
    if (err != 0)
        set_wal_error(pa, err);
    produce_maybe_respond(pa->r);
    free(pa);
}

static void set_error(sk_req *r, kp_ProduceResponse_PartitionProduceResponse *pr, int16_t code,
                      const char *msg)
{
    pr->error_code = code;
    pr->base_offset = -1;
    if (r->version >= 8 && msg)
        pr->error_message = sk_req_str(r, msg);
}

static const char *validate_message(int code)
{
    switch (code) {
    case SK_KAFKA_CORRUPT_MESSAGE:
        return "the record batch is corrupt (CRC or lengths)";
    case SK_KAFKA_MESSAGE_TOO_LARGE:
        return "the record batch is larger than max.message.bytes";
    case SK_KAFKA_INVALID_RECORD:
        return "the records are invalid";
    case SK_KAFKA_UNSUPPORTED_COMPRESSION_TYPE:
        return "zstd needs Produce v7 or later";
    case SK_KAFKA_INVALID_TIMESTAMP:
        return "a record timestamp is outside the accepted range";
    default:
        return NULL;
    }
}

/* A retry of a batch already written: answer with its original offset,
 * once the original is durable. */
static bool answer_duplicate(sk_req *r, int16_t acks, kp_ProduceResponse_PartitionProduceResponse *pr,
                             const sk_pbatch *dup)
{
    sk_node *n = r->node;
    pr->base_offset = dup->base;
    pr->log_append_time_ms = dup->timestamp;
    if (acks == 0 || wal_durable_lsn(n->wal) >= dup->lsn_end)
        return false;
    struct pappend *pa = calloc(1, sizeof *pa);
    if (pa) {
        pa->r = r;
        pa->pr = pr;
    }
    if (!pa || !track(r, pa)) {
        free(pa);
        set_error(r, pr, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
        return false;
    }
    r->pending++;
    sk_node_wait_durable(n, dup->lsn_end, dup_durable, pa);
    return true;
}

/* The batch still lies in the request frame (not recompressed into the
 * arena): the cache may keep it there instead of copying it. */
static bool lendable(const sk_req *r, const kp_ProduceRequest_PartitionProduceData *pd)
{
    const uint8_t *b = pd->records.p;
    return r->frame_ref && b >= r->frame && b + pd->records.len <= r->frame + r->frame_len;
}

/* Batches cached in place keep the whole frame in memory: the cache counts
 * what of it they do not cover (headers, batches refused or proxied) on the
 * last of them, which leaves the cache after the others. */
static void charge_frame(sk_req *r)
{
    struct pctx *c = r->hctx;
    if (c && c->last_in_place && r->frame_len > c->in_place)
        sk_cache_charge(r->node, c->last_in_place, (uint32_t)(r->frame_len - c->in_place));
    if (c)
        c->last_in_place = NULL;
}

static bool append(sk_req *r, int16_t acks, sk_topic *t, sk_part *p,
                   kp_ProduceRequest_PartitionProduceData *pd, kb_header *h,
                   kp_ProduceResponse_PartitionProduceResponse *pr)
{
    /* acks=0: nobody waits for the record to be durable. */
    struct pappend *pa = NULL;
    if (acks != 0) {
        pa = calloc(1, sizeof *pa);
        if (!pa || !track(r, pa)) {
            free(pa);
            set_error(r, pr, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
            return false;
        }
        pa->r = r;
        pa->n = r->node;
        pa->pr = pr;
        pa->id = t->id;
        pa->part = p->index;
    }
    sk_append_res res;
    sk_ref *backing = lendable(r, pd) ? r->frame_ref : NULL;
    int rc = sk_append(r->node, p, pd->records.p, (uint32_t)pd->records.len, h, NULL, backing,
                       pa ? append_durable : NULL, pa, &res);
    if (rc != 0) {
        if (pa)
            untrack(pa);
        free(pa);
        set_error(r, pr,
                  rc == SK_ERR_AGAIN ? SK_KAFKA_REQUEST_TIMED_OUT : SK_KAFKA_KAFKA_STORAGE_ERROR,
                  "the write-ahead log cannot take the batch");
        return false;
    }
    if (backing && res.cached) {
        struct pctx *c = r->hctx;
        c->last_in_place = res.cached;
        c->in_place += (size_t)pd->records.len;
    }
    sk_xzone_produced(r->node, false, (size_t)pd->records.len);
    pr->base_offset = res.base;
    pr->log_append_time_ms = res.append_ts;
    if (acks == 0)
        return false;
    r->pending++;
    return true;
}

/* A topic whose compression.type names a codec stores its batches in that
 * codec, as Kafka does: a batch produced in another is rewritten (into the
 * request's arena) before anything else sees it. */
static bool recompress(sk_req *r, sk_topic *t, kp_ProduceRequest_PartitionProduceData *pd,
                       kp_ProduceResponse_PartitionProduceResponse *pr, kb_header *hp)
{
    if (!t->conf.recompress || (hp->attributes & KB_ATTR_CODEC_MASK) == t->conf.codec)
        return true;
    uint8_t *b = NULL;
    size_t len = 0;
    int rc = kb_recompress(pd->records.p, (size_t)pd->records.len, t->conf.codec,
                           t->conf.codec_level, 0, &b, &len);
    uint8_t *kept = rc == 0 ? sk_arena_alloc(r->arena, len) : NULL;
    if (kept)
        memcpy(kept, b, len);
    free(b);
    if (!kept) {
        set_error(r, pr, rc == SK_ERR_PARSE ? SK_KAFKA_INVALID_RECORD : SK_KAFKA_UNKNOWN_SERVER_ERROR,
                  "the batch could not be recompressed to the topic's compression.type");
        return false;
    }
    int32_t max = t->conf.max_message_bytes > 0 ? t->conf.max_message_bytes
                                                : KB_DEFAULT_MAX_BATCH_BYTES;
    if (len > (size_t)max) {
        set_error(r, pr, SK_KAFKA_MESSAGE_TOO_LARGE,
                  "the batch recompressed to the topic's compression.type is larger than "
                  "max.message.bytes");
        return false;
    }
    pd->records.p = kept;
    pd->records.len = (int32_t)len;
    return kb_parse_header(kept, len, hp) == 0;
}

/* A transactional batch: its request names the transactional id (else
 * Kafka's refusal), and the partition is in that id's open transaction
 * with the same producer (txns.h). */
static bool txn_member(sk_req *r, sk_topic *t, kp_ProduceRequest_PartitionProduceData *pd,
                       kp_ProduceResponse_PartitionProduceResponse *pr, const kb_header *hp)
{
    kp_ProduceRequest *req = r->body;
    if (req->transactional_id.len < 0) {
        set_error(r, pr, SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
                  "a transactional batch needs a transactional id");
        return false;
    }
    if (!sk_authz_txn(r, req->transactional_id, SK_ACL_OP_WRITE)) {
        set_error(r, pr, SK_KAFKA_TRANSACTIONAL_ID_AUTHORIZATION_FAILED, NULL);
        return false;
    }
    const char *id = sk_arena_strndup(r->arena, req->transactional_id.p ? req->transactional_id.p : "",
                                      (size_t)req->transactional_id.len);
    if (!id || !r->node->txns) {
        set_error(r, pr, SK_KAFKA_UNKNOWN_SERVER_ERROR, NULL);
        return false;
    }
    int err;
    if (sk_groups_coordinates(r, req->transactional_id)) {
        err = sk_tc_check_part(sk_txns_tc(r->node->txns), id, hp->producer_id, hp->producer_epoch,
                               t->name, pd->index);
    } else {
        /* Coordinated by another node: asked there (KIP-890 verification),
         * the batch retried meanwhile. */
        err = sk_txpeer_verify(r->node, id, hp->producer_id, hp->producer_epoch, t->name,
                               pd->index);
        if (err == SK_ERR_AGAIN) {
            set_error(r, pr, SK_KAFKA_NOT_ENOUGH_REPLICAS,
                      "verifying the partition with the transaction coordinator");
            return false;
        }
    }
    if (err)
        set_error(r, pr, (int16_t)err, "the partition is not in the producer's transaction");
    return err == 0;
}

/* Checks a partition's batch as Kafka does; fills h, or pr with the error. */
static bool validate(sk_req *r, sk_topic *t, kp_ProduceRequest_PartitionProduceData *pd,
                     kp_ProduceResponse_PartitionProduceResponse *pr, kb_header *hp)
{
    if (pd->records.len <= 0) {
        set_error(r, pr, SK_KAFKA_INVALID_RECORD, "a produce request must carry one batch");
        return false;
    }
    int64_t now = sk_now_ms();
    kb_limits lim = {0};
    lim.max_batch_bytes = t->conf.max_message_bytes;
    lim.produce_version = r->version;
    lim.now_ms = now;
    lim.ts_before_max_ms = t->conf.ts_before_max_ms;
    lim.ts_after_max_ms = t->conf.ts_after_max_ms;
    lim.log_append_time = t->conf.log_append_time;
    lim.validate_records = true;
    lim.compacted = (t->conf.policy & SK_POLICY_COMPACT) != 0;
    int32_t bad = -1;
    int code = kb_validate(pd->records.p, (size_t)pd->records.len, &lim, hp, &bad);
    if (code != 0) {
        set_error(r, pr, (int16_t)(code > 0 ? code : SK_KAFKA_CORRUPT_MESSAGE),
                  validate_message(code));
        if (r->version >= 8 && bad >= 0) {
            kp_ProduceResponse_BatchIndexAndErrorMessage *e =
                sk_req_array(r, &kp_ProduceResponse_BatchIndexAndErrorMessage_desc, 1);
            if (e) {
                e->batch_index = bad;
                pr->record_errors.n = 1;
                pr->record_errors.v = e;
            }
        }
        SK_DEBUG("produce", "%s: %s-%d: %s", r->conn->peer, t->name, pd->index,
                 sk_err_name(code));
        return false;
    }
    if ((hp->attributes & KB_ATTR_TRANSACTIONAL) && !txn_member(r, t, pd, pr, hp))
        return false;
    return recompress(r, t, pd, pr, hp);
}

static void proxied_done(void *arg, int16_t code, const char *msg, int64_t base,
                         int64_t append_ts, int64_t log_start)
{
    struct pappend *pa = arg;
    if (pa) {
        untrack(pa);
        if (pa->r) {
            pa->pr->error_code = code;
            pa->pr->base_offset = code ? -1 : base;
            pa->pr->log_append_time_ms = code ? -1 : append_ts;
            if (log_start >= 0)
                pa->pr->log_start_offset = log_start;
            if (code && msg && pa->r->version >= 8)
                pa->pr->error_message = sk_req_str(pa->r, msg);
            produce_maybe_respond(pa->r);
        }
        free(pa);
    }
}

static void proxied_silent(void *arg, int16_t code, const char *msg, int64_t base,
                           int64_t append_ts, int64_t log_start)
{
    (void)arg;
    (void)code;
    (void)msg;
    (void)base;
    (void)append_ts;
    (void)log_start;
}

/* A partition whose main is in another zone: the batch goes through this
 * node's payload log to the main (proxied.h). */
static bool proxy_partition(sk_req *r, int16_t acks, sk_topic *t, sk_part *p,
                            kp_ProduceRequest_PartitionProduceData *pd,
                            kp_ProduceResponse_PartitionProduceResponse *pr)
{
    sk_proxy *x = sk_cluster_proxy(r->node->cluster);
    if (sk_proxy_full(x)) {
        set_error(r, pr, SK_KAFKA_NOT_ENOUGH_REPLICAS,
                  "the proxy's payload log is full: mains' uploads are behind");
        return false;
    }
    kb_header h;
    if (!validate(r, t, pd, pr, &h))
        return false;
    const uint8_t *batch = pd->records.p;
    uint8_t *copy = NULL;
    if (t->conf.log_append_time) {
        /* Set here, once: the payload's CRC then covers it. */
        copy = malloc((size_t)pd->records.len);
        if (!copy) {
            set_error(r, pr, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
            return false;
        }
        memcpy(copy, batch, (size_t)pd->records.len);
        kb_set_log_append_time(copy, sk_now_ms());
        (void)!kb_parse_header(copy, (size_t)pd->records.len, &h);
        batch = copy;
    }
    kp_ProduceRequest *req = r->body;
    int64_t deadline = sk_mono_us() + (int64_t)(req->timeout_ms > 0 ? req->timeout_ms : 30000) * 1000;
    struct pappend *pa = NULL;
    if (acks != 0) {
        pa = calloc(1, sizeof *pa);
        if (!pa || !track(r, pa)) {
            free(pa);
            free(copy);
            set_error(r, pr, SK_KAFKA_REQUEST_TIMED_OUT, "out of memory");
            return false;
        }
        pa->r = r;
        pa->n = r->node;
        pa->pr = pr;
        pa->id = t->id;
        pa->part = p->index;
    }
    int16_t code = sk_proxy_produce(x, p, batch, (uint32_t)pd->records.len, &h, deadline,
                                    pa ? proxied_done : proxied_silent, pa);
    free(copy);
    if (code) {
        if (pa)
            untrack(pa);
        free(pa);
        set_error(r, pr, code, "the proxy cannot take the batch");
        return false;
    }
    sk_xzone_produced(r->node, true, (size_t)pd->records.len);
    if (acks == 0)
        return false;
    r->pending++;
    return true;
}

/* Appends one partition's batch; fills pr. Returns whether an asynchronous
 * completion is pending for it. */
static bool produce_partition(sk_req *r, int16_t acks, sk_topic *t,
                              kp_ProduceRequest_PartitionProduceData *pd,
                              kp_ProduceResponse_PartitionProduceResponse *pr)
{
    sk_node *n = r->node;
    pr->index = pd->index;
    sk_part *p = sk_part_get(t, pd->index);
    if (!p) {
        set_error(r, pr, SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION,
                  "This server does not host this topic-partition.");
        return false;
    }
    if (!sk_part_serving(p)) {
        if (sk_proxy_serves(n, r->conn->zone, p))
            return proxy_partition(r, acks, t, p, pd, pr);
        set_error(r, pr, SK_KAFKA_NOT_LEADER_OR_FOLLOWER,
                  "This node is not the partition's leader (main) now.");
        return false;
    }
    pr->log_start_offset = p->log_start;
    if (sk_node_wal_full(n)) {
        static int64_t last_log;
        if (sk_mono_ms() - last_log > 10000) {
            last_log = sk_mono_ms();
            SK_WARN("produce", "refusing produce: the WAL holds more than wal.max.retained.bytes "
                    "(uploads to the object store are behind)");
        }
        n->n_wal_full_refusals++;
        set_error(r, pr, SK_KAFKA_NOT_ENOUGH_REPLICAS,
                  "the WAL is full: uploads to the object store are behind");
        return false;
    }
    kb_header h;
    if (!validate(r, t, pd, pr, &h))
        return false;
    const sk_pbatch *dup;
    int rc = sk_append_check(p, &h, &dup);
    if (rc == SK_PSTATE_DUPLICATE)
        return answer_duplicate(r, acks, pr, dup);
    if (rc != SK_PSTATE_APPEND) {
        set_error(r, pr, (int16_t)rc,
                  rc == SK_KAFKA_INVALID_PRODUCER_EPOCH
                      ? "the producer epoch is older than the current one"
                      : "out of order sequence number");
        return false;
    }
    return append(r, acks, t, p, pd, &h, pr);
}

void h_produce(sk_req *r)
{
    kp_ProduceRequest *req = r->body;
    kp_ProduceResponse *resp = r->resp;
    int16_t acks = req->acks;
    resp->responses.n = req->topic_data.n > 0 ? req->topic_data.n : 0;
    resp->responses.v = sk_req_array(r, &kp_ProduceResponse_TopicProduceResponse_desc,
                                     resp->responses.n);
    if (resp->responses.n && !resp->responses.v) {
        sk_req_close(r, "out of memory");
        return;
    }
    bool bad_acks = acks != -1 && acks != 0 && acks != 1;
    struct pctx *ctx = calloc(1, sizeof *ctx);
    if (!ctx) {
        sk_req_close(r, "out of memory");
        return;
    }
    r->hctx = ctx;
    r->cleanup = pctx_cleanup;
    /* A client's connection that produces is paced as the WAL fills
     * (pace.h); other nodes' connections never are. */
    if (!r->conn->unordered && r->conn->from_node < 0)
        r->conn->producer = true;
    /* Hold the response until every partition is handled, even when the
     * WAL answers synchronously. */
    r->pending = 1;
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_ProduceRequest_TopicProduceData *td = &req->topic_data.v[i];
        kp_ProduceResponse_TopicProduceResponse *tr = &resp->responses.v[i];
        tr->name = td->name;
        tr->topic_id = td->topic_id;
        int32_t np = td->partition_data.n > 0 ? td->partition_data.n : 0;
        tr->partition_responses.n = np;
        tr->partition_responses.v =
            sk_req_array(r, &kp_ProduceResponse_PartitionProduceResponse_desc, np);
        if (np && !tr->partition_responses.v) {
            charge_frame(r);
            sk_req_close(r, "out of memory");
            return;
        }
        /* v13 names topics by id (the all-zero id too, which Java sends
         * for a topic it has no id for: UNKNOWN_TOPIC_ID makes it refresh). */
        sk_topic *t = sk_req_topic(r, 13, td->name, &td->topic_id);
        bool denied = !sk_authz_topic(r, t, td->name, sk_authz_op(r));
        for (int32_t j = 0; j < np; j++) {
            kp_ProduceRequest_PartitionProduceData *pd = &td->partition_data.v[j];
            kp_ProduceResponse_PartitionProduceResponse *pr = &tr->partition_responses.v[j];
            pr->index = pd->index;
            if (bad_acks) {
                set_error(r, pr, SK_KAFKA_INVALID_REQUIRED_ACKS, "acks must be -1, 0 or 1");
                continue;
            }
            if (denied) {
                set_error(r, pr, SK_KAFKA_TOPIC_AUTHORIZATION_FAILED, NULL);
                continue;
            }
            if (!t) {
                set_error(r, pr, sk_req_topic_unknown(r, 13),
                          r->version >= 13 ? "This server does not host this topic ID."
                                           : "This server does not host this topic-partition.");
                continue;
            }
            produce_partition(r, acks, t, pd, pr);
        }
    }
    charge_frame(r);
    if (acks == 0 && !bad_acks) {
        /* With acks=0 the producer learns of an error only from a closed
         * connection, as with Kafka. */
        for (int32_t i = 0; i < resp->responses.n; i++)
            for (int32_t j = 0; j < resp->responses.v[i].partition_responses.n; j++)
                if (resp->responses.v[i].partition_responses.v[j].error_code) {
                    sk_req_close(r, NULL);
                    return;
                }
        sk_req_silent(r);
        return;
    }
    if (r->pending > 1 && req->timeout_ms >= 0) {
        ctx->timer = event_new(r->node->base, -1, 0, deadline_cb, r);
        struct timeval tv = {req->timeout_ms / 1000, (req->timeout_ms % 1000) * 1000};
        if (ctx->timer)
            event_add(ctx->timer, &tv);
    }
    produce_maybe_respond(r);
}
