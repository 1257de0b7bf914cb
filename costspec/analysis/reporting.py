"""The evaluated report's types and wording, without sympy: `Report`, its columns, and the notes whose
text depends on evaluated numbers.

Both evaluators fill these: the symbolic one (`costspec.analysis.evaluation.build_report`, the
reference) and the compiled one (`costspec.analysis.compiled`, what `Model.evaluate` and a warm
`costspec eval` run). Keeping the row layout and every sentence here makes their output the same
by construction; the tests compare them value by value.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from costspec.core.results import Column, Row, Table
from costspec.core.vocab import Pass

COLUMNS = (
    Column("tc_flops", "TC FLOPs", "flops"),
    Column("cuda_flops", "CUDA FLOPs", "flops"),
    Column("total_flops", "total", "flops"),
    Column("params", "params", "params"),
    Column("share", "share", "percent"),
    Column("matmul_engine", "matmul on", "text"),
    Column("kind", "kind", "text", hidden=True),
    Column("count", "count", "count", hidden=True),
    Column("repeat", "repeat", "count", hidden=True),
)
# Added after tc_flops when a layer runs 2:4 sparse: `tc_flops` is then what the Tensor Cores execute.
SPARSE_COLUMNS = (
    Column("tc_flops", "TC executed", "flops"),
    Column("tc_flops_dense_equivalent", "TC dense-eq.", "flops"),
    Column("sparse_tc_flops", "on sparse TC", "flops", hidden=True),
)
SPARSE_NOTE = ("2:4 sparse layers: 'TC executed' counts the forward weight GEMMs at half their dense FLOPs (the "
               "Sparse Tensor Cores skip the pruned zeros); 'TC dense-eq.' counts them dense, as FlopCounterMode "
               "and dense FLOP counts do; backward GEMMs, attention's QK^T / AV and pointwise work run dense "
               "(docs/conventions.md#24-structured-sparsity)")


@dataclass
class Report:
    """Evaluated costs of a model for one pass at bound dims: one table row per report row."""

    spec_name: str
    pass_: Pass
    precision: str
    dims: dict[str, int]
    table: Table
    notes: list[str] = field(default_factory=list)

    @property
    def rows(self) -> list[Row]:
        return self.table.rows

    def __repr__(self) -> str:
        from costspec.core import units

        dims = " ".join(f"{k}={v}" for k, v in self.dims.items())
        return (f"<costspec.Report {self.spec_name} {self.pass_} ({self.precision}, {dims}): "
                f"{units.si(self.tc)} TC + {units.si(self.cuda)} CUDA-core, {units.params(self.params)} params, "
                f"{len(self.rows)} rows>")

    def _repr_html_(self) -> str:
        """The per-layer table, as a notebook shows it."""
        from html import escape

        from costspec.core.render import cell

        shown = [c for c in self.table.columns if not c.hidden]
        head = "".join(f"<th>{escape(c.title)}</th>" for c in shown)
        body = []
        for row in self.table.all_rows():
            label = escape(row.label) if row is not self.table.total else "<b>total</b>"
            cells = "".join(f'<td style="text-align:right">{escape(cell(c, row.get(c.key)))}</td>' for c in shown)
            body.append(f'<tr><td style="text-align:left;padding-left:{row.depth * 1.2:g}em">{label}</td>{cells}</tr>')
        caption = escape(repr(self)[1:-1])
        return (f"<table><caption>{caption}</caption><thead><tr><th>layer</th>{head}</tr></thead>"
                f"<tbody>{''.join(body)}</tbody></table>")

    def _total(self, key: str) -> int:
        assert self.table.total is not None
        return int(self.table.total.values[key])

    @property
    def tc(self) -> int:
        return self._total("tc_flops")

    @property
    def cuda(self) -> int:
        return self._total("cuda_flops")

    @property
    def params(self) -> int:
        return self._total("params")

    @property
    def total(self) -> int:
        return self.tc + self.cuda

    @property
    def sparse(self) -> bool:
        """True when some layer runs 2:4 sparse (the table has the dense-equivalent column)."""
        return "tc_flops_dense_equivalent" in self.table.keys()

    @property
    def sparse_tc(self) -> int:
        """Executed FLOPs on Sparse Tensor Cores (0 for a dense model)."""
        return self._total("sparse_tc_flops") if self.sparse else 0

    @property
    def tc_dense(self) -> int:
        """Tensor-Core FLOPs with 2:4 GEMMs counted dense (= tc for a dense model)."""
        return self._total("tc_flops_dense_equivalent") if self.sparse else self.tc


def columns(sparse: bool) -> list[Column]:
    """The report's columns: with the executed / dense-equivalent Tensor-Core pair when a layer runs 2:4."""
    if not sparse:
        return list(COLUMNS)
    return [SPARSE_COLUMNS[0], *SPARSE_COLUMNS[1:], *COLUMNS[1:]]


def active_params_note(total: int, unused: int, layers: list[str]) -> list[str]:
    """The model's parameters one token uses, where the layers `layers` use fewer than all of theirs
    (`unused` of the `total` parameters sit in experts a token does not visit)."""
    if not layers:
        return []
    share = (total - unused) / total if total else 0.0
    return [f"active parameters per token: {total - unused:,} of {total:,} ({share:.1%}): every parameter outside "
            f"{', '.join(layers)}, and there the router, top_k experts and shared experts"]


def unpatterned_note(odd: list[str]) -> list[str]:
    """A note naming the 2:4 GEMMs (`layer.part (k=...)`) whose reduction dim is not a multiple of 4."""
    if not odd:
        return []
    return ["2:4 GEMMs whose reduction dim k is not a multiple of 4, the pattern's group: " + ", ".join(
        dict.fromkeys(odd)) + "; they are still charged half their dense FLOPs (a sparse kernel pads k up to a "
        "multiple of 4 and executes a little more)"]


__all__ = ["COLUMNS", "SPARSE_COLUMNS", "SPARSE_NOTE", "Report", "active_params_note", "columns",
           "unpatterned_note"]
