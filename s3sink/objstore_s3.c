/*
 * s3:// backend of objstore: libcurl's multi interface on a thread of its own.
 *
 * Callers hand operations (os_op) over through a locked list and a
 * curl_multi_wakeup; everything else (requests, retries, multipart state,
 * credentials) belongs to the S3 thread, so none of it needs a lock.
 * Completions leave through os_op_complete (the loop's mailbox, or the
 * waiting thread of a blocking call).
 *
 * An operation becomes one or more requests (struct rq): one for get, head,
 * delete, list and small puts; initiate + parts + complete (or abort) for a
 * multipart put. Requests wait in two queues, "fast" (get, head, list) and
 * "bulk" (uploads, deletes), served alternately when both have work, so that
 * a read never waits behind a whole multipart upload; at most
 * opts.max_inflight are in flight. A failed attempt that may succeed later
 * goes to the delayed list, sorted by due time, and back to the front of
 * its queue when due.
 *
 * Signing is libcurl's CURLOPT_AWS_SIGV4 ("aws:amz:REGION:s3"), which needs
 * from us (docs/objects.md): the x-amz-content-sha256 header, a query string
 * already sorted and RFC 3986-encoded, "uploads=" with its '=', and no
 * header-removal entries.
 */
#include <curl/curl.h>
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "objstore_impl.h"
#include "s3_util.h"
#include "sk_err.h"
#include "sk_log.h"
#include "sk_time.h"

enum rq_kind { RQ_GET, RQ_HEAD, RQ_DELETE, RQ_LIST, RQ_PUT, RQ_INIT, RQ_PART, RQ_COMPLETE, RQ_ABORT };

static const char *const rq_names[] = {"GET",  "HEAD",  "DELETE",         "LIST",
                                        "PUT", "INITIATE-MULTIPART", "UPLOAD-PART",
                                        "COMPLETE-MULTIPART", "ABORT-MULTIPART"};

struct mpu;

struct rq {
    struct s3 *s3;
    struct os_op *op;
    struct mpu *mpu;
    enum rq_kind kind;
    char *url;
    int part_no;
    /* body: a slice of the op's iovec, or memory */
    uint64_t body_off, body_len;
    char *mem;
    size_t mem_len;
    uint64_t sent;
    struct os_iov_pos pos;
    char sha[65];
    /* range of a get */
    uint64_t r_off;
    size_t r_len; /* OBJSTORE_TO_END for open-ended */
    /* response */
    bool sink_init;
    uint64_t skip;
    size_t dst_len, dst_cap;
    char *resp; /* the answer's body (XML, errors) */
    size_t resp_len, resp_cap;
    char etag[128];
    uint64_t clen;
    int64_t mtime_ms;
    uint64_t range_total;
    bool has_range_total;
    /* attempts */
    int attempt;
    int64_t due_us;
    CURL *easy;
    struct curl_slist *hdrs;
    int err;
    long status;
    struct rq *next;         /* queue or delayed list */
    struct rq *all_prev, *all_next;
};

struct mpu {
    struct os_op *op;
    char *upload_id;
    int nparts, outstanding;
    char (*etags)[128];
    int err;
    bool failed, closed;
    int refs; /* requests pointing here */
};

struct rqq {
    struct rq *head, *tail;
};

struct s3 {
    objstore *s;
    char *bucket, *prefix, *region, *base_url;
    char sigv4[128];
    char *noproxy;
    CURLM *multi;
    pthread_t thread;
    bool thread_started;
    /* shared with callers: guarded by mu */
    pthread_mutex_t mu;
    struct os_op *in_head, *in_tail;
    bool stopping;
    /* S3-thread only */
    struct rqq fast, bulk;
    bool bulk_turn;
    struct rq *delayed;
    struct rq *all;
    int inflight;
    CURL **pool;
    int npool;
    /* credentials */
    bool creds_static;
    s3_creds creds;
    int64_t creds_next_try_ms;
    bool creds_force;
    unsigned rand_state;
};

static struct s3 *S(objstore *s)
{
    return s->impl;
}

/* ---- small helpers ---- */

static uint32_t rnd(struct s3 *s3)
{
    /* xorshift: jitter needs spread, not secrecy */
    unsigned x = s3->rand_state;
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    s3->rand_state = x;
    return x;
}

