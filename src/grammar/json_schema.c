/* JSON Schema to GBNF (kite_json_schema_to_gbnf) and the fixed json_object grammar.
 *
 * The grammar accepts JSON text that validates against the schema (soundness, checked by ajv in the
 * tests); it accepts one spelling of each valid document family, not every spelling:
 *   - Whitespace: nothing, one space, or one newline followed by up to 20 spaces/tabs, wherever JSON
 *     allows whitespace inside a value (after { [ , : and before } ] ,), none before or after the top
 *     value. So compact and pretty-printed output both fit and no position can grow whitespace forever.
 *   - Objects: declared properties in their declared order (required ones always, optional ones may be
 *     absent), then required names that properties does not declare, then additional properties.
 *   - additionalProperties: false or absent = no other keys (absent follows llama.cpp: a model asked for
 *     an object of given properties should not invent more, and fewer documents is still sound);
 *     true = any other keys with any values; a schema = other keys with values of that schema. Other
 *     keys never repeat a declared name and are written without escapes (so no escape can spell one).
 *   - Arrays: items / prefixItems (and draft-07 items-array + additionalItems), minItems, maxItems
 *     (a maxItems over 10000 is lowered to 10000). After a tuple, more items only when items /
 *     additionalItems allows them, or minItems needs them (then any value).
 *   - Strings: minLength / maxLength (code points; maxLength over 10000 lowered to 10000), pattern
 *     (JSON Schema's unanchored search, ECMAScript with the u flag, see regex.c), format date, time,
 *     date-time (RFC 3339 as ajv-formats checks it, with days per month and leap years), uuid, email
 *     (a conservative subset of ajv-formats' full pattern), ipv4. \u escapes never spell surrogates,
 *     so a string's length in the grammar is its length in code points. A string with a format or a
 *     pattern cannot also have length bounds (unsupported combination, rejected).
 *   - Numbers: an integer has at most 16 digits, a number at most 16 integer digits, 16 fraction
 *     digits and a 2-digit exponent, so every accepted number is a finite double. minimum, maximum,
 *     exclusiveMinimum, exclusiveMaximum are enforced exactly for integers (digit-range rules) and, for
 *     numbers, on the decimal value written without exponent: an exclusive bound b other than 0 becomes
 *     the inclusive bound nextafter(b) so that rounding to a double can never land on b.
 *   - enum / const: the values' compact JSON text (filtered by type when type is given).
 *   - anyOf; oneOf when its branches are provably disjoint (no value the grammar writes for one
 *     branch validates against another: different types, const/enum values, an object key one branch
 *     always writes and the other refuses or never writes and the other requires), so that it means
 *     the same as anyOf; other oneOf schemas are rejected (unsupported), naming the two branches.
 *     Sibling keywords are merged into each branch. allOf merges its schemas into one (types intersected, properties and required
 *     united, bounds tightened, additionalProperties applied to the other branches' properties).
 *   - $ref to any local JSON pointer (#, #/$defs/..., #/definitions/...), recursive ones included;
 *     recursion without a base case is left to kite_gbnf_parse, which rejects it.
 *   - No type: the type implied by the keywords present (properties => object, items => array, ...),
 *     else any JSON value.
 * Annotations (title, description, examples, default, $schema, $id, $comment, ...) and unknown
 * keywords are ignored. Constraint keywords a grammar cannot enforce (not, if/then/else, uniqueItems
 * true, multipleOf, patternProperties, propertyNames, min/maxProperties, contains, dependent*,
 * unevaluated*) are rejected with the JSON pointer of the keyword, as are unsatisfiable schemas.
 * Schema nesting (including $ref and allOf expansion) is bounded at 64 levels, total work at
 * 20000 subschemas, and the output at 8 MiB. */
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/compile.h"
#include "grammar/compile_internal.h"

enum {
    MAX_DEPTH = 64,          /* nested subschemas, $ref and allOf expansions */
    MAX_WORK = 20000,        /* subschemas compiled */
    MAX_COPIED = 1 << 21,    /* JSON values copied by $ref / allOf expansion */
    MAX_SCHEMA_BYTES = 16 << 20,
    MAX_COUNT = 10000,       /* minItems / minLength / repetition counts (the GBNF parser's limit) */
    MAX_TUPLE = 100,         /* prefixItems (each optional one nests a group) */
    MAX_NAME = 40,           /* characters of a rule name before its uniquifying suffix */
    MAX_DECIMAL_DIGITS = 60, /* digits of a numeric bound written out */
    INT_DIGITS = 16,         /* digits of an unbounded integer part */
};

/* The fixed rules a schema's grammar may use, each emitted once when needed. */
typedef enum prim {
    P_WS,
    P_CHAR,
    P_STRING,
    P_NUMBER,
    P_INTEGER,
    P_BOOLEAN,
    P_NULL,
    P_VALUE,
    P_OBJECT,
    P_ARRAY,
    P_KEYCHAR,
    P_DATE,
    P_TIME,
    P_DATE_TIME,
    P_UUID,
    P_EMAIL,
    P_IPV4,
    P_COUNT
} prim;

static const struct prim_rule {
    const char *name;
    const char *body;
    prim deps[6]; /* rules the body names (P_WS = 0 doubles as the end marker after the first entry) */
    int n_deps;
} PRIMS[P_COUNT] = {
    [P_WS] = {"ws", "( \" \" | \"\\n\" [ \\t]{0,20} )?", {0}, 0},
    [P_CHAR] = {"json-char",
                "[^\\x22\\x5C\\x00-\\x1F] | \"\\\\\" ( [\\x22\\x5C/bfnrt] | \"u\" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | "
                "[dD] [0-7] [0-9a-fA-F]{2} ) )",
                {0},
                0},
    [P_STRING] = {"json-string", "\"\\\"\" json-char* \"\\\"\"", {P_CHAR}, 1},
    [P_NUMBER] = {"json-number", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?", {0}, 0},
    [P_INTEGER] = {"json-integer", "\"-\"? ( \"0\" | [1-9] [0-9]{0,15} )", {0}, 0},
    [P_BOOLEAN] = {"json-boolean", "\"true\" | \"false\"", {0}, 0},
    [P_NULL] = {"json-null", "\"null\"", {0}, 0},
    [P_VALUE] = {"json-value", "json-object | json-array | json-string | json-number | json-boolean | json-null",
                 {P_OBJECT, P_ARRAY, P_STRING, P_NUMBER, P_BOOLEAN, P_NULL},
                 6},
    [P_OBJECT] = {"json-object",
                  "\"{\" ws ( json-string ws \":\" ws json-value ws ( \",\" ws json-string ws \":\" ws json-value ws )* )? \"}\"",
                  {P_WS, P_STRING, P_VALUE},
                  3},
    [P_ARRAY] = {"json-array", "\"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"", {P_WS, P_VALUE}, 2},
    [P_KEYCHAR] = {"json-keychar", "[^\\x22\\x5C\\x00-\\x1F]", {0}, 0},
    [P_DATE] = {"format-date",
                "[0-9]{4} \"-\" ( ( \"0\" [13578] | \"1\" [02] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] ) | "
                "( \"0\" [469] | \"11\" ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"30\" ) | "
                "\"02-\" ( \"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8] ) ) | "
                "( [0-9]{2} ( [02468] [48] | [2468] \"0\" | [13579] [26] ) | ( [02468] [048] | [13579] [26] ) \"00\" ) \"-02-29\"",
                {0},
                0},
    [P_TIME] = {"format-time",
                "( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]{1,9} )? "
                "( [zZ] | [-+] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )",
                {0},
                0},
    [P_DATE_TIME] = {"format-date-time", "format-date [tT] format-time", {P_DATE, P_TIME}, 2},
    [P_UUID] = {"format-uuid",
                "[0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{12}",
                {0},
                0},
    [P_EMAIL] = {"format-email",
                 "[a-zA-Z0-9\\x21\\x23-\\x27\\x2A\\x2B\\x2D\\x2F\\x3D\\x3F\\x5E-\\x60\\x7B-\\x7E]{1,32} "
                 "( \".\" [a-zA-Z0-9\\x21\\x23-\\x27\\x2A\\x2B\\x2D\\x2F\\x3D\\x3F\\x5E-\\x60\\x7B-\\x7E]{1,32} ){0,3} \"@\" "
                 "( [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )? \".\" ){1,4} [a-zA-Z0-9] ( [a-zA-Z0-9-]{0,30} [a-zA-Z0-9] )?",
                 {0},
                 0},
    [P_IPV4] = {"format-ipv4",
                "( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9] ) "
                "( \".\" ( \"25\" [0-5] | \"2\" [0-4] [0-9] | \"1\" [0-9] [0-9] | [1-9]? [0-9] ) ){3}",
                {0},
                0},
};

typedef struct ref_memo {
    char *ref;  /* the $ref text */
    char *rule; /* the rule defined for its target */
    int open_at; /* while its target is being compiled: c->structure_depth then; -1 once done */
} ref_memo;

typedef struct compiler {
    json_t *root;
    json_t *scratch; /* schemas built while compiling (allOf merges), kept alive until the end */
    gtext rules;     /* definitions, one per line */
    char **names;    /* rule names in use, in order of creation */
    size_t n_names, cap_names;
    char **name_slots; /* the same names as an open-addressing hash set (n_slots a power of two) */
    size_t n_slots;
    unsigned next_suffix; /* taken bases get base-N with N counting up over the whole grammar */
    ref_memo *refs;
    size_t n_refs, cap_refs;
    bool need[P_COUNT];
    int depth;
    int structure_depth; /* objects and arrays entered: a $ref reached again at the same count would
                            be left recursion (nothing consumed in between) */
    size_t work;
    size_t copied; /* JSON values copied so far (allOf merges), against MAX_COPIED */
    kite_error *e;
    int status; /* first failure */
} compiler;

static int fail(compiler *c, int status, const char *ptr, const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static int fail(compiler *c, int status, const char *ptr, const char *fmt, ...) {
    if (c->status) return c->status;
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->status = kite_fail(c->e, status, "json schema: %s: %s", *ptr ? ptr : "(root)", msg);
    /* one line: a quoted key or value may hold control characters (a "type" of "string\nnumber") */
    if (c->e)
        for (char *q = c->e->msg; *q; q++)
            if ((unsigned char)*q < 0x20) *q = '?';
    return c->status;
}

static int fail_nomem(compiler *c) {
    if (!c->status) c->status = kite_fail(c->e, KITE_ERR_NOMEM, "json schema: out of memory");
    return c->status;
}

static void use_prim(compiler *c, prim p) {
    if (c->need[p]) return;
    c->need[p] = true;
    for (int i = 0; i < PRIMS[p].n_deps; i++) use_prim(c, PRIMS[p].deps[i]);
}

/* Appends a primitive's name to out and marks it used. */
static void put_prim(compiler *c, gtext *out, prim p) {
    use_prim(c, p);
    gtext_puts(out, PRIMS[p].name);
}

/* "parent/key" with the key escaped as a JSON pointer token (~0 ~1). */
static char *ptr_join(const char *parent, const char *key) {
    size_t n = strlen(parent), k = strlen(key), extra = 0;
    for (size_t i = 0; i < k; i++) extra += key[i] == '~' || key[i] == '/';
    char *out = malloc(n + k + extra + 2);
    if (!out) return NULL;
    memcpy(out, parent, n);
    char *w = out + n;
    *w++ = '/';
    for (size_t i = 0; i < k; i++) {
        if (key[i] == '~') *w++ = '~', *w++ = '0';
        else if (key[i] == '/') *w++ = '~', *w++ = '1';
        else *w++ = key[i];
    }
    *w = 0;
    return out;
}

static char *ptr_index(const char *parent, size_t index) {
    char key[32];
    snprintf(key, sizeof key, "%zu", index);
    return ptr_join(parent, key);
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (; *s; s++) h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

static bool name_taken(const compiler *c, const char *name) {
    for (int p = 0; p < P_COUNT; p++)
        if (strcmp(PRIMS[p].name, name) == 0) return true;
    if (!c->n_slots) return false;
    for (size_t i = name_hash(name) & (c->n_slots - 1);; i = (i + 1) & (c->n_slots - 1)) {
        if (!c->name_slots[i]) return false;
        if (strcmp(c->name_slots[i], name) == 0) return true;
    }
}

/* Adds an owned name to the list and the hash set (kept at most half full). */
static bool add_name(compiler *c, char *name) {
    if (c->n_names == c->cap_names) {
        size_t cap = c->cap_names ? c->cap_names * 2 : 32;
        char **names = realloc(c->names, cap * sizeof *names);
        if (!names) return false;
        c->names = names;
        c->cap_names = cap;
    }
    if (2 * (c->n_names + 1) > c->n_slots) {
        size_t n_slots = c->n_slots ? c->n_slots * 2 : 64;
        char **slots = calloc(n_slots, sizeof *slots);
        if (!slots) return false;
        for (size_t k = 0; k < c->n_names; k++) {
            size_t i = name_hash(c->names[k]) & (n_slots - 1);
            while (slots[i]) i = (i + 1) & (n_slots - 1);
            slots[i] = c->names[k];
        }
        free(c->name_slots);
        c->name_slots = slots;
        c->n_slots = n_slots;
    }
    size_t i = name_hash(name) & (c->n_slots - 1);
    while (c->name_slots[i]) i = (i + 1) & (c->n_slots - 1);
    c->name_slots[i] = name;
    c->names[c->n_names++] = name;
    return true;
}

/* A fresh rule name from hint (letters, digits and - only), unique among the names defined so far. */
static char *new_rule_name(compiler *c, const char *hint) {
    char base[MAX_NAME + 1];
    size_t n = 0;
    for (const char *h = hint; *h && n < MAX_NAME; h++) {
        char ch = *h;
        bool word = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9');
        if (!word) ch = '-';
        if (ch == '-' && (n == 0 || base[n - 1] == '-')) continue;
        base[n++] = ch;
    }
    while (n && base[n - 1] == '-') n--;
    if (n == 0) base[n++] = 'r';
    base[n] = 0;
    char name[MAX_NAME + 24];
    snprintf(name, sizeof name, "%s", base);
    while (name_taken(c, name)) snprintf(name, sizeof name, "%s-%u", base, ++c->next_suffix);
    char *dup = strdup(name);
    if (!dup || !add_name(c, dup)) {
        free(dup);
        fail_nomem(c);
        return NULL;
    }
    return dup;
}

static void define_rule(compiler *c, const char *name, const gtext *body) {
    gtext_printf(&c->rules, "%s ::= %s\n", name, body->buf ? body->buf : "");
    if (body->failed) c->rules.failed = true, c->rules.too_large |= body->too_large;
}

/* The GBNF literal of a JSON string holding s[0..n) (valid UTF-8): the quotes and escapes of JSON. */
static void put_json_string_literal(gtext *out, const char *s, size_t n) {
    gtext_puts(out, "\"\\\"");
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        if (!utf8_decode(s, n, &i, &cp)) {
            i++;
            continue; /* jansson only hands out valid UTF-8 */
        }
        switch (cp) {
        case '"': gtext_puts(out, "\\\\\\\""); break;
        case '\\': gtext_puts(out, "\\\\\\\\"); break;
        case '\n': gtext_puts(out, "\\\\n"); break;
        case '\r': gtext_puts(out, "\\\\r"); break;
        case '\t': gtext_puts(out, "\\\\t"); break;
        case '\b': gtext_puts(out, "\\\\b"); break;
        case '\f': gtext_puts(out, "\\\\f"); break;
        default:
            if (cp < 0x20) gtext_printf(out, "\\\\u%04x", cp);
            else gtext_literal_cp(out, cp);
        }
    }
    gtext_puts(out, "\\\"\"");
}

/* A JSON value as a GBNF literal of its compact text (object keys in their order). */
static void put_json_value_literal(compiler *c, gtext *out, json_t *v) {
    char *text = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(17));
    if (!text) {
        fail_nomem(c);
        return;
    }
    gtext_literal(out, text, strlen(text));
    free(text);
}

/* ---- schema keywords ---- */

static bool is_annotation(const char *key) {
    static const char *const names[] = {"title", "description", "examples", "default", "$schema", "$id", "$comment",
                                        "$anchor", "$vocabulary", "deprecated", "readOnly", "writeOnly",
                                        "contentEncoding", "contentMediaType", "contentSchema", "$defs", "definitions",
                                        "id", "nullable", "strict", "discriminator", "example"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(key, names[i]) == 0) return true;
    return false;
}

/* Keywords this compiler enforces. */
static bool is_handled(const char *key) {
    static const char *const names[] = {"type", "enum", "const", "properties", "required", "additionalProperties",
                                        "items", "prefixItems", "additionalItems", "minItems", "maxItems",
                                        "minLength", "maxLength", "pattern", "format", "minimum", "maximum",
                                        "exclusiveMinimum", "exclusiveMaximum", "anyOf", "oneOf", "allOf", "$ref",
                                        "uniqueItems"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(key, names[i]) == 0) return true;
    return false;
}

/* JSON Schema constraint keywords a grammar cannot enforce (rejected rather than silently ignored). */
static bool is_unsupported(const char *key) {
    static const char *const names[] = {"not", "if", "then", "else", "dependentRequired", "dependentSchemas",
                                        "dependencies", "patternProperties", "propertyNames", "minProperties",
                                        "maxProperties", "unevaluatedProperties", "unevaluatedItems", "contains",
                                        "minContains", "maxContains", "multipleOf", "$dynamicRef", "$recursiveRef",
                                        "$dynamicAnchor", "$recursiveAnchor", "formatMinimum", "formatMaximum"};
    for (size_t i = 0; i < sizeof names / sizeof *names; i++)
        if (strcmp(key, names[i]) == 0) return true;
    return false;
}

/* A keyword that constrains (anything but annotations and unknown keys). */
static bool is_constraint(const char *key) { return is_handled(key) || is_unsupported(key); }

static int check_keywords(compiler *c, json_t *s, const char *ptr) {
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (is_unsupported(key)) {
            char *p = ptr_join(ptr, key);
            fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "the keyword \"%s\" is not supported (a grammar cannot enforce it)", key);
            free(p);
            return c->status;
        }
        if (strcmp(key, "uniqueItems") == 0 && !json_is_false(v)) {
            char *p = ptr_join(ptr, key);
            fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "uniqueItems true is not supported (a grammar cannot enforce it)");
            free(p);
            return c->status;
        }
    }
    return KITE_OK;
}

