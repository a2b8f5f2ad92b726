/*
 * store_handoff: partitions moving between logs, as the SQLite view sees
 * them (hstate.h, docs/cluster.md "HANDOFF and ADOPT").
 *
 * A HANDOFF removes the partition from this view: its row, producers and
 * batches, the ranges of its stream, and the committed offsets of the groups
 * it carries. An object left with no range here went with the partition (its
 * adopter owns it now) and is forgotten, not retired; one that keeps ranges of
 * other streams is shared from then on. An ADOPT adds all of it, its batches
 * indexed in the log that holds them. A DROP removes a partition without a
 * successor (its topic is gone): its objects are then retired as usual.
 */
#include <stdlib.h>
#include <string.h>

#include "groups.h"
#include "hstate.h"
#include "meta.h"
#include "sk_err.h"
#include "sk_log.h"
#include "store_impl.h"

/* ---- applying records (the writer connection) ---- */

static int run(sk_store *s, const char *sql, const kc_uuid *id, int32_t part)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(s->db, sql);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : store_db_err(s->db, sql);
}

/* The partition's row, producers and batches, and its stream's ranges. */
static int remove_partition(sk_store *s, const kc_uuid *id, int32_t part)
{
    static const char *const sql[] = {
        ("DELETE FROM object_ranges WHERE stream = (SELECT stream FROM partitions"
         " WHERE topic = ?1 AND part = ?2)"),
        "DELETE FROM partitions WHERE topic = ?1 AND part = ?2",
        "DELETE FROM producers WHERE topic = ?1 AND part = ?2",
        "DELETE FROM batches WHERE topic = ?1 AND part = ?2",
        "DELETE FROM txn_open WHERE topic = ?1 AND part = ?2",
        "DELETE FROM txn_aborted WHERE topic = ?1 AND part = ?2",
    };
    for (size_t i = 0; i < sizeof sql / sizeof sql[0]; i++)
        if (run(s, sql[i], id, part))
            return SK_ERR_IO;
    return 0;
}

static int key_stmt(sk_store *s, const char *sql, const char *key, size_t klen)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(s->db, sql);
    sqlite3_bind_text(st, 1, key, (int)klen, SQLITE_STATIC);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE || rc == SQLITE_ROW ? 0 : store_db_err(s->db, sql);
}

/* After the partition's ranges left: each of its objects is forgotten when
 * nothing of it is left here, else marked shared. */
static int release_objects(sk_store *s, const sk_hstate *h)
{
    for (uint32_t i = 0; i < h->nobjects; i++) {
        const sk_hobj *o = &h->objects[i];
        if (key_stmt(s,
                     "DELETE FROM objects WHERE key = ?1 AND NOT EXISTS (SELECT 1 FROM"
                     " object_ranges WHERE key = ?1)",
                     o->key, o->klen) ||
            key_stmt(s, "UPDATE objects SET shared = 1 WHERE key = ?1", o->key, o->klen))
            return SK_ERR_IO;
    }
    return 0;
}

static int forget_groups(sk_store *s, const sk_hstate *h)
{
    for (uint32_t i = 0; i < h->ngroups; i++) {
        sk_grec g;
        if (sk_grec_init(&g, h->groups[i], h->group_lens[i]) != 0)
            return SK_ERR_CORRUPT;
        sqlite3_stmt *st = sk_store_stmt(s, ST_DEL_GROUP);
        sqlite3_bind_text(st, 1, g.group, (int)g.glen, SQLITE_STATIC);
        if (store_step_done(s, st))
            return SK_ERR_IO;
    }
    return 0;
}

/* The ids whose state left with the partition. */
static int forget_txns(sk_store *s, const sk_hstate *h)
{
    for (uint32_t i = 0; i < h->ntxns; i++) {
        sk_rd rd;
        sk_rd_init(&rd, h->txns[i], h->txn_lens[i]);
        size_t idlen;
        const uint8_t *id = sk_rd_str(&rd, &idlen);
        if (sk_rd_failed(&rd))
            return SK_ERR_CORRUPT;
        sqlite3_stmt *st;
        const char *sql = "DELETE FROM transactions WHERE txn = ?1";
        if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
            return store_db_err(s->db, sql);
        sqlite3_bind_blob(st, 1, idlen ? (const void *)id : "", (int)idlen, SQLITE_STATIC);
        int rc = sqlite3_step(st);
        sqlite3_finalize(st);
        if (rc != SQLITE_DONE)
            return store_db_err(s->db, sql);
    }
    return 0;
}

