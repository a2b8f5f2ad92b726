/*
 * tier_logs: a cluster log's things in the object store, for the node that
 * holds the log in custody (custody.c): where its view snapshots are, how
 * its view comes back from the newest, and how they go once the log is
 * deleted.
 *
 * Snapshots of a single node's view are under snapshots/node-<node.id>/;
 * those of a cluster log's view under snapshots/log-<log id>/, so that a
 * node's successive incarnations (one log each) never mix theirs.
 *
 * Thread: any; blocking (start-up and custody jobs, never the loop).
 */
#ifndef TIER_LOGS_H
#define TIER_LOGS_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

/* log 0: the single node's own. */
void sk_tier_snapshot_prefix(const sk_config *cfg, int64_t log, char *buf, size_t len);
/* Fetches the newest snapshot under `prefix` into dbpath (a file that must
 * not exist). 0 also when there is none (the view starts empty). */
int sk_tier_restore_from(const sk_config *cfg, const char *prefix, const char *dbpath, char *why,
                         size_t whylen) __attribute__((warn_unused_result));
int sk_tier_restore_log_view(const sk_config *cfg, int64_t log, const char *dbpath, char *why,
                             size_t whylen) __attribute__((warn_unused_result));
/* Deletes every snapshot of log `log`. */
int sk_tier_forget_log(const sk_config *cfg, int64_t log) __attribute__((warn_unused_result));

#endif
