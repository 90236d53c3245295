"""DeciMamba in the model: P >= context is the plain model bit for bit, targets are never dropped,
outputs from the first SEP on are causal and independent of padding and batch-mates, config and
registry checks, --decimate parsing, auto layers by Mamba Mean Distance."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from recall_lab.analysis.collect import capture
from recall_lab.analysis.mean_distance import mamba_mean_distance_last
from recall_lab.generators import IGNORE, generate, get_preset
from recall_lab.generators.errors import RecallLabError
from recall_lab.models import build_model
from recall_lab.models.decimation import parse_decimate, resolve_auto_layers

SPEC = get_preset("mini-mqar-filler")  # 8 pairs, 30 filler, first SEP at 47, length 64
V = SPEC.vocab().size


def _model(name="mamba+deci", **deci):
    torch.manual_seed(0)
    m = build_model(name, V, d_model=16, d_state=4, decimation={"min_len": 4, **deci})
    return m.double().eval()


def _ids(n=3, seed=0):
    b = generate(SPEC, n, seed)
    return torch.from_numpy(b.inputs), torch.from_numpy(b.targets)


@pytest.mark.parametrize("name", ["mamba+deci", "mamba2+deci"])
def test_keep_everything_is_the_plain_model_bit_for_bit(name):
    model = _model(name, L_base=10_000, layers=(0, 1))
    ids, _ = _ids()
    with torch.no_grad():
        out = model(ids)
        model.decimation = None
        plain = model(ids)
    assert out.kept.all()
    assert torch.equal(out.logits, plain.logits)


@pytest.mark.parametrize("name", ["mamba+deci", "mamba2+deci"])
def test_targets_never_dropped_and_context_shrinks(name):
    model = _model(name, L_base=12, beta=0.5, layers=(0, 1))
    ids, tgt = _ids(8)
    with torch.no_grad():
        out = model(ids)
    sep = 1 + 16 + 30
    assert (out.kept[:, sep:]).all()
    assert out.kept[tgt != IGNORE].all()
    # layer 0 keeps 12 context tokens, layer 1 keeps 6 of those: 6 context positions have logits
    assert (out.kept[:, :sep].sum(1) == 6).all()
    assert (out.logits[~out.kept] == 0).all()


def test_causal_and_pad_and_batch_invariant_from_the_first_sep():
    model = _model(L_base=9, layers=(1,))
    ids, _ = _ids(2, seed=1)
    sep = int((ids[0] == 2).nonzero()[0])
    with torch.no_grad():
        full = model(ids)
        for t in (sep, sep + 5, ids.shape[1] - 2):
            cut = model(ids[:, : t + 1])  # nothing after t
            torch.testing.assert_close(cut.logits[:, sep:], full.logits[:, sep : t + 1],
                                       rtol=1e-12, atol=1e-12)
            other = ids.clone()
            other[:, t + 1:] = torch.randint(3, V, other[:, t + 1:].shape)
            torch.testing.assert_close(model(other).logits[:, sep : t + 1],
                                       full.logits[:, sep : t + 1], rtol=1e-12, atol=1e-12)
        padded = torch.cat([ids, torch.zeros(2, 7, dtype=ids.dtype)], 1)
        torch.testing.assert_close(model(padded).logits[:, : ids.shape[1]], full.logits,
                                   rtol=1e-12, atol=1e-12)
        # batch-mate of another length (and context): same logits as alone
        short = _ids(1, seed=2)[0][:, :55]
        mate = torch.cat([short, torch.zeros(1, ids.shape[1] - 55, dtype=ids.dtype)], 1)
        both = model(torch.cat([ids[:1], mate]))
        torch.testing.assert_close(both.logits[0], full.logits[0], rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(both.logits[1, :55], model(short).logits[0],
                                   rtol=1e-12, atol=1e-12)


def test_decimated_model_trains_with_gradients_on_kept_path():
    model = _model(L_base=8, layers=(1,)).train()
    ids, tgt = _ids(4)
    out = model(ids)
    loss = torch.nn.functional.cross_entropy(out.logits.reshape(-1, V), tgt.reshape(-1),
                                             ignore_index=IGNORE)
    loss.backward()
    assert torch.isfinite(loss)
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


def test_registry_and_config_checks():
    cfg = build_model("mamba+deci", V).config
    assert cfg.decimation is not None and cfg.decimation.layers == (-1,)
    with pytest.raises(RecallLabError, match="cannot be combined"):
        build_model("mamba+deci+sw", V)
    with pytest.raises(ValueError, match="out of range"):
        build_model("mamba+deci", V, decimation={"layers": (2,)})
    with pytest.raises(ValueError, match="plain mamba"):
        build_model("mamba+sw", V, decimation={})


def test_parse_decimate():
    c = parse_decimate("L_base=64,layers=0+1,score=l2,beta=0.25")
    assert (c.L_base, c.layers, c.score, c.beta) == (64, (0, 1), "l2", 0.25)
    assert parse_decimate("layers=auto,n_auto=2").layers == "auto"
    assert parse_decimate("top_k=0.5").top_k == 0.5
    for bad in ("L_base", "layers=a", "score=max", "L_base=0"):
        with pytest.raises(RecallLabError):
            parse_decimate(bad)


def test_auto_layers_pick_the_largest_mamba_mean_distance():
    model = _model(L_base=10, layers="auto", n_auto=1)
    ids, _ = _ids(2)
    with pytest.raises(RecallLabError, match="auto"):
        model(ids)
    model.decimation, saved = None, model.decimation
    md = [float(mamba_mean_distance_last(p).nanmean()) for p in capture(model, ids).params]
    model.decimation = saved
    chosen = resolve_auto_layers(model, ids)
    assert chosen.layers == (int(np.argmax(md)),)
    assert model(ids).kept.sum(1).tolist() == [10 + 17, 10 + 17]


def test_decimation_off_in_toml_means_none():
    cfg = build_model("mamba+deci", V, decimation="off").config
    assert cfg.decimation is None


def test_deci_rows_are_listed_and_build():
    from recall_lab.models import DECI_MODELS

    for name in DECI_MODELS:
        cfg = build_model(name, V, d_model=16, d_state=4).config
        assert cfg.decimation is not None and cfg.arch == name.split("+")[0]
