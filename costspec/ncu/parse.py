"""Read Nsight Compute CSV exports into one :class:`KernelRecord` per kernel launch.

Both CSV layouts are read by column name, never by position. The formats follow
``shared/reference/ncu-metrics-and-gpu-peaks.md`` §4:

* **raw page** (``--page raw``), wide: a header row, then usually a units row (its ``ID`` cell is
  empty), then one row per launch.
* **details page** (``--page details``, ncu's default), long: one row per (launch, metric), with
  ``Metric Name`` / ``Metric Unit`` / ``Metric Value``. Rows are grouped by ``ID``. Rule rows
  (empty ``Metric Name``) are skipped.

Column sets differ between ncu versions. 2023+ ncu has ``Block Size``, ``Grid Size``,
``Device``, ``CC`` and rule columns. 2019-2022 ncu has ``Kernel Time`` (a timestamp), no
Block/Grid/Device/CC and sometimes no rule columns. Any of these may be missing. Only ``ID``,
``Kernel Name`` and, on the details page, ``Metric Name``/``Metric Value`` are required.

Lines before the header (``==PROF==`` lines, the program's own output) are skipped. After the
header, blank lines and ``==PROF==``/``==WARNING==``-style lines are skipped. Every other line
must be a CSV row as wide as the header, with two exceptions that real ncu output has:

* ncu 2025 ends a details metric row right after ``Metric Value`` with a trailing comma, leaving
  out the rule cells (``...,"Metric Value",`` under a 20-column header). A row may be shorter
  than the header when every column it leaves out is a rule column; those cells read as empty.
* one trailing empty cell beyond the header (a trailing comma) is dropped.

Details pages are keyed by section. A metric *name* (it contains ``__``: ``gpu__time_duration.sum``)
has one value per launch wherever it appears, so it is stored under its name. A *label* (ncu's
default ``--print-metric-name label``: ``Duration``, ``Memory Throughput``) is only unique within
its section and body item, so it is stored as ``Section :: Body Item Label :: Label`` (the body
item only when the page has a ``Body Item Label`` column and the cell is not empty), e.g.
``GPU Speed Of Light Throughput :: Duration``. Metrics of the ``Command line profiler metrics``
section are names.

Values:

* C-locale numbers, with ``,`` as the only thousands separator (``"1,215,000,000.00"``).
* ``n/a``, ``(!) n/a``, ``nan`` and empty cells mean "not collected". Such metrics are listed in
  ``KernelRecord.missing`` and never stored as 0.
* ``--print-metric-instances values`` cells such as ``"158 (0: 158)"``: the aggregate before
  the parenthesis is used.
* Instanced cells without an aggregate, one value per instance separated by ``;``
  (``"32.00; 32.00; 4.00"``): the value is the metric's own roll-up over the instances, as ncu
  documents it for instanced metrics: the first roll-up suffix of the name decides (``.sum`` ->
  sum, ``.avg`` -> mean, ``.max`` -> max, ``.min`` -> min; ``x.sum.per_second`` is a sum). A
  name without a roll-up suffix (a label, ``launch__block_size``) has no defined aggregate: the
  cell is kept as text in ``attributes`` and no number is made up for it.
* A non-numeric value is kept as text in ``attributes`` only if its unit is empty and costspec
  does not expect a number for that metric. ncu's raw page carries many such device attributes
  (``No-CC``, ``CachePreferNone``, ``0x3``). Any other non-numeric value is an error. The most
  common cause is a non-C locale (``27.595.520``).

Units are converted to base units, with decimal prefixes (notes §3: ncu prints 16,896 B as
``16.896 Kbyte``):

* bytes -> ``byte``
* ``nsecond``/``usecond``/``msecond``/``second`` and ``ns``/``us``/``ms``/``s`` -> ``second``
* ``Khz``/``Mhz``/``Ghz`` -> ``hz``
* count units (``inst``, ``cycle``, ``warp``, ``thread``, ``sector``, ...) may carry K/M/G/T
  prefixes
* compound units such as ``Gbyte/second`` are converted part by part.

Unknown units are kept as printed, with the value unchanged, on metrics costspec does not read.
The counters it reads (`metrics.expected_units`: the FLOP instruction and Tensor-Core ops counters,
DRAM bytes, duration) must carry one of their own units: ``Mbyte`` on an instruction counter, or a
unit nobody knows, is an error naming the metric, never a number. A value in a count unit
(``inst``, ``byte``, ``cycle``...), or of a counter costspec reads, is never negative, and a FLOP
counter is a whole count (``12.5 inst`` is an error).

Line endings may be ``\n``, ``\r\n`` or a lone ``\r`` (old Mac style): all read the same.

NVTX columns (notes §4) are matched by the substrings ``Push/Pop_Range`` and ``Start/Stop_Range``.
The full headers are ``thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg``
and ``Id:Domain:Start/Stop_Range:...``, and names differ between ncu versions. See
:func:`parse_nvtx_cell` for the cell format.
"""
from __future__ import annotations

