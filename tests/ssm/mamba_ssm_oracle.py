"""mamba-ssm as an external oracle, loaded on a CPU-only machine (test helper, not a test).

mamba-ssm is optional and never a test dependency: `load()` returns None when it (or einops) is
not installed, and the oracle tests skip. When it is installed without its CUDA extension
(MAMBA_SKIP_CUDA_BUILD=TRUE), this module makes its pure-PyTorch references and its Triton SSD
kernels usable on CPU under TRITON_INTERPRET=1:
- stubs the compiled `selective_scan_cuda` module (only its references are called),
- registers the `mamba_ssm` package without running its __init__ (which pulls huggingface_hub),
- keeps one config per Triton autotuner (autotuning needs a GPU driver to time configs),
- `cpu_cuda_shims()` makes torch.cuda.device(None) a no-op and answers get_device_properties.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import sys
import types
from collections.abc import Iterator

import torch


def load() -> types.SimpleNamespace | None:
    """The oracle functions, or None when mamba-ssm / einops / triton are not installed."""
    if any(importlib.util.find_spec(m) is None for m in ("mamba_ssm", "einops", "triton")):
        return None
    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.modules.setdefault("selective_scan_cuda", types.ModuleType("selective_scan_cuda"))
    if "mamba_ssm" not in sys.modules:
        spec = importlib.util.find_spec("mamba_ssm")
        pkg = types.ModuleType("mamba_ssm")
        pkg.__path__ = list(spec.submodule_search_locations)
        sys.modules["mamba_ssm"] = pkg
    from mamba_ssm.modules.ssd_minimal import ssd_minimal_discrete
    from mamba_ssm.ops.selective_scan_interface import selective_scan_ref
    from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined
    from triton.runtime.autotuner import Autotuner

    for name, mod in list(sys.modules.items()):
        if name.startswith("mamba_ssm.ops.triton"):
            for v in vars(mod).values():
                if isinstance(v, Autotuner):
                    v.configs = v.configs[:1]
    return types.SimpleNamespace(
        selective_scan_ref=selective_scan_ref,
        ssd_minimal_discrete=ssd_minimal_discrete,
        mamba_chunk_scan_combined=mamba_chunk_scan_combined,
    )


@contextlib.contextmanager
def cpu_cuda_shims() -> Iterator[None]:
    """Let mamba-ssm's Triton wrappers run on CPU tensors (restored on exit)."""
    device, props = torch.cuda.device, torch.cuda.get_device_properties
    torch.cuda.device = lambda *a, **k: contextlib.nullcontext()
    torch.cuda.get_device_properties = lambda *a, **k: types.SimpleNamespace(
        multi_processor_count=4
    )
    try:
        yield
    finally:
        torch.cuda.device, torch.cuda.get_device_properties = device, props
