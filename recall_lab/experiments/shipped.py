"""The experiment files the package carries: the lab's `experiments/STUDY/*.toml`, one folder per
study, shipped as package data (`recall_lab/experiment_files` links to `experiments/` in a
checkout, so git holds one copy and an installed wheel holds the same files), listed by study,
shown and copied by `recall-lab experiments`, and found by name by `recall-lab sweep NAME`.

A name is a file's stem (`capacity`) or its file name (`capacity.toml`), whatever its study's
folder: names are unique across folders. An experiment's `base` files (`base = "capacity.toml"`,
or `"../table1/mini-table1-v1.toml"` in another study) are shipped with it, so a shipped
experiment loads where it is, and `copy` copies the chain with it. `experiments/replications/`
(claim files for `sweep --replicate`) and `experiments/tasks/` (task files for `eval --task`)
hold no experiments.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
from importlib import resources
from pathlib import Path

from recall_lab.generators.errors import RecallLabError

FOLDER = "experiment_files"
_BASE = re.compile(r"""^\s*base\s*=\s*["']([^"']+)["']""", re.MULTILINE)
# folders of experiments/ whose files are not experiments: replication claim files, task files and
# the claims of lr-window re-tests (their runs are `recall-lab lr-window` calls)
NOT_EXPERIMENTS = ("replications", "tasks", "lr-window")


def shipped_dir() -> Path:
    """The folder of the shipped experiment files (one line of error where there is none)."""
    folder = Path(str(resources.files("recall_lab") / FOLDER))
    if not folder.is_dir():
        raise RecallLabError(f"this installation of recall-lab carries no experiment files "
                             f"({folder} is missing)")
    return folder


def shipped_files() -> dict[str, Path]:
    """Every shipped experiment's file by name, in the order of their study folders and names;
    one line of error where two folders hold the same name (a bare name must name one file)."""
    root = shipped_dir()
    files: dict[str, Path] = {}
    for path in sorted(root.rglob("*.toml"), key=lambda p: p.relative_to(root).parts):
        rel = path.relative_to(root)
        if len(rel.parts) > 1 and rel.parts[0] in NOT_EXPERIMENTS:
            continue
        if path.stem in files:
            raise RecallLabError(f"two shipped experiments are named {path.stem!r}: "
                                 f"{files[path.stem].relative_to(root)} and {rel}")
        files[path.stem] = path
    return files


def shipped_names() -> list[str]:
    """Every shipped experiment's name, sorted."""
    return sorted(shipped_files())


def study(path: Path) -> str:
    """The study of a shipped experiment file: its folder under the shipped experiments
    (`capacity-narrow`), "" for a file at the top."""
    folder = path.relative_to(shipped_dir()).parent
    return "" if folder == Path(".") else folder.as_posix()


def by_study() -> dict[str, list[str]]:
    """The shipped experiments' names grouped by study, studies and names sorted."""
    groups: dict[str, list[str]] = {}
    for name, path in shipped_files().items():
        groups.setdefault(study(path), []).append(name)
    return {s: sorted(groups[s]) for s in sorted(groups)}


def is_shipped_name(text: str) -> bool:
    """Whether `text` can name a shipped experiment: a bare name, no folder."""
    return bool(re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9+._-]*", text))


def shipped_path(name: str) -> Path:
    """The file of the shipped experiment `name` (`capacity` or `capacity.toml`)."""
    stem = name[:-len(".toml")] if name.endswith(".toml") else name
    files = shipped_files()
    if not is_shipped_name(name) or stem not in files:
        close = difflib.get_close_matches(stem, list(files), n=3)
        hint = f"; did you mean {', '.join(close)}?" if close else \
            " (`recall-lab experiments list` lists them)"
        raise RecallLabError(f"no shipped experiment named {name!r}{hint}")
    return files[stem]


def summary(path: Path) -> str:
    """What an experiment file is about, whole: its `description`, else the first sentence of
    its first comment paragraph (comment lines joined up to an indented command line; never cut
    mid-sentence: the table that shows it wraps it)."""
    text = path.read_text(encoding="utf-8")
    found = re.search(r"""^description\s*=\s*["'](.+)["']\s*$""", text, re.MULTILINE)
    if found:
        return found.group(1)
    para: list[str] = []
    for line in text.splitlines():
        body = line.lstrip("#").strip() if line.startswith("#") else None
        if body and line.startswith("#   "):  # an indented command line ends the prose
            body = None
        if body:
            para.append(body)
        elif para:
            break
    return first_sentence(" ".join(para))


def short(text: str, limit: int = 100) -> str:
    """`text`'s first sentence without its asides in parentheses, at most `limit` characters
    of it, cut at a word and marked "[...]" where it was cut (`experiments list` without
    --long)."""
    first = first_sentence(text)
    while True:  # asides in parentheses go first (innermost first)
        shorter = re.sub(r"\s*\([^()]*\)", "", first)
        if shorter == first:
            break
        first = shorter
    first = re.sub(r"\bexperiments/[\w.+-]+/", "", first)  # a shipped file: its name is enough
    if len(first) <= limit:
        return first
    cut = first[:limit - 6].rsplit(" ", 1)[0].rstrip(",;:(")
    return f"{cut} [...]"


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
    existing file there is kept unless `force`. Returns the files written.

    The files keep their places relative to the folder that holds them all: a chain within one
    study lands in `dest` itself (`dest/capacity-narrow-queries.toml` beside
    `dest/capacity-narrow.toml`); a base in another study keeps the study folders
    (`dest/leak-audit/leak-audit.toml`, `dest/table1/mini-table1-v1.toml`), so each `base` still
    resolves."""
    src = shipped_path(name)
    dest = Path(dest)
    if dest.exists() and not dest.is_dir():
        raise RecallLabError(f"{dest} is a file, not a folder")
    chain = [p.resolve() for p in base_chain(src)]
    root = shipped_dir().resolve()
    if any(not p.is_relative_to(root) for p in chain):
        raise RecallLabError(f"{src}: a base file lies outside the shipped experiments")
    common = Path(os.path.commonpath([p.parent for p in chain]))
    targets = [dest / p.relative_to(common) for p in chain]
    existing = [t for t in targets if t.exists()]
    if existing and not force:
        raise RecallLabError(f"{existing[0]} exists; give --force to overwrite it")
    for src_file, target in zip(chain, targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src_file, target)
    return targets
