/*
 * etcd_json: the JSON half of the etcd client (etcd.c): request bodies as
 * jansson trees, answers decoded into etcd.h's result structures, and the
 * splitter that cuts the gateway's streams into single JSON objects.
 *
 * Contract: any thread, one object per thread at a time. Builders return a
 * new tree (NULL when an allocation failed or an argument is out of range).
 * Parsers borrow the tree and put every byte they return (keys, values,
 * arrays) into the arena, so a result lives as long as its arena. Parsers
 * return 0, SK_ERR_PARSE (not the shape etcd answers) or SK_ERR_NOMEM (the
 * arena's cap). Internal to the cluster layer.
 */
#ifndef ETCD_JSON_H
#define ETCD_JSON_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "etcd.h"
#include "sk_arena.h"

/* ---- stream splitter ---- */

/* Cuts a byte stream of concatenated JSON objects (whitespace between them)
 * into one object at a time, without parsing: it only tracks strings and
 * nesting. One object may not pass max bytes. */
typedef struct ej_stream {
    char *buf;
    size_t len, cap, max;
    int depth;
    bool in_str, esc;
} ej_stream;

enum { EJ_MORE = 0, EJ_STOP = 1, EJ_TOO_BIG = 2, EJ_BAD = 3 };

/* Called with each complete object; returns EJ_MORE to go on, or another
 * code, which ej_stream_feed then returns at once. */
typedef int (*ej_msg_fn)(void *ctx, const char *p, size_t n);

void ej_stream_init(ej_stream *s, size_t max);
void ej_stream_reset(ej_stream *s);
void ej_stream_free(ej_stream *s);
/* EJ_MORE when all n bytes were taken; EJ_TOO_BIG, EJ_BAD (not a JSON
 * object stream), or what fn returned. */
int ej_stream_feed(ej_stream *s, const char *p, size_t n, ej_msg_fn fn, void *ctx)
    __attribute__((warn_unused_result));

/* ---- request bodies ---- */

json_t *ej_range(const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
                 int64_t limit, int64_t revision, unsigned flags);
json_t *ej_put(const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen, int64_t lease);
json_t *ej_delete(const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen);
json_t *ej_txn(const etcd_cmp *cmps, size_t ncmp, const etcd_op *success, size_t nsuccess,
               const etcd_op *failure, size_t nfailure);
json_t *ej_lease_ttl(int64_t ttl_s);
json_t *ej_lease_id(int64_t id);
json_t *ej_watch_create(const uint8_t *key, size_t klen, const uint8_t *range_end, size_t relen,
                        int64_t start_revision);

/* ---- answers ---- */

/* An int64 field: a JSON string of decimal digits (the gateway's form) or a
 * number; absent or malformed is 0. */
int64_t ej_int(const json_t *o, const char *name);
/* header.revision of an answer. */
int64_t ej_revision(const json_t *o);

int ej_parse_range(sk_arena *a, const json_t *o, etcd_range_result *r)
    __attribute__((warn_unused_result));
int ej_parse_txn(sk_arena *a, const json_t *o, etcd_txn_result *r)
    __attribute__((warn_unused_result));
/* A PutResponse or DeleteRangeResponse as a one-op transaction result. */
int ej_parse_single(sk_arena *a, const json_t *o, etcd_op_type type, etcd_txn_result *r)
    __attribute__((warn_unused_result));
/* The events of a watch message with mod_revision >= min_revision (the
 * others were delivered before a resume). */
int ej_parse_events(sk_arena *a, const json_t *events, int64_t min_revision, etcd_event **evs,
                    size_t *n) __attribute__((warn_unused_result));

/* The gRPC status of an error answer: a unary {"error", "code", "message"}
 * or a stream's {"error": {"grpc_code", "message", ...}}. false when o is
 * not an error. */
bool ej_error(const json_t *o, int *grpc_code, const char **message);

#endif
