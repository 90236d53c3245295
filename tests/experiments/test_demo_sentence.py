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
