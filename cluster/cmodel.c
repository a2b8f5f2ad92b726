#include "cmodel.h"

#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sk_err.h"
#include "sk_log.h"
#include "sk_map.h"

#define MOD "cmodel"
#define MKEY_MAX (CM_TOPIC_MAX + 1) /* longest map key: a topic name */

/* ================================================================ names */

static const char hexdig[] = "0123456789abcdef";

static void uuid_hex(const kc_uuid *u, char out[33])
{
    for (int i = 0; i < 16; i++) {
        out[2 * i] = hexdig[u->b[i] >> 4];
        out[2 * i + 1] = hexdig[u->b[i] & 15];
    }
    out[32] = 0;
}

static int hexval(char c)
{
    if (c >= '0' && c <= '9')
        return c - '0';
    if (c >= 'a' && c <= 'f')
        return c - 'a' + 10;
    return -1; /* upper case too: one id, one spelling, one key */
}

static bool hex_uuid(const char *p, size_t n, kc_uuid *u)
{
    if (n != 32)
        return false;
    for (int i = 0; i < 16; i++) {
        int hi = hexval(p[2 * i]), lo = hexval(p[2 * i + 1]);
        if (hi < 0 || lo < 0)
            return false;
        u->b[i] = (uint8_t)(hi << 4 | lo);
    }
    return true;
}

/* Canonical decimal only ("7", never "07" or "+7"): a key has one spelling.
 * *out is 0 when it fails. */
static bool dec_num(const char *p, size_t n, int64_t max, int64_t *out)
{
    *out = 0;
    if (n == 0 || n > 19 || (p[0] == '0' && n > 1))
        return false;
    uint64_t v = 0;
    for (size_t i = 0; i < n; i++) {
        if (p[i] < '0' || p[i] > '9')
            return false;
        v = v * 10 + (uint64_t)(p[i] - '0');
    }
    if (v > (uint64_t)max)
        return false;
    *out = (int64_t)v;
    return true;
}