static void sha256_hex(const void *p, size_t n, char out[65])
{
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_Digest(p, n, md, &mdlen, EVP_sha256(), NULL);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

static void sha256_iov_hex(const struct iovec *iov, int iovcnt, uint64_t off, uint64_t len,
                           char out[65])
{
    EVP_MD_CTX *c = EVP_MD_CTX_new();
    EVP_DigestInit_ex(c, EVP_sha256(), NULL);
    uint64_t base = 0;
    for (int i = 0; i < iovcnt && len > 0; i++) {
        uint64_t end = base + iov[i].iov_len;
        if (end > off) {
            uint64_t in = off > base ? off - base : 0;
            uint64_t take = iov[i].iov_len - in;
            if (take > len)
                take = len;
            EVP_DigestUpdate(c, (const uint8_t *)iov[i].iov_base + in, (size_t)take);
            len -= take;
            off += take;
        }
        base = end;
    }
    unsigned char md[32];
    unsigned int mdlen = 0;
    EVP_DigestFinal_ex(c, md, &mdlen);
    EVP_MD_CTX_free(c);
    for (int i = 0; i < 32; i++)
        sprintf(out + 2 * i, "%02x", md[i]);
}

static void rqq_push(struct rqq *q, struct rq *r, bool front)
{
    r->next = NULL;
    if (!q->head) {
        q->head = q->tail = r;
    } else if (front) {
        r->next = q->head;
        q->head = r;
    } else {
        q->tail->next = r;
        q->tail = r;
    }
}

static struct rq *rqq_pop(struct rqq *q)
{
    struct rq *r = q->head;
    if (r) {
        q->head = r->next;
        if (!q->head)
            q->tail = NULL;
        r->next = NULL;
    }
    return r;
}

static bool is_fast(enum rq_kind k)
{
    return k == RQ_GET || k == RQ_HEAD || k == RQ_LIST;
}

static void enqueue(struct s3 *s3, struct rq *r, bool front)
{
    rqq_push(is_fast(r->kind) ? &s3->fast : &s3->bulk, r, front);
    atomic_fetch_add(&s3->s->st_queued, 1);
}

/* "<base>/<encoded prefix+key>[?query]"; query is already canonical. */
static char *make_url(struct s3 *s3, const char *key, const char *query)
{
    size_t cap = strlen(s3->base_url) + 3 * (strlen(s3->prefix) + (key ? strlen(key) : 0)) +
                 (query ? strlen(query) : 0) + 8;
    char *u = malloc(cap);
    if (!u)
        return NULL;
    snprintf(u, cap, "%s/", s3->base_url);
    if (key) {
        s3_uri_encode(u, cap, s3->prefix, true);
        s3_uri_encode(u, cap, key, true);
    }
    if (query && *query) {
        strcat(u, "?");
        strcat(u, query);
    }
    return u;
}

static struct rq *rq_new(struct s3 *s3, struct os_op *op, enum rq_kind kind)
{
    struct rq *r = calloc(1, sizeof *r);
    if (!r)
        return NULL;
    r->s3 = s3;
    r->op = op;
    r->kind = kind;
    r->all_next = s3->all;
    if (s3->all)
        s3->all->all_prev = r;
    s3->all = r;
    return r;
}

static void rq_free(struct rq *r)
{
    struct s3 *s3 = r->s3;
    if (r->all_prev)
        r->all_prev->all_next = r->all_next;
    else
        s3->all = r->all_next;
    if (r->all_next)
        r->all_next->all_prev = r->all_prev;
    if (r->mpu && --r->mpu->refs == 0) {
        free(r->mpu->upload_id);
        free(r->mpu->etags);
        free(r->mpu);
    }
    curl_slist_free_all(r->hdrs);
    free(r->url);
    free(r->mem);
    free(r->resp);
    free(r);
}

/* ---- credentials ---- */

static int creds_ensure(struct s3 *s3, char *why, size_t whylen)
{
    if (s3->creds_static)
        return 0;
    int64_t now = sk_now_ms();
    int64_t margin = (int64_t)s3->s->opts.creds_refresh_margin_s * 1000;
    bool have = s3->creds.access_key[0] && (s3->creds.expires_ms == 0 || now < s3->creds.expires_ms);
    bool fresh = have && !s3->creds_force &&
                 (s3->creds.expires_ms == 0 || now < s3->creds.expires_ms - margin);
    if (fresh)
        return 0;
    if (now < s3->creds_next_try_ms) {
        if (have)
            return 0;
        snprintf(why, whylen, "no credentials (instance metadata unavailable)");
        return SK_ERR_IO;
    }
    const char *base = s3->s->opts.imds_url ? s3->s->opts.imds_url : "http://169.254.169.254";
    s3_creds c;
    char reason[256] = "";
    int rc = s3_imds_fetch(base, &c, reason, sizeof reason);
    s3->creds_force = false;
    if (rc != 0) {
        s3->creds_next_try_ms = now + 1000;
        SK_WARN("s3", "credentials from instance metadata: %s", reason);
        if (have)
            return 0;
        snprintf(why, whylen, "no credentials: %s", reason);
        return SK_ERR_IO;
    }
    s3_creds_clear(&s3->creds);
    s3->creds = c;
    /* Never ask again sooner than a second, even with a short expiry. */
    s3->creds_next_try_ms = now + 1000;
    atomic_fetch_add(&s3->s->st_creds, 1);
    SK_DEBUG("s3", "credentials from instance metadata, expire at %lld",
             (long long)c.expires_ms);
    return 0;
}

/* ---- curl callbacks ---- */

static size_t on_read(char *buf, size_t sz, size_t nm, void *ud)
{
    struct rq *r = ud;
    size_t want = sz * nm;
    uint64_t total = r->mem ? r->mem_len : r->body_len;
    uint64_t left = total - r->sent;
    if (want > left)
        want = (size_t)left;
    if (want == 0)
        return 0;
    if (r->mem)
        memcpy(buf, r->mem + r->sent, want);
    else
        os_iov_copy(r->op->iov, r->op->iovcnt, r->body_off + r->sent, buf, want, &r->pos);
    r->sent += want;
    return want;
}

static int on_seek(void *ud, curl_off_t off, int origin)
{
    struct rq *r = ud;
    uint64_t total = r->mem ? r->mem_len : r->body_len;
    if (origin != SEEK_SET || off < 0 || (uint64_t)off > total)
        return CURL_SEEKFUNC_CANTSEEK;
    r->sent = (uint64_t)off;
    return CURL_SEEKFUNC_OK;
}

static bool body_append(struct rq *r, const char *p, size_t n, size_t max)
{
    if (r->resp_len + n > max)
        n = max - r->resp_len; /* longer error documents are cut */
    if (r->resp_len + n + 1 > r->resp_cap) {
        size_t nc = r->resp_cap ? r->resp_cap : 4096;
        while (nc < r->resp_len + n + 1)
            nc *= 2;
        char *nb = realloc(r->resp, nc);
        if (!nb)
            return false;
        r->resp = nb;
        r->resp_cap = nc;
    }
    memcpy(r->resp + r->resp_len, p, n);
    r->resp_len += n;
    r->resp[r->resp_len] = '\0';
    return true;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *ud)
{
    struct rq *r = ud;
    size_t n = sz * nm;
    long status = 0;
    curl_easy_getinfo(r->easy, CURLINFO_RESPONSE_CODE, &status);
    if (r->kind != RQ_GET || status < 200 || status > 299) {
        size_t max = r->kind == RQ_LIST ? (16u << 20) : (64u << 10);
        return body_append(r, p, n, max) ? n : 0;
    }
    struct os_op *op = r->op;
    if (!r->sink_init) {
        r->sink_init = true;
        /* A 200 to a ranged request is the whole object: skip to the range. */
        r->skip = status == 200 ? r->r_off : 0;
        if (status == 200 && !r->has_range_total) {
            curl_off_t cl = -1;
            curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
            if (cl >= 0) {
                r->range_total = (uint64_t)cl;
                r->has_range_total = true;
            }
        }
        if (!op->buf && !op->scatter) {
            size_t want = op->len;
            if (want == OBJSTORE_TO_END) {
                curl_off_t cl = -1;
                curl_easy_getinfo(r->easy, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                want = cl >= 0 ? (size_t)cl : 0;
                if (cl >= 0 && status == 200)
                    want = (uint64_t)cl > r->skip ? (size_t)((uint64_t)cl - r->skip) : 0;
            }
            op->buf = malloc(want ? want : 1);
            if (!op->buf)
                return 0;
            op->own_buf = true;
            r->dst_cap = want;
        } else {
            r->dst_cap = op->len;
        }
    }
    size_t used = n;
    if (r->skip > 0) {
        size_t sk = r->skip < n ? (size_t)r->skip : n;
        r->skip -= sk;
        p += sk;
        n -= sk;
    }
    if (n > 0 && r->dst_len + n > r->dst_cap && op->own_buf && op->len == OBJSTORE_TO_END) {
        /* No usable Content-Length: grow. */
        size_t nc = r->dst_cap ? r->dst_cap : 65536;
        while (nc < r->dst_len + n)
            nc *= 2;
        uint8_t *nb = realloc(op->buf, nc);
        if (!nb)
            return 0;
        op->buf = nb;
        r->dst_cap = nc;
    }
    size_t take = r->dst_len + n > r->dst_cap ? r->dst_cap - r->dst_len : n;
    if (op->scatter)
        os_iov_fill(op->iov, op->iovcnt, r->dst_len, p, take, &op->at, op->crcs);
    else
        memcpy(op->buf + r->dst_len, p, take);
    r->dst_len += take;
    return used;
}

static bool hdr_is(const char *p, size_t n, const char *name)
{
    size_t l = strlen(name);
    return n > l && strncasecmp(p, name, l) == 0 && p[l] == ':';
}

static size_t on_header(char *p, size_t sz, size_t nm, void *ud)
{
    struct rq *r = ud;
    size_t n = sz * nm;
    size_t len = n;
    while (len > 0 && (p[len - 1] == '\r' || p[len - 1] == '\n'))
        len--;
    if (len >= 5 && strncmp(p, "HTTP/", 5) == 0) {
        /* A new response (after a 100 Continue, say) starts afresh. */
        r->etag[0] = '\0';
        r->has_range_total = false;
        r->clen = 0;
        r->mtime_ms = 0;
        return n;
    }
    char val[256];
    const char *colon = memchr(p, ':', len);
    if (colon) {
        const char *v = colon + 1;
        while (v < p + len && *v == ' ')
            v++;
        snprintf(val, sizeof val, "%.*s", (int)(p + len - v), v);
    } else {
        val[0] = '\0';
    }
    if (hdr_is(p, len, "content-length")) {
        r->clen = strtoull(val, NULL, 10);
    } else if (hdr_is(p, len, "last-modified")) {
        time_t t = curl_getdate(val, NULL);
        r->mtime_ms = t > 0 ? (int64_t)t * 1000 : 0;
    }
    if (hdr_is(p, len, "etag")) {
        snprintf(r->etag, sizeof r->etag, "%.*s", (int)sizeof r->etag - 1, val);
    } else if (hdr_is(p, len, "content-range")) {
        const char *slash = memchr(p, '/', len);
        if (slash && slash + 1 < p + len && slash[1] != '*') {
            r->range_total = strtoull(slash + 1, NULL, 10);
            r->has_range_total = true;
        }
    }
    return n;
}

/* ---- attempts ---- */

/* The error document of an injected fault, as S3 would send it. */
static void fake_answer(struct rq *r, const char *code)
{
    char doc[160];
    int n = snprintf(doc, sizeof doc, "<Error><Code>%s</Code><Message>injected</Message></Error>",
                     code);
    r->resp_len = 0;
    body_append(r, doc, (size_t)n, sizeof doc);
}

static void rq_done(struct s3 *s3, struct rq *r);

static CURL *pool_get(struct s3 *s3)
{
    if (s3->npool > 0)
        return s3->pool[--s3->npool];
    return curl_easy_init();
}

static void pool_put(struct s3 *s3, CURL *e)
{
    if (s3->npool < s3->s->opts.max_inflight)
        s3->pool[s3->npool++] = e;
    else
        curl_easy_cleanup(e);
}

static const char *method_of(enum rq_kind k)
{
    switch (k) {
    case RQ_GET:
    case RQ_LIST:
        return "GET";
    case RQ_HEAD:
        return "HEAD";
    case RQ_DELETE:
    case RQ_ABORT:
        return "DELETE";
    case RQ_PUT:
    case RQ_PART:
        return "PUT";
    case RQ_INIT:
    case RQ_COMPLETE:
        return "POST";
    }
    return "GET";
}

static const char *rq_key(const struct rq *r)
{
    return r->op->key;
}

static void attempt_finished(struct s3 *s3, struct rq *r, CURLcode cres, long status,
                             const char *why);

/* Starts one attempt of r; failures that never reach the network finish it
 * at once (the retry logic treats them like any other). */
static void launch(struct s3 *s3, struct rq *r)
{
    objstore *s = s3->s;
    if (r->mpu && r->mpu->failed && r->kind == RQ_PART) {
        /* A sibling part failed: do not send this one. */
        r->err = r->mpu->err;
        rq_done(s3, r);
        return;
    }
    r->attempt++;
    atomic_fetch_add(&s->st_requests, 1);
    if (r->kind == RQ_GET && r->op->own_buf) {
        /* A buffer of an earlier attempt: the next one sizes its own. */
        free(r->op->buf);
        r->op->buf = NULL;
        r->op->own_buf = false;
    }
    objstore_fault f = os_fault_take(s);
    switch (f) {
    case OBJSTORE_FAULT_NONE:
        break;
    case OBJSTORE_FAULT_500:
        fake_answer(r, "InternalError");
        attempt_finished(s3, r, CURLE_OK, 500, NULL);
        return;
    case OBJSTORE_FAULT_503:
        fake_answer(r, "SlowDown");
        attempt_finished(s3, r, CURLE_OK, 503, NULL);
        return;
    case OBJSTORE_FAULT_TIMEOUT:
        attempt_finished(s3, r, CURLE_OPERATION_TIMEDOUT, 0, "injected timeout");
        return;
    case OBJSTORE_FAULT_CONNECT:
        attempt_finished(s3, r, CURLE_COULDNT_CONNECT, 0, "injected connection failure");
        return;
    case OBJSTORE_FAULT_403:
        fake_answer(r, "AccessDenied");
        attempt_finished(s3, r, CURLE_OK, 403, NULL);
        return;
    }
    char why[300];
    if (creds_ensure(s3, why, sizeof why) != 0) {
        attempt_finished(s3, r, CURLE_LOGIN_DENIED, 0, why);
        return;
    }
    CURL *e = pool_get(s3);
    if (!e) {
        attempt_finished(s3, r, CURLE_OUT_OF_MEMORY, 0, "curl_easy_init failed");
        return;
    }
    curl_easy_reset(e);
    r->easy = e;
    r->sent = 0;
    r->pos = (struct os_iov_pos){0, 0};
    r->sink_init = false;
    r->skip = 0;
    r->dst_len = 0;
    if (r->kind == RQ_GET)
        os_get_restart(r->op); /* a retry fills the buffers again */
    r->resp_len = 0;
    r->etag[0] = '\0';
    r->has_range_total = false;
    curl_slist_free_all(r->hdrs);
    r->hdrs = NULL;

    char h[2200];
    snprintf(h, sizeof h, "x-amz-content-sha256: %s", r->sha[0] ? r->sha : "UNSIGNED-PAYLOAD");
    r->hdrs = curl_slist_append(r->hdrs, h);
    if (s3->creds.token) {
        snprintf(h, sizeof h, "x-amz-security-token: %s", s3->creds.token);
        r->hdrs = curl_slist_append(r->hdrs, h);
    }
    const char *method = method_of(r->kind);
    switch (r->kind) {
    case RQ_GET:
        if (r->r_off > 0 || r->r_len != OBJSTORE_TO_END) {
            char range[64];
            if (r->r_len == OBJSTORE_TO_END)
                snprintf(range, sizeof range, "%llu-", (unsigned long long)r->r_off);
            else
                snprintf(range, sizeof range, "%llu-%llu", (unsigned long long)r->r_off,
                         (unsigned long long)(r->r_off + r->r_len - 1));
            curl_easy_setopt(e, CURLOPT_RANGE, range);
        }
        curl_easy_setopt(e, CURLOPT_BUFFERSIZE, 256L * 1024);
        break;
    case RQ_LIST:
        break;
    case RQ_HEAD:
        curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
        break;
    case RQ_DELETE:
    case RQ_ABORT:
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "DELETE");
        break;
    case RQ_PUT:
    case RQ_PART:
        curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);
        curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, (curl_off_t)r->body_len);
        curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
        curl_easy_setopt(e, CURLOPT_READDATA, r);
        curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
        curl_easy_setopt(e, CURLOPT_SEEKDATA, r);
        curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE, 256L * 1024);
        r->hdrs = curl_slist_append(r->hdrs, "Content-Type: application/octet-stream");
        break;
    case RQ_INIT:
    case RQ_COMPLETE:
        curl_easy_setopt(e, CURLOPT_POST, 1L);
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, r->mem ? r->mem : "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)r->mem_len);
        r->hdrs = curl_slist_append(r->hdrs, r->kind == RQ_COMPLETE
                                                 ? "Content-Type: application/xml"
                                                 : "Content-Type: application/octet-stream");
        break;
    }
    curl_easy_setopt(e, CURLOPT_URL, r->url);
    curl_easy_setopt(e, CURLOPT_PRIVATE, r);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, r);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, r);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, (long)s->opts.request_timeout_ms);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, (long)s->opts.connect_timeout_ms);
    curl_easy_setopt(e, CURLOPT_AWS_SIGV4, s3->sigv4);
    curl_easy_setopt(e, CURLOPT_USERNAME, s3->creds.access_key);
    curl_easy_setopt(e, CURLOPT_PASSWORD, s3->creds.secret_key);
    /* A proxy from the environment is honoured, never for loopback. */
    curl_easy_setopt(e, CURLOPT_NOPROXY, s3->noproxy);
    (void)method;
    if (curl_multi_add_handle(s3->multi, e) != CURLM_OK) {
        r->easy = NULL;
        pool_put(s3, e);
        attempt_finished(s3, r, CURLE_FAILED_INIT, 0, "curl_multi_add_handle failed");
        return;
    }
    s3->inflight++;
    os_inflight_add(s, 1);
}

