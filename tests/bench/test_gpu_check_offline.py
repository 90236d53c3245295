"""The offline GPU check (scripts/gpu-check.sh, recall_lab/bench/gpu_check.py): what it imports is
on the GPU machine or among the carried wheels, the pins are whole, a part past its budget is
stopped and reported, earlier results are never written over, and the probe reports what it saw.

The dry run itself (`make gpu-check-dryrun`: a 5 GB stand-in Python with torch 2.11, then the
check with the network cut, about 4 minutes on the 2-core CI machine) is far over this suite's
budget: `test_the_dry_run` runs it only where RECALL_LAB_GPU_DRYRUN=1."""

from __future__ import annotations

import ast
import importlib
import importlib.metadata as md
import importlib.util
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from recall_lab.bench import gpu_check

ROOT = Path(__file__).resolve().parents[2]
# what the `probe` part imports, and through it every later part (the tests/gpu files are read)
# and what the GPU campaign's children import (recall_lab/bench/gpu_campaign.py: its sweeps and
# the ELU probe)
CHECK_MODULES = ("recall_lab.cli", "recall_lab.bench.cuda", "recall_lab.bench.train",
                 "recall_lab.bench.attention", "recall_lab.bench.ssm", "recall_lab.environment",
                 "recall_lab.bench.gpu_campaign", "recall_lab.experiments.engine",
                 "recall_lab.experiments.grid", "recall_lab.train", "recall_lab.mixers.fla_kernels",
                 "recall_lab.mixers.linear_attn")


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _names(path: Path) -> set[str]:
    lines = [ln.split("#")[0].strip() for ln in path.read_text().splitlines()]
    return {_norm(ln.split("==")[0]) for ln in lines if ln}


def _pins() -> dict[str, str]:
    lines = [ln.split("#")[0].strip() for ln in
             (ROOT / "scripts" / "gpu-wheels.txt").read_text().splitlines()]
    pins = [ln.split("==") for ln in lines if ln]
    assert all(len(p) == 2 and p[1] for p in pins), "every wheel pinned as NAME==VERSION"
    assert len({_norm(n) for n, _ in pins}) == len(pins), "one version of each"
    return {_norm(n): v for n, v in pins}


def _top_level_imports(source: str) -> set[str]:
    """Modules a file imports when it is imported: statements at module level (not in a
    function, an `if` or a `try`, where an import is lazy or optional)."""
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Import):
            names |= {a.name.split(".")[0] for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module.split(".")[0])
    return names


def test_what_the_check_imports_is_on_the_gpu_machine_or_carried():
    for mod in CHECK_MODULES:
        importlib.import_module(mod)
    firsts = {"recall_lab", "generators", "proofs", "tests", "__future__"}
    files = [Path(m.__file__) for m in list(sys.modules.values()) if getattr(m, "__file__", None)]
    sources = [f for f in files if f.suffix == ".py" and f.is_relative_to(ROOT)
               and f.relative_to(ROOT).parts[0] in firsts]
    sources += sorted((ROOT / "tests" / "gpu").glob("*.py")) + [ROOT / "tests" / "conftest.py"]
    imported = set().union(*(_top_level_imports(p.read_text()) for p in sources))
    # test helpers imported by bare name (tests/ssm's conftest puts its folder on the path)
    helpers = {p.stem for p in (ROOT / "tests").rglob("*.py")}
    third = imported - set(sys.stdlib_module_names) - firsts - helpers
    dists = md.packages_distributions()
    needed = {_norm(d) for name in third for d in dists.get(name, [name])}
    machine = _names(ROOT / "scripts" / "gpu-machine.txt")
    missing = needed - machine - set(_pins())
    assert not missing, f"imported by the GPU check, neither on the GPU machine nor carried: " \
                        f"{sorted(missing)} (scripts/gpu-wheels.txt)"
    assert "pydantic" in needed - machine  # what the wheels are for


