"""Generator invariants, checked against an independent parser of the sample format."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.generators import IGNORE, TaskSpec, Vocab, generate, get_preset, targets_for
from recall_lab.generators.render import render_sample
from tests.generators.parse_sample import parse


@st.composite
def specs(draw):
    w = draw(st.integers(1, 4))
    levels, pools = [], []
    for _ in range(w):
        lo = draw(st.integers(1, 3))
        hi = draw(st.integers(lo, 4 if w > 2 else 6))
        levels.append((lo, hi))
        pools.append(draw(st.integers(hi, hi + 3)))
    return TaskSpec(levels=tuple(levels), values=draw(st.integers(2, 20)), pools=tuple(pools))


@given(spec=specs(), n=st.integers(1, 6), seed=st.integers(0, 2**32 - 1))
def test_every_sample_is_a_complete_table_recalled_correctly(spec, n, seed):
    batch = generate(spec, n, seed)
    vocab = spec.vocab()
    assert batch.inputs.dtype == np.int64 and batch.targets.shape == batch.inputs.shape
    assert batch.inputs.shape[1] == max(TaskSpec.sample_length(s) for s in batch.sizes)
    for row, tgt, sizes in zip(batch.inputs, batch.targets, batch.sizes, strict=True):
        p = parse(row, tgt, vocab)
        assert p["end"] == TaskSpec.sample_length(sizes)
        assert (row[p["end"]:] == vocab.PAD).all()
        for level, (n_l, (lo, hi)) in enumerate(zip(sizes, spec.levels, strict=True)):
            assert lo <= n_l <= hi
            ids = row[: p["end"]][vocab.level_of(row[: p["end"]]) == level]
            r_lo, r_hi = vocab.level_range(level)
            assert ((ids >= r_lo) & (ids < r_hi)).all()
        table = {path: v for path, v, _ in p["info"]}
        # each path exactly once per component; the table is the full cartesian product
        assert len(table) == len(p["info"]) == math.prod(sizes)
        assert sorted(path for path, _, _ in p["inquiry"]) == sorted(table)
        # every level is a permutation of the same token set under every parent, in both parts
        for children in (p["info_children"], p["inquiry_children"]):
            by_level: dict[int, set] = {}
            for parent, kids in children.items():
                assert len(kids) == len(set(kids)) == sizes[len(parent)]
                by_level.setdefault(len(parent), set()).add(frozenset(kids))
            assert all(len(s) == 1 for s in by_level.values()), "levels share one token set"
        assert p["info_children"].keys() == p["inquiry_children"].keys()
        # targets: exactly the inquiry key positions, each the table's value for its path
        expected = {pos: table[path] for path, _, pos in p["inquiry"]}
        assert p["targets"] == expected
        assert all(v == row[pos + 1] for pos, v in expected.items())


def test_w1_is_mqar_format():
    spec = TaskSpec(levels=((5, 5),), values=7)
    b = generate(spec, 3, 11)
    vocab = spec.vocab()
    for row in b.inputs:
        info, inquiry = row[1:11], row[12:22]
        assert row[11] == vocab.SEP
        assert (vocab.level_of(info[0::2]) == 0).all() and vocab.is_value(info[1::2]).all()
        pairs = dict(zip(info[0::2].tolist(), info[1::2].tolist(), strict=True))
        assert dict(zip(inquiry[0::2].tolist(), inquiry[1::2].tolist(), strict=True)) == pairs


def test_paper_figure_2_round_trips_through_show():
    vocab = Vocab(pools=(2, 2), n_values=5)
    text = "<bos> A a 3 b 2 B b 4 a 1 <sep> B a 1 b 4 A b 2 a 3"
    row = vocab.encode(text)
    assert vocab.decode(row) == text
    r = render_sample(row, vocab)
    assert r.information == "A a 3 b 2 B b 4 a 1"
    assert r.inquiry == "B a ? b ? A b ? a ?"
    assert r.output == "1 4 2 3"  # the paper's Figure 2 output row


def test_inquiry_order_is_fresh():
    spec = get_preset("mini-mqjr")
    b = generate(spec, 50, 3)
    same = 0
    for row, length in zip(b.inputs, b.lengths, strict=True):
        half = (length - 2) // 2
        same += int((row[1 : 1 + half] == row[2 + half : 2 + 2 * half]).all())
    assert same == 0


def test_preset_lengths_and_paper_padding():
    spec = get_preset("paper-mqjr")
    assert spec.max_len == 1058  # 2 + 2 * 16 * (1 + 2 * 16): the paper's padded length
    b = generate(spec, 20, 0)
    assert b.inputs.shape == (20, 1058)
    sizes = b.sizes
    assert ((sizes >= 5) & (sizes <= 16)).all()


def test_same_seed_same_bytes_and_seeds_differ():
    spec = get_preset("mini-ml3")
    a, b, c = generate(spec, 64, 5), generate(spec, 64, 5), generate(spec, 64, 6)
    assert a.inputs.tobytes() == b.inputs.tobytes()
    assert a.inputs.tobytes() != c.inputs.tobytes()


def test_targets_for_matches_generate():
    spec = get_preset("mini-mqar")
    b = generate(spec, 16, 1)
    assert (targets_for(b.inputs, spec.vocab()) == b.targets).all()
    assert ((b.targets == IGNORE) | spec.vocab().is_value(b.targets)).all()


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(levels=((5, 5),), values=4, pools=(3,)), "table larger than the vocabulary"),
        (dict(levels=((0, 2),), values=4), "size must be >= 1"),
        (dict(levels=((3, 2),), values=4), "is empty"),
        (dict(levels=((2, 2),), values=1), "greater than or equal to 2"),
        (dict(levels=((2, 2),), values=4, seq_len=5), "shorter than the longest sample"),
    ],
)
def test_bad_specs_are_refused(kwargs, message):
    with pytest.raises(ValueError, match=message):
        TaskSpec(**kwargs)


def test_loop_baseline_draws_the_same_distribution():
    """The bench's loop baseline must be a fair comparison: same format, same invariants."""
    from recall_lab.bench.generate import loop_generate
    from tests.generators.parse_sample import parse

    spec = get_preset("mini-ml3")
    rows, targets = loop_generate(spec, 20, 0)
    vocab = spec.vocab()
    for row, tgt in zip(rows, targets, strict=True):
        p = parse(np.array(row), np.array(tgt), vocab)
        table = {path: v for path, v, _ in p["info"]}
        assert p["targets"] == {pos: table[path] for path, _, pos in p["inquiry"]}
        assert len(row) == spec.max_len or row[-1] == vocab.PAD or len(p["info"]) > 0


