/*
 * dynconf: broker properties changed while the node runs.
 *
 * AlterConfigs and IncrementalAlterConfigs on the broker resource change the
 * properties marked dynamic in the config table. The complete set of such
 * changes is one WAL record (SK_META_BROKER_CONFIG), kept in the SQLite view
 * and in every snapshot, so it survives restarts; removing a change restores
 * the value from the properties file. Topics follow the new defaults at once.
 *
 * Thread: the event loop.
 */
#ifndef DYNCONF_H
#define DYNCONF_H

#include <stdbool.h>
#include <stddef.h>

#include "types.h"

/* NULL when name=value may be set at runtime, else the reason. */
const char *sk_dynconf_check(const char *name, size_t nlen, const char *value, size_t vlen,
                             char *buf, size_t buflen);
/* Makes (names, values) the complete set of runtime changes, in memory
 * (the caller has appended the record). */
int sk_dynconf_apply(sk_node *n, int count, const char *const *names, const size_t *nlens,
                     const char *const *values, const size_t *vlens);
/* Same, from an encoded config block (start-up). */
int sk_dynconf_apply_block(sk_node *n, const uint8_t *block, size_t len);
/* Index of name in the current set, or -1. */
int sk_dynconf_find(const sk_node *n, const char *name, size_t len);
/* Appends the record for a new complete set and applies it. */
int sk_dynconf_commit(sk_node *n, int count, const char *const *names, const size_t *nlens,
                      const char *const *values, const size_t *vlens,
                      void (*fn)(void *arg, int err), void *arg);
void sk_dynconf_free(sk_node *n);

#endif
