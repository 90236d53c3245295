"""One rule for which weights load: the best checkpoint unless `--checkpoint last` (or
`checkpoint="last"` in Python) asks for the final step's, with the same option everywhere."""

from __future__ import annotations

import json

import pytest
import torch
import typer
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.analysis.runs import load_run
from recall_lab.cli import app
from recall_lab.commands.shell import CHECKPOINT_HELP
from recall_lab.generators import TaskSpec

SPEC = TaskSpec(levels=((4, 6),), values=8, pools=(16,))
runner = CliRunner()
LOADING_COMMANDS = ("eval", "extrapolate", "mean-distance", "attention-map")


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    """A tiny run whose best weights differ from its last (best.safetensors rewritten as half
    the last weights, so the two files cannot agree by chance)."""
    from recall_lab.config import RunConfig, TrainConfig
    from recall_lab.models import model_config
    from recall_lab.train import train_run

    out = tmp_path_factory.mktemp("runs") / "mamba"
    cfg = RunConfig(model=model_config("mamba", SPEC.vocab().size, d_model=16),
                    train=TrainConfig(steps=2, batch_size=4, eval_every=2, eval_samples=8,
                                      test_samples=8, warmup=0),
                    task=SPEC)
    train_run(cfg, out)
    model, _ = load_run(out, "last")
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(0.5)
    ck.save_weights(out / ck.BEST, model)
    return out


def _first_param(model: torch.nn.Module) -> torch.Tensor:
    return next(model.parameters()).detach().clone()


def test_load_run_takes_the_best_unless_told(run_dir):
    best, _ = load_run(run_dir)
    last, _ = load_run(run_dir, "last")
    named = load_run(run_dir, checkpoint="best")[0]
    assert torch.equal(_first_param(best), _first_param(named))
    assert torch.equal(_first_param(best), 0.5 * _first_param(last))
    assert not torch.equal(_first_param(best), _first_param(last))


def test_every_loading_command_has_the_same_option():
    group = typer.main.get_command(app)
    for name in LOADING_COMMANDS:
        opts = {p.opts[0]: p for p in group.commands[name].params if p.opts}
        assert "--checkpoint" in opts, name
        opt = opts["--checkpoint"]
        assert opt.default == "best", name
        assert not any(o in opts for o in ("--weights", "--which")), name
        assert opt.help == CHECKPOINT_HELP, name


def test_mean_distance_defaults_to_best_and_refuses_a_bad_name(run_dir, tmp_path):
    res = runner.invoke(app, ["mean-distance", str(run_dir), "--lengths", "12", "--samples", "1",
                              "--last-only", "--out", str(tmp_path / "best")])
    assert res.exit_code == 0, res.output
    last = runner.invoke(app, ["mean-distance", str(run_dir), "--lengths", "12", "--samples",
                               "1", "--last-only", "--checkpoint", "last",
                               "--out", str(tmp_path / "last")])
    assert last.exit_code == 0, last.output
    b = json.loads((tmp_path / "best" / "mean_distance.json").read_text())
    la = json.loads((tmp_path / "last" / "mean_distance.json").read_text())
    assert (b["checkpoint"], la["checkpoint"]) == ("best", "last")
    # the two runs measured different weights: the same table from them would be a miss
    assert [r["md_last"] for r in b["rows"]] != [r["md_last"] for r in la["rows"]]
    bad = runner.invoke(app, ["mean-distance", str(run_dir), "--checkpoint", "newest",
                              "--out", str(tmp_path / "bad")])
    assert bad.exit_code == 2 and "--checkpoint" in bad.output
    assert len(bad.output.strip().splitlines()) == 1 and not (tmp_path / "bad").exists()
