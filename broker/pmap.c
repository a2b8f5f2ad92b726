/*
 * pmap: ssl.principal.mapping.rules. See pmap.h for the contract.
 */
#include "pmap.h"

#include <ctype.h>
#include <regex.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

#define MAX_RULES 32
#define MAX_GROUPS 32

typedef struct pm_rule {
    bool is_default;
    regex_t re;
    size_t ngroups;
    char *replacement;
    char fold; /* 'L', 'U' or 0 */
} pm_rule;

struct sk_pmap {
    int n;
    pm_rule r[MAX_RULES];
};

void sk_pmap_free(sk_pmap *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->n; i++) {
        if (!m->r[i].is_default) {
            regfree(&m->r[i].re);
            free(m->r[i].replacement);
        }
    }
    free(m);
}

/* Appends s to the buffer (*b, *len, *cap); false when out of memory. */
static bool put(char **b, size_t *len, size_t *cap, const char *s, size_t n)
{
    if (*len + n + 1 > *cap) {
        size_t c = (*len + n + 1) * 2;
        char *p = realloc(*b, c);
        if (!p)
            return false;
        *b = p;
        *cap = c;
    }
    memcpy(*b + *len, s, n);
    *len += n;
    (*b)[*len] = 0;
    return true;
}

/* Java's pattern as POSIX ERE: "\/" is a slash, lazy quantifiers become
 * greedy, \d and \D become classes. Bracket expressions are copied as they
 * are. NULL when out of memory. */
static char *to_posix(const char *p, size_t n)
{
    char *b = NULL;
    size_t len = 0, cap = 0;
    bool ok = put(&b, &len, &cap, "", 0);
    bool bracket = false;
    size_t first = 0; /* in a bracket expression: where its members start */
    for (size_t i = 0; ok && i < n; i++) {
        char c = p[i];
        if (bracket) {
            /* A ']' first (after '[' or '[^') is a member, not the end. */
            if (c == '^' && len == first)
                first++;
            bracket = c != ']' || len == first;
            ok = put(&b, &len, &cap, &c, 1);
        } else if (c == '\\' && i + 1 < n) {
            char d = p[++i];
            const char *s = d == '/' ? "/" : d == 'd' ? "[0-9]" : d == 'D' ? "[^0-9]" : NULL;
            char esc[2] = {'\\', d};
            ok = s ? put(&b, &len, &cap, s, strlen(s)) : put(&b, &len, &cap, esc, 2);
        } else if (c == '?' && len > 0 && strchr("*+?}", b[len - 1]) &&
                   !(len >= 2 && b[len - 2] == '\\')) {
            continue; /* the lazy mark of a quantifier */
        } else {
            bracket = c == '[';
            ok = put(&b, &len, &cap, &c, 1);
            first = len;
        }
    }
    if (!ok) {
        free(b);
        return NULL;
    }
    return b;
}

/* The end of a part of a RULE (at an unescaped '/'), else NULL. */
static const char *part_end(const char *p)
{
    for (; *p; p++) {
        if (*p == '\\' && p[1])
            p++;
        else if (*p == '/')
            return p;
    }
    return NULL;
}

static int bad(char *why, size_t whylen, const char *what, const char *rule, size_t n)
{
    snprintf(why, whylen, "%s: '%.*s'", what, (int)(n > 120 ? 120 : n), rule);
    return SK_ERR_INVAL;
}

/* RULE:pattern/replacement/[LU] at p (after "RULE:"); *next: past it. */
static int parse_rule(pm_rule *r, const char *start, const char *p, const char **next,
                      char *why, size_t whylen)
{
    const char *pe = part_end(p);
    const char *re = pe ? part_end(pe + 1) : NULL;
    if (!re)
        return bad(why, whylen, "has a RULE not of the form RULE:pattern/replacement/[LU]", start,
                   strcspn(start, ",\n"));
    const char *f = re + 1;
    r->fold = (*f == 'L' || *f == 'U') ? *f : 0;
    /* Anything after the flags, up to the next separator, is ignored. */
    *next = f + strcspn(f, ",\n");
    char *pat = to_posix(p, (size_t)(pe - p));
    r->replacement = strndup(pe + 1, (size_t)(re - pe - 1));
    if (!pat || !r->replacement) {
        free(pat);
        free(r->replacement);
        return SK_ERR_NOMEM;
    }
    int rc = regcomp(&r->re, pat, REG_EXTENDED);
    free(pat);
    if (rc != 0) {
        free(r->replacement);
        return bad(why, whylen, "has a pattern that does not compile", p, (size_t)(pe - p));
    }
    r->ngroups = r->re.re_nsub;
    return 0;
}

