/*
 * zone: which availability zone a client is in.
 *
 * A node learns a client's zone from, in order: a `skiff_az=<zone>` entry in
 * its client.id (`automq_az=` and `diskless_az=`, used by other brokers of
 * this kind, are accepted too), a configured CIDR -> zone map matched
 * against the client's address, and the zone of the listener it connected
 * on. Zone routing (serving each client from a node of its own zone) builds
 * on this.
 *
 * Contract: a zone_map is built once at start-up and then read-only; lookups
 * are pure and may run on any thread. Errors: zone_map_new returns NULL and
 * writes the reason.
 */
#ifndef ZONE_H
#define ZONE_H

#include <stddef.h>
#include <sys/socket.h>

#define ZONE_MAX 64

typedef struct zone_map zone_map;

/* cidrs: "10.0.0.0/16=us-east-1a,fd00::/8=us-east-1b"; listeners:
 * "NAME=zone,...". Either may be empty. */
zone_map *zone_map_new(const char *cidrs, const char *listeners, char *why, size_t whylen);
void zone_map_destroy(zone_map *m);

/* The zone named in a client.id, or 0 when there is none (out gets "").
 * Entries are separated by ',', ';', '&' or spaces. */
int zone_from_client_id(const char *client_id, size_t len, char out[ZONE_MAX]);

/* The client's zone by the rules above; "" when unknown. Returns out. */
const char *zone_detect(const zone_map *m, const char *client_id, size_t client_id_len,
                        const struct sockaddr *peer, const char *listener, char out[ZONE_MAX]);

#endif