@pytest.mark.parametrize("spec", [
    get_preset("paper-mqjr"), get_preset("mini-ml3"), get_preset("mqar"),
    TaskSpec(levels=((1, 7),), values=3),
    TaskSpec(levels=((1, 3), (2, 2), (1, 4)), values=4, seq_len=200),
    TaskSpec(levels=((2, 4), (1, 3)), values=5, filler=(0, 20), filler_gap=(1, 3), filler_ids=4),
    TaskSpec(levels=((3, 3),), values=4, pools=(3000,)),  # pool above 2048: argsort fallback
], ids=lambda s: str(s.levels))
def test_fast_rows_equal_round_one_reference(spec):
    """The fast path (permutations composed into gathers, raw-draw sorting, targets written with
    the inquiry) gives round one's bytes exactly, and generate()'s targets equal targets_for."""
    from recall_lab.generators.joint_recall import generate_rows, smallest_dtype
    from tests.generators.reference_rows import reference_rows

    dtype = smallest_dtype(spec.vocab())
    for seed in (0, np.random.SeedSequence(3, spawn_key=(1, 2))):
        n = 300 if spec.max_len < 2000 else 40
        want, want_sizes = reference_rows(spec, n, seed, dtype)
        got, got_sizes = generate_rows(spec, n, seed, dtype)
        assert got.dtype == want.dtype and (got == want).all() and (got_sizes == want_sizes).all()
        b = generate(spec, n, seed)
        assert b.inputs.dtype == np.int64 and (b.inputs == want).all()
        assert (b.targets == targets_for(want, spec.vocab())).all()


def test_raw_draw_permutations_equal_argsort_of_uniforms():
    from recall_lab.generators.joint_recall import _perms

    for bitgen in (np.random.PCG64, np.random.MT19937):
        a, b = np.random.Generator(bitgen(7)), np.random.Generator(bitgen(7))
        for shape in ((50, 16), (20, 5, 9), (3, 2049)):
            assert (_perms(shape, a) == np.argsort(b.random(shape), axis=-1)).all()
        assert a.random() == b.random()  # the generators are left in the same state