def test_the_pins_carry_what_they_need():
    """Each pinned wheel's own requirements are pinned (at a version that meets them) or on the
    GPU machine (read from the installed metadata where its version is the pinned one)."""
    from packaging.requirements import Requirement

    pins, machine = _pins(), _names(ROOT / "scripts" / "gpu-machine.txt")
    assert "pydantic" in pins and "pydantic" not in machine
    checked = 0
    for name, version in pins.items():
        try:
            if md.version(name) != version:
                continue
        except md.PackageNotFoundError:
            continue
        checked += 1
        for text in md.requires(name) or []:
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate({"extra": ""}):
                continue
            dep = _norm(req.name)
            assert dep in pins or dep in machine, f"{name} needs {dep}"
            if dep in pins:
                assert req.specifier.contains(pins[dep], prereleases=True), (name, text)
    assert checked, "none of the pinned versions is installed here to read its requirements"


def _check(tmp_path, budgets) -> gpu_check.Check:
    return gpu_check.Check(tmp_path, None, tmp_path / "site", cuda=True, full=False,
                           budgets=budgets)


def test_a_part_past_its_budget_is_stopped_and_reported(tmp_path):
    check = _check(tmp_path, {"slow": 0.5, "bad": 30.0})
    slow = check.part("slow", [sys.executable, "-c", "import time; time.sleep(60)"], "x.log")
    assert slow["status"] == "timed out" and slow["wall_s"] < 30
    bad = check.part("bad", [sys.executable, "-c", "print('said'); raise SystemExit(3)"],
                     "x.log")
    assert bad["status"] == "failed" and bad["rc"] == 3
    assert "said" in (tmp_path / "x.log").read_text()
    check.save()
    saved = json.loads((tmp_path / "gpu-check.json").read_text())
    assert [p["name"] for p in saved["parts"]] == ["slow", "bad"]
    summary = (tmp_path / "summary.txt").read_text()
    assert "part slow: timed out in" in summary and "/0.5 s" in summary


def test_earlier_results_and_bad_budgets_are_refused_with_one_line(tmp_path, capsys):
    (tmp_path / "gpu-check.json").write_text("{}")
    assert gpu_check.main(["run", "--no-cuda", "--out", str(tmp_path)]) == 2
    assert (tmp_path / "gpu-check.json").read_text() == "{}"
    for bad in (["--budget", "tests=0"], ["--budget", "nosuch=5"], ["--budget-scale", "0"]):
        assert gpu_check.main(["run", "--no-cuda", "--out", str(tmp_path / "new"), *bad]) == 2
        assert not (tmp_path / "new").exists()
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 4 and all(ln.startswith("error: ") for ln in lines), lines
    assert "earlier check" in lines[0] and "PART=SECONDS" in lines[2]


def test_torch_names_reads_aliases_and_resolves_only_what_exists():
    """scripts/torch_names.py, which the dry run runs on torch 2.11."""
    spec = importlib.util.spec_from_file_location("torch_names",
                                                  ROOT / "scripts" / "torch_names.py")
    names = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(names)
    src = ("import torch\nimport torch.nn.functional as F\nfrom torch import nn\n"
           "torch.cuda.Event\nF.scaled_dot_product_attention\nnn.RMSNorm\ntorch.no_such_api\n")
    found = names.chains(src)
    assert {"torch.cuda.Event", "torch.nn.functional.scaled_dot_product_attention",
            "torch.nn.RMSNorm", "torch.no_such_api"} <= found
    assert names.resolves("torch.nn.functional.scaled_dot_product_attention")
    assert not names.resolves("torch.no_such_api") and not names.resolves("torch.nn.NoSuch")


