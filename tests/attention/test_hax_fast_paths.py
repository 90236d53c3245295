"""The HAX branch's native fast paths against their torch references (issue 26): LSH indices in
one pass (`native.lsh_window` vs `lsh_indices(causal_center(...))`), KS scores and top-n
(`native.ks_scores` vs `KSPattern.inputs`, the scorer, `causal_topk_indices`), the ranking loss's
targets (`native.ks_target`), the loss with its scorer gradients (`native.ks_rank_loss` vs
`ks_ranking_loss` with `score_at`), and the whole HAX pattern in one call (`HAXPattern` vs its
`UnionPattern.forward`). Seeded random shapes through Hypothesis; cases where the two
summation orders may round to different discrete choices (a projection within rounding of 0, two
scores within rounding) are left out with `assume`: the one documented difference."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from recall_lab import native as kernels
from recall_lab.attention import native
from recall_lab.attention.base import UnionPattern
from recall_lab.attention.hax import HAXPattern, hax_pattern
from recall_lab.attention.ks import (
    KSPattern,
    causal_topk_indices,
    ks_ranking_loss,
    ks_ranking_target_torch,
    sample_keys,
)
from recall_lab.attention.lsh import (
    LSHPattern,
    causal_center,
    lsh_indices,
    native_lsh_applies,
    sample_planes,
)

pytestmark = pytest.mark.skipif(not kernels.available(),
                                reason=f"no native kernels: {kernels.load()[1]}")


def _generic(q: torch.Tensor, k: torch.Tensor, planes: torch.Tensor) -> bool:
    """No projection within rounding of 0: there the two summation orders may bin differently
    (the one documented difference of the native LSH path)."""
    for x in (q, k):
        proj = causal_center(x) @ planes
        if ((proj.abs() < 1e-5) & (proj != 0)).any():
            return False
    return True


@settings(max_examples=60, deadline=None)
@given(b=st.integers(1, 3), hq=st.sampled_from([1, 2, 3]), length=st.integers(1, 40),
       d=st.integers(1, 9), h=st.integers(1, 8), n=st.integers(1, 7),
       rule=st.sampled_from(["sign", "argmax"]), ties=st.booleans(), strided=st.booleans(),
       seed=st.integers(0, 10**6))
def test_native_lsh_equals_the_torch_path(b, hq, length, d, h, n, rule, ties, strided, seed):
    """Same lists in the same slot order; -1 slots (n > a bin's keys), one-token rows, heads
    broadcast from 1, strided views (the branch's permuted projection), repeated vectors (their
    centres are exactly 0: bin 0) and few bins (h = 1: long same-bin runs)."""
    g = torch.Generator().manual_seed(seed)
    heads = hq if hq > 1 else 2
    q = torch.randn(b, hq, length, d, generator=g)
    k = torch.randn(b, heads, length, d, generator=g)
    if ties:  # a constant prefix: centred vectors exactly 0 there
        q[:, :, : length // 2] = q[:, :, :1]
        k[:, :, : length // 2] = k[:, :, :1]
    if strided:  # [b, L, 2, H, d] -> [b, H, L, d] views, as SparseBranch makes them
        buf = torch.randn(b, length, 2, heads, d, generator=g)
        q, k = buf.permute(2, 0, 3, 1, 4)
    planes = sample_planes(d, h, heads, generator=g)
    assume(_generic(q, k, planes))
    want = lsh_indices(causal_center(q), causal_center(k), n, planes, rule)
    got = native.lsh_window(q, k, planes, n, rule == "argmax")
    assert got.dtype == torch.int32 and torch.equal(got, want)


def test_lsh_pattern_takes_the_native_path_and_keeps_the_rng_stream():
    """The pattern's output is the torch path's, and it draws its planes as before (the same
    generator state afterwards), so training runs see the same random stream."""
    pat = LSHPattern(4, h=8).train()
    g = torch.Generator().manual_seed(3)
    q, k = torch.randn(2, 32, 1, 34, 4, generator=g).unbind(0)
    assert native_lsh_applies(q, k, 4, 8, "sign")
    torch.manual_seed(7)
    got, aux = pat(q, k)
    after = torch.rand(3)
    torch.manual_seed(7)
    planes = sample_planes(4, 8, 1)
    want = lsh_indices(causal_center(q), causal_center(k), 4, planes)
    assert aux is None and torch.equal(got, want) and torch.equal(torch.rand(3), after)
    assert not native_lsh_applies(q.double(), k.double(), 4, 8, "sign")


def _ks_torch(pat: KSPattern, q: torch.Tensor, k: torch.Tensor):
    """KSPattern.forward's torch path: (inputs, scores, indices, loss)."""
    inp = pat.inputs(q, k)
    with torch.no_grad():
        x = pat.mlp(inp).squeeze(-1)
    idx = causal_topk_indices(x, pat.budget)

    def score_at(sel):
        return pat.mlp(inp.gather(-2, sel[..., None].expand(*sel.shape, inp.shape[-1]))).squeeze(-1)

    return inp, x, idx, ks_ranking_loss(x, q, k, pat.budget, pat.scale, score_at=score_at)


def _no_close_scores(x: torch.Tensor) -> bool:
    """No two scores of a row within float rounding (there the top-n may differ)."""
    srt = x.sort(-1).values
    gap = (srt[..., 1:] - srt[..., :-1]).abs()
    return bool(((gap > 1e-5) | (gap == 0)).all())


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 3), hq=st.sampled_from([1, 2]), length=st.integers(1, 40),
       d=st.integers(1, 8), n=st.integers(1, 6), ties=st.booleans(), strided=st.booleans(),
       seed=st.integers(0, 10**6))
