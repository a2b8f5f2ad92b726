/*
 * route: which node serves a partition to a client of a given zone
 * (docs/zones.md, "Metadata rewrite").
 *
 * A client of known zone is sent to a node of its own zone: the partition's
 * main when the main is there, otherwise a proxy chosen among the zone's
 * live, non-draining nodes by rendezvous hashing of (topic id, partition),
 * so that every client of the zone, on every node, is sent to the same
 * proxy, and a node joining or leaving the zone moves only its own share.
 * A client of unknown zone, or of a zone without such a node, is sent to
 * the main.
 *
 * Contract: pure functions of the model (cluster/cmodel.h): every node with
 * the same model gives the same answers. Any thread that may read the
 * model.
 */
#ifndef ROUTE_H
#define ROUTE_H

#include <stdbool.h>
#include <stdint.h>

#include "cmodel.h"

/* The node a client of `zone` ("" when unknown) is sent to for the
 * partition whose main is `main` (-1 when it has none: -1 then). */
int32_t zr_leader(const cm_model *m, int32_t main, const char *zone, const kc_uuid *topic,
                  int32_t part);

/* Whether the zone has a live, non-draining node ("" never has). */
bool zr_zone_served(const cm_model *m, const char *zone);

/* The zone of a live node, or NULL. */
const char *zr_node_zone(const cm_model *m, int32_t node);

#endif
