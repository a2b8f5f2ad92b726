/*
 * rdk_produce: an idempotent librdkafka producer whose every delivery report is
 * checked by reading the records back, for tests/integration/test_1002.
 *
 *   rdk_produce -b HOST:PORT -t TOPIC [-n COUNT] [-P PARTITIONS] [-s SIZE]
 *               [-T TIMEOUT_S] [-X key=value]... [-v]
 *
 * Produce: acks=all, enable.idempotence=true; record i goes to partition
 * i % PARTITIONS with key "k-i", a value derived from i and a header idx=i.
 * Each delivery report's partition and offset are kept. Consume: the legacy
 * per-partition consumer (no group.id, so no coordinator) reads every
 * partition from the beginning and checks that
 * each record is the one reported at that partition and offset. -X applies to
 * both clients (for instance debug=eos,feature,broker). -v prints every
 * delivery report as "DR i partition offset".
 *
 * Prints a JSON summary on stdout and details of the first problems on
 * stderr; exits 0 only if all COUNT records were acknowledged and read back
 * exactly once at their reported place. Everything is bounded by TIMEOUT_S.
 */
#include <errno.h>
#include <inttypes.h>
#include <librdkafka/rdkafka.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MAX_PARTITIONS 256
#define MAX_EXTRA 32
#define MAX_REPORTED 20

struct rec {
    int32_t partition; /* from the delivery report; -1 before it arrives */
    int64_t offset;
    rd_kafka_resp_err_t err;
    int delivered;
    int seen; /* times read back */
};

