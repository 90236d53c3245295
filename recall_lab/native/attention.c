/* The sparse-attention op (recall_lab/attention/sparse.py) on the CPU: softmax over each query's
 * listed keys, forward and backward, without gathering keys or values into new buffers.
 *
 * Layouts (float32), per row r = batch * H + head: q, k, dq, dk [B, H, L, d]; v, dv, out, dout
 * [B, H, L, dv], each read through its (batch, head, position) strides with the last dim
 * contiguous (`st`: three strides per operand, in the order of the arguments), so permuted views
 * (the hybrid branch's q, k and v, and an output in v's layout) need no copies; idx int32
 * [R, L, n] contiguous (-1 = empty slot; a key listed twice counts twice); lse [R, L]: log-sum-exp
 * of the scaled scores, or ROW_EMPTY when a query has no key (its output is 0 and it gets no
 * gradient). A call handles rows [r0, r1) and writes only their outputs (dk and dv of a row are
 * accumulated by that row's queries), so row ranges may run in parallel and the split does not
 * change the result. No infinities are used (the file is
 * compiled with -ffast-math, which assumes there are none). */
#include <math.h>
#include <stdlib.h>

#include "fastexp.h"
#include "rows.h" /* FOR_RANGES: the exported entry points run over row ranges */

#define ROW_EMPTY (-1e30f)

static inline float dot(const float* a, const float* b, long m) {
    float acc = 0.f;
    _Pragma("omp simd reduction(+:acc)")
    for (long c = 0; c < m; c++) acc += a[c] * b[c];
    return acc;
}

static inline void axpy(float* y, float a, const float* x, long m) {
    _Pragma("omp simd")
    for (long c = 0; c < m; c++) y[c] += a * x[c];
}

/* q . k for the small q/k widths of the hybrids' branches (d = d_state, 4-16): a plain loop.
 * `dot`'s vector reduction over 4 values was most of the sparse forward's time (its horizontal
 * sum per listed key); wider d goes to `dot`. */
static inline float dot_qk(const float* a, const float* b, long m) {
    if (m > 16) return dot(a, b, m);
    float acc = 0.f;
    for (long c = 0; c < m; c++) acc += a[c] * b[c];
    return acc;
}

/* The value-width loops (dv = 128 in the lab's hybrids) in GCC/Clang vector types, 32 floats
 * (four 8-wide registers) per block: several independent accumulators in registers. The
 * `omp simd` axpy above keeps the output row in memory between the rows it adds: a weighted
 * sum of 5 rows of 128 floats took 153 ns that way and 16 ns with register accumulators, alone
 * in a C loop on the AMD EPYC. Portable: the compiler splits the type where the target's
 * vectors are narrower. */
typedef float vf8 __attribute__((vector_size(32)));

static inline vf8 ld8(const float* p) {
    vf8 x;
    __builtin_memcpy(&x, p, sizeof x);
    return x;
}

static inline void st8(float* p, vf8 x) { __builtin_memcpy(p, &x, sizeof x); }

static inline float hsum8(vf8 x) {
    return ((x[0] + x[4]) + (x[1] + x[5])) + ((x[2] + x[6]) + (x[3] + x[7]));
}

/* sum_c a[c] b[c] over m (>= 0) values, four partial sums */
static inline float dot_v(const float* a, const float* b, long m) {
    vf8 s0 = {0}, s1 = {0}, s2 = {0}, s3 = {0};
    long c = 0;
    for (; c + 32 <= m; c += 32) {
        s0 += ld8(a + c) * ld8(b + c);
        s1 += ld8(a + c + 8) * ld8(b + c + 8);
        s2 += ld8(a + c + 16) * ld8(b + c + 16);
        s3 += ld8(a + c + 24) * ld8(b + c + 24);
    }
    for (; c + 8 <= m; c += 8) s0 += ld8(a + c) * ld8(b + c);
    float acc = hsum8((s0 + s1) + (s2 + s3));
    for (; c < m; c++) acc += a[c] * b[c];
    return acc;
}

/* y += a x over m values */
static inline void axpy_v(float* y, float a, const float* x, long m) {
    long c = 0;
    for (; c + 32 <= m; c += 32) {
        st8(y + c, ld8(y + c) + a * ld8(x + c));
        st8(y + c + 8, ld8(y + c + 8) + a * ld8(x + c + 8));
        st8(y + c + 16, ld8(y + c + 16) + a * ld8(x + c + 16));
        st8(y + c + 24, ld8(y + c + 24) + a * ld8(x + c + 24));
    }
    for (; c + 8 <= m; c += 8) st8(y + c, ld8(y + c) + a * ld8(x + c));
    for (; c < m; c++) y[c] += a * x[c];
}

