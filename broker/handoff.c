#include "handoff.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cluster.h"
#include "config.h"
#include "etcd.h"
#include "groups.h"
#include "txns.h"
#include "hstate.h"
#include "kmsg.h"
#include "krpc.h"
#include "meta.h"
#include "node.h"
#include "peer.h"
#include "plog.h"
#include "session.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "sk_time.h"
#include "store.h"
#include "tier.h"
#include "vlog.h"
#include "wal.h"

#define KEY_MAX 512
#define RPC_TIMEOUT_MS 2000

/* Partitions are keyed by topic id and index (and, for writes, the log). */
typedef struct pkey {
    uint8_t b[28];
} pkey;

static pkey key_of(const kc_uuid *id, int32_t part, int64_t log)
{
    pkey k;
    memcpy(k.b, id->b, 16);
    uint32_t p = (uint32_t)part;
    memcpy(k.b + 16, &p, 4);
    memcpy(k.b + 20, &log, 8);
    return k;
}

/* An adoption under way. */
typedef enum { AD_READING, AD_APPENDING, AD_CAS, AD_CAS_UNKNOWN } ad_stage;

typedef struct adopt {
    sk_handoffs *h;
    kc_uuid id;
    int32_t part;
    ad_stage stage;
    bool gone; /* the partition went meanwhile */
    cm_part want; /* the key's state the adoption answers */
    uint8_t *rec; /* the HANDOFF record read from the source log */
    uint32_t rec_len;
    int err;
    int64_t started_ms;
} adopt;

/* A HANDOFF being written or waiting to be published. */
typedef struct hwrite {
    sk_handoffs *h;
    sk_vlog *v;
    int64_t log;
    kc_uuid id;
    int32_t part;
    bool written;      /* the record is durable */
    bool publishing;   /* a CAS is in flight */
    wal_lsn lsn;       /* of the record */
    int64_t walref;    /* lowest LSN of the log's batches in it, -1: none */
    sk_buf state;      /* the encoded state, until appended */
    int32_t offsets_nparts; /* __consumer_offsets: the partition count, else 0 */
    int err;
    int64_t started_ms;
    sk_handoff_fn done;
    void *arg;
} hwrite;

/* A walref published moments ago: the model may not show it yet. */
#define RECENT_REFS 64
#define RECENT_MS 10000
typedef struct recent_ref {
    int64_t log;
    int64_t lsn;
    int64_t until_ms;
} recent_ref;

struct sk_handoffs {
    bool closing; /* the node stops: callbacks only return */
    recent_ref recent[RECENT_REFS];
    int audits; /* walref audits in flight */
    sk_cluster *c;
    sk_node *n;
    sk_map *adopts; /* pkey -> adopt */
    sk_map *writes; /* pkey (with log) -> hwrite */
    rpc_client *rpc; /* the cluster's */
    sk_handoff_stats st;
};

static const char *pname(const sk_handoffs *h, const kc_uuid *id, int32_t part, char *buf,
                         size_t len)
{
    sk_topic *t = sk_topic_get_id(h->n, id);
    snprintf(buf, len, "%s-%d", t ? t->name : "?", part);
    return buf;
}

static sk_part *part_of(sk_handoffs *h, const kc_uuid *id, int32_t part)
{
    return sk_part_get(sk_topic_get_id(h->n, id), part);
}

/* ---- groups coordinated through __consumer_offsets ---- */

struct gfilter {
    int32_t part;
    int32_t nparts;
};

static bool group_in(void *arg, const char *g, size_t len)
{
    struct gfilter *f = arg;
    if (f->nparts <= 0)
        return false;
    return sk_group_partition(g, len, f->nparts) == f->part;
}

static bool is_offsets_topic(const sk_topic *t)
{
    return t && t->internal && strcmp(t->name, "__consumer_offsets") == 0;
}

static void gfilter_for(sk_handoffs *h, const kc_uuid *id, int32_t part, struct gfilter *f)
{
    sk_topic *t = sk_topic_get_id(h->n, id);
    f->part = part;
    f->nparts = is_offsets_topic(t) ? t->nparts : 0;
}

/* ---- etcd: partition keys ---- */

static size_t part_key(sk_handoffs *h, const kc_uuid *id, int32_t part, char *buf)
{
    return cm_key_part(cs_prefix(sk_cluster_session(h->c)), id, part, buf, KEY_MAX);
}

/* ---- adopting ---- */

static void adopt_free(adopt *a)
{
    free(a->rec);
    free(a);
}

static void adopt_end(sk_handoffs *h, adopt *a)
{
    pkey k = key_of(&a->id, a->part, 0);
    sk_map_del(h->adopts, k.b, sizeof k.b);
    adopt_free(a);
}

