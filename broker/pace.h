/*
 * pace: producers slowed down before the WAL is full, not refused at full.
 *
 * The WAL keeps at most wal.max.retained.bytes; past that, produce is
 * refused with NOT_ENOUGH_REPLICAS until uploads let it be trimmed. When
 * uploads are only slower than produce (the WAL and the objects on one
 * disk, a slow bucket), refusing at the limit stops every producer for as
 * long as an upload and a snapshot take, and clients back off further on
 * top. So once the WAL is more than SK_PACE_START full, the bytes read from
 * connections that produce are metered: a token bucket whose rate is what
 * uploads take (their measured rate) times a factor that falls with the
 * fill, from SK_PACE_MAX_FACTOR at SK_PACE_START to SK_PACE_MIN_FACTOR just
 * below full. Intake settles where it equals what uploads take, with the
 * fill between the two, whatever the producers would send, and no request
 * is refused. A connection that ran out of tokens is not read until they
 * are back (the kernel's socket buffers then push back on the client).
 * Connections that never produced (consumers, admin) and other nodes'
 * connections are never metered.
 *
 * The factor stays above 0, so producers still move when uploads stall,
 * and a WAL whose uploads fail reaches the limit, where the refusal tells
 * clients why. Nothing is metered while uploads fail or before one has
 * been measured: waiting on a rate nobody knows would not help.
 *
 * No clock and no I/O: the calls take the time (monotonic ms), the fill
 * (retained / wal.max.retained.bytes) and the upload rate, and say whether
 * producers are held and when to look again (node.c keeps the timer and
 * net.c stops and resumes reading).
 *
 * Thread: the event loop only.
 */
#ifndef PACE_H
#define PACE_H

#include <stdbool.h>
#include <stdint.h>

#define SK_PACE_START 0.5      /* fill where metering starts */
#define SK_PACE_MAX_FACTOR 2.0 /* of the upload rate, at SK_PACE_START */
#define SK_PACE_MIN_FACTOR 0.1 /* of the upload rate, just below full */
#define SK_PACE_BURST_MS 100   /* most tokens kept: this long at the rate */
#define SK_PACE_TICK_MS 100    /* the fill and the rate are looked at this often */

typedef struct sk_pace {
    bool active;       /* metering: the fill is past SK_PACE_START, uploads work */
    bool holding;      /* out of tokens: producers are not read now */
    double rate;       /* tokens (bytes) per ms now */
    double tokens;     /* bytes producers may send; below 0 after a large frame */
    int64_t last_ms;   /* when tokens were last added */
    int64_t hold_from; /* when holding began */
    int64_t held_ms;   /* total time producers were held */
} sk_pace;

/* The share of the upload rate producers may send at this fill: 0 below
 * SK_PACE_START (not metered) and at 1 or more (the WAL is full: produce is
 * refused, and refusals should come back at once), else falling linearly
 * from SK_PACE_MAX_FACTOR to SK_PACE_MIN_FACTOR. */
double sk_pace_factor(double fill);

/* Moves the pacer to `now` with the fill and the upload rate in bytes per
 * second (0: unknown, or uploads fail). Returns how many ms until it must
 * step again, or 0 when metering is over (it starts again from the next
 * step whose fill is past SK_PACE_START with a known rate). */
int64_t sk_pace_step(sk_pace *p, int64_t now, double fill, double upload_bps)
    __attribute__((warn_unused_result));

/* A producer's request of `bytes` was read: takes its tokens. Returns how
 * many ms until producers may be read again, or 0 when they still may. */
int64_t sk_pace_take(sk_pace *p, int64_t now, uint32_t bytes)
    __attribute__((warn_unused_result));

/* Time producers have been held, up to now. */
int64_t sk_pace_held_ms(const sk_pace *p, int64_t now);

#endif
