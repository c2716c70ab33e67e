/* The byte-level pushdown matcher over a lowered grammar (contract in grammar.h).
 *
 * A parse stack is a list of grammar positions (indices into g->elems), top first: the top is the byte
 * set to match next, the rest are where to continue when the current alternative ends. Stacks are
 * hash-consed nodes (pos, next) in one array, so a stack is one int32 (node 0 = the empty stack) and
 * equal stacks are equal ids. A state is the sorted list of distinct stacks whose top is a byte set,
 * plus whether the empty stack (a complete sentence) is reachable; states are interned by that list.
 *
 * Closure: from work items (pos, stack below), a byte set is a finished stack; an end pops to the stack
 * below (or accepts when nothing is below); a reference pushes the position after it (unless it ends the
 * alternative: a tail call adds nothing) and continues at each alternative of the referenced rule. Each
 * (pos, stack) item is visited once per closure, so cycles through nullable tails terminate; the parser
 * rejects the left recursion that would make stacks grow without consuming input. */
#include <stdlib.h>
#include <string.h>

#include "base/hash.h"
#include "grammar/grammar_internal.h"

#define TRANS_UNKNOWN INT32_MIN

typedef struct gnode {
    int32_t pos;  /* grammar position at the top of this stack */
    int32_t next; /* the stack below (node id; 0 = empty) */
} gnode;

/* Transitions seen from a state are cached in a few inline entries first, and in a 256-entry row once
 * more distinct bytes are stepped: along one document most states are left by one byte only, while the
 * states a token-mask builder walks from see many. */
#define SMALL_TRANS 3

typedef struct gstate {
    uint32_t first;   /* stacks are pool[first .. first + count), sorted node ids, none empty */
    uint32_t count;
    bool accepting;   /* the empty stack is reachable: the bytes so far are a sentence */
    uint8_t n_small;  /* inline transitions in use (while trans is NULL) */
    uint8_t small_byte[SMALL_TRANS];
    int32_t small_next[SMALL_TRANS];
    int32_t *trans;   /* [256] next state per byte, TRANS_UNKNOWN until computed; NULL until needed */
} gstate;

typedef struct work_item {
    int32_t pos, below;
} work_item;

struct kite_gmatch {
    const kite_gbnf *g;
    kite_gmatch_limits limits;
    kite_error err;

    gnode *nodes; /* [n_nodes]; nodes[0] is the empty stack */
    size_t n_nodes, cap_nodes;
    int32_t *node_slots; /* open addressing over (pos, next): node id, 0 = free */
    size_t node_slot_cap;

    gstate *states;
    size_t n_states, cap_states;
    int32_t *state_slots; /* open addressing over stack lists: state id + 1, 0 = free */
    size_t state_slot_cap;
    int32_t *pool;        /* the stacks of every state */
    size_t n_pool, cap_pool;
    size_t n_rows;        /* transition rows allocated */
    int32_t start;        /* the start state, once built (-1 before) */

    /* closure scratch */
    work_item *work;
    size_t n_work, cap_work;
    size_t n_pushed;      /* work items pushed in the current closure, against the work bound */
    uint64_t *seen_keys;  /* visited (pos, stack) pairs of the current closure */
    uint32_t *seen_gen;   /* a slot is in use when its generation is the current one */
    size_t seen_cap, n_seen;
    uint32_t gen;
    int32_t *out;         /* finished stacks of the current closure */
    size_t n_out, cap_out;
};

kite_gmatch_limits kite_gmatch_default_limits(void) {
    return (kite_gmatch_limits){.max_stacks_per_state = 4096, .max_states = 1u << 20, .max_bytes = 256u << 20};
}

size_t kite_gmatch_memory(const kite_gmatch *m) {
    if (!m) return 0;
    return sizeof *m + m->cap_nodes * sizeof(gnode) + m->node_slot_cap * sizeof(int32_t) +
           m->cap_states * sizeof(gstate) + m->state_slot_cap * sizeof(int32_t) + m->cap_pool * sizeof(int32_t) +
           m->n_rows * 256 * sizeof(int32_t) + m->cap_work * sizeof(work_item) +
           m->seen_cap * (sizeof(uint64_t) + sizeof(uint32_t)) + m->cap_out * sizeof(int32_t);
}

