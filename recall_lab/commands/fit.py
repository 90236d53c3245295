"""Tables that fit a width without splitting a token: the one place every table the commands
print passes through (`shell.console` applies `fit` to each table it prints).

A token is what whitespace separates in a cell: a model name, a number, a path, an import path.
It is never broken over two lines and never cut to "…", piped (100 columns, or COLUMNS) or on a
narrow terminal, so `recall-lab models | grep NAME` finds every model's row. A table wider than
the width at hand becomes, in this order, the first that fits:

1. the table as it is;
2. the same table with its cells wrapped at spaces: the widest column narrowed first, none
   below its longest token (nor its header's longest word);
3. its columns split over several tables printed one after another, in their order, each
   repeating the key columns (the first, or the first `keys`) and titled "... (continued)";
4. plain rows: each row's key cells on one line, then one indented `header: value` line per
   other cell (where a column's longest token cannot fit beside the key columns).

Only a single token wider than the whole width is folded, since nothing else can show it.
"""

from __future__ import annotations

import re
from typing import Any

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.measure import Measurement
from rich.table import Column, Table
from rich.text import Text

CONTINUED = "(continued)"
# below this many columns beside the key columns, a table prints as plain rows
MIN_ROOM = 12
_TOKEN = re.compile(r"^\s*\S+|\S+")


def fit(table: Table, console: Console, width: int, keys: int = 1,
        continued: str | None = None) -> RenderableType:
    """`table` as a renderable no wider than `width` whose tokens stay whole (see the module's
    doc for the order of the fallbacks). `continued`: the title of the tables after the first
    when the columns are split (default: the title followed by "(continued)")."""
    if not table.columns or table.width is not None:
        return table
    mins, naturals = _measure(table, console)
    extra = _extra(table)
    if sum(naturals) + extra <= width:
        return table
    if sum(mins) + extra <= width:
        return _narrowed(table, mins, naturals, width, console)
    keys = max(1, min(keys, len(table.columns) - 1))
    edge = 2 if (table.box and table.show_edge) else 0
    sep = 1 if table.box else 0
    key_w = sum(mins[:keys]) + sep * (keys - 1) + edge
    room = width - key_w - sep  # the widest a column beside the keys can be
    if room < MIN_ROOM or max(mins[keys:]) > room:
        return _plain_rows(table, console, keys)
    parts = _pack([m + sep for m in mins], keys, key_w, width)
    title = _plain(table.title, console) if table.title else ""
    # the title as shown (its markup rendered), continued as text: a `[task]` it shows stays
    later = continued if continued is not None else Text(
        f"{title} {CONTINUED}".strip(), style=table.title_style or "table.title")
    tables = []
    for i, part in enumerate(parts):
        cols = list(range(keys)) + part
        sub = _subtable(table, cols, title=table.title if i == 0 else later,
                        caption=table.caption if i == len(parts) - 1 else None)
        tables.append(_narrowed(sub, [mins[c] for c in cols], [naturals[c] for c in cols],
                                width, console))
    return Group(*tables)


def _plain(obj: Any, console: Console) -> str:
    """The text a cell, header or title shows (markup rendered as the table would)."""
    if isinstance(obj, Text):
        return obj.plain
    if isinstance(obj, str):
        return console.render_str(obj).plain
    return ""


def _tokens_width(text: str) -> tuple[int, int]:
    """(longest token, longest line) of `text`, in terminal cells; a line's indentation
    counts with its first token (rich keeps it)."""
    lines = text.splitlines() or [""]
    longest = max((cell_len(t) for line in lines for t in _TOKEN.findall(line)), default=0)
    return longest, max(cell_len(line) for line in lines)


def _measure(table: Table, console: Console) -> tuple[list[int], list[int]]:
    """Per column, with its padding: the narrowest width that keeps every token of its header
    and cells whole, and the width that shows every line unwrapped."""
    _, right, _, left = table.padding
    pad = left + right
    mins, naturals = [], []
    for col in table.columns:
        lo, hi = 1, 1
        items = ([col.header] if table.show_header else []) + list(col.cells)
        for item in items:
            if isinstance(item, (str, Text)):
                tok, line = _tokens_width(_plain(item, console))
            else:  # a nested renderable: rich's own measurement of it
                m = Measurement.get(console, console.options.update_width(10**4), item)
                tok, line = m.minimum, m.maximum
            if col.no_wrap:
                tok = line
            lo, hi = max(lo, tok), max(hi, line)
        if col.min_width is not None:
            lo, hi = max(lo, col.min_width), max(hi, col.min_width)
        mins.append(lo + pad)
        naturals.append(max(hi, lo) + pad)
    return mins, naturals


