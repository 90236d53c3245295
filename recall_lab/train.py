"""The training loop: streamed batches, AdamW, warm-up schedule, held-out evaluation, best
checkpoint, resume, final test of the best weights.

Objective (HAX paper Eq. 18): cross-entropy on the value targets only (every other target is -100)
+ alpha * (KS ranking loss summed over layers). AdamW with linear warm-up then a constant learning
rate (the paper's setting) or cosine decay to `min_lr`; gradients clipped by global norm. bf16
autocast on CUDA devices that support it, fp32 on CPU; `train.precision = "float32"` keeps CUDA
in float32 with TF32 off. The summary records the device, its name and the precision.

Data: batches are streamed from the generator, or read from a dataset folder (`train.data`: its
train split in a fresh seeded order every epoch, its valid / test splits for evaluation).
Determinism and resume: batch number s is a pure function of (task or dataset, data_seed, s)
(`recall_lab.data.DataSource.batch`), the held-out sets are fixed, and a
checkpoint holds the model, the AdamW moments and the torch RNG state (hash planes and KS samples
are drawn from it). A checkpoint is written at every evaluation; a killed run restarted with
`resume=True` continues from the last one and, on CPU, ends with weights and metrics
bit-identical to an uninterrupted run (checked in tests/models/test_train_resume.py).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import torch

from recall_lab import checkpoint as ck
from recall_lab import native
from recall_lab.config import RunConfig
from recall_lab.data import DataSource
from recall_lab.device import resolve_device
from recall_lab.evaluate import batch_metrics, evaluate, length_tests
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import check_samples_fit
from recall_lab.generators.limits import available_bytes
from recall_lab.models.archs import ARCH_TABLE
from recall_lab.models.lm import forward_scored
from recall_lab.runs import (
    build_run_model,
    check_resume_matches,
    drop_stub,
    load_run_config,
    prepare_run_dir,
    recorded_data_hash,
    resolve_base_run,
    run_identity,
)
from recall_lab.tracking import Trackers
from recall_lab.version import __version__

Progress = Callable[[dict], None]


def objective(output, y: torch.Tensor, alpha: float):
    """One batch's training loss: the mean cross-entropy over the value targets plus alpha times
    the model's auxiliary loss (the KS ranking loss, HAX paper Eq. 18). Returns (loss, ce, aux,
    the batch metrics); the training loop, `bench train` and the GPU parity test share it."""
    m = batch_metrics(output.logits, y)
    ce = m["ce_sum"] / m["n_targets"].clamp(min=1)
    aux = output.aux_loss if output.aux_loss is not None else torch.zeros((), device=y.device)
    return ce + alpha * aux, ce, aux, m


def make_optimizer(model: torch.nn.Module, weight_decay: float, lr: float,
                   betas: tuple[float, float] = (0.9, 0.999),
                   decay: str | None = None) -> torch.optim.AdamW:
    """AdamW over the model's decay / no-decay groups (`decay="all"`: every parameter decayed,
    `train.decay`), fused (one kernel over every parameter)
    where torch has one for their device and dtype. On the capacity config's step (60k
    parameters in 23 tensors) the per-tensor loop took ~4 of ~28 ms on the CPU; the fused
    update computes the same formula with other float rounding (docs/performance.md)."""
    groups = (model.param_groups(weight_decay) if decay is None
              else model.param_groups(weight_decay, decay_all=True))
    params = [p for g in groups for p in g["params"]]
    fused = bool(params) and all(
        p.device.type in ("cpu", "cuda") and p.dtype in (torch.float32, torch.float64)
        for p in params)
    return torch.optim.AdamW(groups, lr=lr, betas=betas, fused=fused)


def optimizer_step(model: torch.nn.Module, opt: torch.optim.Optimizer, grad_clip: float) -> None:
    """Clip the gradients by global norm (one foreach norm over all of them; `grad_clip` 0: no
    clipping) and step: the end of every training step (the loop, `bench train`,
    `bench/steps.py`, the GPU parity test)."""
    if grad_clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip, foreach=True)
    opt.step()


def lr_at(step: int, cfg) -> float:
    """Learning rate of optimizer step `step` (0-based): linear warm-up, then constant/cosine."""
    if cfg.warmup and step < cfg.warmup:
        return cfg.lr * (step + 1) / cfg.warmup
    if cfg.schedule == "constant":
        return cfg.lr
    span = max(cfg.steps - cfg.warmup, 1)
    t = min((step - cfg.warmup) / span, 1.0)
    return cfg.min_lr + 0.5 * (cfg.lr - cfg.min_lr) * (1 + math.cos(math.pi * t))


def stop_reason(t, best: dict, done: int) -> str | None:
    """Why training stops after step `done` (an evaluation step), or None to go on: "stop_at"
    when the best held-out accuracy reached `t.stop_at`, "patience" when the last `t.patience`
    evaluations brought no better checkpoint. Depends only on the checkpointed state, so a
    resumed run stops where the uninterrupted one did."""
    if t.stop_at is not None and best["acc"] >= t.stop_at:
        return "stop_at"
    if t.patience is not None and best["step"] is not None:
        if (done - best["step"]) // t.eval_every >= t.patience:
            return "patience"
    return None


# ---- checks before anything is written ----------------------------------------------------------

def _available_bytes(device: torch.device) -> int | None:
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return available_bytes()


def estimate_train_bytes(cfg: RunConfig) -> int:
    """A rough estimate of training activation memory (fp32, forward + backward).

    Measured on CPU at the paper's length (batch 8 x 1058, one training step, peak RSS growth):
    mamba+hax 0.25-0.29 GiB, mamba2+hax 0.38-0.40 GiB, transformer 0.19 GiB (two runs); this
    estimate gives 0.40, 0.80 and 0.20 GiB: on the high side, by up to ~2x.

    Per token and layer it counts the mixer's activations (~32 * d_inner), one scan state
    (d_inner * d_state) and the sparse branch's index list and q/k (k + 4 * d_state) (each
    architecture's rule: `models/archs.ARCH_TABLE`); plus logits.
    The torch scan and sparse-attention backends work chunk by chunk, so this is an order of
    magnitude, not a measurement; it only turns hopeless batch sizes into a clear message instead
    of the OOM killer.
    """
    m, task = cfg.model, cfg.task
    per_token = ARCH_TABLE[m.arch].activations(m, task.max_len) + 3 * m.vocab_size  # + logits
    return int(per_token * 4 * cfg.train.batch_size * task.max_len)


def check_run(cfg: RunConfig, device: torch.device) -> None:
    """Reject a configuration that cannot train: one clear line each."""
    task, m, t = cfg.task, cfg.model, cfg.train
    if m.uses_k and m.k > task.max_len:
        raise RecallLabError(
            f"k={m.k} is larger than the sequence (longest sample {task.max_len} tokens)"
        )
    if m.vocab_size != task.vocab().size:
        raise RecallLabError(
            f"model vocabulary ({m.vocab_size}) differs from the task's ({task.vocab().size})"
        )
    if t.data is None:  # streamed held-out sets are generated whole (a dataset's are its own)
        check_samples_fit(task, t.eval_samples, "eval_samples (--eval-samples)")
        check_samples_fit(task, t.test_samples, "test_samples")
    need, have = estimate_train_bytes(cfg), _available_bytes(device)
    if have is not None and need > have:
        raise RecallLabError(
            f"batch of {t.batch_size} x {task.max_len} tokens does not fit: needs about "
            f"{need / 2**30:.1f} GiB, {have / 2**30:.1f} GiB available on {device}; "
            "lower --batch-size"
        )


def versions() -> dict:
    """Software that decides a run's numbers, written into its config.json. Runs with and without
    the native CPU kernels differ by float rounding (recall_lab/native), and so do runs on two
    versions of them: `native_sources` hashes the kernels' sources (no config field: no run's
    hash moves)."""
    loaded, why = native.load()
    out = {"recall_lab": __version__, "torch": torch.__version__,
           "numpy": np.__version__,
           "native_kernels": "on" if loaded is not None else f"off: {why}"}
    if loaded is not None:
        out["native_sources"] = native.sources_sha256()
    return out


# ---- time over segments -------------------------------------------------------------------------

def _utc() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def segment(start: str, from_step: int, to_step: int, loop_s: float, wall_s: float) -> dict:
    """One segment of a run (one `train_run` call, as of now): when it started and ends, the
    steps it trained, its training loop's seconds and its wall seconds (building, evaluation)."""
    return {"start": start, "end": _utc(), "from_step": from_step, "to_step": to_step,
            "loop_s": loop_s, "wall_s": wall_s}


