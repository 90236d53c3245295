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

#include "fastexp.h" /* exp_fast: an inlined expf for the vectorised loops */
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

/* Mamba2 SSD as its recurrence, one batch row at a time, channels-last:
 *   S_t = a_t S_{t-1} + dt_t x_t B_t^T,   a_t = exp(dt_t A_h) * keep_t,   y_t = S_t C_t
 * (a scalar decay per head; ssd.py's chunked matmul form computes the same thing). The state is
 * held as [N, D] (D = H P channels, contiguous), so every inner loop runs over the channels of
 * one group with the N states as an outer loop, and vectorises for any N: Mamba2 at the lab's
 * small sizes has N = 4 and P = 64, where the per-head kernel below (loops over N) fills half a
 * vector register. Per step the head's a_t and dt_t are spread over its P channels once.
 * Used for N < SSD_CHANNELS_BELOW (below the per-head kernel).
 * Layouts (float32, C-contiguous): x, y, gx [Bt, L, H, P]; dt, gdt [Bt, L, H]; A [H];
 * Bm, Cm, gB, gC [Bt, L, G, N] (head h uses group h / (H / G)); keep [Bt, L] or NULL;
 * final, gfinal [Bt, H, P, N] (gfinal may be NULL); gA_part [Bt, H].
 * Scratch: forward (N + 2) D floats; the backward recomputes the states from checkpoints
 * every SSD_CKPT steps: (ceil(L / SSD_CKPT) + SSD_CKPT + 1) N D + 4 D floats. As for the S6
 * scan, a call owns rows [b0, b1) of every output, so row ranges can run in parallel and the
 * split does not change the result. */
#define SSD_CKPT 64

long ssd_checkpoint(void) { return SSD_CKPT; }

/* a_t and dt_t x_t of row b, step t, per channel: av[c] = a of c's head, xd[c] = dt x[c] */
static void ssd_step_terms(const float* x, const float* dt, const float* A, const float* keep,
                           long bt, long H, long P, float* av, float* xd) {
    const float k = keep ? keep[bt] : 1.f;
    const float* xt = x + bt * H * P;
    for (long h = 0; h < H; h++) {
        const float d = dt[bt * H + h];
        const float a = exp_fast(d * A[h]) * k;
        _Pragma("omp simd")
        for (long p = 0; p < P; p++) {
            av[h * P + p] = a;
            xd[h * P + p] = d * xt[h * P + p];
        }
    }
}

/* S = av * prev + xd B^T over the [N, D] state (prev may alias S) */
static void ssd_advance(float* S, const float* prev, const float* av, const float* xd,
                        const float* Bt, long D, long N, long G) {
    const long Dg = D / G;
    for (long g = 0; g < G; g++)
        for (long n = 0; n < N; n++) {
            const float bn = Bt[g * N + n];
            const long o = n * D;
            _Pragma("omp simd")
            for (long c = g * Dg; c < (g + 1) * Dg; c++)
                S[o + c] = av[c] * prev[o + c] + xd[c] * bn;
        }
}

/* One forward step of the channels-last SSD: S = av * S + xd B_t^T in place over the [N, D]
 * state, and y_t += S C_t (the caller initialises y_t). */
static void ssd_step_out(float* S, const float* av, const float* xd, const float* Bt,
                         const float* Ct, float* yt, long D, long N, long G) {
    const long Dg = D / G;
    for (long g = 0; g < G; g++)
        for (long n = 0; n < N; n++) {
            const float bn = Bt[g * N + n], cn = Ct[g * N + n];
            float* Sn = S + n * D + g * Dg;
            const float* a = av + g * Dg;
            const float* u = xd + g * Dg;
            float* yg = yt + g * Dg;
            _Pragma("omp simd")
            for (long c = 0; c < Dg; c++) {
                Sn[c] = a[c] * Sn[c] + u[c] * bn;
                yg[c] += Sn[c] * cn;
            }
        }
}

/* The scratch of both channels-last backwards (ssd_bwd_channels, ssdf_bwd_range), in this order:
 * ck [nc, N, D] the state each block of SSD_CKPT steps starts from; buf [SSD_CKPT, N, D] the
 * block's states S_t; gS [N, D] d loss / d S_t from the steps after t; av, xd [D]; row [D]
 * sum_n dS_t[n, c] B_t[n]; gac [D] d loss / d a_t per channel; then whatever a caller adds. */
typedef struct {
    float *ck, *buf, *gS, *av, *xd, *row, *gac, *tail;
} ssd_scratch;

