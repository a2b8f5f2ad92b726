/*
 * proxied: this node as the proxy of partitions whose main is in another
 * zone (docs/zones.md).
 *
 * Metadata sends a client of this node's zone here for such a partition
 * (proxy/route.h decides, for Metadata and for the requests that follow
 * alike). Produce: the batch, validated as a main validates it (and given
 * its LogAppendTime here when the topic wants one), goes to this node's
 * payload log (proxy/payload.h); once durable, the main is told where it is
 * (proxy/confirm.h), links it and answers with its offsets, which the
 * client gets.
 *
 * The payload log is trimmed on a timer below what every main still reads
 * of it (their payrefs in etcd) and below every batch whose confirm has no
 * known end: a batch the main answered is released once this node has seen
 * the main's payref (the revision the answer names); one whose confirm timed
 * out, once that main's payref floor passed it, its log is gone, or, asked
 * again after the batch's deadline (which the main never links past), the
 * main answers that it linked it (then as an answered batch) or refuses it.
 *
 * Thread: the event loop.
 */
#ifndef PROXIED_H
#define PROXIED_H

#include <stdbool.h>
#include <stdint.h>

#include "types.h"

struct sk_cluster;
struct pay_log;
struct rpc_client;
struct kb_header;

typedef struct sk_proxy sk_proxy;

/* Takes the payload log (closed by sk_proxy_destroy); rpc is borrowed. */
sk_proxy *sk_proxy_new(sk_node *n, struct sk_cluster *c, struct rpc_client *rpc,
                       struct pay_log *pl, int64_t plog);
/* The node is closing: what waits only returns from now on. */
void sk_proxy_close(sk_proxy *x);
/* After the RPC client is destroyed: frees, closing the payload log. */
void sk_proxy_destroy(sk_proxy *x);

/* Whether this node serves p to the client of `zone` as its proxy: the
 * partition's main is another live node, and Metadata sends a client of
 * that zone here for it. */
bool sk_proxy_serves(sk_node *n, const char *zone, const sk_part *p);

/* True while the payload log holds more than wal.max.retained.bytes. */
bool sk_proxy_full(const sk_proxy *x);

/* The end of a proxied batch: code 0 with the main's answer, or the Kafka
 * code to give the producer (msg may be NULL; valid during the call). */
typedef void (*sk_proxy_fn)(void *arg, int16_t code, const char *msg, int64_t base,
                            int64_t append_ts, int64_t log_start);

/* Writes a validated batch of p (its LogAppendTime already set where the
 * topic wants it) to the payload log and confirms it with the main before
 * deadline_us (sk_mono_us). Returns 0 (fn will run, never from inside this
 * call) or a Kafka code (it will not). */
int16_t sk_proxy_produce(sk_proxy *x, sk_part *p, const uint8_t *batch, uint32_t len,
                         const struct kb_header *h, int64_t deadline_us, sk_proxy_fn fn,
                         void *arg);

/* Trims the payload log (every second or so). */
void sk_proxy_tick(sk_proxy *x);

typedef struct sk_proxy_stats {
    uint64_t batches, bytes, linked, refused, timeouts, unreached;
    uint64_t confirm_requests, confirm_retries;
    size_t holds;
    uint64_t payload_retained; /* bytes of the payload log not trimmed */
} sk_proxy_stats;
void sk_proxy_get_stats(const sk_proxy *x, sk_proxy_stats *st);

#endif