/* Back to NONE without a trace: nothing was appended yet. */
static void adopt_abandon(sk_handoffs *h, adopt *a, const char *why)
{
    char nm[300];
    SK_WARN("cluster", "adoption of %s abandoned: %s", pname(h, &a->id, a->part, nm, sizeof nm),
            why);
    sk_part *p = part_of(h, &a->id, a->part);
    if (p && p->own == SK_OWN_ADOPTING) {
        sk_part_release(h->n, p);
        p->own = SK_OWN_NONE;
    }
    h->st.adopt_refused++;
    adopt_end(h, a);
}

/* The ADOPT record is durable but etcd did not take it: DROP it here. */
static void adopt_undo(sk_handoffs *h, adopt *a, const char *why)
{
    sk_buf b;
    sk_buf_init(&b, 64);
    sk_meta_drop(&b, &a->id, a->part);
    struct iovec iov = {b.data, b.len};
    if (!sk_buf_failed(&b) && sk_node_append(h->n, SK_WAL_META, &iov, 1, NULL, NULL, NULL) != 0)
        SK_WARN("cluster", "cannot record the drop of an adoption etcd refused");
    sk_buf_free(&b);
    adopt_abandon(h, a, why);
}

/* The partition's state, as ADOPT brings it, in memory. */
static int apply_state(sk_handoffs *h, sk_part *p, const sk_hstate *hs)
{
    p->stream = hs->stream;
    p->log_start = hs->log_start;
    p->next_offset = p->hw = hs->next_offset;
    p->max_ts = hs->max_ts;
    p->max_ts_base = hs->max_ts_base;
    p->leader_epoch = hs->epoch;
    for (uint32_t i = 0; i < hs->nproducers; i++) {
        sk_pstate *ps = sk_part_pstate(p, hs->producers[i].pid, true);
        if (!ps)
            return SK_ERR_NOMEM;
        *ps = hs->producers[i];
    }
    for (uint32_t i = 0; i < hs->ngroups; i++)
        if (sk_groups_load(h->n->groups, hs->groups[i], hs->group_lens[i]) != 0)
            return SK_ERR_CORRUPT;
    sk_txidx_clear(&p->txidx);
    for (uint32_t i = 0; i < hs->ntxidx; i++)
        if (sk_txidx_load(&p->txidx, &hs->txidx[i]) != 0)
            return SK_ERR_NOMEM;
    for (uint32_t i = 0; i < hs->ntxns; i++)
        if (h->n->txns && sk_txns_load(h->n->txns, hs->txns[i], hs->txn_lens[i]) != 0)
            return SK_ERR_CORRUPT;
    return 0;
}

static void adopt_cas_done(void *arg, int err, const etcd_txn_result *r);

static void adopt_cas(sk_handoffs *h, adopt *a)
{
    cs_session *s = sk_cluster_session(h->c);
    char key[KEY_MAX];
    size_t kl = part_key(h, &a->id, a->part, key);
    cm_part now = a->want;
    now.state = CM_PART_ACTIVE;
    now.node = cs_node_id(s);
    now.log = cs_log_id(s);
    now.src_log = now.src_lsn = 0;
    char *val = cm_encode_part(&now);
    if (!val) {
        a->stage = AD_CAS_UNKNOWN;
        return;
    }
    etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_MOD,
                  .result = ETCD_CMP_EQUAL, .number = a->want.mod_rev};
    etcd_op put = {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
                   .value = (const uint8_t *)val, .vlen = strlen(val)};
    a->stage = AD_CAS;
    if (etcd_txn(cs_etcd(s), &c, 1, &put, 1, NULL, 0, adopt_cas_done, a) != 0)
        a->stage = AD_CAS_UNKNOWN; /* the next reconciliation tries again */
    free(val);
}

static void adopt_serve(sk_handoffs *h, adopt *a, int64_t claim_rev)
{
    char nm[300];
    sk_part *p = part_of(h, &a->id, a->part);
    if (!p || p->own != SK_OWN_ADOPTING) {
        adopt_end(h, a);
        return;
    }
    p->own = SK_OWN_ACTIVE;
    p->main_node = h->n->cfg->node_id;
    p->claim_rev = claim_rev;
    h->st.adopted++;
    h->st.last_adopt_ms = sk_mono_ms() - a->started_ms;
    char from[64] = "new";
    if (a->want.state == CM_PART_HANDOFF)
        snprintf(from, sizeof from, "from log %lld at LSN %lld", (long long)a->want.src_log,
                 (long long)a->want.src_lsn);
    SK_INFO("cluster", "%s: now served here at epoch %d (offsets %lld..%lld, %s), adopted in %lld ms",
            pname(h, &a->id, a->part, nm, sizeof nm), a->want.epoch, (long long)p->log_start,
            (long long)p->next_offset, from, (long long)h->st.last_adopt_ms);
    adopt_end(h, a);
}

