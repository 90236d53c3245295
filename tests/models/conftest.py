"""Models-area tests run torch single-threaded: their tensors are tiny, and on a shared 2-core
machine intra-op threads cost far more than they give (measured: a tiny train+eval took 82 s with
2 threads under load, 6 s with 1). Restored after each test."""

import pytest
import torch

from tests.registry_extras import register

register()  # the test-only pattern and model: the generic model tests run over them too


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)
