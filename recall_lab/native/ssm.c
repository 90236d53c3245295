/* Mamba (S6) selective scan on the CPU, forward and backward: the native fast path of
 * recall_lab/ssm/native.py (which compiles this file with the system C compiler and calls it
 * through ctypes; see there for layouts, threads and the fallback).
 *
 * One channel (b, d) at a time, its N states in registers-sized arrays:
 *   h_t = a_t * h_{t-1} + Delta_t u_t B_t,   a_t = exp(Delta_t A_d) * keep_t,   y_t = C_t . h_t
 * Every (t, n) is touched once in the forward and twice in the backward (state recomputation,
 * then the reverse recurrence dh_{t-1} = a_t (dh_t + C_t dy_t)), instead of the ~20 passes over
 * [t, b, n, d] buffers the torch path makes. The n-loops carry `omp simd` so gcc vectorises them,
 * expf included (glibc's libmvec, enabled by -ffast-math at compile time only: the library is
 * linked without it, so the process's floating-point mode is left alone).
 *
 * Layouts (float32, C-contiguous): u, delta, y, gy, gu, gdelta [B, D, L]; A [D, N];
 * Bm, Cm, gB, gC [B, G, L, N] (group g = d / (D / G)); keep [B, L] or NULL (0 at chunk starts);
 * last, glast, gA_part [B, D, N]. A call handles batch rows [b0, b1); gB, gC and gA_part of those
 * rows are written by that call only, so calls on disjoint row ranges may run in parallel and the
 * result does not depend on how rows are split. The backward needs 2 L N floats of scratch.
 */
#include <math.h>
#include <stddef.h>

#include "rows.h" /* FOR_RANGES: the exported entry points run over row ranges */

#define MAX_STATE 256

#define DEFINE_SCAN(SUFFIX, NCONST)                                                            \
static void fwd_##SUFFIX(const float* u, const float* delta, const float* A, const float* Bm,  \
                         const float* Cm, const float* keep, float* y, float* last, long D,    \
                         long L, long N_, long G, long b0, long b1) {                          \
    const long N = NCONST ? NCONST : N_;                                                       \
    const long dpg = D / G;                                                                    \
    float h[MAX_STATE];                                                                        \
    for (long b = b0; b < b1; b++) {                                                           \
        for (long d = 0; d < D; d++) {                                                         \
            const long bd = b * D + d;                                                         \
            const float* ub = u + bd * L;                                                      \
            const float* db = delta + bd * L;                                                  \
            const float* Ad = A + d * N;                                                       \
            const float* Bb = Bm + (b * G + d / dpg) * L * N;                                  \
            const float* Cb = Cm + (b * G + d / dpg) * L * N;                                  \
            float* yb = y + bd * L;                                                            \
            for (long n = 0; n < N; n++) h[n] = 0.f;                                           \
            for (long t = 0; t < L; t++) {                                                     \
                const float dt = db[t], du = dt * ub[t];                                       \
                const float k = keep ? keep[b * L + t] : 1.f;                                  \
                const float* Bt = Bb + t * N;                                                  \
                const float* Ct = Cb + t * N;                                                  \
                float acc = 0.f;                                                               \
                _Pragma("omp simd reduction(+:acc)")                                           \
                for (long n = 0; n < N; n++) {                                                 \
                    const float a = expf(dt * Ad[n]) * k;                                      \
                    h[n] = a * h[n] + du * Bt[n];                                              \
                    acc += h[n] * Ct[n];                                                       \
                }                                                                              \
                yb[t] = acc;                                                                   \
            }                                                                                  \
            for (long n = 0; n < N; n++) last[bd * N + n] = h[n];                              \
        }                                                                                      \
    }                                                                                          \
}                                                                                              \
                                                                                               \
