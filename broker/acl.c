#include "acl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct entry {
    sk_acl a; /* its strings are owned */
} entry;

struct sk_acl_set {
    entry *v;
    int n, cap;
    char **supers;
    int nsupers;
    bool everyone_if_none;
};

static void entry_free(entry *e)
{
    free((char *)e->a.name);
    free((char *)e->a.principal);
    free((char *)e->a.host);
}

static int add_super(sk_acl_set *s, const char *p, size_t len)
{
    while (len && (*p == ' ' || *p == '\t')) {
        p++;
        len--;
    }
    while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
        len--;
    if (!len)
        return 0;
    char **v = realloc(s->supers, (size_t)(s->nsupers + 1) * sizeof *v);
    if (!v)
        return -1;
    s->supers = v;
    if (!(v[s->nsupers] = strndup(p, len)))
        return -1;
    s->nsupers++;
    return 0;
}

sk_acl_set *sk_acl_set_new(const char *super_users, bool everyone_if_none)
{
    sk_acl_set *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->everyone_if_none = everyone_if_none;
    for (const char *p = super_users; p && *p;) {
        const char *semi = strchr(p, ';');
        size_t len = semi ? (size_t)(semi - p) : strlen(p);
        if (add_super(s, p, len) != 0) {
            sk_acl_set_free(s);
            return NULL;
        }
        p += len + (semi != NULL);
    }
    return s;
}

void sk_acl_set_free(sk_acl_set *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->n; i++)
        entry_free(&s->v[i]);
    for (int i = 0; i < s->nsupers; i++)
        free(s->supers[i]);
    free(s->supers);
    free(s->v);
    free(s);
}

static bool streq(const char *a, const char *b)
{
    return a && b && strcmp(a, b) == 0;
}

static bool same_binding(const sk_acl *x, const sk_acl *y)
{
    return x->rtype == y->rtype && x->pattern == y->pattern && x->op == y->op &&
           x->perm == y->perm && streq(x->name, y->name) && streq(x->principal, y->principal) &&
           streq(x->host, y->host);
}

static int find(const sk_acl_set *s, const sk_acl *a)
{
    for (int i = 0; i < s->n; i++)
        if (same_binding(&s->v[i].a, a))
            return i;
    return -1;
}

int sk_acl_add(sk_acl_set *s, const sk_acl *a)
{
    if (!a->name || !a->principal || !a->host)
        return -1;
    if (find(s, a) >= 0)
        return 0;
    if (s->n == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        entry *v = realloc(s->v, (size_t)cap * sizeof *v);
        if (!v)
            return -1;
        s->v = v;
        s->cap = cap;
    }
    entry *e = &s->v[s->n];
    e->a = *a;
    e->a.name = strdup(a->name);
    e->a.principal = strdup(a->principal);
    e->a.host = strdup(a->host);
    if (!e->a.name || !e->a.principal || !e->a.host) {
        entry_free(e);
        return -1;
    }
    s->n++;
    return 0;
}

static void remove_at(sk_acl_set *s, int i)
{
    entry_free(&s->v[i]);
    s->v[i] = s->v[--s->n];
}

int sk_acl_remove(sk_acl_set *s, const sk_acl *a)
{
    int i = find(s, a);
    if (i < 0)
        return 0;
    remove_at(s, i);
    return 1;
}

void sk_acl_remove_resource(sk_acl_set *s, int8_t rtype, int8_t pattern, const char *name)
{
    for (int i = s->n - 1; i >= 0; i--)
        if (s->v[i].a.rtype == rtype && s->v[i].a.pattern == pattern &&
            streq(s->v[i].a.name, name))
            remove_at(s, i);
}

int sk_acl_count(const sk_acl_set *s)
{
    return s ? s->n : 0;
}

const sk_acl *sk_acl_at(const sk_acl_set *s, int i)
{
    return i >= 0 && i < s->n ? &s->v[i].a : NULL;
}

bool sk_acl_is_super(const sk_acl_set *s, const char *principal)
{
    for (int i = 0; i < s->nsupers; i++)
        if (streq(s->supers[i], principal))
            return true;
    return false;
}

/* ---- the decision ---- */

static bool resource_matches(const sk_acl *a, int8_t rtype, const char *name, size_t nlen)
{
    if (a->rtype != rtype)
        return false;
    size_t al = strlen(a->name);
    if (a->pattern == SK_ACL_PAT_LITERAL)
        return strcmp(a->name, "*") == 0 || (al == nlen && memcmp(a->name, name, nlen) == 0);
    if (a->pattern == SK_ACL_PAT_PREFIXED)
        return al <= nlen && memcmp(a->name, name, al) == 0;
    return false;
}

