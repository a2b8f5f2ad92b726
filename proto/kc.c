/*
 * kc: one decoder, one size function and one encoder, all walking the
 * kc_struct descriptors of kmsg.c. See kc.h for the contract.
 *
 * Wire rules applied here, once for every message:
 *  - a field is on the wire in version v iff v is in its versions and it is
 *    not tagged in v; tagged fields live in the struct's tagged-field section,
 *    which exists only in flexible versions;
 *  - flexible versions use uvarint(len+1) for strings, bytes, records and
 *    arrays (0 = null); others use int16 (strings) or int32 lengths, -1 = null;
 *  - a nullable struct is a presence byte (-1 null, 1 present) then the struct.
 *
 * Decoding never trusts a length: every read is bounds-checked, and an array
 * count is checked against the bytes left (at the smallest encoded size of
 * one element) before anything is allocated.
 *
 * Encoding writes null only where the version allows it: a null string,
 * bytes or array in a version where the field is not nullable goes out
 * empty, so a handler's mistake cannot produce a frame clients reject.
 */
#include "kc.h"

#include <string.h>

#include "sk_err.h"

typedef struct kc_ctx {
    int16_t ver;
    bool flex;
    sk_arena *arena; /* decoding only */
    kc_gather *g;    /* kc_encode_gather: where owned pieces go */
    uint8_t *base;   /* ... and the start of its buffer */
    int *nrefs;      /* kc_count_refs */
} kc_ctx;

/* ------------------------------------------------------------ versions */

static inline bool in_range(int16_t v, int16_t lo, int16_t hi)
{
    return lo >= 0 && v >= lo && v <= hi;
}

static inline bool f_present(const kc_field *f, int16_t v)
{
    return in_range(v, f->ver_min, f->ver_max);
}

static inline bool f_nullable(const kc_field *f, int16_t v)
{
    return in_range(v, f->null_min, f->null_max);
}

static inline bool f_tagged(const kc_field *f, int16_t v)
{
    return in_range(v, f->tag_min, f->tag_max);
}

/* Nullable struct fields are pointers in the C struct. */
static inline bool f_is_ptr(const kc_field *f)
{
    return f->type == KC_STRUCT && f->null_min >= 0;
}

/* ------------------------------------------------- big-endian helpers */

static inline uint16_t ld16(const uint8_t *p)
{
    return (uint16_t)((unsigned)p[0] << 8 | p[1]);
}

static inline uint32_t ld32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static inline uint64_t ld64(const uint8_t *p)
{
    return (uint64_t)ld32(p) << 32 | ld32(p + 4);
}

static inline uint8_t *st16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
    return p + 2;
}

static inline uint8_t *st32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
    return p + 4;
}

static inline uint8_t *st64(uint8_t *p, uint64_t v)
{
    st32(p, (uint32_t)(v >> 32));
    return st32(p + 4, (uint32_t)v);
}

/* Two's complement conversions without implementation-defined casts. */
static inline int16_t u2i16(uint16_t u)
{
    return u <= INT16_MAX ? (int16_t)u : (int16_t)((int32_t)u - 65536);
}

static inline int32_t u2i32(uint32_t u)
{
    return u <= INT32_MAX ? (int32_t)u : (int32_t)(u - 2147483648u) - INT32_MAX - 1;
}

static inline int64_t u2i64(uint64_t u)
{
    return u <= INT64_MAX ? (int64_t)u
                          : (int64_t)(u - 9223372036854775808u) - INT64_MAX - 1;
}

/* ------------------------------------------------------------- reader */

static inline size_t left(const kc_reader *r)
{
    return (size_t)(r->end - r->p);
}

static int perr(kc_reader *r, const uint8_t *at)
{
    r->err_at = (size_t)(at - r->start);
    return SK_ERR_PARSE;
}

static int nomem(kc_reader *r)
{
    r->err_at = (size_t)(r->p - r->start);
    return SK_ERR_NOMEM;
}

int kc_read_i8(kc_reader *r, int8_t *v)
{
    if (left(r) < 1)
        return perr(r, r->p);
    uint8_t b = *r->p++;
    *v = (int8_t)(b > 127 ? (int)b - 256 : (int)b);
    return 0;
}

int kc_read_i16(kc_reader *r, int16_t *v)
{
    if (left(r) < 2)
        return perr(r, r->p);
    *v = u2i16(ld16(r->p));
    r->p += 2;
    return 0;
}

