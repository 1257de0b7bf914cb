"""`--checkpoint none|blocks|every:N`: activation checkpointing chosen on the command line, as a rewrite
of the spec document (so every command costs it with the same tree, as `--backend` does).

The option replaces the spec's own `checkpoint:` keys: `none` removes them all; `blocks` puts
`checkpoint: true` on every repeat that is not inside another repeat (each of its instances is
checkpointed alone, as Hugging Face's `gradient_checkpointing_enable()` wraps each decoder layer);
`every:N` puts `checkpoint: {every: N}` there (the instances 0, N, 2N, ...: ceiling(count / N) of them, as
Hugging Face's `every_n_layers` picks them).
What a checkpointed instance costs is in `costspec.tree.nodes` (its forward again, in backward).
"""
from __future__ import annotations

import copy
from typing import Any

from costspec.core.errors import UsageError
from costspec.core.yaml_marks import MarkedDoc

CHOICES = "none, blocks or every:N"


def parse_checkpoint(text: str) -> int:
    """The instances `--checkpoint` checkpoints: 0 (none), 1 (blocks: every instance) or N (every:N)."""
    value = text.strip()
    if value == "none":
        return 0
    if value == "blocks":
        return 1
    head, sep, tail = value.partition(":")
    if head == "every" and sep and tail.isdigit() and int(tail) >= 1:
        return int(tail)
    raise UsageError(f"--checkpoint {text!r}: expected {CHOICES} (N a positive integer: every N-th instance of "
                     "each repeat)")


def checkpoint_doc(doc: MarkedDoc, setting: str | None) -> MarkedDoc:
    """`doc` with the checkpointing `setting` (see the module docstring); `doc` itself for None."""
    if setting is None:
        return doc
    every = parse_checkpoint(setting)
    data: Any = copy.deepcopy(doc.data)
    blocks = data.get("blocks") or {}
    _strip(data.get("layers"))
    for spec in blocks.values():
        _strip(_block_layers(spec))
    if every:
        marker = Marker(blocks, True if every == 1 else {"every": every})
        marker.layers(data.get("layers") or [], inside=False)
        if not marker.marked:
            raise UsageError(f"--checkpoint {setting}: this spec has no repeat to checkpoint (checkpoint: true on a "
                             "block use checkpoints a single block)")
        both = sorted(name for name, seen in marker.seen.items() if len(seen) == 2 and marker.holds_repeat(name))
        if both:
            raise UsageError(f"--checkpoint {setting}: block '{both[0]}' holds a repeat and is used both inside and "
                             "outside repeats, so its repeat would be checkpointed inside a checkpointed one; write "
                             "`checkpoint:` in the spec instead")
    return MarkedDoc(doc.file, data, doc.marks)


def _strip(layers: Any) -> None:
    """Remove the `checkpoint:` key of every layer in `layers` and in the compositions inside them."""
    for layer in layers if isinstance(layers, list) else ():
        if not isinstance(layer, dict):
            continue
        layer.pop("checkpoint", None)
        for part in _inner_layers(layer):
            _strip(part)


def _inner_layers(layer: dict) -> list:
    """The layer lists a composition layer holds (a repeat's inline body, a residual's, branches, a sequence)."""
    if "repeat" in layer:
        return [layer.get("body")]
    if "residual" in layer:
        spec = layer["residual"]
        return [spec.get("body"), spec.get("shortcut")] if isinstance(spec, dict) else [spec]
    if "parallel" in layer and isinstance(layer["parallel"], dict):
        return list(layer["parallel"].get("branches") or ())
    if "sequence" in layer:
        return [layer["sequence"]]
    return []


class Marker:
    """Puts `value` on the repeats of a spec that no other repeat holds, following block uses."""

    def __init__(self, blocks: dict, value: Any):
        self.blocks, self.value = blocks, value
        self.seen: dict[str, set[bool]] = {}  # block name -> the contexts it was used in (inside a repeat or not)
        self.marked = 0

    def layers(self, layers: Any, inside: bool) -> None:
        for layer in layers if isinstance(layers, list) else ():
            if isinstance(layer, dict):
                self.layer(layer, inside)

    def layer(self, layer: dict, inside: bool) -> None:
        if "repeat" in layer:
            if not inside:
                layer["checkpoint"] = self.value
                self.marked += 1
            if isinstance(layer.get("body"), str):
                self.block(layer["body"], True)
        elif "block" in layer:
            self.block(layer["block"], inside)
        for part in _inner_layers(layer):
            self.layers(part, inside or "repeat" in layer)

    def block(self, name: Any, inside: bool) -> None:
        if not isinstance(name, str) or name not in self.blocks:
            return  # the loader names an unknown block
        seen = self.seen.setdefault(name, set())
        if inside in seen:
            return
        seen.add(inside)
        self.layers(_block_layers(self.blocks[name]), inside)

    def holds_repeat(self, name: str, visited: frozenset = frozenset()) -> bool:
        """Whether block `name` holds a repeat, itself or in a block it uses."""
        if name in visited or name not in self.blocks:
            return False
        return _holds_repeat(_block_layers(self.blocks[name]), lambda b: self.holds_repeat(b, visited | {name}))


def _block_layers(spec: Any) -> Any:
    return spec.get("layers") if isinstance(spec, dict) else spec


def _holds_repeat(layers: Any, block_holds) -> bool:
    for layer in layers if isinstance(layers, list) else ():
        if not isinstance(layer, dict):
            continue
        if "repeat" in layer or (isinstance(layer.get("block"), str) and block_holds(layer["block"])):
            return True
        if any(_holds_repeat(part, block_holds) for part in _inner_layers(layer)):
            return True
    return False


__all__ = ["CHOICES", "checkpoint_doc", "parse_checkpoint"]
