"""`Network`: a validated spec built into its tree, with its dims, precision, cost table and the
constraints its shapes need. Every layer above `tree` takes this type; the public facade
`costspec.model.Model` extends it with the conveniences of the API (evaluate, latex, to_torch).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Iterator, Mapping

import sympy

from costspec.core.conventions import Precision
from costspec.core.cost_table import flops_per_element
from costspec.core.dims import API_WORDS, Dims, Wording, as_dim_value, parse_dims
from costspec.core.errors import SpecError, UsageError
from costspec.core.vocab import Pass
from costspec.core.yaml_marks import MarkedDoc
from costspec.core.zoo import resolve
from costspec.ops.opdef import Constraint
from costspec.spec.load import read_spec
from costspec.tree.build import TreeBuilder
from costspec.tree.cost import Cost
from costspec.tree.nodes import Node, OpNode
from costspec.tree.walk import NO_GRAD, Step, node_cost, walk


class Network:
    """A loaded, checked spec: the model tree and everything needed to cost it at bound dims."""

    # a serving phase's rewrite of a spec (an encoder-decoder's decode step drops the encoder): the network
    # it was served from, whose weights stay loaded on the device; None for a spec as written
    unserved: Network | None = None

    def __init__(self, doc: MarkedDoc, collect: list[SpecError] | None = None, dtype: str | None = None,
                 reported: frozenset[tuple] = frozenset()):
        """Build the model tree of a validated spec document. With `collect`, problems that do not stop
        the build (a bad input size, violated constraints at the default dims, layers after a bad one) are
        appended to it instead of raising the first; `reported` names layers whose problems are already
        reported (the schema check's, on a document repaired to be built), whose own failures are not.
        `dtype` (--dtype) replaces the spec's default precision; layers with their own `precision:` keep it."""
        self.doc = doc
        data: Any = doc.data
        if dtype is not None:
            spec_precision = data.get("precision", {})
            if not Precision(Precision.parse(dtype)).tensor_cores and spec_precision.get("sparsity", "none") != "none":
                raise UsageError(f"--dtype {dtype} runs matmuls on CUDA cores, and this spec's precision has sparsity "
                                 f"{spec_precision['sparsity']} (Sparse Tensor Cores): choose a Tensor-Core dtype")
            kept = {k: v for k, v in spec_precision.items() if k != "compute"}  # --dtype replaces compute too
            data = {**data, "precision": {**kept, "dtype": Precision.parse(dtype)}}
        self.name: str = data["name"]
        self.doc_line: str = data.get("doc", "")
        self.source = data.get("source")
        self.dims: Dims = parse_dims(data.get("dims"), doc.locate)
        self.precision = Precision.of_spec(data.get("precision", {}), Precision(), doc.locate(("precision",)))
        self.table = flops_per_element(data.get("costs"), lambda kind: doc.locate(("costs", kind)))
        builder = TreeBuilder(data, doc.locate, self.dims, self.table, collect, reported)
        self.root, self.out_shape = builder.build(self.precision)
        for kind in sorted(builder.read.declared - builder.read.declared_used):  # a typo of a kind, most likely
            unused = SpecError(f"cost kind '{kind}' declares an activation that no layer uses",
                               doc.locate(("costs", kind)), f"fn: {kind} on an activation, mlp or moe layer, or "
                               "a kind of the cost table (docs/ops.md)")
            if collect is None:
                raise unused
            collect.append(unused)
        self.in_shape = builder.in_shape
        # what involves an input size that did not read (with collect) follows from that problem
        self.constraints: list[Constraint] = [c for c in builder.constraints
                                              if not (sympy.sympify(c.condition).free_symbols & builder.unknown)]
        self.unknown = frozenset(builder.unknown)
        problems = self.problems(self.dims.values())  # the defaults must give a consistent model
        if collect is not None:
            collect.extend(problems)
        elif problems:
            raise problems[0]

    @classmethod
    def from_file(cls, path: str | Path, dtype: str | None = None):
        """Read, validate and build a spec file, or a zoo spec by name ("vit_b") when no such file exists."""
        return cls(read_spec(resolve(path)), dtype=dtype)

    def with_precision(self, dtype: str):
        """The same spec with its default dtype replaced (layers with their own `precision:` keep it)."""
        return type(self)(self.doc, dtype=dtype)

    # -- symbolic ---------------------------------------------------------------------------
    def cost(self, pass_: Pass | str = Pass.FORWARD) -> Cost:
        """Symbolic cost of the whole model for `pass_` (forward, backward or train)."""
        return node_cost(self.root, Pass.parse(pass_, "pass"), sympy.Integer(1), NO_GRAD)

    @property
    def trains(self) -> bool:
        """False when a layer runs quantised weights on a native int8 / fp8 GEMM, whose backward pass is
        refused (quantised weights dequantised to the compute dtype train as QLoRA's frozen base)."""
        return not any(op.holds_quantised_weight and op.precision.native for op in self.op_nodes())

    def op_nodes(self) -> Iterator[OpNode]:
        return self.root.op_nodes()

    def walk(self) -> Iterator[Step]:
        """The report rows: (node, depth, instances in the model, grad state), pre-order (`costspec.tree.walk`)."""
        return walk(self.root)

    def node(self, name: str) -> Node:
        """The tree node of report row `name`."""
        for step in self.walk():
            if step.node.name == name:
                return step.node
        raise KeyError(name)

    # -- binding ----------------------------------------------------------------------------
    def bind(self, batch: int | None = None, sets: Mapping[str, int] | None = None,
             words: Wording = API_WORDS) -> dict[sympy.Symbol, sympy.Integer]:
        """Dim values for `batch` (binds B) and `sets` (NAME -> VALUE), checked against the constraints;
        errors name them in `words` (the caller's: the API's arguments by default, the CLI's flags)."""
        bindings = dict(sets or {})
        if batch is not None and "B" in bindings:
            both = f"{words.of_batch(repr(batch))} and {words.of_dim('B=' + repr(bindings['B']))}"
            raise UsageError(f"{both} both bind B; give one")
        if batch is not None:
            batch = as_dim_value(batch, words.of_batch(repr(batch)))
            if batch < 1:
                raise UsageError(f"{words.of_batch(str(batch))}: sizes must be positive")
            if "B" not in self.dims.dims:
                raise UsageError(f"{words.of_batch(str(batch))} binds the dim B, which this spec does not define")
            bindings["B"] = batch
        values = self.dims.values(bindings, words)
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
                if sympy.sympify(size).free_symbols & self.unknown:
                    continue
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
