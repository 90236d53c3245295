"""Model names (the rows of the joint-recall paper's Table 1) -> `ModelConfig` -> `RecallLM`.

Names: `mamba`, `mamba+<pattern>` for any attention pattern (`mamba+hax`, `mamba+sw+d`, ...,
`mamba2+seattn`), `mamba-2x` (hidden size doubled), the same with `mamba2`; the rows of
`MODEL_ROWS`: `samba`, `transformer`, `mamba2-attn[-sw|-se]` (Mamba2 layers with full /
sliding-window / SE-Attn attention layers, the Mamba-2-Hybrid shape of SE-Attn (Expansion
Span)); `mamba+deci` and `mamba2+deci` (DeciMamba: Delta-based decimation of the context in the
last layer by default; `decimation=` overrides the `DecimationConfig`); the controls
`CONTROL_MODELS`: `mamba+oracle`, `mamba2+oracle` (the branch's keys chosen from the token ids,
the control for KS). Defaults follow the joint-recall paper's Sec. 5.1 / App. D.1: 2 layers,
hidden 64, k = 64 (k/2 per component for sw+d, a, hax), sign-bit LSH with h = 8, Samba =
2 Mamba + 2 SWA layers with window 64.

Attamba rows (`ATTAMBA_MODELS`): `attamba` (Attamba: a Transformer with chunk-reset SSM
keys/values and the chunk pattern; options in `ModelConfig.attamba`), `mamba+attamba` (this lab's
own hybrid: the Mamba branch reads chunk-reset S6 keys with the attamba pattern; `kv="proj"` is
its projected-key control) and `transformer+sw` (a sliding-window Transformer, window k: the
iso-KV-cache baseline of Attamba's Fig. 7).

Attention swaps (`with_attention`, for fine-tuning and evaluation), for a branch model
(`mamba2+full`, ...) and for the layer hybrid (`mamba2-attn`): `full`, `sw`, `se` (SE-Attn,
causal prefix scoring), `se-paper` (the paper's chunk-level scoring, not causal), `se-nomem`,
`se-random`; `keep` leaves it. Every pattern is parameter-free, so a model's weights fit the
swapped model unchanged.
"""

from __future__ import annotations

import difflib

from recall_lab.attention import PATTERN_TABLE, PATTERNS
from recall_lab.config import ModelConfig, SEAttnConfig
from recall_lab.generators.errors import RecallLabError, unknown
from recall_lab.mixers import load_mixer_class, named_mixers, required_kwargs, resolve_mixer
from recall_lab.mixers.contract import one_line
from recall_lab.models.archs import ARCH_TABLE, BRANCH_ARCHS
from recall_lab.models.decode import decode_state
from recall_lab.models.lm import RecallLM
from recall_lab.models.state import StateCount, state_count

PAPER_PATTERNS = ("d", "sw", "sw+d", "a", "lsh", "ks", "hax")
PAPER_MODELS: tuple[str, ...] = tuple(
    [f"{base}{suffix}" for base in ("mamba", "mamba2")
     for suffix in ("", *(f"+{p}" for p in PAPER_PATTERNS), "-2x")]
    + ["samba", "transformer"]
)


# Models that are not `base+pattern` strings: name -> ModelConfig fields.
MODEL_ROWS: dict[str, dict] = {
    "samba": {"arch": "samba"},
    "transformer": {"arch": "transformer"},
    "mamba2-attn": {"arch": "mamba2-attn", "attn_layers": {"attention": "full"}},
    "mamba2-attn-sw": {"arch": "mamba2-attn", "attn_layers": {"attention": "sw"}},
    "mamba2-attn-se": {"arch": "mamba2-attn", "attn_layers": {"attention": "se"}},
    "attamba": {"arch": "attamba", "attamba": {}},
    "transformer+sw": {"arch": "transformer", "pattern": "sw"},
}
# SE-Attn rows: the hybrid branch with SE-Attn and its ablations, and the layer hybrid.
SEATTN_MODELS: tuple[str, ...] = tuple(
    [f"{base}+{p}" for base in ("mamba", "mamba2")
     for p in ("seattn", "seattn-nomem", "seattn-random", "seattn-landmark")]
    + ["mamba2-attn", "mamba2-attn-sw", "mamba2-attn-se"]
)
# Attamba rows and their baselines; `mamba+attamba` is this lab's own hybrid.
ATTAMBA_MODELS: tuple[str, ...] = ("attamba", "mamba+attamba", "transformer+sw")
# DeciMamba rows. Not strictly causal before the first SEP (the kept context depends
# on the whole context), so they are checked by their own causality test from SEP on.
DECI_MODELS: tuple[str, ...] = ("mamba+deci", "mamba2+deci")
# Controls: the hybrid branch with keys chosen from the token ids by the oracle
# pattern (attention/oracle.py) instead of a learned selector.
CONTROL_MODELS: tuple[str, ...] = ("mamba+oracle", "mamba2+oracle")
# Rows added by `register_model` (a test's or an experiment's own models), in order.
_REGISTERED: list[str] = []


