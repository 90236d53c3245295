"""`forgetting-mqar` (zoology's forgetting MQAR): the invariants of every row, checked by replaying
each row's writes (Hypothesis), its refusals of bad settings (one line, exit 2 through the CLI,
nothing written), and its listing among the built-in tasks."""

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.commands import shell
from recall_lab.generators.errors import RecallLabError
from recall_lab.generators.forgetting import forgetting_mqar, needed_length, needed_vocab
from recall_lab.generators.tasks import IGNORE, generator_task

runner = CliRunner()


@st.composite
def settings(draw):
    k = draw(st.integers(1, 10))
    m = draw(st.integers(0, k))
    L = needed_length(k, m) + 2 * draw(st.integers(0, 12))
    V = needed_vocab(k, m, L) + draw(st.integers(0, 40))
    return {"vocab_size": V, "input_seq_len": L, "num_kv_pairs": k, "num_updates": m,
            "power_a": draw(st.sampled_from([0.01, 0.5, 1.0])),
            "random_non_queries": draw(st.booleans())}


@given(st.integers(0, 2**32 - 1), settings())
def test_rows_keep_the_task(seed, kw):
    n = 5
    x, y = forgetting_mqar(n, np.random.SeedSequence(seed), **kw)
    V, L, k, m = kw["vocab_size"], kw["input_seq_len"], kw["num_kv_pairs"], kw["num_updates"]
    half, ctx = V // 2, 2 * (k + m)
    assert x.shape == y.shape == (n, L) and ((x >= 0) & (x < V)).all()
    for row, tgt in zip(x, y, strict=True):
        keys, first = row[0 : 2 * k : 2], row[1 : 2 * k : 2]
        ukeys, new = row[2 * k : ctx : 2], row[2 * k + 1 : ctx : 2]
        assert len(set(keys.tolist())) == k and ((keys >= 1) & (keys < half)).all()
        assert len(set(first.tolist())) == k and ((first >= half) & (first < V)).all()
        assert ((new >= half) & (new < V)).all()
        # the update block: m different keys of the row, each with a value unlike its original
        assert len(set(ukeys.tolist())) == m and set(ukeys.tolist()) <= set(keys.tolist())
        original = dict(zip(keys.tolist(), first.tolist(), strict=True))
        assert all(original[u] != v for u, v in zip(ukeys.tolist(), new.tolist(), strict=True))
        # replay the writes: each key's last value and where it was last written
        last, written_at = {}, {}
        for j in range(0, ctx, 2):
            last[int(row[j])], written_at[int(row[j])] = int(row[j + 1]), j
        asked = np.flatnonzero(tgt != IGNORE)
        assert sorted(row[asked].tolist()) == sorted(keys.tolist())  # each live key once
        assert all(tgt[p] == last[int(row[p])] for p in asked)  # the last value is the label
        assert all(p > written_at[int(row[p])] for p in asked)  # asked after its last write
        assert (asked >= ctx).all() and ((asked - ctx) % 2 == 0).all()
        # exactly the updated keys' labels differ from their originals
        assert sum(int(tgt[p]) != original[int(row[p])] for p in asked) == m
        if not kw["random_non_queries"]:
            rest = np.ones(L, bool)
            rest[:ctx] = False
            rest[asked] = False
            assert (row[rest] == 0).all()
    again = forgetting_mqar(n, np.random.SeedSequence(seed), **kw)
    assert x.tobytes() == again[0].tobytes() and y.tobytes() == again[1].tobytes()


def test_no_updates_is_zoology_mqar_layout_and_updates_change_labels():
    kw = {"vocab_size": 64, "input_seq_len": 48, "num_kv_pairs": 8, "random_non_queries": False}
    x0, y0 = forgetting_mqar(400, np.random.SeedSequence(1), num_updates=0, **kw)
    x8, y8 = forgetting_mqar(400, np.random.SeedSequence(1), num_updates=8, **kw)
    first0 = dict(enumerate(x0[:, 1:16:2].tolist()))
    # without updates every label is the key's one value
    for r in range(400):
        kv = dict(zip(x0[r, 0:16:2].tolist(), first0[r], strict=True))
        asked = np.flatnonzero(y0[r] != IGNORE)
        assert [kv[t] for t in x0[r, asked].tolist()] == y0[r, asked].tolist()
    # with every key updated no label is its key's first value
    for r in range(400):
        kv = dict(zip(x8[r, 0:16:2].tolist(), x8[r, 1:16:2].tolist(), strict=True))
        asked = np.flatnonzero(y8[r] != IGNORE)
        assert all(kv[t] != v for t, v in zip(x8[r, asked], y8[r, asked], strict=True))


