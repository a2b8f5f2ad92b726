/*
 * scram: the server side of SCRAM-SHA-256 and SCRAM-SHA-512 (RFC 5802,
 * RFC 7677) as Kafka speaks it, and the credentials it checks against.
 *
 * A credential is what Kafka keeps per user and mechanism: a salt, the
 * iteration count, StoredKey = H(HMAC(SaltedPassword, "Client Key")) and
 * ServerKey = HMAC(SaltedPassword, "Server Key"); never the password. Its
 * stored text form is Kafka's: salt=<b64>,stored_key=<b64>,server_key=<b64>,
 * iterations=<n>.
 *
 * An exchange: sk_scram_client_first parses the client's first message (the
 * user name and nonce), the caller looks the user's credential up, then
 * sk_scram_server_first answers with the server nonce given (random in the
 * broker, fixed in the unit test), and sk_scram_client_final checks the
 * client's proof and writes the server's signature. No I/O, no clock: pure
 * functions over the state; OpenSSL for HMAC, hashes and PBKDF2.
 *
 * Errors: SK_ERR_PARSE for a malformed message, SK_ERR_INVAL for a bad
 * proof or a message out of turn, with a reason for the log in `why` (never
 * a secret).
 */
#ifndef SCRAM_H
#define SCRAM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sk_scram_mech { SK_SCRAM_SHA_256 = 1, SK_SCRAM_SHA_512 = 2 } sk_scram_mech;

#define SK_SCRAM_MAX_HASH 64
#define SK_SCRAM_MAX_SALT 128
#define SK_SCRAM_MIN_ITERATIONS 4096
#define SK_SCRAM_MAX_ITERATIONS 16384
#define SK_SCRAM_MAX_MSG 1024

/* By Kafka's name ("SCRAM-SHA-256"); 0 when unknown. Kafka's mechanism
 * codes (AlterUserScramCredentials) are the enum's values. */
sk_scram_mech sk_scram_mech_named(const char *name, size_t len);
const char *sk_scram_mech_name(sk_scram_mech m);
size_t sk_scram_hash_len(sk_scram_mech m);

typedef struct sk_scram_cred {
    uint8_t salt[SK_SCRAM_MAX_SALT];
    size_t salt_len;
    uint8_t stored_key[SK_SCRAM_MAX_HASH];
    uint8_t server_key[SK_SCRAM_MAX_HASH];
    int32_t iterations;
} sk_scram_cred;

/* SaltedPassword := Hi(password, salt, i) (PBKDF2 with the mechanism's HMAC). */
int sk_scram_salt_password(sk_scram_mech m, const char *pw, size_t pwlen, const uint8_t *salt,
                           size_t saltlen, int32_t iterations, uint8_t *out)
    __attribute__((warn_unused_result));
/* The credential of a salted password (what AlterUserScramCredentials sends). */
int sk_scram_cred_make(sk_scram_mech m, const uint8_t *salt, size_t saltlen,
                       const uint8_t *salted, size_t saltedlen, int32_t iterations,
                       sk_scram_cred *out) __attribute__((warn_unused_result));
/* The stored text form, and back. */
int sk_scram_cred_format(sk_scram_mech m, const sk_scram_cred *c, char *out, size_t len)
    __attribute__((warn_unused_result));
int sk_scram_cred_parse(sk_scram_mech m, const char *s, size_t len, sk_scram_cred *out)
    __attribute__((warn_unused_result));

typedef enum { SK_SCRAM_START, SK_SCRAM_FIRST_SENT, SK_SCRAM_DONE } sk_scram_state;

typedef struct sk_scram_server {
    sk_scram_mech mech;
    sk_scram_state state;
    char user[256];
    char client_first_bare[SK_SCRAM_MAX_MSG];
    char server_first[SK_SCRAM_MAX_MSG];
    char nonce[SK_SCRAM_MAX_MSG / 2]; /* client nonce + server nonce */
    sk_scram_cred cred;
} sk_scram_server;

void sk_scram_init(sk_scram_server *s, sk_scram_mech m);
/* "n,,n=user,r=nonce[,extensions]": the user name, unescaped, in s->user. */
int sk_scram_client_first(sk_scram_server *s, const uint8_t *msg, size_t len, char *why,
                          size_t whylen) __attribute__((warn_unused_result));
/* "r=<nonce>,s=<salt>,i=<iterations>" for the user's credential, into out
 * (NUL-terminated; *outlen its length). */
int sk_scram_server_first(sk_scram_server *s, const sk_scram_cred *cred, const char *server_nonce,
                          char *out, size_t outsize, size_t *outlen)
    __attribute__((warn_unused_result));
/* Checks "c=biws,r=<nonce>,p=<proof>"; on success "v=<signature>" in out. */
int sk_scram_client_final(sk_scram_server *s, const uint8_t *msg, size_t len, char *out,
                          size_t outsize, size_t *outlen, char *why, size_t whylen)
    __attribute__((warn_unused_result));

/* Base64 (standard alphabet, padded). Decode: -1 on bad input. */
size_t sk_b64_encode(const uint8_t *in, size_t n, char *out);
long sk_b64_decode(const char *in, size_t n, uint8_t *out, size_t outsize);

#endif
