/*
 * objstore front end: URL dispatch, argument checks, the asynchronous and
 * blocking call paths over one os_op, stats, fault injection.
 */
#include <assert.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "objstore_impl.h"
#include "sk_crc32c.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_workq.h"

void objstore_opts_default(objstore_opts *o)
{
    memset(o, 0, sizeof *o);
    o->part_size = 8u << 20;
    o->max_inflight = 16;
    o->max_attempts = 5;
    o->backoff_base_ms = 50;
    o->backoff_max_ms = 5000;
    o->request_timeout_ms = 30000;
    o->connect_timeout_ms = 5000;
    o->creds_refresh_margin_s = 300;
}

static char *dup_or_null(const char *s)
{
    return s ? strdup(s) : NULL;
}

static void free_opts_strings(objstore_opts *o)
{
    free((char *)o->access_key);
    free((char *)o->secret_key);
    free((char *)o->session_token);
    free((char *)o->imds_url);
}

static void free_store(objstore *s)
{
    free_opts_strings(&s->opts);
    pthread_mutex_destroy(&s->sync_mu);
    pthread_cond_destroy(&s->sync_cv);
    pthread_mutex_destroy(&s->fault_mu);
    pthread_mutex_destroy(&s->err_mu);
    free(s);
}

objstore *objstore_open(struct event_base *base, const char *url, const objstore_opts *opts,
                        char *why, size_t whylen)
{
    objstore *s = calloc(1, sizeof *s);
    if (!s) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    objstore_opts d;
    objstore_opts_default(&d);
    if (opts)
        d = *opts;
    if (d.part_size == 0)
        d.part_size = 8u << 20;
    if (d.max_inflight <= 0)
        d.max_inflight = 16;
    if (d.max_attempts <= 0)
        d.max_attempts = 1;
    if (d.backoff_base_ms < 0)
        d.backoff_base_ms = 0;
    if (d.backoff_max_ms < d.backoff_base_ms)
        d.backoff_max_ms = d.backoff_base_ms;
    if (d.request_timeout_ms <= 0)
        d.request_timeout_ms = 30000;
    if (d.connect_timeout_ms <= 0)
        d.connect_timeout_ms = 5000;
    if (d.creds_refresh_margin_s < 0)
        d.creds_refresh_margin_s = 0;
    d.access_key = dup_or_null(d.access_key);
    d.secret_key = dup_or_null(d.secret_key);
    d.session_token = dup_or_null(d.session_token);
    d.imds_url = dup_or_null(d.imds_url);
    s->opts = d;
    s->base = base;
    pthread_mutex_init(&s->sync_mu, NULL);
    pthread_cond_init(&s->sync_cv, NULL);
    pthread_mutex_init(&s->fault_mu, NULL);
    pthread_mutex_init(&s->err_mu, NULL);

    const char *sep = url ? strstr(url, "://") : NULL;
    if (!sep) {
        snprintf(why, whylen,
                 "objects URL '%s' has no scheme (expected file:///dir or s3://bucket/prefix)",
                 url ? url : "");
        free_store(s);
        return NULL;
    }
    s->mbox = sk_mailbox_new(base);
    if (!s->mbox) {
        snprintf(why, whylen, "cannot create the completion mailbox");
        free_store(s);
        return NULL;
    }
    size_t slen = (size_t)(sep - url);
    int rc;
    if (slen == 4 && strncmp(url, "file", 4) == 0) {
        rc = os_file_open(s, sep + 3, why, whylen);
    } else if (slen == 2 && strncmp(url, "s3", 2) == 0) {
        rc = os_s3_open(s, url, why, whylen);
    } else {
        snprintf(why, whylen, "unsupported objects URL scheme '%.*s' in '%s' (supported: file, s3)",
                 (int)(slen > 32 ? 32 : slen), url, url);
        rc = SK_ERR_INVAL;
    }
    if (rc != 0) {
        sk_mailbox_destroy(s->mbox);
        free_store(s);
        return NULL;
    }
    return s;
}

void objstore_destroy(objstore *s)
{
    if (!s)
        return;
    s->be->shutdown(s);
    /* Completions posted by the backend run now, before the store goes. */
    sk_mailbox_destroy(s->mbox);
    s->be->free_impl(s);
    free_store(s);
}