static void adopt_cas_done(void *arg, int err, const etcd_txn_result *r)
{
    adopt *a = arg;
    sk_handoffs *h = a->h;
    if (h->closing)
        return;
    if (a->gone) {
        adopt_undo(h, a, "its partition went away");
        return;
    }
    if (err) {
        /* Possibly applied: the model will tell (reconcile). */
        a->stage = AD_CAS_UNKNOWN;
        return;
    }
    if (!r->succeeded) {
        adopt_undo(h, a, "etcd changed the partition meanwhile");
        return;
    }
    adopt_serve(h, a, r->revision);
}

static void adopt_durable(void *arg, int err)
{
    adopt *a = arg;
    sk_handoffs *h = a->h;
    if (h->closing)
        return;
    if (err) {
        adopt_abandon(h, a, "the ADOPT record did not become durable");
        return;
    }
    if (a->gone) {
        adopt_undo(h, a, "its partition went away");
        return;
    }
    adopt_cas(h, a);
}

/* Appends ADOPT with the state (its epoch and source set here) and applies
 * it in memory; serving waits for etcd. */
static void adopt_append(sk_handoffs *h, adopt *a, sk_hstate *hs)
{
    sk_part *p = part_of(h, &a->id, a->part);
    if (!p || a->gone) {
        adopt_abandon(h, a, "its partition went away");
        return;
    }
    hs->epoch = a->want.epoch;
    hs->src_log = a->want.state == CM_PART_HANDOFF ? a->want.src_log : 0;
    hs->src_lsn = a->want.state == CM_PART_HANDOFF ? (uint64_t)a->want.src_lsn : 0;
    hs->stream = a->want.stream ? a->want.stream : hs->stream;
    sk_buf b;
    sk_buf_init(&b, 1u << 30);
    sk_meta_adopt(&b, hs);
    struct iovec iov = {b.data, b.len};
    wal_lsn end = 0;
    int rc = sk_buf_failed(&b) ? SK_ERR_NOMEM
                               : sk_node_append(h->n, SK_WAL_META, &iov, 1, adopt_durable, a, &end);
    sk_buf_free(&b);
    if (rc) {
        adopt_abandon(h, a, sk_err_name(rc));
        return;
    }
    p->adopt_end = end;
    if (end > h->n->adopt_hi)
        h->n->adopt_hi = end;
    a->stage = AD_APPENDING;
    if (apply_state(h, p, hs) != 0)
        SK_ERROR("cluster", "out of memory applying an adopted partition's state");
    if (hs->nbatches > 0 && h->n->tier)
        sk_tier_adopted(h->n->tier);
}

/* Reading the HANDOFF record, on a reader thread. */
static void read_work(void *arg)
{
    adopt *a = arg;
    sk_cluster *c = a->h->c;
    uint32_t cap = 64 << 10, len = 0;
    uint8_t type = 0;
    for (int i = 0; i < 2; i++) {
        free(a->rec);
        a->rec = malloc(cap);
        if (!a->rec) {
            a->err = SK_ERR_NOMEM;
            return;
        }
        int64_t log = a->want.src_log;
        if (log == sk_cluster_log_id(c))
            a->err = wal_read_record(sk_cluster_node(c)->wal, (wal_lsn)a->want.src_lsn, &type,
                                     a->rec, cap, &len);
        else
            a->err = sk_cluster_read_foreign(c, log, (wal_lsn)a->want.src_lsn, &type, a->rec, cap,
                                             &len);
        if (a->err != SK_ERR_NOMEM || len <= cap)
            break;
        cap = len;
    }
    if (a->err == 0 && type != SK_WAL_META)
        a->err = SK_ERR_CORRUPT;
    a->rec_len = len;
}

static void read_done(void *arg)
{
    adopt *a = arg;
    sk_handoffs *h = a->h;
    if (h->closing)
        return;
    if (a->gone) {
        adopt_abandon(h, a, "its partition went away");
        return;
    }
    sk_meta m;
    sk_hstate hs;
    char why[128];
    if (a->err) {
        snprintf(why, sizeof why, "cannot read its HANDOFF record: %s", sk_err_name(a->err));
        adopt_abandon(h, a, why);
        return;
    }
    if (sk_meta_decode(a->rec, a->rec_len, &m) != 0 || m.kind != SK_META_HANDOFF ||
        sk_hstate_decode(m.body, m.body_len, &hs) != 0) {
        adopt_abandon(h, a, "the record at the published position is no HANDOFF");
        return;
    }
    if (memcmp(hs.id.b, a->id.b, 16) != 0 || hs.part != a->part) {
        sk_hstate_free(&hs);
        adopt_abandon(h, a, "the HANDOFF record is another partition's");
        return;
    }
    adopt_append(h, a, &hs);
    sk_hstate_free(&hs);
}

