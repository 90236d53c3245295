"""`mamba3` on CUDA against mamba-ssm's Mamba-3 SISO kernel (`mamba3_siso_combined`, Triton):
the comparison with the authors' code that the CPU cannot make. tests/mixers/test_zoo_mamba3.py
ties the lab's three forms to the paper's equations (a hand case, and Mamba-2's SSD at
lambda = 1); mamba-ssm 2.3.2 ships Mamba-3 as GPU kernels only.

The mixer's own projections (`Mamba3.projections`: z, x, B and C after their RMSNorm, Delta,
Delta A, the raw trapezoid and angle projections) go to the kernel with the mixer's B/C biases
and D; the kernel's gated output is compared with the mixer's `inner` (its chunked form, on
CUDA in float32 with TF32 off), forward and the gradient of the input, relative to the
reference's largest entry. The kernel casts q, k, v, lambda and the angles to bf16, hence the
bf16 tolerance. SISO only: the MIMO kernel is TileLang's (not among the machine's packages) and
pairs the rotary channels (i, i + N/2) where the lab pairs (2i, 2i + 1).

Skips where the kernel does not import. The project's GPU machines have no mamba-ssm
(docs/gpu.md), but its Mamba-3 Triton files need only torch, triton and einops: a copy of
mamba-ssm's Python sources (its sdist unpacked, nothing built) in the folder named by
RECALL_LAB_MAMBA_SSM_SRC (the one holding `mamba_ssm/`) is loaded without the package's
`__init__`, which imports the compiled extensions."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest
import torch

from recall_lab.mixers.mamba3 import Mamba3

pytestmark = pytest.mark.cuda

DEV = "cuda"
D_MODEL, BATCH = 64, 2
TOL = 5e-2  # bf16 inside the kernel
KERNEL = "mamba_ssm.ops.triton.mamba3.mamba3_siso_combined"


def _siso_kernel():
    """mamba-ssm's `mamba3_siso_combined`, or (None, why)."""
    try:
        module = __import__(KERNEL, fromlist=["mamba3_siso_combined"])
        return module.mamba3_siso_combined, ""
    except Exception as exc:  # noqa: BLE001  no mamba-ssm, or its extensions do not load
        why = f"{type(exc).__name__}: {exc}"
    src = os.environ.get("RECALL_LAB_MAMBA_SSM_SRC")
    if not src or not (Path(src) / "mamba_ssm").is_dir():
        return None, f"{why}; RECALL_LAB_MAMBA_SSM_SRC names no folder holding mamba_ssm/"
    for name in [n for n in sys.modules if n == "mamba_ssm" or n.startswith("mamba_ssm.")]:
        del sys.modules[name]
    package = types.ModuleType("mamba_ssm")  # without its __init__ (compiled extensions)
    package.__path__ = [str(Path(src) / "mamba_ssm")]
    sys.modules["mamba_ssm"] = package
    try:
        module = __import__(KERNEL, fromlist=["mamba3_siso_combined"])
        return module.mamba3_siso_combined, ""
    except Exception as exc:  # noqa: BLE001
        return None, f"{why}; from {src}: {type(exc).__name__}: {exc}"


@pytest.fixture
def no_tf32():
    old = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32 = old


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().cpu(), b.detach().double().cpu()
    return float((a - b).abs().max() / b.abs().max().clamp_min(1e-30))


@pytest.mark.parametrize("length", [64, 300])  # one chunk; several and a partial one
def test_mamba3_equals_mamba_ssms_siso_kernel(length, no_tf32, record_property):
    kernel, why = _siso_kernel()
    if kernel is None:
        pytest.skip(f"mamba-ssm's Mamba-3 kernel does not import here: {why}")
    torch.manual_seed(0)
    # 2 heads of 64, d_state 64: the power-of-two widths the kernel's TMA loads want
    mixer = Mamba3(D_MODEL, d_state=64, expand=2, headdim=64).to(DEV)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(BATCH, length, D_MODEL, generator=gen).to(DEV)
    cotangent = torch.randn(BATCH, length, mixer.d_inner, generator=gen).to(DEV)

    x_ref = x.clone().requires_grad_(True)
    ref = mixer.inner(x_ref)
    (ref * cotangent).sum().backward()

    x_k = x.clone().requires_grad_(True)
    p = mixer.projections(x_k)
    heads = mixer.nheads
    out = kernel(
        Q=p["C"].contiguous(), K=p["B"].contiguous(),  # [b, l, 1, N]: one B/C head (rank 1)
        V=p["x"].contiguous(), ADT=p["adt"].transpose(1, 2).contiguous(),
        DT=p["dt"].transpose(1, 2).contiguous(), Trap=p["trap"].transpose(1, 2).contiguous(),
        Q_bias=mixer.C_bias[:, 0].contiguous(), K_bias=mixer.B_bias[:, 0].contiguous(),
        Angles=p["theta"][:, :, None, :].expand(-1, -1, heads, -1).float().contiguous(),
        D=mixer.D, Z=p["z"].contiguous(), chunk_size=64)
    got = out.reshape(BATCH, length, mixer.d_inner).float()
    (got * cotangent).sum().backward()

    errs = {"out": _rel(got, ref), "dx": _rel(x_k.grad, x_ref.grad)}
    record_property("max_rel_err", f"{max(errs.values()):.2e}")
    assert max(errs.values()) <= TOL, errs