static bool retriable_curl(CURLcode c)
{
    switch (c) {
    case CURLE_OPERATION_TIMEDOUT:
    case CURLE_COULDNT_CONNECT:
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_GOT_NOTHING:
    case CURLE_PARTIAL_FILE:
    case CURLE_SSL_CONNECT_ERROR:
    case CURLE_LOGIN_DENIED: /* our "no credentials yet" */
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
        return true;
    default:
        return false;
    }
}

/* Ends an attempt: success, retry later, or final failure. */
static void attempt_finished(struct s3 *s3, struct rq *r, CURLcode cres, long status,
                             const char *why)
{
    objstore *s = s3->s;
    r->status = status;
    char code[64] = "", msg[256] = "";
    if (r->resp && r->resp_len && (status < 200 || status > 299 || r->kind == RQ_COMPLETE)) {
        s3_xml_get(r->resp, r->resp + r->resp_len, "Code", code, sizeof code);
        s3_xml_get(r->resp, r->resp + r->resp_len, "Message", msg, sizeof msg);
    }
    bool retry = false, timeout = false;
    int err = 0;
    if (cres != CURLE_OK) {
        timeout = cres == CURLE_OPERATION_TIMEDOUT;
        if (timeout)
            atomic_fetch_add(&s->st_timeout, 1);
        else
            atomic_fetch_add(&s->st_conn, 1);
        retry = retriable_curl(cres);
        err = cres == CURLE_OUT_OF_MEMORY ? SK_ERR_NOMEM : timeout ? SK_ERR_TIMEOUT : SK_ERR_IO;
    } else if (status >= 200 && status <= 299) {
        /* CompleteMultipartUpload can fail after its 200 has been sent. */
        if (r->kind == RQ_COMPLETE && code[0]) {
            retry = strcmp(code, "InternalError") == 0 || strcmp(code, "SlowDown") == 0;
            err = SK_ERR_IO;
        }
    } else if (status == 416 && r->kind == RQ_GET) {
        r->dst_len = 0; /* the range starts at or after the end: no bytes */
    } else if (status == 404 && (r->kind == RQ_DELETE || r->kind == RQ_ABORT)) {
        /* already gone */
    } else if (status == 404 && (r->kind == RQ_GET || r->kind == RQ_HEAD)) {
        atomic_fetch_add(&s->st_notfound, 1);
        err = SK_ERR_NOENT;
    } else if (status >= 500 || status == 429) {
        if (status == 503 || status == 429)
            atomic_fetch_add(&s->st_throttle, 1);
        else
            atomic_fetch_add(&s->st_5xx, 1);
        retry = true;
        err = SK_ERR_IO;
    } else {
        atomic_fetch_add(&s->st_4xx, 1);
        err = SK_ERR_IO;
        if (status == 400 && strcmp(code, "RequestTimeout") == 0) {
            retry = true;
        } else if (status == 403 && !s3->creds_static &&
                   (strcmp(code, "ExpiredToken") == 0 || strcmp(code, "InvalidToken") == 0 ||
                    strcmp(code, "TokenRefreshRequired") == 0)) {
            s3->creds_force = true;
            s3->creds_next_try_ms = 0;
            retry = true;
        }
    }
    if (err == 0) {
        if (r->kind == RQ_PUT || r->kind == RQ_PART)
            atomic_fetch_add(&s->st_up, r->body_len);
        if (r->kind == RQ_GET)
            atomic_fetch_add(&s->st_down, r->dst_len);
        r->err = 0;
        rq_done(s3, r);
        return;
    }
    char desc[700];
    if (cres != CURLE_OK)
        snprintf(desc, sizeof desc, "%s", why ? why : curl_easy_strerror(cres));
    else
        snprintf(desc, sizeof desc, "HTTP %ld%s%s%s%s", status, code[0] ? " " : "", code,
                 msg[0] ? ": " : "", msg);
    bool closing;
    pthread_mutex_lock(&s3->mu);
    closing = s3->stopping;
    pthread_mutex_unlock(&s3->mu);
    if (retry && r->attempt < s->opts.max_attempts && !closing) {
        int64_t cap = s->opts.backoff_base_ms;
        for (int i = 1; i < r->attempt && cap < s->opts.backoff_max_ms; i++)
            cap *= 2;
        if (cap > s->opts.backoff_max_ms)
            cap = s->opts.backoff_max_ms;
        int64_t delay_us = cap > 0 ? (int64_t)(rnd(s3) % (uint32_t)(cap * 1000)) : 0;
        r->due_us = sk_mono_us() + delay_us;
        atomic_fetch_add(&s->st_retries, 1);
        SK_DEBUG("s3", "%s %s: %s; retry %d in %lld ms", rq_names[r->kind], rq_key(r), desc,
                 r->attempt, (long long)(delay_us / 1000));
        struct rq **pp = &s3->delayed;
        while (*pp && (*pp)->due_us <= r->due_us)
            pp = &(*pp)->next;
        r->next = *pp;
        *pp = r;
        atomic_fetch_add(&s->st_queued, 1);
        return;
    }
    /* A missing key is an answer, not a failure worth a warning. */
    sk_log(err == SK_ERR_NOENT ? SK_LOG_DEBUG : SK_LOG_WARN, "s3", "%s %s: %s (%d attempt%s)",
           rq_names[r->kind], rq_key(r), desc, r->attempt, r->attempt == 1 ? "" : "s");
    os_set_last_error(s, "%s %s: %s", rq_names[r->kind], rq_key(r), desc);
    r->err = err;
    rq_done(s3, r);
}