static int note_handoff(sk_store *s, const kc_uuid *id, int32_t part, wal_lsn lsn)
{
    sqlite3_stmt *st;
    const char *sql = "INSERT OR REPLACE INTO handoffs(topic, part, lsn) VALUES(?1, ?2, ?3)";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(s->db, sql);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, (int64_t)lsn);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_db_err(s->db, sql);
}

int apply_handoff(sk_store *s, const uint8_t *body, size_t len, wal_lsn lsn)
{
    sk_hstate h;
    int rc = sk_hstate_decode(body, len, &h);
    if (rc)
        return rc;
    rc = remove_partition(s, &h.id, h.part);
    if (rc == 0)
        rc = release_objects(s, &h);
    if (rc == 0)
        rc = forget_groups(s, &h);
    if (rc == 0)
        rc = forget_txns(s, &h);
    if (rc == 0)
        rc = note_handoff(s, &h.id, h.part, lsn);
    sk_hstate_free(&h);
    return rc;
}

static int adopt_row(sk_store *s, const sk_hstate *h)
{
    uint64_t bytes = 0;
    for (uint32_t i = 0; i < h->nbatches; i++)
        bytes += h->batches[i].len;
    sqlite3_stmt *st;
    const char *sql = "INSERT OR REPLACE INTO partitions(topic, part, stream, log_start,"
                      " next_offset, leader_epoch, max_ts, max_ts_base, bytes)"
                      " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(s->db, sql);
    sqlite3_bind_blob(st, 1, h->id.b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, h->part);
    sqlite3_bind_int64(st, 3, (int64_t)h->stream);
    sqlite3_bind_int64(st, 4, h->log_start);
    sqlite3_bind_int64(st, 5, h->next_offset);
    sqlite3_bind_int(st, 6, h->epoch);
    sqlite3_bind_int64(st, 7, h->max_ts);
    sqlite3_bind_int64(st, 8, h->max_ts_base);
    sqlite3_bind_int64(st, 9, (int64_t)bytes);
    int rc = sqlite3_step(st);
    sqlite3_finalize(st);
    return rc == SQLITE_DONE ? 0 : store_db_err(s->db, sql);
}

static int adopt_producers(sk_store *s, const sk_hstate *h)
{
    for (uint32_t i = 0; i < h->nproducers; i++) {
        sk_buf b;
        sk_buf_init(&b, 4096);
        sk_pstate_put(&b, &h->producers[i]);
        sqlite3_stmt *st = sk_store_stmt(s, ST_PUT_PROD);
        sqlite3_bind_blob(st, 1, h->id.b, 16, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, h->part);
        sqlite3_bind_int64(st, 3, h->producers[i].pid);
        sqlite3_bind_blob(st, 4, b.data, (int)b.len, SQLITE_TRANSIENT);
        int rc = sk_buf_failed(&b) ? SK_ERR_NOMEM : store_step_done(s, st);
        sk_buf_free(&b);
        if (rc)
            return rc;
    }
    return 0;
}

static int adopt_batches(sk_store *s, const sk_hstate *h)
{
    sqlite3_stmt *st;
    const char *sql = "INSERT OR REPLACE INTO batches(topic, part, base, last, lsn, len, max_ts,"
                      " log) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(s->db, sql);
    int rc = 0;
    for (uint32_t i = 0; i < h->nbatches && rc == 0; i++) {
        const sk_hbatch *x = &h->batches[i];
        sqlite3_reset(st);
        sqlite3_bind_blob(st, 1, h->id.b, 16, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, h->part);
        sqlite3_bind_int64(st, 3, x->base);
        sqlite3_bind_int64(st, 4, x->last);
        sqlite3_bind_int64(st, 5, (int64_t)x->lsn);
        sqlite3_bind_int64(st, 6, x->len);
        sqlite3_bind_int64(st, 7, x->max_ts);
        sqlite3_bind_int64(st, 8, x->log);
        if (sqlite3_step(st) != SQLITE_DONE)
            rc = store_db_err(s->db, sql);
    }
    sqlite3_finalize(st);
    return rc;
}

