/* GGUF v2/v3 reader and v3 writer.
 *
 * File layout (little-endian throughout):
 *   magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
 *   n_kv    x { string key | u32 value type | value }
 *   n_tensors x { string name | u32 n_dims | u64 ne[n_dims] | u32 type | u64 offset }
 *   zero padding to general.alignment (default 32) | tensor data (offsets relative to here)
 * where a string is { u64 length | bytes } and an array value is { u32 element type | u64 count | elements }.
 *
 * The reader never trusts a count: before allocating for n items it checks that the bytes left could hold
 * n items of the smallest possible encoding, so an absurd count fails at once instead of allocating. */
#include "io/gguf.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "quant/trellis.h"
#include "quant/types.h"

#define GGUF_MAGIC "GGUF"
#define GGUF_DEFAULT_ALIGNMENT 32u
#define GGUF_MAX_TENSORS (1u << 20)
#define GGUF_MAX_KV (1u << 24)
#define GGUF_MAX_DIMS 4u
/* Smallest encodings, used to bound counts by the bytes that remain. */
#define GGUF_MIN_KV_BYTES 13u     /* u64 key length (empty key) + u32 type + 1-byte value */
#define GGUF_MIN_TENSOR_BYTES 32u /* u64 name length + u32 n_dims + one u64 dim + u32 type + u64 offset */

typedef struct gguf_kv {
    kite_gguf_str key;
    uint32_t type;          /* kite_gguf_vtype */
    const uint8_t *value;   /* scalars: the value's bytes; arrays: the first element */
    kite_gguf_str str;      /* KITE_GGUF_STRING: the string */
    uint32_t elem_type;     /* KITE_GGUF_ARRAY: element type (never ARRAY) */
    uint64_t n;             /* KITE_GGUF_ARRAY: element count */
    uint64_t *str_offsets;  /* arrays of strings: file offset of each element's length prefix, [n] */
} gguf_kv;

struct kite_gguf {
    const uint8_t *data;    /* the whole file, size bytes */
    uint64_t size;
    uint32_t version;
    uint32_t alignment;     /* bytes, a power of two */
    uint64_t data_start;    /* file offset of the (aligned) tensor data section */
    int64_t n_kv;
    gguf_kv *kv;            /* [n_kv] in file order */
    int64_t n_tensors;
    kite_gguf_tensor *tensors; /* [n_tensors] in file order */
    /* Open-addressing hash tables of index + 1 (0 = empty); capacity a power of two >= 2 * count. */
    uint32_t *kv_index, *tensor_index;
    uint64_t kv_index_cap, tensor_index_cap;
};

/* ---- helpers ------------------------------------------------------------------------------------ */

static uint64_t hash_bytes(const char *p, uint64_t n) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (uint64_t i = 0; i < n; i++) h = (h ^ (uint8_t)p[i]) * 1099511628211ull;
    return h;
}

static bool str_eq(kite_gguf_str a, const char *b, uint64_t b_len) {
    return a.len == b_len && (b_len == 0 || memcmp(a.ptr, b, b_len) == 0);
}

/* Size in bytes of a scalar value type; 0 for STRING, ARRAY and unknown types. */
static uint64_t scalar_size(uint32_t t) {
    switch (t) {
    case KITE_GGUF_UINT8: case KITE_GGUF_INT8: case KITE_GGUF_BOOL: return 1;
    case KITE_GGUF_UINT16: case KITE_GGUF_INT16: return 2;
    case KITE_GGUF_UINT32: case KITE_GGUF_INT32: case KITE_GGUF_FLOAT32: return 4;
    case KITE_GGUF_UINT64: case KITE_GGUF_INT64: case KITE_GGUF_FLOAT64: return 8;
    default: return 0;
    }
}

static const char *vtype_name(uint32_t t) {
    static const char *names[] = {"uint8", "int8", "uint16", "int16", "uint32", "int32", "float32",
                                  "bool", "string", "array", "uint64", "int64", "float64"};
    return t < sizeof names / sizeof names[0] ? names[t] : "unknown";
}

/* Prints a (possibly binary) name for a message: at most 64 bytes, non-printables as '?'. */
static const char *printable(kite_gguf_str s, char buf[72]) {
    uint64_t n = s.len < 64 ? s.len : 64, j = 0;
    for (uint64_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s.ptr[i];
        buf[j++] = (c >= 0x20 && c < 0x7f) ? (char)c : '?';
    }
    if (s.len > 64) { buf[j++] = '.'; buf[j++] = '.'; buf[j++] = '.'; }
    buf[j] = 0;
    return buf;
}

/* Inserts index i (of the item named `name`) into a hash table; returns the index of an existing item
 * with the same name, or -1 after inserting. names(i) gives the name of item i. */
typedef kite_gguf_str (*name_of_fn)(const kite_gguf *g, uint64_t i);
static kite_gguf_str kv_name(const kite_gguf *g, uint64_t i) { return g->kv[i].key; }
static kite_gguf_str tensor_name(const kite_gguf *g, uint64_t i) { return g->tensors[i].name; }

static int64_t table_insert(const kite_gguf *g, uint32_t *table, uint64_t cap, name_of_fn name_of, uint64_t i) {
    kite_gguf_str name = name_of(g, i);
    uint64_t slot = hash_bytes(name.ptr, name.len) & (cap - 1);
    while (table[slot]) {
        uint64_t other = table[slot] - 1;
        kite_gguf_str o = name_of(g, other);
        if (str_eq(o, name.ptr, name.len)) return (int64_t)other;
        slot = (slot + 1) & (cap - 1);
    }
    table[slot] = (uint32_t)(i + 1);
    return -1;
}

