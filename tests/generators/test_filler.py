"""Filler (distractor) tokens: the table does not change, lengths are as asked, filler sits only
between blocks, splits stay disjoint, dataset files keep working."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from recall_lab.data import DatasetReader
from recall_lab.generators import IGNORE, TaskSpec, generate, get_preset, targets_for
from recall_lab.generators.dataset import row_hashes, write_dataset
from recall_lab.generators.errors import RecallLabError
from tests.generators.parse_sample import parse


@st.composite
def filler_specs(draw):
    w = draw(st.integers(1, 2))
    levels = [(lo, draw(st.integers(lo, 4))) for lo in (draw(st.integers(1, 3)) for _ in range(w))]
    f_lo = draw(st.integers(0, 20))
    g_lo = draw(st.integers(0, 5))
    return TaskSpec(
        levels=tuple(levels), values=draw(st.integers(2, 9)),
        filler=(f_lo, f_lo + draw(st.integers(0, 20))),
        filler_gap=(g_lo, g_lo + draw(st.integers(1, 5))),
        filler_ids=draw(st.integers(1, 7)),
    )


def _strip_filler(row: np.ndarray, spec: TaskSpec) -> np.ndarray:
    row = row[row != 0]
    return row[~spec.vocab().is_filler(row)]


@settings(max_examples=40, deadline=None)
@given(spec=filler_specs(), n=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_filler_leaves_the_table_and_targets_unchanged(spec, n, seed):
    plain = spec.model_copy(update={"filler": (0, 0), "filler_gap": (0, 0)})
    with_f, without = generate(spec, n, seed), generate(plain, n, seed)
    vocab = spec.vocab()
    assert vocab.filler_range[0] == vocab.size - spec.filler_ids  # after every table id
    for row, tgt, row0 in zip(with_f.inputs, with_f.targets, without.inputs, strict=True):
        stripped = _strip_filler(row, spec)
        assert stripped.tolist() == row0[row0 != 0].tolist()
        # targets follow the tokens: the same values at the same (non-filler) tokens
        kept = (row != 0) & ~vocab.is_filler(row)
        expect = targets_for(stripped[None, :], vocab)[0]
        assert tgt[kept].tolist() == expect.tolist()
        assert (tgt[~kept] == IGNORE).all()
        # lengths as asked: the filler count is within the configured ranges
        sep = int(np.argmax(row == vocab.SEP))
        n_f = int(vocab.is_filler(row).sum())
        assert spec.filler[0] + spec.filler_gap[0] <= n_f <= spec.filler[1] + spec.filler_gap[1]
        assert not vocab.is_filler(row[sep:]).any(), "no filler in the inquiry"
        # at least filler_gap[0] filler tokens right before SEP
        g = spec.filler_gap[0]
        assert vocab.is_filler(row[sep - g : sep]).all()
        # the independent parser still reads the table (so filler never splits key and value)
        p = parse(row, tgt, vocab)
        table = {path: v for path, v, _ in p["info"]}
        assert p["targets"] == {pos: table[path] for path, _, pos in p["inquiry"]}


def test_passkey_location_is_uniform():
    """One pair in 60 filler tokens: with 2 slots the uniform composition puts the pair at each of
    the 61 offsets with probability 1/61; check the quartile shares and the extremes."""
    spec = get_preset("passkey")
    b = generate(spec, 6100, 0)
    vocab = spec.vocab()
    key_pos = np.argmax(vocab.level_of(b.inputs) == 0, axis=1) - 1  # filler tokens before it
    assert key_pos.min() == 0 and key_pos.max() == 60
    counts = np.bincount(key_pos, minlength=61)
    assert counts.sum() == 6100
    # expected 100 per offset: a 5-sigma band around a binomial(6100, 1/61)
    assert counts.min() > 100 - 5 * 10 and counts.max() < 100 + 5 * 10
    assert b.inputs.shape == (6100, 66) and (b.lengths == 66).all()


def test_at_length_scales_length_and_keeps_tables():
    spec = get_preset("mini-mqar-filler")
    base = generate(spec, 32, 3)
    for factor in (1, 2, 4, 8, 32):
        long = spec.at_length(factor)
        assert long.max_len == factor * spec.max_len
        b = generate(long, 32, 3)
        assert (b.lengths == factor * spec.max_len).all()  # fixed sizes, fixed filler
        for r0, r in zip(base.inputs, b.inputs, strict=True):
            assert _strip_filler(r, spec).tolist() == _strip_filler(r0, spec).tolist()
        assert (b.targets != IGNORE).sum() == (base.targets != IGNORE).sum()


def test_filler_is_deterministic_and_seeded():
    spec = get_preset("passkey")
    a, b, c = generate(spec, 64, 5), generate(spec, 64, 5), generate(spec, 64, 6)
    assert a.inputs.tobytes() == b.inputs.tobytes()
    assert a.inputs.tobytes() != c.inputs.tobytes()


def test_filler_pads_to_seq_len_and_decodes():
    spec = TaskSpec(levels=((2, 2),), values=4, filler=(3, 5), filler_ids=2, seq_len=20)
    b = generate(spec, 8, 0)
    assert b.inputs.shape == (8, 20)
    vocab = spec.vocab()
    for row in b.inputs:
        assert (vocab.encode(vocab.decode(row)) == row[row != 0]).all()
        assert "~" in vocab.decode(row)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(filler=(2, 2)), "filler_ids >= 1"),
        (dict(filler=(3, 2), filler_ids=1), "must satisfy"),
        (dict(filler_gap=(-1, 2), filler_ids=1), "must satisfy"),
        (dict(filler=5, filler_ids=1, seq_len=10), "shorter than the longest"),
    ],
)
def test_bad_filler_specs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TaskSpec(levels=((2, 2),), values=4, **kwargs)
    assert issubclass(RecallLabError, ValueError)


def test_dataset_files_with_filler(tmp_path):
    spec = TaskSpec(levels=((1, 2),), values=3, pools=(2,), filler=(0, 3), filler_gap=(0, 1),
                    filler_ids=2)
    counts = {"train": 300, "valid": 40, "test": 40}
    manifest = write_dataset(spec, tmp_path / "ds", counts, seed=1)
    assert manifest["vocab"]["filler"] == [8, 10]  # 3 special + 3 values + 2 keys
    reader = DatasetReader(tmp_path / "ds")
    hashes = {}
    for split in ("train", "valid", "test"):
        x, y = reader.arrays(split)
        assert len(x) == counts[split]
        assert (y == targets_for(x, spec.vocab())).all()
        tokens = sum(s["tokens"] for s in manifest["splits"][split])
        assert tokens == int((x != 0).sum())
        hashes[split] = {tuple(h) for h in row_hashes(x).tolist()}
    assert not hashes["train"] & hashes["valid"] and not hashes["train"] & hashes["test"]
    assert not hashes["valid"] & hashes["test"]
    # the written rows are the generator's rows (before any disjointness redraw): test split
    from recall_lab.generators.dataset import _block_rows
    from recall_lab.generators.joint_recall import smallest_dtype

    raw, _, _, redrawn = _block_rows(spec, 1, "test", 0, 40, None, smallest_dtype(spec.vocab()))
    assert redrawn == 0
    x, _ = reader.arrays("test")
    assert all(
        r[r != 0].tolist() == x_r[x_r != 0].tolist() for r, x_r in zip(raw, x, strict=True)
    )