static int adopt_object(sk_store *s, const sk_hstate *h, const sk_hobj *o)
{
    sqlite3_stmt *st;
    const char *sql = "INSERT INTO objects(key, kind, size, created, delete_after, shared)"
                      " VALUES(?1, ?2, ?3, ?4, NULL, ?5) ON CONFLICT(key) DO UPDATE SET"
                      " shared = max(shared, excluded.shared)";
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(s->db, sql);
    sqlite3_bind_text(st, 1, o->key, (int)o->klen, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, o->kind);
    sqlite3_bind_int64(st, 3, (int64_t)o->size);
    sqlite3_bind_int64(st, 4, o->created_ms);
    sqlite3_bind_int(st, 5, (o->flags & SK_HOBJ_SHARED) ? 1 : 0);
    int rc = sqlite3_step(st) == SQLITE_DONE ? 0 : store_db_err(s->db, sql);
    sqlite3_finalize(st);
    for (uint32_t k = 0; k < o->nranges && rc == 0; k++) {
        const sk_hrange *r = &o->ranges[k];
        st = sk_store_stmt(s, ST_PUT_RANGE);
        sqlite3_bind_int64(st, 1, (int64_t)h->stream);
        sqlite3_bind_int64(st, 2, (int64_t)r->start);
        sqlite3_bind_int64(st, 3, (int64_t)r->end);
        sqlite3_bind_text(st, 4, o->key, (int)o->klen, SQLITE_STATIC);
        sqlite3_bind_int64(st, 5, (int64_t)r->size);
        sqlite3_bind_int64(st, 6, r->max_ts);
        sqlite3_bind_int64(st, 7, (int64_t)r->records);
        rc = store_step_done(s, st);
    }
    return rc;
}

/* The partition's open and aborted transactions (txidx.h). */
static int adopt_txidx(sk_store *s, const sk_hstate *h)
{
    for (uint32_t i = 0; i < h->ntxidx; i++) {
        const sk_txidx_ent *e = &h->txidx[i];
        sqlite3_stmt *st = sk_store_stmt(s, e->last < 0 ? ST_TXO_PUT : ST_TXA_PUT);
        sqlite3_bind_blob(st, 1, h->id.b, 16, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, h->part);
        if (e->last < 0) {
            sqlite3_bind_int64(st, 3, e->pid);
            sqlite3_bind_int64(st, 4, e->first);
        } else {
            sqlite3_bind_int64(st, 3, e->last);
            sqlite3_bind_int64(st, 4, e->pid);
            sqlite3_bind_int64(st, 5, e->first);
        }
        if (store_step_done(s, st))
            return SK_ERR_IO;
    }
    return 0;
}

int apply_adopt(sk_store *s, const uint8_t *body, size_t len)
{
    sk_hstate h;
    int rc = sk_hstate_decode(body, len, &h);
    if (rc)
        return rc;
    /* Whatever an earlier stay left here is replaced by the state as it
     * comes now. */
    rc = remove_partition(s, &h.id, h.part);
    if (rc == 0)
        rc = adopt_row(s, &h);
    if (rc == 0)
        rc = adopt_producers(s, &h);
    if (rc == 0)
        rc = adopt_batches(s, &h);
    for (uint32_t i = 0; i < h.nobjects && rc == 0; i++)
        rc = adopt_object(s, &h, &h.objects[i]);
    for (uint32_t i = 0; i < h.ngroups && rc == 0; i++)
        rc = apply_group(s, h.groups[i], h.group_lens[i]);
    for (uint32_t i = 0; i < h.ntxns && rc == 0; i++)
        rc = apply_txn(s, h.txns[i], h.txn_lens[i]);
    if (rc == 0)
        rc = adopt_txidx(s, &h);
    if (rc == 0)
        rc = run(s, "DELETE FROM handoffs WHERE topic = ?1 AND part = ?2", &h.id, h.part);
    sk_hstate_free(&h);
    return rc;
}