size_t kite_gmatch_n_states(const kite_gmatch *m) { return m ? m->n_states : 0; }

const kite_error *kite_gmatch_error(const kite_gmatch *m) { return m ? &m->err : NULL; }

void kite_gmatch_set_limits(kite_gmatch *m, const kite_gmatch_limits *limits) {
    if (m && limits) m->limits = *limits;
}

static int32_t limit(kite_gmatch *m, const char *what) {
    kite_fail(&m->err, KITE_ERR_NOMEM, "grammar matcher: %s", what);
    return KITE_GSTATE_LIMIT;
}

/* Work per closure: pushes are bounded as well as visits, since one visit of a reference pushes every
 * alternative of its rule. */
static size_t max_work(const kite_gmatch *m) { return (size_t)m->limits.max_stacks_per_state * 64 + 4096; }

/* The limit a failed push_work hit. */
static int32_t push_limit(kite_gmatch *m) {
    if (m->n_pushed > 4 * max_work(m)) return limit(m, "too much work in one step: the grammar is too ambiguous");
    return limit(m, "out of memory budget (closure)");
}

/* Grows *buf (of *cap elements of size elem) to hold need elements, within the memory budget. */
static bool grow(kite_gmatch *m, void **buf, size_t *cap, size_t need, size_t elem) {
    if (need <= *cap) return true;
    size_t n = *cap ? *cap : 64;
    while (n < need) n *= 2;
    if (kite_gmatch_memory(m) + (n - *cap) * elem > m->limits.max_bytes) return false;
    void *v = realloc(*buf, n * elem);
    if (!v) return false;
    *buf = v;
    *cap = n;
    return true;
}

static inline uint64_t pair_key(int32_t pos, int32_t below) { return ((uint64_t)(uint32_t)pos << 32) | (uint32_t)below; }

static bool rehash_nodes(kite_gmatch *m, size_t cap) {
    if (kite_gmatch_memory(m) + cap * sizeof(int32_t) > m->limits.max_bytes) return false;
    int32_t *slots = calloc(cap, sizeof *slots);
    if (!slots) return false;
    for (size_t id = 1; id < m->n_nodes; id++) {
        size_t i = kite_hash_mix64(pair_key(m->nodes[id].pos, m->nodes[id].next)) & (cap - 1);
        while (slots[i]) i = (i + 1) & (cap - 1);
        slots[i] = (int32_t)id;
    }
    free(m->node_slots);
    m->node_slots = slots;
    m->node_slot_cap = cap;
    return true;
}

/* The node for stack (pos on top of below), made once; 0 when memory runs out (0 is never a cons). */
static int32_t cons(kite_gmatch *m, int32_t pos, int32_t below) {
    if ((m->n_nodes + 1) * 2 > m->node_slot_cap && !rehash_nodes(m, m->node_slot_cap * 2)) return 0;
    uint64_t key = pair_key(pos, below);
    size_t mask = m->node_slot_cap - 1, i = kite_hash_mix64(key) & mask;
    for (int32_t id; (id = m->node_slots[i]) != 0; i = (i + 1) & mask)
        if (m->nodes[id].pos == pos && m->nodes[id].next == below) return id;
    if (m->n_nodes >= INT32_MAX - 1) return 0;
    if (!grow(m, (void **)&m->nodes, &m->cap_nodes, m->n_nodes + 1, sizeof(gnode))) return 0;
    int32_t id = (int32_t)m->n_nodes++;
    m->nodes[id] = (gnode){pos, below};
    m->node_slots[i] = id;
    return id;
}

static bool push_work(kite_gmatch *m, int32_t pos, int32_t below) {
    if (++m->n_pushed > 4 * max_work(m)) return false;
    if (!grow(m, (void **)&m->work, &m->cap_work, m->n_work + 1, sizeof(work_item))) return false;
    m->work[m->n_work++] = (work_item){pos, below};
    return true;
}

