#include "cgroup.h"

#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_buf.h"
#include "sk_err.h"
#include "sk_map.h"

/* ---- partition sets: sorted arrays of (topic id, partition) ---- */

typedef struct tpset {
    int32_t n, cap;
    sk_cg_tp *v;
} tpset;

static int tp_cmp(const sk_cg_tp *a, const sk_cg_tp *b)
{
    int c = memcmp(a->id.b, b->id.b, 16);
    if (c)
        return c;
    return a->part < b->part ? -1 : a->part > b->part;
}

static int tp_qcmp(const void *a, const void *b)
{
    return tp_cmp(a, b);
}

static bool set_has(const tpset *s, const sk_cg_tp *tp)
{
    int32_t lo = 0, hi = s->n;
    while (lo < hi) {
        int32_t mid = (lo + hi) / 2;
        int c = tp_cmp(&s->v[mid], tp);
        if (c == 0)
            return true;
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return false;
}

/* Appends without sorting; set_sort() restores the order. */
static bool set_push(tpset *s, const sk_cg_tp *tp)
{
    if (s->n == s->cap) {
        int32_t nc = s->cap ? s->cap * 2 : 8;
        sk_cg_tp *nv = realloc(s->v, (size_t)nc * sizeof *nv);
        if (!nv)
            return false;
        s->v = nv;
        s->cap = nc;
    }
    s->v[s->n++] = *tp;
    return true;
}

static void set_sort(tpset *s)
{
    if (s->n > 1)
        qsort(s->v, (size_t)s->n, sizeof *s->v, tp_qcmp);
}

static void set_free(tpset *s)
{
    free(s->v);
    *s = (tpset){0};
}

static bool set_copy(tpset *dst, const tpset *src)
{
    dst->n = 0;
    for (int32_t i = 0; i < src->n; i++)
        if (!set_push(dst, &src->v[i]))
            return false;
    return true;
}

static bool set_equal(const tpset *a, const tpset *b)
{
    if (a->n != b->n)
        return false;
    for (int32_t i = 0; i < a->n; i++)
        if (tp_cmp(&a->v[i], &b->v[i]) != 0)
            return false;
    return true;
}

/* ---- members and groups ---- */

typedef enum mstate { M_STABLE, M_UNREVOKED, M_UNRELEASED } mstate;

typedef struct cmember {
    char *id, *instance, *rack, *client_id, *client_host, *assignor;
    char **subs;
    int nsubs;
    char *regex;
    regex_t re;
    bool has_re;
    int32_t epoch, prev_epoch;
    mstate state;
    int32_t rebalance_ms, session_ms;
    tpset assigned, revoking, target;
    int64_t session_deadline, revoke_deadline; /* revoke_deadline 0: none */
    /* A member of the classic protocol (JoinGroup/SyncGroup/Heartbeat) */
    bool classic;
    int32_t classic_session_ms;
    /* Kafka's join and sync timeouts (0: none): a classic member told to
     * rejoin must do so, and one that joined must sync, within its
     * rebalance timeout. */
    int64_t join_deadline, sync_deadline;
    int nprotos;
    sk_cg_proto *protos; /* names and metadata owned by the member */
} cmember;

struct sk_cg_group {
    char *id;
    int32_t epoch, assignment_epoch;
    cmember **members;
    int nmembers, cap;
    uint64_t topics_hash; /* of the subscribed topics' ids and sizes */
    char assignor[32];
    bool dirty; /* state to persist changed */
};

struct sk_cg {
    sk_cg_config cfg;
    char assignors[4][32];
    int nassignors;
    sk_map *groups;
    tpset scratch; /* the last answer's assignment */
};

const char *sk_cg_state_name(sk_cg_state s)
{
    switch (s) {
    case SK_CG_EMPTY:
        return "Empty";
    case SK_CG_ASSIGNING:
        return "Assigning";
    case SK_CG_RECONCILING:
        return "Reconciling";
    case SK_CG_STABLE:
        return "Stable";
    }
    return "Unknown";
}

static char *dupstr(kc_str s)
{
    if (s.len < 0)
        return NULL;
    return strndup(s.p ? s.p : "", (size_t)s.len);
}

static bool str_is(const char *a, kc_str b)
{
    return a && b.len >= 0 && strlen(a) == (size_t)b.len && memcmp(a, b.p, (size_t)b.len) == 0;
}

static void free_subs(cmember *m)
{
    for (int i = 0; i < m->nsubs; i++)
        free(m->subs[i]);
    free(m->subs);
    m->subs = NULL;
    m->nsubs = 0;
}

static void free_protos(cmember *m)
{
    for (int i = 0; i < m->nprotos; i++) {
        free((char *)m->protos[i].name.p);
        free((uint8_t *)m->protos[i].metadata.p);
    }
    free(m->protos);
    m->protos = NULL;
    m->nprotos = 0;
}

static void member_free(cmember *m)
{
    free_protos(m);
    free(m->id);
    free(m->instance);
    free(m->rack);
    free(m->client_id);
    free(m->client_host);
    free(m->assignor);
    free_subs(m);
    free(m->regex);
    if (m->has_re)
        regfree(&m->re);
    set_free(&m->assigned);
    set_free(&m->revoking);
    set_free(&m->target);
    free(m);
}

static void group_free(sk_cg_group *g)
{
    for (int i = 0; i < g->nmembers; i++)
        member_free(g->members[i]);
    free(g->members);
    free(g->id);
    free(g);
}

sk_cg *sk_cg_new(const sk_cg_config *cfg)
{
    sk_cg *cg = calloc(1, sizeof *cg);
    if (!cg)
        return NULL;
    cg->cfg = *cfg;
    cg->groups = sk_map_new();
    if (!cg->groups) {
        free(cg);
        return NULL;
    }
    const char *p = cfg->assignors && *cfg->assignors ? cfg->assignors : "uniform,range";
    while (*p && cg->nassignors < 4) {
        while (*p == ' ' || *p == ',')
            p++;
        size_t l = strcspn(p, ", ");
        if (l && l < sizeof cg->assignors[0])
            snprintf(cg->assignors[cg->nassignors++], sizeof cg->assignors[0], "%.*s", (int)l, p);
        p += l;
    }
    if (cg->nassignors == 0)
        snprintf(cg->assignors[cg->nassignors++], sizeof cg->assignors[0], "uniform");
    cg->cfg.assignors = NULL;
    return cg;
}

void sk_cg_destroy(sk_cg *cg)
{
    if (!cg)
        return;
    size_t it = 0;
    void *v;
    while (sk_map_next(cg->groups, &it, NULL, NULL, &v))
        group_free(v);
    sk_map_destroy(cg->groups);
    set_free(&cg->scratch);
    free(cg);
}

bool sk_cg_assignor_known(const sk_cg *cg, const char *name, size_t len)
{
    for (int i = 0; i < cg->nassignors; i++)
        if (strlen(cg->assignors[i]) == len && memcmp(cg->assignors[i], name, len) == 0)
            return true;
    return false;
}

sk_cg_group *sk_cg_find(const sk_cg *cg, const char *group_id, size_t len)
{
    return sk_map_get(cg->groups, group_id, len);
}

sk_cg_group *sk_cg_next(const sk_cg *cg, size_t *it)
{
    void *v;
    return sk_map_next(cg->groups, it, NULL, NULL, &v) ? v : NULL;
}

void sk_cg_remove(sk_cg *cg, sk_cg_group *g)
{
    sk_map_del(cg->groups, g->id, strlen(g->id));
    group_free(g);
}

static sk_cg_group *group_get(sk_cg *cg, kc_str id)
{
    sk_cg_group *g = sk_cg_find(cg, id.p, (size_t)id.len);
    if (g)
        return g;
    g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    g->id = dupstr(id);
    snprintf(g->assignor, sizeof g->assignor, "%s", cg->assignors[0]);
    if (!g->id || sk_map_put(cg->groups, g->id, strlen(g->id), g) != 0) {
        free(g->id);
        free(g);
        return NULL;
    }
    return g;
}

static cmember *member_by_id(const sk_cg_group *g, kc_str id)
{
    for (int i = 0; i < g->nmembers; i++)
        if (str_is(g->members[i]->id, id))
            return g->members[i];
    return NULL;
}

static cmember *member_by_instance(const sk_cg_group *g, kc_str inst)
{
    for (int i = 0; inst.len >= 0 && i < g->nmembers; i++)
        if (str_is(g->members[i]->instance, inst))
            return g->members[i];
    return NULL;
}

static void member_drop(sk_cg_group *g, cmember *m, bool bump)
{
    g->dirty = true;
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i] == m) {
            g->members[i] = g->members[--g->nmembers];
            break;
        }
    member_free(m);
    if (bump)
        g->epoch++;
}

