#include "gcoord.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"

struct proto {
    char *name;
    uint8_t *meta;
    int32_t len;
};

typedef struct member {
    char *id, *instance, *client_id, *client_host;
    int32_t session_ms, rebalance_ms;
    int nprotos;
    struct proto *protos;
    uint8_t *assignment;
    int32_t assign_len;
    sk_gc_join_cb join_cb; /* set while awaiting the end of a rebalance */
    void *join_arg;
    sk_gc_sync_cb sync_cb; /* set while awaiting the leader's assignment */
    void *sync_arg;
    int64_t expires; /* session deadline */
} member;

struct pending {
    char *id;
    int64_t expires;
};

/* Invariants: members[] holds distinct ids; leader is NULL or one of them;
 * in COMPLETING every member answered its join; join_cb is only set in
 * PREPARING and sync_cb only in COMPLETING. */
struct sk_gc_group {
    char *id;
    sk_gc_state state;
    int32_t generation;
    char *protocol_type, *protocol_name, *leader;
    member **members;
    int nmembers, capmembers;
    struct pending *pending;
    int npending, cappending;
    int64_t deadline;     /* PREPARING: the rebalance ends here at the latest */
    bool initial;         /* PREPARING from Empty: wait the whole delay */
    int64_t initial_cap;  /* the initial delay never extends past this */
};

struct sk_gc {
    sk_gc_config cfg;
    sk_map *groups;
};

const char *sk_gc_state_name(sk_gc_state s)
{
    switch (s) {
    case SK_GC_EMPTY:
        return "Empty";
    case SK_GC_PREPARING:
        return "PreparingRebalance";
    case SK_GC_COMPLETING:
        return "CompletingRebalance";
    case SK_GC_STABLE:
        return "Stable";
    case SK_GC_DEAD:
        return "Dead";
    }
    return "Unknown";
}

static char *dupstr(kc_str s)
{
    if (s.len < 0)
        return NULL;
    return strndup(s.p ? s.p : "", (size_t)s.len);
}

static bool str_eq(const char *a, kc_str b)
{
    if (!a)
        return b.len < 0;
    return b.len >= 0 && strlen(a) == (size_t)b.len && memcmp(a, b.p, (size_t)b.len) == 0;
}

static void member_free(member *m)
{
    free(m->id);
    free(m->instance);
    free(m->client_id);
    free(m->client_host);
    for (int i = 0; i < m->nprotos; i++) {
        free(m->protos[i].name);
        free(m->protos[i].meta);
    }
    free(m->protos);
    free(m->assignment);
    free(m);
}

static bool set_protocols(member *m, const sk_gc_join_args *a)
{
    struct proto *np = calloc((size_t)(a->nprotocols ? a->nprotocols : 1), sizeof *np);
    if (!np)
        return false;
    for (int i = 0; i < a->nprotocols; i++) {
        np[i].name = dupstr(a->protocols[i].name);
        int32_t l = a->protocols[i].metadata.len > 0 ? a->protocols[i].metadata.len : 0;
        np[i].meta = malloc(l ? (size_t)l : 1);
        if (!np[i].name || !np[i].meta) {
            for (int j = 0; j <= i; j++) {
                free(np[j].name);
                free(np[j].meta);
            }
            free(np);
            return false;
        }
        if (l)
            memcpy(np[i].meta, a->protocols[i].metadata.p, (size_t)l);
        np[i].len = l;
    }
    for (int i = 0; i < m->nprotos; i++) {
        free(m->protos[i].name);
        free(m->protos[i].meta);
    }
    free(m->protos);
    m->protos = np;
    m->nprotos = a->nprotocols;
    m->session_ms = a->session_timeout_ms;
    m->rebalance_ms = a->rebalance_timeout_ms;
    return true;
}

static bool same_protocols(const member *m, const sk_gc_join_args *a)
{
    if (m->nprotos != a->nprotocols)
        return false;
    for (int i = 0; i < m->nprotos; i++) {
        if (!str_eq(m->protos[i].name, a->protocols[i].name))
            return false;
        int32_t l = a->protocols[i].metadata.len > 0 ? a->protocols[i].metadata.len : 0;
        if (l != m->protos[i].len || (l && memcmp(m->protos[i].meta, a->protocols[i].metadata.p,
                                                  (size_t)l) != 0))
            return false;
    }
    return true;
}

static const struct proto *member_proto(const member *m, const char *name)
{
    for (int i = 0; i < m->nprotos; i++)
        if (name && strcmp(m->protos[i].name, name) == 0)
            return &m->protos[i];
    return NULL;
}

static void random_id(char *out, size_t len, const char *prefix)
{
    uint8_t b[16];
    if (getrandom(b, sizeof b, 0) != (ssize_t)sizeof b)
        for (size_t i = 0; i < sizeof b; i++)
            b[i] = (uint8_t)rand();
    snprintf(out, len,
             "%s-%02x%02x%02x%02x-%02x%02x-%02x%02x-%02x%02x-%02x%02x%02x%02x%02x%02x", prefix,
             b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7], b[8], b[9], b[10], b[11], b[12],
             b[13], b[14], b[15]);
}

