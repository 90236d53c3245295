"""Validated model and training configuration (pydantic v2): data models only.

The task is described by `generators.TaskSpec` (owned by `generators`); this module only adds
`ModelConfig`, `TrainConfig` and `RunConfig` (model + train + task), and the helpers that read a
task given as a preset name or a TOML file. Building a `RunConfig` from a model name (which needs
the model registry) is the run layer's job: `recall_lab.runs`.

TOML layout of a run config (see `experiments/`):

    [model]            # ModelConfig fields; `name` is a registry name such as "mamba+hax"
    name = "mamba+hax"
    [train]            # TrainConfig fields
    steps = 2000
    [task]             # either a preset ...
    preset = "mini-mqjr"
    # ... or TaskSpec fields: levels = [[5, 16], [5, 16]], values = 16, seq_len = 1058
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from recall_lab.generators import PRESETS, TaskSpec, get_preset
from recall_lab.generators.errors import RecallLabError, unknown
from recall_lab.generators.fields import Float, Int
from recall_lab.generators.tasks import BUILTIN, GeneratorTask, generator_task, task_from_json

# Branch patterns the original HAX release implements (attention/release_reference.py's
# RELEASE_ARCHS without "full"; a test keeps the two equal); here because config imports no torch.
RELEASE_PATTERNS = ("sw", "d", "sw+d", "a", "lsh", "ks", "hax")
# Branch patterns that take the task's key-id range as pattern option `keys` (the oracle,
# attention/oracle.py): `RunConfig` fills it from the task's vocabulary (its last level) unless
# `pattern_opts` sets it; here for the same reason (a test keeps it equal to the registry rows
# whose options include "keys").
TASK_KEY_PATTERNS = ("oracle",)

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

Beta = Annotated[Float, Field(ge=0, lt=1)]
Arch = Literal["mamba", "mamba2", "samba", "transformer", "mamba2-attn", "attamba", "mixer"]
# The architectures with multi-head attention layers (`n_heads` heads of d_model / n_heads).
ATTENTION_ARCHS = ("samba", "transformer", "mamba2-attn", "attamba")


class SEAttnConfig(BaseModel):
    """Options of an SE-Attn pattern (the SE-Attn (Expansion Span) paper;
    `recall_lab/attention/seattn.py`), wherever it is used: the hybrid branch (`mamba2+seattn`) or
    the attention layers of `mamba2-attn-se`. None = derived from the budget k (chunk k/2,
    block k/8, top (k - chunk) / block)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunk: Int | None = Field(None, ge=1)  # chunk size M in evaluation (and training if fixed)
    block: Int | None = Field(None, ge=1)  # memory block size S
    topk: Int | None = Field(None, ge=0)  # blocks retrieved per query
    chunk_choices: tuple[Int, ...] = ()  # training: one M per forward drawn from these
    scoring: Literal["prefix", "token", "chunk"] = "prefix"  # "chunk" = paper, not causal
    # None: "value" (the paper's) where v has q's width, "key" in the hybrid branch (v = xc).
    summary: Literal["value", "key"] | None = None
    seed: Int = Field(0, ge=0)  # landmark queries, random retrieval in evaluation
    # relevance | random (SE-Attn-Random) | none (NoMem); for attention layers (branch patterns
    # name it: seattn-random, seattn-nomem).
    retrieval: Literal["relevance", "random", "none"] | None = None

    def options(self) -> dict[str, Any]:
        """The fields that are set, as `make_pattern` options."""
        return {k: v for k, v in self.model_dump().items() if v is not None and v != ()}


