#include "store.h"
#include "store_impl.h"

#include <pthread.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "groups.h"
#include "kbatch.h"
#include "pstate.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_workq.h"

#define SCHEMA_VERSION 3

static const char *const schema =
    "CREATE TABLE IF NOT EXISTS kv(k TEXT PRIMARY KEY, v BLOB);"
    "CREATE TABLE IF NOT EXISTS topics(id BLOB PRIMARY KEY, name TEXT UNIQUE NOT NULL,"
    "  partitions INTEGER NOT NULL, rf INTEGER NOT NULL, configs BLOB NOT NULL);"
    "CREATE TABLE IF NOT EXISTS partitions(topic BLOB, part INTEGER, stream INTEGER,"
    "  log_start INTEGER, next_offset INTEGER, leader_epoch INTEGER, max_ts INTEGER,"
    "  max_ts_base INTEGER, bytes INTEGER, PRIMARY KEY(topic, part)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS batches(topic BLOB, part INTEGER, base INTEGER, last INTEGER,"
    "  lsn INTEGER, len INTEGER, max_ts INTEGER, log INTEGER NOT NULL DEFAULT 0,"
    "  PRIMARY KEY(topic, part, base)) WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS batches_lsn ON batches(lsn);"
    "CREATE TABLE IF NOT EXISTS producers(topic BLOB, part INTEGER, pid INTEGER, state BLOB,"
    "  PRIMARY KEY(topic, part, pid)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS group_offsets(grp TEXT, topic TEXT, part INTEGER, off INTEGER,"
    "  epoch INTEGER, meta BLOB, ts INTEGER, PRIMARY KEY(grp, topic, part)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS objects(key TEXT PRIMARY KEY, kind INTEGER, size INTEGER,"
    "  created INTEGER, delete_after INTEGER, shared INTEGER NOT NULL DEFAULT 0) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS object_ranges(stream INTEGER, start INTEGER, end INTEGER,"
    "  key TEXT, size INTEGER, max_ts INTEGER, records INTEGER, PRIMARY KEY(stream, start))"
    "  WITHOUT ROWID;"
    "CREATE INDEX IF NOT EXISTS object_ranges_key ON object_ranges(key);"
    "CREATE TABLE IF NOT EXISTS handoffs(topic BLOB, part INTEGER, lsn INTEGER,"
    "  PRIMARY KEY(topic, part)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS group_configs(grp BLOB PRIMARY KEY, body BLOB NOT NULL)"
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS consumer_groups(grp BLOB PRIMARY KEY, body BLOB NOT NULL)"
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS user_configs(usr BLOB PRIMARY KEY, body BLOB NOT NULL)"
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS acls(acl BLOB PRIMARY KEY, body BLOB NOT NULL) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS transactions(txn BLOB PRIMARY KEY, body BLOB NOT NULL)"
    "  WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS txn_open(topic BLOB, part INTEGER, pid INTEGER, first INTEGER,"
    "  PRIMARY KEY(topic, part, pid)) WITHOUT ROWID;"
    "CREATE TABLE IF NOT EXISTS txn_aborted(topic BLOB, part INTEGER, last INTEGER, pid INTEGER,"
    "  first INTEGER, PRIMARY KEY(topic, part, last)) WITHOUT ROWID;";

/* Views of schema 2 (before the cluster) gain the columns of schema 3. */
static const char *const migrate_2_3 =
    "BEGIN IMMEDIATE;"
    "ALTER TABLE batches ADD COLUMN log INTEGER NOT NULL DEFAULT 0;"
    "ALTER TABLE objects ADD COLUMN shared INTEGER NOT NULL DEFAULT 0;"
    "INSERT OR REPLACE INTO kv(k, v) VALUES('schema', 3);"
    "COMMIT;";

static const char *const stmt_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    [ST_SET_KV] = "INSERT OR REPLACE INTO kv(k, v) VALUES(?1, ?2)",
    [ST_INS_BATCH] = "INSERT OR REPLACE INTO batches(topic, part, base, last, lsn, len, max_ts)"
                     " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_UPD_PART_DATA] =
        "UPDATE partitions SET next_offset = max(next_offset, ?3), bytes = bytes + ?4,"
        " max_ts_base = CASE WHEN ?5 > max_ts THEN ?6 ELSE max_ts_base END,"
        " max_ts = max(max_ts, ?5) WHERE topic = ?1 AND part = ?2",
    [ST_GET_PROD] = "SELECT state FROM producers WHERE topic = ?1 AND part = ?2 AND pid = ?3",
    [ST_PUT_PROD] = "INSERT OR REPLACE INTO producers(topic, part, pid, state) VALUES(?1,?2,?3,?4)",
    [ST_INS_TOPIC] = "INSERT OR REPLACE INTO topics(id, name, partitions, rf, configs)"
                     " VALUES(?1, ?2, ?3, ?4, ?5)",
    [ST_INS_PART] = "INSERT OR IGNORE INTO partitions(topic, part, stream, log_start, next_offset,"
                    " leader_epoch, max_ts, max_ts_base, bytes) VALUES(?1, ?2, ?8, ?3, ?4, ?5, ?6, ?7, 0)",
    [ST_DEL_TOPIC] = "DELETE FROM topics WHERE id = ?1",
    [ST_DEL_TOPIC_PARTS] = "DELETE FROM partitions WHERE topic = ?1",
    [ST_DEL_TOPIC_BATCHES] = "DELETE FROM batches WHERE topic = ?1",
    [ST_DEL_TOPIC_PRODS] = "DELETE FROM producers WHERE topic = ?1",
    [ST_UPD_TOPIC_CONF] = "UPDATE topics SET configs = ?2 WHERE id = ?1",
    [ST_UPD_TOPIC_NPARTS] = "UPDATE topics SET partitions = ?2 WHERE id = ?1",
    [ST_UPD_LOG_START] =
        "UPDATE partitions SET log_start = max(log_start, ?3),"
        " next_offset = max(next_offset, ?3) WHERE topic = ?1 AND part = ?2",
    [ST_DEL_BATCHES_BELOW] =
        "DELETE FROM batches WHERE topic = ?1 AND part = ?2 AND base < ?3 AND last < ?3",
    [ST_UPD_PART_BYTES] =
        "UPDATE partitions SET bytes = (SELECT coalesce(sum(len), 0) FROM batches"
        " WHERE topic = ?1 AND part = ?2) WHERE topic = ?1 AND part = ?2",
    [ST_PUT_GOFF] = "INSERT OR REPLACE INTO group_offsets(grp, topic, part, off, epoch, meta, ts)"
                    " VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_DEL_GOFF] = "DELETE FROM group_offsets WHERE grp = ?1 AND topic = ?2 AND part = ?3",
    [ST_DEL_GROUP] = "DELETE FROM group_offsets WHERE grp = ?1",
    [ST_PUT_CGROUP] = "INSERT OR REPLACE INTO consumer_groups(grp, body) VALUES(?1, ?2)",
    [ST_DEL_CGROUP] = "DELETE FROM consumer_groups WHERE grp = ?1",
    [ST_PUT_TXN] = "INSERT OR REPLACE INTO transactions(txn, body) VALUES(?1, ?2)",
    [ST_DEL_TXN] = "DELETE FROM transactions WHERE txn = ?1",
    [ST_TXO_PUT] = "INSERT OR IGNORE INTO txn_open(topic, part, pid, first) VALUES(?1, ?2, ?3, ?4)",
    [ST_TXO_GET] = "SELECT first FROM txn_open WHERE topic = ?1 AND part = ?2 AND pid = ?3",
    [ST_TXO_DEL] = "DELETE FROM txn_open WHERE topic = ?1 AND part = ?2 AND pid = ?3",
    [ST_TXA_DEL_BELOW] = "DELETE FROM txn_aborted WHERE topic = ?1 AND part = ?2 AND last < ?3",
    [ST_TXA_PUT] = "INSERT OR REPLACE INTO txn_aborted(topic, part, last, pid, first)"
                   " VALUES(?1, ?2, ?3, ?4, ?5)",
    [ST_PUT_GCONF] = "INSERT OR REPLACE INTO group_configs(grp, body) VALUES(?1,?2)",
    [ST_DEL_GCONF] = "DELETE FROM group_configs WHERE grp = ?1",
    [ST_PUT_UCONF] = "INSERT OR REPLACE INTO user_configs(usr, body) VALUES(?1,?2)",
    [ST_DEL_UCONF] = "DELETE FROM user_configs WHERE usr = ?1",
    [ST_PUT_ACL] = "INSERT OR REPLACE INTO acls(acl, body) VALUES(?1,?2)",
    [ST_DEL_ACL] = "DELETE FROM acls WHERE acl = ?1",
    [ST_DEL_TOPIC_GOFFS] =
        "DELETE FROM group_offsets WHERE topic = (SELECT name FROM topics WHERE id = ?1)",
    [ST_PUT_OBJ] = "INSERT OR REPLACE INTO objects(key, kind, size, created, delete_after)"
                   " VALUES(?1, ?2, ?3, ?4, NULL)",
    [ST_PUT_RANGE] = "INSERT OR REPLACE INTO object_ranges(stream, start, end, key, size, max_ts,"
                     " records) VALUES(?1, ?2, ?3, ?4, ?5, ?6, ?7)",
    [ST_DEL_BATCHES_UPLOADED] = "DELETE FROM batches WHERE log = 0 AND lsn < ?1",
    [ST_RETIRE_OBJ] = "UPDATE objects SET delete_after = ?2 WHERE key = ?1 AND shared = 0",
    [ST_DEL_OBJ_RANGES] = "DELETE FROM object_ranges WHERE key = ?1",
    [ST_DEL_OBJ] = "DELETE FROM objects WHERE key = ?1",
    [ST_DEL_TOPIC_RANGES] =
        "DELETE FROM object_ranges WHERE stream IN (SELECT stream FROM partitions WHERE topic = ?1)",
    [ST_DEL_RANGES_BELOW] =
        "DELETE FROM object_ranges WHERE stream = (SELECT stream FROM partitions WHERE topic = ?1"
        " AND part = ?2) AND end < ?3",
    [ST_DEL_COVERED] =
        "DELETE FROM batches WHERE log <> 0 AND base >= ?2 AND last <= ?3 AND EXISTS (SELECT 1"
        " FROM partitions p WHERE p.stream = ?1 AND p.topic = batches.topic"
        " AND p.part = batches.part)",
    [ST_FORGET_SHARED] = "DELETE FROM objects WHERE key = ?1 AND shared = 1",
};


