#include "sk_map.h"

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

/* Invariant: cap is 0 or a power of two; count + tombs < cap * 3/4; a slot is
 * empty (key NULL, tomb false), a tombstone (key NULL, tomb true) or used. */
struct slot {
    void *key;
    size_t klen;
    uint64_t hash;
    void *value;
    bool tomb;
};

struct sk_map {
    struct slot *slots;
    size_t cap, count, tombs;
};

static uint64_t hash_bytes(const void *k, size_t n)
{
    /* FNV-1a, then a finaliser so that low bits are well mixed. */
    const unsigned char *p = k;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) {
        h ^= p[i];
        h *= 1099511628211ull;
    }
    h ^= h >> 33;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
    return h;
}

sk_map *sk_map_new(void)
{
    return calloc(1, sizeof(sk_map));
}

void sk_map_destroy(sk_map *m)
{
    if (!m)
        return;
    for (size_t i = 0; i < m->cap; i++)
        free(m->slots[i].key);
    free(m->slots);
    free(m);
}

size_t sk_map_count(const sk_map *m)
{
    return m->count;
}

static struct slot *find(const sk_map *m, const void *key, size_t klen, uint64_t h)
{
    if (!m->cap)
        return NULL;
    size_t mask = m->cap - 1;
    for (size_t i = h & mask;; i = (i + 1) & mask) {
        struct slot *s = &m->slots[i];
        if (!s->key && !s->tomb)
            return NULL;
        if (s->key && s->hash == h && s->klen == klen && memcmp(s->key, key, klen) == 0)
            return s;
    }
}

void *sk_map_get(const sk_map *m, const void *key, size_t klen)
{
    struct slot *s = find(m, key, klen, hash_bytes(key, klen));
    return s ? s->value : NULL;
}

static int grow(sk_map *m)
{
    size_t ncap = m->cap ? m->cap * 2 : 16;
    if (m->count * 2 < m->cap) /* mostly tombstones: rehash at the same size */
        ncap = m->cap;
    struct slot *ns = calloc(ncap, sizeof *ns);
    if (!ns)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < m->cap; i++) {
        struct slot *s = &m->slots[i];
        if (!s->key)
            continue;
        size_t j = s->hash & (ncap - 1);
        while (ns[j].key)
            j = (j + 1) & (ncap - 1);
        ns[j] = *s;
    }
    free(m->slots);
    m->slots = ns;
    m->cap = ncap;
    m->tombs = 0;
    return 0;
}

int sk_map_put(sk_map *m, const void *key, size_t klen, void *value)
{
    uint64_t h = hash_bytes(key, klen);
    struct slot *s = find(m, key, klen, h);
    if (s) {
        s->value = value;
        return 0;
    }
    if ((m->count + m->tombs + 1) * 4 >= m->cap * 3) {
        int rc = grow(m);
        if (rc)
            return rc;
    }
    void *kc = malloc(klen ? klen : 1);
    if (!kc)
        return SK_ERR_NOMEM;
    memcpy(kc, key, klen);
    size_t mask = m->cap - 1;
    size_t i = h & mask;
    while (m->slots[i].key)
        i = (i + 1) & mask;
    if (m->slots[i].tomb)
        m->tombs--;
    m->slots[i] = (struct slot){kc, klen, h, value, false};
    m->count++;
    return 0;
}

void *sk_map_del(sk_map *m, const void *key, size_t klen)
{
    struct slot *s = find(m, key, klen, hash_bytes(key, klen));
    if (!s)
        return NULL;
    void *v = s->value;
    free(s->key);
    s->key = NULL;
    s->value = NULL;
    s->tomb = true;
    m->count--;
    m->tombs++;
    return v;
}

int sk_map_next(const sk_map *m, size_t *it, const void **key, size_t *klen, void **value)
{
    while (*it < m->cap) {
        struct slot *s = &m->slots[(*it)++];
        if (s->key) {
            if (key)
                *key = s->key;
            if (klen)
                *klen = s->klen;
            if (value)
                *value = s->value;
            return 1;
        }
    }
    return 0;
}