static cmember *member_add(sk_cg_group *g, kc_str id)
{
    if (g->nmembers == g->cap) {
        int nc = g->cap ? g->cap * 2 : 4;
        cmember **nm = realloc(g->members, (size_t)nc * sizeof *nm);
        if (!nm)
            return NULL;
        g->members = nm;
        g->cap = nc;
    }
    cmember *m = calloc(1, sizeof *m);
    if (!m)
        return NULL;
    m->id = dupstr(id);
    if (!m->id) {
        free(m);
        return NULL;
    }
    g->members[g->nmembers++] = m;
    g->dirty = true;
    return m;
}

/* ---- subscriptions ---- */

static bool member_wants(const cmember *m, const char *topic)
{
    for (int i = 0; i < m->nsubs; i++)
        if (strcmp(m->subs[i], topic) == 0)
            return true;
    return m->has_re && regexec(&m->re, topic, 0, NULL, 0) == 0;
}

bool sk_cg_group_subscribes(const sk_cg_group *g, const char *topic, size_t len)
{
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)len, topic);
    for (int i = 0; i < g->nmembers; i++)
        if (member_wants(g->members[i], name))
            return true;
    return false;
}

/* Patterns that make matching slow or compiling huge are refused: back
 * references (exponential matching) and repetition bounds past 255 (glibc
 * unrolls them); a topic name has at most 249 characters anyway. */
static bool regex_too_costly(const char *re)
{
    if (strlen(re) > SK_CG_REGEX_MAX)
        return true;
    bool in_bound = false;
    for (const char *p = re; *p; p++) {
        if (p[0] == '\\' && p[1] >= '1' && p[1] <= '9')
            return true;
        if (p[0] == '\\' && p[1]) {
            p++;
            continue;
        }
        if (*p == '{' || (*p == ',' && in_bound)) {
            in_bound = true;
            if (strtol(p + 1, NULL, 10) > 255)
                return true;
        } else if (*p == '}') {
            in_bound = false;
        }
    }
    return false;
}

/* Compiles `^(re)$`: Kafka matches the whole name. */
static int16_t compile_regex(const char *re, regex_t *out)
{
    if (regex_too_costly(re))
        return SK_KAFKA_INVALID_REGULAR_EXPRESSION;
    size_t l = strlen(re);
    char *full = malloc(l + 5);
    if (!full)
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    snprintf(full, l + 5, "^(%s)$", re);
    int rc = regcomp(out, full, REG_EXTENDED | REG_NOSUB);
    free(full);
    return rc == 0 ? 0 : SK_KAFKA_INVALID_REGULAR_EXPRESSION;
}

static bool same_subs(const cmember *m, const sk_cg_hb_args *a)
{
    if (m->nsubs != a->nsubs)
        return false;
    for (int i = 0; i < m->nsubs; i++)
        if (!str_is(m->subs[i], a->subs[i]))
            return false;
    return true;
}

/* Applies the subscription fields a heartbeat carries; true when they
 * changed. */
static int16_t update_subscription(cmember *m, const sk_cg_hb_args *a, bool *changed)
{
    if (a->nsubs >= 0 && !same_subs(m, a)) {
        char **ns = calloc((size_t)a->nsubs + 1, sizeof *ns);
        if (!ns)
            return SK_KAFKA_UNKNOWN_SERVER_ERROR;
        for (int i = 0; i < a->nsubs; i++)
            ns[i] = dupstr(a->subs[i]);
        free_subs(m);
        m->subs = ns;
        m->nsubs = a->nsubs;
        *changed = true;
    }
    if (a->regex.len >= 0 && !(m->regex ? str_is(m->regex, a->regex) : a->regex.len == 0)) {
        regex_t re;
        char *s = dupstr(a->regex);
        if (!s)
            return SK_KAFKA_UNKNOWN_SERVER_ERROR;
        if (a->regex.len > 0 && compile_regex(s, &re) != 0) {
            free(s);
            return SK_KAFKA_INVALID_REGULAR_EXPRESSION;
        }
        if (m->has_re)
            regfree(&m->re);
        free(m->regex);
        m->has_re = a->regex.len > 0;
        m->regex = m->has_re ? s : NULL;
        if (m->has_re)
            m->re = re;
        else
            free(s);
        *changed = true;
    }
    if (a->assignor.len >= 0 && !str_is(m->assignor, a->assignor)) {
        free(m->assignor);
        m->assignor = dupstr(a->assignor);
        *changed = true;
    }
    return 0;
}

/* A hash of the topics the group subscribes to, with their ids and sizes:
 * a change (a topic created, deleted or grown) needs a new assignment. */
static uint64_t topics_hash(const sk_cg_group *g, const sk_cg_topic *ts, int nt)
{
    uint64_t h = 1469598103934665603ULL;
    for (int i = 0; i < nt; i++) {
        bool wanted = false;
        for (int k = 0; k < g->nmembers && !wanted; k++)
            wanted = member_wants(g->members[k], ts[i].name);
        if (!wanted)
            continue;
        for (int b = 0; b < 16; b++)
            h = (h ^ ts[i].id.b[b]) * 1099511628211ULL;
        h = (h ^ (uint64_t)(uint32_t)ts[i].nparts) * 1099511628211ULL;
    }
    return h;
}

/* ---- assignors ---- */

typedef struct actx {
    sk_cg_group *g;
    const sk_cg_topic *ts;
    int nt;
    int32_t *count; /* per member */
} actx;

static int member_index_cmp(const void *a, const void *b)
{
    const cmember *x = *(cmember *const *)a, *y = *(cmember *const *)b;
    return strcmp(x->id, y->id);
}

/* Range: per topic, the members subscribed to it in member id order each
 * get a contiguous range, the first ones one partition more. */
static bool assign_range(actx *c, tpset *out)
{
    sk_cg_group *g = c->g;
    cmember **sorted = malloc((size_t)(g->nmembers ? g->nmembers : 1) * sizeof *sorted);
    if (!sorted)
        return false;
    memcpy(sorted, g->members, (size_t)g->nmembers * sizeof *sorted);
    qsort(sorted, (size_t)g->nmembers, sizeof *sorted, member_index_cmp);
    for (int t = 0; t < c->nt; t++) {
        int n = 0;
        for (int k = 0; k < g->nmembers; k++)
            n += member_wants(sorted[k], c->ts[t].name);
        if (n == 0)
            continue;
        int32_t per = c->ts[t].nparts / n, extra = c->ts[t].nparts % n, p = 0;
        int idx = 0;
        for (int k = 0; k < g->nmembers; k++) {
            if (!member_wants(sorted[k], c->ts[t].name))
                continue;
            int32_t take = per + (idx++ < extra ? 1 : 0);
            int mi = 0;
            while (g->members[mi] != sorted[k])
                mi++;
            for (int32_t q = 0; q < take; q++, p++) {
                sk_cg_tp tp = {c->ts[t].id, p, 0};
                if (!set_push(&out[mi], &tp)) {
                    free(sorted);
                    return false;
                }
            }
        }
    }
    free(sorted);
    return true;
}