def test_updated_values_are_uniform_over_the_other_value_ids():
    # vocab 8: keys 1-3, values 4-7; one key, updated: the new value is one of the 3 others
    x, _ = forgetting_mqar(6000, np.random.SeedSequence(2), vocab_size=8, input_seq_len=6,
                           num_kv_pairs=1, num_updates=1, random_non_queries=False)
    for v in range(4, 8):
        new = x[x[:, 1] == v, 3]
        counts = np.array([(new == w).sum() for w in range(4, 8)])
        assert counts[v - 4] == 0
        share = np.delete(counts, v - 4) / counts.sum()
        assert np.abs(share - 1 / 3).max() < 0.05  # about 1,500 rows per original value


def test_through_the_contract_and_longer():
    task = generator_task({"generator": "forgetting-mqar",
                           "kwargs": {"vocab_size": 256, "num_updates": 8}})
    assert task.vocab().size == 256 and task.max_len == 64
    drawn = task.rows(16, 0)
    assert drawn.inputs.shape == (16, 64) and drawn.slices is None
    long = task.at_length(2)
    assert long.kwargs["input_seq_len"] == 128 and long.max_len == 128
    assert long.rows(4, 0).inputs.shape == (4, 128)
    small = generator_task({"generator": "forgetting-mqar", "kwargs": {
        "vocab_size": 64, "input_seq_len": 48, "num_updates": 8}})
    with pytest.raises(RecallLabError, match="vocab_size 64 is too small.*>= 97"):
        small.at_length(2)  # zoology's vocab_size > input_seq_len, in one line


BAD = [
    ({"num_kv_pairs": 4, "num_updates": 5},
     "task forgetting-mqar: num_updates (5) must be <= num_kv_pairs (4)"),
    ({"num_updates": -1}, "task forgetting-mqar: num_updates must be >= 0, got -1"),
    ({"num_kv_pairs": 8, "num_updates": 8, "input_seq_len": 40},
     "input_seq_len 40 is too short: 8 pairs and 8 updates need 48 tokens"),
    ({"vocab_size": 16, "input_seq_len": 32, "num_kv_pairs": 8, "num_updates": 0},
     "vocab_size 16 is too small"),
    ({"vocab_size": 40, "input_seq_len": 48, "num_kv_pairs": 8, "num_updates": 8},
     "need vocab_size >= 49"),
]


@pytest.mark.parametrize("kwargs,words", BAD)
def test_bad_settings_are_one_line(kwargs, words):
    with pytest.raises(RecallLabError, match=words.replace("(", r"\(").replace(")", r"\)")):
        forgetting_mqar(2, np.random.SeedSequence(0), **kwargs)
    with pytest.raises(RecallLabError, match="forgetting-mqar"):  # refused where it is read
        generator_task({"generator": "forgetting-mqar", "kwargs": kwargs})


def test_too_short_names_the_length_needed():
    # zoology's bound: 2 tokens per write (6 pairs + 4 updates), 2 per query (6 keys)
    need = 2 * (6 + 4) + 2 * 6
    with pytest.raises(RecallLabError) as err:
        forgetting_mqar(1, 0, vocab_size=128, input_seq_len=need - 2, num_kv_pairs=6,
                        num_updates=4)
    assert f"input_seq_len {need - 2} is too short" in str(err.value)
    assert f"need {need} tokens" in str(err.value)
    x, _ = forgetting_mqar(1, 0, vocab_size=128, input_seq_len=need, num_kv_pairs=6,
                           num_updates=4)
    assert x.shape == (1, need)


def _toml(kwargs: dict) -> str:
    body = "".join(f"{k} = {v}\n" for k, v in kwargs.items())
    return f'[task]\ngenerator = "forgetting-mqar"\n[task.kwargs]\n{body}'


@pytest.mark.parametrize("kwargs,words", BAD[:4])
def test_cli_refuses_bad_settings_and_writes_nothing(tmp_path, kwargs, words):
    task = tmp_path / "task.toml"
    task.write_text(_toml(kwargs))
    out = tmp_path / "data"
    out.mkdir()
    (out / "keep.txt").write_text("earlier results")
    r = runner.invoke(app, ["generate", str(task), "--out", str(out), "--force"])
    assert r.exit_code == 2, r.output
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words.split(": ")[-1] in \
        lines[0]
    assert sorted(p.name for p in out.iterdir()) == ["keep.txt"]
    assert (out / "keep.txt").read_text() == "earlier results"


@pytest.mark.parametrize("width", [100, 80])
def test_presets_lists_it_within_the_columns(monkeypatch, width):
    monkeypatch.setattr(shell.console, "width", width)
    r = runner.invoke(app, ["presets"], env={"COLUMNS": str(width)})
    assert r.exit_code == 0, r.output
    assert "forgetting-mqar" in r.stdout
    assert "recall_lab.generators.forgetting:forgetting_mqar" in r.stdout  # whole on one line
    assert max(len(line) for line in r.stdout.splitlines()) <= width