int kc_read_i32(kc_reader *r, int32_t *v)
{
    if (left(r) < 4)
        return perr(r, r->p);
    *v = u2i32(ld32(r->p));
    r->p += 4;
    return 0;
}

int kc_read_i64(kc_reader *r, int64_t *v)
{
    if (left(r) < 8)
        return perr(r, r->p);
    *v = u2i64(ld64(r->p));
    r->p += 8;
    return 0;
}

/* Unsigned LEB128 of at most `bits` bits: at most ceil(bits/7) bytes, and
 * the last byte may not carry bits beyond `bits` (they would be lost). */
static int read_uvar(kc_reader *r, unsigned bits, uint64_t *out)
{
    const uint8_t *at = r->p;
    unsigned maxb = (bits + 6) / 7;
    uint64_t x = 0;
    for (unsigned i = 0; i < maxb; i++) {
        if (r->p == r->end)
            return perr(r, at);
        uint8_t b = *r->p++;
        x |= (uint64_t)(b & 0x7f) << (7 * i);
        if (!(b & 0x80)) {
            if (i == maxb - 1 && (b >> (bits - 7 * i)) != 0)
                return perr(r, at);
            *out = x;
            return 0;
        }
    }
    return perr(r, at);
}

int kc_read_uvarint(kc_reader *r, uint32_t *v)
{
    uint64_t x;
    if (read_uvar(r, 32, &x))
        return SK_ERR_PARSE;
    *v = (uint32_t)x;
    return 0;
}

int kc_read_varint(kc_reader *r, int32_t *v)
{
    uint64_t x;
    if (read_uvar(r, 32, &x))
        return SK_ERR_PARSE;
    uint32_t u = (uint32_t)x;
    *v = u2i32((u >> 1) ^ (0u - (u & 1u)));
    return 0;
}

int kc_read_varlong(kc_reader *r, int64_t *v)
{
    uint64_t u;
    if (read_uvar(r, 64, &u))
        return SK_ERR_PARSE;
    *v = u2i64((u >> 1) ^ (0u - (u & 1u)));
    return 0;
}

int kc_read_str16(kc_reader *r, kc_str *s)
{
    const uint8_t *at = r->p;
    int16_t len;
    if (kc_read_i16(r, &len))
        return SK_ERR_PARSE;
    if (len < -1)
        return perr(r, at);
    if (len == -1) {
        s->p = NULL;
        s->len = -1;
        return 0;
    }
    if ((size_t)len > left(r))
        return perr(r, at);
    s->p = (const char *)r->p;
    s->len = len;
    r->p += len;
    return 0;
}

int kc_skip_tags(kc_reader *r)
{
    uint32_t n;
    if (kc_read_uvarint(r, &n))
        return SK_ERR_PARSE;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *at = r->p;
        uint32_t tag, size;
        if (kc_read_uvarint(r, &tag) || kc_read_uvarint(r, &size))
            return SK_ERR_PARSE;
        if (size > left(r))
            return perr(r, at);
        r->p += size;
    }
    return 0;
}

/* ------------------------------------------------------------- writers */

uint8_t *kc_put_i16(uint8_t *p, int16_t v)
{
    return st16(p, (uint16_t)v);
}

uint8_t *kc_put_i32(uint8_t *p, int32_t v)
{
    return st32(p, (uint32_t)v);
}

uint8_t *kc_put_i64(uint8_t *p, int64_t v)
{
    return st64(p, (uint64_t)v);
}

static uint8_t *put_uvar(uint8_t *p, uint64_t v)
{
    while (v >= 0x80) {
        *p++ = (uint8_t)(v | 0x80);
        v >>= 7;
    }
    *p++ = (uint8_t)v;
    return p;
}

static size_t uvar_size(uint64_t v)
{
    size_t n = 1;
    while (v >= 0x80) {
        v >>= 7;
        n++;
    }
    return n;
}

static inline uint32_t zz32(int32_t v)
{
    uint32_t u = (uint32_t)v;
    return (u << 1) ^ (0u - (u >> 31));
}

static inline uint64_t zz64(int64_t v)
{
    uint64_t u = (uint64_t)v;
    return (u << 1) ^ (0u - (u >> 63));
}

uint8_t *kc_put_uvarint(uint8_t *p, uint32_t v)
{
    return put_uvar(p, v);
}

uint8_t *kc_put_varint(uint8_t *p, int32_t v)
{
    return put_uvar(p, zz32(v));
}