import csv
import os
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Union

from costspec.core.errors import CostspecError
from costspec.core.safeio import check_number_text
from costspec.ncu.metrics import all_known_metrics, expected_units, is_flop_counter
from costspec.ncu.nvtx_cell import parse_nvtx_cell  # noqa: F401  (re-exported)


class NcuFormatError(CostspecError):
    """An ncu CSV that cannot be read: names the file and the 1-based line."""

    def __init__(self, message: str, file: str, line: int):
        self.message = message
        self.file = file
        self.line = line
        super().__init__(str(self))

    def __str__(self) -> str:
        return f"{self.file}:{self.line}: {self.message}"


@dataclass(frozen=True)
class KernelRecord:
    """One profiled kernel launch.

    ``metrics`` maps a metric name to its value in base units; a label that ncu printed instead of
    a name is keyed ``Section :: [Body Item Label ::] Label`` (see the module docstring).
    ``units`` gives the base unit of each entry in ``metrics`` (``""`` = dimensionless).
    ``missing`` lists metrics that were present as ``n/a``/empty. ``attributes`` holds the text
    columns (Process ID, Stream, Block Size, Kernel Time, ...) and text-valued metrics.
    ``nvtx_stack`` is the push/pop stack, outermost first. ``nvtx_start_end`` lists the open
    start/end ranges. ``line`` is the 1-based line of the launch's (first) row. It is not part
    of equality.
    """

    id: int
    kernel_name: str
    nvtx_stack: tuple[str, ...] = ()
    metrics: dict[str, float] = field(default_factory=dict, hash=False)
    units: dict[str, str] = field(default_factory=dict, hash=False)
    cc: str | None = None
    device_name: str | None = None
    nvtx_start_end: tuple[str, ...] = ()
    missing: tuple[str, ...] = ()
    attributes: dict[str, str] = field(default_factory=dict, hash=False)
    line: int = field(default=0, compare=False)


# -- cells ---------------------------------------------------------------------------------------

_NA = frozenset({"", "n/a", "(!) n/a", "nan"})
_NUMBER = re.compile(r"[+-]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][+-]?\d+)?")
_GROUPED = re.compile(r"[+-]?\d{1,3}(?:,\d{3})+(?:\.\d*)?(?:[eE][+-]?\d+)?")


def parse_value(cell: str) -> Decimal | None:
    """A metric cell as an exact decimal; ``None`` for n/a or empty; ``ValueError`` if not a number."""
    check_number_text(cell, "ncu CSV value")  # bounded digits and magnitude (costspec.core.safeio)
    text = cell.strip()
    if text.lower() in _NA:
        return None
    if text.startswith("(!)"):  # ncu's warning marker in front of a value
        text = text[3:].strip()
    if "(" in text:  # --print-metric-instances values: "158 (0: 158)"; keep the aggregate
        text = text[: text.index("(")].strip()
    if _GROUPED.fullmatch(text):
        text = text.replace(",", "")
    if not _NUMBER.fullmatch(text):
        raise ValueError(f"not a number: {cell!r}")
    return Decimal(text)


_ROLLUPS = ("sum", "avg", "max", "min")


def parse_instances(cell: str) -> list[Decimal] | None:
    """The values of an instanced cell ``"32.00; 32.00; 4.00"``; ``None`` if the cell has no ``;`` or
    starts with an aggregate (``"158 (0: 100; 1: 58)"``, read by :func:`parse_value`).

    ``ValueError`` if an instance is not a number; ``n/a`` instances are skipped.
    """
    if ";" not in cell or "(" in cell.replace("(!)", ""):
        return None
    values = [parse_value(part) for part in cell.split(";")]
    return [v for v in values if v is not None]


