/*
 * acl: Kafka's ACL model and the decision of its StandardAuthorizer, as a
 * pure module (no I/O, no node): a set of bindings, the super users and
 * allow.everyone.if.no.acl.found in, allowed or denied out.
 *
 * A binding: resource (type, pattern LITERAL or PREFIXED, name; the LITERAL
 * name "*" matches every resource of its type), principal ("User:alice", or
 * "User:*" for every user), host ("*" or one address), operation and
 * permission (ALLOW or DENY). Codes are Kafka's wire codes.
 *
 * The decision, as Kafka 4.3's StandardAuthorizer makes it:
 *  - a super user (super.users, "User:a;User:b") may do anything;
 *  - a DENY binding that matches the resource, principal and host and names
 *    the operation (or ALL) denies;
 *  - else an ALLOW binding that matches allows; an ALLOW of READ, WRITE,
 *    DELETE or ALTER implies DESCRIBE, ALTER_CONFIGS implies
 *    DESCRIBE_CONFIGS, ALL implies everything;
 *  - else, when some binding matches the resource (whoever it names) the
 *    request is denied, and when none does, allowed only with
 *    allow.everyone.if.no.acl.found. No binding at all is not a special
 *    case: everyone but the super users is then denied (by default).
 *
 * Thread: any; a set is not shared between threads without a lock.
 */
#ifndef ACL_H
#define ACL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum {
    SK_ACL_RES_ANY = 1,
    SK_ACL_RES_TOPIC = 2,
    SK_ACL_RES_GROUP = 3,
    SK_ACL_RES_CLUSTER = 4,
    SK_ACL_RES_TXN_ID = 5,
    SK_ACL_RES_DELEGATION_TOKEN = 6,
    SK_ACL_RES_USER = 7,
};
enum { SK_ACL_PAT_ANY = 1, SK_ACL_PAT_MATCH = 2, SK_ACL_PAT_LITERAL = 3, SK_ACL_PAT_PREFIXED = 4 };
enum {
    SK_ACL_OP_ANY = 1,
    SK_ACL_OP_ALL = 2,
    SK_ACL_OP_READ = 3,
    SK_ACL_OP_WRITE = 4,
    SK_ACL_OP_CREATE = 5,
    SK_ACL_OP_DELETE = 6,
    SK_ACL_OP_ALTER = 7,
    SK_ACL_OP_DESCRIBE = 8,
    SK_ACL_OP_CLUSTER_ACTION = 9,
    SK_ACL_OP_DESCRIBE_CONFIGS = 10,
    SK_ACL_OP_ALTER_CONFIGS = 11,
    SK_ACL_OP_IDEMPOTENT_WRITE = 12,
    SK_ACL_OP_CREATE_TOKENS = 13,
    SK_ACL_OP_DESCRIBE_TOKENS = 14,
};
enum { SK_ACL_PERM_ANY = 1, SK_ACL_PERM_DENY = 2, SK_ACL_PERM_ALLOW = 3 };

#define SK_ACL_CLUSTER_NAME "kafka-cluster"
#define SK_ACL_NAME_MAX 512

/* One binding; strings are NUL-terminated. A filter has the same shape:
 * NULL strings and the ANY codes match everything, pattern MATCH matches
 * every binding that would apply to the named resource. */
typedef struct sk_acl {
    int8_t rtype, pattern;
    const char *name;
    const char *principal;
    const char *host;
    int8_t op, perm;
} sk_acl;

typedef struct sk_acl_set sk_acl_set;

/* super_users: super.users as configured (NULL or "": none). */
sk_acl_set *sk_acl_set_new(const char *super_users, bool everyone_if_none);
void sk_acl_set_free(sk_acl_set *s);

/* Adds a copy of a (a binding already there is not added twice). */
int sk_acl_add(sk_acl_set *s, const sk_acl *a) __attribute__((warn_unused_result));
/* Removes the equal binding; 1 when there was one. */
int sk_acl_remove(sk_acl_set *s, const sk_acl *a);
/* Removes every binding of one resource (type, pattern, name). */
void sk_acl_remove_resource(sk_acl_set *s, int8_t rtype, int8_t pattern, const char *name);
int sk_acl_count(const sk_acl_set *s);
const sk_acl *sk_acl_at(const sk_acl_set *s, int i);

bool sk_acl_is_super(const sk_acl_set *s, const char *principal);

/* Whether principal, from host, may do op on the resource (rtype, name). */
bool sk_acl_allowed(const sk_acl_set *s, const char *principal, const char *host, int8_t rtype,
                    const char *name, size_t nlen, int8_t op);
/* Kafka's "authorized operations" bit field of one resource: bit n set when
 * operation n is allowed, over the operations `ops` (a bit field) names. */
int32_t sk_acl_authorized_ops(const sk_acl_set *s, const char *principal, const char *host,
                              int8_t rtype, const char *name, size_t nlen, int32_t ops);
/* Kafka's authorizeByResourceType: whether op is allowed on at least one
 * resource of the type (InitProducerId's WRITE on some topic). */
bool sk_acl_allowed_any(const sk_acl_set *s, const char *principal, const char *host,
                        int8_t rtype, int8_t op);

/* Whether a binding matches a filter (DescribeAcls, DeleteAcls). */
bool sk_acl_filter_matches(const sk_acl *filter, const sk_acl *a);
/* 0 when a filter is valid, else Kafka's message. */
const char *sk_acl_filter_invalid(const sk_acl *filter);
/* NULL when a binding may be created, else Kafka's message (the error is
 * INVALID_REQUEST). */
const char *sk_acl_invalid(const sk_acl *a);
/* sk_acl_invalid's answer for a principal without "Type:" (Kafka's message
 * names it: see sk_acl_invalid's caller). */
#define SK_ACL_BAD_PRINCIPAL "Could not parse principal"

/* A binding as text, its identity in the metadata (a WAL record, an etcd
 * key): "rtype.pattern.op.perm.L:principalL:hostL:name" with decimal
 * lengths L. sk_acl_encode returns the length written (0: buf too small);
 * sk_acl_decode points a's strings into buf (which it rewrites) and returns
 * 0, or -1 for text that is not a binding. */
#define SK_ACL_TEXT_MAX (3 * SK_ACL_NAME_MAX + 64)
size_t sk_acl_encode(const sk_acl *a, char *buf, size_t len);
int sk_acl_decode(char *buf, size_t len, sk_acl *a) __attribute__((warn_unused_result));

#endif
