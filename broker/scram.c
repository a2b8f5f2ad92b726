#include "scram.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

sk_scram_mech sk_scram_mech_named(const char *name, size_t len)
{
    if (len == 13 && memcmp(name, "SCRAM-SHA-256", 13) == 0)
        return SK_SCRAM_SHA_256;
    if (len == 13 && memcmp(name, "SCRAM-SHA-512", 13) == 0)
        return SK_SCRAM_SHA_512;
    return 0;
}

const char *sk_scram_mech_name(sk_scram_mech m)
{
    return m == SK_SCRAM_SHA_512 ? "SCRAM-SHA-512" : "SCRAM-SHA-256";
}

size_t sk_scram_hash_len(sk_scram_mech m)
{
    return m == SK_SCRAM_SHA_512 ? 64 : 32;
}

static const EVP_MD *md_of(sk_scram_mech m)
{
    return m == SK_SCRAM_SHA_512 ? EVP_sha512() : EVP_sha256();
}

/* ---- base64 ---- */

size_t sk_b64_encode(const uint8_t *in, size_t n, char *out)
{
    return (size_t)EVP_EncodeBlock((unsigned char *)out, in, (int)n);
}

long sk_b64_decode(const char *in, size_t n, uint8_t *out, size_t outsize)
{
    if (n % 4 != 0 || n / 4 * 3 > outsize)
        return -1;
    int got = EVP_DecodeBlock(out, (const unsigned char *)in, (int)n);
    if (got < 0)
        return -1;
    /* EVP_DecodeBlock counts the padding as zero bytes. */
    if (n && in[n - 1] == '=')
        got--;
    if (n > 1 && in[n - 2] == '=')
        got--;
    return got;
}

/* ---- keys ---- */

static int hmac(sk_scram_mech m, const uint8_t *key, size_t klen, const void *msg, size_t mlen,
                uint8_t *out)
{
    unsigned int ol = 0;
    return HMAC(md_of(m), key, (int)klen, msg, mlen, out, &ol) ? 0 : SK_ERR_INVAL;
}

static int hash(sk_scram_mech m, const uint8_t *in, size_t n, uint8_t *out)
{
    unsigned int ol = 0;
    return EVP_Digest(in, n, out, &ol, md_of(m), NULL) == 1 ? 0 : SK_ERR_INVAL;
}

int sk_scram_salt_password(sk_scram_mech m, const char *pw, size_t pwlen, const uint8_t *salt,
                           size_t saltlen, int32_t iterations, uint8_t *out)
{
    int ok = PKCS5_PBKDF2_HMAC(pw, (int)pwlen, salt, (int)saltlen, iterations, md_of(m),
                               (int)sk_scram_hash_len(m), out);
    return ok == 1 ? 0 : SK_ERR_INVAL;
}

int sk_scram_cred_make(sk_scram_mech m, const uint8_t *salt, size_t saltlen,
                       const uint8_t *salted, size_t saltedlen, int32_t iterations,
                       sk_scram_cred *out)
{
    size_t hl = sk_scram_hash_len(m);
    if (saltlen == 0 || saltlen > SK_SCRAM_MAX_SALT || saltedlen != hl)
        return SK_ERR_INVAL;
    memset(out, 0, sizeof *out);
    memcpy(out->salt, salt, saltlen);
    out->salt_len = saltlen;
    out->iterations = iterations;
    uint8_t client_key[SK_SCRAM_MAX_HASH];
    int rc = hmac(m, salted, hl, "Client Key", 10, client_key);
    rc = rc ? rc : hash(m, client_key, hl, out->stored_key);
    rc = rc ? rc : hmac(m, salted, hl, "Server Key", 10, out->server_key);
    OPENSSL_cleanse(client_key, sizeof client_key);
    return rc;
}

int sk_scram_cred_format(sk_scram_mech m, const sk_scram_cred *c, char *out, size_t len)
{
    size_t hl = sk_scram_hash_len(m);
    char salt[SK_SCRAM_MAX_SALT * 2], sk[SK_SCRAM_MAX_HASH * 2], vk[SK_SCRAM_MAX_HASH * 2];
    sk_b64_encode(c->salt, c->salt_len, salt);
    sk_b64_encode(c->stored_key, hl, sk);
    sk_b64_encode(c->server_key, hl, vk);
    int n = snprintf(out, len, "salt=%s,stored_key=%s,server_key=%s,iterations=%d", salt, sk, vk,
                     (int)c->iterations);
    return n > 0 && (size_t)n < len ? 0 : SK_ERR_NOMEM;
}