const char *objstore_kind(const objstore *s)
{
    return s->be->name;
}

/* ---- keys ---- */

bool os_key_valid(const char *key, bool prefix)
{
    if (!key)
        return false;
    size_t n = strlen(key);
    if (n > 1024 || (n == 0 && !prefix))
        return false;
    bool at_start = true;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f)
            return false;
        if (c == '/') {
            if (at_start)
                return false; /* leading '/' or an empty component */
            at_start = true;
            continue;
        }
        if (at_start && c == '.')
            return false;
        at_start = false;
    }
    /* A key must not end with '/': that would name a directory. */
    return prefix || !at_start;
}

/* ---- iovec helper ---- */

/* Into the iovec with CRCs: copied and checksummed this many bytes at a
 * time, so that the CRC reads what the copy left in the CPU's cache. */
#define CRC_PIECE (64u << 10)

static void fill_crc(uint8_t *dst, const uint8_t *src, size_t n, uint32_t *crc)
{
    for (size_t at = 0; at < n; at += CRC_PIECE) {
        size_t k = n - at < CRC_PIECE ? n - at : CRC_PIECE;
        memcpy(dst + at, src + at, k);
        *crc = sk_crc32c_extend(*crc, dst + at, k);
    }
}

/* Copies n bytes between position off of the iovec and buf: out of the
 * iovec, or into it (with crcs: extending each buffer's CRC). */
static void iov_move(const struct iovec *iov, int iovcnt, uint64_t off, uint8_t *buf, size_t n,
                     struct os_iov_pos *hint, bool into, uint32_t *crcs)
{
    int i = hint->idx;
    uint64_t base = hint->base;
    if (i >= iovcnt || off < base) {
        i = 0;
        base = 0;
    }
    while (i < iovcnt && base + iov[i].iov_len <= off) {
        base += iov[i].iov_len;
        i++;
    }
    uint8_t *d = buf;
    while (n > 0 && i < iovcnt) {
        size_t in = (size_t)(off - base);
        size_t take = iov[i].iov_len - in;
        if (take > n)
            take = n;
        if (into && crcs)
            fill_crc((uint8_t *)iov[i].iov_base + in, d, take, &crcs[i]);
        else if (into)
            memcpy((uint8_t *)iov[i].iov_base + in, d, take);
        else
            memcpy(d, (const uint8_t *)iov[i].iov_base + in, take);
        d += take;
        n -= take;
        off += take;
        if (off == base + iov[i].iov_len) {
            base += iov[i].iov_len;
            i++;
        }
    }
    hint->idx = i;
    hint->base = base;
}

void os_iov_copy(const struct iovec *iov, int iovcnt, uint64_t off, void *dst, size_t n,
                 struct os_iov_pos *hint)
{
    iov_move(iov, iovcnt, off, dst, n, hint, false, NULL);
}

void os_iov_fill(const struct iovec *iov, int iovcnt, uint64_t off, const void *src, size_t n,
                 struct os_iov_pos *hint, uint32_t *crcs)
{
    iov_move(iov, iovcnt, off, (uint8_t *)src, n, hint, true, crcs);
}

void os_get_read_into(struct os_op *op, int idx, const void *dst, size_t n)
{
    assert(op->scatter && idx >= 0 && idx < op->iovcnt);
    if (op->crcs)
        op->crcs[idx] = sk_crc32c_extend(op->crcs[idx], dst, n);
}

void os_get_restart(struct os_op *op)
{
    if (op->scatter && op->crcs)
        memset(op->crcs, 0, (size_t)op->iovcnt * sizeof *op->crcs);
}

/* ---- completion ---- */

void os_op_deliver(void *arg)
{
    struct os_op *op = arg;
    switch (op->kind) {
    case OS_PUT:
    case OS_DELETE:
        op->cb.done(op->arg, op->err);
        break;
    case OS_GET:
        if (op->err != 0) {
            if (op->own_buf)
                free(op->buf);
            op->cb.get(op->arg, op->err, NULL, 0, op->obj_size);
        } else {
            op->cb.get(op->arg, 0, op->buf, op->got, op->obj_size);
        }
        break;
    case OS_HEAD:
        op->cb.head(op->arg, op->err, op->obj_size, op->mtime_ms);
        break;
    case OS_LIST:
        op->cb.list(op->arg, op->err, &op->page);
        objstore_list_page_free(&op->page);
        break;
    }
    free(op->key);
    free(op->iov);
    free(op->token);
    free(op);
}

