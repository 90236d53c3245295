"""The README's numbers, generated from committed records (`make readme-numbers`).

Two sections of README.md, each between marker comments, are written here and nowhere else:
- `tour`: the tour's commands with their wall times, and the numbers they gave, from
  docs/results/tour/record.json (written by `scripts/tour.py`);
- `results`: one line per experiment with a report in docs/results/<name>/report.json: its
  runs, the seeds solved of its lowest and highest group with Wilson 95% intervals, its
  claims counted by verdict and by registration status (pre-registered, on shared runs that
  predate the record, written after runs started), and the held-out overlap its archived runs
  recorded, linking to its results README.

and one section of docs/results/index.md:
- `overlap`: the held-out overlap (`summary.json`'s `held_out_in_training`) of every committed
  experiment, measured from its records, "not recorded" where its records are not committed.

    python scripts/readme_numbers.py           # rewrite the sections
    python scripts/readme_numbers.py --check   # exit 1 (and say which file) if one differs

A number without a record is not quoted. Standard library only.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import textwrap
from pathlib import Path
from statistics import NormalDist

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
RESULTS = ROOT / "docs" / "results"
INDEX = RESULTS / "index.md"
# results without training runs: no held-out overlap to measure
NOT_TRAINING = ("bench", "decode", "field-audit", "gpu", "memory-theory", "tour",
                "zoology-fidelity")
# where a result folder keeps its run records: a sweep's archive, a placement's cells and pilot
RECORDS = ("runs", "cells", "pilot")
TOUR = RESULTS / "tour" / "record.json"
TIERS = RESULTS / "tests" / "record.json"
WIDTH = 100

# a claim's registration status in report.json -> how the README counts it
STATUS = {"pre-registered": "pre-registered", "time only": "registered by time only",
          "not recorded": "on shared runs", "after runs": "written after runs"}


def marker(name: str, end: bool = False) -> str:
    return f"<!-- readme-numbers:{name} {'end' if end else 'begin'} (make readme-numbers) -->"


def wall(seconds: float) -> str:
    return f"{seconds:.0f} s" if seconds < 90 else f"{seconds / 60:.0f} min"


def tour_section(record: dict) -> str:
    """The tour's code block (commands, what they do, wall times) and the numbers paragraph."""
    lines = record["lines"]
    pad = max(len(x["cmd"]) for x in lines) + 2
    block = ["```bash"]
    for x in lines:
        note = (f"{wall(x['wall_s'])}: " if x.get("timed") else "") + x["what"]
        block.append(f"{x['cmd']:<{pad}}# {note}")
    block.append("```")
    num = record["numbers"]
    pk = num["passkey"]
    threads = record["threads"]
    load = (f", load average {record['load'][0]:g} before and {record['load'][1]:g} after"
            if record.get("load") else "")
    text = (f"Wall times and numbers from one run of `scripts/tour.py` (its record: "
            f"[docs/results/tour/record.json](docs/results/tour/record.json); "
            f"{record['machine']}, {threads} torch thread{'' if threads == 1 else 's'}{load}, "
            f"commit {record['commit']}, {record['date']}): "
            f"the passkey run reached test accuracy {pk['test_acc']:.3f} at its training length "
            f"and {pk['x4_acc']:.3f} at 4x")
    tiny = num.get("tiny")
    if tiny:
        parts = [f"{g['mean']:.3f} +/- {g['std']:.3f} (`{label}`, {seeds_text(g)})"
                 for label, g in tiny["groups"].items()]
        text += (f"; tiny's report gave {' and '.join(parts)}, {tiny['claims']['pass']} of "
                 f"{tiny['claims']['n']} claims passing")
        if any(g["seeds"] == 2 for g in tiny["groups"].values()):
            lo, hi = std_interval_2()
            text += f" (2 seeds: a std's 95% interval is {lo:.2f}-{hi:.0f}x it)"
        seen = [g["overlap"]["test"] for g in tiny["groups"].values() if g.get("overlap")]
        if seen:
            text += (f". Up to {max(seen):.1%} of tiny's test samples also occur in its "
                     "training stream (the report's overlap warning): at most that share of "
                     "each accuracy can rest on samples seen in training")
    text += "."
    return "\n".join(block + [""] + textwrap.wrap(text, WIDTH, break_long_words=False,
                                                  break_on_hyphens=False))


def seeds_text(g: dict) -> str:
    """A tiny group's seeds: "2 seeds: 0.600, 0.604", each seed's test accuracy (the
    record's `per_seed`; a record without it, at 2 seeds, gives them through its mean and std:
    two values with mean m and sample std s are m -/+ s / sqrt(2))."""
    values = g.get("per_seed")
    if not values and g["seeds"] == 2 and g.get("std") is not None:
        values = [g["mean"] - g["std"] / math.sqrt(2), g["mean"] + g["std"] / math.sqrt(2)]
    if not values:
        return f"{g['seeds']} seeds"
    values = sorted(values)
    listed = ", ".join(f"{v:.3f}" for v in values)
    return f"{g['seeds']} seeds: {listed}"


