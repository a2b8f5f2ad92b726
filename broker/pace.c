#include "pace.h"

#include <assert.h>
#include <math.h>

double sk_pace_factor(double fill)
{
    if (!(fill > SK_PACE_START) || fill >= 1.0)
        return 0.0;
    double x = (fill - SK_PACE_START) / (1.0 - SK_PACE_START);
    return SK_PACE_MAX_FACTOR - x * (SK_PACE_MAX_FACTOR - SK_PACE_MIN_FACTOR);
}

static void set_holding(sk_pace *p, int64_t now, bool on)
{
    if (p->holding && !on && now > p->hold_from)
        p->held_ms += now - p->hold_from;
    if (!p->holding && on)
        p->hold_from = now;
    p->holding = on;
}

static void refill(sk_pace *p, int64_t now)
{
    if (now > p->last_ms) {
        p->tokens += p->rate * (double)(now - p->last_ms);
        double cap = p->rate * SK_PACE_BURST_MS;
        if (p->tokens > cap)
            p->tokens = cap;
    }
    p->last_ms = now;
}

/* ms until the tokens are back above 0 at the current rate. */
static int64_t wait_ms(const sk_pace *p)
{
    if (p->tokens > 0)
        return 0;
    if (p->rate <= 0)
        return SK_PACE_TICK_MS;
    double ms = ceil(-p->tokens / p->rate);
    if (ms < 1)
        ms = 1;
    return ms > SK_PACE_TICK_MS ? SK_PACE_TICK_MS : (int64_t)ms;
}

int64_t sk_pace_step(sk_pace *p, int64_t now, double fill, double upload_bps)
{
    if (!(upload_bps > 0) || !(fill > SK_PACE_START)) {
        set_holding(p, now, false);
        p->active = false;
        p->rate = 0;
        return 0;
    }
    if (!p->active) {
        p->active = true;
        p->tokens = 0;
        p->last_ms = now;
    }
    refill(p, now);
    double factor = sk_pace_factor(fill);
    if (factor == 0.0) {
        /* Full: produce is refused; read producers so that they learn it. */
        p->rate = 0;
        p->tokens = 0;
        set_holding(p, now, false);
        return SK_PACE_TICK_MS;
    }
    p->rate = upload_bps / 1000.0 * factor;
    set_holding(p, now, p->tokens <= 0 && p->holding);
    int64_t w = p->holding ? wait_ms(p) : 0;
    assert(w <= SK_PACE_TICK_MS);
    return w > 0 ? w : SK_PACE_TICK_MS;
}

int64_t sk_pace_take(sk_pace *p, int64_t now, uint32_t bytes)
{
    if (!p->active || p->rate <= 0)
        return 0;
    refill(p, now);
    p->tokens -= (double)bytes;
    int64_t w = wait_ms(p);
    set_holding(p, now, w > 0);
    return w;
}

int64_t sk_pace_held_ms(const sk_pace *p, int64_t now)
{
    return p->held_ms + (p->holding && now > p->hold_from ? now - p->hold_from : 0);
}
