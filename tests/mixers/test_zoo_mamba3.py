"""`mamba3`: the chunked form = the recurrent loop = decode step (float64, values and gradients,
SISO and MIMO), strong decays stay finite, state size = the decode cache, bad options fail
clearly.

Its reference is the paper's equations (Mamba-3, arXiv 2603.15569: the exponential-trapezoidal
recurrence with the rotary state, written as `mamba3_recurrent`), tied here to a short case
computed by hand. No CPU reference by the authors exists: mamba-ssm 2.3.2.post1 ships Mamba-3
as GPU kernels only (Triton, TileLang, CuTe) and FLA's layer raises on a CPU. The comparison
with mamba-ssm's SISO kernel (`mamba3_siso_combined`, forward and input gradient) is prepared
for the next GPU lease in tests/gpu/test_gpu_mamba3.py (the GPU check's zoo part); it skips on
a machine without CUDA or without those kernels."""

from __future__ import annotations

import math

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.mamba3 import Mamba3, mamba3_chunked, mamba3_recurrent, rotate
from tests.mixers.zoo_forms import forms_agree, recurrent


@pytest.mark.parametrize("options", [
    {"chunk_size": 8, "headdim": 8},  # SISO, 5 chunks, the last partial
    {"chunk_size": 16, "headdim": 8, "mimo_rank": 3, "d_state": 4, "rope_fraction": 1.0},
])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(Mamba3, "chunk", **options)


def test_the_loop_equals_a_case_computed_by_hand():
    """One head, d_state 2 (one rotated pair), headdim 1, three tokens; alpha = 1/2, Delta = 1,
    lambda = 1/2 (gamma = 1/2, beta = alpha Delta (1 - lambda) = 1/4); cumulative angles
    0, pi/2, pi; q = (1, 0) at every token, k = (1, 0), (1, 0), (0, 1), x = 1, 2, 3.
    Rotated: k'_0 = (1, 0), k'_1 = (0, 1), k'_2 = (0, -1); q'_0 = (1, 0), q'_1 = (0, 1),
    q'_2 = (-1, 0).
      h_0 = 1/2 k'_0 1                               = (0.5, 0)    y_0 = q'_0 . h_0 = 0.5
      h_1 = 1/2 h_0 + 1/4 k'_0 1 + 1/2 k'_1 2        = (0.5, 1)    y_1 = q'_1 . h_1 = 1
      h_2 = 1/2 h_1 + 1/4 k'_1 2 + 1/2 k'_2 3        = (0.25, -0.5) y_2 = q'_2 . h_2 = -0.25"""
    f64 = torch.float64
    q = torch.tensor([[1.0, 0.0]] * 3, dtype=f64).view(1, 1, 3, 1, 2)
    k = torch.tensor([[1.0, 0.0], [1.0, 0.0], [0.0, 1.0]], dtype=f64).view(1, 1, 3, 1, 2)
    v = torch.tensor([1.0, 2.0, 3.0], dtype=f64).view(1, 1, 3, 1, 1)
    adt = torch.full((1, 1, 3), math.log(0.5), dtype=f64)
    dt, trap = torch.ones(1, 1, 3, dtype=f64), torch.full((1, 1, 3), 0.5, dtype=f64)
    angles = torch.tensor([0.0, math.pi / 2, math.pi], dtype=f64).view(1, 1, 3, 1)
    want = torch.tensor([0.5, 1.0, -0.25], dtype=f64).view(1, 1, 3, 1, 1)
    for y in (mamba3_recurrent(q, k, v, adt, dt, trap, angles),
              mamba3_chunked(q, k, v, adt, dt, trap, angles, chunk=2)):
        torch.testing.assert_close(y, want, rtol=0, atol=1e-12)


def test_rotation_turns_each_pair_and_leaves_the_rest():
    x = torch.tensor([1.0, 2.0, 3.0, 4.0, 5.0], dtype=torch.float64)
    got = rotate(x, torch.tensor([math.pi / 2, math.pi], dtype=torch.float64))
    torch.testing.assert_close(got, torch.tensor([-2.0, 1.0, -3.0, -4.0, 5.0],
                                                 dtype=torch.float64), rtol=0, atol=1e-12)