/* Reads a non-negative integer keyword; *present false when absent. */
static int get_count(compiler *c, json_t *s, const char *ptr, const char *key, bool *present, uint64_t *out) {
    json_t *v = json_object_get(s, key);
    *present = v != NULL;
    if (!v) return KITE_OK;
    double d = json_is_integer(v) ? (double)json_integer_value(v) : json_is_real(v) ? json_real_value(v) : -1;
    if (!json_is_number(v) || d < 0 || d != floor(d)) {
        char *p = ptr_join(ptr, key);
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "%s must be a non-negative integer", key);
        free(p);
        return c->status;
    }
    *out = d > 1e18 ? (uint64_t)1e18 : (uint64_t)d;
    return KITE_OK;
}

/* ---- $ref ---- */

static bool hex_digit(char ch) { return (ch >= '0' && ch <= '9') || ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f'); }

/* The target of a local $ref ("#" or "#/a/b" with ~0 ~1 and %XX decoded), or NULL with the failure set. */
static json_t *resolve_ref(compiler *c, const char *ref, const char *ptr) {
    if (ref[0] != '#') {
        fail(c, KITE_ERR_UNSUPPORTED, ptr, "only local references (\"#/...\") are supported, not \"%.100s\"", ref);
        return NULL;
    }
    json_t *node = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') {
        fail(c, KITE_ERR_UNSUPPORTED, ptr, "anchor references (\"%.100s\") are not supported", ref);
        return NULL;
    }
    while (*p == '/') {
        p++;
        const char *end = strchr(p, '/');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        char *token = malloc(n + 1);
        if (!token) {
            fail_nomem(c);
            return NULL;
        }
        size_t w = 0;
        for (size_t i = 0; i < n; i++) {
            if (p[i] == '~' && i + 1 < n && (p[i + 1] == '0' || p[i + 1] == '1')) {
                token[w++] = p[i + 1] == '0' ? '~' : '/';
                i++;
            } else if (p[i] == '%' && i + 2 < n && hex_digit(p[i + 1]) && hex_digit(p[i + 2])) {
                char hex[3] = {p[i + 1], p[i + 2], 0};
                token[w++] = (char)strtol(hex, NULL, 16);
                i += 2;
            } else {
                token[w++] = p[i];
            }
        }
        token[w] = 0;
        json_t *next = NULL;
        if (json_is_object(node)) {
            next = json_object_get(node, token);
        } else if (json_is_array(node)) {
            char *endp;
            unsigned long idx = strtoul(token, &endp, 10);
            if (*token && !*endp) next = json_array_get(node, idx);
        }
        free(token);
        if (!next) {
            fail(c, KITE_ERR_INVALID_ARG, ptr, "the reference \"%.200s\" names nothing in the schema", ref);
            return NULL;
        }
        node = next;
        p += n;
    }
    return node;
}

/* ---- numbers ---- */

/* A non-negative decimal: integer digits (no leading zeros; "0" for zero) and fraction digits without
 * trailing zeros. */
typedef struct decimal {
    char ip[MAX_DECIMAL_DIGITS + 2];
    char fp[MAX_DECIMAL_DIGITS + 2];
} decimal;

/* The magnitude of a finite double, in the shortest digits that read back as the same double. */
static bool decimal_from_double(double d, decimal *out) {
    d = fabs(d);
    char buf[64];
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, d);
        if (strtod(buf, NULL) == d) break;
    }
    /* buf = D.DDDe[+-]XX */
    char digits[32];
    size_t nd = 0;
    const char *q = buf;
    for (; *q && *q != 'e'; q++)
        if (*q >= '0' && *q <= '9') digits[nd++] = *q;
    int exp10 = *q == 'e' ? atoi(q + 1) : 0;
    /* value = 0.digits * 10^(exp10 + 1) */
    int point = exp10 + 1; /* digits before the decimal point */
    /* the integer part takes point digits, the fraction -point zeros and then the digits */
    if (point > MAX_DECIMAL_DIGITS || (point < 0 && (size_t)-point + nd > MAX_DECIMAL_DIGITS)) return false;
    size_t ni = 0, nf = 0;
    for (int i = 0; i < point; i++) out->ip[ni++] = i < (int)nd ? digits[i] : '0';
    if (point < 0)
        for (int i = 0; i < -point; i++) out->fp[nf++] = '0';
    for (int i = point < 0 ? 0 : point; i < (int)nd; i++) out->fp[nf++] = digits[i];
    out->ip[ni] = 0;
    out->fp[nf] = 0;
    /* normalize: no leading zeros in ip, no trailing zeros in fp */
    char *ip = out->ip;
    while (ip[0] == '0' && ip[1]) ip++;
    if (!*ip) ip = "0";
    memmove(out->ip, ip, strlen(ip) + 1);
    size_t fl = strlen(out->fp);
    while (fl && out->fp[fl - 1] == '0') out->fp[--fl] = 0;
    if (strlen(out->ip) + fl > MAX_DECIMAL_DIGITS) return false;
    return true;
}

static bool all_char(const char *s, size_t n, char ch) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ch) return false;
    return true;
}

static void put_digit_class(gtext *out, char lo, char hi) {
    if (lo == hi) gtext_printf(out, "\"%c\"", lo);
    else gtext_printf(out, "[%c-%c]", lo, hi);
}

