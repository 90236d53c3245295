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

# The same rows on whole task tables, as the overwrite reference has them: forgetting MQAR at 2
# live keys with 1 and with 2 updates (3 and 4 writes), sized by place.toml's [tables].
_FORGET = ('{{ generator = "forgetting-mqar", kwargs = {{ vocab_size = 32, input_seq_len = {}, '
           'num_kv_pairs = 2, num_updates = {}, random_non_queries = false }} }}')
TASK_EXPERIMENT = EXPERIMENT.replace('''[task]
levels = [[2, 2]]
values = 4
[[link]]
"task.levels" = [[[2, 2]], [[3, 3]]]
"train.steps" = [6, 6]''', f'''[[link]]
"task" = [{_FORGET.format(10, 1)}, {_FORGET.format(12, 2)}]
"train.steps" = [6, 6]''')

TASK_PLACE = '''experiment = "tiny-frontier.toml"
level = 0.05
[tables]
sizes = [3, 4]
names = ["2 live, 3 written", "2 live, 4 written"]
[pilot]
table = 4
lrs = [3e-3]
seed = 30
tie = 0.01
'''


def _size(task: dict) -> float:
    """A run's table size in either tiny reference: its pairs, or its writes."""
    if task.get("generator"):
        return float(task["kwargs"]["num_kv_pairs"] + task["kwargs"]["num_updates"])
    return float(task["levels"][0][1])


def make_reference(folder: Path, outcomes: dict[str, dict[float, int]] | None = None,
                   place: str = PLACE, experiment: str = EXPERIMENT) -> Path:
    """The tiny reference in `folder` (created): place.toml, the experiment file, sweep.json and
    one folder per run with config.json and summary.json (`experiment`: TASK_EXPERIMENT for
    the whole-task tables, with TASK_PLACE; outcomes then keyed by 3.0 and 4.0)."""
    import tomllib

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tiny-frontier.toml").write_text(experiment)
    (folder / "place.toml").write_text(place)
    exp = expand(tomllib.loads(experiment), "tiny-frontier")
    sizes = sorted({_size(r.config.to_json()["task"]) for r in exp.runs})
    outcomes = outcomes or {r: {sizes[0]: 8, sizes[1]: 0} for r in ROWS}
    entries = []
    for run in exp.runs:
        cfg = run.config.to_json()
        m = cfg["model"]
        row = ("transformer" if m["name"] == "transformer"
               else f"gla / num_heads={m['mixer_kwargs']['num_heads']}")
        size = _size(cfg["task"])
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


def mine_records(protocol, mixer: str, kwargs: dict, outcomes: dict[float, tuple[int, int]],
                 seeds: int = 8) -> list:
    """A placed mixer's runs at every table of `protocol`, built by hand: per table (seeds
    solved, seeds done), the first seeds done; the rest not run."""
    from recall_lab.experiments import place as pl

    sizes = [t.size for t in protocol.tables]
    exp = pl.cells_experiment(protocol, pl.mixer_table(mixer, kwargs), sizes,
                              list(range(seeds)), 3e-3)
    out = []
    for r in pl.records(exp, Path("/nonexistent")):
        solved, done = outcomes.get(protocol.size_of(r.config), (0, 0))
        seed = r.config["train.seed"]
        if seed < done:
            acc = 1.0 if seed < solved else 0.3
            r.status, r.summary = "done", {"valid": {"acc": acc}, "test": {"acc": acc},
                                           "steps": 6, "stopped_at": 6, "best_step": 6}
        out.append(r)
    return out
