/*
 * skload: load generator for Skiff and any Kafka-compatible broker, on
 * librdkafka.
 *
 * Modes (--mode):
 *   produce   N producer instances send fixed-size records. --rate R paces
 *             them from a schedule (record j is due at t0 + j/R) and measures
 *             latency from the due time, not from the moment the record could
 *             be sent, so a stalled broker shows up as latency rather than as
 *             fewer samples (no coordinated omission). --rate 0 sends as fast
 *             as --max-inflight and librdkafka's queue allow.
 *   e2e       produce, plus a consumer in the same process that reads the
 *             records back and measures due time -> consumed latency from the
 *             timestamp each record carries; --tail-readers N adds N more
 *             consumers (clients of their own) that read the same records at
 *             the head and only count them: fan-out reads at the tail.
 *   consume   catch-up read: every partition from its first offset, as fast
 *             as possible, until --bytes or the end present at start.
 *   metadata  one Metadata request; prints brokers and topics.
 *
 * Threads: per producer instance one sender (pacing, produce calls) and one
 * poller (delivery reports, which record into that instance's histograms);
 * one consumer thread in e2e mode (plus one per tail reader); main prints
 * progress and merges results.
 * Results go to stdout (text, or one JSON object with --json); progress and
 * diagnostics to stderr.
 */
#include "hdr.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROPS 64
#define MAX_PLIST 1024
#define MAX_ERR_KINDS 16
#define HDR_MAGIC 0x444c4b53u /* "SKLD" */
#define HDR_BYTES 32

/* Header at the start of every record value of at least HDR_BYTES. */
struct rec_hdr {
    uint32_t magic;
    uint32_t instance;
    uint64_t run_id;
    int64_t due_ns; /* CLOCK_MONOTONIC of this process */
    int64_t seq;
};

enum mode { M_PRODUCE, M_E2E, M_CONSUME, M_METADATA };

static struct cfg {
    const char *bootstrap;
    const char *topic;
    int partitions;
    int replication;
    int create;
    enum mode mode;
    long size;
    long long count;
    double duration;
    double warmup;
    double rate;
    long max_inflight;
    const char *acks;
    int idempotence;
    const char *compression;
    const char *linger_ms;
    const char *batch_size;
    int producers;
    int round_robin;
    long sticky;
    const char *client_id;
    int plist[MAX_PLIST];
    int nplist;
    int text_payload;
    long long bytes;
    double drain_timeout;
    double e2e_timeout;
    int tail_readers;
    double progress;
    double max_behind;
    int json;
    int buckets;
    const char *tconfigs[MAX_PROPS];
    int ntconfigs;
    const char *pprops[MAX_PROPS];
    int npprops;
    const char *cprops[MAX_PROPS];
    int ncprops;
} cfg = {
    .bootstrap = "127.0.0.1:9092",
    .topic = "skload",
    .partitions = 1,
    .replication = -1,
    .create = 1,
    .mode = M_PRODUCE,
    .size = 1024,
    .count = -1,
    .duration = -1,
    .warmup = 0,
    .rate = 0,
    .max_inflight = 10000,
    .acks = "all",
    .compression = "none",
    .producers = 1,
    .sticky = 1,
    .drain_timeout = 30,
    .e2e_timeout = 10,
    .progress = 1,
};

static atomic_int stop_flag; /* SIGINT/SIGTERM: stop sending, drain, report */
static uint64_t run_id;

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

/* CPU seconds (user + system) this process has used. */
static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
}

static void sleep_until(int64_t t)
{
    struct timespec ts = {.tv_sec = t / 1000000000LL, .tv_nsec = t % 1000000000LL};
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static void fatal(const char *fmt, ...) __attribute__((format(printf, 1, 2), noreturn));
static void fatal(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "skload: ");
    vfprintf(stderr, fmt, ap);
    fprintf(stderr, "\n");
    va_end(ap);
    exit(1);
}

static void on_signal(int sig)
{
    /* First signal: stop sending, drain, report. Second: leave now. */
    if (atomic_exchange(&stop_flag, 1))
        _exit(128 + sig);
}

/* ---------------------------------------------------------------- errors */

struct err_kinds {
    int n;
    rd_kafka_resp_err_t code[MAX_ERR_KINDS];
    int64_t count[MAX_ERR_KINDS];
};

static void err_add(struct err_kinds *e, rd_kafka_resp_err_t code, int64_t n)
{
    for (int i = 0; i < e->n; i++)
        if (e->code[i] == code) {
            e->count[i] += n;
            return;
        }
    if (e->n < MAX_ERR_KINDS) {
        e->code[e->n] = code;
        e->count[e->n++] = n;
    }
}

static void err_merge(struct err_kinds *dst, const struct err_kinds *src)
{
    for (int i = 0; i < src->n; i++)
        err_add(dst, src->code[i], src->count[i]);
}

/* ------------------------------------------------------------ rdkafka conf */

static void conf_set(rd_kafka_conf_t *conf, const char *k, const char *v)
{
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof(err)) != RD_KAFKA_CONF_OK)
        fatal("%s=%s: %s", k, v, err);
}

static void conf_set_kv(rd_kafka_conf_t *conf, const char *kv)
{
    char *copy = strdup(kv);
    char *eq = strchr(copy, '=');
    if (!eq)
        fatal("property '%s' is not key=value", kv);
    *eq = '\0';
    conf_set(conf, copy, eq + 1);
    free(copy);
}

static void client_error_cb(rd_kafka_t *rk, int err, const char *reason, void *opaque)
{
    (void)opaque;
    /* Transport errors repeat; librdkafka already rate-limits them. */
    fprintf(stderr, "skload: %s: %s: %s\n", rd_kafka_name(rk),
            rd_kafka_err2name((rd_kafka_resp_err_t)err), reason);
    if (err == RD_KAFKA_RESP_ERR__FATAL) {
        char buf[512];
        rd_kafka_resp_err_t orig = rd_kafka_fatal_error(rk, buf, sizeof(buf));
        fprintf(stderr, "skload: fatal: %s: %s\n", rd_kafka_err2name(orig), buf);
        atomic_store(&stop_flag, 1);
    }
}

/* security.*, sasl.* and ssl.* properties of -X: how every client of this
 * process connects (admin, metadata and consumer clients too). */
static int connection_prop(const char *kv)
{
    return strncmp(kv, "security.", 9) == 0 || strncmp(kv, "sasl.", 5) == 0 ||
           strncmp(kv, "ssl.", 4) == 0;
}

static rd_kafka_conf_t *base_conf(const char *client_id)
{
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    conf_set(conf, "bootstrap.servers", cfg.bootstrap);
    for (int i = 0; i < cfg.npprops; i++)
        if (connection_prop(cfg.pprops[i]))
            conf_set_kv(conf, cfg.pprops[i]);
    /* --client-id names every client of this process (a zone tag such as
     * skiff_az=a must reach the admin and consumer clients too). */
    conf_set(conf, "client.id", cfg.client_id ? cfg.client_id : client_id);
    rd_kafka_conf_set_error_cb(conf, client_error_cb);
    return conf;
}

static rd_kafka_t *new_client(rd_kafka_type_t type, rd_kafka_conf_t *conf)
{
    char err[512];
    rd_kafka_t *rk = rd_kafka_new(type, conf, err, sizeof(err));
    if (!rk)
        fatal("rd_kafka_new: %s", err);
    return rk;
}

/* ------------------------------------------------------------------ topic */

/* Number of partitions of the topic with a leader each, 0 if absent, -1 on error. */
static int topic_partitions(rd_kafka_t *rk, int *all_led, int timeout_ms)
{
    const struct rd_kafka_metadata *md;
    /* All topics, so that the lookup itself never auto-creates the topic. */
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, NULL, &md, timeout_ms);
    if (err) {
        fprintf(stderr, "skload: metadata: %s\n", rd_kafka_err2str(err));
        return -1;
    }
    int n = 0;
    *all_led = 0;
    for (int i = 0; i < md->topic_cnt; i++) {
        const struct rd_kafka_metadata_topic *t = &md->topics[i];
        if (strcmp(t->topic, cfg.topic) != 0 || t->err)
            continue;
        n = t->partition_cnt;
        *all_led = n > 0;
        for (int p = 0; p < n; p++)
            if (t->partitions[p].leader < 0 || t->partitions[p].err)
                *all_led = 0;
    }
    rd_kafka_metadata_destroy(md);
    return n;
}

