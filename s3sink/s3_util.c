#include "s3_util.h"

#include <curl/curl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sk_err.h"

bool s3_uri_encode(char *dst, size_t cap, const char *src, bool keep_slash)
{
    static const char hex[] = "0123456789ABCDEF";
    size_t n = strlen(dst);
    for (const unsigned char *p = (const unsigned char *)src; *p; p++) {
        unsigned char c = *p;
        bool plain = (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') ||
                     c == '-' || c == '.' || c == '_' || c == '~' || (keep_slash && c == '/');
        if (plain) {
            if (n + 1 >= cap)
                return false;
            dst[n++] = (char)c;
        } else {
            if (n + 3 >= cap)
                return false;
            dst[n++] = '%';
            dst[n++] = hex[c >> 4];
            dst[n++] = hex[c & 15];
        }
    }
    dst[n] = '\0';
    return true;
}

const char *s3_xml_find(const char *p, const char *end, const char *tag, size_t *len,
                        const char **after)
{
    size_t tl = strlen(tag);
    while (p < end) {
        const char *lt = memchr(p, '<', (size_t)(end - p));
        if (!lt || (size_t)(end - lt) < tl + 2)
            return NULL;
        const char *q = lt + 1;
        if (strncmp(q, tag, tl) == 0 && (q[tl] == '>' || q[tl] == ' ' || q[tl] == '/')) {
            const char *gt = memchr(q + tl, '>', (size_t)(end - (q + tl)));
            if (!gt)
                return NULL;
            if (gt[-1] == '/') { /* <tag/> */
                *len = 0;
                if (after)
                    *after = gt + 1;
                return gt + 1;
            }
            const char *text = gt + 1;
            for (const char *c = text; c < end;) {
                const char *lt2 = memchr(c, '<', (size_t)(end - c));
                if (!lt2 || (size_t)(end - lt2) < tl + 3)
                    return NULL;
                if (lt2[1] == '/' && strncmp(lt2 + 2, tag, tl) == 0 && lt2[2 + tl] == '>') {
                    *len = (size_t)(lt2 - text);
                    if (after)
                        *after = lt2 + 3 + tl;
                    return text;
                }
                c = lt2 + 1;
            }
            return NULL;
        }
        p = lt + 1;
    }
    return NULL;
}

char *s3_xml_text(const char *p, size_t len)
{
    char *out = malloc(len + 1);
    if (!out)
        return NULL;
    size_t o = 0;
    for (size_t i = 0; i < len;) {
        if (p[i] != '&') {
            out[o++] = p[i++];
            continue;
        }
        const char *semi = memchr(p + i, ';', len - i);
        size_t el = semi ? (size_t)(semi - (p + i)) + 1 : 0;
        static const struct {
            const char *name;
            char c;
        } ents[] = {{"&amp;", '&'}, {"&lt;", '<'}, {"&gt;", '>'}, {"&quot;", '"'}, {"&apos;", '\''}};
        bool done = false;
        for (size_t k = 0; k < sizeof ents / sizeof ents[0] && el; k++) {
            if (el == strlen(ents[k].name) && memcmp(p + i, ents[k].name, el) == 0) {
                out[o++] = ents[k].c;
                i += el;
                done = true;
                break;
            }
        }
        if (!done && el > 3 && p[i + 1] == '#') {
            bool hexa = p[i + 2] == 'x' || p[i + 2] == 'X';
            unsigned long v = strtoul(p + i + (hexa ? 3 : 2), NULL, hexa ? 16 : 10);
            if (v > 0 && v < 0x80) { /* S3 keys Skiff writes are ASCII */
                out[o++] = (char)v;
                i += el;
                done = true;
            }
        }
        if (!done)
            out[o++] = p[i++];
    }
    out[o] = '\0';
    return out;
}

bool s3_xml_get(const char *p, const char *end, const char *tag, char *buf, size_t cap)
{
    size_t len;
    const char *t = s3_xml_find(p, end, tag, &len, NULL);
    if (!t || cap == 0)
        return false;
    char *txt = s3_xml_text(t, len);
    if (!txt)
        return false;
    snprintf(buf, cap, "%s", txt);
    free(txt);
    return true;
}

int64_t s3_parse_iso8601(const char *s, size_t len)
{
    char tmp[64];
    if (len >= sizeof tmp)
        return -1;
    memcpy(tmp, s, len);
    tmp[len] = '\0';
    struct tm tm = {0};
    int ms = 0, consumed = 0;
    if (sscanf(tmp, "%4d-%2d-%2dT%2d:%2d:%2d%n", &tm.tm_year, &tm.tm_mon, &tm.tm_mday, &tm.tm_hour,
               &tm.tm_min, &tm.tm_sec, &consumed) != 6)
        return -1;
    const char *rest = tmp + consumed;
    if (*rest == '.') {
        int digits = 0;
        rest++;
        while (*rest >= '0' && *rest <= '9') {
            if (digits < 3) {
                ms = ms * 10 + (*rest - '0');
                digits++;
            }
            rest++;
        }
        while (digits++ < 3)
            ms *= 10;
    }
    tm.tm_year -= 1900;
    tm.tm_mon -= 1;
    time_t t = timegm(&tm);
    if (t == (time_t)-1)
        return -1;
    return (int64_t)t * 1000 + ms;
}

void s3_creds_clear(s3_creds *c)
{
    free(c->token);
    memset(c, 0, sizeof *c);
}

/* The string value of "name" in a flat JSON object, unescaped into buf. */
static bool json_str(const char *json, size_t len, const char *name, char *buf, size_t cap)
{
    char pat[64];
    snprintf(pat, sizeof pat, "\"%s\"", name);
    const char *end = json + len;
    size_t pl = strlen(pat);
    for (const char *p = json; p + pl <= end; p++) {
        if (memcmp(p, pat, pl) != 0)
            continue;
        const char *q = p + pl;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
            q++;
        if (q >= end || *q != ':')
            continue;
        q++;
        while (q < end && (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r'))
            q++;
        if (q >= end || *q != '"')
            continue;
        q++;
        size_t o = 0;
        while (q < end && *q != '"') {
            char c = *q++;
            if (c == '\\' && q < end) {
                c = *q++;
                if (c == 'n')
                    c = '\n';
                else if (c == 't')
                    c = '\t';
            }
            if (o + 1 >= cap)
                return false;
            buf[o++] = c;
        }
        if (q >= end)
            return false;
        buf[o] = '\0';
        return true;
    }
    return false;
}

int s3_parse_imds_json(const char *json, size_t len, s3_creds *out)
{
    memset(out, 0, sizeof *out);
    char code[64];
    if (json_str(json, len, "Code", code, sizeof code) && strcmp(code, "Success") != 0)
        return SK_ERR_IO;
    if (!json_str(json, len, "AccessKeyId", out->access_key, sizeof out->access_key) ||
        !json_str(json, len, "SecretAccessKey", out->secret_key, sizeof out->secret_key))
        return SK_ERR_PARSE;
    size_t tcap = len + 1;
    char *tok = malloc(tcap);
    if (!tok)
        return SK_ERR_NOMEM;
    if (json_str(json, len, "Token", tok, tcap) && *tok) {
        out->token = tok;
    } else {
        free(tok);
    }
    char exp[64];
    if (json_str(json, len, "Expiration", exp, sizeof exp)) {
        int64_t ms = s3_parse_iso8601(exp, strlen(exp));
        if (ms < 0) {
            s3_creds_clear(out);
            return SK_ERR_PARSE;
        }
        out->expires_ms = ms;
    }
    return 0;
}

struct membuf {
    char *p;
    size_t n, cap;
};

static size_t membuf_write(char *p, size_t sz, size_t nm, void *ud)
{
    struct membuf *m = ud;
    size_t n = sz * nm;
    if (m->n + n + 1 > m->cap)
        return 0; /* documents larger than we expect are refused */
    memcpy(m->p + m->n, p, n);
    m->n += n;
    m->p[m->n] = '\0';
    return n;
}

static int imds_call(const char *url, const char *method, const char *header, struct membuf *out,
                     char *why, size_t whylen)
{
    CURL *e = curl_easy_init();
    if (!e) {
        snprintf(why, whylen, "curl_easy_init failed");
        return SK_ERR_NOMEM;
    }
    struct curl_slist *h = NULL;
    if (header)
        h = curl_slist_append(h, header);
    out->n = 0;
    out->p[0] = '\0';
    curl_easy_setopt(e, CURLOPT_URL, url);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, 1000L);
    curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, 3000L);
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, membuf_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, out);
    curl_easy_setopt(e, CURLOPT_NOPROXY, "*");
    if (strcmp(method, "PUT") == 0) {
        curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "PUT");
        curl_easy_setopt(e, CURLOPT_POSTFIELDS, "");
        curl_easy_setopt(e, CURLOPT_POSTFIELDSIZE, 0L);
    }
    CURLcode rc = curl_easy_perform(e);
    long status = 0;
    curl_easy_getinfo(e, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(e);
    curl_slist_free_all(h);
    if (rc != CURLE_OK) {
        snprintf(why, whylen, "%s %s: %s", method, url, curl_easy_strerror(rc));
        return SK_ERR_IO;
    }
    if (status != 200) {
        snprintf(why, whylen, "%s %s: HTTP %ld", method, url, status);
        return SK_ERR_IO;
    }
    return 0;
}

