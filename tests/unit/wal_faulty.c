/*
 * wal_faulty: fault injection around a wal_storage (see wal_faulty.h).
 * Tests #include this file: tests/unit/test_*.c are each one program.
 */
#include "wal_faulty.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

enum { OP_CREATE, OP_WRITE, OP_REMOVE, OP_RENEW };
static const char *const op_kinds[] = {"create", "write", "remove", "renew"};

struct fop {
    struct fop *next;
    struct faulty *f;
    int kind;
    int err;      /* forced error, 0 = the inner result */
    int result;
    wal_io_cb cb;
    void *arg;
    struct event *ev; /* scheduled delivery */
};

struct faulty {
    wal_storage base;
    wal_storage *inner;
    struct event_base *evb;
    wal_faulty_ctl *ctl;
    struct fop *held;      /* waiting for a release, oldest first */
    struct fop *scheduled; /* delivery timer armed */
    bool destroying;
};

static void fop_unlink(struct fop **list, struct fop *op)
{
    for (struct fop **p = list; *p; p = &(*p)->next) {
        if (*p == op) {
            *p = op->next;
            op->next = NULL;
            return;
        }
    }
}

static void fop_fire(struct fop *op)
{
    struct faulty *f = op->f;
    if (op->kind != OP_RENEW)
        f->ctl->completions++;
    op->cb(op->arg, op->result);
    free(op);
}

static void fop_timer(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    struct fop *op = arg;
    fop_unlink(&op->f->scheduled, op);
    event_free(op->ev);
    fop_fire(op);
}

static void fop_schedule(struct fop *op, int delay_ms)
{
    struct faulty *f = op->f;
    struct timeval tv = {.tv_sec = delay_ms / 1000, .tv_usec = (delay_ms % 1000) * 1000};
    op->ev = event_new(f->evb, -1, 0, fop_timer, op);
    op->next = f->scheduled;
    f->scheduled = op;
    event_add(op->ev, &tv);
}

/* The operation finished: the inner result, or an injected failure decided
 * inside the call itself (in_call), whose callback must still come later. */
static void fop_complete(struct fop *op, int result, bool in_call)
{
    struct faulty *f = op->f;
    op->result = op->err ? op->err : result;
    if (f->destroying) {
        fop_fire(op);
    } else if (f->ctl->hold && op->kind != OP_RENEW) {
        struct fop **p = &f->held;
        while (*p)
            p = &(*p)->next;
        *p = op;
    } else if (f->ctl->delay_ms > 0 || in_call) {
        fop_schedule(op, f->ctl->delay_ms);
    } else {
        fop_fire(op);
    }
}

static void inner_done(void *arg, int err)
{
    fop_complete(arg, err, false);
}

static struct fop *fop_new(struct faulty *f, int kind, wal_io_cb cb, void *arg)
{
    struct fop *op = calloc(1, sizeof *op);
    if (!op)
        abort();
    op->f = f;
    op->kind = kind;
    op->cb = cb;
    op->arg = arg;
    return op;
}

static int injected(struct faulty *f)
{
    return f->ctl->err ? f->ctl->err : SK_ERR_IO;
}

/* Operation number n of a kind falls in the injected run [at, at + count). */
static bool hit(int n, int at, int count)
{
    if (at <= 0 || n < at)
        return false;
    return count < 0 || n < at + (count ? count : 1);
}

static int fy_list(wal_storage *s, uint64_t **starts, size_t *n)
{
    struct faulty *f = s->impl;
    return f->inner->ops->list(f->inner, starts, n);
}

static int fy_size(wal_storage *s, uint64_t seg, uint64_t *size)
{
    struct faulty *f = s->impl;
    return f->inner->ops->size(f->inner, seg, size);
}

static int fy_pread(wal_storage *s, uint64_t seg, uint64_t off, void *buf, size_t len,
                    size_t *got)
{
    struct faulty *f = s->impl;
    return f->inner->ops->pread(f->inner, seg, off, buf, len, got);
}

