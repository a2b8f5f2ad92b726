/*
 * pmap: ssl.principal.mapping.rules, Kafka's way of turning a client
 * certificate's distinguished name (RFC 2253, "CN=alice,OU=ops,O=example")
 * into a user name (docs/security.md, "Principal mapping rules").
 *
 * Rules, separated by commas or new lines, are tried in order; the first that
 * applies gives the name:
 *  - DEFAULT: the distinguished name itself;
 *  - RULE:pattern/replacement/[LU]: applies when pattern matches the whole
 *    name; the name becomes the replacement, in which $N is the pattern's
 *    group N (a number past the last group stays literal text) and a
 *    backslash makes the next character literal; L or U then lower- or upper-cases it. In the
 *    pattern, "\/" is a slash. Patterns are POSIX extended regular
 *    expressions: Java's lazy quantifiers (*?, +?, ??) are read as greedy
 *    ones, and \d / \D as [0-9] / [^0-9].
 * When no rule applies the certificate has no principal (the connection is
 * refused, as Kafka refuses it).
 *
 * Thread: any; a map is immutable once made. Owns its compiled patterns.
 */
#ifndef PMAP_H
#define PMAP_H

#include <stddef.h>

typedef struct sk_pmap sk_pmap;

/* The rules of `rules`, in *out; SK_ERR_INVAL with why for a rule that is
 * neither DEFAULT nor a well-formed RULE, or a pattern that does not
 * compile; SK_ERR_NOMEM. */
int sk_pmap_parse(const char *rules, sk_pmap **out, char *why, size_t whylen)
    __attribute__((warn_unused_result));
void sk_pmap_free(sk_pmap *m);
/* The name for distinguished name dn into out (0), SK_ERR_NOENT when no
 * rule applies, SK_ERR_INVAL when the name does not fit in len. */
int sk_pmap_apply(const sk_pmap *m, const char *dn, char *out, size_t len)
    __attribute__((warn_unused_result));

#endif
