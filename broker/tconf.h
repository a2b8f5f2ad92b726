/*
 * tconf: the topic configurations Skiff honours.
 *
 * A topic's configuration is its overrides (what CreateTopics or
 * AlterConfigs set) resolved against the broker defaults. The table holds
 * every topic configuration Kafka 4.3 has: those that mean something in
 * Skiff's model are honoured, the others (log segments, replicas, tiered
 * storage) are checked as Kafka checks them, stored and described, each
 * with what it does here. Names Kafka does not know, and the values of the
 * honoured ones that Skiff cannot honour (tiered storage), are refused with
 * INVALID_CONFIG and a message.
 *
 * Contract: pure functions; the loop thread in practice. sk_tconf owns its
 * name/value strings (sk_tconf_free).
 */
#ifndef TCONF_H
#define TCONF_H

#include <stddef.h>

#include "types.h"

/* How a value is checked (Kafka's ConfigDef types); the bounds apply to
 * the numeric ones. */
typedef enum {
    SK_TC_SPECIAL, /* checked by name in tconf.c */
    SK_TC_LONG,
    SK_TC_INT,
    SK_TC_BOOL,
    SK_TC_DOUBLE,
    SK_TC_THROTTLED, /* "", "*", or partition:broker,... */
} sk_tc_type;

typedef struct sk_tconf_def {
    const char *name;
    const char *broker_prop; /* the broker default it falls back to, or NULL */
    const char *fixed_default; /* default when no broker property */
    const char *doc;           /* what it does in Skiff */
    sk_tc_type type;
    double min, max;
} sk_tconf_def;

/* The longest value stored (a throttled replica list can be long), and
 * so the buffer sk_tconf_value needs. */
#define SK_TCONF_VALUE_MAX 255

int sk_tconf_ndefs(void);
const sk_tconf_def *sk_tconf_def_at(int i);
const sk_tconf_def *sk_tconf_find(const char *name, size_t len);

/* Validates one name/value pair; returns NULL or a reason (a static string,
 * valid until the next call: loop thread). */
const char *sk_tconf_check(const char *name, size_t nlen, const char *value, size_t vlen);

/* Builds conf from overrides (copied). Returns 0, or SK_KAFKA_INVALID_CONFIG
 * with a message in why. */
int sk_tconf_build(const sk_config *cfg, int n, const char *const *names, const size_t *nlens,
                   const char *const *values, const size_t *vlens, sk_tconf *out, char *why,
                   size_t whylen);
/* Same, from an encoded config block (meta.h). */
int sk_tconf_from_block(const sk_config *cfg, const uint8_t *block, size_t len, sk_tconf *out);
void sk_tconf_free(sk_tconf *c);
/* Re-resolves the honoured fields after broker defaults changed. */
void sk_tconf_resolve(const sk_config *cfg, sk_tconf *c);

/* The effective value of definition i, and whether it comes from an
 * override (1), a broker property set by the user (2) or a default (0). */
const char *sk_tconf_value(const sk_config *cfg, const sk_tconf *c, int i, char *buf, size_t len,
                           int *source);

#endif
