"""Identical consecutive children of one container (`layers.0`, `layers.1`, ...) -> one `repeat`.

Two instances are identical when their layers are, but for the module paths they were recorded at;
the repeat's source is the container, counted from its first child no earlier layer claimed (a
ResNet stage's first block, with its projection shortcut, stays a layer of its own).
"""
from __future__ import annotations

import dataclasses
import re
from typing import Any

from costspec.trace.graph import layer_name
from costspec.trace.ir import Gap, Layer, Repeat, Seq, children

_INDEXED = re.compile(r"^(?:(?P<container>.+)\.)?(?P<index>\d+)$")


def _instance(layer: Layer) -> tuple[str, int] | None:
    """(container, index) of a layer recorded at `container.index`, else None."""
    if layer.source is None or not isinstance(layer, Seq):
        return None
    m = _INDEXED.match(layer.source)
    return (m.group("container") or "", int(m.group("index"))) if m else None


def shape_of(layer: Any) -> Any:
    """`layer` with the fields that differ between identical instances (full paths) blanked."""
    if isinstance(layer, list):
        return [shape_of(x) for x in layer]
    if not dataclasses.is_dataclass(layer) or isinstance(layer, type):
        return layer
    changes = {f.name: shape_of(getattr(layer, f.name)) for f in dataclasses.fields(layer)}
    if isinstance(layer, Seq):
        changes["path"] = ""
    if isinstance(layer, Gap):
        changes["where"] = ""
    return dataclasses.replace(layer, **changes)


def fold(layers: list[Layer]) -> list[Layer]:
    """`layers` (and every list inside them) with runs of identical instances as repeats."""
    for layer in layers:
        for inner in children(layer):
            inner[:] = fold(inner)
    out: list[Layer] = []
    runs: dict[str, int] = {}  # container -> repeats made from it here (a second one is named by its first index)
    i = 0
    while i < len(layers):
        here = _instance(layers[i])
        j = i + 1
        if here is not None and here[0]:
            same = shape_of(dataclasses.replace(layers[i], name=None, source=None))
            while j < len(layers):
                nxt = _instance(layers[j])
                if nxt != (here[0], here[1] + j - i):
                    break
                if shape_of(dataclasses.replace(layers[j], name=None, source=None)) != same:
                    break
                j += 1
        if here is not None and here[0] and j - i >= 2:
            body = layers[i]
            assert isinstance(body, Seq)
            container = here[0]
            out.append(Repeat(name=layer_name(container), source=container, count=j - i,
                              body=dataclasses.replace(body, name=None, source=None), comment=str(here[1])))
            runs[container] = runs.get(container, 0) + 1
        else:
            out.extend(layers[i:j])
        i = j
    for layer in out:  # several repeats of one container: each named by its first instance (blocks_4)
        if isinstance(layer, Repeat) and layer.source is not None and runs.get(layer.source, 0) > 1:
            layer.name = layer_name(f"{layer.source}.{layer.comment}")
        if isinstance(layer, Repeat) and layer.comment.isdigit():
            layer.comment = ""
    return out
