"""`bench train`'s HAX branch breakdown: every part is timed, in its own subprocess."""

from recall_lab.bench import train


def test_breakdown_times_every_part_in_a_subprocess():
    out = train._child("--breakdown", 2, 24, 4)
    assert out is not None, "the --breakdown subprocess failed"
    assert (out["batch"], out["length"], out["d_qk"]) == (2, 24, 4)
    assert set(out["ms"]) == set(train.PARTS)
    assert all(ms is not None and ms > 0 for ms in out["ms"].values()), out["ms"]


def test_failed_child_is_none():
    assert train._child("--no-such-option") is None  # argparse exits 2 before torch is imported


def test_steps_and_models_come_from_the_environment(monkeypatch):
    import io

    from rich.console import Console

    seen = []

    def fake_spawn(name, batch, steps, device="auto"):
        seen.append((name, batch, steps))
        return None  # reported as failed; the table still prints

    monkeypatch.setattr(train, "_spawn", fake_spawn)
    monkeypatch.setenv("RECALL_LAB_BENCH_MODELS", "mamba,mamba+hax")
    monkeypatch.setenv("RECALL_LAB_BENCH_STEPS", "17")
    train.run(Console(file=io.StringIO(), width=200), quick=False)
    assert seen == [("mamba", 32, 17), ("mamba+hax", 32, 17)]


def test_matmul_peak_is_measured_in_its_own_subprocess():
    out = train._child("--peak")
    assert out is not None and out["gflops"] > 0


def test_time_to_answer_trains_the_capacity_cell():
    """The cell time-to-answer trains is capacity.toml's, read from the file: 8 pairs, state 4,
    the recipe (warm-up 500, stop at held-out 0.99); it once matched no cell and every answer
    printed 'failed'."""
    from pathlib import Path

    import tomllib

    data = tomllib.loads((Path(train.__file__).resolve().parents[2] / "experiments"
                          / "capacity" / "capacity.toml").read_text())
    for name in ("transformer", "mamba"):
        cfg = train.capacity_cell(name, seed=3)
        assert cfg.model.name == name and cfg.model.d_state == 4 and cfg.train.seed == 3
        assert [list(lv) for lv in cfg.task.levels] == [[8, 8]]
        assert cfg.train.stop_at == data["train"]["stop_at"] == 0.99
        assert cfg.train.warmup == data["train"]["warmup"]
        assert cfg.train.steps == data["train"]["steps"]
