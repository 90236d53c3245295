"""`bench/steps.py --grouped`: the batch-G copy really steps G x 32 samples, and the ratios."""

import pytest

from recall_lab.bench import steps


def test_grouped_case_steps_g_times_32_samples_per_step():
    out = steps._grouped_case("mamba", groups=(2, 4), rounds=2, steps=1, warmup=1)
    assert set(out) == {"1", "2", "4"}
    for g, r in out.items():
        assert r["batch"] == 32 * int(g)
        assert r["samples"] == (1 + 2 * 1) * 32 * int(g)  # warm-up + rounds x steps, all timed
        assert len(r["cpu_ms"]) == len(r["wall_ms"]) == 2
        assert all(ms > 0 for ms in r["cpu_ms"] + r["wall_ms"])


def test_grouped_gain_and_samples_per_second():
    assert steps.grouped_gain(10.0, 20.0, 2) == pytest.approx(1.0)  # same time per sample
    assert steps.grouped_gain(10.0, 50.0, 8) == pytest.approx(1.6)
    assert steps.samples_per_s(16.0, 32) == pytest.approx(2000.0)


def test_summarise_grouped_pairs_rounds():
    rounds = {"1": {"batch": 32, "cpu_ms": [10.0, 20.0]},
              "2": {"batch": 64, "cpu_ms": [10.0, 30.0]}}
    r = steps.summarise_grouped(rounds)[2]
    assert r["batch"] == 64 and r["rounds"] == 2
    assert (r["ms_32"], r["ms_g"], r["min_ms_32"], r["min_ms_g"]) == (15.0, 20.0, 10.0, 10.0)
    assert r["gain"] == pytest.approx((2.0 + 4 / 3) / 2)  # median of 2x10/10 and 2x20/30
    assert (r["gain_lo"], r["gain_hi"]) == (pytest.approx(4 / 3), pytest.approx(2.0))
    assert r["gain_min"] == pytest.approx(2.0)  # from the fastest rounds, 2 x 10 / 10
    assert r["sps_32"] == pytest.approx(32e3 / 15) and r["sps_g"] == pytest.approx(64e3 / 20)
    # the gain comes from samples/s: their ratio is the median-based bound
    assert r["sps_g"] / r["sps_32"] == pytest.approx(steps.grouped_gain(15.0, 20.0, 2))
    rounds["2"]["cpu_ms"].append(5.0)
    with pytest.raises(ValueError):  # rounds must pair up
        steps.summarise_grouped(rounds)


def test_summarise_compare_medians_minima_and_hybrid_fraction_per_process():
    def proc(base, hyb):
        return {"mamba": {"wall_ms": base, "cpu_ms": base},
                "mamba+hax": {"wall_ms": hyb, "cpu_ms": hyb}}
    got = {"old": [proc(20.0, 25.0), proc(30.0, 40.0), proc(10.0, 20.0)],
           "new": [proc(10.0, 12.0), proc(12.0, 15.0), proc(20.0, 20.0)]}
    t = steps.summarise_compare(got, ("mamba", "mamba+hax"))
    assert t["mamba"]["old_cpu_ms"] == 20.0 and t["mamba"]["old_cpu_ms_min"] == 10.0
    assert t["mamba"]["new_cpu_ms"] == 12.0 and t["mamba"]["speedup_cpu"] == pytest.approx(20 / 12)
    assert t["mamba"]["speedup_cpu_min"] == pytest.approx(10 / 10)
    # per process 0.8, 0.75, 0.5 -> median 0.75 (not 20 / 25 from the separate medians)
    assert t["mamba+hax"]["old_of_base"] == pytest.approx(0.75)
    assert t["mamba+hax"]["new_of_base"] == pytest.approx(10 / 12)  # of 10/12, 12/15, 20/20
    assert "old_of_base" not in t["mamba"]


def test_case_interleaves_models_in_one_process():
    out = steps._case("mamba,mamba+hax", steps=1, warmup=1)
    assert set(out) == {"mamba", "mamba+hax"}
    assert all(r["cpu_ms"] > 0 and r["wall_ms"] > 0 for r in out.values())