/* ---- groups ---- */

sk_gc *sk_gc_new(const sk_gc_config *cfg)
{
    sk_gc *gc = calloc(1, sizeof *gc);
    if (!gc)
        return NULL;
    gc->cfg = *cfg;
    gc->groups = sk_map_new();
    if (!gc->groups) {
        free(gc);
        return NULL;
    }
    return gc;
}

sk_gc_group *sk_gc_find(const sk_gc *gc, const char *group_id, size_t len)
{
    return sk_map_get(gc->groups, group_id, len);
}

static sk_gc_group *group_create(sk_gc *gc, kc_str id)
{
    sk_gc_group *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->id = dupstr(id);
    g->state = SK_GC_EMPTY;
    if (!g->id || sk_map_put(gc->groups, id.p, (size_t)id.len, g) != 0) {
        free(g->id);
        free(g);
        return NULL;
    }
    return g;
}

static member *find_member(const sk_gc_group *g, const char *id, size_t len)
{
    for (int i = 0; i < g->nmembers; i++)
        if (strlen(g->members[i]->id) == len && memcmp(g->members[i]->id, id, len) == 0)
            return g->members[i];
    return NULL;
}

static member *find_instance(const sk_gc_group *g, kc_str inst)
{
    if (inst.len < 0)
        return NULL;
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i]->instance && str_eq(g->members[i]->instance, inst))
            return g->members[i];
    return NULL;
}

static bool add_member(sk_gc_group *g, member *m)
{
    if (g->nmembers == g->capmembers) {
        int ncap = g->capmembers ? g->capmembers * 2 : 4;
        member **nm = realloc(g->members, (size_t)ncap * sizeof *nm);
        if (!nm)
            return false;
        g->members = nm;
        g->capmembers = ncap;
    }
    g->members[g->nmembers++] = m;
    return true;
}

static void answer_join(member *m, const sk_gc_join_result *res)
{
    sk_gc_join_cb cb = m->join_cb;
    void *arg = m->join_arg;
    m->join_cb = NULL;
    m->join_arg = NULL;
    if (cb)
        cb(arg, res);
}

static void answer_sync(member *m, const sk_gc_sync_result *res)
{
    sk_gc_sync_cb cb = m->sync_cb;
    void *arg = m->sync_arg;
    m->sync_cb = NULL;
    m->sync_arg = NULL;
    if (cb)
        cb(arg, res);
}

static void join_error(sk_gc_join_cb cb, void *arg, int16_t err, const char *member_id)
{
    sk_gc_join_result res = {0};
    res.error = err;
    res.generation = -1;
    res.member_id = member_id ? member_id : "";
    res.leader_id = "";
    cb(arg, &res);
}

static void sync_error(sk_gc_sync_cb cb, void *arg, int16_t err)
{
    sk_gc_sync_result res = {0};
    res.error = err;
    cb(arg, &res);
}

/* Removes a member, answering what it waits for; it does not rebalance. */
static void drop_member(sk_gc_group *g, member *m, int16_t err)
{
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i] == m) {
            g->members[i] = g->members[--g->nmembers];
            break;
        }
    if (m->join_cb) {
        sk_gc_join_cb cb = m->join_cb;
        void *arg = m->join_arg;
        m->join_cb = NULL;
        join_error(cb, arg, err, m->id);
    }
    if (m->sync_cb) {
        sk_gc_sync_cb cb = m->sync_cb;
        void *arg = m->sync_arg;
        m->sync_cb = NULL;
        sync_error(cb, arg, err);
    }
    if (g->leader && strcmp(g->leader, m->id) == 0) {
        free(g->leader);
        g->leader = NULL;
    }
    member_free(m);
}

static int32_t max_rebalance_ms(const sk_gc_group *g)
{
    int32_t mx = 0;
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i]->rebalance_ms > mx)
            mx = g->members[i]->rebalance_ms;
    return mx;
}

static void prepare_rebalance(sk_gc *gc, sk_gc_group *g, int64_t now)
{
    if (g->state == SK_GC_COMPLETING) {
        /* The assignment being made is for a generation that is over. */
        sk_gc_sync_result res = {0};
        res.error = SK_KAFKA_REBALANCE_IN_PROGRESS;
        for (int i = 0; i < g->nmembers; i++) {
            member *m = g->members[i];
            if (m->sync_cb)
                answer_sync(m, &res);
        }
    }
    if (g->state == SK_GC_EMPTY) {
        g->initial = true;
        g->deadline = now + gc->cfg.initial_rebalance_delay_ms;
        g->initial_cap = now + max_rebalance_ms(g);
        if (g->initial_cap < g->deadline)
            g->initial_cap = g->deadline;
    } else if (g->state != SK_GC_PREPARING) {
        g->initial = false;
        g->deadline = now + max_rebalance_ms(g);
    }
    g->state = SK_GC_PREPARING;
}