def register_model(name: str, fields: dict) -> None:
    """Add a named model: one row of `ModelConfig` fields (`arch` and what differs from the
    defaults). The generic tests run over `registered_models()` too."""
    if name in MODEL_ROWS or name in PAPER_MODELS:
        raise RecallLabError(f"model {name!r} is already registered")
    if fields.get("arch") not in ARCH_TABLE:
        raise RecallLabError(f"model {name!r}: arch must be one of {', '.join(ARCH_TABLE)}")
    MODEL_ROWS[name] = dict(fields)
    _REGISTERED.append(name)


def registered_models() -> tuple[str, ...]:
    return tuple(_REGISTERED)


def builtin_models() -> tuple[str, ...]:
    """The lab's named models built from its own blocks, in `recall-lab models`' order."""
    return (PAPER_MODELS + SEATTN_MODELS + ATTAMBA_MODELS + DECI_MODELS + CONTROL_MODELS
            + registered_models())


def mixer_models() -> tuple[str, ...]:
    """Models named by the `recall_lab.mixers` entry points (the lab's own contract mixers and
    installed plug-ins): 2 layers of one mixer. A name a built-in model already has is left out."""
    return tuple(n for n in named_mixers() if not is_builtin_model(n))


def listed_models() -> tuple[str, ...]:
    """Every named model `recall-lab models` lists, in its order."""
    return builtin_models() + mixer_models()


def is_builtin_model(name: str) -> bool:
    arch = name.partition("+")[0]
    return name in MODEL_ROWS or arch.removesuffix("-2x") in BRANCH_ARCHS


def _mixer_fields(name: str, overrides: dict) -> dict | None:
    """The base fields of a mixer model (arch "mixer"), or None for a built-in model. `mixer` /
    `mixers` in the overrides make any name a mixer model (the name is then a label); names in
    them are resolved to import paths, so a run's config stores the path."""
    given = overrides.get("mixer") is not None or overrides.get("mixers") is not None
    if not given and (is_builtin_model(name) or name not in named_mixers()):
        return None
    if given and is_builtin_model(name):
        raise RecallLabError(f"model name {name!r} is a built-in model; name a mixer model "
                             "otherwise (or leave the name out: the class name is used)")
    base: dict = {"arch": "mixer"}
    if not given:
        base["mixer"] = named_mixers()[name]
    if overrides.get("mixer") is not None:
        overrides["mixer"] = resolve_mixer(overrides["mixer"])
    if overrides.get("mixers") is not None:
        mixers = list(overrides["mixers"])
        for i, entry in enumerate(mixers):
            if isinstance(entry, dict) and "mixer" in entry:
                mixers[i] = {**entry, "mixer": resolve_mixer(entry["mixer"])}
            elif not isinstance(entry, dict):
                mixers[i] = resolve_mixer(entry)
        overrides["mixers"] = mixers
        overrides.setdefault("n_layers", len(mixers))
    return base


def _known_patterns() -> tuple[str, ...]:
    return tuple(PATTERNS)