/* The eligible member with the fewest partitions (ties: lowest id). */
static int least_loaded(actx *c, const char *topic)
{
    int best = -1;
    for (int k = 0; k < c->g->nmembers; k++) {
        if (!member_wants(c->g->members[k], topic))
            continue;
        if (best < 0 || c->count[k] < c->count[best] ||
            (c->count[k] == c->count[best] &&
             strcmp(c->g->members[k]->id, c->g->members[best]->id) < 0))
            best = k;
    }
    return best;
}

/* Uniform: every member as close to the same number of partitions as its
 * subscription allows, keeping partitions where they were (sticky). */
static bool assign_uniform(actx *c, tpset *out)
{
    sk_cg_group *g = c->g;
    int64_t total = 0;
    for (int t = 0; t < c->nt; t++)
        for (int k = 0; k < g->nmembers; k++)
            if (member_wants(g->members[k], c->ts[t].name)) {
                total += c->ts[t].nparts;
                break;
            }
    int32_t quota = g->nmembers ? (int32_t)((total + g->nmembers - 1) / g->nmembers) : 0;
    int *owner = NULL;
    size_t nowner = 0;
    /* Pass 1: previous owners keep what they may, up to the quota. */
    for (int t = 0; t < c->nt; t++)
        for (int32_t p = 0; p < c->ts[t].nparts; p++) {
            int *no = realloc(owner, (nowner + 1) * sizeof *no);
            if (!no) {
                free(owner);
                return false;
            }
            owner = no;
            owner[nowner] = -1;
            sk_cg_tp tp = {c->ts[t].id, p, 0};
            for (int k = 0; k < g->nmembers; k++) {
                cmember *m = g->members[k];
                if (member_wants(m, c->ts[t].name) && c->count[k] < quota &&
                    set_has(&m->target, &tp)) {
                    owner[nowner] = k;
                    c->count[k]++;
                    break;
                }
            }
            nowner++;
        }
    /* Pass 2: the rest to the least loaded eligible member. */
    size_t i = 0;
    for (int t = 0; t < c->nt; t++)
        for (int32_t p = 0; p < c->ts[t].nparts; p++, i++)
            if (owner[i] < 0) {
                owner[i] = least_loaded(c, c->ts[t].name);
                if (owner[i] >= 0)
                    c->count[owner[i]]++;
            }
    /* Pass 3: with different subscriptions, move partitions from a member
     * two or more above another eligible one. */
    bool moved = true;
    for (int rounds = 0; moved && rounds < 1000; rounds++) {
        moved = false;
        i = 0;
        for (int t = 0; t < c->nt; t++)
            for (int32_t p = 0; p < c->ts[t].nparts; p++, i++) {
                int k = owner[i];
                int best = least_loaded(c, c->ts[t].name);
                if (k >= 0 && best >= 0 && c->count[k] > c->count[best] + 1) {
                    c->count[k]--;
                    c->count[best]++;
                    owner[i] = best;
                    moved = true;
                }
            }
    }
    i = 0;
    bool ok = true;
    for (int t = 0; t < c->nt; t++)
        for (int32_t p = 0; p < c->ts[t].nparts; p++, i++)
            if (owner[i] >= 0) {
                sk_cg_tp tp = {c->ts[t].id, p, 0};
                ok = set_push(&out[owner[i]], &tp) && ok;
            }
    free(owner);
    return ok;
}

/* The group's assignor: the one most members ask for, else the default. */
static void pick_assignor(sk_cg *cg, sk_cg_group *g)
{
    int best = 0, bestn = 0;
    for (int i = 0; i < cg->nassignors; i++) {
        int n = 0;
        for (int k = 0; k < g->nmembers; k++)
            n += g->members[k]->assignor && strcmp(g->members[k]->assignor, cg->assignors[i]) == 0;
        if (n > bestn) {
            best = i;
            bestn = n;
        }
    }
    snprintf(g->assignor, sizeof g->assignor, "%s", cg->assignors[best]);
}

/* A new target assignment for the current group epoch. */
static bool compute_target(sk_cg *cg, sk_cg_group *g, const sk_cg_topic *ts, int nt)
{
    pick_assignor(cg, g);
    int n = g->nmembers;
    tpset *out = calloc((size_t)(n ? n : 1), sizeof *out);
    int32_t *count = calloc((size_t)(n ? n : 1), sizeof *count);
    if (!out || !count) {
        free(out);
        free(count);
        return false;
    }
    actx c = {g, ts, nt, count};
    bool ok = strcmp(g->assignor, "range") == 0 ? assign_range(&c, out) : assign_uniform(&c, out);
    for (int k = 0; k < n; k++) {
        if (ok) {
            set_sort(&out[k]);
            set_free(&g->members[k]->target);
            g->members[k]->target = out[k];
        } else {
            set_free(&out[k]);
        }
    }
    free(out);
    free(count);
    if (ok)
        g->assignment_epoch = g->epoch;
    g->dirty = true;
    return ok;
}

/* ---- reconciliation ---- */

/* Does a member other than m hold tp (assigned, or not yet revoked)? */
static bool held_by_other(const sk_cg_group *g, const cmember *m, const sk_cg_tp *tp)
{
    for (int k = 0; k < g->nmembers; k++) {
        const cmember *o = g->members[k];
        if (o != m && (set_has(&o->assigned, tp) || set_has(&o->revoking, tp)))
            return true;
    }
    return false;
}

static bool owned_has_any(const sk_cg_hb_args *a, const tpset *s)
{
    for (int32_t i = 0; i < a->nowned; i++)
        if (set_has(s, &a->owned[i]))
            return true;
    return false;
}

/* Moves m towards its target: revocations first (the member keeps its
 * epoch until it has released them, unless the partitions it says it owns
 * show it already has), then the partitions no one else holds; those
 * still held wait (UNRELEASED) for later heartbeats. */
static bool next_assignment(sk_cg_group *g, cmember *m, const sk_cg_hb_args *a)
{
    tpset keep = {0}, revoke = {0}, add = {0};
    bool unreleased = false, ok = true;
    for (int32_t i = 0; i < m->assigned.n; i++)
        ok = set_push(set_has(&m->target, &m->assigned.v[i]) ? &keep : &revoke,
                      &m->assigned.v[i]) && ok;
    for (int32_t i = 0; i < m->target.n && ok; i++) {
        const sk_cg_tp *tp = &m->target.v[i];
        if (set_has(&m->assigned, tp))
            continue;
        if (held_by_other(g, m, tp)) {
            unreleased = true;
        } else {
            sk_cg_tp given = *tp;
            given.epoch = g->assignment_epoch;
            ok = set_push(&add, &given);
        }
    }
    if (!ok) {
        set_free(&keep);
        set_free(&revoke);
        set_free(&add);
        return false;
    }
    set_free(&m->revoking);
    if (revoke.n > 0 && (a->nowned < 0 || owned_has_any(a, &revoke))) {
        m->state = M_UNREVOKED;
        m->revoking = revoke;
        set_free(&add);
    } else {
        for (int32_t i = 0; i < add.n; i++)
            ok = set_push(&keep, &add.v[i]) && ok;
        set_sort(&keep);
        set_free(&add);
        set_free(&revoke);
        m->state = unreleased ? M_UNRELEASED : M_STABLE;
        if (m->epoch != g->assignment_epoch) {
            m->prev_epoch = m->epoch;
            m->epoch = g->assignment_epoch;
        }
    }
    set_free(&m->assigned);
    m->assigned = keep;
    return ok;
}