def test_the_budgets_fit_one_ten_minute_call_and_the_zoo_runs_last():
    assert sum(gpu_check.BUDGETS.values()) <= 540  # a lent machine's call is 600 s at most
    assert list(gpu_check.BUDGETS) == ["wheels", "probe", *gpu_check.OPTIONAL_PARTS]
    assert gpu_check.OPTIONAL_PARTS[-1] == "zoo" and set(gpu_check.TEST_PARTS) == {"tests", "zoo"}
    # every CUDA-marked test file is in exactly one tests part
    files = {p.name for p in (ROOT / "tests" / "gpu").glob("test_*.py")}
    zoo = {Path(a).name for a in gpu_check.TEST_PARTS["zoo"][0] if a.endswith(".py")}
    ignored = {a.split("/")[-1] for a in gpu_check.TEST_PARTS["tests"][0] if "--ignore" in a}
    assert zoo == ignored == {"test_gpu_zoo.py", "test_gpu_mamba3.py"} and zoo < files


# the head and the cut of the zoo tests' `pytest -v` log on the H200 (docs/results/gpu), as the
# rerun left it: the last test was still running when the 250 s cap stopped it
ZOO = "tests/gpu/test_gpu_zoo.py::test_zoo_mixer_on_fla_equals_its_torch_chunked_form"
H200_LOG = (f"collecting ... collected 15 items\n\n"
            f"{ZOO}[linear-attn-elu-float32] PASSED [  6%]\n"
            f"{ZOO}[linear-attn-elu-bfloat16] FAILED [ 13%]\n"
            f"{ZOO}[deltanet-float32] SKIPPED [ 60%]\n"
            f"{ZOO}[deltanet-bfloat16] ")


def test_log_results_read_the_finished_tests_and_the_one_cut():
    cases = gpu_check.log_results(H200_LOG)
    name = "test_gpu_zoo::test_zoo_mixer_on_fla_equals_its_torch_chunked_form"
    assert [(c["id"], c["outcome"]) for c in cases] == [
        (f"{name}[linear-attn-elu-float32]", "passed"),
        (f"{name}[linear-attn-elu-bfloat16]", "failed"),
        (f"{name}[deltanet-float32]", "skipped"),
        (f"{name}[deltanet-bfloat16]", "cut")]
    assert all(c["path"] == "test_gpu_zoo" for c in cases)
    # one test runs at a time: of the node ids without an outcome, the last one was cut
    assert [(c["id"], c["outcome"]) for c in gpu_check.log_results(
        "tests/gpu/test_x.py::t[a]\nother output\n../x/test_x.py::t[b] \nKeyboardInterrupt\n")
    ] == [("test_x::t[b]", "cut")]
    # pytest's -rA summary lines start with the outcome, and are not counted twice
    assert gpu_check.log_results("PASSED tests/gpu/test_x.py::t[a]\n") == []
    text = "\n".join(gpu_check.summary_lines({"tests": cases}))
    assert "FAIL zoo mixers on FLA kernels: 1 passed, 1 failed, 1 skipped, 1 cut" in text
    assert f"{name}[deltanet-bfloat16]: running when the part's budget ran out" in text


SLOW_TESTS = """import signal, time
from pathlib import Path
import pytest

pytestmark = pytest.mark.cuda  # the check's pytest runs -m cuda

def test_a():
    pass

@pytest.mark.skip(reason="x")
def test_b():
    pass

def test_c():
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a test busy in a compiler may
    Path(STARTED).touch()
    time.sleep(120)
"""
EVENT_LIMIT_S = 300.0  # only a broken child waits this long for its event


class _BudgetAtEvent(subprocess.Popen):
    """The part's child, whose budget runs out when test_c has started (its marker file), not
    after a fixed time, and whose grace lasts until pytest has exited where it honours SIGINT:
    the outcome does not depend on how fast a loaded machine starts pytest or writes its
    report."""

    budget_s: float
    started: Path

    def wait(self, timeout=None):
        if timeout == self.budget_s:
            end = time.monotonic() + EVENT_LIMIT_S
            while not self.started.exists() and self.poll() is None and time.monotonic() < end:
                time.sleep(0.05)
            if self.poll() is None:
                raise subprocess.TimeoutExpired(self.args, timeout)
        return super().wait(timeout)


