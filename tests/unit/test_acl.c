/* broker/acl: the decisions of Kafka 4.3's StandardAuthorizer over a set of
 * bindings, and the filters of DescribeAcls and DeleteAcls. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "acl.h"

static sk_acl bind(int8_t rtype, int8_t pattern, const char *name, const char *principal,
                   int8_t op, int8_t perm)
{
    return (sk_acl){rtype, pattern, name, principal, "*", op, perm};
}

static void add(sk_acl_set *s, sk_acl a)
{
    assert_int_equal(sk_acl_add(s, &a), 0);
}

static bool topic(const sk_acl_set *s, const char *who, const char *name, int8_t op)
{
    return sk_acl_allowed(s, who, "10.0.0.1", SK_ACL_RES_TOPIC, name, strlen(name), op);
}

static void test_no_acl_at_all(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new("User:admin; User:root", false);
    assert_false(topic(s, "User:alice", "t", SK_ACL_OP_READ));
    assert_true(topic(s, "User:admin", "t", SK_ACL_OP_READ));
    assert_true(topic(s, "User:root", "t", SK_ACL_OP_ALTER));
    sk_acl_set_free(s);
    s = sk_acl_set_new(NULL, true);
    assert_true(topic(s, "User:alice", "t", SK_ACL_OP_READ));
    sk_acl_set_free(s);
}

static void test_everyone_if_no_acl_found(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new("", true);
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "t", "User:bob", SK_ACL_OP_READ,
                SK_ACL_PERM_ALLOW));
    /* A binding on the resource, even for someone else: no longer open. */
    assert_false(topic(s, "User:alice", "t", SK_ACL_OP_READ));
    assert_true(topic(s, "User:bob", "t", SK_ACL_OP_READ));
    assert_true(topic(s, "User:alice", "u", SK_ACL_OP_WRITE));
    sk_acl_set_free(s);
}

static void test_deny_wins(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new(NULL, false);
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "*", "User:*", SK_ACL_OP_ALL,
                SK_ACL_PERM_ALLOW));
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_PREFIXED, "secret", "User:alice", SK_ACL_OP_READ,
                SK_ACL_PERM_DENY));
    assert_true(topic(s, "User:alice", "public", SK_ACL_OP_READ));
    assert_false(topic(s, "User:alice", "secret.x", SK_ACL_OP_READ));
    /* A DENY of READ does not deny DESCRIBE: implications are ALLOW's. */
    assert_true(topic(s, "User:alice", "secret.x", SK_ACL_OP_DESCRIBE));
    assert_true(topic(s, "User:bob", "secret.x", SK_ACL_OP_READ));
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "*", "User:bob", SK_ACL_OP_ALL,
                SK_ACL_PERM_DENY));
    assert_false(topic(s, "User:bob", "public", SK_ACL_OP_DESCRIBE));
    sk_acl_set_free(s);
}

static void test_implications(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new(NULL, false);
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "w", "User:a", SK_ACL_OP_WRITE,
                SK_ACL_PERM_ALLOW));
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "c", "User:a", SK_ACL_OP_ALTER_CONFIGS,
                SK_ACL_PERM_ALLOW));
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "k", "User:a", SK_ACL_OP_CREATE,
                SK_ACL_PERM_ALLOW));
    assert_true(topic(s, "User:a", "w", SK_ACL_OP_DESCRIBE));
    assert_false(topic(s, "User:a", "w", SK_ACL_OP_READ));
    assert_true(topic(s, "User:a", "c", SK_ACL_OP_DESCRIBE_CONFIGS));
    assert_false(topic(s, "User:a", "c", SK_ACL_OP_DESCRIBE));
    assert_false(topic(s, "User:a", "k", SK_ACL_OP_DESCRIBE));
    int32_t ops = sk_acl_authorized_ops(s, "User:a", "h", SK_ACL_RES_TOPIC, "w", 1, 0x7fff);
    assert_int_equal(ops, (1 << SK_ACL_OP_WRITE) | (1 << SK_ACL_OP_DESCRIBE));
    sk_acl_set_free(s);
}

