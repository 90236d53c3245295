"""The list of executable statements and the runner behind `recall-lab prove`.

Each entry names a module in `proofs/` whose `check(scale, seed)` returns an `Evidence`. Modules
are imported on demand so that listing the names costs nothing.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

from generators.errors import RecallLabError
from proofs.evidence import Evidence

STATEMENTS: dict[str, str] = {
    "capacity": "Cor. 3.1 / Rem. 3.1 / Lemma B.1",
    "cisa": "Prop. 3.3",
    "construction": "Prop. 3.2 / Prop. C.1",
    "lsh_equivalence": "App. A",
}
SCALES = ("small", "large")


def resolve(names: Sequence[str] | None) -> list[str]:
    """Validate statement names (all of them when none are given)."""
    if not names:
        return list(STATEMENTS)
    for name in names:
        if name not in STATEMENTS:
            raise RecallLabError(
                f"unknown statement {name!r}; choose from {', '.join(STATEMENTS)}")
    return list(dict.fromkeys(names))


def run(
    names: Sequence[str] | None = None, scale: str = "small", seed: int = 0,
    on_done: Callable[[Evidence], None] | None = None,
) -> list[Evidence]:
    """Run the named checks in order; `on_done` sees each result as soon as it exists."""
    if scale not in SCALES:
        raise RecallLabError(f"unknown scale {scale!r}; choose from {', '.join(SCALES)}")
    results = []
    for name in resolve(names):
        module = importlib.import_module(f"proofs.{name}")
        evidence = module.check(scale=scale, seed=seed)
        results.append(evidence)
        if on_done is not None:
            on_done(evidence)
    return results