/* Kafka's rule: 1 to 249 of [a-zA-Z0-9._-], and neither "." nor "..". */
static bool topic_name_ok(const char *p, size_t n)
{
    if (n == 0 || n > CM_TOPIC_MAX || (n == 1 && p[0] == '.') ||
        (n == 2 && p[0] == '.' && p[1] == '.'))
        return false;
    for (size_t i = 0; i < n; i++) {
        char c = p[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return false;
    }
    return true;
}

/* Only cluster/next_* are counters, so that a newer node may add other
 * cluster/ keys without older ones calling them garbage. */
static bool counter_name_ok(const char *p, size_t n)
{
    if (n <= 5 || n >= CM_COUNTER_NAME_MAX || memcmp(p, "next_", 5) != 0)
        return false;
    for (size_t i = 5; i < n; i++)
        if (!((p[i] >= 'a' && p[i] <= 'z') || (p[i] >= '0' && p[i] <= '9') || p[i] == '_'))
            return false;
    return true;
}

static bool cluster_id_ok(const char *p, size_t n)
{
    if (n == 0 || n >= CM_CLUSTER_ID_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if (p[i] <= ' ' || p[i] > '~')
            return false;
    return true;
}

/* ================================================================ key builders */

static size_t nokey(char *buf, size_t len)
{
    if (buf && len)
        buf[0] = 0;
    return 0;
}

static size_t keyf(char *buf, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static size_t keyf(char *buf, size_t len, const char *fmt, ...)
{
    if (!buf || !len)
        return 0;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    if (n < 0 || (size_t)n >= len)
        return nokey(buf, len);
    return (size_t)n;
}

size_t cm_key_cluster_id(const char *prefix, char *buf, size_t len)
{
    return keyf(buf, len, "%scluster/id", prefix);
}

size_t cm_key_counter(const char *prefix, const char *name, char *buf, size_t len)
{
    if (!name || !counter_name_ok(name, strlen(name)))
        return nokey(buf, len);
    return keyf(buf, len, "%scluster/%s", prefix, name);
}

size_t cm_key_node(const char *prefix, int32_t id, char *buf, size_t len)
{
    if (id < 0)
        return nokey(buf, len);
    return keyf(buf, len, "%snodes/%d", prefix, (int)id);
}

size_t cm_key_controller(const char *prefix, char *buf, size_t len)
{
    return keyf(buf, len, "%scontroller", prefix);
}

size_t cm_key_log(const char *prefix, int64_t id, char *buf, size_t len)
{
    if (id < 0)
        return nokey(buf, len);
    return keyf(buf, len, "%slogs/%lld", prefix, (long long)id);
}

size_t cm_key_topic(const char *prefix, const char *name, char *buf, size_t len)
{
    if (!name || !topic_name_ok(name, strnlen(name, CM_TOPIC_MAX + 1)))
        return nokey(buf, len);
    return keyf(buf, len, "%stopics/%s", prefix, name);
}

size_t cm_key_part(const char *prefix, const kc_uuid *topic, int32_t index, char *buf,
                   size_t len)
{
    char hex[33];
    if (index < 0)
        return nokey(buf, len);
    uuid_hex(topic, hex);
    return keyf(buf, len, "%sparts/%s/%d", prefix, hex, (int)index);
}

size_t cm_key_topic_parts(const char *prefix, const kc_uuid *topic, char *buf, size_t len)
{
    char hex[33];
    uuid_hex(topic, hex);
    return keyf(buf, len, "%sparts/%s/", prefix, hex);
}

size_t cm_key_walref(const char *prefix, const kc_uuid *topic, int32_t index, int64_t log,
                     char *buf, size_t len)
{
    char hex[33];
    if (index < 0 || log < 0)
        return nokey(buf, len);
    uuid_hex(topic, hex);
    return keyf(buf, len, "%swalrefs/%s-%d/%lld", prefix, hex, (int)index, (long long)log);
}

size_t cm_key_part_walrefs(const char *prefix, const kc_uuid *topic, int32_t index, char *buf,
                           size_t len)
{
    char hex[33];
    if (index < 0)
        return nokey(buf, len);
    uuid_hex(topic, hex);
    return keyf(buf, len, "%swalrefs/%s-%d/", prefix, hex, (int)index);
}

size_t cm_key_payref(const char *prefix, int64_t plog, int64_t mlog, char *buf, size_t len)
{
    if (plog < 0 || mlog < 0)
        return nokey(buf, len);
    return keyf(buf, len, "%spayrefs/%lld/%lld", prefix, (long long)plog, (long long)mlog);
}

size_t cm_key_log_payrefs(const char *prefix, int64_t plog, char *buf, size_t len)
{
    if (plog < 0)
        return nokey(buf, len);
    return keyf(buf, len, "%spayrefs/%lld/", prefix, (long long)plog);
}

size_t cm_key_bconf(const char *prefix, int32_t node, char *buf, size_t len)
{
    if (node < -1)
        return nokey(buf, len);
    if (node == -1)
        return keyf(buf, len, "%sconfig/broker/default", prefix);
    return keyf(buf, len, "%sconfig/broker/%d", prefix, (int)node);
}

/* ================================================================ JSON reading */

/* Why a value was refused, for the log line; nomem tells a refusal apart
 * from a failed allocation (which is no verdict on the value). */
typedef struct jr {
    char why[160];
    bool nomem;
} jr;

static bool jfail(jr *r, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static bool jfail(jr *r, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(r->why, sizeof r->why, fmt, ap);
    va_end(ap);
    return false;
}

static bool jnomem(jr *r)
{
    r->nomem = true;
    return jfail(r, "out of memory");
}

static json_t *jparse(jr *r, const uint8_t *v, size_t n)
{
    if (!v || !n) {
        jfail(r, "empty value");
        return NULL;
    }
    json_error_t e;
    /* Duplicate names are refused: which one a reader keeps is not defined. */
    json_t *o = json_loadb((const char *)v, n, JSON_REJECT_DUPLICATES, &e);
    if (!o) {
        jfail(r, "not JSON: %s", e.text);
        return NULL;
    }
    if (!json_is_object(o)) {
        json_decref(o);
        jfail(r, "not a JSON object");
        return NULL;
    }
    return o;
}

/* The j* readers set *out on every path (0, "" or false when they fail), so
 * that no caller ever reads a field that a failed read left unset. */
static bool jint(jr *r, const json_t *o, const char *f, int64_t lo, int64_t hi, int64_t *out)
{
    *out = 0;
    const json_t *v = json_object_get(o, f);
    if (!v)
        return jfail(r, "\"%s\" missing", f);
    if (!json_is_integer(v))
        return jfail(r, "\"%s\" is not an integer", f);
    json_int_t x = json_integer_value(v);
    if (x < lo || x > hi)
        return jfail(r, "\"%s\" %lld out of range", f, (long long)x);
    *out = (int64_t)x;
    return true;
}

/* out holds maxlen + 1 bytes. */
static bool jstr(jr *r, const json_t *o, const char *f, size_t minlen, size_t maxlen, char *out)
{
    out[0] = 0;
    const json_t *v = json_object_get(o, f);
    if (!v)
        return jfail(r, "\"%s\" missing", f);
    if (!json_is_string(v))
        return jfail(r, "\"%s\" is not a string", f);
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n < minlen || n > maxlen || memchr(s, 0, n))
        return jfail(r, "\"%s\" of %zu bytes (allowed: %zu to %zu)", f, n, minlen, maxlen);
    memcpy(out, s, n);
    out[n] = 0;
    return true;
}

static bool jbool(jr *r, const json_t *o, const char *f, bool *out)
{
    *out = false;
    const json_t *v = json_object_get(o, f);
    if (!v)
        return jfail(r, "\"%s\" missing", f);
    if (!json_is_boolean(v))
        return jfail(r, "\"%s\" is not a boolean", f);
    *out = json_is_true(v);
    return true;
}

static bool jenum(jr *r, const json_t *o, const char *f, const char *const *words, int nwords,
                  int *out)
{
    char w[16];
    *out = 0;
    if (!jstr(r, o, f, 1, sizeof w - 1, w))
        return false;
    for (int i = 0; i < nwords; i++)
        if (strcmp(w, words[i]) == 0) {
            *out = i;
            return true;
        }
    return jfail(r, "\"%s\" is the unknown word \"%s\"", f, w);
}

static const char *const log_states[] = {"live", "dead"};
static const char *const log_kinds[] = {"data", "payload"};
static const char *const part_states[] = {"new", "active", "moving", "handoff"};

/* ================================================================ configs */

static void cfg_free(int n, char **names, char **values)
{
    for (int i = 0; i < n; i++) {
        free(names[i]);
        free(values[i]);
    }
    free(names);
    free(values);
}

static bool cfg_name_ok(const char *s, size_t n)
{
    if (n == 0 || n > CM_CONFIG_NAME_MAX)
        return false;
    for (size_t i = 0; i < n; i++)
        if ((unsigned char)s[i] < 0x20 || s[i] == 0x7f)
            return false;
    return true;
}

static bool cfg_one(jr *r, const char *k, const json_t *v, char **name, char **value)
{
    if (!cfg_name_ok(k, strlen(k)))
        return jfail(r, "config name of %zu bytes or with control characters", strlen(k));
    if (!json_is_string(v))
        return jfail(r, "config \"%.64s\" is not a string", k);
    size_t n = json_string_length(v);
    const char *s = json_string_value(v);
    if (n > CM_CONFIG_VALUE_MAX || memchr(s, 0, n))
        return jfail(r, "config \"%.64s\": value of %zu bytes", k, n);
    *name = strdup(k);
    *value = strndup(s, n);
    return (*name && *value) || jnomem(r);
}

/* An object name -> string, in the object's order. */
static bool cfg_dec(jr *r, const json_t *o, int *n, char ***names, char ***values)
{
    *n = 0;
    *names = *values = NULL;
    if (!json_is_object(o))
        return jfail(r, "configs: not an object");
    size_t cnt = json_object_size(o);
    if (cnt > CM_MAX_CONFIGS)
        return jfail(r, "%zu configs (at most %d)", cnt, CM_MAX_CONFIGS);
    if (!cnt)
        return true;
    char **nm = calloc(cnt, sizeof *nm), **vl = calloc(cnt, sizeof *vl);
    if (!nm || !vl) {
        free(nm);
        free(vl);
        return jnomem(r);
    }
    size_t i = 0;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)o, k, v) {
        if (i >= cnt || !cfg_one(r, k, v, &nm[i], &vl[i])) {
            cfg_free((int)cnt, nm, vl); /* calloc'd: the unfilled slots are NULL */
            return false;
        }
        i++;
    }
    *n = (int)cnt;
    *names = nm;
    *values = vl;
    return true;
}

static bool cfg_eq(int n, char *const *an, char *const *av, int m, char *const *bn,
                   char *const *bv)
{
    if (n != m)
        return false;
    for (int i = 0; i < n; i++)
        if (strcmp(an[i], bn[i]) != 0 || strcmp(av[i], bv[i]) != 0)
            return false;
    return true;
}

/* ================================================================ decoders */

static bool dec_cluster_id(jr *r, const uint8_t *v, size_t n, char *out, size_t outlen)
{
    json_t *o = jparse(r, v, n);
    char id[CM_CLUSTER_ID_MAX];
    bool ok = o && jstr(r, o, "id", 1, sizeof id - 1, id);
    json_decref(o);
    if (ok && !cluster_id_ok(id, strlen(id)))
        ok = jfail(r, "\"id\" has characters other than printable ASCII");
    if (ok && strlen(id) >= outlen)
        ok = jfail(r, "\"id\" longer than the caller's buffer");
    if (ok)
        memcpy(out, id, strlen(id) + 1);
    return ok;
}

static bool dec_counter(jr *r, const uint8_t *v, size_t n, int64_t *next)
{
    json_t *o = jparse(r, v, n);
    bool ok = o && jint(r, o, "next", 0, INT64_MAX, next);
    json_decref(o);
    return ok;
}

static bool dec_ctrl(jr *r, const uint8_t *v, size_t n, cm_ctrl *out)
{
    json_t *o = jparse(r, v, n);
    int64_t node = 0, log = 0;
    bool ok = o && jint(r, o, "node", 0, INT32_MAX, &node) &&
              jint(r, o, "log", 0, INT64_MAX, &log);
    json_decref(o);
    *out = (cm_ctrl){.node = (int32_t)node, .log = log};
    return ok;
}

static bool dec_listener(jr *r, const json_t *l, cm_listener *out)
{
    int64_t port;
    if (!json_is_object(l))
        return jfail(r, "a listener is not an object");
    if (!jstr(r, l, "name", 1, CM_NAME_MAX - 1, out->name) ||
        !jstr(r, l, "host", 1, CM_HOST_MAX - 1, out->host) || !jint(r, l, "port", 1, 65535, &port))
        return false;
    out->port = (int32_t)port;
    return true;
}

static bool node_fields(jr *r, const json_t *o, int32_t id, cm_node *out)
{
    int64_t vid, log, started;
    if (!jint(r, o, "id", 0, INT32_MAX, &vid) ||
        !jstr(r, o, "rack", 0, CM_ZONE_MAX - 1, out->rack) ||
        !jint(r, o, "log", 0, INT64_MAX, &log) || !jbool(r, o, "draining", &out->draining) ||
        !jint(r, o, "started_ms", 0, INT64_MAX, &started))
        return false;
    if (vid != id)
        return jfail(r, "\"id\" %lld is not the key's %d", (long long)vid, (int)id);
    const json_t *ls = json_object_get(o, "listeners");
    if (!json_is_array(ls))
        return jfail(r, "\"listeners\" missing or not an array");
    size_t nl = json_array_size(ls);
    if (nl > CM_MAX_LISTENERS)
        return jfail(r, "%zu listeners (at most %d)", nl, CM_MAX_LISTENERS);
    for (size_t i = 0; i < nl; i++)
        if (!dec_listener(r, json_array_get(ls, i), &out->listeners[i]))
            return false;
    out->id = id;
    out->log = log;
    out->started_ms = started;
    out->nlisteners = (int)nl;
    return true;
}

static bool dec_node(jr *r, const uint8_t *v, size_t n, int32_t id, cm_node *out)
{
    memset(out, 0, sizeof *out);
    if (id < 0)
        return jfail(r, "negative node id");
    json_t *o = jparse(r, v, n);
    bool ok = o && node_fields(r, o, id, out);
    json_decref(o);
    return ok;
}

/* "kind" is optional: a value written before it existed is a data log's. */
static bool log_kind(jr *r, const json_t *o, cm_log_kind *out)
{
    int k = CM_LOG_DATA;
    if (json_object_get(o, "kind") && !jenum(r, o, "kind", log_kinds, 2, &k))
        return false;
    *out = (cm_log_kind)k;
    return true;
}

static bool log_fields(jr *r, const json_t *o, cm_log *out)
{
    int64_t node, cust;
    int st = 0;
    if (!jint(r, o, "node", 0, INT32_MAX, &node) ||
        !jstr(r, o, "rack", 0, CM_ZONE_MAX - 1, out->rack) ||
        !jenum(r, o, "state", log_states, 2, &st) ||
        !jint(r, o, "custodian", -1, INT32_MAX, &cust) || !log_kind(r, o, &out->kind))
        return false;
    out->node = (int32_t)node;
    out->state = (cm_log_state)st;
    out->custodian = (int32_t)cust;
    return true;
}

static bool dec_log(jr *r, const uint8_t *v, size_t n, int64_t id, cm_log *out)
{
    memset(out, 0, sizeof *out);
    if (id < 0)
        return jfail(r, "negative log id");
    out->id = id;
    json_t *o = jparse(r, v, n);
    bool ok = o && log_fields(r, o, out);
    json_decref(o);
    return ok;
}

static bool topic_fields(jr *r, const json_t *o, cm_topic *out)
{
    char hex[33];
    int64_t parts, rf, first;
    static const kc_uuid zero;
    if (!jstr(r, o, "id", 32, 32, hex))
        return false;
    if (!hex_uuid(hex, 32, &out->id) || memcmp(&out->id, &zero, sizeof zero) == 0)
        return jfail(r, "\"id\" is not 32 lowercase hex digits of a non-zero id");
    if (!jint(r, o, "partitions", 1, INT32_MAX, &parts) || !jint(r, o, "rf", 1, INT16_MAX, &rf) ||
        !jint(r, o, "first_stream", 0, INT64_MAX, &first) ||
        !jbool(r, o, "internal", &out->internal))
        return false;
    const json_t *c = json_object_get(o, "configs");
    if (!c)
        return jfail(r, "\"configs\" missing");
    if (!cfg_dec(r, c, &out->nconfigs, &out->config_names, &out->config_values))
        return false;
    out->partitions = (int32_t)parts;
    out->rf = (int16_t)rf;
    out->first_stream = (uint64_t)first;
    return true;
}

static bool dec_topic(jr *r, const uint8_t *v, size_t n, const char *name, cm_topic *out)
{
    memset(out, 0, sizeof *out);
    size_t nl = name ? strnlen(name, CM_TOPIC_MAX + 1) : 0;
    if (!topic_name_ok(name, nl))
        return jfail(r, "invalid topic name");
    memcpy(out->name, name, nl);
    json_t *o = jparse(r, v, n);
    bool ok = o && topic_fields(r, o, out);
    json_decref(o);
    return ok;
}

static bool part_fields(jr *r, const json_t *o, cm_part *out)
{
    int64_t epoch, node, log, stream, src_log, src_lsn;
    int st = 0;
    if (!jint(r, o, "epoch", 0, INT32_MAX, &epoch) || !jint(r, o, "node", -1, INT32_MAX, &node) ||
        !jint(r, o, "log", 0, INT64_MAX, &log) || !jenum(r, o, "state", part_states, 4, &st) ||
        !jint(r, o, "stream", 0, INT64_MAX, &stream) ||
        !jint(r, o, "src_log", 0, INT64_MAX, &src_log) ||
        !jint(r, o, "src_lsn", 0, INT64_MAX, &src_lsn))
        return false;
    out->epoch = (int32_t)epoch;
    out->node = (int32_t)node;
    out->log = log;
    out->state = (cm_part_state)st;
    out->stream = (uint64_t)stream;
    out->src_log = src_log;
    out->src_lsn = src_lsn;
    /* "pref" is optional: values written before it existed have none. */
    int64_t pref = 0;
    out->has_pref = json_object_get(o, "pref") != NULL;
    if (out->has_pref && !jint(r, o, "pref", 0, INT32_MAX, &pref))
        return false;
    out->pref = (int32_t)pref;
    return true;
}

static bool dec_part(jr *r, const uint8_t *v, size_t n, const kc_uuid *topic, int32_t index,
                     cm_part *out)
{
    memset(out, 0, sizeof *out);
    if (index < 0)
        return jfail(r, "negative partition index");
    out->topic = *topic;
    out->index = index;
    json_t *o = jparse(r, v, n);
    bool ok = o && part_fields(r, o, out);
    json_decref(o);
    return ok;
}

static bool dec_walref(jr *r, const uint8_t *v, size_t n, const kc_uuid *topic, int32_t index,
                       int64_t log, cm_walref *out)
{
    memset(out, 0, sizeof *out);
    if (index < 0 || log < 0)
        return jfail(r, "negative partition index or log id");
    *out = (cm_walref){.topic = *topic, .index = index, .log = log};
    json_t *o = jparse(r, v, n);
    bool ok = o && jint(r, o, "lsn", 0, INT64_MAX, &out->lsn);
    json_decref(o);
    return ok;
}

static bool dec_payref(jr *r, const uint8_t *v, size_t n, int64_t plog, int64_t mlog,
                       cm_payref *out)
{
    memset(out, 0, sizeof *out);
    if (plog < 0 || mlog < 0)
        return jfail(r, "negative log id");
    *out = (cm_payref){.plog = plog, .mlog = mlog};
    json_t *o = jparse(r, v, n);
    bool ok = o && jint(r, o, "lsn", 0, INT64_MAX, &out->lsn);
    json_decref(o);
    return ok;
}

static bool dec_bconf(jr *r, const uint8_t *v, size_t n, int32_t node, cm_bconf *out)
{
    memset(out, 0, sizeof *out);
    if (node < -1)
        return jfail(r, "node id below -1");
    out->node = node;
    json_t *o = jparse(r, v, n);
    bool ok = o && cfg_dec(r, o, &out->nconfigs, &out->names, &out->values);
    json_decref(o);
    return ok;
}

/* ---- public decoders ---- */

static int verdict_of(bool ok, const jr *r)
{
    return ok ? 0 : r->nomem ? SK_ERR_NOMEM : SK_ERR_PARSE;
}

int cm_decode_cluster_id(const uint8_t *v, size_t n, char *out, size_t outlen)
{
    jr r = {0};
    return verdict_of(dec_cluster_id(&r, v, n, out, outlen), &r);
}

int cm_decode_counter(const uint8_t *v, size_t n, int64_t *next)
{
    jr r = {0};
    return verdict_of(dec_counter(&r, v, n, next), &r);
}

int cm_decode_node(const uint8_t *v, size_t n, int32_t id, cm_node *out)
{
    jr r = {0};
    return verdict_of(dec_node(&r, v, n, id, out), &r);
}

int cm_decode_controller(const uint8_t *v, size_t n, int32_t *node, int64_t *log)
{
    jr r = {0};
    cm_ctrl c;
    bool ok = dec_ctrl(&r, v, n, &c);
    if (ok) {
        *node = c.node;
        *log = c.log;
    }
    return verdict_of(ok, &r);
}

int cm_decode_log(const uint8_t *v, size_t n, int64_t id, cm_log *out)
{
    jr r = {0};
    return verdict_of(dec_log(&r, v, n, id, out), &r);
}

int cm_decode_topic(const uint8_t *v, size_t n, const char *name, cm_topic *out)
{
    jr r = {0};
    return verdict_of(dec_topic(&r, v, n, name, out), &r);
}

int cm_decode_part(const uint8_t *v, size_t n, const kc_uuid *topic, int32_t index, cm_part *out)
{
    jr r = {0};
    return verdict_of(dec_part(&r, v, n, topic, index, out), &r);
}

int cm_decode_walref(const uint8_t *v, size_t n, const kc_uuid *topic, int32_t index,
                     int64_t log, cm_walref *out)
{
    jr r = {0};
    return verdict_of(dec_walref(&r, v, n, topic, index, log, out), &r);
}

int cm_decode_payref(const uint8_t *v, size_t n, int64_t plog, int64_t mlog, cm_payref *out)
{
    jr r = {0};
    return verdict_of(dec_payref(&r, v, n, plog, mlog, out), &r);
}

int cm_decode_bconf(const uint8_t *v, size_t n, int32_t node, cm_bconf *out)
{
    jr r = {0};
    return verdict_of(dec_bconf(&r, v, n, node, out), &r);
}

void cm_topic_clear(cm_topic *t)
{
    if (!t)
        return;
    cfg_free(t->nconfigs, t->config_names, t->config_values);
    t->nconfigs = 0;
    t->config_names = t->config_values = NULL;
}

void cm_bconf_clear(cm_bconf *b)
{
    if (!b)
        return;
    cfg_free(b->nconfigs, b->names, b->values);
    b->nconfigs = 0;
    b->names = b->values = NULL;
}

/* ================================================================ encoders */

/* A string from a fixed buffer that may lack its NUL (then NULL, which makes
 * the json_object_set_new taking it fail). */
static json_t *jstrn(const char *s, size_t cap)
{
    size_t n = strnlen(s, cap);
    return n < cap ? json_stringn(s, n) : NULL;
}

/* Consumes o; NULL when any set failed (err) or memory ran out. The text is
 * malloc'd here, not by jansson, so that free() is always its match. */
static char *jdump(json_t *o, int err)
{
    char *s = NULL;
    size_t n = o && !err ? json_dumpb(o, NULL, 0, JSON_COMPACT) : 0;
    if (n && (s = malloc(n + 1)) != NULL) {
        if (json_dumpb(o, s, n, JSON_COMPACT) == n)
            s[n] = 0;
        else {
            free(s);
            s = NULL;
        }
    }
    json_decref(o);
    return s;
}

/* Returns s when its decoder accepted it, else frees it. */
static char *checked(char *s, bool ok)
{
    if (!ok) {
        free(s);
        return NULL;
    }
    return s;
}

static size_t slen(const char *s)
{
    return s ? strlen(s) : 0;
}

char *cm_encode_cluster_id(const char *id)
{
    json_t *o = json_object();
    int e = json_object_set_new(o, "id", id ? json_string(id) : NULL);
    char *s = jdump(o, e);
    char buf[CM_CLUSTER_ID_MAX];
    jr r = {0};
    return checked(s, s && dec_cluster_id(&r, (const uint8_t *)s, slen(s), buf, sizeof buf));
}

char *cm_encode_counter(int64_t next)
{
    json_t *o = json_object();
    int e = json_object_set_new(o, "next", json_integer(next));
    char *s = jdump(o, e);
    int64_t x;
    jr r = {0};
    return checked(s, s && dec_counter(&r, (const uint8_t *)s, slen(s), &x));
}

static json_t *listener_json(const cm_listener *l)
{
    json_t *o = json_object();
    int e = json_object_set_new(o, "name", jstrn(l->name, sizeof l->name));
    e |= json_object_set_new(o, "host", jstrn(l->host, sizeof l->host));
    e |= json_object_set_new(o, "port", json_integer(l->port));
    if (e) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *cm_encode_node(const cm_node *nd)
{
    if (!nd || nd->nlisteners < 0 || nd->nlisteners > CM_MAX_LISTENERS)
        return NULL;
    json_t *o = json_object(), *ls = json_array();
    int e = 0;
    for (int i = 0; i < nd->nlisteners; i++)
        e |= json_array_append_new(ls, listener_json(&nd->listeners[i]));
    e |= json_object_set_new(o, "id", json_integer(nd->id));
    e |= json_object_set_new(o, "rack", jstrn(nd->rack, sizeof nd->rack));
    e |= json_object_set_new(o, "log", json_integer(nd->log));
    e |= json_object_set_new(o, "listeners", ls);
    e |= json_object_set_new(o, "draining", json_boolean(nd->draining));
    e |= json_object_set_new(o, "started_ms", json_integer(nd->started_ms));
    char *s = jdump(o, e);
    cm_node back;
    jr r = {0};
    return checked(s, s && dec_node(&r, (const uint8_t *)s, slen(s), nd->id, &back));
}

char *cm_encode_controller(int32_t node, int64_t log)
{
    json_t *o = json_object();
    int e = json_object_set_new(o, "node", json_integer(node));
    e |= json_object_set_new(o, "log", json_integer(log));
    char *s = jdump(o, e);
    cm_ctrl back;
    jr r = {0};
    return checked(s, s && dec_ctrl(&r, (const uint8_t *)s, slen(s), &back));
}

char *cm_encode_log(const cm_log *l)
{
    if (!l || (unsigned)l->state > CM_LOG_DEAD || (unsigned)l->kind > CM_LOG_PAYLOAD)
        return NULL;
    json_t *o = json_object();
    int e = json_object_set_new(o, "node", json_integer(l->node));
    e |= json_object_set_new(o, "rack", jstrn(l->rack, sizeof l->rack));
    e |= json_object_set_new(o, "state", json_string(log_states[l->state]));
    e |= json_object_set_new(o, "custodian", json_integer(l->custodian));
    e |= json_object_set_new(o, "kind", json_string(log_kinds[l->kind]));
    char *s = jdump(o, e);
    cm_log back;
    jr r = {0};
    return checked(s, s && dec_log(&r, (const uint8_t *)s, slen(s), l->id, &back));
}

static json_t *cfg_json(int n, char *const *names, char *const *values)
{
    if (n < 0 || n > CM_MAX_CONFIGS || (n && (!names || !values)))
        return NULL;
    json_t *o = json_object();
    int e = 0;
    for (int i = 0; i < n && !e; i++)
        e |= !names[i] || !values[i] ||
             json_object_set_new(o, names[i], json_string(values[i])) != 0;
    /* A name given twice would silently keep one value. */
    if (e || json_object_size(o) != (size_t)n) {
        json_decref(o);
        return NULL;
    }
    return o;
}

char *cm_encode_topic(const cm_topic *t)
{
    if (!t || t->first_stream > (uint64_t)INT64_MAX)
        return NULL;
    char hex[33];
    uuid_hex(&t->id, hex);
    json_t *o = json_object();
    int e = json_object_set_new(o, "id", json_string(hex));
    e |= json_object_set_new(o, "partitions", json_integer(t->partitions));
    e |= json_object_set_new(o, "rf", json_integer(t->rf));
    e |= json_object_set_new(o, "first_stream", json_integer((json_int_t)t->first_stream));
    e |= json_object_set_new(o, "internal", json_boolean(t->internal));
    e |= json_object_set_new(o, "configs",
                             cfg_json(t->nconfigs, t->config_names, t->config_values));
    char *s = jdump(o, e);
    cm_topic back = {0};
    jr r = {0};
    bool ok = s && dec_topic(&r, (const uint8_t *)s, slen(s), t->name, &back);
    cm_topic_clear(&back);
    return checked(s, ok);
}

char *cm_encode_part(const cm_part *p)
{
    if (!p || (unsigned)p->state > CM_PART_HANDOFF || p->stream > (uint64_t)INT64_MAX)
        return NULL;
    json_t *o = json_object();
    int e = json_object_set_new(o, "epoch", json_integer(p->epoch));
    e |= json_object_set_new(o, "node", json_integer(p->node));
    e |= json_object_set_new(o, "log", json_integer(p->log));
    e |= json_object_set_new(o, "state", json_string(part_states[p->state]));
    e |= json_object_set_new(o, "stream", json_integer((json_int_t)p->stream));
    e |= json_object_set_new(o, "src_log", json_integer(p->src_log));
    e |= json_object_set_new(o, "src_lsn", json_integer(p->src_lsn));
    if (p->has_pref)
        e |= json_object_set_new(o, "pref", json_integer(p->pref));
    char *s = jdump(o, e);
    cm_part back;
    jr r = {0};
    return checked(s, s && dec_part(&r, (const uint8_t *)s, slen(s), &p->topic, p->index, &back));
}

char *cm_encode_walref(int64_t lsn)
{
    json_t *o = json_object();
    int e = json_object_set_new(o, "lsn", json_integer(lsn));
    char *s = jdump(o, e);
    static const kc_uuid any;
    cm_walref back;
    jr r = {0};
    return checked(s, s && dec_walref(&r, (const uint8_t *)s, slen(s), &any, 0, 0, &back));
}

char *cm_encode_payref(int64_t lsn)
{
    json_t *o = json_object();
    int e = json_object_set_new(o, "lsn", json_integer(lsn));
    char *s = jdump(o, e);
    cm_payref back;
    jr r = {0};
    return checked(s, s && dec_payref(&r, (const uint8_t *)s, slen(s), 0, 0, &back));
}

char *cm_encode_bconf(int n, char *const *names, char *const *values)
{
    json_t *o = cfg_json(n, names, values);
    char *s = jdump(o, o == NULL);
    cm_bconf back = {0};
    jr r = {0};
    bool ok = s && dec_bconf(&r, (const uint8_t *)s, slen(s), -1, &back);
    cm_bconf_clear(&back);
    return checked(s, ok);
}

/* ================================================================ equality */

static bool node_eq(const void *a_, const void *b_)
{
    const cm_node *a = a_, *b = b_;
    if (a->id != b->id || strcmp(a->rack, b->rack) || a->log != b->log ||
        a->nlisteners != b->nlisteners || a->draining != b->draining ||
        a->started_ms != b->started_ms || a->mod_rev != b->mod_rev)
        return false;
    for (int i = 0; i < a->nlisteners; i++) {
        const cm_listener *x = &a->listeners[i], *y = &b->listeners[i];
        if (strcmp(x->name, y->name) || strcmp(x->host, y->host) || x->port != y->port)
            return false;
    }
    return true;
}

static bool log_eq(const void *a_, const void *b_)
{
    const cm_log *a = a_, *b = b_;
    return a->id == b->id && a->node == b->node && !strcmp(a->rack, b->rack) &&
           a->state == b->state && a->custodian == b->custodian && a->kind == b->kind &&
           a->mod_rev == b->mod_rev;
}

static bool topic_eq(const void *a_, const void *b_)
{
    const cm_topic *a = a_, *b = b_;
    return !strcmp(a->name, b->name) && !memcmp(&a->id, &b->id, sizeof a->id) &&
           a->partitions == b->partitions && a->rf == b->rf &&
           a->first_stream == b->first_stream && a->internal == b->internal &&
           a->mod_rev == b->mod_rev &&
           cfg_eq(a->nconfigs, a->config_names, a->config_values, b->nconfigs, b->config_names,
                  b->config_values);
}

static bool part_eq(const void *a_, const void *b_)
{
    const cm_part *a = a_, *b = b_;
    return !memcmp(&a->topic, &b->topic, sizeof a->topic) && a->index == b->index &&
           a->epoch == b->epoch && a->node == b->node && a->log == b->log &&
           a->state == b->state && a->stream == b->stream && a->src_log == b->src_log &&
           a->src_lsn == b->src_lsn && a->has_pref == b->has_pref && a->pref == b->pref &&
           a->mod_rev == b->mod_rev;
}

static bool walref_eq(const void *a_, const void *b_)
{
    const cm_walref *a = a_, *b = b_;
    return !memcmp(&a->topic, &b->topic, sizeof a->topic) && a->index == b->index &&
           a->log == b->log && a->lsn == b->lsn && a->mod_rev == b->mod_rev;
}

static bool payref_eq(const void *a_, const void *b_)
{
    const cm_payref *a = a_, *b = b_;
    return a->plog == b->plog && a->mlog == b->mlog && a->lsn == b->lsn &&
           a->mod_rev == b->mod_rev;
}

static bool bconf_eq(const void *a_, const void *b_)
{
    const cm_bconf *a = a_, *b = b_;
    return a->node == b->node && a->mod_rev == b->mod_rev &&
           cfg_eq(a->nconfigs, a->names, a->values, b->nconfigs, b->names, b->values);
}

static bool counter_eq(const void *a_, const void *b_)
{
    const cm_counter *a = a_, *b = b_;
    return a->next == b->next && !strcmp(a->name, b->name) && a->mod_rev == b->mod_rev;
}

/* ================================================================ the model's containers */

/* A key of the model, parsed. */
typedef struct ckey {
    cm_change_kind kind;
    const uint8_t *raw; /* the whole etcd key, for logs */
    size_t rawlen;
    int32_t node;       /* NODE; BCONF (-1: default) */
    int64_t id;         /* LOG; PAYREF: the payload log */
    char name[CM_TOPIC_MAX + 1]; /* TOPIC, COUNTER */
    kc_uuid topic;      /* PART, WALREF */
    int32_t index;
    int64_t log;        /* WALREF; PAYREF: the main log */
} ckey;

typedef struct cm_state cm_state;

/* What the generic containers need to know of a kind. */
typedef struct kops {
    cm_change_kind kind;
    size_t size;    /* of the value */
    size_t rev_off; /* offsetof its mod_rev */
    bool (*eq)(const void *a, const void *b);
    /* decodes a value of key k into out (zeroed; on failure owns nothing) */
    bool (*dec)(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out);
    /* sorted arrays: the id; tables: the map key (at most MKEY_MAX bytes) */
    int64_t (*id)(const void *v);
    int64_t (*kid)(const ckey *k);
    size_t (*key)(const void *v, uint8_t *out);
    size_t (*kkey)(const ckey *k, uint8_t *out);
    void (*clear)(void *v); /* frees what a value owns (NULL: nothing) */
    /* tables with a second index (topics by id) */
    bool (*check)(const cm_state *s, const void *v, jr *r);
    int (*link)(cm_state *s, void *v);
    void (*unlink)(cm_state *s, void *v);
} kops;

static int64_t val_rev(const kops *o, const void *v)
{
    int64_t r;
    memcpy(&r, (const char *)v + o->rev_off, sizeof r);
    return r;
}

static void set_rev(const kops *o, void *v, int64_t rev)
{
    memcpy((char *)v + o->rev_off, &rev, sizeof rev);
}

/* ---- sorted arrays of values (nodes, logs): few, iterated in id order ---- */

typedef struct sarr {
    const kops *ops;
    void *v;
    size_t n, cap;
} sarr;

static void *sarr_at(const sarr *a, size_t i)
{
    return (char *)a->v + i * a->ops->size;
}

static bool sarr_find(const sarr *a, int64_t id, size_t *pos)
{
    size_t lo = 0, hi = a->n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        int64_t x = a->ops->id(sarr_at(a, mid));
        if (x == id) {
            *pos = mid;
            return true;
        }
        if (x < id)
            lo = mid + 1;
        else
            hi = mid;
    }
    *pos = lo;
    return false;
}

static void *sarr_get(const sarr *a, int64_t id)
{
    size_t pos;
    return sarr_find(a, id, &pos) ? sarr_at(a, pos) : NULL;
}

static int sarr_reserve(sarr *a)
{
    if (a->n < a->cap)
        return 0;
    size_t ncap = a->cap ? a->cap * 2 : 8;
    void *nv = realloc(a->v, ncap * a->ops->size);
    if (!nv)
        return SK_ERR_NOMEM;
    a->v = nv;
    a->cap = ncap;
    return 0;
}

static void sarr_free(sarr *a)
{
    free(a->v);
    a->v = NULL;
    a->n = a->cap = 0;
}

/* ---- tables (topics, partitions, walrefs, payrefs, bconfs, counters): a
 * hash map for lookups and a dense array for iteration; each entry is its
 * value followed by its slot in the array, so that a removal moves one
 * entry, not all. ---- */

typedef struct tab {
    const kops *ops;
    sk_map *idx;
    void **ents;
    size_t n, cap;
} tab;

static size_t slot_off(const kops *o)
{
    return (o->size + sizeof(size_t) - 1) / sizeof(size_t) * sizeof(size_t);
}

static void *ent_new(const kops *o)
{
    return calloc(1, slot_off(o) + sizeof(size_t));
}

static size_t *ent_slot(const kops *o, void *e)
{
    return (size_t *)((char *)e + slot_off(o));
}

static void ent_free(const kops *o, void *e)
{
    if (e && o->clear)
        o->clear(e);
    free(e);
}

static void *tab_get(const tab *t, const uint8_t *k, size_t kl)
{
    return t->idx ? sk_map_get(t->idx, k, kl) : NULL;
}

static int tab_add(tab *t, void *e)
{
    uint8_t k[MKEY_MAX];
    size_t kl = t->ops->key(e, k);
    if (t->n == t->cap) {
        size_t ncap = t->cap ? t->cap * 2 : 16;
        void **ne = realloc(t->ents, ncap * sizeof *ne);
        if (!ne)
            return SK_ERR_NOMEM;
        t->ents = ne;
        t->cap = ncap;
    }
    if (!t->idx && !(t->idx = sk_map_new()))
        return SK_ERR_NOMEM;
    if (sk_map_put(t->idx, k, kl, e))
        return SK_ERR_NOMEM;
    *ent_slot(t->ops, e) = t->n;
    t->ents[t->n++] = e;
    return 0;
}

/* e takes old's place (same key: the map replaces in place, no allocation). */
static void tab_swap(tab *t, void *old, void *e)
{
    uint8_t k[MKEY_MAX];
    size_t kl = t->ops->key(e, k);
    size_t slot = *ent_slot(t->ops, old);
    *ent_slot(t->ops, e) = slot;
    t->ents[slot] = e;
    int rc = sk_map_put(t->idx, k, kl, e);
    (void)rc; /* an existing key: cannot fail */
}

static void tab_del(tab *t, void *e)
{
    uint8_t k[MKEY_MAX];
    size_t kl = t->ops->key(e, k);
    sk_map_del(t->idx, k, kl);
    size_t slot = *ent_slot(t->ops, e);
    void *last = t->ents[--t->n];
    t->ents[slot] = last;
    *ent_slot(t->ops, last) = slot;
}

static void tab_free(tab *t)
{
    for (size_t i = 0; i < t->n; i++)
        ent_free(t->ops, t->ents[i]);
    free(t->ents);
    sk_map_destroy(t->idx);
    t->ents = NULL;
    t->idx = NULL;
    t->n = t->cap = 0;
}

/* ================================================================ the state */

struct cm_state {
    bool has_cid;
    char cid[CM_CLUSTER_ID_MAX];
    int64_t cid_rev;
    bool has_ctrl;
    cm_ctrl ctrl;
    sarr nodes, logs;
    tab topics, parts, walrefs, payrefs, bconfs, counters;
    sk_map *topic_ids; /* kc_uuid -> the topic's entry */
};

/* Invalid values and keys already logged, so that each is logged once. */
typedef struct bad {
    int64_t rev;
    uint64_t gen; /* the reset that last saw it */
} bad;

struct cm_model {
    char *prefix;
    size_t plen;
    cm_change_fn fn;
    void *arg;
    cm_state cur, old; /* old: the state before a reset, until its end */
    bool resetting;
    int64_t rev;
    sk_map *bad;
    uint64_t gen;
    union {
        cm_node node;
        cm_log log;
    } scratch; /* the old value of an array entry, for the change callback */
    char cid_was[CM_CLUSTER_ID_MAX];
};

/* ---- the kinds ---- */

static size_t mkey_part(const kc_uuid *t, int32_t index, uint8_t *out)
{
    memcpy(out, t->b, 16);
    memcpy(out + 16, &index, 4);
    return 20;
}

static size_t mkey_walref(const kc_uuid *t, int32_t index, int64_t log, uint8_t *out)
{
    mkey_part(t, index, out);
    memcpy(out + 20, &log, 8);
    return 28;
}

static size_t mkey_payref(int64_t plog, int64_t mlog, uint8_t *out)
{
    memcpy(out, &plog, 8);
    memcpy(out + 8, &mlog, 8);
    return 16;
}

static size_t mkey_str(const char *s, uint8_t *out)
{
    size_t n = strlen(s);
    memcpy(out, s, n);
    return n;
}

static size_t mkey_node(int32_t node, uint8_t *out)
{
    memcpy(out, &node, 4);
    return 4;
}

static bool node_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    return dec_node(r, v, n, k->node, out);
}
static int64_t node_id(const void *v)
{
    return ((const cm_node *)v)->id;
}
static int64_t node_kid(const ckey *k)
{
    return k->node;
}

