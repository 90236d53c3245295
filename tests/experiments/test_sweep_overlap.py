"""`sweep`'s closing lines give each group's held-out overlap (the share of its valid and test
samples also trained on), with a warning above 1%."""

import json

from recall_lab.experiments.overlap import WARN_ABOVE, group_overlaps, overlap_lines


def _run(folder, name, values, valid, test, rows=6400):
    (folder / name).mkdir(parents=True)
    (folder / name / "summary.json").write_text(json.dumps(
        {"held_out_in_training": {"train_rows_checked": rows, "valid": valid, "test": test}}))
    return {"name": name, "status": "done", "values": values}


def test_groups_take_their_largest_run_and_warn_above_the_threshold(tmp_path):
    runs = [_run(tmp_path, "a0", {"model.name": "mamba", "train.seed": 0}, 0.0, 0.005),
            _run(tmp_path, "a1", {"model.name": "mamba", "train.seed": 1}, 0.34, 0.29),
            _run(tmp_path, "b0", {"model.name": "transformer", "train.seed": 0}, 0.0, 0.002,
                 rows=3200),
            {"name": "c0", "status": "failed", "values": {"model.name": "gla"}}]
    groups = {g["group"]: g for g in group_overlaps(tmp_path, runs)}
    assert set(groups) == {"mamba", "transformer"}  # seeds pooled; a failed run has none
    assert (groups["mamba"]["valid"], groups["mamba"]["test"]) == (0.34, 0.29)
    lines = overlap_lines(list(groups.values()))
    assert lines[0] == ("warning: held-out overlap mamba: valid 34.0%, test 29.0% also occur in "
                        "training")
    assert lines[1].startswith("held-out overlap transformer: valid 0.0%, test 0.2%")
    assert f"above {WARN_ABOVE:.0%}" in lines[2] and "first 3,200 training samples" in lines[2]


def test_no_overlap_is_one_line_and_no_record_is_silent(tmp_path):
    runs = [_run(tmp_path, "a0", {"model.name": "mamba"}, 0.0, 0.0)]
    assert overlap_lines(group_overlaps(tmp_path, runs)) == [
        "held-out overlap: none of the valid or test samples occur in training, in every group "
        "(first 6,400 training samples checked)"]
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "summary.json").write_text("{}")
    assert overlap_lines(group_overlaps(tmp_path, [{"name": "old", "status": "done"}])) == []


def test_what_the_overlap_was_checked_against_is_stated():
    """`stream_overlap` checks only the first ~16,384 streamed rows: the report's note and its
    warnings say how many were checked (issue 62)."""
    from types import SimpleNamespace

    from recall_lab.experiments import overlap

    line = overlap.warning_lines([("g", {"valid": 0.5, "test": 0.0, "rows": 16384})])[0]
    assert line.endswith("also occur in training (first 16,384 training samples checked)")
    groups = [SimpleNamespace(overlap={"valid": 0.0, "test": 0.0, "rows": r})
              for r in (100_000, 16_384)] + [SimpleNamespace(overlap=None)]
    assert "first 16,384 training samples of each run" in overlap.checked_text(groups)
    assert overlap.checked_text(groups[2:]) == "training samples checked: not recorded"
