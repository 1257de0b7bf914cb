"""YAML text -> plain Python data plus a map from YAML path to (line, column).

Only plain YAML is accepted: mappings, lists, strings, numbers, booleans and null; no tags
(`!!python/...`, `!!set`, custom `!tags`). Spec files are read by PyYAML's pure-Python parser
(its messages are the same everywhere) and composed here, iteratively, from its events, so
every bound is checked while the file is read, before any work grows with it:

* MAX_BYTES: the size of a spec file (checked before parsing);
* MAX_NODES: YAML nodes after alias expansion, so a "billion laughs" anchor bomb is an error
  at the alias that crosses the bound, not an exponential walk;
* MAX_DEPTH: nesting of mappings and lists, aliases expanded (no RecursionError anywhere later).

Exactly one YAML document per file. Duplicate mapping keys are errors (PyYAML silently keeps
the last); `<<` merge keys work as in PyYAML (the mapping's own keys override merged ones).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction

import yaml
from yaml.events import (
    AliasEvent,
    DocumentStartEvent,
    MappingEndEvent,
    MappingStartEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)

from costspec.core.errors import Location, SpecError
from costspec.core.expr import MAX_INT_DIGITS
from costspec.core.text import unsafe_chars

MAX_BYTES = 1_000_000  # size of a spec file; real specs are a few kB
MAX_NODES = 50_000  # YAML nodes (keys and values) after alias expansion
MAX_DEPTH = 64  # nesting of mappings / lists after alias expansion
_PLAIN_TAGS = {"tag:yaml.org,2002:" + t for t in ("map", "seq", "str", "int", "float", "bool", "null")}
_MERGE_TAG = "tag:yaml.org,2002:merge"
_TEXT_TAGS = {_MERGE_TAG, "tag:yaml.org,2002:value"}
_PLAIN = "mappings, lists, strings, numbers, true/false, null; no YAML tags"


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


def load_marked(text: str | bytes, file: str, kind: str = "spec") -> MarkedDoc:
    """Parse YAML text into data with marks; every failure is a SpecError naming file:line:col.
    `kind` names the file in messages (the same bounds hold for a GPU catalog or a calibration)."""
    text = _decode(text, file, kind)
    expected = "a YAML mapping with keys costspec, name, input, layers" if kind == "spec" else "a YAML mapping"
    if not text.strip():
        raise SpecError("file is empty", Location(file, 1, 1), expected)
    loader = None
    try:
        loader = yaml.SafeLoader(text)  # checks that every character is printable
        node = _Composer(loader, file, kind).compose()
    except yaml.reader.ReaderError as exc:
        raise _reader_error(exc, text, file) from None
    except yaml.MarkedYAMLError as exc:
        raise _syntax_error(exc, file, getattr(exc, "costspec_path", ()), text) from None
    except yaml.YAMLError as exc:  # not expected from the parser; one line all the same
        raise SpecError(f"YAML error: {' '.join(str(exc).split())}", Location(file, 1, 1)) from None
    except ValueError as exc:  # PyYAML's scanner: chr() of an escape beyond Unicode, e.g. "\U00110000"
        line = getattr(getattr(loader, "reader", None), "line", 0) if loader else 0
        raise SpecError(f"bad escape in a quoted string: {exc}", Location(file, line + 1, 1),
                        "escapes of valid Unicode code points (at most \\U0010FFFF)") from None
    except RecursionError:  # a safety net: the composer and the walker are bounded well below this
        raise SpecError("nesting too deep to read", Location(file, 1, 1),
                        f"mappings and lists nested at most {MAX_DEPTH} levels") from None
    finally:
        if loader is not None:
            loader.dispose()
    if node is None:
        raise SpecError("file holds only comments, no YAML content", Location(file, 1, 1), expected)
    doc = MarkedDoc(file, None)
    doc.data = _Walker(doc, loader).walk(node, (), 0)
    return doc


# ----------------------------------------------------------------------------------------------
# Text and parser errors
# ----------------------------------------------------------------------------------------------
def _decode(text: str | bytes, file: str, kind: str = "spec") -> str:
    size = len(text)
    if size > MAX_BYTES:
        unit = "bytes" if isinstance(text, bytes) else "characters"
        raise SpecError(f"file is {size:,} {unit}, over the limit for a {kind}", Location(file, 1, 1),
                        f"at most {MAX_BYTES:,} {unit}")
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            before = text[:exc.start].decode("utf-8")
            line, col = _line_col(before, len(before))
            raise SpecError(f"byte 0x{text[exc.start]:02x} is not valid UTF-8 (binary data or another encoding?)",
                            Location(file, line, col), "a UTF-8 text file") from None
    if text.startswith("\ufeff"):
        text = text[1:]  # a UTF-8 byte-order mark is harmless
    if "\x00" in text:
        line, col = _line_col(text, text.index("\x00"))
        raise SpecError("NUL byte in the file (binary data?)", Location(file, line, col), "a YAML text file")
    return text


def _line_col(text: str, offset: int) -> tuple[int, int]:
    """1-based line and column (in characters) of `offset` in `text`."""
    line = text.count("\n", 0, offset) + 1
    return line, offset - (text.rfind("\n", 0, offset) + 1) + 1


def _reader_error(exc: yaml.reader.ReaderError, text: str, file: str) -> SpecError:
    line, col = _line_col(text, exc.position)
    char = exc.character if isinstance(exc.character, int) else ord(exc.character[:1] or b"\0")
    return SpecError(f"non-printable character U+{char:04X} in the file (binary data?)", Location(file, line, col),
                     "printable YAML text")


# The parser's words for a line that does not sit where the block structure around it expects one.
_STRUCTURE = ("expected <block end>", "mapping values are not allowed", "did not find expected", "could not find "
              "expected ':'", "expected <document start>")


def _syntax_error(exc: yaml.MarkedYAMLError, file: str, path: tuple, text: str = "") -> SpecError:
    mark = exc.problem_mark or exc.context_mark
    line, col = (mark.line + 1, mark.column + 1) if mark else (1, 1)
    problem = " ".join((exc.problem or exc.context or "invalid YAML").split())
    message = f"YAML syntax error: {problem}"
    if exc.context and exc.problem and exc.context_mark and exc.context_mark is not mark:
        message += f" ({exc.context.strip()} at line {exc.context_mark.line + 1}, column {exc.context_mark.column + 1})"
    if indent := _bad_indentation(text, line, problem):
        message = f"bad indentation: {indent}; {message}"
    return SpecError(message, Location(file, line, col, format_path(path)))


def _bad_indentation(text: str, line: int, problem: str) -> str:
    """Where a structural syntax error sits on a line indented unlike the line before it: that line and
    both indents, as a person reading the file fixes it ('' when the indentation is not the cause)."""
    lines = text.splitlines()
    if not any(p in problem for p in _STRUCTURE) or not 1 <= line <= len(lines) or not lines[line - 1].strip():
        return ""
    here = lines[line - 1]
    before = next((x for x in reversed(lines[:line - 1]) if x.strip() and not x.lstrip().startswith("#")), None)
    width = len(here) - len(here.lstrip(" "))
    previous = len(before) - len(before.lstrip(" ")) if before is not None else 0
    if width == previous:
        return ""
    shown = here.strip() if len(here.strip()) <= 60 else here.strip()[:57] + "..."
    return (f"line {line} '{shown}' is indented {width} spaces, the line before it {previous} "
            "(items of one list or mapping line up)")


# ----------------------------------------------------------------------------------------------
# Composition: events -> nodes, iteratively, with bounds
# ----------------------------------------------------------------------------------------------
class _Frame:
    """A mapping or list being composed, and where it is."""

    __slots__ = ("node", "path", "key", "index", "size", "height")

    def __init__(self, node, path: tuple):
        self.node, self.path = node, path
        self.key = None  # mappings: the key node waiting for its value
        self.index = 0  # lists: the next item's index
        self.size, self.height = 1, 1  # nodes and levels below and including this one, aliases expanded


class _Composer:
    """PyYAML's composer, rewritten as a loop over parser events with the bounds checked as it goes."""

    def __init__(self, loader: yaml.SafeLoader, file: str, kind: str = "spec"):
        self.loader, self.file, self.kind = loader, file, kind
        self.anchors: dict[str, yaml.Node] = {}
        self.open: set[int] = set()  # ids of collections still being composed
        self.sizes: dict[int, tuple[int, int]] = {}  # id(node) -> (size, height), aliases expanded
        self.total = 0
        self.stack: list[_Frame] = []

    def compose(self) -> yaml.Node | None:
        """The root node of the only document, or None for a stream with no document."""
        loader = self.loader
        loader.get_event()  # StreamStart
        if loader.check_event(StreamEndEvent):
            return None
        loader.get_event()  # DocumentStart
        root = self._node()
        loader.get_event()  # DocumentEnd
        if loader.check_event(DocumentStartEvent):
            event = loader.peek_event()
            raise SpecError(f"a second YAML document starts here; a {self.kind} file holds one",
                            self._where(event.start_mark, ()),
                            "a single document: remove this '---' and what follows, or split the file")
        return root

    def _path(self) -> tuple:
        if not self.stack:
            return ()
        top = self.stack[-1]
        if isinstance(top.node, yaml.SequenceNode):
            return top.path + (top.index,)
        if top.key is not None and isinstance(top.key, yaml.ScalarNode):
            return top.path + (top.key.value,)
        return top.path

    def _where(self, mark, path: tuple) -> Location:
        shown = format_path(path) if len(path) <= 8 else (
            format_path(path[:4]) + "..." + format_path(path[-2:])[1:].lstrip(".") + f" ({len(path)} levels)")
        return Location(self.file, mark.line + 1, mark.column + 1, shown)

    def _node(self) -> yaml.Node:
        """Compose one node (and everything under it) from the events."""
        loader = self.loader
        try:
            while True:
                event = loader.get_event()
                if isinstance(event, (SequenceEndEvent, MappingEndEvent)):
                    frame = self.stack.pop()
                    frame.node.end_mark = event.end_mark
                    self.open.discard(id(frame.node))
                    self.sizes[id(frame.node)] = (frame.size, frame.height)
                    node, size, height = frame.node, frame.size, frame.height
                else:
                    node, size, height = self._start(event)
                    if node is None:
                        continue  # a collection was opened: its items come next
                if not self.stack:
                    return node
                self._attach(node, size, height)
        except yaml.YAMLError as exc:
            if not hasattr(exc, "costspec_path"):
                setattr(exc, "costspec_path", self._path())  # noqa: B010 - an attribute PyYAML's class lacks
            raise

    def _start(self, event) -> tuple:
        """A scalar or alias as (node, size, height); a collection is pushed, (None, 0, 0) returned."""
        path = self._path()
        if isinstance(event, AliasEvent):
            node = self.anchors.get(event.anchor)
            if node is None:
                raise SpecError(f"alias *{event.anchor} has no anchor &{event.anchor} before it",
                                self._where(event.start_mark, path), "an alias after its anchor")
            if id(node) in self.open:
                raise SpecError(f"alias *{event.anchor} is inside the value it refers to (a recursive structure)",
                                self._where(event.start_mark, path), "aliases to finished values")
            size, height = self.sizes.get(id(node), (1, 1))
            self._count(size, height, event.start_mark, path, f"alias *{event.anchor}")
            return node, size, height
        if isinstance(event, ScalarEvent):
            tag = event.tag if event.tag not in (None, "!") else self.loader.resolve(
                yaml.ScalarNode, event.value, event.implicit)
            node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
        elif isinstance(event, (SequenceStartEvent, MappingStartEvent)):
            kind = yaml.SequenceNode if isinstance(event, SequenceStartEvent) else yaml.MappingNode
            tag = event.tag if event.tag not in (None, "!") else self.loader.resolve(kind, None, event.implicit)
            node = kind(tag, [], event.start_mark, None, flow_style=event.flow_style)
        else:  # the parser guarantees node events here
            raise SpecError(f"unexpected YAML event {type(event).__name__}", self._where(event.start_mark, path))
        self._count(1, 1, event.start_mark, path, None)
        if event.anchor is not None:
            self.anchors[event.anchor] = node  # a later anchor of the same name wins, as in YAML 1.2
        if isinstance(node, yaml.ScalarNode):
            self.sizes[id(node)] = (1, 1)
            return node, 1, 1
        self.open.add(id(node))
        self.stack.append(_Frame(node, path))
        return None, 0, 0

    def _count(self, size: int, height: int, mark, path: tuple, alias: str | None) -> None:
        self.total += size
        if self.total > MAX_NODES:
            what = (f"{alias} expands to {size:,} YAML nodes and the {self.kind}" if alias and size > 1
                    else f"the {self.kind}")
            raise SpecError(f"{what} grows past {MAX_NODES:,} YAML nodes" + (" (an alias bomb?)" if alias else ""),
                            self._where(mark, path), f"at most {MAX_NODES:,} nodes, aliases expanded")
        if len(self.stack) + height > MAX_DEPTH:
            via = f" through {alias}" if alias else ""
            raise SpecError(f"mappings and lists nested more than {MAX_DEPTH} levels deep{via}",
                            self._where(mark, path), f"at most {MAX_DEPTH} levels of nesting")

    def _attach(self, node, size: int, height: int) -> None:
        top = self.stack[-1]
        top.size += size
        top.height = max(top.height, height + 1)
        if isinstance(top.node, yaml.SequenceNode):
            top.node.value.append(node)
            top.index += 1
        elif top.key is None:
            top.key = node
        else:
            top.node.value.append((top.key, node))
            top.key = None


