"""docs/results/overwrite/: the overwrite frontier's generated page and figure, from its runs'
records (recall_lab/experiments/overwrite.py), and the records themselves (`recall-lab archive`,
no weights).

    python scripts/overwrite_page.py                      # from runs/overwrite
    python scripts/overwrite_page.py --runs DIR --out DIR
    python scripts/overwrite_page.py --reference          # also pack the shipped reference

`--reference` packs recall_lab/experiments/reference_data/overwrite-2026.tar.xz (what `place
--reference overwrite-2026` places against) from the archived records: the forgetting tables'
runs with docs/results/overwrite/reference/{place.toml, overwrite-tables.toml}.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from recall_lab.experiments import overwrite as ow  # noqa: E402
from recall_lab.experiments.grid import flatten  # noqa: E402
from recall_lab.experiments.reference import (  # noqa: E402
    pack_reference,
    read_protocol,
    shipped_archive,
)

RESUME = ("cp -r docs/results/overwrite/runs runs/overwrite, then recall-lab sweep "
          "experiments/overwrite/overwrite.toml --workers 2 --only train.seed=N --only "
          "train.seed=N+1 for the seeds not finished (the file's header has the pieces)")


def pack(out: Path) -> int:
    """The overwrite-2026 reference from the archived records in `out`/runs: the runs of the
    forgetting tables (place.toml's two tables), with the reference's two files."""
    ref = out / "reference"
    protocol = read_protocol(ref)
    return pack_reference(out / "runs", [ref / "place.toml", ref / "overwrite-tables.toml"],
                          shipped_archive("overwrite-2026"),
                          keep=lambda e: protocol.size_of(flatten(e["config"])) is not None)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=Path, default=ROOT / "runs" / "overwrite")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results" / "overwrite")
    ap.add_argument("--no-archive", action="store_true", help="Leave the records where they are.")
    ap.add_argument("--reference", action="store_true",
                    help="Also pack the overwrite-2026 reference from the archived records.")
    args = ap.parse_args(argv)
    read = ow.reading([args.runs])
    args.out.mkdir(parents=True, exist_ok=True)
    ow.figure(read, args.out / "overwrite.png")
    (args.out / "README.md").write_text(ow.page(read, RESUME))
    if not args.no_archive:
        dest = args.out / "runs"
        if dest.exists():
            import shutil

            shutil.rmtree(dest)
        subprocess.run([sys.executable, "-m", "recall_lab.cli", "archive", str(args.runs),
                        str(dest)], check=True)
    if args.reference:
        print(f"reference: {pack(args.out)} runs in {shipped_archive('overwrite-2026')}")
    print(f"written: {args.out / 'README.md'}, {args.out / 'overwrite.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
