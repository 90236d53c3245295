"""The field audit: `recall-lab check --all PACKAGE` runs the lab's checks over every mixer of
another code base (zoology's `zoology.mixers`, say) unchanged, and writes one table.

A *mixer* of the package is a torch module class defined in one of its modules, built with
`d_model` (or `hidden_size`), that declares its state (`state_size`: zoology's convention for
its sequence mixers; norms, MLPs and feature maps do not). Each one is built with the kwargs the
audit file gives it and checked like any mixer (`testing.run_checks`: the correctness rows, the
state row, the learning gate and the speed beside the lab's `mamba`). A module that does not
import, a constructor that rejects its kwargs, a forward that needs a GPU: the mixer's row says
so and the audit goes on.

zoology's mixers have no decode step, so their declared `state_size` cannot be measured from a
cache: the audit file sets beside it the paper's formula for the recurrent state (a sympy
expression in `d_model`, `L` and the mixer's kwargs, with its source) and, where the lab has
the family, the lab's own count of the same sizes (a lab mixer and its kwargs, measured from
its decode cache). The audit file (TOML):

    [source]
    repo = "HazyResearch/zoology"
    commit = "d88d6f5..."

    [mixers."zoology.mixers.based:Based"]
    kwargs = {l_max = 256, feature_dim = 8, num_heads = 2, num_key_value_heads = 2}
    formula = "num_key_value_heads * (d_model / num_heads + 1) * (1 + feature_dim + feature_dim**2)"
    paper = "Based (ICML 2024), Sec. 3: Taylor feature map of dimension 1 + d' + d'^2"
    lab = {mixer = "based", kwargs = {layers = ["linear"], feature_dim = 8, num_heads = 2}}

Every count is per sequence at `d_model` = 16 (the check harness's width) and L = 128.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import sympy
import torch
from torch import nn

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.contract import build_mixer, one_line
from recall_lab.mixers.registry import resolve_mixer
from recall_lab.mixers.state import declared_state
from recall_lab.testing import (
    Check,
    MixerSubject,
    check_forward,
    guarded,
    measured_state,
    resolve_target,
    result_word,
    run_checks,
)

D_MODEL, LENGTH = 16, 128


@dataclass
class AuditRow:
    """One mixer of the audited package: `status` "checked" or "not run" (`why`: the category
    and the one-line reason), its check rows, and the three state counts."""

    path: str
    status: str
    why: str = ""
    rows: list[Check] = field(default_factory=list)
    kwargs: dict[str, Any] = field(default_factory=dict)
    declared: str = "-"  # the state row's value
    declared_n: int | None = None  # state_size(sequence_length=128), where declared
    formula: int | None = None
    paper: str = ""
    lab: int | None = None
    lab_name: str = ""
    note: str = ""  # the audit file's word on this mixer (a finding's reproduction, say)

    def failed(self) -> list[str]:
        """The correctness rows that failed, for a mixer that ran (a mixer whose forward needs
        a GPU fails every row here: it is "not run", not failed)."""
        if self.status != "checked":
            return []
        return [r.name for r in self.rows if r.passed is False and r.correctness]

    def status_text(self) -> str:
        return self.status if self.status == "checked" else f"not run: {self.why.split(':')[0]}"

    def correctness_text(self) -> str:
        failed = self.failed()
        return ("FAIL: " + ", ".join(failed)) if failed else \
            ("pass" if self.status == "checked" else "-")

    def declared_text(self) -> str:
        """The state row's value; for a mixer that did not run, its declared count alone."""
        if self.declared != "-" or self.declared_n is None:
            return self.declared
        return f"declared {self.declared_n:,}"

    def to_json(self) -> dict:
        return {**asdict(self), "rows": [r.to_json() for r in self.rows],
                "failed": self.failed()}


def package_name(where: str) -> str:
    """A module name (`zoology.mixers`), or a package folder (`~/zoology/zoology/mixers`): its
    dotted name, with the folder above the top package put on sys.path."""
    path = Path(where).expanduser()
    if not path.is_dir():
        return where
    path = path.resolve()
    if not (path / "__init__.py").exists():
        raise RecallLabError(f"--all {where}: {path} is not a Python package (no __init__.py)")
    parts = [path.name]
    root = path.parent
    while (root / "__init__.py").exists():
        parts.insert(0, root.name)
        root = root.parent
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    return ".".join(parts)