uint8_t *kc_put_varlong(uint8_t *p, int64_t v)
{
    return put_uvar(p, zz64(v));
}

size_t kc_uvarint_size(uint32_t v)
{
    return uvar_size(v);
}

size_t kc_varint_size(int32_t v)
{
    return uvar_size(zz32(v));
}

size_t kc_varlong_size(int64_t v)
{
    return uvar_size(zz64(v));
}

/* ------------------------------------------------------------ defaults */

static void init_field(const kc_field *f, uint8_t *p)
{
    switch ((kc_type)f->type) {
    case KC_BOOL:
        *(bool *)p = f->def_int != 0;
        break;
    case KC_INT8:
        *(int8_t *)p = (int8_t)f->def_int;
        break;
    case KC_INT16:
        *(int16_t *)p = (int16_t)f->def_int;
        break;
    case KC_UINT16:
        *(uint16_t *)p = (uint16_t)f->def_int;
        break;
    case KC_INT32:
        *(int32_t *)p = (int32_t)f->def_int;
        break;
    case KC_UINT32:
        *(uint32_t *)p = (uint32_t)f->def_int;
        break;
    case KC_INT64:
        *(int64_t *)p = f->def_int;
        break;
    case KC_FLOAT64:
        *(double *)p = f->def_float;
        break;
    case KC_UUID:
        break;
    case KC_STRING: {
        kc_str *s = (kc_str *)p;
        s->p = f->def_str;
        s->len = f->def_str ? (int32_t)strlen(f->def_str) : -1;
        break;
    }
    case KC_BYTES:
        ((kc_bytes *)p)->len = f->def_str ? 0 : -1;
        break;
    case KC_RECORDS:
        ((kc_records *)p)->len = f->def_str ? 0 : -1;
        break;
    case KC_STRUCT:
        if (!f_is_ptr(f))
            kc_init(f->sub, p);
        break;
    case KC_ARRAY:
        ((kc_array *)p)->n = f->def_int == -1 ? -1 : 0;
        break;
    }
}

void kc_init(const kc_struct *s, void *out)
{
    memset(out, 0, s->size);
    for (uint16_t i = 0; i < s->nfields; i++)
        init_field(&s->fields[i], (uint8_t *)out + s->fields[i].offset);
}

void *kc_new_array(sk_arena *a, const kc_struct *elem, int32_t n)
{
    if (n < 0)
        return NULL;
    uint8_t *v = sk_arena_calloc(a, n ? (size_t)n : 1, elem->size);
    if (!v)
        return NULL;
    for (int32_t i = 0; i < n; i++)
        kc_init(elem, v + (size_t)i * elem->size);
    return v;
}

/* ------------------------------------------------------------- decoder */

static int dec_struct(const kc_struct *s, const kc_ctx *c, kc_reader *r, void *out);

/* A length or count: uvarint(n+1) when flexible, else int16/int32 (wide).
 * -1 is null; anything else negative is an error. */
static int read_len(kc_reader *r, bool flex, bool wide, int32_t *len)
{
    const uint8_t *at = r->p;
    if (flex) {
        uint32_t u;
        if (kc_read_uvarint(r, &u))
            return SK_ERR_PARSE;
        if (u == 0) {
            *len = -1;
            return 0;
        }
        if (u - 1u > (uint32_t)INT32_MAX)
            return perr(r, at);
        *len = (int32_t)(u - 1u);
        return 0;
    }
    int32_t n;
    if (wide) {
        if (kc_read_i32(r, &n))
            return SK_ERR_PARSE;
    } else {
        int16_t n16;
        if (kc_read_i16(r, &n16))
            return SK_ERR_PARSE;
        n = n16;
    }
    if (n < -1)
        return perr(r, at);
    *len = n;
    return 0;
}

/* A length-prefixed slice of the frame (strings, bytes, records). */
static int read_slice(kc_reader *r, bool flex, bool wide, bool nul, const uint8_t **p,
                      int32_t *len)
{
    const uint8_t *at = r->p;
    if (read_len(r, flex, wide, len))
        return SK_ERR_PARSE;
    if (*len < 0) {
        if (!nul)
            return perr(r, at);
        *p = NULL;
        return 0;
    }
    if ((size_t)*len > left(r))
        return perr(r, at);
    *p = r->p;
    r->p += *len;
    return 0;
}