static const char *skip_space(const char *p)
{
    while (*p && (isspace((unsigned char)*p) || *p == ','))
        p++;
    return p;
}

int sk_pmap_parse(const char *rules, sk_pmap **out, char *why, size_t whylen)
{
    sk_pmap *m = calloc(1, sizeof *m);
    if (!m)
        return SK_ERR_NOMEM;
    int rc = 0;
    for (const char *p = skip_space(rules); rc == 0 && *p; p = skip_space(p)) {
        if (m->n == MAX_RULES) {
            rc = bad(why, whylen, "has too many rules (at most 32)", p, strlen(p));
            break;
        }
        pm_rule *r = &m->r[m->n];
        size_t wl = strcspn(p, ",\n");
        while (wl > 0 && isspace((unsigned char)p[wl - 1]))
            wl--;
        if (wl == 7 && strncmp(p, "DEFAULT", 7) == 0) {
            r->is_default = true;
            m->n++;
            p += 7;
        } else if (strncmp(p, "RULE:", 5) == 0) {
            rc = parse_rule(r, p, p + 5, &p, why, whylen);
            if (rc == 0)
                m->n++;
        } else {
            rc = bad(why, whylen, "has a rule that is neither DEFAULT nor RULE:pattern/replacement/[LU]", p, wl);
        }
    }
    if (rc == 0 && m->n == 0)
        rc = bad(why, whylen, "has no rule", rules, strlen(rules));
    if (rc != 0) {
        sk_pmap_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/* Java's Matcher.appendReplacement, with Kafka's escaping of back
 * references past the last group (they stay literal text). */
static bool expand(const pm_rule *r, const char *dn, const regmatch_t *g, char **b, size_t *len,
                   size_t *cap)
{
    for (const char *s = r->replacement; *s; s++) {
        if (*s == '\\' && s[1]) {
            if (!put(b, len, cap, ++s, 1))
                return false;
        } else if (*s == '$' && isdigit((unsigned char)s[1])) {
            /* $ and every digit after it: a group, or literal text when
             * there is no such group (Kafka escapes it so). */
            size_t nd = strspn(s + 1, "0123456789");
            size_t k = nd > 4 ? MAX_GROUPS : (size_t)atoi(s + 1);
            bool ref = k <= r->ngroups && k < MAX_GROUPS;
            if (ref && g[k].rm_so >= 0 &&
                !put(b, len, cap, dn + g[k].rm_so, (size_t)(g[k].rm_eo - g[k].rm_so)))
                return false;
            if (!ref && !put(b, len, cap, s, nd + 1))
                return false;
            s += nd;
        } else if (!put(b, len, cap, s, 1)) {
            return false;
        }
    }
    return true;
}

/* 1 when rule r applies to dn (the name in *b), 0 when not, <0 on error. */
static int apply_rule(const pm_rule *r, const char *dn, char **b, size_t *len, size_t *cap)
{
    if (r->is_default)
        return put(b, len, cap, dn, strlen(dn)) ? 1 : SK_ERR_NOMEM;
    regmatch_t g[MAX_GROUPS];
    if (regexec(&r->re, dn, MAX_GROUPS, g, 0) != 0 || g[0].rm_so != 0 ||
        (size_t)g[0].rm_eo != strlen(dn))
        return 0;
    if (!expand(r, dn, g, b, len, cap))
        return SK_ERR_NOMEM;
    for (size_t i = 0; r->fold && i < *len; i++)
        (*b)[i] = (char)(r->fold == 'L' ? tolower((unsigned char)(*b)[i])
                                        : toupper((unsigned char)(*b)[i]));
    return 1;
}

int sk_pmap_apply(const sk_pmap *m, const char *dn, char *out, size_t len)
{
    for (int i = 0; i < m->n; i++) {
        char *b = NULL;
        size_t bl = 0, cap = 0;
        int rc = apply_rule(&m->r[i], dn, &b, &bl, &cap);
        if (rc == 0) {
            free(b);
            continue;
        }
        if (rc < 0) {
            free(b);
            return rc;
        }
        rc = bl < len ? 0 : SK_ERR_INVAL;
        if (rc == 0)
            memcpy(out, b ? b : "", bl + 1);
        free(b);
        return rc;
    }
    return SK_ERR_NOENT;
}
