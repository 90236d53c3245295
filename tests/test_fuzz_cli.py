"""The command line's fuzzer (issue 28): bad values for every option of every command and for every
field of a TOML run config, each run in-process (typer's CliRunner) in a sandbox that holds a
dataset, a finished run, a sweep and a TOML file. Every case must end with exit code 2, exactly one
`error:` line on stderr, no traceback, nothing new written and every existing file byte-identical.

The options are enumerated from the click app itself and the TOML fields from the pydantic
models, so a new option or field is fuzzed without a line here. Two layers:

- a table: every (command, option) and every (table, field) with each kind of bad value its type
  admits, so coverage is complete on every run;
- Hypothesis: random bad values (any negative, any huge, any non-number text, markup) drawn for
  random options and fields; `make fuzz` raises its budget (FUZZ_EXAMPLES, default 40 here).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import typing
from pathlib import Path

import pytest
import typer
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import BaseModel
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.config import ModelConfig, TrainConfig
from recall_lab.generators import TaskSpec
from recall_lab.generators.dataset import write_dataset
from recall_lab.generators.fields import MAX_INT
from tests.cli_checks import snapshot

runner = CliRunner()
COMMAND = typer.main.get_command(app)
SPEC = TaskSpec(levels=((3, 3),), values=4)
TINY_TRAIN = {"steps": 1, "batch_size": 2, "eval_every": 1, "eval_samples": 4, "test_samples": 4,
              "device": "cpu"}
EXAMPLES = int(os.environ.get("FUZZ_EXAMPLES", "40"))

# Positional arguments that reach each command's body: a new command with a required argument
# must be added here (test_every_command_has_its_arguments says so).
ARGS = {
    "show": ["DATA"], "eval": ["RUN"], "finetune": ["RUN"], "sweep": ["SWEEP.toml", "--dry-run",
                                                                          "--no-estimate"],
    "report": ["RUNS"], "archive": ["RUNS/tiny"], "power": ["0.9", "0.3"],
    "extrapolate": ["RUN"], "mean-distance": ["RUN"], "attention-map": ["RUN"],
    "bench": ["attention"], "generate": ["--levels", "2", "--values", "4", "--train", "2",
                                         "--valid", "2", "--test", "2", "--workers", "1"],
    "train": ["--model", "mamba", "--task", "TASK.toml", "--steps", "1", "--eval-samples", "4",
              "--device", "cpu"],
    "check": ["mha", "--no-learning", "--no-speed"],
    "place": ["mha", "--dry-run", "--no-estimate"],
    "lr-window": ["mha", "--table", "16", "--dry-run", "--no-estimate"],
    "state": ["gla", "--target", "256"],
    "verify": [str(Path(__file__).resolve().parents[1] / "docs" / "results" / "frontier-2026"
                   / "kda" / "record.json"), "--dry-run", "--no-estimate"],
}
# Options whose every string is a valid value (an output path): not fuzzed (any value is good).
# Each is named with its reason; test_every_command_has_its_arguments keeps the list honest.
FREE_TEXT = {
    "out": "any path is a valid output name",
    "dest": "any path is a valid archive name",
    "json_out": "any path is a valid name for check's JSON",
}


def _sandbox(root: Path) -> Path:
    """DATA (a dataset), RUN (a finished run on it), RUNS/tiny (a sweep folder), TASK.toml,
    SWEEP.toml and RUN.toml (a run config) under `root`."""
    write_dataset(SPEC, root / "DATA", {"train": 9, "valid": 5, "test": 6}, 0)
    r = runner.invoke(app, ["train", "--model", "mamba", "--d-model", "16", "--data",
                            str(root / "DATA"), "--out", str(root / "RUN"),
                            *sum(([f"--{k.replace('_', '-')}", str(v)] for k, v in
                                  TINY_TRAIN.items() if k != "test_samples"), [])])
    assert r.exit_code == 0, r.output
    (root / "TASK.toml").write_text("[task]\nlevels = [[3, 3]]\nvalues = 4\n")
    (root / "SWEEP.toml").write_text(
        'name = "tiny"\n[model]\nname = "mamba"\nd_model = 16\n[train]\nsteps = 1\n'
        'eval_every = 1\neval_samples = 4\ntest_samples = 4\nbatch_size = 2\ndevice = "cpu"\n'
        '[task]\nlevels = [[3, 3]]\nvalues = 4\n[grid]\n"train.seed" = [0]\n')
    (root / "RUNS" / "tiny").mkdir(parents=True)
    shutil.copytree(root / "RUN", root / "RUNS" / "tiny" / "run")
    return root


@pytest.fixture(scope="module", autouse=True)
def built_once():
    """The click command built once: typer's CliRunner rebuilds it from the app on every call
    (0.1-0.4 s, most of a refused case's time)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(typer.testing, "_get_command",
                   lambda a: COMMAND if a is app else typer.main.get_command(a))
        yield


@pytest.fixture(scope="module")
def sandbox(tmp_path_factory, built_once):
    return _sandbox(tmp_path_factory.mktemp("fuzz"))


