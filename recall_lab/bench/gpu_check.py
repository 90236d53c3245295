"""`make gpu-check` / `scripts/gpu-check.sh`: every GPU path tested and timed in one command,
offline, on the Python that already has a CUDA torch; one JSON, one screen.

    python -m recall_lab.bench.gpu_check preflight    # stdlib only: is there an NVIDIA GPU?
    python -m recall_lab.bench.gpu_check run --out DIR [--wheels .whl] [--full] [--no-cuda]

`preflight` imports nothing outside the standard library and exits 1 with one `error:` line on a
machine without an NVIDIA driver. `run` (this process imports only the standard library too; the
work runs in child processes of the same Python, each with a time budget) does, in order:

1. ``wheels``: installs the carried wheels (``--wheels``, default ``.whl/``, made here by
   ``make gpu-wheels``) with ``pip install --no-index --no-deps --target`` into a fresh folder
   that the children find first on ``PYTHONPATH``, with the checkout itself (nothing is built or
   fetched; pip reads no configuration file);
2. ``probe``: imports torch, the carried packages, the whole command line and the device benches,
   builds the native CPU kernels where a C compiler is there (or says that none is), then asks
   torch for CUDA (the first CUDA call) and names the device;
3. ``tests``: ``pytest -m cuda tests/gpu`` without the zoo file (junit XML: pass / fail / skip
   per test and the properties the tests record);
4. ``attention``, ``ssm``, ``train``: ``recall-lab bench NAME --device cuda`` (``--quick``
   unless ``--full``), one process each;
5. ``zoo``: the zoo mixers on FLA's kernels (``tests/gpu/test_gpu_zoo.py``), last, with a longer
   limit per test: the first call of each FLA kernel autotunes, compiling every Triton config
   (on an H200 the first case failed under a 60 s limit and passed under 120 s), so its time is
   the least predictable.
   ``--parts zoo --budget zoo=500`` runs it alone (after wheels and probe) in a second call.

A part that runs past its budget is stopped (SIGINT, then SIGKILL) and reported as such, and the
check goes on; the budgets (`BUDGETS`) add up to nine minutes, inside one 10-minute call. pytest
runs with ``-v``: where a tests part is stopped before pytest writes its junit XML, the outcomes
of the tests that finished are read from its log (:func:`log_results`) and the test running at
the cut is recorded as "cut". ``--no-cuda`` is the dry run of a
machine without a GPU (`make gpu-check-dryrun`): the same parts, where the tests must all skip
for want of CUDA and each bench must stop with the one-line "CUDA is not available" error, so
everything up to the first CUDA call is shown to work.

Under ``--out DIR`` (refused if it holds an earlier check, unless ``--force``): ``gpu-check.json``
(`{"machine", "parts", "tests", "bench"}`, rewritten after every part), ``summary.txt`` (what
:func:`summary_lines` prints), ``junit.xml``, ``junit-zoo.xml``, ``setup.log``, ``tests.log``,
``bench.log``. Exit 0 only when every test ran without failing or being cut (in the dry run:
when every part did what it should); a bench that fails is reported, not fatal.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATHS = {"test_gpu_attention": "triton sparse attention", "test_gpu_ssm": "ssm scans (cuda)",
         "test_gpu_train": "training cuda vs cpu", "test_gpu_zoo": "zoo mixers on FLA kernels",
         "test_gpu_mamba3": "mamba3 vs mamba-ssm's kernel"}
# properties summed up in their file's row (one per test would not fit one screen): the largest
# `max_rel_err`, and how many `self_check` verdicts passed (failed ones are listed)
ROW_PROPERTIES = ("max_rel_err", "self_check")
DEVICE_BENCHES = ("attention", "ssm", "train")
# seconds per part, in the order they run; together nine minutes, so that the whole check fits
# one 10-minute call of a lent machine (--budget PART=SECONDS changes one). Sized from the first
# run on an H200 (docs/results/gpu): wheels 1 s, probe 14 s, attention 44 s, ssm 8 s; train ran
# past 60 s, and the zoo's first case failed under a 60 s limit (autotuning, most likely)
BUDGETS = {"wheels": 20, "probe": 40, "tests": 120, "attention": 60, "ssm": 30, "train": 120,
           "zoo": 150}
# the test parts: pytest's arguments, its junit file and the limit per test (pytest-timeout,
# where installed)
# the zoo part: the zoo on FLA's kernels, and Mamba-3 against mamba-ssm's (its Triton kernels
# compile on first call too)
ZOO_FILES = ("tests/gpu/test_gpu_zoo.py", "tests/gpu/test_gpu_mamba3.py")
TEST_PARTS = {
    "tests": (["tests/gpu", *(f"--ignore={f}" for f in ZOO_FILES)], "junit.xml", 60),
    "zoo": (list(ZOO_FILES), "junit-zoo.xml", 180),
}
OPTIONAL_PARTS = ("tests", *DEVICE_BENCHES, "zoo")  # what --parts chooses from
FILES = ("gpu-check.json", "summary.txt", "junit.xml", "junit-zoo.xml", "setup.log", "tests.log",
         "bench.log")
# `pytest -v` prints a test's node id, then its outcome on the same line when it ends
LOG_LINE = re.compile(r"^(?:\S+/)?(?P<stem>\w+)\.py::(?P<name>\S+)"
                      r"(?: (?P<word>PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b)?")
LOG_OUTCOMES = {"PASSED": "passed", "XPASS": "passed", "FAILED": "failed", "ERROR": "failed",
                "SKIPPED": "skipped", "XFAIL": "skipped"}
FROM_LOG = "read from the log: the part was stopped before pytest wrote its report"
NO_CUDA_LINE = "CUDA is not available"  # recall_lab.device's error for --device cuda


def no_gpu_reason() -> str | None:
    """Why this machine has no NVIDIA GPU to check, or None (driver files only, no imports)."""
    if Path("/proc/driver/nvidia/version").exists() or shutil.which("nvidia-smi"):
        return None
    return "no NVIDIA GPU driver on this machine (no /proc/driver/nvidia, no nvidia-smi): " \
           "make gpu-check needs a CUDA device"


def junit_results(xml_text: str) -> list[dict]:
    """One dict per test case of a pytest junit XML: id, path (file stem), outcome (passed,
    failed, skipped), message, properties."""
    cases = []
    for case in ET.fromstring(xml_text).iter("testcase"):
        if case.get("name") is None:  # the nameless entry a KeyboardInterrupt leaves
            continue
        outcome, message = "passed", ""
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = "skipped" if tag == "skipped" else "failed"
                message = ((node.get("message") or "").splitlines() or [""])[0][:200]
                break
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        stem = case.get("classname", "").split(".")[-1]
        cases.append({"id": f"{stem}::{case.get('name')}", "path": stem, "outcome": outcome,
                      "message": message, "properties": props})
    return cases



def log_results(text: str) -> list[dict]:
    """The tests a `pytest -v` log shows, for a part stopped before pytest wrote its junit XML:
    each finished test with its outcome, and the test that was running at the cut (the last
    node id with no outcome after it) as outcome "cut". Messages, skip reasons
    and properties are in the report that was not written, so they are left empty."""
    cases, running = [], None
    for line in text.splitlines():
        m = LOG_LINE.match(line.strip())
        if not m:
            continue
        case = {"id": f"{m['stem']}::{m['name']}", "path": m["stem"], "properties": {}}
        if m["word"] is None:  # started, not ended (yet): only the last such one was cut
            running = case | {"outcome": "cut", "message": "running when the part's budget "
                              "ran out"}
        else:
            cases.append(case | {"outcome": LOG_OUTCOMES[m["word"]], "message": FROM_LOG})
            running = None if running and running["id"] == case["id"] else running
    return cases + ([running] if running else [])

def _ms(row: dict) -> str:
    t = row.get("time_s")
    return f"{t['median'] * 1e3:.2f}" if t else "-"


def _part_line(p: dict) -> str:
    budget = f"/{p['budget_s']:g}" if p.get("budget_s") else ""
    note = f": {p['note']}" if p.get("note") else ""
    return f"  part {p['name']}: {p['status']} in {p.get('wall_s', 0):.1f}{budget} s{note}"


def summary_lines(result: dict) -> list[str]:
    """The one-screen summary of a gpu-check result (the JSON `run` writes)."""
    machine = result.get("machine", {})
    lines = [f"gpu-check on {machine.get('device', '?')} (torch {machine.get('torch', '?')}, "
             f"mamba-ssm {machine.get('mamba_ssm') or 'not installed'}, "
             f"fla-core {machine.get('fla') or 'not installed'})"]
    if machine.get("native"):
        lines.append(f"  native cpu kernels: {machine['native']}")
    if machine.get("pydantic"):
        lines.append(f"  pydantic {machine['pydantic']} from {machine.get('pydantic_from', '?')}")
    lines += [_part_line(p) for p in result.get("parts", [])]
    tests = result.get("tests", [])
    for stem, label in PATHS.items():
        mine = [t for t in tests if t["path"] == stem]
        failed = [t for t in mine if t["outcome"] == "failed"]
        passed = sum(t["outcome"] == "passed" for t in mine)
        cut = [t for t in mine if t["outcome"] == "cut"]
        verdict = "FAIL" if failed else "CUT" if cut else ("PASS" if passed else "SKIP")
        errs = [float(t["properties"]["max_rel_err"]) for t in mine
                if "max_rel_err" in t["properties"]]
        checks = [(t["id"], t["properties"]["self_check"]) for t in mine
                  if "self_check" in t["properties"]]
        bad = [(i, c) for i, c in checks if c != "passed"]
        lines.append(f"  {verdict:4} {label}: {passed} passed, {len(failed)} failed, "
                     f"{len(mine) - passed - len(failed) - len(cut)} skipped"
                     + (f", {len(cut)} cut at the part's budget (the rest not reached)"
                        if cut else "")
                     + (f"; largest max rel err {max(errs):.1e}" if errs else "")
                     + (f"; self-checks {len(checks) - len(bad)} of {len(checks)} passed"
                        if checks else ""))
        lines += [f"         {t['id']}: {t['message']}" for t in failed[:3] + cut[:1]]
        lines += [f"         {i}: self-check {c}"[:200] for i, c in bad[:3]]
    for t in tests:
        for name, value in t["properties"].items():
            if name not in ROW_PROPERTIES:
                lines.append(f"  note {t['id']}: {name} = {value}")
    bench = result.get("bench") or {}
    if "error" in bench:
        lines.append(f"  bench failed: {bench['error']}")
    attn = bench.get("attention", {}).get("rows", [])
    if attn:
        lines.append("  attention fwd+bwd ms (B x L: ours | torch | flex | sdpa; ours peak MB):")
        for shape in dict.fromkeys((r["B"], r["L"]) for r in attn):
            by = {r["method"]: r for r in attn if (r["B"], r["L"]) == shape}
            ours = by.get("ours", {})
            err = ours.get("max_rel_err")
            lines.append(f"    {shape[0]} x {shape[1]}: " + " | ".join(
                _ms(by.get(m, {})) for m in ("ours", "ours-torch", "flex", "sdpa"))
                + f"; {ours.get('peak_mb', 0):.0f} MB"
                + ("" if err is None else f"; ours max rel err {err:.1e}"))
    for r in bench.get("ssm", {}).get("rows", []):
        tps = r.get("tokens_per_s")
        lines.append(f"  ssm {r['mixer']} {r['B']}x{r['L']} {r['implementation']}: "
                     + (f"{tps / 1e3:.0f}k tokens/s, {r['peak_mb']:.0f} MB" if tps
                        else r.get("missing") or f"error: {r.get('error')}"))
    for r in bench.get("train", {}).get("rows", []):
        if r.get("failed"):
            lines.append(f"  train {r['model']}: failed")
        else:
            lines.append(f"  train {r['model']}: {r['wall_s']['median'] * 1e3:.0f} ms/step "
                         f"({r.get('device', '?')})")
    return lines


def probe(cuda: bool) -> dict:
    """What the check runs on (printed as JSON by the `probe` part): the imports every later part
    needs, the native CPU kernels (built here when a C compiler is there), then CUDA."""
    import platform

    import pydantic
    import torch

    import recall_lab.cli  # noqa: F401  every command module, as `recall-lab` loads them
    from recall_lab import native
    from recall_lab.bench import cuda as cuda_bench  # noqa: F401  the device benches
    from recall_lab.bench import train  # noqa: F401
    from recall_lab.bench.record import package_version

    compiler = native._compiler()
    built = native.cache_dir() / "native"
    before = set(built.glob("*.so")) if built.is_dir() else set()
    t0 = time.perf_counter()
    lib, why = native.load()
    fresh = bool(set(built.glob("*.so")) - before) if built.is_dir() else False
    info = {"python": platform.python_version(), "torch": torch.__version__,
            "torch_cuda": torch.version.cuda, "triton": package_version("triton"),
            "mamba_ssm": package_version("mamba-ssm"), "fla": package_version("fla-core"),
            "pydantic": pydantic.VERSION,
            "pydantic_from": str(Path(pydantic.__file__).parent.parent),
            "compiler": compiler,
            "native": (f"{'built' if fresh else 'loaded'} in {time.perf_counter() - t0:.1f} s"
                       if lib is not None
                       else ("not built: no C compiler ($CC, cc, gcc); the CPU sides take the "
                             "torch paths" if compiler is None else f"not built: {why}")),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    info["cuda_available"] = torch.cuda.is_available()  # the first CUDA call
    if cuda and info["cuda_available"]:
        info["device"] = torch.cuda.get_device_name(0)
        info["capability"] = ".".join(map(str, torch.cuda.get_device_capability(0)))
    elif not cuda:
        info["device"] = "none (dry run: the CUDA parts stop at the first CUDA call)"
    return info


class Check:
    """One `run`: the parts in order, each in a child process with its budget, the results
    written under `out` after every part."""

    def __init__(self, out: Path, wheels: Path | None, site: Path, cuda: bool, full: bool,
                 budgets: dict[str, float], parts: tuple[str, ...] = OPTIONAL_PARTS):
        self.out, self.wheels, self.site, self.cuda, self.full = out, wheels, site, cuda, full
        self.budgets, self.parts = budgets, parts
        self.grace_s = 15.0  # from SIGINT to SIGKILL: time for pytest to write its report
        # the GPU campaign (recall_lab/bench/gpu_campaign.py) sets these: a test part's limit
        # per test (default TEST_PARTS'), and node ids an earlier lease finished (not rerun)
        self.per_test: dict[str, float] = {}
        self.deselect: list[str] = []
        self.result: dict = {"machine": {}, "parts": [], "tests": [], "bench": {},
                             "dry_run": not cuda, "budgets_s": budgets}
        paths = [str(site), str(ROOT)] + [p for p in os.environ.get("PYTHONPATH", "").split(
            os.pathsep) if p]
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "PYTHONUNBUFFERED": "1",
                    "PIP_CONFIG_FILE": os.devnull, "PIP_NO_INDEX": "1"}
        for key in ("PIP_FIND_LINKS", "PIP_INDEX_URL", "PIP_EXTRA_INDEX_URL", "PIP_CONSTRAINT"):
            self.env.pop(key, None)

    def part(self, name: str, cmd: list[str], log: str) -> dict:
        """Run `cmd` from the checkout with the part's budget; its output goes to `log`."""
        budget = self.budgets[name]
        row: dict = {"name": name, "budget_s": budget}
        t0 = time.perf_counter()
        with open(self.out / log, "a") as fh:
            fh.write(f"### {name}: {' '.join(cmd)}\n")
            fh.flush()
            proc = subprocess.Popen(cmd, cwd=ROOT, env=self.env, stdout=fh,
                                    stderr=subprocess.STDOUT, start_new_session=True)
            try:
                row["rc"] = proc.wait(timeout=budget)
                row["status"] = "ok" if row["rc"] == 0 else "failed"
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGINT)  # pytest still writes its junit XML
                try:
                    proc.wait(timeout=self.grace_s)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                row["rc"], row["status"] = proc.returncode, "timed out"
        row["wall_s"] = round(time.perf_counter() - t0, 2)
        self.result["parts"].append(row)
        return row

    def save(self) -> None:
        (self.out / "gpu-check.json").write_text(json.dumps(self.result, indent=2))
        (self.out / "summary.txt").write_text("\n".join(summary_lines(self.result)) + "\n")

    def install_wheels(self) -> bool:
        shutil.rmtree(self.site, ignore_errors=True)
        self.site.mkdir(parents=True)
        if self.wheels is None:
            self.result["parts"].append({"name": "wheels", "status": "none carried",
                                         "note": "--no-wheels"})
            return True
        wheels = sorted(str(w) for w in self.wheels.glob("*.whl")) if self.wheels.is_dir() else []
        if not wheels:
            self.result["parts"].append({"name": "wheels", "status": "none carried",
                                         "note": f"no wheels in {self.wheels}"})
            return True
        row = self.part("wheels", [sys.executable, "-m", "pip", "install", "--quiet",
                                   "--no-index", "--no-deps", "--no-compile", "--no-cache-dir",
                                   "--disable-pip-version-check", "--target", str(self.site),
                                   *wheels], "setup.log")
        row["note"] = ", ".join(Path(w).name.split("-")[0] + " " + Path(w).name.split("-")[1]
                                for w in wheels)
        return row["status"] == "ok"

    def probe(self) -> bool:
        out = self.out / "probe.json"
        cmd = [sys.executable, "-m", "recall_lab.bench.gpu_check", "probe", "--json", str(out)]
        row = self.part("probe", cmd + ([] if self.cuda else ["--no-cuda"]), "setup.log")
        if out.exists():
            self.result["machine"] = json.loads(out.read_text())
            out.unlink()
            row["note"] = f"native cpu kernels {self.result['machine']['native']}"
        if row["status"] == "ok" and self.cuda and not self.result["machine"]["cuda_available"]:
            row["status"], row["note"] = "failed", "torch sees no CUDA device (a CPU torch?)"
        return row["status"] == "ok"

    def tests(self, name: str = "tests") -> None:
        """A tests part (`TEST_PARTS`): its outcomes from pytest's junit XML, or, where the part
        was stopped before pytest wrote it, from the `-v` log (the running test is "cut")."""
        args, junit, per_test = TEST_PARTS[name]
        xml = self.out / junit
        cmd = [sys.executable, "-m", "pytest", "-m", "cuda", "-v", "-rA", "-p",
               "no:cacheprovider", *args, f"--junitxml={xml}", "-o", "junit_logging=no"]
        if _has_module("pytest_timeout"):
            cmd.append(f"--timeout={self.per_test.get(name, per_test):g}")
        cmd += [f"--deselect={node}" for node in self.deselect]
        log = self.out / "tests.log"
        before = log.stat().st_size if log.exists() else 0
        row = self.part(name, cmd, "tests.log")
        with open(log) as fh:
            fh.seek(before)
            from_log = log_results(fh.read())
        mine = junit_results(xml.read_text()) if xml.exists() else from_log
        if xml.exists() and row["status"] == "timed out":  # pytest's report omits the cut test
            mine += [t for t in from_log if t["outcome"] == "cut"]
        self.result["tests"] += mine
        counts = {o: sum(t["outcome"] == o for t in mine)
                  for o in ("passed", "failed", "skipped", "cut")}
        row["note"] = ", ".join(f"{n} {o}" for o, n in counts.items() if n or o != "cut")
        if not xml.exists() and mine:
            row["note"] += " (read from the log)"
        if row["status"] == "failed" and counts["failed"]:
            row["status"] = "tests failed"
        if not self.cuda:  # the dry run: every test collected, every one skipped for want of CUDA
            ok = counts["skipped"] > 0 and counts["skipped"] == len(mine)
            row["status"] = "ok (all skipped: no CUDA)" if ok else "failed"

    def bench(self, name: str) -> None:
        tmp = self.out / f"bench-{name}.json"
        cmd = [sys.executable, "-m", "recall_lab.cli", "bench", name, "--device", "cuda",
               "--json", str(tmp), "--force"] + ([] if self.full else ["--quick"])
        before = (self.out / "bench.log").stat().st_size if (self.out / "bench.log").exists() \
            else 0
        row = self.part(name, cmd, "bench.log")
        if tmp.exists():
            self.result["bench"][name] = json.loads(tmp.read_text()).get(name, {})
            tmp.unlink()
        with open(self.out / "bench.log") as fh:
            fh.seek(before)
            said = [ln.strip() for ln in fh.read().splitlines() if ln.strip()]
        if not self.cuda:  # must stop at the device check with the one-line error, exit 2
            stopped = row.get("rc") == 2 and said and NO_CUDA_LINE in said[-1]
            row["status"] = "ok (stopped at the first CUDA call)" if stopped else "failed"
            row["note"] = said[-1][:160] if said else ""
        elif row["status"] != "ok":
            row["note"] = said[-1][:160] if said else ""

    def passed(self) -> bool:
        if not self.cuda:
            return all(p["status"].startswith(("ok", "none carried"))
                       for p in self.result["parts"])
        tests = self.result["tests"]
        stopped = any(p["name"] in TEST_PARTS and p["status"] == "timed out"
                      for p in self.result["parts"])
        return bool(tests) and not stopped and not any(
            t["outcome"] in ("failed", "cut") for t in tests) and any(
            t["outcome"] == "passed" for t in tests)

    def run(self) -> int:
        steps = [self.install_wheels, self.probe]
        for step in steps:
            ok = step()
            self.save()
            if not ok:
                print("\n".join(summary_lines(self.result)))
                print(f"error: part {self.result['parts'][-1]['name']} failed; see "
                      f"{self.out / 'setup.log'}", file=sys.stderr)
                return 1
        for name in self.parts:
            self.tests(name) if name in TEST_PARTS else self.bench(name)
            self.save()
        print("\n".join(summary_lines(self.result)))
        print(f"written to {self.out}/ ({', '.join(f for f in FILES if (self.out / f).exists())})")
        return 0 if self.passed() else 1


