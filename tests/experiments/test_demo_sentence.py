"""The demo's sentence says what its table shows: a gap only when the numbers have one."""

from recall_lab.experiments.demo import gap_sentence


def _rows(acc: dict) -> list[dict]:
    return [{"model.name": m, "task.levels": [[n, n]], "mean": a} for (m, n), a in acc.items()]


def test_sentence_reports_the_gap_with_the_numbers():
    rows = _rows({("transformer", 2): 1.0, ("transformer", 8): 0.98,
                  ("mamba", 2): 0.99, ("mamba", 8): 0.42})
    s = gap_sentence(rows)
    assert s.startswith("At 8 pairs transformer recalls 0.98 of the queries and mamba 0.42 "
                        "(at 2 pairs: 0.99): the fixed-state SSM falls behind")


def test_sentence_says_no_gap_when_the_base_keeps_up_or_nobody_recalls():
    keeps_up = _rows({("transformer", 2): 1.0, ("transformer", 8): 0.98,
                      ("mamba", 2): 0.99, ("mamba", 8): 0.95})
    assert gap_sentence(keeps_up).endswith("no capacity gap shows at this budget.")
    nobody = _rows({("transformer", 2): 0.5, ("transformer", 8): 0.3,
                    ("mamba", 2): 0.99, ("mamba", 8): 0.35})
    assert gap_sentence(nobody).endswith("no capacity gap shows at this budget.")


def test_sentence_without_finished_runs():
    assert gap_sentence([{"model.name": "mamba", "task.levels": [[2, 2]], "mean": None}]) \
        == "No run finished: nothing to conclude."


def test_sentence_does_not_cite_a_cell_the_report_warns_about():
    """The demo's 2-pair table has few distinct samples, so its held-out samples also occur in
    training (the report warns): the sentence compares from the smallest table it can cite."""
    rows = _rows({("transformer", 2): 1.0, ("transformer", 4): 0.99, ("transformer", 8): 0.98,
                  ("mamba", 2): 1.0, ("mamba", 4): 0.97, ("mamba", 8): 0.42})
    for row in rows:
        seen = 1.0 if row["task.levels"] == [[2, 2]] else 0.0
        row["overlap"] = {"valid": seen, "test": seen}
    s = gap_sentence(rows)
    assert "(at 4 pairs: 0.97)" in s and "at 2 pairs: 1.00" not in s
    assert "; not cited: mamba at 2 pairs, transformer at 2 pairs, whose" in s
    assert "falls behind" in s
