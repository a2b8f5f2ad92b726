/*
 * dispatch: the one table of APIs Skiff serves, and request decoding.
 *
 * Each entry is {key, min, max, flexible-from, handler}. The same table
 * produces the ApiVersions response, so what is advertised is exactly what is
 * dispatched. `impl_min` is the lowest version really served (Produce is
 * advertised from 0 for old librdkafka's compression check but served from
 * 3: a real v0-2 request closes the connection, as Kafka 4 does).
 *
 * Thread: the event loop. Handlers own the request until they set its state
 * and call sk_req_finish (directly or through sk_req_respond).
 */
#ifndef DISPATCH_H
#define DISPATCH_H

#include "types.h"

typedef void (*sk_handler)(sk_req *r);

struct sk_api_entry {
    int16_t key;
    int16_t min, max; /* advertised */
    int16_t flex;     /* first flexible version (from the message specs) */
    int16_t impl_min; /* lowest version actually served */
    sk_handler handler;
    const kc_api *api;
    /* Shows state that an append changes in memory at once (metadata,
     * groups): runs once the WAL is durable up to the last such change
     * (sk_node_shown), so that a crash cannot take back what it showed. */
    bool shows_state;
};

/* Decodes r's header and body and runs the handler; on bad input logs and
 * closes the connection (after the replies already due). */
void sk_dispatch(sk_req *r);

/* Allocates r->resp (initialised to defaults) for r's API; NULL on arena
 * exhaustion. Handlers normally get it already allocated. */
void *sk_req_new_resp(sk_req *r);
/* Encodes r->resp and finishes the request. */
void sk_req_respond(sk_req *r);
/* Encodes r->resp into r->out (and r->pieces): 0, or SK_ERR_NOMEM /
 * SK_ERR_PARSE. sk_req_respond does it; tests call it alone. */
int sk_req_encode(sk_req *r) __attribute__((warn_unused_result));
/* Drops the holds of the record pieces an encoded response left out of
 * r->out (request freed, or encoded again). */
void sk_req_drop_pieces(sk_req *r);
/* Finishes the request without a response (acks=0). */
void sk_req_silent(sk_req *r);
/* Finishes the request by closing the connection after earlier replies. */
void sk_req_close(sk_req *r, const char *why);

const sk_api_entry *sk_api_table(int *n);
const sk_api_entry *sk_api_lookup(int16_t key);

/* One asynchronous change among several of a request (a topic of
 * CreateTopics, a resource of AlterConfigs...): sk_item_done records its
 * error in the item's fields, then answers the request once r->pending drops
 * to 0 (through r->on_done when set). NULL on arena exhaustion. */
typedef struct sk_item {
    sk_req *r;
    int16_t *error_code;
    kc_str *error_message;
} sk_item;
sk_item *sk_item_new(sk_req *r, int16_t *error_code, kc_str *error_message);
void sk_item_done(void *arg, int err);
/* The one mapping of internal errors of metadata changes to a Kafka code
 * and a message. */
int16_t sk_change_error(int err, const char **msg);

/* Arena helpers for handlers building responses. */
kc_str sk_req_str(sk_req *r, const char *s);
void *sk_req_array(sk_req *r, const kc_struct *elem, int32_t n);

#endif
