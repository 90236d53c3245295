"""The combined frontier (docs/results/frontier-2026/): a placement's cells packed into a
reference beside the base's rows (`reference.pack_combined`), the shipped `frontier-2026`
reference holding exactly the zoo-frontier's records and the finished placements' cells, and the
combined README equal to what `scripts/frontier_2026.py` renders from the records."""

import json
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from recall_lab.experiments import combined as cb
from recall_lab.experiments import place as pl
from recall_lab.experiments.reference import (
    open_reference,
    pack_combined,
    read_protocol,
    shipped_archive,
)
from recall_lab.experiments.state import LayerState
from recall_lab.generators.errors import RecallLabError

from .place_fixtures import make_reference

ROOT = Path(__file__).resolve().parents[2]
FOLDER = ROOT / "docs" / "results" / "frontier-2026"


def _placement(folder: Path, ref: Path, solved: dict[float, int], batch: int | None = None):
    """A finished placement of GLA with 2 heads in `folder`: its cells' records (8 seeds per
    table, `solved[table]` of them solved) and an answer.json."""
    protocol = read_protocol(ref)
    exp = pl.cells_experiment(protocol, pl.mixer_table("gla", {"num_heads": 2}), [2.0, 3.0],
                              protocol.seeds, 3e-3)
    entries = []
    for run in exp.runs:
        cfg = run.config.to_json()
        if batch is not None:
            cfg["train"]["batch_size"] = batch
        size = float(cfg["task"]["levels"][0][1])
        acc = 1.0 if cfg["train"]["seed"] < solved[size] else 0.3
        d = folder / "cells" / run.name
        d.mkdir(parents=True)
        (d / "config.json").write_text(json.dumps(cfg))
        (d / "summary.json").write_text(json.dumps({"steps": 6, "stopped_at": 6, "best_step": 6,
                                                    "valid": {"acc": acc},
                                                    "test": {"acc": acc}}))
        entries.append({"name": run.name, "hash": run.hash, "status": "done", "config": cfg})
    (folder / "cells" / "sweep.json").write_text(json.dumps({"experiment": "cells",
                                                              "runs": entries}))
    return folder


def test_a_placement_packed_into_a_reference_becomes_a_row_beside_the_base_rows(tmp_path):
    ref = make_reference(tmp_path / "ref")
    placed = _placement(tmp_path / "gla2", ref, {2.0: 7, 3.0: 2})
    dest = tmp_path / "combined.tar.xz"
    head = "# the combined protocol\n"
    assert pack_combined(ref, {"gla2": placed}, head + (ref / "place.toml").read_text(),
                         dest) == 16
    out = tmp_path / "out"
    with tarfile.open(dest, "r:xz") as tar:
        tar.extractall(out, filter="data")
    assert (out / "place.toml").read_text().startswith(head)
    protocol = read_protocol(out)
    assert protocol == read_protocol(ref)  # the base's protocol, unchanged
    assert pl.protocol_id(out, protocol) != pl.protocol_id(ref, protocol)  # its own folders
    base_rows, _ = pl.reference_rows(ref, protocol)
    rows, _ = pl.reference_rows(out, protocol)
    counts = {r.label: {s: (g.solved.k, g.solved.n) for s, g in r.cells.items()} for r in rows}
    for r in base_rows:
        assert counts.pop(r.label) == {s: (g.solved.k, g.solved.n) for s, g in r.cells.items()}
    assert counts == {"gla / num_heads=2": {2.0: (7, 8), 3.0: (2, 8)}}
    # a placement that did not run the base's protocol is refused
    other = _placement(tmp_path / "other", ref, {2.0: 1, 3.0: 1}, batch=8)
    with pytest.raises(RecallLabError, match="did not run the tiny-frontier protocol"):
        pack_combined(ref, {"other": other}, "", tmp_path / "x.tar.xz")


def test_the_shipped_frontier_2026_holds_the_zoo_frontier_and_the_finished_placements():
    with tarfile.open(shipped_archive("frontier-2026"), "r:xz") as tar:
        names = set(tar.getnames())
        index = json.loads(tar.extractfile("sweep.json").read())
        place_toml = tar.extractfile("place.toml").read().decode()
    zoo = json.loads((ROOT / "docs" / "results" / "zoo-frontier" / "runs" / "sweep.json")
                     .read_text())["runs"]
    want = [e["name"] for e in zoo]
    for folder in sorted(FOLDER.iterdir()):
        if (folder / cb.ANSWER).is_file():
            cells = json.loads((folder / "cells" / "sweep.json").read_text())["runs"]
            want += [f"{folder.name}-{e['name']}" for e in cells
                     if (folder / "cells" / e["name"] / "summary.json").is_file()]
    assert sorted(e["name"] for e in index["runs"]) == sorted(want)
    assert {f"{n}/summary.json" for n in want} <= names
    assert not any(n.endswith((".safetensors", ".pt")) for n in names)
    assert "frontier-2026" in place_toml
    with open_reference("frontier-2026") as a, open_reference() as b:
        assert read_protocol(a) == read_protocol(b)