int s3_imds_fetch(const char *base, s3_creds *out, char *why, size_t whylen)
{
    char url[512], hdr[600];
    struct membuf m = {.cap = 64 * 1024};
    m.p = malloc(m.cap);
    if (!m.p)
        return SK_ERR_NOMEM;
    int rc;
    snprintf(url, sizeof url, "%s/latest/api/token", base);
    rc = imds_call(url, "PUT", "X-aws-ec2-metadata-token-ttl-seconds: 21600", &m, why, whylen);
    if (rc != 0)
        goto out;
    char token[512];
    snprintf(token, sizeof token, "%.*s", (int)strcspn(m.p, "\r\n"), m.p);
    snprintf(hdr, sizeof hdr, "X-aws-ec2-metadata-token: %s", token);
    snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/", base);
    rc = imds_call(url, "GET", hdr, &m, why, whylen);
    if (rc != 0)
        goto out;
    char role[256];
    snprintf(role, sizeof role, "%.*s", (int)strcspn(m.p, "\r\n"), m.p);
    if (!*role) {
        snprintf(why, whylen, "instance metadata lists no IAM role");
        rc = SK_ERR_IO;
        goto out;
    }
    int n = snprintf(url, sizeof url, "%s/latest/meta-data/iam/security-credentials/", base);
    if (n < 0 || !s3_uri_encode(url, sizeof url, role, false)) {
        snprintf(why, whylen, "IAM role name too long");
        rc = SK_ERR_IO;
        goto out;
    }
    rc = imds_call(url, "GET", hdr, &m, why, whylen);
    if (rc != 0)
        goto out;
    rc = s3_parse_imds_json(m.p, m.n, out);
    if (rc != 0)
        snprintf(why, whylen, "instance metadata credentials of role %s: unreadable document", role);
out:
    free(m.p);
    return rc;
}