static void bwd_##SUFFIX(const float* u, const float* delta, const float* A, const float* Bm,  \
                         const float* Cm, const float* keep, const float* gy,                  \
                         const float* glast, float* gu, float* gdelta, float* gA_part,         \
                         float* gB, float* gC, long D, long L, long N_, long G, long b0,       \
                         long b1, float* scratch) {                                            \
    const long N = NCONST ? NCONST : N_;                                                       \
    const long dpg = D / G;                                                                    \
    float dh[MAX_STATE], zero[MAX_STATE];                                                      \
    for (long n = 0; n < N; n++) zero[n] = 0.f; /* h_{-1} */                                   \
    float* H = scratch;       /* [L, N] states h_t */                                          \
    float* Aa = scratch + L * N; /* [L, N] decays a_t */                                       \
    for (long b = b0; b < b1; b++) {                                                           \
        for (long d = 0; d < D; d++) {                                                         \
            const long bd = b * D + d;                                                         \
            const float* ub = u + bd * L;                                                      \
            const float* db = delta + bd * L;                                                  \
            const float* Ad = A + d * N;                                                       \
            const long off = (b * G + d / dpg) * L * N;                                        \
            const float* Bb = Bm + off;                                                        \
            const float* Cb = Cm + off;                                                        \
            float* gBb = gB + off;                                                             \
            float* gCb = gC + off;                                                             \
            const float* gyb = gy + bd * L;                                                    \
            float* gAd = gA_part + bd * N;                                                     \
            for (long t = 0; t < L; t++) {                                                     \
                const float dt = db[t], du = dt * ub[t];                                       \
                const float k = keep ? keep[b * L + t] : 1.f;                                  \
                const float* Bt = Bb + t * N;                                                  \
                const float* Hp = t ? H + (t - 1) * N : zero;                                  \
                float* Ht = H + t * N;                                                         \
                float* at = Aa + t * N;                                                        \
                _Pragma("omp simd")                                                            \
                for (long n = 0; n < N; n++) {                                                 \
                    const float a = expf(dt * Ad[n]) * k;                                      \
                    at[n] = a;                                                                 \
                    Ht[n] = a * Hp[n] + du * Bt[n];                                            \
                }                                                                              \
            }                                                                                  \
            for (long n = 0; n < N; n++) {                                                     \
                dh[n] = glast ? glast[bd * N + n] : 0.f;                                       \
                gAd[n] = 0.f;                                                                  \
            }                                                                                  \
            for (long t = L - 1; t >= 0; t--) {                                                \
                const float dt = db[t], ut = ub[t], du = dt * ut, gyt = gyb[t];                \
                const float* Bt = Bb + t * N;                                                  \
                const float* Ct = Cb + t * N;                                                  \
                float* gBt = gBb + t * N;                                                      \
                float* gCt = gCb + t * N;                                                      \
                const float* Ht = H + t * N;                                                   \
                const float* Hp = t ? H + (t - 1) * N : zero;                                  \
                const float* at = Aa + t * N;                                                  \
                float gdu = 0.f, gdt = 0.f;                                                    \
                _Pragma("omp simd reduction(+:gdu, gdt)")                                      \
                for (long n = 0; n < N; n++) {                                                 \
                    const float g = dh[n] + gyt * Ct[n];                                       \
                    gCt[n] += Ht[n] * gyt;                                                     \
                    gdu += g * Bt[n];                                                          \
                    gBt[n] += g * du;                                                          \
                    const float gda = g * at[n] * Hp[n]; /* d loss / d a_t, times a_t */       \
                    gdt += gda * Ad[n];                                                        \
                    gAd[n] += gda * dt;                                                        \
                    dh[n] = at[n] * g;                                                         \
                }                                                                              \
                gdelta[bd * L + t] = gdt + gdu * ut;                                           \
                gu[bd * L + t] = gdu * dt;                                                     \
            }                                                                                  \
        }                                                                                      \
    }                                                                                          \
}

DEFINE_SCAN(any, 0)
DEFINE_SCAN(4, 4)
DEFINE_SCAN(8, 8)
DEFINE_SCAN(16, 16)
DEFINE_SCAN(32, 32)
DEFINE_SCAN(64, 64)

long scan_max_state(void) { return MAX_STATE; }

static void scan_fwd_range(const float* u, const float* delta, const float* A, const float* Bm,
              const float* Cm, const float* keep, float* y, float* last, long D, long L, long N,
              long G, long b0, long b1) {
    switch (N) {
    case 4: fwd_4(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, b0, b1); break;
    case 8: fwd_8(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, b0, b1); break;
    case 16: fwd_16(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, b0, b1); break;
    case 32: fwd_32(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, b0, b1); break;
    case 64: fwd_64(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, b0, b1); break;
    default: fwd_any(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, b0, b1);
    }
}

