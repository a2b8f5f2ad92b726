/*
 * hdr: a log-linear latency histogram for the benchmark tools.
 *
 * Contract
 *  - Records integer values in microseconds from 0 to HDR_MAX_US (60 s);
 *    larger values are clamped to HDR_MAX_US and counted in `clamped`.
 *  - Values below 256 us are kept exactly; above, each power-of-two range is
 *    split into 128 equal buckets, so a reported percentile is never more
 *    than 1/128 (0.78 %) above the true value. The exact minimum and maximum
 *    are tracked beside the buckets.
 *  - Percentiles return the highest value of the bucket that holds the
 *    requested rank (the conservative side), capped by the exact maximum.
 *  - A histogram is plain memory with no locks: one thread records into it;
 *    merge per-thread histograms with hdr_merge once the threads are done.
 *  - hdr_new returns NULL when out of memory; nothing else fails.
 */
#ifndef SKIFF_BENCH_HDR_H
#define SKIFF_BENCH_HDR_H

#include <stdint.h>
#include <stdio.h>

#define HDR_SUB_BITS 7                     /* 128 buckets per power of two */
#define HDR_MAX_US   (60LL * 1000 * 1000)  /* 60 s */

typedef struct hdr {
    int64_t count;
    int64_t clamped;   /* values above HDR_MAX_US, recorded as HDR_MAX_US */
    int64_t min;
    int64_t max;
    double sum;
    int nbuckets;
    int64_t *buckets;
} hdr_t;

hdr_t *hdr_new(void);
void hdr_destroy(hdr_t *h);
void hdr_reset(hdr_t *h);

void hdr_record(hdr_t *h, int64_t value_us);
/* Adds every value of src into dst. */
void hdr_merge(hdr_t *dst, const hdr_t *src);

/* q in [0, 100]; returns 0 on an empty histogram. */
int64_t hdr_percentile(const hdr_t *h, double q);
double hdr_mean(const hdr_t *h);

/* Bucket geometry, exposed for the self-test. */
int hdr_index(int64_t value_us);
int64_t hdr_bucket_low(int idx);
int64_t hdr_bucket_high(int idx);

/*
 * Writes {"count":..,"min_ms":..,"p50_ms":..,"p90_ms":..,"p99_ms":..,
 * "p999_ms":..,"max_ms":..,"mean_ms":..,"clamped":..} (milliseconds with
 * microsecond resolution).
 */
void hdr_json(const hdr_t *h, FILE *out);

/*
 * Writes the non-empty buckets as [[high_us,count],...], lowest first: the
 * whole distribution, for CDF plots and for pooling runs (sum the counts of
 * equal high_us). high_us is the bucket's upper edge, the value a
 * percentile that falls in it reports.
 */
void hdr_json_buckets(const hdr_t *h, FILE *out);

#endif