static rd_kafka_resp_err_t create_topic(rd_kafka_t *rk, int rf, char *errstr, size_t errlen)
{
    rd_kafka_NewTopic_t *nt =
        rd_kafka_NewTopic_new(cfg.topic, cfg.partitions, rf, errstr, errlen);
    if (!nt)
        return RD_KAFKA_RESP_ERR__INVALID_ARG;
    for (int i = 0; i < cfg.ntconfigs; i++) {
        char *kv = strdup(cfg.tconfigs[i]);
        char *eq = strchr(kv, '=');
        if (!eq)
            fatal("topic config '%s' is not key=value", cfg.tconfigs[i]);
        *eq = '\0';
        rd_kafka_resp_err_t err = rd_kafka_NewTopic_set_config(nt, kv, eq + 1);
        free(kv);
        if (err) {
            rd_kafka_NewTopic_destroy(nt);
            snprintf(errstr, errlen, "topic config %s: %s", cfg.tconfigs[i],
                     rd_kafka_err2str(err));
            return err;
        }
    }
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    rd_kafka_AdminOptions_t *opt = rd_kafka_AdminOptions_new(rk, RD_KAFKA_ADMIN_OP_CREATETOPICS);
    rd_kafka_AdminOptions_set_operation_timeout(opt, 30000, errstr, errlen);
    rd_kafka_CreateTopics(rk, &nt, 1, opt, q);
    rd_kafka_event_t *ev = rd_kafka_queue_poll(q, 60000);
    rd_kafka_resp_err_t err = RD_KAFKA_RESP_ERR__TIMED_OUT;
    snprintf(errstr, errlen, "no CreateTopics answer");
    if (ev) {
        err = rd_kafka_event_error(ev);
        if (err) {
            snprintf(errstr, errlen, "%s", rd_kafka_event_error_string(ev));
        } else {
            size_t n;
            const rd_kafka_topic_result_t **res =
                rd_kafka_CreateTopics_result_topics(rd_kafka_event_CreateTopics_result(ev), &n);
            for (size_t i = 0; i < n; i++) {
                err = rd_kafka_topic_result_error(res[i]);
                const char *s = rd_kafka_topic_result_error_string(res[i]);
                snprintf(errstr, errlen, "%s", s ? s : rd_kafka_err2str(err));
            }
        }
        rd_kafka_event_destroy(ev);
    }
    rd_kafka_AdminOptions_destroy(opt);
    rd_kafka_NewTopic_destroy(nt);
    rd_kafka_queue_destroy(q);
    return err;
}

/* Makes sure the topic exists and every partition has a leader; returns its partition count. */
static int ensure_topic(void)
{
    rd_kafka_t *rk = new_client(RD_KAFKA_PRODUCER, base_conf("skload-admin"));
    int led = 0;
    int n = topic_partitions(rk, &led, 10000);
    if (n < 0)
        fatal("cannot reach %s", cfg.bootstrap);
    int created = 0;
    if (n == 0) {
        created = 1;
        if (!cfg.create)
            fatal("topic %s does not exist", cfg.topic);
        char errstr[512];
        rd_kafka_resp_err_t err = create_topic(rk, cfg.replication, errstr, sizeof(errstr));
        if (err && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS && cfg.replication == -1) {
            /* "Broker default" needs CreateTopics v4; one replica is what a single node has. */
            fprintf(stderr, "skload: CreateTopics with default replication: %s; retrying with 1\n",
                    errstr);
            err = create_topic(rk, 1, errstr, sizeof(errstr));
        }
        if (err && err != RD_KAFKA_RESP_ERR_TOPIC_ALREADY_EXISTS)
            fatal("CreateTopics %s: %s: %s", cfg.topic, rd_kafka_err2name(err), errstr);
    }
    int64_t deadline = now_ns() + 30000000000LL;
    for (;;) {
        n = topic_partitions(rk, &led, 5000);
        if (n > 0 && led)
            break;
        if (now_ns() > deadline)
            fatal("topic %s: partitions without a leader after 30 s", cfg.topic);
        usleep(100000);
    }
    if (cfg.ntconfigs && !created)
        fprintf(stderr, "skload: topic %s exists: --topic-config not applied\n", cfg.topic);
    if (cfg.mode != M_CONSUME && n != cfg.partitions)
        fprintf(stderr, "skload: topic %s exists with %d partitions (asked %d); using %d\n",
                cfg.topic, n, cfg.partitions, n);
    rd_kafka_destroy(rk);
    return n;
}

/* --------------------------------------------------------------- producer */

struct msgctx {
    int64_t due_ns;
    int64_t sent_ns;
};

struct producer {
    int id;
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    pthread_t sender, poller;
    int nparts;
    long long quota; /* records to send, -1 = until the end time */
    long max_inflight;
    int64_t t0, measure_from, send_until;
    unsigned char *payload;
    uint64_t rng; /* xorshift state for record contents */

    /* sender thread */
    hdr_t *lag; /* actual send time - due time */
    int64_t unsent; /* records the run owed but did not send (stopped early) */
    int early;      /* stopped by a signal or a stalled broker */
    int behind;     /* stopped because sending fell --max-behind behind schedule */
    struct err_kinds send_errs;

    /* poller thread */
    hdr_t *lat; /* due time -> delivery report */
    hdr_t *svc; /* produce call -> delivery report */
    struct err_kinds dr_errs;
    int64_t measured_ok, measured_bytes, last_dr_ns;

