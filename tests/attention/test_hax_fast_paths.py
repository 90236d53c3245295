"""The HAX branch's native fast paths against their torch references (issue 26): LSH indices in
one pass (`native.lsh_window` vs `lsh_indices(causal_center(...))`), ..."""

from __future__ import annotations

import pytest
import torch
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from recall_lab import native as kernels
from recall_lab.attention import native
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
