#include "meta.h"

#include <string.h>

#include "acls.h"
#include "gconf.h"
#include "groups.h"
#include "sk_err.h"
#include "sk_map.h"
#include "txns.h"

#define META_VERSION 1
#define DATA_VERSION 1
#define SNAP_VERSION 1

void sk_data_header(uint8_t out[SK_DATA_HEADER], const kc_uuid *id, int32_t part)
{
    out[0] = DATA_VERSION;
    memcpy(out + 1, id->b, 16);
    uint32_t p = (uint32_t)part;
    for (int i = 0; i < 4; i++)
        out[17 + i] = (uint8_t)(p >> (8 * i));
}

int sk_data_decode(const uint8_t *p, size_t n, kc_uuid *id, int32_t *part, const uint8_t **batch,
                   size_t *batch_len)
{
    if (n < SK_DATA_HEADER || p[0] != DATA_VERSION)
        return SK_ERR_CORRUPT;
    memcpy(id->b, p + 1, 16);
    *part = (int32_t)((uint32_t)p[17] | (uint32_t)p[18] << 8 | (uint32_t)p[19] << 16 |
                      (uint32_t)p[20] << 24);
    *batch = p + SK_DATA_HEADER;
    *batch_len = n - SK_DATA_HEADER;
    return 0;
}