static int64_t table_find(const kite_gguf *g, const uint32_t *table, uint64_t cap, name_of_fn name_of,
                          const char *name) {
    if (!table || !name) return -1;
    uint64_t len = strlen(name);
    uint64_t slot = hash_bytes(name, len) & (cap - 1);
    while (table[slot]) {
        uint64_t i = table[slot] - 1;
        if (str_eq(name_of(g, i), name, len)) return (int64_t)i;
        slot = (slot + 1) & (cap - 1);
    }
    return -1;
}

static uint64_t table_capacity(uint64_t count) {
    uint64_t cap = 16;
    while (cap < 2 * count) cap *= 2;
    return cap;
}

/* ---- reader ------------------------------------------------------------------------------------- */

typedef struct cursor {
    const uint8_t *base;
    uint64_t size, pos;
    kite_error *e;
} cursor;

static uint64_t remaining(const cursor *c) { return c->size - c->pos; }

static int need(cursor *c, uint64_t n, const char *what) {
    if (n > remaining(c))
        return kite_fail(c->e, KITE_ERR_FORMAT, "gguf: %s at byte %llu needs %llu bytes but the file ends at %llu",
                         what, (unsigned long long)c->pos, (unsigned long long)n, (unsigned long long)c->size);
    return KITE_OK;
}

static int read_u32(cursor *c, uint32_t *v, const char *what) {
    int rc = need(c, 4, what);
    if (rc) return rc;
    memcpy(v, c->base + c->pos, 4);
    c->pos += 4;
    return KITE_OK;
}

static int read_u64(cursor *c, uint64_t *v, const char *what) {
    int rc = need(c, 8, what);
    if (rc) return rc;
    memcpy(v, c->base + c->pos, 8);
    c->pos += 8;
    return KITE_OK;
}

static int read_str(cursor *c, kite_gguf_str *s, const char *what) {
    uint64_t len;
    int rc = read_u64(c, &len, what);
    if (rc) return rc;
    if (len > remaining(c))
        return kite_fail(c->e, KITE_ERR_FORMAT,
                         "gguf: %s: string length %llu at byte %llu runs past the end of the file (%llu bytes)", what,
                         (unsigned long long)len, (unsigned long long)(c->pos - 8), (unsigned long long)c->size);
    s->ptr = (const char *)c->base + c->pos;
    s->len = len;
    c->pos += len;
    return KITE_OK;
}

static int read_kv(cursor *c, int64_t index, gguf_kv *kv) {
    char what[160], name[72];
    snprintf(what, sizeof what, "key of kv #%lld", (long long)index);
    int rc = read_str(c, &kv->key, what);
    if (rc) return rc;
    snprintf(what, sizeof what, "kv #%lld '%s'", (long long)index, printable(kv->key, name));
    rc = read_u32(c, &kv->type, what);
    if (rc) return rc;
    kv->value = c->base + c->pos;
    if (kv->type == KITE_GGUF_STRING) return read_str(c, &kv->str, what);
    if (kv->type != KITE_GGUF_ARRAY) {
        uint64_t n = scalar_size(kv->type);
        if (!n)
            return kite_fail(c->e, KITE_ERR_FORMAT, "gguf: %s has unknown value type %u", what, kv->type);
        rc = need(c, n, what);
        if (rc) return rc;
        c->pos += n;
        return KITE_OK;
    }
    rc = read_u32(c, &kv->elem_type, what);
    if (rc) return rc;
    rc = read_u64(c, &kv->n, what);
    if (rc) return rc;
    kv->value = c->base + c->pos;
    if (kv->elem_type == KITE_GGUF_ARRAY)
        return kite_fail(c->e, KITE_ERR_UNSUPPORTED, "gguf: %s is an array of arrays, which kite does not read", what);
    if (kv->elem_type == KITE_GGUF_STRING) {
        /* Each string takes at least its 8-byte length, which bounds n before the offset table is allocated. */
        if (kv->n > remaining(c) / 8)
            return kite_fail(c->e, KITE_ERR_FORMAT,
                             "gguf: %s: array of %llu strings cannot fit in the %llu bytes left in the file", what,
                             (unsigned long long)kv->n, (unsigned long long)remaining(c));
        kv->str_offsets = malloc((kv->n ? kv->n : 1) * sizeof *kv->str_offsets);
        if (!kv->str_offsets)
            return kite_fail(c->e, KITE_ERR_NOMEM, "gguf: %s: out of memory for %llu string offsets", what,
                             (unsigned long long)kv->n);
        for (uint64_t i = 0; i < kv->n; i++) {
            kite_gguf_str s;
            kv->str_offsets[i] = c->pos;
            char elem_what[200];
            snprintf(elem_what, sizeof elem_what, "%s element %llu", what, (unsigned long long)i);
            rc = read_str(c, &s, elem_what);
            if (rc) return rc;
        }
        return KITE_OK;
    }
    uint64_t elem = scalar_size(kv->elem_type);
    if (!elem)
        return kite_fail(c->e, KITE_ERR_FORMAT, "gguf: %s: array has unknown element type %u", what, kv->elem_type);
    if (kv->n > remaining(c) / elem)
        return kite_fail(c->e, KITE_ERR_FORMAT,
                         "gguf: %s: array of %llu %s values runs past the end of the file (%llu bytes left)", what,
                         (unsigned long long)kv->n, vtype_name(kv->elem_type), (unsigned long long)remaining(c));
    c->pos += kv->n * elem;
    return KITE_OK;
}