void os_op_complete(struct os_op *op)
{
    objstore *s = op->s;
    if (op->err == 0)
        atomic_fetch_add(&s->st_ok, 1);
    else
        atomic_fetch_add(&s->st_failed, 1);
    if (op->sync) {
        pthread_mutex_lock(&s->sync_mu);
        op->finished = true;
        pthread_cond_broadcast(&s->sync_cv);
        pthread_mutex_unlock(&s->sync_mu);
        return;
    }
    /* The mailbox refuses only when out of memory: wait for memory rather
     * than lose a completion. */
    while (sk_mailbox_post(s->mbox, os_op_deliver, op) != 0)
        usleep(1000);
}

static struct os_op *op_new(objstore *s, enum os_kind kind, const char *key, bool key_prefix)
{
    struct os_op *op = calloc(1, sizeof *op);
    if (!op)
        return NULL;
    op->s = s;
    op->kind = kind;
    if (!os_key_valid(key, key_prefix))
        op->err = SK_ERR_INVAL;
    op->key = strdup(key ? key : "");
    if (!op->key) {
        free(op);
        return NULL;
    }
    return op;
}

/* Runs op: invalid ones complete at once (through the mailbox when async). */
static void op_start(objstore *s, struct os_op *op)
{
    if (op->err != 0) {
        os_op_complete(op);
        return;
    }
    s->be->submit(s, op);
}

static void op_wait(objstore *s, struct os_op *op)
{
    pthread_mutex_lock(&s->sync_mu);
    while (!op->finished)
        pthread_cond_wait(&s->sync_cv, &s->sync_mu);
    pthread_mutex_unlock(&s->sync_mu);
}

static void op_free(struct os_op *op)
{
    if (op->own_buf)
        free(op->buf);
    objstore_list_page_free(&op->page);
    free(op->key);
    free(op->iov);
    free(op->token);
    free(op);
}

static int put_prepare(struct os_op *op, const struct iovec *iov, int iovcnt)
{
    if (iovcnt < 0 || (iovcnt > 0 && !iov)) {
        op->err = SK_ERR_INVAL;
        return 0;
    }
    op->iov = calloc((size_t)(iovcnt > 0 ? iovcnt : 1), sizeof *op->iov);
    if (!op->iov)
        return SK_ERR_NOMEM;
    op->iovcnt = 0;
    for (int i = 0; i < iovcnt; i++) {
        if (iov[i].iov_len == 0)
            continue;
        op->iov[op->iovcnt++] = iov[i];
        op->total += iov[i].iov_len;
    }
    return 0;
}

/* The async entry points report a failed allocation through the callback
 * too; they run it from a mailbox post when even the op cannot be made. */
struct nomem_ctx {
    enum os_kind kind;
    os_cb cb;
    void *arg;
};

static void nomem_deliver(void *p)
{
    struct nomem_ctx *c = p;
    objstore_list_page empty = {0};
    switch (c->kind) {
    case OS_PUT:
    case OS_DELETE:
        c->cb.done(c->arg, SK_ERR_NOMEM);
        break;
    case OS_GET:
        c->cb.get(c->arg, SK_ERR_NOMEM, NULL, 0, 0);
        break;
    case OS_HEAD:
        c->cb.head(c->arg, SK_ERR_NOMEM, 0, 0);
        break;
    case OS_LIST:
        c->cb.list(c->arg, SK_ERR_NOMEM, &empty);
        break;
    }
    free(c);
}

static void lost_completion(objstore *s, enum os_kind kind, os_cb cb, void *arg)
{
    struct nomem_ctx *c = malloc(sizeof *c);
    if (c) {
        c->kind = kind;
        c->cb = cb;
        c->arg = arg;
        if (sk_mailbox_post(s->mbox, nomem_deliver, c) == 0)
            return;
        free(c);
    }
    SK_ERROR("objstore", "out of memory: a completion is lost");
}

