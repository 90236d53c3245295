"""docs/results/frontier-2026/: the combined README and figure, generated from the records, and
the shipped `frontier-2026` reference packed from them (`make frontier-2026`).

- README.md: one table of every row (the zoo-frontier's, place-deltanet's and each finished
  placement under docs/results/frontier-2026/NAME/), every comparison the placements' claims
  settled, and the placements not finished with their runs so far;
- frontier.png: frontier against recurrent state per layer (log2), every row;
- recall_lab/experiments/reference_data/frontier-2026.tar.xz: the zoo-frontier's records plus
  the finished placements' cells (`reference.pack_combined`).

    python scripts/frontier_2026.py            # write all three
    python scripts/frontier_2026.py --check    # exit 1 if the README differs from its records
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recall_lab.experiments import combined as cb  # noqa: E402
from recall_lab.experiments.reference import (  # noqa: E402
    open_reference,
    pack_combined,
    shipped_archive,
)

FOLDER = ROOT / "docs" / "results" / "frontier-2026"
PLACE_DELTANET = ROOT / "docs" / "results" / "place-deltanet"
LR_WINDOW = ROOT / "docs" / "results" / "lr-window"  # the measured lr windows (window.json)
# the five families, in the order of the table, with the kwargs at 256 numbers per layer
FAMILIES = {
    "kda": '{"num_heads": 4, "expand_k": 0.25}',
    "gated-deltaproduct": '{"num_heads": 4, "expand_k": 0.25}',
    "rwkv7": '{"head_size": 4}',
    "mamba3": '{"expand": 2, "d_state": 2, "rope_fraction": 1.0}',
    # its state grows as log L: the README gives its count at every table (note_for)
    "log-linear-mamba2": '{"expand": 1, "d_state": 1, "headdim": 16}',
}
PLACE_TOML_HEAD = """\
# How `recall-lab place --reference frontier-2026` runs its protocol: the zoo-frontier's
# (zoo-frontier.toml beside this file, its lr pilot's rule and its cut rule), against the
# zoo-frontier's rows plus the placed 2025-26 families (docs/results/frontier-2026/).
"""


# what the table says beside a family's estimate (a "log L" family's state: note_for)
NOTES = {"kda": "all four tables: begun before these estimates, its claims registered for them"}
GOAL_MIN = 90  # minutes a placement may take on 2 workers, else --tables 4,8,16


def estimate(name: str) -> dict | None:
    """`place --dry-run`'s estimate for a family (docs/results/frontier-2026/dry-run/NAME.txt):
    its wall time on 1 worker in minutes and the load average its probes were timed at."""
    path = FOLDER / "dry-run" / f"{name}.txt"
    if not path.is_file():
        return None
    text = " ".join(path.read_text().split())
    m = re.search(r"estimated wall time: (?:(\d+)h)?(\d+)m on 1 worker", text)
    load = re.search(r"timed at load average ([0-9.]+)", text)
    if m is None:
        return None
    return {"minutes": int(m.group(1) or 0) * 60 + int(m.group(2)),
            "load": float(load.group(1)) if load else None}


def tables_flag(name: str) -> str:
    """" --tables 4,8,16" where the rule censors the family's placement (not kda: begun first)."""
    est = estimate(name)
    censor = name != "kda" and est is not None and est["minutes"] / 2 > GOAL_MIN
    return " --tables 4,8,16" if censor else ""


def _hm(minutes: float) -> str:
    return f"{int(minutes // 60)} h {int(minutes % 60):02d} min"


def note_for(name: str, entry: cb.Entry | None) -> str:
    """The note beside a family's kwargs: NOTES', and for a state that grows as log L its count
    at the protocol's longest table (the one these kwargs were chosen by: the count nearest 256
    there) and at the longest table its placement ran (its row's), named as one layer's."""
    notes = [NOTES[name]] if name in NOTES else []
    if entry is not None and len(entry.lengths) > 1:
        n_max, t_max = entry.lengths[max(entry.lengths)]
        notes.append(
            f"its state grows as log L: {n_max:,.0f} numbers per layer at {t_max} tokens (the "
            f"protocol's longest table), the count nearest 256 there at d_model 64 (64 x expand "
            f"x levels x d_state); its row below gives {entry.state['text']}, the same layer "
            "at the longest table its placement ran")
    return f" ({'; '.join(notes)})" if notes else ""