static struct rec *recs;
static long n_recs;
static long n_dr, n_dr_err, n_bad_read, n_dup, n_unknown;
static int verbose;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void problem(long *counter, const char *fmt, ...) {
    va_list ap;
    if (++*counter > MAX_REPORTED)
        return;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

/* The value of record i: "v-<i>-" then letters from a small LCG, size bytes. */
static void make_value(long i, char *buf, size_t size) {
    int n = snprintf(buf, size + 1, "v-%ld-", i);
    uint64_t x = (uint64_t)i * 2654435761u + 17;
    for (size_t j = (size_t)n; j < size; j++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        buf[j] = (char)('a' + (x >> 33) % 26);
    }
}

static void dr_cb(rd_kafka_t *rk, const rd_kafka_message_t *m, void *opaque) {
    (void)rk;
    (void)opaque;
    long i = (long)(intptr_t)m->_private;
    if (i < 0 || i >= n_recs) {
        problem(&n_unknown, "delivery report for unknown record %ld", i);
        return;
    }
    struct rec *r = &recs[i];
    if (r->delivered) {
        problem(&n_dup, "second delivery report for record %ld", i);
        return;
    }
    r->delivered = 1;
    r->err = m->err;
    n_dr++;
    if (m->err) {
        problem(&n_dr_err, "record %ld not delivered: %s", i, rd_kafka_err2str(m->err));
        return;
    }
    r->partition = m->partition;
    r->offset = m->offset;
    if (verbose)
        printf("DR %ld %" PRId32 " %" PRId64 "\n", i, m->partition, m->offset);
}

static void log_cb(const rd_kafka_t *rk, int level, const char *fac, const char *buf) {
    fprintf(stderr, "%%%d|%.3f|%s|%s| %s\n", level, now_s(), fac, rk ? rd_kafka_name(rk) : "", buf);
}

static rd_kafka_conf_t *make_conf(const char *bootstrap, char **extra, int n_extra) {
    char err[512];
    rd_kafka_conf_t *conf = rd_kafka_conf_new();
    if (rd_kafka_conf_set(conf, "bootstrap.servers", bootstrap, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s\n", err);
        exit(2);
    }
    rd_kafka_conf_set_log_cb(conf, log_cb);
    for (int i = 0; i < n_extra; i++) {
        char *eq = strchr(extra[i], '=');
        if (!eq) {
            fprintf(stderr, "-X wants key=value, got %s\n", extra[i]);
            exit(2);
        }
        *eq = '\0';
        rd_kafka_conf_res_t res = rd_kafka_conf_set(conf, extra[i], eq + 1, err, sizeof err);
        *eq = '=';
        if (res != RD_KAFKA_CONF_OK) {
            fprintf(stderr, "%s\n", err);
            exit(2);
        }
    }
    return conf;
}

static void set(rd_kafka_conf_t *conf, const char *k, const char *v) {
    char err[512];
    if (rd_kafka_conf_set(conf, k, v, err, sizeof err) != RD_KAFKA_CONF_OK) {
        fprintf(stderr, "%s=%s: %s\n", k, v, err);
        exit(2);
    }
}

static double produce(const char *bootstrap, const char *topic, int parts, size_t size,
                      double deadline, char **extra, int n_extra) {
    char err[512];
    rd_kafka_conf_t *conf = make_conf(bootstrap, extra, n_extra);
    /* Our settings win over -X: this program is about acks=all + idempotence. */
    set(conf, "client.id", "skiff-test-rdk-produce");
    set(conf, "acks", "all");
    set(conf, "enable.idempotence", "true");
    set(conf, "message.timeout.ms", "60000");
    rd_kafka_conf_set_dr_msg_cb(conf, dr_cb);
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_PRODUCER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "producer: %s\n", err);
        exit(2);
    }
    char *value = malloc(size + 1);
    char key[32], idx[32];
    double t0 = now_s();
    for (long i = 0; i < n_recs; i++) {
        make_value(i, value, size);
        int klen = snprintf(key, sizeof key, "k-%ld", i);
        int ilen = snprintf(idx, sizeof idx, "%ld", i);
        for (;;) {
            rd_kafka_resp_err_t e = rd_kafka_producev(
                rk, RD_KAFKA_V_TOPIC(topic), RD_KAFKA_V_PARTITION(parts > 0 ? (int32_t)(i % parts) : RD_KAFKA_PARTITION_UA),
                RD_KAFKA_V_MSGFLAGS(RD_KAFKA_MSG_F_COPY), RD_KAFKA_V_KEY(key, (size_t)klen),
                RD_KAFKA_V_VALUE(value, size), RD_KAFKA_V_HEADER("idx", idx, ilen),
                RD_KAFKA_V_OPAQUE((void *)(intptr_t)i), RD_KAFKA_V_END);
            if (e == RD_KAFKA_RESP_ERR_NO_ERROR)
                break;
            if (e != RD_KAFKA_RESP_ERR__QUEUE_FULL || now_s() > deadline) {
                fprintf(stderr, "produce of record %ld failed: %s\n", i, rd_kafka_err2str(e));
                n_dr_err++;
                goto flush;
            }
            rd_kafka_poll(rk, 10);
        }
        rd_kafka_poll(rk, 0);
    }
flush:
    while (rd_kafka_outq_len(rk) > 0 && now_s() < deadline)
        rd_kafka_poll(rk, 50);
    double ms = (now_s() - t0) * 1000;
    if (rd_kafka_outq_len(rk) > 0)
        fprintf(stderr, "%d messages/requests still queued at the deadline\n", rd_kafka_outq_len(rk));
    /* A fatal idempotence error (e.g. OUT_OF_ORDER_SEQUENCE) is the broker's fault here. */
    char fatal[512];
    rd_kafka_resp_err_t fe = rd_kafka_fatal_error(rk, fatal, sizeof fatal);
    if (fe) {
        fprintf(stderr, "producer fatal error %s: %s\n", rd_kafka_err2name(fe), fatal);
        n_dr_err++;
    }
    rd_kafka_destroy(rk);
    free(value);
    return ms;
}

