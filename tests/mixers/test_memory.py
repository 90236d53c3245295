"""The layer-as-a-memory construction (mixers/memory.py), each zoo layer's hook, and a row's
capacity search (experiments/memory.py)."""

from pathlib import Path

import pytest
import torch

from recall_lab.experiments.memory import capacity, information_bound, model_memory
from recall_lab.generators.errors import RecallLabError
from recall_lab.mixers.based import Based
from recall_lab.mixers.deltanet import DeltaNet, GatedDeltaNet
from recall_lab.mixers.gla import GatedLinearAttention as GLA
from recall_lab.mixers.linear_attn import LinearAttention
from recall_lab.mixers.memory import (
    MemorySpec,
    low_coherence_frame,
    phi,
    read_out,
    seed_accuracy,
    spec_of,
)
from recall_lab.ssm import Mamba2Mixer

E = torch.eye(16)  # codes e_0 .. e_15 as the codebook: outputs read off by hand


def test_superposed_memory_against_hand_values():
    spec = MemorySpec("sum", 1, 2, 16)
    keys = torch.tensor([[[2.0, 0.0], [1.0, 2.0]]])  # k1, k2
    y = torch.tensor([[3, 5]])
    o = read_out(spec, keys, E, y)[0]
    # S = k1 e3^T + k2 e5^T; S^T k1 = 4 e3 + 2 e5, S^T k2 = 2 e3 + 5 e5
    assert torch.allclose(o[0, [3, 5]], torch.tensor([4.0, 2.0]))
    assert torch.allclose(o[1, [3, 5]], torch.tensor([2.0, 5.0]))
    assert float(o.abs().sum()) == pytest.approx(13.0)


def test_delta_rule_against_hand_values():
    spec = MemorySpec("delta", 1, 2, 16, "l2")
    keys = torch.tensor([[[1.0, 0.0], [0.6, 0.8]]])
    y = torch.tensor([[3, 5]])
    o = read_out(spec, keys, E, y, torch.tensor([[0, 1]]))[0]
    # S = k1 e3^T, then S += k2 (e5 - S^T k2)^T = k2 (e5 - 0.6 e3)^T:
    # S^T k1 = e3 + 0.6 (e5 - 0.6 e3) = 0.64 e3 + 0.6 e5; S^T k2 = 0.6 e3 + e5 - 0.6 e3 = e5
    assert torch.allclose(o[0, [3, 5]], torch.tensor([0.64, 0.6]), atol=1e-5)
    assert torch.allclose(o[1], E[5], atol=1e-5)
    # written the other way round, the last write (k1) is the exact one
    o = read_out(spec, keys, E, y, torch.tensor([[1, 0]]))[0]
    assert torch.allclose(o[0], E[3], atol=1e-5)


def test_normalisers_by_hand():
    keys = torch.tensor([[[1.0, 0.0], [0.0, 3.0]]])  # orthogonal: each reads its own code
    y = torch.tensor([[3, 5]])
    z = read_out(MemorySpec("sum", 1, 2, 16, normaliser="z"), keys, E, y)[0]
    assert torch.allclose(z[1], E[5], atol=1e-5)  # 9 e5 / 9
    rms = read_out(MemorySpec("sum", 1, 2, 16, normaliser="rms_head"), keys, E, y)[0]
    assert torch.allclose(rms[1], 4.0 * E[5], atol=1e-3)  # 9 e5 / sqrt(81 / 16)


@pytest.mark.parametrize(("heads", "width"), [(1, 8), (4, 4)])
def test_designed_key_delta_rule_holds_d_k_pairs_exactly(heads, width):
    spec = MemorySpec("delta", heads, width, 16, "l2", width ** -0.5, "rms_head")
    assert seed_accuracy(spec, width, "designed", tables=64, seed=1) == 1.0
    frame = low_coherence_frame(3, width, width, torch.Generator().manual_seed(0))
    assert torch.allclose(frame @ frame.transpose(-1, -2), torch.eye(width).double().expand(
        3, width, width), atol=1e-10)


def test_low_coherence_frame_spreads_past_d():
    frame = low_coherence_frame(1, 6, 2, torch.Generator().manual_seed(0))[0]
    g = (frame @ frame.T).abs().fill_diagonal_(0)
    # six lines in the plane: the best frame has coherence cos(pi / 6) = 0.866
    assert float(g.max()) < 0.9
    assert torch.allclose(frame.norm(dim=-1), torch.ones(6, dtype=torch.float64))


def test_taylor_path_matches_its_kernel():
    q, k = torch.tensor([1.0, 0.0]), torch.tensor([1.0, 1.0])
    s = 1 / 2 ** 0.5  # q . k / sqrt(2)
    assert float(phi("taylor", q) @ phi("taylor", k)) == pytest.approx(1 + s + s * s / 2)


def test_each_zoo_layer_describes_its_memory():
    la = LinearAttention(64, feature_map="taylor", feature_dim=2).memory_spec()
    assert (la.rule, la.key_map, la.normaliser, la.key_width, la.value_width, la.state) == (
        "sum", "taylor", "z", 2, 64, 7 * 65)
    assert Based(64, 0, feature_dim=2).memory_spec() is None  # the sliding window
    assert Based(64, 1, feature_dim=2).memory_spec() == MemorySpec("sum", 1, 2, 64, "taylor",
                                                                   1.0, "z")
    dn = DeltaNet(64, num_heads=4, expand_k=0.25).memory_spec()
    assert (dn.rule, dn.heads, dn.key_width, dn.value_width, dn.state) == ("delta", 4, 4, 16, 256)
    assert GatedDeltaNet(64, num_heads=4, expand_k=0.25).memory_spec() == dn
    gla = GLA(64, num_heads=16).memory_spec()
    assert (gla.heads, gla.key_width, gla.value_width, gla.state) == (16, 2, 4, 128)
    m2 = Mamba2Mixer(64, d_state=1).memory_spec()
    assert (m2.shared_keys, m2.heads, m2.key_width, m2.value_width) == (True, 2, 1, 64)
    assert spec_of(torch.nn.Linear(2, 2)) == "n/a"  # no hook


