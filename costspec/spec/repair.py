"""A spec with schema problems, made buildable for `costspec check`, so that its other problems are
found in the same run.

Unknown keys are dropped; a layer with a schema problem (one of its keys, or anything inside its own
attributes) is named, so that the builder builds it only for its output shape and does not report
again what follows from the problem already said. A problem outside any layer (dims, input, block
parameters, the format version) leaves nothing safe to build: then only the schema's problems count.
"""
from __future__ import annotations

import copy

from costspec.core.yaml_marks import MarkedDoc
from costspec.spec.load import schema_errors

# the keys whose lists hold layers (besides a block's list, `blocks: {name: [layers]}`, and a parallel's
# `branches: [[layers], ...]`)
LAYER_LISTS = frozenset({"layers", "residual", "sequence", "body", "shortcut"})


def buildable(doc: MarkedDoc) -> tuple[MarkedDoc, frozenset[tuple]] | None:
    """`doc` without its unknown keys, and the paths of the layers whose problems the schema check
    reports; None when a problem lies outside every layer."""
    data = copy.deepcopy(doc.data)
    reported: set[tuple] = set()
    for error in schema_errors(doc):
        path = tuple(error.absolute_path)
        layer = innermost_layer(path)
        schema = error.schema if isinstance(error.schema, dict) else {}
        if error.validator == "additionalProperties" and schema.get("additionalProperties") is False \
                and isinstance(error.instance, dict):
            target = _at(data, path)
            for key in set(error.instance) - set(schema.get("properties", {})):
                target.pop(key, None)
        elif layer is None:
            return None
        if layer is not None:
            reported.add(layer)
    repaired = MarkedDoc(doc.file, data, doc.marks)
    if any(not _within(tuple(e.absolute_path), reported) for e in schema_errors(repaired)):
        return None
    return repaired, frozenset(reported)


def innermost_layer(path: tuple) -> tuple | None:
    """The path of the innermost layer that holds `path` (or is it), None outside every layer."""
    for end in range(len(path), 1, -1):
        prefix = path[:end]
        if not isinstance(prefix[-1], int):
            continue
        if prefix[-2] in LAYER_LISTS or (end == 3 and prefix[0] == "blocks") or (end >= 3 and prefix[-3] == "branches"):
            return prefix
    return None


def _within(path: tuple, layers: set[tuple]) -> bool:
    return any(path[:len(layer)] == layer for layer in layers)


def _at(data, path: tuple):
    for key in path:
        data = data[key]
    return data