static int dec_scalar(uint8_t type, bool nul, const kc_ctx *c, kc_reader *r, uint8_t *p)
{
    switch ((kc_type)type) {
    case KC_BOOL: {
        int8_t b;
        if (kc_read_i8(r, &b))
            return SK_ERR_PARSE;
        *(bool *)p = b != 0;
        return 0;
    }
    case KC_INT8:
        return kc_read_i8(r, (int8_t *)p);
    case KC_INT16:
        return kc_read_i16(r, (int16_t *)p);
    case KC_UINT16:
        if (left(r) < 2)
            return perr(r, r->p);
        *(uint16_t *)p = ld16(r->p);
        r->p += 2;
        return 0;
    case KC_INT32:
        return kc_read_i32(r, (int32_t *)p);
    case KC_UINT32:
        if (left(r) < 4)
            return perr(r, r->p);
        *(uint32_t *)p = ld32(r->p);
        r->p += 4;
        return 0;
    case KC_INT64:
        return kc_read_i64(r, (int64_t *)p);
    case KC_FLOAT64: {
        if (left(r) < 8)
            return perr(r, r->p);
        uint64_t u = ld64(r->p);
        memcpy(p, &u, sizeof u);
        r->p += 8;
        return 0;
    }
    case KC_UUID:
        if (left(r) < 16)
            return perr(r, r->p);
        memcpy(p, r->p, 16);
        r->p += 16;
        return 0;
    case KC_STRING: {
        kc_str *s = (kc_str *)p;
        const uint8_t *q;
        if (read_slice(r, c->flex, false, nul, &q, &s->len))
            return SK_ERR_PARSE;
        s->p = (const char *)q;
        return 0;
    }
    case KC_BYTES: {
        kc_bytes *b = (kc_bytes *)p;
        return read_slice(r, c->flex, true, nul, &b->p, &b->len);
    }
    case KC_RECORDS: {
        kc_records *rec = (kc_records *)p;
        rec->nseg = 0;
        rec->segs = NULL;
        return read_slice(r, c->flex, true, nul, &rec->p, &rec->len);
    }
    case KC_STRUCT:
    case KC_ARRAY:
        break;
    }
    return perr(r, r->p);
}

/* Smallest number of bytes one value can take on the wire. */
static size_t struct_min(const kc_struct *s, const kc_ctx *c);

static size_t type_min(uint8_t type, const kc_field *f, const kc_ctx *c)
{
    switch ((kc_type)type) {
    case KC_BOOL:
    case KC_INT8:
        return 1;
    case KC_INT16:
    case KC_UINT16:
        return 2;
    case KC_INT32:
    case KC_UINT32:
        return 4;
    case KC_INT64:
    case KC_FLOAT64:
        return 8;
    case KC_UUID:
        return 16;
    case KC_STRING:
        return c->flex ? 1 : 2;
    case KC_BYTES:
    case KC_RECORDS:
    case KC_ARRAY:
        return c->flex ? 1 : 4;
    case KC_STRUCT:
        return f_is_ptr(f) ? 1 : struct_min(f->sub, c);
    }
    return 1;
}

static size_t struct_min(const kc_struct *s, const kc_ctx *c)
{
    size_t n = c->flex ? 1 : 0;
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (f_present(f, c->ver) && !f_tagged(f, c->ver))
            n += type_min(f->type, f, c);
    }
    return n;
}

static int dec_array(const kc_field *f, bool nul, const kc_ctx *c, kc_reader *r,
                     kc_array *arr)
{
    const uint8_t *at = r->p;
    int32_t n;
    if (read_len(r, c->flex, true, &n))
        return SK_ERR_PARSE;
    if (n < 0) {
        if (!nul)
            return perr(r, at);
        arr->n = -1;
        arr->v = NULL;
        return 0;
    }
    size_t emin;
    if (f->elem_type == KC_STRUCT)
        emin = struct_min(f->sub, c);
    else
        emin = type_min(f->elem_type, f, c);
    if (emin == 0)
        emin = 1;
    if ((size_t)n > left(r) / emin)
        return perr(r, at);
    arr->n = n;
    arr->v = NULL;
    if (n == 0)
        return 0;
    if (!c->arena)
        return nomem(r);
    uint8_t *v = sk_arena_calloc(c->arena, (size_t)n, f->elem_size);
    if (!v)
        return nomem(r);
    for (int32_t i = 0; i < n; i++) {
        uint8_t *e = v + (size_t)i * f->elem_size;
        int rc = f->elem_type == KC_STRUCT ? dec_struct(f->sub, c, r, e)
                                           : dec_scalar(f->elem_type, false, c, r, e);
        if (rc)
            return rc;
    }
    arr->v = v;
    return 0;
}

