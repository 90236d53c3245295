"""The FlexAttention peer (bench attention) attends to exactly the keys our patterns list."""

from __future__ import annotations

import warnings

import pytest
import torch

from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention.flex import flex_block_mask, flex_sparse_attention

pytest.importorskip("torch.nn.attention.flex_attention")


def _flex(q, k, v, idx, compiled):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)  # eager flex: "unfused implementation"
        return flex_sparse_attention(q, k, v, flex_block_mask(idx, q.shape[-2]), scale=0.3,
                                     compiled=compiled)


def _inputs(b, h, length, gen):
    q, k = (torch.randn(b, h, length, 16, generator=gen) for _ in range(2))
    return q, k, torch.randn(b, h, length, 32, generator=gen)


# 200 is not a multiple of the 128-token tile; d (gap 8) leaves its first rows without keys.
@pytest.mark.parametrize("length", [200, 256])
@pytest.mark.parametrize("name,k,opts", [("sw", 24, {}), ("d", 16, {"max_len": 128}),
                                          ("attamba", 8, {})])
def test_flex_equals_sparse_attention_on_fixed_patterns(name, k, opts, length):
    gen = torch.Generator().manual_seed(length)
    q, k_, v = _inputs(1, 1, length, gen)
    idx, _ = make_pattern(name, k, **opts)(q, k_)
    ref = sparse_attention(q, k_, v, idx, scale=0.3)
    torch.testing.assert_close(_flex(q, k_, v, idx, compiled=False), ref)


def test_flex_equals_sparse_attention_with_per_batch_head_indices():
    gen = torch.Generator().manual_seed(0)
    q, k, v = _inputs(2, 3, 150, gen)
    idx, _ = make_pattern("hax", 16, dim=16).eval()(q, k)  # data-dependent: differs per b, h
    assert not torch.equal(idx[0], idx[1])
    ref = sparse_attention(q, k, v, idx, scale=0.3)
    torch.testing.assert_close(_flex(q, k, v, idx, compiled=False), ref)


@pytest.mark.slow
def test_compiled_flex_equals_sparse_attention():
    """torch.compile'd FlexAttention (inductor's CPU kernel, ~15 s to compile)."""
    gen = torch.Generator().manual_seed(1)
    q, k, v = _inputs(1, 1, 200, gen)
    idx, _ = make_pattern("d", 16, max_len=128)(q, k)
    torch.testing.assert_close(_flex(q, k, v, idx, compiled=True),
                               sparse_attention(q, k, v, idx, scale=0.3))
