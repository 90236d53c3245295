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


def test_the_error_is_exported_where_a_script_catches_it():
    """`rl.RecallLabError` is the class every layer raises, named `recall_lab.RecallLabError`
    in tracebacks (a script's traceback used to end in `generators.errors.RecallLabError`, a
    module the docs never named)."""
    import recall_lab as rl

    assert rl.RecallLabError is RecallLabError and issubclass(rl.RecallLabError, ValueError)
    assert f"{rl.RecallLabError.__module__}.{rl.RecallLabError.__qualname__}" == \
        "recall_lab.RecallLabError"
    with pytest.raises(rl.RecallLabError, match="unknown model 'mambaa'"):
        rl.train({"model": {"name": "mambaa"}, "task": {"preset": "mini-mqar"}})


def test_old_package_names_warn_and_are_the_new_modules():
    """`generators` and `proofs` moved under `recall_lab`; for one release the old names import,
    with a DeprecationWarning, as the very same module objects (isinstance keeps working)."""
    code = ("import warnings, sys; warnings.simplefilter('error', DeprecationWarning)\n"
            "import recall_lab.generators.tasks as new\n"
            "try:\n    import generators\nexcept DeprecationWarning as w:\n    print(w)\n"
            "warnings.simplefilter('ignore')\n"
            "from generators.tasks import BUILTIN\nimport generators.spec, proofs.registry\n"
            "import recall_lab.generators.spec as spec, recall_lab.proofs.registry as reg\n"
            "print(BUILTIN is new.BUILTIN, generators.spec is spec, proofs.registry is reg)")
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout.splitlines()
    assert "import recall_lab.generators instead" in out[0]
    assert out[1] == "True True True"
