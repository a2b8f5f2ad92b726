/*
 * objstore_impl: what the objstore front end (objstore.c) shares with its
 * backends (objstore_file.c, objstore_s3.c). Not for use outside s3sink.
 *
 * An operation is an os_op, built by the front end on the caller's thread
 * and handed to the backend's submit. The backend fills the result fields
 * and finishes it with os_op_complete (any thread), which wakes a blocking
 * caller or posts the callback to the loop thread's mailbox; a backend that
 * is already on the loop thread may call os_op_deliver itself.
 */
#ifndef OBJSTORE_IMPL_H
#define OBJSTORE_IMPL_H

#include <pthread.h>
#include <stdatomic.h>

#include "objstore.h"

struct sk_mailbox;

enum os_kind { OS_PUT, OS_GET, OS_HEAD, OS_DELETE, OS_LIST };

typedef union os_cb {
    objstore_done_cb done;
    objstore_get_cb get;
    objstore_head_cb head;
    objstore_list_cb list;
} os_cb;

/* A position in an iovec (os_iov_copy, os_iov_fill). */
struct os_iov_pos {
    int idx;
    uint64_t base; /* stream offset of iov[idx] */
};

struct os_op {
    objstore *s;
    enum os_kind kind;
    char *key;             /* relative key; for OS_LIST the prefix */
    /* put, and a scattered get: a private copy of the iov array; buffers
     * borrowed */
    struct iovec *iov;
    int iovcnt;
    uint64_t total;
    /* get */
    uint64_t off;
    size_t len;            /* OBJSTORE_TO_END for the rest */
    uint8_t *buf;          /* caller's buffer, or allocated by the backend */
    bool own_buf;          /* buf was allocated by the backend */
    bool scatter;          /* into iov (objstore_getv), not buf */
    struct os_iov_pos at;  /* scatter: where the last bytes went */
    uint32_t *crcs;        /* scatter: the caller's, one per buffer, or NULL */
    bool padded;           /* scatter: objstore_getv_padded's buffers */
    /* list */
    char *token;
    int max_keys;
    /* results */
    int err;
    size_t got;
    uint64_t obj_size;
    int64_t mtime_ms;
    objstore_list_page page;
    /* completion */
    os_cb cb;
    void *arg;
    bool sync;
    bool finished;         /* sync: guarded by s->sync_mu */
    struct os_op *next;    /* for backends' queues */
};

struct objstore_backend {
    const char *name;
    /* Takes the op; completes it later (never inside submit for async ops). */
    void (*submit)(objstore *s, struct os_op *op);
    /* Stops: every op not finished completes with SK_ERR_CLOSED. */
    void (*shutdown)(objstore *s);
    void (*free_impl)(objstore *s);
};

struct objstore {
    const struct objstore_backend *be;
    void *impl;
    struct event_base *base;
    struct sk_mailbox *mbox;
    objstore_opts opts;    /* strings owned (copies) */
    pthread_mutex_t sync_mu;
    pthread_cond_t sync_cv;
    /* stats */
    atomic_uint_fast64_t st_requests, st_ok, st_failed, st_up, st_down, st_retries;
    atomic_uint_fast64_t st_5xx, st_throttle, st_4xx, st_conn, st_timeout, st_notfound;
    atomic_uint_fast64_t st_multipart, st_parts, st_aborts, st_injected, st_creds;
    atomic_int_fast64_t st_inflight, st_peak, st_queued;
    /* fault injection */
    pthread_mutex_t fault_mu;
    objstore_fault fault;
    int fault_skip, fault_count;
    /* last error text */
    pthread_mutex_t err_mu;
    char last_err[512];
};

/* Finishes op from any thread. */
void os_op_complete(struct os_op *op);
/* Runs op's callback and frees it (loop thread, async ops only). */
void os_op_deliver(void *op);

/* The fault for the attempt about to start, or OBJSTORE_FAULT_NONE. */
objstore_fault os_fault_take(objstore *s);
void os_set_last_error(objstore *s, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void os_inflight_add(objstore *s, int d);

/* Key rule of objstore.h; prefix=true allows "" and a trailing '/'. */
bool os_key_valid(const char *key, bool prefix);

/* Copies n bytes from position off of the iovec into dst; *hint caches the
 * last position for sequential calls (start it at {0, 0}). */
void os_iov_copy(const struct iovec *iov, int iovcnt, uint64_t off, void *dst, size_t n,
                 struct os_iov_pos *hint);
/* The other way: n bytes of src into the iovec from position off; with
 * crcs (one per buffer), each buffer's running CRC-32C is extended over the
 * bytes it gets, a piece at a time right after its copy. */
void os_iov_fill(const struct iovec *iov, int iovcnt, uint64_t off, const void *src, size_t n,
                 struct os_iov_pos *hint, uint32_t *crcs);
/* A scattered get's bytes, n at dst of iov[idx], read there directly: the
 * buffer's CRC extended over them (when the get asked for CRCs). */
void os_get_read_into(struct os_op *op, int idx, const void *dst, size_t n);
/* A scattered get starts (again) from its first byte: CRCs back to 0. */
void os_get_restart(struct os_op *op);

/* Backends. */
int os_file_open(objstore *s, const char *dir, char *why, size_t whylen);
int os_s3_open(objstore *s, const char *url, char *why, size_t whylen);
int os_s3_check_url(const char *url, char *why, size_t whylen);

#endif
