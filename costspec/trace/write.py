"""Layers (`ir`) -> the YAML lines of a spec's `layers:` and `blocks:`, laid out as a person writes
them: one line per op (`- linear: {out: F, bias: false}`), `name:` and `source:` under it, a
comment where the importer has something to say.
"""
from __future__ import annotations

from typing import Any

import sympy

from costspec.importer.emit import scalar
from costspec.trace.ir import BlockUse, Gap, Layer, Op, Parallel, Repeat, Residual, Seq


def expr_text(value: Any) -> str:
    """A size as spec text: an int as it is, a sympy expression in the spec's expression syntax."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, sympy.Basic):
        if value.is_Integer:
            return str(int(value))
        return scalar(str(value))
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(expr_text(v) for v in value) + "]"
    return scalar(value)


def mapping(attrs: dict[str, Any]) -> str:
    return "{" + ", ".join(f"{k}: {expr_text(v)}" for k, v in attrs.items()) + "}"


WIDTH = 110


def flow_line(head: str, attrs: dict[str, Any], tail: str = "") -> list[str]:
    """`head{k: v, ...}tail`, continued on lines aligned after the brace when longer than WIDTH."""
    items = [f"{k}: {expr_text(v)}" for k, v in attrs.items()]
    one = head + "{" + ", ".join(items) + "}" + tail
    if len(one) <= WIDTH or len(items) < 2:
        return [one]
    out, line = [], head + "{"
    for i, item in enumerate(items):
        piece = item + ("}" if i == len(items) - 1 else ",")
        if line.endswith(("{", ",")) and len(line) + len(piece) + 1 > WIDTH and not line.endswith("{"):
            out.append(line)
            line = " " * (len(head) + 1) + piece
        else:
            line += ("" if line.endswith("{") else " ") + piece
    out.append(line + tail)
    return out


def _keys(layer: Layer, pad: str) -> list[str]:
    out = []
    if layer.name:
        out.append(f"{pad}name: {layer.name}")
    if layer.source:
        out.append(f"{pad}source: {scalar(layer.source)}")
    if layer.save:
        out.append(f"{pad}save: {layer.save}")
    return out


def _comment(layer: Layer) -> str:
    return f"  # {layer.comment}" if layer.comment else ""


def lines(layers: list[Layer], indent: str = "") -> list[str]:
    """The YAML list of `layers`, each item starting with `indent- `."""
    out: list[str] = []
    for layer in layers:
        out.extend(_layer(layer, indent))
    return out


def _list_or_empty(layers: list[Layer], key: str, indent: str) -> list[str]:
    if not layers:
        return [f"{indent}{key}: []"]
    return [f"{indent}{key}:"] + lines(layers, indent + "  ")


def _layer(layer: Layer, indent: str) -> list[str]:
    pad = indent + "  "
    if isinstance(layer, Op):
        return flow_line(f"{indent}- {layer.op}: ", layer.attrs, _comment(layer)) + _keys(layer, pad)
    if isinstance(layer, Gap):
        attrs: dict[str, Any] = {"what": layer.what, "module": layer.where or "(model)", "shape": layer.shape}
        if layer.params:
            attrs["params"] = layer.params
        return flow_line(f"{indent}- unmapped: ", attrs, _comment(layer)) + _keys(layer, pad)
    if isinstance(layer, Seq):
        return [f"{indent}- sequence:{_comment(layer)}"] + lines(layer.layers, pad + "  ") + _keys(layer, pad)
    if isinstance(layer, Residual):
        if layer.shortcut is None:
            return [f"{indent}- residual:{_comment(layer)}"] + lines(layer.body, pad + "  ")
        return ([f"{indent}- residual:{_comment(layer)}"] + _list_or_empty(layer.body, "body", pad + "  ")
                + _list_or_empty(layer.shortcut, "shortcut", pad + "  "))
    if isinstance(layer, Parallel):
        out = [f"{indent}- parallel:{_comment(layer)}", f"{pad}  join: {layer.join}"]
        if layer.axis is not None:
            out.append(f"{pad}  axis: {layer.axis}")
        out.append(f"{pad}  branches:")
        for branch in layer.branches:
            out.extend([f"{pad}    - []"] if not branch else _nested(branch, pad + "    "))
        return out
    if isinstance(layer, Repeat):
        out = [f"{indent}- repeat: {expr_text(layer.count)}{_comment(layer)}"] + _keys(layer, pad)
        if isinstance(layer.body, BlockUse):
            out.append(f"{pad}body: {layer.body.block}")
            if layer.body.args:
                out += flow_line(f"{pad}args: ", layer.body.args)
        else:
            out += [f"{pad}body:"] + lines(layer.body.layers, pad + "  ")
        return out
    if isinstance(layer, BlockUse):
        out = [f"{indent}- block: {layer.block}{_comment(layer)}"] + _keys(layer, pad)
        if layer.args:
            out += flow_line(f"{pad}args: ", layer.args)
        return out
    raise TypeError(f"no YAML for {type(layer).__name__}")


def _nested(layers: list[Layer], indent: str) -> list[str]:
    """A list inside a list item: `- - op: ...` then the rest aligned under it."""
    inner = lines(layers, indent + "  ")
    first = inner[0]
    return [f"{indent}- {first[len(indent) + 2:]}"] + inner[1:]
