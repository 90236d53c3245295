"""Optional experiment trackers beside `metrics.jsonl` (which stays the record): TensorBoard event
files and Weights & Biases, offline only (no network: W&B writes RUN/wandb/offline-run-*, which
`wandb sync` can upload later). Chosen per run with `train --log tensorboard,wandb` or
`sweep --log ...`; each needs its package (`pip install 'recall-lab[tracking]'`).

Every metrics row (`{"step", "split", ...}`) is logged as scalars `<split>/<name>` at its step;
the final summary's held-out and test metrics go to the tracker's summary.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from recall_lab.generators.errors import RecallLabError

KINDS = ("tensorboard", "wandb")


def parse_log(text: str | None) -> tuple[str, ...]:
    """'tensorboard,wandb' -> ("tensorboard", "wandb"); one clear line for an unknown name."""
    kinds = tuple(k.strip() for k in (text or "").split(",") if k.strip())
    for k in kinds:
        if k not in KINDS:
            raise RecallLabError(f"unknown --log {k!r}; choose from {', '.join(KINDS)}")
    return kinds


def _scalars(row: dict) -> dict[str, float]:
    split = row.get("split", "train")
    return {f"{split}/{k}": float(v) for k, v in row.items()
            if k not in ("step", "split") and isinstance(v, (int, float))
            and not isinstance(v, bool)}


class TensorBoard:
    def __init__(self, run: Path, config: dict) -> None:
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            raise RecallLabError("--log tensorboard needs the tensorboard package: "
                                 "pip install 'recall-lab[tracking]'") from None
        self.writer = SummaryWriter(log_dir=str(Path(run) / "tensorboard"))
        self.writer.add_text("config", f"```\n{config}\n```")

    def log(self, row: dict) -> None:
        for name, value in _scalars(row).items():
            self.writer.add_scalar(name, value, row["step"])

    def close(self, summary: dict | None) -> None:
        if summary is not None:
            for split in ("valid", "test"):
                for k, v in _scalars({"split": f"final_{split}", **summary[split]}).items():
                    self.writer.add_scalar(k, v, summary["stopped_at"])
        self.writer.close()


class WandbOffline:
    def __init__(self, run: Path, config: dict) -> None:
        try:
            import wandb
        except ImportError:
            raise RecallLabError("--log wandb needs the wandb package: "
                                 "pip install 'recall-lab[tracking]'") from None
        os.environ["WANDB_MODE"] = "offline"  # never the network, whatever the user's settings
        os.environ.setdefault("WANDB_SILENT", "true")
        self.wandb = wandb
        self.run = wandb.init(mode="offline", dir=str(run), project="recall-lab",
                              name=Path(run).name, config=config, reinit="create_new")

    def log(self, row: dict) -> None:
        self.run.log(_scalars(row), step=int(row["step"]))

    def close(self, summary: dict | None) -> None:
        if summary is not None:
            for split in ("valid", "test"):
                for k, v in _scalars({"split": split, **summary[split]}).items():
                    self.run.summary[f"final_{k}"] = v
        self.run.finish()


class Trackers:
    """The trackers of one training session (none by default)."""

    def __init__(self, kinds: tuple[str, ...], run: Path, config: dict) -> None:
        self.items: list[Any] = []
        for k in parse_log(",".join(kinds)):
            self.items.append((TensorBoard if k == "tensorboard" else WandbOffline)(run, config))

    def log(self, row: dict) -> None:
        for t in self.items:
            t.log(row)

    def close(self, summary: dict | None = None) -> None:
        for t in self.items:
            t.close(summary)
        self.items = []