static bool all_joined(const sk_gc_group *g)
{
    if (g->npending > 0)
        return false;
    for (int i = 0; i < g->nmembers; i++)
        if (!g->members[i]->join_cb)
            return false;
    return true;
}

/* The protocol every member supports that most members prefer. */
static const char *select_protocol(const sk_gc_group *g)
{
    if (g->nmembers == 0)
        return NULL;
    const member *first = g->members[0];
    const char *best = NULL;
    int best_votes = -1;
    for (int c = 0; c < first->nprotos; c++) {
        const char *cand = first->protos[c].name;
        bool everyone = true;
        for (int i = 1; i < g->nmembers && everyone; i++)
            everyone = member_proto(g->members[i], cand) != NULL;
        if (!everyone)
            continue;
        int votes = 0;
        for (int i = 0; i < g->nmembers; i++) {
            const member *m = g->members[i];
            /* A member votes for its first protocol that all support. */
            for (int k = 0; k < m->nprotos; k++) {
                bool all = true;
                for (int j = 0; j < g->nmembers && all; j++)
                    all = member_proto(g->members[j], m->protos[k].name) != NULL;
                if (all) {
                    if (strcmp(m->protos[k].name, cand) == 0)
                        votes++;
                    break;
                }
            }
        }
        if (votes > best_votes) {
            best = cand;
            best_votes = votes;
        }
    }
    return best;
}

static void complete_join(sk_gc *gc, sk_gc_group *g, int64_t now)
{
    (void)gc;
    /* Dynamic members that did not rejoin in time leave the group; static
     * ones stay until their session times out (Kafka's rule: a restarting
     * static member keeps its place). */
    for (int i = g->nmembers - 1; i >= 0; i--)
        if (!g->members[i]->join_cb && !g->members[i]->instance)
            drop_member(g, g->members[i], SK_KAFKA_UNKNOWN_MEMBER_ID);
    /* The leader must be a member that rejoined. */
    member *lead = g->leader ? find_member(g, g->leader, strlen(g->leader)) : NULL;
    if (!lead || !lead->join_cb) {
        member *j = NULL;
        for (int i = 0; i < g->nmembers && !j; i++)
            if (g->members[i]->join_cb)
                j = g->members[i];
        if (!j && g->nmembers > 0) {
            /* Only static members that have not rejoined: wait again. */
            g->initial = false;
            g->deadline = now + max_rebalance_ms(g);
            return;
        }
        free(g->leader);
        g->leader = j ? strdup(j->id) : NULL;
    }
    g->generation++;
    g->initial = false;
    free(g->protocol_name);
    g->protocol_name = NULL;
    if (g->nmembers == 0) {
        g->state = SK_GC_EMPTY;
        return;
    }
    const char *sel = select_protocol(g);
    g->protocol_name = sel ? strdup(sel) : NULL;
    if (!g->leader)
        g->leader = strdup(g->members[0]->id);
    g->state = SK_GC_COMPLETING;
    sk_gc_member_info *infos = calloc((size_t)g->nmembers, sizeof *infos);
    for (int i = 0; infos && i < g->nmembers; i++) {
        const member *m = g->members[i];
        const struct proto *p = member_proto(m, g->protocol_name);
        infos[i].member_id = m->id;
        infos[i].instance_id = m->instance;
        infos[i].metadata = p ? p->meta : NULL;
        infos[i].metadata_len = p ? p->len : 0;
    }
    /* Answer every member; collect first, since answering may not touch g. */
    int n = g->nmembers;
    member **ms = malloc((size_t)n * sizeof *ms);
    if (ms)
        memcpy(ms, g->members, (size_t)n * sizeof *ms);
    for (int i = 0; ms && i < n; i++) {
        member *m = ms[i];
        m->expires = now + m->session_ms;
        sk_gc_join_result res = {0};
        res.error = 0;
        res.generation = g->generation;
        res.protocol_type = g->protocol_type;
        res.protocol_name = g->protocol_name;
        res.leader_id = g->leader;
        res.member_id = m->id;
        if (strcmp(m->id, g->leader) == 0 && infos) {
            res.nmembers = g->nmembers;
            res.members = infos;
        }
        answer_join(m, &res);
    }
    free(ms);
    free(infos);
}

static void check_join_complete(sk_gc *gc, sk_gc_group *g, int64_t now)
{
    if (g->state == SK_GC_PREPARING && !g->initial && all_joined(g))
        complete_join(gc, g, now);
}

static bool protocols_compatible(const sk_gc_group *g, const sk_gc_join_args *a)
{
    if (a->protocol_type.len <= 0 || a->nprotocols <= 0)
        return false;
    if (g->nmembers == 0)
        return true;
    if (!str_eq(g->protocol_type, a->protocol_type))
        return false;
    /* Some protocol of the joiner must be supported by every member. */
    for (int k = 0; k < a->nprotocols; k++) {
        bool all = true;
        for (int i = 0; i < g->nmembers && all; i++) {
            const member *m = g->members[i];
            bool has = false;
            for (int j = 0; j < m->nprotos && !has; j++)
                has = str_eq(m->protos[j].name, a->protocols[k].name);
            all = has;
        }
        if (all)
            return true;
    }
    return false;
}

