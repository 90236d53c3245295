"""Task configuration (`TaskSpec`) and the named presets.

A task is multi-level joint recall with level sizes `(n_1, ..., n_w)` (each fixed or sampled per
sample from an inclusive range) over `values` value tokens: w=1 is MQAR, w=2 is multi-query joint
recall (the joint-recall paper's Sec. 3.2, App. C).

Filler (the passkey / document-retrieval setting of DeciMamba Sec. 5): `filler` distractor
tokens (a count range per sample) are scattered between the blocks of the information component and
`filler_gap` more sit between the information component and SEP; they come from `filler_ids` ids of
their own. Filler is drawn after the table from the same stream, so one seed gives the same table
with any amount of filler: `at_length` evaluates the same tables at k times the length.
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.fields import Int
from recall_lab.generators.vocab import Vocab


class TaskSpec(BaseModel):
    """Level sizes (lo, hi) per level (last level = keys), value count, id pools, padded length."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    levels: tuple[tuple[Int, Int], ...] = Field(min_length=1)
    values: Int = Field(ge=2)
    pools: tuple[Int, ...] | None = None
    seq_len: Int | None = None
    filler: tuple[Int, Int] = (0, 0)  # filler tokens between the information blocks, per sample
    filler_gap: tuple[Int, Int] = (0, 0)  # filler tokens between information and SEP
    filler_ids: Int = Field(0, ge=0)  # distinct filler ids in the Vocab (after every other id)

    @field_validator("filler", "filler_gap", mode="before")
    @classmethod
    def _fixed_count(cls, v: Any) -> Any:
        return (v, v) if isinstance(v, int) else v

    @field_validator("levels", mode="before")
    @classmethod
    def _fixed_sizes(cls, v: Any) -> Any:
        if isinstance(v, (list, tuple)):
            return tuple((x, x) if isinstance(x, int) else tuple(x) for x in v)
        return v

    @model_validator(mode="after")
    def _check(self) -> TaskSpec:
        for level, (lo, hi) in enumerate(self.levels):
            if lo < 1:
                raise RecallLabError(f"level {level} size must be >= 1, got {lo}")
            if hi < lo:
                raise RecallLabError(f"level {level} size range ({lo}, {hi}) is empty")
        if self.pools is None:
            object.__setattr__(self, "pools", tuple(hi for _, hi in self.levels))
        if len(self.pools) != len(self.levels):
            raise RecallLabError(
                f"pools has {len(self.pools)} entries but there are {len(self.levels)} levels"
            )
        for level, ((_, hi), pool) in enumerate(zip(self.levels, self.pools, strict=True)):
            if hi > pool:
                raise RecallLabError(
                    f"table larger than the vocabulary can name: level {level} needs up to "
                    f"{hi} distinct tokens but its vocabulary has {pool}"
                )
        for name in ("filler", "filler_gap"):
            lo, hi = getattr(self, name)
            if lo < 0 or hi < lo:
                raise RecallLabError(f"{name} count range ({lo}, {hi}) must satisfy 0 <= lo <= hi")
        if self.has_filler and self.filler_ids < 1:
            raise RecallLabError("filler needs filler_ids >= 1 (distinct filler tokens)")
        if self.seq_len is not None and self.seq_len < self.max_len:
            raise RecallLabError(
                f"seq_len {self.seq_len} is shorter than the longest sample ({self.max_len})"
            )
        return self

    @property
    def n_levels(self) -> int:
        return len(self.levels)

    @staticmethod
    def sample_length(sizes: tuple[int, ...] | list[int]) -> int:
        """Tokens in one sample: BOS + 2 components + SEP; a component has one token per tree
        node at every level plus one value per leaf."""
        nodes, prod = 0, 1
        for n in sizes:
            prod *= n
            nodes += prod
        return 2 + 2 * (nodes + prod)

    @property
    def has_filler(self) -> bool:
        return self.filler[1] > 0 or self.filler_gap[1] > 0

    @property
    def max_len(self) -> int:
        table = self.sample_length([hi for _, hi in self.levels])
        return table + self.filler[1] + self.filler_gap[1]

    def at_length(self, factor: int) -> TaskSpec:
        """The same task with `(factor - 1) * max_len` more filler tokens in the information
        component of every sample (so the longest sample is `factor * max_len`); the same seed
        gives the same tables. `seq_len` is scaled too."""
        if factor < 1:
            raise RecallLabError(f"length factor must be >= 1, got {factor}")
        extra = (factor - 1) * self.max_len
        lo, hi = self.filler
        update: dict[str, Any] = {"filler": (lo + extra, hi + extra),
                                  "filler_ids": self.filler_ids or 1}
        if self.seq_len is not None:
            update["seq_len"] = self.seq_len * factor
        return TaskSpec.model_validate({**self.model_dump(), **update})

    @property
    def max_entries(self) -> int:
        return math.prod(hi for _, hi in self.levels)

    def vocab(self) -> Vocab:
        return Vocab(pools=tuple(self.pools), n_values=self.values, n_filler=self.filler_ids)

    def describe(self) -> str:
        def rng(lo: int, hi: int) -> str:
            return f"{lo}" if lo == hi else f"[{lo},{hi}]"

        sizes = " x ".join(rng(lo, hi) for lo, hi in self.levels)
        out = f"w={self.n_levels} levels {sizes}, |V|={self.values}"
        if self.has_filler:
            out += f", filler {rng(*self.filler)} + gap {rng(*self.filler_gap)}"
        return out


