"""docs/results/leaderboard.md: the page equals what the records give (the placements' rows
from their record.json files, the page rendered from the rows), rows sit in the state band
nearest on a log scale, and (slow) the archive's rows equal the zoo-frontier archive's."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("leaderboard", ROOT / "scripts" / "leaderboard.py")
lb = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lb)


def test_the_page_equals_what_the_records_give():
    # the placements' rows rebuilt from their records equal leaderboard.json's, and the page
    # equals the one rendered from those rows
    assert lb.main(["--check"]) == 0
    data = json.loads(lb.DATA.read_text())
    # every committed placement is on the page, in its band
    names = {r["source"] for r in data["placements"]}
    assert {"placement place-deltanet", "placement frontier-2026/kda"} <= names
    assert len(data["placements"]) == 7


def test_a_row_sits_in_the_band_nearest_its_state():
    assert [lb.band(s) for s in (128, 181, 182, 256, 390, 512, 1024, 2925, 136224)] == \
        [128, 128, 256, 256, 512, 512, None, 4096, None]
    assert lb.band(None) is None


@pytest.mark.slow
def test_the_archive_rows_equal_the_zoo_frontier_archives():
    data = json.loads(lb.DATA.read_text())
    assert json.loads(json.dumps(lb.zoo_rows())) == data["zoo"]
