#include "fetch_session.h"

#include <string.h>
#include <sys/random.h>

#include "config.h"
#include "fsession.h"
#include "kmsg.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

sk_fs_cache *sk_fetch_sessions(sk_node *n)
{
    if (!n->fsessions) {
        uint64_t seed = 0;
        if (getrandom(&seed, sizeof seed, GRND_NONBLOCK) != (ssize_t)sizeof seed)
            seed = (uint64_t)sk_mono_us() ^ ((uint64_t)sk_now_ms() << 20);
        n->fsessions = sk_fs_new(n->cfg->max_incremental_fetch_session_cache_slots,
                                 SK_FS_EVICTION_MS, seed);
    }
    return n->fsessions;
}

static bool uses_ids(const sk_req *r)
{
    return r->version >= 13;
}

static sk_fs_key topic_key(const sk_req *r, kc_str name, kc_uuid id, int32_t part)
{
    sk_fs_key k;
    memset(&k, 0, sizeof k);
    if (uses_ids(r))
        k.topic_id = id;
    else
        k.topic = name;
    k.partition = part;
    return k;
}

static sk_fs_params params_of(const kp_FetchRequest_FetchPartition *fp)
{
    return (sk_fs_params){fp->fetch_offset, fp->log_start_offset, fp->partition_max_bytes,
                          fp->current_leader_epoch, fp->last_fetched_epoch};
}

/* ---- parse stage ---- */

static int apply_changes(sk_req *r, sk_fs_session *s)
{
    kp_FetchRequest *req = r->body;
    for (int32_t i = 0; i < req->topics.n; i++) {
        kp_FetchRequest_FetchTopic *ft = &req->topics.v[i];
        for (int32_t j = 0; j < ft->partitions.n; j++) {
            kp_FetchRequest_FetchPartition *fp = &ft->partitions.v[j];
            sk_fs_key k = topic_key(r, ft->topic, ft->topic_id, fp->partition);
            sk_fs_params p = params_of(fp);
            if (sk_fs_put(s, &k, &p, -1, -1) != 0)
                return SK_ERR_NOMEM;
        }
    }
    for (int32_t i = 0; i < req->forgotten_topics_data.n; i++) {
        kp_FetchRequest_ForgottenTopic *ft = &req->forgotten_topics_data.v[i];
        for (int32_t j = 0; j < ft->partitions.n; j++) {
            sk_fs_key k = topic_key(r, ft->topic, ft->topic_id, ft->partitions.v[j]);
            sk_fs_forget(s, &k);
        }
    }
    return 0;
}

static bool same_topic(const sk_req *r, const sk_fs_part *a, const sk_fs_part *b)
{
    if (uses_ids(r))
        return memcmp(a->key.topic_id.b, b->key.topic_id.b, 16) == 0;
    return a->key.topic.len == b->key.topic.len &&
           (a->key.topic.len <= 0 ||
            memcmp(a->key.topic.p, b->key.topic.p, (size_t)a->key.topic.len) == 0);
}

static kp_FetchRequest_FetchTopic *start_topic(sk_req *r, sk_arena *keep,
                                               kp_FetchRequest_FetchTopic *ft, sk_fs_part *p)
{
    int32_t np = 0;
    for (sk_fs_part *q = p; q && same_topic(r, p, q); q = q->next)
        np++;
    ft->topic_id = p->key.topic_id;
    ft->topic = (kc_str){"", p->key.topic.len}; /* never the cache's own copy */
    if (p->key.topic.len > 0) {
        char *name = sk_arena_alloc(keep, (size_t)p->key.topic.len);
        if (!name)
            return NULL;
        memcpy(name, p->key.topic.p, (size_t)p->key.topic.len);
        ft->topic.p = name;
    }
    ft->partitions.n = 0;
    ft->partitions.v = kc_new_array(keep, &kp_FetchRequest_FetchPartition_desc, np);
    return ft->partitions.v ? ft : NULL;
}

/* The request now asks for every partition of the session, in its order:
 * consecutive partitions of one topic share a topic entry, as in Kafka's
 * answers. Copies go to `keep`: the session may be evicted meanwhile. */
static int rewrite(sk_req *r, sk_arena *keep, sk_fs_session *s)
{
    kp_FetchRequest *req = r->body;
    int32_t nt = 0;
    for (sk_fs_part *p = sk_fs_first(s); p; p = p->next)
        if (!p->prev || !same_topic(r, p->prev, p))
            nt++;
    kp_FetchRequest_FetchTopic *ts = kc_new_array(keep, &kp_FetchRequest_FetchTopic_desc, nt);
    if (!ts)
        return SK_ERR_NOMEM;
    kp_FetchRequest_FetchTopic *ft = NULL;
    for (sk_fs_part *p = sk_fs_first(s); p; p = p->next) {
        if (!p->prev || !same_topic(r, p->prev, p)) {
            ft = start_topic(r, keep, ft ? ft + 1 : ts, p);
            if (!ft)
                return SK_ERR_NOMEM;
        }
        kp_FetchRequest_FetchPartition *fp = &ft->partitions.v[ft->partitions.n++];
        fp->partition = p->key.partition;
        fp->fetch_offset = p->req.fetch_offset;
        fp->log_start_offset = p->req.log_start_offset;
        fp->partition_max_bytes = p->req.max_bytes;
        fp->current_leader_epoch = p->req.leader_epoch;
        fp->last_fetched_epoch = p->req.last_fetched_epoch;
    }
    req->topics.n = nt;
    req->topics.v = ts;
    req->forgotten_topics_data.n = 0;
    return 0;
}