def prior_segments(info: dict) -> list[dict]:
    """The segments a resume checkpoint records; one untimed segment (0 to its step) for a
    checkpoint written before segments were recorded."""
    segs = info.get("segments")
    if isinstance(segs, list) and all(isinstance(x, dict) for x in segs):
        return list(segs)
    step = int(info.get("step") or 0)
    return [{"start": None, "end": None, "from_step": 0, "to_step": step, "loop_s": None,
             "wall_s": None}] if step else []


def segment_totals(segments: list[dict]) -> dict:
    """The summary's time over segments: the list, and the sums of the timed ones."""
    timed = [x for x in segments if x.get("loop_s") is not None]
    return {"segments": segments, "loop_s_total": sum(float(x["loop_s"]) for x in timed),
            "wall_s_total": sum(float(x.get("wall_s") or 0.0) for x in timed),
            "segments_untimed": len(segments) - len(timed)}


# ---- the loop -----------------------------------------------------------------------------------

def train_run(
    cfg: RunConfig,
    out: Path,
    *,
    force: bool = False,
    resume: bool = False,
    progress: Progress | None = None,
    on_step: Callable[[int], None] | None = None,
    log: tuple[str, ...] = (),
    record: dict | None = None,
) -> dict:
    """Train `cfg` into run directory `out`; returns the summary (also written to summary.json).

    resume=True continues the run in `out` from its last checkpoint (its config.json wins over
    `cfg`, except `train.steps`, which may be raised). `log` names optional trackers
    (`recall_lab.tracking`: "tensorboard", "wandb"). `on_step(step)` is called after every
    optimizer step (tests use it to simulate a kill). `record`: keys a new run's config.json
    keeps beside its config (the sweep's claims binding, `"registration"`); they are no config
    field, so no config hash moves.

    Time over segments: each call is a segment (its start and end, UTC; the steps it trained;
    its training-loop and wall seconds). The resume checkpoint carries the segments before it
    (an interrupted segment as of its last checkpoint: the work after it is redone, not
    counted), and the summary lists them all with `loop_s_total` and `wall_s_total`, their sums
    (`segments_untimed`: segments of a checkpoint written before segments were recorded).

    The run folder is locked while training (`checkpoint.RunLock`): a second process on it is
    refused. Every input (config, dataset shards' sha256) is checked before the folder is created
    or, with `force`, cleared; a new run that fails with bad input or an I/O error before its first
    checkpoint leaves no folder behind.
    """
    out = Path(out)
    lock = ck.RunLock(out)
    tf32 = _tf32_flags()  # put back after the run: `precision = "float32"` turns TF32 off
    try:
        return _train_locked(cfg, out, lock, force, resume, progress, on_step, log, record)
    except (RecallLabError, OSError):
        if lock.new_run and not (out / ck.RESUME).is_file():
            try:
                drop_stub(out)
            except (RecallLabError, OSError):
                pass  # the original error is the one to report
        raise
    finally:
        _set_tf32(*tf32)
        lock.release()