static bool log_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    return dec_log(r, v, n, k->id, out);
}
static int64_t log_id(const void *v)
{
    return ((const cm_log *)v)->id;
}
static int64_t log_kid(const ckey *k)
{
    return k->id;
}

static bool topic_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    bool ok = dec_topic(r, v, n, k->name, out);
    if (!ok)
        cm_topic_clear(out);
    return ok;
}
static size_t topic_key(const void *v, uint8_t *out)
{
    return mkey_str(((const cm_topic *)v)->name, out);
}
static size_t topic_kkey(const ckey *k, uint8_t *out)
{
    return mkey_str(k->name, out);
}
static void topic_clear(void *v)
{
    cm_topic_clear(v);
}

/* Ids are random and never shared: a second topic claiming one is garbage. */
static bool topic_check(const cm_state *s, const void *v, jr *r)
{
    const cm_topic *t = v;
    const cm_topic *o = s->topic_ids ? sk_map_get(s->topic_ids, t->id.b, 16) : NULL;
    if (o && strcmp(o->name, t->name) != 0)
        return jfail(r, "its id is topic \"%s\"'s", o->name);
    return true;
}

static int topic_link(cm_state *s, void *v)
{
    cm_topic *t = v;
    if (!s->topic_ids && !(s->topic_ids = sk_map_new()))
        return SK_ERR_NOMEM;
    return sk_map_put(s->topic_ids, t->id.b, 16, t) ? SK_ERR_NOMEM : 0;
}

