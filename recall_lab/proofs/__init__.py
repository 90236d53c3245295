"""The papers' theorems as executable checks.

One module per statement (`capacity`, `cisa`, `construction`, `lsh_equivalence`, and on request
`linear_memory`), each with `check(scale, seed) -> Evidence`; `recall_lab.proofs.registry.run`
runs them for `recall-lab prove`.
"""

from recall_lab.proofs.evidence import Evidence
from recall_lab.proofs.registry import STATEMENTS, run

__all__ = ["STATEMENTS", "Evidence", "run"]
