"""Accuracy on recall tasks: the paper's per-sample accuracy, whole-table exact match, loss.

Per-sample accuracy (the joint-recall paper's Sec. 5.1): for each sample, the fraction of its
inquiry keys whose value is predicted correctly (argmax over the whole vocabulary), averaged over
samples. Exact match: the fraction of samples with every value right. Loss: cross-entropy averaged
over value targets.

Evaluation is deterministic: the model is put in eval mode (context-dependent patterns use their
fixed seeded hash planes) and the held-out sets are generated from fixed seeds.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from recall_lab.config import RunConfig
from recall_lab.data import TEST_KEY, VALID_KEY, DataSource, held_out  # noqa: F401
from recall_lab.device import resolve_device
from recall_lab.generators import IGNORE, TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import sep_positions
from recall_lab.generators.tasks import GeneratorTask
from recall_lab.generators.vocab import Vocab
from recall_lab.models.decimation import resolve_auto_layers
from recall_lab.models.decode import decode_prompted
from recall_lab.models.lm import forward_scored
from recall_lab.models.registry import with_attention
from recall_lab.runs import (
    base_task,
    build_run_model,
    load_run_config,
    load_run_model,
    weights_path,
)


def batch_metrics(logits: torch.Tensor, targets: torch.Tensor) -> dict[str, torch.Tensor]:
    """Sums over a batch: CE sum, target count, per-sample accuracy sum, exact-match count."""
    mask = targets != IGNORE
    # half-precision logits are summed in float32; float64 ones (the fidelity checks against
    # other code, scripts/zoology_fidelity.py) stay float64
    wide = logits if logits.dtype == torch.float64 else logits.float()
    ce = F.cross_entropy(
        wide.reshape(-1, logits.shape[-1]), targets.reshape(-1),
        ignore_index=IGNORE, reduction="sum",
    )
    correct = (logits.argmax(-1) == targets) & mask
    n_t = mask.sum(1)
    has = n_t > 0
    per_sample = correct.sum(1).double() / n_t.clamp(min=1)
    return {
        "ce_sum": ce, "n_targets": n_t.sum(), "acc_sum": per_sample[has].sum(),
        "exact": (correct.sum(1) == n_t)[has].sum(), "n_samples": has.sum(),
    }


def check_batch_size(batch_size: int) -> None:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise RecallLabError(f"batch size must be an int >= 1, got {batch_size!r}")


def _trim(x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Columns past every row's last token and last target dropped (PAD = 0 pads joint-recall
    rows on the right; a generator task may use id 0 anywhere, so its last target counts)."""
    width = int((x != 0).sum(1).max(initial=1))
    scored = np.flatnonzero((y != IGNORE).any(0))
    if len(scored):
        width = max(width, int(scored[-1]) + 1)
    return x[:, :width], y[:, :width]


@torch.no_grad()
def evaluate(
    model: torch.nn.Module, inputs: np.ndarray, targets: np.ndarray,
    batch_size: int = 64, device: str | torch.device = "cpu", autocast: bool = False,
    decode: bool = False, slices: np.ndarray | None = None,
) -> dict[str, float]:
    """loss / acc / exact / n over a fixed set, in eval mode (training mode restored after).
    `decode`: logits by recurrent decoding (models/decode.py: prefill each row's information
    component, then step through the inquiry) instead of the parallel forward. `slices` (a
    label per row): also acc / exact / n per label, under "slices" (zoology's slices)."""
    check_batch_size(batch_size)
    was_training = model.training
    model.eval()
    totals: dict[str, float] = {}
    per_row: list[np.ndarray] = []
    try:
        for start in range(0, len(inputs), batch_size):
            x, y = _trim(inputs[start:start + batch_size], targets[start:start + batch_size])
            xt = torch.from_numpy(np.ascontiguousarray(x)).to(device)
            yt = torch.from_numpy(np.ascontiguousarray(y)).to(device)
            if decode:
                logits = decode_prompted(model, xt, Vocab.SEP)
            else:
                with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                    # large vocabularies: logits only at the scored positions, yt compacted
                    output, yt = forward_scored(model, xt, yt)
                    logits = output.logits
            for k, v in batch_metrics(logits, yt).items():
                totals[k] = totals.get(k, 0.0) + float(v)
            if slices is not None:
                per_row.append(row_scores(logits, yt))
    finally:
        model.train(was_training)
    n = max(totals.get("n_samples", 0.0), 1.0)
    out = {
        "loss": totals.get("ce_sum", 0.0) / max(totals.get("n_targets", 0.0), 1.0),
        "acc": totals.get("acc_sum", 0.0) / n,
        "exact": totals.get("exact", 0.0) / n,
        "n": int(totals.get("n_samples", 0)),
    }
    if slices is not None:
        out["slices"] = by_slice(np.concatenate(per_row) if per_row else np.zeros((0, 3)),
                                 np.asarray(slices)[: len(inputs)])
    return out


