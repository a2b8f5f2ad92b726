/*
 * store_impl: the inside of the SQLite view, shared by store.c (records,
 * reads, the object registry) and store_handoff.c (partitions moving
 * between logs). Not for other modules: they use store.h.
 *
 * Thread rules are store.h's: the writer connection `db` and the prepared
 * statements belong to whoever applies records (start-up, then the store
 * thread); readers borrow a connection with reader_get/reader_put.
 */
#ifndef STORE_IMPL_H
#define STORE_IMPL_H

#include <pthread.h>
#include <sqlite3.h>
#include <stdbool.h>

#include "store.h"

#define MAX_READERS 8

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_SET_KV,
    ST_INS_BATCH,
    ST_UPD_PART_DATA,
    ST_GET_PROD,
    ST_PUT_PROD,
    ST_INS_TOPIC,
    ST_INS_PART,
    ST_DEL_TOPIC,
    ST_DEL_TOPIC_PARTS,
    ST_DEL_TOPIC_BATCHES,
    ST_DEL_TOPIC_PRODS,
    ST_UPD_TOPIC_CONF,
    ST_UPD_TOPIC_NPARTS,
    ST_UPD_LOG_START,
    ST_DEL_BATCHES_BELOW,
    ST_UPD_PART_BYTES,
    ST_PUT_GOFF,
    ST_DEL_GOFF,
    ST_DEL_GROUP,
    ST_PUT_CGROUP,
    ST_DEL_CGROUP,
    ST_PUT_TXN,
    ST_DEL_TXN,
    ST_TXO_PUT,
    ST_TXO_GET,
    ST_TXO_DEL,
    ST_TXA_PUT,
    ST_TXA_DEL_BELOW,
    ST_DEL_TOPIC_GOFFS,
    ST_PUT_GCONF,
    ST_DEL_GCONF,
    ST_PUT_UCONF,
    ST_DEL_UCONF,
    ST_PUT_ACL,
    ST_DEL_ACL,
    ST_PUT_OBJ,
    ST_PUT_RANGE,
    ST_DEL_BATCHES_UPLOADED,
    ST_RETIRE_OBJ,
    ST_DEL_OBJ_RANGES,
    ST_DEL_OBJ,
    ST_DEL_TOPIC_RANGES,
    ST_DEL_RANGES_BELOW,
    ST_DEL_COVERED,
    ST_FORGET_SHARED,
    ST_COUNT
};


struct sk_store {
    char *path;
    sqlite3 *db; /* the writer connection: start-up thread, then the store thread */
    sqlite3_stmt *st[ST_COUNT];
    wal_lsn applied;
    bool empty;
    sk_workq *q;
    pthread_mutex_t rlock;
    sqlite3 *readers[MAX_READERS];
    int nreaders_free;
    int nreaders_open;
};

/* Logs a SQLite error; returns SK_ERR_IO. */
int store_db_err(sqlite3 *db, const char *what);
int store_exec(sqlite3 *db, const char *sql);
/* The prepared statement i, reset and with its bindings cleared. */
sqlite3_stmt *sk_store_stmt(sk_store *s, int i);
/* Steps a statement that returns no row (or ignores it). */
int store_step_done(sk_store *s, sqlite3_stmt *st);
int store_kv_get_i64(sqlite3 *db, const char *k, int64_t *v, bool *found);
int store_set_kv_i64(sk_store *s, const char *k, int64_t v);
sqlite3 *reader_get(sk_store *s);
void reader_put(sk_store *s, sqlite3 *db);
/* Applies a SK_META_GROUP body (commit, delete offsets, delete group). */
int apply_group(sk_store *s, const uint8_t *body, size_t len);
int apply_txn(sk_store *s, const uint8_t *body, size_t len);

/* store_handoff.c: the records of partitions moving between logs. */
int apply_handoff(sk_store *s, const uint8_t *body, size_t len, wal_lsn lsn);
int apply_adopt(sk_store *s, const uint8_t *body, size_t len);
int apply_drop(sk_store *s, const kc_uuid *id, int32_t part);

#endif
