/* broker/tconf: which topic configurations are accepted, with Kafka's
 * bounds, and which are refused and why. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "config.h"
#include "kbatch.h"
#include "tconf.h"

static const char *check(const char *name, const char *value)
{
    return sk_tconf_check(name, strlen(name), value, strlen(value));
}

static void ok(const char *name, const char *value)
{
    const char *why = check(name, value);
    if (why)
        fail_msg("%s=%s refused: %s", name, value, why);
}

static void refused(const char *name, const char *value, const char *part)
{
    const char *why = check(name, value);
    if (!why)
        fail_msg("%s=%s accepted", name, value);
    if (part && !strstr(why, part))
        fail_msg("%s=%s: '%s' lacks '%s'", name, value, why, part);
}

static void test_honoured(void **state)
{
    (void)state;
    ok("retention.ms", "-1");
    ok("retention.bytes", "1048576");
    ok("message.timestamp.type", "LogAppendTime");
    ok("min.insync.replicas", "2");
    refused("retention.ms", "-2", "-1 or more");
    refused("max.message.bytes", "63", "between");
    ok("cleanup.policy", "compact");
    ok("cleanup.policy", "compact,delete");
    ok("cleanup.policy", "delete, compact");
    refused("cleanup.policy", "Compact", "compact and delete");
    refused("cleanup.policy", "compact;delete", "compact and delete");
    refused("cleanup.policy", "compact,,delete", "compact and delete");
    refused("cleanup.policy", "compact,", "compact and delete");
    ok("cleanup.policy", "");  /* Kafka 4.2+: the empty list, neither */
    ok("cleanup.policy", " compact ");
    ok("compression.type", "producer");
    ok("compression.type", "uncompressed");
    ok("compression.type", "gzip");
    ok("compression.type", "snappy");
    ok("compression.type", "lz4");
    ok("compression.type", "zstd");
    refused("compression.type", "brotli", "one of uncompressed, zstd, lz4, snappy, gzip");
    refused("compression.type", "none", "one of");
}

static sk_tconf built(int n, const char *const *names, const char *const *values)
{
    sk_config cfg;
    sk_config_init(&cfg);
    size_t nl[8], vl[8];
    for (int i = 0; i < n; i++) {
        nl[i] = strlen(names[i]);
        vl[i] = strlen(values[i]);
    }
    sk_tconf c;
    char why[256];
    assert_int_equal(sk_tconf_build(&cfg, n, names, nl, values, vl, &c, why, sizeof why), 0);
    sk_config_free(&cfg);
    return c;
}

/* compression.type resolves to the codec batches are stored in, and the
 * level of that codec. */
static void test_compression_resolved(void **state)
{
    (void)state;
    sk_tconf c = built(0, NULL, NULL);
    assert_false(c.recompress);
    sk_tconf_free(&c);

    const char *n1[] = {"compression.type", "compression.zstd.level", "compression.lz4.level"};
    const char *v1[] = {"zstd", "7", "12"};
    c = built(3, n1, v1);
    assert_true(c.recompress);
    assert_int_equal(c.codec, KB_CODEC_ZSTD);
    assert_int_equal(c.codec_level, 7);
    sk_tconf_free(&c);

    const char *n2[] = {"compression.type"};
    const char *v2[] = {"lz4"};
    c = built(1, n2, v2);
    assert_true(c.recompress);
    assert_int_equal(c.codec, KB_CODEC_LZ4);
    assert_int_equal(c.codec_level, 9); /* Kafka's default */
    sk_tconf_free(&c);

    const char *v3[] = {"uncompressed"};
    c = built(1, n2, v3);
    assert_true(c.recompress);
    assert_int_equal(c.codec, KB_CODEC_NONE);
    sk_tconf_free(&c);

    const char *v4[] = {"producer"};
    c = built(1, n2, v4);
    assert_false(c.recompress);
    sk_tconf_free(&c);

    /* Without an override, the broker's defaults. */
    sk_config cfg;
    sk_config_init(&cfg);
    char why[256];
    assert_int_equal(sk_config_set(&cfg, "compression.type", "gzip", why, sizeof why), 0);
    assert_int_equal(sk_config_set(&cfg, "compression.gzip.level", "4", why, sizeof why), 0);
    assert_int_not_equal(sk_config_set(&cfg, "compression.type", "brotli", why, sizeof why), 0);
    assert_int_equal(sk_tconf_build(&cfg, 0, NULL, NULL, NULL, NULL, &c, why, sizeof why), 0);
    assert_true(c.recompress);
    assert_int_equal(c.codec, KB_CODEC_GZIP);
    assert_int_equal(c.codec_level, 4);
    sk_tconf_free(&c);
    sk_config_free(&cfg);
}

