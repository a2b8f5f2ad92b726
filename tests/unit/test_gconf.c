/* broker/gconf: which group config values Kafka 4.3 accepts, the form it
 * keeps them in, and its messages for the others. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <cmocka.h>

#include "gconf.h"

static char norm[SK_GCONF_VALUE_MAX];
static char msg[512];

static int check(const char *name, const char *value)
{
    norm[0] = msg[0] = 0;
    return sk_gconf_check(name, strlen(name), value, strlen(value), norm, msg, sizeof msg);
}

static void kept(const char *name, const char *value, const char *as)
{
    if (check(name, value) != 0)
        fail_msg("%s=%s refused: %s", name, value, msg);
    if (strcmp(norm, as) != 0)
        fail_msg("%s=%s kept as '%s', not '%s'", name, value, norm, as);
}

static void refused(const char *name, const char *value, const char *part)
{
    if (check(name, value) == 0)
        fail_msg("%s=%s accepted", name, value);
    if (!strstr(msg, part))
        fail_msg("%s=%s: '%s' lacks '%s'", name, value, msg, part);
}

static void test_numbers(void **state)
{
    (void)state;
    kept("consumer.session.timeout.ms", "45000", "45000");
    kept("consumer.session.timeout.ms", " +60000 ", "60000");
    refused("consumer.session.timeout.ms", "44999", "group.consumer.min.session.timeout.ms");
    refused("consumer.session.timeout.ms", "60001", "group.consumer.max.session.timeout.ms");
    refused("consumer.session.timeout.ms", "0", "Value must be at least 1");
    refused("consumer.session.timeout.ms", "-5", "Invalid value -5");
    refused("consumer.heartbeat.interval.ms", "2147483648", "Not a number of type INT");
    refused("consumer.heartbeat.interval.ms", "1e3", "Not a number of type INT");
    refused("consumer.heartbeat.interval.ms", "", "Not a number of type INT");
    kept("consumer.assignment.interval.ms", "0", "0");
    refused("share.record.lock.duration.ms", "999", "Value must be at least 1000");
    refused("share.record.lock.duration.ms", "1000", "group.share.min.record.lock.duration.ms");
    kept("share.delivery.count.limit", "10", "10");
    refused("share.delivery.count.limit", "1", "Value must be at least 2");
    kept("streams.initial.rebalance.delay.ms", "2147483647", "2147483647");
    refused("streams.num.standby.replicas", "3", "group.streams.max.standby.replicas");
}

static void test_words(void **state)
{
    (void)state;
    kept("share.renew.acknowledge.enable", "TRUE", "true");
    kept("share.renew.acknowledge.enable", " false", "false");
    refused("share.renew.acknowledge.enable", "yes", "either true or false");
    kept("share.isolation.level", "read_committed", "read_committed");
    refused("share.isolation.level", "READ_COMMITTED", "String must be one of");
    kept("share.auto.offset.reset", "earliest", "earliest");
    kept("share.auto.offset.reset", "by_duration:PT1H", "by_duration:PT1H");
    kept("share.auto.offset.reset", "by_duration:P2DT3H4M5.5S", "by_duration:P2DT3H4M5.5S");
    kept("share.auto.offset.reset", "by_duration:pt10m", "by_duration:pt10m");
    refused("share.auto.offset.reset", "by_duration:P", "by_duration");
    refused("share.auto.offset.reset", "by_duration:PT", "by_duration");
    refused("share.auto.offset.reset", "by_duration:-PT1H", "by_duration");
    refused("share.auto.offset.reset", "by_duration:PT1H2D", "by_duration");
    refused("share.auto.offset.reset", "EARLIEST", "share.auto.offset.reset");
}

static void test_names(void **state)
{
    (void)state;
    refused("no.such.config", "1", "Unknown group config name: no.such.config");
    refused("retention.ms", "1", "Unknown group config name");
    assert_int_equal(sk_gconf_ndefs(), 17);
    for (int i = 0; i < sk_gconf_ndefs(); i++) {
        const sk_gconf_def *d = sk_gconf_def_at(i);
        if (check(d->name, d->def) != 0)
            fail_msg("the default of %s is refused: %s", d->name, msg);
        assert_ptr_equal(sk_gconf_find(d->name, strlen(d->name)), d);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_words),
        cmocka_unit_test(test_names),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
