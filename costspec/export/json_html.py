"""Another command's `--format json` output as HTML tables (the report's validation and ncu sections).

Generic on purpose: scalars become a key/value list, a mapping of row lists (validate's and ncu
compare's `phases`) or of tables (`tables`: {columns, rows, total}) one table each, any other list
of objects a table. It does not depend on one command's exact fields, so a field added to those
JSON outputs shows up without a change here. Every value is escaped.
"""
from __future__ import annotations

from html import escape
from typing import Any

_ROW_KEYS = ("name", "label", "depth")
MAX_ROWS = 2000


def value_html(value: Any) -> str:
    if value is True:
        return '<span class="ok">&#x2713; yes</span>'
    if value is False:
        return '<span class="bad">&#x2717; no</span>'
    if value is None:
        return '<span class="none">-</span>'
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:.4g}"
    if isinstance(value, dict):
        return ", ".join(f"{escape(str(k))}: {value_html(v)}" for k, v in value.items()) or "-"
    if isinstance(value, list):
        return "; ".join(value_html(v) for v in value) or "-"
    return escape(str(value))


def _is_rows(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def rows_table(rows: list[dict], title: str = "") -> str:
    """A table with one column per key (in first-seen order); name/label/depth make an indented first column."""
    layered = all("name" in r or "label" in r for r in rows)
    keys: list[str] = []
    for r in rows:
        keys.extend(k for k in r if k not in keys and not (layered and k in _ROW_KEYS))
    head = (["layer"] if layered else []) + keys
    out = [f'<div class="scroll"><table class="data"><caption>{escape(title)}</caption>' if title else
           '<div class="scroll"><table class="data">',
           "<thead><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr></thead><tbody>"]
    for r in rows[:MAX_ROWS]:
        cells = []
        if layered:
            raw_depth = r.get("depth")
            depth = raw_depth if isinstance(raw_depth, int) else 0
            name = r.get("label") or r.get("name") or "total"
            cells.append(f'<td class="name" style="padding-left:{0.4 + 1.1 * min(depth, 12):.1f}em" '
                         f'title="{escape(str(r.get("name", "")))}">{escape(str(name))}</td>')
        bad = any(r.get(k) is False for k in keys)
        cells += [f"<td>{value_html(r.get(k))}</td>" for k in keys]
        out.append(f'<tr class="{"badrow" if bad else ""}">' + "".join(cells) + "</tr>")
    if len(rows) > MAX_ROWS:
        out.append(f'<tr><td colspan="{len(head)}">... {len(rows) - MAX_ROWS:,} more rows in the JSON file</td></tr>')
    out.append("</tbody></table></div>")
    return "".join(out)


def json_sections(data: dict) -> str:
    """The whole JSON object as HTML."""
    scalars, blocks = [], []
    for key, value in data.items():
        if _is_rows(value):
            blocks.append(rows_table(value, key))
        elif isinstance(value, dict) and value and all(_is_rows(v) or v == [] for v in value.values()):
            blocks.extend(rows_table(v, f"{key}: {k}") for k, v in value.items() if v)
        elif isinstance(value, dict) and value and all(isinstance(v, dict) and "rows" in v for v in value.values()):
            for k, table in value.items():
                listed = table.get("rows")  # anything but a list of rows is shown as a value, never iterated
                rows = (listed if isinstance(listed, list) else []) + (
                    [table["total"]] if isinstance(table.get("total"), dict) else [])
                if not isinstance(listed, (list, type(None))):
                    scalars.append((f"{key}: {k}: rows", listed))
                if _is_rows(rows):
                    blocks.append(rows_table(rows, f"{key}: {k}"))
        elif key == "rows" and isinstance(value, list) and _is_rows(value):
            blocks.append(rows_table(value))
        elif key == "columns":
            continue
        else:
            scalars.append((key, value))
    items = "".join(f"<dt>{escape(str(k))}</dt><dd>{value_html(v)}</dd>" for k, v in scalars)
    return (f'<dl class="kv">{items}</dl>' if items else "") + "".join(blocks)
