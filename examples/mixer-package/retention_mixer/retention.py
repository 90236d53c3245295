"""Retention: y_t = sum_{s<=t} gamma^(t-s) (q_t . k_s) v_s per head, gamma fixed per head."""

import torch
from torch import nn


class Retention(nn.Module):
    def __init__(self, d_model: int, layer_idx: int = 0, heads: int = 4):
        super().__init__()
        self.heads, self.dk = heads, d_model // heads
        self.qkv = nn.Linear(d_model, 3 * d_model, bias=False)
        self.out_proj = nn.Linear(d_model, d_model, bias=False)
        self.register_buffer("gamma", 1 - 2.0 ** (-2.0 - torch.arange(heads)))

    def _qkv(self, x):  # (..., d) -> three (..., heads, dk)
        q, k, v = self.qkv(x).unflatten(-1, (3, self.heads, self.dk)).unbind(-3)
        return q * self.dk**-0.5, k, v

    def _keys(self, k):
        return k  # the leaking variant changes only this

    def forward(self, x):  # (B, L, D) -> (B, L, D)
        q, k, v = self._qkv(x)
        k = self._keys(k)
        t = torch.arange(x.shape[1], device=x.device)
        decay = self.gamma[:, None, None] ** (t[:, None] - t[None, :]).clamp(min=0)
        decay = decay * (t[:, None] >= t[None, :])  # [heads, L, L], causal
        scores = torch.einsum("bthd,bshd->bhts", q, k) * decay
        return self.out_proj(torch.einsum("bhts,bshd->bthd", scores, v).flatten(-2))

    def state_size(self, sequence_length=2048):  # called by keyword, as zoology calls it
        return self.heads * self.dk * self.dk  # one dk x dk matrix per head

    def allocate_cache(self, batch_size, max_len):
        return {"S": self.qkv.weight.new_zeros(batch_size, self.heads, self.dk, self.dk)}

    def step(self, x_t, cache):  # (B, D) -> (B, D)
        q, k, v = self._qkv(x_t)
        cache["S"] = self.gamma[:, None, None] * cache["S"] + k[..., :, None] * v[..., None, :]
        return self.out_proj(torch.einsum("bhd,bhde->bhe", q, cache["S"]).flatten(-2))


class LeakyRetention(Retention):
    """A deliberate leak: keys centred on the mean over the whole sequence (the future too),
    as a non-causal centring does. `recall-lab check` flags it."""

    def _keys(self, k):
        return k - k.mean(dim=1, keepdim=True)
