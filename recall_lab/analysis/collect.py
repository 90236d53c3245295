"""What the analysis reads from a trained model: evaluation inputs of a given length,
one forward pass that returns every SSM layer's SSMParams and every sparse branch's (q, k, idx),
and the per-length mean-distance table of both memories of a hybrid.

Inputs of length L: samples of the run's task with the same id pools (so the model can name every
token), the upper levels at their largest training size and the key level sized so one sample has
at least L tokens; the sample is cut to exactly L tokens. When no table that fits the id pools is
that long, complete samples are concatenated (each starts with BOS) and the result is cut to L.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from recall_lab.analysis.mean_distance import (
    attention_mean_distance,
    layer_mean_distance,
    normalise_by_length,
    sparse_attention_weights,
)
from recall_lab.generators import TaskSpec, generate
from recall_lab.generators.errors import RecallLabError


def training_length(spec: Any) -> int:
    """Length of the training sequences of a task: its padded length, else its longest sample."""
    return int(spec.seq_len or spec.max_len)


def spec_for_length(spec: Any, length: int) -> tuple[Any, int]:
    """(fixed-size TaskSpec with the same vocabulary, samples to concatenate) for `length`."""
    if length < 2:
        raise RecallLabError(f"evaluation length must be >= 2, got {length}")
    upper = [hi for _, hi in spec.levels[:-1]]
    pool = spec.pools[-1]
    n_k = pool
    for n in range(1, pool + 1):
        if TaskSpec.sample_length([*upper, n]) >= length:
            n_k = n
            break
    sizes = [*upper, n_k]
    fixed = TaskSpec(levels=tuple((s, s) for s in sizes), values=spec.values, pools=spec.pools)
    per = TaskSpec.sample_length(sizes)
    return fixed, -(-length // per)


def eval_inputs(spec: Any, length: int, n: int, seed: int = 0) -> torch.Tensor:
    """n sequences of exactly `length` tokens from `spec` (see module docstring), int64 [n, L]."""
    if n < 1:
        raise RecallLabError(f"need at least one sample, got {n}")
    fixed, repeat = spec_for_length(spec, length)
    # One seed per row: row r is the same whatever n is (the attention map of sample r is the
    # sample the mean-distance table used).
    rows = [generate(fixed, repeat, np.random.SeedSequence(seed, spawn_key=(length, r)))
            .inputs.reshape(-1)[:length] for r in range(n)]
    return torch.from_numpy(np.stack(rows))


@dataclass
class BranchCapture:
    """One sparse-attention branch: the pattern's inputs and output, and the softmax scale."""

    q: torch.Tensor
    k: torch.Tensor
    idx: torch.Tensor
    scale: float

    def weights(self) -> torch.Tensor:
        return sparse_attention_weights(self.q, self.k, self.idx, self.scale)


@dataclass
class Capture:
    params: list[Any] = field(default_factory=list)  # one SSMParams per SSM layer, in order
    branches: list[BranchCapture | None] = field(default_factory=list)  # aligned with params
    logits: torch.Tensor | None = None


def _ssm_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    return [b for b in getattr(model, "blocks", []) if hasattr(b, "mixer")]


@torch.no_grad()
def capture(model: torch.nn.Module, ids: torch.Tensor) -> Capture:
    """One forward pass in eval mode returning SSMParams per SSM layer and, for hybrid layers, the
    sparse branch's q, k and key indices (read by a forward hook on the branch's pattern)."""
    blocks = _ssm_blocks(model)
    if not blocks:
        raise RecallLabError("this model has no SSM layers to analyse")
    was_training = model.training
    model.eval()
    cap = Capture(branches=[None] * len(blocks))
    hooks = []
    for i, block in enumerate(blocks):
        branch = getattr(block, "branch", None)
        if branch is None:
            continue

        def hook(_mod, args, out, i=i, scale=float(branch.d_qk) ** -0.5):
            cap.branches[i] = BranchCapture(args[0], args[1], out[0], scale)

        hooks.append(branch.pattern.register_forward_hook(hook))
    try:
        out = model(ids, return_params=True)
    finally:
        for h in hooks:
            h.remove()
        model.train(was_training)
    cap.params = list(out.params or [])
    cap.logits = out.logits
    if len(cap.params) != len(blocks):
        raise RecallLabError("the model did not return SSM parameters for every SSM layer")
    return cap


def _branch_row(br: BranchCapture, layer: int, length: int, all_tokens: bool) -> dict:
    md = attention_mean_distance(br.idx, br.weights())  # [b, h, L]
    row = {"length": length, "layer": layer, "memory": "attention",
           "md_last": float(md[..., -1].nanmean()),
           "md_last_norm": float(md[..., -1].nanmean()) / length}
    if all_tokens:
        row["md_all"] = float(md.nanmean())
        row["md_all_norm"] = float(normalise_by_length(md).nanmean())
    return row


def mean_distance_table(model: torch.nn.Module, spec: Any, lengths: Sequence[int], *,
                        n: int = 4, seed: int = 0, all_tokens: bool = True,
                        progress: Callable[[int], None] | None = None) -> list[dict]:
    """Rows {length, layer, memory ("ssm" | "attention"), md_last, md_last_norm, md_all,
    md_all_norm, delta_sum_last}: channel- and batch-mean values per layer and length."""
    rows: list[dict] = []
    for length in lengths:
        ids = eval_inputs(spec, int(length), n, seed)
        cap = capture(model, ids)
        for layer, (p, br) in enumerate(zip(cap.params, cap.branches, strict=True)):
            res = layer_mean_distance(p, layer, all_tokens=all_tokens)
            rows.append({"memory": "ssm", **res.summary()})
            if br is not None:
                rows.append(_branch_row(br, layer, int(length), all_tokens))
        if progress is not None:
            progress(int(length))
    return rows
