"""KS attention (paper 004 Eq. 12-17) re-implemented from the equations with plain loops, against
`KSPattern` and the `mamba+ks` branch with the same weights.

The reference shares no code with `recall_lab.attention.patterns`: it evaluates the scoring MLP
with explicit matrix products, takes each query's top-n by sorting Python lists, and builds the
ranking loss pair by pair. Choices the paper leaves open, taken as documented in DESIGN.md and
the release:
* Eq. 13, ``Top-k{x_1..x_i}``: query i may select its own position; ties are unspecified, so the
  inputs are drawn such that no two scores tie (asserted).
* Eq. 15 gives ``y = sigmoid(A') * M[I]`` of shape ``L x k`` but uses ``y in R^k`` in Eq. 16: the
  query axis is summed (the release's reduction); ``A'`` is scaled by ``1/sqrt(d)`` (the release
  divides k by sqrt(d)).
* The k candidate keys are sampled per (batch, head) without replacement; the test replays the
  same torch RNG draw to know which ones.
"""

from __future__ import annotations

import itertools
import math

import pytest
import torch

from recall_lab.attention import make_pattern
from recall_lab.models import build_model


def _linears(ks) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(m.weight, m.bias) for m in ks.mlp if isinstance(m, torch.nn.Linear)]


def _randomise(ks, seed: int) -> None:
    """Weights of our own (not the module's init), wide enough that no ReLU layer is dead."""
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for w, b in _linears(ks):
            w.copy_(torch.randn(w.shape, generator=g, dtype=torch.float64) / math.sqrt(w.shape[1]))
            b.copy_(torch.randn(b.shape, generator=g, dtype=torch.float64) * 0.1)


def ref_score(layers, k_j: torch.Tensor, q_prefix: torch.Tensor) -> torch.Tensor:
    """Eq. 14: MLP([k_j, normalize(sum_{p<=j} q_p)]) with explicit products (ReLU between)."""
    s = q_prefix.sum(0)
    z = torch.cat([k_j, s / s.norm().clamp_min(1e-12)])
    for n, (w, b) in enumerate(layers):
        z = w @ z + b
        if n < len(layers) - 1:
            z = torch.relu(z)
    return z[0]


