"""Figure helpers: the log-scale map transform and that PNGs are written."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from recall_lab.analysis.plots import log_map, plot_attention_map, plot_mean_distance
from recall_lab.generators.errors import RecallLabError


def test_log_map_normalises_clips_and_blanks_the_upper_triangle():
    m = torch.tensor([[-4.0, 9.0, 9.0], [0.4, 2.0, 9.0], [0.0, 4e-5, 1.0]])
    out = log_map(m, threshold=1e-3)
    expected = np.array([[0.0, np.nan, np.nan],
                         [math.log10(0.1), math.log10(0.5), np.nan],
                         [-3.0, -3.0, math.log10(0.25)]])
    np.testing.assert_allclose(out, expected)
    with pytest.raises(RecallLabError):
        log_map(m, threshold=2.0)
    with pytest.raises(RecallLabError):
        log_map(torch.zeros(2, 3))


def test_plots_write_png(tmp_path):
    a = plot_attention_map(torch.rand(20, 20).tril(), tmp_path / "a.png",
                           mean_distance=torch.arange(20) / 2)
    rows = [{"length": L, "md_last": L / 3, "md_last_norm": 1 / 3, "delta_sum_last": L / 10}
            for L in (8, 16, 32)]
    b = plot_mean_distance({"x": rows, "y": rows[:2]}, tmp_path / "b.png", delta_sum=True,
                           train_lengths={"x": 16, "y": 8})
    for p in (a, b):
        assert p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
