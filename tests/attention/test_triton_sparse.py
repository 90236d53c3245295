"""Triton kernels (run by the interpreter on CPU, TRITON_INTERPRET=1) equal the torch op.

Kept tiny: the interpreter runs each program in Python. fp32 and fp16 only (the interpreter
computes bf16 wrongly in some ops).
"""

from __future__ import annotations

import os

import pytest
import torch

from recall_lab.attention import make_pattern, sparse_attention, triton_available

pytestmark = pytest.mark.skipif(
    not triton_available() or os.environ.get("TRITON_INTERPRET") != "1",
    reason="needs Triton and the interpreter (TRITON_INTERPRET=1, set by tests/conftest.py)",
)


def run(q, k, v, idx, backend, g):
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = sparse_attention(*leaves, idx, backend=backend)
    out.backward(g)
    return out, [t.grad for t in leaves]


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-5), (torch.float16, 2e-3)])
@pytest.mark.parametrize("name,n", [("hax", 6), ("sw+d", 4), ("full", 1)])
def test_triton_equals_torch(dtype, tol, name, n):
    gen = torch.Generator().manual_seed(0)
    length, d, dv = 9, 3, 5  # non powers of two: exercises the masks
    q, k = (torch.randn(2, 1, length, d, generator=gen) for _ in range(2))
    v = torch.randn(2, 1, length, dv, generator=gen)
    opts = {"dim": d, "h": 2} if name == "hax" else {}
    idx, _ = make_pattern(name, n, **opts).eval()(q, k)
    q, k, v = (t.to(dtype) for t in (q, k, v))
    g = torch.randn(2, 1, length, dv, generator=gen).to(dtype)
    out_t, grads_t = run(q, k, v, idx, "torch", g)
    out_k, grads_k = run(q, k, v, idx, "triton", g)
    assert out_k.dtype == dtype
    torch.testing.assert_close(out_k, out_t, atol=tol, rtol=tol)
    for a, b in zip(grads_k, grads_t, strict=True):
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)


def test_triton_multi_tile_rows_and_empty_rows():
    gen = torch.Generator().manual_seed(1)
    length, n = 3, 70  # 70 slots > one 64-slot tile; most slots empty
    q, k, v = (torch.randn(1, 1, length, 2, generator=gen) for _ in range(3))
    idx = torch.full((1, 1, length, n), -1, dtype=torch.int32)
    idx[0, 0, 1, 65] = 0
    idx[0, 0, 2, 3] = 2
    idx[0, 0, 2, 69] = 1
    g = torch.randn(1, 1, length, 2, generator=gen)
    out_t, grads_t = run(q, k, v, idx, "torch", g)
    out_k, grads_k = run(q, k, v, idx, "triton", g)
    assert torch.equal(out_k[0, 0, 0], torch.zeros(2))
    torch.testing.assert_close(out_k, out_t)
    for a, b in zip(grads_k, grads_t, strict=True):
        torch.testing.assert_close(a, b)