static void start_adopt(sk_handoffs *h, sk_part *p, const cm_part *cp)
{
    adopt *a = calloc(1, sizeof *a);
    if (!a)
        return;
    a->h = h;
    a->id = p->topic->id;
    a->part = p->index;
    a->want = *cp;
    a->started_ms = sk_mono_ms();
    pkey k = key_of(&a->id, a->part, 0);
    if (sk_map_put(h->adopts, k.b, sizeof k.b, a) != 0) {
        free(a);
        return;
    }
    p->own = SK_OWN_ADOPTING;
    if (cp->state == CM_PART_NEW) {
        sk_hstate hs;
        memset(&hs, 0, sizeof hs);
        hs.id = a->id;
        hs.part = a->part;
        hs.stream = cp->stream;
        hs.max_ts = hs.max_ts_base = -1;
        adopt_append(h, a, &hs);
        return;
    }
    a->stage = AD_READING;
    if (sk_node_read_job(h->n, read_work, read_done, a) != 0)
        adopt_abandon(h, a, "no reader thread");
}

/* An adoption whose CAS answer was lost: the model says how it ended. */
static void adopt_resolve(sk_handoffs *h, adopt *a, const cm_part *cp)
{
    cs_session *s = sk_cluster_session(h->c);
    if (cp->state == CM_PART_ACTIVE && cp->node == cs_node_id(s) && cp->log == cs_log_id(s) &&
        cp->epoch == a->want.epoch) {
        adopt_serve(h, a, cp->mod_rev);
        return;
    }
    if (cp->mod_rev == a->want.mod_rev) {
        adopt_cas(h, a); /* not applied: try again */
        return;
    }
    adopt_undo(h, a, "etcd changed the partition meanwhile");
}

/* ---- writing and publishing HANDOFF records ---- */

static void write_free(hwrite *w)
{
    sk_buf_free(&w->state);
    free(w);
}

static void remember_walref(sk_handoffs *h, const hwrite *w)
{
    int64_t now = sk_mono_ms();
    recent_ref *slot = &h->recent[0];
    for (int i = 0; i < RECENT_REFS; i++) {
        if (h->recent[i].until_ms < now) {
            slot = &h->recent[i];
            break;
        }
        if (h->recent[i].until_ms < slot->until_ms)
            slot = &h->recent[i];
    }
    *slot = (recent_ref){w->log, w->walref, now + RECENT_MS};
}

static void write_end(sk_handoffs *h, hwrite *w, int err)
{
    if (err == 0 && w->walref >= 0)
        remember_walref(h, w);
    pkey k = key_of(&w->id, w->part, w->log);
    sk_map_del(h->writes, k.b, sizeof k.b);
    if (w->done)
        w->done(w->arg, err);
    write_free(w);
}

static void rpc_done(void *arg, int err, const void *resp)
{
    sk_handoffs *h = arg;
    if (h->closing)
        return;
    const kr_HandoffReadyResponse *r = resp;
    if (err || (r && r->error_code))
        h->st.rpc_failed++;
}

/* Tells the target at once (it also learns it from its watch). */
static void send_ready(sk_handoffs *h, const hwrite *w, const cm_part *cp)
{
    kr_HandoffReadyRequest req;
    kc_init(&kr_HandoffReadyRequest_desc, &req);
    kr_HandoffReadyRequest_Partition pt;
    kc_init(&kr_HandoffReadyRequest_Partition_desc, &pt);
    pt.topic_id = w->id;
    pt.partition = w->part;
    pt.epoch = cp->epoch;
    pt.source_log = w->log;
    pt.source_lsn = (int64_t)w->lsn;
    req.partitions.n = 1;
    req.partitions.v = &pt;
    if (rpc_call(h->rpc, cp->node, 10000, 0, &req, RPC_TIMEOUT_MS, rpc_done, h) == 0)
        h->st.rpc_sent++;
}

static void publish(sk_handoffs *h, hwrite *w);

static void publish_done(void *arg, int err, const etcd_txn_result *r)
{
    hwrite *w = arg;
    sk_handoffs *h = w->h;
    if (h->closing)
        return;
    w->publishing = false;
    if (err || !r->succeeded) {
        /* The key changed meanwhile (or etcd did not answer): the next
         * reconciliation publishes against what the model says then. */
        h->st.publish_retries++;
        return;
    }
    const cm_part *cp = cm_part_get(sk_cluster_model(h->c), &w->id, w->part);
    char nm[300];
    h->st.published++;
    h->st.last_leave_ms = sk_mono_ms() - w->started_ms;
    SK_INFO("cluster", "%s: HANDOFF of log %lld at LSN %llu published (%lld ms)",
            pname(h, &w->id, w->part, nm, sizeof nm), (long long)w->log,
            (unsigned long long)w->lsn, (long long)h->st.last_leave_ms);
    if (cp)
        send_ready(h, w, cp);
    write_end(h, w, 0);
}