static void scan_bwd_range(const float* u, const float* delta, const float* A, const float* Bm,
              const float* Cm, const float* keep, const float* gy, const float* glast, float* gu,
              float* gdelta, float* gA_part, float* gB, float* gC, long D, long L, long N,
              long G, long b0, long b1, float* scratch) {
#define BWD_ARGS u, delta, A, Bm, Cm, keep, gy, glast, gu, gdelta, gA_part, gB, gC, D, L, N, G, \
                 b0, b1, scratch
    switch (N) {
    case 4: bwd_4(BWD_ARGS); break;
    case 8: bwd_8(BWD_ARGS); break;
    case 16: bwd_16(BWD_ARGS); break;
    case 32: bwd_32(BWD_ARGS); break;
    case 64: bwd_64(BWD_ARGS); break;
    default: bwd_any(BWD_ARGS);
    }
#undef BWD_ARGS
}

/* Mamba2 SSD as its recurrence, one (batch row, head) at a time, the [P, N] state in a buffer:
 *   S_t = a_t S_{t-1} + dt_t x_t B_t^T,   a_t = exp(dt_t A_h) * keep_t,   y_t = S_t C_t
 * (a scalar decay per head; ssd.py's chunked matmul form computes the same thing).
 * Layouts (float32, C-contiguous): x, y, gx [Bt, L, H, P]; dt, gdt [Bt, L, H]; A [H];
 * Bm, Cm, gB, gC [Bt, L, G, N] (head h uses group h / (H / G)); keep [Bt, L] or NULL;
 * final, gfinal [Bt, H, P, N] (gfinal may be NULL); gA_part [Bt, H].
 * The forward needs P N floats of scratch. The backward recomputes the states from checkpoints
 * every SSD_CKPT steps: (ceil(L / SSD_CKPT) + SSD_CKPT + 1) P N floats of scratch. As for the S6
 * scan, a call owns rows [b0, b1) of every output, so row ranges can run in parallel and the split
 * does not change the result. */
#define SSD_CKPT 64

#define SSD_STEP_TERMS                                                                         \
    const long bt = b * L + t;                                                                 \
    const float d = dt[bt * H + h];                                                            \
    const float a = expf(d * Ah) * (keep ? keep[bt] : 1.f);                                    \
    const float* xt = x + (bt * H + h) * P;                                                    \
    const float* Bt = Bm + (bt * G + h / hpg) * N;

#define DEFINE_SSD(SUFFIX, NCONST)                                                             \
static void ssd_advance_##SUFFIX(float* S, const float* prev, float a, float d,                \
                                 const float* xt, const float* Bt, long P, long N_) {          \
    const long N = NCONST ? NCONST : N_;                                                       \
    for (long p = 0; p < P; p++) {                                                             \
        const float xd = d * xt[p];                                                            \
        _Pragma("omp simd")                                                                    \
        for (long n = 0; n < N; n++) S[p * N + n] = a * prev[p * N + n] + xd * Bt[n];          \
    }                                                                                          \
}                                                                                              \
                                                                                               \
static void ssd_fwd_##SUFFIX(const float* x, const float* dt, const float* A, const float* Bm, \
                             const float* Cm, const float* keep, float* y, float* final,       \
                             long L, long H, long P, long N_, long G, long b0, long b1,        \
                             float* scratch) {                                                 \
    const long N = NCONST ? NCONST : N_;                                                       \
    const long hpg = H / G;                                                                    \
    float* S = scratch;                                                                        \
    for (long b = b0; b < b1; b++) {                                                           \
        for (long h = 0; h < H; h++) {                                                         \
            const float Ah = A[h];                                                             \
            for (long i = 0; i < P * N; i++) S[i] = 0.f;                                       \
            for (long t = 0; t < L; t++) {                                                     \
                SSD_STEP_TERMS                                                                 \
                const float* Ct = Cm + (bt * G + h / hpg) * N;                                 \
                float* yt = y + (bt * H + h) * P;                                              \
                for (long p = 0; p < P; p++) {                                                 \
                    float* Sp = S + p * N;                                                     \
                    const float xd = d * xt[p];                                                \
                    float acc = 0.f;                                                           \
                    _Pragma("omp simd reduction(+:acc)")                                       \
                    for (long n = 0; n < N; n++) {                                             \
                        Sp[n] = a * Sp[n] + xd * Bt[n];                                        \
                        acc += Sp[n] * Ct[n];                                                  \
                    }                                                                          \
                    yt[p] = acc;                                                               \
                }                                                                              \
            }                                                                                  \
            float* fb = final + (b * H + h) * P * N;                                           \
            for (long i = 0; i < P * N; i++) fb[i] = S[i];                                     \
        }                                                                                      \
    }                                                                                          \
}                                                                                              \
                                                                                               \