static bool reconcile(sk_cg_group *g, cmember *m, const sk_cg_hb_args *a, int64_t now)
{
    switch (m->state) {
    case M_STABLE:
        if (m->epoch == g->assignment_epoch)
            return true;
        break;
    case M_UNREVOKED:
        if (a->nowned < 0 || owned_has_any(a, &m->revoking))
            return true;
        set_free(&m->revoking);
        break;
    case M_UNRELEASED:
        break;
    }
    bool ok = next_assignment(g, m, a);
    m->revoke_deadline = m->state == M_UNREVOKED ? now + m->rebalance_ms : 0;
    g->dirty = true;
    return ok;
}

/* ---- heartbeat ---- */

static int16_t check_request(const sk_cg *cg, const sk_cg_hb_args *a, const char **msg)
{
    bool blank_member = a->member_id.len <= 0;
    if ((a->version >= 1 || a->member_epoch > 0 || a->member_epoch == SK_CG_LEAVE_EPOCH) &&
        blank_member)
        return *msg = "MemberId can't be empty.", SK_KAFKA_INVALID_REQUEST;
    if (a->group_id.len <= 0)
        return *msg = "GroupId can't be empty.", SK_KAFKA_INVALID_REQUEST;
    if (a->instance_id.len == 0)
        return *msg = "InstanceId can't be empty.", SK_KAFKA_INVALID_REQUEST;
    if (a->rack_id.len == 0)
        return *msg = "RackId can't be empty.", SK_KAFKA_INVALID_REQUEST;
    if (a->member_epoch == 0) {
        if (a->rebalance_timeout_ms == -1)
            return *msg = "RebalanceTimeoutMs must be provided in first request.",
                   SK_KAFKA_INVALID_REQUEST;
        if (a->nowned != 0)
            return *msg = "TopicPartitions must be empty when (re-)joining.",
                   SK_KAFKA_INVALID_REQUEST;
        if (a->nsubs < 0 && a->regex.len < 0)
            return *msg = "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null "
                          "when (re-)joining.",
                   SK_KAFKA_INVALID_REQUEST;
    } else if (a->member_epoch == SK_CG_LEAVE_STATIC_EPOCH) {
        if (a->instance_id.len < 0)
            return *msg = "InstanceId can't be null.", SK_KAFKA_INVALID_REQUEST;
    } else if (a->member_epoch < SK_CG_LEAVE_STATIC_EPOCH) {
        return *msg = "MemberEpoch is invalid.", SK_KAFKA_INVALID_REQUEST;
    }
    if (a->assignor.len >= 0 && !sk_cg_assignor_known(cg, a->assignor.p, (size_t)a->assignor.len))
        return *msg = "ServerAssignor is not supported.", SK_KAFKA_UNSUPPORTED_ASSIGNOR;
    return 0;
}

/* Is `owned` (the partitions the member says it has) a subset of s? */
static bool owned_subset(const sk_cg_hb_args *a, const tpset *s)
{
    for (int32_t i = 0; i < a->nowned; i++)
        if (!set_has(s, &a->owned[i]))
            return false;
    return true;
}

/* Kafka's rule: a member one epoch behind may still heartbeat when it owns
 * nothing it was not given (its previous answer was lost). */
static int16_t check_epoch(const cmember *m, const sk_cg_hb_args *a)
{
    if (a->member_epoch > m->epoch)
        return SK_KAFKA_FENCED_MEMBER_EPOCH;
    if (a->member_epoch < m->epoch &&
        (a->member_epoch != m->prev_epoch || !owned_subset(a, &m->assigned)))
        return SK_KAFKA_FENCED_MEMBER_EPOCH;
    return 0;
}

static int16_t leave(sk_cg_group *g, const sk_cg_hb_args *a, sk_cg_hb_result *out)
{
    cmember *m = a->instance_id.len >= 0 ? member_by_instance(g, a->instance_id)
                                         : member_by_id(g, a->member_id);
    if (!m || !str_is(m->id, a->member_id))
        return m ? SK_KAFKA_FENCED_INSTANCE_ID : SK_KAFKA_UNKNOWN_MEMBER_ID;
    out->member_epoch = a->member_epoch;
    if (a->member_epoch == SK_CG_LEAVE_STATIC_EPOCH) {
        m->epoch = SK_CG_LEAVE_STATIC_EPOCH; /* keeps its partitions until it returns */
        g->dirty = true;
        return 0;
    }
    member_drop(g, m, true);
    return 0;
}

/* A static member coming back under a new id takes the old one's place:
 * same assignment, same target, no new group epoch. */
static cmember *replace_static(sk_cg_group *g, cmember *old, const sk_cg_hb_args *a)
{
    char *id = dupstr(a->member_id);
    if (!id)
        return NULL;
    free(old->id);
    old->id = id;
    old->epoch = old->prev_epoch = 0;
    old->state = M_UNRELEASED; /* recomputed below */
    g->dirty = true;
    return old;
}

/* Finds or creates the member a heartbeat is about. */
static int16_t join_member(sk_cg *cg, sk_cg_group *g, const sk_cg_hb_args *a, cmember **mp,
                           bool *created)
{
    cmember *st = member_by_instance(g, a->instance_id);
    cmember *m = member_by_id(g, a->member_id);
    if (m && m->classic)
        return SK_KAFKA_UNKNOWN_MEMBER_ID; /* it speaks the classic protocol */
    if (a->member_epoch != 0) {
        if (a->instance_id.len >= 0) {
            if (!st)
                return SK_KAFKA_UNKNOWN_MEMBER_ID;
            if (!str_is(st->id, a->member_id))
                return SK_KAFKA_FENCED_INSTANCE_ID;
        }
        if (!m)
            return SK_KAFKA_UNKNOWN_MEMBER_ID;
        int16_t e = check_epoch(m, a);
        if (e)
            return e;
        *mp = m;
        return 0;
    }
    if (st && st != m) {
        if (st->epoch != SK_CG_LEAVE_STATIC_EPOCH)
            return SK_KAFKA_UNRELEASED_INSTANCE_ID;
        if (m)
            member_drop(g, m, true);
        *mp = replace_static(g, st, a);
        return *mp ? 0 : SK_KAFKA_UNKNOWN_SERVER_ERROR;
    }
    if (m) {
        *mp = m;
        return 0;
    }
    if (cg->cfg.max_size > 0 && g->nmembers >= cg->cfg.max_size)
        return SK_KAFKA_GROUP_MAX_SIZE_REACHED;
    m = member_add(g, a->member_id);
    if (!m)
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    m->instance = dupstr(a->instance_id);
    *created = true;
    *mp = m;
    return 0;
}

/* Sets *dst to s (unless s is null); true when it changed. */
static bool set_str(char **dst, kc_str s)
{
    if (s.len < 0 || str_is(*dst, s))
        return false;
    char *n = dupstr(s);
    if (!n)
        return false;
    free(*dst);
    *dst = n;
    return true;
}

