#include "hdr.h"

#include <stdlib.h>
#include <string.h>

#define SUB (1 << HDR_SUB_BITS) /* 128 */
#define EXACT (2 * SUB)         /* values below are their own bucket */

int hdr_index(int64_t v)
{
    if (v < 0)
        v = 0;
    if (v > HDR_MAX_US)
        v = HDR_MAX_US;
    if (v < EXACT)
        return (int)v;
    int msb = 63 - __builtin_clzll((unsigned long long)v);
    int shift = msb - HDR_SUB_BITS; /* >= 1 here: v >> shift lies in [SUB, 2*SUB) */
    return EXACT + (shift - 1) * SUB + (int)((v >> shift) - SUB);
}

int64_t hdr_bucket_low(int idx)
{
    if (idx < EXACT)
        return idx;
    int k = idx - EXACT;
    int shift = k / SUB + 1;
    return (int64_t)(k % SUB + SUB) << shift;
}

int64_t hdr_bucket_high(int idx)
{
    if (idx < EXACT)
        return idx;
    int shift = (idx - EXACT) / SUB + 1;
    return hdr_bucket_low(idx) + ((int64_t)1 << shift) - 1;
}

hdr_t *hdr_new(void)
{
    hdr_t *h = calloc(1, sizeof(*h));
    if (!h)
        return NULL;
    h->nbuckets = hdr_index(HDR_MAX_US) + 1;
    h->buckets = calloc((size_t)h->nbuckets, sizeof(*h->buckets));
    if (!h->buckets) {
        free(h);
        return NULL;
    }
    hdr_reset(h);
    return h;
}

void hdr_destroy(hdr_t *h)
{
    if (!h)
        return;
    free(h->buckets);
    free(h);
}

void hdr_reset(hdr_t *h)
{
    memset(h->buckets, 0, (size_t)h->nbuckets * sizeof(*h->buckets));
    h->count = 0;
    h->clamped = 0;
    h->min = INT64_MAX;
    h->max = 0;
    h->sum = 0;
}

void hdr_record(hdr_t *h, int64_t v)
{
    if (v < 0)
        v = 0;
    if (v > HDR_MAX_US) {
        v = HDR_MAX_US;
        h->clamped++;
    }
    h->buckets[hdr_index(v)]++;
    h->count++;
    h->sum += (double)v;
    if (v < h->min)
        h->min = v;
    if (v > h->max)
        h->max = v;
}

void hdr_merge(hdr_t *dst, const hdr_t *src)
{
    for (int i = 0; i < dst->nbuckets; i++)
        dst->buckets[i] += src->buckets[i];
    dst->count += src->count;
    dst->clamped += src->clamped;
    dst->sum += src->sum;
    if (src->count) {
        if (src->min < dst->min)
            dst->min = src->min;
        if (src->max > dst->max)
            dst->max = src->max;
    }
}

int64_t hdr_percentile(const hdr_t *h, double q)
{
    if (h->count == 0)
        return 0;
    if (q <= 0)
        return h->min;
    if (q >= 100)
        return h->max;
    /* The rank-th smallest value, rank counted from 1 (nearest-rank method). */
    int64_t rank = (int64_t)((q / 100.0) * (double)h->count + 0.9999999);
    if (rank < 1)
        rank = 1;
    int64_t seen = 0;
    for (int i = 0; i < h->nbuckets; i++) {
        seen += h->buckets[i];
        if (seen >= rank) {
            int64_t v = hdr_bucket_high(i);
            if (v > h->max)
                v = h->max;
            if (v < h->min)
                v = h->min;
            return v;
        }
    }
    return h->max;
}

double hdr_mean(const hdr_t *h)
{
    return h->count ? h->sum / (double)h->count : 0.0;
}

void hdr_json(const hdr_t *h, FILE *out)
{
    fprintf(out,
            "{\"count\":%lld,\"min_ms\":%.3f,\"p50_ms\":%.3f,\"p90_ms\":%.3f,"
            "\"p99_ms\":%.3f,\"p999_ms\":%.3f,\"max_ms\":%.3f,\"mean_ms\":%.3f,"
            "\"clamped\":%lld}",
            (long long)h->count, h->count ? (double)h->min / 1000.0 : 0.0,
            (double)hdr_percentile(h, 50) / 1000.0,
            (double)hdr_percentile(h, 90) / 1000.0,
            (double)hdr_percentile(h, 99) / 1000.0,
            (double)hdr_percentile(h, 99.9) / 1000.0,
            (double)h->max / 1000.0, hdr_mean(h) / 1000.0,
            (long long)h->clamped);
}

void hdr_json_buckets(const hdr_t *h, FILE *out)
{
    int first = 1;
    fputc('[', out);
    for (int i = 0; i < h->nbuckets; i++) {
        if (!h->buckets[i])
            continue;
        fprintf(out, "%s[%lld,%lld]", first ? "" : ",", (long long)hdr_bucket_high(i),
                (long long)h->buckets[i]);
        first = 0;
    }
    fputc(']', out);
}
