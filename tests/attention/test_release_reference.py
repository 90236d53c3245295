"""The release-semantics dense reference: faithful where it is causal, and it leaks the future."""

from __future__ import annotations

import pytest
import torch

from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention.release_reference import release_sparse_attention


def qkv(length=48, d=8, dv=6, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(1, 1, length, d, generator=g), torch.randn(1, 1, length, d, generator=g),
            torch.randn(1, 1, length, dv, generator=g))


def test_release_lsh_depends_on_future_tokens():
    q, k, v = qkv()
    t = 20
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    q2[..., t + 1:, :] += 4.0
    k2[..., t + 1:, :] -= 4.0
    torch.manual_seed(0)
    out1, _, m1 = release_sparse_attention(q, k, v, "lsh", 8, return_mask=True)
    torch.manual_seed(0)
    out2, _, m2 = release_sparse_attention(q2, k2, v2, "lsh", 8, return_mask=True)
    # Same planes, same past, yet the past's masks and outputs change: sequence-axis centring.
    assert not torch.equal(m1[..., : t + 1, :], m2[..., : t + 1, :])
    assert not torch.allclose(out1[..., : t + 1, :], out2[..., : t + 1, :])


def test_release_empty_rows_attend_uniformly_to_all_positions():
    q, k, v = qkv(length=40)
    # Dilated with gap 2048 // 4 = 512 > L: every row is empty.
    out, _ = release_sparse_attention(q, k, v, "d", 4)
    torch.testing.assert_close(out[0, 0], v[0, 0].mean(0).expand(40, -1))
    v2 = v.clone()
    v2[..., -1, :] += 10.0
    out2, _ = release_sparse_attention(q, k, v2, "d", 4)
    assert not torch.allclose(out[..., 0, :], out2[..., 0, :])  # row 0 sees the last token
    idx, _ = make_pattern("d", 4, dilation="release")(q, k)
    assert torch.equal(sparse_attention(q, k, v, idx), torch.zeros_like(v))  # ours: zeros


@pytest.mark.parametrize("name", ["sw", "a", "sw+d", "full"])
def test_release_matches_ours_on_causal_fixed_patterns(name):
    q, k, v = qkv(length=64, seed=1)
    # Release dilation is max_len // (k/2); max_len=32, k=8 -> gap 8, at most 8 keys <= 64.
    out, loss, mask = release_sparse_attention(q, k, v, name, 16, max_len=64, return_mask=True)
    assert loss == 0
    opts = {"dilation": "release", "max_len": 64} if name == "sw+d" else {}
    idx, _ = make_pattern(name, 16, **opts)(q, k)
    dense = torch.zeros(64, 65, dtype=torch.bool)
    dense.scatter_(-1, torch.where(idx[0, 0] < 0, 64, idx[0, 0]).long(), True)
    assert torch.equal(mask[0, 0], dense[:, :64])
    torch.testing.assert_close(sparse_attention(q, k, v, idx), out, atol=1e-5, rtol=1e-5)


def test_release_ks_uses_the_same_scorer_and_returns_a_ranking_loss():
    q, k, v = qkv(length=30, d=4)
    ks = make_pattern("ks", 8, dim=4)
    torch.manual_seed(0)
    out, loss, mask = release_sparse_attention(q, k, v, "ks", 8, score_mlp=ks.mlp,
                                               return_mask=True)
    assert float(loss.detach()) > 0
    loss.backward()
    assert ks.mlp[0].weight.grad is not None
    assert int(mask.sum(-1).max()) == 8 and bool((mask & ~torch.ones(30, 30).tril().bool()).any()
                                                  ) is False
