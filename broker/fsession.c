#include "fsession.h"

#include <stdlib.h>
#include <string.h>

#include "sk_err.h"
#include "sk_map.h"

#define KEY_MAX 1024 /* a longer topic name is never cached (Kafka's limit is 249) */

struct sk_fs_session {
    int32_t id, epoch;
    bool privileged, uses_ids;
    bool evict_all, evict_priv; /* decided at the last use, as Kafka's touch does */
    int64_t created, last_used;
    int32_t n;
    sk_map *parts; /* key bytes -> sk_fs_part */
    sk_fs_part *head, *tail;
    sk_fs_cache *cache;
};

struct sk_fs_cache {
    int32_t slots;
    int64_t eviction_ms;
    uint64_t rng;
    sk_map *byid; /* int64 id -> session */
    int64_t nparts;
    uint64_t evictions, created;
};

sk_fs_cache *sk_fs_new(int32_t slots, int64_t eviction_ms, uint64_t seed)
{
    sk_fs_cache *c = calloc(1, sizeof *c);
    if (!c)
        return NULL;
    c->slots = slots > 0 ? slots : 0;
    c->eviction_ms = eviction_ms;
    c->rng = seed ? seed : 0x9e3779b97f4a7c15ULL;
    c->byid = sk_map_new();
    if (!c->byid) {
        free(c);
        return NULL;
    }
    return c;
}

static void session_free(sk_fs_session *s)
{
    for (sk_fs_part *p = s->head, *nx; p; p = nx) {
        nx = p->next;
        free((char *)p->key.topic.p);
        free(p);
    }
    sk_map_destroy(s->parts);
    free(s);
}

void sk_fs_destroy(sk_fs_cache *c)
{
    if (!c)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(c->byid, &it, NULL, NULL, &v))
        session_free(v);
    sk_map_destroy(c->byid);
    free(c);
}

int32_t sk_fs_count(const sk_fs_cache *c)
{
    return (int32_t)sk_map_count(c->byid);
}

int64_t sk_fs_partitions(const sk_fs_cache *c)
{
    return c->nparts;
}

uint64_t sk_fs_evictions(const sk_fs_cache *c)
{
    return c->evictions;
}

uint64_t sk_fs_created(const sk_fs_cache *c)
{
    return c->created;
}

static void drop(sk_fs_cache *c, sk_fs_session *s)
{
    int64_t k = s->id;
    sk_map_del(c->byid, &k, sizeof k);
    c->nparts -= s->n;
    session_free(s);
}

bool sk_fs_remove(sk_fs_cache *c, int32_t id)
{
    sk_fs_session *s = sk_fs_find(c, id);
    if (!s)
        return false;
    drop(c, s);
    return true;
}

sk_fs_session *sk_fs_find(sk_fs_cache *c, int32_t id)
{
    return id > 0 ? sk_map_get_i64(c->byid, id) : NULL;
}

/* ---- eviction ---- */

/* Kafka's EvictableKey order: (privileged, size, id), consumers first. */
static int key_cmp(bool pa, int32_t sa, int32_t ia, bool pb, int32_t sb, int32_t ib)
{
    if (pa != pb)
        return pa ? 1 : -1;
    if (sa != sb)
        return sa < sb ? -1 : 1;
    return ia < ib ? -1 : ia > ib;
}

static sk_fs_session *least_recent(sk_fs_cache *c)
{
    sk_fs_session *best = NULL;
    size_t it = 0;
    void *v;
    while (sk_map_next(c->byid, &it, NULL, NULL, &v)) {
        sk_fs_session *s = v;
        if (!best || s->last_used < best->last_used ||
            (s->last_used == best->last_used && s->id < best->id))
            best = s;
    }
    return best;
}

static sk_fs_session *least_valuable(sk_fs_cache *c, bool privileged)
{
    sk_fs_session *best = NULL;
    size_t it = 0;
    void *v;
    while (sk_map_next(c->byid, &it, NULL, NULL, &v)) {
        sk_fs_session *s = v;
        if (!(privileged ? s->evict_priv : s->evict_all))
            continue;
        if (!best || key_cmp(s->privileged, s->n, s->id, best->privileged, best->n, best->id) < 0)
            best = s;
    }
    return best;
}

static bool try_evict(sk_fs_cache *c, int64_t now, bool privileged, int32_t size)
{
    sk_fs_session *s = least_recent(c);
    if (!s)
        return false;
    if (now - s->last_used <= c->eviction_ms) {
        s = least_valuable(c, privileged);
        /* The new session's key has id 0: it must be strictly bigger. */
        if (!s || key_cmp(privileged, size, 0, s->privileged, s->n, s->id) < 0)
            return false;
    }
    drop(c, s);
    c->evictions++;
    return true;
}

/* ---- sessions ---- */

static int32_t new_id(sk_fs_cache *c)
{
    for (;;) {
        /* splitmix64 */
        uint64_t z = (c->rng += 0x9e3779b97f4a7c15ULL);
        z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
        z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
        z ^= z >> 31;
        int32_t id = (int32_t)(z & 0x7fffffff);
        if (id != 0 && !sk_fs_find(c, id))
            return id;
    }
}

static void touch(sk_fs_cache *c, sk_fs_session *s, int64_t now)
{
    s->last_used = now;
    bool old = now - s->created > c->eviction_ms;
    s->evict_priv = !s->privileged || old;
    s->evict_all = old;
}

