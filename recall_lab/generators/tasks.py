"""The task contract: any generator of token rows, named by import path, trains and evaluates.

A task generator is a function

    def my_task(n: int, seed: numpy.random.SeedSequence, **kwargs) -> (inputs, targets)
                                                       or (inputs, targets, slices)

returning `inputs` int[n, L] (token ids in `[0, vocab_size)`) and `targets` int[n, L] (the id to
predict at each position, -100 where nothing is scored), optionally `slices` int[n] (a label per
row; accuracy is then also reported per label, e.g. zoology's number of key-value pairs). The
same (n, seed, kwargs) must give the same arrays. The function states its vocabulary size and
its longest row as attributes, `my_task.vocab_size` and `my_task.max_len`, each an int or a
function of the kwargs (`task_generator` sets them). Rows may use every id: the lab assumes no
padding token for such a task (a row is `L` tokens).

In a run config:

    [task]
    generator = "mypkg.tasks:my_task"   # or a built-in name: see BUILTIN
    [task.kwargs]
    length = 64

`GeneratorTask` is that table; `TaskSpec` (multi-level joint recall) stays the lab's own task
with its own fields, and `rows` draws either through the same contract.
"""

from __future__ import annotations

import importlib
import inspect
import json
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.joint_recall import generate
from recall_lab.generators.limits import check_fits
from recall_lab.generators.spec import TaskSpec

IGNORE = -100

# Built-in generators by name (`[task] generator = "zoology-mqar"`), each a `pkg.module:function`.
BUILTIN: dict[str, str] = {
    "joint-recall": "recall_lab.generators.joint_recall:joint_recall",
    "zoology-mqar": "recall_lab.generators.builtin:zoology_mqar",
    "zoology-mqar-mix": "recall_lab.generators.builtin:zoology_mqar_mix",
    "forgetting-mqar": "recall_lab.generators.forgetting:forgetting_mqar",
    "selective-copy": "recall_lab.generators.builtin:selective_copy",
    "mad-recall": "recall_lab.generators.builtin:mad_recall",
    "mad-noisy-recall": "recall_lab.generators.builtin:mad_noisy_recall",
    "mad-fuzzy-recall": "recall_lab.generators.builtin:mad_fuzzy_recall",
    "mad-memorization": "recall_lab.generators.builtin:mad_memorization",
    # foreign data's task: rows come from its files
    "dataset": "recall_lab.generators.foreign:dataset",
}


@dataclass(frozen=True)
class Rows:
    """What a task draws: inputs and targets int64 [n, L], slice labels int64 [n] or None."""

    inputs: np.ndarray
    targets: np.ndarray
    slices: np.ndarray | None = None


def task_generator(*, vocab_size: int | Callable[..., int], max_len: int | Callable[..., int],
                   length: str | None = None):
    """Decorator stating a generator's vocabulary size and longest row (an int each, or a
    function of the task's kwargs), and optionally `length`: the name of the keyword argument
    that sets the row length with the same content (zoology's `input_seq_len`: more noise
    between the same pairs), so `at_length` (`eval --length-factor`) can grow the task."""
    def wrap(fn):
        fn.vocab_size, fn.max_len = vocab_size, max_len
        if length is not None:
            fn.length_kwarg = length
        return fn
    return wrap


@dataclass(frozen=True)
class TokenVocab:
    """The vocabulary of a generator task: `size` ids named by their number. PAD and SEP are
    the joint-recall layout's ids; such a task does not reserve them."""

    size: int
    PAD = 0
    SEP = 2

    @cached_property
    def names(self) -> tuple[str, ...]:
        return tuple(str(i) for i in range(self.size))

    def decode(self, ids) -> str:
        return " ".join(str(int(i)) for i in np.asarray(ids).ravel())

    def is_filler(self, ids: np.ndarray) -> np.ndarray:
        return np.zeros(np.shape(ids), dtype=bool)

    def to_json(self) -> dict:
        return {"size": self.size}