static int read_tensor_info(cursor *c, int64_t index, kite_gguf_tensor *t) {
    char what[160], name[72];
    snprintf(what, sizeof what, "name of tensor #%lld", (long long)index);
    int rc = read_str(c, &t->name, what);
    if (rc) return rc;
    snprintf(what, sizeof what, "tensor '%s'", printable(t->name, name));
    rc = read_u32(c, &t->n_dims, what);
    if (rc) return rc;
    if (t->n_dims < 1 || t->n_dims > GGUF_MAX_DIMS)
        return kite_fail(c->e, KITE_ERR_FORMAT, "gguf: %s has %u dimensions (must be 1..%u)", what, t->n_dims,
                         GGUF_MAX_DIMS);
    for (uint32_t d = 0; d < GGUF_MAX_DIMS; d++) t->ne[d] = 1;
    for (uint32_t d = 0; d < t->n_dims; d++) {
        uint64_t ne;
        rc = read_u64(c, &ne, what);
        if (rc) return rc;
        if (ne > (uint64_t)INT64_MAX)
            return kite_fail(c->e, KITE_ERR_FORMAT, "gguf: %s dimension %u is %llu (too large)", what, d,
                             (unsigned long long)ne);
        t->ne[d] = (int64_t)ne;
    }
    rc = read_u32(c, &t->type, what);
    if (rc) return rc;
    rc = read_u64(c, &t->offset, what);
    if (rc) return rc;
    return KITE_OK;
}

/* Validates type, shape and size of tensor t (offset still relative to the data section). */
static int check_tensor(kite_gguf *g, kite_gguf_tensor *t, kite_error *e) {
    char name[72];
    const char *tn = printable(t->name, name);
    const kite_type_traits *tr = kite_type_get(t->type);
    if (!tr && kite_kt_retired_code(t->type))
        return kite_fail(e, KITE_ERR_UNSUPPORTED,
                         "gguf: tensor '%s' is in an earlier trellis code of kite (code %d, type 0x%X, written before "
                         "2026-12-08), which kite no longer reads: quantize the model again with this kite",
                         tn, kite_kt_retired_code(t->type), t->type);
    if (!tr) return kite_fail(e, KITE_ERR_UNSUPPORTED, "gguf: tensor '%s' has type %u, which kite does not know", tn, t->type);
    if (t->ne[0] % tr->block_size != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor '%s' row length %lld is not a multiple of the %s block size %d",
                         tn, (long long)t->ne[0], tr->name, tr->block_size);
    /* Element count and byte size, overflow-checked: each product must stay <= INT64_MAX. */
    uint64_t n_rows = 1;
    for (int d = 1; d < 4; d++) {
        if (t->ne[d] != 0 && n_rows > (uint64_t)INT64_MAX / (uint64_t)t->ne[d])
            return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor '%s' shape [%lld, %lld, %lld, %lld] overflows", tn,
                             (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
        n_rows *= (uint64_t)t->ne[d];
    }
    if (t->ne[0] != 0 && n_rows > (uint64_t)INT64_MAX / (uint64_t)t->ne[0])
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor '%s' shape [%lld, %lld, %lld, %lld] overflows", tn,
                         (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3]);
    /* Bytes can overflow where elements do not: an f32 row of 2^62 elements is 2^64 bytes. */
    const uint64_t n_blocks = (uint64_t)(t->ne[0] / tr->block_size);
    if (n_blocks > (uint64_t)INT64_MAX / tr->block_bytes)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor '%s' row of %lld elements overflows in bytes", tn,
                         (long long)t->ne[0]);
    const uint64_t row_bytes = n_blocks * tr->block_bytes;
    if (row_bytes != 0 && n_rows > (uint64_t)INT64_MAX / row_bytes)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor '%s' byte size overflows", tn);
    t->n_bytes = row_bytes * n_rows;
    if (t->offset % g->alignment != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor '%s' data offset %llu is not a multiple of the alignment %u",
                         tn, (unsigned long long)t->offset, g->alignment);
    uint64_t limit = g->size >= g->data_start ? g->size - g->data_start : 0;
    if (t->offset > limit || t->n_bytes > limit - t->offset)
        return kite_fail(e, KITE_ERR_FORMAT,
                         "gguf: tensor '%s' data [offset %llu, %llu bytes] lies beyond the end of the file (%llu bytes)",
                         tn, (unsigned long long)(g->data_start + t->offset), (unsigned long long)t->n_bytes,
                         (unsigned long long)g->size);
    t->offset += g->data_start;
    t->data = g->data + t->offset;
    return KITE_OK;
}

