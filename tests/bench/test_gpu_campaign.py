"""The GPU campaign (recall_lab/bench/gpu_campaign.py, scripts/gpu-campaign.sh) without a GPU and
without training: its arguments, budget shares, records, pack and resume; its experiment files
(the workers table's and the zoo-frontier's 64-pair table, with its claims); `train.precision`,
which stays out of config.json when unset. `make gpu-campaign-dryrun` runs the whole campaign."""

from __future__ import annotations

import json
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from recall_lab.bench import gpu_campaign as gc
from recall_lab.config import RunConfig, read_toml
from recall_lab.experiments.grid import config_hash, load_experiment
from recall_lab.experiments.report import build_report
from recall_lab.train import arithmetic

ROOT = Path(__file__).resolve().parents[2]
FRONTIER = ROOT / "docs" / "results" / "zoo-frontier" / "runs"


def _args(*extra: str, tmp: Path) -> list[str]:
    return ["run", "--out", str(tmp / "out"), "--work", str(tmp / "work"), *extra]


def test_run_arguments_are_checked_with_one_line(tmp_path, capsys):
    assert gc.main(_args("--budget", "50", tmp=tmp_path)) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: --budget must exceed")
    assert gc.main(_args("--budget", "600", "--resume", str(tmp_path / "nope.tar.gz"),
                         tmp=tmp_path)) == 2
    assert "does not exist" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()  # nothing written for bad input
    with pytest.raises(SystemExit) as exc:
        gc.main(_args("--budget", "600", "--pieces", "workers,gpu", tmp=tmp_path))
    assert exc.value.code == 2
    args = gc.parser().parse_args(_args("--budget", "600", "--pieces", "zoology,workers",
                                        "--workers-list", "1,4", tmp=tmp_path))
    assert args.pieces == ("zoology", "workers") and args.workers_list == (1, 4)
    assert gc.check_args(args) is None


def test_shares_follow_the_weights_and_pass_unused_time_on():
    order = list(gc.PIECES)
    first = gc.shares(1000.0, order)
    assert first == pytest.approx(1000.0 * gc.SHARES[order[0]] / sum(gc.SHARES.values()))
    # a piece that used nothing leaves all its time to the pieces after it
    rest = [gc.shares(1000.0, order[i:]) for i in range(len(order))]
    assert rest[-1] == pytest.approx(1000.0)
    assert all(a < b for a, b in zip(rest, rest[1:], strict=False))
    assert gc.shares(-5.0, order) == 0.0


def test_the_script_names_the_modules_defaults():
    text = (ROOT / "scripts" / "gpu-campaign.sh").read_text()
    assert f"ZOOLOGY_GLOB=${{ZOOLOGY_GLOB:-'{gc.ZOOLOGY_GLOB}'}}" in text
    assert f"FRONTIER_EXPERIMENT=${{FRONTIER_EXPERIMENT:-{gc.FRONTIER_EXPERIMENT}}}" in text
    assert f"WORKERS_EXPERIMENT=${{WORKERS_EXPERIMENT:-{gc.WORKERS_EXPERIMENT}}}" in text


def test_the_zoology_glob_takes_the_gpu_files_in_order():
    """The zoology piece's default glob finds the GPU zoology files in their study folder, the
    Fig. 2 grid for attention, then its other rows, then Based's mixture, and each loads."""
    files = gc.matching(gc.ZOOLOGY_GLOB)
    assert files == ["experiments/zoology/zoology-fig2-gpu.toml",
                     "experiments/zoology/zoology-fig2-gpu1-rows.toml",
                     "experiments/zoology/zoology-fig2-gpu2-based.toml"]
    assert all(load_experiment(ROOT / f).runs for f in files)
    assert gc.matching("experiments/no-such-*.toml") == []


def test_the_script_refuses_a_short_budget_in_one_line(tmp_path):
    res = subprocess.run(["bash", str(ROOT / "scripts" / "gpu-campaign.sh"), "--no-cuda",
                          "--out", str(tmp_path / "o"), "--budget", "10"], capture_output=True,
                         text=True, env={"PYTHON": sys.executable, "PATH": "/usr/bin:/bin"},
                         check=False)
    assert res.returncode == 2, res.stderr
    assert res.stderr.strip().splitlines() == [res.stderr.strip()]
    assert "--budget must exceed" in res.stderr