def rollup(metric: str) -> str | None:
    """The roll-up of a metric name: ``"sum"`` for ``x.sum`` and ``x.sum.per_second``, else avg/max/min or None."""
    parts = metric.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in _ROLLUPS else None


def aggregate_instances(metric: str, values: list[Decimal]) -> Decimal | None:
    """ncu's roll-up of one metric over its instances; ``None`` when the name has no roll-up (or no values)."""
    kind = rollup(metric) if "__" in metric else None
    if kind is None or not values:
        return None
    if kind == "sum":
        return sum(values, Decimal(0))
    if kind == "avg":
        return sum(values, Decimal(0)) / len(values)
    return max(values) if kind == "max" else min(values)


_PREFIXES = {"": Decimal(1), "K": Decimal(10) ** 3, "M": Decimal(10) ** 6, "G": Decimal(10) ** 9,
             "T": Decimal(10) ** 12, "P": Decimal(10) ** 15}
_TIME = {"nsecond": Decimal("1e-9"), "usecond": Decimal("1e-6"), "msecond": Decimal("1e-3"), "second": Decimal(1),
         "ns": Decimal("1e-9"), "us": Decimal("1e-6"), "ms": Decimal("1e-3"), "s": Decimal(1)}
_COUNTS = frozenset({"byte", "inst", "cycle", "warp", "thread", "sector", "request", "block", "wavefront",
                     "transaction", "register", "op"})
_KNOWN_BASES = _COUNTS | {"second", "hz", ""}


def _unit_token(token: str) -> tuple[str, Decimal]:
    if token in _TIME:
        return "second", _TIME[token]
    if token.lower().endswith("hz") and token[:-2].upper() in _PREFIXES:
        return "hz", _PREFIXES[token[:-2].upper()]
    if token in _COUNTS:
        return token, Decimal(1)
    if token[:1] in _PREFIXES and token[1:] in _COUNTS:
        return token[1:], _PREFIXES[token[:1]]
    return token, Decimal(1)


def normalize_unit(unit: str) -> tuple[str, Decimal]:
    """(base unit, factor): ``value_in_base = value * factor``. ``"Kbyte"`` -> ``("byte", 1000)``."""
    text = unit.strip()
    if text.lower() in _NA:
        return "", Decimal(1)
    parts = [_unit_token(part.strip()) for part in text.split("/")]
    factor = parts[0][1]
    for _, divisor in parts[1:]:
        factor /= divisor
    return "/".join(base for base, _ in parts), factor


_IDENTITY = ("ID", "Process ID", "Process Name", "Host Name", "Kernel Name", "Kernel Time", "Context",
             "Stream", "Block Size", "Grid Size", "Device", "CC")
_RULE_COLUMNS = frozenset({"Rule Name", "Rule Type", "Rule Description", "Estimated Speedup Type",
                           "Estimated Speedup"})
_DETAILS_COLUMNS = ("Section Name", "Body Item Label", "Metric Name", "Metric Unit", "Metric Value",
                    *sorted(_RULE_COLUMNS))
COMMAND_LINE_SECTION = "Command line profiler metrics"
LABEL_SEPARATOR = " :: "
_ATTRIBUTE_COLUMNS = tuple(c for c in _IDENTITY if c not in ("ID", "Kernel Name", "CC"))
_NOISE = re.compile(r"==[A-Z]+==")  # ==PROF==, ==WARNING==, ==ERROR==
_NUMERIC_METRICS = all_known_metrics()

PathOrText = Union[str, "os.PathLike[str]"]


@dataclass(frozen=True)
class _Row:
    line: int
    cells: list[str]