static int dec_field(const kc_field *f, const kc_ctx *c, kc_reader *r, uint8_t *base)
{
    uint8_t *p = base + f->offset;
    bool nul = f_nullable(f, c->ver);
    if (f->type == KC_ARRAY)
        return dec_array(f, nul, c, r, (kc_array *)p);
    if (f->type != KC_STRUCT)
        return dec_scalar(f->type, nul, c, r, p);
    if (!f_is_ptr(f))
        return dec_struct(f->sub, c, r, p);
    int8_t present;
    if (kc_read_i8(r, &present))
        return SK_ERR_PARSE;
    void *q = NULL;
    if (present >= 0) {
        if (!c->arena)
            return nomem(r);
        q = sk_arena_alloc(c->arena, f->sub->size);
        if (!q)
            return nomem(r);
        int rc = dec_struct(f->sub, c, r, q);
        if (rc)
            return rc;
    }
    memcpy(p, &q, sizeof q);
    return 0;
}

static const kc_field *find_tag(const kc_struct *s, int16_t ver, uint32_t tag)
{
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (f_present(f, ver) && f_tagged(f, ver) && (uint32_t)f->tag == tag)
            return f;
    }
    return NULL;
}

static int dec_tags(const kc_struct *s, const kc_ctx *c, kc_reader *r, uint8_t *out)
{
    uint32_t n;
    if (kc_read_uvarint(r, &n))
        return SK_ERR_PARSE;
    for (uint32_t i = 0; i < n; i++) {
        const uint8_t *at = r->p;
        uint32_t tag, size;
        if (kc_read_uvarint(r, &tag) || kc_read_uvarint(r, &size))
            return SK_ERR_PARSE;
        if (size > left(r))
            return perr(r, at);
        const kc_field *f = find_tag(s, c->ver, tag);
        if (f) {
            /* The value must fill its declared size exactly. */
            kc_reader sub = {.start = r->start, .p = r->p, .end = r->p + size, .err_at = 0};
            int rc = dec_field(f, c, &sub, out);
            if (rc) {
                r->err_at = sub.err_at;
                return rc;
            }
            if (sub.p != sub.end)
                return perr(r, sub.p);
        }
        r->p += size;
    }
    return 0;
}

static int dec_struct(const kc_struct *s, const kc_ctx *c, kc_reader *r, void *out)
{
    kc_init(s, out);
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (!f_present(f, c->ver) || f_tagged(f, c->ver))
            continue;
        int rc = dec_field(f, c, r, out);
        if (rc)
            return rc;
    }
    return c->flex ? dec_tags(s, c, r, out) : 0;
}

int kc_decode(const kc_struct *s, int16_t ver, bool flexible, kc_reader *r, void *out,
              sk_arena *a)
{
    kc_ctx c = {.ver = ver, .flex = flexible, .arena = a};
    return dec_struct(s, &c, r, out);
}

/* ---------------------------------------------------- size and encoder */

/* Length to put on the wire for a value of length len (-1 = null). */
static inline int32_t wire_len(int32_t len, bool nul)
{
    return len >= 0 ? len : nul ? -1 : 0;
}

static size_t len_size(bool flex, bool wide, int32_t len)
{
    if (flex)
        return uvar_size((uint32_t)len + 1u);
    return wide ? 4 : 2;
}

static uint8_t *put_len(uint8_t *o, bool flex, bool wide, int32_t len)
{
    if (flex)
        return put_uvar(o, (uint32_t)len + 1u);
    return wide ? st32(o, (uint32_t)len) : st16(o, (uint16_t)len);
}

static int32_t records_len(const kc_records *rec, bool nul)
{
    if (rec->nseg <= 0)
        return wire_len(rec->len, nul);
    int64_t sum = 0;
    for (int32_t i = 0; i < rec->nseg; i++)
        sum += rec->segs[i].len > 0 ? rec->segs[i].len : 0;
    return sum > INT32_MAX ? INT32_MAX : (int32_t)sum;
}

static size_t sz_struct(const kc_struct *s, const kc_ctx *c, const void *in);
static uint8_t *enc_struct(const kc_struct *s, const kc_ctx *c, const void *in,
                           uint8_t *o);