static void ssd_bwd_##SUFFIX(const float* x, const float* dt, const float* A, const float* Bm, \
                             const float* Cm, const float* keep, const float* gy,              \
                             const float* gfinal, float* gx, float* gdt, float* gA_part,       \
                             float* gB, float* gC, long L, long H, long P, long N_, long G,    \
                             long b0, long b1, float* scratch) {                               \
    const long N = NCONST ? NCONST : N_;                                                       \
    const long hpg = H / G, PN = P * N, T = SSD_CKPT;                                          \
    const long nc = (L + T - 1) / T;                                                           \
    float* ck = scratch;            /* [nc, P, N]: S_{cT-1}, the state each block starts from */ \
    float* buf = ck + nc * PN;      /* [T, P, N]: the block's states S_t */                    \
    float* gS = buf + T * PN;       /* [P, N]: d loss / d S_t from the steps after t */        \
    for (long b = b0; b < b1; b++) {                                                           \
        for (long h = 0; h < H; h++) {                                                         \
            const float Ah = A[h];                                                             \
            float gAh = 0.f;                                                                   \
            for (long i = 0; i < PN; i++) ck[i] = 0.f;                                         \
            for (long c = 0; c + 1 < nc; c++) { /* pass 1: block-start states */               \
                float* S = buf;                                                                \
                const float* prev = ck + c * PN;                                               \
                for (long t = c * T; t < (c + 1) * T; t++) {                                   \
                    SSD_STEP_TERMS                                                             \
                    ssd_advance_##SUFFIX(S, prev, a, d, xt, Bt, P, N);                         \
                    prev = S;                                                                  \
                }                                                                              \
                for (long i = 0; i < PN; i++) ck[(c + 1) * PN + i] = S[i];                     \
            }                                                                                  \
            for (long i = 0; i < PN; i++)                                                      \
                gS[i] = gfinal ? gfinal[(b * H + h) * PN + i] : 0.f;                           \
            for (long c = nc - 1; c >= 0; c--) { /* pass 2: blocks in reverse */               \
                const long t0 = c * T, t1 = t0 + T < L ? t0 + T : L;                           \
                for (long t = t0; t < t1; t++) {                                               \
                    SSD_STEP_TERMS                                                             \
                    const float* prev = t == t0 ? ck + c * PN : buf + (t - t0 - 1) * PN;       \
                    ssd_advance_##SUFFIX(buf + (t - t0) * PN, prev, a, d, xt, Bt, P, N);       \
                }                                                                              \
                for (long t = t1 - 1; t >= t0; t--) {                                          \
                    SSD_STEP_TERMS                                                             \
                    const float* Ct = Cm + (bt * G + h / hpg) * N;                             \
                    float* gBt = gB + (bt * G + h / hpg) * N;                                  \
                    float* gCt = gC + (bt * G + h / hpg) * N;                                  \
                    const float* gyt = gy + (bt * H + h) * P;                                  \
                    float* gxt = gx + (bt * H + h) * P;                                        \
                    const float* St = buf + (t - t0) * PN;                                     \
                    const float* Sp = t == t0 ? ck + c * PN : St - PN;                         \
                    float ga = 0.f, gd = 0.f; /* d loss / d a_t; d loss / d dt_t via x dt */   \
                    for (long p = 0; p < P; p++) {                                             \
                        const float gyp = gyt[p], xd = d * xt[p];                              \
                        float* gSp = gS + p * N;                                               \
                        const float* Stp = St + p * N;                                         \
                        const float* Spp = Sp + p * N;                                         \
                        float row = 0.f; /* sum_n dS_t[p, n] B_t[n] */                         \
                        _Pragma("omp simd reduction(+:row, ga)")                               \
                        for (long n = 0; n < N; n++) {                                         \
                            const float g = gSp[n] + gyp * Ct[n];                              \
                            gCt[n] += Stp[n] * gyp;                                            \
                            gBt[n] += g * xd;                                                  \
                            row += g * Bt[n];                                                  \
                            ga += g * Spp[n];                                                  \
                            gSp[n] = a * g;                                                    \
                        }                                                                      \
                        gxt[p] = d * row;                                                      \
                        gd += xt[p] * row;                                                     \
                    }                                                                          \
                    gdt[bt * H + h] = gd + ga * a * Ah;                                        \
                    gAh += ga * a * d;                                                         \
                }                                                                              \
            }                                                                                  \
            gA_part[b * H + h] = gAh;                                                          \
        }                                                                                      \
    }                                                                                          \
}