static int parse(kite_gguf *g, kite_error *e) {
    cursor c = {.base = g->data, .size = g->size, .pos = 0, .e = e};
    if (g->size < 4 || memcmp(g->data, GGUF_MAGIC, 4) != 0)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: bad magic (not a GGUF file)");
    c.pos = 4;
    int rc = read_u32(&c, &g->version, "version");
    if (rc) return rc;
    if (g->version == 1)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "gguf: version 1 files are not supported (only versions 2 and 3)");
    if ((g->version & 0xffff) == 0 && g->version != 0)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "gguf: big-endian files are not supported (version field 0x%08x)",
                         g->version);
    if (g->version != 2 && g->version != 3)
        return kite_fail(e, KITE_ERR_UNSUPPORTED, "gguf: version %u is not supported (only versions 2 and 3)",
                         g->version);
    uint64_t n_tensors, n_kv;
    if ((rc = read_u64(&c, &n_tensors, "tensor count"))) return rc;
    if ((rc = read_u64(&c, &n_kv, "kv count"))) return rc;
    if (n_tensors > GGUF_MAX_TENSORS || n_tensors > remaining(&c) / GGUF_MIN_TENSOR_BYTES)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor count %llu is too large (limit %u, and the file has %llu bytes)",
                         (unsigned long long)n_tensors, GGUF_MAX_TENSORS, (unsigned long long)g->size);
    if (n_kv > GGUF_MAX_KV || n_kv > remaining(&c) / GGUF_MIN_KV_BYTES)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: kv count %llu is too large (limit %u, and the file has %llu bytes)",
                         (unsigned long long)n_kv, GGUF_MAX_KV, (unsigned long long)g->size);

    g->kv = calloc(n_kv ? n_kv : 1, sizeof *g->kv);
    g->kv_index_cap = table_capacity(n_kv);
    g->kv_index = calloc(g->kv_index_cap, sizeof *g->kv_index);
    if (!g->kv || !g->kv_index) return kite_fail(e, KITE_ERR_NOMEM, "gguf: out of memory for %llu kv pairs", (unsigned long long)n_kv);
    g->alignment = GGUF_DEFAULT_ALIGNMENT;
    for (uint64_t i = 0; i < n_kv; i++) {
        gguf_kv *kv = &g->kv[i];
        g->n_kv = (int64_t)i + 1; /* so free() sees this kv's allocations even if it fails half-way */
        if ((rc = read_kv(&c, (int64_t)i, kv))) return rc;
        int64_t dup = table_insert(g, g->kv_index, g->kv_index_cap, kv_name, i);
        char name[72];
        if (dup >= 0)
            return kite_fail(e, KITE_ERR_FORMAT, "gguf: duplicate key '%s' (kv #%lld and #%llu)", printable(kv->key, name),
                             (long long)dup, (unsigned long long)i);
        if (str_eq(kv->key, "general.alignment", 17)) {
            if (kv->type != KITE_GGUF_UINT32)
                return kite_fail(e, KITE_ERR_FORMAT, "gguf: general.alignment has type %s (must be uint32)",
                                 vtype_name(kv->type));
            uint32_t a;
            memcpy(&a, kv->value, 4);
            if (a == 0 || (a & (a - 1)) != 0)
                return kite_fail(e, KITE_ERR_FORMAT, "gguf: general.alignment %u is not a power of two", a);
            g->alignment = a;
        }
    }

    g->tensors = calloc(n_tensors ? n_tensors : 1, sizeof *g->tensors);
    g->tensor_index_cap = table_capacity(n_tensors);
    g->tensor_index = calloc(g->tensor_index_cap, sizeof *g->tensor_index);
    if (!g->tensors || !g->tensor_index)
        return kite_fail(e, KITE_ERR_NOMEM, "gguf: out of memory for %llu tensors", (unsigned long long)n_tensors);
    for (uint64_t i = 0; i < n_tensors; i++) {
        kite_gguf_tensor *t = &g->tensors[i];
        if ((rc = read_tensor_info(&c, (int64_t)i, t))) return rc;
        g->n_tensors = (int64_t)i + 1;
        int64_t dup = table_insert(g, g->tensor_index, g->tensor_index_cap, tensor_name, i);
        char name[72];
        if (dup >= 0)
            return kite_fail(e, KITE_ERR_FORMAT, "gguf: duplicate tensor name '%s' (tensors #%lld and #%llu)",
                             printable(t->name, name), (long long)dup, (unsigned long long)i);
    }
    /* The data section starts at the next multiple of the alignment (c.pos <= size < 2^64 - 2^32). */
    g->data_start = (c.pos + g->alignment - 1) / g->alignment * g->alignment;
    if (n_tensors > 0 && g->data_start > g->size)
        return kite_fail(e, KITE_ERR_FORMAT, "gguf: tensor data section would start at byte %llu, past the end of the file (%llu bytes)",
                         (unsigned long long)g->data_start, (unsigned long long)g->size);
    for (int64_t i = 0; i < g->n_tensors; i++)
        if ((rc = check_tensor(g, &g->tensors[i], e))) return rc;
    return KITE_OK;
}

int kite_gguf_open(kite_gguf **out, const void *data, size_t size, kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "gguf: NULL output handle");
    *out = NULL;
    if (!data && size) return kite_fail(e, KITE_ERR_INVALID_ARG, "gguf: NULL data");
    kite_gguf *g = calloc(1, sizeof *g);
    if (!g) return kite_fail(e, KITE_ERR_NOMEM, "gguf: out of memory");
    g->data = data;
    g->size = size;
    int rc = parse(g, e);
    if (rc) {
        kite_gguf_free(g);
        return rc;
    }
    *out = g;
    return KITE_OK;
}

