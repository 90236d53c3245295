"""Length extrapolation (DeciMamba Fig. 1/6 shape): trained runs evaluated on the same tables at
k times their training length (more filler, `TaskSpec.at_length`), as trained and with DeciMamba
applied zero-shot, plus the Mamba Mean Distance (Eq. 8) of every layer at every length.

Rows: {run, model, variant, factor, length, acc, exact, loss, n, kept_non_filler, md_last
(per layer), md_last_norm}. The held-out set at factor k is drawn from the same seed as at 1x, so
the tables (keys and values) are identical and only the filler grows.

With `decode`, every row is also evaluated by recurrent decoding (models/decode.py: the context
prefilled, DeciMamba's decimating layers dropping tokens during the prefill only, the inquiry
stepped token by token): decode_acc, decode_equal (its accuracy equals the parallel one), and
the process CPU milliseconds per sample of both evaluations, decode_ms and parallel_ms (one
torch thread is the caller's to set).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from recall_lab.analysis.collect import capture
from recall_lab.analysis.mean_distance import mamba_mean_distance_last
from recall_lab.analysis.plots import save_figure
from recall_lab.analysis.runs import load_run
from recall_lab.config import DecimationConfig, int_list
from recall_lab.evaluate import evaluate, held_out, kept_non_filler, set_decimation
from recall_lab.generators.errors import RecallLabError

Variant = tuple[str, DecimationConfig | str | None]  # (label, config | "off" | None = as trained)


def _variants(model_cfg, decimations: Sequence[Variant]) -> list[Variant]:
    """As trained first; then every requested zero-shot setting the model can take."""
    out: list[Variant] = [("as trained", None)]
    plain_ssm = model_cfg.arch in ("mamba", "mamba2") and model_cfg.pattern is None
    for label, deci in decimations:
        if deci == "off" and model_cfg.decimation is None:
            continue  # the same as "as trained"
        if deci != "off" and not plain_ssm:
            continue
        out.append((label, deci))
    return out


@torch.no_grad()
def _mean_distance(model, ids: torch.Tensor) -> list[float]:
    cap = capture(model, ids)
    return [float(mamba_mean_distance_last(p).nanmean()) for p in cap.params]


def extrapolation_rows(
    runs: Sequence[Path], factors: Sequence[int], decimations: Sequence[Variant] = (), *,
    n: int = 128, data_seed: int = 0, batch_size: int = 32, md_samples: int = 0,
    which: str = "best", progress: Callable[[str], None] | None = None, decode: bool = False,
) -> list[dict]:
    """Evaluate every run x variant x length factor (module docstring)."""
    if not runs:
        raise RecallLabError("no runs given")
    if not factors or min(factors) < 1:
        raise RecallLabError(f"length factors must be >= 1, got {list(factors)}")
    rows: list[dict] = []
    for run in runs:
        model, cfg = load_run(run, which)
        base = cfg.task
        if not base.has_filler:
            raise RecallLabError(f"{run}: its task has no filler, so it cannot be lengthened with "
                                 "the same tables (train on a filler task, e.g. passkey)")
        for label, deci in _variants(cfg.model, decimations):
            model.decimation = cfg.model.decimation
            if deci is not None:
                set_decimation(model, deci, cfg, data_seed, torch.device("cpu"))
            used = model.decimation.model_dump(mode="json") if model.decimation else None
            for f in factors:
                spec = base.at_length(int(f))
                x, y = held_out(spec, n, data_seed, "test")
                m, cpu = _timed(evaluate, model, x, y, batch_size, "cpu")
                row = {"run": str(run), "model": cfg.model.name, "variant": label,
                       "decimation": used, "factor": int(f), "length": spec.max_len,
                       "train_length": base.max_len, **m,
                       "kept_non_filler": kept_non_filler(model, x[:batch_size], spec, "cpu")}
                if decode:
                    d, dcpu = _timed(evaluate, model, x, y, batch_size, "cpu", decode=True)
                    row.update(decode_acc=d["acc"], decode_equal=d["acc"] == m["acc"],
                               decode_ms=1e3 * dcpu / len(x), parallel_ms=1e3 * cpu / len(x))
                if md_samples:
                    md = _mean_distance(model, torch.from_numpy(x[:md_samples]))
                    row["md_last"] = md
                rows.append(row)
                if progress is not None:
                    progress(f"{cfg.model.name} / {label} x{f}: acc {m['acc']:.3f}")
    return rows


def _timed(fn: Callable, *args, **kwargs) -> tuple[dict, float]:
    """fn's result and the process CPU seconds it took."""
    start = time.process_time()
    out = fn(*args, **kwargs)
    return out, time.process_time() - start


