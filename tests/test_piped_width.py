"""Output a person reads fits 100 columns (or COLUMNS) when it is not a terminal, and loses no
content doing so: every word of a wide rendering (250 columns) is found whole in the narrow one,
so nothing was cut ("…") or folded mid-word. Every command's `--help`, and every command that
prints a table, at 100 and at 80 columns: a model name, a number, a path or an import path
stays whole on one line (commands/fit.py)."""

from __future__ import annotations

import os
import re
import shutil
from collections import Counter
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from recall_lab.cli import app
from recall_lab.commands import shell

ROOT = Path(__file__).resolve().parents[1]
runner = CliRunner()
NARROW, WIDE = 100, 250
BOX = re.compile(r"[\u2500-\u257f]")  # rich's table and panel borders


def command_paths(group=None, prefix=()):
    """Every command and sub-command of the app, as argument lists."""
    group = group or typer.main.get_command(app)
    for name, cmd in sorted(group.commands.items()):
        if getattr(cmd, "hidden", False):
            continue
        yield [*prefix, name]
        if hasattr(cmd, "commands"):
            yield from command_paths(cmd, (*prefix, name))


def words(text: str) -> Counter:
    """The tokens of a rendering (a plain row's `header:` counts as the header)."""
    return Counter(w.removesuffix(":") for w in BOX.sub(" ", text).split())


def rendered(args: list[str], width: int, monkeypatch, code: int = 0) -> str:
    """`recall-lab ARGS` with stdout captured (not a terminal) at `width` columns."""
    monkeypatch.setattr(shell.console, "width", width)
    r = runner.invoke(app, args, env={"COLUMNS": str(width)})
    assert r.exit_code == code, (args, r.output)
    return r.stdout


def assert_fits_and_whole(args: list[str], monkeypatch, widths=(NARROW,), code: int = 0) -> str:
    wide = rendered(args, WIDE, monkeypatch, code)
    for width in widths:
        narrow = rendered(args, width, monkeypatch, code)
        too_wide = [line for line in narrow.splitlines() if len(line) > width]
        assert not too_wide, (args, width, too_wide[:3])
        assert "…" not in narrow, (args, width)
        lost = words(wide) - words(narrow)
        assert not lost, (args, width, sorted(lost)[:10])
    return wide


def test_every_help_fits_100_columns_and_keeps_every_word(monkeypatch):
    paths = [[]] + list(command_paths())
    assert len(paths) > 20  # every command, not a few
    for path in paths:
        wide = assert_fits_and_whole([*path, "--help"], monkeypatch)
        # in words: no `<bool>` after a plain flag, no `<list[str]>`, no raw backticks
        assert not re.search(r"<(bool|str|int|float|path|list\[)", wide), (path, wide)
        assert "`" not in wide, path


def test_a_flag_takes_no_value_and_types_read_as_words(monkeypatch):
    sweep = rendered(["sweep", "--help"], WIDE, monkeypatch)
    assert re.search(r"--dry-run +List the runs", sweep)  # no metavar between
    assert re.search(r"--only +TEXT\.\.\. ", sweep)
    report = rendered(["report", "--help"], WIDE, monkeypatch)
    assert re.search(r"runs\.\.\. +PATH\.\.\. ", report)
    r = runner.invoke(app, ["sweep", "x.toml", "--dry-run", "true"])
    assert r.exit_code == 2 and "unexpected extra argument" in r.output


@pytest.mark.parametrize("args", [["train", "--model", "mambaa", "--task", "passkey"],
                                  ["train", "--model", "mamba", "--task", "passkeys"],
                                  ["check", "gated-deltanett"]])
def test_an_unknown_name_errs_in_one_line_of_at_most_200_characters(args):
    r = runner.invoke(app, args)
    assert r.exit_code == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: unknown ")
    assert len(lines[0]) <= 200 and "nearest: " in lines[0], lines[0]


def test_help_wraps_the_docstrings_at_word_boundaries(monkeypatch):
    """A docstring's own line breaks are gone: `check`'s sentence reads on one line when wide
    (it was printed as 'causality, padding and' / 'length')."""
    wide = rendered(["--help"], WIDE, monkeypatch)
    assert "causality, padding and length" in wide


def test_presets_keeps_its_brackets(monkeypatch):
    out = rendered(["presets"], WIDE, monkeypatch)
    assert "[task] generator = NAME with [task.kwargs]" in out


def test_info_names_the_kernels_in_words(monkeypatch):
    out = rendered(["info"], WIDE, monkeypatch)
    assert "{'" not in out and "threads)" not in out.replace("(1 threads)", "")
    assert "(1 threads)" not in out


