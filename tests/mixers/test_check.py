"""`recall_lab.testing`, the one implementation of the generic checks: every named mixer passes
its correctness rows alone, built-in models pass them as a whole, and each check can fail (a
mixer that reads the future, one whose step disagrees, one without gradients)."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from recall_lab.models.registry import mixer_models
from recall_lab.testing import (
    MixerSubject,
    check_causal,
    check_decode,
    check_finite_gradients,
    check_padding,
    resolve_target,
    run_checks,
)


@pytest.mark.parametrize("name", mixer_models())
def test_every_named_mixer_passes_the_correctness_rows(name):
    rows = run_checks(resolve_target(name), learning=False, speed=False)
    assert [r.name for r in rows if r.passed is False] == [], [r.value for r in rows]
    assert {r.name for r in rows} >= {"causality", "padding and length", "decode = parallel"}


# one model per block family; the generic tests of tests/models/ run every row over all of them
@pytest.mark.parametrize("name", ["mamba2+hax", "attamba"])
def test_builtin_models_pass_as_a_whole(name):
    rows = run_checks(resolve_target(name), learning=False, speed=False)
    assert [r.name for r in rows if r.passed is False] == []


def test_decimamba_says_where_its_causality_starts():
    rows = {r.name: r for r in run_checks(resolve_target("mamba+deci"), learning=False,
                                          speed=False)}
    assert rows["causality"].passed is None and rows["causality"].value == "from SEP on"


class Peek(nn.Module):
    """Output i reads input i + `ahead` (when it exists): a leak of `ahead` positions."""

    def __init__(self, d_model: int, ahead: int = 1) -> None:
        super().__init__()
        self.ahead = ahead
        self.out_proj = nn.Linear(d_model, d_model)

    def forward(self, x):
        shifted = torch.cat([x[:, self.ahead:], torch.zeros_like(x[:, : self.ahead])], 1)
        return self.out_proj(x + shifted)


class BadStep(Peek):
    """Causal (ahead = 0 reads itself twice), but its step forgets the doubling."""

    def __init__(self, d_model: int) -> None:
        super().__init__(d_model, ahead=0)

    def forward(self, x):
        return self.out_proj(2 * x)

    def allocate_cache(self, batch_size, max_len):
        return {}

    def step(self, x_t, cache):
        return self.out_proj(x_t)


class Frozen(nn.Module):
    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.used = nn.Linear(d_model, d_model)
        self.unused = nn.Linear(d_model, d_model)

    def forward(self, x):
        return self.used(x)


def test_each_check_can_fail():
    assert not check_causal(MixerSubject(lambda: Peek(16))).passed
    assert not check_causal(MixerSubject(lambda: Peek(16, ahead=30)), examples=5).passed
    assert not check_padding(MixerSubject(lambda: Peek(16))).passed
    assert not check_decode(MixerSubject(lambda: BadStep(16))).passed
    assert check_causal(MixerSubject(lambda: BadStep(16))).passed
    row = check_finite_gradients(MixerSubject(lambda: Frozen(16)))
    assert not row.passed and "unused.weight" in row.detail