static void fail_nomem(objstore *s, struct os_op *op)
{
    enum os_kind kind = op->kind;
    os_cb cb = op->cb;
    void *arg = op->arg;
    op_free(op);
    lost_completion(s, kind, cb, arg);
}

void objstore_put(objstore *s, const char *key, const struct iovec *iov, int iovcnt,
                  objstore_done_cb cb, void *arg)
{
    struct os_op *op = op_new(s, OS_PUT, key, false);
    if (!op) {
        lost_completion(s, OS_PUT, (os_cb){.done = cb}, arg);
        return;
    }
    op->cb.done = cb;
    op->arg = arg;
    if (put_prepare(op, iov, iovcnt) != 0) {
        fail_nomem(s, op);
        return;
    }
    op_start(s, op);
}

static struct os_op *get_op(objstore *s, const char *key, uint64_t off, size_t len, void *buf)
{
    struct os_op *op = op_new(s, OS_GET, key, false);
    if (!op)
        return NULL;
    op->off = off;
    op->len = len;
    op->buf = buf;
    if (len == 0 || (len == OBJSTORE_TO_END && buf))
        op->err = op->err ? op->err : SK_ERR_INVAL;
    return op;
}

void objstore_get(objstore *s, const char *key, uint64_t off, size_t len, void *buf,
                  objstore_get_cb cb, void *arg)
{
    struct os_op *op = get_op(s, key, off, len, buf);
    if (!op) {
        lost_completion(s, OS_GET, (os_cb){.get = cb}, arg);
        return;
    }
    op->cb.get = cb;
    op->arg = arg;
    op_start(s, op);
}

static void getv(objstore *s, const char *key, uint64_t off, const struct iovec *iov, int iovcnt,
                 uint32_t *crcs, bool padded, objstore_get_cb cb, void *arg)
{
    struct os_op *op = get_op(s, key, off, 1, NULL);
    if (!op) {
        lost_completion(s, OS_GET, (os_cb){.get = cb}, arg);
        return;
    }
    op->cb.get = cb;
    op->arg = arg;
    op->scatter = true;
    op->padded = padded;
    if (put_prepare(op, iov, iovcnt) != 0) {
        fail_nomem(s, op);
        return;
    }
    op->len = (size_t)op->total;
    if (op->len == 0)
        op->err = op->err ? op->err : SK_ERR_INVAL;
    op->crcs = crcs;
    os_get_restart(op);
    op_start(s, op);
}

void objstore_getv(objstore *s, const char *key, uint64_t off, const struct iovec *iov,
                   int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg)
{
    getv(s, key, off, iov, iovcnt, crcs, false, cb, arg);
}

void objstore_getv_padded(objstore *s, const char *key, uint64_t off, const struct iovec *iov,
                          int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg)
{
    getv(s, key, off, iov, iovcnt, crcs, true, cb, arg);
}

void objstore_head(objstore *s, const char *key, objstore_head_cb cb, void *arg)
{
    struct os_op *op = op_new(s, OS_HEAD, key, false);
    if (!op) {
        lost_completion(s, OS_HEAD, (os_cb){.head = cb}, arg);
        return;
    }
    op->cb.head = cb;
    op->arg = arg;
    op_start(s, op);
}

void objstore_delete(objstore *s, const char *key, objstore_done_cb cb, void *arg)
{
    struct os_op *op = op_new(s, OS_DELETE, key, false);
    if (!op) {
        lost_completion(s, OS_DELETE, (os_cb){.done = cb}, arg);
        return;
    }
    op->cb.done = cb;
    op->arg = arg;
    op_start(s, op);
}

static struct os_op *list_op(objstore *s, const char *prefix, const char *token, int max_keys)
{
    struct os_op *op = op_new(s, OS_LIST, prefix ? prefix : "", true);
    if (!op)
        return NULL;
    if (max_keys < 0 || max_keys > 1000)
        op->err = op->err ? op->err : SK_ERR_INVAL;
    op->max_keys = max_keys == 0 ? 1000 : max_keys;
    if (token && *token) {
        op->token = strdup(token);
        if (!op->token) {
            op_free(op);
            return NULL;
        }
    }
    return op;
}

