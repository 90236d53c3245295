"""`recall-lab check --all PACKAGE`: the field audit over a stand-in package written here (a
folder of modules with zoology's signatures): every class that declares `state_size` is checked
unchanged, a module that does not import is named with its reason, the declared state is set
beside the audit file's formula and the lab's count, and a wrong count is flagged."""

from __future__ import annotations

import json
import textwrap

import pytest
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.experiments.audit import audit, category, formula_count, state_verdict

runner = CliRunner()

MIXERS = '''
import torch
from pydantic import validate_call
from torch import nn


class Decay(nn.Module):
    """A per-channel decay recurrence: d_model numbers of state; declares 4x that."""

    @validate_call
    def __init__(self, d_model: int, l_max: int, layer_idx: int = None, **kwargs):
        super().__init__()
        self.d_model = d_model
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        h, out = torch.zeros_like(x[:, 0]), []
        for t in range(x.shape[1]):
            h = 0.9 * h + x[:, t]
            out.append(h)
        return self.proj(torch.stack(out, 1))

    def state_size(self, sequence_length: int):
        return 4 * self.d_model


class Windowed(nn.Module):
    """Attention-free: a running mean; declares a fixed window of keys and values."""

    def __init__(self, d_model: int, block_size: int = 4, **kwargs):
        super().__init__()
        self.d_model, self.block_size = d_model, block_size
        self.proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
        return self.proj(x.cumsum(1) / n)

    def state_size(self, sequence_length: int = 2048):
        return 2 * self.block_size * self.d_model


class Helper(nn.Module):
    """A norm: no state_size, not a mixer."""

    def __init__(self, d_model: int):
        super().__init__()
'''


@pytest.fixture
def package(tmp_path, monkeypatch):
    pkg = tmp_path / "fieldpkg" / "mixers"
    pkg.mkdir(parents=True)
    (tmp_path / "fieldpkg" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "simple.py").write_text(textwrap.dedent(MIXERS))
    # as zoology's rwkv module does at import on a machine without CUDA
    (pkg / "needs_cuda.py").write_text(
        'raise OSError("CUDA_HOME environment variable is not set.")\n')
    spec = tmp_path / "audit.toml"
    spec.write_text(textwrap.dedent('''
        [source]
        repo = "someone/fieldpkg"
        commit = "abc1234"

        [mixers."fieldpkg.mixers.simple:Decay"]
        kwargs = { l_max = 64 }
        formula = "d_model"
        paper = "one number per channel"

        [mixers."fieldpkg.mixers.simple:Windowed"]
        kwargs = { block_size = 4 }
        formula = "2 * block_size * d_model"
    '''))
    for name in [m for m in list(__import__("sys").modules) if m.startswith("fieldpkg")]:
        monkeypatch.delitem(__import__("sys").modules, name)
    return pkg, spec


def test_the_audit_checks_each_mixer_and_names_what_did_not_run(package):
    pkg, spec = package
    from recall_lab.config import read_toml

    rows = {r.path: r for r in audit(str(pkg), read_toml(spec), learning=False, speed=False)}
    assert set(rows) == {"fieldpkg.mixers.needs_cuda (module)", "fieldpkg.mixers.simple:Decay",
                         "fieldpkg.mixers.simple:Windowed"}  # the norm is no mixer
    cuda = rows["fieldpkg.mixers.needs_cuda (module)"]
    assert cuda.status == "not run" and cuda.why.startswith("CUDA-only")
    decay, window = rows["fieldpkg.mixers.simple:Decay"], rows["fieldpkg.mixers.simple:Windowed"]
    assert decay.failed() == [] and window.failed() == []
    assert (decay.declared_n, decay.formula) == (64, 16)
    assert state_verdict(decay) == "declared differs: 4.00x the formula"
    assert (window.declared_n, window.formula) == (128, 128)
    assert state_verdict(window) == "declared = formula"


def test_check_all_writes_the_table(package, tmp_path):
    pkg, spec = package
    out = tmp_path / "audit"
    r = runner.invoke(app, ["check", "--all", str(pkg), "--kwargs-file", str(spec),
                            "--no-learning", "--no-speed", "--out", str(out)])
    assert r.exit_code == 0, r.output
    md = (out / "audit.md").read_text()
    assert "someone/fieldpkg at commit abc1234" in md
    line = next(ln for ln in md.splitlines() if "simple:Decay" in ln)
    assert "| checked | pass | declared 64 | 16 |" in line and "4.00x the formula" in line
    data = json.loads((out / "audit.json").read_text())
    assert [m["path"] for m in data["mixers"]][0] == "fieldpkg.mixers.needs_cuda (module)"
    # a second run refuses to overwrite the table
    again = runner.invoke(app, ["check", "--all", str(pkg), "--no-learning", "--no-speed",
                                "--out", str(out)])
    assert again.exit_code == 2 and (out / "audit.md").read_text() == md


def test_formulas_and_categories():
    assert formula_count("num_heads * (d_model / num_heads) ** 2", {"num_heads": 2}, "x") == 128
    assert formula_count("2 * d_model * L", {}, "x") == 2 * 16 * 128
    assert category("RuntimeError: 0 active drivers ([]).") == "Triton-only (needs a GPU)"
    assert category("No module named 'pytorch_lightning'").startswith("import error")
