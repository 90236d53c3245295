"""Which implementation runs a scan on a given device: the one dispatch point.

On CUDA with mamba-ssm importable: its `selective_scan_fn` (only when the compiled
`selective_scan_cuda` extension loads) and its Triton `mamba_chunk_scan_combined`. On the CPU, both
run the native C cores (recall_lab/native, wrapped in `native.py`: the S6 scan, and SSD as its
recurrence) when they compiled, for float32 inputs (and, for SSD, no initial states); the torch
implementations in `scan.py` / `ssd.py` everywhere else. `backend_report()` says what was chosen,
and why the native core is not used where it is not (for `recall-lab info`).

`reset` (chunk starts, reference.py): mamba-ssm's SSD takes it as `seq_idx` (segment ids, the
running count of resets); its selective_scan_fn has no such input, so a reset S6 scan always runs
the torch implementation on CUDA (on the CPU the native core takes resets). tests/gpu/ checks
the seq_idx path against the reference where CUDA is.

Self-check: the first time a process would run a mamba-ssm kernel, `check_mamba(op)` runs one
small case (gated, output and every gradient) through it and through the torch implementation;
if they differ, that op runs the torch implementation for the rest of the process, with one
warning line (recall_lab/kernel_check.py; `recall-lab info` shows the verdicts).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor

from recall_lab import kernel_check
from recall_lab import native as kernels
from recall_lab.ssm import native
from recall_lab.ssm.scan import selective_scan_torch
from recall_lab.ssm.ssd import ssd_torch

TORCH_SCAN = "torch-chunked"
NATIVE_SCAN = "native-c"
NATIVE_SSD = "native-c-recurrence"
TORCH_SSD = "torch-ssd-chunked"
MAMBA_SCAN = "mamba_ssm.selective_scan_fn"
MAMBA_SSD = "mamba_ssm.mamba_chunk_scan_combined"
OPS = ("selective_scan", "ssd")
# mamba-ssm's SSD multiplies with tl.dot (TF32 on Ampere and later: ~1e-3 relative); a wrong
# kernel is off by O(1)
_MAMBA_TOL = 1e-2


@functools.cache
def _mamba_kernel(op: str) -> tuple[Callable[..., Any] | None, str]:
    """mamba-ssm's kernel for `op`, or None and the reason it is unavailable."""
    try:
        if op == "selective_scan":
            ext = importlib.import_module("selective_scan_cuda")  # the compiled extension
            if not hasattr(ext, "fwd"):
                return None, "selective_scan_cuda has no fwd (not the compiled extension)"
            mod = importlib.import_module("mamba_ssm.ops.selective_scan_interface")
            return mod.selective_scan_fn, "ok"
        mod = importlib.import_module("mamba_ssm.ops.triton.ssd_combined")
        return mod.mamba_chunk_scan_combined, "ok"
    except Exception as exc:  # any import failure means: use torch
        return None, f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def scan_backend(device: torch.device | str, op: str = "selective_scan") -> str:
    """Name of the implementation that `op` ("selective_scan" or "ssd") uses on `device`."""
    if op not in OPS:
        raise ValueError(f"op must be one of {OPS}, got {op!r}")
    if torch.device(device).type == "cuda" and _mamba_kernel(op)[0] is not None:
        return MAMBA_SCAN if op == "selective_scan" else MAMBA_SSD
    if torch.device(device).type == "cpu" and kernels.available():
        return NATIVE_SCAN if op == "selective_scan" else NATIVE_SSD
    return TORCH_SCAN if op == "selective_scan" else TORCH_SSD


def backend_report() -> dict:
    """JSON-able summary of the scan backends per device type (and why mamba-ssm is not used)."""
    devices = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
    report: dict[str, Any] = {
        "cuda_available": torch.cuda.is_available(),
        "mamba_ssm": {op: _mamba_kernel(op)[1] for op in OPS},
        "native": kernels.load()[1],
    }
    for dev in devices:
        report[dev] = {op: scan_backend(dev, op) for op in OPS}
    return report