    /* shared, read by main for progress */
    atomic_llong sent, acked, acked_bytes, failed;
    atomic_long inflight;
    atomic_llong win_max_us; /* largest latency since main last took it (progress lines) */
    atomic_int waiting;
    atomic_int poll_stop;
    atomic_int done;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

static void wake_sender(struct producer *p)
{
    if (atomic_load(&p->waiting)) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_signal(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
}

/* Waits until fewer than `limit` records are in flight or `until` passes; 1 if room. */
static int wait_inflight_below(struct producer *p, long limit, int64_t until)
{
    if (atomic_load(&p->inflight) < limit)
        return 1;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->waiting, 1);
    int ok;
    for (;;) {
        /* seq_cst store of `waiting` before this load pairs with the poller's
         * decrement-then-load, so a wake-up cannot be lost. */
        if (atomic_load(&p->inflight) < limit) {
            ok = 1;
            break;
        }
        int64_t now = now_ns();
        if (now >= until) {
            ok = 0;
            break;
        }
        int64_t t = now + 100000000LL < until ? now + 100000000LL : until;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t rt = (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec + (t - now);
        ts.tv_sec = rt / 1000000000LL;
        ts.tv_nsec = rt % 1000000000LL;
        pthread_cond_timedwait(&p->cv, &p->mu, &ts);
    }
    atomic_store(&p->waiting, 0);
    pthread_mutex_unlock(&p->mu);
    return ok;
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque)
{
    (void)rk;
    struct producer *p = opaque;
    struct msgctx *ctx = m->_private;
    int64_t now = now_ns();
    if (m->err) {
        err_add(&p->dr_errs, m->err, 1);
        atomic_fetch_add_explicit(&p->failed, 1, memory_order_relaxed);
    } else {
        size_t bytes = m->len + m->key_len;
        atomic_fetch_add_explicit(&p->acked, 1, memory_order_relaxed);
        atomic_fetch_add_explicit(&p->acked_bytes, (long long)bytes, memory_order_relaxed);
        long long us = (now - ctx->due_ns) / 1000;
        long long cur = atomic_load_explicit(&p->win_max_us, memory_order_relaxed);
        while (us > cur && !atomic_compare_exchange_weak(&p->win_max_us, &cur, us))
            ;
        if (ctx->due_ns >= p->measure_from) {
            hdr_record(p->lat, (now - ctx->due_ns) / 1000);
            hdr_record(p->svc, (now - ctx->sent_ns) / 1000);
            p->measured_ok++;
            p->measured_bytes += (int64_t)bytes;
            p->last_dr_ns = now;
        }
    }
    free(ctx);
    atomic_fetch_sub(&p->inflight, 1);
    wake_sender(p);
}

static void *poller_main(void *arg)
{
    struct producer *p = arg;
    while (!atomic_load(&p->poll_stop))
        rd_kafka_poll(p->rk, 100);
    rd_kafka_poll(p->rk, 0);
    return NULL;
}

/*
 * Fresh content for every record: a body shared by all records would let a
 * compressor squeeze a whole batch to almost nothing. `random` is
 * incompressible; `text` is words drawn from a skewed vocabulary with
 * numbers, which zstd and gzip shrink about 2.2x, lz4 and snappy 1.4x.
 */
static void fill_payload(unsigned char *buf, long n, uint64_t *state)
{
    static const char *syll[] = {"ka", "fo", "re", "st", "ion", "er", "an", "th", "ed", "in",
                                 "on", "es", "al", "ti", "ly", "ou", "ve", "ur", "ce", "ma",
                                 "lo", "pi", "de", "nu", "so", "ga", "qu", "zi", "bo", "we",
                                 "ch", "ix"};
    uint64_t x = *state;
    long i = 0;
    while (i < n) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        if (cfg.text_payload) {
            if ((x & 7) == 0) { /* a number now and then */
                int len = snprintf((char *)buf + i, (size_t)(n - i + 1), "%u ",
                                   (unsigned)((x >> 8) % 100000));
                i += len < n - i ? len : n - i;
                continue;
            }
            /* Two to four syllables; low indexes more frequent (min of two draws). */
            int nsyl = 2 + (int)((x >> 3) % 3);
            for (int k = 0; k < nsyl && i < n; k++) {
                unsigned a = (unsigned)(x >> (8 + 10 * k)) & 31, b = (unsigned)(x >> (13 + 10 * k)) & 31;
                for (const char *c = syll[a < b ? a : b]; *c && i < n; c++)
                    buf[i++] = (unsigned char)*c;
            }
            if (i < n)
                buf[i++] = ' ';
        } else {
            uint64_t y = x * 0x2545F4914F6CDD1DULL;
            for (int k = 0; k < 8 && i < n; k++)
                buf[i++] = (unsigned char)(y >> (8 * k));
        }
    }
    *state = x;
}

static void *sender_main(void *arg)
{
    struct producer *p = arg;
    prctl(PR_SET_TIMERSLACK, 1000UL); /* wake within ~1 us of a due time */
    double interval = cfg.rate > 0 ? 1e9 / cfg.rate : 0; /* between records of all instances */
    /* A broker that acknowledges nothing for this long ends the run. */
    int64_t stall = (int64_t)(cfg.drain_timeout * 1e9);
    sleep_until(p->t0); /* all instances start together, after set-up */
    int64_t i;
    for (i = 0;; i++) {
        if (p->quota >= 0 && i >= p->quota)
            break;
        if (atomic_load(&stop_flag)) {
            p->early = 1;
            break;
        }
        int64_t due;
        if (interval > 0) {
            /* Instance k sends the global records k, k+P, k+2P, ... */
            due = p->t0 + (int64_t)((double)(i * cfg.producers + p->id) * interval);
            if (due >= p->send_until)
                break;
            int64_t now = now_ns();
            if (due > now) {
                sleep_until(due);
            } else if (cfg.max_behind > 0 && now - due > (int64_t)(cfg.max_behind * 1e9)) {
                /* The broker cannot take the rate: what is left of the
                 * schedule is reported unsent rather than sent ever later. */
                fprintf(stderr, "skload: producer %d: %.1f s behind schedule; stopping\n", p->id,
                        (double)(now - due) / 1e9);
                p->early = p->behind = 1;
                break;
            }
        } else {
            due = now_ns();
            if (due >= p->send_until)
                break;
        }
        if (p->max_inflight > 0 &&
            !wait_inflight_below(p, p->max_inflight, now_ns() + stall)) {
            fprintf(stderr, "skload: producer %d: no acknowledgement for %.0f s; giving up\n",
                    p->id, cfg.drain_timeout);
            p->early = 1;
            break;
        }
        struct msgctx *ctx = malloc(sizeof(*ctx));
        ctx->due_ns = due;
        /* Global record g: --partitions-list / --round-robin send --sticky
         * consecutive records to one partition, then move to the next. */
        int64_t g = (i * cfg.producers + p->id) / cfg.sticky;
        int32_t part = cfg.nplist       ? (int32_t)cfg.plist[g % cfg.nplist]
                       : cfg.round_robin ? (int32_t)(g % p->nparts)
                                         : RD_KAFKA_PARTITION_UA;
        atomic_fetch_add(&p->inflight, 1);
        long body = cfg.size >= HDR_BYTES ? HDR_BYTES : 0;
        fill_payload(p->payload + body, cfg.size - body, &p->rng);
        int64_t sent_ns;
        for (;;) {
            if (cfg.size >= HDR_BYTES) {
                struct rec_hdr h = {HDR_MAGIC, (uint32_t)p->id, run_id, due, i};
                memcpy(p->payload, &h, sizeof(h));
            }
            ctx->sent_ns = sent_ns = now_ns();
            /* Once queued, ctx belongs to the poller: it may be freed at any time. */
            if (rd_kafka_produce(p->rkt, part, RD_KAFKA_MSG_F_COPY, p->payload, (size_t)cfg.size,
                                 NULL, 0, ctx) == 0)
                break;
            rd_kafka_resp_err_t err = rd_kafka_last_error();
            if (err == RD_KAFKA_RESP_ERR__QUEUE_FULL && !atomic_load(&stop_flag)) {
                /* librdkafka's own queue is the bound: wait for one delivery. */
                long cur = atomic_load(&p->inflight);
                if (wait_inflight_below(p, cur, now_ns() + stall))
                    continue;
                fprintf(stderr, "skload: producer %d: queue full and no acknowledgement for "
                                "%.0f s\n", p->id, cfg.drain_timeout);
                atomic_store(&stop_flag, 1);
            }
            err_add(&p->send_errs, err, 1);
            atomic_fetch_add(&p->failed, 1);
            atomic_fetch_sub(&p->inflight, 1);
            free(ctx);
            ctx = NULL;
            break;
        }
        if (!ctx)
            continue;
        atomic_fetch_add_explicit(&p->sent, 1, memory_order_relaxed);
        if (due >= p->measure_from)
            hdr_record(p->lag, (sent_ns - due) / 1000);
    }
    if (p->early) {
        /* What the run still owed: the rest of the schedule, or of the count. */
        if (interval > 0 && p->send_until != INT64_MAX) {
            for (int64_t j = i; p->quota < 0 || j < p->quota; j++) {
                if (p->t0 + (int64_t)((double)(j * cfg.producers + p->id) * interval) >=
                    p->send_until)
                    break;
                p->unsent++;
            }
        } else if (p->quota >= 0) {
            p->unsent = p->quota - i;
        }
    }

    /* Drain: every sent record gets its delivery report, or is purged. */
    int64_t drain_until = now_ns() + (int64_t)(cfg.drain_timeout * 1e9);
    if (!wait_inflight_below(p, 1, drain_until)) {
        fprintf(stderr, "skload: producer %d: %ld records undelivered after %.0f s; purging\n",
                p->id, atomic_load(&p->inflight), cfg.drain_timeout);
        rd_kafka_purge(p->rk, RD_KAFKA_PURGE_F_QUEUE | RD_KAFKA_PURGE_F_INFLIGHT);
        wait_inflight_below(p, 1, now_ns() + 5000000000LL);
    }
    atomic_store(&p->poll_stop, 1);
    atomic_store(&p->done, 1);
    return NULL;
}

static void producer_init(struct producer *p, int id, int nparts)
{
    memset(p, 0, sizeof(*p));
    p->id = id;
    p->nparts = nparts;
    char cid[64];
    snprintf(cid, sizeof(cid), "skload-%d", id);
    rd_kafka_conf_t *conf = base_conf(cid);
    conf_set(conf, "acks", cfg.acks);
    conf_set(conf, "enable.idempotence", cfg.idempotence ? "true" : "false");
    conf_set(conf, "compression.codec", cfg.compression);
    if (cfg.linger_ms)
        conf_set(conf, "linger.ms", cfg.linger_ms);
    if (cfg.batch_size)
        conf_set(conf, "batch.size", cfg.batch_size);
    /* Our in-flight bound, not librdkafka's queue, should be the one that binds. */
    long qmax = p->max_inflight = cfg.max_inflight > 0
                                      ? (cfg.max_inflight + cfg.producers - 1) / cfg.producers
                                      : 0;
    char buf[32];
    snprintf(buf, sizeof(buf), "%ld", qmax + 1000 > 100000 ? qmax + 1000 : 100000);
    conf_set(conf, "queue.buffering.max.messages", buf);
    for (int i = 0; i < cfg.npprops; i++)
        conf_set_kv(conf, cfg.pprops[i]);
    rd_kafka_conf_set_opaque(conf, p);
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    p->rk = new_client(RD_KAFKA_PRODUCER, conf);
    p->rkt = rd_kafka_topic_new(p->rk, cfg.topic, NULL);
    p->lat = hdr_new();
    p->svc = hdr_new();
    p->lag = hdr_new();
    p->payload = malloc((size_t)cfg.size + 1); /* + 1: snprintf's terminator */
    p->rng = (0x9e3779b97f4a7c15ULL * (uint64_t)(id + 1)) ^ run_id;
    if (!p->rng)
        p->rng = 1;
    atomic_init(&p->sent, 0);
    atomic_init(&p->acked, 0);
    atomic_init(&p->acked_bytes, 0);
    atomic_init(&p->failed, 0);
    atomic_init(&p->inflight, 0);
    atomic_init(&p->win_max_us, 0);
    atomic_init(&p->waiting, 0);
    atomic_init(&p->poll_stop, 0);
    atomic_init(&p->done, 0);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    /* Connect and learn the leaders now, not on the first measured record. */
    const struct rd_kafka_metadata *md;
    if (rd_kafka_metadata(p->rk, 0, p->rkt, &md, 10000) == 0)
        rd_kafka_metadata_destroy(md);
}

/* ------------------------------------------------------------ e2e consumer */

/*
 * Watermarks of one partition. A topic just created can have a leader in
 * Metadata before that leader answers ListOffsets (Kafka: NOT_LEADER for a
 * moment): retriable errors are retried for up to 10 s.
 */
static rd_kafka_resp_err_t watermarks(rd_kafka_t *rk, int part, int64_t *lo, int64_t *hi)
{
    int64_t deadline = now_ns() + 10000000000LL;
    for (;;) {
        rd_kafka_resp_err_t err =
            rd_kafka_query_watermark_offsets(rk, cfg.topic, part, lo, hi, 10000);
        if (!err || now_ns() > deadline)
            return err;
        switch (err) {
        case RD_KAFKA_RESP_ERR_NOT_LEADER_FOR_PARTITION:
        case RD_KAFKA_RESP_ERR_LEADER_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR_UNKNOWN_TOPIC_OR_PART:
        case RD_KAFKA_RESP_ERR_REPLICA_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR_OFFSET_NOT_AVAILABLE:
        case RD_KAFKA_RESP_ERR__TRANSPORT:
        case RD_KAFKA_RESP_ERR__TIMED_OUT:
            usleep(100000);
            continue;
        default:
            return err;
        }
    }
}

struct e2e {
    rd_kafka_t *rk;
    rd_kafka_topic_t *rkt;
    rd_kafka_queue_t *q;
    pthread_t thr;
    int nparts;
    int64_t measure_from;
    hdr_t *lat;            /* NULL for a tail reader: it only counts */
    atomic_llong consumed; /* records of this run, warm-up included */
    int64_t foreign;       /* records of other runs (topic shared) */
    int64_t errors;
    atomic_llong target;   /* set by main once producers are done; -1 before */
    int64_t deadline;      /* likewise */
};

static rd_kafka_t *new_consumer(const char *cid, int eof)
{
    rd_kafka_conf_t *conf = base_conf(cid);
    conf_set(conf, "enable.partition.eof", eof ? "true" : "false");
    for (int i = 0; i < cfg.ncprops; i++)
        conf_set_kv(conf, cfg.cprops[i]);
    return new_client(RD_KAFKA_CONSUMER, conf);
}

static void *e2e_main(void *arg)
{
    struct e2e *c = arg;
    for (;;) {
        /* One record per call: the batch call waits for a full batch or its
         * timeout, which would add that wait to the latency. */
        rd_kafka_message_t *m = rd_kafka_consume_queue(c->q, 100);
        int64_t now = now_ns();
        if (m) {
            if (m->err) {
                if (m->err != RD_KAFKA_RESP_ERR__PARTITION_EOF) {
                    c->errors++;
                    fprintf(stderr, "skload: e2e consumer: %s\n", rd_kafka_message_errstr(m));
                }
            } else if (m->len >= HDR_BYTES) {
                struct rec_hdr h;
                memcpy(&h, m->payload, sizeof(h));
                if (h.magic == HDR_MAGIC && h.run_id == run_id) {
                    atomic_fetch_add(&c->consumed, 1);
                    if (c->lat && h.due_ns >= c->measure_from)
                        hdr_record(c->lat, (now - h.due_ns) / 1000);
                } else {
                    c->foreign++;
                }
            } else {
                c->foreign++;
            }
            rd_kafka_message_destroy(m);
        }
        long long target = atomic_load(&c->target);
        if (target >= 0 && (atomic_load(&c->consumed) >= target || now_ns() > c->deadline))
            break;
    }
    return NULL;
}

static void e2e_start(struct e2e *c, int nparts, int timed)
{
    memset(c, 0, sizeof(*c));
    c->nparts = nparts;
    c->lat = timed ? hdr_new() : NULL;
    atomic_init(&c->target, -1);
    c->rk = new_consumer(timed ? "skload-e2e" : "skload-tail", 0);
    c->rkt = rd_kafka_topic_new(c->rk, cfg.topic, NULL);
    c->q = rd_kafka_queue_new(c->rk);
    for (int k = 0; k < (cfg.nplist ? cfg.nplist : nparts); k++) {
        int p = cfg.nplist ? cfg.plist[k] : k;
        int64_t lo, hi;
        rd_kafka_resp_err_t err = watermarks(c->rk, p, &lo, &hi);
        if (err)
            fatal("ListOffsets %s/%d: %s", cfg.topic, p, rd_kafka_err2str(err));
        /* From the current end: only records of this run are read. */
        if (rd_kafka_consume_start_queue(c->rkt, p, hi, c->q) < 0)
            fatal("consume %s/%d: %s", cfg.topic, p, rd_kafka_err2str(rd_kafka_last_error()));
    }
    pthread_create(&c->thr, NULL, e2e_main, c);
}

static void e2e_stop(struct e2e *c)
{
    pthread_join(c->thr, NULL);
    for (int k = 0; k < (cfg.nplist ? cfg.nplist : c->nparts); k++)
        rd_kafka_consume_stop(c->rkt, cfg.nplist ? cfg.plist[k] : k);
    rd_kafka_queue_destroy(c->q);
    rd_kafka_topic_destroy(c->rkt);
    rd_kafka_destroy(c->rk);
}

/* Tail readers start and stop in parallel: each start is a client's bootstrap plus
 * a ListOffsets per partition, each stop a consumer teardown, seconds in a row. */
struct tail_job {
    pthread_t thr;
    struct e2e *c;
    int nparts;
};

static void *tail_start_main(void *arg)
{
    struct tail_job *j = arg;
    e2e_start(j->c, j->nparts, 0);
    return NULL;
}

static void *tail_stop_main(void *arg)
{
    struct tail_job *j = arg;
    e2e_stop(j->c);
    return NULL;
}

static void tails_each(struct e2e *tails, int n, int nparts, void *(*fn)(void *))
{
    struct tail_job *jobs = calloc((size_t)n + 1, sizeof(*jobs));
    for (int i = 0; i < n; i++) {
        jobs[i] = (struct tail_job){.c = &tails[i], .nparts = nparts};
        pthread_create(&jobs[i].thr, NULL, fn, &jobs[i]);
    }
    for (int i = 0; i < n; i++)
        pthread_join(jobs[i].thr, NULL);
    free(jobs);
}

/* ------------------------------------------------------------------ output */

static void print_lat_text(const char *name, const hdr_t *h)
{
    printf("  %-16s p50 %8.3f  p99 %8.3f  p999 %8.3f  max %8.3f  mean %8.3f ms  (n=%lld)\n",
           name, hdr_percentile(h, 50) / 1000.0, hdr_percentile(h, 99) / 1000.0,
           hdr_percentile(h, 99.9) / 1000.0, h->max / 1000.0, hdr_mean(h) / 1000.0,
           (long long)h->count);
}

static void print_errs_json(const struct err_kinds *e)
{
    printf("{");
    for (int i = 0; i < e->n; i++)
        printf("%s\"%s\":%lld", i ? "," : "", rd_kafka_err2name(e->code[i]),
               (long long)e->count[i]);
    printf("}");
}

static void print_errs_text(const struct err_kinds *e)
{
    for (int i = 0; i < e->n; i++)
        printf("  error %-30s %lld\n", rd_kafka_err2name(e->code[i]), (long long)e->count[i]);
}

/* ------------------------------------------------------------- run modes */

static int run_produce(void)
{
    int nparts = ensure_topic();
    for (int k = 0; k < cfg.nplist; k++)
        if (cfg.plist[k] >= nparts)
            fatal("--partitions-list: topic %s has no partition %d (%d partitions)", cfg.topic,
                  cfg.plist[k], nparts);
    struct e2e e2e;
    struct e2e *tails = calloc((size_t)cfg.tail_readers + 1, sizeof(*tails));
    if (cfg.mode == M_E2E) {
        e2e_start(&e2e, nparts, 1);
        tails_each(tails, cfg.tail_readers, nparts, tail_start_main);
    }

    struct producer *ps = calloc((size_t)cfg.producers, sizeof(*ps));
    for (int i = 0; i < cfg.producers; i++)
        producer_init(&ps[i], i, nparts);

    /* Start a little later so every thread is up before the first due time. */
    int64_t t0 = now_ns() + 50000000LL;
    int64_t measure_from = t0 + (int64_t)(cfg.warmup * 1e9);
    int64_t send_until = cfg.duration > 0 ? measure_from + (int64_t)(cfg.duration * 1e9)
                                          : INT64_MAX;
    if (cfg.mode == M_E2E)
        e2e.measure_from = measure_from;
    for (int i = 0; i < cfg.tail_readers; i++)
        tails[i].measure_from = measure_from;
    for (int i = 0; i < cfg.producers; i++) {
        struct producer *p = &ps[i];
        p->t0 = t0;
        p->measure_from = measure_from;
        p->send_until = send_until;
        if (cfg.count >= 0)
            p->quota = cfg.count / cfg.producers + (i < cfg.count % cfg.producers ? 1 : 0);
        else
            p->quota = -1;
        pthread_create(&p->poller, NULL, poller_main, p);
        pthread_create(&p->sender, NULL, sender_main, p);
    }

    /* Progress, once per --progress seconds, until every sender is done. */
    int64_t next = t0 + (int64_t)(cfg.progress * 1e9);
    long long last_acked = 0, last_bytes = 0;
    int64_t last_t = t0;
    /* The generator's own CPU over the measured part: on a machine shared
     * with the broker it is part of what bounds the figures. */
    double cpu0 = -1;
    int64_t cpu0_t = 0;
    for (;;) {
        if (cpu0 < 0 && now_ns() >= measure_from) {
            cpu0 = cpu_seconds();
            cpu0_t = now_ns();
        }
        int done = 1;
        for (int i = 0; i < cfg.producers; i++)
            done &= atomic_load(&ps[i].done);
        if (done)
            break;
        usleep(20000);
        int64_t now = now_ns();
        if (cfg.progress > 0 && now >= next) {
            long long sent = 0, acked = 0, bytes = 0, failed = 0, infl = 0, wmax = 0;
            for (int i = 0; i < cfg.producers; i++) {
                long long m = atomic_exchange(&ps[i].win_max_us, 0);
                if (m > wmax)
                    wmax = m;
                sent += atomic_load(&ps[i].sent);
                acked += atomic_load(&ps[i].acked);
                bytes += atomic_load(&ps[i].acked_bytes);
                failed += atomic_load(&ps[i].failed);
                infl += atomic_load(&ps[i].inflight);
            }
            double dt = (double)(now - last_t) / 1e9;
            fprintf(stderr,
                    "skload: %6.1fs%s sent %lld acked %lld (%.0f rec/s, %.1f MB/s) "
                    "in-flight %lld failed %lld, max latency %.1f ms\n",
                    (double)(now - t0) / 1e9, now < measure_from ? " warm-up" : "", sent, acked,
                    (double)(acked - last_acked) / dt, (double)(bytes - last_bytes) / dt / 1e6,
                    infl, failed, (double)wmax / 1000.0);
            last_acked = acked;
            last_bytes = bytes;
            last_t = now;
            next += (int64_t)(cfg.progress * 1e9);
        }
    }

    hdr_t *lat = hdr_new(), *svc = hdr_new(), *lag = hdr_new();
    struct err_kinds errs = {0};
    long long sent = 0, acked = 0, failed = 0, unsent = 0;
    int early = 0, behind = 0;
    int64_t measured_ok = 0, measured_bytes = 0, last_dr = 0;
    for (int i = 0; i < cfg.producers; i++) {
        struct producer *p = &ps[i];
        pthread_join(p->sender, NULL);
        pthread_join(p->poller, NULL);
        hdr_merge(lat, p->lat);
        hdr_merge(svc, p->svc);
        hdr_merge(lag, p->lag);
        err_merge(&errs, &p->send_errs);
        err_merge(&errs, &p->dr_errs);
        sent += atomic_load(&p->sent);
        acked += atomic_load(&p->acked);
        failed += atomic_load(&p->failed);
        unsent += p->unsent;
        early |= p->early;
        behind |= p->behind;
        measured_ok += p->measured_ok;
        measured_bytes += p->measured_bytes;
        if (p->last_dr_ns > last_dr)
            last_dr = p->last_dr_ns;
    }
    double cpu_cores = cpu0 >= 0 && now_ns() > cpu0_t
                           ? (cpu_seconds() - cpu0) / ((double)(now_ns() - cpu0_t) / 1e9)
                           : 0;
    if (cfg.mode == M_E2E) {
        e2e.deadline = now_ns() + (int64_t)(cfg.e2e_timeout * 1e9);
        atomic_store(&e2e.target, acked);
        e2e_stop(&e2e);
    }
    long long tail_consumed = 0, tail_errors = 0;
    for (int i = 0; i < cfg.tail_readers; i++) {
        tails[i].deadline = now_ns() + (int64_t)(cfg.e2e_timeout * 1e9);
        atomic_store(&tails[i].target, acked);
    }
    tails_each(tails, cfg.tail_readers, nparts, tail_stop_main);
    for (int i = 0; i < cfg.tail_readers; i++) {
        tail_consumed += atomic_load(&tails[i].consumed);
        tail_errors += tails[i].errors;
    }
    free(tails);
    /* Throughput: acknowledged payload of the measured records over the time
     * from the start of measurement to the last of their delivery reports. */
    double secs = last_dr > measure_from ? (double)(last_dr - measure_from) / 1e9 : 0;
    double rps = secs > 0 ? (double)measured_ok / secs : 0;
    double mbs = secs > 0 ? (double)measured_bytes / secs / 1e6 : 0;

    if (cfg.json) {
        printf("{\"mode\":\"%s\",\"bootstrap\":\"%s\",\"topic\":\"%s\",\"partitions\":%d,"
               "\"record_size\":%ld,\"acks\":\"%s\",\"idempotence\":%s,\"compression\":\"%s\","
               "\"linger_ms\":%s,\"batch_size\":%s,\"producers\":%d,\"rate\":%.1f,"
               "\"max_inflight\":%ld,\"warmup_s\":%.3f,\"duration_s\":%.3f,\"sticky\":%ld,",
               cfg.mode == M_E2E ? "e2e" : "produce", cfg.bootstrap, cfg.topic, nparts, cfg.size,
               cfg.acks, cfg.idempotence ? "true" : "false", cfg.compression,
               cfg.linger_ms ? cfg.linger_ms : "null", cfg.batch_size ? cfg.batch_size : "null",
               cfg.producers, cfg.rate, cfg.max_inflight, cfg.warmup, cfg.duration, cfg.sticky);
        if (cfg.nplist) {
            printf("\"partitions_list\":[");
            for (int k = 0; k < cfg.nplist; k++)
                printf("%s%d", k ? "," : "", cfg.plist[k]);
            printf("],");
        }
        printf("\"sent\":%lld,\"acked\":%lld,\"failed\":%lld,\"unsent\":%lld,"
               "\"stopped_early\":%s,\"fell_behind\":%s,\"errors\":",
               sent, acked, failed, unsent, early ? "true" : "false", behind ? "true" : "false");
        print_errs_json(&errs);
        printf(",\"measured\":%lld,\"seconds\":%.3f,\"records_s\":%.1f,\"mb_s\":%.3f,"
               "\"client_cpu_cores\":%.2f,",
               (long long)measured_ok, secs, rps, mbs, cpu_cores);
        printf("\"latency\":");
        hdr_json(lat, stdout);
        if (cfg.buckets) {
            printf(",\"latency_buckets\":");
            hdr_json_buckets(lat, stdout);
        }
        printf(",\"service_latency\":");
        hdr_json(svc, stdout);
        printf(",\"send_lag\":");
        hdr_json(lag, stdout);
        if (cfg.mode == M_E2E) {
            printf(",\"e2e\":{\"consumed\":%lld,\"foreign\":%lld,\"errors\":%lld,\"latency\":",
                   (long long)atomic_load(&e2e.consumed), (long long)e2e.foreign,
                   (long long)e2e.errors);
            hdr_json(e2e.lat, stdout);
            if (cfg.buckets) {
                printf(",\"latency_buckets\":");
                hdr_json_buckets(e2e.lat, stdout);
            }
            printf(",\"tail_readers\":%d,\"tail_consumed\":%lld,\"tail_errors\":%lld}",
                   cfg.tail_readers, tail_consumed, tail_errors);
        }
        printf("}\n");
    } else {
        printf("%s %s topic %s: %d partitions, %ld B records, acks=%s%s, compression %s, "
               "%d producer(s), %s\n",
               cfg.mode == M_E2E ? "e2e" : "produce", cfg.bootstrap, cfg.topic, nparts, cfg.size,
               cfg.acks, cfg.idempotence ? " idempotent" : "", cfg.compression, cfg.producers,
               cfg.rate > 0 ? "fixed rate" : "max throughput");
        if (cfg.rate > 0)
            printf("  target rate      %.0f rec/s\n", cfg.rate);
        printf("  sent %lld, acked %lld, failed %lld, unsent %lld%s\n", sent, acked, failed, unsent,
               behind ? " (FELL BEHIND: STOPPED EARLY)" : early ? " (STOPPED EARLY)" : "");
        print_errs_text(&errs);
        printf("  throughput       %.0f rec/s, %.2f MB/s over %.2f s (%lld measured records)\n",
               rps, mbs, secs, (long long)measured_ok);
        printf("  skload CPU       %.2f cores\n", cpu_cores);
        print_lat_text("latency", lat);
        print_lat_text("service latency", svc);
        print_lat_text("send lag", lag);
        if (cfg.mode == M_E2E) {
            printf("  e2e consumed %lld of %lld acked\n", (long long)atomic_load(&e2e.consumed),
                   acked);
            print_lat_text("end-to-end", e2e.lat);
            if (cfg.tail_readers)
                printf("  %d tail readers consumed %lld records (%lld errors)\n", cfg.tail_readers,
                       tail_consumed, tail_errors);
        }
    }

    for (int i = 0; i < cfg.producers; i++) {
        struct producer *p = &ps[i];
        rd_kafka_topic_destroy(p->rkt);
        rd_kafka_destroy(p->rk);
        hdr_destroy(p->lat);
        hdr_destroy(p->svc);
        hdr_destroy(p->lag);
        free(p->payload);
    }
    free(ps);
    hdr_destroy(lat);
    hdr_destroy(svc);
    hdr_destroy(lag);
    if (cfg.mode == M_E2E)
        hdr_destroy(e2e.lat);
    return measured_ok > 0 ? 0 : 1;
}

static int run_consume(void)
{
    int nparts = ensure_topic();
    rd_kafka_t *rk = new_consumer("skload-catchup", 1);
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, cfg.topic, NULL);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    int64_t *end = calloc((size_t)nparts, sizeof(*end));
    int64_t *lo = calloc((size_t)nparts, sizeof(*lo));
    int open = 0;
    long long avail = 0;
    for (int p = 0; p < nparts; p++) {
        rd_kafka_resp_err_t err = watermarks(rk, p, &lo[p], &end[p]);
        if (err)
            fatal("ListOffsets %s/%d: %s", cfg.topic, p, rd_kafka_err2str(err));
        avail += end[p] - lo[p];
        if (end[p] > lo[p])
            open++;
    }
    int64_t t0 = now_ns(), first = 0, last = t0;
    double cpu0 = cpu_seconds();
    char *started = calloc((size_t)nparts, 1);
    for (int p = 0; p < nparts; p++) {
        if (end[p] <= lo[p])
            continue;
        /* The log start offset itself, not OFFSET_BEGINNING, which costs a ListOffsets. */
        if (rd_kafka_consume_start_queue(rkt, p, lo[p], q) < 0)
            fatal("consume %s/%d: %s", cfg.topic, p, rd_kafka_err2str(rd_kafka_last_error()));
        started[p] = 1;
    }
    int64_t deadline = cfg.duration > 0 ? t0 + (int64_t)(cfg.duration * 1e9) : INT64_MAX;
    long long records = 0, bytes = 0, errors = 0;
    int64_t next = t0 + (int64_t)(cfg.progress * 1e9);
    while (open > 0 && (cfg.bytes <= 0 || bytes < cfg.bytes) && !atomic_load(&stop_flag)) {
        int64_t now = now_ns();
        if (now > deadline) {
            fprintf(stderr, "skload: catch-up stopped by --duration\n");
            break;
        }
        if (cfg.progress > 0 && now >= next) {
            fprintf(stderr, "skload: %6.1fs read %lld records, %.1f MB\n", (double)(now - t0) / 1e9,
                    records, (double)bytes / 1e6);
            next += (int64_t)(cfg.progress * 1e9);
        }
        rd_kafka_message_t *m = rd_kafka_consume_queue(q, 100);
        if (!m)
            continue;
        int p = m->partition;
        if (m->err == RD_KAFKA_RESP_ERR__PARTITION_EOF) {
            /* EOF at or past the start-time end closes the partition. */
            if (p >= 0 && p < nparts && end[p] >= 0 && m->offset >= end[p]) {
                end[p] = -1;
                open--;
            }
        } else if (m->err) {
            errors++;
            fprintf(stderr, "skload: consume: %s\n", rd_kafka_message_errstr(m));
        } else {
            last = now_ns();
            if (!first)
                first = last;
            records++;
            bytes += (long long)(m->len + m->key_len);
            if (p >= 0 && p < nparts && end[p] >= 0 && m->offset + 1 >= end[p]) {
                end[p] = -1;
                open--;
            }
        }
        rd_kafka_message_destroy(m);
    }
    double secs = (double)(last - t0) / 1e9;
    double cpu_cores = (cpu_seconds() - cpu0) / ((double)(now_ns() - t0) / 1e9);
    for (int p = 0; p < nparts; p++)
        if (started[p])
            rd_kafka_consume_stop(rkt, p);
    rd_kafka_queue_destroy(q);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    free(started);
    free(end);
    free(lo);
    double mbs = secs > 0 ? (double)bytes / secs / 1e6 : 0;
    double rps = secs > 0 ? (double)records / secs : 0;
    double first_ms = first ? (double)(first - t0) / 1e6 : 0;
    if (cfg.json) {
        printf("{\"mode\":\"consume\",\"bootstrap\":\"%s\",\"topic\":\"%s\",\"partitions\":%d,"
               "\"available_records\":%lld,\"records\":%lld,\"bytes\":%lld,\"errors\":%lld,"
               "\"seconds\":%.3f,\"first_record_ms\":%.3f,\"records_s\":%.1f,\"mb_s\":%.3f,"
               "\"client_cpu_cores\":%.2f}\n",
               cfg.bootstrap, cfg.topic, nparts, avail, records, bytes, errors, secs, first_ms,
               rps, mbs, cpu_cores);
    } else {
        printf("consume %s topic %s: %d partitions, %lld records available from offset 0\n",
               cfg.bootstrap, cfg.topic, nparts, avail);
        printf("  read %lld records, %lld bytes in %.3f s (first record after %.1f ms), "
               "%lld errors\n", records, bytes, secs, first_ms, errors);
        printf("  throughput %.0f rec/s, %.2f MB/s; skload CPU %.2f cores\n", rps, mbs, cpu_cores);
    }
    return records > 0 ? 0 : 1;
}

