"""docs/results/leaderboard.md: every family at equal recurrent state, generated from the
records (`make leaderboard`).

Rows come from two kinds of record:
- the zoo-frontier archive the lab ships (recall_lab/experiments/reference_data/
  zoo-frontier.tar.xz): its rows as `place` reads them (`place.reference_rows`: seeds solved per
  table at each row's best lr, its state per layer);
- each committed placement's record.json (scripts/placement_records.py): seeds solved per table
  with Wilson intervals, its frontier, lr, provenance, and "verified" where a `recall-lab
  verify` of it is committed beside its folder (verify-*-NAME/verify.json naming its content
  hash).
Rows are grouped by state band: a row's state per layer s belongs to band b of 128, 256, 512,
2,048, 4,096 when b/sqrt(2) <= s < b*sqrt(2) (nearest on a log scale); states outside every
band, and states that grow with the sequence, are listed after the bands.

docs/results/leaderboard.json holds the rows as data; the page is rendered from it. Reading
the archive takes tens of seconds, so a check of the page alone (`--check`) compares the page
with the rows of leaderboard.json, and the placements' rows with their records;
tests/experiments/test_leaderboard.py does that, and (marked slow) the archive's rows too.

    python scripts/leaderboard.py           # rewrite leaderboard.json and leaderboard.md
    python scripts/leaderboard.py --check   # exit 1 if either differs from the records
"""

from __future__ import annotations

import argparse
import json
import math
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
PAGE = RESULTS / "leaderboard.md"
DATA = RESULTS / "leaderboard.json"
BANDS = (128, 256, 512, 2048, 4096)
TABLES = (4.0, 8.0, 16.0, 32.0)
ARCHIVE = "recall_lab/experiments/reference_data/zoo-frontier.tar.xz"


def placements() -> list[Path]:
    """The committed placement records (other results keep other record.json files)."""
    out = []
    for p in sorted(RESULTS.glob("**/record.json")):
        data = json.loads(p.read_text())
        if str(data.get("evaluation_id", "")).startswith("recall-lab/place/"):
            out.append(p.parent)
    return out


def band(state: float | None) -> int | None:
    if state is None:
        return None
    return next((b for b in BANDS if b / math.sqrt(2) <= state < b * math.sqrt(2)), None)


def _git_short(path: str) -> str | None:
    out = subprocess.run(["git", "log", "-1", "--format=%H", "--", path], capture_output=True,
                         text=True, cwd=ROOT)
    return out.stdout.strip()[:9] or None


def _rate(k: int, n: int, lo: float, hi: float) -> str:
    return f"{k}/{n} [{lo:.2f}, {hi:.2f}]"


def zoo_rows() -> list[dict]:
    """The zoo-frontier archive's rows (slow: unpacks and reads 570 runs)."""
    from recall_lab.experiments.place import reference_rows, row_frontier
    from recall_lab.experiments.reference import open_reference, read_protocol

    commit = _git_short(ARCHIVE)
    out = []
    with open_reference(None) as ref:
        protocol = read_protocol(ref)
        rows, _ = reference_rows(ref, protocol)
        for r in rows:
            f = row_frontier(list(r.cells.values()))
            out.append({
                "row": r.label, "source": "zoo-frontier archive",
                "state": r.state.numbers if r.state else None,
                "state_text": r.state.text() if r.state else "-",
                "grows": bool(r.state and r.state.grows), "lr": r.lr,
                "cells": {f"{s:g}": _rate(g.solved.k, g.solved.n, g.solved.lo, g.solved.hi)
                          for s, g in sorted(r.cells.items()) if g.solved.n},
                "frontier": f, "commit": commit, "machine": "not recorded",
                "verified": None})
    return out


def verified(folder: Path, record: dict) -> str | None:
    """"k/k (DATE, CPU)" from a committed verify of this record, if any."""
    found = []
    for v in sorted(folder.parent.glob(f"verify-*-{folder.name}/verify.json")):
        data = json.loads(v.read_text())
        if data.get("content_hash") == record["dedupe_identity"]["content_hash"]:
            cpu = (data.get("machine") or {}).get("cpu_model") or "CPU not recorded"
            found.append(f"{data['reproduced']}/{data['of']} ({data['when'][:10]}, {cpu})")
    return "; ".join(found) or None


