"""Held-out overlap of a sweep: how many of each group's valid and test samples also occur in its
runs' training samples (`summary.json`'s `held_out_in_training`, measured by `train`: a task with
few distinct samples repeats them), so `sweep` can say it beside its counts and `report` in a
column. A group is the runs that differ only in seed or learning rate; its overlap is its largest
run's."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

# Above this share of held-out samples seen in training, a group's accuracy rests partly on
# memorised rows: `sweep` prints a warning.
WARN_ABOVE = 0.01
# axes that do not make a group of their own (seeds and learning rates, as the report's groups)
NOT_A_GROUP = ("train.seed", "train.data_seed", "train.lr")


def combine(summaries: Iterable[dict | None]) -> dict | None:
    """One group's overlap from its runs' summaries: {"valid", "test", "rows"} (the largest
    shares, the fewest training rows checked); None when no run recorded it."""
    out: dict | None = None
    for summary in summaries:
        seen = summary.get("held_out_in_training") if isinstance(summary, dict) else None
        if not isinstance(seen, dict):
            continue
        out = out or {"valid": 0.0, "test": 0.0, "rows": None}
        out["valid"] = max(out["valid"], float(seen.get("valid", 0.0)))
        out["test"] = max(out["test"], float(seen.get("test", 0.0)))
        rows = seen.get("train_rows_checked")
        if isinstance(rows, int):
            out["rows"] = rows if out["rows"] is None else min(out["rows"], rows)
    return out


def text(seen: dict | None) -> str:
    """A group's overlap in a table cell: valid / test shares, or "not recorded"."""
    return "not recorded" if seen is None else f"{seen['valid']:.1%} / {seen['test']:.1%}"


def checked_text(groups) -> str:
    """What the overlap was checked against (`stream_overlap` checks only the first ~16,384
    training samples a streamed run draws; a fixed set, all its rows): the fewest training
    samples any group's runs checked, or that the runs did not record it."""
    rows = [g.overlap["rows"] for g in groups
            if g.overlap is not None and g.overlap.get("rows") is not None]
    return (f"checked against the first {min(rows):,} training samples of each run (the fewest "
            "any run checked)" if rows else "training samples checked: not recorded")


def high(seen: dict | None) -> bool:
    return seen is not None and max(seen["valid"], seen["test"]) > WARN_ABOVE


def warning_lines(groups: list[tuple[str, dict | None]]) -> list[str]:
    """What `report` prints above its tables: one line per group whose overlap is above
    WARN_ABOVE, and what it means; nothing when none is."""
    lines = [f"warning: held-out overlap {label}: valid {seen['valid']:.1%}, test "
             f"{seen['test']:.1%} also occur in training"
             + (f" (first {seen['rows']:,} training samples checked)" if seen.get("rows") else "")
             for label, seen in groups if seen is not None and high(seen)]
    if lines:
        lines.append(f"above {WARN_ABOVE:.0%}, held-out accuracy includes memorised samples (a "
                     "task with few distinct samples)")
    return lines


def group_overlaps(sweep_dir: Path, runs: list[dict]) -> list[dict]:
    """One entry per group of finished runs that recorded their overlap: {"group", "valid",
    "test", "rows"} (largest shares over the group's runs; fewest training rows checked)."""
    summaries: dict[str, list[dict]] = {}
    for entry in runs:
        if entry.get("status") != "done":
            continue
        try:
            summary = json.loads((Path(sweep_dir) / entry["name"] / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        values = entry.get("values") or {}
        label = " / ".join(str(v) if k == "model.name" else f"{k.rsplit('.', 1)[-1]}={v}"
                           for k, v in values.items() if k not in NOT_A_GROUP) or "all runs"
        summaries.setdefault(label, []).append(summary)
    return [{"group": label, **seen} for label, ss in summaries.items()
            if (seen := combine(ss)) is not None]


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