@pytest.mark.parametrize("sigint_ignored", [True, False])
def test_a_tests_part_cut_at_its_budget_keeps_what_finished(tmp_path, monkeypatch,
                                                            sigint_ignored):
    """The H200's first check lost every result when its tests part was killed before pytest
    wrote its junit report. Now the finished tests are kept (from the log where the report is
    missing, from the report where SIGINT let pytest write it) and the running one is "cut"."""
    src = tmp_path / "test_slow.py"
    started = tmp_path / "test_c-started"
    text = SLOW_TESTS.replace("STARTED", repr(str(started)))
    src.write_text(text if sigint_ignored else text.replace("    signal.signal", "    # "))
    out = tmp_path / "out"
    out.mkdir()
    monkeypatch.setitem(gpu_check.TEST_PARTS, "tests", ([str(src)], "junit.xml", 600))
    check = gpu_check.Check(out, None, tmp_path / "site", cuda=True, full=False,
                            budgets={"tests": 90.0}, parts=("tests",))
    # SIGINT ignored: nothing will come of a longer grace; honoured: pytest's exit is the event
    check.grace_s = 1.0 if sigint_ignored else EVENT_LIMIT_S
    child = type("Child", (_BudgetAtEvent,), {"budget_s": 90.0, "started": started})
    monkeypatch.setattr(gpu_check.subprocess, "Popen", child)
    check.tests("tests")
    outcomes = {t["id"].split("::")[1]: t["outcome"] for t in check.result["tests"]}
    assert outcomes == {"test_a": "passed", "test_b": "skipped", "test_c": "cut"}
    assert (out / "junit.xml").exists() != sigint_ignored
    (row,) = check.result["parts"]
    assert row["status"] == "timed out" and row["wall_s"] < 120  # test_c's sleep was cut
    assert not check.passed()  # a cut test is not a test that ran


def test_parts_chooses_what_runs_and_refuses_an_unknown_one(tmp_path, capsys):
    assert gpu_check.main(["run", "--no-cuda", "--out", str(tmp_path / "a"),
                           "--parts", "zoo,nosuch"]) == 2
    assert not (tmp_path / "a").exists()
    (line,) = capsys.readouterr().err.splitlines()
    assert line.startswith("error: --parts takes") and "nosuch" in line


@pytest.mark.skipif(torch.cuda.is_available(), reason="the dry run's probe: no CUDA device")
def test_the_probe_without_cuda_reports_versions_and_the_native_kernels():
    from recall_lab import native

    info = gpu_check.probe(cuda=False)
    assert info["torch"] == torch.__version__ and info["cuda_available"] is False
    assert info["pydantic"] == md.version("pydantic")
    assert info["native"].startswith(("built in", "loaded in")) == native.available()
    assert "dry run" in info["device"]


@pytest.mark.skipif(os.environ.get("RECALL_LAB_GPU_DRYRUN") != "1",
                    reason="minutes and a 5 GB environment: set RECALL_LAB_GPU_DRYRUN=1")
def test_the_dry_run(tmp_path):
    out = tmp_path / "dry"
    res = subprocess.run(["make", "-s", "gpu-check-dryrun"], cwd=ROOT, capture_output=True,
                         text=True, env={**os.environ, "DRYRUN_OUT": str(out)}, check=False)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    result = json.loads((out / "gpu-check.json").read_text())
    assert result["dry_run"] and result["machine"]["torch"].startswith("2.11.")
    assert "recall-lab-gpu-site" in result["machine"]["pydantic_from"]  # the carried wheel
    status = {p["name"]: p["status"] for p in result["parts"]}
    assert status["wheels"] == status["probe"] == "ok"
    assert status["tests"].startswith("ok (all skipped")
    assert status["zoo"].startswith("ok (all skipped")
    assert all(status[b].startswith("ok (stopped at") for b in gpu_check.DEVICE_BENCHES)
    assert len(list(out.iterdir())) <= 8
