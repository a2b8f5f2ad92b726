/*
 * sk_workq: blocking work off the event loop, completions back on it.
 *
 * Why: the event loop must never block on disk, NFS, S3 or SQLite. Anything
 * that may block runs as a work item on one of a queue's threads; its `done`
 * callback then runs on the loop thread, in the order the work finished.
 *
 * sk_mailbox is the bare half of it: any thread posts a callback that the
 * loop thread runs soon after (used by backends that own their threads).
 *
 * Contract:
 *  - sk_workq_new/destroy and sk_mailbox_new/destroy: loop thread only.
 *  - sk_workq_submit: any thread. work() runs on a worker; done() on the loop.
 *    A queue with one thread runs its items in submission order.
 *  - sk_mailbox_post: any thread.
 *  - Neither owns `arg`: the callbacks do.
 *  - sk_workq_destroy waits for queued work to finish and runs pending done
 *    callbacks before returning.
 * Errors: submit/post return 0, or SK_ERR_NOMEM / SK_ERR_CLOSED.
 */
#ifndef SK_WORKQ_H
#define SK_WORKQ_H

struct event_base;

typedef void (*sk_work_fn)(void *arg);
typedef void (*sk_done_fn)(void *arg);

typedef struct sk_mailbox sk_mailbox;
sk_mailbox *sk_mailbox_new(struct event_base *base);
int sk_mailbox_post(sk_mailbox *m, sk_done_fn fn, void *arg);
/* Runs whatever is queued now, on the calling (loop) thread. */
void sk_mailbox_drain(sk_mailbox *m);
void sk_mailbox_destroy(sk_mailbox *m);

typedef struct sk_workq sk_workq;
sk_workq *sk_workq_new(struct event_base *base, const char *name, int nthreads);
int sk_workq_submit(sk_workq *q, sk_work_fn work, sk_done_fn done, void *arg);
/* Number of items submitted whose done callback has not run yet. */
int sk_workq_pending(const sk_workq *q);
void sk_workq_destroy(sk_workq *q);

#endif
