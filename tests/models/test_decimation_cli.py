"""`recall-lab train --model mamba+deci` and `recall-lab eval RUN --decimate ... --length-factor`:
a tiny round trip, the eval JSON against the library, and bad input as one line."""

import json

from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.evaluate import evaluate_run
from recall_lab.models.decimation import parse_decimate

runner = CliRunner()
SMALL = ["--d-model", "16", "--steps", "2", "--batch-size", "2", "--eval-every", "1",
         "--eval-samples", "4", "--device", "cpu", "--task", "passkey"]


def test_train_deci_and_eval_zero_shot_at_longer_length(tmp_path):
    deci = tmp_path / "deci"
    r = runner.invoke(app, ["train", "--model", "mamba+deci", "--out", str(deci),
                            "--decimate", "L_base=24,min_len=4", *SMALL])
    assert r.exit_code == 0, r.output
    cfg = json.loads((deci / "config.json").read_text())
    assert cfg["model"]["decimation"]["L_base"] == 24 and cfg["model"]["decimation"]["min_len"] == 4

    plain = tmp_path / "plain"
    assert runner.invoke(app, ["train", "--model", "mamba", "--out", str(plain), *SMALL]
                         ).exit_code == 0
    dest = tmp_path / "e.json"
    r = runner.invoke(app, ["eval", str(plain), "--n", "8", "--length-factor", "2",
                            "--decimate", "L_base=30,layers=-1", "--out", str(dest)])
    assert r.exit_code == 0, r.output
    res = json.loads(dest.read_text())
    assert res["max_len"] == 2 * 66 and res["decimation"]["L_base"] == 30
    # passkey x2: 1 BOS + 2 table tokens + 126 filler before SEP; 30 of 129 context tokens kept,
    # so at most all 3 non-filler ones survive
    assert 0.0 <= res["kept_non_filler"] <= 1.0
    from recall_lab.generators import get_preset

    lib = evaluate_run(plain, get_preset("passkey").at_length(2), 8,
                       decimate=parse_decimate("L_base=30,layers=-1"), device="cpu")
    assert lib["acc"] == res["acc"] and lib["loss"] == res["loss"]


def test_bad_decimate_is_one_line(tmp_path):
    plain = tmp_path / "plain"
    assert runner.invoke(app, ["train", "--model", "mamba", "--out", str(plain), *SMALL]
                         ).exit_code == 0
    for args, needle in ((["--decimate", "L_base"], "key=value"),
                         (["--decimate", "score=max"], "score"),
                         (["--length-factor", "0"], "length factor")):
        r = runner.invoke(app, ["eval", str(plain), "--n", "4", *args])
        assert r.exit_code == 2, r.output
        lines = [x for x in r.stderr.splitlines() if x.strip()]
        assert len(lines) == 1 and lines[0].startswith("error:") and needle in lines[0], r.stderr