/* The current state, answered to a member whose join changes nothing. */
static void answer_current(sk_gc_group *g, member *m, sk_gc_join_cb cb, void *arg)
{
    sk_gc_join_result res = {0};
    res.generation = g->generation;
    res.protocol_type = g->protocol_type;
    res.protocol_name = g->protocol_name;
    res.leader_id = g->leader ? g->leader : "";
    res.member_id = m->id;
    sk_gc_member_info *infos = NULL;
    if (g->leader && strcmp(g->leader, m->id) == 0) {
        infos = calloc((size_t)g->nmembers, sizeof *infos);
        for (int i = 0; infos && i < g->nmembers; i++) {
            const struct proto *p = member_proto(g->members[i], g->protocol_name);
            infos[i].member_id = g->members[i]->id;
            infos[i].instance_id = g->members[i]->instance;
            infos[i].metadata = p ? p->meta : NULL;
            infos[i].metadata_len = p ? p->len : 0;
        }
        res.nmembers = infos ? g->nmembers : 0;
        res.members = infos;
    }
    cb(arg, &res);
    free(infos);
}

static member *new_member(const sk_gc_join_args *a, const char *id, int64_t now)
{
    member *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->id = strdup(id);
    m->instance = dupstr(a->instance_id);
    m->client_id = dupstr(a->client_id);
    m->client_host = dupstr(a->client_host);
    if (!m->id || (a->instance_id.len >= 0 && !m->instance) || !set_protocols(m, a)) {
        member_free(m);
        return NULL;
    }
    m->expires = now + a->session_timeout_ms;
    return m;
}

static void join_as_member(sk_gc *gc, sk_gc_group *g, member *m, const sk_gc_join_args *a,
                           int64_t now, sk_gc_join_cb cb, void *arg)
{
    /* The first member of an empty group sets its protocol type (an Empty
     * group keeps its last one, as Kafka shows it). */
    if (!g->protocol_type || g->nmembers == 1) {
        free(g->protocol_type);
        g->protocol_type = dupstr(a->protocol_type);
    }
    m->join_cb = cb;
    m->join_arg = arg;
    if (g->state != SK_GC_PREPARING) {
        prepare_rebalance(gc, g, now);
    } else if (g->initial) {
        /* Every newcomer during the initial delay buys another delay, up to
         * the rebalance timeout. */
        int64_t d = now + gc->cfg.initial_rebalance_delay_ms;
        if (now + m->rebalance_ms > g->initial_cap)
            g->initial_cap = now + m->rebalance_ms;
        g->deadline = d < g->initial_cap ? d : g->initial_cap;
    }
    check_join_complete(gc, g, now);
}

static void remove_pending(sk_gc_group *g, int i)
{
    free(g->pending[i].id);
    g->pending[i] = g->pending[--g->npending];
}

static int find_pending(const sk_gc_group *g, kc_str id)
{
    for (int i = 0; i < g->npending; i++)
        if (str_eq(g->pending[i].id, id))
            return i;
    return -1;
}

static int16_t lookup(const sk_gc_group *g, kc_str member_id, kc_str instance_id, member **out);

