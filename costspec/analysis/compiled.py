"""A spec compiled for evaluation: what `bind`, `build_report`, the alignment check and the notes need,
as exact integer programs (`costspec.analysis.program`) plus the tree's names, labels, depths, kinds,
engines and notes. No sympy, no tree: `Model.evaluate` and a warm `costspec eval` run this.

`CompiledModel` is made from a built model by `costspec.analysis.compiler.compile_model`, from the
same walk and the same `Cost` objects the symbolic path evaluates, and is stored as JSON by the
compiled-spec cache (`to_json` / `from_json`; `from_json` checks every field).

Each method answers exactly what the symbolic path answers, or None: wherever that path would raise
(an unknown or derived dim set, a violated constraint, a size that is not a positive integer, a
division by zero, a number too large) or the program cannot give an exact value, the answer is None
and the caller runs the symbolic path, which gives the number or the located error.
"""
from __future__ import annotations

import operator
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from costspec.analysis.program import Inexact, Program, ProgramError, exact
from costspec.analysis.reporting import SPARSE_NOTE, Report, active_params_note, columns, unpatterned_note
from costspec.core.results import Row, Table
from costspec.core.vocab import Pass

FORMAT = 1  # the layout of `to_json`; a reader refuses any other
PASSES = ("forward", "backward", "train")  # a compiled model holds one or more of them
NO_SLOT = -1
_ROW_SLOTS = 7  # tc, cuda, params, count, repeat, tc_dense, sparse_tc
_FAIL = (Inexact, ProgramError, ArithmeticError, ValueError, TypeError, RecursionError, MemoryError)


class CompiledFormatError(ValueError):
    """Data that is not a compiled model of this format (a corrupt or foreign cache entry)."""


@dataclass(frozen=True)
class RowInfo:
    """A report row's fixed part: name, label, depth, kind and the engine of its matmul-class FLOPs."""

    name: str
    label: str
    depth: int
    kind: str
    engine: str


@dataclass(frozen=True)
class PassCode:
    """One pass: a program over every dim (dims order) and the slots of each row's values and the total's
    (tc, cuda, params, count, repeat, tc_dense, sparse_tc; NO_SLOT where a row has no such value)."""

    program: Program
    rows: list[tuple[int, ...]]
    total: tuple[int, ...]
    outputs: tuple[int, ...]  # the distinct slots of rows and total


@dataclass(frozen=True)
class GemmDim:
    """One leading dim of one Tensor-Core GEMM (`costspec.analysis.alignment.check`), its size a slot."""

    layer: str
    kind: str
    dim: str
    dtype: str
    need: int
    best: int
    slot: int


