"""`Model`: the public facade over a loaded spec (`costspec.load`). It is a `Network` (the built
tree, its dims and constraints: what every lower layer takes) with the API's conveniences, each
forwarded to the module that answers it: numbers (`analysis.evaluation`), closed forms
(`analysis.formula`, `export.latex`), the torch module (`runtime.torch_build`). Only the CLI and
the package's public API import this module.

Numbers at bound dims come from the model compiled once per pass (`analysis.compiler`: exact
integer programs, tens of microseconds per evaluation); where the compiled form cannot answer
(a bad dim, a violated constraint, an expression it does not cover) the symbolic `build_report`
answers, with the same numbers or the same error.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Mapping

import sympy

from costspec.analysis.compiled import PASSES, CompiledModel
from costspec.analysis.evaluation import Report, build_report
from costspec.core.dims import API_WORDS, Wording
from costspec.core.errors import SpecError, UsageError
from costspec.core.vocab import Pass, Serve
from costspec.core.yaml_marks import load_marked
from costspec.spec.load import parse_spec, read_bounded, schema_problems
from costspec.spec.repair import buildable
from costspec.tree.network import Network


class Model(Network):
    """A loaded, checked spec. Build with `costspec.load(path)`."""

    phase: Serve | None = None  # the serving phase it was loaded for (`load(..., phase=)`), None: as written
    context_dim: str | None = None  # the dim holding the cached tokens, when served with a context

    def __repr__(self) -> str:
        dims = " ".join(f"{d.name}={d.default}" if d.default is not None else d.name for d in self.dims.free())
        return (f"<costspec.Model {self.name}: {sum(1 for _ in self.op_nodes())} op nodes, "
                f"{self.precision.label}, dims {dims}>")

    # -- numbers ----------------------------------------------------------------------------
    def evaluate(self, pass_: Pass | str = Pass.FORWARD, **dims: int) -> Report:
        """Exact integer costs at the given dims (the rest at their defaults)."""
        compiled = self.compiled(pass_)
        if compiled is not None and (values := compiled.bind(sets=dims)) is not None:
            report = compiled.report(pass_, values)
            if report is not None:
                return report
        return build_report(self, Pass.parse(pass_, "pass"), self.bind(sets=dims))

    def report(self, pass_: Pass | str, values: Mapping[sympy.Symbol, sympy.Integer]) -> Report:
        """Rows and totals for `pass_` at bound dim `values` (what `costspec.analysis.evaluation.build_report`
        gives)."""
        compiled = self.compiled(pass_)
        by_name = self._by_name(values) if compiled is not None else None
        if compiled is not None and by_name is not None:
            report = compiled.report(pass_, by_name)
            if report is not None:
                return report
        return build_report(self, Pass.parse(pass_, "pass"), values)

    def compiled(self, pass_: Pass | str) -> CompiledModel | None:
        """This model compiled for `pass_` (once; None for a pass name that is not one, or a model
        with an expression the compiled form does not cover)."""
        from costspec.analysis.compiler import Uncompilable, compile_model

        name = pass_.value if isinstance(pass_, Pass) else pass_
        if name not in PASSES:
            return None
        cache: dict[str, CompiledModel | None] = self.__dict__.setdefault("_compiled", {})
        if name not in cache:
            try:
                cache[name] = compile_model(self, (name,))
            except Uncompilable:
                cache[name] = None
            except Exception:  # the compiled form is an optimisation: a failure in it never stops an evaluation
                if os.environ.get("COSTSPEC_DEBUG"):
                    raise
                cache[name] = None
        return cache[name]

    def _by_name(self, values: Mapping[sympy.Symbol, sympy.Integer]) -> dict[str, int] | None:
        """`values` keyed by dim name, when they bind exactly this model's dims to integers (else None)."""
        names = {d.symbol: d.name for d in self.dims.dims.values()}
        out: dict[str, int] = {}
        for symbol, value in values.items():
            name = names.get(symbol)
            if name is None or not (type(value) is int or isinstance(value, sympy.Integer)):
                return None
            out[name] = int(value)
        return out if len(out) == len(names) else None

    def latex(self, keep=None, pass_: Pass | str = Pass.FORWARD, standalone: bool = False, **kwargs) -> str:
        """The closed forms as a LaTeX `align` (see `costspec latex`)."""
        from costspec.analysis.formula import formulas
        from costspec.export.latex import render_latex

        return render_latex(formulas(self, Pass.parse(pass_, "pass"), keep, **kwargs), standalone=standalone)

    def to_torch(self, **dims: int):
        """A torch nn.Module built from this spec, and a function making a correctly shaped input."""
        from costspec.runtime.torch_build import build_module

        return build_module(self, self.bind(sets=dims))