def row_scores(logits: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """[B, 3] per row: accuracy over its targets, exact (all right), has targets."""
    mask = targets != IGNORE
    correct = ((logits.argmax(-1) == targets) & mask).sum(1)
    n_t = mask.sum(1)
    acc = correct.double() / n_t.clamp(min=1)
    return torch.stack([acc, (correct == n_t).double(), (n_t > 0).double()], 1).cpu().numpy()


def by_slice(scores: np.ndarray, slices: np.ndarray) -> dict[str, dict]:
    """Per-sample accuracy and exact match averaged within each slice label (rows without
    targets left out), keyed by the label."""
    out = {}
    for label in np.unique(slices):
        rows = scores[(slices == label) & (scores[:, 2] > 0)]
        out[str(int(label))] = {"acc": float(rows[:, 0].mean()) if len(rows) else 0.0,
                                "exact": float(rows[:, 1].mean()) if len(rows) else 0.0,
                                "n": int(len(rows))}
    return out


def evaluate_run(
    run: Path, spec, n: int = 512, data_seed: int = 0, which: str = "best",
    batch_size: int = 64, device: str = "auto", decimate=None, attention: str | None = None,
    decode: bool = False,
) -> dict:
    """Evaluate a finished (or running) run's `which` weights ("best" or "last") on a task,
    e.g. longer sequences or other table sizes than it was trained on (extrapolation).

    `decimate` (a `DecimationConfig`): DeciMamba applied zero-shot to the trained weights
    (DeciMamba Sec. 4); "auto" layers are chosen by Mamba Mean Distance on 16 validation samples of
    the run's own task.

    `attention` (`recall_lab.models.registry.ATTENTIONS`): evaluate with another attention than the
    run's, e.g. "full" after SE-Attn fine-tuning (SE-Attn (Expansion Span) App. A, E.4).

    `decode`: also evaluate by recurrent decoding (float32, no autocast) and report its metrics
    under "decode", with whether its accuracy equals the parallel evaluation's."""
    run = Path(run)
    check_batch_size(batch_size)
    cfg = load_run_config(run)
    if attention is not None:
        cfg = cfg.model_copy(update={"model": with_attention(cfg.model, attention)})
    spec = fit_vocab(spec, cfg.task)
    weights_path(run, which)  # a bad `which` is reported before the device is looked at
    dev = resolve_device(device)
    model = load_run_model(run, which, cfg).to(dev)
    extra: dict = {}
    if decimate is not None:
        extra = set_decimation(model, decimate, cfg, data_seed, dev)
    source = (DataSource.for_run(cfg) if spec == cfg.task and cfg.train.data is not None and
              isinstance(spec, GeneratorTask) else DataSource(spec, data_seed))
    x, y = source.held_out("test", n)  # foreign data and a generator task's dataset: its test
    metrics = evaluate(model, x, y, batch_size, dev, autocast=_bf16(dev),
                       slices=source.slices("test", len(x)))
    if model.decimation is not None:
        extra["decimation"] = model.decimation.model_dump(mode="json")
        extra["kept_non_filler"] = kept_non_filler(model, x[:batch_size], spec, dev)
    if attention is not None:
        extra["attention"] = attention
    if decode:
        dec = evaluate(model, x, y, batch_size, dev, decode=True)
        extra["decode"] = {**dec, "acc_equal": dec["acc"] == metrics["acc"],
                           "exact_equal": dec["exact"] == metrics["exact"]}
    return {"run": str(run), "checkpoint": which, "task": spec.model_dump(mode="json"),
            "max_len": spec.max_len, "data_seed": data_seed, **metrics, **extra}


def set_decimation(model, decimate, cfg, data_seed: int, dev) -> dict:
    """Put DeciMamba settings `decimate` (a `DecimationConfig`, or "off") on a trained model;
    "auto" layers are chosen on 16 validation samples of the run's task."""
    if decimate == "off":  # a mamba+deci run evaluated without its decimation
        model.decimation = None
        return {"decimation": None}
    if cfg.model.arch not in ("mamba", "mamba2") or cfg.model.pattern is not None:
        raise RecallLabError(f"--decimate needs a plain mamba / mamba2 run, not {cfg.model.name}")
    model.decimation = decimate
    if decimate.layers == "auto":
        vx, _ = held_out(cfg.task, 16, data_seed, "valid")
        resolve_auto_layers(model, torch.from_numpy(_trim(vx, vx)[0]).to(dev))
    return {}


@torch.no_grad()
def kept_non_filler(model, inputs: np.ndarray, spec, device) -> float:
    """DeciMamba's lab metric: the share of non-filler context tokens (before the first SEP)
    that survive every decimating layer, on these inputs."""
    was_training = model.training
    model.eval()
    try:
        x = torch.from_numpy(np.ascontiguousarray(inputs)).to(device)
        kept = model(x).kept
    finally:
        model.train(was_training)
    if kept is None:
        return 1.0
    vocab = spec.vocab()
    ctx = np.arange(inputs.shape[1])[None, :] < sep_positions(inputs)[:, None]
    table = ctx & (inputs != vocab.PAD) & ~vocab.is_filler(inputs)
    return float(kept.cpu().numpy()[table].mean()) if table.any() else 1.0


def fit_vocab(spec, train_spec):
    """`spec` re-expressed in the training task's vocabulary (same id pools), so a model can be
    evaluated on other table sizes and lengths; an error when the tokens cannot be named."""
    if spec.vocab() == train_spec.vocab():
        return spec
    if not (isinstance(spec, TaskSpec) and isinstance(train_spec, TaskSpec)):
        raise RecallLabError(f"task {spec.describe()} has {spec.vocab().size} ids but the model "
                             f"was trained with {train_spec.vocab().size}")
    if spec.values != train_spec.values or spec.n_levels != train_spec.n_levels:
        raise RecallLabError(
            f"task has {spec.values} values and {spec.n_levels} levels but the model was trained "
            f"with {train_spec.values} values and {train_spec.n_levels} levels"
        )
    if spec.filler_ids > train_spec.filler_ids and train_spec.filler_ids == 0:
        raise RecallLabError(
            "this run's task has no filler tokens, so it cannot be lengthened with filler "
            "(--length-factor): train with filler ids (a [task] with filler_ids = 1, as the "
            "passkey preset), use zoology-mqar (it grows its noise), or evaluate other "
            "table sizes with --task"
        )
    if spec.filler_ids > train_spec.filler_ids:
        raise RecallLabError(
            f"task uses {spec.filler_ids} filler ids but the model was trained with "
            f"{train_spec.filler_ids}"
        )
    return TaskSpec.model_validate(
        {**spec.model_dump(), "pools": train_spec.pools, "filler_ids": train_spec.filler_ids}
    )


def _bf16(device: torch.device) -> bool:
    return device.type == "cuda" and torch.cuda.is_bf16_supported()


def length_tests(model: torch.nn.Module, cfg: RunConfig, batch_size: int, device: torch.device,
                 autocast: bool) -> tuple[dict, dict]:
    """`train.test_length_factors` (see `TrainConfig`): (valid, test) dicts keyed "x{f}" and
    "x{f}-full", each the held-out metrics of `model`'s current weights at that length."""
    t = cfg.train
    valid: dict = {}
    test: dict = {}
    if not t.test_length_factors:
        return valid, test
    models = {"": model}
    try:
        full_cfg = cfg.model_copy(update={"model": with_attention(cfg.model, "full")})
    except RecallLabError:  # no attention to swap (plain SSM, Samba, ...)
        full_cfg = None
    if full_cfg is not None and full_cfg.model != cfg.model:
        full = build_run_model(full_cfg, load_base=False).to(device)
        full.load_state_dict(model.state_dict())
        models["-full"] = full
    elif full_cfg is not None:  # already full attention: "-full" is the run's own
        models["-full"] = model
    base = base_task(cfg)
    for f in t.test_length_factors:
        spec = fit_vocab(base.at_length(f), cfg.task)
        sets = {"valid": held_out(spec, t.eval_samples, t.data_seed, "valid"),
                "test": held_out(spec, t.test_samples, t.data_seed, "test")}
        for suffix, m in models.items():
            for split, out in (("valid", valid), ("test", test)):
                out[f"x{f}{suffix}"] = evaluate(m, *sets[split], batch_size, device, autocast)
    return valid, test
