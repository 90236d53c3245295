"""The sparse-attention branch of a hybrid SSM block (joint-recall paper Sec. 4.3, Fig. 3).

The branch runs parallel to the SSM and shares its in-projection and short convolution: the SSM
mixer calls it as `side(xc)` with the post-conv, post-activation SSM input xc [b, l, d_inner] and
adds the result to the SSM output before the gate (Mamba: (y + side) * silu(z); Mamba2:
gated_rmsnorm(y + side, z)), then applies its out-projection.

Inside the branch: q, k = a small linear projection of xc to the SSM state size d_state (per
head), v = xc split into heads (Mamba: one head of width d_inner; Mamba2: the mixer's heads), the
pattern picks key indices from (q, k), `sparse_attention` attends with scale 1/sqrt(d_state), and
the output is multiplied by a learned per-channel vector (the paper's "parameterized gate").

The vector is initialised to `side_scale_init` = 0.1 (not 0): small, so the hybrid starts close to
its plain SSM and the branch cannot swamp the SSM output early ("promotes stable optimization");
non-zero, so the q/k projections receive gradient from the first step (with 0 they get none until
the vector has moved).

Decoding (`step`): the mixer's step calls the branch's step with the token's xc; the branch keeps
its pattern's decode state (attention/decode.py: ring buffers, top-n, or the exact prefix
fallback) and attends over the keys it lists, as the parallel form does.

Token ids: a pattern with `takes_ids` (the oracle, attention/oracle.py) also reads the model's
input ids. The branch then has `takes_ids` too, and its block hands it the ids: `forward(xc, aux,
ids)` with ids [b, l], `step(xc, dec, ids_t)` with ids_t [b] (RecallLM.forward and models/decode
pass them to the blocks that take them). No other branch ever sees the ids.
"""

from __future__ import annotations

import torch
from torch import nn

from recall_lab.attention import make_pattern, sparse_attention
from recall_lab.attention.decode import Decoder, attend, make_decoder
from recall_lab.attention.ks import KSPattern
from recall_lab.attention.patterns import PATTERN_TABLE
from recall_lab.attention.release_reference import release_sparse_attention
from recall_lab.generators.errors import RecallLabError


def make_branch_pattern(name: str, k: int, lsh_bits: int, d_qk: int, opts: dict,
                        max_len: int | None = None, layer: int = 0) -> nn.Module:
    """The pattern module of one branch: total budget k (`make_pattern` gives two-part patterns
    k/2 each), h = `lsh_bits` sign-bit planes for LSH, KS scorer on d_qk-sized q/k, the dilated
    gap fixed by `max_len` (the config's, never the batch's length). The LSH evaluation planes
    are seeded with `seed + layer`, so layers hash with different planes in evaluation too, as
    they do in training (where every call draws fresh ones). What a pattern takes is its
    registry row's `branch` (attention/patterns.py)."""
    opts = dict(opts)
    row = PATTERN_TABLE.get(name)  # an unknown name: make_pattern says so
    branch = row.branch if row is not None else ()
    if "max_len" in branch and max_len is not None:
        opts.setdefault("max_len", max_len)
    if "lsh_bits" in branch:
        opts.setdefault("h", lsh_bits)
    if "layer_seed" in branch:
        opts["seed"] = int(opts.get("seed", 0)) + layer
    if "dim" in branch:
        opts.setdefault("dim", d_qk)
    if "key_summary" in branch:
        # v = xc is d_inner wide, not d_qk: q . c_j needs key summaries (MECHANISMS §3).
        opts.setdefault("summary", "key")
    return make_pattern(name, k, **opts)


class SparseBranch(nn.Module):
    """q/k projection + pattern + sparse attention + learned per-channel scale."""

    def __init__(
        self,
        d_inner: int,
        d_qk: int,
        n_heads: int,
        pattern: str,
        k: int,
        lsh_bits: int = 8,
        pattern_opts: dict | None = None,
        scale_init: float = 0.1,
        max_len: int | None = None,
        layer: int = 0,
        semantics: str = "ours",
    ) -> None:
        super().__init__()
        if d_inner % n_heads:
            raise ValueError(f"d_inner {d_inner} is not divisible by {n_heads} heads")
        self.n_heads, self.d_qk = n_heads, d_qk
        self.qk = nn.Linear(d_inner, 2 * n_heads * d_qk, bias=False)
        self.pattern = make_branch_pattern(pattern, k, lsh_bits, d_qk, pattern_opts or {},
                                           max_len, layer)
        self.scale = nn.Parameter(torch.full((d_inner,), float(scale_init)))
        # "release": the original release's dense, non-causal semantics (leak audit only)
        self.semantics, self.pattern_name, self.k, self.lsh_bits = semantics, pattern, k, lsh_bits
        self.max_len = max_len or 2048
        self.takes_ids = bool(getattr(self.pattern, "takes_ids", False))

    def _ids(self, ids: torch.Tensor | None) -> dict:
        """The pattern's `ids=` keyword: the ids for a pattern that reads them, else nothing."""
        if not self.takes_ids:
            return {}
        if ids is None:
            raise RecallLabError(f"the {self.pattern_name!r} branch reads token ids; its block "
                                 "got none (call the model, not the branch, or pass ids=)")
        return {"ids": ids}

    def forward(self, xc: torch.Tensor, aux: list | None = None,
                ids: torch.Tensor | None = None) -> torch.Tensor:
        b, length, d_inner = xc.shape
        h = self.n_heads
        q, k = self.qk(xc).view(b, length, 2, h, self.d_qk).permute(2, 0, 3, 1, 4)
        v = xc.view(b, length, h, d_inner // h).transpose(1, 2)
        if self.semantics == "release":
            out, aux_loss = self._release(q, k, v)
        else:
            idx, aux_loss = self.pattern(q, k, v, **self._ids(ids))
            out = sparse_attention(q, k, v, idx, scale=self.d_qk**-0.5)
        if aux is not None and torch.is_tensor(aux_loss):
            aux.append(aux_loss)
        return out.transpose(1, 2).reshape(b, length, d_inner) * self.scale

    def allocate_cache(self) -> Decoder:
        if self.semantics == "release":
            raise RecallLabError("the release's semantics are not causal: they cannot decode")
        return make_decoder(self.pattern)

    def step(self, xc: torch.Tensor, dec: Decoder, ids: torch.Tensor | None = None
             ) -> torch.Tensor:
        """One token's xc [b, d_inner] (and its ids [b], for a pattern that reads them) -> the
        branch output [b, d_inner] (eval mode)."""
        b, d_inner = xc.shape
        h = self.n_heads
        q, k = self.qk(xc).view(b, 2, h, self.d_qk).unbind(1)
        v = xc.view(b, h, d_inner // h)
        out = attend(q, dec.step(q, k, v, **self._ids(ids)), self.d_qk**-0.5)
        return out.reshape(b, d_inner) * self.scale

    def _release(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
        """The same q, k, v and KS scorer through the release's dense-mask semantics (it divides
        k by sqrt(d) itself, the scale our op applies)."""
        ks = next((m for m in self.pattern.modules() if isinstance(m, KSPattern)), None)
        return release_sparse_attention(
            q, k, v, self.pattern_name, self.k, score_mlp=ks.mlp if ks is not None else None,
            num_hash=self.lsh_bits, max_len=self.max_len, training=self.training)
