"""A tiny reference for `place`'s tests: an experiment of 2 tables (2 and 3 key-value pairs, 4
values, a 16-wide model, 6 steps), 8 seeds, three rows (attention, GLA with 4 heads and with 1
head: two fixed states), and run records written by hand with chosen outcomes (no training):
`outcomes[row][table]` is the number of seeds solved."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from torch import nn

from recall_lab.experiments.grid import expand

EXPERIMENT = '''name = "tiny-frontier"
[model]
d_model = 16
[train]
steps = 6
batch_size = 4
eval_every = 3
eval_samples = 8
test_samples = 8
warmup = 2
device = "cpu"
[task]
levels = [[2, 2]]
values = 4
[[link]]
"task.levels" = [[[2, 2]], [[3, 3]]]
"train.steps" = [6, 6]
[grid]
"train.seed" = [0, 1, 2, 3, 4, 5, 6, 7]
[[link]]
"model" = [{ name = "transformer" }, { name = "gla", mixer_kwargs = { num_heads = 4 } },
           { name = "gla", mixer_kwargs = { num_heads = 1 } }]
"train.lr" = [3e-3, 3e-3, 3e-3]
[report]
solve_at = 0.9
'''

PLACE = '''experiment = "tiny-frontier.toml"
level = 0.05
[pilot]
"task.levels" = [[3, 3]]
lrs = [3e-3]
seed = 30
tie = 0.01
'''

ROWS = ("transformer", "gla / num_heads=4", "gla / num_heads=1")


def make_reference(folder: Path, outcomes: dict[str, dict[float, int]] | None = None,
                   place: str = PLACE) -> Path:
    """The tiny reference in `folder` (created): place.toml, the experiment file, sweep.json and
    one folder per run with config.json and summary.json."""
    import tomllib

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny-frontier.toml").write_text(EXPERIMENT)
    (folder / "place.toml").write_text(place)
    exp = expand(tomllib.loads(EXPERIMENT), "tiny-frontier")
    outcomes = outcomes or {r: {2.0: 8, 3.0: 0} for r in ROWS}
    entries = []
    for run in exp.runs:
        cfg = run.config.to_json()
        m = cfg["model"]
        row = ("transformer" if m["name"] == "transformer"
               else f"gla / num_heads={m['mixer_kwargs']['num_heads']}")
        size = float(cfg["task"]["levels"][0][1])
        acc = 1.0 if cfg["train"]["seed"] < outcomes[row][size] else 0.3
        (folder / run.name).mkdir()
        (folder / run.name / "config.json").write_text(json.dumps(cfg))
        (folder / run.name / "summary.json").write_text(json.dumps(
            {"steps": 6, "stopped_at": 6, "best_step": 6, "valid": {"acc": acc},
             "test": {"acc": acc}, "wall_s_this_session": 1.0}))
        entries.append({"name": run.name, "hash": run.hash, "values": run.values,
                        "status": "done", "config": cfg})
    (folder / "sweep.json").write_text(json.dumps({"experiment": exp.name, "runs": entries}))
    return folder


class Peek(nn.Module):
    """A mixer whose output i reads input i + 1: it fails `check`'s causality row."""

    def __init__(self, d_model: int, layer_idx: int | None = None) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        ahead = torch.cat([x[:, 1:], torch.zeros_like(x[:, :1])], dim=1)
        return self.proj(x + ahead)
