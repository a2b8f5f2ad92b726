#include "tls.h"

#include <openssl/err.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <stdio.h>
#include <string.h>

#include "pmap.h"
#include "sk_err.h"

void sk_tls_last_error(char *out, size_t len)
{
    unsigned long e = ERR_get_error();
    if (!e) {
        snprintf(out, len, "%s", "");
        return;
    }
    ERR_error_string_n(e, out, len);
    ERR_clear_error();
}

static int key_password_cb(char *buf, int size, int rwflag, void *u)
{
    (void)rwflag;
    const char *pw = u;
    size_t n = pw ? strlen(pw) : 0;
    if (n >= (size_t)size)
        return 0;
    memcpy(buf, pw, n);
    return (int)n;
}

static int tls_version_bounds(SSL_CTX *ctx, const char *list)
{
    bool v12 = strstr(list, "TLSv1.2") != NULL, v13 = strstr(list, "TLSv1.3") != NULL;
    int lo = v12 ? TLS1_2_VERSION : TLS1_3_VERSION;
    int hi = v13 ? TLS1_3_VERSION : TLS1_2_VERSION;
    return SSL_CTX_set_min_proto_version(ctx, lo) && SSL_CTX_set_max_proto_version(ctx, hi);
}

static int fail(SSL_CTX *ctx, char *why, size_t whylen, const char *what, const char *file)
{
    char err[256];
    sk_tls_last_error(err, sizeof err);
    snprintf(why, whylen, "%s %s: %s", what, file, *err ? err : "failed");
    SSL_CTX_free(ctx);
    return -1;
}

static int load_trust(SSL_CTX *ctx, const sk_config *cfg, char *why, size_t whylen)
{
    const char *ts = cfg->ssl_truststore_location;
    if (!*ts)
        return 0;
    if (SSL_CTX_load_verify_locations(ctx, ts, NULL) != 1)
        return fail(ctx, why, whylen, "ssl.truststore.location", ts);
    STACK_OF(X509_NAME) *cas = SSL_load_client_CA_file(ts);
    if (cas)
        SSL_CTX_set_client_CA_list(ctx, cas);
    int mode = SSL_VERIFY_NONE;
    if (strcmp(cfg->ssl_client_auth, "requested") == 0)
        mode = SSL_VERIFY_PEER;
    else if (strcmp(cfg->ssl_client_auth, "required") == 0)
        mode = SSL_VERIFY_PEER | SSL_VERIFY_FAIL_IF_NO_PEER_CERT;
    SSL_CTX_set_verify(ctx, mode, NULL);
    return 0;
}

/* A context of `method` that reads the keystore's key with its password and
 * speaks the enabled protocol versions; NULL with the reason in why. */
static SSL_CTX *ctx_new(const SSL_METHOD *method, const sk_config *cfg, char *why, size_t whylen)
{
    ERR_clear_error();
    SSL_CTX *ctx = SSL_CTX_new(method);
    if (!ctx) {
        snprintf(why, whylen, "cannot make a TLS context");
        return NULL;
    }
    SSL_CTX_set_default_passwd_cb(ctx, key_password_cb);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, cfg->ssl_key_password);
    if (!tls_version_bounds(ctx, cfg->ssl_enabled_protocols)) {
        fail(ctx, why, whylen, "ssl.enabled.protocols", cfg->ssl_enabled_protocols);
        return NULL;
    }
    return ctx;
}

/* The keystore's certificate chain and its matching key; the password is
 * forgotten once the key is read. On failure ctx is freed. */
static int use_keystore(SSL_CTX *ctx, const char *ks, char *why, size_t whylen)
{
    if (SSL_CTX_use_certificate_chain_file(ctx, ks) != 1)
        return fail(ctx, why, whylen, "ssl.keystore.location: no certificate chain in", ks);
    if (SSL_CTX_use_PrivateKey_file(ctx, ks, SSL_FILETYPE_PEM) != 1)
        return fail(ctx, why, whylen, "ssl.keystore.location: no usable private key in", ks);
    if (SSL_CTX_check_private_key(ctx) != 1)
        return fail(ctx, why, whylen,
                    "ssl.keystore.location: the key does not match the certificate in", ks);
    SSL_CTX_set_default_passwd_cb_userdata(ctx, NULL);
    return 0;
}

