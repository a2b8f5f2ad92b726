/*
 * tls: the node's TLS server side for SSL and SASL_SSL listeners (OpenSSL).
 *
 * One server context holds the node's key and certificate chain
 * (ssl.keystore.location, PEM, the key maybe encrypted with
 * ssl.key.password), the certificate authorities of clients
 * (ssl.truststore.location), the TLS versions (ssl.enabled.protocols) and
 * whether client certificates are asked for (ssl.client.auth).
 *
 * Reloading (SIGHUP): sk_tls_load builds a complete new context from the
 * files; sk_tls_swap makes it the one new connections get. Open connections
 * keep the context they were accepted with (each SSL holds a reference), so
 * nothing is dropped; a reload whose files are unreadable or inconsistent
 * changes nothing.
 *
 * Principal: with a verified client certificate, "User:" and the name that
 * ssl.principal.mapping.rules (pmap.h) make of its subject, an RFC 2253
 * distinguished name (DEFAULT: User:CN=alice,O=example); without,
 * User:ANONYMOUS.
 *
 * Client side: the node's own connections to other nodes (rpc/peer.h) use
 * sk_tls_load_client's context, built from the same files.
 *
 * Thread: sk_tls_load and sk_tls_load_client read files and may run on any thread (start-up, or
 * a worker for a reload); every other function runs on the event loop.
 */
#ifndef TLS_H
#define TLS_H

#include <stddef.h>

#include "config.h"

typedef struct ssl_ctx_st SSL_CTX;
typedef struct ssl_st SSL;

/* A new server context from cfg's files; NULL with a reason in why. */
SSL_CTX *sk_tls_load(const sk_config *cfg, char *why, size_t whylen);
/* A client context for connections to other nodes' SSL and SASL_SSL
 * inter-broker listeners: the same keystore (the node's certificate is its
 * principal there), the peer's certificate checked against the truststore
 * (the system's authorities without one). NULL with a reason in why. */
SSL_CTX *sk_tls_load_client(const sk_config *cfg, char *why, size_t whylen);
/* Makes ctx (taken) the context of new connections; frees the previous one
 * once its last connection is gone. *slot may be NULL. */
void sk_tls_swap(SSL_CTX **slot, SSL_CTX *ctx);
void sk_tls_free(SSL_CTX *ctx);
/* A server-side SSL for a new connection (NULL on failure). */
SSL *sk_tls_new_ssl(SSL_CTX *ctx);
struct sk_pmap;
/* The principal of a connection whose handshake completed, in out: with a
 * verified certificate "User:" and the name the rules of map give its
 * subject (dn: the subject, for the log), else User:ANONYMOUS. 0, or
 * SK_ERR_NOENT when no rule applies (or the name does not fit). */
int sk_tls_principal(SSL *ssl, const struct sk_pmap *map, char *out, size_t len, char *dn,
                     size_t dnlen) __attribute__((warn_unused_result));
/* OpenSSL's last error on this thread, as text (empty when none), cleared. */
void sk_tls_last_error(char *out, size_t len);

#endif
