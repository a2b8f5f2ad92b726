/* s3_util: RFC 3986 encoding for SigV4, the XML scanner on S3's answers
 * (entities, attributes, empty and missing elements, truncated documents),
 * ISO 8601 times, and the instance-metadata credentials document. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "s3_util.h"
#include "sk_err.h"

static void test_encode(void **state)
{
    (void)state;
    char buf[128] = "";
    assert_true(s3_uri_encode(buf, sizeof buf, "data/ab-_.~x y+z=&%/", true));
    assert_string_equal(buf, "data/ab-_.~x%20y%2Bz%3D%26%25/");
    buf[0] = '\0';
    assert_true(s3_uri_encode(buf, sizeof buf, "a/b", false));
    assert_string_equal(buf, "a%2Fb");
    /* appends; refuses what does not fit, keeping the string terminated */
    assert_true(s3_uri_encode(buf, sizeof buf, "\xc3\xa9", false));
    assert_string_equal(buf, "a%2Fb%C3%A9");
    char small[6] = "";
    assert_false(s3_uri_encode(small, sizeof small, "abc/de", false));
    assert_true(strlen(small) < sizeof small);
}

static void test_xml(void **state)
{
    (void)state;
    const char *doc =
        "<?xml version=\"1.0\"?>\n<ListBucketResult xmlns=\"http://x/\"><Name>b</Name>"
        "<Prefix/><KeyCount>2</KeyCount><IsTruncated>true</IsTruncated>"
        "<Contents><Key>a&amp;b&lt;c&gt;&quot;&apos;&#65;&#x42;</Key><Size>10</Size></Contents>"
        "<Contents><Key>k2</Key><Size>20</Size></Contents>"
        "<NextContinuationToken>tok/+=</NextContinuationToken></ListBucketResult>";
    const char *end = doc + strlen(doc);
    size_t len;
    const char *after;
    const char *t = s3_xml_find(doc, end, "ListBucketResult", &len, &after);
    assert_non_null(t); /* attributes on the opening tag */
    assert_ptr_equal(after, end);
    t = s3_xml_find(doc, end, "Prefix", &len, NULL);
    assert_non_null(t);
    assert_int_equal(len, 0);
    /* "Key" is not found inside "KeyCount" */
    t = s3_xml_find(doc, end, "Key", &len, NULL);
    assert_true(t > strstr(doc, "<Contents>"));
    char *k = s3_xml_text(t, len);
    assert_string_equal(k, "a&b<c>\"'AB");
    free(k);
    int n = 0;
    const char *p = doc;
    while ((t = s3_xml_find(p, end, "Contents", &len, &after)) != NULL) {
        n++;
        p = after;
    }
    assert_int_equal(n, 2);
    char buf[64];
    assert_true(s3_xml_get(doc, end, "NextContinuationToken", buf, sizeof buf));
    assert_string_equal(buf, "tok/+=");
    assert_true(s3_xml_get(doc, end, "KeyCount", buf, sizeof buf));
    assert_string_equal(buf, "2");
    assert_false(s3_xml_get(doc, end, "Missing", buf, sizeof buf));
    /* truncated documents: no element, no overrun */
    for (size_t cut = 0; cut < strlen(doc); cut += 3) {
        p = doc;
        while ((t = s3_xml_find(p, doc + cut, "Contents", &len, &after)) != NULL) {
            assert_true(t + len <= doc + cut);
            p = after;
        }
    }
    /* values cut to the buffer */
    char tiny[4];
    assert_true(s3_xml_get(doc, end, "NextContinuationToken", tiny, sizeof tiny));
    assert_string_equal(tiny, "tok");
    /* an unknown entity stays as it is */
    const char *odd = "<Code>a&bogus;b</Code>";
    assert_true(s3_xml_get(odd, odd + strlen(odd), "Code", buf, sizeof buf));
    assert_string_equal(buf, "a&bogus;b");
}

static void test_times(void **state)
{
    (void)state;
    const char *a = "2026-11-30T00:45:34.000Z";
    assert_int_equal(s3_parse_iso8601(a, strlen(a)), 1795999534000LL);
    const char *b = "2026-11-30T00:45:34.5Z";
    assert_int_equal(s3_parse_iso8601(b, strlen(b)), 1795999534500LL);
    const char *c = "2026-11-30T00:45:34Z";
    assert_int_equal(s3_parse_iso8601(c, strlen(c)), 1795999534000LL);
    const char *d = "1970-01-01T00:00:00Z";
    assert_int_equal(s3_parse_iso8601(d, strlen(d)), 0);
    const char *bad = "yesterday";
    assert_int_equal(s3_parse_iso8601(bad, strlen(bad)), -1);
}

static void test_imds_document(void **state)
{
    (void)state;
    const char *doc = "{\n  \"Code\" : \"Success\",\n  \"LastUpdated\" : \"2026-11-30T00:00:00Z\",\n"
                      "  \"Type\" : \"AWS-HMAC\",\n  \"AccessKeyId\" : \"ASIAEXAMPLE\",\n"
                      "  \"SecretAccessKey\" : \"se\\/cr+et\",\n  \"Token\" : \"tok==\",\n"
                      "  \"Expiration\" : \"2026-11-30T06:00:00Z\"\n}";
    s3_creds c;
    assert_int_equal(s3_parse_imds_json(doc, strlen(doc), &c), 0);
    assert_string_equal(c.access_key, "ASIAEXAMPLE");
    assert_string_equal(c.secret_key, "se/cr+et");
    assert_string_equal(c.token, "tok==");
    assert_int_equal(c.expires_ms, 1796018400000LL);
    s3_creds_clear(&c);
    const char *failed = "{\"Code\":\"AssumeRoleUnauthorizedAccess\"}";
    assert_int_not_equal(s3_parse_imds_json(failed, strlen(failed), &c), 0);
    const char *partial = "{\"Code\":\"Success\",\"AccessKeyId\":\"A\"}";
    assert_int_equal(s3_parse_imds_json(partial, strlen(partial), &c), SK_ERR_PARSE);
    const char *cut = "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"unterminated";
    assert_int_equal(s3_parse_imds_json(cut, strlen(cut), &c), SK_ERR_PARSE);
    const char *badexp = "{\"AccessKeyId\":\"A\",\"SecretAccessKey\":\"B\",\"Expiration\":\"soon\"}";
    assert_int_equal(s3_parse_imds_json(badexp, strlen(badexp), &c), SK_ERR_PARSE);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_encode),
        cmocka_unit_test(test_xml),
        cmocka_unit_test(test_times),
        cmocka_unit_test(test_imds_document),
    };
    return cmocka_run_group_tests_name("s3_util", tests, NULL, NULL);
}