static size_t sz_scalar(uint8_t type, bool nul, const kc_ctx *c, const uint8_t *p)
{
    switch ((kc_type)type) {
    case KC_BOOL:
    case KC_INT8:
        return 1;
    case KC_INT16:
    case KC_UINT16:
        return 2;
    case KC_INT32:
    case KC_UINT32:
        return 4;
    case KC_INT64:
    case KC_FLOAT64:
        return 8;
    case KC_UUID:
        return 16;
    case KC_STRING: {
        int32_t l = wire_len(((const kc_str *)p)->len, nul);
        return len_size(c->flex, false, l) + (l > 0 ? (size_t)l : 0);
    }
    case KC_BYTES: {
        int32_t l = wire_len(((const kc_bytes *)p)->len, nul);
        return len_size(c->flex, true, l) + (l > 0 ? (size_t)l : 0);
    }
    case KC_RECORDS: {
        const kc_records *rec = (const kc_records *)p;
        int32_t l = records_len(rec, nul);
        if (c->nrefs && rec->refs)
            for (int32_t i = 0; i < rec->nseg; i++)
                *c->nrefs += rec->refs[i] != NULL;
        return len_size(c->flex, true, l) + (l > 0 ? (size_t)l : 0);
    }
    case KC_STRUCT:
    case KC_ARRAY:
        break;
    }
    return 0;
}

/* Lists piece i of rec in c's gather instead of copying it, if it has an
 * owner and there is room. */
static bool gather(const kc_ctx *c, const kc_records *rec, int32_t i, int32_t len,
                   const uint8_t *o)
{
    kc_gather *g = c->g;
    if (!g || !rec->refs || !rec->refs[i] || g->n >= g->cap)
        return false;
    g->v[g->n++] = (kc_piece){(size_t)(o - c->base), rec->segs[i].p, (size_t)len, rec->refs[i]};
    return true;
}

static uint8_t *enc_scalar(uint8_t type, bool nul, const kc_ctx *c, const uint8_t *p,
                           uint8_t *o)
{
    switch ((kc_type)type) {
    case KC_BOOL:
        *o = *(const bool *)p ? 1 : 0;
        return o + 1;
    case KC_INT8:
        *o = (uint8_t)*(const int8_t *)p;
        return o + 1;
    case KC_INT16:
        return st16(o, (uint16_t)*(const int16_t *)p);
    case KC_UINT16:
        return st16(o, *(const uint16_t *)p);
    case KC_INT32:
        return st32(o, (uint32_t)*(const int32_t *)p);
    case KC_UINT32:
        return st32(o, *(const uint32_t *)p);
    case KC_INT64:
        return st64(o, (uint64_t)*(const int64_t *)p);
    case KC_FLOAT64: {
        uint64_t u;
        memcpy(&u, p, sizeof u);
        return st64(o, u);
    }
    case KC_UUID:
        memcpy(o, p, 16);
        return o + 16;
    case KC_STRING: {
        const kc_str *s = (const kc_str *)p;
        int32_t l = wire_len(s->len, nul);
        o = put_len(o, c->flex, false, l);
        if (l > 0) {
            memcpy(o, s->p, (size_t)l);
            o += l;
        }
        return o;
    }
    case KC_BYTES: {
        const kc_bytes *b = (const kc_bytes *)p;
        int32_t l = wire_len(b->len, nul);
        o = put_len(o, c->flex, true, l);
        if (l > 0) {
            memcpy(o, b->p, (size_t)l);
            o += l;
        }
        return o;
    }
    case KC_RECORDS: {
        const kc_records *rec = (const kc_records *)p;
        int32_t l = records_len(rec, nul);
        o = put_len(o, c->flex, true, l);
        if (rec->nseg > 0) {
            int32_t done = 0;
            for (int32_t i = 0; i < rec->nseg && done < l; i++) {
                int32_t sl = rec->segs[i].len;
                if (sl <= 0)
                    continue;
                if (sl > l - done)
                    sl = l - done;
                done += sl;
                if (gather(c, rec, i, sl, o))
                    continue;
                memcpy(o, rec->segs[i].p, (size_t)sl);
                o += sl;
            }
        } else if (l > 0) {
            memcpy(o, rec->p, (size_t)l);
            o += l;
        }
        return o;
    }
    case KC_STRUCT:
    case KC_ARRAY:
        break;
    }
    return o;
}

