/* proxy/route: which node a client of a zone is sent to, from a real model
 * fed the values etcd would hold. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cmodel.h"
#include "route.h"

#define P "/r/"

static int64_t rev = 1;

static void put_node(cm_model *m, int32_t id, const char *rack, bool draining)
{
    cm_node nd = {.id = id, .log = 2 * id, .nlisteners = 1, .draining = draining,
                  .started_ms = 1700000000000};
    snprintf(nd.rack, sizeof nd.rack, "%s", rack);
    snprintf(nd.listeners[0].name, sizeof nd.listeners[0].name, "PLAINTEXT");
    snprintf(nd.listeners[0].host, sizeof nd.listeners[0].host, "node%d", (int)id);
    nd.listeners[0].port = 9092;
    char k[256];
    size_t kl = cm_key_node(P, id, k, sizeof k);
    char *v = cm_encode_node(&nd);
    assert_non_null(v);
    cm_apply_put(m, (const uint8_t *)k, kl, (const uint8_t *)v, strlen(v), rev++);
    free(v);
}

static void del_node(cm_model *m, int32_t id)
{
    char k[256];
    size_t kl = cm_key_node(P, id, k, sizeof k);
    cm_apply_delete(m, (const uint8_t *)k, kl, rev++);
}

/* Nodes 1-3 in zone a, 4 in b, 5 in c. */
static cm_model *model(void)
{
    cm_model *m = cm_new(P, NULL, NULL);
    assert_non_null(m);
    put_node(m, 1, "a", false);
    put_node(m, 2, "a", false);
    put_node(m, 3, "a", false);
    put_node(m, 4, "b", false);
    put_node(m, 5, "c", false);
    return m;
}

static kc_uuid topic(int i)
{
    kc_uuid u;
    memset(&u, 0, sizeof u);
    u.b[0] = (uint8_t)i;
    u.b[15] = 0x5a;
    return u;
}

static void test_unknown_zone_and_own_zone(void **state)
{
    (void)state;
    cm_model *m = model();
    kc_uuid t = topic(1);
    /* Unknown zone: the main. */
    assert_int_equal(zr_leader(m, 4, "", &t, 0), 4);
    assert_int_equal(zr_leader(m, 4, NULL, &t, 0), 4);
    /* The main in the client's zone: the main, even when others are there. */
    assert_int_equal(zr_leader(m, 2, "a", &t, 0), 2);
    assert_int_equal(zr_leader(m, 4, "b", &t, 0), 4);
    /* No main: none. */
    assert_int_equal(zr_leader(m, -1, "a", &t, 0), -1);
    /* A zone with no node: the main. */
    assert_int_equal(zr_leader(m, 4, "d", &t, 0), 4);
    assert_false(zr_zone_served(m, "d"));
    assert_false(zr_zone_served(m, ""));
    assert_true(zr_zone_served(m, "c"));
    assert_string_equal(zr_node_zone(m, 5), "c");
    assert_null(zr_node_zone(m, 9));
    cm_destroy(m);
}

static void test_proxy_in_zone_stable_and_spread(void **state)
{
    (void)state;
    cm_model *m = model();
    int count[4] = {0};
    int32_t first[64];
    for (int i = 0; i < 64; i++) {
        kc_uuid t = topic(i / 8);
        int32_t l = zr_leader(m, 4, "a", &t, i % 8);
        assert_true(l >= 1 && l <= 3); /* a node of zone a */
        count[l]++;
        first[i] = l;
        /* The same answer every time. */
        assert_int_equal(zr_leader(m, 4, "a", &t, i % 8), l);
        /* Whichever zone the main is in. */
        assert_int_equal(zr_leader(m, 5, "a", &t, i % 8) >= 1, 1);
    }
    /* Spread over the zone's three nodes. */
    for (int k = 1; k <= 3; k++)
        assert_true(count[k] >= 10);
    /* Node 2 leaves: only its partitions move, to the other two. */
    del_node(m, 2);
    for (int i = 0; i < 64; i++) {
        kc_uuid t = topic(i / 8);
        int32_t l = zr_leader(m, 4, "a", &t, i % 8);
        assert_true(l == 1 || l == 3);
        if (first[i] != 2)
            assert_int_equal(l, first[i]);
    }
    cm_destroy(m);
}

static void test_draining_nodes_are_not_proxies(void **state)
{
    (void)state;
    cm_model *m = model();
    put_node(m, 1, "a", true);
    put_node(m, 3, "a", true);
    for (int i = 0; i < 16; i++) {
        kc_uuid t = topic(i);
        assert_int_equal(zr_leader(m, 5, "a", &t, 0), 2);
    }
    put_node(m, 2, "a", true);
    assert_false(zr_zone_served(m, "a"));
    kc_uuid t = topic(0);
    assert_int_equal(zr_leader(m, 5, "a", &t, 0), 5);
    cm_destroy(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_unknown_zone_and_own_zone),
        cmocka_unit_test(test_proxy_in_zone_stable_and_spread),
        cmocka_unit_test(test_draining_nodes_are_not_proxies),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
