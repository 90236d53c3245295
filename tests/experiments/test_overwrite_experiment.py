"""experiments/overwrite/overwrite.toml (and its format control, overwrite-controls.toml): the
forgetting cells, its plain cells equal to the archived
records they reuse (so a sweep skips them and nothing plain is retrained), its claims readable
before any run, and the dry-run's probe label for a grid of whole task tables."""

from pathlib import Path

import pytest

from recall_lab.experiments.estimate import run_label
from recall_lab.experiments.grid import load_experiment
from recall_lab.experiments.verdicts import check_spec
from recall_lab.generators.forgetting import needed_length
from recall_lab.generators.tasks import GeneratorTask

ROOT = Path(__file__).resolve().parents[2]
FILES = {"overwrite": (4, 8), "overwrite-controls": (0,)}  # each file's num_updates


def _hashes(folder: Path) -> set[str]:
    return {p.name.rsplit("-", 1)[-1] for p in folder.iterdir() if (p / "config.json").is_file()}


@pytest.mark.parametrize("name", FILES)
def test_forgetting_cells_and_archived_plain_cells(name):
    exp = load_experiment(ROOT / f"experiments/overwrite/{name}.toml")
    forgetting = [r for r in exp.runs if isinstance(r.config.task, GeneratorTask)]
    plain = [r for r in exp.runs if not isinstance(r.config.task, GeneratorTask)]
    assert len(forgetting) == 7 * 2 * 10
    for r in forgetting:  # 8 live keys with 4 or 8 updates (the controls: 8 or 16 live, none),
        kw = r.config.task.kwargs  # at the shortest length zoology allows
        assert kw["num_updates"] in FILES[name] and kw["vocab_size"] == 128
        assert kw["num_kv_pairs"] in ((8, 16) if kw["num_updates"] == 0 else (8,))
        assert kw["input_seq_len"] == needed_length(kw["num_kv_pairs"], kw["num_updates"])
        assert kw["random_non_queries"] is False
        # the forgetting format's budget: up to 5,000 steps (decided before its first run)
        assert r.config.train.steps == 5000 and r.config.train.batch_size == 32
    archived = _hashes(ROOT / "docs/results/zoo-frontier/runs")
    for row in ("kda", "rwkv7"):
        archived |= _hashes(ROOT / f"docs/results/frontier-2026/{row}/cells")
    assert all(r.config.train.steps == 2500 for r in plain)  # as their records ran
    missing = [r.name for r in plain if r.hash not in archived]
    assert len(plain) == 5 * 2 * 10 + 2 * 2 * 8 and not missing, missing[:3]


@pytest.mark.parametrize("name", FILES)
def test_claims_read_and_probe_labels(name):
    exp = load_experiment(ROOT / f"experiments/overwrite/{name}.toml")
    expects = exp.report["expect"]
    assert len(expects) >= 6
    for e in expects:
        check_spec(e)
    labels = {run_label(r) for r in exp.runs}
    assert len(labels) == 7 * 4  # one probe per row and table
