"""A report group's state per layer in numbers: the count `recall-lab models` shows in its
"state" column (`models/decode.py` `state_numbers`: a contract mixer's own `state_size`, else
the numbers of the decode cache after one step, i.e. the recurrent state, the short
convolutions' windows and a branch's key/value slots), for one sequence at the run's length
(`model.max_len`, fixed from its training task), divided by `model.n_layers`.

None where the state grows with the sequence (`state_growth` is not "constant": attention's KV
cache, a mixer without `step`, Attamba's chunk ends; `growth` says how) or cannot be known (a run
without its config, a model that cannot be built here: growth None).

The model is rebuilt from the run's config as written (config.json / the sweep index) by the run
layer, on the CPU, without weights; once per distinct model and task. This module loads torch
with the models (the report already has it through `checkpoint`); `import recall_lab` stays
torch-free because nothing above the experiments layer imports it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from generators.errors import RecallLabError
from recall_lab.models.decode import state_growth, state_numbers
from recall_lab.models.registry import build_model
from recall_lab.runs import run_config_from_json


@dataclass(frozen=True)
class LayerState:
    numbers: float | None  # per layer; None: grows with the sequence, or unknown
    growth: str | None  # "constant", "L/P" or "L"; None: unknown

    @property
    def grows(self) -> bool:
        return self.growth is not None and self.growth != "constant"

    def text(self) -> str:
        """report.md's cell: "1,056" (a fraction where layers differ: the mean over them),
        "grows as L", or "-" when unknown."""
        if self.numbers is not None:
            n = self.numbers
            return f"{n:,.0f}" if n == int(n) else f"{n:,.1f}"
        return f"grows as {self.growth}" if self.grows else "-"


UNKNOWN = LayerState(None, None)
# (model table, task table, task name) as written -> its state: a report over a thousand runs
# builds each distinct model once
_CACHE: dict[str, LayerState] = {}


def run_state(tables: dict | None, where: str = "run config") -> LayerState:
    """The state per layer of one run, from its config's tables (config.json's content)."""
    if not isinstance(tables, dict) or not isinstance(tables.get("model"), dict):
        return UNKNOWN
    # the task counts: it fixes the model's max_len (the length state_numbers is taken at) and
    # the key ids of the key patterns
    key = json.dumps([tables.get("model"), tables.get("task"), tables.get("task_name")],
                     sort_keys=True, default=str)
    if key not in _CACHE:
        _CACHE[key] = _measure(tables, where)
    return _CACHE[key]


def _measure(tables: dict, where: str) -> LayerState:
    try:
        cfg = run_config_from_json(tables, where).model
        # building initialises weights from torch's global generator: the report draws nothing
        # from it, so that a notebook's training after a report is seeded as without one
        with torch.random.fork_rng(devices=[]):
            model = build_model(cfg)
            growth = state_growth(model)
            # a mixer's state_size counts even where it grows ("N at L=..." in `recall-lab
            # models`): a number at one length is no fixed state
            numbers = state_numbers(model, cfg.max_len or 2048) if growth == "constant" else None
    except RecallLabError:  # e.g. a plug-in mixer not installed here: the report goes on
        return UNKNOWN
    return LayerState(None if numbers is None else numbers / cfg.n_layers, growth)


def common_state(configs: Iterable[dict | None]) -> LayerState:
    """A group's state: its runs' (they share it unless the group was formed by fewer fields
    than vary, e.g. `--by model.name` over several d_states: then unknown)."""
    found = {run_state(c) for c in configs}
    return found.pop() if len(found) == 1 else UNKNOWN
