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
PYTEST_WIDTH = shutil.get_terminal_size().columns  # pytest's own report keeps its width
os.environ["COLUMNS"] = "4096"

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


def pytest_collection_modifyitems(config, items):
    """`@pytest.mark.cuda` tests (tests/gpu/) run wherever torch sees a CUDA device and skip,
    with the reason, elsewhere (`pytest -m cuda --collect-only` lists them)."""
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
