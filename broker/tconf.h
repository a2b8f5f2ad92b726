/*
 * tconf: the topic configurations Skiff honours.
 *
 * A topic's configuration is its overrides (what CreateTopics or
 * AlterConfigs set) resolved against the broker defaults. Only properties in
 * this module's table are accepted; anything else is refused with
 * INVALID_CONFIG and a message, never silently stored.
 *
 * Contract: pure functions; the loop thread in practice. sk_tconf owns its
 * name/value strings (sk_tconf_free).
 */
#ifndef TCONF_H
#define TCONF_H

#include <stddef.h>

#include "types.h"

typedef struct sk_tconf_def {
    const char *name;
    const char *broker_prop; /* the broker default it falls back to, or NULL */
    const char *fixed_default; /* default when no broker property */
    const char *doc;
} sk_tconf_def;

int sk_tconf_ndefs(void);
const sk_tconf_def *sk_tconf_def_at(int i);
const sk_tconf_def *sk_tconf_find(const char *name, size_t len);

/* Validates one name/value pair; returns NULL or a reason. */
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
