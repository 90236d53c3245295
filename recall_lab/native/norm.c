/* RMSNorm on the CPU, forward and backward, optionally gated first: the native fast path of
 * recall_lab/ssm/norm.py (built and loaded with the other kernels by recall_lab/native).
 *
 *   u = x                 (plain: nn.RMSNorm, every block's pre-norm)
 *   u = x * silu(z)       (gated: Mamba2's norm with norm_before_gate=False)
 *   per token and group of S = C / G channels: r = 1 / sqrt(mean(u^2) + eps),  y = u r w
 *
 * Why: torch's CPU rms_norm runs its backward as the composite's ~10 element-wise ops (pow,
 * mean, rsqrt and their backwards), the gated one is ~15 more: on the lab's [32 x 34, 64] and
 * [32 x 34, 128] tensors about 0.4 and 1.2 ms per layer and step, forward and backward, for
 * what is one pass over the data each way.
 *
 * Layouts (float32): x, y, gy, gx, gz [Bt, L, C] contiguous; z [Bt, L, C] with token stride zs
 * (a column slice of a projection) or NULL; w [C]; rstd [Bt, L, G] (the forward writes r, the
 * backward reads it); gw_part [Bt, C] (per-row partial sums, summed by the caller, so results
 * do not depend on how rows are split over threads). Rows [b0, b1) belong to one call. */
#include <math.h>

#include "fastexp.h"
#include "rows.h"

static void norm_fwd_range(const float* x, const float* z, long zs, const float* w, float* y,
                           float* rstd, long L, long C, long G, float eps, long b0, long b1) {
    const long S = C / G;
    float u[C];
    for (long b = b0; b < b1; b++) {
        for (long t = 0; t < L; t++) {
            const long bt = b * L + t;
            const float* xt = x + bt * C;
            float* yt = y + bt * C;
            if (z) {
                const float* zt = z + bt * zs;
                _Pragma("omp simd")
                for (long c = 0; c < C; c++) u[c] = xt[c] * zt[c] / (1.f + exp_fast(-zt[c]));
            } else {
                for (long c = 0; c < C; c++) u[c] = xt[c];
            }
            for (long g = 0; g < G; g++) {
                const float* ug = u + g * S;
                float ss = 0.f;
                _Pragma("omp simd reduction(+:ss)")
                for (long c = 0; c < S; c++) ss += ug[c] * ug[c];
                const float r = 1.f / sqrtf(ss / (float)S + eps);
                rstd[bt * G + g] = r;
                const float* wg = w + g * S;
                float* yg = yt + g * S;
                _Pragma("omp simd")
                for (long c = 0; c < S; c++) yg[c] = ug[c] * r * wg[c];
            }
        }
    }
}

static void norm_bwd_range(const float* x, const float* z, long zs, const float* w,
                           const float* rstd, const float* gy, float* gx, float* gz,
                           float* gw_part, long L, long C, long G, float eps, long b0, long b1) {
    const long S = C / G;
    float u[C], sg[C], gu[C];
    for (long b = b0; b < b1; b++) {
        float* gw = gw_part + b * C;
        for (long c = 0; c < C; c++) gw[c] = 0.f;
        for (long t = 0; t < L; t++) {
            const long bt = b * L + t;
            const float* xt = x + bt * C;
            const float* gyt = gy + bt * C;
            const float* zt = z ? z + bt * zs : NULL;
            if (zt) {
                _Pragma("omp simd")
                for (long c = 0; c < C; c++) {
                    sg[c] = 1.f / (1.f + exp_fast(-zt[c]));
                    u[c] = xt[c] * zt[c] * sg[c];
                }
            } else {
                for (long c = 0; c < C; c++) u[c] = xt[c];
            }
            for (long g = 0; g < G; g++) {
                /* y = u r w:  gu = r (gy w) - u r^3 mean(gy w u),  gw += gy u r */
                const float r = rstd[bt * G + g];
                const float* ug = u + g * S;
                const float* wg = w + g * S;
                const float* gyg = gyt + g * S;
                float* gwg = gw + g * S;
                float* gug = gu + g * S;
                float dot = 0.f;
                _Pragma("omp simd reduction(+:dot)")
                for (long c = 0; c < S; c++) {
                    gug[c] = gyg[c] * wg[c];
                    dot += gug[c] * ug[c];
                    gwg[c] += gyg[c] * ug[c] * r;
                }
                if (S == 1) {
                    /* one channel: r gy w - u^2 r^3 gy w = gy w r (1 - u^2 r^2) = gy w eps r^3
                     * exactly (r^2 = 1 / (u^2 + eps)); the difference cancels to float32's
                     * rounding error (1e-5 relative seen), this form does not */
                    gug[0] *= eps * r * r * r;
                    continue;
                }
                const float k = dot * r * r * r / (float)S;
                _Pragma("omp simd")
                for (long c = 0; c < S; c++) gug[c] = gug[c] * r - ug[c] * k;
            }
            float* gxt = gx + bt * C;
            if (zt) { /* u = x z sigmoid(z) */
                float* gzt = gz + bt * C;
                _Pragma("omp simd")
                for (long c = 0; c < C; c++) {
                    gxt[c] = gu[c] * zt[c] * sg[c];
                    gzt[c] = gu[c] * xt[c] * sg[c] * (1.f + zt[c] * (1.f - sg[c]));
                }
            } else {
                for (long c = 0; c < C; c++) gxt[c] = gu[c];
            }
        }
    }
}

void norm_fwd(const float* x, const float* z, long zs, const float* w, float* y, float* rstd,
              long L, long C, long G, float eps, long rows, long nt) {
    FOR_RANGES(rows, nt)
    norm_fwd_range(x, z, zs, w, y, rstd, L, C, G, eps, R0(rows), R1(rows));
}

void norm_bwd(const float* x, const float* z, long zs, const float* w, const float* rstd,
              const float* gy, float* gx, float* gz, float* gw_part, long L, long C, long G,
              float eps, long rows, long nt) {
    FOR_RANGES(rows, nt)
    norm_bwd_range(x, z, zs, w, rstd, gy, gx, gz, gw_part, L, C, G, eps, R0(rows), R1(rows));
}
