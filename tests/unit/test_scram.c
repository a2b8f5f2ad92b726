/* scram: the server side of SCRAM against the RFC 7677 example exchange
 * (SCRAM-SHA-256, user "user", password "pencil"), a SCRAM-SHA-512 round
 * trip with a client computed here, wrong proofs and malformed messages,
 * and the stored credential form. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <cmocka.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "scram.h"
#include "sk_err.h"

#define U8(s) ((const uint8_t *)(s))

static const char *RFC_CFIRST = "n,,n=user,r=rOprNGfwEbeRWgbNEkqO";
static const char *RFC_SNONCE = "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0";
static const char *RFC_SFIRST =
    "r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096";
static const char *RFC_CFINAL = "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,"
                                "p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ=";
static const char *RFC_SFINAL = "v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4=";

static void rfc_cred(sk_scram_cred *c)
{
    uint8_t salt[32], salted[64];
    long sl = sk_b64_decode("W22ZaJ0SNY7soEsUEjb6gQ==", 24, salt, sizeof salt);
    assert_int_equal(sl, 16);
    assert_int_equal(sk_scram_salt_password(SK_SCRAM_SHA_256, "pencil", 6, salt, 16, 4096, salted),
                     0);
    assert_int_equal(sk_scram_cred_make(SK_SCRAM_SHA_256, salt, 16, salted, 32, 4096, c), 0);
}

static void test_rfc7677_exchange(void **state)
{
    (void)state;
    sk_scram_cred cred;
    rfc_cred(&cred);
    sk_scram_server s;
    sk_scram_init(&s, SK_SCRAM_SHA_256);
    char why[128], out[512];
    size_t ol;
    assert_int_equal(sk_scram_client_first(&s, U8(RFC_CFIRST), strlen(RFC_CFIRST), why, sizeof why),
                     0);
    assert_string_equal(s.user, "user");
    assert_int_equal(sk_scram_server_first(&s, &cred, RFC_SNONCE, out, sizeof out, &ol), 0);
    assert_string_equal(out, RFC_SFIRST);
    assert_int_equal(ol, strlen(RFC_SFIRST));
    assert_int_equal(sk_scram_client_final(&s, U8(RFC_CFINAL), strlen(RFC_CFINAL), out,
                                           sizeof out, &ol, why, sizeof why),
                     0);
    out[ol] = 0;
    assert_string_equal(out, RFC_SFINAL);
    /* Once done, nothing more is accepted. */
    assert_int_not_equal(sk_scram_client_final(&s, U8(RFC_CFINAL), strlen(RFC_CFINAL), out,
                                               sizeof out, &ol, why, sizeof why),
                         0);
}

static void test_wrong_proof(void **state)
{
    (void)state;
    sk_scram_cred cred;
    rfc_cred(&cred);
    sk_scram_server s;
    sk_scram_init(&s, SK_SCRAM_SHA_256);
    char why[128], out[512], bad[256];
    size_t ol;
    assert_int_equal(sk_scram_client_first(&s, U8(RFC_CFIRST), strlen(RFC_CFIRST), why, sizeof why),
                     0);
    assert_int_equal(sk_scram_server_first(&s, &cred, RFC_SNONCE, out, sizeof out, &ol), 0);
    snprintf(bad, sizeof bad, "%s", RFC_CFINAL);
    bad[strlen(bad) - 5] ^= 1; /* one bit of the proof */
    assert_int_equal(sk_scram_client_final(&s, U8(bad), strlen(bad), out, sizeof out, &ol, why,
                                           sizeof why),
                     SK_ERR_INVAL);
    assert_string_equal(why, "invalid credentials");
}