def test_show_and_a_dry_run_fit_100_columns(tmp_path, monkeypatch):
    data = tmp_path / "d"
    r = runner.invoke(app, ["generate", "mini-mqjr", "--out", str(data), "--train", "8",
                            "--valid", "8", "--test", "8", "--workers", "1"])
    assert r.exit_code == 0, r.output
    assert_fits_and_whole(["show", str(data), "--index", "0"], monkeypatch)
    exp = tmp_path / "e.toml"
    exp.write_text('name = "a-rather-long-experiment-name-for-the-title"\n'
                   '[model]\nname = "mamba"\nd_model = 16\n[train]\nsteps = 2\n'
                   '[task]\nlevels = [[3, 3]]\nvalues = 4\n'
                   '[grid]\n"model.name" = ["mamba", "mamba+hax", "transformer"]\n'
                   '"train.lr" = [0.001, 0.003]\n"train.seed" = [0, 1]\n')
    assert_fits_and_whole(["sweep", str(exp), "--out", str(tmp_path / "runs"), "--dry-run",
                           "--no-estimate"],
                          monkeypatch)


# ---- every command that prints a table, at 100 and 80 columns ----------------------------------

NARROWS = (NARROW, 80)
EXPERIMENT = ('name = "a-rather-long-experiment-name-for-the-title"\n'
              '[model]\nname = "mamba"\nd_model = 16\n[train]\nsteps = 2\n'
              '[task]\nlevels = [[3, 3]]\nvalues = 4\n'
              '[grid]\n"model.name" = ["mamba", "mamba+hax", "transformer"]\n'
              '"train.lr" = [0.001, 0.003]\n"train.seed" = [0, 1]\n')


def dry(args: list[str]) -> list[str]:
    """A dry run's arguments, with `--no-estimate` (skip the timing probe) where the command
    has that flag."""
    help_text = runner.invoke(app, [args[0], "--help"], env={"COLUMNS": "250"}).stdout
    return [*args, "--dry-run"] + (["--no-estimate"] if "--no-estimate" in help_text else [])


@pytest.fixture(scope="module")
def table_workspace(tmp_path_factory):
    """What the table commands read: a committed report's records, a sweep file, a tiny
    placement reference (tests/experiments/place_fixtures.py)."""
    from tests.experiments.place_fixtures import make_reference

    tmp = tmp_path_factory.mktemp("tables")
    shutil.copytree(ROOT / "docs" / "results" / "mini-ml3" / "runs", tmp / "runs")
    (tmp / "e.toml").write_text(EXPERIMENT)
    make_reference(tmp / "ref")
    return tmp


TABLE_COMMANDS = {
    "models": (["models"], 0),
    "presets": (["presets"], 0),
    "experiments list": (["experiments", "list"], 0),
    "info": (["info"], 0),
    "check": (["check", "retention_mixer:Retention", "--no-learning", "--no-speed"], 0),
    # the example package's LeakyRetention reads the future on purpose: exit 1
    "check --all": (["check", "--all", "retention_mixer", "--no-learning", "--no-speed"], 1),
    "sweep --dry-run": (["sweep", "e.toml", "--out", "sweep"], 0),
    "report": (["report", "runs", "--out", "report", "--no-plots"], 0),
    "place --dry-run": (["place", "gla", "--kwargs", '{"num_heads": 2}', "--reference",
                         "ref", "--no-check", "--out", "place"], 0),
}


@pytest.fixture()
def listing_once(monkeypatch):
    """`models` builds every model to count it, `experiments list` reads every committed
    record, `check` runs its checks: once per test is enough (each is deterministic)."""
    import functools

    from recall_lab.experiments import committed
    from recall_lab.models import registry

    monkeypatch.setattr(registry, "listing_row", functools.lru_cache(registry.listing_row))
    monkeypatch.setattr(committed, "committed_records",
                        functools.lru_cache(committed.committed_records))
    # `check` and `check --all` run the checks once; the three renderings print the same rows
    from recall_lab import testing
    from recall_lab.experiments import audit

    done: dict = {}
    run_checks = testing.run_checks

    def checks_once(target, **kwargs):
        key = (target.name, str(target.info.get("path")), tuple(sorted(kwargs.items())))
        if key not in done:
            done[key] = run_checks(target, **kwargs)
        return done[key]

    monkeypatch.setattr(audit, "run_checks", checks_once)
    monkeypatch.setattr(testing, "run_checks", checks_once)


@pytest.mark.parametrize("name", list(TABLE_COMMANDS))
def test_every_table_keeps_every_token_whole_at_100_and_80_columns(
        name, table_workspace, listing_once, monkeypatch):
    """Every name and number of the 250-column rendering is found whole at 100 and 80 columns
    (no token folded over two lines, none cut), and no line is wider than its width."""
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "mixer-package"))
    monkeypatch.chdir(table_workspace)  # paths as a user types them: relative
    args, code = TABLE_COMMANDS[name]
    if name.endswith("--dry-run"):
        args = dry(args)
    assert_fits_and_whole(args, monkeypatch, NARROWS, code)