static int fy_truncate(wal_storage *s, uint64_t seg, uint64_t size)
{
    struct faulty *f = s->impl;
    return f->inner->ops->truncate(f->inner, seg, size);
}

static void fy_create(wal_storage *s, uint64_t seg, uint64_t hint, wal_io_cb cb, void *arg)
{
    struct faulty *f = s->impl;
    struct fop *op = fop_new(f, OP_CREATE, cb, arg);
    if (hit(++f->ctl->creates, f->ctl->fail_create_at, f->ctl->fail_create_n)) {
        op->err = injected(f);
        fop_complete(op, 0, true);
        return;
    }
    f->inner->ops->create(f->inner, seg, hint, inner_done, op);
}

static void fy_write(wal_storage *s, uint64_t seg, uint64_t off, const struct iovec *iov,
                     int iovcnt, bool sync, wal_io_cb cb, void *arg)
{
    struct faulty *f = s->impl;
    wal_faulty_ctl *c = f->ctl;
    struct fop *op = fop_new(f, OP_WRITE, cb, arg);
    int n = ++c->writes;
    uint64_t len = 0;
    for (int i = 0; i < iovcnt; i++)
        len += iov[i].iov_len;
    if (n <= WAL_FAULTY_MAX_WRITES) {
        c->write_len[n - 1] = len;
        c->write_seg[n - 1] = seg;
    }
    if (hit(n, c->fail_write_at, c->fail_write_n)) {
        op->err = injected(f);
        fop_complete(op, 0, true);
        return;
    }
    if (n == c->fail_sync_at) {
        op->err = injected(f);
        f->inner->ops->write(f->inner, seg, off, iov, iovcnt, false, inner_done, op);
        return;
    }
    if (n == c->short_write_at) {
        op->err = injected(f);
        struct iovec part[64];
        int pc = 0;
        size_t left = c->short_write_bytes;
        for (int i = 0; i < iovcnt && pc < 64 && left > 0; i++) {
            size_t take = iov[i].iov_len < left ? iov[i].iov_len : left;
            part[pc].iov_base = iov[i].iov_base;
            part[pc++].iov_len = take;
            left -= take;
        }
        f->inner->ops->write(f->inner, seg, off, part, pc, true, inner_done, op);
        return;
    }
    f->inner->ops->write(f->inner, seg, off, iov, iovcnt, sync, inner_done, op);
}

static void fy_remove(wal_storage *s, uint64_t seg, wal_io_cb cb, void *arg)
{
    struct faulty *f = s->impl;
    struct fop *op = fop_new(f, OP_REMOVE, cb, arg);
    if (++f->ctl->removes == f->ctl->fail_remove_at) {
        op->err = injected(f);
        fop_complete(op, 0, true);
        return;
    }
    f->inner->ops->remove(f->inner, seg, inner_done, op);
}

static void fy_sole_owner(wal_storage *s, bool direct_io)
{
    struct faulty *f = s->impl;
    if (f->inner->ops->sole_owner)
        f->inner->ops->sole_owner(f->inner, direct_io);
}

static int fy_purge(wal_storage *s)
{
    struct faulty *f = s->impl;
    return f->inner->ops->purge ? f->inner->ops->purge(f->inner) : 0;
}

static int fy_discard(wal_storage *s, uint64_t seg)
{
    struct faulty *f = s->impl;
    return f->inner->ops->discard(f->inner, seg);
}

static int fy_owner_list(wal_storage *s, uint64_t **epochs, size_t *n)
{
    struct faulty *f = s->impl;
    return f->inner->ops->owner_list(f->inner, epochs, n);
}

static int fy_owner_read(wal_storage *s, uint64_t epoch, void *buf, size_t cap, size_t *got)
{
    struct faulty *f = s->impl;
    return f->inner->ops->owner_read(f->inner, epoch, buf, cap, got);
}

static int fy_owner_create(wal_storage *s, uint64_t epoch, const void *buf, size_t len)
{
    struct faulty *f = s->impl;
    return f->inner->ops->owner_create(f->inner, epoch, buf, len);
}

