"""Module scopes -> named blocks, one per module class (and shape of its layers).

Every scope of a class whose layers have the same structure becomes a use of one block named
after the class (`Bottleneck`; `Bottleneck_2` for a second structure of the same class). Sizes
equal in every use are written in the block; sizes that differ become block parameters, named
after the attribute they set (`out`, `stride`, `heads`), each use passing its values as `args:`;
a size that is a fixed multiple of a parameter in every use is written as that multiple (`out / 4`).
Inner scopes are made blocks first, so an outer block passes its parameters on to the inner ones.
"""
from __future__ import annotations

import dataclasses
import keyword
from dataclasses import dataclass, field
from typing import Any

import sympy

from costspec.trace.ir import BlockUse, Layer, Repeat, Seq, children
from costspec.trace.write import expr_text, lines


@dataclass(frozen=True)
class Slot:
    """A size's place in a block's template."""

    index: int


@dataclass
class Block:
    name: str
    cls: str
    layers: list[Layer]
    params: dict[str, Any]  # name -> default (the first use's value)
    paths: list[str] = field(default_factory=list)  # the module paths of its uses

    def text(self) -> list[str]:
        where = ", ".join(self.paths[:3]) + (f" and {len(self.paths) - 3} more" if len(self.paths) > 3 else "")
        doc = f"doc: \"{self.cls} ({where})\""
        if not self.params:
            return [doc, "layers:"] + lines(self.layers, "  ")
        params = "{" + ", ".join(f"{k}: {expr_text(v)}" for k, v in self.params.items()) + "}"
        return [doc, f"params: {params}", "layers:"] + lines(self.layers, "  ")


@dataclass
class Blocks:
    order: list[Block]
    layers: list[Layer]


def _template(value: Any, values: list[Any], keys: list[str], key: str = "") -> Any:
    """`value` with each size replaced by a Slot (collected in `values`, the attribute it sets in `keys`)."""
    if isinstance(value, sympy.Basic):
        values.append(value)
        keys.append(key)
        return Slot(len(values) - 1)
    if isinstance(value, list):
        return [_template(v, values, keys, key) for v in value]
    if isinstance(value, dict):
        return {k: _template(v, values, keys, k) for k, v in value.items()}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        changes = {}
        for f in dataclasses.fields(value):
            if f.name in ("path", "name", "source", "where") and isinstance(value, Layer):
                changes[f.name] = getattr(value, f.name) if f.name != "path" else ""
                continue
            changes[f.name] = _template(getattr(value, f.name), values, keys, "n" if f.name == "count" else key)
        return dataclasses.replace(value, **changes)
    return value


def _fill(template: Any, fill: list[Any]) -> Any:
    if isinstance(template, Slot):
        return fill[template.index]
    if isinstance(template, list):
        return [_fill(v, fill) for v in template]
    if isinstance(template, dict):
        return {k: _fill(v, fill) for k, v in template.items()}
    if dataclasses.is_dataclass(template) and not isinstance(template, type):
        return dataclasses.replace(template, **{f.name: _fill(getattr(template, f.name), fill)
                                                for f in dataclasses.fields(template)})
    return template


def _key(seq: Seq) -> tuple[str, str]:
    """The class and the structure of its layers (sizes blanked; inner scopes by their own structure)."""
    return seq.cls, repr(_template(seq.layers, [], []))


def _height(seq: Seq) -> int:
    inner: list[Seq] = []
    for layer in seq.layers:
        _collect([layer], inner)
    return 1 + max((_height(s) for s in inner), default=0)


def extract(layers: list[Layer], reserved: set[str] | None = None) -> Blocks:
    """Blocks for every module scope in `layers`; the layers with the scopes as block uses."""
    scopes = [s for s in _every(layers)]
    groups: dict[tuple[str, str], list[Seq]] = {}
    for seq in scopes:
        groups.setdefault(_key(seq), []).append(seq)
    heights = {key: _height(members[0]) for key, members in groups.items()}
    names: set[str] = set(reserved or ())
    blocks: list[Block] = []
    done: dict[int, BlockUse] = {}
    for key in sorted(groups, key=lambda k: heights[k]):  # inner scopes are blocks before their containers
        members = groups[key]
        for seq in members:
            seq.layers = _use_blocks(seq.layers, done)
        name = _fresh(key[0], names)
        block, args = _block(name, key[0], members, names)
        blocks.append(block)
        for seq, arg in zip(members, args):
            done[id(seq)] = BlockUse(name=seq.name, source=seq.source, comment=seq.comment, save=seq.save,
                                     block=name, args=arg)
    top = _use_blocks(layers, done)
    return Blocks(_ordered(blocks, top), top)


def _every(layers: list[Layer]):
    """Every module scope in `layers`, nested ones included."""
    for layer in layers:
        if isinstance(layer, Seq):
            yield layer
        elif isinstance(layer, Repeat) and isinstance(layer.body, Seq):
            yield layer.body
        for inner in children(layer):
            yield from _every(inner)