int store_db_err(sqlite3 *db, const char *what)
{
    SK_ERROR("store", "%s: %s", what, sqlite3_errmsg(db));
    return SK_ERR_IO;
}

int store_exec(sqlite3 *db, const char *sql)
{
    char *msg = NULL;
    if (sqlite3_exec(db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        SK_ERROR("store", "%s: %s", sql, msg ? msg : "?");
        sqlite3_free(msg);
        return SK_ERR_IO;
    }
    return 0;
}

sqlite3_stmt *sk_store_stmt(sk_store *s, int i)
{
    sqlite3_reset(s->st[i]);
    sqlite3_clear_bindings(s->st[i]);
    return s->st[i];
}

int store_step_done(sk_store *s, sqlite3_stmt *st)
{
    int rc = sqlite3_step(st);
    if (rc != SQLITE_DONE && rc != SQLITE_ROW)
        return store_db_err(s->db, sqlite3_sql(st));
    return 0;
}

int store_kv_get_i64(sqlite3 *db, const char *k, int64_t *v, bool *found)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT v FROM kv WHERE k = ?1", -1, &st, NULL) != SQLITE_OK)
        return store_db_err(db, "prepare kv");
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    *found = false;
    if (sqlite3_step(st) == SQLITE_ROW) {
        *v = sqlite3_column_int64(st, 0);
        *found = true;
    }
    sqlite3_finalize(st);
    return 0;
}

int store_set_kv_i64(sk_store *s, const char *k, int64_t v)
{
    sqlite3_stmt *st = sk_store_stmt(s, ST_SET_KV);
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_int64(st, 2, v);
    return store_step_done(s, st);
}

static int set_kv_blob(sk_store *s, const char *k, const uint8_t *v, size_t n)
{
    sqlite3_stmt *st = sk_store_stmt(s, ST_SET_KV);
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, v, (int)n, SQLITE_TRANSIENT);
    return store_step_done(s, st);
}

static int set_kv_text(sk_store *s, const char *k, const char *v, size_t n)
{
    sqlite3_stmt *st = sk_store_stmt(s, ST_SET_KV);
    sqlite3_bind_text(st, 1, k, -1, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, v, (int)n, SQLITE_TRANSIENT);
    return store_step_done(s, st);
}

static int open_conn(const char *path, bool readonly, sqlite3 **out)
{
    sqlite3 *db;
    int flags = readonly ? SQLITE_OPEN_READONLY : SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE;
    flags |= SQLITE_OPEN_NOMUTEX;
    if (sqlite3_open_v2(path, &db, flags, NULL) != SQLITE_OK) {
        SK_ERROR("store", "cannot open %s: %s", path, db ? sqlite3_errmsg(db) : "?");
        sqlite3_close(db);
        return SK_ERR_IO;
    }
    sqlite3_busy_timeout(db, 5000);
    *out = db;
    return 0;
}

static int prepare_all(sk_store *s)
{
    for (int i = 0; i < ST_COUNT; i++)
        if (sqlite3_prepare_v3(s->db, stmt_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &s->st[i],
                               NULL) != SQLITE_OK)
            return store_db_err(s->db, stmt_sql[i]);
    return 0;
}

static void finalize_all(sk_store *s)
{
    for (int i = 0; i < ST_COUNT; i++) {
        sqlite3_finalize(s->st[i]);
        s->st[i] = NULL;
    }
}

static int read_state(sk_store *s)
{
    int64_t v;
    bool found;
    if (store_kv_get_i64(s->db, "applied", &v, &found))
        return SK_ERR_IO;
    s->applied = found ? (wal_lsn)v : 0;
    s->empty = !found;
    return 0;
}

sk_store *sk_store_open(const char *path, char *why, size_t whylen)
{
    sk_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->path = strdup(path);
    pthread_mutex_init(&s->rlock, NULL);
    if (open_conn(path, false, &s->db)) {
        snprintf(why, whylen, "cannot open the SQLite view %s", path);
        goto fail;
    }
    /* The view is rebuilt from the WAL after a crash, so it needs atomic
     * transactions but not a sync per commit. */
    /* Checkpoints are the view's only syncs: make them rare (40 MB of
     * changes), so that they seldom compete with the WAL's for the disk. */
    if (store_exec(s->db, "PRAGMA journal_mode=WAL") || store_exec(s->db, "PRAGMA synchronous=NORMAL") ||
        store_exec(s->db, "PRAGMA wal_autocheckpoint=10000") ||
        store_exec(s->db, schema)) {
        snprintf(why, whylen, "cannot set up the SQLite view %s: %s", path,
                 sqlite3_errmsg(s->db));
        goto fail;
    }
    int64_t ver;
    bool found;
    if (store_kv_get_i64(s->db, "schema", &ver, &found))
        goto fail_msg;
    if (found && ver == 2) {
        /* One transaction: a crash leaves the view at schema 2 or 3. */
        if (store_exec(s->db, migrate_2_3))
            goto fail_msg;
        ver = SCHEMA_VERSION;
    }
    if (found && ver != SCHEMA_VERSION) {
        snprintf(why, whylen, "the SQLite view %s has schema %lld, this skiffd needs %d", path,
                 (long long)ver, SCHEMA_VERSION);
        goto fail;
    }
    if (prepare_all(s) || read_state(s))
        goto fail_msg;
    if (!found && store_set_kv_i64(s, "schema", SCHEMA_VERSION))
        goto fail_msg;
    return s;
fail_msg:
    snprintf(why, whylen, "SQLite view %s: %s", path, sqlite3_errmsg(s->db));
fail:
    sk_store_close(s);
    return NULL;
}

void sk_store_close(sk_store *s)
{
    if (!s)
        return;
    if (s->q)
        sk_workq_destroy(s->q);
    finalize_all(s);
    for (int i = 0; i < s->nreaders_free; i++)
        sqlite3_close(s->readers[i]);
    if (s->db)
        sqlite3_close(s->db);
    pthread_mutex_destroy(&s->rlock);
    free(s->path);
    free(s);
}

wal_lsn sk_store_applied(const sk_store *s)
{
    return s->applied;
}

bool sk_store_is_empty(const sk_store *s)
{
    return s->empty;
}

int sk_store_reset(sk_store *s)
{
    int rc = store_exec(s->db, "BEGIN IMMEDIATE; DELETE FROM topics; DELETE FROM partitions;"
                         "DELETE FROM batches; DELETE FROM producers; DELETE FROM group_offsets;"
                         "DELETE FROM consumer_groups; DELETE FROM transactions;"
                         "DELETE FROM txn_open; DELETE FROM txn_aborted;"
                         "DELETE FROM objects; DELETE FROM object_ranges; DELETE FROM handoffs;"
                         "DELETE FROM group_configs; DELETE FROM user_configs; DELETE FROM acls; DELETE FROM kv WHERE k <> 'schema';"
                         "COMMIT");
    if (rc == 0) {
        s->applied = 0;
        s->empty = true;
    }
    return rc;
}

/* ---- records ---- */

int sk_store_rec_parse(sk_store_rec *rec, wal_lsn lsn, uint8_t type, const uint8_t *payload,
                       uint32_t len)
{
    memset(rec, 0, sizeof *rec);
    rec->type = type;
    rec->lsn = lsn;
    rec->end = lsn + WAL_RECORD_HEADER + len;
    if (type == SK_WAL_DATA) {
        const uint8_t *batch;
        size_t blen;
        kb_header h;
        kc_uuid id;
        int32_t part;
        if (sk_data_decode(payload, len, &id, &part, &batch, &blen) ||
            kb_parse_header(batch, blen, &h))
            return SK_ERR_CORRUPT;
        sk_store_rec_data(rec, &id, part, &h, (uint32_t)blen);
        if (rec->control == -2)
            rec->control = (int8_t)sk_txidx_control_type(batch, blen);
        rec->lsn = lsn;
        rec->end = lsn + WAL_RECORD_HEADER + len;
        return 0;
    }
    if (type == SK_WAL_LINK) {
        /* A linked batch is indexed at the link's position, as if its
         * bytes were there (reads follow the link). */
        sk_link l;
        kb_header h;
        if (sk_link_decode(payload, len, &l) || kb_parse_header_copy(l.head, sizeof l.head, &h))
            return SK_ERR_CORRUPT;
        sk_store_rec_data(rec, &l.id, l.part, &h, l.len);
        rec->lsn = lsn;
        rec->end = lsn + WAL_RECORD_HEADER + len;
        return 0;
    }
    rec->payload = malloc(len ? len : 1);
    if (!rec->payload)
        return SK_ERR_NOMEM;
    memcpy(rec->payload, payload, len);
    rec->plen = len;
    return 0;
}

