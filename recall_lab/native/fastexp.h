/* exp_fast: expf for the native kernels' inner loops, inlined so that `omp simd` loops vectorise
 * it without a call. libmvec's vector expf is a call through the vector ABI, which clobbers every
 * vector register, so a loop that also carries states spills around it; at the lab's small widths
 * (128 channels, 4 states) that call was most of the scan's time.
 * Cephes' single-precision method: exp(x) = 2^n exp(r), n = round(x log2 e), r = x - n ln 2 (ln 2
 * split in two for an exact product), exp(r) by its degree-6 polynomial on |r| <= ln2 / 2; about
 * 2 ulp over the normal range. Below -87.34 (where expf is subnormal or 0) it returns 0, above
 * 88.38 it saturates at the largest power it can build (the lab's arguments are delta * A <= 0
 * and gate logits, far from that edge). tests/ssm/test_ssm_native.py ties it to exp. */
#ifndef RECALL_LAB_FASTEXP_H
#define RECALL_LAB_FASTEXP_H

#include <math.h>
#include <stdint.h>
#include <string.h>

static inline float exp_fast(float x) {
    const float lo = -87.33654f, hi = 88.37626f;
    const float xc = x < lo ? lo : (x > hi ? hi : x);
    const float n = floorf(xc * 1.44269504088896341f + 0.5f);
    float r = xc - n * 0.693359375f;
    r = r + n * 2.12194440e-4f;
    float p = 1.9875691500e-4f;
    p = p * r + 1.3981999507e-3f;
    p = p * r + 8.3334519073e-3f;
    p = p * r + 4.1665795894e-2f;
    p = p * r + 1.6666665459e-1f;
    p = p * r + 5.0000001201e-1f;
    p = p * r * r + r + 1.f;
    const int32_t bits = ((int32_t)n + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return x < lo ? 0.f : p * scale;
}

/* softplus as torch computes it (x above 20 passes through), inlined for the same reason:
 * libmvec's vector log1pf was about 4% of a Mamba training step. log1p(exp(x)) is written
 * max(x, 0) + log1p(z), z = exp(-|x|) in (0, 1], and log1p(z) = 2 atanh(s), s = z / (2 + z) in
 * (0, 1/3], by atanh's odd series to s^15 (the next term is below 2e-9 of the sum): no 1 + z is
 * formed, so a tiny z keeps its relative precision (softplus(-30) = exp(-30) to float
 * rounding). Within a few float32 ulp of softplus in double (tests/ssm/test_ssm_native.py). */
static inline float softplus_fast(float x) {
    if (x > 20.f) return x;
    const float z = exp_fast(-fabsf(x));
    const float s = z / (2.f + z), s2 = s * s;
    float p = 1.f / 15.f;
    p = p * s2 + 1.f / 13.f;
    p = p * s2 + 1.f / 11.f;
    p = p * s2 + 1.f / 9.f;
    p = p * s2 + 1.f / 7.f;
    p = p * s2 + 1.f / 5.f;
    p = p * s2 + 1.f / 3.f;
    p = p * s2 + 1.f;
    return (x > 0.f ? x : 0.f) + 2.f * s * p;
}

#endif