def model_config(name: str, vocab_size: int, **overrides) -> ModelConfig:
    """The `ModelConfig` of a named model, with field overrides (e.g. k=32, d_model=32)."""
    if not isinstance(name, str):
        raise RecallLabError(f"model name must be a string (see `recall-lab models`), got "
                             f"{type(name).__name__} {name!r}")
    base: dict = {"name": name, "vocab_size": vocab_size}
    overrides = {k: v for k, v in overrides.items() if v is not None}
    mixer = _mixer_fields(name, overrides)
    if mixer is not None:
        return ModelConfig.model_validate({**base, **mixer, **overrides})
    if name in MODEL_ROWS:
        base.update(MODEL_ROWS[name])
    else:
        arch, _, rest = name.partition("+")
        if arch.endswith("-2x") and not rest:
            arch = arch[:-3]
            base["d_model"] = 128
        if arch not in BRANCH_ARCHS:
            raise RecallLabError(_unknown(name))
        base["arch"] = arch
        if rest == "deci" or rest.startswith("deci+"):
            if rest != "deci":  # decimation shortens the sequence: no key-index branch on top
                raise RecallLabError(f"{name!r}: decimation cannot be combined with a pattern")
            base["decimation"] = {}
        elif rest:
            if rest not in _known_patterns():
                raise RecallLabError(_unknown(name))
            base["pattern"] = rest
    if base.get("pattern") == "attamba":
        base["attamba"] = {}
    if isinstance(base.get("decimation"), dict) and isinstance(overrides.get("decimation"), dict):
        overrides["decimation"] = {**base["decimation"], **overrides["decimation"]}
    if isinstance(base.get("attamba"), dict) and isinstance(overrides.get("attamba"), dict):
        overrides["attamba"] = {**base["attamba"], **overrides["attamba"]}
    return ModelConfig.model_validate({**base, **overrides})


def check_model_name(cfg: ModelConfig, where: str = "model config") -> None:
    """The name must describe the config's architecture and pattern, as `model_config` makes
    them (a config.json whose `name` was edited would label one model's weights as another's)."""
    if cfg.arch == "mixer" and not is_builtin_model(cfg.name):
        return  # a mixer model's name is a label (its import path is what builds it)
    expected = model_config(cfg.name, cfg.vocab_size)
    if (expected.arch, expected.pattern) != (cfg.arch, cfg.pattern):
        raise RecallLabError(
            f"{where}: model name {cfg.name!r} does not match its config (arch {cfg.arch!r}, "
            f"pattern {cfg.pattern!r}; the name means arch {expected.arch!r}, pattern "
            f"{expected.pattern!r})"
        )


def build_model(name: str | ModelConfig, vocab_size: int | None = None, **overrides) -> RecallLM:
    """Build a model by registry name (or from a full `ModelConfig`)."""
    if isinstance(name, ModelConfig):
        cfg = name.model_copy(update=overrides) if overrides else name
    else:
        if vocab_size is None:
            raise RecallLabError("build_model needs vocab_size")
        cfg = model_config(name, vocab_size, **overrides)
    return RecallLM(cfg)


def suggest(name: str, known: list[str]) -> str:
    """'did you mean X?' for the closest of `known` to a mistyped `name` (difflib), else ''."""
    close = difflib.get_close_matches(name, known, n=2, cutoff=0.75)
    if not close:
        return ""
    return f"did you mean {' or '.join(repr(c) for c in close)}? "


def _unknown(name: str) -> str:
    """One line: the nearest names (zoo mixers and built-in patterns among them) and where
    every model is listed; `mamba+PATTERN` and `--mixer` named as the ways beyond the list."""
    known = [*PAPER_MODELS, *(r for r in MODEL_ROWS if r not in PAPER_MODELS), *mixer_models()]
    known += [f"{base}+{p}" for base in ("mamba", "mamba2") for p in _known_patterns()
              if f"{base}+{p}" not in known]
    return unknown("model", name, known, "recall-lab models",
                   "; or mamba+PATTERN, or --mixer pkg.module:Class")


ATTENTIONS = ("keep", "full", "sw", "se", "se-paper", "se-nomem", "se-random")
_BRANCH = {"full": "full", "sw": "sw", "se": "seattn", "se-paper": "seattn",
           "se-nomem": "seattn-nomem", "se-random": "seattn-random"}


def with_attention(m: ModelConfig, attention: str) -> ModelConfig:
    """`m` with its attention replaced (see the module docstring); the name follows."""
    if attention not in ATTENTIONS:
        raise RecallLabError(f"unknown attention {attention!r}; choose from "
                             f"{', '.join(ATTENTIONS)}")
    if attention == "keep":
        return m
    se = m.seattn or SEAttnConfig()
    se = se.model_copy(update={"scoring": "chunk" if attention == "se-paper" else "prefix"})
    if m.arch == "mamba2-attn":
        retrieval = {"se-nomem": "none", "se-random": "random"}.get(attention)
        kind = "se" if attention.startswith("se") else attention
        layers = m.attention_layers.model_copy(update={"attention": kind})
        name = "mamba2-attn" + ("" if kind == "full" else f"-{kind}")
        update = {"attn_layers": layers, "name": name}
        if kind == "se":
            update["seattn"] = se.model_copy(update={"retrieval": retrieval})
        return ModelConfig.model_validate({**m.model_dump(), **update})
    if m.arch not in BRANCH_ARCHS or m.pattern is None:
        raise RecallLabError(f"{m.name} has no attention to swap (a hybrid branch model such as "
                             "mamba2+full, or mamba2-attn)")
    pattern = _BRANCH[attention]
    update = {"pattern": pattern, "name": f"{m.arch}+{pattern}",
              "seattn": se if pattern.startswith("seattn") else m.seattn}
    return ModelConfig.model_validate({**m.model_dump(), **update})