void sk_gc_join(sk_gc *gc, const sk_gc_join_args *a, int64_t now, sk_gc_join_cb cb, void *arg)
{
    char idbuf[400];
    if (a->group_id.len <= 0) {
        join_error(cb, arg, SK_KAFKA_INVALID_GROUP_ID, NULL);
        return;
    }
    if (a->session_timeout_ms < gc->cfg.min_session_ms ||
        a->session_timeout_ms > gc->cfg.max_session_ms) {
        join_error(cb, arg, SK_KAFKA_INVALID_SESSION_TIMEOUT, NULL);
        return;
    }
    sk_gc_group *g = sk_gc_find(gc, a->group_id.p, (size_t)a->group_id.len);
    bool known_member = a->member_id.len > 0;
    if (!g) {
        if (known_member) {
            join_error(cb, arg, SK_KAFKA_UNKNOWN_MEMBER_ID, NULL);
            return;
        }
        g = group_create(gc, a->group_id);
        if (!g) {
            join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
            return;
        }
    }
    if (!protocols_compatible(g, a)) {
        join_error(cb, arg, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL, NULL);
        return;
    }

    if (!known_member) {
        char prefix[256];
        snprintf(prefix, sizeof prefix, "%.*s",
                 a->client_id.len > 0 ? (a->client_id.len > 200 ? 200 : a->client_id.len) : 0,
                 a->client_id.len > 0 ? a->client_id.p : "");
        random_id(idbuf, sizeof idbuf, prefix);
        if (a->instance_id.len >= 0) {
            member *old = find_instance(g, a->instance_id);
            if (old) {
                /* A static member comes back under a new id: the old id is
                 * fenced; answers it was waiting for say so. */
                if (old->join_cb) {
                    sk_gc_join_cb ocb = old->join_cb;
                    void *oarg = old->join_arg;
                    old->join_cb = NULL;
                    join_error(ocb, oarg, SK_KAFKA_FENCED_INSTANCE_ID, old->id);
                }
                if (old->sync_cb) {
                    sk_gc_sync_cb ocb = old->sync_cb;
                    void *oarg = old->sync_arg;
                    old->sync_cb = NULL;
                    sync_error(ocb, oarg, SK_KAFKA_FENCED_INSTANCE_ID);
                }
                bool was_leader = g->leader && strcmp(g->leader, old->id) == 0;
                char *nid = strdup(idbuf);
                if (!nid) {
                    join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
                    return;
                }
                char *old_id = old->id;
                old->id = nid;
                if (was_leader) {
                    free(g->leader);
                    g->leader = strdup(nid);
                }
                set_protocols(old, a);
                old->expires = now + old->session_ms;
                const char *sel = g->state == SK_GC_STABLE ? select_protocol(g) : NULL;
                if (sel && g->protocol_name && strcmp(sel, g->protocol_name) == 0) {
                    /* As Kafka (KIP-345): a restarted static member that
                     * leaves the group's protocol as it is rejoins without a
                     * rebalance and gets its assignment back by SyncGroup.
                     * A former leader is named the old leader id, so that
                     * it does not compute a new assignment. */
                    sk_gc_join_result res = {0};
                    res.generation = g->generation;
                    res.protocol_type = g->protocol_type;
                    res.protocol_name = g->protocol_name;
                    res.leader_id = was_leader ? old_id : (g->leader ? g->leader : "");
                    res.member_id = old->id;
                    cb(arg, &res);
                    free(old_id);
                    return;
                }
                free(old_id);
                join_as_member(gc, g, old, a, now, cb, arg);
                return;
            }
            member *m = new_member(a, idbuf, now);
            if (!m || !add_member(g, m)) {
                if (m)
                    member_free(m);
                join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
                return;
            }
            join_as_member(gc, g, m, a, now, cb, arg);
            return;
        }
        if (a->require_known_member) {
            /* Two-step join: the member comes back with this id, which
             * keeps retries of the first request from adding members. */
            if (g->npending == g->cappending) {
                int ncap = g->cappending ? g->cappending * 2 : 4;
                struct pending *np = realloc(g->pending, (size_t)ncap * sizeof *np);
                if (!np) {
                    join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
                    return;
                }
                g->pending = np;
                g->cappending = ncap;
            }
            g->pending[g->npending].id = strdup(idbuf);
            g->pending[g->npending].expires = now + a->session_timeout_ms;
            if (!g->pending[g->npending].id) {
                join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
                return;
            }
            g->npending++;
            join_error(cb, arg, SK_KAFKA_MEMBER_ID_REQUIRED, idbuf);
            return;
        }
        member *m = new_member(a, idbuf, now);
        if (!m || !add_member(g, m)) {
            if (m)
                member_free(m);
            join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
            return;
        }
        join_as_member(gc, g, m, a, now, cb, arg);
        return;
    }

    int pi = find_pending(g, a->member_id);
    if (pi >= 0) {
        remove_pending(g, pi);
        member *m = new_member(a, g->pending ? "" : "", now);
        if (m) {
            free(m->id);
            m->id = dupstr(a->member_id);
        }
        if (!m || !m->id || !add_member(g, m)) {
            if (m)
                member_free(m);
            join_error(cb, arg, SK_KAFKA_COORDINATOR_NOT_AVAILABLE, NULL);
            return;
        }
        join_as_member(gc, g, m, a, now, cb, arg);
        return;
    }
    member *m;
    int16_t lerr = lookup(g, a->member_id, a->instance_id, &m);
    if (lerr) {
        join_error(cb, arg, lerr, NULL);
        return;
    }
    if (m->join_cb) {
        /* A retry while the first join still waits: the newer one wins. */
        sk_gc_join_cb ocb = m->join_cb;
        void *oarg = m->join_arg;
        m->join_cb = NULL;
        join_error(ocb, oarg, SK_KAFKA_REBALANCE_IN_PROGRESS, m->id);
    }
    bool same = same_protocols(m, a);
    bool leader = g->leader && strcmp(g->leader, m->id) == 0;
    m->expires = now + a->session_timeout_ms;
    switch (g->state) {
    case SK_GC_PREPARING:
        set_protocols(m, a);
        join_as_member(gc, g, m, a, now, cb, arg);
        return;
    case SK_GC_COMPLETING:
        if (same) {
            answer_current(g, m, cb, arg);
            return;
        }
        set_protocols(m, a);
        join_as_member(gc, g, m, a, now, cb, arg);
        return;
    case SK_GC_STABLE:
        if (same && !leader) {
            answer_current(g, m, cb, arg);
            return;
        }
        set_protocols(m, a);
        join_as_member(gc, g, m, a, now, cb, arg);
        return;
    default:
        join_error(cb, arg, SK_KAFKA_UNKNOWN_MEMBER_ID, NULL);
        return;
    }
}

