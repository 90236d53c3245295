"""`recall-lab generate / show / presets`: results, and bad input as one line + exit code 2."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from recall_lab.cli import app

runner = CliRunner()


def _one_error_line(result) -> str:
    assert result.exit_code == 2, result.output
    lines = [x for x in result.stderr.splitlines() if x.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.output
    return lines[0]


def test_generate_and_show(tmp_path):
    out = tmp_path / "ds"
    r = runner.invoke(app, ["generate", "--levels", "2,2", "--values", "5", "--out", str(out),
                            "--train", "30", "--valid", "5", "--test", "5", "--workers", "1"])
    assert r.exit_code == 0, r.output
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["counts"] == {"train": 30, "valid": 5, "test": 5}
    assert "30" in r.stdout
    r = runner.invoke(app, ["show", str(out), "--index", "2"])
    assert r.exit_code == 0, r.output
    assert "information" in r.stdout and "inquiry" in r.stdout
    # inquiry shows one '?' per table entry: 2 x 2 = 4
    inquiry = next(line for line in r.stdout.splitlines() if "inquiry" in line)
    assert inquiry.count("?") == 4


def test_show_preset_and_presets():
    r = runner.invoke(app, ["show", "mini-mqar", "--count", "2"])
    assert r.exit_code == 0 and r.stdout.count("information") == 2
    r = runner.invoke(app, ["presets"])
    assert r.exit_code == 0 and "paper-mqjr" in r.stdout and "1058" in r.stdout


@pytest.mark.parametrize(
    "args, message",
    [
        (["--levels", "5", "--values", "4", "--pools", "3"], "table larger than the vocabulary"),
        (["--levels", "0,2", "--values", "4"], "size must be >= 1"),
        (["--levels", "2", "--values", "1"], "values"),
        (["--levels", "2", "--values", "4", "--train", "-1"], "--train must be an integer in [0,"),
        (["no-such-preset"], "unknown preset"),
        (["--levels", "x", "--values", "4"], "cannot read level size"),
        (["mini-mqar", "--levels", "2"], "either a PRESET or --levels"),
        (["mini-mqar", "--shard-size", "1000"], "multiple of 8192"),
    ],
)
def test_generate_bad_input(tmp_path, args, message):
    out = tmp_path / "ds"
    r = runner.invoke(app, ["generate", *args, "--out", str(out), "--workers", "1"])
    assert message in _one_error_line(r)
    assert not out.exists()
    assert list(tmp_path.iterdir()) == []


def test_generate_refuses_non_empty_and_unwritable(tmp_path):
    out = tmp_path / "ds"
    out.mkdir()
    (out / "results.json").write_text("keep me")
    r = runner.invoke(app, ["generate", "mini-mqar", "--out", str(out)])
    assert "not empty" in _one_error_line(r)
    assert (out / "results.json").read_text() == "keep me"
    blocker = tmp_path / "file"
    blocker.write_text("x")
    r = runner.invoke(app, ["generate", "mini-mqar", "--out", str(blocker / "sub")])
    assert "cannot" in _one_error_line(r)


def test_show_bad_input(tmp_path):
    assert "neither a dataset folder nor a preset" in _one_error_line(
        runner.invoke(app, ["show", str(tmp_path / "nothing")]))
    (tmp_path / "manifest.json").write_text("{not json")
    assert "not valid JSON" in _one_error_line(runner.invoke(app, ["show", str(tmp_path)]))


def test_help_texts():
    for cmd in ("generate", "show", "presets", "bench"):
        r = runner.invoke(app, [cmd, "--help"])
        assert r.exit_code == 0
    assert "--levels" in runner.invoke(app, ["generate", "--help"]).stdout
