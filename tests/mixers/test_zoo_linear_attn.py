"""`linear-attn`: chunked form = recurrent loop = decode step (float64, values and gradients),
the loop = FLA's `naive_recurrent_linear_attn` (and the Taylor scores = `naive_parallel_based`),
state size = the decode cache, bad options end in one RecallLabError line."""

from __future__ import annotations

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers._linear import feature_map, taylor_scores
from recall_lab.mixers.linear_attn import (
    LinearAttention,
    linear_attn_chunked,
    linear_attn_recurrent,
)
from tests.mixers.zoo_forms import fla_naive, forms_agree, recurrent


@pytest.mark.parametrize("options", [
    {"feature_map": "identity", "conv_size": 0, "num_heads": 2, "feature_dim": 4},
    {"feature_map": "elu", "chunk_size": 8, "num_heads": 2, "feature_dim": 4},
    {"feature_map": "taylor", "chunk_size": 8, "feature_dim": 3},
    {"feature_map": "taylor", "chunk_size": 64, "feature_dim": 3, "normalize": False},
])
def test_chunked_recurrent_and_step_agree(options):
    forms_agree(LinearAttention, "chunk", **options)


def test_taylor_map_is_the_second_order_expansion():
    q, k = torch.randn(2, 3, 5, 4, dtype=torch.float64).unbind(1)[:2]
    s = q @ k.transpose(-1, -2) / 2.0  # / sqrt(d), d = 4
    taylor = feature_map("taylor", q) @ feature_map("taylor", k).transpose(-1, -2)
    torch.testing.assert_close(taylor, 1 + s + s * s / 2, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(taylor_scores(q, k), taylor, rtol=1e-12, atol=1e-12)


def _qkv(b=2, h=2, length=23, dk=4, dv=5, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(b, h, length, dk, generator=gen) for _ in range(2))
    return q, k, torch.randn(b, h, length, dv, generator=gen)


@pytest.mark.parametrize("normalize", [False, True])
def test_loop_matches_fla_naive_recurrent_linear_attn(normalize):
    naive = fla_naive("linear_attn")
    q, k, v = _qkv()
    q, k = feature_map("elu", q), feature_map("elu", k)  # positive, so the normaliser is safe
    scale = q.shape[-1] ** -0.5
    ref, _ = naive.naive_recurrent_linear_attn(*(t.transpose(1, 2) for t in (q, k, v)),
                                               scale=scale, normalize=normalize)
    ones = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    for form in (linear_attn_recurrent(q * scale, k, ones),
                 linear_attn_chunked(q * scale, k, ones, chunk=8)):
        o = form[..., :-1] / (form[..., -1:] + 1e-10) if normalize else form[..., :-1]
        torch.testing.assert_close(o.transpose(1, 2), ref, rtol=1e-4, atol=1e-5)


def test_taylor_loop_matches_fla_naive_parallel_based():
    naive = fla_naive("based")
    q, k, v = _qkv(dk=4, dv=6)
    ref = naive.naive_parallel_based(q, k, v, use_norm=True)  # scale d^-1/2, eps 1e-6
    ones = torch.cat([v, torch.ones_like(v[..., :1])], -1)
    fq, fk = feature_map("taylor", q), feature_map("taylor", k)
    for form in (linear_attn_recurrent(fq, fk, ones),
                 linear_attn_chunked(fq, fk, ones, chunk=8, raw=(q, k))):
        torch.testing.assert_close(form[..., :-1] / (form[..., -1:] + 1e-6), ref,
                                   rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("options", [{"feature_map": "taylor", "feature_dim": 3},
                                     {"feature_map": "identity", "conv_size": 0}])
def test_state_size_counts_the_decode_cache(options):
    m = LinearAttention(16, num_heads=2, **options)
    assert m.state_size(sequence_length=50) == recurrent(m.allocate_cache(1, 50))
    f = 1 + 3 + 3 * 4 // 2 if options["feature_map"] == "taylor" else 16
    assert m.state_size() >= 2 * f * 8  # two heads of f x d_v


@pytest.mark.parametrize("options", [{"feature_map": "softmax"}, {"num_heads": 3},
                                     {"feature_map": "identity", "normalize": True},
                                     {"chunk_size": 0}, {"impl": "fast"}])
def test_bad_options_are_one_clear_error(options):
    with pytest.raises(RecallLabError):
        LinearAttention(16, **options)
