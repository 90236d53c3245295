"""The record every proof check returns: what was checked, the measured figure, the verdict.

A check never returns a bare boolean: `Evidence.details` carries the numbers behind the verdict so
that `recall-lab prove --out` writes them to JSON and a reader can re-derive the verdict.

Where a check measures a theory it cannot itself pass or fail (a conjecture, a constant), its PASS
is its estimators' self-test and `finding` says, in words, what the measurement decided;
`incomplete` lists parts that did not finish (a solver's time limit), which are never reported
as measurements.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any


@dataclass
class Evidence:
    """Outcome of one executable statement."""

    name: str
    statement: str
    checked: str
    measured: str
    passed: bool
    details: dict[str, Any] = field(default_factory=dict)
    seconds: float = 0.0
    finding: str = ""  # the measured verdict in words, where PASS is a self-test
    incomplete: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        return "PASS" if self.passed else "FAIL"

    @property
    def verdict_text(self) -> str:
        """The verdict as printed: "PASS", or "self-test PASS" where a finding stands beside it."""
        return f"self-test {self.verdict}" if self.finding else self.verdict

    def to_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["verdict"] = self.verdict
        return _jsonable(out)


def _jsonable(obj: Any) -> Any:
    """Plain JSON types only (numpy scalars, tuples, inf/nan as strings)."""
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, bool) or obj is None or isinstance(obj, str):
        return obj
    if isinstance(obj, int):
        return obj
    if hasattr(obj, "item") and callable(obj.item):
        return _jsonable(obj.item())
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else str(obj)
    return str(obj)