/* o = sum_s p[s] v[js[s]] over nv >= 1 rows of m values (row stride vs), in registers per block */
static inline void weighted_rows(float* o, const float* v, const long* js, const float* p,
                                 long nv, long m, long vs) {
    long c = 0;
    for (; c + 32 <= m; c += 32) {
        const float* r = v + js[0] * vs + c;
        vf8 a0 = p[0] * ld8(r), a1 = p[0] * ld8(r + 8), a2 = p[0] * ld8(r + 16),
            a3 = p[0] * ld8(r + 24);
        for (long s = 1; s < nv; s++) {
            r = v + js[s] * vs + c;
            a0 += p[s] * ld8(r);
            a1 += p[s] * ld8(r + 8);
            a2 += p[s] * ld8(r + 16);
            a3 += p[s] * ld8(r + 24);
        }
        st8(o + c, a0);
        st8(o + c + 8, a1);
        st8(o + c + 16, a2);
        st8(o + c + 24, a3);
    }
    for (; c + 8 <= m; c += 8) {
        vf8 a = p[0] * ld8(v + js[0] * vs + c);
        for (long s = 1; s < nv; s++) a += p[s] * ld8(v + js[s] * vs + c);
        st8(o + c, a);
    }
    for (; c < m; c++) {
        float a = p[0] * v[js[0] * vs + c];
        for (long s = 1; s < nv; s++) a += p[s] * v[js[s] * vs + c];
        o[c] = a;
    }
}

/* One query's listed keys without the empty slots: their positions and scaled scores, and the
 * largest score. Returns how many there are. */
static inline long listed_scores(const float* qi, const float* kr, const int* ii, long n, long d,
                                 long ks, float scale, long* js, float* sc, float* m) {
    long nv = 0;
    for (long s = 0; s < n; s++) {
        if (ii[s] < 0) continue;
        js[nv] = ii[s];
        sc[nv] = scale * dot_qk(qi, kr + (long)ii[s] * ks, d);
        *m = nv ? fmaxf(*m, sc[nv]) : sc[nv];
        nv++;
    }
    return nv;
}

/* the start of row r = b * H + hh of an operand with strides st[0..2] (batch, head, position) */
#define ROW(p, st, r, H) ((p) + ((r) / (H)) * (st)[0] + ((r) % (H)) * (st)[1])

/* Probabilities with exp_fast (fastexp.h), as the other kernels; each query's empty slots are
 * dropped once (`listed_scores`), and its output is written once (`weighted_rows`). */
static void sparse_attn_fwd_range(const float* q, const float* k, const float* v, const int* idx,
                                  float* out, float* lse, float scale, long L, long n, long d,
                                  long dv, long H, const long* st, long r0, long r1) {
    const long *qs = st, *ks = st + 3, *vs = st + 6, *os = st + 9;
    const long nn = n > 0 ? n : 1;
    float sc[nn];
    long js[nn];
    for (long r = r0; r < r1; r++) {
        const float* qr = ROW(q, qs, r, H);
        const float* kr = ROW(k, ks, r, H);
        const float* vr = ROW(v, vs, r, H);
        float* orow = ROW(out, os, r, H);
        for (long i = 0; i < L; i++) {
            float* o = orow + i * os[2];
            float m = 0.f;
            const long nv = listed_scores(qr + i * qs[2], kr, idx + (r * L + i) * n, n, d, ks[2],
                                          scale, js, sc, &m);
            if (!nv) {
                for (long c = 0; c < dv; c++) o[c] = 0.f;
                lse[r * L + i] = ROW_EMPTY;
                continue;
            }
            float den = 0.f;
            for (long s = 0; s < nv; s++) {
                sc[s] = exp_fast(sc[s] - m);
                den += sc[s];
            }
            const float inv = 1.f / den;
            for (long s = 0; s < nv; s++) sc[s] *= inv;
            weighted_rows(o, vr, js, sc, nv, dv, vs[2]);
            lse[r * L + i] = m + logf(den);
        }
    }
}

