"""What `recall-lab info` reports: package versions, the device, and the compute backends the
scans and the sparse-attention op will use here."""

from __future__ import annotations

import importlib.metadata as md
import platform

import torch

from recall_lab import kernel_check, ssm
from recall_lab.attention import default_backend
from recall_lab.attention.sparse import check_triton
from recall_lab.mixers import fla_kernels
from recall_lab.ssm import backend
from recall_lab.version import __version__


def kernel_status(report: object) -> str:
    """The mamba-ssm kernels' status as words: `{kernel: "ok" or the error}` becomes "ok
    (selective_scan, ssd)" or "unavailable (selective_scan, ssd): No module named ..." (kernels
    that fail alike are named together), never a Python dict."""
    if not isinstance(report, dict):
        return str(report)
    by_status: dict[str, list[str]] = {}
    for kernel, status in report.items():
        by_status.setdefault(str(status), []).append(str(kernel))
    parts = []
    for status, kernels in by_status.items():
        names = ", ".join(kernels)
        if status in ("ok", "True", "available"):
            parts.append(f"ok ({names})")
        else:
            parts.append(f"unavailable ({names}): {status.split(': ', 1)[-1]}")
    return "; ".join(parts)


def environment_rows() -> list[tuple[str, str]]:
    """(item, value) rows of `recall-lab info`: versions, the device, the backends in use."""

    def version(pkg: str) -> str:
        try:
            return md.version(pkg)
        except md.PackageNotFoundError:
            return "not installed"

    rows = [("recall-lab", __version__), ("python", platform.python_version()),
            ("torch", torch.__version__), ("triton", version("triton")),
            ("mamba-ssm", version("mamba-ssm")),
            ("flash-linear-attention", version("flash-linear-attention"))]
    if torch.cuda.is_available():
        dev = f"cuda: {torch.cuda.get_device_name(0)} (bf16 autocast: " \
              f"{torch.cuda.is_bf16_supported()})"
    else:
        threads = torch.get_num_threads()
        dev = f"cpu ({threads} thread{'s' if threads != 1 else ''}), fp32"
    rows.append(("device", dev))
    try:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        rows.append(("ssm scan backend", f"{ssm.scan_backend(dev, 'selective_scan')} (Mamba), "
                     f"{ssm.scan_backend(dev, 'ssd')} (Mamba2)"))
        rows.append(("native cpu kernels", ssm.backend_report()["native"]))
        if torch.cuda.is_available() or version("mamba-ssm") != "not installed":
            rows.append(("mamba-ssm kernels",
                         kernel_status(ssm.backend_report().get("mamba_ssm"))))
    except ImportError as exc:
        rows.append(("ssm scan backend", f"unavailable ({exc})"))
    try:
        dev = "cuda" if torch.cuda.is_available() else "cpu"
        rows.append(("attention backend", f"{default_backend(dev)} ({dev})"))
    except ImportError as exc:
        rows.append(("attention backend", f"unavailable ({exc})"))
    rows.append(("zoo mixers (chunked)", fla_kernels.describe(torch.cuda.is_available())))
    return rows + self_check_rows()


def self_check_rows() -> list[tuple[str, str]]:
    """The GPU kernels' first-call self-checks (recall_lab/kernel_check.py): run here on CUDA, as
    the first dispatch would, so `info` says whether each kernel is trusted."""
    if torch.cuda.is_available():
        if default_backend("cuda") == "triton":
            check_triton("cuda")
        for op in backend.OPS:
            if backend.scan_backend("cuda", op) in (backend.MAMBA_SCAN, backend.MAMBA_SSD):
                backend.check_mamba(op, "cuda")
    rows = kernel_check.describe()
    if not rows:
        why = "no GPU kernel in use" if torch.cuda.is_available() else "no CUDA device"
        rows = [("GPU kernel self-checks", f"none run ({why})")]
    return rows
