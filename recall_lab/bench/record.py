"""The one benchmark result format: machine description and per-case timing summaries.

`recall-lab bench ... --json FILE` writes `{"machine": machine_info(peers), "<bench>": {...}}`;
every timed case carries `summarise(times)` of its per-repetition wall times (median, 20th and
80th percentiles, repetitions: the figures FLA's benchmarks report). The load average goes into
the machine record because on a shared machine it says how far absolute figures can be trusted.
"""

from __future__ import annotations

import importlib.metadata
import os
import platform
import time
from collections.abc import Callable, Iterable, Sequence

import numpy as np


def summarise(times: Sequence[float]) -> dict:
    """Median, 20th and 80th percentile (numpy's linear interpolation) of per-repetition times,
    and the number of repetitions."""
    t = np.asarray(list(times), dtype=np.float64)
    if t.size == 0:
        raise ValueError("no repetitions to summarise")
    p20, med, p80 = np.percentile(t, [20, 50, 80])
    return {"median": float(med), "p20": float(p20), "p80": float(p80), "reps": int(t.size)}


def time_reps(fn: Callable[[], object], reps: int, warmup: int = 0) -> list[float]:
    """Wall time (s) of each of `reps` calls of `fn`, after `warmup` untimed calls."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def cpu_model() -> str:
    """The CPU's model name from /proc/cpuinfo (Linux), else what `platform` knows."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.lower().startswith(("model name", "hardware", "cpu model")):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown"


def package_version(name: str) -> str | None:
    """Installed version of distribution `name`, None when it is not installed."""
    try:
        return importlib.metadata.version(name)
    except importlib.metadata.PackageNotFoundError:
        return None


def machine_info(peers: Iterable[str] = ()) -> dict:
    """CPU model, cores, torch threads and version, device, Python, numpy/pyarrow, load average
    (1, 5, 15 min) and the versions of the peer packages the benches compare against (None where
    a peer is not installed)."""
    import torch

    try:
        usable = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        usable = os.cpu_count()
    cuda = torch.cuda.is_available()
    return {
        "cpu_model": cpu_model(),
        "cpu_cores": os.cpu_count(),
        "cpu_cores_usable": usable,
        "torch_threads": torch.get_num_threads(),
        "torch": torch.__version__,
        "device": torch.cuda.get_device_name(0) if cuda else "cpu",
        "python": platform.python_version(),
        "numpy": np.__version__,
        "pyarrow": package_version("pyarrow"),
        "platform": platform.platform(),
        "loadavg": list(os.getloadavg()),
        "peers": {name: package_version(name) for name in sorted(set(peers))},
    }
