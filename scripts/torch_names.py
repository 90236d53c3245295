"""Every `torch.*` name that the lab, its generators, proofs and tests use resolves on the torch
of the Python that runs this (the dry run runs it on torch 2.11, the GPU machine's version).

    python scripts/torch_names.py      # from the checkout; exit 1 and the names that do not

Reads each file's imports of torch (`import torch`, `import torch.nn.functional as F`,
`from torch import nn`, ...) and the attribute chains written on them (`torch.cuda.Event`,
`F.scaled_dot_product_attention`), imports every module of the lab first (so the operators it
registers, `torch.ops.recall_lab.*`, exist), then resolves each chain. Keyword arguments and
behaviour are not checked here: the tests do that.
"""

from __future__ import annotations

import ast
import importlib
import pkgutil
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("recall_lab", "tests")


def chains(source: str) -> set[str]:
    """The dotted torch names a file uses, through the names it imports torch under."""
    tree = ast.parse(source)
    alias: dict[str, str] = {}
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for a in node.names:
                if a.name.split(".")[0] == "torch":
                    alias[a.asname or "torch"] = a.name if a.asname else "torch"
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level \
                and node.module.split(".")[0] == "torch":
            for a in node.names:
                found.add(f"{node.module}.{a.name}")
                alias[a.asname or a.name] = f"{node.module}.{a.name}"
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute):
            parts, base = [], node
            while isinstance(base, ast.Attribute):
                parts.append(base.attr)
                base = base.value
            if isinstance(base, ast.Name) and base.id in alias:
                found.add(".".join([alias[base.id], *reversed(parts)]))
    return found


def resolves(chain: str) -> bool:
    parts = chain.split(".")
    for i in range(len(parts), 0, -1):  # the longest importable module, then attributes
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for name in parts[i:]:
            if not hasattr(obj, name):
                return False
            obj = getattr(obj, name)
        return True
    return False


def main() -> int:
    import torch

    sys.path.insert(0, str(ROOT))
    import recall_lab

    for mod in pkgutil.walk_packages(recall_lab.__path__, "recall_lab."):
        importlib.import_module(mod.name)
    used: dict[str, set[str]] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for chain in chains(path.read_text()):
                used.setdefault(chain, set()).add(str(path.relative_to(ROOT)))
    # optional packages of their own, not torch's API (tensorboard)
    missing = {c: f for c, f in used.items() if not resolves(c)
               and not c.startswith("torch.utils.tensorboard")}
    print(f"torch {torch.__version__}: {len(used)} torch names used, "
          f"{len(used) - len(missing)} resolve")
    for chain, files in sorted(missing.items()):
        print(f"  missing: {chain} ({', '.join(sorted(files))})")
    return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
