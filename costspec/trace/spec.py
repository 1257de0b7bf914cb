"""The spec text of an import: header, dims (each with where it came from), precision, input,
blocks and layers, loaded back before it is returned (a spec that does not load is a bug)."""
from __future__ import annotations

import re
from dataclasses import dataclass

from costspec.core.errors import CostspecError
from costspec.importer.emit import SpecText
from costspec.spec.load import parse_spec
from costspec.trace.blocks import Blocks, extract
from costspec.trace.graph import Unmapped
from costspec.trace.rules import ignore_yaml
from costspec.trace.run import Fitted
from costspec.trace.target import Target
from costspec.trace.write import expr_text, lines

_NAME = re.compile(r"[^A-Za-z0-9_.-]+")


@dataclass
class Imported:
    """An imported spec's text, what could not be mapped, and the command that checks it."""

    text: str
    unmapped: list[Unmapped]
    check: list[str]  # the validate --against arguments after SPEC
    fitted: Fitted


def spec_text(target: Target, fitted: Fitted, dtype: str | None, output_field: str | None,
              spec_name: str = "SPEC.yaml") -> Imported:
    """The spec text of `fitted` (gaps written as `unmapped` layers; the caller decides whether to write it)."""
    run = fitted.run
    name = _NAME.sub("_", run.model).strip("_") or "imported"
    used = _symbols(fitted.layers) | _symbols(fitted.input_shape)
    rules = ignore_yaml(fitted.layers)  # before the blocks: it reads the full module paths of the scopes
    blocks: Blocks = extract(fitted.layers, set(fitted.dims))
    check = [target.check, *target.check_options] + ([f"--output-field {output_field}"] if output_field else [])
    command = f"costspec validate {spec_name} --against " + " ".join(check) + " --pass train"
    spec = SpecText(name=name, doc=_doc(target, run.model), source=[f"imported by costspec import torch from "
                                                                      f"{target.name}"])
    spec.header = [f"# Imported by `costspec import torch` from {target.name} (module class {run.model}),",
                   "# traced on meta (no weights, no data); `source:` names its modules. Check it with:",
                   f"#   {command}" if target.check else "#   costspec validate SPEC --against package.module:callable "
                   "(a callable that builds the module)"]
    for note in _notes(fitted, target):
        spec.note(note)
    inputs_first = sorted(fitted.dims, key=lambda d: (d not in fitted.axes, d != "B"))
    for dim in inputs_first:
        if dim in fitted.fixed or dim not in used:
            continue  # a dim no size depends on (a config key this model does not read) is no dim of the spec
        spec.dim(dim, fitted.dims[dim], _dim_doc(dim, target, fitted), target.key_of.get(dim))
    precision = dtype or target.dtype or run.dtype
    spec.precision(precision, "" if dtype else "the config's dtype" if target.dtype else "the parameters' dtype")
    spec.input([expr_text(s) for s in fitted.input_shape],
               f"{run.input_name}" + (" (token ids)" if run.input_ids else ""))
    for block in blocks.order:
        spec.block(block.name, "\n".join(block.text()))
    if rules:
        spec.ignore(rules)
    spec.layers("\n".join(lines(blocks.layers)))
    text = spec.render()
    unmapped = _unmapped(run.unmapped)
    try:
        parse_spec(text, spec_name)
    except CostspecError as exc:
        raise RuntimeError(f"costspec import torch wrote a spec that does not load: {exc}\n{text}") from None
    return Imported(text, unmapped, check, fitted)


def _unmapped(found: list[Unmapped]) -> list[Unmapped]:
    """Each unmapped part once (a repeat's instances report the same module class and reason)."""
    return [Unmapped(*u) for u in dict.fromkeys((u.where, u.what, u.why) for u in found)]


def _doc(target: Target, model: str) -> str:
    first = target.doc.strip().rstrip(".") if target.doc else ""
    return first or f"{model} as traced from {target.name}"


def _dim_doc(dim: str, target: Target, fitted: Fitted) -> str:
    axes = fitted.axes.get(dim)
    if axes:
        where = ", ".join(f"axis {a.axis} of {a.input}" for a in axes)
        return f"{'batch size' if dim == 'B' else 'input size'} ({where})"
    if dim in target.key_of:
        return f"the config's {target.key_of[dim]}"
    return f"the {dim} argument of {target.name.rpartition(':')[2]}"


def _symbols(value) -> set[str]:
    """The dims an imported value (layers, shapes) mentions."""
    import dataclasses

    import sympy

    if isinstance(value, sympy.Basic):
        return {str(s) for s in value.free_symbols}
    if isinstance(value, (list, tuple)):
        return set().union(*(_symbols(v) for v in value)) if value else set()
    if isinstance(value, dict):
        return set().union(*(_symbols(v) for v in value.values())) if value else set()
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return set().union(*(_symbols(getattr(value, f.name)) for f in dataclasses.fields(value)))
    return set()


def _notes(fitted: Fitted, target: Target) -> list[str]:
    out = []
    for dim, why in fitted.fixed.items():
        if dim in target.key_of:
            continue  # a config key the fit could not vary: the model's sizes stay numbers, as in the config
        out.append(f"{dim} = {fitted.dims[dim]} is written as a number: the model does not run, or changes more "
                   f"than its sizes, at another value ({why[:200]})")
    return out


__all__ = ["Imported", "spec_text"]