/* ---- operations ---- */

static void op_finish(struct s3 *s3, struct os_op *op, int err)
{
    (void)s3;
    op->err = err;
    os_op_complete(op);
}

static int part_count(objstore *s, uint64_t total)
{
    return (int)((total + s->opts.part_size - 1) / s->opts.part_size);
}

static void mpu_next(struct s3 *s3, struct mpu *m, struct rq *from);

static void rq_done(struct s3 *s3, struct rq *r)
{
    struct os_op *op = r->op;
    struct mpu *m = r->mpu;
    switch (r->kind) {
    case RQ_GET:
        op->got = r->dst_len;
        op->obj_size = r->has_range_total ? r->range_total : 0;
        op_finish(s3, op, r->err);
        break;
    case RQ_HEAD:
        op->obj_size = r->clen;
        op->mtime_ms = r->mtime_ms;
        op_finish(s3, op, r->err);
        break;
    case RQ_DELETE:
    case RQ_PUT:
        op_finish(s3, op, r->err);
        break;
    case RQ_LIST: {
        int err = r->err;
        if (err == 0) {
            const char *p = r->resp ? r->resp : "", *end = p + r->resp_len;
            size_t plen = strlen(s3->prefix), cap = 0;
            const char *after;
            size_t len;
            const char *c;
            while ((c = s3_xml_find(p, end, "Contents", &len, &after)) != NULL) {
                const char *ce = c + len;
                size_t kl, sl, ml;
                const char *k = s3_xml_find(c, ce, "Key", &kl, NULL);
                const char *sz = s3_xml_find(c, ce, "Size", &sl, NULL);
                const char *lm = s3_xml_find(c, ce, "LastModified", &ml, NULL);
                p = after;
                if (!k)
                    continue;
                char *key = s3_xml_text(k, kl);
                if (!key) {
                    err = SK_ERR_NOMEM;
                    break;
                }
                if (strncmp(key, s3->prefix, plen) != 0) {
                    free(key);
                    continue;
                }
                if (op->page.n == cap) {
                    cap = cap ? cap * 2 : 64;
                    objstore_entry *ne = realloc(op->page.entries, cap * sizeof *ne);
                    if (!ne) {
                        free(key);
                        err = SK_ERR_NOMEM;
                        break;
                    }
                    op->page.entries = ne;
                }
                objstore_entry *e = &op->page.entries[op->page.n++];
                memmove(key, key + plen, strlen(key + plen) + 1);
                e->key = key;
                e->size = sz ? strtoull(sz, NULL, 10) : 0;
                e->mtime_ms = lm ? s3_parse_iso8601(lm, ml) : 0;
            }
            char trunc[16] = "";
            const char *b = r->resp ? r->resp : "";
            s3_xml_get(b, b + r->resp_len, "IsTruncated", trunc, sizeof trunc);
            if (err == 0 && strcmp(trunc, "true") == 0) {
                size_t tl;
                const char *t = s3_xml_find(b, b + r->resp_len, "NextContinuationToken", &tl, NULL);
                if (t && tl > 0) {
                    op->page.next_token = s3_xml_text(t, tl);
                    if (!op->page.next_token)
                        err = SK_ERR_NOMEM;
                } else {
                    SK_WARN("s3", "LIST %s: truncated without a continuation token", op->key);
                    err = SK_ERR_IO;
                }
            }
        }
        op_finish(s3, op, err);
        break;
    }
    case RQ_INIT:
    case RQ_PART:
    case RQ_COMPLETE:
    case RQ_ABORT:
        mpu_next(s3, m, r);
        break;
    }
    if (r->easy) {
        curl_multi_remove_handle(s3->multi, r->easy);
        pool_put(s3, r->easy);
        r->easy = NULL;
    }
    rq_free(r);
}

