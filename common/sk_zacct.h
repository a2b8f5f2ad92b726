/*
 * sk_zacct: the bytes a node exchanges with each availability zone, by
 * direction and kind (docs/zones.md, "Cross-zone accounting").
 *
 * Why: what AWS bills in a multi-zone cluster is bytes between instances of
 * different zones; a node counts what it sends and receives, so that an
 * operator sees what crossed and what it cost.
 *
 * The table holds one counter per (direction, kind, zone slot). Slots are
 * interned zone names: SK_ZA_UNKNOWN for a peer whose zone is unknown (""),
 * then up to SK_ZA_NAMED names in the order they were first seen (the
 * node's own zone first), then SK_ZA_OTHER for every zone seen after those
 * were taken. A slot is found once (per connection, per endpoint) and kept;
 * counting it is one relaxed atomic add: no lock, no allocation.
 *
 * A slot is cross-zone when both its zone and the node's own are known and
 * differ (SK_ZA_OTHER always is: the own zone holds a named slot).
 *
 * Thread: any. sk_zacct_zone takes a mutex only the first time it meets a
 * name (known names are found without it); the other calls never lock.
 * Reads see each counter at some recent value, not all at one instant.
 * Owns its names; zone names longer than SK_ZA_NAME_MAX - 1 are cut.
 * Errors: sk_zacct_new returns NULL when out of memory.
 */
#ifndef SK_ZACCT_H
#define SK_ZACCT_H

#include <stdbool.h>
#include <stdint.h>

typedef enum { SK_ZA_IN, SK_ZA_OUT } sk_za_dir;
#define SK_ZA_DIRS 2

typedef enum {
    SK_ZA_CLIENT,  /* Kafka clients' requests and responses */
    SK_ZA_CONFIRM, /* Confirm RPCs (proxy produce) and their answers */
    SK_ZA_FOLLOW,  /* Follow RPCs (proxy fetch) and their answers */
    SK_ZA_RPC,     /* other node-to-node requests: HandoffReady, forwarded Kafka requests */
    SK_ZA_ETCD,    /* requests to etcd and its answers */
} sk_za_kind;
#define SK_ZA_KINDS 5

#define SK_ZA_NAMED 32
#define SK_ZA_UNKNOWN 0
#define SK_ZA_OTHER (SK_ZA_NAMED + 1)
#define SK_ZA_SLOTS (SK_ZA_NAMED + 2)
#define SK_ZA_NAME_MAX 64

typedef struct sk_zacct sk_zacct;

/* own_zone: the node's zone ("" or NULL when unknown). */
sk_zacct *sk_zacct_new(const char *own_zone);
void sk_zacct_destroy(sk_zacct *a);

/* The slot of `zone` (NULL or "": SK_ZA_UNKNOWN), interned on first use. */
int sk_zacct_zone(sk_zacct *a, const char *zone);
/* The own zone's slot (SK_ZA_UNKNOWN when the node has none). */
int sk_zacct_own(const sk_zacct *a);
/* A named slot's zone; "" for SK_ZA_UNKNOWN, SK_ZA_OTHER and slots not taken. */
const char *sk_zacct_name(const sk_zacct *a, int slot);
bool sk_zacct_cross(const sk_zacct *a, int slot);

/* Counts bytes; a slot outside [0, SK_ZA_SLOTS) counts as SK_ZA_UNKNOWN. */
void sk_zacct_add(sk_zacct *a, int slot, sk_za_dir d, sk_za_kind k, uint64_t bytes);
uint64_t sk_zacct_get(const sk_zacct *a, int slot, sk_za_dir d, sk_za_kind k);
/* Sum over the cross-zone slots. */
uint64_t sk_zacct_cross_bytes(const sk_zacct *a, sk_za_dir d, sk_za_kind k);

/* "client", "confirm", "follow", "rpc", "etcd"; "in", "out". */
const char *sk_za_kind_name(sk_za_kind k);
const char *sk_za_dir_name(sk_za_dir d);

#endif
