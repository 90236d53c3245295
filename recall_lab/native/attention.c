/* The sparse-attention op (recall_lab/attention/sparse.py) on the CPU: softmax over each query's
 * listed keys, forward and backward, without gathering keys or values into new buffers.
 *
 * Layouts (float32, C-contiguous), per row r = batch * head: q, k, dq, dk [R, L, d];
 * v, dv, out, dout [R, L, dv]; idx int32 [R, L, n] (-1 = empty slot; a key listed twice counts
 * twice); lse [R, L]: log-sum-exp of the scaled scores, or ROW_EMPTY when a query has no key
 * (its output is 0 and it gets no gradient). A call handles rows [r0, r1) and writes only their
 * outputs (dk and dv of a row are accumulated by that row's queries), so row ranges may run in
 * parallel and the split does not change the result. No infinities are used (the file is
 * compiled with -ffast-math, which assumes there are none). */
#include <math.h>

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

void sparse_attn_fwd(const float* q, const float* k, const float* v, const int* idx, float* out,
                     float* lse, float scale, long L, long n, long d, long dv, long r0, long r1) {
    float sc[n > 0 ? n : 1];
    for (long r = r0; r < r1; r++) {
        const float* qr = q + r * L * d;
        const float* kr = k + r * L * d;
        const float* vr = v + r * L * dv;
        for (long i = 0; i < L; i++) {
            const int* ii = idx + (r * L + i) * n;
            float* o = out + (r * L + i) * dv;
            float m = 0.f;
            long valid = 0;
            for (long s = 0; s < n; s++) {
                if (ii[s] < 0) continue;
                sc[s] = scale * dot(qr + i * d, kr + (long)ii[s] * d, d);
                m = valid++ ? fmaxf(m, sc[s]) : sc[s];
            }
            for (long c = 0; c < dv; c++) o[c] = 0.f;
            if (!valid) {
                lse[r * L + i] = ROW_EMPTY;
                continue;
            }
            float den = 0.f;
            for (long s = 0; s < n; s++) {
                if (ii[s] < 0) continue;
                const float e = expf(sc[s] - m);
                den += e;
                axpy(o, e, vr + (long)ii[s] * dv, dv);
            }
            const float inv = 1.f / den;
            for (long c = 0; c < dv; c++) o[c] *= inv;
            lse[r * L + i] = m + logf(den);
        }
    }
}

void sparse_attn_bwd(const float* q, const float* k, const float* v, const int* idx,
                     const float* out, const float* lse, const float* dout, float* dq, float* dk,
                     float* dvv, float scale, long L, long n, long d, long dv, long r0, long r1) {
    for (long r = r0; r < r1; r++) {
        const float* qr = q + r * L * d;
        const float* kr = k + r * L * d;
        const float* vr = v + r * L * dv;
        float* dkr = dk + r * L * d;
        float* dvr = dvv + r * L * dv;
        for (long i = 0; i < L * d; i++) dkr[i] = 0.f;
        for (long i = 0; i < L * dv; i++) dvr[i] = 0.f;
        for (long i = 0; i < L; i++) {
            const int* ii = idx + (r * L + i) * n;
            const float* qi = qr + i * d;
            const float* doi = dout + (r * L + i) * dv;
            float* dqi = dq + (r * L + i) * d;
            for (long c = 0; c < d; c++) dqi[c] = 0.f;
            const float l = lse[r * L + i];
            if (l == ROW_EMPTY) continue;
            const float delta = dot(doi, out + (r * L + i) * dv, dv);
            for (long s = 0; s < n; s++) {
                const long j = ii[s];
                if (j < 0) continue;
                const float p = expf(scale * dot(qi, kr + j * d, d) - l);
                const float ds = p * (dot(doi, vr + j * dv, dv) - delta) * scale;
                axpy(dqi, ds, kr + j * d, d);
                axpy(dkr + j * d, ds, qi, d);
                axpy(dvr + j * dv, p, doi, dv);
            }
        }
    }
}
