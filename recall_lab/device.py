"""The torch device a run asks for (`train.device`): "auto", "cpu" or "cuda[:N]", checked."""

from __future__ import annotations

import torch

from generators.errors import RecallLabError


def resolve_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError:
        raise RecallLabError(f"unknown device {device!r}; use auto, cpu or cuda[:N]") from None
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise RecallLabError(f"device {device!r} requested but CUDA is not available")
    if dev.type not in ("cpu", "cuda"):
        raise RecallLabError(f"unsupported device {device!r}; use auto, cpu or cuda[:N]")
    return dev