def _collect(layers: list[Layer], found: list[Seq]) -> None:
    """The outermost module scopes in `layers` (repeat bodies included)."""
    for layer in layers:
        if isinstance(layer, Seq):
            found.append(layer)
            continue
        if isinstance(layer, Repeat) and isinstance(layer.body, Seq):
            found.append(layer.body)
            continue
        for inner in children(layer):
            _collect(inner, found)


def _use_blocks(layers: list[Layer], done: dict[int, BlockUse]) -> list[Layer]:
    out: list[Layer] = []
    for layer in layers:
        if isinstance(layer, Seq) and id(layer) in done:
            out.append(done[id(layer)])
            continue
        if isinstance(layer, Repeat) and isinstance(layer.body, Seq) and id(layer.body) in done:
            layer = dataclasses.replace(layer, body=done[id(layer.body)])
        for inner in children(layer):
            inner[:] = _use_blocks(inner, done)
        out.append(layer)
    return out


def _fresh(cls: str, names: set[str]) -> str:
    base = cls if cls.isidentifier() and not keyword.iskeyword(cls) else "block"
    name, i = base, 2
    while name in names:
        name, i = f"{base}_{i}", i + 1
    names.add(name)
    return name


def _block(name: str, cls: str, seqs: list[Seq], names: set[str]) -> tuple[Block, list[dict[str, Any]]]:
    """One block for `seqs` (same class and structure): its parameters and each use's arguments."""
    per_use: list[list[Any]] = []
    keys: list[str] = []
    template: Any = None
    for seq in seqs:
        values: list[Any] = []
        keys = []
        template = _template(seq.layers, values, keys)
        per_use.append(values)
    fill: list[Any] = []
    params: dict[str, Any] = {}
    vectors: dict[str, list[Any]] = {}
    taken: set[str] = set()
    widths = [s.width for s in seqs]
    width = {"width": widths} if all(isinstance(w, sympy.Basic) for w in widths) and \
        any(w != widths[0] for w in widths) else {}
    for slot in range(len(per_use[0])):
        column = [values[slot] for values in per_use]
        if all(v == column[0] for v in column):
            fill.append(column[0])
            continue
        expr = _as_multiple(column, vectors)
        if expr is None and width and "width" not in names | taken:  # a multiple of the input's channels
            expr = _as_multiple(column, width)
            if expr is not None:
                taken.add("width")
                params["width"], vectors["width"] = widths[0], widths
                width = {}
        if expr is None:
            param = _param_name(keys[slot], taken | names)
            taken.add(param)
            params[param] = column[0]
            vectors[param] = column
            expr = sympy.Symbol(param)
        fill.append(expr)
    args = [{p: vectors[p][i] for p in params} for i in range(len(seqs))]
    return Block(name, cls, _fill(template, fill), params, [s.path for s in seqs]), args


def _as_multiple(column: list[Any], vectors: dict[str, list[Any]]) -> sympy.Expr | None:
    """`k * param` when `column` is a fixed rational multiple of a parameter's values in every use (or
    `floor(k * param)` when it is that, rounded down, in every use)."""
    if all(isinstance(c, sympy.floor) for c in column):
        inner = _as_multiple([c.args[0] for c in column], vectors)
        return sympy.floor(inner) if inner is not None else None
    for param, values in vectors.items():
        if values == column:
            return sympy.Symbol(param)
        ratios = {sympy.nsimplify(sympy.simplify(c / v)) if v != 0 else None for c, v in zip(column, values)}
        if len(ratios) == 1:
            ratio = ratios.pop()
            if ratio is not None and ratio.is_Rational and ratio != 0:
                return ratio * sympy.Symbol(param)
    return None


def _param_name(key: str, taken: set[str]) -> str:
    base = key if key.isidentifier() and not keyword.iskeyword(key) else "size"
    if base in ("in", "axis", "index"):
        base = "size"
    name, i = base, 2
    while name in taken:
        name, i = f"{base}{i}", i + 1
    return name


def _ordered(blocks: list[Block], top: list[Layer]) -> list[Block]:
    """Blocks in the order of their first use, a block before the blocks that use it."""
    by_name = {b.name: b for b in blocks}
    out: list[Block] = []

    def visit(items: list[Layer]) -> None:
        for layer in items:
            body = layer.body if isinstance(layer, Repeat) else None
            use = layer if isinstance(layer, BlockUse) else body if isinstance(body, BlockUse) else None
            if use is not None and use.block in by_name and by_name[use.block] not in out:
                visit(by_name[use.block].layers)
                out.append(by_name[use.block])
            for inner in children(layer):
                visit(inner)

    visit(top)
    return out + [b for b in blocks if b not in out]