void sk_store_rec_data(sk_store_rec *rec, const kc_uuid *id, int32_t part, const kb_header *h,
                       uint32_t batch_len)
{
    memset(rec, 0, sizeof *rec);
    rec->type = SK_WAL_DATA;
    rec->id = *id;
    rec->part = part;
    rec->base = h->base_offset;
    rec->last = h->base_offset + h->last_offset_delta;
    rec->max_ts = h->max_timestamp;
    rec->append_ts = (h->attributes & KB_ATTR_LOG_APPEND_TIME) ? h->max_timestamp : -1;
    rec->len = batch_len;
    rec->pid = h->producer_id;
    rec->epoch = h->producer_epoch;
    rec->base_seq = h->base_sequence;
    rec->txn = (h->attributes & KB_ATTR_TRANSACTIONAL) != 0;
    rec->control = (h->attributes & KB_ATTR_CONTROL) ? -2 : -1;
}

void sk_store_rec_free(sk_store_rec *rec)
{
    free(rec->payload);
    rec->payload = NULL;
}

static sqlite3_stmt *txidx_stmt(sk_store *s, int which, const kc_uuid *id, int32_t part,
                                int64_t pid)
{
    sqlite3_stmt *st = sk_store_stmt(s, which);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, pid);
    return st;
}

/* One row of the transaction index (txidx.h): an open transaction, or an
 * aborted one (last >= 0). */
static int put_txidx(sk_store *s, const kc_uuid *id, int32_t part, const sk_txidx_ent *e)
{
    if (e->last < 0) {
        sqlite3_stmt *st = txidx_stmt(s, ST_TXO_PUT, id, part, e->pid);
        sqlite3_bind_int64(st, 4, e->first);
        return store_step_done(s, st);
    }
    sqlite3_stmt *st = txidx_stmt(s, ST_TXA_PUT, id, part, e->last);
    sqlite3_bind_int64(st, 4, e->pid);
    sqlite3_bind_int64(st, 5, e->first);
    return store_step_done(s, st);
}

/* The transaction index follows the batches as the node's copy does. */
static int apply_txidx(sk_store *s, const sk_store_rec *r)
{
    if (r->control == -1) {
        sk_txidx_ent e = {r->pid, r->base, -1};
        return put_txidx(s, &r->id, r->part, &e);
    }
    sqlite3_stmt *st = txidx_stmt(s, ST_TXO_GET, &r->id, r->part, r->pid);
    bool open = sqlite3_step(st) == SQLITE_ROW;
    int64_t first = open ? sqlite3_column_int64(st, 0) : -1;
    sqlite3_reset(st);
    if (!open)
        return 0;
    if (store_step_done(s, txidx_stmt(s, ST_TXO_DEL, &r->id, r->part, r->pid)))
        return SK_ERR_IO;
    sk_txidx_ent e = {r->pid, first, r->base};
    return r->control == 0 ? put_txidx(s, &r->id, r->part, &e) : 0;
}

static int apply_data(sk_store *s, const sk_store_rec *r)
{
    sqlite3_stmt *st = sk_store_stmt(s, ST_INS_BATCH);
    sqlite3_bind_blob(st, 1, r->id.b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, r->part);
    sqlite3_bind_int64(st, 3, r->base);
    sqlite3_bind_int64(st, 4, r->last);
    sqlite3_bind_int64(st, 5, (int64_t)r->lsn);
    sqlite3_bind_int64(st, 6, r->len);
    sqlite3_bind_int64(st, 7, r->max_ts);
    if (store_step_done(s, st))
        return SK_ERR_IO;
    st = sk_store_stmt(s, ST_UPD_PART_DATA);
    sqlite3_bind_blob(st, 1, r->id.b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, r->part);
    sqlite3_bind_int64(st, 3, r->last + 1);
    sqlite3_bind_int64(st, 4, r->len);
    sqlite3_bind_int64(st, 5, r->max_ts);
    sqlite3_bind_int64(st, 6, r->base);
    if (store_step_done(s, st))
        return SK_ERR_IO;
    if (r->txn && r->pid >= 0 && apply_txidx(s, r) != 0)
        return SK_ERR_IO;
    /* A marker is no batch of the producer's sequence. */
    if (r->pid < 0 || r->control != -1)
        return 0;
    sk_pstate ps;
    memset(&ps, 0, sizeof ps);
    ps.pid = r->pid;
    st = sk_store_stmt(s, ST_GET_PROD);
    sqlite3_bind_blob(st, 1, r->id.b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, r->part);
    sqlite3_bind_int64(st, 3, r->pid);
    if (sqlite3_step(st) == SQLITE_ROW) {
        sk_rd rd;
        sk_rd_init(&rd, sqlite3_column_blob(st, 0), (size_t)sqlite3_column_bytes(st, 0));
        if (sk_pstate_get(&rd, &ps) != 0) {
            memset(&ps, 0, sizeof ps);
            ps.pid = r->pid;
        }
    }
    sqlite3_reset(st);
    sk_pbatch pb = {r->base_seq, sk_seq_add(r->base_seq, (int32_t)(r->last - r->base)), r->base,
                    r->last, r->append_ts, 0};
    sk_pstate_push(&ps, r->epoch, &pb);
    ps.last_ts = r->max_ts;
    sk_buf b;
    sk_buf_init(&b, 4096);
    sk_pstate_put(&b, &ps);
    st = sk_store_stmt(s, ST_PUT_PROD);
    sqlite3_bind_blob(st, 1, r->id.b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, r->part);
    sqlite3_bind_int64(st, 3, r->pid);
    sqlite3_bind_blob(st, 4, b.data, (int)b.len, SQLITE_TRANSIENT);
    int rc = store_step_done(s, st);
    sk_buf_free(&b);
    return rc;
}

static int insert_topic(sk_store *s, const kc_uuid *id, const char *name, size_t name_len,
                        int32_t nparts, int16_t rf, const uint8_t *conf, size_t conf_len)
{
    sqlite3_stmt *st = sk_store_stmt(s, ST_INS_TOPIC);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_text(st, 2, name, (int)name_len, SQLITE_TRANSIENT);
    sqlite3_bind_int(st, 3, nparts);
    sqlite3_bind_int(st, 4, rf);
    sqlite3_bind_blob(st, 5, conf, (int)conf_len, SQLITE_TRANSIENT);
    return store_step_done(s, st);
}

static int insert_part(sk_store *s, const sk_snap_part *p)
{
    sqlite3_stmt *st = sk_store_stmt(s, ST_INS_PART);
    sqlite3_bind_blob(st, 1, p->id.b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, p->part);
    sqlite3_bind_int64(st, 3, p->log_start);
    sqlite3_bind_int64(st, 4, p->next_offset);
    sqlite3_bind_int(st, 5, p->leader_epoch);
    sqlite3_bind_int64(st, 6, p->max_ts);
    sqlite3_bind_int64(st, 7, p->max_ts_base);
    sqlite3_bind_int64(st, 8, (int64_t)p->stream);
    return store_step_done(s, st);
}

/* Partitions created empty by a TOPIC_CREATE or PARTITIONS record. */
static int insert_new_parts(sk_store *s, const kc_uuid *id, int32_t from, int32_t to,
                            uint64_t first_stream)
{
    for (int32_t i = from; i < to; i++) {
        sk_snap_part p = {*id, i, first_stream + (uint64_t)(i - from), 0, 0, 0, -1, -1};
        if (insert_part(s, &p))
            return SK_ERR_IO;
    }
    int64_t cur;
    bool found;
    if (store_kv_get_i64(s->db, "next_stream", &cur, &found))
        return SK_ERR_IO;
    int64_t next = (int64_t)(first_stream + (uint64_t)(to - from));
    if (!found || next > cur)
        return store_set_kv_i64(s, "next_stream", next);
    return 0;
}

static int by_topic(sk_store *s, int stmt, const kc_uuid *id)
{
    sqlite3_stmt *st = sk_store_stmt(s, stmt);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    return store_step_done(s, st);
}

static int topic_nparts(sk_store *s, const kc_uuid *id, int32_t *n)
{
    sqlite3_stmt *st;
    *n = -1;
    if (sqlite3_prepare_v2(s->db, "SELECT partitions FROM topics WHERE id = ?1", -1, &st, NULL))
        return store_db_err(s->db, "prepare");
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    if (sqlite3_step(st) == SQLITE_ROW)
        *n = sqlite3_column_int(st, 0);
    sqlite3_finalize(st);
    return 0;
}

