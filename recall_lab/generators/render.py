"""A sample as readable text in the style of the joint-recall paper's Fig. 2."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from recall_lab.generators.joint_recall import IGNORE, targets_for
from recall_lab.generators.vocab import Vocab


@dataclass(frozen=True)
class RenderedSample:
    information: str  # e.g. "A a 3 b 2 B b 4 a 1"
    inquiry: str  # values to recall shown as "?": "B a ? b ? A b ? a ?"
    output: str  # the values to recall, in order: "1 4 2 3"


def render_sample(row: np.ndarray, vocab: Vocab) -> RenderedSample:
    row = np.asarray(row).reshape(-1)
    row = row[row != vocab.PAD]
    seps = np.flatnonzero(row == vocab.SEP)
    cut = int(seps[0]) if len(seps) else len(row)
    info = [vocab.names[int(t)] for t in row[:cut] if int(t) != vocab.BOS]
    targets = targets_for(row[None, :], vocab)[0]
    inquiry, output = [], []
    asked = np.zeros(len(row), dtype=bool)
    asked[1:] = targets[:-1] != IGNORE  # the value that follows a queried key
    for pos in range(cut + 1, len(row)):
        if asked[pos]:
            inquiry.append("?")
            output.append(vocab.names[int(row[pos])])
        else:
            inquiry.append(vocab.names[int(row[pos])])
    return RenderedSample(" ".join(info), " ".join(inquiry), " ".join(output))


def render_scored(inputs: np.ndarray, targets: np.ndarray) -> tuple[str, str]:
    """A row of any task as text: its ids, each scored position marked `id[->target]`, and the
    targets alone in order (`position:target`)."""
    inputs, targets = np.asarray(inputs).reshape(-1), np.asarray(targets).reshape(-1)
    marked = [f"{int(t)}[->{int(y)}]" if y != IGNORE else str(int(t))
              for t, y in zip(inputs, targets, strict=True)]
    scored = [f"{i}:{int(y)}" for i, y in enumerate(targets) if y != IGNORE]
    return " ".join(marked), " ".join(scored)
