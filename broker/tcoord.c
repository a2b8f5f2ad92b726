#include "tcoord.h"

#include <stdlib.h>
#include <string.h>

#include "sk_err.h"

/* Epochs at or past this are exhausted: the next bump takes a new id. */
#define EPOCH_EXHAUSTED (INT16_MAX - 1)

typedef struct slot {
    sk_tc_entry cur, next;
    bool has_cur, pending;
} slot;

struct sk_tc {
    sk_tc_config cfg;
    int n, cap;
    slot **v; /* linear: a node coordinates few transactional ids */
};

const char *sk_tc_state_name(sk_tc_state s)
{
    static const char *names[] = {"Empty",        "Ongoing",        "PrepareCommit",
                                  "PrepareAbort", "CompleteCommit", "CompleteAbort"};
    return (unsigned)s < sizeof names / sizeof names[0] ? names[s] : "Unknown";
}

sk_tc *sk_tc_new(const sk_tc_config *cfg)
{
    sk_tc *tc = calloc(1, sizeof *tc);
    if (tc)
        tc->cfg = *cfg;
    return tc;
}

static void clear_members(sk_tc_entry *e)
{
    for (int i = 0; i < e->nparts; i++)
        free(e->parts[i].topic);
    free(e->parts);
    for (int i = 0; i < e->ngroups; i++)
        free(e->groups[i]);
    free(e->groups);
    e->parts = NULL;
    e->groups = NULL;
    e->nparts = e->ngroups = 0;
}

void sk_tc_entry_clear(sk_tc_entry *e)
{
    free(e->txn_id);
    clear_members(e);
    memset(e, 0, sizeof *e);
}

static void slot_free(slot *s)
{
    sk_tc_entry_clear(&s->cur);
    sk_tc_entry_clear(&s->next);
    free(s);
}

void sk_tc_free(sk_tc *tc)
{
    if (!tc)
        return;
    for (int i = 0; i < tc->n; i++)
        slot_free(tc->v[i]);
    free(tc->v);
    free(tc);
}

int sk_tc_entry_copy(sk_tc_entry *dst, const sk_tc_entry *src)
{
    sk_tc_entry e = *src;
    e.txn_id = strdup(src->txn_id ? src->txn_id : "");
    e.parts = src->nparts ? calloc((size_t)src->nparts, sizeof *e.parts) : NULL;
    e.groups = src->ngroups ? calloc((size_t)src->ngroups, sizeof *e.groups) : NULL;
    e.nparts = e.ngroups = 0;
    bool ok = e.txn_id && (!src->nparts || e.parts) && (!src->ngroups || e.groups);
    for (int i = 0; ok && i < src->nparts; i++, e.nparts++) {
        e.parts[i].partition = src->parts[i].partition;
        ok = (e.parts[i].topic = strdup(src->parts[i].topic)) != NULL;
    }
    for (int i = 0; ok && i < src->ngroups; i++, e.ngroups++)
        ok = (e.groups[i] = strdup(src->groups[i])) != NULL;
    if (!ok) {
        sk_tc_entry_clear(&e);
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    }
    sk_tc_entry_clear(dst);
    *dst = e;
    return 0;
}

static slot *find(const sk_tc *tc, const char *txn_id)
{
    for (int i = 0; i < tc->n; i++) {
        slot *s = tc->v[i];
        const char *id = s->has_cur ? s->cur.txn_id : s->next.txn_id;
        if (id && strcmp(id, txn_id) == 0)
            return s;
    }
    return NULL;
}

static slot *add_slot(sk_tc *tc)
{
    if (tc->n == tc->cap) {
        int cap = tc->cap ? tc->cap * 2 : 16;
        slot **v = realloc(tc->v, (size_t)cap * sizeof *v);
        if (!v)
            return NULL;
        tc->v = v;
        tc->cap = cap;
    }
    slot *s = calloc(1, sizeof *s);
    if (s)
        tc->v[tc->n++] = s;
    return s;
}