void kite_gguf_free(kite_gguf *g) {
    if (!g) return;
    if (g->kv)
        for (int64_t i = 0; i < g->n_kv; i++) free(g->kv[i].str_offsets);
    free(g->kv);
    free(g->kv_index);
    free(g->tensors);
    free(g->tensor_index);
    free(g);
}

uint32_t kite_gguf_version(const kite_gguf *g) { return g->version; }
uint32_t kite_gguf_alignment(const kite_gguf *g) { return g->alignment; }
int64_t kite_gguf_n_kv(const kite_gguf *g) { return g->n_kv; }

kite_gguf_str kite_gguf_key(const kite_gguf *g, int64_t i) {
    kite_gguf_str none = {"", 0};
    return (i >= 0 && i < g->n_kv) ? g->kv[i].key : none;
}

static const gguf_kv *find_kv(const kite_gguf *g, const char *key) {
    int64_t i = table_find(g, g->kv_index, g->kv_index_cap, kv_name, key);
    return i < 0 ? NULL : &g->kv[i];
}

bool kite_gguf_has(const kite_gguf *g, const char *key) { return find_kv(g, key) != NULL; }

/* Reads an integer of GGUF type t at p as signed (or unsigned through *u when it is a uint64). */
static bool read_int(uint32_t t, const uint8_t *p, int64_t *s, uint64_t *u, bool *is_unsigned) {
    *is_unsigned = false;
    switch (t) {
    case KITE_GGUF_UINT8: { uint8_t v; memcpy(&v, p, 1); *s = v; return true; }
    case KITE_GGUF_INT8: { int8_t v; memcpy(&v, p, 1); *s = v; return true; }
    case KITE_GGUF_UINT16: { uint16_t v; memcpy(&v, p, 2); *s = v; return true; }
    case KITE_GGUF_INT16: { int16_t v; memcpy(&v, p, 2); *s = v; return true; }
    case KITE_GGUF_UINT32: { uint32_t v; memcpy(&v, p, 4); *s = v; return true; }
    case KITE_GGUF_INT32: { int32_t v; memcpy(&v, p, 4); *s = v; return true; }
    case KITE_GGUF_INT64: { int64_t v; memcpy(&v, p, 8); *s = v; return true; }
    case KITE_GGUF_UINT64: {
        uint64_t v;
        memcpy(&v, p, 8);
        *u = v;
        *is_unsigned = true;
        return true;
    }
    default: return false;
    }
}

static bool read_float(uint32_t t, const uint8_t *p, float *v) {
    if (t == KITE_GGUF_FLOAT32) { memcpy(v, p, 4); return true; }
    if (t == KITE_GGUF_FLOAT64) { double d; memcpy(&d, p, 8); *v = (float)d; return true; }
    return false;
}

bool kite_gguf_get_u32(const kite_gguf *g, const char *key, uint32_t *v) {
    const gguf_kv *kv = find_kv(g, key);
    int64_t s; uint64_t u; bool is_unsigned;
    if (!kv || !read_int(kv->type, kv->value, &s, &u, &is_unsigned)) return false;
    if (is_unsigned) {
        if (u > UINT32_MAX) return false;
        *v = (uint32_t)u;
    } else {
        if (s < 0 || s > (int64_t)UINT32_MAX) return false;
        *v = (uint32_t)s;
    }
    return true;
}

bool kite_gguf_get_i64(const kite_gguf *g, const char *key, int64_t *v) {
    const gguf_kv *kv = find_kv(g, key);
    int64_t s; uint64_t u; bool is_unsigned;
    if (!kv || !read_int(kv->type, kv->value, &s, &u, &is_unsigned)) return false;
    if (is_unsigned) {
        if (u > (uint64_t)INT64_MAX) return false;
        s = (int64_t)u;
    }
    *v = s;
    return true;
}

bool kite_gguf_get_f32(const kite_gguf *g, const char *key, float *v) {
    const gguf_kv *kv = find_kv(g, key);
    return kv && read_float(kv->type, kv->value, v);
}

bool kite_gguf_get_bool(const kite_gguf *g, const char *key, bool *v) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != KITE_GGUF_BOOL) return false;
    *v = kv->value[0] != 0;
    return true;
}

bool kite_gguf_get_str(const kite_gguf *g, const char *key, kite_gguf_str *v) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != KITE_GGUF_STRING) return false;
    *v = kv->str;
    return true;
}

bool kite_gguf_get_arr(const kite_gguf *g, const char *key, kite_gguf_vtype *elem_type, uint64_t *n) {
    const gguf_kv *kv = find_kv(g, key);
    if (!kv || kv->type != KITE_GGUF_ARRAY) return false;
    if (elem_type) *elem_type = (kite_gguf_vtype)kv->elem_type;
    if (n) *n = kv->n;
    return true;
}

static const gguf_kv *find_arr(const kite_gguf *g, const char *key, uint64_t i) {
    const gguf_kv *kv = find_kv(g, key);
    return (kv && kv->type == KITE_GGUF_ARRAY && i < kv->n) ? kv : NULL;
}

bool kite_gguf_arr_str(const kite_gguf *g, const char *key, uint64_t i, kite_gguf_str *v) {
    const gguf_kv *kv = find_arr(g, key, i);
    if (!kv || kv->elem_type != KITE_GGUF_STRING) return false;
    uint64_t at = kv->str_offsets[i];
    memcpy(&v->len, g->data + at, 8);
    v->ptr = (const char *)g->data + at + 8;
    return true;
}

