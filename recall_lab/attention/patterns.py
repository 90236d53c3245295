"""The pattern registry: one row per pattern name, read by everything that needs the list.

Every pattern maps ``q, k: [B, H, L, d]`` to ``idx: int32 [B, H, L, n]`` (or a shape that
broadcasts to it, e.g. ``[1, 1, L, n]`` for context-independent patterns): entry ``idx[..., i, s]``
is a key position ``j <= i`` or ``-1`` for an empty slot. No pattern ever builds an ``L x L``
tensor except ``full`` (the dense baseline, whose index list is ``L`` long by definition).

Semantics (all strictly causal: the keys chosen for query ``i`` depend on tokens ``<= i`` only,
never on the sequence length ``L`` or on batch padding; every pattern parameter, such as the gap
of ``d``, is fixed by the configuration). One file per family:

* ``fixed.py``: ``sw`` SW(n): keys ``i-n+1 .. i``; ``sink`` Sink(n): keys ``0 .. n-1``; ``d``
  D(n): keys ``j`` with ``j % g == g-1`` (the phase of the original release), ``j <= i``, the
  ``n`` most recent of them. Gap ``g`` from the config's ``max_len`` (the longest sequence the
  model is built for; 2048 when not given): ``dilation="auto"`` -> ``g = ceil(max_len / n)``, the
  smallest gap for which no query of a sequence up to ``max_len`` has more than ``n`` candidates;
  ``dilation="release"`` -> ``g = max_len // n``, the release's rule; an int fixes it. (Deriving g
  from the padded batch length L, as an earlier version did, made query i's keys depend on the
  tokens after i and on its batch-mates: HAX paper Eq. 10-11 forbid that.) ``a`` = SW(n - n//2) u
  Sink(n//2); ``sw+d`` = SW(n - n//2) u D(n//2); ``full``: every ``j <= i``.
* ``lsh.py`` (Eq. 5-9): q, k centred by their causal prefix mean and normalised per vector; bins
  by the sign-bit rule (Eq. 7, 2^h bins, most significant bit = plane 1) or the argmax rule (Eq.
  6, h bins); query ``i`` keeps the ``n`` most recent keys ``j <= i`` of its own bin (it may
  select its own position). Planes ``[H, d, h]`` ~ N(0, 1): fresh per call in training mode,
  drawn from ``seed`` in eval mode.
* ``ks.py`` (Eq. 12-17): score ``x_j = MLP([k_j, normalize(sum_{p<=j} q_p)])`` on detached
  inputs; query ``i`` takes the top-n scores among ``x_0 .. x_i`` (ties: the earlier key wins).
  In training mode the module also returns the pairwise ranking loss on n randomly sampled keys.
* ``hax.py`` (Eq. 19-20) = LSH(n - n//2) u KS(n//2).
* ``seattn.py``: ``seattn``, ``seattn-nomem``, ``seattn-random``, ``seattn-landmark``
  (SE-Attn, Expansion Span): own chunk + top-k retrieved memory blocks.
* ``attamba.py`` (Attamba Eq. 5, Fig. 5): chunk ends ``j <= i`` plus a leading window; here
  ``n`` is the chunk size P, and a query gets up to ceil(L/P) + leading keys.
* ``oracle.py`` (the control for KS): the only pattern that reads the token ids
  (``takes_ids``; called as ``pattern(q, k, v, ids=ids)``, q and k ignored): query i takes the
  ``n`` most recent positions ``j + 1 <= i`` with ``x_j == x_i`` and ``x_j`` a key id (option
  ``keys = (lo, hi)``, which `RunConfig` fills from the task's last level; None = every id), i.e.
  the value after each earlier occurrence of its key. No scorer, no aux loss. In multi-level
  joint recall that lists the values of every context's copy of the key, not the context's own.

A union counts a key once (OR of masks); slot order within a row carries no meaning.

Cost of building indices: O(L n) for the fixed patterns, O(L log L + L n) for LSH (one sort of
``(bin, position)`` codes, one ``searchsorted``, one gather) and for the oracle (the same search
with token ids as bins), O(L n log n) for KS (block-wise running top-n: a log-depth scan over
blocks of n keys, then one top-n over 2n candidates per query).

Adding a pattern: a file with its index function and `Pattern` module, and one `PatternRow` in
`PATTERN_TABLE` (or `register_pattern` for one that lives outside the package, as the tests'
own do); `make_pattern`, the hybrid branch, model names (`mamba+NAME`) and the generic tests read
the table. Decoding needs nothing more: a pattern without a `decoder()` method decodes with the
exact prefix decoder (attention/decode.py); a bounded decode state is an optional method in the
pattern's file (as fixed.py, lsh.py, ks.py, seattn.py, attamba.py have), tied to the parallel
form by the generic decode test. A pattern that reads token ids sets ``takes_ids = True``: the
hybrid branch then passes ``ids=`` to it (and the prefix decoder keeps the ids); the generic
pattern tests pass random ids to it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from recall_lab.attention.attamba import AttambaPattern
from recall_lab.attention.base import (
    Pattern,
    UnionPattern,
    check_qk,
    union_indices,
    union_indices_torch,
)
from recall_lab.attention.fixed import (
    RELEASE_MAX_LEN,
    FixedPattern,
    a_pattern,
    dilated_indices,
    dilation_for,
    full_indices,
    sink_indices,
    sliding_window_indices,
    sw_d_pattern,
)
from recall_lab.attention.hax import KS_OPTIONS, LSH_OPTIONS, hax_pattern
from recall_lab.attention.ks import (
    KSPattern,
    causal_topk_indices,
    causal_topk_indices_torch,
    ks_ranking_loss,
)
from recall_lab.attention.lsh import (
    LSH_RULES,
    LSHPattern,
    bucket_window_indices,
    bucket_window_indices_torch,
    causal_center,
    lsh_bins,
    lsh_indices,
    sample_planes,
)
from recall_lab.attention.oracle import ORACLE_OPTIONS, OraclePattern, oracle_indices
from recall_lab.attention.seattn import OPTIONS as SEATTN_OPTIONS
from recall_lab.attention.seattn import VARIANTS as SEATTN_VARIANTS
from recall_lab.attention.seattn import make_seattn
from recall_lab.generators.errors import RecallLabError

# What a hybrid branch fills in for a pattern (`models/hybrid.make_branch_pattern`), by name:
# "max_len": the model's longest sequence (fixes the dilated gap); "lsh_bits": h = the model's
# sign-bit planes; "layer_seed": the evaluation planes' seed + the layer index; "dim": the q/k
# size of the branch; "key_summary": SE-Attn summarises keys (v is d_inner wide, not d_qk).
BRANCH_DEFAULTS = ("max_len", "lsh_bits", "layer_seed", "dim", "key_summary")


def _no_test_options(n: int, d: int) -> dict:
    return {}


@dataclass(frozen=True)
class PatternRow:
    """One pattern: `build(k, **options)` -> `Pattern`; the `options` it accepts (`needs`: those
    it cannot do without, each with what it is, for the error); `splits_k`: a two-part union
    (k - k//2 and k//2, so k >= 2); `branch`: the `BRANCH_DEFAULTS` a hybrid branch fills in;
    `test_options(n, d)`: the options the generic tests build it with at budget n and q/k
    width d."""

    build: Callable[..., Pattern]
    options: frozenset[str] = frozenset()
    needs: tuple[tuple[str, str], ...] = ()
    splits_k: bool = False
    branch: tuple[str, ...] = ()
    test_options: Callable[[int, int], dict] = field(default=_no_test_options)
    about: str = ""  # a few words for listings (`recall-lab models`' legend)

    def __post_init__(self) -> None:
        unknown = set(self.branch) - set(BRANCH_DEFAULTS)
        if unknown:
            raise RecallLabError(f"unknown branch default {sorted(unknown)[0]!r}; choose from "
                                 f"{', '.join(BRANCH_DEFAULTS)}")


def _fixed(kind: str) -> Callable[..., Pattern]:
    def build(k: int) -> Pattern:
        return FixedPattern(kind, k)

    return build


def _dilated(k: int, **opts) -> Pattern:
    return FixedPattern("d", k, **opts)


def _seattn(name: str) -> Callable[..., Pattern]:
    def build(k: int, **opts) -> Pattern:
        return make_seattn(name, k, **opts)

    return build


def _lsh_test(n: int, d: int) -> dict:
    return {"h": 3}


def _ks_test(n: int, d: int) -> dict:
    return {"dim": d}


def _hax_test(n: int, d: int) -> dict:
    return {"dim": d, "h": 3}


def _seattn_test(n: int, d: int) -> dict:
    return {"chunk": max(1, n // 2), "block": 2, "topk": 2}


D_OPTIONS = frozenset({"dilation", "max_len"})
NEEDS_DIM = (("dim", "the q/k feature size"),)
ATTAMBA_OPTIONS = frozenset({"leading", "chunking", "offset", "layer", "n_layers", "seed",
                             "eval_chunking", "eval_chunk"})

# The order is the order of every listing (`PATTERNS`, error messages).
PATTERN_TABLE: dict[str, PatternRow] = {
    "sw": PatternRow(_fixed("sw"), about="sliding window: the k latest keys"),
    "d": PatternRow(_dilated, D_OPTIONS, branch=("max_len",),
                    about="dilated: every gap-th key, k of them"),
    "sink": PatternRow(_fixed("sink"), about="the first k tokens"),
    "a": PatternRow(a_pattern, splits_k=True, about="A-shaped: sink + sliding window"),
    "sw+d": PatternRow(sw_d_pattern, D_OPTIONS, splits_k=True, branch=("max_len",),
                       about="sliding window + dilated"),
    "lsh": PatternRow(LSHPattern, LSH_OPTIONS, branch=("lsh_bits", "layer_seed"),
                      test_options=_lsh_test, about="LSH: keys in the query's hash bin"),
    "ks": PatternRow(KSPattern, KS_OPTIONS, needs=NEEDS_DIM, branch=("dim",),
                     test_options=_ks_test, about="key selection: each query's top-k scored keys"),
    "hax": PatternRow(hax_pattern, LSH_OPTIONS | KS_OPTIONS, needs=NEEDS_DIM, splits_k=True,
                      branch=("lsh_bits", "layer_seed", "dim"), test_options=_hax_test,
                      about="HAX: LSH + key selection"),
    "full": PatternRow(_fixed("full"), about="every earlier key"),
    **{name: PatternRow(_seattn(name), frozenset(SEATTN_OPTIONS - set(fixed)),
                        branch=("key_summary",), test_options=_seattn_test,
                        about="SE-Attn: a chunk and " + {
                            "seattn-nomem": "no memory blocks",
                            "seattn-random": "randomly retrieved memory blocks",
                            "seattn-landmark": "memory blocks retrieved by landmark summaries",
                        }.get(name, "retrieved memory blocks"))
       for name, fixed in SEATTN_VARIANTS.items()},
    "attamba": PatternRow(AttambaPattern, ATTAMBA_OPTIONS,
                          about="Attamba: chunk-end keys and leading tokens"),
    # the control for KS: keys chosen from the token ids (attention/oracle.py); `keys` is the
    # task's key-id range, filled by RunConfig (config.TASK_KEY_PATTERNS lists this row)
    "oracle": PatternRow(OraclePattern, ORACLE_OPTIONS,
                         about="oracle control: keys chosen from the token ids"),
}
# A live view: a pattern registered later is listed too.
PATTERNS = PATTERN_TABLE.keys()


def register_pattern(name: str, row: PatternRow) -> None:
    """Add a pattern defined outside this package (a test's, an experiment's own)."""
    if name in PATTERN_TABLE:
        raise RecallLabError(f"attention pattern {name!r} is already registered")
    PATTERN_TABLE[name] = row


def make_pattern(name: str, k: int, **opts) -> Pattern:
    """Build a pattern module by name (see :data:`PATTERNS`) with total key budget ``k``.

    Options: ``d``/``sw+d``: ``dilation`` ('auto' | 'release' | int), ``max_len`` (2048; the
    longest sequence planned for, which fixes the gap);
    ``lsh``/``hax``: ``h`` (8), ``rule`` ('sign' | 'argmax'), ``seed`` (0, eval planes);
    ``ks``/``hax``: ``dim`` (q/k size, required), ``hidden`` (2*dim), ``scale`` (dim**-0.5, for
    the ranking-loss target). Two-part patterns (a, sw+d, hax) give k//2 to the second part and
    the rest to the first (32 + 32 for the paper's k = 64). ``full`` ignores k.
    ``seattn*`` (SE-Attn, :mod:`recall_lab.attention.seattn`): ``chunk``, ``block``, ``topk``,
    ``chunk_choices``, ``scoring``, ``summary``, ``pool``, ``retrieval``, ``seed``.
    ``attamba``: k is the chunk size P; options ``leading`` (P; an int or 'chunk'), ``chunking``
    ('uniform' | 'cyclic' | 'random'), ``offset``, ``layer``/``n_layers`` (cyclic offsets, random
    seeds), ``seed``, ``eval_chunking``, ``eval_chunk`` (see ``attamba.py``).
    ``oracle``: ``keys`` (the key-id range [lo, hi); None = every id); called with ``ids=``.
    """
    row = PATTERN_TABLE.get(name)
    if row is None:
        raise RecallLabError(
            f"unknown attention pattern {name!r}; choose from {', '.join(PATTERNS)}")
    if isinstance(k, bool) or not isinstance(k, int) or k < 1:
        raise RecallLabError(f"attention budget k must be an int >= 1, got {k!r}")
    bad = set(opts) - row.options
    if bad:
        raise RecallLabError(f"pattern {name!r} takes no option {sorted(bad)[0]!r}; "
                             f"allowed: {sorted(row.options) or 'none'}")
    if row.splits_k and k // 2 < 1:
        raise RecallLabError(f"pattern {name!r} splits k in two; k must be >= 2, got {k}")
    for need, what in row.needs:
        if need not in opts:
            raise RecallLabError(f"pattern {name!r} needs {need}= ({what})")
    return row.build(k, **opts)


# Kept importable from here (bench/train.py and tests import them from this module).
__all__ = [
    "BRANCH_DEFAULTS",
    "PATTERNS",
    "PATTERN_TABLE",
    "LSH_RULES",
    "RELEASE_MAX_LEN",
    "PatternRow",
    "make_pattern",
    "register_pattern",
    "sliding_window_indices",
    "sink_indices",
    "dilated_indices",
    "dilation_for",
    "full_indices",
    "union_indices",
    "union_indices_torch",
    "causal_center",
    "sample_planes",
    "lsh_bins",
    "bucket_window_indices",
    "bucket_window_indices_torch",
    "lsh_indices",
    "causal_topk_indices",
    "causal_topk_indices_torch",
    "ks_ranking_loss",
    "check_qk",
    "Pattern",
    "FixedPattern",
    "UnionPattern",
    "LSHPattern",
    "KSPattern",
    "OraclePattern",
    "oracle_indices",
]
