"""Compiled Triton sparse attention (CUDA) against the torch backend at real shapes.

The CPU suite checks the kernels only through the Triton interpreter at L = 9
(tests/attention/test_triton_sparse.py); here they are compiled and fed the shapes training uses:
the release's batch (B = 64, L = 1058, d_qk 16, dv 128, HAX n = 64) and long rows (8K-64K,
d_qk 64, dv 256, one tile n = 64 and two tiles n = 96), with empty rows, duplicate keys and
KS-style shared keys that every query lists (the worst case for the fp32 atomic-add backward),
in fp32, fp16 and bf16, output and every gradient. Both backends compute in fp32 from the same
inputs, so they differ only by summation order (and the final rounding to the input dtype):
errors are judged relative to the reference's largest entry (`_close`); a wrong kernel is off
by O(1).

Determinism: the backward scatters dk, dv with atomics, so two runs may differ in the last bits;
`test_atomic_backward_determinism` measures by how much and records it (junit property
`max_rel_diff`, read by `make gpu-check`).
"""

from __future__ import annotations

import pytest
import torch

from recall_lab.attention import make_pattern, sparse_attention, triton_available

pytestmark = [pytest.mark.cuda, pytest.mark.skipif(
    not triton_available(), reason="needs Triton (the CUDA default backend)")]

DEV = "cuda"
# relative to max |reference|: fp32 differs only in summation order; fp16 / bf16 outputs and
# gradients are rounded once to the input dtype (2^-11, 2^-8) after fp32 math on both sides
TOL = {torch.float32: 1e-4, torch.float16: 2e-3, torch.bfloat16: 1.6e-2}
DTYPES = list(TOL)


def _close(a: torch.Tensor, b: torch.Tensor, tol: float) -> None:
    assert a.dtype == b.dtype and a.shape == b.shape
    a, b = a.detach().double(), b.detach().double()
    err = float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))
    assert err <= tol, f"max rel err {err:.3g} > {tol:g}"


def _run(q, k, v, idx, backend, g):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = sparse_attention(*leaves, idx, backend=backend)
    out.backward(g)
    return [out] + [t.grad for t in leaves]


def _compare(q, k, v, idx, dtype):
    gen = torch.Generator(device=DEV).manual_seed(1)
    g = torch.randn(v.shape, generator=gen, device=DEV).to(dtype)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    ref = _run(q, k, v, idx, "torch", g)
    got = _run(q, k, v, idx, "triton", g)
    for name, a, b in zip(("out", "dq", "dk", "dv"), got, ref, strict=True):
        assert torch.isfinite(a).all(), name
        _close(a, b, TOL[dtype])


def _qkv(b, length, d, dv, seed=0):
    gen = torch.Generator(device=DEV).manual_seed(seed)
    return [torch.randn(b, 1, length, w, generator=gen, device=DEV) for w in (d, d, dv)]


def _random_idx(length, n, seed=0, empty=0.3, shared=0):
    """Causal random keys [1, 1, L, n]: `empty` of the slots -1, every 97th row empty, a
    duplicate key in every 5th row, and the first `shared` slots of every row the keys
    0..shared-1 (KS-style keys that all queries hit)."""
    gen = torch.Generator(device=DEV).manual_seed(seed)
    pos = torch.arange(length, device=DEV)[:, None]
    idx = torch.randint(0, 2**30, (length, n), generator=gen, device=DEV) % (pos + 1)
    idx = idx.masked_fill(torch.rand(idx.shape, generator=gen, device=DEV) < empty, -1)
    idx[::5, 1] = idx[::5, 0].clamp_min(0)
    if shared:
        keys = torch.arange(shared, device=DEV).expand(length, shared)
        idx[:, :shared] = torch.where(keys <= pos, keys, -1)
    idx[::97] = -1
    return idx.to(torch.int32).view(1, 1, length, n)


@pytest.mark.parametrize("dtype", DTYPES)
def test_release_batch_hax(dtype):
    """B = 64, L = 1058, d_qk 16, dv 128: HAX indices (LSH 32 + KS 32) from the pattern itself."""
    q, k, v = _qkv(64, 1058, 16, 128)
    idx, _ = make_pattern("hax", 64, dim=16).to(DEV).eval()(q, k)
    _compare(q, k, v, idx, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("length,n", [(8192, 64), (8192, 96), (65536, 64), (65536, 96)])
def test_long_rows(length, n, dtype):
    """d_qk 64, dv 256; n = 96 walks two 64-slot tiles; 8 shared keys hit by every query."""
    q, k, v = _qkv(1, length, 64, 256, seed=length + n)
    _compare(q, k, v, _random_idx(length, n, seed=n, shared=8), dtype)


@pytest.mark.parametrize("dtype", DTYPES)
def test_empty_rows_are_zero_with_zero_gradients(dtype):
    q, k, v = _qkv(2, 1058, 16, 128)
    idx = _random_idx(1058, 64, empty=0.9)
    idx[..., :200, :] = -1
    q, k, v = (t.to(dtype).requires_grad_() for t in (q, k, v))
    out = sparse_attention(q, k, v, idx, backend="triton")
    out.float().square().sum().backward()
    assert torch.equal(out[:, :, :200], torch.zeros_like(out[:, :, :200]))
    assert torch.equal(q.grad[:, :, :200], torch.zeros_like(q.grad[:, :, :200]))
    _compare(*(t.detach().float() for t in (q, k, v)), idx, dtype)


def test_ks_shared_keys_everywhere():
    """Every slot of every row lists one of 4 keys: maximal atomic-add contention on dk, dv."""
    q, k, v = _qkv(4, 4096, 16, 128)
    pos = torch.arange(4096, device=DEV)[:, None]
    keys = torch.arange(64, device=DEV)[None, :] % 4
    idx = torch.where(keys <= pos, keys, -1).to(torch.int32).view(1, 1, 4096, 64)
    _compare(q, k, v, idx, torch.float32)


def test_atomic_backward_determinism(record_property):
    """Two identical backward passes: dq is written once per row (bitwise equal); dk, dv are
    atomic sums whose order may change, so they may differ in the last bits. Records the largest
    relative difference; it must stay at fp32 rounding level."""
    q, k, v = _qkv(8, 4096, 16, 128)
    idx = _random_idx(4096, 64, shared=16)
    g = torch.randn(v.shape, device=DEV)
    a, b = _run(q, k, v, idx, "triton", g), _run(q, k, v, idx, "triton", g)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])  # forward and dq: no atomics
    diff = max(float((x - y).abs().max() / y.abs().max()) for x, y in zip(a[2:], b[2:],
                                                                           strict=True))
    record_property("max_rel_diff", diff)
    print(f"atomic-add backward: max relative difference between two runs {diff:.2e}")
    assert diff <= 1e-4