/* Marks (pos, below) visited in this closure; false when it already was. Sets *oom on memory failure. */
static bool first_visit(kite_gmatch *m, int32_t pos, int32_t below, bool *oom) {
    if ((m->n_seen + 1) * 2 > m->seen_cap) {
        size_t cap = m->seen_cap ? m->seen_cap * 2 : 1024;
        if (kite_gmatch_memory(m) + (cap - m->seen_cap) * (sizeof(uint64_t) + sizeof(uint32_t)) > m->limits.max_bytes) {
            *oom = true;
            return false;
        }
        uint64_t *keys = malloc(cap * sizeof *keys);
        uint32_t *gens = calloc(cap, sizeof *gens);
        if (!keys || !gens) {
            free(keys);
            free(gens);
            *oom = true;
            return false;
        }
        for (size_t j = 0; j < m->seen_cap; j++) {
            if (m->seen_gen[j] != m->gen) continue;
            size_t i = kite_hash_mix64(m->seen_keys[j]) & (cap - 1);
            while (gens[i] == m->gen) i = (i + 1) & (cap - 1);
            keys[i] = m->seen_keys[j];
            gens[i] = m->gen;
        }
        free(m->seen_keys);
        free(m->seen_gen);
        m->seen_keys = keys;
        m->seen_gen = gens;
        m->seen_cap = cap;
    }
    uint64_t key = pair_key(pos, below);
    size_t mask = m->seen_cap - 1, i = kite_hash_mix64(key) & mask;
    for (; m->seen_gen[i] == m->gen; i = (i + 1) & mask)
        if (m->seen_keys[i] == key) return false;
    m->seen_keys[i] = key;
    m->seen_gen[i] = m->gen;
    m->n_seen++;
    return true;
}

static void begin_closure(kite_gmatch *m) {
    m->n_work = 0;
    m->n_pushed = 0;
    m->n_out = 0;
    m->n_seen = 0;
    if (++m->gen == 0) { /* generations wrapped: clear every slot once */
        if (m->seen_gen) memset(m->seen_gen, 0, m->seen_cap * sizeof *m->seen_gen);
        m->gen = 1;
    }
}

