"""The Python API's user errors are the lab's own error with the command line's line
(recall_lab/errors.py): a config that does not validate raises RecallLabError, not pydantic's
ValidationError with its URL, and its message is the one `recall-lab` prints after `error:`."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

import recall_lab as rl
from recall_lab.cli import app
from recall_lab.generators.errors import RecallLabError

BAD_TASK = {"levels": [[2, 2]], "values": 0}


def test_a_bad_inline_task_raises_the_labs_error_not_pydantics():
    with pytest.raises(RecallLabError) as got:
        rl.evaluate("runs/never-made", task=BAD_TASK)
    message = str(got.value)
    assert "https://" not in message and "\n" not in message
    assert message.startswith("invalid configuration: ") and "values" in message
    assert type(got.value.__cause__).__name__ == "ValidationError"  # chained, not lost


def test_the_api_and_the_command_line_give_the_same_line(tmp_path):
    config = {"model": {"name": "mamba"}, "task": BAD_TASK, "train": {"steps": 1}}
    with pytest.raises(RecallLabError) as got:
        rl.train(config, out=tmp_path / "run")
    toml = tmp_path / "bad.toml"
    toml.write_text('[model]\nname = "mamba"\n[task]\nlevels = [[2, 2]]\nvalues = 0\n'
                    '[train]\nsteps = 1\n')
    r = CliRunner().invoke(app, ["train", "--config", str(toml), "--out", str(tmp_path / "c")])
    assert r.exit_code == 2
    assert r.stderr.strip() == f"error: {got.value}"
    assert not (tmp_path / "run").exists()


def test_a_missing_folder_is_the_users_error(tmp_path):
    with pytest.raises(RecallLabError) as got:
        rl.report(tmp_path / "no-such-sweep", out=tmp_path / "out", plots=False)
    assert "no-such-sweep" in str(got.value)
    with pytest.raises(RecallLabError, match="unknown model 'mambaa'; nearest: "):
        rl.check("mambaa", learning=False, speed=False)
