"""The field's mixers run unchanged: stand-ins written here with zoology's exact signatures
(zoology at commit d88d6f5, `zoology/mixers/`), since zoology is not a dependency:

- `state_size(self, sequence_length)` with no `batch_size` (19 of zoology's mixer classes;
  `_compute_state_size` in zoology/model.py calls `mixer.state_size(sequence_length=...)`);
- a pydantic `validate_call` constructor with a required `l_max` (BaseConv, Hyena);
- a forward that raises on a length-1 input (BigBIRDAttention's `torch.randint(l - 1, ...)`);
- MHA's `state_size(self, batch_size=1, sequence_length=2048)`, which keeps working.

An exception in a user's code fails the row it happens in, with its type, message and input;
every other row runs; `check` prints no traceback, exits 1 when a row failed and 2 only when the
mixer cannot be built. Published through the entry points, the stand-ins appear in `recall-lab
models` beside the built-in models, and a broken plug-in hides nothing."""

from __future__ import annotations

import json
import math

import pytest
import torch
from pydantic import validate_call
from torch import nn
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import build_mixer, named_mixers
from recall_lab.models import build_model, model_config
from recall_lab.models.state import state_count
from recall_lab.testing import resolve_target, run_checks
from tests.cli_checks import fails_with
from tests.mixers.plugins import fake_distribution

HERE = __name__
runner = CliRunner()


class ShortConvMixer(nn.Module):
    """zoology's BaseConv shape: a validate_call constructor with a required l_max, a short
    depthwise convolution times a projection, `state_size(self, sequence_length)`."""

    @validate_call
    def __init__(self, d_model: int, l_max: int, kernel_size: int = 3, layer_idx: int = None,
                 **kwargs) -> None:
        super().__init__()
        self.d_model, self.l_max, self.kernel_size = d_model, l_max, kernel_size
        self.conv = nn.Conv1d(d_model, d_model, kernel_size, groups=d_model,
                              padding=kernel_size - 1)
        self.projection = nn.Linear(d_model, d_model)

    def forward(self, u, *args, **kwargs):
        conv = self.conv(u.transpose(1, 2))[..., : u.shape[1]].transpose(1, 2)
        return conv * self.projection(u) + u

    def state_size(self, sequence_length: int):
        return self.d_model * self.kernel_size


class LongConvMixer(ShortConvMixer):
    """zoology's Hyena shape: its declared state is `d_model * sequence_length`."""

    def state_size(self, sequence_length: int = 2048) -> int:
        return self.d_model * sequence_length


class RandomBlocks(nn.Module):
    """zoology's BigBIRDAttention shape: its forward draws `torch.randint(l - 1, ...)`, which
    raises on a length-1 input; causal otherwise (a running mean)."""

    def __init__(self, d_model: int, layer_idx: int = None) -> None:
        super().__init__()
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        length = x.shape[1]
        torch.randint(length - 1, (1,))  # "from=0 >= to=0" at length 1, as BigBIRD
        n = torch.arange(1, length + 1, dtype=x.dtype)[:, None]
        return self.out_proj(x.cumsum(1) / n)

    def state_size(self, sequence_length: int = 2048):
        return 2 * 7 * 4 * self.out_proj.in_features


class AttentionWithBatch(nn.Module):
    """zoology's MHA: `state_size(self, batch_size=1, sequence_length=2048)`."""

    def __init__(self, d_model: int, num_heads: int = 1, layer_idx: int = None) -> None:
        super().__init__()
        self.d_model, self.heads = d_model, num_heads
        self.Wqkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, x):
        q, k, v = self.Wqkv(x).chunk(3, -1)
        mask = torch.ones(x.shape[1], x.shape[1], dtype=torch.bool).tril()
        s = (q @ k.transpose(1, 2) / math.sqrt(self.d_model)).masked_fill(~mask, -torch.inf)
        return s.softmax(-1) @ v

    def state_size(self, batch_size: int = 1, sequence_length: int = 2048):
        return 2 * self.d_model * sequence_length


class TupleOut(nn.Module):
    """A d_model mixer whose forward returns a tuple: not the contract."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.w = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.w(x), None


class HiddenSizeLayer(nn.Module):
    """FLA's layer shape: built with `hidden_size`, returns `(o, attentions, past_key_values)`."""

    def __init__(self, hidden_size: int, num_heads: int = 2, layer_idx: int = None) -> None:
        super().__init__()
        self.o_proj = nn.Linear(hidden_size, hidden_size)

    def forward(self, hidden_states, attention_mask=None, past_key_values=None, **kwargs):
        n = torch.arange(1, hidden_states.shape[1] + 1, dtype=hidden_states.dtype)[:, None]
        return self.o_proj(hidden_states.cumsum(1) / n), None, past_key_values


class BadStateSize(AttentionWithBatch):
    def state_size(self, sequence_length: int):
        return "many"


def rows(target: str, kwargs: dict | None = None) -> dict:
    return {r.name: r for r in run_checks(resolve_target(target, kwargs), learning=False,
                                          speed=False)}


def test_zoology_signatures_pass_every_correctness_row_and_declare_their_state():
    got = rows(f"{HERE}:ShortConvMixer", {"l_max": 64})
    assert [n for n, r in got.items() if r.passed is False] == []
    assert got["state"].value == "declared 48"  # d_model 16 x kernel 3, as it counts itself
    grows = rows(f"{HERE}:LongConvMixer", {"l_max": 64})["state"]
    assert grows.value.startswith("grows with L: declared 2,048 at L=128")
    mha = rows(f"{HERE}:AttentionWithBatch")  # accepts batch_size too: keeps working
    assert [n for n, r in mha.items() if r.passed is False] == []
    assert mha["state"].value.startswith("grows with L")


