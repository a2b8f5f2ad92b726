/*
 * s3_util: the small text formats around S3 requests, for objstore_s3.c.
 *
 * RFC 3986 encoding as SigV4 wants it, a tolerant scanner for the few
 * elements of S3's XML answers that Skiff reads, ISO 8601 / RFC 1123 times,
 * and EC2 instance-metadata (IMDSv2) credentials. Pure functions except
 * s3_imds_fetch, which blocks (it runs on the S3 thread, never the loop).
 * Any thread; nothing is kept between calls.
 */
#ifndef S3_UTIL_H
#define S3_UTIL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Appends src percent-encoded (all but A-Z a-z 0-9 - . _ ~, and '/' when
 * keep_slash) to dst of capacity cap; false when it does not fit. */
bool s3_uri_encode(char *dst, size_t cap, const char *src, bool keep_slash);

/* Finds the first element <tag>...</tag> (or <tag/>) in [p, end): returns a
 * pointer to its text and sets *len, and *after to the end of the element;
 * NULL when absent. Attributes on the opening tag are allowed. */
const char *s3_xml_find(const char *p, const char *end, const char *tag, size_t *len,
                        const char **after);
/* A malloc'd copy of XML text with the five entities and &#N; / &#xN; decoded. */
char *s3_xml_text(const char *p, size_t len);
/* Decoded text of <tag> copied into buf (cut to fit); false when absent. */
bool s3_xml_get(const char *p, const char *end, const char *tag, char *buf, size_t cap);

/* "2026-11-30T00:45:34.000Z" (fraction optional) to Unix ms; -1 if malformed. */
int64_t s3_parse_iso8601(const char *s, size_t len);

typedef struct s3_creds {
    char access_key[128];
    char secret_key[128];
    char *token;         /* malloc'd, or NULL */
    int64_t expires_ms;  /* Unix ms, 0 = never */
} s3_creds;

void s3_creds_clear(s3_creds *c);

/* Reads {"AccessKeyId", "SecretAccessKey", "Token", "Expiration"} from the
 * JSON document IMDS serves for a role. */
int s3_parse_imds_json(const char *json, size_t len, s3_creds *out);

/* IMDSv2: PUT base/latest/api/token, GET the role name, then its
 * credentials. Blocks up to ~3 s per step. Returns 0 or SK_ERR_IO with a
 * reason in why. */
int s3_imds_fetch(const char *base, s3_creds *out, char *why, size_t whylen);

#endif
