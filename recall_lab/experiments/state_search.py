"""The kwargs that give a mixer a target state per layer (`recall-lab state MIXER --target N`):
which `--kwargs` to place it with at a chosen state, without working a formula out by hand.

The count is `place`'s own: the mixer's model table in the reference's protocol (by default the
zoo-frontier's: d_model 64, 2 layers) at the reference's longest table, measured as every report
and placement measures it (`state.run_state`: the recurrent state per layer, in numbers; a
count that grows as log L at that table's length). Where the layers' counts differ (Based's
window and Taylor layers) the number compared is the one `place` orders its neighbours by (their
mean), and the text gives each layer's count.

The search: each keyword argument of the mixer's class with a number for its default
(`d_model` and `layer_idx` aside, and those given with `--kwargs`, which stay fixed) is tried
alone at 1, 2, 4, ..., 64 (an integer) or 0.125, 0.25, ..., 2 (a float), beside its default; the
arguments that change the count ("relevant": chunk sizes and conv widths do not) are then tried
together, the two that move it most over every pair of their values, the others alone. Kwargs
the class refuses are left out. What is not tried is not found: a count reached only through a
value outside these lists, or three arguments changed at once, is not listed.
"""

from __future__ import annotations

import inspect
import itertools
import json
from dataclasses import dataclass
from pathlib import Path

from recall_lab.experiments.place import cells_experiment, mixer_table
from recall_lab.experiments.reference import open_reference, read_protocol
from recall_lab.experiments.state import LayerState, run_state
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import load_mixer_class
from recall_lab.mixers.registry import resolve_mixer
from recall_lab.models.registry import is_builtin_model
from recall_lab.testing import resolve_target

INTS = (1, 2, 4, 8, 16, 32, 64)
FLOATS = (0.125, 0.25, 0.5, 1.0, 2.0)
SKIP = ("d_model", "layer_idx")
SHOWN = 8  # exact matches listed


@dataclass(frozen=True)
class Option:
    """One set of kwargs and the state per layer it gives."""

    kwargs: dict
    state: LayerState
    changed: int  # kwargs that differ from the class's defaults (fewest first)

    @property
    def flag(self) -> str:
        return f"--kwargs '{json.dumps(self.kwargs, sort_keys=True)}'"


def _numeric_params(cls: type, fixed: dict) -> dict[str, int | float]:
    """The class's keyword arguments with a number for default, less `SKIP` and `fixed`."""
    out: dict[str, int | float] = {}
    for name, p in inspect.signature(cls.__init__).parameters.items():
        d = p.default
        if name in SKIP or name in fixed or isinstance(d, bool):
            continue
        if isinstance(d, (int, float)):
            out[name] = d
    return out


def _values(default: int | float) -> list[int | float]:
    grid = INTS if isinstance(default, int) else FLOATS
    return sorted({*grid, default})