def test_the_combined_readme_equals_its_records():
    r = subprocess.run([sys.executable, str(ROOT / "scripts" / "frontier_2026.py"), "--check"],
                       capture_output=True, text=True, cwd=ROOT)
    assert r.returncode == 0, r.stderr


def test_a_log_l_row_meets_a_new_mixer_at_its_count_at_each_table():
    """log-linear Mamba-2's row in frontier-2026 keeps its count per table (384, 448, 512 at 18,
    34, 66 tokens): a mixer of 420 per layer meets it as the nearest row above at 8 pairs,
    and not at 4 pairs, where its 384 lies below linear attention's 390."""
    with open_reference("frontier-2026") as folder:
        protocol = read_protocol(folder)
        rows, _ = pl.reference_rows(folder, protocol)
    ll = next(r for r in rows if r.label.startswith("log-linear-mamba2"))
    assert {s: st.numbers for s, st in ll.states.items()} == {4.0: 384, 8.0: 448, 16.0: 512}
    assert ll.state.growth == "log L" and ll.state.numbers == 512
    mine = LayerState(420.0, "constant")
    assert ll in pl.neighbours(rows, mine, 8.0)
    assert ll not in pl.neighbours(rows, mine, 4.0)


def _row(label: str, numbers: float, frontier: float, lo: float, hi: float,
         source: str = "reference") -> cb.Entry:
    return cb.Entry(label, source, {"numbers": numbers, "growth": None, "text": ""}, 1e-3, {},
                    {"frontier": frontier, "range": [lo, hi]})


def test_the_figure_spreads_rows_at_one_state_only_where_their_ranges_meet():
    rows = [_row("a", 256, 16, 16, 32), _row("b", 256, 16, 16, 32),
            _row("c", 256, 8, 8, 8, source="placed-c"), _row("d", 256, 8, 8, 8),
            _row("e", 512, 8, 4, 16), _row("f", 512, 16, 16, 32), _row("g", 1024, 4, 4, 4)]
    xs = cb.positions(rows)
    assert xs["g"] == 1024  # alone at its state
    # a and b meet (16-32), c and d meet (8), and the two pairs are apart: each pair is
    # spread about 256 by the same dodge, reference rows left of placed ones
    assert xs["a"] * xs["b"] == pytest.approx(256 ** 2) and xs["a"] < xs["b"]
    assert xs["d"] * xs["c"] == pytest.approx(256 ** 2) and xs["d"] < xs["c"]
    assert xs["a"] == pytest.approx(xs["d"]) and xs["a"] < 256
    # e's range (4-16) touches f's (16-32) at 16: they are spread too
    assert xs["e"] < 512 < xs["f"]


def test_every_row_has_a_style_of_its_own_and_no_family_shares_a_colour():
    """The figure's styles: no two rows share colour and marker, no two rows share a colour
    (a family's rows are shades of its hue), and the placed rows' colours and markers are
    their own."""
    rows = [_row(f"{fam} / x={i}", 2 ** (7 + i), 8, 8, 8) for fam in
            ("based", "deltanet", "gated-deltanet", "gla", "linear-attn", "mamba2", "other")
            for i in range(3)]
    rows += [_row(f"placed{i}", 256, 16, 16, 16, source=f"p{i}") for i in range(6)]
    st = cb.styles(rows)
    assert set(st) == {r.label for r in rows}
    colours = [c for c, *_ in st.values()]
    assert len(set(colours)) == len(colours)  # no colour repeats
    assert len({(c, m) for c, m, *_ in st.values()}) == len(rows)
    placed = {st[r.label][1] for r in rows if r.placed}
    assert len(placed) == 6 and not placed & {st[r.label][1] for r in rows if not r.placed}


def test_the_state_axis_is_focused_and_the_rows_beyond_it_stand_apart():
    inside = _row("a", 4096, 32, 32, 32)
    hybrid = _row("hybrid", 136_224, 32, 16, 32)
    attention = cb.Entry("attn", "reference", {"numbers": None, "growth": "L",
                                               "text": "grows as L"}, 1e-3, {},
                         {"frontier": 32, "range": [32, 32]})
    assert cb.FOCUS == (64, 8192)
    assert [cb._beyond(e) for e in (inside, hybrid, attention)] == [False, True, True]


