"""Task configuration (`TaskSpec`) and the named presets.

A task is multi-level joint recall with level sizes `(n_1, ..., n_w)` (each fixed or sampled per
sample from an inclusive range) over `values` value tokens: w=1 is MQAR, w=2 is multi-query joint
recall (seed 004 Sec. 3.2, App. C).
"""

from __future__ import annotations

import math
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from generators.errors import RecallLabError
from generators.vocab import Vocab


class TaskSpec(BaseModel):
    """Level sizes (lo, hi) per level (last level = keys), value count, id pools, padded length."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    levels: tuple[tuple[int, int], ...] = Field(min_length=1)
    values: int = Field(ge=2)
    pools: tuple[int, ...] | None = None
    seq_len: int | None = None

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
    def max_len(self) -> int:
        return self.sample_length([hi for _, hi in self.levels])

    @property
    def max_entries(self) -> int:
        return math.prod(hi for _, hi in self.levels)

    def vocab(self) -> Vocab:
        return Vocab(pools=tuple(self.pools), n_values=self.values)

    def describe(self) -> str:
        sizes = " x ".join(f"{lo}" if lo == hi else f"[{lo},{hi}]" for lo, hi in self.levels)
        return f"w={self.n_levels} levels {sizes}, |V|={self.values}"


class Preset(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    spec: TaskSpec
    train: int
    valid: int
    test: int
    about: str


PRESETS: dict[str, Preset] = {
    "paper-mqjr": Preset(
        spec=TaskSpec(levels=((5, 16), (5, 16)), values=16, seq_len=1058),
        train=1_440_000, valid=14_400, test=14_400,
        about="seed 004 Sec. 5.1: n_c, n_k uniform in [5, 16], |V|=16, padded to 1058",
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