static void topic_unlink(cm_state *s, void *v)
{
    cm_topic *t = v;
    if (s->topic_ids && sk_map_get(s->topic_ids, t->id.b, 16) == t)
        sk_map_del(s->topic_ids, t->id.b, 16);
}

static bool part_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    return dec_part(r, v, n, &k->topic, k->index, out);
}
static size_t part_key(const void *v, uint8_t *out)
{
    const cm_part *p = v;
    return mkey_part(&p->topic, p->index, out);
}
static size_t part_kkey(const ckey *k, uint8_t *out)
{
    return mkey_part(&k->topic, k->index, out);
}

static bool walref_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    return dec_walref(r, v, n, &k->topic, k->index, k->log, out);
}
static size_t walref_key(const void *v, uint8_t *out)
{
    const cm_walref *w = v;
    return mkey_walref(&w->topic, w->index, w->log, out);
}
static size_t walref_kkey(const ckey *k, uint8_t *out)
{
    return mkey_walref(&k->topic, k->index, k->log, out);
}

static bool payref_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    return dec_payref(r, v, n, k->id, k->log, out);
}
static size_t payref_key(const void *v, uint8_t *out)
{
    const cm_payref *p = v;
    return mkey_payref(p->plog, p->mlog, out);
}
static size_t payref_kkey(const ckey *k, uint8_t *out)
{
    return mkey_payref(k->id, k->log, out);
}