def test_native_ks_equals_the_torch_path(b, hq, length, d, n, ties, strided, seed):
    """Inputs and scores to float rounding, the same top-n lists (both heap order), the
    ranking loss and the scorer's gradients to float tolerance, from the same random stream.
    Ties: repeated (q, k) rows give equal scores (the earlier key wins in both)."""
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    pat = KSPattern(n, d).train()
    heads = 2
    q = torch.randn(b, hq, length, d, generator=g)
    k = torch.randn(b, heads, length, d, generator=g)
    if ties:  # k repeats and q = 0 after the first: equal scorer inputs, equal scores
        k[:, :, 1::2] = k[:, :, :1]
        q[:, :, 1:] = 0
    if strided:
        q, k = torch.randn(b, length, 2, heads, d, generator=g).permute(2, 0, 3, 1, 4)
    assert pat.native_applies(q, k)
    inp, x, idx, loss = _ks_torch(pat, q, k)
    assume(_no_close_scores(x))
    grads = torch.autograd.grad(loss, list(pat.parameters()))
    inp2, x2, idx2 = native.ks_scores(q, k, pat.mlp, n)
    torch.testing.assert_close(inp2, inp, rtol=1e-6, atol=1e-7)  # the norm's sum order
    torch.testing.assert_close(x2, x, rtol=1e-5, atol=1e-6)
    assert torch.equal(idx2, idx)
    # the same sampled keys: reset the stream the torch path drew from
    torch.manual_seed(seed)
    _, loss_ref = pat.eval()(q, k)  # eval draws nothing
    pat.train()
    torch.manual_seed(seed)
    want_sel = sample_keys(x, n)
    torch.manual_seed(seed)
    idx3, loss2 = pat(q, k)
    assert loss_ref is None and torch.equal(idx3, idx)
    ref_loss = _loss_for(pat, q, k, inp, x, want_sel)
    torch.testing.assert_close(loss2, ref_loss, rtol=1e-5, atol=1e-6)
    g_ref = torch.autograd.grad(ref_loss, list(pat.parameters()))
    g_new = torch.autograd.grad(loss2, list(pat.parameters()))
    for a, c in zip(g_new, g_ref, strict=True):
        torch.testing.assert_close(a, c, rtol=1e-4, atol=1e-6)
    assert len(grads) == 6


