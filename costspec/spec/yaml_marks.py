"""YAML text -> plain Python data plus a map from YAML path to (line, column).

Only the safe YAML subset is accepted (no `!!python/...` tags). Aliases are followed, but
the total number of nodes built is bounded, so a "billion laughs" anchor bomb is an error,
not an exponential walk. Duplicate mapping keys are errors (PyYAML silently keeps the last).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import yaml

from ..errors import Location, SpecError

MAX_NODES = 200_000  # nodes built after alias expansion
MAX_BYTES = 4_000_000  # size of a spec file
MAX_DEPTH = 200  # nesting of mappings/sequences
_PLAIN_TAGS = {"tag:yaml.org,2002:map", "tag:yaml.org,2002:seq"}


@dataclass
class MarkedDoc:
    """Parsed spec data with the source position of every value."""

    file: str
    data: object
    marks: dict[tuple, tuple[int, int]] = field(default_factory=dict)

    def locate(self, path: tuple) -> Location:
        """The location of the value at `path` (a tuple of keys / indices), nearest known line."""
        probe = tuple(path)
        while probe not in self.marks and probe:
            probe = probe[:-1]
        line, col = self.marks.get(probe, (None, None))
        return Location(self.file, line, col, format_path(path))


def format_path(path: tuple) -> str:
    """('layers', 3, 'mlp') -> '$.layers[3].mlp'."""
    out = "$"
    for key in path:
        out += f"[{key}]" if isinstance(key, int) else f".{key}"
    return out


def load_marked(text: str | bytes, file: str) -> MarkedDoc:
    """Parse YAML text into data with marks; every failure is a SpecError naming file:line:col."""
    if isinstance(text, bytes):
        if len(text) > MAX_BYTES:
            raise SpecError(f"file is {len(text)} bytes; the limit is {MAX_BYTES}", Location(file))
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise SpecError(f"file is not valid UTF-8 (byte {exc.start}: {text[exc.start:exc.start + 1]!r})",
                            Location(file), "a UTF-8 YAML text") from None
    if len(text) > MAX_BYTES:
        raise SpecError(f"file is {len(text)} characters; the limit is {MAX_BYTES}", Location(file))
    if "\x00" in text:
        line = text[: text.index("\x00")].count("\n") + 1
        raise SpecError("file contains a NUL byte: binary data, not YAML", Location(file, line), "a YAML text")
    loader = yaml.SafeLoader(text)
    try:
        node = loader.get_single_node()
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line, col = (mark.line + 1, mark.column + 1) if mark else (None, None)
        problem = exc.problem or exc.context or "invalid YAML"
        raise SpecError(f"YAML syntax error: {problem}", Location(file, line, col)) from None
    except yaml.YAMLError as exc:
        raise SpecError(f"YAML error: {exc}", Location(file)) from None
    finally:
        loader.dispose()
    if node is None:
        raise SpecError("file is empty", Location(file, 1, 1), "a YAML mapping with 'costspec', 'name', 'layers'")
    doc = MarkedDoc(file, None)
    doc.data = _Walker(doc, loader).walk(node, (), 0)
    return doc


class _Walker:
    def __init__(self, doc: MarkedDoc, loader: yaml.SafeLoader):
        self.doc = doc
        self.loader = loader
        self.count = 0

    def where(self, node, path) -> Location:
        return Location(self.doc.file, node.start_mark.line + 1, node.start_mark.column + 1, format_path(path))

    def walk(self, node, path: tuple, depth: int):
        self.count += 1
        if self.count > MAX_NODES:
            raise SpecError(f"spec expands to more than {MAX_NODES} YAML nodes (anchor/alias bomb?)",
                            self.where(node, path), "a spec of reasonable size; aliases are expanded")
        if depth > MAX_DEPTH:
            raise SpecError(f"nesting deeper than {MAX_DEPTH} levels", self.where(node, path))
        self.doc.marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, (yaml.MappingNode, yaml.SequenceNode)) and node.tag not in _PLAIN_TAGS:
            raise SpecError(f"YAML tag {node.tag!r} not allowed", self.where(node, path),
                            "plain YAML values (no !!python or custom tags)")
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path, depth)
        if isinstance(node, yaml.SequenceNode):
            return [self.walk(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]
        return self.scalar(node, path)

    def mapping(self, node, path, depth):
        try:
            self.loader.flatten_mapping(node)  # resolves `<<` merge keys like PyYAML does
        except yaml.MarkedYAMLError as exc:
            raise SpecError(f"bad merge key: {exc.problem}", self.where(node, path)) from None
        out: dict = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise SpecError("mapping keys must be plain names", self.where(key_node, path), "a string key")
            key = str(key)
            if key in out:
                raise SpecError(f"duplicate key '{key}'", self.where(key_node, path + (key,)),
                                "each key once per mapping")
            self.doc.marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = self.walk(value_node, path + (key,), depth + 1)
        return out

    def scalar(self, node, path):
        if not isinstance(node, yaml.ScalarNode):
            raise SpecError("expected a scalar", self.where(node, path))
        try:
            value = self.loader.construct_object(node, deep=False)
        except yaml.constructor.ConstructorError as exc:
            raise SpecError(f"YAML tag not allowed: {exc.problem}", self.where(node, path),
                            "plain YAML values (no !!python or custom tags)") from None
        except (ValueError, OverflowError) as exc:
            raise SpecError(f"bad YAML value: {exc}", self.where(node, path)) from None
        if not isinstance(value, (str, int, float, bool, type(None))):
            raise SpecError(f"a YAML {type(value).__name__} value is not allowed here", self.where(node, path),
                            "a number, string, boolean or null")
        return value
