"""Is the lab's `block = "zoology"` model zoology's own model? A check on shared weights.

    .venv/bin/python scripts/zoology_fidelity.py --zoology /path/to/zoology [--json OUT.json]

zoology's location is an argument (a checkout of HazyResearch/zoology), never a dependency: its
`LanguageModel` is built from its own Figure 2 config (zoology/experiments/paper_configs/
iclr24_zoology_figure2/configs.py, the run named by `--run-id`, by default attention at
Figure 2's first cell), the lab's model from the same settings mapped onto `[model]` fields
(`block = "zoology"`, zoology-fig2.toml's recipe), and zoology's weights are copied into the lab's
model by name. Then, in float64:

1. the logits of one batch (max difference, required <= 1e-10);
2. every parameter's gradient of the loss on that batch (each computed as its trainer computes
   it: zoology's `Trainer.compute_loss`, the lab's `objective` over its scored-positions head);
3. `--steps` AdamW steps (default 200) on the same batches in the same order, each side with its
   own optimizer construction (zoology's `AdamW(model.parameters())`, the lab's decay-all
   groups), lr and weight decay from zoology's config, held constant (zoology's cosine steps per
   epoch, so its first epoch's lr is constant): the two loss curves.

Dropout is set to 0 on both sides: random masks cannot be shared between two implementations
(SDPA's and zoology's F.dropout draw differently), so the comparison is of the deterministic
model. The CPU changes zoology needs are made here at run time, in memory, and printed; nothing
of zoology is copied into the lab. Bad input (not a zoology checkout, a commit whose model does
not have the parameters this maps, a config it cannot map) is one `error:` line, exit 2.
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import inspect
import io
import json
import subprocess
import sys
import time
import types
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from recall_lab.data import batch_at  # noqa: E402
from recall_lab.generators.errors import RecallLabError  # noqa: E402
from recall_lab.generators.tasks import generator_task  # noqa: E402
from recall_lab.models import build_model, model_config  # noqa: E402
from recall_lab.models.lm import forward_scored  # noqa: E402
from recall_lab.train import make_optimizer, objective, optimizer_step  # noqa: E402

# Figure 2's configs: under paper_configs/ from d88d6f5, directly under experiments/ before
FIGURE2 = ("zoology.experiments.paper_configs.iclr24_zoology_figure2.configs",
           "zoology.experiments.iclr24_zoology_figure2.configs")
FIRST_CELL = "attention-seqlen64-dmodel64-lr0.002154434690031882-kv4"
LOGIT_TOL = 1e-10


def fail(msg: str) -> None:
    raise RecallLabError(msg)


def zoology_commit(path: Path) -> str:
    try:
        out = subprocess.run(["git", "-C", str(path), "rev-parse", "HEAD"], capture_output=True,
                             text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return "unknown (git not available)"
    return out.stdout.strip() if out.returncode == 0 else "unknown (not a git checkout)"


def first_module(names: tuple[str, ...]):
    """The first of `names` that imports (a missing module of that path is skipped)."""
    for name in names:
        try:
            return importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if not (exc.name and name.startswith(exc.name)):
                raise
    return None


def import_zoology(path: Path, patches: list[str]):
    """zoology's model module and its Figure 2 configs, from `path`, with the CPU patches."""
    if not (path / "zoology" / "model.py").is_file():
        fail(f"{path} is not a zoology checkout: zoology expects zoology/model.py under it "
             "(git clone https://github.com/HazyResearch/zoology)")
    sys.path.insert(0, str(path))
    try:
        importlib.import_module("torchvision.ops")
    except ImportError:
        # zoology/model.py imports torchvision's StochasticDepth for drop-path; at drop_path 0
        # it is the identity, so a stand-in that refuses any other rate keeps the model's math
        class StochasticDepth(torch.nn.Module):
            def __init__(self, p: float, mode: str) -> None:
                super().__init__()
                if p != 0:
                    fail(f"drop_path {p}: the CPU stand-in of StochasticDepth is the identity "
                         "(drop_path 0) only; install torchvision")

            def forward(self, x):
                return x

        tv, ops = types.ModuleType("torchvision"), types.ModuleType("torchvision.ops")
        ops.StochasticDepth, tv.ops = StochasticDepth, ops
        sys.modules.update({"torchvision": tv, "torchvision.ops": ops})
        patches.append("torchvision is not installed: torchvision.ops.StochasticDepth is an "
                       "identity stand-in (Figure 2's drop_path is 0; another rate is refused)")
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zmodel = importlib.import_module("zoology.model")
            ztrain = importlib.import_module("zoology.train")
            zconfigs = first_module(FIGURE2)
            if zconfigs is None:
                fail(f"{path}: zoology's Figure 2 configs are missing (this maps "
                     f"{' or '.join(FIGURE2)}; the checkout may predate them)")
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.startswith("zoology"):
            fail(f"{path}: zoology's module {exc.name} is missing (this maps zoology.model, "
                 "zoology.train and Figure 2's configs; the checkout may predate them)")
        fail(f"zoology needs {exc.name}: pip install einops wandb pandas tqdm (its setup.py's "
             "requirements; torch is already here)")
    for cls, attrs in ((zmodel, ("LanguageModel", "TransformerBlock", "TokenEmbeddings")),
                       (ztrain, ("Trainer",))):
        missing = [a for a in attrs if not hasattr(cls, a)]
        if missing:
            fail(f"zoology at {path}: {cls.__name__} has no {missing[0]} (this maps zoology's "
                 f"{', '.join(attrs)})")
    init = zmodel.TokenEmbeddings.__init__
    if "device" not in inspect.signature(init).parameters:
        fail("zoology's TokenEmbeddings takes no `device` argument: its model signature "
             "differs from the one this maps (commit d88d6f5)")
    if inspect.signature(init).parameters["device"].default != "cpu":
        def on_cpu(self, *args, device="cpu", **kwargs):
            init(self, *args, device="cpu", **kwargs)

        zmodel.TokenEmbeddings.__init__ = on_cpu
        patches.append("TokenEmbeddings(device='cuda') by default: built with device='cpu' "
                       "(its position ids are made on that device)")
    return zmodel, zconfigs, ztrain, zconfigs.__name__