static int compare_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* Runs the closure over the pending work items and interns the resulting state (or DEAD / LIMIT). */
static int32_t finish_closure(kite_gmatch *m) {
    const kite_gbnf *g = m->g;
    bool accepting = false, oom = false;
    size_t max_visits = max_work(m);
    while (m->n_work) {
        work_item it = m->work[--m->n_work];
        if (!first_visit(m, it.pos, it.below, &oom)) {
            if (oom) return limit(m, "out of memory budget (closure)");
            continue;
        }
        if (m->n_seen > max_visits) return limit(m, "too much work in one step: the grammar is too ambiguous");
        int32_t e = g->elems[it.pos];
        if (e == GELEM_END) {
            if (it.below == 0) {
                accepting = true;
            } else if (!push_work(m, m->nodes[it.below].pos, m->nodes[it.below].next)) {
                return push_limit(m);
            }
        } else if (e >= 0) {
            int32_t id = cons(m, it.pos, it.below);
            if (!id) return limit(m, "out of memory budget (parse stacks)");
            if (m->n_out >= m->limits.max_stacks_per_state)
                return limit(m, "too many parse stacks in one state: the grammar is too ambiguous");
            if (!grow(m, (void **)&m->out, &m->cap_out, m->n_out + 1, sizeof(int32_t)))
                return limit(m, "out of memory budget (closure)");
            m->out[m->n_out++] = id;
        } else {
            uint32_t r = GELEM_REF_RULE(e);
            int32_t cont = it.below;
            if (g->elems[it.pos + 1] != GELEM_END) {
                cont = cons(m, it.pos + 1, it.below);
                if (!cont) return limit(m, "out of memory budget (parse stacks)");
            }
            /* pushed in reverse so alternatives are explored in order (cosmetic: the result is a set) */
            for (uint32_t a = g->rule_alt[r + 1]; a-- > g->rule_alt[r];)
                if (!push_work(m, (int32_t)g->alt_first[a], cont)) return push_limit(m);
        }
    }
    if (m->n_out == 0 && !accepting) return KITE_GSTATE_DEAD;
    /* each finished stack comes from a distinct visited pair, and hash-consing makes ids distinct */
    if (m->n_out > 32) {
        qsort(m->out, m->n_out, sizeof *m->out, compare_i32);
    } else { /* the usual few stacks: insertion sort beats qsort's calls */
        for (size_t i = 1; i < m->n_out; i++) {
            int32_t v = m->out[i];
            size_t j = i;
            for (; j > 0 && m->out[j - 1] > v; j--) m->out[j] = m->out[j - 1];
            m->out[j] = v;
        }
    }
    uint64_t h = kite_hash_mix64(accepting ? 0x9e3779b97f4a7c15ull : 1);
    for (size_t i = 0; i < m->n_out; i++) h = kite_hash_mix64(h ^ (uint32_t)m->out[i]);
    if ((m->n_states + 1) * 2 > m->state_slot_cap) {
        size_t cap = m->state_slot_cap ? m->state_slot_cap * 2 : 1024;
        if (kite_gmatch_memory(m) + cap * sizeof(int32_t) > m->limits.max_bytes)
            return limit(m, "out of memory budget (states)");
        int32_t *slots = calloc(cap, sizeof *slots);
        if (!slots) return limit(m, "out of memory (states)");
        for (size_t s = 0; s < m->n_states; s++) {
            const gstate *st = &m->states[s];
            uint64_t hs = kite_hash_mix64(st->accepting ? 0x9e3779b97f4a7c15ull : 1);
            for (uint32_t i = 0; i < st->count; i++) hs = kite_hash_mix64(hs ^ (uint32_t)m->pool[st->first + i]);
            size_t i = hs & (cap - 1);
            while (slots[i]) i = (i + 1) & (cap - 1);
            slots[i] = (int32_t)s + 1;
        }
        free(m->state_slots);
        m->state_slots = slots;
        m->state_slot_cap = cap;
    }
    size_t mask = m->state_slot_cap - 1, i = h & mask;
    for (int32_t slot; (slot = m->state_slots[i]) != 0; i = (i + 1) & mask) {
        const gstate *st = &m->states[slot - 1];
        if (st->accepting == accepting && st->count == m->n_out &&
            (m->n_out == 0 || memcmp(m->pool + st->first, m->out, m->n_out * sizeof *m->out) == 0))
            return slot - 1;
    }
    if (m->n_states >= m->limits.max_states) return limit(m, "too many grammar states");
    if (m->n_pool + m->n_out > UINT32_MAX) return limit(m, "too many parse stacks over all states");
    if (!grow(m, (void **)&m->states, &m->cap_states, m->n_states + 1, sizeof(gstate)) ||
        !grow(m, (void **)&m->pool, &m->cap_pool, m->n_pool + m->n_out, sizeof(int32_t)))
        return limit(m, "out of memory budget (states)");
    if (m->n_out) memcpy(m->pool + m->n_pool, m->out, m->n_out * sizeof *m->out);
    int32_t id = (int32_t)m->n_states++;
    m->states[id] = (gstate){.first = (uint32_t)m->n_pool, .count = (uint32_t)m->n_out, .accepting = accepting};
    m->n_pool += m->n_out;
    m->state_slots[i] = id + 1;
    return id;
}

int kite_gmatch_new(const kite_gbnf *g, kite_gmatch **out, kite_error *e) {
    if (!out) return kite_fail(e, KITE_ERR_INVALID_ARG, "grammar matcher: no output pointer");
    *out = NULL;
    if (!g) return kite_fail(e, KITE_ERR_INVALID_ARG, "grammar matcher: no grammar");
    kite_gmatch *m = calloc(1, sizeof *m);
    if (!m) return kite_fail(e, KITE_ERR_NOMEM, "grammar matcher: out of memory");
    m->g = g;
    m->limits = kite_gmatch_default_limits();
    m->start = -1;
    m->nodes = malloc(64 * sizeof *m->nodes);
    m->node_slots = calloc(128, sizeof *m->node_slots);
    if (!m->nodes || !m->node_slots) {
        kite_gmatch_free(m);
        return kite_fail(e, KITE_ERR_NOMEM, "grammar matcher: out of memory");
    }
    m->cap_nodes = 64;
    m->node_slot_cap = 128;
    m->nodes[0] = (gnode){-1, 0};
    m->n_nodes = 1;
    *out = m;
    return KITE_OK;
}

void kite_gmatch_free(kite_gmatch *m) {
    if (!m) return;
    for (size_t s = 0; s < m->n_states; s++) free(m->states[s].trans);
    free(m->nodes);
    free(m->node_slots);
    free(m->states);
    free(m->state_slots);
    free(m->pool);
    free(m->work);
    free(m->seen_keys);
    free(m->seen_gen);
    free(m->out);
    free(m);
}

