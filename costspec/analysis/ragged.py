"""Ragged batches: the same sequences costed padded (B x max length) and packed (one run per sequence).

A batch of sequences of lengths s_1..s_B is usually padded to max(s): every layer then runs on
B*max(s) tokens and attention on B*max(s)^2 scores. Packed (nested / jagged) layouts run on the
sum of s_i tokens and sum of s_i^2 scores. costspec evaluates the padded layout at B = len(lengths),
S = max, and the packed layout as the sum of the model's exact costs at B = 1, S = s_i (equal
lengths evaluated once and multiplied), which is exact for every term, linear or quadratic in S.
The sequence dim must be a free dim of the spec (default S); a derived one (ViT's S from the image
size) cannot vary per sequence.
"""
from __future__ import annotations

from collections import Counter
from fractions import Fraction
from pathlib import Path
from typing import TYPE_CHECKING, Mapping, Sequence

import sympy

from costspec.analysis.evaluation import build_report
from costspec.core.errors import CostspecError, UsageError
from costspec.tree.walk import GradState, node_cost, walk

if TYPE_CHECKING:
    from costspec.tree.network import Network
from costspec.core.results import Column, Result, Row, Table

MAX_LENGTHS = 1_000_000
MAX_LENGTH_DIGITS = 19  # a sequence length below 2**63: longer text is refused before int() reads it


class LengthsError(CostspecError):
    """A --lengths value or --lengths-file line that is not a positive integer."""


def parse_lengths(text: str, where: str = "--lengths") -> list[int]:
    """`3,5,2` -> [3, 5, 2]."""
    out = []
    for i, item in enumerate(text.split(",")):
        out.append(_length(item, f"{where} item {i + 1}"))
    return _checked(out, where)


def read_lengths_file(path: str | Path) -> list[int]:
    """One length per line; blank lines and `#` comments are skipped. Read through the bounded reader
    (`costspec.core.safeio`: a regular file of at most 16 MiB; a FIFO or /dev/zero is an error at once)."""
    from costspec.core.safeio import LENGTHS, InputError, read_text

    try:
        text = read_text(path, LENGTHS)
    except InputError as exc:
        raise LengthsError(str(exc)) from None
    out = []
    for number, line in enumerate(text.splitlines(), 1):
        item = line.split("#", 1)[0].strip()
        if item:
            out.append(_length(item, f"{path}:{number}"))
            if len(out) > MAX_LENGTHS:
                raise LengthsError(f"{path}: more than {MAX_LENGTHS:,} lengths")
    return _checked(out, str(path))


def _length(item: str, where: str) -> int:
    text = item.strip().replace("_", "")
    if len(text) > MAX_LENGTH_DIGITS:
        raise LengthsError(f"{where}: {text[:20]}... is not a sequence length (a positive integer below 2**63)")
    try:
        value = int(text)
    except ValueError:
        raise LengthsError(f"{where}: {item.strip()!r} is not a sequence length (a positive integer)") from None
    if value < 1:
        raise LengthsError(f"{where}: sequence length {value} must be at least 1")
    return value


def _checked(lengths: list[int], where: str) -> list[int]:
    if not lengths:
        raise LengthsError(f"{where}: no sequence lengths given")
    if len(lengths) > MAX_LENGTHS:
        raise LengthsError(f"{where}: more than {MAX_LENGTHS:,} lengths")
    return lengths


def check_dims(model: Network, seq_dim: str, batch_dim: str, sets: Mapping[str, int]) -> None:
    """The sequence dim must be a free dim (not derived) other than the batch dim, the batch dim must exist,
    neither --set."""
    dims = model.dims.dims
    if seq_dim == batch_dim:
        raise UsageError(f"--seq-dim {seq_dim} is the batch dim: a ragged batch varies the sequence length per "
                         f"sequence, over {batch_dim} sequences (expected the spec's sequence dim, e.g. S)")
    for name, role in ((seq_dim, "sequence"), (batch_dim, "batch")):
        if name not in dims:
            raise UsageError(f"ragged batches need a {role} dim '{name}', which this spec does not define "
                             f"(dims: {', '.join(dims)}); name another with --seq-dim")
        if dims[name].definition is not None:
            raise UsageError(f"the {role} dim '{name}' is derived ({name} = {dims[name].definition}), so it cannot "
                             "differ per sequence; ragged batches need a free sequence dim")
        if name in sets:
            raise UsageError(f"--set {name} conflicts with --lengths, which sets {name} per sequence")