def figure2_config(zconfigs, run_id: str):
    found = [c for c in zconfigs.configs if c.run_id == run_id]
    if not found:
        ids = sorted({c.run_id for c in zconfigs.configs if c.run_id.startswith("attention")})
        fail(f"run id {run_id!r} is not in zoology's Figure 2 configs; its attention runs are "
             f"e.g. {', '.join(ids[:2])}")
    return found[0]


def lab_fields(config) -> dict:
    """The lab's `[model]` fields for zoology's ModelConfig, or one line saying what does not
    map."""
    m = config.model
    seq, state = m.sequence_mixer, m.state_mixer
    need = {
        "sequence_mixer": (seq.name, "zoology.mixers.attention.MHA"),
        "state_mixer": (state.name, "torch.nn.Identity"),
        "block_type": (m.block_type, "TransformerBlock"),
        "resid_dropout": (m.resid_dropout, 0.0),
        "drop_path": (m.drop_path, 0.0),
        "learnable_word_embeddings": (m.learnable_word_embeddings, True),
        "embedding_init_type": (getattr(m, "embedding_init_type", "default"), "default"),
        "layer_norm_epsilon": (m.layer_norm_epsilon, 1e-5),
    }
    for field, (got, want) in need.items():
        if got != want:
            fail(f"cannot map {config.run_id}: its {field} is {got!r}; the lab's zoology block "
                 f"maps {field} = {want!r} (Figure 2's attention rows)")
    if m.max_position_embeddings <= 0:
        fail(f"cannot map {config.run_id}: max_position_embeddings "
             f"{m.max_position_embeddings}; the lab's learned positions need a table")
    if set(seq.kwargs) - {"dropout", "num_heads", "bias"} or not seq.kwargs.get("bias", True):
        fail(f"cannot map {config.run_id}: MHA kwargs {seq.kwargs}; the lab maps dropout, "
             "num_heads and bias=True")
    return {"d_model": m.d_model, "n_layers": m.n_layers, "n_heads": seq.kwargs.get("num_heads",
            1), "init": "zoology", "mlp_mult": 0, "positions": "learned", "norm": "layer",
            "block": "zoology", "max_len": m.max_position_embeddings,
            "dropout": seq.kwargs.get("dropout", 0.0)}


