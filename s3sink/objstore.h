/*
 * objstore: the object store under s3sink (S3, or a local directory).
 *
 * One API, two backends, chosen by the URL in the broker property
 * `objects.url` (docs/objects.md has the full syntax):
 *   file:///abs/dir, file://rel/dir       a directory (the embedded default)
 *   s3://bucket[/prefix]?region=R[&endpoint=URL][&path-style=true]
 * Keys are relative to the URL's root (its prefix or directory). A key is
 * 1..1024 bytes, no control characters, '/'-separated components that are
 * neither empty nor start with '.'; objstore applies the same rule to both
 * backends so that a key valid for one is valid for the other.
 *
 * Operations: put (a whole object from an iovec; S3 uses a multipart upload
 * above opts.part_size and aborts it on failure), get (a byte range, or to
 * the end), head (size and modification time), delete, list (one page of
 * keys by prefix; pass the returned token back for the next page).
 *
 * Threads:
 *  - objstore_open/destroy: the loop thread of `base`.
 *  - Asynchronous calls (objstore_put, _get, _head, _delete, _list): the
 *    loop thread. Their callback runs later on the loop thread, never inside
 *    the call, exactly once, also for invalid arguments.
 *  - Blocking calls (*_sync): any thread but the loop thread (they wait for
 *    the backend and must not stall the loop); they need no running loop.
 *  - objstore_stats_get, objstore_last_error, objstore_inject: any thread.
 *  The S3 backend runs libcurl's multi interface on a thread of its own; the
 *  file backend runs operations on an sk_workq. The loop never blocks on
 *  either.
 *
 * Ownership: put borrows the iov buffers until its callback runs (the iov
 * array only during the call). get writes into the caller's buffer when one
 * is given; with buf == NULL it allocates, and the callback owns `data`
 * and free()s it. On error `data` is NULL. Keys, prefixes and tokens are
 * copied during the call. Everything handed to a callback other than a get
 * buffer is valid only during the callback.
 *
 * Errors (negative sk_err): SK_ERR_NOENT missing key (get, head; delete of
 * a missing key succeeds), SK_ERR_INVAL bad key or argument, SK_ERR_IO a
 * refused request (HTTP 4xx such as 403) or one still failing after the
 * retries, SK_ERR_TIMEOUT when the last attempt timed out, SK_ERR_NOMEM,
 * SK_ERR_CLOSED for operations cut short by objstore_destroy. S3 failures are
 * logged with the HTTP status and S3 error code; objstore_last_error keeps
 * the last one for callers and tests.
 *
 * Retries (S3): HTTP 5xx, 503 SlowDown, 429, 400 RequestTimeout, connection
 * errors and timeouts are retried up to opts.max_attempts in total, after a
 * delay drawn uniformly from [0, min(backoff_max, backoff_base * 2^n))
 * ("full jitter"). Each attempt has its own timeout. At most
 * opts.max_inflight requests are in flight; the others wait in the backend.
 */
#ifndef OBJSTORE_H
#define OBJSTORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct event_base;

typedef struct objstore objstore;

typedef struct objstore_opts {
    size_t part_size;       /* multipart above this (S3: >= 5 MiB on AWS); default 8 MiB */
    int max_inflight;       /* requests in flight at once; default 16 (file: threads, max 16) */
    int max_attempts;       /* attempts per request, the first included; default 5 */
    int backoff_base_ms;    /* default 50 */
    int backoff_max_ms;     /* default 5000 */
    int request_timeout_ms; /* one attempt, connection included; default 30000 */
    int connect_timeout_ms; /* default 5000 */
    /* Credentials. NULL: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY /
     * AWS_SESSION_TOKEN from the environment, else EC2 instance metadata. */
    const char *access_key;
    const char *secret_key;
    const char *session_token;
    const char *imds_url;   /* instance metadata base; default http://169.254.169.254 */
    int creds_refresh_margin_s; /* refresh IMDS credentials this long before expiry; 300 */
    bool sign_payload;      /* x-amz-content-sha256 = SHA-256 of the body, not UNSIGNED-PAYLOAD */
} objstore_opts;

