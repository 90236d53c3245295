"""The lab's CPU policy for a process that trains or evaluates: how many torch threads, and
glibc keeping freed memory. The command line (`train`, `eval`, `demo`, `finetune`) and the
Python API (`rl.train`, `rl.evaluate`) apply the same policy, so a script runs as fast as the
command it mirrors: without it, `rl.train` ran on torch's default threads and malloc, 142.6 s
against the CLI's 18.2 s for the same config on the 2-core machine."""

from __future__ import annotations

import os

import torch

from recall_lab.device import default_threads, usable_cpus
from recall_lab.generators.errors import RecallLabError
from recall_lab.ssm import retain_freed_memory


def set_threads(threads: int | None, option: str = "--threads") -> str:
    """CPU set-up of a training process: thread count, and glibc keeps freed memory (training
    steps otherwise page-fault their activations in again: 1.6-3.6x slower at B=64, L=1058).
    Without `threads`: OMP_NUM_THREADS where it is set, else `device.default_threads()` (the
    cores idle at the start). Returns how the count was chosen, for the command's header;
    `option` names the setting there (`--threads` on the command line, `threads=` in Python)."""
    retain_freed_memory()
    if threads is not None:
        if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
            raise RecallLabError(f"{option} must be an integer >= 1, got {threads!r}")
        torch.set_num_threads(threads)
        return f"{threads} torch thread{'s' if threads != 1 else ''} ({option})"
    if os.environ.get("OMP_NUM_THREADS"):
        n = torch.get_num_threads()
        return f"{n} torch thread{'s' if n != 1 else ''} (OMP_NUM_THREADS)"
    n = default_threads()
    torch.set_num_threads(n)
    return (f"{n} torch thread{'s' if n != 1 else ''} (of {len(usable_cpus())} cores, those "
            f"idle at the start; {option} sets it)")