static void publish(sk_handoffs *h, hwrite *w)
{
    if (!w->written || w->publishing)
        return;
    cs_session *s = sk_cluster_session(h->c);
    const cm_part *cp = cm_part_get(cs_model(s), &w->id, w->part);
    if (!cp) {
        write_end(h, w, SK_ERR_NOENT); /* the partition is gone */
        return;
    }
    if (cp->state == CM_PART_HANDOFF && cp->src_log == w->log &&
        cp->src_lsn == (int64_t)w->lsn) {
        write_end(h, w, 0); /* published already: our answer was lost */
        return;
    }
    if (cp->state != CM_PART_MOVING || cp->src_log != w->log) {
        /* It moved on without this record (the same log's state published
         * by someone else, e.g. this log's custodian): nothing to do. */
        write_end(h, w, SK_ERR_EXIST);
        return;
    }
    char key[KEY_MAX], rkey[KEY_MAX];
    size_t kl = part_key(h, &w->id, w->part, key);
    size_t rkl = cm_key_walref(cs_prefix(s), &w->id, w->part, w->log, rkey, sizeof rkey);
    cm_part now = *cp;
    now.state = CM_PART_HANDOFF;
    now.log = 0;
    now.src_lsn = (int64_t)w->lsn;
    char *val = cm_encode_part(&now);
    char *ref = w->walref >= 0 ? cm_encode_walref(w->walref) : NULL;
    if (val && (w->walref < 0 || ref)) {
        etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_MOD,
                      .result = ETCD_CMP_EQUAL, .number = cp->mod_rev};
        etcd_op ops[2] = {
            {.type = ETCD_OP_PUT, .key = (const uint8_t *)key, .klen = kl,
             .value = (const uint8_t *)val, .vlen = strlen(val)},
            {.type = ETCD_OP_PUT, .key = (const uint8_t *)rkey, .klen = rkl,
             .value = (const uint8_t *)ref, .vlen = ref ? strlen(ref) : 0},
        };
        w->publishing =
            etcd_txn(cs_etcd(s), &c, 1, ops, ref ? 2 : 1, NULL, 0, publish_done, w) == 0;
    }
    free(val);
    free(ref);
}

/* The lowest LSN of log `log`'s own batches in an encoded state (-1: none):
 * the log must keep them until the adopter has them in objects. */
static int64_t walref_of(const sk_buf *state, int64_t log)
{
    sk_hstate hs;
    if (sk_hstate_decode(state->data, state->len, &hs) != 0)
        return -1;
    int64_t low = -1;
    for (uint32_t i = 0; i < hs.nbatches; i++)
        if (hs.batches[i].log == log && (low < 0 || (int64_t)hs.batches[i].lsn < low))
            low = (int64_t)hs.batches[i].lsn;
    sk_hstate_free(&hs);
    return low;
}

static void write_durable(void *arg, int err)
{
    hwrite *w = arg;
    sk_handoffs *h = w->h;
    if (h->closing)
        return;
    if (err) {
        SK_ERROR("cluster", "a HANDOFF record of log %lld did not become durable (%s)",
                 (long long)w->log, sk_err_name(err));
        write_end(h, w, err);
        return;
    }
    w->written = true;
    publish(h, w);
}

/* The state is read: append HANDOFF. A partition served from this node's
 * own log forgets its state here at once (rule: append, then apply). */
static void write_append(sk_handoffs *h, hwrite *w)
{
    w->walref = walref_of(&w->state, w->log);
    sk_buf b;
    sk_buf_init(&b, 1u << 30);
    sk_meta_head(&b, SK_META_HANDOFF);
    sk_buf_put(&b, w->state.data, w->state.len);
    struct iovec iov = {b.data, b.len};
    wal_lsn end = 0;
    int rc = sk_buf_failed(&b) || sk_buf_failed(&w->state)
                 ? SK_ERR_NOMEM
                 : sk_vlog_append(w->v, SK_WAL_META, &iov, 1, write_durable, w, &end);
    size_t len = b.len;
    sk_buf_free(&b);
    sk_buf_free(&w->state);
    if (rc) {
        write_end(h, w, rc);
        return;
    }
    w->lsn = end - WAL_RECORD_HEADER - len;
    sk_part *p = part_of(h, &w->id, w->part);
    if (w->v == h->n->log && p && p->own == SK_OWN_LEAVING) {
        struct gfilter f;
        gfilter_for(h, &w->id, w->part, &f);
        if (f.nparts > 0)
            sk_groups_release(h->n->groups, group_in, &f);
        if (f.nparts > 0 && h->n->txns)
            sk_txns_release(h->n->txns, group_in, &f);
        sk_part_release(h->n, p);
        p->own = SK_OWN_NONE;
        h->st.left++;
    }
}