int sk_fetch_session_open(sk_req *r, sk_arena *keep, sk_fetch_session *fs)
{
    kp_FetchRequest *req = r->body;
    *fs = (sk_fetch_session){SK_FETCH_SESSIONLESS, 0, 0};
    if (r->version < 7)
        return 0;
    sk_fs_cache *c = sk_fetch_sessions(r->node);
    int32_t id = req->session_id, epoch = req->session_epoch;
    if (epoch == 0 || epoch == -1) {
        /* A full request ends the session it names; epoch 0 asks for a new
         * one, created from the answer. */
        if (c && id != 0)
            sk_fs_remove(c, id);
        fs->kind = epoch == 0 && c ? SK_FETCH_FULL : SK_FETCH_SESSIONLESS;
        return 0;
    }
    sk_fs_session *s = NULL;
    int rc = c ? sk_fs_get(c, id, epoch, uses_ids(r), &s)
               : SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND;
    if (rc != 0)
        return rc;
    if (apply_changes(r, s) != 0) {
        /* Past the caps: the client starts over with a full fetch. */
        sk_fs_remove(c, id);
        return SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND;
    }
    if (!sk_fs_commit(c, s, sk_mono_ms()))
        return 0; /* every partition forgotten: served as sent, sessionless */
    if (rewrite(r, keep, s) != 0)
        return SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND;
    *fs = (sk_fetch_session){SK_FETCH_INCREMENTAL, id, sk_fs_epoch(s)};
    return 0;
}

/* ---- build stage ---- */

static int32_t create_session(sk_req *r)
{
    kp_FetchRequest *req = r->body;
    kp_FetchResponse *resp = r->resp;
    sk_fs_cache *c = r->node->fsessions;
    int32_t size = 0;
    for (int32_t i = 0; i < resp->responses.n; i++)
        size += resp->responses.v[i].partitions.n;
    sk_fs_session *s = sk_fs_create(c, sk_mono_ms(), req->replica_id >= 0, uses_ids(r), size);
    if (!s)
        return 0;
    /* The skeleton mirrors the request, entry for entry. */
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_FetchRequest_FetchTopic *ft = &req->topics.v[i];
        kp_FetchResponse_FetchableTopicResponse *tr = &resp->responses.v[i];
        for (int32_t j = 0; j < tr->partitions.n; j++) {
            kp_FetchResponse_PartitionData *pd = &tr->partitions.v[j];
            sk_fs_key k = topic_key(r, ft->topic, ft->topic_id, ft->partitions.v[j].partition);
            sk_fs_params p = params_of(&ft->partitions.v[j]);
            if (sk_fs_put(s, &k, &p, pd->high_watermark, pd->log_start_offset) != 0) {
                sk_fs_remove(c, sk_fs_id(s));
                return 0;
            }
        }
    }
    return sk_fs_id(s);
}

static bool has_news(sk_req *r, sk_fs_session *s, const kp_FetchResponse_FetchableTopicResponse *tr,
                     const kp_FetchResponse_PartitionData *pd)
{
    sk_fs_key k = topic_key(r, tr->topic, tr->topic_id, pd->partition_index);
    sk_fs_part *p = sk_fs_lookup(s, &k);
    if (!p)
        return true;
    sk_fs_answer a = {pd->high_watermark, pd->log_start_offset, pd->error_code,
                      pd->records.len > 0,
                      pd->preferred_read_replica >= 0 || pd->diverging_epoch.epoch >= 0};
    return sk_fs_answered(s, p, &a);
}

/* Keeps the partitions with news, and the topics left with any. */
static void prune(sk_req *r, sk_fs_session *s)
{
    kp_FetchResponse *resp = r->resp;
    int32_t nt = 0;
    for (int32_t i = 0; i < resp->responses.n; i++) {
        kp_FetchResponse_FetchableTopicResponse *tr = &resp->responses.v[i];
        int32_t np = 0;
        for (int32_t j = 0; j < tr->partitions.n; j++)
            if (has_news(r, s, tr, &tr->partitions.v[j]))
                tr->partitions.v[np++] = tr->partitions.v[j];
        tr->partitions.n = np;
        if (np > 0)
            resp->responses.v[nt++] = *tr;
    }
    resp->responses.n = nt;
}

void sk_fetch_session_answer(sk_req *r, const sk_fetch_session *fs)
{
    kp_FetchResponse *resp = r->resp;
    resp->session_id = 0;
    if (fs->kind == SK_FETCH_FULL) {
        resp->session_id = create_session(r);
        return;
    }
    if (fs->kind != SK_FETCH_INCREMENTAL)
        return;
    resp->session_id = fs->id;
    sk_fs_session *s = sk_fs_find(r->node->fsessions, fs->id);
    if (!s)
        return; /* evicted while the fetch waited: answered whole, once more */
    if (sk_fs_epoch(s) != fs->epoch) {
        /* Another request of the session came meanwhile. */
        resp->error_code = SK_KAFKA_INVALID_FETCH_SESSION_EPOCH;
        resp->responses.n = 0;
        return;
    }
    prune(r, s);
}
