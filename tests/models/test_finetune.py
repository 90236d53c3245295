"""`recall-lab finetune`: a new run that records its base run, starts from its weights, trains
only the adapter's set at a longer length with another attention; `eval` works on it."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from recall_lab import checkpoint as ck
from recall_lab.cli import app
from recall_lab.config import RunConfig, SEAttnConfig
from recall_lab.finetune import finetune_config
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.models import model_config
from recall_lab.models.registry import with_attention

runner = CliRunner()
TASK = '[task]\nlevels = [[3, 3]]\nvalues = 4\nfiller_ids = 4\n'
SMALL = ["--steps", "3", "--batch-size", "2", "--eval-every", "3", "--device", "cpu"]


def _fails_with(args, needle):
    r = runner.invoke(app, args)
    assert r.exit_code == 2, r.output
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and needle in lines[0], r.stderr


@pytest.fixture(scope="module")
def base_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ft")
    (tmp / "task.toml").write_text(TASK)
    run = tmp / "base"
    r = runner.invoke(app, ["train", "--model", "mamba2-attn", "--task", str(tmp / "task.toml"),
                            "--out", str(run), "--d-model", "16", "--k", "8",
                            "--eval-samples", "4", *SMALL])
    assert r.exit_code == 0, r.output
    return run


def test_finetune_writes_a_new_run_from_the_base_weights(base_run):
    out = base_run.with_name("se-hylora")
    r = runner.invoke(app, ["finetune", str(base_run), "--length-factor", "2", "--attention",
                            "se", "--adapter", "hylora", "--rank", "2", "--out", str(out),
                            *SMALL])
    assert r.exit_code == 0, r.output
    cfg = json.loads((out / ck.CONFIG).read_text())
    assert cfg["train"]["finetune"] == {"base_run": str(base_run), "checkpoint": "best",
                                        "adapter": "hylora", "rank": 2, "alpha": 4.0}
    assert cfg["model"]["name"] == "mamba2-attn-se"
    assert cfg["model"]["attn_layers"]["attention"] == "se"
    base_task = json.loads((base_run / ck.CONFIG).read_text())["task"]
    assert TaskSpec.model_validate(cfg["task"]).max_len == 2 * TaskSpec.model_validate(
        base_task).max_len
    base, _ = ck.load_tensors(base_run / ck.BEST)
    tuned, _ = ck.load_tensors(out / ck.BEST)
    # Frozen weights are the base run's, bit for bit; trained ones moved; LoRA factors exist.
    assert base["blocks.0.mixer.in_proj.weight"].equal(tuned["blocks.0.mixer.in_proj.weight"])
    assert base["blocks.1.attn.qkv.weight"].equal(tuned["blocks.1.attn.qkv.base.weight"])
    assert not base["blocks.0.mixer.conv1d.weight"].equal(tuned["blocks.0.mixer.conv1d.weight"])
    assert tuned["blocks.1.attn.qkv.lora_A"].shape == (2, 16)
    summary = json.loads((out / ck.SUMMARY).read_text())
    assert 0 < summary["n_trainable"] < summary["n_params"]

    # eval works on it, with its own attention and with full attention (seed 001 App. A)
    for extra, name in (([], "eval-task-x2-n8-s0-best.json"),
                        (["--attention", "full"], "eval-task-x2-attn-full-n8-s0-best.json")):
        r = runner.invoke(app, ["eval", str(out), "--n", "8", "--device", "cpu", *extra])
        assert r.exit_code == 0, r.output
        res = json.loads((out / name).read_text())
        assert res["n"] == 8 and res["max_len"] == cfg_len(cfg)
    again = runner.invoke(app, ["finetune", str(base_run), "--out", str(out), *SMALL])
    assert again.exit_code == 2 and "already exists" in again.stderr


def cfg_len(cfg: dict) -> int:
    return TaskSpec.model_validate(cfg["task"]).max_len


def test_bad_finetunes_fail_with_one_line(base_run, tmp_path):
    _fails_with(["finetune", str(tmp_path / "nope")], "does not exist")
    _fails_with(["finetune", str(base_run), "--adapter", "qlora", "--out", str(tmp_path / "a")],
                "adapter")
    _fails_with(["finetune", str(base_run), "--attention", "lsh", "--out",
                 str(tmp_path / "b")], "unknown attention")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_with_attention_swaps_branch_patterns_and_layers():
    m = model_config("mamba2+full", 20)
    assert with_attention(m, "se").pattern == "seattn"
    assert with_attention(m, "se").seattn.scoring == "prefix"
    assert with_attention(m, "se-paper").seattn.scoring == "chunk"
    assert with_attention(m, "se-random").pattern == "seattn-random"
    assert with_attention(m, "sw").name == "mamba2+sw"
    lay = model_config("mamba2-attn", 20, seattn=SEAttnConfig(chunk=16))
    se = with_attention(lay, "se-nomem")
    assert se.attention_layers.attention == "se" and se.seattn.retrieval == "none"
    assert se.seattn.chunk == 16 and se.name == "mamba2-attn-se"
    assert with_attention(se, "full").name == "mamba2-attn"
    with pytest.raises(Exception, match="no attention to swap"):
        with_attention(model_config("mamba2", 20), "se")


def test_length_tests_at_multiples_of_the_base_length(base_run):
    from recall_lab.train import train_run

    longer = TaskSpec.model_validate(json.loads((base_run / ck.CONFIG).read_text())["task"])
    cfg = finetune_config(base_run, longer.at_length(2), "x2", "se", "lora+", rank=2,
                          train_over={"test_length_factors": (1, 2), "test_samples": 8})
    s = train_run(cfg, base_run.with_name("lengths"))
    assert set(s["test"]) >= {"x1", "x2", "x1-full", "x2-full"}
    assert set(s["valid"]) >= {"x1", "x2", "x1-full", "x2-full"}
    # x2 is the run's own task, the same samples: the same numbers as its plain test
    assert s["test"]["x2"]["acc"] == s["test"]["acc"]
    assert s["test"]["x2"]["loss"] == pytest.approx(s["test"]["loss"], rel=1e-6)
    assert s["test"]["x1"]["n"] == 8 and s["test"]["x1-full"]["n"] == 8
    assert s["base_run"] == str(base_run)
    full = finetune_config(base_run, longer, "x1", "full", "lora", rank=2,
                           train_over={"test_length_factors": (2,), "test_samples": 8})
    s = train_run(full, base_run.with_name("lengths-full"))
    assert s["test"]["x2-full"] == s["test"]["x2"]  # already full attention


def test_base_run_glob_must_match_one_folder(base_run):
    from recall_lab.runs import resolve_base_run

    assert resolve_base_run(str(base_run.parent / "bas?")) == base_run
    with pytest.raises(RecallLabError, match="matches 0 folders"):
        resolve_base_run(str(base_run.parent / "nothing-*"))
    (base_run.parent / "base2").mkdir(exist_ok=True)
    with pytest.raises(RecallLabError, match="matches 2 folders"):
        resolve_base_run(str(base_run.parent / "base*"))


def test_finetune_config_fits_the_base_vocabulary(base_run):
    longer = TaskSpec(levels=((3, 3),), values=4, filler=(10, 10), filler_ids=2)
    cfg = finetune_config(base_run, longer, "longer", "sw", "lora", rank=4)
    assert isinstance(cfg, RunConfig) and cfg.task.filler_ids == 4 and cfg.model.name == (
        "mamba2-attn-sw")
    assert cfg.train.finetune.alpha == 8.0 and cfg.train.steps == 3


def test_help_lists_the_finetune_options():
    r = runner.invoke(app, ["finetune", "--help"], env={"COLUMNS": "200"})
    assert r.exit_code == 0
    for opt in ("--task", "--length-factor", "--attention", "--adapter", "--rank", "--alpha",
                "--steps", "--out", "--force", "--resume"):
        assert opt in r.output, opt
    r = runner.invoke(app, ["eval", "--help"], env={"COLUMNS": "200"})
    assert "--attention" in r.output