int apply_drop(sk_store *s, const kc_uuid *id, int32_t part)
{
    /* Objects left without ranges are retired by the tier's next listing,
     * as after a topic deletion. */
    int rc = remove_partition(s, id, part);
    if (rc == 0)
        rc = run(s, "DELETE FROM handoffs WHERE topic = ?1 AND part = ?2", id, part);
    return rc;
}

/* ---- reading a partition's state (reader connections) ---- */

static void patch_u32(sk_buf *b, size_t at, uint32_t v)
{
    if (sk_buf_failed(b) || at + 4 > b->len)
        return;
    for (int i = 0; i < 4; i++)
        b->data[at + (size_t)i] = (uint8_t)(v >> (8 * i));
}

/* Reserves a u32 count to be patched once known; returns where it is. */
static size_t count_slot(sk_buf *b)
{
    size_t at = b->len;
    sk_buf_u32(b, 0);
    return at;
}

static int enc_head(sqlite3 *db, const kc_uuid *id, int32_t part, sk_buf *b, uint64_t *stream)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT stream, log_start, next_offset, leader_epoch, max_ts, max_ts_base"
                      " FROM partitions WHERE topic = ?1 AND part = ?2";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    int rc = SK_ERR_NOENT;
    if (sqlite3_step(st) == SQLITE_ROW) {
        *stream = (uint64_t)sqlite3_column_int64(st, 0);
        sk_buf_u8(b, 2); /* hstate version (with transactional ids) */
        sk_buf_put(b, id->b, 16);
        sk_buf_u32(b, (uint32_t)part);
        sk_buf_u32(b, (uint32_t)sqlite3_column_int(st, 3));
        sk_buf_u64(b, *stream);
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 1));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 2));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 4));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 5));
        sk_buf_u64(b, 0); /* source log and LSN: set in ADOPT */
        sk_buf_u64(b, 0);
        rc = 0;
    }
    sqlite3_finalize(st);
    return rc;
}

static int enc_producers(sqlite3 *db, const kc_uuid *id, int32_t part, sk_buf *b)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT state FROM producers WHERE topic = ?1 AND part = ?2";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    size_t at = count_slot(b);
    uint32_t n = 0;
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        sk_rd rd;
        sk_rd_init(&rd, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
        sk_pstate ps;
        if (sk_pstate_get(&rd, &ps) != 0) {
            rc = SK_ERR_CORRUPT;
            break;
        }
        sk_pstate_put(b, &ps);
        n++;
    }
    sqlite3_finalize(st);
    patch_u32(b, at, n);
    return rc;
}

static int enc_batches(sqlite3 *db, const kc_uuid *id, int32_t part, int64_t own_log,
                       sk_buf *b)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT log, lsn, len, base, last, max_ts FROM batches"
                      " WHERE topic = ?1 AND part = ?2 ORDER BY base";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    size_t at = count_slot(b);
    uint32_t n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t log = sqlite3_column_int64(st, 0);
        sk_buf_u64(b, (uint64_t)(log ? log : own_log));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 1));
        sk_buf_u32(b, (uint32_t)sqlite3_column_int64(st, 2));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 3));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 4));
        sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 5));
        n++;
    }
    sqlite3_finalize(st);
    patch_u32(b, at, n);
    return 0;
}

