"""The lab's one state convention (recall_lab/mixers/state.py, models/state.py), checked three
ways for every built-in model and zoo mixer: the count the reports use (`state_count`, which
`recall-lab models`, `report` and the figures read) equals the recurrent part measured from the
decode cache and a per-family formula written here from the papers, never computed by the code
under test:

- Mamba (S6) and Mamba2 (SSD): ``expand * d_model * d_state`` per layer (the hidden state h of
  Mamba's Eq. 2a, one N-vector per channel); the short convolution apart, ``kernel - 1``
  columns per channel (Mamba: the d_inner channels; Mamba2: x, B and C, d_inner + 2 d_state);
- a key-index branch (the joint-recall paper's hybrid): its key and value slots, keys of the SSM
  state size and values of d_inner, plus LSH's running sums of q and k (the causal centre) and
  KS's running sum of q and slot scores;
- a sliding window of k keys: the k - 1 keys and values before the current token (which
  arrives with the input, as in a convolution's cache), in a hybrid branch or an attention
  layer (keys and values of d_model there);
- linear attention and Based's Taylor layers: heads x feature dim x (d_v + 1) (state and
  normaliser), the Taylor map's feature dim 1 + d' + d'(d'+1)/2 (the distinct products, as
  zoology's Based); Based's sliding layers 2 x (window - 1) x d_model; DeltaNet, Gated
  DeltaNet, GLA, KDA and Gated DeltaProduct: heads x d_k x d_v (zoology's count), their q/k/v
  convolutions apart; RWKV-7: heads x head size^2, its token shift (one previous column) apart
  as a convolution;
- Mamba-3 (arXiv 2603.15569): its state h, ``expand * d_model * d_state`` per layer; the
  previous token's rotated B (heads x mimo_rank x d_state), its x (d_inner) and the cumulative
  rotary angle (heads x rope_fraction * d_state / 2) are per-token caches, counted apart with
  the convolution caches;
- log-linear Mamba-2 (arXiv 2506.04761): ceil(log2 L) + 1 Fenwick states of d_state x headdim
  per head at length L, so ``expand * d_model * d_state * (ceil(log2 L) + 1)`` per layer: it
  grows by one Mamba-2 state per doubling of L ("log L"); its x, B, C convolution apart;
- attention's KV cache, Hyena's long convolution and SE-Attn with memory grow with L.

A stand-in with zoology's exact signature whose `state_size` overstates 4x (zoology's RWKV-7
was 4x too large at d_model 128, zoology issue 34) is flagged by `recall-lab check`."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from recall_lab.models.decode import one_step_cache
from recall_lab.models.registry import build_model, listed_models
from recall_lab.models.state import state_count
from recall_lab.testing import MixerSubject, check_state, fails, result_word

D, E, K, CONV, H_BITS = 64, 2, 64, 4, 8  # the lab's defaults: d_model, expand, k, d_conv, lsh bits
D_STATE = {"mamba": 16, "mamba2": 64}  # each backbone's default d_state (docs/models.md)
L = 64


def ssm(arch: str, d_model: int = D) -> tuple[int, int]:
    """(recurrent, conv) of one Mamba / Mamba2 layer."""
    n, inner = D_STATE[arch], E * d_model
    channels = inner if arch == "mamba" else inner + 2 * n  # Mamba2 convolves x, B and C
    return inner * n, (CONV - 1) * channels


def slots(n: int, arch: str) -> int:
    """n key-value slots of the hybrid branch: keys of the SSM state size, values of d_inner."""
    return n * (D_STATE[arch] + E * D)


def lsh(budget: int, arch: str) -> int:
    return 2**H_BITS * budget * (D_STATE[arch] + E * D) + 2 * D_STATE[arch]  # + sums of q, k


def ks(n: int, arch: str) -> int:
    return slots(n, arch) + D_STATE[arch] + n  # + the running sum of q, the slots' scores


# a window of n keys keeps n - 1 slots (the current key arrives with the input); dilated and
# sink parts keep all n (between dilated positions, or past the sink, every key read is past)
BRANCH = {"": lambda a: 0, "+sw": lambda a: slots(K - 1, a), "+d": lambda a: slots(K, a),
          "+sw+d": lambda a: slots(K // 2 - 1, a) + slots(K // 2, a),
          "+a": lambda a: slots(K // 2 - 1, a) + slots(K // 2, a),
          "+lsh": lambda a: lsh(K, a), "+ks": lambda a: ks(K, a),
          "+hax": lambda a: lsh(K // 2, a) + ks(K // 2, a),
          "+seattn-nomem": lambda a: slots(K // 2, a),  # one chunk of k/2, no memory
          "+deci": lambda a: 0}


def formula(name: str) -> tuple[int, int] | str:
    """(recurrent, conv) per sequence over the whole model, or how it grows."""
    for arch in ("mamba2", "mamba"):
        if name.startswith(arch) and name[len(arch):] in BRANCH:
            rec, conv = ssm(arch)
            return 2 * (rec + BRANCH[name[len(arch):]](arch)), 2 * conv
        if name == f"{arch}-2x":
            rec, conv = ssm(arch, 2 * D)
            return 2 * rec, 2 * conv
    window = (K - 1) * 2 * D  # a window of k: the k - 1 past keys and values of d_model
    fixed = {
        "samba": (2 * ssm("mamba")[0] + 2 * window, 2 * ssm("mamba")[1]),
        "transformer+sw": (2 * window, 0),
        "mamba2-attn-sw": (2 * ssm("mamba2")[0] + window, 2 * ssm("mamba2")[1]),
        # 4 heads of 16 x 16 (d_k = d_v = d_model / heads); q, k, v convolved
        "deltanet": (2 * 4 * 16 * 16, 2 * (CONV - 1) * 3 * D),
        "gated-deltanet": (2 * 4 * 16 * 16, 2 * (CONV - 1) * 3 * D),
        # KDA: 4 heads of d_k x d_v = 16 x 16 (its decay per key channel is a gate, not state);
        # q, k, v convolved
        "kda": (2 * 4 * 16 * 16, 2 * (CONV - 1) * 3 * D),
        # Gated DeltaProduct, n_h = 2: the same 4 heads of 16 x 16 (n_h is the transition's
        # rank, not the state's size); q and n_h keys and values convolved
        "gated-deltaproduct": (2 * 4 * 16 * 16, 2 * (CONV - 1) * (D + 2 * D + 2 * D)),
        # RWKV-7: d_model / head size = 4 heads of 16 x 16; the token shift keeps the previous
        # input, one column of d_model, counted as a convolution cache
        "rwkv7": (2 * 4 * 16 * 16, 2 * D),
        # 4 heads, d_k = d_model / 2 / heads = 8, d_v = 16; q, k (d_model / 2 each), v convolved
        "gla": (2 * 4 * 8 * 16, 2 * (CONV - 1) * (D // 2 + D // 2 + D)),
        # one head, ELU feature dim 16, d_v 64, with its normaliser; q, k (16 each), v convolved
        "linear-attn": (2 * 16 * (D + 1), 2 * (CONV - 1) * (16 + 16 + D)),
        # a sliding layer (window 4: 3 past keys and values) and a Taylor layer: 1 + 16 +
        # 16 * 17 / 2 features (the distinct second-order products), d_v 64 + 1
        "based": (2 * 3 * D + (1 + 16 + 16 * 17 // 2) * (D + 1), 0),
        # h of expand d_model x d_state; per-token caches: the previous B (4 heads x rank 1 x
        # d_state), the previous x (d_inner), the angle (4 heads x 16 * 0.5 / 2 angles)
        "mamba3": (2 * E * D * ZOO_D_STATE,
                   2 * (E * D // ZOO_HEADDIM * ZOO_D_STATE + E * D
                        + E * D // ZOO_HEADDIM * ZOO_D_STATE // 4)),
    }
    if name in fixed:
        return fixed[name]
    if name in LOG_L:
        return LOG_L[name](L)
    growing = {"attamba": "L/P", "mamba+attamba": "L/P"}
    return growing.get(name, "L")


def fenwick_levels(length: int) -> int:
    return math.ceil(math.log2(length)) + 1 if length > 1 else 1


ZOO_D_STATE, ZOO_HEADDIM = 16, 32  # mamba3's and log-linear-mamba2's defaults (docs/zoo.md)
# (recurrent, conv) per sequence over the whole model at length L, for states growing as log L
LOG_L = {"log-linear-mamba2": lambda length: (
    2 * E * D * ZOO_D_STATE * fenwick_levels(length), 2 * (CONV - 1) * (E * D + 2 * ZOO_D_STATE))}


GROWS = {"transformer", "mamba+seattn", "mamba+seattn-random", "mamba+seattn-landmark",
         "mamba2+seattn", "mamba2+seattn-random", "mamba2+seattn-landmark", "mamba2-attn",
         "mamba2-attn-se", "attamba", "mamba+attamba", "mamba+oracle", "mamba2+oracle",
         "hyena", "mha"}


def measured(model: nn.Module, caches: list | None = None) -> tuple[int, int]:
    """The decode cache after one step (or `caches`), by hand: float tensors under a name with
    "conv", or one its cache's class marks "conv" in `state_parts`, are the convolution caches;
    LSH's hash planes (the same for every sequence) and integer bookkeeping (slot positions,
    counts) are not state; every other float tensor is."""
    rec = conv = 0
    stack = [(b, False) for b in (one_step_cache(model).blocks if caches is None else caches)]
    seen = set()
    while stack:
        obj, in_conv = stack.pop()
        if id(obj) in seen or isinstance(obj, nn.Module):
            continue
        seen.add(id(obj))
        if torch.is_tensor(obj):
            if obj.is_floating_point():
                if in_conv:
                    conv += obj.numel()
                else:
                    rec += obj.numel()
            continue
        items = (obj.items() if isinstance(obj, dict) else enumerate(obj)
                 if isinstance(obj, (list, tuple)) else vars(obj).items()
                 if hasattr(obj, "__dict__") else ())
        marks = getattr(type(obj), "state_parts", {}) if not isinstance(obj, dict) else {}
        for key, value in items:
            if key == "planes":
                continue
            stack.append((value, in_conv or "conv" in str(key) or marks.get(key) == "conv"))
    return rec, conv


# the lab's models (the tests' own registered stand-in, tests/registry_extras.py, aside)
MODELS = [n for n in listed_models() if not n.startswith("test-")]


@pytest.mark.parametrize("name", MODELS)
def test_the_count_the_reports_use_is_the_cache_and_the_papers_formula(name):
    model = build_model(name, 40, max_len=L)
    got = state_count(model, L)
    want = formula(name)
    if name in LOG_L:  # a count at each length, growing by one state per head per doubling
        for length in (2, 34, 64, 130, 1024):
            got = state_count(model, length)
            want = LOG_L[name](length)
            assert (got.source, got.growth) == ("measured", "log L")
            assert (got.recurrent.numbers, got.conv.numbers) == want
            caches = [b.mixer.allocate_cache(1, length) for b in model.blocks]
            assert measured(model, caches) == want
        counts = [state_count(model, 2 ** k).recurrent.numbers for k in range(1, 12)]
        # one Mamba-2 state (expand d_model d_state) per layer per doubling of L
        steps = {b - a for a, b in zip(counts, counts[1:], strict=False)}
        assert steps == {2 * E * D * ZOO_D_STATE}
        return
    if isinstance(want, str):
        assert name in GROWS
        assert (got.recurrent, got.source, got.growth) == (None, "grows with L", want)
        return
    assert name not in GROWS
    assert got.source == "measured" and got.growth == "constant"
    assert (got.recurrent.numbers, got.conv.numbers) == want
    assert measured(model) == want
    assert got.recurrent.nbytes == 4 * want[0]  # float32 here
    assert got.per_layer() == want[0] / 2


def test_every_listed_model_has_a_formula():
    """A new built-in model needs its row here (else `formula` would call it growing)."""
    for name in MODELS:
        assert (name in GROWS) == isinstance(formula(name), str), name


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet", "gla", "linear-attn", "based",
                                  "hyena", "mha", "kda", "gated-deltaproduct", "rwkv7",
                                  "mamba3", "log-linear-mamba2"])
def test_each_zoo_mixers_state_size_is_its_recurrent_state(name):
    """zoology's count (`state_size(sequence_length=)`) of every zoo mixer equals what its step
    cache carries (the recurrent part), layer by layer: `check`'s state row passes (Hyena's
    history and attention's KV cache at the length both are taken at)."""
    model = build_model(name, 40, max_len=L)
    for layer, block in enumerate(model.blocks):
        row = check_state(MixerSubject(lambda b=block: b.mixer, d_model=D), length=L)
        assert row.passed is True, (layer, row)