static void test_hosts_and_principals(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new(NULL, false);
    sk_acl a = bind(SK_ACL_RES_GROUP, SK_ACL_PAT_LITERAL, "g", "User:a", SK_ACL_OP_READ,
                    SK_ACL_PERM_ALLOW);
    a.host = "10.0.0.1";
    add(s, a);
    assert_true(sk_acl_allowed(s, "User:a", "10.0.0.1", SK_ACL_RES_GROUP, "g", 1, SK_ACL_OP_READ));
    assert_false(sk_acl_allowed(s, "User:a", "10.0.0.2", SK_ACL_RES_GROUP, "g", 1, SK_ACL_OP_READ));
    assert_false(sk_acl_allowed(s, "User:b", "10.0.0.1", SK_ACL_RES_GROUP, "g", 1, SK_ACL_OP_READ));
    /* The resource type is part of the match. */
    assert_false(topic(s, "User:a", "g", SK_ACL_OP_READ));
    sk_acl_set_free(s);
}

static void test_by_resource_type(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new(NULL, false);
    assert_false(sk_acl_allowed_any(s, "User:a", "h", SK_ACL_RES_TOPIC, SK_ACL_OP_WRITE));
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_PREFIXED, "app.", "User:a", SK_ACL_OP_WRITE,
                SK_ACL_PERM_ALLOW));
    assert_true(sk_acl_allowed_any(s, "User:a", "h", SK_ACL_RES_TOPIC, SK_ACL_OP_WRITE));
    add(s, bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_PREFIXED, "app", "User:a", SK_ACL_OP_WRITE,
                SK_ACL_PERM_DENY));
    assert_false(sk_acl_allowed_any(s, "User:a", "h", SK_ACL_RES_TOPIC, SK_ACL_OP_WRITE));
    sk_acl_set_free(s);
}

static void test_filters(void **state)
{
    (void)state;
    sk_acl lit = bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "t1", "User:a", SK_ACL_OP_READ,
                      SK_ACL_PERM_ALLOW);
    sk_acl pre = bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_PREFIXED, "t", "User:a", SK_ACL_OP_READ,
                      SK_ACL_PERM_ALLOW);
    sk_acl star = bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "*", "User:a", SK_ACL_OP_READ,
                       SK_ACL_PERM_ALLOW);
    sk_acl any = {SK_ACL_RES_ANY, SK_ACL_PAT_ANY, NULL, NULL, NULL, SK_ACL_OP_ANY,
                  SK_ACL_PERM_ANY};
    assert_true(sk_acl_filter_matches(&any, &lit));
    sk_acl f = any;
    f.rtype = SK_ACL_RES_TOPIC;
    f.name = "t1";
    f.pattern = SK_ACL_PAT_MATCH;
    assert_true(sk_acl_filter_matches(&f, &lit));
    assert_true(sk_acl_filter_matches(&f, &pre));
    assert_true(sk_acl_filter_matches(&f, &star));
    f.pattern = SK_ACL_PAT_LITERAL;
    assert_true(sk_acl_filter_matches(&f, &lit));
    assert_false(sk_acl_filter_matches(&f, &pre));
    f.name = NULL;
    f.pattern = SK_ACL_PAT_PREFIXED;
    assert_true(sk_acl_filter_matches(&f, &pre));
    assert_false(sk_acl_filter_matches(&f, &lit));
    f = any;
    f.op = SK_ACL_OP_WRITE;
    assert_false(sk_acl_filter_matches(&f, &lit));
    f = any;
    f.principal = "User:b";
    assert_false(sk_acl_filter_matches(&f, &lit));
}