class AttnLayersConfig(BaseModel):
    """The attention layers of `mamba2-attn` (Mamba2 layers with attention layers between them,
    the shape of the Mamba-2-Hybrid in SE-Attn (Expansion Span)): after each Mamba2 layer listed in
    `after`, one attention block (multi-head attention with RoPE + SwiGLU MLP)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    attention: Literal["full", "sw", "se"] = "full"  # sw: window k; se: seattn with budget k
    after: tuple[Int, ...] = (0,)


class AttambaConfig(BaseModel):
    """Attamba: chunk pattern and the chunk-reset key/value SSMs (models/attamba.py).

    Defaults from the paper scaled to the lab's 2-layer, hidden-64 models: P = 8 and leading
    tokens L = P (Sec. 4.1, Fig. 15, 17), cyclic chunk boundaries (App. A.1.1, best in Fig. 14),
    SSM state 32 (Fig. 12: no gain above 32 at P = 8). The K/V SSMs are Mamba2 mixers with
    expand 1 (the paper keeps their overhead small: 4M of 60M parameters).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    chunk: Int = Field(8, ge=1)  # P
    leading: Int | Literal["chunk"] | None = None  # None = P; "chunk" = own partial chunk (Eq. 5)
    chunking: Literal["uniform", "cyclic", "random"] = "cyclic"
    seed: Int = Field(0, ge=0)  # eval-mode random boundaries
    eval_chunking: Literal["uniform", "cyclic", "random"] | None = None  # test-time chunking
    eval_chunk: Int | None = Field(None, ge=1)  # test-time P
    kv: Literal["ssm", "proj"] = "ssm"  # "proj": projected keys/values, same pattern (control)
    kv_d_state: Int = Field(32, ge=1)
    kv_expand: Int = Field(1, ge=1)
    kv_headdim: Int = Field(16, ge=1)

    def pattern_opts(self) -> dict:
        """Options of `make_pattern("attamba", chunk, ...)` (the layer is added per layer)."""
        opts: dict[str, Any] = {"chunking": self.chunking, "seed": self.seed}
        if self.leading is not None:
            opts["leading"] = self.leading
        if self.eval_chunking is not None:
            opts["eval_chunking"] = self.eval_chunking
        if self.eval_chunk is not None:
            opts["eval_chunk"] = self.eval_chunk
        return opts