static void drop_slot(sk_tc *tc, slot *s)
{
    for (int i = 0; i < tc->n; i++) {
        if (tc->v[i] == s) {
            tc->v[i] = tc->v[--tc->n];
            slot_free(s);
            return;
        }
    }
}

const sk_tc_entry *sk_tc_get(const sk_tc *tc, const char *txn_id)
{
    slot *s = find(tc, txn_id);
    return s && s->has_cur ? &s->cur : NULL;
}

const sk_tc_entry *sk_tc_pending(const sk_tc *tc, const char *txn_id)
{
    slot *s = find(tc, txn_id);
    return s && s->pending ? &s->next : NULL;
}

bool sk_tc_is_pending(const sk_tc *tc, const char *txn_id)
{
    return sk_tc_pending(tc, txn_id) != NULL;
}

int sk_tc_apply(sk_tc *tc, const char *txn_id)
{
    slot *s = find(tc, txn_id);
    if (!s || !s->pending)
        return SK_KAFKA_INVALID_TXN_STATE;
    sk_tc_entry_clear(&s->cur);
    s->cur = s->next;
    memset(&s->next, 0, sizeof s->next);
    s->has_cur = true;
    s->pending = false;
    return 0;
}

void sk_tc_revert(sk_tc *tc, const char *txn_id)
{
    slot *s = find(tc, txn_id);
    if (!s || !s->pending)
        return;
    if (!s->has_cur) {
        drop_slot(tc, s);
        return;
    }
    sk_tc_entry_clear(&s->next);
    s->pending = false;
}

void sk_tc_forget(sk_tc *tc, const char *txn_id)
{
    slot *s = find(tc, txn_id);
    if (s)
        drop_slot(tc, s);
}

int sk_tc_restore(sk_tc *tc, const sk_tc_entry *e)
{
    slot *s = find(tc, e->txn_id);
    if (!s && !(s = add_slot(tc)))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    int rc = sk_tc_entry_copy(&s->cur, e);
    if (rc) {
        if (!s->has_cur)
            drop_slot(tc, s);
        return rc;
    }
    s->has_cur = true;
    sk_tc_entry_clear(&s->next);
    s->pending = false;
    return 0;
}

/* Starts a pending change from the current state; the caller edits next. */
static int begin(slot *s, int64_t now)
{
    if (sk_tc_entry_copy(&s->next, &s->cur))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    s->next.update_ms = now;
    s->pending = true;
    return 0;
}


/* ---- InitProducerId ---- */

static bool valid_timeout(const sk_tc *tc, int32_t ms)
{
    return ms > 0 && ms <= tc->cfg.max_timeout_ms;
}

static void init_new(sk_tc *tc, const sk_tc_init_args *a, int64_t now, sk_tc_init_result *res)
{
    slot *s = add_slot(tc);
    sk_tc_entry *e = s ? &s->next : NULL;
    if (!s || !(e->txn_id = strdup(a->txn_id))) {
        if (s)
            drop_slot(tc, s);
        res->error = SK_KAFKA_UNKNOWN_SERVER_ERROR;
        return;
    }
    e->producer_id = a->fresh_pid;
    e->producer_epoch = 0;
    e->last_producer_id = -1;
    e->last_producer_epoch = -1;
    e->timeout_ms = a->timeout_ms;
    e->state = SK_TC_EMPTY;
    e->start_ms = -1;
    e->update_ms = now;
    s->pending = true;
    res->producer_id = e->producer_id;
    res->producer_epoch = 0;
    res->fresh_pid_used = true;
}

/* KIP-360: an expected id is accepted when it is the current one, the
 * previous one after a rotation, or when the id was just created. */
static bool valid_expected(const sk_tc_entry *e, const sk_tc_init_args *a)
{
    return a->expected_pid < 0 || e->producer_epoch < 0 || a->expected_pid == e->producer_id ||
           (a->expected_pid == e->last_producer_id && a->expected_epoch >= EPOCH_EXHAUSTED);
}

