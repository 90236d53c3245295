"""y = alpha x against the real mixers of recall_lab.ssm (float64): the hidden attention computed
from the returned SSMParams, plus the D skip, then the mixer's own gate and out-projection,
reproduces the mixer's output; and a trained-like model's alpha is causal end to end."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from recall_lab.analysis import apply_hidden_attention, hidden_attention, hidden_attention_loop
from recall_lab.ssm import Mamba2Mixer, MambaMixer


def _randomise(mixer: torch.nn.Module, seed: int) -> None:
    # Default init gives tiny deltas; spread them so decays across the sequence matter.
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for p in mixer.parameters():
            p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=p.dtype))


@pytest.mark.parametrize("L", [1, 37])
def test_mamba_mixer_output_from_alpha(L):
    torch.manual_seed(0)
    m = MambaMixer(8, d_state=4).double()
    _randomise(m, 1)
    u = torch.randn(2, L, 8, dtype=torch.float64)
    out, params = m(u, return_params=True)
    params = type(params)(**{k: v.detach() for k, v in vars(params).items()})
    z = m.in_proj(u).chunk(2, dim=-1)[1]
    for alpha in (hidden_attention(params, dtype=torch.float64, block=8),
                  hidden_attention_loop(params)):
        y = apply_hidden_attention(params, alpha).transpose(1, 2)  # [b, L, d_inner]
        expected = m.out_proj(y * F.silu(z))
        torch.testing.assert_close(expected, out, rtol=1e-9, atol=1e-11)
    # and without the D skip it does not (the check can fail)
    y0 = apply_hidden_attention(params, alpha, with_skip=False).transpose(1, 2)
    assert not torch.allclose(m.out_proj(y0 * F.silu(z)), out, atol=1e-6)


@pytest.mark.parametrize("ngroups", [1, 2])
def test_mamba2_mixer_output_from_alpha(ngroups):
    torch.manual_seed(0)
    m = Mamba2Mixer(8, d_state=4, headdim=4, ngroups=ngroups, chunk_size=8).double()
    _randomise(m, 2)
    u = torch.randn(2, 29, 8, dtype=torch.float64)
    out, params = m(u, return_params=True)
    params = type(params)(**{k: v.detach() for k, v in vars(params).items()})
    z = m._split(m.in_proj(u))[0]
    for alpha in (hidden_attention(params, dtype=torch.float64, block=8),
                  hidden_attention_loop(params)):
        y = apply_hidden_attention(params, alpha).reshape(2, 29, m.d_inner)
        expected = m.out_proj(m.norm(y, z))
        torch.testing.assert_close(expected, out, rtol=1e-9, atol=1e-11)