bool kite_gguf_arr_f32(const kite_gguf *g, const char *key, uint64_t i, float *v) {
    const gguf_kv *kv = find_arr(g, key, i);
    return kv && read_float(kv->elem_type, kv->value + i * scalar_size(kv->elem_type), v);
}

bool kite_gguf_arr_i64(const kite_gguf *g, const char *key, uint64_t i, int64_t *v) {
    const gguf_kv *kv = find_arr(g, key, i);
    int64_t s; uint64_t u; bool is_unsigned;
    if (!kv || !read_int(kv->elem_type, kv->value + i * scalar_size(kv->elem_type), &s, &u, &is_unsigned)) return false;
    if (is_unsigned) {
        if (u > (uint64_t)INT64_MAX) return false;
        s = (int64_t)u;
    }
    *v = s;
    return true;
}

bool kite_gguf_arr_bool(const kite_gguf *g, const char *key, uint64_t i, bool *v) {
    const gguf_kv *kv = find_arr(g, key, i);
    if (!kv || kv->elem_type != KITE_GGUF_BOOL) return false;
    *v = kv->value[i] != 0;
    return true;
}

int64_t kite_gguf_n_tensors(const kite_gguf *g) { return g->n_tensors; }

const kite_gguf_tensor *kite_gguf_tensor_at(const kite_gguf *g, int64_t i) {
    return (i >= 0 && i < g->n_tensors) ? &g->tensors[i] : NULL;
}

const kite_gguf_tensor *kite_gguf_find_tensor(const kite_gguf *g, const char *name) {
    int64_t i = table_find(g, g->tensor_index, g->tensor_index_cap, tensor_name, name);
    return i < 0 ? NULL : &g->tensors[i];
}

/* ---- writer ------------------------------------------------------------------------------------- */

/* A growable byte buffer. */
typedef struct bytes {
    uint8_t *p;
    size_t len, cap;
} bytes;

typedef struct writer_tensor {
    char *name;
    uint32_t type, n_dims;
    int64_t ne[4];
    uint8_t *data;      /* copy of n_bytes */
    uint64_t n_bytes;
} writer_tensor;

struct kite_gguf_writer {
    bytes kv;               /* the encoded kv section */
    uint64_t n_kv;
    char **keys;            /* [n_kv], to reject duplicates */
    writer_tensor *tensors; /* [n_tensors] */
    uint64_t n_tensors, cap_tensors;
    int status;             /* first failure, reported by save */
    char msg[400];
};

static void writer_fail(kite_gguf_writer *w, int status, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static void writer_fail(kite_gguf_writer *w, int status, const char *fmt, ...) {
    if (!w || w->status) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(w->msg, sizeof w->msg, fmt, ap);
    va_end(ap);
    w->status = status;
}

static bool bytes_put(kite_gguf_writer *w, bytes *b, const void *p, size_t n) {
    if (w->status) return false;
    if (n > SIZE_MAX / 2 - b->len) {
        writer_fail(w, KITE_ERR_NOMEM, "gguf writer: metadata too large");
        return false;
    }
    if (b->len + n > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n) cap *= 2;
        uint8_t *q = realloc(b->p, cap);
        if (!q) {
            writer_fail(w, KITE_ERR_NOMEM, "gguf writer: out of memory");
            return false;
        }
        b->p = q;
        b->cap = cap;
    }
    if (n) memcpy(b->p + b->len, p, n);
    b->len += n;
    return true;
}

static void put_u32(kite_gguf_writer *w, uint32_t v) { bytes_put(w, &w->kv, &v, 4); }
static void put_u64(kite_gguf_writer *w, uint64_t v) { bytes_put(w, &w->kv, &v, 8); }
static void put_str(kite_gguf_writer *w, const char *s) {
    uint64_t n = strlen(s);
    put_u64(w, n);
    bytes_put(w, &w->kv, s, n);
}

kite_gguf_writer *kite_gguf_writer_new(void) { return calloc(1, sizeof(kite_gguf_writer)); }

void kite_gguf_writer_free(kite_gguf_writer *w) {
    if (!w) return;
    free(w->kv.p);
    for (uint64_t i = 0; i < w->n_kv; i++) free(w->keys[i]);
    free(w->keys);
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        free(w->tensors[i].name);
        free(w->tensors[i].data);
    }
    free(w->tensors);
    free(w);
}

/* Starts a kv: checks the key, records it and writes key + type. False if the writer has failed. */
static bool begin_kv(kite_gguf_writer *w, const char *key, uint32_t type) {
    if (!w || w->status) return false;
    if (!key) {
        writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: NULL key");
        return false;
    }
    for (uint64_t i = 0; i < w->n_kv; i++)
        if (strcmp(w->keys[i], key) == 0) {
            writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: key '%s' written twice", key);
            return false;
        }
    char **keys = realloc(w->keys, (w->n_kv + 1) * sizeof *keys);
    char *copy = strdup(key);
    if (keys) w->keys = keys;
    if (!keys || !copy) {
        free(copy);
        writer_fail(w, KITE_ERR_NOMEM, "gguf writer: out of memory");
        return false;
    }
    w->keys[w->n_kv++] = copy;
    put_str(w, key);
    put_u32(w, type);
    return !w->status;
}