int apply_group(sk_store *s, const uint8_t *body, size_t len)
{
    sk_grec g;
    if (sk_grec_init(&g, body, len) != 0)
        return SK_ERR_CORRUPT;
    if (g.op == SK_GREC_DELETE_GROUP || g.op == SK_GREC_CGROUP) {
        /* A consumer-protocol group's state is one row: its last record
         * (an empty state forgets it). */
        size_t blen = sk_grec_cgroup_len(&g);
        sqlite3_stmt *st = sk_store_stmt(s, blen ? ST_PUT_CGROUP : ST_DEL_CGROUP);
        sqlite3_bind_blob(st, 1, g.glen ? g.group : "", (int)g.glen, SQLITE_STATIC);
        if (blen)
            sqlite3_bind_blob(st, 2, body, (int)len, SQLITE_STATIC);
        int rc = store_step_done(s, st);
        if (rc || g.op == SK_GREC_CGROUP)
            return rc;
        st = sk_store_stmt(s, ST_DEL_GROUP);
        sqlite3_bind_text(st, 1, g.group, (int)g.glen, SQLITE_STATIC);
        return store_step_done(s, st);
    }
    sk_grec_ent e;
    int rc;
    while ((rc = sk_grec_next(&g, &e)) == 1) {
        sqlite3_stmt *st;
        if (g.op == SK_GREC_COMMIT) {
            st = sk_store_stmt(s, ST_PUT_GOFF);
            sqlite3_bind_int64(st, 4, e.offset);
            sqlite3_bind_int(st, 5, e.epoch);
            sqlite3_bind_blob(st, 6, e.meta, (int)e.mlen, SQLITE_STATIC);
            sqlite3_bind_int64(st, 7, e.ts);
        } else {
            st = sk_store_stmt(s, ST_DEL_GOFF);
        }
        sqlite3_bind_text(st, 1, g.group, (int)g.glen, SQLITE_STATIC);
        sqlite3_bind_text(st, 2, e.topic, (int)e.tlen, SQLITE_STATIC);
        sqlite3_bind_int(st, 3, e.part);
        if (store_step_done(s, st))
            return SK_ERR_IO;
    }
    return rc < 0 ? SK_ERR_CORRUPT : 0;
}

static int apply_objects(sk_store *s, const uint8_t *body, size_t len)
{
    sk_orec o;
    if (sk_orec_init(&o, body, len) != 0)
        return SK_ERR_CORRUPT;
    sk_oobj obj;
    int rc;
    while ((rc = sk_orec_next_obj(&o, &obj)) == 1) {
        sqlite3_stmt *st = sk_store_stmt(s, ST_PUT_OBJ);
        sqlite3_bind_text(st, 1, obj.key, (int)obj.klen, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, obj.kind);
        sqlite3_bind_int64(st, 3, (int64_t)obj.size);
        sqlite3_bind_int64(st, 4, obj.created_ms);
        if (store_step_done(s, st))
            return SK_ERR_IO;
        sk_orange r;
        int rr;
        while ((rr = sk_orec_next_range(&o, &r)) == 1) {
            st = sk_store_stmt(s, ST_PUT_RANGE);
            sqlite3_bind_int64(st, 1, (int64_t)r.stream);
            sqlite3_bind_int64(st, 2, (int64_t)r.start);
            sqlite3_bind_int64(st, 3, (int64_t)r.end);
            sqlite3_bind_text(st, 4, obj.key, (int)obj.klen, SQLITE_STATIC);
            sqlite3_bind_int64(st, 5, (int64_t)r.size);
            sqlite3_bind_int64(st, 6, r.max_ts);
            sqlite3_bind_int64(st, 7, (int64_t)r.records);
            if (store_step_done(s, st))
                return SK_ERR_IO;
            /* Adopted batches read from another log's WAL are in the object
             * now: their positions there are needed no more. */
            st = sk_store_stmt(s, ST_DEL_COVERED);
            sqlite3_bind_int64(st, 1, (int64_t)r.stream);
            sqlite3_bind_int64(st, 2, (int64_t)r.start);
            sqlite3_bind_int64(st, 3, (int64_t)r.end);
            if (store_step_done(s, st))
                return SK_ERR_IO;
        }
        if (rr < 0)
            return SK_ERR_CORRUPT;
    }
    if (rc < 0)
        return SK_ERR_CORRUPT;
    const char *key;
    size_t kl;
    int64_t after;
    while ((rc = sk_orec_next_retired(&o, &key, &kl, &after)) == 1) {
        sqlite3_stmt *st = sk_store_stmt(s, ST_DEL_OBJ_RANGES);
        sqlite3_bind_text(st, 1, key, (int)kl, SQLITE_STATIC);
        if (store_step_done(s, st))
            return SK_ERR_IO;
        st = sk_store_stmt(s, ST_RETIRE_OBJ);
        sqlite3_bind_text(st, 1, key, (int)kl, SQLITE_STATIC);
        sqlite3_bind_int64(st, 2, after);
        if (store_step_done(s, st))
            return SK_ERR_IO;
        /* An object that other logs' partitions still hold ranges in is
         * not this log's to delete: it is forgotten here. */
        st = sk_store_stmt(s, ST_FORGET_SHARED);
        sqlite3_bind_text(st, 1, key, (int)kl, SQLITE_STATIC);
        if (store_step_done(s, st))
            return SK_ERR_IO;
    }
    if (rc < 0)
        return SK_ERR_CORRUPT;
    if (o.upload_end > 0) {
        /* Everything below the upload's end is in objects now: the WAL
         * positions of those batches are no longer needed. */
        sqlite3_stmt *st = sk_store_stmt(s, ST_DEL_BATCHES_UPLOADED);
        sqlite3_bind_int64(st, 1, (int64_t)o.upload_end);
        if (store_step_done(s, st))
            return SK_ERR_IO;
        int64_t cur;
        bool found;
        if (store_kv_get_i64(s->db, "uploaded", &cur, &found))
            return SK_ERR_IO;
        if (!found || (int64_t)o.upload_end > cur)
            return store_set_kv_i64(s, "uploaded", (int64_t)o.upload_end);
    }
    return 0;
}

/* A group's or a user's config set (gconf.h's body): kept whole, dropped
 * when empty. */
static int apply_config_set(sk_store *s, const uint8_t *body, size_t len, int put, int del)
{
    sk_rd rd;
    sk_rd_init(&rd, body, len);
    size_t glen;
    const uint8_t *grp = sk_rd_str(&rd, &glen);
    uint32_t count = sk_rd_u32(&rd);
    if (sk_rd_failed(&rd))
        return SK_ERR_CORRUPT;
    sqlite3_stmt *st = sk_store_stmt(s, count ? put : del);
    sqlite3_bind_blob(st, 1, glen ? grp : (const uint8_t *)"", (int)glen, SQLITE_STATIC);
    if (count)
        sqlite3_bind_blob(st, 2, body, (int)len, SQLITE_STATIC);
    return store_step_done(s, st);
}

/* A transactional id's state is one row: its last record (txns.h). */
int apply_txn(sk_store *s, const uint8_t *body, size_t len)
{
    sk_rd rd;
    sk_rd_init(&rd, body, len);
    size_t idlen;
    const uint8_t *id = sk_rd_str(&rd, &idlen);
    if (sk_rd_failed(&rd))
        return SK_ERR_CORRUPT;
    sqlite3_stmt *st = sk_store_stmt(s, ST_PUT_TXN);
    sqlite3_bind_blob(st, 1, idlen ? (const void *)id : "", (int)idlen, SQLITE_STATIC);
    sqlite3_bind_blob(st, 2, body, (int)len, SQLITE_STATIC);
    return store_step_done(s, st);
}

/* An expired transactional id: its row goes. */
static int apply_txn_gone(sk_store *s, const uint8_t *body, size_t len)
{
    sk_rd rd;
    sk_rd_init(&rd, body, len);
    size_t idlen;
    const uint8_t *id = sk_rd_str(&rd, &idlen);
    if (sk_rd_failed(&rd))
        return SK_ERR_CORRUPT;
    sqlite3_stmt *st = sk_store_stmt(s, ST_DEL_TXN);
    sqlite3_bind_blob(st, 1, idlen ? (const void *)id : "", (int)idlen, SQLITE_STATIC);
    return store_step_done(s, st);
}

static int apply_group_config(sk_store *s, const uint8_t *body, size_t len)
{
    return apply_config_set(s, body, len, ST_PUT_GCONF, ST_DEL_GCONF);
}

static int apply_user_config(sk_store *s, const uint8_t *body, size_t len)
{
    return apply_config_set(s, body, len, ST_PUT_UCONF, ST_DEL_UCONF);
}

static int apply_acl(sk_store *s, const uint8_t *body, size_t len)
{
    return apply_config_set(s, body, len, ST_PUT_ACL, ST_DEL_ACL);
}