def _row_exprs(model: Network, pass_: str, fixed: Mapping, fusion: str, rows: bool = True
               ) -> list[tuple[sympy.Expr, sympy.Expr]]:
    """(FLOPs, bytes) of every report row, then of the model, as expressions of the batch and sequence
    dims only (derived dims written out, every other dim at its bound value)."""
    from costspec.analysis.roofline import total_bytes

    def bound(expr) -> sympy.Expr:
        return sympy.expand(model.dims.expand(sympy.sympify(expr)).xreplace(fixed))

    out = []
    for node, _, mult, grad in (walk(model.root) if rows else ()):
        out.append((bound(node_cost(node, pass_, mult, grad).flops),
                    bound(total_bytes(node, pass_, mult, grad, fusion))))
    root = GradState(False, False)
    one = sympy.Integer(1)
    out.append((bound(node_cost(model.root, pass_, one, root).flops), bound(total_bytes(model.root, pass_, one, root,
                                                                                         fusion))))
    return out


def _once(expr: sympy.Expr, b: sympy.Symbol, s: sympy.Symbol) -> sympy.Expr:
    """The part of `expr` that depends on neither the batch nor the sequence dim (weights read, a tied
    table's gradient sum): a packed launch pays it once, not once per sequence. Zero when `expr` is
    not a polynomial in them (then packed = the plain sum of per-sequence costs)."""
    if not expr.is_polynomial(b, s):
        return sympy.Integer(0)
    return expr.xreplace({b: 0, s: 0})


def _exact(value) -> int | Fraction:
    value = sympy.Rational(value)
    fraction = Fraction(int(value.p), int(value.q))
    return fraction.numerator if fraction.denominator == 1 else fraction


def _padded_packed(model: Network, lengths: list[int], pass_: str, sets: Mapping[str, int], seq_dim: str,
                   batch_dim: str, fusion: str, rows: bool = True) -> tuple[list[tuple], list[tuple]]:
    """(FLOPs, bytes) padded and packed, per report row (when `rows`) and for the model (last)."""
    check_dims(model, seq_dim, batch_dim, sets)
    longest, n = max(lengths), len(lengths)
    distinct = sorted(Counter(lengths).items())
    model.bind(sets={**sets, batch_dim: n, seq_dim: longest})  # the constraints hold at every binding used
    for length, _ in distinct:
        model.bind(sets={**sets, batch_dim: 1, seq_dim: length})
    symbols = model.dims.symbols
    b, s = symbols[batch_dim], symbols[seq_dim]
    fixed = {sym: v for sym, v in model.bind(sets=sets).items()
             if sym not in (b, s) and model.dims.dims[str(sym)].definition is None}
    padded, packed = [], []
    for flops, nbytes in _row_exprs(model, pass_, fixed, fusion, rows):
        padded.append(tuple(e.xreplace({b: n, s: longest}) for e in (flops, nbytes)))
        packed.append(tuple(sum((count * e.xreplace({b: 1, s: length}) for length, count in distinct), sympy.Integer(0))
                            - (n - 1) * _once(e, b, s) for e in (flops, nbytes)))
    return padded, packed


def ragged_totals(model: Network, lengths: list[int], pass_: str = "forward", sets: Mapping[str, int] | None = None,
                  seq_dim: str = "S", batch_dim: str = "B", fusion: str = "default") -> dict[str, int | Fraction]:
    """Model totals of `ragged` (for sweeps and reports): padded / packed / waste FLOPs and bytes."""
    padded, packed = _padded_packed(model, lengths, pass_, dict(sets or {}), seq_dim, batch_dim, fusion, rows=False)
    (pf, pb), (qf, qb) = padded[-1], packed[-1]
    return {"padded_flops": _exact(pf), "packed_flops": _exact(qf), "waste_flops": _exact(pf - qf),
            "padded_bytes": _exact(pb), "packed_bytes": _exact(qb), "waste_bytes": _exact(pb - qb)}


