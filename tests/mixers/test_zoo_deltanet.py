"""`deltanet` and `gated-deltanet`: the WY/UT chunked form = the recurrent loop = decode step
(float64, values and gradients), the loop = FLA's `delta_rule_recurrence` and
`naive_recurrent_gated_delta_rule`, state size = the decode cache, bad options fail clearly."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.deltanet import (
    DeltaNet,
    GatedDeltaNet,
    delta_rule_chunked,
    delta_rule_recurrent,
)
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("cls", [DeltaNet, GatedDeltaNet])
@pytest.mark.parametrize("options", [{"chunk_size": 8, "num_heads": 2},
                                     {"chunk_size": 64, "conv_size": 0, "expand_v": 0.5}])
def test_chunked_recurrent_and_step_agree(cls, options):
    forms_agree(cls, "chunk", **options)


def _inputs(b=2, h=2, length=29, dk=4, dv=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(b, h, length, dk, generator=gen)
    k = F.normalize(torch.randn(b, h, length, dk, generator=gen), dim=-1)
    v = torch.randn(b, h, length, dv, generator=gen)
    beta = torch.rand(b, h, length, generator=gen)
    g = -torch.rand(b, h, length, generator=gen)  # log alpha in (-1, 0)
    return q, k, v, beta, g


def test_loop_matches_fla_delta_rule_recurrence():
    naive = fla_naive("delta_rule")
    q, k, v, beta, _ = _inputs()
    ref, _ = naive.delta_rule_recurrence(q, k, v, beta)  # scales q by d_k^-1/2 itself
    qs = q * q.shape[-1] ** -0.5
    for o in (delta_rule_recurrent(qs, k, v, beta), delta_rule_chunked(qs, k, v, beta, None, 8)):
        torch.testing.assert_close(o, ref, rtol=1e-4, atol=1e-5)


def test_gated_loop_matches_fla_naive_recurrent_gated_delta_rule():
    naive = fla_naive("gated_delta_rule")
    q, k, v, beta, g = _inputs()
    ref, _ = naive.naive_recurrent_gated_delta_rule(
        *(t.transpose(1, 2) for t in (q, k, v, beta, g)))  # [B, T, H, .]
    qs = q * q.shape[-1] ** -0.5
    for o in (delta_rule_recurrent(qs, k, v, beta, g), delta_rule_chunked(qs, k, v, beta, g, 8)):
        torch.testing.assert_close(o.transpose(1, 2), ref, rtol=1e-4, atol=1e-5)


def test_strong_decay_stays_finite_in_the_chunked_form():
    """A decay of exp(-60) per token over a 64-token chunk: every factor of the chunked form is
    a ratio <= 1, so nothing overflows and it still equals the loop."""
    q, k, v, beta, g = (t.double() for t in _inputs(length=70))
    g = g * 60
    o = delta_rule_chunked(q, k, v, beta, g, 64)
    assert torch.isfinite(o).all()
    torch.testing.assert_close(o, delta_rule_recurrent(q, k, v, beta, g), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("cls", [DeltaNet, GatedDeltaNet])
def test_state_size_counts_the_decode_cache(cls):
    m = cls(16, num_heads=4)
    assert m.state_size(sequence_length=50) == recurrent(m.allocate_cache(1, 50))
    assert m.state_size() == 4 * 4 * 4  # h d_k d_v; the convolution's window is apart
    assert cls(16, num_heads=4, conv_size=0).state_size() == 4 * 4 * 4


def test_gated_deltanet_decay_is_data_dependent_and_in_0_1():
    m = GatedDeltaNet(16, num_heads=2)
    alpha = m._decay(torch.randn(3, 7, 16)).exp()
    assert ((alpha > 0) & (alpha < 1)).all()
    assert alpha.std(dim=1).min() > 0  # changes with the token


@pytest.mark.parametrize("options", [{"num_heads": 3}, {"chunk_size": 0}, {"impl": "wy"},
                                     {"expand_k": 0.01}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        DeltaNet(16, **options)


def test_short_conv_native_path_matches_conv1d():
    """float32 on the CPU runs the lab's C conv + SiLU; float64 runs conv1d: same values and
    gradients (to float32 rounding)."""
    from recall_lab.mixers._linear import ShortConv
    from recall_lab.ssm import native

    conv = ShortConv(12, 4, activation=True, bias=True)
    x = torch.randn(2, 9, 12, requires_grad=True)
    if not native.conv_usable(x, conv.conv1d.weight, conv.conv1d.bias):
        pytest.skip("the native kernels did not build here")
    cot = torch.randn(2, 9, 12)
    (conv(x) * cot).sum().backward()
    got = (x.grad, conv.conv1d.weight.grad, conv.conv1d.bias.grad)
    x64 = x.detach().double().requires_grad_(True)
    conv64 = ShortConv(12, 4, activation=True, bias=True).double()
    conv64.load_state_dict(conv.state_dict())
    y64 = conv64(x64)
    (y64 * cot.double()).sum().backward()
    torch.testing.assert_close(conv(x).double(), y64, rtol=1e-5, atol=1e-6)
    want = (x64.grad, conv64.conv1d.weight.grad, conv64.conv1d.bias.grad)
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a.double(), b, rtol=1e-5, atol=1e-5)