# ----------------------------------------------------------------------------------------------
# Nodes -> plain data with marks
# ----------------------------------------------------------------------------------------------
class _Walker:
    def __init__(self, doc: MarkedDoc, loader: yaml.SafeLoader):
        self.doc = doc
        self.loader = loader
        self.count = 0
        self.own_keys: dict[int, set[int]] = {}  # id(mapping) -> ids of the key nodes written in it

    def where(self, node, path) -> Location:
        return Location(self.doc.file, node.start_mark.line + 1, node.start_mark.column + 1, format_path(path))

    def walk(self, node, path: tuple, depth: int):
        self.count += 1
        if self.count > MAX_NODES or depth > MAX_DEPTH:  # bounded by the composer already; kept as a guard
            raise SpecError("spec too large or too deeply nested", self.where(node, path),
                            f"at most {MAX_NODES:,} nodes and {MAX_DEPTH} levels")
        self.doc.marks.setdefault(path, (node.start_mark.line + 1, node.start_mark.column + 1))
        if isinstance(node, yaml.ScalarNode):
            return self.scalar(node, path)
        if node.tag not in _PLAIN_TAGS:
            raise SpecError(f"YAML tag {_short_tag(node.tag)} is not allowed", self.where(node, path), _PLAIN)
        if isinstance(node, yaml.MappingNode):
            return self.mapping(node, path, depth)
        return [self.walk(item, path + (i,), depth + 1) for i, item in enumerate(node.value)]

    def mapping(self, node, path, depth):
        if id(node) not in self.own_keys:
            merges = [k for k, _ in node.value if k.tag == _MERGE_TAG]
            if len(merges) > 1:  # PyYAML lets the later one win silently
                raise SpecError(f"{len(merges)} `<<` merge keys in one mapping (first at line "
                                f"{merges[0].start_mark.line + 1})", self.where(merges[1], path),
                                "one merge key; merge several mappings with <<: [*a, *b]")
            self.own_keys[id(node)] = {id(k) for k, _ in node.value if k.tag != _MERGE_TAG}
            try:
                self.loader.flatten_mapping(node)  # resolves `<<` merge keys like PyYAML does
            except yaml.MarkedYAMLError as exc:
                raise SpecError(f"bad merge key: {exc.problem}", self.where(node, path),
                                "<< followed by a mapping or a list of mappings") from None
        own = self.own_keys[id(node)]
        out: dict = {}
        first: dict[str, yaml.Node] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node, path) if isinstance(key_node, yaml.ScalarNode) else None
            if not isinstance(key, (str, int)) or isinstance(key, bool):
                raise SpecError(f"{_show_node(key_node)} is used as a mapping key", self.where(key_node, path),
                                "a name (a string key)")
            key = str(key)
            if key in first and id(key_node) in own and id(first[key]) in own:
                raise SpecError(f"duplicate key '{key}' (first at line {first[key].start_mark.line + 1})",
                                self.where(key_node, path + (key,)), "each key once per mapping")
            first.setdefault(key, key_node)
            self.doc.marks[path + (key,)] = (key_node.start_mark.line + 1, key_node.start_mark.column + 1)
            out[key] = self.walk(value_node, path + (key,), depth + 1)  # later wins: own keys over merged
        return out

    def check_text(self, node, path) -> None:
        """No control / reordering characters from YAML escapes (ESC, CR, BEL, U+202E...): names are
        printed to terminals, markdown and LaTeX; `doc` and `source` may hold tabs and line breaks."""
        prose = any(step in ("doc", "source") for step in path if isinstance(step, str))
        bad = unsafe_chars(node.value, "\t\n" if prose else "")
        if bad:
            raise SpecError(f"control character U+{ord(bad[0]):04X} in {_show_node(node)}", self.where(node, path),
                            "printable text (no escapes such as \\e, \\r, \\x07 or direction overrides)")

    def scalar(self, node, path):
        if not isinstance(node, yaml.ScalarNode):
            raise SpecError("expected a scalar", self.where(node, path))
        if node.tag in _TEXT_TAGS:
            return node.value  # a plain `<<` or `=` outside a key is just text
        self.check_text(node, path)
        if node.tag not in _PLAIN_TAGS:
            if node.tag == "tag:yaml.org,2002:timestamp" and not node.style:
                raise SpecError(f"{node.value} reads as a YAML date", self.where(node, path),
                                f"a string (quote it: '{node.value}') or a number")
            raise SpecError(f"YAML tag {_short_tag(node.tag)} is not allowed", self.where(node, path), _PLAIN)
        if node.tag == "tag:yaml.org,2002:int" and sum(c.isdigit() for c in node.value) > MAX_INT_DIGITS:
            raise SpecError(f"integer with {sum(c.isdigit() for c in node.value):,} digits", self.where(node, path),
                            f"a number of at most {MAX_INT_DIGITS} digits")
        try:
            value = self.loader.construct_object(node, deep=False)
        except (ValueError, OverflowError, IndexError, yaml.constructor.ConstructorError) as exc:
            # IndexError: PyYAML reads value[0] of an explicitly tagged empty scalar (`x: !!float`)
            problem = f"{_short_tag(node.tag)} of nothing" if not node.value else (
                getattr(exc, "problem", None) or str(exc))
            raise SpecError(f"bad YAML value {_show_node(node)}: {' '.join(problem.split())}",
                            self.where(node, path), "a number, string, boolean or null") from None
        if isinstance(value, float) and not math.isfinite(value):  # .inf / .nan: no size, cost or eps
            raise SpecError(f"{node.value} is not a finite number", self.where(node, path), "a finite number")
        if isinstance(value, float) and value.is_integer():
            exact = _written_integer(node.value)
            if exact is not None and exact != int(value):  # 12345678901234567.0 reads as ...568
                if len(str(abs(exact))) > 30:
                    raise SpecError(f"{node.value} is an integer of {len(str(abs(exact)))} digits, more than a float "
                                    "holds exactly", self.where(node, path), "an integer written without '.0'")
                raise SpecError(f"{node.value} is not exactly representable as a float (it would read as "
                                f"{int(value)})", self.where(node, path), f"the integer {exact}, written without '.0'")
        return value


def _written_integer(text: str) -> int | None:
    """The integer a YAML float literal denotes exactly ('1.5e3' -> 1500), or None if it is not one."""
    try:
        exact = Fraction(text.replace("_", ""))
    except (ValueError, ZeroDivisionError):
        return None
    return int(exact) if exact.denominator == 1 else None


def _short_tag(tag: str) -> str:
    """'tag:yaml.org,2002:python/name:os.system' -> '!!python/name:os.system'."""
    return "!!" + tag[len("tag:yaml.org,2002:"):] if tag.startswith("tag:yaml.org,2002:") else tag


def _show_node(node) -> str:
    if isinstance(node, yaml.ScalarNode):
        text = repr(node.value)
        return text if len(text) <= 40 else text[:37] + "..."
    return "a mapping" if isinstance(node, yaml.MappingNode) else "a list"
