"""Native CPU scans: `native.c`, compiled once per machine, called via ctypes.

Two cores: Mamba's selective scan (S6) and Mamba2's SSD computed as its recurrence.

Why native code: the torch path of S6 (scan.py) makes ~20 element-wise passes over [t, b, n, d]
buffers per layer and step, which is what bounded Mamba's CPU training speed (profiled: the scan was
~60% of a 2-layer step). The C loop touches each (t, n) once in the forward and twice in the
backward, with the n-loop vectorised (expf included). For SSD the torch path (ssd.py) is chunked
matmuls plus their [T, T] decay masks; the recurrence does O(p n) work per head and step with one
exp, and measured 1.8x faster than the torch path's best chunk (32) at B=16, L=256, 8 heads of 16,
state 32 (forward + backward, 1 thread). torch.compile was tried for the same loops and was
slower than the eager torch path at 1 thread, after 17-54 s of compilation per process; a C file
compiles in about a second, once, with the compiler the Python headers already need.

How it is built: `load()` compiles `native.c` with the system C compiler (``$CC``, else
``cc`` or ``gcc``) into the cache directory (``$RECALL_LAB_CACHE``, else
``$XDG_CACHE_HOME/recall-lab``, else ``~/.cache/recall-lab``) under a name that hashes the
source, the flags, the compiler's version and this CPU's model and flags, so a changed file or a
different machine gets its own build; parallel processes (sweep workers) each write a temporary
file and rename it into place. ``-ffast-math`` is used when compiling only, never when linking: a
shared library linked with it would set flush-to-zero for the whole process.

When it is not used: no compiler, a failed build, ``RECALL_LAB_NATIVE=0`` (e.g. to reproduce a
result made before this path existed bit for bit), float64 inputs (the gradient checks), more than
`scan_max_state()` states, or a CUDA tensor. `load()` says why; `backend.py` then picks the torch
path and `recall-lab info` reports the reason.

Threads: batch rows are split into `torch.get_num_threads()` contiguous ranges, one ctypes call
per range on a thread pool (ctypes releases the GIL). Every row is computed by the same code
whatever the split, so results are bit-identical for any thread count.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch
from torch import Tensor

from generators.errors import RecallLabError
from recall_lab.ssm.reference import reset_mask
from recall_lab.ssm.scan import finish_scan_output, prepare_scan_inputs
from recall_lab.ssm.ssd import finish_ssd_output, prepare_ssd_inputs

SOURCE = Path(__file__).with_name("native.c")
COMPILE_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp-simd", "-fPIC")
ENV_SWITCH = "RECALL_LAB_NATIVE"

_P = ctypes.c_void_p
_L = ctypes.c_long


def cache_dir() -> Path:
    if os.environ.get("RECALL_LAB_CACHE"):
        return Path(os.environ["RECALL_LAB_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "recall-lab"


def _cpu_signature() -> str:
    """Model name and feature flags (what -march=native compiles for)."""
    try:
        lines = Path("/proc/cpuinfo").read_text().splitlines()
    except OSError:
        return platform.machine() + platform.processor()
    keep = [ln for ln in lines if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(keep)))


def _compiler() -> str | None:
    return os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")


def _build(cc: str, target: Path) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as tmp:
        obj, lib = Path(tmp) / "scan.o", Path(tmp) / target.name
        subprocess.run([cc, *COMPILE_FLAGS, "-c", str(SOURCE), "-o", str(obj)], check=True,
                       capture_output=True, text=True)
        subprocess.run([cc, "-shared", str(obj), "-o", str(lib), "-lm"], check=True,
                       capture_output=True, text=True)
        os.replace(lib, target)


@functools.cache
def load() -> tuple[ctypes.CDLL | None, str]:
    """The compiled library, or None and why it is not available (see the module docstring)."""
    if os.environ.get(ENV_SWITCH, "1") == "0":
        return None, f"disabled by {ENV_SWITCH}=0"
    cc = _compiler()
    if cc is None:
        return None, "no C compiler found ($CC, cc, gcc)"
    try:
        version = subprocess.run([cc, "--version"], capture_output=True, text=True,
                                 check=True).stdout
        key = hashlib.sha256("\0".join([SOURCE.read_text(), " ".join(COMPILE_FLAGS), version,
                                        _cpu_signature()]).encode()).hexdigest()[:16]
        target = cache_dir() / "native" / f"native-{key}.so"
        if not target.exists():
            _build(cc, target)
        lib = ctypes.CDLL(str(target))
    except subprocess.CalledProcessError as exc:
        err = (exc.stderr or "").strip().splitlines()
        return None, f"compiling {SOURCE.name} failed: {err[0] if err else exc}"
    except OSError as exc:
        return None, f"native scan unavailable: {exc}"
    lib.scan_fwd.argtypes = [_P] * 8 + [_L] * 6
    lib.scan_bwd.argtypes = [_P] * 13 + [_L] * 6 + [_P]
    lib.scan_max_state.restype = _L
    lib.ssd_fwd.argtypes = [_P] * 8 + [_L] * 7 + [_P]
    lib.ssd_bwd.argtypes = [_P] * 13 + [_L] * 7 + [_P]
    lib.ssd_checkpoint.restype = _L
    lib.conv_silu_fwd.argtypes = [_P, _L, _P, _P, _P] + [_L] * 5
    lib.conv_silu_bwd.argtypes = [_P, _L] + [_P] * 6 + [_L] * 5
    return lib, f"ok ({target})"


def available() -> bool:
    return load()[0] is not None


def scan_max_state() -> int:
    lib = load()[0]
    return 0 if lib is None else int(lib.scan_max_state())


_POOL: tuple[int, ThreadPoolExecutor] | None = None


def _run(fn, rows: int, args) -> None:
    """fn(*args(b0, b1)) over torch.get_num_threads() contiguous row ranges."""
    global _POOL
    parts = min(rows, max(1, torch.get_num_threads()))
    step = -(-rows // parts)
    ranges = [(s, min(rows, s + step)) for s in range(0, rows, step)]
    if len(ranges) == 1:
        fn(*args(*ranges[0]))
        return
    if _POOL is None or _POOL[0] != os.getpid():  # a forked child has no pool threads
        _POOL = (os.getpid(), ThreadPoolExecutor(max_workers=os.cpu_count() or 2))
    for fut in [_POOL[1].submit(fn, *args(s, e)) for s, e in ranges]:
        fut.result()


def _ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()


class _NativeScanCore(torch.autograd.Function):
    """y [b, d, l], h_L [b, d, n] from u, delta [b, d, l], A [d, n], B, C [b, g, l, n] (note:
    n last), keep [b, l] or None; all float32 and contiguous."""

    @staticmethod
    def forward(ctx, u, delta, A, Bt, Ct, keep):
        lib = load()[0]
        b, d, length = u.shape
        n, g = A.shape[1], Bt.shape[1]
        y = torch.empty_like(u)
        last = u.new_empty(b, d, n)
        ptrs = [_ptr(t) for t in (u, delta, A, Bt, Ct, keep, y, last)]
        _run(lib.scan_fwd, b, lambda b0, b1: (*ptrs, d, length, n, g, b0, b1))
        ctx.save_for_backward(u, delta, A, Bt, Ct, keep)
        return y, last

    @staticmethod
    def backward(ctx, gy, glast):
        lib = load()[0]
        u, delta, A, Bt, Ct, keep = ctx.saved_tensors
        b, d, length = u.shape
        n, g = A.shape[1], Bt.shape[1]
        gy = torch.zeros_like(u) if gy is None else gy.contiguous()
        glast = None if glast is None else glast.contiguous()
        gu, gdelta = torch.empty_like(u), torch.empty_like(u)
        gA = u.new_empty(b, d, n)
        gB, gC = torch.zeros_like(Bt), torch.zeros_like(Ct)
        ptrs = [_ptr(t) for t in (u, delta, A, Bt, Ct, keep, gy, glast, gu, gdelta, gA, gB, gC)]
        scratch = {}

        def args(b0, b1):
            buf = scratch.setdefault(b0, u.new_empty(2 * length * n))  # per range, kept alive
            return (*ptrs, d, length, n, g, b0, b1, buf.data_ptr())

        _run(lib.scan_bwd, b, args)
        return gu, gdelta, gA.sum(0), gB, gC, None


class _NativeSSDCore(torch.autograd.Function):
    """y [b, l, h, p], S_L [b, h, p, n] from x [b, l, h, p], dt [b, l, h] (after bias and
    softplus), A [h], B, C [b, l, g, n], keep [b, l] or None; all float32 and contiguous."""

    @staticmethod
    def forward(ctx, x, dt, A, B, C, keep):
        lib = load()[0]
        b, length, h, p = x.shape
        g, n = B.shape[2], B.shape[3]
        y = torch.empty_like(x)
        final = x.new_empty(b, h, p, n)
        ptrs = [_ptr(t) for t in (x, dt, A, B, C, keep, y, final)]
        scratch = {}

        def args(b0, b1):
            buf = scratch.setdefault(b0, x.new_empty(p * n))
            return (*ptrs, length, h, p, n, g, b0, b1, buf.data_ptr())

        _run(lib.ssd_fwd, b, args)
        ctx.save_for_backward(x, dt, A, B, C, keep)
        return y, final

    @staticmethod
    def backward(ctx, gy, gfinal):
        lib = load()[0]
        x, dt, A, B, C, keep = ctx.saved_tensors
        b, length, h, p = x.shape
        g, n = B.shape[2], B.shape[3]
        gy = torch.zeros_like(x) if gy is None else gy.contiguous()
        gfinal = None if gfinal is None else gfinal.contiguous()
        gx, gdt = torch.empty_like(x), torch.empty_like(dt)
        gA = x.new_empty(b, h)
        gB, gC = torch.zeros_like(B), torch.zeros_like(C)
        ptrs = [_ptr(t) for t in (x, dt, A, B, C, keep, gy, gfinal, gx, gdt, gA, gB, gC)]
        ck = int(lib.ssd_checkpoint())
        size = (-(-length // ck) + ck + 1) * p * n
        scratch = {}

        def args(b0, b1):
            buf = scratch.setdefault(b0, x.new_empty(size))
            return (*ptrs, length, h, p, n, g, b0, b1, buf.data_ptr())

        _run(lib.ssd_bwd, b, args)
        return gx, gdt, gA.sum(0), gB, gC, None


class _NativeConvSilu(torch.autograd.Function):
    """silu(depthwise causal conv) of x [b, l, c] (channels contiguous, rows may be strided);
    weight [c, 1, k], bias [c] or None; float32."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        lib = load()[0]
        b, length, c = x.shape
        if x.stride(2) != 1 or x.stride(0) != length * x.stride(1):
            x = x.contiguous()
        wT = weight[:, 0, :].t().contiguous()
        bias_c = None if bias is None else bias.contiguous()
        y = x.new_empty(b, length, c)
        ptrs = (_ptr(x), x.stride(1), _ptr(wT), _ptr(bias_c), _ptr(y))
        _run(lib.conv_silu_fwd, b, lambda b0, b1: (*ptrs, length, c, wT.shape[0], b0, b1))
        ctx.save_for_backward(x, wT, bias_c)
        ctx.has_bias = bias is not None
        return y

    @staticmethod
    def backward(ctx, gy):
        lib = load()[0]
        x, wT, bias = ctx.saved_tensors
        b, length, c = x.shape
        k = wT.shape[0]
        gy = gy.contiguous()
        gx = x.new_empty(b, length, c)
        gw = x.new_empty(b, k, c)
        gb = x.new_empty(b, c)
        ptrs = (_ptr(x), x.stride(1), _ptr(wT), _ptr(bias), _ptr(gy), _ptr(gx), _ptr(gw), _ptr(gb))
        _run(lib.conv_silu_bwd, b, lambda b0, b1: (*ptrs, length, c, k, b0, b1))
        gweight = gw.sum(0).t().unsqueeze(1)
        return gx, gweight, gb.sum(0) if ctx.has_bias else None