static struct rq *mpu_rq(struct s3 *s3, struct mpu *m, enum rq_kind kind)
{
    struct rq *r = rq_new(s3, m->op, kind);
    if (!r)
        return NULL;
    r->mpu = m;
    m->refs++;
    return r;
}

static void mpu_abort(struct s3 *s3, struct mpu *m)
{
    struct os_op *op = m->op;
    if (!m->upload_id) {
        op_finish(s3, op, m->err);
        return;
    }
    char q[400] = "uploadId=";
    s3_uri_encode(q, sizeof q, m->upload_id, false);
    struct rq *r = mpu_rq(s3, m, RQ_ABORT);
    if (!r || !(r->url = make_url(s3, op->key, q))) {
        if (r)
            rq_free(r);
        op_finish(s3, op, m->err);
        return;
    }
    atomic_fetch_add(&s3->s->st_aborts, 1);
    enqueue(s3, r, true);
}

/* Advances a multipart upload after request `from` ended. */
static void mpu_next(struct s3 *s3, struct mpu *m, struct rq *from)
{
    struct os_op *op = m->op;
    objstore *s = s3->s;
    switch (from->kind) {
    case RQ_INIT: {
        char id[300] = "";
        if (from->err == 0) {
            const char *b = from->resp ? from->resp : "";
            if (!s3_xml_get(b, b + from->resp_len, "UploadId", id, sizeof id) || !id[0]) {
                SK_WARN("s3", "INITIATE-MULTIPART %s: no UploadId in the answer", op->key);
                from->err = SK_ERR_IO;
            }
        }
        if (from->err != 0) {
            m->err = from->err;
            op_finish(s3, op, m->err);
            return;
        }
        m->upload_id = strdup(id);
        m->etags = calloc((size_t)m->nparts, sizeof *m->etags);
        if (!m->upload_id || !m->etags) {
            m->err = SK_ERR_NOMEM;
            mpu_abort(s3, m);
            return;
        }
        char q[400], enc[300] = "";
        s3_uri_encode(enc, sizeof enc, m->upload_id, false);
        for (int i = 0; i < m->nparts; i++) {
            struct rq *r = mpu_rq(s3, m, RQ_PART);
            snprintf(q, sizeof q, "partNumber=%d&uploadId=%s", i + 1, enc);
            if (!r || !(r->url = make_url(s3, op->key, q))) {
                if (r)
                    rq_free(r);
                m->err = SK_ERR_NOMEM;
                m->failed = true;
                break;
            }
            r->part_no = i + 1;
            r->body_off = (uint64_t)i * s->opts.part_size;
            r->body_len = op->total - r->body_off < s->opts.part_size ? op->total - r->body_off
                                                                      : s->opts.part_size;
            if (s->opts.sign_payload)
                sha256_iov_hex(op->iov, op->iovcnt, r->body_off, r->body_len, r->sha);
            m->outstanding++;
            enqueue(s3, r, false);
        }
        if (m->outstanding == 0)
            mpu_abort(s3, m);
        return;
    }
    case RQ_PART:
        m->outstanding--;
        if (from->err == 0) {
            snprintf(m->etags[from->part_no - 1], sizeof m->etags[0], "%s", from->etag);
            atomic_fetch_add(&s->st_parts, 1);
        } else if (!m->failed) {
            m->failed = true;
            m->err = from->err;
        }
        if (m->outstanding > 0)
            return;
        if (m->failed) {
            mpu_abort(s3, m);
            return;
        }
        {
            size_t cap = 128 + (size_t)m->nparts * 220;
            char *xml = malloc(cap);
            struct rq *r = xml ? mpu_rq(s3, m, RQ_COMPLETE) : NULL;
            char q[400] = "uploadId=";
            s3_uri_encode(q, sizeof q, m->upload_id, false);
            if (!r || !(r->url = make_url(s3, op->key, q))) {
                free(xml);
                if (r)
                    rq_free(r);
                m->err = SK_ERR_NOMEM;
                mpu_abort(s3, m);
                return;
            }
            size_t n = (size_t)snprintf(xml, cap, "<CompleteMultipartUpload>");
            for (int i = 0; i < m->nparts; i++) {
                /* ETags are quoted hex: nothing in them needs XML escaping. */
                n += (size_t)snprintf(xml + n, cap - n,
                                      "<Part><PartNumber>%d</PartNumber><ETag>%s</ETag></Part>",
                                      i + 1, m->etags[i]);
            }
            n += (size_t)snprintf(xml + n, cap - n, "</CompleteMultipartUpload>");
            r->mem = xml;
            r->mem_len = n;
            if (s->opts.sign_payload)
                sha256_hex(xml, n, r->sha);
            enqueue(s3, r, true);
        }
        return;
    case RQ_COMPLETE:
        if (from->err != 0) {
            m->err = from->err;
            mpu_abort(s3, m);
            return;
        }
        op_finish(s3, op, 0);
        return;
    case RQ_ABORT:
        if (from->err != 0)
            SK_WARN("s3", "multipart upload %s of %s left behind (the bucket's lifecycle rule "
                          "removes it)", m->upload_id, op->key);
        op_finish(s3, op, m->err);
        return;
    default:
        return;
    }
}