int32_t kite_gmatch_start(kite_gmatch *m) {
    if (!m) return KITE_GSTATE_LIMIT;
    if (m->start >= 0) return m->start;
    const kite_gbnf *g = m->g;
    begin_closure(m);
    for (uint32_t a = g->rule_alt[g->root + 1]; a-- > g->rule_alt[g->root];)
        if (!push_work(m, (int32_t)g->alt_first[a], 0)) return push_limit(m);
    int32_t s = finish_closure(m);
    if (s >= 0) m->start = s;
    return s;
}

/* Caches next as the transition of (state, byte). */
static int32_t remember(kite_gmatch *m, int32_t state, uint8_t byte, int32_t next) {
    gstate *st = &m->states[state];
    if (!st->trans && st->n_small < SMALL_TRANS) {
        st->small_byte[st->n_small] = byte;
        st->small_next[st->n_small++] = next;
        return next;
    }
    if (!st->trans) {
        if (kite_gmatch_memory(m) + 256 * sizeof(int32_t) > m->limits.max_bytes)
            return limit(m, "out of memory budget (transition rows)");
        st->trans = malloc(256 * sizeof *st->trans);
        if (!st->trans) return limit(m, "out of memory (transition rows)");
        m->n_rows++;
        for (int b = 0; b < 256; b++) st->trans[b] = TRANS_UNKNOWN;
        for (int k = 0; k < st->n_small; k++) st->trans[st->small_byte[k]] = st->small_next[k];
    }
    st->trans[byte] = next;
    return next;
}

static int32_t step_slow(kite_gmatch *m, int32_t state, uint8_t byte) {
    const gstate *st = &m->states[state];
    const kite_gbnf *g = m->g;
    begin_closure(m);
    for (uint32_t i = st->count; i-- > 0;) {
        const gnode *n = &m->nodes[m->pool[st->first + i]];
        if (gbyteset_has(&g->sets[g->elems[n->pos]], byte) && !push_work(m, n->pos + 1, n->next))
            return push_limit(m);
    }
    int32_t next = finish_closure(m); /* may move m->states: st is stale from here */
    /* a limit is not cached, so raising the limits lets the same step through */
    return next == KITE_GSTATE_LIMIT ? next : remember(m, state, byte, next);
}

int32_t kite_gmatch_step(kite_gmatch *m, int32_t state, uint8_t byte) {
    if (state < 0) return state;
    if (!m || (size_t)state >= m->n_states) {
        if (m) kite_fail(&m->err, KITE_ERR_INVALID_ARG, "grammar matcher: state %d does not exist", (int)state);
        return KITE_GSTATE_LIMIT;
    }
    const gstate *st = &m->states[state];
    if (st->trans) {
        int32_t next = st->trans[byte];
        if (next != TRANS_UNKNOWN) return next;
    } else {
        for (int k = 0; k < st->n_small; k++)
            if (st->small_byte[k] == byte) return st->small_next[k];
    }
    return step_slow(m, state, byte);
}

int32_t kite_gmatch_step_bytes(kite_gmatch *m, int32_t state, const uint8_t *bytes, size_t n) {
    for (size_t i = 0; i < n && state >= 0; i++) state = kite_gmatch_step(m, state, bytes[i]);
    return state;
}

bool kite_gmatch_accepting(const kite_gmatch *m, int32_t state) {
    return m && state >= 0 && (size_t)state < m->n_states && m->states[state].accepting;
}

bool kite_gmatch_can_continue(kite_gmatch *m, int32_t state) {
    return m && state >= 0 && (size_t)state < m->n_states && m->states[state].count > 0;
}

void kite_gmatch_allowed_bytes(const kite_gmatch *m, int32_t state, uint64_t bits[4]) {
    bits[0] = bits[1] = bits[2] = bits[3] = 0;
    if (!m || state < 0 || (size_t)state >= m->n_states) return;
    const gstate *st = &m->states[state];
    const kite_gbnf *g = m->g;
    for (uint32_t i = 0; i < st->count; i++) {
        const gbyteset *s = &g->sets[g->elems[m->nodes[m->pool[st->first + i]].pos]];
        for (int w = 0; w < 4; w++) bits[w] |= s->bits[w];
    }
}