/* Empty or Complete*: bump the epoch (or rotate the id when exhausted). */
static int init_bump(slot *s, const sk_tc_init_args *a, sk_tc_init_result *res)
{
    sk_tc_entry *e = &s->next;
    if (e->producer_epoch >= EPOCH_EXHAUSTED) {
        e->last_producer_id = e->producer_id;
        e->last_producer_epoch = a->expected_pid >= 0 ? e->producer_epoch : -1;
        e->producer_id = a->fresh_pid;
        e->producer_epoch = 0;
        res->fresh_pid_used = true;
    } else if (a->expected_pid < 0) {
        e->last_producer_epoch = -1;
        e->producer_epoch++;
    } else if (e->producer_epoch < 0 || a->expected_epoch == e->producer_epoch) {
        e->last_producer_epoch = e->producer_epoch;
        e->producer_epoch++;
    } else if (a->expected_epoch != e->last_producer_epoch) {
        return SK_KAFKA_PRODUCER_FENCED;
    } /* else: a retry of a bump already made, answered again */
    e->state = SK_TC_EMPTY;
    e->start_ms = -1;
    clear_members(e);
    return 0;
}

/* Ongoing: fence the epoch and abort; the client is told to retry. */
static void fence_and_abort(sk_tc_entry *e)
{
    if (e->producer_epoch < INT16_MAX)
        e->producer_epoch++;
    e->last_producer_epoch = -1;
    e->state = SK_TC_PREPARE_ABORT;
}

void sk_tc_init_pid(sk_tc *tc, const sk_tc_init_args *a, int64_t now, sk_tc_init_result *res)
{
    memset(res, 0, sizeof *res);
    res->producer_id = -1;
    res->producer_epoch = -1;
    if (!valid_timeout(tc, a->timeout_ms)) {
        res->error = SK_KAFKA_INVALID_TRANSACTION_TIMEOUT;
        return;
    }
    slot *s = find(tc, a->txn_id);
    if (!s) {
        init_new(tc, a, now, res);
        return;
    }
    if (s->pending) {
        res->error = SK_KAFKA_CONCURRENT_TRANSACTIONS;
        return;
    }
    if (!valid_expected(&s->cur, a)) {
        res->error = SK_KAFKA_PRODUCER_FENCED;
        return;
    }
    sk_tc_state st = s->cur.state;
    if (st == SK_TC_PREPARE_COMMIT || st == SK_TC_PREPARE_ABORT) {
        res->error = SK_KAFKA_CONCURRENT_TRANSACTIONS;
        return;
    }
    if (begin(s, now)) {
        res->error = SK_KAFKA_UNKNOWN_SERVER_ERROR;
        return;
    }
    if (st == SK_TC_ONGOING) {
        fence_and_abort(&s->next);
        res->error = SK_KAFKA_CONCURRENT_TRANSACTIONS;
        res->aborting = true;
        return;
    }
    int err = init_bump(s, a, res);
    if (err) {
        sk_tc_revert(tc, a->txn_id);
        res->error = (int16_t)err;
        return;
    }
    s->next.timeout_ms = a->timeout_ms;
    res->producer_id = s->next.producer_id;
    res->producer_epoch = s->next.producer_epoch;
}

/* ---- partitions and groups ---- */

static bool has_part(const sk_tc_entry *e, const char *topic, int32_t partition)
{
    for (int i = 0; i < e->nparts; i++)
        if (e->parts[i].partition == partition && strcmp(e->parts[i].topic, topic) == 0)
            return true;
    return false;
}

static bool has_group(const sk_tc_entry *e, const char *group)
{
    for (int i = 0; i < e->ngroups; i++)
        if (strcmp(e->groups[i], group) == 0)
            return true;
    return false;
}

/* Kafka's checks before adding to a transaction. */
static int add_check(const sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch, slot **out)
{
    slot *s = find(tc, txn_id);
    if (!s || !s->has_cur || s->cur.producer_id != pid)
        return SK_KAFKA_INVALID_PRODUCER_ID_MAPPING;
    if (s->cur.producer_epoch != epoch)
        return SK_KAFKA_PRODUCER_FENCED;
    if (s->pending || s->cur.state == SK_TC_PREPARE_COMMIT ||
        s->cur.state == SK_TC_PREPARE_ABORT)
        return SK_KAFKA_CONCURRENT_TRANSACTIONS;
    *out = s;
    return 0;
}