static size_t sz_field(const kc_field *f, const kc_ctx *c, const uint8_t *base)
{
    const uint8_t *p = base + f->offset;
    bool nul = f_nullable(f, c->ver);
    if (f->type == KC_ARRAY) {
        const kc_array *arr = (const kc_array *)p;
        int32_t n = wire_len(arr->n, nul);
        size_t sz = len_size(c->flex, true, n);
        const uint8_t *v = (const uint8_t *)arr->v;
        for (int32_t i = 0; i < n; i++) {
            const uint8_t *e = v + (size_t)i * f->elem_size;
            sz += f->elem_type == KC_STRUCT ? sz_struct(f->sub, c, e)
                                            : sz_scalar(f->elem_type, false, c, e);
        }
        return sz;
    }
    if (f->type != KC_STRUCT)
        return sz_scalar(f->type, nul, c, p);
    if (!f_is_ptr(f))
        return sz_struct(f->sub, c, p);
    const void *q;
    memcpy(&q, p, sizeof q);
    return 1 + (q ? sz_struct(f->sub, c, q) : 0);
}

static uint8_t *enc_field(const kc_field *f, const kc_ctx *c, const uint8_t *base,
                          uint8_t *o)
{
    const uint8_t *p = base + f->offset;
    bool nul = f_nullable(f, c->ver);
    if (f->type == KC_ARRAY) {
        const kc_array *arr = (const kc_array *)p;
        int32_t n = wire_len(arr->n, nul);
        o = put_len(o, c->flex, true, n);
        const uint8_t *v = (const uint8_t *)arr->v;
        for (int32_t i = 0; i < n; i++) {
            const uint8_t *e = v + (size_t)i * f->elem_size;
            o = f->elem_type == KC_STRUCT ? enc_struct(f->sub, c, e, o)
                                          : enc_scalar(f->elem_type, false, c, e, o);
        }
        return o;
    }
    if (f->type != KC_STRUCT)
        return enc_scalar(f->type, nul, c, p, o);
    if (!f_is_ptr(f))
        return enc_struct(f->sub, c, p, o);
    const void *q;
    memcpy(&q, p, sizeof q);
    if (!q) {
        *o = 0xff;
        return o + 1;
    }
    *o++ = 1;
    return enc_struct(f->sub, c, q, o);
}

static bool struct_is_default(const kc_struct *s, const kc_ctx *c, const uint8_t *in);

/* Whether a (tagged) field holds its default, so that it may be left out:
 * decoding its absence yields the same value. */
static bool is_default(const kc_field *f, const kc_ctx *c, const uint8_t *base)
{
    const uint8_t *p = base + f->offset;
    bool nul = f_nullable(f, c->ver);
    switch ((kc_type)f->type) {
    case KC_BOOL:
        return *(const bool *)p == (f->def_int != 0);
    case KC_INT8:
        return *(const int8_t *)p == (int8_t)f->def_int;
    case KC_INT16:
        return *(const int16_t *)p == (int16_t)f->def_int;
    case KC_UINT16:
        return *(const uint16_t *)p == (uint16_t)f->def_int;
    case KC_INT32:
        return *(const int32_t *)p == (int32_t)f->def_int;
    case KC_UINT32:
        return *(const uint32_t *)p == (uint32_t)f->def_int;
    case KC_INT64:
        return *(const int64_t *)p == f->def_int;
    case KC_FLOAT64: {
        double d;
        memcpy(&d, p, sizeof d);
        return memcmp(&d, &f->def_float, sizeof d) == 0;
    }
    case KC_UUID: {
        static const uint8_t zero[16];
        return memcmp(p, zero, 16) == 0;
    }
    case KC_STRING: {
        const kc_str *s = (const kc_str *)p;
        int32_t l = wire_len(s->len, nul);
        if (!f->def_str)
            return l < 0;
        return l >= 0 && (size_t)l == strlen(f->def_str) &&
               (l == 0 || memcmp(s->p, f->def_str, (size_t)l) == 0);
    }
    case KC_BYTES: {
        int32_t l = wire_len(((const kc_bytes *)p)->len, nul);
        return f->def_str ? l == 0 : l < 0;
    }
    case KC_RECORDS: {
        int32_t l = records_len((const kc_records *)p, nul);
        return f->def_str ? l == 0 : l < 0;
    }
    case KC_ARRAY: {
        int32_t n = wire_len(((const kc_array *)p)->n, nul);
        return f->def_int == -1 ? n < 0 : n == 0;
    }
    case KC_STRUCT:
        if (f_is_ptr(f)) {
            const void *q;
            memcpy(&q, p, sizeof q);
            return q == NULL;
        }
        return struct_is_default(f->sub, c, p);
    }
    return false;
}

