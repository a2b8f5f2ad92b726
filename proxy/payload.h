/*
 * payload: a proxy's payload log (docs/zones.md, "Proxy produce").
 *
 * A node that takes a batch for a partition whose main is in another zone
 * writes it here first, to a WAL of its own on the shared volume, and only
 * then tells the main where it is (the confirm RPC, confirm.h). The main
 * links the batch into its own log; the payload stays where it is until
 * every main that linked it has it in objects.
 *
 * Records (type PAY_RECORD): u8 version (1) | 16-byte topic id | u32
 * partition (little-endian) | the batch as the client sent it (offsets not
 * assigned). The layout is that of a main's data records (broker/meta.h).
 *
 * Holds: an appended batch is held from pay_append until pay_release (the
 * caller knows how its confirm ended). pay_trim never deletes a segment
 * that reaches the oldest hold, nor the floor the caller gives (the lowest
 * position a main may still read, from etcd). A log is never reopened: each
 * incarnation of a node writes a new one, so there is nothing to replay.
 *
 * Thread: the event loop, except pay_read (any thread, blocking).
 * Errors: those of wal.h; SK_ERR_NOMEM.
 */
#ifndef PAYLOAD_H
#define PAYLOAD_H

#include <stdint.h>

#include "kc.h"
#include "wal.h"

#define PAY_RECORD 5 /* = SK_WAL_PAYLOAD of broker/meta.h */
#define PAY_HEADER 21 /* version + topic id + partition */

typedef struct pay_log pay_log;

/* Opens a fresh payload log on st (taking it), blocking. NULL with a reason
 * on failure (st is then closed). */
pay_log *pay_open(struct event_base *base, wal_storage *st, const wal_opts *o, char *why,
                  size_t whylen);
/* Waits until what was appended is durable (or can never be), then closes. */
void pay_close(pay_log *p);

typedef void (*pay_done_fn)(void *arg, int err, wal_lsn lsn);
/* Appends a batch and holds it; fn runs once it is durable (err 0) or can
 * never be. *lsn is the record's position at once. Errors as wal_append;
 * nothing is held then. */
int pay_append(pay_log *p, const kc_uuid *topic, int32_t part, const uint8_t *batch, uint32_t len,
               pay_done_fn fn, void *arg, wal_lsn *lsn) __attribute__((warn_unused_result));
/* Ends the hold taken by the append at lsn (no-op when there is none). */
void pay_release(pay_log *p, wal_lsn lsn);
/* The oldest held position, or UINT64_MAX when nothing is held. */
wal_lsn pay_oldest_hold(const pay_log *p);
size_t pay_holds(const pay_log *p);

/* Trims below min(floor, oldest hold); starts a new segment when the
 * current one is wholly below both, so that it can go next time. */
void pay_trim(pay_log *p, wal_lsn floor);

/* Reads the batch at lsn into buf (cap bytes): *len is the batch length,
 * topic and part are set. SK_ERR_CORRUPT when the record is not a payload
 * record; other errors as wal_read_record. */
int pay_read(pay_log *p, wal_lsn lsn, kc_uuid *topic, int32_t *part, uint8_t *buf, uint32_t cap,
             uint32_t *len) __attribute__((warn_unused_result));

/* Encodes a record's header; parses one (0, or SK_ERR_CORRUPT). */
void pay_header(uint8_t out[PAY_HEADER], const kc_uuid *topic, int32_t part);
int pay_parse(const uint8_t *rec, size_t len, kc_uuid *topic, int32_t *part, const uint8_t **batch,
              uint32_t *batch_len) __attribute__((warn_unused_result));

wal *pay_wal(pay_log *p);

#endif