/* st: the strides of q, k, v, out, dout, dq, dk, dv, three each */
static void sparse_attn_bwd_range(const float* q, const float* k, const float* v, const int* idx,
                     const float* out, const float* lse, const float* dout, float* dq, float* dk,
                     float* dvv, float scale, long L, long n, long d, long dv, long H,
                     const long* st, long r0, long r1) {
    const long *qs = st, *ks = st + 3, *vs = st + 6, *os = st + 9, *gs = st + 12, *dqs = st + 15,
               *dks = st + 18, *dvs = st + 21;
    for (long r = r0; r < r1; r++) {
        const float* qr = ROW(q, qs, r, H);
        const float* kr = ROW(k, ks, r, H);
        const float* vr = ROW(v, vs, r, H);
        const float* orow = ROW(out, os, r, H);
        const float* gr = ROW(dout, gs, r, H);
        float* dqr = ROW(dq, dqs, r, H);
        float* dkr = ROW(dk, dks, r, H);
        float* dvr = ROW(dvv, dvs, r, H);
        for (long i = 0; i < L; i++) {
            for (long c = 0; c < d; c++) dkr[i * dks[2] + c] = 0.f;
            for (long c = 0; c < dv; c++) dvr[i * dvs[2] + c] = 0.f;
        }
        for (long i = 0; i < L; i++) {
            const int* ii = idx + (r * L + i) * n;
            const float* qi = qr + i * qs[2];
            const float* doi = gr + i * gs[2];
            float* dqi = dqr + i * dqs[2];
            for (long c = 0; c < d; c++) dqi[c] = 0.f;
            const float l = lse[r * L + i];
            if (l == ROW_EMPTY) continue;
            const float delta = dot_v(doi, orow + i * os[2], dv);
            for (long s = 0; s < n; s++) {
                const long j = ii[s];
                if (j < 0) continue;
                const float p = exp_fast(scale * dot_qk(qi, kr + j * ks[2], d) - l);
                const float ds = p * (dot_v(doi, vr + j * vs[2], dv) - delta) * scale;
                axpy(dqi, ds, kr + j * ks[2], d);
                axpy(dkr + j * dks[2], ds, qi, d);
                axpy_v(dvr + j * dvs[2], p, doi, dv);
            }
        }
    }
}

/* Causal top-n (the KS pattern, Eq. 13): for every query i of a row, the positions of the n
 * largest scores among keys 0..i. One min-heap of n (score, position) per row, updated once per
 * key, so O(L log n) per row plus the O(L n) output. Ties go to the earlier key (a later key
 * enters only with a strictly larger score; the heap's root is its smallest score, and among
 * equal smallest scores the latest position). out int32 [R, L, n]: the heap's positions in heap
 * order, -1 in the slots beyond i + 1 keys. NaN scores are not allowed. */
static void causal_topk_range(const float* scores, int* out, long L, long n, long r0, long r1) {
    float hs[n > 0 ? n : 1];
    int hp[n > 0 ? n : 1];
    for (long r = r0; r < r1; r++) {
        const float* sr = scores + r * L;
        long size = 0;
        for (long i = 0; i < L; i++) {
            const float s = sr[i];
            long at;
            if (size < n) { /* sift up: (score, -position) ordered, smallest at the root */
                at = size++;
                while (at > 0) {
                    const long up = (at - 1) / 2;
                    if (!(s < hs[up] || (s == hs[up] && (int)i > hp[up]))) break;
                    hs[at] = hs[up];
                    hp[at] = hp[up];
                    at = up;
                }
                hs[at] = s;
                hp[at] = (int)i;
            } else if (n > 0 && s > hs[0]) { /* replace the root, sift down */
                at = 0;
                for (;;) {
                    const long l = 2 * at + 1, rr = l + 1;
                    long m = at;
                    float ms = s;
                    int mp = (int)i;
                    if (l < n && (hs[l] < ms || (hs[l] == ms && hp[l] > mp))) {
                        m = l; ms = hs[l]; mp = hp[l];
                    }
                    if (rr < n && (hs[rr] < ms || (hs[rr] == ms && hp[rr] > mp))) {
                        m = rr; ms = hs[rr]; mp = hp[rr];
                    }
                    if (m == at) break;
                    hs[at] = hs[m];
                    hp[at] = hp[m];
                    at = m;
                }
                hs[at] = s;
                hp[at] = (int)i;
            }
            int* o = out + (r * L + i) * n;
            for (long k = 0; k < size; k++) o[k] = hp[k];
            for (long k = size; k < n; k++) o[k] = -1;
        }
    }
}