class Overstated(nn.Module):
    """zoology's signatures: `state_size(self, sequence_length)` with no batch_size, here 4x
    the state its step carries (as zoology's RWKV-7 once was)."""

    def __init__(self, d_model: int, layer_idx: int = None) -> None:
        super().__init__()
        self.d_model = d_model
        self.decay = nn.Parameter(torch.full((d_model,), 0.9))

    def forward(self, x):
        out, h = [], torch.zeros_like(x[:, 0])
        for t in range(x.shape[1]):
            h = self.decay * h + x[:, t]
            out.append(h)
        return torch.stack(out, 1)

    def state_size(self, sequence_length: int):
        return 4 * self.d_model

    def allocate_cache(self, batch_size, max_len):
        return {"h": self.decay.new_zeros(batch_size, self.d_model)}

    def step(self, x_t, cache):
        cache["h"] = self.decay * cache["h"] + x_t
        return cache["h"]


def test_an_overstated_state_size_is_a_finding_and_fails_when_strict():
    subject = MixerSubject(lambda: Overstated(16))
    row = check_state(subject)
    assert row.passed is False and not row.correctness and result_word(row) == "finding"
    assert "declared 64 != measured 16" in row.value and "4.00x" in row.detail
    strict = check_state(subject, strict=True)
    assert strict.passed is False and strict.correctness and result_word(strict) == "FAIL"


