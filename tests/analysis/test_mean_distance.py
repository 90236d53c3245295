"""Mamba Mean Distance (Eq. 6-8), Delta-sum (Eq. 9) and the sparse-attention mean distance."""

from __future__ import annotations

import math
from types import SimpleNamespace

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.analysis import (
    attention_mean_distance,
    delta_sum,
    hidden_attention,
    hidden_attention_loop,
    layer_mean_distance,
    mamba_mean_distance,
    mamba_mean_distance_last,
    mean_distance,
    mean_distance_loop,
    normalise_by_length,
    sparse_attention_weights,
)
from recall_lab.generators.errors import RecallLabError


def _params(L, seed, mamba2=False):
    g = torch.Generator().manual_seed(seed)
    c, n = 3, 4
    delta = torch.nn.functional.softplus(torch.randn(1, c, L, generator=g, dtype=torch.float64))
    if mamba2:
        A = -torch.rand(c, generator=g, dtype=torch.float64)
        B = torch.randn(1, L, 1, n, generator=g, dtype=torch.float64)
        C = torch.randn(1, L, 1, n, generator=g, dtype=torch.float64)
    else:
        A = -torch.rand(c, n, generator=g, dtype=torch.float64)
        B = torch.randn(1, n, L, generator=g, dtype=torch.float64)
        C = torch.randn(1, n, L, generator=g, dtype=torch.float64)
    return SimpleNamespace(delta=delta, A=A, B=B, C=C)


def test_identity_has_distance_zero():
    md = mean_distance(torch.eye(17, dtype=torch.float64))
    assert torch.equal(md, torch.zeros(17, dtype=torch.float64))


@pytest.mark.parametrize("L", [1, 2, 9, 64])
def test_uniform_lower_triangular_closed_form(L):
    # row i attends uniformly to i + 1 positions at distances 0..i: mean i / 2
    md = mean_distance(torch.tril(torch.full((L, L), 3.0, dtype=torch.float64)))
    expected = torch.arange(L, dtype=torch.float64) / 2
    torch.testing.assert_close(md, expected)
    # normalised by the visible length: i / (2 (i + 1)) -> 1/2 for long rows
    torch.testing.assert_close(normalise_by_length(md), expected / torch.arange(1, L + 1))


def test_attend_to_first_token_has_maximal_distance():
    L = 12
    m = torch.zeros(L, L, dtype=torch.float64)
    m[:, 0] = -2.0  # the sign does not matter (Eq. 7 takes |.|)
    torch.testing.assert_close(mean_distance(m), torch.arange(L, dtype=torch.float64))


@given(L=st.integers(1, 12), seed=st.integers(0, 2**16))
def test_vectorised_equals_loop(L, seed):
    m = torch.randn(L, L, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    torch.testing.assert_close(mean_distance(m), mean_distance_loop(m))


@given(L=st.integers(1, 30), seed=st.integers(0, 2**16), mamba2=st.booleans())
def test_streamed_mean_distance_equals_map_then_loop(L, seed, mamba2):
    p = _params(L, seed, mamba2)
    ref_map = hidden_attention_loop(p)[0]  # [c, L, L]
    ref = torch.stack([mean_distance_loop(ref_map[c]) for c in range(ref_map.shape[0])])
    md = mamba_mean_distance(p, block=4, col_block=5, dtype=torch.float64)[0]
    torch.testing.assert_close(md, ref)
    last = mamba_mean_distance_last(p, col_block=7, dtype=torch.float64)[0]
    torch.testing.assert_close(last, ref[:, -1])


def test_layer_summary_matches_parts():
    p = _params(40, 3)
    res = layer_mean_distance(p, layer=1, dtype=torch.float64)
    md = mean_distance(hidden_attention(p, dtype=torch.float64))[0]  # [c, L]
    torch.testing.assert_close(res.last, md[:, -1])
    torch.testing.assert_close(res.last_norm, md[:, -1] / 40)
    torch.testing.assert_close(res.all_tokens, md.mean(-1))
    torch.testing.assert_close(res.all_tokens_norm, normalise_by_length(md).mean(-1))
    s = res.summary()
    assert math.isclose(s["md_last"], float(md[:, -1].mean()))
    assert s["layer"] == 1 and s["length"] == 40


def test_delta_sum_is_sum_from_second_position():
    d = torch.rand(2, 3, 10, dtype=torch.float64)
    out = delta_sum(d)
    for l in range(1, 11):
        torch.testing.assert_close(out[..., l - 1], d[..., 1:l].sum(-1))


def _dense_from_sparse(idx, w, L):
    dense = torch.zeros(*idx.shape[:-2], L, L, dtype=torch.float64)
    valid = idx >= 0
    dense.scatter_add_(-1, idx.clamp_min(0).long(), torch.where(valid, w, 0.0).to(torch.float64))
    return dense


@given(L=st.integers(1, 20), kk=st.integers(1, 6), seed=st.integers(0, 2**16))
def test_attention_mean_distance_equals_dense(L, kk, seed):
    g = torch.Generator().manual_seed(seed)
    pos = torch.arange(L)[:, None]
    # distinct causal keys per row (a union counts a key once), some slots empty
    perm = torch.argsort(torch.rand(1, 2, L, L, generator=g), -1)[..., :kk]
    idx = torch.where(perm <= pos, perm, -1).to(torch.int32)
    q = torch.randn(1, 2, L, 8, generator=g, dtype=torch.float64)
    k = torch.randn(1, 2, L, 8, generator=g, dtype=torch.float64)
    w = sparse_attention_weights(q, k, idx)
    # weights are the softmax over the selected keys of the full logits
    logits = (q @ k.transpose(-1, -2)) * 8 ** -0.5
    mask = _dense_from_sparse(idx, torch.ones_like(w), L) > 0
    ref_w = torch.nan_to_num(torch.softmax(logits.masked_fill(~mask, float("-inf")), -1))
    torch.testing.assert_close(_dense_from_sparse(idx, w, L), ref_w)
    torch.testing.assert_close(attention_mean_distance(idx, w), mean_distance(ref_w),
                               equal_nan=True)  # rows with no key: NaN in both


def test_attention_mean_distance_sliding_window_closed_form():
    L, win = 30, 4
    pos = torch.arange(L)[:, None]
    idx = pos - torch.arange(win)[None, :]
    idx = torch.where(idx >= 0, idx, -1)[None, None]
    w = (idx >= 0).double()
    md = attention_mean_distance(idx, w)[0, 0]
    expected = torch.tensor([min(i, win - 1) / 2 for i in range(L)], dtype=torch.float64)
    torch.testing.assert_close(md, expected)
    with pytest.raises(RecallLabError):
        attention_mean_distance(idx + 1, w)  # the last key would be in the future
