/*
 * sk_ref: a reference count on memory that outlives the code that found it.
 *
 * What: a cache entry (or any buffer) embeds an sk_ref; whoever keeps
 * pointing into that memory past the current call (a response queued on a
 * connection, bytes handed to libevent by reference) holds it, and drops it
 * when done. The owner's own link (the cache) counts as one hold, so memory
 * is freed when the cache has let go and the last response is sent or freed.
 *
 * Thread: not atomic; every hold and drop of one object on one thread (the
 * loop thread for the broker's caches and responses).
 *
 * Ownership: `drop` frees the object; it runs once, when the count reaches
 * zero. Errors: none (a hold cannot fail).
 */
#ifndef SK_REF_H
#define SK_REF_H

#include <stdint.h>

typedef struct sk_ref sk_ref;
struct sk_ref {
    uint32_t n;
    void (*drop)(sk_ref *ref); /* frees the object; called at n == 0 */
};

static inline void sk_ref_init(sk_ref *r, void (*drop)(sk_ref *))
{
    r->n = 1;
    r->drop = drop;
}

static inline void sk_ref_hold(sk_ref *r)
{
    r->n++;
}

static inline void sk_ref_put(sk_ref *r)
{
    if (r && --r->n == 0)
        r->drop(r);
}

#endif