def test_the_api_and_check_fail_an_overstated_state_only_when_strict():
    import recall_lab as rl

    plain = {r.name: r for r in rl.check(f"{__name__}:Overstated", learning=False, speed=False)}
    strict = {r.name: r for r in rl.check(f"{__name__}:Overstated", learning=False, speed=False,
                                          strict_state=True)}
    assert not fails(plain["state"]) and fails(strict["state"])
    assert [n for n, r in plain.items() if fails(r)] == []  # a finding, not a failure


class BrokenStateSize(Overstated):
    def state_size(self, sequence_length: int):
        raise RuntimeError("state_size is broken on purpose")


@pytest.mark.parametrize("target, strict, code, word", [
    ("Overstated", False, 0, "finding"), ("Overstated", True, 1, "FAIL"),
    ("BrokenStateSize", False, 1, "FAIL")])
def test_a_row_that_reads_fail_fails_the_command(target, strict, code, word):
    """The exit code follows the rows: FAIL exits 1; a finding (a declared count that differs
    from the measured one) reads "finding" and exits 0 unless --strict-state; a state_size that
    raises is broken code, FAIL without --strict-state."""
    from typer.testing import CliRunner

    from recall_lab.cli import app

    args = ["check", f"{__name__}:{target}", "--no-learning", "--no-speed"]
    r = CliRunner().invoke(app, args + (["--strict-state"] if strict else []))
    assert r.exit_code == code, r.output
    state = next(line for line in r.output.splitlines() if line.strip("│ ").startswith("state"))
    assert word in state and ({"FAIL", "finding"} - {word}).isdisjoint(state.split()), state


def test_growth_class_tells_fixed_log_l_and_l_apart():
    """Sizes at three lengths: equal is "constant"; the same increase per doubling is "log L"
    (Fenwick levels: 3, 7, 11 at 4, 64, 1,024 tokens); anything else that changes, "L" (a KV
    cache, and a window capped below the longest probe, as before the log class)."""
    from recall_lab.mixers.state import growth_class
    from recall_lab.models.decode import state_growth

    assert growth_class({4: 10, 64: 10, 1024: 10}) == "constant"
    assert growth_class({4: 3, 64: 7, 1024: 11}) == "log L"
    assert growth_class({4: 8, 64: 128, 1024: 2048}) == "L"
    assert growth_class({4: 4, 64: 64, 1024: 64}) == "L"
    assert growth_class({4: 11, 64: 7, 1024: 3}) == "L"
    growth = {n: state_growth(build_model(n, 40, max_len=L))
              for n in ("log-linear-mamba2", "mamba3", "mha")}
    assert growth["log-linear-mamba2"] == "log L" and growth["mamba3"] == "constant"
    assert growth["mha"] == "L"
