"""The one result type every command prints: tables of rows keyed by row name, with typed columns.

A `Table` has one row per report row (a layer, keyed by its dotted name; `""` is the total) and
an ordered list of `Column`s. Consumers *attach* columns to the rows they know by name: `eval`
starts a table from the model walk (TC / CUDA FLOPs, params), the roofline attaches bytes,
intensity, bound and time, validate attaches analytic / measured / reconciled, calibration the
executed FLOPs, ncu compare the measured counters, timing the measured seconds. A `Result` is
what one command prints: a header, its tables (one per phase where a command has phases), and
sections of text (rules applied, kernels listed, notes).

Values are exact (ints, Fractions, floats where the quantity is a float); units and rounding are
the renderer's job (`costspec.core.render`), chosen by the column's `kind`. No I/O here.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Iterable, Iterator, Literal, Mapping

Kind = Literal["flops", "bytes", "params", "seconds", "count", "ratio", "rel", "diff", "percent", "number", "text"]
"""How a column's values are shown in a table (json and csv always carry the exact value):

flops / bytes: SI prefixes (1.234 GFLOP, 12.0 MB); params: 85.80 M; seconds: 1.230 ms;
count: 1,234,567 (exact, grouped); ratio: 1.0123; rel: a relative difference (0, 1.2e-03, inf);
diff: a signed relative difference as a percentage (+1.25%);
percent: a fraction shown as 12.3%; number: a float with one decimal; text: as it is.
"""


@dataclass(frozen=True)
class Column:
    """One column: its key (json / csv field), its title (table header) and how to show it."""

    key: str
    title: str
    kind: Kind = "count"
    hidden: bool = False  # in json / csv only, not in the fixed-width table or markdown
    na: bool = False  # not measured in this run: tables show n/a (json / csv keep the value)


@dataclass
class Row:
    """One row of a table: a layer (dotted `name`, shown as `label` indented by `depth`) or the total."""

    name: str
    label: str
    depth: int = 0
    values: dict[str, Any] = field(default_factory=dict)

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)

    def __getattr__(self, key: str) -> Any:
        # row.tc reads values["tc"]: the columns attached to a row read like attributes
        values = self.__dict__.get("values")
        if values is not None and key in values:
            return values[key]
        raise AttributeError(key)


@dataclass
class Table:
    """Rows in display order (pre-order over the layer tree), an optional total row, typed columns."""

    columns: list[Column]
    rows: list[Row]
    total: Row | None = None
    title: str = ""  # e.g. "forward" when a command prints one table per phase
    label_title: str = "layer"  # the header of the label column

    def __post_init__(self) -> None:
        self._by_name = {r.name: r for r in self.rows}

    def row(self, name: str) -> Row:
        """The row named `name` ("" or "total": the total row)."""
        if name in ("", "total") and self.total is not None:
            return self.total
        return self._by_name[name]

    def all_rows(self) -> Iterator[Row]:
        yield from self.rows
        if self.total is not None:
            yield self.total

    def attach(self, column: Column, values: Mapping[str, Any], total: Any = None) -> None:
        """Add `column` with a value per row name (rows not in `values` get None) and for the total; a
        column with the same key is replaced (a consumer attaching again, e.g. at other efficiencies)."""
        self.columns = [c for c in self.columns if c.key != column.key] + [column]
        for row in self.rows:
            row.values[column.key] = values.get(row.name)
        if self.total is not None:
            self.total.values[column.key] = total

    def add_row(self, row: Row) -> None:
        """Append a row that is not a layer (e.g. work measured outside every layer)."""
        self.rows.append(row)
        self._by_name[row.name] = row

    def keys(self) -> list[str]:
        return [c.key for c in self.columns]


@dataclass
class Result:
    """Everything one command prints.

    header:   one line naming what was computed (spec, pass, dims, ...);
    tables:   the tables, in order;
    sections: titled blocks of text lines after the tables (rules applied, kernels, ...);
    notes:    lines printed last (counting choices, conventions);
    meta:     exact data for json output (spec, pass, dims, totals, ...), never shown in a table.
    """

    header: str
    tables: list[Table] = field(default_factory=list)
    sections: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def table(self) -> Table:
        """The only (or first) table."""
        return self.tables[0]


def table_of(rows: Iterable[Row], columns: Iterable[Column], total: Row | None = None, title: str = "") -> Table:
    return Table(list(columns), list(rows), total, title)


__all__ = ["Column", "Kind", "Result", "Row", "Table", "table_of"]