def conv_silu(x: Tensor, weight: Tensor, bias: Tensor | None) -> Tensor:
    """silu(causal depthwise conv1d) over time of x [b, l, c] -> [b, l, c] (contiguous), the
    same as ``F.silu(F.conv1d(F.pad(x.transpose(1, 2), (k - 1, 0)), weight, bias,
    groups=c)).transpose(1, 2)`` without the layout changes; weight [c, 1, k]."""
    return _NativeConvSilu.apply(x, weight, bias)


def conv_usable(x: Tensor, weight: Tensor, bias: Tensor | None) -> bool:
    """Whether `conv_silu` takes these: a CPU, float32 x, weight and bias."""
    tensors = [x, weight] + ([] if bias is None else [bias])
    return (x.device.type == "cpu" and available()
            and all(t.dtype == torch.float32 for t in tensors))


def usable(u: Tensor, A: Tensor, *tensors: Tensor) -> bool:
    """Whether a native core takes these inputs: CPU, float32 compute, and for the S6 scan
    (A [d, n]) at most `scan_max_state()` states."""
    if u.device.type != "cpu" or not available():
        return False
    if any(t is not None and t.dtype == torch.float64 for t in (u, A, *tensors)):
        return False
    return A.dim() == 1 or 0 < A.shape[-1] <= scan_max_state()


