/* The body of dplr.c, included once per float type: T is the type, FN(name) its suffixed name,
 * EXP its exp. See dplr.c for the recurrence, the layouts and the backward. */

/* the state before each of the rows' blocks of CK tokens: ck [rows, nblk, dk, dv]. The range
 * functions are inlined into `*_sized` with constant widths (the lab's 4 x 4, 4 x 16, ...), so
 * their short inner loops unroll and vectorise: 4-7x faster than with the widths at run time. */
static inline __attribute__((always_inline)) void FN(dplr_fwd_range)(const T* q, const T* k, const T* v, const T* a, const T* b,
                               const T* g, T* o, T* s_out, T* ck, long B, long L, long H,
                               long dk, long dv, long r0, long r1) {
    const long nblk = (L + CK - 1) / CK, sd = dk * dv;
    T S[sd], r[dv];
    for (long row = r0; row < r1; row++) {
        const long bi = row / H, h = row % H;
        for (long e = 0; e < sd; e++) S[e] = 0;
        for (long t = 0; t < L; t++) {
            if (t % CK == 0 && ck) {
                T* c = ck + (row * nblk + t / CK) * sd;
                for (long e = 0; e < sd; e++) c[e] = S[e];
            }
            const long tk = ((bi * L + t) * H + h) * dk, tv = ((bi * L + t) * H + h) * dv;
            const T *qt = q + tk, *kt = k + tk, *at = a + tk, *bt = b + tk, *gt = g + tk;
            const T* vt = v + tv;
            for (long j = 0; j < dv; j++) r[j] = 0;
            for (long i = 0; i < dk; i++) {
                const T ai = at[i];
                const T* Si = S + i * dv;
                _Pragma("omp simd")
                for (long j = 0; j < dv; j++) r[j] += ai * Si[j];
            }
            T* ot = o + tv;
            for (long j = 0; j < dv; j++) ot[j] = 0;
            for (long i = 0; i < dk; i++) {
                const T wi = EXP(gt[i]), bi_ = bt[i], ki = kt[i], qi = qt[i];
                T* Si = S + i * dv;
                _Pragma("omp simd")
                for (long j = 0; j < dv; j++) {
                    Si[j] = wi * Si[j] + bi_ * r[j] + ki * vt[j];
                    ot[j] += qi * Si[j];
                }
            }
        }
        if (s_out)
            for (long e = 0; e < sd; e++) s_out[row * sd + e] = S[e];
    }
}

static inline __attribute__((always_inline)) void FN(dplr_bwd_range)(const T* q, const T* k, const T* v, const T* a, const T* b,
                               const T* g, const T* ck, const T* dout, const T* ds_end, T* dq,
                               T* dk_, T* dv_, T* da, T* db, T* dg, long B, long L, long H,
                               long dk, long dv, long r0, long r1) {
    const long nblk = (L + CK - 1) / CK, sd = dk * dv;
    T dS[sd], r[dv], dr[dv], w[dk];
    T* states = (T*)malloc(sizeof(T) * (CK + 1) * sd);  /* S_{t0-1} .. S_{t1-1} of a block */
    for (long row = r0; row < r1; row++) {
        const long bi = row / H, h = row % H;
        for (long e = 0; e < sd; e++) dS[e] = ds_end ? ds_end[row * sd + e] : 0;
        for (long blk = nblk - 1; blk >= 0; blk--) {
            const long t0 = blk * CK, t1 = t0 + CK < L ? t0 + CK : L;
            /* recompute the block's states from its checkpoint */
            const T* c = ck + (row * nblk + blk) * sd;
            for (long e = 0; e < sd; e++) states[e] = c[e];
            for (long t = t0; t < t1; t++) {
                const long tk = ((bi * L + t) * H + h) * dk, tv = ((bi * L + t) * H + h) * dv;
                const T *kt = k + tk, *at = a + tk, *bt = b + tk, *gt = g + tk, *vt = v + tv;
                const T* Sp = states + (t - t0) * sd;
                T* Sn = states + (t - t0 + 1) * sd;
                for (long j = 0; j < dv; j++) r[j] = 0;
                for (long i = 0; i < dk; i++) {
                    const T ai = at[i];
                    _Pragma("omp simd")
                    for (long j = 0; j < dv; j++) r[j] += ai * Sp[i * dv + j];
                }
                for (long i = 0; i < dk; i++) {
                    const T wi = EXP(gt[i]), bi_ = bt[i], ki = kt[i];
                    _Pragma("omp simd")
                    for (long j = 0; j < dv; j++)
                        Sn[i * dv + j] = wi * Sp[i * dv + j] + bi_ * r[j] + ki * vt[j];
                }
            }
            for (long t = t1 - 1; t >= t0; t--) {
                const long tk = ((bi * L + t) * H + h) * dk, tv = ((bi * L + t) * H + h) * dv;
                const T *qt = q + tk, *kt = k + tk, *at = a + tk, *bt = b + tk, *gt = g + tk;
                const T *vt = v + tv, *dot = dout + tv;
                const T* Sp = states + (t - t0) * sd;      /* S_{t-1} */
                const T* Sc = states + (t - t0 + 1) * sd;  /* S_t */
                /* o_t = S_t^T q_t */
                for (long i = 0; i < dk; i++) {
                    const T qi = qt[i];
                    T acc = 0;
                    _Pragma("omp simd reduction(+:acc)")
                    for (long j = 0; j < dv; j++) {
                        dS[i * dv + j] += qi * dot[j];
                        acc += Sc[i * dv + j] * dot[j];
                    }
                    dq[tk + i] = acc;
                }
                /* S_t = diag(w) S_{t-1} + b r^T + k v^T, r = S_{t-1}^T a */
                for (long j = 0; j < dv; j++) { r[j] = 0; dr[j] = 0; dv_[tv + j] = 0; }
                for (long i = 0; i < dk; i++) {
                    const T ai = at[i], bi_ = bt[i], ki = kt[i];
                    const T* dSi = dS + i * dv;
                    _Pragma("omp simd")
                    for (long j = 0; j < dv; j++) {
                        r[j] += ai * Sp[i * dv + j];
                        dr[j] += bi_ * dSi[j];
                        dv_[tv + j] += ki * dSi[j];
                    }
                }
                for (long i = 0; i < dk; i++) {
                    const T* dSi = dS + i * dv;
                    const T* Spi = Sp + i * dv;
                    T sk = 0, sb = 0, sw = 0, sa = 0;
                    _Pragma("omp simd reduction(+:sk, sb, sw, sa)")
                    for (long j = 0; j < dv; j++) {
                        sk += dSi[j] * vt[j];
                        sb += dSi[j] * r[j];
                        sw += dSi[j] * Spi[j];
                        sa += Spi[j] * dr[j];
                    }
                    w[i] = EXP(gt[i]);
                    dk_[tk + i] = sk;
                    db[tk + i] = sb;
                    dg[tk + i] = sw * w[i];
                    da[tk + i] = sa;
                }
                /* dS_{t-1} = diag(w) dS_t + a dr^T */
                for (long i = 0; i < dk; i++) {
                    const T wi = w[i], ai = at[i];
                    T* dSi = dS + i * dv;
                    _Pragma("omp simd")
                    for (long j = 0; j < dv; j++) dSi[j] = wi * dSi[j] + ai * dr[j];
                }
            }
        }
    }
    free(states);
}

