/*
 * acls: the ACL bindings of the cluster metadata in this node's memory
 * (node->acls, acl.h's set), and their records.
 *
 * Each binding is one entry of the metadata, named by its text form
 * (sk_acl_encode): on a single node a SK_META_ACL WAL record (created or
 * deleted), kept in the SQLite view (table acls) and in every snapshot
 * (extra sections SK_SNAP_ACLS); in a cluster a key config/acl/<text> of
 * etcd that every node follows with a watch (cmeta_etcd.c), so that a
 * change reaches every node without a restart.
 *
 * Record and section body: gconf.h's config-set body, the set named by the
 * text, with one entry ("acl", "") while the binding exists and none once
 * it is deleted.
 *
 * Thread: the event loop.
 */
#ifndef ACLS_H
#define ACLS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "acl.h"
#include "sk_buf.h"
#include "types.h"

/* The node's set, made on first use (NULL: out of memory). */
sk_acl_set *sk_acls(sk_node *n);
/* Adds or removes one binding in memory. */
int sk_acls_apply(sk_node *n, const sk_acl *a, bool present) __attribute__((warn_unused_result));
/* The same, from a binding's text. */
int sk_acls_apply_text(sk_node *n, const char *text, size_t len, bool present)
    __attribute__((warn_unused_result));
/* The record/section body of a change. */
int sk_acls_body_put(sk_buf *b, const sk_acl *a, bool present) __attribute__((warn_unused_result));
/* Applies a body (start-up loading, snapshots). */
int sk_acls_load(sk_node *n, const uint8_t *body, size_t len) __attribute__((warn_unused_result));
/* Appends one snapshot extra section per binding; returns how many. */
uint32_t sk_acls_snapshot(const sk_node *n, sk_buf *b);
void sk_acls_free(sk_node *n);

#endif