void objstore_opts_default(objstore_opts *o);

/* Opens the store of `url`. opts may be NULL (defaults); it is copied.
 * On failure returns NULL and writes the reason into why. */
objstore *objstore_open(struct event_base *base, const char *url, const objstore_opts *opts,
                        char *why, size_t whylen);
/* Operations not finished yet complete with SK_ERR_CLOSED (a file
 * operation already running completes normally); their callbacks run before
 * this returns. An interrupted multipart upload is left for the bucket's
 * lifecycle rule (docs/objects.md). No blocking call may be in progress. */
void objstore_destroy(objstore *s);
/* Checks `url` as objstore_open would parse it (scheme, bucket, prefix,
 * region, endpoint), without touching the store: any thread. 0 or
 * SK_ERR_INVAL with the reason in why. */
int objstore_check_url(const char *url, char *why, size_t whylen);
/* "file" or "s3". */
const char *objstore_kind(const objstore *s);

/* ---- asynchronous operations (loop thread) ---- */

typedef void (*objstore_done_cb)(void *arg, int err);
/* data: the bytes read (the caller's buf, or an allocation the callback
 * owns); len: how many; obj_size: the whole object's size when known, else 0. */
typedef void (*objstore_get_cb)(void *arg, int err, uint8_t *data, size_t len, uint64_t obj_size);
typedef void (*objstore_head_cb)(void *arg, int err, uint64_t size, int64_t mtime_ms);

typedef struct objstore_entry {
    char *key;        /* relative to the store's root */
    uint64_t size;
    int64_t mtime_ms; /* last modified, Unix ms */
} objstore_entry;

typedef struct objstore_list_page {
    objstore_entry *entries; /* ascending by key (bytewise) */
    size_t n;
    char *next_token;        /* NULL on the last page */
} objstore_list_page;
typedef void (*objstore_list_cb)(void *arg, int err, const objstore_list_page *page);

/* Length that means "to the end of the object". */
#define OBJSTORE_TO_END SIZE_MAX

void objstore_put(objstore *s, const char *key, const struct iovec *iov, int iovcnt,
                  objstore_done_cb cb, void *arg);
/* Bytes [off, off+len) of key; a range that passes the end is cut there, and
 * one that starts at or after the end reads 0 bytes (err 0). buf: len bytes
 * of the caller's, or NULL to have the store allocate. */
void objstore_get(objstore *s, const char *key, uint64_t off, size_t len, void *buf,
                  objstore_get_cb cb, void *arg);
/* As objstore_get, into the caller's buffers iov[0..iovcnt) in turn (one
 * ranged GET filling several buffers, for the block cache's merged reads):
 * cb's data is NULL and len the bytes read. crcs: NULL, or iovcnt entries of
 * the caller's (valid until cb) that get the CRC-32C of the bytes written
 * into each buffer, computed by the store's thread as it writes them (while
 * they are in the CPU's cache: a check after the callback would read them
 * from memory again). */
void objstore_getv(objstore *s, const char *key, uint64_t off, const struct iovec *iov,
                   int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg);
/* As objstore_getv, with buffers padded for direct reads: the caller owns,
 * around each iov[i] whose first byte is byte o of the object, the whole
 * OBJSTORE_PAD-aligned span [iov_base - o % OBJSTORE_PAD, that +
 * roundup(o % OBJSTORE_PAD + iov_len, OBJSTORE_PAD)), and the store may write
 * anything into it outside the buffer too. A store that reads with O_DIRECT
 * (the file backend) then reads each buffer's blocks in place, without
 * copying them through a buffer of its own. */
#define OBJSTORE_PAD 4096u
void objstore_getv_padded(objstore *s, const char *key, uint64_t off, const struct iovec *iov,
                          int iovcnt, uint32_t *crcs, objstore_get_cb cb, void *arg);