static bool bconf_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    bool ok = dec_bconf(r, v, n, k->node, out);
    if (!ok)
        cm_bconf_clear(out);
    return ok;
}
static size_t bconf_key(const void *v, uint8_t *out)
{
    return mkey_node(((const cm_bconf *)v)->node, out);
}
static size_t bconf_kkey(const ckey *k, uint8_t *out)
{
    return mkey_node(k->node, out);
}
static void bconf_clear(void *v)
{
    cm_bconf_clear(v);
}

static bool counter_dec(jr *r, const uint8_t *v, size_t n, const ckey *k, void *out)
{
    cm_counter *c = out;
    size_t nl = strnlen(k->name, sizeof c->name - 1); /* key_cluster checked it */
    memcpy(c->name, k->name, nl);
    c->name[nl] = 0;
    return dec_counter(r, v, n, &c->next);
}
static size_t counter_key(const void *v, uint8_t *out)
{
    return mkey_str(((const cm_counter *)v)->name, out);
}
static size_t counter_kkey(const ckey *k, uint8_t *out)
{
    return mkey_str(k->name, out);
}

static const kops node_ops = {
    .kind = CM_CH_NODE, .size = sizeof(cm_node), .rev_off = offsetof(cm_node, mod_rev),
    .eq = node_eq, .dec = node_dec, .id = node_id, .kid = node_kid};
