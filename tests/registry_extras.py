"""A test-only attention pattern and a test-only model, registered the way a new one would be
(one `PatternRow`, one model row) from the tests, not the package: the generic tests (pattern
and model causality, budgets, learning) run over the registries, so they pick these up unedited.
Imported by the attention and models conftests; `register()` is idempotent."""

from __future__ import annotations

import torch
from torch import Tensor

from recall_lab.attention import PATTERN_TABLE, Pattern, PatternRow, register_pattern
from recall_lab.attention.base import check_qk
from recall_lab.models import MODEL_ROWS, register_model

PATTERN = "test-stride"
MODEL = "test-mamba+stride"


class StridePattern(Pattern):
    """Query i reads keys i, i-2, i-4, ... (n of them): fixed, causal, not a built-in pattern."""

    def __init__(self, n: int) -> None:
        super().__init__()
        self.name, self.budget = PATTERN, n

    def forward(self, q: Tensor, k: Tensor, v: Tensor | None = None
                ) -> tuple[Tensor, Tensor | None]:
        length = check_qk(q, k)
        j = (torch.arange(length, device=q.device)[:, None]
             - 2 * torch.arange(self.budget, device=q.device)[None, :])
        return torch.where(j >= 0, j, -1).to(torch.int32)[None, None], None


def register() -> None:
    if PATTERN not in PATTERN_TABLE:
        register_pattern(PATTERN, PatternRow(StridePattern))
    if MODEL not in MODEL_ROWS:
        register_model(MODEL, {"arch": "mamba", "pattern": PATTERN})
