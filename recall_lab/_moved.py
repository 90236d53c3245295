"""The deprecated top-level packages `generators` and `proofs` (they moved under `recall_lab` in
0.2: generic top-level names collide with anything else a user installs under them). Each old
name stays importable for one release: it warns once and hands out the new modules themselves,
so `generators.TaskSpec is recall_lab.generators.TaskSpec` and isinstance checks hold."""

from __future__ import annotations

import importlib
import pkgutil
import sys
import warnings


def alias(old: str) -> None:
    """Make `old` and every `old.sub` the same module objects as `recall_lab.old[.sub]`."""
    new = f"recall_lab.{old}"
    warnings.warn(f"the top-level package '{old}' is deprecated and goes in the next release: "
                  f"import {new} instead", DeprecationWarning, stacklevel=3)
    package = importlib.import_module(new)
    for info in pkgutil.iter_modules(package.__path__):
        sys.modules[f"{old}.{info.name}"] = importlib.import_module(f"{new}.{info.name}")
    sys.modules[old] = package