def load_generator(path: str) -> Callable:
    """The function named by `pkg.module:function` or a built-in name; one line when it does
    not import or states no vocabulary size / maximum length."""
    target = BUILTIN.get(path, path)
    module, sep, name = target.partition(":")
    if not sep or not module or not name:
        raise RecallLabError(f"task generator {path!r} must be 'pkg.module:function' or a "
                             f"built-in name ({', '.join(BUILTIN)})")
    try:
        fn = getattr(importlib.import_module(module), name)
    except ImportError as exc:
        raise RecallLabError(f"task generator {path!r} does not import: {exc}") from None
    except AttributeError:
        raise RecallLabError(f"task generator {path!r}: module {module} has no {name}") from None
    if not callable(fn):
        raise RecallLabError(f"task generator {path!r} is not a function")
    for attr in ("vocab_size", "max_len"):
        if not hasattr(fn, attr):
            raise RecallLabError(f"task generator {path!r} does not state its {attr} (set "
                                 f"{name}.{attr}, or use "
                                 "recall_lab.generators.tasks.task_generator)")
    return fn


def growing_tasks() -> list[str]:
    """The built-in tasks whose generator names a length argument (`at_length` grows them)."""
    names = []
    for name, path in BUILTIN.items():
        try:
            if getattr(load_generator(path), "length_kwarg", None):
                names.append(name)
        except RecallLabError:
            continue
    return names