/* Turns a new operation into its first request(s). */
static void op_begin(struct s3 *s3, struct os_op *op)
{
    objstore *s = s3->s;
    struct rq *r = NULL;
    char q[1400];
    switch (op->kind) {
    case OS_GET:
        r = rq_new(s3, op, RQ_GET);
        if (r) {
            r->r_off = op->off;
            r->r_len = op->len;
            r->url = make_url(s3, op->key, NULL);
        }
        break;
    case OS_HEAD:
        r = rq_new(s3, op, RQ_HEAD);
        if (r)
            r->url = make_url(s3, op->key, NULL);
        break;
    case OS_DELETE:
        r = rq_new(s3, op, RQ_DELETE);
        if (r)
            r->url = make_url(s3, op->key, NULL);
        break;
    case OS_LIST: {
        /* Parameters sorted by name, values RFC 3986-encoded (SigV4). */
        q[0] = '\0';
        if (op->token) {
            strcpy(q, "continuation-token=");
            if (!s3_uri_encode(q, sizeof q, op->token, false)) {
                op_finish(s3, op, SK_ERR_INVAL);
                return;
            }
            strcat(q, "&");
        }
        size_t n = strlen(q);
        snprintf(q + n, sizeof q - n, "list-type=2&max-keys=%d&prefix=", op->max_keys);
        if (!s3_uri_encode(q, sizeof q, s3->prefix, false) ||
            !s3_uri_encode(q, sizeof q, op->key, false)) {
            op_finish(s3, op, SK_ERR_INVAL);
            return;
        }
        r = rq_new(s3, op, RQ_LIST);
        if (r) {
            /* The bucket itself: base URL without a key. */
            size_t cap = strlen(s3->base_url) + strlen(q) + 4;
            r->url = malloc(cap);
            if (r->url)
                snprintf(r->url, cap, "%s%s?%s", s3->base_url,
                         strchr(s3->base_url + 8, '/') ? "" : "/", q);
        }
        break;
    }
    case OS_PUT:
        if (op->total <= s->opts.part_size) {
            r = rq_new(s3, op, RQ_PUT);
            if (r) {
                r->body_len = op->total;
                r->url = make_url(s3, op->key, NULL);
                if (s->opts.sign_payload)
                    sha256_iov_hex(op->iov, op->iovcnt, 0, op->total, r->sha);
            }
        } else {
            struct mpu *m = calloc(1, sizeof *m);
            if (!m) {
                op_finish(s3, op, SK_ERR_NOMEM);
                return;
            }
            m->op = op;
            m->nparts = part_count(s, op->total);
            if (m->nparts > 10000) {
                free(m);
                SK_WARN("s3", "PUT %s: %llu bytes need more than 10000 parts of %zu", op->key,
                        (unsigned long long)op->total, s->opts.part_size);
                op_finish(s3, op, SK_ERR_INVAL);
                return;
            }
            atomic_fetch_add(&s->st_multipart, 1);
            r = mpu_rq(s3, m, RQ_INIT);
            if (r) {
                r->url = make_url(s3, op->key, "uploads=");
                if (s->opts.sign_payload)
                    sha256_hex("", 0, r->sha);
            } else {
                free(m);
            }
        }
        break;
    }
    if (!r || !r->url) {
        if (r)
            rq_free(r);
        op_finish(s3, op, SK_ERR_NOMEM);
        return;
    }
    enqueue(s3, r, false);
}

/* ---- the S3 thread ---- */

static struct rq *next_ready(struct s3 *s3)
{
    struct rqq *first = s3->bulk_turn ? &s3->bulk : &s3->fast;
    struct rqq *second = s3->bulk_turn ? &s3->fast : &s3->bulk;
    struct rq *r = rqq_pop(first);
    if (!r)
        r = rqq_pop(second);
    if (r) {
        s3->bulk_turn = !s3->bulk_turn;
        atomic_fetch_sub(&s3->s->st_queued, 1);
    }
    return r;
}

static void close_all(struct s3 *s3)
{
    /* Every request not finished ends its operation with SK_ERR_CLOSED,
     * once per operation. */
    while (s3->all) {
        struct rq *r = s3->all;
        if (r->easy) {
            curl_multi_remove_handle(s3->multi, r->easy);
            pool_put(s3, r->easy);
            r->easy = NULL;
            s3->inflight--;
            os_inflight_add(s3->s, -1);
        }
        if (r->mpu) {
            if (!r->mpu->closed) {
                r->mpu->closed = true;
                op_finish(s3, r->op, SK_ERR_CLOSED);
            }
        } else {
            op_finish(s3, r->op, SK_ERR_CLOSED);
        }
        rq_free(r);
    }
    s3->fast.head = s3->fast.tail = NULL;
    s3->bulk.head = s3->bulk.tail = NULL;
    s3->delayed = NULL;
    atomic_store(&s3->s->st_queued, 0);
}

