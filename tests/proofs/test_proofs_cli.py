"""`recall-lab prove`: table rows, JSON evidence, exit codes."""

import json

from typer.testing import CliRunner

import recall_lab.proofs.lsh_equivalence as lsh_mod
from recall_lab.cli import app
from recall_lab.proofs.evidence import Evidence

runner = CliRunner()


def test_prove_writes_json_and_refuses_overwrite(tmp_path):
    out = tmp_path / "proofs.json"
    res = runner.invoke(app, ["prove", "lsh_equivalence", "--out", str(out)])
    assert res.exit_code == 0, res.output
    data = json.loads(out.read_text())
    assert [r["name"] for r in data["results"]] == ["lsh_equivalence"]
    assert data["results"][0]["verdict"] == "PASS"
    assert "PASS" in res.output
    again = runner.invoke(app, ["prove", "lsh_equivalence", "--out", str(out)])
    assert again.exit_code == 2
    assert "--force" in again.output


def test_unknown_statement_is_one_line_exit_2():
    res = runner.invoke(app, ["prove", "nonsense"])
    assert res.exit_code == 2
    assert "unknown statement 'nonsense'" in res.output
    assert "Traceback" not in res.output


def test_unknown_scale_exit_2():
    res = runner.invoke(app, ["prove", "cisa", "--scale", "huge"])
    assert res.exit_code == 2 and "unknown scale" in res.output


def test_failing_check_gives_nonzero_exit(monkeypatch):
    def broken(scale="small", seed=0):
        return Evidence(name="lsh_equivalence", statement="App. A", checked="x",
                        measured="agreement 0.5", passed=False)

    monkeypatch.setattr(lsh_mod, "check", broken)
    res = runner.invoke(app, ["prove", "lsh_equivalence"])
    assert res.exit_code == 1
    assert "FAIL" in res.output