void objstore_list(objstore *s, const char *prefix, const char *token, int max_keys,
                   objstore_list_cb cb, void *arg)
{
    struct os_op *op = list_op(s, prefix, token, max_keys);
    if (!op) {
        lost_completion(s, OS_LIST, (os_cb){.list = cb}, arg);
        return;
    }
    op->cb.list = cb;
    op->arg = arg;
    op_start(s, op);
}

/* ---- blocking variants ---- */

static int run_sync(objstore *s, struct os_op *op)
{
    op->sync = true;
    op_start(s, op);
    op_wait(s, op);
    return op->err;
}

int objstore_put_sync(objstore *s, const char *key, const struct iovec *iov, int iovcnt)
{
    objstore_put_req r = {key, iov, iovcnt};
    return objstore_put_many_sync(s, &r, 1, NULL);
}

struct objstore_puts {
    objstore *s;
    size_t n, started;
    int rc; /* the first failure to start one */
    struct os_op *ops[];
};

/* Every op is started before this returns: the backend has them all. */
objstore_puts *objstore_put_many_start(objstore *s, const objstore_put_req *reqs, size_t n)
{
    objstore_puts *p = calloc(1, sizeof *p + n * sizeof p->ops[0]);
    if (!p)
        return NULL;
    p->s = s;
    p->n = n;
    for (; p->started < n; p->started++) {
        const objstore_put_req *r = &reqs[p->started];
        struct os_op *op = op_new(s, OS_PUT, r->key, false);
        if (op && put_prepare(op, r->iov, r->iovcnt) != 0) {
            op_free(op);
            op = NULL;
        }
        if (!op) {
            p->rc = SK_ERR_NOMEM;
            break;
        }
        op->sync = true;
        op_start(s, op);
        p->ops[p->started] = op;
    }
    return p;
}

int objstore_put_many_wait(objstore_puts *p, int *errs)
{
    int rc = p->rc;
    for (size_t i = 0; i < p->n; i++) {
        int err = SK_ERR_NOMEM; /* never started */
        if (i < p->started) {
            op_wait(p->s, p->ops[i]);
            err = p->ops[i]->err;
            op_free(p->ops[i]);
        }
        if (errs)
            errs[i] = err;
        if (rc == 0)
            rc = err;
    }
    free(p);
    return rc;
}

int objstore_put_many_sync(objstore *s, const objstore_put_req *reqs, size_t n, int *errs)
{
    objstore_puts *p = objstore_put_many_start(s, reqs, n);
    if (!p) {
        for (size_t i = 0; errs && i < n; i++)
            errs[i] = SK_ERR_NOMEM;
        return SK_ERR_NOMEM;
    }
    return objstore_put_many_wait(p, errs);
}

int objstore_get_sync(objstore *s, const char *key, uint64_t off, size_t len, void *buf,
                      uint8_t **data, size_t *got, uint64_t *obj_size)
{
    struct os_op *op = get_op(s, key, off, len, buf);
    if (!op)
        return SK_ERR_NOMEM;
    int rc = run_sync(s, op);
    if (data)
        *data = rc == 0 ? op->buf : NULL;
    if (got)
        *got = rc == 0 ? op->got : 0;
    if (obj_size)
        *obj_size = op->obj_size;
    if (rc == 0 && data)
        op->own_buf = false; /* handed to the caller */
    op_free(op);
    return rc;
}

int objstore_head_sync(objstore *s, const char *key, uint64_t *size, int64_t *mtime_ms)
{
    struct os_op *op = op_new(s, OS_HEAD, key, false);
    if (!op)
        return SK_ERR_NOMEM;
    int rc = run_sync(s, op);
    if (size)
        *size = op->obj_size;
    if (mtime_ms)
        *mtime_ms = op->mtime_ms;
    op_free(op);
    return rc;
}

int objstore_delete_sync(objstore *s, const char *key)
{
    struct os_op *op = op_new(s, OS_DELETE, key, false);
    if (!op)
        return SK_ERR_NOMEM;
    int rc = run_sync(s, op);
    op_free(op);
    return rc;
}