/* On a reader thread: an existing HANDOFF of the partition in this log, or
 * its state now. */
static void encode_work(void *arg)
{
    hwrite *w = arg;
    sk_store *st = sk_vlog_store(w->v);
    wal_lsn lsn;
    int rc = sk_store_handoff_lsn(st, &w->id, w->part, &lsn);
    if (rc == 0) {
        w->lsn = lsn;
        w->written = true;
        w->walref = -1;
        w->err = 0;
        return;
    }
    struct gfilter f = {w->part, w->offsets_nparts};
    w->err = sk_store_encode_state(st, &w->id, w->part, w->log, group_in, &f, &w->state);
}

static void encode_done(void *arg)
{
    hwrite *w = arg;
    sk_handoffs *h = w->h;
    if (h->closing)
        return;
    if (w->err) {
        /* Retried at every reconciliation: say it once in a while. */
        static int64_t said;
        if (sk_mono_ms() - said >= 10000) {
            said = sk_mono_ms();
            SK_ERROR("cluster", "cannot read the state of a partition of log %lld for its "
                     "HANDOFF (%s)",
                     (long long)w->log, sk_err_name(w->err));
        }
        write_end(h, w, w->err);
        return;
    }
    if (w->written) {
        publish(h, w); /* an earlier HANDOFF: publish it */
        return;
    }
    write_append(h, w);
}

static void write_applied(void *arg, int err)
{
    hwrite *w = arg;
    sk_handoffs *h = w->h;
    if (h->closing)
        return;
    if (err) {
        write_end(h, w, err);
        return;
    }
    struct gfilter f;
    gfilter_for(h, &w->id, w->part, &f);
    w->offsets_nparts = f.nparts;
    if (sk_node_read_job(h->n, encode_work, encode_done, w) != 0)
        write_end(h, w, SK_ERR_NOMEM);
}

void sk_handoff_write(sk_handoffs *h, sk_vlog *v, int64_t log, const kc_uuid *id, int32_t part,
                      sk_handoff_fn done, void *arg)
{
    pkey k = key_of(id, part, log);
    hwrite *old = sk_map_get(h->writes, k.b, sizeof k.b);
    if (old) {
        publish(h, old);
        if (done)
            done(arg, SK_ERR_AGAIN);
        return;
    }
    hwrite *w = calloc(1, sizeof *w);
    if (!w) {
        if (done)
            done(arg, SK_ERR_NOMEM);
        return;
    }
    w->h = h;
    w->v = v;
    w->log = log;
    w->id = *id;
    w->part = part;
    w->walref = -1;
    w->done = done;
    w->arg = arg;
    w->started_ms = sk_mono_ms();
    sk_buf_init(&w->state, 1u << 30);
    if (sk_map_put(h->writes, k.b, sizeof k.b, w) != 0) {
        write_free(w);
        if (done)
            done(arg, SK_ERR_NOMEM);
        return;
    }
    /* Every append of the partition precedes this point in the WAL: once
     * the view holds them all, it holds the partition's final state. */
    sk_vlog_wait_applied(v, wal_end_lsn(sk_vlog_wal(v)), write_applied, w);
}

void sk_handoff_retry(sk_handoffs *h)
{
    size_t it = 0;
    void *v;
    /* publish may end a write: collect first. */
    hwrite *ready[256];
    size_t n = 0;
    while (n < 256 && sk_map_next(h->writes, &it, NULL, NULL, &v)) {
        hwrite *w = v;
        if (w->written && !w->publishing)
            ready[n++] = w;
    }
    for (size_t i = 0; i < n; i++)
        publish(h, ready[i]);
}

void sk_handoff_pending_floor(const sk_handoffs *h, int64_t log, wal_lsn *floor)
{
    size_t it = 0;
    void *v;
    while (sk_map_next(h->writes, &it, NULL, NULL, &v)) {
        const hwrite *w = v;
        if (w->log == log && w->walref >= 0 && (wal_lsn)w->walref < *floor)
            *floor = (wal_lsn)w->walref;
    }
    int64_t now = sk_mono_ms();
    for (int i = 0; i < RECENT_REFS; i++) {
        const recent_ref *r = &h->recent[i];
        if (r->log == log && r->until_ms >= now && (wal_lsn)r->lsn < *floor)
            *floor = (wal_lsn)r->lsn;
    }
}

