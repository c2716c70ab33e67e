/* The attention driver every SIMD kernel set shares (kite_attn_query; the reference's math in
 * ref/ref.c, vectorized): av_attend(a, F32). Included once by each set's file, which first defines its
 * vector type and operations:
 *
 *   AV_LANES               floats per vector (16, 8, 4); head_dim must be a multiple of it
 *   av_t                   the vector type
 *   av_zero(), av_set1(x), av_load(p), av_store(p, v)
 *   av_fmadd(a, b, c)      a * b + c (fused)
 *   av_mul, av_add, av_sub, av_max
 *   av_hsum(v), av_hmax(v) horizontal sum and max
 *   av_exp(v)              kite_attn_exp per lane (0 for lanes below -87, -inf included)
 *   av_kv(row, d, F32)     AV_LANES cache elements of row from element d, as floats (F32: f32 cache,
 *                          else f16)
 *
 * Per tile of KITE_ATTN_TILE visible rows: the scores of up to 4 query heads against each key row (the
 * converted key serves all of them), the online-softmax update per head (tile max, rescale of the
 * running sum and output), then the weighted values, AV_LANES output columns at a time kept in
 * registers across the tile's rows. A head's operations never depend on the other heads in its call
 * or on where its rows sit in the cache (tests/kernels checks both bit for bit). */

#define AV_INLINE static inline __attribute__((always_inline))

/* Scores of NQ query heads (q at stride hd) against one key row. */
AV_INLINE void av_scores(const float *q, int32_t hd, const void *k, float scale, float *s, int32_t s_stride, const int NQ,
                         const bool F32) {
    av_t acc[4];
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) acc[i] = av_zero();
    for (int32_t d = 0; d < hd; d += AV_LANES) {
        const av_t kv = av_kv(k, d, F32);
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) acc[i] = av_fmadd(av_load(q + (int64_t)i * hd + d), kv, acc[i]);
    }
#pragma GCC unroll 4
    for (int i = 0; i < NQ; i++) s[(int64_t)i * s_stride] = av_hsum(acc[i]) * scale;
}

/* out[i] += sum_t p[i][t] v_t for NQ heads over one tile. */
AV_INLINE void av_values(const void *const *vrows, int32_t nt, const float *p, int32_t p_stride, float *out, int32_t hd,
                         const int NQ, const bool F32) {
    for (int32_t d = 0; d < hd; d += AV_LANES) {
        av_t acc[4];
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) acc[i] = av_load(out + (int64_t)i * hd + d);
        for (int32_t t = 0; t < nt; t++) {
            const av_t vv = av_kv(vrows[t], d, F32);
#pragma GCC unroll 4
            for (int i = 0; i < NQ; i++) acc[i] = av_fmadd(av_set1(p[(int64_t)i * p_stride + t]), vv, acc[i]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < NQ; i++) av_store(out + (int64_t)i * hd + d, acc[i]);
    }
}

/* Heads [i, nq) in calls of 4, 3, 2 or 1 (NQ is a constant in each, so the loops above unroll). */
#define AV_BY_FOURS(CALL)                   \
    do {                                    \
        int32_t i = 0;                      \
        for (; i + 4 <= nq; i += 4) CALL(4); \
        switch (nq - i) {                   \
        case 3: CALL(3); break;             \
        case 2: CALL(2); break;             \
        case 1: CALL(1); break;             \
        default: break;                     \
        }                                   \
    } while (0)

AV_INLINE void av_attend(const kite_attn_query *a, const bool F32) {
    const int32_t hd = a->head_dim, nq = a->n_q;
    float m[KITE_ATTN_MAX_Q], l[KITE_ATTN_MAX_Q];
    _Alignas(64) float s[KITE_ATTN_MAX_Q][KITE_ATTN_TILE];
    const void *krows[KITE_ATTN_TILE], *vrows[KITE_ATTN_TILE];
    for (int32_t i = 0; i < nq; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        memset(a->out + (int64_t)i * hd, 0, sizeof(float) * (size_t)hd);
    }
    for (int32_t t0 = 0; t0 < a->n_visible; t0 += KITE_ATTN_TILE) {
        const int32_t nt = a->n_visible - t0 < KITE_ATTN_TILE ? a->n_visible - t0 : KITE_ATTN_TILE;
        const int32_t nt_padded = (nt + AV_LANES - 1) / AV_LANES * AV_LANES; /* KITE_ATTN_TILE is a multiple */
        for (int32_t t = 0; t < nt; t++) {
            int64_t r = a->rows ? a->rows[t0 + t] : t0 + t;
            const size_t off = (size_t)(r * a->row_stride) * (F32 ? sizeof(float) : sizeof(uint16_t));
            krows[t] = (const char *)a->k + off;
            vrows[t] = (const char *)a->v + off;
        }
        for (int32_t t = 0; t < nt; t++) {
#define AV_SCORES(NQ) av_scores(a->q + (int64_t)i * hd, hd, krows[t], a->scale, &s[i][t], KITE_ATTN_TILE, NQ, F32)
            AV_BY_FOURS(AV_SCORES);
#undef AV_SCORES
        }
        for (int32_t i = 0; i < nq; i++) {
            for (int32_t t = nt; t < nt_padded; t++) s[i][t] = -INFINITY; /* padding: max ignores it, exp gives 0 */
            av_t mx = av_set1(-INFINITY);
            for (int32_t t = 0; t < nt_padded; t += AV_LANES) mx = av_max(mx, av_load(&s[i][t]));
            const float mt = av_hmax(mx), mn = mt > m[i] ? mt : m[i];
            const float f = kite_attn_exp(m[i] - mn);
            const av_t mnv = av_set1(mn);
            av_t sum = av_zero();
            for (int32_t t = 0; t < nt_padded; t += AV_LANES) {
                av_t p = av_exp(av_sub(av_load(&s[i][t]), mnv));
                av_store(&s[i][t], p);
                sum = av_add(sum, p);
            }
            l[i] = l[i] * f + av_hsum(sum);
            m[i] = mn;
            float *o = a->out + (int64_t)i * hd;
            const av_t fv = av_set1(f);
            for (int32_t d = 0; d < hd; d += AV_LANES) av_store(o + d, av_mul(av_load(o + d), fv));
        }
#define AV_VALUES(NQ) av_values(vrows, nt, s[i], KITE_ATTN_TILE, a->out + (int64_t)i * hd, hd, NQ, F32)
        AV_BY_FOURS(AV_VALUES);
#undef AV_VALUES
    }
    for (int32_t i = 0; i < nq; i++) {
        const av_t inv = av_set1(1.0f / l[i]);
        float *o = a->out + (int64_t)i * hd;
        for (int32_t d = 0; d < hd; d += AV_LANES) av_store(o + d, av_mul(av_load(o + d), inv));
    }
}

#undef AV_BY_FOURS
#undef AV_INLINE
