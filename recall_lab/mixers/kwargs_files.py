"""Kwargs files: each mixer's constructor arguments, by import path, in a TOML file
(`[mixers."pkg.module:Class"] kwargs = {...}`), given to `check --all` and `place` as
`--kwargs-file PATH`, or by the name of a file shipped in recall_lab/mixers/kwargs/
(`--kwargs-file zoology`: zoology's mixers, whose constructors need `l_max` and the like)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from recall_lab.config import read_toml
from recall_lab.generators.errors import RecallLabError

SHIPPED = Path(__file__).resolve().parent / "kwargs"


def shipped_names() -> list[str]:
    return sorted(p.stem for p in SHIPPED.glob("*.toml"))


def kwargs_file(value: str | Path) -> Path:
    """The file `value` names: a shipped file's name (no folder, no suffix), else a path."""
    text = str(value)
    if "/" not in text and not text.endswith(".toml") and not Path(text).exists():
        if text not in shipped_names():
            raise RecallLabError(f"--kwargs-file {text!r}: no such file and no shipped kwargs "
                                 f"file of that name (shipped: {', '.join(shipped_names())})")
        return SHIPPED / f"{text}.toml"
    path = Path(text)
    if not path.is_file():
        raise RecallLabError(f"--kwargs-file {text}: no such file")
    return path


def mixer_kwargs(value: str | Path, path: str) -> dict[str, Any]:
    """The kwargs the file `value` gives the mixer at import path `path`."""
    spec = read_toml(kwargs_file(value))
    mixers = spec.get("mixers") or {}
    if path not in mixers:
        raise RecallLabError(f"--kwargs-file {value}: no [mixers.{path!r}] table (it has "
                             f"{len(mixers)}: e.g. {', '.join(list(mixers)[:3])})")
    return dict(mixers[path].get("kwargs") or {})
