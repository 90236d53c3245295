"""Folders the lab owns: the marker file that says so, and the OS lock of a folder being written.

`--force` may delete only inside a folder the lab wrote. A folder is recognised by its marker,
`.recall-lab` (JSON `{"kind": "run" | "dataset", "version": 1}`), written when `train` or
`generate` creates the folder, never by file names alone (another program may write a
`config.json`). Folders written before the marker existed are recognised by stricter rules of
their own (a run: `runs.is_lab_run`; a dataset: its manifest's `format`).

`FolderLock` is the one OS lock of the lab (`flock` on a lock file): a run folder's `RUN/.lock`
(`checkpoint.RunLock`), a sweep's folder, and `generate`'s output (a sibling `.NAME.lock`, since
the dataset folder itself is replaced by a rename). The kernel drops the lock when its holder
dies (kill -9 included), so a stale lock file never blocks.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
from pathlib import Path

from recall_lab.generators.errors import RecallLabError

MARKER = ".recall-lab"
MARKER_VERSION = 1
KINDS = ("run", "dataset")


def write_marker(folder: Path, kind: str) -> None:
    """Mark `folder` as a recall-lab `kind` folder (written to a temporary name and renamed)."""
    if kind not in KINDS:
        raise ValueError(f"unknown folder kind {kind!r}")
    path = Path(folder) / MARKER
    tmp = path.with_name(f".{MARKER}.tmp{os.getpid()}")
    try:
        tmp.write_text(json.dumps({"kind": kind, "version": MARKER_VERSION}) + "\n")
        os.replace(tmp, path)
    except OSError as exc:
        tmp.unlink(missing_ok=True)
        raise RecallLabError(f"cannot write {path}: {exc.strerror or exc}") from None


def read_marker(folder: Path) -> str | None:
    """The kind named by `folder`'s marker, or None when it has no valid marker."""
    path = Path(folder) / MARKER
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError):
        return None
    if isinstance(data, dict) and data.get("kind") in KINDS and isinstance(data.get("version"),
                                                                           int):
        return data["kind"]
    return None


class FolderLock:
    """An exclusive, non-blocking OS lock (`flock`) on the file `path`, naming `folder` in the
    refusal. The file holds the holder's pid, for the message. `unlink=True` removes the lock
    file on release (a sibling lock file should not outlive the work); a process that opened
    the file just before it was removed notices (the path no longer names the file it locked)
    and is refused, so two holders never coexist."""

    def __init__(self, path: Path, folder: Path, *, unlink: bool = False) -> None:
        self.path, self.folder, self.unlink = Path(path), Path(folder), unlink
        self._fd: int | None = None

    @property
    def held(self) -> bool:
        return self._fd is not None

    def _refuse(self, holder: str) -> RecallLabError:
        who = f" (pid {holder})" if holder.isdigit() else ""
        return RecallLabError(f"{self.folder} is in use by another recall-lab process{who}; "
                              "wait for it to finish or stop it")

    def acquire(self) -> None:
        if self._fd is not None:
            return
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise RecallLabError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
            os.close(fd)
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                raise RecallLabError(f"cannot lock {self.path}: {exc.strerror or exc}") from None
            raise self._refuse(holder) from None
        try:
            same = os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except OSError:
            same = False
        if not same:  # the holder removed the file between our open and our flock
            os.close(fd)
            raise self._refuse("")
        os.ftruncate(fd, 0)
        os.pwrite(fd, str(os.getpid()).encode(), 0)
        self._fd = fd

    def release(self) -> None:
        if self._fd is not None:
            if self.unlink:
                try:
                    self.path.unlink()  # still holding the lock: no one else can be using it
                except OSError:
                    pass
            os.close(self._fd)  # closing the descriptor drops the flock
            self._fd = None

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc: object) -> None:
        self.release()
