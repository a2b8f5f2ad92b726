/*
 * progress: long administrative work and how far it got (progress.h).
 */
#include "progress.h"

#include <event2/buffer.h>
#include <stdio.h>

#include "sk_log.h"
#include "sk_time.h"

static const struct {
    const char *name, *todo, *did;
} words[SK_WORK_KINDS] = {
    [SK_WORK_REBALANCE] = {"rebalance", "partitions to move", "moved"},
    [SK_WORK_REASSIGN] = {"reassignment", "partitions to move", "moved"},
    [SK_WORK_RETENTION] = {"retention", "partitions to sweep", "swept"},
};

void sk_progress_init(sk_progress *p)
{
    for (int k = 0; k < SK_WORK_KINDS; k++) {
        atomic_init(&p->w[k].done, 0);
        p->w[k].total = 0;
        p->w[k].running = false;
        p->w[k].quiet = false;
        p->w[k].started_ms = 0;
        p->w[k].last_seconds = -1;
        p->w[k].runs = 0;
    }
}

const char *sk_progress_name(sk_work_kind k)
{
    return words[k].name;
}

void sk_progress_begin(sk_progress *p, sk_work_kind k, uint64_t total, bool quiet)
{
    sk_work *w = &p->w[k];
    atomic_store(&w->done, 0);
    w->total = total;
    w->running = true;
    w->quiet = quiet;
    w->started_ms = sk_mono_ms();
    sk_log(quiet ? SK_LOG_DEBUG : SK_LOG_INFO, "work", "%s started: %llu %s", words[k].name,
           (unsigned long long)total, words[k].todo);
}

void sk_progress_set(sk_progress *p, sk_work_kind k, uint64_t done, uint64_t total)
{
    atomic_store(&p->w[k].done, done);
    p->w[k].total = total;
}

void sk_progress_advance(sk_progress *p, sk_work_kind k)
{
    atomic_fetch_add(&p->w[k].done, 1);
}

void sk_progress_end(sk_progress *p, sk_work_kind k, const char *detail, bool notable)
{
    sk_work *w = &p->w[k];
    if (!w->running)
        return;
    w->running = false;
    w->last_seconds = (double)(sk_mono_ms() - w->started_ms) / 1000.0;
    w->runs++;
    sk_log(w->quiet && !notable ? SK_LOG_DEBUG : SK_LOG_INFO, "work",
           "%s done: %llu of %llu %s %s in %.3f s%s%s", words[k].name,
            (unsigned long long)atomic_load(&w->done), (unsigned long long)w->total,
            words[k].todo, words[k].did, w->last_seconds, detail ? "; " : "",
            detail ? detail : "");
}

bool sk_progress_running(const sk_progress *p, sk_work_kind k)
{
    return p->w[k].running;
}

static void series(struct evbuffer *b, const char *name, const char *help, const char *type,
                   const sk_progress *p, double (*value)(const sk_work *))
{
    evbuffer_add_printf(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
    for (int k = 0; k < SK_WORK_KINDS; k++) {
        double v = value(&p->w[k]);
        if (v == (double)(int64_t)v)
            evbuffer_add_printf(b, "%s{work=\"%s\"} %lld\n", name, words[k].name, (long long)v);
        else
            evbuffer_add_printf(b, "%s{work=\"%s\"} %.3f\n", name, words[k].name, v);
    }
}

static double v_running(const sk_work *w) { return w->running; }
static double v_done(const sk_work *w) { return (double)atomic_load(&w->done); }
static double v_total(const sk_work *w) { return (double)w->total; }
static double v_runs(const sk_work *w) { return (double)w->runs; }
static double v_last(const sk_work *w) { return w->last_seconds; }

static double v_left(const sk_work *w)
{
    uint64_t d = atomic_load(&w->done);
    return w->running && w->total > d ? (double)(w->total - d) : 0;
}

static double v_elapsed(const sk_work *w)
{
    return w->running ? (double)(sk_mono_ms() - w->started_ms) / 1000.0 : 0;
}

void sk_progress_metrics(const sk_progress *p, struct evbuffer *b)
{
    series(b, "skiff_work_running", "1 while a piece of long work of this kind runs.", "gauge",
           p, v_running);
    series(b, "skiff_work_partitions_done", "Partitions done by the current run, else the last.",
           "gauge", p, v_done);
    series(b, "skiff_work_partitions_total", "Partitions in the current run, else the last.",
           "gauge", p, v_total);
    series(b, "skiff_work_partitions_left", "Partitions the current run has still to do.",
           "gauge", p, v_left);
    series(b, "skiff_work_elapsed_seconds", "Time the current run has taken so far (0: none).",
           "gauge", p, v_elapsed);
    series(b, "skiff_work_last_duration_seconds",
           "Duration of the last finished run (-1: none yet).", "gauge", p, v_last);
    series(b, "skiff_work_runs_total", "Finished runs.", "counter", p, v_runs);
}
