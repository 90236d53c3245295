"""Recurrent decoding of every registered model equals its parallel forward (float64, eval mode,
LSH planes fixed), with prompts longer than every window and inputs with tied scores; DeciMamba's
prefill + step equals the parallel decimated forward from SEP on; the decode state of the
constant-memory (CISA/CDSA) hybrids does not grow with L."""

from functools import cache

import pytest
import torch

from recall_lab.attention import make_pattern
from recall_lab.attention.decode import make_decoder
from recall_lab.generators.vocab import Vocab
from recall_lab.models import build_model, listed_models, model_config
from recall_lab.models.decode import decode, state_growth

VOCAB, LENGTH, SEP_AT = 23, 30, 17  # k = 8 and chunk P = 4 are far shorter than the prompt


@cache
def tiny(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    # side_scale_init = 1: the branch weighs as much as the SSM, so a wrong key set shows
    extra = {"decimation": {"min_len": 4, "L_base": 6}} if "deci" in name else {}
    return build_model(name, VOCAB, d_model=16, k=8, d_state=8, lsh_bits=3, n_heads=2,
                       side_scale_init=1.0, max_len=LENGTH, **extra).double().eval()


def _ids(kind: str) -> torch.Tensor:
    g = torch.Generator().manual_seed(3)
    if kind == "random":
        ids = torch.randint(3, VOCAB, (2, LENGTH), generator=g)
    else:  # ties: repeated tokens give equal keys, equal LSH bins and tied KS scores
        ids = torch.tensor([[5, 6, 7] * (LENGTH // 3), [9] * LENGTH])
    ids[:, SEP_AT] = Vocab.SEP  # DeciMamba prefills the context before SEP
    return ids


@pytest.mark.parametrize("kind", ["random", "ties"])
@pytest.mark.parametrize("name", listed_models())
def test_decoding_equals_parallel_forward(name, kind):
    model = tiny(name)
    ids = _ids(kind)
    with torch.no_grad():
        out = model(ids)
    stepped = decode(model, ids, n_prefill=SEP_AT)
    if out.kept is None:
        torch.testing.assert_close(stepped, out.logits, rtol=1e-9, atol=1e-9)
    else:  # DeciMamba: the inquiry from SEP on (positions before it may be dropped)
        torch.testing.assert_close(stepped[:, SEP_AT:], out.logits[:, SEP_AT:], rtol=1e-9,
                                   atol=1e-9)
        assert not out.kept[:, :SEP_AT].all()  # the prefill really dropped context tokens


def test_decode_sees_the_context():
    """The check above could not fail if the step ignored the keys: change one early token."""
    model = tiny("mamba+hax")
    ids = _ids("random")
    other = ids.clone()
    other[:, 2] = (other[:, 2] - 3 + 1) % (VOCAB - 3) + 3
    a, b = decode(model, ids), decode(model, other)
    assert (a[:, -1] - b[:, -1]).abs().max() > 1e-6


def _constant_hybrids() -> list[str]:
    return [n for n in listed_models()
            if model_config(n, VOCAB).pattern is not None and state_growth(tiny(n)) == "constant"]


def test_constant_memory_hybrids_are_the_cisa_cdsa_ones():
    names = set(_constant_hybrids())
    for base in ("mamba", "mamba2"):
        assert {f"{base}+{p}" for p in ("sw", "d", "a", "sw+d", "lsh", "ks", "hax",
                                        "seattn-nomem")} <= names
    assert not names & {"mamba+seattn", "mamba+attamba", "mamba+full", "test-mamba+stride"}
    assert state_growth(tiny("transformer")) == "L"
    assert state_growth(tiny("attamba")) == "L/P"


def test_model_cache_bytes_stop_growing():
    model = tiny("mamba+hax")
    ids = torch.randint(3, VOCAB, (1, 400), generator=torch.Generator().manual_seed(0))
    cache = model.allocate_cache(1, 400)
    sizes = []
    with torch.no_grad():
        for t in range(200):
            model.step(ids[:, t], cache)
            if t + 1 in (100, 200):
                sizes.append(cache.nbytes())
    assert sizes[0] == sizes[1] > 0
    full = build_model("transformer", VOCAB, d_model=16, n_heads=2).eval()
    c = full.allocate_cache(1, 400)
    with torch.no_grad():
        for t in range(40):
            full.step(ids[:, t], c)
            if t == 19:
                early = c.nbytes()
    assert c.nbytes() > early  # the measure can tell growth apart


@pytest.mark.slow
def test_cisa_cdsa_decode_state_same_bytes_after_100_and_10000_tokens():
    """Every branch pattern of a constant-memory hybrid, stepped alone (cheap): its decode state
    has the same size after 100 and after 10,000 tokens; a full-attention one grows."""
    patterns = {}
    for name in _constant_hybrids():
        for module in tiny(name).modules():
            pattern = getattr(module, "pattern", None)
            if isinstance(pattern, torch.nn.Module):
                patterns.setdefault(getattr(pattern, "name", name), pattern)
    assert {"sw", "d", "a", "sw+d", "lsh", "ks", "hax"} <= set(patterns)
    # a part of a union (sw, sink, d, lsh, ks) is stepped inside it: skip it alone (time)
    parts = {p.name for u in patterns.values() for p in getattr(u, "parts", ())}
    patterns = {n: p for n, p in patterns.items() if n not in parts}
    patterns["full"] = make_pattern("full", 8)
    x = torch.randn(3, 10_000, 1, 1, 8, generator=torch.Generator().manual_seed(0),
                    dtype=torch.float64)
    for name, pattern in patterns.items():
        dec = make_decoder(pattern)
        sizes = {}
        with torch.no_grad():
            for t in range(10_000):
                dec.step(x[0, t], x[1, t], x[2, t])
                if t + 1 in (100, 10_000):
                    sizes[t + 1] = dec.nbytes()
        if name == "full":
            assert sizes[10_000] > 50 * sizes[100]
        else:
            assert sizes[100] == sizes[10_000] > 0, name


def test_models_listing_shows_the_decode_state():
    from recall_lab.models.registry import listing_row
    assert listing_row("mamba+sw", VOCAB)["decode state"].startswith("const ")
    assert listing_row("transformer", VOCAB)["decode state"] == "grows as L"
    assert listing_row("attamba", VOCAB)["decode state"] == "grows as L/P"


@pytest.mark.parametrize("name,deci", [
    ("mamba+deci", {"layers": (0, 1), "L_base": 8, "min_len": 3}),  # two decimating layers
    ("mamba2+deci", {"top_k": 0.5, "min_len": 3, "score": "l2"}),
])
def test_decimated_prefill_then_step_equals_parallel_decimated_forward(name, deci):
    torch.manual_seed(0)
    model = build_model(name, VOCAB, d_model=16, d_state=8, decimation=deci).double().eval()
    ids = _ids("random")
    with torch.no_grad():
        out = model(ids)
    assert out.kept[:, :SEP_AT].sum(1).max() <= SEP_AT // 2 + 1  # about half the context dropped
    stepped = decode(model, ids, n_prefill=SEP_AT)
    torch.testing.assert_close(stepped[:, SEP_AT:], out.logits[:, SEP_AT:], rtol=1e-9, atol=1e-9)
    # without decimation in the prefill the inquiry's logits differ: the test can fail
    model.decimation, saved = None, model.decimation
    plain = decode(model, ids, n_prefill=SEP_AT)
    model.decimation = saved
    assert (plain[:, SEP_AT:] - out.logits[:, SEP_AT:]).abs().max() > 1e-6