class _Table:
    """Header columns of one CSV, with the positions costspec needs."""

    def __init__(self, header: _Row, source: str):
        self.source = source
        self.columns = [c.strip() for c in header.cells]
        seen: dict[str, int] = {}
        for position, name in enumerate(self.columns):
            if name in seen:
                raise NcuFormatError(f"column {name!r} appears twice in the header", source, header.line)
            seen[name] = position
        self.index = seen
        self.push_pop = self._nvtx_column("Push/Pop_Range", header.line)
        self.start_end = self._nvtx_column("Start/Stop_Range", header.line)
        self.is_details = "Metric Name" in seen and "Metric Value" in seen
        special = set(_IDENTITY) | {self.push_pop, self.start_end}
        if self.is_details:
            special |= set(_DETAILS_COLUMNS)
        self.metric_columns = [c for c in self.columns if c not in special]

    def _nvtx_column(self, marker: str, line: int) -> str | None:
        found = [c for c in self.columns if marker in c]
        if len(found) > 1:
            raise NcuFormatError(f"more than one NVTX {marker} column: {found}", self.source, line)
        return found[0] if found else None

    def get(self, row: _Row, column: str | None) -> str:
        """A cell by column name; ``""`` if the column does not exist."""
        if column is None or column not in self.index:
            return ""
        return row.cells[self.index[column]].strip()

    def check_width(self, row: _Row) -> None:
        """Accept a row as wide as the header; pad a details row whose missing cells are all rule cells."""
        width = len(self.columns)
        if len(row.cells) == width + 1 and not row.cells[-1].strip():
            del row.cells[-1]  # a trailing comma
        short = self.columns[len(row.cells):]
        if short and self.is_details and all(c in _RULE_COLUMNS for c in short):
            row.cells.extend([""] * len(short))  # ncu 2025: `...,"Metric Value",` with no rule cells
        if len(row.cells) != width:
            raise NcuFormatError(f"row has {len(row.cells)} cells, the header has {width}", self.source, row.line)

    def metric_key(self, row: _Row) -> str:
        """The key of a details row: the metric name, or ``Section :: [Body Item ::] Label`` for a label."""
        name = self.get(row, "Metric Name")
        section = self.get(row, "Section Name")
        if "__" in name or section in ("", COMMAND_LINE_SECTION):
            return name
        body = self.get(row, "Body Item Label")
        return LABEL_SEPARATOR.join(part for part in (section, body, name) if part)