/* Digit strings of length n from a to b (same length, a <= b, leading zeros allowed inside). */
static void same_length_range(gtext *out, const char *a, const char *b, size_t n) {
    size_t i = 0;
    while (i < n && a[i] == b[i]) i++;
    if (i > 0) {
        gtext_puts(out, "\"");
        gtext_putn(out, a, i);
        gtext_puts(out, "\"");
        if (i == n) return;
        gtext_puts(out, " ");
    }
    size_t rest = n - i - 1;
    if (rest == 0) {
        put_digit_class(out, a[i], b[i]);
        return;
    }
    bool low_full = all_char(a + i + 1, rest, '0'), high_full = all_char(b + i + 1, rest, '9');
    char mid_lo = low_full ? a[i] : (char)(a[i] + 1), mid_hi = high_full ? b[i] : (char)(b[i] - 1);
    gtext_puts(out, "(");
    bool first = true;
    if (!low_full) {
        char nines[MAX_DECIMAL_DIGITS + 2];
        memset(nines, '9', rest);
        gtext_printf(out, "\"%c\" ", a[i]);
        bool group = true;
        if (group) gtext_puts(out, "(");
        same_length_range(out, a + i + 1, nines, rest);
        if (group) gtext_puts(out, ")");
        first = false;
    }
    if (mid_lo <= mid_hi) {
        if (!first) gtext_puts(out, " | ");
        put_digit_class(out, mid_lo, mid_hi);
        gtext_printf(out, " [0-9]{%zu}", rest);
        first = false;
    }
    if (!high_full) {
        char zeros[MAX_DECIMAL_DIGITS + 2];
        memset(zeros, '0', rest);
        if (!first) gtext_puts(out, " | ");
        gtext_printf(out, "\"%c\" (", b[i]);
        same_length_range(out, zeros, b + i + 1, rest);
        gtext_puts(out, ")");
    }
    gtext_puts(out, ")");
}

/* Non-negative integers from lo to hi, written without leading zeros (decimal strings, lo <= hi). */
static void uint_range(gtext *out, const char *lo, const char *hi) {
    size_t nl = strlen(lo), nh = strlen(hi);
    gtext_puts(out, "(");
    for (size_t d = nl; d <= nh; d++) {
        char a[MAX_DECIMAL_DIGITS + 2], b[MAX_DECIMAL_DIGITS + 2];
        if (d == nl) memcpy(a, lo, d);
        else a[0] = '1', memset(a + 1, '0', d - 1);
        if (d == nh) memcpy(b, hi, d);
        else memset(b, '9', d);
        if (d > nl) gtext_puts(out, " | ");
        bool full = d > 1 && a[0] == '1' && all_char(a + 1, d - 1, '0') && all_char(b, d, '9');
        if (!full) {
            same_length_range(out, a, b, d);
            continue;
        }
        /* every number of d..d_end digits: one repetition */
        size_t d_end = d;
        while (d_end + 1 < nh || (d_end + 1 == nh && all_char(hi, nh, '9'))) d_end++;
        gtext_printf(out, "[1-9] [0-9]{%zu,%zu}", d - 1, d_end - 1);
        d = d_end;
    }
    gtext_puts(out, ")");
}

/* Compares decimal strings without leading zeros as integers. */
static int uint_cmp(const char *a, const char *b) {
    size_t na = strlen(a), nb = strlen(b);
    if (na != nb) return na < nb ? -1 : 1;
    int r = strcmp(a, b);
    return (r > 0) - (r < 0);
}

/* a + delta (delta = +1 or -1, a > 0 for -1) into out. */
static void uint_step(const char *a, int delta, char *out) {
    size_t n = strlen(a);
    char buf[MAX_DECIMAL_DIGITS + 3];
    memcpy(buf + 1, a, n + 1);
    buf[0] = '0';
    size_t i = n;
    if (delta > 0) {
        while (buf[i] == '9') buf[i--] = '0';
        buf[i]++;
    } else {
        while (buf[i] == '0') buf[i--] = '9';
        buf[i]--;
    }
    const char *s = buf;
    while (s[0] == '0' && s[1]) s++;
    memcpy(out, s, strlen(s) + 1);
}

/* One side of a fraction bound: digit string (trailing zeros stripped), strict or not. */
typedef struct frac_bound {
    bool on;
    const char *d;
    bool strict;
} frac_bound;

/* Non-empty digit strings T with lo <= 0.T <= hi (each side optional, strict or not). Returns false
 * (nothing written) when there are none. */
static bool fraction_digits(gtext *out, frac_bound lo, frac_bound hi) {
    if (lo.on && !*lo.d && !lo.strict) lo.on = false;
    if (!lo.on && !hi.on) {
        gtext_puts(out, "[0-9]{1,16}");
        return true;
    }
    if (hi.on && !*hi.d) {
        if (hi.strict || lo.on) return false; /* 0.T < 0, or 0 < 0.T <= 0 */
        gtext_puts(out, "[0]{1,16}");
        return true;
    }
    if (!hi.on && lo.on && !*lo.d) { /* 0.T > 0: some non-zero digit */
        gtext_puts(out, "[0]{0,15} [1-9] [0-9]{0,15}");
        return true;
    }
    char lo0 = lo.on && *lo.d ? lo.d[0] : '0', hi0 = hi.on ? hi.d[0] : '9';
    if (lo0 > hi0) return false;
    gtext alts = {0};
    size_t n_alts = 0;
    /* first digits with no constraint left on the rest */
    char free_lo = lo.on ? (char)(lo0 + 1) : '0', free_hi = hi.on ? (char)(hi0 - 1) : '9';
    if (free_lo <= free_hi) {
        put_digit_class(&alts, free_lo, free_hi);
        gtext_puts(&alts, " [0-9]{0,15}");
        n_alts++;
    }
    /* first digit lo0 and/or hi0, with the rest bounded */
    char edges[2] = {lo0, hi0};
    int n_edges = lo0 == hi0 ? 1 : 2;
    for (int k = 0; k < n_edges; k++) {
        char x = edges[k];
        bool lo_binds = lo.on && x == lo0, hi_binds = hi.on && x == hi0;
        if (!lo_binds && !hi_binds) continue; /* covered by the free range */
        frac_bound rest_lo = {lo_binds, lo_binds && *lo.d ? lo.d + 1 : "", lo.strict};
        frac_bound rest_hi = {hi_binds, hi_binds ? hi.d + 1 : "", hi.strict};
        /* T = x alone: 0.x vs the bounds */
        bool alone_ok = (!rest_lo.on || (!*rest_lo.d && !rest_lo.strict)) && (!rest_hi.on || *rest_hi.d || !rest_hi.strict);
        gtext tail = {0};
        bool tail_ok = fraction_digits(&tail, rest_lo, rest_hi);
        if (alone_ok || tail_ok) {
            if (n_alts++) gtext_puts(&alts, " | ");
            gtext_printf(&alts, "\"%c\"", x);
            if (tail_ok) gtext_printf(&alts, alone_ok ? " ( %s )?" : " ( %s )", tail.buf);
        }
        if (tail.failed) alts.failed = true;
        gtext_free(&tail);
    }
    bool ok = n_alts > 0;
    if (ok) {
        if (n_alts > 1) gtext_printf(out, "( %s )", alts.buf);
        else gtext_puts(out, alts.buf);
    }
    if (alts.failed) out->failed = true;
    gtext_free(&alts);
    return ok;
}

/* The optional fraction after an integer part: ("." T)? with T bounded. Returns false when no fraction,
 * not even none, fits; *empty_ok tells whether no fraction at all fits. */
static bool fraction_part(gtext *out, frac_bound lo, frac_bound hi, bool *wrote) {
    bool empty_ok = (!lo.on || (!*lo.d && !lo.strict)) && (!hi.on || *hi.d || !hi.strict);
    gtext digits = {0};
    bool some = fraction_digits(&digits, lo, hi);
    *wrote = some;
    if (some) gtext_printf(out, empty_ok ? "( \".\" %s )?" : "\".\" %s", digits.buf);
    if (digits.failed) out->failed = true;
    gtext_free(&digits);
    return some || empty_ok;
}

/* One side of a magnitude range. */
typedef struct mag_bound {
    bool on;
    decimal v;
    bool strict;
} mag_bound;

/* Magnitudes (numbers without sign) in [lo, hi], integers or decimals without exponent. Returns
 * false (nothing written) when the range is empty. */
static bool magnitude_range(gtext *out, mag_bound lo, mag_bound hi, bool integer) {
    if (!lo.on) lo = (mag_bound){true, {"0", ""}, false};
    if (hi.on) {
        int ci = uint_cmp(lo.v.ip, hi.v.ip);
        int cf = ci ? ci : strcmp(lo.v.fp, hi.v.fp) > 0 ? 1 : strcmp(lo.v.fp, hi.v.fp) < 0 ? -1 : 0;
        if (cf > 0 || (cf == 0 && (lo.strict || hi.strict))) return false;
    }
    char top[MAX_DECIMAL_DIGITS + 2];
    size_t top_digits = strlen(lo.v.ip) > INT_DIGITS ? strlen(lo.v.ip) : INT_DIGITS;
    memset(top, '9', top_digits);
    top[top_digits] = 0;
    if (integer) { /* bounds are integers already made inclusive */
        uint_range(out, lo.v.ip, hi.on ? hi.v.ip : top);
        return true;
    }
    gtext alts = {0};
    size_t n_alts = 0;
    frac_bound none = {false, "", false};
    frac_bound flo = {true, lo.v.fp, lo.strict}, fhi = {hi.on, hi.v.fp, hi.strict};
    bool wrote;
    if (hi.on && uint_cmp(lo.v.ip, hi.v.ip) == 0) {
        gtext frac = {0};
        if (fraction_part(&frac, flo, fhi, &wrote)) {
            gtext_printf(&alts, "\"%s\"%s%s", lo.v.ip, wrote ? " " : "", wrote ? frac.buf : "");
            n_alts++;
        }
        gtext_free(&frac);
    } else {
        gtext frac = {0};
        if (fraction_part(&frac, flo, none, &wrote)) {
            gtext_printf(&alts, "\"%s\"%s%s", lo.v.ip, wrote ? " " : "", wrote ? frac.buf : "");
            n_alts++;
        }
        gtext_free(&frac);
        char from[MAX_DECIMAL_DIGITS + 3], to[MAX_DECIMAL_DIGITS + 3];
        uint_step(lo.v.ip, +1, from);
        if (hi.on) {
            if (strcmp(hi.v.ip, "0") != 0) uint_step(hi.v.ip, -1, to);
            else strcpy(to, "0");
        } else {
            strcpy(to, top);
        }
        if ((!hi.on || strcmp(hi.v.ip, "0") != 0) && uint_cmp(from, to) <= 0) {
            if (n_alts++) gtext_puts(&alts, " | ");
            uint_range(&alts, from, to);
            gtext_puts(&alts, " ( \".\" [0-9]{1,16} )?");
        }
        if (hi.on) {
            gtext frac2 = {0};
            if (fraction_part(&frac2, none, fhi, &wrote)) {
                if (n_alts++) gtext_puts(&alts, " | ");
                gtext_printf(&alts, "\"%s\"%s%s", hi.v.ip, wrote ? " " : "", wrote ? frac2.buf : "");
            }
            gtext_free(&frac2);
        }
    }
    bool ok = n_alts > 0;
    if (ok) gtext_printf(out, n_alts > 1 ? "( %s )" : "%s", alts.buf);
    if (alts.failed) out->failed = true;
    gtext_free(&alts);
    return ok;
}

/* A numeric bound as read from the schema: value and strictness. */
typedef struct num_bound {
    bool on;
    double v;
    bool strict;
} num_bound;

static int read_bound(compiler *c, json_t *s, const char *ptr, const char *key, bool strict, bool lower, num_bound *b) {
    json_t *v = json_object_get(s, key);
    if (!v) return KITE_OK;
    char *p = ptr_join(ptr, key);
    if (!p) return fail_nomem(c);
    if (!json_is_number(v)) {
        fail(c, KITE_ERR_INVALID_ARG, p, "%s must be a number", key);
        free(p);
        return c->status;
    }
    double d = json_number_value(v);
    free(p);
    if (!isfinite(d)) return KITE_OK;
    /* keep the tighter of minimum / exclusiveMinimum (and of the maxima) */
    bool tighter = !b->on || (lower ? d > b->v : d < b->v) || (d == b->v && strict);
    if (tighter) *b = (num_bound){true, d, strict};
    return KITE_OK;
}

