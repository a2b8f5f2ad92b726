#include "sk_workq.h"

#include <errno.h>
#include <event2/event.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "sk_err.h"
#include "sk_log.h"

struct item {
    struct item *next;
    sk_work_fn work;
    sk_done_fn done;
    void *arg;
    sk_workq *q;
};

/* Invariant: items are appended at tail and taken from head under lock;
 * the eventfd is signalled when the list goes from empty to non-empty, and
 * the loop drains the whole list per wake-up. */
struct sk_mailbox {
    pthread_mutex_t lock;
    struct item *head, *tail;
    int efd;
    struct event *ev;
};

static void mailbox_cb(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    uint64_t v;
    ssize_t r = read(fd, &v, sizeof v);
    (void)r;
    sk_mailbox_drain(arg);
}

sk_mailbox *sk_mailbox_new(struct event_base *base)
{
    sk_mailbox *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    pthread_mutex_init(&m->lock, NULL);
    m->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (m->efd < 0) {
        free(m);
        return NULL;
    }
    m->ev = event_new(base, m->efd, EV_READ | EV_PERSIST, mailbox_cb, m);
    event_add(m->ev, NULL);
    return m;
}

static void mailbox_push(sk_mailbox *m, struct item *it)
{
    it->next = NULL;
    pthread_mutex_lock(&m->lock);
    bool was_empty = m->head == NULL;
    if (m->tail)
        m->tail->next = it;
    else
        m->head = it;
    m->tail = it;
    pthread_mutex_unlock(&m->lock);
    if (was_empty) {
        uint64_t one = 1;
        ssize_t r = write(m->efd, &one, sizeof one);
        (void)r;
    }
}

static void item_finish(struct item *it);

int sk_mailbox_post(sk_mailbox *m, sk_done_fn fn, void *arg)
{
    struct item *it = calloc(1, sizeof *it);
    if (!it)
        return SK_ERR_NOMEM;
    it->done = fn;
    it->arg = arg;
    mailbox_push(m, it);
    return 0;
}

void sk_mailbox_drain(sk_mailbox *m)
{
    pthread_mutex_lock(&m->lock);
    struct item *it = m->head;
    m->head = m->tail = NULL;
    pthread_mutex_unlock(&m->lock);
    while (it) {
        struct item *n = it->next;
        item_finish(it);
        it = n;
    }
}

void sk_mailbox_destroy(sk_mailbox *m)
{
    if (!m)
        return;
    sk_mailbox_drain(m);
    event_free(m->ev);
    close(m->efd);
    pthread_mutex_destroy(&m->lock);
    free(m);
}

/* Invariant: pending counts items from submit until their done ran. */
struct sk_workq {
    char name[32];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    struct item *head, *tail;
    bool stopping;
    int nthreads;
    pthread_t *threads;
    sk_mailbox *mbox;
    atomic_int pending;
};

static void item_finish(struct item *it)
{
    if (it->done)
        it->done(it->arg);
    if (it->q)
        atomic_fetch_sub(&it->q->pending, 1);
    free(it);
}

static void *worker_main(void *arg)
{
    sk_workq *q = arg;
    pthread_setname_np(pthread_self(), q->name);
    for (;;) {
        pthread_mutex_lock(&q->lock);
        while (!q->head && !q->stopping)
            pthread_cond_wait(&q->cond, &q->lock);
        struct item *it = q->head;
        if (!it) {
            pthread_mutex_unlock(&q->lock);
            return NULL;
        }
        q->head = it->next;
        if (!q->head)
            q->tail = NULL;
        pthread_mutex_unlock(&q->lock);
        if (it->work)
            it->work(it->arg);
        mailbox_push(q->mbox, it);
    }
}

sk_workq *sk_workq_new(struct event_base *base, const char *name, int nthreads)
{
    sk_workq *q = calloc(1, sizeof *q);
    if (!q)
        return NULL;
    snprintf(q->name, sizeof q->name, "%.15s", name);
    pthread_mutex_init(&q->lock, NULL);
    pthread_cond_init(&q->cond, NULL);
    q->mbox = sk_mailbox_new(base);
    q->threads = calloc((size_t)nthreads, sizeof *q->threads);
    if (!q->mbox || !q->threads) {
        SK_ERROR("workq", "cannot create queue %s", name);
        abort();
    }
    for (int i = 0; i < nthreads; i++) {
        int rc = pthread_create(&q->threads[i], NULL, worker_main, q);
        if (rc != 0) {
            SK_ERROR("workq", "pthread_create: %s", strerror(rc));
            abort();
        }
        q->nthreads++;
    }
    return q;
}

int sk_workq_submit(sk_workq *q, sk_work_fn work, sk_done_fn done, void *arg)
{
    struct item *it = calloc(1, sizeof *it);
    if (!it)
        return SK_ERR_NOMEM;
    it->work = work;
    it->done = done;
    it->arg = arg;
    it->q = q;
    pthread_mutex_lock(&q->lock);
    if (q->stopping) {
        pthread_mutex_unlock(&q->lock);
        free(it);
        return SK_ERR_CLOSED;
    }
    atomic_fetch_add(&q->pending, 1);
    if (q->tail)
        q->tail->next = it;
    else
        q->head = it;
    q->tail = it;
    pthread_cond_signal(&q->cond);
    pthread_mutex_unlock(&q->lock);
    return 0;
}

int sk_workq_pending(const sk_workq *q)
{
    return atomic_load(&((sk_workq *)q)->pending);
}

void sk_workq_destroy(sk_workq *q)
{
    if (!q)
        return;
    pthread_mutex_lock(&q->lock);
    q->stopping = true;
    pthread_cond_broadcast(&q->cond);
    pthread_mutex_unlock(&q->lock);
    for (int i = 0; i < q->nthreads; i++)
        pthread_join(q->threads[i], NULL);
    sk_mailbox_destroy(q->mbox);
    pthread_cond_destroy(&q->cond);
    pthread_mutex_destroy(&q->lock);
    free(q->threads);
    free(q);
}
