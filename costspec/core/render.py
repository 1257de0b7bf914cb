"""The one renderer: a `Result` as a fixed-width table, JSON, CSV or Markdown.

Every command's printed output goes through `render`; no other module computes column widths.
Tables show human units chosen by each column's kind (`costspec.core.results.Kind`); JSON and CSV carry
the exact values. Text that comes from a spec (names, docs) is stripped of control characters
before it reaches a terminal, and escaped for Markdown.
"""
from __future__ import annotations

import csv
import io
import json
import math
import os
import sys
import textwrap
from fractions import Fraction
from typing import Any

from costspec.core import units
from costspec.core.results import Column, Result, Row, Table
from costspec.core.text import for_markdown, for_terminal
from costspec.core.vocab import Format


def plain(text: str) -> str:
    """Text safe for a terminal: control and reordering characters shown as escapes (`costspec.core.text`)."""
    return for_terminal(text)


def cell(column: Column, value: Any) -> str:
    """A value as a table shows it (see `costspec.core.results.Kind`); None is '-'."""
    if column.na:
        return "n/a"
    if value is None:
        return "-"
    kind = column.kind
    if kind == "text":
        return plain(str(value))
    if isinstance(value, float) and math.isnan(value):
        return "nan"
    if kind == "flops":
        return units.si(value)
    if kind == "bytes":
        return units.si(value, "B")
    if kind == "params":
        return units.params(value)
    if kind == "seconds":
        return units.seconds(value)
    if kind == "ratio":
        return f"{float(value):.4f}"
    if kind == "diff":
        return f"{100 * float(value):+.2f}%"
    if kind == "percent":
        return f"{100 * float(value):.1f}%"
    if kind == "number":
        return f"{float(value):.1f}"
    if kind == "rel":
        return "inf" if value == math.inf else ("0" if value == 0 else f"{float(value):.2e}")
    if isinstance(value, Fraction):
        value = round(value)
    return f"{value:,}" if isinstance(value, int) else str(value)


def _label(row: Row) -> str:
    return "  " * row.depth + plain(row.label)


def terminal_width() -> int:
    """The width tables and notes are fitted to: $COLUMNS, else the terminal's, else 100 (not a terminal)."""
    columns = os.environ.get("COLUMNS", "")
    if columns.isdigit() and int(columns) > 0:
        return int(columns)
    try:
        if sys.stdout.isatty():
            return os.get_terminal_size(sys.stdout.fileno()).columns
    except (OSError, ValueError):
        pass
    return 100


def _fit_text(body: list[list[str]], widths: list[int], texts: list[int], width: int) -> None:
    """Narrow the long text columns (indices `texts`, widest first) until a line fits `width`: a cut cell
    ends in '...'. Numbers and text up to 30 characters (a name) are never cut; a table wider than that
    stays wider."""
    over = sum(widths) + 2 * (len(widths) - 1) - width
    for i in sorted(texts, key=lambda i: -widths[i]):
        if over <= 0:
            break
        new = max(widths[i] - over, 30)
        if new >= widths[i]:
            continue
        over -= widths[i] - new
        widths[i] = new
        for line in body:
            if len(line[i]) > new:
                line[i] = line[i][:new - 3].rstrip() + "..."


def _wrapped(text: str, width: int, indent: str = "") -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent, subsequent_indent=indent + "  ",
                         break_long_words=False, break_on_hyphens=False) or [indent]


def _column_groups(widths: list[int], width: int) -> list[list[int]]:
    """The value columns (indices from 1) in runs that fit `width` beside the label column: a table too
    wide for the terminal is printed as several narrower tables, each with the layer names."""
    groups: list[list[int]] = [[]]
    used = widths[0]
    for i in range(1, len(widths)):
        if groups[-1] and used + 2 + widths[i] > width:
            groups.append([])
            used = widths[0]
        groups[-1].append(i)
        used += 2 + widths[i]
    return groups


def _block(lines: list[list[str]], widths: list[int], keep: list[int], columns: list, total: bool) -> list[str]:
    """The rows' cells in the columns `keep` (0: the label), padded; rules under the head and above a total."""
    out = []
    for n, line in enumerate(lines):
        cells = [line[i].ljust(widths[i]) if col is None or col.kind == "text" else line[i].rjust(widths[i])
                 for i, col in zip(keep, columns)]
        out.append("  ".join(cells).rstrip())
        if n == 0 or (total and n == len(lines) - 2):
            out.append("  ".join("-" * widths[i] for i in keep))
    return out


