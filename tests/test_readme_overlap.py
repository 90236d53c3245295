"""The README's held-out overlap paragraph against the data it describes: the shares of tiny's
and the demo's held-out samples that their training streams also draw, measured as `train`
measures them (`DataSource.overlap`; data only, nothing trained)."""

import re
from pathlib import Path

import pytest

from recall_lab.config import read_toml
from recall_lab.data import DataSource
from recall_lab.experiments.grid import expand

ROOT = Path(__file__).resolve().parents[1]


def _overlaps(toml: str) -> dict[tuple[int, int], dict]:
    """Each distinct data stream's overlap: (pairs, seed) -> {"valid", "test", ...}."""
    out = {}
    for run in expand(read_toml(ROOT / "experiments" / "demo" / toml), "x").runs:
        cfg, t = run.config, run.config.train
        key = (int(cfg.task.levels[0][1]), t.seed)
        if key in out:
            continue
        data = DataSource.for_run(cfg, None)
        held = {"valid": data.held_out("valid", t.eval_samples)[0],
                "test": data.held_out("test", t.test_samples)[0]}
        out[key] = {**data.overlap(t.batch_size, t.steps, held), "n_test": t.test_samples}
    return out


@pytest.fixture(scope="module")
def paragraph() -> str:
    text = (ROOT / "README.md").read_text()
    start = text.index("**Held-out overlap**")
    return " ".join(text[start:text.index("\n\n", start)].split())


def test_tinys_overlap_is_the_readmes(paragraph):
    got = _overlaps("tiny.toml")
    test = max(o["test"] for o in got.values())
    valid = max(o["valid"] for o in got.values())
    n = next(iter(got.values()))["n_test"]
    assert f"{test:.1%} of their test samples ({round(test * n)} of {n})" in paragraph
    assert f"{valid:.1%} of validation" in paragraph
    assert f"at most {test:.3f} of each accuracy" in paragraph
    assert 0.01 < test < 0.05  # above the warning's 1%: why the paragraph exists


def test_the_demos_smallest_table_is_all_seen_and_the_others_none(paragraph):
    got = _overlaps("demo.toml")
    by_pairs = {p: max(o["test"] for (q, _), o in got.items() if q == p) for p, _ in got}
    smallest = min(by_pairs)
    assert by_pairs[smallest] == 1.0 and f"{smallest}-pair table shares 100%" in paragraph
    rest = sorted(p for p in by_pairs if p != smallest)
    assert all(by_pairs[p] == 0.0 for p in rest)
    assert re.search(rf"its {rest[0]}- and {rest[1]}-pair tables share none", paragraph)
