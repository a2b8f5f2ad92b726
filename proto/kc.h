/*
 * kc: the Kafka wire codec, driven by message descriptors.
 *
 * Every Kafka message is declared once, as a kc_struct descriptor generated
 * from Apache Kafka's JSON message specs by tools/kgen.py into kmsg.h/kmsg.c.
 * One decoder and one encoder walk those descriptors for every API and every
 * version, so flexible versions, compact types and tagged fields (with unknown
 * tags skipped) are handled in exactly one place.
 *
 * Memory model:
 *  - Decoded strings, bytes and records are slices that point into the request
 *    frame: the frame must outlive the decoded struct.
 *  - Arrays and nullable structs are allocated from the caller's sk_arena
 *    (per request).
 *  - Encoding reads the struct and writes into a caller-provided buffer of
 *    exactly kc_size() bytes; kc_encode_gather leaves out the record pieces
 *    that name a counted owner (sk_ref) and lists where they belong.
 *
 * Thread: any, no global state. Errors: kc_decode returns 0 or SK_ERR_PARSE
 * (bounds, negative or absurd lengths, bad varints) or SK_ERR_NOMEM (arena
 * cap); on error r->err_at holds the byte offset of the failure.
 */
#ifndef KC_H
#define KC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sk_arena.h"
#include "sk_ref.h"

/* A string field: len -1 means null. Not NUL-terminated. */
typedef struct kc_str {
    const char *p;
    int32_t len;
} kc_str;

/* A bytes field: len -1 means null. */
typedef struct kc_bytes {
    const uint8_t *p;
    int32_t len;
} kc_bytes;

/* A records field. Decoded: p/len (len -1 = null), nseg = 0.
 * To encode a value made of several pieces without copying them (a Fetch
 * response gathering batches), set nseg > 0 and segs; len must then be the sum
 * of the pieces' lengths and p is ignored. refs (NULL, or nseg entries, each
 * NULL or not) names the counted owner of each piece: kc_encode_gather leaves
 * such pieces out of the buffer and lists them instead. */
typedef struct kc_records {
    const uint8_t *p;
    int32_t len;
    int32_t nseg;
    const kc_bytes *segs;
    sk_ref *const *refs;
} kc_records;

/* A piece kc_encode_gather left out: `len` bytes at `p`, owned by `ref`,
 * belonging at byte `at` of the encoded buffer (before the bytes written
 * from there on). */
typedef struct kc_piece {
    size_t at;
    const uint8_t *p;
    size_t len;
    sk_ref *ref;
} kc_piece;

/* Where kc_encode_gather lists pieces: v has room for cap; pieces past it
 * are copied into the buffer as kc_encode would. */
typedef struct kc_gather {
    kc_piece *v;
    int n, cap;
} kc_gather;

typedef struct kc_uuid {
    uint8_t b[16];
} kc_uuid;

/* Every array field is generated as `struct { int32_t n; T *v; } name;`,
 * n = -1 for null. This is its untyped twin, with the same layout. */
typedef struct kc_array {
    int32_t n;
    void *v;
} kc_array;

typedef enum kc_type {
    KC_BOOL,
    KC_INT8,
    KC_INT16,
    KC_UINT16,
    KC_INT32,
    KC_UINT32,
    KC_INT64,
    KC_FLOAT64,
    KC_UUID,
    KC_STRING,
    KC_BYTES,
    KC_RECORDS,
    KC_STRUCT, /* a nested struct stored inline; when the field is nullable,
                  a pointer to it (NULL = null, a presence byte on the wire) */
    KC_ARRAY,  /* elem_type says of what; KC_STRUCT elements use `sub` */
} kc_type;

#define KC_VMAX 0x7fff /* "N+" in a version range */

typedef struct kc_struct kc_struct;

typedef struct kc_field {
    const char *name;        /* JSON name, for logs */
    uint8_t type;            /* kc_type */
    uint8_t elem_type;       /* element kc_type for KC_ARRAY */
    int16_t ver_min, ver_max;   /* versions in which the field exists */
    int16_t null_min, null_max; /* nullable versions; null_min < 0: never */
    int16_t tag_min, tag_max;   /* tagged versions; tag_min < 0: never */
    int32_t tag;                /* tag number when tagged */
    uint32_t offset;            /* offsetof() in the C struct */
    uint32_t elem_size;         /* sizeof one array element */
    const kc_struct *sub;       /* for KC_STRUCT and arrays of structs */
    int64_t def_int;            /* numeric/bool default; -1 for an array or
                                   struct field whose default is null */
    double def_float;
    const char *def_str;        /* string/bytes/records default; NULL = null,
                                   "" = empty */
} kc_field;

struct kc_struct {
    const char *name;
    uint32_t size; /* sizeof the C struct */
    uint16_t nfields;
    const kc_field *fields;
};

/* One Kafka API as the specs describe it (not what Skiff advertises: the
 * broker's dispatch table decides that). */