SSL_CTX *sk_tls_load(const sk_config *cfg, char *why, size_t whylen)
{
    SSL_CTX *ctx = ctx_new(TLS_server_method(), cfg, why, whylen);
    if (!ctx || use_keystore(ctx, cfg->ssl_keystore_location, why, whylen) != 0 ||
        load_trust(ctx, cfg, why, whylen) != 0)
        return NULL;
    /* No resumption: every connection checks the client's certificate anew.
     * A session id context is still needed once client certificates are
     * verified, or a client offering a session fails its handshake. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_CIPHER_SERVER_PREFERENCE |
                                 SSL_OP_NO_TICKET);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
    static const unsigned char sid_ctx[] = "skiff";
    SSL_CTX_set_session_id_context(ctx, sid_ctx, sizeof sid_ctx - 1);
    return ctx;
}

/* The client side verifies the peer node's certificate: against the
 * truststore when one is given, else the system's authorities. */
static int client_trust(SSL_CTX *ctx, const sk_config *cfg, char *why, size_t whylen)
{
    const char *ts = cfg->ssl_truststore_location;
    if (*ts ? SSL_CTX_load_verify_locations(ctx, ts, NULL) != 1
            : SSL_CTX_set_default_verify_paths(ctx) != 1)
        return fail(ctx, why, whylen, "ssl.truststore.location", *ts ? ts : "(system default)");
    SSL_CTX_set_verify(ctx, SSL_VERIFY_PEER, NULL);
    return 0;
}

SSL_CTX *sk_tls_load_client(const sk_config *cfg, char *why, size_t whylen)
{
    SSL_CTX *ctx = ctx_new(TLS_client_method(), cfg, why, whylen);
    /* The node's own certificate is its identity towards the other nodes. */
    const char *ks = cfg->ssl_keystore_location;
    if (!ctx || (*ks && use_keystore(ctx, ks, why, whylen) != 0) ||
        client_trust(ctx, cfg, why, whylen) != 0)
        return NULL;
    SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
    return ctx;
}

void sk_tls_swap(SSL_CTX **slot, SSL_CTX *ctx)
{
    /* SSL_CTX is reference-counted: connections accepted with the old one
     * keep it alive until they end. */
    SSL_CTX_free(*slot);
    *slot = ctx;
}

void sk_tls_free(SSL_CTX *ctx)
{
    SSL_CTX_free(ctx);
}

SSL *sk_tls_new_ssl(SSL_CTX *ctx)
{
    return ctx ? SSL_new(ctx) : NULL;
}

/* The certificate's subject, RFC 2253 (Kafka's X500Principal.getName()). */
static bool subject_of(X509 *cert, char *dn, size_t dnlen)
{
    bool ok = false;
    BIO *b = BIO_new(BIO_s_mem());
    if (b && X509_NAME_print_ex(b, X509_get_subject_name(cert), 0,
                                XN_FLAG_RFC2253 & ~ASN1_STRFLGS_ESC_MSB) >= 0) {
        char *p;
        long n = BIO_get_mem_data(b, &p);
        if (n > 0 && (size_t)n < dnlen) {
            snprintf(dn, dnlen, "%.*s", (int)n, p);
            ok = true;
        }
    }
    BIO_free(b);
    return ok;
}

int sk_tls_principal(SSL *ssl, const sk_pmap *map, char *out, size_t len, char *dn,
                     size_t dnlen)
{
    snprintf(out, len, "User:ANONYMOUS");
    snprintf(dn, dnlen, "%s", "");
    X509 *cert = SSL_get1_peer_certificate(ssl);
    if (!cert)
        return 0;
    int rc = 0;
    char name[256];
    if (SSL_get_verify_result(ssl) == X509_V_OK && subject_of(cert, dn, dnlen)) {
        rc = map ? sk_pmap_apply(map, dn, name, sizeof name) : SK_ERR_NOENT;
        if (rc == 0 && strlen(name) + 6 > len)
            rc = SK_ERR_NOENT;
        if (rc == 0)
            snprintf(out, len, "User:%s", name);
        else
            rc = SK_ERR_NOENT;
    }
    X509_free(cert);
    return rc;
}
