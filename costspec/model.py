"""`Model`: the public facade over a loaded spec. It holds the model tree and the dims, and forwards
every question to the module that answers it (costs: `walk` / `evaluation`; formulas: `formula`;
torch: `torch_build`). Nothing in the package below the CLI imports this module at run time.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import sympy

from costspec.core.conventions import Precision
from costspec.tree.cost import Cost
from costspec.core.cost_table import flops_per_element
from costspec.core.dims import Dims, parse_dims
from costspec.core.errors import SpecError, UsageError
from costspec.analysis.evaluation import Report, build_report
from costspec.core.expr import parse_expr
from costspec.ops.base import Constraint
from costspec.spec.load import parse_spec, read_bounded, read_spec, schema_problems
from costspec.core.yaml_marks import MarkedDoc, load_marked
from costspec.tree.build import Node, OpNode, TreeBuilder
from costspec.core.vocab import Pass
from costspec.tree.walk import NO_GRAD, Step, node_cost, walk

class Model:
    """A loaded, checked spec. Build with `costspec.load(path)`."""

    def __init__(self, doc: MarkedDoc, collect: list[SpecError] | None = None, dtype: str | None = None):
        """Build the model tree of a validated spec document. With `collect`, problems that do not stop
        the build (violated constraints at the default dims, layers after a bad one) are appended to it
        instead of raising the first. `dtype` (--dtype) replaces the spec's default precision; layers
        with their own `precision:` keep it."""
        self.doc = doc
        data: Any = doc.data
        if dtype is not None:
            spec_precision = data.get("precision", {})
            if not Precision(Precision.parse(dtype)).tensor_cores and spec_precision.get("sparsity", "none") != "none":
                raise UsageError(f"--dtype {dtype} runs matmuls on CUDA cores, and this spec's precision has sparsity "
                                 f"{spec_precision['sparsity']} (Sparse Tensor Cores): choose a Tensor-Core dtype")
            data = {**data, "precision": {**spec_precision, "dtype": Precision.parse(dtype)}}
        self.name: str = data["name"]
        self.doc_line: str = data.get("doc", "")
        self.source = data.get("source")
        self.dims: Dims = parse_dims(data.get("dims"), doc.locate)
        self.precision = Precision.of_spec(data.get("precision", {}), Precision(), doc.locate(("precision",)))
        self.table = flops_per_element(data.get("costs"), doc.locate(("costs",)))
        builder = TreeBuilder(data, doc.locate, self.dims, self.table, collect)
        self.root, self.out_shape = builder.build(self.precision)
        self.in_shape = tuple(self.dims.canonical(parse_expr(v, self.dims.symbols, doc.locate(("input", i))))
                              for i, v in enumerate(data["input"]))
        self.constraints: list[Constraint] = builder.constraints
        problems = self.problems(self.dims.values())  # the defaults must give a consistent model
        if collect is not None:
            collect.extend(problems)
        elif problems:
            raise problems[0]

    # -- symbolic ---------------------------------------------------------------------------
    def cost(self, pass_: Pass | str = Pass.FORWARD) -> Cost:
        """Symbolic cost of the whole model for `pass_` (forward, backward or train)."""
        return node_cost(self.root, Pass.parse(pass_, "pass"), sympy.Integer(1), NO_GRAD)

    def op_nodes(self) -> Iterator[OpNode]:
        return self.root.op_nodes()

    def walk(self) -> Iterator[Step]:
        """The report rows: (node, depth, instances in the model, grad state), pre-order (`costspec.tree.walk`)."""
        return walk(self.root)

    # -- binding ----------------------------------------------------------------------------
    def bind(self, batch: int | None = None,
             sets: Mapping[str, int] | None = None) -> dict[sympy.Symbol, sympy.Integer]:
        """Dim values for `--batch` (binds B) and `--set NAME=VALUE`, checked against the constraints."""
        bindings = dict(sets or {})
        if batch is not None and "B" in bindings:
            raise UsageError(f"--batch {batch} and --set B={bindings['B']} both bind B; give one")
        if batch is not None:
            from costspec.core.dims import as_dim_value

            batch = as_dim_value("B", batch, "--batch")
            if "B" not in self.dims.dims:
                raise UsageError("--batch binds the dim B, which this spec does not define")
            bindings["B"] = batch
        values = self.dims.values(bindings)
        problems = self.problems(values)
        if problems:
            raise problems[0]
        return values

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
                    value: Any = sympy.sympify(size).xreplace(values)
                except ZeroDivisionError:
                    value = "a division or modulo by zero"
                if isinstance(value, sympy.Basic) and value.has(sympy.zoo, sympy.nan, sympy.oo, -sympy.oo):
                    value = "a division or modulo by zero"
                if not (isinstance(value, sympy.Basic) and value.is_Integer and value >= 1):
                    out.append(SpecError(f"{node.op.name} '{node.name}' gives output dim {i} = {size} = {value}",
                                         node.loc, "a positive integer size (check divisibility)"))
                    break
        return out

    # -- numbers ----------------------------------------------------------------------------
    def evaluate(self, pass_: Pass | str = Pass.FORWARD, **dims: int) -> Report:
        """Exact integer costs at the given dims (the rest at their defaults)."""
        return self.report(pass_, self.bind(sets=dims))

    def report(self, pass_: Pass | str, values: Mapping[sympy.Symbol, sympy.Integer]) -> Report:
        """Rows and totals for `pass_` at bound dim `values` (`costspec.analysis.evaluation.build_report`)."""
        return build_report(self, Pass.parse(pass_, "pass"), values)

    def with_precision(self, dtype: str) -> "Model":
        """The same spec with its default dtype replaced (layers with their own `precision:` keep it)."""
        return Model(self.doc, dtype=dtype)

    def latex(self, keep=None, pass_: Pass | str = Pass.FORWARD, standalone: bool = False, **kwargs) -> str:
        """The closed forms as a LaTeX `align` (see `costspec latex`)."""
        from costspec.export.latex import render_latex
        from costspec.analysis.formula import formulas

        return render_latex(formulas(self, Pass.parse(pass_, "pass"), keep, **kwargs), standalone=standalone)

    def to_torch(self, **dims: int):
        """A torch nn.Module built from this spec, and a function making a correctly shaped input."""
        from costspec.runtime.torch_build import build_module

        return build_module(self, self.bind(sets=dims))

    def node(self, name: str) -> Node:
        """The tree node of report row `name`."""
        for step in self.walk():
            if step.node.name == name:
                return step.node
        raise KeyError(name)


def load(path: str | Path, dtype: str | None = None) -> Model:
    """Load, validate and build a spec file (or a zoo spec by name, e.g. "vit_b", when no such file
    exists); `dtype` overrides the spec's default precision."""
    import os

    from costspec.core.zoo import resolve

    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"costspec.load needs a file path (str or pathlib.Path), got {type(path).__name__}; "
                         "use costspec.loads for spec text")
    return Model(read_spec(resolve(path)), dtype=dtype)


def loads(text: str, file: str = "<spec>") -> Model:
    """Load a spec from text (for tests and notebooks)."""
    if not isinstance(text, (str, bytes)):
        raise UsageError(f"costspec.loads needs the spec text (str or bytes), got {type(text).__name__}")
    return Model(parse_spec(text, file))


def check_file(path: str) -> list[SpecError]:
    """Every problem `costspec check` finds in `path`: all schema problems; if the schema passes, the
    semantic problems (dims, blocks, shapes: layers after a bad one are still checked, their problems
    marked as possibly following from it) and every violated constraint at the dims' defaults."""
    try:
        doc = load_marked(read_bounded(path), path)
    except SpecError as exc:
        return [exc]
    problems = list(schema_problems(doc))
    if problems:
        return problems
    found: list[SpecError] = []
    try:
        Model(doc, collect=found)
    except SpecError as exc:
        found.append(exc)
    unique: dict[str, SpecError] = {}
    for problem in found:
        unique.setdefault(str(problem), problem)
    return list(unique.values())


__all__ = ["Model", "Report", "check_file", "load", "loads"]
