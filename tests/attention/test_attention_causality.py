"""Strict causality: perturbing tokens after t changes no index and no output up to t (a
pattern that reads token ids, the oracle, gets random ids perturbed after t too)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.attention import PATTERN_TABLE, PATTERNS, make_pattern, sparse_attention


def build(name: str, n: int, d: int):
    return make_pattern(name, n, **PATTERN_TABLE[name].test_options(n, d))


@pytest.mark.parametrize("name", PATTERNS)
@given(length=st.integers(2, 30), n=st.integers(2, 8), data=st.data())
def test_pattern_and_op_are_causal(name, length, n, data):
    t = data.draw(st.integers(0, length - 2), label="t")
    seed = data.draw(st.integers(0, 10**6), label="seed")
    gen = torch.Generator().manual_seed(seed)
    d = 4
    q, k = torch.randn(1, 2, length, d, generator=gen), torch.randn(1, 2, length, d, generator=gen)
    v = torch.randn(1, 2, length, d, generator=gen)
    q2, k2, v2 = q.clone(), k.clone(), v.clone()
    for x in (q2, k2, v2):
        x[..., t + 1:, :] = torch.randn(x[..., t + 1:, :].shape, generator=gen) * 5
    ids = torch.randint(0, 4, (1, length), generator=gen)  # few ids: many repeats
    ids2 = ids.clone()
    ids2[:, t + 1:] = torch.randint(0, 4, (1, length - t - 1), generator=gen)
    torch.manual_seed(seed)
    pat = build(name, n, d)
    # Eval mode (seeded planes); in training mode the same holds given the same planes.
    pat.eval()
    takes_ids = getattr(pat, "takes_ids", False)  # the oracle: ids too (not a Pattern: seattn)
    i1, _ = pat(q, k, v, **({"ids": ids} if takes_ids else {}))
    i2, _ = pat(q2, k2, v2, **({"ids": ids2} if takes_ids else {}))
    assert torch.equal(i1[..., : t + 1, :], i2[..., : t + 1, :])
    o1 = sparse_attention(q, k, v, i1)
    o2 = sparse_attention(q2, k2, v2, i2)
    assert torch.equal(o1[..., : t + 1, :], o2[..., : t + 1, :])
    # And the op's gradient into the past does not see the future's loss.
    qq = q.clone().requires_grad_()
    sparse_attention(qq, k2, v2, i2)[..., : t + 1, :].sum().backward()
    assert torch.equal(qq.grad[..., t + 1:, :], torch.zeros_like(qq.grad[..., t + 1:, :]))


def test_training_mode_lsh_is_causal_for_the_same_planes():
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 1, 40, 8, generator=gen), torch.randn(2, 1, 40, 8, generator=gen)
    q2, k2 = q.clone(), k.clone()
    q2[..., 20:, :] += 3.0
    k2[..., 20:, :] -= 3.0
    pat = make_pattern("lsh", 6).train()
    torch.manual_seed(5)
    a, _ = pat(q, k)
    torch.manual_seed(5)
    b, _ = pat(q2, k2)
    assert torch.equal(a[..., :20, :], b[..., :20, :])