def load(path: str | Path, dtype: str | None = None, phase: Serve | str | None = None,
         context: int | None = None, backend: str | None = None, checkpoint: str | None = None) -> Model:
    """Load, validate and build a spec file (or a zoo spec by name, e.g. "vit_b", when no such file
    exists); `dtype` overrides the spec's default precision. `phase` ("prefill" or "decode") and
    `context` (tokens already cached) serve a decoder (`costspec.analysis.serving`): decode costs one new
    token per sequence over `context` cached ones (default: the spec's token count). `backend` ("flash",
    "math", "eager") replaces every attention layer's kernel family. `checkpoint` ("none", "blocks",
    "every:N") replaces the spec's activation checkpointing (`costspec.analysis.checkpointing`): train
    costs then include the forward the checkpointed repeat instances re-run in backward."""
    return load_worded(path, dtype, phase, context, backend, API_WORDS, checkpoint)


def load_worded(path: str | Path, dtype: str | None, phase: Serve | str | None, context: int | None,
                backend: str | None, words: Wording, checkpoint: str | None = None) -> Model:
    """`load`, its errors naming phase, context and backend in `words` (the CLI's flags: `CLI_WORDS`)."""
    if not isinstance(path, (str, os.PathLike)):
        raise UsageError(f"costspec.load needs a file path (str or pathlib.Path), got {type(path).__name__}; "
                         "use costspec.loads for spec text")
    model = Model.from_file(path, dtype=dtype)
    if backend is not None:
        from costspec.analysis.serving import backend_doc

        model = Model(backend_doc(model.doc, backend, words), dtype=dtype)
    if checkpoint is not None:
        from costspec.analysis.checkpointing import checkpoint_doc

        model = Model(checkpoint_doc(model.doc, checkpoint), dtype=dtype)
    return serve(model, phase, context, dtype, words)


def serve(model: Model, phase: Serve | str | None, context: int | None, dtype: str | None = None,
          words: Wording = API_WORDS) -> Model:
    """`model` for a serving phase (see `load`); `model` itself for no phase and no context."""
    if phase is None and context is None:
        return model
    from costspec.analysis.serving import context_dim, serving_doc

    phase = Serve.parse(Serve.PREFILL if phase is None else phase, words.of_option("phase"))
    doc = serving_doc(model, phase, context, words)
    served = Model(doc, dtype=dtype) if doc is not model.doc else model
    served.phase = phase
    served.unserved = model if served is not model else None
    served.context_dim = context_dim(model.doc) if doc is not model.doc else None
    return served


def serving_note(model: Model, batch: int, seconds: float | None = None) -> str | None:
    """One line saying what a served model's costs are (and, with a roofline's time, tokens per second)."""
    if model.phase is None:
        return None
    ctx = f" after {model.context_dim} cached tokens" if model.context_dim else ""
    if model.phase is Serve.DECODE:
        line = f"decode: one new token per sequence (input [{model.in_shape[0]}, 1]){ctx}; costs are per step"
        if seconds:
            line += f": {seconds * 1e3:.4g} ms per step of {batch} tokens, {batch / seconds:,.1f} tokens/s"
        return line
    return f"prefill: the input's tokens{ctx}, their keys and values written to the cache"


def loads(text: str, file: str = "<spec>") -> Model:
    """Load a spec from text (for tests and notebooks)."""
    if not isinstance(text, (str, bytes)):
        raise UsageError(f"costspec.loads needs the spec text (str or bytes), got {type(text).__name__}")
    return Model(parse_spec(text, file))


def check_file(path: str) -> list[SpecError]:
    """Every problem `costspec check` finds in `path`, each independent one once: all schema problems;
    then, unless one lies outside the layers, the semantic problems (dims, input sizes, blocks, shapes:
    layers after a bad one are still checked, their problems marked as possibly following from it; a
    layer the schema rejected is not reported again) and every violated constraint at the dims' defaults."""
    try:
        doc = load_marked(read_bounded(path), path)
    except SpecError as exc:
        return [exc]
    found = list(schema_problems(doc))
    reported: frozenset[tuple] = frozenset()
    if found:
        repaired = buildable(doc)
        if repaired is None:  # a problem outside the layers: nothing else can be checked safely
            return found
        doc, reported = repaired
    try:
        Model(doc, collect=found, reported=reported)
    except SpecError as exc:
        found.append(exc)
    unique: dict[str, SpecError] = {}
    for problem in found:
        unique.setdefault(str(problem), problem)
    return list(unique.values())


__all__ = ["Model", "Report", "check_file", "load", "loads"]
