"""Mixer names: what the `recall_lab.mixers` entry-point group publishes, the lab's own mixers
included (they are published by the lab's own package metadata, the same way a user's package
publishes its mixers; pyproject.toml lists them).

An entry point's value is an import path (``pkg.module:Class``); the run's config stores that
path, not the name, so a run reloads even after the package that named it is gone, as long as
the module still imports.
"""

from __future__ import annotations

from functools import cache
from importlib.metadata import distributions

from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.contract import split_path

GROUP = "recall_lab.mixers"


@cache
def named_mixers() -> dict[str, str]:
    """Mixer name -> import path, for every installed package's entry points (sorted by name).

    Every distribution on the path is read, not only the first of each name: a stale
    `*.egg-info` of the same project in the working directory (which sits first on sys.path in
    a checkout) would otherwise hide the installed metadata's mixers."""
    found: dict[str, str] = {}
    for dist in distributions():
        for ep in dist.entry_points:
            if ep.group == GROUP:
                found.setdefault(ep.name, ep.value)
    return dict(sorted(found.items()))


def resolve_mixer(name_or_path: str) -> str:
    """A mixer name or import path -> its import path (a name is looked up first)."""
    if not isinstance(name_or_path, str):
        raise RecallLabError(f"mixer must be a name or an import path, got "
                             f"{type(name_or_path).__name__} {name_or_path!r}")
    named = named_mixers()
    if name_or_path in named:
        return named[name_or_path]
    if ":" not in name_or_path and "." not in name_or_path:
        known = ", ".join(named) or "none installed"
        raise RecallLabError(f"unknown mixer {name_or_path!r}: not a mixer name ({known}) and "
                             "not an import path pkg.module:Class")
    split_path(name_or_path)
    return name_or_path