static ssd_scratch ssd_carve(float* scratch, long nc, long ND, long D) {
    ssd_scratch s;
    s.ck = scratch;
    s.buf = s.ck + nc * ND;
    s.gS = s.buf + SSD_CKPT * ND;
    s.av = s.gS + ND;
    s.xd = s.av + D;
    s.row = s.xd + D;
    s.gac = s.row + D;
    s.tail = s.gac + D;
    return s;
}

/* One reverse step's state gradients over the [N, D] state, for both channels-last backwards:
 * with g = dS_t + gy_t C_t^T: gC_t = S_t . gy_t, gB_t = g . xd, row = g B_t (d loss / d (dt x)
 * per channel), gac = g . S_{t-1} (d loss / d a_t per channel), and dS_{t-1} = a_t g in gS. */
static void ssd_state_grads(float* gS, const float* St, const float* Sp, const float* av,
                            const float* xd, const float* gyt, const float* Bt,
                            const float* Ct, float* gBt, float* gCt, float* row, float* gac,
                            long D, long N, long G) {
    const long Dg = D / G;
    for (long i = 0; i < D; i++) row[i] = gac[i] = 0.f;
    for (long g = 0; g < G; g++)
        for (long n = 0; n < N; n++) {
            const float bn = Bt[g * N + n], cn = Ct[g * N + n];
            const long o = n * D;
            float gc = 0.f, gb = 0.f;
            _Pragma("omp simd reduction(+:gc, gb)")
            for (long i = g * Dg; i < (g + 1) * Dg; i++) {
                const float gs = gS[o + i] + gyt[i] * cn;
                gc += St[o + i] * gyt[i];
                gb += gs * xd[i];
                row[i] += gs * bn;
                gac[i] += gs * Sp[o + i];
                gS[o + i] = av[i] * gs;
            }
            gCt[g * N + n] = gc;
            gBt[g * N + n] = gb;
        }
}

static void ssd_fwd_channels(const float* x, const float* dt, const float* A, const float* Bm,
                             const float* Cm, const float* keep, float* y, float* final, long L,
                             long H, long P, long N, long G, long b0, long b1, float* scratch) {
    const long D = H * P;
    float* S = scratch;       /* [N, D] */
    float* av = S + N * D;    /* [D] */
    float* xd = av + D;       /* [D] */
    for (long b = b0; b < b1; b++) {
        for (long i = 0; i < N * D; i++) S[i] = 0.f;
        for (long t = 0; t < L; t++) {
            const long bt = b * L + t;
            const float* Bt = Bm + bt * G * N;
            const float* Ct = Cm + bt * G * N;
            float* yt = y + bt * D;
            ssd_step_terms(x, dt, A, keep, bt, H, P, av, xd);
            for (long c = 0; c < D; c++) yt[c] = 0.f;
            ssd_step_out(S, av, xd, Bt, Ct, yt, D, N, G);
        }
        float* fb = final + b * D * N;
        for (long c = 0; c < D; c++)
            for (long n = 0; n < N; n++) fb[c * N + n] = S[n * D + c];
    }
}

static void ssd_bwd_channels(const float* x, const float* dt, const float* A, const float* Bm,
                             const float* Cm, const float* keep, const float* gy,
                             const float* gfinal, float* gx, float* gdt, float* gA_part,
                             float* gB, float* gC, long L, long H, long P, long N, long G,
                             long b0, long b1, float* scratch) {
    const long D = H * P, ND = N * D, T = SSD_CKPT;
    const long nc = (L + T - 1) / T;
    const ssd_scratch sc = ssd_carve(scratch, nc, ND, D);
    float *ck = sc.ck, *buf = sc.buf, *gS = sc.gS, *av = sc.av, *xd = sc.xd, *row = sc.row,
          *gac = sc.gac;
    for (long b = b0; b < b1; b++) {
        float* gA = gA_part + b * H;
        for (long h = 0; h < H; h++) gA[h] = 0.f;
        for (long i = 0; i < ND; i++) ck[i] = 0.f;
        for (long c = 0; c + 1 < nc; c++) { /* pass 1: block-start states */
            float* S = ck + (c + 1) * ND;
            const float* prev = ck + c * ND;
            for (long t = c * T; t < (c + 1) * T; t++) {
                const long bt = b * L + t;
                ssd_step_terms(x, dt, A, keep, bt, H, P, av, xd);
                ssd_advance(S, prev, av, xd, Bm + bt * G * N, D, N, G);
                prev = S;
            }
        }
        for (long c = 0; c < D; c++)
            for (long n = 0; n < N; n++)
                gS[n * D + c] = gfinal ? gfinal[(b * D + c) * N + n] : 0.f;
        for (long c = nc - 1; c >= 0; c--) { /* pass 2: blocks in reverse */
            const long t0 = c * T, t1 = t0 + T < L ? t0 + T : L;
            for (long t = t0; t < t1; t++) {
                const long bt = b * L + t;
                ssd_step_terms(x, dt, A, keep, bt, H, P, av, xd);
                const float* prev = t == t0 ? ck + c * ND : buf + (t - t0 - 1) * ND;
                ssd_advance(buf + (t - t0) * ND, prev, av, xd, Bm + bt * G * N, D, N, G);
            }
            for (long t = t1 - 1; t >= t0; t--) {
                const long bt = b * L + t;
                ssd_step_terms(x, dt, A, keep, bt, H, P, av, xd);
                const float* Bt = Bm + bt * G * N;
                const float* Ct = Cm + bt * G * N;
                const float* gyt = gy + bt * D;
                const float* St = buf + (t - t0) * ND;
                const float* Sp = t == t0 ? ck + c * ND : St - ND;
                ssd_state_grads(gS, St, Sp, av, xd, gyt, Bt, Ct, gB + bt * G * N,
                                gC + bt * G * N, row, gac, D, N, G);
                const float* xt = x + bt * D;
                float* gxt = gx + bt * D;
                for (long h = 0; h < H; h++) {
                    const float d = dt[bt * H + h], a = av[h * P];
                    float gd = 0.f, ga = 0.f;
                    _Pragma("omp simd reduction(+:gd, ga)")
                    for (long p = h * P; p < (h + 1) * P; p++) {
                        gxt[p] = d * row[p];
                        gd += xt[p] * row[p];
                        ga += gac[p];
                    }
                    gdt[bt * H + h] = gd + ga * a * A[h];
                    gA[h] += ga * a * d;
                }
            }
        }
    }
}

