"""The lab's generic checks, one implementation for `recall-lab check`, the project's own tests
and a user's tests: strict causality, padding and length, finite outputs with a gradient for
every parameter, determinism, decode = parallel forward, and the learning gate.

A check takes a *subject*: a factory of the module under test, called after `torch.manual_seed`
so that two calls build the same weights. Two kinds:

- a mixer (`MixerSubject`): a contract mixer alone, ``(B, L, D) -> (B, L, D)`` on random
  normal inputs (recall_lab/mixers/contract.py);
- a model (`ModelSubject`): a `RecallLM` (or any module ``ids -> LMOutput``), on random token
  ids; the lab's built-in models are checked this way.

Each `check_*` returns a `Check` row: its name, whether it passed (None: not applicable, or a
measurement), the measured value and what it means. Values are compared in float64 where the
subject runs in it, else in float32 within a tolerance stated in the row: an FFT convolution
moves by rounding, a leak by far more.

    from recall_lab.testing import MixerSubject, check_causal
    row = check_causal(MixerSubject(lambda: MyMixer(d_model=16)))
    assert row.passed, row.value
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from recall_lab.config import RunConfig, TrainConfig
from recall_lab.generators import TaskSpec
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.contract import (
    build_mixer,
    has_step,
    mixer_label,
    one_line,
)
from recall_lab.mixers.registry import resolve_mixer
from recall_lab.mixers.state import cache_growth, cache_parts, declared_growth, declared_state
from recall_lab.models.decode import decode
from recall_lab.models.registry import build_model, is_builtin_model, mixer_models, model_config
from recall_lab.models.state import state_count
from recall_lab.train import train_run

# Relative tolerances (times 1 + the largest output) of a comparison that must be exact up to
# rounding: float64 where the subject runs in it, float32 otherwise.
TOL = {torch.float64: 1e-9, torch.float32: 1e-4}
# The learning gate: 2 layers of hidden 32 on 2-4 key-value pairs (8 values, 8 keys, at most 18
# tokens), batch 32, lr 3e-3, warm-up 100. Measured on this task (tests/models/test_learning.py):
# `mamba` reached valid accuracy 0.90 at step 400 and 0.97 at 600, `transformer` 1.00 at 300; so
# the gate is 0.9 within 600 steps, mamba's.
GATE_TASK = TaskSpec(levels=((2, 4),), values=8)
GATE_STEPS, GATE_THRESHOLD = 600, 0.9


@dataclass
class Check:
    """One row of a check: `passed` True / False, or None for a measurement or a check that does
    not apply; `value` the measured figure; `detail` what it means."""

    name: str
    passed: bool | None
    value: str
    detail: str = ""
    correctness: bool = True  # a failing correctness row fails `recall-lab check`

    def to_json(self) -> dict:
        return asdict(self)


def fails(row: Check, require_learning: bool = False) -> bool:
    """Whether a row fails the check (exit 1): a failed correctness row, or the learning gate
    when it is required. Every other row that did not pass is a finding: reported, not failed."""
    return row.passed is False and (row.correctness
                                    or (require_learning and row.name == "learning gate"))


def result_word(row: Check, require_learning: bool = False) -> str:
    """A row's result as the tables print it: "FAIL" only for a row that fails the command."""
    if row.passed is None:
        return "-"
    if row.passed:
        return "pass"
    return "FAIL" if fails(row, require_learning) else "finding"


class UserCodeError(Exception):
    """An exception raised inside the code under test, with the call and input that raised it:
    the row it happens in fails with both (`guarded`), and no other row is affected."""

    def __init__(self, where: str, exc: BaseException) -> None:
        super().__init__(f"{one_line(exc)} (in {where})")
        self.where, self.exc = where, exc


def _shape(x: Tensor) -> str:
    return f"a {tuple(x.shape)} input"


# ---- subjects -----------------------------------------------------------------------------------

