"""The analysis of one run directory, as the CLI runs it: the mean-distance table and figure over
evaluation lengths, and the attention map of one layer on one sample. Outputs are never
overwritten unless `force`.

Which weights load is the lab's one rule: the best checkpoint (the highest validation accuracy
during training) unless `checkpoint="last"` asks for the final step's, as `eval`, `extrapolate`,
`mean-distance` and `attention-map` take it with `--checkpoint best|last`."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch

from recall_lab.analysis.collect import (
    capture,
    eval_inputs,
    mean_distance_table,
    training_length,
)
from recall_lab.analysis.hidden_attention import hidden_attention
from recall_lab.analysis.mean_distance import mean_distance
from recall_lab.analysis.plots import plot_attention_map, plot_mean_distance
from recall_lab.checkpoint import write_json
from recall_lab.config import resolve_task
from recall_lab.evaluate import fit_vocab
from recall_lab.generators.errors import RecallLabError
from recall_lab.runs import load_run_config, load_run_model, refuse_overwrite


def load_run(run: str | Path, checkpoint: str = "best") -> tuple[torch.nn.Module, Any]:
    """(model in eval mode with adapters merged, RunConfig) of a run directory, with its
    `checkpoint` weights: "best" (the default) or "last"."""
    cfg = load_run_config(Path(run))
    return load_run_model(Path(run), checkpoint, cfg, option="--checkpoint", merge=True), cfg


def _refuse_existing(paths: Sequence[Path], force: bool) -> None:
    for p in paths:
        refuse_overwrite(p, force)


def default_lengths(train_len: int) -> list[int]:
    """Half, one, two, four and eight times the training length."""
    return [max(8, train_len // 2), train_len, 2 * train_len, 4 * train_len, 8 * train_len]


def _task(cfg: Any, task: str | None) -> Any:
    if task is None:
        return cfg.task
    spec, _ = resolve_task(task)
    return fit_vocab(spec, cfg.task)


def run_mean_distance(run: str | Path, *, lengths: Sequence[int] | None = None,
                      task: str | None = None, samples: int = 4, seed: int = 0,
                      checkpoint: str = "best", all_tokens: bool = True,
                      out: str | Path | None = None, force: bool = False,
                      progress: Callable[[int], None] | None = None) -> dict:
    """Mean distance per layer (both memories of a hybrid) at each evaluation length; writes
    mean_distance.json and mean_distance.png into `out` (default RUN/analysis)."""
    run = Path(run)
    model, cfg = load_run(run, checkpoint)
    spec = _task(cfg, task)
    train_len = training_length(cfg.task)
    lengths = sorted(set(lengths)) if lengths else default_lengths(train_len)
    if min(lengths) < 2:
        raise RecallLabError("evaluation lengths must be >= 2")
    if samples < 1:
        raise RecallLabError(f"--samples must be >= 1, got {samples}")
    out = Path(out) if out is not None else run / "analysis"
    json_path, png_path = out / "mean_distance.json", out / "mean_distance.png"
    _refuse_existing([json_path, png_path], force)
    rows = mean_distance_table(model, spec, lengths, n=samples, seed=seed,
                               all_tokens=all_tokens, progress=progress)
    series: dict[str, list[dict]] = {}
    for r in rows:
        series.setdefault(f"{r['memory']} layer {r['layer']}", []).append(r)
    out.mkdir(parents=True, exist_ok=True)
    key, which_tokens = ("md_all", "all tokens") if all_tokens else ("md_last", "last token")
    plot_mean_distance(series, png_path, key=key, train_lengths={k: train_len for k in series},
                       title=f"{cfg.model.name}: mean distance ({which_tokens}), "
                             f"training length {train_len} (dashed)", delta_sum=True)
    result = {"run": str(run), "model": cfg.model.name, "checkpoint": checkpoint,
              "task": spec.model_dump(mode="json"), "train_length": train_len,
              "samples": samples, "seed": seed, "lengths": list(lengths), "rows": rows,
              "png": str(png_path)}
    write_json(json_path, result)
    result["json"] = str(json_path)
    return result


def run_attention_map(run: str | Path, *, layer: int, index: int, length: int | None = None,
                      task: str | None = None, seed: int = 0, checkpoint: str = "best",
                      channel: str = "mean", memory: str = "ssm", threshold: float = 1e-3,
                      out: str | Path | None = None, force: bool = False) -> dict:
    """PNG of one layer's attention map on sample `index` (of the evaluation inputs of `length`,
    default the training length). channel: "mean" (signed channel mean, as the DeciMamba
    notebook), "abs" (mean of |alpha|) or a channel/head number. memory "attention" draws the
    hybrid's sparse branch instead (head mean of its softmax weights)."""
    run = Path(run)
    model, cfg = load_run(run, checkpoint)
    spec = _task(cfg, task)
    L = int(length) if length is not None else training_length(cfg.task)
    if index < 0:
        raise RecallLabError(f"--index must be >= 0, got {index}")
    if memory not in ("ssm", "attention"):
        raise RecallLabError(f"--memory must be 'ssm' or 'attention', got {memory!r}")
    name = f"attention_map_{memory}_layer{layer}_sample{index}_L{L}.png"
    path = Path(out) if out is not None else run / "analysis" / name
    _refuse_existing([path], force)
    ids = eval_inputs(spec, L, index + 1, seed)[index:index + 1]
    cap = capture(model, ids)
    if not 0 <= layer < len(cap.params):
        raise RecallLabError(f"--layer must lie in [0, {len(cap.params)}) for this model")
    if memory == "attention":
        br = cap.branches[layer]
        if br is None:
            raise RecallLabError(f"layer {layer} has no sparse-attention branch")
        w = br.weights()[0]  # [h, L, kk]
        dense = torch.zeros(w.shape[0], L, L, dtype=torch.float64)
        dense.scatter_add_(-1, br.idx[0].expand_as(w).clamp_min(0).long(),
                           torch.where(br.idx[0].expand_as(w) >= 0, w, 0).double())
        amap, what = dense.mean(0), "sparse attention (head mean)"
    else:
        if channel in ("mean", "abs"):
            reduce = "mean" if channel == "mean" else "abs_mean"
            amap = hidden_attention(cap.params[layer], reduce=reduce)[0]
            what = "hidden attention, " + ("signed channel mean" if channel == "mean"
                                           else "mean |alpha| over channels")
        else:
            try:
                c = int(channel)
            except ValueError:
                raise RecallLabError(f"--channel must be mean, abs or a number, got "
                                     f"{channel!r}") from None
            amap = hidden_attention(cap.params[layer], channels=[c])[0, 0]
            what = f"hidden attention, channel {c}"
    md = mean_distance(amap.to(torch.float64))
    path.parent.mkdir(parents=True, exist_ok=True)
    plot_attention_map(amap, path, threshold=threshold, mean_distance=md,
                       title=f"{cfg.model.name} layer {layer}, sample {index}, L={L} "
                             f"(train {training_length(cfg.task)})\n{what}, "
                             f"last-row mean distance {float(md[-1]):.1f}")
    return {"png": str(path), "layer": layer, "index": index, "length": L,
            "md_last": float(md[-1])}