class _Launch:
    """A KernelRecord under construction."""

    def __init__(self, table: _Table, row: _Row, launch_id: int):
        self.id = launch_id
        self.line = row.line
        self.kernel_name = table.get(row, "Kernel Name")
        self.nvtx_raw = (table.get(row, table.push_pop), table.get(row, table.start_end))
        self.nvtx_stack = _nvtx(table, row, table.push_pop)
        self.nvtx_start_end = _nvtx(table, row, table.start_end)
        self.cc = table.get(row, "CC") or None
        self.metrics: dict[str, Decimal] = {}
        self.units: dict[str, str] = {}
        self.missing: dict[str, None] = {}
        self.attributes = {c: v for c in _ATTRIBUTE_COLUMNS if (v := table.get(row, c))}
        self.first_line: dict[str, int] = {}

    def add(self, table: _Table, row: _Row, metric: str, unit: str, cell: str) -> None:
        """Record one metric cell, converting units; duplicates must agree."""
        base, factor = normalize_unit(unit)
        try:
            instances = parse_instances(cell)
            if instances is None:
                value = parse_value(cell)
            elif not instances:  # every instance n/a
                value = None
            else:
                value = aggregate_instances(metric, instances)
                if value is None:  # no roll-up defined for this name: keep the text, make up no number
                    self._set(table, row, metric, ("text", cell.strip()))
                    return
        except ValueError:
            if base or metric in _NUMERIC_METRICS or expected_units(metric) is not None:
                raise NcuFormatError(
                    f"metric {metric!r} of kernel ID {self.id}: value {cell.strip()!r} is not a number "
                    "(expected C-locale digits with ',' thousands separators; run ncu under LC_ALL=C)",
                    table.source, row.line,
                ) from None
            self._set(table, row, metric, ("text", cell.strip()))
            return
        if value is None:
            self._set(table, row, metric, ("missing", None))
        else:
            value *= factor
            self._check(table, row, metric, unit, base, cell, value, instances)
            self._set(table, row, metric, ("value", value, base))

    def _check(self, table: _Table, row: _Row, metric: str, unit: str, base: str, cell: str, value: Decimal,
               instances: list[Decimal] | None) -> None:
        """A counter costspec reads has one of its own units; a count is never negative; a FLOP counter is whole."""
        allowed = expected_units(metric)

        def fail(message: str) -> NcuFormatError:
            return NcuFormatError(f"metric {metric!r} of kernel ID {self.id}: {message}", table.source, row.line)

        if allowed is not None and base not in allowed:
            shown = " or ".join(repr(u) if u else "no unit" for u in allowed)
            what = "a unit costspec knows" if base not in _KNOWN_BASES else "a unit of this counter"
            raise fail(f"unit {unit.strip()!r} is not {what} (expected {shown}; a value in another unit is not "
                       "a count of it)")
        if (allowed is not None or base in _COUNTS or base == "second") and (
                value < 0 or any(v < 0 for v in instances or ())):
            raise fail(f"value {cell.strip()!r} is negative (expected a count >= 0; a negative counter is a "
                       "broken capture)")
        if is_flop_counter(metric) and value != value.to_integral_value():
            raise fail(f"value {cell.strip()!r} is not a whole number of {base or 'operations'} "
                       "(expected a count of executed instructions)")

    def _set(self, table: _Table, row: _Row, metric: str, entry: tuple) -> None:
        previous = self._entry(metric)
        if previous is not None:
            if previous != entry:
                raise NcuFormatError(
                    f"metric {metric!r} of kernel ID {self.id} appears again with a different value "
                    f"(line {self.first_line[metric]}: {_show(previous)}; here: {_show(entry)})",
                    table.source, row.line,
                )
            return
        self.first_line[metric] = row.line
        if entry[0] == "text":
            self.attributes[metric] = entry[1]
        elif entry[0] == "missing":
            self.missing[metric] = None
        else:
            self.metrics[metric], self.units[metric] = entry[1], entry[2]

    def _entry(self, metric: str) -> tuple | None:
        if metric in self.metrics:
            return ("value", self.metrics[metric], self.units[metric])
        if metric in self.missing:
            return ("missing", None)
        if metric in self.first_line and metric in self.attributes:
            return ("text", self.attributes[metric])
        return None

    def record(self) -> KernelRecord:
        metrics = {name: float(value) for name, value in self.metrics.items()}
        cc = self.cc or _cc_from_attributes(metrics)
        device = self.attributes.get("device__attribute_display_name")
        if device is None and not self.attributes.get("Device", "0").isdigit():
            device = self.attributes["Device"]
        return KernelRecord(
            id=self.id, kernel_name=self.kernel_name, nvtx_stack=self.nvtx_stack, metrics=metrics,
            units=dict(self.units), cc=cc, device_name=device, nvtx_start_end=self.nvtx_start_end,
            missing=tuple(self.missing), attributes=dict(self.attributes), line=self.line,
        )


def _show(entry: tuple) -> str:
    if entry[0] == "value":
        return f"{entry[1].normalize():f} {entry[2]}".strip()
    return "n/a" if entry[0] == "missing" else repr(entry[1])


def _cc_from_attributes(metrics: dict[str, float]) -> str | None:
    major = metrics.get("device__attribute_compute_capability_major")
    minor = metrics.get("device__attribute_compute_capability_minor")
    return f"{int(major)}.{int(minor)}" if major is not None and minor is not None else None


def _nvtx(table: _Table, row: _Row, column: str | None) -> tuple[str, ...]:
    try:
        return parse_nvtx_cell(table.get(row, column))
    except ValueError as exc:
        raise NcuFormatError(f"column {column!r}: {exc}", table.source, row.line) from None


def _launch_id(table: _Table, row: _Row) -> int:
    text = table.get(row, "ID")
    check_number_text(text, f"{table.source}:{row.line}: ncu CSV ID")  # bounded digits (costspec.core.safeio)
    if not text.isdigit():
        raise NcuFormatError(f"ID {text!r} is not a non-negative integer", table.source, row.line)
    return int(text)


def _read_text(path_or_text: PathOrText, source_name: str | None) -> tuple[str, str]:
    """(text, name for messages). A ``str`` containing a newline is CSV text, anything else a path,
    read by the shared bounded reader (`costspec.core.safeio`: a regular file of at most 256 MiB, no
    line over 131,072 characters, so no CSV field can exceed Python's csv field limit). ``\r\n``
    and lone ``\r`` line endings become ``\n`` before lines are counted."""
    from costspec.core.safeio import MAX_CSV_LINE, NCU_CSV, check_line_lengths, read_text

    if isinstance(path_or_text, str) and ("\n" in path_or_text or "\r" in path_or_text):
        name = source_name or "<text>"
        text = path_or_text.lstrip("\ufeff")
    else:
        path = Path(path_or_text)
        name = source_name or str(path)
        text = read_text(path, NCU_CSV)
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    check_line_lengths(text, MAX_CSV_LINE, name)
    return text, name


