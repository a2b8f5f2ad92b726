#include "objreg.h"

#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

int objreg_objects_push(objreg_objects *l, const objreg_object *o)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 4;
        objreg_object *nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return SK_ERR_NOMEM;
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = *o;
    return 0;
}

void objreg_objects_free(objreg_objects *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i].ranges);
    free(l->v);
    *l = (objreg_objects){0};
}

int objreg_keys_push(objreg_keys *l, const char *key)
{
    if (l->n == l->cap) {
        size_t nc = l->cap ? l->cap * 2 : 16;
        char **nv = realloc(l->v, nc * sizeof *nv);
        if (!nv)
            return SK_ERR_NOMEM;
        l->v = nv;
        l->cap = nc;
    }
    char *k = strdup(key);
    if (!k)
        return SK_ERR_NOMEM;
    l->v[l->n++] = k;
    return 0;
}

bool objreg_keys_has(const objreg_keys *l, const char *key)
{
    for (size_t i = 0; i < l->n; i++)
        if (strcmp(l->v[i], key) == 0)
            return true;
    return false;
}

void objreg_keys_free(objreg_keys *l)
{
    for (size_t i = 0; i < l->n; i++)
        free(l->v[i]);
    free(l->v);
    *l = (objreg_keys){0};
}