def test_the_workers_experiment_fills_sixteen_workers_twice():
    exp = load_experiment(ROOT / gc.WORKERS_EXPERIMENT)
    assert len(exp.runs) >= 2 * max(gc.WORKERS)
    assert len({r.hash for r in exp.runs}) == len(exp.runs)
    train = exp.runs[0].config.train
    assert train.stop_at is None and train.precision == "float32" and train.device == "cuda"


def _solved_rows_at_32() -> set[str]:
    """The zoo-frontier rows (model config and lr) that solved 32 pairs in >= 5 of their seeds,
    from its archived records."""
    per_row: dict[str, list[bool]] = {}
    for run in FRONTIER.iterdir():
        if not (run / "summary.json").is_file():
            continue
        cfg = json.loads((run / "config.json").read_text())
        if cfg["task"]["levels"] != [[32, 32]]:
            continue
        row = json.dumps([_row(cfg["model"]), cfg["train"]["lr"]], sort_keys=True)
        acc = json.loads((run / "summary.json").read_text())["test"]["acc"]
        per_row.setdefault(row, []).append(acc >= 0.95)
    return {row for row, solved in per_row.items() if sum(solved) >= 5}


def _row(model: dict) -> dict:
    """A row of the table: its model config without what the table size sets."""
    return {k: v for k, v in model.items() if k not in ("max_len", "vocab_size", "pattern_opts")}


def test_the_64_pair_table_runs_the_rows_that_solved_32_pairs():
    exp = load_experiment(ROOT / gc.FRONTIER_EXPERIMENT)
    rows = {json.dumps([_row(r.config.to_json()["model"]), r.config.train.lr], sort_keys=True)
            for r in exp.runs}
    assert rows == _solved_rows_at_32()
    assert len(exp.runs) == 10 * len(rows)
    for run in exp.runs:
        cfg = run.config
        assert cfg.task.levels == ((64, 64),) or list(map(list, cfg.task.levels)) == [[64, 64]]
        assert cfg.train.steps == 10_000 and cfg.train.precision == "float32"
        assert cfg.train.device == "cuda" and cfg.train.stop_at == 0.99
        assert cfg.to_json()["train"]["precision"] == "float32"


def _fake_records(folder: Path, solved: set[str]) -> None:
    exp = load_experiment(ROOT / gc.FRONTIER_EXPERIMENT)
    for run in exp.runs:
        d = folder / run.name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(run.config.to_json()))
        acc = 1.0 if run.config.model.name in solved else 0.1
        (d / "summary.json").write_text(json.dumps({
            "steps": 10_000, "stopped_at": 2000 if acc == 1.0 else 10_000, "best_step": 2000,
            "valid": {"acc": acc, "loss": 0.1}, "test": {"acc": acc, "loss": 0.1}}))
        (d / "metrics.jsonl").write_text("")


def test_the_64_pair_claims_address_its_rows(tmp_path):
    """Every claim evaluates on records of this grid (no "cannot check"), and says what the
    solve counts say: a row that solves every seed beats one that solves none (Fisher), and two
    rows that solve none are not separable."""
    solved = {"transformer", "gated-deltanet", "deltanet", "mamba2+hax"}
    _fake_records(tmp_path, solved)
    data = read_toml(ROOT / gc.FRONTIER_EXPERIMENT)
    expects = data["report"]["expect"]
    checks = build_report([tmp_path], experiment=data)["checks"]
    assert len(checks) == len(expects) >= 5
    for e, c in zip(expects, checks, strict=True):
        assert not c["detail"].startswith("cannot check"), c
        if "value" in e:  # the attention control
            want = e["a"]["model.name"] in solved
        else:
            want = e["a"]["model.name"] in solved and e["b"]["model.name"] not in solved
        assert c["verdict"] == ("pass" if want else "fail"), c