def placement_rows() -> list[dict]:
    from recall_lab.experiments.records import read_record

    out = []
    for folder in placements():
        r = read_record(folder)  # schema and content hash checked
        cells = {}
        for e in r["evaluation_results"]:
            if e.get("status") == "cut":
                cells[f"{e['table']:g}"] = "cut"
                continue
            ci = e["score_details"]["uncertainty"]["confidence_interval"]
            cells[f"{e['table']:g}"] = _rate(len(e["seeds_solved"]), len(e["seeds_run"]),
                                             ci["lower"], ci["upper"])
        m = r["machine"]
        out.append({
            "row": r["model_info"]["name"],
            "source": f"placement {folder.relative_to(RESULTS)}",
            "state": r["state"]["per_layer"], "state_text": r["state"]["text"],
            "grows": r["state"]["class"] == "grows", "lr": r["lr"]["value"], "cells": cells,
            "frontier": r["frontier"], "commit": (r["eval_library"]["commit"] or "")[:9] or None,
            "machine": m["cpu_model"] or "not recorded", "verified": verified(folder, r)})
    return out


def _key(row: dict) -> tuple:
    return (-row["frontier"]["frontier"], row["row"], row["source"])


def render(rows: list[dict]) -> str:
    from recall_lab.experiments.place import frontier_text

    head = ("| row (state per layer) | source | lr | "
            + " | ".join(f"{t:g} pairs" for t in TABLES)
            + " | frontier [range] | provenance | verified |")
    rule = "|" + " --- |" * (len(TABLES) + 6)

    def line(r: dict) -> str:
        lr = "-" if r["lr"] is None else f"{r['lr']:g}"
        cells = [r["cells"].get(f"{t:g}", "-") for t in TABLES]
        prov = f"{r['commit'] or '-'}, machine {r['machine']}"
        return (f"| `{r['row']}` ({r['state_text']}) | {r['source']} | {lr} | "
                + " | ".join(cells) + f" | {frontier_text(r['frontier'])} | {prov} | "
                + f"{r['verified'] or '-'} |")

    def para(text: str) -> str:
        return textwrap.fill(text, 100, break_long_words=False, break_on_hyphens=False)

    lines = [
        "# Leaderboard: recall against recurrent state, every family at equal state", "",
        "<!-- generated by scripts/leaderboard.py from the records (make leaderboard); edit the "
        "script, not this page -->", "",
        para("MQAR at 4, 8, 16 and 32 key-value pairs (2,500 steps, 5,000 at 32), d_model 64, 2 "
        "layers, the zoo-frontier's protocol (docs/place.md). A cell is seeds solved (test "
        "accuracy >= 0.95) with a Wilson 95% interval; the frontier is the largest table solved "
        "in at least half the seeds, with the range the seeds' intervals allow. lr: the row's "
        "lr by the pilot's rule (an lr window is not measured for these rows). Provenance: the "
        "commit of the records (the archive's, or the one that committed the placement) and the "
        "machine where the record names it. Verified: a `recall-lab verify` of the record, "
        "committed beside it, with its outcomes reproduced."), "",
        para("Rows at one state band are comparable at equal state; rows in different bands "
             "are not. \"-\": not run; \"cut\": the cut rule left the table out."), "",
        "![frontier against recurrent state per layer](frontier-2026/frontier.png)", ""]
    banded = {b: [] for b in BANDS}
    other = []
    for r in rows:
        b = None if r["grows"] else band(r["state"])
        (banded[b] if b is not None else other).append(r)
    for b in BANDS:
        lines += [f"## {b:,} numbers per layer", "", head, rule]
        lines += [line(r) for r in sorted(banded[b], key=_key)] or []
        lines.append("")
    lines += ["## Other states (between or beyond the bands, or growing with the sequence)", "",
              head, rule] + [line(r) for r in sorted(other, key=_key)] + [""]
    return "\n".join(lines)


def build(zoo: list[dict] | None = None) -> dict:
    return {"zoo": zoo if zoo is not None else zoo_rows(), "placements": placement_rows()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="exit 1 if the page or data differs")
    args = ap.parse_args(argv)
    if args.check:  # the page against the data, the placements against their records
        data = json.loads(DATA.read_text())
        want = build(zoo=data["zoo"])
        bad = [p for p, ok in ((DATA, want == data),
                               (PAGE, PAGE.read_text() == render(want["zoo"]
                                                                 + want["placements"])))
               if not ok]
        for p in bad:
            print(f"{p.relative_to(ROOT)} differs from the records: run make leaderboard")
        return 1 if bad else 0
    data = build()
    DATA.write_text(json.dumps(data, indent=2) + "\n")
    PAGE.write_text(render(data["zoo"] + data["placements"]))
    print(f"wrote {PAGE.relative_to(ROOT)} and {DATA.relative_to(ROOT)} "
          f"({len(data['zoo'])} archive rows, {len(data['placements'])} placements)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