def std_interval_2() -> tuple[float, float]:
    """The 95% interval of a standard deviation over 2 samples, as multiples of it: sigma / s
    lies in [1 / z(0.9875), 1 / z(0.5125)] (s^2 / sigma^2 is chi-square with 1 degree of
    freedom, the square of a standard normal)."""
    z = NormalDist().inv_cdf
    return 1 / z(0.9875), 1 / z(0.5125)


def wilson(s: dict) -> str:
    return f"{s['k']}/{s['n']} [{s['lo']:.2f}, {s['hi']:.2f}]"


def plural(n: int, word: str) -> str:
    return f"{n} {word}{'' if n == 1 else 's'}"


def title(folder: Path) -> str:
    readme = folder / "README.md"
    if readme.exists():
        first = readme.read_text().splitlines()[0]
        return first.lstrip("# ").strip()
    return folder.name


def runs_text(rep: dict) -> str:
    """The runs a report counts: "12 of 40 planned runs finished" where some of its planned
    runs are missing (not run yet), so that a plan never reads as runs."""
    missing = sum(g.get("missing") or 0 for g in rep["groups"])
    if not missing:
        return plural(rep["runs"], "run")
    return f"{rep['runs'] - missing} of {rep['runs']} planned runs finished"


def experiment_line(folder: Path, rep: dict) -> str:
    """One experiment: runs, lowest and highest group by seeds solved, claims by status."""
    link = f"docs/results/{folder.name}/README.md"
    groups = [g for g in rep["groups"] if (g.get("solved") or {}).get("n")]
    text = f"- **{folder.name}** ([{title(folder)}]({link})): {runs_text(rep)}"
    if groups:
        ns = sorted({g["solved"]["n"] for g in groups})
        per = f"{ns[0]}" if len(ns) == 1 else f"{ns[0]}-{ns[-1]}"
        text += (f" in {plural(len(rep['groups']), 'group')} of {per} "
                 f"seed{'' if per == '1' else 's'}")

        def rate(g: dict) -> tuple[float, float]:
            return g["solved"]["k"] / g["solved"]["n"], g["solved"]["lo"]

        low, high = min(groups, key=rate), max(groups, key=rate)
        n_low = sum(rate(g) == rate(low) for g in groups)
        n_high = sum(rate(g) == rate(high) for g in groups)

        def named(g: dict, ties: int) -> str:
            more = f" and {ties - 1} more" if ties > 1 else ""
            return f"{wilson(g['solved'])} (`{g['label']}`{more})"

        if rate(low) == rate(high):
            text += f"; every group solves {wilson(low['solved'])} seeds"
        else:
            text += (f"; seeds solved from {named(low, n_low)} to {named(high, n_high)}")
    else:
        text += f" in {len(rep['groups'])} groups (no seeds-solved counts recorded)"
    checks = rep.get("checks") or []
    if checks:
        passed = [c for c in checks if (c.get("verdict") or ("pass" if c.get("ok") else
                                                              "fail")) == "pass"]
        text += f"; claims: {len(passed)} of {len(checks)} pass"
        still = sum(c.get("verdict") == "open" for c in checks)
        if still:  # open: runs of its rows not finished, so neither pass nor fail yet
            text += f", {still} open"
        counts = []
        for status, words in STATUS.items():
            of = [c for c in checks if (c.get("registered") or {}).get("status") == status]
            if of:
                p = sum(c in passed for c in of)
                counts.append(f"{words} {p} of {len(of)}")
        unknown = [c for c in checks if (c.get("registered") or {}).get("status") not in STATUS]
        if unknown:
            counts.append(f"registration not recorded {sum(c in passed for c in unknown)} "
                          f"of {len(unknown)}")
        text += " (" + ", ".join(counts) + ")"
    return text + overlap_text(folder, rep["runs"]) + "."


def overlap_text(folder: Path, runs: int) -> str:
    """The held-out overlap its archived runs recorded (`summary.json`'s
    `held_out_in_training`): the largest share of valid or test samples also trained on."""
    shares = []
    for summary in sorted((folder / "runs").glob("*/summary.json")):
        seen = json.loads(summary.read_text()).get("held_out_in_training")
        if isinstance(seen, dict):
            shares.append(max(float(seen.get("valid", 0)), float(seen.get("test", 0))))
    if not shares:
        return ""
    of = "" if len(shares) == runs else f" (in the {len(shares)} runs that record it)"
    if max(shares) == 0:
        return f"; held-out overlap none{of}"
    warn = " (above 1%: memorised samples)" if max(shares) > 0.01 else ""
    return f"; held-out overlap up to {max(shares):.1%}{warn}{of}"


