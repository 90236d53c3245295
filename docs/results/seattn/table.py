"""Prints the README table of docs/results/seattn from the report.json files that
make_reports.sh writes (each cell: test accuracy mean +/- std over the 2 seeds, as the report
gives it; "full / own" = evaluated with full attention / with the fine-tune's attention)."""

import json
from pathlib import Path

D = Path(__file__).parent / "reports"
FACTORS = (1, 2, 4, 8)


def fmt(g: dict) -> str:
    if g["mean"] is None:
        return "-"
    return f"{g['mean']:.3f}" + ("" if g["std"] is None else f" ± {g['std']:.3f}")


def attention(v: dict) -> str:
    kind = v["model.name"].removeprefix("mamba2-attn")
    if kind != "-se":
        return {"": "Full", "-sw": "SW"}[kind]
    if v["model.seattn.retrieval"] != "relevance":
        return {"none": "SE-NoMem", "random": "SE-Random"}[v["model.seattn.retrieval"]]
    return {"chunk": "SE (paper: chunk scoring)"}.get(v["model.seattn.scoring"],
                                                     "SE (causal prefix)")


def main() -> None:
    pre = {f: json.loads((D / f"pretrain-x{f}" / "report.json").read_text())["groups"][0]
           for f in FACTORS}
    rows: dict = {}
    for f in FACTORS:
        for sfx in ("", "-full"):
            for g in json.loads((D / f"x{f}{sfx}" / "report.json").read_text())["groups"]:
                key = (attention(g["values"]), g["values"]["train.finetune.adapter"])
                if g["seeds"]:
                    rows.setdefault(key, {})[f"x{f}{sfx}"] = fmt(g)
    print("| fine-tune attention | adapter | "
          + " | ".join(f"{f} L0 full / own" for f in FACTORS) + " |")
    print("| --- | --- | " + " | ".join("---" for _ in FACTORS) + " |")
    print("| (none: pre-trained) | - | " + " | ".join(fmt(pre[f]) for f in FACTORS) + " |")
    for (att, adapter), r in rows.items():
        cells = [f"{r.get(f'x{f}-full', r[f'x{f}'])} / {r[f'x{f}']}" for f in FACTORS]
        print(f"| {att} | {adapter} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
