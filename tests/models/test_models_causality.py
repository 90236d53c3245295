"""Strict causality of every named model: changing tokens after position t, cutting the sequence
after t, or padding it on the right (PAD = 0, as a longer batch-mate does) never changes the
logits at positions <= t (eval mode with its seeded hash planes; training mode with the same RNG
state, for models whose patterns draw no random planes)."""

from functools import cache

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from recall_lab.attention.patterns import LSHPattern
from recall_lab.models import (
    ATTAMBA_MODELS,
    CONTROL_MODELS,
    PAPER_MODELS,
    SEATTN_MODELS,
    build_model,
    registered_models,
)
from recall_lab.models.registry import mixer_models
from recall_lab.testing import ModelSubject, future_leak, length_leak

VOCAB, LENGTH = 23, 40
# the models are built by `tiny`; the subject only draws the ids and reads the logits
SUBJECT = ModelSubject(factory=None, vocab=VOCAB)
# the built-in rows, the registered ones and every named contract mixer (entry points)
NAMES = (PAPER_MODELS + SEATTN_MODELS + ATTAMBA_MODELS + CONTROL_MODELS + registered_models()
         + mixer_models())


@cache
def tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    # k = 8 < LENGTH so every pattern is genuinely sparse; d_state small keeps it fast
    # max_len = LENGTH: the dilated gap is ceil(40 / 4) = 10, so D has keys in every test sequence
    return build_model(name, VOCAB, d_model=16, k=8, d_state=8, lsh_bits=3, n_heads=2,
                       side_scale_init=1.0, max_len=LENGTH)


def _leak(name: str, seed: int, t: int, training: bool) -> float:
    """The harness's future-leak measure (recall_lab.testing, as `recall-lab check` runs it)."""
    model = tiny(name).train(training)
    return future_leak(SUBJECT, model, torch.float32, LENGTH, t, seed)


@pytest.mark.parametrize("name", NAMES)
def test_every_model_is_causal(name):
    for t in (0, 9, 23):
        assert _leak(name, seed=t, t=t, training=False) <= 1e-5
    # the future must matter somewhere, or the test could not fail
    model = tiny(name).eval()
    ids = torch.randint(3, VOCAB, (1, LENGTH), generator=torch.Generator().manual_seed(1))
    other = ids.clone()
    other[:, 20:] = (other[:, 20:] - 3 + 1) % (VOCAB - 3) + 3
    with torch.no_grad():
        assert (model(ids).logits[:, 20:] - model(other).logits[:, 20:]).abs().max() > 1e-4


@given(name=st.sampled_from(NAMES), seed=st.integers(0, 2**16),
       t=st.integers(0, LENGTH - 2), training=st.booleans())
def test_causality_property(name, seed, t, training):
    assert _leak(name, seed, t, training) <= 1e-5


def _random_in_training(model: torch.nn.Module) -> bool:
    """LSH planes are drawn fresh per training call; how much RNG the layers before consume can
    depend on the length (KS samples), so training mode is only compared without LSH."""
    return any(isinstance(m, LSHPattern) for m in model.modules())


def _length_leak(name: str, seed: int, t: int, pad: int, training: bool) -> float:
    """Largest change of the logits at positions <= t when the sequence is cut after t, and when
    PAD tokens are appended (alone, and as the short row of a batch with a longer row): the
    harness's measure (recall_lab.testing)."""
    model = tiny(name).train(training)
    return length_leak(SUBJECT, model, torch.float32, LENGTH, t, pad, seed)


@pytest.mark.parametrize("name", NAMES)
def test_every_model_ignores_length_and_padding(name):
    for t, pad in ((0, 1), (17, 25), (LENGTH - 2, 60)):
        assert _length_leak(name, seed=t, t=t, pad=pad, training=False) <= 1e-5
        if not _random_in_training(tiny(name)):
            assert _length_leak(name, seed=t, t=t, pad=pad, training=True) <= 1e-5


@given(name=st.sampled_from(NAMES), seed=st.integers(0, 2**16),
       t=st.integers(0, LENGTH - 2), pad=st.integers(1, 70))
def test_length_and_padding_property(name, seed, t, pad):
    assert _length_leak(name, seed, t, pad, training=False) <= 1e-5
