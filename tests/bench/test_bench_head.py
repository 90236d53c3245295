"""`bench/head.py`: the full and the scored head's training steps on the same batch, side by
side; the ratio is computed from the two rows and both steps give the same loss."""

from __future__ import annotations

import io

import pytest
from rich.console import Console

from recall_lab.bench import BENCHES, head


def test_rows_compare_the_same_step_and_the_ratio_comes_from_them():
    assert "head" in BENCHES
    result = head.run(Console(file=io.StringIO()), True, reps=1, batch=2)
    assert [r["vocab"] for r in result["rows"]] == [8192, 51]
    for r in result["rows"]:
        assert r["ratio"] == pytest.approx(r["full"]["median"] / r["scored"]["median"])
        assert r["first_loss"]["scored"] == pytest.approx(r["first_loss"]["full"], rel=1e-5)
        assert r["full"]["reps"] == r["scored"]["reps"] == 1