static bool implies(int8_t acl_op, int8_t op)
{
    if (acl_op == SK_ACL_OP_ALL || acl_op == op)
        return true;
    if (op == SK_ACL_OP_DESCRIBE)
        return acl_op == SK_ACL_OP_READ || acl_op == SK_ACL_OP_WRITE ||
               acl_op == SK_ACL_OP_DELETE || acl_op == SK_ACL_OP_ALTER;
    if (op == SK_ACL_OP_DESCRIBE_CONFIGS)
        return acl_op == SK_ACL_OP_ALTER_CONFIGS;
    return false;
}

/* ALLOW or DENY when the binding applies to the principal, host and
 * operation; 0 when it does not. Implications hold for ALLOW only. */
static int8_t result_of(const sk_acl *a, const char *principal, const char *host, int8_t op)
{
    if (!streq(a->principal, principal) && !streq(a->principal, "User:*"))
        return 0;
    if (!streq(a->host, "*") && !streq(a->host, host))
        return 0;
    if (a->perm == SK_ACL_PERM_ALLOW)
        return implies(a->op, op) ? SK_ACL_PERM_ALLOW : 0;
    return a->op == SK_ACL_OP_ALL || a->op == op ? SK_ACL_PERM_DENY : 0;
}

bool sk_acl_allowed(const sk_acl_set *s, const char *principal, const char *host, int8_t rtype,
                    const char *name, size_t nlen, int8_t op)
{
    if (sk_acl_is_super(s, principal))
        return true;
    bool any = false, allow = false;
    for (int i = 0; i < s->n; i++) {
        const sk_acl *a = &s->v[i].a;
        if (!resource_matches(a, rtype, name, nlen))
            continue;
        any = true;
        int8_t r = result_of(a, principal, host ? host : "", op);
        if (r == SK_ACL_PERM_DENY)
            return false;
        allow |= r == SK_ACL_PERM_ALLOW;
    }
    return allow || (!any && s->everyone_if_none);
}

int32_t sk_acl_authorized_ops(const sk_acl_set *s, const char *principal, const char *host,
                              int8_t rtype, const char *name, size_t nlen, int32_t ops)
{
    int32_t out = 0;
    for (int8_t op = SK_ACL_OP_READ; op <= SK_ACL_OP_DESCRIBE_TOKENS; op++)
        if ((ops & (1 << op)) && sk_acl_allowed(s, principal, host, rtype, name, nlen, op))
            out |= 1 << op;
    return out;
}

static bool prefix_of(const char *p, const char *name)
{
    return strncmp(p, name, strlen(p)) == 0;
}

/* Whether a DENY of the principal covers the pattern (pattern, name). */
static bool denied_pattern(const sk_acl_set *s, const char *principal, const char *host,
                           int8_t rtype, int8_t op, int8_t pattern, const char *name)
{
    for (int i = 0; i < s->n; i++) {
        const sk_acl *d = &s->v[i].a;
        if (d->rtype != rtype || result_of(d, principal, host, op) != SK_ACL_PERM_DENY)
            continue;
        if (d->pattern == SK_ACL_PAT_LITERAL && streq(d->name, "*"))
            return true;
        if (d->pattern == SK_ACL_PAT_PREFIXED && prefix_of(d->name, name))
            return true;
        if (d->pattern == pattern && streq(d->name, name))
            return true;
    }
    return false;
}

bool sk_acl_allowed_any(const sk_acl_set *s, const char *principal, const char *host,
                        int8_t rtype, int8_t op)
{
    host = host ? host : "";
    /* Kafka first asks about a resource no binding names: super users,
     * "*" bindings and allow.everyone.if.no.acl.found answer there. */
    if (sk_acl_allowed(s, principal, host, rtype, "hardcode", 8, op))
        return true;
    for (int i = 0; i < s->n; i++) {
        const sk_acl *a = &s->v[i].a;
        if (a->rtype == rtype && result_of(a, principal, host, op) == SK_ACL_PERM_ALLOW &&
            !denied_pattern(s, principal, host, rtype, op, a->pattern, a->name))
            return true;
    }
    return false;
}

/* ---- filters ---- */

static bool name_filter(const sk_acl *f, const sk_acl *a)
{
    if (!f->name)
        return f->pattern == SK_ACL_PAT_ANY || f->pattern == SK_ACL_PAT_MATCH ||
               f->pattern == a->pattern;
    switch (f->pattern) {
    case SK_ACL_PAT_ANY:
        return streq(f->name, a->name);
    case SK_ACL_PAT_MATCH:
        return resource_matches(a, a->rtype, f->name, strlen(f->name));
    default:
        return f->pattern == a->pattern && streq(f->name, a->name);
    }
}