static bool update_member_info(cmember *m, const sk_cg_hb_args *a, int32_t session_ms, int64_t now)
{
    bool changed = set_str(&m->rack, a->rack_id);
    changed = set_str(&m->client_id, a->client_id) || changed;
    changed = set_str(&m->client_host, a->client_host) || changed;
    if (a->rebalance_timeout_ms >= 0 && m->rebalance_ms != a->rebalance_timeout_ms) {
        m->rebalance_ms = a->rebalance_timeout_ms;
        changed = true;
    }
    changed = changed || m->session_ms != session_ms;
    m->session_ms = session_ms;
    m->session_deadline = now + session_ms;
    return changed;
}

static void answer(sk_cg *cg, const cmember *m, bool full, const tpset *before,
                   sk_cg_hb_result *out)
{
    out->member_id = m->id;
    out->member_epoch = m->epoch;
    if (!full && set_equal(before, &m->assigned))
        return;
    out->has_assignment = set_copy(&cg->scratch, &m->assigned);
    out->nassigned = cg->scratch.n;
    out->assigned = cg->scratch.v;
}

static int16_t heartbeat(sk_cg *cg, const sk_cg_hb_args *a, const sk_cg_topic *topics,
                         int ntopics, int64_t now, sk_cg_hb_result *out)
{
    int16_t err = check_request(cg, a, &out->message);
    if (err)
        return err;
    sk_cg_group *g = sk_cg_find(cg, a->group_id.p, (size_t)a->group_id.len);
    if (a->member_epoch < 0) {
        if (!g)
            return SK_KAFKA_GROUP_ID_NOT_FOUND;
        return leave(g, a, out); /* member_id NULL: the request's */
    }
    if (!g && a->member_epoch != 0)
        return SK_KAFKA_GROUP_ID_NOT_FOUND;
    if (!g && !(g = group_get(cg, a->group_id)))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    cmember *m = NULL;
    bool created = false, changed = false;
    err = join_member(cg, g, a, &m, &created);
    if (err)
        return err;
    err = update_subscription(m, a, &changed);
    if (err) {
        if (created)
            member_drop(g, m, false);
        return err;
    }
    if (update_member_info(m, a, a->session_ms > 0 ? a->session_ms : cg->cfg.session_ms, now))
        g->dirty = true;
    uint64_t h = topics_hash(g, topics, ntopics);
    if (created || changed || h != g->topics_hash) {
        g->epoch++;
        g->dirty = true;
    }
    g->topics_hash = h;
    if (g->epoch > g->assignment_epoch && !compute_target(cg, g, topics, ntopics))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    tpset before = {0};
    bool full = a->member_epoch == 0 ||
                (a->nowned >= 0 && a->nsubs >= 0 && a->rebalance_timeout_ms >= 0);
    bool ok = set_copy(&before, &m->assigned) && reconcile(g, m, a, now);
    if (ok)
        answer(cg, m, full, &before, out);
    set_free(&before);
    return ok ? 0 : SK_KAFKA_UNKNOWN_SERVER_ERROR;
}

void sk_cg_heartbeat(sk_cg *cg, const sk_cg_hb_args *a, const sk_cg_topic *topics, int ntopics,
                     int64_t now, sk_cg_hb_result *out)
{
    memset(out, 0, sizeof *out);
    out->heartbeat_ms = a->heartbeat_ms > 0 ? a->heartbeat_ms : cg->cfg.heartbeat_ms;
    out->error = heartbeat(cg, a, topics, ntopics, now, out);
    if (out->error) {
        out->has_assignment = false;
        out->member_epoch = 0;
        out->member_id = NULL;
    }
}

/* ---- classic members ---- */

static bool same_protos(const cmember *m, const sk_cg_classic_args *a)
{
    if (m->nprotos != a->nprotocols)
        return false;
    for (int i = 0; i < m->nprotos; i++) {
        const sk_cg_proto *x = &m->protos[i], *y = &a->protocols[i];
        int32_t yl = y->metadata.len > 0 ? y->metadata.len : 0;
        if (x->name.len != y->name.len || memcmp(x->name.p, y->name.p, (size_t)x->name.len) != 0 ||
            x->metadata.len != yl || (yl && memcmp(x->metadata.p, y->metadata.p, (size_t)yl) != 0))
            return false;
    }
    return true;
}

/* Copies the member's protocols (names and subscription metadata). */
static bool set_protos(cmember *m, int n, const sk_cg_proto *ps)
{
    sk_cg_proto *np = calloc((size_t)n + 1, sizeof *np);
    if (!np)
        return false;
    for (int i = 0; i < n; i++) {
        int32_t nl = ps[i].name.len > 0 ? ps[i].name.len : 0;
        int32_t ml = ps[i].metadata.len > 0 ? ps[i].metadata.len : 0;
        char *name = malloc((size_t)nl + 1);
        uint8_t *md = malloc((size_t)ml + 1);
        if (name) {
            memcpy(name, ps[i].name.p ? ps[i].name.p : "", (size_t)nl);
            name[nl] = 0;
        }
        if (md && ml)
            memcpy(md, ps[i].metadata.p, (size_t)ml);
        np[i] = (sk_cg_proto){{name, nl}, {md, ml}};
        if (!name || !md) {
            cmember tmp = {.protos = np, .nprotos = i + 1};
            free_protos(&tmp);
            return false;
        }
    }
    free_protos(m);
    m->protos = np;
    m->nprotos = n;
    return true;
}

/* Kafka's rule: protocol type "consumer", and one of the joiner's
 * protocols supported by every classic member already there. */
static bool classic_protocols_ok(const sk_cg_group *g, const sk_cg_classic_args *a)
{
    if (!str_is("consumer", a->protocol_type) || a->nprotocols <= 0)
        return false;
    for (int k = 0; k < a->nprotocols; k++) {
        bool all = true;
        for (int i = 0; i < g->nmembers && all; i++) {
            const cmember *m = g->members[i];
            bool has = !m->classic;
            for (int j = 0; j < m->nprotos && !has; j++)
                has = m->protos[j].name.len == a->protocols[k].name.len &&
                      memcmp(m->protos[j].name.p, a->protocols[k].name.p,
                             (size_t)a->protocols[k].name.len) == 0;
            all = has;
        }
        if (all)
            return true;
    }
    return false;
}

/* The classic member a request names (Kafka's validateConsumerGroupMember
 * and its check that the member uses the classic protocol). */
static int16_t classic_member(const sk_cg_group *g, kc_str member_id, kc_str instance_id,
                              cmember **out)
{
    cmember *m;
    if (instance_id.len >= 0) {
        m = member_by_instance(g, instance_id);
        if (!m)
            return SK_KAFKA_UNKNOWN_MEMBER_ID;
        if (!str_is(m->id, member_id))
            return SK_KAFKA_FENCED_INSTANCE_ID;
    } else {
        m = member_by_id(g, member_id);
    }
    if (!m || !m->classic)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    *out = m;
    return 0;
}

/* Finds the joining member, or adds it; a static member coming back under
 * a new id takes its old place. */
static int16_t classic_find_or_add(sk_cg *cg, sk_cg_group *g, const sk_cg_classic_args *a,
                                   cmember **out, bool *created)
{
    cmember *st = member_by_instance(g, a->instance_id);
    cmember *m = member_by_id(g, a->member_id);
    if (st && st != m) {
        if (m)
            return SK_KAFKA_FENCED_INSTANCE_ID;
        char *id = dupstr(a->member_id);
        if (!id)
            return SK_KAFKA_UNKNOWN_SERVER_ERROR;
        free(st->id);
        st->id = id;
        m = st;
        g->dirty = true;
    }
    if (m) {
        if (!m->classic)
            return SK_KAFKA_UNKNOWN_MEMBER_ID;
        *out = m;
        return 0;
    }
    if (cg->cfg.max_size > 0 && g->nmembers >= cg->cfg.max_size)
        return SK_KAFKA_GROUP_MAX_SIZE_REACHED;
    if (!(m = member_add(g, a->member_id)))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    m->instance = dupstr(a->instance_id);
    m->classic = true;
    *created = true;
    *out = m;
    return 0;
}