DEFINE_SSD(any, 0)
DEFINE_SSD(16, 16)
DEFINE_SSD(32, 32)
DEFINE_SSD(64, 64)
DEFINE_SSD(128, 128)

long ssd_checkpoint(void) { return SSD_CKPT; }

static void ssd_fwd_range(const float* x, const float* dt, const float* A, const float* Bm,
                          const float* Cm, const float* keep, float* y, float* final, long L,
                          long H, long P, long N, long G, long b0, long b1, float* scratch) {
#define SSD_FWD_ARGS x, dt, A, Bm, Cm, keep, y, final, L, H, P, N, G, b0, b1, scratch
    switch (N) {
    case 16: ssd_fwd_16(SSD_FWD_ARGS); break;
    case 32: ssd_fwd_32(SSD_FWD_ARGS); break;
    case 64: ssd_fwd_64(SSD_FWD_ARGS); break;
    case 128: ssd_fwd_128(SSD_FWD_ARGS); break;
    default: ssd_fwd_any(SSD_FWD_ARGS);
    }
#undef SSD_FWD_ARGS
}

static void ssd_bwd_range(const float* x, const float* dt, const float* A, const float* Bm,
                          const float* Cm, const float* keep, const float* gy, const float* gfinal,
                          float* gx, float* gdt, float* gA_part, float* gB, float* gC, long L,
                          long H, long P, long N, long G, long b0, long b1, float* scratch) {
#define SSD_BWD_ARGS x, dt, A, Bm, Cm, keep, gy, gfinal, gx, gdt, gA_part, gB, gC, L, H, P, N, \
                     G, b0, b1, scratch
    switch (N) {
    case 16: ssd_bwd_16(SSD_BWD_ARGS); break;
    case 32: ssd_bwd_32(SSD_BWD_ARGS); break;
    case 64: ssd_bwd_64(SSD_BWD_ARGS); break;
    case 128: ssd_bwd_128(SSD_BWD_ARGS); break;
    default: ssd_bwd_any(SSD_BWD_ARGS);
    }
#undef SSD_BWD_ARGS
}

/* Depthwise causal conv over time followed by SiLU, channels-last: the mixers' conv1d + silu.
 *   pre[b, t, c] = bias[c] + sum_k w[k, c] x[b, t - (K - 1) + k, c],   y = pre * sigmoid(pre)
 * x: [Bt, L, C] with row stride xs (>= C: a column slice of the in_proj output needs no copy);
 * wT: [K, C] (the conv weight [C, 1, K] transposed); bias: [C] or NULL; y, gy, gx [Bt, L, C]
 * contiguous; gw_part [Bt, K, C], gb_part [Bt, C] (summed over rows by the caller). gx is zeroed
 * here. The loops run over channels, which are contiguous, so they vectorise; rows [b0, b1)
 * belong to one call, as above. */
static void conv_pre_row(const float* x, long xs, const float* wT, const float* bias, long b,
                         long t, long L, long C, long K, float* pre) {
    for (long c = 0; c < C; c++) pre[c] = bias ? bias[c] : 0.f;
    for (long k = 0; k < K; k++) {
        const long s = t - (K - 1) + k;
        if (s < 0) continue;
        const float* xr = x + (b * L + s) * xs;
        const float* wk = wT + k * C;
        _Pragma("omp simd")
        for (long c = 0; c < C; c++) pre[c] += wk[c] * xr[c];
    }
}

static void conv_silu_fwd_range(const float* x, long xs, const float* wT, const float* bias,
                                float* y, long L, long C, long K, long b0, long b1) {
    for (long b = b0; b < b1; b++) {
        for (long t = 0; t < L; t++) {
            float* yt = y + (b * L + t) * C;
            conv_pre_row(x, xs, wT, bias, b, t, L, C, K, yt);
            _Pragma("omp simd")
            for (long c = 0; c < C; c++) yt[c] = yt[c] / (1.f + expf(-yt[c]));
        }
    }
}