/* Union of index lists, in place on their concatenation x int32 [R, m] with keys in [-1, keys):
 * each row sorted ascending, then every repeat of the value before it set to -1 (so -1 slots from
 * the inputs, which sort first, stay -1). The same result as the torch path (sort, then mark
 * repeats). Small key ranges (keys <= 4 m) go through counts, the rest through an insertion sort
 * (m is a few dozen). */
static void union_rows_range(int* x, long m, long keys, long r0, long r1) {
    const int counting = keys <= 4 * m;
    int* cnt = counting ? calloc((size_t)(keys > 0 ? keys : 1), sizeof(int)) : NULL;
    for (long r = r0; r < r1; r++) {
        int* row = x + r * m;
        if (cnt) {
            long neg = 0, w = 0;
            for (long i = 0; i < m; i++) {
                if (row[i] < 0) neg++;
                else cnt[row[i]]++;
            }
            for (; w < neg; w++) row[w] = -1;
            for (long v = 0; v < keys; v++) {
                if (!cnt[v]) continue;
                row[w++] = (int)v;
                for (int c = 1; c < cnt[v]; c++) row[w++] = -1;
                cnt[v] = 0;
            }
            continue;
        }
        for (long i = 1; i < m; i++) {
            const int v = row[i];
            long j = i - 1;
            while (j >= 0 && row[j] > v) {
                row[j + 1] = row[j];
                j--;
            }
            row[j + 1] = v;
        }
        for (long i = m - 1; i > 0; i--)
            if (row[i] == row[i - 1]) row[i] = -1;
    }
    free(cnt);
}

/* LSH buckets (Eq. 8-9): query i keeps the n most recent keys j <= i with bk[j] == bq[i], newest
 * first, -1 in the slots beyond. One ring of the n latest positions per bin, updated once per key:
 * O(L n) per row. bq, bk int64 [R, L] in [0, nbins); out int32 [R, L, n]. The same lists, in the
 * same order, as the torch path (sort by bin * L + j, then search). */

static void bucket_window_range(const long* bq, const long* bk, int* out, long L, long n,
                                long nbins, long r0, long r1) {
    int* ring = malloc(sizeof(int) * (size_t)(nbins * n > 0 ? nbins * n : 1));
    long* count = malloc(sizeof(long) * (size_t)(nbins > 0 ? nbins : 1));
    for (long r = r0; r < r1; r++) {
        for (long b = 0; b < nbins; b++) count[b] = 0;
        for (long i = 0; i < L; i++) {
            const long kb = bk[r * L + i];
            if (n > 0) ring[kb * n + count[kb] % n] = (int)i;
            count[kb]++;
            const long qb = bq[r * L + i];
            const long have = count[qb] < n ? count[qb] : n;
            int* o = out + (r * L + i) * n;
            for (long s = 0; s < have; s++) o[s] = ring[qb * n + (count[qb] - 1 - s) % n];
            for (long s = have; s < n; s++) o[s] = -1;
        }
    }
    free(ring);
    free(count);
}


/* LSH indices in one pass (Eq. 5-9, `LSHPattern.forward`'s torch path: causal_center, lsh_bins,
 * bucket_window_indices). Per row (batch, head) and position i: the causal centre of q_i and k_i
 * (prefix sums accumulated in double and rounded to float, as torch's CPU cumsum does, then
 * divided by i + 1), normalised, projected on the row's planes [d, h], binned (sign: sum of
 * 1[p_j > 0] 2^(h-1-j); argmax: the first largest), then key i enters its bin's ring and query i
 * reads its own bin's ring as in bucket_window_range. No gradient flows through the indices.
 * q, k: float32 with the feature dim contiguous and strides (sb, sh, sl) in elements for batch,
 * head and position (0 for a broadcast head); planes [H or 1, d, h] (head stride ps). out int32
 * [B, H, L, n]. The bins equal the torch path's but where a projection is within rounding of 0
 * (the sum order differs from the BLAS product's); d <= 256 and h <= 64. */
static long lsh_bin(const float* x, const float* pl, float* p, long d, long h, int argmax) {
    for (long j = 0; j < h; j++) p[j] = 0.f;
    for (long c = 0; c < d; c++) {
        const float xc = x[c];
        _Pragma("omp simd")
        for (long j = 0; j < h; j++) p[j] += xc * pl[c * h + j];
    }
    long bin = 0, best = 0;
    for (long j = 0; j < h; j++) {
        if (argmax) {
            if (p[j] > p[best]) best = j;
        } else {
            bin = 2 * bin + (p[j] > 0.f);
        }
    }
    return argmax ? best : bin;
}