static void put_le(uint8_t *p, uint64_t v, int n)
{
    for (int i = 0; i < n; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t get_le(const uint8_t *p, int n)
{
    uint64_t v = 0;
    for (int i = 0; i < n; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

void sk_link_encode(uint8_t out[SK_LINK_SIZE], const sk_link *l)
{
    sk_data_header(out, &l->id, l->part);
    put_le(out + SK_DATA_HEADER, (uint64_t)l->plog, 8);
    put_le(out + SK_DATA_HEADER + 8, l->plsn, 8);
    put_le(out + SK_DATA_HEADER + 16, l->len, 4);
    memcpy(out + SK_DATA_HEADER + 20, l->head, KB_HEADER_SIZE);
}

int sk_link_decode(const uint8_t *p, size_t n, sk_link *l)
{
    const uint8_t *batch;
    size_t blen;
    if (n != SK_LINK_SIZE || sk_data_decode(p, n, &l->id, &l->part, &batch, &blen) != 0)
        return SK_ERR_CORRUPT;
    l->plog = (int64_t)get_le(batch, 8);
    l->plsn = get_le(batch + 8, 8);
    l->len = (uint32_t)get_le(batch + 16, 4);
    memcpy(l->head, batch + 20, KB_HEADER_SIZE);
    kb_header h;
    if (l->plog <= 0 || l->len < KB_HEADER_SIZE || kb_parse_header_copy(l->head, KB_HEADER_SIZE, &h) ||
        (int64_t)h.batch_length + KB_LOG_OVERHEAD != (int64_t)l->len)
        return SK_ERR_CORRUPT;
    return 0;
}

void sk_meta_head(sk_buf *b, uint8_t kind)
{
    sk_buf_u8(b, META_VERSION);
    sk_buf_u8(b, kind);
}

static void head(sk_buf *b, uint8_t kind)
{
    sk_meta_head(b, kind);
}

void sk_conf_block_put(sk_buf *b, int n, char *const *names, char *const *values)
{
    sk_buf_u32(b, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        sk_buf_str(b, names[i], strlen(names[i]));
        sk_buf_str(b, values[i], strlen(values[i]));
    }
}

int sk_conf_iter_init(sk_conf_iter *it, const uint8_t *p, size_t n)
{
    sk_rd_init(&it->rd, p, n);
    it->left = sk_rd_u32(&it->rd);
    return sk_rd_failed(&it->rd) ? -1 : 0;
}

int sk_conf_iter_next(sk_conf_iter *it, const char **name, size_t *nlen, const char **value,
                      size_t *vlen)
{
    if (it->left == 0)
        return 0;
    it->left--;
    *name = (const char *)sk_rd_str(&it->rd, nlen);
    *value = (const char *)sk_rd_str(&it->rd, vlen);
    return sk_rd_failed(&it->rd) ? -1 : 1;
}

/* Reads a config block out of r, returning where it lies. */
static void conf_block_span(sk_rd *r, const uint8_t **p, size_t *n)
{
    const uint8_t *start = r->p;
    uint32_t count = sk_rd_u32(r);
    for (uint32_t i = 0; i < count && !sk_rd_failed(r); i++) {
        size_t l;
        sk_rd_str(r, &l);
        sk_rd_str(r, &l);
    }
    *p = start;
    *n = sk_rd_failed(r) ? 0 : (size_t)(r->p - start);
}

void sk_meta_topic_create(sk_buf *b, const sk_topic *t)
{
    head(b, SK_META_TOPIC_CREATE);
    sk_buf_put(b, t->id.b, 16);
    sk_buf_str(b, t->name, strlen(t->name));
    sk_buf_u32(b, (uint32_t)t->nparts);
    sk_buf_u16(b, (uint16_t)t->replication_factor);
    sk_buf_u64(b, t->nparts > 0 && t->parts ? t->parts[0]->stream : t->first_stream);
    sk_conf_block_put(b, t->conf.noverrides, t->conf.names, t->conf.values);
}

void sk_meta_topic_delete(sk_buf *b, const kc_uuid *id)
{
    head(b, SK_META_TOPIC_DELETE);
    sk_buf_put(b, id->b, 16);
}

void sk_meta_topic_config(sk_buf *b, const sk_topic *t)
{
    head(b, SK_META_TOPIC_CONFIG);
    sk_buf_put(b, t->id.b, 16);
    sk_conf_block_put(b, t->conf.noverrides, t->conf.names, t->conf.values);
}

void sk_meta_partitions(sk_buf *b, const kc_uuid *id, int32_t nparts, uint64_t first_stream)
{
    head(b, SK_META_PARTITIONS);
    sk_buf_put(b, id->b, 16);
    sk_buf_u32(b, (uint32_t)nparts);
    sk_buf_u64(b, first_stream);
}

void sk_meta_log_start(sk_buf *b, const kc_uuid *id, int32_t part, int64_t log_start)
{
    head(b, SK_META_LOG_START);
    sk_buf_put(b, id->b, 16);
    sk_buf_u32(b, (uint32_t)part);
    sk_buf_u64(b, (uint64_t)log_start);
}

void sk_meta_pid(sk_buf *b, int64_t next_pid)
{
    head(b, SK_META_PID);
    sk_buf_u64(b, (uint64_t)next_pid);
}

void sk_meta_cluster(sk_buf *b, const char *cluster_id)
{
    head(b, SK_META_CLUSTER);
    sk_buf_str(b, cluster_id, strlen(cluster_id));
}

void sk_meta_broker_config(sk_buf *b, int n, char *const *names, char *const *values)
{
    head(b, SK_META_BROKER_CONFIG);
    sk_conf_block_put(b, n, names, values);
}

void sk_meta_group_config(sk_buf *b, const void *body, size_t len)
{
    head(b, SK_META_GROUP_CONFIG);
    sk_buf_put(b, body, len);
}

void sk_meta_user_config(sk_buf *b, const void *body, size_t len)
{
    head(b, SK_META_USER_CONFIG);
    sk_buf_put(b, body, len);
}

void sk_meta_acl(sk_buf *b, const void *body, size_t len)
{
    head(b, SK_META_ACL);
    sk_buf_put(b, body, len);
}

void sk_meta_group(sk_buf *b, const void *body, size_t len)
{
    head(b, SK_META_GROUP);
    sk_buf_put(b, body, len);
}

void sk_txidx_section_put(sk_buf *b, const kc_uuid *id, int32_t part, const sk_txidx_ent *e)
{
    sk_buf_put(b, id->b, 16);
    sk_buf_u32(b, (uint32_t)part);
    sk_buf_u64(b, (uint64_t)e->pid);
    sk_buf_u64(b, (uint64_t)e->first);
    sk_buf_u64(b, (uint64_t)e->last);
}

int sk_txidx_section_get(const uint8_t *p, size_t n, kc_uuid *id, int32_t *part,
                         sk_txidx_ent *e)
{
    sk_rd r;
    sk_rd_init(&r, p, n);
    const uint8_t *ib = sk_rd_bytes(&r, 16);
    if (ib)
        memcpy(id->b, ib, 16);
    *part = (int32_t)sk_rd_u32(&r);
    e->pid = (int64_t)sk_rd_u64(&r);
    e->first = (int64_t)sk_rd_u64(&r);
    e->last = (int64_t)sk_rd_u64(&r);
    return sk_rd_failed(&r) || sk_rd_left(&r) ? SK_ERR_CORRUPT : 0;
}

/* The index entries of every partition, as snapshot sections. */
static uint32_t txidx_snapshot(const sk_node *n, sk_buf *b)
{
    uint32_t k = 0;
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        const sk_topic *t = v;
        for (int32_t i = 0; i < t->nparts; i++) {
            const sk_txidx *x = &t->parts[i]->txidx;
            for (int j = 0; j < x->nopen + x->naborted; j++) {
                const sk_txidx_ent *e = j < x->nopen ? &x->open[j] : &x->aborted[j - x->nopen];
                sk_buf_u8(b, SK_SNAP_TXIDX);
                sk_buf_u32(b, 16 + 4 + 24);
                sk_txidx_section_put(b, &t->id, i, e);
                k++;
            }
        }
    }
    return k;
}

void sk_meta_txn(sk_buf *b, const void *body, size_t len)
{
    head(b, SK_META_TXN);
    sk_buf_put(b, body, len);
}

void sk_meta_txn_gone(sk_buf *b, const char *id, size_t len)
{
    head(b, SK_META_TXN_GONE);
    sk_buf_str(b, id, len);
}

int sk_meta_decode(const uint8_t *p, size_t n, sk_meta *m)
{
    memset(m, 0, sizeof *m);
    sk_rd r;
    sk_rd_init(&r, p, n);
    if (sk_rd_u8(&r) != META_VERSION)
        return SK_ERR_CORRUPT;
    m->kind = sk_rd_u8(&r);
    const uint8_t *id;
    switch (m->kind) {
    case SK_META_TOPIC_CREATE:
        if ((id = sk_rd_bytes(&r, 16)))
            memcpy(m->id.b, id, 16);
        m->name = (const char *)sk_rd_str(&r, &m->name_len);
        m->nparts = (int32_t)sk_rd_u32(&r);
        m->rf = (int16_t)sk_rd_u16(&r);
        m->first_stream = sk_rd_u64(&r);
        conf_block_span(&r, &m->configs, &m->configs_len);
        break;
    case SK_META_TOPIC_DELETE:
        if ((id = sk_rd_bytes(&r, 16)))
            memcpy(m->id.b, id, 16);
        break;
    case SK_META_TOPIC_CONFIG:
        if ((id = sk_rd_bytes(&r, 16)))
            memcpy(m->id.b, id, 16);
        conf_block_span(&r, &m->configs, &m->configs_len);
        break;
    case SK_META_PARTITIONS:
        if ((id = sk_rd_bytes(&r, 16)))
            memcpy(m->id.b, id, 16);
        m->nparts = (int32_t)sk_rd_u32(&r);
        m->first_stream = sk_rd_u64(&r);
        break;
    case SK_META_LOG_START:
        if ((id = sk_rd_bytes(&r, 16)))
            memcpy(m->id.b, id, 16);
        m->part = (int32_t)sk_rd_u32(&r);
        m->value = (int64_t)sk_rd_u64(&r);
        break;
    case SK_META_PID:
        m->value = (int64_t)sk_rd_u64(&r);
        break;
    case SK_META_CLUSTER:
        m->name = (const char *)sk_rd_str(&r, &m->name_len);
        break;
    case SK_META_BROKER_CONFIG:
        conf_block_span(&r, &m->configs, &m->configs_len);
        break;
    case SK_META_DROP:
        if ((id = sk_rd_bytes(&r, 16)))
            memcpy(m->id.b, id, 16);
        m->part = (int32_t)sk_rd_u32(&r);
        break;
    case SK_META_OBJECTS:
    case SK_META_OBJECT_GONE:
    case SK_META_GROUP:
    case SK_META_GROUP_CONFIG:
    case SK_META_USER_CONFIG:
    case SK_META_ACL:
    case SK_META_TXN:
    case SK_META_TXN_GONE:
    case SK_META_HANDOFF:
    case SK_META_ADOPT:
        m->body = r.p;
        m->body_len = sk_rd_left(&r);
        r.p = r.end;
        break;
    default:
        return SK_ERR_CORRUPT;
    }
    if (sk_rd_failed(&r) || sk_rd_left(&r) != 0)
        return SK_ERR_CORRUPT;
    if (m->kind == SK_META_TOPIC_CREATE && (m->nparts <= 0 || m->configs == NULL))
        return SK_ERR_CORRUPT;
    return 0;
}

/* Batches are written oldest first, so that reading them back with the same
 * push operation as appends rebuilds the ring exactly. */
void sk_pstate_put(sk_buf *b, const sk_pstate *ps)
{
    sk_buf_u64(b, (uint64_t)ps->pid);
    sk_buf_u16(b, (uint16_t)ps->epoch);
    sk_buf_u64(b, (uint64_t)ps->last_ts);
    sk_buf_u8(b, ps->n);
    for (int i = ps->n - 1; i >= 0; i--) {
        const sk_pbatch *pb =
            &ps->b[(ps->head + SK_PSTATE_BATCHES - i) % SK_PSTATE_BATCHES];
        sk_buf_u32(b, (uint32_t)pb->first_seq);
        sk_buf_u32(b, (uint32_t)pb->last_seq);
        sk_buf_u64(b, (uint64_t)pb->base);
        sk_buf_u64(b, (uint64_t)pb->last);
        sk_buf_u64(b, (uint64_t)pb->timestamp);
    }
}

int sk_pstate_get(sk_rd *r, sk_pstate *ps)
{
    memset(ps, 0, sizeof *ps);
    ps->pid = (int64_t)sk_rd_u64(r);
    ps->epoch = (int16_t)sk_rd_u16(r);
    ps->last_ts = (int64_t)sk_rd_u64(r);
    uint8_t n = sk_rd_u8(r);
    if (n > SK_PSTATE_BATCHES)
        return SK_ERR_CORRUPT;
    for (uint8_t i = 0; i < n; i++) {
        sk_pbatch pb = {0};
        pb.first_seq = (int32_t)sk_rd_u32(r);
        pb.last_seq = (int32_t)sk_rd_u32(r);
        pb.base = (int64_t)sk_rd_u64(r);
        pb.last = (int64_t)sk_rd_u64(r);
        pb.timestamp = (int64_t)sk_rd_u64(r);
        ps->head = (uint8_t)((ps->head + (ps->n ? 1 : 0)) % SK_PSTATE_BATCHES);
        ps->b[ps->head] = pb;
        ps->n++;
    }
    return sk_rd_failed(r) ? SK_ERR_CORRUPT : 0;
}

int sk_snapshot_encode(const sk_node *n, uint8_t **out, uint32_t *len)
{
    sk_buf b;
    sk_buf_init(&b, (size_t)1 << 30);
    sk_buf_u8(&b, SNAP_VERSION);
    sk_buf_str(&b, n->cluster_id, strlen(n->cluster_id));
    sk_buf_u64(&b, (uint64_t)n->next_pid);
    sk_buf_u64(&b, n->next_stream);
    sk_conf_block_put(&b, n->ndyn, n->dyn_names, n->dyn_values);
    sk_buf_u32(&b, (uint32_t)sk_map_count(n->topics_by_id));
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v)) {
        const sk_topic *t = v;
        sk_buf_put(&b, t->id.b, 16);
        sk_buf_str(&b, t->name, strlen(t->name));
        sk_buf_u32(&b, (uint32_t)t->nparts);
        sk_buf_u16(&b, (uint16_t)t->replication_factor);
        sk_conf_block_put(&b, t->conf.noverrides, t->conf.names, t->conf.values);
        for (int32_t i = 0; i < t->nparts; i++) {
            const sk_part *p = t->parts[i];
            sk_buf_u64(&b, p->stream);
            sk_buf_u64(&b, (uint64_t)p->log_start);
            sk_buf_u64(&b, (uint64_t)p->next_offset);
            sk_buf_u32(&b, (uint32_t)p->leader_epoch);
            sk_buf_u64(&b, (uint64_t)p->max_ts);
            sk_buf_u64(&b, (uint64_t)p->max_ts_base);
            sk_buf_u32(&b, (uint32_t)sk_map_count(p->producers));
            size_t pit = 0;
            void *pv;
            while (sk_map_next(p->producers, &pit, NULL, NULL, &pv))
                sk_pstate_put(&b, pv);
        }
    }
    /* Extra sections: the groups' committed offsets. */
    sk_buf extra;
    sk_buf_init(&extra, 0);
    uint32_t nextra = n->groups ? sk_groups_snapshot(n->groups, &extra) : 0;
    if (n->txns)
        nextra += sk_txns_snapshot(n->txns, &extra);
    nextra += txidx_snapshot(n, &extra);
    /* A cluster keeps group configs in etcd, a single node in its log. */
    if (!n->cluster)
        nextra += sk_gconf_snapshot(n, &extra) + sk_acls_snapshot(n, &extra);
    sk_buf_u32(&b, nextra);
    sk_buf_put(&b, extra.data, extra.len);
    if (sk_buf_failed(&extra))
        b.failed = true;
    sk_buf_free(&extra);
    if (sk_buf_failed(&b)) {
        sk_buf_free(&b);
        return SK_ERR_NOMEM;
    }
    size_t l;
    *out = sk_buf_take(&b, &l);
    *len = (uint32_t)l;
    return 0;
}

int sk_snapshot_empty(const sk_node *n, uint8_t **out, uint32_t *len)
{
    sk_buf b;
    sk_buf_init(&b, 4096);
    sk_buf_u8(&b, SNAP_VERSION);
    sk_buf_str(&b, n->cluster_id, strlen(n->cluster_id));
    sk_buf_u64(&b, 0);
    sk_buf_u64(&b, 0);
    sk_conf_block_put(&b, 0, NULL, NULL);
    sk_buf_u32(&b, 0); /* topics */
    sk_buf_u32(&b, 0); /* extra sections */
    if (sk_buf_failed(&b)) {
        sk_buf_free(&b);
        return SK_ERR_NOMEM;
    }
    size_t l;
    *out = sk_buf_take(&b, &l);
    *len = (uint32_t)l;
    return 0;
}

int sk_snapshot_visit(const uint8_t *p, size_t n, const sk_snapshot_visitor *v)
{
    sk_rd r;
    sk_rd_init(&r, p, n);
    if (sk_rd_u8(&r) != SNAP_VERSION)
        return SK_ERR_CORRUPT;
    size_t cid_len;
    const char *cid = (const char *)sk_rd_str(&r, &cid_len);
    sk_snap_head hd = {cid, cid_len, 0, 0, NULL, 0};
    hd.next_pid = (int64_t)sk_rd_u64(&r);
    hd.next_stream = sk_rd_u64(&r);
    conf_block_span(&r, &hd.broker_conf, &hd.broker_conf_len);
    if (sk_rd_failed(&r))
        return SK_ERR_CORRUPT;
    int rc;
    if (v->head && (rc = v->head(v->arg, &hd)) != 0)
        return rc;
    uint32_t ntopics = sk_rd_u32(&r);
    for (uint32_t t = 0; t < ntopics && !sk_rd_failed(&r); t++) {
        kc_uuid id;
        const uint8_t *idp = sk_rd_bytes(&r, 16);
        if (!idp)
            break;
        memcpy(id.b, idp, 16);
        size_t name_len;
        const char *name = (const char *)sk_rd_str(&r, &name_len);
        int32_t nparts = (int32_t)sk_rd_u32(&r);
        int16_t rf = (int16_t)sk_rd_u16(&r);
        const uint8_t *conf;
        size_t conf_len;
        conf_block_span(&r, &conf, &conf_len);
        if (sk_rd_failed(&r) || nparts <= 0)
            return SK_ERR_CORRUPT;
        if (v->topic && (rc = v->topic(v->arg, &id, name, name_len, nparts, rf, conf, conf_len)))
            return rc;
        for (int32_t i = 0; i < nparts; i++) {
            sk_snap_part sp;
            sp.id = id;
            sp.part = i;
            sp.stream = sk_rd_u64(&r);
            sp.log_start = (int64_t)sk_rd_u64(&r);
            sp.next_offset = (int64_t)sk_rd_u64(&r);
            sp.leader_epoch = (int32_t)sk_rd_u32(&r);
            sp.max_ts = (int64_t)sk_rd_u64(&r);
            sp.max_ts_base = (int64_t)sk_rd_u64(&r);
            uint32_t nprod = sk_rd_u32(&r);
            if (sk_rd_failed(&r))
                return SK_ERR_CORRUPT;
            if (v->part && (rc = v->part(v->arg, &sp)))
                return rc;
            for (uint32_t k = 0; k < nprod; k++) {
                sk_pstate ps;
                if (sk_pstate_get(&r, &ps) != 0)
                    return SK_ERR_CORRUPT;
                if (v->pstate && (rc = v->pstate(v->arg, &id, i, &ps)))
                    return rc;
            }
        }
    }
    uint32_t nextra = sk_rd_u32(&r);
    for (uint32_t i = 0; i < nextra && !sk_rd_failed(&r); i++) {
        uint8_t kind = sk_rd_u8(&r);
        size_t blen;
        const uint8_t *body = sk_rd_str(&r, &blen);
        if (sk_rd_failed(&r))
            break;
        if (v->extra && (rc = v->extra(v->arg, kind, body, blen)))
            return rc;
    }
    if (sk_rd_failed(&r) || sk_rd_left(&r) != 0)
        return SK_ERR_CORRUPT;
    return 0;
}

/* ---- object registry records ---- */

void sk_meta_objects_begin(sk_buf *b, uint64_t upload_end, uint32_t nnew)
{
    head(b, SK_META_OBJECTS);
    sk_buf_u64(b, upload_end);
    sk_buf_u32(b, nnew);
}

void sk_meta_objects_obj(sk_buf *b, const sk_oobj *o)
{
    sk_buf_str(b, o->key, o->klen);
    sk_buf_u8(b, o->kind);
    sk_buf_u64(b, o->size);
    sk_buf_u64(b, (uint64_t)o->created_ms);
    sk_buf_u32(b, o->nranges);
}

void sk_meta_objects_range(sk_buf *b, const sk_orange *r)
{
    sk_buf_u64(b, r->stream);
    sk_buf_u64(b, r->start);
    sk_buf_u64(b, r->end);
    sk_buf_u64(b, r->size);
    sk_buf_u64(b, (uint64_t)r->max_ts);
    sk_buf_u64(b, r->records);
}

void sk_meta_objects_retired(sk_buf *b, uint32_t nretired)
{
    sk_buf_u32(b, nretired);
}

void sk_meta_objects_retire(sk_buf *b, const char *key, size_t klen, int64_t delete_after_ms)
{
    sk_buf_str(b, key, klen);
    sk_buf_u64(b, (uint64_t)delete_after_ms);
}

void sk_meta_object_gone(sk_buf *b, const char *key, size_t klen)
{
    head(b, SK_META_OBJECT_GONE);
    sk_buf_str(b, key, klen);
}

int sk_orec_init(sk_orec *o, const uint8_t *body, size_t len)
{
    memset(o, 0, sizeof *o);
    sk_rd_init(&o->rd, body, len);
    o->upload_end = sk_rd_u64(&o->rd);
    o->objs_left = sk_rd_u32(&o->rd);
    return sk_rd_failed(&o->rd) ? SK_ERR_CORRUPT : 0;
}

int sk_orec_next_obj(sk_orec *o, sk_oobj *obj)
{
    /* Ranges the caller did not read are skipped. */
    sk_orange skip;
    while (o->ranges_left)
        if (sk_orec_next_range(o, &skip) < 0)
            return -1;
    if (o->phase != 0)
        return 0;
    if (o->objs_left == 0) {
        o->retired_left = sk_rd_u32(&o->rd);
        o->phase = 1;
        return sk_rd_failed(&o->rd) ? -1 : 0;
    }
    o->objs_left--;
    obj->key = (const char *)sk_rd_str(&o->rd, &obj->klen);
    obj->kind = sk_rd_u8(&o->rd);
    obj->size = sk_rd_u64(&o->rd);
    obj->created_ms = (int64_t)sk_rd_u64(&o->rd);
    obj->nranges = sk_rd_u32(&o->rd);
    o->ranges_left = obj->nranges;
    return sk_rd_failed(&o->rd) ? -1 : 1;
}

int sk_orec_next_range(sk_orec *o, sk_orange *r)
{
    if (o->ranges_left == 0)
        return 0;
    o->ranges_left--;
    r->stream = sk_rd_u64(&o->rd);
    r->start = sk_rd_u64(&o->rd);
    r->end = sk_rd_u64(&o->rd);
    r->size = sk_rd_u64(&o->rd);
    r->max_ts = (int64_t)sk_rd_u64(&o->rd);
    r->records = sk_rd_u64(&o->rd);
    return sk_rd_failed(&o->rd) ? -1 : 1;
}

int sk_orec_next_retired(sk_orec *o, const char **key, size_t *klen, int64_t *delete_after_ms)
{
    if (o->phase == 0) {
        sk_oobj tmp;
        int rc;
        while ((rc = sk_orec_next_obj(o, &tmp)) == 1)
            ;
        if (rc < 0)
            return -1;
    }
    if (o->retired_left == 0)
        return sk_rd_left(&o->rd) == 0 ? 0 : -1;
    o->retired_left--;
    *key = (const char *)sk_rd_str(&o->rd, klen);
    *delete_after_ms = (int64_t)sk_rd_u64(&o->rd);
    return sk_rd_failed(&o->rd) ? -1 : 1;
}