def _check_case(op: str, device: torch.device | str) -> tuple[Callable, Callable, dict]:
    """(kernel, torch implementation, inputs) of one small gated case of `op` on `device`."""
    gen = torch.Generator().manual_seed(0)

    def r(*shape: int, scale: float = 1.0) -> Tensor:
        return (torch.randn(*shape, generator=gen) * scale).to(device)

    fn = _mamba_kernel(op)[0]
    if op == "selective_scan":
        b, d, n, length = 2, 8, 4, 33
        inp = dict(u=r(b, d, length), delta=r(b, d, length), A=-(r(d, n).abs() + 0.1),
                   B=r(b, n, length), C=r(b, n, length), D=r(d), z=r(b, d, length),
                   delta_bias=r(d, scale=0.5))
        return (lambda **t: fn(**t, delta_softplus=True),
                lambda **t: selective_scan_torch(**t, delta_softplus=True), inp)
    b, length, h, p, g, n, chunk = 2, 48, 2, 16, 1, 16, 16
    inp = dict(x=r(b, length, h, p), dt=r(b, length, h), A=-(r(h).abs() + 0.1),
               B=r(b, length, g, n), C=r(b, length, g, n), D=r(h), z=r(b, length, h, p),
               dt_bias=r(h, scale=0.5))
    return (lambda x, dt, A, B, C, **kw: fn(x, dt, A, B, C, chunk, dt_softplus=True, **kw),
            lambda x, dt, A, B, C, **kw: ssd_torch(x, dt, A, B, C, chunk, dt_softplus=True, **kw),
            inp)


def check_mamba(op: str, device: torch.device | str = "cuda") -> bool:
    """Whether the dispatch may run mamba-ssm's kernel for `op`: checked on its first call in
    the process against the torch implementation (module docstring)."""
    name = MAMBA_SCAN if op == "selective_scan" else MAMBA_SSD

    def check() -> dict[str, float]:
        return kernel_check.errors(*_check_case(op, device))

    return kernel_check.checked(name, check, _MAMBA_TOL, fallback="the torch implementation")


def selective_scan(
    u: Tensor,
    delta: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    D: Tensor | None = None,
    z: Tensor | None = None,
    delta_bias: Tensor | None = None,
    delta_softplus: bool = False,
    return_last_state: bool = False,
    reset: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Mamba selective scan on the fastest backend for u's device (see `scan_backend`).

    u, delta, z: [b, d, l]; A: [d, n]; B, C: [b, n, l] or [b, g, n, l]; D, delta_bias: [d];
    reset: bool [l] or [b, l] (chunk starts; not taken by mamba-ssm's kernel). On the CPU, float64
    inputs (gradient checks) run the torch implementation.
    """
    backend = scan_backend(u.device, "selective_scan")
    if reset is None and backend == MAMBA_SCAN and check_mamba("selective_scan", u.device):
        fn = _mamba_kernel("selective_scan")[0]
        return fn(u, delta, A, B, C, D=D, z=z, delta_bias=delta_bias,
                  delta_softplus=delta_softplus, return_last_state=return_last_state)
    impl = selective_scan_torch
    if backend == NATIVE_SCAN and native.usable(u, A, delta, B, C):
        impl = native.selective_scan_native
    return impl(u, delta, A, B, C, D=D, z=z, delta_bias=delta_bias, delta_softplus=delta_softplus,
                return_last_state=return_last_state, reset=reset)


def ssd(
    x: Tensor,
    dt: Tensor,
    A: Tensor,
    B: Tensor,
    C: Tensor,
    chunk_size: int = 64,
    D: Tensor | None = None,
    z: Tensor | None = None,
    dt_bias: Tensor | None = None,
    dt_softplus: bool = False,
    initial_states: Tensor | None = None,
    return_final_states: bool = False,
    reset: Tensor | None = None,
) -> Tensor | tuple[Tensor, Tensor]:
    """Mamba2 SSD on the fastest backend for x's device (see `scan_backend`).

    x, z: [b, l, h, p]; dt: [b, l, h]; A, dt_bias: [h]; B, C: [b, l, g, n]; D: [h] or [h, p];
    initial_states / final states: [b, h, p, n]; reset: bool [l] or [b, l] (chunk starts). On
    the CPU, float64 inputs and initial states run the torch implementation.
    """
    backend = scan_backend(x.device, "ssd")
    if backend == MAMBA_SSD and check_mamba("ssd", x.device):
        fn = _mamba_kernel("ssd")[0]
        kw = {}
        if reset is not None:  # mamba-ssm's segment ids (tests/gpu/test_gpu_ssm.py)
            rst = torch.as_tensor(reset, device=x.device).expand(x.shape[0], x.shape[1])
            kw["seq_idx"] = rst.to(torch.int32).cumsum(-1).to(torch.int32).contiguous()
        return fn(x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias,
                  initial_states=initial_states, dt_softplus=dt_softplus,
                  return_final_states=return_final_states, **kw)
    impl = ssd_torch
    if backend == NATIVE_SSD and initial_states is None and native.usable(x, A, dt, B, C):
        impl = native.ssd_native
    return impl(x, dt, A, B, C, chunk_size, D=D, z=z, dt_bias=dt_bias, dt_softplus=dt_softplus,
                initial_states=initial_states, return_final_states=return_final_states,
                reset=reset)