static void *s3_main(void *arg)
{
    struct s3 *s3 = arg;
    objstore *s = s3->s;
    pthread_setname_np(pthread_self(), "objstore-s3");
    for (;;) {
        pthread_mutex_lock(&s3->mu);
        struct os_op *in = s3->in_head;
        s3->in_head = s3->in_tail = NULL;
        bool stop = s3->stopping;
        pthread_mutex_unlock(&s3->mu);
        while (in) {
            struct os_op *n = in->next;
            in->next = NULL;
            if (stop)
                op_finish(s3, in, SK_ERR_CLOSED);
            else
                op_begin(s3, in);
            in = n;
        }
        if (stop) {
            close_all(s3);
            break;
        }
        int64_t now = sk_mono_us();
        while (s3->delayed && s3->delayed->due_us <= now) {
            struct rq *r = s3->delayed;
            s3->delayed = r->next;
            atomic_fetch_sub(&s->st_queued, 1);
            enqueue(s3, r, true);
        }
        while (s3->inflight < s->opts.max_inflight) {
            struct rq *r = next_ready(s3);
            if (!r)
                break;
            launch(s3, r);
        }
        int running = 0;
        curl_multi_perform(s3->multi, &running);
        CURLMsg *msg;
        int left;
        while ((msg = curl_multi_info_read(s3->multi, &left)) != NULL) {
            if (msg->msg != CURLMSG_DONE)
                continue;
            CURL *e = msg->easy_handle;
            CURLcode res = msg->data.result;
            struct rq *r = NULL;
            curl_easy_getinfo(e, CURLINFO_PRIVATE, (char **)&r);
            long status = 0;
            curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
            s3->inflight--;
            os_inflight_add(s, -1);
            curl_multi_remove_handle(s3->multi, e);
            pool_put(s3, e);
            r->easy = NULL;
            attempt_finished(s3, r, res, status, NULL);
        }
        if (s3->inflight < s->opts.max_inflight && (s3->fast.head || s3->bulk.head))
            continue; /* requests finished above made room */
        long tmo = 1000;
        if (s3->delayed) {
            int64_t d = (s3->delayed->due_us - sk_mono_us() + 999) / 1000;
            if (d < tmo)
                tmo = d < 0 ? 0 : (long)d;
        }
        long ct = -1;
        curl_multi_timeout(s3->multi, &ct);
        if (ct >= 0 && ct < tmo)
            tmo = ct;
        curl_multi_poll(s3->multi, NULL, 0, (int)tmo, NULL);
    }
    return NULL;
}

/* ---- front-end hooks ---- */

static void s3_submit(objstore *s, struct os_op *op)
{
    struct s3 *s3 = S(s);
    op->next = NULL;
    pthread_mutex_lock(&s3->mu);
    if (s3->stopping) {
        pthread_mutex_unlock(&s3->mu);
        op->err = SK_ERR_CLOSED;
        os_op_complete(op);
        return;
    }
    if (s3->in_tail)
        s3->in_tail->next = op;
    else
        s3->in_head = op;
    s3->in_tail = op;
    pthread_mutex_unlock(&s3->mu);
    curl_multi_wakeup(s3->multi);
}

static void s3_shutdown(objstore *s)
{
    struct s3 *s3 = S(s);
    pthread_mutex_lock(&s3->mu);
    s3->stopping = true;
    pthread_mutex_unlock(&s3->mu);
    if (s3->thread_started) {
        curl_multi_wakeup(s3->multi);
        pthread_join(s3->thread, NULL);
        s3->thread_started = false;
    }
}

static void s3_free(objstore *s)
{
    struct s3 *s3 = S(s);
    if (!s3)
        return;
    for (int i = 0; i < s3->npool; i++)
        curl_easy_cleanup(s3->pool[i]);
    free(s3->pool);
    if (s3->multi)
        curl_multi_cleanup(s3->multi);
    s3_creds_clear(&s3->creds);
    pthread_mutex_destroy(&s3->mu);
    free(s3->bucket);
    free(s3->prefix);
    free(s3->region);
    free(s3->base_url);
    free(s3->noproxy);
    free(s3);
    s->impl = NULL;
}

static const struct objstore_backend s3_backend = {
    .name = "s3",
    .submit = s3_submit,
    .shutdown = s3_shutdown,
    .free_impl = s3_free,
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void)
{
    curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int hexval(char c)
{
    return c >= '0' && c <= '9' ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

static char *pct_decode(const char *p, size_t n)
{
    char *o = malloc(n + 1);
    if (!o)
        return NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '%' && i + 2 < n && hexval(p[i + 1]) >= 0 && hexval(p[i + 2]) >= 0) {
            o[k++] = (char)(hexval(p[i + 1]) * 16 + hexval(p[i + 2]));
            i += 2;
        } else {
            o[k++] = p[i];
        }
    }
    o[k] = '\0';
    return o;
}

