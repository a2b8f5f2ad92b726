/*
 * metrics: Prometheus text exposition on http://<metrics.listener>/metrics.
 *
 * Counters live where they are counted (the node, the WAL); this module only
 * renders them, plus latency histograms with fixed buckets. Off unless
 * metrics.listener is set.
 *
 * Thread: the event loop.
 */
#ifndef METRICS_H
#define METRICS_H

#include "types.h"

void sk_metrics_observe(sk_latency *h, int64_t us);
int sk_metrics_start(sk_node *n, char *why, size_t whylen);
void sk_metrics_stop(sk_node *n);

#endif
