"""Calibration files (written by `costspec ncu calibrate`) and the *executed*-FLOPs prediction
`costspec eval --calibration` and `costspec ncu compare --calibration` make with them.

The analytic model counts the FLOPs an op needs. The hardware executes a bit more (tiling and
epilogue work in GEMM kernels), some FLOPs the model has no term for (cuBLAS split-K reduces),
and a different number of FLOPs per element for pointwise ops (an activation's exp and divide
run as several FMAs). A calibration holds, per phase (forward, backward):

* epsilon[c] per matmul class c (gemm, conv, sdpa): executed FLOPs of the class's kernels =
  (1 + epsilon[c]) x its analytic matmul FLOPs. `cuda_share[c]` is the fraction of those
  executed FLOPs that ran on CUDA cores (epilogues) rather than Tensor Cores.
* rho: split-K reduce FLOPs per GEMM/conv output element (see `costspec.analysis.slots`).
* kappa[k] per cost-table kind k: executed FLOPs = (1 + kappa[k]) x the analytic FLOPs of k.
* fused: kinds that never ran as a kernel of their own (the bias add in the GEMM epilogue):
  their executed FLOPs are inside the matmul kernels, so epsilon already holds them; they add
  nothing on top.

    executed(slot) = sum_c (1 + eps_c) A_c + rho O + sum_{k in kappa} (1 + kappa_k) A_k
                     + sum_{k not calibrated, not fused} A_k

Kinds and classes without a coefficient keep their analytic FLOPs (listed as uncalibrated).
Coefficients are stored as floats and as exact fractions (`exact: p/q`), so a prediction at the
calibration's own dims reproduces the measured FLOPs exactly.

torch is not imported here.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Any, Mapping

import yaml

from costspec.core.errors import CostspecError, SpecError
from costspec.core.results import Column, Result, Row, Table
from costspec.core.safeio import CALIBRATION, MAX_FRACTION_DIGITS, check_number_text, finite_number, read_yaml
from costspec.core.vocab import Pass

if TYPE_CHECKING:
    from costspec.analysis.slots import SlotTerms
    from costspec.tree.network import Network

FORMAT_KEY = "costspec_calibration"
FORMAT_VERSION = 1
MAX_COEFFICIENT = 10**6  # |epsilon|, |rho|, |kappa|: fitted values are O(1) (kappa ~ 30 for a costly activation)


class CalibrationError(CostspecError):
    """A calibration file that cannot be read."""


# ----------------------------------------------------------------------------------------------
# Coefficients
# ----------------------------------------------------------------------------------------------
@dataclass
class PhaseCoefficients:
    """The fitted numbers of one phase, exact."""

    epsilon: dict[str, Fraction] = field(default_factory=dict)
    cuda_share: dict[str, Fraction] = field(default_factory=dict)
    rho: Fraction | None = None
    kappa: dict[str, Fraction] = field(default_factory=dict)
    fused: frozenset[str] = frozenset()


@dataclass
class Calibration:
    """A loaded calibration file: coefficients per phase plus what they were fitted on."""

    spec: str
    dims: dict[str, int]
    precision: str
    phases: dict[str, PhaseCoefficients]
    source: str = ""
    data: dict = field(default_factory=dict)


def exact(value: Fraction) -> str:
    """A fraction as text for the file: ``7/1024`` or ``3``."""
    return str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"


def _number(entry: Any, where: str) -> Fraction:
    """A coefficient: a number, `p/q` text, or {value: ..., exact: p/q} (exact wins); the digits
    are bounded before Fraction parses them (`1e99999999` is an error at once)."""
    if isinstance(entry, dict):
        if "exact" not in entry and "value" not in entry:
            raise CalibrationError(f"{where}: expected a number or {{value: ..., exact: p/q}}")
        entry = entry["exact"] if "exact" in entry else entry["value"]
    if isinstance(entry, bool) or not isinstance(entry, (int, float, str)):
        raise CalibrationError(f"{where}: expected a number or {{value: ..., exact: p/q}}")
    if isinstance(entry, float) and not math.isfinite(entry):
        raise CalibrationError(f"{where}: {entry} is not a finite number")
    text = str(entry).strip()
    parts = text.split("/")
    if len(parts) > 2:
        raise CalibrationError(f"{where}: {text[:40]!r} is not a number (expected a number or p/q)")
    for part in parts:
        check_number_text(part, f"{where}:", MAX_FRACTION_DIGITS)
    try:
        value = Fraction(text)
    except (ValueError, ZeroDivisionError):
        raise CalibrationError(f"{where}: {text[:40]!r} is not a number (expected a number or p/q)") from None
    if abs(value) > MAX_COEFFICIENT:  # executed FLOPs must stay within float range when printed
        raise CalibrationError(f"{where}: {text[:40]} is out of range for a coefficient "
                               f"(expected at most {MAX_COEFFICIENT:,} in magnitude)")
    return value


def _share(entry: Any, where: str) -> Fraction:
    value = _number(entry, where)
    if not 0 <= value <= 1:
        raise CalibrationError(f"{where}: {value} is not a share (expected a fraction between 0 and 1)")
    return value


def _names(value: Any, where: str, what: str) -> Mapping:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise CalibrationError(f"{where}: expected a mapping of {what}, got {type(value).__name__}")
    return value


def _at_least(value: Fraction, minimum: int, where: str, what: str) -> Fraction:
    """A coefficient that keeps executed work >= 0 (epsilon, kappa >= -1; rho >= 0)."""
    if value < minimum:
        raise CalibrationError(f"{where}: {exact(value)} predicts negative work ({what}; expected at least {minimum}: "
                               "a fit of non-negative counters never gives less)")
    return value


def _phase(data: Mapping, where: str) -> PhaseCoefficients:
    if not isinstance(data, Mapping):
        raise CalibrationError(f"{where}: expected a mapping")
    epsilon = _names(data.get("epsilon"), f"{where}.epsilon", "matmul classes")
    eps = {c: _at_least(_number(e, f"{where}.epsilon.{c}"), -1, f"{where}.epsilon.{c}",
                        "executed = (1 + epsilon) x analytic") for c, e in epsilon.items()}
    share = {c: _share(e.get("cuda_share", 0), f"{where}.epsilon.{c}.cuda_share")
             for c, e in epsilon.items() if isinstance(e, Mapping)}
    rho = (_at_least(_number(data["rho"], f"{where}.rho"), 0, f"{where}.rho", "split-K FLOPs = rho x GEMM outputs")
           if data.get("rho") is not None else None)
    kappa = {k: _at_least(_number(e, f"{where}.kappa.{k}"), -1, f"{where}.kappa.{k}",
                          "executed = (1 + kappa) x analytic")
             for k, e in _names(data.get("kappa"), f"{where}.kappa", "cost-table kinds").items()}
    fused = data.get("fused") or {}
    if not isinstance(fused, (Mapping, list)) or not all(isinstance(k, str) for k in fused):
        raise CalibrationError(f"{where}.fused: expected a mapping or list of cost-table kinds")
    return PhaseCoefficients(eps, share, rho, kappa, frozenset(fused))


def load_calibration(path: str | Path) -> Calibration:
    """Read a calibration YAML written by `costspec ncu calibrate`, with the bounds of every input
    (`costspec.core.safeio`: a regular file, at most 1 MB, plain YAML, bounded numbers)."""
    try:
        data = read_yaml(path, CALIBRATION).data
    except SpecError as exc:
        raise CalibrationError(str(exc)) from None
    return _calibration(data, str(path))


def loads_calibration(text: str, name: str) -> Calibration:
    """The calibration that `text` holds, checked exactly as `load_calibration` checks a file (the
    writer's check that it never writes a file its own reader refuses)."""
    from costspec.core.yaml_marks import load_marked

    encoded = text.encode("utf-8")
    if len(encoded) > CALIBRATION.max_bytes:
        raise CalibrationError(f"{name}: {len(encoded):,} bytes, over the limit for a calibration "
                               f"(expected at most {CALIBRATION.max_bytes:,} bytes)")
    try:
        data = load_marked(encoded, name, kind=CALIBRATION.name).data
    except SpecError as exc:
        raise CalibrationError(str(exc)) from None
    return _calibration(data, name)


def _calibration(data: Any, name: str) -> Calibration:
    if not isinstance(data, dict) or data.get(FORMAT_KEY) != FORMAT_VERSION:
        raise CalibrationError(f"{name}: not a costspec calibration file (expected `{FORMAT_KEY}: {FORMAT_VERSION}` "
                               "as written by `costspec ncu calibrate`)")
    dims = data.get("dims") or {}
    if not isinstance(dims, dict) or not all(isinstance(v, int) and not isinstance(v, bool) and v > 0
                                             for v in dims.values()):
        raise CalibrationError(f"{name}: dims: expected a mapping of dim names to positive integers")
    for key in ("spec", "precision"):
        if not isinstance(data.get(key, ""), str):
            raise CalibrationError(f"{name}: {key}: expected a string")
    phases = {p: _phase(data[p], f"{name}: {p}") for p in ("forward", "backward") if data.get(p)}
    if not phases:
        raise CalibrationError(f"{name}: no forward or backward coefficients")
    for phase in phases:
        outside = data[phase].get("outside_flops")
        if outside is not None and not (finite_number(outside) and outside >= 0):
            raise CalibrationError(f"{name}: {phase}.outside_flops: expected a number >= 0")
    return Calibration(str(data.get("spec", "")), dict(dims), str(data.get("precision", "")), phases, name, data)


def dump_calibration(data: dict) -> str:
    """YAML text of a calibration mapping (keys in the given order)."""
    return yaml.safe_dump(data, sort_keys=False, width=120, allow_unicode=True)


# ----------------------------------------------------------------------------------------------
# Prediction
# ----------------------------------------------------------------------------------------------
@dataclass
class Executed:
    """Predicted executed FLOPs of a slot or row, exact, with what had no coefficient."""

    tc: Fraction = Fraction(0)
    cuda: Fraction = Fraction(0)
    uncalibrated: set[str] = field(default_factory=set)

    @property
    def total(self) -> Fraction:
        return self.tc + self.cuda

    def __iadd__(self, other: "Executed") -> "Executed":
        self.tc += other.tc
        self.cuda += other.cuda
        self.uncalibrated |= other.uncalibrated
        return self


def executed_slot(terms: "SlotTerms", coeffs: PhaseCoefficients | None) -> Executed:
    """Executed FLOPs of one slot's analytic terms under one phase's coefficients (module docstring)."""
    out = Executed()
    coeffs = coeffs or PhaseCoefficients()
    for cls, flops in terms.matmul.items():
        if cls not in coeffs.epsilon:
            out.uncalibrated.add(f"epsilon[{cls}]")
        done = (1 + coeffs.epsilon.get(cls, Fraction(0))) * flops
        if terms.tensor_cores:
            share = coeffs.cuda_share.get(cls, Fraction(0))
            out.tc += done * (1 - share)
            out.cuda += done * share
        else:
            out.cuda += done
    if terms.gemm_outputs:
        if coeffs.rho is None:
            out.uncalibrated.add("rho")
        else:
            out.cuda += coeffs.rho * terms.gemm_outputs
    for kind, kind_flops in terms.pointwise_flops.items():
        if kind in coeffs.kappa:
            out.cuda += (1 + coeffs.kappa[kind]) * kind_flops
        elif kind in coeffs.fused:
            continue  # ran inside the matmul kernels: already in epsilon
        else:
            out.cuda += kind_flops
            out.uncalibrated.add(f"kappa[{kind}]")
    return out


EXECUTED_COLUMNS = (
    Column("analytic", "analytic total"),
    Column("executed_tc", "executed TC"),
    Column("executed_cuda", "executed CUDA"),
    Column("executed_total", "executed total"),
    Column("ratio", "executed/analytic", "ratio"),
)


@dataclass
class ExecutedReport:
    """`eval --calibration`: analytic and predicted executed FLOPs per row (all phases of the pass).
    Each row carries its `Executed` prediction as `row.executed`."""

    spec: str
    pass_: Pass
    dims: dict[str, int]
    calibration: Calibration
    table: Table
    notes: list[str]

    @property
    def rows(self) -> list[Row]:
        return self.table.rows

    @property
    def total(self) -> Row:
        assert self.table.total is not None
        return self.table.total


def executed_report(model: "Network", values: Mapping, pass_: Pass | str, calibration: Calibration) -> ExecutedReport:
    """Predict executed FLOPs per report row for `pass_` (forward, backward, train)."""
    from costspec.analysis.slots import analytic_slots, iter_phases, rows_layout, sum_slots

    pass_ = Pass.parse(pass_, "--pass")
    per_phase = []
    notes: list[str] = []
    for phase in iter_phases(pass_):
        if phase not in calibration.phases:
            notes.append(f"{calibration.source} has no {phase} coefficients: the {phase} pass is shown uncalibrated")
        slots = analytic_slots(model, values, phase)
        coeffs = calibration.phases.get(phase)
        per_phase.append((slots, {name: executed_slot(t, coeffs) for name, t in slots.items()}))

    def row(name: str, label: str, depth: int, names) -> Row:
        done, tc, cuda = Executed(), 0, 0
        for slots, executed in per_phase:
            terms = sum_slots(slots, names)
            tc, cuda = tc + terms.tc, cuda + terms.cuda
            for slot in names:
                if slot in executed:
                    done += executed[slot]
        analytic = tc + cuda
        ratio = (None if done.total == 0 else float("inf")) if analytic == 0 else float(done.total / analytic)
        return Row(name, label, depth, {"analytic": analytic, "analytic_tc": tc, "analytic_cuda": cuda,
                                        "executed_tc": done.tc, "executed_cuda": done.cuda,
                                        "executed_total": done.total, "ratio": ratio, "executed": done})

    rows = [row(r.name, r.label, r.depth, r.slots) for r in rows_layout(model)]
    every = set().union(*(set(slots) for slots, _ in per_phase))
    total = row("", "total", 0, every)
    for phase in iter_phases(pass_):
        outside = (calibration.data.get(phase) or {}).get("outside_flops")
        if outside:
            notes.append(f"{phase}: kernels outside the model ({outside:,} FLOPs at calibration, e.g. the loss) "
                         "are not predicted")
    uncalibrated = total.values["executed"].uncalibrated
    if uncalibrated:
        notes.append("uncalibrated (kept at their analytic FLOPs): " + ", ".join(sorted(uncalibrated)))
    if calibration.spec and calibration.spec != model.name:
        notes.append(f"the calibration was fitted on spec '{calibration.spec}', applied here to '{model.name}'")
    if calibration.precision and calibration.precision != str(model.precision):
        notes.append(f"the calibration was fitted at precision {calibration.precision}, this spec runs "
                     f"{model.precision}: kernels (and so coefficients) differ between precisions")
    dims = {str(k): int(v) for k, v in values.items()}
    table = Table(list(EXECUTED_COLUMNS), rows, total, "executed")
    notes.insert(0, f"EXECUTED FLOPs: calibrated with {calibration.source}")
    return ExecutedReport(model.name, pass_, dims, calibration, table, notes + [EXECUTED_NOTE])


EXECUTED_NOTE = ("executed = FLOPs the GPU is predicted to execute (hardware counters' convention), from the "
                 "calibration's epsilon (GEMM-kernel overhead), rho (split-K reduce FLOPs per GEMM output "
                 "element) and kappa (executed/analytic - 1 per pointwise kind); analytic = costspec's counting "
                 "convention, unchanged.")


def add_executed(result: Result, report: ExecutedReport, depth: int | None = None) -> Result:
    """`costspec eval` with a calibration: the executed table after the analytic one, and its notes."""
    table = report.table
    if depth is not None:
        table = Table(table.columns, [r for r in table.rows if r.depth < depth], table.total, table.title)
    result.tables[0].title = result.tables[0].title or "analytic"
    result.tables.append(table)
    result.notes.extend(report.notes)
    result.meta["executed"] = {"calibration": report.calibration.source, "pass": str(report.pass_)}
    return result