def _count(n: float) -> str:
    return f"{n:,.0f}"


def state_per_layer(count: StateCount) -> str:
    """The recurrent state per layer as `recall-lab models`, `place` and the reports show it:
    "2,048"; each layer's count where the layers differ ("384 (layer 1) / 9,945 (layer 2)",
    never their mean), each block's where a model's blocks are not its layers (a hybrid's
    attention layer beside them: "8,192 (block 1) / 8,064 (block 2) / 8,192 (block 3)"); a
    count that grows as log L with its length ("24,576 at 2,048 tokens (log L)"); "grows as
    L" (or L/P); "unknown"."""
    if count.recurrent is None:
        return count.text()
    n, blocks = count.n_layers, count.layers or ()
    if blocks and len(blocks) % n == 0:  # a layer of several blocks (samba: mamba, MLP, SWA)
        step = len(blocks) // n
        per = [sum(blocks[i:i + step]) for i in range(0, len(blocks), step)]
        where = "layer"
    else:
        per, where = list(blocks), "block"
    if per and len(set(per)) == 1:
        text = _count(per[0])
    elif per:
        text = " / ".join(f"{_count(x)} ({where} {i})" for i, x in enumerate(per, 1))
    else:  # no block counts: the whole model's count over its layers
        text = _count(count.recurrent.numbers / n)
    if count.growth == "log L":
        text += f" at {count.sequence_length:,} tokens (log L)"
    return text + (" (declared)" if count.source == "declared" else "")


def listing_row(name: str, vocab_size: int) -> dict:
    """One row of `recall-lab models`: name, backbone, branch, d_model, k (the attention budget,
    Attamba's chunk size P or DeciMamba's L_base), the parameter count, the recurrent state per
    layer under the lab's convention (models/state.py; `state_per_layer`), the convolution
    caches of all layers, and the decode state of all layers (bytes per sequence when constant
    in L, else how it grows; models/decode.py), each for one sequence at the model's max_len
    (2,048 where it has none)."""
    m = build_model(name, vocab_size)
    c = m.config
    k = f"P={c.attamba.chunk}" if c.attamba else (str(c.k) if c.uses_k else "-")
    if c.decimation is not None:
        k = f"L_base={c.decimation.L_base}"
    count = state_count(m, c.max_len or 2048)
    return {"name": name, "backbone": c.arch, "branch": c.pattern or ARCH_TABLE[c.arch].branch,
            "d_model": str(c.d_model), "k": k, "params": f"{m.n_params():,}",
            "state per layer": state_per_layer(count), "conv, all layers": count.conv_text(),
            "decode state": decode_state(m)}


def branch_legend(branches: set[str]) -> str:
    """`recall-lab models`' legend: what each attention branch in the listing is (the pattern
    table's `about`), and the name suffixes that are not patterns."""
    known = [b for b in sorted(branches) if b in PATTERN_TABLE and PATTERN_TABLE[b].about]
    return ("branch: " + "; ".join(f"{b} = {PATTERN_TABLE[b].about}" for b in known)
            + ". -2x: hidden size doubled; +deci: DeciMamba's decimation")


def unlisted_plugin(name: str, exc: Exception) -> tuple[str, str]:
    """A plug-in mixer that `listing_row` could not build: ("needs", what) when its constructor
    has arguments without a default that only `--mixer-kwargs` can give (zoology's Hyena needs
    l_max), else ("broken", why)."""
    try:
        needs = required_kwargs(load_mixer_class(resolve_mixer(name)))
    except RecallLabError:
        needs = []
    if needs:
        return "needs", (f"{', '.join(needs)} (give them with --mixer-kwargs or "
                         "[model.mixer_kwargs])")
    return "broken", str(exc) if isinstance(exc, RecallLabError) else one_line(exc)
