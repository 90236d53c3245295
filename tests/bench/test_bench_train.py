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
