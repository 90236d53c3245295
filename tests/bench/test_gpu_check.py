"""`make gpu-check`: the target and its script exist, a machine without a GPU stops at once with
one line (nothing installed), and the summary reads a fake result correctly."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from recall_lab.bench import gpu_check

ROOT = Path(__file__).resolve().parents[2]

JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">
<testcase classname="tests.gpu.test_gpu_attention" name="test_long_rows[8192-64]" time="1"/>
<testcase classname="tests.gpu.test_gpu_attention" name="test_atomic_backward_determinism">
  <properties><property name="max_rel_diff" value="3.1e-07"/></properties></testcase>
<testcase classname="tests.gpu.test_gpu_ssm" name="test_ssd_gated_and_seq_idx_resets[True]">
  <failure message="AssertionError: {'out': 0.3}&#10;more">trace</failure></testcase>
<testcase classname="tests.gpu.test_gpu_train" name="test_cuda_and_cpu_losses_agree[mamba+hax]">
  <skipped message="needs a CUDA device"/></testcase>
<testcase time="0.000" />
</testsuite></testsuites>"""  # the last entry: what pytest writes for a test a SIGINT stopped


def _recipe(make: str, target: str) -> list[str]:
    """The recipe lines of `target` (conditional lines included)."""
    block = re.search(rf"^{target}:.*\n((?:(?:\t|ifeq|else|endif).*\n)+)", make, re.M)
    assert block, f"no {target} target"
    return block.group(1).splitlines()


def test_the_target_runs_preflight_first_then_the_script():
    steps = _recipe((ROOT / "Makefile").read_text(), "gpu-check")
    online = steps[steps.index("else") + 1:steps.index("endif")]
    assert "gpu_check preflight" in online[0]  # before anything is installed
    assert any("[dev,bench,cuda]" in s for s in online)
    assert "scripts/gpu-check.sh" in online[-1]
    offline = steps[steps.index("ifeq ($(OFFLINE),1)") + 1:steps.index("else")]
    assert offline == ["\tPYTHON=$(PYTHON) bash scripts/gpu-check.sh "
                       "$(if $(GPU_OUT),--out $(GPU_OUT))"]
    script = (ROOT / "scripts" / "gpu-check.sh").read_text()
    assert "gpu_check preflight" in script and "gpu_check run" in script
    assert (ROOT / "recall_lab" / "bench" / "gpu_check.py").is_file()


@pytest.mark.skipif(gpu_check.no_gpu_reason() is None, reason="this machine has an NVIDIA GPU")
@pytest.mark.parametrize("offline", [False, True])
def test_make_gpu_check_without_a_gpu_is_one_line_and_installs_nothing(tmp_path, offline):
    args = ["make", "-s", "gpu-check", f"VENV={tmp_path / 'venv'}",
            f"GPU_OUT={tmp_path / 'out'}"] + (["OFFLINE=1"] if offline else [])
    res = subprocess.run(args, cwd=ROOT, capture_output=True, text=True, timeout=120,
                         check=False)
    assert res.returncode != 0
    ours = [x for x in res.stderr.splitlines() if x.startswith("error:")]
    assert len(ours) == 1 and "needs a CUDA device" in ours[0], res.stderr
    assert "Traceback" not in res.stderr + res.stdout
    assert not (tmp_path / "venv").exists()  # stopped before the venv step
    assert not (tmp_path / "out").exists()  # and before the check wrote anything


def test_junit_results_read_outcomes_messages_and_properties():
    cases = {c["id"]: c for c in gpu_check.junit_results(JUNIT)}
    assert [c["outcome"] for c in cases.values()] == ["passed", "passed", "failed", "skipped"]
    fail = cases["test_gpu_ssm::test_ssd_gated_and_seq_idx_resets[True]"]
    assert fail["message"] == "AssertionError: {'out': 0.3}"  # first line only
    det = cases["test_gpu_attention::test_atomic_backward_determinism"]
    assert det["properties"] == {"max_rel_diff": "3.1e-07"}


def test_summary_of_a_fake_result():
    result = {
        "machine": {"device": "FAKE H100", "torch": "2.13.0", "mamba_ssm": None},
        "tests": gpu_check.junit_results(JUNIT),
        "bench": {
            "attention": {"rows": [
                {"B": 64, "L": 1058, "method": "ours", "time_s": {"median": 0.002},
                 "peak_mb": 120.4, "max_rel_err": 2e-7},
                {"B": 64, "L": 1058, "method": "ours-torch", "time_s": {"median": 0.010}},
                {"B": 64, "L": 1058, "method": "flex", "time_s": {"median": 0.004}},
                {"B": 64, "L": 1058, "method": "sdpa", "error": "OutOfMemoryError: x"}]},
            "ssm": {"rows": [
                {"mixer": "mamba", "B": 64, "L": 1058, "implementation": "ours",
                 "tokens_per_s": 2.5e6, "peak_mb": 300.0},
                {"mixer": "mamba", "B": 64, "L": 1058, "implementation": "mamba-ssm",
                 "missing": "mamba-ssm not installed"}]},
            "train": {"rows": [{"model": "mamba+hax", "wall_s": {"median": 0.05},
                                "device": "cuda"}, {"model": "samba", "failed": True}]},
        },
    }
    zoo = [{"id": f"test_gpu_zoo::t[{i}]", "path": "test_gpu_zoo", "outcome": outcome,
            "message": "", "properties": props} for i, (outcome, props) in enumerate([
                ("passed", {"self_check": "passed", "max_rel_err": "2.5e-03"}),
                ("passed", {"self_check": "passed", "max_rel_err": "1.1e-02"}),
                ("skipped", {"self_check": "FAILED: RuntimeError: Triton on Hopper"})])]
    result["tests"] += zoo
    lines = gpu_check.summary_lines(result)
    text = "\n".join(lines)
    assert ("PASS zoo mixers on FLA kernels: 2 passed, 0 failed, 1 skipped; largest max rel "
            "err 1.1e-02; self-checks 2 of 3 passed") in text
    assert "test_gpu_zoo::t[2]: self-check FAILED: RuntimeError: Triton on Hopper" in text
    assert "note test_gpu_zoo" not in text  # summed up in the row, not one line per test
    assert lines[0].startswith("gpu-check on FAKE H100") and "mamba-ssm not installed" in lines[0]
    assert "PASS triton sparse attention: 2 passed, 0 failed, 0 skipped" in text
    assert "FAIL ssm scans (cuda): 0 passed, 1 failed, 0 skipped" in text
    assert "test_ssd_gated_and_seq_idx_resets[True]: AssertionError" in text
    assert "SKIP training cuda vs cpu: 0 passed, 0 failed, 1 skipped" in text
    assert "max_rel_diff = 3.1e-07" in text
    assert "64 x 1058: 2.00 | 10.00 | 4.00 | -; 120 MB; ours max rel err 2.0e-07" in text
    assert "ssm mamba 64x1058 ours: 2500k tokens/s, 300 MB" in text
    assert "ssm mamba 64x1058 mamba-ssm: mamba-ssm not installed" in text
    assert "train mamba+hax: 50 ms/step (cuda)" in text and "train samba: failed" in text
    assert len(lines) <= 40  # one screen