def test_a_forward_that_raises_fails_its_row_alone():
    got = rows(f"{HERE}:RandomBlocks")
    failed = {n: r for n, r in got.items() if r.passed is False}
    assert list(failed) == ["padding and length"]  # the cut to length 1
    row = failed["padding and length"]
    assert row.value.startswith("raised RuntimeError: random_ expects 'from' to be less than")
    assert row.detail == "in forward on a (2, 1, 16) input"
    assert got["causality"].passed and got["same seed, same output"].passed
    assert got["state"].value == "declared 896"  # 2 x 7 x 4 x 16, as BigBIRD counts


@pytest.mark.parametrize("target,row,needle", [
    (f"{HERE}:TupleOut", "forward", "returned tuple"),
    (f"{HERE}:BadStateSize", "state", "returned 'many', not a non-negative integer"),
])
def test_bad_output_is_named_on_its_row(target, row, needle):
    got = rows(target)
    assert got[row].passed is False and needle in got[row].value + got[row].detail


def test_check_cli_no_traceback_exit_1_on_a_failed_row_and_2_when_not_built(tmp_path):
    out = tmp_path / "rows.json"
    r = runner.invoke(app, ["check", f"{HERE}:RandomBlocks", "--no-learning", "--no-speed",
                            "--json", str(out)])
    assert r.exit_code == 1, r.output
    assert "Traceback" not in r.output and "1 check(s) failed: padding and length" in r.output
    data = json.loads(out.read_text())
    assert [x["name"] for x in data["rows"] if x["passed"] is False] == ["padding and length"]
    # zoology's Hyena without its required l_max: one line naming the field and how to give
    # it (issue 64), exit 2
    fails_with(["check", f"{HERE}:ShortConvMixer", "--no-learning", "--no-speed"],
               "ShortConvMixer needs l_max (no default); give it: --kwargs '{\"l_max\": ...}'")


def test_hidden_size_layers_build_and_check_unchanged():
    mixer = build_mixer(f"{HERE}:HiddenSizeLayer", 16, 0, {"num_heads": 2})
    assert isinstance(mixer(torch.randn(2, 5, 16)), torch.Tensor)
    got = rows(f"{HERE}:HiddenSizeLayer", {"num_heads": 2})
    assert [n for n, r in got.items() if r.passed is False] == []


def test_fla_layers_on_a_cpu_say_they_need_a_gpu():
    pytest.importorskip("fla.layers")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    with pytest.raises(RecallLabError, match="FLA's layers run their Triton kernels on a GPU"):
        build_mixer("fla.layers:DeltaNet", 16, 0, {"num_heads": 2})


# ---- plug-ins ---------------------------------------------------------------------------------

@pytest.fixture
def plugins(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, "\n".join([
        f"field-mha = {HERE}:AttentionWithBatch",
        f"field-bigbird = {HERE}:RandomBlocks",
        f"field-baseconv = {HERE}:ShortConvMixer",
        "field-missing = no_such_pkg.mod:Mixer",
        f"field-tuple = {HERE}:TupleOut",
    ]), "field_mixers")))
    named_mixers.cache_clear()
    yield
    named_mixers.cache_clear()


def test_models_lists_plugins_beside_the_builtins_and_a_broken_one_hides_nothing(plugins):
    r = runner.invoke(app, ["models", "--task", "mini-mqar"], env={"COLUMNS": "250"})
    assert r.exit_code == 0, r.output
    names = {ln.split("│")[1].strip() for ln in r.output.splitlines() if ln.count("│") > 3}
    assert {"mamba", "mamba2+hax", "deltanet", "field-mha", "field-bigbird"} <= names
    assert "field-missing" not in names and "field-baseconv" not in names
    lines = r.output.splitlines()
    assert any(ln.startswith("field-missing: not loaded: ") and "no_such_pkg.mod does not "
               "import" in ln for ln in lines)
    assert any(ln.startswith("field-baseconv: needs l_max") for ln in lines)
    assert any(ln.startswith("field-tuple: not loaded: ") and "forward returned tuple" in ln
               for ln in lines)
    assert "Traceback" not in r.output


def test_a_broken_plugin_as_a_model_is_one_line(plugins, tmp_path):
    fails_with(["train", "--model", "field-missing", "--task", "mini-mqar", "--steps", "1", "--out",
                tmp_path / "run"], "no_such_pkg.mod does not import")
    assert not (tmp_path / "run").exists()
    # a plug-in that needs kwargs builds wherever they are given
    cfg = model_config("field-baseconv", 20, d_model=16, mixer_kwargs={"l_max": 64})
    count = state_count(build_model(cfg), 64)
    assert count.source == "declared" and count.recurrent.numbers == 2 * 16 * 3


def test_models_legend_names_every_branch_and_check_suggests_any_model():
    """`models` says what each branch in its table is; `check` with a mistyped name suggests
    among every model it takes, not the mixers alone."""
    r = runner.invoke(app, ["models", "--task", "mini-mqar"], env={"COLUMNS": "400"})
    legend = next(ln for ln in r.output.splitlines() if ln.startswith("branch: "))
    for branch in ("sw", "d", "a", "sw+d", "lsh", "ks", "hax"):
        assert f" {branch} = " in f" {legend[len('branch: '):]}", branch
    line = fails_with(["check", "mambaa", "--no-learning", "--no-speed"], "unknown model")
    assert "nearest: mamba+a, mamba, " in line and len(line) <= 200  # 5 nearest, not all
    line = fails_with(["check", "gated-deltanett", "--no-learning", "--no-speed"],
                      "unknown model")
    assert "nearest: gated-deltanet," in line  # a zoo mixer among the names it suggests

