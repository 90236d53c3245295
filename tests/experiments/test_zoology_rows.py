"""experiments/zoology/zoology-fig2-zoology-rows.toml in miniature: Figure 2's rows that only
zoology's own classes provide, by import path. It runs only where zoology imports (a checkout on
PYTHONPATH, with einops), else skips saying so; RWKV-4 compiles a CUDA kernel at import, so its
row runs only on a GPU."""

import importlib.util
from pathlib import Path

import pytest
import torch

from recall_lab.config import read_toml
from recall_lab.experiments.engine import run_sweep
from recall_lab.experiments.grid import expand
from tests.experiments.test_shipped_experiments import miniature

FILE = Path(__file__).resolve().parents[2] / "experiments" / "zoology" / \
    "zoology-fig2-zoology-rows.toml"


def _zoology() -> bool:
    try:
        return importlib.util.find_spec("zoology.mixers") is not None
    except ModuleNotFoundError:
        return False


@pytest.mark.skipif(not _zoology(), reason="zoology is not importable (put a checkout of "
                    "HazyResearch/zoology on PYTHONPATH to run Figure 2's zoology-only rows)")
@pytest.mark.parametrize("row", ["baseconv", "h3", "rwkv4"])
def test_zoology_rows_in_miniature(row, tmp_path):
    if row == "rwkv4" and not torch.cuda.is_available():
        pytest.skip("RWKV-4 (zoology.mixers.rwkv) compiles a CUDA kernel at import: GPU only")
    if row == "h3" and importlib.util.find_spec("opt_einsum") is None:
        pytest.skip("H3 (zoology.mixers.h3) imports opt_einsum, which is not installed")
    data = miniature(read_toml(FILE))
    data["grid"]["model"] = [m for m in data["grid"]["model"] if m["name"] == row] or \
        [m for m in read_toml(FILE)["grid"]["model"] if m["name"] == row]
    data["grid"]["train.seed"] = [0]
    data["train"].update(batch_size=8, train_examples=8, device="cpu")
    data["task"]["kwargs"]["vocab_size"] = 128  # must exceed the length (64)
    exp = expand(data, "zoology-rows", FILE)
    index = run_sweep(exp, tmp_path, workers=1)
    assert index["counts"]["done"] == len(exp.runs) == 2, index  # two lrs, one seed
