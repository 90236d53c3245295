"""NON-CAUSAL dense-mask reference reproducing the original HAX release, for comparison.

It follows the sparse branch of the release's ``EnhancedMamba2Mixer.forward`` step by step:
``k`` is divided by ``sqrt(d)``; every pattern is an ``L x L`` boolean mask; LSH centres q, k by
their mean over the WHOLE sequence and normalises over the SEQUENCE axis (``F.normalize`` default
``dim=1`` on ``[B, L, d]``), with fresh ``N(0, 1)`` planes on every call (training or not) and
sign bits weighted least-significant-first; the KS query summary is ``normalize(cumsum(q))`` over
the sequence axis as well; the dilation is ``max_len // k`` with phase ``j % g == g - 1``;
masking adds ``(1 - mask) * finfo.min``, so a row with no selected key attends uniformly to ALL
positions, future ones included. The ranking loss is computed in training mode only (0 else).

Because of the sequence-axis centring/normalisation and the uniform empty rows, outputs at
position i depend on tokens after i (tests/attention demonstrates the leak). Use it only in
benchmarks and comparisons, never in a model. Memory and time are O(L^2).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import Tensor

from recall_lab.generators.errors import RecallLabError

__all__ = ["RELEASE_ARCHS", "release_arch", "release_sparse_attention", "release_ranking_loss"]

RELEASE_ARCHS = {
    "sw": "sliding_window", "d": "dilated", "sw+d": "sliding_window+dilated",
    "a": "sliding_window+sink", "lsh": "sign_bin_lsh", "ks": "key_selection",
    "hax": "sign_bin_lsh+key_selection", "full": "full",
}


def release_arch(name: str) -> str:
    """Our pattern name (or a release ``--sparse_arch`` string) -> the release string."""
    if name in RELEASE_ARCHS:
        return RELEASE_ARCHS[name]
    parts = {"sliding_window", "dilated", "sink", "sign_bin_lsh", "argmax_lsh", "key_selection"}
    if name == "full" or (name and all(p in parts for p in name.split("+"))):
        return name
    raise RecallLabError(f"unknown release sparse_arch {name!r}")


def release_ranking_loss(pred: Tensor, target: Tensor) -> Tensor:
    target = ((target.unsqueeze(-1) > target.unsqueeze(-2)).float()
              + (target.unsqueeze(-1) >= target.unsqueeze(-2)).float()) / 2
    pred = pred.unsqueeze(-1) - pred.unsqueeze(-2)
    return F.binary_cross_entropy_with_logits(pred, target)


def _lsh_sliding_window(mask: Tensor, keep: int) -> Tensor:
    rev = mask.flip(dims=[-1])
    return (rev & (torch.cumsum(rev.int(), dim=-1) <= keep)).flip(dims=[-1])


def _cumtopk_mask(score: Tensor, keep: int, causal: Tensor) -> Tensor:
    size = score.shape[-1]
    tril = torch.tril(torch.ones(size, size, dtype=torch.bool, device=score.device))
    cum = score.unsqueeze(1).expand(-1, size, -1).masked_fill(~tril.unsqueeze(0), float("-inf"))
    top = cum.topk(min(keep, size), dim=2).indices
    mask = torch.zeros_like(causal)
    b = torch.arange(top.shape[0], device=top.device).view(-1, 1, 1).expand(top.shape)
    s = torch.arange(top.shape[1], device=top.device).view(1, -1, 1).expand(top.shape)
    mask[b, s, top] = True
    return mask & causal


def release_sparse_attention(
    q: Tensor, k: Tensor, v: Tensor, arch: str, total_keys: int, *,
    score_mlp: Callable[[Tensor], Tensor] | None = None, num_hash: int = 8,
    max_len: int = 2048, training: bool = True, return_mask: bool = False,
) -> tuple[Tensor, Tensor | float] | tuple[Tensor, Tensor | float, Tensor]:
    """Release semantics. ``q, k: [B, H, L, d]`` (pre-scaling), ``v: [B, H, L, dv]``.

    Heads are folded into the batch (the release has one attention head). ``arch``: our pattern
    name or a release string; ``total_keys`` is split evenly over the '+'-parts like the release.
    ``score_mlp`` maps ``[..., 2d] -> [..., 1]`` (e.g. ``KSPattern.mlp``), needed for KS.
    Returns ``(out [B, H, L, dv], gate_loss)`` and the boolean mask if ``return_mask``.
    """
    arch = release_arch(arch)
    b, h, length, n = q.shape
    q2 = q.reshape(b * h, length, n)
    k2 = k.reshape(b * h, length, n) / math.sqrt(n)
    val = v.reshape(b * h, length, -1).transpose(-1, -2)  # release layout [B, dv, L]
    bb = q2.shape[0]
    pos = torch.arange(length, device=q.device)
    causal = (pos[None, None, :].repeat(bb, length, 1) <= pos[None, :, None])
    gate_loss: Tensor | float = 0
    if arch == "full":
        mask = causal
    else:
        keep = total_keys // len(arch.split("+"))
        mask = torch.zeros_like(causal)
        if "sink" in arch:
            mask |= (pos[None, None, :] < keep) & causal
        if "sliding_window" in arch:
            dist = pos[:, None] - pos[None, :]
            mask |= ((dist >= 0) & (dist < keep)).unsqueeze(0).expand_as(causal)
        if "dilated" in arch:
            g = max_len // keep
            mask |= (pos[None, None, :] % g == g - 1) & causal
        for rule in ("argmax_lsh", "sign_bin_lsh"):
            if rule not in arch:
                continue
            nq = F.normalize(q2 - q2.mean(1, keepdim=True))  # dim=1: the sequence axis
            nk = F.normalize(k2 - k2.mean(1, keepdim=True))
            planes = torch.randn((n, num_hash), device=q.device, dtype=k2.dtype)
            hq, hk = nq @ planes, nk @ planes
            if rule == "argmax_lsh":
                bq, bk = hq.argmax(-1), hk.argmax(-1)
            else:
                w = (1 << torch.arange(num_hash, device=q.device)).view(1, 1, num_hash)
                bq = ((hq > 0).long() * w).sum(-1)
                bk = ((hk > 0).long() * w).sum(-1)
            mask |= _lsh_sliding_window(causal & (bq.unsqueeze(-1) == bk.unsqueeze(-2)), keep)
        if "key_selection" in arch:
            if score_mlp is None:
                raise RecallLabError("release key_selection needs score_mlp")
            tq = F.normalize(q2.detach().cumsum(dim=1))  # dim=1: the sequence axis
            score = score_mlp(torch.cat((k2.detach(), tq), dim=-1)).squeeze(-1)
            mask |= _cumtopk_mask(score, keep, causal)
            if training:
                sel = torch.rand_like(score).topk(keep, dim=1).indices
                bid = torch.arange(bb, device=q.device).view(-1, 1).expand(sel.shape)
                lin = q2 @ k2[bid, sel, :].transpose(-1, -2)
                sid = torch.arange(length, device=q.device).view(1, -1, 1).expand(lin.shape)
                lin = torch.where(sid >= sel.unsqueeze(1), lin.sigmoid(), 0)
                gate_loss = release_ranking_loss(score[bid, sel], lin.detach().sum(dim=1))
    add = (1.0 - mask.to(val.dtype)) * torch.finfo(val.dtype).min
    probs = torch.softmax(q2 @ k2.transpose(-1, -2) + add, dim=-1)
    out = (val @ probs.transpose(-1, -2)).transpose(-1, -2).reshape(b, h, length, -1)
    if return_mask:
        return out, gate_loss, mask.view(b, h, length, length)
    return out, gate_loss
