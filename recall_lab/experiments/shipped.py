"""The experiment files the package carries: the lab's `experiments/*.toml`, shipped as package
data (`recall_lab/experiment_files` links to `experiments/` in a checkout, so git holds one copy
and an installed wheel holds the same files), listed, shown and copied by `recall-lab
experiments`, and found by name by `recall-lab sweep NAME`.

A name is a file's stem (`capacity`) or its file name (`capacity.toml`). An experiment's `base`
files (`base = "capacity.toml"`) are shipped beside it, so a shipped experiment loads where it
is, and `copy` copies the chain with it.
"""

from __future__ import annotations

import difflib
import re
import shutil
from importlib import resources
from pathlib import Path

from generators.errors import RecallLabError

FOLDER = "experiment_files"
_BASE = re.compile(r"""^\s*base\s*=\s*["']([^"']+)["']""", re.MULTILINE)


def shipped_dir() -> Path:
    """The folder of the shipped experiment files (one line of error where there is none)."""
    folder = Path(str(resources.files("recall_lab") / FOLDER))
    if not folder.is_dir():
        raise RecallLabError(f"this installation of recall-lab carries no experiment files "
                             f"({folder} is missing)")
    return folder


def shipped_names() -> list[str]:
    """Every shipped experiment's name, sorted."""
    return sorted(p.stem for p in shipped_dir().glob("*.toml"))


def is_shipped_name(text: str) -> bool:
    """Whether `text` can name a shipped experiment: a bare name, no folder."""
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9+._-]*", text))


def shipped_path(name: str) -> Path:
    """The file of the shipped experiment `name` (`capacity` or `capacity.toml`)."""
    stem = name[:-len(".toml")] if name.endswith(".toml") else name
    names = shipped_names()
    if not is_shipped_name(name) or stem not in names:
        close = difflib.get_close_matches(stem, names, n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else \
            " (`recall-lab experiments list` lists them)"
        raise RecallLabError(f"no shipped experiment named {name!r}{hint}")
    return shipped_dir() / f"{stem}.toml"


def summary(path: Path) -> str:
    """What an experiment file is about, whole: its `description`, else the first sentence of
    its first comment paragraph (comment lines joined; never cut mid-sentence: the table that
    shows it wraps it)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r"""^description\s*=\s*["'](.+)["']\s*$""", text, re.MULTILINE)
    if found:
        return found.group(1)
    para: list[str] = []
    for line in text.splitlines():
        body = line.lstrip("#").strip() if line.startswith("#") else None
        if body:
            para.append(body)
        elif para:
            break
    return first_sentence(" ".join(para))


def first_sentence(text: str) -> str:
    """`text` up to its first full stop outside parentheses that a capital letter or the end
    follows ("the joint-recall paper's Cor. 3.1" does not end a sentence); all of it if none."""
    depth = 0
    for i, ch in enumerate(text):
        depth += {"(": 1, ")": -1}.get(ch, 0)
        if ch == "." and depth <= 0:
            rest = text[i + 1:]
            if not rest.strip() or (rest[:1] == " " and rest[1:2].isupper()):
                return text[:i + 1]
    return text


def base_chain(path: Path) -> list[Path]:
    """`path` and the files its `base` keys name, in order (each relative to the one before)."""
    chain = [path]
    while True:
        found = _BASE.search(chain[-1].read_text(encoding="utf-8"))
        if not found:
            return chain
        nxt = (chain[-1].parent / found.group(1)).resolve()
        if nxt in chain:
            raise RecallLabError(f"{path}: base files form a cycle")
        chain.append(nxt)


def copy_shipped(name: str, dest: str | Path, force: bool = False) -> list[Path]:
    """Copy the shipped experiment `name` (and its base files) into the folder `dest`; an
    existing file there is kept unless `force`. Returns the files written."""
    src = shipped_path(name)
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise RecallLabError(f"{dest} is a file, not a folder")
    chain = base_chain(src)
    root = shipped_dir().resolve()
    if any(not p.resolve().is_relative_to(root) for p in chain):
        raise RecallLabError(f"{src}: a base file lies outside the shipped experiments")
    targets = [dest / p.resolve().relative_to(root) for p in chain]
    existing = [t for t in targets if t.exists()]
    if existing and not force:
        raise RecallLabError(f"{existing[0]} exists; give --force to overwrite it")
    for src_file, target in zip(chain, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src_file, target)
    return targets