def test_precision_stays_out_of_config_json_when_unset():
    exp = load_experiment(ROOT / "experiments" / "zoo-frontier" / "zoo-frontier.toml")
    assert all("precision" not in r.config.to_json()["train"] for r in exp.runs[:5])
    # the archived runs keep their hashes (their folder names end with them)
    for run in sorted(FRONTIER.iterdir())[:20]:
        if (run / "config.json").is_file():
            cfg = json.loads((run / "config.json").read_text())
            cfg.pop("versions", None), cfg.pop("n_params", None)
            assert config_hash(RunConfig.model_validate(cfg)) == run.name.rsplit("-", 1)[1]
    cfg = exp.runs[0].config
    forced = cfg.model_copy(update={"train": cfg.train.model_copy(
        update={"precision": "float32"})})
    assert forced.to_json()["train"]["precision"] == "float32"
    assert config_hash(forced) != config_hash(cfg)


def test_arithmetic_on_the_cpu_is_float32():
    import torch

    assert arithmetic(None, torch.device("cpu")) == (False, "float32")
    assert arithmetic("float32", torch.device("cpu")) == (False, "float32")


def _fake_sweep(folder: Path, finished: list[str], cut: list[str]) -> None:
    folder.mkdir(parents=True)
    (folder / "sweep.json").write_text("{}")
    for name in finished + cut:
        (folder / name).mkdir()
        for f in ("config.json", "metrics.jsonl"):
            (folder / name / f).write_text(f"{name} {f}")
        (folder / name / "model.safetensors").write_bytes(b"w" * 64)
    for name in finished:
        (folder / name / "summary.json").write_text("{}")
    for name in cut:
        (folder / name / gc.RESUME_FILE).write_bytes(b"r" * 64)


def test_records_pack_and_resume_round_trip(tmp_path, monkeypatch):
    out, work = tmp_path / "out", tmp_path / "work"
    sweep = work / "runs" / "exp"
    _fake_sweep(sweep, ["a-1", "b-2"], ["c-3"])
    records = out / "data" / "records" / "frontier64" / "exp"
    assert gc.sync_sweep(sweep, records) == 2
    assert sorted(p.name for p in (records / "a-1").iterdir()) == sorted(gc.RUN_FILES)
    assert not (records / "c-3").exists()
    packed = gc.pack(out, work)
    assert packed["files"] == [gc.PACK]
    with tarfile.open(out / gc.PACK) as tar:
        names = set(tar.getnames())
    assert "data/records/frontier64/exp/a-1/summary.json" in names
    assert f"data/unfinished/frontier64/exp/c-3/{gc.RESUME_FILE}" in names
    assert "data/unfinished/frontier64/exp/c-3/model.safetensors" not in names
    # the next lease: a fresh folder and work folder, from the tarball
    out2, work2 = tmp_path / "out2", tmp_path / "work2"
    gc.restore(out / gc.PACK, out2)
    assert gc.adopt_unfinished(out2 / "data", work2) == 1
    assert (work2 / "runs" / "exp" / "c-3" / gc.RESUME_FILE).is_file()
    assert not (out2 / "data" / "unfinished").exists()
    assert gc.seed_sweep(out2 / "data" / "records" / "frontier64" / "exp",
                         work2 / "runs" / "exp") == 2
    assert (work2 / "runs" / "exp" / "b-2" / "summary.json").is_file()
    # above the limit the pack is split into parts, and the first part restores them all
    monkeypatch.setattr(gc, "PACK_LIMIT", 200)
    parts = gc.pack(out, work)["files"]
    assert len(parts) > 1 and parts[0] == f"{gc.PACK}.00"
    assert not (out / gc.PACK).exists()
    out3 = tmp_path / "out3"
    gc.restore(out / parts[0], out3)
    assert (out3 / "data" / "records" / "frontier64" / "exp" / "a-1" / "summary.json").is_file()


def test_finished_zoo_tests_are_read_from_every_lease(tmp_path):
    for lease, tests in ((1, [("a", "passed"), ("b", "cut")]), (2, [("c", "failed")])):
        d = tmp_path / f"lease-{lease}"
        d.mkdir()
        (d / "gpu-check.json").write_text(json.dumps({"tests": [
            {"id": f"test_gpu_zoo::{n}", "path": "test_gpu_zoo", "outcome": o}
            for n, o in tests] + [{"id": "test_gpu_ssm::x", "path": "test_gpu_ssm",
                                   "outcome": "passed"}]}))
    assert gc.finished_zoo_tests(tmp_path) == {"test_gpu_zoo::a", "test_gpu_zoo::c"}