static int run_metadata(void)
{
    rd_kafka_t *rk = new_client(RD_KAFKA_PRODUCER, base_conf("skload-metadata"));
    const struct rd_kafka_metadata *md;
    int64_t t0 = now_ns();
    rd_kafka_resp_err_t err = rd_kafka_metadata(rk, 1, NULL, &md,
                                                cfg.duration > 0 ? (int)(cfg.duration * 1000)
                                                                 : 10000);
    double ms = (double)(now_ns() - t0) / 1e6;
    if (err) {
        fprintf(stderr, "skload: metadata %s: %s\n", cfg.bootstrap, rd_kafka_err2str(err));
        rd_kafka_destroy(rk);
        return 1;
    }
    if (cfg.json) {
        printf("{\"mode\":\"metadata\",\"ms\":%.3f,\"brokers\":[", ms);
        for (int i = 0; i < md->broker_cnt; i++)
            printf("%s{\"id\":%d,\"host\":\"%s\",\"port\":%d}", i ? "," : "", md->brokers[i].id,
                   md->brokers[i].host, md->brokers[i].port);
        printf("],\"topics\":[");
        for (int i = 0; i < md->topic_cnt; i++)
            printf("%s{\"name\":\"%s\",\"partitions\":%d}", i ? "," : "", md->topics[i].topic,
                   md->topics[i].partition_cnt);
        printf("]}\n");
    } else {
        printf("metadata from %s in %.1f ms\n", cfg.bootstrap, ms);
        for (int i = 0; i < md->broker_cnt; i++)
            printf("  broker %d %s:%d\n", md->brokers[i].id, md->brokers[i].host,
                   md->brokers[i].port);
        for (int i = 0; i < md->topic_cnt; i++)
            printf("  topic %s: %d partitions\n", md->topics[i].topic,
                   md->topics[i].partition_cnt);
    }
    rd_kafka_metadata_destroy(md);
    rd_kafka_destroy(rk);
    return 0;
}

