#include "dynconf.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "config.h"
#include "meta.h"
#include "node.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"
#include "tconf.h"

const char *sk_dynconf_check(const char *name, size_t nlen, const char *value, size_t vlen,
                             char *buf, size_t buflen)
{
    char nm[256], val[1024];
    if (nlen >= sizeof nm || vlen >= sizeof val)
        return "name or value too long";
    memcpy(nm, name, nlen);
    nm[nlen] = 0;
    memcpy(val, value, vlen);
    val[vlen] = 0;
    const sk_prop *p = sk_config_find(nm);
    if (!p)
        return "is not a broker property of Skiff";
    if (!p->dynamic)
        return "cannot be changed while the node runs: set it in the properties file and "
               "restart";
    if (sk_config_check(nm, val, buf, buflen) != 0)
        return buf;
    return NULL;
}

int sk_dynconf_find(const sk_node *n, const char *name, size_t len)
{
    for (int i = 0; i < n->ndyn; i++)
        if (strlen(n->dyn_names[i]) == len && memcmp(n->dyn_names[i], name, len) == 0)
            return i;
    return -1;
}

void sk_dynconf_free(sk_node *n)
{
    for (int i = 0; i < n->ndyn; i++) {
        free(n->dyn_names[i]);
        free(n->dyn_values[i]);
        free(n->dyn_static[i]);
    }
    free(n->dyn_names);
    free(n->dyn_values);
    free(n->dyn_static);
    n->dyn_names = n->dyn_values = n->dyn_static = NULL;
    n->ndyn = 0;
}

static void refresh_topics(sk_node *n)
{
    size_t it = 0;
    void *v;
    while (sk_map_next(n->topics_by_id, &it, NULL, NULL, &v))
        sk_tconf_resolve(n->cfg, &((sk_topic *)v)->conf);
}

int sk_dynconf_apply(sk_node *n, int count, const char *const *names, const size_t *nlens,
                     const char *const *values, const size_t *vlens)
{
    char why[256];
    /* Restore what is no longer overridden. */
    for (int i = 0; i < n->ndyn; i++) {
        bool kept = false;
        for (int k = 0; k < count && !kept; k++)
            kept = strlen(n->dyn_names[i]) == nlens[k] &&
                   memcmp(n->dyn_names[i], names[k], nlens[k]) == 0;
        if (!kept && sk_config_set(n->cfg, n->dyn_names[i], n->dyn_static[i], why, sizeof why))
            SK_WARN("dynconf", "cannot restore %s: %s", n->dyn_names[i], why);
    }
    char **nn = calloc((size_t)count + 1, sizeof *nn);
    char **nv = calloc((size_t)count + 1, sizeof *nv);
    char **ns = calloc((size_t)count + 1, sizeof *ns);
    if (!nn || !nv || !ns) {
        free(nn);
        free(nv);
        free(ns);
        return SK_ERR_NOMEM;
    }
    for (int k = 0; k < count; k++) {
        nn[k] = strndup(names[k], nlens[k]);
        nv[k] = strndup(values[k], vlens[k]);
        int prev = sk_dynconf_find(n, names[k], nlens[k]);
        if (prev >= 0) {
            ns[k] = strdup(n->dyn_static[prev]);
        } else {
            const sk_prop *p = nn[k] ? sk_config_find(nn[k]) : NULL;
            char buf[1024] = "";
            if (p)
                sk_config_get_text(n->cfg, p, buf, sizeof buf);
            ns[k] = strdup(buf);
        }
        if (nn[k] && nv[k] && sk_config_set(n->cfg, nn[k], nv[k], why, sizeof why) != 0)
            SK_WARN("dynconf", "cannot apply %s=%s: %s", nn[k], nv[k], why);
        else if (nn[k])
            SK_INFO("dynconf", "%s set to %s at runtime", nn[k], nv[k] ? nv[k] : "?");
    }
    /* The old statics of removed entries are no longer needed. */
    sk_dynconf_free(n);
    n->dyn_names = nn;
    n->dyn_values = nv;
    n->dyn_static = ns;
    n->ndyn = count;
    refresh_topics(n);
    return 0;
}

int sk_dynconf_apply_block(sk_node *n, const uint8_t *block, size_t len)
{
    sk_conf_iter it;
    if (sk_conf_iter_init(&it, block, len) != 0)
        return SK_ERR_CORRUPT;
    enum { MAXC = 64 };
    const char *names[MAXC], *values[MAXC];
    size_t nl[MAXC], vl[MAXC];
    int count = 0, rc;
    while (count < MAXC &&
           (rc = sk_conf_iter_next(&it, &names[count], &nl[count], &values[count], &vl[count])) ==
               1)
        count++;
    if (rc < 0)
        return SK_ERR_CORRUPT;
    return sk_dynconf_apply(n, count, names, nl, values, vl);
}

int sk_dynconf_commit(sk_node *n, int count, const char *const *names, const size_t *nlens,
                      const char *const *values, const size_t *vlens,
                      void (*fn)(void *arg, int err), void *arg)
{
    char **cn = calloc((size_t)count + 1, sizeof *cn);
    char **cv = calloc((size_t)count + 1, sizeof *cv);
    int rc = cn && cv ? 0 : SK_ERR_NOMEM;
    for (int k = 0; rc == 0 && k < count; k++) {
        cn[k] = strndup(names[k], nlens[k]);
        cv[k] = strndup(values[k], vlens[k]);
        if (!cn[k] || !cv[k])
            rc = SK_ERR_NOMEM;
    }
    if (rc == 0) {
        sk_buf b;
        sk_buf_init(&b, 1 << 20);
        sk_meta_broker_config(&b, count, cn, cv);
        if (sk_buf_failed(&b)) {
            rc = SK_ERR_NOMEM;
        } else {
            struct iovec iov = {b.data, b.len};
            wal_lsn end = 0;
            rc = sk_node_append(n, SK_WAL_META, &iov, 1, fn, arg, &end);
            if (rc == 0)
                sk_node_shown(n, end);
        }
        sk_buf_free(&b);
    }
    for (int k = 0; cn && cv && k < count; k++) {
        free(cn[k]);
        free(cv[k]);
    }
    free(cn);
    free(cv);
    if (rc == 0)
        rc = sk_dynconf_apply(n, count, names, nlens, values, vlens);
    return rc;
}