def placements() -> dict[str, Path]:
    return {name: FOLDER / name for name in FAMILIES if (FOLDER / name).is_dir()}


def render() -> tuple[str, list[cb.Entry], dict]:
    entries, names = cb.reference_entries()
    finished, unfinished = [], {}
    deltanet = cb.placement_entry(PLACE_DELTANET)
    if deltanet is not None:
        deltanet.source = "place-deltanet"
        finished.append(deltanet)
    for name, folder in placements().items():
        e = cb.placement_entry(folder)
        if e is None:
            unfinished[name] = cb.progress(folder)
        else:
            e.source = name
            finished.append(e)
    rows = entries + finished
    done = [n for n in FAMILIES if n in placements() and n not in unfinished]
    lines = [
        "# The field of 2026 on the frontier",
        "",
        "<!-- generated by scripts/frontier_2026.py from the records below (make frontier-2026); "
        "edit the script, not this file -->",
        "",
        "Where the 2025-26 families stand on the zoo-frontier's recall-against-state axis, at 256 "
        "numbers of recurrent state per layer, each placed with `recall-lab place` against the "
        "zoo-frontier's protocol (MQAR at 4, 8, 16 and 32 pairs, d_model 64, 2 layers, 10 seeds "
        "per table, solved = test accuracy >= 0.95, the lr pilot's and the cut rule's written "
        "rules), with its claims recorded before its first run.",
        "",
        f"**Placements finished: {len(done)} of {len(FAMILIES)}**"
        + (f" ({', '.join(f'`{n}`' for n in done)})" if done else "") + ".",
        "",
        "`place --dry-run`'s estimate (full step budgets, no cell stopped early: an upper "
        "bound; `dry-run/NAME.txt` holds each output) decides the tables: a family whose "
        f"estimate on 2 workers is above {GOAL_MIN} minutes is placed with `--tables 4,8,16` "
        "and censored verdicts. The estimates were timed while another sweep ran on the 2 "
        "cores (load average in the table), so they overstate a quiet machine's.",
        "",
        "| family | kwargs at d_model 64 | estimate on 2 workers (load) | placement |",
        "| --- | --- | --- | --- |",
    ]
    for name, kw in FAMILIES.items():
        if name in unfinished:
            p = unfinished[name]
            status = (f"[not finished](./{name}/README.md): {p['claims']} claims recorded "
                      f"{p['recorded']}; {p['done']} of {p['planned']} cell runs; no verdict")
        elif name in placements():
            e = next(x for x in finished if x.source == name)
            status = (f"[finished](./{name}/README.md): frontier "
                      f"{cb.frontier_text(e.frontier)}")
        else:
            status = "not started"
        est = estimate(name)
        est_text = "-" if est is None else (f"{_hm(est['minutes'] / 2)} ({est['load']:g})")
        note = note_for(name, next((x for x in finished if x.source == name), None))
        lines.append(f"| `{name}` | `{kw}`{note} | {est_text} | {status} |")
    lines += [
        "",
        "## Every row",
        "",
        "Seeds solved with a Wilson 95% interval; \"stopped\": a placement's cell stopped "
        "launching seeds once its verdicts were settled; \"-\": not run (the cut rule). Placed "
        "rows in bold. The zoo-frontier's rows are its 570 archived runs; place-deltanet is "
        "DeltaNet's zoo row placed again from scratch. \"lr\" is the lr each row ran at (its "
        "pilot's pick, one seed); \"lr window\" the lrs whose seeds solved are not separable "
        "from the best lr's, measured by `recall-lab lr-window` at one table "
        "([the lr windows](../lr-window/README.md)), or \"not measured\".",
        "",
        *cb.table_lines(rows, names, cb.windows_from(LR_WINDOW)),
        "",
        "State per layer: each layer's count where the layers differ, and a count that grows "
        "with the sequence as log L with its length and its count at every table. "
        + cb.layers_note(rows),
        "",
        "![frontier against recurrent state per layer](frontier.png)",
        "",
        *window_verdict_lines(),
        "",
        "## What the placements' claims settled",
        "",
        "Each placement's claims compare it with the reference rows nearest below and above it "
        "in recurrent state per layer (seeds solved per table: more, fewer by a one-sided "
        "Fisher test at 0.05, or not separable; the frontier: beyond, short of, or not "
        "separable from each). Claims still open are not listed.",
        "",
        *cb.settled_lines(finished),
        "",
        "## Beyond plain MQAR: overwriting",
        "",
        "At 256 numbers per layer plain MQAR does not separate the delta-rule families. "
        "[The overwrite frontier](../overwrite/README.md) asks whether overwriting does: "
        "zoology's forgetting MQAR (some keys written twice, the last value asked for) at 8 "
        "live keys with 12 and 16 writes, beside the plain 8- and 16-pair tables, with the "
        "additive and decaying controls and the delta family, its claims recorded before its "
        "first run. A new mixer is placed on those tables with `recall-lab place NAME "
        "--reference overwrite-2026`.",
        "",
        "## Reproduce",
        "",
        "```bash",
        *[f"recall-lab place {n} --kwargs '{kw}' --workers 2{tables_flag(n)}"
          for n, kw in FAMILIES.items()],
        "python scripts/frontier_2026.py   # this README, frontier.png, the shipped reference",
        "```",
        "",
        "Placing a new mixer against these rows: `recall-lab place NAME --reference "
        "frontier-2026` (docs/place.md).",
        "",
    ]
    return "\n".join(lines), rows, names