void kite_gguf_w_u32(kite_gguf_writer *w, const char *key, uint32_t v) {
    if (begin_kv(w, key, KITE_GGUF_UINT32)) put_u32(w, v);
}
void kite_gguf_w_i32(kite_gguf_writer *w, const char *key, int32_t v) {
    if (begin_kv(w, key, KITE_GGUF_INT32)) bytes_put(w, &w->kv, &v, 4);
}
void kite_gguf_w_f32(kite_gguf_writer *w, const char *key, float v) {
    if (begin_kv(w, key, KITE_GGUF_FLOAT32)) bytes_put(w, &w->kv, &v, 4);
}
void kite_gguf_w_bool(kite_gguf_writer *w, const char *key, bool v) {
    uint8_t b = v ? 1 : 0;
    if (begin_kv(w, key, KITE_GGUF_BOOL)) bytes_put(w, &w->kv, &b, 1);
}
void kite_gguf_w_str(kite_gguf_writer *w, const char *key, const char *v) {
    if (!v) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: NULL string for key '%s'", key ? key : "(null)"); return; }
    if (begin_kv(w, key, KITE_GGUF_STRING)) put_str(w, v);
}
void kite_gguf_w_arr_str(kite_gguf_writer *w, const char *key, const char *const *v, uint64_t n) {
    if (n && !v) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: NULL array for key '%s'", key ? key : "(null)"); return; }
    if (!begin_kv(w, key, KITE_GGUF_ARRAY)) return;
    put_u32(w, KITE_GGUF_STRING);
    put_u64(w, n);
    for (uint64_t i = 0; i < n; i++) {
        if (!v[i]) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: NULL string %llu in array '%s'", (unsigned long long)i, key); return; }
        put_str(w, v[i]);
    }
}
static void put_scalar_arr(kite_gguf_writer *w, const char *key, uint32_t elem_type, const void *v, uint64_t n) {
    if (n && !v) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: NULL array for key '%s'", key ? key : "(null)"); return; }
    if (n > SIZE_MAX / 8) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: array '%s' too long", key ? key : "(null)"); return; }
    if (!begin_kv(w, key, KITE_GGUF_ARRAY)) return;
    put_u32(w, elem_type);
    put_u64(w, n);
    bytes_put(w, &w->kv, v, (size_t)n * scalar_size(elem_type));
}
void kite_gguf_w_arr_f32(kite_gguf_writer *w, const char *key, const float *v, uint64_t n) {
    put_scalar_arr(w, key, KITE_GGUF_FLOAT32, v, n);
}
void kite_gguf_w_arr_i32(kite_gguf_writer *w, const char *key, const int32_t *v, uint64_t n) {
    put_scalar_arr(w, key, KITE_GGUF_INT32, v, n);
}

void kite_gguf_w_arr_bool(kite_gguf_writer *w, const char *key, const uint8_t *v, uint64_t n) {
    put_scalar_arr(w, key, KITE_GGUF_BOOL, v, n);
}

void kite_gguf_w_copy_kv(kite_gguf_writer *w, const kite_gguf *g, int64_t i) {
    if (!w || w->status) return;
    if (!g || i < 0 || i >= g->n_kv) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: no key %lld to copy", (long long)i); return; }
    const gguf_kv *kv = &g->kv[i];
    char *key = malloc(kv->key.len + 1);
    if (!key) { writer_fail(w, KITE_ERR_NOMEM, "gguf writer: out of memory"); return; }
    memcpy(key, kv->key.ptr, kv->key.len);
    key[kv->key.len] = 0;
    if (strlen(key) != kv->key.len) writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: key %lld holds a NUL byte", (long long)i);
    else if (begin_kv(w, key, kv->type)) {
        if (kv->type == KITE_GGUF_STRING) {
            put_u64(w, kv->str.len);
            bytes_put(w, &w->kv, kv->str.ptr, kv->str.len);
        } else if (kv->type == KITE_GGUF_ARRAY) {
            put_u32(w, kv->elem_type);
            put_u64(w, kv->n);
            if (kv->elem_type == KITE_GGUF_STRING) {
                for (uint64_t j = 0; j < kv->n && !w->status; j++) {
                    uint64_t len;
                    memcpy(&len, g->data + kv->str_offsets[j], 8);
                    bytes_put(w, &w->kv, g->data + kv->str_offsets[j], 8 + len);
                }
            } else {
                bytes_put(w, &w->kv, kv->value, (size_t)kv->n * scalar_size(kv->elem_type));
            }
        } else {
            bytes_put(w, &w->kv, kv->value, scalar_size(kv->type));
        }
    }
    free(key);
}

