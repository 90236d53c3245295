"""Native CPU selective scan: `selective_scan.c`, compiled once per machine, called via ctypes.

Why native code: the torch path (scan.py) makes ~20 element-wise passes over [t, b, n, d] buffers
per layer and step, which is what bounded Mamba's CPU training speed (profiled: the scan was ~60%
of a 2-layer step). The C loop touches each (t, n) once in the forward and twice in the backward,
with the n-loop vectorised (expf included). torch.compile was tried for the same loops and was
slower than the eager torch path at 1 thread, after 17-54 s of compilation per process; a C file
compiles in about a second, once, with the compiler the Python headers already need.

How it is built: `load()` compiles `selective_scan.c` with the system C compiler (``$CC``, else
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

from recall_lab.ssm.scan import finish_scan_output, prepare_scan_inputs

SOURCE = Path(__file__).with_name("selective_scan.c")
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
        target = cache_dir() / "native" / f"selective_scan-{key}.so"
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


def usable(u: Tensor, A: Tensor, *tensors: Tensor) -> bool:
    """Whether the native core takes these inputs (CPU, float32 compute, few enough states)."""
    if u.device.type != "cpu" or not available():
        return False
    if any(t is not None and t.dtype == torch.float64 for t in (u, A, *tensors)):
        return False
    return 0 < A.shape[-1] <= scan_max_state()


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