def _loss_for(pat, q, k, inp, x, sel):
    """ks_ranking_loss's torch formula on given sampled keys."""
    xs = pat.mlp(inp.gather(-2, sel[..., None].expand(*sel.shape, inp.shape[-1]))).squeeze(-1)
    target = ks_ranking_target_torch(q, k, sel, pat.scale, q.shape[-2])
    logits = xs[..., :, None] - xs[..., None, :]
    return torch.nn.functional.binary_cross_entropy_with_logits(logits, target)


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 3), length=st.integers(1, 40), d=st.integers(1, 8), m=st.integers(1, 8),
       seed=st.integers(0, 10**6))
def test_native_ks_target_equals_the_torch_path(b, length, d, m, seed):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, 1, length, d, generator=g)
    k = torch.randn(b, 2, length, d, generator=g)
    sel = sample_keys(torch.zeros(b, 2, length), m, g)
    want = ks_ranking_target_torch(q, k, sel, d**-0.5, length)
    got = native.ks_target(q, k, sel, d**-0.5)
    # equal but where two sampled keys' y lie within rounding (not in these seeds' data)
    assert torch.equal(got, want)


@settings(max_examples=40, deadline=None)
@given(b=st.integers(1, 3), hq=st.sampled_from([1, 2]), hk=st.sampled_from([1, 2]),
       length=st.integers(1, 40), d=st.integers(1, 8), budget=st.integers(2, 12),
       h=st.integers(1, 8), rule=st.sampled_from(["sign", "argmax"]), strided=st.booleans(),
       train=st.booleans(), seed=st.integers(0, 10**6))
def test_hax_pattern_in_one_call_equals_its_union_of_parts(b, hq, hk, length, d, budget, h, rule,
                                                          strided, train, seed):
    """`HAXPattern`'s one native call (LSH window, KS scores and top-n, union, ranking targets)
    against `UnionPattern.forward` (each part's own path, then `union_indices`) from the same
    random state: the same index lists, the same loss and scorer gradients, bit for bit (the
    same kernels' arithmetic), and the same random stream afterwards. Heads broadcast from 1
    and the branch's strided q/k views included."""
    g = torch.Generator().manual_seed(seed)
    pat = hax_pattern(budget, dim=d, h=h, rule=rule).train(train)
    assert isinstance(pat, HAXPattern)
    if strided:
        heads = max(hq, hk)
        q, k = torch.randn(b, length, 2, heads, d, generator=g).permute(2, 0, 3, 1, 4)
    else:
        q = torch.randn(b, hq, length, d, generator=g)
        k = torch.randn(b, hk, length, d, generator=g)
    assert pat.native_applies(q, k)
    out = {}
    def parts(q, k):
        return UnionPattern.forward(pat, q, k)

    for side, fwd in (("one call", pat.forward), ("parts", parts)):
        torch.manual_seed(seed)
        idx, aux = fwd(q, k)
        grads = None if aux is None else torch.autograd.grad(aux, list(pat.parameters()))
        out[side] = (idx, aux, grads, torch.rand(2))
    (i1, a1, g1, r1), (i2, a2, g2, r2) = out["one call"], out["parts"]
    assert i1.dtype == torch.int32 and torch.equal(i1, i2) and torch.equal(r1, r2)
    assert (a1 is None) == (a2 is None) == (not train)
    if train:
        assert torch.equal(a1, a2)
        assert all(torch.equal(x, y) for x, y in zip(g1, g2, strict=True))


def test_hax_pattern_falls_back_where_its_parts_would():
    """float64 (no native path) runs the parts, and a q/k width other than the scorer's still
    gets KS's own error."""
    pat = hax_pattern(8, dim=4).train()
    q, k = torch.randn(2, 2, 1, 10, 4, dtype=torch.float64).unbind(0)
    assert not pat.native_applies(q, k)
    torch.manual_seed(0)
    idx, aux = pat(q, k)
    torch.manual_seed(0)
    idx2, aux2 = UnionPattern.forward(pat, q, k)
    assert torch.equal(idx, idx2) and torch.equal(aux, aux2)
    with pytest.raises(Exception, match="ks was built for dim 4"):
        pat(q.float()[..., :3], k.float()[..., :3])