static const kops log_ops = {
    .kind = CM_CH_LOG, .size = sizeof(cm_log), .rev_off = offsetof(cm_log, mod_rev),
    .eq = log_eq, .dec = log_dec, .id = log_id, .kid = log_kid};
static const kops topic_ops = {
    .kind = CM_CH_TOPIC, .size = sizeof(cm_topic), .rev_off = offsetof(cm_topic, mod_rev),
    .eq = topic_eq, .dec = topic_dec, .key = topic_key, .kkey = topic_kkey,
    .clear = topic_clear, .check = topic_check, .link = topic_link, .unlink = topic_unlink};
static const kops part_ops = {
    .kind = CM_CH_PART, .size = sizeof(cm_part), .rev_off = offsetof(cm_part, mod_rev),
    .eq = part_eq, .dec = part_dec, .key = part_key, .kkey = part_kkey};
static const kops walref_ops = {
    .kind = CM_CH_WALREF, .size = sizeof(cm_walref), .rev_off = offsetof(cm_walref, mod_rev),
    .eq = walref_eq, .dec = walref_dec, .key = walref_key, .kkey = walref_kkey};
static const kops payref_ops = {
    .kind = CM_CH_PAYREF, .size = sizeof(cm_payref), .rev_off = offsetof(cm_payref, mod_rev),
    .eq = payref_eq, .dec = payref_dec, .key = payref_key, .kkey = payref_kkey};
static const kops bconf_ops = {
    .kind = CM_CH_BCONF, .size = sizeof(cm_bconf), .rev_off = offsetof(cm_bconf, mod_rev),
    .eq = bconf_eq, .dec = bconf_dec, .key = bconf_key, .kkey = bconf_kkey,
    .clear = bconf_clear};
static const kops counter_ops = {
    .kind = CM_CH_COUNTER, .size = sizeof(cm_counter), .rev_off = offsetof(cm_counter, mod_rev),
    .eq = counter_eq, .dec = counter_dec, .key = counter_key, .kkey = counter_kkey};

static void state_init(cm_state *s)
{
    memset(s, 0, sizeof *s);
    s->nodes.ops = &node_ops;
    s->logs.ops = &log_ops;
    s->topics.ops = &topic_ops;
    s->parts.ops = &part_ops;
    s->walrefs.ops = &walref_ops;
    s->payrefs.ops = &payref_ops;
    s->bconfs.ops = &bconf_ops;
    s->counters.ops = &counter_ops;
}

static void state_free(cm_state *s)
{
    sarr_free(&s->nodes);
    sarr_free(&s->logs);
    tab_free(&s->topics);
    tab_free(&s->parts);
    tab_free(&s->walrefs);
    tab_free(&s->payrefs);
    tab_free(&s->bconfs);
    tab_free(&s->counters);
    sk_map_destroy(s->topic_ids);
    state_init(s);
}

static sarr *state_sarr(cm_state *s, cm_change_kind kind)
{
    return kind == CM_CH_NODE ? &s->nodes : kind == CM_CH_LOG ? &s->logs : NULL;
}

static tab *state_tab(cm_state *s, cm_change_kind kind)
{
    switch (kind) {
    case CM_CH_TOPIC:
        return &s->topics;
    case CM_CH_PART:
        return &s->parts;
    case CM_CH_WALREF:
        return &s->walrefs;
    case CM_CH_PAYREF:
        return &s->payrefs;
    case CM_CH_BCONF:
        return &s->bconfs;
    case CM_CH_COUNTER:
        return &s->counters;
    default:
        return NULL;
    }
}

/* ================================================================ the model */

cm_model *cm_new(const char *prefix, cm_change_fn fn, void *arg)
{
    cm_model *m = calloc(1, sizeof *m);
    if (!m || !(m->prefix = strdup(prefix ? prefix : ""))) {
        free(m);
        return NULL;
    }
    m->plen = strlen(m->prefix);
    m->fn = fn;
    m->arg = arg;
    state_init(&m->cur);
    state_init(&m->old);
    return m;
}

static void bad_clear(cm_model *m)
{
    size_t it = 0;
    void *v;
    while (m->bad && sk_map_next(m->bad, &it, NULL, NULL, &v))
        free(v);
    sk_map_destroy(m->bad);
    m->bad = NULL;
}

void cm_destroy(cm_model *m)
{
    if (!m)
        return;
    state_free(&m->cur);
    state_free(&m->old);
    bad_clear(m);
    free(m->prefix);
    free(m);
}

static void notify(cm_model *m, cm_change_kind kind, const void *was, const void *now)
{
    if (!m->fn || m->resetting)
        return;
    cm_change c = {.kind = kind, .was = was, .now = now};
    m->fn(m->arg, &c);
}

/* ---- invalid keys and values: logged once ---- */

/* A key for a log line: printable, bounded, whatever bytes it holds. */
static void key_print(char *out, size_t outlen, const uint8_t *k, size_t kl)
{
    /* room for one escape (4) and "..." (3) and the NUL */
    size_t o = 0, i = 0;
    for (; i < kl && o + 8 <= outlen; i++) {
        if (k[i] >= 0x20 && k[i] < 0x7f && k[i] != '\\')
            out[o++] = (char)k[i];
        else
            o += (size_t)snprintf(out + o, outlen - o, "\\x%02x", k[i]);
    }
    if (i < kl) {
        memcpy(out + o, "...", 3);
        o += 3;
    }
    out[o] = 0;
}

static void bad_note(cm_model *m, const uint8_t *k, size_t kl, int64_t rev, const char *why)
{
    bad *b = m->bad ? sk_map_get(m->bad, k, kl) : NULL;
    if (b && b->rev == rev) {
        b->gen = m->gen;
        return;
    }
    char kp[200];
    key_print(kp, sizeof kp, k, kl);
    SK_WARN(MOD, "%s (mod_revision %lld): %s; treated as absent", kp, (long long)rev, why);
    if (!b) {
        /* Without memory to remember it, it is only logged again next time. */
        if ((!m->bad && !(m->bad = sk_map_new())) || !(b = malloc(sizeof *b)))
            return;
        if (sk_map_put(m->bad, k, kl, b)) {
            free(b);
            return;
        }
    }
    b->rev = rev;
    b->gen = m->gen;
}

static void bad_forget(cm_model *m, const uint8_t *k, size_t kl)
{
    if (m->bad)
        free(sk_map_del(m->bad, k, kl));
}

/* After a reset: what the new state no longer holds need not be remembered. */
static void bad_sweep(cm_model *m)
{
    size_t it = 0;
    const void *k;
    size_t kl;
    void *v;
    while (m->bad && sk_map_next(m->bad, &it, &k, &kl, &v)) {
        if (((bad *)v)->gen != m->gen) {
            sk_map_del(m->bad, k, kl);
            free(v);
        }
    }
}

static int verdict(cm_model *m, const ckey *k, bool ok, const jr *r, int64_t rev)
{
    if (ok) {
        bad_forget(m, k->raw, k->rawlen);
        return 0;
    }
    bad_note(m, k->raw, k->rawlen, rev, r->why);
    return SK_ERR_PARSE;
}

/* ---- keys ---- */

static bool has(const char *p, size_t n, const char *lit, size_t *rest)
{
    size_t l = strlen(lit);
    if (n < l || memcmp(p, lit, l) != 0)
        return false;
    *rest = l;
    return true;
}

static bool is(const char *p, size_t n, const char *lit)
{
    return n == strlen(lit) && memcmp(p, lit, n) == 0;
}

static bool one_segment(const char *p, size_t n)
{
    return memchr(p, '/', n) == NULL;
}

/* 1: *out is the number; 0: not one segment, -1: not a number (*out 0). */
static int key_num(const char *p, size_t n, int64_t max, int64_t *out)
{
    if (!one_segment(p, n)) {
        *out = 0;
        return 0;
    }
    return dec_num(p, n, max, out) ? 1 : -1;
}

static int key_cluster(const char *p, size_t n, ckey *k)
{
    if (is(p, n, "id")) {
        k->kind = CM_CH_CLUSTER_ID;
        return 1;
    }
    if (!has(p, n, "next_", &(size_t){0}) || !one_segment(p, n))
        return 0;
    if (!counter_name_ok(p, n))
        return -1;
    k->kind = CM_CH_COUNTER;
    memcpy(k->name, p, n);
    k->name[n] = 0;
    return 1;
}

static int key_topic(const char *p, size_t n, ckey *k)
{
    if (!one_segment(p, n))
        return 0;
    if (!topic_name_ok(p, n))
        return -1;
    k->kind = CM_CH_TOPIC;
    memcpy(k->name, p, n);
    k->name[n] = 0;
    return 1;
}

/* <topic hex>/<index> */
static int key_part(const char *p, size_t n, ckey *k)
{
    const char *sl = memchr(p, '/', n);
    if (!sl || !one_segment(sl + 1, n - (size_t)(sl + 1 - p)))
        return 0;
    int64_t idx;
    if (!hex_uuid(p, (size_t)(sl - p), &k->topic) ||
        !dec_num(sl + 1, n - (size_t)(sl + 1 - p), INT32_MAX, &idx))
        return -1;
    k->kind = CM_CH_PART;
    k->index = (int32_t)idx;
    return 1;
}

/* <topic hex>-<index>/<log id> */
static int key_walref(const char *p, size_t n, ckey *k)
{
    const char *sl = memchr(p, '/', n);
    if (!sl || !one_segment(sl + 1, n - (size_t)(sl + 1 - p)))
        return 0;
    size_t a = (size_t)(sl - p);
    int64_t idx, log;
    if (a < 34 || p[32] != '-' || !hex_uuid(p, 32, &k->topic) ||
        !dec_num(p + 33, a - 33, INT32_MAX, &idx) ||
        !dec_num(sl + 1, n - a - 1, INT64_MAX, &log))
        return -1;
    k->kind = CM_CH_WALREF;
    k->index = (int32_t)idx;
    k->log = log;
    return 1;
}

