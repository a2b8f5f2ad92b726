/*
 * sk_map: an open-addressing hash map from byte-string keys to pointers.
 *
 * Contract: single-threaded (the owner's). The map copies keys it stores and
 * borrows values (it never frees them). Iteration order is unspecified; the
 * map must not be modified during sk_map_next iteration except through
 * sk_map_del of the current entry.
 */
#ifndef SK_MAP_H
#define SK_MAP_H

#include <stddef.h>
#include <stdint.h>

typedef struct sk_map sk_map;

sk_map *sk_map_new(void);
void sk_map_destroy(sk_map *m);
size_t sk_map_count(const sk_map *m);
void *sk_map_get(const sk_map *m, const void *key, size_t klen);
/* Inserts or replaces; returns 0 or SK_ERR_NOMEM. */
int sk_map_put(sk_map *m, const void *key, size_t klen, void *value);
/* Removes; returns the old value or NULL. */
void *sk_map_del(sk_map *m, const void *key, size_t klen);

/* Iteration: start with *it = 0; returns 0 at the end. */
int sk_map_next(const sk_map *m, size_t *it, const void **key, size_t *klen, void **value);

static inline void *sk_map_get_str(const sk_map *m, const char *s)
{
    size_t n = 0;
    while (s[n])
        n++;
    return sk_map_get(m, s, n);
}

static inline void *sk_map_get_i64(const sk_map *m, int64_t k)
{
    return sk_map_get(m, &k, sizeof k);
}

static inline int sk_map_put_i64(sk_map *m, int64_t k, void *v)
{
    return sk_map_put(m, &k, sizeof k, v);
}

#endif