static void conv_silu_bwd_range(const float* x, long xs, const float* wT, const float* bias,
                                const float* gy, float* gx, float* gw_part, float* gb_part, long L,
                                long C, long K, long b0, long b1) {
    float g[C];
    for (long b = b0; b < b1; b++) {
        float* gw = gw_part + b * K * C;
        float* gb = gb_part + b * C;
        for (long i = 0; i < K * C; i++) gw[i] = 0.f;
        for (long c = 0; c < C; c++) gb[c] = 0.f;
        for (long i = 0; i < L * C; i++) gx[b * L * C + i] = 0.f;
        for (long t = 0; t < L; t++) {
            const float* gyt = gy + (b * L + t) * C;
            conv_pre_row(x, xs, wT, bias, b, t, L, C, K, g);
            _Pragma("omp simd")
            for (long c = 0; c < C; c++) {
                const float pre = g[c], sg = 1.f / (1.f + expf(-pre));
                g[c] = gyt[c] * sg * (1.f + pre * (1.f - sg));
                gb[c] += g[c];
            }
            for (long k = 0; k < K; k++) {
                const long s = t - (K - 1) + k;
                if (s < 0) continue;
                const float* xr = x + (b * L + s) * xs;
                const float* wk = wT + k * C;
                float* gwk = gw + k * C;
                float* gxr = gx + (b * L + s) * C;
                _Pragma("omp simd")
                for (long c = 0; c < C; c++) {
                    gwk[c] += g[c] * xr[c];
                    gxr[c] += wk[c] * g[c];
                }
            }
        }
    }
}

/* ---- exported, parallel over batch rows (see FOR_RANGES) ---- */

void scan_fwd(const float* u, const float* delta, const float* A, const float* Bm,
              const float* Cm, const float* keep, float* y, float* last, long D, long L, long N,
              long G, long rows, long nt) {
    FOR_RANGES(rows, nt)
    scan_fwd_range(u, delta, A, Bm, Cm, keep, y, last, D, L, N, G, R0(rows), R1(rows));
}

void scan_bwd(const float* u, const float* delta, const float* A, const float* Bm,
              const float* Cm, const float* keep, const float* gy, const float* glast, float* gu,
              float* gdelta, float* gA_part, float* gB, float* gC, long D, long L, long N,
              long G, long rows, long nt, float* scratch, long stride) {
    FOR_RANGES(rows, nt)
    scan_bwd_range(u, delta, A, Bm, Cm, keep, gy, glast, gu, gdelta, gA_part, gB, gC, D, L, N, G,
                   R0(rows), R1(rows), scratch + part * stride);
}

void ssd_fwd(const float* x, const float* dt, const float* A, const float* Bm, const float* Cm,
             const float* keep, float* y, float* final, long L, long H, long P, long N, long G,
             long rows, long nt, float* scratch, long stride) {
    FOR_RANGES(rows, nt)
    ssd_fwd_range(x, dt, A, Bm, Cm, keep, y, final, L, H, P, N, G, R0(rows), R1(rows),
                  scratch + part * stride);
}

void ssd_bwd(const float* x, const float* dt, const float* A, const float* Bm, const float* Cm,
             const float* keep, const float* gy, const float* gfinal, float* gx, float* gdt,
             float* gA_part, float* gB, float* gC, long L, long H, long P, long N, long G,
             long rows, long nt, float* scratch, long stride) {
    FOR_RANGES(rows, nt)
    ssd_bwd_range(x, dt, A, Bm, Cm, keep, gy, gfinal, gx, gdt, gA_part, gB, gC, L, H, P, N, G,
                  R0(rows), R1(rows), scratch + part * stride);
}

void conv_silu_fwd(const float* x, long xs, const float* wT, const float* bias, float* y,
                   long L, long C, long K, long rows, long nt) {
    FOR_RANGES(rows, nt)
    conv_silu_fwd_range(x, xs, wT, bias, y, L, C, K, R0(rows), R1(rows));
}

void conv_silu_bwd(const float* x, long xs, const float* wT, const float* bias, const float* gy,
                   float* gx, float* gw_part, float* gb_part, long L, long C, long K, long rows,
                   long nt) {
    FOR_RANGES(rows, nt)
    conv_silu_bwd_range(x, xs, wT, bias, gy, gx, gw_part, gb_part, L, C, K, R0(rows), R1(rows));
}
