"""The Taylor map keeps the d'(d'+1)/2 distinct second-order products (zoology's Based's count),
with the off-diagonal ones scaled so that phi(q) . phi(k) is unchanged: the full d' x d' outer
product map, written here as the lab had it, gives the same outputs to float64 rounding for
`linear-attn` and `based`, in the parallel forward and in decoding; the state counts at zoology's
sizes are its own (810 for Based, d_model 16, feature dim 8, 2 heads)."""

from __future__ import annotations

import math

import pytest
import torch

import recall_lab.mixers.based as based_module
import recall_lab.mixers.linear_attn as linear_module
from recall_lab.mixers._linear import feature_dim_expanded, feature_map
from recall_lab.mixers.based import Based
from recall_lab.mixers.linear_attn import LinearAttention
from tests.mixers.zoo_forms import recurrent


def full_taylor(name: str, x: torch.Tensor) -> torch.Tensor:
    """The full-product map: [1, x / d^(1/4), vec(x x^T) / sqrt(2 d)] (1 + d + d^2 features)."""
    if name != "taylor":
        return feature_map(name, x)
    d = x.shape[-1]
    x2 = (x[..., :, None] * x[..., None, :]).flatten(-2) / math.sqrt(2.0 * d)
    return torch.cat([torch.ones_like(x[..., :1]), x / d ** 0.25, x2], dim=-1)


def full_dim(name: str, dim: int) -> int:
    return 1 + dim + dim * dim if name == "taylor" else dim


def test_the_distinct_products_give_the_full_products_scores():
    gen = torch.Generator().manual_seed(0)
    q, k = (torch.randn(3, 11, 5, generator=gen, dtype=torch.float64) for _ in range(2))
    new = feature_map("taylor", q) @ feature_map("taylor", k).transpose(-1, -2)
    old = full_taylor("taylor", q) @ full_taylor("taylor", k).transpose(-1, -2)
    torch.testing.assert_close(new, old, rtol=1e-13, atol=1e-13)
    assert feature_map("taylor", q).shape[-1] == feature_dim_expanded("taylor", 5) == 1 + 5 + 15


def _outputs(cls, options, x):
    torch.manual_seed(0)
    forms = {}
    for impl in ("chunk", "recurrent"):
        torch.manual_seed(0)
        m = cls(16, impl=impl, **options).double()
        forms[impl] = m(x)
    cache = m.allocate_cache(x.shape[0], x.shape[1])
    forms["step"] = torch.stack([m.step(x[:, t], cache) for t in range(x.shape[1])], 1)
    return forms


@pytest.mark.parametrize("cls, options", [
    (LinearAttention, {"feature_map": "taylor", "feature_dim": 4, "num_heads": 2,
                       "chunk_size": 8}),
    (LinearAttention, {"feature_map": "taylor", "feature_dim": 3, "normalize": False}),
    (Based, {"layer_idx": 1, "feature_dim": 4, "num_heads": 2, "chunk_size": 8}),
])
def test_outputs_equal_the_full_product_maps_in_float64(cls, options, monkeypatch):
    x = torch.randn(2, 21, 16, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        new = _outputs(cls, options, x)
        module = based_module if cls is Based else linear_module
        monkeypatch.setattr(module, "feature_map", full_taylor)
        monkeypatch.setattr(module, "feature_dim_expanded", full_dim)
        old = _outputs(cls, options, x)
    for form in new:
        torch.testing.assert_close(new[form], old[form], rtol=1e-12, atol=1e-12, msg=form)


def test_state_counts_at_zoologys_sizes():
    """zoology's Based at d_model 16, feature dim 8, 2 heads holds 810 numbers (the field audit,
    docs/results/field-audit); the full product held 2 x 9 x 73 = 1,314. Linear attention with
    feature dim 2 at d_model 64: 65 x 6 = 390 (the full product: 65 x 7 = 455)."""
    based = Based(16, layers=["linear"], feature_dim=8, num_heads=2)
    assert based.state_size(sequence_length=128) == 810 == recurrent(based.allocate_cache(1, 8))
    linear = LinearAttention(64, feature_map="taylor", feature_dim=2)
    assert linear.state_size(sequence_length=128) == 390 == recurrent(linear.allocate_cache(1, 8))