/* <payload log id>/<main log id> */
static int key_payref(const char *p, size_t n, ckey *k)
{
    const char *sl = memchr(p, '/', n);
    if (!sl || !one_segment(sl + 1, n - (size_t)(sl + 1 - p)))
        return 0;
    size_t a = (size_t)(sl - p);
    if (!dec_num(p, a, INT64_MAX, &k->id) || !dec_num(sl + 1, n - a - 1, INT64_MAX, &k->log))
        return -1;
    k->kind = CM_CH_PAYREF;
    return 1;
}

static int key_bconf(const char *p, size_t n, ckey *k)
{
    int64_t node = -1;
    int rc = is(p, n, "default") ? 1 : key_num(p, n, INT32_MAX, &node);
    k->kind = CM_CH_BCONF;
    k->node = (int32_t)node;
    return rc;
}

/* 1: a key of the model; 0: not one (ignored); -1: a known shape, invalid. */
static int parse_key(const char *p, size_t n, ckey *k)
{
    size_t r;
    int64_t x;
    int rc;
    if (is(p, n, "controller")) {
        k->kind = CM_CH_CONTROLLER;
        return 1;
    }
    if (has(p, n, "cluster/", &r))
        return key_cluster(p + r, n - r, k);
    if (has(p, n, "nodes/", &r)) {
        k->kind = CM_CH_NODE;
        rc = key_num(p + r, n - r, INT32_MAX, &x);
        k->node = (int32_t)x;
        return rc;
    }
    if (has(p, n, "logs/", &r)) {
        k->kind = CM_CH_LOG;
        rc = key_num(p + r, n - r, INT64_MAX, &x);
        k->id = x;
        return rc;
    }
    if (has(p, n, "topics/", &r))
        return key_topic(p + r, n - r, k);
    if (has(p, n, "parts/", &r))
        return key_part(p + r, n - r, k);
    if (has(p, n, "walrefs/", &r))
        return key_walref(p + r, n - r, k);
    if (has(p, n, "payrefs/", &r))
        return key_payref(p + r, n - r, k);
    if (has(p, n, "config/broker/", &r))
        return key_bconf(p + r, n - r, k);
    return 0;
}

/* The key of an event: 1 (k filled), 0 (not the model's: ignore) or -1. */
static int event_key(cm_model *m, const uint8_t *key, size_t klen, int64_t rev, ckey *k)
{
    if (!key || klen < m->plen || memcmp(key, m->prefix, m->plen) != 0)
        return 0;
    if (rev > m->rev)
        m->rev = rev;
    memset(k, 0, sizeof *k);
    k->raw = key;
    k->rawlen = klen;
    return parse_key((const char *)key + m->plen, klen - m->plen, k);
}

/* ---- applying one key's new value (NULL: absent) ---- */

static int sarr_apply(cm_model *m, sarr *a, int64_t id, const void *val, int64_t rev)
{
    const kops *o = a->ops;
    size_t pos;
    void *old = sarr_find(a, id, &pos) ? sarr_at(a, pos) : NULL;
    if ((old && rev < val_rev(o, old)) || (!old && !val) || (old && val && o->eq(old, val)))
        return 0; /* stale, still absent, or a duplicate */
    if (!old) {
        if (sarr_reserve(a))
            return SK_ERR_NOMEM;
        memmove(sarr_at(a, pos + 1), sarr_at(a, pos), (a->n - pos) * o->size);
        memcpy(sarr_at(a, pos), val, o->size);
        a->n++;
        notify(m, o->kind, NULL, sarr_at(a, pos));
        return 0;
    }
    memcpy(&m->scratch, old, o->size);
    if (val) {
        memcpy(old, val, o->size);
    } else {
        memmove(old, sarr_at(a, pos + 1), (a->n - pos - 1) * o->size);
        a->n--;
    }
    notify(m, o->kind, &m->scratch, val ? old : NULL);
    return 0;
}

/* Installs entry e (NULL: the key is absent) under map key k; takes e. */
static int tab_apply(cm_model *m, cm_state *s, tab *t, const uint8_t *k, size_t kl, void *e,
                     int64_t rev)
{
    const kops *o = t->ops;
    void *old = tab_get(t, k, kl);
    if ((old && rev < val_rev(o, old)) || (!old && !e) || (old && e && o->eq(old, e))) {
        ent_free(o, e);
        return 0;
    }
    /* The second index first: it is the step that may fail, and a link of
     * the same id replaces old's in place. */
    if (e && o->link && o->link(s, e)) {
        ent_free(o, e);
        return SK_ERR_NOMEM;
    }
    if (!old && tab_add(t, e)) {
        if (o->unlink)
            o->unlink(s, e);
        ent_free(o, e);
        return SK_ERR_NOMEM;
    }
    if (old && o->unlink)
        o->unlink(s, old);
    if (old && e)
        tab_swap(t, old, e);
    else if (old)
        tab_del(t, old);
    notify(m, o->kind, old, e);
    ent_free(o, old);
    return 0;
}

static int put_sarr(cm_model *m, const ckey *k, const uint8_t *v, size_t n, int64_t rev)
{
    sarr *a = state_sarr(&m->cur, k->kind);
    union {
        cm_node node;
        cm_log log;
    } val;
    jr r = {0};
    bool ok = a->ops->dec(&r, v, n, k, &val);
    if (ok)
        set_rev(a->ops, &val, rev);
    int rc = sarr_apply(m, a, a->ops->kid(k), ok ? &val : NULL, rev);
    return rc ? rc : verdict(m, k, ok, &r, rev);
}

static int put_tab(cm_model *m, const ckey *k, const uint8_t *v, size_t n, int64_t rev)
{
    tab *t = state_tab(&m->cur, k->kind);
    const kops *o = t->ops;
    void *e = ent_new(o);
    if (!e)
        return SK_ERR_NOMEM;
    jr r = {0};
    bool ok = o->dec(&r, v, n, k, e) && (!o->check || o->check(&m->cur, e, &r));
    if (r.nomem) {
        ent_free(o, e);
        return SK_ERR_NOMEM;
    }
    if (ok) {
        set_rev(o, e, rev);
    } else {
        ent_free(o, e);
        e = NULL;
    }
    uint8_t mk[MKEY_MAX];
    size_t ml = o->kkey(k, mk);
    int rc = tab_apply(m, &m->cur, t, mk, ml, e, rev);
    return rc ? rc : verdict(m, k, ok, &r, rev);
}

static void cid_apply(cm_model *m, const char *id, int64_t rev)
{
    cm_state *s = &m->cur;
    if ((s->has_cid && rev < s->cid_rev) || (!s->has_cid && !id) ||
        (s->has_cid && id && !strcmp(s->cid, id) && s->cid_rev == rev))
        return;
    bool had = s->has_cid;
    memcpy(m->cid_was, s->cid, sizeof s->cid);
    s->has_cid = id != NULL;
    snprintf(s->cid, sizeof s->cid, "%s", id ? id : "");
    s->cid_rev = rev;
    notify(m, CM_CH_CLUSTER_ID, had ? m->cid_was : NULL, id ? s->cid : NULL);
}

static int put_cluster_id(cm_model *m, const ckey *k, const uint8_t *v, size_t n, int64_t rev)
{
    char id[CM_CLUSTER_ID_MAX];
    jr r = {0};
    bool ok = dec_cluster_id(&r, v, n, id, sizeof id);
    cid_apply(m, ok ? id : NULL, rev);
    return verdict(m, k, ok, &r, rev);
}

static bool ctrl_eq(const cm_ctrl *a, const cm_ctrl *b)
{
    return a->node == b->node && a->log == b->log && a->mod_rev == b->mod_rev;
}

static void ctrl_apply(cm_model *m, const cm_ctrl *c, int64_t rev)
{
    cm_state *s = &m->cur;
    if ((s->has_ctrl && rev < s->ctrl.mod_rev) || (!s->has_ctrl && !c) ||
        (s->has_ctrl && c && ctrl_eq(&s->ctrl, c)))
        return;
    bool had = s->has_ctrl;
    cm_ctrl was = s->ctrl;
    s->has_ctrl = c != NULL;
    s->ctrl = c ? *c : (cm_ctrl){.node = -1};
    notify(m, CM_CH_CONTROLLER, had ? &was : NULL, c ? &s->ctrl : NULL);
}

static int put_ctrl(cm_model *m, const ckey *k, const uint8_t *v, size_t n, int64_t rev)
{
    cm_ctrl c;
    jr r = {0};
    bool ok = dec_ctrl(&r, v, n, &c);
    c.mod_rev = rev;
    ctrl_apply(m, ok ? &c : NULL, rev);
    return verdict(m, k, ok, &r, rev);
}

/* A value newer than rev is held for k: a put at rev is ignored before it is
 * even parsed (so that stale garbage is not logged either). */
static bool stale(cm_model *m, const ckey *k, int64_t rev)
{
    cm_state *s = &m->cur;
    const kops *o;
    const void *v;
    uint8_t mk[MKEY_MAX];
    switch (k->kind) {
    case CM_CH_CLUSTER_ID:
        return s->has_cid && rev < s->cid_rev;
    case CM_CH_CONTROLLER:
        return s->has_ctrl && rev < s->ctrl.mod_rev;
    case CM_CH_NODE:
    case CM_CH_LOG:
        o = state_sarr(s, k->kind)->ops;
        v = sarr_get(state_sarr(s, k->kind), o->kid(k));
        break;
    default:
        o = state_tab(s, k->kind)->ops;
        v = tab_get(state_tab(s, k->kind), mk, o->kkey(k, mk));
        break;
    }
    return v && rev < val_rev(o, v);
}

