"""A report group's state per layer in numbers, under the lab's one convention
(`models/state.py` `state_count`, the count `recall-lab models` shows): the **recurrent state**
(what carries information across the sequence, as zoology counts it) for one sequence at the
run's length (`model.max_len`, fixed from its training task), divided by `model.n_layers`; the
**convolution caches** (kernel - 1 columns per channel) apart, in `conv`. Figures against state
plot the recurrent state; tables show both.

`numbers` is None where the state grows with the sequence (attention's KV cache, a mixer whose
declared `state_size` changes with the length, Attamba's chunk ends; `growth` says how) or
cannot be known (a mixer with neither `step` nor `state_size`, a run without its config, a
model that cannot be built here: growth None). `source` says where the count comes from:
"measured" (the decode cache), "declared" (a mixer's own `state_size`), "grows with L" or
"unknown". A state that grows as log L (log-linear attention's Fenwick levels) has a count: the
one at the run's length, `length` beside it, growth "log L". Where the layers' counts differ
(Based: a sliding-window layer and a Taylor layer), `numbers` is their mean (the figures' x and
the neighbour order read it) and `layers` holds each layer's count: the text gives those, never
the mean as if one layer held it.

The model is rebuilt from the run's config as written (config.json / the sweep index) by the run
layer, on the CPU, without weights; once per distinct model and task. This module loads torch
with the models (the report already has it through `checkpoint`); `import recall_lab` stays
torch-free because nothing above the experiments layer imports it."""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass

import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.models.registry import build_model
from recall_lab.models.state import state_count
from recall_lab.runs import run_config_from_json


@dataclass(frozen=True)
class LayerState:
    numbers: float | None  # recurrent state per layer; None: grows with the sequence, or unknown
    growth: str | None  # "constant", "log L", "L/P" or "L"; None: unknown
    conv: float | None = None  # convolution caches per layer (None where numbers is)
    source: str = "unknown"  # models/state.py SOURCES
    length: int | None = None  # the length a "log L" count is taken at (None otherwise)
    layers: tuple[float, ...] | None = None  # each layer's count where they differ, else None

    @property
    def grows(self) -> bool:
        """A state that grows with the sequence and has no count (attention's KV cache): drawn
        as a line and compared with the other growing rows. A "log L" state has its count at
        the run's length (`numbers`, `length`), compared and drawn as a fixed count there."""
        return self.growth is not None and self.growth not in ("constant", "log L")

    def text(self) -> str:
        """The state per layer as every table shows it: "1,056"; "384 (layer 1) / 2,925
        (layer 2)" where the layers differ (each layer's count, not their mean); "576 at 130
        tokens (log L)" for a count that grows as log L (always with its length); "grows as L";
        or "-" when unknown."""
        if self.numbers is not None:
            at = f" at {self.length} tokens (log L)" if self.growth == "log L" else ""
            count = (" / ".join(f"{_number(n)} (layer {i})" for i, n in
                                enumerate(self.layers, 1)) if self.layers
                     else _number(self.numbers))
            return count + at + (" (declared)" if self.source == "declared" else "")
        return f"grows as {self.growth}" if self.grows else "-"

    def conv_text(self) -> str:
        """The convolution caches' cell: "390", or "-" where the state is not fixed."""
        return "-" if self.conv is None else _number(self.conv)


def _number(n: float) -> str:
    return f"{n:,.0f}" if n == int(n) else f"{n:,.1f}"


UNKNOWN = LayerState(None, None)
# (model table, task table, task name) as written -> its state: a report over a thousand runs
# builds each distinct model once
_CACHE: dict[str, LayerState] = {}


def run_state(tables: dict | None, where: str = "run config") -> LayerState:
    """The state per layer of one run, from its config's tables (config.json's content)."""
    if not isinstance(tables, dict) or not isinstance(tables.get("model"), dict):
        return UNKNOWN
    # the task counts: it fixes the model's max_len (the length the state is counted at) and
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
            count = state_count(model, cfg.max_len or 2048)
    except RecallLabError:  # e.g. a plug-in mixer not installed here: the report goes on
        return UNKNOWN
    n = cfg.n_layers
    if count.recurrent is None:
        return LayerState(None, count.growth, None, count.source)
    layers = (count.layers if count.layers and len(count.layers) == n
              and len(set(count.layers)) > 1 else None)
    return LayerState(count.recurrent.numbers / n, count.growth,
                      None if count.conv is None else count.conv.numbers / n, count.source,
                      count.sequence_length if count.growth == "log L" else None,
                      None if layers is None else tuple(float(x) for x in layers))


def common_state(configs: Iterable[dict | None]) -> LayerState:
    """A group's state: its runs' (they share it unless the group was formed by fewer fields
    than vary, e.g. `--by model.name` over several d_states: then unknown)."""
    found = {run_state(c) for c in configs}
    return found.pop() if len(found) == 1 else UNKNOWN