/* ------------------------------------------------------------------- main */

static void usage(int rc)
{
    fprintf(rc ? stderr : stdout,
        "usage: skload [options]\n"
        "  -b, --bootstrap HOST:PORT   broker (default 127.0.0.1:9092)\n"
        "  -t, --topic NAME            topic (default skload); created if missing\n"
        "      --mode MODE             produce (default) | e2e | consume | metadata\n"
        "      --e2e, --consume        short for --mode e2e / --mode consume\n"
        "  -p, --partitions N          partitions when creating the topic (default 1)\n"
        "      --replication-factor N  when creating (default -1: broker default, else 1)\n"
        "      --no-create             fail instead of creating a missing topic\n"
        "      --topic-config key=value  topic config when creating it (repeatable), e.g.\n"
        "                              flush.messages=1\n"
        "  -s, --size BYTES            record value size (default 1024; e2e needs >= 32)\n"
        "  -n, --count N               records to send (all producers together)\n"
        "  -d, --duration S            seconds to send after warm-up (default 10 unless\n"
        "                              --count); in consume mode, an upper bound\n"
        "      --warmup S              seconds sent first and left out of the figures\n"
        "  -r, --rate N                records/s, all producers together, paced from a\n"
        "                              schedule; 0 = as fast as possible (default)\n"
        "      --max-inflight N        records sent but not acknowledged, all producers\n"
        "                              together (default 10000; 0 = librdkafka's queue only)\n"
        "  -a, --acks all|1|0          (default all)\n"
        "      --idempotence           enable.idempotence=true\n"
        "  -z, --compression C         none|gzip|snappy|lz4|zstd (default none)\n"
        "      --linger-ms X           linger.ms (default: librdkafka's, 5)\n"
        "      --batch-size BYTES      batch.size (default: librdkafka's, 1000000)\n"
        "  -P, --producers N           producer instances, one connection each (default 1)\n"
        "      --round-robin           record i to partition i mod N (default: librdkafka's\n"
        "                              sticky partitioner)\n"
        "      --partitions-list L     only these partitions (comma-separated), in turn; the\n"
        "                              e2e consumer reads only these\n"
        "      --sticky N              with --round-robin or --partitions-list: N records\n"
        "                              in a row to one partition, then the next (default 1)\n"
        "      --client-id ID          client.id of every client of this process (default\n"
        "                              skload-...; -X/-C client.id override it per client)\n"
        "      --payload random|text   record content, new for each record (default random:\n"
        "                              incompressible; text: zstd ~2.2x)\n"
        "      --bytes N               consume mode: stop after N payload bytes\n"
        "      --drain-timeout S       wait for outstanding acknowledgements (default 30)\n"
        "      --e2e-timeout S         wait for the consumer after the last ack (default 10)\n"
        "      --tail-readers N        e2e: N more consumers read the records at the head and\n"
        "                              count them (fan-out tail reads; default 0)\n"
        "      --max-behind S          fixed rate: stop sending once S seconds behind the\n"
        "                              schedule; the rest is reported unsent (default 0: never)\n"
        "      --progress S            progress line on stderr every S s (default 1; 0 off)\n"
        "  -X key=value                librdkafka producer/admin property (repeatable);\n"
        "                              security.*, sasl.* and ssl.* ones reach every client\n"
        "  -C key=value                librdkafka consumer property (repeatable)\n"
        "      --json                  one JSON object on stdout\n"
        "      --buckets               with --json: also the latency histograms' buckets\n");
    exit(rc);
}