def _extra(table: Table) -> int:
    """The width a table's borders take besides its columns (as rich counts it)."""
    if not table.box:
        return 0
    return len(table.columns) - 1 + (2 if table.show_edge else 0)


def _narrowed(table: Table, mins: list[int], naturals: list[int], width: int,
              console: Console) -> Table:
    """`table` with fixed column widths that fit `width`: the widest column gives way first,
    none below its minimum; a title's longest word widens the last column where it can."""
    extra = _extra(table)
    widths = list(naturals)
    while sum(widths) + extra > width:
        i = max((j for j in range(len(widths)) if widths[j] > mins[j]),
                key=lambda j: widths[j] - mins[j] / 10**4, default=None)
        if i is None:
            break
        widths[i] -= 1
    for text in (table.title, table.caption):
        tok, _ = _tokens_width(_plain(text, console)) if text else (0, 0)
        short = min(tok, width) - (sum(widths) + extra)
        if short > 0:
            widths[-1] += short
    _, right, _, left = table.padding
    for col, w in zip(table.columns, widths, strict=True):
        col.width = max(1, w - left - right)
        col.overflow = "fold"  # only a token wider than the whole width reaches this
    return table


def _pack(needs: list[int], keys: int, key_w: int, width: int) -> list[list[int]]:
    """The non-key columns, in order, packed into parts that fit `width` beside the key
    columns (`key_w` wide with their borders); `needs`: each column's minimum and its border."""
    parts: list[list[int]] = [[]]
    used = key_w
    for c in range(keys, len(needs)):
        if parts[-1] and used + needs[c] > width:
            parts.append([])
            used = key_w
        parts[-1].append(c)
        used += needs[c]
    return parts


def _subtable(table: Table, cols: list[int], title: Any, caption: Any) -> Table:
    """A table with the same look as `table` holding only the columns `cols`."""
    sub = Table(title=title, caption=caption, box=table.box, show_header=table.show_header,
                show_edge=table.show_edge, show_lines=table.show_lines,
                padding=table.padding, header_style=table.header_style,
                title_style=table.title_style, caption_style=table.caption_style,
                highlight=table.highlight, row_styles=table.row_styles,
                title_justify=table.title_justify, caption_justify=table.caption_justify)
    cells = []
    for c in cols:
        col: Column = table.columns[c]
        sub.add_column(col.header, col.footer, header_style=col.header_style,
                       style=col.style, justify=col.justify, vertical=col.vertical,
                       overflow=col.overflow, no_wrap=col.no_wrap, min_width=col.min_width,
                       max_width=col.max_width)
        cells.append(list(col.cells))
    for r, row in enumerate(table.rows):
        sub.add_row(*(cells[i][r] for i in range(len(cols))), style=row.style,
                    end_section=row.end_section)
    return sub


def _plain_rows(table: Table, console: Console, keys: int) -> Group:
    """The table as lines: each row's key cells, then `header: value` per other cell."""
    heads = [_plain(col.header, console) for col in table.columns]
    cells = [list(col.cells) for col in table.columns]
    lines: list[RenderableType] = []
    if table.title:
        lines.append(Text(_plain(table.title, console), style="bold"))
    for r in range(len(table.rows)):
        key = "  ".join(f"{heads[c]}: {_plain(cells[c][r], console)}" if heads[c]
                        else _plain(cells[c][r], console) for c in range(keys)).strip()
        lines.append(Text(key or "-", style="bold"))
        for c in range(keys, len(cells)):
            value = cells[c][r]
            head = f"{heads[c]}: " if heads[c] else ""
            if isinstance(value, (str, Text)):
                lines.append(Text(f"  {head}{_plain(value, console)}"))
            else:
                lines.extend([Text(f"  {head}".rstrip()), value])
    if table.caption:
        lines.append(Text(_plain(table.caption, console)))
    return Group(*lines)
