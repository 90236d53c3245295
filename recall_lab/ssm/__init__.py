"""State-space layers: selective scan (Mamba) and SSD (Mamba2), references, fast paths, mixers.

- `selective_scan_ref`, `ssd_ref`: plain recurrences (the definitions; tests compare against them).
- `selective_scan`, `ssd`: dispatch by device (`scan_backend`): mamba-ssm kernels on CUDA when
  installed; on the CPU the native C kernels (`native.py` over recall_lab/native: the S6 scan and
  SSD as its recurrence) where they built, for float32, else the torch implementations
  `selective_scan_torch` (chunked, custom backward) and `ssd_torch` (chunked state-space duality).
- `MambaMixer`, `Mamba2Mixer`: layers with a `side` hook, `return_params`, and a recurrent `step`.
- `RMSNorm` (every block's norm), `GatedRMSNorm` (Mamba2's): native CPU kernels for float32.
- `retain_freed_memory()`: process-wide glibc malloc setting that keeps large CPU steps from
  page-faulting their activations in again (see cpu_malloc.py for the measurement).
"""

from recall_lab.ssm.backend import backend_report, scan_backend, selective_scan, ssd
from recall_lab.ssm.cpu_malloc import retain_freed_memory
from recall_lab.ssm.mixers import Mamba2Mixer, MambaMixer, MixerState, SSMParams
from recall_lab.ssm.norm import GatedRMSNorm, RMSNorm
from recall_lab.ssm.reference import selective_scan_ref, ssd_ref
from recall_lab.ssm.scan import selective_scan_torch
from recall_lab.ssm.ssd import ssd_torch

__all__ = [
    "GatedRMSNorm",
    "Mamba2Mixer",
    "MambaMixer",
    "MixerState",
    "RMSNorm",
    "SSMParams",
    "backend_report",
    "retain_freed_memory",
    "scan_backend",
    "selective_scan",
    "selective_scan_ref",
    "selective_scan_torch",
    "ssd",
    "ssd_ref",
    "ssd_torch",
]