def test_a_log_l_state_is_given_at_every_table_and_layers_never_as_their_mean():
    """The combined table's state cell: a log L row's count with its length and its counts at
    every table of the protocol in one cell; a row whose layers differ with each layer's count.
    The committed README follows: no state cell is a fraction, and log-linear Mamba-2's gives
    its count at each of the protocol's four tables."""
    e = _row("loglin", 512, 8, 4, 16)
    e.state = {"numbers": 512.0, "growth": "log L", "text": "512 at 66 tokens (log L)",
               "length": 66}
    e.lengths = {4.0: (384.0, 18), 8.0: (448.0, 34), 16.0: (512.0, 66), 32.0: (576.0, 130)}
    text = cb.state_text(e)
    assert text.startswith("512 at 66 tokens (log L)")
    assert "384 / 448 / 512 / 576 at 18 / 34 / 66 / 130 tokens" in text
    readme = (FOLDER / "README.md").read_text()
    head = "| row | from | state per layer |"
    table = readme[readme.index(head):].split("\n\n")[0].splitlines()[2:]
    states = [line.split(" | ")[2] for line in table]
    assert states and not any(re.search(r"\d\.\d", s) for s in states)  # no mean as a count
    loglin = next(s for line, s in zip(table, states, strict=True) if "log-linear" in line)
    assert re.search(r"one layer, at each table: (\d+ / ){3}\d+ at (\d+ / ){3}\d+ tokens", loglin)
    based = [s for line, s in zip(table, states, strict=True) if "`based /" in line]
    assert based and all("(layer 1) / " in s and "(layer 2)" in s for s in based)


def test_the_window_column_reads_each_measured_window_by_row(tmp_path):
    (tmp_path / "rwkv7").mkdir()
    answer = {"label": "deltanet / num_heads=4 / expand_k=0.25", "table_name": "16 pairs",
              "best": 1e-3, "solved_any": True, "window": [1e-3, 3e-3], "width_decades": 0.477,
              "edge": False, "contiguous": True, "settled": True}
    (tmp_path / "rwkv7" / "window.json").write_text(json.dumps(answer))
    windows = cb.windows_from(tmp_path)
    # the zoo row spells its options in another order: the same row
    assert windows == {"deltanet / expand_k=0.25 / num_heads=4":
                       "0.001 to 0.003 (0.5 decades) at 16 pairs"}
    entries, names = cb.reference_entries()
    lines = cb.table_lines(entries, names, windows)
    assert "| lr window |" in lines[0] and lines[1].count("---") == len(names) + 6
    row = next(x for x in lines if x.startswith("| `deltanet / expand_k=0.25 / num_heads=4`"))
    assert "| 0.001 | 0.001 to 0.003 (0.5 decades) at 16 pairs |" in row
    other = next(x for x in lines if x.startswith("| `transformer`"))
    assert "| not measured |" in other
    assert cb.table_lines(entries, names)[0] == lines[0].replace("lr window | ", "")


def test_a_row_with_windows_at_two_tables_reads_both_by_table_and_names_the_exploratory(tmp_path):
    """A window with fewer than 5 seeds per lr is exploratory (few seeds cannot separate lrs:
    3/3 against 0/3 is one-sided Fisher p = 0.05, not below it) and says so."""
    base = {"label": "deltanet / num_heads=4 / expand_k=0.25", "solved_any": True,
            "edge": False, "contiguous": True, "settled": True}
    small = {**base, "table": 32.0, "table_name": "32 pairs", "best": 3e-3, "seeds": [0, 1, 2],
             "window": [1e-3, 3e-3, 1e-2], "width_decades": 1.0}
    full = {**base, "table": 16.0, "table_name": "16 pairs", "best": 1e-3,
            "seeds": list(range(10)), "window": [1e-3, 3e-3], "width_decades": 0.477}
    for name, answer in (("a-32", small), ("b-16", full)):  # the 32-pair folder sorts first
        (tmp_path / name).mkdir()
        (tmp_path / name / "window.json").write_text(json.dumps(answer))
    assert cb.windows_from(tmp_path) == {"deltanet / expand_k=0.25 / num_heads=4":
                                         "0.001 to 0.003 (0.5 decades) at 16 pairs; "
                                         "0.001 to 0.01 (1.0 decades) at 32 pairs "
                                         "(exploratory: at most 3 seeds per lr)"}