sk_fs_session *sk_fs_create(sk_fs_cache *c, int64_t now, bool privileged, bool uses_ids,
                            int32_t size)
{
    if (size > SK_FS_MAX_PARTS || c->nparts + size > SK_FS_MAX_CACHED)
        return NULL;
    if ((int32_t)sk_map_count(c->byid) >= c->slots && !try_evict(c, now, privileged, size))
        return NULL;
    if ((int32_t)sk_map_count(c->byid) >= c->slots)
        return NULL; /* no slots at all */
    sk_fs_session *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->parts = sk_map_new();
    s->id = new_id(c);
    if (!s->parts || sk_map_put_i64(c->byid, s->id, s) != 0) {
        sk_map_destroy(s->parts);
        free(s);
        return NULL;
    }
    s->epoch = 1;
    s->privileged = privileged;
    s->uses_ids = uses_ids;
    s->created = now;
    s->cache = c;
    touch(c, s, now);
    c->created++;
    return s;
}

int sk_fs_get(sk_fs_cache *c, int32_t id, int32_t epoch, bool uses_ids, sk_fs_session **out)
{
    sk_fs_session *s = sk_fs_find(c, id);
    *out = NULL;
    if (!s)
        return SK_KAFKA_FETCH_SESSION_ID_NOT_FOUND;
    if (s->epoch != epoch)
        return SK_KAFKA_INVALID_FETCH_SESSION_EPOCH;
    if (s->uses_ids != uses_ids)
        return SK_KAFKA_FETCH_SESSION_TOPIC_ID_ERROR;
    *out = s;
    return 0;
}

bool sk_fs_commit(sk_fs_cache *c, sk_fs_session *s, int64_t now)
{
    if (s->n == 0) {
        drop(c, s);
        return false;
    }
    touch(c, s, now);
    s->epoch = s->epoch == INT32_MAX ? 1 : s->epoch + 1;
    return true;
}

int32_t sk_fs_id(const sk_fs_session *s)
{
    return s->id;
}

int32_t sk_fs_epoch(const sk_fs_session *s)
{
    return s->epoch;
}

int32_t sk_fs_size(const sk_fs_session *s)
{
    return s->n;
}

/* ---- partitions ---- */

/* The map key: partition, then the topic id or name. 0 if too long. */
static size_t key_bytes(const sk_fs_session *s, const sk_fs_key *k, uint8_t *buf)
{
    memcpy(buf, &k->partition, 4);
    if (s->uses_ids) {
        memcpy(buf + 4, k->topic_id.b, 16);
        return 20;
    }
    int32_t len = k->topic.len > 0 ? k->topic.len : 0;
    if (len > KEY_MAX)
        return 0;
    if (len)
        memcpy(buf + 4, k->topic.p, (size_t)len);
    return 4 + (size_t)len;
}

sk_fs_part *sk_fs_lookup(sk_fs_session *s, const sk_fs_key *k)
{
    uint8_t buf[4 + KEY_MAX];
    size_t kl = key_bytes(s, k, buf);
    return kl ? sk_map_get(s->parts, buf, kl) : NULL;
}

sk_fs_part *sk_fs_first(sk_fs_session *s)
{
    return s->head;
}

static void unlink_part(sk_fs_session *s, sk_fs_part *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        s->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    else
        s->tail = p->prev;
    p->prev = p->next = NULL;
}

static void append_part(sk_fs_session *s, sk_fs_part *p)
{
    p->prev = s->tail;
    p->next = NULL;
    if (s->tail)
        s->tail->next = p;
    else
        s->head = p;
    s->tail = p;
}

int sk_fs_put(sk_fs_session *s, const sk_fs_key *k, const sk_fs_params *prm, int64_t hw,
              int64_t log_start)
{
    uint8_t buf[4 + KEY_MAX];
    size_t kl = key_bytes(s, k, buf);
    if (!kl)
        return SK_ERR_NOMEM;
    sk_fs_part *p = sk_map_get(s->parts, buf, kl);
    if (p) {
        p->req = *prm;
        return 0;
    }
    if (s->n >= SK_FS_MAX_PARTS || s->cache->nparts >= SK_FS_MAX_CACHED)
        return SK_ERR_NOMEM;
    p = calloc(1, sizeof *p);
    int32_t tl = k->topic.len > 0 ? k->topic.len : 0;
    char *name = p ? malloc((size_t)tl + 1) : NULL;
    if (!name || sk_map_put(s->parts, buf, kl, p) != 0) {
        free(name);
        free(p);
        return SK_ERR_NOMEM;
    }
    if (tl)
        memcpy(name, k->topic.p, (size_t)tl);
    name[tl] = 0;
    p->key = *k;
    p->key.topic = (kc_str){name, k->topic.len < 0 ? -1 : tl};
    p->req = *prm;
    p->hw = hw;
    p->log_start = log_start;
    append_part(s, p);
    s->n++;
    s->cache->nparts++;
    return 0;
}

void sk_fs_forget(sk_fs_session *s, const sk_fs_key *k)
{
    uint8_t buf[4 + KEY_MAX];
    size_t kl = key_bytes(s, k, buf);
    sk_fs_part *p = kl ? sk_map_del(s->parts, buf, kl) : NULL;
    if (!p)
        return;
    unlink_part(s, p);
    free((char *)p->key.topic.p);
    free(p);
    s->n--;
    s->cache->nparts--;
}

bool sk_fs_answered(sk_fs_session *s, sk_fs_part *p, const sk_fs_answer *a)
{
    bool send = a->records || a->must_send;
    if (p->hw != a->hw) {
        send = true;
        p->hw = a->hw;
    }
    if (p->log_start != a->log_start) {
        send = true;
        p->log_start = a->log_start;
    }
    if (a->error != 0) {
        /* Sent again once the error goes away. */
        p->hw = -1;
        send = true;
    }
    if (a->records && p != s->tail) {
        unlink_part(s, p);
        append_part(s, p);
    }
    return send;
}
