/*
 * sk_arena: a bump allocator for everything that lives as long as one request.
 *
 * Contract: single-threaded (the thread that owns the request). Memory comes
 * from chunks that are all released at once by sk_arena_destroy or
 * sk_arena_reset; nothing is freed individually. Every allocation is zeroed.
 * An arena has a hard cap: sk_arena_alloc returns NULL once the total would
 * pass it, so a hostile request cannot make the node allocate without bound.
 */
#ifndef SK_ARENA_H
#define SK_ARENA_H

#include <stddef.h>

typedef struct sk_arena sk_arena;

/* cap: maximum total bytes handed out (0 = no cap). */
sk_arena *sk_arena_new(size_t cap);
void sk_arena_destroy(sk_arena *a);
/* Releases everything but the first chunk, which is kept for reuse. */
void sk_arena_reset(sk_arena *a);
/* Zeroed, 16-byte aligned; NULL when over the cap or out of memory. */
void *sk_arena_alloc(sk_arena *a, size_t size);
/* n elements of size bytes each, with overflow checks. */
void *sk_arena_calloc(sk_arena *a, size_t n, size_t size);
/* A NUL-terminated copy of len bytes of s. */
char *sk_arena_strndup(sk_arena *a, const char *s, size_t len);
char *sk_arena_printf(sk_arena *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
size_t sk_arena_used(const sk_arena *a);

#endif