def task_table(config) -> dict:
    seg = config.data.train_configs[0]
    if getattr(seg, "name", None) != "multiquery_ar":
        fail(f"cannot map {config.run_id}: its training data is {seg.name!r}; the lab maps "
             "multiquery_ar (MQAR)")
    if getattr(config.data, "num_passes", 1) != 1:  # JRT repeats (d88d6f5); absent before
        fail(f"cannot map {config.run_id}: num_passes {config.data.num_passes}; the lab maps 1")
    return {"generator": "zoology-mqar", "kwargs": {
        "vocab_size": seg.vocab_size, "input_seq_len": seg.input_seq_len,
        "num_kv_pairs": seg.num_kv_pairs, "power_a": seg.power_a,
        "random_non_queries": seg.random_non_queries}}


# lab parameter -> zoology parameter, per layer i ({i})
NAMES = {"embed.weight": "backbone.embeddings.word_embeddings.weight",
         "pos.weight": "backbone.embeddings.position_embeddings.weight",
         "norm.weight": "backbone.ln_f.weight", "norm.bias": "backbone.ln_f.bias"}
LAYER = {"norm1": "norm1", "attn.qkv": "sequence_mixer.Wqkv", "attn.out": "sequence_mixer.out_proj",
         "norm2": "norm2"}


def name_map(n_layers: int) -> dict[str, str]:
    out = dict(NAMES)
    for i in range(n_layers):
        for lab, zoo in LAYER.items():
            for p in ("weight", "bias"):
                out[f"blocks.{i}.{lab}.{p}"] = f"backbone.layers.{i}.{zoo}.{p}"
    return out


def copy_weights(zoo, lab, names: dict[str, str]) -> None:
    zp, lp = dict(zoo.named_parameters()), dict(lab.named_parameters())
    for side, have, want in (("zoology's", zp, set(names.values())), ("the lab's", lp,
                                                                        set(names))):
        extra, missing = sorted(set(have) - want), sorted(want - set(have))
        if extra or missing:
            what = f"has {extra[0]}" if extra else f"lacks {missing[0]}"
            fail(f"{side} model {what}: its model signature differs from the one this maps "
                 f"(zoology d88d6f5: TransformerBlock with norm1, norm2 and MHA Wqkv/out_proj)")
    with torch.no_grad():
        for lab_name, zoo_name in names.items():
            if lp[lab_name].shape != zp[zoo_name].shape:
                fail(f"{zoo_name} is {tuple(zp[zoo_name].shape)}, the lab's {lab_name} "
                     f"{tuple(lp[lab_name].shape)}: the model signature differs")
            lp[lab_name].copy_(zp[zoo_name])


def compare_grads(names: dict[str, str], lparams: dict, zparams: dict
                  ) -> tuple[dict[str, float], list[str]]:
    """Each mapped parameter's gradient: max |lab - zoology| relative to zoology's max |grad|.
    A parameter with a gradient on one side only (a lab block that no longer uses it, e.g.
    without the norm2 residual) is a difference, listed in `missing`, never a crash."""
    grads: dict[str, float] = {}
    missing: list[str] = []
    for lab_name, zoo_name in names.items():
        g, h = lparams[lab_name].grad, zparams[zoo_name].grad
        if g is None or h is None:
            grads[lab_name] = 0.0
            if (g is None) != (h is None):
                side = "the lab's" if g is None else "zoology's"
                missing.append(f"{lab_name} (no gradient on {side} side)")
            continue
        grads[lab_name] = (g - h).abs().max().item() / max(h.abs().max().item(), 1e-300)
    return grads, missing