def _has_module(name: str) -> bool:
    res = subprocess.run([sys.executable, "-c", f"import {name}"], capture_output=True,
                         check=False)
    return res.returncode == 0


def _budgets(items: list[str]) -> dict[str, float]:
    budgets = dict(BUDGETS)
    for item in items:
        name, _, value = item.partition("=")
        try:
            seconds = float(value)
        except ValueError:
            seconds = -1.0
        if name not in budgets or seconds <= 0:
            raise ValueError(f"--budget takes PART=SECONDS with PART one of "
                             f"{', '.join(budgets)}, got {item!r}")
        budgets[name] = seconds
    return budgets


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("preflight")
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, default=None,
                   help="folder for the results (default runs/gpu-check-<UTC time>)")
    r.add_argument("--wheels", type=Path, default=ROOT / ".whl",
                   help="the carried wheels (make gpu-wheels)")
    r.add_argument("--no-wheels", action="store_true",
                   help="install no carried wheels (a Python that already has every package)")
    r.add_argument("--site", type=Path, default=None,
                   help="where the wheels are installed (default: a fresh temporary folder)")
    r.add_argument("--full", action="store_true", help="the benches' full sizes (slower)")
    r.add_argument("--no-cuda", action="store_true",
                   help="dry run without a GPU: every part up to its first CUDA call")
    r.add_argument("--budget", action="append", default=[], metavar="PART=SECONDS")
    r.add_argument("--budget-scale", type=float, default=1.0, metavar="X",
                   help="every budget times X (the dry run on a small shared CPU)")
    r.add_argument("--parts", default=",".join(OPTIONAL_PARTS), metavar="LIST",
                   help="the parts to run after wheels and probe, comma-separated, in the "
                        f"check's order (default: {','.join(OPTIONAL_PARTS)})")
    r.add_argument("--force", action="store_true", help="write over an earlier check in --out")
    p = sub.add_parser("probe")  # the `probe` part, in a child process
    p.add_argument("--json", type=Path, required=True)
    p.add_argument("--no-cuda", action="store_true")
    args = ap.parse_args(argv)
    if args.cmd == "probe":
        args.json.write_text(json.dumps(probe(cuda=not args.no_cuda), indent=2))
        return 0
    reason = None if getattr(args, "no_cuda", False) else no_gpu_reason()
    if reason:  # first, before anything is installed or imported
        print(f"error: {reason}", file=sys.stderr)
        return 1
    if args.cmd == "preflight":
        return 0
    if not args.budget_scale > 0:
        print("error: --budget-scale must be a positive number", file=sys.stderr)
        return 2
    try:
        budgets = {k: v * args.budget_scale for k, v in _budgets(args.budget).items()}
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    chosen = [x.strip() for x in args.parts.split(",") if x.strip()]
    unknown = [x for x in chosen if x not in OPTIONAL_PARTS]
    if unknown or not chosen:
        print(f"error: --parts takes a comma-separated list of {', '.join(OPTIONAL_PARTS)}, "
              f"got {args.parts!r}", file=sys.stderr)
        return 2
    parts = tuple(x for x in OPTIONAL_PARTS if x in chosen)
    out = args.out or ROOT / "runs" / time.strftime("gpu-check-%Y%m%d-%H%M%S", time.gmtime())
    if out.exists() and not out.is_dir():
        print(f"error: --out {out} is a file, not a folder", file=sys.stderr)
        return 2
    earlier = [f for f in FILES if (out / f).exists()]
    if earlier and not args.force:
        print(f"error: {out} holds an earlier check ({earlier[0]}); pass --force or choose "
              "another --out", file=sys.stderr)
        return 2
    out.mkdir(parents=True, exist_ok=True)
    for f in earlier:
        (out / f).unlink()
    with tempfile.TemporaryDirectory(prefix="recall-lab-gpu-site-") as tmp:
        site = args.site or Path(tmp)
        wheels = None if args.no_wheels else args.wheels
        return Check(out.resolve(), wheels, site, not args.no_cuda, args.full, budgets,
                     parts).run()


if __name__ == "__main__":
    sys.exit(main())