def search(mixer: str, target: float, kwargs: dict | None = None,
           reference: str | Path | None = None) -> dict:
    """The kwargs of `mixer` (a zoo mixer, a plug-in's name or an import path) that give
    `target` numbers of recurrent state per layer, or the nearest below and above. Returns
    {"mixer", "target", "d_model", "tokens", "reference", "exact": [Option], "below", "above",
    "smallest" (Option or None), "searched": {name: [values]}, "tried"}. One RecallLabError
    line for a built-in model, a mixer whose state grows with the sequence, or a target below
    every count found (it names the smallest)."""
    if target <= 0:
        raise RecallLabError(f"--target must be a positive number of state per layer, got "
                             f"{target:g}")
    if is_builtin_model(mixer):
        raise RecallLabError(f"{mixer} is a built-in model, not a mixer: its state follows its "
                             "model fields (d_state, expand; `recall-lab models`); state "
                             "--target searches a mixer's kwargs")
    fixed = dict(kwargs or {})
    resolve_target(mixer, fixed or None)  # an unknown mixer or a refused kwarg: one line here
    cls = load_mixer_class(resolve_mixer(mixer))
    with open_reference(reference) as folder:
        protocol = read_protocol(folder)
    size = max(t.size for t in protocol.tables)
    defaults = _numeric_params(cls, fixed)
    counted: dict[str, LayerState | None] = {}

    def run_of(kw: dict):
        return cells_experiment(protocol, mixer_table(mixer, kw), [size], [0],
                                protocol.pilot["lrs"][0]).runs[0]

    def count(kw: dict) -> LayerState | None:
        """The state per layer `kw` gives; None where the class refuses it."""
        key = json.dumps(kw, sort_keys=True)
        if key not in counted:
            try:
                st = run_state(run_of(kw).config.to_json())
            except Exception:  # noqa: BLE001 - a value the class refuses: not an option
                st = None
            # run_state reads a model that does not build as unknown (no count, no growth)
            counted[key] = None if st is None or (st.numbers is None and not st.growth) else st
        return counted[key]

    base = count(fixed)
    if base is not None and base.numbers is None:
        raise RecallLabError(f"{mixer}'s state {base.text()}: no kwargs give it a fixed count")
    moves: dict[str, set] = {}
    for name, default in defaults.items():
        seen = {s.numbers for v in _values(default)
                if (s := count({**fixed, name: v})) is not None and s.numbers is not None}
        if len(seen) > 1:
            moves[name] = seen
    relevant = sorted(moves, key=lambda n: (-len(moves[n]), n))
    tries: list[dict] = [fixed]
    tries += [{**fixed, n: v} for n in relevant for v in _values(defaults[n])]
    if len(relevant) >= 2:
        a, b = relevant[:2]
        tries += [{**fixed, a: x, b: y} for x, y in
                  itertools.product(_values(defaults[a]), _values(defaults[b]))]
    options: dict[str, Option] = {}
    for kw in tries:
        # a value equal to the default is left out of the kwargs shown
        shown = {k: v for k, v in kw.items() if k in fixed or v != defaults.get(k)}
        state = count(kw)
        if state is None or state.numbers is None:
            continue
        key = json.dumps(shown, sort_keys=True)
        options.setdefault(key, Option(shown, state, sum(k not in fixed for k in shown)))
    found = sorted(options.values(), key=lambda o: (o.state.numbers, o.changed,
                                                    json.dumps(o.kwargs, sort_keys=True)))
    if not found:
        raise RecallLabError(f"no kwargs of {mixer} tried here build with a fixed state")
    exact = sorted((o for o in found if o.state.numbers == target),
                   key=lambda o: (o.changed, json.dumps(o.kwargs, sort_keys=True)))
    below = [o for o in found if o.state.numbers < target]
    above = [o for o in found if o.state.numbers > target]

    def fewest(opts: list[Option], value: float) -> Option:
        return min((o for o in opts if o.state.numbers == value),
                   key=lambda o: (o.changed, json.dumps(o.kwargs, sort_keys=True)))

    model = run_of(fixed).config.model  # the width and length every count was taken at
    answer = {"mixer": mixer, "target": target, "d_model": model.d_model,
              "tokens": model.max_len, "reference": protocol.name, "exact": exact,
              "below": fewest(below, below[-1].state.numbers) if below else None,
              "above": fewest(above, above[0].state.numbers) if above else None,
              "smallest": fewest(found, found[0].state.numbers),
              "searched": {n: _values(defaults[n]) for n in relevant},
              "fixed": fixed, "tried": len(counted)}
    if not exact and not below:
        s = answer["smallest"]
        raise RecallLabError(f"target {target:g} is below the smallest state per layer found for "
                             f"{mixer}: {s.state.text()} with {s.flag}")
    return answer


def search_lines(answer: dict) -> list[str]:
    """What `recall-lab state` prints: where it counted, then the kwargs."""
    searched = "; ".join(f"{n} in {', '.join(f'{v:g}' for v in vs)}"
                         for n, vs in answer["searched"].items()) or "none moves the count"
    fixed = (f", with {json.dumps(answer['fixed'], sort_keys=True)} fixed"
             if answer["fixed"] else "")
    lines = [f"{answer['mixer']}: recurrent state per layer at d_model {answer['d_model']}, "
             f"{answer['tokens']} tokens (the {answer['reference']} protocol's longest table, as "
             f"place counts it){fixed}; target {answer['target']:g}; {answer['tried']} kwargs "
             f"sets measured (searched: {searched})"]
    if answer["exact"]:
        lines.append(f"exact: {len(answer['exact'])} kwargs set"
                     f"{'s' if len(answer['exact']) != 1 else ''} give "
                     f"{answer['exact'][0].state.text()}"
                     + (f" (the {SHOWN} with the fewest changes from the defaults)"
                        if len(answer["exact"]) > SHOWN else ""))
        lines += [f"  {o.flag}" for o in answer["exact"][:SHOWN]]
    else:
        lines.append(f"no kwargs tried give exactly {answer['target']:g}; nearest:")
        for word in ("below", "above"):
            o = answer[word]
            lines.append(f"  {word}: {o.state.text()} with {o.flag}" if o else
                         f"  {word}: none found")
    return lines


__all__ = ["Option", "search", "search_lines"]
