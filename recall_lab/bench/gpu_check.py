"""`make gpu-check`: every GPU path tested and timed in one command, one JSON, one screen.

    python -m recall_lab.bench.gpu_check preflight    # stdlib only: is there an NVIDIA GPU?
    python -m recall_lab.bench.gpu_check run [--out FILE] [--full]

`preflight` runs before anything is installed (it imports nothing outside the standard library)
and exits 1 with one `error:` line on a machine without an NVIDIA driver. `run` checks that torch
sees CUDA, runs the CUDA-marked tests (`pytest -m cuda tests/gpu`, junit XML: pass / fail / skip
per test and the properties the tests record, e.g. the atomic-add backward's run-to-run
difference), then `recall-lab bench attention ssm train --device cuda` (`--quick` unless
`--full`), writes `{"machine", "tests", "bench"}` to FILE (default
runs/gpu-check-<UTC time>.json) and prints :func:`summary_lines`. Exit 0 only when no test
failed; a bench that fails is reported, not fatal. The JSON and the printed summary are what go
into docs/results/gpu/.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

PATHS = {"test_gpu_attention": "triton sparse attention", "test_gpu_ssm": "mamba-ssm scans",
         "test_gpu_train": "training cuda vs cpu"}


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


def _ms(row: dict) -> str:
    t = row.get("time_s")
    return f"{t['median'] * 1e3:.2f}" if t else "-"


def summary_lines(result: dict) -> list[str]:
    """The one-screen summary of a gpu-check result (the JSON `run` writes)."""
    machine = result.get("machine", {})
    lines = [f"gpu-check on {machine.get('device', '?')} (torch {machine.get('torch', '?')}, "
             f"mamba-ssm {machine.get('mamba_ssm') or 'not installed'})"]
    tests = result.get("tests", [])
    for stem, label in PATHS.items():
        mine = [t for t in tests if t["path"] == stem]
        failed = [t for t in mine if t["outcome"] == "failed"]
        passed = sum(t["outcome"] == "passed" for t in mine)
        verdict = "FAIL" if failed else ("PASS" if passed else "SKIP")
        lines.append(f"  {verdict:4} {label}: {passed} passed, {len(failed)} failed, "
                     f"{len(mine) - passed - len(failed)} skipped")
        lines += [f"         {t['id']}: {t['message']}" for t in failed[:3]]
    for t in tests:
        for name, value in t["properties"].items():
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


def _machine() -> dict:
    import torch

    from recall_lab.bench.record import package_version

    return {"device": torch.cuda.get_device_name(0), "torch": torch.__version__,
            "cuda": torch.version.cuda, "mamba_ssm": package_version("mamba-ssm"),
            "triton": package_version("triton"), "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ",
                                                                          time.gmtime())}


def run(out: Path, full: bool) -> int:
    import torch  # here, not at the top: `preflight` runs before torch is installed

    if not torch.cuda.is_available():
        print("error: torch sees no CUDA device (a CPU build of torch? set TORCH_SPEC and "
              "recreate .venv)", file=sys.stderr)
        return 1
    result: dict = {"machine": _machine()}
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "junit.xml"
        subprocess.run([sys.executable, "-m", "pytest", "-m", "cuda", "-q", "-rA", "tests/gpu",
                        f"--junitxml={xml}", "-o", "junit_logging=no"], check=False)
        result["tests"] = junit_results(xml.read_text()) if xml.exists() else []
        bench_json = Path(tmp) / "bench.json"
        cmd = [sys.executable, "-m", "recall_lab.cli", "bench", "attention", "ssm", "train",
               "--device", "cuda", "--json", str(bench_json)] + ([] if full else ["--quick"])
        res = subprocess.run(cmd, check=False, env={**os.environ, "PYTHONUNBUFFERED": "1"})
        result["bench"] = (json.loads(bench_json.read_text()) if bench_json.exists()
                           else {"error": f"recall-lab bench exited {res.returncode}"})
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(result, indent=2))
    print("\n".join(summary_lines(result)))
    print(f"written to {out}")
    return 1 if any(t["outcome"] == "failed" for t in result["tests"]) or not result["tests"] \
        else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sub.add_parser("preflight")
    r = sub.add_parser("run")
    r.add_argument("--out", type=Path, default=None)
    r.add_argument("--full", action="store_true", help="the benches' full sizes (slower)")
    args = ap.parse_args(argv)
    reason = no_gpu_reason()
    if reason:  # first, before torch or anything installed is touched
        print(f"error: {reason}", file=sys.stderr)
        return 1
    if args.cmd == "preflight":
        return 0
    stamp = time.strftime("%Y%m%d-%H%M%S", time.gmtime())
    return run(args.out or Path(f"runs/gpu-check-{stamp}.json"), args.full)


if __name__ == "__main__":
    sys.exit(main())
