"""Compare the runs of a sweep or placement with archived runs of the same config hash.

    python scripts/compare_to_archive.py RUNS_DIR ARCHIVE_DIR [ARCHIVE_DIR ...]

Each finished run under RUNS_DIR (any depth) is matched by the hash at the end of its folder
name with an archived run; for each pair it reports whether `metrics.jsonl` is byte-identical,
whether the held-out accuracy curve is identical, and whether the solved outcome (test accuracy
>= 0.95) and the stopping step agree. Prints one line per differing run and a summary; exits 0.
Bit-identical training needs the same CPU model as the archive (floating-point kernels differ
between instruction sets), so the summary names this machine's CPU.
"""

from __future__ import annotations

import json
import platform
import sys
from pathlib import Path

SOLVE_AT = 0.95


def runs(root: Path) -> dict[str, Path]:
    return {p.parent.name.rsplit("-", 1)[-1]: p.parent for p in root.rglob("summary.json")}


def curve(folder: Path) -> list[tuple]:
    rows = [json.loads(line) for line in (folder / "metrics.jsonl").read_text().splitlines()]
    return [(r.get("step"), r.get("acc")) for r in rows if r.get("split") == "valid"]


def cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.strip().splitlines()[2].strip(), file=sys.stderr)
        return 2
    mine = runs(Path(argv[0]))
    archive: dict[str, Path] = {}
    for a in argv[1:]:
        archive.update(runs(Path(a)))
    counts = {"pairs": 0, "identical": 0, "same curve": 0, "same outcome": 0, "same stop": 0}
    for h, folder in sorted(mine.items()):
        if h not in archive:
            print(f"{folder.name}: no archived run with hash {h}")
            continue
        ref = archive[h]
        a, b = (json.loads((f / "summary.json").read_text()) for f in (folder, ref))
        counts["pairs"] += 1
        same_bytes = (folder / "metrics.jsonl").read_bytes() == (ref / "metrics.jsonl").read_bytes()
        same_curve = curve(folder) == curve(ref)
        outcome = (a["test"]["acc"] >= SOLVE_AT) == (b["test"]["acc"] >= SOLVE_AT)
        stop = a.get("stopped_at") == b.get("stopped_at")
        for key, ok in (("identical", same_bytes), ("same curve", same_curve),
                        ("same outcome", outcome), ("same stop", stop)):
            counts[key] += ok
        if not same_bytes:
            print(f"{folder.name}: test acc {a['test']['acc']:.4f} "
                  f"(archive {b['test']['acc']:.4f}), stopped at {a.get('stopped_at')} "
                  f"({b.get('stopped_at')}); held-out curve "
                  f"{'identical' if same_curve else 'differs'}")
    print(f"{counts['pairs']} runs matched by hash on {cpu()}: metrics byte-identical "
          f"{counts['identical']}, held-out accuracy curve identical {counts['same curve']}, "
          f"same solved outcome {counts['same outcome']}, same stopping step {counts['same stop']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
