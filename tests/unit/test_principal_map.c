/* pmap: ssl.principal.mapping.rules as Kafka documents them (RULE:pattern/
 * replacement/[LU] and DEFAULT, the first rule that applies wins), the
 * replacement's back references and escapes, and the rule lists refused. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "pmap.h"
#include "sk_err.h"

/* Kafka's documented example list. */
static const char *const KAFKA_EXAMPLE =
    "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,\n"
    "RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,\n"
    "RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,\n"
    "DEFAULT";

static sk_pmap *parse_ok(const char *rules)
{
    sk_pmap *m = NULL;
    char why[256] = "";
    int rc = sk_pmap_parse(rules, &m, why, sizeof why);
    if (rc != 0)
        fail_msg("rules '%s' refused: %s", rules, why);
    return m;
}

static void expect(const char *rules, const char *dn, const char *want)
{
    sk_pmap *m = parse_ok(rules);
    char out[256];
    int rc = sk_pmap_apply(m, dn, out, sizeof out);
    if (!want) {
        assert_int_equal(rc, SK_ERR_NOENT);
    } else {
        assert_int_equal(rc, 0);
        assert_string_equal(out, want);
    }
    sk_pmap_free(m);
}

static void test_principal_map_kafka_example(void **state)
{
    (void)state;
    expect(KAFKA_EXAMPLE, "CN=Kafka Server 1,OU=ServiceUsers,O=Org,C=US", "Kafka Server 1");
    expect(KAFKA_EXAMPLE, "CN=Duke,OU=JavaSoft,O=Sun Microsystems,L=Santa Clara,ST=CA,C=US",
           "duke@javasoft");
    expect(KAFKA_EXAMPLE, "CN=Kafka,O=Apache", "kafka");
    expect(KAFKA_EXAMPLE, "OU=JavaSoft,O=Sun Microsystems,C=US",
           "OU=JavaSoft,O=Sun Microsystems,C=US");
}

static void test_principal_map_default_and_no_match(void **state)
{
    (void)state;
    expect("DEFAULT", "CN=alice,O=example", "CN=alice,O=example");
    expect("  DEFAULT  ", "CN=alice", "CN=alice");
    /* The pattern must match the whole name; no rule left: no principal. */
    expect("RULE:CN=(.*)/$1/", "CN=alice,O=example", "alice,O=example");
    expect("RULE:^CN=([a-z]*)$/$1/", "CN=alice,O=example", NULL);
    expect("RULE:^O=(.*)$/$1/,RULE:^CN=([a-z]*),.*$/$1/U", "CN=alice,O=example", "ALICE");
}

static void test_principal_map_replacement(void **state)
{
    (void)state;
    /* An escaped slash in the pattern, groups in any order. */
    expect("RULE:^CN=(.*)\\/(.*)$/$2-$1/", "CN=a/b", "b-a");
    /* A reference past the last group stays as written; \ quotes. */
    expect("RULE:^CN=(.*)$/$1$2/", "CN=alice", "alice$2");
    expect("RULE:^CN=(.*)$/\\$$1/", "CN=alice", "$alice");
    expect("RULE:^CN=(.*)$/svc-$1/L", "CN=Bob", "svc-bob");
    /* An empty name is a name. */
    expect("RULE:^CN=.*$//", "CN=x", "");
    /* References with every digit; past the last group, literal text. */
    expect("RULE:^(a)(b)(c)(d)(e)(f)(g)(h)(i)(j)(k)$/$11$10/", "abcdefghijk", "kj");
    expect("RULE:^(a)(b)$/$12/", "ab", "$12");
}

static void test_principal_map_java_syntax(void **state)
{
    (void)state;
    expect("RULE:^CN=user(\\d+)$/u$1/", "CN=user42", "u42");
    expect("RULE:^CN=([]a-z]*)$/$1/", "CN=a]b", "a]b");
    expect("RULE:^CN=([^,]+?),.*$/$1/", "CN=carol,O=x", "carol");
}

static void refused(const char *rules)
{
    sk_pmap *m = NULL;
    char why[256] = "";
    assert_int_equal(sk_pmap_parse(rules, &m, why, sizeof why), SK_ERR_INVAL);
    assert_null(m);
    assert_true(why[0] != 0);
}

static void test_principal_map_bad_rules(void **state)
{
    (void)state;
    refused("");
    refused("DEFAULTS");
    refused("DEFAULT,foo");
    refused("RULE:abc/def");
    refused("RULE:^CN=(.*$/$1/");
    refused("rule:^CN=(.*)$/$1/");
}

static void test_principal_map_too_long(void **state)
{
    (void)state;
    sk_pmap *m = parse_ok("DEFAULT");
    char out[4];
    assert_int_equal(sk_pmap_apply(m, "CN=alice", out, sizeof out), SK_ERR_INVAL);
    sk_pmap_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_principal_map_kafka_example),
        cmocka_unit_test(test_principal_map_default_and_no_match),
        cmocka_unit_test(test_principal_map_replacement),
        cmocka_unit_test(test_principal_map_java_syntax),
        cmocka_unit_test(test_principal_map_bad_rules),
        cmocka_unit_test(test_principal_map_too_long),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
