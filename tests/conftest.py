"""Test-wide setup. TRITON_INTERPRET must be set before any Triton kernel is defined."""

import os

os.environ.setdefault("TRITON_INTERPRET", "1")
# One torch thread: the tests' tensors are small, and on 2 shared cores intra-op threading made
# small ops up to hundreds of times slower; also inherited by the notebook kernel the tests start.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import torch  # noqa: E402
from hypothesis import HealthCheck, settings  # noqa: E402

torch.set_num_threads(int(os.environ["OMP_NUM_THREADS"]))

settings.register_profile(
    "default",
    deadline=None,
    max_examples=25,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
