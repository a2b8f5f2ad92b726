#include "acls.h"

#include <string.h>

#include "config.h"
#include "gconf.h"
#include "meta.h"
#include "node.h"
#include "sk_err.h"

sk_acl_set *sk_acls(sk_node *n)
{
    if (!n->acls)
        n->acls = sk_acl_set_new(n->cfg->super_users, n->cfg->allow_everyone_if_no_acl_found);
    return n->acls;
}

int sk_acls_apply(sk_node *n, const sk_acl *a, bool present)
{
    sk_acl_set *s = sk_acls(n);
    if (!s)
        return SK_ERR_NOMEM;
    if (!present) {
        (void)sk_acl_remove(s, a);
        return 0;
    }
    return sk_acl_add(s, a) ? SK_ERR_NOMEM : 0;
}

int sk_acls_apply_text(sk_node *n, const char *text, size_t len, bool present)
{
    char buf[SK_ACL_TEXT_MAX];
    sk_acl a;
    if (len >= sizeof buf)
        return SK_ERR_CORRUPT;
    memcpy(buf, text, len);
    buf[len] = 0;
    if (sk_acl_decode(buf, len, &a) != 0)
        return SK_ERR_CORRUPT;
    return sk_acls_apply(n, &a, present);
}

int sk_acls_body_put(sk_buf *b, const sk_acl *a, bool present)
{
    char text[SK_ACL_TEXT_MAX];
    size_t len = sk_acl_encode(a, text, sizeof text);
    if (!len)
        return SK_ERR_INVAL;
    const char *name = "acl", *value = "";
    size_t nl = 3, vl = 0;
    sk_gconf_body_put(b, text, len, present ? 1 : 0, &name, &nl, &value, &vl);
    return 0;
}

int sk_acls_load(sk_node *n, const uint8_t *body, size_t len)
{
    sk_rd r;
    sk_rd_init(&r, body, len);
    size_t tlen;
    const char *text = (const char *)sk_rd_str(&r, &tlen);
    uint32_t count = sk_rd_u32(&r);
    if (sk_rd_failed(&r))
        return SK_ERR_CORRUPT;
    return sk_acls_apply_text(n, text, tlen, count > 0);
}

uint32_t sk_acls_snapshot(const sk_node *n, sk_buf *b)
{
    uint32_t k = 0;
    for (int i = 0; n->acls && i < sk_acl_count(n->acls); i++) {
        sk_buf body;
        sk_buf_init(&body, 0);
        if (sk_acls_body_put(&body, sk_acl_at(n->acls, i), true) == 0) {
            sk_buf_u8(b, SK_SNAP_ACLS);
            sk_buf_str(b, (const char *)body.data, body.len);
            if (sk_buf_failed(&body))
                b->failed = true;
            k++;
        }
        sk_buf_free(&body);
    }
    return k;
}

void sk_acls_free(sk_node *n)
{
    sk_acl_set_free(n->acls);
    n->acls = NULL;
}