size_t sk_handoff_pending(const sk_handoffs *h, int64_t log)
{
    size_t it = 0, n = 0;
    void *v;
    while (sk_map_next(h->writes, &it, NULL, NULL, &v))
        n += ((hwrite *)v)->log == log;
    return n;
}

/* ---- walrefs: releasing another log's WAL once its batches are in objects ---- */

typedef struct audit {
    sk_handoffs *h;
    kc_uuid id;
    int32_t part;
    int64_t log;
    int64_t mod_rev;
    wal_lsn need; /* the partition's ADOPT record's end in this node's WAL */
    int has;      /* 1: batches left (or the view is behind), 0: none, < 0: error */
} audit;

static void audit_work(void *arg)
{
    audit *x = arg;
    x->has = sk_store_has_log_batches(x->h->n->store, &x->id, x->part, x->log, x->need);
}

static void audit_deleted(void *arg, int err, const etcd_txn_result *r)
{
    (void)err;
    (void)r;
    sk_handoffs *h = arg;
    if (!h->closing)
        h->audits--;
}

static void audit_done(void *arg)
{
    audit *x = arg;
    sk_handoffs *h = x->h;
    if (h->closing) {
        free(x);
        return;
    }
    if (x->has == 0) {
        cs_session *s = sk_cluster_session(h->c);
        char key[KEY_MAX];
        size_t kl = cm_key_walref(cs_prefix(s), &x->id, x->part, x->log, key, sizeof key);
        etcd_cmp c = {.key = (const uint8_t *)key, .klen = kl, .target = ETCD_TARGET_MOD,
                      .result = ETCD_CMP_EQUAL, .number = x->mod_rev};
        etcd_op del = {.type = ETCD_OP_DELETE, .key = (const uint8_t *)key, .klen = kl};
        if (etcd_txn(cs_etcd(s), &c, 1, &del, 1, NULL, 0, audit_deleted, h) == 0) {
            free(x);
            return; /* audit_deleted ends it */
        }
    }
    h->audits--;
    free(x);
}

void sk_handoff_audit_walrefs(sk_handoffs *h)
{
    if (h->closing || h->audits > 0)
        return;
    cm_model *m = sk_cluster_model(h->c);
    size_t it = 0;
    const cm_walref *r;
    while ((r = cm_walref_next(m, &it)) != NULL) {
        sk_part *p = part_of(h, &r->topic, r->index);
        /* Only the partition's main knows what it still reads. */
        if (!sk_part_serving(p))
            continue;
        audit *x = calloc(1, sizeof *x);
        if (!x)
            return;
        *x = (audit){h, r->topic, r->index, r->log, r->mod_rev, (wal_lsn)p->adopt_end, 1};
        if (sk_node_read_job(h->n, audit_work, audit_done, x) != 0) {
            free(x);
            return;
        }
        h->audits++;
    }
}

/* ---- leaving this node's log ---- */

static void start_leave(sk_handoffs *h, sk_part *p)
{
    char nm[300];
    SK_INFO("cluster", "%s: leaving this node (offsets %lld..%lld)",
            pname(h, &p->topic->id, p->index, nm, sizeof nm), (long long)p->log_start,
            (long long)p->next_offset);
    p->own = SK_OWN_LEAVING;
    p->main_node = -1;
    /* Parked fetches answer now: they find the partition not served. */
    sk_part_wake(p);
    sk_handoff_write(h, h->n->log, sk_cluster_log_id(h->c), &p->topic->id, p->index, NULL, NULL);
}

/* ---- reconciliation ---- */