/* Exact division (no -freciprocal-math): the centre must round as torch's `cumsum / count`, or
 * a constant run's centres (rounding noise around 0, which normalising blows up) bin otherwise. */
#pragma GCC push_options
#pragma GCC optimize("no-fast-math")
static void lsh_center(const float* x, double* acc, float* out, long d, long i) {
    float norm = 0.f;
    const float cnt = (float)(i + 1);
    for (long c = 0; c < d; c++) {
        acc[c] += (double)x[c];
        const float mean = (float)acc[c] / cnt;
        out[c] = x[c] - mean;
        norm += out[c] * out[c];
    }
    norm = sqrtf(norm);
    norm = norm > 1e-12f ? norm : 1e-12f;
    for (long c = 0; c < d; c++) out[c] = out[c] / norm;
}
#pragma GCC pop_options

static void lsh_window_range(const float* q, const float* k, const float* planes, int* out,
                             long H, long L, long d, long h, long n, long nbins, int argmax,
                             long qsb, long qsh, long qsl, long ksb, long ksh, long ksl, long ps,
                             long r0, long r1) {
    /* per bin: a ring of its n latest keys, the slot the next one goes to, how many it holds */
    int* ring = malloc(sizeof(int) * (size_t)(nbins * n > 0 ? nbins * n : 1));
    int* head = malloc(sizeof(int) * 2 * (size_t)(nbins > 0 ? nbins : 1));
    int* have = head + nbins;
    double qacc[256], kacc[256];
    float xq[256], xk[256], p[64];
    for (long r = r0; r < r1; r++) {
        const long b = r / H, hh = r % H;
        const float* qr = q + b * qsb + hh * qsh;
        const float* kr = k + b * ksb + hh * ksh;
        const float* pl = planes + hh * ps;
        for (long bb = 0; bb < nbins; bb++) head[bb] = have[bb] = 0;
        for (long c = 0; c < d; c++) qacc[c] = kacc[c] = 0.0;
        for (long i = 0; i < L; i++) {
            lsh_center(qr + i * qsl, qacc, xq, d, i);
            lsh_center(kr + i * ksl, kacc, xk, d, i);
            const long kb = lsh_bin(xk, pl, p, d, h, argmax);
            const long qb = lsh_bin(xq, pl, p, d, h, argmax);
            int* o = out + (r * L + i) * n;
            if (n > 0) {
                int* rk = ring + kb * n;
                rk[head[kb]] = (int)i;
                head[kb] = head[kb] + 1 == n ? 0 : head[kb] + 1;
                if (have[kb] < n) have[kb]++;
            }
            const int* rq = ring + qb * n;
            long at = head[qb];
            for (long s = 0; s < have[qb]; s++) {  /* newest first */
                at = at == 0 ? n - 1 : at - 1;
                o[s] = rq[at];
            }
            for (long s = have[qb]; s < n; s++) o[s] = -1;
        }
    }
    free(ring);
    free(head);
}

/* KS scores and top-n in one pass (`KSPattern.forward`'s torch path: `inputs`, the scoring MLP
 * without gradient, `causal_topk_indices`). Per row (batch, head) and position j: the scorer's
 * input [k_j, normalize(sum_{p<=j} q_p)] (prefix sums in double rounded to float, as torch's CPU
 * cumsum; exact division) is written to inp [R, L, 2d] (the ranking loss re-scores its sampled
 * rows from it with autograd), the MLP 2d -> hid -> hid -> 1 (ReLU; nn.Linear weights [out, in])
 * gives scores [R, L], then the row's causal top-n as causal_topk_range. Strides of q, k as in
 * lsh_window. The scores equal the torch path's to float rounding (another summation order than
 * the BLAS products), so the indices are the same but where two scores are within rounding. */
#pragma GCC push_options
#pragma GCC optimize("no-fast-math")
static void ks_prefix(const float* q, double* acc, float* out, long d) {
    float norm2 = 0.f;
    for (long c = 0; c < d; c++) {
        acc[c] += (double)q[c];
        out[c] = (float)acc[c];
        norm2 += out[c] * out[c];
    }
    float norm = sqrtf(norm2);
    norm = norm > 1e-12f ? norm : 1e-12f;
    for (long c = 0; c < d; c++) out[c] = out[c] / norm;
}
#pragma GCC pop_options