/* Writes the expression for a number or integer with the schema's bounds. */
static int compile_number(compiler *c, json_t *s, const char *ptr, bool integer, gtext *out) {
    num_bound lo = {0}, hi = {0};
    if (read_bound(c, s, ptr, "minimum", false, true, &lo) || read_bound(c, s, ptr, "exclusiveMinimum", true, true, &lo) ||
        read_bound(c, s, ptr, "maximum", false, false, &hi) || read_bound(c, s, ptr, "exclusiveMaximum", true, false, &hi))
        return c->status;
    const char *bound_key = lo.on ? (lo.strict ? "exclusiveMinimum" : "minimum") : (hi.strict ? "exclusiveMaximum" : "maximum");
    char *lo_ptr = ptr_join(ptr, bound_key);
    if (!lo_ptr) return fail_nomem(c);
    if (!lo.on && !hi.on) {
        free(lo_ptr);
        put_prim(c, out, integer ? P_INTEGER : P_NUMBER);
        return KITE_OK;
    }
    if (integer) {
        /* inclusive integer bounds */
        if (lo.on) lo = (num_bound){true, lo.strict ? floor(lo.v) + 1 : ceil(lo.v), false};
        if (hi.on) hi = (num_bound){true, hi.strict ? ceil(hi.v) - 1 : floor(hi.v), false};
    } else {
        /* an exclusive bound b != 0 becomes the inclusive nextafter(b): no decimal above it rounds to b */
        if (lo.on && lo.strict && lo.v != 0) lo = (num_bound){true, nextafter(lo.v, INFINITY), false};
        if (hi.on && hi.strict && hi.v != 0) hi = (num_bound){true, nextafter(hi.v, -INFINITY), false};
    }
    if ((lo.on && fabs(lo.v) >= 1e16 && integer) || (hi.on && fabs(hi.v) >= 1e16 && integer)) {
        fail(c, KITE_ERR_UNSUPPORTED, lo_ptr, "integer bounds beyond 1e16 are not supported");
        free(lo_ptr);
        return c->status;
    }
    if (lo.on && hi.on && (lo.v > hi.v || (lo.v == hi.v && (lo.strict || hi.strict)))) {
        fail(c, KITE_ERR_INVALID_ARG, lo_ptr, "no %s satisfies the bounds (minimum %g above maximum %g)",
             integer ? "integer" : "number", lo.v, hi.v);
        free(lo_ptr);
        return c->status;
    }
    mag_bound pos_lo = {0}, pos_hi = {0}, neg_lo = {0}, neg_hi = {0};
    bool has_pos = !hi.on || hi.v > 0 || (hi.v == 0 && !hi.strict);
    bool has_neg = !lo.on || lo.v < 0;
    bool ok = true;
    if (lo.on && (lo.v > 0 || (lo.v == 0 && lo.strict))) {
        pos_lo.on = true;
        pos_lo.strict = lo.strict;
        ok &= decimal_from_double(lo.v, &pos_lo.v);
    }
    if (hi.on && hi.v >= 0) {
        pos_hi.on = true;
        pos_hi.strict = hi.strict;
        ok &= decimal_from_double(hi.v, &pos_hi.v);
    }
    /* negative side: magnitude m = -x, with m > 0 always ("-0" is left to the positive side) */
    if (hi.on && hi.v < 0) {
        neg_lo.on = true;
        neg_lo.strict = hi.strict;
        ok &= decimal_from_double(hi.v, &neg_lo.v);
    } else {
        neg_lo = (mag_bound){true, {"0", ""}, true};
        if (integer) neg_lo = (mag_bound){true, {"1", ""}, false};
    }
    if (lo.on && lo.v < 0) {
        neg_hi.on = true;
        neg_hi.strict = lo.strict;
        ok &= decimal_from_double(lo.v, &neg_hi.v);
    }
    if (!ok) {
        fail(c, KITE_ERR_UNSUPPORTED, lo_ptr, "bounds this large or this small are not supported");
        free(lo_ptr);
        return c->status;
    }
    gtext pos = {0}, neg = {0};
    bool pos_ok = has_pos && magnitude_range(&pos, pos_lo, pos_hi, integer);
    bool neg_ok = has_neg && magnitude_range(&neg, neg_lo, neg_hi, integer);
    if (!pos_ok && !neg_ok) {
        fail(c, KITE_ERR_INVALID_ARG, lo_ptr, "no %s satisfies the bounds", integer ? "integer" : "number");
    } else if (pos_ok && neg_ok) {
        gtext_printf(out, "( %s | \"-\" %s )", pos.buf, neg.buf);
    } else if (pos_ok) {
        gtext_puts(out, pos.buf);
    } else {
        gtext_printf(out, "\"-\" %s", neg.buf);
    }
    if (pos.failed || neg.failed) out->failed = true;
    gtext_free(&pos);
    gtext_free(&neg);
    free(lo_ptr);
    return c->status;
}

/* ---- strings ---- */

static int compile_string(compiler *c, json_t *s, const char *ptr, gtext *out) {
    json_t *format = json_object_get(s, "format"), *pattern = json_object_get(s, "pattern");
    bool has_min, has_max;
    uint64_t min = 0, max = 0;
    if (get_count(c, s, ptr, "minLength", &has_min, &min) || get_count(c, s, ptr, "maxLength", &has_max, &max)) return c->status;
    if (format && pattern) {
        char *p = ptr_join(ptr, "pattern");
        fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "a string with both format and pattern is not supported");
        free(p);
        return c->status;
    }
    if ((format || pattern) && (has_min || has_max)) {
        char *p = ptr_join(ptr, has_min ? "minLength" : "maxLength");
        fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "length bounds together with %s are not supported", format ? "format" : "pattern");
        free(p);
        return c->status;
    }
    if (format) {
        char *p = ptr_join(ptr, "format");
        if (!p) return fail_nomem(c);
        static const struct {
            const char *name;
            prim rule;
        } formats[] = {{"date", P_DATE}, {"time", P_TIME}, {"date-time", P_DATE_TIME}, {"uuid", P_UUID},
                       {"email", P_EMAIL}, {"ipv4", P_IPV4}};
        const char *name = json_string_value(format);
        if (!name) fail(c, KITE_ERR_INVALID_ARG, p, "format must be a string");
        size_t i = 0;
        for (; name && i < sizeof formats / sizeof *formats; i++)
            if (strcmp(name, formats[i].name) == 0) break;
        if (name && i == sizeof formats / sizeof *formats)
            fail(c, KITE_ERR_UNSUPPORTED, p, "the format \"%.60s\" is not supported (date, time, date-time, uuid, email, ipv4 are)", name);
        if (!c->status) {
            gtext_puts(out, "\"\\\"\" ");
            put_prim(c, out, formats[i].rule);
            gtext_puts(out, " \"\\\"\"");
        }
        free(p);
        return c->status;
    }
    if (pattern) {
        char *p = ptr_join(ptr, "pattern");
        if (!p) return fail_nomem(c);
        if (!json_is_string(pattern)) {
            fail(c, KITE_ERR_INVALID_ARG, p, "pattern must be a string");
            free(p);
            return c->status;
        }
        char who[300];
        snprintf(who, sizeof who, "json schema: %.250s: pattern", p);
        use_prim(c, P_CHAR);
        gtext_puts(out, "\"\\\"\" ");
        int rc = regex_compile_expr(json_string_value(pattern), json_string_length(pattern), REGEX_JSON_STRING, true,
                                    PRIMS[P_CHAR].name, who, out, c->e);
        gtext_puts(out, " \"\\\"\"");
        free(p);
        if (rc) c->status = rc;
        return c->status;
    }
    if (has_max && max > MAX_COUNT) max = MAX_COUNT; /* fewer strings: still sound */
    if (has_min && min > MAX_COUNT) {
        char *p = ptr_join(ptr, "minLength");
        fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "minLength over %d is not supported", MAX_COUNT);
        free(p);
        return c->status;
    }
    if (has_max && min > max) {
        char *p = ptr_join(ptr, "minLength");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "minLength %llu is above maxLength %llu", (unsigned long long)min,
             (unsigned long long)max);
        free(p);
        return c->status;
    }
    if (!has_min && !has_max) {
        put_prim(c, out, P_STRING);
        return KITE_OK;
    }
    use_prim(c, P_CHAR);
    gtext_puts(out, "\"\\\"\" ");
    if (!has_max) gtext_printf(out, "json-char{%llu,}", (unsigned long long)min);
    else if (max == 0) gtext_puts(out, "");
    else if (min == max) gtext_printf(out, "json-char{%llu}", (unsigned long long)min);
    else gtext_printf(out, "json-char{%llu,%llu}", (unsigned long long)min, (unsigned long long)max);
    gtext_puts(out, max == 0 && has_max ? "\"\\\"\"" : " \"\\\"\"");
    return KITE_OK;
}

/* ---- the recursive compiler ---- */

static int compile_schema(compiler *c, json_t *s, const char *ptr, const char *hint, gtext *out);

/* Compiles s into a rule of its own and appends the rule's name (objects, arrays, array items). */
static int compile_to_rule(compiler *c, json_t *s, const char *ptr, const char *hint, gtext *out) {
    gtext body = {0};
    int rc = compile_schema(c, s, ptr, hint, &body);
    if (!rc) {
        /* a plain rule name needs no rule of its own */
        bool word = body.buf && *body.buf;
        for (const char *q = body.buf; word && *q; q++) word = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-';
        if (word) {
            gtext_puts(out, body.buf);
        } else {
            char *name = new_rule_name(c, hint);
            if (name) {
                define_rule(c, name, &body);
                gtext_puts(out, name);
            }
        }
    }
    gtext_free(&body);
    return c->status;
}

/* The JSON type names a value has for a "type" check. */
static bool value_has_type(json_t *v, const char *type) {
    if (strcmp(type, "null") == 0) return json_is_null(v);
    if (strcmp(type, "boolean") == 0) return json_is_boolean(v);
    if (strcmp(type, "string") == 0) return json_is_string(v);
    if (strcmp(type, "object") == 0) return json_is_object(v);
    if (strcmp(type, "array") == 0) return json_is_array(v);
    if (strcmp(type, "number") == 0) return json_is_number(v);
    if (strcmp(type, "integer") == 0) {
        if (json_is_integer(v)) return true;
        double d = json_is_real(v) ? json_real_value(v) : 0.5;
        return json_is_real(v) && d == floor(d) && fabs(d) < 1e300;
    }
    return false;
}

static bool types_allow(json_t *type, json_t *v) {
    if (!type) return true;
    if (json_is_string(type)) return value_has_type(v, json_string_value(type));
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) if (json_is_string(t) && value_has_type(v, json_string_value(t))) return true;
    return false;
}

static int compile_enum(compiler *c, json_t *s, const char *ptr, gtext *out) {
    json_t *en = json_object_get(s, "enum"), *cst = json_object_get(s, "const"), *type = json_object_get(s, "type");
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) {
        if (!is_constraint(key) || !strcmp(key, "enum") || !strcmp(key, "const") || !strcmp(key, "type")) continue;
        char *p = ptr_join(ptr, key);
        fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "\"%s\" next to enum or const is not supported", key);
        free(p);
        return c->status;
    }
    char *p = ptr_join(ptr, en ? "enum" : "const");
    if (!p) return fail_nomem(c);
    if (en && !json_is_array(en)) {
        fail(c, KITE_ERR_INVALID_ARG, p, "enum must be an array");
        free(p);
        return c->status;
    }
    size_t n = 0;
    gtext alts = {0};
    if (en) {
        size_t i;
        json_array_foreach(en, i, v) {
            if (!types_allow(type, v) || (cst && !json_equal(v, cst))) continue;
            if (n++) gtext_puts(&alts, " | ");
            put_json_value_literal(c, &alts, v);
        }
    } else if (types_allow(type, cst)) {
        put_json_value_literal(c, &alts, cst);
        n = 1;
    }
    if (n == 0) fail(c, KITE_ERR_INVALID_ARG, p, en && json_array_size(en) == 0 ? "enum is empty: no value can match" : "no value of the enum / const has the schema's type");
    else gtext_printf(out, n > 1 ? "( %s )" : "%s", alts.buf);
    if (alts.failed) out->failed = true;
    gtext_free(&alts);
    free(p);
    return c->status;
}

/* ---- allOf ---- */

static json_t *resolve_top_refs(compiler *c, json_t *s, const char *ptr);