def test_models_piped_to_grep_finds_every_models_row(listing_once, monkeypatch):
    """`recall-lab models | grep NAME` finds each model's row: its name whole, as a cell of a
    table row, at 100 and at 80 columns."""
    from recall_lab.models.registry import listed_models

    names = listed_models()
    assert len(names) > 40
    for width in NARROWS:
        out = rendered(["models"], width, monkeypatch)
        for name in names:
            row = re.compile(rf"^│ {re.escape(name)} +│", re.M)
            assert row.search(out), (width, name)


def test_a_table_too_narrow_for_its_columns_prints_plain_rows():
    """Where a column's longest token cannot fit beside the key column, a table becomes plain
    rows."""
    from rich.console import Console
    from rich.table import Table

    from recall_lab.commands.fit import fit

    def printed(table, width):
        con = Console(width=width, file=open(os.devnull, "w"))  # noqa: SIM115
        with con.capture() as cap:
            con.print(fit(table, con, width))
        return cap.get().splitlines()

    table = Table("name", "path", "state", title="mixers")
    table.add_row("gated-deltanet", "zoology.mixers:X", "2,048")
    assert printed(table, 30) == ["mixers", "name: gated-deltanet", "  path: zoology.mixers:X",
                                  "  state: 2,048"]
    wide = printed(table, 40)  # the key and one column fit: split tables, the key repeated
    assert sum("gated-deltanet" in line for line in wide) == 2
    assert any("zoology.mixers:X" in line for line in wide)


def test_the_report_table_splits_with_the_groups_repeated(table_workspace, monkeypatch):
    args = ["report", str(table_workspace / "runs"), "--out", str(table_workspace / "report"),
            "--no-plots"]
    narrow = rendered(args, NARROW, monkeypatch)
    assert narrow.count("the same groups, continued") >= 1



# ---- no markup eats text: every [...] a help, a title or a cell shows ---------------------------

def _unescaped_tags(text: str) -> list[str]:
    """The `[...]` of `text` that rich would read as markup but that name no style: user text
    (`[mixers."PATH"]`, `[task]`) that a markup string without `escape` loses."""
    from rich.markup import RE_TAGS

    con = shell.console
    eaten = []
    for whole, slashes, tag in RE_TAGS.findall(text):
        if len(slashes) % 2 or tag.startswith("/"):
            continue  # escaped, or a closing tag
        try:
            con.get_style(tag)
        except Exception:  # noqa: BLE001 - rich's MissingStyle / StyleSyntaxError
            eaten.append(whole)
    return eaten


def _brackets(text: str) -> list[str]:
    """Every `[...]` of a text as shown (rich's escapes `\\[` undone), whitespace collapsed."""
    shown = re.sub(r"\\(\\*)\[", r"\1[", text)
    return [" ".join(b.split()) for b in re.findall(r"\[[^\[\]\n]*\]", shown)]


def _flat(text: str) -> str:
    """A rendering's words in one line: borders gone, line breaks and runs of spaces one space."""
    return " ".join(BOX.sub(" ", text).split())


def test_every_help_shows_every_bracket_of_its_source_at_80_and_100_columns(monkeypatch):
    """`place --help` printed "from this TOML file's  table" ([mixers."PATH"] read as markup):
    every `[...]` of each command's docstring and option help is escaped where markup would
    take it, and shows in the rendered help at 80 and 100 columns."""
    group = typer.main.get_command(app)
    checked = 0
    for path in [[]] + list(command_paths()):
        cmd = group
        for name in path:
            cmd = cmd.commands[name]
        sources = [cmd.help or ""] + [getattr(p, "help", None) or "" for p in cmd.params]
        for text in sources:
            assert not _unescaped_tags(text), (path, _unescaped_tags(text))
        want = [b for text in sources for b in _brackets(text)]
        if not want:
            continue
        for width in NARROWS:
            shown = _flat(rendered([*path, "--help"], width, monkeypatch))
            missing = [b for b in want if b not in shown]
            assert not missing, (path, width, missing)
        checked += 1
    assert checked >= 5  # train, sweep, report, place, ... carry brackets


@pytest.fixture()
def printed_tables(monkeypatch):
    """Every table a command prints, as it is handed to `fit`, with the titles of the tables
    `fit` makes of it (a split: the same title, continued)."""
    from recall_lab.commands import fit as fit_module

    seen: list[tuple] = []
    real = fit_module.fit

    def recording(table, console, width, keys=1, continued=None):
        out = real(table, console, width, keys, continued)
        parts = [out] if out is table else [
            r for r in getattr(out, "renderables", []) if hasattr(r, "title")]
        seen.append((table, [p.title for p in parts], continued))
        return out

    monkeypatch.setattr(shell, "fit", recording)
    return seen


