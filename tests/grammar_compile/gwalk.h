/* Test helpers for the GBNF compilers: a grammar and its matcher, whole-text acceptance, random
 * sentences of a grammar (a random walk over the matcher's allowed bytes), and running a node checker. */
#ifndef KITE_TESTS_GWALK_H
#define KITE_TESTS_GWALK_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar/grammar.h"

typedef struct gwalk {
    kite_gbnf *g;
    kite_gmatch *m;
} gwalk;

/* Parses gbnf and makes a matcher; false with e filled on failure. */
static inline bool gwalk_open(gwalk *w, const char *gbnf, kite_error *e) {
    *w = (gwalk){0};
    if (kite_gbnf_parse(gbnf, strlen(gbnf), NULL, &w->g, e)) return false;
    if (kite_gmatch_new(w->g, &w->m, e)) {
        kite_gbnf_free(w->g);
        w->g = NULL;
        return false;
    }
    return true;
}

static inline void gwalk_close(gwalk *w) {
    kite_gmatch_free(w->m);
    kite_gbnf_free(w->g);
    *w = (gwalk){0};
}

/* 1 = the grammar accepts text[0..n) whole, 0 = it does not, -1 = a matcher limit was hit. */
static inline int gwalk_accepts(gwalk *w, const char *text, size_t n) {
    int32_t s = kite_gmatch_step_bytes(w->m, kite_gmatch_start(w->m), (const uint8_t *)text, n);
    if (s == KITE_GSTATE_LIMIT) return -1;
    return s >= 0 && kite_gmatch_accepting(w->m, s);
}

static inline uint64_t gwalk_rand(uint64_t *rng) { /* splitmix64 */
    uint64_t z = (*rng += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

typedef struct gwalk_buf {
    char *p;
    size_t n, cap;
} gwalk_buf;

static inline void gwalk_push(gwalk_buf *b, uint8_t byte) {
    if (b->n + 2 > b->cap) {
        b->cap = b->cap ? b->cap * 2 : 256;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    b->p[b->n++] = (char)byte;
    b->p[b->n] = 0;
}

/* Appends the shortest bytes leading from state to an accepting state (breadth-first over the interned
 * states, at most max_states of them); false if none was found within the bound. */
static inline bool gwalk_finish(gwalk *w, int32_t state, gwalk_buf *out, size_t max_states) {
    typedef struct node {
        int32_t state, parent;
        uint8_t byte;
    } node;
    node *q = malloc(max_states * sizeof *q);
    size_t n_seen_cap = 1024;
    uint8_t *seen = calloc(n_seen_cap, 1);
    if (!q || !seen) abort();
    size_t head = 0, tail = 0;
    q[tail++] = (node){state, -1, 0};
    int32_t found = kite_gmatch_accepting(w->m, state) ? 0 : -1;
    while (found < 0 && head < tail) {
        node cur = q[head];
        uint64_t bits[4];
        kite_gmatch_allowed_bytes(w->m, cur.state, bits);
        for (int b = 0; b < 256 && found < 0; b++) {
            if (!(bits[b >> 6] >> (b & 63) & 1)) continue;
            int32_t t = kite_gmatch_step(w->m, cur.state, (uint8_t)b);
            if (t < 0) continue;
            if ((size_t)t >= n_seen_cap) {
                size_t cap = n_seen_cap;
                while ((size_t)t >= cap) cap *= 2;
                seen = realloc(seen, cap);
                if (!seen) abort();
                memset(seen + n_seen_cap, 0, cap - n_seen_cap);
                n_seen_cap = cap;
            }
            if (seen[t] || tail == max_states) continue;
            seen[t] = 1;
            q[tail] = (node){t, (int32_t)head, (uint8_t)b};
            if (kite_gmatch_accepting(w->m, t)) found = (int32_t)tail;
            tail++;
        }
        head++;
    }
    if (found > 0) {
        size_t depth = 0;
        for (int32_t i = found; q[i].parent >= 0; i = q[i].parent) depth++;
        uint8_t *path = malloc(depth + 1);
        size_t k = depth;
        for (int32_t i = found; q[i].parent >= 0; i = q[i].parent) path[--k] = q[i].byte;
        for (size_t i = 0; i < depth; i++) gwalk_push(out, path[i]);
        free(path);
    }
    free(q);
    free(seen);
    return found >= 0;
}

/* One random sentence of the grammar into out (NUL-terminated): from the start state, bytes chosen
 * uniformly among the allowed ones (half the time among the allowed ASCII ones, which reach the
 * grammar's structure sooner), stopping at an accepting state with probability 1/5, and past
 * soft_max bytes finished by the shortest completion. Returns false if no completion was found. */
static inline bool gwalk_sample(gwalk *w, uint64_t *rng, size_t soft_max, gwalk_buf *out) {
    out->n = 0;
    gwalk_push(out, 0);
    out->n = 0;
    int32_t s = kite_gmatch_start(w->m);
    for (;;) {
        bool accepting = kite_gmatch_accepting(w->m, s);
        if (accepting && gwalk_rand(rng) % 5 == 0) return true;
        if (out->n >= soft_max) return gwalk_finish(w, s, out, 200000);
        uint64_t bits[4];
        kite_gmatch_allowed_bytes(w->m, s, bits);
        int allowed[256], n_allowed = 0, n_ascii = 0;
        for (int b = 0; b < 256; b++)
            if (bits[b >> 6] >> (b & 63) & 1) allowed[n_allowed++] = b;
        for (int i = 0; i < n_allowed; i++) n_ascii += allowed[i] < 0x80;
        if (n_allowed == 0) return accepting;
        int pick;
        if (n_ascii && gwalk_rand(rng) % 2 == 0) pick = allowed[gwalk_rand(rng) % (uint64_t)n_ascii]; /* ASCII sort first */
        else pick = allowed[gwalk_rand(rng) % (uint64_t)n_allowed];
        int32_t t = kite_gmatch_step(w->m, s, (uint8_t)pick);
        if (t < 0) return false;
        gwalk_push(out, (uint8_t)pick);
        s = t;
    }
}

/* Runs `node script arg` (node from KITE_NODE, else "node"), echoing its output; returns its exit status. */
static inline int gwalk_run_node(const char *script, const char *arg) {
    const char *node = getenv("KITE_NODE");
    if (!node || !*node) node = "node";
    char cmd[8192];
    snprintf(cmd, sizeof cmd, "'%s' '%s' '%s' 2>&1", node, script, arg);
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    char line[4096];
    while (fgets(line, sizeof line, p)) fputs(line, stdout);
    int status = pclose(p);
    return status;
}

#endif