static int begin_ongoing(slot *s, int64_t now)
{
    if (begin(s, now))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    if (s->cur.state != SK_TC_ONGOING) {
        clear_members(&s->next);
        s->next.start_ms = now;
        s->next.state = SK_TC_ONGOING;
    }
    return 0;
}

static int push_part(sk_tc_entry *e, const sk_tc_part *p)
{
    sk_tc_part *v = realloc(e->parts, (size_t)(e->nparts + 1) * sizeof *v);
    if (!v)
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    e->parts = v;
    if (!(v[e->nparts].topic = strdup(p->topic)))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    v[e->nparts++].partition = p->partition;
    return 0;
}

int sk_tc_add_partitions(sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch, int n,
                         const sk_tc_part *parts, int64_t now)
{
    slot *s = NULL;
    int err = add_check(tc, txn_id, pid, epoch, &s);
    if (err)
        return err;
    bool all = s->cur.state == SK_TC_ONGOING;
    for (int i = 0; all && i < n; i++)
        all = has_part(&s->cur, parts[i].topic, parts[i].partition);
    if (all)
        return 0; /* nothing to write */
    if ((err = begin_ongoing(s, now)))
        return err;
    for (int i = 0; i < n && !err; i++)
        if (!has_part(&s->next, parts[i].topic, parts[i].partition))
            err = push_part(&s->next, &parts[i]);
    if (err)
        sk_tc_revert(tc, txn_id);
    return err;
}

int sk_tc_add_group(sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                    const char *group, int64_t now)
{
    slot *s = NULL;
    int err = add_check(tc, txn_id, pid, epoch, &s);
    if (err)
        return err;
    if (s->cur.state == SK_TC_ONGOING && has_group(&s->cur, group))
        return 0;
    if ((err = begin_ongoing(s, now)))
        return err;
    sk_tc_entry *e = &s->next;
    char **v = realloc(e->groups, (size_t)(e->ngroups + 1) * sizeof *v);
    if (!v || !(v[e->ngroups] = strdup(group))) {
        if (v)
            e->groups = v;
        sk_tc_revert(tc, txn_id);
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    }
    e->groups = v;
    e->ngroups++;
    return 0;
}

/* The open transaction a produce or offset commit belongs to. */
static int member_check(const sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                        const slot **out)
{
    const slot *s = find(tc, txn_id);
    if (!s || !s->has_cur || s->cur.producer_id != pid)
        return SK_KAFKA_INVALID_PRODUCER_ID_MAPPING;
    if (s->cur.producer_epoch != epoch)
        return SK_KAFKA_INVALID_PRODUCER_EPOCH;
    if (s->cur.state != SK_TC_ONGOING)
        return SK_KAFKA_INVALID_TXN_STATE;
    *out = s;
    return 0;
}

int sk_tc_check_part(const sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                     const char *topic, int32_t partition)
{
    const slot *s = NULL;
    int err = member_check(tc, txn_id, pid, epoch, &s);
    if (err)
        return err;
    return has_part(&s->cur, topic, partition) ? 0 : SK_KAFKA_INVALID_TXN_STATE;
}

int sk_tc_check_group(const sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch,
                      const char *group)
{
    const slot *s = NULL;
    int err = member_check(tc, txn_id, pid, epoch, &s);
    if (err)
        return err;
    return has_group(&s->cur, group) ? 0 : SK_KAFKA_INVALID_TXN_STATE;
}

/* ---- EndTxn ---- */

