/* Shared internals of the Jinja interpreter: arena, strings with per-byte origin, tokens and the AST. */
#ifndef KITE_CHAT_JINJA_INTERNAL_H
#define KITE_CHAT_JINJA_INTERNAL_H

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat/jinja.h"

/* ---- arena: every allocation of a compile or a render, freed at once; a byte budget bounds it ---- */
typedef struct jchunk {
    struct jchunk *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
} jchunk;

typedef struct jarena {
    jchunk *head;
    size_t total, budget; /* bytes taken from malloc, and the most allowed */
} jarena;

void *ja_alloc(jarena *a, size_t n); /* zeroed, 16-aligned; NULL when over budget or out of memory */
void ja_free_all(jarena *a);

/* ---- the JavaScript string helpers the reference relies on ---- */
/* Length in bytes of the JS whitespace character (/\s/) at s[0..n), or 0. */
size_t js_space_at(const char *s, size_t n);
/* Same, for the character ending at s[n-1]. */
size_t js_space_before(const char *s, size_t n);
/* Number.prototype.toString for a double; buf holds 32 bytes. Returns the length. */
size_t js_number_to_string(double v, char *buf);

/* ---- tokens ---- */
typedef enum jtok_type {
    T_TEXT, T_NUM, T_STR, T_IDENT, T_EQUALS, T_OPAREN, T_CPAREN, T_OSTMT, T_CSTMT, T_OEXPR, T_CEXPR,
    T_OSQ, T_CSQ, T_OCURLY, T_CCURLY, T_COMMA, T_DOT, T_COLON, T_PIPE, T_ADD, T_MUL, T_POW, T_CMP,
    T_UNARY, T_COMMENT
} jtok_type;

typedef struct jtok {
    jtok_type type;
    uint32_t line;
    const char *s; /* the value (unescaped for strings) */
    size_t len;
} jtok;

/* ---- AST ---- */
typedef enum jnode_type {
    N_TEXT, N_IF, N_FOR, N_BREAK, N_CONTINUE, N_SET, N_MACRO, N_COMMENT, N_CALLSTMT, N_FILTERSTMT,
    N_INT, N_FLOAT, N_STR, N_ARRAY, N_TUPLE, N_OBJECT, N_IDENT, N_MEMBER, N_CALL, N_BINARY, N_UNARY,
    N_FILTER, N_TEST, N_SELECT, N_TERNARY, N_SLICE, N_KWARG, N_SPREAD, N_KWSPREAD
} jnode_type;

typedef enum jop {
    OP_NONE, OP_AND, OP_OR, OP_NOT, OP_IN, OP_NOT_IN, OP_EQ, OP_NE, OP_LT, OP_GT, OP_LE, OP_GE,
    OP_ADD, OP_SUB, OP_CONCAT, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW
} jop;

typedef struct jnode jnode;
struct jnode {
    jnode_type type;
    uint32_t line;
    jop op;
    bool flag;              /* MEMBER: computed; TEST: negated; CALLSTMT: has caller parameters */
    uint8_t special;        /* MACRO/CALLSTMT: 1 = body reads kwargs, 2 = reads varargs */
    double num;             /* INT/FLOAT */
    const char *str;        /* TEXT/STR/IDENT/MACRO name/KWARG key/TEST name */
    size_t len;
    jnode *a, *b, *c;       /* operands (see jinja_parse.c for each type's use) */
    jnode **list;           /* body, arguments, elements or keys */
    size_t n;
    jnode **list2;          /* alternate / default block / macro body / values */
    size_t n2;
};

struct jinja_template {
    jarena arena;
    jnode **body;
    size_t n_body;
};

/* Lexes and parses; errors name the original line. */
int jinja_parse(jinja_template *t, const char *source, size_t len, kite_error *e);

#endif
