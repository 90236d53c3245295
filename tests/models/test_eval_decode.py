"""`recall-lab eval RUN --decode` on a tiny trained mamba+hax run: the accuracy by recurrent
decoding (prefill the information component, step through the inquiry) equals the parallel
evaluation's, in the JSON and on the screen. Equality, not quality: a few steps suffice."""

import json

from typer.testing import CliRunner

from recall_lab.cli import app

runner = CliRunner()


def test_eval_decode_equals_parallel_on_a_trained_hybrid(tmp_path):
    run = tmp_path / "hax"
    r = runner.invoke(app, ["train", "--model", "mamba+hax", "--out", str(run), "--d-model",
                            "16", "--k", "8", "--steps", "3", "--batch-size", "2",
                            "--eval-every", "3", "--eval-samples", "4", "--device", "cpu",
                            "--task", "mini-mqar"])
    assert r.exit_code == 0, r.output
    dest = tmp_path / "e.json"
    r = runner.invoke(app, ["eval", str(run), "--n", "6", "--batch-size", "4", "--decode",
                            "--out", str(dest)])
    assert r.exit_code == 0, r.output
    res = json.loads(dest.read_text())
    assert res["n"] == res["decode"]["n"] == 6
    assert res["decode"]["acc"] == res["acc"] and res["decode"]["acc_equal"] is True
    assert abs(res["decode"]["loss"] - res["loss"]) < 1e-4  # the logits agree, not just argmax
    assert "equals the parallel" in r.output
