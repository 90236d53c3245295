"""Logits only where targets are scored (models/lm.py `forward_scored`, issue 56): the loss,
its gradients and the metrics equal the full head's; only large vocabularies take the path, and
no committed run is one of them."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
import torch

from recall_lab.data import held_out
from recall_lab.evaluate import evaluate, row_scores
from recall_lab.generators import IGNORE
from recall_lab.models import build_model
from recall_lab.models.lm import (
    SCORED_HEAD_MIN_VOCAB,
    forward_scored,
    scored_positions,
    uses_scored_head,
)
from recall_lab.train import objective

ROOT = Path(__file__).resolve().parents[2]


def _batch(vocab: int, b: int = 5, length: int = 24, seed: int = 0):
    """Random ids with a varying number of scored positions per row (one row none)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(3, vocab, (b, length), generator=g)
    y = torch.full((b, length), IGNORE)
    for r in range(b - 1):
        pos = torch.randperm(length, generator=g)[: 1 + 2 * r]
        y[r, pos] = torch.randint(3, vocab, (len(pos),), generator=g)
    return x, y


def test_scored_positions_keep_every_target_in_order():
    _, y = _batch(50)
    at, yc = scored_positions(y)
    assert at.shape == yc.shape == (5, int((y != IGNORE).sum(1).max()))
    for r in range(5):
        want = y[r][y[r] != IGNORE]
        assert torch.equal(yc[r][yc[r] != IGNORE], want)  # same targets, same order
        assert torch.equal(y[r, at[r]][yc[r] != IGNORE], want)  # read at those positions


@pytest.mark.parametrize("name", ["transformer", "mamba"])
def test_loss_gradients_and_metrics_equal_the_full_head(name):
    torch.manual_seed(0)
    model = build_model(name, 97, d_model=16).double()
    x, y = _batch(97)
    full = model(x)
    at, yc = scored_positions(y)
    part = model(x, at=at)
    loss_f, _, _, m_f = objective(full, y, 0.1)
    loss_p, _, _, m_p = objective(part, yc, 0.1)
    assert abs(loss_p.item() - loss_f.item()) <= 1e-6 * abs(loss_f.item())
    grads = []
    for loss in (loss_f, loss_p):
        model.zero_grad()
        loss.backward(retain_graph=True)
        grads.append([p.grad.clone() for p in model.parameters()])
    for gf, gp in zip(*grads, strict=True):
        assert torch.linalg.vector_norm(gf - gp) <= 1e-6 * torch.linalg.vector_norm(gf)
    assert {k: float(v) for k, v in m_f.items() if k != "ce_sum"} == \
        {k: float(v) for k, v in m_p.items() if k != "ce_sum"}
    np.testing.assert_array_equal(row_scores(full.logits, y), row_scores(part.logits, yc))


def test_threshold_switches_the_path_and_evaluation_agrees(monkeypatch):
    from recall_lab.generators.tasks import generator_task

    spec = generator_task({"generator": "zoology-mqar", "kwargs": {
        "vocab_size": 2048, "input_seq_len": 32, "num_kv_pairs": 4, "power_a": 0.01,
        "random_non_queries": False}})
    torch.manual_seed(0)
    model = build_model("transformer", spec.vocab().size, d_model=16, n_heads=1).double()
    assert spec.vocab().size >= SCORED_HEAD_MIN_VOCAB and uses_scored_head(model)
    x, y = held_out(spec, 40, 0, "valid")
    out, yc = forward_scored(model, torch.from_numpy(x), torch.from_numpy(y))
    assert out.logits.shape[:2] == yc.shape == (40, 4)  # the 4 queries of each row
    scored = evaluate(model, x, y, 16, slices=np.zeros(40, dtype=np.int64))
    monkeypatch.setattr("recall_lab.models.lm.SCORED_HEAD_MIN_VOCAB", 10**9)
    assert not uses_scored_head(model)
    full = evaluate(model, x, y, 16, slices=np.zeros(40, dtype=np.int64))
    assert scored["acc"] == full["acc"] and scored["slices"] == full["slices"]
    assert abs(scored["loss"] - full["loss"]) <= 1e-6 * full["loss"]  # float32 CE sums


def test_small_vocabularies_keep_the_full_head():
    model = build_model("transformer", SCORED_HEAD_MIN_VOCAB - 1, d_model=16)
    x, y = _batch(SCORED_HEAD_MIN_VOCAB - 1)
    out, same = forward_scored(model, x, y)
    assert same is y and out.logits.shape == (*x.shape, SCORED_HEAD_MIN_VOCAB - 1)


HEAD_SINCE = "2026-11-28T04:17:51+00:00"  # the commit that added the scored-positions head
# result folders of checks (not sweeps) made after the head existed, which record a vocabulary
# of 8,192: zoology-fidelity compares the lab's model with zoology's on all logits (2026-11-29);
# forgetting-mqar compares the task's rows with zoology's generator at vocabulary 8,192 (no model)
CHECKS_AFTER_HEAD = ("zoology-fidelity", "forgetting-mqar")


def test_every_committed_run_is_below_the_threshold():
    """So each run committed before the head existed trains through the full head,
    bit-identically to before the change; a committed run at a vocabulary that takes the scored
    head was launched after it existed (its sweep records when)."""
    after = set()  # run folders launched with the head in the code
    for index in (ROOT / "docs" / "results").rglob("sweep.json"):
        for e in json.loads(index.read_text()).get("runs", []):
            if (e.get("launched") or "") >= HEAD_SINCE:
                after.add(index.parent / e["name"])
    vocabs, large = [], []
    for path in (ROOT / "docs" / "results").rglob("config.json"):
        v = json.loads(path.read_text())["model"]["vocab_size"]
        (large if v >= SCORED_HEAD_MIN_VOCAB else vocabs).append((path.parent, v))
    assert vocabs and all(folder in after for folder, _ in large), large
    for index in (ROOT / "docs" / "results").rglob("sweep.json"):  # every run it lists
        for e in json.loads(index.read_text()).get("runs", []):
            if e.get("status") == "done" and index.parent / e["name"] not in after:
                assert e["config"]["model"]["vocab_size"] < SCORED_HEAD_MIN_VOCAB, index
    for path in (ROOT / "docs" / "results").rglob("*.json*"):  # any other record
        if path.parent in after or path.name == "sweep.json" or path.name.startswith("eval-"):
            continue  # records of runs launched after the head (read above)
        if path.relative_to(ROOT / "docs" / "results").parts[0] in CHECKS_AFTER_HEAD:
            continue
        found = [int(v) for v in re.findall(r'"vocab_size": ?(\d+)', path.read_text())]
        assert not found or max(found) < SCORED_HEAD_MIN_VOCAB, path