@pytest.mark.parametrize("name", ["presets", "models", "experiments list", "place --dry-run",
                                  "sweep --dry-run"])
def test_every_listing_keeps_its_brackets_at_80_and_100_columns(
        name, table_workspace, listing_once, printed_tables, monkeypatch):
    """At 80 columns `presets`' continued title lost `[task]` and `[task.kwargs]` (the title
    was printed again as markup): every title, header and cell a listing prints carries no
    markup that eats text, and every part of a split table shows its title's brackets."""
    from rich.text import Text

    monkeypatch.chdir(table_workspace)
    args, code = TABLE_COMMANDS[name]
    if name.endswith("--dry-run"):
        args = dry(args)
    con = shell.console
    for width in NARROWS:
        printed_tables.clear()
        shown = _flat(rendered(args, width, monkeypatch, code))
        for table, titles, continued in printed_tables:
            texts = [table.title, table.caption] + [c.header for c in table.columns] + [
                cell for c in table.columns for cell in c.cells]
            for text in texts:
                if isinstance(text, str):
                    assert not _unescaped_tags(text), (name, text)
            if table.title is None:
                continue
            plain = con.render_str(table.title).plain if isinstance(table.title, str) \
                else Text(table.title).plain
            for i, title in enumerate(titles):
                got = title.plain if isinstance(title, Text) else con.render_str(title).plain
                if i and continued is None:  # a continued part: the same title, continued
                    assert got.startswith(plain), (name, width, got, plain)
            for b in _brackets(plain):
                assert " ".join(b.split()) in shown, (name, width, b)


def test_a_split_tables_continued_title_keeps_its_brackets():
    """The title of every part of a split table is the first part's, as shown."""
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    from recall_lab.commands.fit import fit

    table = Table("name", "what", "more", title=escape("built-in [task] with [task.kwargs]"))
    table.add_row("zoology-mqar", "recall_lab.generators.builtin:zoology_mqar", "x" * 30)
    con = Console(width=80, file=open(os.devnull, "w"))  # noqa: SIM115
    with con.capture() as cap:
        con.print(fit(table, con, 80))
    out = cap.get()
    assert out.count("(continued)") >= 1
    assert out.count("[task]") == out.count("[task.kwargs]") == out.count("built-in") >= 2


# ---- `models`: one table, one state convention ---------------------------------------------------

def test_models_is_one_table_at_100_columns_in_state_per_layer(listing_once, monkeypatch):
    """`recall-lab models` at 100 columns is one table (each model's row once under grep), its
    state column is the recurrent state per layer, never a mean over layers: Based's two layers
    by their counts, log-linear Mamba-2 with the length it is counted at; the conv caches and the
    decode state are labelled as all layers'."""
    import math

    from recall_lab.models.registry import build_model, listed_models, listing_row
    from recall_lab.models.state import state_count

    out = rendered(["models"], NARROW, monkeypatch)
    assert "(continued)" not in out
    for name in listed_models():
        assert len(re.findall(rf"^│ {re.escape(name)} +│", out, re.M)) == 1, name
    head = set(_flat("\n".join(ln for ln in out.splitlines() if ln.startswith("┃"))).split())
    assert {"state", "per", "layer", "conv,", "decode", "all", "layers"} <= head, head

    rows = {n: listing_row(n, 51) for n in listed_models()}
    # Mamba's recurrent state per layer: expand x d_model x d_state (2 x 64 x 16)
    assert rows["mamba"]["state per layer"] == f"{2 * 64 * 16:,}"
    # log-linear Mamba-2: one Mamba-2 state of 2,048 per level, log2(L) + 1 levels at L = 2,048
    levels = int(math.log2(2048)) + 1
    assert rows["log-linear-mamba2"]["state per layer"] == \
        f"{2048 * levels:,} at 2,048 tokens (log L)"
    # Based: a window layer and a Taylor layer, each by its count; their sum is the model's
    m = re.fullmatch(r"([\d,]+) \(layer 1\) / ([\d,]+) \(layer 2\)",
                     rows["based"]["state per layer"])
    assert m, rows["based"]["state per layer"]
    a, b = (int(x.replace(",", "")) for x in m.groups())
    assert a != b
    model = build_model("based", 51)
    assert a + b == state_count(model, model.config.max_len or 2048).recurrent.numbers
    for name, row in rows.items():  # a count is a whole number of numbers, never a mean
        assert not re.search(r"\d\.\d", row["state per layer"]), (name, row)