/* h[o] = relu(b[o] + w[o, :] . x): one layer of the scorer, nn.Linear's weight layout [out, in]
 * (`dot_qk`: a plain loop at the lab's widths, 2d = 8 inputs and 8 hidden). */
static inline void ks_layer(const float* x, const float* w, const float* bias, float* h,
                            long in, long out, int relu) {
    for (long o = 0; o < out; o++) {
        const float a = bias[o] + dot_qk(w + o * in, x, in);
        h[o] = relu ? (a > 0.f ? a : 0.f) : a;
    }
}

static void ks_scores_range(const float* q, const float* k, const float* w1, const float* b1,
                            const float* w2, const float* b2, const float* w3, const float* b3,
                            float* inp, float* scores, int* idx, long H, long L, long d, long hid,
                            long n, long qsb, long qsh, long qsl, long ksb, long ksh, long ksl,
                            long r0, long r1) {
    double acc[256];
    float h1[512], h2[512], out1[1];
    for (long r = r0; r < r1; r++) {
        const long b = r / H, hh = r % H;
        const float* qr = q + b * qsb + hh * qsh;
        const float* kr = k + b * ksb + hh * ksh;
        for (long c = 0; c < d; c++) acc[c] = 0.0;
        for (long i = 0; i < L; i++) {
            float* x = inp + (r * L + i) * 2 * d;
            for (long c = 0; c < d; c++) x[c] = kr[i * ksl + c];
            ks_prefix(qr + i * qsl, acc, x + d, d);
            ks_layer(x, w1, b1, h1, 2 * d, hid, 1);
            ks_layer(h1, w2, b2, h2, hid, hid, 1);
            ks_layer(h2, w3, b3, out1, hid, 1, 0);
            scores[r * L + i] = out1[0];
        }
        causal_topk_range(scores, idx, L, n, r, r + 1);
    }
}

/* The ranking loss's targets (`ks_ranking_loss`, Eq. 15-17, no gradient): for the sampled keys
 * sel [R, m] of each row, y_s = sum_{i >= sel_s} sigmoid(scale * q_i . k_{sel_s}), then
 * target [R, m, m] = (1[y_a > y_b] + 1[y_a >= y_b]) / 2. Strides as in lsh_window. */
static void ks_target_range(const float* q, const float* k, const long* sel, float* target,
                            float scale, long H, long L, long d, long m, long qsb, long qsh,
                            long qsl, long ksb, long ksh, long ksl, long r0, long r1) {
    float y[m > 0 ? m : 1];
    for (long r = r0; r < r1; r++) {
        const long b = r / H, hh = r % H;
        const float* qr = q + b * qsb + hh * qsh;
        const float* kr = k + b * ksb + hh * ksh;
        for (long s = 0; s < m; s++) {
            const long j = sel[r * m + s];
            float acc = 0.f;
            for (long i = j; i < L; i++) {
                const float z = scale * dot_qk(qr + i * qsl, kr + j * ksl, d);
                acc += 1.f / (1.f + expf(-z));
            }
            y[s] = acc;
        }
        float* t = target + r * m * m;
        for (long a = 0; a < m; a++)
            for (long c = 0; c < m; c++)
                t[a * m + c] = ((y[a] > y[c]) + (y[a] >= y[c])) * 0.5f;
    }
}

/* The KS ranking loss (`ks_ranking_loss` with KSPattern's `score_at`), forward and backward in
 * one call each, one thread (a sum over all rows, in a fixed order). Per row r and sampled key s:
 * x_s = the scorer on inp[r, sel[r, s]] (h1, h2: its ReLU outputs, kept for the backward), then
 * loss = mean over r, a, b of BCE-with-logits(x_a - x_b, target[r, a, b]) (written as
 * max(z, 0) - z t + log1p(exp(-|z|)), accumulated in double). The backward adds the scorer's
 * weight gradients (nn.Linear layouts: gw1 [hid, 2d], gw2 [hid, hid], gw3 [hid]) for an
 * upstream gradient g; every buffer comes zeroed or is overwritten. */