/* Member lookup shared by sync, heartbeat, leave and commit checks. */
static int16_t lookup(const sk_gc_group *g, kc_str member_id, kc_str instance_id, member **out)
{
    *out = NULL;
    if (!g)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    /* As Kafka: a request naming an instance id is judged by that instance
     * alone (unknown instance: UNKNOWN_MEMBER_ID; held by another member
     * id: FENCED_INSTANCE_ID), one without by its member id. */
    if (instance_id.len >= 0) {
        member *s = find_instance(g, instance_id);
        if (!s)
            return SK_KAFKA_UNKNOWN_MEMBER_ID;
        if (!str_eq(s->id, member_id))
            return SK_KAFKA_FENCED_INSTANCE_ID;
        *out = s;
        return 0;
    }
    member *m = member_id.len > 0 ? find_member(g, member_id.p, (size_t)member_id.len) : NULL;
    if (!m)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    *out = m;
    return 0;
}

void sk_gc_sync(sk_gc *gc, const sk_gc_sync_args *a, int64_t now, sk_gc_sync_cb cb, void *arg)
{
    (void)gc;
    sk_gc_group *g =
        a->group_id.len > 0 ? sk_gc_find(gc, a->group_id.p, (size_t)a->group_id.len) : NULL;
    if (a->group_id.len <= 0) {
        sync_error(cb, arg, SK_KAFKA_INVALID_GROUP_ID);
        return;
    }
    member *m;
    int16_t err = lookup(g, a->member_id, a->instance_id, &m);
    if (err) {
        sync_error(cb, arg, err);
        return;
    }
    if (a->generation != g->generation) {
        sync_error(cb, arg, SK_KAFKA_ILLEGAL_GENERATION);
        return;
    }
    if ((a->protocol_type.len >= 0 && !str_eq(g->protocol_type, a->protocol_type)) ||
        (a->protocol_name.len >= 0 && !str_eq(g->protocol_name, a->protocol_name))) {
        sync_error(cb, arg, SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL);
        return;
    }
    switch (g->state) {
    case SK_GC_PREPARING:
        sync_error(cb, arg, SK_KAFKA_REBALANCE_IN_PROGRESS);
        return;
    case SK_GC_STABLE: {
        m->expires = now + m->session_ms;
        sk_gc_sync_result res = {0};
        res.protocol_type = g->protocol_type;
        res.protocol_name = g->protocol_name;
        res.assignment = m->assignment;
        res.assignment_len = m->assign_len;
        cb(arg, &res);
        return;
    }
    case SK_GC_COMPLETING:
        break;
    default:
        sync_error(cb, arg, SK_KAFKA_UNKNOWN_MEMBER_ID);
        return;
    }
    if (m->sync_cb) {
        sk_gc_sync_cb ocb = m->sync_cb;
        void *oarg = m->sync_arg;
        m->sync_cb = NULL;
        sync_error(ocb, oarg, SK_KAFKA_REBALANCE_IN_PROGRESS);
    }
    m->sync_cb = cb;
    m->sync_arg = arg;
    m->expires = now + m->session_ms;
    if (!g->leader || strcmp(g->leader, m->id) != 0)
        return;
    /* The leader's assignment: every member gets its part (or nothing). */
    for (int i = 0; i < g->nmembers; i++) {
        member *x = g->members[i];
        free(x->assignment);
        x->assignment = NULL;
        x->assign_len = 0;
        for (int k = 0; k < a->nassignments; k++)
            if (str_eq(x->id, a->assignments[k].member_id)) {
                int32_t l = a->assignments[k].assignment.len > 0 ? a->assignments[k].assignment.len
                                                                 : 0;
                x->assignment = malloc(l ? (size_t)l : 1);
                if (x->assignment && l)
                    memcpy(x->assignment, a->assignments[k].assignment.p, (size_t)l);
                x->assign_len = x->assignment ? l : 0;
                break;
            }
    }
    g->state = SK_GC_STABLE;
    int n = g->nmembers;
    member **ms = malloc((size_t)n * sizeof *ms);
    if (!ms)
        return;
    memcpy(ms, g->members, (size_t)n * sizeof *ms);
    for (int i = 0; i < n; i++) {
        member *x = ms[i];
        if (!x->sync_cb)
            continue;
        sk_gc_sync_result res = {0};
        res.protocol_type = g->protocol_type;
        res.protocol_name = g->protocol_name;
        res.assignment = x->assignment;
        res.assignment_len = x->assign_len;
        answer_sync(x, &res);
    }
    free(ms);
}

int16_t sk_gc_heartbeat(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                        int32_t generation, int64_t now)
{
    if (group_id.len <= 0)
        return SK_KAFKA_INVALID_GROUP_ID;
    sk_gc_group *g = sk_gc_find(gc, group_id.p, (size_t)group_id.len);
    member *m;
    int16_t err = lookup(g, member_id, instance_id, &m);
    if (err)
        return err;
    if (g->state == SK_GC_EMPTY || g->state == SK_GC_DEAD)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    if (generation != g->generation)
        return SK_KAFKA_ILLEGAL_GENERATION;
    m->expires = now + m->session_ms;
    if (g->state == SK_GC_PREPARING)
        return SK_KAFKA_REBALANCE_IN_PROGRESS;
    return 0;
}