def _rows(text: str, source: str) -> tuple[_Row, list[_Row]]:
    """The header row and the data rows after it (noise lines dropped)."""
    lines = text.split("\n")
    header: _Row | None = None
    rows: list[_Row] = []
    for number, line in enumerate(lines, start=1):
        if not line.strip() or _NOISE.match(line):
            continue
        if header is None:
            try:
                cells = next(csv.reader([line]))
            except csv.Error:
                continue  # not the header (a line of the program's own output)
            if cells and cells[0].strip() == "ID" and "Kernel Name" in (c.strip() for c in cells):
                header = _Row(number, cells)
            continue
        try:
            cells = next(csv.reader([line], strict=True))
        except csv.Error as exc:
            raise NcuFormatError(f"not a CSV row: {exc}", source, number) from None
        rows.append(_Row(number, cells))
    if header is None:
        raise NcuFormatError(
            'no ncu CSV header found (a row whose first cell is "ID" and that has a "Kernel Name" column); '
            "expected the output of `ncu --csv --page raw|details`",
            source, 1,
        )
    return header, rows


def _parse_raw(table: _Table, rows: list[_Row]) -> list[KernelRecord]:
    units = [""] * len(table.columns)
    if rows and table.get(rows[0], "ID") == "" and len(rows[0].cells) == len(table.columns):
        units, rows = [c.strip() for c in rows[0].cells], rows[1:]
    launches: dict[int, _Launch] = {}
    for row in rows:
        table.check_width(row)
        launch_id = _launch_id(table, row)
        if launch_id in launches:
            raise NcuFormatError(
                f"ID {launch_id} appears twice on the raw page (first at line {launches[launch_id].line})",
                table.source, row.line,
            )
        launch = launches[launch_id] = _Launch(table, row, launch_id)
        for column in table.metric_columns:
            position = table.index[column]
            launch.add(table, row, column, units[position], row.cells[position])
    return [launch.record() for launch in launches.values()]


def _parse_details(table: _Table, rows: list[_Row]) -> list[KernelRecord]:
    launches: dict[int, _Launch] = {}
    for row in rows:
        table.check_width(row)
        launch_id = _launch_id(table, row)
        launch = launches.get(launch_id)
        if launch is None:
            launch = launches[launch_id] = _Launch(table, row, launch_id)
        else:
            _check_same_launch(table, row, launch)
        if table.get(row, "Metric Name"):  # rows with an empty Metric Name are rule results
            launch.add(table, row, table.metric_key(row), table.get(row, "Metric Unit"), table.get(row, "Metric Value"))
    return [launch.record() for launch in launches.values()]


def _check_same_launch(table: _Table, row: _Row, launch: _Launch) -> None:
    here = (table.get(row, "Kernel Name"), (table.get(row, table.push_pop), table.get(row, table.start_end)))
    if here != (launch.kernel_name, launch.nvtx_raw):
        raise NcuFormatError(
            f"ID {launch.id} names a different kernel or NVTX range than at line {launch.line}",
            table.source, row.line,
        )


def parse_csv(path_or_text: PathOrText, *, source_name: str | None = None) -> list[KernelRecord]:
    """Parse an ncu CSV (raw or details page, any ncu version since 2019) into launches, in file order.

    ``path_or_text``: a path, or the CSV text itself (a ``str`` with a newline in it).
    ``source_name`` replaces the file name in error messages. Malformed input raises
    :class:`NcuFormatError` with the 1-based line.
    """
    text, source = _read_text(path_or_text, source_name)
    header, rows = _rows(text, source)
    table = _Table(header, source)
    if "Kernel Name" not in table.index:
        raise NcuFormatError("the header has no 'Kernel Name' column", source, header.line)
    return _parse_details(table, rows) if table.is_details else _parse_raw(table, rows)
