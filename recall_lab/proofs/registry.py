"""The list of executable statements and the runner behind `recall-lab prove`.

Each entry names a module in `recall_lab/proofs/` whose `check(scale, seed)` returns an `Evidence`.
Modules are imported on demand so that listing the names costs nothing. `STATEMENTS` run by default;
`ON_REQUEST` only when named (minutes of measurement that the tour's `recall-lab prove` should not
wait for). A module may offer `validate(scale, **options)`: every chosen statement's inputs are
refused there before the first check runs. Options (`dims`, `n_max`) go only to the statements that
take them (`OPTIONS`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from typing import Any

from recall_lab.generators.errors import RecallLabError
from recall_lab.proofs.evidence import Evidence

STATEMENTS: dict[str, str] = {
    "capacity": "Cor. 3.1 / Rem. 3.1 / Lemma B.1",
    "cisa": "Prop. 3.3",
    "construction": "Prop. 3.2 / Prop. C.1",
    "lsh_equivalence": "App. A",
}
ON_REQUEST: dict[str, str] = {
    "linear_memory": "arXiv 2605.05189 (linear associative memory thresholds)",
}
OPTIONS: dict[str, tuple[str, ...]] = {
    "linear_memory": ("dims", "n_max", "seeds", "lp_time_limit")}
# the options' names on the command line
FLAGS = {"dims": "--d", "n_max": "--n-max", "seeds": "--seeds", "lp_time_limit": "--lp-time-limit"}
SCALES = ("small", "large")


def resolve(names: Sequence[str] | None) -> list[str]:
    """Validate statement names (the default set when none are given)."""
    if not names:
        return list(STATEMENTS)
    known = {**STATEMENTS, **ON_REQUEST}
    for name in names:
        if name not in known:
            raise RecallLabError(
                f"unknown statement {name!r}; choose from {', '.join(known)}")
    return list(dict.fromkeys(names))


def _given(options: dict[str, Any]) -> dict[str, Any]:
    """The options set (0 is set, so that a bad 0 is refused rather than ignored)."""
    return {k: v for k, v in options.items()
            if v is not None and not (isinstance(v, (list, tuple)) and not v)}


def _options(name: str, options: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in options.items() if k in OPTIONS.get(name, ())}


def prepare(names: Sequence[str] | None = None, scale: str = "small",
            **options: Any) -> list[str]:
    """The chosen statements, after refusing bad input for all of them (before any work):
    unknown names or scale, options no chosen statement takes, each module's `validate`."""
    if scale not in SCALES:
        raise RecallLabError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    chosen = resolve(names)
    given = _given(options)
    takers = [n for n in chosen if set(given) & set(OPTIONS.get(n, ()))]
    if given and not takers:
        takers_all = ", ".join(n for n, opts in OPTIONS.items() if set(given) & set(opts))
        flags = ", ".join(FLAGS.get(k, k) for k in sorted(given))
        raise RecallLabError(f"{flags} apply only to {takers_all}")
    for name in chosen:
        module = importlib.import_module(f"recall_lab.proofs.{name}")
        if hasattr(module, "validate"):
            module.validate(scale=scale, **_options(name, given))
    return chosen


def run(
    names: Sequence[str] | None = None, scale: str = "small", seed: int = 0,
    on_done: Callable[[Evidence], None] | None = None, **options: Any,
) -> list[Evidence]:
    """Run the named checks in order; `on_done` sees each result as soon as it exists."""
    chosen = prepare(names, scale, **options)
    given = _given(options)
    results = []
    for name in chosen:
        module = importlib.import_module(f"recall_lab.proofs.{name}")
        evidence = module.check(scale=scale, seed=seed, **_options(name, given))
        results.append(evidence)
        if on_done is not None:
            on_done(evidence)
    return results
