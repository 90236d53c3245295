"""The hybrid branch against hand-written references, and the registry."""

import pytest
import torch

from recall_lab.generators.errors import RecallLabError
from recall_lab.models import PAPER_MODELS, build_model, model_config
from recall_lab.models.hybrid import SparseBranch


def test_branch_with_full_pattern_is_dense_causal_attention_times_scale():
    torch.manual_seed(0)
    d_inner, d_qk, length = 12, 4, 9
    br = SparseBranch(d_inner, d_qk, 1, "full", k=length, scale_init=0.5)
    with torch.no_grad():
        br.scale.copy_(torch.linspace(-1, 1, d_inner))
    xc = torch.randn(2, length, d_inner)
    q, k = (xc @ br.qk.weight.t()).split(d_qk, dim=-1)
    s = q @ k.transpose(1, 2) / d_qk**0.5
    s = s.masked_fill(torch.triu(torch.ones(length, length, dtype=torch.bool), 1), float("-inf"))
    ref = torch.softmax(s, -1) @ xc * br.scale
    torch.testing.assert_close(br(xc), ref, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("base", ["mamba", "mamba2"])
def test_hybrid_with_zero_scale_equals_plain_ssm(base):
    """The branch only enters through side(xc) * scale: with scale 0 the hybrid is its SSM."""
    torch.manual_seed(0)
    plain = build_model(base, 20, d_model=16, d_state=8).eval()
    hybrid = build_model(f"{base}+sw", 20, d_model=16, d_state=8, k=4,
                         side_scale_init=0.0).eval()
    missing = hybrid.load_state_dict(plain.state_dict(), strict=False)
    assert missing.unexpected_keys == []
    assert all(".branch." in key for key in missing.missing_keys)
    ids = torch.randint(0, 20, (2, 17))
    with torch.no_grad():
        torch.testing.assert_close(hybrid(ids).logits, plain(ids).logits, rtol=0, atol=1e-6)
        hybrid.blocks[0].branch.scale.fill_(1.0)
        assert (hybrid(ids).logits - plain(ids).logits).abs().max() > 1e-4


def test_registry_names_and_paper_defaults():
    assert len(PAPER_MODELS) == 20 and len(set(PAPER_MODELS)) == 20
    c = model_config("mamba+hax", 40)
    assert (c.arch, c.pattern, c.d_model, c.k, c.lsh_bits, c.n_layers) == (
        "mamba", "hax", 64, 64, 8, 2)
    assert model_config("mamba2-2x", 40).d_model == 128
    assert model_config("samba", 40).k == 64
    # two-component patterns get k/2 each (make_pattern splits the total budget)
    m = build_model("mamba+hax", 40)
    parts = m.blocks[0].branch.pattern.parts
    assert sorted(p.budget for p in parts) == [32, 32]
    for bad in ("mamba+nope", "gpt", "mamba4", "mamba-2x+sw"):  # mamba3 is a zoo mixer now
        with pytest.raises(RecallLabError):
            model_config(bad, 40)


def test_output_head_is_untied_by_default_and_tied_on_request():
    ids = torch.randint(0, 30, (1, 5))
    for tie in (False, True):
        m = build_model("mamba", 30, d_model=16, tie_embeddings=tie)
        with torch.no_grad():
            h = m.embed(ids)
            for b in m.blocks:
                h = b(h, [], None)
            weight = m.embed.weight if tie else m.lm_head.weight
            torch.testing.assert_close(m(ids).logits, m.norm(h) @ weight.t())
        assert (m.lm_head is None) == tie
        head = 0 if tie else 16 * 30
        assert m.n_params() == sum(p.numel() for n, p in m.named_parameters()
                                   if not n.startswith("lm_head")) + head


def test_per_head_branch_is_causal_and_differs_from_shared():
    torch.manual_seed(0)
    per_head = build_model("mamba2+lsh", 20, d_model=16, headdim=8, d_state=8, k=4,
                           lsh_bits=2, branch_heads="mixer", side_scale_init=1.0).eval()
    assert per_head.blocks[0].branch.n_heads == 4
    ids = torch.randint(3, 20, (2, 24))
    other = ids.clone()
    other[:, 12:] = torch.randint(3, 20, (2, 12))
    with torch.no_grad():
        a, b = per_head(ids).logits, per_head(other).logits
    assert (a[:, :12] - b[:, :12]).abs().max() <= 1e-5
    assert (a[:, 12:] - b[:, 12:]).abs().max() > 1e-4


def test_run_config_fixes_the_dilated_gap_from_the_task():
    """The gap of D comes from the training task's max_len, written into config.json: train,
    eval (trimmed batches) and a resumed run build the same pattern; an old config without
    max_len is read with the task's."""
    from recall_lab.config import RunConfig, TrainConfig
    from recall_lab.generators import get_preset

    spec = get_preset("mini-mqjr")
    mcfg = model_config("mamba+sw+d", spec.vocab().size)
    cfg = RunConfig(model=mcfg, train=TrainConfig(), task=spec)
    assert mcfg.max_len is None and cfg.model.max_len == spec.max_len
    saved = cfg.to_json()
    assert saved["model"]["max_len"] == spec.max_len
    del saved["model"]["max_len"]
    assert RunConfig.model_validate(saved).model.max_len == spec.max_len
    d_part = build_model(cfg.model).blocks[0].branch.pattern.parts[1]
    assert d_part.gap == -(-spec.max_len // (mcfg.k // 2))  # ceil(max_len / (k/2))


def test_layers_hash_with_their_own_planes_in_evaluation():
    """Eval planes are seeded per layer (seed + layer), like training draws fresh planes per
    call: two layers must not share planes."""
    for name in ("mamba+lsh", "mamba2+hax"):
        m = build_model(name, 20, d_model=16, d_state=8, k=4, n_layers=3).eval()
        lsh = [mod for mod in m.modules() if type(mod).__name__ == "LSHPattern"]
        assert [p.seed for p in lsh] == [0, 1, 2]
        planes = [p.planes(8, 1) for p in lsh]
        assert not torch.equal(planes[0], planes[1]) and not torch.equal(planes[1], planes[2])
    opts = build_model("mamba+lsh", 20, d_model=16, d_state=8, k=4, pattern_opts={"seed": 5})
    assert [b.branch.pattern.seed for b in opts.blocks] == [5, 6]


# --- the leak-audit switch: branch_semantics = "release" -------------------------------------


def test_release_patterns_are_the_release_archs():
    from recall_lab.attention.release_reference import RELEASE_ARCHS
    from recall_lab.config import RELEASE_PATTERNS

    assert set(RELEASE_PATTERNS) == set(RELEASE_ARCHS) - {"full"}


def test_release_semantics_needs_a_release_pattern():
    with pytest.raises(ValueError, match="branch_semantics .release. needs"):
        model_config("mamba", 20, branch_semantics="release")
    with pytest.raises(ValueError, match="branch_semantics .release. needs"):
        model_config("mamba+seattn", 20, branch_semantics="release")


def test_release_branch_equals_ours_on_a_causal_fixed_pattern():
    """sw has no centring and no empty rows: there the release's dense mask and our key indices
    must give the same branch output from the same weights."""
    torch.manual_seed(0)
    ours = SparseBranch(12, 4, 1, "sw", k=4, scale_init=0.7)
    rel = SparseBranch(12, 4, 1, "sw", k=4, scale_init=0.7, semantics="release")
    rel.load_state_dict(ours.state_dict())
    xc = torch.randn(2, 11, 12)
    torch.testing.assert_close(rel(xc), ours(xc), rtol=1e-5, atol=1e-6)


def _future_change(model: torch.nn.Module, t: int) -> float:
    ids = torch.randint(3, 20, (1, 24), generator=torch.Generator().manual_seed(3))
    other = ids.clone()
    other[:, t + 1:] = (other[:, t + 1:] - 3 + 1) % 17 + 3
    with torch.no_grad():
        torch.manual_seed(0)  # the release draws fresh LSH planes on every call
        a = model(ids).logits
        torch.manual_seed(0)
        b = model(other).logits
    return (a[:, : t + 1] - b[:, : t + 1]).abs().max().item()


@pytest.mark.parametrize("name", ["mamba+lsh", "mamba+ks", "mamba+hax"])
def test_release_semantics_reads_the_future_and_ours_does_not(name):
    """What the leak audit measures: with the release's semantics, logits before position t
    change when tokens after t change (centring over the sequence, the cumsum summary's
    normalisation, uniform empty rows); the same weights with our op do not."""
    torch.manual_seed(0)
    kw = dict(d_model=16, d_state=8, k=4, lsh_bits=3, side_scale_init=1.0)
    ours = build_model(name, 20, **kw).eval()
    rel = build_model(name, 20, branch_semantics="release", **kw).eval()
    rel.load_state_dict(ours.state_dict())
    assert _future_change(ours, 10) <= 1e-5
    assert _future_change(rel, 10) > 1e-3