def selective_scan_native(
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
    """Selective scan on the native core; same contract as `selective_scan_ref`."""
    if load()[0] is None:
        raise RuntimeError(f"native selective scan unavailable: {load()[1]}")
    ct, u_c, delta_c, A_c, B4, C4, rst = prepare_scan_inputs(u, delta, A, B, C, delta_bias,
                                                             delta_softplus, reset)
    if ct != torch.float32:
        raise RuntimeError("the native selective scan computes in float32 only")
    keep = None if rst is None else (~rst).to(ct).contiguous()
    y, last = _NativeScanCore.apply(u_c.contiguous(), delta_c.contiguous(), A_c.contiguous(),
                                    B4.transpose(-1, -2).contiguous(),
                                    C4.transpose(-1, -2).contiguous(), keep)
    y = finish_scan_output(y, u_c, D, z, u.dtype)
    return (y, last) if return_last_state else y


def ssd_native(
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
    """Mamba2 SSD as its recurrence on the native core; same contract as `ssd_ref`, except that
    `initial_states` is not taken (the dispatcher sends those calls to the torch path) and
    `chunk_size` only has to be valid (the recurrence has no chunks)."""
    if load()[0] is None:
        raise RuntimeError(f"native SSD unavailable: {load()[1]}")
    if initial_states is not None:
        raise RuntimeError("the native SSD starts from zero states; use ssd_torch")
    if chunk_size < 1:
        raise RecallLabError(f"chunk_size must be >= 1, got {chunk_size}")
    ct, x_in, dt_c = prepare_ssd_inputs(x, dt, A, B, C, dt_bias, dt_softplus)
    if ct != torch.float32:
        raise RuntimeError("the native SSD computes in float32 only")
    b, length = x.shape[:2]
    rst = reset_mask(reset, b, length, x.device)
    keep = None if rst is None else (~rst).to(ct).contiguous()
    y, final = _NativeSSDCore.apply(x_in.contiguous(), dt_c.contiguous(), A.to(ct).contiguous(),
                                    B.to(ct).contiguous(), C.to(ct).contiguous(), keep)
    y = finish_ssd_output(y, x_in, D, z, x.dtype)
    return (y, final) if return_final_states else y
