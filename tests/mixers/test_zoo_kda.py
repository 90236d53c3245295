"""`kda`: chunked form = recurrent loop = decode step (float64, values, gradients and the final
state), strong and weak per-channel decays stay finite, the loop and the chunked form = FLA's
`naive_recurrent_kda` (outputs and final state), state size = the decode cache, bad options
fail clearly."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.kda import KimiDeltaAttention, kda_chunked, kda_recurrent
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [{"chunk_size": 8, "num_heads": 2},
                                     {"chunk_size": 64, "conv_size": 0, "expand_v": 0.5,
                                      "allow_neg_eigval": True}])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(KimiDeltaAttention, "chunk", **options)


def _inputs(b=2, h=2, length=29, dk=4, dv=5, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, dk, generator=gen)
    k = F.normalize(torch.randn(b, h, length, dk, generator=gen), dim=-1)
    v = torch.randn(b, h, length, dv, generator=gen)
    beta = torch.rand(b, h, length, generator=gen)
    g = -torch.rand(b, h, length, dk, generator=gen)  # log alpha per key channel in (-1, 0)
    return tuple(t.to(dtype) for t in (q, k, v, beta, g))


def test_loop_and_chunked_form_match_fla_naive_recurrent_kda():
    naive = fla_naive("kda")
    q, k, v, beta, g = _inputs()
    ref, ref_state = naive.naive_recurrent_kda(*(t.transpose(1, 2) for t in (q, k, v, g, beta)),
                                               output_final_state=True)  # [B, T, H, .]
    qs = q * q.shape[-1] ** -0.5  # FLA scales q by d_k^-1/2 itself
    for o, state in (kda_recurrent(qs, k, v, beta, g), kda_chunked(qs, k, v, beta, g, 8)):
        torch.testing.assert_close(o.transpose(1, 2), ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(state, ref_state, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scale", [100.0, 3.0, 1e-6])
def test_strong_and_weak_decays_stay_finite_in_the_chunked_form(scale):
    """log alpha down to -100 per token and channel (alpha near 0: a 16-token chunk spans
    exp(1600), formed in log space), down to -3 (factored about the chunk's midpoint) and down
    to -1e-6 (alpha near 1): equal to the loop, state included."""
    q, k, v, beta, g = _inputs(length=40, dtype=torch.float64)
    g = g * scale
    o, state = kda_chunked(q, k, v, beta, g, 16)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    ref, ref_state = kda_recurrent(q, k, v, beta, g)
    torch.testing.assert_close(o, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state, ref_state, rtol=1e-9, atol=1e-9)


def test_state_size_counts_the_decode_cache():
    m = KimiDeltaAttention(16, num_heads=4)
    assert m.state_size(sequence_length=50) == recurrent(m.allocate_cache(1, 50)) == 4 * 4 * 4
    # 4 heads of key width 4 and value width 16 at d_model 64: 256 (h d_k d_v)
    assert KimiDeltaAttention(64, num_heads=4, expand_k=0.25).state_size() == 256


def test_decay_is_per_channel_data_dependent_and_in_0_1():
    m = KimiDeltaAttention(16, num_heads=2)
    x = torch.randn(3, 7, 16)
    alpha = m._parts(x, m.qkv(x))[4].exp()  # [b, l, h, d_k]
    assert ((alpha > 0) & (alpha < 1)).all()
    assert alpha.std(dim=1).min() > 0  # changes with the token
    assert alpha.std(dim=-1).min() > 0  # and with the key channel


@pytest.mark.parametrize("options", [{"num_heads": 3}, {"chunk_size": 0}, {"impl": "wy"},
                                     {"expand_k": 0.01}, {"conv_size": -1}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        KimiDeltaAttention(16, **options)


def test_a_bad_option_through_the_cli_is_one_error_line():
    from typer.testing import CliRunner

    from recall_lab.cli import app

    result = CliRunner().invoke(app, ["check", "kda", "--kwargs", json.dumps({"num_heads": 3}),
                                      "--no-learning", "--no-speed"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error:") and "num_heads (3)" in lines[-1]
    assert "Traceback" not in result.output