static int fy_owner_put(wal_storage *s, uint64_t epoch, const void *buf, size_t len)
{
    struct faulty *f = s->impl;
    return f->inner->ops->owner_put(f->inner, epoch, buf, len);
}

static int fy_owner_remove(wal_storage *s, uint64_t epoch)
{
    struct faulty *f = s->impl;
    return f->inner->ops->owner_remove(f->inner, epoch);
}

static void fy_renew(wal_storage *s, uint64_t epoch, const void *buf, size_t len, wal_io_cb cb,
                     void *arg)
{
    struct faulty *f = s->impl;
    wal_faulty_ctl *c = f->ctl;
    struct fop *op = fop_new(f, OP_RENEW, cb, arg);
    if (hit(++c->renews, c->fail_renew_at, c->fail_renew_n)) {
        op->err = c->renew_err ? c->renew_err : SK_ERR_TIMEOUT;
        fop_complete(op, 0, true);
        return;
    }
    f->inner->ops->renew(f->inner, epoch, buf, len, inner_done, op);
}

static int fy_lock(wal_storage *s, bool *exclusive)
{
    struct faulty *f = s->impl;
    if (f->ctl->no_lock) {
        *exclusive = false;
        return 0;
    }
    return f->inner->ops->lock(f->inner, exclusive);
}

static void fy_destroy(wal_storage *s)
{
    struct faulty *f = s->impl;
    f->destroying = true;
    f->inner->ops->destroy(f->inner);
    while (f->held) {
        struct fop *op = f->held;
        f->held = op->next;
        fop_fire(op);
    }
    while (f->scheduled) {
        struct fop *op = f->scheduled;
        f->scheduled = op->next;
        event_free(op->ev);
        fop_fire(op);
    }
    free(f);
}

static int fy_max_writes(wal_storage *s)
{
    struct faulty *f = s->impl;
    if (f->ctl->max_writes)
        return f->ctl->max_writes;
    return f->inner->ops->max_writes ? f->inner->ops->max_writes(f->inner) : 1;
}

static const wal_storage_ops faulty_ops = {
    .name = "faulty",
    .list = fy_list,
    .size = fy_size,
    .pread = fy_pread,
    .truncate = fy_truncate,
    .create = fy_create,
    .write = fy_write,
    .remove = fy_remove,
    .discard = fy_discard,
    .purge = fy_purge,
    .sole_owner = fy_sole_owner,
    .owner_list = fy_owner_list,
    .owner_read = fy_owner_read,
    .owner_create = fy_owner_create,
    .owner_put = fy_owner_put,
    .owner_remove = fy_owner_remove,
    .renew = fy_renew,
    .lock = fy_lock,
    .max_writes = fy_max_writes,
    .destroy = fy_destroy,
};

wal_storage *wal_faulty_new(struct event_base *base, wal_storage *inner, wal_faulty_ctl *ctl)
{
    struct faulty *f = calloc(1, sizeof *f);
    if (!f)
        return NULL;
    f->inner = inner;
    f->evb = base;
    f->ctl = ctl;
    f->base.ops = &faulty_ops;
    f->base.impl = f;
    return &f->base;
}

static struct fop *held_at(struct faulty *f, int i)
{
    struct fop *op = f->held;
    while (op && i-- > 0)
        op = op->next;
    return op;
}

int wal_faulty_held(wal_storage *s)
{
    struct faulty *f = s->impl;
    int n = 0;
    for (struct fop *op = f->held; op; op = op->next)
        n++;
    return n;
}

const char *wal_faulty_held_kind(wal_storage *s, int i)
{
    struct fop *op = held_at(s->impl, i);
    return op ? op_kinds[op->kind] : NULL;
}

void wal_faulty_release(wal_storage *s, int i)
{
    struct faulty *f = s->impl;
    struct fop *op = held_at(f, i);
    if (!op)
        return;
    fop_unlink(&f->held, op);
    fop_schedule(op, 0);
}

void wal_faulty_release_all(wal_storage *s)
{
    while (wal_faulty_held(s) > 0)
        wal_faulty_release(s, 0);
}
