"""The sparse-attention op vs dense masked softmax attention: values, gradients, edge cases."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab import native
from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention import sparse as sparse_mod
from recall_lab.generators.errors import RecallLabError


def random_idx(b, h, length, n, gen, p_empty=0.3):
    """Random causal index lists with distinct keys per row and some empty slots/rows."""
    idx = torch.full((b, h, length, n), -1, dtype=torch.int32)
    for bi in range(b):
        for hi in range(h):
            for i in range(length):
                perm = torch.randperm(i + 1, generator=gen)[:n]
                keep = torch.rand(len(perm), generator=gen) > p_empty
                idx[bi, hi, i, : len(perm)] = torch.where(keep, perm, -1).to(torch.int32)
    return idx


def dense_reference(q, k, v, idx, scale):
    """Softmax over the listed keys via an L x L mask (-inf elsewhere); empty rows give 0."""
    length = q.shape[-2]
    ii = idx.long().expand(*q.shape[:2], length, idx.shape[-1])
    mask = torch.zeros(*q.shape[:2], length, length + 1, dtype=torch.bool)
    mask.scatter_(-1, torch.where(ii < 0, length, ii), True)
    mask = mask[..., :length]
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    p = torch.softmax(s, -1).nan_to_num(0.0)
    return p @ v


CPU_BACKENDS = ("torch", "csr")  # every dtype
# float32/16 only: the native kernel (recall_lab/native), where it built
FP32_BACKENDS = CPU_BACKENDS + (("native",) if native.available() else ())


@pytest.mark.parametrize("backend", CPU_BACKENDS)
@given(length=st.integers(1, 12), n=st.integers(1, 6), seed=st.integers(0, 10**6))
def test_values_and_gradients_match_dense_masked_softmax(backend, length, n, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 2, length, 3, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 2, length, 5, generator=gen, dtype=torch.float64)
    idx = random_idx(2, 2, length, n, gen)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    refs = [t.clone().requires_grad_() for t in (q, k, v)]
    out = sparse_attention(*leaves, idx, scale=0.8, backend=backend)
    ref = dense_reference(*refs, idx, 0.8)
    torch.testing.assert_close(out, ref)
    g = torch.randn(ref.shape, generator=gen, dtype=torch.float64)
    out.backward(g)
    ref.backward(g)
    for a, b in zip(leaves, refs, strict=True):
        torch.testing.assert_close(a.grad, b.grad)


@pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load()[1]}")
@given(length=st.integers(1, 30), n=st.integers(1, 8), dup=st.booleans(),
       seed=st.integers(0, 10**6))
def test_native_float32_matches_dense_and_the_gather_reference(length, n, dup, seed):
    gen = torch.Generator().manual_seed(seed)
    q, k = (torch.randn(2, 2, length, 5, generator=gen) for _ in range(2))
    v = torch.randn(2, 2, length, 7, generator=gen)
    idx = random_idx(2, 2, length, n, gen)
    if dup:  # a key listed twice counts twice (compared with the gather reference only)
        idx = torch.cat([idx, idx[..., :1]], -1)
    g = torch.randn(2, 2, length, 7, generator=gen)
    res = []
    for backend in ("native", "torch"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = sparse_attention(*leaves, idx, scale=0.7, backend=backend)
        out.backward(g)
        res.append([out] + [t.grad for t in leaves])
    if not dup:
        torch.testing.assert_close(res[0][0], dense_reference(q, k, v, idx, 0.7),
                                   atol=1e-5, rtol=1e-5)
    for a, b in zip(*res, strict=True):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load()[1]}")
@given(b=st.integers(1, 3), h=st.integers(1, 3), length=st.integers(1, 20), n=st.integers(1, 6),
       d=st.integers(1, 6), dv=st.integers(1, 40), seed=st.integers(0, 10**6))
def test_native_reads_strided_views_and_keeps_the_values_layout(b, h, length, n, d, dv, seed):
    """The hybrid branch's layouts: q, k permuted out of one [b, l, 2, h, d] projection, v (and
    the upstream gradient) [b, h, l, dv] views of [b, l, h, dv] buffers, a broadcast head in
    idx. The native kernel reads them through their strides and equals the gather reference on
    contiguous copies (values and gradients); its output and v's gradient come in v's layout,
    so transposing them back to [b, l, h * dv] is a view (no copy)."""
    gen = torch.Generator().manual_seed(seed)
    qk = torch.randn(b, length, 2, h, d, generator=gen)
    xc = torch.randn(b, length, h * dv, generator=gen)
    idx = random_idx(b, 1, length, n, gen)
    g = torch.randn(b, length, h, dv, generator=gen).transpose(1, 2)
    res = []
    for backend in ("native", "torch"):
        qk_leaf, xc_leaf = qk.clone().requires_grad_(), xc.clone().requires_grad_()
        q, k = qk_leaf.permute(2, 0, 3, 1, 4)
        v = xc_leaf.view(b, length, h, dv).transpose(1, 2)
        if backend == "torch":
            q, k, v = (t.contiguous() for t in (q, k, v))
        out = sparse_attention(q, k, v, idx, scale=0.6, backend=backend)
        if backend == "native":
            assert out.transpose(1, 2).is_contiguous()
        out.backward(g)
        if backend == "native":
            assert xc_leaf.grad.is_contiguous()
        res.append((out, qk_leaf.grad, xc_leaf.grad))
    for a, c in zip(*res, strict=True):
        torch.testing.assert_close(a, c, atol=1e-5, rtol=1e-5)


@pytest.mark.skipif(not native.available(), reason=f"no native kernels: {native.load()[1]}")
def test_native_results_do_not_depend_on_the_thread_count():
    gen = torch.Generator().manual_seed(8)
    q, k, v = (torch.randn(3, 2, 40, 6, generator=gen) for _ in range(3))
    idx = random_idx(3, 2, 40, 5, gen)
    before, runs = torch.get_num_threads(), []
    try:
        for threads in (1, 2):
            torch.set_num_threads(threads)
            leaves = [t.clone().requires_grad_() for t in (q, k, v)]
            out = sparse_attention(*leaves, idx, backend="native")
            out.square().sum().backward()
            runs.append([out] + [t.grad for t in leaves])
    finally:
        torch.set_num_threads(before)
    for a, b in zip(*runs, strict=True):
        assert torch.equal(a, b)


def test_auto_backend_on_cpu_is_native_where_built_and_csr_for_float64():
    want = "native" if native.available() else "csr"
    assert sparse_mod.default_backend("cpu") == want
    q = torch.randn(1, 1, 6, 2, dtype=torch.float64)
    idx = torch.zeros(1, 1, 6, 1, dtype=torch.int32)
    # float64 never reaches the float32 kernel: auto gives csr's float64 result
    torch.testing.assert_close(sparse_attention(q, q, q, idx),
                               sparse_attention(q, q, q, idx, backend="csr"))
    if native.available():
        with pytest.raises(RecallLabError):
            sparse_attention(q, q, q, idx, backend="native")


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_gradcheck_float64(backend):
    gen = torch.Generator().manual_seed(1)
    q, k = (torch.randn(1, 2, 6, 2, generator=gen, dtype=torch.float64, requires_grad=True)
            for _ in range(2))
    v = torch.randn(1, 2, 6, 3, generator=gen, dtype=torch.float64, requires_grad=True)
    idx = random_idx(1, 2, 6, 4, gen)
    # Fast mode (random Jacobian projections) for csr: each call rebuilds sparse tensors.
    assert torch.autograd.gradcheck(
        lambda a, b, c: sparse_attention(a, b, c, idx, backend=backend), (q, k, v),
        fast_mode=backend == "csr")


@pytest.mark.parametrize("backend", FP32_BACKENDS)
def test_empty_rows_output_zero_and_get_no_gradient(backend):
    q = torch.randn(1, 1, 4, 2, requires_grad=True)
    k = torch.randn(1, 1, 4, 2, requires_grad=True)
    v = torch.randn(1, 1, 4, 3, requires_grad=True)
    idx = torch.tensor([[[[-1, -1], [0, 1], [-1, -1], [2, -1]]]], dtype=torch.int32)
    out = sparse_attention(q, k, v, idx, backend=backend)
    assert torch.equal(out[0, 0, 0], torch.zeros(3)) and torch.equal(out[0, 0, 2], torch.zeros(3))
    torch.testing.assert_close(out[0, 0, 3], v[0, 0, 2])
    out.sum().backward()
    assert torch.equal(q.grad[0, 0, 0], torch.zeros(2)) and torch.equal(v.grad[0, 0, 3],
                                                                         torch.zeros(3))


def test_chunked_path_equals_single_chunk(monkeypatch):
    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(2, 3, 33, 4, generator=gen) for _ in range(3))
    idx = random_idx(1, 3, 33, 6, gen)  # broadcast over batch
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    out1 = sparse_attention(*args, idx, backend="torch")
    out1.square().sum().backward()
    g1 = [a.grad for a in args]
    monkeypatch.setattr(sparse_mod, "_CHUNK_ELEMS", 5 * 3 * 2 * 6 * 4)  # 5-query chunks
    args = [t.clone().requires_grad_() for t in (q, k, v)]
    out2 = sparse_attention(*args, idx, backend="torch")
    out2.square().sum().backward()
    torch.testing.assert_close(out1, out2)
    for a, b in zip(g1, [a.grad for a in args], strict=True):
        torch.testing.assert_close(a, b)


@pytest.mark.parametrize("backend", FP32_BACKENDS)
def test_half_precision_inputs_are_computed_in_fp32(backend):
    gen = torch.Generator().manual_seed(3)
    q, k, v = (torch.randn(1, 2, 20, 8, generator=gen) for _ in range(3))
    idx, _ = make_pattern("sw", 5)(q, k)
    out = sparse_attention(q.half(), k.half(), v.half(), idx, backend=backend)
    assert out.dtype == torch.float16
    ref = sparse_attention(q.half().float(), k.half().float(), v.half().float(), idx,
                           backend="torch")
    torch.testing.assert_close(out.float(), ref, atol=2e-3, rtol=2e-3)


def test_csr_fast_path_equals_gather_reference_on_hax_indices():
    gen = torch.Generator().manual_seed(5)
    q, k = (torch.randn(2, 2, 200, 16, generator=gen) for _ in range(2))
    v = torch.randn(2, 2, 200, 24, generator=gen)
    idx, _ = make_pattern("hax", 16, dim=16).eval()(q, k)
    g = torch.randn(2, 2, 200, 24, generator=gen)
    res = []
    for backend in FP32_BACKENDS:
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = sparse_attention(*leaves, idx, backend=backend)
        out.backward(g)
        res.append([out] + [t.grad for t in leaves])
    for other in res[1:]:
        for a, b in zip(res[0], other, strict=True):
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("backend", CPU_BACKENDS)
def test_full_pattern_equals_causal_softmax_attention(backend):
    gen = torch.Generator().manual_seed(4)
    q, k, v = (torch.randn(2, 2, 15, 4, generator=gen, dtype=torch.float64) for _ in range(3))
    idx, _ = make_pattern("full", 1)(q, k)
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(sparse_attention(q, k, v, idx, backend=backend), ref)


def test_bad_inputs_raise():
    q = torch.zeros(1, 1, 4, 2)
    good = torch.zeros(1, 1, 4, 1, dtype=torch.int32)
    with pytest.raises(RecallLabError):
        sparse_attention(q, q, q, good.float())
    with pytest.raises(RecallLabError):
        sparse_attention(q, q, q, torch.zeros(1, 1, 3, 1, dtype=torch.int32))
    with pytest.raises(RecallLabError):
        sparse_attention(q, q, q, good + 4)
    with pytest.raises(RecallLabError):
        sparse_attention(q, q[..., :1], q, good)
    with pytest.raises(RecallLabError):
        sparse_attention(q, q, q, good, backend="cuda")


@pytest.mark.parametrize("fill", [0.0, 1.0])
@pytest.mark.parametrize("p_empty", [0.0, 0.6, 1.0])
def test_csr_stored_and_left_out_empty_slots_match_the_gather_reference(fill, p_empty,
                                                                         monkeypatch):
    """csr stores every slot (fill 0) or only the filled ones (fill 1): both equal `torch`."""
    monkeypatch.setattr(sparse_mod, "_COMPACT_FILL", fill)
    gen = torch.Generator().manual_seed(3)
    q, k = (torch.randn(2, 2, 9, 3, generator=gen, dtype=torch.float64) for _ in range(2))
    v = torch.randn(2, 2, 9, 4, generator=gen, dtype=torch.float64)
    idx = random_idx(2, 2, 9, 5, gen, p_empty=p_empty)
    outs, grads = [], []
    for backend in ("csr", "torch"):
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        out = sparse_attention(*leaves, idx, backend=backend)
        out.backward(torch.ones_like(out))
        outs.append(out)
        grads.append([t.grad for t in leaves])
    torch.testing.assert_close(outs[0], outs[1])
    for a, b in zip(*grads, strict=True):
        torch.testing.assert_close(a, b)
