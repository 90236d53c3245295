"""An independent reader of one sample, written from the format's definition (not the generator):
walks the tokens with a stack of current contexts and rebuilds the table."""

from __future__ import annotations

import numpy as np

from recall_lab.generators import IGNORE, Vocab


def parse(row: np.ndarray, targets: np.ndarray, vocab: Vocab) -> dict:
    row = [int(t) for t in row]
    targets = [int(t) for t in targets]
    assert row[0] == vocab.BOS
    sep = row.index(vocab.SEP)
    end = len(row)
    while end > 0 and row[end - 1] == vocab.PAD:
        end -= 1
    w = vocab.n_levels
    vlo, vhi = vocab.value_range

    def walk(lo: int, hi: int):
        path: list[int | None] = [None] * w
        entries = []  # (path, value, position of the key)
        children: dict[tuple, list[int]] = {}
        flo, fhi = vocab.filler_range
        for pos in range(lo, hi):
            t = row[pos]
            if flo <= t < fhi:  # filler: part of no block
                continue
            if vlo <= t < vhi:
                assert path[-1] is not None and row[pos - 1] == path[-1], "value not after a key"
                entries.append((tuple(path), t, pos - 1))
                continue
            level = int(vocab.level_of(np.array([t]))[0])
            assert level >= 0, f"unexpected token {t} at {pos}"
            assert all(p is not None for p in path[:level]), "level token before its parent"
            path[level] = t
            for deeper in range(level + 1, w):
                path[deeper] = None
            children.setdefault(tuple(path[:level]), []).append(t)
        return entries, children

    info, info_children = walk(1, sep)
    inquiry, inq_children = walk(sep + 1, end)
    return {
        "info": info, "inquiry": inquiry, "info_children": info_children,
        "inquiry_children": inq_children, "sep": sep, "end": end,
        "targets": {pos: t for pos, t in enumerate(targets) if t != IGNORE},
    }