def ragged(model: Network, lengths: list[int], pass_: str = "forward", sets: Mapping[str, int] | None = None,
           seq_dim: str = "S", batch_dim: str = "B", fusion: str = "default", depth: int | None = None) -> Result:
    """Padded vs packed costs of a batch of sequences of `lengths`, per layer (the top `depth` levels
    of the tree when given), with the waste."""
    sets = dict(sets or {})
    padded, packed = _padded_packed(model, lengths, pass_, sets, seq_dim, batch_dim, fusion)
    longest = max(lengths)
    report_rows = build_report(model, pass_, model.bind(sets={**sets, batch_dim: 1, seq_dim: longest})).rows
    rows, total = [], None
    for i, ((pf, pb), (qf, qb)) in enumerate(zip(padded, packed)):
        pf, qf = _exact(pf), _exact(qf)
        values = {"padded_flops": pf, "packed_flops": qf, "waste_flops": pf - qf,
                  "waste_flops_share": Fraction(pf - qf, pf) if pf else None,
                  "padded_bytes": _exact(pb), "packed_bytes": _exact(qb), "waste_bytes": _exact(pb - qb)}
        if i < len(report_rows):
            r = report_rows[i]
            if depth is None or r.depth < depth:
                rows.append(Row(r.name, r.label + (f" x{r.count}" if r.count > 1 else ""), r.depth, values))
        else:
            total = Row("", "total", 0, values)
    columns = [Column("padded_flops", "padded FLOPs", "flops"), Column("packed_flops", "packed FLOPs", "flops"),
               Column("waste_flops", "waste FLOPs", "flops"), Column("waste_flops_share", "waste", "percent"),
               Column("padded_bytes", "padded bytes", "bytes"), Column("packed_bytes", "packed bytes", "bytes"),
               Column("waste_bytes", "waste bytes", "bytes")]
    tokens_padded, tokens_packed = len(lengths) * longest, sum(lengths)
    squares_padded, squares_packed = len(lengths) * longest ** 2, sum(s * s for s in lengths)
    meta = {"spec": model.name, "pass": pass_, "lengths": len(lengths), "seq_dim": seq_dim, "batch_dim": batch_dim,
            "tokens_padded": tokens_padded, "tokens_packed": tokens_packed,
            "s2_padded": squares_padded, "s2_packed": squares_packed}
    shown = ",".join(map(str, lengths)) if len(lengths) <= 16 else f"{len(lengths)} sequences"
    header = (f"{model.name} | ragged batch {shown} | pass: {pass_} | padded: {batch_dim}={len(lengths)} "
              f"{seq_dim}={longest}; packed: sum over sequences of {batch_dim}=1 {seq_dim}=s_i")
    notes = [f"tokens: padded {batch_dim} x max = {tokens_padded:,}, packed sum s_i = {tokens_packed:,} "
             f"({100 * (tokens_padded - tokens_packed) / tokens_padded:.1f}% of the padded tokens are padding)",
             f"S^2 terms (attention scores): padded {batch_dim} x max^2 = {squares_padded:,}, packed sum s_i^2 = "
             f"{squares_packed:,} (ratio {squares_padded / squares_packed:.4g})",
             f"packed = the exact sum of per-sequence costs ({batch_dim}=1, {seq_dim}=s_i), less the work that depends "
             f"on neither {batch_dim} nor {seq_dim} (weights read, a tied table's gradient sum) counted once, as one "
             "launch over the packed buffer pays it; bytes follow the roofline's traffic model at the spec's dtype"]
    return Result(header, [Table(columns, rows, total)], notes=notes, meta=meta)


MAX_SWEEP_POINTS = 4096  # each point evaluates the model at every distinct length


def ragged_sweep_csv(model: Network, varies: Sequence[tuple[str, Sequence[int]]], lengths: list[int],
                     pass_: str = "forward",
                     sets: Mapping[str, int] | None = None, seq_dim: str = "S", batch_dim: str = "B",
                     fusion: str = "default") -> tuple[int, str]:
    """`ragged_totals` at every point of the --vary grid, as CSV: (rows, text)."""
    import itertools

    names = [name for name, _ in varies]
    for name in names:
        if name in (seq_dim, batch_dim):
            raise UsageError(f"--vary {name}: --lengths sets {batch_dim} and {seq_dim}; vary other dims")
    points = 1
    for _, values in varies:
        points *= len(values)
    if points > MAX_SWEEP_POINTS:
        raise UsageError(f"--lengths sweeps evaluate every point exactly: {points:,} points is more than "
                         f"{MAX_SWEEP_POINTS:,}; narrow --vary")
    keys = ["padded_flops", "packed_flops", "waste_flops", "padded_bytes", "packed_bytes", "waste_bytes"]
    lines = [",".join(names + keys)]
    for combo in itertools.product(*(values for _, values in varies)):
        totals = ragged_totals(model, lengths, pass_, {**(sets or {}), **dict(zip(names, combo))}, seq_dim,
                               batch_dim, fusion)
        lines.append(",".join([str(v) for v in combo] + [str(totals[k]) if isinstance(totals[k], int)
                                                          else str(float(totals[k])) for k in keys]))
    return points, "\n".join(lines)
