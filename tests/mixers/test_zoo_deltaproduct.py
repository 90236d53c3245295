"""`gated-deltaproduct`: chunked form (the interleaved delta rule) = recurrent loop = decode
step (float64, values, gradients and the final state), strong and weak decays stay finite, the
loop = FLA's `naive_recurrent_gated_delta_product` (its k, v, beta of length T n_h,
interleaved), n_h = 1 is Gated DeltaNet (the recurrence, and the layer weight for weight at
beta in (0, 1)), state size = the decode cache, bad options fail clearly."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.deltanet import GatedDeltaNet, delta_rule_recurrent
from recall_lab.mixers.deltaproduct import (
    GatedDeltaProduct,
    deltaproduct_chunked,
    deltaproduct_recurrent,
)
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [{"chunk_size": 8, "num_heads": 2},
                                     {"num_householder": 3, "conv_size": 0, "expand_v": 0.5,
                                      "allow_neg_eigval": False}])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(GatedDeltaProduct, "chunk", **options)


def _inputs(n=2, b=2, h=2, length=29, dk=4, dv=5, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, dk, generator=gen)
    k = F.normalize(torch.randn(b, h, length, n, dk, generator=gen), dim=-1)
    v = torch.randn(b, h, length, n, dv, generator=gen)
    beta = 2 * torch.rand(b, h, length, n, generator=gen)  # (0, 2): negative eigenvalues
    g = -torch.rand(b, h, length, generator=gen)
    return tuple(t.to(dtype) for t in (q, k, v, beta, g))


@pytest.mark.parametrize("n", [1, 3])
def test_loop_and_chunked_form_match_fla_naive_recurrent_gated_delta_product(n):
    naive = fla_naive("gated_delta_product")
    q, k, v, beta, g = _inputs(n)
    # FLA's layout: [B, T, H, .] for q and g, [B, T n_h, H, .] for k, v, beta (token-major)
    ref, ref_state = naive.naive_recurrent_gated_delta_product(
        q.transpose(1, 2), k.flatten(2, 3).transpose(1, 2), v.flatten(2, 3).transpose(1, 2),
        g.transpose(1, 2), beta.flatten(2, 3).transpose(1, 2), scale=q.shape[-1] ** -0.5,
        output_final_state=True, num_householder=n)
    qs = q * q.shape[-1] ** -0.5
    for o, state in (deltaproduct_recurrent(qs, k, v, beta, g),
                     deltaproduct_chunked(qs, k, v, beta, g, 8)):
        torch.testing.assert_close(o.transpose(1, 2), ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(state, ref_state, rtol=1e-4, atol=1e-5)


def test_one_householder_step_is_gated_deltanet():
    q, k, v, beta, g = _inputs(1, dtype=torch.float64)
    o, _ = deltaproduct_recurrent(q, k, v, beta, g)
    torch.testing.assert_close(o, delta_rule_recurrent(q, k[..., 0, :], v[..., 0, :],
                                                       beta[..., 0], g), rtol=1e-12, atol=0)


@pytest.mark.parametrize("neg", [False, True])
def test_the_layer_at_one_step_and_beta_below_one_is_gated_deltanet_weight_for_weight(neg):
    """n_h 1 with beta in (0, 1) is the zoo's `gated-deltanet` layer: the same parameters by
    name and shape, and on Gated DeltaNet's weights the same output; beta in (0, 2) is not (the
    deltaproduct-ablation's rows: docs/results/deltaproduct-ablation)."""
    torch.manual_seed(0)
    gdn = GatedDeltaNet(16, num_heads=2, expand_k=0.5).double()
    gdp = GatedDeltaProduct(16, num_heads=2, expand_k=0.5, num_householder=1,
                            allow_neg_eigval=neg).double()
    gdp.load_state_dict(gdn.state_dict(), strict=True)
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    same = torch.allclose(gdp(x), gdn(x), rtol=1e-10, atol=1e-12)
    assert same is not neg


@pytest.mark.parametrize("scale", [100.0, 1e-6])
def test_strong_and_weak_decays_stay_finite_in_the_chunked_form(scale):
    """log alpha down to -100 per token (alpha near 0) and down to -1e-6 (alpha near 1):
    every factor of the chunked form is a ratio <= 1; equal to the loop, state included."""
    q, k, v, beta, g = _inputs(length=40, dtype=torch.float64)
    g = g * scale
    o, state = deltaproduct_chunked(q, k, v, beta, g, 16)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    ref, ref_state = deltaproduct_recurrent(q, k, v, beta, g)
    torch.testing.assert_close(o, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state, ref_state, rtol=1e-9, atol=1e-9)


def test_state_size_counts_the_decode_cache_whatever_num_householder():
    for n in (1, 2, 4):
        m = GatedDeltaProduct(16, num_heads=4, num_householder=n)
        assert m.state_size(sequence_length=50) == recurrent(m.allocate_cache(1, 50)) == 64
    assert GatedDeltaProduct(64, num_heads=4, expand_k=0.25).state_size() == 256


@pytest.mark.parametrize("options", [{"num_householder": 0}, {"num_heads": 3},
                                     {"chunk_size": 0}, {"impl": "fused"}, {"expand_v": 0.01}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError, match=next(iter(options))[:9]):
        GatedDeltaProduct(16, **options)


def test_a_bad_option_through_the_cli_is_one_error_line():
    from typer.testing import CliRunner

    from recall_lab.cli import app

    result = CliRunner().invoke(app, ["check", "gated-deltaproduct", "--kwargs",
                                      json.dumps({"num_householder": 0}), "--no-learning",
                                      "--no-speed"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error:") and "num_householder" in lines[-1]
    assert "Traceback" not in result.output