class CompiledModel:
    """A compiled spec (see the module docstring)."""

    def __init__(self, data: dict[str, Any]):
        """From `to_json`'s data, checked (CompiledFormatError for anything else)."""
        try:
            self._load(data)
        except (ProgramError, KeyError, IndexError, TypeError, ValueError, AttributeError) as exc:
            if isinstance(exc, CompiledFormatError):
                raise
            raise CompiledFormatError(f"not a compiled model: {type(exc).__name__}: {exc}") from None
        self.data = data

    # -- loading -----------------------------------------------------------------------------------
    def _load(self, data: dict[str, Any]) -> None:
        _need(isinstance(data, dict) and data.get("format") == FORMAT, "format")
        self.name = _text(data["name"])
        self.precision = _text(data["precision"])
        self.sparse = _flag(data["sparse"])
        self.flash = _flag(data["flash"])
        dim_digits, result_digits = data["limits"]
        self.dim_bound = 10 ** _count(dim_digits, 10_000)
        self.result_bound = 10 ** _count(result_digits, 10_000)
        dims = data["dims"]
        _need(isinstance(dims, list) and len(dims) <= 10_000, "dims")
        self.dims: list[str] = [_text(d[0]) for d in dims]
        _need(len(set(self.dims)) == len(self.dims) and all(len(d) == 2 for d in dims), "dims")
        self.defaults: dict[str, int | None] = {
            d[0]: None if d[1] is None else _positive(d[1]) for d in dims}
        self.free = [n for n in self.dims if self.defaults[n] is not None]
        self.derived = [n for n in self.dims if self.defaults[n] is None]

        bind = data["bind"]
        self.bind_program = Program.load(len(self.free), bind["code"])
        self.derived_slots = self._slots(self.bind_program, bind["derived"], "n")
        _need(len(self.derived_slots) == len(self.derived), "derived")
        self.conditions = self._slots(self.bind_program, bind["conditions"], "b")
        self._slots(self.bind_program, bind["values"], "n")  # constraint messages' values: computed, not read
        self.sizes = self._slots(self.bind_program, bind["sizes"], "n")

        self.rows = [RowInfo(_text(r[0]), _text(r[1]), _count(r[2], 10_000), _text(r[3]), _text(r[4]))
                     for r in _list(data["rows"])]
        passes = data["passes"]
        _need(isinstance(passes, dict) and bool(passes) and set(passes) <= set(PASSES), "passes")
        self.passes = {p: self._pass(passes[p]) for p in PASSES if p in passes}

        notes = data["notes"]
        self.notes_program = Program.load(len(self.dims), notes["code"])
        self.layer_notes = [_text(n) for n in _list(notes["layer_notes"])]
        self.active = [(_text(a[0]), self._slot(self.notes_program, a[1], "n")) for a in _list(notes["active"])]
        self.unpatterned = [(_text(u[0]), self._slot(self.notes_program, u[1], "n"))
                            for u in _list(notes["unpatterned"])]
        align = data["align"]
        self.align_program = Program.load(len(self.dims), align["code"])
        self.gemms = [GemmDim(_text(g[0]), _text(g[1]), _text(g[2]), _text(g[3]), _positive(g[4]), _positive(g[5]),
                              self._slot(self.align_program, g[6], "n")) for g in _list(align["gemms"])]

    def _pass(self, raw: dict[str, Any]) -> PassCode:
        program = Program.load(len(self.dims), raw["code"])
        rows = [self._row_slots(program, r) for r in _list(raw["rows"])]
        _need(len(rows) == len(self.rows), "rows")
        total = self._row_slots(program, raw["total"])
        outputs = tuple(dict.fromkeys(k for r in [*rows, total] for k in r if k != NO_SLOT))
        return PassCode(program, rows, total, outputs)

    def _row_slots(self, program: Program, raw: object) -> tuple[int, ...]:
        slots = _list(raw)
        _need(len(slots) == _ROW_SLOTS, "row slots")
        out = tuple(NO_SLOT if s == NO_SLOT and i >= 4 else self._slot(program, s, "n") for i, s in enumerate(slots))
        _need((out[5] == NO_SLOT) == (out[6] == NO_SLOT) == (not self.sparse), "sparse slots")
        return out

    @staticmethod
    def _slot(program: Program, slot: object, kind: str) -> int:
        _need(isinstance(slot, int) and not isinstance(slot, bool)
              and 0 <= slot < program.n_inputs + len(program.code), "slot")
        assert isinstance(slot, int)
        _need(program.kind(slot) == kind, "slot type")
        return slot

    def _slots(self, program: Program, raw: object, kind: str) -> list[int]:
        return [self._slot(program, s, kind) for s in _list(raw)]

    def to_json(self) -> dict[str, Any]:
        return self.data

    # -- binding -----------------------------------------------------------------------------------
    def bind(self, batch: int | None = None, sets: Mapping[str, Any] | None = None) -> dict[str, int] | None:
        """Every dim's value at `--batch` / `--set` (as `Network.bind`), with every constraint and layer
        output size checked; None where `Network.bind` would raise or the programs cannot tell."""
        bindings = dict(sets or {})
        if batch is not None:
            if "B" in bindings or "B" not in self.defaults:
                return None
            bindings["B"] = batch
        values: dict[str, int] = {}
        for name, raw in bindings.items():
            if not isinstance(name, str) or self.defaults.get(name) is None:
                return None  # unknown or derived: the symbolic path names the problem
            value = _dim_value(raw)
            if value is None or not 0 < value < self.dim_bound:
                return None
            values[name] = value
        inputs = [values.get(n, self.defaults[n]) for n in self.free]
        try:
            slots = self.bind_program.run(inputs)  # type: ignore[arg-type]
            derived = {n: exact(slots[s], self.dim_bound) for n, s in zip(self.derived, self.derived_slots)}
        except _FAIL:
            return None
        if any(v < 1 for v in derived.values()) or not all(slots[s] is True for s in self.conditions):
            return None
        if any(type(slots[s]) is not int or slots[s] < 1 for s in self.sizes):
            return None
        return {n: derived[n] if n in derived else values.get(n, self.defaults[n]) for n in self.dims}  # type: ignore

    # -- evaluation --------------------------------------------------------------------------------
    def _inputs(self, values: Mapping[str, Any]) -> list[int] | None:
        if len(values) != len(self.dims):
            return None
        out = []
        for name in self.dims:
            value = values.get(name)
            if type(value) is not int:
                return None
            out.append(value)
        return out

    def report(self, pass_: Pass | str, values: Mapping[str, int]) -> Report | None:
        """`build_report(model, pass_, values)` for `values` = every dim's value by name (as `bind` gives);
        None where `build_report` would raise or the programs cannot give every value exactly."""
        pass_ = Pass.parse(pass_, "pass")
        inputs = self._inputs(values)
        code = self.passes.get(pass_.value)
        if inputs is None or code is None:
            return None
        try:
            s = code.program.run(inputs)
            bound = self.result_bound
            for k in code.outputs:  # every value a row shows: an int of at most MAX_RESULT_DIGITS digits
                v = s[k]
                if type(v) is not int or not -bound < v < bound:
                    s[k] = exact(v, bound)
            notes = self._notes(inputs, s[code.total[2]])
        except _FAIL:
            return None
        rows = self._rows(code, s)
        tc, cuda, params, _, _, dense, sparse = code.total
        total = {"tc_flops": s[tc], "cuda_flops": s[cuda], "total_flops": s[tc] + s[cuda], "params": s[params],
                 "share": 1.0, "matmul_engine": None, "kind": "model", "count": 1, "repeat": None}
        if self.sparse:
            total.update({"tc_flops_dense_equivalent": s[dense], "sparse_tc_flops": s[sparse]})
        whole = total["total_flops"]
        for row in rows:
            row.values["share"] = row.values["total_flops"] / whole if whole else None
        dims = {name: values[name] for name in self.dims}
        return Report(self.name, pass_, self.precision, dims,
                      Table(columns(self.sparse), rows, Row("", "total", 0, total)), notes)

    def _rows(self, code: PassCode, s: list) -> list[Row]:
        rows = []
        for info, (tc, cuda, params, count, repeat, dense, sparse) in zip(self.rows, code.rows):
            values = {"tc_flops": s[tc], "cuda_flops": s[cuda], "total_flops": s[tc] + s[cuda], "params": s[params],
                      "matmul_engine": info.engine, "kind": info.kind, "count": s[count],
                      "repeat": None if repeat == NO_SLOT else s[repeat]}
            if self.sparse:
                values.update({"tc_flops_dense_equivalent": s[dense], "sparse_tc_flops": s[sparse]})
                if s[sparse]:
                    values["matmul_engine"] = info.engine + " 2:4"
            rows.append(Row(info.name, info.label, info.depth, values))
        return rows

    def _notes(self, inputs: list[int], params: int) -> list[str]:
        """The report's notes: the layers' counting choices, the 2:4 notes, the active parameters."""
        notes = list(self.layer_notes)
        if not self.active and not self.sparse:
            return notes
        s = self.notes_program.run(inputs)
        if self.sparse:
            odd = []
            for label, slot in self.unpatterned:
                k = s[slot]
                if type(k) is int and k % 4:
                    odd.append(f"{label} (k={k})")
            notes += [SPARSE_NOTE, *unpatterned_note(odd)]
        unused = sum(exact(s[slot], self.result_bound) for _, slot in self.active)
        return notes + active_params_note(params, unused, [layer for layer, _ in self.active])

    def gemm_sizes(self, values: Mapping[str, int]) -> list[tuple[GemmDim, int | None]] | None:
        """Each Tensor-Core GEMM leading dim with its size (None where it is not an integer), in model
        order, for `costspec.analysis.alignment.flags`; None where the programs cannot tell."""
        inputs = self._inputs(values)
        if inputs is None:
            return None
        try:
            s = self.align_program.run(inputs)
        except _FAIL:
            return None
        return [(g, s[g.slot] if type(s[g.slot]) is int else None) for g in self.gemms]