/* The heartbeat a JoinGroup stands for: its subscription and what the
 * member says it owns (after an eager revocation: nothing). */
static sk_cg_hb_args classic_hb_args(const sk_cg_classic_args *a)
{
    sk_cg_hb_args h = {0};
    h.group_id = a->group_id;
    h.member_id = a->member_id;
    h.instance_id = a->instance_id;
    h.rack_id = a->rack_id;
    h.client_id = a->client_id;
    h.client_host = a->client_host;
    h.rebalance_timeout_ms = a->rebalance_ms;
    h.nsubs = a->nsubs;
    h.subs = a->subs;
    h.regex = (kc_str){NULL, -1};
    h.assignor = (kc_str){NULL, -1};
    h.nowned = a->nowned >= 0 ? a->nowned : 0;
    h.owned = a->owned;
    return h;
}

static int16_t classic_join(sk_cg *cg, const sk_cg_classic_args *a, const sk_cg_topic *topics,
                            int ntopics, int64_t now, sk_cg_classic_result *out)
{
    sk_cg_group *g = sk_cg_find(cg, a->group_id.p, (size_t)a->group_id.len);
    if (!g)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    if (!classic_protocols_ok(g, a))
        return SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL;
    cmember *m = NULL;
    bool created = false, changed = false;
    int16_t err = classic_find_or_add(cg, g, a, &m, &created);
    if (err)
        return err;
    sk_cg_hb_args h = classic_hb_args(a);
    if ((err = update_subscription(m, &h, &changed)) != 0 ||
        (!same_protos(m, a) && !set_protos(m, a->nprotocols, a->protocols))) {
        if (created)
            member_drop(g, m, false);
        return err ? err : SK_KAFKA_UNKNOWN_SERVER_ERROR;
    }
    m->classic_session_ms = a->session_ms;
    if (update_member_info(m, &h, a->session_ms, now))
        g->dirty = true;
    g->dirty = true;
    uint64_t hash = topics_hash(g, topics, ntopics);
    if (created || changed || hash != g->topics_hash)
        g->epoch++;
    g->topics_hash = hash;
    if (g->epoch > g->assignment_epoch && !compute_target(cg, g, topics, ntopics))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    if (!reconcile(g, m, &h, now))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    m->join_deadline = 0;
    m->sync_deadline = now + m->rebalance_ms;
    out->member_id = m->id;
    out->generation = m->epoch;
    out->protocol_name = m->protos[0].name.p;
    return 0;
}

void sk_cg_classic_join(sk_cg *cg, const sk_cg_classic_args *a, const sk_cg_topic *topics,
                        int ntopics, int64_t now, sk_cg_classic_result *out)
{
    memset(out, 0, sizeof *out);
    out->error = classic_join(cg, a, topics, ntopics, now, out);
    if (out->error) {
        out->generation = -1;
        out->member_id = NULL;
        out->protocol_name = NULL;
    }
}

/* Does m wait for a partition another member still holds? */
static bool waiting_on_unreleased(const sk_cg_group *g, const cmember *m)
{
    for (int32_t i = 0; i < m->target.n; i++)
        if (!set_has(&m->assigned, &m->target.v[i]) && held_by_other(g, m, &m->target.v[i]))
            return true;
    return false;
}

int16_t sk_cg_classic_heartbeat(sk_cg_group *g, kc_str member_id, kc_str instance_id,
                                int32_t generation, int64_t now)
{
    cmember *m = NULL;
    int16_t err = classic_member(g, member_id, instance_id, &m);
    if (err)
        return err;
    if (generation != m->epoch)
        return SK_KAFKA_ILLEGAL_GENERATION;
    m->session_deadline = now + m->classic_session_ms;
    /* Rejoin when the group moved on, when partitions are to be given up,
     * or when the partitions it waits for are free. */
    if (m->epoch < g->epoch || m->state == M_UNREVOKED ||
        (m->state == M_UNRELEASED && !waiting_on_unreleased(g, m))) {
        if (!m->join_deadline)
            m->join_deadline = now + m->rebalance_ms;
        return SK_KAFKA_REBALANCE_IN_PROGRESS;
    }
    return 0;
}

int16_t sk_cg_classic_sync(sk_cg *cg, sk_cg_group *g, const sk_cg_classic_sync_args *a,
                           int64_t now, sk_cg_classic_sync_result *out)
{
    memset(out, 0, sizeof *out);
    cmember *m = NULL;
    int16_t err = classic_member(g, a->member_id, a->instance_id, &m);
    if (err)
        return err;
    if (a->generation != m->epoch)
        return SK_KAFKA_ILLEGAL_GENERATION;
    if ((a->protocol_type.len >= 0 && !str_is("consumer", a->protocol_type)) ||
        (a->protocol_name.len >= 0 && !str_is(m->protos[0].name.p, a->protocol_name)))
        return SK_KAFKA_INCONSISTENT_GROUP_PROTOCOL;
    if (g->epoch > m->epoch && m->state != M_UNREVOKED) {
        if (!m->join_deadline)
            m->join_deadline = now + m->rebalance_ms;
        return SK_KAFKA_REBALANCE_IN_PROGRESS;
    }
    m->sync_deadline = 0;
    m->session_deadline = now + m->classic_session_ms;
    if (!set_copy(&cg->scratch, &m->assigned))
        return SK_KAFKA_UNKNOWN_SERVER_ERROR;
    out->protocol_name = m->protos[0].name.p;
    out->metadata = m->protos[0].metadata.p;
    out->metadata_len = m->protos[0].metadata.len;
    out->nassigned = cg->scratch.n;
    out->assigned = cg->scratch.v;
    return 0;
}

int16_t sk_cg_classic_leave(sk_cg_group *g, kc_str member_id, kc_str instance_id)
{
    cmember *m = NULL;
    if (instance_id.len >= 0 && member_id.len <= 0) {
        m = member_by_instance(g, instance_id); /* an admin removing a static member */
        if (!m || !m->classic)
            return SK_KAFKA_UNKNOWN_MEMBER_ID;
    } else {
        int16_t err = classic_member(g, member_id, instance_id, &m);
        if (err)
            return err;
    }
    member_drop(g, m, true);
    return 0;
}

bool sk_cg_all_classic(const sk_cg_group *g)
{
    for (int i = 0; i < g->nmembers; i++)
        if (!g->members[i]->classic)
            return false;
    return g->nmembers > 0;
}

static int16_t adopt_member(sk_cg_group *g, const sk_cg_adopted *c, int32_t generation,
                            int64_t now)
{
    const sk_cg_classic_args *a = &c->member;
    cmember *m = member_add(g, a->member_id);
    if (!m)
        return SK_ERR_NOMEM;
    m->classic = true;
    m->instance = dupstr(a->instance_id);
    sk_cg_hb_args h = classic_hb_args(a);
    bool changed = false;
    if (update_subscription(m, &h, &changed) != 0 || !set_protos(m, a->nprotocols, a->protocols))
        return SK_ERR_NOMEM;
    m->classic_session_ms = a->session_ms;
    update_member_info(m, &h, a->session_ms, now);
    m->epoch = m->prev_epoch = generation;
    m->state = M_STABLE;
    for (int32_t i = 0; i < c->nassigned; i++) {
        sk_cg_tp tp = c->assigned[i];
        tp.epoch = generation;
        if (set_has(&m->assigned, &tp))
            continue;
        if (!set_push(&m->assigned, &tp))
            return SK_ERR_NOMEM;
        set_sort(&m->assigned);
    }
    return set_copy(&m->target, &m->assigned) ? 0 : SK_ERR_NOMEM;
}

