"""The spec text of an import: header, dims (each with where it came from), precision, input,
blocks and layers, loaded back before it is returned (a spec that does not load is a bug)."""
from __future__ import annotations

import re
from dataclasses import dataclass, field

from costspec.core.errors import CostspecError
from costspec.importer.emit import SpecText, wrap_comment
from costspec.spec.load import parse_spec
from costspec.trace.blocks import Blocks, extract
from costspec.trace.graph import Unmapped
from costspec.trace.ir import Gap, walk
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
    notes: list[str] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return not self.unmapped


def spec_text(target: Target, fitted: Fitted, dtype: str | None, output_field: str | None,
              spec_name: str = "SPEC.yaml") -> Imported:
    """The spec text of `fitted` (gaps written as `unmapped` layers; the caller decides whether to write it)."""
    run = fitted.run
    name = _NAME.sub("_", run.model).strip("_") or "imported"
    blocks: Blocks = extract(fitted.layers)
    check = [target.check, *target.check_options] + ([f"--output-field {output_field}"] if output_field else [])
    command = f"costspec validate {spec_name} --against " + " ".join(check) + " --pass train"
    spec = SpecText(name=name, doc=_doc(target, run.model), source=[f"imported by costspec import torch from "
                                                                      f"{target.name}"])
    spec.header = [f"# Imported by `costspec import torch` from {target.name} (module class {run.model}),",
                   "# traced on meta (no weights, no data); `source:` names its modules. Check it with:",
                   f"#   {command}"]
    for note in _notes(fitted):
        spec.note(note)
    for dim, value in fitted.dims.items():
        if dim in fitted.fixed:
            continue
        spec.dim(dim, value, _dim_doc(dim, target, fitted), target.key_of.get(dim))
    precision = dtype or target.dtype or run.dtype
    spec.precision(precision, "" if dtype else "the config's dtype" if target.dtype else "the parameters' dtype")
    spec.input([expr_text(s) for s in fitted.input_shape],
               f"{run.input_name}" + (" (token ids)" if run.input_ids else ""))
    for block in blocks.order:
        spec.block(block.name, "\n".join(block.text()))
    spec.layers("\n".join(lines(blocks.layers)))
    text = spec.render()
    unmapped = _unmapped(run.unmapped, fitted)
    try:
        parse_spec(text, spec_name)
    except CostspecError as exc:
        raise RuntimeError(f"costspec import torch wrote a spec that does not load: {exc}\n{text}") from None
    return Imported(text, unmapped, check, fitted)


def _unmapped(found: list[Unmapped], fitted: Fitted) -> list[Unmapped]:
    gaps = {(g.where, g.what) for g in walk(fitted.layers) if isinstance(g, Gap)}
    out = list(dict.fromkeys((u.where, u.what, u.why) for u in found))
    del gaps
    return [Unmapped(*u) for u in out]


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


def _notes(fitted: Fitted) -> list[str]:
    out = []
    for dim, why in fitted.fixed.items():
        out.append(f"{dim} = {fitted.dims[dim]} is written as a number: the model does not run, or changes more "
                   f"than its sizes, at another value ({why[:200]})")
    return out


__all__ = ["Imported", "spec_text", "wrap_comment"]