/* cleanup.policy resolves to its items: compact, delete, or both. */
static void test_cleanup_policy_resolved(void **state)
{
    (void)state;
    sk_tconf c = built(0, NULL, NULL);
    assert_int_equal(c.policy, SK_POLICY_DELETE);
    sk_tconf_free(&c);
    const char *n[] = {"cleanup.policy"};
    const char *v1[] = {"compact"};
    c = built(1, n, v1);
    assert_int_equal(c.policy, SK_POLICY_COMPACT);
    sk_tconf_free(&c);
    const char *v2[] = {"compact, delete"};
    c = built(1, n, v2);
    assert_int_equal(c.policy, SK_POLICY_COMPACT | SK_POLICY_DELETE);
    assert_string_equal(c.values[0], "compact,delete");
    sk_tconf_free(&c);
    const char *v3[] = {" delete ,compact,delete"}; /* stored as Kafka stores it */
    c = built(1, n, v3);
    assert_string_equal(c.values[0], "delete,compact");
    sk_tconf_free(&c);
    const char *v4[] = {""};
    c = built(1, n, v4);
    assert_int_equal(c.policy, 0);
    assert_string_equal(c.values[0], "");
    sk_tconf_free(&c);
}

static void test_stored_with_kafkas_bounds(void **state)
{
    (void)state;
    ok("segment.bytes", "14");
    ok("segment.bytes", "2147483647");
    refused("segment.bytes", "13", "between 14 and 2147483647");
    refused("segment.bytes", "2147483648", "between");
    ok("segment.ms", "9223372036854775807");
    refused("segment.ms", "0", "1 or more");
    refused("segment.ms", "9223372036854775808", "integer");
    ok("local.retention.ms", "-2");
    refused("local.retention.bytes", "-3", "-2 or more");
    ok("min.cleanable.dirty.ratio", "0");
    ok("min.cleanable.dirty.ratio", "1");
    refused("min.cleanable.dirty.ratio", "1.01", "between 0 and 1");
    refused("min.cleanable.dirty.ratio", "nan", "number");
    ok("compression.zstd.level", "-131072");
    refused("compression.lz4.level", "0", "between 1 and 17");
    ok("preallocate", "TRUE");
    ok("unclean.leader.election.enable", "false");
    refused("preallocate", "1", "true or false");
    ok("remote.storage.enable", "false");
    refused("remote.storage.enable", "true", "tiered storage");
}

static void test_throttled_replica_lists(void **state)
{
    (void)state;
    ok("leader.replication.throttled.replicas", "");
    ok("leader.replication.throttled.replicas", "*");
    ok("follower.replication.throttled.replicas", "0:1,1:2, 2:3");
    refused("leader.replication.throttled.replicas", "0:", "partition:broker");
    refused("leader.replication.throttled.replicas", "0:1,", "partition:broker");
    refused("leader.replication.throttled.replicas", "a:1", "partition:broker");
    char big[SK_TCONF_VALUE_MAX + 8];
    size_t n = 0;
    while (n + 4 < sizeof big - 1) {
        memcpy(big + n, "1:1,", 4);
        n += 4;
    }
    big[n - 1] = 0; /* no trailing comma */
    refused("leader.replication.throttled.replicas", big, "too long");
}

static void test_unknown_names(void **state)
{
    (void)state;
    refused("no.such.config", "1", "Kafka");
    refused("segment.bytes.", "1", NULL);
    /* Every name in the table is found by its exact name and checks its own default. */
    for (int i = 0; i < sk_tconf_ndefs(); i++) {
        const sk_tconf_def *d = sk_tconf_def_at(i);
        assert_ptr_equal(sk_tconf_find(d->name, strlen(d->name)), d);
        if (d->fixed_default)
            ok(d->name, d->fixed_default);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_honoured),
        cmocka_unit_test(test_compression_resolved),
        cmocka_unit_test(test_cleanup_policy_resolved),
        cmocka_unit_test(test_stored_with_kafkas_bounds),
        cmocka_unit_test(test_throttled_replica_lists),
        cmocka_unit_test(test_unknown_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