def category(reason: str) -> str:
    """Why a mixer did not run, in words a reader can act on."""
    text = reason.lower()
    if "active drivers" in text or "triton" in text:
        return "Triton-only (needs a GPU)"
    if "cuda" in text or "causal_conv1d" in text or "selective_scan" in text:
        return "CUDA-only (needs a GPU or a CUDA build)"
    if "no module named" in text:
        return "import error (a dependency is missing here)"
    return "error"


def discover(package: str) -> tuple[list[str], list[tuple[str, str]]]:
    """The mixer classes of a package as import paths, and its modules that do not import
    (name, one-line reason)."""
    try:
        top = importlib.import_module(package)
    except Exception as exc:  # noqa: BLE001  the user's package
        raise RecallLabError(f"--all {package}: does not import ({one_line(exc)})") from None
    names = [package] + ([m.name for m in pkgutil.walk_packages(top.__path__, package + ".",
                                                                  onerror=lambda _: None)]
                         if hasattr(top, "__path__") else [])
    found, broken = [], []
    for name in names:
        try:
            module = importlib.import_module(name)
        except BaseException as exc:  # noqa: BLE001  an import may even sys.exit
            broken.append((name, one_line(exc)))
            continue
        for attr, obj in sorted(vars(module).items()):
            if (inspect.isclass(obj) and issubclass(obj, nn.Module) and obj.__module__ == name
                    and callable(getattr(obj, "state_size", None)) and _sized(obj)):
                found.append(f"{name}:{attr}")
    return found, broken


def _sized(cls: type) -> bool:
    try:
        params = inspect.signature(cls).parameters
    except (TypeError, ValueError):
        return False
    return "d_model" in params or "hidden_size" in params


def formula_count(expr: str, kwargs: dict[str, Any], where: str) -> int:
    """The paper's count: `expr` with d_model = 16, L = 128 and the mixer's numeric kwargs."""
    names = {"d_model": D_MODEL, "L": LENGTH, "sequence_length": LENGTH,
             **{k: v for k, v in kwargs.items() if isinstance(v, (int, float))
                and not isinstance(v, bool)}}
    try:
        value = sympy.sympify(expr, locals={k: sympy.Symbol(k) for k in names}).subs(names)
        return int(value)
    except (sympy.SympifyError, TypeError, ValueError) as exc:
        raise RecallLabError(f"{where}: formula {expr!r} does not evaluate to a number with "
                             f"{sorted(names)} ({one_line(exc)})") from None


def lab_count(lab: dict, where: str) -> tuple[int | None, str]:
    """The lab's own count of the same family and sizes: its mixer at d_model = 16, measured
    from its decode cache (or declared where it has no step), and its name."""
    path = resolve_mixer(str(lab.get("mixer", "")))
    kwargs = dict(lab.get("kwargs") or {})
    subject = MixerSubject(lambda: build_mixer(path, D_MODEL, 0, kwargs), d_model=D_MODEL)
    torch.manual_seed(0)
    module = subject.factory().float().eval()
    parts = measured_state(subject, module, LENGTH)
    number = parts["recurrent"].numbers if parts is not None else declared_state(module, LENGTH)
    if number is None:
        raise RecallLabError(f"{where}: the lab's {lab.get('mixer')!r} has neither a decode "
                             "cache nor a state_size")
    label = f"{lab['mixer']}({', '.join(f'{k}={v}' for k, v in kwargs.items())})"
    return number, label


