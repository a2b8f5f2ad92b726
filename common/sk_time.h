/*
 * sk_time: clocks. Any thread. Monotonic time for timeouts and latency,
 * wall-clock milliseconds for Kafka timestamps.
 */
#ifndef SK_TIME_H
#define SK_TIME_H

#include <stdint.h>
#include <time.h>

static inline int64_t sk_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline int64_t sk_mono_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static inline int64_t sk_mono_ms(void)
{
    return sk_mono_us() / 1000;
}

/* The clock of leases: it keeps counting while the machine is suspended,
 * when a monotonic clock would stop and stretch a lease. */
static inline int64_t sk_boot_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

#endif