static int apply_meta(sk_store *s, const sk_store_rec *r)
{
    sk_meta m;
    if (sk_meta_decode(r->payload, r->plen, &m) != 0) {
        SK_ERROR("store", "corrupt metadata record at LSN %llu", (unsigned long long)r->lsn);
        return SK_ERR_CORRUPT;
    }
    switch (m.kind) {
    case SK_META_TOPIC_CREATE:
        if (insert_topic(s, &m.id, m.name, m.name_len, m.nparts, m.rf, m.configs, m.configs_len))
            return SK_ERR_IO;
        return insert_new_parts(s, &m.id, 0, m.nparts, m.first_stream);
    case SK_META_TOPIC_DELETE:
        /* Committed offsets go with the topic, as in Kafka; its object
         * ranges go before its partitions, which map it to streams. */
        if (by_topic(s, ST_DEL_TOPIC_GOFFS, &m.id) || by_topic(s, ST_DEL_TOPIC_RANGES, &m.id) || by_topic(s, ST_DEL_TOPIC, &m.id) || by_topic(s, ST_DEL_TOPIC_PARTS, &m.id) ||
            by_topic(s, ST_DEL_TOPIC_BATCHES, &m.id) || by_topic(s, ST_DEL_TOPIC_PRODS, &m.id))
            return SK_ERR_IO;
        return 0;
    case SK_META_TOPIC_CONFIG: {
        sqlite3_stmt *st = sk_store_stmt(s, ST_UPD_TOPIC_CONF);
        sqlite3_bind_blob(st, 1, m.id.b, 16, SQLITE_STATIC);
        sqlite3_bind_blob(st, 2, m.configs, (int)m.configs_len, SQLITE_TRANSIENT);
        return store_step_done(s, st);
    }
    case SK_META_PARTITIONS: {
        int32_t old;
        if (topic_nparts(s, &m.id, &old))
            return SK_ERR_IO;
        if (old < 0)
            return 0;
        sqlite3_stmt *st = sk_store_stmt(s, ST_UPD_TOPIC_NPARTS);
        sqlite3_bind_blob(st, 1, m.id.b, 16, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, m.nparts);
        if (store_step_done(s, st))
            return SK_ERR_IO;
        return old < m.nparts ? insert_new_parts(s, &m.id, old, m.nparts, m.first_stream) : 0;
    }
    case SK_META_LOG_START: {
        /* The three statements take the same (topic, partition, offset) and
         * run in this order: move the start, then drop what fell below it. */
        static const int below[] = {ST_UPD_LOG_START, ST_DEL_BATCHES_BELOW,
                                    ST_DEL_RANGES_BELOW, ST_TXA_DEL_BELOW};
        sqlite3_stmt *st;
        for (size_t i = 0; i < sizeof below / sizeof below[0]; i++) {
            st = sk_store_stmt(s, below[i]);
            sqlite3_bind_blob(st, 1, m.id.b, 16, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, m.part);
            sqlite3_bind_int64(st, 3, m.value);
            if (store_step_done(s, st))
                return SK_ERR_IO;
        }
        st = sk_store_stmt(s, ST_UPD_PART_BYTES);
        sqlite3_bind_blob(st, 1, m.id.b, 16, SQLITE_STATIC);
        sqlite3_bind_int(st, 2, m.part);
        return store_step_done(s, st);
    }
    case SK_META_PID: {
        int64_t cur;
        bool found;
        if (store_kv_get_i64(s->db, "next_pid", &cur, &found))
            return SK_ERR_IO;
        if (!found || m.value > cur)
            return store_set_kv_i64(s, "next_pid", m.value);
        return 0;
    }
    case SK_META_CLUSTER:
        return set_kv_text(s, "cluster_id", m.name, m.name_len);
    case SK_META_BROKER_CONFIG:
        return set_kv_blob(s, "broker_config", m.configs, m.configs_len);
    case SK_META_GROUP:
        return apply_group(s, m.body, m.body_len);
    case SK_META_GROUP_CONFIG:
        return apply_group_config(s, m.body, m.body_len);
    case SK_META_TXN:
        return apply_txn(s, m.body, m.body_len);
    case SK_META_TXN_GONE:
        return apply_txn_gone(s, m.body, m.body_len);
    case SK_META_USER_CONFIG:
        return apply_user_config(s, m.body, m.body_len);
    case SK_META_ACL:
        return apply_acl(s, m.body, m.body_len);
    case SK_META_HANDOFF:
        return apply_handoff(s, m.body, m.body_len, r->lsn);
    case SK_META_ADOPT:
        return apply_adopt(s, m.body, m.body_len);
    case SK_META_DROP:
        return apply_drop(s, &m.id, m.part);
    case SK_META_OBJECTS:
        return apply_objects(s, m.body, m.body_len);
    case SK_META_OBJECT_GONE: {
        sk_rd rd;
        sk_rd_init(&rd, m.body, m.body_len);
        size_t kl;
        const char *key = (const char *)sk_rd_str(&rd, &kl);
        if (sk_rd_failed(&rd))
            return SK_ERR_CORRUPT;
        sqlite3_stmt *st = sk_store_stmt(s, ST_DEL_OBJ_RANGES);
        sqlite3_bind_text(st, 1, key, (int)kl, SQLITE_STATIC);
        if (store_step_done(s, st))
            return SK_ERR_IO;
        st = sk_store_stmt(s, ST_DEL_OBJ);
        sqlite3_bind_text(st, 1, key, (int)kl, SQLITE_STATIC);
        return store_step_done(s, st);
    }
    }
    return SK_ERR_CORRUPT;
}

/* Applying a preamble snapshot to an empty view. */
static int snap_head(void *arg, const sk_snap_head *h)
{
    sk_store *s = arg;
    if (set_kv_text(s, "cluster_id", h->cluster_id, h->cluster_id_len) ||
        store_set_kv_i64(s, "next_pid", h->next_pid) ||
        store_set_kv_i64(s, "next_stream", (int64_t)h->next_stream) ||
        set_kv_blob(s, "broker_config", h->broker_conf, h->broker_conf_len))
        return SK_ERR_IO;
    return 0;
}

static int snap_topic(void *arg, const kc_uuid *id, const char *name, size_t name_len,
                      int32_t nparts, int16_t rf, const uint8_t *conf, size_t conf_len)
{
    return insert_topic(arg, id, name, name_len, nparts, rf, conf, conf_len);
}

static int snap_part(void *arg, const sk_snap_part *p)
{
    return insert_part(arg, p);
}

static int snap_pstate(void *arg, const kc_uuid *id, int32_t part, const sk_pstate *ps)
{
    sk_store *s = arg;
    sk_buf b;
    sk_buf_init(&b, 4096);
    sk_pstate_put(&b, ps);
    sqlite3_stmt *st = sk_store_stmt(s, ST_PUT_PROD);
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, ps->pid);
    sqlite3_bind_blob(st, 4, b.data, (int)b.len, SQLITE_TRANSIENT);
    int rc = store_step_done(s, st);
    sk_buf_free(&b);
    return rc;
}

static int snap_extra(void *arg, uint8_t kind, const uint8_t *body, size_t len)
{
    if (kind == SK_SNAP_GROUP_CONFIGS)
        return apply_group_config(arg, body, len);
    if (kind == SK_SNAP_USER_CONFIGS)
        return apply_user_config(arg, body, len);
    if (kind == SK_SNAP_ACLS)
        return apply_acl(arg, body, len);
    if (kind == SK_SNAP_TXNS)
        return apply_txn(arg, body, len);
    if (kind == SK_SNAP_TXIDX) {
        kc_uuid id;
        int32_t part;
        sk_txidx_ent e;
        if (sk_txidx_section_get(body, len, &id, &part, &e))
            return SK_ERR_CORRUPT;
        return put_txidx(arg, &id, part, &e);
    }
    return kind == SK_SNAP_GROUPS ? apply_group(arg, body, len) : 0;
}

static int apply_one(sk_store *s, const sk_store_rec *r)
{
    switch (r->type) {
    case SK_WAL_DATA:
        return apply_data(s, r);
    case SK_WAL_META:
        return apply_meta(s, r);
    case WAL_T_PREAMBLE: {
        if (!s->empty)
            return 0;
        sk_snapshot_visitor v = {s, snap_head, snap_topic, snap_part, snap_pstate, snap_extra};
        int rc = sk_snapshot_visit(r->payload, r->plen, &v);
        if (rc == 0)
            s->empty = false;
        else
            SK_ERROR("store", "corrupt snapshot at LSN %llu", (unsigned long long)r->lsn);
        return rc;
    }
    default:
        SK_ERROR("store", "unknown WAL record type %d at LSN %llu", r->type,
                 (unsigned long long)r->lsn);
        return SK_ERR_CORRUPT;
    }
}

int sk_store_apply_sync(sk_store *s, sk_store_rec *recs, size_t n, wal_lsn end)
{
    if (store_step_done(s, sk_store_stmt(s, ST_BEGIN)))
        return SK_ERR_IO;
    int rc = 0;
    for (size_t i = 0; i < n && rc == 0; i++)
        rc = apply_one(s, &recs[i]);
    if (rc == 0)
        rc = store_set_kv_i64(s, "applied", (int64_t)end);
    if (rc == 0 && store_step_done(s, sk_store_stmt(s, ST_COMMIT)) == 0) {
        s->applied = end;
        s->empty = false;
        return 0;
    }
    store_step_done(s, sk_store_stmt(s, ST_ROLLBACK));
    return rc ? rc : SK_ERR_IO;
}

/* ---- loading ---- */

/* The consumer-protocol groups' states, as their last records. */
static int load_consumer_groups(sqlite3 *db, const sk_snapshot_visitor *v)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT body FROM consumer_groups", -1, &st, NULL))
        return store_db_err(db, "load consumer groups");
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW)
        rc = v->extra(v->arg, SK_SNAP_GROUPS, sqlite3_column_blob(st, 0),
                      (size_t)sqlite3_column_bytes(st, 0));
    sqlite3_finalize(st);
    return rc;
}

