"""The registries are single tables: patterns (attention/patterns.py), architectures
(models/archs.py), model names (models/registry.py). A row added from outside the package (the
tests' own, tests/registry_extras.py) reaches every reader."""

from __future__ import annotations

from typing import get_args

import pytest

from recall_lab.attention import PATTERNS, PatternRow, register_pattern
from recall_lab.config import Arch, RunConfig, TrainConfig
from recall_lab.generators import get_preset
from recall_lab.generators.errors import RecallLabError
from recall_lab.models import build_model, listed_models, model_config, register_model
from recall_lab.models.archs import ARCH_TABLE
from recall_lab.models.hybrid import make_branch_pattern
from recall_lab.models.registry import builtin_models
from recall_lab.train import estimate_train_bytes
from tests.registry_extras import MODEL, PATTERN, StridePattern


def test_test_only_entries_are_in_the_registries():
    assert PATTERN in PATTERNS
    assert MODEL in listed_models()
    # a registered pattern is a model name by itself and a hybrid branch
    assert model_config(f"mamba2+{PATTERN}", 20).pattern == PATTERN
    assert isinstance(make_branch_pattern(PATTERN, 8, 3, 4, {}), StridePattern)
    assert build_model(MODEL, 20).blocks[0].branch.pattern.name == PATTERN


def test_duplicates_and_unknown_archs_are_refused():
    with pytest.raises(RecallLabError, match="already registered"):
        register_pattern("sw", PatternRow(StridePattern))
    with pytest.raises(RecallLabError, match="already registered"):
        register_model("samba", {"arch": "samba"})
    with pytest.raises(RecallLabError, match="arch must be one of"):
        register_model("test-nothing", {"arch": "rwkv"})


def test_config_arch_names_are_the_arch_table():
    assert set(get_args(Arch)) == set(ARCH_TABLE)


def _estimate_before_the_table(cfg: RunConfig) -> int:
    """train.estimate_train_bytes as written before the architecture table (the reference)."""
    m, task = cfg.model, cfg.task
    d_inner = m.expand * m.d_model
    d_state = m.d_state or (64 if m.arch == "mamba2" else 16)
    per_layer = 32 * d_inner + d_inner * d_state
    if m.pattern is not None or m.arch == "samba":
        per_layer += min(m.k, task.max_len) + 4 * d_state
    if m.arch == "transformer":
        per_layer = 48 * m.d_model
    layers = m.n_layers * (3 if m.arch == "samba" else 1)
    per_token = layers * per_layer + 3 * m.vocab_size
    return int(per_token * 4 * cfg.train.batch_size * task.max_len)


# the lab's own blocks; a contract mixer's estimate is its own row (models/archs.py)
@pytest.mark.parametrize("name", builtin_models())
def test_memory_estimate_reads_the_arch_table_unchanged(name):
    task = get_preset("paper-mqjr")
    cfg = RunConfig(model=model_config(name, task.vocab().size), train=TrainConfig(),
                    task=task)
    assert estimate_train_bytes(cfg) == _estimate_before_the_table(cfg)