def _label(row: dict) -> str:
    return f"{row['model']} ({row['variant']})"


def markdown(rows: list[dict], key: str = "acc", fmt: str = "{:.3f}") -> str:
    """One line per run/variant, one column per length: a Markdown table of `key`."""
    lengths = sorted({r["length"] for r in rows})
    lines = ["| model (variant) | " + " | ".join(f"L={n}" for n in lengths) + " |",
             "|---|" + "---:|" * len(lengths)]
    groups: dict[str, dict[int, dict]] = {}
    for r in rows:
        groups.setdefault(f"{_label(r)} `{Path(r['run']).name}`", {})[r["length"]] = r
    for name, by_len in groups.items():
        cells = []
        for n in lengths:
            v = by_len.get(n, {}).get(key)
            if isinstance(v, list):
                v = v[-1] if v else None  # md_last: the last layer
            cells.append("" if v is None or (isinstance(v, float) and math.isnan(v))
                         else fmt.format(v))
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def plot(rows: list[dict], path: Path, key: str = "acc", ylabel: str = "accuracy") -> Path:
    """`key` vs evaluation length, one line per run/variant (colour per variant, line style per
    run), legend beside the axes."""
    import matplotlib.pyplot as plt  # after analysis.plots (imported above) set the Agg backend

    fig, ax = plt.subplots(figsize=(10.0, 4.5))
    runs = list(dict.fromkeys(r["run"] for r in rows))
    models = [r["model"] for r in {r["run"]: r for r in rows}.values()]
    unique = len(set(models)) == len(models)  # one run per model: name lines by model
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    variants = list(dict.fromkeys(r["variant"] for r in rows))
    groups: dict[tuple[str, str], list[dict]] = {}
    for r in rows:
        groups.setdefault((r["run"], r["variant"]), []).append(r)
    for (run, variant), rs in groups.items():
        rs = sorted(rs, key=lambda r: r["length"])
        ys = [r[key][-1] if isinstance(r[key], list) else r[key] for r in rs]
        name = _label(rs[0]) if unique else f"{_label(rs[0])} {Path(run).name}"
        ax.plot([r["length"] for r in rs], ys, marker="o", label=name,
                color=colors[variants.index(variant) % len(colors)],
                ls=("-", "--", ":", "-.")[runs.index(run) % 4])
    for t in sorted({r["train_length"] for r in rows}):
        ax.axvline(t, color="purple", ls="--", lw=0.8)
    ax.set_xscale("log", base=2)
    ax.set_xlabel("evaluation length (tokens); purple: training length")
    ax.set_ylabel(ylabel)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return save_figure(fig, path)


def write_outputs(rows: list[dict], out: Path, command: str) -> list[Path]:
    """extrapolation.json, extrapolation.md, acc.png (and md.png with mean distances)."""
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    files = [out / "extrapolation.json", out / "extrapolation.md", out / "acc.png"]
    files[0].write_text(json.dumps({"command": command, "rows": rows}, indent=1))
    parts = [f"Command: `{command}`", "", "Per-sample accuracy:", "", markdown(rows), "",
             "Share of non-filler context tokens kept after decimation:", "",
             markdown(rows, "kept_non_filler", "{:.2f}")]
    if any("md_last" in r for r in rows):
        parts += ["", "Mamba Mean Distance of the last token (Eq. 8), last layer:", "",
                  markdown(rows, "md_last", "{:.1f}")]
        files.append(plot(rows, out / "md.png", "md_last", "mean distance, last layer"))
    if any("decode_acc" in r for r in rows):
        parts += ["", "Per-sample accuracy by recurrent decoding (prefill, then token by token):",
                  "", markdown(rows, "decode_acc"), "",
                  "CPU ms per sample, recurrent decoding:", "",
                  markdown(rows, "decode_ms", "{:.1f}"), "",
                  "CPU ms per sample, parallel forward:", "",
                  markdown(rows, "parallel_ms", "{:.1f}")]
    files[1].write_text("\n".join(parts) + "\n")
    plot(rows, files[2])
    return files


def parse_factors(text: str) -> list[int]:
    return int_list(text, "--factors", 1)