int sk_cg_adopt_classic(sk_cg *cg, kc_str group_id, int32_t generation, int n,
                        const sk_cg_adopted *ms, int64_t now)
{
    sk_cg_group *old = sk_cg_find(cg, group_id.p, (size_t)group_id.len);
    if (old)
        sk_cg_remove(cg, old);
    sk_cg_group *g = group_get(cg, group_id);
    if (!g)
        return SK_ERR_NOMEM;
    g->epoch = g->assignment_epoch = generation;
    for (int i = 0; i < n; i++)
        if (adopt_member(g, &ms[i], generation, now) != 0) {
            sk_cg_remove(cg, g);
            return SK_ERR_NOMEM;
        }
    g->dirty = true;
    return 0;
}

/* ---- time ---- */

int sk_cg_tick(sk_cg *cg, int64_t now)
{
    int removed = 0;
    size_t it = 0;
    sk_cg_group *g;
    while ((g = sk_cg_next(cg, &it))) {
        for (int k = 0; k < g->nmembers;) {
            cmember *m = g->members[k];
            if (now >= m->session_deadline ||
                (m->revoke_deadline && m->state == M_UNREVOKED && now >= m->revoke_deadline) ||
                (m->join_deadline && now >= m->join_deadline) ||
                (m->sync_deadline && now >= m->sync_deadline)) {
                member_drop(g, m, true);
                removed++;
                continue;
            }
            k++;
        }
    }
    return removed;
}

/* ---- offsets ---- */

/* The entry for tp in a sorted set, or NULL. */
static const sk_cg_tp *set_find(const tpset *s, const sk_cg_tp *tp)
{
    for (int32_t lo = 0, hi = s->n; lo < hi;) {
        int32_t mid = (lo + hi) / 2;
        int c = tp_cmp(&s->v[mid], tp);
        if (c == 0)
            return &s->v[mid];
        if (c < 0)
            lo = mid + 1;
        else
            hi = mid;
    }
    return NULL;
}

int16_t sk_cg_check_commit(const sk_cg_group *g, kc_str member_id, int32_t epoch,
                           int16_t api_version, const sk_cg_tp *tp)
{
    if (epoch < 0 && (!g || g->nmembers == 0))
        return 0;
    const cmember *m = g ? member_by_id(g, member_id) : NULL;
    if (!m)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    if (m->classic) /* its generation is its member epoch */
        return epoch == m->epoch ? 0 : SK_KAFKA_ILLEGAL_GENERATION;
    if (api_version < 9)
        return SK_KAFKA_UNSUPPORTED_VERSION;
    if (epoch == m->epoch)
        return 0;
    if (epoch > m->epoch || !tp)
        return SK_KAFKA_STALE_MEMBER_EPOCH;
    const sk_cg_tp *held = set_find(&m->assigned, tp);
    if (!held)
        held = set_find(&m->revoking, tp);
    return held && held->epoch <= epoch ? 0 : SK_KAFKA_STALE_MEMBER_EPOCH;
}

int16_t sk_cg_check_fetch(const sk_cg_group *g, kc_str member_id, int32_t epoch)
{
    if (member_id.len < 0 && epoch < 0)
        return 0;
    const cmember *m = g ? member_by_id(g, member_id) : NULL;
    if (!m)
        return SK_KAFKA_UNKNOWN_MEMBER_ID;
    if (epoch == m->epoch)
        return 0;
    return m->classic ? SK_KAFKA_ILLEGAL_GENERATION : SK_KAFKA_STALE_MEMBER_EPOCH;
}

/* ---- read access ---- */

const char *sk_cg_group_id(const sk_cg_group *g)
{
    return g->id;
}

sk_cg_state sk_cg_group_state(const sk_cg_group *g)
{
    if (g->nmembers == 0)
        return SK_CG_EMPTY;
    if (g->epoch > g->assignment_epoch)
        return SK_CG_ASSIGNING;
    for (int k = 0; k < g->nmembers; k++) {
        const cmember *m = g->members[k];
        if (m->epoch == SK_CG_LEAVE_STATIC_EPOCH)
            continue;
        if (m->epoch != g->assignment_epoch || m->state != M_STABLE)
            return SK_CG_RECONCILING;
    }
    return SK_CG_STABLE;
}

int32_t sk_cg_group_epoch(const sk_cg_group *g)
{
    return g->epoch;
}

int32_t sk_cg_assignment_epoch(const sk_cg_group *g)
{
    return g->assignment_epoch;
}

const char *sk_cg_group_assignor(const sk_cg_group *g)
{
    return g->assignor;
}

int sk_cg_group_nmembers(const sk_cg_group *g)
{
    return g->nmembers;
}

void sk_cg_group_member(const sk_cg_group *g, int i, sk_cg_member_view *v)
{
    const cmember *m = g->members[i];
    *v = (sk_cg_member_view){m->id,       m->instance,       m->rack,        m->client_id,
                             m->client_host, m->epoch,       m->nsubs,       m->subs,
                             m->regex,    m->assigned.n,     m->target.n,    m->assigned.v,
                             m->target.v,
                             m->classic,  m->classic ? m->classic_session_ms : m->session_ms,
                             m->rebalance_ms, m->nprotos, m->protos};
}

/* ---- durability ---- */

bool sk_cg_take_dirty(sk_cg_group *g)
{
    bool d = g->dirty;
    g->dirty = false;
    return d;
}

static void put_opt(sk_buf *b, const char *s)
{
    sk_buf_u8(b, s != NULL);
    if (s)
        sk_buf_str(b, s, strlen(s));
}

static void put_set(sk_buf *b, const tpset *s)
{
    sk_buf_u32(b, (uint32_t)s->n);
    for (int32_t i = 0; i < s->n; i++) {
        sk_buf_put(b, s->v[i].id.b, 16);
        sk_buf_u32(b, (uint32_t)s->v[i].part);
        sk_buf_u32(b, (uint32_t)s->v[i].epoch);
    }
}

static void put_member(sk_buf *b, const cmember *m)
{
    sk_buf_str(b, m->id, strlen(m->id));
    put_opt(b, m->instance);
    put_opt(b, m->rack);
    put_opt(b, m->client_id);
    put_opt(b, m->client_host);
    put_opt(b, m->assignor);
    sk_buf_u32(b, (uint32_t)m->nsubs);
    for (int i = 0; i < m->nsubs; i++)
        sk_buf_str(b, m->subs[i], strlen(m->subs[i]));
    put_opt(b, m->regex);
    sk_buf_u32(b, (uint32_t)m->epoch);
    sk_buf_u32(b, (uint32_t)m->prev_epoch);
    sk_buf_u8(b, (uint8_t)m->state);
    sk_buf_u32(b, (uint32_t)m->rebalance_ms);
    sk_buf_u32(b, (uint32_t)m->session_ms);
    put_set(b, &m->assigned);
    put_set(b, &m->revoking);
    put_set(b, &m->target);
}

/* Classic members, after the members: u8 1 | per member u8 classic, and
 * for a classic one u32 session ms, u32 n, n x (str name, str metadata).
 * Absent when the group has none (and in blobs older than mixed groups). */
