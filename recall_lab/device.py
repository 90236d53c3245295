"""The torch device a run asks for (`train.device`): "auto", "cpu" or "cuda[:N]", checked; and
the CPU thread count a training process takes when none is given (`default_threads`)."""

from __future__ import annotations

import os
import time

import torch

from recall_lab.generators.errors import RecallLabError


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


IDLE_WINDOW_S = 0.2  # how long `idle_cores` watches the CPUs


def _cpu_ticks(cpus: set[int]) -> tuple[int, int] | None:
    """(idle, total) jiffies summed over `cpus` from /proc/stat; None without it (not Linux)."""
    try:
        with open("/proc/stat") as fh:
            lines = fh.read().splitlines()
    except OSError:
        return None
    idle = total = 0
    for line in lines:
        name, *fields = line.split()
        if not name.startswith("cpu") or name == "cpu" or int(name[3:]) not in cpus:
            continue
        ticks = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
        idle += ticks[3] + ticks[4]
        total += sum(ticks)
    return idle, total


def usable_cpus() -> set[int]:
    try:
        return set(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return set(range(os.cpu_count() or 1))


def idle_cores(window: float = IDLE_WINDOW_S) -> float | None:
    """How many of this process's CPUs sat idle over the next `window` seconds (this process
    sleeps meanwhile, so it is not counted); None where /proc/stat is missing."""
    cpus = usable_cpus()
    before = _cpu_ticks(cpus)
    if before is None:
        return None
    time.sleep(window)
    after = _cpu_ticks(cpus)
    if after is None or after[1] <= before[1]:
        return None
    return len(cpus) * (after[0] - before[0]) / (after[1] - before[1])


def default_threads(idle: float | None = None, cores: int | None = None) -> int:
    """The torch threads of a training process when --threads is not given: the CPUs found
    idle when it starts (`idle_cores`, rounded; where /proc/stat is missing, the cores less
    the 1-minute load average), at least 1 and at most the usable cores. On the lab's 2-core
    machine that is 2 when nothing else runs and 1 beside one busy process, where a second
    thread made `train` 1.8x slower (docs/performance.md, "The thread default":
    `recall-lab bench threads` measures it)."""
    cores = cores if cores is not None else len(usable_cpus())
    if idle is None:
        idle = idle_cores()
    if idle is None:
        idle = cores - os.getloadavg()[0]
    return max(1, min(cores, int(idle + 0.5)))