def _dim_value(raw: Any) -> int | None:
    """A dim value as `costspec.core.dims.as_dim_value` accepts it (int or numpy integer; not a bool)."""
    if type(raw) is int:
        return raw
    if isinstance(raw, bool) or type(raw).__name__ == "bool_":
        return None
    try:
        return operator.index(raw)
    except TypeError:
        return None


def _need(condition: bool, what: str) -> None:
    if not condition:
        raise CompiledFormatError(f"not a compiled model: bad {what}")


def _text(value: object) -> str:
    _need(isinstance(value, str) and len(value) <= 100_000, "text")
    assert isinstance(value, str)
    return value


def _flag(value: object) -> bool:
    _need(isinstance(value, bool), "flag")
    return bool(value)


def _count(value: object, most: int) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= most, "count")
    assert isinstance(value, int)
    return value


def _positive(value: object) -> int:
    _need(isinstance(value, int) and not isinstance(value, bool) and value >= 1 and value.bit_length() <= 1400,
          "positive integer")
    assert isinstance(value, int)
    return value


def _list(value: object) -> Sequence[Any]:
    _need(isinstance(value, list) and len(value) <= 1_000_000, "list")
    assert isinstance(value, list)
    return value


__all__ = ["FORMAT", "PASSES", "CompiledFormatError", "CompiledModel", "GemmDim", "RowInfo"]
