#include "zone.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct cidr {
    int family;
    uint8_t addr[16];
    int bits;
    char zone[ZONE_MAX];
};

struct lzone {
    char listener[32];
    char zone[ZONE_MAX];
};

struct zone_map {
    struct cidr *cidrs;
    int ncidrs;
    struct lzone *lz;
    int nlz;
};

static const char *const keys[] = {"skiff_az=", "automq_az=", "diskless_az="};

static bool zone_char(char c)
{
    return isalnum((unsigned char)c) || c == '-' || c == '_' || c == '.';
}

int zone_from_client_id(const char *id, size_t len, char out[ZONE_MAX])
{
    out[0] = 0;
    for (size_t k = 0; k < sizeof keys / sizeof keys[0]; k++) {
        size_t kl = strlen(keys[k]);
        for (size_t i = 0; i + kl <= len; i++) {
            /* The key must start an entry, not end another word. */
            if (i > 0 && zone_char(id[i - 1]))
                continue;
            if (memcmp(id + i, keys[k], kl) != 0)
                continue;
            size_t j = i + kl, n = 0;
            while (j < len && zone_char(id[j]) && n + 1 < ZONE_MAX)
                out[n++] = id[j++];
            out[n] = 0;
            if (n)
                return 1;
        }
    }
    return 0;
}

static bool in_cidr(const struct cidr *c, const uint8_t *addr, int family)
{
    if (c->family != family)
        return false;
    int full = c->bits / 8, rest = c->bits % 8;
    if (memcmp(c->addr, addr, (size_t)full) != 0)
        return false;
    if (rest == 0)
        return true;
    uint8_t mask = (uint8_t)(0xff << (8 - rest));
    return (c->addr[full] & mask) == (addr[full] & mask);
}

const char *zone_detect(const zone_map *m, const char *client_id, size_t client_id_len,
                        const struct sockaddr *peer, const char *listener, char out[ZONE_MAX])
{
    if (client_id && zone_from_client_id(client_id, client_id_len, out))
        return out;
    out[0] = 0;
    if (!m)
        return out;
    if (peer) {
        uint8_t a[16];
        int fam = 0;
        if (peer->sa_family == AF_INET) {
            memcpy(a, &((const struct sockaddr_in *)peer)->sin_addr, 4);
            fam = AF_INET;
        } else if (peer->sa_family == AF_INET6) {
            const uint8_t *b = ((const struct sockaddr_in6 *)peer)->sin6_addr.s6_addr;
            /* An IPv4 client on a dual-stack socket. */
            static const uint8_t v4mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
            if (memcmp(b, v4mapped, 12) == 0) {
                memcpy(a, b + 12, 4);
                fam = AF_INET;
            } else {
                memcpy(a, b, 16);
                fam = AF_INET6;
            }
        }
        /* The most specific prefix wins. */
        int best = -1;
        for (int i = 0; fam && i < m->ncidrs; i++)
            if (in_cidr(&m->cidrs[i], a, fam) && (best < 0 || m->cidrs[i].bits > m->cidrs[best].bits))
                best = i;
        if (best >= 0) {
            snprintf(out, ZONE_MAX, "%s", m->cidrs[best].zone);
            return out;
        }
    }
    for (int i = 0; listener && i < m->nlz; i++)
        if (strcmp(m->lz[i].listener, listener) == 0) {
            snprintf(out, ZONE_MAX, "%s", m->lz[i].zone);
            return out;
        }
    return out;
}

/* Splits "a=b,c=d" into pairs; fn returns 0 or fails the parse. A refusal
 * quotes at most 64 bytes of the entry (why may be short). */
static int each_pair(const char *s, int (*fn)(void *arg, const char *k, const char *v), void *arg,
                     char *why, size_t whylen)
{
    char buf[512];
    const char *p = s;
    while (p && *p) {
        const char *e = strchr(p, ',');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n >= sizeof buf) {
            snprintf(why, whylen, "entry too long");
            return -1;
        }
        memcpy(buf, p, n);
        buf[n] = 0;
        char *t = buf;
        while (isspace((unsigned char)*t))
            t++;
        char *end = t + strlen(t);
        while (end > t && isspace((unsigned char)end[-1]))
            *--end = 0;
        if (*t) {
            char *eq = strrchr(t, '=');
            if (!eq || eq == t || !eq[1]) {
                snprintf(why, whylen, "'%.64s' is not key=zone", t);
                return -1;
            }
            *eq = 0;
            for (const char *z = eq + 1; *z; z++)
                if (!zone_char(*z)) {
                    snprintf(why, whylen, "zone '%.64s' has invalid characters", eq + 1);
                    return -1;
                }
            if (strlen(eq + 1) >= ZONE_MAX) {
                snprintf(why, whylen, "zone '%.64s' is too long", eq + 1);
                return -1;
            }
            if (fn(arg, t, eq + 1) != 0) {
                snprintf(why, whylen, "'%.64s' is not a valid address/prefix or listener name", t);
                return -1;
            }
        }
        p = e ? e + 1 : NULL;
    }
    return 0;
}

static int add_cidr(void *arg, const char *k, const char *v)
{
    zone_map *m = arg;
    char addr[128];
    snprintf(addr, sizeof addr, "%s", k);
    char *slash = strchr(addr, '/');
    int bits = -1;
    if (slash) {
        *slash = 0;
        char *endp;
        long b = strtol(slash + 1, &endp, 10);
        if (!slash[1] || *endp)
            return -1;
        bits = (int)b;
    }
    struct cidr c = {0};
    if (inet_pton(AF_INET, addr, c.addr) == 1) {
        c.family = AF_INET;
        if (bits < 0)
            bits = 32;
        if (bits > 32)
            return -1;
    } else if (inet_pton(AF_INET6, addr, c.addr) == 1) {
        c.family = AF_INET6;
        if (bits < 0)
            bits = 128;
        if (bits > 128)
            return -1;
    } else {
        return -1;
    }
    c.bits = bits;
    snprintf(c.zone, sizeof c.zone, "%s", v);
    struct cidr *n = realloc(m->cidrs, (size_t)(m->ncidrs + 1) * sizeof *n);
    if (!n)
        return -1;
    m->cidrs = n;
    m->cidrs[m->ncidrs++] = c;
    return 0;
}

static int add_listener(void *arg, const char *k, const char *v)
{
    zone_map *m = arg;
    if (strlen(k) >= sizeof m->lz[0].listener)
        return -1;
    struct lzone *n = realloc(m->lz, (size_t)(m->nlz + 1) * sizeof *n);
    if (!n)
        return -1;
    m->lz = n;
    snprintf(m->lz[m->nlz].listener, sizeof m->lz[0].listener, "%s", k);
    snprintf(m->lz[m->nlz].zone, sizeof m->lz[0].zone, "%s", v);
    m->nlz++;
    return 0;
}

zone_map *zone_map_new(const char *cidrs, const char *listeners, char *why, size_t whylen)
{
    zone_map *m = calloc(1, sizeof *m);
    if (!m) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    char inner[256];
    if (cidrs && each_pair(cidrs, add_cidr, m, inner, sizeof inner) != 0) {
        snprintf(why, whylen, "client.zone.cidrs: %s", inner);
        zone_map_destroy(m);
        return NULL;
    }
    if (listeners && each_pair(listeners, add_listener, m, inner, sizeof inner) != 0) {
        snprintf(why, whylen, "listener.zones: %s", inner);
        zone_map_destroy(m);
        return NULL;
    }
    return m;
}

void zone_map_destroy(zone_map *m)
{
    if (!m)
        return;
    free(m->cidrs);
    free(m->lz);
    free(m);
}
