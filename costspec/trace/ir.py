"""The layers an import writes, before they are text: ops, module scopes, residuals, parallel
branches and repeats, as plain data (sizes are ints in one run, sympy expressions once fitted).

`Gap` is a piece of the model no op of the registry describes: it is listed, and written only with
`--allow-unmapped` (as an `unmapped` layer that eval shows).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class Layer:
    name: str | None = None  # the layer's name in the spec (None: the op's default name)
    source: str | None = None  # the real module, relative to the enclosing scope's module
    comment: str = ""  # a YAML comment written after the layer
    save: str | None = None  # `save: NAME`: a later layer reads this layer's output by that name


@dataclass
class Extra:
    """Work the real module runs beyond what its op counts, known from the pattern it was recognised by
    (transformers' rotate-half RoPE: a neg of half of q and k): written as an `ignore:` rule with `extra:`.
    `amounts` are per instance (summed once fitted); `phase` None means both passes."""

    kind: str
    phase: str | None
    amounts: list[Any]
    reason: str


@dataclass
class Op(Layer):
    """An op of the registry. `implied`: what an attribute is when it is left out (a default, or a
    size the op derives from another: attention's kv_heads = heads); once the sizes are expressions
    of the dims, an attribute equal to it is left out (`trim`)."""

    op: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    implied: dict[str, Any] = field(default_factory=dict)
    extra: list[Extra] = field(default_factory=list)


def trim(layers: list[Layer]) -> None:
    """Leave out every attribute equal to what it would be without it (see Op)."""
    for layer in walk(layers):
        if isinstance(layer, Op):
            layer.attrs = {k: v for k, v in layer.attrs.items()
                           if not (k in layer.implied and _same(layer.implied[k], v))}
            layer.implied = {}


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, (list, tuple)) or isinstance(b, (list, tuple)):
        return isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and len(a) == len(b) and \
            all(_same(x, y) for x, y in zip(a, b))
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b
    return bool(a == b)


@dataclass
class Gap(Layer):
    """Work the importer could not map: `where` (a module path), `what` (the module class or torch
    function, with the aten ops it ran), the output shape and the parameters it holds."""

    where: str = ""
    what: str = ""
    shape: list[Any] = field(default_factory=list)
    params: int = 0


@dataclass
class Seq(Layer):
    """A module's scope: its layers in order. `cls` is the module's class, `path` its full path."""

    layers: list[Layer] = field(default_factory=list)
    cls: str = ""
    path: str = ""
    width: Any = None  # its input's channels (axis 1 of an image, the last axis of tokens): a block's `width`


@dataclass
class Residual(Layer):
    """body(x) + x, or body(x) + shortcut(x)."""

    body: list[Layer] = field(default_factory=list)
    shortcut: list[Layer] | None = None


@dataclass
class Parallel(Layer):
    """Branches from one value, joined (add, mul, concat along `axis`)."""

    branches: list[list[Layer]] = field(default_factory=list)
    join: str = "add"
    axis: int | None = None


@dataclass
class Repeat(Layer):
    """`count` consecutive instances of `body` (the first instance's scope)."""

    count: Any = 1
    body: "Seq | BlockUse" = field(default_factory=lambda: Seq())


@dataclass
class BlockUse(Layer):
    """A use of a named block (a module class) with its arguments."""

    block: str = ""
    args: dict[str, Any] = field(default_factory=dict)


def children(layer: Layer) -> list[list[Layer]]:
    """The layer lists directly inside `layer`."""
    if isinstance(layer, Seq):
        return [layer.layers]
    if isinstance(layer, Residual):
        return [layer.body] + ([layer.shortcut] if layer.shortcut is not None else [])
    if isinstance(layer, Parallel):
        return list(layer.branches)
    if isinstance(layer, Repeat) and isinstance(layer.body, Seq):
        return [layer.body.layers]
    return []


def walk(layers: list[Layer]):
    """Every layer of the list and of the lists inside it, depth first."""
    for layer in layers:
        yield layer
        for inner in children(layer):
            yield from walk(inner)