void objstore_head(objstore *s, const char *key, objstore_head_cb cb, void *arg);
void objstore_delete(objstore *s, const char *key, objstore_done_cb cb, void *arg);
/* One page of at most max_keys (1..1000; 0 means 1000) keys starting with
 * prefix ("" for all), after `token` (NULL for the first page). */
void objstore_list(objstore *s, const char *prefix, const char *token, int max_keys,
                   objstore_list_cb cb, void *arg);

/* ---- blocking operations (any thread but the loop thread) ---- */

int objstore_put_sync(objstore *s, const char *key, const struct iovec *iov, int iovcnt);
/* Several puts in flight together (within opts.max_inflight requests), each as
 * objstore_put_sync; returns once all are done: 0, or the first failure in
 * the order given. errs (n entries, or NULL) gets each put's result. */
typedef struct objstore_put_req {
    const char *key;
    const struct iovec *iov;
    int iovcnt;
} objstore_put_req;
int objstore_put_many_sync(objstore *s, const objstore_put_req *reqs, size_t n, int *errs)
    __attribute__((warn_unused_result));
/* The same in two steps, so that the thread can work while the puts go:
 * start returns once every put is started (NULL, with none started, when
 * it cannot allocate), wait as objstore_put_many_sync returns and frees the
 * handle. reqs is read during start only; the iov buffers stay borrowed
 * until wait returns, which every started handle must get. */
typedef struct objstore_puts objstore_puts;
objstore_puts *objstore_put_many_start(objstore *s, const objstore_put_req *reqs, size_t n);
int objstore_put_many_wait(objstore_puts *p, int *errs) __attribute__((warn_unused_result));
/* As objstore_get; *data is buf or an allocation the caller frees. */
int objstore_get_sync(objstore *s, const char *key, uint64_t off, size_t len, void *buf,
                      uint8_t **data, size_t *got, uint64_t *obj_size);
int objstore_head_sync(objstore *s, const char *key, uint64_t *size, int64_t *mtime_ms);
int objstore_delete_sync(objstore *s, const char *key);
/* Fills *page; release it with objstore_list_page_free. */
int objstore_list_sync(objstore *s, const char *prefix, const char *token, int max_keys,
                       objstore_list_page *page);
void objstore_list_page_free(objstore_list_page *page);

/* ---- observability and tests ---- */

typedef struct objstore_stats {
    uint64_t requests;     /* attempts sent (HTTP requests; file operations) */
    uint64_t ops_ok, ops_failed;
    uint64_t bytes_up, bytes_down;
    uint64_t retries;
    uint64_t err_5xx, err_throttle, err_4xx, err_conn, err_timeout, err_notfound;
    uint64_t multipart, parts, aborts;
    uint64_t injected;     /* attempts failed by objstore_inject */
    uint64_t creds_refreshes;
    int64_t inflight, inflight_peak, queued;
} objstore_stats;
void objstore_stats_get(objstore *s, objstore_stats *out);

/* "GET key: HTTP 403 SignatureDoesNotMatch: <message>", or "" when none yet. */
void objstore_last_error(objstore *s, char *buf, size_t len);

typedef enum objstore_fault {
    OBJSTORE_FAULT_NONE = 0,
    OBJSTORE_FAULT_500,     /* HTTP 500 InternalError (retried) */
    OBJSTORE_FAULT_503,     /* HTTP 503 SlowDown (retried) */
    OBJSTORE_FAULT_TIMEOUT, /* the attempt timed out (retried) */
    OBJSTORE_FAULT_CONNECT, /* connection refused (retried) */
    OBJSTORE_FAULT_403,     /* HTTP 403 AccessDenied (not retried) */
} objstore_fault;
/* Test hook: after letting `skip` attempts through, the next `count`
 * attempts fail with `fault` without reaching the store. The file backend
 * counts an attempt per operation and per part of a multipart put, and
 * never retries (every injected fault fails its operation with SK_ERR_IO,
 * or SK_ERR_TIMEOUT for OBJSTORE_FAULT_TIMEOUT). */
void objstore_inject(objstore *s, objstore_fault fault, int skip, int count);

#endif
