"""`place` on a reference whose tables are whole task tables (a [[link]] over "task", sized by
place.toml's [tables]: the overwrite tables' form), on the tiny reference: the protocol reads
the tables' sizes, names and the fields that tell them apart, the claims pick each table's runs,
a cell settles as on task.levels tables, a placement trains only the tables it names, and a
whole-task experiment without [tables] is refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from recall_lab.experiments import place as pl
from recall_lab.experiments.grid import flatten
from recall_lab.experiments.reference import read_protocol
from recall_lab.experiments.report import RunRecord
from recall_lab.generators.errors import RecallLabError

from .place_fixtures import ROWS, TASK_EXPERIMENT, TASK_PLACE, make_reference, mine_records

MIXER, KWARGS = "gla", {"num_heads": 2}


@pytest.fixture(scope="module")
def ref(tmp_path_factory):
    folder = make_reference(tmp_path_factory.mktemp("ref") / "ref", place=TASK_PLACE,
                            experiment=TASK_EXPERIMENT)
    protocol = read_protocol(folder)
    rows, groups = pl.reference_rows(folder, protocol)
    return folder, protocol, rows, groups


def test_the_protocol_reads_whole_task_tables_by_their_declared_sizes(ref):
    _, protocol, rows, _ = ref
    assert protocol.whole_task and [t.size for t in protocol.tables] == [3.0, 4.0]
    assert [pl.table_name(t.size, protocol) for t in protocol.tables] == [
        "2 live, 3 written", "2 live, 4 written"]
    # the fields that differ between the two tables, and nothing they share
    assert protocol.table_fields == ["task.kwargs.input_seq_len", "task.kwargs.num_updates"]
    assert protocol.at(4.0) == {"task.kwargs.input_seq_len": 12, "task.kwargs.num_updates": 2}
    assert protocol.pilot["size"] == 4.0 and protocol.pilot["levels"] is None
    # every reference run lands at its own table: rows of 8 seeds at both tables
    assert sorted(r.label for r in rows) == sorted(ROWS)
    for row in rows:
        assert sorted(row.cells) == [3.0, 4.0]
        for size, g in row.cells.items():
            assert g.solved.n == 8 and g.size == size
            assert all(r.config["task.kwargs.num_updates"] == size - 2 for r in g.runs)
    # a plain MQAR run is none of these tables
    assert protocol.size_of({"task.levels": [[4, 4]]}) is None


def test_the_cells_run_the_tables_task_and_the_pilot_its_table(ref):
    _, protocol, _, _ = ref
    exp = pl.cells_experiment(protocol, pl.mixer_table(MIXER, KWARGS), [4.0], [0, 1], 3e-3)
    tasks = {json.dumps(r.config.to_json()["task"], sort_keys=True) for r in exp.runs}
    assert len(exp.runs) == 2 and len(tasks) == 1
    task = json.loads(tasks.pop())
    assert task["generator"] == "forgetting-mqar" and task["kwargs"]["num_updates"] == 2
    assert {protocol.size_of(flatten(r.config.to_json())) for r in exp.runs} == {4.0}
    pilot = pl.pilot_experiment(protocol, pl.mixer_table(MIXER, KWARGS))
    assert pilot.runs[0].config.to_json()["task"] == task
    # one sweep slice per table, each picking only its own table's runs
    slices = pl.round_slices(protocol, [3.0, 4.0], (0, 1))
    both = pl.cells_experiment(protocol, pl.mixer_table(MIXER, KWARGS), [3.0, 4.0], [0, 1, 2],
                               3e-3)
    from recall_lab.experiments.grid import selected

    for size, only in zip([3.0, 4.0], slices, strict=True):
        picked = [r for r in both.runs if selected(r, only)]
        assert len(picked) == 2 and {protocol.size_of(flatten(r.config.to_json()))
                                     for r in picked} == {size}


def _mine(protocol, outcomes):
    return mine_records(protocol, MIXER, KWARGS, outcomes)


@pytest.mark.parametrize("outcome, status, verdict", [
    ((0, 3), "open", "open"),  # 3 unsolved against 8/8: 5 more seeds could still tie
    ((0, 4), "settled", "fewer"),  # 0/4 against 8/8: fewer whatever the other 4 do
])
def test_a_cell_on_a_task_table_settles_as_on_a_levels_table(ref, outcome, status, verdict):
    _, protocol, rows, groups = ref
    label = pl.mixer_row_label(MIXER, KWARGS)
    state = pl.run_state(pl.cells_experiment(protocol, pl.mixer_table(MIXER, KWARGS), [3.0],
                                             [0], 3e-3).runs[0].config.to_json())
    claims = pl.make_claims(label, state, rows, [3.0, 4.0], protocol)
    at3 = [c for c in claims if c["kind"] == "solved" and c["size"] == 3.0]
    assert at3 and all(c["at"] == protocol.at(3.0) for c in at3)
    assert all(c["claim"].startswith("at 2 live, 3 written: ") for c in at3)
    mine: list[RunRecord] = _mine(protocol, {3.0: outcome})
    cells, verdicts, _ = pl.evaluate(mine, groups, claims, protocol, label)
    assert cells[3.0].status == status
    assert {v["verdict"] for v in verdicts if v["kind"] == "solved" and v["size"] == 3.0} \
        == {verdict}


def test_a_placement_on_task_tables_trains_the_table_it_names(ref, tmp_path):
    folder = ref[0]
    answer = pl.place(MIXER, KWARGS, tables=[4.0], seeds=2, reference=folder, check=False,
                      out=tmp_path / "out", plots=False)
    assert [c["size"] for c in answer["cells"]] == [4.0]
    assert answer["cells"][0]["table"] == "2 live, 4 written"
    runs = list((Path(answer["folder"]) / "cells").glob("s*"))
    assert runs and all(json.loads((r / "config.json").read_text())["task"]["kwargs"]
                        ["num_updates"] == 2 for r in runs if (r / "config.json").is_file())


def test_whole_task_tables_without_sizes_are_refused_in_one_line(tmp_path):
    folder = make_reference(tmp_path / "ref", place=TASK_PLACE.split("[tables]")[0]
                            + "[pilot]" + TASK_PLACE.split("[pilot]")[1],
                            experiment=TASK_EXPERIMENT)
    with pytest.raises(RecallLabError, match=r"\[tables\] needs sizes"):
        read_protocol(folder)


def test_the_shipped_overwrite_reference_holds_the_forgetting_tables_runs():
    """overwrite-2026 (scripts/overwrite_page.py --reference): the two forgetting tables of the
    archived overwrite records, every run byte for byte, the plain MQAR runs left out."""
    import tarfile

    from recall_lab.experiments.reference import open_reference, shipped_archive

    root = Path(__file__).resolve().parents[2] / "docs" / "results" / "overwrite" / "runs"
    with open_reference("overwrite-2026") as folder:
        protocol = read_protocol(folder)
        assert [(t.size, t.name) for t in protocol.tables] == [
            (12.0, "8 live, 12 written"), (16.0, "8 live, 16 written")]
        rows, _ = pl.reference_rows(folder, protocol)
        index = json.loads((folder / "sweep.json").read_text())
        assert len(index["runs"]) == 140  # 7 rows x 2 tables x 10 seeds, finished or not
        assert {protocol.size_of(flatten(e["config"])) for e in index["runs"]} == {12.0, 16.0}
    assert sorted(r.label.split(" / ")[0] for r in rows) == sorted(
        ["transformer", "linear-attn", "mamba2", "deltanet", "gated-deltanet", "kda", "rwkv7"])
    with tarfile.open(shipped_archive("overwrite-2026"), "r:xz") as tar:
        for m in tar.getmembers():
            if m.name.count("/") == 1:  # a run's record, as archived
                assert tar.extractfile(m).read() == (root / m.name).read_bytes(), m.name


def test_a_single_task_table_is_told_apart_by_all_its_fields(ref):
    import dataclasses

    _, protocol, _, _ = ref
    one = dataclasses.replace(protocol, tables=[protocol.table(4.0)])
    assert "task.generator" in one.table_fields and "task.kwargs.num_updates" in one.table_fields
    at3 = flatten({"task": protocol.table(3.0).task})
    assert one.size_of(at3) is None and one.size_of(flatten({"task": one.tables[0].task})) == 4.0
