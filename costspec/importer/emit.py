"""Write an imported spec as YAML *text*, laid out and commented as a person would write it.

Families hand over the bodies (blocks, ignore entries, layers) as YAML lines they write
themselves; this module writes the header, the dims (each with the config key it came from),
the precision and the input, quotes scalars only where YAML needs it, and indents the bodies.
"""
from __future__ import annotations

import json
import re
import textwrap
from dataclasses import dataclass, field

from costspec.core.text import for_terminal
from costspec.importer.starter import schema_line, schema_path

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_ .,/+*()'-]*")
_YAML_WORDS = {"true", "false", "yes", "no", "on", "off", "null", "none", "y", "n"}


def scalar(value: object) -> str:
    """A YAML scalar: ints as they are, strings plain when YAML reads them back as the same
    string, else double-quoted (JSON's quoting is valid YAML)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    text = str(value)
    plain = (_PLAIN.fullmatch(text) is not None and text.lower() not in _YAML_WORDS and ": " not in text
             and not text.endswith(" ") and " #" not in text and ", " not in text)
    return text if plain else json.dumps(text)


def comment(text: str) -> str:
    """An end-of-line comment; control characters escaped (a newline would end it: the rest live YAML)."""
    return f"  # {for_terminal(text)}" if text else ""


def wrap_comment(text: str, indent: str = "", width: int = 110) -> list[str]:
    """A long comment as `# ...` lines, control characters escaped."""
    return [f"{indent}# {line}" for line in textwrap.wrap(for_terminal(text), width - len(indent) - 2)]


@dataclass
class SpecText:
    """A spec under construction: call the parts in any order, then `render()`."""

    name: str
    doc: str
    source: str | list[str]
    header: list[str] = field(default_factory=list)  # comment lines printed after the schema line
    _dims: list[str] = field(default_factory=list)
    _precision: str = ""
    _input: str = ""
    _inputs: list[str] = field(default_factory=list)
    _blocks: list[str] = field(default_factory=list)
    _ignore: list[str] = field(default_factory=list)
    _layers: list[str] = field(default_factory=list)
    _notes: list[str] = field(default_factory=list)

    def note(self, text: str) -> SpecText:
        """A comment paragraph placed before `dims:` (modelling choices, what was left out)."""
        self._notes.extend(wrap_comment(text))
        return self

    def dim(self, name: str, value: int | str, doc: str, key: str | None = None) -> SpecText:
        """A dim; `key` (the config key the value came from) becomes its comment."""
        line = f"  {name}: {{value: {scalar(value)}, doc: {scalar(doc)}}}"
        self._dims.append(line + comment(key or ""))
        return self

    def derived(self, name: str, expr: str, doc: str, why: str = "") -> SpecText:
        """A dim defined by an expression of other dims, e.g. S: (img // patch)**2 + 1."""
        self._dims.append(f"  {name}: {{value: {json.dumps(expr)}, doc: {scalar(doc)}}}" + comment(why))
        return self

    def precision(self, dtype: str, why: str = "") -> SpecText:
        self._precision = f"precision: {{dtype: {dtype}}}" + comment(why)
        return self

    def input(self, shape: list[str], why: str = "") -> SpecText:
        self._input = f"input: [{', '.join(shape)}]" + comment(why)
        return self

    def further_input(self, name: str, shape: list[str], why: str = "") -> SpecText:
        """A further model input (`inputs:`), e.g. an encoder-decoder's decoder token ids."""
        self._inputs.append(f"  {name}: [{', '.join(shape)}]" + comment(why))
        return self

    def block(self, name: str, yaml_lines: str) -> SpecText:
        """A named block under `blocks:`; `yaml_lines` is its body (a list or a mapping), unindented."""
        self._blocks.append(f"  {name}:")
        self._blocks.extend(_indent(yaml_lines, "    "))
        return self

    def ignore(self, yaml_lines: str) -> SpecText:
        """Entries of `ignore:` (a YAML list, unindented)."""
        self._ignore.extend(_indent(yaml_lines, "  "))
        return self

    def layers(self, yaml_lines: str) -> SpecText:
        """The top-level `layers:` list (unindented)."""
        self._layers.extend(_indent(yaml_lines, "  "))
        return self

    def render(self) -> str:
        """The spec text; its first line references the shipped schema (the importer rewrites it
        relative to the file it writes)."""
        out = [schema_line(schema_path().as_uri()), *[for_terminal(h) for h in self.header], "costspec: 1",
               f"name: {scalar(self.name)}"]
        out.append("doc: >-")
        out.extend(textwrap.wrap(self.doc, 106, initial_indent="  ", subsequent_indent="  "))
        sources = [self.source] if isinstance(self.source, str) else self.source
        out.append("source:")
        out.extend(f"  - {json.dumps(s)}" for s in sources)
        out.extend(self._notes)
        out.append("dims:")
        out.extend(self._dims)
        out.append(self._precision or "precision: {dtype: fp32}")
        out.append(self._input)
        if self._inputs:
            out.append("inputs:")
            out.extend(self._inputs)
        if self._blocks:
            out.append("blocks:")
            out.extend(self._blocks)
        if self._ignore:
            out.append("ignore:")
            out.extend(self._ignore)
        out.append("layers:")
        out.extend(self._layers)
        return "\n".join(out) + "\n"


def _indent(text: str, prefix: str) -> list[str]:
    return [prefix + line if line.strip() else "" for line in textwrap.dedent(text).strip("\n").splitlines()]
