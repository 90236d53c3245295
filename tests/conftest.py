"""Test-wide setup: the Triton interpreter where there is no GPU, and the `cuda` marker's skip.

TRITON_INTERPRET must be set before any Triton kernel is defined (`triton.jit` reads it when
recall_lab/attention/triton_sparse.py is imported, lazily, long after this file runs). Importing
torch defines no Triton kernel, so torch can tell first whether a CUDA device is there: with one,
the kernels are compiled (tests/gpu/); without, they run in the interpreter on CPU tensors.
"""

import os
import shutil

# One torch thread: the tests' tensors are small, and on 2 shared cores intra-op threading made
# small ops up to hundreds of times slower; also inherited by the notebook kernel the tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")
# Output that is not a terminal is COLUMNS wide (100 by default: commands/shell.py). The suite
# renders it wide, so a test that looks for a phrase finds it on one line; the 100-column
# rendering itself, with every word kept, is tests/test_piped_width.py's (it sets its widths).
WIDE = "4096"
# pytest's own report keeps its width (80 in a pytest that a test started, which inherits WIDE)
PYTEST_WIDTH = 80 if os.environ.get("COLUMNS") == WIDE else shutil.get_terminal_size().columns
os.environ["COLUMNS"] = WIDE

import pytest  # noqa: E402
import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

CUDA = torch.cuda.is_available()
if not CUDA:
    os.environ.setdefault("TRITON_INTERPRET", "1")
torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

settings.register_profile(
    "default",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))


HEAVY_LIST = os.path.join(os.path.dirname(__file__), "heavy.txt")


def heavy_ids() -> set[str]:
    """The tests of tests/heavy.txt (scripts/test_tiers.py: those that took >= 1 s in one
    measured run of the suite)."""
    with open(HEAVY_LIST) as f:
        return {line.strip() for line in f if line.strip() and not line.startswith("#")}


def pytest_collection_modifyitems(config, items):
    """The `heavy` marker on the measured heavy tests and on every test file of an oracle that
    `make test` installs (`make test-fast` deselects `slow` and `heavy`). `@pytest.mark.cuda`
    tests (tests/gpu/) run wherever torch sees a CUDA device and skip, with the reason,
    elsewhere (`pytest -m cuda --collect-only` lists them)."""
    heavy = heavy_ids()
    oracle_files = tuple(f for _, files in ORACLES.values() for f in files)
    for item in items:
        if item.nodeid in heavy or item.nodeid.startswith(oracle_files):
            item.add_marker(pytest.mark.heavy)
    if CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device (torch.cuda.is_available() is False)")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.hookimpl(trylast=True)
def pytest_configure(config):
    writer = config.get_terminal_writer() if hasattr(config, "get_terminal_writer") else None
    if writer is not None:
        writer.fullwidth = PYTEST_WIDTH


# ---- the oracles: `make test` requires them ----------------------------------------------------
# The external oracles the Makefile installs (mamba-ssm's references and kernels, FLA's naive
# loops, peft): their tests skip where they are missing, which is right for a user's `pytest`
# but hid a failed install in CI. With RECALL_LAB_REQUIRE_ORACLES=1 (`make test` sets it) a test
# skipped for a missing oracle fails instead, and the summary names what ran.
ORACLES = {  # oracle -> (the words of its tests' skip reason, the test files that use it)
    "mamba-ssm": ("mamba-ssm", ("tests/ssm/test_ssm_oracle.py",)),
    "flash-linear-attention": ("flash-linear-attention", ("tests/mixers/test_zoo_",)),
    "peft": ("'peft'", ("tests/models/test_adapters.py",)),
}
REQUIRE_ORACLES = os.environ.get("RECALL_LAB_REQUIRE_ORACLES") == "1"


def oracle_of_skip(reason: str) -> str | None:
    """The oracle whose absence a skip reason states, or None."""
    for name, (words, _) in ORACLES.items():
        if words in reason and ("not installed" in reason or "could not import" in reason):
            return name
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    report = outcome.get_result()
    if not (REQUIRE_ORACLES and report.skipped and isinstance(report.longrepr, tuple)):
        return
    oracle = oracle_of_skip(str(report.longrepr[2]))
    if oracle is not None:
        report.outcome = "failed"
        report.longrepr = (f"{oracle} (a test oracle) is missing, and RECALL_LAB_REQUIRE_ORACLES=1 "
                           "(make test) requires it: its install failed; rm .venv/.oracle and run "
                           "`make test` again to see why")


def pytest_terminal_summary(terminalreporter):
    """One line per oracle: how many of its tests passed, failed and skipped."""
    stats = terminalreporter.stats
    lines = []
    for name, (_, files) in ORACLES.items():
        counts = {kind: sum(1 for r in stats.get(kind, [])
                            if getattr(r, "when", "call") in ("call", "setup")
                            and any(r.nodeid.startswith(f) for f in files))
                  for kind in ("passed", "failed", "skipped")}
        if any(counts.values()):
            lines.append(f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
                         f"{counts['skipped']} skipped")
    if lines:
        terminalreporter.write_sep("-", "oracle tests" + (" (required)" if REQUIRE_ORACLES
                                                          else ""))
        for line in lines:
            terminalreporter.write_line(line)