static void test_validation(void **state)
{
    (void)state;
    sk_acl ok = bind(SK_ACL_RES_CLUSTER, SK_ACL_PAT_LITERAL, "kafka-cluster", "User:a",
                     SK_ACL_OP_ALTER, SK_ACL_PERM_ALLOW);
    assert_null(sk_acl_invalid(&ok));
    sk_acl a = ok;
    a.name = "other";
    assert_string_equal(sk_acl_invalid(&a),
                        "The only valid name for the CLUSTER resource is kafka-cluster");
    a = ok;
    a.pattern = SK_ACL_PAT_MATCH;
    assert_non_null(sk_acl_invalid(&a));
    a = ok;
    a.principal = "alice";
    assert_non_null(sk_acl_invalid(&a));
    a = ok;
    a.op = SK_ACL_OP_ANY;
    assert_non_null(sk_acl_invalid(&a));
    /* Whatever passes fits the text form the metadata keeps. */
    static char longp[SK_ACL_NAME_MAX + 8];
    memset(longp, 'x', sizeof longp - 1);
    memcpy(longp, "User:", 5);
    a = ok;
    a.principal = longp;
    assert_non_null(sk_acl_invalid(&a));
    longp[SK_ACL_NAME_MAX] = 0;
    a.principal = longp;
    a.host = longp;
    a.rtype = SK_ACL_RES_TOPIC;
    a.name = longp;
    assert_null(sk_acl_invalid(&a));
    char text[SK_ACL_TEXT_MAX];
    assert_true(sk_acl_encode(&a, text, sizeof text) > 0);
    sk_acl f = {0, SK_ACL_PAT_ANY, NULL, NULL, NULL, SK_ACL_OP_ANY, SK_ACL_PERM_ANY};
    assert_non_null(sk_acl_filter_invalid(&f));
}

static void test_add_remove(void **state)
{
    (void)state;
    sk_acl_set *s = sk_acl_set_new(NULL, false);
    sk_acl a = bind(SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "t", "User:a", SK_ACL_OP_READ,
                    SK_ACL_PERM_ALLOW);
    add(s, a);
    add(s, a);
    assert_int_equal(sk_acl_count(s), 1);
    assert_int_equal(sk_acl_remove(s, &a), 1);
    assert_int_equal(sk_acl_remove(s, &a), 0);
    add(s, a);
    sk_acl_remove_resource(s, SK_ACL_RES_TOPIC, SK_ACL_PAT_LITERAL, "t");
    assert_int_equal(sk_acl_count(s), 0);
    sk_acl_set_free(s);
}

static void test_text(void **state)
{
    (void)state;
    sk_acl a = {SK_ACL_RES_TOPIC, SK_ACL_PAT_PREFIXED, "a:b.12:c", "User:x:y", "10.0.0.1",
                SK_ACL_OP_WRITE, SK_ACL_PERM_DENY};
    char buf[SK_ACL_TEXT_MAX];
    size_t n = sk_acl_encode(&a, buf, sizeof buf);
    assert_true(n > 0);
    sk_acl b;
    assert_int_equal(sk_acl_decode(buf, n, &b), 0);
    assert_string_equal(b.name, a.name);
    assert_string_equal(b.principal, a.principal);
    assert_string_equal(b.host, a.host);
    assert_int_equal(b.rtype, a.rtype);
    assert_int_equal(b.pattern, a.pattern);
    assert_int_equal(b.op, a.op);
    assert_int_equal(b.perm, a.perm);
    const char *bad[] = {"", "2.3.4", "2.3.4.3.99:User:a1:*1:t", "2.3.4.3.6:User:a1:*2:t",
                         "2.9.4.3.6:User:a1:*1:t", "x.3.4.3.6:User:a1:*1:t"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char t[64];
        strcpy(t, bad[i]);
        assert_int_equal(sk_acl_decode(t, strlen(t), &b), -1);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_no_acl_at_all),   cmocka_unit_test(test_everyone_if_no_acl_found),
        cmocka_unit_test(test_deny_wins),       cmocka_unit_test(test_implications),
        cmocka_unit_test(test_hosts_and_principals), cmocka_unit_test(test_by_resource_type),
        cmocka_unit_test(test_filters),         cmocka_unit_test(test_validation),
        cmocka_unit_test(test_add_remove),      cmocka_unit_test(test_text),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
