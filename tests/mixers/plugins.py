"""A fake installed distribution publishing mixers in the `recall_lab.mixers` entry-point group,
for the plug-in tests (put its folder on sys.path, then clear `named_mixers`' cache)."""

from __future__ import annotations

from pathlib import Path


def fake_distribution(tmp_path: Path, lines: str, name: str = "fake_mixers") -> Path:
    """A distribution `name` whose metadata publishes `lines` (``name = pkg.mod:Class`` each)
    in the mixer group; returns the folder to put on sys.path."""
    dist = tmp_path / "site" / f"{name}-0.1.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(
        f"Metadata-Version: 2.1\nName: {name.replace('_', '-')}\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(f"[recall_lab.mixers]\n{lines}\n")
    return dist.parent
