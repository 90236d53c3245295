"""`make test` installs under the committed lock (requirements-test.lock, `make lock`): every
distribution in the test environment is pinned there (or, for the --no-deps oracles, in
test-oracles-nodeps.txt) at the version installed, so a fresh clone runs the suite on the
packages it passed with, whatever the registries hold that day."""

import os
import re
import sysconfig
from importlib import metadata
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
LOCK = ROOT / "requirements-test.lock"
NODEPS = ROOT / "test-oracles-nodeps.txt"


def pins(path: Path) -> dict[str, str]:
    """name -> the single `==` version a requirements file pins (comments and blanks skipped)."""
    out = {}
    for line in path.read_text().splitlines():
        line = re.sub(r"\s+#.*", "", line).strip()
        if not line or line.startswith("#"):
            continue
        req = Requirement(line)
        (spec,) = req.specifier
        assert spec.operator == "==", f"{path.name}: {line} is not an exact pin"
        out[canonicalize_name(req.name)] = spec.version
    return out


def test_lock_pins_everything_exactly_and_holds_the_suites_oracles():
    lock, nodeps = pins(LOCK), pins(NODEPS)
    assert not set(lock) & set(nodeps)
    for name in ("torch", "transformers", "peft", "pytest", "numpy", "pandas", "mkdocs", "ray",
                 "setuptools", "pip"):
        assert name in lock, name
    assert {"mamba-ssm", "flash-linear-attention", "fla-core"} <= set(nodeps)
    assert lock["torch"] == "2.13.0"  # the Makefile's TORCH_SPEC


@pytest.mark.skipif(os.environ.get("RECALL_LAB_LOCKED") != "1",
                    reason="not under `make test` (RECALL_LAB_LOCKED=1): the environment is not "
                           "the locked one")
def test_every_installed_distribution_is_locked_at_its_version():
    """Under `make test` the environment is the lock: nothing unpinned, nothing at another
    version (a local label such as torch's +cpu build is the same release)."""
    locked = {**pins(LOCK), **pins(NODEPS)}
    unpinned, moved = [], []
    # the environment's own site-packages: not the copies a package vendors with their
    # .dist-info (setuptools/_vendor), which join sys.path once setuptools is imported
    paths = sorted({sysconfig.get_paths()[k] for k in ("purelib", "platlib")})
    for dist in metadata.distributions(path=paths):
        name = canonicalize_name(dist.metadata["Name"])
        if name == "recall-lab":
            continue
        if name not in locked:
            unpinned.append(f"{name}=={dist.version}")
        elif Version(dist.version).public != Version(locked[name]).public:
            moved.append(f"{name} {dist.version} (locked {locked[name]})")
    assert not unpinned, f"installed but not in the lock: {unpinned}"
    assert not moved, f"installed at another version than the lock's: {moved}"


def test_make_lock_without_the_network_says_one_line_and_keeps_the_lock(tmp_path):
    """`make lock` (scripts/lock.sh) whose resolver cannot reach the registry: one line naming
    the failure, exit 1, and the old lock byte for byte. Run on a copy of the files, with a uv
    stand-in that fails as uv does offline."""
    import shutil
    import subprocess

    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "lock.sh", tmp_path / "scripts" / "lock.sh")
    for name in ("requirements-test.in", "requirements-test.lock"):
        shutil.copy(ROOT / name, tmp_path / name)
    before = (tmp_path / "requirements-test.lock").read_bytes()
    uv = tmp_path / "cache" / "lock-tools" / "bin" / "uv"
    uv.parent.mkdir(parents=True)
    uv.write_text("#!/bin/sh\necho '  x Failed to fetch: https://pypi.org/simple/torch/' >&2\n"
                  "echo '  Caused by: dns error: failed to lookup address information' >&2\n"
                  "exit 2\n")
    uv.chmod(0o755)
    r = subprocess.run(["bash", str(tmp_path / "scripts" / "lock.sh")], capture_output=True,
                       text=True, env={**os.environ, "RECALL_LAB_CACHE": str(tmp_path / "cache")})
    assert r.returncode == 1 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "Failed to fetch" in r.stderr and "test.lock is unchanged" in r.stderr
    assert (tmp_path / "requirements-test.lock").read_bytes() == before
    assert not (tmp_path / "requirements-test.lock.new").exists()