def _tf32_flags() -> tuple[bool, bool]:
    return torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32


def _set_tf32(matmul: bool, cudnn: bool) -> None:
    torch.backends.cuda.matmul.allow_tf32 = matmul
    torch.backends.cudnn.allow_tf32 = cudnn


def arithmetic(precision: str | None, device: torch.device) -> tuple[bool, str]:
    """(bf16 autocast on?, what the summary records) for `train.precision` on `device`; with
    "float32" on CUDA the caller turns TF32 off."""
    if device.type != "cuda":
        return False, "float32"
    if precision == "float32":
        return False, "float32 (TF32 off)"
    if torch.cuda.is_bf16_supported():
        return True, "bf16 autocast"
    tf32 = torch.backends.cuda.matmul.allow_tf32 or torch.backends.cudnn.allow_tf32
    return False, "float32" + (" (TF32 on)" if tf32 else "")


def _train_locked(cfg: RunConfig, out: Path, lock: ck.RunLock, force: bool, resume: bool,
                  progress: Progress | None, on_step: Callable[[int], None] | None,
                  log: tuple[str, ...] = (), record: dict | None = None) -> dict:
    seg_start, seg_t0 = _utc(), time.perf_counter()  # this segment's wall clock
    if resume:
        saved = load_run_config(out)
        lock.acquire()
        ck.remove_temporaries(out)  # half-written files of the killed process
        if not (out / ck.RESUME).is_file():
            raise RecallLabError(f"nothing to resume: {out / ck.RESUME} is missing")
        train_cfg = saved.train.model_copy(update={"steps": max(cfg.train.steps,
                                                                 saved.train.steps)})
        cfg = saved.model_copy(update={"train": train_cfg})
    t = cfg.train
    device = resolve_device(t.device)
    check_run(cfg, device)

    torch.manual_seed(t.seed)
    # A fine-tune run starts from its base run's weights with only the adapter's set trainable.
    model = build_run_model(cfg).to(device)
    opt = make_optimizer(model, t.weight_decay, t.lr, t.betas, t.decay)
    autocast, precision = arithmetic(t.precision, device)
    if t.precision == "float32" and device.type == "cuda":
        _set_tf32(False, False)  # train_run puts the flags back
    eval_bs = t.eval_batch_size or max(t.batch_size, 64)  # no grads: larger batches fit
    # the stream or the dataset: batches, held-out sets (a resume names the data it recorded)
    data = DataSource.for_run(cfg, recorded_data_hash(out) if resume else None)
    data.verify()  # a dataset's shards against their sha256, before the run folder is touched
    valid = data.held_out("valid", t.eval_samples)

    start, best = 0, {"acc": -1.0, "loss": math.inf, "step": None}
    before: list[dict] = []  # the segments before this one
    if resume:
        info = ck.load_resume(out / ck.RESUME, model, opt)
        check_resume_matches(out, cfg, info, data.fingerprint)
        start, best = info["step"], info["best"]
        before = prior_segments(info)
        rows = [r for r in ck.read_metrics(out / ck.METRICS) if r["step"] <= start]
        ck.write_lines(out / ck.METRICS, rows)
    else:
        prepare_run_dir(out, force, lock)
        lock.new_run = True  # from here on, a failure before the first checkpoint leaves no stub
        ck.write_json(out / ck.CONFIG, {**cfg.to_json(), "versions": versions(),
                                        "n_params": model.n_params(), **(record or {})})
        (out / ck.METRICS).touch()

    identity, data_sha256 = run_identity(cfg), data.fingerprint  # what a resume must match
    trackers = Trackers(log, out, cfg.to_json())  # optional TensorBoard / offline W&B
    model.train()
    acc_sum = {"loss": 0.0, "ce": 0.0, "aux": 0.0, "acc": 0.0, "n": 0}
    tokens, t0 = 0, time.perf_counter()
    stopped = stop_reason(t, best, start) if start else None  # a resumed run that had stopped
    done = start
    for step in range(start, t.steps if stopped is None else start):
        lr = lr_at(step, t)
        for g in opt.param_groups:
            g["lr"] = lr
        x, y = data.batch(step, t.batch_size, device)
        try:
            with torch.autocast("cuda", dtype=torch.bfloat16, enabled=autocast):
                # large vocabularies: logits only where targets are scored (`forward_scored`)
                output, y_scored = forward_scored(model, x, y)
            loss, ce, aux, m = objective(output, y_scored, t.alpha)
            opt.zero_grad(set_to_none=True)
            loss.backward()
        except torch.OutOfMemoryError:
            raise RecallLabError(
                f"batch of {t.batch_size} x {x.shape[1]} tokens does not fit in {device} memory; "
                "lower --batch-size"
            ) from None
        optimizer_step(model, opt, t.grad_clip)
        tokens += x.numel()

        acc = float(m["acc_sum"]) / max(float(m["n_samples"]), 1.0)
        for k, v in (("loss", loss), ("ce", ce), ("aux", aux)):
            acc_sum[k] += float(v.detach())
        for k, v in (("acc", acc),):
            acc_sum[k] += v
        acc_sum["n"] += 1
        done = step + 1
        if on_step is not None:
            on_step(done)
        event = {"step": done, "steps": t.steps, "loss": float(loss.detach()), "acc": acc,
                 "tokens_per_s": tokens / max(time.perf_counter() - t0, 1e-9)}

        if done % t.eval_every == 0 or done == t.steps:
            n = acc_sum["n"]
            train_row = {"step": done, "split": "train", "lr": lr,
                         **{k: acc_sum[k] / n for k in ("loss", "ce", "aux", "acc")}}
            v = evaluate(model, *valid, eval_bs, device, autocast)
            valid_row = {"step": done, "split": "valid", **v}
            ck.append_line(out / ck.METRICS, train_row)
            ck.append_line(out / ck.METRICS, valid_row)
            trackers.log(train_row)
            trackers.log(valid_row)
            if v["acc"] > best["acc"] or (v["acc"] == best["acc"] and v["loss"] < best["loss"]):
                best = {"acc": v["acc"], "loss": v["loss"], "step": done}
                ck.save_weights(out / ck.BEST, model)
            ck.save_weights(out / ck.MODEL, model)
            # resume.safetensors last: it is the commit point of this checkpoint
            ck.save_resume(out / ck.RESUME, model, opt, {
                "step": done, "best": best, "config": identity, "data_sha256": data_sha256,
                "segments": before + [segment(seg_start, start, done, time.perf_counter() - t0,
                                              time.perf_counter() - seg_t0)]})
            acc_sum = {"loss": 0.0, "ce": 0.0, "aux": 0.0, "acc": 0.0, "n": 0}
            event["valid"] = v
            stopped = stop_reason(t, best, done)
        if progress is not None:
            progress(event)
        if stopped is not None:
            break

    wall = time.perf_counter() - t0
    ck.load_weights(out / ck.BEST, model)
    test_set = data.held_out("test", t.test_samples)
    test = evaluate(model, *test_set, eval_bs, device, autocast,
                    slices=data.slices("test", len(test_set[0])))  # per slice, where given
    valid_x, test_x = length_tests(model, cfg, eval_bs, device, autocast)
    overlap = data.overlap(t.batch_size, t.steps, {"valid": valid[0], "test": test_set[0]})
    segments = before + [segment(seg_start, start, done, wall, time.perf_counter() - seg_t0)]
    summary = {
        "model": cfg.model.name, "task": cfg.task_name or cfg.task.describe(),
        "n_params": model.n_params(),
        "n_trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
        "steps": t.steps, "best_step": best["step"],
        # why training ended: "stop_at" / "patience" before the last step, else "steps"
        "stopped": stopped if stopped is not None and done < t.steps else "steps",
        "stopped_at": done,
        "valid": {"acc": best["acc"], "loss": best["loss"], **valid_x},
        "test": {**test, **test_x},
        "device": str(device), "precision": precision,
        "device_name": (torch.cuda.get_device_name(device) if device.type == "cuda"
                        else "cpu"),
        "wall_s_this_session": wall,
        "tokens_per_s_this_session": tokens / max(wall, 1e-9), "resumed_from": start or None,
        **segment_totals(segments),
        # streamed runs and other tools' data: the fraction of held-out rows also trained on
        "held_out_in_training": overlap,
    }
    if t.finetune is not None:  # the folder a glob such as runs/seattn-pretrain/s0-* resolved to
        summary["base_run"] = str(resolve_base_run(t.finetune.base_run))
    ck.write_json(out / ck.SUMMARY, summary)
    trackers.close(summary)
    return summary
