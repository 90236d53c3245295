"""`rwkv7`: chunked form = recurrent loop = decode step (float64, values, gradients and the final
state), strong and weak decays stay finite, the loop = FLA's `dplr_recurrence` under RWKV-7's
mapping (q = r sqrt(d), alpha = -kappa_hat, beta = kappa_hat * a, gk = log w), the layer's
pieces = FLA's torch references (`torch_addcmul_rwkv7`, `k_update_ref`,
`gate_output_correction_ref`), state size = the decode cache, bad options fail clearly."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.rwkv7 import (
    RWKV7,
    W_SCALE,
    bonus_and_gate,
    dplr_chunked,
    dplr_recurrent,
    replacement_key,
    token_shift,
)
from tests.mixers.zoo_forms import fla_function, fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [{"chunk_size": 8, "head_size": 4},
                                     {"chunk_size": 64, "head_size": 8, "decay_rank": 4}])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(RWKV7, "chunk", **options)


def _inputs(b=2, h=2, length=29, d=4, dv=5, seed=0, dtype=torch.float32):
    """r, k, v, -kappa_hat, kappa_hat * a, log w as the layer makes them (w in (0.545, 1))."""
    gen = torch.Generator().manual_seed(seed)
    r, k = (torch.randn(b, h, length, d, generator=gen) for _ in range(2))
    v = torch.randn(b, h, length, dv, generator=gen)
    kappa = F.normalize(torch.randn(b, h, length, d, generator=gen), dim=-1)
    a = torch.rand(b, h, length, d, generator=gen)
    logw = -W_SCALE * torch.rand(b, h, length, d, generator=gen)
    return tuple(t.to(dtype) for t in (r, k, v, -kappa, kappa * a, logw))


def test_loop_and_chunked_form_match_fla_dplr_recurrence():
    """FLA has no naive RWKV-7 function; its generalised delta rule's loop is the reference,
    with q = r sqrt(d) (it scales q by d^-1/2 itself): outputs and final state."""
    naive = fla_naive("generalized_delta_rule/dplr")
    r, k, v, a, b, logw = _inputs()
    ref, ref_state = naive.dplr_recurrence(r * r.shape[-1] ** 0.5, k, v, alpha=a, beta=b,
                                           gk=logw, output_final_state=True)
    for o, state in (dplr_recurrent(r, k, v, a, b, logw),
                     dplr_chunked(r, k, v, a, b, logw, 8)):
        torch.testing.assert_close(o, ref, rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(state, ref_state, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("scale", [100.0, 3.0, 1e-6])
def test_strong_and_weak_decays_stay_finite_in_the_chunked_form(scale):
    """log w down to -100 per token and channel (w near 0: a 16-token chunk spans exp(1600),
    formed in log space), down to -3 (chunks of about exp(-24): factored about their
    midpoint) and down to -1e-6 (w near 1): equal to the loop, state included."""
    r, k, v, a, b, logw = _inputs(length=40, dtype=torch.float64)
    logw = logw / W_SCALE * scale
    o, state = dplr_chunked(r, k, v, a, b, logw, 16)
    assert torch.isfinite(o).all() and torch.isfinite(state).all()
    ref, ref_state = dplr_recurrent(r, k, v, a, b, logw)
    torch.testing.assert_close(o, ref, rtol=1e-9, atol=1e-9)
    torch.testing.assert_close(state, ref_state, rtol=1e-9, atol=1e-9)


def test_layer_pieces_match_fla_torch_references():
    """The token shift's mixes, the replacement key and the bonus-and-gate output against
    FLA's torch references of its fused kernels, on the layer's own parameters."""
    addcmul = fla_function("ops/rwkv7/fused_addcmul.py", "torch_addcmul_rwkv7")
    k_update = fla_function("ops/rwkv7/fused_k_update.py", "k_update_ref")
    correction = fla_function("ops/rwkv7/gate_output_correction.py",
                              "gate_output_correction_ref")
    m = RWKV7(16, head_size=4)
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(2, 7, 16, generator=gen)
    prev = F.pad(x, (0, 0, 1, -1))
    with torch.no_grad():
        ours = token_shift(x, prev, m.mu)
        theirs = addcmul(x, prev - x, *m.mu.unbind(0))  # r, w, k, v, a, g
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b)
        k, a = torch.randn(2, 7, 16, generator=gen), torch.rand(2, 7, 16, generator=gen)
        torch.testing.assert_close(replacement_key(k, a, m.k_a), k_update(k, a, m.k_a))
        o, gate = torch.randn(2, 7, 16, generator=gen), torch.rand(2, 7, 16, generator=gen)
        r, kk, v = (torch.randn(2, 7, 4, 4, generator=gen) for _ in range(3))
        rho = torch.randn(4, 4, generator=gen)
        torch.testing.assert_close(bonus_and_gate(o, r, kk, rho, v, gate),
                                   correction(o, r, kk, rho, v, gate))


def test_state_size_counts_the_decode_cache_and_the_shift_apart():
    m = RWKV7(16, head_size=4)
    cache = m.allocate_cache(1, 50)
    assert m.state_size(sequence_length=50) == recurrent(cache) == 4 * 4 * 4  # h d d
    assert cache.conv.numel() == 16  # the token shift: one previous column per channel
    assert RWKV7(64).state_size() == 4 * 16 * 16


def test_decay_is_in_the_papers_range_and_data_dependent():
    m = RWKV7(16, head_size=4)
    x = torch.randn(3, 7, 16)
    logw = m._parts(x, F.pad(x, (0, 0, 1, -1)))[1]
    assert ((logw < 0) & (logw > -W_SCALE)).all()
    assert logw.std(dim=1).min() > 0


@pytest.mark.parametrize("options", [{"head_size": 3}, {"head_size": 0}, {"chunk_size": 0},
                                     {"impl": "fused"}, {"decay_rank": -1}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        RWKV7(16, **options)


def test_a_bad_option_through_the_cli_is_one_error_line():
    from typer.testing import CliRunner

    from recall_lab.cli import app

    result = CliRunner().invoke(app, ["check", "rwkv7", "--kwargs", json.dumps({"head_size": 5}),
                                      "--no-learning", "--no-speed"])
    assert result.exit_code == 2
    lines = [ln for ln in result.output.splitlines() if ln.strip()]
    assert lines[-1].startswith("error:") and "head_size (5)" in lines[-1]
    assert "Traceback" not in result.output
