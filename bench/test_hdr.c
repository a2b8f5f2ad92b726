/*
 * Self-test of the benchmark histogram: bucket geometry, percentile
 * precision against exact sorted values, merging. Plain asserts (no cmocka)
 * so bench/ stays independent of the test toolchain.
 */
#include "hdr.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int failures;

#define CHECK(cond, ...)                                          \
    do {                                                          \
        if (!(cond)) {                                            \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);  \
            fprintf(stderr, __VA_ARGS__);                         \
            fprintf(stderr, "\n");                                \
            failures++;                                           \
        }                                                         \
    } while (0)

static int cmp64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

static uint64_t rng = 88172645463325252ULL;
static uint64_t next_rand(void)
{
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return rng;
}

static void test_geometry(void)
{
    int prev = -1;
    for (int64_t v = 0; v <= HDR_MAX_US; v += (v < 5000 ? 1 : v / 1000)) {
        int i = hdr_index(v);
        CHECK(i >= prev, "index not monotonic at %lld", (long long)v);
        CHECK(hdr_bucket_low(i) <= v && v <= hdr_bucket_high(i),
              "%lld outside bucket %d [%lld,%lld]", (long long)v, i,
              (long long)hdr_bucket_low(i), (long long)hdr_bucket_high(i));
        int64_t width = hdr_bucket_high(i) - hdr_bucket_low(i) + 1;
        CHECK(v < 256 ? width == 1 : (double)width / (double)hdr_bucket_low(i) <= 1.0 / 128 + 1e-12,
              "bucket %d too wide (%lld)", i, (long long)width);
        prev = i;
    }
    /* Consecutive buckets tile the range without gaps. */
    for (int i = 1; i <= hdr_index(HDR_MAX_US); i++)
        CHECK(hdr_bucket_low(i) == hdr_bucket_high(i - 1) + 1, "gap before bucket %d", i);
}

static void test_percentiles(void)
{
    enum { N = 200000 };
    int64_t *vals = malloc(N * sizeof(*vals));
    hdr_t *h = hdr_new(), *a = hdr_new(), *b = hdr_new();
    for (int i = 0; i < N; i++) {
        /* Log-uniform over 1 us .. 10 s, the shape latencies have. */
        double e = (double)(next_rand() % 1000000) / 1000000.0 * 7.0;
        int64_t v = 1;
        for (double x = 0; x < e; x += 0.01)
            v = (int64_t)(v * 1.0233 + 0.5);
        vals[i] = v;
        hdr_record(h, v);
        hdr_record(i % 2 ? a : b, v);
    }
    qsort(vals, N, sizeof(*vals), cmp64);
    double qs[] = {1, 10, 50, 90, 99, 99.9, 99.99};
    for (size_t k = 0; k < sizeof(qs) / sizeof(qs[0]); k++) {
        int64_t rank = (int64_t)(qs[k] / 100.0 * N + 0.9999999);
        int64_t exact = vals[rank - 1];
        int64_t got = hdr_percentile(h, qs[k]);
        CHECK(got >= exact && (double)(got - exact) <= (double)exact / 128 + 1,
              "p%g: got %lld, exact %lld", qs[k], (long long)got, (long long)exact);
    }
    CHECK(hdr_percentile(h, 100) == vals[N - 1], "max");
    CHECK(hdr_percentile(h, 0) == vals[0], "min");
    hdr_merge(a, b);
    CHECK(a->count == h->count, "merged count");
    for (int i = 0; i < h->nbuckets; i++)
        CHECK(a->buckets[i] == h->buckets[i], "merged bucket %d", i);
    CHECK(a->min == h->min && a->max == h->max, "merged min/max");

    hdr_reset(h);
    hdr_record(h, HDR_MAX_US * 2);
    CHECK(h->clamped == 1 && h->max == HDR_MAX_US, "clamp");
    CHECK(hdr_percentile(h, 50) == HDR_MAX_US, "clamped percentile");
    hdr_destroy(h);
    hdr_destroy(a);
    hdr_destroy(b);
    free(vals);
}

/* The bucket dump: non-empty buckets only, upper edges, counts that add up. */
static void test_buckets_json(void)
{
    hdr_t *h = hdr_new();
    hdr_record(h, 7);
    hdr_record(h, 7);
    hdr_record(h, 1000);
    hdr_record(h, HDR_MAX_US + 5);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    hdr_json_buckets(h, f);
    fclose(f);
    char want[128];
    snprintf(want, sizeof(want), "[[7,2],[%lld,1],[%lld,1]]",
             (long long)hdr_bucket_high(hdr_index(1000)),
             (long long)hdr_bucket_high(hdr_index(HDR_MAX_US)));
    CHECK(strcmp(buf, want) == 0, "buckets %s, want %s", buf, want);
    free(buf);
    hdr_reset(h);
    f = open_memstream(&buf, &len);
    hdr_json_buckets(h, f);
    fclose(f);
    CHECK(strcmp(buf, "[]") == 0, "empty histogram: %s", buf);
    free(buf);
    hdr_destroy(h);
}

int main(void)
{
    test_geometry();
    test_percentiles();
    test_buckets_json();
    if (failures) {
        fprintf(stderr, "%d failures\n", failures);
        return 1;
    }
    printf("hdr self-test ok\n");
    return 0;
}