def render_table(result: Result, width: int | None = None) -> str:
    """The result as fixed-width text fitted to `width` columns (the terminal's by default): text columns
    are cut, notes and sections wrapped."""
    width = width or terminal_width()
    lines = [wrapped for part in result.header.splitlines() for wrapped in _wrapped(plain(part), width)]
    for table in result.tables:
        if table.title:
            lines += ["", f"[{plain(table.title)}]"]
        shown = [c for c in table.columns if not c.hidden]
        head = [table.label_title] + [c.title for c in shown]
        body = [[_label(r)] + [cell(c, r.get(c.key)) for c in shown] for r in table.all_rows()]
        widths = [max(len(line[i]) for line in [head] + body) for i in range(len(head))]
        _fit_text(body, widths, [i + 1 for i, c in enumerate(shown) if c.kind == "text"], width)
        for k, group in enumerate(_column_groups(widths, width)):
            if k:
                lines += ["", "(the table's columns, continued)"]
            lines += _block([head] + body, widths, [0] + group, [None] + [shown[i - 1] for i in group],
                            table.total is not None)
    for title, section in result.sections.items():
        lines += _wrapped(plain(title) + ":" if section else plain(title) + ": none", width)
        for s in section:
            lines += _wrapped(plain(s), width, "  ")
    for n in result.notes:
        lines += _wrapped(plain(n), width)
    return "\n".join(lines)


def _exact(value: Any) -> Any:
    if isinstance(value, Fraction):
        return value.numerator if value.denominator == 1 else float(value)
    if isinstance(value, float) and (math.isinf(value) or math.isnan(value)):
        return None
    if isinstance(value, dict):
        return {str(k): _exact(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_exact(v) for v in value]
    return value


def _row_json(row: Row, keys: list[str]) -> dict:
    return {"name": row.name or "total", "label": row.label, "depth": row.depth,
            **{k: _exact(row.get(k)) for k in keys}}


def table_json(table: Table) -> dict:
    keys = table.keys()
    out: dict[str, Any] = {"columns": [{"key": c.key, "title": c.title, "kind": c.kind} for c in table.columns],
                           "rows": [_row_json(r, keys) for r in table.rows]}
    if table.total is not None:
        out["total"] = _row_json(table.total, keys)
    return out


def render_json(result: Result) -> str:
    out: dict[str, Any] = dict(_exact(result.meta))
    if len(result.tables) == 1 and not result.tables[0].title:
        out.update(table_json(result.tables[0]))
    else:
        out["tables"] = {t.title or str(i): table_json(t) for i, t in enumerate(result.tables)}
    if result.sections:
        out.setdefault("sections", result.sections)
    out["notes"] = result.notes
    return json.dumps(out, indent=2)


def render_csv(result: Result) -> str:
    buf = io.StringIO()
    several = len(result.tables) > 1
    keys: list[str] = list(dict.fromkeys(k for t in result.tables for k in t.keys()))
    fields = (["table"] if several else []) + ["name", "label", "depth"] + keys
    writer = csv.DictWriter(buf, fieldnames=fields, lineterminator="\n")
    writer.writeheader()
    for table in result.tables:
        for row in table.all_rows():
            record = {"name": row.name or "total", "label": row.label, "depth": row.depth,
                      **{k: _exact(row.get(k)) for k in table.keys()}}
            if several:
                record["table"] = table.title
            writer.writerow(record)
    return buf.getvalue().rstrip("\n")


def _md(text: str) -> str:
    return for_markdown(text)


def render_markdown(result: Result) -> str:
    lines = [f"**{_md(part)}**" for part in result.header.splitlines() if part]
    for table in result.tables:
        lines.append("")
        if table.title:
            lines += [f"*{_md(table.title)}*", ""]
        shown = [c for c in table.columns if not c.hidden]
        lines.append(f"| {_md(table.label_title)} | " + " | ".join(_md(c.title) for c in shown) + " |")
        lines.append("|---|" + "---:|" * len(shown))
        for row in table.all_rows():
            name = "&nbsp;" * 2 * row.depth + (_md(row.label) if row is not table.total else "**total**")
            lines.append(f"| {name} | " + " | ".join(_md(cell(c, row.get(c.key))) for c in shown) + " |")
    for title, section in result.sections.items():
        lines += ["", f"**{_md(title)}**"] + [f"- {_md(s)}" for s in section]
    if result.notes:
        lines += [""] + [_md(n) for n in result.notes]
    return "\n".join(lines)


_RENDERERS = {Format.TABLE: render_table, Format.JSON: render_json, Format.CSV: render_csv,
              Format.MARKDOWN: render_markdown}


def render(result: Result, fmt: str | Format = Format.TABLE) -> str:
    """`result` as text in `fmt` (table, json, csv or markdown)."""
    return _RENDERERS[Format.parse(fmt, "--format")](result)


__all__ = ["cell", "plain", "render", "render_csv", "render_json", "render_markdown", "render_table", "table_json",
           "terminal_width"]
