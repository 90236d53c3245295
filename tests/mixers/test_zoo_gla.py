"""`gla`: chunked form = recurrent loop = decode step (float64, values and gradients), the loop =
FLA's `naive_recurrent_gla`, strong decays stay finite, state size = the decode cache."""

from __future__ import annotations

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.gla import GatedLinearAttention, gla_chunked, gla_recurrent
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [{"chunk_size": 8, "num_heads": 2},
                                     {"chunk_size": 16, "conv_size": 0, "expand_k": 1.0}])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(GatedLinearAttention, "chunk", **options)


def _inputs(b=2, h=2, length=29, dk=4, dv=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, length, dk, generator=gen) for _ in range(2))
    v = torch.randn(b, h, length, dv, generator=gen)
    g = -torch.rand(b, h, length, dk, generator=gen)  # log alpha per key channel
    return q, k, v, g


def test_loop_matches_fla_naive_recurrent_gla():
    naive = fla_naive("gla")
    q, k, v, g = _inputs()
    ref, _ = naive.naive_recurrent_gla(*(t.transpose(1, 2) for t in (q, k, v, g)))
    qs = q * q.shape[-1] ** -0.5  # FLA scales q by d_k^-1/2 itself
    for o in (gla_recurrent(qs, k, v, g), gla_chunked(qs, k, v, g, 8)):
        torch.testing.assert_close(o.transpose(1, 2), ref, rtol=1e-4, atol=1e-5)


def test_strong_decay_stays_finite_in_the_chunked_form():
    """log alpha down to -100 per token and channel: the in-chunk ratios are formed in log
    space, so a 16-token chunk (exp(1600) apart) neither overflows nor differs from the loop."""
    q, k, v, g = (t.double() for t in _inputs(length=40))
    g = g * 100
    o = gla_chunked(q, k, v, g, 16)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, gla_recurrent(q, k, v, g), rtol=1e-9, atol=1e-9)


def test_state_size_counts_the_decode_cache():
    m = GatedLinearAttention(16, num_heads=2)
    assert m.state_size(sequence_length=50) == recurrent(m.allocate_cache(1, 50))
    assert GatedLinearAttention(16, num_heads=2, conv_size=0).state_size() == 2 * 4 * 8


@pytest.mark.parametrize("options", [{"num_heads": 3}, {"gate_rank": 0}, {"impl": "fused"},
                                     {"gate_normalizer": 0}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        GatedLinearAttention(16, **options)