void sk_handoff_reconcile(sk_handoffs *h, sk_part *p, const cm_part *cp)
{
    cs_session *s = sk_cluster_session(h->c);
    int32_t me = cs_node_id(s);
    int64_t mylog = cs_log_id(s);
    /* This node's claim succeeded before the watch brought it: the model
     * is older than what this node knows, and has nothing to say yet. */
    if ((p->own == SK_OWN_ACTIVE || p->own == SK_OWN_LEAVING) && cp->mod_rev < p->claim_rev)
        return;
    p->leader_epoch = cp->epoch;
    p->stream = cp->stream ? cp->stream : p->stream;
    if (p->own != SK_OWN_ACTIVE && p->own != SK_OWN_LEAVING)
        p->main_node = cp->state == CM_PART_ACTIVE ? cp->node : -1;
    pkey k = key_of(&p->topic->id, p->index, 0);
    adopt *a = sk_map_get(h->adopts, k.b, sizeof k.b);
    switch (p->own) {
    case SK_OWN_NONE:
        if (cp->node == me && (cp->state == CM_PART_NEW || cp->state == CM_PART_HANDOFF) &&
            !h->n->stopping)
            start_adopt(h, p, cp);
        break;
    case SK_OWN_ADOPTING:
        if (a && a->stage == AD_CAS_UNKNOWN)
            adopt_resolve(h, a, cp);
        break;
    case SK_OWN_ACTIVE:
        if (cp->state == CM_PART_MOVING && cp->src_log == mylog) {
            start_leave(h, p);
        } else if (cp->state != CM_PART_ACTIVE || cp->node != me || cp->log != mylog) {
            char nm[300];
            SK_ERROR("cluster", "%s: etcd gives it to node %d (log %lld) while this node served "
                     "it: forgetting it",
                     pname(h, &p->topic->id, p->index, nm, sizeof nm), cp->node,
                     (long long)cp->log);
            sk_part_release(h->n, p);
            p->own = SK_OWN_NONE;
        }
        break;
    case SK_OWN_LEAVING:
        break;
    }
    /* A HANDOFF of this partition waiting to be published. */
    pkey wk = key_of(&p->topic->id, p->index, mylog);
    hwrite *w = sk_map_get(h->writes, wk.b, sizeof wk.b);
    if (w)
        publish(h, w);
}

void sk_handoff_drop(sk_handoffs *h, sk_part *p)
{
    pkey k = key_of(&p->topic->id, p->index, 0);
    adopt *a = sk_map_get(h->adopts, k.b, sizeof k.b);
    if (a)
        a->gone = true;
    if (p->own == SK_OWN_NONE)
        return;
    if (p->own != SK_OWN_ADOPTING) {
        sk_buf b;
        sk_buf_init(&b, 64);
        sk_meta_drop(&b, &p->topic->id, p->index);
        struct iovec iov = {b.data, b.len};
        if (!sk_buf_failed(&b))
            (void)!sk_node_append(h->n, SK_WAL_META, &iov, 1, NULL, NULL, NULL);
        sk_buf_free(&b);
    }
    sk_part_release(h->n, p);
    p->own = SK_OWN_NONE;
}

size_t sk_handoff_owned(const sk_handoffs *h)
{
    size_t n = 0, it = 0;
    void *v;
    while (sk_map_next(h->n->topics_by_id, &it, NULL, NULL, &v)) {
        const sk_topic *t = v;
        for (int32_t i = 0; i < t->nparts; i++)
            n += t->parts[i]->own != SK_OWN_NONE;
    }
    return n;
}

/* ---- the RPC ---- */

int16_t sk_handoff_ready(sk_node *n, const kc_uuid *topic, int32_t part, int32_t epoch,
                         int64_t src_log, int64_t src_lsn)
{
    (void)src_log;
    (void)src_lsn;
    if (!n->cluster)
        return SK_KAFKA_INVALID_REQUEST; /* a single node hands nothing over */
    sk_part *p = sk_part_get(sk_topic_get_id(n, topic), part);
    if (!p)
        return SK_KAFKA_UNKNOWN_TOPIC_OR_PARTITION;
    const cm_part *cp = sk_cluster_part_state(n->cluster, p);
    /* The watch may not have brought the HANDOFF yet; it will, and the
     * adoption starts then. */
    if (cp && cp->epoch == epoch)
        sk_handoff_reconcile(sk_cluster_handoffs(n->cluster), p, cp);
    return 0;
}

/* ---- life ---- */

sk_handoffs *sk_handoffs_new(sk_cluster *c)
{
    sk_handoffs *h = calloc(1, sizeof *h);
    if (!h)
        return NULL;
    h->c = c;
    h->n = sk_cluster_node(c);
    h->adopts = sk_map_new();
    h->writes = sk_map_new();
    h->rpc = sk_cluster_rpc(c);
    if (!h->adopts || !h->writes) {
        sk_handoffs_destroy(h);
        return NULL;
    }
    return h;
}

void sk_handoffs_close(sk_handoffs *h)
{
    if (h)
        h->closing = true;
}

void sk_handoffs_destroy(sk_handoffs *h)
{
    if (!h)
        return;
    size_t it = 0;
    void *v;
    /* Operations still under way end with the node: their records are in
     * the log (or not), and whoever takes the log over finishes them. */
    if (h->adopts) {
        while (sk_map_next(h->adopts, &it, NULL, NULL, &v))
            adopt_free(v);
        sk_map_destroy(h->adopts);
    }
    it = 0;
    if (h->writes) {
        while (sk_map_next(h->writes, &it, NULL, NULL, &v))
            write_free(v);
        sk_map_destroy(h->writes);
    }
    free(h);
}

void sk_handoff_get_stats(const sk_handoffs *h, sk_handoff_stats *st)
{
    *st = h->st;
}