@dataclass
class MixerSubject:
    """A contract mixer alone. `factory()` builds it (weights from torch's seed)."""

    factory: Callable[[], nn.Module]
    d_model: int = 16
    kind: str = "mixer"
    # None: float64 where the mixer runs in it; float32 for a mixer that casts to float32
    # inside (zoology's H3 runs its SSM kernel in complex64), whose rounding a float64
    # tolerance would take for a leak (`recall-lab check --dtype float32`)
    dtype: torch.dtype | None = None

    def inputs(self, b: int, length: int, g: torch.Generator, dtype: torch.dtype) -> Tensor:
        return torch.randn(b, length, self.d_model, generator=g, dtype=torch.float64).to(dtype)

    def pad(self, b: int, n: int, dtype: torch.dtype) -> Tensor:
        return torch.zeros(b, n, self.d_model, dtype=dtype)

    def run(self, module: nn.Module, x: Tensor, seed: int) -> Tensor:
        torch.manual_seed(seed)
        try:
            y = module(x)
        except Exception as exc:
            raise UserCodeError(f"forward on {_shape(x)}", exc) from exc
        if not isinstance(y, Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise UserCodeError(f"forward on {_shape(x)}", TypeError(
                f"returned {got}; the contract maps (B, L, D) to (B, L, D)"))
        return y

    def decode(self, module: nn.Module, x: Tensor) -> Tensor | None:
        if not has_step(module):
            return None
        where = f"allocate_cache({x.shape[0]}, {x.shape[1]})"
        try:
            cache = module.allocate_cache(x.shape[0], x.shape[1])
            out = []
            for t in range(x.shape[1]):
                where = f"step at position {t} of {_shape(x)}"
                y = module.step(x[:, t], cache)
                if isinstance(y, tuple):
                    y, cache = y
                out.append(y)
            return torch.stack(out, 1)
        except Exception as exc:
            raise UserCodeError(where, exc) from exc


@dataclass
class ModelSubject:
    """A language model over token ids (`RecallLM`): logits are compared; token ids are drawn
    from 3..vocab-1 (0 = PAD, the padding of a batch)."""

    factory: Callable[[], nn.Module]
    vocab: int = 23
    kind: str = "model"

    def inputs(self, b: int, length: int, g: torch.Generator, dtype: torch.dtype) -> Tensor:
        return torch.randint(3, self.vocab, (b, length), generator=g)

    def pad(self, b: int, n: int, dtype: torch.dtype) -> Tensor:
        return torch.zeros(b, n, dtype=torch.int64)

    def run(self, module: nn.Module, x: Tensor, seed: int) -> Tensor:
        torch.manual_seed(seed)  # the same hash planes / KS samples for every call
        try:
            return module(x).logits
        except Exception as exc:
            raise UserCodeError(f"forward on {_shape(x)}", exc) from exc

    def decode(self, module: nn.Module, x: Tensor) -> Tensor | None:
        return decode(module, x)


Subject = MixerSubject | ModelSubject


def build(subject: Subject, dtype: torch.dtype | None = None, seed: int = 0
          ) -> tuple[nn.Module, torch.dtype]:
    """The subject's module in eval mode, in float64 when it runs there (`dtype` None and the
    subject names none), else in float32; returns the dtype used."""
    dtype = dtype if dtype is not None else getattr(subject, "dtype", None)
    torch.manual_seed(seed)
    module = subject.factory()
    if dtype is not None:
        return module.to(dtype).eval(), dtype
    try:
        m64 = module.double().eval()
        g = torch.Generator().manual_seed(0)
        with torch.no_grad():
            subject.run(m64, subject.inputs(1, 5, g, torch.float64), 0)
        return m64, torch.float64
    except Exception:  # a kernel without a float64 path: compare in float32 within TOL
        torch.manual_seed(seed)
        return subject.factory().float().eval(), torch.float32


def _tol(dtype: torch.dtype, ref: Tensor) -> float:
    return TOL[dtype] * (1 + ref.abs().max().item())


# ---- correctness --------------------------------------------------------------------------------

def future_leak(subject: Subject, module: nn.Module, dtype: torch.dtype, length: int, t: int,
                seed: int, b: int = 2) -> float:
    """Largest change of the outputs at positions <= t when every input after t changes."""
    g = torch.Generator().manual_seed(seed)
    x = subject.inputs(b, length, g, dtype)
    other = x.clone()
    other[:, t + 1:] = subject.inputs(b, length - t - 1, g, dtype)
    with torch.no_grad():
        a, c = subject.run(module, x, seed), subject.run(module, other, seed)
    return (a[:, : t + 1] - c[:, : t + 1]).abs().max().item()


def length_leak(subject: Subject, module: nn.Module, dtype: torch.dtype, length: int, t: int,
                pad: int, seed: int) -> float:
    """Largest change of the outputs at positions <= t when the sequence is cut after t, padded
    on the right (zeros / PAD), or sits beside a longer row in its batch."""
    g = torch.Generator().manual_seed(seed)
    x = subject.inputs(2, length, g, dtype)
    with torch.no_grad():
        full = subject.run(module, x, seed)
        cut = subject.run(module, x[:, : t + 1], seed)
        padded = subject.run(module, torch.cat([x, subject.pad(2, pad, dtype)], 1), seed)
        mate = torch.cat([torch.cat([x[:1], subject.pad(1, pad, dtype)], 1),
                          subject.inputs(1, length + pad, g, dtype)])
        mixed = subject.run(module, mate, seed)
    return max((full[:, : t + 1] - cut).abs().max().item(),
               (full - padded[:, :length]).abs().max().item(),
               (full[:1] - mixed[:1, :length]).abs().max().item())


def _scale(subject: Subject, module: nn.Module, dtype: torch.dtype, length: int) -> Tensor:
    with torch.no_grad():
        return subject.run(module, subject.inputs(2, length, torch.Generator().manual_seed(0),
                                                  dtype), 0)


def check_causal(subject: Subject, lengths: tuple[int, ...] = (9, 24, 40), examples: int = 25
                 ) -> Check:
    """No output at position i changes when any input after i changes: fixed cut points at
    several lengths, then Hypothesis-drawn (length, cut, seed), derandomized."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st

    module, dtype = build(subject)
    tol = _tol(dtype, _scale(subject, module, dtype, max(lengths)))
    worst = {"leak": 0.0, "where": ""}

    def probe(length: int, t: int, seed: int) -> None:
        leak = future_leak(subject, module, dtype, length, t, seed)
        if leak > worst["leak"]:
            worst.update(leak=leak, where=f"L={length}, t={t}, seed={seed}")

    for length in lengths:
        for t in (0, length // 3, length - 2):
            probe(length, t, t)

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(length=st.sampled_from(lengths), frac=st.floats(0, 1), seed=st.integers(0, 2**16))
    def drawn(length: int, frac: float, seed: int) -> None:
        probe(length, min(int(frac * (length - 1)), length - 2), seed)

    drawn()
    ok = worst["leak"] <= tol
    return Check("causality", ok, f"max change {worst['leak']:.2e} (tolerance {tol:.1e}, "
                 f"{_dtype(dtype)})", "" if ok else f"outputs moved with future inputs at "
                 f"{worst['where']}")


def check_padding(subject: Subject, length: int = 30, pads: tuple[int, ...] = (1, 17, 45)
                  ) -> Check:
    """Cutting the sequence, right-padding it, or batching it beside a longer row changes no
    earlier output."""
    module, dtype = build(subject)
    tol = _tol(dtype, _scale(subject, module, dtype, length))
    leak = max(length_leak(subject, module, dtype, length, t, pad, seed=t)
               for t, pad in zip((0, length // 2, length - 2), pads, strict=True))
    ok = leak <= tol
    return Check("padding and length", ok, f"max change {leak:.2e} (tolerance {tol:.1e}, "
                 f"{_dtype(dtype)})", "" if ok else "outputs depend on the batch's padded length")


def check_finite_gradients(subject: Subject, length: int = 24) -> Check:
    """Finite outputs in training mode (float32), and a finite gradient reaching every
    parameter from a loss over all outputs (parameters whose gradient is exactly zero here are
    named in the detail)."""
    torch.manual_seed(0)
    module = subject.factory().float().train()
    x = subject.inputs(2, length, torch.Generator().manual_seed(1), torch.float32)
    torch.manual_seed(0)
    out = module(x)
    y = out.logits if hasattr(out, "logits") else out
    if not torch.isfinite(y).all():
        return Check("finite outputs and gradients", False, "outputs not finite",
                     "NaN or inf in the forward")
    loss = y.float().pow(2).mean()
    if getattr(out, "aux_loss", None) is not None:
        loss = loss + out.aux_loss
    loss.backward()
    params = [(n, p) for n, p in module.named_parameters() if p.requires_grad]
    missing = [n for n, p in params if p.grad is None]
    bad = [n for n, p in params if p.grad is not None and not torch.isfinite(p.grad).all()]
    # a zero gradient is reported, not failed: a bias under a shift-invariant loss (a pairwise
    # ranking loss) gets exactly zero while still being in the graph
    zero = [n for n, p in params if p.grad is not None and not p.grad.abs().sum() > 0]
    ok = not missing and not bad
    detail = ("no gradient: " + ", ".join(missing[:4]) if missing
              else "non-finite gradient: " + ", ".join(bad[:4]) if bad
              else "zero gradient here: " + ", ".join(zero[:4]) if zero else "")
    return Check("finite outputs and gradients", ok,
                 f"{len(params) - len(missing) - len(bad)}/{len(params)} parameters", detail)


def check_deterministic(subject: Subject, length: int = 24) -> Check:
    """The same seed builds the same weights and gives the same outputs, bit for bit."""
    outs = []
    for _ in range(2):
        module, dtype = build(subject, torch.float32)
        x = subject.inputs(2, length, torch.Generator().manual_seed(2), dtype)
        with torch.no_grad():
            outs.append(subject.run(module, x, 0))
    ok = torch.equal(outs[0], outs[1])
    return Check("same seed, same output", ok, "bit-identical" if ok else
                 f"max difference {(outs[0] - outs[1]).abs().max().item():.2e}")


def check_decode(subject: Subject, length: int = 30) -> Check:
    """Token-by-token decoding (`allocate_cache` + `step`) equals the parallel forward."""
    module, dtype = build(subject)
    x = subject.inputs(2, length, torch.Generator().manual_seed(3), dtype)
    with torch.no_grad():
        par = subject.run(module, x, 0)
        stepped = subject.decode(module, x)
    if stepped is None:
        return Check("decode = parallel", None, "no step", "the lab decodes it by recomputing the "
                     "prefix (exact by construction; decode memory grows as L)")
    gap = (stepped - par).abs().max().item()
    tol = _tol(dtype, par)
    ok = gap <= tol
    return Check("decode = parallel", ok, f"max difference {gap:.2e} (tolerance {tol:.1e}, "
                 f"{_dtype(dtype)})", "" if ok else "step disagrees with forward")


def check_forward(subject: Subject, length: int = 5) -> Check:
    """One forward on a small input: a finite output of the input's shape."""
    module, dtype = build(subject, torch.float32)
    x = subject.inputs(2, length, torch.Generator().manual_seed(0), dtype)
    with torch.no_grad():
        y = subject.run(module, x, 0)
    ok = bool(torch.isfinite(y).all())
    return Check("forward", ok, f"{tuple(y.shape)} from {tuple(x.shape)}",
                 "" if ok else "NaN or inf in the output of a normal input")


def guarded(name: str, fn: Callable[[], Check], correctness: bool = True) -> Check:
    """The row `fn` makes; an exception from the code under test fails that row alone, with its
    type, message and the call and input that raised it (never a traceback)."""
    try:
        return fn()
    except UserCodeError as exc:
        return Check(name, False, f"raised {one_line(exc.exc)}", f"in {exc.where}",
                     correctness)
    except RecallLabError as exc:  # the lab's own one-line verdict on the user's code
        return Check(name, False, str(exc), "", correctness)
    except Exception as exc:  # raised outside a call we wrap (a constructor, the harness's
        # own use of its output): still this row's failure
        return Check(name, False, f"raised {one_line(exc)}", "", correctness)


def correctness(subject: Subject) -> list[Check]:
    """Every correctness row for one subject, each failing alone (`guarded`)."""
    rows = (("forward", check_forward), ("causality", check_causal),
            ("padding and length", check_padding),
            ("finite outputs and gradients", check_finite_gradients),
            ("same seed, same output", check_deterministic), ("decode = parallel", check_decode))
    return [guarded(name, lambda f=f: f(subject)) for name, f in rows]


def _count(n: int) -> str:
    return f"{n:,}"


def measured_state(subject: MixerSubject, module: nn.Module, length: int) -> dict | None:
    """A mixer's decode cache for one sequence of `length` after one step, split by the state
    convention (`cache_parts`: "recurrent" and "conv"); None for a mixer without `step`."""
    if not has_step(module):
        return None
    x = subject.inputs(1, 1, torch.Generator().manual_seed(0), torch.float32)
    try:
        cache = module.allocate_cache(1, length)
        y = module.step(x[:, 0], cache)
        cache = y[1] if isinstance(y, tuple) else cache
    except Exception as exc:
        raise UserCodeError(f"allocate_cache(1, {length}) and one step", exc) from exc
    return cache_parts(cache)


def _cache_growth(module: nn.Module) -> str | None:
    try:
        return cache_growth(module)
    except Exception:  # noqa: BLE001  a user's cache at another length: the row stays as measured
        return None


def check_state(subject: Subject, length: int = 128, strict: bool = False) -> Check:
    """The state under the lab's convention (recall_lab/mixers/state.py), per sequence at
    length `length`: measured from the decode cache after one step where there is one (the
    recurrent part and the convolution caches apart), and a mixer's own
    `state_size(sequence_length=)` beside it. A declared count that differs from the measured
    recurrent part is a finding (`strict`: a failure); a declared count that changes with the
    length is "grows with L"; neither a cache nor a declaration: "unknown"."""
    torch.manual_seed(0)
    module = subject.factory().float().eval()
    if isinstance(subject, ModelSubject):
        count = state_count(module, length)
        conv = "" if count.conv is None else f"; conv caches {_count(count.conv.numbers)}"
        return Check("state", None, count.text() + conv, f"per sequence at L={length}, "
                     f"{count.source}", correctness=False)
    declared = declared_state(module, length)
    parts = measured_state(subject, module, length)
    if parts is not None:
        rec, conv = parts["recurrent"], parts["conv"]
        measured = (f"measured {_count(rec.numbers)} ({rec.nbytes:,} B) + conv caches "
                    f"{_count(conv.numbers)}")
        if declared is None:
            return Check("state", None, measured, f"per sequence at L={length}; no state_size",
                         correctness=False)
        grows = "; grows as log L" if _cache_growth(module) == "log L" else ""
        if declared == rec.numbers:
            return Check("state", True, f"declared {_count(declared)} = {measured}",
                         f"per sequence at L={length}{grows}", correctness=False)
        ratio = declared / rec.numbers if rec.numbers else float("inf")
        # passed False either way: the command reads it "finding" unless `strict` counts it
        return Check("state", False,
                     f"declared {_count(declared)} != {measured}",
                     f"FINDING: state_size is {ratio:.2f}x the recurrent state the step cache "
                     f"carries (at L={length}){'' if strict else '; --strict-state fails it'}",
                     correctness=strict)
    if declared is None:
        return Check("state", None, "unknown", "no state_size and no step", correctness=False)
    growth = declared_growth(module, length)
    if growth == "log L":
        return Check("state", None, f"grows as log L: declared {_count(declared)} at "
                     f"L={length}", f"state_size(sequence_length=) grows by a constant per "
                     f"doubling (probed at {length}, {4 * length}, {16 * length})",
                     correctness=False)
    if growth == "L":
        return Check("state", None, f"grows with L: declared {_count(declared)} at L={length}",
                     f"state_size(sequence_length=) changes with the length (probed at {length}, "
                     f"{4 * length}, {16 * length})", correctness=False)
    return Check("state", None, f"declared {_count(declared)}", f"per sequence at L={length} "
                 "(no step: not measured)", correctness=False)


# ---- measurements -------------------------------------------------------------------------------

def learning_gate(model: dict[str, Any], out: Path, steps: int = GATE_STEPS,
                  threshold: float = GATE_THRESHOLD) -> Check:
    """Inside a 2-layer model of hidden 32 (`model`: a model name and `model_config` fields),
    does it solve small MQAR (`GATE_TASK`) within `steps` through the real training loop?"""
    fields = {"d_model": 32, **model}
    name = fields.pop("name")
    cfg = model_config(name, GATE_TASK.vocab().size, **fields)
    if cfg.uses_k:
        cfg = cfg.model_copy(update={"k": min(cfg.k, 8)})
    train = TrainConfig(steps=steps, batch_size=32, lr=3e-3, warmup=100, eval_every=50,
                        eval_samples=256, test_samples=512, stop_at=min(1.0, threshold + 0.03),
                        device="cpu")
    summary = train_run(RunConfig(model=cfg, train=train, task=GATE_TASK), out, force=True)
    acc = summary["test"]["acc"]
    return Check("learning gate", acc >= threshold, f"test accuracy {acc:.3f} after "
                 f"{summary['stopped_at']} steps", f"small MQAR (2-4 pairs), "
                 f"threshold {threshold} within {steps} steps", correctness=False)


def tokens_per_second(model: nn.Module, batch: int = 8, length: int = 128, reps: int = 3
                      ) -> float:
    """Forward + backward tokens per second of a language model (median of `reps` timings of
    three steps each, after one warm-up step)."""
    ids = torch.randint(3, model.config.vocab_size, (batch, length))
    model.train()

    def one() -> None:
        out = model(ids)
        out.logits.float().square().mean().backward()

    one()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for _ in range(3):
            one()
        times.append((time.perf_counter() - t0) / 3)
    return batch * length / sorted(times)[len(times) // 2]


def measurements(model: dict[str, Any], vocab: int = 40, length: int = 128) -> list[Check]:
    """Parameters and forward + backward speed of a 2-layer, hidden-64 model beside the lab's
    `mamba` at the same shape, in this process."""
    fields = dict(model)
    name = fields.pop("name")
    torch.manual_seed(0)
    m = build_model(name, vocab, max_len=length, **fields)
    torch.manual_seed(0)
    base = build_model("mamba", vocab, max_len=length)
    ours, ref = tokens_per_second(m), tokens_per_second(base)
    return [
        Check("parameters", None, f"{m.n_params():,}", "2 layers, hidden 64, with embedding "
              "and head", correctness=False),
        Check("speed", None, f"{ours:,.0f} tokens/s ({ours / ref:.2f}x mamba's {ref:,.0f})",
              f"forward + backward, batch 8 x {length} tokens, "
              f"{torch.get_num_threads()} thread(s)", correctness=False),
    ]


# ---- the whole check ----------------------------------------------------------------------------

@dataclass
class Target:
    """What `recall-lab check` runs on: a built-in model name, or a mixer (name or path)."""

    name: str
    model: dict[str, Any]  # `model_config` fields of the 2-layer model (with "name")
    subject: Subject
    info: dict[str, str] = field(default_factory=dict)


def resolve_target(target: str, kwargs: dict[str, Any] | None = None,
                   dtype: torch.dtype | None = None) -> Target:
    """A built-in model name, a mixer name or an import path -> what to check. A mixer is
    checked alone (its outputs), in `dtype` when given (see `MixerSubject.dtype`); a built-in
    model as a whole (its logits)."""
    if is_builtin_model(target) and target not in mixer_models():
        if kwargs:
            raise RecallLabError("--kwargs is for a mixer; a built-in model takes none")
        build_model(target, 23)  # an unknown name ends here, in one line

        def factory() -> nn.Module:
            # k = 8 < the lengths so every pattern is sparse; a small state keeps it fast
            extra = {"decimation": {"min_len": 4, "L_base": 6}} if "deci" in target else {}
            return build_model(target, 23, d_model=16, k=8, d_state=8, lsh_bits=3, n_heads=2,
                               side_scale_init=1.0, max_len=96, **extra)

        return Target(target, {"name": target}, ModelSubject(factory))
    if ":" not in target and "." not in target and target not in mixer_models():
        build_model(target, 23)  # not a name at all: one line naming every model, with hints
    path = resolve_mixer(target)
    kwargs = dict(kwargs or {})
    # a bad path, a constructor that rejects its arguments: one line here (exit 2); what its
    # forward does is for the rows (`check_forward` first)
    build_mixer(path, 16, 0, kwargs)
    label = target if ":" not in target and "." not in target else mixer_label(path)
    return Target(label, {"name": label, "mixer": path, "mixer_kwargs": kwargs or None},
                  MixerSubject(lambda: build_mixer(path, 16, 0, kwargs), dtype=dtype),
                  {"path": path})


def _dtype(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def run_checks(target: Target, learning: bool = True, work: Path | None = None,
               speed: bool = True, strict_state: bool = False) -> list[Check]:
    """Every row for one target: correctness, the state, then the learning gate (in `work`, a
    scratch folder) and the measurements. Each row fails alone: an exception in the code under
    test is that row's failure (`guarded`), and every other row still runs. A DeciMamba model
    keeps context chosen from the whole context, so it is causal from SEP on only: its
    causality rows say so instead of failing."""
    rows = []
    subject = target.subject
    if "deci" in target.name and isinstance(subject, ModelSubject):
        rows += [Check("causality", None, "from SEP on", "DeciMamba chooses the kept context "
                       "from the whole context; the lab's tests check it from SEP on"),
                 Check("padding and length", None, "from SEP on", "as causality")]
        rows += [guarded("finite outputs and gradients",
                         lambda: check_finite_gradients(subject)),
                 guarded("same seed, same output", lambda: check_deterministic(subject))]
    else:
        rows += correctness(subject)
    # a state_size that raises is broken code: a failure whatever `strict_state` says (only a
    # declared count that differs from the measured one is a finding)
    rows.append(guarded("state", lambda: check_state(subject, strict=strict_state)))
    if learning:
        with tempfile.TemporaryDirectory(dir=work) as tmp:
            rows.append(guarded("learning gate",
                                lambda: learning_gate(target.model, Path(tmp) / "gate"),
                                correctness=False))
    if speed:
        try:
            rows += measurements(target.model)
        except Exception as exc:
            rows.append(Check("speed", None, f"not measured: {one_line(exc)}", "",
                              correctness=False))
    return rows


__all__ = ["Check", "GATE_STEPS", "GATE_TASK", "GATE_THRESHOLD", "MixerSubject", "ModelSubject",
           "Target", "UserCodeError", "build", "check_causal", "check_decode",
           "check_deterministic", "check_finite_gradients", "check_forward", "check_padding",
           "fails", "result_word",
           "check_state", "correctness", "future_leak", "guarded", "learning_gate",
           "length_leak", "measured_state", "measurements", "resolve_target", "run_checks",
           "tokens_per_second"]
