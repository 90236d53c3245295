"""Held-out overlap of a sweep: how many of each group's valid and test samples also occur in its
runs' training samples (`summary.json`'s `held_out_in_training`, measured by `train`: a task with
few distinct samples repeats them), so `sweep` can say it beside its counts. A group is the runs
that differ only in seed or learning rate; its overlap is its largest run's."""

from __future__ import annotations

import json
from pathlib import Path

# Above this share of held-out samples seen in training, a group's accuracy rests partly on
# memorised rows: `sweep` prints a warning.
WARN_ABOVE = 0.01
# axes that do not make a group of their own (seeds and learning rates, as the report's groups)
NOT_A_GROUP = ("train.seed", "train.data_seed", "train.lr")


def group_overlaps(sweep_dir: Path, runs: list[dict]) -> list[dict]:
    """One entry per group of finished runs that recorded their overlap: {"group", "valid",
    "test", "rows"} (largest shares over the group's runs; fewest training rows checked)."""
    groups: dict[str, dict] = {}
    for entry in runs:
        if entry.get("status") != "done":
            continue
        try:
            summary = json.loads((Path(sweep_dir) / entry["name"] / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        seen = summary.get("held_out_in_training") if isinstance(summary, dict) else None
        if not isinstance(seen, dict):
            continue
        values = entry.get("values") or {}
        label = " / ".join(str(v) if k == "model.name" else f"{k.rsplit('.', 1)[-1]}={v}"
                           for k, v in values.items() if k not in NOT_A_GROUP) or "all runs"
        g = groups.setdefault(label, {"group": label, "valid": 0.0, "test": 0.0, "rows": None})
        g["valid"] = max(g["valid"], float(seen.get("valid", 0.0)))
        g["test"] = max(g["test"], float(seen.get("test", 0.0)))
        rows = seen.get("train_rows_checked")
        if isinstance(rows, int):
            g["rows"] = rows if g["rows"] is None else min(g["rows"], rows)
    return list(groups.values())


def overlap_lines(groups: list[dict]) -> list[str]:
    """What `sweep` prints after its counts: one line when no group overlaps, else one line per
    group (a warning above WARN_ABOVE) and what a warning means."""
    if not groups:
        return []
    rows = min((g["rows"] for g in groups if g["rows"] is not None), default=None)
    checked = f" (first {rows:,} training samples checked)" if rows is not None else ""
    if all(g["valid"] == 0 and g["test"] == 0 for g in groups):
        return [f"held-out overlap: none of the valid or test samples occur in training, in "
                f"every group{checked}"]
    lines = []
    warned = False
    for g in groups:
        high = max(g["valid"], g["test"]) > WARN_ABOVE
        warned |= high
        lines.append(f"{'warning: ' if high else ''}held-out overlap {g['group']}: valid "
                     f"{g['valid']:.1%}, test {g['test']:.1%} also occur in training")
    if warned:
        lines.append(f"above {WARN_ABOVE:.0%}, held-out accuracy includes memorised samples (a "
                     f"task with few distinct samples){checked}")
    return lines