void kite_gguf_w_tensor(kite_gguf_writer *w, const char *name, uint32_t type, uint32_t n_dims, const int64_t *ne,
                        const void *data, uint64_t n_bytes) {
    if (!w || w->status) return;
    if (!name || !ne || (n_bytes && !data)) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: NULL tensor argument"); return; }
    /* llama.cpp keeps names in a 64-byte buffer with the terminating NUL. */
    if (strlen(name) >= 64) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor name '%s' is 64 bytes or longer", name); return; }
    const kite_type_traits *tr = kite_type_get(type);
    if (!tr) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor '%s' has unknown type %u", name, type); return; }
    if (n_dims < 1 || n_dims > GGUF_MAX_DIMS) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor '%s' has %u dims", name, n_dims); return; }
    int64_t shape[4] = {1, 1, 1, 1};
    uint64_t n_rows = 1;
    for (uint32_t d = 0; d < n_dims; d++) {
        if (ne[d] < 0) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor '%s' dim %u is negative", name, d); return; }
        shape[d] = ne[d];
        if (d > 0) {
            if (ne[d] && n_rows > (uint64_t)INT64_MAX / (uint64_t)ne[d]) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor '%s' shape overflows", name); return; }
            n_rows *= (uint64_t)ne[d];
        }
    }
    size_t row = kite_type_row_bytes(type, shape[0]);
    if (shape[0] % tr->block_size != 0 || (row && n_rows > (uint64_t)INT64_MAX / row) || row * n_rows != n_bytes) {
        writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor '%s' (%s, %lld x %llu rows) needs a multiple of %d elements per row and %llu bytes, got %llu",
                    name, tr->name, (long long)shape[0], (unsigned long long)n_rows, tr->block_size,
                    (unsigned long long)(row * n_rows), (unsigned long long)n_bytes);
        return;
    }
    for (uint64_t i = 0; i < w->n_tensors; i++)
        if (strcmp(w->tensors[i].name, name) == 0) { writer_fail(w, KITE_ERR_INVALID_ARG, "gguf writer: tensor '%s' written twice", name); return; }
    if (w->n_tensors == w->cap_tensors) {
        uint64_t cap = w->cap_tensors ? 2 * w->cap_tensors : 16;
        writer_tensor *t = realloc(w->tensors, cap * sizeof *t);
        if (!t) { writer_fail(w, KITE_ERR_NOMEM, "gguf writer: out of memory"); return; }
        w->tensors = t;
        w->cap_tensors = cap;
    }
    writer_tensor *t = &w->tensors[w->n_tensors];
    memset(t, 0, sizeof *t);
    t->name = strdup(name);
    t->data = malloc(n_bytes ? n_bytes : 1);
    if (!t->name || !t->data) {
        free(t->name);
        free(t->data);
        writer_fail(w, KITE_ERR_NOMEM, "gguf writer: out of memory for tensor '%s' (%llu bytes)", name, (unsigned long long)n_bytes);
        return;
    }
    t->type = type;
    t->n_dims = n_dims;
    memcpy(t->ne, shape, sizeof shape);
    if (n_bytes) memcpy(t->data, data, n_bytes);
    t->n_bytes = n_bytes;
    w->n_tensors++;
}

static uint64_t align_up(uint64_t x, uint64_t a) { return (x + a - 1) / a * a; }

int kite_gguf_writer_save(kite_gguf_writer *w, const char *path, kite_error *e) {
    if (!w || !path) return kite_fail(e, KITE_ERR_INVALID_ARG, "gguf writer: NULL writer or path");
    if (w->status) return kite_fail(e, w->status, "%s", w->msg);
    /* Header, kv section and tensor infos go to one buffer; tensor data is streamed after it. */
    kite_gguf_writer hdr_w = {0};
    bytes *h = &hdr_w.kv;
    uint32_t version = 3;
    bytes_put(&hdr_w, h, GGUF_MAGIC, 4);
    bytes_put(&hdr_w, h, &version, 4);
    bytes_put(&hdr_w, h, &w->n_tensors, 8);
    bytes_put(&hdr_w, h, &w->n_kv, 8);
    bytes_put(&hdr_w, h, w->kv.p, w->kv.len);
    uint64_t offset = 0;
    for (uint64_t i = 0; i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        uint64_t len = strlen(t->name);
        bytes_put(&hdr_w, h, &len, 8);
        bytes_put(&hdr_w, h, t->name, len);
        bytes_put(&hdr_w, h, &t->n_dims, 4);
        for (uint32_t d = 0; d < t->n_dims; d++) bytes_put(&hdr_w, h, &t->ne[d], 8);
        bytes_put(&hdr_w, h, &t->type, 4);
        bytes_put(&hdr_w, h, &offset, 8);
        offset = align_up(offset + t->n_bytes, GGUF_DEFAULT_ALIGNMENT);
    }
    static const uint8_t zeros[GGUF_DEFAULT_ALIGNMENT];
    bytes_put(&hdr_w, h, zeros, align_up(h->len, GGUF_DEFAULT_ALIGNMENT) - h->len);
    if (hdr_w.status) {
        free(h->p);
        return kite_fail(e, hdr_w.status, "%s", hdr_w.msg);
    }
    FILE *f = fopen(path, "wb");
    if (!f) {
        free(h->p);
        return kite_fail(e, KITE_ERR_IO, "gguf writer: cannot create '%s': %s", path, strerror(errno));
    }
    struct stat st;
    const bool regular = fstat(fileno(f), &st) == 0 && S_ISREG(st.st_mode);
    bool ok = fwrite(h->p, 1, h->len, f) == h->len;
    free(h->p);
    for (uint64_t i = 0; ok && i < w->n_tensors; i++) {
        const writer_tensor *t = &w->tensors[i];
        uint64_t pad = align_up(t->n_bytes, GGUF_DEFAULT_ALIGNMENT) - t->n_bytes;
        ok = fwrite(t->data, 1, t->n_bytes, f) == t->n_bytes && fwrite(zeros, 1, pad, f) == pad;
    }
    if (fclose(f) != 0) ok = false;
    if (!ok) {
        int err = errno;
        if (regular) remove(path); /* no half-written model left behind (never a device like /dev/full) */
        return kite_fail(e, KITE_ERR_IO, "gguf writer: write to '%s' failed: %s", path, strerror(err));
    }
    return KITE_OK;
}