def audit(package: str, spec: dict, learning: bool = True, speed: bool = True,
          progress: Callable[[str], None] | None = None) -> list[AuditRow]:
    """Every mixer of `package`, checked (see the module docstring)."""
    for table in ("source", "mixers", "modules"):
        entries = spec.get(table, {})
        if not isinstance(entries, dict) or (table != "source" and not all(
                isinstance(v, dict) for v in entries.values())):
            raise RecallLabError(f"--kwargs-file: [{table}] must be a table"
                                 + ("" if table == "source" else " of tables, one per name"))
    package = package_name(package)
    found, broken = discover(package)
    given = spec.get("mixers", {})
    notes = {name: m.get("note", "") for name, m in spec.get("modules", {}).items()}
    out = []
    for name, why in broken:
        note = notes.get(name, "")
        out.append(AuditRow(f"{name} (module)", "not run", f"{category(why + ' ' + note)}: "
                            f"{why}" + (f" ({note})" if note else "")))
    for path in found:
        entry = given.get(path, {})
        row = AuditRow(path, "checked", kwargs=dict(entry.get("kwargs") or {}),
                       paper=entry.get("paper", ""), note=entry.get("note", ""))
        if entry.get("skip"):
            row.status, row.why = "not run", f"skipped: {entry['skip']}"
            out.append(row)
            continue
        if progress:
            progress(path)
        try:
            dtype = {"float32": torch.float32}.get(entry.get("dtype", ""))
            target = resolve_target(path, row.kwargs, dtype)
        except RecallLabError as exc:
            row.status = "not run"
            row.why = f"{category(str(exc) + ' ' + row.note)}: {exc}"
            out.append(row)
            continue
        forward = guarded("forward", lambda t=target: check_forward(t.subject))
        gpu = forward.passed is False and category(forward.value).endswith("GPU)")
        # a forward that needs a GPU fails every row here: the rest is not run
        row.rows = [forward] if gpu else run_checks(target, learning=learning, speed=speed)
        if gpu:
            row.status, row.why = "not run", f"{category(forward.value)}: {forward.value}"
        state = next((r for r in row.rows if r.name == "state"), None)
        row.declared = state.value if state else "-"
        row.declared_n = declared_number(row)
        if entry.get("formula"):
            row.formula = formula_count(entry["formula"], row.kwargs, path)
        if entry.get("lab"):
            row.lab, row.lab_name = lab_count(entry["lab"], path)
        out.append(row)
    return out


def declared_number(row: AuditRow) -> int | None:
    """The declared count at L = 128 of a mixer that builds (None: not declared)."""
    torch.manual_seed(0)
    try:
        return declared_state(build_mixer(row.path, D_MODEL, 0, row.kwargs), LENGTH)
    except RecallLabError:
        return None


def state_verdict(row: AuditRow) -> str:
    """The declared count against the paper's formula and the lab's count."""
    if row.declared_n is None:
        return "-"
    if "grows with L" in row.declared:
        return "grows with L"
    refs = [(name, n) for name, n in (("formula", row.formula), ("lab", row.lab))
            if n is not None]
    if not refs:
        return "no reference"
    same = [name for name, n in refs if n == row.declared_n]
    off = [(f"the {name} gives 0" if n == 0 else f"{row.declared_n / n:.2f}x the {name}")
           for name, n in refs if n != row.declared_n]
    return "; ".join(([f"declared = {' = '.join(same)}"] if same else [])
                     + ([f"declared differs: {', '.join(off)}"] if off else []))


def _cell(text: str) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def audit_markdown(rows: list[AuditRow], meta: dict) -> str:
    """The audit's table (one line per mixer) and, below it, each failed or not-run mixer's
    reason in full."""
    head = ["mixer", "status", "correctness rows", "declared state", "paper's formula",
            "lab's count", "state", "learning gate", "speed"]
    lines = [f"# Field audit: {meta.get('package', '')}", "",
             f"Source: {meta.get('repo', '-')} at commit {meta.get('commit', '-')}; "
             f"counts per sequence at d_model {D_MODEL}, L {LENGTH}. Command: "
             f"`{meta.get('command', '')}`.", "",
             "| " + " | ".join(head) + " |", "|" + " --- |" * len(head)]
    for r in rows:
        got = {c.name: c for c in r.rows}
        gate, speed = got.get("learning gate"), got.get("speed")
        lines.append("| " + " | ".join(_cell(c) for c in [
            f"`{r.path}`", r.status_text(), r.correctness_text(), r.declared_text(),
            "-" if r.formula is None else f"{r.formula:,}",
            "-" if r.lab is None else f"{r.lab:,} ({r.lab_name})", state_verdict(r),
            "-" if gate is None else f"{result_word(gate)}: {gate.value}",
            "-" if speed is None else speed.value]) + " |")
    notes = [r for r in rows if r.status != "checked" or r.failed()]
    if notes:
        lines += ["", "## Why", ""]
        for r in notes:
            why = r.why or "; ".join(f"{c.name}: {c.value} {c.detail}".strip()
                                     for c in r.rows if c.passed is False and c.correctness)
            lines.append(f"- `{r.path}`: {why}")
    return "\n".join(lines) + "\n"


__all__ = ["AuditRow", "D_MODEL", "LENGTH", "audit", "category", "declared_number", "discover",
           "audit_markdown", "formula_count", "lab_count", "package_name", "state_verdict"]