/* Intersects two "type" values (string or array); NULL = no type in common. */
static json_t *intersect_types(json_t *a, json_t *b) {
    json_t *out = json_array();
    if (!out) return NULL;
    json_t *la = json_is_string(a) ? json_pack("[O]", a) : json_incref(a);
    json_t *lb = json_is_string(b) ? json_pack("[O]", b) : json_incref(b);
    size_t i, j;
    json_t *ta, *tb;
    json_array_foreach(la, i, ta) {
        json_array_foreach(lb, j, tb) {
            const char *sa = json_string_value(ta), *sb = json_string_value(tb);
            if (!sa || !sb) continue;
            const char *common = NULL;
            if (!strcmp(sa, sb)) common = sa;
            else if ((!strcmp(sa, "integer") && !strcmp(sb, "number")) || (!strcmp(sa, "number") && !strcmp(sb, "integer"))) common = "integer";
            if (common) json_array_append_new(out, json_string(common));
        }
    }
    json_decref(la);
    json_decref(lb);
    if (json_array_size(out) == 0) {
        json_decref(out);
        return NULL;
    }
    return out;
}

static bool is_restrictive_ap(json_t *ap) { return ap && !json_is_true(ap); }

/* Values in v, counting up to limit. */
static size_t count_values(json_t *v, size_t limit) {
    size_t n = 1;
    if (json_is_object(v)) {
        const char *k;
        json_t *x;
        json_object_foreach(v, k, x) if (n < limit) n += count_values(x, limit - n);
    } else if (json_is_array(v)) {
        size_t i;
        json_t *x;
        json_array_foreach(v, i, x) if (n < limit) n += count_values(x, limit - n);
    }
    return n;
}

/* Charges a deep copy of v to the expansion budget; false (failure set) past it. */
static bool charge_copy(compiler *c, json_t *v, const char *ptr) {
    c->copied += count_values(v, MAX_COPIED + 1);
    if (c->copied <= MAX_COPIED) return true;
    fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema is too large once $ref / allOf are expanded (over %d values)", MAX_COPIED);
    return false;
}

/* Merges b into a copy of a (allOf semantics). Returns a new reference, or NULL with c->status set. */
static json_t *merge_two(compiler *c, json_t *a, json_t *b, const char *ptr) {
    if (!charge_copy(c, a, ptr) || !charge_copy(c, b, ptr)) return NULL;
    json_t *m = json_deep_copy(a);
    if (!m) {
        fail_nomem(c);
        return NULL;
    }
    json_t *ap_a = json_object_get(a, "additionalProperties"), *ap_b = json_object_get(b, "additionalProperties");
    json_t *props_a = json_object_get(a, "properties"), *props_b = json_object_get(b, "properties");
    const char *key;
    json_t *vb;
    json_object_foreach(b, key, vb) {
        json_t *va = json_object_get(a, key);
        if (!va || is_annotation(key)) {
            if (!va) json_object_set(m, key, vb);
            continue;
        }
        if (!strcmp(key, "type")) {
            json_t *t = intersect_types(va, vb);
            if (!t) {
                fail(c, KITE_ERR_INVALID_ARG, ptr, "allOf: the schemas have no type in common");
                break;
            }
            json_object_set_new(m, key, t);
        } else if (!strcmp(key, "required")) {
            json_t *r = json_deep_copy(va);
            size_t i;
            json_t *name;
            json_array_foreach(vb, i, name) {
                bool have = false;
                size_t j;
                json_t *x;
                json_array_foreach(r, j, x) have |= json_equal(x, name);
                if (!have) json_array_append(r, name);
            }
            json_object_set_new(m, key, r);
        } else if (!strcmp(key, "properties")) {
            json_t *props = json_object_get(m, "properties");
            const char *pk;
            json_t *ps;
            json_object_foreach(vb, pk, ps) {
                json_t *pa = json_object_get(va, pk);
                if (pa) json_object_set_new(props, pk, json_pack("{s:[O,O]}", "allOf", pa, ps));
                else json_object_set(props, pk, ps);
            }
        } else if (!strcmp(key, "additionalProperties") || !strcmp(key, "items")) {
            if (json_is_true(va)) json_object_set(m, key, vb);
            else if (json_is_true(vb) || json_equal(va, vb)) continue;
            else if (json_is_false(va) || json_is_false(vb)) json_object_set_new(m, key, json_false());
            else if (json_is_object(va) && json_is_object(vb)) json_object_set_new(m, key, json_pack("{s:[O,O]}", "allOf", va, vb));
            else {
                fail(c, KITE_ERR_UNSUPPORTED, ptr, "allOf: cannot merge two \"%s\"", key);
                break;
            }
        } else if (!strcmp(key, "minimum") || !strcmp(key, "exclusiveMinimum") || !strcmp(key, "minLength") || !strcmp(key, "minItems")) {
            if (json_is_number(va) && json_is_number(vb) && json_number_value(vb) > json_number_value(va)) json_object_set(m, key, vb);
        } else if (!strcmp(key, "maximum") || !strcmp(key, "exclusiveMaximum") || !strcmp(key, "maxLength") || !strcmp(key, "maxItems")) {
            if (json_is_number(va) && json_is_number(vb) && json_number_value(vb) < json_number_value(va)) json_object_set(m, key, vb);
        } else if (!strcmp(key, "allOf")) {
            json_t *all = json_deep_copy(va);
            json_array_extend(all, vb);
            json_object_set_new(m, key, all);
        } else if (!json_equal(va, vb)) {
            fail(c, KITE_ERR_UNSUPPORTED, ptr, "allOf: cannot merge two different \"%s\"", key);
            break;
        }
    }
    if (c->status) {
        json_decref(m);
        return NULL;
    }
    /* a restrictive additionalProperties on one side governs the other side's extra properties */
    json_t *props = json_object_get(m, "properties");
    json_t *required = json_object_get(m, "required");
    for (int side = 0; side < 2 && props && !c->status; side++) {
        json_t *ap = side ? ap_b : ap_a, *own = side ? props_b : props_a;
        if (!is_restrictive_ap(ap)) continue;
        void *iter = json_object_iter(props);
        while (iter) {
            const char *pk = json_object_iter_key(iter);
            json_t *ps = json_object_iter_value(iter);
            void *next = json_object_iter_next(props, iter);
            if (!own || !json_object_get(own, pk)) {
                if (json_is_false(ap)) {
                    bool needed = false;
                    size_t i;
                    json_t *r;
                    json_array_foreach(required, i, r) needed |= json_is_string(r) && !strcmp(json_string_value(r), pk);
                    if (needed) {
                        fail(c, KITE_ERR_INVALID_ARG, ptr, "allOf: \"%.100s\" is required but another schema forbids additional properties", pk);
                        break;
                    }
                    json_object_del(props, pk);
                } else {
                    json_object_set_new(props, pk, json_pack("{s:[O,O]}", "allOf", ps, ap));
                }
            }
            iter = next;
        }
    }
    if (c->status) {
        json_decref(m);
        return NULL;
    }
    return m;
}

/* s with a top-level $ref (and allOf) folded in, as one schema without $ref / allOf at its top. The
 * result is borrowed (owned by the schema or by c->scratch). */
static json_t *resolve_top_refs_at_depth(compiler *c, json_t *s, const char *ptr);
static json_t *resolve_top_refs(compiler *c, json_t *s, const char *ptr) {
    if (c->depth >= MAX_DEPTH) {
        fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema nests $ref / allOf more than %d levels deep", MAX_DEPTH);
        return NULL;
    }
    c->depth++;
    json_t *flat = resolve_top_refs_at_depth(c, s, ptr);
    c->depth--;
    return flat;
}

static json_t *resolve_top_refs_at_depth(compiler *c, json_t *s, const char *ptr) {
    for (int hops = 0; json_is_object(s) && (json_object_get(s, "$ref") || json_object_get(s, "allOf")); hops++) {
        if (hops > MAX_DEPTH) {
            fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema nests $ref / allOf more than %d levels deep", MAX_DEPTH);
            return NULL;
        }
        if (++c->work > MAX_WORK) {
            fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema is too large once $ref / allOf are expanded (more than %d subschemas)", MAX_WORK);
            return NULL;
        }
        if (!charge_copy(c, s, ptr)) return NULL;
        json_t *rest = json_deep_copy(s);
        if (!rest) {
            fail_nomem(c);
            return NULL;
        }
        json_t *parts = json_array();
        json_t *ref = json_object_get(s, "$ref");
        if (ref) {
            if (!json_is_string(ref)) {
                fail(c, KITE_ERR_INVALID_ARG, ptr, "$ref must be a string");
                json_decref(rest);
                json_decref(parts);
                return NULL;
            }
            json_t *target = resolve_ref(c, json_string_value(ref), ptr);
            if (!target) {
                json_decref(rest);
                json_decref(parts);
                return NULL;
            }
            json_array_append(parts, target);
            json_object_del(rest, "$ref");
        }
        json_t *all = json_object_get(s, "allOf");
        if (all) {
            if (!json_is_array(all) || json_array_size(all) == 0) {
                fail(c, KITE_ERR_INVALID_ARG, ptr, "allOf must be a non-empty array");
                json_decref(rest);
                json_decref(parts);
                return NULL;
            }
            json_array_extend(parts, all);
            json_object_del(rest, "allOf");
        }
        json_t *merged = rest;
        size_t i;
        json_t *part;
        json_array_foreach(parts, i, part) {
            if (json_is_true(part)) continue;
            if (json_is_false(part)) {
                fail(c, KITE_ERR_INVALID_ARG, ptr, "allOf contains false: no value can match");
                break;
            }
            if (!json_is_object(part)) {
                fail(c, KITE_ERR_INVALID_ARG, ptr, "allOf items must be schemas");
                break;
            }
            json_t *flat = resolve_top_refs(c, part, ptr);
            if (!flat) break;
            json_t *next = merge_two(c, merged, flat, ptr);
            json_decref(merged);
            merged = next;
            if (!merged) break;
        }
        json_decref(parts);
        if (c->status) {
            json_decref(merged);
            return NULL;
        }
        json_array_append_new(c->scratch, merged);
        s = merged;
    }
    return s;
}

/* ---- objects ---- */

typedef struct member {
    const char *name; /* NULL = the additional-properties slot */
    bool required;
    char *kv; /* GBNF for `"name" ws ":" ws value` */
} member;

/* A trie node over the declared property names, for keys that must differ from all of them. */
typedef struct trie {
    uint32_t cp;
    bool terminal;
    struct trie *kids;
    size_t n_kids;
} trie;

static void trie_free(trie *t) {
    for (size_t i = 0; i < t->n_kids; i++) trie_free(&t->kids[i]);
    free(t->kids);
}

static bool trie_insert(trie *t, const char *s, size_t n) {
    size_t i = 0;
    while (i < n) {
        uint32_t cp;
        if (!utf8_decode(s, n, &i, &cp)) return true;
        size_t k = 0;
        while (k < t->n_kids && t->kids[k].cp != cp) k++;
        if (k == t->n_kids) {
            trie *kids = realloc(t->kids, (t->n_kids + 1) * sizeof *kids);
            if (!kids) return false;
            t->kids = kids;
            t->kids[t->n_kids++] = (trie){.cp = cp};
        }
        t = &t->kids[k];
    }
    t->terminal = true;
    return true;
}

/* Key characters (JSON string content without escapes) not equal to any name in the trie: a key either
 * leaves the trie at some character (then anything may follow) or ends at a non-terminal node. Past
 * MAX_KEY_DEPTH characters along a name the key must leave or end there (keys sharing a longer prefix
 * with a declared name are not offered: fewer keys, still none equal to a name, and bounded nesting). */
enum { MAX_KEY_DEPTH = 16 };
static void emit_other_key(compiler *c, const trie *t, gtext *out, int depth) {
    /* characters that leave the trie here */
    cp_set leave = {0};
    cp_set_add(&leave, '"', '"');
    cp_set_add(&leave, '\\', '\\');
    cp_set_add(&leave, 0, 0x1F);
    for (size_t i = 0; i < t->n_kids; i++) cp_set_add(&leave, t->kids[i].cp, t->kids[i].cp);
    cp_set_normalize(&leave);
    cp_set_complement(&leave);
    if (leave.failed) out->failed = true;
    gtext_puts(out, "( [");
    for (size_t i = 0; i < leave.n; i++) {
        gtext_class_cp(out, leave.r[i].lo);
        if (leave.r[i].hi != leave.r[i].lo) {
            gtext_puts(out, "-");
            gtext_class_cp(out, leave.r[i].hi);
        }
    }
    gtext_puts(out, "] ");
    put_prim(c, out, P_KEYCHAR);
    gtext_puts(out, "*");
    cp_set_free(&leave);
    for (size_t i = 0; i < t->n_kids && depth < MAX_KEY_DEPTH; i++) {
        uint32_t cp = t->kids[i].cp;
        if (cp < 0x20 || cp == '"' || cp == '\\') continue; /* keys here never hold escapes */
        gtext_puts(out, " | \"");
        gtext_literal_cp(out, cp);
        gtext_puts(out, "\" ");
        emit_other_key(c, &t->kids[i], out, depth + 1);
    }
    gtext_puts(out, t->terminal ? " )" : " )?");
}