class GeneratorTask(BaseModel):
    """A task drawn by a generator function (module docstring): `[task] generator` + kwargs."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    generator: str = Field(min_length=1)
    kwargs: dict[str, Any] = {}
    _size: int = PrivateAttr(0)
    _max_len: int = PrivateAttr(0)

    def model_post_init(self, _: Any) -> None:
        try:
            json.dumps(self.kwargs, allow_nan=False)
        except (TypeError, ValueError):
            raise RecallLabError(f"task {self.generator}: kwargs must be plain TOML / JSON "
                                 "values") from None
        fn = self.function
        self._size, self._max_len = self._stated(fn, "vocab_size"), self._stated(fn, "max_len")

    @property
    def function(self) -> Callable:
        return load_generator(self.generator)

    def _stated(self, fn: Callable, attr: str) -> int:
        value = getattr(fn, attr)
        if callable(value):
            try:
                value = value(**self.kwargs)
            except RecallLabError:
                raise
            except TypeError as exc:
                raise RecallLabError(f"task {self.generator}: {exc}") from None
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise RecallLabError(f"task {self.generator}: {attr} must be an int >= 1, got "
                                 f"{value!r}")
        return int(value)

    @property
    def max_len(self) -> int:
        return self._max_len

    @property
    def seq_len(self) -> int:
        return self._max_len

    def vocab(self) -> TokenVocab:
        return TokenVocab(self._size)

    def describe(self) -> str:
        args = ", ".join(f"{k}={v}" for k, v in self.kwargs.items())
        return f"{self.generator}({args})"

    def at_length(self, factor: int) -> GeneratorTask:
        """The same task `factor` times as long, where its generator names the keyword argument
        that sets the length (`task_generator(length=...)`; zoology-mqar: `input_seq_len`, as
        zoology's `ar_extrapolate`: the same number of pairs among more noise)."""
        if factor < 1:
            raise RecallLabError(f"length factor must be >= 1, got {factor}")
        if factor == 1:
            return self
        fn = self.function
        key = getattr(fn, "length_kwarg", None)
        if key is None:
            grows = ", ".join(growing_tasks())
            raise RecallLabError(f"task {self.generator} cannot be lengthened (its generator "
                                 "names no length argument): evaluate another length with "
                                 f"--task; --length-factor grows {grows} and the joint-recall "
                                 "tasks trained with filler (passkey)")
        default = inspect.signature(fn).parameters[key].default
        current = self.kwargs.get(key, default)
        # through generator_task: a setting the longer rows break is one line
        return generator_task({"generator": self.generator,
                               "kwargs": {**self.kwargs, key: int(current) * factor}})

    def rows(self, n: int, seed: Any) -> Rows:
        if n < 0:
            raise RecallLabError(f"sample count must be >= 0, got {n}")
        check_fits(n * self.max_len * 32, f"the samples: {n:,} samples of {self.max_len} tokens")
        ss = seed if isinstance(seed, np.random.SeedSequence) else np.random.SeedSequence(seed)
        try:
            out = self.function(n, ss, **self.kwargs)
        except RecallLabError:
            raise
        except TypeError as exc:
            raise RecallLabError(f"task {self.generator}: {exc}") from None
        return check_rows(out, n, self.vocab().size, self.max_len, self.generator)


def check_rows(out: Any, n: int, vocab_size: int, max_len: int, name: str) -> Rows:
    """A generator's return value as `Rows`, after checking it keeps the contract: one line
    naming the generator and what is wrong."""
    def bad(what: str) -> RecallLabError:
        return RecallLabError(f"task generator {name}: {what}")

    if not isinstance(out, tuple) or len(out) not in (2, 3):
        raise bad(f"must return (inputs, targets) or (inputs, targets, slices), got "
                  f"{type(out).__name__}")
    arrays = [np.asarray(a) for a in out]
    for label, a in zip(("inputs", "targets", "slices"), arrays, strict=False):
        if a.dtype.kind not in "iu":
            raise bad(f"{label} must be integers, got dtype {a.dtype}")
    inputs, targets = arrays[0], arrays[1]
    if inputs.ndim != 2 or inputs.shape[0] != n:
        raise bad(f"inputs must have shape [{n}, L], got {list(inputs.shape)}")
    if targets.shape != inputs.shape:
        raise bad(f"targets have shape {list(targets.shape)}, inputs {list(inputs.shape)}")
    if inputs.shape[1] > max_len:
        raise bad(f"rows of {inputs.shape[1]} tokens, longer than its max_len {max_len}")
    if inputs.size and (inputs.min() < 0 or inputs.max() >= vocab_size):
        raise bad(f"input ids must lie in [0, {vocab_size}), got {inputs.min()}..{inputs.max()}")
    scored = targets != IGNORE
    if scored.any() and (targets[scored].min() < 0 or targets[scored].max() >= vocab_size):
        raise bad(f"targets must be -100 or ids in [0, {vocab_size})")
    slices = None
    if len(arrays) == 3:
        slices = arrays[2]
        if slices.shape != (n,):
            raise bad(f"slices must have shape [{n}], got {list(slices.shape)}")
        slices = slices.astype(np.int64)
    return Rows(inputs.astype(np.int64), targets.astype(np.int64), slices)


def generator_task(table: dict) -> GeneratorTask:
    """`GeneratorTask` from a `[task]` table, any problem in one line (the generator's own
    message when it does not import or keep the contract)."""
    try:
        return GeneratorTask.model_validate(table)
    except ValidationError as exc:
        e = exc.errors()[0]
        err = (e.get("ctx") or {}).get("error")
        if isinstance(err, RecallLabError):
            raise err from None
        loc = ".".join(str(x) for x in e["loc"]) or "task"
        raise RecallLabError(f"[task] {loc}: {e['msg']}") from None


def is_generator_table(table: Any) -> bool:
    return isinstance(table, dict) and "generator" in table


def task_from_json(data: Any):
    """A task's JSON (a run's config.json, a dataset's manifest) -> TaskSpec or GeneratorTask."""
    if isinstance(data, (TaskSpec, GeneratorTask)):
        return data
    if is_generator_table(data):
        return generator_task(data)
    return TaskSpec.model_validate(data)


def rows(task, n: int, seed: Any) -> Rows:
    """n rows of any task (TaskSpec or GeneratorTask) from `seed` (an int or SeedSequence)."""
    if isinstance(task, GeneratorTask):
        return task.rows(n, seed)
    b = generate(task, n, seed)
    return Rows(b.inputs, b.targets, None)