static void test_malformed_messages(void **state)
{
    (void)state;
    const char *bad[] = {"", "n", "p=tls-unique,,n=user,r=abc", "n,,r=abc", "n,,n=user",
                         "n,,n=us=er,r=abc", "n,,n=,r=abc", "n,,n=user,r=abc,tokenauth=true"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sk_scram_server s;
        sk_scram_init(&s, SK_SCRAM_SHA_512);
        char why[128];
        assert_int_not_equal(sk_scram_client_first(&s, U8(bad[i]), strlen(bad[i]), why, sizeof why),
                             0);
    }
    /* Escaped names. */
    sk_scram_server s;
    sk_scram_init(&s, SK_SCRAM_SHA_512);
    char why[128];
    const char *esc = "n,,n=a=2Cb=3Dc,r=xyz";
    assert_int_equal(sk_scram_client_first(&s, U8(esc), strlen(esc), why, sizeof why), 0);
    assert_string_equal(s.user, "a,b=c");
    /* A final message before the first answer. */
    sk_scram_init(&s, SK_SCRAM_SHA_512);
    char out[256];
    size_t ol;
    assert_int_not_equal(sk_scram_client_final(&s, U8(RFC_CFINAL), strlen(RFC_CFINAL), out,
                                               sizeof out, &ol, why, sizeof why),
                         0);
}

/* A SCRAM-SHA-512 client, computed here from the RFC's definitions. */
static void test_sha512_round_trip(void **state)
{
    (void)state;
    const uint8_t salt[] = "0123456789abcdef";
    uint8_t salted[64];
    assert_int_equal(sk_scram_salt_password(SK_SCRAM_SHA_512, "s3cret", 6, salt, 16, 4096, salted),
                     0);
    sk_scram_cred cred;
    assert_int_equal(sk_scram_cred_make(SK_SCRAM_SHA_512, salt, 16, salted, 64, 4096, &cred), 0);
    /* The stored form survives a round trip. */
    char text[512];
    assert_int_equal(sk_scram_cred_format(SK_SCRAM_SHA_512, &cred, text, sizeof text), 0);
    assert_non_null(strstr(text, "iterations=4096"));
    sk_scram_cred back;
    assert_int_equal(sk_scram_cred_parse(SK_SCRAM_SHA_512, text, strlen(text), &back), 0);
    assert_memory_equal(back.stored_key, cred.stored_key, 64);
    assert_memory_equal(back.server_key, cred.server_key, 64);
    assert_int_equal(back.salt_len, 16);

    sk_scram_server s;
    sk_scram_init(&s, SK_SCRAM_SHA_512);
    char why[128], sfirst[512], out[512];
    size_t ol;
    const char *cfirst = "n,,n=alice,r=clientnonce";
    assert_int_equal(sk_scram_client_first(&s, U8(cfirst), strlen(cfirst), why, sizeof why), 0);
    assert_int_equal(sk_scram_server_first(&s, &back, "servernonce", sfirst, sizeof sfirst, &ol), 0);
    char without[256], auth[1024];
    snprintf(without, sizeof without, "c=biws,r=clientnonceservernonce");
    snprintf(auth, sizeof auth, "n=alice,r=clientnonce,%s,%s", sfirst, without);
    uint8_t ckey[64], stored[64], sig[64], proof[64];
    unsigned int l;
    HMAC(EVP_sha512(), salted, 64, U8("Client Key"), 10, ckey, &l);
    EVP_Digest(ckey, 64, stored, &l, EVP_sha512(), NULL);
    HMAC(EVP_sha512(), stored, 64, U8(auth), strlen(auth), sig, &l);
    for (int i = 0; i < 64; i++)
        proof[i] = ckey[i] ^ sig[i];
    char b64[100], cfinal[512];
    sk_b64_encode(proof, 64, b64);
    snprintf(cfinal, sizeof cfinal, "%s,p=%s", without, b64);
    assert_int_equal(sk_scram_client_final(&s, U8(cfinal), strlen(cfinal), out, sizeof out, &ol,
                                           why, sizeof why),
                     0);
    assert_memory_equal(out, "v=", 2);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rfc7677_exchange),
        cmocka_unit_test(test_wrong_proof),
        cmocka_unit_test(test_malformed_messages),
        cmocka_unit_test(test_sha512_round_trip),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