def test_capacity_search_and_the_bound():
    # one head of 8 with designed keys holds exactly 8 pairs: 9 cannot all be orthogonal
    spec = MemorySpec("delta", 1, 8, 16, "l2", 8 ** -0.5, "rms_head")
    cap = capacity(spec, "designed", seeds=4, tables=16, n_max=64)
    assert cap.n >= 8 and cap.counts[8][0] == cap.counts[8][1] >= 2  # every seed run solved
    assert cap.lo <= cap.n <= cap.hi
    assert information_bound(1036) == 8288  # 1,036 numbers x 32 bits / log2 16
    with pytest.raises(RecallLabError, match="keys must be"):
        capacity(spec, "learned")


def test_model_memory_finds_the_rows_layer():
    class Block(torch.nn.Module):
        def __init__(self, mixer, branch=None):
            super().__init__()
            self.mixer, self.branch = mixer, branch

    class Model(torch.nn.Module):
        def __init__(self, *blocks):
            super().__init__()
            self.blocks = torch.nn.ModuleList(blocks)

    based = Model(Block(Based(64, 0, feature_dim=2)), Block(Based(64, 1, feature_dim=2)))
    assert model_memory(based).key_map == "taylor"
    assert model_memory(Model(Block(torch.nn.Linear(2, 2)))) == "n/a"
    hax = Model(Block(Mamba2Mixer(64, d_state=4), branch=torch.nn.Linear(2, 2)))
    assert model_memory(hax) == "excluded"


def test_place_says_na_without_the_hook_and_measures_only_when_asked():
    from recall_lab.experiments.place import _memory_lines

    na = _memory_lines({"memory": {"random": "n/a", "designed": "n/a",
                                   "information_bound": None}})
    assert "n/a" in na[0] and "memory_spec()" in na[0]
    later = _memory_lines({"memory": {"random": "not measured", "designed": "not measured",
                                      "information_bound": 8192}})
    assert "place --memory" in later[0]
    done = _memory_lines({"memory": {"random": "3 [3, 4]", "designed": "5 [5, 5]",
                                     "information_bound": 8192}})
    assert "random keys 3 [3, 4]" in done[0] and "8192" in done[0]


@pytest.mark.parametrize("spec", [
    MemorySpec("sum", 1, 2, 64, "taylor", 1.0, "z"),
    MemorySpec("delta", 4, 4, 16, "l2", 0.5, "rms_head"),
    MemorySpec("sum", 2, 4, 64, "identity", 1.0, "rms_all", shared_keys=True),
])
def test_the_docs_numpy_construction_is_the_labs(spec):
    """docs/results/memory-theory/README.md's numpy block, run, equals `read_out`."""
    import numpy as np

    from recall_lab.mixers.memory import codebook

    text = (Path(__file__).parents[2] / "docs" / "results" / "memory-theory"
            / "README.md").read_text()
    block = text.split("<!-- numpy-construction -->")[1].split("```python")[1].split("```")[0]
    space: dict = {}
    exec(block, space)  # noqa: S102  the page's own code, as a reader would run it
    rng = np.random.default_rng(0)
    n = 7
    keys = rng.standard_normal((1 if spec.shared_keys else spec.heads, n, spec.key_width))
    keys = np.repeat(keys, spec.heads, 0) if spec.shared_keys else keys
    e = codebook(spec.heads * spec.value_width, torch.Generator().manual_seed(1)).numpy()
    y, order = rng.integers(0, 16, n), rng.permutation(n)
    theirs = space["layer_outputs"](spec.rule, keys, e, y, spec.key_map, spec.query_scale,
                                    spec.normaliser, order)
    ours = read_out(spec, torch.tensor(keys), torch.tensor(e), torch.tensor(y)[None],
                    torch.tensor(order)[None])[0].numpy()
    assert np.allclose(theirs, ours, atol=1e-9)


def test_the_reports_memory_table():
    from recall_lab.experiments.memory import Capacity, RowMemory, memory_lines, memory_table

    spec = MemorySpec("sum", 16, 2, 4)
    caps = {"random": Capacity("random", 6, 5, 6, False),
            "designed": Capacity("designed", 8, 8, 9, False, True)}
    rows = [{"row": "gla / num_heads=16", "state": "128", "frontier": (16, 16, 16),
             "memory": RowMemory(spec, None, caps, 8192)},
            {"row": "mamba2+hax", "state": "136,224", "frontier": None,
             "memory": RowMemory(None, "excluded")}]
    head, lines = memory_table(rows)
    assert lines[0] == ["gla / num_heads=16", "128", "16 [16, 16]", "6 [5, 6]", "8 [8, >9]",
                        "8,192", "2.7", "2"]
    assert lines[1][2:] == ["open", "excluded", "excluded", "-", "-", "-"]
    assert len(head) == len(lines[0])
    text = "\n".join(memory_lines({"memory": rows}))
    assert "neither is a ceiling" in text and "exploratory" in text
    assert memory_lines({}) == []