/* The value of `key=` in a comma-separated list (NULL and *vlen 0 if absent). */
static const char *attr(const char *s, size_t len, const char *key, size_t *vlen)
{
    size_t kl = strlen(key);
    const char *p = s, *end = s + len;
    *vlen = 0;
    while (p < end) {
        const char *comma = memchr(p, ',', (size_t)(end - p));
        const char *e = comma ? comma : end;
        if ((size_t)(e - p) > kl && memcmp(p, key, kl) == 0 && p[kl] == '=') {
            *vlen = (size_t)(e - p) - kl - 1;
            return p + kl + 1;
        }
        p = e + 1;
    }
    return NULL;
}

int sk_scram_cred_parse(sk_scram_mech m, const char *s, size_t len, sk_scram_cred *out)
{
    size_t hl = sk_scram_hash_len(m), sl, kl, vl, il;
    const char *salt = attr(s, len, "salt", &sl), *sk = attr(s, len, "stored_key", &kl);
    const char *vk = attr(s, len, "server_key", &vl), *it = attr(s, len, "iterations", &il);
    if (!salt || !sk || !vk || !it || il == 0 || il > 9)
        return SK_ERR_CORRUPT;
    memset(out, 0, sizeof *out);
    long n = sk_b64_decode(salt, sl, out->salt, sizeof out->salt);
    if (n <= 0)
        return SK_ERR_CORRUPT;
    out->salt_len = (size_t)n;
    uint8_t tmp[SK_SCRAM_MAX_HASH + 3];
    if (sk_b64_decode(sk, kl, tmp, sizeof tmp) != (long)hl)
        return SK_ERR_CORRUPT;
    memcpy(out->stored_key, tmp, hl);
    if (sk_b64_decode(vk, vl, tmp, sizeof tmp) != (long)hl)
        return SK_ERR_CORRUPT;
    memcpy(out->server_key, tmp, hl);
    char num[12];
    memcpy(num, it, il);
    num[il] = 0;
    out->iterations = (int32_t)strtol(num, NULL, 10);
    return out->iterations > 0 ? 0 : SK_ERR_CORRUPT;
}

/* ---- the exchange ---- */

void sk_scram_init(sk_scram_server *s, sk_scram_mech m)
{
    memset(s, 0, sizeof *s);
    s->mech = m;
}

/* saslname: "=2C" is ',' and "=3D" is '='; any other '=' is an error. */
static int unescape_name(const char *in, size_t n, char *out, size_t outsize)
{
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        char c = in[i];
        if (c == '=') {
            if (n - i < 3)
                return SK_ERR_PARSE;
            if (memcmp(in + i, "=2C", 3) == 0)
                c = ',';
            else if (memcmp(in + i, "=3D", 3) == 0)
                c = '=';
            else
                return SK_ERR_PARSE;
            i += 2;
        }
        if (c == 0 || k + 1 >= outsize)
            return SK_ERR_PARSE;
        out[k++] = c;
    }
    out[k] = 0;
    return k ? 0 : SK_ERR_PARSE;
}

int sk_scram_client_first(sk_scram_server *s, const uint8_t *msg, size_t len, char *why,
                          size_t whylen)
{
    const char *m = (const char *)msg;
    if (s->state != SK_SCRAM_START || len >= SK_SCRAM_MAX_MSG || memchr(m, 0, len)) {
        snprintf(why, whylen, "unexpected or oversized client-first message");
        return SK_ERR_INVAL;
    }
    /* gs2-header: no channel binding ("n" or "y"), optional authzid, ','. */
    if (len < 3 || (m[0] != 'n' && m[0] != 'y') || m[1] != ',') {
        snprintf(why, whylen, "channel binding is not supported");
        return SK_ERR_PARSE;
    }
    const char *c2 = memchr(m + 2, ',', len - 2);
    if (!c2) {
        snprintf(why, whylen, "malformed gs2 header");
        return SK_ERR_PARSE;
    }
    const char *bare = c2 + 1;
    size_t blen = len - (size_t)(bare - m);
    if (blen < 2 || memcmp(bare, "n=", 2) != 0) {
        snprintf(why, whylen, "client-first message names no user");
        return SK_ERR_PARSE;
    }
    size_t ul, nl;
    const char *u = attr(bare, blen, "n", &ul), *nonce = attr(bare, blen, "r", &nl);
    if (!u || !nonce || nl == 0 || nl >= sizeof s->nonce / 2 ||
        unescape_name(u, ul, s->user, sizeof s->user) != 0) {
        snprintf(why, whylen, "malformed client-first message");
        return SK_ERR_PARSE;
    }
    size_t tl;
    if (attr(bare, blen, "tokenauth", &tl)) {
        snprintf(why, whylen, "delegation tokens are not supported");
        return SK_ERR_INVAL;
    }
    memcpy(s->client_first_bare, bare, blen);
    s->client_first_bare[blen] = 0;
    memcpy(s->nonce, nonce, nl);
    s->nonce[nl] = 0;
    return 0;
}