typedef struct kc_api {
    int16_t key;
    const char *name;
    int16_t min_ver, max_ver; /* validVersions, unstable versions excluded */
    int16_t flex_min;         /* first flexible version, KC_VMAX if none */
    const kc_struct *req, *resp;
} kc_api;

/* Bounds-checked reader over one frame. */
typedef struct kc_reader {
    const uint8_t *start, *p, *end;
    size_t err_at; /* offset from start of the first failure */
} kc_reader;

static inline void kc_reader_init(kc_reader *r, const void *p, size_t len)
{
    r->start = r->p = (const uint8_t *)p;
    r->end = r->p + len;
    r->err_at = 0;
}

/* Primitive readers: return 0 or SK_ERR_PARSE (and set r->err_at). */
int kc_read_i8(kc_reader *r, int8_t *v);
int kc_read_i16(kc_reader *r, int16_t *v);
int kc_read_i32(kc_reader *r, int32_t *v);
int kc_read_i64(kc_reader *r, int64_t *v);
int kc_read_uvarint(kc_reader *r, uint32_t *v);
int kc_read_varint(kc_reader *r, int32_t *v);   /* zigzag */
int kc_read_varlong(kc_reader *r, int64_t *v);  /* zigzag */
int kc_read_str16(kc_reader *r, kc_str *s);     /* int16 length, -1 = null */
int kc_skip_tags(kc_reader *r);                 /* a whole tagged-field section */

/* Primitive writers into a raw buffer; each returns the pointer past what it
 * wrote. The caller sized the buffer (kc_size or a bound). */
uint8_t *kc_put_i16(uint8_t *p, int16_t v);
uint8_t *kc_put_i32(uint8_t *p, int32_t v);
uint8_t *kc_put_i64(uint8_t *p, int64_t v);
uint8_t *kc_put_uvarint(uint8_t *p, uint32_t v);
uint8_t *kc_put_varint(uint8_t *p, int32_t v);
uint8_t *kc_put_varlong(uint8_t *p, int64_t v);
size_t kc_uvarint_size(uint32_t v);
size_t kc_varint_size(int32_t v);
size_t kc_varlong_size(int64_t v);

/* Sets every field of *out to its default (for all versions): numbers to the
 * JSON default or 0, strings to their default ("" unless "null"), arrays to
 * empty, nested structs recursively. Use it before filling a response. */
void kc_init(const kc_struct *s, void *out);

/* Allocates n elements of struct type `elem` from the arena, each initialised
 * with kc_init. Returns NULL on arena exhaustion. */
void *kc_new_array(sk_arena *a, const kc_struct *elem, int32_t n);

/* Decodes one message body of version `ver` into *out (kc_init'ed first).
 * `flexible` selects compact encodings and tagged-field sections. On success
 * r->p is just past the body; whether bytes may follow is the caller's call. */
int kc_decode(const kc_struct *s, int16_t ver, bool flexible, kc_reader *r, void *out,
              sk_arena *a);

/* Exact encoded size of *in at version `ver`, and the encoder itself. Fields
 * absent from `ver` are skipped; tagged fields equal to their default are
 * omitted (a struct-typed tagged field when all its fields are defaults). A
 * null string, bytes or array in a version where the field is not nullable is
 * written as empty. */
size_t kc_size(const kc_struct *s, int16_t ver, bool flexible, const void *in);
uint8_t *kc_encode(const kc_struct *s, int16_t ver, bool flexible, const void *in,
                   uint8_t *out);
/* kc_encode, except that record pieces with an owner (kc_records.refs) are
 * listed in g instead of copied: the buffer then receives kc_size() minus
 * their lengths. Takes no hold; the caller holds what it keeps. */
uint8_t *kc_encode_gather(const kc_struct *s, int16_t ver, bool flexible, const void *in,
                          uint8_t *out, kc_gather *g);
/* How many record pieces of *in have an owner (room for kc_encode_gather). */
int kc_count_refs(const kc_struct *s, int16_t ver, bool flexible, const void *in);

/* Request header v1/v2 (v2 when the API version is flexible). ClientId is
 * always an int16-length nullable string, even in v2. */
typedef struct kc_req_header {
    int16_t api_key;
    int16_t api_version;
    int32_t correlation_id;
    kc_str client_id;
} kc_req_header;

int kc_read_req_header(kc_reader *r, kc_req_header *h, bool flexible);
/* Size of an encoded request header, and the writer (used by test clients
 * and the fuzz corpus builder). */
size_t kc_req_header_size(const kc_req_header *h, bool flexible);
uint8_t *kc_put_req_header(uint8_t *p, const kc_req_header *h, bool flexible);

/* Response header v0 (correlation id) or v1 (plus an empty tag section). */
static inline size_t kc_resp_header_size(bool flexible)
{
    return flexible ? 5 : 4;
}
uint8_t *kc_put_resp_header(uint8_t *p, int32_t correlation_id, bool flexible);

/* The table of APIs in the generated code, indexed by key; NULL holes. */
const kc_api *kc_api_get(int16_t key);
int kc_api_max_key(void);

#endif