static int load_config_sets(sk_store *s, const sk_snapshot_visitor *v, const char *sql,
                            uint8_t kind)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db, sql, -1, &st, NULL))
        return store_db_err(s->db, "load config sets");
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW)
        rc = v->extra(v->arg, kind, sqlite3_column_blob(st, 0),
                      (size_t)sqlite3_column_bytes(st, 0));
    sqlite3_finalize(st);
    return rc;
}

/* The transaction index, as snapshot sections. */
static int load_txidx(sk_store *s, const sk_snapshot_visitor *v)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT topic, part, pid, first, -1 FROM txn_open UNION ALL "
                           "SELECT topic, part, pid, first, last FROM txn_aborted",
                           -1, &st, NULL))
        return store_db_err(s->db, "load the transaction index");
    int rc = 0;
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        if (sqlite3_column_bytes(st, 0) != 16) {
            rc = SK_ERR_CORRUPT;
            break;
        }
        kc_uuid id;
        memcpy(id.b, sqlite3_column_blob(st, 0), 16);
        sk_txidx_ent e = {sqlite3_column_int64(st, 2), sqlite3_column_int64(st, 3),
                          sqlite3_column_int64(st, 4)};
        sk_buf b;
        sk_buf_init(&b, 0);
        sk_txidx_section_put(&b, &id, sqlite3_column_int(st, 1), &e);
        rc = sk_buf_failed(&b) ? SK_ERR_NOMEM : v->extra(v->arg, SK_SNAP_TXIDX, b.data, b.len);
        sk_buf_free(&b);
    }
    sqlite3_finalize(st);
    return rc;
}

/* The snapshot sections kept one row per body: group configs, users' credentials,
 * ACLs, transactional ids, and the partitions' transaction indexes. */
static int load_sections(sk_store *s, const sk_snapshot_visitor *v)
{
    int rc = load_config_sets(s, v, "SELECT body FROM group_configs", SK_SNAP_GROUP_CONFIGS);
    rc = rc ? rc : load_config_sets(s, v, "SELECT body FROM user_configs", SK_SNAP_USER_CONFIGS);
    rc = rc ? rc : load_config_sets(s, v, "SELECT body FROM acls", SK_SNAP_ACLS);
    rc = rc ? rc : load_config_sets(s, v, "SELECT body FROM transactions", SK_SNAP_TXNS);
    return rc ? rc : load_txidx(s, v);
}

/* Hands every group's committed offsets to the visitor as one commit
 * record body, the form snapshots use too. */
static int load_groups(sk_store *s, const sk_snapshot_visitor *v)
{
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(s->db,
                           "SELECT grp, topic, part, off, epoch, meta, ts FROM group_offsets"
                           " ORDER BY grp",
                           -1, &st, NULL))
        return store_db_err(s->db, "load group offsets");
    int rc = 0;
    char *cur = NULL;
    sk_buf ents;
    sk_buf_init(&ents, 0);
    uint32_t n = 0;
    for (;;) {
        int step = sqlite3_step(st);
        const char *grp = step == SQLITE_ROW ? (const char *)sqlite3_column_text(st, 0) : NULL;
        if (cur && (!grp || strcmp(grp, cur) != 0)) {
            sk_buf body;
            sk_buf_init(&body, 0);
            sk_grec_begin(&body, SK_GREC_COMMIT, cur, strlen(cur), n);
            sk_buf_put(&body, ents.data, ents.len);
            rc = sk_buf_failed(&body) || sk_buf_failed(&ents)
                     ? SK_ERR_NOMEM
                     : v->extra(v->arg, SK_SNAP_GROUPS, body.data, body.len);
            sk_buf_free(&body);
            sk_buf_free(&ents);
            sk_buf_init(&ents, 0);
            n = 0;
            free(cur);
            cur = NULL;
            if (rc)
                break;
        }
        if (!grp)
            break;
        if (!cur && !(cur = strdup(grp))) {
            rc = SK_ERR_NOMEM;
            break;
        }
        sk_grec_ent e = {(const char *)sqlite3_column_text(st, 1),
                         (size_t)sqlite3_column_bytes(st, 1),
                         sqlite3_column_int(st, 2),
                         sqlite3_column_int64(st, 3),
                         sqlite3_column_int(st, 4),
                         sqlite3_column_blob(st, 5),
                         (size_t)sqlite3_column_bytes(st, 5),
                         sqlite3_column_int64(st, 6)};
        sk_grec_put(&ents, SK_GREC_COMMIT, &e);
        n++;
    }
    free(cur);
    sk_buf_free(&ents);
    sqlite3_finalize(st);
    return rc;
}

int sk_store_load(sk_store *s, const sk_snapshot_visitor *v)
{
    sqlite3_stmt *st = NULL;
    int rc = 0;
    char cid[64] = "";
    int64_t next_pid = 0;
    bool found;
    if (sqlite3_prepare_v2(s->db, "SELECT v FROM kv WHERE k = 'cluster_id'", -1, &st, NULL))
        return store_db_err(s->db, "load");
    if (sqlite3_step(st) == SQLITE_ROW)
        snprintf(cid, sizeof cid, "%s", (const char *)sqlite3_column_text(st, 0));
    sqlite3_finalize(st);
    if (store_kv_get_i64(s->db, "next_pid", &next_pid, &found))
        return SK_ERR_IO;
    int64_t next_stream = 1;
    if (store_kv_get_i64(s->db, "next_stream", &next_stream, &found))
        return SK_ERR_IO;
    uint8_t *bconf = NULL;
    size_t bconf_len = 0;
    if (sqlite3_prepare_v2(s->db, "SELECT v FROM kv WHERE k = 'broker_config'", -1, &st, NULL))
        return store_db_err(s->db, "load");
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_bytes(st, 0) > 0) {
        bconf_len = (size_t)sqlite3_column_bytes(st, 0);
        bconf = malloc(bconf_len);
        if (bconf)
            memcpy(bconf, sqlite3_column_blob(st, 0), bconf_len);
    }
    sqlite3_finalize(st);
    static const uint8_t empty_block[4] = {0, 0, 0, 0};
    if (v->head) {
        sk_snap_head h = {cid, strlen(cid), next_pid, (uint64_t)(found ? next_stream : 1),
                          bconf ? bconf : empty_block, bconf ? bconf_len : sizeof empty_block};
        rc = v->head(v->arg, &h);
    }
    free(bconf);
    if (rc)
        return rc;

    if (sqlite3_prepare_v2(s->db, "SELECT id, name, partitions, rf, configs FROM topics", -1, &st,
                           NULL))
        return store_db_err(s->db, "load topics");
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        kc_uuid id;
        if (sqlite3_column_bytes(st, 0) != 16) {
            rc = SK_ERR_CORRUPT;
            break;
        }
        memcpy(id.b, sqlite3_column_blob(st, 0), 16);
        const char *name = (const char *)sqlite3_column_text(st, 1);
        rc = v->topic(v->arg, &id, name, (size_t)sqlite3_column_bytes(st, 1),
                      sqlite3_column_int(st, 2), (int16_t)sqlite3_column_int(st, 3),
                      sqlite3_column_blob(st, 4), (size_t)sqlite3_column_bytes(st, 4));
    }
    sqlite3_finalize(st);
    if (rc)
        return rc;

    if (sqlite3_prepare_v2(s->db,
                           "SELECT topic, part, log_start, next_offset, leader_epoch, max_ts,"
                           " max_ts_base, stream FROM partitions",
                           -1, &st, NULL))
        return store_db_err(s->db, "load partitions");
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        kc_uuid id;
        if (sqlite3_column_bytes(st, 0) != 16) {
            rc = SK_ERR_CORRUPT;
            break;
        }
        memcpy(id.b, sqlite3_column_blob(st, 0), 16);
        sk_snap_part sp = {id,
                           sqlite3_column_int(st, 1),
                           (uint64_t)sqlite3_column_int64(st, 7),
                           sqlite3_column_int64(st, 2),
                           sqlite3_column_int64(st, 3),
                           sqlite3_column_int(st, 4),
                           sqlite3_column_int64(st, 5),
                           sqlite3_column_int64(st, 6)};
        rc = v->part(v->arg, &sp);
    }
    sqlite3_finalize(st);
    if (rc)
        return rc;

    if (sqlite3_prepare_v2(s->db, "SELECT topic, part, state FROM producers", -1, &st, NULL))
        return store_db_err(s->db, "load producers");
    while (rc == 0 && sqlite3_step(st) == SQLITE_ROW) {
        kc_uuid id;
        if (sqlite3_column_bytes(st, 0) != 16) {
            rc = SK_ERR_CORRUPT;
            break;
        }
        memcpy(id.b, sqlite3_column_blob(st, 0), 16);
        sk_pstate ps;
        sk_rd rd;
        sk_rd_init(&rd, sqlite3_column_blob(st, 2), (size_t)sqlite3_column_bytes(st, 2));
        if (sk_pstate_get(&rd, &ps) != 0) {
            rc = SK_ERR_CORRUPT;
            break;
        }
        rc = v->pstate(v->arg, &id, sqlite3_column_int(st, 1), &ps);
    }
    sqlite3_finalize(st);
    if (rc || !v->extra)
        return rc;
    rc = load_groups(s, v);
    rc = rc ? rc : load_consumer_groups(s->db, v);
    return rc ? rc : load_sections(s, v);
}

/* ---- transactions from the loop ---- */