def zoology_logits(zoo, x):
    if "return_embeddings" in inspect.signature(zoo.forward).parameters:
        return zoo(x, return_embeddings=False)
    return zoo(x)


def run(args) -> dict:
    patches: list[str] = []
    path = Path(args.zoology).expanduser().resolve()
    zmodel, zconfigs, ztrain, configs_module = import_zoology(path, patches)
    try:  # zoology's config and model: a field this reads that is not there is bad input
        config = figure2_config(zconfigs, args.run_id)
        fields = lab_fields(config)
        task = generator_task(task_table(config))
        config.model.embed_dropout, fields["dropout"] = 0.0, 0.0
        config.model.sequence_mixer.kwargs = {**config.model.sequence_mixer.kwargs,
                                              "dropout": 0.0}
        torch.manual_seed(args.seed)
        with contextlib.redirect_stdout(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            zoo = zmodel.LanguageModel(config.model).double()
    except (AttributeError, TypeError, KeyError) as exc:
        fail(f"zoology at {path} differs from what this maps (its Figure 2 config and "
             f"LanguageModel at d88d6f5): {type(exc).__name__}: {exc}")
    lab = build_model(model_config("transformer", config.model.vocab_size, **fields)).double()
    copy_weights(zoo, lab, name_map(config.model.n_layers))
    names = name_map(config.model.n_layers)
    zparams, lparams = dict(zoo.named_parameters()), dict(lab.named_parameters())

    trainer = ztrain.Trainer(zoo, None, None, device="cpu")
    trainer.loss_fn = torch.nn.CrossEntropyLoss()
    if hasattr(trainer, "compute_loss"):
        zoo_loss = trainer.compute_loss
    else:  # before d88d6f5 the loss is written inside train_epoch: its expression, here
        patches.append("its Trainer has no compute_loss at this commit: the loss is its "
                       "train_epoch's, loss_fn(logits over (batch x length), targets.flatten())")

        def zoo_loss(x, y):
            logits = zoo(x)
            return trainer.loss_fn(logits.reshape(-1, logits.shape[-1]), y.flatten()), None
    if "return_embeddings" in inspect.signature(zoo.forward).parameters:
        patches.append("LanguageModel.forward returns embeddings by default at this commit: "
                       "its trainer's loss is computed on forward(x, return_embeddings=False)")
        plain = zoo.forward
        zoo.forward = lambda x, **kw: plain(x, return_embeddings=False, **kw)

    x, y = batch_at(task, args.batch, args.seed, 0)
    zoo.eval(), lab.eval()
    with torch.no_grad():
        logit_gap = (zoo(x) - lab(x).logits).abs().max().item()

    zoo.train(), lab.train()
    zl, _ = zoo_loss(x, y)
    zl.backward()
    out, yc = forward_scored(lab, x, y)
    ll = objective(out, yc, 0.0)[0]
    ll.backward()
    grads, missing = compare_grads(names, lparams, zparams)
    worst = max(grads, key=grads.get)

    lr, wd = float(config.learning_rate), float(config.weight_decay)
    zopt = torch.optim.AdamW(zoo.parameters(), lr=lr, weight_decay=wd)
    lopt = make_optimizer(lab, wd, lr, decay="all")
    curve = []
    t0 = time.perf_counter()
    for step in range(args.steps):
        x, y = batch_at(task, args.batch, args.seed, step + 1)
        zopt.zero_grad(), lopt.zero_grad()
        zl, _ = zoo_loss(x, y)
        zl.backward()
        zopt.step()
        out, yc = forward_scored(lab, x, y)
        ll = objective(out, yc, 0.0)[0]
        ll.backward()
        optimizer_step(lab, lopt, 0.0)
        curve.append((zl.item(), ll.item()))
    loss_gap = max((abs(a - b) for a, b in curve), default=0.0)
    weight_gap = max((lparams[a] - zparams[b]).abs().max().item() for a, b in names.items())
    n_zoo = sum(p.numel() for p in zoo.parameters())
    return {
        "zoology": {"path": str(path), "commit": zoology_commit(path), "config": configs_module,
                    "run_id": config.run_id},
        "cpu_patches": patches, "lab_model": fields | {"dropout": 0.0},
        "task": task_table(config), "dtype": "float64", "batch": args.batch, "seed": args.seed,
        "params": {"zoology": n_zoo, "lab": lab.n_params()},
        "logits_max_abs_diff": logit_gap, "logits_tol": LOGIT_TOL,
        "grad_max_rel_diff": grads[worst], "grad_worst": worst, "grads_compared": len(grads),
        "grads_one_sided": missing,
        "steps": args.steps, "lr": lr, "weight_decay": wd,
        "loss_first": curve[0] if curve else None, "loss_last": curve[-1] if curve else None,
        "loss_max_abs_diff": loss_gap, "weights_max_abs_diff_after": weight_gap,
        "loss_curve": [[round(a, 12), round(b, 12)] for a, b in curve],
        "seconds": round(time.perf_counter() - t0, 1),
        "equal": (logit_gap <= LOGIT_TOL and grads[worst] <= 1e-8 and not missing
                  and loss_gap <= 1e-8),
    }


def report(rec: dict) -> str:
    z = rec["zoology"]
    lines = [f"zoology {z['commit']} ({z['path']})", f"config: {z['config']}",
             f"  run {z['run_id']}", "CPU changes to zoology, in memory at run time:"]
    lines += [f"  - {p}" for p in rec["cpu_patches"]] or ["  - none"]
    lines += [
        "both models: dropout 0 (masks cannot be shared), float64, batch "
        f"{rec['batch']}, data seed {rec['seed']}",
        f"parameters: zoology {rec['params']['zoology']:,}, lab {rec['params']['lab']:,}",
        f"logits: max |diff| {rec['logits_max_abs_diff']:.2e} (required <= {LOGIT_TOL:.0e})",
        f"gradients: {rec['grads_compared']} parameters, max relative diff "
        f"{rec['grad_max_rel_diff']:.2e} ({rec['grad_worst']})",
    ]
    one_sided = rec.get("grads_one_sided") or []
    if one_sided:
        lines.append(f"  gradient on one side only: {len(one_sided)} parameters, first "
                     f"{one_sided[0]}")
    if rec["steps"]:
        (z0, l0), (z1, l1) = rec["loss_first"], rec["loss_last"]
        lines += [
            f"{rec['steps']} AdamW steps at lr {rec['lr']:.4g}, weight decay "
            f"{rec['weight_decay']}: loss {z0:.6f} -> {z1:.6f} (zoology), {l0:.6f} -> "
            f"{l1:.6f} (lab)",
            f"  max |loss diff| over the steps {rec['loss_max_abs_diff']:.2e}; weights after: "
            f"max |diff| {rec['weights_max_abs_diff_after']:.2e} ({rec['seconds']} s)",
        ]
    lines.append("EQUAL: the lab's zoology block is zoology's model on these checks"
                 if rec["equal"] else "DIFFERENT: see the numbers above")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--zoology", required=True, help="path of a zoology checkout")
    ap.add_argument("--run-id", default=FIRST_CELL, help="a run of zoology's Figure 2 configs")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--json", help="write the record here")
    args = ap.parse_args(argv)
    torch.set_num_threads(1)
    try:
        rec = run(args)
    except RecallLabError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(report(rec))
    if args.json:
        Path(args.json).write_text(json.dumps(rec, indent=1) + "\n")
    return 0 if rec["equal"] else 1


if __name__ == "__main__":
    sys.exit(main())
