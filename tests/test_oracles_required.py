"""`make test` requires the test oracles (RECALL_LAB_REQUIRE_ORACLES=1, tests/conftest.py): a test
that skips for a missing oracle fails there, while a plain `pytest` still skips it; the summary
counts each oracle's tests."""

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TEST = "tests/models/test_adapters.py::test_same_trainable_set_and_outputs_as_peft"


def _run(tmp_path, require: bool) -> subprocess.CompletedProcess:
    hide = tmp_path / "hide"
    hide.mkdir(exist_ok=True)
    (hide / "peft.py").write_text("raise ModuleNotFoundError(\"No module named 'peft'\")\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(hide), str(ROOT)])}
    env.pop("RECALL_LAB_REQUIRE_ORACLES", None)
    if require:
        env["RECALL_LAB_REQUIRE_ORACLES"] = "1"
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p",
                           "no:cacheprovider", TEST], cwd=ROOT, env=env, capture_output=True,
                          text=True)


def test_a_missing_oracle_fails_when_required(tmp_path):
    """Under `make test`'s setting the peft test, skipped for its hidden oracle, fails, and the
    summary counts it (a plain `pytest` skips it: the conversion applies only when required)."""
    required = _run(tmp_path, require=True)
    assert required.returncode == 1 and "1 failed" in required.stdout, required.stdout
    assert "peft (a test oracle) is missing" in required.stdout
    assert "oracle tests (required)" in required.stdout
    assert "peft: 0 passed, 1 failed, 0 skipped" in required.stdout