static double consume(const char *bootstrap, const char *topic, int parts, size_t size,
                      double deadline, char **extra, int n_extra, long *n_read) {
    char err[512];
    rd_kafka_conf_t *conf = make_conf(bootstrap, extra, n_extra);
    set(conf, "client.id", "skiff-test-rdk-consume");
    set(conf, "enable.partition.eof", "false");
    /* The legacy per-partition consumer: no group.id, so no coordinator. */
    rd_kafka_t *rk = rd_kafka_new(RD_KAFKA_CONSUMER, conf, err, sizeof err);
    if (!rk) {
        fprintf(stderr, "consumer: %s\n", err);
        exit(2);
    }
    rd_kafka_topic_t *rkt = rd_kafka_topic_new(rk, topic, NULL);
    rd_kafka_queue_t *q = rd_kafka_queue_new(rk);
    for (int p = 0; p < parts; p++) {
        if (rd_kafka_consume_start_queue(rkt, p, RD_KAFKA_OFFSET_BEGINNING, q) == -1) {
            fprintf(stderr, "consume_start p%d: %s\n", p, rd_kafka_err2str(rd_kafka_last_error()));
            exit(2);
        }
    }
    /* Only records with a delivery report can be expected back. */
    long want = 0;
    for (long i = 0; i < n_recs; i++)
        want += recs[i].delivered && !recs[i].err;
    char *expect = malloc(size + 1);
    double t0 = now_s();
    long got = 0;
    while (got < want && now_s() < deadline) {
        rd_kafka_message_t *m = rd_kafka_consume_queue(q, 200);
        if (!m)
            continue;
        if (m->err) {
            fprintf(stderr, "consumer error: %s\n", rd_kafka_message_errstr(m));
            rd_kafka_message_destroy(m);
            continue;
        }
        got++;
        long i = -1;
        char kbuf[32];
        if (m->key && m->key_len > 2 && m->key_len < sizeof kbuf) {
            memcpy(kbuf, m->key, m->key_len);
            kbuf[m->key_len] = '\0';
            char *end;
            errno = 0;
            i = strtol(kbuf + 2, &end, 10);
            if (strncmp(kbuf, "k-", 2) != 0 || *end || errno)
                i = -1;
        }
        if (i < 0 || i >= n_recs) {
            problem(&n_bad_read, "p%" PRId32 "@%" PRId64 ": unexpected key", m->partition, m->offset);
        } else {
            struct rec *r = &recs[i];
            const void *hv = NULL;
            size_t hlen = 0;
            rd_kafka_headers_t *hdrs = NULL;
            char ibuf[32];
            int ilen = snprintf(ibuf, sizeof ibuf, "%ld", i);
            make_value(i, expect, size);
            if (r->seen++)
                problem(&n_dup, "record %ld read again at p%" PRId32 "@%" PRId64, i, m->partition,
                        m->offset);
            else if (!r->delivered || r->err)
                problem(&n_bad_read, "record %ld read at p%" PRId32 "@%" PRId64
                        " but its delivery report said %s", i, m->partition, m->offset,
                        r->delivered ? rd_kafka_err2str(r->err) : "nothing");
            else if (r->partition != m->partition || r->offset != m->offset)
                problem(&n_bad_read, "record %ld read at p%" PRId32 "@%" PRId64
                        ", delivery report said p%" PRId32 "@%" PRId64, i, m->partition,
                        m->offset, r->partition, r->offset);
            else if (m->len != size || memcmp(m->payload, expect, size) != 0)
                problem(&n_bad_read, "record %ld: wrong value (%zu bytes)", i, m->len);
            else if (rd_kafka_message_headers(m, &hdrs) || !hdrs ||
                     rd_kafka_header_get_last(hdrs, "idx", &hv, &hlen) || hlen != (size_t)ilen ||
                     memcmp(hv, ibuf, hlen) != 0)
                problem(&n_bad_read, "record %ld: header idx missing or wrong", i);
        }
        rd_kafka_message_destroy(m);
    }
    double ms = (now_s() - t0) * 1000;
    *n_read = got;
    free(expect);
    for (int p = 0; p < parts; p++)
        rd_kafka_consume_stop(rkt, p);
    rd_kafka_queue_destroy(q);
    rd_kafka_topic_destroy(rkt);
    rd_kafka_destroy(rk);
    return ms;
}

