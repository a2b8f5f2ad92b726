#include "route.h"

#include <string.h>

/* A 64-bit mix of (topic, partition, node): the rendezvous weight. */
static uint64_t weight(const kc_uuid *topic, int32_t part, int32_t node)
{
    uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a over the inputs... */
    for (int i = 0; i < 16; i++)
        h = (h ^ topic->b[i]) * 0x100000001b3ull;
    uint64_t x = h ^ ((uint64_t)(uint32_t)part << 32 | (uint32_t)node);
    /* ...then a finalizer, so that close inputs give unrelated weights. */
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return x;
}

static bool serves(const cm_node *nd, const char *zone)
{
    return !nd->draining && strncmp(nd->rack, zone, sizeof nd->rack) == 0;
}

const char *zr_node_zone(const cm_model *m, int32_t node)
{
    const cm_node *nd = node >= 0 ? cm_node_get(m, node) : NULL;
    return nd ? nd->rack : NULL;
}

bool zr_zone_served(const cm_model *m, const char *zone)
{
    if (!zone || !zone[0])
        return false;
    size_t n;
    const cm_node *nodes = cm_nodes(m, &n);
    for (size_t i = 0; i < n; i++)
        if (serves(&nodes[i], zone))
            return true;
    return false;
}

int32_t zr_leader(const cm_model *m, int32_t main, const char *zone, const kc_uuid *topic,
                  int32_t part)
{
    if (main < 0 || !zone || !zone[0])
        return main;
    const char *mz = zr_node_zone(m, main);
    if (mz && strncmp(mz, zone, CM_ZONE_MAX) == 0)
        return main;
    size_t n;
    const cm_node *nodes = cm_nodes(m, &n);
    int32_t best = -1;
    uint64_t bw = 0;
    for (size_t i = 0; i < n; i++) {
        if (!serves(&nodes[i], zone))
            continue;
        uint64_t w = weight(topic, part, nodes[i].id);
        if (best < 0 || w > bw || (w == bw && nodes[i].id < best)) {
            best = nodes[i].id;
            bw = w;
        }
    }
    return best >= 0 ? best : main;
}
