"""A tiny experiment for the experiment-layer tests: 3 key-value pairs, 4 values, a 16-wide model,
a few steps (seconds per run)."""

import copy

import pytest

TINY = {
    "name": "tiny",
    "model": {"name": "mamba", "d_model": 16, "d_state": 4, "k": 4, "lsh_bits": 2},
    "train": {"steps": 6, "batch_size": 4, "eval_every": 3, "eval_samples": 8,
              "test_samples": 8, "warmup": 2, "device": "cpu"},
    "task": {"levels": [[3, 3]], "values": 4},
}


@pytest.fixture
def tiny():
    """A fresh copy of the tiny experiment's tables (tests add a [grid])."""
    return copy.deepcopy(TINY)


class Recorder:
    """A sweep monitor that remembers what it was told."""

    def __init__(self):
        self.todo, self.ended, self.steps = None, [], []

    def start(self, total, todo, **plan):
        self.total, self.todo, self.plan = total, list(todo), plan

    def running(self, name):
        pass

    def step(self, name, step, steps):
        self.steps.append((name, step, steps))

    def finished(self, name, result):
        self.ended.append((name, result["status"]))


@pytest.fixture
def captured(monkeypatch):
    """The report's figures drawn but not written: file name -> matplotlib Figure."""
    from recall_lab.experiments import plots

    figs = {}

    def keep(fig, path):
        fig.canvas.draw()
        figs[path.name] = fig
        return path

    monkeypatch.setattr(plots, "save_figure", keep)
    return figs