int main(int argc, char **argv) {
    const char *bootstrap = NULL, *topic = NULL;
    long n = 10000;
    int parts = 1;
    size_t size = 100;
    double timeout = 120;
    char *extra[MAX_EXTRA];
    int n_extra = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-v")) {
            verbose = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "%s needs a value\n", a);
            return 2;
        }
        const char *v = argv[++i];
        if (!strcmp(a, "-b"))
            bootstrap = v;
        else if (!strcmp(a, "-t"))
            topic = v;
        else if (!strcmp(a, "-n"))
            n = atol(v);
        else if (!strcmp(a, "-P"))
            parts = atoi(v);
        else if (!strcmp(a, "-s"))
            size = (size_t)atol(v);
        else if (!strcmp(a, "-T"))
            timeout = atof(v);
        else if (!strcmp(a, "-X") && n_extra < MAX_EXTRA)
            extra[n_extra++] = argv[i];
        else {
            fprintf(stderr, "unknown option %s\n", a);
            return 2;
        }
    }
    if (!bootstrap || !topic || n <= 0 || parts < 1 || parts > MAX_PARTITIONS || size < 24) {
        fprintf(stderr, "usage: %s -b HOST:PORT -t TOPIC [-n COUNT] [-P PARTITIONS<=%d] [-s SIZE>=24]"
                        " [-T TIMEOUT_S] [-X key=value]... [-v]\n", argv[0], MAX_PARTITIONS);
        return 2;
    }
    n_recs = n;
    recs = calloc((size_t)n, sizeof *recs);
    for (long i = 0; i < n; i++)
        recs[i].partition = -1;
    double deadline = now_s() + timeout;
    double produce_ms = produce(bootstrap, topic, parts, size, deadline, extra, n_extra);
    long n_read = 0;
    double consume_ms = consume(bootstrap, topic, parts, size, deadline, extra, n_extra, &n_read);

    /* Offsets per partition: a fresh topic must hold exactly 0..count-1. */
    long count[MAX_PARTITIONS] = {0};
    int64_t lo[MAX_PARTITIONS], hi[MAX_PARTITIONS];
    for (int p = 0; p < parts; p++) {
        lo[p] = INT64_MAX;
        hi[p] = -1;
    }
    long missing = 0;
    for (long i = 0; i < n; i++) {
        struct rec *r = &recs[i];
        if (!r->delivered || r->err)
            continue;
        if (!r->seen)
            problem(&missing, "record %ld (p%" PRId32 "@%" PRId64 ") never read back", i,
                    r->partition, r->offset);
        if (r->partition >= 0 && r->partition < parts) {
            count[r->partition]++;
            if (r->offset < lo[r->partition])
                lo[r->partition] = r->offset;
            if (r->offset > hi[r->partition])
                hi[r->partition] = r->offset;
        }
    }
    printf("{\"sent\":%ld,\"delivery_reports\":%ld,\"delivery_errors\":%ld,\"read\":%ld,"
           "\"bad_reads\":%ld,\"duplicates\":%ld,\"missing\":%ld,\"produce_ms\":%.0f,"
           "\"consume_ms\":%.0f,\"partitions\":[",
           n, n_dr, n_dr_err, n_read, n_bad_read, n_dup, missing, produce_ms, consume_ms);
    for (int p = 0; p < parts; p++)
        printf("%s{\"partition\":%d,\"count\":%ld,\"min_offset\":%" PRId64 ",\"max_offset\":%" PRId64 "}",
               p ? "," : "", p, count[p], count[p] ? lo[p] : -1, hi[p]);
    int ok = n_dr == n && !n_dr_err && !n_bad_read && !n_dup && !n_unknown && !missing && n_read == n;
    printf("],\"ok\":%s}\n", ok ? "true" : "false");
    free(recs);
    return ok ? 0 : 1;
}