static int compile_object(compiler *c, json_t *s, const char *ptr, const char *hint, gtext *out) {
    json_t *props = json_object_get(s, "properties"), *required = json_object_get(s, "required");
    json_t *ap = json_object_get(s, "additionalProperties");
    if (props && !json_is_object(props)) {
        char *p = ptr_join(ptr, "properties");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "properties must be an object");
        free(p);
        return c->status;
    }
    if (required && !json_is_array(required)) {
        char *p = ptr_join(ptr, "required");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "required must be an array of strings");
        free(p);
        return c->status;
    }
    size_t n_req = json_array_size(required), n_props = json_object_size(props);
    member *members = calloc(n_props + n_req + 1, sizeof *members);
    if (!members) return fail_nomem(c);
    size_t n = 0;
    trie names = {0};
    bool trie_ok = true;
    const char *key;
    json_t *v;
    json_object_foreach(props, key, v) {
        bool req = false;
        size_t i;
        json_t *r;
        json_array_foreach(required, i, r) req |= json_is_string(r) && !strcmp(json_string_value(r), key);
        members[n++] = (member){key, req, NULL};
        trie_ok &= trie_insert(&names, key, strlen(key));
    }
    size_t i;
    json_t *r;
    json_array_foreach(required, i, r) {
        if (!json_is_string(r)) {
            char *p = ptr_join(ptr, "required");
            char *p2 = p ? ptr_index(p, i) : NULL;
            fail(c, KITE_ERR_INVALID_ARG, p2 ? p2 : ptr, "required must be an array of strings");
            free(p);
            free(p2);
            break;
        }
        const char *name = json_string_value(r);
        bool known = false;
        for (size_t k = 0; k < n && !known; k++) known = !strcmp(members[k].name, name);
        if (known) continue;
        if (json_is_false(ap)) {
            char *p = ptr_join(ptr, "required");
            fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "\"%.100s\" is required but not in properties, and additionalProperties is false", name);
            free(p);
            break;
        }
        members[n++] = (member){name, true, NULL};
        trie_ok &= trie_insert(&names, name, strlen(name));
    }
    if (!trie_ok) fail_nomem(c);
    /* each member's `"key" ws ":" ws value` */
    char rule_hint[MAX_NAME * 2 + 8];
    for (size_t k = 0; k < n && !c->status; k++) {
        json_t *ps = props ? json_object_get(props, members[k].name) : NULL;
        char *p0 = ps ? ptr_join(ptr, "properties") : ptr_join(ptr, "additionalProperties");
        char *p = p0 && ps ? ptr_join(p0, members[k].name) : p0 ? strdup(p0) : NULL;
        free(p0);
        if (!p) {
            fail_nomem(c);
            break;
        }
        gtext kv = {0};
        use_prim(c, P_WS);
        put_json_string_literal(&kv, members[k].name, strlen(members[k].name));
        gtext_puts(&kv, " ws \":\" ws ");
        snprintf(rule_hint, sizeof rule_hint, "%s-%s", hint, members[k].name);
        if (ps) compile_schema(c, ps, p, rule_hint, &kv);
        else if (is_restrictive_ap(ap)) compile_schema(c, ap, p, rule_hint, &kv);
        else put_prim(c, &kv, P_VALUE);
        free(p);
        if (kv.failed) c->rules.failed = true, c->rules.too_large |= kv.too_large;
        members[k].kv = gtext_take(&kv, NULL);
        if (!members[k].kv) fail_nomem(c);
    }
    /* the additional-properties slot */
    char *extra_kv = NULL;
    if (!c->status && ap && !json_is_false(ap)) {
        gtext kv = {0};
        gtext_puts(&kv, "\"\\\"\" ");
        emit_other_key(c, &names, &kv, 0);
        gtext_puts(&kv, " \"\\\"\" ws \":\" ws ");
        char *p = ptr_join(ptr, "additionalProperties");
        snprintf(rule_hint, sizeof rule_hint, "%s-additional", hint);
        if (!p) fail_nomem(c);
        else if (json_is_true(ap)) put_prim(c, &kv, P_VALUE);
        else compile_to_rule(c, ap, p, rule_hint, &kv);
        free(p);
        /* one rule: the key exclusion can be long, and it is used twice (first member, later members) */
        snprintf(rule_hint, sizeof rule_hint, "%s-additional-kv", hint);
        char *kv_name = c->status ? NULL : new_rule_name(c, rule_hint);
        if (kv_name) define_rule(c, kv_name, &kv);
        gtext_free(&kv);
        extra_kv = kv_name ? strdup(kv_name) : NULL;
        if (!extra_kv) fail_nomem(c);
    }
    trie_free(&names);
    if (c->status) {
        for (size_t k = 0; k < n; k++) free(members[k].kv);
        free(members);
        free(extra_kv);
        return c->status;
    }
    /* rest[k]: members k.. after something was written, each with its comma; a rule when not empty */
    char **rest = calloc(n + 2, sizeof *rest);
    if (!rest) {
        for (size_t k = 0; k < n; k++) free(members[k].kv);
        free(members);
        free(extra_kv);
        return fail_nomem(c);
    }
    if (extra_kv) {
        snprintf(rule_hint, sizeof rule_hint, "%s-rest", hint);
        rest[n] = new_rule_name(c, rule_hint);
        if (rest[n]) {
            gtext body = {0};
            gtext_printf(&body, "( \",\" ws %s ws )*", extra_kv);
            define_rule(c, rest[n], &body);
            gtext_free(&body);
        }
    }
    for (size_t k = n; k-- > 1 && !c->status;) { /* rest[0] is never needed: the first member has no comma */
        snprintf(rule_hint, sizeof rule_hint, "%s-rest", hint);
        rest[k] = new_rule_name(c, rule_hint);
        if (!rest[k]) break;
        gtext body = {0};
        gtext_printf(&body, members[k].required ? "\",\" ws %s ws%s%s" : "( \",\" ws %s ws )?%s%s", members[k].kv,
                     rest[k + 1] ? " " : "", rest[k + 1] ? rest[k + 1] : "");
        define_rule(c, rest[k], &body);
        gtext_free(&body);
    }
    /* the first member written: any optional one up to the first required one, or an extra */
    gtext first = {0};
    size_t n_first = 0;
    bool any_required = false;
    for (size_t k = 0; k < n && !c->status; k++) {
        if (n_first++) gtext_puts(&first, " | ");
        gtext_printf(&first, "%s ws%s%s", members[k].kv, rest[k + 1] ? " " : "", rest[k + 1] ? rest[k + 1] : "");
        if (members[k].required) {
            any_required = true;
            break;
        }
    }
    if (!any_required && extra_kv) {
        if (n_first++) gtext_puts(&first, " | ");
        gtext_printf(&first, "%s ws %s", extra_kv, rest[n]);
    }
    use_prim(c, P_WS);
    if (n_first == 0) gtext_puts(out, "\"{\" ws \"}\"");
    else gtext_printf(out, any_required ? "\"{\" ws ( %s ) \"}\"" : "\"{\" ws ( %s )? \"}\"", first.buf);
    if (first.failed) out->failed = true;
    gtext_free(&first);
    for (size_t k = 0; k < n; k++) free(members[k].kv);
    free(members);
    free(extra_kv);
    free(rest); /* the names belong to c->names */
    return c->status;
}

/* ---- arrays ---- */

static int compile_array(compiler *c, json_t *s, const char *ptr, const char *hint, gtext *out) {
    json_t *items = json_object_get(s, "items"), *prefix = json_object_get(s, "prefixItems");
    json_t *extra = NULL; /* schema of items after the tuple, NULL = none allowed */
    const char *extra_key = "items";
    bool has_min, has_max;
    uint64_t min = 0, max = 0;
    if (get_count(c, s, ptr, "minItems", &has_min, &min) || get_count(c, s, ptr, "maxItems", &has_max, &max)) return c->status;
    if (prefix && !json_is_array(prefix)) {
        char *p = ptr_join(ptr, "prefixItems");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "prefixItems must be an array");
        free(p);
        return c->status;
    }
    const char *tuple_key = "prefixItems";
    if (!prefix && json_is_array(items)) { /* draft 07 tuple */
        prefix = items;
        tuple_key = "items";
        extra = json_object_get(s, "additionalItems");
        extra_key = "additionalItems";
    } else if (prefix) {
        extra = items;
    } else {
        extra = items ? items : json_true();
    }
    if (extra && json_is_false(extra)) extra = NULL;
    size_t n_tuple = json_array_size(prefix);
    if (n_tuple > MAX_TUPLE) {
        char *p = ptr_join(ptr, tuple_key);
        fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "tuples longer than %d items are not supported", MAX_TUPLE);
        free(p);
        return c->status;
    }
    bool any_extra = false;
    if (!extra && n_tuple > 0 && has_min && min > n_tuple && !json_object_get(s, extra_key)) {
        extra = json_true(); /* minItems needs more items than the tuple: any value */
        any_extra = true;
    }
    (void)any_extra;
    if (has_max && max > MAX_COUNT) max = MAX_COUNT;
    if (!has_max) max = UINT64_MAX;
    if (!extra && max > n_tuple) max = n_tuple;
    if (min > MAX_COUNT) {
        char *p = ptr_join(ptr, "minItems");
        fail(c, KITE_ERR_UNSUPPORTED, p ? p : ptr, "minItems over %d is not supported", MAX_COUNT);
        free(p);
        return c->status;
    }
    if (min > max) {
        char *p = ptr_join(ptr, "minItems");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "minItems %llu is above the %llu items the array may hold", (unsigned long long)min,
                 (unsigned long long)max);
        free(p);
        return c->status;
    }
    /* item expressions: tuple rules, then the extra item rule */
    char **tuple = calloc(n_tuple + 1, sizeof *tuple);
    if (!tuple) return fail_nomem(c);
    char rule_hint[MAX_NAME + 32];
    for (size_t k = 0; k < n_tuple && k < max && !c->status; k++) {
        char *p0 = ptr_join(ptr, tuple_key);
        char *p = p0 ? ptr_index(p0, k) : NULL;
        free(p0);
        if (!p) {
            fail_nomem(c);
            break;
        }
        gtext e = {0};
        snprintf(rule_hint, sizeof rule_hint, "%s-%zu", hint, k);
        compile_to_rule(c, json_array_get(prefix, k), p, rule_hint, &e);
        tuple[k] = gtext_take(&e, NULL);
        free(p);
    }
    char *extra_rule = NULL;
    if (!c->status && extra && max > n_tuple) {
        gtext e = {0};
        char *p = ptr_join(ptr, extra_key);
        snprintf(rule_hint, sizeof rule_hint, "%s-item", hint);
        if (!p) fail_nomem(c);
        else if (json_is_true(extra)) put_prim(c, &e, P_VALUE);
        else compile_to_rule(c, extra, p, rule_hint, &e);
        free(p);
        extra_rule = gtext_take(&e, NULL);
    }
    if (!c->status) {
        use_prim(c, P_WS);
        /* Built inside out: after the k-th tuple item, the rest (each item with its comma). */
        size_t n_used = n_tuple < max ? n_tuple : (size_t)max;
        gtext tail = {0};
        if (extra_rule && max > n_tuple) {
            uint64_t lo = min > n_tuple ? min - n_tuple : 0, hi = max == UINT64_MAX ? UINT64_MAX : max - n_tuple;
            if (n_tuple == 0) { /* the first item has no comma */
                lo = lo ? lo - 1 : 0;
                hi = hi == UINT64_MAX ? hi : hi - 1;
            }
            if (hi == UINT64_MAX && lo <= 1) gtext_printf(&tail, "( \",\" ws %s ws )%s", extra_rule, lo ? "+" : "*");
            else if (hi == UINT64_MAX) gtext_printf(&tail, "( \",\" ws %s ws ){%llu,}", extra_rule, (unsigned long long)lo);
            else if (hi > 0) gtext_printf(&tail, "( \",\" ws %s ws ){%llu,%llu}", extra_rule, (unsigned long long)lo, (unsigned long long)hi);
        }
        for (size_t k = n_used; k-- > 1;) {
            gtext t = {0};
            bool req = k < min;
            gtext_printf(&t, req ? "\",\" ws %s ws%s%s" : "( \",\" ws %s ws%s%s )?", tuple[k], tail.len ? " " : "", tail.len ? tail.buf : "");
            gtext_free(&tail);
            tail = t;
        }
        gtext body = {0};
        const char *first_item = n_used ? tuple[0] : extra_rule;
        if (max == 0 || !first_item) {
            gtext_puts(&body, "\"[\" ws \"]\"");
        } else {
            gtext_printf(&body, min > 0 ? "\"[\" ws %s ws%s%s \"]\"" : "\"[\" ws ( %s ws%s%s )? \"]\"", first_item, tail.len ? " " : "",
                         tail.len ? tail.buf : "");
        }
        if (tail.failed || body.failed) out->failed = true;
        gtext_puts(out, body.buf ? body.buf : "");
        gtext_free(&tail);
        gtext_free(&body);
    }
    for (size_t k = 0; k < n_tuple; k++) free(tuple[k]);
    free(tuple);
    free(extra_rule);
    return c->status;
}

