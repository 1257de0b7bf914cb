"""`Model`: a loaded spec with its model tree; symbolic costs and their evaluation."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator, Mapping

import sympy

from .conventions import Precision
from .cost import ZERO_COST, Cost
from .cost_table import flops_per_element
from .dims import Dims, parse_dims
from .errors import ExpressionError, SpecError
from .expr import as_exact_int
from .ops.base import Constraint, OpDef, layer_notes
from .spec.load import parse_spec, read_spec
from .spec.yaml_marks import MarkedDoc
from .tree import GroupNode, Node, OpNode, RepeatNode, ResidualNode, TreeBuilder

PASSES = ("forward", "backward", "train")


@dataclass(frozen=True)
class Row:
    """One report row: a node's total contribution to the model for one pass (exact integers)."""

    name: str
    label: str
    depth: int
    kind: str  # scope | repeat | group | op | part
    count: int  # instances of this node in the model
    tc: int
    cuda: int
    params: int
    engine: str  # where matmul-class FLOPs of this row go: TC, CUDA, mixed, or "" (none)
    repeat: int | None = None  # for a repeat row: its repeat count

    @property
    def total(self) -> int:
        return self.tc + self.cuda


@dataclass
class Report:
    """Evaluated costs of a model for one pass at bound dims."""

    spec_name: str
    pass_: str
    precision: str
    dims: dict[str, int]
    rows: list[Row]
    tc: int
    cuda: int
    params: int
    notes: list[str] = field(default_factory=list)

    @property
    def total(self) -> int:
        return self.tc + self.cuda


class Model:
    """A loaded, checked spec. Build with `costspec.load(path)`."""

    def __init__(self, doc: MarkedDoc):
        self.doc = doc
        data = doc.data
        self.name: str = data["name"]
        self.doc_line: str = data.get("doc", "")
        self.source = data.get("source")
        self.dims: Dims = parse_dims(data.get("dims"), doc.locate)
        self.precision = Precision(data.get("precision", {}).get("dtype", "bf16"))
        self.table = flops_per_element(data.get("costs"), doc.locate(("costs",)))
        builder = TreeBuilder(data, doc.locate, self.dims, self.table)
        self.root, self.out_shape = builder.build(self.precision)
        self.in_shape = tuple(self.dims.canonical(parse) for parse in self._input_shape())
        self.constraints: list[Constraint] = builder.constraints
        self.check_values(self.dims.values())  # the defaults must give a consistent model

    def _input_shape(self):
        from .expr import parse_expr

        return [parse_expr(v, self.dims.symbols, self.doc.locate(("input", i)))
                for i, v in enumerate(self.doc.data["input"])]

    # -- symbolic ---------------------------------------------------------------------------
    def cost(self, pass_: str = "forward") -> Cost:
        """Symbolic cost of the whole model for `pass_` (forward, backward or train)."""
        return node_cost(self.root, pass_, 1, GradState(False, False))

    def op_nodes(self) -> Iterator[OpNode]:
        return self.root.op_nodes()

    def walk(self) -> Iterator[tuple[Node, int, sympy.Expr, "GradState"]]:
        """(node, depth, instances in the model, input-requires-grad state), pre-order;
        transparent nodes (residuals, unnamed sequences) are skipped, their children kept."""
        yield from _walk(self.root, 0, sympy.Integer(1), GradState(False, False))

    # -- binding ----------------------------------------------------------------------------
    def bind(self, batch: int | None = None, sets: Mapping[str, int] | None = None) -> dict[sympy.Symbol, sympy.Integer]:
        """Dim values for `--batch` (binds B) and `--set NAME=VALUE`, checked against the constraints."""
        bindings = dict(sets or {})
        if batch is not None and "B" in bindings:
            from .errors import UsageError

            raise UsageError(f"--batch {batch} and --set B={bindings['B']} both bind B; give one")
        if batch is not None:
            from .dims import as_dim_value

            batch = as_dim_value("B", batch, "--batch")
            if "B" not in self.dims.dims:
                from .errors import UsageError

                raise UsageError("--batch binds the dim B, which this spec does not define")
            bindings["B"] = batch
        values = self.dims.values(bindings)
        self.check_values(values)
        return values

    def check_values(self, values: Mapping[sympy.Symbol, sympy.Integer]) -> None:
        problems = self.problems(values)
        if problems:
            raise problems[0]

    def problems(self, values: Mapping[sympy.Symbol, sympy.Integer]) -> list[SpecError]:
        """Every violated constraint and non-integer / non-positive shape at these dim values."""
        out: list[SpecError] = []
        for c in self.constraints:
            try:
                shown = {k: sympy.sympify(v).xreplace(values) for k, v in c.values.items()}
                holds = c.condition.xreplace(values) is sympy.true
            except (ZeroDivisionError, TypeError):  # Mod(C, heads) at heads = 0; a comparison with zoo (x/0)
                out.append(SpecError("a size in this layer's expressions is 0 (division or modulo by zero) at these "
                                     "dims", c.where, "positive sizes"))
                continue
            if not holds:
                out.append(SpecError(c.message.format(**shown), c.where, c.expected))
        for node in self.op_nodes():
            for i, size in enumerate(node.out_shape):
                try:
                    value = sympy.sympify(size).xreplace(values)
                except ZeroDivisionError:
                    value = "a division or modulo by zero"
                if isinstance(value, sympy.Basic) and value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
                    value = "a division or modulo by zero"
                if not (isinstance(value, sympy.Basic) and value.is_Integer and value >= 1):
                    out.append(SpecError(f"{node.op.name} '{node.name}' gives output dim {i} = {size} = {value}",
                                         node.loc, "a positive integer size (check divisibility)"))
                    break
        return out

    def evaluate(self, pass_: str = "forward", **dims: int) -> Report:
        """Exact integer costs at the given dims (the rest at their defaults)."""
        return self.report(pass_, self.bind(sets=dims))

    def report(self, pass_: str, values: Mapping[sympy.Symbol, sympy.Integer]) -> Report:
        """Rows and totals for `pass_` at bound dim `values`."""
        if pass_ not in PASSES:
            raise ValueError(f"pass must be one of {PASSES}, got {pass_!r}")
        rows = []
        for node, depth, mult, in_rg in self.walk():
            cost = node_cost(node, pass_, mult, in_rg)
            rows.append(Row(node.name, node.label, depth, node.kind, _int(mult, values, node),
                            _int(cost.tc, values, node), _int(cost.cuda, values, node),
                            _int(cost.params, values, node), _engine(node),
                            _int(node.times, values, node) if isinstance(node, RepeatNode) else None))
        total = self.cost(pass_)
        dims = {str(s): int(v) for s, v in values.items()}
        return Report(self.name, pass_, str(self.precision), dims, rows, _int(total.tc, values, self.root),
                      _int(total.cuda, values, self.root), _int(total.params, values, self.root),
                      layer_notes(self.op_nodes()))

    def latex(self, keep=None, pass_: str = "forward", standalone: bool = False, **kwargs) -> str:
        """The closed forms as a LaTeX `align` (see `costspec latex`)."""
        from .export.latex import render_latex
        from .formula import formulas

        return render_latex(formulas(self, pass_, keep, **kwargs), standalone=standalone)

    def to_torch(self, **dims: int):
        """A torch nn.Module built from this spec, and a function making a correctly shaped input."""
        from .torch_build import build_module

        return build_module(self, self.bind(sets=dims))