/* Mamba2 SSD, per head: one (batch row, head) at a time, the [P, N] state in a buffer (N >= 16):
 *   S_t = a_t S_{t-1} + dt_t x_t B_t^T,   a_t = exp(dt_t A_h) * keep_t,   y_t = S_t C_t
 * (a scalar decay per head; ssd.py's chunked matmul form computes the same thing).
 * Layouts (float32, C-contiguous): x, y, gx [Bt, L, H, P]; dt, gdt [Bt, L, H]; A [H];
 * Bm, Cm, gB, gC [Bt, L, G, N] (head h uses group h / (H / G)); keep [Bt, L] or NULL;
 * final, gfinal [Bt, H, P, N] (gfinal may be NULL); gA_part [Bt, H].
 * The forward needs P N floats of scratch. The backward recomputes the states from checkpoints
 * every SSD_CKPT steps: (ceil(L / SSD_CKPT) + SSD_CKPT + 1) P N floats of scratch. As for the S6
 * scan, a call owns rows [b0, b1) of every output, so row ranges can run in parallel and the split
 * does not change the result. */
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

static void ssd_fwd_heads(const float* x, const float* dt, const float* A, const float* Bm,
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

static void ssd_bwd_heads(const float* x, const float* dt, const float* A, const float* Bm,
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

/* ---- Mamba2 (SSD) fused with the mixer's element-wise chain, channels-last (N < 16) ----
 * What Mamba2Mixer computes around the SSD, in the layouts its conv produces, so that no
 * slice is copied and no gradient concatenated:
 *   dt = softplus(dtr + bias) per token and head,  the SSD above (channels-last, no resets),
 *   y = S_t C_t + Dskip_h x_t.
 * x, B, C are column slices of one [Bt, L, W] buffer (the conv's output xBC: x at columns
 * [0, D), B at [D, D + G N), C after it; token stride xs = W); dtr [Bt, L, H] with token stride
 * dts (a column slice of in_proj's output); bias, A [H]; Dskip [H] or NULL; y, gy [Bt, L, D]
 * contiguous. The backward writes the gradients of x, B and C into gxbc [Bt, L, W] (the same
 * columns; the caller's buffer, contiguous with token stride xs), the raw dt's into gdtr
 * [Bt, L, H] (the bias's is its sum over tokens), and per-row partial sums gA_part, gD_part
 * [Bt, H]. Scratch as the channels kernel's: forward (N + 2) D + H floats, backward
 * (ceil(L / SSD_CKPT) + SSD_CKPT + 1) N D + 4 D + H floats. */
static void ssdf_terms(const float* xbc, long xs, const float* dtr, long dts, const float* bias,
                       const float* A, long bt, long H, long P, float* av, float* xd, float* dl) {
    const float* xt = xbc + bt * xs;
    for (long h = 0; h < H; h++) {
        const float d = softplus_fast(dtr[bt * dts + h] + bias[h]);
        const float a = exp_fast(d * A[h]);
        dl[h] = d;
        _Pragma("omp simd")
        for (long p = 0; p < P; p++) {
            av[h * P + p] = a;
            xd[h * P + p] = d * xt[h * P + p];
        }
    }
}

static void ssdf_fwd_range(const float* xbc, long xs, const float* dtr, long dts,
                           const float* bias, const float* A, const float* Dskip, float* y,
                           long L, long H, long P, long N, long G, long b0, long b1,
                           float* scratch) {
    const long D = H * P;
    float* S = scratch;       /* [N, D] */
    float* av = S + N * D;    /* [D] */
    float* xd = av + D;       /* [D] */
    float* dl = xd + D;       /* [H] */
    for (long b = b0; b < b1; b++) {
        for (long i = 0; i < N * D; i++) S[i] = 0.f;
        for (long t = 0; t < L; t++) {
            const long bt = b * L + t;
            const float* xt = xbc + bt * xs;
            const float* Bt = xt + D;
            const float* Ct = Bt + G * N;
            float* yt = y + bt * D;
            ssdf_terms(xbc, xs, dtr, dts, bias, A, bt, H, P, av, xd, dl);
            if (Dskip) {
                for (long h = 0; h < H; h++) {
                    const float dh = Dskip[h];
                    _Pragma("omp simd")
                    for (long p = h * P; p < (h + 1) * P; p++) yt[p] = dh * xt[p];
                }
            } else {
                for (long c = 0; c < D; c++) yt[c] = 0.f;
            }
            ssd_step_out(S, av, xd, Bt, Ct, yt, D, N, G);
        }
    }
}

static void ssdf_bwd_range(const float* xbc, long xs, const float* dtr, long dts,
                           const float* bias, const float* A, const float* Dskip,
                           const float* gy, float* gxbc, float* gdtr, float* gA_part,
                           float* gD_part, long L, long H, long P, long N, long G, long b0,
                           long b1, float* scratch) {
    const long D = H * P, ND = N * D, T = SSD_CKPT;
    const long nc = (L + T - 1) / T;
    const ssd_scratch sc = ssd_carve(scratch, nc, ND, D);
    float *ck = sc.ck, *buf = sc.buf, *gS = sc.gS, *av = sc.av, *xd = sc.xd, *row = sc.row,
          *gac = sc.gac;
    float* dl = sc.tail;           /* [H] */
    for (long b = b0; b < b1; b++) {
        float* gA = gA_part + b * H;
        float* gDs = gD_part + b * H;
        for (long h = 0; h < H; h++) gA[h] = gDs[h] = 0.f;
        for (long i = 0; i < ND; i++) ck[i] = gS[i] = 0.f;
        for (long c = 0; c + 1 < nc; c++) { /* pass 1: block-start states */
            float* S = ck + (c + 1) * ND;
            const float* prev = ck + c * ND;
            for (long t = c * T; t < (c + 1) * T; t++) {
                const long bt = b * L + t;
                ssdf_terms(xbc, xs, dtr, dts, bias, A, bt, H, P, av, xd, dl);
                ssd_advance(S, prev, av, xd, xbc + bt * xs + D, D, N, G);
                prev = S;
            }
        }
        for (long c = nc - 1; c >= 0; c--) { /* pass 2: blocks in reverse */
            const long t0 = c * T, t1 = t0 + T < L ? t0 + T : L;
            for (long t = t0; t < t1; t++) {
                const long bt = b * L + t;
                ssdf_terms(xbc, xs, dtr, dts, bias, A, bt, H, P, av, xd, dl);
                const float* prev = t == t0 ? ck + c * ND : buf + (t - t0 - 1) * ND;
                ssd_advance(buf + (t - t0) * ND, prev, av, xd, xbc + bt * xs + D, D, N, G);
            }
            for (long t = t1 - 1; t >= t0; t--) {
                const long bt = b * L + t;
                ssdf_terms(xbc, xs, dtr, dts, bias, A, bt, H, P, av, xd, dl);
                const float* xt = xbc + bt * xs;
                const float* Bt = xt + D;
                const float* Ct = Bt + G * N;
                float* gxt = gxbc + bt * xs;
                float* gBt = gxt + D;
                float* gCt = gBt + G * N;
                const float* gyt = gy + bt * D;
                const float* St = buf + (t - t0) * ND;
                const float* Sp = t == t0 ? ck + c * ND : St - ND;
                ssd_state_grads(gS, St, Sp, av, xd, gyt, Bt, Ct, gBt, gCt, row, gac, D, N, G);
                for (long h = 0; h < H; h++) {
                    const float d = dl[h], a = av[h * P], dh = Dskip ? Dskip[h] : 0.f;
                    float gd = 0.f, ga = 0.f, gdd = 0.f;
                    _Pragma("omp simd reduction(+:gd, ga, gdd)")
                    for (long p = h * P; p < (h + 1) * P; p++) {
                        gxt[p] = d * row[p] + dh * gyt[p];
                        gd += xt[p] * row[p];
                        ga += gac[p];
                        gdd += gyt[p] * xt[p];
                    }
                    const float pre = dtr[bt * dts + h] + bias[h];
                    gdtr[bt * H + h] = (gd + ga * a * A[h]) / (1.f + exp_fast(-pre)); /* softplus' */
                    gA[h] += ga * a * d;
                    gDs[h] += gdd;
                }
            }
        }
    }
}

void ssdf_fwd(const float* xbc, long xs, const float* dtr, long dts, const float* bias,
              const float* A, const float* Dskip, float* y, long L, long H, long P, long N,
              long G, long rows, long nt, float* scratch, long stride) {
    FOR_RANGES(rows, nt)
    ssdf_fwd_range(xbc, xs, dtr, dts, bias, A, Dskip, y, L, H, P, N, G, R0(rows), R1(rows),
                   scratch + part * stride);
}

void ssdf_bwd(const float* xbc, long xs, const float* dtr, long dts, const float* bias,
              const float* A, const float* Dskip, const float* gy, float* gxbc, float* gdtr,
              float* gA_part, float* gD_part, long L, long H, long P, long N, long G, long rows,
              long nt, float* scratch, long stride) {
    FOR_RANGES(rows, nt)
    ssdf_bwd_range(xbc, xs, dtr, dts, bias, A, Dskip, gy, gxbc, gdtr, gA_part, gD_part, L, H, P,
                   N, G, R0(rows), R1(rows), scratch + part * stride);
}

/* Which loop order: the per-head one vectorises over N, so it wins from N = 16 on (its
 * [P, N] rows fill whole vector registers and sum C_t . S_t in registers); below that the
 * channels-last one (measured once each, forward + backward, 32 x 34 or 16 x 256 tokens, 1
 * thread: N = 4, P = 64: 3.0 ms against 9.1 ms; N = 32, P = 16: 32 ms against 20 ms). Both
 * compute the same recurrence; the split is by N alone, so a given model always takes the same
 * path. */
#define SSD_CHANNELS_BELOW 16

long ssd_channels_below(void) { return SSD_CHANNELS_BELOW; }

static void ssd_fwd_range(const float* x, const float* dt, const float* A, const float* Bm,
                          const float* Cm, const float* keep, float* y, float* final, long L,
                          long H, long P, long N, long G, long b0, long b1, float* scratch) {
    if (N < SSD_CHANNELS_BELOW)
        ssd_fwd_channels(x, dt, A, Bm, Cm, keep, y, final, L, H, P, N, G, b0, b1, scratch);
    else
        ssd_fwd_heads(x, dt, A, Bm, Cm, keep, y, final, L, H, P, N, G, b0, b1, scratch);
}

static void ssd_bwd_range(const float* x, const float* dt, const float* A, const float* Bm,
                          const float* Cm, const float* keep, const float* gy, const float* gfinal,
                          float* gx, float* gdt, float* gA_part, float* gB, float* gC, long L,
                          long H, long P, long N, long G, long b0, long b1, float* scratch) {
    if (N < SSD_CHANNELS_BELOW)
        ssd_bwd_channels(x, dt, A, Bm, Cm, keep, gy, gfinal, gx, gdt, gA_part, gB, gC, L, H, P,
                         N, G, b0, b1, scratch);
    else
        ssd_bwd_heads(x, dt, A, Bm, Cm, keep, gy, gfinal, gx, gdt, gA_part, gB, gC, L, H, P, N,
                      G, b0, b1, scratch);
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
            for (long c = 0; c < C; c++) yt[c] = yt[c] / (1.f + exp_fast(-yt[c]));
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
                const float pre = g[c], sg = 1.f / (1.f + exp_fast(-pre));
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

/* ---- Mamba (S6) fused with the mixer's element-wise chain, channels-last ----
 * What MambaMixer computes around the scan, in one pass per direction, in the layout its
 * projections produce (so no transposes or copies between them and the scan):
 *   delta = softplus(dtr + bias),  h_t = exp(delta_t A) h_{t-1} + delta_t u_t B_t,
 *   or, with the low-rank dt projection (R > 0): delta = softplus(WT^T dtr + bias), dtr [R]
 *   per token (a column slice of x_proj's output) and WT [R, D] (dt_proj's weight transposed);
 *   its gradients then go to gdtr [Bt, L, R] and gWT_part [Bt, R, D] (summed by the caller).
 *   Why in here: as separate matmuls, [Bt L, R] x [R, D] and its two backward products have
 *   an output or inner size of R (4 at d_model 64), where BLAS runs at a few GFLOP/s.
 *   y = C_t . h_t + Dskip u_t (+ side_t),   out = y * silu(z_t)  (out = y when z is NULL).
 * The loops run over channels d (contiguous here), the N states as an outer loop, so they
 * vectorise for any N (the per-channel scan above vectorises over N only: at N = 4 a quarter
 * of a vector register). softplus as torch computes it (threshold 20).
 * Layouts (float32): u, out, gu, gdtr, gz, gside [Bt, L, D] contiguous; dtr [Bt, L, D] with
 * token stride dts; z [Bt, L, D] with token stride zs; Bm, Cm [Bt, L, N] with token stride bcs
 * (slices of one projection need no copy); AT [N, D] (A transposed); bias, Dskip [D] (Dskip may
 * be NULL); side [Bt, L, D] or NULL; last, glast [Bt, D, N] (glast may be NULL);
 * gB, gC [Bt, L, N] contiguous; per-row partial sums gbias_part, gD_part [Bt, D],
 * gAT_part [Bt, N, D] (summed over rows by the caller). Rows [b0, b1) belong to one call.
 * Scratch: forward N D floats; backward (L (2 N + 3) + N + 6) D floats. */
/* delta's pre-activation of one token: rt[d] + bias[d], or (R > 0) sum_r rt[r] WT[r, d] + bias[d]
 * (the sum first, then the bias: the order of the unfused path, dt @ W^T then + bias). */
static inline void delta_pre(const float* rt, const float* WT, long R, const float* bias,
                             float* pre, long D) {
    if (R) {
        _Pragma("omp simd")
        for (long d = 0; d < D; d++) pre[d] = rt[0] * WT[d];
        for (long r = 1; r < R; r++) {
            const float w = rt[r];
            const float* Wr = WT + r * D;
            _Pragma("omp simd")
            for (long d = 0; d < D; d++) pre[d] += w * Wr[d];
        }
        _Pragma("omp simd")
        for (long d = 0; d < D; d++) pre[d] += bias[d];
    } else {
        _Pragma("omp simd")
        for (long d = 0; d < D; d++) pre[d] = rt[d] + bias[d];
    }
}

/* acc += Dskip u + side, each term where present: y before the gate. The branches sit outside
 * the loops: a condition inside an `omp simd` loop becomes masked loads (vmaskmovps), which
 * were most of the forward's time on an AMD EPYC. */
static inline void add_skips(float* acc, const float* Dskip, const float* ut, const float* st,
                             long D) {
    if (Dskip) {
        _Pragma("omp simd")
        for (long d = 0; d < D; d++) acc[d] += Dskip[d] * ut[d];
    }
    if (st) {
        _Pragma("omp simd")
        for (long d = 0; d < D; d++) acc[d] += st[d];
    }
}

static void s6f_fwd_range(const float* u, const float* dtr, long dts, const float* WT, long R,
                          const float* bias, const float* AT, const float* Bm, const float* Cm,
                          long bcs, const float* Dskip, const float* z, long zs,
                          const float* side, float* out, float* last, long L, long D, long N,
                          long b0, long b1, float* scratch) {
    float* h = scratch; /* [N, D] */
    float dl[D], du[D], acc[D], pre[D];
    for (long b = b0; b < b1; b++) {
        for (long i = 0; i < N * D; i++) h[i] = 0.f;
        for (long t = 0; t < L; t++) {
            const long bt = b * L + t;
            const float* ut = u + bt * D;
            const float* rt = dtr + bt * dts;
            const float* Bt = Bm + bt * bcs;
            const float* Ct = Cm + bt * bcs;
            delta_pre(rt, WT, R, bias, pre, D);
            _Pragma("omp simd")
            for (long d = 0; d < D; d++) {
                dl[d] = softplus_fast(pre[d]);
                du[d] = dl[d] * ut[d];
                acc[d] = 0.f;
            }
            for (long n = 0; n < N; n++) {
                const float bn = Bt[n], cn = Ct[n];
                const float* An = AT + n * D;
                float* hn = h + n * D;
                _Pragma("omp simd")
                for (long d = 0; d < D; d++) {
                    hn[d] = exp_fast(dl[d] * An[d]) * hn[d] + du[d] * bn;
                    acc[d] += hn[d] * cn;
                }
            }
            float* ot = out + bt * D;
            const float* st = side ? side + bt * D : NULL;
            const float* zt = z ? z + bt * zs : NULL;
            add_skips(acc, Dskip, ut, st, D);
            if (zt) {
                _Pragma("omp simd")
                for (long d = 0; d < D; d++) ot[d] = acc[d] * zt[d] / (1.f + exp_fast(-zt[d]));
            } else {
                for (long d = 0; d < D; d++) ot[d] = acc[d];
            }
        }
        for (long n = 0; n < N; n++)
            for (long d = 0; d < D; d++) last[(b * D + d) * N + n] = h[n * D + d];
    }
}

static void s6f_bwd_range(const float* u, const float* dtr, long dts, const float* WT, long R,
                          const float* bias, const float* AT, const float* Bm, const float* Cm,
                          long bcs, const float* Dskip, const float* z, long zs,
                          const float* side, const float* gout, const float* glast, float* gu,
                          float* gdtr, float* gz, float* gside, float* gB, float* gC,
                          float* gbias_part, float* gD_part, float* gAT_part, float* gWT_part,
                          long L, long D, long N, long b0, long b1, float* scratch) {
    float* H = scratch;                /* [L, N, D] states */
    float* AH = H + L * N * D;         /* [L, N, D] their decays a_t = exp(delta_t A) */
    float* DL = AH + L * N * D;        /* [L, D] delta */
    float* SG = DL + L * D;            /* [L, D] softplus' at delta's pre-activation */
    float* GY = SG + L * D;            /* [L, D] d loss / d y (before the gate) */
    float* dh = GY + L * D;            /* [N, D] */
    float* gdu = dh + N * D;           /* [D] */
    float* gdl = gdu + D;              /* [D] */
    float* acc = gdl + D;              /* [D] */
    float* zero = acc + D;             /* [D] h_{-1} */
    float* pre = zero + D;             /* [D] delta before softplus */
    float* gpre = pre + D;             /* [D] its gradient */
    for (long d = 0; d < D; d++) zero[d] = 0.f;
    for (long b = b0; b < b1; b++) {
        float* gbias = gbias_part + b * D;
        float* gDs = gD_part + b * D;
        float* gAT = gAT_part + b * N * D;
        float* gWT = R ? gWT_part + b * R * D : NULL;
        for (long d = 0; d < D; d++) gbias[d] = gDs[d] = 0.f;
        for (long i = 0; i < N * D; i++) gAT[i] = 0.f;
        for (long i = 0; i < R * D; i++) gWT[i] = 0.f;
        /* forward again: states, delta, and the gradient at y (which needs y for the gate) */
        for (long t = 0; t < L; t++) {
            const long bt = b * L + t;
            const float* ut = u + bt * D;
            const float* rt = dtr + bt * dts;
            const float* Bt = Bm + bt * bcs;
            const float* Ct = Cm + bt * bcs;
            float* dl = DL + t * D;
            float* sgt = SG + t * D;
            delta_pre(rt, WT, R, bias, pre, D);
            _Pragma("omp simd")
            for (long d = 0; d < D; d++) {
                dl[d] = softplus_fast(pre[d]);
                sgt[d] = 1.f / (1.f + exp_fast(-pre[d])); /* softplus' */
                acc[d] = 0.f;
            }
            for (long n = 0; n < N; n++) {
                const float bn = Bt[n], cn = Ct[n];
                const float* An = AT + n * D;
                const float* hp = t ? H + ((t - 1) * N + n) * D : zero;
                float* hn = H + (t * N + n) * D;
                float* an = AH + (t * N + n) * D;
                _Pragma("omp simd")
                for (long d = 0; d < D; d++) {
                    an[d] = exp_fast(dl[d] * An[d]);
                    hn[d] = an[d] * hp[d] + dl[d] * ut[d] * bn;
                    acc[d] += hn[d] * cn;
                }
            }
            const float* st = side ? side + bt * D : NULL;
            const float* zt = z ? z + bt * zs : NULL;
            const float* go = gout + bt * D;
            float* gy = GY + t * D;
            float* gzt = gz ? gz + bt * D : NULL;
            add_skips(acc, Dskip, ut, st, D);
            if (zt) {
                _Pragma("omp simd")
                for (long d = 0; d < D; d++) {
                    const float sg = 1.f / (1.f + exp_fast(-zt[d]));
                    gy[d] = go[d] * zt[d] * sg;
                    gzt[d] = go[d] * acc[d] * sg * (1.f + zt[d] * (1.f - sg));
                }
            } else {
                for (long d = 0; d < D; d++) gy[d] = go[d];
            }
            _Pragma("omp simd")
            for (long d = 0; d < D; d++) gDs[d] += gy[d] * ut[d];
            if (gside) {
                float* gst = gside + bt * D;
                for (long d = 0; d < D; d++) gst[d] = gy[d];
            }
        }
        for (long n = 0; n < N; n++)
            for (long d = 0; d < D; d++)
                dh[n * D + d] = glast ? glast[(b * D + d) * N + n] : 0.f;
        for (long t = L - 1; t >= 0; t--) {
            const long bt = b * L + t;
            const float* ut = u + bt * D;
            const float* rt = dtr + bt * dts;
            const float* Bt = Bm + bt * bcs;
            const float* Ct = Cm + bt * bcs;
            const float* dl = DL + t * D;
            const float* gy = GY + t * D;
            for (long d = 0; d < D; d++) gdu[d] = gdl[d] = 0.f;
            for (long n = 0; n < N; n++) {
                const float bn = Bt[n], cn = Ct[n];
                const float* An = AT + n * D;
                const float* hn = H + (t * N + n) * D;
                const float* hp = t ? H + ((t - 1) * N + n) * D : zero;
                const float* an = AH + (t * N + n) * D;
                float* dhn = dh + n * D;
                float* gAn = gAT + n * D;
                float gc = 0.f, gb = 0.f;
                _Pragma("omp simd reduction(+:gc, gb)")
                for (long d = 0; d < D; d++) {
                    const float a = an[d];
                    const float g = dhn[d] + gy[d] * cn;
                    gc += hn[d] * gy[d];
                    gdu[d] += g * bn;
                    gb += g * dl[d] * ut[d];
                    const float gda = g * a * hp[d]; /* d loss / d a_t, times a_t */
                    gdl[d] += gda * An[d];
                    gAn[d] += gda * dl[d];
                    dhn[d] = a * g;
                }
                gC[bt * N + n] = gc;
                gB[bt * N + n] = gb;
            }
            float* gut = gu + bt * D;
            const float* sgt = SG + t * D;
            float* grt = R ? gpre : gdtr + bt * D;
            _Pragma("omp simd")
            for (long d = 0; d < D; d++) {
                const float gdelta = gdl[d] + gdu[d] * ut[d];
                const float g = gdelta * sgt[d];
                gut[d] = gdu[d] * dl[d];
                grt[d] = g;
                gbias[d] += g;
            }
            for (long r = 0; r < R; r++) {
                const float w = rt[r];
                const float* Wr = WT + r * D;
                float* gWr = gWT + r * D;
                float s = 0.f;
                _Pragma("omp simd reduction(+:s)")
                for (long d = 0; d < D; d++) {
                    s += gpre[d] * Wr[d];
                    gWr[d] += gpre[d] * w;
                }
                gdtr[bt * R + r] = s;
            }
            if (Dskip) {
                _Pragma("omp simd")
                for (long d = 0; d < D; d++) gut[d] += gy[d] * Dskip[d];
            }
        }
    }
}

void s6f_fwd(const float* u, const float* dtr, long dts, const float* WT, long R,
             const float* bias, const float* AT, const float* Bm, const float* Cm, long bcs,
             const float* Dskip, const float* z, long zs, const float* side, float* out,
             float* last, long L, long D, long N, long rows, long nt, float* scratch,
             long stride) {
    FOR_RANGES(rows, nt)
    s6f_fwd_range(u, dtr, dts, WT, R, bias, AT, Bm, Cm, bcs, Dskip, z, zs, side, out, last, L,
                  D, N, R0(rows), R1(rows), scratch + part * stride);
}

void s6f_bwd(const float* u, const float* dtr, long dts, const float* WT, long R,
             const float* bias, const float* AT, const float* Bm, const float* Cm, long bcs,
             const float* Dskip, const float* z, long zs, const float* side, const float* gout,
             const float* glast, float* gu, float* gdtr, float* gz, float* gside, float* gB,
             float* gC, float* gbias_part, float* gD_part, float* gAT_part, float* gWT_part,
             long L, long D, long N, long rows, long nt, float* scratch, long stride) {
    FOR_RANGES(rows, nt)
    s6f_bwd_range(u, dtr, dts, WT, R, bias, AT, Bm, Cm, bcs, Dskip, z, zs, side, gout, glast, gu,
                  gdtr, gz, gside, gB, gC, gbias_part, gD_part, gAT_part, gWT_part, L, D, N,
                  R0(rows), R1(rows), scratch + part * stride);
}

/* exp_fast and softplus_fast over an array: only for the tests that tie them to exp and
 * softplus (tests/ssm/test_ssm_native.py) */
void exp_fast_array(const float* x, float* y, long n) {
    _Pragma("omp simd")
    for (long i = 0; i < n; i++) y[i] = exp_fast(x[i]);
}

void softplus_fast_array(const float* x, float* y, long n) {
    _Pragma("omp simd")
    for (long i = 0; i < n; i++) y[i] = softplus_fast(x[i]);
}
