/*
 * sk_zacct: see sk_zacct.h for the contract.
 *
 * Names are published by a release store of the count after the name is
 * written, and read after an acquire load of it, so a reader never sees a
 * slot counted before its name is whole. Writers of names serialise on the
 * mutex; counters are independent relaxed atomics.
 */
#include "sk_zacct.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct sk_zacct {
    pthread_mutex_t mu;
    atomic_int named; /* slots 1..named hold names */
    int own;
    char names[SK_ZA_SLOTS][SK_ZA_NAME_MAX];
    _Atomic uint64_t bytes[SK_ZA_SLOTS][SK_ZA_DIRS][SK_ZA_KINDS];
};

sk_zacct *sk_zacct_new(const char *own_zone)
{
    sk_zacct *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    pthread_mutex_init(&a->mu, NULL);
    for (int s = 0; s < SK_ZA_SLOTS; s++)
        for (int d = 0; d < SK_ZA_DIRS; d++)
            for (int k = 0; k < SK_ZA_KINDS; k++)
                atomic_init(&a->bytes[s][d][k], 0);
    atomic_init(&a->named, 0);
    a->own = sk_zacct_zone(a, own_zone);
    return a;
}

void sk_zacct_destroy(sk_zacct *a)
{
    if (!a)
        return;
    pthread_mutex_destroy(&a->mu);
    free(a);
}

/* The slot among the first n named ones that holds `zone` (cut as stored), or -1. */
static int find(const sk_zacct *a, int n, const char *zone)
{
    for (int s = 1; s <= n; s++)
        if (strncmp(a->names[s], zone, SK_ZA_NAME_MAX - 1) == 0)
            return s;
    return -1;
}

int sk_zacct_zone(sk_zacct *a, const char *zone)
{
    if (!zone || !zone[0])
        return SK_ZA_UNKNOWN;
    int s = find(a, atomic_load_explicit(&a->named, memory_order_acquire), zone);
    if (s >= 0)
        return s;
    pthread_mutex_lock(&a->mu);
    int n = atomic_load_explicit(&a->named, memory_order_relaxed);
    s = find(a, n, zone);
    if (s < 0 && n < SK_ZA_NAMED) {
        s = n + 1;
        snprintf(a->names[s], SK_ZA_NAME_MAX, "%s", zone);
        atomic_store_explicit(&a->named, s, memory_order_release);
    }
    pthread_mutex_unlock(&a->mu);
    return s < 0 ? SK_ZA_OTHER : s;
}

int sk_zacct_own(const sk_zacct *a)
{
    return a->own;
}

const char *sk_zacct_name(const sk_zacct *a, int slot)
{
    int n = atomic_load_explicit(&((sk_zacct *)a)->named, memory_order_acquire);
    return slot >= 1 && slot <= n ? a->names[slot] : "";
}

bool sk_zacct_cross(const sk_zacct *a, int slot)
{
    return a->own != SK_ZA_UNKNOWN && slot != SK_ZA_UNKNOWN && slot != a->own && slot >= 0 &&
           slot < SK_ZA_SLOTS;
}

static bool valid(sk_za_dir d, sk_za_kind k)
{
    return (unsigned)d < SK_ZA_DIRS && (unsigned)k < SK_ZA_KINDS;
}

void sk_zacct_add(sk_zacct *a, int slot, sk_za_dir d, sk_za_kind k, uint64_t bytes)
{
    if (!a || !valid(d, k) || bytes == 0)
        return;
    if (slot < 0 || slot >= SK_ZA_SLOTS)
        slot = SK_ZA_UNKNOWN;
    atomic_fetch_add_explicit(&a->bytes[slot][d][k], bytes, memory_order_relaxed);
}

uint64_t sk_zacct_get(const sk_zacct *a, int slot, sk_za_dir d, sk_za_kind k)
{
    if (!valid(d, k) || slot < 0 || slot >= SK_ZA_SLOTS)
        return 0;
    return atomic_load_explicit(&((sk_zacct *)a)->bytes[slot][d][k], memory_order_relaxed);
}

uint64_t sk_zacct_cross_bytes(const sk_zacct *a, sk_za_dir d, sk_za_kind k)
{
    uint64_t sum = 0;
    for (int s = 0; s < SK_ZA_SLOTS; s++)
        if (sk_zacct_cross(a, s))
            sum += sk_zacct_get(a, s, d, k);
    return sum;
}

const char *sk_za_kind_name(sk_za_kind k)
{
    static const char *const names[SK_ZA_KINDS] = {"client", "confirm", "follow", "rpc", "etcd"};
    return (unsigned)k < SK_ZA_KINDS ? names[k] : "?";
}

const char *sk_za_dir_name(sk_za_dir d)
{
    return d == SK_ZA_IN ? "in" : d == SK_ZA_OUT ? "out" : "?";
}