@dataclass(frozen=True)
class GradState:
    """Whether a node's input requires grad at its first instance in the model, and at the others.

    They differ inside a repeat whose input needs no gradient: its first instance sees none, the
    later ones see one only if an earlier instance had parameters.
    """

    first: bool
    rest: bool

    def then(self, makes_grad: bool) -> "GradState":
        """The state after a node that has (or has not) parameters."""
        return GradState(self.first or makes_grad, self.rest or makes_grad)


def node_cost(node: Node, pass_: str, mult: sympy.Expr, grad: "GradState | bool") -> Cost:
    """Total cost of all `mult` instances of `node`, whose inputs require grad as `grad` says
    (a bool: the first instance's state; later ones then need grad)."""
    grad = grad if isinstance(grad, GradState) else GradState(grad, True)
    if pass_ == "forward":
        return node.forward().scaled(mult)
    if pass_ == "backward":
        first = node.backward(grad.first)
        return first + node.backward(grad.rest).scaled(mult - 1) if mult != 1 else first
    return node_cost(node, "forward", mult, grad) + node_cost(node, "backward", mult, grad).without_params()


def _walk(node: Node, depth: int, mult: sympy.Expr, grad: GradState):
    state = grad
    for child in node.children:
        if isinstance(node, ResidualNode) and child is node.children[-1]:
            state = grad  # the residual add's gradient sum exists iff the residual's input needs grad
        child_mult = mult * child.count
        if child.transparent:
            yield from _walk(child, depth, child_mult, state)
        elif isinstance(child, RepeatNode):
            yield child, depth, child_mult, state
            first = child.first_group()
            later = state.then(first.makes_grad)  # instances after the repeat's very first one
            for group in child.children:
                group_state = GradState(state.first, later.rest) if group is first else GradState(later.first,
                                                                                                   later.rest)
                if child.grouped:
                    yield group, depth + 1, child_mult * group.count, group_state
                    yield from _walk(group, depth + 2, child_mult * group.count, group_state)
                else:
                    yield from _walk(group, depth + 1, child_mult * group.count, group_state)
        else:
            yield child, depth, child_mult, state
            yield from _walk(child, depth + 1, child_mult, state)
        state = state.then(child.makes_grad)


def _engine(node: Node) -> str:
    engines = {op.precision.engine + f"({op.precision.dtype})" for op in node.op_nodes()
               if op.forward().matmul} if not hasattr(node, "owner") else (
        {node.owner.precision.engine + f"({node.owner.precision.dtype})"} if node.forward().matmul else set())
    if isinstance(node, OpNode) and node.forward().matmul:
        engines = {node.precision.engine + f"({node.precision.dtype})"}
    return "mixed" if len(engines) > 1 else next(iter(engines), "")


def _int(expr, values, node: Node) -> int:
    try:
        value = sympy.sympify(expr).xreplace(values)
    except (ZeroDivisionError, TypeError):
        value = sympy.nan
    if value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
        raise SpecError(f"cost of '{node.name or 'model'}' divides by zero at these dims", node.loc, "positive sizes")
    try:
        return as_exact_int(value, f"cost of '{node.name or 'model'}'", node.loc)
    except ExpressionError as exc:
        raise SpecError(f"cost of '{node.name or 'model'}' is not an exact integer: {exc.message}", node.loc,
                        "sizes that divide evenly") from None


def load(path: str | Path) -> Model:
    """Load, validate and build a spec file."""
    import os

    if not isinstance(path, (str, os.PathLike)):
        from .errors import UsageError

        raise UsageError(f"costspec.load needs a file path (str or pathlib.Path), got {type(path).__name__}; "
                         "use costspec.loads for spec text")
    return Model(read_spec(path))


def loads(text: str, file: str = "<spec>") -> Model:
    """Load a spec from text (for tests and notebooks)."""
    if not isinstance(text, (str, bytes)):
        from .errors import UsageError

        raise UsageError(f"costspec.loads needs the spec text (str or bytes), got {type(text).__name__}")
    return Model(parse_spec(text, file))
