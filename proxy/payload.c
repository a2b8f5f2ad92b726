#include "payload.h"

#include <assert.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"
#include "sk_log.h"

#define PAY_VERSION 1
#define PAY_ROLL_BYTES (4u << 20)

/* The holds: positions in append order (so ascending), each released or
 * not; released entries at the head are dropped. */
struct hold {
    wal_lsn lsn;
    bool released;
};

struct pay_log {
    wal *w;
    struct hold *h;
    size_t head, n, cap; /* ring */
    size_t live;         /* holds not released */
};

static int no_replay(void *arg, wal_lsn lsn, uint8_t type, const uint8_t *payload, uint32_t len)
{
    (void)arg;
    (void)lsn;
    (void)type;
    (void)payload;
    (void)len;
    return 0;
}

pay_log *pay_open(struct event_base *base, wal_storage *st, const wal_opts *o, char *why,
                  size_t whylen)
{
    pay_log *p = calloc(1, sizeof *p);
    if (!p) {
        snprintf(why, whylen, "out of memory");
        st->ops->destroy(st);
        return NULL;
    }
    int err = 0;
    p->w = wal_open(base, st, o, 0, no_replay, NULL, &err, why, whylen);
    if (!p->w) {
        free(p);
        return NULL;
    }
    return p;
}

void pay_close(pay_log *p)
{
    if (!p)
        return;
    wal_close(p->w);
    free(p->h);
    free(p);
}

wal *pay_wal(pay_log *p)
{
    return p->w;
}

void pay_header(uint8_t out[PAY_HEADER], const kc_uuid *topic, int32_t part)
{
    out[0] = PAY_VERSION;
    memcpy(out + 1, topic->b, 16);
    uint32_t v = (uint32_t)part;
    for (int i = 0; i < 4; i++)
        out[17 + i] = (uint8_t)(v >> (8 * i));
}

int pay_parse(const uint8_t *rec, size_t len, kc_uuid *topic, int32_t *part, const uint8_t **batch,
              uint32_t *batch_len)
{
    if (len < PAY_HEADER || rec[0] != PAY_VERSION)
        return SK_ERR_CORRUPT;
    memcpy(topic->b, rec + 1, 16);
    *part = (int32_t)((uint32_t)rec[17] | (uint32_t)rec[18] << 8 | (uint32_t)rec[19] << 16 |
                      (uint32_t)rec[20] << 24);
    *batch = rec + PAY_HEADER;
    *batch_len = (uint32_t)(len - PAY_HEADER);
    return 0;
}

/* ---- holds ---- */

static struct hold *at(const pay_log *p, size_t i)
{
    return &p->h[(p->head + i) % p->cap];
}

static int hold_reserve(pay_log *p)
{
    if (p->n < p->cap)
        return 0;
    size_t ncap = p->cap ? p->cap * 2 : 64;
    struct hold *nh = malloc(ncap * sizeof *nh);
    if (!nh)
        return SK_ERR_NOMEM;
    for (size_t i = 0; i < p->n; i++)
        nh[i] = *at(p, i);
    free(p->h);
    p->h = nh;
    p->head = 0;
    p->cap = ncap;
    return 0;
}

/* After hold_reserve. */
static void hold_add(pay_log *p, wal_lsn lsn)
{
    assert(p->n < p->cap);
    assert(p->n == 0 || at(p, p->n - 1)->lsn < lsn);
    *at(p, p->n) = (struct hold){lsn, false};
    p->n++;
    p->live++;
}

void pay_release(pay_log *p, wal_lsn lsn)
{
    size_t lo = 0, hi = p->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (at(p, mid)->lsn < lsn)
            lo = mid + 1;
        else
            hi = mid;
    }
    if (lo == p->n || at(p, lo)->lsn != lsn || at(p, lo)->released)
        return;
    at(p, lo)->released = true;
    p->live--;
    while (p->n > 0 && at(p, 0)->released) {
        p->head = (p->head + 1) % p->cap;
        p->n--;
    }
}

wal_lsn pay_oldest_hold(const pay_log *p)
{
    return p->n ? at(p, 0)->lsn : UINT64_MAX;
}

size_t pay_holds(const pay_log *p)
{
    return p->live;
}

/* ---- appending, trimming, reading ---- */

int pay_append(pay_log *p, const kc_uuid *topic, int32_t part, const uint8_t *batch, uint32_t len,
               pay_done_fn fn, void *arg, wal_lsn *lsn)
{
    uint8_t head[PAY_HEADER];
    pay_header(head, topic, part);
    struct iovec iov[2] = {{head, sizeof head}, {(void *)batch, len}};
    /* Room for the hold first: once appended, the record must be held. */
    int rc = hold_reserve(p);
    if (rc)
        return rc;
    rc = wal_appendv(p->w, PAY_RECORD, iov, 2, fn, arg, lsn);
    if (rc)
        return rc;
    hold_add(p, *lsn);
    return 0;
}

void pay_trim(pay_log *p, wal_lsn floor)
{
    wal_lsn upto = floor < pay_oldest_hold(p) ? floor : pay_oldest_hold(p);
    wal_lsn end = wal_end_lsn(p->w);
    /* Everything written is below the bound: a new segment lets the
     * current one go (not for a few bytes: segments are not free). */
    if (upto >= end && end - wal_start_lsn(p->w) >= PAY_ROLL_BYTES && wal_durable_lsn(p->w) == end)
        wal_roll(p->w);
    wal_trim(p->w, upto);
}

int pay_read(pay_log *p, wal_lsn lsn, kc_uuid *topic, int32_t *part, uint8_t *buf, uint32_t cap,
             uint32_t *len)
{
    uint8_t type;
    uint32_t rlen;
    int rc = wal_read_record(p->w, lsn, &type, buf, cap, &rlen);
    if (rc)
        return rc;
    const uint8_t *batch;
    if (type != PAY_RECORD || pay_parse(buf, rlen, topic, part, &batch, len) != 0)
        return SK_ERR_CORRUPT;
    memmove(buf, batch, *len);
    return 0;
}