def _inputs(length=70, rank=2, seed=0):
    gen = torch.Generator().manual_seed(seed)
    b, h, n, p = 2, 2, 4, 3
    q, k = (torch.randn(b, h, length, rank, n, generator=gen, dtype=torch.float64)
            for _ in range(2))
    v = torch.randn(b, h, length, rank, p, generator=gen, dtype=torch.float64)
    dt = torch.rand(b, h, length, generator=gen, dtype=torch.float64)
    trap = torch.rand(b, h, length, generator=gen, dtype=torch.float64)
    angles = torch.randn(b, h, length, n // 2, generator=gen, dtype=torch.float64).cumsum(2)
    return q, k, v, dt, trap, angles


@pytest.mark.parametrize("scale", [60.0, 1e-6])
def test_strong_and_vanishing_decays_stay_finite_and_equal_the_loop(scale):
    """Delta A of -60 per token (alpha = e^-60, over 64-token chunks) and of -1e-6 (alpha near
    1): every factor of the chunked form is a ratio <= 1, so nothing overflows."""
    q, k, v, dt, trap, angles = _inputs()
    adt = -scale * (0.5 + torch.rand(dt.shape, generator=torch.Generator().manual_seed(1),
                                     dtype=torch.float64))
    y = mamba3_chunked(q, k, v, adt, dt, trap, angles, chunk=64)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(y, mamba3_recurrent(q, k, v, adt, dt, trap, angles),
                               rtol=1e-9, atol=1e-9)


def test_lambda_one_without_rotation_is_mamba2():
    """lambda = 1 (Euler's rule) and no rotation: h_t = alpha_t h_{t-1} + Delta_t k_t x_t^T, the
    lab's Mamba-2 SSD reference (`ssd_ref`, with B = k, C = q, one group)."""
    from recall_lab.ssm import ssd_ref

    q, k, v, dt, _, _ = _inputs(length=23, rank=1)
    a = -torch.rand(2, generator=torch.Generator().manual_seed(2), dtype=torch.float64) - 0.1
    adt = a[None, :, None] * dt
    y = mamba3_recurrent(q, k, v, adt, dt, torch.ones_like(dt), torch.zeros_like(q[..., 0, :1]))
    ref = ssd_ref(v[:, :, :, 0].transpose(1, 2), dt.transpose(1, 2), a,
                  k[:, :1, :, 0].transpose(1, 2), q[:, :1, :, 0].transpose(1, 2))
    # one group: ssd_ref shares B and C across heads, so compare head 0's
    torch.testing.assert_close(y[:, 0, :, 0], ref[:, :, 0], rtol=1e-9, atol=1e-9)


def test_state_size_counts_the_decode_cache():
    """h is expand d_model d_state; the previous k (heads x rank x d_state), x (d_inner) and the
    angle (heads x d_state rope_fraction / 2) are the per-token caches, counted apart."""
    from recall_lab.mixers.state import cache_parts

    m = Mamba3(16, d_state=4, expand=2, headdim=8, mimo_rank=3, rope_fraction=1.0)
    cache = m.allocate_cache(1, 50)
    assert m.state_size(sequence_length=50) == recurrent(cache) == 2 * 16 * 4
    parts = cache_parts(cache)
    assert parts["recurrent"].numbers == 2 * 16 * 4
    assert parts["conv"].numbers == 4 * 3 * 4 + 2 * 16 + 4 * 2


@pytest.mark.parametrize("options,named", [
    ({"mimo_rank": -1}, "mimo_rank"), ({"mimo_rank": 0}, "mimo_rank"),
    ({"d_state": 5}, "d_state"), ({"d_state": 2}, "rope_fraction"),
    ({"rope_fraction": 0.25}, "rope_fraction"), ({"headdim": 12}, "headdim"),
    ({"impl": "ssd"}, "impl"), ({"chunk_size": 0}, "chunk_size"),
])
def test_bad_options_are_one_clear_error_naming_the_option(options, named):
    with pytest.raises(RecallLabError, match=named):
        Mamba3(16, **options)