/* What a finished or finishing transaction answers to another EndTxn. */
static int end_in_state(sk_tc_state st, bool commit)
{
    switch (st) {
    case SK_TC_COMPLETE_COMMIT:
        return commit ? 0 : SK_KAFKA_INVALID_TXN_STATE;
    case SK_TC_COMPLETE_ABORT:
        return commit ? SK_KAFKA_INVALID_TXN_STATE : 0;
    case SK_TC_PREPARE_COMMIT:
        return commit ? SK_KAFKA_CONCURRENT_TRANSACTIONS : SK_KAFKA_INVALID_TXN_STATE;
    case SK_TC_PREPARE_ABORT:
        return commit ? SK_KAFKA_INVALID_TXN_STATE : SK_KAFKA_CONCURRENT_TRANSACTIONS;
    default:
        return SK_KAFKA_INVALID_TXN_STATE;
    }
}

int sk_tc_end(sk_tc *tc, const char *txn_id, int64_t pid, int16_t epoch, bool commit,
              int64_t now, bool *markers)
{
    *markers = false;
    slot *s = find(tc, txn_id);
    if (!s || !s->has_cur || s->cur.producer_id != pid)
        return SK_KAFKA_INVALID_PRODUCER_ID_MAPPING;
    if (epoch != s->cur.producer_epoch)
        return SK_KAFKA_PRODUCER_FENCED;
    if (s->pending)
        return SK_KAFKA_CONCURRENT_TRANSACTIONS;
    if (s->cur.state != SK_TC_ONGOING)
        return end_in_state(s->cur.state, commit);
    if (begin(s, now))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    s->next.state = commit ? SK_TC_PREPARE_COMMIT : SK_TC_PREPARE_ABORT;
    *markers = true;
    return 0;
}

int sk_tc_complete(sk_tc *tc, const char *txn_id, int64_t now)
{
    slot *s = find(tc, txn_id);
    if (!s || !s->has_cur || s->pending)
        return SK_KAFKA_CONCURRENT_TRANSACTIONS;
    sk_tc_state st = s->cur.state;
    if (st != SK_TC_PREPARE_COMMIT && st != SK_TC_PREPARE_ABORT)
        return SK_KAFKA_INVALID_TXN_STATE;
    if (begin(s, now))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    s->next.state = st == SK_TC_PREPARE_COMMIT ? SK_TC_COMPLETE_COMMIT : SK_TC_COMPLETE_ABORT;
    s->next.start_ms = -1;
    clear_members(&s->next);
    return 0;
}

/* ---- timeouts ---- */

int sk_tc_expired(const sk_tc *tc, int64_t now, const char **ids, int max)
{
    int n = 0;
    for (int i = 0; i < tc->n && n < max; i++) {
        const slot *s = tc->v[i];
        if (s->has_cur && !s->pending && s->cur.state == SK_TC_ONGOING &&
            now - s->cur.start_ms > s->cur.timeout_ms)
            ids[n++] = s->cur.txn_id;
    }
    return n;
}

int sk_tc_abort_expired(sk_tc *tc, const char *txn_id, int64_t now)
{
    slot *s = find(tc, txn_id);
    if (!s || !s->has_cur || s->pending || s->cur.state != SK_TC_ONGOING)
        return SK_KAFKA_INVALID_TXN_STATE;
    if (begin(s, now))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    fence_and_abort(&s->next);
    return 0;
}

int sk_tc_idle(const sk_tc *tc, int64_t now, int64_t idle_ms, const char **ids, int max)
{
    int n = 0;
    for (int i = 0; i < tc->n && n < max; i++) {
        const slot *s = tc->v[i];
        sk_tc_state st = s->has_cur ? s->cur.state : SK_TC_ONGOING;
        bool ended = st == SK_TC_EMPTY || st == SK_TC_COMPLETE_COMMIT || st == SK_TC_COMPLETE_ABORT;
        if (ended && !s->pending && now - s->cur.update_ms >= idle_ms)
            ids[n++] = s->cur.txn_id;
    }
    return n;
}

int sk_tc_count(const sk_tc *tc)
{
    return tc->n;
}

const sk_tc_entry *sk_tc_at(const sk_tc *tc, int i)
{
    const slot *s = i >= 0 && i < tc->n ? tc->v[i] : NULL;
    return s && s->has_cur ? &s->cur : NULL;
}