/* Parses s3://bucket[/prefix][?region=R&endpoint=URL&path-style=true]. */
static int parse_url(struct s3 *s3, const char *url, char *why, size_t whylen)
{
    const char *p = url + 5; /* "s3://" */
    const char *q = strchr(p, '?');
    const char *end = q ? q : p + strlen(p);
    const char *slash = memchr(p, '/', (size_t)(end - p));
    const char *bend = slash ? slash : end;
    if (bend == p) {
        snprintf(why, whylen, "objects URL '%s' names no bucket", url);
        return SK_ERR_INVAL;
    }
    s3->bucket = strndup(p, (size_t)(bend - p));
    const char *pstart = slash ? slash + 1 : end;
    size_t plen = (size_t)(end - pstart);
    while (plen > 0 && pstart[plen - 1] == '/')
        plen--;
    s3->prefix = malloc(plen + 2);
    if (!s3->bucket || !s3->prefix)
        return SK_ERR_NOMEM;
    memcpy(s3->prefix, pstart, plen);
    s3->prefix[plen] = '\0';
    if (plen > 0)
        strcat(s3->prefix, "/");
    if (plen > 0 && !os_key_valid(s3->prefix, true)) {
        snprintf(why, whylen, "objects URL '%s': invalid prefix", url);
        return SK_ERR_INVAL;
    }
    char *endpoint = NULL;
    bool path_style = false, path_style_set = false;
    int rc = 0;
    for (const char *a = q ? q + 1 : NULL; a && *a && rc == 0;) {
        const char *amp = strchr(a, '&');
        const char *aend = amp ? amp : a + strlen(a);
        const char *eq = memchr(a, '=', (size_t)(aend - a));
        if (!eq) {
            snprintf(why, whylen, "objects URL '%s': parameter '%.*s' has no value", url,
                     (int)(aend - a), a);
            rc = SK_ERR_INVAL;
            break;
        }
        size_t nl = (size_t)(eq - a);
        char *val = pct_decode(eq + 1, (size_t)(aend - eq - 1));
        if (!val) {
            rc = SK_ERR_NOMEM;
            break;
        }
        if (nl == 6 && strncmp(a, "region", 6) == 0) {
            free(s3->region);
            s3->region = val;
        } else if (nl == 8 && strncmp(a, "endpoint", 8) == 0) {
            free(endpoint);
            endpoint = val;
        } else if (nl == 10 && strncmp(a, "path-style", 10) == 0) {
            path_style_set = true;
            path_style = strcmp(val, "true") == 0 || strcmp(val, "1") == 0;
            if (!path_style && strcmp(val, "false") != 0 && strcmp(val, "0") != 0) {
                snprintf(why, whylen, "objects URL '%s': path-style must be true or false", url);
                rc = SK_ERR_INVAL;
            }
            free(val);
        } else {
            snprintf(why, whylen,
                     "objects URL '%s': unknown parameter '%.*s' (known: region, endpoint, "
                     "path-style)",
                     url, (int)nl, a);
            free(val);
            rc = SK_ERR_INVAL;
        }
        a = amp ? amp + 1 : NULL;
    }
    if (rc == 0 && !s3->region) {
        const char *env = getenv("AWS_REGION");
        if (!env || !*env)
            env = getenv("AWS_DEFAULT_REGION");
        if (env && *env)
            s3->region = strdup(env);
        else if (endpoint)
            s3->region = strdup("us-east-1");
        else {
            snprintf(why, whylen, "objects URL '%s' needs ?region=R (or AWS_REGION)", url);
            rc = SK_ERR_INVAL;
        }
    }
    if (rc == 0 && endpoint) {
        size_t el = strlen(endpoint);
        while (el > 0 && endpoint[el - 1] == '/')
            endpoint[--el] = '\0';
        const char *scheme_end = strstr(endpoint, "://");
        if (!scheme_end || (strncmp(endpoint, "http://", 7) != 0 &&
                            strncmp(endpoint, "https://", 8) != 0)) {
            snprintf(why, whylen, "objects URL '%s': endpoint must be http:// or https://", url);
            rc = SK_ERR_INVAL;
        } else if (strchr(scheme_end + 3, '/')) {
            snprintf(why, whylen, "objects URL '%s': endpoint must have no path", url);
            rc = SK_ERR_INVAL;
        } else {
            size_t cap = el + strlen(s3->bucket) + 4;
            s3->base_url = malloc(cap);
            if (!s3->base_url)
                rc = SK_ERR_NOMEM;
            else if (path_style)
                snprintf(s3->base_url, cap, "%s/%s", endpoint, s3->bucket);
            else
                snprintf(s3->base_url, cap, "%.*s%s.%s", (int)(scheme_end + 3 - endpoint),
                         endpoint, s3->bucket, scheme_end + 3);
        }
    } else if (rc == 0) {
        /* Bucket names with dots break TLS host names: path style for them. */
        if (!path_style_set && strchr(s3->bucket, '.'))
            path_style = true;
        size_t cap = strlen(s3->bucket) + strlen(s3->region) + 64;
        s3->base_url = malloc(cap);
        if (!s3->base_url)
            rc = SK_ERR_NOMEM;
        else if (path_style)
            snprintf(s3->base_url, cap, "https://s3.%s.amazonaws.com/%s", s3->region, s3->bucket);
        else
            snprintf(s3->base_url, cap, "https://%s.s3.%s.amazonaws.com", s3->bucket, s3->region);
    }
    free(endpoint);
    if (rc == 0 && (!s3->region || !s3->base_url))
        rc = SK_ERR_NOMEM;
    if (rc == SK_ERR_NOMEM)
        snprintf(why, whylen, "out of memory");
    if (rc == 0)
        snprintf(s3->sigv4, sizeof s3->sigv4, "aws:amz:%s:s3", s3->region);
    return rc;
}

/* Parses the URL as os_s3_open would, and keeps nothing: `skiffd --check-config`. */
int os_s3_check_url(const char *url, char *why, size_t whylen)
{
    struct s3 s3 = {0};
    int rc = parse_url(&s3, url, why, whylen);
    free(s3.bucket);
    free(s3.prefix);
    free(s3.region);
    free(s3.base_url);
    return rc;
}

int os_s3_open(objstore *s, const char *url, char *why, size_t whylen)
{
    pthread_once(&curl_once, curl_init_once);
    struct s3 *s3 = calloc(1, sizeof *s3);
    if (!s3) {
        snprintf(why, whylen, "out of memory");
        return SK_ERR_NOMEM;
    }
    s3->s = s;
    s->impl = s3;
    s->be = &s3_backend;
    pthread_mutex_init(&s3->mu, NULL);
    int rc = parse_url(s3, url, why, whylen);
    if (rc != 0) {
        s3_free(s);
        return rc;
    }
    const objstore_opts *o = &s->opts;
    const char *ak = o->access_key, *sk = o->secret_key, *tok = o->session_token;
    if (!ak || !sk) {
        ak = getenv("AWS_ACCESS_KEY_ID");
        sk = getenv("AWS_SECRET_ACCESS_KEY");
        tok = getenv("AWS_SESSION_TOKEN");
    }
    if (ak && *ak && sk && *sk) {
        if (strlen(ak) >= sizeof s3->creds.access_key || strlen(sk) >= sizeof s3->creds.secret_key) {
            snprintf(why, whylen, "credentials too long");
            s3_free(s);
            return SK_ERR_INVAL;
        }
        strcpy(s3->creds.access_key, ak);
        strcpy(s3->creds.secret_key, sk);
        if (tok && *tok)
            s3->creds.token = strdup(tok);
        s3->creds_static = true;
    }
    const char *np = getenv("NO_PROXY");
    if (!np || !*np)
        np = getenv("no_proxy");
    size_t nplen = (np ? strlen(np) : 0) + 32;
    s3->noproxy = malloc(nplen);
    if (!s3->noproxy) {
        snprintf(why, whylen, "out of memory");
        s3_free(s);
        return SK_ERR_NOMEM;
    }
    snprintf(s3->noproxy, nplen, "%s%s127.0.0.1,localhost,::1", np && *np ? np : "",
             np && *np ? "," : "");
    unsigned seed = 0;
    if (RAND_bytes((unsigned char *)&seed, sizeof seed) != 1 || seed == 0)
        seed = (unsigned)sk_mono_us() | 1u;
    s3->rand_state = seed;
    s3->pool = calloc((size_t)o->max_inflight, sizeof *s3->pool);
    s3->multi = curl_multi_init();
    if (!s3->pool || !s3->multi) {
        snprintf(why, whylen, "out of memory");
        s3_free(s);
        return SK_ERR_NOMEM;
    }
    curl_multi_setopt(s3->multi, CURLMOPT_MAXCONNECTS, (long)o->max_inflight * 2);
    int e = pthread_create(&s3->thread, NULL, s3_main, s3);
    if (e != 0) {
        snprintf(why, whylen, "cannot start the S3 thread: %s", strerror(e));
        s3_free(s);
        return SK_ERR_IO;
    }
    s3->thread_started = true;
    if (o->part_size < (5u << 20))
        SK_WARN("s3", "part size %zu is below S3's 5 MiB minimum: AWS refuses such multipart "
                      "uploads (emulators may not)", o->part_size);
    SK_INFO("s3", "objects in %s (prefix '%s', region %s, credentials from %s)", s3->base_url,
            s3->prefix, s3->region, s3->creds_static ? "configuration/environment" : "instance metadata");
    return 0;
}