int cm_apply_put(cm_model *m, const uint8_t *key, size_t klen, const uint8_t *value, size_t vlen,
                 int64_t mod_rev)
{
    ckey k;
    int pk = event_key(m, key, klen, mod_rev, &k);
    if (pk < 0) {
        bad_note(m, key, klen, mod_rev, "not a valid key name");
        return SK_ERR_PARSE;
    }
    if (pk == 0 || stale(m, &k, mod_rev))
        return 0;
    switch (k.kind) {
    case CM_CH_CLUSTER_ID:
        return put_cluster_id(m, &k, value, vlen, mod_rev);
    case CM_CH_CONTROLLER:
        return put_ctrl(m, &k, value, vlen, mod_rev);
    case CM_CH_NODE:
    case CM_CH_LOG:
        return put_sarr(m, &k, value, vlen, mod_rev);
    default:
        return put_tab(m, &k, value, vlen, mod_rev);
    }
}

int cm_apply_delete(cm_model *m, const uint8_t *key, size_t klen, int64_t mod_rev)
{
    ckey k;
    int pk = event_key(m, key, klen, mod_rev, &k);
    if (pk != 0)
        bad_forget(m, key, klen); /* the garbage, if any, is gone */
    if (pk <= 0)
        return 0;
    switch (k.kind) {
    case CM_CH_CLUSTER_ID:
        cid_apply(m, NULL, mod_rev);
        return 0;
    case CM_CH_CONTROLLER:
        ctrl_apply(m, NULL, mod_rev);
        return 0;
    case CM_CH_NODE:
    case CM_CH_LOG: {
        sarr *a = state_sarr(&m->cur, k.kind);
        return sarr_apply(m, a, a->ops->kid(&k), NULL, mod_rev);
    }
    default: {
        tab *t = state_tab(&m->cur, k.kind);
        uint8_t mk[MKEY_MAX];
        size_t ml = t->ops->kkey(&k, mk);
        return tab_apply(m, &m->cur, t, mk, ml, NULL, mod_rev);
    }
    }
}

/* ---- reset ---- */

void cm_reset_begin(cm_model *m)
{
    if (m->resetting)
        state_free(&m->cur); /* begun again: the partial new state goes */
    else
        m->old = m->cur;
    state_init(&m->cur);
    m->resetting = true;
    m->gen++;
}

static void sarr_gone(cm_model *m, const sarr *was, const sarr *now)
{
    for (size_t i = 0; i < was->n; i++) {
        const void *v = sarr_at(was, i);
        if (!sarr_get(now, was->ops->id(v)))
            notify(m, was->ops->kind, v, NULL);
    }
}

static void sarr_new(cm_model *m, const sarr *was, const sarr *now)
{
    for (size_t i = 0; i < now->n; i++) {
        const void *v = sarr_at(now, i);
        const void *old = sarr_get(was, now->ops->id(v));
        if (!old || !now->ops->eq(old, v))
            notify(m, now->ops->kind, old, v);
    }
}

static void tab_gone(cm_model *m, const tab *was, const tab *now)
{
    uint8_t k[MKEY_MAX];
    for (size_t i = 0; i < was->n; i++) {
        const void *v = was->ents[i];
        if (!tab_get(now, k, was->ops->key(v, k)))
            notify(m, was->ops->kind, v, NULL);
    }
}

static void tab_new(cm_model *m, const tab *was, const tab *now)
{
    uint8_t k[MKEY_MAX];
    for (size_t i = 0; i < now->n; i++) {
        const void *v = now->ents[i];
        const void *old = tab_get(was, k, now->ops->key(v, k));
        if (!old || !now->ops->eq(old, v))
            notify(m, now->ops->kind, old, v);
    }
}

static void singles_gone(cm_model *m, const cm_state *was, const cm_state *now)
{
    if (was->has_ctrl && !now->has_ctrl)
        notify(m, CM_CH_CONTROLLER, &was->ctrl, NULL);
    if (was->has_cid && !now->has_cid)
        notify(m, CM_CH_CLUSTER_ID, was->cid, NULL);
}

static void cid_new(cm_model *m, const cm_state *was, const cm_state *now)
{
    if (now->has_cid &&
        (!was->has_cid || strcmp(was->cid, now->cid) || was->cid_rev != now->cid_rev))
        notify(m, CM_CH_CLUSTER_ID, was->has_cid ? was->cid : NULL, now->cid);
}

static void ctrl_new(cm_model *m, const cm_state *was, const cm_state *now)
{
    if (now->has_ctrl && (!was->has_ctrl || !ctrl_eq(&was->ctrl, &now->ctrl)))
        notify(m, CM_CH_CONTROLLER, was->has_ctrl ? &was->ctrl : NULL, &now->ctrl);
}

void cm_reset_end(cm_model *m)
{
    if (!m->resetting)
        return;
    m->resetting = false;
    const cm_state *was = &m->old, *now = &m->cur;
    /* Deletions, dependents first. */
    tab_gone(m, &was->walrefs, &now->walrefs);
    tab_gone(m, &was->payrefs, &now->payrefs);
    tab_gone(m, &was->parts, &now->parts);
    tab_gone(m, &was->topics, &now->topics);
    tab_gone(m, &was->bconfs, &now->bconfs);
    tab_gone(m, &was->counters, &now->counters);
    sarr_gone(m, &was->logs, &now->logs);
    sarr_gone(m, &was->nodes, &now->nodes);
    singles_gone(m, was, now);
    /* Creations and changes, what others depend on first. */
    cid_new(m, was, now);
    tab_new(m, &was->counters, &now->counters);
    sarr_new(m, &was->nodes, &now->nodes);
    sarr_new(m, &was->logs, &now->logs);
    tab_new(m, &was->topics, &now->topics);
    tab_new(m, &was->parts, &now->parts);
    tab_new(m, &was->walrefs, &now->walrefs);
    tab_new(m, &was->payrefs, &now->payrefs);
    tab_new(m, &was->bconfs, &now->bconfs);
    ctrl_new(m, was, now);
    state_free(&m->old);
    bad_sweep(m);
}

int64_t cm_revision(const cm_model *m)
{
    return m->rev;
}

void cm_set_revision(cm_model *m, int64_t rev)
{
    m->rev = rev;
}

/* ================================================================ queries */

const char *cm_cluster_id(const cm_model *m)
{
    return m->cur.has_cid ? m->cur.cid : "";
}

int32_t cm_controller(const cm_model *m)
{
    return m->cur.has_ctrl ? m->cur.ctrl.node : -1;
}

const cm_ctrl *cm_controller_get(const cm_model *m)
{
    return m->cur.has_ctrl ? &m->cur.ctrl : NULL;
}

const cm_counter *cm_counter_get(const cm_model *m, const char *name)
{
    size_t n = name ? strnlen(name, CM_COUNTER_NAME_MAX) : 0;
    if (!counter_name_ok(name, n))
        return NULL;
    return tab_get(&m->cur.counters, (const uint8_t *)name, n);
}

const cm_node *cm_node_get(const cm_model *m, int32_t id)
{
    return sarr_get(&m->cur.nodes, id);
}

const cm_node *cm_nodes(const cm_model *m, size_t *n)
{
    *n = m->cur.nodes.n;
    return m->cur.nodes.v;
}

const cm_log *cm_log_get(const cm_model *m, int64_t id)
{
    return sarr_get(&m->cur.logs, id);
}

const cm_log *cm_logs(const cm_model *m, size_t *n)
{
    *n = m->cur.logs.n;
    return m->cur.logs.v;
}

const cm_topic *cm_topic_get(const cm_model *m, const char *name)
{
    size_t n = name ? strnlen(name, CM_TOPIC_MAX + 1) : 0;
    if (n == 0 || n > CM_TOPIC_MAX)
        return NULL;
    return tab_get(&m->cur.topics, (const uint8_t *)name, n);
}

const cm_topic *cm_topic_by_id(const cm_model *m, const kc_uuid *id)
{
    return m->cur.topic_ids ? sk_map_get(m->cur.topic_ids, id->b, 16) : NULL;
}

const cm_topic *cm_topic_next(const cm_model *m, size_t *it)
{
    return *it < m->cur.topics.n ? m->cur.topics.ents[(*it)++] : NULL;
}

const cm_part *cm_part_get(const cm_model *m, const kc_uuid *topic, int32_t index)
{
    uint8_t k[MKEY_MAX];
    return tab_get(&m->cur.parts, k, mkey_part(topic, index, k));
}

const cm_part *cm_part_next(const cm_model *m, size_t *it)
{
    return *it < m->cur.parts.n ? m->cur.parts.ents[(*it)++] : NULL;
}

const cm_walref *cm_walref_next(const cm_model *m, size_t *it)
{
    return *it < m->cur.walrefs.n ? m->cur.walrefs.ents[(*it)++] : NULL;
}

const cm_walref *cm_walref_get(const cm_model *m, const kc_uuid *topic, int32_t index,
                               int64_t log)
{
    uint8_t k[MKEY_MAX];
    return tab_get(&m->cur.walrefs, k, mkey_walref(topic, index, log, k));
}

const cm_payref *cm_payref_next(const cm_model *m, size_t *it)
{
    return *it < m->cur.payrefs.n ? m->cur.payrefs.ents[(*it)++] : NULL;
}

const cm_payref *cm_payref_get(const cm_model *m, int64_t plog, int64_t mlog)
{
    uint8_t k[MKEY_MAX];
    return tab_get(&m->cur.payrefs, k, mkey_payref(plog, mlog, k));
}

const cm_bconf *cm_bconf_get(const cm_model *m, int32_t node)
{
    uint8_t k[MKEY_MAX];
    return tab_get(&m->cur.bconfs, k, mkey_node(node, k));
}