struct sk_store_txn {
    sk_store_rec *recs;
    size_t n, cap;
    /* set at submit */
    sk_store *s;
    wal_lsn end;
    int err;
    sk_store_done_fn done;
    void *arg;
};

sk_store_txn *sk_store_txn_new(void)
{
    return calloc(1, sizeof(sk_store_txn));
}

int sk_store_txn_add(sk_store_txn *t, sk_store_rec *rec)
{
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 64;
        sk_store_rec *n = realloc(t->recs, ncap * sizeof *n);
        if (!n)
            return SK_ERR_NOMEM;
        t->recs = n;
        t->cap = ncap;
    }
    t->recs[t->n++] = *rec;
    rec->payload = NULL;
    return 0;
}

size_t sk_store_txn_count(const sk_store_txn *t)
{
    return t->n;
}

void sk_store_txn_free(sk_store_txn *t)
{
    if (!t)
        return;
    for (size_t i = 0; i < t->n; i++)
        sk_store_rec_free(&t->recs[i]);
    free(t->recs);
    free(t);
}

int sk_store_start(sk_store *s, struct event_base *base)
{
    s->q = sk_workq_new(base, "skiff-sqlite", 1);
    return s->q ? 0 : SK_ERR_NOMEM;
}

static void txn_work(void *arg)
{
    sk_store_txn *t = arg;
    t->err = sk_store_apply_sync(t->s, t->recs, t->n, t->end);
}

static void txn_done(void *arg)
{
    sk_store_txn *t = arg;
    if (t->done)
        t->done(t->arg, t->err, t->end);
    sk_store_txn_free(t);
}

static wal_lsn txn_end(const sk_store_txn *t)
{
    return t->n ? t->recs[t->n - 1].end : 0;
}

int sk_store_txn_apply_sync(sk_store *s, sk_store_txn *t)
{
    return sk_store_apply_sync(s, t->recs, t->n, txn_end(t));
}

void sk_store_submit(sk_store *s, sk_store_txn *t, sk_store_done_fn done, void *arg)
{
    wal_lsn end = txn_end(t);
    t->s = s;
    t->end = end;
    t->done = done;
    t->arg = arg;
    if (sk_workq_submit(s->q, txn_work, txn_done, t) != 0) {
        if (done)
            done(arg, SK_ERR_CLOSED, end);
        sk_store_txn_free(t);
    }
}

void sk_store_drain(sk_store *s)
{
    if (s->q) {
        sk_workq_destroy(s->q);
        s->q = NULL;
    }
}

/* ---- reads ---- */

sqlite3 *reader_get(sk_store *s)
{
    pthread_mutex_lock(&s->rlock);
    sqlite3 *db = s->nreaders_free ? s->readers[--s->nreaders_free] : NULL;
    pthread_mutex_unlock(&s->rlock);
    if (!db && open_conn(s->path, true, &db) != 0)
        return NULL;
    return db;
}

void reader_put(sk_store *s, sqlite3 *db)
{
    pthread_mutex_lock(&s->rlock);
    if (s->nreaders_free < MAX_READERS) {
        s->readers[s->nreaders_free++] = db;
        db = NULL;
    }
    pthread_mutex_unlock(&s->rlock);
    if (db)
        sqlite3_close(db);
}

static void loc_from_row(sqlite3_stmt *st, sk_batch_loc *l)
{
    l->base = sqlite3_column_int64(st, 0);
    l->last = sqlite3_column_int64(st, 1);
    l->lsn = (wal_lsn)sqlite3_column_int64(st, 2);
    l->len = (uint32_t)sqlite3_column_int64(st, 3);
    l->max_ts = sqlite3_column_int64(st, 4);
    l->log = sqlite3_column_int64(st, 5);
}

int sk_store_read_batches(sk_store *s, const kc_uuid *id, int32_t part, int64_t from,
                          int64_t max_bytes, sk_batch_loc *out, int max_n)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    int n = 0;
    /* The batch holding `from` is the last one starting at or before it. */
    if (sqlite3_prepare_v2(db,
                           "SELECT base, last, lsn, len, max_ts, log FROM batches WHERE topic = ?1"
                           " AND part = ?2 AND base >= coalesce((SELECT max(base) FROM batches"
                           " WHERE topic = ?1 AND part = ?2 AND base <= ?3), ?3)"
                           " ORDER BY base LIMIT ?4",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "read batches");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, from);
    sqlite3_bind_int(st, 4, max_n);
    int64_t bytes = 0;
    while (n < max_n && sqlite3_step(st) == SQLITE_ROW) {
        sk_batch_loc l;
        loc_from_row(st, &l);
        if (l.last < from)
            continue;
        if (n > 0 && bytes + l.len > max_bytes)
            break;
        out[n++] = l;
        bytes += l.len;
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return n;
}

int sk_store_find_ts(sk_store *s, const kc_uuid *id, int32_t part, int64_t ts, int64_t below_base,
                     sk_batch_loc *out)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT base, last, lsn, len, max_ts, log FROM batches WHERE topic = ?1"
                           " AND part = ?2 AND base < ?4 AND max_ts >= ?3 ORDER BY base LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "find ts");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, ts);
    sqlite3_bind_int64(st, 4, below_base);
    if (sqlite3_step(st) == SQLITE_ROW) {
        loc_from_row(st, out);
        found = 1;
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return found;
}

int sk_store_find_offset(sk_store *s, const kc_uuid *id, int32_t part, int64_t offset,
                         sk_batch_loc *out)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    int found = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT base, last, lsn, len, max_ts, log FROM batches WHERE topic = ?1"
                           " AND part = ?2 AND base <= ?3 ORDER BY base DESC LIMIT 1",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "find offset");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, offset);
    if (sqlite3_step(st) == SQLITE_ROW) {
        loc_from_row(st, out);
        found = out->last >= offset;
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return found;
}

int sk_store_min_lsn(sk_store *s, int64_t own_log, wal_lsn *out)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    *out = UINT64_MAX;
    if (sqlite3_prepare_v2(db, "SELECT min(lsn) FROM batches WHERE log = 0 OR log = ?1", -1, &st,
                           NULL) != SQLITE_OK) {
        store_db_err(db, "min lsn");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_int64(st, 1, own_log);
    if (sqlite3_step(st) == SQLITE_ROW && sqlite3_column_type(st, 0) != SQLITE_NULL)
        *out = (wal_lsn)sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    reader_put(s, db);
    return 0;
}

int sk_store_retention_point(sk_store *s, const kc_uuid *id, int32_t part, uint64_t stream,
                             int64_t cutoff_ts, int64_t max_bytes, int64_t *new_start)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    int64_t total = 0;
    if (sqlite3_prepare_v2(db,
                           "SELECT (SELECT coalesce(sum(len), 0) FROM batches WHERE topic = ?1"
                           " AND part = ?2) + (SELECT coalesce(sum(size), 0) FROM object_ranges"
                           " WHERE stream = ?3)",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "retention");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, (int64_t)stream);
    if (sqlite3_step(st) == SQLITE_ROW)
        total = sqlite3_column_int64(st, 0);
    sqlite3_finalize(st);
    /* Object ranges and the batches still in a WAL, in offset order (an
     * adopted partition's batches in another log's WAL can be older than the
     * ranges it uploaded since): delete from the oldest while past the time
     * cutoff (stopping at the first that is not, like Kafka's segments) or
     * while the rest would still hold max_bytes (never the newest piece for
     * size). The unit deleted is a whole range or a whole batch. */
    if (sqlite3_prepare_v2(db,
                           "SELECT start, end, size, max_ts FROM object_ranges WHERE stream = ?3"
                           " UNION ALL SELECT base, last, len, max_ts FROM batches b WHERE"
                           " topic = ?1 AND part = ?2 AND NOT EXISTS (SELECT 1 FROM object_ranges"
                           " r WHERE r.stream = ?3 AND r.start <= b.base AND r.end >= b.last)"
                           " ORDER BY 1",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "retention");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
    sqlite3_bind_int(st, 2, part);
    sqlite3_bind_int64(st, 3, (int64_t)stream);
    int64_t start = -1, remaining = total;
    bool any = false;
    while (sqlite3_step(st) == SQLITE_ROW) {
        int64_t base = sqlite3_column_int64(st, 0);
        int64_t len = sqlite3_column_int64(st, 2);
        int64_t max_ts = sqlite3_column_int64(st, 3);
        bool expired = cutoff_ts >= 0 && max_ts < cutoff_ts;
        /* As Kafka: a piece goes for size only when what remains after it
         * still holds max_bytes. */
        bool over = max_bytes >= 0 && remaining - len >= max_bytes && remaining > len;
        any = true;
        if (!expired && !over) {
            start = base;
            break;
        }
        remaining -= len;
        start = -1;
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    *new_start = any ? start : -2;
    return 0;
}

int sk_store_partition_bytes(sk_store *s,
                             void (*fn)(void *arg, const kc_uuid *id, int32_t part, int64_t bytes),
                             void *arg)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT p.topic, p.part, (SELECT coalesce(sum(len), 0) FROM batches b"
                           " WHERE b.topic = p.topic AND b.part = p.part) + (SELECT"
                           " coalesce(sum(size), 0) FROM object_ranges r WHERE r.stream = p.stream)"
                           " FROM partitions p",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "partition bytes");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (sqlite3_column_bytes(st, 0) != 16)
            continue;
        kc_uuid id;
        memcpy(id.b, sqlite3_column_blob(st, 0), 16);
        fn(arg, &id, sqlite3_column_int(st, 1), sqlite3_column_int64(st, 2));
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return 0;
}