@contextlib.contextmanager
def _inside(folder: Path):
    old = os.getcwd()
    os.chdir(folder)
    try:
        yield
    finally:
        os.chdir(old)


def refused(root: Path, args: list[str]) -> None:
    """Run `args` in `root`: exit 2, one `error:` line, no traceback, nothing changed."""
    before = snapshot(root)
    with _inside(root):
        r = runner.invoke(app, args)
    where = f"recall-lab {' '.join(args)}"
    assert r.exit_code == 2, f"{where}: exit {r.exit_code}\n{r.output}"
    lines = [x for x in r.stderr.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), f"{where}:\n{r.stderr}"
    assert "Traceback" not in r.output, where
    assert not isinstance(r.exception, Exception) or isinstance(r.exception, SystemExit), where
    assert snapshot(root) == before, f"{where}: changed files"


# ---- the command line ---------------------------------------------------------------------------

def options() -> list[tuple[str, object]]:
    """(command, click parameter) for every option and argument of every command, from the app."""
    return [(name, p) for name, cmd in sorted(COMMAND.commands.items()) for p in cmd.params
            if not getattr(p, "is_flag", False) and p.name != "help"]


HINTS = {id(p): typing.get_type_hints(c.callback).get(p.name)
         for c in COMMAND.commands.values() for p in c.params}


def kind(param) -> str:
    """int, float or str: what the command's signature says the parameter is."""
    return {int: "int", float: "float"}.get(HINTS[id(param)], "str")


# One value per way a value can be bad (Hypothesis draws the others): negative, huge, not a
# number of the kind (click's parse error), markup; non-finite floats.
BAD = {
    "int": ["-1", str(10**30), "1.5", "[/x]"],
    "float": ["inf", "nan", "[/x]"],
    "str": ["[/x]"],
}


def invocation(command: str, param, value: str) -> list[str]:
    """`recall-lab COMMAND ... ` with `param` set to `value` (an argument replaces the command's
    own positional value at its place)."""
    base = list(ARGS.get(command, []))
    if param.param_type_name == "argument":
        positions = [p for p in COMMAND.commands[command].params
                     if p.param_type_name == "argument"]
        i = positions.index(param)
        head = [a for a in base if not a.startswith("-")][: len(positions)]
        rest = base[len(head):]
        head += ["RUN"] * (len(positions) - len(head))
        head[i] = value
        if param.nargs == -1:
            head = head[: i + 1]
        return [command, *head, *rest]
    flag = next(o for o in param.opts if o.startswith("--"))
    # an option given twice: click keeps the last, the bad one
    return [command, *base, flag, value]


CASES = [(c, p, v) for c, p in options() for v in BAD[kind(p)] if p.name not in FREE_TEXT]


@pytest.mark.parametrize("command, param, value", CASES,
                         ids=[f"{c}-{p.name}-{v}" for c, p, v in CASES])
def test_every_option_refuses_bad_values(sandbox, command, param, value):
    refused(sandbox, invocation(command, param, value))


def test_every_command_has_its_arguments():
    """A command with a required argument is fuzzed with a valid one (ARGS), so its options are
    reached; and every command's every option is in the table."""
    for name, cmd in COMMAND.commands.items():
        if any(p.param_type_name == "argument" and p.required for p in cmd.params):
            assert name in ARGS, f"add `{name}`'s arguments to ARGS"
    fuzzed = {(c, p.name) for c, p, _ in CASES}
    for c, p in options():
        assert (c, p.name) in fuzzed or p.name in FREE_TEXT, (c, p.name)


@st.composite
def bad_option(draw):
    command, param = draw(st.sampled_from([(c, p) for c, p in options()
                                           if p.name not in FREE_TEXT]))
    k = kind(param)
    text = st.text(st.characters(codec="utf-8", exclude_categories=("Cs", "Cc")),
                   min_size=1, max_size=12).filter(lambda s: not s.lstrip("-").isdigit()
                                                   and not s.startswith("-"))
    if k == "int":
        value = draw(st.one_of(st.integers(max_value=-1), st.integers(min_value=MAX_INT + 1),
                               text.filter(lambda s: _not_number(s))))
    elif k == "float":
        value = draw(st.one_of(st.sampled_from(["inf", "-inf", "nan", "1e999", "-1e999"]),
                               text.filter(lambda s: _not_number(s))))
    else:
        value = draw(st.sampled_from(["[/", "[/x]", "[red]", "]["]).map(
            lambda m: m + draw(st.text(alphabet="abcxyz", max_size=4))))
    return command, param, str(value)


def _not_number(s: str) -> bool:
    try:
        float(s)
    except ValueError:
        return True
    return False


@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40)
@given(case=bad_option())
def test_random_bad_options_are_refused(sandbox, case):
    command, param, value = case
    refused(sandbox, invocation(command, param, value))


# ---- TOML run configs ---------------------------------------------------------------------------

