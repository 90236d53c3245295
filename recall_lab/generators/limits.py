"""What the machine can hold: sizes are checked against the memory available before anything is
allocated, so a huge count (`show --index 100000000`, `eval --n 100000000`) ends in one line
instead of a 73 GiB allocation, the OOM killer or a traceback."""

from __future__ import annotations

from pathlib import Path

from recall_lab.generators.errors import RecallLabError

# Below this an allocation is not checked (reading /proc/meminfo costs more than it saves).
CHECK_ABOVE = 256 << 20


def available_bytes() -> int | None:
    """Memory the kernel says is available (Linux `MemAvailable`), None where it cannot say."""
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def check_fits(need: int, what: str, hint: str = "ask for fewer") -> None:
    """Refuse (one line) to allocate `need` bytes for `what` when the machine has less
    available."""
    if need < CHECK_ABOVE:
        return
    have = available_bytes()
    if have is not None and need > have:
        raise RecallLabError(f"{what} need about {need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB "
                             f"available; {hint}")
