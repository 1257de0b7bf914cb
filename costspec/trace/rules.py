"""The `ignore:` rules of an import: work a recognised module runs beyond its op (`ir.Extra`), summed over
every instance, for the real modules matching one path pattern (`layers.*.self_attn`)."""
from __future__ import annotations

import textwrap

import sympy

from costspec.importer.emit import scalar
from costspec.trace.ir import Layer, Op, Repeat, Seq, children


def _pattern(path: str, repeats: list[str]) -> str:
    """`layers.0.self_attn` -> `layers.*.self_attn` for a repeat body recorded at `layers.0`."""
    for body in repeats:
        if path == body or path.startswith(body + "."):
            container = body.rpartition(".")[0]
            path = f"{container}.*" + path[len(body):] if container else "*" + path[len(body):]
    return path


def collect(layers: list[Layer]) -> list[tuple[str, str, str | None, sympy.Expr, str]]:
    """(module pattern, kind, phase, amount over all instances, reason) for every Extra in `layers`."""
    found: dict[tuple[str, str, str | None, str], sympy.Expr] = {}

    def visit(items: list[Layer], base: str, times: sympy.Expr, repeats: list[str]) -> None:
        for layer in items:
            if isinstance(layer, Op) and layer.extra:  # an op without a source runs in the enclosing module
                path = _pattern(f"{base}.{layer.source}" if base and layer.source else layer.source or base, repeats)
                for extra in layer.extra:
                    key = (path, extra.kind, extra.phase, extra.reason)
                    found[key] = found.get(key, sympy.Integer(0)) + times * sympy.Add(*extra.amounts)
            if isinstance(layer, Repeat) and isinstance(layer.body, Seq):
                visit(layer.body.layers, layer.body.path, times * layer.count, repeats + [layer.body.path])
                continue
            if isinstance(layer, Seq):
                visit(layer.layers, layer.path, times, repeats)
                continue
            for inner in children(layer):
                visit(inner, base, times, repeats)

    visit(layers, "", sympy.Integer(1), [])
    return [(path, kind, phase, sympy.factor(amount), reason) for (path, kind, phase, reason), amount in found.items()]


def ignore_yaml(layers: list[Layer]) -> str:
    """The `ignore:` entries (YAML, unindented) for the rules in `layers`; '' when there are none."""
    out = []
    for path, kind, phase, amount, reason in collect(layers):
        out.append(f"- module: {scalar(path)}")
        out.append(f"  extra: {{{kind}: {scalar(str(amount))}}}")
        if phase:
            out.append(f"  pass: {phase}")
        out.append("  reason: >-")
        out.extend(textwrap.wrap(reason, 104, initial_indent="    ", subsequent_indent="    "))
    return "\n".join(out)