/* ---- dispatch ---- */

static bool has_any(json_t *s, const char *const *keys, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (json_object_get(s, keys[i])) return true;
    return false;
}

static int compile_typed(compiler *c, json_t *s, const char *ptr, const char *hint, const char *type, gtext *out) {
    if (!strcmp(type, "null")) put_prim(c, out, P_NULL);
    else if (!strcmp(type, "boolean")) put_prim(c, out, P_BOOLEAN);
    else if (!strcmp(type, "string")) compile_string(c, s, ptr, out);
    else if (!strcmp(type, "integer")) compile_number(c, s, ptr, true, out);
    else if (!strcmp(type, "number")) compile_number(c, s, ptr, false, out);
    else if (!strcmp(type, "object") || !strcmp(type, "array")) {
        /* a rule of its own: readable output, and nesting depth stays in rules rather than groups */
        gtext body = {0};
        c->structure_depth++;
        if (type[0] == 'o') compile_object(c, s, ptr, hint, &body);
        else compile_array(c, s, ptr, hint, &body);
        c->structure_depth--;
        char *name = c->status ? NULL : new_rule_name(c, hint);
        if (name) {
            define_rule(c, name, &body);
            gtext_puts(out, name);
        }
        gtext_free(&body);
    } else {
        char *p = ptr_join(ptr, "type");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "unknown type \"%.60s\"", type);
        free(p);
    }
    return c->status;
}

/* ---- oneOf: exact when the branches are provably disjoint ----
 *
 * A grammar cannot say "exactly one of", but when no value the grammar writes for one branch validates
 * against another branch's schema, "one of" and "any of" are the same set. disjoint() proves that for
 * an ordered pair, conservatively (false = not proven): the types the first branch's grammar writes
 * are types the second refuses; its const / enum values all fail the second; or, for objects, the
 * first always writes a key the second refuses (additionalProperties false, or a declared property
 * whose schema no written value satisfies), or never writes a key the second requires. The first
 * branch's side is what kite's grammar writes (objects with declared and required keys only, when
 * additionalProperties is absent or false; the type implied by the keywords), the second's is the
 * schema's meaning (any type, and any other key, unless it says otherwise). */

enum { T_NULL = 1, T_BOOL = 2, T_INT = 4, T_FRAC = 8, T_STR = 16, T_ARR = 32, T_OBJ = 64, T_ALL = 127 };
enum { MAX_DISJOINT_DEPTH = 6 };

static unsigned value_types(json_t *v) {
    if (json_is_null(v)) return T_NULL;
    if (json_is_boolean(v)) return T_BOOL;
    if (json_is_integer(v)) return T_INT;
    if (json_is_real(v)) return value_has_type(v, "integer") ? T_INT : T_FRAC;
    if (json_is_string(v)) return T_STR;
    if (json_is_array(v)) return T_ARR;
    return T_OBJ;
}

static unsigned type_name_bits(const char *t) {
    if (!strcmp(t, "null")) return T_NULL;
    if (!strcmp(t, "boolean")) return T_BOOL;
    if (!strcmp(t, "integer")) return T_INT;
    if (!strcmp(t, "number")) return T_INT | T_FRAC;
    if (!strcmp(t, "string")) return T_STR;
    if (!strcmp(t, "array")) return T_ARR;
    if (!strcmp(t, "object")) return T_OBJ;
    return T_ALL;
}

/* The types "type" allows (T_ALL without one). */
static unsigned explicit_types(json_t *s) {
    json_t *type = json_object_get(s, "type");
    if (json_is_string(type)) return type_name_bits(json_string_value(type));
    if (!json_is_array(type)) return T_ALL;
    unsigned bits = 0;
    size_t i;
    json_t *t;
    json_array_foreach(type, i, t) bits |= json_is_string(t) ? type_name_bits(json_string_value(t)) : T_ALL;
    return bits;
}

/* const / enum as an array of the only values (borrowed or in c->scratch), or NULL. */
static json_t *only_values(compiler *c, json_t *s) {
    json_t *k = json_object_get(s, "const"), *e = json_object_get(s, "enum");
    if (k) {
        json_t *one = json_pack("[O]", k);
        json_array_append_new(c->scratch, one);
        return one;
    }
    return json_is_array(e) ? e : NULL;
}

static unsigned values_types(json_t *values) {
    unsigned bits = 0;
    size_t i;
    json_t *v;
    json_array_foreach(values, i, v) bits |= value_types(v);
    return bits;
}