def window_verdict_lines() -> list[str]:
    """The contested 16-pair verdicts across the lr window (lr_window_verdicts, from the
    committed windows), one line each."""
    from recall_lab.experiments import lr_window_verdicts as lv

    spec = lv.load(ROOT / "experiments" / "lr-window" / "contested-16.toml")
    vs = lv.verdicts(spec, lv.read_answers(spec, LR_WINDOW))
    out = ["**Across the lr window** ([the lr windows](../lr-window/README.md)): the placements' "
           "verdicts that rested on an lr at the edge of the pilot's grid, re-tested on fresh "
           "seeds at each row's best lr:", ""]
    out += [f"- {v.claim}: registered \"{v.registered}\", **{v.verdict}** ({v.detail})."
            for v in vs]
    budget = LR_WINDOW / "double-budget-16" / "report.json"
    if budget.is_file():
        out += ["", lv.budget_summary(spec, json.loads(budget.read_text())).rstrip(".") +
                " ([Budget beside lr](../lr-window/README.md#budget-beside-lr))."]
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()
    text, rows, names = render()
    readme = FOLDER / "README.md"
    if args.check:
        if readme.read_text() != text:
            print(f"{readme} differs from its records: run python scripts/frontier_2026.py",
                  file=sys.stderr)
            return 1
        return 0
    readme.write_text(text)
    cb.figure(rows, names, FOLDER / "frontier.png",
              "the zoo-frontier's rows and the placed 2025-26 families")
    finished = {n: f for n, f in placements().items() if (f / cb.ANSWER).is_file()}
    with open_reference() as base:
        n = pack_combined(base, finished, PLACE_TOML_HEAD + _protocol_body(base),
                          shipped_archive("frontier-2026"))
    print(f"wrote {readme}, {FOLDER / 'frontier.png'} and {shipped_archive('frontier-2026')} "
          f"({n} placed runs)")
    return 0


def _protocol_body(base: Path) -> str:
    """The zoo-frontier's place.toml without its two header comment lines."""
    lines = (Path(base) / "place.toml").read_text().splitlines(keepends=True)
    return "".join(lines[2:])


if __name__ == "__main__":
    raise SystemExit(main())
