#include "sk_arena.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Invariant: head is the chunk being filled; used <= size in every chunk;
 * total counts bytes handed out, never more than cap when cap != 0. */
struct chunk {
    struct chunk *next;
    size_t size, used;
    _Alignas(16) unsigned char data[];
};

struct sk_arena {
    struct chunk *head;
    size_t cap, total;
};

#define FIRST_CHUNK 4096u

sk_arena *sk_arena_new(size_t cap)
{
    sk_arena *a = calloc(1, sizeof *a);
    if (!a)
        return NULL;
    a->cap = cap;
    return a;
}

static void free_chunks(struct chunk *c, struct chunk *keep)
{
    while (c && c != keep) {
        struct chunk *n = c->next;
        free(c);
        c = n;
    }
}

void sk_arena_destroy(sk_arena *a)
{
    if (!a)
        return;
    free_chunks(a->head, NULL);
    free(a);
}

void sk_arena_reset(sk_arena *a)
{
    struct chunk *last = a->head;
    while (last && last->next)
        last = last->next;
    free_chunks(a->head, last);
    a->head = last;
    if (last) {
        last->used = 0;
        last->next = NULL;
    }
    a->total = 0;
}

void *sk_arena_alloc(sk_arena *a, size_t size)
{
    size_t need = (size + 15u) & ~(size_t)15u;
    if (need < size)
        return NULL;
    if (a->cap && (need > a->cap || a->total > a->cap - need))
        return NULL;
    struct chunk *c = a->head;
    if (!c || c->size - c->used < need) {
        size_t csize = c ? c->size * 2 : FIRST_CHUNK;
        if (csize > (1u << 20))
            csize = 1u << 20;
        if (csize < need)
            csize = need;
        struct chunk *n = malloc(sizeof *n + csize);
        if (!n)
            return NULL;
        n->size = csize;
        n->used = 0;
        n->next = c;
        a->head = c = n;
    }
    void *p = c->data + c->used;
    c->used += need;
    a->total += need;
    memset(p, 0, size);
    return p;
}

void *sk_arena_calloc(sk_arena *a, size_t n, size_t size)
{
    if (size && n > SIZE_MAX / size)
        return NULL;
    return sk_arena_alloc(a, n * size);
}

char *sk_arena_strndup(sk_arena *a, const char *s, size_t len)
{
    char *p = sk_arena_alloc(a, len + 1);
    if (p && len)
        memcpy(p, s, len);
    return p;
}

char *sk_arena_printf(sk_arena *a, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        return NULL;
    char *p = sk_arena_alloc(a, (size_t)n + 1);
    if (!p)
        return NULL;
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

size_t sk_arena_used(const sk_arena *a)
{
    return a->total;
}