def overlap_of(folder: Path) -> tuple[int, float, float] | None:
    """(runs that record it, largest valid share, largest test share) over a result folder's
    own records (not its sub-folders'); None where it has no records."""
    found, valid, test = 0, 0.0, 0.0
    summaries = [p for sub in RECORDS for p in sorted((folder / sub).glob("*/summary.json"))]
    for summary in summaries:
        seen = json.loads(summary.read_text()).get("held_out_in_training")
        if isinstance(seen, dict):
            found += 1
            valid = max(valid, float(seen.get("valid", 0)))
            test = max(test, float(seen.get("test", 0)))
    return (found, valid, test) if summaries else None


def overlap_section() -> str:
    """docs/results/index.md's table: per committed experiment (every result the index links to
    and every folder with records), its held-out overlap from its records."""
    index = INDEX.read_text()
    linked = re.findall(r"\]\(([^)]+)/README\.md\)", index)
    folders = {f for f in linked if not f.startswith(("..", "http"))}
    for sub in RECORDS:
        folders |= {str(p.parent.relative_to(RESULTS)) for p in RESULTS.glob(f"**/{sub}")
                    if p.is_dir() and any(p.glob("*/summary.json"))}
    folders = {f for f in folders if f.split("/")[0] not in NOT_TRAINING
               and (RESULTS / f).is_dir()}
    rows = ["| result | runs that record it | held-out overlap: valid / test (largest run) |",
            "| --- | --- | --- |"]
    for f in sorted(folders):
        name = f"[{f}]({f}/README.md)" if (RESULTS / f / "README.md").exists() else f
        got = overlap_of(RESULTS / f)
        if got is None:
            rows.append(f"| {name} | - | not recorded (its run records are not committed) |")
            continue
        n, valid, test = got
        runs = len([p for sub in RECORDS for p in (RESULTS / f / sub).glob("*/summary.json")])
        share = ("not recorded (its runs predate the record)" if not n
                 else "none" if valid == test == 0 else f"{valid:.1%} / {test:.1%}")
        warn = " (above 1%: held-out accuracy includes memorised samples)" if max(
            valid, test) > 0.01 else ""
        rows.append(f"| {name} | {n} of {runs} | {share}{warn} |")
    return "\n".join(rows)


def results_section() -> str:
    lines, others = [], []
    for folder in sorted(p for p in RESULTS.iterdir() if p.is_dir()):
        if folder.name == "tour" or folder.name.startswith("verify-"):
            continue  # verify-*: re-trained samples of a placement, linked from its docs
        rep_file = folder / "report.json"
        if rep_file.exists():
            rep = json.loads(rep_file.read_text())
            lines.append(textwrap.fill(experiment_line(folder, rep), WIDTH,
                                       subsequent_indent="  ", break_long_words=False,
                                       break_on_hyphens=False))
        elif (folder / "README.md").exists():
            others.append(f"[{folder.name}](docs/results/{folder.name}/README.md)")
    if others:
        lines.append(textwrap.fill("- Without a report.json (their numbers are in their "
                                   "READMEs): " + ", ".join(others) + ".", WIDTH,
                                   subsequent_indent="  ", break_long_words=False,
                                   break_on_hyphens=False))
    return "\n".join(lines)


def tiers_section(record: dict) -> str:
    """The set-up's sentence on the test tiers, from `make test-tiers`' record."""
    full, fast = record["full"], record["fast"]
    text = (f"`make test-tiers` measured `make test-fast` at {wall(fast['wall_s'])} "
            f"({fast['passed']:,} tests; no slow, oracle or 1 s+ test) and `make test` at "
            f"{wall(full['wall_s'])} ({full['passed']:,} passed, {full['skipped']} skipped, "
            f"{full['failures'] + full['errors']} failed) on {record['cpu']}, "
            f"{record['cores']} cores, {record['workers']} workers, load average "
            f"{record['load_average'].split()[0]} after, commit {record['commit']} "
            f"([record](docs/results/tests/record.json)).")
    return textwrap.fill(text, WIDTH, break_long_words=False, break_on_hyphens=False)


def sections() -> dict[str, str]:
    return {"tour": tour_section(json.loads(TOUR.read_text())),
            "tests": tiers_section(json.loads(TIERS.read_text())), "results": results_section()}


def index_sections() -> dict[str, str]:
    return {"overlap": overlap_section()}


def render(text: str, parts: dict[str, str]) -> str:
    for name, body in parts.items():
        begin, end = marker(name), marker(name, end=True)
        pat = re.compile(re.escape(begin) + r"\n.*?" + re.escape(end), re.S)
        if not pat.search(text):
            raise SystemExit(f"a file lacks the markers of section '{name}': {begin}")
        section = f"{begin}\n{body}\n{end}"
        text = pat.sub(lambda _m, s=section: s, text)
    return text


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="compare, do not write")
    ap.add_argument("--readme", type=Path, default=README)
    ap.add_argument("--index", type=Path, default=INDEX)
    args = ap.parse_args()
    differ = []
    for path, parts in ((args.readme, sections()), (args.index, index_sections())):
        old = path.read_text()
        new = render(old, parts)
        if args.check:
            if new != old:
                print(f"{path} differs from its records: run `make readme-numbers`",
                      file=sys.stderr)
                differ.append(path)
        else:
            path.write_text(new)
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