/* The stream's ranges, grouped by object (rows come ordered by key). */
static int enc_objects(sqlite3 *db, uint64_t stream, sk_buf *b)
{
    sqlite3_stmt *st;
    const char *sql =
        "SELECT r.key, o.kind, o.size, o.created, o.shared OR EXISTS (SELECT 1 FROM"
        " object_ranges x WHERE x.key = r.key AND x.stream <> ?1), r.start, r.end, r.size,"
        " r.max_ts, r.records FROM object_ranges r JOIN objects o ON o.key = r.key"
        " WHERE r.stream = ?1 ORDER BY r.key, r.start";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    sqlite3_bind_int64(st, 1, (int64_t)stream);
    size_t nobj_at = count_slot(b), nr_at = 0;
    uint32_t nobj = 0, nr = 0;
    char *prev = NULL;
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(st, 0);
        if (!key)
            continue;
        if (!prev || strcmp(prev, key) != 0) {
            if (prev)
                patch_u32(b, nr_at, nr);
            free(prev);
            prev = strdup(key);
            if (!prev)
                rc = SK_ERR_NOMEM;
            sk_buf_str(b, key, strlen(key));
            sk_buf_u8(b, (uint8_t)sqlite3_column_int(st, 1));
            sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 2));
            sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, 3));
            sk_buf_u8(b, sqlite3_column_int(st, 4) ? SK_HOBJ_SHARED : 0);
            nr_at = count_slot(b);
            nr = 0;
            nobj++;
        }
        for (int c = 5; c < 10; c++)
            sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, c));
        nr++;
    }
    if (prev)
        patch_u32(b, nr_at, nr);
    free(prev);
    sqlite3_finalize(st);
    patch_u32(b, nobj_at, nobj);
    return rc;
}

/* The consumer-protocol groups' states `want` picks: their last records,
 * which load as any group body does. */
static int enc_consumer_groups(sqlite3 *db, sk_store_group_filter want, void *arg, sk_buf *b,
                               uint32_t *ngroups)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT grp, body FROM consumer_groups";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *g = sqlite3_column_blob(st, 0);
        size_t gl = (size_t)sqlite3_column_bytes(st, 0);
        if (!want || !g || !want(arg, g, gl))
            continue;
        sk_buf_str(b, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
        (*ngroups)++;
    }
    sqlite3_finalize(st);
    return 0;
}

/* Committed offsets of the groups `want` picks, one commit body each (rows
 * come ordered by group). */
static int enc_groups(sqlite3 *db, sk_store_group_filter want, void *arg, sk_buf *b)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT grp, topic, part, off, epoch, meta, ts FROM group_offsets"
                      " ORDER BY grp";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    size_t at = count_slot(b);
    uint32_t ngroups = 0, nents = 0;
    size_t nents_at = 0;
    sk_buf body;
    sk_buf_init(&body, 64u << 20);
    char *cur = NULL;
    int rc = 0;
    while (rc == 0) {
        int step = sqlite3_step(st);
        const char *g = step == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
        bool same = g && cur && strcmp(g, cur) == 0;
        if (cur && !same) {
            /* The previous group is complete, unless it outgrew what a
             * record holds: a body cut short would not parse. */
            patch_u32(&body, nents_at, nents);
            if (sk_buf_failed(&body))
                rc = SK_ERR_NOMEM;
            sk_buf_str(b, (const char *)body.data, body.len);
            ngroups++;
            free(cur);
            cur = NULL;
        }
        if (!g || rc)
            break;
        if (!same) {
            if (!want || !want(arg, g, strlen(g)))
                continue;
            cur = strdup(g);
            if (!cur) {
                rc = SK_ERR_NOMEM;
                break;
            }
            sk_buf_free(&body);
            sk_buf_init(&body, 64u << 20);
            /* The count of entries (after op and group) is patched once
             * the group is complete, like the other counts. */
            sk_grec_begin(&body, SK_GREC_COMMIT, g, strlen(g), 0);
            nents_at = 1 + 4 + strlen(g);
            nents = 0;
        }
        sk_grec_ent e = {0};
        e.topic = (const char *)sqlite3_column_text(st, 1);
        e.tlen = e.topic ? strlen(e.topic) : 0;
        e.part = sqlite3_column_int(st, 2);
        e.offset = sqlite3_column_int64(st, 3);
        e.epoch = sqlite3_column_int(st, 4);
        e.meta = sqlite3_column_blob(st, 5);
        e.mlen = (size_t)sqlite3_column_bytes(st, 5);
        e.ts = sqlite3_column_int64(st, 6);
        sk_grec_put(&body, SK_GREC_COMMIT, &e);
        nents++;
    }
    free(cur);
    sk_buf_free(&body);
    sqlite3_finalize(st);
    if (rc == 0)
        rc = enc_consumer_groups(db, want, arg, b, &ngroups);
    patch_u32(b, at, ngroups);
    return rc;
}