class Preset(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: TaskSpec
    train: Int
    valid: Int
    test: Int
    about: str


PRESETS: dict[str, Preset] = {
    "paper-mqjr": Preset(
        spec=TaskSpec(levels=((5, 16), (5, 16)), values=16, seq_len=1058),
        train=1_440_000, valid=14_400, test=14_400,
        about="joint-recall paper Sec. 5.1: n_c, n_k uniform in [5, 16], |V|=16, padded to 1058",
    ),
    "mqar": Preset(
        spec=TaskSpec(levels=((16, 64),), values=64, pools=(256,), seq_len=258),
        train=100_000, valid=2_000, test=2_000,
        about="multi-query associative recall: 16-64 pairs, keys from 256 ids, 64 values",
    ),
    "mini-mqar": Preset(
        spec=TaskSpec(levels=((16, 24),), values=16, pools=(32,)),
        train=20_000, valid=512, test=512,
        about="CPU-sized MQAR: 16-24 pairs (64-96 bits of table), 16 values",
    ),
    "mini-mqjr": Preset(
        spec=TaskSpec(levels=((4, 6), (4, 6)), values=16),
        train=20_000, valid=512, test=512,
        about="CPU-sized joint recall: 4-6 contexts x 4-6 keys, 16 values",
    ),
    "passkey": Preset(
        spec=TaskSpec(levels=((1, 1),), values=16, pools=(8,), filler=(60, 60), filler_ids=16),
        train=20_000, valid=512, test=512,
        about="passkey-style (DeciMamba Sec. 5): one key-value pair at a random place in 60 "
              "filler tokens (16 filler ids); length 66",
    ),
    "mini-mqar-filler": Preset(
        spec=TaskSpec(levels=((8, 8),), values=16, pools=(16,), filler=(30, 30),
                      filler_ids=16),
        train=20_000, valid=512, test=512,
        about="MQAR with filler (DeciMamba's setting): 8 pairs among 30 filler tokens; length 64",
    ),
    "mini-ml3": Preset(
        spec=TaskSpec(levels=((2, 3), (2, 3), (3, 4)), values=16),
        train=20_000, valid=512, test=512,
        about="CPU-sized 3-level joint recall: 2-3 x 2-3 x 3-4 entries, 16 values",
    ),
}


def get_preset(name: str) -> TaskSpec:
    return get_preset_entry(name).spec


def get_preset_entry(name: str) -> Preset:
    try:
        return PRESETS[name]
    except KeyError:
        raise RecallLabError(
            f"unknown preset {name!r}; choose from {', '.join(PRESETS)}"
        ) from None