static void put_classic(sk_buf *b, const sk_cg_group *g)
{
    sk_buf_u8(b, 1);
    for (int i = 0; i < g->nmembers; i++) {
        const cmember *m = g->members[i];
        sk_buf_u8(b, m->classic);
        if (!m->classic)
            continue;
        sk_buf_u32(b, (uint32_t)m->classic_session_ms);
        sk_buf_u32(b, (uint32_t)m->nprotos);
        for (int k = 0; k < m->nprotos; k++) {
            sk_buf_str(b, m->protos[k].name.p, (size_t)m->protos[k].name.len);
            sk_buf_str(b, (const char *)m->protos[k].metadata.p,
                       (size_t)m->protos[k].metadata.len);
        }
    }
}

static bool get_classic_member(sk_rd *rd, cmember *m)
{
    m->classic = sk_rd_u8(rd) != 0;
    if (!m->classic)
        return !sk_rd_failed(rd);
    m->classic_session_ms = (int32_t)sk_rd_u32(rd);
    uint32_t n = sk_rd_u32(rd);
    if (sk_rd_failed(rd) || n == 0 || n > sk_rd_left(rd) / 8)
        return false;
    sk_cg_proto *ps = calloc(n, sizeof *ps);
    if (!ps)
        return false;
    bool ok = true;
    for (uint32_t k = 0; k < n && ok; k++) {
        size_t nl, ml;
        const uint8_t *name = sk_rd_str(rd, &nl);
        const uint8_t *md = name ? sk_rd_str(rd, &ml) : NULL;
        ok = md != NULL;
        if (ok)
            ps[k] = (sk_cg_proto){{(const char *)name, (int32_t)nl}, {md, (int32_t)ml}};
    }
    ok = ok && set_protos(m, (int)n, ps);
    free(ps);
    return ok;
}

static bool import_classic(sk_rd *rd, sk_cg_group *g)
{
    if (sk_rd_left(rd) == 0)
        return true;
    if (sk_rd_u8(rd) != 1)
        return false;
    for (int i = 0; i < g->nmembers; i++)
        if (!get_classic_member(rd, g->members[i]))
            return false;
    return true;
}

/* Blob: u32 group epoch | u32 assignment epoch | str assignor | u64 topics
 * hash | u32 n | n x member (str id, 5 x opt str: instance, rack, client id,
 * client host, assignor | u32 nsubs, str each | opt str regex | u32 epoch,
 * u32 previous epoch, u8 state, u32 rebalance ms, u32 session ms | sets
 * assigned, revoking, target: u32 n, n x (16-byte topic id, u32 partition,
 * u32 epoch)). opt str: u8 present, then str. */
void sk_cg_export(const sk_cg_group *g, sk_buf *b)
{
    sk_buf_u32(b, (uint32_t)g->epoch);
    sk_buf_u32(b, (uint32_t)g->assignment_epoch);
    sk_buf_str(b, g->assignor, strlen(g->assignor));
    sk_buf_u64(b, g->topics_hash);
    sk_buf_u32(b, (uint32_t)g->nmembers);
    for (int i = 0; i < g->nmembers; i++)
        put_member(b, g->members[i]);
    for (int i = 0; i < g->nmembers; i++)
        if (g->members[i]->classic) {
            put_classic(b, g);
            break;
        }
}

static char *get_str(sk_rd *rd)
{
    size_t n;
    const uint8_t *p = sk_rd_str(rd, &n);
    return p ? strndup((const char *)p, n) : NULL;
}

static char *get_opt(sk_rd *rd, bool *ok)
{
    if (!sk_rd_u8(rd))
        return NULL;
    char *s = get_str(rd);
    *ok = *ok && s;
    return s;
}

static bool get_set(sk_rd *rd, tpset *s)
{
    uint32_t n = sk_rd_u32(rd);
    if (sk_rd_failed(rd) || n > sk_rd_left(rd) / 24)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        sk_cg_tp tp;
        const uint8_t *id = sk_rd_bytes(rd, 16);
        if (!id)
            return false;
        memcpy(tp.id.b, id, 16);
        tp.part = (int32_t)sk_rd_u32(rd);
        tp.epoch = (int32_t)sk_rd_u32(rd);
        if (!set_push(s, &tp))
            return false;
    }
    set_sort(s);
    return !sk_rd_failed(rd);
}

static bool get_member(sk_rd *rd, cmember *m, int64_t now)
{
    bool ok = true;
    m->instance = get_opt(rd, &ok);
    m->rack = get_opt(rd, &ok);
    m->client_id = get_opt(rd, &ok);
    m->client_host = get_opt(rd, &ok);
    m->assignor = get_opt(rd, &ok);
    uint32_t n = sk_rd_u32(rd);
    if (!ok || sk_rd_failed(rd) || n > sk_rd_left(rd) / 4)
        return false;
    m->subs = calloc((size_t)n + 1, sizeof *m->subs);
    if (!m->subs)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        if (!(m->subs[i] = get_str(rd)))
            return false;
        m->nsubs++;
    }
    m->regex = get_opt(rd, &ok);
    if (!ok || (m->regex && compile_regex(m->regex, &m->re) != 0))
        return false;
    m->has_re = m->regex != NULL;
    m->epoch = (int32_t)sk_rd_u32(rd);
    m->prev_epoch = (int32_t)sk_rd_u32(rd);
    m->state = (mstate)(sk_rd_u8(rd) % 3);
    m->rebalance_ms = (int32_t)sk_rd_u32(rd);
    m->session_ms = (int32_t)sk_rd_u32(rd);
    if (!get_set(rd, &m->assigned) || !get_set(rd, &m->revoking) || !get_set(rd, &m->target))
        return false;
    m->session_deadline = now + m->session_ms;
    m->revoke_deadline = m->state == M_UNREVOKED ? now + m->rebalance_ms : 0;
    return true;
}

static bool import_members(sk_rd *rd, sk_cg_group *g, int64_t now)
{
    uint32_t n = sk_rd_u32(rd);
    if (sk_rd_failed(rd) || n > sk_rd_left(rd) / 8)
        return false;
    for (uint32_t i = 0; i < n; i++) {
        size_t il;
        const uint8_t *id = sk_rd_str(rd, &il);
        if (!id)
            return false;
        cmember *m = member_add(g, (kc_str){(const char *)id, (int32_t)il});
        if (!m || !get_member(rd, m, now))
            return false;
    }
    return true;
}

int sk_cg_import(sk_cg *cg, const char *id, size_t idlen, const uint8_t *p, size_t len,
                 int64_t now)
{
    sk_cg_group *old = sk_cg_find(cg, id, idlen);
    if (old)
        sk_cg_remove(cg, old);
    sk_cg_group *g = group_get(cg, (kc_str){id, (int32_t)idlen});
    if (!g)
        return SK_ERR_NOMEM;
    sk_rd rd;
    sk_rd_init(&rd, p, len);
    g->epoch = (int32_t)sk_rd_u32(&rd);
    g->assignment_epoch = (int32_t)sk_rd_u32(&rd);
    size_t al;
    const uint8_t *as = sk_rd_str(&rd, &al);
    if (as)
        snprintf(g->assignor, sizeof g->assignor, "%.*s", (int)al, (const char *)as);
    g->topics_hash = sk_rd_u64(&rd);
    if (!as || !import_members(&rd, g, now) || !import_classic(&rd, g) || sk_rd_failed(&rd) ||
        sk_rd_left(&rd) != 0) {
        sk_cg_remove(cg, g);
        return SK_ERR_CORRUPT;
    }
    g->dirty = false;
    return 0;
}