static bool struct_is_default(const kc_struct *s, const kc_ctx *c, const uint8_t *in)
{
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (f_present(f, c->ver) && !is_default(f, c, in))
            return false;
    }
    return true;
}

static size_t sz_struct(const kc_struct *s, const kc_ctx *c, const void *in)
{
    const uint8_t *b = in;
    size_t sz = 0;
    uint32_t ntags = 0;
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (!f_present(f, c->ver))
            continue;
        if (!f_tagged(f, c->ver)) {
            sz += sz_field(f, c, b);
        } else if (c->flex && !is_default(f, c, b)) {
            size_t fs = sz_field(f, c, b);
            sz += uvar_size((uint32_t)f->tag) + uvar_size(fs) + fs;
            ntags++;
        }
    }
    if (c->flex)
        sz += uvar_size(ntags);
    return sz;
}

static uint8_t *enc_struct(const kc_struct *s, const kc_ctx *c, const void *in, uint8_t *o)
{
    const uint8_t *b = in;
    uint32_t ntags = 0;
    for (uint16_t i = 0; i < s->nfields; i++) {
        const kc_field *f = &s->fields[i];
        if (!f_present(f, c->ver))
            continue;
        if (!f_tagged(f, c->ver))
            o = enc_field(f, c, b, o);
        else if (c->flex && !is_default(f, c, b))
            ntags++;
    }
    if (!c->flex)
        return o;
    /* kgen declares tagged fields in ascending tag order, as the wire wants. */
    o = put_uvar(o, ntags);
    for (uint16_t i = 0; i < s->nfields && ntags; i++) {
        const kc_field *f = &s->fields[i];
        if (!f_present(f, c->ver) || !f_tagged(f, c->ver) || is_default(f, c, b))
            continue;
        o = put_uvar(o, (uint32_t)f->tag);
        o = put_uvar(o, sz_field(f, c, b));
        o = enc_field(f, c, b, o);
    }
    return o;
}

size_t kc_size(const kc_struct *s, int16_t ver, bool flexible, const void *in)
{
    kc_ctx c = {.ver = ver, .flex = flexible, .arena = NULL};
    return sz_struct(s, &c, in);
}

uint8_t *kc_encode(const kc_struct *s, int16_t ver, bool flexible, const void *in,
                   uint8_t *out)
{
    kc_ctx c = {.ver = ver, .flex = flexible, .arena = NULL};
    return enc_struct(s, &c, in, out);
}

uint8_t *kc_encode_gather(const kc_struct *s, int16_t ver, bool flexible, const void *in,
                          uint8_t *out, kc_gather *g)
{
    kc_ctx c = {.ver = ver, .flex = flexible, .g = g, .base = out};
    return enc_struct(s, &c, in, out);
}

int kc_count_refs(const kc_struct *s, int16_t ver, bool flexible, const void *in)
{
    int n = 0;
    kc_ctx c = {.ver = ver, .flex = flexible, .nrefs = &n};
    sz_struct(s, &c, in);
    return n;
}

/* ------------------------------------------------------------- headers */

int kc_read_req_header(kc_reader *r, kc_req_header *h, bool flexible)
{
    if (kc_read_i16(r, &h->api_key) || kc_read_i16(r, &h->api_version) ||
        kc_read_i32(r, &h->correlation_id) || kc_read_str16(r, &h->client_id))
        return SK_ERR_PARSE;
    return flexible ? kc_skip_tags(r) : 0;
}

size_t kc_req_header_size(const kc_req_header *h, bool flexible)
{
    size_t n = 2 + 2 + 4 + 2 + (h->client_id.len > 0 ? (size_t)h->client_id.len : 0);
    return n + (flexible ? 1 : 0);
}

uint8_t *kc_put_req_header(uint8_t *p, const kc_req_header *h, bool flexible)
{
    p = st16(p, (uint16_t)h->api_key);
    p = st16(p, (uint16_t)h->api_version);
    p = st32(p, (uint32_t)h->correlation_id);
    int32_t l = h->client_id.len < 0 ? -1 : h->client_id.len;
    p = st16(p, (uint16_t)l);
    if (l > 0) {
        memcpy(p, h->client_id.p, (size_t)l);
        p += l;
    }
    if (flexible)
        *p++ = 0;
    return p;
}

uint8_t *kc_put_resp_header(uint8_t *p, int32_t correlation_id, bool flexible)
{
    p = st32(p, (uint32_t)correlation_id);
    if (flexible)
        *p++ = 0;
    return p;
}