/* ---- the object registry ---- */

static int find_range(sk_store *s, const char *sql, uint64_t stream, int64_t arg, sk_obj_loc *out)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "object range");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_int64(st, 1, (int64_t)stream);
    sqlite3_bind_int64(st, 2, arg);
    int found = 0;
    if (sqlite3_step(st) == SQLITE_ROW) {
        out->start = sqlite3_column_int64(st, 0);
        out->end = sqlite3_column_int64(st, 1);
        snprintf(out->key, sizeof out->key, "%s", (const char *)sqlite3_column_text(st, 2));
        out->obj_size = (uint64_t)sqlite3_column_int64(st, 3);
        out->max_ts = sqlite3_column_int64(st, 4);
        out->size = (uint64_t)sqlite3_column_int64(st, 5);
        found = 1;
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return found;
}

int sk_store_find_object(sk_store *s, uint64_t stream, int64_t offset, sk_obj_loc *out)
{
    return find_range(s,
                      "SELECT r.start, r.end, r.key, o.size, r.max_ts, r.size FROM object_ranges r"
                      " JOIN objects o ON o.key = r.key WHERE r.stream = ?1 AND r.end >= ?2"
                      " ORDER BY r.start LIMIT 1",
                      stream, offset, out);
}

int sk_store_last_object(sk_store *s, uint64_t stream, sk_obj_loc *out)
{
    return find_range(s,
                      "SELECT r.start, r.end, r.key, o.size, r.max_ts, r.size FROM object_ranges r"
                      " JOIN objects o ON o.key = r.key WHERE r.stream = ?1 AND ?2 = ?2"
                      " ORDER BY r.end DESC LIMIT 1",
                      stream, 0, out);
}

int sk_store_find_object_ts(sk_store *s, uint64_t stream, int64_t ts, sk_obj_loc *out)
{
    return find_range(s,
                      "SELECT r.start, r.end, r.key, o.size, r.max_ts, r.size FROM object_ranges r"
                      " JOIN objects o ON o.key = r.key WHERE r.stream = ?1 AND r.max_ts >= ?2"
                      " ORDER BY r.start LIMIT 1",
                      stream, ts, out);
}

wal_lsn sk_store_uploaded(sk_store *s)
{
    int64_t v = 0;
    bool found;
    if (store_kv_get_i64(s->db, "uploaded", &v, &found) != 0 || !found)
        return 0;
    return (wal_lsn)v;
}

int sk_store_list_objects(sk_store *s, void (*fn)(void *arg, const sk_obj_info *o), void *arg)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT o.key, o.kind, o.size, o.created, coalesce(o.delete_after, -1),"
                           " (SELECT count(*) FROM object_ranges r WHERE r.key = o.key)"
                           " FROM objects o ORDER BY o.key",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "list objects");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    while (sqlite3_step(st) == SQLITE_ROW) {
        sk_obj_info o;
        snprintf(o.key, sizeof o.key, "%s", (const char *)sqlite3_column_text(st, 0));
        o.kind = sqlite3_column_int(st, 1);
        o.size = (uint64_t)sqlite3_column_int64(st, 2);
        o.created_ms = sqlite3_column_int64(st, 3);
        o.delete_after_ms = sqlite3_column_int64(st, 4);
        o.nranges = (uint32_t)sqlite3_column_int(st, 5);
        fn(arg, &o);
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return 0;
}

int sk_store_object_ranges(sk_store *s, const char *key, sk_orange **out, size_t *n)
{
    *out = NULL;
    *n = 0;
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db,
                           "SELECT stream, start, end, size, max_ts, records FROM object_ranges"
                           " WHERE key = ?1 ORDER BY stream, start",
                           -1, &st, NULL) != SQLITE_OK) {
        store_db_err(db, "object ranges");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    size_t cap = 0;
    int rc = 0;
    while (sqlite3_step(st) == SQLITE_ROW) {
        if (*n == cap) {
            size_t ncap = cap ? cap * 2 : 16;
            sk_orange *nr = realloc(*out, ncap * sizeof *nr);
            if (!nr) {
                rc = SK_ERR_NOMEM;
                break;
            }
            *out = nr;
            cap = ncap;
        }
        sk_orange *r = &(*out)[(*n)++];
        r->stream = (uint64_t)sqlite3_column_int64(st, 0);
        r->start = (uint64_t)sqlite3_column_int64(st, 1);
        r->end = (uint64_t)sqlite3_column_int64(st, 2);
        r->size = (uint64_t)sqlite3_column_int64(st, 3);
        r->max_ts = sqlite3_column_int64(st, 4);
        r->records = (uint64_t)sqlite3_column_int64(st, 5);
    }
    sqlite3_finalize(st);
    reader_put(s, db);
    return rc;
}

int sk_store_object_known(sk_store *s, const char *key)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    if (sqlite3_prepare_v2(db, "SELECT 1 FROM objects WHERE key = ?1", -1, &st, NULL) !=
        SQLITE_OK) {
        store_db_err(db, "object known");
        reader_put(s, db);
        return SK_ERR_IO;
    }
    sqlite3_bind_text(st, 1, key, -1, SQLITE_STATIC);
    int known = sqlite3_step(st) == SQLITE_ROW;
    sqlite3_finalize(st);
    reader_put(s, db);
    return known;
}

int sk_store_backup(sk_store *s, const char *dest, wal_lsn *applied)
{
    sqlite3 *src = reader_get(s);
    if (!src)
        return SK_ERR_IO;
    sqlite3 *dst;
    unlink(dest);
    if (open_conn(dest, false, &dst) != 0) {
        reader_put(s, src);
        return SK_ERR_IO;
    }
    int rc = 0;
    /* One read transaction for the whole copy: a consistent view, whatever
     * the writer thread does meanwhile. */
    sqlite3_backup *b = sqlite3_backup_init(dst, "main", src, "main");
    if (!b || sqlite3_backup_step(b, -1) != SQLITE_DONE)
        rc = SK_ERR_IO;
    if (b)
        sqlite3_backup_finish(b);
    if (rc == 0) {
        int64_t v = 0;
        bool found;
        if (store_kv_get_i64(dst, "applied", &v, &found) != 0 || !found)
            rc = SK_ERR_IO;
        *applied = (wal_lsn)v;
    } else {
        store_db_err(dst, "backup");
    }
    sqlite3_close(dst);
    reader_put(s, src);
    return rc;
}

int sk_store_has_log_batches(sk_store *s, const kc_uuid *id, int32_t part, int64_t log,
                             wal_lsn need)
{
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    /* One read transaction: the applied position and the batches of one
     * snapshot. */
    if (sqlite3_exec(db, "BEGIN", NULL, NULL, NULL) != SQLITE_OK) {
        int rc = store_db_err(db, "BEGIN");
        reader_put(s, db);
        return rc;
    }
    int64_t applied = 0;
    bool found = false;
    int rc = store_kv_get_i64(db, "applied", &applied, &found);
    if (rc == 0 && (!found || (wal_lsn)applied < need))
        rc = 1;
    else if (rc == 0) {
        sqlite3_stmt *st;
        const char *sql =
            "SELECT 1 FROM batches WHERE topic = ?1 AND part = ?2 AND log = ?3 LIMIT 1";
        if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
            rc = store_db_err(db, sql);
        } else {
            sqlite3_bind_blob(st, 1, id->b, 16, SQLITE_STATIC);
            sqlite3_bind_int(st, 2, part);
            sqlite3_bind_int64(st, 3, log);
            rc = sqlite3_step(st) == SQLITE_ROW ? 1 : 0;
            sqlite3_finalize(st);
        }
    }
    (void)sqlite3_exec(db, "COMMIT", NULL, NULL, NULL);
    reader_put(s, db);
    return rc;
}

int sk_store_foreign_batches(sk_store *s, int64_t max_bytes,
                             void (*fn)(void *arg, const kc_uuid *id, int32_t part,
                                        const sk_batch_loc *loc),
                             void *arg, bool *more)
{
    *more = false;
    sqlite3 *db = reader_get(s);
    if (!db)
        return SK_ERR_IO;
    sqlite3_stmt *st;
    const char *sql = "SELECT base, last, lsn, len, max_ts, log, topic, part FROM batches"
                      " WHERE log <> 0 ORDER BY topic, part, base";
    int rc = 0;
    if (sqlite3_prepare_v2(db, sql, -1, &st, NULL) != SQLITE_OK) {
        rc = store_db_err(db, sql);
    } else {
        int64_t bytes = 0;
        while (sqlite3_step(st) == SQLITE_ROW) {
            sk_batch_loc l;
            loc_from_row(st, &l);
            if (bytes > 0 && bytes + l.len > max_bytes) {
                *more = true;
                break;
            }
            kc_uuid id;
            if (sqlite3_column_bytes(st, 6) != 16)
                continue;
            memcpy(id.b, sqlite3_column_blob(st, 6), 16);
            fn(arg, &id, sqlite3_column_int(st, 7), &l);
            bytes += l.len;
        }
        sqlite3_finalize(st);
    }
    reader_put(s, db);
    return rc;
}