static double parse_num(const char *s, const char *what)
{
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || *end)
        fatal("bad %s: %s", what, s);
    return v;
}

int main(int argc, char **argv)
{
    enum {
        OPT_MODE = 256, OPT_E2E, OPT_CONSUME, OPT_RF, OPT_NOCREATE, OPT_WARMUP, OPT_MAXINF, OPT_IDEMP,
        OPT_LINGER, OPT_BATCH, OPT_RR, OPT_PAYLOAD, OPT_BYTES, OPT_DRAIN, OPT_E2ET, OPT_TAILR, OPT_PROGRESS, OPT_JSON,
        OPT_TCONFIG, OPT_MAXBEHIND, OPT_BUCKETS, OPT_PLIST, OPT_STICKY, OPT_CLIENTID,
    };
    static const struct option opts[] = {
        {"bootstrap", required_argument, 0, 'b'},
        {"topic", required_argument, 0, 't'},
        {"mode", required_argument, 0, OPT_MODE},
        {"e2e", no_argument, 0, OPT_E2E},
        {"consume", no_argument, 0, OPT_CONSUME},
        {"partitions", required_argument, 0, 'p'},
        {"replication-factor", required_argument, 0, OPT_RF},
        {"no-create", no_argument, 0, OPT_NOCREATE},
        {"size", required_argument, 0, 's'},
        {"count", required_argument, 0, 'n'},
        {"duration", required_argument, 0, 'd'},
        {"warmup", required_argument, 0, OPT_WARMUP},
        {"rate", required_argument, 0, 'r'},
        {"max-inflight", required_argument, 0, OPT_MAXINF},
        {"acks", required_argument, 0, 'a'},
        {"idempotence", no_argument, 0, OPT_IDEMP},
        {"compression", required_argument, 0, 'z'},
        {"linger-ms", required_argument, 0, OPT_LINGER},
        {"batch-size", required_argument, 0, OPT_BATCH},
        {"producers", required_argument, 0, 'P'},
        {"round-robin", no_argument, 0, OPT_RR},
        {"payload", required_argument, 0, OPT_PAYLOAD},
        {"bytes", required_argument, 0, OPT_BYTES},
        {"drain-timeout", required_argument, 0, OPT_DRAIN},
        {"e2e-timeout", required_argument, 0, OPT_E2ET},
        {"tail-readers", required_argument, 0, OPT_TAILR},
        {"progress", required_argument, 0, OPT_PROGRESS},
        {"json", no_argument, 0, OPT_JSON},
        {"topic-config", required_argument, 0, OPT_TCONFIG},
        {"max-behind", required_argument, 0, OPT_MAXBEHIND},
        {"buckets", no_argument, 0, OPT_BUCKETS},
        {"partitions-list", required_argument, 0, OPT_PLIST},
        {"sticky", required_argument, 0, OPT_STICKY},
        {"client-id", required_argument, 0, OPT_CLIENTID},
        {"help", no_argument, 0, 'h'},
        {0, 0, 0, 0},
    };
    int c;
    while ((c = getopt_long(argc, argv, "b:t:p:s:n:d:r:a:z:P:X:C:h", opts, NULL)) != -1) {
        switch (c) {
        case 'b': cfg.bootstrap = optarg; break;
        case 't': cfg.topic = optarg; break;
        case OPT_MODE:
            if (!strcmp(optarg, "produce")) cfg.mode = M_PRODUCE;
            else if (!strcmp(optarg, "e2e")) cfg.mode = M_E2E;
            else if (!strcmp(optarg, "consume")) cfg.mode = M_CONSUME;
            else if (!strcmp(optarg, "metadata")) cfg.mode = M_METADATA;
            else fatal("unknown mode %s", optarg);
            break;
        case OPT_E2E: cfg.mode = M_E2E; break;
        case OPT_CONSUME: cfg.mode = M_CONSUME; break;
        case 'p': cfg.partitions = (int)parse_num(optarg, "partitions"); break;
        case OPT_RF: cfg.replication = (int)parse_num(optarg, "replication factor"); break;
        case OPT_NOCREATE: cfg.create = 0; break;
        case 's': cfg.size = (long)parse_num(optarg, "size"); break;
        case 'n': cfg.count = (long long)parse_num(optarg, "count"); break;
        case 'd': cfg.duration = parse_num(optarg, "duration"); break;
        case OPT_WARMUP: cfg.warmup = parse_num(optarg, "warmup"); break;
        case 'r': cfg.rate = parse_num(optarg, "rate"); break;
        case OPT_MAXINF: cfg.max_inflight = (long)parse_num(optarg, "max-inflight"); break;
        case 'a': cfg.acks = optarg; break;
        case OPT_IDEMP: cfg.idempotence = 1; break;
        case 'z': cfg.compression = optarg; break;
        case OPT_LINGER: parse_num(optarg, "linger.ms"); cfg.linger_ms = optarg; break;
        case OPT_BATCH: parse_num(optarg, "batch size"); cfg.batch_size = optarg; break;
        case 'P': cfg.producers = (int)parse_num(optarg, "producers"); break;
        case OPT_RR: cfg.round_robin = 1; break;
        case OPT_PAYLOAD:
            if (!strcmp(optarg, "text")) cfg.text_payload = 1;
            else if (strcmp(optarg, "random")) fatal("unknown payload %s", optarg);
            break;
        case OPT_BYTES: cfg.bytes = (long long)parse_num(optarg, "bytes"); break;
        case OPT_DRAIN: cfg.drain_timeout = parse_num(optarg, "drain timeout"); break;
        case OPT_E2ET: cfg.e2e_timeout = parse_num(optarg, "e2e timeout"); break;
        case OPT_TAILR: cfg.tail_readers = (int)parse_num(optarg, "tail readers"); break;
        case OPT_PROGRESS: cfg.progress = parse_num(optarg, "progress"); break;
        case OPT_JSON: cfg.json = 1; break;
        case OPT_TCONFIG:
            if (cfg.ntconfigs == MAX_PROPS) fatal("too many --topic-config");
            if (!strchr(optarg, '=')) fatal("topic config '%s' is not key=value", optarg);
            cfg.tconfigs[cfg.ntconfigs++] = optarg;
            break;
        case OPT_MAXBEHIND: cfg.max_behind = parse_num(optarg, "max-behind"); break;
        case OPT_BUCKETS: cfg.buckets = 1; break;
        case OPT_PLIST: {
            char *copy = strdup(optarg), *save = NULL;
            for (char *t = strtok_r(copy, ",", &save); t; t = strtok_r(NULL, ",", &save)) {
                if (cfg.nplist == MAX_PLIST)
                    fatal("--partitions-list: more than %d partitions", MAX_PLIST);
                double v = parse_num(t, "partition");
                if (v < 0 || v != (int)v)
                    fatal("--partitions-list: bad partition %s", t);
                cfg.plist[cfg.nplist++] = (int)v;
            }
            free(copy);
            if (!cfg.nplist)
                fatal("--partitions-list: empty");
            break;
        }
        case OPT_STICKY: cfg.sticky = (long)parse_num(optarg, "sticky"); break;
        case OPT_CLIENTID: cfg.client_id = optarg; break;
        case 'X':
            if (cfg.npprops == MAX_PROPS) fatal("too many -X");
            cfg.pprops[cfg.npprops++] = optarg;
            break;
        case 'C':
            if (cfg.ncprops == MAX_PROPS) fatal("too many -C");
            cfg.cprops[cfg.ncprops++] = optarg;
            break;
        case 'h': usage(0); break;
        default: usage(2);
        }
    }
    if (optind != argc)
        usage(2);
    if (cfg.partitions < 1 || cfg.size < 0 || cfg.producers < 1 || cfg.rate < 0 ||
        cfg.warmup < 0 || cfg.max_inflight < 0 || cfg.sticky < 1)
        fatal("partitions, producers, sticky >= 1; size, rate, warmup, max-inflight >= 0");
    if (cfg.tail_readers < 0 || (cfg.tail_readers > 0 && cfg.mode != M_E2E))
        fatal("--tail-readers needs e2e mode and a count >= 0");
    if (cfg.mode == M_E2E && cfg.size < HDR_BYTES)
        fatal("e2e mode needs records of at least %d bytes", HDR_BYTES);
    if ((cfg.mode == M_PRODUCE || cfg.mode == M_E2E) && cfg.count < 0 && cfg.duration <= 0)
        cfg.duration = 10;

    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    run_id = ((uint64_t)getpid() << 32) ^ (uint64_t)now_ns();

    switch (cfg.mode) {
    case M_METADATA: return run_metadata();
    case M_CONSUME: return run_consume();
    default: return run_produce();
    }
}
