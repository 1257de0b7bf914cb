"""`Model`: the public facade over a loaded spec (`costspec.load`). It is a `Network` (the built
tree, its dims and constraints: what every lower layer takes) with the API's conveniences, each
forwarded to the module that answers it: numbers (`analysis.evaluation`), closed forms
(`analysis.formula`, `export.latex`), the torch module (`runtime.torch_build`). Only the CLI and
the package's public API import this module.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import sympy

from costspec.analysis.evaluation import Report, build_report
from costspec.core.errors import SpecError, UsageError
from costspec.core.vocab import Pass
from costspec.core.yaml_marks import load_marked
from costspec.spec.load import parse_spec, read_bounded, schema_problems
from costspec.tree.network import Network


class Model(Network):
    """A loaded, checked spec. Build with `costspec.load(path)`."""

    def __repr__(self) -> str:
        dims = " ".join(f"{d.name}={d.default}" if d.default is not None else d.name for d in self.dims.free())
        return (f"<costspec.Model {self.name}: {sum(1 for _ in self.op_nodes())} op nodes, "
                f"{self.precision.label}, dims {dims}>")

    # -- numbers ----------------------------------------------------------------------------
    def evaluate(self, pass_: Pass | str = Pass.FORWARD, **dims: int) -> Report:
        """Exact integer costs at the given dims (the rest at their defaults)."""
        return self.report(pass_, self.bind(sets=dims))

    def report(self, pass_: Pass | str, values: Mapping[sympy.Symbol, sympy.Integer]) -> Report:
        """Rows and totals for `pass_` at bound dim `values` (`costspec.analysis.evaluation.build_report`)."""
        return build_report(self, Pass.parse(pass_, "pass"), values)

    def latex(self, keep=None, pass_: Pass | str = Pass.FORWARD, standalone: bool = False, **kwargs) -> str:
        """The closed forms as a LaTeX `align` (see `costspec latex`)."""
        from costspec.analysis.formula import formulas
        from costspec.export.latex import render_latex

        return render_latex(formulas(self, Pass.parse(pass_, "pass"), keep, **kwargs), standalone=standalone)

    def to_torch(self, **dims: int):
        """A torch nn.Module built from this spec, and a function making a correctly shaped input."""
        from costspec.runtime.torch_build import build_module

        return build_module(self, self.bind(sets=dims))


def load(path: str | Path, dtype: str | None = None) -> Model:
    """Load, validate and build a spec file (or a zoo spec by name, e.g. "vit_b", when no such file
    exists); `dtype` overrides the spec's default precision."""
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"costspec.load needs a file path (str or pathlib.Path), got {type(path).__name__}; "
                         "use costspec.loads for spec text")
    return Model.from_file(path, dtype=dtype)


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