#define DPLR_SIZES(X) X(4, 4) X(4, 8) X(4, 16) X(8, 8) X(8, 16) X(16, 16) X(16, 32) X(32, 32) \
    X(64, 64)

static void FN(dplr_fwd_sized)(const T* q, const T* k, const T* v, const T* a, const T* b,
                               const T* g, T* o, T* s_out, T* ck, long B, long L, long H,
                               long dk, long dv, long r0, long r1) {
#define X(K, V)                                                                                \
    if (dk == K && dv == V) {                                                                  \
        FN(dplr_fwd_range)(q, k, v, a, b, g, o, s_out, ck, B, L, H, K, V, r0, r1);             \
        return;                                                                                \
    }
    DPLR_SIZES(X)
#undef X
    FN(dplr_fwd_range)(q, k, v, a, b, g, o, s_out, ck, B, L, H, dk, dv, r0, r1);
}

static void FN(dplr_bwd_sized)(const T* q, const T* k, const T* v, const T* a, const T* b,
                               const T* g, const T* ck, const T* dout, const T* ds_end, T* dq,
                               T* dk_, T* dv_, T* da, T* db, T* dg, long B, long L, long H,
                               long dk, long dv, long r0, long r1) {
#define X(K, V)                                                                                \
    if (dk == K && dv == V) {                                                                  \
        FN(dplr_bwd_range)(q, k, v, a, b, g, ck, dout, ds_end, dq, dk_, dv_, da, db, dg, B, L, \
                           H, K, V, r0, r1);                                                   \
        return;                                                                                \
    }
    DPLR_SIZES(X)
#undef X
    FN(dplr_bwd_range)(q, k, v, a, b, g, ck, dout, ds_end, dq, dk_, dv_, da, db, dg, B, L, H,
                       dk, dv, r0, r1);
}
#undef DPLR_SIZES

void FN(dplr_fwd)(const T* q, const T* k, const T* v, const T* a, const T* b, const T* g, T* o,
                  T* s_out, T* ck, long B, long L, long H, long dk, long dv, long nt) {
    const long rows = B * H;
    FOR_RANGES(rows, nt) {
        FN(dplr_fwd_sized)(q, k, v, a, b, g, o, s_out, ck, B, L, H, dk, dv, R0(rows), R1(rows));
    }
}

void FN(dplr_bwd)(const T* q, const T* k, const T* v, const T* a, const T* b, const T* g,
                  const T* ck, const T* dout, const T* ds_end, T* dq, T* dk_, T* dv_, T* da,
                  T* db, T* dg, long B, long L, long H, long dk, long dv, long nt) {
    const long rows = B * H;
    FOR_RANGES(rows, nt) {
        FN(dplr_bwd_sized)(q, k, v, a, b, g, ck, dout, ds_end, dq, dk_, dv_, da, db, dg, B, L,
                           H, dk, dv, R0(rows), R1(rows));
    }
}