static void after_removal(sk_gc *gc, sk_gc_group *g, int64_t now)
{
    switch (g->state) {
    case SK_GC_STABLE:
    case SK_GC_COMPLETING:
        prepare_rebalance(gc, g, now);
        check_join_complete(gc, g, now);
        break;
    case SK_GC_PREPARING:
        check_join_complete(gc, g, now);
        break;
    default:
        break;
    }
    if (g->state == SK_GC_PREPARING && g->nmembers == 0 && g->npending == 0)
        complete_join(gc, g, now);
}

int16_t sk_gc_leave(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                    int64_t now)
{
    if (group_id.len <= 0)
        return SK_KAFKA_INVALID_GROUP_ID;
    sk_gc_group *g = sk_gc_find(gc, group_id.p, (size_t)group_id.len);
    if (!g)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    member *m = NULL;
    if (member_id.len <= 0 && instance_id.len >= 0) {
        m = find_instance(g, instance_id);
        if (!m)
            return SK_KAFKA_UNKNOWN_MEMBER_ID;
    } else {
        int16_t err = lookup(g, member_id, instance_id, &m);
        if (err) {
            int pi = find_pending(g, member_id);
            if (pi >= 0) {
                remove_pending(g, pi);
                check_join_complete(gc, g, now);
                return 0;
            }
            return err;
        }
    }
    drop_member(g, m, SK_KAFKA_UNKNOWN_MEMBER_ID);
    after_removal(gc, g, now);
    return 0;
}

static int16_t check_commit(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                            int32_t generation, int16_t api_version, bool txn)
{
    sk_gc_group *g =
        group_id.len > 0 ? sk_gc_find(gc, group_id.p, (size_t)group_id.len) : NULL;
    /* Kafka's order (ClassicGroup.validateOffsetCommit). Generation -1 is
     * an admin tool or a consumer assigning partitions by hand: it may
     * commit to an absent or Empty group. */
    if (!g) {
        if (generation < 0)
            return 0;
        return api_version >= 9 && !txn ? SK_KAFKA_GROUP_ID_NOT_FOUND : SK_KAFKA_ILLEGAL_GENERATION;
    }
    if (g->state == SK_GC_DEAD)
        return SK_KAFKA_COORDINATOR_NOT_AVAILABLE;
    if (generation < 0 && g->state == SK_GC_EMPTY)
        return 0;
    if (generation >= 0 || member_id.len > 0 || instance_id.len >= 0) {
        member *m;
        int16_t err = lookup(g, member_id, instance_id, &m);
        if (err)
            return err;
        if (generation != g->generation)
            return SK_KAFKA_ILLEGAL_GENERATION;
    } else if (!txn && g->state != SK_GC_EMPTY) {
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    }
    if (!txn && g->state == SK_GC_COMPLETING)
        return SK_KAFKA_REBALANCE_IN_PROGRESS;
    return 0;
}

int16_t sk_gc_check_commit(sk_gc *gc, kc_str group_id, kc_str member_id, kc_str instance_id,
                           int32_t generation, int16_t api_version)
{
    return check_commit(gc, group_id, member_id, instance_id, generation, api_version, false);
}

int16_t sk_gc_check_txn_commit(sk_gc *gc, kc_str group_id, kc_str member_id,
                               kc_str instance_id, int32_t generation)
{
    return check_commit(gc, group_id, member_id, instance_id, generation, 0, true);
}

int64_t sk_gc_tick(sk_gc *gc, int64_t now)
{
    int64_t next = INT64_MAX;
    size_t it = 0;
    void *v;
    while (sk_map_next(gc->groups, &it, NULL, NULL, &v)) {
        sk_gc_group *g = v;
        bool changed = false;
        for (int i = g->npending - 1; i >= 0; i--)
            if (g->pending[i].expires <= now) {
                remove_pending(g, i);
                changed = true;
            }
        for (int i = g->nmembers - 1; i >= 0; i--) {
            member *m = g->members[i];
            /* A member waiting for the rebalance to end is alive. */
            if (m->join_cb || m->sync_cb)
                continue;
            if (m->expires <= now) {
                SK_INFO("groups", "group %s: member %s missed its session timeout", g->id, m->id);
                drop_member(g, m, SK_KAFKA_UNKNOWN_MEMBER_ID);
                changed = true;
            }
        }
        if (changed)
            after_removal(gc, g, now);
        if (g->state == SK_GC_PREPARING && now >= g->deadline)
            complete_join(gc, g, now);
        if (g->state == SK_GC_PREPARING && g->deadline < next)
            next = g->deadline;
        for (int i = 0; i < g->npending; i++)
            if (g->pending[i].expires < next)
                next = g->pending[i].expires;
        for (int i = 0; i < g->nmembers; i++)
            if (!g->members[i]->join_cb && !g->members[i]->sync_cb &&
                g->members[i]->expires < next)
                next = g->members[i]->expires;
    }
    return next;
}