/* Types the compiled schema writes (compile_schema's dispatch: the type implied by the keywords). */
static unsigned written_types(compiler *c, json_t *s) {
    if (json_is_boolean(s)) return json_is_true(s) ? T_ALL : 0;
    json_t *values = only_values(c, s);
    if (values) return values_types(values) & explicit_types(s);
    unsigned t = explicit_types(s);
    if (t != T_ALL || json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) return t;
    static const char *const object_keys[] = {"properties", "required", "additionalProperties"};
    static const char *const array_keys[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems"};
    static const char *const string_keys[] = {"minLength", "maxLength", "pattern", "format"};
    static const char *const number_keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
    unsigned implied = (has_any(s, object_keys, 3) ? T_OBJ : 0) | (has_any(s, array_keys, 5) ? T_ARR : 0) |
                       (has_any(s, string_keys, 4) ? T_STR : 0) | (has_any(s, number_keys, 4) ? T_INT | T_FRAC : 0);
    return implied ? implied : T_ALL;
}

static bool values_equal(json_t *a, json_t *b) {
    if (json_is_number(a) && json_is_number(b)) return json_number_value(a) == json_number_value(b);
    return json_equal(a, b);
}

static bool in_values(json_t *values, json_t *v) {
    size_t i;
    json_t *w;
    json_array_foreach(values, i, w) if (values_equal(v, w)) return true;
    return false;
}

static bool in_names(json_t *names, const char *name) {
    size_t i;
    json_t *n;
    json_array_foreach(names, i, n) if (json_is_string(n) && !strcmp(json_string_value(n), name)) return true;
    return false;
}

/* No value the grammar of a writes validates against schema b (both flat: no $ref / allOf on top). */
static bool disjoint(compiler *c, json_t *a, json_t *b, const char *ptr, int depth);

static json_t *flat_view(compiler *c, json_t *s, const char *ptr) {
    if (!json_is_object(s)) return s;
    return resolve_top_refs(c, s, ptr);
}

static bool disjoint(compiler *c, json_t *a, json_t *b, const char *ptr, int depth) {
    if (c->status || depth > MAX_DISJOINT_DEPTH || !a || !b) return false;
    if (json_is_false(a) || json_is_false(b)) return true;
    if (json_is_true(b)) return false;
    unsigned wa = written_types(c, a);
    json_t *vb = only_values(c, b), *va = json_is_object(a) ? only_values(c, a) : NULL;
    unsigned accepted_b = explicit_types(b) & (vb ? values_types(vb) : T_ALL);
    if (!(wa & accepted_b)) return true;
    if (va) {
        /* every value a writes fails b's type or b's values */
        size_t i;
        json_t *v;
        bool all_fail = true;
        json_array_foreach(va, i, v) {
            bool fails = !(value_types(v) & explicit_types(b)) || (vb && !in_values(vb, v));
            if (!fails) all_fail = false;
        }
        if (all_fail) return true;
    }
    /* objects: a writes objects with its declared and required keys only */
    if (wa != T_OBJ || va || !json_is_object(a) || json_object_get(a, "anyOf") || json_object_get(a, "oneOf")) return false;
    json_t *ap_a = json_object_get(a, "additionalProperties");
    bool closed_a = !ap_a || json_is_false(ap_a);
    json_t *props_a = json_object_get(a, "properties"), *req_a = json_object_get(a, "required");
    json_t *props_b = json_object_get(b, "properties"), *req_b = json_object_get(b, "required");
    json_t *ap_b = json_object_get(b, "additionalProperties");
    if (closed_a) {
        size_t i;
        json_t *n;
        json_array_foreach(req_b, i, n) {
            const char *name = json_string_value(n);
            if (name && !json_object_get(props_a, name) && !in_names(req_a, name)) return true; /* a never writes it */
        }
    }
    size_t i;
    json_t *n;
    json_array_foreach(req_a, i, n) {
        const char *name = json_string_value(n);
        if (!name) continue;
        json_t *pa = json_object_get(props_a, name), *pb = json_object_get(props_b, name);
        json_t *value_a = pa ? flat_view(c, pa, ptr) : json_true();
        if (!pb && json_is_false(ap_b)) return true; /* a always writes a key b refuses */
        json_t *target = pb ? pb : (json_is_object(ap_b) ? ap_b : NULL);
        if (target && disjoint(c, value_a, flat_view(c, target, ptr), ptr, depth + 1)) return true;
    }
    return false;
}

/* anyOf / oneOf: one alternative per branch, each with the sibling keywords merged in. */
static int compile_alternatives(compiler *c, json_t *s, const char *ptr, const char *hint, gtext *out) {
    const char *key = json_object_get(s, "anyOf") ? "anyOf" : "oneOf";
    json_t *branches = json_object_get(s, key);
    char *p = ptr_join(ptr, key);
    if (!p) return fail_nomem(c);
    if (json_object_get(s, "anyOf") && json_object_get(s, "oneOf")) {
        fail(c, KITE_ERR_UNSUPPORTED, p, "anyOf and oneOf in one schema are not supported");
    } else if (!json_is_array(branches) || json_array_size(branches) == 0) {
        fail(c, KITE_ERR_INVALID_ARG, p, "%s must be a non-empty array", key);
    }
    if (c->status) {
        free(p);
        return c->status;
    }
    /* siblings: the other constraint keywords, applied to every branch */
    json_t *siblings = json_object();
    const char *k;
    json_t *v;
    json_object_foreach(s, k, v) if (strcmp(k, key) && is_constraint(k)) json_object_set(siblings, k, v);
    bool merge = json_object_size(siblings) > 0;
    /* each branch as compiled: the siblings merged in; false branches add nothing */
    json_t *targets = json_array(), *indices = json_array();
    size_t i;
    json_t *branch;
    json_array_foreach(branches, i, branch) {
        json_t *target = branch;
        if (merge && !json_is_boolean(branch)) {
            target = json_pack("{s:[O,O]}", "allOf", siblings, branch);
            json_array_append_new(c->scratch, target);
        } else if (merge && json_is_true(branch)) {
            target = siblings;
        }
        if (json_is_false(target)) continue;
        json_array_append(targets, target);
        json_array_append_new(indices, json_integer((json_int_t)i));
    }
    /* oneOf is anyOf when no value the grammar writes for one branch validates against another */
    if (!strcmp(key, "oneOf")) {
        size_t nt = json_array_size(targets);
        json_t *flat = json_array();
        for (size_t a = 0; a < nt && !c->status; a++) {
            char *bp = ptr_index(p, (size_t)json_integer_value(json_array_get(indices, a)));
            json_t *f = bp ? flat_view(c, json_array_get(targets, a), bp) : NULL;
            if (!bp) fail_nomem(c);
            json_array_append(flat, f ? f : json_true());
            free(bp);
        }
        for (size_t a = 0; a < nt && !c->status; a++)
            for (size_t b = 0; b < nt && !c->status; b++) {
                if (a == b || disjoint(c, json_array_get(flat, a), json_array_get(flat, b), p, 0)) continue;
                if (c->status) break;
                fail(c, KITE_ERR_UNSUPPORTED, p,
                     "oneOf branches %lld and %lld may both match one value: kite compiles oneOf only when its branches are provably "
                     "disjoint (types, const/enum values, or objects told apart by a required key); use anyOf if that is meant",
                     (long long)json_integer_value(json_array_get(indices, a < b ? a : b)),
                     (long long)json_integer_value(json_array_get(indices, a < b ? b : a)));
            }
        json_decref(flat);
    }
    gtext alts = {0};
    size_t n = 0;
    for (size_t a = 0; a < json_array_size(targets) && !c->status; a++) {
        i = (size_t)json_integer_value(json_array_get(indices, a));
        char *bp = ptr_index(p, i);
        if (!bp) {
            fail_nomem(c);
            break;
        }
        char bh[MAX_NAME + 16];
        snprintf(bh, sizeof bh, "%s-%zu", hint, i);
        if (n++) gtext_puts(&alts, " | ");
        compile_schema(c, json_array_get(targets, a), bp, bh, &alts);
        free(bp);
    }
    json_decref(targets);
    json_decref(indices);
    json_decref(siblings);
    if (!c->status && n == 0) fail(c, KITE_ERR_INVALID_ARG, p, "every branch is false: no value can match");
    if (!c->status) gtext_printf(out, n > 1 ? "( %s )" : "%s", alts.buf);
    if (alts.failed) out->failed = true;
    gtext_free(&alts);
    free(p);
    return c->status;
}

static int compile_schema(compiler *c, json_t *s, const char *ptr, const char *hint, gtext *out) {
    if (c->status) return c->status;
    if (++c->work > MAX_WORK) return fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema is too large (more than %d subschemas)", MAX_WORK);
    if (c->depth >= MAX_DEPTH) return fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema nests more than %d levels deep", MAX_DEPTH);
    if (json_is_true(s)) {
        put_prim(c, out, P_VALUE);
        return KITE_OK;
    }
    if (json_is_false(s)) return fail(c, KITE_ERR_INVALID_ARG, ptr, "the schema false matches no value");
    if (!json_is_object(s)) return fail(c, KITE_ERR_INVALID_ARG, ptr, "a schema must be an object or a boolean");
    if (check_keywords(c, s, ptr)) return c->status;
    c->depth++;
    json_t *ref = json_object_get(s, "$ref");
    bool ref_only = ref && json_is_string(ref);
    const char *key;
    json_t *v;
    json_object_foreach(s, key, v) if (strcmp(key, "$ref") && is_constraint(key)) ref_only = false;
    if (ref_only) {
        /* a plain reference becomes a rule, compiled once (so recursive references terminate) */
        const char *text = json_string_value(ref);
        size_t i = 0;
        while (i < c->n_refs && strcmp(c->refs[i].ref, text)) i++;
        if (i < c->n_refs && c->refs[i].open_at == c->structure_depth) {
            char *rp = ptr_join(ptr, "$ref");
            fail(c, KITE_ERR_INVALID_ARG, rp ? rp : ptr, "\"%.100s\" refers back to itself before any object or array (endless recursion)", text);
            free(rp);
        } else if (i < c->n_refs) {
            gtext_puts(out, c->refs[i].rule);
        } else {
            char *rp = ptr_join(ptr, "$ref");
            json_t *target = rp ? resolve_ref(c, text, rp) : NULL;
            if (!rp) fail_nomem(c);
            if (target && c->n_refs == c->cap_refs) {
                size_t cap = c->cap_refs ? c->cap_refs * 2 : 16;
                ref_memo *refs = realloc(c->refs, cap * sizeof *refs);
                if (!refs) fail_nomem(c);
                else c->refs = refs, c->cap_refs = cap;
            }
            if (target && !c->status) {
                const char *slash = strrchr(text, '/');
                char rh[MAX_NAME + 8];
                snprintf(rh, sizeof rh, "ref-%s", slash && slash[1] ? slash + 1 : "root");
                char *name = new_rule_name(c, rh);
                char *dup = strdup(text);
                if (!name || !dup) {
                    free(dup);
                    fail_nomem(c);
                } else {
                    size_t slot = c->n_refs;
                    c->refs[c->n_refs++] = (ref_memo){dup, name, c->structure_depth};
                    /* the target's pointer, for errors inside it */
                    char *tp = strdup(text[1] ? text + 1 : "");
                    gtext body = {0};
                    if (tp) compile_schema(c, target, tp, name, &body);
                    else fail_nomem(c);
                    c->refs[slot].open_at = -1;
                    define_rule(c, name, &body);
                    gtext_free(&body);
                    free(tp);
                    gtext_puts(out, name);
                }
            }
            free(rp);
        }
        c->depth--;
        return c->status;
    }
    if (ref || json_object_get(s, "allOf")) {
        json_t *flat = resolve_top_refs(c, s, ptr);
        if (flat) compile_schema(c, flat, ptr, hint, out);
        c->depth--;
        return c->status;
    }
    if (json_object_get(s, "anyOf") || json_object_get(s, "oneOf")) {
        compile_alternatives(c, s, ptr, hint, out);
        c->depth--;
        return c->status;
    }
    if (json_object_get(s, "enum") || json_object_get(s, "const")) {
        compile_enum(c, s, ptr, out);
        c->depth--;
        return c->status;
    }
    json_t *type = json_object_get(s, "type");
    const char *types[8];
    size_t n_types = 0;
    if (json_is_string(type)) {
        types[n_types++] = json_string_value(type);
    } else if (json_is_array(type)) {
        size_t i;
        json_t *t;
        json_array_foreach(type, i, t) {
            if (!json_is_string(t) || n_types == 8) {
                char *p = ptr_join(ptr, "type");
                fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "type must be a type name or an array of up to 7 distinct names");
                free(p);
                break;
            }
            types[n_types++] = json_string_value(t);
        }
        if (!c->status && n_types == 0) {
            char *p = ptr_join(ptr, "type");
            fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "type is an empty array: no value can match");
            free(p);
        }
    } else if (type) {
        char *p = ptr_join(ptr, "type");
        fail(c, KITE_ERR_INVALID_ARG, p ? p : ptr, "type must be a string or an array");
        free(p);
    } else {
        static const char *const object_keys[] = {"properties", "required", "additionalProperties"};
        static const char *const array_keys[] = {"items", "prefixItems", "additionalItems", "minItems", "maxItems"};
        static const char *const string_keys[] = {"minLength", "maxLength", "pattern", "format"};
        static const char *const number_keys[] = {"minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};
        if (has_any(s, object_keys, 3)) types[n_types++] = "object";
        if (has_any(s, array_keys, 5)) types[n_types++] = "array";
        if (has_any(s, string_keys, 4)) types[n_types++] = "string";
        if (has_any(s, number_keys, 4)) types[n_types++] = "number";
        if (n_types == 0) put_prim(c, out, P_VALUE);
    }
    /* "integer" next to "number" adds nothing */
    bool has_number = false;
    for (size_t i = 0; i < n_types; i++) has_number |= !strcmp(types[i], "number");
    size_t w = 0;
    for (size_t i = 0; i < n_types; i++) {
        bool dup = false;
        for (size_t k = 0; k < w; k++) dup |= !strcmp(types[k], types[i]);
        if (!dup && !(has_number && !strcmp(types[i], "integer"))) types[w++] = types[i];
    }
    n_types = w;
    if (!c->status && n_types > 0) {
        if (n_types > 1) gtext_puts(out, "( ");
        for (size_t i = 0; i < n_types && !c->status; i++) {
            if (i) gtext_puts(out, " | ");
            compile_typed(c, s, ptr, hint, types[i], out);
        }
        if (n_types > 1) gtext_puts(out, " )");
    }
    c->depth--;
    return c->status;
}

int kite_json_schema_to_gbnf(const char *schema, size_t len, char **gbnf, size_t *gbnf_len, kite_error *e) {
    if (!gbnf || (!schema && len)) return kite_fail(e, KITE_ERR_INVALID_ARG, "json schema: schema and gbnf are required");
    *gbnf = NULL;
    if (gbnf_len) *gbnf_len = 0;
    if (len > MAX_SCHEMA_BYTES) return kite_fail(e, KITE_ERR_INVALID_ARG, "json schema: the schema is over 16 MiB");
    json_error_t jerr;
    json_t *root = json_loadb(schema ? schema : "", len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        for (char *q = jerr.text; *q; q++)
            if ((unsigned char)*q < 0x20) *q = ' '; /* jansson quotes the bad token, newlines included: keep one line */
        return kite_fail(e, KITE_ERR_INVALID_ARG, "json schema: invalid JSON at %d:%d: %s", jerr.line, jerr.column, jerr.text);
    }
    compiler c = {.root = root, .scratch = json_array(), .e = e};
    if (!c.scratch) fail_nomem(&c);
    gtext top = {0};
    if (!c.status) {
        char *root_name = new_rule_name(&c, "root");
        (void)root_name; /* reserves "root" */
        compile_schema(&c, root, "", "schema", &top);
    }
    gtext out = {0};
    if (!c.status) {
        gtext_printf(&out, "root ::= %s\n", top.buf ? top.buf : "");
        gtext_puts(&out, c.rules.buf ? c.rules.buf : "");
        for (int p = 0; p < P_COUNT; p++)
            if (c.need[p]) gtext_printf(&out, "%s ::= %s\n", PRIMS[p].name, PRIMS[p].body);
        if (top.failed) out.failed = true, out.too_large |= top.too_large;
        if (c.rules.failed) out.failed = true, out.too_large |= c.rules.too_large;
        c.status = gtext_check(&out, "json schema", e);
    }
    if (!c.status) {
        *gbnf = gtext_take(&out, gbnf_len);
        if (!*gbnf) c.status = kite_fail(e, KITE_ERR_NOMEM, "json schema: out of memory");
    }
    gtext_free(&out);
    gtext_free(&top);
    gtext_free(&c.rules);
    for (size_t i = 0; i < c.n_names; i++) free(c.names[i]);
    free(c.names);
    free(c.name_slots);
    for (size_t i = 0; i < c.n_refs; i++) free(c.refs[i].ref);
    free(c.refs);
    json_decref(c.scratch);
    json_decref(root);
    return c.status;
}

const char *kite_json_object_gbnf(void) {
    return "root ::= json-object\n"
           "json-object ::= \"{\" ws ( json-string ws \":\" ws json-value ws ( \",\" ws json-string ws \":\" ws json-value ws )* )? \"}\"\n"
           "json-array ::= \"[\" ws ( json-value ws ( \",\" ws json-value ws )* )? \"]\"\n"
           "json-value ::= json-object | json-array | json-string | json-number | json-boolean | json-null\n"
           "json-string ::= \"\\\"\" json-char* \"\\\"\"\n"
           "json-char ::= [^\\x22\\x5C\\x00-\\x1F] | \"\\\\\" ( [\\x22\\x5C/bfnrt] | \"u\" ( [0-9a-cA-CefEF] [0-9a-fA-F]{3} | "
           "[dD] [0-7] [0-9a-fA-F]{2} ) )\n"
           "json-number ::= \"-\"? ( \"0\" | [1-9] [0-9]{0,15} ) ( \".\" [0-9]{1,16} )? ( [eE] [-+]? [0-9]{1,2} )?\n"
           "json-boolean ::= \"true\" | \"false\"\n"
           "json-null ::= \"null\"\n"
           "ws ::= ( \" \" | \"\\n\" [ \\t]{0,20} )?\n";
}
