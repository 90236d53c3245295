"""`zoology-mqar-mix`: Based's MQAR training mixture, rows of several (length, pairs) settings
padded on the right; the padding changes no score of a causal model, and every slice is reported."""

import json

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.generators.builtin import BASED_TRAIN, BASED_WEIGHTS, zoology_mqar_mix
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.tasks import IGNORE

SEGS = [[16, 2], [32, 4], [48, 8]]


def test_rows_keep_their_setting_and_pad_with_nothing_scored():
    x, y, s = zoology_mqar_mix(600, np.random.SeedSequence(3), vocab_size=64, segments=SEGS)
    assert x.shape == y.shape == (600, 48) and set(np.unique(s)) == {2, 4, 8}
    for L, k in SEGS:
        rows = s == k
        assert ((y[rows] != IGNORE).sum(axis=1) == k).all()  # every key queried once
        assert (x[rows][:, L:] == 0).all() and (y[rows][:, L:] == IGNORE).all()
        # keys (lower half of the vocabulary) then values (upper half) in the first 2k places
        assert (x[rows][:, 0:2 * k:2] < 32).all() and (x[rows][:, 1:2 * k:2] >= 32).all()
    x2, y2, s2 = zoology_mqar_mix(600, np.random.SeedSequence(3), vocab_size=64, segments=SEGS)
    assert x.tobytes() == x2.tobytes() and y.tobytes() == y2.tobytes()


def test_based_mixture_draws_its_segments_in_based_proportions():
    _, _, s = zoology_mqar_mix(4000, np.random.SeedSequence(0))
    got = np.array([(s == k).mean() for _, k in BASED_TRAIN])
    want = np.array(BASED_WEIGHTS) / sum(BASED_WEIGHTS)
    assert np.abs(got - want).max() < 0.03  # 4,000 rows: binomial sd <= 0.008


@pytest.mark.parametrize("kwargs,words", [
    ({"segments": [[16, 2], [32, 2]]}, "same number of pairs"),
    ({"segments": [[16, 2]], "weights": [1, 1]}, "weights must be 1"),
    ({"segments": "x"}, "segments must be"),
    ({"segments": [[16, 9]]}, "num_kv_pairs 9 needs"),
])
def test_bad_segments_are_one_line(kwargs, words):
    with pytest.raises(RecallLabError, match=words):
        zoology_mqar_mix(4, np.random.SeedSequence(0), vocab_size=64, **kwargs)


@pytest.mark.parametrize("name", ["transformer", "mamba"])
def test_padding_changes_no_score_of_a_causal_model(name):
    from recall_lab.models import build_model

    torch.manual_seed(0)
    model = build_model(name, 64, d_model=16, d_state=4).double().eval()
    x, y, s = zoology_mqar_mix(12, np.random.SeedSequence(1), vocab_size=64, segments=SEGS)
    with torch.no_grad():
        padded = model(torch.as_tensor(x)).logits
        for i, k in enumerate(s):
            L = dict((k_, L_) for L_, k_ in SEGS)[int(k)]
            alone = model(torch.as_tensor(x[i : i + 1, :L])).logits
            torch.testing.assert_close(padded[i, :L], alone[0], rtol=1e-10, atol=1e-10)


def test_a_run_reports_every_slice(tmp_path):
    task = tmp_path / "mix.toml"
    task.write_text('[task]\ngenerator = "zoology-mqar-mix"\n[task.kwargs]\nvocab_size = 64\n'
                    'segments = [[16, 2], [32, 4]]\n')
    out = tmp_path / "run"
    r = CliRunner().invoke(app, ["train", "--model", "transformer", "--task", str(task),
                                 "--out", str(out), "--steps", "2", "--eval-every", "2",
                                 "--eval-samples", "32", "--batch-size", "4", "--d-model", "16",
                                 "--device", "cpu"])
    assert r.exit_code == 0, r.output
    summary = json.loads((out / "summary.json").read_text())
    assert set(summary["test"]["slices"]) == {"2", "4"}
    # `eval` prints the accuracy per slice beside the total, from the same result file
    r = CliRunner().invoke(app, ["eval", str(out), "--n", "16"])
    assert r.exit_code == 0, r.output
    res = json.loads(next(out.glob("eval-*.json")).read_text())
    rows = [ln.split() for ln in r.output.splitlines() if ln.strip().startswith("│")]
    for k, s in res["slices"].items():
        assert any(row[1:4] == [k, "│", str(s["n"])] for row in rows), r.output