class DecimationConfig(BaseModel):
    """DeciMamba (the paper's Sec. 4, Eq. 11, App. A, D; docs/seeds/002-decimamba.md).

    The s-th decimating layer (s = 0 first, in `layers` order) keeps
    P_s = max(min_len, floor(L_base * beta^s)) context tokens (at most the row's context), or with
    `top_k` a fraction K of the row's context (the Top-K% ablation). `layers` are SSM layer
    indices (negative counts from the end; default: the last layer, since shallow decimation
    fails, App. D) or "auto": the `n_auto` layers with the largest Mamba Mean Distance, chosen
    from data before use (`recall_lab.models.decimation.resolve_auto_layers`).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    layers: tuple[Int, ...] | Literal["auto"] = (-1,)
    n_auto: Int = Field(1, ge=1)
    L_base: Int = Field(32, ge=1)
    beta: Float = Field(0.5, gt=0, le=1)
    min_len: Int = Field(20, ge=0)
    score: Literal["mean", "l2", "random", "xnorm"] = "mean"
    top_k: Float | None = Field(None, gt=0, le=1)


# ModelConfig fields of the open mixer contract (arch "mixer"). Unset, they stay out of a run's
# JSON (`RunConfig.to_json`), so adding them changed the hash of no existing run.
MIXER_FIELDS = ("mixer", "mixers", "mixer_kwargs", "block")
# Fields added after runs were committed whose unset value (None) stays out of a run's JSON the
# same way, so no existing run's hash moved: the recipes (docs/zoology.md).
OPTIONAL_MODEL_FIELDS = MIXER_FIELDS + ("init", "positions", "norm", "dropout", "norm2_residual",
                                        "attn_bias")
OPTIONAL_TRAIN_FIELDS = ("recipe", "train_examples", "decay", "precision")

# Named recipes, each a preset over existing fields (docs/zoology.md). `fixed`: the values the
# recipe is made of (a field given with another value contradicts it: one clear error);
# `defaults`: values it fills where the field is not given (zoology varies them per setting).
INIT_RECIPES: dict[str, dict[str, Any]] = {
    # zoology's `_init_weights` with its tied head (zoology/model.py)
    "zoology": {"tie_embeddings": True, "embed_std": 0.02, "rescale_residual": True},
}
# Named blocks of the transformer (`[model] block`): the parts each fills where a field is not
# given, so that each part can be turned off for an ablation. "zoology": zoology's
# `TransformerBlock` with `state_mixer` identity (zoology/model.py): LayerNorms, the identity
# state mixer's `x + norm2(x)` residual, and biases on the attention's Wqkv and out_proj.
BLOCK_RECIPES: dict[str, dict[str, Any]] = {
    "zoology": {"norm": "layer", "norm2_residual": True, "attn_bias": True},
}
TRAIN_RECIPES: dict[str, dict[str, dict[str, Any]]] = {
    # zoology's Trainer.fit (zoology/train.py): AdamW(model.parameters()) with torch's default
    # betas, every parameter decayed, cosine from the first step, no clipping; Figure 2's
    # settings as defaults (100,000 fixed examples, batch 512, early stop at 0.99).
    "zoology": {
        "fixed": {"decay": "all", "betas": (0.9, 0.999), "warmup": 0, "schedule": "cosine",
                  "min_lr": 0.0, "grad_clip": 0.0},
        "defaults": {"weight_decay": 0.1, "batch_size": 512, "stop_at": 0.99,
                     "train_examples": 100_000},
    },
}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def apply_recipe(data: Any, table: str, key: str, fixed: dict, defaults: dict) -> Any:
    """`data` (a `[model]` or `[train]` table) with the recipe named by `data[key]` filled in:
    its fixed values (a given field that differs from one is refused, naming both) and its
    defaults where a field is not given."""
    if not isinstance(data, dict) or data.get(key) is None:
        return data
    name = data[key]
    out = dict(data)
    for field, value in fixed.items():
        if field in out and not _same(out[field], value):
            raise RecallLabError(f"[{table}] {key} {name!r} sets {field} = {value!r}; "
                                 f"{field} = {out[field]!r} contradicts it (drop one of them)")
        out[field] = value
    for field, value in defaults.items():
        out.setdefault(field, value)
    return out


class LayerMixer(BaseModel):
    """One layer's mixer in `mixers`, given as a table: its import path (or name) and kwargs
    (merged over `mixer_kwargs`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    mixer: str
    kwargs: dict[str, Any] = Field(default_factory=dict)


class ModelConfig(BaseModel):
    """Everything needed to rebuild a model; `name` is the registry row (`mamba+hax`, ...).

    `k` is the total key budget per query; patterns made of two components (sw+d, a, hax) give
    each component k/2, as in the joint-recall paper's Sec. 5.1.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    name: str
    arch: Arch
    pattern: str | None = None  # sparse-attention branch of the hybrid; None = plain SSM
    vocab_size: Int = Field(ge=4)
    d_model: Int = Field(64, ge=4)
    n_layers: Int = Field(2, ge=1)
    k: Int = Field(64, ge=1)
    lsh_bits: Int = Field(8, ge=1)  # sign-bit LSH h (joint-recall paper App. D.1)
    d_state: Int | None = Field(None, ge=1)  # None = the mixer's default (Mamba 16, Mamba2 64)
    d_conv: Int = Field(4, ge=1)
    expand: Int = Field(2, ge=1)
    headdim: Int | None = Field(None, ge=1)  # Mamba2 head size; None = mixer default
    n_heads: Int = Field(4, ge=1)  # attention heads of samba / transformer layers
    # hidden size of the SwiGLU MLPs / d_model; 0 = no MLP in the transformer's blocks (zoology's
    # Figure 2: `state_mixer` identity)
    mlp_mult: Int = Field(4, ge=0)
    side_scale_init: Float = 0.1
    # Heads of the hybrid branch: 1 (one q, k of size d_state for all channels, like Mamba2's
    # B, C with ngroups=1) or "mixer" (Mamba2: one q, k per SSM head; Mamba has no heads: 1).
    branch_heads: Literal[1, "mixer"] = 1
    pattern_opts: dict[str, Any] = Field(default_factory=dict)
    # "release": the branch computes the original HAX release's dense-mask semantics
    # (attention/release_reference.py: centring over the whole sequence, uniform fallback) instead
    # of our causal op. NOT CAUSAL; it exists for the leak audit
    # (experiments/leak-audit/leak-audit.toml).
    branch_semantics: Literal["ours", "release"] = "ours"
    # Initialisation (models/lm.py `RecallLM._init_weights`; README "Initialisation"): an untied
    # output head and an N(0, 1) embedding learn recall; tie_embeddings=True with embed_std=0.02
    # (round one's init) stays on a plateau. Residual out-projections are scaled by
    # 1/sqrt(n_residuals * n_layers) (GPT-2, mamba-ssm).
    tie_embeddings: bool = False
    embed_std: Float = Field(1.0, gt=0)
    rescale_residual: bool = True
    # A named initialisation (INIT_RECIPES): "zoology" = its tied head and embedding at std 0.02
    # (the three fields above, fixed), every Linear at N(0, 0.02) and the residual writers at
    # N(0, 0.02 / sqrt(2 n_layers)) (zoology's `_init_weights`; SSM mixers keep their own).
    # None (the lab's own init) stays out of config.json.
    init: Literal["zoology"] | None = None
    # zoology's attention block, each where cheap to match (docs/zoology.md), the transformer
    # only (no attention pattern): learned absolute positions instead of RoPE ("learned": a
    # table of max_len positions, N(0, 0.02), added to the embedding), LayerNorm (weight and
    # bias, eps 1e-5) instead of RMSNorm, and dropout on the embedding and on the attention
    # probabilities (zoology's 0.1). None = the lab's (RoPE, RMSNorm, none): out of config.json.
    positions: Literal["rope", "learned"] | None = None
    norm: Literal["rms", "layer"] | None = None
    dropout: Float | None = Field(None, ge=0, lt=1)
    # The longest sequence the model is built for: it fixes pattern parameters such as the gap
    # of the dilated pattern (ceil(max_len / n)), so query i reads the same keys however long the
    # sequence or its batch is. `RunConfig` fills it from the task; None = 2048 (the release's).
    max_len: Int | None = Field(None, ge=1)
    decimation: DecimationConfig | None = None  # DeciMamba (mamba / mamba2 without a branch)
    seattn: SEAttnConfig | None = None  # options of seattn* patterns (branch or layers)
    attn_layers: AttnLayersConfig | None = None  # arch mamba2-attn only (None = full after 0)
    # Attamba options (arch "attamba", pattern "attamba"); the registry fills the defaults.
    attamba: AttambaConfig | None = None
    # The open mixer contract (recall_lab/mixers/contract.py), arch "mixer": every layer is
    # x + mixer(RMSNorm(x)) (`block = "mlp"`: then x + SwiGLU(RMSNorm(x)), zoology's
    # TransformerBlock). `mixer` is an import path "pkg.module:Class" (the run layer resolves a
    # mixer name to its path), `mixers` one entry per layer (a hybrid), `mixer_kwargs` the
    # class's keyword arguments.
    mixer: str | None = None
    mixers: tuple[str | LayerMixer, ...] | None = None
    mixer_kwargs: dict[str, Any] | None = None
    # "residual" / "mlp": the mixer model's block (above). "zoology" (the transformer with full
    # attention and no MLP): zoology's block, BLOCK_RECIPES, which fills the two fields below
    # (and norm "layer") where they are not given; setting one to false is its ablation.
    block: Literal["residual", "mlp", "zoology"] | None = None
    # zoology's identity state mixer is not nothing: its TransformerBlock adds norm2(x) to the
    # stream after the sequence mixer (`state_mixer` identity of a LayerNorm'd copy), so each
    # layer is x += attn(norm1(x)); x += norm2(x). Measured (docs/zoology.md): it keeps attention on
    # MQAR's plateau longer. Needs mlp_mult 0 (the identity stands where the MLP would).
    norm2_residual: bool | None = None
    # biases on the attention's qkv and out projections (zoology's MHA: Wqkv, out_proj), zero
    # at init as zoology's `_init_weights` sets them
    attn_bias: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _init_recipe(cls, data: Any) -> Any:
        init = data.get("init") if isinstance(data, dict) else None
        if not isinstance(init, str) or init not in INIT_RECIPES:
            return data  # None, or a value the Literal refuses
        return apply_recipe(data, "model", "init", INIT_RECIPES[init], {})

    @model_validator(mode="before")
    @classmethod
    def _block_recipe(cls, data: Any) -> Any:
        block = data.get("block") if isinstance(data, dict) else None
        if not isinstance(block, str) or block not in BLOCK_RECIPES:
            return data
        return apply_recipe(data, "model", "block", {}, BLOCK_RECIPES[block])

    @model_validator(mode="after")
    def _block_options_fit(self) -> ModelConfig:
        given = [f for f in ("positions", "norm", "dropout", "norm2_residual", "attn_bias")
                 if getattr(self, f) is not None]
        if self.block == "zoology":
            given.insert(0, "block 'zoology'")
        if given and (self.arch != "transformer" or self.pattern is not None):
            raise RecallLabError(f"{given[0]} is an option of the transformer with full "
                                 f"attention, not of {self.name!r}")
        if self.norm2_residual and self.mlp_mult:
            raise RecallLabError(f"norm2_residual (zoology's identity state mixer) stands where "
                                 f"the MLP would: it needs mlp_mult 0, not {self.mlp_mult}")
        return self

    @model_validator(mode="after")
    def _no_mlp_fits(self) -> ModelConfig:
        if self.mlp_mult == 0 and self.arch != "transformer":
            raise RecallLabError(f"mlp_mult 0 (no MLP) is for the transformer; arch {self.arch} "
                                 "needs mlp_mult >= 1")
        return self

    @model_validator(mode="after")
    def _mixer_fits(self) -> ModelConfig:
        if self.arch != "mixer":
            given = [f for f in MIXER_FIELDS if getattr(self, f) is not None
                     and (f, getattr(self, f)) != ("block", "zoology")]
            if given:
                raise RecallLabError(f"{given[0]} is for a model built from a mixer (arch "
                                     f"'mixer'), not arch {self.arch!r}")
            return self
        if (self.mixer is None) == (self.mixers is None):
            raise RecallLabError("a mixer model needs `mixer` (one for every layer) or "
                                 "`mixers` (one per layer), not both and not neither")
        if self.mixers is not None and len(self.mixers) != self.n_layers:
            raise RecallLabError(f"mixers lists {len(self.mixers)} layers; n_layers is "
                                 f"{self.n_layers}")
        if self.pattern is not None or self.decimation is not None:
            raise RecallLabError("a mixer model takes no attention pattern and no decimation")
        return self

    def layer_mixer(self, layer: int) -> tuple[str, dict[str, Any]]:
        """(import path, kwargs) of layer `layer`'s mixer (arch "mixer")."""
        entry = self.mixer if self.mixers is None else self.mixers[layer]
        kwargs = dict(self.mixer_kwargs or {})
        if isinstance(entry, LayerMixer):
            return entry.mixer, {**kwargs, **entry.kwargs}
        return entry, kwargs

    @model_validator(mode="after")
    def _heads_fit(self) -> ModelConfig:
        if self.arch in ATTENTION_ARCHS and self.d_model % self.n_heads:
            raise RecallLabError(f"n_heads ({self.n_heads}) must divide d_model ({self.d_model}): "
                                 "each attention head gets d_model / n_heads channels")
        return self

    @model_validator(mode="after")
    def _options_have_a_pattern(self) -> ModelConfig:
        if self.pattern_opts and self.pattern is None:
            raise RecallLabError(f"pattern_opts {sorted(self.pattern_opts)} given, but model "
                                 f"{self.name!r} has no attention branch to take them")
        return self

    @model_validator(mode="after")
    def _release_fits(self) -> ModelConfig:
        if self.branch_semantics == "release" and self.pattern not in RELEASE_PATTERNS:
            raise RecallLabError(
                f"branch_semantics 'release' needs a branch pattern among "
                f"{', '.join(RELEASE_PATTERNS)}, got {self.pattern!r}")
        return self

    @model_validator(mode="after")
    def _attamba_fits(self) -> ModelConfig:
        if self.attamba is not None and "attamba" not in (self.arch, self.pattern):
            raise RecallLabError("attamba options need the attamba arch or the attamba pattern")
        return self

    @field_validator("decimation", mode="before")
    @classmethod
    def _decimation_off(cls, v: Any) -> Any:
        return None if v == "off" else v  # TOML has no null: `decimation = "off"` in a grid

    @model_validator(mode="after")
    def _decimation_fits(self) -> ModelConfig:
        if self.decimation is not None:
            if self.arch not in ("mamba", "mamba2") or self.pattern is not None:
                raise RecallLabError(
                    "decimation works on plain mamba / mamba2 models only (no attention branch)"
                )
            if self.decimation.layers != "auto":
                for layer in self.decimation.layers:
                    if not -self.n_layers <= layer < self.n_layers:
                        raise RecallLabError(
                            f"decimation layer {layer} out of range for {self.n_layers} layers"
                        )
        return self

    @property
    def uses_k(self) -> bool:
        return self.pattern is not None or self.arch == "samba" or (
            self.arch == "mamba2-attn" and self.attention_layers.attention != "full")

    @property
    def attention_layers(self) -> AttnLayersConfig:
        return self.attn_layers or AttnLayersConfig()

    def pattern_options(self) -> dict[str, Any]:
        """Options of the branch pattern: the typed SE-Attn options for seattn*, then
        `pattern_opts` (which win)."""
        se = (self.seattn or SEAttnConfig()).options()
        if self.pattern is not None and self.pattern.startswith("seattn"):
            return {**se, **self.pattern_opts}
        return dict(self.pattern_opts)

    @model_validator(mode="after")
    def _check_layers(self) -> ModelConfig:
        if self.attn_layers is not None and self.arch != "mamba2-attn":
            raise ValueError(f"attn_layers is for arch mamba2-attn, not {self.arch}")
        bad = [i for i in self.attention_layers.after if not 0 <= i < self.n_layers]
        if self.arch == "mamba2-attn" and bad:
            raise ValueError(f"attn_layers.after lists layer {bad[0]}; the model has "
                             f"{self.n_layers} Mamba2 layers")
        return self


class FinetuneConfig(BaseModel):
    """Fine-tuning from a finished run (SE-Attn (Expansion Span) Sec. 3.4, 4.6): start from its
    weights, then train only what `adapter` opens (`recall_lab/models/adapters.py`): lora (LoRA on
    the attention projections), lora+ (LongLoRA's: + embedding and norms), hylora (+ the SSMs'
    1D convolutions), full. The run's model may use another attention than its base (the
    attention is parameter-free, so the base weights fit)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Run directory whose weights are the starting point; a glob matching one folder names a
    # sweep's run (`runs/seattn-pretrain/s0-*`, the hash suffix left open).
    base_run: str
    checkpoint: Literal["best", "last"] = "best"
    adapter: Literal["lora", "lora+", "hylora", "full"] = "hylora"
    rank: Int = Field(8, ge=1)  # paper: 32 for Mamba-2-Hybrid at d_model 2560
    alpha: Float = Field(16.0, gt=0)  # alpha / rank = 2 as in the paper


class TrainConfig(BaseModel):
    """Optimiser, schedule, evaluation and seeds of one training run."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # Defaults measured on CPU (docs/training.md "Training defaults", docs/results/recipe): with
    # warm-up 500, `transformer` solved mini-mqar (test >= 0.95 within 2500 steps) in 10 of 10
    # seeds, against 4 of 10 with warm-up 100 (experiments/recipe/recipe.toml).
    steps: Int = Field(2000, ge=1)
    batch_size: Int = Field(32, ge=1)
    lr: Float = Field(3e-3, gt=0)
    weight_decay: Float = Field(0.1, ge=0)
    betas: tuple[Beta, Beta] = (0.9, 0.95)  # AdamW's decay rates: each in [0, 1)
    warmup: Int = Field(500, ge=0)
    schedule: Literal["constant", "cosine"] = "constant"  # after warm-up; paper: constant
    min_lr: Float = Field(0.0, ge=0)
    grad_clip: Float = Field(1.0, ge=0)  # global-norm clipping; 0 = none (zoology's)
    # A named training recipe (TRAIN_RECIPES, docs/zoology.md): "zoology" fixes decay "all",
    # betas (0.9, 0.999), no warm-up, cosine to 0, no clipping, and fills weight decay 0.1,
    # batch 512, stop_at 0.99 and 100,000 train_examples where they are not given.
    recipe: Literal["zoology"] | None = None
    # Which parameters AdamW decays: None = the lab's rule (weight matrices only,
    # `RecallLM.param_groups`); "all" = every parameter (zoology's `AdamW(model.parameters())`).
    decay: Literal["all"] | None = None
    # A fixed training set: the first N samples of the generator's own seeded draw (data_seed),
    # repeated for epochs in a fresh seeded order each (the dataset folder's path,
    # `data.FixedSet`); epochs = steps x batch_size / N. None = stream fresh samples.
    train_examples: Int | None = Field(None, ge=1)
    alpha: Float = Field(0.1, ge=0)  # weight of the KS ranking loss (joint-recall paper Eq. 18)
    seed: Int = Field(0, ge=0)  # model init, hash planes, KS sampling
    data_seed: Int = Field(0, ge=0)  # training stream (or epoch order) and the held-out sets
    # A dataset folder from `recall-lab generate`: train on its train split (a fresh seeded
    # order every epoch), evaluate on its valid / test splits. None = stream from the generator.
    data: str | None = None
    eval_every: Int = Field(200, ge=1)
    eval_samples: Int = Field(512, ge=1)
    test_samples: Int = Field(512, ge=1)
    eval_batch_size: Int | None = Field(None, ge=1)
    device: str = "auto"
    finetune: FinetuneConfig | None = None  # None = train from scratch
    # After training, also test the best weights at these multiples of the base task's length
    # (a fine-tune run's base run's task, else the run's own; same tables, more filler), with the
    # run's attention and, where it can be swapped, with full attention (the SE-Attn (Expansion
    # Span) paper evaluates SE-Attn fine-tunes with full attention): summary valid/test "x{f}"
    # and "x{f}-full".
    test_length_factors: tuple[Int, ...] = ()
    # Early stopping, checked at every evaluation: stop once the held-out accuracy reaches
    # `stop_at` (zoology stops at 0.99), or after `patience` evaluations without a better
    # checkpoint. None = train all `steps`. The summary says why a run stopped.
    stop_at: Float | None = Field(None, gt=0, le=1)
    patience: Int | None = Field(None, ge=1)
    # Arithmetic on CUDA. None (unset) = the lab's default: bf16 autocast where the device
    # supports it, float32 on CPU. "float32": no autocast and TF32 off (matmul and cuDNN) for the
    # run, so GPU cells sit beside the CPU's float32 cells. The summary records what ran
    # (`precision`, `device_name`). Unset, it stays out of config.json (OPTIONAL_TRAIN_FIELDS).
    precision: Literal["float32"] | None = None

    @model_validator(mode="before")
    @classmethod
    def _train_recipe(cls, data: Any) -> Any:
        name = data.get("recipe") if isinstance(data, dict) else None
        if not isinstance(name, str) or name not in TRAIN_RECIPES:
            return data  # None, or a name the Literal refuses
        recipe = TRAIN_RECIPES[name]
        return apply_recipe(data, "train", "recipe", recipe["fixed"], recipe["defaults"])

    @model_validator(mode="after")
    def _fixed_set_fits(self) -> TrainConfig:
        if self.train_examples is not None and self.data is not None:
            raise RecallLabError("train.train_examples draws a fixed set from the task's "
                                 "generator; train.data is a dataset folder: give one of them")
        if self.train_examples is not None and self.train_examples < self.batch_size:
            raise RecallLabError(f"train_examples ({self.train_examples}) is smaller than one "
                                 f"batch ({self.batch_size}): epochs over it would repeat rows "
                                 "within a batch; raise train_examples or lower batch_size")
        return self


class RunConfig(BaseModel):
    """One run: model + train + task (+ the preset name the task came from, if any)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    model: ModelConfig
    train: TrainConfig
    task: Any  # generators.TaskSpec; kept Any so this module does not pin its schema
    task_name: str | None = None

    @model_validator(mode="after")
    def _task_is_spec(self) -> RunConfig:
        if not isinstance(self.task, (TaskSpec, GeneratorTask)):  # a generator task or ours
            object.__setattr__(self, "task", task_from_json(self.task))
        if self.model.max_len is None:  # fixed once, from the training task (also old runs)
            object.__setattr__(self, "model",
                               self.model.model_copy(update={"max_len": self.task.max_len}))
        opts = self.model.pattern_opts
        if self.model.pattern in TASK_KEY_PATTERNS and "keys" not in opts:
            if not isinstance(self.task, TaskSpec):
                raise RecallLabError(f"pattern {self.model.pattern} needs the key ids: set "
                                     "pattern_opts keys for a generator task")
            vocab = self.task.vocab()  # keys = the last level's ids; fixed once, as max_len
            keys = list(vocab.level_range(vocab.n_levels - 1))
            object.__setattr__(self, "model", self.model.model_copy(
                update={"pattern_opts": {**opts, "keys": keys}}))
        return self

    def to_json(self) -> dict:
        return {
            "model": {k: v for k, v in self.model.model_dump(mode="json").items()
                      if v is not None or k not in OPTIONAL_MODEL_FIELDS},
            "train": {k: v for k, v in self.train.model_dump(mode="json").items()
                      if v is not None or k not in OPTIONAL_TRAIN_FIELDS},
            "task": self.task.model_dump(mode="json"),
            "task_name": self.task_name,
        }


def int_list(text: str, option: str, minimum: int) -> list[int]:
    """A flag given as comma-separated integers (`--lengths 128,256`), each >= `minimum`."""
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise RecallLabError(f"{option} must be comma-separated integers, got {text!r}") from None
    if not out or min(out) < minimum:
        raise RecallLabError(f"{option} must be integers >= {minimum}, got {text!r}")
    return out


def read_toml(path: Path) -> dict:
    path = Path(path)
    if not path.is_file():
        raise RecallLabError(f"config file {path} does not exist")
    try:
        return tomllib.loads(path.read_text())
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise RecallLabError(f"{path} is not valid TOML: {exc}") from None


RUN_TABLES = ("model", "train", "task")


def run_tables(data: Any, where: str) -> dict[str, dict]:
    """The `[model]`, `[train]`, `[task]` tables of a run config (TOML file or a run's
    config.json), each checked to be a table before any field is read: `model = "mamba"` at the
    top level, or a file that is a list, ends in one line naming `where`."""
    if not isinstance(data, dict):
        raise RecallLabError(f"{where}: expected a table of [model], [train], [task], "
                             f"got {type(data).__name__}")
    out = {}
    for key in RUN_TABLES:
        if key in data:
            if not isinstance(data[key], dict):
                raise RecallLabError(f"{where}: `{key}` must be a table ([{key}] with fields), "
                                     f"got {type(data[key]).__name__} {data[key]!r}")
            out[key] = data[key]
    return out


def task_from_table(table: dict) -> tuple[Any, str | None]:
    """A TOML `[task]` table -> (TaskSpec, preset name or None); `preset` may be overridden."""
    if not isinstance(table, dict):
        raise RecallLabError(f"a task must be a table of fields ([task]), got "
                             f"{type(table).__name__} {table!r}")
    table = dict(table)
    if "generator" in table:  # a task generator by import path or built-in name + its kwargs
        if "preset" in table:
            raise RecallLabError("[task] takes a preset or a generator, not both")
        return generator_task(table), None
    preset = table.pop("preset", None)
    if preset is not None:
        spec = get_preset(preset)
        if table:
            spec = TaskSpec.model_validate({**spec.model_dump(), **table})
            return spec, None
        return spec, preset
    return TaskSpec.model_validate(table), None


def resolve_task(task: str) -> tuple[Any, str | None]:
    """A task given on the command line: a preset name or a TOML file (`[task]` table or bare)."""
    if task in PRESETS:
        return task_from_table({"preset": task})
    if task in BUILTIN:  # a built-in generator with its defaults
        return task_from_table({"generator": task})
    path = Path(task)
    if path.suffix == ".toml" or path.exists():
        data = read_toml(path)
        return task_from_table(data.get("task", data))
    raise RecallLabError(unknown("task", task, [*PRESETS, *BUILTIN], "recall-lab presets",
                                 "; or a TOML file"))
