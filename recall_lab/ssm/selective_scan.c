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

void scan_fwd(const float* u, const float* delta, const float* A, const float* Bm,
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

void scan_bwd(const float* u, const float* delta, const float* A, const float* Bm,
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