static void group_free(sk_gc_group *g, int16_t err)
{
    while (g->nmembers)
        drop_member(g, g->members[g->nmembers - 1], err);
    while (g->npending)
        remove_pending(g, g->npending - 1);
    free(g->members);
    free(g->pending);
    free(g->id);
    free(g->protocol_type);
    free(g->protocol_name);
    free(g->leader);
    free(g);
}

void sk_gc_remove(sk_gc *gc, sk_gc_group *g)
{
    sk_gc_evict(gc, g, SK_KAFKA_UNKNOWN_MEMBER_ID);
}

void sk_gc_evict(sk_gc *gc, sk_gc_group *g, int16_t error)
{
    sk_map_del(gc->groups, g->id, strlen(g->id));
    group_free(g, error);
}

void sk_gc_destroy(sk_gc *gc, int16_t error)
{
    if (!gc)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(gc->groups, &it, NULL, NULL, &v))
        group_free(v, error);
    sk_map_destroy(gc->groups);
    free(gc);
}

sk_gc_state sk_gc_group_state(const sk_gc_group *g)
{
    return g->state;
}

const char *sk_gc_group_id(const sk_gc_group *g)
{
    return g->id;
}

const char *sk_gc_group_protocol_type(const sk_gc_group *g)
{
    return g->protocol_type;
}

const char *sk_gc_group_protocol_name(const sk_gc_group *g)
{
    return g->protocol_name;
}

int32_t sk_gc_group_generation(const sk_gc_group *g)
{
    return g->generation;
}

int sk_gc_group_nmembers(const sk_gc_group *g)
{
    return g->nmembers;
}

void sk_gc_group_member(const sk_gc_group *g, int i, sk_gc_member_view *v)
{
    const member *m = g->members[i];
    const struct proto *p = member_proto(m, g->protocol_name);
    v->member_id = m->id;
    v->instance_id = m->instance;
    v->client_id = m->client_id ? m->client_id : "";
    v->client_host = m->client_host ? m->client_host : "";
    v->metadata = p ? p->meta : NULL;
    v->metadata_len = p ? p->len : 0;
    v->assignment = m->assignment;
    v->assignment_len = m->assign_len;
    v->session_ms = m->session_ms;
    v->rebalance_ms = m->rebalance_ms;
    v->nprotocols = m->nprotos;
}

sk_gc_protocol sk_gc_group_member_protocol(const sk_gc_group *g, int i, int k)
{
    const struct proto *p = &g->members[i]->protos[k];
    return (sk_gc_protocol){{p->name, (int32_t)strlen(p->name)}, {p->meta, p->len}};
}

static int adopt_member(sk_gc_group *g, const sk_gc_adopted *a, int64_t now)
{
    char *id = dupstr(a->member.member_id);
    member *m = id ? new_member(&a->member, id, now) : NULL;
    free(id);
    if (!m)
        return SK_ERR_NOMEM;
    m->rebalance_ms = a->member.rebalance_timeout_ms;
    int32_t l = a->assignment.len > 0 ? a->assignment.len : 0;
    m->assignment = malloc((size_t)l + 1);
    if (!m->assignment || !add_member(g, m)) {
        member_free(m);
        return SK_ERR_NOMEM;
    }
    if (l)
        memcpy(m->assignment, a->assignment.p, (size_t)l);
    m->assign_len = l;
    return 0;
}

int sk_gc_adopt(sk_gc *gc, kc_str group_id, int32_t generation, int n, const sk_gc_adopted *ms,
                int64_t now)
{
    if (sk_gc_find(gc, group_id.p, (size_t)group_id.len))
        return SK_ERR_EXIST;
    sk_gc_group *g = group_create(gc, group_id);
    if (!g)
        return SK_ERR_NOMEM;
    g->generation = generation;
    g->protocol_type = strdup("consumer");
    int rc = g->protocol_type ? 0 : SK_ERR_NOMEM;
    for (int i = 0; rc == 0 && i < n; i++)
        rc = adopt_member(g, &ms[i], now);
    const char *sel = rc == 0 ? select_protocol(g) : NULL;
    g->protocol_name = sel ? strdup(sel) : NULL;
    g->leader = g->nmembers > 0 ? strdup(g->members[0]->id) : NULL;
    if (rc != 0 || !g->protocol_name || !g->leader) {
        sk_gc_evict(gc, g, SK_KAFKA_UNKNOWN_MEMBER_ID);
        return rc ? rc : SK_ERR_NOMEM;
    }
    g->state = SK_GC_STABLE;
    prepare_rebalance(gc, g, now);
    return 0;
}

sk_gc_group *sk_gc_next(const sk_gc *gc, size_t *it)
{
    void *v;
    if (!sk_map_next(gc->groups, it, NULL, NULL, &v))
        return NULL;
    return v;
}
