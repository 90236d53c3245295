"""Fine-tuning adapters: LoRA, LongLoRA's LoRA+, HyLoRA (Expansion Span Sec. 3.4, 4.6, 6), full.

* ``lora``: low-rank adapters on the attention projections only, everything else frozen:
  ``y = W x + (alpha / r) B A x`` with W frozen, A Kaiming-uniform, B = 0 (so the adapted model
  starts equal to its base), as in LoRA and peft. Targets (by module name): the hybrid branch's
  ``qk`` and the attention layers' ``qkv`` and ``out`` (LongLoRA adapts q, k, v, o).
* ``lora+``: the "LoRA+" of SE-Attn (Expansion Span)'s reference [3] (LongLoRA): ``lora`` plus
  trainable embedding (input side; an untied output head stays frozen, as in LongLoRA) and every
  normalisation weight (RMSNorm, the Mamba2 gated RMSNorm); in the lab also the hybrid
  branch's output ``scale`` (a per-channel weight of the attention output, the branch's
  closest analogue of a norm weight). NOT peft's
  ``create_loraplus_optimizer`` (Hayou et al.'s LoRA+, a learning-rate ratio between B and A).
* ``hylora``: ``lora+`` plus every SSM mixer's 1D convolution (weight and bias) trainable.
* ``full``: every parameter trainable, no adapters.

Unfreezing is in place (no module copies, state-dict keys unchanged except the wrapped Linear
layers, whose weight moves to ``<name>.base.weight`` beside ``lora_A`` / ``lora_B``). Why our own
~100 lines and not peft: peft 0.21 would make torch-free installs pull transformers, accelerate
and huggingface_hub, and its ``modules_to_save`` deep-copies the convolutions, norms and the
embedding and renames their checkpoint keys, where HyLoRA only needs ``requires_grad``. peft is
the test oracle instead (tests/models/test_adapters.py: same trainable set, same outputs).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from recall_lab.generators.errors import RecallLabError

ADAPTERS = ("lora", "lora+", "hylora", "full")
LORA_TARGETS = ("qk", "qkv", "out")

__all__ = ["ADAPTERS", "LORA_TARGETS", "LoRALinear", "apply_finetune", "merge_adapters",
           "trainable_names"]


class LoRALinear(nn.Module):
    """A frozen ``nn.Linear`` plus a trainable low-rank update (alpha / r) B A."""

    def __init__(self, base: nn.Linear, r: int, alpha: float) -> None:
        super().__init__()
        self.base = base
        self.r, self.alpha, self.scaling = r, alpha, alpha / r
        base.weight.requires_grad_(False)
        if base.bias is not None:
            base.bias.requires_grad_(False)
        self.lora_A = nn.Parameter(base.weight.new_empty(r, base.in_features))
        self.lora_B = nn.Parameter(base.weight.new_zeros(base.out_features, r))
        nn.init.kaiming_uniform_(self.lora_A, a=math.sqrt(5))  # as LoRA / peft

    def delta_weight(self) -> torch.Tensor:
        return (self.lora_B @ self.lora_A) * self.scaling

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.base(x) + (x @ self.lora_A.t() @ self.lora_B.t()) * self.scaling

    def merged(self) -> nn.Linear:
        """A plain Linear with W + (alpha / r) B A."""
        out = nn.Linear(self.base.in_features, self.base.out_features,
                        bias=self.base.bias is not None).to(self.base.weight)
        with torch.no_grad():
            out.weight.copy_(self.base.weight + self.delta_weight())
            if self.base.bias is not None:
                out.bias.copy_(self.base.bias)
        return out

    def extra_repr(self) -> str:
        return f"r={self.r}, alpha={self.alpha}"


def _is_norm(module: nn.Module) -> bool:
    return isinstance(module, (nn.RMSNorm, nn.LayerNorm)) or type(module).__name__.endswith(
        "RMSNorm")


def apply_finetune(model: nn.Module, adapter: str, r: int = 8, alpha: float = 16.0) -> dict:
    """Make `model` ready to fine-tune with `adapter` (in place); returns counts
    ``{"trainable": n, "total": n, "adapted": [module names]}``."""
    if adapter not in ADAPTERS:
        raise RecallLabError(f"unknown adapter {adapter!r}; choose from {', '.join(ADAPTERS)}")
    if adapter == "full":
        model.requires_grad_(True)
        return _counts(model, [])
    if isinstance(r, bool) or not isinstance(r, int) or r < 1:
        raise RecallLabError(f"LoRA rank must be an int >= 1, got {r!r}")
    model.requires_grad_(False)
    targets = [(name, mod) for name, mod in model.named_modules()
               if name.rsplit(".", 1)[-1] in LORA_TARGETS and isinstance(mod, nn.Linear)]
    if not targets:
        raise RecallLabError("this model has no attention projections (qk / qkv / out) to put "
                             "LoRA on; use --adapter full")
    for name, mod in targets:
        parent_name, _, attr = name.rpartition(".")
        setattr(model.get_submodule(parent_name), attr, LoRALinear(mod, r, alpha))
    if adapter in ("lora+", "hylora"):
        model.get_submodule("embed").requires_grad_(True)
        for name, mod in model.named_modules():
            if _is_norm(mod):
                mod.requires_grad_(True)
            if name.endswith("branch") and hasattr(mod, "scale"):
                mod.scale.requires_grad_(True)
    if adapter == "hylora":
        for name, mod in model.named_modules():
            if name.endswith("conv1d") and isinstance(mod, nn.Conv1d):
                mod.requires_grad_(True)
    return _counts(model, [n for n, _ in targets])


def _counts(model: nn.Module, adapted: list[str]) -> dict:
    return {"trainable": sum(p.numel() for p in model.parameters() if p.requires_grad),
            "total": sum(p.numel() for p in model.parameters()), "adapted": adapted}


def trainable_names(model: nn.Module) -> list[str]:
    return [n for n, p in model.named_parameters() if p.requires_grad]


def merge_adapters(model: nn.Module) -> nn.Module:
    """Replace every `LoRALinear` by its merged Linear (in place); the model then has its base
    architecture's state-dict keys again."""
    for name, mod in list(model.named_modules()):
        if isinstance(mod, LoRALinear):
            parent_name, _, attr = name.rpartition(".")
            setattr(model.get_submodule(parent_name), attr, mod.merged())
    return model
