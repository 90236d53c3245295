"""scripts/zoology_fidelity.py on bad input: a path that is not a zoology checkout, a checkout
whose model lacks what the script maps, a Figure 2 config it cannot map. Each is one `error:`
line and exit 2, never a traceback. The checkouts here are fakes written in tmp_path (the real
check against zoology's code is docs/results/zoology-fidelity/)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

CONFIGS = '''from types import SimpleNamespace as N
mha = N(name="{mixer}", kwargs={{"dropout": 0.1, "num_heads": 1}})
model = N(sequence_mixer=mha, state_mixer=N(name="torch.nn.Identity", kwargs={{}}),
          block_type="TransformerBlock", resid_dropout=0.0, drop_path=0.0, d_model=64,
          learnable_word_embeddings=True, layer_norm_epsilon=1e-5, max_position_embeddings=64,
          n_layers=2, vocab_size=8192)
configs = [N(run_id="attention-seqlen64-dmodel64-lr0.002154434690031882-kv4", model=model)]
'''
MODEL = '''class TokenEmbeddings:
    def __init__(self, embed_dim, vocab_size, device="cpu"):
        pass
class LanguageModel:
    pass
{block}'''


def _fake(root: Path, block: str = "class TransformerBlock:\n    pass\n",
          mixer: str = "zoology.mixers.attention.MHA") -> Path:
    pkg = root / "zoology"
    figure = pkg / "experiments" / "paper_configs" / "iclr24_zoology_figure2"
    figure.mkdir(parents=True)
    for d in (pkg, pkg / "experiments", pkg / "experiments" / "paper_configs", figure):
        (d / "__init__.py").write_text("")
    (pkg / "model.py").write_text(MODEL.format(block=block))
    (pkg / "train.py").write_text("class Trainer:\n    pass\n")
    (figure / "configs.py").write_text(CONFIGS.format(mixer=mixer))
    return root


@pytest.fixture
def fidelity():
    """The script as a module; zoology's (fake) modules and the path it adds are removed after,
    and a zoology imported before (a real checkout, by another test) is put back."""
    real = {k: sys.modules.pop(k) for k in list(sys.modules) if k.split(".")[0] == "zoology"}
    modules, path = set(sys.modules), list(sys.path)
    spec = importlib.util.spec_from_file_location("zoology_fidelity",
                                                  ROOT / "scripts" / "zoology_fidelity.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    yield mod
    for name in set(sys.modules) - modules:
        del sys.modules[name]
    sys.modules.update(real)
    sys.path[:] = path


@pytest.mark.parametrize("case, needle", [
    ("empty", "is not a zoology checkout: zoology expects zoology/model.py"),
    ("no block", "zoology.model has no TransformerBlock"),
    ("hyena", "its sequence_mixer is 'zoology.mixers.hyena.Hyena'; the lab's zoology block "
              "maps sequence_mixer = 'zoology.mixers.attention.MHA'"),
])
def test_bad_input_is_one_error_line_and_exit_2(fidelity, tmp_path, capsys, case, needle):
    if case == "no block":
        _fake(tmp_path, block="")
    elif case == "hyena":
        _fake(tmp_path, mixer="zoology.mixers.hyena.Hyena")
    assert fidelity.main(["--zoology", str(tmp_path), "--steps", "0"]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err.count("\n") == 1 and out.err.startswith("error: ")
    assert needle in out.err and "Traceback" not in out.err


def test_a_lab_block_that_drops_a_parameters_use_is_different_not_a_crash(fidelity):
    """A lab block changed so that a mapped parameter gets no gradient (the norm2 residual
    removed, norm2 kept) is a difference: the record says which parameter and the report ends
    in DIFFERENT, where a TypeError traceback used to end it."""
    import torch

    lab, zoo = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    zoo.load_state_dict(lab.state_dict())
    x = torch.ones(1, 2)
    lab(x).sum().backward()
    (zoo(x).sum() + 0 * zoo.bias.sum()).backward()
    names = {"weight": "weight", "bias": "bias"}
    grads, missing = fidelity.compare_grads(names, dict(lab.named_parameters()),
                                            dict(zoo.named_parameters()))
    assert missing == [] and max(grads.values()) == 0.0  # the same module: equal
    lab.zero_grad(set_to_none=True)
    (lab.weight @ x.T).sum().backward()  # the lab's bias is no longer used
    grads, missing = fidelity.compare_grads(names, dict(lab.named_parameters()),
                                            dict(zoo.named_parameters()))
    assert missing == ["bias (no gradient on the lab's side)"]
    rec = {"zoology": {"commit": "c", "path": "p", "config": "m", "run_id": "r"},
           "cpu_patches": [], "batch": 1, "seed": 0, "params": {"zoology": 6, "lab": 6},
           "logits_max_abs_diff": 0.0, "grad_max_rel_diff": max(grads.values()),
           "grad_worst": "weight", "grads_compared": 2, "grads_one_sided": missing,
           "steps": 0, "equal": False}
    text = fidelity.report(rec)
    assert text.splitlines()[-1].startswith("DIFFERENT")
    assert "gradient on one side only: 1 parameters, first bias" in text
