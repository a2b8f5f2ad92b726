/*
 * metrics: Prometheus text exposition on http://<metrics.listener>/metrics.
 *
 * Counters live where they are counted (the node, the WAL); this module only
 * renders them, plus latency histograms with fixed buckets. The listener is
 * off unless metrics.listener is set; the same text answers the NodeStatus
 * RPC (`skiffd status`) either way.
 *
 * Thread: the event loop.
 */
#ifndef METRICS_H
#define METRICS_H

#include "types.h"

struct evbuffer;

void sk_metrics_observe(sk_latency *h, int64_t us);
/* Appends the node's metrics, as /metrics serves them, to b. */
void sk_metrics_render(sk_node *n, struct evbuffer *b);
int sk_metrics_start(sk_node *n, char *why, size_t whylen);
void sk_metrics_stop(sk_node *n);

#endif
