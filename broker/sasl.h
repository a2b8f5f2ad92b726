/*
 * sasl: authentication on SASL_PLAINTEXT and SASL_SSL listeners
 * (docs/security.md): SaslHandshake then SaslAuthenticate v0-2, with the
 * mechanisms of sasl.enabled.mechanisms: PLAIN (users of
 * listener.name.<listener>.plain.sasl.jaas.config) and SCRAM-SHA-256/512
 * (credentials from the cluster metadata, scram.h), and the SCRAM credential
 * admin APIs (DescribeUserScramCredentials, AlterUserScramCredentials).
 *
 * Until a connection of a SASL listener has authenticated, only ApiVersions,
 * SaslHandshake and (after a handshake) SaslAuthenticate are served; any
 * other request closes it, as Kafka does. A failed authentication is answered
 * SASL_AUTHENTICATION_FAILED after connection.failed.authentication.delay.ms,
 * then the connection closes. With connections.max.reauth.ms the session
 * ends after that long (KIP-368): the client re-authenticates on the same
 * connection (same principal, same mechanism) before, else its next request
 * closes it.
 * Neither passwords nor SASL tokens are logged.
 *
 * Thread: the event loop.
 */
#ifndef SASL_H
#define SASL_H

#include <stdbool.h>

#include "types.h"

struct sk_sasl;
void sk_sasl_free(struct sk_sasl *s);
/* Whether connection c may be served a request of API `key` now; if not,
 * why (for the log). */
bool sk_sasl_allows(sk_conn *c, int16_t key, const char **why);
/* After a SaslHandshake v0 and until authenticated, frames are bare SASL
 * tokens (Kafka's original protocol): sk_dispatch hands them to
 * sk_sasl_raw_token, which answers with a bare token. */
bool sk_sasl_raw(const sk_conn *c);
void sk_sasl_raw_token(sk_req *r);

#endif
