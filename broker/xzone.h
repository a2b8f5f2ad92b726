/*
 * xzone: this node's cross-zone accounting (docs/zones.md, "Cross-zone
 * accounting"): where bytes are counted, and what is shown of them.
 *
 * It holds the node's sk_zacct table (common/sk_zacct.h) and the record
 * bytes clients produced through the node, and is told where bytes move:
 *  - net.c, for every request frame read and response frame written on a
 *    server connection: a Kafka client's (kind client, in the client's
 *    zone, as zone routing learns it), or another node's, known by its
 *    client id "skiff-node-<id>" (kind by API key: Confirm, Follow, else
 *    rpc; in the zone that node registered in etcd, its broker.rack);
 *  - the RPC client (rpc_opts.account), for every frame to and from a peer
 *    node, by API key, in that node's zone;
 *  - the etcd client (etcd_opts.account), on its own thread, by endpoint:
 *    an endpoint is in the zone client.zone.cidrs gives its address (a host
 *    name is resolved once, at start-up), else of unknown zone.
 * Bytes are frames and HTTP messages as the sockets carry them (TCP
 * payload): the IP and TCP headers of each packet come on top.
 *
 * It renders the skiff_zone_* metrics and the /zones report of the metrics
 * listener, with the cost at zone.transfer.price.per.gib.
 *
 * Thread: the event loop, but for sk_xzone_etcd_account (the etcd client's
 * thread: atomic adds only). Created before the cluster's clients, freed
 * after them. Borrows the config and the zone map.
 */
#ifndef XZONE_H
#define XZONE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sk_zacct.h"
#include "types.h"

struct evbuffer;
struct zone_map;
typedef struct sk_xzone sk_xzone;

/* NULL when out of memory (why says so). Resolves the etcd endpoints'
 * host names: blocking, for start-up only. */
sk_xzone *sk_xzone_new(const sk_config *cfg, const struct zone_map *zones, char *why,
                       size_t whylen);
void sk_xzone_destroy(sk_xzone *x);

/* A server connection's first request came from `client_id`: another node's
 * connection ("skiff-node-<id>") or a client's, whose zone c->zone holds. */
void sk_xzone_conn_learn(sk_conn *c, const char *client_id, size_t len);
/* One frame of API `key` read from (SK_ZA_IN) or written to c. */
void sk_xzone_conn_bytes(sk_conn *c, sk_za_dir d, int16_t key, size_t bytes);

/* rpc_opts.account, arg the node. */
void sk_xzone_rpc_account(void *node, int32_t peer, int16_t key, size_t out, size_t in);
/* etcd_opts.account, arg the sk_xzone. Any thread. */
void sk_xzone_etcd_account(void *xzone, int endpoint, uint64_t out, uint64_t in);

/* A client's batch of `bytes` taken here: appended as main, or proxied. */
void sk_xzone_produced(sk_node *n, bool proxied, size_t bytes);

/* The skiff_zone_* and skiff_client_produced_* metrics. */
void sk_xzone_metrics(sk_node *n, struct evbuffer *b);
/* The plain-text report of /zones. */
void sk_xzone_report(sk_node *n, struct evbuffer *b);

#endif
