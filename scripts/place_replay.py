"""Replay `place`'s settlement over archived outcomes, training nothing: which runs a placement
of a zoo-frontier row would launch, round by round as `place` launches them, taking the archived
run of the same config (same hash) as each run's outcome, and how long its rounds would take on
`--workers` workers from the archived runs' training times (upper bounds: they ran beside other
work). docs/place.md quotes it for `deltanet` with 4 heads of key width 4:

    PYTHONPATH=. python scripts/place_replay.py deltanet '{"num_heads": 4, "expand_k": 0.25}'
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from recall_lab.experiments import place as pl
from recall_lab.experiments.reference import open_reference, read_protocol

ZOO = Path(__file__).resolve().parents[1] / "docs" / "results" / "zoo-frontier" / "runs"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("mixer")
    ap.add_argument("kwargs", nargs="?", default="{}")
    ap.add_argument("--lr", type=float, default=1e-3, help="the lr the pilot picked")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args()
    kwargs = json.loads(args.kwargs)
    archived = {p.name.rsplit("-", 1)[1]: p for p in ZOO.iterdir() if p.is_dir()}

    def summary(h: str) -> dict:
        return json.loads((archived[h] / "summary.json").read_text())

    with open_reference() as ref:
        protocol = read_protocol(ref)
        rows, groups = pl.reference_rows(ref, protocol)
        table = pl.mixer_table(args.mixer, kwargs)
        label = pl.mixer_row_label(args.mixer, kwargs)
        sizes = [t.size for t in protocol.tables]
        exp = pl.cells_experiment(protocol, table, sizes, protocol.seeds, args.lr)
        missing = [r.name for r in exp.runs if r.hash not in archived]
        if missing:
            raise SystemExit(f"error: {len(missing)} runs have no archived twin, e.g. "
                             f"{missing[0]}")
        state = pl.run_state(exp.runs[-1].config.to_json())
        claims = pl.make_claims(label, state, rows, sizes, protocol)
        done: set[str] = set()
        tried: set[tuple[float, int]] = set()
        rounds, wall = 0, 0.0
        while True:
            mine = pl.records(exp, Path("/nonexistent"))
            for r in mine:
                h = r.name.rsplit("-", 1)[1]
                if h in done:
                    r.status, r.folder, r.summary = "done", archived[h], summary(h)
            cells, verdicts, _ = pl.evaluate(mine, groups, claims, protocol, label)
            batch = pl.next_round(cells, tried, args.workers)
            if not batch:
                break
            rounds += 1
            for seeds, group_sizes in batch.items():  # one sweep (one pool) per seed group
                free = [0.0] * args.workers
                for run in exp.runs:
                    size = float(run.config.task.levels[0][1])
                    if size in group_sizes and run.config.train.seed in seeds:
                        tried.add((size, run.config.train.seed))
                        done.add(run.hash)
                        i = free.index(min(free))
                        free[i] += summary(run.hash)["wall_s_this_session"]
                wall += max(free)
        every = sum(summary(r.hash)["wall_s_this_session"] for r in exp.runs)
        ran = sum(summary(h)["wall_s_this_session"] for h in done)
        print(f"{label}: recurrent state {state.text()} per layer; {rounds} rounds; trains "
              f"{len(done)} of {len(exp.runs)} runs, {ran:.0f} of {every:.0f} s of training; "
              f"rounds on {args.workers} workers: {wall:.0f} s")
        for size, c in sorted(cells.items()):
            print(f"  {size:g}: {c.group.solved.text() if c.group else '-'}, {c.status}: "
                  f"{c.reason}")
        for v in verdicts:
            print(f"  {v['verdict']}{' (settled)' if v.get('settled') else ''}: {v['claim']}")


if __name__ == "__main__":
    main()