TOML_TABLES = {"model": ModelConfig, "train": TrainConfig, "task": TaskSpec}
# Set by the lab, not by a config: refused in any case (`vocab_size`), or fixed by the model's
# name (`arch`, `pattern`): fuzzed too, they must be refused like any bad value.
BASE = {"model": {"name": "mamba", "d_model": 16},
        "train": {k: v for k, v in TINY_TRAIN.items()},
        "task": {"levels": [[3, 3]], "values": 4}}


def toml_value(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, float):
        return {float("inf"): "inf", float("-inf"): "-inf"}.get(v, "nan" if v != v else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(toml_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k} = {toml_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def toml_text(tables: dict) -> str:
    out = []
    for name, fields in tables.items():
        out.append(f"[{name}]")
        out += [f"{k} = {toml_value(v)}" for k, v in fields.items()]
    return "\n".join(out) + "\n"


def _lower_bound(info) -> float | None:
    for m in info.metadata:
        for attr in ("ge", "gt"):
            if getattr(m, attr, None) is not None:
                return getattr(m, attr)
    return None


def field_kind(info) -> str:
    text = str(info.annotation)
    if "float" in text.lower() and "tuple" not in text:
        return "float"
    if text.startswith("<class 'int'>") or "Int" in text and "tuple" not in text:
        return "int"
    return "other"


def bad_field_values(model: type[BaseModel], field: str) -> list:
    """Values no field of this kind accepts: wrong types always; non-finite floats; integers
    past 2^31 - 1; negatives where the field has a lower bound >= 0; markup for strings."""
    info = model.model_fields[field]
    k = field_kind(info)
    values: list = [{"x": 1}]  # a table where a value belongs
    if k == "int":
        values += [True, "3", 2**40]
    elif k == "float":
        values += [True, "0.1", float("inf")]
    else:
        values += ["[/x]"] if "str" in str(info.annotation) or "Literal" in str(
            info.annotation) else []
    low = _lower_bound(info)
    if k in ("int", "float") and low is not None and low >= 0:
        values.append(-1)
    return values


FIELD_CASES = [(t, f, v) for t, m in TOML_TABLES.items() for f in m.model_fields
               for v in bad_field_values(m, f)
               if not (t == "model" and f == "name" and v == "[/x]")]  # name: see below
FIELD_CASES += [("model", "name", "[/x]"), ("model", "no_such_key", 1),
                ("train", "no_such_key", 1), ("task", "no_such_key", 1), ("extra", "x", 1)]


def _toml_case(root: Path, table: str, field: str, value) -> list[str]:
    tables = {k: dict(v) for k, v in BASE.items()}
    tables.setdefault(table, {})[field] = value
    path = root / "case.toml"
    path.write_text(toml_text(tables))
    return ["train", "--config", str(path), "--out", str(root / "new-run")]


@pytest.mark.parametrize("table, field, value", FIELD_CASES,
                         ids=[f"{t}.{f}={v!r}" for t, f, v in FIELD_CASES])
def test_every_toml_field_refuses_bad_values(sandbox, tmp_path, table, field, value):
    args = _toml_case(tmp_path, table, field, value)
    refused(sandbox, args)
    assert not (tmp_path / "new-run").exists()


def test_the_base_toml_is_good(sandbox, tmp_path):
    """The fuzzed TOML differs from a config that trains by the one bad value only."""
    path = tmp_path / "ok.toml"
    path.write_text(toml_text(BASE))
    with _inside(sandbox):
        r = runner.invoke(app, ["train", "--config", str(path), "--out", str(tmp_path / "r")])
    assert r.exit_code == 0, r.output


@st.composite
def bad_field(draw):
    table = draw(st.sampled_from(sorted(TOML_TABLES)))
    model = TOML_TABLES[table]
    field = draw(st.sampled_from(sorted(model.model_fields)))
    info = model.model_fields[field]
    k = field_kind(info)
    wrong = st.one_of(st.booleans(), st.text(max_size=5), st.lists(st.integers(), max_size=2))
    if k == "int":
        value = draw(st.one_of(wrong, st.integers(min_value=MAX_INT + 1, max_value=2**62)))
    elif k == "float":
        value = draw(st.one_of(st.booleans(), st.text(max_size=5),
                               st.sampled_from([float("inf"), float("-inf"), float("nan")])))
    else:
        value = draw(st.dictionaries(st.sampled_from(["zz", "yy"]), st.integers(), min_size=1))
    low = _lower_bound(info)
    if k in ("int", "float") and low is not None and low >= 0 and draw(st.booleans()):
        value = draw(st.integers(max_value=-1))
    return table, field, value


@settings(max_examples=EXAMPLES, deadline=None, derandomize=EXAMPLES <= 40)
@given(case=bad_field())
def test_random_bad_toml_fields_are_refused(sandbox, tmp_path_factory, case):
    table, field, value = case
    root = tmp_path_factory.mktemp("toml")
    refused(sandbox, _toml_case(root, table, field, value))
    assert not (root / "new-run").exists()