void ks_rank_fwd(const float* inp, const long* sel, const float* target, const float* w1,
                 const float* b1, const float* w2, const float* b2, const float* w3,
                 const float* b3, float* h1, float* h2, float* x, float* loss, long R, long L,
                 long d2, long hid, long m) {
    float out1[1];
    double acc = 0.0;
    for (long r = 0; r < R; r++) {
        for (long s = 0; s < m; s++) {
            const long rs = r * m + s;
            const float* in = inp + (r * L + sel[rs]) * d2;
            ks_layer(in, w1, b1, h1 + rs * hid, d2, hid, 1);
            ks_layer(h1 + rs * hid, w2, b2, h2 + rs * hid, hid, hid, 1);
            ks_layer(h2 + rs * hid, w3, b3, out1, hid, 1, 0);
            x[rs] = out1[0];
        }
        const float* xr = x + r * m;
        const float* t = target + r * m * m;
        for (long a = 0; a < m; a++)
            for (long b = 0; b < m; b++) {
                const float z = xr[a] - xr[b];
                acc += (double)((z > 0.f ? z : 0.f) - z * t[a * m + b]
                                + log1pf(expf(-fabsf(z))));
            }
    }
    loss[0] = (float)(acc / (double)(R * m * m > 0 ? R * m * m : 1));
}

void ks_rank_bwd(const float* inp, const long* sel, const float* target, const float* w2,
                 const float* w3, const float* h1, const float* h2, const float* x, float g,
                 float* gw1, float* gb1, float* gw2, float* gb2, float* gw3, float* gb3, long R,
                 long L, long d2, long hid, long m) {
    const float unit = g / (float)(R * m * m > 0 ? R * m * m : 1);
    float dx[m > 0 ? m : 1], dh2[512], dh1[512];
    for (long r = 0; r < R; r++) {
        const float* xr = x + r * m;
        const float* t = target + r * m * m;
        for (long a = 0; a < m; a++) dx[a] = 0.f;
        for (long a = 0; a < m; a++)
            for (long b = 0; b < m; b++) {
                const float z = xr[a] - xr[b];
                const float dz = unit * (1.f / (1.f + expf(-z)) - t[a * m + b]);
                dx[a] += dz;
                dx[b] -= dz;
            }
        for (long s = 0; s < m; s++) {
            const long rs = r * m + s;
            const float gx = dx[s];
            const float* a2 = h2 + rs * hid;
            const float* a1 = h1 + rs * hid;
            const float* in = inp + (r * L + sel[rs]) * d2;
            gb3[0] += gx;
            for (long o = 0; o < hid; o++) {
                gw3[o] += gx * a2[o];
                dh2[o] = a2[o] > 0.f ? gx * w3[o] : 0.f;
                gb2[o] += dh2[o];
            }
            for (long o = 0; o < hid; o++) axpy(gw2 + o * hid, dh2[o], a1, hid);
            for (long c = 0; c < hid; c++) dh1[c] = 0.f;
            for (long o = 0; o < hid; o++) axpy(dh1, dh2[o], w2 + o * hid, hid);
            for (long c = 0; c < hid; c++) dh1[c] = a1[c] > 0.f ? dh1[c] : 0.f;
            for (long o = 0; o < hid; o++) {
                gb1[o] += dh1[o];
                axpy(gw1 + o * d2, dh1[o], in, d2);
            }
        }
    }
}

/* ---- exported, parallel over rows (rows.h) ---- */

void sparse_attn_fwd(const float* q, const float* k, const float* v, const int* idx, float* out,
                     float* lse, float scale, long L, long n, long d, long dv, long H,
                     const long* st, long rows, long nt) {
    FOR_RANGES(rows, nt)
    sparse_attn_fwd_range(q, k, v, idx, out, lse, scale, L, n, d, dv, H, st, R0(rows), R1(rows));
}

void sparse_attn_bwd(const float* q, const float* k, const float* v, const int* idx,
                     const float* out, const float* lse, const float* dout, float* dq, float* dk,
                     float* dvv, float scale, long L, long n, long d, long dv, long H,
                     const long* st, long rows, long nt) {
    FOR_RANGES(rows, nt)
    sparse_attn_bwd_range(q, k, v, idx, out, lse, dout, dq, dk, dvv, scale, L, n, d, dv, H, st,
                          R0(rows), R1(rows));
}

void causal_topk(const float* scores, int* out, long L, long n, long rows, long nt) {
    FOR_RANGES(rows, nt)
    causal_topk_range(scores, out, L, n, R0(rows), R1(rows));
}

void union_rows(int* x, long m, long keys, long rows, long nt) {
    FOR_RANGES(rows, nt)
    union_rows_range(x, m, keys, R0(rows), R1(rows));
}