def ref_scores(layers, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    B, H, L, _ = q.shape
    return torch.stack([
        torch.stack([torch.stack([ref_score(layers, k[b, h, j], q[b, h, : j + 1])
                                  for j in range(L)]) for h in range(H)]) for b in range(B)])


def ref_selection(x: torch.Tensor, n: int) -> dict[tuple[int, int, int], set[int]]:
    """Eq. 13: for query i the n highest of x_0..x_i (own position included)."""
    B, H, L = x.shape
    out = {}
    for b, h, i in itertools.product(range(B), range(H), range(L)):
        order = sorted(range(i + 1), key=lambda j: -float(x[b, h, j]))
        out[b, h, i] = set(order[:n])
    return out


def ref_loss(layers, q, k, sel: torch.Tensor, scale: float) -> torch.Tensor:
    """Eq. 15-17 for each (batch, head), averaged: pairs (a, b) over the n sampled keys."""
    B, H, L, _ = q.shape
    total, rows = 0.0, 0
    for b, h in itertools.product(range(B), range(H)):
        js = [int(j) for j in sel[b, h]]
        x = [ref_score(layers, k[b, h, j], q[b, h, : j + 1]) for j in js]
        y = [sum(float(torch.sigmoid(scale * (q[b, h, i] @ k[b, h, j]))) for i in range(j, L))
             for j in js]
        row = 0.0
        for a, c in itertools.product(range(len(js)), repeat=2):
            t = 1.0 if y[a] > y[c] else (0.5 if y[a] == y[c] else 0.0)
            z = x[a] - x[c]
            row = row - (t * torch.nn.functional.logsigmoid(z)
                         + (1 - t) * torch.nn.functional.logsigmoid(-z))
        total = total + row / len(js) ** 2
        rows += 1
    return total / rows


def test_ks_indices_match_the_paper_reference():
    B, H, L, d, n = 2, 3, 37, 4, 8
    g = torch.Generator().manual_seed(1)
    q = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    k = torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    ks = make_pattern("ks", n, dim=d).double().eval()
    _randomise(ks, 2)
    layers = [(w.detach(), b.detach()) for w, b in _linears(ks)]
    with torch.no_grad():
        x = ref_scores(layers, q, k)
        assert bool((x.sort(-1).values.diff(dim=-1) > 1e-6).all())  # no ties: one right answer
        torch.testing.assert_close(ks.scores(q, k), x, rtol=1e-5, atol=1e-5)
        idx, aux = ks(q, k)
    assert aux is None
    want = ref_selection(x, n)
    for key, keys in want.items():
        got = [int(j) for j in idx[key] if j >= 0]
        assert len(got) == len(set(got)) and set(got) == keys, (key, got, keys)


def test_ks_ranking_loss_and_its_gradient_match_the_paper_reference():
    B, H, L, d, n = 2, 2, 29, 4, 8
    g = torch.Generator().manual_seed(3)
    # wide q, k: the sigmoids spread, so the target order is not just "earlier key = more queries"
    q = 3 * torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    k = 3 * torch.randn(B, H, L, d, generator=g, dtype=torch.float64)
    ks = make_pattern("ks", n, dim=d).double().train()
    _randomise(ks, 4)
    torch.manual_seed(11)
    _, aux = ks(q, k)
    aux.backward()
    torch.manual_seed(11)  # the module's only draw: n of L keys per (batch, head)
    sel = torch.rand(B, H, L).topk(n, dim=-1).indices
    layers = [(w.detach().clone().requires_grad_(), b.detach().clone().requires_grad_())
              for w, b in _linears(ks)]
    ref = ref_loss(layers, q, k, sel, d**-0.5)
    ref.backward()
    torch.testing.assert_close(aux.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    for (w, b), (rw, rb) in zip(_linears(ks), layers, strict=True):
        torch.testing.assert_close(w.grad, rw.grad, rtol=1e-4, atol=1e-6)
        torch.testing.assert_close(b.grad, rb.grad, rtol=1e-4, atol=1e-6)


def test_mamba_ks_branch_is_wired_like_the_paper():
    """The `mamba+ks` branch of layer 0 against the reference: q, k = the branch's projection of
    the SSM's post-conv input xc (d_state wide), v = xc, softmax(q_i . k_j / sqrt(d_state)) over
    the reference selection, times the learned per-channel vector."""
    torch.manual_seed(0)
    d_state, n = 4, 8
    model = build_model("mamba+ks", 19, d_model=16, d_state=d_state, k=n, side_scale_init=0.7,
                        max_len=40).double().eval()
    branch = model.blocks[0].branch
    _randomise(branch.pattern, 5)
    seen = {}
    handle = branch.register_forward_hook(lambda m, a, o: seen.update(xc=a[0], out=o))
    ids = torch.randint(3, 19, (2, 33), generator=torch.Generator().manual_seed(6))
    with torch.no_grad():
        model(ids)
    handle.remove()
    xc, out = seen["xc"], seen["out"]
    B, L, D = xc.shape
    with torch.no_grad():
        w = branch.qk.weight  # [2 d_state, D]: first half q, second half k
        q = (xc @ w[:d_state].T)[:, None]
        k = (xc @ w[d_state:].T)[:, None]
        layers = [(a.detach(), b.detach()) for a, b in _linears(branch.pattern)]
        x = ref_scores(layers, q, k)
        assert bool((x.sort(-1).values.diff(dim=-1) > 1e-9).all())
        sel = ref_selection(x, n)
        want = torch.zeros(B, L, D, dtype=torch.float64)
        for b, i in itertools.product(range(B), range(L)):
            js = sorted(sel[b, 0, i])
            logits = torch.stack([q[b, 0, i] @ k[b, 0, j] for j in js]) / math.sqrt(d_state)
            p = torch.softmax(logits, 0)
            want[b, i] = sum(p[t] * xc[b, j] for t, j in enumerate(js))
        want = want * branch.scale
    torch.testing.assert_close(out, want, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("impl", ["dispatch", "torch"])
def test_ks_selection_under_tied_scores_is_causal_and_length_free(impl):
    """Eq. 13 leaves ties open; the project rule (DESIGN "Strict causality") does not: query i's
    keys may not depend on the keys after i nor on the padded length. Tied scores (an untrained
    ReLU scorer with dead units gives exactly equal scores) must therefore be broken by something
    causal: the earlier key wins, as DeciMamba's top-P (MECHANISMS: stable sort on
    (-score, position)). Checked against the reference on every prefix length."""
    from recall_lab.attention.patterns import causal_topk_indices, causal_topk_indices_torch

    topk = causal_topk_indices if impl == "dispatch" else causal_topk_indices_torch
    n = 8
    for seed in range(20):
        g = torch.Generator().manual_seed(seed)
        x = torch.randint(0, 3, (2, 1, 45), generator=g).double()  # 3 values: many ties
        for length in (9, 17, 30, 45):
            idx = topk(x[..., :length], n)
            for b, i in itertools.product(range(2), range(length)):
                order = sorted(range(i + 1), key=lambda j: (-float(x[b, 0, j]), j))
                got = sorted(int(j) for j in idx[b, 0, i] if j >= 0)
                assert got == sorted(order[:n]), (seed, length, b, i)
