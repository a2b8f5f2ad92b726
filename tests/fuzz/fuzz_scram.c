/*
 * libFuzzer target for the SASL parsing a client reaches before it has
 * authenticated (broker/scram.c): the input, split at its first 0xff byte, is
 * a SCRAM client-first message and a client-final message, run against a
 * fixed credential for each mechanism; the whole input is also parsed as a
 * stored credential. Invariant: no crash, no read out of bounds, and a final
 * message is never accepted without a valid proof (the fuzzer cannot forge
 * HMACs, so acceptance means a bug).
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "scram.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    const uint8_t *cut = memchr(data, 0xff, size);
    size_t first = cut ? (size_t)(cut - data) : size;
    const uint8_t *final = cut ? cut + 1 : data + size;
    size_t flen = cut ? size - first - 1 : 0;
    for (int m = SK_SCRAM_SHA_256; m <= SK_SCRAM_SHA_512; m++) {
        sk_scram_cred cred;
        uint8_t salted[SK_SCRAM_MAX_HASH];
        memset(salted, 7, sizeof salted);
        if (sk_scram_cred_make(m, (const uint8_t *)"saltsaltsaltsalt", 16, salted,
                               sk_scram_hash_len(m), 4096, &cred) != 0)
            abort();
        sk_scram_server s;
        sk_scram_init(&s, m);
        char why[128], out[SK_SCRAM_MAX_MSG];
        size_t ol;
        if (sk_scram_client_first(&s, data, first, why, sizeof why) != 0)
            continue;
        if (sk_scram_server_first(&s, &cred, "servernonce", out, sizeof out, &ol) != 0)
            continue;
        if (sk_scram_client_final(&s, final, flen, out, sizeof out, &ol, why, sizeof why) == 0)
            abort();
    }
    sk_scram_cred back;
    (void)sk_scram_cred_parse(SK_SCRAM_SHA_512, (const char *)data, size, &back);
    return 0;
}
