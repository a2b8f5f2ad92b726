#include "txidx.h"

#include <stdlib.h>
#include <string.h>

#include "kbatch.h"
#include "sk_err.h"

struct ctl {
    int type;
};

static int ctl_record(void *arg, const kb_record *r)
{
    struct ctl *c = arg;
    /* Key: int16 version, int16 type (0 abort, 1 commit). */
    if (r->key.len >= 4 && r->key.p)
        c->type = ((const uint8_t *)r->key.p)[3] == 1 && ((const uint8_t *)r->key.p)[2] == 0;
    return 1; /* the first record is the marker */
}

int sk_txidx_control_type(const uint8_t *batch, size_t len)
{
    kb_header h;
    if (kb_parse_header(batch, len, &h) != 0 || !(h.attributes & KB_ATTR_CONTROL))
        return -1;
    struct ctl c = {-1};
    (void)kb_foreach_record(batch, len, 0, ctl_record, &c);
    return c.type;
}

static int push(sk_txidx_ent **v, int *n, int *cap, const sk_txidx_ent *e)
{
    if (*n == *cap) {
        int nc = *cap ? *cap * 2 : 4;
        sk_txidx_ent *nv = realloc(*v, (size_t)nc * sizeof *nv);
        if (!nv)
            return SK_ERR_NOMEM;
        *v = nv;
        *cap = nc;
    }
    (*v)[(*n)++] = *e;
    return 0;
}

static int find_open(const sk_txidx *x, int64_t pid)
{
    for (int i = 0; i < x->nopen; i++)
        if (x->open[i].pid == pid)
            return i;
    return -1;
}

int sk_txidx_batch(sk_txidx *x, int64_t pid, int64_t base, bool transactional, int control)
{
    if (!transactional || pid < 0)
        return 0;
    int i = find_open(x, pid);
    if (control < 0) {
        sk_txidx_ent e = {pid, base, -1};
        return i >= 0 ? 0 : push(&x->open, &x->nopen, &x->capopen, &e);
    }
    if (i < 0)
        return 0; /* a marker of a transaction with no data here */
    sk_txidx_ent e = x->open[i];
    x->open[i] = x->open[--x->nopen];
    if (control == 1)
        return 0;
    e.last = base;
    return push(&x->aborted, &x->naborted, &x->capaborted, &e);
}

int sk_txidx_load(sk_txidx *x, const sk_txidx_ent *e)
{
    if (e->last < 0)
        return find_open(x, e->pid) >= 0 ? 0 : push(&x->open, &x->nopen, &x->capopen, e);
    return push(&x->aborted, &x->naborted, &x->capaborted, e);
}

int64_t sk_txidx_lso(const sk_txidx *x, int64_t hw)
{
    int64_t lso = hw;
    for (int i = 0; x && i < x->nopen; i++)
        if (x->open[i].first < lso)
            lso = x->open[i].first;
    return lso;
}

int64_t sk_txidx_open_first(const sk_txidx *x, int64_t pid)
{
    int i = find_open(x, pid);
    return i >= 0 ? x->open[i].first : -1;
}

int sk_txidx_aborted(const sk_txidx *x, int64_t from, int64_t to, sk_txidx_ent *out, int max)
{
    int n = 0;
    for (int i = 0; x && i < x->naborted; i++) {
        const sk_txidx_ent *e = &x->aborted[i];
        if (e->last >= from && e->first < to) {
            if (n < max)
                out[n] = *e;
            n++;
        }
    }
    return n;
}

void sk_txidx_trim(sk_txidx *x, int64_t log_start)
{
    int k = 0;
    for (int i = 0; i < x->naborted; i++)
        if (x->aborted[i].last >= log_start)
            x->aborted[k++] = x->aborted[i];
    x->naborted = k;
}

void sk_txidx_clear(sk_txidx *x)
{
    free(x->open);
    free(x->aborted);
    memset(x, 0, sizeof *x);
}