bool sk_acl_filter_matches(const sk_acl *f, const sk_acl *a)
{
    if (f->rtype != SK_ACL_RES_ANY && f->rtype != a->rtype)
        return false;
    if (!name_filter(f, a))
        return false;
    if (f->principal && !streq(f->principal, a->principal))
        return false;
    if (f->host && !streq(f->host, a->host))
        return false;
    if (f->op != SK_ACL_OP_ANY && f->op != a->op)
        return false;
    return f->perm == SK_ACL_PERM_ANY || f->perm == a->perm;
}

const char *sk_acl_filter_invalid(const sk_acl *f)
{
    if (f->rtype < SK_ACL_RES_ANY || f->rtype > SK_ACL_RES_USER)
        return "Invalid resource type";
    if (f->pattern < SK_ACL_PAT_ANY || f->pattern > SK_ACL_PAT_PREFIXED)
        return "Invalid pattern type";
    if (f->op < SK_ACL_OP_ANY || f->op > SK_ACL_OP_DESCRIBE_TOKENS)
        return "Invalid operation";
    if (f->perm < SK_ACL_PERM_ANY || f->perm > SK_ACL_PERM_ALLOW)
        return "Invalid permission type";
    return NULL;
}

const char *sk_acl_invalid(const sk_acl *a)
{
    if (a->rtype <= SK_ACL_RES_ANY || a->rtype > SK_ACL_RES_USER)
        return "Invalid resourceType";
    if (a->pattern != SK_ACL_PAT_LITERAL && a->pattern != SK_ACL_PAT_PREFIXED)
        return "Invalid patternType";
    if (a->op <= SK_ACL_OP_ANY || a->op > SK_ACL_OP_DESCRIBE_TOKENS)
        return "Invalid operation";
    if (a->perm != SK_ACL_PERM_DENY && a->perm != SK_ACL_PERM_ALLOW)
        return "Invalid permissionType";
    if (!a->name || !*a->name)
        return "Invalid empty resource name";
    if (strlen(a->name) > SK_ACL_NAME_MAX)
        return "Resource name is too long";
    if (a->rtype == SK_ACL_RES_CLUSTER && strcmp(a->name, SK_ACL_CLUSTER_NAME) != 0)
        return "The only valid name for the CLUSTER resource is kafka-cluster";
    const char *colon = a->principal ? strchr(a->principal, ':') : NULL;
    if (!colon || colon == a->principal)
        return SK_ACL_BAD_PRINCIPAL;
    if (strlen(a->principal) > SK_ACL_NAME_MAX)
        return "The principal is too long";
    if (!a->host || !*a->host || strlen(a->host) > SK_ACL_NAME_MAX)
        return "Invalid host";
    return NULL;
}

/* ---- text ---- */

size_t sk_acl_encode(const sk_acl *a, char *buf, size_t len)
{
    int k = snprintf(buf, len, "%d.%d.%d.%d.%zu:%s%zu:%s%zu:%s", a->rtype, a->pattern, a->op,
                     a->perm, strlen(a->principal), a->principal, strlen(a->host), a->host,
                     strlen(a->name), a->name);
    return k > 0 && (size_t)k < len ? (size_t)k : 0;
}

/* One "L:bytes" field: NUL-terminates it in place by moving it one byte
 * left over its colon, which the next field no longer needs. */
static char *field(char **p, char *end)
{
    char *q;
    unsigned long l = strtoul(*p, &q, 10);
    if (q == *p || q >= end || *q != ':' || l > (unsigned long)(end - q - 1))
        return NULL;
    memmove(q, q + 1, l);
    q[l] = 0;
    char *out = q;
    *p = q + l + 1;
    return out;
}

int sk_acl_decode(char *buf, size_t len, sk_acl *a)
{
    char *end = buf + len, *p = buf;
    int v[4];
    for (int i = 0; i < 4; i++) {
        char *q;
        long x = strtol(p, &q, 10);
        if (q == p || q >= end || *q != '.' || x < 0 || x > 127)
            return -1;
        v[i] = (int)x;
        p = q + 1;
    }
    *a = (sk_acl){(int8_t)v[0], (int8_t)v[1], NULL, NULL, NULL, (int8_t)v[2], (int8_t)v[3]};
    if (!(a->principal = field(&p, end)) || !(a->host = field(&p, end)))
        return -1;
    /* The last field ends the text: its NUL goes where the text ends. */
    char *q;
    unsigned long l = strtoul(p, &q, 10);
    if (q == p || q >= end || *q != ':' || l != (unsigned long)(end - q - 1))
        return -1;
    memmove(q, q + 1, l);
    q[l] = 0;
    a->name = q;
    return sk_acl_invalid(a) ? -1 : 0;
}