int sk_scram_server_first(sk_scram_server *s, const sk_scram_cred *cred, const char *server_nonce,
                          char *out, size_t outsize, size_t *outlen)
{
    if (s->state != SK_SCRAM_START || !s->nonce[0])
        return SK_ERR_INVAL;
    size_t cl = strlen(s->nonce), sl = strlen(server_nonce);
    if (cl + sl >= sizeof s->nonce)
        return SK_ERR_INVAL;
    memcpy(s->nonce + cl, server_nonce, sl + 1);
    s->cred = *cred;
    char salt[SK_SCRAM_MAX_SALT * 2];
    sk_b64_encode(cred->salt, cred->salt_len, salt);
    int n = snprintf(s->server_first, sizeof s->server_first, "r=%s,s=%s,i=%d", s->nonce, salt,
                     (int)cred->iterations);
    if (n <= 0 || (size_t)n >= sizeof s->server_first || (size_t)n >= outsize)
        return SK_ERR_NOMEM;
    memcpy(out, s->server_first, (size_t)n + 1);
    *outlen = (size_t)n;
    s->state = SK_SCRAM_FIRST_SENT;
    return 0;
}

static int fail(char *why, size_t whylen, const char *msg, int rc)
{
    snprintf(why, whylen, "%s", msg);
    return rc;
}

int sk_scram_client_final(sk_scram_server *s, const uint8_t *msg, size_t len, char *out,
                          size_t outsize, size_t *outlen, char *why, size_t whylen)
{
    const char *m = (const char *)msg;
    if (s->state != SK_SCRAM_FIRST_SENT || len >= SK_SCRAM_MAX_MSG || memchr(m, 0, len))
        return fail(why, whylen, "unexpected client-final message", SK_ERR_INVAL);
    size_t hl = sk_scram_hash_len(s->mech), cbl, nl, pl;
    const char *cb = attr(m, len, "c", &cbl), *nonce = attr(m, len, "r", &nl);
    const char *proof = attr(m, len, "p", &pl);
    /* The proof comes last; what precedes ",p=" is signed. */
    if (!cb || !nonce || !proof || proof + pl != m + len || proof < m + 3)
        return fail(why, whylen, "malformed client-final message", SK_ERR_PARSE);
    /* librdkafka 2.0 (Debian 12's kcat) repeats the client's part of the
     * nonce in front of the combined one; Kafka 4.3 refuses it, Skiff takes
     * a nonce that ends with the combined one. Freshness is kept: the server
     * nonce is in it, and the proof covers the message as sent. */
    size_t cl = strlen(s->nonce);
    if (nl < cl || memcmp(nonce + nl - cl, s->nonce, cl) != 0)
        return fail(why, whylen, "the nonce does not match", SK_ERR_INVAL);
    uint8_t p[SK_SCRAM_MAX_HASH + 3];
    if (sk_b64_decode(proof, pl, p, sizeof p) != (long)hl)
        return fail(why, whylen, "malformed proof", SK_ERR_PARSE);
    size_t without = (size_t)(proof - 3 - m);
    char auth[SK_SCRAM_MAX_MSG * 3];
    int al = snprintf(auth, sizeof auth, "%s,%s,%.*s", s->client_first_bare, s->server_first,
                      (int)without, m);
    if (al <= 0 || (size_t)al >= sizeof auth)
        return fail(why, whylen, "messages too long", SK_ERR_PARSE);
    uint8_t sig[SK_SCRAM_MAX_HASH], client_key[SK_SCRAM_MAX_HASH], stored[SK_SCRAM_MAX_HASH];
    int rc = hmac(s->mech, s->cred.stored_key, hl, auth, (size_t)al, sig);
    for (size_t i = 0; i < hl; i++)
        client_key[i] = p[i] ^ sig[i];
    rc = rc ? rc : hash(s->mech, client_key, hl, stored);
    OPENSSL_cleanse(client_key, sizeof client_key);
    if (rc || CRYPTO_memcmp(stored, s->cred.stored_key, hl) != 0)
        return fail(why, whylen, "invalid credentials", SK_ERR_INVAL);
    rc = hmac(s->mech, s->cred.server_key, hl, auth, (size_t)al, sig);
    if (rc || outsize < 3 + (hl + 2) / 3 * 4 + 1)
        return fail(why, whylen, "cannot sign", SK_ERR_INVAL);
    memcpy(out, "v=", 2);
    *outlen = 2 + sk_b64_encode(sig, hl, out + 2);
    s->state = SK_SCRAM_DONE;
    return 0;
}
