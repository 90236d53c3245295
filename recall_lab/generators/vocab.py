"""The token layout: one `Vocab` owns every id.

Layout: special tokens PAD=0, BOS=1, SEP=2; then the value ids; then one contiguous id range per
context level (level 0 first, the last level holds the keys); then the filler (distractor) ids,
last, so that adding filler never moves an id of the table. Nothing else in the project uses a
numeric offset: ask the `Vocab`.
"""

from __future__ import annotations

import string
from dataclasses import dataclass
from functools import cached_property

import numpy as np

from recall_lab.generators.errors import RecallLabError

_GREEK = "αβγδεζηθικλμνξοπρστυφχψω"


@dataclass(frozen=True)
class Vocab:
    """Ids for `n_values` values, one id pool per context level (`pools[-1]` = keys) and
    `n_filler` filler ids."""

    pools: tuple[int, ...]
    n_values: int
    n_filler: int = 0

    PAD = 0
    BOS = 1
    SEP = 2
    N_SPECIAL = 3

    @property
    def n_levels(self) -> int:
        return len(self.pools)

    @property
    def value_range(self) -> tuple[int, int]:
        return (self.N_SPECIAL, self.N_SPECIAL + self.n_values)

    def level_range(self, level: int) -> tuple[int, int]:
        if not 0 <= level < self.n_levels:
            raise RecallLabError(f"level {level} out of range 0..{self.n_levels - 1}")
        lo = self.N_SPECIAL + self.n_values + sum(self.pools[:level])
        return (lo, lo + self.pools[level])

    @property
    def filler_range(self) -> tuple[int, int]:
        lo = self.N_SPECIAL + self.n_values + sum(self.pools)
        return (lo, lo + self.n_filler)

    @property
    def size(self) -> int:
        return self.N_SPECIAL + self.n_values + sum(self.pools) + self.n_filler

    def is_filler(self, ids: np.ndarray) -> np.ndarray:
        lo, hi = self.filler_range
        return (ids >= lo) & (ids < hi)

    def is_value(self, ids: np.ndarray) -> np.ndarray:
        lo, hi = self.value_range
        return (ids >= lo) & (ids < hi)

    def level_of(self, ids: np.ndarray) -> np.ndarray:
        """Level index of each id, -1 for special and value ids."""
        ids = np.asarray(ids)
        out = np.full(ids.shape, -1, dtype=np.int64)
        for level in range(self.n_levels):
            lo, hi = self.level_range(level)
            out[(ids >= lo) & (ids < hi)] = level
        return out

    # ---- names -----------------------------------------------------------------------------
    def _level_alphabet(self, level: int) -> str | None:
        depth = self.n_levels - 1 - level  # 0 = keys
        return {0: string.ascii_lowercase, 1: string.ascii_uppercase, 2: _GREEK}.get(depth)

    def _level_name(self, level: int, index: int) -> str:
        alphabet = self._level_alphabet(level)
        if alphabet is None:
            return f"L{level}.{index}"
        letter, rest = alphabet[index % len(alphabet)], index // len(alphabet)
        return letter if rest == 0 else f"{letter}{rest}"

    @cached_property
    def names(self) -> tuple[str, ...]:
        """Readable name of every id (paper Fig. 2 style: contexts A.., keys a.., values 0..)."""
        out = ["<pad>", "<bos>", "<sep>"]
        out += [str(v) for v in range(self.n_values)]
        for level, pool in enumerate(self.pools):
            out += [self._level_name(level, i) for i in range(pool)]
        out += [f"~{i}" for i in range(self.n_filler)]
        return tuple(out)

    @cached_property
    def _ids_by_name(self) -> dict[str, int]:
        return {name: i for i, name in enumerate(self.names)}

    def decode(self, ids) -> str:
        """Ids to text, PAD dropped: `<bos> A a 3 b 2 B ...`."""
        return " ".join(self.names[int(i)] for i in np.asarray(ids).ravel() if int(i) != self.PAD)

    def encode(self, text: str) -> np.ndarray:
        """Inverse of `decode` for a whitespace-separated token string."""
        try:
            return np.array([self._ids_by_name[t] for t in text.split()], dtype=np.int64)
        except KeyError as exc:
            raise RecallLabError(f"unknown token {exc.args[0]!r} for this vocabulary") from None

    def to_json(self) -> dict:
        return {
            "PAD": self.PAD, "BOS": self.BOS, "SEP": self.SEP,
            "values": list(self.value_range),
            "levels": [list(self.level_range(level)) for level in range(self.n_levels)],
            "filler": list(self.filler_range),
            "size": self.size,
        }