void bucket_window(const long* bq, const long* bk, int* out, long L, long n, long nbins,
                   long rows, long nt) {
    FOR_RANGES(rows, nt)
    bucket_window_range(bq, bk, out, L, n, nbins, R0(rows), R1(rows));
}

void lsh_window(const float* q, const float* k, const float* planes, int* out, long H, long L,
                long d, long h, long n, long argmax, long qsb, long qsh, long qsl, long ksb,
                long ksh, long ksl, long ps, long rows, long nt) {
    const long nbins = argmax ? h : 1L << h;
    FOR_RANGES(rows, nt)
    lsh_window_range(q, k, planes, out, H, L, d, h, n, nbins, (int)argmax, qsb, qsh, qsl, ksb,
                     ksh, ksl, ps, R0(rows), R1(rows));
}

void ks_scores(const float* q, const float* k, const float* w1, const float* b1, const float* w2,
               const float* b2, const float* w3, const float* b3, float* inp, float* scores,
               int* idx, long H, long L, long d, long hid, long n, long qsb, long qsh, long qsl,
               long ksb, long ksh, long ksl, long rows, long nt) {
    FOR_RANGES(rows, nt)
    ks_scores_range(q, k, w1, b1, w2, b2, w3, b3, inp, scores, idx, H, L, d, hid, n, qsb, qsh,
                    qsl, ksb, ksh, ksl, R0(rows), R1(rows));
}

/* The HAX pattern (attention/hax.py: LSH u KS, HAX paper Eq. 19-20) in one call: per row, LSH's
 * window (lsh_window_range) into n1 slots and KS's inputs, scores and top-n (ks_scores_range) into
 * n2 slots, each query's n1 + n2 slots sorted with repeats -1 (union_rows_range) into
 * idx [R, L, n1 + n2], and, where sel [R, m] is given, the ranking loss's targets
 * (ks_target_range). The same arithmetic as the four calls it stands for; at the hybrids' small
 * shapes their Python and dispatch cost was most of the pattern's time. Strides as in lsh_window
 * (q and k share H). */
void hax_pattern(const float* q, const float* k, const float* planes, const float* w1,
                 const float* b1, const float* w2, const float* b2, const float* w3,
                 const float* b3, const long* sel, float scale, float* inp, float* scores,
                 float* target, int* idx, long H, long L, long d, long h, long n1, long argmax,
                 long hid, long n2, long m, long qsb, long qsh, long qsl, long ksb, long ksh,
                 long ksl, long ps, long rows, long nt) {
    const long nbins = argmax ? h : 1L << h;
    const long width = n1 + n2;
    int* lsh_idx = malloc(sizeof(int) * (size_t)(rows * L * n1 > 0 ? rows * L * n1 : 1));
    int* ks_idx = malloc(sizeof(int) * (size_t)(rows * L * n2 > 0 ? rows * L * n2 : 1));
    FOR_RANGES(rows, nt) {
        const long r0 = R0(rows), r1 = R1(rows);
        lsh_window_range(q, k, planes, lsh_idx, H, L, d, h, n1, nbins, (int)argmax, qsb, qsh, qsl,
                         ksb, ksh, ksl, ps, r0, r1);
        ks_scores_range(q, k, w1, b1, w2, b2, w3, b3, inp, scores, ks_idx, H, L, d, hid, n2, qsb,
                        qsh, qsl, ksb, ksh, ksl, r0, r1);
        for (long t = r0 * L; t < r1 * L; t++) {
            for (long s = 0; s < n1; s++) idx[t * width + s] = lsh_idx[t * n1 + s];
            for (long s = 0; s < n2; s++) idx[t * width + n1 + s] = ks_idx[t * n2 + s];
        }
        union_rows_range(idx, width, L, r0 * L, r1 * L);
        if (sel)
            ks_target_range(q, k, sel, target, scale, H, L, d, m, qsb, qsh, qsl, ksb, ksh, ksl,
                            r0, r1);
    }
    free(lsh_idx);
    free(ks_idx);
}

void ks_target(const float* q, const float* k, const long* sel, float* target, float scale,
               long H, long L, long d, long m, long qsb, long qsh, long qsl, long ksb, long ksh,
               long ksl, long rows, long nt) {
    FOR_RANGES(rows, nt)
    ks_target_range(q, k, sel, target, scale, H, L, d, m, qsb, qsh, qsl, ksb, ksh, ksl,
                    R0(rows), R1(rows));
}
