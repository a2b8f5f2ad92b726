#include <arpa/inet.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <string.h>

#include <cmocka.h>

#include "zone.h"

static void test_client_id(void **state)
{
    (void)state;
    char z[ZONE_MAX];
    const char *cases[][2] = {
        {"skiff_az=us-east-1a", "us-east-1a"},
        {"app-7,skiff_az=eu-west-1b", "eu-west-1b"},
        {"automq_az=use1-az2;x=1", "use1-az2"},
        {"diskless_az=zone_3 other", "zone_3"},
        {"my-skiff_az=nope", ""},
        {"skiff_az=", ""},
        {"consumer-1", ""},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        zone_from_client_id(cases[i][0], strlen(cases[i][0]), z);
        assert_string_equal(z, cases[i][1]);
    }
    /* A zone name longer than the limit is cut, never overflowed. */
    char longid[200] = "skiff_az=";
    memset(longid + 9, 'a', 150);
    longid[159] = 0;
    zone_from_client_id(longid, strlen(longid), z);
    assert_int_equal(strlen(z), ZONE_MAX - 1);
}

static void test_cidr_and_listener(void **state)
{
    (void)state;
    char why[256], z[ZONE_MAX];
    zone_map *m = zone_map_new("10.0.0.0/8=big, 10.1.0.0/16=a, fd00::/8=v6, 192.168.1.5=host",
                               "INTERNAL_B=b", why, sizeof why);
    assert_non_null(m);
    struct sockaddr_in s4 = {.sin_family = AF_INET};
    inet_pton(AF_INET, "10.1.2.3", &s4.sin_addr);
    assert_string_equal(zone_detect(m, "c", 1, (struct sockaddr *)&s4, "PLAINTEXT", z), "a");
    inet_pton(AF_INET, "10.9.2.3", &s4.sin_addr);
    assert_string_equal(zone_detect(m, "c", 1, (struct sockaddr *)&s4, "PLAINTEXT", z), "big");
    inet_pton(AF_INET, "192.168.1.5", &s4.sin_addr);
    assert_string_equal(zone_detect(m, NULL, 0, (struct sockaddr *)&s4, NULL, z), "host");
    /* client.id wins over the address. */
    assert_string_equal(zone_detect(m, "skiff_az=x", 10, (struct sockaddr *)&s4, NULL, z), "x");
    struct sockaddr_in6 s6 = {.sin6_family = AF_INET6};
    inet_pton(AF_INET6, "fd12::1", &s6.sin6_addr);
    assert_string_equal(zone_detect(m, NULL, 0, (struct sockaddr *)&s6, NULL, z), "v6");
    inet_pton(AF_INET6, "::ffff:10.1.0.9", &s6.sin6_addr);
    assert_string_equal(zone_detect(m, NULL, 0, (struct sockaddr *)&s6, NULL, z), "a");
    inet_pton(AF_INET, "172.16.0.1", &s4.sin_addr);
    assert_string_equal(zone_detect(m, NULL, 0, (struct sockaddr *)&s4, "INTERNAL_B", z), "b");
    assert_string_equal(zone_detect(m, NULL, 0, (struct sockaddr *)&s4, "OTHER", z), "");
    zone_map_destroy(m);
}

static void test_bad_maps(void **state)
{
    (void)state;
    char why[256];
    const char *bad[] = {"10.0.0.0/33=a", "10.0.0.0=", "nonsense=a", "10.0.0.0/8", "1.2.3.4=a b",
                         "::/129=z"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        zone_map *m = zone_map_new(bad[i], "", why, sizeof why);
        assert_null(m);
        assert_non_null(strstr(why, "client.zone.cidrs"));
    }
    assert_null(zone_map_new("", "=a", why, sizeof why));
    zone_map *ok = zone_map_new("", "", why, sizeof why);
    assert_non_null(ok);
    zone_map_destroy(ok);
}

/* A long entry is quoted in part, so that the reason still fits. */
static void test_long_entry_keeps_reason(void **state)
{
    (void)state;
    char entry[301], why[256];
    memset(entry, 'x', sizeof entry - 1);
    entry[sizeof entry - 1] = 0;
    assert_null(zone_map_new(entry, "", why, sizeof why));
    assert_non_null(strstr(why, "is not key=zone"));
    assert_non_null(strstr(why, entry + sizeof entry - 1 - 64));
    assert_null(strstr(why, entry + sizeof entry - 1 - 65));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_client_id),
        cmocka_unit_test(test_cidr_and_listener),
        cmocka_unit_test(test_bad_maps),
        cmocka_unit_test(test_long_entry_keeps_reason),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