/* The transactional ids `want` picks: their last records. */
static int enc_txns(sqlite3 *db, sk_store_group_filter want, void *arg, sk_buf *b)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT txn, body FROM transactions";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    size_t at = count_slot(b);
    uint32_t n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        const char *id = sqlite3_column_blob(st, 0);
        size_t il = (size_t)sqlite3_column_bytes(st, 0);
        if (!want || !id || !want(arg, id, il))
            continue;
        sk_buf_str(b, sqlite3_column_blob(st, 1), (size_t)sqlite3_column_bytes(st, 1));
        n++;
    }
    sqlite3_finalize(st);
    patch_u32(b, at, n);
    return 0;
}

/* The partition's transaction index: open ones (last -1), then aborted. */
static int enc_txidx(sqlite3 *db, const kc_uuid *id, int32_t part, sk_buf *b)
{
    sqlite3_stmt *st;
    const char *sql = "SELECT pid, first, -1 FROM txn_open WHERE topic = ?1 AND part = ?2"
                      " UNION ALL SELECT pid, first, last FROM txn_aborted"
                      " WHERE topic = ?1 AND part = ?2";
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, sql);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    size_t at = count_slot(b);
    uint32_t n = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        for (int c = 0; c < 3; c++)
            sk_buf_u64(b, (uint64_t)sqlite3_column_int64(st, c));
        n++;
    }
    sqlite3_finalize(st);
    patch_u32(b, at, n);
    return 0;
}

int sk_store_encode_state(sk_store *s, const kc_uuid *id, int32_t part, int64_t own_log,
                          sk_store_group_filter want, void *arg, sk_buf *out)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    /* One read transaction: the state at one position of the log, whatever
     * the store thread applies meanwhile (an upload registered between the
     * batches and the objects would put offsets in both). */
    uint64_t stream = 0;
    int rc = store_exec(db, "BEGIN");
    if (rc == 0) {
        rc = enc_head(db, id, part, out, &stream);
        if (rc == 0)
            rc = enc_producers(db, id, part, out);
        if (rc == 0)
            rc = enc_batches(db, id, part, own_log, out);
        if (rc == 0)
            rc = enc_objects(db, stream, out);
        if (rc == 0)
            rc = enc_groups(db, want, arg, out);
        if (rc == 0)
            rc = enc_txns(db, want, arg, out);
        if (rc == 0)
            rc = enc_txidx(db, id, part, out);
        if (store_exec(db, "COMMIT") != 0 && rc == 0)
            rc = SK_ERR_IO;
    }
    reader_put(s, db);
    if (rc == 0 && sk_buf_failed(out))
        rc = SK_ERR_NOMEM;
    return rc;
}

int sk_store_handoff_lsn(sk_store *s, const kc_uuid *id, int32_t part, wal_lsn *lsn)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    const char *sql = "SELECT lsn FROM handoffs WHERE topic = ?1 AND part = ?2";
    int rc = SK_ERR_IO;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) == SQLITE_OK) {
        sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, part);
        rc = 0;
        if (sqlite3_step(st) == SQLITE_ROW)
            *lsn = (wal_lsn)sqlite3_column_int64(st, 0);
        else
            rc = SK_ERR_NOENT;
        sqlite3_finalize(st);
    } else {
        store_db_err(db, sql);
    }
    reader_put(s, db);
    return rc;
}

int sk_store_owned_partitions(sk_store *s, void (*fn)(void *arg, const kc_uuid *id, int32_t part),
                              void *arg)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    const char *sql = "SELECT topic, part FROM partitions";
    int rc = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = store_db_err(db, sql);
    } else {
        while (sqlite3_step(st) == SQLITE_ROW) {
            kc_uuid id;
            if (sqlite3_column_bytes(st, 0) != 16)
                continue;
            memcpy(id.b, sqlite3_column_blob(st, 0), 16);
            fn(arg, &id, sqlite3_column_int(st, 1));
        }
        sqlite3_finalize(st);
    }
    reader_put(s, db);
    return rc;
}