int objstore_list_sync(objstore *s, const char *prefix, const char *token, int max_keys,
                       objstore_list_page *page)
{
    memset(page, 0, sizeof *page);
    struct os_op *op = list_op(s, prefix, token, max_keys);
    if (!op)
        return SK_ERR_NOMEM;
    int rc = run_sync(s, op);
    if (rc == 0) {
        *page = op->page;
        memset(&op->page, 0, sizeof op->page);
    }
    op_free(op);
    return rc;
}

void objstore_list_page_free(objstore_list_page *page)
{
    if (!page)
        return;
    for (size_t i = 0; i < page->n; i++)
        free(page->entries[i].key);
    free(page->entries);
    free(page->next_token);
    memset(page, 0, sizeof *page);
}

/* ---- stats, errors, faults ---- */

void objstore_stats_get(objstore *s, objstore_stats *o)
{
    o->requests = atomic_load(&s->st_requests);
    o->ops_ok = atomic_load(&s->st_ok);
    o->ops_failed = atomic_load(&s->st_failed);
    o->bytes_up = atomic_load(&s->st_up);
    o->bytes_down = atomic_load(&s->st_down);
    o->retries = atomic_load(&s->st_retries);
    o->err_5xx = atomic_load(&s->st_5xx);
    o->err_throttle = atomic_load(&s->st_throttle);
    o->err_4xx = atomic_load(&s->st_4xx);
    o->err_conn = atomic_load(&s->st_conn);
    o->err_timeout = atomic_load(&s->st_timeout);
    o->err_notfound = atomic_load(&s->st_notfound);
    o->multipart = atomic_load(&s->st_multipart);
    o->parts = atomic_load(&s->st_parts);
    o->aborts = atomic_load(&s->st_aborts);
    o->injected = atomic_load(&s->st_injected);
    o->creds_refreshes = atomic_load(&s->st_creds);
    o->inflight = atomic_load(&s->st_inflight);
    o->inflight_peak = atomic_load(&s->st_peak);
    o->queued = atomic_load(&s->st_queued);
}

void os_inflight_add(objstore *s, int d)
{
    int_fast64_t now = atomic_fetch_add(&s->st_inflight, d) + d;
    int_fast64_t peak = atomic_load(&s->st_peak);
    while (now > peak && !atomic_compare_exchange_weak(&s->st_peak, &peak, now))
        ;
}

void objstore_last_error(objstore *s, char *buf, size_t len)
{
    if (len == 0)
        return;
    pthread_mutex_lock(&s->err_mu);
    snprintf(buf, len, "%s", s->last_err);
    pthread_mutex_unlock(&s->err_mu);
}

void os_set_last_error(objstore *s, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    pthread_mutex_lock(&s->err_mu);
    vsnprintf(s->last_err, sizeof s->last_err, fmt, ap);
    pthread_mutex_unlock(&s->err_mu);
    va_end(ap);
}

void objstore_inject(objstore *s, objstore_fault fault, int skip, int count)
{
    pthread_mutex_lock(&s->fault_mu);
    s->fault = fault;
    s->fault_skip = skip > 0 ? skip : 0;
    s->fault_count = count > 0 ? count : 0;
    pthread_mutex_unlock(&s->fault_mu);
}

objstore_fault os_fault_take(objstore *s)
{
    objstore_fault f = OBJSTORE_FAULT_NONE;
    pthread_mutex_lock(&s->fault_mu);
    if (s->fault_count > 0 && s->fault != OBJSTORE_FAULT_NONE) {
        if (s->fault_skip > 0) {
            s->fault_skip--;
        } else {
            s->fault_count--;
            f = s->fault;
        }
    }
    pthread_mutex_unlock(&s->fault_mu);
    if (f != OBJSTORE_FAULT_NONE)
        atomic_fetch_add(&s->st_injected, 1);
    return f;
}

int objstore_check_url(const char *url, char *why, size_t whylen)
{
    const char *sep = url ? strstr(url, "://") : NULL;
    size_t slen = sep ? (size_t)(sep - url) : 0;
    if (slen == 2 && strncmp(url, "s3", 2) == 0)
        return os_s3_check_url(url, why, whylen);
    if (slen == 4 && strncmp(url, "file", 4) == 0 && sep[3])
        return 0;
    snprintf(why, whylen, "objects URL '%s' is neither file:///dir nor s3://bucket/prefix",
             url ? url : "");
    return SK_ERR_INVAL;
}