def test_a_bad_experiment_file_is_one_line_and_exit_2(tmp_path, capsys):
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nname = "no-such-model"\n[grid]\n"train.seed" = [0]\n')
    assert gc.main(["sweep", str(bad), "--root", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"error: {bad}")


def test_overrides_drop_axes_over_the_overridden_fields():
    data = {"grid": {"train.seed": [0], "train.steps": [1, 2]},
            "link": [{"train.steps": [1], "task.levels": [[[4, 4]]]}, {"train.device": ["a"]}]}
    gc._drop_axes(data, "grid", {"train.steps"})
    gc._drop_axes(data, "link", {"train.steps", "train.device"})
    assert data == {"grid": {"train.seed": [0]}, "link": [{"task.levels": [[[4, 4]]]}]}


def test_summary_fits_100_columns():
    result = {"lease": 1, "budget_s": 500, "machine": {"device": "NVIDIA H200", "torch": "2.11"},
              "workers": [{"workers": 16, "runs": 32, "finished": 30, "wall_s": 123.4,
                           "runs_per_min": 14.59, "status": "cut", "lease": 1,
                           "steps": 9000, "steps_per_s": 72.9,
                           "gpu_util_pct_mean": 87.5}],
              "pieces": [{"piece": "check", "status": "ran", "note": "zoo: " + "x " * 120}]}
    lines = gc.summary_lines(result)
    assert len(lines) > 4 and all(len(line) <= 100 for line in lines)


def test_the_h200s_passed_zoo_tests_are_not_run_again():
    done = gc.passed_in_log(ROOT / gc.ZOO_DONE_LOG)
    text = (ROOT / gc.ZOO_DONE_LOG).read_text()
    for test_id in done:
        name = test_id.split("::", 1)[1]
        line = next(ln for ln in text.splitlines() if f"::{name} " in ln)
        assert " PASSED" in line or " SKIPPED" in line
    assert "test_gpu_zoo::test_zoo_mixer_on_fla_equals_its_torch_chunked_form[" \
           "linear-attn-elu-bfloat16]" not in done  # failed there: run again
    assert len(done) == text.count(" PASSED") + text.count(" SKIPPED") > 0


def test_the_elu_probe_compares_the_mapping_with_the_torch_form():
    """On the CPU with FLA's naive reference in the kernel's place (as the dispatch tests do):
    every case yields the output's and each gradient's error, float32 cases agree, and a
    kernel whose scale is off is caught. Without CUDA the probe says it skipped."""
    from tests.mixers.zoo_forms import fla_naive

    la = fla_naive("linear_attn")

    def naive(q, k, v, scale, normalize):
        return la.naive_recurrent_linear_attn(q, k, v, scale=scale, normalize=normalize)

    def wrong(q, k, v, scale, normalize):
        return naive(q, k, v, 2 * scale, normalize)

    cases = [(100, "elu", "ones", 17, "float32"), (100, "identity", "random", 16, "float32")]
    saved = []
    got = gc.elu_probe(True, saved.append, cases, device="cpu", kernel=naive)
    assert [c["V"] for c in got["cases"]] == [17, 16] and len(saved) == 2
    for case in got["cases"]:
        assert set(case["errors"]) == {"out", "dq", "dk", "dv"}
        assert case["max_rel_err"] < 1e-4, case
    bad = gc.elu_probe(True, None, cases[:1], device="cpu", kernel=wrong)["cases"][0]
    assert bad["max_rel_err"] > 0.1
    assert gc.elu_probe(False) == {"skipped": "skipped: no CUDA"}


def test_steps_trained_counts_each_runs_last_logged_step(tmp_path):
    for name, steps in (("a", [100, 200, 300]), ("b", [100]), ("c", [])):
        (tmp_path / name).mkdir()
        (tmp_path / name / "metrics.jsonl").write_text(
            "".join(json.dumps({"step": s, "split": sp}) + "\n"
                    for s in steps for sp in ("train", "valid")))
    assert gc.steps_trained(tmp_path) == 300 + 100
