"""`recall-lab extrapolate`: rows per run x variant x length factor, lengths as asked, zero-shot
decimation that keeps everything equals the plain model, outputs written, nothing overwritten."""

import json

from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.evaluate import evaluate_run
from recall_lab.generators import get_preset

runner = CliRunner()
SMALL = ["--d-model", "16", "--steps", "2", "--batch-size", "2", "--eval-every", "1",
         "--eval-samples", "4", "--device", "cpu", "--task", "passkey"]


def test_extrapolate_rows_and_files(tmp_path):
    run = tmp_path / "plain"
    assert runner.invoke(app, ["train", "--model", "mamba", "--out", str(run), *SMALL]
                         ).exit_code == 0
    out = tmp_path / "ex"
    args = ["extrapolate", str(run), "--factors", "1,3", "--n", "6", "--md-samples", "2",
            "--decimate", "L_base=100000", "--decimate", "L_base=20,min_len=1", "--out", str(out)]
    r = runner.invoke(app, args)
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "extrapolation.json").read_text())["rows"]
    assert [(x["variant"], x["factor"]) for x in rows] == [
        (v, f) for v in ("as trained", "L_base=100000", "L_base=20,min_len=1") for f in (1, 3)]
    assert [x["length"] for x in rows[:2]] == [66, 198]
    assert all(len(x["md_last"]) == 2 for x in rows)  # one per layer
    by = {(x["variant"], x["factor"]): x for x in rows}
    for f in (1, 3):  # keeping every token is the plain model (bit for bit)
        assert by[("L_base=100000", f)]["acc"] == by[("as trained", f)]["acc"]
        assert by[("L_base=100000", f)]["loss"] == by[("as trained", f)]["loss"]
        assert by[("L_base=100000", f)]["kept_non_filler"] == 1.0
    # L_base=20 at 3x: 20 of 195 context tokens survive; at most all 3 table tokens
    assert by[("L_base=20,min_len=1", 3)]["kept_non_filler"] <= 1.0
    lib = evaluate_run(run, get_preset("passkey").at_length(3), 6, device="cpu")
    assert lib["acc"] == by[("as trained", 3)]["acc"]
    for f in ("extrapolation.md", "acc.png", "md.png"):
        assert (out / f).stat().st_size > 0
    assert "L=198" in (out / "extrapolation.md").read_text()
    r = runner.invoke(app, args)
    assert r.exit_code == 2 and "--force" in r.stderr


def test_extrapolate_decode_equals_parallel(tmp_path):
    """--decode: prefill + token-by-token decoding gives the parallel accuracy at every length,
    as trained and with zero-shot decimation (which drops tokens in the prefill only)."""
    run = tmp_path / "plain"
    assert runner.invoke(app, ["train", "--model", "mamba", "--out", str(run), *SMALL]
                         ).exit_code == 0
    out = tmp_path / "ex"
    r = runner.invoke(app, ["extrapolate", str(run), "--factors", "1,2", "--n", "5", "--decode",
                            "--decimate", "L_base=20,min_len=1", "--out", str(out)])
    assert r.exit_code == 0, r.output
    rows = json.loads((out / "extrapolation.json").read_text())["rows"]
    assert len(rows) == 4
    for x in rows:
        assert x["decode_acc"] == x["acc"] and x["decode_equal"] is True
        assert x["decode_ms"] > 0 and x["parallel_ms"] > 0
    assert "recurrent decoding" in (out / "extrapolation.md").read_text()
