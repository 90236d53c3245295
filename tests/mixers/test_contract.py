"""The open mixer contract: a mixer enters by import path or entry point with no edit inside
recall_lab/ (the example package under examples/ proves it), its config fields leave every
existing run's hash unchanged, and bad mixers end in one clear line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from pydantic import ValidationError
from torch import nn

from recall_lab import checkpoint as ck
from recall_lab.config import RunConfig, TrainConfig
from recall_lab.experiments.grid import config_hash
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers import named_mixers
from recall_lab.models import build_model, model_config
from recall_lab.models.decode import decode, state_growth
from recall_lab.models.registry import check_model_name, listing_row, mixer_models
from recall_lab.models.state import state_count
from recall_lab.runs import run_config_from_flags, run_config_from_json
from tests.mixers.plugins import fake_distribution

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "mixer-package"
RETENTION = "retention_mixer:Retention"
TASK = TaskSpec(levels=((2, 4),), values=8)


@pytest.fixture(autouse=True)
def example_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(EXAMPLE))


# ---- hashes and config ------------------------------------------------------------------------

# Two runs whose folders were named before a field of their time was added (their hashes moved
# then, not now).
OLDER_THAN_THEIR_FOLDER = {"mini-ml3"}


def test_every_committed_run_keeps_its_hash():
    """Adding the mixer fields changed no existing run's config hash: every committed run's
    folder suffix is the hash of its config.json as read today."""
    checked = 0
    for path in sorted((ROOT / "docs" / "results").rglob("config.json")):
        if path.relative_to(ROOT / "docs" / "results").parts[0] in OLDER_THAN_THEIR_FOLDER:
            continue
        cfg = run_config_from_json(json.loads(path.read_text()), path)
        assert config_hash(cfg) == path.parent.name.rsplit("-", 1)[-1], path
        if cfg.model.arch != "mixer":  # runs of a contract mixer carry its fields
            carried = {"mixer", "mixers", "mixer_kwargs", "block"} & set(cfg.to_json()["model"])
            if cfg.model.block == "zoology":  # the transformer's zoology block (issue 66)
                carried.discard("block")
            assert not carried, path
        checked += 1
    assert checked > 1000  # the committed reports hold over a thousand runs


def test_mixer_fields_are_in_the_json_when_set():
    cfg = RunConfig(model=model_config("x", TASK.vocab().size, mixer=RETENTION,
                                       mixer_kwargs={"heads": 2}),
                    train=TrainConfig(), task=TASK)
    model = cfg.to_json()["model"]
    assert (model["arch"], model["mixer"], model["mixer_kwargs"]) == ("mixer", RETENTION,
                                                                       {"heads": 2})
    assert "mixers" not in model and "block" not in model
    assert config_hash(cfg) != config_hash(cfg.model_copy(update={"model": model_config(
        "x", TASK.vocab().size, mixer=RETENTION, mixer_kwargs={"heads": 4})}))


@pytest.mark.parametrize("fields,needle", [
    ({"name": "mamba", "mixer": RETENTION}, "built-in model"),
    ({"name": "x", "mixers": [RETENTION], "n_layers": 2}, "mixers lists 1 layers"),
    ({"name": "x", "mixer": RETENTION, "mixers": [RETENTION, RETENTION]}, "not both"),
    ({"name": "x", "mixer": "no_such_name"}, "unknown mixer"),
])
def test_bad_mixer_configs_are_one_line(fields, needle):
    fields = dict(fields)  # the CLI prints either error as one line (commands/shell.py)
    with pytest.raises((RecallLabError, ValidationError), match=needle):
        model_config(fields.pop("name"), 20, **fields)


def test_mixer_fields_on_a_builtin_arch_are_refused():
    cfg = model_config("mamba", 20)
    with pytest.raises((RecallLabError, ValidationError), match="is for a model built from"):
        type(cfg).model_validate({**cfg.model_dump(), "mixer_kwargs": {"heads": 2}})


def test_flags_name_the_run_by_its_class_and_the_json_reloads(tmp_path):
    cfg = run_config_from_flags(None, "mini-mqar", None, None, 32, {}, mixer=RETENTION,
                                mixer_kwargs='{"heads": 2}')
    assert (cfg.model.name, cfg.model.mixer, cfg.model.mixer_kwargs) == ("Retention", RETENTION,
                                                                         {"heads": 2})
    again = run_config_from_json(json.loads(json.dumps(cfg.to_json())), tmp_path / "c.json")
    assert again == cfg and config_hash(again) == config_hash(cfg)
    check_model_name(again.model)  # a label, not a registry name: accepted
    with pytest.raises(RecallLabError, match="JSON object"):
        run_config_from_flags(None, "mini-mqar", None, None, None, {}, mixer=RETENTION,
                              mixer_kwargs="[1, 2]")


def test_a_hybrid_takes_one_mixer_per_layer_with_its_kwargs():
    cfg = model_config("hy", 20, d_model=16, mixers=[
        "recall_lab.mixers.attention:MultiHeadAttention",
        {"mixer": RETENTION, "kwargs": {"heads": 2}}], mixer_kwargs={})
    model = build_model(cfg)
    assert cfg.n_layers == 2
    assert type(model.blocks[0].mixer).__name__ == "MultiHeadAttention"
    assert (type(model.blocks[1].mixer).__name__, model.blocks[1].mixer.heads) == ("Retention", 2)


def test_the_mlp_block_adds_a_swiglu_per_layer():
    plain = build_model(model_config("r", 20, d_model=16, mixer=RETENTION))
    mlp = build_model(model_config("r", 20, d_model=16, mixer=RETENTION, block="mlp"))
    assert all(b.mlp is None for b in plain.blocks)
    assert all(b.mlp is not None for b in mlp.blocks)
    assert mlp.n_params() > plain.n_params()


def test_out_proj_of_a_mixer_is_rescaled_as_a_residual_writer():
    """The LM divides residual writers by sqrt(their count); a contract mixer's `out_proj` is one.
    Built with and without the rule from the same seed, the ratio is exactly 1/sqrt(2)."""
    ws = []
    for rescale in (True, False):
        torch.manual_seed(0)
        m = build_model(model_config("r", 20, d_model=16, mixer=RETENTION,
                                     rescale_residual=rescale))
        ws.append(m.blocks[0].mixer.out_proj.weight)
    torch.testing.assert_close(ws[0], ws[1] / 2 ** 0.5)


# ---- names: the lab's own mixers and a plug-in ------------------------------------------------

def test_the_labs_own_mixer_is_built_through_the_entry_point_path():
    assert named_mixers()["mha"] == "recall_lab.mixers.attention:MultiHeadAttention"
    assert "mha" in mixer_models()
    cfg = model_config("mha", 20)
    assert (cfg.arch, cfg.mixer) == ("mixer", "recall_lab.mixers.attention:MultiHeadAttention")
    row = listing_row("mha", 20)
    assert row["decode state"] == "grows as L" and row["state per layer"] == "grows as L"


def test_an_installed_plugin_is_a_model_name(tmp_path, monkeypatch):
    monkeypatch.syspath_prepend(str(fake_distribution(tmp_path, f"fake-retention = {RETENTION}\n"
                                                      "fake-broken = no_such_pkg.mod:Mixer")))
    named_mixers.cache_clear()
    try:
        assert "fake-retention" in mixer_models()
        cfg = model_config("fake-retention", 20, d_model=16)
        assert cfg.mixer == RETENTION
        count = state_count(build_model(cfg), 64)
        assert count.recurrent.numbers == 2 * 4 * 4 * 4  # two layers of 4 heads of 4 x 4
        assert count.declared == count.recurrent.numbers  # its state_size says the same
        with pytest.raises(RecallLabError, match="no_such_pkg.mod does not import"):
            build_model("fake-broken", 20)
    finally:
        named_mixers.cache_clear()


# ---- bad mixers --------------------------------------------------------------------------------

class NoDModel(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()


class WrongShape(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.w = nn.Linear(d_model, 3)

    def forward(self, x):
        return self.w(x)


class Nan(nn.Module):
    def __init__(self, d_model: int, layer_idx: int = 0) -> None:
        super().__init__()
        self.w = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.w(x) * float("nan")


@pytest.mark.parametrize("path,kwargs,needle", [
    (f"{__name__}:NoDModel", {}, "unexpected keyword argument 'd_model'"),
    (f"{__name__}:WrongShape", {}, "forward returned (2, 5, 3)"),
    (f"{__name__}:Nan", {}, "NaN or inf"),
    (RETENTION, {"nope": 1}, "unexpected keyword argument 'nope'"),
    ("retention_mixer:Missing", {}, "has no 'Missing'"),
    ("torch.nn:functional", {}, "not a class"),
])
def test_bad_mixers_fail_in_one_line(path, kwargs, needle):
    with pytest.raises(RecallLabError) as info:
        build_model(model_config("bad", 20, d_model=16, mixer=path, mixer_kwargs=kwargs or None))
    assert needle in str(info.value) and "\n" not in str(info.value)


# ---- decoding ----------------------------------------------------------------------------------

class NoStep(nn.Module):
    """A causal mixer with no `step`: a running mean."""

    def __init__(self, d_model: int, layer_idx: int = 0) -> None:
        super().__init__()
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        n = torch.arange(1, x.shape[1] + 1, dtype=x.dtype)[:, None]
        return self.out_proj(x.cumsum(1) / n)


@pytest.mark.parametrize("path", [RETENTION, f"{__name__}:NoStep",
                                  "recall_lab.mixers.attention:MultiHeadAttention"])
def test_decoding_equals_the_parallel_forward(path):
    torch.manual_seed(0)
    model = build_model(model_config("d", 20, d_model=16, mixer=path)).double().eval()
    ids = torch.randint(3, 20, (2, 17), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        torch.testing.assert_close(decode(model, ids, n_prefill=5), model(ids).logits,
                                   rtol=1e-10, atol=1e-10)
    assert state_growth(model) == ("constant" if path == RETENTION else "L")


class Tied(nn.Module):
    """Two projections sharing one weight (weight tying inside a user's mixer)."""

    def __init__(self, d_model: int, layer_idx: int = 0) -> None:
        super().__init__()
        self.inp = nn.Linear(d_model, d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.out_proj.weight = self.inp.weight

    def forward(self, x):
        return self.out_proj(torch.tanh(self.inp(x)).cumsum(1))


def test_a_mixer_with_tied_weights_saves_and_loads(tmp_path):
    torch.manual_seed(0)
    model = build_model(model_config("t", 20, d_model=16, mixer=f"{__name__}:Tied"))
    ck.save_weights(tmp_path / "w.safetensors", model)
    torch.manual_seed(1)
    other = build_model(model_config("t", 20, d_model=16, mixer=f"{__name__}:Tied"))
    ck.load_weights(tmp_path / "w.safetensors", other)
    ids = torch.randint(3, 20, (1, 9))
    torch.testing.assert_close(other(ids).logits, model(ids).logits, rtol=0, atol=0)
    assert other.blocks[0].mixer.out_proj.weight is other.blocks[0].mixer.inp.weight
