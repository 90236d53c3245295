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

#endif
