"""Native CPU kernels: the C files in this folder, compiled once per machine, called via ctypes.

What is here: `ssm.c` (Mamba's selective scan, also fused with the mixer's element-wise chain,
Mamba2's SSD as its recurrence, the mixers' causal conv + SiLU; their autograd functions are in
recall_lab/ssm/native.py), `attention.c` (the sparse-attention op's forward and backward;
recall_lab/attention/native.py), `norm.c` (RMSNorm; recall_lab/ssm/norm.py) and `dplr.c` (the
diagonal-plus-rank-one recurrence of RWKV-7 and the delta-rule family, in float and double;
recall_lab/mixers/dplr_native.py).

Why native code: the torch paths of these ops make many element-wise passes over large intermediate
buffers per step, which is what bounded CPU training speed; a C loop touches each element once or
twice, with the inner loops vectorised (expf included). torch.compile was tried for the scan loops
and was slower than the eager torch path at 1 thread, after 17-54 s of compilation per process;
these files compile in about 5 s of CPU time, once, with the C compiler that the Python headers
already need.

How they are built: `load()` compiles the C files with the system compiler (``$CC``, else ``cc``
or ``gcc``) into one shared library in the cache directory (``$RECALL_LAB_CACHE``, else
``$XDG_CACHE_HOME/recall-lab``, else ``~/.cache/recall-lab``), under a name that hashes the
sources, the flags, the compiler's version and this CPU's model and flags, so a changed file or a
different machine gets its own build; parallel processes (sweep workers) each build into a
temporary directory and rename the result into place. ``-ffast-math`` is used when compiling only,
never when linking: a shared library linked with it would set flush-to-zero for the whole process.

When it is not used: no compiler, a failed build, or ``RECALL_LAB_NATIVE=0`` (e.g. to reproduce a
result made before these kernels existed bit for bit). `load()` says why; every caller then takes
its torch path, and `recall-lab info` reports the reason.

Threads: every kernel splits its leading (batch) rows into `torch.get_num_threads()` contiguous
ranges on OpenMP threads. The library links libgomp.so.1, which resolves to the copy torch has
already loaded, so the kernels run on torch's own thread pool (Python threads were tried first:
at 2 threads they ran slower than 1, competing with torch's spin-waiting OpenMP workers). Each
kernel computes a row the same way whatever the split, so results are bit-identical for any
thread count.
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
from pathlib import Path

import torch
from torch import Tensor

SOURCES = tuple(Path(__file__).with_name(name)
                for name in ("ssm.c", "attention.c", "norm.c", "dplr.c"))
# hashed with the sources
HEADERS = tuple(Path(__file__).with_name(name)
                for name in ("rows.h", "fastexp.h", "dplr_impl.h"))
COMPILE_FLAGS = ("-O3", "-march=native", "-ffast-math", "-fopenmp", "-fPIC")
LINK_FLAGS = ("-shared", "-fopenmp")
ENV_SWITCH = "RECALL_LAB_NATIVE"

_P = ctypes.c_void_p
_L = ctypes.c_long
# argument types of every exported function (pointers, then sizes; see the C files)
# (each ends in rows, nt[, scratch, stride]: see FOR_RANGES in the C files)
SIGNATURES: dict[str, list] = {
    "scan_fwd": [_P] * 8 + [_L] * 6,
    "scan_bwd": [_P] * 13 + [_L] * 6 + [_P, _L],
    "ssd_fwd": [_P] * 8 + [_L] * 7 + [_P, _L],
    "ssd_bwd": [_P] * 13 + [_L] * 7 + [_P, _L],
    "s6f_fwd": [_P, _P, _L, _P, _L, _P, _P, _P, _P, _L, _P, _P, _L, _P, _P, _P] + [_L] * 5
    + [_P, _L],
    "s6f_bwd": [_P, _P, _L, _P, _L, _P, _P, _P, _P, _L, _P, _P, _L] + [_P] * 13 + [_L] * 5
    + [_P, _L],
    "conv_silu_fwd": [_P, _L, _P, _P, _P] + [_L] * 5,
    "ssdf_fwd": [_P, _L, _P, _L, _P, _P, _P, _P] + [_L] * 7 + [_P, _L],
    "ssdf_bwd": [_P, _L, _P, _L] + [_P] * 8 + [_L] * 7 + [_P, _L],
    "norm_fwd": [_P, _P, _L, _P, _P, _P, _L, _L, _L, ctypes.c_float, _L, _L],
    "norm_bwd": [_P, _P, _L] + [_P] * 6 + [_L] * 3 + [ctypes.c_float, _L, _L],
    "conv_silu_bwd": [_P, _L] + [_P] * 6 + [_L] * 5,
    "sparse_attn_fwd": [_P] * 6 + [ctypes.c_float] + [_L] * 5 + [_P, _L, _L],
    "sparse_attn_bwd": [_P] * 10 + [ctypes.c_float] + [_L] * 5 + [_P, _L, _L],
    "causal_topk": [_P, _P] + [_L] * 4,
    "union_rows": [_P] + [_L] * 4,
    "bucket_window": [_P] * 3 + [_L] * 5,
    "lsh_window": [_P] * 4 + [_L] * 15,
    "ks_scores": [_P] * 11 + [_L] * 13,
    "ks_target": [_P] * 4 + [ctypes.c_float] + [_L] * 12,
    "hax_pattern": [_P] * 10 + [ctypes.c_float] + [_P] * 4 + [_L] * 18,
    "ks_rank_fwd": [_P] * 13 + [_L] * 5,
    "ks_rank_bwd": [_P] * 8 + [ctypes.c_float] + [_P] * 6 + [_L] * 5,
    "exp_fast_array": [_P, _P, _L],
    "dplr_fwd_f32": [_P] * 9 + [_L] * 6,
    "dplr_bwd_f32": [_P] * 15 + [_L] * 6,
    "dplr_fwd_f64": [_P] * 9 + [_L] * 6,
    "dplr_bwd_f64": [_P] * 15 + [_L] * 6,
    "softplus_fast_array": [_P, _P, _L],
}
CONSTANTS = ("scan_max_state", "ssd_checkpoint", "ssd_channels_below", "dplr_checkpoint")


def sources_sha256() -> str:
    """The kernels' sources, hashed (first 12 hex digits): runs record it (train.versions), so
    a run says which kernel code trained it (the same "on" before and after a kernel changed)."""
    parts = [src.read_text() for src in SOURCES + HEADERS]
    return hashlib.sha256("\0".join(parts).encode()).hexdigest()[:12]


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
        objs = []
        for src in SOURCES:
            obj = Path(tmp) / (src.stem + ".o")
            subprocess.run([cc, *COMPILE_FLAGS, "-c", str(src), "-o", str(obj)], check=True,
                           capture_output=True, text=True)
            objs.append(str(obj))
        lib = Path(tmp) / target.name
        subprocess.run([cc, *LINK_FLAGS, *objs, "-o", str(lib), "-lm"], check=True,
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
        parts = [src.read_text() for src in SOURCES + HEADERS]
        key = hashlib.sha256("\0".join([*parts, " ".join(COMPILE_FLAGS + LINK_FLAGS), version,
                                        _cpu_signature()]).encode()).hexdigest()[:16]
        target = cache_dir() / "native" / f"recall-lab-{key}.so"
        if not target.exists():
            _build(cc, target)
        lib = ctypes.CDLL(str(target))
    except subprocess.CalledProcessError as exc:
        err = (exc.stderr or "").strip().splitlines()
        return None, f"compiling the native kernels failed: {err[0] if err else exc}"
    except OSError as exc:
        return None, f"native kernels unavailable: {exc}"
    for name, argtypes in SIGNATURES.items():
        getattr(lib, name).argtypes = argtypes
    for name in CONSTANTS:
        getattr(lib, name).restype = _L
    return lib, f"ok ({target})"


def _constant_under_compile(fn):
    """What `torch.compiler.assume_constant_result` does (it sets this one attribute; a test ties
    the two), without its import of torch._dynamo: about 2.5 s in every process that loads the
    kernels, most of them never compiling anything."""
    fn._dynamo_marked_constant = True
    return fn


# The usability checks of the fast paths call these two; under torch.compile dynamo would trace
# into `load` (file checks, a subprocess) and break the graph, so it takes them as constants.
@_constant_under_compile
def available() -> bool:
    return load()[0] is not None


def lib() -> ctypes.CDLL:
    """The loaded library; raises with the reason when there is none."""
    loaded, why = load()
    if loaded is None:
        raise RuntimeError(f"native kernels unavailable: {why}")
    return loaded


@_constant_under_compile
def constant(name: str) -> int:
    return int(getattr(lib(), name)())


def threads() -> int:
    """The thread count every kernel call passes: torch's intra-op threads."""
    return max(1, torch.get_num_threads())


def ranges(rows: int) -> int:
    """How many row ranges (and scratch buffers) a call over `rows` rows uses."""
    return max(1, min(rows, threads()))


def ptr(t: Tensor | None) -> int | None:
    return None if t is None else t.data_ptr()
